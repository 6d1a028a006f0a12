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

Three things keep a sound-hard polygon's sharp corners from spoiling the whole field (a Neumann
boundary, unlike a Dirichlet one, lets a local error reach everywhere):

- a stencil entry that reaches *across* the obstacle (through a thin tip to a free node on its
  far side, or to a ghost whose own fit belongs to the other face of a corner) takes instead the
  extension from the node's own side, fitted as a ghost's is at the point where the grid line
  enters the obstacle (:meth:`ObstacleGrid._across`);
- a fit whose foot lies within :data:`CORNER_REACH` steps of a vertex adds the vertex's singular
  functions ``ρ^a cos(aφ)`` (a = nπ/ω, ω the domain's angle there, the exponents below
  :data:`CORNER_EXPONENT_MAX` that are not whole) to its polynomials: a field by a 60° tip
  goes as ``ρ^0.6``, which no polynomial fits, and the ghosts, extrapolated, amplify a misfit
  (:func:`_fit_groups`);
- with a Neumann condition, the rows of the free nodes within :data:`CORNER_ROWS_REACH` steps of
  a vertex get a correction that makes them exact on those singular functions too (the regular
  stencil misses their Laplacian, zero, by O(h^(a−2))), while vanishing on polynomials
  (:func:`_corner_corrections`).

