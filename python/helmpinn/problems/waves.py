"""Built-in wave benchmarks with exact solutions: ``box-source``, ``free-source`` and ``halfspace-source``.

``box-source`` is the Helmholtz ladder of the multilevel FBPINN paper (Dolean, Heinlein, Mishra,
Moseley 2024): ``Δu + w²u = f`` on ``[0, 1]²``, ``u = 0`` on the boundary, with the centred,
normalised Gaussian source ``f = exp(−|x − ½|²/(2 sd²)) / (2π sd²)``; ``wavelengths`` W across the
box gives ``w = 2π W`` (the ladder's ``w = (2^i/4)·2π/0.2`` is W = 1.25·2^i) and the default
``sd = 0.25/W`` (the ladder's ``(4/2^i)·0.05``). Its exact solution is the sine series

    u = Σ_{m,n} f_mn / (w² − π²(m² + n²)) sin(mπx) sin(nπy),

with ``f_mn = 4 ∫∫ f sin(mπx) sin(nπy)`` computed by a type-I DST (``scipy.fft.dstn``) on a fine
grid (the trapezoid rule, spectrally accurate for a source that vanishes to round-off at the
boundary). At the ladder's frequencies the box is resonant: the modes with ``m² + n² = (w/π)²``
solve the homogeneous problem ((6, 8) and (8, 6) at 5 wavelengths). The centred source does not
excite them (their coefficients are zero), the series leaves them out, and the problem determines
u only up to them: :func:`box_source_error` reports the error with its least-squares component
in those modes removed, beside the raw error.

``free-source`` is a Gaussian source ``g = exp(−r²/(2 s²)) / (2π s²)`` in free space, the physical
box ``[−1, 1]²`` inside a :class:`~helmpinn.problems.pml.PML` one wavelength wide; W wavelengths across the
box gives ``k = π W``. Our equation ``Δu + k²u = f`` takes ``f = −g``; the outgoing solution
(``e^{−iωt}``) is the radial Green's-function integral

    u(r) = (iπ/2) [H₀(kr) ∫₀^r J₀(kt) g(t) t dt + J₀(kr) ∫_r^∞ H₀(kt) g(t) t dt],

(``H₀ = H₀⁽¹⁾``), evaluated by Gauss-Legendre panels; far from the source (r ≳ 12 s) it is
``(i/4) e^{−k²s²/2} H₀(kr)``.

``halfspace-source`` is the same source at depth ``depth`` below a free surface: the box
``[−1, 1] × [0, 1]`` (y the depth) with ``u = 0`` on y = 0 (the face ``"ymin"``) and a PML one
wavelength wide on its other three faces (``PML(faces=("xmin", "xmax", "ymax"))``). Its exact
solution is the image solution: the free-space field of the source at ``(0, depth)`` minus that
of its mirror image at ``(0, −depth)``; the image's Gaussian is part of the source term (its
tail reaches into the box), so the solution is exact.

For any closed box problem (not only ``box-source``), :func:`box_resonances` lists the
eigenmodes of ``−Δ`` whose eigenvalue lies near κ, with the factor by which each turns a residual
into an error; :func:`helmpinn.solve` issues a :class:`ResonanceWarning` from it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import integer
from .geometry import Box
from .pml import PML
from .conditions import Dirichlet, Robin
from .problem import Problem

__all__ = ["box_source_solution", "free_source_field", "resonant_modes", "box_source_error",
           "BoxMode", "box_resonances", "ResonanceWarning", "resonance_warning", "box_mode_values",
           "resonance_rows", "resonance_green_rows", "RESONANCE_WITHIN", "RESONANCE_CAP", "RESONANCE_MOST"]

#: :func:`resonance_rows`' modes: those within this share of κ (amplified 20 times or more).
RESONANCE_WITHIN = 0.05
#: :func:`resonance_rows`' largest amplification counted (a mode amplified more weighs as this).
RESONANCE_CAP = 1000.0
#: :func:`resonance_rows`' most modes (the most amplified): 25 at 10 wavelengths of ``box-source``
#: and 20 on ``dirichlet2d`` n = 8 are all taken; 117 at 20 wavelengths would cost 2 × 234
#: parameter vectors (1.2 GB over 17 × 17 subnetworks) and 234 preconditioner applications a trial.
RESONANCE_MOST = 32


class ResonanceWarning(UserWarning):
    """A closed box whose κ lies near an eigenvalue of −Δ (:func:`resonance_warning`)."""


def _positive(name: str, value) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a positive number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name}: expected a positive finite number, got {v}")
    return v


def _points2(x: ArrayLike, name: str = "x") -> NDArray[np.float64]:
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] != 2:
        raise ValueError(f"{name}: expected points of shape (N, 2), got shape {x.shape}")
    return x


# ---------------------------------------------------------------------------------------------
# box-source
# ---------------------------------------------------------------------------------------------
def _gaussian(x: NDArray, centre: float, sd: float) -> NDArray:
    r2 = ((x - centre) ** 2).sum(-1)
    return np.exp(-r2 / (2.0 * sd * sd)) / (2.0 * math.pi * sd * sd)


class _SineSeries:
    """The box problem's sine coefficients ``c_mn`` (resonant modes set to zero)."""

    def __init__(self, w: float, sd: float, grid: int = 1024):
        from scipy.fft import dstn

        h = 1.0 / grid
        g = np.arange(1, grid) * h
        X, Y = np.meshgrid(g, g, indexing="ij")
        f = _gaussian(np.stack([X, Y], -1), 0.5, sd)
        # dstn type I: 2 Σ f sin(π m i / grid) per axis; f_mn = 4 h² Σ f sin sin = h² · dstn.
        fmn = dstn(f, type=1) * h * h
        # The source's coefficients fall as exp(−(π m sd)²/2): below 1e-30 of the first beyond K.
        K = min(grid - 1, int(12.0 / (math.pi * sd)) + 8)
        m = np.arange(1, K + 1)
        den = w * w - math.pi ** 2 * (m[:, None] ** 2 + m[None, :] ** 2)
        resonant = np.abs(den) <= 1e-9 * w * w
        self.c = np.where(resonant, 0.0, fmn[:K, :K] / np.where(resonant, 1.0, den))
        self.m = m

    def __call__(self, x: NDArray) -> NDArray[np.complex128]:
        sx = np.sin(math.pi * np.outer(x[:, 0], self.m))
        sy = np.sin(math.pi * np.outer(x[:, 1], self.m))
        return np.einsum("pm,pm->p", sx @ self.c, sy).astype(np.complex128)


