"""One call from a problem to a trained model: :func:`solve` (``hp.solve``) picks the model and
the optimiser (:func:`plan`), runs the training loop until a tolerance, a time limit or the
optimiser's own stop, and returns a :class:`Solution`. :func:`train` runs a settings table's
phases (an Adam warm start, then the optimiser) on a Trainer; the CLI uses both.

The plan: a problem that spans more than a few wavelengths
(:func:`helmpinn.dd_driver.should_decompose`) gets a decomposed model sized from its wavelengths
trained by matrix-free Gauss-Newton (:func:`helmpinn.dd_driver.decomposed_settings`); any other
one network, trained by Levenberg-Marquardt where its dense system fits, else after an Adam
warm start by matrix-free LM (:func:`helmpinn.defaults.run_settings` with "auto").
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from . import dd_driver, distributed, memory
from ._checks import integer, real_number
from .decomposition import DecomposedModel
from .defaults import OPTIMIZERS, run_settings
from .distributed import check_ranks
from .drivers import MODEL_KINDS, Driver, make_driver, mismatch, model_kind
from .model import Model
from .problems import Problem
from .jumps import training_problem
from .registry import get_problem, recorded_options
from .trainer import History, Trainer
from .waves import ResonanceWarning, resonance_warning

__all__ = ["solve", "Solution", "train", "polish", "plan", "MODELS"]

#: What ``solve(model=...)`` takes by name.
MODELS = ("auto", *MODEL_KINDS)


@dataclass
class Solution:
    """What :func:`solve` found: the trained ``model`` (a :class:`~helmpinn.Model` or a
    :class:`~helmpinn.decomposition.DecomposedModel`) and its ``history``, the ``settings`` it
    used, why it stopped, the relative L2 ``error`` on the test grid (None without an exact
    solution) and the last validation loss."""

    model: Model | DecomposedModel
    history: History
    settings: dict[str, Any]
    stop_reason: str | None
    error: float | None
    val_loss: float | None

    def __repr__(self) -> str:
        """One line: the model, the steps, the last loss, validation loss and error, and why it
        stopped (``history`` and ``settings`` hold the rest)."""
        loss = self.history.loss[-1] if self.history.loss else None

        def num(v: float | None) -> str:
            return "None" if v is None else f"{v:.3e}"
        return (f"Solution(model={self.model!r}, optimizer={self.settings.get('optimizer')!r}, "
                f"steps={len(self.history.loss)}, loss={num(loss)}, val_loss={num(self.val_loss)}, "
                f"error={num(self.error)}, stop_reason={self.stop_reason!r})")

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The solution u at points ``x`` [N, d] (complex)."""
        return self.model.predict(x)

    def save(self, path: str | os.PathLike) -> None:
        """Write the model (with the settings in its metadata) to ``path`` (.npz; read it back
        with :func:`helmpinn.dd_driver.load_model`, or ``Model.load`` for one network)."""
        self.model.save(path, metadata={**self.model.metadata, "settings": self.settings})


def train(trainer: Trainer, settings: dict[str, Any], done: int = 0) -> tuple[History, dict[str, Any] | None]:
    """Run the phases of ``settings`` (a :func:`run_settings` table) on ``trainer``: for L-BFGS
    and LM the Adam warm start first (what is left of it after ``done`` steps), then the
    optimiser's ``steps``, each through its driver. A ``trainer.time_limit`` covers both phases.
    Returns the history and the L-BFGS summary (None for the others)."""
    name = settings.get("optimizer", "adam")
    warm = 0 if name == "adam" else int(settings.get("warm_start", 0))
    limit, start = trainer.time_limit, trainer.clock()
    try:
        if done < warm:
            trainer.fit(warm - done, optimizer="adam")
            if trainer.diverged or trainer.stop_reason:
                return trainer.history, None
            if limit is not None:
                left = limit - (trainer.clock() - start)
                if left <= 0:
                    trainer.stop_reason = f"time limit {limit:g} s reached at step {trainer.step}"
                    return trainer.history, None
                trainer.time_limit = left
        driver = name if isinstance(name, Driver) else make_driver(name, **settings[name]) \
            if name in ("lm", "gn") else name
        history = trainer.fit(settings["steps"] + warm - max(done, warm), optimizer=driver)
        if limit is not None and trainer.time_limit != limit and (trainer.stop_reason or "").startswith("time limit"):
            trainer.stop_reason = f"time limit {limit:g} s reached at step {trainer.step}"   # the whole run's
    finally:
        trainer.time_limit = limit
    return history, trainer.driver.summary() if name == "lbfgs" else None


