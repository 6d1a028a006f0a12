"""Levenberg-Marquardt to a relative L2 error of 1e-6 on a small problem.

The built-in ``plane1d`` problem (u = exp(ikx) on [0, 1], k = 20, Dirichlet at 0, Sommerfeld at
1) trained with LM's own defaults (:func:`helmpinn.optim.lm.lm_defaults`: a small float64 network on
fixed Sobol points), stopping once the error is below 1e-6. Prints the error every few
iterations and at the end.

    python examples/levenberg_marquardt.py [--target 1e-6] [--iterations 200]

With HELMPINN_EXAMPLES_QUICK=1 it runs 3 iterations (what CI does).
"""
import argparse
import os

import helmpinn as hp
from helmpinn.optim.lm import lm_defaults, lm_options

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", type=float, default=1e-6, help="stop below this relative L2 error")
    ap.add_argument("--iterations", type=int, default=3 if QUICK else 200)
    args = ap.parse_args()

    problem = hp.get_problem("plane1d", k=20.0)
    s = lm_defaults(problem)        # network, dtype, points and LM options for this problem
    model = hp.Model.create(problem.dim, s["ff_dim"], s["hidden"], s["layers"],
                            dtype=s["dtype"], fourier_sigma=s["sigma"])
    trainer = hp.Trainer(problem, model, pde_points=s["pde_points"], bc_points=s["bc_points"],
                         sampling=s["sampling"], resample_every=0, eval_every=1,
                         target_error=args.target, progress=False)
    history = trainer.fit_lm(args.iterations, **lm_options(s))
    for step, err in zip(history.eval_step, history.eval_error):
        if step % 5 == 0:
            print(f"iteration {step:3d}  relative L2 error {err:.2e}")
    error = trainer.evaluate()
    print(f"relative L2 error {error:.2e} after {trainer.step} iterations "
          f"({model.num_params} parameters, {trainer.train_time:.1f} s)")
    if not QUICK and error >= args.target:
        raise SystemExit(f"did not reach {args.target:g}: {trainer.stop_reason}")


if __name__ == "__main__":
    main()