def box_source_solution(wavelengths: float = 5.0, sd: float | None = None):
    """The exact solution ``x [N, 2] -> complex [N]`` of ``box-source`` (the sine series without
    the resonant modes; see the module docstring)."""
    W = _positive("wavelengths", wavelengths)
    sd = 0.25 / W if sd is None else _positive("sd", sd)
    series = _SineSeries(2.0 * math.pi * W, sd)
    return lambda x: series(_points2(x))


def box_source(wavelengths: float = 5.0, sd: float | None = None) -> Problem:
    W = _positive("wavelengths", wavelengths)
    sd = 0.25 / W if sd is None else _positive("sd", sd)
    w = 2.0 * math.pi * W
    return Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=w * w,
                   source=lambda x: _gaussian(np.asarray(x, np.float64), 0.5, sd).astype(np.complex128),
                   bcs={"*": Dirichlet(0.0)}, exact=box_source_solution(W, sd), wavenumber=w)


def resonant_modes(x: ArrayLike, w: float, tol: float = 1e-9) -> NDArray[np.float64]:
    """``[N, M]``: the modes ``sin(mπx) sin(nπy)`` of the unit box with ``m² + n² = (w/π)²`` (the
    kernel of ``Δ + w²`` with ``u = 0`` on the boundary) at x; M may be 0."""
    x = _points2(x)
    w = _positive("w", w)
    modes, _, _ = _modes_near(w * w, [(1.0, 0.0, 1)] * 2, tol)
    cols = [np.sin(m * math.pi * x[:, 0]) * np.sin(n * math.pi * x[:, 1]) for m, n in modes.tolist()]
    return np.stack(cols, 1) if cols else np.zeros((len(x), 0))


def _axis_eigenvalues(m: NDArray, length: float, shift: float) -> NDArray[np.float64]:
    """One axis's eigenvalues ``((m + shift)π/L)²`` at the indices m."""
    return ((m + shift) * math.pi / length) ** 2


def _outer_rows(kappa: float, axes: list[tuple[float, float, int]], within: float):
    """The combinations of every axis's index but the last's, one index of the first axis at a
    time (one empty combination in 1-D): yields ``(indices [R, d − 1], sums [R])``, the sums of
    their eigenvalues (added axis after axis), in index order, over the indices whose own
    eigenvalue is at most ``(1 + within)``·κ."""
    per_axis = []
    for length, shift, first in axes[:-1]:
        top = int(math.sqrt(kappa * (1 + within)) * length / math.pi) + 1
        m = np.arange(first, top + 1)
        per_axis.append((m, _axis_eigenvalues(m, length, shift)))
    if not per_axis:
        yield np.zeros((1, 0), np.int64), np.zeros(1)
        return
    m0, ev0 = per_axis[0]
    for i in range(len(m0)):
        idx, rest = m0[i:i + 1, None], ev0[i:i + 1]
        for m, ev in per_axis[1:]:
            idx = np.concatenate([np.repeat(idx, len(m), 0), np.tile(m, len(idx))[:, None]], 1)
            rest = (rest[:, None] + ev[None, :]).ravel()
        yield idx, rest


