"""The corners' singular functions: the part of a field a smooth network cannot follow by a vertex.

At a vertex where the domain's angle α exceeds π (a polygonal obstacle's corners seen from
outside, an L-shaped domain's inner corner) a Helmholtz solution is, in the sector about it,

    u = Σ_m c_m J_ν(kr) cos(νθ)   (a sound-hard, Neumann corner; sin(νθ) for a Dirichlet one),

``ν = mπ/α``, θ measured from one edge through the domain. The orders with ``ν < 2`` and ν not
an integer have unbounded second derivatives at the vertex (the first, ``ν = π/α < 1``, an
unbounded gradient): a smooth network can only approximate them, and by a sound-hard vertex its
approximation decides the whole field. On a point source by a sound-hard triangle the
decomposed network levelled at 0.25 from ``fd_solve``; the same field posed with its values on
the edges by the vertices, or with these functions added to the model, reached 1e-2
(docs/benchmarks.md).

:class:`CornerSingularities` adds them to a model's field: ``ψ_{c,m} = χ(r) J_ν(kr) cos(νθ)``
(or sin) about each corner c, χ = 1 within :data:`SINGULAR_INNER` of the sector's radius R and
falling to 0 at R by a quintic in r (C²: the PDE rows read Δψ). Each ψ meets its corner's
condition on both edges (``∂ψ/∂n = 0`` or ``ψ = 0``: χ is radial, so ∂χ/∂n = 0 on an edge through
the vertex) and solves the Helmholtz equation where χ = 1, so its residual lies on the ring
``R/3 < r < R`` alone. A run adds them with complex amplitudes found by least squares at every
step (:class:`helmpinn.models.decomposition.SingularResiduals`: the amplitudes enter the
residual linearly through constant columns, which are projected out exactly); the network then
represents the smooth rest. The sectors are the corner rows' (:func:`~helmpinn.problems.corners.corner_wedges`:
no other boundary, no PML, a constant real κ and the plain Laplacian), of radius
:data:`SINGULAR_WAVELENGTHS` wavelengths, but a source may reach into them (the rows' moments
need a source-free sector; a source is part of the smooth rest the network takes). Below the
decomposition's size rule a problem whose corners take them is still decomposed
(:func:`helmpinn.defaults.should_decompose`): one network does not add them.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .corners import Wedge, corner_wedges

__all__ = ["CornerSingularities", "corner_singularities", "singular_orders", "SINGULAR_INNER",
           "SINGULAR_WAVELENGTHS", "MAX_CORNERS"]

#: χ = 1 within this share of a sector's radius (module docstring).
SINGULAR_INNER = 1.0 / 3.0
#: The sectors' radius in wavelengths (at most 0.9 of the distance to another boundary).
SINGULAR_WAVELENGTHS = 0.9
#: A model file's corners at most (:meth:`CornerSingularities.from_config`).
MAX_CORNERS = 10_000


def singular_orders(opening: float) -> NDArray[np.float64]:
    """The orders ν = mπ/α (m >= 1) below 2 that are not integers: those whose second
    derivatives are unbounded at a vertex of angle α = ``opening``."""
    nus = np.arange(1, int(2 * opening / math.pi) + 2) * math.pi / opening
    nus = nus[nus < 2]
    return nus[np.abs(nus - np.round(nus)) > 1e-9]


def _cutoff(r: NDArray, R: float) -> tuple[NDArray, NDArray, NDArray]:
    """χ(r), χ'(r), χ''(r): 1 within ``SINGULAR_INNER · R``, a quintic step down to 0 at R."""
    r0 = SINGULAR_INNER * R
    d = R - r0
    s = np.clip((r - r0) / d, 0.0, 1.0)
    chi = 1.0 - s ** 3 * (10.0 - 15.0 * s + 6.0 * s * s)
    d1 = -30.0 * s * s * (1.0 - s) ** 2 / d
    d2 = -60.0 * s * (1.0 - s) * (1.0 - 2.0 * s) / (d * d)
    return chi, d1, d2


