"""Classical frequency-domain full-waveform inversion (FWI) by the adjoint state, on
:func:`~helmpinn.reference.fd_solve`'s finite-difference operator: :func:`fwi`.

The unknown is the squared slowness ``m = 1/v²`` at the nodes of a regular grid over the
physical box (the medium grid), between which it is the cubic B-spline interpolant of a
:class:`~helmpinn.GridField` (outside the box, in the PML, its value at the nearest point of the
box). ``m`` rather than ``v`` because κ = ω² m is linear in it: the operator's derivative with
respect to a node value is ω² times the basis function on the diagonal, so the gradient is one
product of the forward and adjoint fields per node, and the misfit is closer to quadratic
in m than in v. The default spacing of the medium grid is a quarter of the shortest wavelength
(the lower velocity bound over the highest frequency): the finest detail the data resolve is
about half a wavelength.

For a group of frequencies the misfit is::

    J(m) = Σ_f (1/E_f) ½ Σ_{s,r} w_{fsr}² |P_r u_{fs}(m) − d_{fsr}|²  +  ½ α ⟨|L ∇(m/m₀)|²⟩,

``A_f(m) u_{fs} = q_s`` the fourth-order finite-difference system (the PML's coefficients
fixed per frequency by the initial model, so only κ depends on m), ``P_r`` the cubic-spline
interpolation to receiver r, ``E_f = ½ Σ |w d|²`` the frequency's data energy (each frequency
weighs the same), ``w`` the survey's weights (1 without), and the Tikhonov term the mean over
the medium grid of the squared gradient of ``m/m₀`` (``m₀`` the mean initial m, L the box's
size per axis): dimensionless, so that ``α = regularization`` compares directly with the
relative squared data misfit (the rule: ``α ≈ max(10 σ², 1e-5)`` for data of relative noise
level σ, measured on the ring case of benchmarks/bench_inversion.py; docs/guide/fwi.md).

Per frequency and medium the operator is assembled once (:class:`~helmpinn.reference.FDOperator`:
only its diagonal changes with m) and factorised once; the same LU solves every source's
forward problem and, with its conjugate transpose, every adjoint problem
``A^H λ_s = −P^T W² (P u_s − d_s)/E_f``; the gradient is ``∂J/∂m_i = Re Σ_s ω² conj(λ_s) u_s``
at the finite-difference nodes, carried to the medium grid by the transpose of the spline
interpolation. SciPy's L-BFGS-B minimises J within the velocity bounds (bounds on m at the
nodes), frequency group after frequency group, low to high, each starting from the last.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from .._checks import integer, real_number
from ..problems.geometry import Box
from ..problems.media import GridField
from ..problems.pml import PML
from ..problems import Problem, Sommerfeld
from ..problems.sources import WIDTH_PER_WAVELENGTH, PointSource
from ..survey import Survey
from .fd import FDOperator, check_memory

__all__ = ["fwi", "FWIResult", "FWIObjective", "NODES_PER_WAVELENGTH", "MEDIUM_SPACING"]

#: Finite-difference nodes per shortest wavelength of a frequency group (fourth order).
NODES_PER_WAVELENGTH = 10
#: The medium grid's default spacing, in shortest wavelengths of the whole survey.
MEDIUM_SPACING = 0.25


def _spline_matrix(nodes: NDArray, x: NDArray) -> NDArray[np.float64]:
    """``[len(x), len(nodes)]``: the not-a-knot cubic spline through values at ``nodes`` (as
    :class:`~helmpinn.GridField` and :class:`~helmpinn.reference.FDSolution` interpolate),
    evaluated at ``x`` clipped to the nodes' range."""
    from scipy.interpolate import make_interp_spline

    spline = make_interp_spline(nodes, np.eye(len(nodes)), k=3)
    return np.asarray(spline(np.clip(x, nodes[0], nodes[-1])), np.float64)


def _apply_axes(mats: Sequence[NDArray], x: NDArray, first: int = 0) -> NDArray:
    """``x`` with ``mats[a]`` applied along its axis ``first + a`` (a tensor-product map)."""
    for a, m in enumerate(mats):
        x = np.moveaxis(np.tensordot(m, x, axes=(1, first + a)), 0, first + a)
    return x


