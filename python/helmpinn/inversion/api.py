"""``helmpinn.invert``: the medium from receiver data, wavefields and medium together.

The method (docs/guide/inversion.md; the joint residual in :mod:`helmpinn.inversion.joint`, the
step in :mod:`helmpinn.inversion.solver`): every wavefield (frequency f, source s) is a small
Fourier-feature network, the medium ``m = 1/v²`` a cubic B-spline on a grid of spacing
``λ_min / per_wavelength`` (``λ_min = v_min / f_max``, v_min the lower bound, or the initial
model's least velocity without bounds); the loss is the
PDE residual of every wavefield in the medium plus its data misfit plus the medium's gradient
regularisation, minimised by Levenberg-Marquardt on all unknowns with the exact Jacobian
(the wavefield reconstruction idea: the fields need not solve the PDE exactly in the current
medium while the medium is wrong).

**Frequency continuation.** One stage per frequency, lowest first; a stage's unknowns are its
frequency's wavefields and the medium (carried over from stage to stage). How a stage's
wavefields start (``warm_start``):

- "fd" (default): the scattered-field form of :mod:`~helmpinn.inversion.joint`. The forward
  solution ``u₀`` in the stage's starting medium is computed by finite differences (one
  :class:`~helmpinn.reference.FDOperator` factorisation per stage for all sources, grid spacing
  ``λ/12`` or half the narrowest source width), and each network holds ``u − u₀``, starting
  near 0 (its output layer scaled by 1e-3);
- "previous": the network holds the whole field, started from the previous frequency's network
  of the same source (the first stage: fitted to the finite-difference field by ``fit_steps``
  LM steps at its PDE points). Measured on the ring case (4 sources, frequencies 2 and 3, 10
  steps each): "fd" 0.69, "previous" diverged (its fitted networks started with a 20 % data
  misfit and a 25 % PDE residual).

**Weights.** ``lambda_data`` weighs the data rows against the PDE rows (module docstring of
:mod:`~helmpinn.inversion.joint`: both are relative to the data's root mean square ``u_f``, the PDE
rows further divided by ``k_f²``); ``regularization`` is β in ``β L²/|box| ∫ |∇m/m_ref|²``
(m_ref the initial medium's mean) in the first stage, and ``regularization_decay`` times the
previous stage's in every later one: the rule is a fixed β relative to the data and PDE terms, which
are both normalised, so one value serves surveys of any amplitude and size. The default β = 1e-6:
the regularisation is part of what the joint loss's minimiser trades against the networks'
approximation error, and a larger one pulls the medium flat (ring case, 26 steps a frequency:
velocity error 0.46 with 1e-4, 0.26 with 1e-5; 300 s on idle cores with the decay below: 0.194
with 1e-5, 0.160 with 1e-6; crosswell, 50 steps a frequency: 0.795 and 0.788;
docs/guide/inversion.md). The default decay 0.1: once the
lowest frequency has moved the medium most of the way, the data and PDE terms are small and even
1e-5 holds the medium back (ring case, 4 sources, 20 steps at f = 3 from the medium of 40 steps
at f = 2: velocity error 0.213 with β = 1e-5, 0.198 with 1e-6, 0.195 with 0).

**Time.** ``time_limit`` (seconds, wall clock) is shared among the stages, the first (lowest
frequency) taking :data:`FIRST_STAGE_SHARE` = 2 shares and every other one 1, the remainder of a
stage that ended early passed on: the first stage moves the medium from the start and was still
improving it fast when an equal share ran out (ring case: 26 / 26 / 26 steps 0.26, 40 / 20 / 20
steps 0.20; docs/guide/inversion.md); ``max_steps`` caps the
steps of a stage; a stage also ends when the loss fell by less than ``tol`` (relative) over a step.
A step that starts before a stage's deadline runs to its end, so a run can exceed the limit by
one step.

**Stopping and continuing.** ``callbacks`` see every history entry; a true return value stops
the run after the step with status 3 and a ``resume`` state in the result (the stage and step,
the stage's starting medium, LM's λ, ν and damping diagonals). ``start=`` continues such a
result: the stage's wavefields are built again from its starting medium, each wavefield's
points drawn from its own generator seeded ``(seed, f, s)``, and the networks, medium and LM
state restored, so the continued run repeats the uninterrupted one step for step.

**Ranks.** ``comm``: each rank holds a contiguous block of every stage's sources
(:mod:`helmpinn.inversion.parallel`); the sums the medium needs are Allreduced, the networks
gathered at the end.
"""
from __future__ import annotations

