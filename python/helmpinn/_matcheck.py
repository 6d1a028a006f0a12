"""A structural check of a MATLAB v5 ``.mat`` file before ``scipy.io.loadmat`` reads it.

SciPy's compiled v5 reader looks a data element's type up in a fixed table without a bounds
check: a file with one flipped byte in a type field (say 9, miDOUBLE, become 16649) crashes the
interpreter (a segmentation fault or bus error) instead of raising. :func:`check_mat5` walks the
file's element tree first, as the format lays it out (each element a tag, type and byte count,
or a 4-byte "small" tag with its data, then its data padded to 8 bytes; a matrix, type 14, holds
elements; a compressed element, type 15, holds zlib-compressed elements), and refuses an
unknown type, an element that overruns its matrix or the file, or a stream that ends inside an
element, with a ValueError saying what and where. Compressed data is inflated in bounded chunks
and dropped (the walk holds at most :data:`CHUNK` bytes of it at a time); what loadmat then
allocates is its own.
"""
from __future__ import annotations

import struct
import zlib
from typing import BinaryIO

#: The data types of the v5 format (miINT8 .. miUTF32; 8, 10 and 11 are reserved).
KNOWN_TYPES = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 12, 13, 14, 15, 16, 17, 18})
MATRIX, COMPRESSED = 14, 15
#: Bytes of compressed data inflated at a time.
CHUNK = 1 << 20
#: Matrices nested deeper than this (cells of cells ...) are refused.
MAX_DEPTH = 64


class _Inflated:
    """``read``/``skip`` over the zlib stream in the next ``size`` bytes of ``raw``, inflated
    :data:`CHUNK` bytes at a time."""

    def __init__(self, raw: "_Raw", size: int):
        self.raw, self.left, self.z, self.buf = raw, size, zlib.decompressobj(), b""

    def _more(self, want: int) -> bool:
        while len(self.buf) < want:
            if self.z.eof:   # the zlib stream's end (bytes after it are skipped, as loadmat does)
                return False
            tail = self.z.unconsumed_tail
            if not tail:
                if not self.left:
                    return False
                tail = self.raw.read(min(CHUNK, self.left))
                if not tail:
                    raise ValueError("the file ends inside a compressed element")
                self.left -= len(tail)
            try:
                self.buf += self.z.decompress(tail, CHUNK)
            except zlib.error as exc:
                raise ValueError(f"a compressed element does not inflate ({exc})") from None
        return True

    def read(self, n: int) -> bytes:
        self._more(n)
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def skip(self, n: int) -> bool:
        while n:
            step = min(n, CHUNK)
            if not self._more(step):
                return False
            self.buf = self.buf[step:]
            n -= step
        return True

    def at_end(self) -> bool:
        return not self._more(1)


class _Raw:
    """``read``/``skip`` over the file itself."""

    def __init__(self, fh: BinaryIO, size: int):
        self.fh, self.left = fh, size

    def read(self, n: int) -> bytes:
        out = self.fh.read(min(n, self.left))
        self.left -= len(out)
        return out

    def skip(self, n: int) -> bool:
        if n > self.left:
            return False
        self.fh.seek(n, 1)
        self.left -= n
        return True

    def at_end(self) -> bool:
        return self.left == 0


#: Numeric data types (what loadmat reads an array's values, a sparse matrix's indices from).
NUMERIC = frozenset({1, 2, 3, 4, 5, 6, 7, 9, 12, 13})
TEXT = NUMERIC | {16, 17, 18}
#: Per array class (the array flags' low byte) how many values elements follow the name, and of
#: which types: char (4) one, sparse (5) ir, jc and the values, numeric (6 .. 15) the values;
#: each one more when the complex flag is set (sparse and numeric).
VALUE_ELEMENTS = {4: (1, TEXT), 5: (3, NUMERIC), **{c: (1, NUMERIC) for c in range(6, 16)}}