class FWIObjective:
    """The misfit J of one frequency group and its adjoint-state gradient (see the module
    docstring), as a function of the medium grid's node values of ``m/m_scale``.

    ``survey``: a :class:`~helmpinn.Survey`; ``frequencies``: the group (values of the
    survey's); ``domain``, ``pml``: the physical box and its layer (``pml=None``: first-order
    absorbing faces, ``∂u/∂n − i k₀ u = 0`` with the initial model's mean wavenumber);
    ``medium_axes``: the medium grid's nodes per axis; ``m_initial``: the initial node values
    of m (it fixes the PML's strength and k₀); ``h``: the finite-difference spacing;
    ``regularization``: α; ``m_scale``: the unit of the unknowns; ``source_width``: the width
    given to a PointSource without one.
    """

    def __init__(self, survey, frequencies: Sequence[float], *, domain, pml, medium_axes,
                 m_initial: NDArray, h: float, regularization: float, m_scale: float,
                 source_width: float | None = None):
        self.survey, self.m_scale, self.alpha = survey, float(m_scale), float(regularization)
        self.medium_axes = [np.asarray(a, np.float64) for a in medium_axes]
        self.shape = tuple(len(a) for a in self.medium_axes)
        lo, hi = domain.bounds
        self.extent = hi - lo
        spacing = np.array([a[1] - a[0] for a in self.medium_axes])
        m0 = GridField(m_initial, lo, spacing, outside="nearest")
        sources = [_with_width(s, source_width) for s in survey.sources]
        self.freq_index = [int(np.flatnonzero(survey.frequencies == f)[0]) for f in frequencies]
        self.parts = []
        for i in self.freq_index:
            omega2 = (2 * math.pi * survey.frequencies[i]) ** 2
            kappa0 = (lambda w2: (lambda x: w2 * m0(x)))(omega2)
            if pml is not None:
                problem = Problem(domain, kappa0, pml=pml)
            else:
                k0 = math.sqrt(omega2 * float(np.mean(m_initial)))
                problem = Problem(domain, kappa0, bcs={"*": Sommerfeld(k0)})
            op = FDOperator(problem, h)
            to_fd = [_spline_matrix(a, ax) for a, ax in zip(self.medium_axes, op.axes)]
            to_rec = [_spline_matrix(ax, survey.receivers[:, j]) for j, ax in enumerate(op.axes)]
            rhs = np.stack([op.rhs(s) for s in sources], axis=1)
            w = np.ones(survey.data[i].shape) if survey.weights is None else survey.weights[i]
            energy = 0.5 * float(np.sum(np.abs(w * survey.data[i]) ** 2))
            self.parts.append(dict(op=op, omega2=omega2, to_fd=to_fd, to_rec=to_rec, rhs=rhs,
                                   w2=w * w, data=survey.data[i], energy=max(energy, 1e-300)))
        self.n_solves = 0

    def medium_on_grid(self, x: NDArray, part: dict) -> NDArray:
        """m at every finite-difference node of ``part``'s grid."""
        return _apply_axes(part["to_fd"], x.reshape(self.shape) * self.m_scale)

    def predict(self, x: NDArray) -> list[NDArray[np.complex128]]:
        """The data ``[S, R]`` per frequency of the group for the medium x."""
        return [self._forward(x, part)[1] for part in self.parts]

    def _forward(self, x: NDArray, part: dict):
        op = part["op"]
        m = self.medium_on_grid(x, part).ravel()[op.interior_nodes]
        lu = op.factorize(part["omega2"] * m)
        u = lu.solve(part["rhs"])                                     # [N, S]
        fields = u.T.reshape((u.shape[1],) + op.shape)
        d = len(op.shape)
        letters = "ijk"[:d]
        ops = ",".join(f"r{c}" for c in letters)
        pred = np.einsum(f"{ops},s{letters}->sr", *part["to_rec"], fields, optimize=True)
        self.n_solves += u.shape[1]
        return lu, pred, u, ops, letters

    def data_misfit(self, x: NDArray) -> float:
        return float(sum(0.5 * np.sum(part["w2"] * np.abs(p - part["data"]) ** 2) / part["energy"]
                         for part, p in zip(self.parts, self.predict(x))))

    def regularizer(self, x: NDArray) -> tuple[float, NDArray]:
        """``½ α ⟨|L ∇ x|²⟩`` over the medium grid (first differences) and its gradient."""
        x = x.reshape(self.shape)
        value, grad = 0.0, np.zeros(self.shape)
        for a, ax in enumerate(self.medium_axes):
            scale = (self.extent[a] / (ax[1] - ax[0])) ** 2 / x.size
            diff = np.diff(x, axis=a)
            value += 0.5 * self.alpha * scale * float(np.sum(diff * diff))
            g = self.alpha * scale * diff
            pad = [(0, 0)] * x.ndim
            pad[a] = (1, 0)
            g_lo = np.pad(g, pad)
            pad[a] = (0, 1)
            grad += g_lo - np.pad(g, pad)
        return value, grad.ravel()

    def __call__(self, x: NDArray) -> tuple[float, NDArray[np.float64], float]:
        """``(J, ∂J/∂x, data part of J)`` at the node values x (of m/m_scale)."""
        total, grad = 0.0, np.zeros(self.shape)
        for part in self.parts:
            lu, pred, u, ops, letters = self._forward(x, part)
            res = pred - part["data"]
            total += 0.5 * float(np.sum(part["w2"] * np.abs(res) ** 2)) / part["energy"]
            op = part["op"]
            source = np.einsum(f"sr,{ops}->s{letters}", part["w2"] * res, *part["to_rec"],
                               optimize=True).reshape(u.shape[1], -1).T / part["energy"]
            lam = lu.solve(-source, adjoint=True)
            g = np.zeros(op.size)
            g[op.interior_nodes] = part["omega2"] * np.real(
                np.sum(np.conj(lam) * u, axis=1))[op.interior_nodes]
            grad += _apply_axes([m.T for m in part["to_fd"]], g.reshape(op.shape)) * self.m_scale
            self.n_solves += u.shape[1]
        reg, reg_grad = self.regularizer(x)
        return total + reg, grad.ravel() + reg_grad, total


