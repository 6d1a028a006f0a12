#!/usr/bin/env python
"""What each Levenberg-Marquardt step of :func:`helmpinn.invert` does to the medium, on a part of
a ``bench_inversion.py`` case: per step the medium's change ``δm`` against the change still to
make (``‖δm‖ / ‖m_true − m_start‖``), its correlation with ``m_true − m_start`` and with
classical FWI's steepest-descent direction at the start (the adjoint-state gradient of
:class:`helmpinn.reference.fwi.FWIObjective` on the inversion's own spline grid, no
regularisation), the predicted decrease of the step's medium part against its networks' part,
and the loss terms, data misfit and velocity error after it.

    python benchmarks/inversion_diagnose.py [--case marmousi --data DIR --survey survey.npz
        --free-surface --start smooth] [--sources 4] [--freqs 3] [--steps 8]
        [--medium-damping 1] [--kw '{"network": [16, 24, 2]}']

``--sources n``: n of the 16 sources, evenly spread; ``--freqs``: the frequencies (values);
``--medium-damping s``: the medium's Marquardt diagonal times s (0: the medium undamped);
``--kw``: more :func:`helmpinn.invert` keywords (JSON). The numbers come from
:class:`~helmpinn.inversion.solver.ArrowheadLM`'s private solve, wrapped on purpose: the script
measures the method as implemented. Correlations are over the error region of the case.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import helmpinn as hp
from helmpinn.inversion import solver
from helmpinn.reference.fwi import FWIObjective

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_inversion as bi  # noqa: E402


def _arguments(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", choices=["ring", "crosswell", "marmousi"], default="marmousi")
    ap.add_argument("--data", default=None)
    ap.add_argument("--survey", default=None)
    ap.add_argument("--start", choices=bi.MARMOUSI_STARTS, default="smooth")
    ap.add_argument("--free-surface", action="store_true")
    ap.add_argument("--sources", type=int, default=4)
    ap.add_argument("--freqs", default="3")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--medium-damping", type=float, default=1.0)
    ap.add_argument("--kw", default="{}")
    return ap.parse_args(argv)


def _instrument(medium_damping: float) -> list[dict]:
    """Wrap ArrowheadLM's solve, damping and step; the list that collects one entry a step."""
    steps: list[dict] = []
    trials: list[dict] = []
    solve, damping, step = solver.ArrowheadLM._solve, solver.ArrowheadLM._damping, solver.ArrowheadLM.step

    def solve_(self, lam, blocks, C, gm, D, Dm):
        out = solve(self, lam, blocks, C, gm, D, Dm)
        trials.append({"lam": lam, "pred_m": out[2], "pred_w": out[3]})
        return out

    def damping_(self, blocks, C):
        D, Dm = damping(self, blocks, C)
        return D, Dm * medium_damping

    def step_(self, thetas, c):
        n = len(trials)
        record, new_c = step(self, thetas, c)
        steps.append({"c0": c.copy(), "c1": new_c.copy(), "trial": trials[-1], "trials": len(trials) - n,
                      "accepted": record.accepted, "medium": self.joint.medium,
                      "terms": self.joint.terms(thetas, new_c)})
        return record, new_c

    solver.ArrowheadLM._solve, solver.ArrowheadLM._damping, solver.ArrowheadLM.step = solve_, damping_, step_
    return steps


def _corr(a, b) -> float:
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-300))


def main(argv=None) -> int:
    a = _arguments(argv)
    case = bi.make_case(a.case, data=a.data, start=a.start, survey_file=a.survey, free_surface=a.free_surface)
    sv = case["survey"]
    fi = [int(np.flatnonzero(np.isclose(sv.frequencies, float(f)))[0]) for f in a.freqs.split(",")]
    si = np.unique(np.linspace(0, len(sv.sources) - 1, a.sources).round().astype(int))
    weights = np.ones(sv.data.shape) if sv.weights is None else np.asarray(sv.weights)
    sub = hp.Survey([sv.sources[i] for i in si], sv.receivers, sv.frequencies[fi], sv.data[np.ix_(fi, si)],
                    weights[np.ix_(fi, si)])
    steps = _instrument(a.medium_damping)
    history: list[dict] = []
    t0 = time.perf_counter()
    hp.invert(sub, case["initial"], domain=case["domain"], pml=case["pml"], bounds=case["bounds"],
              true=case["true"], region=case["region"] if a.case == "marmousi" else None, time_limit=1e9,
              max_steps=a.steps, tol=0.0, callback=history.append, **json.loads(a.kw))
    print(f"{len(steps)} steps in {time.perf_counter() - t0:.0f} s (load {os.getloadavg()[0]:.1f})")
    medium = steps[0]["medium"]
    x = bi.error_grid(case)[0]
    x = x[case["region"](x)]
    B = medium.basis(x)
    m0 = B @ steps[0]["c0"]
    todo = 1.0 / np.asarray(case["true"](x)) ** 2 - m0
    m_nodes = medium.node_values(steps[0]["c0"])
    fwi = FWIObjective(sub, list(sub.frequencies), domain=case["domain"], pml=case["pml"],
                       medium_axes=medium.nodes, m_initial=m_nodes,
                       h=case["bounds"][0] / float(np.max(sub.frequencies)) / 10, regularization=0.0, m_scale=1.0)
    g = fwi(m_nodes.ravel())[1]
    descent = hp.GridField(-g.reshape(medium.shape), medium.lo, medium.spacing, outside="nearest")(x)
    print(f"classical FWI's steepest descent at the start: correlation with m_true - m_start {_corr(descent, todo):+.3f}")
    for k, s in enumerate(steps):
        dm = B @ (s["c1"] - s["c0"])
        h, t = history[k + 1], s["trial"]
        print(f"step {k + 1}: accepted {int(s['accepted'])} trials {s['trials']} lam {t['lam']:.1e} "
              f"|dm|/|todo| {np.linalg.norm(dm) / np.linalg.norm(todo):.3f} corr(dm, todo) {_corr(dm, todo):+.3f} "
              f"corr(dm, fwi) {_corr(dm, descent):+.3f} predicted: medium {t['pred_m']:.1e} networks "
              f"{t['pred_w']:.1e}; pde {s['terms']['pde']:.2e} data {s['terms']['data']:.2e} "
              f"misfit {h['data_misfit']:.3f} error {h['velocity_error']:.4f}", flush=True)
    m_lo, m_hi = 1.0 / case["bounds"][1] ** 2, 1.0 / case["bounds"][0] ** 2
    c = steps[-1]["c1"]
    at = int(np.sum((c <= m_lo * (1 + 1e-12)) | (c >= m_hi * (1 - 1e-12))))
    print(f"coefficients at a bound after the last step: {at} of {len(c)}")
    total = B @ c - m0
    print(f"all steps: |m - m_start|/|todo| {np.linalg.norm(total) / np.linalg.norm(todo):.3f} "
          f"corr {_corr(total, todo):+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
