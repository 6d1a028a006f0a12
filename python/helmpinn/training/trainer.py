"""Training: :class:`Trainer` is the run loop. It owns the points (drawn, redrawn), the history,
the error on the test grid and the validation loss, checkpoints, divergence and restore, the
stop request, the time limit and the progress bar; the optimisers are drivers behind one small
interface (:mod:`helmpinn.training.drivers`): Adam (:meth:`Trainer.fit`), L-BFGS (:meth:`Trainer.polish`),
Levenberg-Marquardt (:meth:`Trainer.fit_lm`) or a user's own. Default settings:
:mod:`helmpinn.defaults` (re-exported here: :func:`default_settings`, :func:`auto_weights`).

Each evaluation records the error on the test grid (with an exact solution) and the loss,
with the same weights, on validation points drawn once from their own generator (never
trained on, so they change nothing in the training): a training loss far below the
validation loss is overfitting. Their ratio, the gap (:attr:`Trainer.last_gap`: the validation loss
over the last step's training loss; about 1 for a field fitted everywhere), shows on the
progress bar; after each evaluation the driver may ask for more points
(``Driver.points_factor``: Levenberg-Marquardt does when the gap stays large), which the
loop draws anew before the next step (:attr:`Trainer.pde_points` and :attr:`Trainer.bc_points` grow; a
checkpoint records them and a run resumed from it goes on with them).

``comm`` (an mpi4py communicator) trains data-parallel: each rank draws its share of the
points (:func:`helmpinn.distributed.sample_shard`), the loss and gradient are the union's,
every rank takes the same step, checked every ``check_every`` steps; stops are agreed by all
ranks; only rank 0 shows progress and writes checkpoints. Every rank makes the same calls,
and first checks that all have the same problem and model (:func:`~helmpinn.distributed.check_same_run`).

A non-finite loss (or non-finite parameters at a checkpoint or after the last step) stops
cleanly: the model and optimiser go back to the last good state (the last checkpoint, or the
start of the fit), the checkpoint file is kept, ``diverged`` is True, ``status`` is
``RunStatus.DIVERGED`` and ``stop_reason`` says what happened. The first step of a fit and on new points checks the inputs, so NaN or
Inf from the problem raises ValueError naming the array. Every fit ends with an evaluation
and, with ``checkpoint_path``, a checkpoint (model, optimiser state, the sampler's state): a
Trainer given a model loaded from it continues the run (step count, optimiser state, the
schedule, the same points). A checkpoint that cannot be written (an OSError: a full disk)
does not stop the run: the file keeps the last good one and the next checkpoint tries
again (:meth:`Trainer.save_checkpoint`).

The Trainer runs where the model is (``device``: None follows it; "cuda" / "cpu" moves it
first). On a GPU the points, parameters, gradient and Adam's moments stay in device memory;
L-BFGS copies the parameters to the host and back; LM and ``comm`` are CPU only.
"""
from __future__ import annotations

import math
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import _core, _device, distributed, memory
from .._checks import integer
from .._compat import UNSET, renamed
from ..problems.batch import TERMS, WEIGHTS, Batch
from ..models.model_protocol import TrainableModel, check_trainable
from ..defaults import auto_weights, default_settings
from .status import RunStatus
from .drivers import AdamDriver, AdamSettings, Driver, LBFGSDriver, LBFGSSettings, LMDriver, StepInfo, \
    make_driver, mismatch
from .checkpointing import Checkpoints, check_metadata, optimizer_state, params_finite, restore, \
    resume_sampler, snapshot
from .evaluation import grid_error, record_evaluation, relative_l2, validation_loss
from .progress import STEPS_TIMED, Bar, bar_status, interrupt_handler, out_of_time
from ..optim import Adam, NonFiniteLoss, Schedule
from ..problems import Problem, TrainingSet

__all__ = ["Trainer", "History", "default_settings", "auto_weights", "relative_l2"]


