#!/usr/bin/env python
"""How wide a PML: ``fd_solve`` (the grid the only approximation) against the exact field for
several layer widths and grid resolutions, and the error's split for the 3-D source.

    PYTHONPATH=python python benchmarks/pml_width.py            # free-source, 5 wavelengths (2-D)
    PYTHONPATH=python python benchmarks/pml_width.py --3d W S WIDTH H

2-D: ``free-source`` at 5 wavelengths with layers 0.25, 0.5, 1 and 1.5 wavelengths wide at 12
and 24 nodes per wavelength. 3-D: ``free-source-3d`` (W wavelengths, source width S, a layer
WIDTH wide, grid spacing H): the error, the best global complex factor (exact ≈ factor · fd)
and what is left after removing it, or after removing the standing wave ``sin(kr)/(kr)``.
Errors on the physical box at the grid's nodes; times depend on the machine's load.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import helmpinn as hp
from helmpinn.reference import fd_solve
from helmpinn.waves3d import free_source_3d


def on_box(problem, h):
    t = time.perf_counter()
    sol = fd_solve(problem, h)
    secs = time.perf_counter() - t
    x = sol.points
    x = x[np.all(np.abs(x) <= 1 + 1e-12, axis=1)]
    return x, sol(x), problem.exact_at(x), secs


def two_d() -> None:
    W = 5.0
    k = math.pi * W
    lam = 2 * math.pi / k
    base = hp.get_problem("free-source", wavelengths=W)
    for frac in (0.25, 0.5, 1.0, 1.5):
        for ppw in (12, 24):
            p = hp.Problem(base.domain, kappa=base.kappa, source=base.source, bcs={}, exact=base.exact,
                           wavenumber=k, pml=hp.PML(frac * lam))
            _, u, ue, secs = on_box(p, lam / ppw)
            print(f"free-source W=5, PML {frac} wavelengths, {ppw} nodes per wavelength: "
                  f"error {np.linalg.norm(u - ue) / np.linalg.norm(ue):.2e} ({secs:.1f} s)", flush=True)


def three_d(W: float, s: float, width: float, h: float) -> None:
    p = free_source_3d(W, s=s, pml_width=width)
    x, u, ue, secs = on_box(p, h)
    e, scale = u - ue, np.linalg.norm(ue)
    factor = np.vdot(u, ue) / np.vdot(u, u)
    j0 = np.sinc(p.wavenumber * np.linalg.norm(x, axis=1) / np.pi)
    left = e - j0 * (np.vdot(j0, e) / np.vdot(j0, j0))
    print(f"free-source-3d W={W} s={s} PML {width} ({width * W / 2:.2f} wavelengths) h={h}: error "
          f"{np.linalg.norm(e) / scale:.3e}, factor {factor:.4f}, after it {np.linalg.norm(factor * u - ue) / scale:.3e}, "
          f"after sin(kr)/(kr) {np.linalg.norm(left) / scale:.3e} ({secs:.1f} s)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--3d", dest="three", nargs=4, type=float, metavar=("W", "S", "WIDTH", "H"))
    a = ap.parse_args()
    if a.three:
        three_d(*a.three)
    else:
        two_d()