def _last_axis_range(kappa: float, within: float, rest: NDArray, axis: tuple[float, float, int]
                     ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """Per row of ``rest`` (the other axes' eigenvalue sums [R]) the first and last index m of the
    last axis with ``|rest + λ_m − κ| <= within·κ`` in floating point (the test of every mode in
    :func:`_modes_near`), [R] each, last < first where there is none: solved for m by a square
    root, then moved by the test itself across the rounding at either end (the set is an
    interval: the sum grows with m)."""
    length, shift, first = axis
    scale = length / math.pi

    def ok(m: NDArray) -> NDArray[np.bool_]:
        return (m >= first) & (np.abs(rest + _axis_eigenvalues(m, length, shift) - kappa) <= within * kappa)

    lo = np.ceil(scale * np.sqrt(np.maximum(kappa - within * kappa - rest, 0.0)) - shift)
    hi = np.floor(scale * np.sqrt(np.maximum(kappa + within * kappa - rest, 0.0)) - shift)
    lo = np.maximum(lo, first).astype(np.int64)
    hi = hi.astype(np.int64)
    for step, move in ((-1, "lo"), (1, "hi")):            # widen across the rounding
        while True:
            end = lo if move == "lo" else hi
            grow = ok(end + step)
            if not grow.any():
                break
            end += step * grow
    for step, move in ((1, "lo"), (-1, "hi")):            # narrow across the rounding
        while True:
            end = lo if move == "lo" else hi
            shrink = (lo <= hi) & ~ok(end)
            if not shrink.any():
                break
            end += step * shrink
    return lo, hi


def _amplifications(kappa: float, ev: NDArray) -> NDArray[np.float64]:
    """:class:`BoxMode`'s amplification ``κ/|κ − λ|`` of each eigenvalue (inf within 1e-12·κ)."""
    gap = np.abs(kappa - ev)
    return np.where(gap <= 1e-12 * kappa, np.inf, kappa / np.where(gap > 0, gap, 1.0))


def _modes_near(kappa: float, axes: list[tuple[float, float, int]], within: float,
                most: int | None = None, finite: bool = False
                ) -> tuple[NDArray[np.int64], NDArray[np.float64], int]:
    """The indices [M, d] and eigenvalues [M] of ``−Δ``'s box modes within ``within``·κ of κ, and
    how many there are in all; ``axes``: per axis its length L, the index shift s (eigenvalue
    ``((m + s)π/L)²``) and the first index. ``finite``: only those of a finite amplification
    above 1. All of them in index order when ``most`` is None, else the ``most`` most amplified,
    the most first (ties in index order).

    No grid of every mode: for each combination of the other axes' indices the last axis's
    indices in the window are solved for (:func:`_last_axis_range`), so the memory is that of
    one index of the first axis at a time (and of the modes returned) and the time that of the
    combinations, not of the modes: κ = 2000² in the unit cube has 4 million modes within 1%,
    counted in about a second. With ``most``, once ``most`` modes are kept only the indices at
    most as far from κ as the farthest of them are taken (a narrower window, solved the same
    way)."""
    last = axes[-1]
    length, shift, _ = last
    kept_idx, kept_ev, count = [np.zeros((0, len(axes)), np.int64)], [np.zeros(0)], 0
    narrow = within
    for outer, rest in _outer_rows(kappa, axes, within):
        lo, hi = _last_axis_range(kappa, within, rest, last)
        count += int(np.maximum(hi - lo + 1, 0).sum())
        if narrow < within:
            lo, hi = _last_axis_range(kappa, narrow, rest, last)
        n = np.maximum(hi - lo + 1, 0)
        if not n.any():
            continue
        rows = np.repeat(np.arange(len(rest)), n)
        m = lo[rows] + (np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n))
        ev = rest[rows] + _axis_eigenvalues(m, length, shift)
        idx = np.concatenate([outer[rows], m[:, None]], 1)
        if finite:
            amp = _amplifications(kappa, ev)
            keep = np.isfinite(amp) & (amp > 1)
            idx, ev = idx[keep], ev[keep]
        kept_idx.append(idx)
        kept_ev.append(ev)
        if most is not None:   # the best so far first: a stable sort keeps ties in index order
            idx, ev = np.concatenate(kept_idx), np.concatenate(kept_ev)
            order = np.argsort(-_amplifications(kappa, ev), kind="stable")[:most]
            kept_idx, kept_ev = [idx[order]], [ev[order]]
            if len(order) == most:   # a mode farther from κ than all of these is not taken
                narrow = min(within, float(np.max(np.abs(kappa - ev[order]))) / kappa * (1 + 1e-9))
    return np.concatenate(kept_idx), np.concatenate(kept_ev), count


