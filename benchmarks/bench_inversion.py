#!/usr/bin/env python
"""Inversion benchmarks (issue #60): the medium from receiver data, every method on the same
synthetic survey, start, bounds and velocity-error measure.

    python benchmarks/bench_inversion.py --case ring|crosswell --method fwi|pinn
        [--noise 0.01] [--time-limit S] [--max-iter N] [--seed 0] [--regularization A] [--json out.json]
        [--figure out.png] [--stage-regularization 2e-5,2e-6,2e-7]
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
- ``marmousi`` (``--data DIR --start smooth|linear``): a 3 × 1.5 km window of the Marmousi model
  of Song, Alkhalifah & Waheed's public repository songc0a/PINN-Helmholtz-solver-adaptive-sine
  (its ``mar_v.mat``: ``v`` in km/s, 101 depths × 371 positions at 25 m, surface at row 0; give
  that repository's folder, the .mat file or a ``.npy`` of the same layout as ``--data``). The
  window is x from 4.5 to 7.5 km of the model and depths 0 to 1.5 km (the water layer, the sea
  floor at 0.25 km and the faulted anticline's top), coordinates (x, z) in km, z the depth; the
  true velocity is the model's bilinear interpolant (:func:`marmousi_case`). 16 sources at
  z = 0.05 km from x = 0.1 to 2.9 km, 119 receivers every 25 m at z = 0.025 km (those within
  0.1 km of the source weigh 0, the same for both methods), frequencies 3, 4, 5 Hz, bounds 1.4
  to 1.15 × the window's highest velocity. Absorbing layers: by default a PML on every side, the
  top included (no free surface), so the data have no surface multiples or ghosts; with
  ``--free-surface`` the surface z = 0 (the box's face ``"ymin"``) is a free surface, u = 0, and
  the layer is on the other three faces (``PML(w, faces=MARMOUSI_FREE_SURFACE)``) for the data
  and both inversions alike: the data then hold the surface's ghosts and multiples, as field data
  do. The data must be made with the physics the inversions model (a ``--survey`` file holds
  data only: keep one file per choice). The inversions' PML is
  0.5 km; the data's is ``Survey.synthetic``'s default (one longest wavelength, 1.16 km, at 15 m
  spacing: 20 nodes per 1.5 km/s wavelength at 5 Hz). Starts (``--start``): ``smooth``, the
  whole model smoothed by a Gaussian of σ = 300 m (12 nodes; edges continued by their nearest
  values) then windowed; ``linear``, a straight line in depth (1-D) from the window's surface
  velocity (1.5 km/s, water) with the least-squares gradient through the window's velocities.
  Both inversions parameterise m = 1/v² by a cubic spline on a grid
  of λ_min/4 = 1.4 / 5 / 4 = 70 m (``fwi``'s default ``grid``; ``hp.invert``'s default
  ``per_wavelength`` = 4): 44 × 23 coefficients. Velocity error region: 0.1 < x < 2.9 km
  (between the outermost sources) and 0.05 < z < 1.0 km (the deepest 0.5 km left out: the
  3 km aperture's reflections and diving waves at 3-5 Hz hardly reach it), on a 25 m grid.
  Default time limit 1200 s.

Data: :meth:`helmpinn.Survey.synthetic` (fourth-order finite differences at 20 nodes per
shortest wavelength, finer than the inversion's grid, with its own one-wavelength PML),
``--noise``: relative complex Gaussian noise per frequency. Receivers closer than 0.1 to the
source (its near field, under half a wavelength at the highest frequency) get weight 0 in the
ring case, as a tomography setup mutes them. Velocity error: ``‖v − v_true‖ / ‖v_true −
v_initial‖`` on a 101 × 101 grid of the unit square restricted to the case's region
(:func:`velocity_error`).

``--figure`` draws the true velocity, the start, the recovered one and their difference.
``--stage-regularization a,b,c`` (fwi): one fwi call per frequency, low to high, each with its
own α, from the last one's velocity: fwi with ``hp.invert``'s regularisation schedule (α = 2β)
on the same medium grid, which tells whether that parameterisation and schedule limit the error.

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
from helmpinn.problems.geometry import Box

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


def make_case(name: str, noise: float = 0.0, seed: int = 0, data=None, start: str = "smooth",
              survey_file: str | None = None, free_surface: bool = False) -> dict:
    """The case ``name`` ("ring", "crosswell" or "marmousi"): a dict with ``survey`` (synthetic
    data), ``domain``, ``pml`` (the inversion's: 0.25 around the unit square), ``initial`` (1.0),
    ``true`` (:func:`true_velocity`), ``bounds``, ``region`` and ``time_limit``. "marmousi" is
    :func:`marmousi_case` (``data``: its model, ``start``: its start, ``survey_file``,
    ``free_surface``)."""
    if name == "marmousi":
        return marmousi_case(data, start=start, noise=noise, seed=seed, survey_file=survey_file,
                             free_surface=free_surface)
    if free_surface:
        raise ValueError(f"free_surface: only the marmousi case has a surface, not {name!r}")
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
            "time_limit": TIME_LIMITS[name], "noise": noise, "n_grid": (101, 101)}



#: The Marmousi model's node spacing (km), its window (x from, to; depth from, to; km), the
#: survey's frequencies (Hz), the inversions' PML width (km) and the start's Gaussian σ (km).
MARMOUSI_SPACING = 0.025
MARMOUSI_WINDOW = (4.5, 7.5, 0.0, 1.5)
MARMOUSI_FREQUENCIES = (3.0, 4.0, 5.0)
MARMOUSI_PML = 0.5
MARMOUSI_SMOOTHING = 0.3
MARMOUSI_STARTS = ("smooth", "linear")
#: The faces that carry the PML with ``--free-surface``: all but the surface z = 0 ("ymin").
MARMOUSI_FREE_SURFACE = ("xmin", "xmax", "ymax")


def load_marmousi(data) -> np.ndarray:
    """The Marmousi velocity ``[depths, positions]`` (km/s, 25 m spacing, row 0 the surface):
    ``data`` a folder holding ``mar_v.mat`` (variable ``v``), that .mat file, a ``.npy`` file or
    an array of the same layout."""
    if isinstance(data, np.ndarray):
        v = data
    else:
        path = str(data)
        if os.path.isdir(path):
            path = os.path.join(path, "mar_v.mat")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--data: no Marmousi model at {path!r} (give the folder of "
                                    f"songc0a/PINN-Helmholtz-solver-adaptive-sine, its mar_v.mat or a .npy)")
        if path.endswith(".npy"):
            v = np.load(path, allow_pickle=False)
        else:
            from scipy import io
            raw = io.loadmat(path)
            if "v" not in raw:
                raise ValueError(f"--data: {path!r} has no variable 'v' (the velocity, km/s)")
            v = raw["v"]
    v = np.asarray(v, np.float64)
    if v.ndim != 2 or not np.all(np.isfinite(v)) or np.min(v) <= 0:
        raise ValueError(f"--data: the Marmousi velocity must be a 2-D array of finite values > 0 "
                         f"[depths, positions], got shape {v.shape}")
    x0, x1, z0, z1 = MARMOUSI_WINDOW
    need = (int(round(z1 / MARMOUSI_SPACING)) + 1, int(round(x1 / MARMOUSI_SPACING)) + 1)
    if v.shape[0] < need[0] or v.shape[1] < need[1]:
        raise ValueError(f"--data: the Marmousi velocity must cover the window {MARMOUSI_WINDOW} km "
                         f"at {MARMOUSI_SPACING} km: at least {need} nodes, got shape {v.shape}")
    return v


def _bilinear(values: np.ndarray, origin, spacing: float):
    """x [N, 2] (x, z) -> v: the bilinear interpolant of ``values [nx, nz]`` at ``origin +
    i spacing``, points outside its box moved to the nearest point of the box (no overshoot
    at the model's sharp interfaces, unlike a cubic spline)."""
    from scipy.interpolate import RegularGridInterpolator

    axes = [origin[a] + spacing * np.arange(values.shape[a]) for a in range(2)]
    f = RegularGridInterpolator(axes, values, method="linear")

    def velocity(x):
        x = np.asarray(x, np.float64)
        return f(np.stack([np.clip(x[:, a], axes[a][0], axes[a][-1]) for a in range(2)], axis=1))
    return velocity


def marmousi_models(model: np.ndarray) -> dict:
    """The window's true velocity and both starts, as ``[nx, nz]`` arrays over the window's
    nodes (x first): ``true``, ``smooth`` (the whole model smoothed by a Gaussian of
    :data:`MARMOUSI_SMOOTHING`, then windowed) and ``linear`` (the line in depth from the
    window's mean surface velocity, its gradient fitted to the window's velocities by least
    squares: an unconstrained fit would start below the water's 1.5 km/s at the surface)."""
    from scipy.ndimage import gaussian_filter

    x0, x1, z0, z1 = MARMOUSI_WINDOW
    ix = slice(int(round(x0 / MARMOUSI_SPACING)), int(round(x1 / MARMOUSI_SPACING)) + 1)
    iz = slice(int(round(z0 / MARMOUSI_SPACING)), int(round(z1 / MARMOUSI_SPACING)) + 1)
    smooth = gaussian_filter(model, MARMOUSI_SMOOTHING / MARMOUSI_SPACING, mode="nearest")
    true = model[iz, ix].T
    z = MARMOUSI_SPACING * np.arange(true.shape[1])
    top = float(np.mean(true[:, 0]))
    slope = float(np.sum(z * (true - top)) / (true.shape[0] * np.sum(z * z)))
    linear = np.broadcast_to(top + slope * z, true.shape).copy()
    return {"true": true, "smooth": smooth[iz, ix].T, "linear": linear}


def marmousi_case(data, start: str = "smooth", noise: float = 0.0, seed: int = 0,
                  survey_file: str | None = None, free_surface: bool = False) -> dict:
    """The ``marmousi`` case (module docstring): ``data`` as :func:`load_marmousi` takes it;
    ``survey_file``: the synthetic data are read from this .npz when it exists (written by an
    earlier call with the same model, noise, seed and surface: its geometry and frequencies are
    checked) and written there otherwise; ``free_surface``: u = 0 on z = 0 and the PML on the
    other faces (:data:`MARMOUSI_FREE_SURFACE`), for the data and the inversions."""
    if start not in MARMOUSI_STARTS:
        raise ValueError(f"--start must be one of {MARMOUSI_STARTS}, got {start!r}")
    models = marmousi_models(load_marmousi(data))
    x0, x1, z0, z1 = MARMOUSI_WINDOW
    width, depth = x1 - x0, z1 - z0
    domain = Box([0.0, 0.0], [width, depth])
    true = _bilinear(models["true"], (0.0, 0.0), MARMOUSI_SPACING)
    initial = _bilinear(models[start], (0.0, 0.0), MARMOUSI_SPACING)
    src = np.stack([np.linspace(0.1, width - 0.1, 16), np.full(16, 0.05)], axis=1)
    xr = MARMOUSI_SPACING * np.arange(1, int(round(width / MARMOUSI_SPACING)))
    rec = np.stack([xr, np.full(len(xr), 0.025)], axis=1)
    if survey_file is not None and os.path.exists(survey_file):
        survey = hp.Survey.load(survey_file)
        same = (survey.receivers.shape == rec.shape and np.allclose(survey.receivers, rec)
                and len(survey.sources) == len(src)
                and np.allclose([s.position for s in survey.sources], src)
                and np.allclose(survey.frequencies, MARMOUSI_FREQUENCIES))
        if not same:
            raise ValueError(f"--survey {survey_file!r}: not this case's geometry and frequencies")
    else:
        faces = MARMOUSI_FREE_SURFACE if free_surface else None
        # Survey.synthetic's default width (one longest wavelength), on the case's faces
        data_pml = hp.PML(float(np.max(models["true"])) / min(MARMOUSI_FREQUENCIES), faces=faces)
        survey = hp.Survey.synthetic(true, domain, [hp.PointSource(p) for p in src], rec,
                                     MARMOUSI_FREQUENCIES, pml=data_pml, noise=noise, seed=seed)
        if survey_file is not None:
            survey.save(survey_file)
    near = np.abs(rec[None, :, 0] - src[:, None, 0]) < 0.1
    weights = np.broadcast_to(~near, survey.data.shape).astype(np.float64)
    survey = hp.Survey(survey.sources, survey.receivers, survey.frequencies, survey.data, weights)

    def region(x):
        x = np.asarray(x)
        return (x[:, 0] > 0.1) & (x[:, 0] < width - 0.1) & (x[:, 1] > 0.05) & (x[:, 1] < 1.0)
    bounds = (1.4, round(1.15 * float(np.max(models["true"])), 2))
    pml = hp.PML(MARMOUSI_PML, faces=MARMOUSI_FREE_SURFACE if free_surface else None)
    return {"name": "marmousi", "survey": survey, "domain": domain, "pml": pml,
            "initial": initial, "true": true, "bounds": bounds, "region": region,
            "time_limit": 1200.0, "noise": noise, "start": start, "depth_down": True,
            "free_surface": free_surface,
            "n_grid": (int(round(width / MARMOUSI_SPACING)) + 1, int(round(depth / MARMOUSI_SPACING)) + 1)}


def error_grid(case: dict) -> tuple[np.ndarray, tuple[int, int]]:
    """The regular grid of the case's box the error and figures use: ``case["n_grid"]`` nodes
    along each axis (default 101 × 101), points ``[N, 2]`` ("ij" order) and the grid's shape."""
    n = case.get("n_grid", (101, 101))
    lo, hi = case["domain"].lo, case["domain"].hi
    mesh = np.meshgrid(*[np.linspace(lo[a], hi[a], n[a]) for a in range(2)], indexing="ij")
    return np.stack([m.ravel() for m in mesh], axis=1), tuple(n)


def velocity_error(velocity, case: dict, initial=None) -> float:
    """``‖v − v_true‖ / ‖v_true − v_initial‖`` on the case's grid (:func:`error_grid`; the
    unit square's 101 × 101 for ring and crosswell) inside the case's region (``velocity``,
    ``initial``: callables x -> v or numbers)."""
    x = error_grid(case)[0]
    x = x[case["region"](x)]

    def values(v):
        return np.full(len(x), float(v)) if not callable(v) else np.asarray(v(x), np.float64)
    vt = values(case["true"])
    v0 = values(case["initial"] if initial is None else initial)
    return float(np.linalg.norm(values(velocity) - vt) / np.linalg.norm(vt - v0))


def plot_case(case: dict, velocity, path: str, title: str = "") -> None:
    """The true velocity, the start, the recovered one and the difference recovered − true on
    the case's box, the sources (stars) and receivers (dots) marked, the difference shown in the
    error's region only (depth downwards where the case says ``depth_down``)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x, shape = error_grid(case)

    def values(v):
        return np.asarray(v(x) if callable(v) else np.full(len(x), float(v)), np.float64).reshape(shape)
    true, start, got = values(case["true"]), values(case["initial"]), values(velocity)
    inside = case["region"](x).reshape(shape)
    lo, hi = case["domain"].lo, case["domain"].hi
    down = case.get("depth_down", False)
    extent = (lo[0], hi[0], hi[1], lo[1]) if down else (lo[0], hi[0], lo[1], hi[1])
    aspect = (hi[1] - lo[1]) / (hi[0] - lo[0])
    fig, axes = plt.subplots(1, 4, figsize=(16, 1.0 + 3.2 * max(aspect, 0.45)), constrained_layout=True)
    vmin, vmax = float(np.min(true)), float(np.max(true))
    panels = ((true, "true", "viridis", (vmin, vmax)), (start, "start", "viridis", (vmin, vmax)),
              (got, "recovered", "viridis", (vmin, vmax)),
              (np.where(inside, got - true, np.nan), "recovered − true (region)", "RdBu_r",
               (-(vmax - vmin) / 2, (vmax - vmin) / 2)))
    src = np.array([s.position for s in case["survey"].sources])
    for ax, (field, name, cmap, (a, b)) in zip(axes, panels):
        im = ax.imshow(field.T, origin="upper" if down else "lower", extent=extent, cmap=cmap,
                       vmin=a, vmax=b, aspect="equal")
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
    if getattr(args, "stage_regularization", None):
        return _fwi_stages(case, args, report)
    result = fwi(case["survey"], case["initial"], domain=case["domain"], pml=case["pml"],
                 bounds=case["bounds"], regularization=alpha,
                 max_iter=args.max_iter, time_limit=args.time_limit or case["time_limit"],
                 true=case["true"], region=case["region"], callback=report)
    return {"velocity": result.velocity, "seconds": result.seconds, "history": result.history,
            "stopped": result.stopped, "n_solves": result.n_solves, "regularization": alpha}


def _fwi_stages(case: dict, args, report) -> dict:
    """fwi one frequency at a time, low to high, each from the last one's velocity, with its own
    α from ``--stage-regularization`` (one a frequency): fwi with ``hp.invert``'s regularisation
    schedule (its β is α / 2: fwi's term is ``½ α ⟨|L ∇(m/m₀)|²⟩``, invert's ``β L²/|box|
    ∫|∇m/m_ref|²``; the medium grid is the same, a quarter of the shortest wavelength)."""
    from helmpinn.reference import fwi

    alphas = [float(a) for a in args.stage_regularization.split(",")]
    freqs = sorted(float(f) for f in case["survey"].frequencies)
    if len(alphas) != len(freqs):
        raise SystemExit(f"--stage-regularization: give one α per frequency ({len(freqs)}), got {len(alphas)}")
    velocity, history, t0 = case["initial"], {}, time.perf_counter()
    limit = args.time_limit or case["time_limit"]
    for f, alpha in zip(freqs, alphas):
        result = fwi(case["survey"], velocity, domain=case["domain"], pml=case["pml"], bounds=case["bounds"],
                     regularization=alpha, frequencies=[f], max_iter=args.max_iter,
                     time_limit=max(limit - (time.perf_counter() - t0), 1e-3), true=case["true"],
                     region=case["region"], callback=report)
        velocity = result.velocity
        for key, values in result.history.items():
            history.setdefault(key, []).extend(values)
        if not args.quiet:
            print(f"after f = {f:g} (α = {alpha:g}): velocity error {velocity_error(velocity, case):.4f}", flush=True)
    return {"velocity": velocity, "seconds": time.perf_counter() - t0, "history": history,
            "stopped": result.stopped, "regularization": alphas}


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
    region = case["region"] if case["name"] == "marmousi" else None   # a surface survey's hull is a strip
    result = hp.invert(case["survey"], case["initial"], domain=case["domain"], pml=case["pml"],
                       bounds=case["bounds"], true=case["true"], region=region,
                       time_limit=args.time_limit or case["time_limit"], max_steps=args.max_iter,
                       seed=args.seed, callback=report)
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
    ap.add_argument("--case", choices=["ring", "crosswell", "marmousi"], default="ring")
    ap.add_argument("--data", default=None,
                    help="marmousi: the folder of songc0a/PINN-Helmholtz-solver-adaptive-sine, its mar_v.mat or a .npy")
    ap.add_argument("--start", choices=MARMOUSI_STARTS, default="smooth", help="marmousi: the start model")
    ap.add_argument("--free-surface", action="store_true",
                    help="marmousi: a free surface (u = 0) at z = 0 and the PML on the other faces")
    ap.add_argument("--survey", default=None,
                    help="marmousi: read the synthetic data from this .npz if it exists, else write them there")
    ap.add_argument("--method", choices=sorted(METHODS), default="fwi")
    ap.add_argument("--noise", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=None)
    ap.add_argument("--regularization", type=float, default=None,
                    help="α of fwi's Tikhonov term (default: the rule max(10 noise², 1e-5))")
    ap.add_argument("--stage-regularization", default=None,
                    help="fwi: one α a frequency, comma-separated, one fwi call each, low to high "
                         "(2e-5,2e-6,2e-7: hp.invert's default β schedule)")
    ap.add_argument("--max-iter", type=int, default=50,
                    help="fwi: L-BFGS-B iterations a frequency; pinn: LM steps a frequency (max_steps)")
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
    if args.case == "marmousi" and args.data is None:
        ap.error("--case marmousi needs --data DIR (the Marmousi model; module docstring)")
    if args.free_surface and args.case != "marmousi":
        ap.error("--free-surface: only the marmousi case has a surface")
    case = make_case(args.case, noise=args.noise, seed=args.seed, data=args.data, start=args.start,
                     survey_file=args.survey, free_surface=args.free_surface)
    t_data = time.perf_counter() - t0
    out = METHODS[args.method](case, args)
    err = velocity_error(out["velocity"], case)
    row = {"case": args.case, "start": case.get("start"), "free_surface": args.free_surface, "method": args.method, "noise": args.noise, "seconds": out["seconds"],
           "velocity_error": err, "data_seconds": t_data, "stopped": out.get("stopped"),
           "regularization": out.get("regularization"), "n_solves": out.get("n_solves"),
           "history": {k: v for k, v in out["history"].items()}}
    print(f"{args.case} {args.method} noise={args.noise:g}{' start=' + args.start if args.case == 'marmousi' else ''}"
          f"{' free surface' if args.free_surface else ''}: velocity error {err:.4f} after "
          f"{out['seconds']:.1f} s (data {t_data:.1f} s; {out.get('stopped', '')})")
    if args.figure:
        plot_case(case, out["velocity"], args.figure,
                  f"{args.case}{', start ' + args.start if args.case == 'marmousi' else ''}"
                  f"{', free surface' if args.free_surface else ''}, {args.method}, "
                  f"noise {args.noise:g}: velocity error {err:.3f} "
                  f"after {out['seconds']:.0f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(row, fh, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
