"""Files written whole or not at all, the one way helmpinn writes a file it produces.

:func:`write_atomic` writes to a new temporary file in the target's folder,
``.tmp-<name>-<12 hex digits><extension>`` (:func:`temp_path`; the names
:mod:`helmpinn.runfiles` recognises as its own leftovers), flushes it to disk and renames it over
the target: a reader sees the old file or the new one, never a part. On any error (a full disk,
Ctrl-C) the temporary file is removed and the target left as it was. The file is created with
mode 0o666 less the umask, as any new file (``tempfile.mkstemp`` would make it 0600, and the
rename keeps that).

:func:`read_npz` is the one way an ``.npz`` archive it wrote is read back (a model, a decomposed
model, a survey): eagerly, a regular file only, any fault a ValueError naming the file.
"""
from __future__ import annotations

import os
import secrets
import stat
import zipfile
import zlib
from typing import Any, Callable

import numpy as np

__all__ = ["TEMP_PREFIX", "temp_path", "write_atomic", "read_npz"]

#: The start of every temporary file's name.
TEMP_PREFIX = ".tmp-"


def temp_path(folder: str, name: str) -> str:
    """A fresh temporary path in ``folder`` for a new ``name`` (same extension)."""
    return os.path.join(folder, f"{TEMP_PREFIX}{name}-{secrets.token_hex(6)}{os.path.splitext(name)[1]}")


def write_atomic(path: str | os.PathLike, write: Callable[[Any], None]) -> str:
    """Calls ``write(binary file)`` on a new temporary file beside ``path``, then renames it
    over ``path``; returns ``path``."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0) | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = temp_path(folder, os.path.basename(path))
        try:
            fd = os.open(tmp, flags, 0o666)
            break
        except FileExistsError:  # pragma: no cover - 48 random bits collided
            continue
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


_NPY_MAGIC = b"\x93NUMPY"


def read_npz(path: str, what: str = "helmpinn model file") -> dict[str, np.ndarray]:
    """Every array of the .npz at ``path``, read eagerly, so that a truncated or corrupted file
    (a bad zip directory, a CRC mismatch, a short member, a mangled header) fails here with the
    path named. Only a regular file is read (opened without blocking, then checked, so that a
    FIFO or a device under the name neither hangs nor is read without end), and only a zip
    archive (anything else is named as what it is, not handed to NumPy's pickle advice).
    ``what``: the kind of file the messages say was expected."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError as exc:
        raise ValueError(f"{path}: no such file") from exc
    except OSError as exc:
        raise ValueError(f"{path}: cannot be read ({exc.strerror or exc})") from exc
    # Our own file object: np.load leaks the one it opens when the zip directory is bad.
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{path}: not a regular file (a directory, FIFO or device); "
                             f"not a {what}")
        head = fh.read(len(_NPY_MAGIC))
        fh.seek(0)
        if head == _NPY_MAGIC:
            raise ValueError(f"{path}: a single .npy array, not an .npz archive; not a {what}")
        if not head.startswith(b"PK"):
            found = "it is empty" if not head else f"it starts with {head!r}"
            raise ValueError(f"{path}: not a {what}: not an .npz (zip) archive ({found}); "
                             f"it may be truncated or corrupted")
        try:
            npz = np.load(fh, allow_pickle=False)
            if not isinstance(npz, np.lib.npyio.NpzFile):
                raise ValueError("a single .npy array, not an .npz archive")
            with npz:
                return {key: npz[key] for key in npz.files}
        except (OSError, EOFError, ValueError, NotImplementedError, zipfile.BadZipFile, zlib.error) as exc:
            why = (f"{type(exc).__name__}: {exc}" if "pickle" not in str(exc)
                   else f"it holds an object (pickled) array, which a {what} never does")
            raise ValueError(f"{path}: not a readable {what}; it may be truncated or "
                             f"corrupted ({why})") from exc
