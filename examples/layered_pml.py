"""A point source over a layered medium, radiating into open space through a perfectly matched
layer, solved by ``hp.solve``, compared with the finite-difference reference ``fd_solve`` and
recorded by receivers along the top of the domain.

The medium is given as a velocity model on a grid (a GridField), the problem by its frequency:
κ = (2πf)²/v(x)². The upper half (y > 0) has velocity 1, the lower half 2/3 (a slower layer; the
interface is smoothed over about 0.1 so that the coefficient stays differentiable). The source is
a PointSource at (0, 0.4) (a normalised Gaussian of width λ/10). The physical domain is
[-1, 1]², the PML 0.5 wide around it, with a quarter of the PDE points drawn in it
(pml_share). At 4.5 wavelengths across the sampled domain ``hp.solve`` trains a domain-decomposed
model by Gauss-Newton. There is no closed-form solution: the script compares the solution with
fd_solve on the physical domain and at the receivers, and prints both differences.

    python examples/layered_pml.py [--frequency 1] [--time-limit 300] [--out layered_pml]

With HELMPINN_EXAMPLES_QUICK=1 it takes 2 steps on few points, a coarse reference grid, and
writes no files (what CI does).
"""
import argparse
import os
import time

import numpy as np

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.problems.media import GridField
from helmpinn.receivers import plot_recording, receiver_line, record, save_recording
from helmpinn.reference import fd_solve

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frequency", type=float, default=1.0, help="f: k = 2πf/v (2π above, 3π below)")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds for hp.solve")
    ap.add_argument("--out", default="" if QUICK else "layered_pml",
                    help="prefix of the figures and the receivers' .npz ('' for none)")
    args = ap.parse_args()

    # The velocity model on a grid that covers the PML too (velocity is evaluated in the layer).
    g = np.linspace(-1.5, 1.5, 61)
    X, Y = np.meshgrid(g, g, indexing="ij")             # axis 0 is x, axis 1 is y
    velocity = 1.0 - (1.0 / 6.0) * (1.0 - np.tanh(Y / 0.1))   # 1 above y = 0, 2/3 below
    medium = GridField(velocity, origin=(-1.5, -1.5), spacing=g[1] - g[0])

    problem = hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), frequency=args.frequency, velocity=medium,
                         source=hp.PointSource((0.0, 0.4)), bcs={}, pml=hp.PML(0.5),
                         pml_share=0.25)           # a quarter of the PDE points in the layer
    print(f"largest wavenumber {problem.wavenumber:.3f}, "
          f"source width {problem.point_sources[0].width:.4f}")

    t0 = time.perf_counter()
    # 4.5 wavelengths across the sampled domain at the layer's k: hp.solve plans a decomposition
    # (overlapping subdomains, a small network in each) trained by Gauss-Newton.
    if QUICK:
        solution = hp.solve(problem, steps=2, pde_points=1000, bc_points=64, progress=False)
    else:
        solution = hp.solve(problem, time_limit=args.time_limit)
    print(f"hp.solve ({solution.settings['model']}, {solution.settings['optimizer']}): "
          f"{len(solution.history.loss)} steps in "
          f"{time.perf_counter() - t0:.1f} s, validation loss {solution.val_loss:.3e}, "
          f"stopped: {solution.stop_reason or 'at its step limit'}")

    # The reference: the same problem (medium, PML, source) by fourth-order finite differences.
    reference = fd_solve(problem, h=0.05 if QUICK else 0.02)
    x = problem.test_points()                            # a grid on the physical domain
    u_ref = reference(x)
    diff = np.linalg.norm(solution.predict(x) - u_ref) / np.linalg.norm(u_ref)
    print(f"relative difference from fd_solve {diff:.2e} on the physical domain")

    # Receivers along the top of the physical domain.
    receivers = receiver_line((-1.0, 1.0), (1.0, 1.0), 101)
    rec = record(solution.model, receivers, problem)
    rec_ref = reference(receivers)
    rec_diff = np.linalg.norm(rec["u"] - rec_ref) / np.linalg.norm(rec_ref)
    print(f"receivers: relative difference from fd_solve {rec_diff:.2e}, "
          f"largest amplitude {rec['amplitude'].max():.3e}")

    if args.out:
        save_recording(f"{args.out}-receivers.npz", rec)
        plot_recording(rec, f"{args.out}-receivers.png", title="receivers along y = 1")

        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        n = int(round(np.sqrt(len(x))))
        fig, axes = plt.subplots(1, 2, figsize=(9, 4), layout="constrained")
        for ax, u, title in ((axes[0], solution.predict(x), "hp.solve"), (axes[1], u_ref, "fd_solve")):
            im = ax.pcolormesh(x[:, 0].reshape(n, n), x[:, 1].reshape(n, n), u.real.reshape(n, n),
                               cmap="RdBu_r", shading="auto")
            ax.axhline(0.0, color="k", lw=0.5)
            ax.set_title(f"Re u, {title}", fontsize=9)
            ax.set_aspect("equal")
        fig.colorbar(im, ax=axes)
        fig.savefig(f"{args.out}.png", dpi=120)
        print(f"wrote {args.out}.png, {args.out}-receivers.png, {args.out}-receivers.npz")


if __name__ == "__main__":
    main()
