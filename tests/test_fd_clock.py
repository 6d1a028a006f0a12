"""benchmarks/fd_clock.py: fd_solve's time to an error, refining from a coarse grid."""
from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

import helmpinn

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "fd_clock.py"


def _run(*args, limit=None):
    if not SCRIPT.exists():
        pytest.skip("benchmarks/ (a source checkout) not available")
    # the helmpinn this process imports (a source tree with its built core, or the installed package)
    here = str(pathlib.Path(helmpinn.__file__).resolve().parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", **({"HELMPINN_MEMORY_LIMIT": limit} if limit else {})}
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, env=env,
                          cwd=ROOT / "benchmarks", timeout=300)


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