def polish(trainer: Trainer, settings: dict[str, Any], reached: bool,
           deadline: float | None = None) -> dict[str, Any] | None:
    """The run's last phase: ``settings["lbfgs"]`` iterations of L-BFGS
    (:meth:`Trainer.polish <helmpinn.Trainer.polish>`) after the optimiser, unless there are none,
    the run diverged, ``reached`` its target or was stopped by the user, or the ``deadline`` (by
    ``trainer.clock``) has passed; the polish stops at the deadline (and within the trainer's own
    ``time_limit``). The optimiser's stop reason stays unless the polish has one of its own.
    Returns the polish's summary, or None."""
    n = settings.get("lbfgs", 0)
    if not n or trainer.diverged or reached or trainer.stop_requested is not None:
        return None
    limit, before = trainer.time_limit, trainer.stop_reason
    if deadline is not None:
        left = deadline - trainer.clock()
        if left <= 0:
            return None
        trainer.time_limit = left if limit is None else min(limit, left)
    try:
        summary = trainer.polish(n)
    finally:
        trainer.time_limit = limit
    trainer.stop_reason = trainer.stop_reason or before
    return summary


#: The integer entries of a plan (``solve``'s overrides are checked against them), each with its
#: least value.
INTEGER_SETTINGS = {"steps": 0, "warm_start": 0, "lbfgs": 0, "seed": 0, "ff_dim": 1, "hidden": 1, "layers": 1,
                    "pde_points": 1, "bc_points": 0, "resample_every": 0, "eval_every": 0}


def plan(problem: Problem, model: str = "auto", optimizer: str | Driver = "auto", *,
         memory_bytes: int = 2 << 30, decomposition: dict[str, Any] | None = None) -> dict[str, Any]:
    """The settings table of a run on ``problem``. ``model``: "network" (one network),
    "decomposed" (:func:`helmpinn.dd_driver.decomposed_settings`) or "auto" (decomposed when
    :func:`helmpinn.dd_driver.should_decompose` and the optimiser allows it). ``optimizer``:
    "auto" (Gauss-Newton for a decomposed model, else :func:`run_settings`'s "auto"), "gn"
    (a decomposed model), "adam" (one network; with model="decomposed" that model, its
    settings for Adam), "lbfgs", "lm" (one network) or a
    :class:`~helmpinn.drivers.Driver` (run on the chosen model's plan). ``decomposition``:
    entries replacing the decomposition's rules."""
    if isinstance(model, str) and model not in MODELS:
        raise ValueError(f"model: expected one of {MODELS}, a Model or a DecomposedModel, got {model!r}")
    named = optimizer if isinstance(optimizer, str) else "auto"
    if not isinstance(optimizer, (str, Driver)) or named not in ("auto", "gn", *OPTIMIZERS):
        raise ValueError(f"optimizer: expected 'auto', 'gn', one of {OPTIMIZERS} or a helmpinn.drivers.Driver, "
                         f"got {optimizer!r}")
    if model == "auto":   # a decomposition above a few wavelengths, when the optimiser trains one
        want = "decomposed" if named == "gn" or (named == "auto" and dd_driver.should_decompose(problem)) \
            else "network"
        trains = optimizer.trains if isinstance(optimizer, Driver) else (want,)
        model = want if want in trains else trains[0]
    why = mismatch(model, optimizer if isinstance(optimizer, Driver) else named)
    if why:
        raise ValueError(f"optimizer {getattr(optimizer, 'name', named)!r} {why} (model={model!r})")
    if decomposition is not None and not isinstance(decomposition, Mapping):
        raise TypeError(f"decomposition: expected a dict of the decomposition's settings, got "
                        f"{type(decomposition).__name__}")
    if model == "decomposed":
        settings = dd_driver.decomposed_settings(problem, optimizer="adam" if named == "adam" else "gn",
                                                 **(decomposition or {}))
    else:
        if decomposition:
            raise ValueError("decomposition: given for one network (model='network')")
        settings = {**run_settings(problem, named, memory_bytes), "model": "network"}
    if isinstance(optimizer, Driver):
        settings["optimizer"] = optimizer
    return settings