@dataclass(frozen=True)
class BoxMode:
    """An eigenmode of ``−Δ`` on a closed box: its index per axis (``sin(m π (x − lo)/L)`` for an
    axis with Dirichlet conditions at both ends, m ≥ 1; ``cos`` for Neumann at both, m ≥ 0;
    ``sin((m + ½) π (x − lo)/L)`` or its mirror for one of each, m ≥ 0), its ``eigenvalue`` and
    ``amplification`` ``κ/|κ − eigenvalue|``: the factor by which a residual in that mode becomes
    an error in u (``inf``: the mode solves the homogeneous problem)."""

    mode: tuple[int, ...]
    eigenvalue: float
    amplification: float


def box_resonances(problem: Problem, within: float = 0.01, most: int | None = None) -> list[BoxMode] | None:
    """The eigenmodes of ``−Δ`` of a closed box problem whose eigenvalue lies within
    ``within``·κ of κ (a residual in them is amplified at least ``1/within`` times), the
    nearest first; with ``most``, only the ``most`` nearest (in 3-D the window holds about
    ``(π/2)·within·(√κ L/π)³`` modes: 4 million within 1% of κ = 2000² in the unit cube, found
    without a grid of every mode but each one a :class:`BoxMode`). A closed box: a
    :class:`~helmpinn.problems.geometry.Box` or Interval without a PML, every face Dirichlet or Neumann
    (Robin with α = 0), a real constant κ and no operator coefficients (``a``, ``b``, density).
    None for any other problem (an absorbing boundary or medium has no real resonance; a
    variable medium is not analysed)."""
    found = _resonances(problem, within, most)
    return None if found is None else found[0]


def _resonances(problem: Problem, within: float, most: int | None = None, finite: bool = False
                ) -> tuple[list[BoxMode], int] | None:
    """:func:`box_resonances`' modes (``finite``: only those of a finite amplification above 1)
    and how many lie in the window in all (:func:`_modes_near`); None for a problem that is not
    a closed box."""
    within = _positive("within", within)
    most = None if most is None else integer("box_resonances", "most", most, low=1)
    faces = _closed_box(problem)
    if faces is None:
        return None
    kappa = float(problem.kappa)
    axes = [(float(L), 0.5 if d0 != d1 else 0.0, 1 if d0 and d1 else 0) for L, d0, d1 in faces]
    idx, ev, count = _modes_near(kappa, axes, within, most, finite)
    out = [BoxMode(tuple(mode), lam, float(a))
           for mode, lam, a in zip(idx.tolist(), ev.tolist(), _amplifications(kappa, ev).tolist())]
    return sorted(out, key=lambda r: -r.amplification), count


def _closed_box(problem: Problem) -> list[tuple[float, bool, bool]] | None:
    """Per axis of a closed box problem (:func:`box_resonances`) its length and whether its min
    and max faces are Dirichlet (else Neumann); None for any other problem."""
    domain = problem.domain
    if (not isinstance(domain, Box) or problem.pml is not None or problem.uses_operator
            or callable(problem.kappa) or isinstance(problem.kappa, complex) or not problem.kappa > 0):
        return None
    out = []
    for axis in range(problem.dim):
        dirichlet = []
        for side in ("min", "max"):
            bc = problem.bcs["xyz"[axis] + side]
            if not isinstance(bc, Dirichlet) and not (isinstance(bc, Robin) and not callable(bc.alpha)
                                                      and complex(bc.alpha) == 0):
                return None
            dirichlet.append(isinstance(bc, Dirichlet))
        out.append((float(domain.hi[axis] - domain.lo[axis]), dirichlet[0], dirichlet[1]))
    return out


def box_mode_values(problem: Problem, mode: tuple[int, ...], x: ArrayLike) -> NDArray[np.float64]:
    """The eigenmode ``mode`` of a closed box problem (:class:`BoxMode`'s indices) at points
    x [N, d]: per axis ``sin(m π t)`` (Dirichlet at both ends, t = (x − lo)/L), ``cos(m π t)``
    (Neumann at both), ``sin((m + ½) π t)`` (Dirichlet at the min end only) or ``cos((m + ½) π t)``
    (at the max end only), multiplied."""
    faces = _closed_box(problem)
    if faces is None:
        raise ValueError("problem: expected a closed box (helmpinn.problems.waves.box_resonances), got another problem")
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] != len(faces) or len(mode) != len(faces):
        raise ValueError(f"x, mode: expected points [N, {len(faces)}] and {len(faces)} indices, got {x.shape} and {mode}")
    out = np.ones(len(x))
    for a, m in enumerate(mode):
        out *= _mode_factor(faces[a], m, x[:, a] - float(problem.domain.lo[a]))
    return out


