"""Where a saved model's error comes from: its residual split by region, each part's field solved.

On ``fd_solve``'s grid (``h`` = the wavelength / ``--ppw``) the model's error at the nodes,
``e = u_model − u_fd`` (zero at the nodes the operator fixes: the walls, inside an obstacle), has
the discrete residual ``r = A e`` (A the finite-difference operator), and ``A⁻¹ r_S`` is the
part of the error that the residual in a region S causes; the parts add up to e exactly. The
regions: the PDE rows within each radius of the domain's re-entrant corners (in wavelengths),
and the rows beyond the largest. With ``--moments`` also the model's corner moments
(:func:`helmpinn.problems.corners.corner_moments`, slopes by central differences).

    python benchmarks/residual_split.py --problem scatter-square-soft:wavelengths=8 --model m.npz [--ppw 32]

(``bench_solve.py --save m.npz`` writes a model.) The split is exact for the grid's own solution;
against the continuous one it carries ``fd_solve``'s error at that ``--ppw``.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_time_to_accuracy import parse_problem   # noqa: E402

import helmpinn as hp   # noqa: E402
from helmpinn.problems.corners import corner_moments   # noqa: E402
from helmpinn.reference.fd import FDOperator   # noqa: E402
from helmpinn.training.dd_driver import load_model   # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problem", required=True)
    ap.add_argument("--model", required=True, help="a decomposed model's .npz (bench_solve.py --save)")
    ap.add_argument("--ppw", type=int, default=32, help="fd_solve's nodes a wavelength")
    ap.add_argument("--radii", default="0.0625,0.125,0.25,0.5,1", help="corner radii in wavelengths")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--moments", action="store_true")
    a = ap.parse_args()
    if a.threads:
        hp.set_num_threads(a.threads)
    problem, _ = parse_problem(a.problem)
    model = load_model(a.model)
    lam = 2 * math.pi / float(problem.wavenumber)
    op = FDOperator(problem, lam / a.ppw)
    A = op.matrix()
    lu = op.factorize()
    u_fd = lu.solve(op.rhs())
    x, inner = op.points, op.interior
    u = np.zeros(len(x), complex)
    u[inner] = model.predict(x[inner])
    e = np.where(inner, u - u_fd, 0.0)
    r = A @ e
    lo, hi = problem.sampler.box
    physical = inner & np.all((x >= lo) & (x <= hi), axis=1)
    scale = np.linalg.norm(u_fd[physical])
    print(f"{a.problem}: {len(x):,} nodes (h = {lam / a.ppw:.4g}); the model's error against fd_solve "
          f"on the physical nodes {np.linalg.norm(e[physical]) / scale:.3e}")
    corners, _ = problem.domain.reentrant_corners()
    d = np.min(np.linalg.norm(x[:, None, :] - corners[None], axis=2), axis=1) if len(corners) else np.full(len(x), np.inf)
    radii = [float(v) for v in a.radii.split(",")] if len(corners) else []
    regions = [(f"PDE rows within {rho:g} wavelengths of the corners", inner & (d < rho * lam)) for rho in radii]
    regions.append(("PDE rows beyond " + (f"{max(radii):g} wavelengths of them" if radii else "(all)"),
                    inner & (d >= (max(radii) if radii else 0) * lam)))
    for name, where in regions:
        part = lu.solve(np.where(where, r, 0.0))
        print(f"  {name:48s} {int(where.sum()):8,} rows: error {np.linalg.norm(part[physical]) / scale:.3e}")
    if a.moments:
        def field(z):
            h = 1e-6 * lam
            g = [(model.predict(z + h * v) - model.predict(z - h * v)) / (2 * h) for v in np.eye(problem.dim)]
            return model.predict(z), np.stack(g, 1)
        for i, m in enumerate(corner_moments(problem, field)):
            print(f"  corner {i}: |moments| " + " ".join(f"{v:.1e}" for v in np.abs(m)))


if __name__ == "__main__":
    main()
