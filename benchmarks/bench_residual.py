"""The residual level's cost against value_and_grad's, in one run (issue #11's speed targets).

For the configs' networks (benchmarks/common.py) in float32 and float64, on one machine in one
process, it times
  - value_and_grad on the config's points, as a fraction of the machine's FMA peak measured in
    the same run (../shared/tools/fma_peak.c, compiled here; a BLAS's SGEMM rate depends on how
    the BLAS was built and is not the machine's limit);
  - jvp and vjp on the same points, as multiples of value_and_grad;
  - jacobian of every row on fewer points (R x P numbers must fit in memory), as a multiple of
    value_and_grad on those points, beside the time NumPy takes to fill an array of R x P.
Targets: jacobian <= 3 vg + fill; jvp, vjp <= 1.5 vg; vg >= 75% of the FMA peak on config b
(float32). Timings are medians of repeated calls on an otherwise idle machine; the machine's
noise is measured and printed (common.NoiseMeter).

    python benchmarks/bench_residual.py [--threads 2] [--configs a,b] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from machine_peak import FMA_SRC, fma_peak  # noqa: E402


def timed(fn, steps: int, min_time: float = 1.0) -> float:
    """Median milliseconds of fn() over at least `steps` calls and `min_time` seconds."""
    return common.time_steps(fn, lambda r: None, steps, warmup=2, min_time=min_time)["median_ms"]


def bench_config(hp, cfg: common.Config, dtype: str, jac_points: int, steps: int) -> dict:
    prob = common.make_problem(cfg, dtype=np.dtype(dtype))
    spec = hp.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L)
    ws = hp.Workspace(spec, dtype=dtype)
    theta = prob["theta"]
    grad = np.zeros_like(theta)
    batch = dict(x_pde=prob["x_pde"], kappa=float(prob["kappa"]), f=prob["f"],
                 x_data=prob["x_data"], y=prob["y"], w_pde=prob["w_pde"], w_data=prob["w_data"])
    R = 2 * (cfg.n_pde + cfg.n_data)
    v = np.random.default_rng(0).normal(size=theta.size).astype(dtype)
    w = np.random.default_rng(1).normal(size=R).astype(dtype)
    jv = np.empty(R, dtype=dtype)
    jtw = np.empty(theta.size, dtype=dtype)
    res = {"config": cfg.name, "dtype": dtype, "P": int(theta.size), "R": R}
    res["vg_ms"] = timed(lambda: ws.value_and_grad(theta, grad, **batch), steps)
    res["jvp_ms"] = timed(lambda: ws.jvp(theta, v, out=jv, **batch), steps)
    res["vjp_ms"] = timed(lambda: ws.vjp(theta, w, out=jtw, **batch), steps)
    res["residuals_ms"] = timed(lambda: ws.residuals(theta, **batch), steps)
    res["gflops_vg"] = common.flops_per_step(cfg) / (res["vg_ms"] * 1e-3) / 1e9

    # The Jacobian on fewer points (same network), the data term in the configs' proportion.
    n_pde = min(cfg.n_pde, jac_points)
    n_data = max(1, n_pde * cfg.n_data // cfg.n_pde)
    small = {k: (v_[:n_pde] if k in ("x_pde", "f") else v_[:n_data] if k in ("x_data", "y")
                 else v_) for k, v_ in batch.items()}
    Rj = 2 * (n_pde + n_data)
    J = np.empty((Rj, theta.size), dtype=dtype)
    res["jac_points"] = n_pde + n_data
    res["jac_ms"] = timed(lambda: ws.jacobian(theta, out=J, **small), max(3, steps // 4))
    res["vg_small_ms"] = timed(lambda: ws.value_and_grad(theta, grad, **small), steps)
    res["fill_ms"] = timed(lambda: J.fill(1.0), max(3, steps // 4))
    return res


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default="a,b")
    ap.add_argument("--dtypes", default="float32,float64")
    ap.add_argument("--jac-points", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10, help="timed calls per operation and round")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds, each with its own FMA peak; ratios are taken within a round")
    ap.add_argument("--fma-src", default=FMA_SRC)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args(argv)

    import helmpinn as hp
    hp.set_num_threads(args.threads)
    print(f"helmpinn {hp.__version__}, kernels {hp.cpu_isa()}, {args.threads} threads "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    meter = common.NoiseMeter().start()
    rounds = []
    for k in range(args.rounds):
        peak = fma_peak(args.threads, args.fma_src)
        rows = []
        for name in args.configs.split(","):
            for dtype in args.dtypes.split(","):
                r = bench_config(hp, common.CONFIGS[name], dtype, args.jac_points, args.steps)
                r["fma_peak"] = peak
                rows.append(r)
        rounds.append(rows)
        print(f"round {k + 1}: FMA peak {peak} GFLOP/s; " + "; ".join(
            f"{r['config']} {r['dtype']} vg {r['vg_ms']:.1f} ms" for r in rows), flush=True)
    noise = meter.stop()

    med = lambda xs: float(np.median(xs))  # noqa: E731
    print()
    print("| config, dtype | value_and_grad (min) | % of FMA peak, median (best) round | jvp / vg | "
          "vjp / vg | residuals / vg | jacobian R x P | jac / vg | (jac - fill) / vg |")
    print("|---|---|---|---|---|---|---|---|---|")
    for i, r0 in enumerate(rounds[0]):
        rs = [rows[i] for rows in rounds]
        pcts = [100 * r["gflops_vg"] / r["fma_peak"] for r in rs if r["fma_peak"]]
        pct = f"{med(pcts):.0f}% ({max(pcts):.0f}%)" if pcts and r0["dtype"] == "float32" else "-"
        ratio = lambda key, base="vg_ms": med([r[key] / r[base] for r in rs])  # noqa: E731
        print(f"| {r0['config']}, {r0['dtype']} | {med([r['vg_ms'] for r in rs]):.2f} "
              f"({min(r['vg_ms'] for r in rs):.2f}) ms | {pct} | {ratio('jvp_ms'):.2f} | "
              f"{ratio('vjp_ms'):.2f} | {ratio('residuals_ms'):.2f} | "
              f"{2 * r0['jac_points']} x {r0['P']} | {ratio('jac_ms', 'vg_small_ms'):.2f} | "
              f"{med([(r['jac_ms'] - r['fill_ms']) / r['vg_small_ms'] for r in rs]):.2f} |")
    print(f"\nmedians over {args.rounds} rounds (ratios within a round); FMA peaks "
          f"{[r[0]['fma_peak'] for r in rounds]} GFLOP/s; other processes used "
          f"{100 * noise:.0f}% of the CPUs while this ran")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rounds": rounds}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
