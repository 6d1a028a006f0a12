"""``helmpinn train``: one run, from the command line to its report.

``helmpinn train`` builds a built-in problem (or a user's, ``--problem path/to/file.py:make``:
:func:`helmpinn.problems.registry.get_problem`) with the options given as ``--NAME VALUE`` (a user's
factory's keyword options too; an option the problem does not take is refused naming those it
does), trains a model with settings derived from the problem (the optimiser and the model
:func:`helmpinn.solve` picks, unless ``--optimizer`` names one: the run plan of
:func:`helmpinn.run_plan`, whose fields the flags override through one table,
:data:`~helmpinn.cli.train_options.FLAG_FIELDS`) and writes
``OUT/model.npz``, ``OUT/metrics.json`` and PNG figures (``solution.png``, ``error.png``,
``history.png``).

Every option is checked before anything is written: numbers must be finite and in range (a
problem's own options included; ``--threads`` at most 4 times the CPUs this process may use),
and the memory the run needs (the points arrays, the training set, the core's workspace, the
parameters, LM's matrices: :func:`helmpinn.memory.network_run`; a decomposed run's:
:func:`helmpinn.memory.decomposed_run`) must be within :func:`helmpinn.memory.limit` (80% of the
memory available, or ``HELMPINN_MEMORY_LIMIT``), or the run is refused naming the sizes. Misuse
exits with status 2 and one line on stderr. The output folder (:mod:`helmpinn.runfiles`) is then created and tried for writing and
locked for the whole run (``OUT/.helmpinn.lock``): a second run into the same folder, ``--resume``
included, is refused (status 2) without touching anything.

No work is lost, however a run stops. Every file is written to a temporary file in OUT and
renamed into place; the previous run's model, report and figures stay until this run has its
model (the first checkpoint), and then only the previous files this run did not replace are
removed. A checkpoint that cannot be written (a full disk) is one line, the file keeps the last
good one and the next checkpoint tries again; a run whose last checkpoint or report could not be
written exits with status 1 saying so. Only files helmpinn wrote are ever replaced or removed:
``OUT/.helmpinn-manifest.json`` records them, and a file under one of helmpinn's names that it
did not write (a user's own ``metrics.json``, a directory named ``model.npz``) makes the run
stop before training with a message naming it; temporary files are removed only under the
exact names helmpinn gives them.
Ctrl-C (SIGINT) stops after the current step, saves the checkpoint and the report and exits
with status 130; SIGTERM (how batch schedulers stop a job) does the same and exits with status
143 (in a single process; under MPI it ends the job as it always has). ``helmpinn train --resume
OUT`` continues that run with its saved settings (its ``--device`` included), keeping its
history; a run of a user's own factory resumes only with ``--problem`` naming that factory again
(a run folder is data: nothing it names is imported or called on its word alone). ``--device
cuda`` trains on the first GPU; without a CUDA build or a visible GPU, or with ``--optimizer lm``
(CPU only), it is refused (status 2) before anything is written. A run
that diverges (non-finite loss or parameters) keeps the last good checkpoint and exits with
status 1; without a checkpoint it writes no model, and a previous run's model in OUT stays with
its report (this run's report then goes to ``diverged-metrics.json``).

This module holds the run's course (its set-up, the training, the hand-over to the report);
its options are :mod:`helmpinn.cli.train_options`, what a new run trains
:mod:`helmpinn.cli.train_settings`, ``--resume`` :mod:`helmpinn.cli.train_resume`, the report
and exit status :mod:`helmpinn.cli.train_report`.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from typing import Any, NamedTuple

from .. import _core, distributed, runfiles
from ..problems.jumps import training_problem
from ..problems.waves import resonance_warning
from ..training.plan import RunPlan, polish as polish_phase, train
from . import train_options, train_resume, train_settings
from .agreement import CHECKS, agreed
from .runs import UsageError, check_outputs, lock, prepare_out, stop_on_sigterm
from .train_report import ALL_OUTPUTS, FIGURES, finish, make_metrics

__all__ = ["command", "Run", "Trained"]


class Run:
    """One ``helmpinn train``: where it runs (``comm``, ``rank`` of ``ranks``), what it trains
    (settings, problem, model, trainer; ``done``: the step a resumed run continues from, 0 for
    a new one) and where it writes (``out``; rank 0's locked ``folder``; ``before``: the
    signature of the previous run's model there, kept until this run replaces it)."""

    def __init__(self, args: argparse.Namespace, comm: Any):
        self.args, self.comm = args, comm
        self.rank, self.ranks = (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())
        self.quiet = args.quiet or self.rank != 0  # rank 0 alone prints, writes files and holds the lock
        self.settings: dict[str, Any] = {}
        self.problem = self.model = self.trainer = None
        self.done, self.out = 0, ""
        self.folder: runfiles.RunFolder | None = None
        self.before: Any = None
        self.same_run = False

    @property
    def model_path(self) -> str:
        return os.path.join(self.out, "model.npz")


class Trained(NamedTuple):
    """What the training part of a run did: its history, the L-BFGS summary, the optimiser's
    own time and steps (before any --lbfgs polish), and whether a stop request ended it."""

    history: Any
    polish: dict[str, Any] | None
    main_time: float
    main_steps: int
    interrupted: bool


def command(args: argparse.Namespace, held: contextlib.ExitStack) -> int:
    """``helmpinn train`` with the parsed ``args`` (the output folder's lock and the SIGTERM
    handler held until ``held`` closes); the exit status."""
    t_start = time.perf_counter()
    try:  # under mpiexec / srun: data-parallel over the ranks (helmpinn.distributed)
        run = Run(args, distributed.launch_comm())
    except RuntimeError as exc:
        print(f"helmpinn: {exc}", file=sys.stderr)
        return 2
    if not _set_up(run, held):
        return 2
    _announce(run)
    terminated = held.enter_context(stop_on_sigterm(run.trainer)) if run.ranks == 1 else []
    try:
        trained = _train(run)
    except ValueError as exc:  # non-finite training data, named by the core
        print(f"helmpinn: {exc}", file=sys.stderr)
        if run.folder is not None:
            run.folder.record("model.npz")
        return 1
    error = run.trainer.evaluate()
    wall = time.perf_counter() - t_start  # set-up, training and polish; not the figures
    # This run's model: the resumed run's checkpoint, or one this run wrote (a diverged new
    # run may have none; a previous run's model then stays where it was)
    have_model = run.folder is not None and (bool(run.done) or run.folder.signature("model.npz") != run.before)
    metrics = make_metrics(run, trained, error if have_model else None, wall)
    if run.rank != 0:  # rank 0 alone writes the report and the figures
        return 1 if run.trainer.diverged else 0
    return finish(run, metrics, trained, error, have_model=have_model, terminated=bool(terminated))


def _set_up(run: Run, held: contextlib.ExitStack) -> bool:
    """Every check, then rank 0 locks the output folder and claims its files, and the Trainer
    is built. False, after one line on stderr, when the command line is refused (on every rank
    when on one).

    Under MPI a usage error may come on one rank only (a factory whose data file is missing on
    one node): the ranks agree on the checks (:func:`~helmpinn.cli.agreement.agreed`) before any other collective
    (the count of the ranks on a node, the Trainer's comparison of the ranks' problems, its
    draw of points), so that every rank stops, with status 2, and rank 0 prints the failing
    rank's message."""
    def check() -> None:
        train_options.check_options(run.args)
        _resolve(run, held)
        train_settings.check_ranks(run.settings, run.ranks)
        train_settings.check_device(run.settings, run.ranks, run.args.resume)

    def build() -> None:
        if run.rank == 0 and run.folder is None:   # a new run's folder, once every rank's checks passed
            prepare_out(run.out)
            run.folder = lock(run.out, "--out", held)
        run.trainer = _make_trainer(run)
        if run.done:
            run.trainer.history, run.trainer.train_time, run.same_run = \
                train_resume.previous_history(run.out, run.done, run.settings)
            run.trainer.checkpoints.step = run.done   # the checkpoint resumed from is in OUT
        if run.folder is not None:
            _claim_outputs(run)

    failure = agreed(run.comm, check, CHECKS)
    if failure is None:
        _set_threads(run)   # a collective under MPI: every rank gets here, or none
        failure = agreed(run.comm, build, "helmpinn train: set-up")
    if failure is not None and run.rank == 0:
        print(f"helmpinn: {failure}", file=sys.stderr)
    return failure is None


def _resolve(run: Run, held: contextlib.ExitStack) -> None:
    """The run's settings, problem, model and output folder: from the command line, or from
    the checkpoint that ``--resume DIR`` continues (DIR locked first, on rank 0)."""
    args = run.args
    if args.resume is not None:
        train_resume.check(args, train_options.given(args))
        run.out = args.resume
        run.folder = lock(run.out, "--resume", held) if run.rank == 0 else None
        run.settings, run.problem, run.model, run.done = train_resume.resumed_run(args)
    else:
        run.settings, run.problem, run.model = train_settings.new_run(args)
        run.out = "helmpinn-out" if args.out is None else args.out


def _set_threads(run: Run) -> None:
    """--threads, else (under MPI) as many as keep ranks x threads within a node's cores."""
    if run.args.threads is not None:
        _core.set_num_threads(run.args.threads)
    elif run.comm is not None:
        _core.set_num_threads(distributed.threads_per_rank(run.comm))
    run.settings["threads"] = _core.get_num_threads()
    run.settings["ranks"] = run.ranks


def _make_trainer(run: Run):
    """The Trainer of the run's plan (:meth:`helmpinn.training.plan.RunPlan.trainer`),
    checkpointing to OUT/model.npz (the settings saved in the model's metadata, for --resume)."""
    s, model = run.settings, run.model
    model.metadata = {**model.metadata, "problem": run.problem.name,
                      "problem_options": train_settings.recorded(run.problem), "settings": s}
    try:
        # a medium's jumps smoothed, as hp.solve's default (helmpinn.problems.jumps)
        return RunPlan.from_record(s).trainer(
            training_problem(run.problem)[0], model, target_error=s["target"], time_limit=run.args.time_limit,
            checkpoint_every=s["checkpoint_every"], checkpoint_path=run.model_path, progress=not run.quiet,
            stop_on_interrupt=run.ranks == 1, comm=run.comm, device=s["device"])
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _claim_outputs(run: Run) -> None:
    """What this run writes must be helmpinn's to replace (the checkpoint, and the report of
    the run, being resumed are); stale temporary files go; model.npz is claimed for this run."""
    folder, done = run.folder, run.done
    adopt = ("model.npz", "metrics.json") if done and run.same_run else ("model.npz",) if done else ()
    writes = ALL_OUTPUTS if not run.args.no_plots else tuple(n for n in ALL_OUTPUTS if n not in FIGURES)
    check_outputs(folder, writes, adopt)
    folder.remove_stale_temps(ALL_OUTPUTS)
    run.before = folder.signature("model.npz")  # the previous run's model, kept until replaced
    folder.claim("model.npz")


def _announce(run: Run) -> None:
    """What the run trains, on stderr (rank 0, unless --quiet), and a note near a resonance."""
    if run.quiet:
        return
    what = f"resuming at step {run.done} of" if run.done else "training for"
    print(f"helmpinn: {run.problem!r}\nhelmpinn: {run.model!r}, {run.settings['threads']} threads, "
          f"{what} {run.settings['steps']} steps, {run.trainer.pde_points} + {run.trainer.bc_points} points"
          + (f", {run.ranks} MPI ranks" if run.ranks > 1 else "")
          + (f", until an error below {run.settings['target']:g} (--target)" if run.settings.get("target") else "")
          + (f", within {run.args.time_limit:g} s" if run.args.time_limit else ""), file=sys.stderr)
    words = resonance_warning(run.problem)
    if words:
        print(f"helmpinn: note: {words}", file=sys.stderr)


def _train(run: Run) -> Trained:
    """The optimiser (after its Adam warm start), then the --lbfgs polish unless the run
    diverged, reached its target or was stopped; --time-limit covers every phase."""
    trainer, plan = run.trainer, RunPlan.from_record(run.settings)
    limit, start = run.args.time_limit, trainer.clock()
    history, polish = train(trainer, plan, run.done, time_limit=limit, since=start)
    interrupted = trainer.stop_requested is not None
    main_time = trainer.train_time   # the optimiser's (Adam, L-BFGS or LM), before any --lbfgs polish
    main_steps = len(history.step)
    polish = polish_phase(trainer, plan, time_limit=limit, since=start) or polish   # checkpointed at its end
    return Trained(history, polish, main_time, main_steps, interrupted)