@dataclass
class History:
    """One entry per step (``step``, the weighted ``loss``, each unweighted term, ``lr``: the
    driver's rate), and one per evaluation (``eval_step``, ``eval_error``: the relative L2 error,
    None without an exact solution, ``eval_time``: training seconds then, ``eval_val_loss``: the
    loss on the validation points)."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    pde: list[float] = field(default_factory=list)
    data: list[float] = field(default_factory=list)
    bc: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_error: list[float | None] = field(default_factory=list)
    eval_time: list[float] = field(default_factory=list)
    eval_val_loss: list[float | None] = field(default_factory=list)

    def as_dict(self) -> dict[str, list]:
        return {k: list(v) for k, v in self.__dict__.items()}


def _deprecated_name(name: str, why: str) -> property:
    """A read-only property, the old name of the Trainer's attribute ``name`` (``pde_points`` was
    ``n_pde``): it warns (DeprecationWarning, ``why`` added) and returns that attribute."""
    old = "n_" + name.split("_")[0]

    def get(trainer: "Trainer") -> Any:
        warnings.warn(f"Trainer.{old} is deprecated, use Trainer.{name}{why}", DeprecationWarning, stacklevel=2)
        return getattr(trainer, name)

    return property(get, doc=f"Deprecated name of :attr:`{name}`{why.replace('n_bc', '``n_bc``')}.")


class Trainer:
    """Trains ``model`` on ``problem``: the run loop around an optimiser driver. ``model``: any
    model with the run loop's protocol (:class:`~helmpinn.models.model_protocol.TrainableModel`:
    a :class:`~helmpinn.Model`, a :class:`~helmpinn.models.decomposition.DecomposedModel`, or a
    kind of model of one's own), trained in place; a TypeError names the members it lacks.

    :meth:`fit` runs Adam (or ``optimizer=``: "lbfgs", "lm" or a :class:`~helmpinn.training.drivers.Driver`),
    :meth:`polish` L-BFGS, :meth:`fit_lm` Levenberg-Marquardt; each returns the :class:`History`
    and the run's ``step`` counts on across them.

    Parameters (all keyword; None means :func:`default_settings`'s value): ``lr`` / ``schedule``
    / ``betas`` (Adam's, :class:`~helmpinn.training.drivers.AdamSettings`); ``optimizer`` (an existing
    :class:`~helmpinn.optim.Adam` to continue with); ``pde_points`` / ``bc_points`` (points per
    draw; old names ``n_pde`` / ``n_bc`` warn); ``sampling`` ("uniform", "sobol", "halton");
    ``resample_every`` (steps between draws, 0 = never); ``weights`` ({"pde", "data", "bc"},
    missing ones from :func:`auto_weights`); ``train_fourier`` (False freezes B); ``batch_size``
    (Workspace chunk); ``eval_every`` (steps between evaluations, 0 = only at the end) and
    ``n_test`` (test grid points per dimension); ``val_points`` (interior points of the fixed
    validation set, None: min(pde_points, 512), 0: none); ``target_error`` /
    ``target_val_loss`` (stop once the relative L2 error / the validation loss is below it);
    ``time_limit`` (seconds each fit may run, measured by ``clock``, a function returning
    seconds; a step is not begun when the longest of the last
    :data:`~helmpinn.training.progress.STEPS_TIMED` steps would take the fit past it);
    ``checkpoint_every`` / ``checkpoint_path``; ``callbacks`` (``f(trainer, step)``
    after every step; may change ``model.params`` or set ``stop_reason``); ``progress``; ``seed``;
    ``stop_on_interrupt`` (the first Ctrl-C in the main thread stops after the current step, as
    :meth:`request_stop` does; a second raises KeyboardInterrupt); ``comm``; ``device``.
    How a fit ended: :attr:`status` (a :class:`~helmpinn.training.status.RunStatus`) and
    :attr:`stop_reason`; what the loop does on evaluations, over MPI, on a non-finite loss and
    on a GPU: the module docstring.
    """

    def __init__(self, problem: Problem, model: TrainableModel, *, lr: float | Schedule | None = None,
                 schedule: str = "cosine", betas: tuple[float, float] | None = None,
                 optimizer: Adam | None = None,
                 pde_points: int | None = None, bc_points: int | None = None, sampling: str = "sobol",
                 resample_every: int = 100, weights: Mapping[str, float] | None = None,
                 train_fourier: bool = True, batch_size: int = 4096, eval_every: int = 100,
                 n_test: int | None = None, target_error: float | None = None,
                 target_val_loss: float | None = None,
                 checkpoint_every: int = 0, checkpoint_path: str | os.PathLike | None = None,
                 callbacks: Sequence[Callable[["Trainer", int], Any]] = (), progress: bool = True,
                 seed: int = 0, log_every: int = 25, stop_on_interrupt: bool = False,
                 comm: Any = None, check_every: int = 100, device: str | None = None,
                 val_points: int | None = None, time_limit: float | None = None,
                 clock: Callable[[], float] = time.perf_counter,
                 n_pde: int = UNSET, n_bc: int = UNSET):
        check_trainable(model)   # the run loop's model protocol (helmpinn.models.model_protocol), nothing more
        a = _checked_arguments(problem, model, {k: v for k, v in locals().items()
                                                if k not in ("self", "problem", "model")})
        model.to(a["device"])   # once every argument is checked
        self.problem, self.model = problem, model
        self._adam = a["adam"]   # the driver of this Trainer's Adam fits, which owns its Adam
        for name in _SETTINGS:
            setattr(self, name, a[name])
        self.rng = np.random.default_rng(seed)
        self.comm, self.rank, self.check_every = comm, 0, max(int(check_every), 1)
        if comm is not None:
            self.rank, self._ranks = comm.Get_rank(), comm.Get_size()
            self.rng, self._shared_rng = distributed.rank_generators(seed, self.rank)
            self.progress = progress and self.rank == 0

        # One workspace and one gradient buffer for the whole run, where the model is.
        self.device = model.device
        self._batch_size = int(a["batch_size"])
        # a model that computes its own loss (spec None) needs no core workspace
        self.workspace = None if model.spec is None else \
            _core.Workspace(model.spec, a["batch_size"], model.dtype.name, device=self.device)
        self.grad = _device.zeros(model.num_params, model.dtype, self.device)
        self._loss_kw = {**{WEIGHTS[t]: float(self.weights[t]) for t in TERMS},
                         "train_fourier": self.train_fourier}
        self.training_set: TrainingSet | None = None
        # The current draw's points as the core takes them: converted once per draw (resample),
        # then the same object at every step.
        self.batch: Batch | None = None

        self.x_test: np.ndarray | None = None
        self.u_test: np.ndarray | None = None
        if problem.exact is not None:
            self.x_test = problem.test_points(n_test)
            self.u_test = problem.exact_at(self.x_test)
        self.val_points = min(self.pde_points, 512) if a["val_points"] is None else int(a["val_points"])
        self._val: tuple[Batch, Any, Any] | None = None   # validation points, workspace, gradient
        _start_state(self)
        if comm is not None and self._ranks > 1:   # before any draw: the same problem and model everywhere
            distributed.check_same_run(comm, problem, self.model)

    n_pde = _deprecated_name("pde_points", "")
    n_bc = _deprecated_name("bc_points", " (n_bc names the boundary normals)")

    @property
    def optimizer(self) -> Adam | None:
        """The Adam of this Trainer's Adam fits (None before the first; its driver owns it)."""
        return self._adam.adam

    @property
    def stop_reason(self) -> str | None:
        """Why the last fit stopped early, in words (None: it took every step); :attr:`status`
        says which kind of stop it was. Set by a callback (or other code), it stops the fit after
        the current step with the status ``RunStatus.CALLBACK``."""
        return self._stop_reason

    @stop_reason.setter
    def stop_reason(self, message: str | None) -> None:
        self.stop(RunStatus.CALLBACK if message else None, message)

    def stop(self, status: RunStatus | None, message: str | None) -> None:
        """Record how the fit ends: ``status`` (a :class:`~helmpinn.training.status.RunStatus`)
        and ``message`` (:attr:`stop_reason`); during a fit it stops after the current step."""
        if status is not None and not isinstance(status, RunStatus):
            raise TypeError(f"status: expected a RunStatus or None, got {status!r}")
        self.status, self._stop_reason = status, message

    # -- pieces -------------------------------------------------------------------------------
    def resample(self) -> None:
        """Draw fresh collocation points (for the next step)."""
        self._draw_state = self.rng.bit_generator.state
        # A failure on one rank (a MemoryError, bad data) is raised on every rank at the end of
        # the block, not left for the others to wait at the next collective.
        with distributed.collective(self.comm, "Trainer.resample"):
            if self.comm is None:
                self.training_set = self.problem.sample(self.pde_points, self.bc_points, self.rng,
                                                        self.sampling)
            else:
                self.training_set = distributed.sample_shard(
                    self.problem, self.pde_points, self.bc_points, self.rng, self._shared_rng,
                    self.sampling, self.rank, self._ranks)
            batch = self.training_set.to_batch(self.model.dtype)
        if self.comm is not None:  # this rank's shard, with the global counts of the draw
            batch = distributed.shard_batch(batch, distributed.global_counts(self.comm, batch))
        if self.device != "cpu":   # one copy of the draw into device buffers
            batch = batch.to_device(self.device)
        self.batch = batch
        self._drawn_for = self.step + 1
        self._check_inputs = True

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop the fit after the current step (safe from a signal handler or callback); the
        run then ends as any other: evaluation, checkpoint, ``stop_reason``. A request made
        while no step runs (before a fit starts, between two fits, during a fit's final
        evaluation or checkpoint) stays pending and stops the next fit after its first step;
        a request that stopped a fit is spent (:attr:`stop_requested` keeps its reason until
        the next fit starts)."""
        self.stop_requested = reason

    def evaluate(self) -> float | None:
        """Relative L2 error on the test grid (None without an exact solution)."""
        return grid_error(self)

    def validation_loss(self) -> float | None:
        """The loss (the training weights) on the validation points: ``val_points`` interior and
        up to 128 boundary points, drawn uniformly once from a generator of their own (the
        training points' generator is not touched); None with ``val_points=0``. Every rank
        holds all of them and computes the same value."""
        return validation_loss(self)

    def value_and_grad(self) -> tuple[float, dict[str, float]]:
        """The loss and its unweighted terms ({"pde", "data", "bc"}) on the current points (the
        union of every rank's with ``comm``), the gradient written into :attr:`grad`. The first
        call of a fit or on new points has the core check every input for NaN/Inf, so bad data
        is named (ValueError), not trained on."""
        kw = dict(self._loss_kw, check_finite=self._check_inputs)
        try:
            if self.comm is None:
                b = self.workspace.value_and_grad(self.model.params, self.grad, breakdown=True,
                                                  batch=self.batch, **kw)
                terms = {"total": b.total, **{t: getattr(b, t) for t in TERMS}}
            else:
                terms = distributed.value_and_grad(self.workspace, self.comm, self.model.params,
                                                   self.grad, batch=self.batch, breakdown=True, **kw)
        except (ValueError, FloatingPointError) as exc:
            if not self._check_inputs:
                raise
            raise ValueError(f"step {self.step + 1}: the training data drawn from problem {self.problem.name!r} "
                             f"are not finite: {exc}") from exc
        self._check_inputs = False
        return terms["total"], {k: terms[k] for k in TERMS}

    def save_checkpoint(self, path: str | os.PathLike | None = None) -> bool:
        """Save model + optimiser state (only if every parameter is finite); returns whether
        the state was good (False: non-finite parameters, nothing written).

        A write that fails with an OSError (a full disk, a file-size limit, a folder gone) does
        not end the run: the file is written whole or not at all (the last good checkpoint
        stays), one line on stderr (rank 0) says what failed, ``checkpoints.failed`` holds it
        until a later checkpoint is written, and the next checkpoint tries again
        (:class:`Checkpoints`)."""
        path = path or self.checkpoint_path
        if path is None:
            raise ValueError("no checkpoint path")
        if not params_finite(self):
            return False
        self.checkpoints.write(self, os.fspath(path))
        snapshot(self)
        return True

    def _check_device(self) -> None:
        if self.model.device != self.device:
            raise RuntimeError(f"the model moved to {self.model.device} after this Trainer was made "
                               f"on {self.device}; make a new Trainer for it")

    # -- the optimisers -----------------------------------------------------------------------------
    def fit(self, steps: int, optimizer: str | Driver | None = None, *, time_limit: float | None = None,
            since: float | None = None) -> History:
        """Run ``steps`` steps (fewer on an early stop) of ``optimizer``: "adam" (the Trainer's
        Adam, kept across fits), "lbfgs", "lm", "gn" or a :class:`~helmpinn.training.drivers.Driver`;
        None: the model's ``default_optimizer`` (Adam for a :class:`~helmpinn.Model`). A driver
        that does not train the model's ``kind`` is refused (TypeError).
        ``time_limit``: this fit's limit in seconds instead of the Trainer's, counted from
        ``since`` (a time of ``clock``: a run of several fits under one limit; None: the fit's
        start). Returns the history; :attr:`status` and :attr:`stop_reason` say how it ended."""
        optimizer = self.model.default_optimizer if optimizer is None else optimizer
        if optimizer is None or optimizer == "adam":
            driver: Driver = self._adam
        elif isinstance(optimizer, Driver):
            driver = optimizer
        elif isinstance(optimizer, str):
            driver = make_driver(optimizer)
        else:
            raise TypeError(f"optimizer must be 'adam', 'lbfgs', 'lm' or a helmpinn.training.drivers.Driver, "
                            f"got {type(optimizer).__name__}")
        return self._run(driver, steps, "steps", time_limit, since)

    def polish(self, maxiter: int, batch_size: int = 4096, *, time_limit: float | None = None,
               since: float | None = None) -> dict[str, Any]:
        """L-BFGS (:class:`~helmpinn.training.drivers.LBFGSDriver`: SciPy, float64, on the current points;
        the model keeps the best point found) for up to ``maxiter`` iterations, each a step of
        the run (``time_limit``, ``since``: as :meth:`fit`'s). Returns a summary: iterations,
        evaluations, the loss and error before and after."""
        driver = LBFGSDriver(LBFGSSettings(batch_size=batch_size))
        self._run(driver, maxiter, "maxiter", time_limit, since)
        return dict(driver.result)

    def fit_lm(self, iterations: int, **options: Any) -> History:
        """Up to ``iterations`` Levenberg-Marquardt steps (:class:`~helmpinn.training.drivers.LMDriver`;
        ``options``: ``stall_window``, ``stall_factor`` and any keyword of
        :class:`helmpinn.optim.lm.LevenbergMarquardt`, such as ``solver``, ``lam``, ``geodesic``,
        ``gram``). History ``lr`` holds λ; checkpoints store λ, and a model loaded from one
        continues it on the same points. Returns the history."""
        return self._run(LMDriver(**options), iterations, "iterations")

    # -- the loop -------------------------------------------------------------------------------------
    def _run(self, driver: Driver, steps: int, what: str, time_limit: float | None = None,
             since: float | None = None) -> History:
        steps = integer("Trainer", what, steps, low=0)
        if time_limit is not None and not (time_limit > 0 and math.isfinite(time_limit)):
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit}")
        self._check_device()
        why = mismatch(self.model.kind, driver)
        if why:
            raise TypeError(f"optimizer {driver.name!r} {why} (the model is a {type(self.model).__name__})")
        if not params_finite(self):
            raise ValueError("the model's parameters contain NaN or Inf; cannot train from them")
        memory.check_trainer(self, driver)   # the fit's memory, before its points are drawn
        state = self.model.optimizer_state or {}
        resumed = not self.step and int(state.get("step", 0) or 0) > 0
        if resumed:   # a model loaded from a checkpoint: its run goes on, on its points
            self.step = int(state["step"])
            resume_sampler(self)
        if self.training_set is None or self.batch is None:
            self.resample()
            if resumed:
                self._drawn_for = self.step   # the checkpoint's draw, in use at its last step
        if not driver.fixed_points and self._resample_due() and self._drawn_for <= self.step:
            self.resample()
        self._check_inputs = True
        self.stop(None, None)
        self.diverged = False
        if self._stop_spent:   # a request that stopped an earlier fit; a pending one stays
            self.stop_requested, self._stop_spent = None, False
        self.step_times = {}
        driver.start(self, steps)
        self.driver = driver
        snapshot(self)
        self._last_step = self.step + steps
        with interrupt_handler(self):  # also around the final checkpoint: Ctrl-C must not cut it
            self._t0 = self.clock()
            self._limit = self.time_limit if time_limit is None else time_limit
            self._since = self._t0 if since is None else since
            self._t_aside = 0.0          # evaluation time, not counted as training time
            self._pending, self._bar_at = 0, self._t0
            self._step_ends = [self._t0]   # when the last steps ended: the next step's duration
            self._bar = Bar(steps, None if self._limit is None else max(self._limit - (self._t0 - self._since), 0.0),
                             self.progress)
            try:
                driver.run(self, steps)
            except NonFiniteLoss as exc:
                failed, good = self.step + 1, restore(self)
                self.diverged = True
                self.stop(RunStatus.DIVERGED, f"{exc} at step {failed}; restored the last good state (step {good})")
            finally:
                self.train_time += self.clock() - self._t0 - self._t_aside
                self._bar.update(self._pending, self.clock() - self._t0)
                self._bar.close()
            _end_fit(self)
        if self.status is None:
            self.status = RunStatus.STEPS_DONE
        if self.stop_reason and self.progress:
            print(f"helmpinn: {self.stop_reason}", file=sys.stderr)
        return self.history

    def _resample_due(self) -> bool:
        return bool(self.resample_every and self.step and self.step % self.resample_every == 0)

    def record(self, info: StepInfo) -> bool:
        """What follows every step of every driver, in one place; returns True to stop.

        Appends the step to the history; sums ``info.times`` into :attr:`step_times`; runs the
        callbacks; checks the replicas (``comm``, every ``check_every`` steps); takes the
        driver's stop, the stall stop (``driver.stall``), the evaluation every ``eval_every``
        steps (target check), the checkpoint every ``checkpoint_every`` steps (non-finite
        parameters restore the last good state), the time limit and a requested stop (agreed by
        every rank); updates the progress bar; and draws new points when they are due before
        the next step (``driver.resampled``), more of them when the driver asked for it after
        this step's evaluation (``driver.points_factor``). The stall window counts only steps on
        the points drawn last inside the run (losses on other points do not compare).
        """
        step = self.step + 1
        h = self.history
        h.step.append(step)
        h.loss.append(info.loss)
        self.last_fit_loss = info.loss if info.fit_loss is None else info.fit_loss   # (the gap's)
        for term in TERMS:
            getattr(h, term).append(info.terms.get(term, math.nan))
        h.lr.append(info.rate)
        self.step = step
        for key, value in info.times.items():
            self.step_times[key] = self.step_times.get(key, 0.0) + value
        for cb in self.callbacks:
            cb(self, step)
        if self.comm is not None and step % self.check_every == 0:
            distributed.check_replicas(self.comm, self.model.params, step)
        now = _step_stops(self, step, info)
        self._pending += 1
        if self.progress and (self._pending >= self.log_every or self.stop_reason or now - self._bar_at >= 0.5):
            self._bar.update(self._pending, now - self._t0, bar_status(self, info))
            self._pending, self._bar_at = 0, now
        grow, self._grow = self._grow, 1.0
        if self.stop_reason:
            return True
        if self.step < self._last_step and (grow > 1.0 or (not self.driver.fixed_points and self._resample_due())):
            if grow > 1.0:
                self._grown = True
                self.pde_points = math.ceil(grow * self.pde_points)
                if self.problem.dim > 1:   # 1-D: the two end points
                    self.bc_points = math.ceil(grow * self.bc_points)
            self.resample()
            self.driver.resampled(self)
            self._stall_from = self.step + 1
        return False


#: The Trainer's settings that :func:`_checked_arguments` checks and fills in, kept as attributes.
_SETTINGS = ("lr", "schedule", "betas", "pde_points", "bc_points", "sampling", "resample_every", "weights",
             "train_fourier", "eval_every", "target_error", "target_val_loss", "time_limit", "clock",
             "checkpoint_every", "checkpoint_path", "callbacks", "progress", "log_every", "stop_on_interrupt", "seed")


def _checked_arguments(problem: Problem, model: Any, a: dict[str, Any]) -> dict[str, Any]:
    """The Trainer's keywords ``a`` checked (a clear error naming the first bad one) and filled in:
    the defaults (:func:`default_settings`), the weights (:func:`auto_weights` for the missing
    ones), ``device`` the one to train on, ``adam`` the driver of the Trainer's Adam fits. The
    device is checked before anything else; nothing is changed (the model is not moved)."""
    a = dict(a)
    a["device"] = model.device if a["device"] is None else _device.check(a["device"], "Trainer")
    a["pde_points"] = renamed("Trainer", "pde_points", a["pde_points"], "n_pde", a["n_pde"], stacklevel=4)
    a["bc_points"] = renamed("Trainer", "bc_points", a["bc_points"], "n_bc", a["n_bc"], stacklevel=4)
    if model.in_dim != problem.dim:
        raise ValueError(f"model takes {model.in_dim}-D points but the problem is {problem.dim}-D")
    for name, least in (("pde_points", 1), ("bc_points", 0), ("resample_every", 0), ("val_points", 0),
                        ("eval_every", 0), ("checkpoint_every", 0), ("batch_size", 1)):
        if a[name] is not None:
            a[name] = integer("Trainer", name, a[name], low=least)
    time_limit = a["time_limit"]
    if time_limit is not None and not (time_limit > 0 and math.isfinite(time_limit)):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit}")
    if a["checkpoint_every"] and a["checkpoint_path"] is None:
        raise ValueError("checkpoint_every needs a checkpoint_path")
    if a["checkpoint_path"] is not None:
        check_metadata(model)
    if a["comm"] is not None and a["device"] != "cpu":
        raise NotImplementedError(f"Trainer(comm=...): data-parallel training runs on the CPU "
                                  f"(the ranks reduce host gradients), not on {a['device']}: "
                                  f"use a model on the CPU")
    defaults = default_settings(problem)
    a["lr"] = defaults["lr"] if a["lr"] is None else a["lr"]
    a["betas"] = tuple(defaults["betas"] if a["betas"] is None else a["betas"])
    a["adam"] = AdamDriver(AdamSettings(a["lr"], a["schedule"], a["betas"]), adam=a["optimizer"])   # checks them
    for name in ("pde_points", "bc_points"):
        a[name] = defaults[name] if a[name] is None else int(a[name])
    a["weights"] = {**auto_weights(problem), **dict(a["weights"] or {})}
    unknown = set(a["weights"]) - set(TERMS)
    if unknown:
        raise ValueError(f"weights: unknown terms {sorted(unknown)}; use {', '.join(map(repr, TERMS))}")
    a.update(resample_every=int(a["resample_every"]), train_fourier=bool(a["train_fourier"]),
             eval_every=int(a["eval_every"]), checkpoint_every=int(a["checkpoint_every"]),
             checkpoint_path=None if a["checkpoint_path"] is None else os.fspath(a["checkpoint_path"]),
             callbacks=list(a["callbacks"]), log_every=max(int(a["log_every"]), 1),
             stop_on_interrupt=bool(a["stop_on_interrupt"]))
    return a


def _start_state(trainer: Trainer) -> None:
    """A new Trainer's run state: no step, no fit, no points drawn, no stop."""
    trainer._draw_state = None    # the sampler's state before the last draw
    trainer._drawn_for = 0        # the first step the current draw is for
    trainer._stall_from = 0       # the first step on points drawn inside the run (the stall window's start)
    trainer._grow = 1.0           # the driver's last points_factor, applied at the end of the step
    trainer._grown = False        # the points grew (pde_points, bc_points are not the ones given)
    trainer._check_inputs = True  # check_finite on the next step (new points, or a new fit)
    trainer.stop_requested = None
    trainer._stop_spent = False   # the request has stopped a fit (the next fit clears it)
    trainer.history = History()
    trainer.step = 0
    trainer.status = None         # how the last fit ended (None: none has ended yet)
    trainer._stop_reason = None
    trainer.diverged = False      # True when the last fit stopped on a non-finite loss
    trainer.train_time = 0.0
    trainer.last_error = trainer.last_val_loss = None
    trainer.last_gap = None       # validation loss / training loss at the last evaluation
    trainer.last_fit_loss = None  # the last step's loss at the points (StepInfo.fit_loss)
    trainer.driver = None         # the driver of the current (or last) fit
    trainer.step_times = {}       # the drivers' StepInfo.times, summed over the fit
    trainer._good = None          # the last good state: step, parameters, optimiser state (checkpointing.snapshot)
    trainer.checkpoints = Checkpoints()   # what was written, and what failed


def _step_stops(trainer: Trainer, step: int, info: StepInfo) -> float:
    """The stops taken after ``step`` (:meth:`Trainer.record`): the driver's, the stall stop,
    the evaluation every ``eval_every`` steps (target check), the checkpoint every
    ``checkpoint_every`` steps (non-finite parameters restore the last good state), the time
    limit and a requested stop (agreed by every rank). Returns the time the step ended."""
    h = trainer.history
    if info.stop:
        trainer.stop(RunStatus.OPTIMIZER_STOP, info.stop)
    stall = trainer.driver.stall if trainer.driver is not None else None
    if stall and not trainer.stop_reason:
        window, factor = stall
        if len(h.loss) > window and h.step[-window - 1] >= max(step - window, trainer._stall_from) \
                and h.loss[-1] > factor * h.loss[-window - 1]:
            trainer.stop(RunStatus.STALLED,
                         f"loss fell by less than a factor {factor:g} over {window} steps at step {step}")
    if trainer.eval_every and step % trainer.eval_every == 0 and (trainer.u_test is not None or trainer.val_points):
        t1 = trainer.clock()
        record_evaluation(trainer, step, trainer.train_time + t1 - trainer._t0 - trainer._t_aside)
        trainer._grow = trainer.driver.points_factor(trainer)
        trainer._t_aside += trainer.clock() - t1
    if trainer.checkpoint_every and step % trainer.checkpoint_every == 0 and not trainer.checkpoints.periodic(trainer):
        good = restore(trainer)
        trainer.diverged = True
        trainer.stop(RunStatus.DIVERGED, f"non-finite parameters at step {step}; "
                                         f"restored the last good state (step {good})")
    now = trainer.clock()
    trainer._step_ends = (trainer._step_ends + [now])[-STEPS_TIMED - 1:]
    late = out_of_time(trainer._step_ends, trainer._since, trainer._limit)
    requested = trainer.stop_requested is not None
    if trainer.comm is not None:   # every rank stops at the same step
        flags = np.array([late, requested], dtype=np.int64)
        trainer.comm.Allreduce(distributed._mpi().IN_PLACE, flags, op=distributed._mpi().MAX)
        late, requested = int(flags[0]), bool(flags[1])
        if requested and trainer.stop_requested is None:
            trainer.stop_requested = "stop requested on another rank"
    if late and not trainer.stop_reason:
        trainer.stop(RunStatus.TIME_LIMIT, f"time limit {trainer._limit:g} s reached at step {step}"
                     if late == 2 else
                     f"time limit {trainer._limit:g} s: stopped at step {step}, before a step that would end past it")
    if requested:
        trainer._stop_spent = True
        if not trainer.stop_reason:
            trainer.stop(RunStatus.INTERRUPTED, f"{trainer.stop_requested} at step {step}")
    return now




def _end_fit(trainer: Trainer) -> None:
    """What ends every fit (:meth:`Trainer._run`), inside its Ctrl-C handler: the check of the
    last update, the optimiser state into the model, the final evaluation and checkpoint."""
    # The last update is met by no loss evaluation: check it here (an lr that overflows the
    # dtype turns the parameters into Inf/NaN in one step).
    if not trainer.diverged and not params_finite(trainer):
        bad, good = trainer.step, restore(trainer)
        trainer.diverged = True
        trainer.stop(RunStatus.DIVERGED, f"non-finite parameters after step {bad}; "
                                         f"restored the last good state (step {good})")
    trainer.model.optimizer_state = optimizer_state(trainer)
    h = trainer.history
    if (trainer.u_test is not None or trainer.val_points) and (not h.eval_step or h.eval_step[-1] != trainer.step):
        record_evaluation(trainer, trainer.step, trainer.train_time)
    if trainer.checkpoint_path is not None and not trainer.diverged:
        trainer.save_checkpoint()
