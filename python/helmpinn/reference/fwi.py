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

**Continuing a run.** A run that a callback or the time limit stopped returns a ``resume``
state in its :class:`FWIResult` (saved with it by :meth:`FWIResult.save`): the group and the
iterations done in it, its best medium, the medium the group started from (which fixes the
PML's strength of the group's operator) and the initial model's scale. ``fwi(..., start=it)``
continues the group from that medium for its remaining iterations, then runs the later groups:
the same objective function in every group as the uninterrupted run, the history continued.
L-BFGS-B's memory (its curvature pairs) is not part of the state and starts empty, so a run
continued inside a group takes other steps than the uninterrupted one; one stopped between two
groups continues exactly as the uninterrupted run, bit for bit.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import time
import zipfile
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from numpy.typing import NDArray

from .._checks import integer, real_number, same_settings
from .._files import write_atomic
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


#: The ``format`` entry of :meth:`FWIResult.save`'s file.
FORMAT = "helmpinn-fwi"
_HISTORY = ("misfit", "objective", "time")
_RESUME_ARRAYS = ("x", "group_start", "x_initial")


@dataclass
class FWIResult:
    """What :func:`fwi` returns: ``velocity`` (a :class:`~helmpinn.GridField` on the medium
    grid, ``1/sqrt(m)`` at its nodes), ``medium`` (m = 1/v², the same grid), ``history``
    (per L-BFGS-B iteration: ``misfit`` (the data part of J), ``objective``, ``time`` (s since
    the start), ``frequencies`` (the group), ``velocity_error`` when ``true`` was given),
    ``initial_error``, ``stopped`` (why it ended), ``seconds`` and ``n_solves`` (forward and
    adjoint solves, one per source each; both counting a continued run's earlier part), and
    ``resume``: None when every group ran its course, else the state from which
    ``fwi(..., start=)`` continues (module docstring): ``group``, ``iterations``, ``x``,
    ``group_start``, ``x_initial`` (node values of m / ``m_scale``), ``m_scale``, ``lam0`` (the
    initial model's shortest wavelength), ``settings``, ``elapsed``."""

    velocity: Any
    medium: Any
    history: dict = field(default_factory=dict)
    stopped: str = ""
    seconds: float = 0.0
    n_solves: int = 0
    initial_error: float | None = None
    resume: dict | None = None

    def save(self, path: str | os.PathLike) -> str:
        """Write the result as an ``.npz`` of plain arrays and a JSON header (no pickle), whole
        or not at all (a temporary file renamed into place); returns the path."""
        v, h = self.velocity, self.history
        arrays = {"format": np.array(FORMAT), "velocity": v.values, "medium": self.medium.values,
                  "origin": v.origin, "spacing": v.spacing, "stopped": np.array(self.stopped),
                  "seconds": np.array(self.seconds), "n_solves": np.array(self.n_solves)}
        for key in _HISTORY:
            arrays[key] = np.asarray(h[key], np.float64)
        arrays["velocity_error"] = np.array([np.nan if e is None else e for e in h["velocity_error"]], np.float64)
        header: dict[str, Any] = {"frequencies": [list(g) for g in h["frequencies"]],
                                  "initial_error": self.initial_error, "resume": None}
        if self.resume is not None:
            header["resume"] = {k: v for k, v in self.resume.items() if k not in _RESUME_ARRAYS}
            arrays.update({f"resume_{k}": np.asarray(self.resume[k], np.float64) for k in _RESUME_ARRAYS})
        arrays["header"] = np.array(json.dumps(header))
        return write_atomic(path, lambda fh: np.savez(fh, **arrays))

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FWIResult":
        """Read a file of :meth:`save` (without pickle); ValueError naming the file when it is
        not one, or its content does not fit together."""
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
            header = json.loads(str(a["header"][()]))
            if str(a["format"][()]) != FORMAT or not isinstance(header, dict):
                raise ValueError("not a file of FWIResult.save")
            return cls._from_arrays(a, header)
        except FileNotFoundError:
            raise FileNotFoundError(f"FWIResult.load: no such file {path!r}") from None
        except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile, EOFError) as e:
            raise ValueError(f"FWIResult.load: {path!r} is not a readable fwi result ({e})") from None

    @classmethod
    def _from_arrays(cls, a: dict, header: dict) -> "FWIResult":
        origin, spacing = a["origin"], a["spacing"]
        velocity = GridField(a["velocity"], origin, spacing, outside="nearest")
        medium = GridField(a["medium"], origin, spacing, outside="nearest")
        n = len(a["time"])
        history = {k: [float(t) for t in a[k]] for k in _HISTORY}
        history["velocity_error"] = [None if math.isnan(e) else float(e) for e in a["velocity_error"]]
        history["frequencies"] = [[float(f) for f in g] for g in header["frequencies"]]
        if any(len(col) != n for col in history.values()):
            raise ValueError("history columns of different lengths")
        resume = header["resume"]
        if resume is not None:
            resume = dict(resume)
            for k in _RESUME_ARRAYS:
                resume[k] = np.array(a[f"resume_{k}"], np.float64)
                if resume[k].shape != (medium.values.size,) or not np.all(np.isfinite(resume[k])):
                    raise ValueError(f"resume state {k!r} of shape {resume[k].shape}, expected "
                                     f"({medium.values.size},) finite values")
            groups = len(resume["settings"]["groups"])
            if not (0 <= int(resume["group"]) < groups and int(resume["iterations"]) >= 0):
                raise ValueError(f"resume state: group {resume['group']!r} / iterations {resume['iterations']!r} "
                                 f"out of range ({groups} groups)")
        return cls(velocity=velocity, medium=medium, history=history, stopped=str(a["stopped"][()]),
                   seconds=float(a["seconds"]), n_solves=int(a["n_solves"]),
                   initial_error=header["initial_error"], resume=resume)


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
        nodes_per_wavelength: float = NODES_PER_WAVELENGTH,
        start: FWIResult | str | os.PathLike | None = None) -> FWIResult:
    """Adjoint-state FWI of ``survey`` from the ``initial`` velocity (see the module docstring).

    ``initial``, ``true``: a number, a callable ``x [N, d] -> [N]`` or a GridField (velocities);
    ``domain``: the physical :class:`~helmpinn.problems.geometry.Box`; ``pml``: its
    :class:`~helmpinn.PML` (None: first-order absorbing faces; a face its ``faces`` leaves out is
    a free surface, u = 0); ``bounds``: ``(v_min, v_max)``,
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

    ``start``: a result (or the path of one saved by :meth:`FWIResult.save`) that a callback or
    the time limit stopped, to continue (module docstring): the same survey, box, PML, bounds,
    grids, groups and regularisation must be given (ValueError naming what differs);
    ``max_iter``, ``time_limit`` (this call's), ``callback``, ``true`` and ``region`` may
    change; ``initial`` may be None (else it must be the initial model of that run).

    Every argument is checked, and every grid's memory estimated, before any solve.
    """
    t_call = time.perf_counter()
    plan = _plan(survey, initial, domain, pml, bounds, grid, h, frequencies, regularization, max_iter,
                 time_limit, callback, true, region, nodes_per_wavelength, start)
    return _run(plan, survey, domain, pml, regularization, max_iter, time_limit, callback, t_call)


