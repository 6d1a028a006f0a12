#!/usr/bin/env python
"""Media with a velocity jump: ``fd_solve``'s order at the jump and ``hp.solve`` against time.

    PYTHONPATH=python python benchmarks/bench_sharp.py --case square|disc [--fd-only]
        [--time-limit 300] [--hs 0.04,0.02,0.01,0.005] [--set KEY=VALUE] [--json out.json]
        [--cache DIR] [--bias auto,0.014,0.05] [--save model.npz] [--enrich GRID [--enrich-sigma S]]

Two problems posed as a user poses them: a PointSource, a PML, a callable velocity with a jump.

- ``square``: the physical domain [-1, 1]², f = 2 (4 wavelengths across at v = 1), a square
  inclusion of v = 0.5 ([-0.02, 0.42] × [-0.17, 0.27]) beside a PointSource at (-0.5, 0),
  PML 0.5 wide.
- ``disc``: [0, 1.5]², f = 2.5, a slow disc (v = 0.7, radius 0.25, centre (0.75, 0.75)) beside a
  PointSource at (0.3, 0.75), PML 0.4 wide.

First the reference: ``fd_solve`` (fourth order) at each spacing of ``--hs``, with κ sampled at
the nodes (``jumps="sample"``) and averaged over the nodes' stencil supports where they straddle
the jump (``jumps="average"``, the default), each compared on the problem's test grid with the
finest averaged solution: the observed orders at the jump, and each solve's time. Then
``hp.solve`` (its defaults, ``--set`` overrides) with a callback that records the relative L2
error on the test grid against the finest reference after every step (the clock starts at the
call, so it holds the planning and the jump search; the callback's own time is taken off it), and for each error reached the time ``fd_solve`` needs to the same error
(the first spacing of the ladder whose error is below it). Where the error sits: the last
model's error split into the points within one inside wavelength's tenth of the interface and
the rest, and after every step each region's share of the squared error (:func:`error_regions`:
the interface, the source, where the PML starts, the rest) with Gauss-Newton's CG iterations and
phase times. ``--bias``: :func:`smoothing_bias`, the floor that training on the smoothed medium
puts under the network's error. ``--enrich GRID``: the default plan's model with a level of
GRID × GRID subnetworks that can follow the jump of u″ (``jump_enrichment.py``; a measurement,
not a feature). Run on a quiet machine; the times are wall-clock.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.problems.jumps import training_problem
from helmpinn.reference import fd_solve
from helmpinn.training.plan import run_plan
from bench_time_to_accuracy import error_shares, parse_overrides
from jump_enrichment import enriched_model, enrichment


def square_case():
    lo, hi = np.array([-0.02, -0.17]), np.array([0.42, 0.27])

    def velocity(x):
        inside = np.all((x >= lo) & (x <= hi), axis=1)
        return np.where(inside, 0.5, 1.0)

    def distance(x):   # to the square's boundary (unsigned)
        c, r = (lo + hi) / 2, (hi - lo) / 2
        q = np.abs(x - c) - r
        outside = np.linalg.norm(np.maximum(q, 0), axis=1)
        return np.where(np.all(q <= 0, axis=1), -np.max(q, axis=1), outside)
    problem = hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), frequency=2.0, velocity=velocity,
                         source=hp.PointSource((-0.5, 0.0)), bcs={}, pml=hp.PML(0.5))
    return problem, distance, 0.5 / 2.0


def disc_case():
    c, r = np.array([0.75, 0.75]), 0.25

    def velocity(x):
        return np.where(np.linalg.norm(x - c, axis=1) <= r, 0.7, 1.0)

    def distance(x):
        return np.abs(np.linalg.norm(x - c, axis=1) - r)
    problem = hp.Problem(Box([0.0, 0.0], [1.5, 1.5]), frequency=2.5, velocity=velocity,
                         source=hp.PointSource((0.3, 0.75)), bcs={}, pml=hp.PML(0.4))
    return problem, distance, 0.7 / 2.5


CASES = {"square": square_case, "disc": disc_case}


def rel(u, ref):
    return float(np.linalg.norm(u - ref) / np.linalg.norm(ref))


def fd_ladder(problem, hs, x):
    """fd_solve at each spacing, κ sampled and averaged: values at x, times."""
    out = {}
    for mode in ("average", "sample"):
        for h in hs:
            if mode == "sample" and h == min(hs):
                continue
            t = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sol = fd_solve(problem, h, jumps=mode)
            out[(mode, h)] = (sol(x), time.perf_counter() - t)
            print(f"fd_solve h={h:g} jumps={mode}: {out[(mode, h)][1]:.1f} s", flush=True)
    return out


def smoothing_bias(problem, widths, h, x, ref, near):
    """For each half-width: fd_solve (κ as given: the smoothed medium has no jump left) of the
    problem hp.solve trains on (:func:`helmpinn.problems.jumps.training_problem`) at spacing h
    against ``ref``, overall and at the ``near`` points: the floor smoothing puts under the
    network's error."""
    out = []
    for w in widths:
        smooth, _ = training_problem(problem, w)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            u = fd_solve(smooth, h, jumps="sample")(x)
        row = {"width": w, "h": h, "error": rel(u, ref),
               "near": float(np.linalg.norm((u - ref)[near]) / np.linalg.norm(ref[near]))}
        print(f"  the medium smoothed at w = {w}: fd_solve h={h:g} lies {row['error']:.2e} from the reference "
              f"({row['near']:.2e} near the jump)", flush=True)
        out.append(row)
    return out


