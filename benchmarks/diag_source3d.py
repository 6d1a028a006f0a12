#!/usr/bin/env python
"""Where the loss and the error of ``hp.solve`` on ``free-source-3d`` sit: a diagnostic of the 3-D
open source (issue #63), not a timing.

    PYTHONPATH=python python benchmarks/diag_source3d.py [--wavelengths 2] [--pml-width 0.5]
        [--time-limit 150] [--source-share S] [--s S] [--hidden H] [--ppw P] [--threads 2]

Before training it prints the checks that need no run: the quadrature of the source over the
run's own PDE points (``V mean(w f)`` against the Gaussian's integral, the amplitude, and
``V mean(w |f|²)`` against ``(4π s²)^{-3/2}``), how many of the points lie within three widths of
the source, and the loss of the zero field (``u = 0``: the PDE rows are then the source alone,
weighted ``1/k²``), the whole signal that the loss holds about the field. After ``hp.solve`` under
``--time-limit``: each step's loss, λ and CG iterations, the error by distance from the source and
from the layer, the best complex factor c (``c u`` closest to the exact field) and the error after
it, and the loss on fresh points split into the source's ball (r < 3 s), the rest of the physical
cube and the layer, each beside what the zero field leaves there.

Errors and losses do not depend on the machine's load; the step times printed do.
"""
from __future__ import annotations

import argparse
import math
import os

import numpy as np


def zero_field_loss(problem, ts) -> float:
    """The PDE term's loss at ``u = 0`` on the training set ``ts``: ``mean(w |f|²) / k²``."""
    w = np.ones(len(ts.x_pde)) if ts.pde_weight is None else np.asarray(ts.pde_weight)
    return float(np.mean(w * np.abs(problem.source(ts.x_pde)) ** 2) / problem.wavenumber ** 2)


def before(problem, settings) -> None:
    ts = problem.sample(settings["pde_points"], settings["bc_points"], np.random.default_rng(0), "sobol")
    s = problem.point_sources[0].width
    w = np.ones(len(ts.x_pde)) if ts.pde_weight is None else np.asarray(ts.pde_weight)
    f = problem.source(ts.x_pde)
    V = problem.sampling_domain.volume
    r = np.linalg.norm(ts.x_pde, axis=1)
    print(f"grids {settings['decomposition']['grids']}, {len(ts.x_pde)} PDE points, s = {s:.4g}, "
          f"sampled volume {V:.4g} (physical 8)")
    print(f"  points within 3 s of the source: {int(np.sum(r < 3 * s))}")
    print(f"  V mean(w f) = {complex(V * np.mean(w * f)):.6g} (exact -1); V mean(w |f|^2) = "
          f"{V * np.mean(w * np.abs(f) ** 2):.5g} (exact {(4 * math.pi * s * s) ** -1.5:.5g})")
    print(f"  the zero field's loss (PDE weight 1/k^2): {zero_field_loss(problem, ts):.4g}")