def _check_arguments(survey, domain, pml, bounds, regularization, max_iter, nodes_per_wavelength, time_limit,
                     callback) -> tuple[float, float, float, int, float, float | None]:
    """The arguments' types and ranges (TypeError/ValueError naming the argument);
    ``(v_min, v_max, regularization, max_iter, nodes_per_wavelength, time_limit)``."""
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
    return vmin, vmax, regularization, max_iter, nodes_per_wavelength, time_limit


def _settings(survey, domain, pml, vmin: float, vmax: float, spacing: float, groups, hs,
              regularization: float) -> dict[str, Any]:
    """What a continued run must share with the run it continues (JSON values)."""
    digest = hashlib.sha256()
    for a in (survey.frequencies, survey.receivers, survey.data, survey.weights):
        if a is not None:
            digest.update(np.ascontiguousarray(a).tobytes())
    for source in survey.sources:
        digest.update(repr(source).encode())
    lo, hi = domain.bounds
    return {"survey": digest.hexdigest(), "domain": [lo.tolist(), hi.tolist()],
            "pml": None if pml is None else float(pml.width),
            "pml_faces": None if pml is None else pml.faces_record(len(lo)), "bounds": [vmin, vmax], "grid": spacing,
            "groups": [list(g) for g in groups], "h": [float(x) for x in hs], "regularization": regularization}


