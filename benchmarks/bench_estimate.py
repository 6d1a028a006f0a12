#!/usr/bin/env python
""":func:`helmpinn.estimate.estimate_error` against the exact error while ``hp.solve`` trains, and
``fd_solve``'s time to the network's final error, in one run.

    PYTHONPATH=python python benchmarks/bench_estimate.py --problem dirichlet2d --time-limit 60 \
        [--threads 2] [--snapshots 5] [--json out.json] [--set KEY=VALUE]

A callback keeps a copy of the model after every step with its exact relative L2 error on the
physical domain (at the estimator's own nodes, so that the two are measured on the same points;
the copies cost no training time: the seconds spent in the callback are taken off the clock). After
training, ``--snapshots`` of them (spread over the run's errors, first and last included) get
:func:`estimate_error`'s answer: the ratio estimate/exact and whether it called itself reliable.
Then ``fd_solve`` alone: the coarsest grid (4, 5, 6, 8, 10, 12, 16, 20, 24, 32 nodes per
wavelength, within the estimator's node cap) whose error is at most the network's final error,
with the seconds it took (assembly, factorisation, solve). Timings depend on the machine's load:
report ``uptime`` beside them.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import time

import numpy as np

import helmpinn as hp
from helmpinn import estimate
from helmpinn.reference import fd_solve
from bench_time_to_accuracy import parse_overrides, parse_problem   # 'name:opt=value'; --set


def nodes_in_domain(problem, h):
    """The fine reference grid's nodes in the physical domain (where the estimator compares)."""
    lo, hi = (np.asarray(b, np.float64) for b in problem.sampling_domain.bounds)
    n = np.ceil((hi - lo) / h - 1e-9).astype(int)
    axes = [np.linspace(lo[j], hi[j], n[j] + 1) for j in range(len(lo))]
    x = np.stack([m.ravel() for m in np.meshgrid(*axes, indexing="ij")], 1)
    return x[estimate._physical(problem, x)]


def fd_time_to(problem, target, cap):
    """fd_solve's coarsest grid reaching ``target`` (relative L2 at its nodes in the domain)."""
    rows = []
    for ppw in (4, 5, 6, 8, 10, 12, 16, 20, 24, 32):
        h = estimate._spacing(problem, ppw, cap)
        t = time.perf_counter()
        sol = fd_solve(problem, h)
        secs = time.perf_counter() - t
        x = nodes_in_domain(problem, h)
        ue = problem.exact_at(x)
        err = float(np.linalg.norm(sol(x) - ue) / np.linalg.norm(ue))
        rows.append({"points_per_wavelength": ppw, "h": h, "error": err, "seconds": secs})
        print(f"  fd_solve {ppw} per wavelength, h {h:.4g}: error {err:.3e} in {secs:.2f} s", flush=True)
        if err <= target or (len(rows) > 1 and rows[-2]["h"] == h):
            break
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="dirichlet2d")
    ap.add_argument("--time-limit", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--snapshots", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    if a.threads:
        hp.set_num_threads(a.threads)
    problem, _ = parse_problem(a.problem)
    cap = estimate.MAX_NODES[problem.dim]
    x = nodes_in_domain(problem, estimate._spacing(problem, estimate.POINTS_PER_WAVELENGTH, cap))
    exact = problem.exact_at(x)
    kept, spent, t0 = [], [0.0], time.perf_counter()

    def record(trainer, step):
        t = time.perf_counter()
        err = float(np.linalg.norm(trainer.model.predict(x) - exact) / np.linalg.norm(exact))
        kept.append({"step": step, "seconds": t - t0 - spent[0], "error": err,
                     "model": copy.deepcopy(trainer.model)})
        print(f"step {step:4d} {kept[-1]['seconds']:7.1f} s error {err:.3e}", flush=True)
        spent[0] += time.perf_counter() - t

    overrides = parse_overrides(a.set, reserved=("seed", "time_limit", "callbacks", "progress"))
    sol = hp.solve(problem, time_limit=a.time_limit, callbacks=[record], seed=a.seed, progress=False, **overrides)
    # the snapshots: spread over log(error), the first and the last always
    logs = np.log([k["error"] for k in kept])
    picks = {0, len(kept) - 1}
    for q in np.linspace(logs.max(), logs.min(), a.snapshots)[1:-1]:
        picks.add(int(np.argmin(np.abs(logs - q))))
    rows = []
    for i in sorted(picks):
        k = kept[i]
        est = estimate.estimate_error(problem, k["model"])
        rows.append({"step": k["step"], "seconds": k["seconds"], "error": k["error"], "estimate": est.error,
                     "reference_error": est.reference_error, "ratio": est.error / k["error"],
                     "reliable": est.reliable, "estimate_seconds": est.seconds, "h": est.h[0]})
        print(f"step {k['step']:4d} at {k['seconds']:6.1f} s: error {k['error']:.3e} estimate {est.error:.3e} "
              f"(ratio {est.error / k['error']:.3f}; reference error {est.reference_error:.1e}, "
              f"{'reliable' if est.reliable else 'not reliable'}; {est.seconds:.1f} s, h {est.h[0]:.4g})", flush=True)
    final = kept[-1]["error"]
    print(f"{a.problem}: {sol.settings.get('model')} / {sol.settings.get('optimizer')}, {len(kept)} steps, "
          f"final error {final:.3e} at {kept[-1]['seconds']:.1f} s; fd_solve to the same error:", flush=True)
    fd = fd_time_to(problem, final, cap)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"problem": a.problem, "time_limit": a.time_limit, "threads": hp.get_num_threads(),
                       "estimates": rows, "fd": fd, "stop_reason": sol.stop_reason,
                       "trajectory": [{k: v for k, v in r.items() if k != "model"} for r in kept]}, fh, indent=1)


if __name__ == "__main__":
    main()
