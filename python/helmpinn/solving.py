"""One call from a problem to a trained model: :func:`solve` (``hp.solve``) makes the run's plan
(:func:`helmpinn.training.plan.run_plan`), builds the model and the Trainer from it, runs its
phases until a tolerance, a time limit or the optimiser's own stop, and returns a
:class:`Solution`, whose ``status`` (a :class:`~helmpinn.training.status.RunStatus`),
``success`` and ``message`` say how the run ended.

The plan: a problem that spans more than a few wavelengths, or whose corners take their
singular functions (:func:`helmpinn.defaults.should_decompose`), gets a decomposed model sized from its
wavelengths trained by matrix-free Gauss-Newton (:func:`helmpinn.training.dd_driver.decomposed_settings`);
any other one network, trained by Levenberg-Marquardt where its dense system fits, else after
an Adam warm start by matrix-free LM (:func:`helmpinn.defaults.run_settings` with "auto").
"""
from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from . import distributed, memory
from ._checks import integer, real_number
from .models.decomposition import DecomposedModel
from .distributed import check_ranks
from .estimate import ErrorEstimate, estimate_error
from .models.model import Model
from .problems import Problem
from .problems.jumps import training_problem
from .problems.registry import get_problem, recorded_options
from .training.drivers import Driver
from .training.plan import polish, run_plan, train
from .training.status import RunStatus
from .training.trainer import History, Trainer
from .problems.waves import ResonanceWarning, resonance_warning

__all__ = ["solve", "Solution"]


