"""Data-parallel training over MPI: every rank runs this same script.

    mpiexec -n 2 python examples/mpi_train.py [--steps 2000] [--points 8192]

Each rank holds the same parameters and its own share of the points (``--points`` is the
total); the loss and gradient are those of all the ranks' points together, and every rank
takes the same Adam step. Rank 0 alone shows progress and prints the result. Needs mpi4py
(``pip install "helmpinn[mpi]"``).

With HELMPINN_EXAMPLES_QUICK=1 it runs 20 steps on few points (what CI does).
"""
import argparse
import os

from mpi4py import MPI

import helmpinn as hp
from helmpinn.training.trainer import default_settings

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20 if QUICK else 2000)
    ap.add_argument("--points", type=int, default=512 if QUICK else 8192,
                    help="interior points per draw, over all ranks together")
    args = ap.parse_args()
    comm = MPI.COMM_WORLD

    problem = hp.get_problem("dirichlet2d")
    s = default_settings(problem)
    model = hp.Model.create(problem.dim, s["ff_dim"], s["hidden"], s["layers"],
                            fourier_sigma=s["sigma"], seed=0)   # the same start on every rank
    trainer = hp.Trainer(problem, model, comm=comm, pde_points=args.points,
                         bc_points=args.points // 8, progress=not QUICK)
    trainer.fit(args.steps)
    error = trainer.evaluate()                 # every rank makes the same calls
    if comm.Get_rank() == 0:
        print(f"{comm.Get_size()} ranks: relative L2 error {error:.2e} after {args.steps} steps")


if __name__ == "__main__":
    main()
