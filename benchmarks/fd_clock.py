#!/usr/bin/env python
"""The finite-difference clock: ``fd_solve``'s time to a given error on a built-in problem, the
number to set beside a trained network's.

    PYTHONPATH=python python benchmarks/fd_clock.py --problem NAME[:k=v,...] --error E [E ...] \
        [--start-ppw 4] [--step 1.25] [--eval-points 5000] [--seed 0] [--timeout 600]

The grid is refined from coarse (``--start-ppw`` nodes a wavelength, λ = 2π/k with k the
problem's wavenumber; 8 intervals across the shortest side where k = 0) by ``--step`` a rung
until ``fd_solve``'s relative L2 error is at or below every ``--error`` asked, the memory
estimate refuses the grid, or a solve runs past ``--timeout`` (a grid too coarse for the domain
or an obstacle is skipped). The error is measured as
``benchmarks/bench_solve.py`` measures a network's: on ``--eval-points`` random points of the
physical domain drawn with seed ``--seed + 1``, against ``problem.exact`` (for ``box-source``
with its resonant modes removed, :func:`helmpinn.problems.waves.box_source_error`; a problem
whose ``exact`` is itself an ``fd_solve`` reference, ``scatter-square-soft``, is compared with
that). Each solve runs in a child process of its own: its time is ``fd_solve``'s (assembly,
factorisation, solve; the interpolation at the points is outside the clock), its peak memory
the child's maximum resident set (with the estimate ``fd_solve`` checks before it starts). One
line a rung, then a line per error asked: the first rung at or below it and the ladder's time
up to it. Times depend on the machine's load (printed with each rung); errors do not.
"""
from __future__ import annotations

import argparse
import math
import multiprocessing
import os
import resource
import sys
import time

import numpy as np

import helmpinn as hp
from helmpinn.reference import fd_memory_estimate, fd_solve
from bench_time_to_accuracy import field_error


def parse_problem(text: str):
    """``name`` or ``name:k=v,...`` (options separated by ',', ';' or ':'; numbers as floats, whole
    numbers as ints)."""
    name, _, rest = text.partition(":")
    opts = {}
    for kv in filter(None, rest.replace(";", ",").replace(":", ",").split(",")):
        key, eq, value = kv.partition("=")
        if not eq:
            raise SystemExit(f"bad problem option {kv!r} in {text!r}: expected key=value")
        number = float(value)
        opts[key] = int(number) if number.is_integer() and key in ("n", "ref_points") else number
    return hp.get_problem(name, **opts)


def _child(problem, h, x, exact, queue) -> None:
    try:
        t = time.perf_counter()
        sol = fd_solve(problem, h)
        seconds = time.perf_counter() - t
        err = field_error(problem, sol(x), exact, x)["modes_removed"]
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20   # kB -> GB
        queue.put(("ok", err, seconds, peak, tuple(sol.values.shape)))
    except Exception as exc:   # the parent reports it (a refusal by the memory estimate, a coarse grid)
        queue.put(("error", f"{type(exc).__name__}: {exc}"))


def _rung(problem, h, x, exact, timeout):
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child, args=(problem, h, x, exact, queue))
    proc.start()
    try:
        out = queue.get(timeout=timeout)
    except Exception:
        out = ("error", f"no answer within {timeout:.0f} s (killed)")
    proc.kill()
    proc.join()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", required=True)
    ap.add_argument("--error", type=float, nargs="+", required=True)
    ap.add_argument("--start-ppw", type=float, default=4.0)
    ap.add_argument("--step", type=float, default=1.25)
    ap.add_argument("--eval-points", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args()
    if a.step <= 1 or a.start_ppw <= 0 or any(e <= 0 for e in a.error):
        ap.error("--step must be > 1, --start-ppw and every --error > 0")
    problem = parse_problem(a.problem)
    if problem.exact is None:
        ap.error(f"{a.problem}: the problem has no exact or reference solution to measure against")
    x = problem.domain.sample_interior(a.eval_points, np.random.default_rng(a.seed + 1))
    t = time.perf_counter()
    exact = problem.exact_at(x)
    print(f"{a.problem}: exact solution at {len(x)} points in {time.perf_counter() - t:.1f} s "
          f"(outside the clock); load {os.getloadavg()[0]:.1f}", flush=True)
    lo, hi = (np.asarray(b, np.float64) for b in problem.sampling_domain.bounds)
    k = float(problem.wavenumber or 0.0)
    wavelength = 2 * math.pi / k if k > 0 else None
    h = wavelength / a.start_ppw if wavelength else float(np.min(hi - lo)) / 8
    targets = sorted(a.error, reverse=True)
    met: dict[float, tuple] = {}
    total = 0.0
    while len(met) < len(targets):
        nodes = int(np.prod(np.ceil((hi - lo) / h - 1e-9) + 1))
        try:
            estimate = fd_memory_estimate(nodes, problem.dim) / 1e9
        except Exception:
            estimate = float("nan")
        out = _rung(problem, h, x, exact, a.timeout)
        ppw = f"{wavelength / h:.1f} nodes a wavelength, " if wavelength else ""
        if out[0] == "error":
            print(f"h = {h:.4g} ({ppw}{nodes} nodes, estimate {estimate:.2f} GB): {out[1]}; "
                  f"load {os.getloadavg()[0]:.1f}", flush=True)
            if "use a smaller h" in out[1]:    # too coarse for the domain or the obstacle: refine
                h /= a.step
                continue
            break
        _, err, seconds, peak, shape = out
        total += seconds
        print(f"h = {h:.4g} ({ppw}grid {'x'.join(map(str, shape))}): error {err:.3e}, {seconds:.2f} s, "
              f"peak {peak:.2f} GB (estimate {estimate:.2f}), load {os.getloadavg()[0]:.1f}", flush=True)
        for e in targets:
            if e not in met and err <= e:
                met[e] = (h, err, seconds, total, peak)
        h /= a.step
    for e in targets:
        if e in met:
            hh, err, seconds, cum, peak = met[e]
            print(f"error <= {e:.1e}: h = {hh:.4g}, error {err:.3e}, {seconds:.2f} s (the ladder up to it: "
                  f"{cum:.1f} s), peak {peak:.2f} GB", flush=True)
        else:
            print(f"error <= {e:.1e}: not reached", flush=True)
    sys.exit(0 if len(met) == len(targets) else 1)


if __name__ == "__main__":
    main()
