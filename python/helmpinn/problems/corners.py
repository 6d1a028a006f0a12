"""The corners of a polygonal boundary: rows that keep a corner's residual from radiating.

At a vertex where the domain's angle α exceeds π (a polygonal obstacle's vertices seen from
outside, an L-shaped domain's inner corner) a Helmholtz solution behaves as ``r^(π/α)``, which a
smooth network cannot follow; the PDE rows there are weighted down
(:func:`helmpinn.problems.sampler.corner_weights`), and the residual the network then leaves
by the vertex acts as a source: it radiates a wave into the whole domain (on
``scatter-square-soft`` most of the error at its level came from there: docs/guide/open-domains.md,
``benchmarks/residual_split.py``).

How much a residual f in the sector ``S`` (``r < R``, ``0 < θ < α`` about the vertex) radiates is
set by its moments against the wedge's regular waves ``φ_n = J_ν(kr) sin(νθ)`` (a sound-soft,
Dirichlet corner; ``cos(νθ)`` for a sound-hard, Neumann one), ``ν = nπ/α``: outside S the
field of f is ``−(iπ/α) Σ_n m_n H_ν(kr) sin(νθ)`` (the wedge's Green's function expanded about
its vertex), ``m_n = ∫_S φ_n f``. By Green's second identity each moment is a boundary
integral of the field itself, whatever it does inside:

    m_n = ∫_arc (φ_n ∂_r u − u ∂_r φ_n) ds + ∫_edges (φ_n ∂_n u − u ∂_n φ_n) ds,

n the normal out of S on the two edges, where one of the two terms vanishes (φ_n = 0 on a
Dirichlet edge, ∂_n φ_n = 0 on a Neumann one). A field without residual in S has every
``m_n = 0``, the exact solution included, singular or not; a smooth network can have them zero
too (only its values on the arc and the edges enter), and then its corner residual radiates
nothing beyond S. :func:`corner_rows` gives these moments as rows of a decomposed model's loss
(Gauss-Legendre on the arc, and on the edges in ``t`` with ``r = R t³``, which makes the
``r^(ν−1)`` of ``∂_n φ`` smooth), each weighted by about the error its wave causes:
``sqrt(L0 π / (α k L))``, L0 the loss of the zero field and L the domain's size
(``sqrt(volume)``), so that a moment costs the loss what its radiated error costs, relative to
the zero field. The orders run to ``ν ≈ kR + 6``: the moments of a model trained without the
rows fall fast with the order, but with rows to fewer orders the training moves the corners'
residual into the orders left free (docs/benchmarks.md).

With the radiation held by the rows, a run that adds them weighs its PDE rows down over a wider
region, :data:`CORNER_WAVELENGTHS_WITH_ROWS` wavelengths about each vertex
(:func:`rows_corner_radius`, through the run's sampled problem:
:func:`helmpinn.training.dd_driver.sampled_problem`): the network is freer by the vertex, and
what it leaves there no longer reaches the rest of the domain.

A corner gets rows where its sector holds no other boundary, no PML, no source (none that could
move a moment by :data:`SOURCE_TOLERANCE` of the zero field's error) and a constant real κ with
the plain Laplacian (the identity's assumptions), and its edges carry one
:class:`~helmpinn.problems.conditions.Dirichlet` or Neumann condition.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from numpy.typing import NDArray

from .conditions import Dirichlet, Robin
from .geometry import BoxMinusObstacle, Polygon

__all__ = ["Wedge", "corner_wedges", "rows_corner_radius", "wedge_functionals", "corner_rows", "corner_moments",
           "CORNER_ROW_RADIUS", "CORNER_ORDERS_BEYOND", "CORNER_ROW_WEIGHT", "CORNER_WAVELENGTHS_WITH_ROWS",
           "SOURCE_TOLERANCE", "ARC_NODES", "EDGE_NODES"]

#: The sector's radius R, times the corner weights' radius (:attr:`Sampler.corner_radius
#: <helmpinn.problems.sampler.Sampler.corner_radius>`): the sector holds all the weighted-down rows.
CORNER_ROW_RADIUS = 1.2
#: The orders ν run to ``kR`` plus this (module docstring).
CORNER_ORDERS_BEYOND = 6.0
#: The corner weights' radius, in wavelengths, in a run that has the corner rows (in place of
#: :data:`helmpinn.problems.sampler.CORNER_WAVELENGTHS`): with the radiation held by the rows a
#: wider region weighed down costs nothing far away and frees the network near the vertex
#: (docs/benchmarks.md); without the rows a wider radius did not move the error's level.
CORNER_WAVELENGTHS_WITH_ROWS = 0.5
#: The rows' weight relative to the error their waves cause (:class:`helmpinn.training.dd_driver.GNSettings`' ``corners``).
CORNER_ROW_WEIGHT = 1.0
#: A corner takes no rows where a source in its sector could move its moments by more than
#: this share of the zero field's error (:func:`_source_weight`).
SOURCE_TOLERANCE = 1e-4
#: Gauss-Legendre nodes on a sector's arc and on each of its edges.
ARC_NODES = 96
EDGE_NODES = 32


@dataclass(frozen=True, eq=False)
class Wedge:
    """A corner's sector: ``vertex [2]``, the first edge's direction ``start`` (radians; θ is
    measured from it through the domain), the domain's angle ``opening`` (α > π), the radius,
    the wavenumber k in it and the edges' condition ("dirichlet" or "neumann")."""

    vertex: NDArray[np.float64]
    start: float
    opening: float
    radius: float
    k: float
    condition: str

    @property
    def orders(self) -> NDArray[np.float64]:
        """ν = nπ/α for n = 1 .. N (Dirichlet) or 0 .. N (Neumann), ``N π/α ≈ kR +``
        :data:`CORNER_ORDERS_BEYOND`."""
        top = int(math.ceil((self.k * self.radius + CORNER_ORDERS_BEYOND) * self.opening / math.pi))
        first = 1 if self.condition == "dirichlet" else 0
        return np.arange(first, top + 1) * math.pi / self.opening

    def angular(self, theta: NDArray) -> NDArray[np.float64]:
        """``sin(νθ)`` or ``cos(νθ)`` [len(theta), N]."""
        t = np.outer(theta, self.orders)
        return np.sin(t) if self.condition == "dirichlet" else np.cos(t)