def after(problem, sol) -> None:
    from helmpinn.models.decomposition import Rows

    x = np.random.default_rng(1).uniform(-1.0, 1.0, (20000, 3))
    u, ue = sol.predict(x), problem.exact(x)
    err = np.linalg.norm(u - ue) / np.linalg.norm(ue)
    c = np.vdot(u, ue) / np.vdot(u, u)
    print(f"error {err:.4g}; best factor c = {complex(c):.4g}, error after it "
          f"{np.linalg.norm(c * u - ue) / np.linalg.norm(ue):.4g}")
    r = np.linalg.norm(x, axis=1)
    for a, b in [(0, 0.1), (0.1, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0), (1.0, 1.8)]:
        m = (r >= a) & (r < b)
        if m.any():
            print(f"  r in [{a}, {b}): error {np.linalg.norm(u[m] - ue[m]) / np.linalg.norm(ue[m]):.3g}, "
                  f"|u|/|exact| {np.linalg.norm(u[m]) / np.linalg.norm(ue[m]):.3g}, share of the error² "
                  f"{np.sum(np.abs(u[m] - ue[m]) ** 2) / np.sum(np.abs(u - ue) ** 2):.3f}")
    wall = 1.0 - np.max(np.abs(x), axis=1)
    for a, b in [(0, 0.1), (0.1, 0.3), (0.3, 1.0)]:
        m = (wall >= a) & (wall < b)
        print(f"  distance to the layer in [{a}, {b}): error "
              f"{np.linalg.norm(u[m] - ue[m]) / np.linalg.norm(ue[m]):.3g}")
    ts = problem.sample(20000, 0, np.random.default_rng(7), "uniform")
    rows = Rows.from_training_set(ts, {"pde": 1.0 / problem.wavenumber ** 2}, drop=("data", "bc"))
    res = sol.model.residuals_for(rows).residuals(sol.model.params)
    n = len(ts.x_pde)
    part = res[0:2 * n:2] ** 2 + res[1:2 * n:2] ** 2            # each point's share of the PDE loss
    w = np.ones(n) if ts.pde_weight is None else np.asarray(ts.pde_weight)
    zero = w * np.abs(problem.source(ts.x_pde)) ** 2 / problem.wavenumber ** 2 / n
    rad = np.linalg.norm(ts.x_pde, axis=1)
    layer = problem.sampler.in_layer(ts.x_pde)
    s = problem.point_sources[0].width
    print(f"PDE loss on fresh points {part.sum():.4g} (the zero field's {zero.sum():.4g}):")
    for name, m in [("the source's ball r < 3 s", rad < 3 * s), ("the rest of the physical cube", ~layer & (rad >= 3 * s)),
                    ("the layer", layer)]:
        print(f"  {name}: {part[m].sum():.4g} ({part[m].sum() / part.sum():.1%}); the zero field's {zero[m].sum():.3g}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wavelengths", type=float, default=2.0)
    ap.add_argument("--pml-width", type=float, default=None, help="the layer's width (default: the problem's)")
    ap.add_argument("--time-limit", type=float, default=150.0)
    ap.add_argument("--source-share", type=float, default=None, help="PDE points drawn at the source (default 0.25)")
    ap.add_argument("--s", type=float, default=None, help="the source's width (default λ/10)")
    ap.add_argument("--hidden", type=int, default=None, help="the subnetworks' hidden width (default the rule's)")
    ap.add_argument("--ppw", type=float, default=None, help="PDE points per wavelength per axis (default the rule's)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    import helmpinn as hp
    from helmpinn.problems.problem import Problem
    from helmpinn.training.dd_driver import decomposed_settings

    options = {"wavelengths": a.wavelengths}
    if a.pml_width is not None:
        options["pml_width"] = a.pml_width
    if a.s is not None:
        options["s"] = a.s
    problem = hp.get_problem("free-source-3d", **options)
    if a.source_share is not None:
        src = problem.point_sources[0]
        problem = Problem(problem.domain, kappa=problem.wavenumber ** 2, source=src, bcs={}, exact=problem.exact,
                          wavenumber=problem.wavenumber, pml=problem.pml, source_share=a.source_share)
    rules = {"hidden": a.hidden, "points_per_wavelength": a.ppw}
    rules = {key: value for key, value in rules.items() if value is not None}
    overrides = {"decomposition": rules} if rules else {}
    before(problem, decomposed_settings(problem, **overrides.get("decomposition", {})))

    def step(trainer, k):
        e = trainer.driver.log[-1]
        print(f"step {k}: loss {e['loss']:.4g}, lam {e['lam']:.1e}, cg {e['cg']}, trials {e['trials']}, "
              f"step length {e['alpha']:g}", flush=True)

    sol = hp.solve(problem, time_limit=a.time_limit, progress=False, callbacks=[step], **overrides)
    h = sol.history
    print("eval: " + ", ".join(f"{e:.3g} at {t:.0f} s (validation loss {v:.3g})"
                               for t, e, v in zip(h.eval_time, h.eval_error, h.eval_val_loss) if e is not None))
    after(problem, sol)


if __name__ == "__main__":
    main()
