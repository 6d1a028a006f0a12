"""Scattering: a plane wave on a sound-soft cylinder, in a box closed by a perfectly matched layer.

The built-in ``scatter-soft`` problem (k = 2, cylinder of radius π/4 in [-π, π]², a PML of width
1 around the box, exact Hankel-series solution), trained with Adam and the problem's own
defaults (its loss weights and 10000 steps), then the relative L2 error on the physical domain.
Built from the same pieces as your own scatterer would be: ``BoxMinusBall``, ``PML`` and a
Dirichlet condition (u = -incident wave) on the part named "scatterer".

    python examples/scattering.py [--steps 10000] [--out scatter_soft.png]

With HELMPINN_EXAMPLES_QUICK=1 it runs 20 steps on few points and draws no figure (what CI does).
"""
import argparse
import os

import numpy as np

import helmpinn as hp
from helmpinn.training.trainer import default_settings

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20 if QUICK else None,
                    help="Adam steps (default: the problem's, 10000)")
    ap.add_argument("--out", default="" if QUICK else "scatter_soft.png",
                    help="figure of the field ('' for none)")
    args = ap.parse_args()

    problem = hp.get_problem("scatter-soft")   # hp.list_problems() lists the others
    print(problem, "| boundary parts with conditions:", problem.part_names)
    s = default_settings(problem)               # the problem's hints over the general defaults
    steps = args.steps or s["steps"]
    model = hp.Model.create(problem.dim, s["ff_dim"], s["hidden"], s["layers"],
                            fourier_sigma=s["sigma"])
    trainer = hp.Trainer(problem, model, pde_points=256 if QUICK else s["pde_points"],
                         bc_points=64 if QUICK else s["bc_points"], progress=not QUICK)
    trainer.fit(steps)
    print(f"relative L2 error {trainer.evaluate():.2e} after {steps} Adam steps "
          f"({trainer.train_time:.1f} s)")

    if args.out:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        x = problem.test_points(161)            # points of the physical domain
        u = model.predict(x)
        fig, ax = plt.subplots(figsize=(5, 4.4))
        sc = ax.scatter(x[:, 0], x[:, 1], c=u.real, s=2, cmap="RdBu_r")
        ax.set_aspect("equal")
        ax.set_title("Re u, scattered field (scatter-soft)")
        fig.colorbar(sc, ax=ax)
        fig.savefig(args.out, dpi=120, bbox_inches="tight")
        print(f"figure: {args.out}")


if __name__ == "__main__":
    main()
