"""The general operator's two forms on a decomposition's subnetworks, side by side in one run.

Where a point's operator has the same ``a`` on every axis (a decomposition's windowed PDE
outside a PML), the core computes it from the Laplacian's d + 2 streams (``a_lap``, the scalar
form) instead of the diagonal layout's 2d + 1 (``a_pde``): the same residual, fewer flops
(docs/MATH.md, "Scalar form"). This times, for the decomposition ``hp.solve`` builds for a
problem, with both forms on the same points and parameters (rounds alternating the two forms):

  - each subnetwork's core calls in float32 (CG's products): ``jvp``, ``vjp``, ``residuals``,
    and in float64 its Jacobian block (the linearisation), summed over the subnetworks;
  - one matrix-free Gauss-Newton linearisation (``MatrixFreeGN.linearize``) and one CG
    iteration (``J v``, ``Jᵀw``, the preconditioner), as ``hp.solve``'s solver runs them.

    python benchmarks/bench_operator_forms.py [--problem box-source:wavelengths=5] [--threads 2]
        [--points N] [--rounds 3] [--cg-iterations 40] [--json FILE]

Ratios are scalar / diagonal (below 1: the scalar form is faster). Times are medians over the
rounds; compare forms within a run, never across machines.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import helmpinn as hp  # noqa: E402
import helmpinn.models.decomposition as dm  # noqa: E402
from helmpinn._blas import blas_limit  # noqa: E402
from helmpinn.training.dd_driver import build_decomposed_model, decomposed_settings  # noqa: E402
from helmpinn.models.decomposition import Rows  # noqa: E402
from helmpinn.optim.gauss_newton import MatrixFreeGN  # noqa: E402
from bench_time_to_accuracy import parse_problem  # noqa: E402   'name:opt=value'


def _residuals(model, rows, form: str):
    """The model's residuals with the scalar form where it applies ("auto", the library's
    choice) or the diagonal form everywhere ("diagonal"; a subnetwork with points of both kinds
    keeps its two core calls, so the comparison is of the forms alone)."""
    choose = dm.operator_a
    if form == "diagonal":
        dm.operator_a = lambda a: {"a_pde": a}
    try:
        return model.residuals_for(rows)
    finally:
        dm.operator_a = choose


def _ms(fn, n: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e3


def _core_calls(res, theta: np.ndarray, calls: int) -> dict[str, float]:
    """Each operation summed over the subnetworks (ms)."""
    rng = np.random.default_rng(1)
    out = {"jvp32": 0.0, "vjp32": 0.0, "residuals32": 0.0, "jacobian64": 0.0}
    for p in res.parts:
        ws32, ws64 = res._ws(p, "float32"), res._ws(p, "float64")
        t32, t64 = theta[p["slice"]].astype(np.float32), theta[p["slice"]]
        v = rng.standard_normal(len(t32)).astype(np.float32)
        for (lo, hi, b32), (_, _, b64) in zip(res._batches(p, "float32"), res._batches(p, "float64")):
            n = hi - lo
            w = rng.standard_normal(2 * n).astype(np.float32)
            out["jvp32"] += _ms(lambda: ws32.jvp(t32, v, batch=b32, w_pde=n), calls)
            out["vjp32"] += _ms(lambda: ws32.vjp(t32, w, batch=b32, w_pde=n), calls)
            out["residuals32"] += _ms(lambda: ws32.residuals(t32, batch=b32, w_pde=n), calls)
            out["jacobian64"] += _ms(lambda: ws64.jacobian(t64, batch=b64, w_pde=n), max(1, calls // 10))
    return out


def _solver(res, theta: np.ndarray, iterations: int) -> dict[str, float]:
    gn = MatrixFreeGN(res)
    times = {"jacobian": 0.0, "gram": 0.0}
    t0 = time.perf_counter()
    s = gn.linearize(theta, times)
    lin = time.perf_counter() - t0
    D = gn._D(s)
    M = gn.preconditioner(s, 1e-4, D)
    gn.cg_tol, gn.cg_maxiter = 1e-30, iterations   # exactly `iterations` iterations
    with blas_limit(1):
        t0 = time.perf_counter()
        _, _, it = gn.cg(s, 1e-4, D, s["g"], M)
        per = (time.perf_counter() - t0) / max(it, 1)
    return {"linearize_s": lin, "cg_iteration_ms": per * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problem", default="box-source:wavelengths=5",
                    help="NAME[:key=value;...] of a built-in problem (default %(default)s)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--points", type=int, default=0, help="PDE points (default: hp.solve's rule)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20, help="timed calls per core operation and round")
    ap.add_argument("--cg-iterations", type=int, default=40)
    ap.add_argument("--json", help="also write the results here")
    a = ap.parse_args(argv)
    hp.set_num_threads(a.threads)
    problem, _ = parse_problem(a.problem)
    s = decomposed_settings(problem)
    model = build_decomposed_model(problem, s["decomposition"], s["ff_dim"], s["hidden"], s["layers"])
    n = a.points or int(s["pde_points"])
    rows = Rows.from_problem(problem, n, int(s.get("bc_points", 0)), np.random.default_rng(0), method="sobol",
                             drop=("data",) if model.constraint is not None else ())
    theta = np.asarray(model.params, np.float64)
    forms = {f: _residuals(model, rows, f) for f in ("diagonal", "auto")}
    pieces = [(hi - lo, "a_lap" in b) for p in forms["auto"].parts for lo, hi, b in p["batches"]]
    scalar = sum(n for n, lap in pieces if lap)
    owned = sum(n for n, _ in pieces)
    print(f"{a.problem}: {len(model.subdomains)} subnetworks, {owned} subnetwork-points ({scalar} in the "
          f"scalar form), {len(rows)} rows, {model.num_params} parameters, {a.threads} threads")
    runs: dict[str, list[dict]] = {f: [] for f in forms}
    for r in range(a.rounds):
        for f, res in forms.items():
            row = _core_calls(res, theta, a.calls)
            row.update(_solver(res, theta, a.cg_iterations))
            runs[f].append(row)
            print(f"round {r + 1} {f:9s} " + " ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    med = {f: {k: float(np.median([x[k] for x in rs])) for k in rs[0]} for f, rs in runs.items()}
    print("\nmedians (ms; linearize in s) and scalar / diagonal:")
    for k in med["auto"]:
        print(f"  {k:16s} diagonal {med['diagonal'][k]:9.3g}   scalar {med['auto'][k]:9.3g}   "
              f"ratio {med['auto'][k] / med['diagonal'][k]:.2f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"problem": a.problem, "threads": a.threads, "rows": len(rows),
                       "scalar_parts": scalar, "parts": owned, "runs": runs, "medians": med}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
