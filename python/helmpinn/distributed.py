"""Data-parallel training over MPI (mpi4py).

Every rank holds the same parameters and its own shard of the collocation points. The loss is a
sum of per-term means, so with each term's mean taken over the *global* count of its points the
ranks' losses and gradients add up to the full-batch ones exactly:

- :func:`value_and_grad` -- the loss and gradient of the union of the ranks' shards, on every
  rank: one agreement (below) on the arguments, the point counts and the model, one local fused
  pass, one allreduce of four numbers (loss, the three term means) plus an error flag, and one
  in-place ``Allreduce`` of the flat gradient (P numbers);
- :func:`global_counts` -- the three point counts summed over ranks (cache them per draw);
- :func:`sample_shard` -- this rank's share of one draw of a problem's points;
  :func:`gather_training_set` -- every rank's shares, on every rank;
- :func:`check_replicas` -- a cheap check that the parameters are the same on every rank;
  :func:`check_same_run` -- that every rank has the same problem and model, before training;
- :func:`launch_comm` / :func:`threads_per_rank` -- what ``helmpinn train`` uses under
  ``mpiexec`` / ``srun``.
- :data:`ONE_PROCESS` / :func:`check_ranks` -- what does not run over several ranks (L-BFGS,
  Levenberg-Marquardt's dual system), and why: the one place the CLI, the drivers and
  :mod:`helmpinn.optim.lm` ask.

Errors are collective. A rank that raises while the others go on into a collective would leave
them waiting forever (or, with mismatched messages, end in MPI's "Message truncated" abort).
Every collective here therefore starts with an *agreement* (:func:`agree`: an allgather of a few
integers per rank) that carries each rank's failure flag and what the ranks must have in common;
when a rank failed, every rank raises: that rank its own exception, the others a
:class:`CollectiveError` with its message. Code around these functions keeps the rule with
:func:`collective`, a block of local work whose exception is agreed at its end, and, as the last
resort for an exception that escapes everything, :func:`abort_on_error` (print, then
``comm.Abort``).

mpi4py is imported only when an MPI launch is detected (or a communicator is passed in), so the
rest of helmpinn works without it. Install it with ``pip install "helmpinn[mpi]"`` (mpi4py and
an MPICH from the package registry), or build mpi4py against a cluster's MPI (README).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import zlib
from typing import Any, Iterator, Mapping

import numpy as np

from ._signature import differences, flat, problem_signature
from .problems.batch import POINTS, TERM_KEYWORDS, TERMS, Batch
from .problems import Problem, TrainingSet

__all__ = ["value_and_grad", "global_counts", "local_counts", "shard_batch", "sample_shard", "shard_size",
           "rank_generators", "check_replicas", "launch_comm", "launched_size", "threads_per_rank",
           "agree", "collective", "abort_on_error", "CollectiveError", "ONE_PROCESS", "check_ranks",
           "gather_training_set", "check_same_run"]

_POINTS = POINTS   # each term's points keyword, from the core's loss-term table


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("helmpinn.distributed needs mpi4py: pip install 'helmpinn[mpi]' "
                          "(or build mpi4py against your MPI, see the README)") from exc
    return MPI


# -- errors are collective -------------------------------------------------------------------------
class CollectiveError(RuntimeError):
    """Raised on the other ranks when a rank failed inside a collective step: its message names
    the failing rank(s), their exception type and message (that rank raises its own);
    ``failures`` holds them as ``(rank, step, type name, message)``."""

    failures: list[tuple[int, str, str, str]] = []


# One agreement is an Allgather of _SLOTS int64 per rank: failed, the step's name (CRC-32), and
# up to _SLOTS - 2 numbers the step needs from every rank. Every collective of this module starts
# with one, so a rank that failed anywhere and calls agree() meets the others at their next one.
_SLOTS = 12


def _exchange(comm, error: BaseException | None, what: str, payload=()) -> np.ndarray:
    """The agreement of step ``what``: every rank's payload (rows of the returned table, columns
    from 0); raises on every rank when a rank failed (``error`` not None) or when the ranks are
    in different steps."""
    MPI = _mpi()
    mine = np.zeros(_SLOTS, dtype=np.int64)
    mine[0] = error is not None
    mine[1] = zlib.crc32(what.encode())
    mine[2:2 + len(payload)] = payload
    table = np.empty((comm.Get_size(), _SLOTS), dtype=np.int64)
    comm.Allgather([mine, MPI.INT64_T], [table, MPI.INT64_T])
    if table[:, 0].any():
        _raise_agreed(comm, error, what)
    if np.any(table[:, 1] != table[0, 1]):
        names = comm.allgather(what)
        raise RuntimeError("the ranks are out of step: " + ", ".join(f"rank {r} in {n}" for r, n in enumerate(names))
                           + "; every rank must make the same collective calls in the same order")
    return table[:, 2:]


def _raise_agreed(comm, error: BaseException | None, what: str) -> None:
    """After every rank learnt that some failed: gather their messages (a collective) and raise,
    the rank's own exception where it failed, a CollectiveError naming the others' elsewhere."""
    note = None if error is None else (what, type(error).__name__, str(error))
    notes = comm.allgather(note)
    if error is not None:
        raise error
    failed = [(r, *n) for r, n in enumerate(notes) if n is not None]
    text = "; ".join(f"rank {r} failed in {w}: {kind}: {msg}" for r, w, kind, msg in failed)
    exc = CollectiveError(f"{text} (this rank stopped in {what})")
    exc.failures = failed
    raise exc


def agree(comm, error: BaseException | None = None, what: str = "helmpinn step") -> None:
    """Agree with every rank of ``comm`` that none failed (a collective: every rank must call it).

    ``error`` is this rank's exception (None when it did not fail). When any rank's is not
    None, every rank raises: the failing rank its own exception, the others a
    :class:`CollectiveError` naming the failing rank(s) and their messages. Every collective of
    :mod:`helmpinn.distributed` starts with this agreement, so a rank that failed in purely
    local work and calls ``agree`` meets the others at their next collective of this module
    (calls with different ``what`` meet too, and raise "out of step" when nothing failed).
    ``comm`` None (or one rank): raises ``error`` if there is one.
    """
    if comm is None or comm.Get_size() <= 1:
        if error is not None:
            raise error
        return
    _exchange(comm, error, what)


@contextlib.contextmanager
def collective(comm, what: str = "helmpinn step") -> Iterator[None]:
    """A block of local work whose failure on any rank raises on every rank::

        with distributed.collective(comm, "drawing points"):
            shard = sample_shard(...)      # local work only: no collective inside
        counts = global_counts(comm, batch)

    Every rank must reach the end of the block (it ends in :func:`agree`); an exception inside
    it is caught and agreed: it is raised on its rank and a :class:`CollectiveError` with its
    message on the others. The block must not contain collectives (a rank that failed before
    one would leave the others inside it). ``comm`` None (or one rank): a plain block.
    """
    if comm is None or comm.Get_size() <= 1:
        yield
        return
    error: BaseException | None = None
    try:
        yield
    except BaseException as exc:  # noqa: BLE001 - raised again on this rank by agree()
        error = exc
    agree(comm, error, what)


@contextlib.contextmanager
def abort_on_error(comm, stream: Any = None) -> Iterator[None]:
    """The last resort under several ranks: an exception that leaves the block on one rank
    ends the whole job instead of leaving the other ranks waiting in a collective.

    The exception's type and message (and the traceback) are printed to ``stream`` (stderr)
    with the rank, then ``comm.Abort(1)`` ends every rank (the launcher's exit status is
    non-zero). ``SystemExit`` passes through (an exit with a status is not a failure to abort).
    Use it around a program's main work (``helmpinn train`` under ``mpiexec``); errors that
    :func:`agree` made collective reach it on every rank. ``comm`` None (or one rank): a plain
    block.
    """
    if comm is None or comm.Get_size() <= 1:
        yield
        return
    try:
        yield
    except SystemExit:
        raise
    except BaseException as exc:  # noqa: BLE001 - the job ends here
        import sys
        import traceback

        out = sys.stderr if stream is None else stream
        rank = comm.Get_rank()
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        print(f"{text}helmpinn: rank {rank} of {comm.Get_size()}: {type(exc).__name__}: {exc}; "
              "aborting every rank", file=out, flush=True)
        comm.Abort(1)


def _len(a: Any) -> int:
    if a is None:
        return 0
    shape = getattr(a, "shape", None)
    return int(shape[0]) if shape else len(a)


def local_counts(batch: Mapping[str, Any]) -> dict[str, int]:
    """Points of each term in this rank's batch (``x_pde``, ``x_data``, ``x_bc`` rows; a
    :class:`~helmpinn.Batch` or a mapping of its keywords)."""
    if isinstance(batch, Batch):
        return batch.sizes
    return {t: _len(batch.get(k)) for t, k in _POINTS.items()}


def global_counts(comm, batch: Mapping[str, Any]) -> dict[str, int]:
    """Points of each term summed over the ranks of ``comm`` (a collective: every rank must
    call it; one small agreement, :func:`agree`, that also carries a failure on any rank)."""
    error, mine = None, [0, 0, 0]
    try:
        n = local_counts(batch)
        mine = [n[t] for t in TERMS]
    except Exception as exc:  # agreed below, so that no rank waits forever
        error = exc
    table = _exchange(comm, error, "global_counts", mine)
    return {t: int(v) for t, v in zip(TERMS, table[:, 0:3].sum(axis=0))}


def shard_batch(batch: Batch, counts: Mapping[str, int]) -> Batch:
    """This rank's :class:`~helmpinn.Batch` as :func:`value_and_grad` uses it: without the
    entries of terms it has no points of, and with ``counts`` (the global counts of
    :func:`global_counts`) for the terms it has. The same arrays, not converted again; make it
    once per draw of points and pass it to every step. Local: no communication."""
    n_local = batch.sizes
    for t in TERMS:
        if n_local[t] > int(counts.get(t, 0)):
            raise ValueError(f"counts: {t!r} is {int(counts.get(t, 0))}, fewer than this rank's "
                             f"{n_local[t]} points; pass the global counts (global_counts())")
    return batch.without_empty_terms().replace(
        counts={t: int(counts[t]) for t in TERMS if n_local[t]})


def _dtype_code(a: Any) -> int:
    try:
        return int(np.dtype(a.dtype).num)
    except (AttributeError, TypeError):
        return -1


def _spec_code(ws: Any) -> int:
    spec = getattr(ws, "spec", None)
    fields = tuple(getattr(spec, k, None) for k in ("d", "ff_dim", "hidden", "layers", "num_params"))
    return zlib.crc32(repr(fields).encode())


def value_and_grad(ws, comm, theta, grad, *, batch: Batch | None = None,
                   counts: Mapping[str, int] | None = None, breakdown: bool = False,
                   cuda_aware: bool | None = None, **local_batch: Any) -> float | dict[str, float]:
    """Loss and gradient of the union of every rank's batch, on every rank of ``comm``.

    ``batch`` (a :class:`~helmpinn.Batch`) or ``local_batch`` are this rank's points, and
    ``local_batch`` the loss options, as for ``Workspace.value_and_grad`` (shards may be uneven;
    a rank may have no points of a term, or none at all). ``grad`` is overwritten with the
    full-batch gradient; the return value is the full-batch loss, or with ``breakdown=True`` a
    dict ``{"total", "pde", "data", "bc"}`` (the loss and the unweighted per-term means over all
    ranks, as ``Workspace.last_loss``). ``counts`` are the global point counts per term
    (:func:`global_counts`); pass them, or a Batch that holds them (:func:`shard_batch`, made
    once per draw), where the points do not change between calls.

    A collective: every rank of ``comm`` must call it. It is collective about errors too (see
    :func:`agree`): the arguments are checked on every rank, and the ranks then agree, before
    any large message, that none failed, that every rank has the same model (parameter count,
    dtype, layout) and that ``counts`` were given on every rank or on none, with the same
    values, equal to the points the ranks hold together. A failure on any rank (a bad
    argument, an exception in the core) raises on every rank: that rank's own exception there,
    a :class:`CollectiveError` with its message on the others.

    ``grad`` may be a CUDA device array (a Workspace on device="cuda"): with ``cuda_aware=True``
    it goes to MPI as it is (needs a CUDA-aware MPI build); otherwise it is staged through host
    memory with CuPy. ``cuda_aware=None`` reads the environment variable
    ``HELMPINN_MPI_CUDA_AWARE`` (1/0).
    """
    MPI = _mpi()
    what = "distributed.value_and_grad"
    # 1. Local checks; nothing is sent before every rank has passed them.
    error: BaseException | None = None
    n_local = {t: 0 for t in TERMS}
    given = None
    signature = [0, 0, 0]
    try:
        if batch is not None:
            if not isinstance(batch, Batch):
                raise TypeError(f"batch: expected a helmpinn.Batch, got {type(batch).__name__}")
            clash = [k for k in local_batch if any(k in keys for keys in TERM_KEYWORDS.values())]
            if clash:
                raise TypeError(f"{what}: batch= given together with {', '.join(clash)}; pass the "
                                "points either in the Batch or as keywords, not both")
        points = local_batch if batch is None else batch
        n_local = local_counts(points)
        if counts is None and batch is not None and batch.counts is not None:
            counts = batch.counts
        if counts is not None:
            if not isinstance(counts, Mapping) or set(counts) - set(TERMS):
                raise TypeError(f"counts: expected a mapping of {', '.join(map(repr, TERMS))} to the "
                                f"global numbers of points, got {counts!r}")
            given = {t: int(counts.get(t, 0)) for t in TERMS}
            for t in TERMS:
                if n_local[t] > given[t]:
                    raise ValueError(f"counts: {t!r} is {given[t]}, fewer than this rank's "
                                     f"{n_local[t]} points; pass the global counts (global_counts())")
        signature = [int(getattr(grad, "size", len(grad))), _dtype_code(grad), _spec_code(ws)]
    except Exception as exc:  # agreed below, so that no rank waits forever
        error = exc
    g = [int(counts[t]) if t in counts else -1 for t in TERMS] if given is not None else [-1, -1, -1]
    table = _exchange(comm, error, what,
                      [n_local[t] for t in TERMS] + g + [given is not None] + signature)
    n_global = _agree_on_counts(table, what)
    _agree_on_model(table[:, 7:10], what)

    # 2. The local pass, its failure agreed with the four numbers every rank needs anyway.
    failed = len(TERMS) + 1
    part = np.zeros(failed + 1)  # the loss, each term's mean, whether a rank failed
    try:
        if batch is None:
            kw = dict(local_batch)
            for t in TERMS:  # drop a term this rank has no points of
                if not n_local[t]:
                    for k in TERM_KEYWORDS[t]:
                        kw.pop(k, None)
            kw["counts"] = {t: n_global[t] for t in TERMS if n_local[t]}
        else:
            # Each term's mean divides by its global count, so that over the ranks the losses
            # and gradients add up to those on the union of the shards.
            want = {t: n_global[t] for t in TERMS if n_local[t]}
            if batch.counts != want or batch.without_empty_terms() is not batch:
                batch = shard_batch(batch, n_global)
            kw = dict(local_batch, batch=batch)
        b = ws.value_and_grad(theta, grad, breakdown=True, **kw)
        part[:len(TERMS) + 1] = [b.total, *(getattr(b, t) for t in TERMS)]
    except Exception as exc:  # reported to every rank below, so that no rank waits forever
        error = exc
        part[failed] = 1.0
    comm.Allreduce(MPI.IN_PLACE, part, op=MPI.SUM)
    if part[failed]:
        _raise_agreed(comm, error, what)
    _allreduce_grad(comm, grad, cuda_aware)
    if breakdown:
        return {"total": float(part[0]), **{t: float(v) for t, v in zip(TERMS, part[1:failed])}}
    return float(part[0])


def _agree_on_counts(table: np.ndarray, what: str) -> dict[str, int]:
    """The global counts from an exchange of (local counts, given counts (-1: not given), whether
    counts were given): the sums of the local ones. Given counts must come from every rank or
    none, and each term's, where given, must be the same on every rank and equal to that sum."""
    local, given, has = table[:, 0:3], table[:, 3:6], table[:, 6].astype(bool)
    total = local.sum(axis=0)
    if has.any() and not has.all():
        ranks = ", ".join(str(r) for r in np.flatnonzero(has))
        raise ValueError(f"{what}: counts= given on rank(s) {ranks} only; give it on every rank "
                         "(the same global counts) or on none")
    for i, t in enumerate(TERMS):
        values = sorted({int(v) for v in given[:, i] if v >= 0})
        if len(values) > 1:
            raise ValueError(f"{what}: counts[{t!r}] differs between ranks: "
                             + ", ".join(f"rank {r}: {int(v)}" for r, v in enumerate(given[:, i]) if v >= 0))
        if values and values[0] != total[i]:
            raise ValueError(f"{what}: counts[{t!r}] is {values[0]}, but the ranks hold {int(total[i])} "
                             f"{t} points together; pass global_counts() of this draw")
    return {t: int(v) for t, v in zip(TERMS, total)}


