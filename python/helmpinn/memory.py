"""Memory estimates of a run, made before anything is allocated: one estimate function per kind
of run, one limit, one error.

Each kind of run has a function that estimates its large allocations by name, from its sizes
alone, and a check that refuses it where their total exceeds :func:`limit`:

- **one network** (:class:`~helmpinn.Model`, trained by Adam, L-BFGS or Levenberg-Marquardt):
  :func:`network_run`, :func:`check_network`;
- **a domain-decomposed model** (:mod:`helmpinn.models.decomposition`, trained by Gauss-Newton,
  :mod:`helmpinn.optim.gauss_newton`, or by Adam): :func:`decomposed_run`, :func:`check_decomposed`
  (:func:`check_settings` for a settings table, :func:`check_fit` for a Trainer's fit);
- **the finite-difference reference** (:func:`helmpinn.reference.fd_solve`,
  :class:`~helmpinn.reference.FDOperator`, and through it every grid of
  :func:`helmpinn.reference.fwi`): :func:`fd_run`, :func:`check_fd`.

``helmpinn train`` (:mod:`helmpinn.cli`) checks its run (one network or decomposed) before the
output folder is made; :func:`helmpinn.solve` checks its plan (one network or decomposed) before
it builds the model; the :class:`~helmpinn.Trainer` checks each fit before it draws its points
(:func:`check_trainer`; the Gauss-Newton driver again before the points grow); ``FDOperator``
checks its grid before it assembles anything. A run that does not fit is refused with one
message (:class:`MemoryEstimateError`, a ValueError) naming the sizes, the total, the limit and
what to change, instead of dying with a MemoryError, or under the kernel's OOM killer, minutes
later.

**The limit** (:func:`limit`, the same for every kind): :data:`MEMORY_FRACTION` (80%) of the
memory available when the check runs (:func:`available_memory`: the smallest of /proc/meminfo's
MemAvailable, else ``os.sysconf``, a cgroup's limit less its usage and the address-space limit
less this process's size), or the environment variable :data:`LIMIT_VARIABLE`
(``HELMPINN_MEMORY_LIMIT``): a number of bytes with an optional K, M, G or T suffix (powers of
1024), used as it is, or ``none`` for no check.

**One network** (:func:`network_run`; bytes, N PDE and B boundary points, d the dimension, P
parameters, an item of 4 bytes in float32 and 8 in float64):

- ``points arrays``: the sampler's float64 scratch for one draw, ``(32 d + 16) N + (32 d + 52) B``
  (:func:`training_memory`);
- ``training set``: one draw as the loss takes it, twice (a new draw is made while the old one
  is alive): ``2 [(40 d + 24 + item (5 d + 3)) N + (16 d + 68 + item (2 d + 4)) B]``;
- ``workspace``: the core's CPU workspace (:func:`workspace_bytes`: the core's own sum, with
  each thread's tile rows), for the threads OpenMP runs or the CPUs this process may use,
  whichever is more;
- ``parameters``: ``8 P × item`` (parameters, gradient, Adam's moments, the last good copy and
  the checkpoint's copies);
- with Levenberg-Marquardt, its system (:func:`lm_system`: the solver
  :func:`helmpinn.optim.lm.choose_solver` picks within ``max_matrix_bytes``, and its
  :func:`helmpinn.optim.lm.memory_estimate`, for 2 (N + B) rows shared over the ranks).

**A decomposed run** (:func:`decomposed_run`; bytes, N points, the PDE's and the boundary's, d
the dimension, a level of ``S`` subdomains of ``P`` parameters each; M = N Σ_levels Π_a c_a
the (subdomain, point) pairs, ``c_a = min(g_a, 1 + overlap − overlap/g_a)`` the subdomains that
cover a point along an axis of ``g_a`` subdomains; the Jacobian blocks of the largest subdomain
``2 N Π_a min(1, (1 + overlap)/g_a)`` rows):

- ``points arrays``, ``training set``, ``parameters``: :func:`training_memory`
  (the sampler's scratch, two draws alive at once, and 8 parameter vectors);
- ``rows``: the residual rows (:class:`~helmpinn.models.decomposition.Rows`: x, the operator's a, b, c
  and f, the term), ``(40 d + 52) N``, twice (they are concatenated from the terms');
- ``windows``: each pair's subdomain, point, window and its derivatives while the pieces are
  made, ``(48 + 48 d) M``, and one chunk's scratch, ``8 (4 d + 10) K C`` for
  C = :data:`helmpinn.models.decomposition.WINDOW_CHUNK` points of K = ⌊1 + overlap⌋ + 3 candidates
  per axis;
- ``subdomain batches``: each pair's row indices and core inputs in float64, ``(72 + 40 d) M``,
  and with float32 products or Gram matrices a float32 copy, ``(16 + 20 d) M`` more;
- Gauss-Newton only: ``Gram matrices``, ``S P²`` in the Gram's dtype (4 bytes for
  ``gram="float32"``, the default, else 8), and ``Cholesky factors`` twice that (a damped
  trial's factors are made while the last trial's are alive); ``Jacobian blocks``: the blocks of
  a batch (``GRAM_BATCH`` per thread, at most S, or ``GRAM_BATCH_BYTES`` and one more) of the largest
  subdomain, or with ``products="blocks"`` all of them in float64, ``16 M P``; ``coarse
  space``: each pair's output-layer columns (``16 (2H + 2) M``) and the coarse matrix of
  ``n = S (2H + 2)`` unknowns, dense ``32 n²`` up to
  :data:`helmpinn.optim.gauss_newton.SPARSE_COARSE_ABOVE`, else sparse, ``E`` = S block rows of
  ``Π_a min(g_a, 2⌈1 + overlap⌉ − 1)`` blocks of ``(2H + 2)²`` entries:
  ``max(ASSEMBLY, 12 + 12 F) E`` bytes, :data:`ASSEMBLY` while it is assembled and then the
  matrix and two trials' SuperLU factors of :func:`coarse_fill` F entries per entry;
  ``mode rows``: with ``resonance`` set, up to ``resonance_most`` modes, with ``corners``
  a polygon's corners' rows (:mod:`helmpinn.problems.corners`) and with ``radiation`` the
  radiation rows (:mod:`helmpinn.problems.radiation`), q in all, ``32 q P`` for
  their gradients U and the preconditioner's M U (as dense [P, 2q] arrays: an upper bound where
  they are held by blocks, :mod:`helmpinn.optim.low_rank`), and ``8 q N`` for their columns, and on a Green's grid
  (:func:`helmpinn.problems.waves.resonance_green_rows`, under the hard constraint)
  ``8 q (3 G + 2 min(4^d G, 2^18))`` for its G nodes (``Π_a (⌈4.1 w_a⌉ + 16)``, w_a the
  wavelengths along axis a) and the slabs of the grid 4 times finer that projects the source;
  ``singular functions``: the n corners' functions' columns through every row, their SVD and
  its orthonormal basis (:class:`helmpinn.models.decomposition.SingularResiduals`), ``128 n N``;
  ``solver
  vectors``: ``128 P`` and ``160 N`` (CG's and the step's parameter and residual vectors);
- ``workspaces``: each level's core workspaces (:func:`workspace_bytes`, in
  float64 and float32); ``bookkeeping``: 4 KiB a subdomain.

Over ``ranks`` MPI ranks every rank holds every point and the windows of every subdomain, but
the batches, blocks, Gram matrices and factors of its own subdomains only (a share
``1/ranks``); the estimate is one rank's. Measured against the peak resident memory of small
runs (docs/guide/errors-threads.md, "Memory"), the estimate was 1.0 to 2.4 times the
growth of the process's peak over its size before the run.

**The finite-difference grid** (:func:`fd_run`; N nodes in d dimensions):
``assembly`` :data:`ASSEMBLY_BYTES_PER_NODE` [d] × N (2,000, 2,500 and 2,800 bytes in 1, 2 and 3
dimensions: the nodes, the coefficients, the stencils' entries and the sparse matrix) and ``LU
factors`` :data:`LU_BYTES_PER_ENTRY` (24) × :func:`lu_fill` (N, d) entries (12 N in 1-D, 7
N^{4/3} in 2-D, 0.26 N^{1.85} in 3-D), both measured with SuperLU on 2-D and 3-D PML problems.
"""
from __future__ import annotations