@dataclass
class FWIResult:
    """What :func:`fwi` returns: ``velocity`` (a :class:`~helmpinn.GridField` on the medium
    grid, ``1/sqrt(m)`` at its nodes), ``medium`` (m = 1/v², the same grid), ``history``
    (per L-BFGS-B iteration: ``misfit`` (the data part of J), ``objective``, ``time`` (s since
    the start), ``frequencies`` (the group), ``velocity_error`` when ``true`` was given),
    ``initial_error``, ``stopped`` (why it ended), ``seconds`` and ``n_solves`` (forward and
    adjoint solves, one per source each)."""

    velocity: Any
    medium: Any
    history: dict = field(default_factory=dict)
    stopped: str = ""
    seconds: float = 0.0
    n_solves: int = 0
    initial_error: float | None = None


class _Stop(Exception):
    pass


def _with_width(source, width: float):
    """A PointSource without a width gets ``width``; anything else is used as given."""
    if isinstance(source, PointSource) and source.width is None:
        return PointSource(source.position, source.amplitude, width)
    return source


def _velocity_values(name: str, value, x: NDArray) -> NDArray[np.float64]:
    if callable(value):
        v = np.asarray(value(x), np.float64)
    else:
        v = np.full(len(x), real_number("fwi", name, value, low=0.0))
    if v.shape != (len(x),) or not np.all(np.isfinite(v) & (v > 0)):
        raise ValueError(f"fwi: {name} must give finite velocities > 0 of shape ({len(x)},) on the "
                         f"physical box, got shape {v.shape}")
    return v


def _groups(frequencies, survey) -> list[list[float]]:
    if frequencies is None:
        return [[float(f)] for f in sorted(set(survey.frequencies.tolist()))]
    groups = []
    for g in frequencies:
        group = [float(f) for f in (g if isinstance(g, (list, tuple, np.ndarray)) else [g])]
        for f in group:
            if not np.any(survey.frequencies == f):
                raise ValueError(f"fwi: frequency {f!r} in frequencies= is not one of the survey's "
                                 f"{survey.frequencies.tolist()}")
        if not group:
            raise ValueError("fwi: frequencies= has an empty group")
        groups.append(group)
    if not groups:
        raise ValueError("fwi: frequencies= gives no group")
    return groups


def _medium_axes(domain, spacing: float) -> list[NDArray]:
    lo, hi = domain.bounds
    n = np.maximum(np.ceil((hi - lo) / spacing - 1e-9).astype(int), 3)
    return [np.linspace(lo[j], hi[j], n[j] + 1) for j in range(len(lo))]


