"""Command line: ``helmpinn train --problem NAME ...`` and ``helmpinn problems``.

``helmpinn train`` builds a built-in problem, trains a model with settings derived from the
problem (:func:`helmpinn.trainer.default_settings`; every one can be overridden) and writes
``OUT/model.npz``, ``OUT/metrics.json`` and PNG figures (``solution.png``, ``error.png``,
``history.png``).
"""
from __future__ import annotations

import argparse
import inspect
import json
import math
import os
import sys
import time
from typing import Any, Sequence

__all__ = ["main", "build_parser"]


def _problem_option_names() -> dict[str, type]:
    """Every option any registered problem takes, with its type (from the default)."""
    from .problems import _REGISTRY

    names: dict[str, type] = {}
    for factory, _ in _REGISTRY.values():
        for p in inspect.signature(factory).parameters.values():
            names.setdefault(p.name, type(p.default) if p.default is not inspect.Parameter.empty else float)
    return names


def build_parser() -> argparse.ArgumentParser:
    from .geometry import METHODS
    from .optim import SCHEDULES

    parser = argparse.ArgumentParser(prog="helmpinn", description="Physics-informed neural networks "
                                     "for the Helmholtz equation with exact fused gradients.")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("problems", help="list the built-in problems")

    t = sub.add_parser("train", help="train a model on a built-in problem and write a report",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--problem", required=True, help="built-in problem (see `helmpinn problems`)")
    g = t.add_argument_group("problem options (each problem takes some of them)")
    for name, typ in _problem_option_names().items():
        g.add_argument(f"--{name}", type=float if typ in (int, float) else str, default=None,
                       help=f"problem option {name}")
    m = t.add_argument_group("model (default: chosen from the problem's wavenumber)")
    m.add_argument("--hidden", type=int, help="hidden layer width")
    m.add_argument("--layers", type=int, help="number of tanh hidden layers")
    m.add_argument("--fourier", type=int, help="number of Fourier frequencies m")
    m.add_argument("--sigma", type=float, help="std of the Fourier frequencies B")
    m.add_argument("--freeze-fourier", action="store_true", help="do not train B")
    m.add_argument("--dtype", choices=("float32", "float64"), help="floating point type")
    o = t.add_argument_group("training (default: chosen from the problem)")
    o.add_argument("--steps", type=int, help="Adam steps")
    o.add_argument("--lr", type=float, help="peak learning rate")
    o.add_argument("--schedule", choices=SCHEDULES, help="learning-rate schedule")
    o.add_argument("--points", type=int, help="interior collocation points per draw")
    o.add_argument("--bc-points", type=int, help="boundary points per draw")
    o.add_argument("--sampling", choices=METHODS, help="point sampling")
    o.add_argument("--resample", type=int, help="steps between fresh point draws (0: never)")
    o.add_argument("--w-pde", type=float, help="weight of the PDE term")
    o.add_argument("--w-data", type=float, help="weight of the data (Dirichlet) term")
    o.add_argument("--w-bc", type=float, help="weight of the Robin boundary term")
    o.add_argument("--lbfgs", type=int, default=None, help="L-BFGS polish iterations after Adam")
    o.add_argument("--target", type=float, default=None, help="stop once the relative L2 error is below this")
    o.add_argument("--eval-every", type=int, help="steps between error evaluations")
    o.add_argument("--checkpoint-every", type=int, default=0, help="steps between checkpoints (0: only at the end)")
    o.add_argument("--seed", type=int, default=0, help="random seed (initialisation and sampling)")
    o.add_argument("--threads", type=int, default=None, help="CPU threads (default: OpenMP's)")
    o.add_argument("--out", default="helmpinn-out", help="output folder")
    o.add_argument("--no-plots", action="store_true", help="skip the PNG figures")
    o.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def _cmd_problems() -> int:
    from .problems import list_problems, problem_options

    for name, desc in list_problems():
        opts = ", ".join(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}={v}"
                         for k, v in problem_options(name).items())
        print(f"{name:16s} {desc}\n{'':16s} options: {opts or 'none'}")
    return 0


