#!/usr/bin/env python
"""3-D open domains: ``hp.solve`` against ``fd_solve`` on ``free-source-3d`` (a Gaussian source at
the centre of ``[−1, 1]³`` in a PML, closed-form field), W wavelengths across the cube.

    PYTHONPATH=python python benchmarks/bench_3d.py [--wavelengths 2,4,8] [--fd-ppw 4,6,8,10,12]
        [--fd-pml 0.5] [--fd-timeout 600] [--memory 6G] [--solve 2@300,4@900] [--solve-memory M] [--threads 2]
        [--eval-points 4000] [--json out.json]

For each W:

- ``fd_solve`` (fourth order, SuperLU) on a ladder of grids, ``--fd-ppw`` nodes per wavelength
  (h = λ / ppw), with a layer ``--fd-pml`` wavelengths wide (the closed form is the same whatever
  the layer: the layer only has to absorb; half a wavelength is where ``fd_solve``'s reflection fell
  below its grid error, docs/benchmarks.md "The PML's width"). Each solve runs in a child process
  of its own, so that its peak memory (``resource.getrusage``' ``ru_maxrss``) is its own; beside
  it the memory ``fd_solve`` estimated before starting. The memory limit is ``--memory``
  (``HELMPINN_MEMORY_LIMIT`` of the children): a grid beyond it is refused before anything is
  assembled, and the ladder of that W stops there; after a solve killed or failed, the finer grids
  are only checked against the limit. ``hp.solve`` runs under the library's own limit
  (80% of the memory available) or ``--solve-memory``; a run beyond it is refused the same way. A solve past ``--fd-timeout`` seconds is
  killed and the ladder stops.
- ``hp.solve`` with its defaults (``--solve W@SECONDS``: its time limit; a W not named there is
  not run), also in a child process; its error against time is its history's (``eval_time``,
  ``eval_error``: training seconds from the fit's start, the problem's test points), its final
  error also on the benchmark's own points.

Errors are relative L2 errors against the closed form on the same ``--eval-points`` random points
of the physical cube for both methods (``fd_solve``'s solution interpolated by its cubic spline).
The crossover printed at the end: at each ``fd_solve`` time, the network's error then; and the
time each method needed to reach the other's best error. Run on a quiet machine: the times are
wall-clock and a shared machine inflates them (the CPU seconds each child used are printed beside
them: a measure of the work that sharing does not inflate); the errors are not affected.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

import numpy as np


def eval_points(n: int, seed: int = 1) -> np.ndarray:
    """``n`` uniform random points of the physical cube ``[−1, 1]³`` (the same for every method)."""
    return np.random.default_rng(seed).uniform(-1.0, 1.0, (n, 3))


def relative_error(u: np.ndarray, exact: np.ndarray) -> float:
    return float(np.linalg.norm(u - exact) / np.linalg.norm(exact))


def peak_rss_bytes() -> int:
    """This process's peak resident memory (Linux reports ``ru_maxrss`` in KiB)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def fd_grid(W: float, ppw: float, pml_wavelengths: float) -> tuple[float, int]:
    """h and the node count of ``fd_solve``'s grid for W wavelengths across the cube, ppw nodes
    per wavelength, a layer ``pml_wavelengths`` wide (the grid spans ``[−1 − w, 1 + w]³``)."""
    lam = 2.0 / W
    h = lam / ppw
    side = 2.0 + 2.0 * pml_wavelengths * lam
    n = math.ceil(side / h - 1e-9) + 1
    return h, n ** 3


def child_fd(W: float, ppw: float, pml_wavelengths: float, n_eval: int) -> dict:
    """One ``fd_solve`` (run in a child process): time, peak memory, error."""
    import helmpinn as hp
    from helmpinn.reference import fd_solve

    lam = 2.0 / W
    problem = hp.get_problem("free-source-3d", wavelengths=W, pml_width=pml_wavelengths * lam)
    h, _ = fd_grid(W, ppw, pml_wavelengths)
    x = eval_points(n_eval)
    exact = problem.exact_at(x)
    t = time.perf_counter()
    sol = fd_solve(problem, h)
    seconds = time.perf_counter() - t
    return {"seconds": seconds, "error": relative_error(sol(x), exact), "peak_rss": peak_rss_bytes(),
            "nodes": int(sol.values.size)}


