#!/usr/bin/env python
"""``fd_solve`` on ``scatter-square-soft`` (a plane wave on a sound-soft square in a PML box):
its error at several grids against the problem's own reference (``fd_solve`` at ``ref_points``
nodes a wavelength), and the time each grid takes: the clock beside ``hp.solve``'s rows.

    PYTHONPATH=python python benchmarks/fd_square_clock.py --wavelengths 8 [--ref-points 64] [--ppw 12 16 20 24 32]

The error is the relative L2 error on the problem's test points (the physical box outside the
square), as ``hp.solve`` reports it.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from helmpinn.problems.obstacles import scatter_square_soft
from helmpinn.reference.fd import fd_solve


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wavelengths", type=float, default=8.0)
    ap.add_argument("--ref-points", type=int, default=64)
    ap.add_argument("--ppw", type=int, nargs="+", default=[12, 16, 20, 24, 32])
    args = ap.parse_args()
    problem = scatter_square_soft(args.wavelengths, ref_points=args.ref_points)
    wavelength = 2.0 / args.wavelengths
    x = problem.test_points()
    t = time.perf_counter()
    ref = problem.exact(x)
    print(f"reference ({args.ref_points} nodes a wavelength): {time.perf_counter() - t:.1f} s, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    for ppw in args.ppw:
        t = time.perf_counter()
        sol = fd_solve(problem, wavelength / ppw)
        dt = time.perf_counter() - t
        err = np.linalg.norm(sol(x) - ref) / np.linalg.norm(ref)
        print(f"{ppw:3d} nodes a wavelength, grid {sol.values.shape}: error {err:.3e}, {dt:.1f} s, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
