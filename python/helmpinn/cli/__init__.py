"""The command line, ``helmpinn`` (also ``python -m helmpinn``): ``helmpinn train`` trains a
model on a problem and writes a report, ``helmpinn invert`` recovers a medium from a survey's
data, ``helmpinn problems`` lists the built-in problems.

This package's ``__init__`` assembles the parser and runs the subcommand; each part has its
module:

- :mod:`helmpinn.cli.train`: ``helmpinn train``, from the command line to its report (set-up
  and checks, under MPI agreed by every rank: :mod:`helmpinn.cli.agreement`; training);
  :mod:`helmpinn.cli.train_options` its options (the one table from flags onto the run plan's
  fields, :data:`FLAG_FIELDS`; the range checks), :mod:`helmpinn.cli.train_settings` what a new
  run trains (its problem, settings and model, checked for memory, device and MPI ranks),
  :mod:`helmpinn.cli.train_resume` ``--resume DIR``, :mod:`helmpinn.cli.train_report` its report,
  figures, last line and exit status.
- :mod:`helmpinn.cli.invert`: ``helmpinn invert``; its options and files
  (:mod:`helmpinn.cli.invert_options`), inputs (:mod:`helmpinn.cli.invert_inputs`),
  ``--resume`` (:mod:`helmpinn.cli.invert_resume`) and what it writes
  (:mod:`helmpinn.cli.invert_outputs`).
- :mod:`helmpinn.cli.runs`: what both subcommands' runs share: the usage error (one line on
  stderr, exit status 2), the exit statuses of a stopped run (130 for Ctrl-C, 143 for SIGTERM),
  the SIGTERM handler, the output folder's creation, lock and checks, the checks of ``--resume
  DIR``, the report written whole and read back within bounds.

Misuse of any subcommand is one line on stderr and exit status 2, before anything is written.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from typing import Sequence

from .. import distributed
from ..problems.registry import list_problems, problem_options
from . import invert, train, train_options
from .agreement import refused_command_line
from .runs import INTERRUPTED, UsageError
from .train_options import DEFAULT_TARGET, FLAG_FIELDS, LM_FLAGS, WEIGHT_FLAGS, takes
from .train_report import OUTPUTS
from .train_settings import user_code

__all__ = ["main", "build_parser", "FLAG_FIELDS", "WEIGHT_FLAGS", "LM_FLAGS", "DEFAULT_TARGET", "OUTPUTS"]


def build_parser(problem: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``problem`` a user's factory (``file.py:make``), its
    options (:func:`helmpinn.cli.train_options.problem_option_names`) are among ``train``'s, as
    a built-in problem's are."""
    parser = argparse.ArgumentParser(prog="helmpinn", description="Physics-informed neural networks "
                                     "for the Helmholtz equation with exact fused gradients.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("problems", help="list the built-in problems")
    train_options.add_parser(sub, problem)
    invert.add_parser(sub)
    return parser


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line; with ``--problem`` a user's factory, its options are read as a
    built-in problem's are (:func:`build_parser`). An option no problem nor train takes is
    refused naming the options the problem takes."""
    argv = sys.argv[1:] if argv is None else list(argv)
    problem = None
    if argv[:1] == ["train"]:   # which problem, before the parser that knows its options
        first = argparse.ArgumentParser(prog="helmpinn train", add_help=False)
        first.add_argument("--problem")
        problem = first.parse_known_args(argv[1:])[0].problem
    try:
        with user_code(problem):
            parser = build_parser(problem)
    except (ValueError, TypeError) as exc:   # a user's factory that cannot be loaded
        raise UsageError(str(exc)) from None
    args, unknown = parser.parse_known_args(argv)
    flags = [a.partition("=")[0] for a in unknown if a.startswith("--")]
    if flags and args.command == "train" and args.problem is not None:
        try:
            accepted = problem_options(args.problem)
        except (ValueError, TypeError):
            accepted = None
        if accepted is not None:
            raise UsageError(f"{flags[0]} is an option neither of helmpinn train nor of problem "
                             f"{args.problem!r} {takes(accepted)}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _cmd_problems() -> int:
    """``helmpinn problems``: each built-in problem, its description and options."""
    for name, desc in list_problems():
        opts = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                         for k, v in problem_options(name).items())
        print(f"{name:16s} {desc}\n{'':16s} options: {opts or 'none'}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line ``helmpinn ARGS`` (``argv``: ARGS, default ``sys.argv[1:]``); the exit status."""
    try:
        args = _parse(argv)
    except UsageError as exc:
        return refused_command_line(exc)
    if args.command == "problems":
        return _cmd_problems()
    if args.command == "invert":
        return invert.run(args)
    try:
        comm = distributed.launch_comm()
    except RuntimeError:  # mpi4py missing under a launcher: train.command says so
        comm = None
    # Under several MPI ranks an exception that escapes everything on one rank ends the job on
    # every rank (with the message) instead of leaving the others waiting in a collective.
    with distributed.abort_on_error(comm):
        try:
            with contextlib.ExitStack() as held:  # the output folder's lock, the SIGTERM handler
                return train.command(args, held)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the training loop
            print("\nhelmpinn: aborted (the last checkpoint, if any, is in the output folder)",
                  file=sys.stderr)
            return INTERRUPTED
