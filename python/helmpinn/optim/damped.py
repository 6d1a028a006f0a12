"""The damped Gauss-Newton (Levenberg-Marquardt) step, written once for every linear solve.

The loss is a sum of squares ``r(θ)·r(θ)``. One step solves ``(JᵀJ + λD) δ = Jᵀr`` at θ for the
current damping λ and tries ``θ − δ``; the trial is accepted when the loss falls and the linear
model predicted a decrease (``ρ``, the actual over the predicted decrease, is reported), else
λ grows and another trial runs on the same linearisation, up to ``max_trials``. How the system
is solved is the one thing that differs between :class:`helmpinn.optim.lm.LevenbergMarquardt`
(dense normal equations or CG on one network), :class:`helmpinn.optim.gauss_newton.MatrixFreeGN`
(CG preconditioned by subdomain blocks) and the inversion's
:class:`helmpinn.inversion.ArrowheadLM` (the wavefield blocks eliminated, the medium's Schur
complement solved dense, the trial point projected onto the velocity bounds): each
passes :meth:`Damped.trials` a :class:`LinearSolve`, and the trial loop, the λ rule, geodesic
acceleration, backtracking and the step's record (:class:`StepRecord`, its outcome a
:class:`StepStatus`) are the ones here.

**The λ rule** (``update``, :data:`UPDATES`, :func:`next_damping`): ``"fixed"`` divides λ by 3
on acceptance and multiplies it by 4 on rejection; ``"nielsen"`` multiplies it on acceptance
by ``max(1/3, 1 − (2ρ − 1)³)`` (ρ capped at 1: up to 2 for ρ near 0, 1 at ρ = 0.5, 1/3 from
ρ ≈ 0.94 on) and on rejection by ν, which starts at 2 and doubles on successive rejections;
``"ratio"`` (the trust-region rule) divides it by 3 on acceptance only when ρ > 0.75, keeps it
for 0.25 < ρ <= 0.75, doubles it below, and multiplies it by 4 on rejection. λ stays within
``[lam_min, lam_max]``; a trial rejected at ``lam_max`` ends the step
(:attr:`StepStatus.LAM_MAX`).

**Geodesic acceleration** (``geodesic``; Transtrum & Sethna, 2012): the trial point is
``θ − δ − a/2`` with ``(JᵀJ + λD) a = Jᵀ r_vv``, ``r_vv`` the residuals' second derivative along
δ by a central difference (two residual evaluations, step ``geodesic_h``) and the system solved
again by the same solve (:attr:`Direction.again`); the plain trial is kept when
``2‖a‖ > geodesic_alpha ‖δ‖`` (the step leaves the region where the quadratic path is trusted)
or ``a`` is not finite.

**Backtracking** (``backtrack`` > 0): a rejected trial's step is halved, up to ``backtrack``
times, before λ grows; the first ``θ − αδ`` (α = 1/2, 1/4, ...) at which the loss falls is
accepted, λ stays and ν starts again. An α at which the linear model predicts no decrease
(:attr:`Direction.shortened`) is refused without evaluating the residuals.

**Projection** (``project`` of :meth:`Damped.trials`): where the parameters must stay in a
feasible set (the inversion's velocity bounds, :class:`helmpinn.inversion.ArrowheadLM`), every
trial point (plain, accelerated or shortened) is replaced by its projection before its residuals
are evaluated; ρ still divides by the unprojected step's predicted decrease.

A step whose loss (or Jacobian) at θ is not finite raises :class:`NonFiniteLoss` before any
trial, the parameters untouched; a training loop restores its last good state on it.
"""
from __future__ import annotations

import contextlib
import enum
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np
from numpy.typing import NDArray

__all__ = ["UPDATES", "StepStatus", "StepRecord", "NonFiniteLoss", "Direction", "LinearSolve", "Damped",
           "next_damping"]

#: The λ rules (module docstring).
UPDATES = ("nielsen", "fixed", "ratio")