With them a manufactured corner field ``J_ν(kr) cos(νφ)`` and a point source by a sound-hard
triangle converge as h falls, which without them they did not (tests/test_obstacles.py; the
numbers in docs/guide/reference-solver.md).
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
#: A ghost a stencil reaches through a face whose normal is within 30° of the ghost's own
#: nearest boundary point's keeps its value; else (by a corner) the entry takes the extension
#: from the entry's face (:meth:`ObstacleGrid._across`).
_SAME_FACE = math.cos(math.radians(30.0))
#: A sound-hard polygon's fits whose foot lies within this many steps of a vertex add the
#: vertex's singular functions (:func:`_fit_groups`), those of exponent below
#: :data:`CORNER_EXPONENT_MAX`.
CORNER_REACH = 2 * GHOST_RADIUS
CORNER_EXPONENT_MAX = 2.5
#: The free nodes within this many steps of such a vertex have their PDE rows corrected to be
#: exact on its singular functions (:func:`_corner_corrections`), by a correction on the free
#: nodes within :data:`CORNER_CORRECTION_RADIUS` steps of each.
CORNER_ROWS_REACH = 2.5
CORNER_CORRECTION_RADIUS = 3.5
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
    (:meth:`stencil`); ``stencils``: fd_solve's regular ones (``"d1"``, ``"d2"``: offsets and
    weights), which a sound-hard obstacle's rows keep. Raises NotImplementedError for a
    scatterer without a boundary condition, ValueError where the grid is too coarse for the
    obstacle."""

    def __init__(self, problem, axes: list[NDArray], points: NDArray, on_wall: NDArray, order: int,
                 stencils: dict):
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
        self.strides = np.array([int(np.prod(self.shape[j + 1:])) for j in range(len(axes))], np.int64)   # flat index steps
        self.h = np.array([a[1] - a[0] for a in axes])
        self.order = order
        self._stencils = stencils       # fd's regular ones: (offsets, weights) by name
        lo, hi = self.obstacle.bounds
        near = np.ones(len(points), bool)
        reach = (_LOOK + 1) * self.h
        near = np.all((points >= lo - reach) & (points <= hi + reach), axis=1)
        inside = np.zeros(len(points), bool)
        xs = points[near]
        inside[near] = self._blocked(xs)
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
        if self.hard:    # ghost nodes: regular stencils, unless one reaches across the boundary
            return np.any(self._across(j, flat_nodes)[0], axis=1)
        for s, reach in ((-1, reach_lo), (1, reach_hi)):
            gap, obst = (g.ravel()[flat_nodes] for g in self._gaps[j, s])
            out |= obst & (gap < reach)
        return out

    def _blocked(self, p: NDArray) -> NDArray[np.bool_]:
        """True for the points p in the closed obstacle or within :data:`SNAP` steps of it."""
        return self.obstacle.contains(p) | (self.obstacle.boundary_distance(p) < SNAP * self.h.min())

    def _at_vertex(self, p: NDArray) -> NDArray[np.bool_]:
        """True for the points p within :data:`SNAP` steps of a polygon obstacle's vertex."""
        if not isinstance(self.obstacle, Polygon) or len(p) == 0:
            return np.zeros(len(p), bool)
        gap = np.linalg.norm(p[:, None, :] - self.obstacle.vertices[None], axis=2).min(axis=1)
        return gap <= SNAP * self.h.min()

    def _entry(self, a: NDArray, b: NDArray) -> NDArray[np.float64]:
        """Where the segments a → b ``[m, d]`` (all of one length, a free) first reach the
        obstacle, as a fraction of their length (inf where they do not): sampled every eighth of
        a step, then bisected between the last free sample and the first blocked one."""
        steps = float(np.max(np.abs(b[0] - a[0]) / self.h)) if len(a) else 0.0
        ns = max(1, int(math.ceil(8 * steps)))
        frac = np.arange(1, ns + 1) / ns
        hit = self._blocked((a[:, None, :] + frac[None, :, None] * (b - a)[:, None, :]).reshape(-1, a.shape[1]))
        hit = hit.reshape(len(a), ns)
        out = np.full(len(a), np.inf)
        first = np.argmax(hit, axis=1)
        some = np.flatnonzero(hit.any(axis=1))
        if len(some) == 0:
            return out
        lo, hi = np.where(first[some] > 0, frac[first[some] - 1], 0.0), frac[first[some]]
        a, d = a[some], (b - a)[some]
        for _ in range(52):
            mid = 0.5 * (lo + hi)
            blocked = self._blocked(a + mid[:, None] * d)
            hi, lo = np.where(blocked, mid, hi), np.where(blocked, lo, mid)
        out[some] = hi
        return out

    def _across(self, j: int, flat_nodes: NDArray) -> tuple[NDArray[np.bool_], NDArray[np.float64]]:
        """A sound-hard obstacle's free nodes ``flat_nodes`` whose regular centred stencil along
        axis j reaches across the boundary: ``(across [m, 2r], entry [m, 2r, d])`` over the
        offsets −r … −1, 1 … r (r = order / 2). An offset is across where the segment to it
        enters the obstacle and its node is a free one beyond (a thin part of the obstacle, a
        tip) or a ghost whose own fit belongs to another face (its nearest boundary point's
        normal more than 30° from the entry's: by a corner); ``entry`` holds the entry points."""
        r = self.order // 2
        offs = [o for o in range(-r, r + 1) if o != 0]
        d = len(self.shape)
        h = float(self.h.min())
        idx = np.stack(np.unravel_index(flat_nodes, self.shape), axis=1)
        x = np.stack([self.axes[k][idx[:, k]] for k in range(d)], axis=1)
        across = np.zeros((len(flat_nodes), len(offs)), bool)
        entry = np.zeros((len(flat_nodes), len(offs), d))
        lo, hi = self.obstacle.bounds
        near = np.flatnonzero(np.all((x >= lo - r * self.h) & (x <= hi + r * self.h), axis=1))
        near = near[self.obstacle.boundary_distance(x[near]) <= r * self.h[j] * (1 + 1e-9)]
        free = self._free.ravel()
        for i, o in enumerate(offs):
            a = x[near]
            b = a.copy()
            b[:, j] += o * self.h[j]
            t = self._entry(a, b)
            hit = np.isfinite(t)
            nodes = near[hit]
            c = a[hit] + t[hit, None] * (b[hit] - a[hit])
            ghost = ~free[flat_nodes[nodes] + o * int(self.strides[j])]
            same = ghost & self._at_vertex(b[hit])    # a ghost at a vertex is fitted to both edges
            check = ghost & ~same                     # another ghost: of the entry's face?
            if np.any(check):
                _, nu_c = nearest_boundary(self.obstacle, c[check], h)
                _, nu_p = nearest_boundary(self.obstacle, b[hit][check], h)
                same[check] = np.sum(nu_c * nu_p, axis=1) >= _SAME_FACE
            across[nodes[~same], i] = True
            entry[nodes, i] = c
        return across, entry

    def _hard_stencil(self, j: int, x: NDArray, flat_nodes: NDArray, strides: NDArray, a_j: NDArray,
                      b_j: NDArray, rows: list, cols: list, vals: list, rhs: NDArray) -> None:
        """The regular centred stencils along j at the sound-hard obstacle's free nodes
        ``flat_nodes`` that reach across its boundary (:meth:`_across`), each such entry's node
        value replaced by the field's extension from the node's own side, fitted at the entry
        point as a ghost's is (:func:`_extension`): its fit nodes' weights into the row, its
        boundary term into ``rhs``."""
        across, entry = self._across(j, flat_nodes)
        r = self.order // 2
        offs = [o for o in range(-r, r + 1) if o != 0]
        st = self._stencils
        for deriv, coef, power in (("d2", a_j, 2), ("d1", b_j, 1)):
            if deriv == "d1" and not np.any(coef != 0):
                continue
            for o, wk in zip(*st[deriv]):
                w = (wk * coef / self.h[j] ** power).astype(np.complex128)
                sub = across[:, offs.index(int(o))] if o != 0 else np.zeros(len(flat_nodes), bool)
                rows.append(flat_nodes[~sub])
                cols.append(flat_nodes[~sub] + int(o) * strides[j])
                vals.append(w[~sub])
                if not np.any(sub):
                    continue
                xe = x[sub].copy()
                xe[:, j] += o * self.h[j]
                foot, nu = nearest_boundary(self.obstacle, entry[sub, offs.index(int(o))], float(self.h.min()))
                flat, ok, ew, tg = _extension(self, xe, foot, nu)
                rows.append(np.broadcast_to(flat_nodes[sub][:, None], ok.shape)[ok])
                cols.append(flat[ok])
                vals.append((w[sub][:, None] * ew)[ok])
                np.subtract.at(rhs, flat_nodes[sub], w[sub] * tg)

    def _crossings(self, x: NDArray, j: int, s: int, start: NDArray) -> NDArray[np.float64]:
        """The offsets (in steps along j, sign s) where the grid lines from the nodes x enter the
        obstacle, between ``start`` steps (free) and ``start + 1`` (fixed): bisection."""
        a = start.astype(np.float64)
        b = a + 1.0
        for _ in range(52):
            mid = 0.5 * (a + b)
            p = x.copy()
            p[:, j] += s * mid * self.h[j]
            hit = self._blocked(p)
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
        if self.hard:
            self._hard_stencil(j, x, flat_nodes, strides, a_j, b_j, rows, cols, vals, rhs)
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
            _corner_corrections(self, points, rows, cols, vals)
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
        normals = obstacle.edge_normals
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
    strides = grid.strides
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
    chunk = max(1, (1 << 24) // (_window(d, _fit_radius(d)).shape[0] * len(_monomials(d, order))))
    for start in range(0, len(nodes), chunk):
        g_nodes = nodes[start:start + chunk]
        xg = points[g_nodes]
        foot, nu = nearest_boundary(grid.obstacle, xg, float(grid.h.min()))
        flat, sel, weights, tg = _extension(grid, xg, foot, nu)
        m = len(g_nodes)
        rows.append(g_nodes)
        cols.append(g_nodes)
        vals.append(np.ones(m, np.complex128))
        rows.append(np.broadcast_to(g_nodes[:, None], sel.shape)[sel])
        cols.append(flat[sel])
        vals.append(-weights[sel])
        rhs[g_nodes] = tg


def _fit_radius(d: int) -> float:
    """How far (in steps) from its foot a ghost's fit looks: :data:`GHOST_RADIUS`, one less in 3-D."""
    return GHOST_RADIUS if d == 2 else GHOST_RADIUS - 1.0


def _window(d: int, radius: float) -> NDArray[np.int64]:
    """The offsets [K, d] of the cube of nodes that holds the ball of ``radius`` steps."""
    width = int(math.ceil(radius))
    return np.stack(np.meshgrid(*[np.arange(-width, width + 1)] * d, indexing="ij"), -1).reshape(-1, d)


def _vander(xi: NDArray, powers: NDArray) -> NDArray[np.float64]:
    """The monomials ``powers [q, d]`` at the points ``xi [..., d]``: ``[..., q]``."""
    return np.prod(xi[..., None, :] ** powers, axis=-1)


def _extension(grid: ObstacleGrid, xe: NDArray, foot: NDArray,
               nu: NDArray) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """The field's extension across the sound-hard boundary at the points ``foot`` (obstacle's
    outward normals ``nu``), evaluated at ``xe [m, d]``: ``(flat, ok, weights, tg)`` with
    ``u(xe) ≈ Σ_k weights[:, k] u[flat[:, k]] + tg`` over the nodes where ``ok [m, K]``. The polynomial of degree ``order`` fitted,
    weighted, to the free nodes within :data:`GHOST_RADIUS` steps of the foot on the domain's side
    of its tangent, subject exactly to the boundary condition at the foot (the module docstring)."""
    shape, d, order = grid.shape, len(grid.shape), grid.order
    h = float(grid.h.min())
    strides = grid.strides
    radius = _fit_radius(d)
    powers = _monomials(d, order)
    q = len(powers)
    window = _window(d, radius)
    free = grid._free.ravel()
    lo = np.array([a[0] for a in grid.axes])
    normal = -nu                     # the domain's outward normal, into the obstacle
    centre = np.rint((foot - lo) / grid.h).astype(np.int64)
    idx = centre[:, None, :] + window[None, :, :]                     # [m, K, d]
    ok = np.all((idx >= 0) & (idx < np.array(shape)), axis=2)
    flat = np.where(ok, np.clip(idx, 0, np.array(shape) - 1) @ strides, 0)
    xi = (lo + np.clip(idx, 0, np.array(shape) - 1) * grid.h - foot[:, None, :]) / h
    near = ok & free[flat] & (np.linalg.norm(xi, axis=2) <= radius)
    ok = near & (np.einsum("mkd,md->mk", xi, nu) > -1e-9)
    few = ok.sum(1) < q + 2
    if np.any(few):
        i = int(np.flatnonzero(few)[0])
        raise ValueError(f"fd_solve: only {int(ok[i].sum())} free nodes within {radius} steps of the "
                         f"sound-hard obstacle's boundary near {foot[i].tolist()} (a ghost node's fit "
                         f"needs {q + 2}): h is too coarse for the obstacle; use a smaller h")
    vander = _vander(xi, powers)                                                     # [m, K, q]
    m = len(xe)
    alpha = np.broadcast_to(np.asarray(grid.bc.alpha_values(foot), np.complex128), (m,))
    constant = np.flatnonzero(powers.sum(1) == 0)[0]
    linear = [np.flatnonzero((powers.sum(1) == 1) & (powers[:, j] == 1))[0] for j in range(d)]
    phi = _vander((xe - foot) / h, powers)                                           # [m, q]
    weights = np.zeros(ok.shape, np.complex128)
    tg = np.zeros(m, np.complex128)
    for sel, corner, edges in _fit_groups(grid, foot, nu):
        if edges is not None:    # a foot at a vertex: the free nodes on both sides, both edges' conditions
            ok[sel] = near[sel]
        wgt = ok[sel] * np.exp(-np.sum(xi[sel] * xi[sel], axis=2) / 2.0)
        normals = [-nu[sel]] if edges is None else [-e for e in edges]    # the domain's outward normals
        # each condition ∂p/∂n + α p at the foot, times h: the constant's α h and the linear terms' n_j
        cond = np.zeros((len(normals), len(sel), q), np.complex128)
        cond[:, :, constant] = alpha[sel] * h
        for c, n_c in enumerate(normals):
            cond[c][:, linear] = n_c
        basis, at_e = vander[sel], phi[sel]
        if corner is not None:   # the vertex's singular functions beside the polynomials
            f_win, f_e, f_foot = corner(foot[sel, None, :] + h * xi[sel], xe[sel], foot[sel])
            basis = np.concatenate([basis, f_win], axis=2)
            at_e = np.concatenate([at_e, f_e], axis=1)
            # ∂s/∂n = 0 on the vertex's edges: only α s enters
            cond = np.concatenate([cond, np.broadcast_to(alpha[sel, None] * h * f_foot, (len(normals),) + f_foot.shape)], axis=2)
        n_sel, qq, nc = basis.shape[0], basis.shape[2], len(normals)
        kkt = np.zeros((n_sel, qq + nc, qq + nc), np.complex128)
        kkt[:, :qq, :qq] = np.einsum("mkp,mk,mkr->mpr", basis, wgt, basis)
        kkt[:, :qq, qq:] = np.moveaxis(cond, 0, 2)
        kkt[:, qq:, :qq] = np.moveaxis(cond, 0, 1)
        rhs = np.concatenate([at_e, np.zeros((n_sel, nc))], 1)[:, :, None].astype(np.complex128)
        z = np.linalg.solve(kkt, rhs)[:, :, 0]
        weights[sel] = wgt * np.einsum("mkp,mp->mk", basis, z[:, :qq])   # u(xe) = Σ w u_i + Σ t_c g_c
        for c, n_c in enumerate(normals):
            g = grid.bc.g_values(foot[sel], n_c)
            g = np.zeros(n_sel, np.complex128) if g is None else np.broadcast_to(np.asarray(g, np.complex128), (n_sel,))
            if grid.background is not None:
                g = g - (np.sum(grid.background.gradient(foot[sel]) * n_c, axis=1) + alpha[sel] * grid.background(foot[sel]))
            tg[sel] += z[:, qq + c] * h * g
    return flat, ok, weights, tg


def _vertex_exponents(poly: Polygon) -> list[NDArray[np.float64]]:
    """Per vertex of a sound-hard polygon obstacle, the exponents a = nπ/ω of its singular
    functions ``ρ^a cos(aφ)`` (ω the domain's angle there) below :data:`CORNER_EXPONENT_MAX`
    and not whole (a whole one is a polynomial): empty at a straight vertex."""
    out = []
    for opening in 2 * math.pi - poly.interior_angles():
        nu = math.pi / opening
        out.append(np.array([n * nu for n in range(1, int(CORNER_EXPONENT_MAX / nu) + 1)
                             if abs(n * nu - round(n * nu)) > 0.05 and n * nu < CORNER_EXPONENT_MAX]))
    return out


def _singular(x: NDArray, vertex: NDArray, e_a: NDArray, n_a: NDArray, a: NDArray, h: float,
              wrap: bool) -> NDArray[np.float64]:
    """``ρ^a cos(aφ)`` [..., len(a)] at the points ``x [..., 2]``: ρ the distance from the vertex
    in steps h, φ the angle from the edge direction ``e_a`` towards that edge's outward normal
    ``n_a`` (both [2] or broadcast over x's first axis), in [0, 2π) when ``wrap`` (the domain
    about a convex vertex: 0 on one edge, ω on the other), else in (−π, π] (continued across
    that edge into the obstacle, the even reflection a Neumann edge makes)."""
    r = x - vertex
    if e_a.ndim == 2:
        shape = (len(e_a),) + (1,) * (r.ndim - 2) + (2,)
        e_a, n_a = e_a.reshape(shape), n_a.reshape(shape)
    u, w = np.sum(r * e_a, axis=-1), np.sum(r * n_a, axis=-1)
    rho, ang = np.hypot(u, w) / h, np.arctan2(w, u)
    if wrap:
        ang = np.where(ang < -1e-12, ang + 2 * math.pi, ang)
    return rho[..., None] ** a * np.cos(a * ang[..., None])


def _fit_groups(grid: ObstacleGrid, foot: NDArray, nu: NDArray):
    """The fits at ``foot`` in groups ``(indices, corner, edges)``. ``corner``: None for a plain
    polynomial fit; for the feet within :data:`CORNER_REACH` steps of a vertex of a
    :class:`~helmpinn.problems.geometry.Polygon` obstacle, a function ``(window points [m, K, 2],
    evaluation points [m, 2], feet [m, 2]) -> (values [m, K, s], [m, s], [m, s])`` of the
    vertex's singular functions (:func:`_singular`, φ from the foot's edge, so that ∂/∂n = 0
    there). A sound-hard field by a vertex is a sum of such terms times Bessel series (whose next
    terms are ρ^(a+2)); the polynomial alone misfits the ``ρ^0.6`` of a 60° tip, and the ghosts,
    extrapolated, amplify the misfit. ``edges``: None, or for the feet at a vertex itself (a
    node on it, within :data:`SNAP` steps) its two edges' outward normals ([m, 2], [m, 2]): such a fit
    takes both edges' conditions and the free nodes on both sides (its φ through the domain),
    which no rounding of which edge is nearer can change."""
    m = len(foot)
    poly = grid.obstacle
    if not isinstance(poly, Polygon) or m == 0:
        yield np.arange(m), None, None
        return
    h = float(grid.h.min())
    v, normals = poly.vertices, poly.edge_normals
    n_v = len(v)
    dist = poly.edge_distances(foot)                                   # [m, edges]
    tied = dist <= dist.min(axis=1, keepdims=True) + 1e-9 * h
    edge = np.argmax(np.where(tied, nu @ normals.T, -np.inf), axis=1)  # the foot's edge
    ends = np.stack([edge, (edge + 1) % n_v], axis=1)
    near_end = np.argmin(np.linalg.norm(v[ends] - foot[:, None, :], axis=2), axis=1)
    vertex = ends[np.arange(m), near_end]
    to_vertex = np.linalg.norm(v[vertex] - foot, axis=1)
    reach = to_vertex <= CORNER_REACH * h
    at_vertex = to_vertex <= SNAP * h
    plain = np.ones(m, bool)
    for i, a in enumerate(_vertex_exponents(poly)):
        e_out, n_out = poly.edge_directions[i], normals[i]
        straight = np.allclose(n_out, normals[i - 1], atol=1e-12)
        for sel in (np.flatnonzero(reach & ~at_vertex & (vertex == i)) if len(a) else np.zeros(0, np.int64),
                    np.flatnonzero(at_vertex & (vertex == i)) if not straight else np.zeros(0, np.int64)):
            if len(sel) == 0:
                continue
            plain[sel] = False
            at = bool(at_vertex[sel[0]])
            edges = (np.broadcast_to(n_out, (len(sel), 2)), np.broadcast_to(normals[i - 1], (len(sel), 2))) if at else None
            if len(a) == 0:          # no singular functions (whole exponents): both conditions only
                yield sel, None, edges
                continue
            if at:                   # φ through the domain from the outgoing edge
                e_a, n_a, wrap = e_out, n_out, True
            else:                    # φ from the foot's edge, continued across it
                direction = v[np.where(vertex[sel] == ends[sel, 0], ends[sel, 1], ends[sel, 0])] - v[i]
                e_a = direction / np.linalg.norm(direction, axis=1, keepdims=True)
                n_a, wrap = normals[edge[sel]], False

            def corner(points, xe, feet, e_a=e_a, n_a=n_a, a=a, vertex=v[i], wrap=wrap):
                return tuple(_singular(y, vertex, e_a, n_a, a, h, wrap=wrap) for y in (points, xe, feet))

            yield sel, corner, edges
    rest = np.flatnonzero(plain)
    if len(rest):
        yield rest, None, None


def _corner_corrections(grid: ObstacleGrid, points: NDArray, rows: list, cols: list, vals: list) -> None:
    """Make the PDE rows of the free nodes within :data:`CORNER_ROWS_REACH` steps of a sound-hard
    polygon's vertex exact on the vertex's singular functions as well (harmonic: their
    Laplacian is zero), by a correction δ on the free nodes within :data:`CORNER_CORRECTION_RADIUS`
    steps that vanishes on every polynomial of degree ``order`` (the one of least Σ δ_i² / w_i,
    w = exp(−r²/2), r in steps from the row's node). The rows as assembled (``rows, cols, vals`` after the PDE and ghost rows, the
    first block the κ diagonal, which is left out) read the ghosts, whose values the ghost rows
    give from the free nodes'; a regular stencil next to the vertex misses ``Δ ρ^0.6`` (60°)
    by O(h^-1.4), which a Neumann boundary, unlike a Dirichlet one, lets reach the whole field."""
    poly, alpha = grid.obstacle, grid.bc.alpha
    if not isinstance(poly, Polygon) or callable(alpha) or alpha != 0:
        return
    from scipy.sparse import csr_matrix

    h = float(grid.h.min())
    free = grid._free.ravel()
    n = len(free)
    stencil = None
    powers = _monomials(2, grid.order)
    window = _window(2, CORNER_CORRECTION_RADIUS)
    lo = np.array([ax[0] for ax in grid.axes])
    shape = np.array(grid.shape)
    strides = grid.strides
    for i, a in enumerate(_vertex_exponents(poly)):
        vertex = poly.vertices[i]
        x0 = np.flatnonzero(free & (np.linalg.norm(points - vertex, axis=1) <= CORNER_ROWS_REACH * h))
        if len(a) == 0 or len(x0) == 0:
            continue
        if stencil is None:
            stencil = csr_matrix((np.concatenate(vals[1:]), (np.concatenate(rows[1:]), np.concatenate(cols[1:]))),
                                 shape=(n, n))
        e_out, n_out = poly.edge_directions[i], poly.edge_normals[i]
        values = np.zeros((n, len(a)), np.complex128)
        values[free] = _singular(points[free], vertex, e_out, n_out, a, h, wrap=True)
        # the ghosts' values from their rows u_G − Σ w u_i = 0 (the free nodes' values)
        ghost_rows = stencil[np.flatnonzero(~free)]
        values[~free] = -(ghost_rows @ values)
        miss = np.asarray(stencil[x0] @ values)                                      # [m, s]: should be 0
        centre = np.rint((points[x0] - lo) / grid.h).astype(np.int64)
        idx = centre[:, None, :] + window[None]
        inside = np.all((idx >= 0) & (idx < shape), axis=2)
        flat = np.clip(idx, 0, shape - 1) @ strides
        xi = (points[flat] - points[x0][:, None, :]) / h
        ok = inside & free[flat] & (np.linalg.norm(xi, axis=2) <= CORNER_CORRECTION_RADIUS)
        wgt = ok * np.exp(-np.sum(xi * xi, axis=2) / 2.0)
        basis = np.concatenate([_vander(xi, powers),
                                _singular(points[flat], vertex, e_out, n_out, a, h, wrap=True)], axis=2)
        target = np.concatenate([np.zeros((len(x0), len(powers))), -miss], axis=1)      # [m, q + s]
        gram = np.einsum("mkp,mk,mkr->mpr", basis, wgt, basis)
        lam = np.linalg.solve(gram, target.astype(np.complex128)[:, :, None])[:, :, 0]
        delta = wgt * np.einsum("mkp,mp->mk", basis, lam)
        rows.append(np.broadcast_to(x0[:, None], ok.shape)[ok])
        cols.append(flat[ok])
        vals.append(delta[ok].astype(np.complex128))