def _continued(start, settings: dict[str, Any]) -> FWIResult:
    """The stopped result ``start`` (or the path of one) checked against this call's settings."""
    if not isinstance(start, FWIResult):
        if not isinstance(start, (str, os.PathLike)):
            raise TypeError(f"fwi: start must be a FWIResult or the path of one, got {type(start).__name__}")
        start = FWIResult.load(start)
    if start.resume is None:
        raise ValueError(f"fwi: start: that run ended ({start.stopped}): nothing to continue; only a run "
                         f"stopped by its callback or time limit continues")
    same_settings("fwi", start.resume["settings"], settings)
    return start


def _plan(survey, initial, domain, pml, bounds, grid, h, frequencies, regularization, max_iter, time_limit,
          callback, true, region, nodes_per_wavelength, start) -> dict[str, Any]:
    """Every argument checked and the grids made (module docstring); a continued run's state."""
    vmin, vmax, regularization, max_iter, nodes_per_wavelength, time_limit = _check_arguments(
        survey, domain, pml, bounds, regularization, max_iter, nodes_per_wavelength, time_limit, callback)
    groups = _groups(frequencies, survey)
    lam_min = vmin / float(survey.frequencies.max())
    spacing = MEDIUM_SPACING * lam_min if grid is None else real_number("fwi", "grid", grid, low=0.0)
    if h is not None:
        h = real_number("fwi", "h", h, low=0.0)
    axes = _medium_axes(domain, spacing)
    nodes = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], axis=1)
    x0 = m_scale = lam0 = None
    if initial is not None:
        v0 = _velocity_values("initial", initial, nodes)
        outside = (v0 < vmin * (1 - 1e-12)) | (v0 > vmax * (1 + 1e-12))
        if outside.any():
            i = int(np.flatnonzero(outside)[0])
            raise ValueError(f"fwi: bounds ({vmin!r}, {vmax!r}) exclude the initial model: "
                             f"{v0[i]!r} at {nodes[i].tolist()} ({int(outside.sum())} of {len(v0)} nodes)")
        m_scale = float(np.mean(1.0 / v0**2))
        lam0 = float(v0.min()) / float(survey.frequencies.max())   # the initial model's λ_min
        x0 = (1.0 / v0**2 / m_scale).ravel()
    elif start is None:
        raise TypeError("fwi: initial (a velocity) is required unless start continues a stopped run")
    test = _region_points(domain, region)
    v_true = None if true is None else _velocity_values("true", true, test)
    hs = [h if h is not None else vmin / max(g) / nodes_per_wavelength for g in groups]
    olo, ohi = (domain.bounds if pml is None else pml.outer_box(*domain.bounds))
    for hg in hs:
        check_memory(int(np.prod(np.ceil((ohi - olo) / hg - 1e-9) + 1)), domain.dim)
    settings = _settings(survey, domain, pml, vmin, vmax, spacing, groups, hs, regularization)
    if start is not None:
        start = _continued(start, settings)
        r = start.resume
        if x0 is not None and not np.allclose(x0 * m_scale, r["x_initial"] * r["m_scale"], rtol=1e-12, atol=0.0):
            raise ValueError("fwi: start: initial is not the initial model of the run it continues (give "
                             "initial=None to take the saved one)")
        x0, m_scale, lam0 = r["x_initial"], float(r["m_scale"]), float(r["lam0"])
    return dict(groups=groups, hs=hs, axes=axes, shape=tuple(len(a) for a in axes), lo=domain.bounds[0],
                step=np.array([a[1] - a[0] for a in axes]), test=test, v_true=v_true, x0=x0, m_scale=m_scale,
                lam0=lam0, box=((1.0 / vmax**2) / m_scale, (1.0 / vmin**2) / m_scale), settings=settings,
                start=start)