import math
import os
import re
from typing import Any, Mapping, Sequence

from . import _core, distributed
from .optim import lm
from ._budget import (  # noqa: F401  (re-exported: helmpinn.memory is the public module)
    LIMIT_VARIABLE, MEMORY_FRACTION, ASSEMBLY_BYTES_PER_NODE, LU_BYTES_PER_ENTRY, MemoryEstimateError, MemoryBudgetError,
    format_bytes, available_memory, limit, check, check_memory, workspace_bytes,
    training_memory, cpus, lu_fill, fd_run, fd_memory_estimate, check_fd)
from .models.decomposition import WINDOW_CHUNK
from .defaults import wavelengths
from .optim.gauss_newton import GRAM_BATCH, GRAM_BATCH_BYTES, SPARSE_COARSE_ABOVE
from .problems.radiation import radiation_count
from .problems.corners import CORNER_ROW_RADIUS, CORNER_ROW_WEIGHT, corner_wedges, rows_corner_radius
from .problems.singular import corner_singularities
from .problems.waves import RESONANCE_MOST, _closed_box

__all__ = ["MemoryEstimateError", "MemoryBudgetError", "LIMIT_VARIABLE", "MEMORY_FRACTION", "ASSEMBLY",
           "ASSEMBLY_BYTES_PER_NODE", "LU_BYTES_PER_ENTRY", "available_memory", "limit", "format_bytes", "check",
           "workspace_bytes", "training_memory", "lm_system", "network_run", "check_network", "coarse_fill",
           "decomposed_run", "decomposed_layout", "check_decomposed", "check_fit", "check_trainer", "settings_run",
           "check_settings", "lu_fill", "fd_run", "fd_memory_estimate", "check_fd", "check_memory"]

