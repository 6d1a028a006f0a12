"""What a ``helmpinn train`` run leaves in its output folder and says at its end: the report
(``metrics.json``: settings, times, the final error and losses, the history, each optimiser's
summary), the figures, and the one line on stderr with the exit status: 0, 1 when the run
diverged or its last checkpoint or report could not be written, 130 or 143 when Ctrl-C or
SIGTERM stopped it. Every file is written whole (a temporary file renamed into place); the
previous run's files this run did not replace are removed only once this run has its model,
and a new run that diverged before its first checkpoint leaves a previous run's model and
report as they were (its own report goes to ``diverged-metrics.json``)."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from .. import _core, runfiles
from ..plots import plot_all
from ..training.drivers import LMDriver
from .runs import INTERRUPTED, TERMINATED, have_matplotlib, write_report

if TYPE_CHECKING:
    from .train import Run, Trained

__all__ = ["OUTPUTS", "ALL_OUTPUTS", "FIGURES", "make_metrics", "finish", "write_outputs"]

#: The files ``helmpinn train`` writes into its output folder (a new run replaces old ones).
OUTPUTS = ("model.npz", "metrics.json", "solution.png", "error.png", "history.png")
FIGURES = ("solution.png", "error.png", "history.png")
#: The report of a new run that diverged before its first checkpoint, beside a previous run's
#: model and report (which stay).
DIVERGED_REPORT = "diverged-metrics.json"
ALL_OUTPUTS = OUTPUTS + (DIVERGED_REPORT,)


def make_metrics(run: Run, trained: Trained, error: float | None, wall: float) -> dict[str, Any]:
    """The report (metrics.json) of the run; ``error``: the final relative L2 error of this
    run's model (None without one)."""
    trainer, settings, history = run.trainer, run.settings, trained.history
    main_time, main_steps = trained.main_time, trained.main_steps
    return {
        "settings": settings,
        "num_params": run.model.num_params,
        "steps": main_steps,
        "final_step": trainer.step,
        "resumed_from_step": run.done or None,
        "stop_reason": trainer.stop_reason,
        "status": None if trainer.status is None else trainer.status.name,
        "diverged": trainer.diverged,
        "interrupted": trained.interrupted,
        "train_time_s": trainer.train_time,
        "main_time_s": main_time,
        "adam_time_s": main_time if settings.get("optimizer", "adam") == "adam" else None,
        "steps_per_s": main_steps / main_time if main_time > 0 else None,
        "wall_time_s": wall,
        "final": {"relative_l2": error,
                  "loss": history.loss[-1] if history.loss else None,
                  "pde": history.pde[-1] if history.pde else None,
                  "data": history.data[-1] if history.data else None,
                  "bc": history.bc[-1] if history.bc else None},
        "time_to_1e-2_s": _time_to(history, 1e-2),
        "lbfgs": trained.polish,
        "lm": _lm_summary(trainer),
        "gn": trainer.driver.summary() if getattr(trainer.driver, "name", None) == "gn" else None,
        "history": history.as_dict(),
        "version": getattr(_core, "__version__", None),
    }