def _vertex_wedges(domain) -> list[tuple[NDArray, float, float, float, str]]:
    """``(vertex, start, opening, reach, part)`` for the vertices where the domain's angle
    exceeds π (a polygonal obstacle's convex vertices, a polygon domain's reflex ones:
    :meth:`Polygon.corner_mask <helmpinn.problems.geometry.Polygon.corner_mask>`), reach the
    distance to the nearest boundary beyond the vertex's own two edges (the polygon's other
    edges, an obstacle's box) and to the far ends of its own."""
    if isinstance(domain, BoxMinusObstacle) and isinstance(domain.obstacle, Polygon):
        poly, outside, part = domain.obstacle, True, "scatterer"
    elif isinstance(domain, Polygon):
        poly, outside, part = domain, False, "polygon"
    else:
        return []
    v = poly.vertices   # counter-clockwise: the polygon's inside on each edge's left
    distances = poly.edge_distances(v)   # [vertex, edge]; edge j runs from v[j] to v[j + 1]
    out = []
    angles = poly.interior_angles()
    for i in map(int, np.flatnonzero(poly.corner_mask(convex=outside))):
        e_out, e_back = v[(i + 1) % len(v)] - v[i], v[i - 1] - v[i]
        a_out, a_back = math.atan2(e_out[1], e_out[0]), math.atan2(e_back[1], e_back[0])
        inner = float(angles[i])   # the polygon's own angle, from e_out to e_back
        start, opening = (a_back, 2 * math.pi - inner) if outside else (a_out, inner)
        others = [j for j in range(len(v)) if j not in (i, (i - 1) % len(v))]
        reach = min([float(np.hypot(*e_out)), float(np.hypot(*e_back))] + [float(distances[i, j]) for j in others])
        if outside:
            reach = min(reach, float(domain.box.boundary_distance(v[i][None])[0]))
        out.append((v[i].copy(), start, opening, reach, part))
    return out


def _sector_points(vertex: NDArray, start: float, opening: float, radius: float, n: int = 12) -> NDArray:
    """A polar grid over the sector (its checks' points)."""
    r = radius * (np.arange(1, n + 1) / n)
    th = start + opening * (np.arange(n + 1) / n)
    rr, tt = np.meshgrid(r, th, indexing="ij")
    return vertex + np.stack([rr.ravel() * np.cos(tt.ravel()), rr.ravel() * np.sin(tt.ravel())], 1)


