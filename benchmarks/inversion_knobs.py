#!/usr/bin/env python
"""A case of ``bench_inversion.py`` (the ring by default) with ``hp.invert``'s method taken apart: a fixed number
of Levenberg-Marquardt steps a stage and every knob on the command line, the velocity error
printed after every step, so that ideas compare by error at equal steps (times on a shared
machine say little).

    python benchmarks/inversion_knobs.py [--sources 4] [--freqs 0,1,2] [--steps 20]
        [--lambda-data 1] [--reg 1e-5] [--reg-decay 0.1] [--network 12,16,2] [--per-wavelength 4] [--lam 1]
        [--exact] [--fit-steps 30] [--varpro] [--extrapolate 2] [--noise 0.01]
        [--case ring|crosswell|marmousi [--data DIR --survey survey.npz --start smooth --free-surface]]
        [--pde-weight 1,100] [--rebackground 10] [--field-error]

``--reg``: the first stage's regularisation weight β, every later stage's ``--reg-decay`` times
the previous one's (as :func:`helmpinn.invert`'s ``regularization`` and ``regularization_decay``).
``--sources n``: every (16/n)-th source of the 16 (4: the "quarter survey"); ``--freqs``: the
stages, as indices into the frequencies (2, 3, 4), repeats allowed (a repeated frequency starts
a new stage: a forward solve in the current medium and fresh networks); ``--steps``: one count,
or one a stage. ``--exact``: before each stage's steps, fit every network (``--fit-steps`` LM
steps) to the scattered field of the *true* medium (the finite-difference field in the true
medium minus the stage's background) and set the medium to the least-squares one for those
networks: how low the joint loss's minimiser lets the error go when the wavefields start right.
``--extrapolate a``: after each accepted step, try the medium steps a, a², ... times as long
(the networks as accepted) while the loss falls. ``--case``: the case (the Marmousi crop's
options as ``bench_inversion.py``'s; its sources are 16 too, its frequencies 3, 4, 5 Hz); with
``--exact`` the loss terms at the true medium (the fitted networks) are printed beside those
after the projection.
``--pde-weight a,b``: the PDE rows weighted
a at a stage's first step to b at its last, geometrically (penalty continuation, as wavefield
reconstruction raises its PDE weight; one value: fixed). ``--rebackground k``: every k steps of
a stage (or one k a stage, 0 for none), a new background (the forward solve in the current medium) with each network refitted
(``--fit-steps`` LM steps from its parameters) to hold the same total field over it.
``--field-error``: after each stage, how far the networks' total fields are from the
finite-difference fields in the stage's final medium and in the true one, and how far those
two are apart.

The stage loop is :func:`helmpinn.invert`'s (``_Run.wavefields``, :class:`JointResiduals`,
:class:`ArrowheadLM`), taken from the library's private helpers on purpose: the script measures
the method as implemented.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

import helmpinn as hp
from helmpinn.inversion.api import _fit, _forward, _problem, _Run, _velocity
from helmpinn.inversion.joint import JointResiduals
from helmpinn.inversion.medium import SplineMedium
from helmpinn.inversion.parallel import Ranks
from helmpinn.inversion.solver import ArrowheadLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_inversion as bi  # noqa: E402


def _arguments(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sources", type=int, default=16, choices=[1, 2, 4, 8, 16])
    ap.add_argument("--freqs", default="0,1,2")
    ap.add_argument("--steps", default="10")
    ap.add_argument("--lambda-data", type=float, default=1.0)
    ap.add_argument("--reg", type=float, default=1e-5)
    ap.add_argument("--reg-decay", type=float, default=0.1)
    ap.add_argument("--network", default="12,16,2")
    ap.add_argument("--per-wavelength", type=float, default=4.0)
    ap.add_argument("--lam", type=float, default=1.0)
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--fit-steps", type=int, default=30)
    ap.add_argument("--varpro", action="store_true")
    ap.add_argument("--extrapolate", type=float, default=0.0)
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--case", choices=["ring", "crosswell", "marmousi"], default="ring")
    ap.add_argument("--data", default=None, help="marmousi: as bench_inversion.py's --data")
    ap.add_argument("--survey", default=None, help="marmousi: as bench_inversion.py's --survey")
    ap.add_argument("--start", choices=bi.MARMOUSI_STARTS, default="smooth")
    ap.add_argument("--free-surface", action="store_true")
    ap.add_argument("--pde-weight", default="1",
                    help="the PDE rows' weight over a stage's steps: one value, or 'a,b' going "
                         "geometrically from a at the first step to b at the last (penalty continuation)")
    ap.add_argument("--rebackground", default="0",
                    help="every this many steps of a stage (one count, or one a stage; 0: never), a new forward solve in the current medium "
                         "as the background, each network refitted (--fit-steps LM steps, from its "
                         "parameters) to hold the same total field over it")
    ap.add_argument("--field-error", action="store_true",
                    help="after each stage, the networks' total fields against the finite-difference "
                         "fields in the stage's final medium and in the true one")
    return ap.parse_args(argv)


def _exact_start(run, rows, thetas, joint, lm, medium, c_true, fi, network, fit_steps, c):
    """Networks fitted to the true medium's scattered fields; the medium projected for them."""
    f = float(run.freqs[fi])
    probs = [_problem(run.domain, run.pml, f, medium, c_true, s, None, 0.0, 0.25) for s in run.survey.sources]
    fields = _forward(probs, run.o["v_min"] / f / 12)
    for w, theta, u in zip(rows, thetas, fields):
        model = hp.Model.create(2, *network, dtype="float64", seed=0, problem=w.problem)
        model.params[:] = theta
        _fit(model, w.x_pde, u(w.x_pde) - w.u0, fit_steps)
        theta[:] = model.params
    print("  the fitted networks at the true medium: " + "  ".join(
        f"{k} {v:.3e}" for k, v in joint.terms(thetas, np.clip(c_true, *lm.bounds)).items()), flush=True)
    loss = joint.loss(thetas, c)
    return lm.project_medium(thetas, c, loss)[0]


