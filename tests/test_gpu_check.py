"""The GPU scripts, tested without a GPU: benchmarks/gpu_check.sh --dry-run (every stage in
order, the real GPU test selection collected, the other scripts in their dry-run modes, a
summary that says nothing was measured; no pybind11 needed), gpu_sanitize.sh's verdicts on a
stand-in compute-sanitizer (COMPUTE_SANITIZER) that prints what the real tool prints, and
gpu_bench.py refusing to measure without a GPU."""
from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import helmpinn

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks"

pytestmark = pytest.mark.skipif(not (BENCH / "gpu_check.sh").exists() or shutil.which("bash") is None,
                                reason="benchmarks/ (a source checkout) or bash not available")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "HELMPINN_REQUIRE_GPU")}
    return {**env, "PYTHON": sys.executable, **extra}


def _hide_pybind11(tmp_path: Path) -> str:
    """A PYTHONPATH on which `import pybind11` fails (as in a fresh venv with the test extras)."""
    shadow = tmp_path / "shadow" / "pybind11"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('pybind11 hidden by the test')\n")
    return os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH")) if p)


def test_dry_run_runs_every_stage_and_measures_nothing(tmp_path):
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--dry-run"], capture_output=True,
                         text=True, timeout=300,
                         env=_env(OUT=str(out), BUILD=str(tmp_path / "b"),
                                  PYTHONPATH=_hide_pybind11(tmp_path)))
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-4000:]
    rows = [line.split("\t") for line in (out / "stages.tsv").read_text().splitlines()[1:]]
    assert [r[0] for r in rows] == ["build", "tests", "sanitize", "bench"], rows
    assert all(r[1] == "DRY RUN, ok" and r[2] == "0" for r in rows), rows
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**DRY RUN: nothing ran on a GPU; no number in this file was measured")
    # The build it would run: CUDA on, ptxas -v; the tests: the real GPU selection, collected.
    assert "HELMPINN_ENABLE_CUDA=ON" in log and "HELMPINN_CUDA_VERBOSE=ON" in log
    tests_log = (out / "tests.log").read_text()
    for f in ("test_cuda.py", "test_device.py", "test_backend_cases.py", "test_cuda_residuals.py",
              "test_cuda_operator.py", "test_cli.py::test_train_on_gpu"):
        assert f in tests_log, f
    assert "under_cpu_emulation" not in tests_log        # CI runs those, not the GPU machine
    # The sanitizer would run every tool with HELMPINN_REQUIRE_GPU=1; the bench names its configs.
    for tool in ("memcheck", "racecheck", "synccheck", "initcheck"):
        assert f"HELMPINN_REQUIRE_GPU=1 compute-sanitizer --tool {tool}" in log.replace(
            str(shutil.which("compute-sanitizer") or "/usr/local/cuda/bin/compute-sanitizer"),
            "compute-sanitizer"), tool
    assert "DRY RUN, not measured: b1m" in log
    assert sorted(p.name for p in out.iterdir()) == ["stages.tsv", "summary.md", "tests.log"]


def test_unknown_argument_is_refused(tmp_path):
    res = subprocess.run(["bash", str(BENCH / "gpu_check.sh"), "--dryrun"], capture_output=True,
                         text=True, env=_env(OUT=str(tmp_path / "o"), BUILD=str(tmp_path / "b")))
    assert res.returncode == 2 and "unknown argument '--dryrun'" in res.stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ gpu_sanitize.sh's verdicts

CLEAN = "========= COMPUTE-SANITIZER\n1 passed in 2.0s\n========= ERROR SUMMARY: 0 errors\n"
FOUND = ("========= COMPUTE-SANITIZER\n========= Invalid __global__ read of size 8 bytes\n"
         "=========     at helmpinn::cuda::train_kernel\n1 passed\n========= ERROR SUMMARY: 2 errors\n")
RACE = ("========= COMPUTE-SANITIZER\n========= Race reported between Write access at x and Read\n"
        "========= RACECHECK SUMMARY: 3 hazards displayed (1 error, 2 warnings)\n")
