"""Domain-decomposed networks: ``u = g + φ Σ_j ω_j N_j`` over overlapping subdomains (FBPINNs).

A :class:`DecomposedModel` covers a box ``[lo, hi]`` (1-, 2- or 3-D; with a PML, the box of the
layer's outer wall) by one or more **levels**, each a regular grid of overlapping subdomains.
Along each axis a level has ``n`` subdomains of centres ``lo + (i + ½)Δ`` (``Δ = (hi − lo)/n``)
and half-widths ``h = ½Δ(1 + overlap)`` (or, on a graded level, cells of their own widths Δ_i
between given edges, each subdomain centred on its cell with ``h_i = ½Δ_i(1 + overlap)``:
:class:`Level`); subdomain j's window is the product over axes of
normalised bumps

    ω_j(x) = Π_a v_{i_a}(x_a) / Σ_i v_i(x_a),   v_i(x) = exp(−1/(1 − t²)), t = (x − c_i)/h (for ``|t| < 1``),

smooth (C^∞), zero outside the subdomain, and a partition of unity on the box (Σ_j ω_j = 1 on
each level). A level of grid ``(1, …, 1)`` is one network over the whole box (ω = 1), the coarse
level of multilevel FBPINNs; the levels add (``u = Σ_levels Σ_j ω_j N_j``). Each subdomain has
its own small Fourier-feature network ``N_j`` (a :class:`helmpinn.Model` of its level's
:class:`~helmpinn.ModelSpec`) in local, normalised coordinates ``ξ = (x − c_j)/h_j``.

**Residuals through the core.** Every residual row of the loss is a linear operator applied to u,

    r = s (Σ_a a_a ∂²u/∂x_a² + Σ_a b_a ∂u/∂x_a + c u − f)

(:class:`Rows`: PDE rows carry the PML / density coefficients, Dirichlet data rows have
``a = b = 0, c = 1``, Robin rows ``a = 0, b = n, c = α``; ``s`` is the row's loss scale). With
``ψ_j = φ ω_j`` the product rule makes the operator on ``ψ_j N_j`` the core's general operator
(docs/MATH.md) on ``N_j`` with per-point coefficients, in local coordinates

    a′_a = s a_a ψ / h_a²,    b′_a = s (2 a_a ∂_aψ + b_a ψ) / h_a,
    c′ = s (Σ_a a_a ∂²_aψ + Σ_a b_a ∂_aψ + c ψ),

so each subnetwork's residual contribution, Jacobian block, ``J v`` and ``Jᵀw`` are one core call
(:class:`DecomposedResiduals`) on the points its subdomain covers, and a row of the model's
residual is the sum over the subdomains that cover its point, minus ``s f``. The Jacobian is
block-sparse: a point sees only the few subdomains that cover it.

**Hard Dirichlet constraint.** ``constraint=BoxConstraint(lo, hi, scale)`` multiplies the sum by
``φ = Π_a tanh((x_a − lo_a)/scale) tanh((hi_a − x_a)/scale)`` (u = 0 on the box's faces, the
FBPINN papers' choice with ``scale = 1/k``); the lift g is zero (homogeneous conditions only).
"""
from __future__ import annotations

import itertools
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Iterator, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _core, distributed
from .._checks import integer, real_number
from .._files import read_npz, write_atomic
from ..problems.batch import TERMS, Batch, alike_on_every_axis, operator_a
from ..problems.singular import CornerSingularities
from .model import Model
from ..params import init_params, sigma_for

__all__ = ["Level", "BoxConstraint", "Rows", "DecomposedModel", "DecomposedResiduals", "SingularResiduals",
           "assign_subdomains", "term_means", "CARRIER_TERM", "FORMAT", "STATE_KEY", "WINDOW_CUTOFF", "MIN_OVERLAP", "MIN_CONSTRAINT_SCALE",
           "MAX_SUBDOMAINS", "WINDOW_CHUNK", "subdomain_grid", "window_times"]

#: The ``kind`` written into a saved decomposed model.
FORMAT = "helmpinn-decomposed-1"
#: The metadata key under which a decomposed model's file keeps its optimiser state.
STATE_KEY = "optimizer_state"
#: Window values below this count as outside a subdomain (its network is not evaluated there).
WINDOW_CUTOFF = 1e-13
#: The least overlap: between two subdomains the bumps are ``exp(−1/(2 overlap))`` about, which
#: below an overlap of 7e-4 underflows to 0 and leaves points outside every window.
MIN_OVERLAP = 0.01
#: The constraint's least scale, relative to the box's largest side: below it φ's second
#: derivative (``1/scale²``) is not finite.
MIN_CONSTRAINT_SCALE = 1e-6
#: The most subdomains a model may have (over all its levels): each costs about a kilobyte of
#: bookkeeping before its parameters, and a grid read from a file is checked against it before
#: anything is enumerated.
MAX_SUBDOMAINS = 1 << 18
#: The points whose windows are computed at a time (:meth:`DecomposedModel.pieces`,
#: :meth:`~DecomposedModel.predict`): the windows' scratch is a few arrays of this many points
#: times the candidate subdomains per point (about ``(2 + overlap)^d``).
WINDOW_CHUNK = 1 << 15


def _bump(t: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """``exp(−1/(1 − t²))`` on ``|t| < 1`` (0 elsewhere) and its first two derivatives in t."""
    v, d1, d2 = np.zeros_like(t), np.zeros_like(t), np.zeros_like(t)
    inside = np.abs(t) < 1.0
    ti = t[inside]
    q = 1.0 - ti * ti
    e = np.exp(-1.0 / q)
    g1 = -2.0 * ti / q ** 2                   # d/dt of −1/q
    g2 = -2.0 / q ** 2 - 8.0 * ti * ti / q ** 3
    v[inside], d1[inside], d2[inside] = e, e * g1, e * (g1 * g1 + g2)
    return v, d1, d2


def _box(lo: ArrayLike, hi: ArrayLike, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """``lo, hi`` as float64 vectors of one length whose every coordinate is finite with
    ``hi > lo``, or a ValueError naming ``name``."""
    try:
        a, b = np.asarray(lo, np.float64).reshape(-1), np.asarray(hi, np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected numbers, got {lo!r}, {hi!r}") from None
    if a.shape != b.shape or not a.size or not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))) \
            or not np.all(b > a):
        raise ValueError(f"{name}: expected finite coordinates of one length with hi > lo, got {a}, {b}")
    return a, b


def subdomain_grid(grid: Any, d: int, name: str = "grid") -> tuple[int, ...]:
    """``grid`` as d integer counts >= 1 (one per axis; a count is never truncated: 1.5 is an
    error) of at most :data:`MAX_SUBDOMAINS` subdomains, or a TypeError/ValueError naming
    ``name``."""
    counts = list(grid) if isinstance(grid, (list, tuple, np.ndarray)) else [grid]
    if len(counts) != d:
        raise ValueError(f"decomposition: {name}: expected {d} counts (one per axis), got {grid!r}")
    out = tuple(integer("decomposition", name, n, low=1) for n in counts)
    if math.prod(out) > MAX_SUBDOMAINS:
        raise ValueError(f"decomposition: {name}: {' x '.join(map(str, out))} = {math.prod(out):,} subdomains, "
                         f"more than {MAX_SUBDOMAINS:,} (helmpinn.models.decomposition.MAX_SUBDOMAINS)")
    return out


