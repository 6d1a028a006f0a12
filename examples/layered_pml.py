"""A point source in a two-layer medium, radiating into open space through a perfectly matched
layer: ∇·(ρ⁻¹∇u) + κ(x) u = f in [-1, 1]², a PML of width 0.5 around it.

The upper half (y > 0) has wavenumber k, the lower half 1.5 k and density 2 (a smoothed
interface, width 0.05, so the coefficients stay differentiable); the source is a narrow Gaussian
at (0, 0.4). There is no closed-form solution: the script reports the PDE residual on the
physical domain and how little field the wall sees, and saves a figure of the field.

    python examples/layered_pml.py [--k 6] [--steps 3000] [--out layered_pml.png]

With HELMPINN_EXAMPLES_QUICK=1 it runs 20 steps on few points and draws no figure (what CI does).
"""
import argparse
import os
import time

import numpy as np

import helmpinn as hp
from helmpinn.geometry import Box

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=float, default=6.0, help="wavenumber of the upper layer")
    ap.add_argument("--steps", type=int, default=20 if QUICK else 3000)
    ap.add_argument("--out", default="" if QUICK else "layered_pml.png",
                    help="figure of the field ('' for none)")
    args = ap.parse_args()
    k = args.k

    def blend(x):  # 0 in the upper layer, 1 in the lower one
        return 0.5 * (1.0 - np.tanh(x[:, 1] / 0.05))

    def kappa(x):
        return (k * (1.0 + 0.5 * blend(x))) ** 2

    def density(x):
        return 1.0 + blend(x)

    def density_grad(x):
        g = np.zeros_like(x)
        g[:, 1] = -0.5 / 0.05 / np.cosh(x[:, 1] / 0.05) ** 2
        return g

    def source(x):
        r2 = x[:, 0] ** 2 + (x[:, 1] - 0.4) ** 2
        return -np.exp(-r2 / (2 * 0.05**2)) / (2 * np.pi * 0.05**2) + 0j

    problem = hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), kappa=kappa, source=source, bcs={},
                         pml=hp.PML(0.5), density=density, density_grad=density_grad,
                         wavenumber=1.5 * k)
    model = hp.Model.create(2, 32, 64, 2, fourier_sigma=1.5 * k / (2 * np.pi * np.sqrt(2)))
    trainer = hp.Trainer(problem, model, pde_points=256 if QUICK else 4096,
                         bc_points=32 if QUICK else 256, progress=not QUICK)
    t0 = time.perf_counter()
    trainer.fit(args.steps)
    print(f"{args.steps} Adam steps in {time.perf_counter() - t0:.1f} s")

    # The residual of the trained field on the physical domain, against the source's size.
    x = problem.domain.sample_interior(4000, np.random.default_rng(1))
    res = problem.pde_residual_fd(x, h=1e-3, u=model.predict)
    f = problem.source_at(x)
    print(f"PDE residual (rms) {np.sqrt(np.mean(np.abs(res) ** 2)):.3e}, "
          f"source (rms) {np.sqrt(np.mean(np.abs(f) ** 2)):.3e}")
    wall = problem.sampling_domain.sample_boundary(400, np.random.default_rng(2)).x
    inner = problem.domain.sample_boundary(400, np.random.default_rng(2)).x
    print(f"|u| at the PML's wall {np.abs(model.predict(wall)).max():.2e}, "
          f"at the physical boundary {np.abs(model.predict(inner)).max():.2e}")

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        g = np.linspace(-1.5, 1.5, 241)
        X, Y = np.meshgrid(g, g, indexing="xy")
        u = model.predict(np.stack([X.ravel(), Y.ravel()], axis=1)).reshape(X.shape)
        fig, ax = plt.subplots(figsize=(5, 4.4))
        im = ax.pcolormesh(X, Y, u.real, cmap="RdBu_r", shading="auto")
        ax.plot([-1, 1, 1, -1, -1], [-1, -1, 1, 1, -1], "k--", lw=0.8)
        ax.axhline(0.0, color="k", lw=0.5)
        ax.set_title("Re u: point source over a denser, slower layer (PML outside the dashes)",
                     fontsize=8)
        ax.set_aspect("equal")
        fig.colorbar(im, ax=ax)
        fig.savefig(args.out, dpi=120, bbox_inches="tight")
        print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
