"""Data-parallel training over MPI (mpi4py).

Every rank holds the same parameters and its own shard of the collocation points. The loss is a
sum of per-term means, so with each term's mean taken over the *global* count of its points the
ranks' losses and gradients add up to the full-batch ones exactly:

- :func:`value_and_grad` -- the loss and gradient of the union of the ranks' shards, on every
  rank: one local fused pass, one allreduce of four numbers (loss, the three term means) plus an
  error flag, and one in-place ``Allreduce`` of the flat gradient (P numbers);
- :func:`global_counts` -- the three point counts summed over ranks (cache them per draw);
- :func:`sample_shard` -- this rank's share of one draw of a problem's points;
- :func:`check_replicas` -- a cheap check that the parameters are the same on every rank;
- :func:`launch_comm` / :func:`threads_per_rank` -- what ``helmpinn train`` uses under
  ``mpiexec`` / ``srun``.

mpi4py is imported only when an MPI launch is detected (or a communicator is passed in), so the
rest of helmpinn works without it. Install it with ``pip install "helmpinn[mpi]"`` (mpi4py and
an MPICH from the package registry), or build mpi4py against a cluster's MPI (README).
"""
from __future__ import annotations

import os
import zlib
from typing import Any, Mapping

import numpy as np

from .batch import TERM_KEYWORDS, Batch
from .problems import Problem, TrainingSet

__all__ = ["value_and_grad", "global_counts", "local_counts", "shard_batch", "sample_shard", "shard_size",
           "rank_generators", "check_replicas", "launch_comm", "launched_size", "threads_per_rank"]

TERMS = ("pde", "data", "bc")
_POINTS = {"pde": "x_pde", "data": "x_data", "bc": "x_bc"}


def _mpi():
    try:
        from mpi4py import MPI
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise ImportError("helmpinn.distributed needs mpi4py: pip install 'helmpinn[mpi]' "
                          "(or build mpi4py against your MPI, see the README)") from exc
    return MPI


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
    """Points of each term summed over the ranks of ``comm`` (one allreduce of 3 integers; a
    collective: every rank must call it)."""
    MPI = _mpi()
    n = np.array([local_counts(batch)[t] for t in TERMS], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, n, op=MPI.SUM)
    return {t: int(v) for t, v in zip(TERMS, n)}