def _agree_on_model(sig: np.ndarray, what: str) -> None:
    """Every rank must have the same model: the same parameter count, dtype and layout."""
    if np.all(sig == sig[0]):
        return
    raise ValueError(f"{what}: the ranks' models differ (every rank must train the same model): "
                     + "; ".join(f"rank {r}: {int(p)} parameters, {_dtype_name(int(c))}, layout {int(h) & 0xffffffff:08x}"
                                 for r, (p, c, h) in enumerate(sig)))


def _dtype_name(num: int) -> str:
    for name in ("float64", "float32", "float16", "complex128", "int64", "int32"):
        if np.dtype(name).num == num:
            return name
    return f"dtype #{num}"


def _allreduce_grad(comm, grad, cuda_aware: bool | None) -> None:
    MPI = _mpi()
    if isinstance(grad, np.ndarray) or not hasattr(grad, "__cuda_array_interface__"):
        comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        return
    if cuda_aware is None:
        cuda_aware = os.environ.get("HELMPINN_MPI_CUDA_AWARE", "0").strip().lower() in ("1", "true", "yes")
    if cuda_aware:
        # value_and_grad returned the loss, so the gradient on the device is complete.
        comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM)
        return
    try:
        import cupy
    except ImportError as exc:
        raise TypeError("grad: a CUDA device array needs a CUDA-aware MPI (cuda_aware=True) or "
                        "CuPy to stage it through host memory; neither is available") from exc
    dev = cupy.asarray(grad)  # a zero-copy view of the device buffer
    host = dev.get()
    comm.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM)
    dev.set(host)


