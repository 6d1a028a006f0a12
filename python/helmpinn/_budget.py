"""The base of :mod:`helmpinn.memory`, on the lowest floor so that every floor may check its
memory: the limit (:func:`limit`: ``HELMPINN_MEMORY_LIMIT``, else :data:`MEMORY_FRACTION` of the
memory available), the one error (:class:`MemoryEstimateError`), the check that refuses a run
(:func:`check`), one network's arrays (:func:`training_memory`, :func:`workspace_bytes`) and the
finite-difference grid's estimate (:func:`fd_run`, :func:`check_fd`), which
:mod:`helmpinn.reference.fd` uses. :mod:`helmpinn.memory` re-exports all of it beside the
estimates of the kinds of run that stand on higher floors; its docstring has the numbers."""
from __future__ import annotations

import math
import os
import re
from typing import Any, Mapping

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX: no address-space limit to read
    resource = None  # type: ignore[assignment]

from . import _core

#: The environment variable that replaces the limit (bytes, a K/M/G/T suffix, or "none").
LIMIT_VARIABLE = "HELMPINN_MEMORY_LIMIT"
#: A run may use at most this fraction of the memory available when it is checked.
MEMORY_FRACTION = 0.8
#: Peak memory of the finite-difference assembly per grid node (the nodes, the coefficients,
#: the stencils' entries, the sparse matrix), measured with SuperLU on 2-D and 3-D PML problems.
ASSEMBLY_BYTES_PER_NODE = {1: 2_000, 2: 2_500, 3: 2_800}
#: Memory per stored entry of the finite-difference LU factors (complex values and SuperLU's
#: indices), measured 16–24 bytes.
LU_BYTES_PER_ENTRY = 24


class MemoryEstimateError(ValueError):
    """A run whose estimate exceeds :func:`limit`, whatever its kind; the message names the
    sizes, the total, the limit and what to change. A ValueError, so that code catching bad
    arguments catches it; ``helmpinn train`` turns it into its one line and status 2. Also
    importable as :data:`MemoryBudgetError` (here and in :mod:`helmpinn.runfiles`)."""


#: The name one-network runs raised before the estimates were one module: the same class.
MemoryBudgetError = MemoryEstimateError


# -- the limit -------------------------------------------------------------------------------------
def format_bytes(n: float) -> str:
    """``n`` bytes in the largest binary unit it reaches (``1.5 GiB``), or ``123 B``."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _meminfo_available() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _cgroup_available() -> int | None:
    for cap_file, usage in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                            ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                             "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        try:
            with open(cap_file) as fh:
                text = fh.read().strip()
            if text == "max":
                continue
            with open(usage) as fh:
                used = int(fh.read().strip())
            cap = int(text)
            if cap < 1 << 60:  # cgroup v1 says "no limit" with a huge number
                return max(cap - used, 0)
        except (OSError, ValueError):
            continue
    return None


def _address_space_available() -> int | None:
    if resource is None:
        return None
    try:
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as fh:
            used = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return max(soft - used, 0)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def available_memory() -> int | None:
    """Bytes this process can still allocate: the smallest of the kernel's MemAvailable
    (/proc/meminfo; else ``os.sysconf``), a cgroup's limit less its usage, and the address
    space limit (``ulimit -v``) less this process's size. None when nothing can be read."""
    known = [v for v in (_meminfo_available(), _cgroup_available(), _address_space_available()) if v is not None]
    return min(known) if known else None


def _parse_limit(text: str) -> int | None:
    text = text.strip()
    if text.lower() in ("none", "off", "no"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?", text, re.IGNORECASE)
    if not m:
        raise ValueError(f"{LIMIT_VARIABLE}={text!r}: expected a number of bytes with an optional K, M, G or T "
                         "suffix (e.g. 64G), or 'none'")
    scale = 1 << (10 * "_KMGT".index(m.group(2).upper() or "_"))
    return int(float(m.group(1)) * scale)


def _limit_and_words() -> tuple[int | None, str]:
    """:func:`limit` and the words a refusal says it with."""
    given = os.environ.get(LIMIT_VARIABLE)
    if given is not None and given.strip():
        cap = _parse_limit(given)
        return cap, f"the {format_bytes(cap or 0)} that {LIMIT_VARIABLE} allows"
    available = available_memory()
    if available is None:
        return None, ""
    return int(MEMORY_FRACTION * available), \
        f"{MEMORY_FRACTION:.0%} of the {format_bytes(available)} of memory available"


def limit() -> int | None:
    """The bytes a run of any kind may use: :data:`LIMIT_VARIABLE` where it is set (None for
    "none": no check), else :data:`MEMORY_FRACTION` of :func:`available_memory` (None where
    that is unknown)."""
    return _limit_and_words()[0]


def check(sizes: Mapping[str, int], what: str, change: str, available: int | None = None) -> int:
    """Refuse (:class:`MemoryEstimateError`) when the sizes together exceed ``available``
    (default :func:`limit`; no check when that is None); ``what`` names the run, ``change``
    says what would make it smaller. The message lists every part, the largest first. Returns
    the total."""
    if available is None:
        cap, words = _limit_and_words()
    else:
        cap, words = int(available), f"the {format_bytes(available)} it may use"
    total = sum(int(v) for v in sizes.values())
    if cap is not None and total > cap:
        parts = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]) if v)
        raise MemoryEstimateError(f"{what} needs about {format_bytes(total)} ({parts}), more than {words}; "
                                  f"{change}, or set {LIMIT_VARIABLE} (bytes, e.g. 64G, or none) to allow more")
    return total


