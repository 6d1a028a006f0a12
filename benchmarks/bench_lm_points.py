"""Levenberg-Marquardt's error per iteration with ``hp.solve``'s defaults on a built-in problem
(the sound-hard cylinder with a PML by default): the relative L2 error, the training and the
validation loss and the number of points at every iteration, so that runs on a loaded machine
compare by iterations.

    PYTHONPATH=python python benchmarks/bench_lm_points.py --time-limit 300 --json out.json
    PYTHONPATH=python python benchmarks/bench_lm_points.py --problem scatter-soft --threads 2

Options: ``--problem`` (a built-in's name; default scatter-hard), ``--time-limit`` (seconds),
``--iterations``, ``--threads``, ``--json FILE`` (the per-iteration table), ``--set KEY=VALUE``
(an ``hp.solve`` override, a Python literal; repeatable).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import helmpinn as hp
from bench_time_to_accuracy import parse_overrides   # --set KEY=VALUE


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problem", default="scatter-hard")
    ap.add_argument("--time-limit", type=float, default=300.0)
    ap.add_argument("--iterations", type=int, default=None)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    if args.threads is not None:
        hp.set_num_threads(args.threads)
    problem = hp.get_problem(args.problem)
    overrides = {"eval_every": 1}
    if args.iterations is not None:
        overrides["steps"] = args.iterations
    try:
        overrides.update(parse_overrides(args.set, reserved=("time_limit", "progress", "callbacks")))
    except ValueError as exc:
        ap.error(str(exc))
    rows = []

    def clock_row(trainer, step):
        h = trainer.history
        if h.eval_step:   # the evaluations so far (this step's comes after the callbacks)
            print(f"  eval at {h.eval_step[-1]}: err {h.eval_error[-1]} val {h.eval_val_loss[-1]}", flush=True)
        rows.append({"step": step, "loss": h.loss[-1], "points": trainer.pde_points,
                     "bc_points": trainer.bc_points, "wall_s": time.perf_counter() - t0})
        print(f"step {step} loss {h.loss[-1]:.3e} points {trainer.pde_points} t {rows[-1]['wall_s']:.0f} s",
              flush=True)

    t0 = time.perf_counter()
    sol = _solve(problem, args.time_limit, overrides, clock_row)
    h = sol.history
    evals = {s: (e, v, t) for s, e, v, t in zip(h.eval_step, h.eval_error, h.eval_val_loss, h.eval_time)}
    for row in rows:
        e, v, t = evals.get(row["step"], (None, None, None))
        row.update(error=e, val_loss=v, train_s=t)
        print(f"{row['step']:4d}  err {e if e is None else format(e, '.3e')}  loss {row['loss']:.3e}  "
              f"val {v if v is None else format(v, '.3e')}  points {row['points']}+{row['bc_points']}  "
              f"t {row['wall_s']:.0f} s", flush=True)
    print(f"stop: {sol.stop_reason}; error {sol.error}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"problem": args.problem, "hints": problem.hints, "overrides": overrides,
                       "settings": {k: v for k, v in sol.settings.items() if k != "weights"},
                       "stop_reason": sol.stop_reason, "error": sol.error, "rows": rows}, f, indent=1,
                      default=str)
    return 0


def _solve(problem, time_limit, overrides, callback):
    """hp.solve with a callback after every step."""
    return hp.solve(problem, time_limit=time_limit, progress=False, callbacks=[callback], **overrides)


if __name__ == "__main__":
    sys.exit(main())
