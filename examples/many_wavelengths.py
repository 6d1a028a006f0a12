"""Many wavelengths: a point source and a lens in open space, five wavelengths across, where
``hp.solve`` trains a domain-decomposed model by matrix-free Gauss-Newton, compared with the
finite-difference reference ``fd_solve``.

The physical domain is [-1, 1]² with a PML 0.3 wide around it; the medium has velocity 1 except
for a smooth lens of slower velocity (down to 0.77: κ up to 1.7 times the background's) centred
at (0.3, -0.2); the source is a PointSource at (-0.4, 0.3) of width 0.04. At frequency 2.5 the
background wavelength is 0.4: five wavelengths across the physical domain, about 8.5 across the
sampled one (the PML included) at the lens's wavenumber. Above a few wavelengths one network is
both large and badly conditioned, and ``hp.solve`` plans a decomposition sized from the
wavelengths instead (overlapping subdomains, each with a small network under a smooth window),
trained by Gauss-Newton with CG on the exact Jacobian products. The script prints that plan,
trains, and prints the relative difference from ``fd_solve`` on the physical domain (4.3e-4
after 300 s on 2 cores; docs/tutorials/many-wavelengths.md).

    python examples/many_wavelengths.py [--frequency 2.5] [--time-limit 300] [--out many_wavelengths.png]

With HELMPINN_EXAMPLES_QUICK=1 it takes 2 steps on few points, a coarse reference grid, and
writes no files (what CI does).
"""
import argparse
import os
import time

import numpy as np

import helmpinn as hp
from helmpinn.geometry import Box
from helmpinn.reference import fd_solve

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def velocity(x):
    """1, slower in a smooth lens around (0.3, -0.2): v = 1 / (1 + 0.3 exp(-r²/(2·0.3²)))."""
    r2 = (x[:, 0] - 0.3) ** 2 + (x[:, 1] + 0.2) ** 2
    return 1.0 / (1.0 + 0.3 * np.exp(-r2 / (2 * 0.3**2)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frequency", type=float, default=2.5, help="f: wavelength 1/f in the background")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds for hp.solve")
    ap.add_argument("--out", default="" if QUICK else "many_wavelengths.png", help="figure ('' for none)")
    args = ap.parse_args()

    problem = hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), frequency=args.frequency, velocity=velocity,
                         source=hp.PointSource((-0.4, 0.3), width=0.04), bcs={}, pml=hp.PML(0.3))

    # What hp.solve will do, before it does it: the plan (a decomposition here, and its solver).
    plan = hp.run_plan(problem)
    dd = plan.decomposition
    print(f"plan: {plan.model} model, {' + '.join('x'.join(map(str, g)) for g in dd['grids'])} "
          f"subdomains (overlap {dd['overlap']}), subnetworks of {plan.ff_dim} frequencies and "
          f"{plan.hidden} hidden units, {plan.pde_points} PDE points, optimizer {plan.optimizer}")

    t0 = time.perf_counter()
    if QUICK:
        solution = hp.solve(problem, steps=2, pde_points=2000, progress=False)
    else:
        solution = hp.solve(problem, time_limit=args.time_limit)
    print(f"hp.solve: {solution.model.num_params} parameters, {len(solution.history.loss)} steps in "
          f"{time.perf_counter() - t0:.0f} s, validation loss {solution.val_loss:.2e}, "
          f"stopped: {solution.message}")

    # The reference: the same problem (medium, PML, source) by fourth-order finite differences.
    reference = fd_solve(problem, h=0.05 if QUICK else 0.01)
    x = problem.test_points()                  # a grid on the physical domain
    u_ref, u = reference(x), solution.predict(x)
    diff = np.linalg.norm(u - u_ref) / np.linalg.norm(u_ref)
    print(f"relative difference from fd_solve {diff:.2e} on the physical domain")

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = int(round(np.sqrt(len(x))))
        X, Y = x[:, 0].reshape(n, n), x[:, 1].reshape(n, n)
        fig, axes = plt.subplots(1, 3, figsize=(13, 4), layout="constrained")
        for ax, field, title in ((axes[0], u, "network"), (axes[1], u_ref, "fd_solve")):
            im = ax.pcolormesh(X, Y, field.real.reshape(n, n), cmap="RdBu_r", shading="auto")
            ax.set_title(f"Re u, {title}", fontsize=9)
            ax.set_aspect("equal")
        fig.colorbar(im, ax=axes[:2])
        im = axes[2].pcolormesh(X, Y, np.abs(u - u_ref).reshape(n, n), shading="auto")
        axes[2].set_title("|network − fd_solve|", fontsize=9)
        axes[2].set_aspect("equal")
        fig.colorbar(im, ax=axes[2])
        fig.savefig(args.out, dpi=120)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
