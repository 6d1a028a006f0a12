"""Your own problem from scratch: a plane wave crossing the unit square.

Solves Δu + k²u = 0 on [0, 1]² with u = exp(ik(x cos θ + y sin θ)) given on the four sides
(Dirichlet), so the exact solution is known and the script can print the relative L2 error.
Change the domain, κ, the source or the boundary conditions to make it yours.

    python examples/own_problem.py [--k 6.28] [--steps 2000]

With HELMPINN_EXAMPLES_QUICK=1 it runs a few steps on few points (what CI does).
"""
import argparse
import os

import numpy as np

import helmpinn as hp
from helmpinn.problems.geometry import Box

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=float, default=2 * np.pi, help="wavenumber")
    ap.add_argument("--steps", type=int, default=20 if QUICK else 2000, help="Adam steps")
    args = ap.parse_args()
    k, theta = args.k, np.pi / 6
    direction = np.array([np.cos(theta), np.sin(theta)])

    def exact(x):                      # x: [N, 2] points -> complex [N]
        return np.exp(1j * k * (x @ direction))

    problem = hp.Problem(
        Box([0.0, 0.0], [1.0, 1.0]),   # the domain; its sides are the parts "xmin", "xmax", "ymin", "ymax"
        kappa=k**2,                    # κ = k², a constant (or a callable x -> κ(x))
        source=None,                   # f = 0 (or a callable x -> complex f(x))
        bcs={"*": hp.Dirichlet(exact)},  # every side: u = exact
        exact=exact,                   # optional: lets the trainer report the error
    )
    model = hp.Model.create(problem, ff_dim=32, hidden_dim=64, num_hidden_layers=2)  # σ from k
    trainer = hp.Trainer(problem, model, pde_points=256 if QUICK else 4096,
                         bc_points=64 if QUICK else 512, progress=not QUICK)
    trainer.fit(args.steps)
    print(f"relative L2 error {trainer.evaluate():.2e} after {args.steps} Adam steps")

    x = np.array([[0.5, 0.5]])
    print(f"u(0.5, 0.5) = {model.predict(x)[0]:.4f} (exact {exact(x)[0]:.4f})")


if __name__ == "__main__":
    main()
