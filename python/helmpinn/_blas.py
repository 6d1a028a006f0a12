"""The BLAS thread limit, in one place: :func:`blas_limit` (used by the optimisers' linear algebra)."""
from __future__ import annotations

import contextlib
import os
import warnings

__all__ = ["blas_limit", "auto_blas_threads", "check_blas_threads"]


def auto_blas_threads() -> int:
    """helmpinn's thread count (:func:`helmpinn.get_num_threads`) when the machine looks idle
    apart from this process (1-minute load average below that count + 0.75: this process's own
    threads count in it), else 1: BLAS threads that share their cores with other work spin
    against it and against the engine's OpenMP threads."""
    from . import _core

    threads = _core.get_num_threads()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):   # no load average on this platform
        return threads
    return threads if load < threads + 0.75 else 1


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
