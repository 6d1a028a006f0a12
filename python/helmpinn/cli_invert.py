"""``helmpinn invert``: the medium from a survey's data, written into a run folder.

``helmpinn invert --survey survey.npz --initial v0.npy --spacing H --out runs/inv`` reads a
survey (:meth:`helmpinn.Survey.load`) and a starting velocity on a regular grid
(:meth:`helmpinn.GridField.from_npy` with ``--origin`` and ``--spacing``; or ``--initial-velocity
V`` for a homogeneous start), and runs :func:`helmpinn.invert` (``--method pinn``, the default)
or the classical adjoint-state baseline :func:`helmpinn.reference.fwi` (``--method fwi``) on the
same inputs. It writes into OUT: the result (``inversion.npz``, :meth:`helmpinn.Inversion.save`;
``fwi.npz`` for fwi), ``velocity.npy`` (the recovered velocity on the method's medium grid, in
the form ``--initial`` reads: ``metrics.json`` gives its origin and spacing), ``metrics.json``
(settings, history, times and, with ``--true``, the velocity error) and ``inversion.png``.

Every input is checked before anything is written (the survey read as a regular file and
validated against the domain and the PML, the grids' files, the grids covering the domain, the
bounds containing the initial model, the numbers finite and in range): misuse is one line on
stderr and exit status 2, with no folder created and no lock left. The output folder is then
locked for the run (:mod:`helmpinn.runfiles`: a second run into it is refused, status 2); every
file is written whole (a temporary file renamed into place) and only files helmpinn wrote are
replaced or removed. ``metrics.json`` always describes the result beside it: a run's files are
written once it has its result, then the previous run's files it did not replace are removed.

SIGTERM (status 143) and Ctrl-C (status 130) stop the run after the current step, through the
methods' own stop request (a callback returning True), and the result so far is written as a
finished run's: the classical baseline's best model, or :func:`helmpinn.invert`'s Inversion with
status 3, which holds the state to continue from. A second signal ends the process at once
(the folder's previous files stay whole).

``--resume OUT`` continues a run that a signal stopped, in its own folder: the settings are
those ``OUT/metrics.json`` records (read as data: each value is turned back into its
command-line option and parsed and checked as on the first run; no file of the folder is run as
code), the state is the result file's (:meth:`helmpinn.Inversion.load`,
:meth:`helmpinn.reference.FWIResult.load`, no pickle), and only ``--time-limit``,
``--max-steps``, ``--threads``, ``--quiet`` and ``--no-plots`` may be given with it. A pinn run
continues as the uninterrupted one (:func:`helmpinn.invert`'s ``start``); an fwi run (also one
its time limit stopped) continues its frequency group from its best model with L-BFGS-B's
memory started afresh (:func:`helmpinn.reference.fwi`'s ``start``: the same steps as the
uninterrupted run only when it stopped between two groups). A finished run, or a folder without
those two files, is refused (status 2).

Under ``mpiexec -n N`` (N > 1), ``--method pinn`` splits the wavefields over the ranks
(:func:`helmpinn.invert`'s ``comm``; the result is the one-process result to rounding): every
rank reads and checks the inputs, rank 0 alone locks the folder, prints and writes, and a usage
error on any rank stops every rank with status 2 (rank 0 prints it). ``--method fwi`` runs in one
process and is refused under several ranks.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import signal
import sys
import time
from typing import Any, Callable, NamedTuple

import numpy as np

from . import runfiles
from ._cli_common import (handling, INTERRUPTED, MAX_THREADS_PER_CPU, TERMINATED, UsageError, check_outputs, cpus,
                          finite, lock, prepare_out, stop_on_sigterm)

__all__ = ["add_parser", "run", "OUTPUTS", "DEFAULT_TIME_LIMIT", "DEFAULT_OUT"]

#: The result file of each method.
RESULT = {"pinn": "inversion.npz", "fwi": "fwi.npz"}
_FIGURE, _REPORT, _STOPPED_REPORT, _VELOCITY = "inversion.png", "metrics.json", "interrupted-metrics.json", \
    "velocity.npy"
#: Every file ``helmpinn invert`` may write into its folder (and so replace or remove there);
#: interrupted-metrics.json is no longer written (a stopped run writes its result), but one left
#: by an earlier version is removed with the previous run's files.
OUTPUTS = (*RESULT.values(), _VELOCITY, _REPORT, _FIGURE, _STOPPED_REPORT)
DEFAULT_TIME_LIMIT = 300.0
DEFAULT_OUT = "helmpinn-inversion"


class _Inputs(NamedTuple):
    """What the command line gives, read and checked: the survey, the physical box and its
    PML, the starting and (optional) true velocity (GridFields, or a number), the bounds."""

    survey: Any
    domain: Any
    pml: Any
    initial: Any
    true: Any
    bounds: tuple[float, float] | None


def add_parser(sub: Any) -> None:
    """Register ``helmpinn invert`` on the subparsers ``sub`` of helmpinn's parser."""
    p = sub.add_parser("invert", help="recover the velocity from a survey's data (helmpinn.invert or "
                                      "the classical FWI baseline) and write a report",
                       description="Inputs on a grid are .npy arrays (axis j is x_j) with the grid's "
                                   "--origin and --spacing. See docs/guide/inversion-cli.md.")
    p.add_argument("--survey", metavar="FILE.npz", help="the survey (helmpinn.Survey.save); required")
    p.add_argument("--initial", metavar="FILE.npy", help="the starting velocity on the grid --origin, --spacing")
    p.add_argument("--initial-velocity", metavar="V", type=float, help="a homogeneous starting velocity "
                   "(instead of --initial; --domain is then required)")
    p.add_argument("--origin", metavar="X", type=float, nargs="+", help="the grid's first node (default 0)")
    p.add_argument("--spacing", metavar="H", type=float, nargs="+", help="the grid's node spacing (one "
                   "number, or one per axis)")
    p.add_argument("--domain", metavar="X", type=float, nargs="+", help="the physical box lo_0 .. lo_d hi_0 "
                   ".. hi_d, e.g. 0 0 1 1 (default: the --initial grid's box)")
    p.add_argument("--pml", metavar="WIDTH", type=float, default=0.0, help="a PML this wide around the box "
                   "(0: first-order absorbing faces instead)")
    p.add_argument("--bounds", metavar=("VMIN", "VMAX"), type=float, nargs=2,
                   help="velocity bounds; they must contain the initial model (required with --method fwi)")
    p.add_argument("--method", choices=tuple(RESULT), default="pinn", help="pinn: helmpinn.invert; fwi: the "
                   "classical adjoint-state FWI (helmpinn.reference.fwi) on the same inputs")
    p.add_argument("--true", metavar="FILE.npy", help="the true velocity on the grid --origin, --spacing, "
                   "for the velocity error")
    p.add_argument("--time-limit", metavar="SECONDS", type=float, default=DEFAULT_TIME_LIMIT,
                   help="stop after about this long (default %(default)g)")
    p.add_argument("--max-steps", type=int, help="LM steps per frequency (pinn; default 50) or L-BFGS-B "
                   "iterations per frequency (fwi; default 50)")
    p.add_argument("--regularization", type=float, help="the medium's gradient regularisation weight "
                   "(default: the method's: 1e-5 for pinn, 1e-4 for fwi)")
    p.add_argument("--network", metavar=("FF", "HIDDEN", "LAYERS"), type=int, nargs=3,
                   help="pinn: every wavefield network's Fourier features, width and hidden layers")
    p.add_argument("--points", type=int, help="pinn: PDE points per wavefield (default: helmpinn.invert's)")
    p.add_argument("--seed", type=int, help="pinn: random seed (default 0)")
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder, locked while the run lasts "
                   "(default %(default)s)")
    p.add_argument("--resume", metavar="DIR", help="continue the run that a signal stopped in DIR, "
                   "with its settings (only --time-limit, --max-steps, --threads, --quiet, --no-plots may be "
                   "given)")
    p.add_argument("--threads", type=int, help="CPU threads (default: OpenMP's)")
    p.add_argument("--no-plots", action="store_true", help="skip the figure")
    p.add_argument("--quiet", action="store_true", help="no progress lines")


