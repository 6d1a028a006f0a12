#!/usr/bin/env python
"""Where a closed Dirichlet box's error lies: its sine-mode spectrum, by distance to resonance.

    PYTHONPATH=python python benchmarks/box_error_modes.py --problem box-source:wavelengths=10 \
        (--model model.npz | --time-limit 900 [--threads 2] [--seed 0] [--set KEY=VALUE] [--save m.npz]) \
        [--grid G]   (points per axis: 511 in 2-D, 127 in 3-D)

Trains ``hp.solve(problem, time_limit=...)`` with its defaults (or reads a saved model), then
takes the error ``u − exact`` on the interior grid ``x_i = i/(G+1)`` (G points per axis) of the
unit box (2-D and 3-D problems on [0, 1]^d with Dirichlet walls: ``box-source``, ``dirichlet2d``,
``cube3d``), writes it as ``Σ c_mn sin(mπx) sin(nπy) [sin(lπz)]`` by a type-I DST (exact on that
grid), and prints the share of the error's energy and the relative error in each band of the
modes' relative distance ``|κ − π²(m² + n² [+ l²])|/κ`` to resonance (a residual in a mode is
amplified by its inverse), the exactly resonant modes left out (the problem does not determine u
in them), and the modes that carry most of it.
"""
from __future__ import annotations

import argparse

import numpy as np
import scipy.fft as fft

import helmpinn as hp
from bench_time_to_accuracy import parse_overrides, parse_problem   # 'name:opt=value'; --set

BANDS = [(0.0, 1e-2), (1e-2, 3e-2), (3e-2, 0.1), (0.1, 0.3), (0.3, 1.0), (1.0, np.inf)]


def spectrum(problem, predict, grid: int) -> dict:
    """The error's sine coefficients' energy by mode on the interior grid, with each mode's
    relative distance to resonance, and the exact field's energy."""
    lo, hi = problem.domain.bounds
    d = problem.dim
    if d not in (2, 3) or not np.allclose(lo, 0) or not np.allclose(hi, 1):
        raise SystemExit(f"--problem: expected a 2-D or 3-D problem on [0, 1]^d with Dirichlet walls, got {problem.name}")
    t = np.arange(1, grid + 1) / (grid + 1)
    x = np.stack([X.ravel() for X in np.meshgrid(*[t] * d, indexing="ij")], 1)
    exact = problem.exact_at(x).reshape((grid,) * d)
    err = np.asarray(predict(x)).reshape((grid,) * d) - exact

    def energy(f):   # |c_mn|² up to one factor common to every field on this grid
        return np.abs(fft.dstn(f.real, type=1)) ** 2 + np.abs(fft.dstn(f.imag, type=1)) ** 2
    m = np.arange(1, grid + 1)
    kappa = float(problem.kappa)
    lam = np.pi ** 2 * sum(np.meshgrid(*[m ** 2] * d, indexing="ij"))
    gap = np.abs(kappa - lam) / kappa
    return {"error": energy(err), "exact": float(energy(exact).sum()), "gap": gap}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", required=True)
    ap.add_argument("--model", help="a saved model (hp.solve's, Model.save or DecomposedModel.save)")
    ap.add_argument("--time-limit", type=float, help="train hp.solve's defaults this long instead")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="hp.solve's settings")
    ap.add_argument("--save", help="write the trained model here")
    ap.add_argument("--grid", type=int, default=None, help="points per axis (511 in 2-D, 127 in 3-D)")
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    if (a.model is None) == (a.time_limit is None):
        ap.error("give --model or --time-limit")
    if a.threads:
        hp.set_num_threads(a.threads)
    problem, _ = parse_problem(a.problem)
    if a.model:
        from helmpinn.training.dd_driver import load_model
        model = load_model(a.model)
    else:
        try:
            overrides = parse_overrides(a.set, reserved=("seed", "time_limit", "progress"))
        except ValueError as exc:
            ap.error(str(exc))
        model = hp.solve(problem, time_limit=a.time_limit, seed=a.seed, progress=False, **overrides).model
        if a.save:
            model.save(a.save)
    grid = a.grid or (511 if problem.dim == 2 else 127)
    s = spectrum(problem, model.predict, grid)
    E, gap = s["error"], s["gap"]
    resonant = gap < 1e-12
    total = float(E[~resonant].sum())
    print(f"{a.problem}: relative error {np.sqrt(total / s['exact']):.3e} without the exactly resonant modes "
          f"({int(resonant.sum())}), {np.sqrt(E.sum() / s['exact']):.3e} with them; {grid}^{problem.dim} grid")
    print("distance to resonance | modes | share of the error's energy | relative error")
    for lo, hi in BANDS:
        band = (gap >= lo) & (gap < hi) & ~resonant
        print(f"[{lo:g}, {hi:g}) | {int(band.sum())} | {E[band].sum() / total:.4f} | "
              f"{np.sqrt(E[band].sum() / s['exact']):.2e}")
    order = np.argsort(-np.where(resonant, 0.0, E).ravel())[:a.top]
    for i in order:
        idx = np.unravel_index(i, E.shape)
        print(f"  mode {tuple(int(j) + 1 for j in idx)}: distance {gap[idx]:.2e}, share {E[idx] / total:.4f}")


if __name__ == "__main__":
    main()
