"""What a ``helmpinn train`` run trains, and the checks of it before anything is written or
allocated: a new run's problem (built-in or a user's factory, built with the options given;
whatever a factory raises is one line naming it), its settings (the run plan of
:func:`helmpinn.run_plan` with the flags of :data:`~helmpinn.cli.train_options.FLAG_FIELDS` in
place of its fields, the target, the checkpoints, the device) and its model; whether the run
fits in memory (:mod:`helmpinn.memory`), runs on the device it names and over the MPI ranks it
was launched on. A resumed run's settings and model come from its checkpoint
(:mod:`helmpinn.cli.train_resume`) and meet the same checks."""
from __future__ import annotations

import argparse
import contextlib
from typing import Any

import numpy as np

from .. import _core, distributed, memory
from ..problems.registry import _is_spec, get_problem, problem_options, recorded_options
from ..training.drivers import mismatch
from ..problems.jumps import training_problem
from ..training.plan import RunPlan, run_plan
from .runs import UsageError, cpus
from .train_options import DEFAULT_TARGET, FIELD_FLAGS, FLAG_FIELDS, LM_FLAGS, WEIGHT_FLAGS, problem_option_names, takes

__all__ = ["new_run", "make_problem", "user_code", "recorded", "new_settings", "decomposed", "check_memory",
           "check_device", "check_ranks"]


def new_run(args: argparse.Namespace):
    """Settings, problem and a fresh model from the command line."""
    problem = make_problem(args)
    settings = new_settings(args, problem)
    return settings, problem, _new_model(settings, problem, args.threads)


def make_problem(args: argparse.Namespace):
    """The problem ``--problem`` names, built with the problem options given."""
    if args.problem is None:
        raise UsageError("--problem is required (or --resume DIR to continue a run)")
    try:
        accepted = problem_options(args.problem)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    opts: dict[str, Any] = {}
    for name in problem_option_names(args.problem):
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in accepted:
            raise UsageError(f"problem {args.problem!r} takes no option --{name} {takes(accepted)}")
        default = accepted[name]
        integral = isinstance(default, int) and not isinstance(default, bool)
        opts[name] = int(value) if integral and float(value).is_integer() else value
    try:
        with user_code(args.problem):
            return get_problem(args.problem, **opts)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"problem {args.problem!r}: {exc}") from None


@contextlib.contextmanager
def user_code(name: str | None):
    """Around loading or calling the problem ``name``: where it is a user's factory
    (``file.py:make``, ``package.module:make``), whatever that code raises is one line naming
    it and its exception (exit status 2), and a ``sys.exit()`` in it is refused as such, not
    taken for the end of the run (status 0 having done nothing). ValueError and TypeError pass
    through (the caller words them); a built-in's other errors keep their traceback (a bug)."""
    try:
        yield
    except (ValueError, TypeError, UsageError):
        raise
    except (Exception, SystemExit) as exc:
        if not _is_spec(name):
            raise
        what = f"called sys.exit({exc.code!r})" if isinstance(exc, SystemExit) else \
            f"raised {type(exc).__name__}: {exc}"
        raise UsageError(f"problem {name!r}: the factory {what}") from None


def recorded(problem) -> dict[str, Any]:
    """The problem's options as the run's files record them: those JSON holds as they are (a
    user's factory's default that is a function, an array or a complex is left out, so that
    its default holds again on --resume: :func:`helmpinn.problems.registry.recorded_options`), so that
    no write fails at the end of the run."""
    return recorded_options(problem.options)[0]


def _chosen(args: argparse.Namespace) -> str:
    """' (hp.solve's choice ...)' where the optimiser was not named on the command line."""
    return "" if args.optimizer not in (None, "auto") else \
        " (hp.solve's choice for this problem; --optimizer names another)"