# -- checks, before anything is written ---------------------------------------------------------
def _check_numbers(args: argparse.Namespace) -> None:
    """Every number finite and in range, naming the option."""
    def need(ok: bool, flag: str, what: str, value: Any) -> None:
        if not ok:
            raise UsageError(f"{flag} must be {what}, got {value}")

    need(math.isfinite(args.time_limit) and args.time_limit > 0, "--time-limit", "a positive number",
         args.time_limit)
    need(math.isfinite(args.pml) and args.pml >= 0, "--pml", "a width >= 0", args.pml)
    for flag, value in (("--max-steps", args.max_steps), ("--points", args.points)):
        need(value is None or value >= 1, flag, "at least 1", value)
    need(args.seed is None or args.seed >= 0, "--seed", "at least 0", args.seed)
    need(args.network is None or min(args.network) >= 1, "--network", "three integers >= 1", args.network)
    reg = args.regularization
    need(reg is None or (math.isfinite(reg) and reg >= 0), "--regularization", "a number >= 0", reg)
    v = args.initial_velocity
    need(v is None or (math.isfinite(v) and v > 0), "--initial-velocity", "a velocity > 0", v)
    if args.bounds is not None:
        lo, hi = args.bounds
        need(all(map(math.isfinite, args.bounds)) and 0 < lo < hi, "--bounds", "VMIN VMAX with 0 < VMIN < VMAX",
             " ".join(f"{b:g}" for b in args.bounds))
    for flag, values in (("--origin", args.origin), ("--spacing", args.spacing), ("--domain", args.domain)):
        need(values is None or all(map(math.isfinite, values)), flag, "finite numbers", values)
    if args.threads is not None and not 1 <= args.threads <= MAX_THREADS_PER_CPU * cpus():
        raise UsageError(f"--threads must be from 1 to {MAX_THREADS_PER_CPU * cpus()} ({MAX_THREADS_PER_CPU} "
                         f"per CPU this process may use, {cpus()}), got {args.threads}")


