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

import contextlib
import json
import math
import os
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from .. import _core, _device, _signature, distributed, memory
from .._checks import integer
from .._compat import UNSET, renamed
from ..problems.batch import TERMS, WEIGHTS, Batch
from ..models.model_protocol import trainable
from ..defaults import auto_weights, default_settings
from .status import RunStatus
from .drivers import AdamDriver, AdamSettings, Driver, LBFGSDriver, LBFGSSettings, LMDriver, StepInfo, \
    make_driver, mismatch, model_kind
from ..models.model import Model, _json_default
from ..optim import Adam, NonFiniteLoss, Schedule
from ..problems import Problem, TrainingSet
from ..problems.registry import recorded_options

__all__ = ["Trainer", "History", "default_settings", "auto_weights", "relative_l2"]

#: Under a time limit, the next step is taken to last as long as the longest of this many last
#: steps (a step that would end past the limit is not begun): one step's time alone misjudges
#: the next where they vary (Levenberg-Marquardt's trials, an evaluation every few steps).
STEPS_TIMED = 3


def _out_of_time(ends: Sequence[float], start: float, limit: float | None) -> int:
    """Whether a fit that began at ``start`` stops for its time ``limit`` after the step that
    ended at ``ends[-1]`` (``ends``: when the last steps ended, the fit's start first until
    there are :data:`STEPS_TIMED` of them): 2 when the limit has passed, 1 when the next step,
    as long as the longest of those (their evaluations and checkpoints included), would end
    past it, else 0 (a number, so that the ranks of a run agree on the largest)."""
    if limit is None:
        return 0
    elapsed = ends[-1] - start
    longest = max(b - a for a, b in zip(ends, ends[1:]))
    return 2 if elapsed >= limit else 1 if elapsed + longest > limit else 0


def _norm(a: np.ndarray) -> float:
    # Elementwise NumPy, not np.linalg.norm: that calls the BLAS, whose worker threads then spin
    # for about 0.1 s (OpenBLAS) on the cores the next training steps need.
    return float(np.sqrt(np.sum(np.abs(a) ** 2)))


def relative_l2(u: np.ndarray, u_exact: np.ndarray) -> float:
    """``||u - u_exact|| / ||u_exact||`` (absolute error when ``u_exact`` is zero)."""
    num = _norm(u - u_exact)
    den = _norm(u_exact)
    return num / den if den > 0 else num


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


