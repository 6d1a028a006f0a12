#!/usr/bin/env python
"""``hp.solve`` with its defaults on a built-in problem, the error against time.

    PYTHONPATH=python python benchmarks/bench_solve.py --problem box-source:wavelengths=5 \
        --time-limit 300 [--threads 2] [--json out.json] [--save model.npz] [--pml-share S] [--set KEY=VALUE] \
        [--regions]

A callback records, after every step, the wall time since the fit began, the loss (and for
Gauss-Newton its damping λ and CG iterations per trial), and the
relative L2 error on the physical domain against the exact solution at ``--eval-points`` random
points (for ``box-source`` also with the resonant modes removed, :func:`helmpinn.problems.waves.box_source_error`).
The gap and the point count shown are the run's at its last evaluation (the step before: the
callbacks run before a step's own evaluation). The seconds the callback spends are subtracted
from the clock it reports (the run's own time
limit counts them, so a run does a little less than it could). ``--save`` writes the trained
model (``benchmarks/box_error_modes.py --model`` reads it); ``--regions`` adds where the error
lies (:func:`error_regions`: near a scatterer, near the PML, the rest). Run on a quiet machine.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import helmpinn as hp
from helmpinn.training.dd_driver import GNDriver
from bench_time_to_accuracy import error_shares, field_error, parse_overrides, parse_problem   # 'name:opt=value'; --set


def error_regions(problem, x) -> dict:
    """Masks over the points ``x``: ``scatterer`` (within a quarter wavelength, 2π/k, of a
    scatterer's boundary: a :class:`~helmpinn.problems.geometry.BoxMinusObstacle`'s obstacle),
    ``edge`` (within a quarter wavelength of the physical box's boundary, where a PML starts; not
    in the first) and ``rest``; printed with each region's share of the points."""
    from scipy.spatial import cKDTree
    from helmpinn.problems.geometry import BoxMinusObstacle

    quarter = 0.5 * np.pi / problem.wavenumber
    lo, hi = (np.asarray(b, np.float64) for b in problem.domain.bounds)
    out = {}
    if isinstance(problem.domain, BoxMinusObstacle):
        rim = problem.domain.obstacle.sample_boundary(20000, np.random.default_rng(0)).x
        out["scatterer"] = cKDTree(rim).query(x)[0] < quarter
    taken = out.get("scatterer", np.zeros(len(x), bool))
    out["edge"] = (np.min(np.minimum(x - lo, hi - x), axis=1) < quarter) & ~taken
    out["rest"] = ~(taken | out["edge"])
    print("regions (share of the points): " + ", ".join(f"{k} {m.mean():.3f}" for k, m in out.items()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", default="box-source:wavelengths=5")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--eval-points", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--save", default=None, help="write the trained model here (.npz)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="an hp.solve override (a Python literal), repeatable: --set pde_points=24000")
    ap.add_argument("--pml-share", type=float, default=None,
                    help="the problem's pml_share (the share of the PDE points drawn in its PML)")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--regions", action="store_true",
                    help="also each region's share of the squared error after every step: within a quarter "
                         "wavelength of a scatterer, of the physical domain's boundary (where a PML starts), the rest")
    a = ap.parse_args()
    if a.threads:
        hp.set_num_threads(a.threads)
    problem, _ = parse_problem(a.problem)
    if a.pml_share is not None:
        if problem.pml is None or not 0 <= a.pml_share < 1:
            ap.error(f"--pml-share: a share in [0, 1) for a problem with a PML, got {a.pml_share} for {a.problem}")
        problem.pml_share = a.pml_share
    rng = np.random.default_rng(a.seed + 1)
    x = problem.domain.sample_interior(a.eval_points, rng)   # inside the physical domain (not in a scatterer)
    exact = problem.exact_at(x)
    regions = error_regions(problem, x) if a.regions else None
    rows, spent, t0 = [], [0.0], [None]

    def record(trainer, step):
        t = time.perf_counter()
        if t0[0] is None:
            t0[0] = t
        u = trainer.model.predict(x)
        e = field_error(problem, u, exact, x)
        err, raw = e["modes_removed"], e["raw"]
        loss = trainer.history.loss[-1] if trainer.history.loss else float("nan")
        gap = trainer.last_gap
        log = trainer.driver.log if isinstance(trainer.driver, GNDriver) else []   # λ, CG iterations per step
        gn = log[-1] if log else {}
        rows.append({"step": step, "seconds": t - start - spent[0], "loss": loss, "error": err, "raw": raw,
                     "gap": gap, "points": trainer.pde_points, "lam": gn.get("lam"), "cg": gn.get("cg"),
                     "times": gn.get("times")})   # seconds in each phase of the step
        if regions:
            rows[-1]["shares"] = error_shares(u - exact, regions)
        print(f"step {step:4d} {rows[-1]['seconds']:7.1f} s loss {loss:.3e} error {err:.3e} (raw {raw:.3e}) "
              f"gap {gap if gap is None else round(gap, 2)} points {trainer.pde_points}"
              + (f" lam {gn['lam']:.1e} cg {gn['cg']} (" + " ".join(f"{k} {v:.1f}" for k, v in gn["times"].items()) + " s)"
                 if gn else "")
              + (" | shares of the squared error: " + ", ".join(f"{k} {v:.2f}" for k, v in rows[-1]["shares"].items())
                 if regions else ""), flush=True)
        spent[0] += time.perf_counter() - t

    try:
        overrides = parse_overrides(a.set, reserved=("seed", "time_limit", "callbacks", "progress"))
    except ValueError as exc:
        ap.error(str(exc))
    start = time.perf_counter()
    sol = hp.solve(problem, time_limit=a.time_limit, callbacks=[record], seed=a.seed, progress=not a.no_progress,
                   **overrides)
    print(f"{a.problem}: {sol.settings.get('model', 'network')} / {sol.settings.get('optimizer')}, "
          f"{len(rows)} steps, stop: {sol.stop_reason}; last error {rows[-1]['error']:.3e} "
          f"(raw {rows[-1]['raw']:.3e}) at {rows[-1]['seconds']:.0f} s", flush=True)
    if a.save:
        sol.save(a.save)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"problem": a.problem, "overrides": overrides, "time_limit": a.time_limit, "threads": hp.get_num_threads(),
                       "steps": rows, "stop_reason": sol.stop_reason}, fh, indent=1)


if __name__ == "__main__":
    main()