# -- sampling ------------------------------------------------------------------------------------
def shard_size(n: int, rank: int, size: int) -> int:
    """Rank ``rank``'s share of ``n`` points split as evenly as possible over ``size`` ranks."""
    return n // size + (1 if rank < n % size else 0)


def rank_generators(seed: int, rank: int) -> tuple[np.random.Generator, np.random.Generator]:
    """``(own, shared)`` random generators of ``rank``: ``own`` an independent stream per rank,
    ``shared`` the same stream on every rank (both reproducible from ``seed``)."""
    own = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(1, rank)))
    shared = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(0,)))
    return own, shared


def sample_shard(problem: Problem, pde_points: int, bc_points: int, own: np.random.Generator,
                 shared: np.random.Generator, method: str, rank: int, size: int,
                 comm: Any = None) -> TrainingSet:
    """This rank's share of one draw of ``pde_points`` interior and ``bc_points`` boundary points.

    Interior points: ``shard_size(pde_points)`` drawn from the rank's own stream ``own``. Boundary
    and data points: the whole set drawn from ``shared`` (the same on every rank, so the split
    over the boundary's parts by measure is the global one however many ranks there are), of
    which the rank keeps every ``size``-th point from ``rank`` on. Boundary sets are small next
    to interior ones, so drawing the whole set on every rank costs little.
    
    With ``comm`` (the ranks' communicator) the draw is collective about errors (:func:`agree`):
    a failure on one rank (a MemoryError) raises on every rank; without it the draw is local.
    """
    with collective(comm, "distributed.sample_shard"):
        inner = problem.sample(shard_size(pde_points, rank, size), 0, own, method)
        edge = problem.sample(0, bc_points, shared, method)
        pick = slice(rank, None, size)
        arr = lambda a: a if np.ndim(a) == 0 else np.ascontiguousarray(a[pick])  # noqa: E731
        # Every PDE field of the interior draw (the operator's coefficients, importance
        # weights folded into them) with this rank's share of the boundary and data points.
        ts = dataclasses.replace(
            inner, x_data=arr(edge.x_data), y=arr(edge.y),
            x_bc=arr(edge.x_bc), n_bc=arr(edge.n_bc), alpha=arr(edge.alpha),
            g=None if edge.g is None else arr(edge.g))
        ts.sizes = {t: len(getattr(ts, POINTS[t])) for t in TERMS}
    return ts


