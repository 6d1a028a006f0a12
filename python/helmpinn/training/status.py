"""Why a run stopped: :class:`RunStatus`, set by the run loop where the reason arises.

The loop (:class:`helmpinn.Trainer`) records a status with each stop, beside the stop's message
(``Trainer.stop_reason``, a sentence for people); whatever decides on how a run ended (``hp.solve``
skipping the L-BFGS polish after a reached target, ``helmpinn train``'s report) reads the status,
never the message.
"""
from __future__ import annotations

import enum

__all__ = ["RunStatus"]


class RunStatus(enum.Enum):
    """How a fit of the run loop ended.

    - ``STEPS_DONE``: it took every step it was asked for;
    - ``TARGET_REACHED``: the error (or the validation loss) fell below the target;
    - ``TIME_LIMIT``: its time limit was reached, or the next step would have ended past it;
    - ``STALLED``: the loss fell by less than the driver's stall factor over its window;
    - ``OPTIMIZER_STOP``: the optimiser stopped by itself (no decrease at the largest damping,
      L-BFGS's own convergence or evaluation budget);
    - ``DIVERGED``: a non-finite loss or non-finite parameters (the last good state restored);
    - ``INTERRUPTED``: a stop was requested (Ctrl-C, SIGTERM, :meth:`helmpinn.Trainer.request_stop`);
    - ``CALLBACK``: a callback (or other code) set the Trainer's ``stop_reason``.
    """

    STEPS_DONE = "steps done"
    TARGET_REACHED = "target reached"
    TIME_LIMIT = "time limit"
    STALLED = "stalled"
    OPTIMIZER_STOP = "optimizer stop"
    DIVERGED = "diverged"
    INTERRUPTED = "interrupted"
    CALLBACK = "callback"

    @property
    def success(self) -> bool:
        """Whether a run that ends so ended as it should, without a fault or an interruption:
        every status but ``DIVERGED`` and ``INTERRUPTED`` (a run with a target asks
        ``status is TARGET_REACHED`` instead: :attr:`helmpinn.solving.Solution.success`)."""
        return self not in (RunStatus.DIVERGED, RunStatus.INTERRUPTED)
