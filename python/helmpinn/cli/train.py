"""Command line: ``helmpinn train --problem NAME ...`` and ``helmpinn problems`` (``helmpinn invert``
is :mod:`helmpinn.cli_invert`).

``helmpinn train`` builds a built-in problem (or a user's, ``--problem path/to/file.py:make``:
:func:`helmpinn.problems.registry.get_problem`) with the options given as ``--NAME VALUE`` (a user's
factory's keyword options too; an option the problem does not take is refused naming those it
does), trains a model with settings derived from the problem (the optimiser and the model
:func:`helmpinn.solve` picks, unless ``--optimizer`` names one: the run plan of
:func:`helmpinn.run_plan`, whose fields the flags override through one table, :data:`FLAG_FIELDS`) and writes
``OUT/model.npz``, ``OUT/metrics.json`` and PNG figures (``solution.png``, ``error.png``,
``history.png``).

Every option is checked before anything is written: numbers must be finite and in range (a
problem's own options included; ``--threads`` at most 4 times the CPUs this process may use),
and the memory the run needs (the points arrays, the training set, the core's workspace, the
parameters, LM's matrices: :func:`helmpinn.memory.network_run`; a decomposed run's:
:func:`helmpinn.memory.decomposed_run`) must be within :func:`helmpinn.memory.limit` (80% of the
memory available, or ``HELMPINN_MEMORY_LIMIT``), or the run is refused naming the sizes. Misuse
exits with status 2 and one line on stderr. The output folder (:mod:`helmpinn.runfiles`) is then created and tried for writing and
locked for the whole run (``OUT/.helmpinn.lock``): a second run into the same folder, ``--resume``
included, is refused (status 2) without touching anything.

No work is lost, however a run stops. Every file is written to a temporary file in OUT and
renamed into place; the previous run's model, report and figures stay until this run has its
model (the first checkpoint), and then only the previous files this run did not replace are
removed. A checkpoint that cannot be written (a full disk) is one line, the file keeps the last
good one and the next checkpoint tries again; a run whose last checkpoint or report could not be
written exits with status 1 saying so. Only files helmpinn wrote are ever replaced or removed:
``OUT/.helmpinn-manifest.json`` records them, and a file under one of helmpinn's names that it
did not write (a user's own ``metrics.json``, a directory named ``model.npz``) makes the run
stop before training with a message naming it; temporary files are removed only under the
exact names helmpinn gives them.
Ctrl-C (SIGINT) stops after the current step, saves the checkpoint and the report and exits
with status 130; SIGTERM (how batch schedulers stop a job) does the same and exits with status
143 (in a single process; under MPI it ends the job as it always has). ``helmpinn train --resume
OUT`` continues that run with its saved settings (its ``--device`` included), keeping its
history; a run of a user's own factory resumes only with ``--problem`` naming that factory again
(a run folder is data: nothing it names is imported or called on its word alone). ``--device
cuda`` trains on the first GPU; without a CUDA build or a visible GPU, or with ``--optimizer lm``
(CPU only), it is refused (status 2) before anything is written. A run
that diverges (non-finite loss or parameters) keeps the last good checkpoint and exits with
status 1; without a checkpoint it writes no model, and a previous run's model in OUT stays with
its report (this run's report then goes to ``diverged-metrics.json``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from typing import Any, NamedTuple, Sequence

import numpy as np

from . import cli_invert, memory, runfiles
from ._cli_common import INTERRUPTED as _INTERRUPTED, MAX_THREADS_PER_CPU as _MAX_THREADS_PER_CPU
from ._cli_common import TERMINATED as _TERMINATED, UsageError as _UsageError
from ._cli_common import check_outputs as _check_outputs, cpus as _cpus, finite as _finite
from ._cli_common import lock as _lock, prepare_out as _prepare_out, stop_on_sigterm as _stop_on_sigterm

__all__ = ["main", "build_parser", "FLAG_FIELDS"]

#: The files ``helmpinn train`` writes into its output folder (a new run replaces old ones).
OUTPUTS = ("model.npz", "metrics.json", "solution.png", "error.png", "history.png")
_FIGURES = ("solution.png", "error.png", "history.png")
#: The report of a new run that diverged before its first checkpoint, beside a previous run's
#: model and report (which stay).
_DIVERGED_REPORT = "diverged-metrics.json"
_ALL_OUTPUTS = OUTPUTS + (_DIVERGED_REPORT,)
#: The largest metrics.json --resume reads (the history of a few million steps).
_MAX_REPORT_BYTES = 1 << 30
#: Options that may be given with ``--resume`` (every other setting comes from the checkpoint;
#: ``--problem`` only names the run's own problem again: :func:`_trusted_problem`).
_RESUME_OPTIONS = ("steps", "checkpoint_every", "threads", "quiet", "no_plots", "problem",
                   "target", "time_limit")
#: ``train``'s target (the relative L2 error at which it stops) where the problem has an exact
#: solution and --target is not given: a first run ends once it has made the point (dirichlet2d:
#: Levenberg-Marquardt's iteration 20 of 200, 2.9e-6) rather than after every iteration
#: (6e-8, four to ten times as long); --target 0 trains to the optimiser's own stop.
DEFAULT_TARGET = 1e-5


def _problem_option_names(problem: str | None = None) -> dict[str, type]:
    """Every option any registered problem takes and, with ``problem`` a user's factory
    (``file.py:make``, ``package.module:make``), every option that factory takes but one named
    like an option of train's own (``steps``: the factory's default holds), with its type (from
    the default; an option without a default, or with None for "derived from the others", is a
    number)."""
    from .problems.registry import _is_spec, problem_names, problem_options

    def typed(options: dict[str, Any], skip=()) -> dict[str, type]:
        return {k: float if v is None else type(v) for k, v in options.items() if k not in skip}

    names: dict[str, type] = {}
    for name in problem_names():
        names = {**typed(problem_options(name)), **names}
    if _is_spec(problem):
        own = set(vars(build_parser().parse_args(["train"]))) - set(names)   # train's own options
        names = {**names, **typed(problem_options(problem), skip=own | set(names))}
    return names


def _boolean(text: str) -> bool:
    """A problem option whose default is True or False, as given on the command line."""
    words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if text.lower() not in words:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return words[text.lower()]


def _option_type(typ: type):
    """How the parser reads a problem option of type ``typ`` (a number: float, converted to an
    int for an int default by :func:`_make_problem`)."""
    return float if typ in (int, float) else _boolean if typ is bool else str


def _takes(accepted: Sequence[str]) -> str:
    return f"(it takes {', '.join('--' + k for k in accepted) or 'none'})"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows the defaults the parser has; an option without one (None) takes the problem's or
    the optimiser's own, which its help text names, not "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def build_parser(problem: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser; with ``problem`` a user's factory (``file.py:make``), its
    options (:func:`_problem_option_names`) are among ``train``'s, as a built-in problem's are."""
    from .problems.geometry import METHODS
    from .optim import SCHEDULES
    from .training.plan import MODELS

    parser = argparse.ArgumentParser(prog="helmpinn", description="Physics-informed neural networks "
                                     "for the Helmholtz equation with exact fused gradients.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("problems", help="list the built-in problems")

    t = sub.add_parser("train", help="train a model on a built-in problem and write a report",
                       description="Options without a stated default take the problem's (helmpinn "
                                   "problems; helmpinn.training.trainer.default_settings, helmpinn.optim.lm.lm_defaults).",
                       formatter_class=_HelpFormatter)
    t.add_argument("--problem", help="built-in problem (see `helmpinn problems`) or a factory of your own "
                   "(path/to/file.py:make); required unless --resume, with which it names the run's "
                   "own factory again (a run folder's factory is never loaded on its word alone)")
    t.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the run saved in DIR (its model.npz) with its settings; only "
                        + ", ".join("--" + o.replace("_", "-") for o in _RESUME_OPTIONS)
                        + " may be given with it (--steps: the new total)")
    g = t.add_argument_group("problem options (each problem takes some of them)")
    builtin = _problem_option_names()
    for name, typ in builtin.items():
        g.add_argument(f"--{name}", type=_option_type(typ), default=None, help=f"problem option {name}")
    m = t.add_argument_group("model (default: chosen from the problem's wavenumber)")
    m.add_argument("--hidden", type=int, help="hidden layer width")
    m.add_argument("--layers", type=int, help="number of tanh hidden layers")
    m.add_argument("--fourier", type=int, help="number of Fourier frequencies m")
    m.add_argument("--sigma", type=float, help="std of the Fourier frequencies B")
    m.add_argument("--freeze-fourier", action="store_true", help="do not train B")
    m.add_argument("--dtype", choices=("float32", "float64"), help="floating point type")
    o = t.add_argument_group("training (default: chosen from the problem)")
    o.add_argument("--model", choices=MODELS, default=None,
                   help="auto (default: helmpinn.solve's choice, a decomposed model above a few "
                        "wavelengths), network (one network) or decomposed (windowed subnetworks "
                        "over a grid of subdomains: helmpinn.training.dd_driver; trained with --optimizer gn, "
                        "the default for it, or adam)")
    o.add_argument("--optimizer", choices=("adam", "lbfgs", "lm", "gn", "auto"), default=None,
                   help="auto (the default on the CPU: helmpinn.solve's choice, gn above a few "
                        "wavelengths, else lm, after an Adam warm start when its dense system would "
                        "not fit 2 GiB), adam (fused Adam; the default with --device cuda), lbfgs "
                        "(SciPy L-BFGS-B, float64), lm (Levenberg-Marquardt on the residuals, with its "
                        "own defaults for model, points and precision: helmpinn.optim.lm.lm_defaults) or gn "
                        "(a decomposed model, matrix-free Gauss-Newton: helmpinn.training.dd_driver)")
    o.add_argument("--steps", type=int, help="Adam steps, or L-BFGS / LM / Gauss-Newton iterations")
    o.add_argument("--lr", type=float, help="peak learning rate")
    o.add_argument("--schedule", choices=SCHEDULES, help="learning-rate schedule")
    o.add_argument("--points", type=int, help="interior collocation points per draw")
    o.add_argument("--bc-points", type=int, help="boundary points per draw")
    o.add_argument("--sampling", choices=METHODS, help="point sampling")
    o.add_argument("--resample", type=int, help="steps between fresh point draws (0: never)")
    o.add_argument("--w-pde", type=float, help="weight of the PDE term")
    o.add_argument("--w-data", type=float, help="weight of the data (Dirichlet) term")
    o.add_argument("--w-bc", type=float, help="weight of the Robin boundary term")
    o.add_argument("--lbfgs", type=int, default=None, help="L-BFGS polish iterations after the optimiser")
    o.add_argument("--warm-start", type=int, default=None, help="Adam steps before L-BFGS or LM (default 0)")
    o.add_argument("--lm-solver", choices=("auto", "primal", "dual", "cg"), default=None,
                   help="LM's linear system: JᵀJ (primal), JJᵀ (dual) or matrix-free CG (default auto: by shape)")
    o.add_argument("--lm-geodesic", action=argparse.BooleanOptionalAction, default=None,
                   help="LM with geodesic acceleration (default on; helmpinn.optim.lm)")
    o.add_argument("--lm-gram", choices=("float64", "float32"), default=None,
                   help="precision of LM's JᵀJ: float32 halves its cost and preconditions CG on the "
                        "float64 system (primal solver; default: the problem's, else float64)")
    o.add_argument("--target", type=float, default=None,
                   help=f"stop once the relative L2 error is below this (default {DEFAULT_TARGET:g} where the "
                        "problem has an exact solution; 0: no target, train to the optimiser's own stop)")
    o.add_argument("--time-limit", type=float, default=None, metavar="SECONDS",
                   help="stop training after about this many seconds (a step that would end past it is not "
                        "begun; the --lbfgs polish within it; default: none)")
    o.add_argument("--eval-every", type=int, help="steps between error evaluations")
    o.add_argument("--checkpoint-every", type=int, default=None,
                   help="steps between checkpoints (default 0: only at the end and on Ctrl-C)")
    o.add_argument("--seed", type=int, default=None, help="random seed (initialisation and sampling; default 0)")
    o.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where to train (default cpu): cuda trains on the first GPU (a CUDA build "
                        "of helmpinn; Adam steps there, --lbfgs / --optimizer lbfgs copy the "
                        "parameters to the CPU for L-BFGS and back; --optimizer lm is CPU only); "
                        "saved with the run, so --resume continues on the same device")
    o.add_argument("--threads", type=int, default=None, help="CPU threads (default: OpenMP's)")
    o.add_argument("--out", default=None, help="output folder (default helmpinn-out), locked while the run "
                   "lasts; a previous run's files there are replaced once this run has its model, and files "
                   "helmpinn did not write are never touched")
    o.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    for name, typ in _problem_option_names(problem).items():
        if name not in builtin:
            g.add_argument(f"--{name}", type=_option_type(typ), default=None, help=f"option of {problem}")
    cli_invert.add_parser(sub)   # helmpinn invert (helmpinn.cli_invert)
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
        with _user_code(problem):
            parser = build_parser(problem)
    except (ValueError, TypeError) as exc:   # a user's factory that cannot be loaded
        raise _UsageError(str(exc)) from None
    args, unknown = parser.parse_known_args(argv)
    flags = [a.partition("=")[0] for a in unknown if a.startswith("--")]
    if flags and args.command == "train" and args.problem is not None:
        from .problems.registry import problem_options

        try:
            accepted = problem_options(args.problem)
        except (ValueError, TypeError):
            accepted = None
        if accepted is not None:
            raise _UsageError(f"{flags[0]} is an option neither of helmpinn train nor of problem "
                              f"{args.problem!r} {_takes(accepted)}")
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _cmd_problems() -> int:
    from .problems.registry import list_problems, problem_options

    for name, desc in list_problems():
        opts = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                         for k, v in problem_options(name).items())
        print(f"{name:16s} {desc}\n{'':16s} options: {opts or 'none'}")
    return 0