#: Bytes per entry of the sparse coarse matrix's dense blocks while it is assembled (the blocks,
#: their indices, the concatenated triplets and the CSC conversion, alive together).
ASSEMBLY = 64
#: The nodes of the finer Green's grid taken at a time (``helmpinn.problems.waves._source_in_modes``'s slab).
GREEN_SLAB = 1 << 18
#: Bytes of Python bookkeeping per subdomain (its dicts, slices, centre, core batches' objects).
BOOKKEEPING = 4096


def lm_system(num_params: int, points: int, options: Mapping[str, Any], dtype: str, ranks: int = 1
              ) -> dict[str, int]:
    """Levenberg-Marquardt's own matrices (J, JᵀJ or JJᵀ and their factors) for ``points``
    points (2 rows each, shared over ``ranks``), by the solver it will use with ``options``
    (:func:`helmpinn.optim.lm.choose_solver` within ``max_matrix_bytes``, default 2 GiB, and
    :func:`helmpinn.optim.lm.memory_estimate`). An explicit dense solver over that budget raises
    LM's own ValueError."""
    ranks = max(int(ranks), 1)
    rows = -(-2 * int(points) // ranks)   # (re, im) rows; under mpiexec each rank holds its share
    kw = {"gram": options.get("gram", "float64"), "damping": options.get("damping", "identity"),
          "dtype": dtype, "ranks": ranks}
    solver = lm.choose_solver(num_params, rows, options.get("solver", "auto"),
                              max_matrix_bytes=options.get("max_matrix_bytes", 2 << 30), **kw)
    return {f"LM's {solver} system": int(lm.memory_estimate(num_params, rows, solver, **kw))}


def network_run(spec: Any, pde_points: int, bc_points: int = 0, *, dtype: str = "float32",
                lm_options: Mapping[str, Any] | None = None, ranks: int = 1,
                threads: int | None = None) -> dict[str, int]:
    """The estimated bytes of one network's run, by name (module docstring): a network of
    ``spec`` (a :class:`~helmpinn.ModelSpec`) in ``dtype`` on ``pde_points`` and ``bc_points``
    points; ``lm_options`` (Levenberg-Marquardt's options, None for another optimiser) adds
    LM's system (:func:`lm_system`) over ``ranks``; ``threads``: the engine's (None: the
    threads OpenMP runs or the CPUs this process may use, whichever is more: a CPU workspace
    has scratch rows for each). Nothing is allocated."""
    threads = max(int(threads or _core.get_num_threads()), cpus())
    sizes = training_memory(spec.in_dim, pde_points, bc_points, spec.num_params, dtype,
                            workspace_bytes(spec, dtype, threads=threads))
    if lm_options is not None:
        sizes.update(lm_system(spec.num_params, int(pde_points) + int(bc_points), lm_options, dtype, ranks))
    return sizes


def check_network(spec: Any, pde_points: int, bc_points: int = 0, *, what: str | None = None,
                  flags: Mapping[str, str] | None = None, **run: Any) -> dict[str, int]:
    """:func:`network_run`'s estimate (``run``: its keywords), refused by :func:`check` where
    it exceeds the limit; ``what`` names the run (default: its sizes), ``flags`` the settings
    to change as the caller spells them (the CLI's ``--points``, ``solve``'s ``pde_points``).
    Returns the sizes."""
    sizes = network_run(spec, pde_points, bc_points, **run)
    names = {"points": "pde_points, bc_points", "hidden": "hidden, layers, ff_dim", **dict(flags or {})}
    if what is None:
        what = (f"this run (one network of {spec.num_params:,} parameters, {int(pde_points) + int(bc_points):,} "
                f"points, {run.get('dtype', 'float32')})")
    check(sizes, what, f"use fewer points ({names['points']}) or a smaller network ({names['hidden']})")
    return sizes


# -- a decomposed model ----------------------------------------------------------------------------
def coarse_fill(subdomains: int) -> float:
    """SuperLU's factors of the sparse coarse matrix over S subdomains, in entries per entry of
    its blocks: ``(1.3 + 0.1 sqrt(S)) / 2`` (half the blocks' entries are the exact zeros
    between the real and the imaginary output, which the matrix drops; the fill measured 2.3,
    3.3 and 4.15 times its entries on 10 × 10, 20 × 20 and 30 × 30 grids)."""
    return (1.3 + 0.1 * math.sqrt(subdomains)) / 2


def decomposed_layout(model: Any = None, *, dim: int | None = None, grids: Sequence[Sequence[int]] = (),
                      spec: Any = None, overlap: float | None = None) -> dict[str, Any]:
    """The layout :func:`decomposed_run` takes, ``{"dim", "overlap", "levels": [(grid,
    ModelSpec), ...]}``: of a :class:`~helmpinn.models.decomposition.DecomposedModel`, or of ``grids``
    (one per level), one ``spec`` for every level, ``dim`` and ``overlap`` (a run's settings,
    before the model exists)."""
    if model is not None:
        return {"dim": model.dim, "overlap": model.levels[0].overlap,
                "levels": [(tuple(lv.grid), s) for lv, s in zip(model.levels, model.specs)]}
    return {"dim": int(dim), "overlap": float(overlap), "levels": [(tuple(int(n) for n in g), spec) for g in grids]}


def _coverage(grid: Sequence[int], overlap: float) -> float:
    """The subdomains of a level that cover a point, on average (module docstring)."""
    return math.prod(1.0 if g == 1 else min(g, 1.0 + overlap - overlap / g) for g in grid)


def _gauss_newton(layout: Mapping[str, Any], n: int, ranks: int, threads: int,
                  options: Mapping[str, Any]) -> dict[str, int]:
    """Gauss-Newton's own arrays (module docstring), one rank's."""
    overlap = layout["overlap"]
    gram = options.get("gram", "float32")
    g_item = 4 if gram == "float32" else 8
    keep = options.get("products", "core32") == "blocks"
    grams = sum(math.prod(g) * s.num_params ** 2 for g, s in layout["levels"]) * g_item / ranks
    # a trial's factors are made while the last trial's are still alive
    out = {"Gram matrices": grams, "Cholesky factors": 2 * grams}
    biggest = max(2 * n * math.prod(min(1.0, (1 + overlap) / a) for a in g) * s.num_params
                  for g, s in layout["levels"])
    if keep:
        out["Jacobian blocks"] = 16 * sum(n * _coverage(g, overlap) * s.num_params
                                          for g, s in layout["levels"]) / ranks
    else:
        batch = min(GRAM_BATCH * threads, math.ceil(sum(math.prod(g) for g, _ in layout["levels"]) / ranks))
        out["Jacobian blocks"] = min(GRAM_BATCH_BYTES + biggest * g_item, batch * biggest * g_item)
    if options.get("coarse", "last_layer"):
        width = [2 * s.hidden_dim + 2 for _, s in layout["levels"]]
        unknowns = sum(math.prod(g) * w for (g, _), w in zip(layout["levels"], width))
        columns = 16 * sum(n * _coverage(g, overlap) * w for (g, _), w in zip(layout["levels"], width)) / ranks
        if unknowns <= SPARSE_COARSE_ABOVE:
            matrix = 4 * 8 * unknowns ** 2
        else:
            near = 2 * math.ceil(1 + overlap) - 1
            entries = sum(math.prod(g) * math.prod(min(a, near) for a in g) * w * w
                          for (g, _), w in zip(layout["levels"], width))
            S = sum(math.prod(g) for g, _ in layout["levels"])
            matrix = max(ASSEMBLY, 12 + 12 * coarse_fill(S)) * entries
        out["coarse space"] = columns + matrix
    P = sum(math.prod(g) * s.num_params for g, s in layout["levels"])
    out["solver vectors"] = 128 * P + 160 * n
    return out


def _mode_rows(layout: Mapping[str, Any], n: int, modes: int, green_wavelengths: Sequence[float] | None) -> int:
    """The mode rows' arrays (module docstring): none without modes."""
    if not modes:
        return 0
    P = sum(math.prod(g) * s.num_params for g, s in layout["levels"])
    size = 32 * modes * P + 8 * modes * n
    if green_wavelengths is not None:
        nodes = math.prod(math.ceil(4.1 * w) + 16 for w in green_wavelengths)
        size += 8 * modes * (3 * nodes + 2 * min(4 ** layout["dim"] * nodes, GREEN_SLAB))
    return size


def decomposed_run(layout: Mapping[str, Any], pde_points: int, bc_points: int = 0, *, optimizer: str = "gn",
                   options: Mapping[str, Any] | None = None, ranks: int = 1, threads: int | None = None,
                   modes: int = 0, green_wavelengths: Sequence[float] | None = None,
                   singular: int = 0) -> dict[str, int]:
    """The estimated bytes of a decomposed run's large allocations, by name (module docstring):
    ``layout`` (:func:`decomposed_layout`), the points, ``optimizer`` ("gn" or "adam"),
    ``options`` (Gauss-Newton's: ``gram``, ``products``, ``coarse``), ``ranks`` (MPI ranks; the
    estimate is one rank's), ``threads`` (the engine's; None: its current count), ``modes`` (the
    mode rows at most, 0: none) and ``green_wavelengths`` (the wavelengths along each axis where
    the mode rows are Green's, None where they are not) and ``singular`` (the corners' singular
    functions the model adds, 0: none). Nothing is allocated."""
    d, overlap = int(layout["dim"]), float(layout["overlap"])
    n = int(pde_points) + int(bc_points)
    ranks = max(int(ranks), 1)
    threads = max(int(threads or _core.get_num_threads()), 1)
    options = dict(options or {})
    levels = layout["levels"]
    P = sum(math.prod(g) * s.num_params for g, s in levels)
    S = sum(math.prod(g) for g, _ in levels)
    pairs = n * sum(_coverage(g, overlap) for g, _ in levels)
    sizes = training_memory(d, pde_points, bc_points, P, "float64", 0)
    del sizes["workspace"]
    K = int(math.floor(1 + overlap)) + 3
    sizes["rows"] = 2 * (40 * d + 52) * n
    sizes["windows"] = (48 + 48 * d) * pairs + WINDOW_CHUNK * K * 8 * (4 * d + 10)
    single = optimizer == "adam" or (options.get("gram", "float32") != "float32"
                                     and options.get("products", "core32") != "core32")
    sizes["subdomain batches"] = ((72 + 40 * d) + (0 if single else 16 + 20 * d)) * pairs / ranks
    if optimizer == "gn":
        sizes.update(_gauss_newton(layout, n, ranks, threads, options))
        sizes["mode rows"] = _mode_rows(layout, n, modes, green_wavelengths)
        sizes["singular functions"] = 128 * int(singular) * n
    sizes["workspaces"] = sum(workspace_bytes(s, "float64", 2048, threads)
                              + workspace_bytes(s, "float32", 2048, threads) for _, s in levels)
    sizes["bookkeeping"] = BOOKKEEPING * S
    return {k: int(v) for k, v in sizes.items() if v}


def check_decomposed(layout: Mapping[str, Any], pde_points: int, bc_points: int = 0, *,
                     flags: Mapping[str, str] | None = None, **run: Any) -> dict[str, int]:
    """:func:`decomposed_run`'s estimate, refused by :func:`check` where it exceeds the limit,
    with the settings to change named by ``flags`` (a setting's name as the caller spells it:
    the CLI's ``--points``, ``solve``'s ``pde_points``). Returns the sizes."""
    sizes = decomposed_run(layout, pde_points, bc_points, **run)
    names = {"points": "pde_points", "grids": "decomposition's grids or subdomains_per_wavelength",
             "hidden": "hidden", **dict(flags or {})}
    S = sum(math.prod(g) for g, _ in layout["levels"])
    grids = " + ".join("x".join(map(str, g)) for g, _ in layout["levels"])
    top = max(sizes, key=sizes.get)
    if top in ("Gram matrices", "Cholesky factors", "Jacobian blocks", "coarse space", "parameters", "bookkeeping"):
        change = f"use fewer subdomains ({names['grids']}) or smaller subnetworks ({names['hidden']})"
    else:
        change = f"use fewer points ({names['points']}) or fewer subdomains ({names['grids']})"
    if run.get("optimizer", "gn") == "gn":
        change += ", or spread the subdomains over more MPI ranks"
    what = (f"this decomposed run ({grids} = {S:,} subdomains of {layout['levels'][0][1].num_params:,} parameters, "
            f"{int(pde_points) + int(bc_points):,} points, {run.get('optimizer', 'gn')})")
    check(sizes, what, change)
    return sizes


def _singular(problem: Any, optimizer: str, options: Mapping[str, Any]) -> int:
    """How many singular functions the run adds to the model (Gauss-Newton with ``singular``,
    default, where every re-entrant corner takes them: :func:`helmpinn.problems.singular.corner_singularities`)."""
    if optimizer != "gn" or not options.get("singular", True):
        return 0
    found = corner_singularities(problem)
    return 0 if found is None else found.count


def _modes(problem: Any, optimizer: str, options: Mapping[str, Any], hard: bool) -> tuple[int, list[float] | None]:
    """The mode rows at most and, where they are Green's (``hard``: the model has the hard
    constraint), the wavelengths along each axis: ``resonance_most`` where ``resonance`` is
    set and the problem is a closed box (not looked for: their count is an upper bound), and
    the corners' rows where ``corners`` is (default) and the problem has any
    (:func:`helmpinn.problems.corners.corner_wedges`), unless the run adds the corners' singular
    functions instead (``singular``, default, where every corner takes them), and the radiation
    rows' columns where ``radiation`` is (:func:`helmpinn.problems.radiation.radiation_count`)."""
    if optimizer != "gn":
        return 0, None
    rows = radiation_count(problem, float(options.get("radiation", 0.0)))
    if options.get("corners", CORNER_ROW_WEIGHT) and not _singular(problem, optimizer, options):   # at the sectors of the run's own radius
        radius = rows_corner_radius(problem)
        rows += sum(len(w.orders) for w in corner_wedges(problem, None if radius is None else CORNER_ROW_RADIUS * radius))
    if not options.get("resonance") or _closed_box(problem) is None:
        return rows, None
    most = int(options.get("resonance_most", RESONANCE_MOST))
    return most + rows, [float(w) for w in wavelengths(problem)] if hard else None


def check_fit(trainer: Any, driver: Any, pde_points: int | None = None) -> dict[str, int]:
    """:func:`check_decomposed` of a :class:`~helmpinn.Trainer`'s fit of a decomposed model by
    ``driver`` (Gauss-Newton's options from its settings; any other driver counted as Adam) on
    ``pde_points`` (default the trainer's; the boundary's in proportion): what the Trainer calls
    before a fit draws its points, and the Gauss-Newton driver before they grow."""
    name = "gn" if getattr(driver, "name", None) == "gn" else "adam"
    settings = getattr(driver, "settings", None)
    options = {**dict(getattr(settings, "options", {}) or {}),
               "resonance": getattr(settings, "resonance", 0.0),
               "resonance_most": getattr(settings, "resonance_most", 0),
               "corners": getattr(settings, "corners", 0.0),
               "radiation": getattr(settings, "radiation", 0.0),
               "singular": getattr(settings, "singular", False)}
    pde = trainer.pde_points if pde_points is None else int(pde_points)
    bc = trainer.bc_points if pde_points is None or trainer.problem.dim == 1 \
        else math.ceil(trainer.bc_points * pde / trainer.pde_points)
    modes, green = _modes(trainer.problem, name, options, trainer.model.constraint is not None)
    ranks = 1 if trainer.comm is None else trainer.comm.Get_size()
    return check_decomposed(decomposed_layout(trainer.model), pde, bc, optimizer=name, options=options,
                            ranks=ranks, modes=modes, green_wavelengths=green,
                            singular=_singular(trainer.problem, name, options),
                            flags={"points": "pde_points", "grids": "the model's grids", "hidden": "hidden_dim"})


def check_trainer(trainer: Any, driver: Any) -> None:
    """A :class:`~helmpinn.Trainer`'s fit by ``driver``, before it draws its points, by the
    estimate of the model's kind (its ``kind`` and ``spec``,
    :class:`~helmpinn.models.model_protocol.TrainableModel`): one core network's by
    :func:`check_network` (its points, training set, workspace and parameters;
    Levenberg-Marquardt checks its own matrices against its budget as it makes them), a
    decomposed model's by :func:`check_fit`; a model of another kind is not estimated here.
    Agreed across the trainer's ranks (a refusal on one rank raises on every rank)."""
    model = trainer.model
    with distributed.collective(trainer.comm, "the memory estimate"):
        if model.spec is not None:
            check_network(model.spec, trainer.pde_points, trainer.bc_points,
                          dtype=model.dtype.name, flags={"points": "pde_points, bc_points",
                                                         "hidden": "the model's hidden_dim"})
        elif model.kind == "decomposed":
            check_fit(trainer, driver)


def _settings_spec(settings: Mapping[str, Any], dim: int) -> Any:
    """The :class:`~helmpinn.ModelSpec` of a settings table's network (``ff_dim``, ``hidden``,
    ``layers``); a ValueError naming them where the core cannot hold
    them (each must be below 2**31)."""
    sizes = (int(settings["ff_dim"]), int(settings["hidden"]), int(settings["layers"]))
    try:
        return _core.ModelSpec(dim, *sizes)
    except (ValueError, TypeError, OverflowError) as exc:
        why = str(exc) if isinstance(exc, ValueError) else f"each must be an integer below {2**31}"
        raise ValueError(f"invalid network (ff_dim {sizes[0]}, hidden {sizes[1]}, layers {sizes[2]}): {why}") from None


def settings_run(settings: Mapping[str, Any], problem: Any, model: Any = None
                 ) -> tuple[dict[str, Any], int, int, dict[str, Any]]:
    """``(layout, pde_points, bc_points, keywords)`` of :func:`decomposed_run` for a decomposed
    run's settings table (a plan's record, :meth:`helmpinn.training.plan.RunPlan.record`) on ``problem`` (the layout
    ``model``'s where one is given, a model to train on those settings): the mode rows
    counted at their most (``resonance_most``) where ``resonance`` is set and the problem is a
    closed box, Green's where the model has the hard constraint."""
    dd = settings["decomposition"]
    d = int(problem.dim)
    spec = _settings_spec(settings, d)
    layout = decomposed_layout(model) if model is not None else \
        decomposed_layout(dim=d, grids=dd["grids"], spec=spec, overlap=dd["overlap"])
    points = int(settings["pde_points"])
    optimizer = "adam" if settings.get("optimizer") == "adam" else "gn"
    gn = dict(settings.get("gn") or {})
    hard = bool(dd.get("constraint")) if model is None else model.constraint is not None
    modes, green = _modes(problem, optimizer, gn, hard)
    return layout, points, int(settings["bc_points"]), {"optimizer": optimizer, "options": gn, "modes": modes,
                                                        "green_wavelengths": green,
                                                        "singular": _singular(problem, optimizer, gn)}


def check_settings(settings: Mapping[str, Any], problem: Any, *, model: Any = None, ranks: int = 1,
                   threads: int | None = None, flags: Mapping[str, str] | None = None) -> dict[str, int]:
    """The memory check of a run's settings table on ``problem`` (``model``: the model to train
    on them, where it exists): a decomposed run's (``settings["model"] == "decomposed"``; without a "model",
    as runs saved before it was a setting, where the optimiser is "gn") by
    :func:`check_decomposed` (:func:`settings_run`), one network's by :func:`check_network`
    with Levenberg-Marquardt's system where the optimiser is "lm". ``settings``: a plan's record
    (:meth:`helmpinn.training.plan.RunPlan.record`, as ``hp.solve`` and the CLI keep it).
    Returns the sizes."""
    default = "decomposed" if settings.get("optimizer") == "gn" else "network"   # runs saved before "model"
    if settings.get("model", default) == "decomposed":
        layout, pde, bc, run = settings_run(settings, problem, model)
        return check_decomposed(layout, pde, bc, flags=flags, ranks=ranks, threads=threads, **run)
    spec = model.spec if model is not None else _settings_spec(settings, int(problem.dim))
    dtype = model.dtype.name if model is not None else str(settings.get("dtype", "float32"))
    lm_options = settings.get("lm") if settings.get("optimizer") == "lm" else None
    return check_network(spec, int(settings["pde_points"]), int(settings["bc_points"]),
                         dtype=dtype, lm_options=dict(lm_options or {}) if lm_options is not None else None,
                         ranks=ranks, threads=threads, flags=flags)
