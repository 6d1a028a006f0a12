"""The BLAS thread limit, in one place: :func:`blas_limit` (used by the optimisers' linear algebra)."""
from __future__ import annotations

import contextlib
import warnings

from . import _core

__all__ = ["blas_limit", "auto_blas_threads", "check_blas_threads"]


def auto_blas_threads() -> int:
    """helmpinn's thread count (:func:`helmpinn.get_num_threads`: ``OMP_NUM_THREADS``,
    :func:`helmpinn.set_num_threads` or the cores), whatever the machine's load. The BLAS's sums
    depend on its thread count, so a count read from the load (as "auto" once was) gave another
    result on a busy machine than on an idle one; this one gives the same numbers on every
    machine of the same kind. On cores shared with other work the BLAS threads spin against it:
    ``blas_threads=1`` is then faster, and also the same on every machine."""
    return int(_core.get_num_threads())


def check_blas_threads(n: object) -> int | str | None:
    """``n`` when it is a valid ``blas_threads`` setting ("auto", None or an int >= 1), else
    ValueError naming the argument."""
    if n is None or n == "auto" or (isinstance(n, int) and not isinstance(n, bool) and n >= 1):
        return n  # type: ignore[return-value]
    raise ValueError(f"blas_threads must be 'auto', None or an int >= 1, got {n!r}")


def blas_limit(n: int | str | None) -> contextlib.AbstractContextManager:
    """A block in which the BLAS (NumPy's, SciPy's) uses at most ``n`` threads (threadpoolctl):
    ``n`` an int >= 1, "auto" (:func:`auto_blas_threads`, decided now) or None (no limit)."""
    if n == "auto":
        n = auto_blas_threads()
    if n is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # a source tree run without its dependencies installed
        _warn_unlimited()
        return contextlib.nullcontext()
    # SciPy's BLAS (a library of its own beside NumPy's) loaded now: one first loaded inside
    # the block would keep the block's limit after it, for the rest of the process.
    import scipy.linalg  # noqa: F401
    return threadpool_limits(limits=int(n), user_api="blas")


_warned = False


def _warn_unlimited() -> None:
    """Say once per process that the BLAS threads cannot be limited (measured on the 2-core
    machine: CG's iterations 2.4 times slower, its jvp inside CG 4 times, the BLAS's idle
    threads spinning against the engine's)."""
    global _warned
    if not _warned:
        _warned = True
        warnings.warn("threadpoolctl is not installed (a dependency of helmpinn: pip install threadpoolctl): "
                      "the BLAS threads cannot be limited, and the optimisers' linear algebra and the "
                      "engine's threads then compete for the cores (Gauss-Newton's CG ran 2.4 times slower)",
                      RuntimeWarning, stacklevel=3)
