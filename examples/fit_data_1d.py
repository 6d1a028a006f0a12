"""Fit the 1-D Helmholtz solution u = exp(i k x) from samples (data loss only), with helmpinn's
fused loss-and-gradient pass and its fused Adam step. Prints the loss as it falls.

    python examples/fit_data_1d.py [--k 8] [--steps 1500]

With HELMPINN_EXAMPLES_QUICK=1 it runs 50 steps (what CI does).
"""
import argparse
import os
import time

import numpy as np

import helmpinn as hp

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=float, default=8.0, help="wavenumber")
    ap.add_argument("--steps", type=int, default=50 if QUICK else 1500)
    ap.add_argument("--lr", type=float, default=3e-3)
    args = ap.parse_args()

    spec = hp.ModelSpec(in_dim=1, ff_dim=16, hidden_dim=32, num_hidden_layers=2)
    theta = hp.init_params(spec, dtype="float32", seed=0, fourier_sigma=args.k / (2 * np.pi))
    x = np.linspace(0.0, 1.0, 256, dtype=np.float32)[:, None]
    exact = np.exp(1j * args.k * x[:, 0])
    y = np.stack([exact.real, exact.imag], axis=1).astype(np.float32)

    ws = hp.Workspace(spec, batch_size=256, dtype="float32")
    grad = np.zeros_like(theta)
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    t0 = time.perf_counter()
    for step in range(1, args.steps + 1):
        loss = ws.value_and_grad(theta, grad, x_data=x, y=y)
        hp.adam_step(theta, grad, m, v, step, lr=args.lr)
        if step == 1 or step % max(args.steps // 10, 1) == 0:
            print(f"step {step:5d}  loss {loss:.3e}")
    u = ws.forward(theta, x)
    err = np.linalg.norm((u[:, 0] + 1j * u[:, 1]) - exact) / np.linalg.norm(exact)
    print(f"relative L2 error {err:.2e} after {args.steps} steps in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
