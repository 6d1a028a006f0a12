"""PNG figures with matplotlib (Agg backend): the solution's real and imaginary parts, the error
against the exact solution, and the loss / error curves.

1-D problems get line plots, 2-D problems images over the domain's bounding box (points outside
the domain blank), 3-D problems the same images on the mid-plane x = const (the y-z plane).
"""
from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np

from .model import Model
from .problems import Problem

__all__ = ["plot_solution", "plot_error", "plot_history", "plot_all"]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


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
    return (n, extent, labels, title), u, ue, inside


def _image(ax, fig, values, n, extent, labels, title, cmap="RdBu_r", vmax=None):
    """An image; with ``vmax`` a symmetric colour scale [-vmax, vmax]."""
    img = values.reshape(n, n)
    im = ax.imshow(img, origin="lower", extent=extent, cmap=cmap, aspect="equal",
                   vmin=None if vmax is None else -vmax, vmax=vmax)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    fig.colorbar(im, ax=ax, shrink=0.8)


def plot_solution(problem: Problem, model: Model, path: str | os.PathLike, n: int | None = None) -> str:
    """Real and imaginary parts of the PINN solution (and of the exact one when known)."""
    plt = _pyplot()
    coords, u, ue, inside = _evaluate(problem, model, n)
    if problem.dim == 1:
        fig, axes = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
        for ax, part, name in ((axes[0], np.real, "Re u"), (axes[1], np.imag, "Im u")):
            if ue is not None:
                ax.plot(coords, part(ue), "k-", lw=2.5, alpha=0.35, label="exact")
            ax.plot(coords, part(u), "C0-", lw=1.2, label="PINN")
            ax.set_ylabel(name)
            ax.legend(loc="upper right", fontsize=8)
        axes[1].set_xlabel("x")
        fig.suptitle(f"{problem.name}: solution")
    else:
        npx, extent, labels, title = coords
        rows = [("PINN", u)] + ([("exact", ue)] if ue is not None else [])
        # one colour scale for every panel, so that the parts compare honestly
        vmax = max(float(np.nanmax(np.abs(np.concatenate([v.real, v.imag])))) for _, v in rows) or 1.0
        fig, axes = plt.subplots(len(rows), 2, figsize=(9, 4 * len(rows)), squeeze=False)
        for r, (label, vals) in enumerate(rows):
            _image(axes[r, 0], fig, vals.real, npx, extent, labels, f"Re u, {label}{title}", vmax=vmax)
            _image(axes[r, 1], fig, vals.imag, npx, extent, labels, f"Im u, {label}{title}", vmax=vmax)
        fig.suptitle(f"{problem.name}: solution")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)


def plot_error(problem: Problem, model: Model, path: str | os.PathLike, n: int | None = None) -> str | None:
    """|u - u_exact| (None when the problem has no exact solution)."""
    if problem.exact is None:
        return None
    plt = _pyplot()
    coords, u, ue, inside = _evaluate(problem, model, n)
    err = np.abs(u - ue)
    if problem.dim == 1:
        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.semilogy(coords, np.maximum(err, 1e-16), "C3-")
        ax.set_xlabel("x")
        ax.set_ylabel("|u - u_exact|")
    else:
        npx, extent, labels, title = coords
        fig, ax = plt.subplots(figsize=(5.5, 4.5))
        _image(ax, fig, err, npx, extent, labels, f"|u - u_exact|{title}", cmap="viridis")
    rel = np.sqrt(np.nansum(err**2) / np.nansum(np.abs(ue) ** 2))
    fig.suptitle(f"{problem.name}: error (relative L2 {rel:.2e} on this grid)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)


def plot_history(history: Mapping[str, Any], path: str | os.PathLike) -> str:
    """Loss terms per step, the validation loss and the relative L2 error at the evaluation steps."""
    plt = _pyplot()
    errors = [np.nan if e is None else e for e in history.get("eval_error", [])]
    has_err = bool(np.any(np.isfinite(np.asarray(errors, dtype=float))))
    fig, axes = plt.subplots(1, 2 if has_err else 1, figsize=(11 if has_err else 6, 4), squeeze=False)
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
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return os.fspath(path)


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