def _region_points(domain, region) -> NDArray:
    x = domain.grid({1: 1001, 2: 101}.get(domain.dim, 31))[0]
    if region is None:
        return x
    keep = np.asarray(region(x), bool)
    if keep.shape != (len(x),) or not keep.any():
        raise ValueError("fwi: region must be a callable x [N, d] -> bool [N], true somewhere in the box")
    return x[keep]


def fwi(survey, initial, *, domain, pml, bounds: tuple[float, float], grid: float | None = None,
        h: float | None = None, frequencies: Sequence | None = None,
        regularization: float = 1e-4, max_iter: int = 50, time_limit: float | None = None,
        callback: Callable | None = None, true: Any = None, region: Callable | None = None,
        nodes_per_wavelength: float = NODES_PER_WAVELENGTH) -> FWIResult:
    """Adjoint-state FWI of ``survey`` from the ``initial`` velocity (see the module docstring).

    ``initial``, ``true``: a number, a callable ``x [N, d] -> [N]`` or a GridField (velocities);
    ``domain``: the physical :class:`~helmpinn.problems.geometry.Box`; ``pml``: its
    :class:`~helmpinn.PML` (None: first-order absorbing faces); ``bounds``: ``(v_min, v_max)``,
    which must contain the initial model; ``grid``: the medium grid's spacing (default
    :data:`MEDIUM_SPACING` × the shortest wavelength, ``v_min / max f``); ``h``: the
    finite-difference spacing (default per frequency group: the group's shortest wavelength
    over ``nodes_per_wavelength``); ``frequencies``: the continuation, a sequence of groups
    (each a frequency of the survey or a list of them; default: each survey frequency alone,
    low to high); ``regularization``: α; ``max_iter``: L-BFGS-B iterations per group;
    ``time_limit``: seconds in all (the current group stops at its next evaluation after it);
    ``callback(info)``: after each iteration with a dict (``group``, ``iteration``,
    ``misfit``, ``time``, ``velocity_error``); returning True stops. ``true``: the true
    velocity, for ``history["velocity_error"]`` = ‖v − v_true‖/‖v_true − v_initial‖ at the
    points of a regular grid of the box where ``region(x)`` is true (default: all). A
    PointSource without a width is given λ/10 of the initial model's shortest wavelength (its
    smallest velocity over the highest frequency; :meth:`~helmpinn.Survey.synthetic` stores the
    widths it used in the survey, so synthetic data and the inversion model the same source).

    Every argument is checked, and every grid's memory estimated, before any solve.
    """
    start = time.perf_counter()
    if not isinstance(survey, Survey):
        raise TypeError(f"fwi: survey must be a helmpinn.Survey, got {type(survey).__name__}")
    if not isinstance(domain, Box):
        raise TypeError(f"fwi: domain must be a helmpinn.problems.geometry.Box, got {type(domain).__name__}")
    if pml is not None and not isinstance(pml, PML):
        raise TypeError(f"fwi: pml must be a helmpinn.PML or None, got {type(pml).__name__}")
    survey.validate(domain, pml)
    if not isinstance(bounds, (tuple, list)) or len(bounds) != 2:
        raise TypeError(f"fwi: bounds must be (v_min, v_max), got {bounds!r}")
    vmin = real_number("fwi", "bounds[0] (v_min)", bounds[0], low=0.0)
    vmax = real_number("fwi", "bounds[1] (v_max)", bounds[1], low=vmin)
    regularization = real_number("fwi", "regularization", regularization, low=0.0, low_open=False)
    max_iter = integer("fwi", "max_iter", max_iter, low=1)
    nodes_per_wavelength = real_number("fwi", "nodes_per_wavelength", nodes_per_wavelength, low=4.0,
                                       low_open=False)
    if time_limit is not None:
        time_limit = real_number("fwi", "time_limit", time_limit, low=0.0)
    if callback is not None and not callable(callback):
        raise TypeError(f"fwi: callback must be callable, got {type(callback).__name__}")
    groups = _groups(frequencies, survey)
    lam_min = vmin / float(survey.frequencies.max())
    spacing = MEDIUM_SPACING * lam_min if grid is None else real_number("fwi", "grid", grid, low=0.0)
    if h is not None:
        h = real_number("fwi", "h", h, low=0.0)
    axes = _medium_axes(domain, spacing)
    nodes = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=1)
    v0 = _velocity_values("initial", initial, nodes)
    outside = (v0 < vmin * (1 - 1e-12)) | (v0 > vmax * (1 + 1e-12))
    if outside.any():
        i = int(np.flatnonzero(outside)[0])
        raise ValueError(f"fwi: bounds ({vmin!r}, {vmax!r}) exclude the initial model: "
                         f"{v0[i]!r} at {nodes[i].tolist()} ({int(outside.sum())} of {len(v0)} nodes)")
    test = _region_points(domain, region)
    v_true = None if true is None else _velocity_values("true", true, test)
    hs = [h if h is not None else vmin / max(g) / nodes_per_wavelength for g in groups]
    olo, ohi = (domain.bounds if pml is None else pml.outer_box(*domain.bounds))
    for hg in hs:
        check_memory(int(np.prod(np.ceil((ohi - olo) / hg - 1e-9) + 1)), domain.dim)

    m_scale = float(np.mean(1.0 / v0**2))
    lam0 = float(v0.min()) / float(survey.frequencies.max())   # the initial model's λ_min
    x = (1.0 / v0**2 / m_scale).ravel()
    shape = tuple(len(a) for a in axes)
    lo = domain.bounds[0]
    step = np.array([a[1] - a[0] for a in axes])

    def velocity_of(xv):
        return GridField((xv.reshape(shape) * m_scale) ** -0.5, lo, step, outside="nearest")

    v_init_test = velocity_of(x)(test)
    denom = None if v_true is None else float(np.linalg.norm(v_true - v_init_test))

    def error_of(xv):
        if v_true is None or not denom:
            return None
        return float(np.linalg.norm(velocity_of(xv)(test) - v_true)) / denom

    history: dict[str, list] = {"misfit": [], "objective": [], "time": [], "frequencies": [],
                                "velocity_error": []}
    initial_error = error_of(x)
    stopped, n_solves = "max_iter in every group", 0
    box = ((1.0 / vmax**2) / m_scale, (1.0 / vmin**2) / m_scale)
    for gi, (group, hg) in enumerate(zip(groups, hs)):
        objective = FWIObjective(survey, group, domain=domain, pml=pml, medium_axes=axes,
                                 m_initial=x.reshape(shape) * m_scale, h=hg,
                                 regularization=regularization, m_scale=m_scale,
                                 source_width=lam0 / WIDTH_PER_WAVELENGTH)
        x, why = _minimise(objective, x, box, max_iter, start, time_limit, callback, history,
                           group, gi, error_of)
        n_solves += objective.n_solves
        if why:
            stopped = why
            break
    return FWIResult(velocity=velocity_of(x), medium=GridField(x.reshape(shape) * m_scale, lo, step,
                                                               outside="nearest"),
                     history=history, stopped=stopped, seconds=time.perf_counter() - start,
                     n_solves=n_solves, initial_error=initial_error)


