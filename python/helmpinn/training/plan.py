"""The run plan: what a run on a problem trains, on which points and with which optimiser, as one
typed table (:class:`RunPlan`) made by one function (:func:`run_plan`).

``hp.solve`` and ``helmpinn train`` both start from :func:`run_plan` and build the model
(:meth:`RunPlan.build_model`) and the Trainer (:meth:`RunPlan.trainer`) from it; ``hp.solve``'s
keywords and the command line's flags are overrides of its fields (the CLI's flags map onto
them through one table, ``helmpinn.cli.FLAG_FIELDS``). The defaults the plan starts from are
the rules of :mod:`helmpinn.defaults` (one network: :func:`helmpinn.defaults.run_settings`;
a decomposed model: :func:`helmpinn.training.dd_driver.decomposed_settings`).

:func:`train` runs a plan's phases on a Trainer (the Adam warm start, then the optimiser) and
:func:`polish` its last one (the L-BFGS polish), all under one time limit.

A plan is recorded in a run's files as a dict (:meth:`RunPlan.record`: its fields by name,
the optimiser's, the decomposition's and LM's options where the run has them) and read back
by :meth:`RunPlan.from_record`, which also reads the names a run folder written before the
plan had one vocabulary used (``fourier``, ``points``, ``resample``, ``n_pde``, ``n_bc``).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from .._checks import integer
from ..defaults import OPTIMIZERS, run_settings, should_decompose
from ..models.model import Model
from ..problems.singular import corner_singularities
from . import dd_driver
from .drivers import MODEL_KINDS, Driver, make_driver, mismatch
from .status import RunStatus
from .trainer import History, Trainer

__all__ = ["RunPlan", "run_plan", "train", "polish", "current_names", "MODELS", "INTEGER_SETTINGS", "OLD_NAMES"]

#: What ``run_plan(model=...)`` (and ``hp.solve(model=...)``) takes by name.
MODELS = ("auto", *MODEL_KINDS)

#: The integer fields of a plan (overrides are checked against them), each with its least value.
INTEGER_SETTINGS = {"steps": 0, "warm_start": 0, "lbfgs": 0, "seed": 0, "ff_dim": 1, "hidden": 1, "layers": 1,
                    "pde_points": 1, "bc_points": 0, "resample_every": 0, "eval_every": 0}

#: The names under which run folders written before the one vocabulary recorded some fields.
OLD_NAMES = {"fourier": "ff_dim", "points": "pde_points", "resample": "resample_every",
             "n_pde": "pde_points", "n_bc": "bc_points"}

def current_names(record: Mapping[str, Any]) -> dict[str, Any]:
    """``record`` (a plan's, or a run's settings holding one) with the older names of
    :data:`OLD_NAMES` read as the fields' (an entry under a field's own name wins)."""
    out = {k: v for k, v in record.items() if k not in OLD_NAMES}
    out.update({new: record[old] for old, new in OLD_NAMES.items() if old in record and new not in out})
    return out


#: The fields a record holds only where the run has them (None otherwise).
_OPTIONAL = ("lm", "gn", "decomposition")


@dataclass
class RunPlan:
    """A run's settings, one field each: the ``model`` ("network" or "decomposed") and its
    shape (``ff_dim``, ``hidden``, ``layers``, the Fourier scale ``sigma``, ``dtype``,
    ``seed``, ``train_fourier``); the ``optimizer`` ("adam", "lbfgs", "lm", "gn" or a
    :class:`~helmpinn.training.drivers.Driver`) with its ``steps``, the Adam ``warm_start`` before
    it, the L-BFGS polish after it (``lbfgs`` iterations) and Adam's ``lr``, ``schedule`` and
    ``betas``; the points (``pde_points``, ``bc_points``, ``sampling``, ``resample_every``),
    ``eval_every`` and the loss ``weights``; the options of LM (``lm``) and of Gauss-Newton
    (``gn``), and the ``decomposition``'s layout, where the run has them (None otherwise)."""

    model: str
    optimizer: str | Driver
    ff_dim: int
    hidden: int
    layers: int
    sigma: float | None
    dtype: str
    steps: int
    warm_start: int
    lbfgs: int
    lr: Any
    schedule: str
    betas: tuple[float, float]
    pde_points: int
    bc_points: int
    sampling: str
    resample_every: int
    eval_every: int
    weights: dict[str, float]
    seed: int | None = 0
    train_fourier: bool = True
    lm: dict[str, Any] | None = None
    gn: dict[str, Any] | None = None
    decomposition: dict[str, Any] | None = None

    def record(self) -> dict[str, Any]:
        """The plan as a run's files record it: every field by name, ``lm``, ``gn`` and
        ``decomposition`` only where set, a Driver given as the optimiser left out."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for name in _OPTIONAL:
            if out[name] is None:
                del out[name]
        if isinstance(self.optimizer, Driver):
            del out["optimizer"]
        return out

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "RunPlan":
        """The plan of a record (:meth:`record`; entries that are no field are left out, the
        older names of :data:`OLD_NAMES` read as theirs, a record without ``model`` taken as a
        run of its optimiser's model, as runs saved before it was a field)."""
        values = current_names(record)
        values.setdefault("model", "decomposed" if values.get("optimizer") == "gn" else "network")
        values.setdefault("optimizer", "adam")
        names = {f.name for f in dataclasses.fields(cls)}
        plan = cls(**{k: v for k, v in values.items() if k in names})
        plan.betas = tuple(plan.betas)
        return plan

    def with_overrides(self, where: str = "run_plan", **overrides: Any) -> "RunPlan":
        """This plan with ``overrides`` in place of its fields (``lm``, ``gn`` and ``weights``:
        dicts merged into its own), checked: an unknown field, or options the run does not have
        (``lm`` for Adam), is a ValueError; counts must be integers of at least
        :data:`INTEGER_SETTINGS`' (``seed`` may be None: a fresh one); ``lbfgs`` only for one
        network. ``model``, ``optimizer`` and ``decomposition`` are :func:`run_plan`'s to choose
        (the points follow them), not overrides. ``where`` names the caller in the messages."""
        settings = self.record()
        known = set(settings) - {"decomposition", "model", "optimizer"}   # those three: run_plan's to choose
        unknown = set(overrides) - known
        if unknown:
            named = known | ({"decomposition"} if self.decomposition is not None else set())
            raise ValueError(f"{where}: unknown settings {sorted(unknown)}; known: {sorted(named)}")
        for name in ("lm", "gn", "weights"):
            if name in overrides:
                if not isinstance(overrides[name], Mapping):
                    raise TypeError(f"{where}: {name} must be a dict, got {type(overrides[name]).__name__}")
                overrides[name] = {**settings[name], **overrides[name]}
        settings.update(overrides)
        for name, least in INTEGER_SETTINGS.items():
            if not (name == "seed" and settings[name] is None):   # seed=None: a fresh one
                settings[name] = integer(where, name, settings[name], low=least)
        if settings["lbfgs"] and settings["model"] == "decomposed":
            raise ValueError(f"{where}: lbfgs (the L-BFGS polish) trains one network; this plan trains a "
                             "decomposed model (model='network' for one network)")
        plan = RunPlan.from_record({**settings, "optimizer": self.optimizer})
        plan.train_fourier = bool(plan.train_fourier)
        return plan

    def build_model(self, problem: Any) -> Any:
        """A fresh model of this plan for ``problem``: one network
        (:meth:`helmpinn.Model.create`) or a decomposed model
        (:func:`helmpinn.training.dd_driver.build_decomposed_model`)."""
        if self.model == "decomposed":
            return dd_driver.build_decomposed_model(problem, self.decomposition, self.ff_dim, self.hidden,
                                                    self.layers, seed=self.seed, sigma=self.sigma, dtype=self.dtype)
        return Model.create(problem.dim, self.ff_dim, self.hidden, self.layers, dtype=self.dtype, seed=self.seed,
                            fourier_sigma=self.sigma)

    def _gn_setting(self, name: str) -> Any:
        """The Gauss-Newton run's setting ``name`` (:class:`helmpinn.training.dd_driver.GNSettings`:
        a driver's own, or the plan's ``gn`` over the settings' defaults); None where the run's
        optimiser is not Gauss-Newton (or a driver has no such setting)."""
        if isinstance(self.optimizer, Driver):
            return getattr(getattr(self.optimizer, "settings", None), name, None) if self.optimizer.name == "gn" else None
        return (self.gn or {}).get(name, getattr(dd_driver.GNSettings, name)) if self.optimizer == "gn" else None

    def corner_rows(self) -> bool:
        """Whether the run's optimiser adds the corner rows (Gauss-Newton with ``corners`` > 0)."""
        return float(self._gn_setting("corners") or 0.0) > 0

    def radiation(self) -> float:
        """The run's radiation rows' amplification (Gauss-Newton's ``radiation``; 0 for another
        optimiser)."""
        return float(self._gn_setting("radiation") or 0.0)

    def singular_functions(self) -> bool:
        """Whether the run's optimiser adds the corners' singular functions (Gauss-Newton with
        ``singular``)."""
        return bool(self._gn_setting("singular"))

    def trainer(self, problem: Any, model: Any, **run: Any) -> Trainer:
        """The :class:`~helmpinn.Trainer` of this plan for ``model`` on ``problem``; ``run``:
        the Trainer's keywords that are the run's rather than the plan's (targets, time limit,
        clock, progress, checkpoints, ``comm``, ``device``, callbacks). A decomposition that follows
        the local wavenumber draws its points by it
        (:func:`helmpinn.training.dd_driver.sampled_problem`), and one that adds the corner rows
        weighs its PDE rows down over a wider region about the corners
        (:func:`helmpinn.problems.corners.rows_corner_radius`); one that adds the radiation rows
        weighs a smoothed jump's ramps as they ask. Where the run adds the corners'
        singular functions and every re-entrant corner takes them
        (:func:`helmpinn.problems.singular.corner_singularities`), a decomposed ``model`` without
        them gets them (its ``singular``), and
        the points are drawn without the corner weights."""
        singular = getattr(model, "singular", None)
        if singular is None and getattr(model, "kind", None) == "decomposed" and self.singular_functions():
            singular = model.singular = corner_singularities(problem)
        problem = dd_driver.sampled_problem(problem, self.decomposition, corners=self.corner_rows(),
                                            singular=singular is not None, radiation=self.radiation())
        return Trainer(problem, model, lr=self.lr, schedule=self.schedule, betas=self.betas,
                       pde_points=self.pde_points, bc_points=self.bc_points, sampling=self.sampling,
                       resample_every=self.resample_every, weights=self.weights, train_fourier=self.train_fourier,
                       eval_every=self.eval_every, seed=self.seed, **run)


def _defaults(problem: Any, model: str, optimizer: str | Driver, memory_bytes: int,
              decomposition: Any) -> dict[str, Any]:
    """The defaults table of a run: the model chosen ("auto" resolved), the optimiser's rules."""
    if isinstance(model, str) and model not in MODELS:
        raise ValueError(f"model: expected one of {MODELS}, a Model or a DecomposedModel, got {model!r}")
    named = optimizer if isinstance(optimizer, str) else "auto"
    if not isinstance(optimizer, (str, Driver)) or named not in ("auto", "gn", *OPTIMIZERS):
        raise ValueError(f"optimizer: expected 'auto', 'gn', one of {OPTIMIZERS} or a "
                         f"helmpinn.training.drivers.Driver, got {optimizer!r}")
    if model == "auto":   # a decomposition above a few wavelengths, when the optimiser trains one
        want = "decomposed" if named == "gn" or (named == "auto" and should_decompose(problem)) \
            else "network"
        trains = optimizer.trains if isinstance(optimizer, Driver) else (want,)
        model = want if trains is None or want in trains else trains[0]
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


def run_plan(problem: Any, model: str = "auto", optimizer: str | Driver = "auto", *, memory_bytes: int = 2 << 30,
             where: str = "run_plan", **overrides: Any) -> RunPlan:
    """The plan of a run on ``problem``.

    ``model``: "network" (one network), "decomposed"
    (:func:`helmpinn.training.dd_driver.decomposed_settings`) or "auto" (decomposed when
    :func:`helmpinn.defaults.should_decompose` and the optimiser allows it).
    ``optimizer``: "auto" (Gauss-Newton for a decomposed model, else
    :func:`helmpinn.defaults.run_settings`'s "auto": LM where its dense system fits
    ``memory_bytes``, else an Adam warm start then matrix-free LM), "gn" (a decomposed model),
    "adam" (one network; with model="decomposed" that model, its settings for Adam), "lbfgs",
    "lm" (one network) or a :class:`~helmpinn.training.drivers.Driver` (run on the chosen model's
    plan). ``overrides`` replace fields of the plan (``hidden``, ``pde_points``, ``steps``,
    ...); ``lm``, ``gn`` and ``weights``: dicts merged into the plan's; ``decomposition``:
    entries replacing the decomposition's rules, the points following them. Counts are checked
    as integers (``where`` names the caller in the messages); an unknown override, or one for
    options the run does not have (``lm`` for Adam), is a ValueError."""
    settings = {**_defaults(problem, model, optimizer, memory_bytes, overrides.get("decomposition")), "seed": 0}
    plan = RunPlan.from_record(settings)
    return plan.with_overrides(where, **{k: v for k, v in overrides.items() if k != "decomposition"})


def train(trainer: Trainer, plan: RunPlan, done: int = 0, *, time_limit: float | None = None,
          since: float | None = None) -> tuple[History, dict[str, Any] | None]:
    """Run the phases of ``plan`` on ``trainer``: for L-BFGS and LM the Adam warm start first
    (what is left of it after ``done`` steps), then the optimiser's ``steps``, each through its
    driver. ``time_limit`` (None: the trainer's) covers both phases, counted from ``since`` (a
    time of ``trainer.clock``; None: now). Returns the history and the L-BFGS summary (None for
    the others); ``trainer.status`` says how the run ended."""
    name = plan.optimizer
    warm = 0 if name == "adam" else int(plan.warm_start)
    limit = trainer.time_limit if time_limit is None else time_limit
    start = trainer.clock() if since is None else since
    if done < warm:
        trainer.fit(warm - done, optimizer="adam", time_limit=limit, since=start)
        if trainer.status is not RunStatus.STEPS_DONE:
            return trainer.history, None
        if limit is not None and trainer.clock() - start >= limit:
            trainer.stop(RunStatus.TIME_LIMIT, f"time limit {limit:g} s reached at step {trainer.step}")
            return trainer.history, None
    options = {"lm": plan.lm, "gn": plan.gn}.get(name) if isinstance(name, str) else None
    driver = make_driver(name, **options) if options is not None else name
    history = trainer.fit(plan.steps + warm - max(done, warm), optimizer=driver, time_limit=limit, since=start)
    return history, trainer.driver.summary() if name == "lbfgs" else None


def polish(trainer: Trainer, plan: RunPlan, *, time_limit: float | None = None,
           since: float | None = None) -> dict[str, Any] | None:
    """The run's last phase: ``plan.lbfgs`` iterations of L-BFGS
    (:meth:`Trainer.polish <helmpinn.Trainer.polish>`) after the optimiser, unless there are none,
    the run diverged, reached its target or was stopped by the user, or its ``time_limit``
    (counted from ``since``, as :func:`train`'s; None: the trainer's, from now) has passed. The
    optimiser's stop (status and message) stays unless the polish has one of its own. Returns
    the polish's summary, or None."""
    n = plan.lbfgs
    if not n or trainer.diverged or trainer.status is RunStatus.TARGET_REACHED or trainer.stop_requested is not None:
        return None
    if time_limit is not None and since is not None and trainer.clock() - since >= time_limit:
        return None
    before = trainer.status, trainer.stop_reason
    summary = trainer.polish(n, time_limit=time_limit, since=since)
    if trainer.status is RunStatus.STEPS_DONE:
        trainer.stop(*before)
    return summary
