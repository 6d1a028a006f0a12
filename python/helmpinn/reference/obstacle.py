""":func:`~helmpinn.reference.fd.fd_solve` on a box with an obstacle removed
(:class:`~helmpinn.problems.geometry.BoxMinusObstacle`: a ball, a polygon): a sound-soft
(Dirichlet) obstacle by cut stencils.

The grid covers the whole box (and its PML). Nodes in the closed obstacle, or within
:data:`SNAP` grid steps of its boundary, are fixed: ``u = g`` there (g the ``"scatterer"`` part's
Dirichlet data, evaluated at the node: the total field is zero inside a sound-soft obstacle, and
the values make the interpolated solution continuous across its boundary). The other nodes carry
the PDE. Along each axis a node whose stencil would reach a fixed node takes, instead, the
stencil through the points nearest to it among: itself, the free nodes on each side up to the
first blocked one, and, where the obstacle blocks, the point where the grid line enters the
obstacle (found by bisection on ``obstacle.contains``), whose value g is known and goes to the
right-hand side. The weights of these irregular stencils come from the same Vandermonde
conditions as :func:`~helmpinn.reference.fd.stencil_weights` (``order + 2`` points for the second
derivative, ``order + 1`` for the first), so the truncation error stays of the scheme's order
next to a curved or slanted boundary: no staircase. A grid-aligned polygon's boundary falls on
nodes and the cut stencils reduce to the one-sided ones the box's walls use.

A sound-hard (Neumann or Robin) obstacle is not discretised: :class:`ObstacleGrid` refuses it.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from ..problems import Dirichlet

__all__ = ["ObstacleGrid", "SNAP"]

#: Nodes closer than this many grid steps (the smallest) to the obstacle's boundary are fixed to
#: the boundary data (a cut stencil through two points that close would be near singular).
SNAP = 1e-3
#: How far (in nodes) a node looks along each axis for the first blocked node.
_LOOK = 5


def _shift(a: NDArray, axis: int, k: int, fill) -> NDArray:
    """``a`` moved by k along ``axis``: ``out[..., i, ...] = a[..., i + k, ...]`` (fill beyond)."""
    out = np.full_like(a, fill)
    n = a.shape[axis]
    if abs(k) >= n:
        return out
    src = [slice(None)] * a.ndim
    dst = [slice(None)] * a.ndim
    src[axis] = slice(max(k, 0), n + min(k, 0))
    dst[axis] = slice(max(-k, 0), n - max(k, 0))
    out[tuple(dst)] = a[tuple(src)]
    return out


class ObstacleGrid:
    """The obstacle of ``problem.sampling_domain`` on a grid: which nodes are fixed
    (:attr:`fixed`, flat), which free nodes need cut stencils along each axis
    (:meth:`cut`), and those stencils' matrix entries and known boundary terms
    (:meth:`stencil`). Raises NotImplementedError for a scatterer whose condition is not a
    Dirichlet condition, ValueError where the grid is too coarse for the obstacle."""

    def __init__(self, problem, axes: list[NDArray], points: NDArray, on_wall: NDArray, order: int):
        self.obstacle = problem.sampling_domain.obstacle
        bc = problem.bcs.get("scatterer")
        if not isinstance(bc, Dirichlet):
            raise NotImplementedError(
                f"fd_solve: the scatterer's condition is {type(bc).__name__ if bc is not None else 'missing'}; "
                f"fd_solve discretises a sound-soft obstacle (Dirichlet) only, not a sound-hard one "
                f"(Neumann/Robin)")
        self.bc, self.background = bc, getattr(problem, "background", None)
        self.axes = axes
        self.shape = tuple(len(a) for a in axes)
        self.h = np.array([a[1] - a[0] for a in axes])
        self.order = order
        lo, hi = self.obstacle.bounds
        near = np.ones(len(points), bool)
        reach = (_LOOK + 1) * self.h
        near = np.all((points >= lo - reach) & (points <= hi + reach), axis=1)
        inside = np.zeros(len(points), bool)
        xs = points[near]
        inside[near] = self.obstacle.contains(xs) | (self.obstacle.boundary_distance(xs) < SNAP * self.h.min())
        self.fixed = inside
        grid_in = inside.reshape(self.shape)
        wall = on_wall.reshape(self.shape)
        for j in range(len(axes)):
            for k in range(1, _LOOK + 1):
                if np.any(grid_in & (_shift(wall, j, k, False) | _shift(wall, j, -k, False))):
                    raise ValueError(f"fd_solve: the obstacle comes within {_LOOK} nodes of the grid's outer "
                                     f"wall along axis {j}; use a smaller h or a larger box")
        self._inside = grid_in
        free = ~grid_in & ~wall
        self._free = free
        self._gaps = {}
        for j in range(len(axes)):
            for s in (-1, 1):
                gap = np.zeros(self.shape, np.int64)
                alive = np.ones(self.shape, bool)
                blocked_by_obstacle = np.zeros(self.shape, bool)
                for k in range(1, _LOOK + 1):
                    nxt = _shift(free, j, s * k, False)
                    blocked_by_obstacle |= alive & ~nxt & _shift(grid_in, j, s * k, False)
                    alive &= nxt
                    gap += alive
                self._gaps[j, s] = (gap, blocked_by_obstacle)

    def cut(self, j: int, flat_nodes: NDArray, positions: NDArray, n_j: int) -> NDArray[np.bool_]:
        """For the free nodes ``flat_nodes`` (their indices ``positions`` along axis j, which
        has ``n_j`` intervals), True where the regular stencil (centred, or one-sided at the
        box's walls) along j would reach a fixed node."""
        if self.order == 2:
            reach_lo = reach_hi = np.ones(len(flat_nodes), np.int64)
        else:
            reach_lo = np.where(positions == 1, 1, np.where(positions == n_j - 1, 4, 2))
            reach_hi = np.where(positions == n_j - 1, 1, np.where(positions == 1, 4, 2))
        out = np.zeros(len(flat_nodes), bool)
        for s, reach in ((-1, reach_lo), (1, reach_hi)):
            gap, obst = (g.ravel()[flat_nodes] for g in self._gaps[j, s])
            out |= obst & (gap < reach)
        return out

    def _crossings(self, x: NDArray, j: int, s: int, start: NDArray) -> NDArray[np.float64]:
        """The offsets (in steps along j, sign s) where the grid lines from the nodes x enter the
        obstacle, between ``start`` steps (free) and ``start + 1`` (fixed): bisection."""
        a = start.astype(np.float64)
        b = a + 1.0
        for _ in range(52):
            mid = 0.5 * (a + b)
            p = x.copy()
            p[:, j] += s * mid * self.h[j]
            hit = self.obstacle.contains(p) | (self.obstacle.boundary_distance(p) < SNAP * self.h.min())
            b = np.where(hit, mid, b)
            a = np.where(hit, a, mid)
        return b

    def stencil(self, j: int, x: NDArray, flat_nodes: NDArray, strides: NDArray, a_j: NDArray,
                b_j: NDArray, rows: list, cols: list, vals: list, rhs: NDArray) -> None:
        """Append the cut stencils along axis j at the free nodes ``flat_nodes`` (points x,
        coefficients ``a_j`` of u_jj and ``b_j`` of u_j) to rows/cols/vals; subtract their
        known boundary terms from ``rhs`` (flat, the grid's)."""
        m = len(flat_nodes)
        if m == 0:
            return
        offs, is_node = [np.zeros((m, 1))], [np.ones((m, 1), bool)]
        for s in (-1, 1):
            gap, obst = (g.ravel()[flat_nodes] for g in self._gaps[j, s])
            steps = np.arange(1, _LOOK + 1)
            # nodes s*1 .. s*gap are free; beyond the gap a wall node is a column, the obstacle is not
            usable = steps[None, :] <= gap[:, None] + (~obst)[:, None]
            offs.append(np.where(usable, s * steps[None, :], np.inf))
            is_node.append(np.ones((m, _LOOK), bool))
            cross = np.full(m, np.inf)
            wo = np.flatnonzero(obst)
            if len(wo):
                cross[wo] = s * self._crossings(x[wo], j, s, gap[wo])
            offs.append(cross[:, None])
            is_node.append(np.zeros((m, 1), bool))
        offs, is_node = np.concatenate(offs, axis=1), np.concatenate(is_node, axis=1)
        order = np.argsort(np.abs(offs), axis=1, kind="stable")
        offs = np.take_along_axis(offs, order, axis=1)
        is_node = np.take_along_axis(is_node, order, axis=1)
        background = self.background
        for deriv, coef, npts in ((2, a_j, self.order + 2), (1, b_j, self.order + 1)):
            if deriv == 1 and not np.any(coef != 0):
                continue
            o, nd = offs[:, :npts], is_node[:, :npts]
            short = ~np.all(np.isfinite(o), axis=1)
            if np.any(short):
                i = int(np.flatnonzero(short)[0])
                raise ValueError(f"fd_solve: fewer than {npts} points between the obstacle and the other "
                                 f"blocked nodes along axis {j} at {x[i].tolist()}: h is too coarse for the "
                                 f"gaps around the obstacle; use a smaller h")
            vander = o[:, None, :] ** np.arange(npts)[None, :, None]      # [m, power, point]
            e = np.zeros((m, npts, 1))
            e[:, deriv, 0] = math.factorial(deriv)
            w = np.linalg.solve(vander, e)[:, :, 0] * (coef[:, None] / self.h[j] ** deriv)
            for k in range(npts):
                node_k = nd[:, k]
                if np.any(node_k):
                    rows.append(flat_nodes[node_k])
                    cols.append(flat_nodes[node_k] + np.round(o[node_k, k]).astype(np.int64) * strides[j])
                    vals.append(w[node_k, k].astype(np.complex128))
                bnd = ~node_k
                if np.any(bnd):
                    p = x[bnd].copy()
                    p[:, j] += o[bnd, k] * self.h[j]
                    g = self.bc.values(p) - (0 if background is None else background(p))
                    np.subtract.at(rhs, flat_nodes[bnd], w[bnd, k] * g)

    def fixed_rows(self, points: NDArray, rows: list, cols: list, vals: list, rhs: NDArray) -> None:
        """Identity rows at the fixed nodes, ``u = g`` there (shifted by a background field)."""
        nodes = np.flatnonzero(self.fixed)
        rows.append(nodes)
        cols.append(nodes)
        vals.append(np.ones(len(nodes), np.complex128))
        at = points[nodes]
        rhs[nodes] = self.bc.values(at) - (0 if self.background is None else self.background(at))
