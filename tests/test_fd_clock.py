"""benchmarks/fd_clock.py: fd_solve's time to an error, refining from a coarse grid."""
from __future__ import annotations

import re

from conftest import run_benchmark


def _run(*args, limit=None):
    return run_benchmark("fd_clock.py", *args, env={"HELMPINN_MEMORY_LIMIT": limit} if limit else None)


def test_fd_clock_refines_until_each_error_is_met():
    out = _run("--problem", "plane1d:k=10", "--error", "1e-2", "1e-4", "--step", "1.5")
    assert out.returncode == 0, out.stderr
    rungs = [float(m) for m in re.findall(r"error (\d\.\d+e[-+]\d+), [\d.]+ s, peak", out.stdout)]
    assert len(rungs) >= 3 and rungs[-1] <= 1e-4 < rungs[-2], out.stdout   # stops at the first rung below
    for target in ("1.0e-02", "1.0e-04"):
        line = re.search(rf"error <= {target}: h = [\d.e-]+, error (\S+),", out.stdout)
        assert line and float(line.group(1)) <= float(target), out.stdout


def test_fd_clock_reports_a_refused_grid_and_fails():
    out = _run("--problem", "dirichlet2d:n=1", "--error", "1e-30", "--step", "2", limit="20M")
    assert out.returncode == 1
    assert "MemoryEstimateError" in out.stdout and "error <= 1.0e-30: not reached" in out.stdout, out.stdout
