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

A sound-hard obstacle (``∂u/∂n = g``, Neumann, or ``∂u/∂n + α u = g``, Robin; n the domain's
outward normal, into the obstacle) is discretised by ghost nodes instead: every free node keeps
its regular stencil, and the fixed nodes it reaches (and two layers more, which only the
interpolant uses) are ghosts whose value extends the field smoothly into the obstacle. A ghost's
value is that of a polynomial of degree ``order`` (all monomials, centred at the ghost's nearest
boundary point B and scaled by h) fitted by least squares, weighted exp(−r²/2) (r in steps),
to the free nodes within :data:`GHOST_RADIUS` steps of B (one less in 3-D) on the domain's side
of B's tangent, subject exactly to the
boundary condition at B: a row ``u_G − Σ s_i u_i = t g(B)`` whose weights one small constrained
least-squares solve per ghost gives, batched over all ghosts. The fit is exact for polynomials
of that degree, so a ghost's value is off by O(h^(order+1)), the stencils reaching it by
O(h^(order−1)) on one layer of nodes: measured fourth order on a disk, a slanted and a
grid-aligned polygon (a smooth field; tests/test_obstacles.py, docs/guide/reference-solver.md). Nearest points
and normals are exact for a :class:`~helmpinn.problems.geometry.Ball` and a
:class:`~helmpinn.problems.geometry.Polygon`; for another obstacle they come from the signed
distance (``boundary_distance``, signed by ``contains``) and its gradient by central
differences. Deeper fixed nodes carry a discrete Laplace equation (a smooth fill for the
interpolant, decoupled from the solution outside).
"""
from __future__ import annotations

import itertools
import math

import numpy as np
from numpy.typing import NDArray

from ..problems import Dirichlet, Robin
from ..problems.geometry import Ball, Polygon

__all__ = ["ObstacleGrid", "SNAP", "GHOST_RADIUS", "nearest_boundary"]

#: Nodes closer than this many grid steps (the smallest) to the obstacle's boundary are fixed to
#: the boundary data (a cut stencil through two points that close would be near singular).
SNAP = 1e-3
#: How far (in nodes) a node looks along each axis for the first blocked node.
_LOOK = 5
#: A sound-hard obstacle's ghost value is fitted to the free nodes within this many grid steps
#: of its nearest boundary point.
GHOST_RADIUS = 4.5
#: Fixed nodes within this many steps (any direction) of a free node, beyond the stencil's reach,
#: are ghosts too: a smooth extension for the interpolant (a spline through the nodes).
_GHOST_EXTRA = 2


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
        if not isinstance(bc, (Dirichlet, Robin)):
            raise NotImplementedError(
                f"fd_solve: the scatterer has no boundary condition (it is free); give it a Dirichlet "
                f"(sound-soft), Neumann (sound-hard) or Robin condition")
        self.bc, self.background = bc, getattr(problem, "background", None)
        self.hard = isinstance(bc, Robin)
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
        if self.hard:    # ghost nodes: every free node keeps its regular stencil
            return out
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
        """The fixed nodes' rows: ``u = g`` there (shifted by a background field) for a
        sound-soft obstacle; a sound-hard one's ghost rows (:func:`_ghost_rows`)."""
        if self.hard:
            _ghost_rows(self, points, rows, cols, vals, rhs)
            return
        nodes = np.flatnonzero(self.fixed)
        rows.append(nodes)
        cols.append(nodes)
        vals.append(np.ones(len(nodes), np.complex128))
        at = points[nodes]
        rhs[nodes] = self.bc.values(at) - (0 if self.background is None else self.background(at))


