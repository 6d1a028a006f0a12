"""A Trainer's progress: the bar on stderr (:class:`Bar`, its text :func:`bar_status`), the time
limit's test after each step (:func:`out_of_time`) and the Ctrl-C handler of a fit
(:func:`interrupt_handler`)."""
from __future__ import annotations

import contextlib
import signal
import sys
import threading
from typing import TYPE_CHECKING, Sequence

from ..problems.batch import TERMS
from .drivers import StepInfo

if TYPE_CHECKING:
    from .trainer import Trainer

#: Under a time limit, the next step is taken to last as long as the longest of this many last
#: steps (a step that would end past the limit is not begun): one step's time alone misjudges
#: the next where they vary (Levenberg-Marquardt's trials, an evaluation every few steps).
STEPS_TIMED = 3


def out_of_time(ends: Sequence[float], start: float, limit: float | None) -> int:
    """Whether a fit that began at ``start`` stops for its time ``limit`` after the step that
    ended at ``ends[-1]`` (``ends``: when the last steps ended, the fit's start first until
    there are :data:`STEPS_TIMED` of them): 2 when the limit has passed, 1 when the next step,
    as long as the longest of those (their evaluations and checkpoints included), would end
    past it, else 0 (a number, so that the ranks of a run agree on the largest)."""
    if limit is None:
        return 0
    elapsed = ends[-1] - start
    longest = max(b - a for a, b in zip(ends, ends[1:]))
    return 2 if elapsed >= limit else 1 if elapsed + longest > limit else 0


@contextlib.contextmanager
def interrupt_handler(trainer: "Trainer"):
    """With ``stop_on_interrupt`` (and in the main thread), the first SIGINT requests a stop
    after the current step; the second raises KeyboardInterrupt as usual."""
    if not trainer.stop_on_interrupt or threading.current_thread() is not threading.main_thread():
        yield
        return

    seen = [0]

    def on_sigint(signum, frame):
        seen[0] += 1
        if seen[0] > 1:
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        trainer.request_stop("interrupted")
        print("\nhelmpinn: interrupted; stopping after the current step (Ctrl-C again to abort)",
              file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)



def bar_status(trainer: "Trainer", info: StepInfo) -> str:
    """The progress bar's text after a step: the loss, its terms, the driver's status, the last
    evaluation's error, validation loss and gap."""
    t = info.terms
    s = f"loss={info.loss:.3e}" + "".join(f" {k}={t[k]:.2e}" for k in TERMS if t.get(k))   # a term absent: 0
    if info.status:
        s += " " + info.status
    if trainer.last_error is not None:
        s += f" err={trainer.last_error:.2e}"
    if trainer.last_val_loss is not None:
        s += f" val={trainer.last_val_loss:.2e}"
    if trainer.last_gap is not None:
        s += f" gap={trainer.last_gap:.3g}"
    return s


class Bar:
    """The progress bar of one fit (tqdm on stderr; nothing where ``enabled`` is false): over its
    ``steps``, or with a ``time_limit`` over those seconds (the steps, of at most ``steps``, then
    in the status), whichever the run will meet first being unknown: a step count with an ETA
    computed from it would promise the step cap."""

    def __init__(self, steps: int, time_limit: float | None, enabled: bool):
        self.steps, self.done, self.timed = steps, 0, time_limit is not None
        self.bar = None
        if enabled:
            from tqdm import tqdm

            if self.timed:
                self.bar = tqdm(total=float(time_limit), unit="s", mininterval=0.5, dynamic_ncols=True,
                                file=sys.stderr, bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} s{postfix}")
            else:
                self.bar = tqdm(total=steps, unit="step", mininterval=0.5, dynamic_ncols=True, file=sys.stderr)

    def update(self, steps: int, elapsed: float, status: str | None = None) -> None:
        """``steps`` more steps done, ``elapsed`` seconds since the fit began; ``status`` the
        postfix (None: unchanged)."""
        self.done += steps
        if self.bar is None:
            return
        if self.timed:
            self.bar.update(max(min(elapsed, self.bar.total) - self.bar.n, 0.0))
            if status is not None:
                status = f"step {self.done}/{self.steps} {status}"
        else:
            self.bar.update(steps)
        if status is not None:
            self.bar.set_postfix_str(status, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