def solve(problem: Problem | str, tol: float | None = None, time_limit: float | None = None, comm: Any = None,
          progress: bool = True, *, model: str | Model | DecomposedModel = "auto",
          optimizer: str | Driver = "auto", callbacks: Sequence[Callable[[Trainer, int], Any]] = (),
          memory_bytes: int = 2 << 30, clock: Callable[[], float] = time.perf_counter,
          jumps: float | str | None = "auto", **overrides: Any) -> Solution:
    """Train a model for ``problem`` (a :class:`~helmpinn.Problem` or a built-in's name) and return
    the :class:`Solution`.

    The plan is :func:`plan`'s: a problem of more than a few wavelengths
    (:data:`helmpinn.dd_driver.DECOMPOSE_ABOVE`) gets a decomposed model sized from its
    wavelengths, trained by matrix-free Gauss-Newton; any other one network, trained by
    Levenberg-Marquardt where its dense system fits ``memory_bytes``, else after an Adam warm
    start by matrix-free LM. ``model``: "auto", "network", "decomposed", or a
    :class:`~helmpinn.Model` / :class:`~helmpinn.decomposition.DecomposedModel` to train (the
    plan of its kind gives the points and the optimiser). ``optimizer``: "auto", "gn", "lm",
    "adam", "lbfgs" or a :class:`~helmpinn.drivers.Driver`. ``overrides`` replace any entry of
    the plan (``hidden``, ``layers``, ``ff_dim``, ``pde_points``, ``steps``, ``warm_start``,
    ``seed``, ...; ``lm`` / ``gn``: a dict merged into the optimiser's options;
    ``decomposition``: entries replacing the decomposition's rules, the points following them).
    Stops once the relative L2 error (with an exact solution, else the validation loss) is below
    ``tol``, after ``time_limit`` seconds (by ``clock``), or on the optimiser's own stop.
    ``callbacks``: ``f(trainer, step)`` after every step (:class:`~helmpinn.Trainer`'s).
    ``comm``: over MPI ranks (one network: data-parallel; a decomposed model: its subdomains
    split over the ranks); ``progress``: a bar. A closed box near resonance
    (:func:`helmpinn.waves.box_resonances`: a mode of −Δ within 1% of κ) gets a
    :class:`~helmpinn.waves.ResonanceWarning` (on rank 0). A run that would not fit in memory,
    one network or decomposed (:func:`helmpinn.memory.check_settings`), is refused with a
    :class:`~helmpinn.memory.MemoryEstimateError` before the model is made or a point drawn.
    ``jumps``: a medium whose κ jumps (:func:`helmpinn.jumps.problem_jumps`) is trained on with
    its jumps smoothed over a short width (:func:`helmpinn.jumps.training_problem`: "auto", a
    width, or "off" for the medium as given); a smooth medium is trained on as given.
    """
    # the numbers first, before any planning (a string, a bool, an infinity named as such)
    tol = None if tol is None else real_number("solve", "tol", tol, low=0)
    time_limit = None if time_limit is None else real_number("solve", "time_limit", time_limit, low=0)
    memory_bytes = integer("solve", "memory_bytes", memory_bytes, low=1)
    if isinstance(problem, str):
        problem = get_problem(problem)
    problem, _ = training_problem(problem, jumps)   # (sharp media: helmpinn.jumps)
    given = None if isinstance(model, str) else model
    if given is not None and not isinstance(given, (Model, DecomposedModel)):
        raise TypeError(f"model: expected 'auto', 'network', 'decomposed', a Model or a DecomposedModel, "
                        f"got {type(given).__name__}")
    kind = model if given is None else model_kind(given)
    settings = {**plan(problem, kind, optimizer, memory_bytes=memory_bytes,
                       decomposition=overrides.get("decomposition")), "seed": 0}
    unknown = set(overrides) - set(settings)
    if unknown:
        raise ValueError(f"solve: unknown settings {sorted(unknown)}; known: {sorted(settings)}")
    overrides.pop("decomposition", None)   # already applied by the plan
    for name in ("lm", "gn"):
        if name in overrides:
            overrides = {**overrides, name: {**settings[name], **overrides[name]}}
    settings.update(overrides)
    for name, least in INTEGER_SETTINGS.items():
        if name in settings and not (name == "seed" and settings[name] is None):   # seed=None: a fresh one
            settings[name] = integer("solve", name, settings[name], low=least)
    if settings.get("lbfgs") and settings["model"] == "decomposed":
        raise ValueError("solve: lbfgs (the L-BFGS polish) trains one network; this plan trains a decomposed "
                         "model (model='network' for one network)")
    if settings.get("lbfgs") and comm is not None:   # refused before training, not after it
        check_ranks("lbfgs", comm.Get_size())
    with distributed.collective(comm, "the memory estimate"):   # the whole run's, before anything is allocated
        memory.check_settings(settings, problem, model=given, ranks=1 if comm is None else comm.Get_size())
    words = resonance_warning(problem)
    if words and (comm is None or comm.Get_rank() == 0):
        warnings.warn(words, ResonanceWarning, stacklevel=2)
    s = settings
    if given is not None:
        net = given
    elif s["model"] == "decomposed":
        net = dd_driver.build_decomposed_model(problem, s["decomposition"], s["ff_dim"], s["hidden"], s["layers"],
                                               seed=s["seed"], sigma=s["sigma"], dtype=s["dtype"])
    else:
        net = Model.create(problem.dim, s["ff_dim"], s["hidden"], s["layers"], dtype=s["dtype"], seed=s["seed"],
                           fourier_sigma=s["sigma"])
    exact = problem.exact is not None
    trainer = Trainer(problem, net, lr=s["lr"], schedule=s["schedule"], betas=s["betas"],
                      pde_points=s["pde_points"], bc_points=s["bc_points"], sampling=s["sampling"],
                      resample_every=s["resample_every"], weights=s["weights"], eval_every=s["eval_every"],
                      target_error=tol if exact else None, target_val_loss=None if exact else tol,
                      time_limit=time_limit, clock=clock, progress=progress, seed=s["seed"], comm=comm,
                      callbacks=callbacks)
    trainer.model.metadata = {**trainer.model.metadata, "problem": problem.name,
                              "problem_options": recorded_options(problem.options)[0]}
    start = clock()
    history, _ = train(trainer, settings)
    reached = (trainer.stop_reason or "").startswith("target")
    polish(trainer, settings, reached, None if time_limit is None else start + time_limit)
    record = {k: v for k, v in settings.items() if not isinstance(v, Driver)}
    return Solution(trainer.model, history, record, trainer.stop_reason, trainer.evaluate(),
                    trainer.validation_loss())