def _rebackground(run, rows, thetas, joint, medium, c, fi, network, fit_steps):
    """New rows on the forward solution in the medium c (the same PDE points: each wavefield's
    generator is seeded by (seed, f, s)), each network refitted from its parameters to
    ``u_s + u0_old − u0_new`` at its PDE points, so the total field stays what it was."""
    new_rows, new_thetas = run.wavefields(fi, medium, c, None)
    for w_old, th_old, w, th in zip(rows, thetas, new_rows, new_thetas):
        if not np.array_equal(w_old.x_pde, w.x_pde):
            raise RuntimeError("rebackground: the stage's PDE points changed")
        net = joint.workspace.forward(th_old, np.ascontiguousarray(w.x_pde), 0)
        target = net[:, 0] + 1j * net[:, 1] + w_old.u0 - w.u0
        model = hp.Model.create(2, *network, dtype="float64", seed=0, problem=w.problem)
        model.params[:] = th_old
        _fit(model, w.x_pde, target, fit_steps)
        th[:] = model.params
    return new_rows, new_thetas


def _set_pde_weight(rows, weight):
    """Scale every wavefield's PDE rows to ``weight`` times their default (penalty continuation)."""
    for w in rows:
        base = w.__dict__.setdefault("_knobs_base_rowscale", w.rowscale.copy())
        w.rowscale = base.copy()
        w.rowscale[w.slices()["pde"]] *= math.sqrt(weight)


def _field_error(run, rows, thetas, joint, medium, c, c_true, fi):
    """``(current, true, signal)``: relative L2 differences over every wavefield's PDE points
    inside the box: the networks' total fields ``u_s + u0`` against the finite-difference fields
    in the medium c (what the PDE rows ask for) and in the true medium (what the data ask for),
    and those two finite-difference fields against each other (how far the medium c is from the
    truth, in fields)."""
    f = float(run.freqs[fi])
    inside = [np.all((w.x_pde >= run.domain.lo) & (w.x_pde <= run.domain.hi), axis=1) for w in rows]
    nets, refs = [], []
    for w, theta, keep in zip(rows, thetas, inside):
        net = joint.workspace.forward(theta, np.ascontiguousarray(w.x_pde), 0)
        nets.append((net[:, 0] + 1j * net[:, 1] + w.u0)[keep])
    for coefficients in (c, c_true):
        probs = [_problem(run.domain, run.pml, f, medium, coefficients, s, None, 0.0, 0.25)
                 for s in run.survey.sources]
        widths = [s.width for s in run.survey.sources if getattr(s, "width", None)]
        fields = _forward(probs, min([run.o["v_min"] / f / 12] + [w / 2 for w in widths]))
        refs.append(np.concatenate([u(w.x_pde)[keep] for w, u, keep in zip(rows, fields, inside)]))
    total = np.concatenate(nets)

    def rel(a, b):
        return float(np.linalg.norm(a - b) / np.linalg.norm(b))
    return rel(total, refs[0]), rel(total, refs[1]), rel(refs[0], refs[1])


def _extrapolate(lm, joint, thetas, c_old, c, loss, factor):
    best, best_loss, alpha = c, loss, 1.0
    while alpha < 20:
        alpha *= factor
        trial = lm.project(c_old + alpha * (c - c_old))
        trial_loss = joint.loss(thetas, trial)
        if not trial_loss < best_loss:
            break
        best, best_loss = trial, trial_loss
    return best