def _run(p: dict[str, Any], survey, domain, pml, regularization, max_iter, time_limit, callback,
         t_call: float) -> FWIResult:
    """The groups of the plan ``p`` (from where a continued run stopped) and the result."""
    shape, m_scale, lo, step = p["shape"], p["m_scale"], p["lo"], p["step"]

    def velocity_of(xv):
        return GridField((xv.reshape(shape) * m_scale) ** -0.5, lo, step, outside="nearest")

    v_true = p["v_true"]
    denom = None if v_true is None else float(np.linalg.norm(v_true - velocity_of(p["x0"])(p["test"])))

    def error_of(xv):
        if v_true is None or not denom:
            return None
        return float(np.linalg.norm(velocity_of(xv)(p["test"]) - v_true)) / denom

    start = p["start"]
    if start is None:
        history: dict[str, list] = {"misfit": [], "objective": [], "time": [], "frequencies": [],
                                    "velocity_error": []}
        x, first, done, n_solves, t_origin = p["x0"].copy(), 0, 0, 0, t_call
        group_start, initial_error = x, error_of(x)
    else:   # continue where it stopped
        r = start.resume
        history = {k: list(v) for k, v in start.history.items()}
        x, first, done, n_solves = r["x"].copy(), int(r["group"]), int(r["iterations"]), start.n_solves
        t_origin, group_start, initial_error = t_call - float(r["elapsed"]), r["group_start"], start.initial_error
    deadline = None if time_limit is None else t_call + time_limit
    stopped, state = "max_iter in every group", None
    for gi in range(first, len(p["groups"])):
        group, hg = p["groups"][gi], p["hs"][gi]
        if gi > first:
            done, group_start = 0, x
        if done >= max_iter:
            continue
        objective = FWIObjective(survey, group, domain=domain, pml=pml, medium_axes=p["axes"],
                                 m_initial=group_start.reshape(shape) * m_scale, h=hg,
                                 regularization=regularization, m_scale=m_scale,
                                 source_width=p["lam0"] / WIDTH_PER_WAVELENGTH)
        before = len(history["time"])
        x, why = _minimise(objective, x, p["box"], max_iter - done, t_origin, deadline, callback, history,
                           group, gi, error_of)
        n_solves += objective.n_solves
        if why:
            stopped = why
            state = {"group": gi, "iterations": done + len(history["time"]) - before, "x": x.copy(),
                     "group_start": np.array(group_start, copy=True), "x_initial": np.array(p["x0"], copy=True),
                     "m_scale": m_scale, "lam0": p["lam0"], "settings": p["settings"],
                     "elapsed": time.perf_counter() - t_origin}
            break
    return FWIResult(velocity=velocity_of(x), medium=GridField(x.reshape(shape) * m_scale, lo, step,
                                                               outside="nearest"),
                     history=history, stopped=stopped, seconds=time.perf_counter() - t_origin,
                     n_solves=n_solves, initial_error=initial_error, resume=state)


def _minimise(objective, x, box, max_iter, t_origin, deadline, callback, history, group, gi, error_of):
    """L-BFGS-B on one group from x for ``max_iter`` iterations; returns (the best x, why it
    stopped early or ""). History times are counted from ``t_origin``; ``deadline`` (a
    ``time.perf_counter()`` value, or None) stops it at the next evaluation after it."""
    from scipy.optimize import minimize

    best = {"x": x.copy(), "f": math.inf, "data": math.inf}
    why = {"reason": ""}

    def fun(xv):
        if deadline is not None and time.perf_counter() > deadline:
            why["reason"] = "time_limit"
            raise _Stop
        f, g, data = objective(xv)
        if f < best["f"]:
            best.update(x=xv.copy(), f=f, data=data)
        return f, g

    def on_iteration(intermediate_result):
        t = time.perf_counter() - t_origin
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