import hashlib
import math
import os
import time
import warnings
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from numpy.typing import NDArray

from .. import _core
from .._checks import integer, real_number, same_settings
from ..problems.batch import Batch
from ..problems.geometry import Box
from ..optim.lm import CoreResiduals, LevenbergMarquardt
from ..models.model import Model
from ..problems.pml import PML
from ..problems import Problem, Sommerfeld
from ..reference import FDOperator
from ..problems.sources import PointSource
from .joint import JointResiduals, WavefieldRows
from .medium import SplineMedium
from .parallel import Ranks
from .result import STATUS, Inversion
from .solver import ArrowheadLM

__all__ = ["invert", "WARM_STARTS", "illuminated_points", "velocity_error"]

WARM_STARTS = ("fd", "previous")
#: Default PDE points per wavefield: at least this many per network parameter. With about as
#: many points as parameters a network fits the data between the points at little PDE cost and
#: the medium barely moves (measured on the ring case: one Gauss-Newton step from the start took
#: the velocity error to 0.98 with 1.1 points a parameter, 0.74 with 4).
POINTS_PER_PARAMETER = 4
#: The first stage's share of the time limit against 1 for every later stage (module docstring).
FIRST_STAGE_SHARE = 2.0
#: The regularisation weight β of the first frequency stage when :func:`invert` is given none
#: (module docstring, Weights).
DEFAULT_REGULARIZATION = 1e-6


def _stage_deadline(t_call: float, time_limit: float, now: float, stage: int, stages: int) -> float:
    """When stage ``stage`` of ``stages`` must end: the time left (``t_call + time_limit - now``)
    shared among it and the later stages, stage 0 taking :data:`FIRST_STAGE_SHARE` shares and
    every other stage 1 (module docstring, Time)."""
    shares = [FIRST_STAGE_SHARE if k == 0 else 1.0 for k in range(stage, stages)]
    remaining = time_limit - (now - t_call)
    return t_call + time_limit - remaining * (1.0 - shares[0] / sum(shares))


def _core_params(dim: int, network: Sequence[int]) -> int:
    return int(_core.ModelSpec(dim, *network).num_params)


def _check_survey(survey: Any, domain: Box, pml: PML | None) -> None:
    for name in ("sources", "receivers", "frequencies", "data"):
        if not hasattr(survey, name):
            raise TypeError(f"invert: survey must be a helmpinn.Survey (no attribute {name!r})")
    if callable(getattr(survey, "validate", None)):
        survey.validate(domain=domain, pml=pml)
    F, S, R = len(survey.frequencies), len(survey.sources), len(survey.receivers)
    data = np.asarray(survey.data)
    if F == 0 or S == 0 or R == 0 or data.shape != (F, S, R) or not np.all(np.isfinite(data)):
        raise ValueError(f"invert: survey: need data [F, S, R] = [{F}, {S}, {R}] of finite values, "
                         f"at least one of each, got shape {data.shape}")


def _velocity(where: str, v: Any) -> Callable:
    if callable(v):
        return v
    value = real_number("invert", where, v, low=0.0)
    return lambda x: np.full(len(x), value)


def illuminated_points(survey: Any, domain: Box, n: int = 81,
                       region: Callable[[NDArray], NDArray] | None = None) -> NDArray[np.float64]:
    """Points of a regular grid over the domain inside the convex hull of the sources and
    receivers (the region the survey illuminates), where the velocity error is measured; with
    ``region`` (x [N, d] -> bool [N]) the grid's points where it is true instead."""
    from scipy.spatial import Delaunay

    if region is not None:
        xs = [np.linspace(a, b, n) for a, b in zip(domain.lo, domain.hi)]
        pts = np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1)
        inside = np.asarray(region(pts), bool).reshape(-1)
        if inside.shape != (len(pts),) or not np.any(inside):
            raise ValueError(f"invert: region must return one bool per point, true somewhere in the "
                             f"box; got shape {inside.shape} with {int(np.sum(inside))} true")
        return pts[inside]
    pos = [np.asarray(s.position) for s in survey.sources if isinstance(s, PointSource)]
    hull = np.concatenate([np.asarray(survey.receivers, np.float64), np.reshape(pos, (-1, domain.dim))])
    xs = [np.linspace(a, b, n) for a, b in zip(domain.lo, domain.hi)]
    pts = np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1)
    try:
        inside = Delaunay(hull).find_simplex(pts) >= 0
    except Exception:   # a degenerate hull (collinear positions): the whole domain
        inside = np.ones(len(pts), bool)
    return pts[inside]


