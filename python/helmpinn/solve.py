"""One call from a problem to a trained model: :func:`solve` picks the network and the optimiser
(:func:`helmpinn.defaults.run_settings` with "auto"), runs the training loop until a tolerance,
a time limit or the optimiser's own stop, and returns a :class:`Solution`. :func:`train` runs a
settings table's phases (an Adam warm start, then the optimiser) on a Trainer; the CLI uses it too.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .defaults import run_settings
from .drivers import make_driver
from .model import Model
from .problems import Problem, get_problem
from .trainer import History, Trainer

__all__ = ["solve", "Solution", "train"]


@dataclass
class Solution:
    """What :func:`solve` found: the trained ``model`` and its ``history``, the ``settings`` it
    used, why it stopped, the relative L2 ``error`` on the test grid (None without an exact
    solution) and the last validation loss."""

    model: Model
    history: History
    settings: dict[str, Any]
    stop_reason: str | None
    error: float | None
    val_loss: float | None

    def predict(self, x: np.ndarray) -> np.ndarray:
        """The solution u at points ``x`` [N, d] (complex)."""
        return self.model.predict(x)

    def save(self, path: str | os.PathLike) -> None:
        """Write the model (with the settings in its metadata) to ``path`` (.npz)."""
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
            trainer.fit(warm - done)
            if trainer.diverged or trainer.stop_reason:
                return trainer.history, None
            if limit is not None:
                left = limit - (trainer.clock() - start)
                if left <= 0:
                    trainer.stop_reason = f"time limit {limit:g} s reached at step {trainer.step}"
                    return trainer.history, None
                trainer.time_limit = left
        driver = make_driver(name, **settings["lm"]) if name == "lm" else name
        history = trainer.fit(settings["steps"] + warm - max(done, warm), optimizer=driver)
        if limit is not None and trainer.time_limit != limit and (trainer.stop_reason or "").startswith("time limit"):
            trainer.stop_reason = f"time limit {limit:g} s reached at step {trainer.step}"   # the whole run's
    finally:
        trainer.time_limit = limit
    return history, trainer.driver.summary() if name == "lbfgs" else None


def solve(problem: Problem | str, tol: float | None = None, time_limit: float | None = None, comm: Any = None,
          progress: bool = True, *, memory_bytes: int = 2 << 30, clock: Callable[[], float] = time.perf_counter,
          **overrides: Any) -> Solution:
    """Train a model for ``problem`` (a :class:`~helmpinn.Problem` or a built-in's name) and return
    the :class:`Solution`.

    The plan is ``run_settings(problem, "auto", memory_bytes)``: Levenberg-Marquardt on its own
    small float64 network where its dense system fits ``memory_bytes``, else an Adam warm start
    then matrix-free LM. ``overrides`` replace any of its entries (``hidden``, ``layers``,
    ``ff_dim``, ``pde_points``, ``steps``, ``optimizer``, ``warm_start``, ``seed``, ``lm``: a dict
    merged into the LM options, ...). Stops once the relative L2 error (with an exact solution,
    else the validation loss) is below ``tol``, after ``time_limit`` seconds (by ``clock``), or
    on the optimiser's own stop. ``comm``: data-parallel over MPI ranks; ``progress``: a bar.
    """
    if isinstance(problem, str):
        problem = get_problem(problem)
    settings = {**run_settings(problem, "auto", memory_bytes), "seed": 0}
    unknown = set(overrides) - set(settings)
    if unknown:
        raise ValueError(f"solve: unknown settings {sorted(unknown)}; known: {sorted(settings)}")
    if "lm" in overrides:
        overrides = {**overrides, "lm": {**settings["lm"], **overrides["lm"]}}
    settings.update(overrides)
    if tol is not None and not tol > 0:
        raise ValueError(f"tol must be a positive number, got {tol}")
    s = settings
    model = Model.create(problem.dim, s["ff_dim"], s["hidden"], s["layers"], dtype=s["dtype"], seed=s["seed"],
                         fourier_sigma=s["sigma"])
    exact = problem.exact is not None
    trainer = Trainer(problem, model, lr=s["lr"], schedule=s["schedule"], betas=s["betas"],
                      pde_points=s["pde_points"], bc_points=s["bc_points"], sampling=s["sampling"],
                      resample_every=s["resample_every"], weights=s["weights"], eval_every=s["eval_every"],
                      target_error=tol if exact else None, target_val_loss=None if exact else tol,
                      time_limit=time_limit, clock=clock, progress=progress, seed=s["seed"], comm=comm)
    model.metadata = {**model.metadata, "problem": problem.name, "problem_options": problem.options}
    history, _ = train(trainer, settings)
    return Solution(model, history, settings, trainer.stop_reason, trainer.evaluate(), trainer.validation_loss())
