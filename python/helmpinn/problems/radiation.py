"""Radiation rows: the loss weighs the part of the PDE residual that radiates by the error it causes.

A decomposed model's loss is the mean of ``|L u − f|²`` over its points: every part of the
residual counts alike. The error does not: the field of a residual r is ``L⁻¹ r``, and L⁻¹ damps
a component of wavenumber ξ by about ``k² / | |ξ|² − k² |`` while a component at the local
wavenumber (``|ξ| ≈ k``) propagates, adding to the error along its whole path. Late in a run the
residual that is left is mostly of the first kind (sharp: by a medium's jump, about a source)
and the loss falls there, while the part that radiates, small in the loss, holds the error
(a square inclusion: over ten steps the loss fell 2.7 times and the error by 14 %;
docs/benchmarks.md, "Media with jumps").

The rows: on a grid of windows over the physical domain (cos² bumps, a partition of unity, their
spacing :data:`RADIATION_SPACING` of the median local wavelength; none where that would take
more than :data:`RADIATION_MOST` columns), the residual's projection on
plane waves at the local wavenumber at the window's centre, ``cos(k d·x)`` and ``sin(k d·x)`` for
:data:`RADIATION_ANGLES` directions d in [0, π) (with both the cosine and the sine, the directions
in [π, 2π) are covered too); a window that straddles a jump (its wavenumbers spanning more than
:data:`RADIATION_LEVEL_RATIO`) takes them at each side's wavenumber, so that a slow inclusion's
radiating residual is weighed at its own k. They are mode rows
(:class:`helmpinn.models.decomposition.DecomposedResiduals`' ``modes``): each column is the
window's plane wave at the PDE points, scaled to the norm ``sqrt(a² − 1)``, so that a residual
along it weighs ``a²`` times its size at the points in the loss, a the amplification
(``radiation`` of :class:`helmpinn.training.dd_driver.GNSettings`). A residual that does not
radiate is hardly seen by them (its projection on a plane wave at k is small); the exact solution
has none. The columns are sparse (a point lies in at most 2^d windows). They read the residual
at its full size where the loss weighs it down (a smoothed jump's ramps,
:func:`helmpinn.problems.jumps.ramp_weights`): the ramps' rows count less because the sharp
residual a network leaves on a steep ramp moves the field less than its size says, but the part
of it that radiates moves the field as the bulk's does. With that part read here, the ramps'
point rows need carry only the sharp part, and a run with the rows weighs them
:data:`RADIATION_RAMP_WEIGHT` (a sixteenth, against a quarter without the rows). The square
inclusion after 5 minutes: 9.3e-3, 8.4e-3 and 6.3e-3 (three seeds) against 1.18e-2 and 1.12e-2
(seeds 0 and 1) with the ramps read at their rows' weight of a quarter (docs/benchmarks.md,
"Media with jumps").

Their cost: q = 8 columns a window (16 where it straddles a jump), whose gradients and preconditioned gradients are held by
blocks, each subdomain's in the columns of the windows that reach it
(:mod:`helmpinn.optim.low_rank`; :mod:`helmpinn.memory` counts them as dense ``[P, 2q]`` arrays),
and a Woodbury term in every CG iteration; on the square inclusion (360 columns) a late
Gauss-Newton step takes about 29 s against 11 to 27 s without. A decomposed run takes them by default (a = :data:`RADIATION_WITH_JUMPS`) where
it trains on a medium whose jumps were smoothed, where they pay; on a smooth medium (free space)
the fewer, dearer steps ended higher, so not there.

Two dimensions only: in 3-D the directions over a sphere multiply the columns (not measured).
The layer of a PML has no rows of its own (its stretched coordinates have no plane waves at k).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .geometry import Box

__all__ = ["radiation_rows", "radiation_windows", "radiation_count", "RADIATION_SPACING", "RADIATION_ANGLES",
           "RADIATION_LEVEL_RATIO", "RADIATION_MOST", "RADIATION_WITH_JUMPS", "RADIATION_RAMP_WEIGHT"]

#: The windows' spacing in median local wavelengths (the bumps reach one spacing from their
#: centre): the one spacing measured (the square inclusion, docs/benchmarks.md).
RADIATION_SPACING = 0.8

#: The plane waves' directions in [0, π) per window (cosine and sine each: 2 columns a direction);
#: 3 measured on the square inclusion ended higher (1.55e-2 against 1.31e-2 after 5 minutes).
RADIATION_ANGLES = 4

#: A window whose wavenumbers span more than this ratio (it straddles a jump) takes plane waves at
#: each side's (:func:`radiation_windows`): measured on the square inclusion (a ratio of 2: the
#: error at 5 minutes 10-20 % lower, two seeds) and the slow disc (1.43: higher, 2.5e-3 against
#: 2.0e-3, with a threshold of 1.25); a window 1.6 wavelengths wide weighs waves that close in k
#: nearly alike.
RADIATION_LEVEL_RATIO = 1.5

#: The columns at most (more: no rows): each costs two parameter vectors of memory and its share
#: of a Woodbury term in every CG iteration (the square inclusion: 360). Windows widened to fit
#: (Marmousi at 3 Hz: 400 columns in windows 1.6 median wavelengths wide) ended higher than none
#: (docs/benchmarks.md, "Seismic").
RADIATION_MOST = 512

#: The amplification a of a decomposed run's radiation rows where it trains on a medium whose
#: jumps were smoothed (:func:`helmpinn.problems.jumps.training_problem`; 0 elsewhere): 4, 8
#: and 16 measured on the square inclusion (8 and 16 alike, 4 a step behind), and a smooth
#: medium's run ended higher with them (free space: fewer, dearer steps; docs/benchmarks.md).
RADIATION_WITH_JUMPS = 8.0

#: The ramps' PDE-row weight in a run whose radiation rows read them (in place of
#: :data:`helmpinn.problems.jumps.RAMP_WEIGHT`, :func:`helmpinn.training.dd_driver.sampled_problem`):
#: the rows read the ramps' residual at its full size, so the point rows there need carry only
#: its sharp part, which moves the field least. Measured on the square inclusion and the slow
#: disc against a quarter (docs/benchmarks.md, "Media with jumps").
RADIATION_RAMP_WEIGHT = 1.0 / 16.0


def radiation_windows(problem: Any) -> tuple[list[NDArray], NDArray, list[list[float]]] | None:
    """The windows' centres per axis, their half-widths h [2] and each window's wavenumbers (row
    by row: centre i along x, j along y at ``i * ny + j``) over the physical domain's bounding box
    (module docstring): a spacing of :data:`RADIATION_SPACING` times the median local wavelength
    (over a 101 × 101 grid of the box, where κ's real part is positive: an absorbing layer's or an
    evanescent region's does not count), at least 2 a side. A window takes the wavenumber at its
    centre (none where that is not positive), or where the grid's wavenumbers within its reach
    span more than :data:`RADIATION_LEVEL_RATIO` (it straddles a jump), the median of those below
    and of those above their geometric mean: each side's waves. None where the problem is not
    2-D, its medium has no real wavenumber > 0 in the box, or the windows would hold more than
    :data:`RADIATION_MOST` columns (wider windows, tried on Marmousi at 3 Hz, did not pay)."""
    if problem.dim != 2:
        return None
    lo, hi = (np.asarray(b, np.float64) for b in problem.domain.bounds)
    grid = Box(lo, hi).grid(101)[0]
    k = np.asarray(problem.local_wavenumber(grid), np.float64)
    if not np.any(k > 0):
        return None
    step = RADIATION_SPACING * 2.0 * math.pi / float(np.median(k[k > 0]))
    counts = np.array([max(2, int(math.ceil((hi[i] - lo[i]) / step)) + 1) for i in range(2)])
    if int(np.prod(counts)) * 2 * RADIATION_ANGLES > RADIATION_MOST:   # (before the levels: the least there is)
        return None
    centres = [np.linspace(lo[i], hi[i], counts[i]) for i in range(2)]
    h = (hi - lo) / (counts - 1.0)
    levels = []
    for cx in centres[0]:
        for cy in centres[1]:
            inside = k[(np.abs(grid[:, 0] - cx) < h[0]) & (np.abs(grid[:, 1] - cy) < h[1])]
            inside = inside[inside > 0]
            if len(inside) and inside.max() > RADIATION_LEVEL_RATIO * inside.min():
                mid = math.sqrt(float(inside.max() * inside.min()))
                levels.append([float(np.median(inside[inside <= mid])), float(np.median(inside[inside > mid]))])
            else:
                kc = float(problem.local_wavenumber(np.array([[cx, cy]]))[0])
                levels.append([kc] if kc > 0 else [])   # (an evanescent centre: no wave to weigh)
    if sum(len(w) for w in levels) * 2 * RADIATION_ANGLES > RADIATION_MOST:
        return None
    return centres, h, levels


def radiation_count(problem: Any, amplification: float) -> int:
    """The radiation rows' columns at most (q: every window holding points; 0 where none):
    what :mod:`helmpinn.memory` counts before the points exist."""
    windows = radiation_windows(problem) if float(amplification) > 1 else None
    return 0 if windows is None else sum(len(w) for w in windows[2]) * 2 * RADIATION_ANGLES


def radiation_rows(problem: Any, x: NDArray, pde: NDArray, amplification: float) -> Any:
    """The radiation rows' columns at the points x [N, 2] (module docstring): a sparse [N, q]
    matrix, zero off the PDE points (``pde``, a boolean mask [N]) and off the physical domain;
    None where there is nothing to weigh (``amplification`` <= 1, not 2-D, no PDE point in the
    physical domain). Where the problem's sampler weighs PDE rows down (``row_weights`` w: a
    smoothed jump's ramps, whose rows carry ``sqrt(w)``), the columns there are divided by
    ``sqrt(w)``: they read the residual at its full size (module docstring). ValueError naming
    ``radiation`` for an amplification that is not a finite number >= 0."""
    a = float(amplification)
    if not math.isfinite(a) or a < 0:
        raise ValueError(f"radiation: expected a finite number >= 0 (the radiating residual's amplification; "
                         f"0 or 1: no rows), got {amplification!r}")
    x = np.asarray(x, np.float64)
    windows = radiation_windows(problem) if a > 1 and x.ndim == 2 and x.shape[1] == 2 else None
    if windows is None:
        return None
    centres, h, levels = windows
    lo, hi = (np.asarray(b, np.float64) for b in problem.domain.bounds)
    at = np.flatnonzero(np.asarray(pde, bool) & np.all((x >= lo) & (x <= hi), axis=1))
    dirs = np.arange(RADIATION_ANGLES) * math.pi / RADIATION_ANGLES
    d = np.stack([np.cos(dirs), np.sin(dirs)], 1)   # [A, 2]
    rows, cols, vals = [], [], []
    q = 0
    y = x[at]
    weights = getattr(getattr(problem, "sampler", None), "row_weights", None)
    reads = np.ones(len(y))   # each point's residual at its full size: its row carries sqrt(w)
    if weights is not None:
        w = np.asarray(weights(y), np.float64)
        reads = np.where(w > 0, 1.0 / np.sqrt(np.where(w > 0, w, 1.0)), 0.0)
    for i, cx in enumerate(centres[0]):
        sx = (y[:, 0] - cx) / h[0]
        near_x = np.abs(sx) < 1
        for j, cy in enumerate(centres[1]):
            sy = (y[:, 1] - cy) / h[1]
            near = np.flatnonzero(near_x & (np.abs(sy) < 1))
            if not len(near):
                continue
            bump = np.cos(0.5 * math.pi * sx[near]) ** 2 * np.cos(0.5 * math.pi * sy[near]) ** 2 * reads[near]
            for k in levels[i * len(centres[1]) + j]:
                phase = k * (y[near] @ d.T)   # [n, A]
                for f in (np.cos(phase), np.sin(phase)):
                    block = bump[:, None] * f                      # [n, A]
                    norm = np.linalg.norm(block, axis=0)
                    keep = norm > 0
                    block = block[:, keep] * (math.sqrt(a * a - 1.0) / norm[keep])
                    nk = block.shape[1]
                    rows.append(np.repeat(at[near], nk))
                    cols.append(np.tile(q + np.arange(nk), len(near)))
                    vals.append(block.ravel())
                    q += nk
    if not q:
        return None
    from scipy import sparse   # (on first use: importing helmpinn leaves SciPy out)

    return sparse.csr_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(len(x), q))
