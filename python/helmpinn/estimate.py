"""An error estimate for a trained model without an exact solution: :func:`estimate_error`.

The validation loss (the PDE residual at fresh points) does not measure the error: the factor
from a residual to an error depends on the problem (resonances, the PML, the source) and is
unknown. The estimate here compares the model with helmpinn's own finite-difference solution of
the same problem (:func:`~helmpinn.reference.fd_solve`, fourth order, the PML and media
included) and says how far that comparison can be trusted, from a second grid twice as coarse:

- ``error``: ``‖u_model − u_h‖ / ‖u_h‖`` over the fine grid's nodes in the physical domain (no
  interpolation of the model); by the triangle inequality the true error lies within the
  reference's own error of it;
- ``reference_error``: ``‖u_h − u_2h‖ / ‖u_h‖`` at the same nodes (the grids are nested). For a
  discretisation of order p the fine grid's own error is this difference over ``2^p − 1``: a
  third of it at p = 2 (the order next to a PML of profile power 2), a fifteenth at p = 4, so
  the difference bounds it with room to spare wherever both grids are in their asymptotic range
  (a source or a layer the coarse grid does not resolve breaks that; the refinement below then
  usually shows it as a large difference);
- ``reliable``: ``error >= 3 reference_error``: the estimate is then within a third of the true
  error (within a ninth at second order). Below, the error is only known to be at most
  ``error + reference_error`` (:attr:`ErrorEstimate.upper`).

The grids: ``h = λ / points_per_wavelength`` (λ = 2π/k, k the problem's wavenumber), finer where
a PointSource's width asks for it (``h <= width``: its Gaussian is then sampled to a relative
1e-8), coarser where needed to stay within ``max_nodes``; while the estimate is not reliable the
spacing is halved (the fine grid becoming the coarse one) as long as the grid stays within
``max_nodes``. The cost is that of the finest grid's direct factorisation, whose fill grows like
n^{8/3} in 2-D and n^{5.5} in 3-D: the 2-D cap, 160,000 nodes (400²), takes half a minute on 2
cores, the 3-D cap, 30,000 (31³), about a minute (docs/guide/reference-solver.md, "Cost"). A
3-D grid that must stay that coarse resolves a source or a PML poorly, and the reference_error
says so.

What it needs: a problem :func:`~helmpinn.reference.fd_solve` discretises (a
:class:`~helmpinn.problems.geometry.Box` or :class:`~helmpinn.problems.geometry.Interval`, with or without a
PML, any medium, density, Dirichlet and Robin faces, sources; a box with an obstacle removed,
:class:`~helmpinn.problems.geometry.BoxMinusObstacle` or :class:`~helmpinn.problems.geometry.BoxMinusBall`,
sound-soft or sound-hard). With an obstacle the reference difference is taken at the nodes the
two grids share (where the grids are nested; the coarse grid's spline is only first order within
a step of a sound-soft obstacle, where the field's derivative jumps at the boundary), the
model's error at every fine node as before. A grid too coarse for the obstacle (fd_solve's
ValueError) is refused with that message; a point cloud is refused with a ValueError.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._checks import integer, real_number
from .problems.geometry import Box, BoxMinusObstacle, Interval
from .reference.fd import FDOperator, FDSolution

__all__ = ["ErrorEstimate", "estimate_error", "POINTS_PER_WAVELENGTH", "MAX_NODES", "COARSER"]

#: The reference grid's default nodes per wavelength (fourth order: about 1e-3 relative error
#: on ``free-source`` at 5 wavelengths in 2-D).
POINTS_PER_WAVELENGTH = 12.0
#: The most nodes of the reference grid by dimension (time and memory of its factorisation).
MAX_NODES = {1: 100_000, 2: 160_000, 3: 30_000}
#: The coarse grid's spacing over the fine one's (the reference's own error; a refinement halves
#: the spacing, so the fine grid becomes the coarse one).
COARSER = 2.0
#: ``reliable`` when the estimate is at least this many times the reference's error.
RELIABLE_RATIO = 3.0


@dataclass(frozen=True)
class ErrorEstimate:
    """:func:`estimate_error`'s answer (see the module docstring): the estimated relative L2
    ``error`` of the model, the ``reference_error`` that bounds how far off it may be, the grid
    spacing ``h`` per direction, the number of nodes ``nodes`` compared and the ``seconds``
    spent."""

    error: float
    reference_error: float
    h: tuple[float, ...]
    nodes: int
    seconds: float

    @property
    def reliable(self) -> bool:
        """Whether the estimate is within a third of the true error: ``error >= 3 ×
        reference_error``."""
        return self.error >= RELIABLE_RATIO * self.reference_error

    @property
    def upper(self) -> float:
        """A bound on the true error: ``error + reference_error``."""
        return self.error + self.reference_error

    def __str__(self) -> str:
        if self.reliable:
            return (f"relative L2 error about {self.error:.2e} (within {self.reference_error:.1e}: finite "
                    f"differences, h = {max(self.h):.3g})")
        return (f"relative L2 error at most {self.upper:.2e} (the finite-difference reference, h = "
                f"{max(self.h):.3g}, is itself within {self.reference_error:.1e}: not fine enough to say more)")


def _spacing(problem: Any, points_per_wavelength: float, max_nodes: int) -> float:
    """The reference grid's spacing (the module docstring's rule)."""
    lo, hi = (np.asarray(b, np.float64) for b in problem.sampling_domain.bounds)
    k = float(problem.wavenumber)
    h = 2.0 * math.pi / k / points_per_wavelength if k > 0 else float(np.max(hi - lo)) / 32.0
    for src in problem.point_sources:
        h = min(h, float(src.width))
    # within max_nodes: Π (L_j / h + 1) <= max_nodes, solved by bisection on h
    def nodes(step: float) -> float:
        return float(np.prod(np.ceil((hi - lo) / step) + 1))
    if nodes(h) > max_nodes:
        a, b = h, float(np.max(hi - lo))
        for _ in range(60):
            mid = 0.5 * (a + b)
            a, b = (mid, b) if nodes(mid) > max_nodes else (a, mid)
        h = b
    return h


def _physical(problem: Any, x: np.ndarray) -> np.ndarray:
    """Which nodes lie in the physical domain (not in a PML)."""
    inside = problem.domain.contains(x)
    if problem.pml is not None:
        inside &= ~problem.in_layer(x)
    return inside


def _nodes(problem: Any, h: np.ndarray) -> int:
    lo, hi = (np.asarray(b, np.float64) for b in problem.sampling_domain.bounds)
    return int(np.prod(np.ceil((hi - lo) / h - 1e-9) + 1))


def _solve(problem: Any, h: Any) -> FDSolution:
    try:
        op = FDOperator(problem, h)
    except ValueError as exc:
        if not isinstance(problem.domain, BoxMinusObstacle) or "fd_solve" not in str(exc):
            raise
        raise ValueError(f"estimate_error: no finite-difference reference at h = {np.max(h):.3g} for this "
                         f"obstacle ({exc}); pass a smaller h or more points_per_wavelength") from None
    return op.solution(op.factorize().solve(op.rhs()))


def _shared(x: np.ndarray, coarse: FDSolution) -> np.ndarray:
    """Which of the points x are nodes of the coarse grid too (all of them when the grids are
    not nested: the spline then compares everywhere)."""
    on = np.ones(len(x), bool)
    for j, axis in enumerate(coarse.axes):
        t = (x[:, j] - axis[0]) / coarse.h[j]
        on &= np.abs(t - np.rint(t)) < 1e-6
    return on if on.sum() * 2 ** x.shape[1] >= len(x) // 2 else np.ones(len(x), bool)


def estimate_error(problem: Any, model: Any, *, points_per_wavelength: float = POINTS_PER_WAVELENGTH,
                   max_nodes: int | None = None, h: float | None = None) -> ErrorEstimate:
    """Estimate the relative L2 error of ``model`` (anything with ``predict(x) -> complex [N]``:
    a :class:`~helmpinn.Model`, a :class:`~helmpinn.models.decomposition.DecomposedModel`, a
    :class:`~helmpinn.Solution`) on ``problem`` without its exact solution, against
    finite-difference references (see the module docstring): the grids h and 2h first (``h``
    given, or ``λ / points_per_wavelength`` within ``max_nodes``, by default :data:`MAX_NODES`
    of the problem's dimension), then, while the estimate is not :attr:`~ErrorEstimate.reliable`
    and a grid of half the spacing stays within ``max_nodes``, that grid (an ``h`` given fixes
    the grids). ValueError for a problem fd_solve cannot discretise (a curved boundary, a point
    cloud) and for bad arguments; a grid beyond the memory limit is refused by
    :func:`helmpinn.memory.check_fd` before anything is assembled."""
    if not isinstance(problem.domain, (Box, Interval, BoxMinusObstacle)):
        raise ValueError(f"estimate_error: the finite-difference reference needs a Box or Interval domain "
                         f"(with or without a PML, with or without an obstacle removed); "
                         f"{type(problem.domain).__name__} has none yet")
    if not callable(getattr(model, "predict", None)):
        raise TypeError(f"estimate_error: model must have predict(x) (a Model, DecomposedModel or Solution), "
                        f"got {type(model).__name__}")
    ppw = real_number("estimate_error", "points_per_wavelength", points_per_wavelength, low=0.0, high=1e3)
    cap = MAX_NODES[problem.dim] if max_nodes is None else integer("estimate_error", "max_nodes", max_nodes, low=2)
    step = _spacing(problem, ppw, cap) if h is None else real_number("estimate_error", "h", h, low=0.0)
    start = time.perf_counter()
    fine = _solve(problem, step)
    x = fine.points
    x = x[_physical(problem, x)]
    if not len(x):
        raise ValueError(f"estimate_error: no node of the grid (h = {step:.3g}) lies in the physical domain")
    u_net = np.asarray(model.predict(x), np.complex128).reshape(-1)
    obstacle = isinstance(problem.domain, BoxMinusObstacle)
    coarse = _solve(problem, COARSER * fine.h)
    u_fine = fine(x)
    while True:
        scale = float(np.linalg.norm(u_fine))
        if scale == 0:
            raise ValueError("estimate_error: the finite-difference solution is zero in the physical domain "
                             "(no source and no boundary data): no relative error")
        err = float(np.linalg.norm(u_net - u_fine)) / scale
        shared = _shared(x, coarse) if obstacle else slice(None)
        ref = float(np.linalg.norm(coarse(x[shared]) - u_fine[shared]) / np.linalg.norm(u_fine[shared]))
        if err >= RELIABLE_RATIO * ref or h is not None or _nodes(problem, fine.h / COARSER) > cap:
            break
        coarse, fine = fine, _solve(problem, fine.h / COARSER)   # the fine grid becomes the coarse one
        u_fine = fine(x)
    return ErrorEstimate(err, ref, tuple(float(v) for v in np.atleast_1d(fine.h)), int(len(x)),
                         time.perf_counter() - start)