#: The fields of a TrainingSet by the points they belong to (gather_training_set).
_FIELDS = {"x_pde": ("kappa", "f", "a_pde", "b_pde", "pde_weight"), "x_data": ("y",),
           "x_bc": ("n_bc", "alpha", "g")}


def gather_training_set(comm, ts: TrainingSet) -> TrainingSet:
    """The union of every rank's shard (:func:`sample_shard`), in rank order, on every rank (one
    allgather; a collective): what a solver that splits its unknowns, not its points, over the
    ranks needs (the decomposition's Gauss-Newton, :mod:`helmpinn.training.dd_driver`). A field that is a
    constant on every rank stays one when the ranks agree on it, else it becomes per point."""
    parts = comm.allgather(ts)
    fields: dict[str, Any] = {}
    for points, coefficients in _FIELDS.items():
        counts = [len(getattr(p, points)) for p in parts]
        fields[points] = np.concatenate([getattr(p, points) for p in parts])
        for name in coefficients:
            values = [getattr(p, name) for p in parts]
            if all(v is None for v in values):
                fields[name] = None
            elif all(np.ndim(v) == 0 for v in values) and all(v == values[0] for v in values):
                fields[name] = values[0]
            else:
                if any(v is None for v in values):
                    raise ValueError(f"gather_training_set: {name} is given on some ranks only")
                fields[name] = np.concatenate([np.broadcast_to(v, (n, *np.shape(v)[1:])) if np.ndim(v) == 0
                                               else np.asarray(v) for v, n in zip(values, counts)])
    out = dataclasses.replace(ts, **fields)
    out.sizes = {t: len(getattr(out, POINTS[t])) for t in TERMS}
    return out