class Trainer:
    """Trains ``model`` on ``problem``: the run loop around an optimiser driver.

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
    seconds; a step is not begun when the longest of the last :data:`STEPS_TIMED` steps would
    take the fit past it); ``checkpoint_every`` / ``checkpoint_path``; ``callbacks`` (``f(trainer, step)``
    after every step; may change ``model.params`` or set ``stop_reason``); ``progress``; ``seed``;
    ``stop_on_interrupt`` (the first Ctrl-C in the main thread stops after the current step, as
    :meth:`request_stop` does; a second raises KeyboardInterrupt); ``comm``; ``device``.
    How a fit ended: :attr:`status` (a :class:`~helmpinn.training.status.RunStatus`) and
    :attr:`stop_reason`; what the loop does on evaluations, over MPI, on a non-finite loss and
    on a GPU: the module docstring.
    """

    def __init__(self, problem: Problem, model: Model, *, lr: float | Schedule | None = None,
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
        model = trainable(model)   # a DecomposedModel gets the model protocol (helmpinn.models.model_protocol)
        # The device is checked before anything else; the model is moved once every argument is.
        target = model.device if device is None else _device.check(device, "Trainer")
        pde_points = renamed("Trainer", "pde_points", pde_points, "n_pde", n_pde)
        bc_points = renamed("Trainer", "bc_points", bc_points, "n_bc", n_bc)
        if model.in_dim != problem.dim:
            raise ValueError(f"model takes {model.in_dim}-D points but the problem is {problem.dim}-D")
        pde_points, bc_points, resample_every, val_points, eval_every, checkpoint_every, batch_size = (
            None if value is None else integer("Trainer", name, value, low=least)
            for name, value, least in (("pde_points", pde_points, 1), ("bc_points", bc_points, 0),
                                       ("resample_every", resample_every, 0), ("val_points", val_points, 0),
                                       ("eval_every", eval_every, 0), ("checkpoint_every", checkpoint_every, 0),
                                       ("batch_size", batch_size, 1)))
        if time_limit is not None and not (time_limit > 0 and math.isfinite(time_limit)):
            raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit}")
        if checkpoint_every and checkpoint_path is None:
            raise ValueError("checkpoint_every needs a checkpoint_path")
        if checkpoint_path is not None:
            _check_metadata(model)
        if comm is not None and target != "cpu":
            raise NotImplementedError(f"Trainer(comm=...): data-parallel training runs on the CPU "
                                      f"(the ranks reduce host gradients), not on {target}: "
                                      f"use a model on the CPU")
        defaults = default_settings(problem)
        self.lr = defaults["lr"] if lr is None else lr
        self.schedule = schedule
        self.betas = tuple(defaults["betas"] if betas is None else betas)
        adam = AdamDriver(AdamSettings(self.lr, self.schedule, self.betas), adam=optimizer)   # checks them
        model.to(target)
        self.problem = problem
        self.model = model
        self._adam = adam   # the driver of this Trainer's Adam fits, which owns its Adam
        self.pde_points = defaults["pde_points"] if pde_points is None else int(pde_points)
        self.bc_points = defaults["bc_points"] if bc_points is None else int(bc_points)
        self.sampling = sampling
        self.resample_every = int(resample_every)
        self.weights = {**auto_weights(problem), **dict(weights or {})}
        unknown = set(self.weights) - set(TERMS)
        if unknown:
            raise ValueError(f"weights: unknown terms {sorted(unknown)}; use {', '.join(map(repr, TERMS))}")
        self.train_fourier = bool(train_fourier)
        self.eval_every = int(eval_every)
        self.target_error = target_error
        self.target_val_loss = target_val_loss
        self.time_limit = time_limit
        self.clock = clock
        self.checkpoint_every = int(checkpoint_every)
        self.checkpoint_path = None if checkpoint_path is None else os.fspath(checkpoint_path)
        self.callbacks = list(callbacks)
        self.progress = progress
        self.log_every = max(int(log_every), 1)
        self.stop_on_interrupt = bool(stop_on_interrupt)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self._draw_state: dict[str, Any] | None = None  # the sampler's state before the last draw
        self._drawn_for = 0         # the first step the current draw is for
        self._stall_from = 0        # the first step on points drawn inside the run (the stall window's start)
        self._grow = 1.0            # the driver's last points_factor, applied at the end of the step
        self._grown = False         # the points grew (pde_points, bc_points are not the ones given)
        self._check_inputs = True  # check_finite on the next step (new points, or a new fit)
        self.stop_requested: str | None = None
        self._stop_spent = False    # the request has stopped a fit (the next fit clears it)
        self.comm, self.rank, self.check_every = comm, 0, max(int(check_every), 1)
        if comm is not None:
            self.rank, self._ranks = comm.Get_rank(), comm.Get_size()
            self.rng, self._shared_rng = distributed.rank_generators(seed, self.rank)
            self.progress = progress and self.rank == 0

        # One workspace and one gradient buffer for the whole run, where the model is.
        self.device = model.device
        self._batch_size = int(batch_size)
        own_loss = hasattr(model, "loss_function")   # a decomposed model: no core workspace of its own
        self.workspace = None if own_loss else \
            _core.Workspace(model.spec, batch_size, model.dtype.name, device=self.device)
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
        self.val_points = min(self.pde_points, 512) if val_points is None else int(val_points)
        self._val: tuple[Batch, Any, Any] | None = None   # validation points, workspace, gradient

        self.history = History()
        self.step = 0
        self.status: RunStatus | None = None   # how the last fit ended (None: none has ended yet)
        self._stop_reason: str | None = None
        self.diverged = False  # True when the last fit stopped on a non-finite loss
        self.train_time = 0.0
        self.last_error: float | None = None
        self.last_val_loss: float | None = None
        self.last_gap: float | None = None   # validation loss / training loss at the last evaluation
        self.driver: Driver | None = None      # the driver of the current (or last) fit
        self.step_times: dict[str, float] = {}  # the drivers' StepInfo.times, summed over the fit
        self._good: tuple[int, np.ndarray, dict[str, Any]] | None = None
        self.checkpoints = Checkpoints()   # what was written, and what failed
        if comm is not None and self._ranks > 1:   # before any draw: the same problem and model everywhere
            distributed.check_same_run(comm, problem, self.model)

    @property
    def n_pde(self) -> int:
        """Deprecated name of :attr:`pde_points`."""
        warnings.warn("Trainer.n_pde is deprecated, use Trainer.pde_points", DeprecationWarning,
                      stacklevel=2)
        return self.pde_points

    @property
    def n_bc(self) -> int:
        """Deprecated name of :attr:`bc_points` (``n_bc`` names the boundary normals elsewhere)."""
        warnings.warn("Trainer.n_bc is deprecated, use Trainer.bc_points (n_bc names the "
                      "boundary normals)", DeprecationWarning, stacklevel=2)
        return self.bc_points

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
        if self.u_test is None:
            return None
        err = None
        with distributed.collective(self.comm, "Trainer.evaluate"):
            if self.rank == 0:
                err = relative_l2(self.model.predict(self.x_test), self.u_test)
        if self.comm is not None:  # rank 0's, so that every rank takes the same decisions
            err = self.comm.bcast(err, root=0)
        self.last_error = err
        return err

    def validation_loss(self) -> float | None:
        """The loss (the training weights) on the validation points: ``val_points`` interior and
        up to 128 boundary points, drawn uniformly once from a generator of their own (the
        training points' generator is not touched); None with ``val_points=0``. Every rank
        holds all of them and computes the same value."""
        if not self.val_points:
            return None
        if callable(self._val):   # a model that computes its own loss
            self.last_val_loss = self._val(self.model.params)
            return self.last_val_loss
        if self._val is None:
            seed = [int(self.seed)] if isinstance(self.seed, (int, np.integer)) else []
            rng = np.random.default_rng(np.random.SeedSequence([*seed, 0x76616C]))   # "val"
            ts = self.problem.sample(self.val_points, min(self.bc_points, 128), rng, "uniform")
            if self.workspace is None:   # a model that computes its own loss (helmpinn.models.model_protocol)
                self._val = self.model.loss_function(ts, self.weights)
                return self.validation_loss()
            batch = ts.to_batch(self.model.dtype)
            if self.device != "cpu":
                batch = batch.to_device(self.device)
            # its own small workspace and gradient buffer: nothing of the training's is touched
            ws = _core.Workspace(self.model.spec, min(self._batch_size, self.val_points),
                                 self.model.dtype.name, device=self.device)
            self._val = (batch, ws, _device.zeros(self.model.num_params, self.model.dtype, self.device))
        batch, ws, grad = self._val
        loss = float(ws.value_and_grad(self.model.params, grad, batch=batch, **self._loss_kw))
        self.last_val_loss = loss
        return loss

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

    def _params_finite(self) -> bool:
        """Every parameter finite (on a GPU: checked on a host copy)."""
        return bool(np.all(np.isfinite(_device.to_host(self.model.params))))

    def _optimizer_state(self) -> dict[str, Any]:
        """The state a checkpoint stores: the driver's (else the Adam's), and the run's ``step``
        unless the driver keeps its own count under that name (Adam does)."""
        if self.driver is not None:
            state = self.driver.state_dict()
        else:
            state = self._adam.state_dict()
        return {"step": self.step, **state}

    def _snapshot(self) -> None:
        """Keeps the last good state on the host (parameters and optimiser state copied)."""
        state = self.driver.state_dict() if self.driver is not None else {}
        self._good = (self.step, self.model.params_host(),
                      {k: (v.copy() if isinstance(v, np.ndarray) else _device.to_host(v))
                       for k, v in state.items()})

    def _restore(self) -> int:
        step, params, state = self._good
        self.model.set_params(params)
        if self.driver is not None:
            self.driver.load_state_dict(state)
        self.step = step
        self.model.optimizer_state = self._optimizer_state()
        return step

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
        if not self._params_finite():
            return False
        self.checkpoints.write(self, os.fspath(path))
        self._snapshot()
        return True

    def _check_device(self) -> None:
        if self.model.device != self.device:
            raise RuntimeError(f"the model moved to {self.model.device} after this Trainer was made "
                               f"on {self.device}; make a new Trainer for it")

    # -- the optimisers -----------------------------------------------------------------------------
    def fit(self, steps: int, optimizer: str | Driver | None = None, *, time_limit: float | None = None,
            since: float | None = None) -> History:
        """Run ``steps`` steps (fewer on an early stop) of ``optimizer``: "adam" (None; the
        Trainer's Adam, kept across fits), "lbfgs", "lm" or a :class:`~helmpinn.training.drivers.Driver`.
        ``time_limit``: this fit's limit in seconds instead of the Trainer's, counted from
        ``since`` (a time of ``clock``: a run of several fits under one limit; None: the fit's
        start). Returns the history; :attr:`status` and :attr:`stop_reason` say how it ended."""
        optimizer = getattr(self.model, "default_optimizer", None) if optimizer is None else optimizer
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
        why = mismatch(model_kind(self.model), driver)
        if why:
            raise TypeError(f"optimizer {driver.name!r} {why} (the model is a {type(self.model).__name__})")
        if not self._params_finite():
            raise ValueError("the model's parameters contain NaN or Inf; cannot train from them")
        memory.check_trainer(self, driver)   # the fit's memory, before its points are drawn
        state = self.model.optimizer_state or {}
        resumed = not self.step and int(state.get("step", 0) or 0) > 0
        if resumed:   # a model loaded from a checkpoint: its run goes on, on its points
            self.step = int(state["step"])
            _resume_sampler(self)
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
        self._snapshot()
        self._last_step = self.step + steps
        with _interrupt_handler(self):  # also around the final checkpoint: Ctrl-C must not cut it
            self._t0 = self.clock()
            self._limit = self.time_limit if time_limit is None else time_limit
            self._since = self._t0 if since is None else since
            self._t_aside = 0.0          # evaluation time, not counted as training time
            self._pending, self._bar_at = 0, self._t0
            self._step_ends = [self._t0]   # when the last steps ended: the next step's duration
            self._bar = _Bar(steps, None if self._limit is None else max(self._limit - (self._t0 - self._since), 0.0),
                             self.progress)
            try:
                driver.run(self, steps)
            except NonFiniteLoss as exc:
                failed, good = self.step + 1, self._restore()
                self.diverged = True
                self.stop(RunStatus.DIVERGED, f"{exc} at step {failed}; restored the last good state (step {good})")
            finally:
                self.train_time += self.clock() - self._t0 - self._t_aside
                self._bar.update(self._pending, self.clock() - self._t0)
                self._bar.close()
            # The last update is met by no loss evaluation: check it here (an lr that overflows the
            # dtype turns the parameters into Inf/NaN in one step).
            if not self.diverged and not self._params_finite():
                bad, good = self.step, self._restore()
                self.diverged = True
                self.stop(RunStatus.DIVERGED, f"non-finite parameters after step {bad}; "
                                              f"restored the last good state (step {good})")
            self.model.optimizer_state = self._optimizer_state()
            h = self.history
            if (self.u_test is not None or self.val_points) and (not h.eval_step or h.eval_step[-1] != self.step):
                self._evaluate(self.step, self.train_time)
            if self.checkpoint_path is not None and not self.diverged:
                self.save_checkpoint()
        if self.status is None:
            self.status = RunStatus.STEPS_DONE
        if self.stop_reason and self.progress:
            print(f"helmpinn: {self.stop_reason}", file=sys.stderr)
        return self.history

    def _resample_due(self) -> bool:
        return bool(self.resample_every and self.step and self.step % self.resample_every == 0)

    def _evaluate(self, step: int, elapsed: float) -> None:
        """One evaluation into the history: the error (with an exact solution), the validation
        loss, the training time then; and the target check."""
        h = self.history
        h.eval_step.append(step)
        h.eval_error.append(self.evaluate())
        h.eval_time.append(elapsed)
        h.eval_val_loss.append(self.validation_loss())
        err, val = h.eval_error[-1], h.eval_val_loss[-1]
        loss = h.loss[-1] if h.step and h.step[-1] == step else None
        self.last_gap = val / loss if val is not None and loss and loss > 0 and math.isfinite(loss) else None
        if self.target_error is not None and err is not None and err < self.target_error:
            self.stop(RunStatus.TARGET_REACHED, f"target error {self.target_error:g} reached at step {step}")
        elif self.target_val_loss is not None and val is not None and val < self.target_val_loss:
            self.stop(RunStatus.TARGET_REACHED,
                      f"target validation loss {self.target_val_loss:g} reached at step {step}")

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
        if info.stop:
            self.stop(RunStatus.OPTIMIZER_STOP, info.stop)
        stall = self.driver.stall if self.driver is not None else None
        if stall and not self.stop_reason:
            window, factor = stall
            if len(h.loss) > window and h.step[-window - 1] >= max(step - window, self._stall_from) \
                    and h.loss[-1] > factor * h.loss[-window - 1]:
                self.stop(RunStatus.STALLED,
                          f"loss fell by less than a factor {factor:g} over {window} steps at step {step}")
        if self.eval_every and step % self.eval_every == 0 and (self.u_test is not None or self.val_points):
            t1 = self.clock()
            self._evaluate(step, self.train_time + t1 - self._t0 - self._t_aside)
            self._grow = self.driver.points_factor(self)
            self._t_aside += self.clock() - t1
        if self.checkpoint_every and step % self.checkpoint_every == 0 and not self.checkpoints.periodic(self):
            good = self._restore()
            self.diverged = True
            self.stop(RunStatus.DIVERGED, f"non-finite parameters at step {step}; "
                                          f"restored the last good state (step {good})")
        now = self.clock()
        self._step_ends = (self._step_ends + [now])[-STEPS_TIMED - 1:]
        out_of_time = _out_of_time(self._step_ends, self._since, self._limit)
        requested = self.stop_requested is not None
        if self.comm is not None:   # every rank stops at the same step
            flags = np.array([out_of_time, requested], dtype=np.int64)
            self.comm.Allreduce(distributed._mpi().IN_PLACE, flags, op=distributed._mpi().MAX)
            out_of_time, requested = int(flags[0]), bool(flags[1])
            if requested and self.stop_requested is None:
                self.stop_requested = "stop requested on another rank"
        if out_of_time and not self.stop_reason:
            self.stop(RunStatus.TIME_LIMIT, f"time limit {self._limit:g} s reached at step {step}"
                      if out_of_time == 2 else
                      f"time limit {self._limit:g} s: stopped at step {step}, before a step that would end past it")
        if requested:
            self._stop_spent = True
            if not self.stop_reason:
                self.stop(RunStatus.INTERRUPTED, f"{self.stop_requested} at step {step}")
        self._pending += 1
        if self.progress and (self._pending >= self.log_every or self.stop_reason or now - self._bar_at >= 0.5):
            self._bar.update(self._pending, now - self._t0, _bar_status(self, info))
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