def velocity_error(v: Callable, true: Callable, initial: Callable, x: NDArray) -> float:
    """``‖v − v_true‖ / ‖v_true − v_init‖`` over the points x."""
    t = np.asarray(true(x), np.float64)
    return float(np.linalg.norm(np.asarray(v(x)) - t) / max(np.linalg.norm(t - np.asarray(initial(x))), 1e-300))


def _problem(domain, pml, f, medium, c, source, said: set, source_share=None,
             pml_share=None) -> Problem:
    """The Problem of one wavefield in the medium ``m(c)`` (κ = ω² m exactly, the spline); its
    UserWarnings (a source near the PML) are collected in ``said`` and given once by
    :func:`invert`; ``said=None`` drops them (the scattered-field form, whose networks do not
    hold the source's near field)."""
    omega2 = (2 * math.pi * f) ** 2
    kappa = lambda x: omega2 * medium.values(c, x)   # noqa: E731
    kw: dict[str, Any] = {"pml": pml} if pml is not None else {}
    if pml is None:
        kw["bcs"] = {"*": Sommerfeld(lambda x: np.sqrt(np.maximum(kappa(x), 0.0)))}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", UserWarning)
        problem = Problem(domain, kappa=kappa, source=source, source_share=source_share,
                          pml_share=pml_share if pml is not None else None, **kw)
    for w in caught if said is not None else ():
        if str(w.message) not in said:
            said.add(str(w.message))
            warnings.warn(str(w.message), w.category, stacklevel=4)
    return problem


def _forward(problems: Sequence[Problem], h: float) -> list:
    """The finite-difference fields (callables x -> complex) of problems that differ only in
    their source: one factorisation of :class:`helmpinn.reference.FDOperator` for all."""
    op = FDOperator(problems[0], h)
    lu = op.factorize()
    fields = lu.solve(np.stack([op.rhs(p.source_at) for p in problems], axis=1))
    return [op.solution(fields[:, j]) for j in range(len(problems))]


def _fit(model: Model, x: NDArray, y: NDArray, steps: int) -> None:
    """Fit the network to the values y at the points x by ``steps`` LM steps (in place)."""
    res = CoreResiduals(model.workspace(), Batch(x_data=x, y=y, dtype=np.float64))
    lm = LevenbergMarquardt(res, solver="primal", blas_threads=None, geodesic=False)
    for _ in range(int(steps)):
        lm.step(model.params)