# -- consistency ---------------------------------------------------------------------------------
def check_replicas(comm, params: np.ndarray, step: int | None = None) -> None:
    """Raise RuntimeError on every rank unless ``params`` are bitwise the same on all ranks of
    ``comm`` (a CRC-32 of the bytes and the length, one agreement of :func:`agree`; a
    collective)."""
    error, mine = None, [0, 0]
    try:
        a = np.ascontiguousarray(params)
        mine = [zlib.crc32(a.view(np.uint8)), a.size]
    except Exception as exc:  # agreed below
        error = exc
    table = _exchange(comm, error, "distributed.check_replicas", mine)
    if np.any(table[:, :2] != table[0, :2]):
        at = "" if step is None else f" at step {step}"
        raise RuntimeError(
            f"the parameters differ between ranks{at} (CRC-32 and length per rank: "
            + ", ".join(f"{r}: {int(c):08x} ({int(n)})" for r, (c, n) in enumerate(table[:, :2]))
            + "); every rank must take the same steps: something changed them on some ranks only "
            "(a callback?), or the MPI library's Allreduce is not deterministic")


def _layout_code(model: Any) -> int:
    """A CRC-32 of a model's layout: its spec (one network) or its specs (a decomposed model)."""
    layout = getattr(model, "spec", None)
    layout = getattr(model, "specs", None) if layout is None else layout
    fields = [tuple(getattr(sp, k, None) for k in ("in_dim", "ff_dim", "hidden_dim", "num_hidden_layers"))
              for sp in (layout if isinstance(layout, (list, tuple)) else [layout])]
    return zlib.crc32(repr(fields).encode())