def error_regions(problem, x, near):
    """Masks over the test points ``x``: ``interface`` (``near``), ``source`` (within a quarter of
    the local wavelength of the PointSource), ``edge`` (within a quarter of that wavelength of the
    physical domain's boundary, where the PML starts) and ``rest``; a point in two regions counts
    in the first of them."""
    at = np.asarray(problem.point_sources[0].position, np.float64)
    lam = 2 * np.pi / float(np.asarray(problem.local_wavenumber(at[None, :])).reshape(-1)[0])   # at the source
    lo, hi = (np.asarray(b, np.float64) for b in problem.domain.bounds)
    source = np.linalg.norm(x - at, axis=1) < lam / 4
    edge = np.min(np.minimum(x - lo, hi - x), axis=1) < lam / 4
    out = {"interface": near, "source": source & ~near, "edge": edge & ~near & ~source}
    out["rest"] = ~(near | source | edge)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=sorted(CASES), default="square")
    ap.add_argument("--hs", default="0.04,0.02,0.01,0.005")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--fd-only", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--save", default=None, metavar="MODEL.npz", help="save the trained model (.npz; helmpinn.training.dd_driver.load_model reads it)")
    ap.add_argument("--cache", default=None, help="a folder to keep the fd_solve ladder in (reused when there)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--bias", default=None, metavar="W,W,...",
                    help="also the smoothed media's distances from the sharp one: fd_solve of the medium hp.solve "
                         "trains on at each smoothing half-width W ('auto': its default) at the ladder's second "
                         "finest spacing, against the reference")
    ap.add_argument("--enrich", type=int, default=None, metavar="GRID",
                    help="train the default plan's model with an enrichment level of GRID x GRID subnetworks "
                         "(jump_enrichment.py)")
    ap.add_argument("--enrich-sigma", type=float, default=0.1, metavar="S",
                    help="the enrichment's Gaussian (Δe = κ − G_S ∗ κ)")
    a = ap.parse_args()
    if a.enrich is not None and (a.enrich < 1 or a.save or not a.enrich_sigma > 0):
        ap.error("--enrich: expected a grid >= 1 and --enrich-sigma > 0, without --save (the model file "
                 "has no place for the enrichment: loaded, its level would be a plain one)")
    if a.threads:
        hp.set_num_threads(a.threads)
    problem, distance, lam_in = CASES[a.case]()
    x = problem.test_points()
    hs = sorted((float(v) for v in a.hs.split(",")), reverse=True)
    cache = None
    if a.cache:   # made here: a missing folder would fail only after the ladder's minutes
        os.makedirs(a.cache, exist_ok=True)
        cache = os.path.join(a.cache, f"sharp_{a.case}_{'_'.join(f'{h:g}' for h in hs)}.npz")
    try:
        z = np.load(cache)
        fd = {(str(m), float(h)): (z[f"u_{m}_{h:g}"], float(z[f"t_{m}_{h:g}"]))
              for m, h in zip(z["modes"], z["hs"])}
        print(f"the fd_solve ladder from {cache}")
    except (TypeError, OSError, KeyError):
        fd = fd_ladder(problem, hs, x)
        if cache:
            np.savez(cache, modes=[m for m, _ in fd], hs=[h for _, h in fd],
                     **{f"u_{m}_{h:g}": v[0] for (m, h), v in fd.items()},
                     **{f"t_{m}_{h:g}": v[1] for (m, h), v in fd.items()})
    ref = fd[("average", hs[-1])][0]
    ladder = []
    print(f"{a.case}: errors against fd_solve h={hs[-1]:g} (averaged) on {len(x)} test points")
    for mode in ("average", "sample"):
        prev = None
        for h in hs[:-1]:
            e = rel(fd[(mode, h)][0], ref)
            order = None if prev is None else float(np.log2(prev / e))
            ladder.append({"jumps": mode, "h": h, "error": e, "seconds": fd[(mode, h)][1], "order": order})
            print(f"  jumps={mode:7s} h={h:<6g} error {e:.3e}  order {'' if order is None else f'{order:.2f}'}"
                  f"  {fd[(mode, h)][1]:.1f} s", flush=True)
            prev = e
    result = {"case": a.case, "fd": ladder, "finest_h": hs[-1]}
    if a.bias:
        result["bias"] = smoothing_bias(problem, [w if w == "auto" else float(w) for w in a.bias.split(",")],
                                        hs[-2] if len(hs) > 1 else hs[-1], x, ref, distance(x) < lam_in / 10)
    if not a.fd_only:
        near = distance(x) < lam_in / 10
        regions = error_regions(problem, x, near)
        rows, spent, t0 = [], [0.0], [None]

        def record(trainer, step):
            t = time.perf_counter()
            u = trainer.model.predict(x)
            err = rel(u, ref)
            errn = float(np.linalg.norm((u - ref)[near]) / np.linalg.norm(ref[near]))
            errf = float(np.linalg.norm((u - ref)[~near]) / np.linalg.norm(ref[~near]))
            loss, lam, gap = trainer.history.loss[-1], trainer.history.lr[-1], trainer.last_gap
            log = getattr(trainer.driver, "log", None) or [{}]   # Gauss-Newton's: CG iterations, phase times
            rows.append({"step": step, "seconds": t - t0[0] - spent[0], "error": err, "near": errn, "far": errf,
                         "points": trainer.pde_points, "loss": loss, "lam": lam, "gap": gap,
                         "shares": error_shares(u - ref, regions), "cg": log[-1].get("cg"),
                         "trials": log[-1].get("trials"), "alpha": log[-1].get("alpha"), "rho": log[-1].get("rho"),
                         "times": log[-1].get("times")})
            print(f"step {step:4d} {rows[-1]['seconds']:7.1f} s error {err:.3e} (near the jump {errn:.3e}, "
                  f"away {errf:.3e}) points {trainer.pde_points} loss {loss:.3e} λ {lam:.1e} gap "
                  f"{'-' if gap is None else f'{gap:.2f}'} | shares of the squared error: "
                  + ", ".join(f"{k} {v:.2f}" for k, v in rows[-1]["shares"].items())
                  + (f" | trials {rows[-1]['trials']} step {rows[-1]['alpha']:g} ρ {rows[-1]['rho']:.2f}"
                     if rows[-1]["trials"] is not None else "")
                  + (f" | cg {rows[-1]['cg']} (" + " ".join(f"{k} {v:.1f}" for k, v in rows[-1]["times"].items()) + " s)"
                     if rows[-1]["times"] else ""), flush=True)
            spent[0] += time.perf_counter() - t
        overrides = parse_overrides(a.set, reserved=("seed", "time_limit", "callbacks", "progress"))
        t0[0] = time.perf_counter()    # the clock includes hp.solve's planning and the jump search
        if a.enrich:   # the model hp.solve would build, enriched (its making on the clock too)
            trained, _ = training_problem(problem)
            base = run_plan(trained, "decomposed", "gn", where="bench_sharp", seed=a.seed, **overrides).build_model(trained)
            overrides["model"] = enriched_model(base, enrichment(trained.kappa_at, base.lo, base.hi, a.enrich_sigma),
                                                (a.enrich, a.enrich), float(trained.wavenumber))
            print(overrides["model"])
        sol = hp.solve(problem, time_limit=a.time_limit, callbacks=[record], seed=a.seed, progress=False, **overrides)
        print(f"hp.solve: {sol.settings.get('model')} / {sol.settings.get('optimizer')}, {len(rows)} steps, "
              f"stop: {sol.stop_reason}")
        for target in (1e-1, 3e-2, 1e-2, 3e-3):
            hit = next((r for r in rows if r["error"] < target), None)
            fdh = next((r for r in ladder if r["jumps"] == "average" and r["error"] < target), None)
            ours = "never" if hit is None else f"{hit['seconds']:.0f} s"
            theirs = "not on the ladder" if fdh is None else f"h={fdh['h']:g} in {fdh['seconds']:.1f} s"
            print(f"  below {target:.0e}: hp.solve {ours}; fd_solve {theirs}")
        result.update(steps=rows, overrides=overrides, stop_reason=sol.stop_reason, settings_model=sol.settings.get("model"))
        if a.save:
            sol.save(a.save)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(result, fh, indent=1)


if __name__ == "__main__":
    main()
