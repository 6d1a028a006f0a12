"""``helmpinn train``'s options: its arguments (a problem's options among them, a user's
factory's too), the one table from its flags onto the run plan's fields (:data:`FLAG_FIELDS`,
:data:`WEIGHT_FLAGS`, :data:`LM_FLAGS`), the options ``--resume`` takes, and the checks of
every number before anything is built (finite, in range; ``--threads`` at most 4 times the CPUs
this process may use). A problem's own ranges are the problem's to check."""
from __future__ import annotations

import argparse
import math
from typing import Any, Sequence

from ..optim import SCHEDULES
from ..problems.geometry import METHODS
from ..problems.registry import _is_spec, problem_names, problem_options
from ..training.plan import MODELS
from .runs import MAX_THREADS_PER_CPU, UsageError, cpus, flag

__all__ = ["DEFAULT_TARGET", "FLAG_FIELDS", "WEIGHT_FLAGS", "LM_FLAGS", "RESUME_OPTIONS", "add_parser",
           "problem_option_names", "check_options", "given", "takes"]

#: Options that may be given with ``--resume`` (every other setting comes from the checkpoint;
#: ``--problem`` only names the run's own problem again:
#: :func:`helmpinn.cli.train_resume.trusted_problem`).
RESUME_OPTIONS = ("steps", "checkpoint_every", "threads", "quiet", "no_plots", "problem",
                  "target", "time_limit")
#: ``train``'s target (the relative L2 error at which it stops) where the problem has an exact
#: solution and --target is not given: a first run ends once it has made the point (dirichlet2d:
#: Levenberg-Marquardt's iteration 20 of 200, 2.9e-6) rather than after every iteration
#: (6e-8, four to ten times as long); --target 0 trains to the optimiser's own stop.
DEFAULT_TARGET = 1e-5

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
FIELD_FLAGS = {field: flag(name) for name, field in FLAG_FIELDS.items()}

# Range checks of the numeric options: the least value of each integer, the numbers that must be
# positive or non-negative. None values are not given and come from the problem's defaults.
_INT_LIMITS = {"steps": 1, "points": 1, "bc_points": 0, "hidden": 1, "layers": 1, "fourier": 1,
               "threads": 1, "eval_every": 0, "resample": 0, "checkpoint_every": 0, "lbfgs": 0, "seed": 0,
               "warm_start": 0}
_POSITIVE = ("lr", "sigma", "time_limit")
_NON_NEGATIVE = ("w_pde", "w_data", "w_bc", "target")


def problem_option_names(problem: str | None = None) -> dict[str, type]:
    """Every option any registered problem takes and, with ``problem`` a user's factory
    (``file.py:make``, ``package.module:make``), every option that factory takes but one named
    like an option of train's own (``steps``: the factory's default holds), with its type (from
    the default; an option without a default, or with None for "derived from the others", is a
    number)."""
    def typed(options: dict[str, Any], skip=()) -> dict[str, type]:
        return {k: float if v is None else type(v) for k, v in options.items() if k not in skip}

    names: dict[str, type] = {}
    for name in problem_names():
        names = {**typed(problem_options(name)), **names}
    if _is_spec(problem):
        own = set(vars(_train_only().parse_args(["train"]))) - set(names)   # train's own options
        names = {**names, **typed(problem_options(problem), skip=own | set(names))}
    return names


def _train_only() -> argparse.ArgumentParser:
    """A parser of ``helmpinn train`` alone, with the built-in problems' options."""
    parser = argparse.ArgumentParser(prog="helmpinn", add_help=False)
    add_parser(parser.add_subparsers(dest="command"))
    return parser


def _boolean(text: str) -> bool:
    """A problem option whose default is True or False, as given on the command line."""
    words = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}
    if text.lower() not in words:
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return words[text.lower()]


def option_type(typ: type):
    """How the parser reads a problem option of type ``typ`` (a number: float, converted to an
    int for an int default by :func:`helmpinn.cli.train_settings.make_problem`)."""
    return float if typ in (int, float) else _boolean if typ is bool else str


def takes(accepted: Sequence[str]) -> str:
    """"(it takes --a, --b)": the options a problem takes, for a message."""
    return f"(it takes {', '.join('--' + k for k in accepted) or 'none'})"


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows the defaults the parser has; an option without one (None) takes the problem's or
    the optimiser's own, which its help text names, not "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def add_parser(sub: Any, problem: str | None = None) -> None:
    """Register ``helmpinn train`` on the subparsers ``sub`` of helmpinn's parser; with
    ``problem`` a user's factory (``file.py:make``), its options (:func:`problem_option_names`)
    are among train's, as a built-in problem's are."""
    t = sub.add_parser("train", help="train a model on a built-in problem and write a report",
                       description="Options without a stated default take the problem's (helmpinn "
                                   "problems; helmpinn.training.trainer.default_settings, helmpinn.optim.lm.lm_defaults).",
                       formatter_class=_HelpFormatter)
    t.add_argument("--problem", help="built-in problem (see `helmpinn problems`) or a factory of your own "
                   "(path/to/file.py:make); required unless --resume, with which it names the run's "
                   "own factory again (a run folder's factory is never loaded on its word alone)")
    t.add_argument("--resume", metavar="DIR", default=None,
                   help="continue the run saved in DIR (its model.npz) with its settings; only "
                        + ", ".join("--" + o.replace("_", "-") for o in RESUME_OPTIONS)
                        + " may be given with it (--steps: the new total)")
    g = t.add_argument_group("problem options (each problem takes some of them)")
    builtin = problem_option_names()
    for name, typ in builtin.items():
        g.add_argument(f"--{name}", type=option_type(typ), default=None, help=f"problem option {name}")
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
    for name, typ in problem_option_names(problem).items():
        if name not in builtin:
            g.add_argument(f"--{name}", type=option_type(typ), default=None, help=f"option of {problem}")


def check_options(args: argparse.Namespace) -> None:
    """Every number given is finite and in range (UsageError naming the option)."""
    for name, least in _INT_LIMITS.items():
        value = getattr(args, name)
        if value is not None and value < least:
            raise UsageError(f"{flag(name)} must be at least {least}, got {value}")
    for name in _POSITIVE + _NON_NEGATIVE:
        value = getattr(args, name)
        if value is None:
            continue
        if not math.isfinite(value) or value < 0 or (value == 0 and name in _POSITIVE):
            need = "a positive" if name in _POSITIVE else "a non-negative"
            raise UsageError(f"{flag(name)} must be {need} finite number, got {value:g}")
    for name, typ in problem_option_names(args.problem).items():  # the problem checks the range
        value = getattr(args, name, None)
        if typ in (int, float) and value is not None and not math.isfinite(value):
            raise UsageError(f"--{name} must be a finite number, got {value:g}")  # as the parser spells it
    if args.threads is not None and args.threads > MAX_THREADS_PER_CPU * cpus():
        raise UsageError(f"--threads {args.threads}: at most {MAX_THREADS_PER_CPU * cpus()} "
                         f"({MAX_THREADS_PER_CPU} per CPU this process may use, {cpus()})")


def given(args: argparse.Namespace) -> list[str]:
    """The options given on the command line (every train option defaults to None or False)."""
    return [k for k, v in vars(args).items() if k not in ("command", "resume") and v is not None and v is not False]
