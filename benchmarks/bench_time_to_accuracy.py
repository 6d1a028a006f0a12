#!/usr/bin/env python
"""Time to accuracy: relative L2 error against training wall time for Adam, L-BFGS and
Levenberg-Marquardt on the built-in problems, in one run.

    python benchmarks/bench_time_to_accuracy.py [--problems plane1d:k=20,dirichlet2d:n=2,...]
        [--optimizers adam,lbfgs,lm] [--budget 60]  (a problem's own budget: NAME:OPTS@SECONDS) [--threads 2] [--json out.json]
        [--plot docs/images/time_to_accuracy.png] [--tiny]

Run from the repository root with helmpinn importable (installed, or PYTHONPATH=python), on a
quiet machine: the times are wall-clock.

Each optimiser runs with what ``helmpinn train --optimizer NAME`` uses by default on the problem:
Adam with ``default_settings`` (float32, points redrawn every 100 steps), L-BFGS with the same
network in float64 on fixed points, LM with ``helmpinn.optim.lm.lm_defaults`` (float64, fixed points;
``--same-model`` gives all three LM's network and points). Each run stops at ``--budget``
seconds of training or when its own stopping rule fires. The error is measured on the problem's
test grid every ``--eval-every`` steps (Adam), iterations (L-BFGS) or every LM step; the time
spent measuring it is left out of the clock. For LM the script also reports the cost of one step
split into the Jacobian, forming JᵀJ (or JJᵀ), the solves and the trial evaluations.

Outputs: a table on stdout, the curves as a PNG (``--plot``; one panel per problem) and, with
``--json``, every curve and cost.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time

import numpy as np

DEFAULT_PROBLEMS = "plane1d:k=20,plane1d:k=100,dirichlet2d:n=2,dirichlet2d:n=4,heterogeneous2d,cube3d"
THRESHOLDS = (1e-2, 1e-3, 1e-4, 1e-5, 1e-6)


def parse_problem(text: str):
    """'name:opt=value,...' with options separated by ';' or given one per colon."""
    import helmpinn as hp

    name, _, rest = text.partition(":")
    opts = {}
    for kv in filter(None, rest.replace(";", ":").split(":")):
        key, eq, value = kv.partition("=")
        if not eq:
            raise SystemExit(f"bad problem option {kv!r} in {text!r}: expected key=value")
        opts[key] = float(value)
    return hp.get_problem(name, **opts), text


def parse_overrides(items, reserved=()) -> dict:
    """``--set KEY=VALUE`` arguments as a dict of ``hp.solve`` overrides (each value a Python
    literal). A ValueError names the item that is not ``KEY=literal``, or whose key is in
    ``reserved`` (a setting the script passes itself: its own flag sets it)."""
    import ast

    overrides = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE")
        if key in reserved:
            raise ValueError(f"--set {key}: the script sets {key!r} itself; use its own flag")
        try:
            overrides[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError) as exc:
            raise ValueError(f"--set {key}: expected a Python literal, got {value!r} ({exc})") from None
    return overrides


def field_error(problem, u, exact, x) -> dict:
    """The relative L2 error of ``u`` against ``exact`` at the points ``x``: ``{"modes_removed",
    "raw"}``, for ``box-source`` with its resonant modes' least-squares component removed
    (:func:`helmpinn.problems.waves.box_source_error`), for any other problem both the plain error."""
    from helmpinn import waves

    if problem.name == "box-source":
        e = waves.box_source_error(u, exact, x, problem.wavenumber)
        return {"modes_removed": e["modes_removed"], "raw": e["raw"]}
    err = float(np.linalg.norm(u - exact) / np.linalg.norm(exact))
    return {"modes_removed": err, "raw": err}


class Clock:
    """Training time with the error evaluations taken out; records (time, step, error)."""

    def __init__(self, problem, model, budget: float, every: int, n_test: int | None):
        from helmpinn.training.trainer import relative_l2

        self.relative_l2 = relative_l2
        self.model, self.budget, self.every = model, budget, max(int(every), 1)
        self.x = problem.test_points(n_test)
        self.u = problem.exact_at(self.x)
        self.t0 = time.perf_counter()
        self.t_eval = 0.0
        self.curve: list[tuple[float, int, float]] = []

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0 - self.t_eval

    def record(self, step: int, params: np.ndarray | None = None) -> float:
        t = self.elapsed()
        t1 = time.perf_counter()
        if params is not None:
            probe = self.model.copy()
            probe.params[...] = params
            err = self.relative_l2(probe.predict(self.x), self.u)
        else:
            err = self.relative_l2(self.model.predict(self.x), self.u)
        self.t_eval += time.perf_counter() - t1
        self.curve.append((t, step, err))
        return err

    def trainer_callback(self, trainer, step: int) -> None:
        if step % self.every == 0:
            self.record(step)
        if self.elapsed() > self.budget:
            trainer.stop_reason = f"budget of {self.budget:g} s"


def error_shares(d, regions) -> dict:
    """Each region's share of the squared error ``|d|²`` summed over the points (``regions``:
    name -> mask)."""
    d2 = np.abs(d) ** 2
    total = float(np.sum(d2))
    return {name: float(np.sum(d2[m])) / total for name, m in regions.items()}


def _blas_threads(text: str):
    return "auto" if text == "auto" else (int(text) or None)


def run_one(problem, optimizer: str, args, budget: float | None = None) -> dict:
    import helmpinn as hp
    from helmpinn.optim.lm import lm_defaults, lm_options
    from helmpinn.optim import lbfgs

    s = hp.default_settings(problem)
    d = lm_defaults(problem)
    model_src = d if (optimizer == "lm" or args.same_model) else s
    dtype = s["dtype"] if optimizer == "adam" else "float64"
    pde_points = model_src["pde_points"] if args.points is None else args.points
    bc_points = model_src["bc_points"]
    ff, hidden, layers = model_src["ff_dim"], model_src["hidden"], model_src["layers"]
    if args.tiny:
        ff, hidden, layers = 4, 8, 1
        pde_points = min(pde_points, 40 * problem.dim)
        bc_points = min(bc_points, 2 if problem.dim == 1 else 16)
    model = hp.Model.create(problem.dim, ff, hidden, layers, dtype=dtype, seed=args.seed,
                            fourier_sigma=s["sigma"])
    every = {"adam": args.eval_every, "lbfgs": max(args.eval_every // 10, 1), "lm": 1}[optimizer]
    trainer = hp.Trainer(problem, model, pde_points=pde_points, bc_points=bc_points, seed=args.seed, progress=False,
                         eval_every=0, n_test=args.n_test,
                         resample_every=s["resample_every"] if optimizer == "adam" else 0)
    trainer.resample()
    budget = args.budget if budget is None else budget
    clock = Clock(problem, model, budget, every, args.n_test)
    trainer.callbacks.append(clock.trainer_callback)
    clock.record(0)
    out = {"optimizer": optimizer, "num_params": model.num_params, "dtype": dtype,
           "pde_points": trainer.pde_points, "bc_points": trainer.bc_points, "network": [ff, hidden, layers]}
    t_start = time.perf_counter()
    if optimizer == "adam":
        steps = args.adam_steps or s["steps"] * 50   # the budget is the real limit
        trainer.fit(steps)
        out["steps"] = trainer.step
    elif optimizer == "lbfgs":
        def cb(it: int, loss: float, theta: np.ndarray) -> bool:
            if it % clock.every == 0:
                clock.record(it, theta)
            return clock.elapsed() > budget

        res = lbfgs(model.params, model.spec, trainer.batch, args.lbfgs_iterations, weights=trainer.weights,
                    callback=cb)
        out["steps"] = res.iterations
        out["message"] = res.message
    else:
        gram = {"gram": args.lm_gram} if args.lm_gram else {}
        trainer.fit_lm(args.lm_iterations or d["iterations"], **{**lm_options(d), "solver": args.lm_solver, **gram},
                       blas_threads=_blas_threads(args.lm_blas_threads))
        lm = trainer.driver.lm
        out["steps"] = lm.steps
        out["lm"] = {"solver": lm.solver, "jacobians": lm.iterations, "evaluations": lm.evaluations,
                     "times_s": dict(trainer.step_times),
                     "per_step_s": {k: v / max(lm.steps, 1) for k, v in trainer.step_times.items()}}
    out["wall_s"] = time.perf_counter() - t_start - clock.t_eval
    t_final = clock.elapsed()
    clock.record(out["steps"])
    clock.curve[-1] = (t_final, out["steps"], clock.curve[-1][2])
    out["stop_reason"] = trainer.stop_reason
    out["curve"] = [{"t": t, "step": st, "error": e} for t, st, e in clock.curve]
    out["final_error"] = clock.curve[-1][2]
    out["best_error"] = min(e for _, _, e in clock.curve)
    out["time_to"] = {f"{tol:g}": next((t for t, _, e in clock.curve if e < tol), None) for tol in THRESHOLDS}
    return out


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(results)
    cols = min(3, len(names))
    rows = int(math.ceil(len(names) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    style = {"adam": ("C0", "Adam"), "lbfgs": ("C1", "L-BFGS"), "lm": ("C3", "LM")}
    for ax, name in zip(axes.flat, names):
        for run in results[name]:
            t = [max(p["t"], 1e-3) for p in run["curve"]]
            e = [p["error"] for p in run["curve"]]
            color, label = style[run["optimizer"]]
            ax.loglog(t, e, "-", color=color, lw=1.3, label=f"{label} (P={run['num_params']})")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("training time (s)")
        ax.set_ylabel("relative L2 error")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--problems", default=DEFAULT_PROBLEMS, help="comma-separated name[:opt=value]")
    p.add_argument("--optimizers", default="adam,lbfgs,lm")
    p.add_argument("--budget", type=float, default=60.0, help="seconds of training per run")
    p.add_argument("--threads", type=int, default=None, help="helmpinn's OpenMP threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--points", type=int, default=None, help="interior points for every run (default: each's own)")
    p.add_argument("--same-model", action="store_true", help="LM's network and points for all three")
    p.add_argument("--eval-every", type=int, default=100, help="Adam steps between errors (L-BFGS: /10)")
    p.add_argument("--n-test", type=int, default=None, help="test grid points per dimension")
    p.add_argument("--adam-steps", type=int, default=None)
    p.add_argument("--lbfgs-iterations", type=int, default=100000)
    p.add_argument("--lm-iterations", type=int, default=None)
    p.add_argument("--lm-solver", default="auto", choices=("auto", "primal", "dual", "cg"))
    p.add_argument("--lm-gram", default=None, choices=("float64", "float32"),
                   help="precision of LM's JᵀJ (default: each problem's, helmpinn.optim.lm.lm_defaults)")
    p.add_argument("--lm-blas-threads", default="auto",
                   help="BLAS threads inside LM steps (threadpoolctl): a number, 'auto' (helmpinn's threads) "
                        "or 0 (leave the BLAS as it is)")
    p.add_argument("--tiny", action="store_true", help="smoke run: tiny networks and few points")
    p.add_argument("--json", default=None)
    p.add_argument("--plot", default="docs/images/time_to_accuracy.png")
    args = p.parse_args(argv)

    import helmpinn as hp

    if args.threads is not None:
        hp.set_num_threads(args.threads)
    optimizers = [o.strip() for o in args.optimizers.split(",") if o.strip()]
    bad = set(optimizers) - {"adam", "lbfgs", "lm"}
    if bad:
        raise SystemExit(f"--optimizers: unknown {sorted(bad)}; use adam, lbfgs, lm")
    problems = []
    for text in filter(None, (t.strip() for t in args.problems.split(","))):
        text, at, seconds = text.partition("@")   # name:opts@seconds: this problem's own budget
        problems.append((*parse_problem(text), float(seconds) if at else None))
    results: dict[str, list[dict]] = {}
    for problem, label, budget in problems:
        results[label] = []
        for opt in optimizers:
            print(f"[{label}] {opt} ...", file=sys.stderr, flush=True)
            run = run_one(problem, opt, args, budget)
            run["budget_s"] = args.budget if budget is None else budget
            results[label].append(run)
            lm = run.get("lm")
            split = ""
            if lm:
                ps = lm["per_step_s"]
                split = (f"  per LM step: J {ps['jacobian']:.3f} s, JtJ {ps['jtj']:.3f} s, "
                         f"solve {ps['solve']:.3f} s, trials {ps['trial']:.3f} s ({lm['solver']})")
            print(f"[{label}] {opt:5s} P={run['num_params']:6d} steps={run['steps']:6d} "
                  f"time={run['wall_s']:7.2f} s final={run['final_error']:.2e} best={run['best_error']:.2e}"
                  f"{split}", file=sys.stderr, flush=True)

    print("\n| problem | optimizer | P | points | steps | time (s) | final error | "
          + " | ".join(f"t to {t:g}" for t in THRESHOLDS) + " |")
    print("|---" * (7 + len(THRESHOLDS)) + "|")
    for label, runs in results.items():
        for r in runs:
            tt = " | ".join("—" if r["time_to"][f"{t:g}"] is None else f"{r['time_to'][f'{t:g}']:.1f}"
                            for t in THRESHOLDS)
            print(f"| {label} | {r['optimizer']} | {r['num_params']} | {r['pde_points']}+{r['bc_points']} | {r['steps']} | "
                  f"{r['wall_s']:.1f} | {r['final_error']:.2e} | {tt} |")
    if args.plot:
        plot(results, args.plot)
        print(f"\nwrote {args.plot}", file=sys.stderr)
    if args.json:
        meta = {"threads": hp.get_num_threads(), "machine": platform.platform(), "budget_s": args.budget,
                "version": hp.__version__, "tiny": args.tiny}
        with open(args.json, "w") as fh:
            json.dump({"meta": meta, "results": results}, fh, indent=1)
        print(f"wrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
