"""Training: :class:`Trainer` runs Adam (fused, in C++) on one Workspace, with a progress bar,
loss history, periodic error against the exact solution, early stop on a target error,
resampling, checkpoints and a clean stop on a non-finite loss; :meth:`Trainer.polish` finishes
with L-BFGS. :func:`default_settings` picks model and training settings from a problem's
wavenumber and dimension (the CLI's defaults).
"""
from __future__ import annotations

import contextlib
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

from . import _core, _device, distributed
from ._compat import UNSET, renamed
from .batch import Batch
from .model import Model
from .optim import Adam, Schedule, lbfgs, make_schedule
from .problems import Problem, TrainingSet

__all__ = ["Trainer", "History", "default_settings", "auto_weights", "relative_l2"]


def _norm(a: np.ndarray) -> float:
    # Elementwise NumPy, not np.linalg.norm: that calls the BLAS, whose worker threads then spin
    # for about 0.1 s (OpenBLAS) on the cores the next training steps need.
    return float(np.sqrt(np.sum(np.abs(a) ** 2)))


def relative_l2(u: np.ndarray, u_exact: np.ndarray) -> float:
    """``||u - u_exact|| / ||u_exact||`` (absolute error when ``u_exact`` is zero)."""
    num = _norm(u - u_exact)
    den = _norm(u_exact)
    return num / den if den > 0 else num


def auto_weights(problem: Problem) -> dict[str, float]:
    """Default loss weights from the problem's largest wavenumber k (at least 1):
    ``pde = 1/k²``, ``data = 100``, ``bc = 100/k²``.

    A Robin residual of an error e is about k e, so the bc term is scaled by 1/k² to sit with
    the data term. The PDE term, whose residual is about k² e, is scaled by only 1/k², which
    weights interior errors k²/100 times more than boundary errors. Measured on plane1d (k = 20)
    and dirichlet2d (n = 2), this converges much faster than putting every term on the scale of
    the squared error (pde = 1/k⁴), with which Adam stalls far from the solution. A problem's
    ``hints["weights"]`` replace any of them.
    """
    k = max(problem.wavenumber, 1.0)
    weights = {"pde": 1.0 / k**2, "data": 100.0, "bc": 100.0 / k**2}
    return _apply_hints(weights, getattr(problem, "hints", {}).get("weights"), "weights")