def _mode_factor(face: tuple[float, bool, bool], m: int, s: NDArray) -> NDArray[np.float64]:
    """One axis's factor of a box mode (:func:`box_mode_values`) at distances s from its min face."""
    L, d0, d1 = face
    t = math.pi * s / L
    return (np.sin(m * t) if d1 else np.cos(m * t)) if d0 == d1 else \
        (np.sin((m + 0.5) * t) if d0 else np.cos((m + 0.5) * t))


def resonance_rows(problem: Problem, x: ArrayLike, pde: ArrayLike | None = None, within: float = RESONANCE_WITHIN,
                   cap: float = RESONANCE_CAP, most: int = RESONANCE_MOST) -> NDArray[np.float64] | None:
    """The mode rows of a closed box's near-resonant modes at the points x [N, d]
    (:class:`helmpinn.models.decomposition.DecomposedResiduals`' ``modes``): ``[N, q]``, one column per
    mode of :func:`box_resonances` within ``within``·κ whose amplification ``a = κ/|κ − λ|`` is
    finite, the mode's values at the PDE points (``pde``, a boolean mask; default all) scaled
    to norm ``sqrt(min(a, cap)² − 1)`` and zero at the other points. A residual ρ in such a
    mode then weighs ``min(a, cap)²`` ρ² in the loss instead of ρ², as much as the error
    ``a ρ`` it causes (up to ``cap``; the points' sum stands for the integral, so a larger
    weight would weigh the sampling's own error more). The exactly resonant modes are left out
    (the PDE leaves u undetermined in them: no residual sees them), and of the rest only the
    ``most`` most amplified are taken (each column costs the solver two parameter vectors and a
    preconditioner application per damped trial). None where there is no such mode or the
    problem is not a closed box. For a model that vanishes on every wall,
    :func:`resonance_green_rows` computes the same rows without the sampling's error."""
    modes, beta = _weighted_modes("resonance_rows", problem, within, cap, most)
    if not modes:
        return None
    x = np.asarray(x, np.float64)
    keep = np.ones(len(x), bool) if pde is None else np.asarray(pde, bool)
    cols = []
    for m, b in zip(modes, beta):
        phi = np.where(keep, box_mode_values(problem, m.mode, x), 0.0)
        norm = float(np.linalg.norm(phi))
        cols.append(phi * (b / norm) if norm > 0 else phi)
    return np.stack(cols, 1)


def _weighted_modes(name: str, problem: Problem, within: float, cap: float, most: int
                    ) -> tuple[list[BoxMode], NDArray[np.float64]]:
    """The modes the mode rows take (:func:`resonance_rows`, :func:`resonance_green_rows`; the
    arguments checked in ``name``'s words): of :func:`box_resonances` within ``within``·κ those
    with a finite amplification a > 1, the ``most`` most amplified, and each one's row weight
    ``sqrt(min(a, cap)² − 1)``."""
    within, cap = _positive("within", within), _positive("cap", cap)
    most = integer(name, "most", most, low=1)
    modes = (_resonances(problem, within, most, finite=True) or ([], 0))[0]
    return modes, np.array([math.sqrt(min(m.amplification, cap) ** 2 - 1.0) for m in modes])


#: :func:`resonance_green_rows`' Gauss-Legendre nodes per half-wave of the integrand ``u ψ``
#: along each axis, and the nodes added (on ``dirichlet2d`` n = 8, 64 nodes per axis for its 32
#: half-waves gave ``(κ − λ)⟨u, ψ⟩`` to 1e-6, where 60,000 Sobol points' sum of the residual
#: missed ``⟨r, ψ⟩`` by 1e-3).
GREEN_NODES_PER_HALF_WAVE = 2.0
GREEN_NODES_ADDED = 16


def _gauss_legendre_axes(lo: NDArray, hi: NDArray, counts: list[int]) -> list[tuple[NDArray, NDArray]]:
    """Per axis of the box [lo, hi] the ``counts[a]`` Gauss-Legendre nodes and weights."""
    axes = []
    for a, n in enumerate(counts):
        t, w = np.polynomial.legendre.leggauss(int(n))
        half = 0.5 * float(hi[a] - lo[a])
        axes.append((float(lo[a]) + half * (t + 1.0), half * w))
    return axes