class _Run:
    """The state of one :func:`invert` call shared by its stages: the survey's arrays, the
    history, the networks, the callbacks' stop request and this rank's share of the sources."""

    def __init__(self, survey, domain, pml, options: dict[str, Any], ranks: Ranks):
        self.survey, self.domain, self.pml, self.o, self.ranks = survey, domain, pml, options, ranks
        self.freqs = np.asarray(survey.frequencies, np.float64)
        self.data = np.asarray(survey.data, np.complex128)
        self.receivers = np.ascontiguousarray(np.asarray(survey.receivers, np.float64))
        w = getattr(survey, "weights", None)
        w = np.ones(self.data.shape) if w is None else np.asarray(w, np.float64)
        self.weights = w / max(float(np.mean(w)), 1e-300)
        self.mine = ranks.share(len(survey.sources))   # this rank's sources
        self.history: list[dict[str, Any]] = []
        self.params: dict[tuple[int, int], NDArray] = {}
        self.data_fit = np.full(len(self.freqs), np.nan)
        self.said: set = set()
        self.backgrounds: dict[tuple[int, int], Any] = {}
        self.spec = None
        self.t0 = time.perf_counter()
        self.stop = False

    def record(self, stage: int, fi: int, joint: JointResiduals, thetas, c, info) -> None:
        """The history entry of the networks and medium as they are; the callbacks."""
        ws = joint.workspace

        def local():
            num = den = 0.0
            for s, w, theta in zip(self.mine, joint.rows, thetas):
                u = ws.forward(theta, self.receivers, 0)
                num += float(np.sum(np.abs(u[:, 0] + 1j * u[:, 1] - w.target) ** 2))
                den += float(np.sum(np.abs(self.data[fi, s]) ** 2))
            t = joint.terms(thetas, c)
            return [num, den, t["pde"], t["data"], t["boundary"]], t["reg"]

        out, err = self.ranks.run(local)
        parts, reg = out if out is not None else ([0.0] * 5, 0.0)
        num, den, pde, data, boundary = map(float, self.ranks.sum(parts, "the history entry", err))
        entry = {"time": time.perf_counter() - self.t0, "stage": stage, "frequency": float(self.freqs[fi]),
                 "loss": pde + data + boundary + reg, "data_misfit": math.sqrt(num / max(den, 1e-300)),
                 "pde_residual": math.sqrt(pde), "lam": None if info is None else info.lam,
                 "accepted": None if info is None else info.accepted}
        if self.o["true"] is not None:
            entry["velocity_error"] = velocity_error(
                joint.medium.gridfield(c, velocity=True), self.o["true"], self.o["initial"], self.o["region"])
        self.history.append(entry)
        self.data_fit[fi] = entry["data_misfit"]

        def call() -> bool:
            asked = [bool(callback(dict(entry))) for callback in self.o["callbacks"]]
            return any(asked)

        if self.o["callbacks"]:   # a stop request on any rank is every rank's; so is an exception
            asked, err = self.ranks.run(call)
            self.stop = self.ranks.any(self.stop or bool(asked), "the callbacks", err)

    def wavefields(self, fi: int, medium: SplineMedium, c: NDArray, previous: Mapping[int, NDArray] | None):
        """This rank's rows and starting networks of the stage, which starts from the medium
        c (module docstring, warm starts). Wavefield (f, s) draws its points from its own
        generator, seeded by ``(seed, f, s)``: the same points whichever rank holds it."""
        o, f = self.o, float(self.freqs[fi])
        u_f = math.sqrt(float(np.mean(np.abs(self.data[fi]) ** 2))) or 1.0
        S = len(self.survey.sources)
        wavelength = o["v_min"] / f
        grown = 0.0 if self.pml is None else self.pml.width * self.pml.sides(self.domain.dim).sum(axis=1)
        area = float(np.prod(np.asarray(self.domain.hi) - np.asarray(self.domain.lo) + grown))
        P = _core_params(self.domain.dim, o["network"])
        n_pde = o["pde_points"] or int(max(POINTS_PER_PARAMETER * P, 36 * area / wavelength ** 2))
        n_bc = o["boundary_points"] or int(max(64, 32 * math.sqrt(area) / wavelength))
        scattered = o["warm_start"] == "fd"
        sources = [self.survey.sources[s] for s in self.mine]
        problems = [_problem(self.domain, self.pml, f, medium, c, source, None if scattered else self.said,
                             0.0 if scattered else None, o["pml_share"]) for source in sources]
        widths = [s.width for s in self.survey.sources if isinstance(s, PointSource) and s.width]
        h = min([wavelength / 12] + [w / 2 for w in widths])
        fields = _forward(problems, h) if problems and (scattered or previous is None) else [None] * len(problems)
        rows, thetas = [], []
        for s, problem, field in zip(self.mine, problems, fields):
            w = WavefieldRows(problem, medium, (2 * math.pi * f) ** 2, self.receivers, self.data[fi, s],
                              self.weights[fi, s], pde_points=n_pde, boundary_points=n_bc,
                              lambda_data=o["lambda_data"], scale=1.0 / (u_f * math.sqrt(S)),
                              rng=np.random.default_rng([o["seed"], fi, s]),
                              background=field if scattered else None, background_medium=c)
            model = Model.create(self.domain.dim, *o["network"], dtype="float64",
                                 seed=o["seed"] + 1000 * fi + s, problem=problem)
            if scattered:   # u_s starts near 0: the output layer scaled down
                last = max(int(k[1:]) for k in model.views if k.startswith("W"))
                model.views[f"W{last}"][:] *= 1e-3
                model.views[f"b{last}"][:] *= 1e-3
                self.backgrounds[(fi, s)] = (field.axes, field.values)
            elif previous is not None:
                model.params[:] = previous[s]
            else:
                _fit(model, w.x_pde, field(w.x_pde), o["fit_steps"])
            rows.append(w)
            thetas.append(np.array(model.params, copy=True))
            self.spec = model.spec
        if self.spec is None:   # a rank without wavefields
            self.spec = _core.ModelSpec(self.domain.dim, *o["network"])
        return rows, thetas