def _check_command(args: argparse.Namespace) -> None:
    """The options that go together."""
    if args.survey is None:
        raise UsageError("--survey FILE.npz is required (a survey written by helmpinn.Survey.save)")
    if (args.initial is None) == (args.initial_velocity is None):
        raise UsageError("give one of --initial FILE.npy (a velocity grid, with --spacing) or "
                         "--initial-velocity V (a homogeneous start)")
    if args.method == "fwi" and args.bounds is None:
        raise UsageError("--method fwi needs --bounds VMIN VMAX (L-BFGS-B's velocity bounds; the lower one "
                         "also sets its medium grid)")
    pinn_only = [f for f, v in (("--network", args.network), ("--points", args.points), ("--seed", args.seed))
                 if v is not None]
    if args.method == "fwi" and pinn_only:
        raise UsageError(f"{', '.join(pinn_only)} set helmpinn.invert's networks; --method fwi takes none of them")


def _grid(flag: str, path: str, args: argparse.Namespace):
    """The velocity grid ``path`` (a .npy) at --origin / --spacing: real, finite and > 0."""
    from .problems.media import GridField

    if args.spacing is None:
        raise UsageError(f"{flag} {path!r}: give the grid's --spacing (and --origin, default 0)")
    scalar = lambda v: v[0] if v is not None and len(v) == 1 else v  # noqa: E731
    origin = 0.0 if args.origin is None else scalar(args.origin)
    try:
        field = GridField.from_npy(path, origin, scalar(args.spacing), outside="nearest")
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"{flag}: {exc}") from None
    if np.iscomplexobj(field.values):
        raise UsageError(f"{flag} {path!r}: velocities must be real, got a complex array")
    if not np.all(field.values > 0):
        raise UsageError(f"{flag} {path!r}: velocities must be > 0, got {field.values.min():g}")
    return field


def _domain(args: argparse.Namespace, initial: Any):
    """--domain, else the --initial grid's box."""
    from .problems.geometry import Box

    if args.domain is None:
        if not hasattr(initial, "lo"):
            raise UsageError("--domain x0 .. xd-1 x0' .. is required with --initial-velocity (no grid gives the box)")
        return Box(initial.lo, initial.hi)
    if len(args.domain) not in (2, 4, 6):
        raise UsageError(f"--domain takes 2 d numbers (lo then hi per axis) for d = 1, 2 or 3, got "
                         f"{len(args.domain)}")
    d = len(args.domain) // 2
    try:
        return Box(args.domain[:d], args.domain[d:])
    except ValueError as exc:
        raise UsageError(f"--domain: {exc}") from None


def _covers(flag: str, field: Any, domain: Any) -> None:
    """A grid's box must hold the physical box (the inversion reads it everywhere there)."""
    if not hasattr(field, "lo"):
        return
    if field.dim != domain.dim:
        raise UsageError(f"{flag}: a {field.dim}-D grid for a {domain.dim}-D domain")
    tol = 1e-9 * float(np.max(domain.hi - domain.lo))
    if np.any(field.lo > domain.lo + tol) or np.any(field.hi < domain.hi - tol):
        raise UsageError(f"{flag}: its grid covers {field.lo.tolist()} .. {field.hi.tolist()}, not the "
                         f"domain {domain.lo.tolist()} .. {domain.hi.tolist()} (check --origin, --spacing "
                         f"and --domain)")


