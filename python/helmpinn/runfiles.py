"""The output folder of ``helmpinn train``: one run at a time, nothing lost, only helmpinn's
files touched.

The rules, each a small function or a method of :class:`RunFolder`:

- **One run per folder.** :meth:`RunFolder.acquire` takes an advisory lock (``fcntl.flock``
  on ``OUT/.helmpinn.lock``) for the whole run; a second run into the same folder is refused
  with :class:`OutputError` naming the holder's process id, before it touches anything. The
  lock file stays (removing it would race with the next run); the lock goes with the process,
  however it ends. (Advisory: a program that does not take it is not stopped; on a network
  file system ``flock`` may be local to one machine.)
- **Only helmpinn's files.** ``OUT/.helmpinn-manifest.json`` records every file helmpinn wrote
  there (name, size, modification time in ns). A file is helmpinn's when its size and time
  still match the record, or while it is *claimed* (:meth:`RunFolder.claim`: a run writes it
  from time to time, as the checkpoint ``model.npz``). A file under one of helmpinn's names
  that is not helmpinn's (a user's own ``metrics.json``, one changed since, a directory, a
  symlink, a FIFO) is never replaced or removed: :meth:`RunFolder.check_outputs` refuses the
  run instead, naming the file. Temporary files are removed only when they carry the exact
  names helmpinn gives them (``.tmp-<output name>-<12 hex digits>...``), so a user's
  ``.tmp-notes.npz`` stays.
- **Nothing moved aside before something better exists.** Every file is written to a
  temporary file in OUT and renamed over the old one (:meth:`RunFolder.write`,
  :meth:`RunFolder.replace`); old files are removed (:meth:`RunFolder.remove`) only after the
  new run's model exists.
- **Memory before it is used**: :mod:`helmpinn.memory` (one estimate per kind of run, one
  limit, one error). ``MemoryBudgetError``, ``available_memory``, ``training_memory``,
  ``workspace_bytes``, ``check_memory``, ``format_bytes`` and ``MEMORY_FRACTION`` are still
  importable from here: they are :mod:`helmpinn.memory`'s.
"""
from __future__ import annotations

import errno
import json
import os
import re
import secrets
import shutil
import stat
from typing import Any, Iterable

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

from ._files import temp_path, write_atomic
# The memory estimates live in helmpinn.memory; these names stay importable from here.
from ._budget import (MEMORY_FRACTION, MemoryBudgetError, available_memory, check_memory, format_bytes,
                     training_memory, workspace_bytes)

__all__ = ["RunFolder", "OutputError", "MemoryBudgetError", "read_regular", "available_memory",
           "training_memory", "workspace_bytes", "check_memory", "format_bytes",
           "LOCK_NAME", "MANIFEST_NAME", "MEMORY_FRACTION"]

LOCK_NAME = ".helmpinn.lock"
MANIFEST_NAME = ".helmpinn-manifest.json"
_MANIFEST_MAX_BYTES = 1 << 20
_FIGURE_DIR = ".tmp-figures-"
#: Names of what helmpinn leaves half-written when killed: Model.save's and write()'s temporary
#: files, the figures' temporary folder, _prepare_out's probe.
_TEMP = re.compile(r"\.tmp-(?P<name>[^/]+)-[0-9a-f]{12}(\.npz|\.json|\.png)?")
_PROBE = re.compile(r"\.helmpinn-probe-[A-Za-z0-9_]{8}")


class OutputError(Exception):
    """The output folder cannot be used as asked (in use, a file helmpinn did not write, ...)."""


