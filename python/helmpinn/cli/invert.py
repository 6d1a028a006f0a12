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
error on any rank stops every rank with status 2 (rank 0 prints it;
:mod:`helmpinn.cli.agreement`). ``--method fwi`` runs in one process and is refused under
several ranks.

This module holds the command's course (set-up, the method's run under the stop handlers, the
last line and exit status); its options and files are :mod:`helmpinn.cli.invert_options`, its
inputs :mod:`helmpinn.cli.invert_inputs`, ``--resume`` :mod:`helmpinn.cli.invert_resume`, what
it writes :mod:`helmpinn.cli.invert_outputs`.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import time
from typing import Any, Callable

from .. import _core, runfiles
from ..distributed import CollectiveError, abort_on_error, launch_comm, threads_per_rank
from ..inversion import invert
from ..inversion.api import DEFAULT_REGULARIZATION
from ..reference import fwi
from .invert_inputs import Inputs, read_inputs
from .invert_options import DEFAULT_OUT, DEFAULT_TIME_LIMIT, OUTPUTS, add_parser, parser
from .invert_outputs import make_report, write_result
from .agreement import agree_on
from .invert_resume import resume_state, resumed_args
from .runs import INTERRUPTED, TERMINATED, UsageError, check_outputs, handling, lock, prepare_out, stop_on_sigterm

__all__ = ["add_parser", "run", "OUTPUTS", "DEFAULT_TIME_LIMIT", "DEFAULT_OUT"]