def _minimise(objective, x, box, max_iter, start, time_limit, callback, history, group, gi,
              error_of):
    """L-BFGS-B on one group from x; returns (the best x, why it stopped early or "")."""
    from scipy.optimize import minimize

    best = {"x": x.copy(), "f": math.inf, "data": math.inf}
    why = {"reason": ""}

    def fun(xv):
        if time_limit is not None and time.perf_counter() - start > time_limit:
            why["reason"] = "time_limit"
            raise _Stop
        f, g, data = objective(xv)
        if f < best["f"]:
            best.update(x=xv.copy(), f=f, data=data)
        return f, g

    def on_iteration(intermediate_result):
        t = time.perf_counter() - start
        err = error_of(best["x"])
        history["misfit"].append(best["data"])
        history["objective"].append(best["f"])
        history["time"].append(t)
        history["frequencies"].append(list(group))
        history["velocity_error"].append(err)
        if callback is not None:
            info = {"group": gi, "iteration": len(history["time"]), "misfit": best["data"],
                    "time": t, "velocity_error": err}
            if callback(info):
                why["reason"] = "callback"
                raise _Stop   # not StopIteration: SciPy before 1.11 would not catch that

    bounds = [box] * len(x)
    try:
        minimize(fun, x, jac=True, method="L-BFGS-B", bounds=bounds, callback=on_iteration,
                 options={"maxiter": max_iter, "maxcor": 20, "ftol": 1e-12, "gtol": 1e-10})
    except _Stop:
        pass
    return best["x"], why["reason"]
