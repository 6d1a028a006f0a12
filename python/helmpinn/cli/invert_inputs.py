"""``helmpinn invert``'s inputs, read and checked before anything is written: the options that
go together, every number finite and in range, the survey (a regular file, validated against
the domain and the PML), the velocity grids (real, finite, > 0, covering the domain), the
bounds containing the initial model, and fwi's finite-difference grid within memory. Misuse
is a :class:`~helmpinn.cli.runs.UsageError` naming the option."""
from __future__ import annotations

import argparse
import math
from typing import Any, NamedTuple

import numpy as np

from ..problems.geometry import Box
from ..problems.media import GridField
from ..problems.pml import PML, faces_of
from ..reference import check_memory
from ..reference.fwi import NODES_PER_WAVELENGTH
from ..survey import Survey
from .runs import MAX_THREADS_PER_CPU, UsageError, cpus

__all__ = ["Inputs", "read_inputs"]


class Inputs(NamedTuple):
    """What the command line gives, read and checked: the survey, the physical box and its
    PML, the starting and (optional) true velocity (GridFields, or a number), the bounds."""

    survey: Any
    domain: Any
    pml: Any
    initial: Any
    true: Any
    bounds: tuple[float, float] | None


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
    decay = args.regularization_decay
    need(decay is None or (math.isfinite(decay) and 0 <= decay <= 1), "--regularization-decay",
         "a number in [0, 1]", decay)
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
    pinn_only = [f for f, v in (("--network", args.network), ("--points", args.points), ("--seed", args.seed),
                                ("--regularization-decay", args.regularization_decay)) if v is not None]
    if args.method == "fwi" and pinn_only:
        raise UsageError(f"{', '.join(pinn_only)} set helmpinn.invert's networks; --method fwi takes none of them")


def _grid(flag: str, path: str, args: argparse.Namespace):
    """The velocity grid ``path`` (a .npy) at --origin / --spacing: real, finite and > 0."""
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


def _check_fwi_memory(inputs: Inputs) -> None:
    """fwi's finest finite-difference grid fits in memory (as fwi checks, before its solves)."""
    lo, hi = inputs.domain.bounds
    if inputs.pml is not None:
        lo, hi = inputs.pml.outer_box(lo, hi)
    h = inputs.bounds[0] / float(np.max(inputs.survey.frequencies)) / NODES_PER_WAVELENGTH
    try:
        check_memory(int(np.prod(np.ceil((hi - lo) / h - 1e-9) + 1)), inputs.domain.dim)
    except ValueError as exc:
        raise UsageError(f"--method fwi: {exc}") from None


def _pml(args: argparse.Namespace, domain, survey: Survey) -> PML | None:
    """The PML of --pml and --pml-faces, its faces checked against the box (UsageError).
    Without --pml-faces, the faces the survey records as absorbing (all but its free surface;
    every face when it records none), written back into ``args`` so that the run's settings,
    and a --resume of it, carry the faces used."""
    if args.pml_faces is not None and not args.pml > 0:
        raise UsageError("--pml-faces: given without a PML; give --pml WIDTH > 0 as well")
    if not args.pml > 0:
        return None
    if args.pml_faces is None and survey.free_surface:
        args.pml_faces = [f for f in faces_of(domain.dim) if f not in survey.free_surface]
    try:
        pml = PML(args.pml, faces=args.pml_faces)
        pml.sides(domain.dim)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--pml-faces: {exc}") from None
    return pml


def read_inputs(args: argparse.Namespace) -> Inputs:
    """Every input read and checked (UsageError naming the option), nothing written."""
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
    pml = _pml(args, domain, survey)
    try:
        survey.validate(domain, pml)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--survey {args.survey!r}: {exc}") from None
    bounds = None if args.bounds is None else (float(args.bounds[0]), float(args.bounds[1]))
    _check_values(initial, domain, bounds)
    inputs = Inputs(survey, domain, pml, initial, true, bounds)
    if args.method == "fwi":
        _check_fwi_memory(inputs)
    return inputs