def _grid_points(axes: list[NDArray]) -> NDArray[np.float64]:
    """The tensor grid's nodes [Π n_a, d] of per-axis nodes (axis 0 slowest: ``np.meshgrid(...,
    indexing="ij")``'s order, which :func:`_tensor` follows)."""
    return np.stack([g.ravel() for g in np.meshgrid(*axes, indexing="ij")], 1)


def _tensor(factors: list[NDArray]) -> NDArray:
    """The tensor grid's values [Π n_a, ...] of a product of per-axis factors [n_a, ...] (axis 0
    slowest, as ``np.meshgrid(..., indexing="ij")`` orders the nodes)."""
    d = len(factors)
    out = np.ones(())
    for a, f in enumerate(factors):
        out = out * f.reshape((1,) * a + (len(f),) + (1,) * (d - 1 - a) + f.shape[1:])
    return out.reshape((-1,) + factors[0].shape[1:])


def resonance_green_rows(problem: Problem, within: float = RESONANCE_WITHIN, cap: float = RESONANCE_CAP,
                         most: int = RESONANCE_MOST, source_refine: int = 4
                         ) -> tuple[NDArray[np.float64], NDArray[np.float64], NDArray[np.complex128]] | None:
    """The mode rows of :func:`resonance_rows` for a model that vanishes on every wall (a closed
    box whose every face is Dirichlet, held by a hard constraint), by Green's identity instead of
    the points' sum. For a mode ψ of ``−Δ`` with eigenvalue λ that vanishes on the walls, and u
    that does, ``⟨Δu + κu − f, ψ⟩ = (κ − λ)⟨u, ψ⟩ − ⟨f, ψ⟩`` exactly: the residual's component in
    ψ needs u's values only, no derivatives, and ``u ψ`` is smooth enough for a Gauss-Legendre
    grid to integrate it to round-off (:data:`GREEN_NODES_PER_HALF_WAVE`), where the points'
    sum of the residual carries the sampling's error, amplified ``a`` times in u.

    Returns ``(z, C, y)``: the grid's nodes z [M, d], columns C [M, q] and targets y [M] such that
    ``Σ_j C[j, m] (u(z_j) − y_j)`` is mode m's row, ``sqrt(min(a, cap)² − 1) ·
    ((κ − λ)⟨u, ψ̂⟩ − ⟨f, ψ̂⟩) / sqrt(|Ω|)`` with ψ̂ = ψ / ‖ψ‖ (the scale of the point form's row,
    whose residual rows carry ``1/sqrt(N)``); y is the part of the exact solution in the modes
    (``⟨f, ψ̂⟩`` on a grid ``source_refine`` times finer per axis, for a sharp source). None
    where there is no such mode; the modes as :func:`resonance_rows` takes them."""
    refine = integer("resonance_green_rows", "source_refine", source_refine, low=1)
    faces = _closed_box(problem)
    if faces is not None and not all(d0 and d1 for _, d0, d1 in faces):
        raise ValueError("problem: Green's identity needs u = 0 on every wall; a Neumann face "
                         "leaves its boundary term (use resonance_rows)")
    modes, beta = _weighted_modes("resonance_green_rows", problem, within, cap, most)
    if not modes:
        return None
    lo, hi = np.asarray(problem.domain.lo, float), np.asarray(problem.domain.hi, float)
    kappa = float(problem.kappa)
    # half-waves of u ψ along each axis: u's (k L / π) and the modes' most
    counts = [math.ceil(GREEN_NODES_PER_HALF_WAVE * (math.sqrt(kappa) * float(hi[a] - lo[a]) / math.pi
                                                     + max(m.mode[a] for m in modes))) + GREEN_NODES_ADDED
              for a in range(problem.dim)]

    def factors(axes: list[tuple[NDArray, NDArray]]) -> list[NDArray]:
        # per axis [n_a, q]: the modes' factors at the nodes, scaled so ψ̂ = Π factors has unit norm
        out = []
        for a, (t, w) in enumerate(axes):
            f = np.stack([_mode_factor(faces[a], m.mode[a], t - lo[a]) for m in modes], 1)
            out.append(f / np.sqrt(w @ f ** 2))
        return out

    axes = _gauss_legendre_axes(lo, hi, counts)
    z = _grid_points([t for t, _ in axes])
    w = _tensor([wa for _, wa in axes])
    psi = _tensor(factors(axes))   # ψ̂ on the grid [M, q]
    fine = _gauss_legendre_axes(lo, hi, [refine * c for c in counts])
    fhat = _source_in_modes(problem, fine, factors(fine))
    volume = float(np.prod(hi - lo))
    shift = np.array([kappa - m.eigenvalue for m in modes])
    C = (w[:, None] * psi) * (beta * shift / math.sqrt(volume))
    # y = Σ_n α_n ψ̂_n with (κ − λ_m) ⟨y, ψ̂_m⟩ = ⟨f, ψ̂_m⟩ on the grid (its Gram is I to round-off)
    gram = psi.T @ (w[:, None] * psi)
    y = psi @ np.linalg.solve(gram, fhat / shift)
    return z, C, y


