#!/usr/bin/env python
"""Inversion benchmarks (issue #60): the medium from receiver data, every method on the same
synthetic survey, start, bounds and velocity-error measure.

    python benchmarks/bench_inversion.py --case ring|crosswell --method fwi|pinn
        [--noise 0.01] [--time-limit S] [--seed 0] [--regularization A] [--json out.json]
        [--figure out.png]
    python benchmarks/bench_inversion.py --scaling [--wavefields 4 8 16 32] [--steps 3] [--json out.json]
    mpiexec -n 2 python benchmarks/bench_inversion.py --scaling --mpi ...

Cases (:func:`make_case`; the anomalies are :func:`true_velocity`'s):

- ``ring``: ultrasound-like ring tomography. The unit square with a PML around it, background
  v = 1, a +15 % Gaussian anomaly (σ = 0.08 at (0.38, 0.60)) and a −10 % disc of radius 0.1 at
  (0.62, 0.40) whose edge is smoothed by a tanh over 0.02; 16 sources and 64 receivers on the
  circle of radius 0.45 about the centre (the receivers half a receiver spacing off the source
  angles), frequencies 2, 3 and 4 (2, 3, 4 wavelengths across at v = 1); start v = 1; the
  velocity error is measured inside the receiver circle (the region the survey illuminates).
  Default time limit 300 s.
- ``crosswell``: 8 sources at x = 0.05 and 32 receivers at x = 0.95 (y from 0.1 to 0.9), the
  same medium, frequencies and start; the error is measured between the wells
  (0.05 < x < 0.95, 0.1 < y < 0.9). Default time limit 600 s.

Data: :meth:`helmpinn.Survey.synthetic` (fourth-order finite differences at 20 nodes per
shortest wavelength, finer than the inversion's grid, with its own one-wavelength PML),
``--noise``: relative complex Gaussian noise per frequency. Receivers closer than 0.1 to the
source (its near field, under half a wavelength at the highest frequency) get weight 0 in the
ring case, as a tomography setup mutes them. Velocity error: ``‖v − v_true‖ / ‖v_true −
v_initial‖`` on a 101 × 101 grid of the unit square restricted to the case's region
(:func:`velocity_error`).

Methods: ``METHODS[name](case, args) -> dict`` with at least ``velocity`` (a callable x -> v),
``seconds`` and ``history``; ``fwi`` is :func:`helmpinn.reference.fwi`, ``pinn``
:func:`helmpinn.invert` (its velocity error in the history is measured inside the hull of the
sources and receivers, the same region here; the row's error is this script's). Another method is one
more entry of :data:`METHODS` taking the same case dict.

``--scaling`` (:func:`scaling`): the time of one Gauss-Newton (LM) step of :func:`helmpinn.invert`
against the number of wavefields W: one frequency (2), W point sources evenly on the ring's
circle, the ring's receivers, medium, PML, start and bounds, invert's defaults otherwise,
``--steps`` steps (tol 0); the time per step is the mean time between the history's step
entries (the linearisation, the trials and the step's history entry). ``--mpi`` runs it on
``MPI.COMM_WORLD`` (``comm=``; rank 0 prints and writes).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np

import helmpinn as hp
from helmpinn.geometry import Box

FREQUENCIES = (2.0, 3.0, 4.0)
BOUNDS = (0.7, 1.4)
TIME_LIMITS = {"ring": 300.0, "crosswell": 600.0}


def true_velocity(x):
    """Background 1, +15 % Gaussian anomaly, −10 % smoothed disc of radius 0.1."""
    x = np.asarray(x, np.float64)
    r1 = (x[:, 0] - 0.38) ** 2 + (x[:, 1] - 0.60) ** 2
    r2 = np.sqrt((x[:, 0] - 0.62) ** 2 + (x[:, 1] - 0.40) ** 2)
    return (1.0 + 0.15 * np.exp(-r1 / (2 * 0.08**2))
            - 0.10 * 0.5 * (1.0 - np.tanh((r2 - 0.1) / 0.02)))


def _ring_geometry():
    centre, radius = np.array([0.5, 0.5]), 0.45
    ts = 2 * math.pi * np.arange(16) / 16
    tr = 2 * math.pi * (np.arange(64) + 0.5) / 64
    src = centre + radius * np.stack([np.cos(ts), np.sin(ts)], axis=1)
    rec = centre + radius * np.stack([np.cos(tr), np.sin(tr)], axis=1)

    def region(x):
        return np.sum((np.asarray(x) - centre) ** 2, axis=1) < radius**2
    return src, rec, region


def _crosswell_geometry():
    src = np.stack([np.full(8, 0.05), np.linspace(0.1, 0.9, 8)], axis=1)
    rec = np.stack([np.full(32, 0.95), np.linspace(0.1, 0.9, 32)], axis=1)

    def region(x):
        x = np.asarray(x)
        return (x[:, 0] > 0.05) & (x[:, 0] < 0.95) & (x[:, 1] > 0.1) & (x[:, 1] < 0.9)
    return src, rec, region


def make_case(name: str, noise: float = 0.0, seed: int = 0) -> dict:
    """The case ``name`` ("ring" or "crosswell"): a dict with ``survey`` (synthetic data),
    ``domain``, ``pml`` (the inversion's: 0.25 around the unit square), ``initial`` (1.0),
    ``true`` (:func:`true_velocity`), ``bounds``, ``region`` and ``time_limit``."""
    geometry = {"ring": _ring_geometry, "crosswell": _crosswell_geometry}
    if name not in geometry:
        raise ValueError(f"unknown case {name!r}; use one of {sorted(geometry)}")
    src, rec, region = geometry[name]()
    domain = Box([0.0, 0.0], [1.0, 1.0])
    sources = [hp.PointSource(p) for p in src]
    survey = hp.Survey.synthetic(true_velocity, domain, sources, rec, FREQUENCIES,
                                 noise=noise, seed=seed)
    if name == "ring":   # mute the receivers in each source's near field
        near = np.linalg.norm(rec[None, :, :] - src[:, None, :], axis=2) < 0.1
        weights = np.broadcast_to(~near, survey.data.shape).astype(np.float64)
        survey = hp.Survey(survey.sources, survey.receivers, survey.frequencies, survey.data, weights)
    return {"name": name, "survey": survey, "domain": domain, "pml": hp.PML(0.25),
            "initial": 1.0, "true": true_velocity, "bounds": BOUNDS, "region": region,
            "time_limit": TIME_LIMITS[name], "noise": noise}


def velocity_error(velocity, case: dict, initial=None) -> float:
    """``‖v − v_true‖ / ‖v_true − v_initial‖`` on a 101 × 101 grid of the unit square inside
    the case's region (``velocity``, ``initial``: callables x -> v or numbers)."""
    x = case["domain"].grid(101)[0]
    x = x[case["region"](x)]

    def values(v):
        return np.full(len(x), float(v)) if not callable(v) else np.asarray(v(x), np.float64)
    vt = values(case["true"])
    v0 = values(case["initial"] if initial is None else initial)
    return float(np.linalg.norm(values(velocity) - vt) / np.linalg.norm(vt - v0))


def plot_case(case: dict, velocity, path: str, title: str = "") -> None:
    """The true velocity, the recovered one and their difference on the unit square, the
    sources (stars) and receivers (dots) marked, the error's region outlined by its mask."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = 101
    x = case["domain"].grid(n)[0]
    true = case["true"](x).reshape(n, n)
    got = np.asarray(velocity(x) if callable(velocity) else np.full(len(x), velocity)).reshape(n, n)
    inside = case["region"](x).reshape(n, n)
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8), constrained_layout=True)
    lo, hi = float(np.min(true)), float(np.max(true))
    panels = ((true, "true", "viridis", (lo, hi)), (got, "recovered", "viridis", (lo, hi)),
              (np.where(inside, got - true, np.nan), "recovered − true (region)", "RdBu_r",
               (-(hi - lo) / 2, (hi - lo) / 2)))
    for ax, (field, name, cmap, (vmin, vmax)) in zip(axes, panels):
        im = ax.imshow(field.T, origin="lower", extent=(0, 1, 0, 1), cmap=cmap, vmin=vmin, vmax=vmax)
        src = np.array([s.position for s in case["survey"].sources])
        ax.plot(*case["survey"].receivers.T, ".", color="k", ms=2)
        ax.plot(*src.T, "*", color="r", ms=6)
        ax.set_title(name, fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.85)
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def regularization_rule(noise: float) -> float:
    """fwi's α from the data's relative noise level: ``max(10 noise², 1e-5)`` (measured on the
    ring case: noiseless 1e-5 / 1e-4 / 1e-3 gave velocity errors 0.071 / 0.074 / 0.083; with 1 %
    noise 0.14 / 0.097 / 0.087)."""
    return max(10.0 * noise * noise, 1e-5)


def run_fwi(case: dict, args) -> dict:
    """The classical baseline: :func:`helmpinn.reference.fwi` with its defaults."""
    from helmpinn.reference import fwi

    def report(info):
        if not args.quiet:
            print(f"  group {info['group']} iteration {info['iteration']:3d}  misfit "
                  f"{info['misfit']:.3e}  error {info['velocity_error']:.3f}  "
                  f"t {info['time']:.1f} s", flush=True)
    alpha = args.regularization
    if alpha is None:
        alpha = regularization_rule(case["noise"])
    result = fwi(case["survey"], case["initial"], domain=case["domain"], pml=case["pml"],
                 bounds=case["bounds"], regularization=alpha,
                 max_iter=args.max_iter, time_limit=args.time_limit or case["time_limit"],
                 true=case["true"], region=case["region"], callback=report)
    return {"velocity": result.velocity, "seconds": result.seconds, "history": result.history,
            "stopped": result.stopped, "n_solves": result.n_solves, "regularization": alpha}


def run_pinn(case: dict, args) -> dict:
    """The physics-informed inversion: :func:`helmpinn.invert` with its defaults (networks and
    medium together by Levenberg-Marquardt, the scattered-field form on a finite-difference
    forward solve per frequency; its own regularisation weight, whose normalisation differs
    from fwi's α: ``--regularization`` is not passed on)."""
    def report(h):
        if not args.quiet and h["accepted"] is not None:
            print(f"  f {h['frequency']:g}  data misfit {h['data_misfit']:.3e}  PDE residual "
                  f"{h['pde_residual']:.3e}  error {h['velocity_error']:.3f}  t {h['time']:.1f} s",
                  flush=True)
    t0 = time.perf_counter()
    result = hp.invert(case["survey"], case["initial"], domain=case["domain"], pml=case["pml"],
                       bounds=case["bounds"], true=case["true"],
                       time_limit=args.time_limit or case["time_limit"], seed=args.seed, callback=report)
    seconds = time.perf_counter() - t0
    history = {k: [h.get(k) for h in result.history] for k in result.history[0]}
    return {"velocity": result.velocity, "seconds": seconds, "history": history,
            "stopped": result.message}


METHODS = {"fwi": run_fwi, "pinn": run_pinn}


def scaling(counts=(4, 8, 16, 32), steps: int = 3, comm=None, frequency: float = 2.0) -> list[dict]:
    """Seconds per LM step of :func:`helmpinn.invert` at each wavefield count (module docstring);
    one row per count: ``wavefields``, ``ranks``, ``seconds_per_step``, ``step_seconds`` (each
    step's), ``setup_seconds`` (the stage's forward solves, points and networks, its first
    history entry), ``steps``, ``medium`` (coefficients), ``data_seconds``."""
    _, rec, _ = _ring_geometry()
    domain, rows = Box([0.0, 0.0], [1.0, 1.0]), []
    for W in counts:
        ts = 2 * math.pi * np.arange(W) / W
        src = [hp.PointSource(p) for p in 0.5 + 0.45 * np.stack([np.cos(ts), np.sin(ts)], axis=1)]
        t0 = time.perf_counter()
        survey = hp.Survey.synthetic(true_velocity, domain, src, rec, [frequency])
        t_data = time.perf_counter() - t0
        t0 = time.perf_counter()
        inv = hp.invert(survey, 1.0, domain=domain, pml=hp.PML(0.25), bounds=BOUNDS, max_steps=steps, tol=0.0,
                        time_limit=1e9, comm=comm)
        total = time.perf_counter() - t0
        times = [h["time"] for h in inv.history]
        per = list(np.diff(times))
        rows.append({"wavefields": W, "ranks": 1 if comm is None else comm.Get_size(),
                     "seconds_per_step": float(np.mean(per)), "step_seconds": [float(t) for t in per],
                     "setup_seconds": float(times[0]), "total_seconds": total, "steps": len(per),
                     "medium": int(inv.medium.size), "data_seconds": t_data})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=["ring", "crosswell"], default="ring")
    ap.add_argument("--method", choices=sorted(METHODS), default="fwi")
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--regularization", type=float, default=None,
                    help="α of fwi's Tikhonov term (default: the rule max(10 noise², 1e-5))")
    ap.add_argument("--max-iter", type=int, default=50)
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--figure", default=None, help="write true / recovered / difference here (.png)")
    ap.add_argument("--scaling", action="store_true", help="time per LM step against the wavefield count")
    ap.add_argument("--wavefields", type=int, nargs="+", default=[4, 8, 16, 32])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--mpi", action="store_true", help="--scaling over MPI.COMM_WORLD (under mpiexec)")
    args = ap.parse_args(argv)
    if args.scaling:
        comm = None
        if args.mpi:
            from mpi4py import MPI
            comm = MPI.COMM_WORLD
        rows = scaling(args.wavefields, args.steps, comm)
        if comm is None or comm.Get_rank() == 0:
            for r in rows:
                print(f"W = {r['wavefields']:3d} on {r['ranks']} rank(s): {r['seconds_per_step']:.2f} s per step "
                      f"({', '.join(f'{t:.2f}' for t in r['step_seconds'])}; setup {r['setup_seconds']:.1f} s, "
                      f"{r['medium']} medium coefficients)", flush=True)
            if args.json:
                with open(args.json, "w") as fh:
                    json.dump(rows, fh, indent=1)
        return 0
    t0 = time.perf_counter()
    case = make_case(args.case, noise=args.noise, seed=args.seed)
    t_data = time.perf_counter() - t0
    out = METHODS[args.method](case, args)
    err = velocity_error(out["velocity"], case)
    row = {"case": args.case, "method": args.method, "noise": args.noise, "seconds": out["seconds"],
           "velocity_error": err, "data_seconds": t_data, "stopped": out.get("stopped"),
           "regularization": out.get("regularization"), "n_solves": out.get("n_solves"),
           "history": {k: v for k, v in out["history"].items()}}
    print(f"{args.case} {args.method} noise={args.noise:g}: velocity error {err:.4f} after "
          f"{out['seconds']:.1f} s (data {t_data:.1f} s; {out.get('stopped', '')})")
    if args.figure:
        plot_case(case, out["velocity"], args.figure,
                  f"{args.case}, {args.method}, noise {args.noise:g}: velocity error {err:.3f} "
                  f"after {out['seconds']:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(row, fh, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