def _stage(run: _Run, stage: int, fi: int, medium, c, reg, m_bounds, deadline, previous, resume=None):
    """One frequency's stage, from its start or from a stopped run's ``resume`` state (its
    networks, medium, LM state and step count); returns ``(c, thetas, status)``, status 3 when a
    callback asked to stop (then ``run.checkpoint`` says where)."""
    o = run.o
    c_start = c if resume is None else resume["stage_coefficients"]
    built, err = run.ranks.run(lambda: run.wavefields(fi, medium, c_start, previous))
    run.ranks.sum([], "the stage's wavefields", err)
    rows, thetas = built
    joint = JointResiduals(rows, run.spec, medium, reg)
    lm = ArrowheadLM(joint, bounds=m_bounds, varpro=o["varpro"], ranks=run.ranks)
    if resume is None:
        run.record(stage, fi, joint, thetas, c, None)
        done, loss = 0, run.history[-1]["loss"]
    else:
        thetas = [np.array(o["start"].params[(fi, s)], copy=True) for s in run.mine]
        lm.set_state({"lam": resume["lam"], "nu": resume["nu"], "Dm": resume["Dm"],
                      "D": None if resume["D"] is None else [resume["D"][s] for s in run.mine]})
        done, loss = resume["steps"], resume["loss"]
    status = 0
    for n in range(done, o["max_steps"]):
        if run.ranks.any(time.perf_counter() >= deadline, "the stage's deadline"):
            status = 1
            break
        info, c = lm.step(thetas, c)
        run.record(stage, fi, joint, thetas, c, info)
        if not info.accepted:
            if lm.lam >= lm.lam_max:
                status = 2
                break
        elif loss - info.loss < o["tol"] * loss:
            break
        else:
            loss = info.loss
        if run.stop and n + 1 < o["max_steps"]:
            state = lm.state()
            D = run.ranks.gather(dict(zip(run.mine, state["D"])))
            run.checkpoint = {"stage": stage, "steps": n + 1, "loss": loss, "lam": state["lam"],
                              "nu": state["nu"], "stage_coefficients": c_start, "Dm": state["Dm"],
                              "D": np.stack([D[s] for s in range(len(run.survey.sources))])}
            status = 3
            break
    for s, theta in zip(run.mine, thetas):
        run.params[(fi, s)] = theta
    return c, thetas, status


def _settings(survey, domain: Box, pml: PML | None, m_bounds, o: dict[str, Any]) -> dict[str, Any]:
    """What a resumed run must share with the run it continues (JSON values): the options that
    shape the unknowns and the steps, the bounds, the box, the PML and a digest of the survey."""
    digest = hashlib.sha256()
    for a in (survey.frequencies, survey.receivers, survey.data, getattr(survey, "weights", None)):
        if a is not None:
            digest.update(np.ascontiguousarray(a).tobytes())
    for source in survey.sources:
        digest.update(repr(source).encode())
    out = {k: o[k] for k in _SAME}
    out["network"] = list(o["network"])
    out.update(bounds=None if m_bounds is None else [float(b) for b in m_bounds], domain=[domain.lo.tolist(),
               domain.hi.tolist()], pml=None if pml is None else float(pml.width),
               pml_faces=None if pml is None else pml.faces_record(domain.dim), survey=digest.hexdigest())
    return out


#: The options a resumed run must give as the run it continues did (with the survey, the box,
#: the PML and the bounds); ``max_steps``, ``time_limit``, ``callbacks`` and ``comm`` may change.
_SAME = ("network", "seed", "pde_points", "boundary_points", "per_wavelength", "lambda_data",
         "regularization", "regularization_decay", "tol", "pml_share", "varpro", "warm_start", "fit_steps")


#: What a run saved before a setting existed ran with (its record lacks the key): a fixed β.
_OLD_RECORD = {"regularization_decay": 1.0}


