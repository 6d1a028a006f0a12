"""Inversion: the velocity inside a ring of transducers from the waves they record.

A unit square with a perfectly matched layer around it, background velocity 1 and two anomalies
(+15 % Gaussian, −10 % disc); sources and receivers on a circle of radius 0.45. The data are
made by ``hp.Survey.synthetic`` (finite differences on a grid finer than anything the inversion
uses); ``hp.invert`` then recovers the velocity from the start v = 1, wavefields (networks) and
medium (a B-spline of 1/v²) together, one frequency after the other, and the script prints the
velocity error ‖v − v_true‖ / ‖v_true − v_start‖ inside the circle.

    python examples/inversion.py [--sources 16] [--time-limit 300] [--out inversion.png]

With HELMPINN_EXAMPLES_QUICK=1 it inverts one low frequency from 4 sources for a few steps and
draws no figure (what CI does).
"""
import argparse
import math
import os

import numpy as np

import helmpinn as hp
from helmpinn.problems.geometry import Box

QUICK = os.environ.get("HELMPINN_EXAMPLES_QUICK") == "1"


def true_velocity(x):
    x = np.asarray(x, np.float64)
    gauss = 0.15 * np.exp(-((x[:, 0] - 0.38) ** 2 + (x[:, 1] - 0.60) ** 2) / (2 * 0.08 ** 2))
    r = np.hypot(x[:, 0] - 0.62, x[:, 1] - 0.40)
    return 1.0 + gauss - 0.05 * (1.0 - np.tanh((r - 0.1) / 0.02))


def ring(n, offset=0.0):
    t = 2 * math.pi * (np.arange(n) + offset) / n
    return 0.5 + 0.45 * np.stack([np.cos(t), np.sin(t)], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sources", type=int, default=4 if QUICK else 16)
    ap.add_argument("--receivers", type=int, default=32 if QUICK else 64)
    ap.add_argument("--frequencies", default="2" if QUICK else "2,3,4")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--steps", type=int, default=2 if QUICK else 50, help="LM steps per frequency at most")
    ap.add_argument("--out", default="" if QUICK else "inversion.png", help="figure ('' for none)")
    args = ap.parse_args()

    domain, pml = Box([0.0, 0.0], [1.0, 1.0]), hp.PML(0.25)
    frequencies = [float(f) for f in args.frequencies.split(",")]
    sources = [hp.PointSource(p) for p in ring(args.sources)]      # width: λ_min/10 from synthetic
    survey = hp.Survey.synthetic(true_velocity, domain, sources, ring(args.receivers, 0.5), frequencies,
                                 pml=pml, h=0.02 if QUICK else None)
    inv = hp.invert(survey, 1.0, domain=domain, pml=pml, bounds=(0.7, 1.4), true=true_velocity,
                    time_limit=args.time_limit, max_steps=args.steps,
                    pde_points=400 if QUICK else None)
    last = inv.history[-1]
    print(f"{inv.message}; data misfit {last['data_misfit']:.3f}")
    steps = sum(h["accepted"] is not None for h in inv.history)
    print(f"velocity error {last['velocity_error']:.3f} after {steps} steps "
          f"({last['time']:.0f} s)")
    if args.out:
        inv.plot(args.out)
        print("figure:", args.out)


if __name__ == "__main__":
    main()
