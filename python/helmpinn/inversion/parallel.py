"""The inversion over MPI ranks: the wavefields split, the medium's sums reduced.

Given the medium, the wavefields are independent: each rank holds a share of every stage's
wavefields (:meth:`Ranks.share`, contiguous blocks of the sources), forms and eliminates their
blocks itself (:mod:`helmpinn.inversion.solver`), and the sums over the wavefields that the
medium needs are added over the ranks by :meth:`Ranks.sum`, one ``Allreduce`` of one buffer per
sum: in a Gauss-Newton step the medium's block ``C`` and gradient with the loss, then per trial
the Schur complement's sum ``Σ B_iᵀ A_i⁻¹ [B_i, g_i]``, then the trial's loss and predicted
decrease. Every rank then solves the same ``M × M`` system and holds the same medium, and takes
the same decisions (a trial accepted or not), provided the Allreduce gives every rank the same
bits, as the MPI standard recommends and MPICH's algorithms for a commutative sum do; the tests
check that the ranks' media are equal bit for bit.

**Errors.** Each buffer carries a failure flag: a rank whose local work raised (a wavefield's
residuals not finite, a factorisation) still takes part in the Allreduce with its flag set, and
then every rank raises through :func:`helmpinn.distributed.agree` (the failing rank its own
exception, the others a :class:`~helmpinn.distributed.CollectiveError` naming it); no rank is
left waiting. Decisions that could differ between ranks (the clock against a stage's deadline, a
callback's stop request) are taken together by :meth:`Ranks.any`.

With ``comm`` None (or one rank) every method is the plain one-process computation.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence, TypeVar

import numpy as np
from numpy.typing import NDArray

from ..distributed import agree

__all__ = ["Ranks"]

T = TypeVar("T")


class Ranks:
    """The ranks of ``comm`` (None: one process) as the inversion uses them (module docstring)."""

    def __init__(self, comm: Any = None):
        if comm is not None and not all(hasattr(comm, n) for n in ("Get_rank", "Get_size", "Allreduce")):
            raise TypeError(f"invert: comm must be an mpi4py communicator or None, got {type(comm).__name__}")
        self.comm = comm
        self.rank = 0 if comm is None else int(comm.Get_rank())
        self.size = 1 if comm is None else int(comm.Get_size())

    @property
    def many(self) -> bool:
        return self.size > 1

    def share(self, n: int) -> list[int]:
        """This rank's indices of ``n`` wavefields: a contiguous block, the first ``n % size``
        ranks one more."""
        q, r = divmod(int(n), self.size)
        start = self.rank * q + min(self.rank, r)
        return list(range(start, start + q + (self.rank < r)))

    def run(self, work: Callable[[], T]) -> tuple[T | None, BaseException | None]:
        """``(work(), None)``, or ``(None, exc)`` when it raised ``exc`` on this rank under
        several ranks (to be agreed at the next :meth:`sum`); in one process it raises."""
        if not self.many:
            return work(), None
        try:
            return work(), None
        except Exception as exc:   # noqa: BLE001 - raised on every rank by sum()'s agreement
            return None, exc

    def sum(self, parts: Sequence[NDArray | float], what: str,
            error: BaseException | None = None) -> list[NDArray]:
        """The arrays (or numbers) of ``parts`` summed over the ranks, in one Allreduce of one
        float64 buffer that also carries this rank's failure flag (module docstring); the same
        shapes back, numbers as 0-d arrays. ``error``: this rank's exception from its local
        work (its ``parts`` must still have their shapes: their values are not used)."""
        arrays = [np.asarray(p, np.float64) for p in parts]
        if not self.many:
            if error is not None:
                raise error
            return arrays
        buf = np.concatenate([[0.0 if error is None else 1.0], *[a.ravel() for a in arrays]])
        out = np.empty_like(buf)
        self.comm.Allreduce(buf, out)   # mpi4py's default op: the sum
        if out[0] != 0:
            agree(self.comm, error, what)
        result, start = [], 1
        for a in arrays:
            result.append(out[start:start + a.size].reshape(a.shape))
            start += a.size
        return result

    def any(self, flag: bool, what: str, error: BaseException | None = None) -> bool:
        """True on every rank when ``flag`` is true on any (``error`` as in :meth:`sum`)."""
        return bool(self.sum([float(bool(flag))], what, error)[0] > 0)

    def gather(self, mine: dict) -> dict:
        """The union of every rank's dict, on every rank (an allgather of Python objects)."""
        if not self.many:
            return dict(mine)
        out: dict = {}
        for part in self.comm.allgather(mine):
            out.update(part)
        return out