REFUSED = ("========= COMPUTE-SANITIZER\n========= Error: Device not supported. Please refer to the "
           "documentation\nE   Failed: HELMPINN_REQUIRE_GPU=1 but no CUDA device visible: "
           "cudaGetDeviceCount: cudaErrorUnknown\n========= ERROR SUMMARY: 0 errors\n")
NO_SUMMARY = "========= COMPUTE-SANITIZER\n1 failed\n"


def _fake_sanitizer(tmp_path: Path, outputs: dict[str, tuple[str, int]]) -> Path:
    """A compute-sanitizer stand-in: prints outputs[tool] and exits with its code (the command it
    is given is not run)."""
    for tool, (text, _) in outputs.items():
        (tmp_path / f"{tool}.txt").write_text(text)
    cases = "".join(f"  {tool}) code={rc} ;;\n" for tool, (_, rc) in outputs.items())
    fake = tmp_path / "fake-sanitizer"
    fake.write_text(f'#!/usr/bin/env bash\ntool=$2\ncase $tool in\n{cases}esac\n'
                    f'cat "{tmp_path}/$tool.txt"\nexit $code\n')
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


def test_sanitizer_verdicts(tmp_path):
    fake = _fake_sanitizer(tmp_path, {"memcheck": (CLEAN, 0), "initcheck": (FOUND, 99),
                                      "racecheck": (RACE, 99), "synccheck": (REFUSED, 1),
                                      "leakcheck": (NO_SUMMARY, 1)})
    out = tmp_path / "out"
    res = subprocess.run(["bash", str(BENCH / "gpu_sanitize.sh"), "--tools",
                          "memcheck,initcheck,racecheck,synccheck,leakcheck"],
                         capture_output=True, text=True, timeout=60,
                         env=_env(OUT=str(out), COMPUTE_SANITIZER=str(fake)))
    verdicts = dict(line.split(": ", 1) for line in res.stdout.splitlines())
    assert verdicts["memcheck"] == "clean"
    assert verdicts["initcheck"].startswith("findings (2 errors, 0 hazards): ========= Invalid __global__ read")
    assert verdicts["racecheck"].startswith("findings (0 errors, 3 hazards): ========= Race reported")
    assert verdicts["synccheck"].startswith("refused (nothing checked): ========= Error: Device not supported")
    assert verdicts["leakcheck"] == "incomplete (exit 1, no summary line)"
    assert res.returncode == 1
    log = (out / "sanitize.log").read_text()
    heads = re.findall(r"^==== (\w+) \(exit (\d+)\): ", log, re.M)
    assert heads == [("memcheck", "0"), ("initcheck", "99"), ("racecheck", "99"),
                     ("synccheck", "1"), ("leakcheck", "1")], log
    assert "Invalid __global__ read" in log


def test_sanitizer_all_clean_exits_0_and_a_failed_test_is_not_clean(tmp_path):
    fake = _fake_sanitizer(tmp_path, {"memcheck": (CLEAN, 0), "racecheck": (CLEAN, 0)})
    run = lambda *a: subprocess.run(["bash", str(BENCH / "gpu_sanitize.sh"), *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=60,
                                    env=_env(OUT=str(tmp_path / "o"), COMPUTE_SANITIZER=str(fake)))
    res = run("--tools", "memcheck,racecheck")
    assert res.returncode == 0 and res.stdout == "memcheck: clean\nracecheck: clean\n", res.stdout
    # 0 errors, but the tests under the tool failed: not clean.
    fake = _fake_sanitizer(tmp_path, {"memcheck": (CLEAN.replace("1 passed", "1 failed"), 1)})
    res = run("--tools", "memcheck")
    assert res.returncode == 1 and res.stdout == "memcheck: incomplete (exit 1)\n", res.stdout


@pytest.mark.skipif(helmpinn.has_cuda() and helmpinn.cuda_device_count() > 0,
                    reason="a GPU is visible: the benchmark would measure")
def test_bench_refuses_without_a_gpu():
    res = subprocess.run([sys.executable, str(BENCH / "gpu_bench.py"), "--configs", "a"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "no usable GPU" in res.stderr and "nothing measured" in res.stderr
    assert res.stdout == ""
    bad = subprocess.run([sys.executable, str(BENCH / "gpu_bench.py"), "--configs", "z"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--configs: unknown ['z']" in bad.stderr