class NonFiniteLoss(FloatingPointError):
    """The loss (or the Jacobian) at the current parameters is not finite: the one exception of
    every optimiser's step (and of a training driver) for a non-finite loss; the message says
    what was not finite."""


class StepStatus(enum.Enum):
    """How a damped step ended: a trial was accepted, or none was (λ reached ``lam_max``, or
    ``max_trials`` trials were rejected)."""

    ACCEPTED = "accepted"
    LAM_MAX = "lam_max"
    MAX_TRIALS = "max_trials"

    @property
    def message(self) -> str:
        """"" when accepted, else why no trial was."""
        return {"accepted": "", "lam_max": "damping at lam_max",
                "max_trials": "no decrease in max_trials trials"}[self.value]


@dataclass
class StepRecord:
    """What one damped step did: ``loss0`` before, ``loss`` after (equal when nothing was
    accepted), ``accepted``, ``lam`` after the update, ``trials``, ``rho`` (actual over predicted
    decrease of the last trial), ``status`` (:class:`StepStatus`), ``times`` (seconds by part of
    the step, the parts the optimiser names), ``residuals`` (float64, at the parameters after
    the step), ``alpha`` (the fraction of the trial's step taken: 1, or with backtracking 1/2,
    1/4, ...). :class:`~helmpinn.optim.gauss_newton.MatrixFreeGN` adds ``cg_iterations`` (per
    trial), ``terms`` (the loss of each term after the step) and ``projected`` (the loss after
    its output layers' projection where one was taken; ``loss0`` is the loss before it)."""

    loss0: float
    loss: float
    accepted: bool
    lam: float
    trials: int
    rho: float
    status: StepStatus
    times: dict[str, float] = field(default_factory=dict)
    residuals: NDArray | None = None
    alpha: float = 1.0
    cg_iterations: list[int] = field(default_factory=list)
    terms: dict[str, float] = field(default_factory=dict)
    projected: float | None = None

    @property
    def message(self) -> str:
        """"" or why no trial was accepted (:attr:`StepStatus.message`)."""
        return self.status.message


def next_damping(update: str, lam: float, nu: float, accepted: bool, rho: float,
                 lam_min: float, lam_max: float) -> tuple[float, float]:
    """``(λ, ν)`` after a trial, by the rule ``update`` (:data:`UPDATES`, the module docstring)."""
    if accepted:
        if update == "nielsen":   # shrink λ by up to 3x, the more the better the model predicted
            factor = max(1.0 / 3.0, 1.0 - (2.0 * min(rho, 1.0) - 1.0) ** 3)
        elif update == "ratio":
            factor = 1.0 / 3.0 if rho > 0.75 else (1.0 if rho > 0.25 else 2.0)
        else:
            factor = 1.0 / 3.0
        return min(max(lam * factor, lam_min), lam_max), 2.0
    if update == "nielsen":
        return min(lam * nu, lam_max), min(nu * 2.0, 2.0 ** 20)
    return min(lam * 4.0, lam_max), nu


@dataclass(eq=False)
class Direction:
    """One solve of ``(JᵀJ + λD) δ = Jᵀr``: ``delta`` (float64, subtracted from θ; where the
    parameters are split over processes, this one's part), ``predicted`` (the linear model's
    decrease of the loss for the whole step, the same on every process), ``again`` (w ↦ x with
    ``(JᵀJ + λD) x = Jᵀw`` for residual rows w, by the same factorisation or preconditioner:
    geodesic acceleration), ``shortened`` (α ↦ the predicted decrease of the step αδ:
    backtracking; None where the solve cannot say), ``retry`` (a rejected trial of this
    direction is tried again at the same λ: a CG started from a previous step that failed)."""

    delta: NDArray
    predicted: float
    again: Callable[[NDArray], NDArray]
    shortened: Callable[[float], float] | None = None
    retry: bool = False