def corner_wedges(problem, radius: float | None = None, *, sources: bool = True) -> list[Wedge]:
    """The sectors of ``problem``'s corners that take rows (module docstring): radius
    ``radius``, default :data:`CORNER_ROW_RADIUS` times the corner weights' radius, at most 0.9
    of the distance to the nearest other boundary (and of its edges' lengths). ``sources=False``
    keeps a sector that a source reaches (the corners' singular functions need no source-free
    sector: :mod:`helmpinn.problems.singular`)."""
    if problem.dim != 2:
        return []
    if radius is None:
        cr = getattr(problem.sampler, "corner_radius", None)
        if cr is None or not math.isfinite(cr):
            return []
        radius = CORNER_ROW_RADIUS * float(cr)
    domain = problem.domain
    out = []
    for vertex, start, opening, reach, part in _vertex_wedges(domain):
        bc = problem.bcs.get(part)
        if isinstance(bc, Dirichlet):
            condition = "dirichlet"
        elif isinstance(bc, Robin) and not callable(bc.alpha) and bc.alpha == 0:
            condition = "neumann"
        else:
            continue
        R = min(float(radius), 0.9 * reach)
        if not R > 0:
            continue
        x = _sector_points(vertex, start, opening, R)
        if np.any(problem.in_layer(x)):
            continue
        kappa = np.broadcast_to(np.asarray(problem.kappa_at(x), np.complex128), (len(x),))
        k0 = kappa[0]
        if np.any(np.abs(kappa - k0) > 1e-12 * abs(k0)) or k0.imag != 0 or not k0.real > 0:
            continue
        k = math.sqrt(k0.real)
        f = problem.source_at(x)
        if sources and f is not None and _source_weight(f, R, opening, k, problem) > SOURCE_TOLERANCE:
            continue
        if problem.uses_operator:
            a, b = problem.operator_at(x)
            if np.any(a != 1) or np.any(b != 0):
                continue
        out.append(Wedge(vertex, start, opening, R, k, condition))
    return out


def rows_corner_radius(problem) -> float | None:
    """The corner weights' radius for a run that adds the corner rows:
    :data:`CORNER_WAVELENGTHS_WITH_ROWS` wavelengths, where every re-entrant corner of the
    problem takes rows on a sector that holds its weighted-down disc; else None (the problem's
    own radius stands: a corner without rows would radiate from the wider region)."""
    current = getattr(problem.sampler, "corner_radius", None)
    if current is None or not math.isfinite(current) or not problem.wavenumber > 0:
        return None
    radius = CORNER_WAVELENGTHS_WITH_ROWS * 2 * math.pi / float(problem.wavenumber)
    corners, sizes = problem.domain.reentrant_corners()
    wedges = corner_wedges(problem, CORNER_ROW_RADIUS * radius)
    if len(wedges) != len(corners):
        return None
    for c, size in zip(corners, sizes):   # each corner's weighted disc (corner_weights' ρ) within its sector
        w = [w for w in wedges if np.allclose(w.vertex, c)]
        if not w or w[0].radius < min(radius, 0.5 * float(size)):
            return None
    return radius


def _error_per_moment(opening: float, k: float, problem) -> float:
    """``sqrt(π/(α k L))``: about the relative error a unit moment's wave causes, L the domain's
    size ``sqrt(volume)`` (module docstring)."""
    return math.sqrt(math.pi / (opening * k * math.sqrt(float(problem.domain.volume))))


def _source_weight(f, radius: float, opening: float, k: float, problem) -> float:
    """A bound on the error that a source in the sector would make the rows' targets miss: its
    moments at most ``area · max |f|`` (``|φ_n| <= 1``), times :func:`_error_per_moment`. (A
    point source's Gaussian tail a few widths away passes; a source in the sector does not.)"""
    area = 0.5 * opening * radius * radius
    return area * float(np.max(np.abs(np.asarray(f)))) * _error_per_moment(opening, k, problem)


