"""The mode rows' term of :class:`~helmpinn.optim.gauss_newton.MatrixFreeGN`'s preconditioner.

Mode rows add ``UUᵀ`` to ``JᵀJ`` (``U = JᵀF`` [P, 2q], each column one mode row's gradient), and
the preconditioner M of the point rows' system takes it in by Woodbury's identity:

    (M⁻¹ + UUᵀ)⁻¹ v = M v − W (I + UᵀW)⁻¹ Wᵀ v,     W = M U.

A mode row reads the points of a few subdomains (the radiation rows: one window each; Green's
and the resonance rows: all of them, but few columns), so U is dense only on each parameter
block's few columns, and so is W = M U but for the coarse correction's rows (the output
layers'): :class:`BlockColumns` holds such a matrix as its dense pieces and does its products
piece by piece. On the square inclusion of docs/benchmarks.md ("Media with jumps": 121
subdomains, P = 139,634, 2q = 576, U 13 % nonzero) the two products an application takes read
the pieces instead of the whole [P, 2q] array (docs/benchmarks-archive.md, "The Woodbury term by
blocks").
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from numpy.typing import NDArray

__all__ = ["BlockColumns", "woodbury"]


class BlockColumns:
    """A [P, k] matrix whose nonzeros lie in dense pieces: ``blocks``, a list of ``(start, cols,
    B)`` with B [n, c] at rows ``start:start + n`` and columns ``cols`` [c] (the blocks' row ranges
    disjoint, each block's columns distinct), and optionally ``rows``, ``(at, R)`` with R [m, k]
    at the rows ``at`` [m] (distinct; they may fall inside blocks: the two add). Over several ranks
    each rank holds the pieces of its own rows; the products here are that rank's part."""

    def __init__(self, shape: tuple[int, int], blocks: list[tuple[int, NDArray, NDArray]],
                 rows: tuple[NDArray, NDArray] | None = None):
        self.shape = (int(shape[0]), int(shape[1]))
        self.blocks = [(int(s), np.asarray(c, np.intp), np.asarray(B)) for s, c, B in blocks if B.size]
        for s, c, B in self.blocks:
            if B.ndim != 2 or B.shape[1] != len(c) or s < 0 or s + B.shape[0] > self.shape[0]:
                raise ValueError(f"BlockColumns: a block of shape {B.shape} at row {s} with {len(c)} columns "
                                 f"does not fit a {self.shape} matrix")
        self.rows = None if rows is None else (np.asarray(rows[0], np.intp), np.asarray(rows[1]))

    def matvec(self, x: NDArray) -> NDArray:
        """``A x`` [P] for x [k] (float64)."""
        out = np.zeros(self.shape[0])
        for s, c, B in self.blocks:
            out[s:s + len(B)] = B @ x[c].astype(B.dtype, copy=False)
        if self.rows is not None:
            at, R = self.rows
            out[at] += R @ x.astype(R.dtype, copy=False)
        return out

    def rmatvec(self, v: NDArray) -> NDArray:
        """``Aᵀ v`` [k] for v [P] (this rank's part: its own rows; float64)."""
        out = np.zeros(self.shape[1])
        for s, c, B in self.blocks:
            out[c] += B.T @ v[s:s + len(B)].astype(B.dtype, copy=False)
        if self.rows is not None:
            at, R = self.rows
            out += R.T @ v[at].astype(R.dtype, copy=False)
        return out

    def take(self, at: NDArray) -> NDArray:
        """The rows ``at`` of the matrix, dense [len(at), k] (its blocks only)."""
        at = np.asarray(at, np.intp)
        out = np.zeros((len(at), self.shape[1]))
        for s, c, B in self.blocks:
            inside = np.flatnonzero((at >= s) & (at < s + len(B)))
            if len(inside):
                out[np.ix_(inside, c)] = B[at[inside] - s]
        return out

    def gram(self, other: BlockColumns) -> NDArray:
        """``Aᵀ B`` [k, k'] for B = ``other`` with the same blocks' rows and columns (this rank's
        part), A without dense rows: each block's product where its columns meet, plus A's rows
        ``at`` against B's rows."""
        if self.rows is not None or len(self.blocks) != len(other.blocks):
            raise ValueError("BlockColumns.gram: the two must have the same blocks, and the first no dense rows")
        out = np.zeros((self.shape[1], other.shape[1]))
        for (s, c, A), (t, d, B) in zip(self.blocks, other.blocks):
            if s != t or A.shape[0] != B.shape[0] or not np.array_equal(c, d):
                raise ValueError("BlockColumns.gram: the two must have the same blocks")
            out[np.ix_(c, c)] += A.T @ B
        if other.rows is not None:
            at, R = other.rows
            out += self.take(at).T @ R
        return out

    def toarray(self) -> NDArray:
        """The whole matrix, dense [P, k] (float64)."""
        out = np.zeros(self.shape)
        for s, c, B in self.blocks:
            out[s:s + len(B), c] = B
        if self.rows is not None:
            at, R = self.rows
            out[at] += R
        return out


def woodbury(M: Callable[[NDArray], NDArray], U: BlockColumns, W: BlockColumns,
             sum_ranks: Callable[[NDArray], NDArray]) -> Callable[[NDArray], NDArray]:
    """``v ↦ (M⁻¹ + UUᵀ)⁻¹ v = M v − W (I + UᵀW)⁻¹ Wᵀ v`` given ``W = M U`` (M symmetric positive
    definite): the preconditioner M with the mode rows' term added exactly. ``sum_ranks`` adds
    the ranks' parts of a small array (the same sum on every rank): one for ``UᵀW`` here, one of
    2q numbers per application."""
    from scipy import linalg

    S = np.eye(U.shape[1]) + sum_ranks(U.gram(W))
    factor = linalg.cho_factor((S + S.T) / 2)

    def low_rank(v: NDArray) -> NDArray:
        return M(v) - W.matvec(linalg.cho_solve(factor, sum_ranks(W.rmatvec(v))))
    return low_rank
