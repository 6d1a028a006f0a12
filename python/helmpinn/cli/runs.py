"""What a run of the command line's subcommands (``helmpinn train``: :mod:`helmpinn.cli.train`,
``helmpinn invert``: :mod:`helmpinn.cli.invert`) is made of, the same for both: the usage error
(one line on stderr, exit status 2), the exit statuses of a stopped run, the SIGTERM handler, the
``--threads`` bound, the output folder's creation, lock and checks (:mod:`helmpinn.runfiles`),
the checks of ``--resume DIR`` that do not depend on the command, and the report (metrics.json:
JSON without NaN, written whole; read back only as a regular file of bounded size)."""
from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import sys
import tempfile
from typing import Any, Sequence

from .. import runfiles
from .._budget import cpus   # noqa: F401  (re-exported: the subcommands' --threads bound)

__all__ = ["UsageError", "INTERRUPTED", "TERMINATED", "MAX_THREADS_PER_CPU", "MAX_REPORT_BYTES", "cpus",
           "stop_on_sigterm", "handling", "prepare_out", "lock", "check_outputs", "check_resume", "finite",
           "flag", "read_report", "write_report", "have_matplotlib"]

INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a Ctrl-C
TERMINATED = 143   # 128 + SIGTERM
#: --threads may be at most this many times the CPUs the process may use.
MAX_THREADS_PER_CPU = 4
#: The largest report (metrics.json) ``--resume`` reads (the history of a few million steps).
MAX_REPORT_BYTES = 1 << 30


class UsageError(Exception):
    """Misuse of the command line: reported as one line, exit status 2."""


@contextlib.contextmanager
def stop_on_sigterm(trainer, say: bool = True):
    """SIGTERM, as Ctrl-C: ``trainer.request_stop("terminated")`` is called, the run stops
    after the current step (its checkpoint and the report are written) and exits with status
    143; a second SIGTERM ends the process at once, as SIGTERM does by default. Yields a list
    that gets True when the signal came. ``say``: print the line that says so on stderr (False
    on the ranks of an MPI job but rank 0, which alone prints). (The main thread only; ``helmpinn
    train`` takes it in a single process, as its ranks must stop together and SIGTERM ends its
    job as before; ``helmpinn invert``'s ranks agree on the stop at every step.)"""
    seen: list[bool] = []

    def on_sigterm(signum, frame):
        if seen:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        seen.append(True)
        trainer.request_stop("terminated")
        if say:
            print("\nhelmpinn: terminated (SIGTERM); stopping after the current step (SIGTERM again to end "
                  "at once)", file=sys.stderr, flush=True)

    with handling(signal.SIGTERM, on_sigterm):
        yield seen


@contextlib.contextmanager
def handling(signum: int, handler) -> Any:
    """``handler`` for the signal ``signum`` inside the block, the previous handler after it; in
    any thread but the main one (where Python sets no handler) the block runs without it."""
    try:
        previous = signal.signal(signum, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signum, previous)


def prepare_out(out: str) -> None:
    """Create the output folder and make sure files can be written there, before the run."""
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError(f"--out {out!r} is a file, not a folder")
    try:
        os.makedirs(out, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".helmpinn-probe-", dir=out)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--out {out!r}: cannot write there ({exc.strerror or exc})") from None


def lock(out: str, flag: str, held: contextlib.ExitStack) -> runfiles.RunFolder:
    """Lock ``out`` for this run until ``held`` closes (the end of the command)."""
    try:
        return held.enter_context(runfiles.RunFolder.acquire(out, flag))
    except runfiles.OutputError as exc:
        raise UsageError(str(exc)) from None


def check_outputs(folder: runfiles.RunFolder, names: Sequence[str], adopt: Sequence[str] = ()) -> None:
    """:meth:`~helmpinn.runfiles.RunFolder.check_outputs`, its refusal a usage error."""
    try:
        folder.check_outputs(names, adopt)
    except runfiles.OutputError as exc:
        raise UsageError(str(exc)) from None


def finite(obj: Any) -> Any:
    """JSON has no NaN/Inf: write them as null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return finite(obj.item())
    return obj


def flag(name: str) -> str:
    """The option of an argparse name: ``time_limit`` -> ``--time-limit``."""
    return "--" + name.replace("_", "-")


def check_resume(folder: str, out: str | None, given: Sequence[str], allowed: Sequence[str]) -> None:
    """``--resume DIR``: only the options ``allowed`` among those ``given`` (argparse names),
    ``--out`` (None: not given) naming DIR or nothing, and a folder DIR."""
    extra = [k for k in given if k not in allowed]
    if extra:
        raise UsageError(f"--resume continues a run with its saved settings; {', '.join(map(flag, extra))} "
                         f"cannot be given with it (allowed: {', '.join(map(flag, allowed))})")
    if out is not None and os.path.abspath(out) != os.path.abspath(folder):
        raise UsageError("--resume DIR writes into DIR; --out cannot name another folder")
    if not os.path.isdir(folder):
        raise UsageError(f"--resume {folder!r}: no such folder")


def read_report(path: str) -> Any:
    """The JSON of a run's report ``path``, read only as a regular file of at most
    :data:`MAX_REPORT_BYTES` (OSError, ValueError)."""
    return json.loads(runfiles.read_regular(path, MAX_REPORT_BYTES))


def write_report(folder: runfiles.RunFolder, name: str, report: dict[str, Any]) -> None:
    """The report ``name`` in the run's folder, written whole, NaN and Inf as null."""
    folder.write(name, json.dumps(finite(report), indent=1).encode())


def have_matplotlib(what: str) -> bool:
    """Whether matplotlib can be imported; without it, one line saying that ``what`` ("no
    figures were written") for that reason."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(f"helmpinn: matplotlib is not installed, so {what} (pip install matplotlib)", file=sys.stderr)
        return False
    return True
