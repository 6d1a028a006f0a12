"""Where a problem's points are drawn: the domain, or with a PML the domain and its layer
(:func:`surround`), the PDE points (uniform, or a ``pml_share`` of them in the layer, plus draws
at the point sources and, with a :class:`CellDensity`, where it asks for more points, each with
its importance weight) and the boundary points (by part, or on the PML's outer wall and a
scatterer). :class:`Sampler` draws them for a
:class:`~helmpinn.problems.problem.Problem` (whose ``sampling_domain`` and ``pml_share`` are its);
the problem evaluates κ, the source and the conditions at them."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from .._checks import real_number
from .geometry import BoundarySample, Box, BoxMinusObstacle, Domain, Interval, PointCloud
from .pml import PML
from .sources import mixture_density, sample_mixture

__all__ = ["Sampler", "CellDensity", "surround", "corner_weights", "CORNER_WAVELENGTHS"]

#: The radius, in wavelengths, within which a re-entrant corner's PDE rows are weighted down
#: (:func:`corner_weights`); at most half the corner's shorter edge.
CORNER_WAVELENGTHS = 0.25


def corner_weights(x: NDArray, corners: NDArray, sizes: NDArray, radius: float) -> NDArray[np.float64]:
    """The PDE rows' weights [N] about re-entrant corners: ``min(1, (r/ρ)²)``, r the distance
    from x [N, d] to the nearest corner (``corners [m, d]``), ``ρ = min(radius, size/2)`` that
    corner's radius (``sizes [m]``: its shorter edge's length).

    Why: at a corner where the domain's angle α exceeds π the solution behaves as ``r^γ``,
    ``γ = π/α < 1`` (r^(2/3) at a square obstacle's vertex), which a smooth network cannot
    follow. A smooth approximation that follows it down to a distance h from the corner leaves a
    residual of about ``h^(γ−2)`` over an area h², a cost ``h^(2γ−2)`` that grows as h shrinks,
    so the least-squares fit gave up the field everywhere to keep it small (measured: the
    residual sat within a tenth of a wavelength of the vertices, the error everywhere;
    docs/guide/open-domains.md). Under the weight ``(r/ρ)²`` that cost is ``h^(2γ)/ρ²``, which
    falls as h shrinks, while the exact solution still zeroes every row: a field the network can
    represent minimises the loss with or without the weights, and every point keeps its row
    (only the corner point itself gets the weight 0)."""
    x = np.asarray(x, np.float64)
    w = np.ones(len(x))
    for c, size in zip(corners, sizes):
        rho = min(float(radius), 0.5 * float(size))
        r2 = np.sum((x - c) ** 2, axis=1)
        w = np.minimum(w, r2 / (rho * rho))
    return w


def surround(domain: Domain, pml: PML | None) -> tuple[Domain, tuple[str, ...], Any]:
    """``(sampling_domain, absorbed, box)``: where the points are drawn (the domain, or with a
    PML its outer box around the domain, grown on the layer's faces), the boundary parts the
    layer replaces (its faces; the box's other faces stay parts of the problem), and the
    physical box ``(lo, hi)`` (None for a point cloud without a PML). A
    :class:`~helmpinn.problems.geometry.PointCloud` holds its layer itself: its bounding box is
    the layer's outer wall, the physical box that box shrunk by the width on the layer's faces."""
    box = domain.bounds if not isinstance(domain, PointCloud) else None
    if pml is None:
        return domain, (), box
    if isinstance(domain, BoxMinusObstacle):
        lo, hi = pml.outer_box(domain.box.lo, domain.box.hi)
        return domain.with_box(Box(lo, hi)), pml.layered_faces(domain.dim), box
    if isinstance(domain, Box):
        lo, hi = pml.outer_box(domain.lo, domain.hi)
        return (Interval(lo[0], hi[0]) if domain.dim == 1 else Box(lo, hi)), pml.layered_faces(domain.dim), box
    if isinstance(domain, PointCloud):
        lo, hi = domain.bounds
        sides = pml.sides(domain.dim)
        lo, hi = lo + pml.width * sides[:, 0], hi - pml.width * sides[:, 1]
        if not np.all(hi > lo):
            raise ValueError(f"pml: a PointCloud's bounding box is the layer's outer wall; "
                             f"width {pml.width!r} leaves no physical box inside "
                             f"{domain.bounds[0].tolist()} .. {domain.bounds[1].tolist()}")
        return domain, (), (lo, hi)
    raise TypeError(f"pml: the domain must be a Box, Interval, BoxMinusObstacle (BoxMinusBall) or PointCloud "
                    f"(a PML surrounds its outer box), got {type(domain).__name__}")


class CellDensity:
    """A relative point density ``ρ`` constant on the cells of a regular grid over the box
    ``[lo, hi]`` (``values``: ``ρ > 0`` per cell, of the grid's shape): the PDE points are drawn
    in proportion to it (:meth:`Sampler.sample_pde`). Its least value is the base draw's share
    (uniform, Sobol where asked); the rest, ``ρ − min ρ``, is :meth:`sample`'s (cells in proportion
    to their excess, uniform within each), whose normalised density :meth:`density` gives."""

    def __init__(self, lo: Any, hi: Any, values: Any):
        self.lo, self.hi = np.asarray(lo, np.float64).reshape(-1), np.asarray(hi, np.float64).reshape(-1)
        v = np.asarray(values, np.float64)
        if v.ndim != len(self.lo) or not v.size or not np.all(np.isfinite(v)) or np.any(v <= 0):
            raise ValueError(f"CellDensity: values: expected positive numbers on a {len(self.lo)}-D grid, "
                             f"got shape {v.shape}")
        if not np.all(self.hi > self.lo):
            raise ValueError(f"CellDensity: expected hi > lo, got {self.lo}, {self.hi}")
        self.values = v
        self.cell = (self.hi - self.lo) / np.array(v.shape)
        excess = (v - v.min()).ravel()
        self.excess_share = float(excess.sum() / v.sum())   # of the points, those of the excess
        self._cdf = np.cumsum(excess) / excess.sum() if excess.sum() > 0 else None
        self._g = excess / (excess.sum() * float(np.prod(self.cell))) if excess.sum() > 0 else excess

    def sample(self, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
        """n points of the excess density (:meth:`density`)."""
        if self._cdf is None or n <= 0:
            return np.empty((0, len(self.lo)))
        flat = np.minimum(np.searchsorted(self._cdf, rng.random(n), side="right"), len(self._cdf) - 1)
        idx = np.stack(np.unravel_index(flat, self.values.shape), axis=1)
        return self.lo + (idx + rng.random((n, len(self.lo)))) * self.cell

    def density(self, x: NDArray) -> NDArray[np.float64]:
        """The excess's normalised density ``(ρ − min ρ) / ∫(ρ − min ρ)`` at x (0 outside the box)."""
        x = np.asarray(x, np.float64)
        idx = np.floor((x - self.lo) / self.cell).astype(np.int64)
        inside = np.all((idx >= 0) & (idx < np.array(self.values.shape)), axis=1)
        idx = np.clip(idx, 0, np.array(self.values.shape) - 1)
        out = self._g[np.ravel_multi_index(tuple(idx.T), self.values.shape)] if len(x) else np.zeros(0)
        return np.where(inside, out, 0.0)


class Sampler:
    """Draws the points of a problem on ``domain`` (with an optional ``pml``, and its
    ``pml_share``, checked). ``sampling_domain``, ``absorbed`` and ``box``: :func:`surround`'s;
    ``free``: the faces of the box that a PML leaves without the layer (their condition
    defaults to ``u = 0``, :func:`~helmpinn.problems.conditions.resolve_bcs`).
    ``density``: None, or a :class:`CellDensity` over the sampling domain's box that the PDE points
    follow (:meth:`sample_pde`)."""

    density: CellDensity | None = None
    #: The radius ρ of :func:`corner_weights` before each corner's edge caps it (None: no
    #: weights); a :class:`~helmpinn.problems.problem.Problem` sets it from its wavelength for a
    #: domain with re-entrant corners.
    corner_radius: float | None = None
    #: The PDE rows' weights by place, ``x [M, d] -> w [M]`` (None: none): where a smoothed jump
    #: ramps κ (:func:`helmpinn.problems.jumps.training_problem`).
    row_weights: Callable[[NDArray], NDArray] | None = None

    def __init__(self, domain: Domain, pml: PML | None = None, pml_share: float | None = None):
        self.domain = domain
        self.dim = domain.dim
        self.sampling_domain, self.absorbed, self.box = surround(domain, pml)
        self.layered = pml is not None
        self.free = pml.free_faces(self.dim) if pml is not None and self.absorbed else ()
        self.pml_share = None
        if pml_share is not None:
            if pml is None:
                raise ValueError("pml_share: given without a pml")
            if isinstance(domain, PointCloud):
                raise ValueError("pml_share: a PointCloud's points are given, not drawn")
            self.pml_share = real_number("Problem", "pml_share", pml_share, low=0.0, low_open=False,
                                         high=1.0)

    def in_layer(self, x: NDArray) -> NDArray[np.bool_]:
        """True for points of the PML (outside the physical box); all False without one."""
        x = np.asarray(x, np.float64)
        if not self.layered:
            return np.zeros(len(x), bool)
        lo, hi = self.box
        return np.any((x < lo) | (x > hi), axis=1)

    def layer_volume(self) -> float:
        return self.sampling_domain.volume - self.domain.volume

    def layer_points(self, n: int = 4096) -> NDArray[np.float64]:
        """Up to n points of the PML: a point cloud's first n there, else n drawn uniformly (by a
        generator seeded 0)."""
        if isinstance(self.domain, PointCloud):
            return self.domain.interior[self.in_layer(self.domain.interior)][:n]
        return self.sample_layer(n, np.random.default_rng(0))

    def base_sample(self, n: int, rng: np.random.Generator, method: str) -> NDArray[np.float64]:
        """n PDE points from the base density p: uniform over the domain and its layer, or with
        ``pml_share`` of them uniform in the layer and the rest uniform in the physical domain."""
        if self.pml_share is None:
            return self.sampling_domain.sample_interior(n, rng, method)
        n_layer = int(round(self.pml_share * n))
        inner = self.domain.sample_interior(n - n_layer, rng, method)
        return np.concatenate([inner, self.sample_layer(n_layer, rng, method)])

    def sample_layer(self, n: int, rng: np.random.Generator, method: str = "uniform") -> NDArray[np.float64]:
        """n points uniform in the PML: the outer domain's draws outside the box."""
        layer, have = [], 0
        keep = max(self.layer_volume() / self.sampling_domain.volume, 1e-3)
        while have < n:
            m = int(math.ceil((n - have) / keep * 1.1)) + 8
            x = self.sampling_domain.sample_interior(m, rng, method)
            x = x[self.in_layer(x)][: n - have]
            layer.append(x)
            have += len(x)
        return np.concatenate(layer) if layer else np.empty((0, self.dim))

    def base_density(self, x: NDArray) -> NDArray[np.float64]:
        """p(x), the density of :meth:`base_sample`."""
        if self.pml_share is None:
            return np.full(len(x), 1.0 / self.sampling_domain.volume)
        layer = self.in_layer(x)
        return np.where(layer, self.pml_share / self.layer_volume(),
                        (1.0 - self.pml_share) / self.domain.volume)

    def sample_pde(self, n: int | None, rng: np.random.Generator, method: str, point_sources: list,
                   source_share: float) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
        """``(x [M, d], w [M] or None)``: PDE points and their importance weights
        (:meth:`Problem.sample_pde <helmpinn.problems.problem.Problem.sample_pde>`), with
        ``source_share`` of them drawn from the ``point_sources``' Gaussian mixture and, with a
        :attr:`density`, its excess share of the rest from its excess (:class:`CellDensity`);
        with a :attr:`corner_radius` and a domain with re-entrant corners, the weights times
        :func:`corner_weights`, and with :attr:`row_weights` times those."""
        x, w = self._drawn(n, rng, method, point_sources, source_share)
        for extra in (self.corner_weights(x), None if self.row_weights is None else self.row_weights(x)):
            if extra is not None:
                w = extra if w is None else w * extra
        return x, w

    def corner_weights(self, x: NDArray) -> NDArray[np.float64] | None:
        """:func:`corner_weights` at x about the domain's re-entrant corners with
        :attr:`corner_radius`; None without either. The PDE rows take them
        (:meth:`sample_pde`) and so do the Robin and Neumann rows
        (:meth:`Problem.sample <helmpinn.problems.problem.Problem.sample>`): where the domain's
        angle exceeds π the solution's gradient grows without bound toward the vertex
        (``r^(π/α − 1)``), while a smooth field that meets ``∂u/∂n = 0`` on both edges has a
        zero gradient there; held at full weight, those rows pull the field flat about every
        vertex (a 24-sided polygon in place of a circle: docs/benchmarks.md). The Dirichlet rows
        keep their weight: the solution itself stays bounded there."""
        if self.corner_radius is None:
            return None
        corners, sizes = self.domain.reentrant_corners()
        if not len(corners):
            return None
        return corner_weights(x, corners, sizes, self.corner_radius)

    def _drawn(self, n: int | None, rng: np.random.Generator, method: str, point_sources: list,
               source_share: float) -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
        """:meth:`sample_pde`'s points and their importance weights, before the corners' weights."""
        refine = self.density if self.density is not None and self.density.excess_share > 0 else None
        if (source_share == 0 and refine is None) or not n:  # (a PointCloud takes n = None: all its points)
            return self.base_sample(n, rng, method), None
        n = int(n)
        n_src = int(round(source_share * n))
        n_ref = 0 if refine is None else int(round(refine.excess_share * (n - n_src)))
        parts = [self.base_sample(n - n_src - n_ref, rng, method)]
        if n_src:
            parts.append(sample_mixture(point_sources, n_src, rng))
        if n_ref:
            parts.append(refine.sample(n_ref, rng))
        drawn = np.concatenate(parts[1:]) if len(parts) > 1 else np.empty((0, self.dim))
        drawn = drawn[self.sampling_domain.contains(drawn)]
        x = np.ascontiguousarray(np.concatenate([parts[0], drawn]))
        p = self.base_density(x)
        q = (n - n_src - n_ref) * p
        if n_src:
            q = q + n_src * mixture_density(point_sources, x)
        if n_ref:
            q = q + n_ref * refine.density(x)
        return x, (len(x) / n) * p / (q / n)

    def sample_boundary(self, n: int | None, rng: np.random.Generator,
                        method: str) -> tuple[BoundarySample, NDArray[np.float64] | None]:
        """``(parts, wall)``: n boundary points split over the parts by measure, and None; with
        a PML, n points on the sampled box's faces by measure: those on the layer's faces are
        its outer ``wall`` (``u = 0`` there), those on a face without the layer (which spans the
        layer along the face) keep that face's part name; for a scatterer inside (a
        :class:`~helmpinn.problems.geometry.BoxMinusObstacle`: a ball, a polygon), half of the n
        go on it (by measure it would get a sliver of them), as the part ``"scatterer"``."""
        if not self.absorbed:
            return self.domain.sample_boundary(n, rng, method), None
        sd = self.sampling_domain
        cut = isinstance(sd, BoxMinusObstacle)
        n_outer = int(n) // 2 if cut else n
        outer = (sd.box if cut else sd).sample_boundary(n_outer, rng, method)
        on_wall = np.isin(outer.parts, self.absorbed)
        wall, free = outer.x[on_wall], ~on_wall
        xs, ns, ps = [outer.x[free]], [outer.normals[free]], [outer.parts[free]]
        if cut:
            inner = sd.obstacle.sample_boundary(int(n) - n_outer, rng, method)
            xs.append(inner.x)
            ns.append(-inner.normals)
            ps.append(np.full(len(inner.x), "scatterer"))
        parts = np.concatenate(ps).astype(f"<U{max([9] + [len(p) for p in self.domain.part_names])}")
        return BoundarySample(np.concatenate(xs), np.concatenate(ns), parts), wall
