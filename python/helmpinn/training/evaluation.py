"""A Trainer's evaluations: the relative L2 error on the test grid (:func:`grid_error`), the
loss on the fixed validation points (:func:`validation_loss`), and the two recorded in the
history with the target check (:func:`record_evaluation`)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import _core, _device, distributed
from .status import RunStatus

if TYPE_CHECKING:
    from .trainer import Trainer


def _norm(a: np.ndarray) -> float:
    # Elementwise NumPy, not np.linalg.norm: that calls the BLAS, whose worker threads then spin
    # for about 0.1 s (OpenBLAS) on the cores the next training steps need.
    return float(np.sqrt(np.sum(np.abs(a) ** 2)))


def relative_l2(u: np.ndarray, u_exact: np.ndarray) -> float:
    """``||u - u_exact|| / ||u_exact||`` (absolute error when ``u_exact`` is zero)."""
    num = _norm(u - u_exact)
    den = _norm(u_exact)
    return num / den if den > 0 else num


def grid_error(trainer: "Trainer") -> float | None:
    """Relative L2 error on the test grid (None without an exact solution)."""
    if trainer.u_test is None:
        return None
    err = None
    with distributed.collective(trainer.comm, "Trainer.evaluate"):
        if trainer.rank == 0:
            err = relative_l2(trainer.model.predict(trainer.x_test), trainer.u_test)
    if trainer.comm is not None:  # rank 0's, so that every rank takes the same decisions
        err = trainer.comm.bcast(err, root=0)
    trainer.last_error = err
    return err


def validation_loss(trainer: "Trainer") -> float | None:
    """The loss (the training weights) on the validation points: ``val_points`` interior and
    up to 128 boundary points, drawn uniformly once from a generator of their own (the
    training points' generator is not touched); None with ``val_points=0``. Every rank
    holds all of them and computes the same value."""
    if not trainer.val_points:
        return None
    if callable(trainer._val):   # a model that computes its own loss
        trainer.last_val_loss = trainer._val(trainer.model.params)
        return trainer.last_val_loss
    if trainer._val is None:
        seed = [int(trainer.seed)] if isinstance(trainer.seed, (int, np.integer)) else []
        rng = np.random.default_rng(np.random.SeedSequence([*seed, 0x76616C]))   # "val"
        ts = trainer.problem.sample(trainer.val_points, min(trainer.bc_points, 128), rng, "uniform")
        own = trainer.model.loss_function(ts, trainer.weights)   # None: the core's (helmpinn.models.model_protocol)
        if own is not None:   # a model that computes its own loss
            trainer._val = own
            return validation_loss(trainer)
        batch = ts.to_batch(trainer.model.dtype)
        if trainer.device != "cpu":
            batch = batch.to_device(trainer.device)
        # its own small workspace and gradient buffer: nothing of the training's is touched
        ws = _core.Workspace(trainer.model.spec, min(trainer._batch_size, trainer.val_points),
                             trainer.model.dtype.name, device=trainer.device)
        trainer._val = (batch, ws, _device.zeros(trainer.model.num_params, trainer.model.dtype, trainer.device))
    batch, ws, grad = trainer._val
    loss = float(ws.value_and_grad(trainer.model.params, grad, batch=batch, **trainer._loss_kw))
    trainer.last_val_loss = loss
    return loss


def record_evaluation(trainer: "Trainer", step: int, elapsed: float) -> None:
    """One evaluation into the history: the error (with an exact solution), the validation
    loss, the training time then; and the target check."""
    h = trainer.history
    h.eval_step.append(step)
    h.eval_error.append(trainer.evaluate())
    h.eval_time.append(elapsed)
    h.eval_val_loss.append(trainer.validation_loss())
    err, val = h.eval_error[-1], h.eval_val_loss[-1]
    loss = None
    if h.step and h.step[-1] == step:   # the points' part of the step's loss (StepInfo.fit_loss; a resumed run: the loss)
        loss = h.loss[-1] if trainer.last_fit_loss is None else trainer.last_fit_loss
    trainer.last_gap = val / loss if val is not None and loss and loss > 0 and math.isfinite(loss) else None
    if trainer.target_error is not None and err is not None and err < trainer.target_error:
        trainer.stop(RunStatus.TARGET_REACHED, f"target error {trainer.target_error:g} reached at step {step}")
    elif trainer.target_val_loss is not None and val is not None and val < trainer.target_val_loss:
        trainer.stop(RunStatus.TARGET_REACHED,
                     f"target validation loss {trainer.target_val_loss:g} reached at step {step}")
