"""Optimiser drivers: one optimiser each, behind one small interface, run by the training loop.

:class:`helmpinn.Trainer` is the run loop: it owns the points (drawing and redrawing them), the
history, error and validation evaluations, checkpoints, divergence and restore, the stop
request, the time limit and the progress bar. A :class:`Driver` owns only its optimiser's state
and how to take one step. After each step it hands the loop a :class:`StepInfo`, and
``run.record(info)`` (the loop's one place for all of the above) says whether to stop::

    class Driver:
        def start(self, run, steps): ...   # build the state (resume it from run.model.optimizer_state)
        def run(self, run, steps):         # default: step, record, until record says stop
            for _ in range(steps):
                if run.record(self.step(run)):
                    break
        def step(self, run) -> StepInfo: ...   # one step on run.batch, run.model.params in place
        def resampled(self, run): ...      # the points changed (LM rebuilds its residuals)
        def state_dict(self) -> dict: ...  # saved in checkpoints; load_state_dict restores it

A step that meets a non-finite loss raises :class:`~helmpinn.optim.NonFiniteLoss` (the
optimisers' own exception for it); the loop then restores the last good state. ``Trainer.fit(steps, optimizer=...)`` takes "adam", "lbfgs", "lm" or a Driver,
a user's own optimiser included.

The drivers here: :class:`AdamDriver` (the fused C++ Adam), :class:`LBFGSDriver` (SciPy's
L-BFGS-B in float64 on fixed points; it overrides :meth:`Driver.run`, SciPy's callback
recording each iteration) and :class:`LMDriver` (:class:`helmpinn.optim.lm.LevenbergMarquardt`).
Each has one settings table: :class:`AdamSettings`, :class:`LBFGSSettings`, :class:`LMSettings`
(its defaults and checks); ``AdamSettings`` lives beside Adam in :mod:`helmpinn.optim` (the
defaults read it there) and is importable from here too.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping

import numpy as np

from .. import _device, distributed
from ..problems.batch import TERMS
from ..defaults import LM_GROW_FACTOR, LM_GROW_GAP, LM_GROW_MAX, LM_GROW_PATIENCE, STALL_FACTOR, STALL_WINDOW
from ..optim import Adam, AdamSettings, NonFiniteLoss, Schedule, StepStatus, make_schedule, minimize_lbfgs
from ..optim.lm import CoreResiduals, LevenbergMarquardt
from .status import RunStatus

if TYPE_CHECKING:
    from .trainer import Trainer

__all__ = ["Driver", "StepInfo", "NonFiniteLoss", "AdamDriver", "AdamSettings", "LBFGSDriver",
           "LBFGSSettings", "DampedDriver", "LMDriver", "LMSettings", "make_driver", "DRIVERS", "MODEL_KINDS",
           "mismatch", "model_kind"]


@dataclass
class StepInfo:
    """What a driver reports after each step.

    ``loss``: the weighted total; ``terms``: the unweighted term means ("pde", "data", "bc";
    a missing one is recorded as NaN); ``rate``: Adam's learning rate, LM's damping λ, NaN
    where there is none; ``status``: extra progress-bar text; ``stop``: the driver's own reason
    to stop (the run's ``stop_reason``), else None; ``times``: seconds by part of the step,
    summed over the run in ``Trainer.step_times``; ``fit_loss``: where the objective adds rows
    beyond the points' (Gauss-Newton's mode rows), the points' part of ``loss``, which the
    validation loss is compared with (the gap); None: ``loss`` itself.
    """

    loss: float
    terms: Mapping[str, float]
    rate: float = math.nan
    status: str = ""
    stop: str | None = None
    times: dict[str, float] = field(default_factory=dict)
    fit_loss: float | None = None


class Driver:
    """The interface between the run loop and an optimiser (see the module docstring).

    Class attributes: ``name``; ``trains`` (the kinds of model it trains, as a model's ``kind``
    names them (:class:`~helmpinn.models.model_protocol.TrainableModel`), of :data:`MODEL_KINDS`:
    "network" for a :class:`helmpinn.Model`, "decomposed" for a
    :class:`helmpinn.models.decomposition.DecomposedModel`; None: a model of any kind, for a driver
    that needs only what every model of the protocol gives; :func:`mismatch` reads it); ``fixed_points``
    (True: the loop never redraws the points under this optimiser, whatever ``resample_every``
    says); ``stall`` (``(window, factor)``: the loop stops when the loss fell by less than
    ``factor`` over ``window`` steps; None: never).
    """

    name: ClassVar[str] = "driver"
    trains: ClassVar[tuple[str, ...] | None] = ("network",)
    fixed_points: ClassVar[bool] = False
    stall: tuple[int, float] | None = None

    def start(self, run: "Trainer", steps: int) -> None:
        """Prepare to take up to ``steps`` steps on ``run.batch`` (the points are drawn)."""

    def run(self, run: "Trainer", steps: int) -> None:
        """Take up to ``steps`` steps, handing each to ``run.record``, which says when to stop."""
        for _ in range(steps):
            if run.record(self.step(run)):
                break

    def step(self, run: "Trainer") -> StepInfo:
        """One step on ``run.batch``, updating ``run.model.params`` in place."""
        raise NotImplementedError(f"{type(self).__name__} implements neither step() nor run()")

    def resampled(self, run: "Trainer") -> None:
        """The loop drew new points (``run.batch``)."""

    def points_factor(self, run: "Trainer") -> float:
        """Called after each evaluation inside the run (``run.last_gap`` is fresh): the factor by
        which the loop is to grow its points, newly drawn, before the next step (1: keep them)."""
        return 1.0

    def state_dict(self) -> dict[str, Any]:
        """The optimiser state a checkpoint stores (and a restore puts back)."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Put back a state of :meth:`state_dict`."""

    def summary(self) -> dict[str, Any] | None:
        """What the last run did, for a report (None: nothing to add to the history)."""
        return None