def shard_batch(batch: Batch, counts: Mapping[str, int]) -> Batch:
    """This rank's :class:`~helmpinn.Batch` as :func:`value_and_grad` uses it: without the
    entries of terms it has no points of, and with ``counts`` (the global counts of
    :func:`global_counts`) for the terms it has. The same arrays, not converted again; make it
    once per draw of points and pass it to every step."""
    n_local = batch.sizes
    for t in TERMS:
        if n_local[t] > int(counts.get(t, 0)):
            raise ValueError(f"counts: {t!r} is {int(counts.get(t, 0))}, fewer than this rank's "
                             f"{n_local[t]} points; pass the global counts (global_counts())")
    return batch.without_empty_terms().replace(
        counts={t: int(counts[t]) for t in TERMS if n_local[t]})


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
    once per draw), to save one allreduce when the points do not change between calls.

    A collective: every rank of ``comm`` must call it. An exception on one rank (bad input)
    raises on every rank: that rank's own error there, a RuntimeError naming it elsewhere.

    ``grad`` may be a CUDA device array (a Workspace on device="cuda"): with ``cuda_aware=True``
    it goes to MPI as it is (needs a CUDA-aware MPI build); otherwise it is staged through host
    memory with CuPy. ``cuda_aware=None`` reads the environment variable
    ``HELMPINN_MPI_CUDA_AWARE`` (1/0).
    """
    MPI = _mpi()
    if batch is not None:
        clash = [k for k in local_batch if k in TERM_KEYWORDS["pde"] + TERM_KEYWORDS["data"]
                 + TERM_KEYWORDS["bc"]]
        if clash:
            raise TypeError(f"distributed.value_and_grad: batch= given together with "
                            f"{', '.join(clash)}; pass the points either in the Batch or as "
                            "keywords, not both")
        if not isinstance(batch, Batch):
            raise TypeError(f"batch: expected a helmpinn.Batch, got {type(batch).__name__}")
    points = local_batch if batch is None else batch
    n_local = local_counts(points)
    if counts is None and batch is not None and batch.counts is not None:
        counts = batch.counts
    if counts is None:
        n_global = global_counts(comm, points)
    else:
        n_global = {t: int(counts.get(t, 0)) for t in TERMS}

    error: BaseException | None = None
    part = np.zeros(5)  # loss, pde, data, bc, failed
    try:
        if batch is None:
            for t in TERMS:
                if n_local[t] > n_global[t]:
                    raise ValueError(f"counts: {t!r} is {n_global[t]}, fewer than this rank's "
                                     f"{n_local[t]} points; pass the global counts (global_counts())")
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
        part[:4] = [b.total, b.pde, b.data, b.bc]
    except Exception as exc:  # reported to every rank below, so that no rank waits forever
        error = exc
        part[4] = 1.0
    comm.Allreduce(MPI.IN_PLACE, part, op=MPI.SUM)
    if part[4]:
        if error is not None:
            raise error
        raise RuntimeError(f"distributed.value_and_grad failed on {int(part[4])} other rank(s) "
                           "(their exception is raised there)")
    _allreduce_grad(comm, grad, cuda_aware)
    if breakdown:
        return {"total": float(part[0]), **{t: float(v) for t, v in zip(TERMS, part[1:4])}}
    return float(part[0])


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
                 shared: np.random.Generator, method: str, rank: int, size: int) -> TrainingSet:
    """This rank's share of one draw of ``pde_points`` interior and ``bc_points`` boundary points.

    Interior points: ``shard_size(pde_points)`` drawn from the rank's own stream ``own``. Boundary
    and data points: the whole set drawn from ``shared`` (the same on every rank, so the split
    over the boundary's parts by measure is the global one however many ranks there are), of
    which the rank keeps every ``size``-th point from ``rank`` on. Boundary sets are small next
    to interior ones, so drawing the whole set on every rank costs little.
    """
    inner = problem.sample(shard_size(pde_points, rank, size), 0, own, method)
    edge = problem.sample(0, bc_points, shared, method)
    pick = slice(rank, None, size)
    arr = lambda a: a if np.ndim(a) == 0 else np.ascontiguousarray(a[pick])  # noqa: E731
    ts = TrainingSet(
        x_pde=inner.x_pde, kappa=inner.kappa, f=inner.f,
        x_data=arr(edge.x_data), y=arr(edge.y),
        x_bc=arr(edge.x_bc), n_bc=arr(edge.n_bc), alpha=arr(edge.alpha),
        g=None if edge.g is None else arr(edge.g),
    )
    ts.sizes = {"pde": len(ts.x_pde), "data": len(ts.x_data), "bc": len(ts.x_bc)}
    return ts


# -- consistency ---------------------------------------------------------------------------------
def check_replicas(comm, params: np.ndarray, step: int | None = None) -> None:
    """Raise RuntimeError on every rank unless ``params`` are bitwise the same on all ranks of
    ``comm`` (a CRC-32 of the bytes, one allreduce of two integers; a collective)."""
    MPI = _mpi()
    crc = zlib.crc32(np.ascontiguousarray(params).view(np.uint8))
    both = np.array([crc, -crc], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, both, op=MPI.MAX)
    if both[0] != -both[1]:
        crcs = comm.allgather(crc)
        at = "" if step is None else f" at step {step}"
        raise RuntimeError(
            f"the parameters differ between ranks{at} (CRC-32 per rank: "
            + ", ".join(f"{r}: {c:08x}" for r, c in enumerate(crcs))
            + "); every rank must take the same steps: something changed them on some ranks only "
            "(a callback?), or the MPI library's Allreduce is not deterministic")


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
    most the cores this process may run on (a launcher may bind ranks to cores)."""
    env = os.environ if environ is None else environ
    given = env.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if given.isdigit() and int(given) > 0:
        return int(given)
    MPI = _mpi()
    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        n_local = local.Get_size()
    finally:
        local.Free()
    cores = os.cpu_count() or 1
    try:
        allowed = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        allowed = cores
    return max(1, min(allowed, cores // n_local))
