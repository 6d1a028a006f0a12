"""A Trainer's checkpoints and last good state: writing them (:class:`Checkpoints`), the
metadata check made when the Trainer is made (:func:`check_metadata`), the state kept to go back
to on a non-finite loss (:func:`snapshot`, :func:`restore`), the optimiser state a checkpoint
stores (:func:`optimizer_state`) and the sampler put back for a resumed run
(:func:`resume_sampler`)."""
from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _device, _signature
from ..models.model import _json_default
from ..problems.registry import recorded_options

if TYPE_CHECKING:
    from .trainer import Trainer


def params_finite(trainer: "Trainer") -> bool:
    """Every parameter finite (on a GPU: checked on a host copy)."""
    return bool(np.all(np.isfinite(_device.to_host(trainer.model.params))))


def optimizer_state(trainer: "Trainer") -> dict[str, Any]:
    """The state a checkpoint stores: the driver's (else the Adam's), and the run's ``step``
    unless the driver keeps its own count under that name (Adam does)."""
    if trainer.driver is not None:
        state = trainer.driver.state_dict()
    else:
        state = trainer._adam.state_dict()
    return {"step": trainer.step, **state}


def snapshot(trainer: "Trainer") -> None:
    """Keeps the last good state on the host (parameters and optimiser state copied)."""
    state = trainer.driver.state_dict() if trainer.driver is not None else {}
    trainer._good = (trainer.step, trainer.model.params_host(),
                     {k: (v.copy() if isinstance(v, np.ndarray) else _device.to_host(v))
                      for k, v in state.items()})


def restore(trainer: "Trainer") -> int:
    """Go back to the last good state (:func:`snapshot`); returns its step."""
    step, params, state = trainer._good
    trainer.model.set_params(params)
    if trainer.driver is not None:
        trainer.driver.load_state_dict(state)
    trainer.step = step
    trainer.model.optimizer_state = optimizer_state(trainer)
    return step


def resume_sampler(trainer: "Trainer") -> None:
    """Put the sampler back where a checkpoint's run drew its current points (so a resumed
    run trains on the same points); without a usable record, fresh points are drawn."""
    state = trainer.model.metadata.get("sampler")
    if not isinstance(state, dict) or state.get("bit_generator") != type(trainer.rng.bit_generator).__name__:
        return
    try:
        trainer.rng.bit_generator.state = state
    except (TypeError, ValueError, KeyError):
        return
    points = trainer.model.metadata.get("grown_points")
    if isinstance(points, (list, tuple)) and len(points) == 2 and all(
            isinstance(n, (int, np.integer)) and n > 0 for n in points):
        trainer.pde_points, trainer.bc_points = int(points[0]), int(points[1])   # grown during that run
        trainer._grown = True
    trainer.batch = None


class Checkpoints:
    """A Trainer's checkpoints: ``step``, of the last one written (None: none yet); ``failed``,
    why the last one could not be written (None once a later one is); the problem's
    ``fingerprint`` (:mod:`helmpinn._signature`, taken once), which a resumed run compares its
    problem with.

    A write that fails with an OSError is one line on stderr (rank 0) and the run goes on; under
    MPI every rank learns the outcome from rank 0, and any other exception there is raised on
    every rank."""

    def __init__(self) -> None:
        self.step: int | None = None
        self.failed: str | None = None
        self.fingerprint: dict[str, Any] | None = None
        self._periodic = False

    def metadata(self, trainer: "Trainer") -> dict[str, Any]:
        """The checkpoint's metadata: the model's, the problem's record (its name, the options
        it is rebuilt with, those JSON cannot hold by repr: :func:`helmpinn.problems.registry.recorded_options`),
        the step, the sampler's state and the problem's fingerprint."""
        if self.fingerprint is None:
            self.fingerprint = _signature.record(trainer.problem) or {}
        options, by_repr = recorded_options(dict(getattr(trainer.problem, "options", None) or {}))
        meta = {**trainer.model.metadata, "problem": trainer.problem.name, "problem_options": options,
                "step": trainer.step, "last_error": trainer.last_error, "sampler": trainer._draw_state,
                "problem_signature": self.fingerprint}
        if by_repr:
            meta["problem_options_by_repr"] = by_repr
        if trainer._grown:   # the counts of the current draw, for a resumed run to draw it again
            meta["grown_points"] = [trainer.pde_points, trainer.bc_points]
        return meta

    def write(self, trainer: "Trainer", path: str) -> None:
        """Write the checkpoint (rank 0) and record the outcome on every rank."""
        failed, why = None, None
        if trainer.rank == 0:
            try:
                trainer.model.save(path, optimizer_state=optimizer_state(trainer),
                                   metadata=self.metadata(trainer))
            except OSError as exc:   # the run goes on; the next checkpoint tries again
                why = exc.strerror or str(exc)
            except Exception as exc:
                if trainer.comm is None:
                    raise
                failed = exc
        if trainer.comm is not None:
            failed_anywhere, why = trainer.comm.bcast((failed is not None, why), root=0)
            if failed_anywhere:
                if failed is not None:
                    raise failed
                raise RuntimeError(f"rank 0 could not write the checkpoint {path!r}")
        if why is None:
            self.failed, self.step = None, trainer.step
            return
        kept = "no checkpoint of this run was written yet" if self.step is None else \
            f"{path} keeps step {self.step}"
        self.failed = f"could not write the checkpoint {path} at step {trainer.step} ({why}); {kept}"
        if trainer.rank == 0:
            going_on = "; training goes on and the next checkpoint tries again" if self._periodic else ""
            print(f"\nhelmpinn: {self.failed}{going_on}", file=sys.stderr, flush=True)

    def periodic(self, trainer: "Trainer") -> bool:
        """The checkpoint every ``checkpoint_every`` steps (a failed write is said to be retried)."""
        self._periodic = True
        try:
            return trainer.save_checkpoint()
        finally:
            self._periodic = False


def check_metadata(model: Any) -> None:
    """A checkpoint's metadata must be writable: checked when the Trainer is made, so that
    no run fails at its first checkpoint (or its last) on a value JSON cannot hold."""
    try:
        json.dumps(model.metadata, default=_json_default)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"checkpoint_path: the model's metadata cannot be written to a checkpoint ({exc}); "
                         f"keep it to numbers, strings, lists and dicts") from None
