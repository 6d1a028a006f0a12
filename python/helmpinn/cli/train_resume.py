"""``helmpinn train --resume DIR``: the run saved in DIR continued with its own settings (those
its checkpoint, ``DIR/model.npz``, records) and its history (``DIR/metrics.json``, when that
report is the run's own). A run folder is data and may come from anyone: the problem its
checkpoint names is built only when it is a registered problem or a user's factory that
``--problem`` names again, and a problem that now builds another problem than the one the run
trained on (its fingerprint, :mod:`helmpinn._signature`) is refused before training."""
from __future__ import annotations

import argparse
import os
from typing import Any

from .._signature import changed
from ..models.model_protocol import load_model
from ..problems.registry import canonical_name, get_problem, problem_names
from ..training.plan import current_names
from ..training.trainer import History
from .runs import UsageError, check_resume, read_report
from .train_options import RESUME_OPTIONS
from .train_settings import check_memory, user_code

__all__ = ["check", "resumed_run", "previous_history"]


def check(args: argparse.Namespace, given: list[str]) -> None:
    """--resume DIR: only the options a resumed run takes, and a folder DIR with a checkpoint."""
    check_resume(args.resume, args.out, given, RESUME_OPTIONS)
    if not os.path.lexists(os.path.join(args.resume, "model.npz")):
        raise UsageError(f"--resume {args.resume!r}: no model.npz there (no checkpoint of a run to continue)")


def resumed_run(args: argparse.Namespace):
    """Settings, problem and the checkpointed model of the run in ``args.resume`` (checked by
    :func:`check`, and locked)."""
    folder = args.resume
    path = os.path.join(folder, "model.npz")
    try:
        model = load_model(path)   # one network or a decomposed model
    except ValueError as exc:
        raise UsageError(f"--resume: {exc}") from None
    settings = model.metadata.get("settings")
    if not isinstance(settings, dict) or "problem" not in settings:
        raise UsageError(f"--resume: {path} holds no run settings (it was not written by helmpinn train)")
    settings = current_names(settings)   # a run saved under the fields' older names reads as theirs
    settings["betas"] = tuple(settings["betas"])
    settings.setdefault("device", "cpu")  # runs saved before --device trained on the CPU
    done = int(model.optimizer_state.get("step", 0))
    if args.steps is not None:
        settings["steps"] = args.steps
    if args.checkpoint_every is not None:
        settings["checkpoint_every"] = args.checkpoint_every
    if args.target is not None:
        settings["target"] = float(args.target) or None
    if settings["steps"] + settings.get("warm_start", 0) <= done:
        raise UsageError(f"--resume: the run in {folder!r} is already at step {done} of {settings['steps']}; "
                         f"give --steps N with N > {done} to train it further")
    _trusted_problem(settings["problem"], args.problem, path)
    try:
        with user_code(settings["problem"]):
            problem = get_problem(settings["problem"], **settings["problem_options"])
    except (ValueError, TypeError) as exc:
        raise UsageError(f"--resume: {path}: problem {settings['problem']!r}: {exc}") from None
    _check_same_problem(model.metadata.get("problem_signature"), problem, path)
    check_memory(settings, problem, model.specs[0] if hasattr(model, "specs") else model.spec, args.threads)
    return settings, problem, model, done


def _trusted_problem(saved: Any, given: str | None, path: str) -> None:
    """A run folder is data, and may come from anyone: the problem its checkpoint names is
    built on resume only when it is a registered name, or a user's factory (``file.py:make``,
    ``package.module:make``) that the command line names again with ``--problem``. Nothing a
    data file names alone is imported or called (a spec such as ``os:system`` would run it)."""
    if not isinstance(saved, str):
        raise UsageError(f"--resume: {path}: the problem it records is not a name ({saved!r})")
    if given is not None:
        try:
            same = canonical_name(given) == canonical_name(saved)
        except (ValueError, TypeError):
            same = False
        if not same:
            raise UsageError(f"--resume: {path} is a run of problem {saved!r}; --problem {given!r} names "
                             f"another (with --resume, --problem only confirms the run's own)")
        return
    if saved in problem_names():
        return
    raise UsageError(f"--resume: {path} names the problem {saved!r}, a factory that is not built in; "
                     f"helmpinn does not import or call what a data file names; if it is a factory of "
                     f"your own, name it yourself: --problem {saved}")


def _check_same_problem(recorded: Any, problem, path: str) -> None:
    """The problem a resumed run rebuilt is the one its checkpoint trained on (the fingerprint
    the checkpoint records, :mod:`helmpinn._signature`): a factory, its file or its data
    changed since is named as such, before training, not as a failure deep inside it."""
    differ = changed(recorded, problem)
    if differ:
        raise UsageError(f"--resume: {path}: problem {problem.name!r} now builds another problem than the run "
                         f"trained on ({', '.join(differ)} differ); its factory, file or data changed since. "
                         f"Restore them, or train anew into another --out")


_SAME_RUN = ("problem", "problem_options", "seed", "hidden", "layers", "ff_dim", "sigma", "dtype", "optimizer")


def previous_history(out: str, done: int, settings: dict[str, Any]):
    """The history (and training time) in ``out/metrics.json`` up to step ``done``, when that
    report is of the run being resumed (its settings; at step ``done``, or earlier when a later
    leg was killed before its report), and whether it was; else an empty history. Only a
    regular file of at most :data:`~helmpinn.cli.runs.MAX_REPORT_BYTES` is read."""
    try:
        old = read_report(os.path.join(out, "metrics.json"))
        final, saved = old["final_step"], current_names(old["settings"])
        if not isinstance(final, int) or final > done or any(saved.get(k) != settings.get(k) for k in _SAME_RUN):
            return History(), 0.0, False
        h = old["history"]
        keep = [i for i, st in enumerate(h["step"]) if st <= done]
        keep_eval = [i for i, st in enumerate(h["eval_step"]) if st <= done]
        fields = {k: [h[k][i] for i in (keep_eval if k.startswith("eval_") else keep)] for k in History().as_dict()}
        return History(**fields), float(old.get("train_time_s") or 0.0), True
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return History(), 0.0, False
