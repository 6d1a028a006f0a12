"""Receivers: a trained field sampled on a line or a point set, saved as ``.npz`` and plotted
(amplitude and phase along the receivers).

    rec = record(model, receiver_line((-1, 0.9), (1, 0.9), 201), problem)
    save_recording("surface.npz", rec)
    plot_recording(rec, "surface.png")

With a problem in its scattered-field form (``Problem(background=...)``) the recording holds the
total field ``u = u_s + u₀`` and the network's scattered field ``u_s`` beside it; a receiver at
the background source (2-D, 3-D: :meth:`helmpinn.Problem.at_source`) records NaN as its total field,
amplitude and phase, since u₀ is infinite there.
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import plots
from ._files import write_atomic

__all__ = ["receiver_line", "record", "save_recording", "load_recording", "plot_recording"]


def receiver_line(start: ArrayLike, stop: ArrayLike, n: int) -> NDArray[np.float64]:
    """n >= 2 receivers evenly spaced from ``start`` to ``stop`` (both included): x [n, d]."""
    a = np.atleast_1d(np.asarray(start, np.float64))
    b = np.atleast_1d(np.asarray(stop, np.float64))
    if a.shape != b.shape or a.ndim != 1 or not np.all(np.isfinite(a) & np.isfinite(b)):
        raise ValueError(f"receiver_line: start and stop must be finite points of the same "
                         f"dimension, got {a.tolist()} and {b.tolist()}")
    if isinstance(n, bool) or int(n) != n or int(n) < 2:
        raise ValueError(f"receiver_line: n must be an integer >= 2, got {n!r}")
    t = np.linspace(0.0, 1.0, int(n))[:, None]
    return np.ascontiguousarray(a + t * (b - a))


def record(model, x: ArrayLike, problem=None) -> dict[str, NDArray]:
    """The field of ``model`` at the receivers x [N, d]: a dict of ``x``, ``distance`` (the
    length along the receivers, from the first), ``u`` (complex: the total field, with
    ``problem``'s background added when it has one), ``amplitude`` (``|u|``), ``phase`` (radians,
    unwrapped along the receivers) and, with a background, ``u_scattered`` (the network's). A
    receiver at the background source records NaN (u₀ is infinite there; the phase is unwrapped
    over the others)."""
    x = np.ascontiguousarray(np.asarray(x, np.float64))
    if x.ndim != 2 or x.shape[1] != model.in_dim or len(x) == 0:
        raise ValueError(f"record: receivers must be an array of shape (N, {model.in_dim}) with "
                         f"N >= 1, got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("record: receiver coordinates must be finite")
    u_net = np.asarray(model.predict(x), np.complex128)
    out: dict[str, NDArray] = {"x": x}
    steps = np.linalg.norm(np.diff(x, axis=0), axis=1)
    out["distance"] = np.concatenate([[0.0], np.cumsum(steps)])
    background = getattr(problem, "background", None)
    if background is not None:
        out["u_scattered"] = u_net
        out["u"] = problem.total_field(x, u_net)
    else:
        out["u"] = u_net
    out["amplitude"] = np.abs(out["u"])
    out["phase"] = _unwrapped_phase(out["u"])
    return out


def _unwrapped_phase(u: NDArray[np.complex128]) -> NDArray[np.float64]:
    """The phase of u unwrapped along the receivers, over its finite values (NaN elsewhere)."""
    phase = np.full(len(u), np.nan)
    ok = np.isfinite(u)
    phase[ok] = np.unwrap(np.angle(u[ok]))
    return phase


def save_recording(path: str | os.PathLike, recording: Mapping[str, Any]) -> None:
    """Write a recording to ``path`` (``.npz``, no pickle): to a temporary file in the same
    folder first, then moved over ``path``, so an existing file is replaced only by a whole one."""
    arrays = {k: np.asarray(v) for k, v in recording.items()}
    for k, v in arrays.items():
        if v.dtype == object:
            raise TypeError(f"save_recording: {k!r} is not a numeric array")
    write_atomic(path, lambda fh: np.savez(fh, **arrays))


def load_recording(path: str | os.PathLike) -> dict[str, NDArray]:
    """A recording written by :func:`save_recording` (loaded without pickle)."""
    with np.load(os.fspath(path), allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def plot_recording(recording: Mapping[str, Any], path: str | os.PathLike, *, title: str = ""):
    """A PNG of the amplitude and the (unwrapped) phase against the distance along the receivers
    (the scattered field's beside the total field's when the recording has both). Returns the
    matplotlib ``Figure`` (not attached to pyplot: the garbage collector frees it)."""
    from matplotlib.figure import Figure

    dist = np.asarray(recording["distance"])
    fig = Figure(figsize=(7, 5), layout="constrained")
    ax_amp, ax_phase = fig.subplots(2, 1, sharex=True)
    ax_amp.plot(dist, recording["amplitude"], label="total" if "u_scattered" in recording else "u")
    ax_phase.plot(dist, recording["phase"])
    if "u_scattered" in recording:
        us = np.asarray(recording["u_scattered"])
        ax_amp.plot(dist, np.abs(us), "--", label="scattered")
        ax_phase.plot(dist, _unwrapped_phase(us), "--")
        ax_amp.legend()
    ax_amp.set_ylabel("amplitude |u|")
    ax_phase.set_ylabel("phase (rad)")
    ax_phase.set_xlabel("distance along the receivers")
    if title:
        ax_amp.set_title(title)
    plots.save_figure(fig, path, dpi=100)
    return fig