class Level:
    """A grid of ``grid[a]`` overlapping subdomains along each axis of ``[lo, hi]``.

    ``overlap`` (:data:`MIN_OVERLAP` to 4): each subdomain's width is ``(1 + overlap)`` times
    its cell's. ``edges``: None for equal cells, or per axis the ``grid[a] + 1`` cell edges from
    ``lo[a]`` to ``hi[a]`` (increasing; a graded grid, finer where the field varies faster:
    :func:`helmpinn.defaults.graded_edges`), each subdomain then centred on its cell with its own half-widths
    (:meth:`half_of`); neighbouring subdomains' ends must keep their order (a cell at least
    ``overlap / (2 + overlap)`` of its neighbour's width: within a factor 4.3 at overlap 0.6).
    """

    def __init__(self, lo: ArrayLike, hi: ArrayLike, grid: Sequence[int], overlap: float = 0.5,
                 edges: Sequence[ArrayLike] | None = None):
        self.lo, self.hi = _box(lo, hi, "lo, hi")
        d = len(self.lo)
        if d not in (1, 2, 3):
            raise ValueError(f"lo, hi: expected 1 to 3 coordinates each, got {self.lo}, {self.hi}")
        grid = subdomain_grid(grid, d)
        overlap = real_number("decomposition", "overlap", overlap, low=MIN_OVERLAP, low_open=False, high=4.0)
        self.grid, self.overlap, self.dim = grid, overlap, d
        self.edges = None if edges is None else self._checked_edges(edges)
        if self.edges is None:
            spacing = (self.hi - self.lo) / np.array(grid)
            self.half = 0.5 * spacing * (1.0 + overlap)
            self.centres = [self.lo[a] + (np.arange(grid[a]) + 0.5) * spacing[a] for a in range(d)]
            self.halves = [np.full(grid[a], self.half[a]) for a in range(d)]
        else:
            self.centres = [0.5 * (e[1:] + e[:-1]) for e in self.edges]
            self.halves = [0.5 * np.diff(e) * (1.0 + overlap) for e in self.edges]
            self.half = np.array([float(np.mean(h)) for h in self.halves])   # the mean per axis
            # the subdomains that may cover a point of axis a: those whose support's right end
            # lies past it, K of them at most (the most supports over any point, and spares)
            self._right = [c + h for c, h in zip(self.centres, self.halves)]
            most = 1
            for c, h in zip(self.centres, self.halves):
                ends = np.concatenate([c - h, c + h])
                step = np.concatenate([np.ones(len(c)), -np.ones(len(c))])
                most = max(most, int(np.max(np.cumsum(step[np.lexsort((step, ends))]))))
            self._graded_K = most + 2
        self.indices = list(np.ndindex(*grid))

    def _checked_edges(self, edges: Sequence[ArrayLike]) -> list[NDArray[np.float64]]:
        """``edges`` as one increasing float64 array of ``grid[a] + 1`` entries per axis, from lo to
        hi, whose subdomains' ends keep their order, or a ValueError naming the axis."""
        if not isinstance(edges, (list, tuple)) or len(edges) != self.dim:
            raise ValueError(f"edges: expected None or {self.dim} arrays of cell edges (one per axis), got {edges!r}")
        out = []
        for a, e in enumerate(edges):
            try:
                e = np.asarray(e, np.float64).reshape(-1)
            except (TypeError, ValueError):
                raise ValueError(f"edges[{a}]: expected numbers, got {e!r}") from None
            n = self.grid[a]
            tol = 1e-9 * float(self.hi[a] - self.lo[a])
            if len(e) != n + 1 or not np.all(np.isfinite(e)) or not np.all(np.diff(e) > 0) \
                    or abs(e[0] - self.lo[a]) > tol or abs(e[-1] - self.hi[a]) > tol:
                raise ValueError(f"edges[{a}]: expected {n + 1} increasing edges from {self.lo[a]:g} to "
                                 f"{self.hi[a]:g} (grid {n} along axis {a}), got {np.round(e, 6).tolist()}")
            e = e.copy()
            e[0], e[-1] = self.lo[a], self.hi[a]
            c, h = 0.5 * (e[1:] + e[:-1]), 0.5 * np.diff(e) * (1.0 + self.overlap)
            if n > 1 and not (np.all(np.diff(c + h) > 0) and np.all(np.diff(c - h) > 0)):
                raise ValueError(f"edges[{a}]: neighbouring cells too unequal: their subdomains' ends (overlap "
                                 f"{self.overlap:g}) are out of order; keep neighbours within a factor "
                                 f"{(2 + self.overlap) / self.overlap:.3g} of each other")
            out.append(e)
        return out

    def half_of(self, index: tuple[int, ...]) -> NDArray[np.float64]:
        """The half-widths [d] of the subdomain of grid index ``index``."""
        return np.array([self.halves[a][i] for a, i in enumerate(index)])

    def __len__(self) -> int:
        return len(self.indices)

    def config(self) -> dict[str, Any]:
        out: dict[str, Any] = {"grid": list(self.grid), "overlap": self.overlap}
        if self.edges is not None:
            out["edges"] = [e.tolist() for e in self.edges]
        return out

    def axis_windows(self, x: NDArray) -> list[tuple[NDArray, NDArray, NDArray]]:
        """Per axis, the normalised 1-D windows and their first and second derivatives in x,
        each ``[grid[a], N]``."""
        out = []
        for a in range(self.dim):
            c, h = self.centres[a], self.halves[a][:, None]
            v, d1, d2 = _bump((x[None, :, a] - c[:, None]) / h)
            d1, d2 = d1 / h, d2 / (h * h)
            S, S1, S2 = v.sum(0), d1.sum(0), d2.sum(0)
            w = v / S
            w1 = (d1 - w * S1) / S
            w2 = (d2 - 2.0 * w1 * S1 - w * S2) / S
            out.append((w, w1, w2))
        return out

    def axis_candidates(self, xa: NDArray, a: int) -> tuple[NDArray, NDArray, NDArray, NDArray]:
        """For the coordinates ``xa`` [C] along axis a: the subdomains that may cover each point,
        ``i`` [K, C] (K = ⌊1 + overlap⌋ + 3 on equal cells, the most supports over a point and two
        spares on graded ones; increasing along K; −1 past the grid's ends), and
        their normalised windows and first and second derivatives ``w, w1, w2`` [K, C] (0 where
        i is −1 or the bump vanishes). These are the nonzero entries of :meth:`axis_windows`,
        the same numbers (its sums over the grid add only exact zeros besides), in O(K C)
        memory instead of O(grid[a] C)."""
        g, c = self.grid[a], self.centres[a]
        if self.edges is None:
            h = self.half[a]
            spacing = (self.hi[a] - self.lo[a]) / g
            K = int(math.floor(1.0 + self.overlap)) + 3   # one spare either side of the support's ⌈1 + overlap⌉
            first = np.floor((xa - self.lo[a]) / spacing - 0.5 * (2.0 + self.overlap)).astype(np.int64)
        else:   # graded: from the first subdomain whose support ends past the point, less a spare
            K = self._graded_K
            first = np.searchsorted(self._right[a], xa, side="right").astype(np.int64) - 1
        i = first[None, :] + np.arange(K)[:, None]
        outside = (i < 0) | (i >= g)
        if self.edges is not None:
            h = self.halves[a][np.clip(i, 0, g - 1)]
        v, d1, d2 = _bump((xa[None, :] - c[np.clip(i, 0, g - 1)]) / h)
        v[outside], d1[outside], d2[outside] = 0.0, 0.0, 0.0
        d1, d2 = d1 / h, d2 / (h * h)
        S, S1, S2 = v.sum(0), d1.sum(0), d2.sum(0)
        w = v / S
        w1 = (d1 - w * S1) / S
        w2 = (d2 - 2.0 * w1 * S1 - w * S2) / S
        i[outside] = -1
        return i, w, w1, w2

    def covers(self, x: NDArray, derivatives: bool = True) -> tuple[NDArray, ...]:
        """Every (subdomain, point) pair of the points x [C, d] whose window exceeds
        :data:`WINDOW_CUTOFF`, ordered by subdomain (C order of the grid), then point:
        ``(sub [M], pt [M], ω [M], w [M, d], w1 [M, d], w2 [M, d])``, the per-axis windows and
        their derivatives (:meth:`axis_candidates`) only with ``derivatives`` (else None). ω is
        their product over the axes taken in axis order, as :meth:`axis_windows`' would be."""
        ax = [self.axis_candidates(x[:, a], a) for a in range(self.dim)]
        K = ax[0][0].shape[0]
        parts = []
        for ks in itertools.product(range(K), repeat=self.dim):
            om = np.ones(len(x))
            for a, k in enumerate(ks):
                om = om * ax[a][1][k]
            pt = np.flatnonzero(om > WINDOW_CUTOFF)
            if not len(pt):
                continue
            sub = np.zeros(len(pt), np.int64)
            for a, k in enumerate(ks):
                sub = sub * self.grid[a] + ax[a][0][k][pt]
            ws = tuple(np.stack([ax[a][m][k][pt] for a, k in enumerate(ks)], 1) for m in (1, 2, 3)) \
                if derivatives else (None, None, None)
            parts.append((sub, pt, om[pt], *ws))
        if not parts:
            e = np.zeros((0, self.dim))
            return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                    *((e, e, e) if derivatives else (None, None, None)))
        order = np.argsort(np.concatenate([p[0] for p in parts]) * max(len(x), 1)
                           + np.concatenate([p[1] for p in parts]))
        return tuple(None if parts[0][m] is None else np.concatenate([p[m] for p in parts])[order]
                     for m in range(6))

    def centre(self, index: tuple[int, ...]) -> NDArray:
        return np.array([self.centres[a][i] for a, i in enumerate(index)])


class BoxConstraint:
    """``φ = Π_a tanh((x_a − lo_a)/scale) tanh((hi_a − x_a)/scale)``: zero on the faces of
    ``[lo, hi]``, about 1 more than ``scale`` inside (the hard constraint ``u = φ Σ ω_j N_j``)."""

    def __init__(self, lo: ArrayLike, hi: ArrayLike, scale: float):
        self.lo, self.hi = _box(lo, hi, "BoxConstraint: lo, hi")
        least = MIN_CONSTRAINT_SCALE * float(np.max(self.hi - self.lo))
        scale = real_number("BoxConstraint", "scale", scale, low=0.0)
        if scale < least:
            raise ValueError(f"BoxConstraint: scale must be at least {least:g} ({MIN_CONSTRAINT_SCALE:g} times the "
                             f"box's largest side), got {scale!r}")
        self.scale = scale

    def config(self) -> dict[str, Any]:
        return {"kind": "box", "lo": self.lo.tolist(), "hi": self.hi.tolist(), "scale": self.scale}

    def __call__(self, x: NDArray) -> tuple[NDArray, NDArray, NDArray]:
        """``(φ [N], ∂_aφ [N, d], ∂²_aφ [N, d])`` at x."""
        s = self.scale
        p = np.tanh((x - self.lo) / s)
        q = np.tanh((self.hi - x) / s)
        p1, q1 = (1 - p * p) / s, -(1 - q * q) / s
        p2, q2 = -2 * p * (1 - p * p) / s ** 2, -2 * q * (1 - q * q) / s ** 2
        t, t1, t2 = p * q, p1 * q + p * q1, p2 * q + 2 * p1 * q1 + p * q2   # per axis [N, d]
        phi = np.prod(t, axis=1)
        d = x.shape[1]
        d1, d2 = np.empty_like(x), np.empty_like(x)
        for a in range(d):
            rest = np.prod(np.delete(t, a, axis=1), axis=1) if d > 1 else np.ones(len(x))
            d1[:, a], d2[:, a] = t1[:, a] * rest, t2[:, a] * rest
        return phi, d1, d2


