"""``helmpinn invert --resume DIR``: a run that a signal (or, for fwi, its time limit) stopped,
continued in its own folder with its own settings (those ``DIR/metrics.json`` records, read as
data: each value turned back into its command-line option and parsed and checked as on the first
run) and its state (``DIR/inversion.npz``, :meth:`helmpinn.Inversion.load`, or ``DIR/fwi.npz``,
:meth:`helmpinn.reference.FWIResult.load`; no pickle)."""
from __future__ import annotations

import argparse
import contextlib
import io
import os
import stat
from typing import Any

from ..inversion import Inversion
from ..reference import FWIResult
from .invert_options import DEFAULT_OUT, REPORT, RESULT, VELOCITY, parser
from .runs import UsageError, check_resume, read_report

__all__ = ["RESUME_OPTIONS", "resumed_args", "resume_state"]

#: helmpinn.invert's default β before reports recorded the β used (a report with none ran with it).
_FORMER_REGULARIZATION = 1e-5
#: Options that may be given with --resume (every other setting is the run's own).
RESUME_OPTIONS = ("time_limit", "max_steps", "threads", "quiet", "no_plots")
#: The settings of metrics.json that --resume turns back into options: (key, option, kind).
_SAVED = (("method", "--method", "word"), ("survey", "--survey", "path"), ("initial", "--initial", "path"), ("true", "--true", "path"),
          ("initial_velocity", "--initial-velocity", "number"), ("origin", "--origin", "numbers"),
          ("spacing", "--spacing", "numbers"), ("domain", "--domain", "numbers"), ("pml", "--pml", "number"),
          ("pml_faces", "--pml-faces", "words"),
          ("bounds", "--bounds", "numbers"), ("time_limit", "--time-limit", "number"),
          ("max_steps", "--max-steps", "number"), ("regularization", "--regularization", "number"),
          ("regularization_decay", "--regularization-decay", "number"),
          ("network", "--network", "numbers"), ("points", "--points", "number"), ("seed", "--seed", "number"))


def _saved_option(key: str, flag: str, kind: str, value: Any, where: str) -> list[str]:
    """One saved setting as command-line words (UsageError when its type is not the option's)."""
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    ok = {"path": isinstance(value, str), "word": isinstance(value, str), "number": number(value),
          "numbers": isinstance(value, list) and 0 < len(value) <= 6 and all(map(number, value)),
          "words": isinstance(value, list) and 0 < len(value) <= 6
          and all(isinstance(v, str) and v.isalnum() for v in value)}[kind]
    if not ok:
        raise UsageError(f"--resume: {where}: setting {key!r} is not what {flag} takes ({value!r})")
    if kind in ("path", "word"):   # one word: a value that looks like an option stays a value
        return [f"{flag}={value}"]
    if kind == "words":            # names (letters and digits): none looks like an option
        return [flag, *value]
    return [flag, *map(repr, value if kind == "numbers" else [value])]


def resumed_args(args: argparse.Namespace, given: list[str]) -> argparse.Namespace:
    """The run's own command line, from DIR/metrics.json, with the options given now that
    --resume allows (UsageError)."""
    folder = args.resume
    check_resume(folder, None if args.out == DEFAULT_OUT else args.out, given, RESUME_OPTIONS)
    where = os.path.join(folder, REPORT)
    try:
        report = read_report(where)
        settings = report["settings"]
        method = report["method"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--resume {folder!r}: no report of a helmpinn invert run there ({where}: "
                         f"{getattr(exc, 'strerror', None) or exc})") from None
    if method not in RESULT or not isinstance(settings, dict):
        raise UsageError(f"--resume {folder!r}: {where} is not the report of a pinn or fwi run (method {method!r})")
    words = ["invert"]
    if method == "pinn":   # a report written before the option existed: that run's fixed β
        settings = {"regularization_decay": 1.0, **settings}
        if settings.get("regularization") is None:   # written before reports recorded the β used:
            settings["regularization"] = _FORMER_REGULARIZATION   # the default of that time
    for key, flag, kind in _SAVED:
        if settings.get(key) is not None:
            words += _saved_option(key, flag, kind, settings[key], where)
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            new = parser().parse_args([str(w) for w in words])
    except SystemExit:
        raise UsageError(f"--resume: {where}: its settings are not a command line of helmpinn invert") from None
    for key in RESUME_OPTIONS:
        if key in given:
            setattr(new, key, getattr(args, key))
    new.resume, new.out = folder, folder
    return new


def resume_state(args: argparse.Namespace):
    """The stopped result (an Inversion, or fwi's FWIResult) in the folder of --resume (locked by
    rank 0; UsageError)."""
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
                         f"new run from its {VELOCITY} to go on)")
    return inv