def check_memory(sizes: Mapping[str, int], what: str, available: int | None = None,
                 fraction: float = MEMORY_FRACTION) -> int:
    """:func:`check` under the name and arguments :mod:`helmpinn.runfiles` gave it: a refusal
    where the sizes exceed ``fraction`` of ``available`` bytes (default: :func:`limit`)."""
    if available is not None:
        available = int(fraction * available)
    return check(sizes, what, "use fewer points or a smaller model", available)


# -- one network -----------------------------------------------------------------------------------
def workspace_bytes(spec: Any, dtype: str, batch_size: int = 4096, threads: int = 1) -> int:
    """The host memory of a CPU Workspace of ``spec``: the sum the core checks before it
    allocates (``workspace_elements`` in ``cpp/src/common/workspace.cpp``), with each thread's
    tile rows as the CPU backend sizes them (``2d + 1`` streams where that is more than
    ``d + 2``), so that it can be added to the rest before anything is allocated."""
    d, m, h, layers = spec.in_dim, spec.ff_dim, spec.hidden_dim, spec.num_hidden_layers
    s, sx, tile, maxw = d + 2, max(d + 2, 2 * d + 1), 64, max(2 * m, h)
    widths = 2 * layers * h + 2 * m + 2
    elements = batch_size * (s * widths + 3 * d + 2) + 35 * spec.num_params + (d + 1) * m
    elements += max(threads, 1) * (sx * tile * (7 * maxw + widths) + tile * (d + 2) + 16)
    return elements * (4 if dtype == "float32" else 8)


def training_memory(dim: int, pde_points: int, bc_points: int, num_params: int, dtype: str,
                    workspace: int) -> dict[str, int]:
    """Estimated bytes of the large allocations of a training run, by name.

    ``points arrays``: the sampler's float64 scratch for one draw (unit-cube points, the
    mapped points and a distance or mask per point, with room for rejection sampling);
    ``training set``: one draw as the loss takes it (float64 / complex128 points, wavenumber,
    source, operator coefficients and boundary data, plus the same in the model's dtype), twice,
    since a new draw is made while the old one is alive; ``workspace``: the core's
    (:func:`workspace_bytes`); ``parameters``: parameters, gradient, Adam's two moments and
    the last good copy kept for a divergence, with the checkpoint's copies.
    """
    item = 4 if dtype == "float32" else 8
    n, nb = int(pde_points), int(bc_points)
    points = n * (4 * 8 * dim + 2 * 8) + nb * (4 * 8 * dim + 2 * 8 + 36)
    per_pde = (8 * dim + 8 + 16 + 2 * 16 * dim) + item * (dim + 1 + 2 + 4 * dim)
    per_bc = (2 * 8 * dim + 32 + 36) + item * (2 * dim + 4)
    return {"points arrays": points, "training set": 2 * (n * per_pde + nb * per_bc),
            "workspace": int(workspace), "parameters": 8 * int(num_params) * item}


def cpus() -> int:
    """The CPUs this process may run on (its affinity set where the system has one)."""
    try:
        return max(len(os.sched_getaffinity(0)), 1)
    except (AttributeError, OSError):
        return max(os.cpu_count() or 1, 1)


# -- the finite-difference reference ---------------------------------------------------------------
def lu_fill(n_nodes: int, dim: int) -> float:
    """The entries of L and U that the default ordering leaves for a grid of ``n_nodes`` nodes
    in ``dim`` dimensions, fitted to measurements (2-D: 101² to 401² nodes, ``6.0–6.7 N^{4/3}``;
    3-D: 11³ to 33³ nodes, ``0.22–0.26 N^{1.85}``, extrapolated beyond; 1-D: banded)."""
    n = float(n_nodes)
    if dim == 1:
        return 12.0 * n
    if dim == 2:
        return 7.0 * n ** (4.0 / 3.0)
    return 0.26 * n ** 1.85


def fd_run(n_nodes: int, dim: int) -> dict[str, int]:
    """The estimated bytes of :class:`~helmpinn.reference.FDOperator`'s assembly and the LU of
    its matrix on a grid of ``n_nodes`` nodes in ``dim`` dimensions, by name: ``assembly``
    ``ASSEMBLY_BYTES_PER_NODE[dim] × N`` and ``LU factors`` ``LU_BYTES_PER_ENTRY ×
    lu_fill(N, dim)``."""
    return {"assembly": int(ASSEMBLY_BYTES_PER_NODE[dim] * n_nodes),
            "LU factors": int(LU_BYTES_PER_ENTRY * lu_fill(n_nodes, dim))}


def fd_memory_estimate(n_nodes: int, dim: int) -> int:
    """The total of :func:`fd_run`: ``ASSEMBLY_BYTES_PER_NODE[dim] × N + LU_BYTES_PER_ENTRY ×
    lu_fill(N, dim)``."""
    return int(ASSEMBLY_BYTES_PER_NODE[dim] * n_nodes + LU_BYTES_PER_ENTRY * lu_fill(n_nodes, dim))


def check_fd(n_nodes: int, dim: int) -> dict[str, int]:
    """:func:`fd_run`'s estimate, refused by :func:`check` where it exceeds the limit, with
    what to change (a larger h: the memory grows about like h^-1, h^-8/3 and h^-5.55 in 1, 2
    and 3 dimensions). Returns the sizes."""
    sizes = fd_run(n_nodes, dim)
    power = {1: 1, 2: 8 / 3, 3: 5.55}[dim]
    check(sizes, f"fd_solve: a {dim}-D grid of {n_nodes:,} nodes",
          f"use a larger h (the memory grows about like h^-{power:.3g}), a smaller domain or PML, "
          f"or a machine with more memory")
    return sizes