# Range checks of the numeric options: (option, smallest allowed, whether it may equal that
# bound). None values are not given and come from the problem's defaults.
#: The flags that set a field of the run plan (:class:`helmpinn.training.plan.RunPlan`), by
#: their argparse names: the command line's one table from flags to fields. The loss weights'
#: flags set the plan's ``weights`` (:data:`WEIGHT_FLAGS`), LM's its ``lm`` options
#: (:data:`LM_FLAGS`), ``--freeze-fourier`` its ``train_fourier``.
FLAG_FIELDS = {"hidden": "hidden", "layers": "layers", "fourier": "ff_dim", "sigma": "sigma", "dtype": "dtype",
               "steps": "steps", "lr": "lr", "schedule": "schedule", "points": "pde_points",
               "bc_points": "bc_points", "sampling": "sampling", "resample": "resample_every",
               "eval_every": "eval_every", "lbfgs": "lbfgs", "warm_start": "warm_start", "seed": "seed"}
WEIGHT_FLAGS = {"w_pde": "pde", "w_data": "data", "w_bc": "bc"}
LM_FLAGS = {"lm_solver": "solver", "lm_geodesic": "geodesic", "lm_gram": "gram"}
#: A field's flag, for messages.
_FIELD_FLAGS = {field: "--" + flag.replace("_", "-") for flag, field in FLAG_FIELDS.items()}

