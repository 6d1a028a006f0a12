"""What ``helmpinn invert`` writes into its folder: the result (``inversion.npz``, or
``fwi.npz`` for the classical baseline: plain arrays, no pickle), ``velocity.npy``, the figure
and ``metrics.json`` (the settings, the survey's sizes, how the run ended, the history, the
velocity error), each written whole and claimed first; then the previous run's files this run
did not replace are removed."""
from __future__ import annotations

import argparse
import io
import os
import sys
from typing import Any

import numpy as np

from .. import _core, plots, runfiles
from ..inversion import velocity_error
from ..inversion.api import illuminated_points
from .invert_inputs import Inputs
from .invert_options import FIGURE, OUTPUTS, REPORT, RESULT, VELOCITY
from .runs import have_matplotlib, write_report

__all__ = ["write_result", "make_report"]


def _fwi_history(result: Any) -> list[dict[str, Any]]:
    """fwi's history (columns) as helmpinn.invert's (one entry per iteration)."""
    h = result.history
    return [{k: h[k][i] for k in h} for i in range(len(h["time"]))]


def _fwi_figure(result: Any, inputs: Inputs, n: int = 101):
    """For fwi, the figure :meth:`helmpinn.Inversion.figure` draws for helmpinn.invert: the
    initial, recovered and (when known) true velocity, and the data misfit per iteration."""
    domain = inputs.domain
    initial = inputs.initial if callable(inputs.initial) else (lambda x: np.full(len(x), inputs.initial))
    panels = [("initial", initial), ("recovered", result.velocity)]
    if inputs.true is not None:
        panels.append(("true", inputs.true))
    fig, axes = plots._figure(1, len(panels) + 1, figsize=(4.2 * (len(panels) + 1), 3.6))
    xs = [np.linspace(a, b, n) for a, b in zip(domain.lo, domain.hi)]
    pts = np.stack([g.ravel() for g in np.meshgrid(*xs, indexing="ij")], axis=1)
    values = [np.asarray(f(pts), np.float64).reshape(n, n) for _, f in panels]
    vmin, vmax = min(float(v.min()) for v in values), max(float(v.max()) for v in values)
    extent = [domain.lo[0], domain.hi[0], domain.lo[1], domain.hi[1]]
    for ax, (name, _), v in zip(axes[0], panels, values):
        im = ax.imshow(v.T, origin="lower", extent=extent, vmin=vmin, vmax=vmax, cmap="viridis")
        ax.set_title(f"{name} velocity (fwi)")
        fig.colorbar(im, ax=ax, shrink=0.8)
    ax = axes[0][-1]
    misfit = [m for m in result.history["misfit"] if m is not None and m > 0]
    ax.semilogy(range(1, len(misfit) + 1), misfit, marker=".")
    ax.set_xlabel("L-BFGS-B iteration")
    ax.set_ylabel("data misfit")
    ax.set_title("data misfit")
    fig.tight_layout()
    return fig


def _figure(method: str, result: Any, inputs: Inputs):
    """The run's figure, or None with a note (a 2-D medium only; matplotlib needed)."""
    if not have_matplotlib("no figure was written"):
        return None
    if inputs.domain.dim != 2:
        print(f"helmpinn: no figure: it draws 2-D media only, this one is {inputs.domain.dim}-D", file=sys.stderr)
        return None
    return result.figure() if method == "pinn" else _fwi_figure(result, inputs)


def _npy_bytes(values: np.ndarray) -> bytes:
    """``values`` as the bytes of an .npy file (no pickle)."""
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(values), allow_pickle=False)
    return buf.getvalue()


def write_result(folder: runfiles.RunFolder, method: str, result: Any, inputs: Inputs,
                 report: dict[str, Any], draw: bool) -> dict[str, list[str]]:
    """The result, velocity.npy, the figure and last metrics.json, each written whole and
    claimed first (helmpinn's whatever stops the writing); then the previous run's files this
    run did not replace are removed."""
    fig = _figure(method, result, inputs) if draw else None
    names = [RESULT[method], VELOCITY, *([FIGURE] if fig is not None else []), REPORT]
    for name in names:
        folder.claim(name)
    path = os.path.join(folder.path, RESULT[method])
    result.save(path)   # Inversion.save / FWIResult.save: plain arrays, no pickle
    folder.record(RESULT[method])
    folder.write(VELOCITY, _npy_bytes(result.velocity.values))
    if fig is not None:
        plots.save_figure(fig, os.path.join(folder.path, FIGURE))
        folder.record(FIGURE)
    write_report(folder, REPORT, report)
    removed = folder.remove(n for n in OUTPUTS if n not in names)
    return {"written": names, "removed": removed}


def _final_error(result: Any, inputs: Inputs) -> float | None:
    """‖v − v_true‖ / ‖v_true − v_initial‖ over the region the survey illuminates (the hull of
    its sources and receivers), measured the same way for both methods."""
    if inputs.true is None:
        return None
    initial = inputs.initial if callable(inputs.initial) else (lambda x: np.full(len(x), inputs.initial))
    return velocity_error(result.velocity, inputs.true, initial, illuminated_points(inputs.survey, inputs.domain))


def make_report(args: argparse.Namespace, inputs: Inputs, result: Any, stop: Any, seconds: float,
                wall: float, ranks: int = 1) -> dict[str, Any]:
    """metrics.json: the settings, the survey's sizes, how the run ended, the history, the
    final velocity error, the grid of velocity.npy."""
    pinn = args.method == "pinn"
    history = result.history if pinn else _fwi_history(result)
    last = history[-1] if history else {}
    velocity = result.velocity
    settings = {k: v for k, v in vars(args).items() if k not in ("command", "resume", "quiet", "no_plots")}
    for key in ("survey", "initial", "true", "out"):
        settings[key] = None if settings[key] is None else os.path.abspath(settings[key])
    return {
        "command": "helmpinn invert", "method": args.method, "settings": settings,
        "domain": {"lo": inputs.domain.lo.tolist(), "hi": inputs.domain.hi.tolist()},
        "survey": {"sources": inputs.survey.n_sources, "receivers": inputs.survey.n_receivers,
                   "frequencies": inputs.survey.frequencies.tolist()},
        "result": RESULT[args.method],
        "stopped": stop.reason or (result.message if pinn else result.stopped),
        "success": bool(result.success) if pinn else True,
        "interrupted": stop.reason is not None, "inversion_time_s": seconds, "wall_time_s": wall,
        "resumed": args.resume is not None,
        "resumable": result.resume is not None, "ranks": ranks,
        "steps": len(history),
        "final": {"velocity_error": _final_error(result, inputs),
                  "data_misfit": last.get("data_misfit", last.get("misfit")),
                  "data_fit_per_frequency": result.data_fit.tolist() if pinn and result is not None else None},
        "velocity_grid": {
            "file": VELOCITY, "origin": velocity.origin.tolist(), "spacing": velocity.spacing.tolist(),
            "shape": list(velocity.values.shape)},
        "history": history, "threads": _core.get_num_threads(), "version": getattr(_core, "__version__", None),
    }