def _start(start: Any, settings: dict[str, Any], medium: SplineMedium, c_init: NDArray | None) -> Inversion:
    """The saved inversion ``start`` (an Inversion or a path) checked against this call."""
    if not isinstance(start, Inversion):
        if not isinstance(start, (str, os.PathLike)):
            raise TypeError(f"invert: start must be a helmpinn.Inversion or the path of one, got "
                            f"{type(start).__name__}")
        start = Inversion.load(start)
    if start.resume is None:
        raise ValueError(f"invert: start: that inversion ended ({start.message}): nothing to continue; only "
                         f"a run stopped on request (status 3) continues")
    same_settings("invert", {**_OLD_RECORD, **start.resume["settings"]}, settings)
    if start.medium.shape != medium.shape or not np.allclose(start.medium.lo, medium.lo):
        raise ValueError(f"invert: start: its medium grid {start.medium.shape} is not this run's {medium.shape}")
    if c_init is not None and not np.allclose(c_init, start.initial_coefficients, rtol=1e-12, atol=0.0):
        raise ValueError("invert: start: initial is not the initial model of the run it continues (give "
                         "initial=None to take the saved one)")
    return start


def _options(survey, initial, domain, pml, bounds, **kw) -> tuple[dict[str, Any], Any]:
    """Every argument checked (TypeError/ValueError naming it); ``(options, m_bounds)``."""
    if not isinstance(domain, Box):
        raise TypeError(f"invert: domain must be a helmpinn.problems.geometry.Box, got {type(domain).__name__}")
    if pml is not None and not isinstance(pml, PML):
        raise TypeError(f"invert: pml must be a helmpinn.PML or None, got {type(pml).__name__}")
    _check_survey(survey, domain, pml)
    if kw["warm_start"] not in WARM_STARTS:
        raise ValueError(f"invert: warm_start must be one of {WARM_STARTS}, got {kw['warm_start']!r}")
    network = tuple(integer("invert", "network", n, low=1) for n in kw["network"])
    if len(network) != 3:
        raise ValueError(f"invert: network must be (ff_dim, hidden_dim, hidden_layers), got {network}")
    callbacks = list(kw["callbacks"]) + ([] if kw["callback"] is None else [kw["callback"]])
    for cb in callbacks:
        if not callable(cb):
            raise TypeError(f"invert: callbacks must be callables f(entry), got {type(cb).__name__}")
    count = lambda name: None if kw[name] is None else integer("invert", name, kw[name], low=1)  # noqa: E731
    o = dict(
        time_limit=real_number("invert", "time_limit", kw["time_limit"], low=0.0),
        lambda_data=real_number("invert", "lambda_data", kw["lambda_data"], low=0.0),
        regularization=real_number("invert", "regularization", kw["regularization"], low=0.0, low_open=False),
        regularization_decay=real_number("invert", "regularization_decay", kw["regularization_decay"], low=0.0,
                                         low_open=False, high=1.0),
        per_wavelength=real_number("invert", "per_wavelength", kw["per_wavelength"], low=0.0),
        tol=real_number("invert", "tol", kw["tol"], low=0.0, low_open=False),
        max_steps=integer("invert", "max_steps", kw["max_steps"], low=0),
        fit_steps=integer("invert", "fit_steps", kw["fit_steps"], low=0),
        pde_points=count("pde_points"), boundary_points=count("boundary_points"),
        network=network, seed=integer("invert", "seed", kw["seed"], low=0), callbacks=callbacks,
        varpro=bool(kw["varpro"]), warm_start=kw["warm_start"], start=kw["start"],
        pml_share=None if kw["pml_share"] is None else real_number("invert", "pml_share", kw["pml_share"],
                                                                   low=0.0, low_open=False, high=1.0),
        initial=None if initial is None else _velocity("initial", initial),
        true=None if kw["true"] is None else _velocity("true", kw["true"]))
    if o["initial"] is None and kw["start"] is None:
        raise TypeError("invert: initial (a velocity) is required unless start continues a saved run")
    probe = domain.sample_interior(4096, np.random.default_rng(0))
    v_probe = None
    if o["initial"] is not None:
        v_probe = np.asarray(o["initial"](probe), np.float64)
        if v_probe.shape != (len(probe),) or not np.all(np.isfinite(v_probe) & (v_probe > 0)):
            raise ValueError("invert: initial must give finite velocities > 0 at the domain's points")
    m_bounds = None
    if bounds is not None:
        lo_v = real_number("invert", "bounds[0]", bounds[0], low=0.0)
        hi_v = real_number("invert", "bounds[1]", bounds[1], low=lo_v)
        if v_probe is not None and (v_probe.min() < lo_v or v_probe.max() > hi_v):
            raise ValueError(f"invert: bounds ({lo_v:g}, {hi_v:g}) exclude the initial model (its "
                             f"velocities span {v_probe.min():.6g} .. {v_probe.max():.6g})")
        m_bounds = (1.0 / hi_v ** 2, 1.0 / lo_v ** 2)
    elif v_probe is not None:
        lo_v = float(v_probe.min())
    else:
        raise ValueError("invert: with start and without bounds, give initial too (its least velocity "
                         "sets the medium's grid, as in the run being continued)")
    o["v_min"] = lo_v
    return o, m_bounds