class CornerSingularities:
    """The singular functions of the corners ``wedges`` (module docstring), n = Σ over the
    corners of their :func:`singular_orders`, with complex ``amplitudes`` [n] (zeros by default)
    multiplying them in :meth:`field`."""

    def __init__(self, wedges: Sequence[Wedge], amplitudes: ArrayLike | None = None):
        self.wedges = tuple(wedges)
        self.orders = [singular_orders(w.opening) for w in self.wedges]
        self.count = int(sum(len(o) for o in self.orders))
        a = np.zeros(self.count, np.complex128) if amplitudes is None else np.asarray(amplitudes, np.complex128)
        if a.shape != (self.count,) or not np.all(np.isfinite(a)):
            raise ValueError(f"amplitudes: expected {self.count} finite complex numbers, got shape {a.shape}")
        self.amplitudes = a.copy()

    def functions(self, x: ArrayLike) -> tuple[NDArray, NDArray, NDArray]:
        """``(ψ [N, n], ∇ψ [N, n, 2], Δψ [N, n])`` at the points x [N, 2] (real; zero beyond each
        sector's radius)."""
        x = np.asarray(x, np.float64)
        values, grads, laps = [], [], []
        from scipy.special import jv, jvp

        for w, nus in zip(self.wedges, self.orders):
            d = x - w.vertex
            r = np.hypot(d[:, 0], d[:, 1])
            near = r < w.radius
            rs = np.where(near & (r > 0), r, 1.0)
            ta = np.arctan2(d[:, 1], d[:, 0])
            th = np.mod(ta - w.start, 2 * math.pi)
            th = np.where(th > math.pi + 0.5 * w.opening, th - 2 * math.pi, th)   # the first edge: 0, not 2π − ε
            er = np.stack([np.cos(ta), np.sin(ta)], 1)
            et = np.stack([-er[:, 1], er[:, 0]], 1)
            chi, c1, c2 = _cutoff(rs, w.radius)
            for nu in nus:
                J, Jr = jv(nu, w.k * rs), w.k * jvp(nu, w.k * rs)
                if w.condition == "dirichlet":
                    ang, dang = np.sin(nu * th), nu * np.cos(nu * th)
                else:
                    ang, dang = np.cos(nu * th), -nu * np.sin(nu * th)
                phi, dr, dt = J * ang, Jr * ang, J / rs * dang
                psi = chi * phi
                grad = chi[:, None] * (dr[:, None] * er + dt[:, None] * et) + (c1 * phi)[:, None] * er
                lap = -w.k * w.k * psi + 2.0 * c1 * dr + phi * (c2 + c1 / rs)
                values.append(np.where(near, psi, 0.0))
                grads.append(np.where(near[:, None], grad, 0.0))
                laps.append(np.where(near & (r > 0), lap, 0.0))
        if not values:
            return np.zeros((len(x), 0)), np.zeros((len(x), 0, 2)), np.zeros((len(x), 0))
        return np.stack(values, 1), np.stack(grads, 1), np.stack(laps, 1)

    def columns(self, x: ArrayLike, a: ArrayLike, b: ArrayLike, c: ArrayLike) -> NDArray[np.complex128]:
        """``[N, n]``: each function through the rows ``Σ_a a_a ∂_aa + b·∇ + c`` at x (complex
        ``a, b [N, 2]``, ``c [N]``: :class:`helmpinn.models.decomposition.Rows`). A row that reads a
        function must have ``a_xx = a_yy`` (the sectors hold no PML); ValueError otherwise."""
        psi, grad, lap = self.functions(x)
        a, b, c = (np.asarray(v, np.complex128) for v in (a, b, c))
        reads = np.any(psi != 0, axis=1) | np.any(lap != 0, axis=1)
        if np.any(a[reads, 0] != a[reads, 1]):
            raise ValueError("rows: a corner's singular functions are read by a row with a_xx != a_yy "
                             "(a stretched operator inside a corner's sector)")
        return a[:, :1] * lap + np.einsum("nd,nkd->nk", b, grad) + c[:, None] * psi

    def field(self, x: ArrayLike) -> NDArray[np.complex128]:
        """``Σ a_j ψ_j`` at x [N, 2] (complex [N])."""
        if not self.count:
            return np.zeros(len(np.asarray(x)), np.complex128)
        return self.functions(x)[0] @ self.amplitudes

    def config(self) -> dict[str, Any]:
        """The JSON form (:meth:`from_config`)."""
        return {"wedges": [{"vertex": w.vertex.tolist(), "start": w.start, "opening": w.opening, "radius": w.radius,
                            "k": w.k, "condition": w.condition} for w in self.wedges],
                "amplitudes": [[float(z.real), float(z.imag)] for z in self.amplitudes]}

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> "CornerSingularities":
        """The singular functions of :meth:`config`'s form, each entry checked (ValueError)."""
        if not isinstance(cfg["wedges"], list) or len(cfg["wedges"]) > MAX_CORNERS:
            raise ValueError(f"singular: expected a list of at most {MAX_CORNERS} corners")
        wedges = []
        for w in cfg["wedges"]:
            vertex = np.asarray(w["vertex"], np.float64)
            nums = [float(w[key]) for key in ("start", "opening", "radius", "k")]
            if vertex.shape != (2,) or not np.all(np.isfinite(vertex)) or not all(math.isfinite(v) for v in nums):
                raise ValueError(f"singular: a corner's vertex and numbers must be finite, got {w!r}")
            start, opening, radius, k = nums
            if not (math.pi < opening < 2 * math.pi and radius > 0 and k > 0) or w["condition"] not in ("dirichlet", "neumann"):
                raise ValueError(f"singular: expected an opening in (π, 2π), a positive radius and k, and a "
                                 f"'dirichlet' or 'neumann' condition, got {w!r}")
            wedges.append(Wedge(vertex, start, opening, radius, k, str(w["condition"])))
        amps = np.asarray(cfg["amplitudes"], np.float64).reshape(-1, 2)
        return cls(wedges, amps[:, 0] + 1j * amps[:, 1])


def corner_singularities(problem: Any) -> CornerSingularities | None:
    """The singular functions of every re-entrant corner of ``problem`` (2-D), each on its sector
    of :data:`SINGULAR_WAVELENGTHS` wavelengths (:func:`~helmpinn.problems.corners.corner_wedges`),
    where every such corner has one; else None (a corner left without them would still need the
    corner weights, which the functions' runs drop)."""
    if problem.dim != 2 or not problem.wavenumber > 0:
        return None
    corners, _ = problem.domain.reentrant_corners()
    if not len(corners):
        return None
    wedges = corner_wedges(problem, SINGULAR_WAVELENGTHS * 2 * math.pi / float(problem.wavenumber), sources=False)
    if len(wedges) != len(corners):
        return None
    out = CornerSingularities(wedges)
    return out if out.count else None
