"""Jumps in a medium: where the coefficient κ steps rather than varies.

A velocity jump (an inclusion, a layer boundary, a salt body) leaves the field u and its normal
derivative continuous but makes Δu jump by (κ₁ − κ₂) u across the interface. Two things follow:

- finite differences that sample κ at their nodes place the interface only to within a node,
  and converge at first order there. The second difference of u is exactly an average of u″
  under a kernel (the hat of half-width h for the three-point stencil, (4/3) hat_h − (1/3)
  hat_2h for the five-point one), so κ averaged under that kernel at the nodes whose kernel
  reaches the jump (:func:`average_kappa`) is the consistent coefficient there; the reference
  solver does it by default (:func:`helmpinn.reference.fd_solve`);
- a smooth network cannot follow the kink, and least squares spreads the misfit over the domain.
  :func:`training_problem` gives ``hp.solve`` the medium with its jumps smoothed over a short
  width (:func:`smoothed_kappa`), whose solution lies close to the sharp one's, and weighs the
  PDE rows on the ramps down (:func:`ramp_weights`): the residual a network leaves on a steep
  ramp moves the field less than the residual it leaves in the bulk, and at full weight those
  rows take the loss.

:func:`find_jumps` finds the jumps of a coefficient on a regular grid of probes: a neighbouring
pair whose relative step exceeds ``threshold`` and keeps at least half of it between two of the
:data:`PROBE_SPLIT` + 1 points that split the pair evenly (a smooth but steep medium's step
spreads over them, a jump's does not); :func:`find_grid_jumps` finds them on a grid's nodes (a
:class:`~helmpinn.problems.media.GridField`); :func:`problem_jumps` a problem's.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from .._checks import real_number
from .media import GridField

__all__ = ["Jumps", "find_jumps", "find_grid_jumps", "problem_jumps", "average_kappa", "smoothed_kappa",
           "training_problem", "ramp_weights", "RampWeights", "DEFAULT_THRESHOLD", "SMOOTHING_PER_WAVELENGTH", "RAMP_WEIGHT"]

#: The relative step ``|κ₁ − κ₂| / max(|κ₁|, |κ₂|)`` between neighbouring probes above which a pair
#: is tested for a jump (about a 2.5% step in the velocity).
DEFAULT_THRESHOLD = 0.05

#: Each flagged pair is probed again at this many equal steps across.
PROBE_SPLIT = 8

#: Probes per unit of the largest extent of the sampled domain, by dimension.
PROBES = {1: 4096, 2: 256, 3: 64}


@dataclass
class Jumps:
    """The jumps found on a probe grid: ``points`` [M, d], the midpoints of the neighbouring
    pairs across a jump (on the interface to within ``spacing / 2``), ``relative`` [M] their
    relative steps, ``axis`` [M] the direction of each pair, and ``spacing`` (per direction)."""

    points: NDArray[np.float64]
    relative: NDArray[np.float64]
    axis: NDArray[np.int64]
    spacing: NDArray[np.float64]

    def __bool__(self) -> bool:
        return len(self.points) > 0

    def __len__(self) -> int:
        return len(self.points)

    @property
    def largest(self) -> float:
        """The largest relative step (0 without jumps)."""
        return float(self.relative.max()) if len(self.relative) else 0.0

    def within(self, reach: float) -> Callable[[NDArray], NDArray[np.bool_]]:
        """``x [M, d] -> [M]``: whether each point lies within ``reach`` of one of the jumps'
        points (one k-d tree, built here, for every call)."""
        from scipy.spatial import cKDTree

        tree = cKDTree(self.points)

        def near(x: NDArray) -> NDArray[np.bool_]:
            return np.isfinite(tree.query(np.asarray(x, np.float64), distance_upper_bound=reach)[0])
        return near

    def __repr__(self) -> str:
        if not self:
            return "Jumps(none)"
        return (f"Jumps({len(self)} pairs, largest relative step {self.largest:.3g}, first near "
                f"{np.round(self.points[0], 4).tolist()})")


def _relative(a: NDArray, b: NDArray) -> NDArray[np.float64]:
    scale = np.maximum(np.abs(a), np.abs(b))
    return np.abs(a - b) / np.where(scale > 0, scale, 1.0)


def _flag(values: NDArray, threshold: float) -> list[tuple[int, NDArray[np.bool_]]]:
    """Per axis, the mask over the pairs (i, i + 1) whose relative step exceeds threshold."""
    out = []
    for j in range(values.ndim):
        a = np.moveaxis(values, j, 0)
        out.append((j, np.moveaxis(_relative(a[1:], a[:-1]) > threshold, 0, j)))
    return out


def find_jumps(kappa: Callable[[NDArray], NDArray], axes: Sequence[NDArray], *,
               threshold: float = DEFAULT_THRESHOLD, values: NDArray | None = None) -> Jumps:
    """The jumps of ``kappa`` (``x [N, d] -> [N]``) on the grid of ``axes`` (d increasing
    coordinate arrays; ``values``: κ already evaluated there, of the grid's shape). A pair of
    neighbouring nodes is a jump when its relative step exceeds ``threshold`` and κ, probed at
    the :data:`PROBE_SPLIT` + 1 points that split the pair evenly (its ends included), keeps at
    least half that step between two neighbouring probes."""
    threshold = real_number("find_jumps", "threshold", threshold, low=0.0)
    axes = [np.asarray(a, np.float64) for a in axes]
    d = len(axes)
    shape = tuple(len(a) for a in axes)
    if values is None:
        mesh = np.meshgrid(*axes, indexing="ij")
        x = np.stack([m.ravel() for m in mesh], axis=1)
        values = np.asarray(kappa(x)).reshape(shape)
    values = np.broadcast_to(np.asarray(values), shape)
    spacing = np.array([a[1] - a[0] if len(a) > 1 else 0.0 for a in axes])
    pts, rel, ax = [], [], []
    for j, mask in _flag(values, threshold):
        idx = np.argwhere(mask)
        if not len(idx):
            continue
        lo = np.stack([axes[i][idx[:, i]] for i in range(d)], axis=1)
        step = axes[j][idx[:, j] + 1] - axes[j][idx[:, j]]
        mid = lo.copy()
        mid[:, j] += step / 2
        # κ at PROBE_SPLIT + 1 points across the pair, its ends included: a jump keeps its whole
        # step between two of them, a resolved ramp spreads it over all
        sub = np.empty((PROBE_SPLIT + 1, len(lo)), np.complex128)
        for k in range(PROBE_SPLIT + 1):
            p = lo.copy()
            p[:, j] += step * (k / PROBE_SPLIT)
            sub[k] = np.asarray(kappa(p))
        hi_idx = idx.copy()
        hi_idx[:, j] += 1
        coarse = _relative(values[tuple(idx.T)], values[tuple(hi_idx.T)])
        fine = _relative(sub[1:], sub[:-1]).max(axis=0)
        keep = fine >= 0.5 * coarse
        pts.append(mid[keep])
        rel.append(fine[keep])
        ax.append(np.full(int(keep.sum()), j, np.int64))
    if not pts:
        return Jumps(np.empty((0, d)), np.empty(0), np.empty(0, np.int64), spacing)
    return Jumps(np.concatenate(pts), np.concatenate(rel), np.concatenate(ax), spacing)


def find_grid_jumps(values: NDArray, origin: Sequence[float], spacing: Sequence[float], *,
                    threshold: float = DEFAULT_THRESHOLD) -> Jumps:
    """The jumps of a coefficient sampled on a grid (a :class:`~helmpinn.problems.media.GridField`'s
    ``values``, its ``origin`` and ``spacing``): neighbouring nodes whose relative step exceeds
    ``threshold`` and at least twice the steps of the pairs on either side along the same axis
    (a step, not a steep but resolved ramp). The points are the pairs' midpoints."""
    threshold = real_number("find_grid_jumps", "threshold", threshold, low=0.0)
    values = np.asarray(values)
    d = values.ndim
    origin = np.asarray(origin, np.float64).reshape(-1)
    spacing = np.broadcast_to(np.asarray(spacing, np.float64), (d,))
    pts, rel, ax = [], [], []
    for j in range(d):
        a = np.moveaxis(values, j, 0)
        r = _relative(a[1:], a[:-1])
        before = np.zeros_like(r)
        after = np.zeros_like(r)
        before[1:] = r[:-1]
        after[:-1] = r[1:]
        mask = np.moveaxis((r > threshold) & (r >= 2 * before) & (r >= 2 * after), 0, j)
        idx = np.argwhere(mask).astype(np.float64)
        idx[:, j] += 0.5
        pts.append(origin + idx * spacing)
        rel.append(np.moveaxis(r, 0, j)[mask])
        ax.append(np.full(len(idx), j, np.int64))
    return Jumps(np.concatenate(pts), np.concatenate(rel), np.concatenate(ax), np.asarray(spacing))


def _probe_axes(lo: NDArray, hi: NDArray, d: int) -> list[NDArray]:
    n = PROBES.get(d, 32)
    width = float(np.max(hi - lo))
    return [np.linspace(lo[j], hi[j], max(int(np.ceil(n * (hi[j] - lo[j]) / width)), 2) + 1) for j in range(d)]


def problem_jumps(problem, *, threshold: float = DEFAULT_THRESHOLD) -> Jumps:
    """The jumps of ``problem``'s κ: for a :class:`~helmpinn.problems.media.GridField` velocity or κ, its
    nodes' steps (:func:`find_grid_jumps`; its spline is smooth at finer scales, and steps
    within one of its cells); for any other callable κ, those over the sampled domain's bounding
    box (the PML included) probed on a regular grid (:data:`PROBES` nodes across the largest
    extent, :func:`find_jumps`). A constant κ has none."""
    d = problem.dim
    velocity = getattr(problem, "velocity", None)
    if isinstance(velocity, GridField):    # κ ∝ 1/v²
        return find_grid_jumps(1.0 / velocity.values ** 2, velocity.origin, velocity.spacing, threshold=threshold)
    if isinstance(problem.kappa, GridField):
        return find_grid_jumps(problem.kappa.values, problem.kappa.origin, problem.kappa.spacing,
                               threshold=threshold)
    if not callable(problem.kappa):
        return Jumps(np.empty((0, d)), np.empty(0), np.empty(0, np.int64), np.zeros(d))
    lo, hi = (np.asarray(b, np.float64) for b in problem.sampling_domain.bounds)
    return find_jumps(problem.kappa_at, _probe_axes(lo, hi, problem.dim), threshold=threshold)


#: Quadrature points per direction and per h of :func:`average_kappa`, by dimension.
AVERAGE_POINTS = {1: 256, 2: 32, 3: 8}


def _kernel_1d(order: int, m: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """Midpoint-rule nodes t (in units of h) and weights of the 1-D kernel that the central
    second difference of ``order`` applies to u″: the hat of half-width h for order 2;
    (4/3) hat_h − (1/3) hat_2h (each of integral 1) for order 4. The kernels are linear between
    integers and m is even, so the rule integrates them exactly."""
    reach = 1 if order == 2 else 2
    t = -reach + (np.arange(reach * m) + 0.5) * (2.0 / m)
    hat = np.maximum(1.0 - np.abs(t), 0.0)
    k = hat if order == 2 else (4.0 / 3.0) * hat - (1.0 / 6.0) * np.maximum(1.0 - np.abs(t) / 2, 0.0)
    return t, k * (2.0 / m)


def average_kappa(kappa: Callable[[NDArray], NDArray], x: NDArray, h: Sequence[float], *,
                  order: int = 2, m: int | None = None,
                  bounds: tuple[Sequence[float], Sequence[float]] | None = None) -> NDArray[np.complex128]:
    """κ averaged about each point of ``x`` [N, d] with the tensor product over the directions
    of the kernel that the central second difference of ``order`` (2 or 4) and spacing h_j
    applies to u″ along direction j (:func:`_kernel_1d`: for order 2 the hat of half-width h_j),
    by the midpoint rule with ``m`` points per h (default :data:`AVERAGE_POINTS`, even), in blocks
    of points; quadrature points outside ``bounds`` (lo, hi) are moved onto them. For the
    second difference in 1-D this is the consistent κ at a jump: the difference quotient of u
    is exactly that average of u″."""
    if order not in (2, 4):
        raise ValueError(f"average_kappa: order must be 2 or 4, got {order!r}")
    x = np.asarray(x, np.float64)
    n, d = x.shape
    m = AVERAGE_POINTS.get(d, 8) if m is None else int(m)
    if m < 2 or m % 2:
        raise ValueError(f"average_kappa: m must be an even integer >= 2, got {m!r}")
    h = np.broadcast_to(np.asarray(h, np.float64), (d,))
    t, w = _kernel_1d(order, m)
    grids = np.meshgrid(*([np.arange(len(t))] * d), indexing="ij")
    offsets = np.stack([t[g.ravel()] for g in grids], axis=1) * h      # [K, d]
    weights = np.prod(np.stack([w[g.ravel()] for g in grids], axis=1), axis=1)
    out = np.empty(n, np.complex128)
    block = max(1, (1 << 20) // len(offsets))
    for s in range(0, n, block):
        xs = x[s:s + block]
        pts = (xs[:, None, :] + offsets[None, :, :]).reshape(-1, d)
        if bounds is not None:
            pts = np.clip(pts, bounds[0], bounds[1])
        vals = np.asarray(kappa(pts), np.complex128).reshape(len(xs), len(offsets))
        out[s:s + block] = vals @ weights
    return out


def smoothed_kappa(kappa: Callable[[NDArray], NDArray], jumps: Jumps, width: float, *,
                   m: int = 8) -> Callable[[NDArray], NDArray]:
    """κ averaged with the kernel (4/3) hat_w − (1/3) hat_2w in every direction (w = ``width``;
    :func:`average_kappa` with order 4, ``m`` points per w) at the points whose kernel may reach
    a jump of ``jumps`` (within 2 w √d plus the probes' spacing of one of its points), κ itself
    everywhere else: a medium whose jumps are ramps about 2 w wide (4 w with their tails), equal
    to κ away from them. The kernel is symmetric and its second moment vanishes, so the
    solution moves less from the jump's than under a plain average of the same width (measured
    in docs/guide/sources-media.md)."""
    width = real_number("smoothed_kappa", "width", width, low=0.0, low_open=True)
    reaches = jumps.within(2 * width * math.sqrt(jumps.points.shape[1]) + float(np.max(jumps.spacing)))

    def kappa_smoothed(x: NDArray) -> NDArray:
        x = np.asarray(x, np.float64)
        out = np.asarray(kappa(x))
        near = reaches(x)
        if near.any():
            avg = average_kappa(kappa, x[near], width, order=4, m=m)
            if np.any(avg.imag):
                out = out.astype(np.complex128)
                out[near] = avg
            else:
                out = out.astype(np.float64)
                out[near] = avg.real
        return out
    return kappa_smoothed


#: A smoothed jump's half-width w in wavelengths at the largest wavenumber (hp.solve's default).
SMOOTHING_PER_WAVELENGTH = 0.1
#: The PDE rows' weight where a smoothed jump ramps κ (within 2 w of it: :func:`ramp_weights`).
RAMP_WEIGHT = 0.25


@dataclass(frozen=True)
class RampWeights:
    """The PDE rows' weights by place about smoothed jumps, ``x [M, d] -> w [M]``: ``weight``
    where ``on_ramp(x)``, 1 elsewhere (:func:`ramp_weights`; a run whose radiation rows read the
    ramps takes another weight: :func:`helmpinn.training.dd_driver.sampled_problem`)."""

    on_ramp: Callable[[NDArray], NDArray[np.bool_]]
    weight: float

    def __call__(self, x: NDArray) -> NDArray[np.float64]:
        return np.where(self.on_ramp(x), self.weight, 1.0)


def ramp_weights(jumps: Jumps, width: float, weight: float = RAMP_WEIGHT) -> RampWeights:
    """``x [M, d] -> w [M]``: ``weight`` at the points within 2 ``width`` (the reach of
    :func:`smoothed_kappa`'s kernel along an axis) plus half the probes' spacing of a jump's
    point, 1 elsewhere. A network trained on the smoothed medium leaves a residual on the ramp
    that, per unit, moves the field a third as much as the residual it leaves in the bulk (on a
    square inclusion: docs/benchmarks.md, "Media with jumps"); at full weight those rows take
    half the loss and the steps spend themselves there."""
    return RampWeights(jumps.within(2 * width + 0.5 * float(np.max(jumps.spacing))), float(weight))


def training_problem(problem, width: float | str | None = "auto"):
    """The problem a network is trained on when ``problem``'s κ jumps (:func:`problem_jumps`):
    a shallow copy whose κ is :func:`smoothed_kappa` at half-width ``width``, whose PDE rows
    on the ramps take :func:`ramp_weights` (its sampler's ``row_weights``) and whose
    ``smoothed_jumps`` holds the jumps (a decomposed run plan on it adds the radiation rows:
    :func:`helmpinn.training.dd_driver.decomposed_settings`; "auto" width:
    :data:`SMOOTHING_PER_WAVELENGTH` of the shortest wavelength, 2π / ``problem.wavenumber``;
    None or "off": the problem as given). Returns ``(problem to train on, Jumps or None)``; a
    medium without jumps is returned as given, the very object."""
    if width is None or (isinstance(width, str) and width == "off"):
        return problem, None
    if isinstance(width, str):
        if width != "auto":
            raise ValueError(f"jumps: expected 'auto', 'off', None or a width > 0, got {width!r}")
    else:
        width = real_number("solve", "jumps", width, low=0.0, low_open=True)
    found = problem_jumps(problem)
    if not found:
        return problem, None
    if width == "auto":
        width = SMOOTHING_PER_WAVELENGTH * 2 * math.pi / problem.wavenumber
    smooth = copy.copy(problem)
    smooth.medium = copy.copy(problem.medium)   # its own medium and sampler: the user's problem keeps its own
    smooth.medium.kappa = smoothed_kappa(problem.kappa, found, width)
    smooth.sampler = copy.copy(problem.sampler)
    smooth.sampler.row_weights = ramp_weights(found, width)
    smooth.smoothed_jumps = found   # (what the run plan reads: helmpinn.training.dd_driver.decomposed_settings)
    return smooth, found