def invert(survey: Any, initial: Any, *, domain: Box, pml: PML | None = None,
           bounds: tuple[float, float] | None = None, true: Any = None, time_limit: float = 300.0,
           network: Sequence[int] = (12, 16, 2), pde_points: int | None = None,
           boundary_points: int | None = None, per_wavelength: float = 4.0, lambda_data: float = 1.0,
           regularization: float = DEFAULT_REGULARIZATION, regularization_decay: float = 0.1, max_steps: int = 50, tol: float = 1e-4,
           pml_share: float | None = 0.25, varpro: bool = False,
           warm_start: str = "fd", fit_steps: int = 10, seed: int = 0,
           callbacks: Sequence[Callable[[dict], Any]] = (), callback: Callable[[dict], Any] | None = None,
           start: Inversion | str | os.PathLike | None = None, comm: Any = None,
           region: Callable[[NDArray], NDArray] | None = None) -> Inversion:
    """The medium from a survey's data: wavefields and velocity together (module docstring).

    ``survey``: a :class:`helmpinn.Survey`; ``initial``: the starting velocity (a number or a
    callable such as a GridField); ``domain``: the physical box; ``pml``: a PML around it (None:
    first-order absorbing conditions on the box; a face its ``faces`` leaves out is a free
    surface, u = 0); ``bounds``: ``(v_min, v_max)``, imposed by
    projection (:mod:`helmpinn.inversion.solver`); ``true``: the true velocity, for the history's
    velocity error ``‖v − v_true‖/‖v_true − v_init‖`` inside the hull of the sources and
    receivers, or where ``region(x)`` is true (a callable ``x [N, d] -> bool [N]``, as
    :func:`~helmpinn.reference.fwi`'s: a surface survey's hull is a thin strip) on the regular
    grid of :func:`illuminated_points`; ``network``: (ff_dim, hidden_dim, hidden layers) of every wavefield's network;
    ``pde_points`` / ``boundary_points`` per wavefield (default: 6 per wavelength along each
    axis over the box and its layer, at least :data:`POINTS_PER_PARAMETER` per network
    parameter; and 8 per wavelength on its outer boundary, at least 64); ``lambda_data``,
    ``regularization``: the weights of the module docstring (``regularization`` the first
    stage's; ``regularization_decay``, in [0, 1], the factor from one stage's to the next's); ``warm_start``: "fd" (the
    scattered-field form on a forward solve) or "previous"; ``fit_steps``: LM steps of a
    network's fit to the forward solution where one is fitted ("previous", first stage);
    ``pml_share``: the share of the PDE points in the PML (None: by its area; the scattered
    field decays there).

    ``callbacks``: functions ``f(entry)`` called with each history entry (a stage's start and
    every step); a true return value asks the run to stop after the step: it returns an
    Inversion with status 3 whose ``resume`` state lets ``invert(..., start=it)`` continue it
    (``callback``: one more such function). ``start``: a stopped Inversion (or the path of its
    file) to continue at the stage and step where it stopped, from its medium, networks and LM
    state; the call must give the same survey, box, PML, bounds and options (``max_steps``,
    ``time_limit``, ``callbacks`` and ``comm`` may change; ``initial`` may be None), else
    ValueError naming what differs; ``time_limit`` is then this call's. ``comm``: an mpi4py
    communicator; every rank makes the same call and holds a share of each stage's wavefields
    (:mod:`helmpinn.inversion.parallel`); every rank returns the same Inversion.
    Bad arguments raise TypeError/ValueError before any work.
    """
    ranks = Ranks(comm)
    o, m_bounds = _options(survey, initial, domain, pml, bounds, true=true, time_limit=time_limit,
                           network=network, pde_points=pde_points, boundary_points=boundary_points,
                           per_wavelength=per_wavelength, lambda_data=lambda_data,
                           regularization=regularization, regularization_decay=regularization_decay,
                           max_steps=max_steps, tol=tol, pml_share=pml_share,
                           varpro=varpro, warm_start=warm_start, fit_steps=fit_steps, seed=seed,
                           callbacks=callbacks, callback=callback, start=start)
    if region is not None and not callable(region):
        raise TypeError(f"invert: region must be a callable x [N, d] -> bool [N] or None, got "
                        f"{type(region).__name__}")
    region_points = None if true is None else illuminated_points(survey, domain, region=region)
    medium = SplineMedium.for_wavelength(domain.lo, domain.hi, o["v_min"] / float(np.max(survey.frequencies)),
                                         o["per_wavelength"])
    c_init = None
    if o["initial"] is not None:
        c_init = medium.fit(lambda x: 1.0 / np.asarray(o["initial"](x), np.float64) ** 2)
        c_init = c_init if m_bounds is None else np.clip(c_init, *m_bounds)
    settings = _settings(survey, domain, pml, m_bounds, o)
    if start is not None:
        o["start"] = _start(start, settings, medium, c_init)
        c_init = o["start"].initial_coefficients
    run = _Run(survey, domain, pml, o, ranks)
    if true is not None:
        o["region"] = region_points
        o["initial"] = medium.gridfield(c_init, velocity=True)
    reg = None
    if o["regularization"] > 0:
        reg = math.sqrt(o["regularization"]) * medium.gradient_rows(float(np.mean(c_init)))
    return _continuation(run, medium, c_init, reg, m_bounds, settings)