def nearest_boundary(obstacle, x: NDArray, h: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """The points B of ``obstacle``'s boundary nearest to the points x [m, d] and the obstacle's
    outward unit normals there, ``(B, normals)``: exact for a Ball and a Polygon; for another
    obstacle from its signed distance (negative inside) and that distance's gradient by central
    differences of step 1e-3 h."""
    x = np.asarray(x, np.float64)
    if isinstance(obstacle, Ball):
        r = x - obstacle.center
        rho = np.linalg.norm(r, axis=1)
        nu = np.where(rho[:, None] > 0, r / np.maximum(rho, 1e-300)[:, None], np.eye(x.shape[1])[0])
        return obstacle.center + obstacle.radius * nu, nu
    if isinstance(obstacle, Polygon):
        best = np.full(len(x), np.inf)
        foot = np.zeros_like(x)
        nu = np.zeros_like(x)
        inside = obstacle.contains(x)
        v0 = obstacle.vertices                      # counter-clockwise
        edges = np.roll(v0, -1, axis=0) - v0
        lengths = np.hypot(edges[:, 0], edges[:, 1])
        normals = np.stack([edges[:, 1], -edges[:, 0]], axis=1) / lengths[:, None]
        for a, e, ln, nrm in zip(v0, edges, lengths, normals):
            t = np.clip(((x - a) @ e) / (ln * ln), 0.0, 1.0)
            p = a + t[:, None] * e
            v = x - p
            dist = np.linalg.norm(v, axis=1)
            at_end = ((t <= 0.0) | (t >= 1.0)) & (dist > 1e-9 * h)
            # at a vertex: the direction from the point to it (outward of the obstacle)
            direction = np.where(inside[:, None], -v, v) / np.maximum(dist, 1e-300)[:, None]
            n_here = np.where(at_end[:, None], direction, nrm)
            closer = dist < best
            best = np.where(closer, dist, best)
            foot[closer], nu[closer] = p[closer], n_here[closer]
        return foot, nu

    def signed(p):
        dist = obstacle.boundary_distance(p)
        return np.where(obstacle.contains(p) & (dist > 0), -dist, dist)

    step = 1e-3 * h
    grad = np.stack([(signed(x + step * e) - signed(x - step * e)) / (2 * step) for e in np.eye(x.shape[1])], 1)
    nu = grad / np.maximum(np.linalg.norm(grad, axis=1), 1e-300)[:, None]
    return x - signed(x)[:, None] * nu, nu


def _monomials(d: int, degree: int) -> NDArray[np.int64]:
    """The exponents [q, d] of every monomial of degree <= ``degree`` in d variables."""
    return np.array([e for e in itertools.product(range(degree + 1), repeat=d) if sum(e) <= degree], np.int64)


def _dilate(mask: NDArray[np.bool_], radius: int) -> NDArray[np.bool_]:
    """``mask`` grown by ``radius`` nodes along every axis (a cube of that half-width)."""
    out = mask.copy()
    for j in range(mask.ndim):
        grown = out.copy()
        for k in range(1, radius + 1):
            grown |= _shift(out, j, k, False) | _shift(out, j, -k, False)
        out = grown
    return out


def _ghost_rows(grid: ObstacleGrid, points: NDArray, rows: list, cols: list, vals: list, rhs: NDArray) -> None:
    """A sound-hard (Robin) obstacle's fixed nodes: the ghosts' constrained least-squares rows
    (the module docstring), the deeper nodes' discrete Laplace rows; batched over the ghosts."""
    shape, d, order = grid.shape, len(grid.shape), grid.order
    h = float(grid.h.min())
    strides = np.array([int(np.prod(shape[j + 1:])) for j in range(d)], np.int64)
    ghost = grid._inside & _dilate(grid._free, order // 2 + _GHOST_EXTRA)
    deep = np.flatnonzero(grid._inside & ~ghost)
    for j in range(d):   # 2d u_p − Σ neighbours = 0: a smooth fill that no free node's row reads
        for s in (-1, 1):
            rows.append(deep)
            cols.append(deep + s * strides[j])
            vals.append(np.full(len(deep), -1.0, np.complex128))
    rows.append(deep)
    cols.append(deep)
    vals.append(np.full(len(deep), 2.0 * d, np.complex128))
    nodes = np.flatnonzero(ghost)
    if len(nodes) == 0:
        return
    radius = GHOST_RADIUS if d == 2 else GHOST_RADIUS - 1.0
    powers = _monomials(d, order)
    q = len(powers)
    width = int(math.ceil(radius))
    window = np.stack(np.meshgrid(*[np.arange(-width, width + 1)] * d, indexing="ij"), -1).reshape(-1, d)
    free = grid._free.ravel()
    lo = np.array([a[0] for a in grid.axes])
    chunk = max(1, (1 << 24) // (len(window) * q))
    for start in range(0, len(nodes), chunk):
        g_nodes = nodes[start:start + chunk]
        xg = points[g_nodes]
        foot, nu = nearest_boundary(grid.obstacle, xg, h)
        normal = -nu                     # the domain's outward normal, into the obstacle
        centre = np.rint((foot - lo) / grid.h).astype(np.int64)
        idx = centre[:, None, :] + window[None, :, :]                     # [m, K, d]
        ok = np.all((idx >= 0) & (idx < np.array(shape)), axis=2)
        flat = np.where(ok, np.clip(idx, 0, np.array(shape) - 1) @ strides, 0)
        xi = (lo + np.clip(idx, 0, np.array(shape) - 1) * grid.h - foot[:, None, :]) / h
        ok &= free[flat] & (np.linalg.norm(xi, axis=2) <= radius) & (np.einsum("mkd,md->mk", xi, nu) > -1e-9)
        few = ok.sum(1) < q + 2
        if np.any(few):
            i = int(np.flatnonzero(few)[0])
            raise ValueError(f"fd_solve: only {int(ok[i].sum())} free nodes within {radius} steps of the "
                             f"sound-hard obstacle's boundary near {foot[i].tolist()} (a ghost node's fit "
                             f"needs {q + 2}): h is too coarse for the obstacle; use a smaller h")
        wgt = ok * np.exp(-np.sum(xi * xi, axis=2) / 2.0)
        vander = np.prod(xi[:, :, None, :] ** powers[None, None, :, :], axis=3)          # [m, K, q]
        m = len(g_nodes)
        at = foot
        alpha = np.broadcast_to(np.asarray(grid.bc.alpha_values(at), np.complex128), (m,))
        kkt = np.zeros((m, q + 1, q + 1), np.complex128)
        kkt[:, :q, :q] = np.einsum("mkp,mk,mkr->mpr", vander, wgt, vander)
        # the condition ∂p/∂n + α p at B, times h: the constant's α h and the linear terms' n_j
        c = np.zeros((m, q), np.complex128)
        c[:, np.flatnonzero(powers.sum(1) == 0)[0]] = alpha * h
        for j in range(d):
            c[:, np.flatnonzero((powers.sum(1) == 1) & (powers[:, j] == 1))[0]] = normal[:, j]
        kkt[:, :q, q] = c
        kkt[:, q, :q] = c
        phi = np.prod(((xg - foot) / h)[:, None, :] ** powers[None, :, :], axis=2)        # [m, q]
        z = np.linalg.solve(kkt, np.concatenate([phi, np.zeros((m, 1))], 1)[:, :, None].astype(np.complex128))[:, :, 0]
        weights = wgt * np.einsum("mkp,mp->mk", vander, z[:, :q])                         # u_G = Σ w u_i + t g
        t = z[:, q] * h
        g = grid.bc.g_values(at, normal)
        g = np.zeros(m, np.complex128) if g is None else np.broadcast_to(np.asarray(g, np.complex128), (m,))
        if grid.background is not None:
            g = g - (np.sum(grid.background.gradient(at) * normal, axis=1) + alpha * grid.background(at))
        rows.append(g_nodes)
        cols.append(g_nodes)
        vals.append(np.ones(m, np.complex128))
        sel = ok
        rows.append(np.broadcast_to(g_nodes[:, None], sel.shape)[sel])
        cols.append(flat[sel])
        vals.append(-weights[sel])
        rhs[g_nodes] = t * g
