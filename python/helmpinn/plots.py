"""PNG figures with matplotlib (Agg backend): the solution's real and imaginary parts, the error
against the exact solution, and the loss / error curves.

1-D problems get line plots, 2-D problems images over the domain's bounding box (points outside
the domain blank), 3-D problems the same images on the mid-plane x = const (the y-z plane).

The solution plot draws the medium over the field when it varies (a callable or
:class:`~helmpinn.problems.media.GridField` ``kappa`` or ``velocity``): contour lines of the velocity when
the problem was given one, else of the local wavenumber ``k(x) = sqrt(Re κ(x))`` (in 1-D a line on
a second axis). A homogeneous medium draws none.

Every file is written to a temporary file in the same folder and then moved over the target, so
an existing figure is replaced only by a whole one.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Mapping

import numpy as np

from ._files import write_atomic
from .models.model import Model
from .problems import Problem

__all__ = ["solution_figure", "history_figure", "plot_solution", "plot_error", "plot_history", "plot_all",
           "save_figure"]


def _figure(nrows: int = 1, ncols: int = 1, sharex: bool = False, **kw):
    """A matplotlib Figure outside pyplot (no GUI backend, freed by the garbage collector) and
    its axes [nrows, ncols]."""
    from matplotlib.figure import Figure

    fig = Figure(**kw)
    return fig, fig.subplots(nrows, ncols, sharex=sharex, squeeze=False)


def save_figure(fig, path: str | os.PathLike, dpi: int = 110) -> str:
    """Writes ``fig`` as a PNG to ``path`` (atomically: :func:`helmpinn._files.write_atomic`)."""
    return write_atomic(path, lambda fh: fig.savefig(fh, format="png", dpi=dpi))


def _display_name(problem: Problem) -> str:
    """The problem's name for a title: a user's ``/abs/path/file.py:make`` as ``file.py:make``
    (the path, kept in the name so that a resumed run finds the file, would not fit a title)."""
    where, colon, factory = problem.name.rpartition(":")
    if colon and (where.endswith(".py") or "/" in where or os.sep in where):
        return f"{os.path.basename(where)}:{factory}"
    return problem.name


def _medium(problem: Problem, x: np.ndarray) -> tuple[np.ndarray, str] | None:
    """(the medium's values at x, their name) when it varies over x: the velocity when the problem
    was given one, else the local wavenumber sqrt(Re κ); None for a homogeneous medium."""
    velocity = getattr(problem, "velocity", None)
    if callable(velocity):
        values, name = np.asarray(velocity(x), np.float64), "velocity"
    elif callable(problem.kappa):
        values, name = problem.local_wavenumber(x), "local wavenumber"
    else:
        return None
    spread = np.ptp(values) if len(values) else 0.0
    return (values, name) if spread > 1e-9 * max(float(np.max(np.abs(values))), 1e-300) else None


def _slice_grid(problem: Problem, n: int):
    """A 2-D grid over the bounding box (in 3-D the mid-plane of the first axis, spanned by the
    other two): (points [n*n, d], inside mask, extent, axis labels, title suffix)."""
    lo, hi = problem.domain.bounds
    axes = (0, 1) if problem.dim == 2 else (1, 2)
    a = np.linspace(lo[axes[0]], hi[axes[0]], n)
    b = np.linspace(lo[axes[1]], hi[axes[1]], n)
    A, B = np.meshgrid(a, b, indexing="xy")
    pts = np.empty((A.size, problem.dim))
    pts[:, axes[0]] = A.ravel()
    pts[:, axes[1]] = B.ravel()
    title = ""
    if problem.dim == 3:
        xmid = 0.5 * (lo[0] + hi[0])
        pts[:, 0] = xmid
        title = f" (slice x = {xmid:g})"
    inside = problem.domain.contains(pts)
    labels = tuple("xyz"[i] for i in axes)
    extent = (lo[axes[0]], hi[axes[0]], lo[axes[1]], hi[axes[1]])
    return pts, inside, extent, labels, title


def _evaluate(problem: Problem, model: Model, n: int | None):
    """(kind, coordinates, predicted u, exact u or None, mask/extent/title)."""
    if problem.dim == 1:
        lo, hi = problem.domain.bounds
        x = np.linspace(lo[0], hi[0], n or 1001)[:, None]
        u = model.predict(x)
        ue = problem.exact_at(x) if problem.exact is not None else None
        return x[:, 0], u, ue, None
    n = n or (201 if problem.dim == 2 else 101)
    pts, inside, extent, labels, title = _slice_grid(problem, n)
    u = np.full(len(pts), np.nan + 0j)
    u[inside] = model.predict(pts[inside])
    ue = None
    if problem.exact is not None:
        ue = np.full(len(pts), np.nan + 0j)
        ue[inside] = problem.exact_at(pts[inside])
    return (n, extent, labels, title, pts), u, ue, inside


def _image(ax, fig, values, n, extent, labels, title, cmap="RdBu_r", vmax=None):
    """An image; with ``vmax`` a symmetric colour scale [-vmax, vmax]."""
    img = values.reshape(n, n)
    im = ax.imshow(img, origin="lower", extent=extent, cmap=cmap, aspect="equal",
                   vmin=None if vmax is None else -vmax, vmax=vmax)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    fig.colorbar(im, ax=ax, shrink=0.8)


def solution_figure(problem: Problem, model: Model, n: int | None = None):
    """The matplotlib ``Figure`` of :func:`plot_solution`: real and imaginary parts of the PINN
    solution (and of the exact one when known), with the medium drawn over them when it varies
    (the module docstring)."""
    coords, u, ue, inside = _evaluate(problem, model, n)
    if problem.dim == 1:
        fig, axes = _figure(2, 1, figsize=(7, 5), sharex=True)
        for ax, part, name in ((axes[0, 0], np.real, "Re u"), (axes[1, 0], np.imag, "Im u")):
            if ue is not None:
                ax.plot(coords, part(ue), "k-", lw=2.5, alpha=0.35, label="exact")
            ax.plot(coords, part(u), "C0-", lw=1.2, label="PINN")
            ax.set_ylabel(name)
            ax.legend(loc="upper right", fontsize=8)
        axes[1, 0].set_xlabel("x")
        medium = _medium(problem, coords[:, None])
        if medium is not None:
            twin = axes[0, 0].twinx()
            twin.plot(coords, medium[0], color="0.4", ls=":", lw=1.2, label=medium[1])
            twin.set_ylabel(medium[1], color="0.4")
    else:
        npx, extent, labels, title, pts = coords
        rows = [("PINN", u)] + ([("exact", ue)] if ue is not None else [])
        # one colour scale for every panel, so that the parts compare honestly
        vmax = max(float(np.nanmax(np.abs(np.concatenate([v.real, v.imag])))) for _, v in rows) or 1.0
        medium = _medium(problem, pts[inside])
        if medium is not None:
            grid = np.full(len(pts), np.nan)
            grid[inside] = medium[0]
            title += f"; contours: {medium[1]}"
        fig, axes = _figure(len(rows), 2, figsize=(9, 4 * len(rows)))
        for r, (label, vals) in enumerate(rows):
            for c, (part, name) in enumerate(((vals.real, "Re u"), (vals.imag, "Im u"))):
                _image(axes[r, c], fig, part, npx, extent, labels, f"{name}, {label}{title}", vmax=vmax)
                if medium is not None:
                    _contours(axes[r, c], grid.reshape(npx, npx), extent)
    fig.suptitle(f"{_display_name(problem)}: solution")
    fig.tight_layout()
    return fig


def _contours(ax, values: np.ndarray, extent) -> None:
    """Contour lines of the medium over an image (6 levels, labelled)."""
    a = np.linspace(extent[0], extent[1], values.shape[1])
    b = np.linspace(extent[2], extent[3], values.shape[0])
    lines = ax.contour(a, b, values, levels=6, colors="k", linewidths=0.7, alpha=0.6)
    ax.clabel(lines, fontsize=6, fmt="%.3g")


def plot_solution(problem: Problem, model: Model, path: str | os.PathLike, n: int | None = None) -> str:
    """Real and imaginary parts of the PINN solution (and of the exact one when known), with the
    medium drawn over them when it varies (:func:`solution_figure`), written to ``path`` (PNG)."""
    return save_figure(solution_figure(problem, model, n), path)


def plot_error(problem: Problem, model: Model, path: str | os.PathLike, n: int | None = None) -> str | None:
    """|u - u_exact| (None when the problem has no exact solution)."""
    if problem.exact is None:
        return None
    coords, u, ue, inside = _evaluate(problem, model, n)
    err = np.abs(u - ue)
    if problem.dim == 1:
        fig, axes = _figure(figsize=(7, 3.5))
        ax = axes[0, 0]
        ax.semilogy(coords, np.maximum(err, 1e-16), "C3-")
        ax.set_xlabel("x")
        ax.set_ylabel("|u - u_exact|")
    else:
        npx, extent, labels, title, _ = coords
        fig, axes = _figure(figsize=(5.5, 4.5))
        _image(axes[0, 0], fig, err, npx, extent, labels, f"|u - u_exact|{title}", cmap="viridis")
    ref = np.nansum(np.abs(ue) ** 2)
    what = (f"relative L2 {np.sqrt(np.nansum(err**2) / ref):.2e}" if ref > 0 else
            f"root mean square {np.sqrt(np.nanmean(err**2)):.2e}, the exact field being 0")
    fig.suptitle(f"{_display_name(problem)}: error ({what} on this grid)", fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_history(history: Mapping[str, Any], path: str | os.PathLike) -> str:
    """:func:`history_figure` written to ``path`` (PNG)."""
    return save_figure(history_figure(history), path)


def _time_axis(ax, history: Mapping[str, Any]) -> None:
    """A second x axis above ``ax``: the training seconds at its steps, read from the
    evaluations' times (``eval_step``, ``eval_time``; interpolated between them, step 0 at 0 s);
    none without two evaluations at increasing steps and times."""
    steps = np.asarray(history.get("eval_step", []), dtype=float)
    times = np.asarray(history.get("eval_time", []), dtype=float)
    if len(steps) != len(times) or len(steps) < 2 or not np.all(np.isfinite(times)):
        return
    if steps[0] > 0 and times[0] > 0:
        steps, times = np.concatenate([[0.0], steps]), np.concatenate([[0.0], times])
    if not (np.all(np.diff(steps) > 0) and np.all(np.diff(times) > 0)):
        return
    top = ax.secondary_xaxis("top", functions=(lambda s: np.interp(s, steps, times),
                                               lambda t: np.interp(t, times, steps)))
    top.set_xlabel("training time (s)", fontsize=8)
    top.tick_params(labelsize=8)


def history_figure(history: Mapping[str, Any]):
    """Loss terms per step, the validation loss and the relative L2 error at the evaluation
    steps, each panel with the training time along its top (:func:`_time_axis`)."""
    errors = [np.nan if e is None else e for e in history.get("eval_error", [])]
    has_err = bool(np.any(np.isfinite(np.asarray(errors, dtype=float))))
    fig, axes = _figure(1, 2 if has_err else 1, figsize=(11 if has_err else 6, 4))
    ax = axes[0, 0]
    steps = np.asarray(history.get("step", []))
    for key, style in (("loss", "k-"), ("pde", "C0-"), ("data", "C1-"), ("bc", "C2-")):
        vals = np.asarray(history.get(key, []), dtype=float)
        if len(vals) and np.any(vals > 0):
            ax.semilogy(steps, np.where(vals > 0, vals, np.nan), style, lw=1,
                        label={"loss": "total (weighted)"}.get(key, key))
    val = np.asarray([np.nan if v is None else v for v in history.get("eval_val_loss", [])], dtype=float)
    if len(val) == len(history.get("eval_step", [])) and np.any(val > 0):
        ax.semilogy(history["eval_step"], np.where(val > 0, val, np.nan), "C4o--", ms=3, lw=1,
                    label="validation (weighted)")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    if has_err:
        ax = axes[0, 1]
        ax.semilogy(history["eval_step"], errors, "C3o-", ms=3)
        ax.set_xlabel("step")
        ax.set_ylabel("relative L2 error")
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[0]:
        _time_axis(ax, history)
    fig.tight_layout()
    return fig


def plot_all(problem: Problem, model: Model, history: Mapping[str, Any], out_dir: str | os.PathLike
             ) -> list[str]:
    """solution.png, error.png (with an exact solution) and history.png in ``out_dir``."""
    out_dir = os.fspath(out_dir)
    os.makedirs(out_dir, exist_ok=True)
    files = [plot_solution(problem, model, os.path.join(out_dir, "solution.png"))]
    err = plot_error(problem, model, os.path.join(out_dir, "error.png"))
    if err:
        files.append(err)
    files.append(plot_history(history, os.path.join(out_dir, "history.png")))
    return files