def _continuation(run: _Run, medium: SplineMedium, c_init: NDArray, reg, m_bounds, settings) -> Inversion:
    """The stages, lowest frequency first (from where a resumed run stopped), and the result."""
    o, ranks = run.o, run.ranks
    order = np.argsort(run.freqs, kind="stable")
    c, first, status, resume, stopped = c_init.copy(), 0, 0, None, False
    if o["start"] is not None:   # continue a stopped run
        saved = o["start"]
        resume = dict(saved.resume)
        c, first, status = saved.coefficients.copy(), resume["stage"], resume["status"]
        run.history = [dict(h) for h in saved.history]
        # each rank keeps its own sources' networks: the gather at the end takes every rank's
        # dict, and a rank holding another's saved (stale) network would overwrite its new one
        run.params = {k: v.copy() for k, v in saved.params.items() if k[1] in run.mine}
        run.backgrounds = {k: v for k, v in saved.backgrounds.items() if k[1] in run.mine}
        run.data_fit = saved.data_fit.copy()
        run.t0 -= resume["elapsed"]
        resume = resume if resume["steps"] > 0 else None
    t_call = time.perf_counter()
    run.checkpoint = None
    for stage in range(first, len(order)):
        fi = int(order[stage])
        if stage > first and run.stop:   # a stop asked for at the end of the last stage
            run.checkpoint = {"stage": stage, "steps": 0, "loss": None, "lam": 1.0, "nu": 2.0,
                              "stage_coefficients": c, "Dm": None, "D": None}
            stopped = True
            break
        deadline = _stage_deadline(t_call, o["time_limit"], time.perf_counter(), stage, len(order))
        previous = None
        if o["warm_start"] == "previous" and stage > 0:
            previous = {s: run.params[(int(order[stage - 1]), s)] for s in run.mine}
        stage_reg = None if reg is None else reg * math.sqrt(o["regularization_decay"]) ** stage
        c, _, st = _stage(run, stage, fi, medium, c, stage_reg, m_bounds, deadline, previous,
                          resume if stage == first else None)
        if st == 3:
            stopped = True
            break
        status = max(status, st)
    run.params = ranks.gather(run.params)
    run.backgrounds = ranks.gather(run.backgrounds)
    state = None
    if stopped:   # status: the stages' so far, for the resumed run's end
        state = dict(run.checkpoint, settings=settings, elapsed=time.perf_counter() - run.t0, status=status)
        status = 3
    true_nodes = None
    if o["true"] is not None:
        true_nodes = np.asarray(o["true"](medium.node_points()), np.float64).reshape(medium.shape)
    return Inversion(medium, c, run.freqs, run.spec, run.params, run.history, status=status,
                     message=STATUS[status], initial_coefficients=c_init,
                     true_velocity=true_nodes, data_fit=run.data_fit, backgrounds=run.backgrounds,
                     resume=state)
