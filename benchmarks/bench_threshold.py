#!/usr/bin/env python
"""Where the decomposition starts: ``hp.solve`` with one network (Levenberg-Marquardt) and with
a decomposed model (matrix-free Gauss-Newton), each from its own defaults, on the same problems
near :data:`helmpinn.defaults.DECOMPOSE_ABOVE`, the error against time.

    PYTHONPATH=python:benchmarks python benchmarks/bench_threshold.py --threads 2 --time-limit 150 \
        [--problems room,lens,layered,box-source:wavelengths=3,...] [--models network,decomposed] [--json out.json]

Problems: a built-in's ``name:opt=value``, or one of these a user might write (no exact
solution; the reference is :func:`helmpinn.reference.fd_solve`, fourth order):

- ``room``: a 1.5 × 1.5 room with first-order absorbing walls (``Sommerfeld(k0)`` on every
  side), k0 = 4π (3 wavelengths across), a Gaussian source of width 0.05 at (0.35, 0.4);
- ``room4``: the room at k0 = 16π/3 (4 wavelengths across);
- ``lens``: the room with a slow Gaussian lens, k up to 1.4 k0 at (0.9, 0.8), width 0.15
  (4.2 wavelengths across at the largest k);
- ``layered``: the layered-medium tutorial's point source (examples/layered_pml.py: a velocity
  model on a grid, a PML of width 0.5; 4.5 wavelengths across at the largest k).
- ``duct:lx=L:ly=H:walls=W``: an elongated L × H box, k0 = 4π, a smooth wavy interface between
  two layers (k from k0 to 1.1 k0), a Gaussian source of width 0.04 at (0.2 L, 0.6 H);
  ``walls=open``: ``Sommerfeld(k0)`` on every side, ``walls=hard``: a waveguide, ``Dirichlet(0)``
  along the long sides and ``Sommerfeld(k0)`` at the ends (defaults 1.6, 1, open).

Each run is ``hp.solve(problem, model=M, time_limit=T, seed=S)`` with nothing else set. A
callback records the relative L2 error on the physical domain after every step (for
``box-source`` with its resonant modes removed, :func:`helmpinn.waves.box_source_error`); its
seconds are left out of the clock. One line per run: the wavelengths across
(:func:`helmpinn.defaults.wavelengths_across`) and along the longest side, the parameters, the
error at 60 s and at the end, and the seconds to 1e-2 and 1e-3. Run on a quiet machine, one
run at a time.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

import helmpinn as hp
from helmpinn.defaults import wavelengths, wavelengths_across
from helmpinn.geometry import Box
from helmpinn.media import GridField

from bench_time_to_accuracy import field_error, parse_problem   # 'name:opt=value'; the error (modes removed)

DEFAULT_PROBLEMS = ("heterogeneous2d,room,box-source:wavelengths=3,box-source:wavelengths=3.5,scatter-soft:k=3,"
                    "free-source:wavelengths=2,dirichlet2d:n=4,room4,lens,layered,duct,duct:lx=2:ly=0.8,"
                    "duct:lx=2.4:ly=0.6:walls=hard,duct:lx=2.8:ly=0.6:walls=hard,duct:lx=3:ly=0.6:walls=hard,"
                    "duct:lx=2:ly=1.2")


def room(lens: float = 0.0, k0: float = 4 * np.pi) -> hp.Problem:
    """The ``room`` (``lens=0``), ``room4`` (``k0=16π/3``) or ``lens`` (``lens=0.4``) problem of
    the module docstring."""

    def kappa(x):
        bump = np.exp(-((x[:, 0] - 0.9) ** 2 + (x[:, 1] - 0.8) ** 2) / (2 * 0.15**2))
        return (k0 * (1 + lens * bump)) ** 2

    def source(x):
        return 100 * np.exp(-((x[:, 0] - 0.35) ** 2 + (x[:, 1] - 0.4) ** 2) / (2 * 0.05**2)) + 0j

    return hp.Problem(Box([0, 0], [1.5, 1.5]), kappa=kappa, source=source, bcs={"*": hp.Sommerfeld(k0)})


def layered() -> hp.Problem:
    """examples/layered_pml.py's problem at frequency 1."""
    g = np.linspace(-1.5, 1.5, 61)
    _, y = np.meshgrid(g, g, indexing="ij")
    velocity = GridField(1.0 - (1.0 / 6.0) * (1.0 - np.tanh(y / 0.1)), origin=(-1.5, -1.5), spacing=g[1] - g[0])
    return hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), frequency=1.0, velocity=velocity,
                      source=hp.PointSource((0.0, 0.4)), bcs={}, pml=hp.PML(0.5), pml_share=0.25)


