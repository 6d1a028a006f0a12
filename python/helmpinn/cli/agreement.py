"""The MPI ranks of one ``helmpinn train`` agree on a refused command line before any other
collective: a usage error may come on one rank only (a user's factory whose data file is
missing on one node), and every rank then stops with status 2, rank 0 printing the failing
rank's message, instead of the others waiting for it in a collective
(:func:`helmpinn.distributed.agree`)."""
from __future__ import annotations

import sys
from typing import Any, Callable

from .. import distributed
from ..distributed import CollectiveError
from .runs import UsageError

__all__ = ["CHECKS", "agreed", "agree_on", "refused_command_line"]

#: The name of the set-up's first agreement under MPI (that of a rank refused earlier too).
CHECKS = "helmpinn train: checks"


def agreed(comm: Any, work: Callable[[], None], what: str) -> str | None:
    """Runs ``work()``; the message of a usage error on any rank (every rank learns it: one
    agreement, :func:`helmpinn.distributed.agree`, which a rank that failed early meets in the
    others' next collective of :mod:`helmpinn.distributed`), prefixed with the rank where it is
    another rank's; None when no rank failed."""
    error = None
    try:
        work()
    except UsageError as exc:
        error = exc
    except CollectiveError as exc:   # a collective inside work met another rank's failure: agreed
        return _their_message(exc)
    return agree_on(comm, error, what)


def agree_on(comm: Any, error: UsageError | None, what: str) -> str | None:
    """The agreement of :func:`agreed` (``comm`` None: this process's ``error`` alone)."""
    try:
        distributed.agree(comm, error, what)
    except UsageError as exc:
        return str(exc)
    except CollectiveError as exc:   # another rank's usage error
        return _their_message(exc)
    return None


def _their_message(exc) -> str:
    """The first failing rank's message of a CollectiveError, as rank 0 prints it."""
    rank, _, kind, message = exc.failures[0]
    return f"rank {rank}: {message if kind == UsageError.__name__ else f'{kind}: {message}'}"


def refused_command_line(error: UsageError) -> int:
    """A command line refused before the run's set-up: one line, status 2. Under several MPI
    ranks the others may have read theirs (a user's factory that cannot be loaded on one node
    only): this rank meets them in the set-up's first agreement, so that every rank stops
    (status 2) instead of waiting for it, and rank 0 prints the message."""
    try:
        comm = distributed.launch_comm()
    except RuntimeError:   # mpi4py missing under a launcher: every rank says so alone
        comm = None
    failure = agree_on(comm, error, CHECKS)
    if comm is None or comm.Get_rank() == 0:
        print(f"helmpinn: {failure}", file=sys.stderr)
    return 2