class _Stop:
    """A stop request (SIGTERM, Ctrl-C) and the history entries seen so far."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.entries: list[dict[str, Any]] = []

    def request_stop(self, reason: str) -> None:
        self.reason = self.reason or reason


@contextlib.contextmanager
def _stop_on_sigint(stop: _Stop, say: bool = True):
    """Ctrl-C, as SIGTERM: the first asks the run to stop after the current step (``say``: and
    says so on stderr), a second raises KeyboardInterrupt at once."""
    def on_sigint(signum, frame):
        if stop.reason == "interrupted":
            raise KeyboardInterrupt
        stop.request_stop("interrupted")
        if say:
            print("\nhelmpinn: interrupted (Ctrl-C); stopping after the current step (Ctrl-C again to end "
                  "at once)", file=sys.stderr, flush=True)

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


def _run_pinn(inputs: Inputs, args: argparse.Namespace, stop: _Stop, on_entry: Callable, start: Any = None,
              comm: Any = None):
    """helmpinn.invert on the inputs (from ``start``, a stopped Inversion, with --resume): its
    Inversion, with status 3 when a stop request ended it."""
    def callback(entry: dict[str, Any]) -> bool:
        stop.entries.append(entry)
        on_entry(entry)
        return stop.reason is not None

    kw: dict[str, Any] = {k: v for k, v in (("network", args.network), ("pde_points", args.points),
                                            ("max_steps", args.max_steps), ("seed", args.seed),
                                            ("regularization", args.regularization),
                                            ("regularization_decay", args.regularization_decay)) if v is not None}
    return invert(inputs.survey, inputs.initial, domain=inputs.domain, pml=inputs.pml, bounds=inputs.bounds,
                  true=inputs.true, time_limit=args.time_limit, callbacks=[callback], start=start, comm=comm, **kw)


def _run_fwi(inputs: Inputs, args: argparse.Namespace, stop: _Stop, on_entry: Callable, start: Any = None):
    """helmpinn.reference.fwi on the inputs (from ``start``, a stopped FWIResult, with --resume):
    its FWIResult (the best model so far and the state to continue from when a stop request
    ended it)."""
    def callback(info: dict[str, Any]) -> bool:
        stop.entries.append(info)
        on_entry(info)
        return stop.reason is not None

    kw = {k: v for k, v in (("max_iter", args.max_steps), ("regularization", args.regularization)) if v is not None}
    return fwi(inputs.survey, inputs.initial, domain=inputs.domain, pml=inputs.pml, bounds=inputs.bounds,
               true=inputs.true, time_limit=args.time_limit, callback=callback, start=start, **kw)


def _given(args: argparse.Namespace) -> list[str]:
    """The options given on the command line (those whose value is not the parser's default)."""
    defaults = vars(parser().parse_args(["invert"]))
    return [k for k, v in vars(args).items() if k not in ("command", "resume", "out") and v != defaults.get(k, v)]


def _set_up(args: argparse.Namespace, held: contextlib.ExitStack, comm: Any = None):
    """The command line (a resumed run's own), the inputs, then the output folder created,
    locked and checked (by rank 0 under MPI), and a resumed run's state read there (UsageError,
    on every rank when it came on any: :func:`_agreed`)."""
    rank0 = comm is None or comm.Get_rank() == 0
    folder = None

    def read():
        nonlocal args
        if args.resume is not None:
            args = resumed_args(args, _given(args))
        if args.method == "pinn" and args.regularization is None:
            args.regularization = DEFAULT_REGULARIZATION   # recorded: a later default cannot change a resume
        if comm is not None and args.method == "fwi":
            raise UsageError(f"--method fwi runs in one process (helmpinn.reference.fwi has no MPI ranks); "
                             f"this is one of {comm.Get_size()} ranks: run it without mpiexec")
        return read_inputs(args)

    def claim():   # once every rank's inputs passed: nothing is written before
        nonlocal folder
        if rank0:
            prepare_out(args.out)
            folder = lock(args.out, "--resume" if args.resume is not None else "--out", held)
            check_outputs(folder, OUTPUTS)
            folder.remove_stale_temps(OUTPUTS)

    inputs = _agreed(comm, read, "helmpinn invert: the inputs")
    _agreed(comm, claim, "helmpinn invert: the output folder")
    start = None if args.resume is None else _agreed(comm, lambda: resume_state(args), "helmpinn invert: --resume")
    if args.threads is not None:
        _core.set_num_threads(args.threads)
    elif comm is not None:   # the ranks on a node share its cores
        _core.set_num_threads(threads_per_rank(comm))
    return args, inputs, folder, start


def _agreed(comm: Any, work: Callable[[], Any], what: str) -> Any:
    """``work()``'s value; under MPI ranks a UsageError on any rank is raised on every rank, the
    other ranks' naming the rank (:func:`helmpinn.cli.agreement.agree_on`)."""
    error, out = None, None
    try:
        out = work()
    except UsageError as exc:
        error = exc
    if comm is None:
        if error is not None:
            raise error
        return out
    failure = agree_on(comm, error, what)
    if failure is not None:
        raise UsageError(failure)
    return out


def _status(stop: _Stop) -> int:
    """The exit status of a run that ended (0, or that of the signal that stopped it)."""
    return {"terminated": TERMINATED, "interrupted": INTERRUPTED}.get(stop.reason or "", 0)


def _finish(args: argparse.Namespace, folder: runfiles.RunFolder, inputs: Inputs, result: Any, stop: _Stop,
            report: dict[str, Any]) -> int:
    """Write what the run has and say how it ended; the exit status."""
    out, status = args.out, _status(stop)
    try:
        files = write_result(folder, args.method, result, inputs, report, draw=not args.no_plots)
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


def _invert(args: argparse.Namespace, held: contextlib.ExitStack, comm: Any = None) -> int:
    """The set-up, the method's run under the stop handlers, the writing; the exit status."""
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
    with stop_on_sigterm(stop, say=rank0), _stop_on_sigint(stop, say=rank0):
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
        report = make_report(args, inputs, result, stop, seconds, time.perf_counter() - t_start,
                             1 if comm is None else comm.Get_size())
        return _finish(args, folder, inputs, result, stop, report)


def run(args: argparse.Namespace) -> int:
    """``helmpinn invert`` with the parsed ``args``; the exit status. Under an MPI launcher with
    several ranks, every rank runs it (module docstring)."""
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