def finish(run: Run, metrics: dict[str, Any], trained: Trained, error: float | None, *, have_model: bool,
           terminated: bool) -> int:
    """Rank 0 writes the report and the figures and says how the run ended (``error``: the
    final relative L2 error); the exit status."""
    trainer, settings, out = run.trainer, run.settings, run.out
    try:
        status = write_outputs(run.folder, metrics, run.problem, run.model, trained.history.as_dict(),
                               have_model=have_model, kept_previous=not have_model and run.before is not None,
                               plots=not run.args.no_plots)
    except OSError as exc:   # a full disk: said in one line, the files already there left whole
        print(f"helmpinn: could not write the report or the figures in {out} ({exc.strerror or exc}); "
              f"{_model_state(run)}", file=sys.stderr)
        return 1
    metrics_path = os.path.join(out, status["report"])
    if trainer.checkpoints.failed and not trainer.diverged:
        print(f"helmpinn: the run's last checkpoint was not written: {trainer.checkpoints.failed}; wrote "
              f"{metrics_path}", file=sys.stderr)
        return 1
    if trainer.diverged:
        kept = (f"kept the last good checkpoint {run.model_path} (step {trainer.step})" if have_model else
                "no model was written (no checkpoint before the divergence; --checkpoint-every N keeps one)")
        if status["kept_previous"]:
            kept += f"; the previous run's {', '.join(status['kept_previous'])} in {out} are left as they were"
        print(f"helmpinn: training diverged: {trainer.stop_reason}; {kept}; wrote {metrics_path}. "
              f"A smaller --lr (this run: {settings['lr']:g}) may help", file=sys.stderr)
        return 1
    if trained.interrupted:
        how = "terminated" if terminated else "interrupted"
        print(f"helmpinn: {how} at step {trainer.step} of {settings['steps']}; wrote {run.model_path}, "
              f"{metrics_path}; continue with: helmpinn train --resume {out}", file=sys.stderr)
        return TERMINATED if terminated else INTERRUPTED
    if not run.quiet:
        err_s = "n/a" if error is None else f"{error:.3e}"
        print(f"helmpinn: relative L2 error {err_s} after {trainer.step} steps, "
              f"{trainer.train_time:.1f} s ({_rate(metrics['steps_per_s'])}); "
              f"wrote {run.model_path}, {metrics_path}"
              + "".join(f", {f}" for f in status["figures"])
              + (f"; removed the previous run's {', '.join(status['removed'])}" if status["removed"] else ""),
              file=sys.stderr)
    return TERMINATED if terminated else 0


def _model_state(run: Run) -> str:
    """Which model the output folder holds, in words, after a write failed."""
    trainer = run.trainer
    if trainer.checkpoints.failed:
        return trainer.checkpoints.failed
    if trainer.checkpoints.step is not None:
        return f"{run.model_path} holds step {trainer.checkpoints.step}"
    return "this run wrote no model"


def write_outputs(folder: runfiles.RunFolder, metrics: dict[str, Any], problem, model, history,
                  *, have_model: bool, kept_previous: bool, plots: bool) -> dict[str, Any]:
    """The report and the figures, each written atomically; then the previous run's files this
    run did not replace are removed (only once this run has its model). A new run without a
    model beside a previous run's model leaves that run's files as they are and writes its
    report to ``diverged-metrics.json``."""
    report = DIVERGED_REPORT if kept_previous else "metrics.json"
    write_report(folder, report, metrics)
    figures = _write_figures(folder, problem, model, history) if plots and have_model else []
    written = {"model.npz", report, *map(os.path.basename, figures)}
    removed = folder.remove(n for n in ALL_OUTPUTS if n not in written) if have_model else []
    folder.record("model.npz")  # as it is now (no longer claimed by a running run)
    kept = [n for n in OUTPUTS if kept_previous and n not in written and folder.owns(n)]
    return {"report": report, "figures": figures, "removed": removed,
            "kept_previous": ["model.npz", *kept] if kept_previous else []}


def _rate(steps_per_s: float | None) -> str:
    """"1234 steps/s", or "5.5 s/step" for the slow steps of L-BFGS and LM."""
    if not steps_per_s:
        return "n/a steps/s"
    return f"{steps_per_s:.0f} steps/s" if steps_per_s >= 10 else f"{1.0 / steps_per_s:.2g} s/step"


def _lm_summary(trainer) -> dict[str, Any] | None:
    """The report of the run's Levenberg-Marquardt driver (None when LM did not run)."""
    return trainer.driver.summary() if isinstance(trainer.driver, LMDriver) else None


def _time_to(history, tol: float) -> float | None:
    """The time of the first evaluation with an error below ``tol`` (None: none was)."""
    for t, e in zip(history.eval_time, history.eval_error):
        if e is not None and e < tol:
            return t
    return None


def _write_figures(folder: runfiles.RunFolder, problem, model, history) -> list[str]:
    """The figures, drawn into a temporary folder in OUT and each renamed into place."""
    if not have_matplotlib("no figures were written"):
        return []
    tmp = folder.figure_dir()
    try:
        return [folder.replace(os.path.basename(f), f) for f in plot_all(problem, model, history, tmp)]
    finally:
        runfiles.remove_tree(tmp)