def child_solve(W: float, time_limit: float, n_eval: int) -> dict:
    """One ``hp.solve`` with its defaults (run in a child process): its history, its final error on
    the benchmark's points, its wall time and peak memory."""
    import helmpinn as hp

    problem = hp.get_problem("free-source-3d", wavelengths=W)
    x = eval_points(n_eval)
    exact = problem.exact_at(x)
    t = time.perf_counter()
    try:
        sol = hp.solve(problem, time_limit=time_limit, progress=False)
    except hp.memory.MemoryEstimateError as exc:
        return {"refused": " ".join(str(exc).split())}
    wall = time.perf_counter() - t
    s = sol.settings
    dd = s.get("decomposition") or {}
    config = (f"{s.get('model', 'network')} {s.get('optimizer')}, grids {dd.get('grids')}, "
              f"{s.get('pde_points')} PDE points, PML {problem.pml.width:g}")
    h = sol.history
    return {"wall": wall, "error": relative_error(sol.predict(x), exact), "peak_rss": peak_rss_bytes(),
            "config": config, "stop": sol.stop_reason,
            "curve": [[t_, e] for t_, e in zip(h.eval_time, h.eval_error) if e is not None]}


def run_child(args: list[str], timeout: float, env: dict) -> dict:
    """This script in a child process (``--child ...``); its JSON result, or ``{"failed": why}``."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", *args]
    before = child_cpu_seconds()
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"failed": f"killed after {timeout:g} s", "cpu": child_cpu_seconds() - before}
    cpu = child_cpu_seconds() - before
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"failed": f"exit {out.returncode}: {tail}", "cpu": cpu}
    return {**json.loads(lines[-1]), "cpu": cpu}


def child_cpu_seconds() -> float:
    """The CPU seconds (user + system) of this process's finished children: the difference around
    one child is its work, which a shared machine does not inflate as it does the wall time."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def fd_ladder(W: float, a: argparse.Namespace, env: dict) -> list[dict]:
    """``fd_solve`` at each ``--fd-ppw`` until refused for memory; after one killed (``--fd-timeout``)
    or failed, the finer grids only checked against the memory limit."""
    from helmpinn import memory

    rows, stopped = [], False
    for ppw in a.fd_ppw:
        h, nodes = fd_grid(W, ppw, a.fd_pml)
        row = {"W": W, "ppw": ppw, "h": h, "nodes": nodes, "estimate": memory.fd_memory_estimate(nodes, 3)}
        os.environ[memory.LIMIT_VARIABLE] = env[memory.LIMIT_VARIABLE]
        try:
            memory.check_fd(nodes, 3)
        except memory.MemoryEstimateError as exc:
            row["refused"] = str(exc).splitlines()[0]
        else:
            if stopped:
                row["skipped"] = "a coarser grid was killed or failed"
            else:
                row.update(run_child(["fd", str(W), str(ppw), str(a.fd_pml), str(a.eval_points)], a.fd_timeout, env))
        rows.append(row)
        print(fd_line(row), flush=True)
        if "refused" in row:
            break
        stopped = stopped or "failed" in row
    return rows


def fd_line(r: dict) -> str:
    head = (f"W={r['W']:g} fd_solve ppw {r['ppw']:g} (h {r['h']:.4f}, {round(r['nodes'] ** (1 / 3))}^3 nodes), "
            f"estimate {r['estimate'] / 1e9:.2f} GB: ")
    if "refused" in r:
        return head + "REFUSED (" + r["refused"] + ")"
    if "skipped" in r:
        return head + "fits the memory limit; not run (" + r["skipped"] + ")"
    if "failed" in r:
        return head + "FAILED (" + r["failed"] + f", {r.get('cpu', float('nan')):.0f} CPU s)"
    return head + (f"error {r['error']:.3e}, {r['seconds']:.1f} s wall ({r.get('cpu', float('nan')):.0f} CPU s in all), "
                   f"peak RSS {r['peak_rss'] / 1e9:.2f} GB")


def error_at(curve: list, seconds: float) -> float | None:
    """The network's last error recorded at or before ``seconds`` (None before its first)."""
    errs = [e for t, e in curve if t <= seconds]
    return errs[-1] if errs else None


def time_to(points: list[tuple[float, float]], target: float) -> float | None:
    """The first time among (time, error) pairs whose error is at or below ``target``."""
    hits = [t for t, e in points if e <= target]
    return min(hits) if hits else None