def duct(lx: float = 1.6, ly: float = 1.0, walls: str = "open") -> hp.Problem:
    """The ``duct`` problem of the module docstring."""
    k0 = 4 * np.pi

    def kappa(x):
        interface = 0.5 * ly + 0.1 * ly * np.sin(4 * x[:, 0])
        return (k0 * (1.05 + 0.05 * np.tanh((interface - x[:, 1]) / 0.05))) ** 2

    def source(x):
        return 50 * np.exp(-((x[:, 0] - 0.2 * lx) ** 2 + (x[:, 1] - 0.6 * ly) ** 2) / (2 * 0.04**2)) + 0j

    if walls not in ("open", "hard"):
        raise ValueError(f"duct: walls must be 'open' or 'hard', got {walls!r}")
    ends = {"xmin": hp.Sommerfeld(k0), "xmax": hp.Sommerfeld(k0)}
    sides = {"ymin": hp.Sommerfeld(k0), "ymax": hp.Sommerfeld(k0)} if walls == "open" else \
        {"ymin": hp.Dirichlet(0), "ymax": hp.Dirichlet(0)}
    return hp.Problem(Box([0, 0], [float(lx), float(ly)]), kappa=kappa, source=source, bcs={**ends, **sides})


USER_PROBLEMS = {"room": (room, 5e-3), "room4": (lambda: room(k0=16 * np.pi / 3), 5e-3),   # (make, fd h)
                 "lens": (lambda: room(0.4), 5e-3), "layered": (layered, 0.02), "duct": (duct, 5e-3)}


def user_problem(spec: str):
    """``(make, h)`` and the options of a user problem's ``name:opt=value:...`` (options separated
    by ':' or ';', as for a built-in); None for a built-in."""
    name, _, opts = spec.partition(":")
    if name not in USER_PROBLEMS:
        return None
    options = {}
    for item in filter(None, opts.replace(";", ":").split(":")):
        key, eq, value = item.partition("=")
        if not eq:
            raise SystemExit(f"bad problem option {item!r} in {spec!r}: expected key=value")
        try:
            options[key] = float(value)
        except ValueError:
            options[key] = value
    return USER_PROBLEMS[name], options


def reference(spec: str, n: int, seed: int):
    """The problem, ``n`` points of its physical domain and the reference field there."""
    from helmpinn.reference import fd_solve

    user = user_problem(spec)
    if user is not None:
        (make, h), options = user
        problem = make(**options)
        field = fd_solve(problem, h=h)
    else:
        problem, _ = parse_problem(spec)
        field = problem.exact_at
    x = problem.domain.sample_interior(n, np.random.default_rng(seed + 1))
    return problem, x, field(x)


def run(problem, x, exact, model: str, time_limit: float, seed: int) -> dict:
    """One ``hp.solve`` run: (seconds, error) after every step."""
    curve, spent = [], [0.0]

    def record(trainer, step):
        t = time.perf_counter()
        err = field_error(problem, trainer.model.predict(x), exact, x)["modes_removed"]
        curve.append((t - start - spent[0], err))
        spent[0] += time.perf_counter() - t

    start = time.perf_counter()
    sol = hp.solve(problem, model=model, time_limit=time_limit, seed=seed, progress=False, callbacks=[record])
    return {"curve": curve, "params": int(sol.model.num_params), "points": sol.settings.get("pde_points")}


def summary(curve: list, mark: float) -> dict:
    """The error at ``mark`` seconds (the last step ending before it), at the end, and the
    seconds to 1e-2 and 1e-3 (None: not reached)."""
    def first_below(level):
        return next((t for t, e in curve if e < level), None)
    before = [e for t, e in curve if t <= mark]
    return {"at_mark": before[-1] if before else None, "end": curve[-1][1] if curve else None,
            "to_1e-2": first_below(1e-2), "to_1e-3": first_below(1e-3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--problems", default=DEFAULT_PROBLEMS)
    ap.add_argument("--models", default="network,decomposed")
    ap.add_argument("--time-limit", type=float, default=150.0)
    ap.add_argument("--mark", type=float, default=60.0, help="also report the error at this many seconds")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--eval-points", type=int, default=4000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.threads:
        hp.set_num_threads(a.threads)
    fmt = lambda v, f: f"{'-':>8}" if v is None else format(v, f)   # noqa: E731
    print(f"{'problem':30s} {'wl':>5s} {'long':>5s} {'model':10s} {'P':>7s} {'points':>7s} "
          f"{'@' + str(int(a.mark)) + ' s':>8s} {'end':>8s} {'to 1e-2':>8s} {'to 1e-3':>8s}", flush=True)
    results = []
    for spec in filter(None, a.problems.split(",")):
        problem, x, exact = reference(spec, a.eval_points, a.seed)
        w, longest = wavelengths_across(problem), float(np.max(wavelengths(problem)))
        for model in filter(None, a.models.split(",")):
            r = run(problem, x, exact, model, a.time_limit, a.seed)
            s = summary(r["curve"], a.mark)
            results.append({"problem": spec, "wavelengths": w, "longest": longest, "model": model, **r, **s})
            print(f"{spec:30s} {w:5.2f} {longest:5.2f} {model:10s} {r['params']:7d} {r['points'] or 0:7d} "
                  f"{fmt(s['at_mark'], '8.1e')} {fmt(s['end'], '8.1e')} {fmt(s['to_1e-2'], '8.0f')} "
                  f"{fmt(s['to_1e-3'], '8.0f')}", flush=True)
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"time_limit": a.time_limit, "threads": hp.get_num_threads(), "runs": results}, fh, indent=1)


if __name__ == "__main__":
    main()