def new_settings(args: argparse.Namespace, problem) -> dict[str, Any]:
    """The run's settings: the record of its plan (:func:`helmpinn.run_plan` for ``problem``,
    the flags of :data:`FLAG_FIELDS`, :data:`WEIGHT_FLAGS` and :data:`LM_FLAGS` in place of its
    fields), with what the command line adds: the problem and its options, the target, the
    checkpoints, the device."""
    # hp.solve's choice; Adam on a GPU (LM and Gauss-Newton run on the CPU)
    optimizer = args.optimizer or ("adam" if args.device == "cuda" else "auto")
    kind = args.model or "auto"
    why = mismatch(kind, optimizer) if kind != "auto" else None
    if why:
        raise UsageError(f"--optimizer {optimizer} {why} (--model {kind})")
    try:  # settings derived from the problem's numbers (an extreme --k overflows them)
        plan = run_plan(training_problem(problem)[0], model=kind, optimizer=optimizer)   # (as hp.solve plans)
    except (ValueError, ArithmeticError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else "the settings derived from them overflow"
        raise UsageError(f"problem {args.problem!r} with {_options_str(problem.options)}: {why}") from None
    overrides: dict[str, Any] = {field: getattr(args, flag) for flag, field in FLAG_FIELDS.items()
                                 if getattr(args, flag) is not None}
    weights = {term: getattr(args, flag) for flag, term in WEIGHT_FLAGS.items() if getattr(args, flag) is not None}
    lm = {option: getattr(args, flag) for flag, option in LM_FLAGS.items() if getattr(args, flag) is not None}
    if weights:
        overrides["weights"] = weights
    if args.freeze_fourier:
        overrides["train_fourier"] = False
    if lm and plan.optimizer != "lm":
        raise UsageError(f"--lm-solver, --lm-geodesic and --lm-gram go with --optimizer lm; this run "
                         f"trains with {plan.optimizer}{_chosen(args)}")
    if lm:
        overrides["lm"] = {**lm, **({"geodesic": bool(lm["geodesic"])} if "geodesic" in lm else {})}
    if plan.model == "decomposed" and (overrides.get("lbfgs") or overrides.get("warm_start")):
        raise UsageError(f"--lbfgs and --warm-start train one network; this run trains a decomposed "
                         f"model with {plan.optimizer}{_chosen(args)}")
    try:
        plan = plan.with_overrides("helmpinn train", **overrides)
    except (ValueError, TypeError) as exc:
        raise UsageError(str(exc)) from None
    return {"problem": problem.name, "problem_options": recorded(problem), **plan.record(),
            "target": _target(args.target, problem), "checkpoint_every": args.checkpoint_every or 0,
            "device": args.device or "cpu"}


def _target(given: float | None, problem) -> float | None:
    """The run's target error: --target (0: none), else :data:`DEFAULT_TARGET` where the
    problem has an exact solution (none without one: there is no error to compare)."""
    if given is not None:
        return float(given) or None
    return DEFAULT_TARGET if problem.exact is not None else None


def decomposed(settings: dict[str, Any]) -> bool:
    """Whether the run's model is a decomposed one (runs saved before "model" was a setting
    trained one with "gn" only)."""
    return settings.get("model", "decomposed" if settings.get("optimizer") == "gn" else "network") == "decomposed"


def _new_model(settings: dict[str, Any], problem, threads: int | None):
    """A fresh model as ``settings`` say, once the run is known to fit in memory."""
    try:
        spec = _core.ModelSpec(problem.dim, settings["ff_dim"], settings["hidden"], settings["layers"])
    except (ValueError, TypeError, OverflowError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else f"each must be an integer below {2**31}"
        raise UsageError(f"invalid model (--fourier {settings['ff_dim']}, --hidden {settings['hidden']}, "
                         f"--layers {settings['layers']}): {why}") from None
    check_memory(settings, problem, spec, threads)
    plan = RunPlan.from_record(settings)
    if plan.model == "decomposed":
        try:
            return plan.build_model(problem)
        except ValueError as exc:
            raise UsageError(f"--model decomposed: {exc}") from None
    with np.errstate(over="ignore"):  # an overflow is reported below, naming the option
        model = plan.build_model(problem)
    if not np.all(np.isfinite(model.params)):
        raise UsageError(f"--sigma {settings['sigma']:g}: the Fourier frequencies drawn with it are not "
                         f"finite in {settings['dtype']}; give a smaller --sigma (or --k)")
    return model


def _options_str(options: dict[str, Any]) -> str:
    return " ".join(f"--{k} {v:g}" if isinstance(v, (int, float)) else f"--{k} {v}" for k, v in options.items()) \
        or "its defaults"


def check_memory(settings: dict[str, Any], problem, spec, threads: int | None) -> None:
    """Refuse a run that would not fit in memory, before anything is allocated: one network's
    points, training set, workspace, parameters and LM's matrices, or the whole decomposed run
    (:func:`helmpinn.memory.check_settings`, within :func:`helmpinn.memory.limit`)."""
    # a CPU workspace has scratch rows for as many threads as OpenMP runs or there are CPUs
    threads = max(threads or _core.get_num_threads(), cpus())
    ranks = distributed.launched_size()   # under mpiexec each rank holds its share
    lm_options = settings["lm"] if settings.get("optimizer") == "lm" and not decomposed(settings) else None
    if lm_options is not None:   # LM's refusal of a dense solver over its budget, named as its option
        try:
            memory.lm_system(spec.num_params, int(settings["pde_points"]) + int(settings["bc_points"]), lm_options,
                             settings["dtype"], ranks)
        except (ValueError, TypeError) as exc:
            raise UsageError(f"--optimizer lm: {exc}") from None
    try:
        if decomposed(settings):   # the whole decomposed run, not one subnetwork's
            memory.check_settings({**settings, "model": "decomposed"}, problem, ranks=ranks, threads=threads, flags={
                "points": "--points", "grids": "the problem's size", "hidden": "--hidden, --fourier"})
        else:
            what = ", ".join(f"{FIELD_FLAGS[k]} {settings[k]}"
                             for k in ("pde_points", "bc_points", "hidden", "layers", "ff_dim"))
            memory.check_network(spec, settings["pde_points"], settings["bc_points"], dtype=settings["dtype"],
                                 lm_options=lm_options, ranks=ranks, threads=threads,
                                 what=f"this run ({what}, {settings['dtype']})",
                                 flags={"points": "--points, --bc-points", "hidden": "--hidden, --layers, --fourier"})
    except ValueError as exc:   # MemoryEstimateError, or a HELMPINN_MEMORY_LIMIT that is not a size
        raise UsageError(str(exc)) from None


def check_device(settings: dict[str, Any], ranks: int, resume: str | None) -> None:
    """--device cuda: the run can train on a GPU here (what the Trainer and the machine allow),
    checked before anything is written."""
    if settings["device"] == "cpu":
        return
    flag = f"--device {settings['device']}"
    where = f"{flag}:" if resume is None else f"--resume {resume!r}: the run trains with {flag}, but"
    if decomposed(settings):
        raise UsageError(f"{where} a decomposed model trains on the CPU only (its subnetworks' "
                         "products are host calls): use --device cpu, or --model network on the GPU")
    if settings.get("optimizer") == "lm":
        raise UsageError(f"{where} --optimizer lm runs on the CPU only (Levenberg-Marquardt's "
                         "Jacobian and solves are host arrays): use --device cpu with it, or "
                         "--optimizer adam or lbfgs on the GPU")
    if ranks > 1:
        raise UsageError(f"{where} data-parallel training over {ranks} MPI ranks runs on the CPU "
                         "only (the ranks reduce host gradients): use --device cpu, or one process")
    if not _core.has_cuda():
        raise UsageError(f"{where} helmpinn was built without CUDA support (rebuild it with "
                         "CUDA, or use --device cpu)")
    if _core.cuda_device_count() == 0:
        raise UsageError(f"{where} no CUDA device is visible ({_core.cuda_device_error()}); "
                         "use --device cpu")


def check_ranks(settings: dict[str, Any], ranks: int) -> None:
    """The optimiser, the --lbfgs polish and LM's solver run over ``ranks`` MPI ranks
    (:func:`helmpinn.distributed.check_ranks` says which do)."""
    optimizer = settings.get("optimizer", "adam")
    checks = [("lbfgs", f"--lbfgs {settings['lbfgs']}")] if settings["lbfgs"] else []
    checks.append((optimizer, f"--optimizer {optimizer}"))
    if optimizer == "lm":
        checks.append((f"lm:{settings['lm']['solver']}", f"--lm-solver {settings['lm']['solver']}"))
    for what, flag in checks:
        try:
            distributed.check_ranks(what, ranks)
        except ValueError as exc:
            raise UsageError(f"{flag}: {exc}") from None
