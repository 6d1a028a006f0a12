"""What one CG iteration of a decomposed Gauss-Newton run costs, piece by piece.

Runs ``hp.solve`` with its defaults on one of ``bench_sharp.py``'s cases, stops at the K-th CG
solve, and times there (the mean of 5 after one warm-up, the BLAS at one thread as CG runs it):
the products ``J v`` and ``Jᵀ w``, the preconditioner M alone and with the mode rows' Woodbury
term, and what building each takes (M's factors; M with the Woodbury term). Nothing is changed
in the run; the numbers are this machine's: compare them within one run.

    PYTHONPATH=python python benchmarks/cg_pieces.py --case square --solve 3 --threads 2
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import helmpinn as hp
from helmpinn._blas import blas_limit
from helmpinn.optim import gauss_newton as gn
from bench_sharp import CASES


def mean_seconds(f, n: int = 5) -> float:
    f()
    t = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - t) / n


class Stop(Exception):
    pass


def pieces(self, s, lam, D) -> dict:
    """The seconds of each piece at the linearisation s (damping lam, D) of MatrixFreeGN self."""
    res = self.res
    v = np.random.default_rng(0).standard_normal(res.num_params)
    w = self._jvp(s, v)
    out = {"parameters": res.num_params, "point rows": res.num_points, "mode rows": 2 * res.num_modes,
           "subdomains": len(res.parts)}
    with blas_limit(self.blas_threads):
        t = time.perf_counter()
        P = self.preconditioner(s, lam, D)
        out["build: M and its Woodbury term"] = time.perf_counter() - t
        U, s.U = s.U, None
        try:
            t = time.perf_counter()
            M = self.preconditioner(s, lam, D)
            out["build: M alone"] = time.perf_counter() - t
        finally:
            s.U = U
    with blas_limit(1):
        out["J v"] = mean_seconds(lambda: self._jvp(s, v))
        out["J^T w"] = mean_seconds(lambda: self._vjp(s, w))
        out["M v"] = mean_seconds(lambda: M(v))
        out["M v with the Woodbury term"] = mean_seconds(lambda: P(v))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=sorted(CASES), default="square")
    ap.add_argument("--solve", type=int, default=3, metavar="K", help="time at the K-th CG solve of the run")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        hp.set_num_threads(args.threads)
    calls = {"n": 0}
    found = {}
    cg = gn.MatrixFreeGN.cg

    def timed_cg(self, s, lam, D, rhs, precond, start=None, scale=None):
        calls["n"] += 1
        if calls["n"] == args.solve:
            found.update(pieces(self, s, lam, D))
            raise Stop
        return cg(self, s, lam, D, rhs, precond, start, scale)

    gn.MatrixFreeGN.cg = timed_cg
    problem = CASES[args.case]()[0]
    try:
        hp.solve(problem, progress=False)
    except Stop:
        pass
    if not found:
        raise SystemExit(f"the run made fewer than {args.solve} CG solves")
    for name, value in found.items():
        print(f"{name:32s} {value:.4f} s" if isinstance(value, float) else f"{name:32s} {value}")


if __name__ == "__main__":
    main()