@dataclass
class Solution:
    """What :func:`solve` found, in the manner of SciPy's ``OptimizeResult``: the trained
    ``model`` (a :class:`~helmpinn.Model` or a :class:`~helmpinn.models.decomposition.DecomposedModel`)
    and its ``history``; the ``settings`` it used (the plan's record,
    :meth:`helmpinn.training.plan.RunPlan.record`); how the run ended: ``status`` (a
    :class:`~helmpinn.training.status.RunStatus`), ``success`` (with a ``tol``: the target was
    reached; without one: the run neither diverged nor was interrupted) and ``message`` (why it
    stopped, in words); the relative L2 ``error`` on the test grid (None without an exact
    solution) and the last validation loss."""

    model: Model | DecomposedModel
    history: History
    settings: dict[str, Any]
    status: RunStatus
    success: bool
    message: str
    error: float | None
    val_loss: float | None

    @property
    def stop_reason(self) -> str | None:
        """Why the run stopped early (:attr:`message`), None where it took every step."""
        return None if self.status is RunStatus.STEPS_DONE else self.message

    def __repr__(self) -> str:
        """One line: the model, the steps, the last loss, validation loss and error, and how it
        ended (``history`` and ``settings`` hold the rest)."""
        loss = self.history.loss[-1] if self.history.loss else None

        def num(v: float | None) -> str:
            return "None" if v is None else f"{v:.3e}"
        return (f"Solution(model={self.model!r}, optimizer={self.settings.get('optimizer')!r}, "
                f"steps={len(self.history.loss)}, loss={num(loss)}, val_loss={num(self.val_loss)}, "
                f"error={num(self.error)}, success={self.success}, status={self.status.name}, "
                f"message={self.message!r})")

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The solution u at points ``x`` [N, d] (complex)."""
        return self.model.predict(x)

    def estimate_error(self, problem: Problem, **options: Any) -> ErrorEstimate:
        """The relative L2 error estimated without an exact solution, against finite-difference
        references of ``problem`` (the one solved): :func:`helmpinn.estimate.estimate_error`,
        whose ``options`` it takes; a Box or Interval domain, with or without a PML or an obstacle."""
        return estimate_error(problem, self.model, **options)

    def save(self, path: str | os.PathLike) -> None:
        """Write the model (with the settings in its metadata) to ``path`` (.npz; read it back
        with :func:`helmpinn.training.dd_driver.load_model`, or ``Model.load`` for one network)."""
        self.model.save(path, metadata={**self.model.metadata, "settings": self.settings})


def solve(problem: Problem | str, tol: float | None = None, time_limit: float | None = None, comm: Any = None,
          progress: bool = True, *, model: str | Model | DecomposedModel = "auto",
          optimizer: str | Driver = "auto", callbacks: Sequence[Callable[[Trainer, int], Any]] = (),
          memory_bytes: int = 2 << 30, clock: Callable[[], float] = time.perf_counter,
          jumps: float | str | None = "auto", **overrides: Any) -> Solution:
    """Train a model for ``problem`` (a :class:`~helmpinn.Problem` or a built-in's name) and return
    the :class:`Solution`.

    The plan is :func:`~helmpinn.training.plan.run_plan`'s: a problem of more than a few wavelengths
    (:data:`helmpinn.defaults.DECOMPOSE_ABOVE`) gets a decomposed model sized from its
    wavelengths, trained by matrix-free Gauss-Newton; any other one network, trained by
    Levenberg-Marquardt where its dense system fits ``memory_bytes``, else after an Adam warm
    start by matrix-free LM. ``model``: "auto", "network", "decomposed", or a
    :class:`~helmpinn.Model` / :class:`~helmpinn.models.decomposition.DecomposedModel` to train (the
    plan of its kind gives the points and the optimiser). ``optimizer``: "auto", "gn", "lm",
    "adam", "lbfgs" or a :class:`~helmpinn.training.drivers.Driver`. ``overrides`` replace any field of
    the plan (:class:`~helmpinn.training.plan.RunPlan`: ``hidden``, ``layers``, ``ff_dim``,
    ``pde_points``, ``steps``, ``warm_start``, ``seed``, ...; ``lm`` / ``gn`` / ``weights``: a
    dict merged into the plan's; ``decomposition``: entries replacing the decomposition's rules,
    the points following them).
    Stops once the relative L2 error (with an exact solution, else the validation loss) is below
    ``tol``, after ``time_limit`` seconds (by ``clock``), or on the optimiser's own stop.
    ``callbacks``: ``f(trainer, step)`` after every step (:class:`~helmpinn.Trainer`'s).
    ``comm``: over MPI ranks (one network: data-parallel; a decomposed model: its subdomains
    split over the ranks); ``progress``: a bar. A closed box near resonance
    (:func:`helmpinn.problems.waves.box_resonances`: a mode of −Δ within 1% of κ) gets a
    :class:`~helmpinn.problems.waves.ResonanceWarning` (on rank 0). A run that would not fit in memory,
    one network or decomposed (:func:`helmpinn.memory.check_settings`), is refused with a
    :class:`~helmpinn.memory.MemoryEstimateError` before the model is made or a point drawn.
    ``jumps``: a medium whose κ jumps (:func:`helmpinn.problems.jumps.problem_jumps`) is trained on with
    its jumps smoothed over a short width (:func:`helmpinn.problems.jumps.training_problem`: "auto", a
    width, or "off" for the medium as given); a smooth medium is trained on as given.
    """
    # the numbers first, before any planning (a string, a bool, an infinity named as such)
    tol = None if tol is None else real_number("solve", "tol", tol, low=0)
    time_limit = None if time_limit is None else real_number("solve", "time_limit", time_limit, low=0)
    memory_bytes = integer("solve", "memory_bytes", memory_bytes, low=1)
    if isinstance(problem, str):
        problem = get_problem(problem)
    problem, _ = training_problem(problem, jumps)   # (sharp media: helmpinn.problems.jumps)
    given = None if isinstance(model, str) else model
    if given is not None and not isinstance(given, (Model, DecomposedModel)):
        raise TypeError(f"model: expected 'auto', 'network', 'decomposed', a Model or a DecomposedModel, "
                        f"got {type(given).__name__}")
    kind = model if given is None else given.kind
    plan = run_plan(problem, kind, optimizer, memory_bytes=memory_bytes, where="solve", **overrides)
    settings = plan.record()
    if settings.get("lbfgs") and comm is not None:   # refused before training, not after it
        check_ranks("lbfgs", comm.Get_size())
    with distributed.collective(comm, "the memory estimate"):   # the whole run's, before anything is allocated
        memory.check_settings(settings, problem, model=given, ranks=1 if comm is None else comm.Get_size())
    words = resonance_warning(problem)
    if words and (comm is None or comm.Get_rank() == 0):
        warnings.warn(words, ResonanceWarning, stacklevel=2)
    net = given if given is not None else plan.build_model(problem)
    exact = problem.exact is not None
    trainer = plan.trainer(problem, net, target_error=tol if exact else None,
                           target_val_loss=None if exact else tol, time_limit=time_limit, clock=clock,
                           progress=progress, comm=comm, callbacks=callbacks)
    trainer.model.metadata = {**trainer.model.metadata, "problem": problem.name,
                              "problem_options": recorded_options(problem.options)[0]}
    start = clock()
    history, _ = train(trainer, plan, time_limit=time_limit, since=start)
    polish(trainer, plan, time_limit=time_limit, since=start)
    status = trainer.status
    success = status is RunStatus.TARGET_REACHED if tol is not None else status.success
    message = trainer.stop_reason or f"took every step asked for ({trainer.step} steps)"
    return Solution(trainer.model, history, settings, status, success, message, trainer.evaluate(),
                    trainer.validation_loss())