@dataclass
class Rows:
    """Residual rows ``s (Σ a_a u_aa + Σ b_a u_a + c u − f)`` at points x, already scaled:
    ``x [N, d]``, ``a, b`` complex ``[N, d]``, ``c, f`` complex ``[N]`` (every one times the row's
    loss scale s), ``term`` the loss term of each row ("pde", "data", "bc"; :data:`CARRIER_TERM`
    for value rows that only carry mode rows)."""

    x: NDArray[np.float64]
    a: NDArray[np.complex128]
    b: NDArray[np.complex128]
    c: NDArray[np.complex128]
    f: NDArray[np.complex128]
    term: NDArray[np.str_]

    def __post_init__(self) -> None:
        self.x = np.ascontiguousarray(self.x, np.float64)
        n, d = self.x.shape
        for name in ("a", "b"):
            v = np.broadcast_to(np.asarray(getattr(self, name), np.complex128), (n, d)).copy()
            setattr(self, name, v)
        for name in ("c", "f"):
            setattr(self, name, np.broadcast_to(np.asarray(getattr(self, name), np.complex128), (n,)).copy())
        self.term = np.broadcast_to(np.asarray(self.term), (n,)).copy()

    def __len__(self) -> int:
        return len(self.x)

    @classmethod
    def from_training_set(cls, ts: Any, weights: Mapping[str, float] | None = None, *,
                          drop: Sequence[str] = ()) -> "Rows":
        """The rows of a :class:`~helmpinn.problems.TrainingSet`: each term scaled by
        ``sqrt(w_t / N_t)`` (the core's loss scaling; ``weights`` default 1 each). ``drop``:
        terms to leave out (e.g. ``("data",)`` when a hard constraint holds the Dirichlet data)."""
        w = {"pde": 1.0, "data": 1.0, "bc": 1.0, **dict(weights or {})}
        parts = []
        d = ts.x_pde.shape[1]
        n = len(ts.x_pde)
        if n and "pde" not in drop:
            s = math.sqrt(w["pde"] / n)
            a = np.ones((n, d)) if ts.a_pde is None else ts.a_pde
            b = np.zeros((n, d)) if ts.b_pde is None else ts.b_pde
            f = np.zeros(n) if ts.f is None else ts.f
            parts.append(cls(ts.x_pde, s * np.asarray(a), s * np.asarray(b), s * np.asarray(ts.kappa),
                             s * np.asarray(f), "pde"))
        m = len(ts.x_data)
        if m and "data" not in drop:
            s = math.sqrt(w["data"] / m)
            parts.append(cls(ts.x_data, 0.0, 0.0, s, s * np.asarray(ts.y), "data"))
        q = len(ts.x_bc)
        if q and "bc" not in drop:
            s = math.sqrt(w["bc"] / q)
            g = np.zeros(q) if ts.g is None else ts.g
            parts.append(cls(ts.x_bc, 0.0, s * ts.n_bc, s * np.asarray(ts.alpha), s * np.asarray(g), "bc"))
        if not parts:
            raise ValueError("from_training_set: no rows (every term empty or dropped)")
        return cls.concat(parts)

    @classmethod
    def from_problem(cls, problem: Any, pde_points: int, bc_points: int, rng: Any = None, *,
                     method: str = "sobol", weights: Mapping[str, float] | None = None,
                     drop: Sequence[str] = ()) -> "Rows":
        """The rows of one draw of ``problem.sample(pde_points, bc_points, rng, method)``
        (PML and density coefficients included; see :meth:`from_training_set`)."""
        return cls.from_training_set(problem.sample(pde_points, bc_points, rng, method),
                                     weights, drop=drop)

    @classmethod
    def concat(cls, parts: Sequence["Rows"]) -> "Rows":
        return cls(*(np.concatenate([getattr(p, k) for p in parts]) for k in ("x", "a", "b", "c", "f", "term")))


def _spec_config(spec: _core.ModelSpec) -> list[int]:
    return [spec.in_dim, spec.ff_dim, spec.hidden_dim, spec.num_hidden_layers]


def _check_parts(levels: Sequence[Level], specs: Sequence[_core.ModelSpec], constraint: Any) -> int:
    """The dimension of a :class:`DecomposedModel`'s ``levels`` (one box for all), after checking
    them, ``specs`` (one per level, of that dimension) and ``constraint`` (None or a
    :class:`BoxConstraint` on that box): a TypeError/ValueError naming the argument."""
    if not levels:
        raise ValueError("levels: expected at least one Level")
    if len(specs) != len(levels):
        raise ValueError(f"specs: expected one ModelSpec per level ({len(levels)}), got {len(specs)}")
    d = levels[0].dim
    for lv in levels:
        if not isinstance(lv, Level):
            raise TypeError(f"levels: expected helmpinn.models.decomposition.Level objects, got {type(lv).__name__}")
        if lv.dim != d or not (np.array_equal(lv.lo, levels[0].lo) and np.array_equal(lv.hi, levels[0].hi)):
            raise ValueError("levels: every level must cover the same box")
    for s in specs:
        if s.in_dim != d:
            raise ValueError(f"specs: expected in_dim {d} (the box's dimension), got {s.in_dim}")
    if constraint is not None and (not isinstance(constraint, BoxConstraint) or len(constraint.lo) != d):
        raise TypeError(f"constraint: expected None or a BoxConstraint in {d} dimensions")
    if constraint is not None:   # φ vanishes on the faces of the model's own box, nowhere else
        tol = 1e-12 * float(np.max(levels[0].hi - levels[0].lo))
        if not (np.allclose(constraint.lo, levels[0].lo, rtol=0, atol=tol)
                and np.allclose(constraint.hi, levels[0].hi, rtol=0, atol=tol)):
            raise ValueError(f"constraint: its box [{constraint.lo.tolist()}, {constraint.hi.tolist()}] is not "
                             f"the model's [{levels[0].lo.tolist()}, {levels[0].hi.tolist()}]")
    if sum(len(lv) for lv in levels) > MAX_SUBDOMAINS:
        raise ValueError(f"levels: {sum(len(lv) for lv in levels):,} subdomains, more than {MAX_SUBDOMAINS:,}")
    return d


def window_times(f: NDArray, f1: NDArray | None, f2: NDArray | None, psi: NDArray, d1: NDArray | None,
                 d2: NDArray | None) -> tuple[NDArray, NDArray | None, NDArray | None]:
    """A window ψ [m] (its partials ``d1``, ``d2`` [m, d], or None for values only) times a
    factor f [m] with partials ``f1``, ``f2``: ``(f ψ, ∂_a(f ψ), ∂²_a(f ψ))`` by the product rule
    (the hard constraint's φ in :meth:`DecomposedModel.pieces`)."""
    if d1 is None or d2 is None:
        return f * psi, None, None
    return (f * psi, f1 * psi[:, None] + f[:, None] * d1,
            f2 * psi[:, None] + 2 * f1 * d1 + f[:, None] * d2)


def _level_covers(lv: Level, x: NDArray, derivatives: bool) -> tuple[NDArray | None, ...]:
    """:meth:`Level.covers` of all the points x, :data:`WINDOW_CHUNK` points at a time
    (the chunks' pairs merged in the order of subdomain, then point)."""
    if len(x) <= WINDOW_CHUNK:
        return lv.covers(x, derivatives)
    chunks = []
    for c0 in range(0, len(x), WINDOW_CHUNK):
        got = lv.covers(x[c0:c0 + WINDOW_CHUNK], derivatives)
        chunks.append([got[0], got[1] + c0, *got[2:]])
    order = np.argsort(np.concatenate([c[0] for c in chunks]), kind="stable")
    out = []
    for m in range(6):
        out.append(None if chunks[0][m] is None else np.concatenate([c[m] for c in chunks])[order])
        for c in chunks:   # each column's chunks freed once merged
            c[m] = None
    return tuple(out)