def check_same_run(comm, problem: Problem, model: Any) -> None:
    """Raise ValueError on every rank unless every rank of ``comm`` trains the same model (its
    parameter count, dtype, layout and parameters) on the same problem (its name and its
    fingerprint, :func:`helmpinn._signature.problem_signature`: a small draw of its points and
    data with a fixed seed, compared to a relative 1e-9). A factory that builds another problem
    on another node (a node-local data file) would otherwise train each rank on its own
    problem, or end in MPI's "Message truncated". One agreement (:func:`agree`), then, only
    where the fingerprints' CRC-32s differ, one allgather of the fingerprints; a collective.
    The Trainer calls it once, before its first draw."""
    error, mine, sig = None, [0] * 6, {}
    try:
        sig = problem_signature(problem)
        params = np.ascontiguousarray(_host(model.params))
        mine = [zlib.crc32(str(problem.name).encode()), zlib.crc32(flat(sig).tobytes()), int(model.num_params),
                _dtype_code(params), _layout_code(model), zlib.crc32(params.view(np.uint8))]
    except Exception as exc:  # agreed below
        error = exc
    table = _exchange(comm, error, "distributed.check_same_run", mine)
    what = "every rank must build the same problem and model: a factory that reads node-local files, the " \
           "host name or the rank builds another on each"
    if np.any(table[:, 0] != table[0, 0]):
        names = comm.allgather(str(problem.name))
        raise ValueError(f"the ranks' problems differ ({what}): "
                         + "; ".join(f"rank {r}: {n!r}" for r, n in enumerate(names)))
    if np.any(table[:, 1] != table[0, 1]):
        sigs = comm.allgather(sig)
        bad = [(r, differences(sigs[0], s)) for r, s in enumerate(sigs)]
        bad = [(r, d) for r, d in bad if d]
        if bad:
            raise ValueError(f"the ranks' problems differ ({what}): problem {problem.name!r} on "
                             + "; ".join(f"rank {r} differs from rank 0's in {', '.join(d)}" for r, d in bad))
    if np.any(table[:, 2:6] != table[0, 2:6]):
        raise ValueError(f"the ranks' models differ ({what}): " + "; ".join(
            f"rank {r}: {int(n)} parameters, {_dtype_name(int(c))}, layout {int(h) & 0xffffffff:08x}, "
            f"parameters {int(p) & 0xffffffff:08x}" for r, (n, c, h, p) in enumerate(table[:, 2:6])))


