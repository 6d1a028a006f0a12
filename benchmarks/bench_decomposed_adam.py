"""Adam on the decomposition that hp.solve picks, for comparison with Gauss-Newton on it.

    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_decomposed_adam.py \
        --wavelengths 5 --lr 1e-3 3e-3 1e-2 --marks 60 120 300
    PYTHONPATH=python OMP_NUM_THREADS=1 python benchmarks/bench_decomposed_adam.py --optimizer gn
    PYTHONPATH=python python benchmarks/bench_decomposed_adam.py --problem free-source:wavelengths=5 --lr 3e-3

For each learning rate (or once, with ``--optimizer gn``, hp.solve's Gauss-Newton): a fresh
model of :func:`helmpinn.training.dd_driver.decomposed_settings` (the subdomains, subnetworks, points,
weights and hard constraint of ``hp.solve`` on ``box-source``, or on ``--problem``), trained
through ``Trainer.fit`` on its fixed points. At each mark (seconds from the fit's call, its
set-up included, these evaluations not; the first step that ends after it) one line: the steps
done, the loss, and the error on ``--eval-points`` uniform points of the physical domain
against the exact solution, for ``box-source`` with the resonant modes removed and raw
(:func:`helmpinn.waves.box_source_error`, as benchmarks/bench_decomposed.py); the run ends at
the last mark.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import helmpinn as hp
from helmpinn.training.dd_driver import build_decomposed_model, decomposed_settings
from helmpinn.training.drivers import make_driver

from bench_time_to_accuracy import field_error, parse_problem   # 'name:opt=value'; the error (modes removed)


def run(problem, settings, lr: float | None, a) -> list[dict]:
    """One run (Adam at learning rate ``lr``, or hp.solve's Gauss-Newton for None): a row per mark."""
    name = "gn" if lr is None else f"lr {lr:g}"
    s = settings
    model = build_decomposed_model(problem, s["decomposition"], s["ff_dim"], s["hidden"], s["layers"], seed=a.seed)
    # inside the physical domain (a PML's layer and a scatterer left out)
    xt = problem.domain.sample_interior(a.eval_points, np.random.default_rng(a.seed))
    ut = problem.exact_at(xt)
    marks, rows = sorted(a.marks), []
    clock = {"start": 0.0, "aside": 0.0}

    def at_marks(trainer, step):
        now = time.perf_counter()
        elapsed = now - clock["start"] - clock["aside"]
        while marks and elapsed >= marks[0]:
            e = field_error(problem, trainer.model.predict(xt), ut, xt)
            rows.append({"run": name, "mark": marks.pop(0), "seconds": elapsed, "steps": step,
                         "loss": trainer.history.loss[-1], **e})
            print(f"{name}: {rows[-1]['mark']:g} s (at {elapsed:.1f} s): {step} steps, loss "
                  f"{rows[-1]['loss']:.3e}, error {e['modes_removed']:.3e} modes removed, {e['raw']:.3e} raw",
                  flush=True)
        clock["aside"] += time.perf_counter() - now
        if not marks:
            trainer.request_stop("last mark reached")

    trainer = hp.Trainer(problem, model, lr=lr, schedule=a.schedule, betas=tuple(a.betas),
                         pde_points=s["pde_points"], bc_points=s["bc_points"], sampling=s["sampling"],
                         resample_every=a.resample_every, weights=s["weights"], eval_every=0, val_points=0,
                         progress=False, seed=a.seed, callbacks=[at_marks], n_test=8)
    clock["start"] = time.perf_counter()   # the set-up (the residuals' batches) counts
    trainer.fit(10 ** 9, optimizer="adam" if lr is not None else make_driver("gn", **s["gn"]))
    if trainer.diverged or (trainer.stop_reason or "").startswith("non-finite"):
        print(f"{name}: {trainer.stop_reason}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--wavelengths", type=float, default=5.0, help="box-source's (without --problem)")
    ap.add_argument("--problem", default=None,
                    help="another problem, 'name:opt=value' (free-source:wavelengths=5); default box-source")
    ap.add_argument("--optimizer", choices=["adam", "gn"], default="adam",
                    help="gn: hp.solve's Gauss-Newton on the same model and points, for comparison (--lr unused)")
    ap.add_argument("--lr", type=float, nargs="+", default=[1e-3, 3e-3, 1e-2])
    ap.add_argument("--schedule", default="constant", help="Adam's schedule (the FBPINN papers: constant)")
    ap.add_argument("--betas", type=float, nargs=2, default=[0.9, 0.99])
    ap.add_argument("--marks", type=float, nargs="+", default=[60.0, 120.0, 300.0],
                    help="seconds of training at which to measure; the run ends at the last")
    ap.add_argument("--resample-every", type=int, default=0,
                    help="steps between new points (0: hp.solve's fixed points)")
    ap.add_argument("--eval-points", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    problem, spec = parse_problem(a.problem or f"box-source:wavelengths={a.wavelengths:g}")
    s = decomposed_settings(problem)
    d = s["decomposition"]
    print(f"{spec}: grids {d['grids']}, overlap {d['overlap']}, hard constraint "
          f"{d['constraint']}, subnetworks ff {s['ff_dim']} hidden {s['hidden']}x{s['layers']}, "
          f"{s['pde_points']} PDE + {s['bc_points']} boundary points; "
          + (f"Adam {a.schedule}, betas {a.betas}" if a.optimizer == "adam" else f"Gauss-Newton {s['gn']}"), flush=True)
    table = [row for lr in (a.lr if a.optimizer == "adam" else [None]) for row in run(problem, s, lr, a)]
    print("\n| run | mark (s) | steps | loss | error, modes removed | error, raw |\n|---|---|---|---|---|---|")
    for r in table:
        print(f"| {r['run']} | {r['mark']:g} | {r['steps']} | {r['loss']:.3e} | {r['modes_removed']:.3e} "
              f"| {r['raw']:.3e} |")


if __name__ == "__main__":
    main()