class LinearSolve(Protocol):
    """One linearisation at θ as the damped step uses it: the residuals ``r`` there (float64,
    this process's rows) and their ``loss`` (over every process), and what differs between the
    optimisers."""

    r: NDArray
    loss: float

    def solve(self, lam: float) -> Direction:
        """The step for damping ``lam``."""

    def residuals(self, x: NDArray) -> NDArray:
        """The residuals (float64, this process's rows) at the float64 point x (rounded to the
        parameters' dtype)."""

    def total(self, r: NDArray) -> float:
        """``r·r`` over every process, the same on each."""

    def dot(self, a: NDArray, b: NDArray) -> float:
        """The inner product of two parameter-space vectors, the same on every process."""

    def limit(self) -> contextlib.AbstractContextManager:
        """The block around a trial's residual evaluations and solves (a BLAS thread limit)."""

    def place(self, theta: NDArray, x: NDArray) -> None:
        """Write the accepted float64 point x into ``theta`` (all of it, on every process)."""

    def tried(self, delta: NDArray, accepted: bool, rho: float) -> None:
        """Told after each trial: the step taken (δ, or αδ when shortened), whether it was
        accepted, its ρ."""


class Damped:
    """The damping's state and settings, and the trial loop (:meth:`trials`), of a damped
    Gauss-Newton optimiser: λ (``lam``) and Nielsen's ν (``nu``), ``update``, ``lam_min`` /
    ``lam_max``, ``max_trials``, ``geodesic`` / ``geodesic_h`` / ``geodesic_alpha`` and
    ``backtrack`` (the module docstring). :meth:`set_damping` checks and sets them."""

    lam: float
    nu: float

    def set_damping(self, *, lam: float, lam_min: float, lam_max: float, update: str, max_trials: int,
                    geodesic: bool, geodesic_h: float, geodesic_alpha: float, backtrack: int = 0) -> None:
        """Check the damping's settings (ValueError naming the argument) and set them."""
        if not (math.isfinite(lam) and lam > 0):
            raise ValueError(f"lam: expected a positive finite number, got {lam!r}")
        if not 0 < lam_min <= lam_max:
            raise ValueError(f"lam_min, lam_max: need 0 < lam_min <= lam_max, got {lam_min}, {lam_max}")
        if update not in UPDATES:
            raise ValueError(f"update: expected one of {UPDATES}, got {update!r}")
        if int(max_trials) < 1:
            raise ValueError(f"max_trials: expected an integer >= 1, got {max_trials}")
        if not 0 < geodesic_h <= 1 or not geodesic_alpha > 0:
            raise ValueError(f"geodesic_h, geodesic_alpha: need 0 < geodesic_h <= 1 and geodesic_alpha > 0, "
                             f"got {geodesic_h}, {geodesic_alpha}")
        if isinstance(backtrack, (bool, np.bool_)) or not isinstance(backtrack, (int, np.integer)) or backtrack < 0:
            raise ValueError(f"backtrack: expected an integer >= 0 (halvings of a rejected step), got {backtrack!r}")
        self.lam, self.nu, self.update = float(lam), 2.0, update
        self.lam_min, self.lam_max = float(lam_min), float(lam_max)
        self.max_trials = int(max_trials)
        self.geodesic, self.geodesic_h, self.geodesic_alpha = bool(geodesic), float(geodesic_h), float(geodesic_alpha)
        self.backtrack = int(backtrack)

    def trials(self, system: LinearSolve, theta: NDArray, times: dict[str, float],
               project: Callable[[NDArray], NDArray] | None = None) -> StepRecord:
        """Trials at growing λ from ``theta`` on the linearisation ``system`` until the loss falls
        (the point written to ``theta``, λ lowered) or ``lam_max`` / ``max_trials`` (``theta``
        untouched); ``times["trial"]`` gains the seconds of the trials' evaluations.
        ``project``: x ↦ the feasible point nearest the float64 trial point x (a new array), applied
        to every trial point (module docstring, Projection); None: no constraint."""
        loss0, r = system.loss, system.r
        theta64 = theta.astype(np.float64)
        feasible = (lambda x: x) if project is None else project
        rho = -math.inf
        d = None
        for trial in range(1, self.max_trials + 1):
            d = None   # the previous trial's factor goes before the next one is made
            d = system.solve(self.lam)
            t0 = time.perf_counter()
            with system.limit():
                new = feasible(self._accelerate(system, d, theta64) if self.geodesic else theta64 - d.delta)
                r1 = system.residuals(new)
            loss1 = system.total(r1)
            pred = d.predicted
            rho = (loss0 - loss1) / pred if pred > 0 else -math.inf
            accepted = math.isfinite(loss1) and loss1 < loss0 and pred > 0
            alpha, delta = 1.0, d.delta
            if not accepted and self.backtrack and d.shortened is not None:
                with system.limit():
                    shorter = self._backtrack(system, d, theta64, loss0, feasible)
                if shorter is not None:
                    alpha, new, r1, loss1, rho = shorter
                    delta, accepted = alpha * delta, True
            times["trial"] = times.get("trial", 0.0) + time.perf_counter() - t0
            system.tried(delta, accepted, rho)
            if accepted:
                system.place(theta, new)
                if alpha < 1.0:   # shortened: λ stays, ν starts again
                    self.nu = 2.0
                else:
                    self.lam, self.nu = next_damping(self.update, self.lam, self.nu, True, rho, self.lam_min,
                                                     self.lam_max)
                return StepRecord(loss0, loss1, True, self.lam, trial, rho, StepStatus.ACCEPTED, times, r1, alpha)
            if self.lam >= self.lam_max:
                return StepRecord(loss0, loss0, False, self.lam, trial, rho, StepStatus.LAM_MAX, times, r)
            if d.retry:   # the start failed, not λ: the same λ again
                continue
            self.lam, self.nu = next_damping(self.update, self.lam, self.nu, False, rho, self.lam_min, self.lam_max)
        return StepRecord(loss0, loss0, False, self.lam, self.max_trials, rho, StepStatus.MAX_TRIALS, times, r)

    def _accelerate(self, system: LinearSolve, d: Direction, theta64: NDArray) -> NDArray:
        """The trial point θ − δ − a/2 of geodesic acceleration, or θ − δ (module docstring)."""
        h, delta = self.geodesic_h, d.delta
        r_plus = system.residuals(theta64 + h * delta)
        r_minus = system.residuals(theta64 - h * delta)
        r_vv = (r_plus - 2.0 * system.r + r_minus) / (h * h)
        acc = d.again(r_vv)
        num, den = system.dot(acc, acc), system.dot(delta, delta)
        if den > 0 and 2.0 * math.sqrt(num) <= self.geodesic_alpha * math.sqrt(den) and np.all(np.isfinite(acc)):
            return theta64 - delta - 0.5 * acc
        return theta64 - delta

    def _backtrack(self, system: LinearSolve, d: Direction, theta64: NDArray, loss0: float,
                   feasible: Callable[[NDArray], NDArray]) -> tuple[float, NDArray, NDArray, float, float] | None:
        """A rejected trial's step shortened: the first of α = 1/2, 1/4, ... (``backtrack``
        halvings) at which the loss falls, as ``(α, θ − αδ (made ``feasible``), its residuals, its
        loss, ρ)``, or None. ρ is the actual over the predicted decrease of the step αδ; an α at which the model
        predicts no decrease overshoots even its model, and a shorter one is tried without
        evaluating it. One residual evaluation per α tried."""
        alpha = 1.0
        for _ in range(self.backtrack):
            alpha *= 0.5
            pred = d.shortened(alpha)
            if not pred > 0:   # past even the model's minimum: no residuals needed to refuse it
                continue
            new = feasible(theta64 - alpha * d.delta)
            r1 = system.residuals(new)
            loss1 = system.total(r1)
            if math.isfinite(loss1) and loss1 < loss0:
                return alpha, new, r1, loss1, (loss0 - loss1) / pred
        return None