def _cmd_train(args: argparse.Namespace) -> int:
    from . import _core
    from .model import Model
    from .problems import get_problem, problem_options
    from .trainer import Trainer, default_settings

    t_start = time.perf_counter()
    try:  # under mpiexec / srun: data-parallel over the ranks (helmpinn.distributed)
        from .distributed import launch_comm, threads_per_rank

        comm = launch_comm()
    except RuntimeError as exc:
        print(f"helmpinn: {exc}", file=sys.stderr)
        return 2
    rank, ranks = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
    try:
        accepted = problem_options(args.problem)
    except ValueError as exc:
        print(f"helmpinn: {exc}", file=sys.stderr)
        return 2
    opts: dict[str, Any] = {}
    for name in _problem_option_names():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in accepted:
            print(f"helmpinn: problem {args.problem!r} takes no option --{name} "
                  f"(it takes {', '.join('--' + k for k in accepted) or 'none'})", file=sys.stderr)
            return 2
        default = accepted[name]
        opts[name] = int(value) if isinstance(default, int) and float(value).is_integer() else value
    problem = get_problem(args.problem, **opts)

    s = default_settings(problem)
    pick = lambda key, value: s[key] if value is None else value  # noqa: E731
    settings = {
        "problem": problem.name, "problem_options": problem.options,
        "hidden": pick("hidden", args.hidden), "layers": pick("layers", args.layers),
        "fourier": pick("ff_dim", args.fourier), "sigma": pick("sigma", args.sigma),
        "dtype": pick("dtype", args.dtype), "steps": pick("steps", args.steps),
        "lr": pick("lr", args.lr), "schedule": pick("schedule", args.schedule), "betas": s["betas"],
        "points": pick("n_pde", args.points), "bc_points": pick("n_bc", args.bc_points),
        "sampling": pick("sampling", args.sampling), "resample": pick("resample_every", args.resample),
        "eval_every": pick("eval_every", args.eval_every), "lbfgs": pick("lbfgs", args.lbfgs),
        "weights": {term: s["weights"][term] if given is None else given
                    for term, given in (("pde", args.w_pde), ("data", args.w_data), ("bc", args.w_bc))},
        "train_fourier": not args.freeze_fourier, "target": args.target, "seed": args.seed,
        "checkpoint_every": args.checkpoint_every,
    }
    if args.threads is not None:
        _core.set_num_threads(args.threads)
    elif comm is not None:  # ranks x threads must not oversubscribe a node's cores
        _core.set_num_threads(threads_per_rank(comm))
    settings["threads"] = _core.get_num_threads()
    settings["ranks"] = ranks
    if ranks > 1 and settings["lbfgs"]:
        print("helmpinn: --lbfgs runs on one process; set --lbfgs 0 with several MPI ranks",
              file=sys.stderr)
        return 2
    quiet = args.quiet or rank != 0  # rank 0 alone prints and writes files

    out = args.out
    if rank == 0:
        os.makedirs(out, exist_ok=True)
    model_path = os.path.join(out, "model.npz")
    model = Model.create(problem.dim, settings["fourier"], settings["hidden"], settings["layers"],
                         dtype=settings["dtype"], seed=args.seed, fourier_sigma=settings["sigma"])
    model.metadata = {"problem": problem.name, "problem_options": problem.options}
    trainer = Trainer(problem, model, lr=settings["lr"], schedule=settings["schedule"], betas=settings["betas"],
                      n_pde=settings["points"], n_bc=settings["bc_points"], sampling=settings["sampling"],
                      resample_every=settings["resample"], weights=settings["weights"],
                      train_fourier=settings["train_fourier"], eval_every=settings["eval_every"],
                      target_error=args.target, checkpoint_every=args.checkpoint_every,
                      checkpoint_path=model_path, progress=not quiet, seed=args.seed, comm=comm)
    if not quiet:
        print(f"helmpinn: {problem!r}\nhelmpinn: {model!r}, {settings['threads']} threads, "
              f"{settings['steps']} steps, {trainer.n_pde} + {trainer.n_bc} points"
              + (f", {ranks} MPI ranks" if ranks > 1 else ""), file=sys.stderr)
    history = trainer.fit(settings["steps"])
    adam_time = trainer.train_time
    adam_steps = len(history.step)
    polish = None
    reached = args.target is not None and trainer.last_error is not None and trainer.last_error < args.target
    if settings["lbfgs"] and not trainer.diverged and not reached:
        polish = trainer.polish(settings["lbfgs"])
        trainer.save_checkpoint()
    error = trainer.evaluate()
    wall = time.perf_counter() - t_start  # set-up, training and polish; not the figures

    metrics = {
        "settings": settings,
        "num_params": model.num_params,
        "steps": adam_steps,
        "final_step": trainer.step,
        "stop_reason": trainer.stop_reason,
        "train_time_s": trainer.train_time,
        "adam_time_s": adam_time,
        "steps_per_s": adam_steps / adam_time if adam_time > 0 else None,
        "wall_time_s": wall,
        "final": {"relative_l2": error, "loss": history.loss[-1] if history.loss else None,
                  "pde": history.pde[-1] if history.pde else None,
                  "data": history.data[-1] if history.data else None,
                  "bc": history.bc[-1] if history.bc else None},
        "time_to_1e-2_s": _time_to(history, 1e-2),
        "lbfgs": polish,
        "history": history.as_dict(),
        "version": getattr(_core, "__version__", None),
    }
    if rank != 0:
        return 1 if trainer.diverged else 0
    with open(os.path.join(out, "metrics.json"), "w") as fh:
        json.dump(_finite(metrics), fh, indent=1)
    figures = []
    if not args.no_plots:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("helmpinn: matplotlib is not installed, so no figures were written "
                  "(pip install matplotlib)", file=sys.stderr)
        else:
            from .plots import plot_all

            figures = plot_all(problem, model, history.as_dict(), out)
    if not os.path.exists(model_path):
        model.save(model_path)
    if not quiet:
        err_s = "n/a" if error is None else f"{error:.3e}"
        print(f"helmpinn: relative L2 error {err_s} after {trainer.step} steps, "
              f"{trainer.train_time:.1f} s ({metrics['steps_per_s'] or 0:.0f} steps/s); "
              f"wrote {model_path}, {os.path.join(out, 'metrics.json')}"
              + "".join(f", {f}" for f in figures), file=sys.stderr)
    if trainer.diverged:
        print(f"helmpinn: {trainer.stop_reason}", file=sys.stderr)
        return 1
    return 0


def _time_to(history, tol: float) -> float | None:
    for t, e in zip(history.eval_time, history.eval_error):
        if e is not None and e < tol:
            return t
    return None


def _finite(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return _finite(obj.item())
    return obj


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "problems":
        return _cmd_problems()
    return _cmd_train(args)


if __name__ == "__main__":
    sys.exit(main())