def _element(stream, budget: int | None, order: str, depth: int, where: str) -> tuple[int, int, bytes]:
    """Walk one element of ``stream`` (at most ``budget`` bytes, None: the rest of the stream):
    its size in bytes (padding included), type and first (up to 8) data bytes."""
    tag = stream.read(8)
    if len(tag) < 8:
        raise ValueError(f"the file ends inside an element's tag ({where})")
    kind, size = struct.unpack(order + "II", tag)
    if kind >> 16:   # a small element: type and size in 4 bytes, up to 4 data bytes after them
        kind, size = kind & 0xFFFF, kind >> 16
        if kind not in KNOWN_TYPES or kind in (MATRIX, COMPRESSED) or size > 4:
            raise ValueError(f"a small element of type {kind} and {size} bytes ({where}) is not valid")
        return 8, kind, tag[4:4 + size]
    if kind not in KNOWN_TYPES:
        raise ValueError(f"an element has type {kind}, not a MATLAB data type ({where})")
    padded = size if kind in (MATRIX, COMPRESSED) else size + (-size % 8)
    if budget is not None and 8 + padded > budget:
        raise ValueError(f"an element of {size:,} bytes ({where}) overruns the matrix that holds it")
    if kind == COMPRESSED:
        if depth:
            raise ValueError(f"a compressed element inside a matrix ({where})")
        inner = _Inflated(stream, size)
        while not inner.at_end():
            _element(inner, None, order, 1, where + ", compressed")
        if not stream.skip(inner.left):
            raise ValueError(f"the file ends inside a compressed element of {size:,} bytes ({where})")
        return 8 + size, kind, b""
    if kind == MATRIX:
        _matrix(stream, size, order, depth, where + " > matrix")
        return 8 + size, kind, b""
    head = stream.read(min(8, padded))
    if len(head) < min(8, padded) or not stream.skip(padded - len(head)):
        raise ValueError(f"the file ends inside an element of {size:,} bytes ({where})")
    return 8 + padded, kind, head[:size]


def _matrix(stream, size: int, order: str, depth: int, where: str) -> None:
    """Walk a matrix's ``size`` bytes of elements; its values elements must be there, of numeric
    types (:data:`VALUE_ELEMENTS`): loadmat reads them past the matrix's end otherwise, and
    crashes on another type."""
    if depth > MAX_DEPTH:
        raise ValueError(f"matrices nested more than {MAX_DEPTH} deep ({where})")
    parts, used = [], 0
    while used < size:
        n, kind, head = _element(stream, size - used, order, depth + 1, where)
        parts.append((kind, head))
        used += n
    if not size:
        return   # an empty matrix (a cell's empty entry)
    if len(parts) < 3 or parts[0][0] != 6 or len(parts[0][1]) < 4:
        raise ValueError(f"a matrix without its array flags, dimensions and name ({where})")
    flags = struct.unpack(order + "I", parts[0][1][:4])[0]
    count, types = VALUE_ELEMENTS.get(flags & 0xFF, (0, NUMERIC))
    count += bool(flags & 0x800) and flags & 0xFF != 4
    values = [kind for kind, _ in parts[3:3 + count]]
    if len(values) < count or any(kind not in types for kind in values):
        raise ValueError(f"a matrix of class {flags & 0xFF}{' (complex)' if flags & 0x800 else ''} lacks "
                         f"its {count} values element(s) of a numeric type ({where})")


def check_mat5(fh: BinaryIO, size: int) -> None:
    """Walk the v5 ``.mat`` file ``fh`` (``size`` bytes, at its start; a file of another version
    is left to loadmat) and raise ValueError where its structure is broken (module docstring);
    ``fh`` is back at its start afterwards."""
    head = fh.read(128)
    try:
        if len(head) < 128 or 0 in head[:4] or head[124:126] not in (b"\x00\x01", b"\x01\x00"):
            return   # v4, v7.3 or not a .mat file at all: loadmat says which
        order = "<" if head[126:128] == b"IM" else ">"
        stream, count = _Raw(fh, size - 128), 0
        while not stream.at_end():
            count += 1
            _element(stream, None, order, 0, f"variable {count}")
    finally:
        fh.seek(0)