# -- Adam --------------------------------------------------------------------------------------
class AdamDriver(Driver):
    """Adam (:class:`helmpinn.optim.Adam`, the fused C++ step) on the loop's gradient.

    The driver owns its Adam (``adam``; ``adam=`` an existing one to continue with): made at
    its first start (continuing a loaded checkpoint's moments and step count, the schedule then
    spanning the steps already taken plus ``steps``), then kept, so every later fit of the same
    driver goes on with it. A :class:`~helmpinn.Trainer` keeps one AdamDriver for its Adam fits
    (``Trainer.optimizer`` is that driver's Adam).

    It trains a model of any kind (``trains`` None): it needs only the loss and its gradient,
    which every model of the protocol gives. A model that computes its own loss (``spec`` None,
    e.g. a decomposed model: :meth:`helmpinn.models.decomposition.DecomposedModel.objective`)
    gives them on the run's points through its ``objective(training_set, weights, comm)``; one
    core network's (``objective`` None) are the loop's core workspace's. New points rebuild
    the model's objective.
    """

    name = "adam"
    trains = None   # any model: one core network through the loop's workspace, any other through its objective

    def __init__(self, settings: AdamSettings | None = None, *, adam: Adam | None = None, **options: Any):
        self.settings = settings if settings is not None else AdamSettings(**options)
        self.adam: Adam | None = adam
        self.objective: Any = None

    def start(self, run: "Trainer", steps: int) -> None:
        if self.adam is None:
            self.adam = self._make(run, steps)
        elif getattr(self.adam, "device", "cpu") != run.device:
            raise ValueError(f"optimizer: its state is on {self.adam.device} but the model is "
                             f"on {run.device}")
        self.resampled(run)

    def resampled(self, run: "Trainer") -> None:
        self.objective = run.model.objective(run.training_set, run.weights, run.comm)   # None: the loop's

    def _make(self, run: "Trainer", steps: int) -> Adam:
        model, s = run.model, self.settings
        state = model.optimizer_state
        m = state.get("m") if state else None
        m = m if m is None or _device.is_device_array(m) else np.asarray(m)
        resume = m is not None and tuple(m.shape) == (model.num_params,) and m.dtype == model.dtype
        done = int(state.get("step", 0)) if resume else 0
        lr = s.lr if isinstance(s.lr, Schedule) else make_schedule(s.schedule, s.lr, done + steps)
        adam = Adam(model.params, lr=lr, betas=s.betas)
        if resume:
            adam.load_state_dict(state)
        return adam

    def step(self, run: "Trainer") -> StepInfo:
        lr = self.adam.lr
        if self.objective is None:
            loss, terms = run.value_and_grad()
        else:
            loss, terms = self.objective(run.model.params, run.grad)
        if not math.isfinite(loss):
            raise NonFiniteLoss(f"non-finite loss ({loss})")
        self.adam.step(run.model.params, run.grad)
        return StepInfo(loss, terms, lr)

    def state_dict(self) -> dict[str, Any]:
        return self.adam.state_dict() if self.adam is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.adam is not None and state:
            self.adam.load_state_dict(state)