def _host(a: Any) -> np.ndarray:
    """A host array of ``a`` (a device array is copied)."""
    return a if isinstance(a, np.ndarray) else np.asarray(a.get() if hasattr(a, "get") else a)


# -- what runs over several ranks ----------------------------------------------------------------
#: What does not run over several MPI ranks, and why: an optimiser (``"lbfgs"``) or one of
#: Levenberg-Marquardt's linear systems (``"lm:dual"``). Everything else does: Adam and LM's
#: primal and matrix-free (cg) systems sum their gradients, JᵀJ, Jᵀr or products over the ranks.
#: The CLI, the drivers and :mod:`helmpinn.optim.lm` all ask :func:`check_ranks`.
ONE_PROCESS = {
    "lbfgs": "L-BFGS runs on one process (over several MPI ranks each rank would fit only its own "
             "points): use Adam or Levenberg-Marquardt there",
    "lm:dual": "Levenberg-Marquardt's dual system (JJᵀ) needs every rank's rows: over several MPI "
               "ranks use its primal system (JᵀJ summed over the ranks), the matrix-free one (cg) or auto",
}


def check_ranks(what: str, ranks: int, error: type[Exception] = ValueError) -> None:
    """Raise ``error`` with :data:`ONE_PROCESS`'s reason when ``what`` (an optimiser's name, or
    ``"lm:SOLVER"``) cannot run over ``ranks`` MPI ranks; otherwise return."""
    if int(ranks) > 1 and what in ONE_PROCESS:
        raise error(ONE_PROCESS[what])