def _check_values(initial: Any, domain: Any, bounds: tuple[float, float] | None) -> None:
    """The initial model is finite and > 0 over the box, and within the bounds, on a regular
    grid of the box (the interpolant between the nodes included)."""
    if not callable(initial):
        values = np.array([float(initial)])
    else:
        x = domain.grid({1: 1001, 2: 101, 3: 31}[domain.dim])[0]
        values = np.asarray(initial(x), np.float64)
        if not np.all(np.isfinite(values) & (values > 0)):
            raise UsageError("--initial: its cubic-spline interpolant is not a finite velocity > 0 everywhere "
                             "in the domain (it overshoots between the nodes); give a smoother grid")
    if bounds is not None and (values.min() < bounds[0] or values.max() > bounds[1]):
        raise UsageError(f"--bounds {bounds[0]:g} {bounds[1]:g} exclude the initial model (its velocities "
                         f"span {values.min():.6g} .. {values.max():.6g} over the domain)")


def _check_fwi_memory(inputs: _Inputs) -> None:
    """fwi's finest finite-difference grid fits in memory (as fwi checks, before its solves)."""
    from .reference import check_memory
    from .reference.fwi import NODES_PER_WAVELENGTH

    lo, hi = inputs.domain.bounds
    if inputs.pml is not None:
        lo, hi = inputs.pml.outer_box(lo, hi)
    h = inputs.bounds[0] / float(np.max(inputs.survey.frequencies)) / NODES_PER_WAVELENGTH
    try:
        check_memory(int(np.prod(np.ceil((hi - lo) / h - 1e-9) + 1)), inputs.domain.dim)
    except ValueError as exc:
        raise UsageError(f"--method fwi: {exc}") from None


def _inputs(args: argparse.Namespace) -> _Inputs:
    """Every input read and checked (UsageError naming the option), nothing written."""
    from .problems.pml import PML
    from .survey import Survey

    _check_command(args)
    _check_numbers(args)
    try:
        survey = Survey.load(args.survey)
    except (OSError, ValueError, TypeError) as exc:
        raise UsageError(f"--survey: {exc}") from None
    initial = args.initial_velocity if args.initial is None else _grid("--initial", args.initial, args)
    true = None if args.true is None else _grid("--true", args.true, args)
    domain = _domain(args, initial)
    for flag, field in (("--initial", initial), ("--true", true)):
        _covers(flag, field, domain)
    try:
        pml = PML(args.pml) if args.pml > 0 else None
        survey.validate(domain, pml)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--survey {args.survey!r}: {exc}") from None
    bounds = None if args.bounds is None else (float(args.bounds[0]), float(args.bounds[1]))
    _check_values(initial, domain, bounds)
    inputs = _Inputs(survey, domain, pml, initial, true, bounds)
    if args.method == "fwi":
        _check_fwi_memory(inputs)
    return inputs


# -- --resume --------------------------------------------------------------------------------------
#: Options that may be given with --resume (every other setting is the run's own).
_RESUME_OPTIONS = ("time_limit", "max_steps", "threads", "quiet", "no_plots")
#: The settings of metrics.json that --resume turns back into options: (key, option, kind).
_SAVED = (("method", "--method", "word"), ("survey", "--survey", "path"), ("initial", "--initial", "path"), ("true", "--true", "path"),
          ("initial_velocity", "--initial-velocity", "number"), ("origin", "--origin", "numbers"),
          ("spacing", "--spacing", "numbers"), ("domain", "--domain", "numbers"), ("pml", "--pml", "number"),
          ("bounds", "--bounds", "numbers"), ("time_limit", "--time-limit", "number"),
          ("max_steps", "--max-steps", "number"), ("regularization", "--regularization", "number"),
          ("network", "--network", "numbers"), ("points", "--points", "number"), ("seed", "--seed", "number"))
_MAX_REPORT_BYTES = 1 << 30