_INT_LIMITS = {"steps": 1, "points": 1, "bc_points": 0, "hidden": 1, "layers": 1, "fourier": 1,
               "threads": 1, "eval_every": 0, "resample": 0, "checkpoint_every": 0, "lbfgs": 0, "seed": 0,
               "warm_start": 0}
_POSITIVE = ("lr", "sigma", "time_limit")
_NON_NEGATIVE = ("w_pde", "w_data", "w_bc", "target")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _check_options(args: argparse.Namespace) -> None:
    for name, least in _INT_LIMITS.items():
        value = getattr(args, name)
        if value is not None and value < least:
            raise _UsageError(f"{_flag(name)} must be at least {least}, got {value}")
    for name in _POSITIVE + _NON_NEGATIVE:
        value = getattr(args, name)
        if value is None:
            continue
        if not math.isfinite(value) or value < 0 or (value == 0 and name in _POSITIVE):
            need = "a positive" if name in _POSITIVE else "a non-negative"
            raise _UsageError(f"{_flag(name)} must be {need} finite number, got {value:g}")
    for name, typ in _problem_option_names(args.problem).items():  # the problem checks the range
        value = getattr(args, name, None)
        if typ in (int, float) and value is not None and not math.isfinite(value):
            raise _UsageError(f"--{name} must be a finite number, got {value:g}")  # as the parser spells it
    if args.threads is not None and args.threads > _MAX_THREADS_PER_CPU * _cpus():
        raise _UsageError(f"--threads {args.threads}: at most {_MAX_THREADS_PER_CPU * _cpus()} "
                          f"({_MAX_THREADS_PER_CPU} per CPU this process may use, {_cpus()})")


def _given(args: argparse.Namespace) -> list[str]:
    """The options given on the command line (every train option defaults to None or False)."""
    return [k for k, v in vars(args).items() if k not in ("command", "resume") and v is not None and v is not False]


def _new_run(args: argparse.Namespace):
    """Settings, problem and a fresh model from the command line."""
    problem = _make_problem(args)
    settings = _new_settings(args, problem)
    return settings, problem, _new_model(settings, problem, args.threads)


def _make_problem(args: argparse.Namespace):
    """The problem ``--problem`` names, built with the problem options given."""
    from .problems.registry import get_problem, problem_options

    if args.problem is None:
        raise _UsageError("--problem is required (or --resume DIR to continue a run)")
    try:
        accepted = problem_options(args.problem)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    opts: dict[str, Any] = {}
    for name in _problem_option_names(args.problem):
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in accepted:
            raise _UsageError(f"problem {args.problem!r} takes no option --{name} {_takes(accepted)}")
        default = accepted[name]
        integral = isinstance(default, int) and not isinstance(default, bool)
        opts[name] = int(value) if integral and float(value).is_integer() else value
    try:
        with _user_code(args.problem):
            return get_problem(args.problem, **opts)
    except (ValueError, TypeError) as exc:
        raise _UsageError(f"problem {args.problem!r}: {exc}") from None


@contextlib.contextmanager
def _user_code(name: str | None):
    """Around loading or calling the problem ``name``: where it is a user's factory
    (``file.py:make``, ``package.module:make``), whatever that code raises is one line naming
    it and its exception (exit status 2), and a ``sys.exit()`` in it is refused as such, not
    taken for the end of the run (status 0 having done nothing). ValueError and TypeError pass
    through (the caller words them); a built-in's other errors keep their traceback (a bug)."""
    from .problems.registry import _is_spec

    try:
        yield
    except (ValueError, TypeError, _UsageError):
        raise
    except (Exception, SystemExit) as exc:
        if not _is_spec(name):
            raise
        what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else \
            f"raised {type(exc).__name__}: {exc}"
        raise _UsageError(f"problem {name!r}: the factory {what}") from None


def _recorded(problem) -> dict[str, Any]:
    """The problem's options as the run's files record them: those JSON holds as they are (a
    user's factory's default that is a function, an array or a complex is left out, so that
    its default holds again on --resume: :func:`helmpinn.problems.registry.recorded_options`), so that
    no write fails at the end of the run."""
    from .problems.registry import recorded_options

    return recorded_options(problem.options)[0]