def main(argv=None) -> int:
    a = _arguments(argv)
    case = bi.make_case(a.case, noise=a.noise, data=a.data, start=a.start, survey_file=a.survey,
                        free_surface=a.free_surface)
    sv = case["survey"]
    keep = list(range(0, 16, 16 // a.sources))
    weights = np.ones(sv.data.shape) if sv.weights is None else np.asarray(sv.weights)
    survey = hp.Survey([sv.sources[i] for i in keep], sv.receivers, sv.frequencies, sv.data[:, keep],
                       weights[:, keep])
    domain, pml = case["domain"], case["pml"]
    lo_v, hi_v = case["bounds"]
    m_bounds = (1 / hi_v ** 2, 1 / lo_v ** 2)
    network = tuple(int(t) for t in a.network.split(","))
    options = dict(lambda_data=a.lambda_data, pde_points=None, boundary_points=None, network=network,
                   seed=0, pml_share=0.25, warm_start="fd", v_min=lo_v, true=case["true"])
    medium = SplineMedium.for_wavelength(domain.lo, domain.hi, lo_v / float(np.max(sv.frequencies)),
                                         a.per_wavelength)
    initial = _velocity("initial", case["initial"])   # a number or a callable, as hp.invert takes it
    c = np.clip(medium.fit(lambda x: 1.0 / np.asarray(initial(x), np.float64) ** 2), *m_bounds)
    c_true = medium.fit(lambda x: 1.0 / case["true"](x) ** 2)
    reg = math.sqrt(a.reg) * medium.gradient_rows(float(np.mean(c))) if a.reg > 0 else None
    run = _Run(survey, domain, pml, options, Ranks())

    def error(coefficients):
        return bi.velocity_error(medium.gridfield(coefficients, velocity=True), case)
    print(f"medium {medium.shape}; the spline of the true medium: error {error(c_true):.4f}", flush=True)
    freqs = [int(t) for t in a.freqs.split(",")]
    steps = [int(t) for t in a.steps.split(",")]
    steps = steps * len(freqs) if len(steps) == 1 else steps
    t0 = time.perf_counter()
    for stage, (fi, n_steps) in enumerate(zip(freqs, steps)):
        rows, thetas = run.wavefields(fi, medium, c, None)
        stage_reg = None if reg is None else reg * math.sqrt(a.reg_decay) ** stage
        joint = JointResiduals(rows, run.spec, medium, stage_reg)
        lm = ArrowheadLM(joint, bounds=m_bounds, varpro=a.varpro, lam=a.lam)
        if a.exact:
            c = _exact_start(run, rows, thetas, joint, lm, medium, c_true, fi, network, a.fit_steps, c)
        terms = joint.terms(thetas, c)
        print(f"stage {stage} f={run.freqs[fi]:g}: error {error(c):.4f}  "
              + "  ".join(f"{k} {v:.3e}" for k, v in terms.items()), flush=True)
        weights = [float(t) for t in a.pde_weight.split(",")]
        every = [int(t) for t in a.rebackground.split(",")]
        every = every[stage] if len(every) > 1 else every[0]
        for k in range(n_steps):
            if every and k and k % every == 0:
                before = joint.terms(thetas, c)["total"]
                rows, thetas = _rebackground(run, rows, thetas, joint, medium, c, fi, network, a.fit_steps)
                lam_kept = lm.lam
                joint = JointResiduals(rows, run.spec, medium, stage_reg)
                lm = ArrowheadLM(joint, bounds=m_bounds, varpro=a.varpro, lam=lam_kept)
                print(f"  rebackground: loss {before:.3e} -> {joint.terms(thetas, c)['total']:.3e}", flush=True)
            c_old = c
            if len(weights) == 2 or weights[0] != 1.0:
                t = k / max(n_steps - 1, 1)
                _set_pde_weight(rows, weights[0] * (weights[-1] / weights[0]) ** t)
            info, c = lm.step(thetas, c)
            if a.extrapolate and info.accepted:
                c = _extrapolate(lm, joint, thetas, c_old, c, info.loss, a.extrapolate)
            terms = joint.terms(thetas, c)
            print(f"  {k + 1:3d} accepted {int(info.accepted)} lam {info.lam:.1e} rho {info.rho:.2f} "
                  f"error {error(c):.4f} pde {terms['pde']:.2e} data {terms['data']:.2e} "
                  f"reg {terms['reg']:.2e} t {time.perf_counter() - t0:.0f} s", flush=True)
        if a.field_error:
            e_now, e_true, signal = _field_error(run, rows, thetas, joint, medium, c, c_true, fi)
            print(f"stage {stage} fields: the networks' against the FD field in the current medium "
                  f"{e_now:.4f}, in the true medium {e_true:.4f}; the two FD fields differ by "
                  f"{signal:.4f}", flush=True)
    print(f"final velocity error {error(c):.4f} after {time.perf_counter() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