def _apply_hints(settings: dict[str, Any], hints: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """``settings`` with a problem's hints for them applied (unknown keys raise ValueError)."""
    unknown = set(hints or {}) - set(settings)
    if unknown:
        raise ValueError(f"problem hints[{what!r}]: unknown keys {sorted(unknown)}; known: {sorted(settings)}")
    return {**settings, **dict(hints or {})}


def default_settings(problem: Problem) -> dict[str, Any]:
    """Model and training settings for ``problem`` (what ``helmpinn train`` uses by default).

    Fourier frequencies: B ~ N(0, sigma²) per entry with ``sigma = k / (2π sqrt(d))``, so that
    the features' angular frequencies ``2π|B|`` have a root mean square of k, the problem's
    largest wavenumber, in any dimension d. A problem's ``hints["adam"]`` replace any setting.
    """
    k = max(problem.wavenumber, 1.0)
    d = problem.dim
    settings: dict[str, Any] = {
        "ff_dim": 32,
        "hidden": 64,
        "layers": 2,
        "sigma": k / (2 * math.pi * math.sqrt(d)),
        "dtype": "float32",
        "steps": {1: 2000, 2: 2000}.get(d, 2000),
        "lr": 1e-2,
        "schedule": "cosine",
        "betas": (0.9, 0.99),
        "pde_points": {1: 512, 2: 2048}.get(d, 4096),
        "bc_points": {1: 2, 2: 256}.get(d, 768),
        "sampling": "sobol",
        "resample_every": 100,
        "eval_every": 100,
        "weights": auto_weights(problem),
        "lbfgs": 0,
    }
    return _apply_hints(settings, getattr(problem, "hints", {}).get("adam"), "adam")


@dataclass
class History:
    """Per-step losses (total weighted, and each unweighted term) and periodic errors."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    pde: list[float] = field(default_factory=list)
    data: list[float] = field(default_factory=list)
    bc: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    eval_error: list[float] = field(default_factory=list)
    eval_time: list[float] = field(default_factory=list)

    def as_dict(self) -> dict[str, list]:
        return {k: list(v) for k, v in self.__dict__.items()}


class Trainer:
    """Trains ``model`` on ``problem``.

    Parameters (all keyword; None means the value of :func:`default_settings`): ``lr`` (peak
    learning rate or a :class:`~helmpinn.optim.Schedule`), ``schedule``
    ("constant", "exponential", "cosine"; used when ``lr`` is a number), ``betas`` (Adam's; the
    default β2 = 0.99 adapts faster than the usual 0.999, which measurably helps the slowly
    converging near-resonant modes of Helmholtz problems), ``optimizer`` (an
    existing :class:`~helmpinn.optim.Adam` to continue with), ``pde_points`` / ``bc_points``
    (interior / boundary points per draw, as the CLI's ``--points`` / ``--bc-points``; the old
    names ``n_pde`` / ``n_bc`` still work, with a DeprecationWarning), ``sampling`` ("uniform",
    "sobol", "halton"), ``resample_every`` (steps between fresh draws, 0 = never), ``weights`` (dict with "pde", "data", "bc"; missing
    entries from :func:`auto_weights`), ``train_fourier`` (False freezes B), ``batch_size``
    (Workspace chunk), ``eval_every`` (steps between errors on the test grid, 0 = only at the
    end), ``n_test`` (test grid points per dimension), ``target_error`` (stop once the relative
    L2 error is below it), ``checkpoint_every`` / ``checkpoint_path`` (save the model and the
    optimiser state every K steps and at the end), ``callbacks`` (``f(trainer, step)`` after
    every step: may change ``trainer.model.params``, e.g. to inject a fault, or set
    ``trainer.stop_reason`` to stop), ``progress`` (tqdm bar), ``seed``, ``stop_on_interrupt``
    (Ctrl-C, i.e. SIGINT, during :meth:`fit` stops after the current step, as
    :meth:`request_stop` does, instead of raising KeyboardInterrupt; a second Ctrl-C raises it;
    only from the main thread).

    ``comm`` (an mpi4py communicator) trains data-parallel over its ranks: each rank draws its
    own share of the ``pde_points`` / ``bc_points`` (:func:`helmpinn.distributed.sample_shard`),
    the loss and gradient are those of the union (:func:`helmpinn.distributed.value_and_grad`),
    every rank takes the same step, and every ``check_every`` steps the parameters are checked
    to be the same on all ranks. Only rank 0 shows progress and writes checkpoints. Every rank
    must make the same calls (fit, evaluate, save_checkpoint) in the same order.

    A non-finite loss (or non-finite parameters at a checkpoint or after the last step) stops
    training cleanly: the model and optimiser go back to the last good state (the last
    checkpoint, or the start of fit), the checkpoint file is left untouched, ``diverged`` is
    True and ``stop_reason`` says what happened. The first step of every fit and the first
    step on freshly drawn points check the inputs (``check_finite``), so NaN or Inf coming from
    the problem raises ValueError naming the array.

    The points of the current draw are ``training_set`` (float64 / complex) and ``batch``, the
    :class:`~helmpinn.Batch` the core takes: converted once per draw, then the same object at
    every step of Adam, L-BFGS (:meth:`polish`) and LM (:meth:`fit_lm`); each step's loss comes
    back with its breakdown (``history.pde``, ``.data``, ``.bc``) from that one call.

    A checkpoint also records the state of the point sampler; a Trainer given a model loaded from
    a checkpoint continues it: step count, optimiser state, learning-rate schedule (spanning the
    steps already taken plus those of :meth:`fit`) and the same training points.

    The Trainer runs where the model is (``device``: None follows the model; "cuda" / "cuda:N"
    / "cpu" first moves the model there, in place, with :meth:`Model.to`). On a GPU the
    workspace is a CUDA Workspace; every draw of points is copied once into device buffers the
    library owns (``batch`` holds :class:`helmpinn.DeviceArray`s); the parameters, ``grad`` and
    Adam's ``m`` and ``v`` stay in device memory and Adam steps there, so that only the loss and
    its three terms come back each step. Copies to the host happen only at the start and end of
    :meth:`fit` (the finiteness checks and the last good state), at checkpoints and error
    evaluations, and when a non-finite loss restores the last good state. :meth:`polish` copies
    the parameters to the host, runs L-BFGS there (SciPy, float64, as on the CPU) and copies the
    result back; :meth:`fit_lm` and ``comm`` are CPU only (NotImplementedError on a GPU).
    """

    def __init__(self, problem: Problem, model: Model, *, lr: float | Schedule | None = None,
                 schedule: str = "cosine", betas: tuple[float, float] | None = None,
                 optimizer: Adam | None = None,
                 pde_points: int | None = None, bc_points: int | None = None, sampling: str = "sobol",
                 resample_every: int = 100, weights: Mapping[str, float] | None = None,
                 train_fourier: bool = True, batch_size: int = 4096, eval_every: int = 100,
                 n_test: int | None = None, target_error: float | None = None,
                 checkpoint_every: int = 0, checkpoint_path: str | os.PathLike | None = None,
                 callbacks: Sequence[Callable[["Trainer", int], Any]] = (), progress: bool = True,
                 seed: int = 0, log_every: int = 25, stop_on_interrupt: bool = False,
                 comm: Any = None, check_every: int = 100, device: str | None = None,
                 n_pde: int = UNSET, n_bc: int = UNSET):
        # The device is checked before anything else; the model is moved once every argument is.
        target = model.device if device is None else _device.check(device, "Trainer")
        pde_points = renamed("Trainer", "pde_points", pde_points, "n_pde", n_pde)
        bc_points = renamed("Trainer", "bc_points", bc_points, "n_bc", n_bc)
        if model.in_dim != problem.dim:
            raise ValueError(f"model takes {model.in_dim}-D points but the problem is {problem.dim}-D")
        for name, value, least in (("pde_points", pde_points, 1), ("bc_points", bc_points, 0),
                                   ("resample_every", resample_every, 0),
                                   ("eval_every", eval_every, 0), ("checkpoint_every", checkpoint_every, 0)):
            if value is not None and int(value) < least:
                raise ValueError(f"{name} must be >= {least}, got {value}")
        if checkpoint_every and checkpoint_path is None:
            raise ValueError("checkpoint_every needs a checkpoint_path")
        if comm is not None and target != "cpu":
            raise NotImplementedError(f"Trainer(comm=...): data-parallel training runs on the CPU "
                                      f"(the ranks reduce host gradients), not on {target}: "
                                      f"use a model on the CPU")
        model.to(target)
        defaults = default_settings(problem)
        self.problem = problem
        self.model = model
        self.lr = defaults["lr"] if lr is None else lr
        self.schedule = schedule
        self.betas = tuple(defaults["betas"] if betas is None else betas)
        self.optimizer = optimizer
        self.pde_points = defaults["pde_points"] if pde_points is None else int(pde_points)
        self.bc_points = defaults["bc_points"] if bc_points is None else int(bc_points)
        self.sampling = sampling
        self.resample_every = int(resample_every)
        self.weights = {**auto_weights(problem), **dict(weights or {})}
        unknown = set(self.weights) - {"pde", "data", "bc"}
        if unknown:
            raise ValueError(f"weights: unknown terms {sorted(unknown)}; use 'pde', 'data', 'bc'")
        self.train_fourier = bool(train_fourier)
        self.eval_every = int(eval_every)
        self.target_error = target_error
        self.checkpoint_every = int(checkpoint_every)
        self.checkpoint_path = None if checkpoint_path is None else os.fspath(checkpoint_path)
        self.callbacks = list(callbacks)
        self.progress = progress
        self.log_every = max(int(log_every), 1)
        self.stop_on_interrupt = bool(stop_on_interrupt)
        self.rng = np.random.default_rng(seed)
        self._draw_state: dict[str, Any] | None = None  # the sampler's state before the last draw
        self._check_inputs = True  # check_finite on the next step (new points, or a new fit)
        self.stop_requested: str | None = None
        self.comm, self.rank, self.check_every = comm, 0, max(int(check_every), 1)
        if comm is not None:
            self.rank, self._ranks = comm.Get_rank(), comm.Get_size()
            self.rng, self._shared_rng = distributed.rank_generators(seed, self.rank)
            self.progress = progress and self.rank == 0

        # One workspace and one gradient buffer for the whole run, where the model is.
        self.device = model.device
        self.workspace = _core.Workspace(model.spec, batch_size, model.dtype.name, device=self.device)
        self.grad = _device.zeros(model.num_params, model.dtype, self.device)
        self._loss_kw = dict(w_pde=float(self.weights["pde"]), w_data=float(self.weights["data"]),
                             w_bc=float(self.weights["bc"]), train_fourier=self.train_fourier)
        self.training_set: TrainingSet | None = None
        # The current draw's points as the core takes them: converted once per draw (resample),
        # then the same object at every step.
        self.batch: Batch | None = None

        self.x_test: np.ndarray | None = None
        self.u_test: np.ndarray | None = None
        if problem.exact is not None:
            self.x_test = problem.test_points(n_test)
            self.u_test = problem.exact_at(self.x_test)

        self.history = History()
        self.step = 0
        self.stop_reason: str | None = None
        self.diverged = False  # True when the last fit stopped on a non-finite loss
        self.train_time = 0.0
        self.last_error: float | None = None
        self._good: tuple[int, np.ndarray, dict[str, Any]] | None = None

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

    # -- pieces -------------------------------------------------------------------------------
    def resample(self) -> None:
        """Draw fresh collocation points."""
        self._draw_state = self.rng.bit_generator.state
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
        self._check_inputs = True

    def request_stop(self, reason: str = "stop requested") -> None:
        """Stop :meth:`fit` after the current step (safe from a signal handler or callback);
        the run then ends as any other: evaluation, checkpoint, ``stop_reason``."""
        self.stop_requested = reason

    def evaluate(self) -> float | None:
        """Relative L2 error on the test grid (None without an exact solution)."""
        if self.u_test is None:
            return None
        err = relative_l2(self.model.predict(self.x_test), self.u_test) if self.rank == 0 else None
        if self.comm is not None:  # rank 0's, so that every rank takes the same decisions
            err = self.comm.bcast(err, root=0)
        self.last_error = err
        return err

    def _params_finite(self) -> bool:
        """Every parameter finite (on a GPU: checked on a host copy)."""
        return bool(np.all(np.isfinite(_device.to_host(self.model.params))))

    def _snapshot(self) -> None:
        """Keeps the last good state on the host (parameters and optimiser state copied)."""
        state = self.optimizer.state_dict() if self.optimizer else {}
        self._good = (self.step, self.model.params_host(),
                      {k: (v.copy() if isinstance(v, np.ndarray) else _device.to_host(v))
                       for k, v in state.items()})

    def _restore(self) -> int:
        step, params, state = self._good
        self.model.set_params(params)
        if self.optimizer is not None and state:
            self.optimizer.load_state_dict(state)
        self.model.optimizer_state = self.optimizer.state_dict() if self.optimizer else {}
        self.step = step
        return step

    def save_checkpoint(self, path: str | os.PathLike | None = None) -> bool:
        """Save model + optimiser state (only if every parameter is finite); returns success."""
        path = path or self.checkpoint_path
        if path is None:
            raise ValueError("no checkpoint path")
        if not self._params_finite():
            return False
        meta = {**self.model.metadata, "step": self.step, "problem": self.problem.name,
                "problem_options": self.problem.options, "last_error": self.last_error,
                "sampler": self._draw_state}
        failed = None
        if self.rank == 0:
            try:
                self.model.save(path, optimizer_state=self.optimizer.state_dict() if self.optimizer else {},
                                metadata=meta)
            except Exception as exc:
                if self.comm is None:
                    raise
                failed = exc
        if self.comm is not None and self.comm.bcast(failed is not None, root=0):
            if failed is not None:
                raise failed
            raise RuntimeError(f"rank 0 could not write the checkpoint {os.fspath(path)!r}")
        self._snapshot()
        return True

    def _make_optimizer(self, steps: int) -> Adam:
        """Adam over the model's parameters; continues from the model's optimiser state (a
        loaded checkpoint) when it has one of the right shape, the schedule then spanning the
        steps already taken plus ``steps``."""
        state = self.model.optimizer_state
        m = state.get("m") if state else None
        m = m if m is None or _device.is_device_array(m) else np.asarray(m)
        resume = m is not None and tuple(m.shape) == (self.model.num_params,) \
            and m.dtype == self.model.dtype
        done = int(state.get("step", 0)) if resume else 0
        lr = self.lr if isinstance(self.lr, Schedule) else make_schedule(self.schedule, self.lr, done + steps)
        opt = Adam(self.model.params, lr=lr, betas=self.betas)
        if resume:
            opt.load_state_dict(state)
        return opt

    def _resume_sampler(self) -> None:
        """Put the sampler back where a checkpoint's run drew its current points (so a resumed
        run trains on the same points); without a usable record, fresh points are drawn."""
        state = self.model.metadata.get("sampler")
        if not isinstance(state, dict) or state.get("bit_generator") != type(self.rng.bit_generator).__name__:
            return
        try:
            self.rng.bit_generator.state = state
        except (TypeError, ValueError, KeyError):
            return
        self.batch = None

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self, steps: int) -> History:
        """Run ``steps`` Adam steps (fewer on early stop); returns the history."""
        steps = int(steps)
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        self._check_device()
        if not self._params_finite():
            raise ValueError("the model's parameters contain NaN or Inf; cannot train from them")
        if self.optimizer is not None and getattr(self.optimizer, "device", "cpu") != self.device:
            raise ValueError(f"optimizer: its state is on {self.optimizer.device} but the model is "
                             f"on {self.device}")
        if self.optimizer is None:
            self.optimizer = self._make_optimizer(steps)
            if self.optimizer.step_count:  # a model loaded from a checkpoint goes on counting
                self.step = self.step or self.optimizer.step_count
                self._resume_sampler()
        h = self.history
        self.stop_reason = None
        self.diverged = False
        self.stop_requested = None
        if self.training_set is None:
            self.resample()
        self._check_inputs = True
        self._snapshot()
        with self._interrupt_handler():  # also around the final checkpoint: Ctrl-C must not cut it
            self._loop(steps)
            if self.u_test is not None and (not h.eval_step or h.eval_step[-1] != self.step):
                err = self.evaluate()
                h.eval_step.append(self.step)
                h.eval_error.append(err)
                h.eval_time.append(self.train_time)
            if self.checkpoint_path is not None and not self.diverged:
                self.save_checkpoint()
        if self.stop_reason and self.progress:
            print(f"helmpinn: {self.stop_reason}", file=sys.stderr)
        return h

    def _loop(self, steps: int) -> None:
        opt, ws, params, grad = self.optimizer, self.workspace, self.model.params, self.grad
        h = self.history
        pbar = _progress_bar(steps, self.progress)
        t0 = time.perf_counter()
        pending = 0
        try:
            for _ in range(steps):
                step = self.step + 1
                if self.resample_every and self.step and self.step % self.resample_every == 0:
                    self.resample()
                lr = opt.lr
                loss, terms = self._value_and_grad(step)
                if not math.isfinite(loss):
                    good = self._restore()
                    self.diverged = True
                    self.stop_reason = (f"non-finite loss ({loss}) at step {step}; "
                                        f"restored the last good state (step {good})")
                    break
                h.step.append(step)
                h.loss.append(loss)
                h.pde.append(terms["pde"])
                h.data.append(terms["data"])
                h.bc.append(terms["bc"])
                h.lr.append(lr)
                opt.step(params, grad)
                self.step = step
                for cb in self.callbacks:
                    cb(self, step)
                if self.comm is not None and step % self.check_every == 0:
                    distributed.check_replicas(self.comm, params, step)

                self._after_step(step, self.train_time + time.perf_counter() - t0)
                pending += 1
                if pending >= self.log_every or self.stop_reason:
                    pbar.update(pending)
                    pending = 0
                    pbar.set_postfix_str(self._status(loss, terms), refresh=False)
                if self.stop_reason:
                    break
        finally:
            self.train_time += time.perf_counter() - t0
            pbar.update(pending)
            pbar.close()
        # The last update is met by no loss evaluation: check it here (an lr that overflows the
        # dtype turns the parameters into Inf/NaN in one step).
        if not self.diverged and not self._params_finite():
            bad, good = self.step, self._restore()
            self.diverged = True
            self.stop_reason = (f"non-finite parameters after step {bad}; "
                                f"restored the last good state (step {good})")
        self.model.optimizer_state = opt.state_dict()

    def _after_step(self, step: int, elapsed: float) -> float:
        """What follows every optimiser step (Adam's and LM's alike): the error every
        ``eval_every`` steps (recorded at training time ``elapsed``) and the target check, the
        checkpoint every ``checkpoint_every`` steps (a non-finite one restores the last good
        state), and a requested stop. Returns the seconds the evaluation took."""
        took = 0.0
        if self.eval_every and step % self.eval_every == 0 and self.u_test is not None:
            t1 = time.perf_counter()
            err = self.evaluate()
            h = self.history
            h.eval_step.append(step)
            h.eval_error.append(err)
            h.eval_time.append(elapsed)
            took = time.perf_counter() - t1
            if self.target_error is not None and err < self.target_error:
                self.stop_reason = f"target error {self.target_error:g} reached at step {step}"
        if self.checkpoint_every and step % self.checkpoint_every == 0:
            if not self.save_checkpoint():
                good = self._restore()
                self.diverged = True
                self.stop_reason = (f"non-finite parameters at step {step}; "
                                    f"restored the last good state (step {good})")
        if self.stop_requested and not self.stop_reason:
            self.stop_reason = f"{self.stop_requested} at step {step}"
        return took

    def _check_device(self) -> None:
        if self.model.device != self.device:
            raise RuntimeError(f"the model moved to {self.model.device} after this Trainer was made "
                               f"on {self.device}; make a new Trainer for it")

    def _value_and_grad(self, step: int) -> tuple[float, dict[str, float]]:
        """The loss, its terms and the gradient on the current points (of the union of every
        rank's points with ``comm``); the first step on new points (or of a fit) asks the core to
        check every input for NaN/Inf, so bad data is named, not trained on."""
        kw = dict(self._loss_kw, check_finite=self._check_inputs)
        try:
            if self.comm is None:
                b = self.workspace.value_and_grad(self.model.params, self.grad, breakdown=True,
                                                  batch=self.batch, **kw)
                terms = {"total": b.total, "pde": b.pde, "data": b.data, "bc": b.bc}
            else:
                terms = distributed.value_and_grad(self.workspace, self.comm, self.model.params,
                                                   self.grad, batch=self.batch, breakdown=True, **kw)
        except (ValueError, FloatingPointError) as exc:
            if not self._check_inputs:
                raise
            raise ValueError(f"step {step}: the training data drawn from problem {self.problem.name!r} "
                             f"are not finite: {exc}") from exc
        self._check_inputs = False
        return terms["total"], terms

    @contextlib.contextmanager
    def _interrupt_handler(self):
        """With ``stop_on_interrupt`` (and in the main thread), the first SIGINT requests a stop
        after the current step; the second raises KeyboardInterrupt as usual."""
        if not self.stop_on_interrupt or threading.current_thread() is not threading.main_thread():
            yield
            return

        seen = [0]

        def on_sigint(signum, frame):
            seen[0] += 1
            if seen[0] > 1:
                signal.signal(signal.SIGINT, previous)
                raise KeyboardInterrupt
            self.request_stop("interrupted")
            print("\nhelmpinn: interrupted; stopping after the current step (Ctrl-C again to abort)",
                  file=sys.stderr, flush=True)

        previous = signal.signal(signal.SIGINT, on_sigint)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, previous)

    def _status(self, loss: float, terms: Mapping[str, float]) -> str:
        s = f"loss={loss:.3e} pde={terms['pde']:.2e} data={terms['data']:.2e} bc={terms['bc']:.2e}"
        if self.last_error is not None:
            s += f" err={self.last_error:.2e}"
        return s

    def polish(self, maxiter: int, batch_size: int = 4096) -> dict[str, Any]:
        """L-BFGS (SciPy, float64) on the current points; the model keeps the best point found.

        Every ``eval_every`` iterations the error is recorded in the history (at the current
        step), and the polish stops early once it is below ``target_error``. Returns a summary
        with the loss and error before and after. L-BFGS runs on the CPU: a model on a GPU is
        copied to the host (with the current points, as they are in the model's dtype) and the
        result copied back.
        """
        if self.comm is not None and self.comm.Get_size() > 1:
            raise NotImplementedError("polish: L-BFGS runs on one process; with several ranks "
                                      "each would fit only its own points")
        self._check_device()
        if self.batch is None:
            self.resample()
        err_before = self.evaluate()
        t_start = self.train_time
        t0 = time.perf_counter()
        probe = Model(self.model.spec, self.model.params_host())   # the CPU evaluates the iterates
        h = self.history

        def on_iteration(it: int, loss: float, theta: np.ndarray) -> bool:
            if self.u_test is None or not self.eval_every or it % max(self.eval_every // 4, 1):
                return False
            probe.params[...] = theta
            err = relative_l2(probe.predict(self.x_test), self.u_test)
            h.eval_step.append(self.step)
            h.eval_error.append(err)
            h.eval_time.append(t_start + time.perf_counter() - t0)
            return self.target_error is not None and err < self.target_error

        on_host = self.device == "cpu"
        theta = self.model.params if on_host else self.model.params_host()
        res = lbfgs(theta, self.model.spec, self.batch if on_host else self.batch.to_host(), maxiter,
                    weights=self.weights, train_fourier=self.train_fourier, batch_size=batch_size,
                    callback=on_iteration)
        if not on_host:
            self.model.set_params(theta)
        self.train_time = t_start + time.perf_counter() - t0
        err_after = self.evaluate()
        if self.u_test is not None:
            h.eval_step.append(self.step)
            h.eval_error.append(err_after)
            h.eval_time.append(self.train_time)
        return {"iterations": res.iterations, "evaluations": res.evaluations, "wall_s": res.wall_s,
                "loss_before": res.loss_before, "loss_after": res.loss_after,
                "error_before": err_before, "error_after": err_after, "message": res.message}

    # -- Levenberg-Marquardt ------------------------------------------------------------------------
    def fit_lm(self, iterations: int, *, solver: str = "auto", damping: str = "identity",
               update: str = "fixed", lam: float = 1e-3, max_trials: int = 10, stall_window: int = 10,
               stall_factor: float = 0.99, blas_threads: int | str | None = "auto", **lm_options: Any) -> History:
        """Run up to ``iterations`` Levenberg-Marquardt steps (:mod:`helmpinn.lm`) on the
        current points; returns the history.

        A step is one linearisation and up to ``max_trials`` damped trials; the history gets one
        entry per step (``lr`` holds the damping λ). Points are redrawn every ``resample_every``
        steps (0 keeps them, LM's usual choice). Stops early on ``target_error``, when the loss
        fell by less than a factor ``stall_factor`` over the last ``stall_window`` steps, when
        no step lowers the loss even at the largest damping, or on :meth:`request_stop` (and
        Ctrl-C with ``stop_on_interrupt``). Checkpoints (``checkpoint_every``, and at the end)
        store λ with the model, and a model loaded from such a checkpoint continues from it, on
        the same points. A non-finite loss stops cleanly as in :meth:`fit`. The time spent on
        error evaluations is not counted in ``train_time``. With ``comm`` every rank keeps its own
        points and JᵀJ and Jᵀr are summed over the ranks (:class:`helmpinn.lm.LevenbergMarquardt`),
        so every rank takes the step one process would take on the union of the points.
        """
        from .lm import CoreResiduals, LevenbergMarquardt, NonFiniteLoss

        iterations = int(iterations)
        if iterations < 0:
            raise ValueError(f"iterations must be >= 0, got {iterations}")
        if self.device != "cpu":
            raise NotImplementedError(
                f"fit_lm: Levenberg-Marquardt runs on the CPU (its Jacobian, JᵀJ and solves are "
                f"host arrays), but this Trainer's model is on {self.device}; train it with "
                f"Trainer(problem, model.to('cpu')), or use fit() / polish() on the GPU")
        if int(stall_window) < 1 or not 0 < stall_factor <= 1:
            raise ValueError(f"need stall_window >= 1 and 0 < stall_factor <= 1, got {stall_window}, {stall_factor}")
        if not np.all(np.isfinite(self.model.params)):
            raise ValueError("the model's parameters contain NaN or Inf; cannot train from them")
        state = self.model.optimizer_state
        resume = bool(state) and "lm_lambda" in state
        if resume and not self.step:
            self._resume_sampler()   # a loaded checkpoint's run goes on with its points
        if self.training_set is None or self.batch is None:
            self.resample()
        make_res = lambda: CoreResiduals(self.workspace, self.batch, self.weights,  # noqa: E731
                                         train_fourier=self.train_fourier)
        lm = LevenbergMarquardt(make_res(), solver=solver, damping=damping, update=update, lam=lam,
                                max_trials=max_trials, blas_threads=blas_threads, comm=self.comm,
                                **lm_options)
        if resume:
            lm.load_state_dict(state)
            self.step = self.step or int(state.get("step", lm.steps))
        previous, self.optimizer = self.optimizer, _LMState(lm, self)   # checkpoints save λ and the step
        self.lm = lm
        h = self.history
        self.stop_reason = None
        self.diverged = False
        self.stop_requested = None
        self._snapshot()
        self.lm_times = {"jacobian": 0.0, "jtj": 0.0, "solve": 0.0, "trial": 0.0}
        try:
            with self._interrupt_handler():
                self._lm_loop(lm, iterations, make_res, stall_window, stall_factor)
                self.model.optimizer_state = self.optimizer.state_dict()
                if self.u_test is not None and (not h.eval_step or h.eval_step[-1] != self.step):
                    err = self.evaluate()
                    h.eval_step.append(self.step)
                    h.eval_error.append(err)
                    h.eval_time.append(self.train_time)
                if self.checkpoint_path is not None and not self.diverged:
                    self.save_checkpoint()
        finally:
            self.optimizer = previous
        if self.stop_reason and self.progress:
            print(f"helmpinn: {self.stop_reason}", file=sys.stderr)
        return h

    def _lm_loop(self, lm: Any, iterations: int, make_res: Callable[[], Any], stall_window: int,
                 stall_factor: float) -> None:
        from .lm import NonFiniteLoss

        params, h = self.model.params, self.history
        pbar = _progress_bar(iterations, self.progress)
        t0 = time.perf_counter()
        t_eval = 0.0
        try:
            for _ in range(iterations):
                step = self.step + 1
                if self.resample_every and self.step and self.step % self.resample_every == 0:
                    self.resample()
                    lm.set_residuals(make_res())
                try:
                    info = lm.step(params)
                except NonFiniteLoss as exc:
                    good = self._restore()
                    self.diverged = True
                    self.stop_reason = f"{exc} at step {step}; restored the last good state (step {good})"
                    break
                for key, value in info.times.items():
                    self.lm_times[key] += value
                h.step.append(step)
                h.loss.append(info.new_loss)
                h.lr.append(info.lam)
                # the unweighted term means from the residuals (PDE, data, bc rows, in order)
                r2, row, sums = info.residuals ** 2, 0, np.zeros(3)
                for i, n in enumerate(self.batch.sizes.values()):
                    n *= 2
                    sums[i] = np.sum(r2[row:row + n])
                    row += n
                if self.comm is not None:   # the ranks' rows together
                    sums = self.comm.allreduce(sums)
                for term, s in zip(("pde", "data", "bc"), sums):
                    w = self.weights[term]
                    getattr(h, term).append(float(s) / w if w > 0 else 0.0)
                self.step = step
                for cb in self.callbacks:
                    cb(self, step)
                if info.message == "damping at lam_max":
                    self.stop_reason = (f"no decrease at the largest damping (λ = {info.lam:.1e}) "
                                        f"at step {step}: converged or stuck")
                if not self.stop_reason and len(h.loss) > stall_window \
                        and h.step[-stall_window - 1] >= step - stall_window \
                        and h.loss[-1] > stall_factor * h.loss[-stall_window - 1]:
                    self.stop_reason = (f"loss fell by less than a factor {stall_factor:g} over "
                                        f"{stall_window} steps at step {step}")
                t_eval += self._after_step(step, self.train_time + time.perf_counter() - t0 - t_eval)
                pbar.update(1)
                status = f"loss={info.new_loss:.3e} lam={info.lam:.1e}"
                if self.last_error is not None:
                    status += f" err={self.last_error:.2e}"
                pbar.set_postfix_str(status, refresh=False)
                if self.stop_reason:
                    break
        finally:
            self.train_time += time.perf_counter() - t0 - t_eval
            pbar.close()

class _LMState:
    """The optimiser state a checkpoint of :meth:`Trainer.fit_lm` stores: LM's (λ, counts) and
    the trainer's step (``step``, as Adam's state has it, for ``--resume``)."""

    def __init__(self, lm: Any, trainer: Trainer):
        self.lm, self.trainer = lm, trainer

    def state_dict(self) -> dict[str, Any]:
        return {**self.lm.state_dict(), "step": self.trainer.step}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.lm.load_state_dict(state)


def _progress_bar(total: int, enabled: bool):
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, unit="step", mininterval=0.5, dynamic_ncols=True, file=sys.stderr)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, s: str = "", refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass
