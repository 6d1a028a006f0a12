"""The CPU benchmark's measurements, run through worker processes: the float64 agreement check
against the reference (``do_check``), the interleaved timing of every implementation
(``do_time``) and helmpinn's scaling study (``do_scaling``).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
from common import CONFIGS, Config, flops_per_step, make_problem, with_points  # noqa: E402
from cpu_report import fmt_ms, rel_err, scaling_report  # noqa: E402
from cpu_workers import Server, _framework, run_worker  # noqa: E402

CHECK_TOL = 1e-6


def do_check(args, impls: list[str], have_hp: bool) -> dict:
    configs = args.check_configs
    print(f"\n## Agreement check (float64, configs' networks on {common.CHECK_N_PDE} PDE + "
          f"{common.CHECK_N_DATA} data points; relative 2-norm error vs the reference)\n")
    out_dir = tempfile.mkdtemp(prefix="helmpinn_bench_")
    ref = {}
    for cname in configs:
        cfg = with_points(CONFIGS[cname], common.CHECK_N_PDE, common.CHECK_N_DATA)
        ref[cname] = common.reference_loss_and_grad(cfg, make_problem(cfg, np.float64))
    groups: dict[str, list[str]] = {}
    for impl in impls:
        groups.setdefault(_framework(impl), []).append(impl)
    status = {}
    for fw, group in groups.items():
        job = dict(kind="check", impls=group, configs=configs, threads=args.threads,
                   out_dir=out_dir)
        r = run_worker(job, fw, args, timeout=900)
        if r is None:
            r = {f"{c}/{i}": {"ok": False, "error": "worker failed"} for c in configs for i in group}
        status.update(r)
    # reference: helmpinn when present, else the NumPy MATH.md reference
    rows, worst = [], 0.0
    labels = ["numpy-reference"] + [k.split("/", 1)[1] for k in status if k.startswith(configs[0] + "/")]
    ref_label = "helmpinn" if have_hp else "numpy-reference"
    failures = []
    for cname in configs:
        def load(label):
            if label == "numpy-reference":
                return ref[cname]
            fn = os.path.join(out_dir, f"{cname}_{label}.npz")
            if not os.path.exists(fn):
                return None
            z = np.load(fn)
            return float(z["loss"]), z["grad"]
        base = load(ref_label)
        if base is None:
            failures.append(f"{cname}: reference {ref_label} missing "
                            f"({status.get(f'{cname}/{ref_label}', {}).get('error')})")
            continue
        for label in labels:
            if label == ref_label:
                continue
            got = load(label)
            if got is None:
                err = status.get(f"{cname}/{label}", {}).get("error", "missing")
                rows.append((cname, label, "FAILED", err[:80]))
                failures.append(f"{cname}/{label}: {err}")
                continue
            el = abs(got[0] - base[0]) / max(abs(base[0]), 1e-300)
            eg = rel_err(got[1], base[1])
            worst = max(worst, el, eg)
            ok = el <= CHECK_TOL and eg <= CHECK_TOL and np.all(np.isfinite(got[1]))
            rows.append((cname, label, f"{el:.1e}", f"{eg:.1e}" + ("" if ok else "  <-- FAIL")))
            if not ok:
                failures.append(f"{cname}/{label}: loss {el:.2e}, grad {eg:.2e}")
    print(f"reference: {ref_label}\n")
    print("| config | implementation | loss rel. err | gradient rel. err |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if failures:
        print("\n" + "!" * 78)
        print(f"AGREEMENT CHECK FAILED (tolerance {CHECK_TOL:g}):")
        for f in failures:
            print("  - " + f)
        print("!" * 78)
        raise SystemExit(2)
    print(f"\nall agree within {CHECK_TOL:g} (worst {worst:.1e})")
    return {"reference": ref_label, "rows": rows, "worst": worst}


def do_time(args, impls: list[str], wait_budget: list) -> dict:
    """Per config: start one server per framework (build, compile, warm up: untimed), then
    time in rounds, each round running `per_round` steps of every implementation in turn (order
    rotated each round, a short idle pause between turns), until each has `steps` steps."""
    results: dict[str, dict] = {}
    groups: dict[str, list[str]] = {}
    for impl in impls:
        groups.setdefault(_framework(impl), []).append(impl)
    for cname in args.configs:
        cfg = CONFIGS[cname]
        t0 = time.perf_counter()
        res: dict[str, dict] = {}
        servers: dict[str, Server] = {}
        for fw, group in groups.items():
            job = dict(kind="serve", impls=group, config=cname, threads=args.threads,
                       warmup=args.warmup, batch_size=args.batch_size)
            srv = Server(job, fw, args)
            ready = srv.read()
            if ready is None:
                res.update({i: {"error": "worker failed"} for i in group})
                srv.close()
                continue
            servers[fw] = srv
            res.update(ready)
        t_setup = time.perf_counter() - t0
        waited = common.wait_quiet(args.noise, min(wait_budget[0], 60))
        wait_budget[0] -= waited
        live = [i for i in impls if i in res and "error" not in res[i]]
        owner = {i: servers[_framework(i)] for i in live}
        times = {i: [] for i in live}
        cpu = {i: [0.0, 0.0] for i in live}
        noise = {i: [] for i in live}
        rejected = {i: 0 for i in live}
        per_round = max(1, args.per_round)
        # steps per turn: per_round, or more for fast ones so a turn lasts >= 0.3 s (the noise
        # meter's resolution); every implementation gets the same number of turns (rounds)
        k_turn = {i: max(per_round, int(np.ceil(0.3 / max(res[i].get("est_step_s", 1.0), 1e-6))))
                  for i in live}
        rounds = int(np.ceil(args.steps / per_round))
        for rnd in range(rounds):
            order = live[rnd % len(live):] + live[:rnd % len(live)] if live else []
            for i in order:
                while True:
                    time.sleep(args.pause)
                    r = owner[i].run(i, k_turn[i])
                    if r is None:
                        res[i] = {"error": "worker died while timing"}
                        live.remove(i)
                        break
                    if r["other"] > args.noise and wait_budget[0] > 0:
                        rejected[i] += 1          # someone else took the CPUs: redo the turn
                        wait_budget[0] -= common.wait_quiet(args.noise, min(wait_budget[0], 30))
                        continue
                    times[i] += r["times"]
                    cpu[i][0] += r["cpu"]
                    cpu[i][1] += r["wall"]
                    noise[i].append(r["other"])
                    break
        rnd = rounds
        for srv in servers.values():
            srv.close()
        for i in list(times):
            if "error" in res.get(i, {}):
                continue
            ts = np.array(times[i])
            res[i].update(median_ms=float(np.median(ts) * 1e3), min_ms=float(ts.min() * 1e3),
                          mean_ms=float(ts.mean() * 1e3), steps=len(ts),
                          cpu_util=cpu[i][0] / max(cpu[i][1], 1e-12), rounds=rnd,
                          other_load=float(np.mean(noise[i])) if noise[i] else 0.0,
                          rejected_turns=rejected[i],
                          times_ms=[round(1e3 * t, 4) for t in times[i]])
        res["_flops"] = flops_per_step(cfg)
        results[cname] = res
        print(f"  config {cname}: set-up {t_setup:.0f} s, timing {time.perf_counter() - t0 - t_setup:.0f} s"
              f" ({rnd} rounds): " + ", ".join(
                  f"{i} {fmt_ms(res[i])}" if "error" not in res[i] else f"{i} ERROR"
                  for i in impls if i in res), flush=True)
        for i in impls:
            if "error" in res.get(i, {}):
                print(f"    error in {i}: {res[i]['error'][:300]}")
    return results


SCALING_POINTS_SMALL = dict(label="small2d", d=2, m=16, H=32, L=3)
SCALING_POINTS_B = dict(label="b", d=2, m=32, H=128, L=4)


def do_scaling(args, sgemm_rate: float, wait_budget: list) -> dict:
    quick = args.quick
    runs_pts = []

    def steps_for(flop):  # about 2 s of timed steps for the big ones, at least 3 steps
        est = flop / 60e9
        return int(max(3, min(args.steps, 2.0 / max(est, 1e-9))))

    pts = [1000, 10000, 100000] if quick else [1000, 10000, 100000, 1000000]
    for net, plist in ((SCALING_POINTS_SMALL, pts),
                       (SCALING_POINTS_B, [1000, 10000] if quick else [1000, 10000, 100000])):
        for n in plist:
            cfg = Config(net["label"], net["d"], net["m"], net["H"], net["L"], n, n // 8)
            runs_pts.append(dict(net, n_pde=n, n_data=n // 8, threads=args.threads,
                                 steps=steps_for(flops_per_step(cfg)), batch_size=args.batch_size))
    runs_w = []
    for H in ([32, 128, 256] if quick else [32, 64, 128, 256]):
        cfg = Config(f"H{H}", 2, 32, H, 4, 8192, 1024)
        runs_w.append(dict(label=f"H{H}", d=2, m=32, H=H, L=4, n_pde=8192, n_data=1024,
                           threads=args.threads, steps=steps_for(flops_per_step(cfg)),
                           batch_size=args.batch_size))
    runs_t = []
    for cname in args.configs:
        c = CONFIGS[cname]
        for th in (1, 2):
            runs_t.append(dict(label=cname, d=c.d, m=c.m, H=c.H, L=c.L, n_pde=c.n_pde,
                               n_data=c.n_data, threads=th,
                               steps=steps_for(flops_per_step(c) * 2 / th),
                               batch_size=args.batch_size))
    runs_bs = []
    c = CONFIGS["b"]
    for bs in ([1024, 8192] if quick else [512, 1024, 2048, 4096, 8192]):
        runs_bs.append(dict(label="b", d=c.d, m=c.m, H=c.H, L=c.L, n_pde=c.n_pde,
                            n_data=c.n_data, threads=args.threads,
                            steps=steps_for(flops_per_step(c)), batch_size=bs))

    out = {}
    for name, runs, threads in (("points", runs_pts, args.threads), ("width", runs_w, args.threads),
                                ("threads", runs_t, max(r["threads"] for r in runs_t)),
                                ("batch_size", runs_bs, args.threads)):
        job = dict(kind="scaling", runs=runs, threads=threads, noise=args.noise,
                   max_wait=max(0.0, wait_budget[0]))
        r = run_worker(job, "helmpinn", args, timeout=1200)
        out[name] = r["runs"] if r else []
    scaling_report(args, out, sgemm_rate)
    return out