def wedge_functionals(w: Wedge) -> tuple[NDArray, NDArray, NDArray, NDArray]:
    """The moments of a sector as sums of point functionals: ``(x [M, 2], b [M, 2], c [M],
    W [M, N])``, each node's functional ``ℓ_i(u) = b_i·∇u(x_i) + c_i u(x_i)`` (a value or a
    derivative), and ``m_n = Σ_i W[i, n] ℓ_i(u)`` (module docstring)."""
    k, R, alpha, nus = w.k, w.radius, w.opening, w.orders
    from scipy.special import jv, jvp

    g, gw = np.polynomial.legendre.leggauss(ARC_NODES)
    th = 0.5 * alpha * (g + 1.0)
    wa = 0.5 * alpha * gw * R
    rhat = np.stack([np.cos(w.start + th), np.sin(w.start + th)], 1)
    xa = w.vertex + R * rhat
    ang = w.angular(th)                                    # [A, N]
    arc_value = -wa[:, None] * k * jvp(nus, k * R)[None] * ang     # − u ∂_r φ
    arc_slope = wa[:, None] * jv(nus, k * R)[None] * ang           # + φ ∂_r u
    t, tw = np.polynomial.legendre.leggauss(EDGE_NODES)
    t, tw = 0.5 * (t + 1.0), 0.5 * tw
    r = R * t ** 3
    we = 3.0 * R * t ** 2 * tw
    xs, bs, cs, Ws = [xa, xa], [np.zeros((len(xa), 2)), rhat], [np.ones(len(xa)), np.zeros(len(xa))], [arc_value, arc_slope]
    J = jv(nus[None], k * r[:, None])                      # [E, N]
    for theta, side in ((0.0, -1.0), (alpha, 1.0)):        # n = −θ̂ on θ = 0, +θ̂ on θ = α
        e = np.array([math.cos(w.start + theta), math.sin(w.start + theta)])
        normal = side * np.array([-e[1], e[0]])
        xe = w.vertex + r[:, None] * e
        if w.condition == "dirichlet":   # − u ∂_n φ, ∂_n φ = side (ν/r) J_ν cos(νθ)
            dn = side * nus[None] * J / r[:, None] * np.cos(nus * theta)[None]
            xs.append(xe), bs.append(np.zeros((len(xe), 2))), cs.append(np.ones(len(xe))), Ws.append(-we[:, None] * dn)
        else:                            # + φ ∂_n u, φ = J_ν cos(νθ)
            phi = J * np.cos(nus * theta)[None]
            xs.append(xe), bs.append(np.tile(normal, (len(xe), 1))), cs.append(np.zeros(len(xe))), Ws.append(we[:, None] * phi)
    return np.concatenate(xs), np.concatenate(bs), np.concatenate(cs), np.concatenate(Ws)


def corner_rows(problem, zero_field_loss: float, weight: float = CORNER_ROW_WEIGHT,
                radius: float | None = None) -> tuple[NDArray, NDArray, NDArray, NDArray] | None:
    """The corner rows of ``problem`` (module docstring) as point functionals and their weights:
    ``(x [M, 2], b [M, 2], c [M], C [M, q])``, the q = Σ N rows ``Σ_i C[i, j] ℓ_i(u)`` (each
    taken on the real and the imaginary part), every sector's moments times ``weight ·
    sqrt(zero_field_loss · π / (α k L))``; None where no corner takes rows."""
    wedges = corner_wedges(problem, radius)
    if not wedges or not weight > 0 or not zero_field_loss > 0:
        return None
    parts = [wedge_functionals(w) for w in wedges]
    q = sum(p[3].shape[1] for p in parts)
    C = np.zeros((sum(len(p[0]) for p in parts), q))
    i = j = 0
    for w, (x, _, _, W) in zip(wedges, parts):
        C[i:i + len(x), j:j + W.shape[1]] = W * (weight * math.sqrt(zero_field_loss) * _error_per_moment(w.opening, w.k, problem))
        i, j = i + len(x), j + W.shape[1]
    return (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]),
            np.concatenate([p[2] for p in parts]), C)


def corner_moments(problem, field: Callable[[NDArray], tuple[NDArray, NDArray]],
                   radius: float | None = None) -> list[NDArray[np.complex128]]:
    """Each sector's moments ``m_n`` (unweighted) of a field given as ``x [M, 2] -> (u [M],
    ∇u [M, 2])``: zero for a field without residual in the sector (a check of a solution, or of a
    model's corners)."""
    out = []
    for w in corner_wedges(problem, radius):
        x, b, c, W = wedge_functionals(w)
        u, grad = field(x)
        values = c * np.asarray(u, np.complex128) + np.sum(b * np.asarray(grad, np.complex128), axis=1)
        out.append(W.T @ values)
    return out