def _resume_sampler(trainer: "Trainer") -> None:
    """Put the sampler back where a checkpoint's run drew its current points (so a resumed
    run trains on the same points); without a usable record, fresh points are drawn."""
    state = trainer.model.metadata.get("sampler")
    if not isinstance(state, dict) or state.get("bit_generator") != type(trainer.rng.bit_generator).__name__:
        return
    try:
        trainer.rng.bit_generator.state = state
    except (TypeError, ValueError, KeyError):
        return
    points = trainer.model.metadata.get("grown_points")
    if isinstance(points, (list, tuple)) and len(points) == 2 and all(
            isinstance(n, (int, np.integer)) and n > 0 for n in points):
        trainer.pde_points, trainer.bc_points = int(points[0]), int(points[1])   # grown during that run
        trainer._grown = True
    trainer.batch = None


@contextlib.contextmanager
def _interrupt_handler(trainer: "Trainer"):
    """With ``stop_on_interrupt`` (and in the main thread), the first SIGINT requests a stop
    after the current step; the second raises KeyboardInterrupt as usual."""
    if not trainer.stop_on_interrupt or threading.current_thread() is not threading.main_thread():
        yield
        return

    seen = [0]

    def on_sigint(signum, frame):
        seen[0] += 1
        if seen[0] > 1:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        trainer.request_stop("interrupted")
        print("\nhelmpinn: interrupted; stopping after the current step (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _bar_status(trainer: "Trainer", info: StepInfo) -> str:
    """The progress bar's text after a step: the loss, its terms, the driver's status, the last
    evaluation's error, validation loss and gap."""
    t = info.terms
    s = f"loss={info.loss:.3e}" + "".join(f" {k}={t[k]:.2e}" for k in TERMS if t.get(k))   # a term absent: 0
    if info.status:
        s += " " + info.status
    if trainer.last_error is not None:
        s += f" err={trainer.last_error:.2e}"
    if trainer.last_val_loss is not None:
        s += f" val={trainer.last_val_loss:.2e}"
    if trainer.last_gap is not None:
        s += f" gap={trainer.last_gap:.3g}"
    return s


class Checkpoints:
    """A Trainer's checkpoints: ``step``, of the last one written (None: none yet); ``failed``,
    why the last one could not be written (None once a later one is); the problem's
    ``fingerprint`` (:mod:`helmpinn._signature`, taken once), which a resumed run compares its
    problem with.

    A write that fails with an OSError is one line on stderr (rank 0) and the run goes on; under
    MPI every rank learns the outcome from rank 0, and any other exception there is raised on
    every rank."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.failed: str | None = None
        self.fingerprint: dict[str, Any] | None = None
        self._periodic = False

    def metadata(self, trainer: "Trainer") -> dict[str, Any]:
        """The checkpoint's metadata: the model's, the problem's record (its name, the options
        it is rebuilt with, those JSON cannot hold by repr: :func:`helmpinn.problems.registry.recorded_options`),
        the step, the sampler's state and the problem's fingerprint."""
        if self.fingerprint is None:
            self.fingerprint = _signature.record(trainer.problem) or {}
        options, by_repr = recorded_options(dict(getattr(trainer.problem, "options", None) or {}))
        meta = {**trainer.model.metadata, "problem": trainer.problem.name, "problem_options": options,
                "step": trainer.step, "last_error": trainer.last_error, "sampler": trainer._draw_state,
                "problem_signature": self.fingerprint}
        if by_repr:
            meta["problem_options_by_repr"] = by_repr
        if trainer._grown:   # the counts of the current draw, for a resumed run to draw it again
            meta["grown_points"] = [trainer.pde_points, trainer.bc_points]
        return meta

    def write(self, trainer: "Trainer", path: str) -> None:
        """Write the checkpoint (rank 0) and record the outcome on every rank."""
        failed, why = None, None
        if trainer.rank == 0:
            try:
                trainer.model.save(path, optimizer_state=trainer._optimizer_state(),
                                   metadata=self.metadata(trainer))
            except OSError as exc:   # the run goes on; the next checkpoint tries again
                why = exc.strerror or str(exc)
            except Exception as exc:
                if trainer.comm is None:
                    raise
                failed = exc
        if trainer.comm is not None:
            failed_anywhere, why = trainer.comm.bcast((failed is not None, why), root=0)
            if failed_anywhere:
                if failed is not None:
                    raise failed
                raise RuntimeError(f"rank 0 could not write the checkpoint {path!r}")
        if why is None:
            self.failed, self.step = None, trainer.step
            return
        kept = "no checkpoint of this run was written yet" if self.step is None else \
            f"{path} keeps step {self.step}"
        self.failed = f"could not write the checkpoint {path} at step {trainer.step} ({why}); {kept}"
        if trainer.rank == 0:
            going_on = "; training goes on and the next checkpoint tries again" if self._periodic else ""
            print(f"\nhelmpinn: {self.failed}{going_on}", file=sys.stderr, flush=True)

    def periodic(self, trainer: "Trainer") -> bool:
        """The checkpoint every ``checkpoint_every`` steps (a failed write is said to be retried)."""
        self._periodic = True
        try:
            return trainer.save_checkpoint()
        finally:
            self._periodic = False


def _check_metadata(model: Any) -> None:
    """A checkpoint's metadata must be writable: checked when the Trainer is made, so that
    no run fails at its first checkpoint (or its last) on a value JSON cannot hold."""
    try:
        json.dumps(model.metadata, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint_path: the model's metadata cannot be written to a checkpoint ({exc}); "
                         f"keep it to numbers, strings, lists and dicts") from None


class _Bar:
    """The progress bar of one fit (tqdm on stderr; nothing where ``enabled`` is false): over its
    ``steps``, or with a ``time_limit`` over those seconds (the steps, of at most ``steps``, then
    in the status), whichever the run will meet first being unknown: a step count with an ETA
    computed from it would promise the step cap."""

    def __init__(self, steps: int, time_limit: float | None, enabled: bool):
        self.steps, self.done, self.timed = steps, 0, time_limit is not None
        self.bar = None
        if enabled:
            from tqdm import tqdm

            if self.timed:
                self.bar = tqdm(total=float(time_limit), unit="s", mininterval=0.5, dynamic_ncols=True,
                                file=sys.stderr, bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
            else:
                self.bar = tqdm(total=steps, unit="step", mininterval=0.5, dynamic_ncols=True, file=sys.stderr)

    def update(self, steps: int, elapsed: float, status: str | None = None) -> None:
        """``steps`` more steps done, ``elapsed`` seconds since the fit began; ``status`` the
        postfix (None: unchanged)."""
        self.done += steps
        if self.bar is None:
            return
        if self.timed:
            self.bar.update(max(min(elapsed, self.bar.total) - self.bar.n, 0.0))
            if status is not None:
                status = f"step {self.done}/{self.steps} {status}"
        else:
            self.bar.update(steps)
        if status is not None:
            self.bar.set_postfix_str(status, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