def _saved_option(key: str, flag: str, kind: str, value: Any, where: str) -> list[str]:
    """One saved setting as command-line words (UsageError when its type is not the option's)."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    ok = {"path": isinstance(value, str), "word": isinstance(value, str), "number": number(value),
          "numbers": isinstance(value, list) and 0 < len(value) <= 6 and all(map(number, value))}[kind]
    if not ok:
        raise UsageError(f"--resume: {where}: setting {key!r} is not what {flag} takes ({value!r})")
    if kind in ("path", "word"):   # one word: a value that looks like an option stays a value
        return [f"{flag}={value}"]
    return [flag, *map(repr, value if kind == "numbers" else [value])]


def _resumed_args(args: argparse.Namespace, given: list[str]) -> argparse.Namespace:
    """The run's own command line, from DIR/metrics.json, with the options given now that
    --resume allows (UsageError)."""
    extra = [k for k in given if k not in _RESUME_OPTIONS]
    if extra:
        flags = lambda keys: ", ".join("--" + k.replace("_", "-") for k in keys)  # noqa: E731
        raise UsageError(f"--resume continues a run with its saved settings; {flags(extra)} cannot be given with "
                         f"it (allowed: {flags(_RESUME_OPTIONS)})")
    folder = args.resume
    if args.out is not None and args.out != DEFAULT_OUT and os.path.abspath(args.out) != os.path.abspath(folder):
        raise UsageError("--resume DIR writes into DIR; --out cannot name another folder")
    if not os.path.isdir(folder):
        raise UsageError(f"--resume {folder!r}: no such folder")
    where = os.path.join(folder, _REPORT)
    try:
        report = json.loads(runfiles.read_regular(where, _MAX_REPORT_BYTES))
        settings = report["settings"]
        method = report["method"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--resume {folder!r}: no report of a helmpinn invert run there ({where}: "
                         f"{getattr(exc, 'strerror', None) or exc})") from None
    if method not in RESULT or not isinstance(settings, dict):
        raise UsageError(f"--resume {folder!r}: {where} is not the report of a pinn or fwi run (method {method!r})")
    words = ["invert"]
    for key, flag, kind in _SAVED:
        if settings.get(key) is not None:
            words += _saved_option(key, flag, kind, settings[key], where)
    parser = argparse.ArgumentParser(prog="helmpinn", add_help=False)
    add_parser(parser.add_subparsers(dest="command"))
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            new = parser.parse_args([str(w) for w in words])
    except SystemExit:
        raise UsageError(f"--resume: {where}: its settings are not a command line of helmpinn invert") from None
    for key in _RESUME_OPTIONS:
        if key in given:
            setattr(new, key, getattr(args, key))
    new.resume, new.out = folder, folder
    return new


def _resume_state(args: argparse.Namespace):
    """The stopped result (an Inversion, or fwi's FWIResult) in the (locked) folder of --resume
    (UsageError)."""
    import stat

    from .inversion import Inversion
    from .reference import FWIResult

    path = os.path.join(args.out, RESULT[args.method])
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise OSError(f"{path} is not a regular file")
        inv = Inversion.load(path) if args.method == "pinn" else FWIResult.load(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume {args.resume!r}: {exc}") from None
    if inv.resume is None:
        ended = inv.message if args.method == "pinn" else inv.stopped
        raise UsageError(f"--resume {args.resume!r}: that run ended ({ended}); nothing to continue (start a "
                         f"new run from its {_VELOCITY} to go on)")
    return inv


# -- the run --------------------------------------------------------------------------------------
class _Stop:
    """A stop request (SIGTERM, Ctrl-C) and the history entries seen so far."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.entries: list[dict[str, Any]] = []

    def request_stop(self, reason: str) -> None:
        self.reason = self.reason or reason


@contextlib.contextmanager
def _stop_on_sigint(stop: _Stop):
    """Ctrl-C, as SIGTERM: the first asks the run to stop after the current step, a second
    raises KeyboardInterrupt at once."""
    def on_sigint(signum, frame):
        if stop.reason == "interrupted":
            raise KeyboardInterrupt
        stop.request_stop("interrupted")
        print("\nhelmpinn: interrupted (Ctrl-C); stopping after the current step (Ctrl-C again to end at "
              "once)", file=sys.stderr, flush=True)

    with handling(signal.SIGINT, on_sigint):
        yield


def _progress(entry: dict[str, Any]) -> None:
    """One line per step of either method."""
    err = entry.get("velocity_error")
    misfit = entry.get("data_misfit", entry.get("misfit"))
    where = f"f = {entry['frequency']:g}" if "frequency" in entry else f"group {entry.get('group', 0) + 1}"
    print(f"helmpinn: {entry['time']:7.1f} s, {where}: data misfit {misfit:.3e}"
          + (f", PDE residual {entry['pde_residual']:.3e}" if "pde_residual" in entry else "")
          + (f", velocity error {err:.3f}" if err is not None else ""), file=sys.stderr, flush=True)


def _run_pinn(inputs: _Inputs, args: argparse.Namespace, stop: _Stop, on_entry: Callable, start: Any = None,
              comm: Any = None):
    """helmpinn.invert on the inputs (from ``start``, a stopped Inversion, with --resume): its
    Inversion, with status 3 when a stop request ended it."""
    from .inversion import invert

    def callback(entry: dict[str, Any]) -> bool:
        stop.entries.append(entry)
        on_entry(entry)
        return stop.reason is not None

    kw: dict[str, Any] = {k: v for k, v in (("network", args.network), ("pde_points", args.points),
                                            ("max_steps", args.max_steps), ("seed", args.seed),
                                            ("regularization", args.regularization)) if v is not None}
    return invert(inputs.survey, inputs.initial, domain=inputs.domain, pml=inputs.pml, bounds=inputs.bounds,
                  true=inputs.true, time_limit=args.time_limit, callbacks=[callback], start=start, comm=comm, **kw)


def _run_fwi(inputs: _Inputs, args: argparse.Namespace, stop: _Stop, on_entry: Callable, start: Any = None):
    """helmpinn.reference.fwi on the inputs (from ``start``, a stopped FWIResult, with --resume):
    its FWIResult (the best model so far and the state to continue from when a stop request
    ended it)."""
    from .reference import fwi

    def callback(info: dict[str, Any]) -> bool:
        stop.entries.append(info)
        on_entry(info)
        return stop.reason is not None

    kw = {k: v for k, v in (("max_iter", args.max_steps), ("regularization", args.regularization)) if v is not None}
    return fwi(inputs.survey, inputs.initial, domain=inputs.domain, pml=inputs.pml, bounds=inputs.bounds,
               true=inputs.true, time_limit=args.time_limit, callback=callback, start=start, **kw)


# -- what is written ------------------------------------------------------------------------------
def _fwi_history(result: Any) -> list[dict[str, Any]]:
    h = result.history
    return [{k: h[k][i] for k in h} for i in range(len(h["time"]))]


def _fwi_figure(result: Any, inputs: _Inputs, n: int = 101):
    """For fwi, the figure :meth:`helmpinn.Inversion.figure` draws for helmpinn.invert: the
    initial, recovered and (when known) true velocity, and the data misfit per iteration."""
    from .plots import _figure

    domain = inputs.domain
    initial = inputs.initial if callable(inputs.initial) else (lambda x: np.full(len(x), inputs.initial))
    panels = [("initial", initial), ("recovered", result.velocity)]
    if inputs.true is not None:
        panels.append(("true", inputs.true))
    fig, axes = _figure(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 3.6))
    xs = [np.linspace(a, b, n) for a, b in zip(domain.lo, domain.hi)]
    pts = np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1)
    values = [np.asarray(f(pts), np.float64).reshape(n, n) for _, f in panels]
    vmin, vmax = min(float(v.min()) for v in values), max(float(v.max()) for v in values)
    extent = [domain.lo[0], domain.hi[0], domain.lo[1], domain.hi[1]]
    for ax, (name, _), v in zip(axes[0], panels, values):
        im = ax.imshow(v.T, origin="lower", extent=extent, vmin=vmin, vmax=vmax, cmap="viridis")
        ax.set_title(f"{name} velocity (fwi)")
        fig.colorbar(im, ax=ax, shrink=0.8)
    ax = axes[0][-1]
    misfit = [m for m in result.history["misfit"] if m is not None and m > 0]
    ax.semilogy(range(1, len(misfit) + 1), misfit, marker=".")
    ax.set_xlabel("L-BFGS-B iteration")
    ax.set_ylabel("data misfit")
    ax.set_title("data misfit")
    fig.tight_layout()
    return fig


