"""Files written whole or not at all, the one way helmpinn writes a file it produces.

:func:`write_atomic` writes to a new temporary file in the target's folder,
``.tmp-<name>-<12 hex digits><extension>`` (:func:`temp_path`; the names
:mod:`helmpinn.runfiles` recognises as its own leftovers), flushes it to disk and renames it over
the target: a reader sees the old file or the new one, never a part. On any error (a full disk,
Ctrl-C) the temporary file is removed and the target left as it was. The file is created with
mode 0o666 less the umask, as any new file (``tempfile.mkstemp`` would make it 0600, and the
rename keeps that).
"""
from __future__ import annotations

import os
import secrets
from typing import Any, Callable

__all__ = ["TEMP_PREFIX", "temp_path", "write_atomic"]

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