# -- launching -------------------------------------------------------------------------------------
_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS")


def launched_size(environ: Mapping[str, str] | None = None) -> int:
    """The number of ranks an MPI launcher (mpiexec of MPICH / Open MPI, srun) started, from its
    environment variables; 1 when there is none."""
    env = os.environ if environ is None else environ
    for var in _SIZE_VARS:
        if var == "SLURM_NTASKS" and "SLURM_STEP_ID" not in env:
            continue  # inside a Slurm allocation but not started by srun
        try:
            return max(int(env[var]), 1)
        except (KeyError, ValueError):
            continue
    return 1


def launch_comm():
    """``MPI.COMM_WORLD`` when this process was started by an MPI launcher with more than one
    rank, else None. Raises RuntimeError when it was but mpi4py is missing (each rank would
    otherwise train alone and write the same files)."""
    n = launched_size()
    if n <= 1:
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        raise RuntimeError(f"started as one of {n} MPI ranks, but mpi4py is not installed: "
                           "pip install 'helmpinn[mpi]' (or build mpi4py against your MPI, see "
                           "the README)") from None
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None


def threads_per_rank(comm, environ: Mapping[str, str] | None = None) -> int:
    """OpenMP threads for each rank so that the ranks on one node do not oversubscribe its
    cores: ``OMP_NUM_THREADS`` when set, else ``max(1, cores // ranks on this node)``, and at
    most the cores this process may run on (a launcher may bind ranks to cores). With ``comm``
    a collective (the ranks on each node are counted whether or not this rank's environment
    sets ``OMP_NUM_THREADS``, so ranks launched with different environments do not part ways);
    ``comm`` None needs ``OMP_NUM_THREADS``."""
    env = os.environ if environ is None else environ
    given = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    n_local = None
    if comm is not None:
        MPI = _mpi()
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        try:
            n_local = local.Get_size()
        finally:
            local.Free()
    if given.isdigit() and int(given) > 0:
        return int(given)
    if n_local is None:
        raise ValueError("threads_per_rank: without a communicator OMP_NUM_THREADS must be set "
                         f"to a positive integer, got {given!r}")
    cores = os.cpu_count() or 1
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        allowed = cores
    return max(1, min(allowed, cores // n_local))