# -- L-BFGS ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LBFGSSettings:
    """L-BFGS-B's settings: ``maxcor`` (the pairs its memory keeps) and ``batch_size`` (the
    float64 Workspace's chunk)."""

    maxcor: int = 50
    batch_size: int = 4096

    def __post_init__(self) -> None:
        for name in ("maxcor", "batch_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


class LBFGSDriver(Driver):
    """SciPy's L-BFGS-B (:func:`helmpinn.optim.minimize_lbfgs`) in float64 on the run's fixed
    points; one loop step per iteration. The model follows the iterates (what the loop
    evaluates and checkpoints) and ends at the best point found. Runs on the CPU: a model on a
    GPU is copied to the host (with the points, as they are in its dtype) and back; one process
    only. SciPy's own stop (converged, or its evaluation budget spent) ends the run with that
    message as ``stop_reason``."""

    name = "lbfgs"
    fixed_points = True

    def __init__(self, settings: LBFGSSettings | None = None, **options: Any):
        self.settings = settings if settings is not None else LBFGSSettings(**options)
        self.result: dict[str, Any] | None = None

    def start(self, run: "Trainer", steps: int) -> None:
        distributed.check_ranks("lbfgs", 1 if run.comm is None else run.comm.Get_size(), NotImplementedError)
        self.result = None
        self._error_before = run.evaluate()

    def run(self, run: "Trainer", steps: int) -> None:
        if steps == 0:   # SciPy would still take one iteration
            self.result = {"iterations": 0, "evaluations": 0, "wall_s": 0.0, "loss_before": None,
                           "loss_after": None, "error_before": self._error_before,
                           "error_after": self._error_before, "message": "no iterations asked for"}
            return
        model = run.model
        theta = model.params_host()
        batch = run.batch if run.device == "cpu" else run.batch.to_host()

        def on_iteration(it: int, loss: float, x: np.ndarray, terms: dict[str, float] | None) -> bool:
            model.set_params(x)
            return run.record(StepInfo(loss, terms or {}))

        res = minimize_lbfgs(theta, model.spec, batch, steps, weights=run.weights,
                             train_fourier=run.train_fourier, batch_size=self.settings.batch_size,
                             maxcor=self.settings.maxcor, callback=on_iteration)
        if not run.diverged:
            model.set_params(theta)   # the best point seen
        if res.iterations < steps and not run.stop_reason:
            run.stop(RunStatus.OPTIMIZER_STOP, f"L-BFGS stopped at step {run.step}: {res.message}")
        self.result = {"iterations": res.iterations, "evaluations": res.evaluations, "wall_s": res.wall_s,
                       "loss_before": res.loss_before, "loss_after": res.loss_after,
                       "error_before": self._error_before, "error_after": run.evaluate(),
                       "message": res.message}

    def summary(self) -> dict[str, Any] | None:
        return self.result


# -- Levenberg-Marquardt -----------------------------------------------------------------------
class PointsGrowth:
    """The rule by which a driver asks the loop for more points (``Driver.points_factor``): once
    the gap (validation loss / training loss, ``run.last_gap``) has exceeded ``grow_gap`` at
    ``grow_patience`` evaluations in a row, ``grow_factor``, less where ``grow_max`` times the
    fit's first draw caps it; else 1. ``settings``: anything with those four attributes
    (:class:`LMSettings`, :class:`helmpinn.training.dd_driver.GNSettings`); ``grow_gap=None``: never."""

    def __init__(self, settings: Any):
        self.settings = settings
        self.above = 0    # evaluations in a row with the gap above grow_gap
        self.first = 0    # the fit's first draw's PDE points

    def start(self, run: "Trainer") -> None:
        self.above, self.first = 0, run.pde_points

    def factor(self, run: "Trainer", fits: Callable[[float], bool] | None = None) -> float:
        """The factor for the points after this evaluation; ``fits(factor)``: whether the
        driver can take that many more (None: it can)."""
        s, gap = self.settings, run.last_gap
        if s.grow_gap is None or gap is None:
            return 1.0
        self.above = self.above + 1 if gap > s.grow_gap else 0
        if self.above < s.grow_patience:
            return 1.0
        factor = min(float(s.grow_factor), s.grow_max * self.first / run.pde_points)
        if factor * run.pde_points < run.pde_points + 1 or (fits is not None and not fits(factor)):
            return 1.0
        self.above = 0
        return factor


@dataclass(frozen=True)
class LMSettings:
    """Levenberg-Marquardt's run settings: the stall stop (the loss fell by less than a factor
    ``stall_factor`` over ``stall_window`` steps on the same points), the growth of the points
    (when the gap, validation loss / training loss, exceeds ``grow_gap`` at ``grow_patience``
    evaluations in a row, the points grow by ``grow_factor``, up to ``grow_max`` times the
    fit's first draw and within LM's memory budget; ``grow_gap=None``: never; defaults and
    reasons in :mod:`helmpinn.defaults`) and ``options``, keywords of
    :class:`helmpinn.optim.lm.LevenbergMarquardt` (``solver``, ``damping``, ``update``, ``lam``,
    ``geodesic``, ``gram``, ``max_trials``, ``blas_threads``, ...: its signature holds their
    defaults and its constructor checks them)."""

    stall_window: int = STALL_WINDOW
    stall_factor: float = STALL_FACTOR
    options: Mapping[str, Any] = field(default_factory=dict)
    grow_gap: float | None = LM_GROW_GAP
    grow_patience: int = LM_GROW_PATIENCE
    grow_factor: float = LM_GROW_FACTOR
    grow_max: float = LM_GROW_MAX

    def __post_init__(self) -> None:
        if int(self.stall_window) < 1 or not 0 < self.stall_factor <= 1:
            raise ValueError(f"need stall_window >= 1 and 0 < stall_factor <= 1, got {self.stall_window}, "
                             f"{self.stall_factor}")
        if self.grow_gap is not None and not (self.grow_gap >= 1 and math.isfinite(self.grow_gap)):
            raise ValueError(f"grow_gap must be a finite number >= 1 or None, got {self.grow_gap}")
        if int(self.grow_patience) < 1:
            raise ValueError(f"grow_patience must be >= 1, got {self.grow_patience}")
        if not (self.grow_factor > 1 and math.isfinite(self.grow_factor)):
            raise ValueError(f"grow_factor must be a finite number > 1, got {self.grow_factor}")
        if not (self.grow_max >= 1 and math.isfinite(self.grow_max)):
            raise ValueError(f"grow_max must be a finite number >= 1, got {self.grow_max}")
        name, solver = self.solver()
        known = set(inspect.signature(solver).parameters) - {"residuals", "comm"}
        unknown = set(self.options) - known
        if unknown:
            raise ValueError(f"{name} options: unknown {sorted(unknown)}; known: {sorted(known)}")

    @staticmethod
    def solver() -> tuple[str, Any]:
        """The solver whose keywords ``options`` are, and its name (a subclass for another
        solver with the same run rules overrides it)."""
        return "Levenberg-Marquardt", LevenbergMarquardt


class DampedDriver(Driver):
    """A driver run by an :class:`LMSettings` (``settings_class``, a subclass of it for another
    solver): its stall stop (``self.stall``) and the growth of its points (``self.growth``), from
    ``settings`` or from the keywords (the solver's ``options`` among them)."""

    settings_class: ClassVar[type] = LMSettings

    def __init__(self, settings: LMSettings | None = None, *, stall_window: int = STALL_WINDOW, stall_factor: float = STALL_FACTOR,
                 grow_gap: float | None = LM_GROW_GAP, grow_patience: int = LM_GROW_PATIENCE,
                 grow_factor: float = LM_GROW_FACTOR, grow_max: float = LM_GROW_MAX, **options: Any):
        self.settings = settings if settings is not None else self.settings_class(
            stall_window, stall_factor, options, grow_gap, grow_patience, grow_factor, grow_max)
        self.stall = (int(self.settings.stall_window), float(self.settings.stall_factor))
        self.growth = PointsGrowth(self.settings)


class LMDriver(DampedDriver):
    """Levenberg-Marquardt (:class:`helmpinn.optim.lm.LevenbergMarquardt`) on the run's residuals.

    A step is one linearisation and up to ``max_trials`` damped trials; the history's rate is λ
    and its terms come from the residuals. Stops by itself when no trial lowers the loss even at
    the largest damping, and (through the loop) on a stall. Continues λ and its counts from a
    loaded LM checkpoint. New points rebuild the residuals. After each evaluation it asks the
    loop for more points when the gap stays above ``grow_gap`` (:meth:`points_factor`). CPU
    only; with ``run.comm`` JᵀJ and Jᵀr are summed over the ranks (and every rank takes the
    same decision on the points: the gap is the same number on each). The LevenbergMarquardt is the driver's ``lm`` (the run's is ``run.driver.lm``).
    """

    name = "lm"
    lm: Any = None   # the LevenbergMarquardt, from start

    def start(self, run: "Trainer", steps: int) -> None:
        if run.device != "cpu":
            raise NotImplementedError(
                f"Levenberg-Marquardt runs on the CPU (its Jacobian, JᵀJ and solves are host arrays), "
                f"but this Trainer's model is on {run.device}; train it with Trainer(problem, "
                f"model.to('cpu')), or use Adam / L-BFGS on the GPU")
        self.lm = LevenbergMarquardt(self._residuals(run), comm=run.comm, **self.settings.options)
        state = run.model.optimizer_state
        if state and "lm_lambda" in state:
            self.lm.load_state_dict(state)
        self.growth.start(run)
        run.step_times.update(jacobian=0.0, jtj=0.0, solve=0.0, trial=0.0)
        self.times = run.step_times

    @staticmethod
    def _residuals(run: "Trainer") -> Any:
        return CoreResiduals(run.workspace, run.batch, run.weights, train_fourier=run.train_fourier)

    def resampled(self, run: "Trainer") -> None:
        self.lm.set_residuals(self._residuals(run))

    def points_factor(self, run: "Trainer") -> float:
        """:class:`PointsGrowth`'s factor, 1 where the grown points would take LM's solver over
        its memory budget (:meth:`helmpinn.optim.lm.LevenbergMarquardt.fits`)."""
        return self.growth.factor(run, self.lm.fits)

    def step(self, run: "Trainer") -> StepInfo:
        info = self.lm.step(run.model.params)   # NonFiniteLoss: the loop restores the last good state
        # the unweighted term means from the residuals (PDE, data, bc rows, in order)
        r2, row, sums = info.residuals ** 2, 0, np.zeros(len(TERMS))
        for i, n in enumerate(run.batch.sizes.values()):
            n *= 2
            sums[i] = np.sum(r2[row:row + n])
            row += n
        if run.comm is not None:   # the ranks' rows together
            sums = run.comm.allreduce(sums)
        terms = {}
        for term, s in zip(TERMS, sums):
            w = run.weights[term]
            terms[term] = float(s) / w if w > 0 else 0.0
        stop = None
        if info.status is StepStatus.LAM_MAX:
            stop = (f"no decrease at the largest damping (λ = {info.lam:.1e}) at step {run.step + 1}: "
                    "converged or stuck")
        return StepInfo(info.loss, terms, info.lam, f"lam={info.lam:.1e}", stop, info.times)

    def state_dict(self) -> dict[str, Any]:
        return self.lm.state_dict() if self.lm is not None else {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if self.lm is not None and state:
            self.lm.load_state_dict(state)

    def summary(self) -> dict[str, Any] | None:
        lm = self.lm
        if lm is None:
            return None
        return {"solver": lm.solver, "steps": lm.steps, "jacobians": lm.iterations, "evaluations": lm.evaluations,
                "final_lambda": lm.lam, "times_s": dict(self.times)}


#: The drivers by name (``Trainer.fit(optimizer=NAME)``, ``helmpinn train --optimizer NAME``).
DRIVERS: dict[str, type[Driver]] = {"adam": AdamDriver, "lbfgs": LBFGSDriver, "lm": LMDriver}


#: The built-in kinds of model, as a model's ``kind``, a driver's ``trains`` and
#: ``hp.solve(model=...)`` name them, in words.
MODEL_KINDS = {"network": "one network", "decomposed": "a decomposed model"}


def model_kind(model: Any) -> str:
    """The kind of ``model``, its ``kind`` (:class:`~helmpinn.models.model_protocol.TrainableModel`)."""
    return model.kind


def _kind_words(kind: str) -> str:
    return MODEL_KINDS.get(kind, f"a model of kind {kind!r}")


def mismatch(kind: str, optimizer: "str | Driver") -> str | None:
    """Why ``optimizer`` (a name of :data:`DRIVERS`, or a driver) does not train a model of
    ``kind`` (a model's ``kind``: one of :data:`MODEL_KINDS`, or a new kind's name), as the end of
    a sentence that names the optimiser ("trains one network, not a decomposed model"), or None
    when it does. The drivers' ``trains`` is the one table behind ``hp.solve``'s, the CLI's and
    ``Trainer.fit``'s refusals."""
    driver = optimizer if isinstance(optimizer, Driver) else DRIVERS.get(optimizer)
    if driver is None or driver.trains is None or kind in driver.trains:
        return None
    return f"trains {' or '.join(_kind_words(k) for k in driver.trains)}, not {_kind_words(kind)}"


def make_driver(name: str, **options: Any) -> Driver:
    """The driver called ``name`` ("adam", "lbfgs", "lm") with its settings ``options``."""
    if name not in DRIVERS:
        raise ValueError(f"optimizer must be one of {tuple(DRIVERS)} or a Driver, got {name!r}")
    return DRIVERS[name](**options)