def _chosen(args: argparse.Namespace) -> str:
    """' (hp.solve's choice ...)' where the optimiser was not named on the command line."""
    return "" if args.optimizer not in (None, "auto") else \
        " (hp.solve's choice for this problem; --optimizer names another)"


def _new_settings(args: argparse.Namespace, problem) -> dict[str, Any]:
    """The run's settings: the record of its plan (:func:`helmpinn.run_plan` for ``problem``,
    the flags of :data:`FLAG_FIELDS`, :data:`WEIGHT_FLAGS` and :data:`LM_FLAGS` in place of its
    fields), with what the command line adds: the problem and its options, the target, the
    checkpoints, the device."""
    from .training.drivers import mismatch
    from .training.plan import run_plan

    # hp.solve's choice; Adam on a GPU (LM and Gauss-Newton run on the CPU)
    optimizer = args.optimizer or ("adam" if args.device == "cuda" else "auto")
    kind = args.model or "auto"
    why = mismatch(kind, optimizer) if kind != "auto" else None
    if why:
        raise _UsageError(f"--optimizer {optimizer} {why} (--model {kind})")
    try:  # settings derived from the problem's numbers (an extreme --k overflows them)
        plan = run_plan(problem, model=kind, optimizer=optimizer)
    except (ValueError, ArithmeticError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else "the settings derived from them overflow"
        raise _UsageError(f"problem {args.problem!r} with {_options_str(problem.options)}: {why}") from None
    overrides: dict[str, Any] = {field: getattr(args, flag) for flag, field in FLAG_FIELDS.items()
                                 if getattr(args, flag) is not None}
    weights = {term: getattr(args, flag) for flag, term in WEIGHT_FLAGS.items() if getattr(args, flag) is not None}
    lm = {option: getattr(args, flag) for flag, option in LM_FLAGS.items() if getattr(args, flag) is not None}
    if weights:
        overrides["weights"] = weights
    if args.freeze_fourier:
        overrides["train_fourier"] = False
    if lm and plan.optimizer != "lm":
        raise _UsageError(f"--lm-solver, --lm-geodesic and --lm-gram go with --optimizer lm; this run "
                          f"trains with {plan.optimizer}{_chosen(args)}")
    if lm:
        overrides["lm"] = {**lm, **({"geodesic": bool(lm["geodesic"])} if "geodesic" in lm else {})}
    if plan.model == "decomposed" and (overrides.get("lbfgs") or overrides.get("warm_start")):
        raise _UsageError(f"--lbfgs and --warm-start train one network; this run trains a decomposed "
                          f"model with {plan.optimizer}{_chosen(args)}")
    try:
        plan = plan.with_overrides("helmpinn train", **overrides)
    except (ValueError, TypeError) as exc:
        raise _UsageError(str(exc)) from None
    return {"problem": problem.name, "problem_options": _recorded(problem), **plan.record(),
            "target": _target(args.target, problem), "checkpoint_every": args.checkpoint_every or 0,
            "device": args.device or "cpu"}


def _target(given: float | None, problem) -> float | None:
    """The run's target error: --target (0: none), else :data:`DEFAULT_TARGET` where the
    problem has an exact solution (none without one: there is no error to compare)."""
    if given is not None:
        return float(given) or None
    return DEFAULT_TARGET if problem.exact is not None else None


def _decomposed(settings: dict[str, Any]) -> bool:
    """Whether the run's model is a decomposed one (runs saved before "model" was a setting
    trained one with "gn" only)."""
    return settings.get("model", "decomposed" if settings.get("optimizer") == "gn" else "network") == "decomposed"


def _new_model(settings: dict[str, Any], problem, threads: int | None):
    """A fresh model as ``settings`` say, once the run is known to fit in memory."""
    from . import _core
    from .training.plan import RunPlan

    try:
        spec = _core.ModelSpec(problem.dim, settings["ff_dim"], settings["hidden"], settings["layers"])
    except (ValueError, TypeError, OverflowError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else f"each must be an integer below {2**31}"
        raise _UsageError(f"invalid model (--fourier {settings['ff_dim']}, --hidden {settings['hidden']}, "
                          f"--layers {settings['layers']}): {why}") from None
    _check_memory(settings, problem, spec, threads)
    plan = RunPlan.from_record(settings)
    if plan.model == "decomposed":
        try:
            return plan.build_model(problem)
        except ValueError as exc:
            raise _UsageError(f"--model decomposed: {exc}") from None
    with np.errstate(over="ignore"):  # an overflow is reported below, naming the option
        model = plan.build_model(problem)
    if not np.all(np.isfinite(model.params)):
        raise _UsageError(f"--sigma {settings['sigma']:g}: the Fourier frequencies drawn with it are not "
                          f"finite in {settings['dtype']}; give a smaller --sigma (or --k)")
    return model


def _options_str(options: dict[str, Any]) -> str:
    return " ".join(f"--{k} {v:g}" if isinstance(v, (int, float)) else f"--{k} {v}" for k, v in options.items()) \
        or "its defaults"


def _check_memory(settings: dict[str, Any], problem, spec, threads: int | None) -> None:
    """Refuse a run that would not fit in memory, before anything is allocated: one network's
    points, training set, workspace, parameters and LM's matrices, or the whole decomposed run
    (:func:`helmpinn.memory.check_settings`, within :func:`helmpinn.memory.limit`)."""
    from . import _core
    from .distributed import launched_size

    # a CPU workspace has scratch rows for as many threads as OpenMP runs or there are CPUs
    threads = max(threads or _core.get_num_threads(), _cpus())
    ranks = launched_size()   # under mpiexec each rank holds its share
    lm_options = settings["lm"] if settings.get("optimizer") == "lm" and not _decomposed(settings) else None
    if lm_options is not None:   # LM's refusal of a dense solver over its budget, named as its option
        try:
            memory.lm_system(spec.num_params, int(settings["pde_points"]) + int(settings["bc_points"]), lm_options,
                             settings["dtype"], ranks)
        except (ValueError, TypeError) as exc:
            raise _UsageError(f"--optimizer lm: {exc}") from None
    try:
        if _decomposed(settings):   # the whole decomposed run, not one subnetwork's
            memory.check_settings({**settings, "model": "decomposed"}, problem, ranks=ranks, threads=threads, flags={
                "points": "--points", "grids": "the problem's size", "hidden": "--hidden, --fourier"})
        else:
            what = ", ".join(f"{_FIELD_FLAGS[k]} {settings[k]}"
                             for k in ("pde_points", "bc_points", "hidden", "layers", "ff_dim"))
            memory.check_network(spec, settings["pde_points"], settings["bc_points"], dtype=settings["dtype"],
                                 lm_options=lm_options, ranks=ranks, threads=threads,
                                 what=f"this run ({what}, {settings['dtype']})",
                                 flags={"points": "--points, --bc-points", "hidden": "--hidden, --layers, --fourier"})
    except ValueError as exc:   # MemoryEstimateError, or a HELMPINN_MEMORY_LIMIT that is not a size
        raise _UsageError(str(exc)) from None


def _check_resume(args: argparse.Namespace, given: list[str]) -> None:
    """--resume DIR: only the options a resumed run takes, and a folder DIR."""
    extra = [k for k in given if k not in _RESUME_OPTIONS]
    if extra:
        raise _UsageError(f"--resume continues a run with its saved settings; {', '.join(map(_flag, extra))} "
                          f"cannot be given with it (allowed: {', '.join(map(_flag, _RESUME_OPTIONS))})")
    if args.out is not None and os.path.abspath(args.out) != os.path.abspath(args.resume):
        raise _UsageError("--resume DIR writes into DIR; --out cannot name another folder")
    if not os.path.isdir(args.resume):
        raise _UsageError(f"--resume {args.resume!r}: no such folder")
    if not os.path.lexists(os.path.join(args.resume, "model.npz")):
        raise _UsageError(f"--resume {args.resume!r}: no model.npz there (no checkpoint of a run to continue)")


def _resumed_run(args: argparse.Namespace):
    """Settings, problem and the checkpointed model of the run in ``args.resume`` (checked by
    :func:`_check_resume`, and locked)."""
    from .training.dd_driver import load_model
    from .training.plan import current_names
    from .problems.registry import get_problem

    folder = args.resume
    path = os.path.join(folder, "model.npz")
    try:
        model = load_model(path)   # one network or a decomposed model
    except ValueError as exc:
        raise _UsageError(f"--resume: {exc}") from None
    settings = model.metadata.get("settings")
    if not isinstance(settings, dict) or "problem" not in settings:
        raise _UsageError(f"--resume: {path} holds no run settings (it was not written by helmpinn train)")
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
        raise _UsageError(f"--resume: the run in {folder!r} is already at step {done} of {settings['steps']}; "
                          f"give --steps N with N > {done} to train it further")
    _trusted_problem(settings["problem"], args.problem, path)
    try:
        with _user_code(settings["problem"]):
            problem = get_problem(settings["problem"], **settings["problem_options"])
    except (ValueError, TypeError) as exc:
        raise _UsageError(f"--resume: {path}: problem {settings['problem']!r}: {exc}") from None
    _check_same_problem(model.metadata.get("problem_signature"), problem, path)
    _check_memory(settings, problem, model.specs[0] if hasattr(model, "specs") else model.spec, args.threads)
    return settings, problem, model, done


def _trusted_problem(saved: Any, given: str | None, path: str) -> None:
    """A run folder is data, and may come from anyone: the problem its checkpoint names is
    built on resume only when it is a registered name, or a user's factory (``file.py:make``,
    ``package.module:make``) that the command line names again with ``--problem``. Nothing a
    data file names alone is imported or called (a spec such as ``os:system`` would run it)."""
    from .problems.registry import canonical_name, problem_names

    if not isinstance(saved, str):
        raise _UsageError(f"--resume: {path}: the problem it records is not a name ({saved!r})")
    if given is not None:
        try:
            same = canonical_name(given) == canonical_name(saved)
        except (ValueError, TypeError):
            same = False
        if not same:
            raise _UsageError(f"--resume: {path} is a run of problem {saved!r}; --problem {given!r} names "
                              f"another (with --resume, --problem only confirms the run's own)")
        return
    if saved in problem_names():
        return
    raise _UsageError(f"--resume: {path} names the problem {saved!r}, a factory that is not built in; "
                      f"helmpinn does not import or call what a data file names; if it is a factory of "
                      f"your own, name it yourself: --problem {saved}")


def _check_same_problem(recorded: Any, problem, path: str) -> None:
    """The problem a resumed run rebuilt is the one its checkpoint trained on (the fingerprint
    the checkpoint records, :mod:`helmpinn._signature`): a factory, its file or its data
    changed since is named as such, before training, not as a failure deep inside it."""
    from ._signature import changed

    differ = changed(recorded, problem)
    if differ:
        raise _UsageError(f"--resume: {path}: problem {problem.name!r} now builds another problem than the run "
                          f"trained on ({', '.join(differ)} differ); its factory, file or data changed since. "
                          f"Restore them, or train anew into another --out")


def _check_device(settings: dict[str, Any], ranks: int, resume: str | None) -> None:
    """--device cuda: the run can train on a GPU here (what the Trainer and the machine allow),
    checked before anything is written."""
    if settings["device"] == "cpu":
        return
    from . import _core

    flag = f"--device {settings['device']}"
    where = f"{flag}:" if resume is None else f"--resume {resume!r}: the run trains with {flag}, but"
    if _decomposed(settings):
        raise _UsageError(f"{where} a decomposed model trains on the CPU only (its subnetworks' "
                          "products are host calls): use --device cpu, or --model network on the GPU")
    if settings.get("optimizer") == "lm":
        raise _UsageError(f"{where} --optimizer lm runs on the CPU only (Levenberg-Marquardt's "
                          "Jacobian and solves are host arrays): use --device cpu with it, or "
                          "--optimizer adam or lbfgs on the GPU")
    if ranks > 1:
        raise _UsageError(f"{where} data-parallel training over {ranks} MPI ranks runs on the CPU "
                          "only (the ranks reduce host gradients): use --device cpu, or one process")
    if not _core.has_cuda():
        raise _UsageError(f"{where} helmpinn was built without CUDA support (rebuild it with "
                          "CUDA, or use --device cpu)")
    if _core.cuda_device_count() == 0:
        raise _UsageError(f"{where} no CUDA device is visible ({_core.cuda_device_error()}); "
                          "use --device cpu")


_SAME_RUN = ("problem", "problem_options", "seed", "hidden", "layers", "ff_dim", "sigma", "dtype", "optimizer")


def _previous_history(out: str, done: int, settings: dict[str, Any]):
    """The history (and training time) in ``out/metrics.json`` up to step ``done``, when that
    report is of the run being resumed (its settings; at step ``done``, or earlier when a later
    leg was killed before its report), and whether it was; else an empty history. Only a
    regular file of at most ``_MAX_REPORT_BYTES`` is read."""
    from .training.plan import current_names
    from .training.trainer import History

    try:
        old = json.loads(runfiles.read_regular(os.path.join(out, "metrics.json"), _MAX_REPORT_BYTES))
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


def _write_figures(folder: runfiles.RunFolder, problem, model, history) -> list[str]:
    """The figures, drawn into a temporary folder in OUT and each renamed into place."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print("helmpinn: matplotlib is not installed, so no figures were written "
              "(pip install matplotlib)", file=sys.stderr)
        return []
    from .plots import plot_all

    tmp = folder.figure_dir()
    try:
        return [folder.replace(os.path.basename(f), f) for f in plot_all(problem, model, history, tmp)]
    finally:
        runfiles.remove_tree(tmp)


class _Run:
    """One ``helmpinn train``: where it runs (``comm``, ``rank`` of ``ranks``), what it trains
    (settings, problem, model, trainer; ``done``: the step a resumed run continues from, 0 for
    a new one) and where it writes (``out``; rank 0's locked ``folder``; ``before``: the
    signature of the previous run's model there, kept until this run replaces it)."""

    def __init__(self, args: argparse.Namespace, comm: Any):
        self.args, self.comm = args, comm
        self.rank, self.ranks = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
        self.quiet = args.quiet or self.rank != 0  # rank 0 alone prints, writes files and holds the lock
        self.settings: dict[str, Any] = {}
        self.problem = self.model = self.trainer = None
        self.done, self.out = 0, ""
        self.folder: runfiles.RunFolder | None = None
        self.before: Any = None
        self.same_run = False

    @property
    def model_path(self) -> str:
        return os.path.join(self.out, "model.npz")


class _Trained(NamedTuple):
    """What the training part of a run did: its history, the L-BFGS summary, the optimiser's
    own time and steps (before any --lbfgs polish), and whether a stop request ended it."""

    history: Any
    polish: dict[str, Any] | None
    main_time: float
    main_steps: int
    interrupted: bool


def _cmd_train(args: argparse.Namespace, held: contextlib.ExitStack) -> int:
    t_start = time.perf_counter()
    try:  # under mpiexec / srun: data-parallel over the ranks (helmpinn.distributed)
        from .distributed import launch_comm

        run = _Run(args, launch_comm())
    except RuntimeError as exc:
        print(f"helmpinn: {exc}", file=sys.stderr)
        return 2
    if not _set_up(run, held):
        return 2
    _announce(run)
    terminated = held.enter_context(_stop_on_sigterm(run.trainer)) if run.ranks == 1 else []
    try:
        trained = _train(run)
    except ValueError as exc:  # non-finite training data, named by the core
        print(f"helmpinn: {exc}", file=sys.stderr)
        if run.folder is not None:
            run.folder.record("model.npz")
        return 1
    error = run.trainer.evaluate()
    wall = time.perf_counter() - t_start  # set-up, training and polish; not the figures
    # This run's model: the resumed run's checkpoint, or one this run wrote (a diverged new
    # run may have none; a previous run's model then stays where it was)
    have_model = run.folder is not None and (bool(run.done) or run.folder.signature("model.npz") != run.before)
    metrics = _metrics(run, trained, error if have_model else None, wall)
    if run.rank != 0:  # rank 0 alone writes the report and the figures
        return 1 if run.trainer.diverged else 0
    return _finish(run, metrics, trained, error, have_model=have_model, terminated=bool(terminated))


#: The name of the set-up's first agreement under MPI (that of a rank refused earlier too).
_CHECKS = "helmpinn train: checks"


def _set_up(run: _Run, held: contextlib.ExitStack) -> bool:
    """Every check, then rank 0 locks the output folder and claims its files, and the Trainer
    is built. False, after one line on stderr, when the command line is refused (on every rank
    when on one).

    Under MPI a usage error may come on one rank only (a factory whose data file is missing on
    one node): the ranks agree on the checks (:func:`_agreed`) before any other collective
    (the count of the ranks on a node, the Trainer's comparison of the ranks' problems, its
    draw of points), so that every rank stops, with status 2, and rank 0 prints the failing
    rank's message."""
    def check() -> None:
        _check_options(run.args)
        _resolve(run, held)
        _check_ranks(run.settings, run.ranks)
        _check_device(run.settings, run.ranks, run.args.resume)

    def build() -> None:
        if run.rank == 0 and run.folder is None:   # a new run's folder, once every rank's checks passed
            _prepare_out(run.out)
            run.folder = _lock(run.out, "--out", held)
        run.trainer = _make_trainer(run)
        if run.done:
            run.trainer.history, run.trainer.train_time, run.same_run = \
                _previous_history(run.out, run.done, run.settings)
            run.trainer.checkpoints.step = run.done   # the checkpoint resumed from is in OUT
        if run.folder is not None:
            _claim_outputs(run)

    failure = _agreed(run, check, _CHECKS)
    if failure is None:
        _set_threads(run)   # a collective under MPI: every rank gets here, or none
        failure = _agreed(run, build, "helmpinn train: set-up")
    if failure is not None and run.rank == 0:
        print(f"helmpinn: {failure}", file=sys.stderr)
    return failure is None


def _agreed(run: _Run, work, what: str) -> str | None:
    """Runs ``work()``; the message of a usage error on any rank (every rank learns it: one
    agreement, :func:`helmpinn.distributed.agree`, which a rank that failed early meets in the
    others' next collective of :mod:`helmpinn.distributed`), prefixed with the rank where it is
    another rank's; None when no rank failed."""
    from .distributed import CollectiveError

    error = None
    try:
        work()
    except _UsageError as exc:
        error = exc
    except CollectiveError as exc:   # a collective inside work met another rank's failure: agreed
        return _their_message(exc)
    return _agree_on(run.comm, error, what)


def _agree_on(comm: Any, error: _UsageError | None, what: str) -> str | None:
    """The agreement of :func:`_agreed` (``comm`` None: this process's ``error`` alone)."""
    from .distributed import CollectiveError, agree

    try:
        agree(comm, error, what)
    except _UsageError as exc:
        return str(exc)
    except CollectiveError as exc:   # another rank's usage error
        return _their_message(exc)
    return None


def _their_message(exc) -> str:
    """The first failing rank's message of a CollectiveError, as rank 0 prints it."""
    rank, _, kind, message = exc.failures[0]
    return f"rank {rank}: {message if kind == _UsageError.__name__ else f'{kind}: {message}'}"


def _refused_command_line(error: _UsageError) -> int:
    """A command line refused before the run's set-up: one line, status 2. Under several MPI
    ranks the others may have read theirs (a user's factory that cannot be loaded on one node
    only): this rank meets them in the set-up's first agreement, so that every rank stops
    (status 2) instead of waiting for it, and rank 0 prints the message."""
    from .distributed import launch_comm

    try:
        comm = launch_comm()
    except RuntimeError:   # mpi4py missing under a launcher: every rank says so alone
        comm = None
    failure = _agree_on(comm, error, _CHECKS)
    if comm is None or comm.Get_rank() == 0:
        print(f"helmpinn: {failure}", file=sys.stderr)
    return 2


def _resolve(run: _Run, held: contextlib.ExitStack) -> None:
    """The run's settings, problem, model and output folder: from the command line, or from
    the checkpoint that ``--resume DIR`` continues (DIR locked first, on rank 0)."""
    args = run.args
    if args.resume is not None:
        _check_resume(args, _given(args))
        run.out = args.resume
        run.folder = _lock(run.out, "--resume", held) if run.rank == 0 else None
        run.settings, run.problem, run.model, run.done = _resumed_run(args)
    else:
        run.settings, run.problem, run.model = _new_run(args)
        run.out = "helmpinn-out" if args.out is None else args.out


def _check_ranks(settings: dict[str, Any], ranks: int) -> None:
    """The optimiser, the --lbfgs polish and LM's solver run over ``ranks`` MPI ranks
    (:func:`helmpinn.distributed.check_ranks` says which do)."""
    from .distributed import check_ranks

    optimizer = settings.get("optimizer", "adam")
    checks = [("lbfgs", f"--lbfgs {settings['lbfgs']}")] if settings["lbfgs"] else []
    checks.append((optimizer, f"--optimizer {optimizer}"))
    if optimizer == "lm":
        checks.append((f"lm:{settings['lm']['solver']}", f"--lm-solver {settings['lm']['solver']}"))
    for what, flag in checks:
        try:
            check_ranks(what, ranks)
        except ValueError as exc:
            raise _UsageError(f"{flag}: {exc}") from None


def _set_threads(run: _Run) -> None:
    """--threads, else (under MPI) as many as keep ranks x threads within a node's cores."""
    from . import _core
    from .distributed import threads_per_rank

    if run.args.threads is not None:
        _core.set_num_threads(run.args.threads)
    elif run.comm is not None:
        _core.set_num_threads(threads_per_rank(run.comm))
    run.settings["threads"] = _core.get_num_threads()
    run.settings["ranks"] = run.ranks


def _make_trainer(run: _Run):
    """The Trainer of the run's plan (:meth:`helmpinn.training.plan.RunPlan.trainer`),
    checkpointing to OUT/model.npz (the settings saved in the model's metadata, for --resume)."""
    from .problems.jumps import training_problem
    from .training.plan import RunPlan

    s, model = run.settings, run.model
    model.metadata = {**model.metadata, "problem": run.problem.name, "problem_options": _recorded(run.problem),
                      "settings": s}
    try:
        # a medium's jumps smoothed, as hp.solve's default (helmpinn.problems.jumps)
        return RunPlan.from_record(s).trainer(
            training_problem(run.problem)[0], model, target_error=s["target"], time_limit=run.args.time_limit,
            checkpoint_every=s["checkpoint_every"], checkpoint_path=run.model_path, progress=not run.quiet,
            stop_on_interrupt=run.ranks == 1, comm=run.comm, device=s["device"])
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def _claim_outputs(run: _Run) -> None:
    """What this run writes must be helmpinn's to replace (the checkpoint, and the report of
    the run, being resumed are); stale temporary files go; model.npz is claimed for this run."""
    folder, done = run.folder, run.done
    adopt = ("model.npz", "metrics.json") if done and run.same_run else ("model.npz",) if done else ()
    writes = _ALL_OUTPUTS if not run.args.no_plots else tuple(n for n in _ALL_OUTPUTS if n not in _FIGURES)
    _check_outputs(folder, writes, adopt)
    folder.remove_stale_temps(_ALL_OUTPUTS)
    run.before = folder.signature("model.npz")  # the previous run's model, kept until replaced
    folder.claim("model.npz")


def _announce(run: _Run) -> None:
    from .problems.waves import resonance_warning

    if run.quiet:
        return
    what = f"resuming at step {run.done} of" if run.done else "training for"
    print(f"helmpinn: {run.problem!r}\nhelmpinn: {run.model!r}, {run.settings['threads']} threads, "
          f"{what} {run.settings['steps']} steps, {run.trainer.pde_points} + {run.trainer.bc_points} points"
          + (f", {run.ranks} MPI ranks" if run.ranks > 1 else "")
          + (f", until an error below {run.settings['target']:g} (--target)" if run.settings.get("target") else "")
          + (f", within {run.args.time_limit:g} s" if run.args.time_limit else ""), file=sys.stderr)
    words = resonance_warning(run.problem)
    if words:
        print(f"helmpinn: note: {words}", file=sys.stderr)


def _train(run: _Run) -> _Trained:
    """The optimiser (after its Adam warm start), then the --lbfgs polish unless the run
    diverged, reached its target or was stopped; --time-limit covers every phase."""
    from .training.plan import RunPlan, polish as polish_phase, train

    trainer, plan = run.trainer, RunPlan.from_record(run.settings)
    limit, start = run.args.time_limit, trainer.clock()
    history, polish = train(trainer, plan, run.done, time_limit=limit, since=start)
    interrupted = trainer.stop_requested is not None
    main_time = trainer.train_time   # the optimiser's (Adam, L-BFGS or LM), before any --lbfgs polish
    main_steps = len(history.step)
    polish = polish_phase(trainer, plan, time_limit=limit, since=start) or polish   # checkpointed at its end
    return _Trained(history, polish, main_time, main_steps, interrupted)


def _metrics(run: _Run, trained: _Trained, error: float | None, wall: float) -> dict[str, Any]:
    """The report (metrics.json) of the run; ``error``: the final relative L2 error of this
    run's model (None without one)."""
    from . import _core

    trainer, settings, history = run.trainer, run.settings, trained.history
    main_time, main_steps = trained.main_time, trained.main_steps
    return {
        "settings": settings,
        "num_params": run.model.num_params,
        "steps": main_steps,
        "final_step": trainer.step,
        "resumed_from_step": run.done or None,
        "stop_reason": trainer.stop_reason,
        "status": None if trainer.status is None else trainer.status.name,
        "diverged": trainer.diverged,
        "interrupted": trained.interrupted,
        "train_time_s": trainer.train_time,
        "main_time_s": main_time,
        "adam_time_s": main_time if settings.get("optimizer", "adam") == "adam" else None,
        "steps_per_s": main_steps / main_time if main_time > 0 else None,
        "wall_time_s": wall,
        "final": {"relative_l2": error,
                  "loss": history.loss[-1] if history.loss else None,
                  "pde": history.pde[-1] if history.pde else None,
                  "data": history.data[-1] if history.data else None,
                  "bc": history.bc[-1] if history.bc else None},
        "time_to_1e-2_s": _time_to(history, 1e-2),
        "lbfgs": trained.polish,
        "lm": _lm_summary(trainer),
        "gn": trainer.driver.summary() if getattr(trainer.driver, "name", None) == "gn" else None,
        "history": history.as_dict(),
        "version": getattr(_core, "__version__", None),
    }


def _finish(run: _Run, metrics: dict[str, Any], trained: _Trained, error: float | None, *, have_model: bool,
            terminated: bool) -> int:
    """Rank 0 writes the report and the figures and says how the run ended (``error``: the
    final relative L2 error); the exit status."""
    trainer, settings, out = run.trainer, run.settings, run.out
    try:
        status = _write_outputs(run.folder, metrics, run.problem, run.model, trained.history.as_dict(),
                                have_model=have_model, kept_previous=not have_model and run.before is not None,
                                plots=not run.args.no_plots)
    except OSError as exc:   # a full disk: said in one line, the files already there left whole
        print(f"helmpinn: could not write the report or the figures in {out} ({exc.strerror or exc}); "
              f"{_model_state(run)}", file=sys.stderr)
        return 1
    metrics_path = os.path.join(out, status["report"])
    if trainer.checkpoints.failed and not trainer.diverged:
        print(f"helmpinn: the run's last checkpoint was not written: {trainer.checkpoints.failed}; wrote "
              f"{metrics_path}", file=sys.stderr)
        return 1
    if trainer.diverged:
        kept = (f"kept the last good checkpoint {run.model_path} (step {trainer.step})" if have_model else
                "no model was written (no checkpoint before the divergence; --checkpoint-every N keeps one)")
        if status["kept_previous"]:
            kept += f"; the previous run's {', '.join(status['kept_previous'])} in {out} are left as they were"
        print(f"helmpinn: training diverged: {trainer.stop_reason}; {kept}; wrote {metrics_path}. "
              f"A smaller --lr (this run: {settings['lr']:g}) may help", file=sys.stderr)
        return 1
    if trained.interrupted:
        how = "terminated" if terminated else "interrupted"
        print(f"helmpinn: {how} at step {trainer.step} of {settings['steps']}; wrote {run.model_path}, "
              f"{metrics_path}; continue with: helmpinn train --resume {out}", file=sys.stderr)
        return _TERMINATED if terminated else _INTERRUPTED
    if not run.quiet:
        err_s = "n/a" if error is None else f"{error:.3e}"
        print(f"helmpinn: relative L2 error {err_s} after {trainer.step} steps, "
              f"{trainer.train_time:.1f} s ({_rate(metrics['steps_per_s'])}); "
              f"wrote {run.model_path}, {metrics_path}"
              + "".join(f", {f}" for f in status["figures"])
              + (f"; removed the previous run's {', '.join(status['removed'])}" if status["removed"] else ""),
              file=sys.stderr)
    return _TERMINATED if terminated else 0


def _model_state(run: _Run) -> str:
    """Which model the output folder holds, in words, after a write failed."""
    trainer = run.trainer
    if trainer.checkpoints.failed:
        return trainer.checkpoints.failed
    if trainer.checkpoints.step is not None:
        return f"{run.model_path} holds step {trainer.checkpoints.step}"
    return "this run wrote no model"


def _write_outputs(folder: runfiles.RunFolder, metrics: dict[str, Any], problem, model, history,
                   *, have_model: bool, kept_previous: bool, plots: bool) -> dict[str, Any]:
    """The report and the figures, each written atomically; then the previous run's files this
    run did not replace are removed (only once this run has its model). A new run without a
    model beside a previous run's model leaves that run's files as they are and writes its
    report to ``diverged-metrics.json``."""
    report = _DIVERGED_REPORT if kept_previous else "metrics.json"
    folder.write(report, json.dumps(_finite(metrics), indent=1).encode())
    figures = _write_figures(folder, problem, model, history) if plots and have_model else []
    written = {"model.npz", report, *map(os.path.basename, figures)}
    removed = folder.remove(n for n in _ALL_OUTPUTS if n not in written) if have_model else []
    folder.record("model.npz")  # as it is now (no longer claimed by a running run)
    kept = [n for n in OUTPUTS if kept_previous and n not in written and folder.owns(n)]
    return {"report": report, "figures": figures, "removed": removed,
            "kept_previous": ["model.npz", *kept] if kept_previous else []}


def _rate(steps_per_s: float | None) -> str:
    """"1234 steps/s", or "5.5 s/step" for the slow steps of L-BFGS and LM."""
    if not steps_per_s:
        return "n/a steps/s"
    return f"{steps_per_s:.0f} steps/s" if steps_per_s >= 10 else f"{1.0 / steps_per_s:.2g} s/step"


def _lm_summary(trainer) -> dict[str, Any] | None:
    """The report of the run's Levenberg-Marquardt driver (None when LM did not run)."""
    from .training.drivers import LMDriver

    return trainer.driver.summary() if isinstance(trainer.driver, LMDriver) else None


def _time_to(history, tol: float) -> float | None:
    for t, e in zip(history.eval_time, history.eval_error):
        if e is not None and e < tol:
            return t
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parse(argv)
    except _UsageError as exc:
        return _refused_command_line(exc)
    if args.command == "problems":
        return _cmd_problems()
    if args.command == "invert":
        return cli_invert.run(args)
    from .distributed import abort_on_error, launch_comm

    try:
        comm = launch_comm()
    except RuntimeError:  # mpi4py missing under a launcher: _cmd_train says so
        comm = None
    # Under several MPI ranks an exception that escapes everything on one rank ends the job on
    # every rank (with the message) instead of leaving the others waiting in a collective.
    with abort_on_error(comm):
        try:
            with contextlib.ExitStack() as held:  # the output folder's lock, the SIGTERM handler
                return _cmd_train(args, held)
        except KeyboardInterrupt:  # a second Ctrl-C, or one outside the training loop
            print("\nhelmpinn: aborted (the last checkpoint, if any, is in the output folder)",
                  file=sys.stderr)
            return _INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