def _jsonable(obj: Any) -> Any:
    """``obj`` with NumPy scalars and arrays as JSON numbers and lists (complex as [re, im])."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, complex):
        return [obj.real, obj.imag]
    return obj


def term_means(sums: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float]:
    """Each term's unweighted mean (what a :class:`~helmpinn.training.drivers.StepInfo` reports) from
    its weighted sum of squared residuals ``sums`` (a term without rows: 0)."""
    return {t: float(sums.get(t, 0.0)) / weights[t] if weights[t] > 0 else 0.0 for t in TERMS}


class DecomposedModel:
    """``u = φ Σ_levels Σ_j ω_j N_j((x − c_j)/h_j)`` on the box ``[lo, hi]`` (module docstring).

    ``levels``: :class:`Level` objects (each with the same box); ``specs``: one
    :class:`~helmpinn.ModelSpec` per level (its subnetworks' shape); ``params``: the flat float64
    vector of every subnetwork's parameters, level by level, subdomain by subdomain (C order of
    the grid); ``constraint``: None or a :class:`BoxConstraint`. Use :meth:`create` for a freshly
    initialised model.

    It has the run loop's model protocol
    (:class:`~helmpinn.models.model_protocol.TrainableModel`), so a :class:`~helmpinn.Trainer`
    trains it as it is: float64 on the CPU, its own loss on a run's points (:meth:`objective`,
    :meth:`loss_function`, :meth:`training_residuals`; no core network of its own: ``spec`` is
    None), its optimiser state (``optimizer_state``) kept in its file's metadata under
    :data:`STATE_KEY`.
    """

    #: The kind of model, as the drivers' ``trains`` name it (the protocol's ``kind``).
    kind: ClassVar[str] = "decomposed"
    #: The optimiser a Trainer runs on it when none is named.
    default_optimizer: ClassVar[str] = "gn"
    #: No one core network whose loss the run loop computes: the model computes its own.
    spec: ClassVar[None] = None

    def __init__(self, levels: Sequence[Level], specs: Sequence[_core.ModelSpec], params: ArrayLike,
                 constraint: BoxConstraint | None = None, metadata: Mapping[str, Any] | None = None):
        d = _check_parts(levels, specs, constraint)
        self.levels, self.specs, self.constraint = list(levels), list(specs), constraint
        self.singular: CornerSingularities | None = None   # the corners' singular functions in the field
        self.lo, self.hi, self.dim = levels[0].lo, levels[0].hi, d
        self.metadata = dict(metadata or {})
        self.optimizer_state: dict[str, Any] = dict(self.metadata.pop(STATE_KEY, None) or {})
        self.subdomains: list[dict[str, Any]] = []
        off = 0
        for li, (lv, spec) in enumerate(zip(levels, specs)):
            for index in lv.indices:
                P = spec.num_params
                self.subdomains.append({"level": li, "index": index, "centre": lv.centre(index),
                                        "half": lv.half_of(index), "slice": slice(off, off + P)})
                off += P
        params = np.asarray(params)
        if params.shape != (off,) or not np.issubdtype(params.dtype, np.floating):
            raise ValueError(f"params: expected a float vector of {off} parameters, got {params.dtype} {params.shape}")
        self.params = np.ascontiguousarray(params, np.float64).copy()
        self._ws: dict[int, _core.Workspace] = {}

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def create(cls, lo: ArrayLike, hi: ArrayLike, grids: Sequence[Sequence[int]] = ((4, 4),), *,
               overlap: float = 0.5, ff_dim: int = 16, hidden_dim: int = 32, num_hidden_layers: int = 1,
               wavenumber: float | ArrayLike = 1.0, constraint: BoxConstraint | None = None,
               seed: int = 0, edges: Sequence[Sequence[ArrayLike] | None] | None = None) -> "DecomposedModel":
        """Fresh subnetworks on each level of ``grids`` (one grid of counts per level; ``edges``:
        None, or per level None or its cells' edges per axis, :class:`Level`); Fourier
        frequencies ``B ~ N(0, σ²)`` with ``σ = k h / (2π sqrt(d))``
        (:func:`helmpinn.params.sigma_for` of the wavenumber in the subdomain's local coordinates,
        h its mean half-width: the features' angular frequencies have a root mean square of
        ``k h``, as a single network's have of k). ``wavenumber``: k, one number for every
        subdomain or one per subdomain (levels in order, each grid in C order: the largest
        local wavenumber over each subdomain, where the medium varies)."""
        lo = np.asarray(lo, np.float64).reshape(-1)
        if edges is not None and (not isinstance(edges, (list, tuple)) or len(edges) != len(grids)):
            raise ValueError(f"edges: expected None or one entry per level ({len(grids)}), got {edges!r}")
        levels = [Level(lo, hi, g, overlap, None if edges is None else edges[i]) for i, g in enumerate(grids)]
        spec = _core.ModelSpec(len(lo), *(integer("DecomposedModel.create", name, value) for name, value in (
            ("ff_dim", ff_dim), ("hidden_dim", hidden_dim), ("num_hidden_layers", num_hidden_layers))))
        rng = np.random.default_rng(None if seed is None else integer("DecomposedModel.create", "seed", seed, low=0))
        n = sum(len(lv) for lv in levels)
        ks = np.asarray(wavenumber, np.float64).reshape(-1) if np.ndim(wavenumber) else \
            np.full(n, real_number("DecomposedModel.create", "wavenumber", wavenumber, low=0.0))
        if ks.shape != (n,) or not np.all(np.isfinite(ks)) or np.any(ks < 0):
            raise ValueError(f"wavenumber: expected a number >= 0 or {n} of them (one per subdomain), "
                             f"got shape {ks.shape}")
        parts, j = [], 0
        for lv in levels:
            for index in lv.indices:
                sigma = sigma_for(max(float(ks[j]), 1e-12) * float(np.mean(lv.half_of(index))), len(lo))
                parts.append(init_params(spec, dtype="float64", seed=int(rng.integers(1 << 31)),
                                         fourier_sigma=sigma))
                j += 1
        return cls(levels, [spec] * len(levels), np.concatenate(parts), constraint)

    @property
    def num_params(self) -> int:
        return len(self.params)

    @property
    def in_dim(self) -> int:
        """The points' dimension (the box's; as :attr:`helmpinn.Model.in_dim`)."""
        return self.dim

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def dtype(self) -> np.dtype:
        return self.params.dtype

    def to(self, device: str) -> "DecomposedModel":
        """This model, which trains on the CPU only (its products are host arrays)."""
        if device != "cpu":
            raise ValueError(f"device: a decomposed model trains on the CPU (its products are host "
                             f"arrays), got {device!r}; use device='cpu'")
        return self

    def params_host(self) -> NDArray[np.float64]:
        """A copy of the parameters."""
        return self.params.copy()

    def set_params(self, values: ArrayLike) -> None:
        """Overwrite the parameters in place."""
        values = np.asarray(values, np.float64)
        if values.shape != self.params.shape:
            raise ValueError(f"set_params: expected shape {self.params.shape}, got {values.shape}")
        self.params[...] = values

    def copy(self) -> "DecomposedModel":
        """An independent copy (parameters, metadata and optimiser state)."""
        out = type(self)(self.levels, self.specs, self.params.copy(), self.constraint,
                         {**json.loads(json.dumps(_jsonable(self.metadata))),
                          STATE_KEY: _jsonable(self.optimizer_state)})
        if self.singular is not None:
            out.singular = CornerSingularities(self.singular.wedges, self.singular.amplitudes)
        return out

    def __getstate__(self) -> dict[str, Any]:
        """Pickling and ``copy.deepcopy`` leave out the cached Workspaces (rebuilt by the next
        :meth:`predict`; a Workspace holds native buffers and is not picklable), as
        :meth:`helmpinn.Model.__getstate__` does."""
        state = self.__dict__.copy()
        state["_ws"] = {}
        return state

    def __len__(self) -> int:
        return len(self.subdomains)

    def __repr__(self) -> str:
        grids = " + ".join("x".join(map(str, lv.grid)) for lv in self.levels)
        return (f"DecomposedModel({grids} subdomains on [{self.lo.tolist()}, {self.hi.tolist()}], "
                f"{self.num_params} parameters{', hard constraint' if self.constraint else ''})")

    def subnetwork(self, j: int) -> Model:
        """Subdomain j's network as a :class:`helmpinn.Model` whose params share this model's."""
        sd = self.subdomains[j]
        return Model(self.specs[sd["level"]], self.params[sd["slice"]])

    def workspace(self, level: int, dtype: str = "float64") -> _core.Workspace:
        """The core workspace of level ``level``'s subnetworks in ``dtype`` (made once)."""
        key = level if dtype == "float64" else (level, dtype)
        if key not in self._ws:
            self._ws[key] = _core.Workspace(self.specs[level], 2048, dtype=dtype)
        return self._ws[key]

    # -- the windows ---------------------------------------------------------------------------
    def _check_points(self, x: ArrayLike, name: str = "x") -> NDArray[np.float64]:
        x = np.ascontiguousarray(np.asarray(x, np.float64))
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"{name}: expected points of shape (N, {self.dim}), got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise ValueError(f"{name}: contains NaN or Inf")
        tol = 1e-9 * float(np.max(self.hi - self.lo))
        if len(x) and (np.any(x < self.lo - tol) or np.any(x > self.hi + tol)):
            raise ValueError(f"{name}: points outside the decomposition's box "
                             f"[{self.lo.tolist()}, {self.hi.tolist()}]")
        return x

    def pieces(self, x: ArrayLike, derivatives: bool = True
               ) -> Iterator[tuple[int, NDArray, NDArray, NDArray | None, NDArray | None, NDArray]]:
        """For each subdomain j: ``(j, idx, ψ, ∂ψ, ∂²ψ, ξ)`` at the points ``x[idx]`` it covers:
        ``ψ = φ ω_j`` [m], its first and second partials in x [m, d] (None without
        ``derivatives``), and the local coordinates ξ [m, d]. The windows are found
        :data:`WINDOW_CHUNK` points at a time, from each point's few candidate subdomains per
        axis (:meth:`Level.covers`), so their scratch is bounded by the chunk and the rest by
        the output (about ``(1 + overlap)^d`` entries per point)."""
        return self._pieces(self._check_points(x), derivatives)

    def _pieces(self, x: NDArray, derivatives: bool
                ) -> Iterator[tuple[int, NDArray, NDArray, NDArray | None, NDArray | None, NDArray]]:
        """:meth:`pieces` of points already checked."""
        phi = self.constraint(x) if self.constraint is not None else None
        j = 0
        for lv in self.levels:
            sub, pt, omega, w0s, w1s, w2s = _level_covers(lv, x, derivatives)
            bounds = np.searchsorted(sub, np.arange(len(lv) + 1))
            for s, index in enumerate(lv.indices):
                lo, hi = bounds[s], bounds[s + 1]
                idx, om = pt[lo:hi], omega[lo:hi]
                d1 = d2 = None
                if derivatives:
                    w0, w1, w2 = w0s[lo:hi], w1s[lo:hi], w2s[lo:hi]
                    rest = np.where(w0 > 0, om[:, None] / np.where(w0 > 0, w0, 1.0), 0.0)
                    d1, d2 = w1 * rest, w2 * rest
                psi = om
                if phi is not None:
                    psi, d1, d2 = window_times(phi[0][idx], phi[1][idx], phi[2][idx], om, d1, d2)
                xi = (x[idx] - lv.centre(index)) / lv.half_of(index)
                yield j, idx, psi, d1, d2, np.ascontiguousarray(xi)
                j += 1

    def window_sums(self, x: ArrayLike) -> NDArray[np.float64]:
        """``[levels, N]``: each level's Σ_j ω_j at x (1 on the box; without the constraint)."""
        x = self._check_points(x)
        out = np.empty((len(self.levels), len(x)))
        for c0 in range(0, len(x), WINDOW_CHUNK):
            xc = x[c0:c0 + WINDOW_CHUNK]
            for li, lv in enumerate(self.levels):
                out[li, c0:c0 + len(xc)] = np.prod([lv.axis_candidates(xc[:, a], a)[1].sum(0)
                                                    for a in range(self.dim)], axis=0)
        return out

    # -- evaluation ----------------------------------------------------------------------------
    def predict(self, x: ArrayLike, params: ArrayLike | None = None, *,
                chunk: int | None = None) -> NDArray[np.complex128]:
        """u at x [N, d] (complex [N]); ``params`` other than the model's own optional. The
        points are taken ``chunk`` at a time (None: :data:`WINDOW_CHUNK`, or 4 per subdomain
        where that is more, up to 2²⁰), so the memory beyond the output is the chunk's; each
        point's sum over its subdomains is taken in the same order whatever the chunk."""
        theta = self.params if params is None else np.ascontiguousarray(params, np.float64)
        if theta.shape != self.params.shape:
            raise ValueError(f"params: expected {self.num_params} parameters, got shape {theta.shape}")
        if chunk is None:
            chunk = min(max(WINDOW_CHUNK, 4 * len(self.subdomains)), 1 << 20)
        chunk = integer("DecomposedModel.predict", "chunk", chunk, low=1)
        x = self._check_points(x)
        u = np.zeros(len(x), np.complex128)
        for c0 in range(0, len(x), chunk):
            uc = u[c0:c0 + chunk]
            for j, idx, psi, _, _, xi in self._pieces(x[c0:c0 + chunk], derivatives=False):
                if len(idx) == 0:
                    continue
                sd = self.subdomains[j]
                val = np.asarray(self.workspace(sd["level"]).forward(theta[sd["slice"]], xi, 0))
                uc[idx] += psi * (val[:, 0] + 1j * val[:, 1])
            if self.singular is not None:   # the corners' singular functions at their amplitudes
                uc += self.singular.field(x[c0:c0 + chunk])
        return u

    def residuals_for(self, rows: Rows, *, comm: Any = None, modes: ArrayLike | None = None) -> "DecomposedResiduals":
        """The residual operations of this model on ``rows`` (``comm``: split over MPI ranks; ``modes``:
        mode rows; :class:`DecomposedResiduals`), :class:`SingularResiduals` with ``singular``."""
        res = DecomposedResiduals(self, rows, comm=comm, modes=modes)
        return res if self.singular is None else SingularResiduals(res, self.singular)

    # -- its loss on a run's points (the run loop's protocol) ---------------------------------------
    def training_rows(self, training_set: Any, weights: Mapping[str, float]) -> Rows:
        """The rows of the points ``training_set`` with ``weights``; with a hard constraint,
        without the data rows that it satisfies identically (zero data where φ = 0: their
        residuals and gradients are zero, so the loss is the same)."""
        rows = Rows.from_training_set(training_set, weights)
        if self.constraint is None or not np.any(rows.term == "data"):
            return rows
        phi = np.ones(len(rows))
        data = rows.term == "data"
        phi[data] = self.constraint(rows.x[data])[0]
        keep = ~(data & (phi == 0) & (rows.f == 0))
        return Rows(*(getattr(rows, k)[keep] for k in ("x", "a", "b", "c", "f", "term")))

    def training_residuals(self, training_set: Any, weights: Mapping[str, float], comm: Any = None,
                           modes: Callable[[Rows], Any] | None = None) -> "DecomposedResiduals":
        """The :class:`DecomposedResiduals` of :meth:`training_rows`, with ``modes(rows)``'s mode
        rows where given (None: none; ``modes`` may also return ``(more, M)``: rows of its own,
        appended after the points', and M over all of them). Over MPI (``comm`` of several
        ranks, ``training_set`` this rank's share of a run's points) every rank holds every
        rank's points (:func:`helmpinn.distributed.gather_training_set`) and its own subdomains
        (``residuals_for(rows, comm=)``): the subdomains, not the points, are split."""
        comm = comm if comm is not None and comm.Get_size() > 1 else None
        if comm is not None:
            training_set = distributed.gather_training_set(comm, training_set)
        rows = self.training_rows(training_set, weights)
        m = None if modes is None else modes(rows)
        if isinstance(m, tuple):   # rows of their own for the mode rows, after the points'
            more, m = m
            rows = Rows.concat([rows, more])
        return self.residuals_for(rows, comm=comm, modes=m)

    def objective(self, training_set: Any, weights: Mapping[str, float], comm: Any = None
                  ) -> Callable[[NDArray, NDArray], tuple[float, dict[str, float]]]:
        """The loss on a run's points and its gradient, for an optimiser that needs only these
        (Adam): ``value_and_grad(θ, grad) -> (loss, terms)``, the loss ``Σ r²`` of
        :meth:`training_residuals`' ``r``, its gradient ``2 Jᵀr`` (one core ``vjp`` per
        subnetwork) written into ``grad``, and each term's unweighted mean. Over MPI the same
        numbers on every rank (the residuals are summed over the ranks, the gradient's ranges
        gathered)."""
        res = self.training_residuals(training_set, weights, comm)

        def value_and_grad(theta: NDArray, grad: NDArray) -> tuple[float, dict[str, float]]:
            r = res.residuals(theta)
            g = res.gather(res.vjp(theta, r))
            np.multiply(g, 2.0, out=grad)
            return float(r @ r), term_means(res.term_losses(r), weights)

        return value_and_grad

    def loss_function(self, training_set: Any, weights: Mapping[str, float]) -> Callable[[NDArray], float]:
        """``θ -> loss`` of the field the model holds (:attr:`singular` at its amplitudes then) on the
        points of ``training_set`` with ``weights`` (each term's weight times its mean squared residual)."""
        res = self.training_residuals(training_set, weights)   # with singular: at the held amplitudes
        return lambda theta: float(np.sum(getattr(res, "residuals_at", res.residuals)(theta) ** 2))

    # -- files ---------------------------------------------------------------------------------
    def config(self) -> dict[str, Any]:
        return {"kind": FORMAT, "lo": self.lo.tolist(), "hi": self.hi.tolist(),
                "levels": [lv.config() for lv in self.levels],
                "specs": [_spec_config(s) for s in self.specs],
                "constraint": None if self.constraint is None else self.constraint.config(),
                "singular": None if self.singular is None else self.singular.config(),
                "metadata": self.metadata}

    def save(self, path: str | os.PathLike, *, optimizer_state: Mapping[str, Any] | None = None,
             metadata: Mapping[str, Any] | None = None) -> None:
        """Write params and configuration to one ``.npz`` atomically (a temporary file in the
        same folder, then ``os.replace``; the folder is made if needed), with ``metadata`` and
        ``optimizer_state`` (default: the model's own) in the configuration's metadata."""
        meta = {**(self.metadata if metadata is None else metadata),
                STATE_KEY: dict(self.optimizer_state if optimizer_state is None else optimizer_state)}
        config = {**self.config(), "metadata": _jsonable(meta)}
        os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
        write_atomic(path, lambda fh: np.savez(fh, params=self.params, config=np.array(json.dumps(config))))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DecomposedModel":
        """A model written by :meth:`save`; ValueError naming the file and what is wrong. Read as
        :meth:`helmpinn.Model.load` reads (a regular file only, never a FIFO or device; every
        array read eagerly), and checked as it checks: the grids' subdomain count against
        :data:`MAX_SUBDOMAINS` and their parameters against the file's parameter vector before
        any subdomain is enumerated, finite parameters, a finite box, a constraint of a known
        kind on the model's own box."""
        path = os.fspath(path)
        arrays = read_npz(path)
        for key in ("params", "config"):
            if key not in arrays:
                raise ValueError(f"{path}: missing {key!r}; not a decomposed model file")
        try:
            cfg = json.loads(str(arrays["config"]))
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: config is not valid JSON ({e})") from None
        if not isinstance(cfg, dict) or cfg.get("kind") != FORMAT:
            raise ValueError(f"{path}: not a decomposed model of format {FORMAT!r}")
        params = arrays["params"]
        try:
            return _from_config(cls, cfg, params)
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            what = f"missing entry {e}" if isinstance(e, KeyError) else str(e)
            raise ValueError(f"{path}: inconsistent decomposed model ({what})") from None


def _from_config(cls: type, cfg: Mapping[str, Any], params: NDArray) -> "DecomposedModel":
    """The model (of class ``cls``) of a file's ``config`` and ``params``
    (:meth:`DecomposedModel.load`), each entry checked before it is used."""
    lo, hi = _box(cfg["lo"], cfg["hi"], "lo, hi")
    d = len(lo)
    if not isinstance(cfg["levels"], list) or not isinstance(cfg["specs"], list) \
            or not cfg["levels"] or len(cfg["specs"]) != len(cfg["levels"]):
        raise ValueError("levels, specs: expected one spec per level, at least one level")
    grids = [subdomain_grid(lv["grid"], d, f"levels[{i}].grid") for i, lv in enumerate(cfg["levels"])]
    specs = []
    for i, sp in enumerate(cfg["specs"]):
        if not isinstance(sp, list) or len(sp) != 4:
            raise ValueError(f"specs[{i}]: expected 4 integers (in_dim, ff_dim, hidden_dim, layers), got {sp!r}")
        specs.append(_core.ModelSpec(*(integer("specs", f"specs[{i}]", v, low=1) for v in sp)))
    total = sum(math.prod(g) for g in grids)
    if total > MAX_SUBDOMAINS:
        raise ValueError(f"levels: {total:,} subdomains, more than {MAX_SUBDOMAINS:,}")
    expected = sum(math.prod(g) * s.num_params for g, s in zip(grids, specs))
    if params.ndim != 1 or len(params) != expected or params.dtype.kind != "f":
        raise ValueError(f"params: the grids and specs need a float vector of {expected:,} parameters, "
                         f"got {params.dtype} {params.shape}")
    if not np.all(np.isfinite(params)):
        raise ValueError("params contain NaN or Inf")
    c = cfg["constraint"]
    constraint = None
    if c is not None:
        if not isinstance(c, dict) or c.get("kind") != "box":
            kind = c.get("kind") if isinstance(c, dict) else c
            raise ValueError(f"constraint: unknown kind {kind!r} (this helmpinn knows 'box')")
        constraint = BoxConstraint(c["lo"], c["hi"], c["scale"])
    meta = cfg.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise ValueError("metadata: expected a JSON object")
    levels = [Level(lo, hi, g, lv["overlap"], lv.get("edges")) for g, lv in zip(grids, cfg["levels"])]
    model = cls(levels, specs, params, constraint, meta)
    singular = cfg.get("singular")   # (files before the singular functions have none)
    if singular is not None:
        if not isinstance(singular, dict) or d != 2:
            raise ValueError("singular: expected the corners' singular functions of a 2-D model")
        model.singular = CornerSingularities.from_config(singular)
    return model


def assign_subdomains(costs: Sequence[float], size: int) -> NDArray[np.int64]:
    """The rank of each subdomain when ``size`` ranks share them: contiguous runs (in the
    model's order, so each rank's parameters are one contiguous range) of about equal total
    cost, subdomain j going to the rank whose share ``[k C/size, (k+1) C/size)`` of the total
    cost C holds the midpoint of j's cost. Deterministic: every rank computes the same."""
    size = int(size)
    if size < 1:
        raise ValueError(f"size: expected a number of ranks >= 1, got {size}")
    c = np.asarray(costs, np.float64)
    if c.ndim != 1 or not np.all(np.isfinite(c)) or np.any(c <= 0):
        raise ValueError("costs: expected positive finite numbers, one per subdomain")
    if len(c) == 0:
        return np.zeros(0, np.int64)
    mid = np.cumsum(c) - 0.5 * c
    return np.minimum((mid * size / c.sum()).astype(np.int64), size - 1)


#: The term of the rows that only carry mode rows (the value rows Green's mode rows read u from,
#: of a negligible scale of their own: :data:`helmpinn.training.dd_driver.GREEN_ROW_SCALE`).
CARRIER_TERM = "modes"
#: The forms a row's windowed operator takes in the core (:func:`_row_kinds`), in the order a
#: part's points are kept: value rows that only carry mode rows, other value rows, the scalar
#: form, the diagonal form.
CARRIER, VALUE, SCALAR, GENERAL = 0, 1, 2, 3


def _row_kinds(a: NDArray, b: NDArray, same_half: bool, carrier: NDArray) -> NDArray[np.int8]:
    """Per row (``a, b`` its operator's ``[N, d]`` coefficients), the form its windowed
    operator takes in the core: :data:`VALUE` where ``a = b = 0`` (the operator on ``ψ_j N_j``
    is ``C N_j``: the core's data term, whose points carry one stream instead of the Laplacian's
    d + 2: Dirichlet rows, the value rows of Green's mode rows), :data:`CARRIER` for those of
    them that only carry mode rows (``carrier``: of :data:`CARRIER_TERM`), :data:`SCALAR` where
    every axis has the same ``a`` and the subdomain the same half-width (``same_half``), else
    :data:`GENERAL`."""
    value = ~(np.any(a != 0, axis=1) | np.any(b != 0, axis=1))
    scalar = alike_on_every_axis(a) & same_half
    return np.where(value, np.where(carrier, CARRIER, VALUE),
                    np.where(scalar, SCALAR, GENERAL)).astype(np.int8)


@dataclass
class _Segment:
    """A run ``idx[lo:hi]`` of a part's points and its core batch: the general operator's, or
    for :data:`VALUE` rows the data term's (``c`` set), whose rows ``N_j`` are multiplied by
    the complex ``c [hi − lo]`` here (:meth:`rows`; :meth:`adjoint` the transpose)."""

    lo: int
    hi: int
    batch: Batch
    c: NDArray[np.complex128] | None = None

    def __post_init__(self) -> None:
        # a real c (Dirichlet's, Green's) scales each (re, im) pair: the scale made once, in the
        # batch's dtype (the products run every CG iteration)
        real = self.c is not None and not np.any(self.c.imag)
        self.pairs = np.repeat(self.c.real, 2).astype(self.batch.dtype) if real else None

    @property
    def weight(self) -> dict[str, int]:
        """The loss weight that makes the core's row scale ``sqrt(w / m)`` one."""
        return {"w_pde" if self.c is None else "w_data": self.hi - self.lo}

    def _times(self, v: NDArray, conj: bool, out: NDArray | None) -> NDArray:
        """Rows v in (re, im) pairs (``[2m]`` or ``[2m, P]``) times c (its conjugate with
        ``conj``), in v's dtype, into ``out`` (v itself allowed)."""
        if self.pairs is not None:
            return np.multiply(v, self.pairs[:, None] if v.ndim == 2 else self.pairs, out=out)
        assert self.c is not None
        cr, ci = self.c.real, -self.c.imag if conj else self.c.imag
        if v.ndim == 2:
            cr, ci = cr[:, None], ci[:, None]
        re, im = v[0::2].copy(), v[1::2].copy()
        out = np.empty_like(v) if out is None else out
        out[0::2] = cr * re - ci * im
        out[1::2] = ci * re + cr * im
        return out

    def rows(self, v: NDArray, in_place: bool = False) -> NDArray:
        """The core's rows (a vector or a Jacobian's rows) as the residual's (in v itself with
        ``in_place``)."""
        return v if self.c is None else self._times(v, False, v if in_place else None)

    def adjoint(self, w: NDArray) -> NDArray:
        """The residual's adjoint rows w as the core's (the transpose of :meth:`rows`)."""
        return w if self.c is None else np.ascontiguousarray(self._times(w, True, None))

    def astype(self, dtype: Any) -> "_Segment":
        return _Segment(self.lo, self.hi, self.batch.astype(dtype), self.c)


def _mode_matrix(modes: Any, n: int) -> Any:
    """``modes`` (a dense or scipy.sparse ``[n, q]``) as a float64 CSR matrix, checked: finite, one
    row per point (ValueError naming ``modes`` otherwise)."""
    from scipy import sparse   # (on first use: importing helmpinn leaves SciPy out)

    dense = None if sparse.issparse(modes) else np.asarray(modes, np.float64)
    if dense is not None and dense.ndim != 2:
        raise ValueError(f"modes: expected finite numbers [{n}, q] (one row per point), got shape {dense.shape}")
    M = sparse.csr_matrix(modes if dense is None else dense, dtype=np.float64)
    if M.shape[0] != n or not np.all(np.isfinite(M.data)):
        raise ValueError(f"modes: expected finite numbers [{n}, q] (one row per point), got shape {M.shape}")
    M.sum_duplicates()
    return M


class DecomposedResiduals:
    """The residual vector of a :class:`DecomposedModel` on :class:`Rows` and its products.

    ``r [2N]`` (each row as (re, im)), ``jvp``, ``vjp`` and the Jacobian's blocks, each one core
    call per subnetwork and form of operator on the points its subdomain covers (the Batches are
    built here once; the core's row scale ``sqrt(w/m)`` is made 1 by ``w = m``, the rows carry
    their own). A subnetwork's points are kept by form (:func:`_row_kinds`): value rows
    (``a = b = 0``: through the core's data term, one stream, times ``C`` here), then those with
    the same ``a`` on every axis (outside a PML, the same half-width on every axis: the scalar
    form, ``a_lap``, the Laplacian's d + 2 streams instead of 2d + 1,
    :func:`helmpinn.problems.batch.operator_a`), then the rest; one core call per form present (a part's
    ``batches``: :class:`_Segment` over its points ``idx[lo:hi]``). The value rows of
    :data:`CARRIER_TERM` come first: they only carry mode rows (below), and a part's block rows
    from ``counted`` on are the ones whose own ``JᵀJ`` counts (the preconditioner's Gram matrices
    leave the carriers out, :meth:`helmpinn.optim.gauss_newton.MatrixFreeGN.linearize`).
    Follows :class:`helmpinn.optim.lm.Residuals` (``residuals``, ``jacobian``, ``jvp``, ``vjp``), so
    :class:`helmpinn.LevenbergMarquardt` can run on it too (one process); ``jacobian`` is dense
    (small cases).

    **Over MPI** (``comm`` an mpi4py communicator of several ranks; None: one process). Every
    rank holds the same rows, the same model and the whole parameter vector (replicated); the
    subdomains are split over the ranks by :func:`assign_subdomains` (contiguous runs of about
    equal cost, cost = points covered times parameters), and a rank builds the core's batches
    and evaluates subnetworks only for its own subdomains (``local``: their indices; ``own``:
    its range of the parameter vector). Residual-space vectors are whole on every rank:
    :meth:`residuals` and :meth:`jvp` sum the ranks' contributions with one ``Allreduce`` of
    the 2N vector (collectives: every rank must call them together); :meth:`vjp` is local,
    filling this rank's parameters only (zeros elsewhere). Parameter-space vectors are
    therefore split: :meth:`dot` is their global inner product (the ranks' partial sums added
    in rank order, the same number on every rank) and :meth:`gather` makes one whole again
    (one ``Allgatherv``). :meth:`block` and :meth:`jacobian` serve this rank's subdomains /
    one process only.

    **Mode rows** (``modes``, an ``[N, q]`` array, or None): 2q rows more, ``Mᵀ r_re`` and
    ``Mᵀ r_im`` after the 2N point rows, each a weighted projection of the point rows' residual on
    one column of M (a near-resonant mode of a closed box, scaled by its weight:
    :func:`helmpinn.problems.waves.resonance_rows`); the loss ``Σ r²`` then counts a residual in those
    modes as much more than its size at the points, as the error it causes is. They are linear
    in the point rows: :meth:`residuals` and :meth:`jvp` append them (:meth:`extend`),
    :meth:`vjp` folds them back (:meth:`fold`); :meth:`block` stays the point rows' block and
    :meth:`mode_columns` gives the mode rows' columns over a block's rows, ``J_jᵀ F_j`` being the
    mode rows' Jacobian restricted to subnetwork j (the low-rank term of ``JᵀJ`` that
    :class:`helmpinn.optim.gauss_newton.MatrixFreeGN`'s preconditioner adds).
    """

    def __init__(self, model: DecomposedModel, rows: Rows, *, comm: Any = None, modes: ArrayLike | None = None):
        if not isinstance(rows, Rows):
            raise TypeError(f"rows: expected helmpinn.models.decomposition.Rows, got {type(rows).__name__}")
        if comm is not None and not all(hasattr(comm, m) for m in ("Get_rank", "Get_size", "Allreduce")):
            raise TypeError(f"comm: expected None or an mpi4py communicator, got {type(comm).__name__}")
        self.comm = comm if comm is not None and comm.Get_size() > 1 else None
        self.rank = 0 if self.comm is None else self.comm.Get_rank()
        self.size = 1 if self.comm is None else self.comm.Get_size()
        self.model, self.rows = model, rows
        n = len(rows)
        self.num_params = model.num_params
        self.num_points = 2 * n   # the point rows; the mode rows follow them
        self.modes: Any = None   # scipy.sparse CSR [N, q], or None
        if modes is not None:
            M = _mode_matrix(modes, n)
            self.modes = M if M.shape[1] else None
        self.num_modes = 0 if self.modes is None else self.modes.shape[1]
        if self.modes is not None:   # the points the mode rows read (the corners' carriers: a few of many)
            self._mode_at = np.flatnonzero(np.diff(self.modes.indptr) > 0)
            self._mode_sub = self.modes[self._mode_at]
        self.num_residuals = 2 * n + 2 * self.num_modes
        self.target = np.empty(2 * n)
        self.target[0::2], self.target[1::2] = rows.f.real, rows.f.imag
        self.parts: list[dict[str, Any]] = []
        self._theta32: tuple[bytes | None, Any] = (None, None)   # θ's bytes and its float32 copy
        with distributed.collective(self.comm, "building the decomposed residuals"):
            pieces = list(model.pieces(rows.x))
            sizes = [model.specs[sd["level"]].num_params for sd in model.subdomains]
            costs = [max(len(idx), 1) * P for (_, idx, *_), P in zip(pieces, sizes)]
            self.owner = assign_subdomains(costs, self.size)
            self.local = [j for j in range(len(pieces)) if self.owner[j] == self.rank]
            bounds = np.zeros((self.size, 2), np.int64)   # each rank's parameter range
            for k in range(self.size):
                mine = [model.subdomains[j]["slice"] for j in np.nonzero(self.owner == k)[0]]
                if mine:
                    bounds[k] = (mine[0].start, mine[-1].stop)
            self.ranges = bounds
            self.own = slice(int(bounds[self.rank, 0]), int(bounds[self.rank, 1]))
            for j, idx, psi, d1, d2, xi in pieces:
                sd = model.subdomains[j]
                m = len(idx)
                h = sd["half"]
                # the points by the form of their operator (_row_kinds' order; every rank orders
                # them alike: the overlaps and the coarse matrix read positions in idx)
                kind = _row_kinds(rows.a[idx], rows.b[idx], bool(np.all(h == h[0])), rows.term[idx] == CARRIER_TERM)
                order = np.argsort(kind, kind="stable")
                idx, kind, psi, d1, d2, xi = idx[order], kind[order], psi[order], d1[order], d2[order], xi[order]
                r_idx = np.empty(2 * m, np.int64)
                r_idx[0::2], r_idx[1::2] = 2 * idx, 2 * idx + 1
                batches = []
                if m and self.owner[j] == self.rank:
                    a, b, c = rows.a[idx], rows.b[idx], rows.c[idx]
                    A = a * psi[:, None] / h ** 2
                    B = (2.0 * a * d1 + b * psi[:, None]) / h
                    C = (a * d2).sum(1) + (b * d1).sum(1) + c * psi
                    cuts = np.searchsorted(kind, [CARRIER, VALUE, SCALAR, GENERAL, GENERAL + 1])
                    for k, lo, hi in zip(range(4), cuts[:-1], cuts[1:]):
                        if hi == lo:
                            continue
                        if k <= VALUE:   # C N_j: the core's data term (one stream), times C here
                            batch = Batch(x_data=xi[lo:hi], y=np.zeros((hi - lo, 2)), dtype="float64")
                            batches.append(_Segment(int(lo), int(hi), batch, C[lo:hi]))
                        else:
                            batch = Batch(x_pde=xi[lo:hi], **operator_a(A[lo:hi]), b_pde=B[lo:hi], c_pde=C[lo:hi],
                                          f=np.zeros((hi - lo, 2)), dtype="float64")
                            batches.append(_Segment(int(lo), int(hi), batch))
                self.parts.append({"j": j, "level": sd["level"], "slice": sd["slice"], "idx": idx,
                                   "rows": r_idx, "batches": batches, "own": bool(self.owner[j] == self.rank),
                                   "counted": 2 * int(np.sum(kind == CARRIER))})

    def _ws(self, part, dtype: str = "float64"):
        return self.model.workspace(part["level"], dtype)

    def _batches(self, part: dict, dtype: str) -> list[_Segment]:
        """Part's core batches (:class:`_Segment`) in ``dtype`` (the float32 ones made once, on
        first use); none where the part has no points or is another rank's."""
        if dtype == "float64":
            return part["batches"]
        if part.get("batches32") is None:
            part["batches32"] = [g.astype(np.float32) for g in part["batches"]]
        return part["batches32"]

    def _params(self, theta: NDArray, dtype: str) -> NDArray:
        """θ in ``dtype`` (the float32 copy kept while θ is unchanged)."""
        if dtype == "float64":
            return theta
        key = theta.tobytes()
        if self._theta32[0] != key:
            self._theta32 = (key, theta.astype(np.float32))
        return self._theta32[1]

    # -- the ranks' sums -----------------------------------------------------------------------
    def allsum(self, v: NDArray) -> NDArray:
        """v summed over the ranks, in place (one ``Allreduce``; one process: v)."""
        if self.comm is not None:
            from mpi4py import MPI
            self.comm.Allreduce(MPI.IN_PLACE, v, op=MPI.SUM)
        return v

    def dot(self, a: NDArray, b: NDArray) -> float:
        """The inner product of two parameter-space vectors whose entries are this rank's own
        range (:attr:`own`): the ranks' partial sums gathered and added in rank order, so the
        number is the same on every rank."""
        part = float(a[self.own] @ b[self.own])
        if self.comm is None:
            return part
        from mpi4py import MPI
        parts = np.empty(self.size)
        self.comm.Allgather([np.array([part]), MPI.DOUBLE], [parts, MPI.DOUBLE])
        return float(math.fsum(parts))

    def sum_ranks(self, part: NDArray) -> NDArray:
        """The ranks' arrays ``part`` (one shape on every rank) gathered and added in rank order:
        the same sum on every rank (one process: ``part``, float64), as :meth:`dot` does for a
        number (the mode rows' Woodbury term, :func:`helmpinn.optim.low_rank.woodbury`)."""
        part = np.ascontiguousarray(part, np.float64)
        if self.comm is None:
            return part
        from mpi4py import MPI
        parts = np.empty((self.size, *part.shape))
        self.comm.Allgather([part, MPI.DOUBLE], [parts, MPI.DOUBLE])
        return np.sum(parts, 0)

    def gather(self, v: NDArray) -> NDArray:
        """v [P] made whole in place from each rank's own range (one ``Allgatherv``)."""
        if self.comm is not None:
            from mpi4py import MPI
            counts = self.ranges[:, 1] - self.ranges[:, 0]
            self.comm.Allgatherv(MPI.IN_PLACE, [v, counts, self.ranges[:, 0], MPI.DOUBLE])
        return v

    def same(self, *values: float) -> tuple[float, ...]:
        """Rank 0's values on every rank (for decisions that every rank must take alike)."""
        if self.comm is None:
            return tuple(values)
        return tuple(self.comm.bcast(tuple(float(v) for v in values), root=0))

    # -- the mode rows -------------------------------------------------------------------------
    def extend(self, r: NDArray) -> NDArray:
        """The point rows' vector r [2N] with the mode rows ``Mᵀ r_re, Mᵀ r_im`` appended (r
        itself without ``modes``)."""
        if self.modes is None:
            return r
        at, sub = 2 * self._mode_at, self._mode_sub
        return np.concatenate([r, sub.T @ r[at], sub.T @ r[at + 1]])

    def fold(self, w: NDArray) -> NDArray:
        """A residual-space vector w [2N + 2q] folded onto the point rows: ``w_pts + F w_modes``
        (the transpose of :meth:`extend`), so that ``Jᵀw`` is one product over the points."""
        if self.modes is None:
            return w
        q, out = self.num_modes, np.array(w[:self.num_points], copy=True)
        tail = np.asarray(w[self.num_points:], np.float64)
        at, sub = 2 * self._mode_at, self._mode_sub
        out[at] += (sub @ tail[:q]).astype(out.dtype, copy=False)   # (M stays float64: no copy)
        out[at + 1] += (sub @ tail[q:]).astype(out.dtype, copy=False)
        return out

    def mode_columns(self, j: int) -> tuple[NDArray, NDArray]:
        """``(F_j, cols)``: the mode rows' weights over part j's point rows (``parts[j]["rows"]``),
        ``F_j`` [2 m_j, c], in the columns ``cols`` [c] of the 2q mode rows that read any of them
        (the others are zero there), so that ``J_jᵀ F_j`` are those mode rows' gradients in
        subnetwork j's parameters."""
        rows = self.parts[j]["rows"]
        q = self.num_modes
        if not q:
            return np.zeros((len(rows), 0)), np.zeros(0, np.intp)
        re, im = self.modes[rows[0::2] // 2], self.modes[rows[1::2] // 2]
        live = np.union1d(re.indices, im.indices).astype(np.intp)
        out = np.zeros((len(rows), 2 * len(live)))
        out[0::2, :len(live)] = re[:, live].toarray()
        out[1::2, len(live):] = im[:, live].toarray()
        return out, np.concatenate([live, q + live])

    # -- the products --------------------------------------------------------------------------
    def residuals(self, theta: NDArray) -> NDArray:
        """r(θ) [2N + 2q] (a collective over several ranks)."""
        r = np.zeros(self.num_points)
        for p in self.parts:
            for g in p["batches"]:
                r[p["rows"][2 * g.lo:2 * g.hi]] += g.rows(self._ws(p).residuals(theta[p["slice"]], batch=g.batch,
                                                                                **g.weight))
        r = self.allsum(r)
        r -= self.target
        return self.extend(r)

    def jvp(self, theta: NDArray, v: NDArray, dtype: str = "float64") -> NDArray:
        """J v [2N + 2q] for v [P] (over several ranks: a collective; each uses its own range of
        v); ``dtype="float32"``: the core's products in float32 (about twice the rate; the result
        float64, within float32's rounding)."""
        out = np.zeros(self.num_points)
        t = self._params(theta, dtype)
        v = np.asarray(v, dtype)
        for p in self.parts:
            vp = np.ascontiguousarray(v[p["slice"]])
            for g in self._batches(p, dtype):
                out[p["rows"][2 * g.lo:2 * g.hi]] += g.rows(self._ws(p, dtype).jvp(t[p["slice"]], vp, batch=g.batch,
                                                                                   **g.weight))
        return self.extend(self.allsum(out))

    def vjp(self, theta: NDArray, w: NDArray, dtype: str = "float64") -> NDArray:
        """Jᵀ w [P] for w [2N + 2q] (over several ranks: this rank's own range, zeros elsewhere);
        ``dtype`` as in :meth:`jvp`."""
        out = np.zeros(self.num_params)
        t = self._params(theta, dtype)
        w = self.fold(np.asarray(w, dtype))
        for p in self.parts:
            for g in self._batches(p, dtype):
                wp = g.adjoint(np.ascontiguousarray(w[p["rows"][2 * g.lo:2 * g.hi]]))
                out[p["slice"]] += self._ws(p, dtype).vjp(t[p["slice"]], wp, batch=g.batch, **g.weight)
        return out

    def block(self, theta: NDArray, j: int, dtype: str = "float64") -> NDArray:
        """Subnetwork j's Jacobian block ``∂r[rows_j]/∂θ_j`` [2 m_j, P_j] (rows ``parts[j]["rows"]``;
        over several ranks, j one of this rank's :attr:`local` subdomains), C-ordered, computed by
        the core in ``dtype`` (float32: half the memory and about twice the rate, for the Gram
        matrices of a preconditioner)."""
        p = self.parts[j]
        if not p["own"]:
            raise ValueError(f"j: subdomain {j} belongs to rank {self.owner[j]}, not to rank {self.rank}")
        P = p["slice"].stop - p["slice"].start
        t = self._params(theta, dtype)[p["slice"]]
        J = np.empty((len(p["rows"]) if p["batches"] else 0, P), dtype)
        for g in self._batches(p, dtype):   # each form's rows written in place
            self._ws(p, dtype).jacobian(t, out=J[2 * g.lo:2 * g.hi], batch=g.batch, **g.weight)
            g.rows(J[2 * g.lo:2 * g.hi], in_place=True)
        return J

    def jacobian(self, theta: NDArray, rows: tuple[int, int] | None = None) -> NDArray:
        """The dense Jacobian [2N + 2q, P] (or rows ``(start, stop)`` of it): for small cases and
        one process only."""
        if self.comm is not None:
            raise ValueError("jacobian: the dense Jacobian is for one process (the residuals were "
                             f"built over {self.size} ranks)")
        J = np.zeros((self.num_points, self.num_params))
        for j, p in enumerate(self.parts):
            J[p["rows"], p["slice"]] = self.block(theta, j)
        if self.modes is not None:   # the mode rows: the point rows' columns projected
            J = np.concatenate([J, np.asarray(self.modes.T @ J[0::2]), np.asarray(self.modes.T @ J[1::2])])
        return J if rows is None else J[rows[0]:rows[1]]

    def overlaps(self) -> list[tuple[int, int, NDArray, NDArray]]:
        """``(i, j, pos_i, pos_j)`` for every pair i <= j of parts that share points: the shared
        points' positions in each part's points (block ``(i, j)`` of ``JᵀJ`` is
        ``J_i[pos_i rows]ᵀ J_j[pos_j rows]``)."""
        if not hasattr(self, "_overlaps"):
            out = []
            boxes = []
            for p in self.parts:
                x = self.rows.x[p["idx"]]
                boxes.append((x.min(0), x.max(0)) if len(x) else None)
            for i, pi in enumerate(self.parts):
                for j in range(i, len(self.parts)):
                    bi, bj = boxes[i], boxes[j]
                    if bi is None or bj is None or np.any(bi[1] < bj[0]) or np.any(bj[1] < bi[0]):
                        continue
                    _, a, b = np.intersect1d(pi["idx"], self.parts[j]["idx"], assume_unique=True,
                                             return_indices=True)
                    if len(a):
                        out.append((i, j, a, b))
            self._overlaps = out
        return self._overlaps

    def term_losses(self, r: NDArray) -> dict[str, float]:
        """The loss ``Σ r²`` of each term's point rows (the mode rows, after them, are no term's)."""
        r = r[:self.num_points]
        sq = r[0::2] ** 2 + r[1::2] ** 2
        return {t: float(sq[self.rows.term == t].sum()) for t in np.unique(self.rows.term)}


class SingularResiduals:
    """:class:`DecomposedResiduals` of a model whose field adds the corners' singular functions
    (:class:`helmpinn.problems.singular.CornerSingularities`), their complex amplitudes those
    that minimise the loss at every θ. The amplitudes enter the residual linearly through
    columns B that do not depend on θ (each function through every row, the mode rows
    included, once with amplitude 1 and once with i), so eliminating them is exact (variable
    projection with constant columns): ``r(θ) = P r_N(θ)`` and ``J = P J_N`` with ``P = I − QQᵀ``,
    Q an orthonormal basis of B's range (its SVD, directions below 1e-10 of the largest singular
    value dropped) and r_N the network's own residuals. :meth:`residuals`, :meth:`jvp`,
    :meth:`vjp` and :meth:`jacobian` are projected; :meth:`block` (the preconditioner's Gram
    matrices) stays the network's own, ``J_NᵀJ_N`` differing from ``JᵀJ`` by the rank-2n term
    ``(J_NᵀQ)(QᵀJ_N)``; every other attribute is the wrapped residuals'. :meth:`amplitudes` gives
    the amplitudes at θ (what a run writes into the model after each step). Over MPI every rank
    holds all rows, so B and Q are alike on every rank."""

    def __init__(self, res: DecomposedResiduals, singular: CornerSingularities):
        self.res, self.singular = res, singular
        rows = res.rows
        C = singular.columns(rows.x, rows.a, rows.b, rows.c)
        cols = []
        for j in range(C.shape[1]):
            for unit in (1.0, 1j):
                z = unit * C[:, j]
                v = np.empty(2 * len(z))
                v[0::2], v[1::2] = z.real, z.imag
                cols.append(res.extend(v))
        B = np.stack(cols, 1) if cols else np.zeros((res.num_residuals, 0))
        U, sv, Vt = np.linalg.svd(B, full_matrices=False)
        keep = sv > 1e-10 * sv.max() if len(sv) and sv.max() > 0 else np.zeros(len(sv), bool)
        self._Q, self._sv, self._Vt = np.ascontiguousarray(U[:, keep]), sv[keep], Vt[keep]

    def __getattr__(self, name: str) -> Any:
        if name == "res":   # (before __init__ set it: copy, pickle)
            raise AttributeError(name)
        return getattr(self.res, name)

    def project(self, r: NDArray) -> NDArray:
        """``P r = r − Q(Qᵀr)`` (float64)."""
        r = np.asarray(r, np.float64)
        return r - self._Q @ (self._Q.T @ r) if self._Q.shape[1] else r

    def amplitudes(self, theta: NDArray) -> NDArray[np.complex128]:
        """The functions' amplitudes minimising ``‖r_N(θ) + B a‖`` (a collective over several
        ranks)."""
        coef = -(self._Vt.T @ ((self._Q.T @ self.res.residuals(theta)) / self._sv)) if self._Q.shape[1] \
            else np.zeros(2 * self.singular.count)
        return coef[0::2] + 1j * coef[1::2]

    def residuals(self, theta: NDArray) -> NDArray:
        return self.project(self.res.residuals(theta))

    def residuals_at(self, theta: NDArray, amplitudes: NDArray | None = None) -> NDArray:
        """The residuals of the field with these ``amplitudes`` [n] (default: the functions' own,
        ``singular.amplitudes``, which a run writes after each step), not the best ones:
        ``r_N(θ) + B a`` (B from its SVD; the directions it dropped carry below 1e-10 of it)."""
        amplitudes = self.singular.amplitudes if amplitudes is None else amplitudes
        coef = np.empty(2 * self.singular.count)
        coef[0::2], coef[1::2] = np.real(amplitudes), np.imag(amplitudes)
        r = np.asarray(self.res.residuals(theta), np.float64)
        return r + self._Q @ (self._sv * (self._Vt @ coef)) if self._Q.shape[1] else r

    def jvp(self, theta: NDArray, v: NDArray, dtype: str = "float64") -> NDArray:
        return self.project(self.res.jvp(theta, v, dtype))

    def vjp(self, theta: NDArray, w: NDArray, dtype: str = "float64") -> NDArray:
        return self.res.vjp(theta, self.project(w), dtype)

    def jacobian(self, theta: NDArray, rows: tuple[int, int] | None = None) -> NDArray:
        J = self.res.jacobian(theta)
        J = J - self._Q @ (self._Q.T @ J) if self._Q.shape[1] else J
        return J if rows is None else J[rows[0]:rows[1]]