def crossover(W: float, fd: list[dict], net: dict | None) -> None:
    """Print, for one W, the network's error at each ``fd_solve`` time and each method's time to
    the other's best error."""
    done = [r for r in fd if "error" in r]
    refused = [r for r in fd if "refused" in r or "failed" in r]
    print(f"--- crossover, W={W:g}")
    if net is None or "failed" in net or "refused" in net:
        print(f"  hp.solve: {'not run' if net is None else net.get('failed') or 'refused: ' + net['refused']}")
    else:
        curve = net["curve"]
        for r in done:
            e = error_at(curve, r["seconds"])
            print(f"  at {r['seconds']:.0f} s: fd_solve (ppw {r['ppw']:g}) {r['error']:.2e}, hp.solve "
                  + ("no step yet" if e is None else f"{e:.2e}"))
        if done:
            best = min(done, key=lambda r: r["error"])
            t = time_to([tuple(p) for p in curve], best["error"])
            print(f"  fd_solve's best {best['error']:.2e} took it {best['seconds']:.0f} s; hp.solve "
                  + (f"reached it at {t:.0f} s" if t is not None else "did not reach it"))
        tf = time_to([(r["seconds"], r["error"]) for r in done], net["error"])
        print(f"  hp.solve's final {net['error']:.2e} at {net['wall']:.0f} s (wall); fd_solve "
              + (f"reached it at {tf:.0f} s" if tf is not None else "did not reach it on the ladder"))
    for r in refused:
        print(f"  fd_solve at ppw {r['ppw']:g}: " + (r.get("refused") or r["failed"]))


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wavelengths", default="2,4,8")
    ap.add_argument("--fd-ppw", default="4,6,8,10,12")
    ap.add_argument("--fd-pml", type=float, default=0.5, help="fd_solve's layer, in wavelengths")
    ap.add_argument("--fd-timeout", type=float, default=600.0)
    ap.add_argument("--memory", default="6G", help="HELMPINN_MEMORY_LIMIT of fd_solve's runs")
    ap.add_argument("--solve-memory", default=None,
                    help="HELMPINN_MEMORY_LIMIT of hp.solve's runs (default: the library's own limit)")
    ap.add_argument("--solve", default="", help="W@SECONDS,...: hp.solve's runs and time limits")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-points", type=int, default=4000)
    ap.add_argument("--json", default=None)
    ap.add_argument("--child", nargs="+", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    try:
        a.wavelengths = [float(w) for w in a.wavelengths.split(",")]
        a.fd_ppw = [float(p) for p in a.fd_ppw.split(",") if p]
        a.solve = {float(w): float(t) for w, t in (item.split("@") for item in a.solve.split(",") if item)}
    except ValueError as exc:
        ap.error(f"--wavelengths, --fd-ppw: numbers separated by commas; --solve: W@SECONDS,... ({exc})")
    return a


def main(argv=None) -> int:
    a = parse_args(argv)
    if a.child:
        kind, *rest = a.child
        import helmpinn as hp
        hp.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
        nums = [float(v) for v in rest]
        out = child_fd(*nums[:3], int(nums[3])) if kind == "fd" else child_solve(nums[0], nums[1], int(nums[2]))
        print(json.dumps(out), flush=True)
        return 0
    env = {**os.environ, "HELMPINN_MEMORY_LIMIT": a.memory, "OMP_NUM_THREADS": str(a.threads)}
    print(f"load {os.getloadavg()}, memory limit {a.memory}, {a.threads} threads", flush=True)
    results = {}
    for W in a.wavelengths:
        fd = fd_ladder(W, a, env)
        net = None
        if W in a.solve:
            net_env = {k: v for k, v in env.items() if k != "HELMPINN_MEMORY_LIMIT"}
            if a.solve_memory:
                net_env["HELMPINN_MEMORY_LIMIT"] = a.solve_memory
            net = run_child(["solve", str(W), str(a.solve[W]), str(a.eval_points)], 3 * a.solve[W] + 600, net_env)
            if "failed" in net or "refused" in net:
                print(f"W={W:g} hp.solve " + (f"FAILED: {net['failed']}" if "failed" in net else f"REFUSED: {net['refused']}"),
                      flush=True)
            else:
                print(f"W={W:g} hp.solve ({net['config']}): error {net['error']:.3e} at {net['wall']:.0f} s wall, "
                      f"{net['cpu']:.0f} CPU s, peak RSS {net['peak_rss'] / 1e9:.2f} GB, stop {net['stop']}; curve "
                      + ", ".join(f"{e:.2e}@{t:.0f}s" for t, e in net["curve"]), flush=True)
        results[W] = {"fd": fd, "solve": net}
        print(f"load {os.getloadavg()}", flush=True)
    for W, r in results.items():
        crossover(W, r["fd"], r["solve"])
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"args": {k: v for k, v in vars(a).items() if k != "child"}, "results": results}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