def _figure(method: str, result: Any, inputs: _Inputs):
    """The run's figure, or None with a note (a 2-D medium only; matplotlib needed)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("helmpinn: matplotlib is not installed, so no figure was written (pip install matplotlib)",
              file=sys.stderr)
        return None
    if inputs.domain.dim != 2:
        print(f"helmpinn: no figure: it draws 2-D media only, this one is {inputs.domain.dim}-D", file=sys.stderr)
        return None
    return result.figure() if method == "pinn" else _fwi_figure(result, inputs)


def _npy_bytes(values: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(values), allow_pickle=False)
    return buf.getvalue()


def _write_result(folder: runfiles.RunFolder, method: str, result: Any, inputs: _Inputs,
                  report: dict[str, Any], plots: bool) -> dict[str, list[str]]:
    """The result, velocity.npy, the figure and last metrics.json, each written whole and
    claimed first (helmpinn's whatever stops the writing); then the previous run's files this
    run did not replace are removed."""
    from .plots import save_figure

    fig = _figure(method, result, inputs) if plots else None
    names = [RESULT[method], _VELOCITY, *([_FIGURE] if fig is not None else []), _REPORT]
    for name in names:
        folder.claim(name)
    path = os.path.join(folder.path, RESULT[method])
    result.save(path)   # Inversion.save / FWIResult.save: plain arrays, no pickle
    folder.record(RESULT[method])
    folder.write(_VELOCITY, _npy_bytes(result.velocity.values))
    if fig is not None:
        save_figure(fig, os.path.join(folder.path, _FIGURE))
        folder.record(_FIGURE)
    folder.write(_REPORT, json.dumps(finite(report), indent=1).encode())
    removed = folder.remove(n for n in OUTPUTS if n not in names)
    return {"written": names, "removed": removed}


def _final_error(result: Any, inputs: _Inputs) -> float | None:
    """‖v − v_true‖ / ‖v_true − v_initial‖ over the region the survey illuminates (the hull of
    its sources and receivers), measured the same way for both methods."""
    if inputs.true is None:
        return None
    from .inversion import velocity_error
    from .inversion.api import illuminated_points

    initial = inputs.initial if callable(inputs.initial) else (lambda x: np.full(len(x), inputs.initial))
    return velocity_error(result.velocity, inputs.true, initial, illuminated_points(inputs.survey, inputs.domain))


def _report(args: argparse.Namespace, inputs: _Inputs, result: Any, stop: _Stop, seconds: float,
            wall: float, ranks: int = 1) -> dict[str, Any]:
    """metrics.json: the settings, the survey's sizes, how the run ended, the history, the
    final velocity error, the grid of velocity.npy."""
    from . import _core

    pinn = args.method == "pinn"
    history = result.history if pinn else _fwi_history(result)
    last = history[-1] if history else {}
    velocity = result.velocity
    settings = {k: v for k, v in vars(args).items() if k not in ("command", "resume", "quiet", "no_plots")}
    for key in ("survey", "initial", "true", "out"):
        settings[key] = None if settings[key] is None else os.path.abspath(settings[key])
    return {
        "command": "helmpinn invert", "method": args.method, "settings": settings,
        "domain": {"lo": inputs.domain.lo.tolist(), "hi": inputs.domain.hi.tolist()},
        "survey": {"sources": inputs.survey.n_sources, "receivers": inputs.survey.n_receivers,
                   "frequencies": inputs.survey.frequencies.tolist()},
        "result": RESULT[args.method],
        "stopped": stop.reason or (result.message if pinn else result.stopped),
        "success": bool(result.success) if pinn else True,
        "interrupted": stop.reason is not None, "inversion_time_s": seconds, "wall_time_s": wall,
        "resumed": args.resume is not None,
        "resumable": result.resume is not None, "ranks": ranks,
        "steps": len(history),
        "final": {"velocity_error": _final_error(result, inputs),
                  "data_misfit": last.get("data_misfit", last.get("misfit")),
                  "data_fit_per_frequency": result.data_fit.tolist() if pinn and result is not None else None},
        "velocity_grid": {
            "file": _VELOCITY, "origin": velocity.origin.tolist(), "spacing": velocity.spacing.tolist(),
            "shape": list(velocity.values.shape)},
        "history": history, "threads": _core.get_num_threads(), "version": getattr(_core, "__version__", None),
    }


# -- the command ----------------------------------------------------------------------------------
def _given(args: argparse.Namespace) -> list[str]:
    """The options given on the command line (those whose value is not the parser's default)."""
    parser = argparse.ArgumentParser(prog="helmpinn", add_help=False)
    add_parser(parser.add_subparsers(dest="command"))
    defaults = vars(parser.parse_args(["invert"]))
    return [k for k, v in vars(args).items() if k not in ("command", "resume", "out") and v != defaults.get(k, v)]


def _set_up(args: argparse.Namespace, held: contextlib.ExitStack, comm: Any = None):
    """The command line (a resumed run's own), the inputs, then the output folder created,
    locked and checked (by rank 0 under MPI), and a resumed run's state read there (UsageError,
    on every rank when it came on any: :func:`_agreed`)."""
    from . import _core

    rank0 = comm is None or comm.Get_rank() == 0
    folder = None

    def read():
        nonlocal args
        if args.resume is not None:
            args = _resumed_args(args, _given(args))
        if comm is not None and args.method == "fwi":
            raise UsageError(f"--method fwi runs in one process (helmpinn.reference.fwi has no MPI ranks); "
                             f"this is one of {comm.Get_size()} ranks: run it without mpiexec")
        return _inputs(args)

    def claim():   # once every rank's inputs passed: nothing is written before
        nonlocal folder
        if rank0:
            prepare_out(args.out)
            folder = lock(args.out, "--resume" if args.resume is not None else "--out", held)
            check_outputs(folder, OUTPUTS)
            folder.remove_stale_temps(OUTPUTS)

    inputs = _agreed(comm, read, "helmpinn invert: the inputs")
    _agreed(comm, claim, "helmpinn invert: the output folder")
    start = None if args.resume is None else _agreed(comm, lambda: _resume_state(args), "helmpinn invert: --resume")
    if args.threads is not None:
        _core.set_num_threads(args.threads)
    elif comm is not None:   # the ranks on a node share its cores
        from .distributed import threads_per_rank
        _core.set_num_threads(threads_per_rank(comm))
    return args, inputs, folder, start


def _agreed(comm: Any, work: Callable, what: str) -> Any:
    """``work()``; under MPI ranks a UsageError on any rank is raised on every rank (the other
    ranks' naming the rank: :func:`helmpinn.distributed.agree`)."""
    from .distributed import CollectiveError, agree

    error, out = None, None
    try:
        out = work()
    except UsageError as exc:
        error = exc
    if comm is None:
        if error is not None:
            raise error
        return out
    try:
        agree(comm, error, what)
    except CollectiveError as exc:
        rank, _, kind, message = exc.failures[0]
        raise UsageError(f"rank {rank}: {message}") from None
    return out


def _finish(args: argparse.Namespace, folder: runfiles.RunFolder, inputs: _Inputs, result: Any, stop: _Stop,
            report: dict[str, Any]) -> int:
    """Write what the run has and say how it ended; the exit status."""
    out, status = args.out, _status(stop)
    try:
        files = _write_result(folder, args.method, result, inputs, report, plots=not args.no_plots)
    except OSError as exc:
        print(f"helmpinn: could not write the results in {out} ({exc.strerror or exc}); the files already "
              f"there are whole (each is written to a temporary file first)", file=sys.stderr)
        return 1
    if stop.reason is not None or not args.quiet:
        err = report["final"]["velocity_error"]
        ended = result.message if args.method == "pinn" else result.stopped
        print(f"helmpinn: {stop.reason + ', ' if stop.reason else ''}{ended}; "
              f"{report['steps']} steps, {report['inversion_time_s']:.1f} s"
              + (f", velocity error {err:.4f}" if err is not None else "")
              + f"; wrote {', '.join(os.path.join(out, n) for n in files['written'])}"
              + (f"; removed the previous run's {', '.join(files['removed'])}" if files["removed"] else "")
              + (f"; helmpinn invert --resume {out} continues it" if report["resumable"] else ""),
              file=sys.stderr)
    return status


def _status(stop: _Stop) -> int:
    """The exit status of a run that ended (0, or that of the signal that stopped it)."""
    return {"terminated": TERMINATED, "interrupted": INTERRUPTED}.get(stop.reason or "", 0)


def _invert(args: argparse.Namespace, held: contextlib.ExitStack, comm: Any = None) -> int:
    from .distributed import CollectiveError

    t_start = time.perf_counter()
    rank0 = comm is None or comm.Get_rank() == 0   # rank 0 alone prints and writes
    try:
        args, inputs, folder, start = _set_up(args, held, comm)
    except UsageError as exc:
        if rank0:
            print(f"helmpinn: {exc}", file=sys.stderr)
        return 2
    quiet = args.quiet or not rank0
    if not quiet:
        done = 0 if start is None else len(start.history if args.method == "pinn" else start.history["time"])
        print(f"helmpinn: {args.method} inversion of {inputs.survey!r} on {inputs.domain!r}, within "
              f"{args.time_limit:g} s" + ("" if comm is None else f", {comm.Get_size()} MPI ranks")
              + ("" if start is None else f", continuing the run in {args.out} at step {done}"), file=sys.stderr)
    stop = _Stop()
    on_entry = (lambda entry: None) if quiet else _progress
    with stop_on_sigterm(stop), _stop_on_sigint(stop):
        t0 = time.perf_counter()
        try:
            result = (_run_pinn(inputs, args, stop, on_entry, start, comm) if args.method == "pinn"
                      else _run_fwi(inputs, args, stop, on_entry, start))
        except (ValueError, TypeError, MemoryError, CollectiveError) as exc:   # refused by the method itself
            first = not stop.entries
            if rank0:
                print(f"helmpinn: {exc}" + ("" if first else f" (after {len(stop.entries)} steps; nothing "
                                                             f"written)"), file=sys.stderr)
            return 2 if first else 1
        if not rank0:
            return _status(stop)
        seconds = time.perf_counter() - t0
        report = _report(args, inputs, result, stop, seconds, time.perf_counter() - t_start,
                         1 if comm is None else comm.Get_size())
        return _finish(args, folder, inputs, result, stop, report)


def run(args: argparse.Namespace) -> int:
    """``helmpinn invert`` with the parsed ``args``; the exit status. Under an MPI launcher with
    several ranks, every rank runs it (module docstring)."""
    from .distributed import abort_on_error, launch_comm

    try:
        comm = launch_comm()
    except RuntimeError as exc:   # mpi4py missing under a launcher: each rank would run alone
        print(f"helmpinn: {exc}", file=sys.stderr)
        return 2
    # an exception that escapes on one rank ends the job rather than leave the others waiting
    with abort_on_error(comm):
        try:
            with contextlib.ExitStack() as held:   # the output folder's lock
                return _invert(args, held, comm)
        except KeyboardInterrupt:   # a second Ctrl-C
            print("\nhelmpinn: aborted; the output folder's previous result, if any, is as it was", file=sys.stderr)
            return INTERRUPTED