def _source_in_modes(problem: Problem, axes: list[tuple[NDArray, NDArray]], F: list[NDArray]
                     ) -> NDArray[np.complex128]:
    """⟨f, ψ̂_m⟩ for each mode on the tensor Gauss-Legendre grid ``axes`` (nodes and weights per
    axis), ψ̂ the product of the per-axis factors F [n_a, q]: a slab of the first axis at a time
    (a 3-D grid 4 times finer than the rows' holds millions of nodes)."""
    t0, w0 = axes[0]
    slab = max(1, (1 << 18) // int(np.prod([len(t) for t, _ in axes[1:]])))
    out = np.zeros(F[0].shape[1], np.complex128)
    for i in range(0, len(t0), slab):
        part = [(t0[i:i + slab], w0[i:i + slab])] + axes[1:]
        f = problem.source_at(_grid_points([t for t, _ in part]))
        if f is None:
            return out
        w = _tensor([wa for _, wa in part])
        out += (np.asarray(f, np.complex128).reshape(-1) * w) @ _tensor([F[0][i:i + slab]] + F[1:])
    return out


def resonance_warning(problem: Problem, within: float = 0.01) -> str | None:
    """The words of :class:`ResonanceWarning` for ``problem`` (None when :func:`box_resonances`
    finds no mode within ``within``·κ, or the problem is not a closed box)."""
    found = _resonances(problem, within, most=1)
    if not found or not found[0]:
        return None
    modes, count = found
    lo, hi = problem.domain.bounds
    box = " × ".join(f"[{a:g}, {b:g}]" for a, b in zip(lo, hi))
    first = modes[0]
    mode = f"({', '.join(map(str, first.mode))})" if len(first.mode) > 1 else str(first.mode[0])
    if math.isinf(first.amplification):
        what = f"its mode {mode} of −Δ solves the homogeneous problem: u is determined only up to it"
    else:
        what = (f"its mode {mode} of −Δ has eigenvalue {first.eigenvalue:.6g} against κ = {problem.kappa:.6g}, "
                f"so a residual in it is amplified {first.amplification:,.0f} times in u")
    return (f"the closed box {box} is near resonance: {what} ({count:,} mode(s) within "
            f"{100 * within:g}% of κ: helmpinn.problems.waves.box_resonances lists them). The error can stay "
            f"large while the loss falls (the training guide, 'Closed boxes near resonance').")


def box_source_error(u: ArrayLike, exact: ArrayLike, x: ArrayLike, w: float) -> dict[str, float]:
    """Relative L2 errors of ``u`` against ``exact`` at points x of the unit box: ``"raw"``, and
    ``"modes_removed"`` with the error's least-squares component in the resonant modes of
    :func:`resonant_modes` removed (``box-source`` determines u only up to them)."""
    x = _points2(x)
    u = np.asarray(u, np.complex128).reshape(-1)
    exact = np.asarray(exact, np.complex128).reshape(-1)
    if u.shape != (len(x),) or exact.shape != (len(x),):
        raise ValueError(f"u and exact: expected {len(x)} values each (one per point), got "
                         f"{u.shape[0]} and {exact.shape[0]}")
    e = u - exact
    Z = resonant_modes(x, w)
    e2 = e - Z @ np.linalg.lstsq(Z, e, rcond=None)[0] if Z.shape[1] else e
    scale = float(np.linalg.norm(exact))
    if scale == 0:
        raise ValueError("exact: all zero, no relative error")
    return {"raw": float(np.linalg.norm(e)) / scale, "modes_removed": float(np.linalg.norm(e2)) / scale}


# ---------------------------------------------------------------------------------------------
# free-source
# ---------------------------------------------------------------------------------------------
class _RadialGreen:
    """Cumulative integrals ``A(r) = ∫₀^r J₀(kt) g t dt`` and ``C(r) = ∫₀^r H₀(kt) g t dt`` on
    Gauss-Legendre panels over [0, R], R = 12 s (g < e^{−72} of its peak beyond)."""

    def __init__(self, k: float, s: float, panels: int = 256, order: int = 20):
        self.k, self.s = k, s
        self.R = 12.0 * s
        self.edges = np.linspace(0.0, self.R, panels + 1)
        self.xg, self.wg = np.polynomial.legendre.leggauss(order)
        a, c = self._pieces(self.edges[:-1], self.edges[1:])
        self.A = np.concatenate([[0.0], np.cumsum(a)])
        self.C = np.concatenate([[0.0], np.cumsum(c)])

    def _pieces(self, lo: NDArray, hi: NDArray) -> tuple[NDArray, NDArray]:
        from scipy.special import hankel1, j0

        half = 0.5 * (hi - lo)[:, None]
        t = half * (self.xg + 1.0) + lo[:, None]
        wt = half * self.wg * np.exp(-0.5 * (t / self.s) ** 2) / (2 * math.pi * self.s ** 2) * t
        safe = np.where(t > 0, t, 1.0)
        h0 = np.where(t > 0, hankel1(0, self.k * safe), 0.0)
        return (wt * j0(self.k * t)).sum(1), (wt * h0).sum(1)

    def __call__(self, r: NDArray) -> NDArray[np.complex128]:
        from scipy.special import hankel1, j0

        rr = np.minimum(r, self.R)
        i = np.clip(np.searchsorted(self.edges, rr, side="right") - 1, 0, len(self.edges) - 2)
        a, c = self._pieces(self.edges[i], rr)
        A = self.A[i] + a
        B = self.C[-1] - (self.C[i] + c)
        h0 = np.where(r > 0, hankel1(0, self.k * np.where(r > 0, r, 1.0)), 0.0)
        return 0.5j * math.pi * (h0 * A + j0(self.k * r) * B)


def free_source_field(x: ArrayLike, k: float, s: float) -> NDArray[np.complex128]:
    """The outgoing field (complex [N]) at x [N, 2] of ``Δu + k²u = −g``, g the normalised
    Gaussian of width s at the origin (the radial Green's-function integral of the module
    docstring)."""
    x = _points2(x)
    return _RadialGreen(_positive("k", k), _positive("s", s))(np.hypot(x[:, 0], x[:, 1]))


def free_source(wavelengths: float = 5.0, s: float = 0.05) -> Problem:
    W = _positive("wavelengths", wavelengths)
    s = _positive("s", s)
    k = math.pi * W
    green = _RadialGreen(k, s)
    return Problem(Box([-1.0, -1.0], [1.0, 1.0]), kappa=k * k,
                   source=lambda x: -_gaussian(np.asarray(x, np.float64), 0.0, s).astype(np.complex128),
                   bcs={}, exact=lambda x: green(np.hypot(*_points2(x).T)), wavenumber=k,
                   pml=PML(2.0 * math.pi / k))


def halfspace_source(wavelengths: float = 3.0, s: float = 0.05, depth: float = 0.3) -> Problem:
    """A Gaussian source of width ``s`` at ``(0, depth)`` below a free surface (module
    docstring): ``wavelengths`` W across the box's width 2 (``k = π W``)."""
    W = _positive("wavelengths", wavelengths)
    s = _positive("s", s)
    depth = _positive("depth", depth)
    if depth >= 1.0:
        raise ValueError(f"depth: expected a depth below 1 (the box is [-1, 1] x [0, 1]), got {depth}")
    k = math.pi * W
    green = _RadialGreen(k, s)
    x0, xi = np.array([0.0, depth]), np.array([0.0, -depth])

    def exact(x):
        x = _points2(x)
        return green(np.hypot(*(x - x0).T)) - green(np.hypot(*(x - xi).T))

    def source(x):
        x = np.asarray(x, np.float64)
        return -(_gaussian(x, x0, s) - _gaussian(x, xi, s)).astype(np.complex128)
    return Problem(Box([-1.0, 0.0], [1.0, 1.0]), kappa=k * k, source=source, bcs={}, exact=exact,
                   wavenumber=k, pml=PML(2.0 * math.pi / k, faces=("xmin", "xmax", "ymax")))


#: The problems of this module by name (read by :mod:`helmpinn.problems.registry`).
PROBLEMS = {
    "box-source": (box_source,
                   "Gaussian source in the Dirichlet box [0,1]^2, the multilevel-FBPINN ladder; "
                   "sine-series solution (options wavelengths, sd)"),
    "free-source": (free_source,
                    "Gaussian source in free space, [-1,1]^2 inside a PML one wavelength wide; "
                    "radial Green's-function solution (options wavelengths, s)"),
    "halfspace-source": (halfspace_source,
                         "Gaussian source below a free surface (u = 0 on y = 0), [-1,1]x[0,1] with a PML "
                         "on the other faces; image-source solution (options wavelengths, s, depth)"),
}