def read_regular(path: str, max_bytes: int) -> bytes:
    """The contents of ``path`` if it is a regular file of at most ``max_bytes`` bytes (a
    symlink to one counts); raises OSError otherwise, without blocking on a FIFO or reading a
    device without end. Opened with O_NONBLOCK, then checked with fstat, so a file swapped
    between a check and the open is caught too."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file", path)
        if st.st_size > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {format_bytes(max_bytes)}", path)
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(max_bytes + 1)
        if len(data) > max_bytes:  # grew while read
            raise OSError(errno.EFBIG, f"larger than {format_bytes(max_bytes)}", path)
        return data
    finally:
        os.close(fd)


class RunFolder:
    """An output folder held by this process for one run: the lock, the manifest of the files
    helmpinn wrote there, and safe writes and removals. Use :meth:`acquire`; :meth:`release`
    (or the end of a ``with`` block, or of the process) lets the next run in.

    ``flag`` is the option that named the folder (``--out`` or ``--resume``), for messages.
    """

    def __init__(self, path: str, fd: int | None, flag: str = "--out"):
        self.path, self._fd, self.flag = path, fd, flag
        self._files: dict[str, dict[str, Any]] = self._read_manifest()

    # -- the lock ----------------------------------------------------------------------------
    @classmethod
    def acquire(cls, path: str, flag: str = "--out") -> "RunFolder":
        """Lock the existing folder ``path`` for this process; OutputError if another run holds it."""
        lock = os.path.join(path, LOCK_NAME)
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
                         | getattr(os, "O_NOFOLLOW", 0) | os.O_NONBLOCK, 0o666)
        except OSError as exc:
            raise OutputError(f"{flag} {path!r}: cannot create the lock file {LOCK_NAME} "
                              f"({exc.strerror or exc})") from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise OutputError(f"{flag} {path!r}: {LOCK_NAME} there is not a regular file; remove it")
            if fcntl is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError as exc:
                    if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                        raise OutputError(f"{flag} {path!r}: cannot lock {LOCK_NAME} "
                                          f"({exc.strerror or exc})") from None
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
                    raise OutputError(f"{flag} {path!r} is in use by another helmpinn run (pid {holder}); "
                                      f"wait for it to end, or choose another folder") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            return cls(path, fd, flag)
        except BaseException:
            os.close(fd)
            raise

    def release(self) -> None:
        """Let the next run in (closing the lock file releases the lock)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunFolder":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()

    # -- the manifest -------------------------------------------------------------------------
    def _read_manifest(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(read_regular(os.path.join(self.path, MANIFEST_NAME), _MANIFEST_MAX_BYTES))
            files = data["files"]
            return {str(k): dict(v) for k, v in files.items() if isinstance(v, dict)}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}  # none, or unreadable: then no file counts as helmpinn's (the safe side)

    def _save_manifest(self) -> None:
        text = json.dumps({"format": 1, "written_by": "helmpinn train", "files": self._files}, indent=1)
        self._write_file(MANIFEST_NAME, text.encode())

    def _stat(self, name: str) -> os.stat_result | None:
        try:
            return os.lstat(os.path.join(self.path, name))
        except FileNotFoundError:
            return None

    def owns(self, name: str) -> bool:
        """Whether ``name`` in the folder is a regular file helmpinn wrote (as the manifest
        records it, or claimed by a run)."""
        st, entry = self._stat(name), self._files.get(name)
        if st is None or entry is None or not stat.S_ISREG(st.st_mode):
            return False
        return bool(entry.get("claimed")) or (entry.get("size") == st.st_size
                                               and entry.get("mtime_ns") == st.st_mtime_ns)

    def check_outputs(self, names: Iterable[str], adopt: Iterable[str] = ()) -> None:
        """Refuse (OutputError) when one of ``names`` exists in the folder and is not a file
        helmpinn may replace: a directory or other non-regular file, or a file helmpinn did not
        write. ``adopt``: names known to be helmpinn's although the manifest does not say so
        (the checkpoint ``--resume`` has just read); they are recorded."""
        adopt = set(adopt)
        for name in names:
            st = self._stat(name)
            if st is None:
                continue
            where = f"{self.flag} {self.path!r}: {name} there"
            if stat.S_ISDIR(st.st_mode):
                raise OutputError(f"{where} is a directory, where helmpinn writes a file; move it away "
                                  f"or choose another folder")
            if not stat.S_ISREG(st.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                raise OutputError(f"{where} is {kind}, which helmpinn does not replace; move it away "
                                  f"or choose another folder")
            if name in adopt:
                self._files[name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
                continue
            if not self.owns(name):
                why = ("or was changed since: no matching record in " if self._files else
                       "or by a helmpinn older than its record of them: there is no ")
                raise OutputError(f"{where} was not written by helmpinn ({why}{MANIFEST_NAME}); helmpinn "
                                  f"does not replace it: move it away or choose another folder")

    def claim(self, name: str) -> None:
        """Record that this run writes ``name`` from time to time (a checkpoint), so that it
        stays helmpinn's whatever the run is stopped by."""
        self._files[name] = {**self._files.get(name, {}), "claimed": True}
        self._save_manifest()

    def record(self, *names: str) -> None:
        """Record ``names`` as they are now (a name no longer there is dropped)."""
        for name in names:
            st = self._stat(name)
            if st is not None and stat.S_ISREG(st.st_mode):
                self._files[name] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
            else:
                self._files.pop(name, None)
        self._save_manifest()

    # -- writing and removing ------------------------------------------------------------------
    def signature(self, name: str) -> tuple[int, int, int] | None:
        """(inode, size, mtime) of ``name``, None when absent: tells whether it was replaced."""
        st = self._stat(name)
        return None if st is None else (st.st_ino, st.st_size, st.st_mtime_ns)

    def temp_path(self, name: str) -> str:
        """A fresh temporary path in the folder for a new ``name`` (same extension)."""
        return temp_path(self.path, name)

    def _write_file(self, name: str, data: bytes) -> None:
        write_atomic(os.path.join(self.path, name), lambda fh: fh.write(data))

    def write(self, name: str, data: bytes) -> str:
        """Write ``data`` as ``name`` atomically (a temporary file, then a rename) and record
        it; returns the path."""
        self._write_file(name, data)
        self.record(name)
        return os.path.join(self.path, name)

    def figure_dir(self) -> str:
        """A new temporary folder in the output folder for figures (then :meth:`replace`)."""
        path = os.path.join(self.path, f"{_FIGURE_DIR}{secrets.token_hex(6)}")
        os.mkdir(path)
        return path

    def replace(self, name: str, src: str) -> str:
        """Rename the new file ``src`` (in the folder) over ``name``, and record it."""
        os.replace(src, os.path.join(self.path, name))
        self.record(name)
        return os.path.join(self.path, name)

    def remove(self, names: Iterable[str]) -> list[str]:
        """Remove those of ``names`` that are helmpinn's; returns the removed ones."""
        removed = [n for n in names if self.owns(n)]
        for name in removed:
            _unlink(os.path.join(self.path, name))
        if removed:
            self.record(*removed)
        return removed

    def remove_stale_temps(self, names: Iterable[str]) -> list[str]:
        """Remove what an earlier run killed while writing left behind: temporary files named
        after one of ``names`` (or the manifest), figure folders, probes. Nothing else."""
        known = set(names) | {MANIFEST_NAME}
        removed = []
        for entry in os.listdir(self.path):
            path = os.path.join(self.path, entry)
            m = _TEMP.fullmatch(entry)
            if entry.startswith(_FIGURE_DIR) and _TEMP.fullmatch(entry) and os.path.isdir(path) \
                    and not os.path.islink(path):
                for f in os.listdir(path):
                    if f.endswith(".png"):
                        _unlink(os.path.join(path, f))
                try:
                    os.rmdir(path)
                    removed.append(entry)
                except OSError:
                    pass  # something else is in it: not ours to remove
            elif (m and m.group("name") in known) or _PROBE.fullmatch(entry):
                if os.path.isfile(path) and not os.path.islink(path):
                    _unlink(path)
                    removed.append(entry)
        return removed


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def remove_tree(path: str) -> None:
    """Remove a temporary folder this run made (figures that were never moved into place)."""
    shutil.rmtree(path, ignore_errors=True)
