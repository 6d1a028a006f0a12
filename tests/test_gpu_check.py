"""benchmarks/gpu_check.sh, the one script a GPU machine runs (issue 17), tested here with its GPU
steps stubbed (--dry-run): every stage runs in order and records its exit code, a failing stage
does not end the run, the first failing test is rerun with CUDA_LAUNCH_BLOCKING=1, a sanitizer
that refuses the device is reported apart from findings, the deadline turns the stages it
leaves no time for into "skipped (deadline)", and $OUT holds at most 6 files, summary.md among
them, which says on its first line that nothing was measured. And the parsers the summary
rests on (pytest, compute-sanitizer and ptxas output)."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
STAGES = ["env", "build", "tests", "agreement", "sanitize", "bench", "scale", "peers"]

pytestmark = pytest.mark.skipif(not SCRIPT.exists() or shutil.which("bash") is None,
                                reason="benchmarks/gpu_check.sh or bash not available")


def _summary_module():
    spec = importlib.util.spec_from_file_location("gpu_summary", ROOT / "benchmarks" / "gpu_summary.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def dry_run(tmp_path: Path, **env) -> tuple[subprocess.CompletedProcess, Path, float, dict]:
    out = tmp_path / "out"
    full = {**os.environ, "OUT": str(out), "BUILD": str(tmp_path / "build"),
            "PYTHON": sys.executable, "GPU_CHECK_COMMIT": "test", **env}
    for k in ("GPU_CHECK_STUB_FAIL", "GPU_CHECK_STUB_REFUSE", "GPU_CHECK_STUB_FIND"):
        if k not in env:
            full.pop(k, None)
    t0 = time.monotonic()
    res = subprocess.run(["bash", str(SCRIPT), "--dry-run"], capture_output=True, text=True,
                         env=full, timeout=300)
    took = time.monotonic() - t0
    results = json.loads((out / "results.json").read_text())
    return res, out, took, results


def test_dry_run_with_failures_runs_every_stage_in_order(tmp_path):
    res, out, took, results = dry_run(
        tmp_path, GPU_CHECK_STUB_FAIL="tests", GPU_CHECK_STUB_REFUSE="initcheck",
        GPU_CHECK_STUB_FIND="racecheck")
    log = res.stdout + res.stderr
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 6 and "summary.md" in files, files
    assert all((out / f).is_file() for f in files)
    assert took < 120, f"the dry run took {took:.0f} s"
    stages = results["stages"]
    assert [s["stage"] for s in stages] == STAGES, log[-3000:]
    by = {s["stage"]: s for s in stages}
    # The failing test stage is recorded with its exit code, and the run went on to the end.
    assert by["tests"]["status"] == "failed (stub)" and by["tests"]["rc"] not in ("0", "-")
    for name in ("env", "build", "agreement", "bench", "scale", "peers"):
        assert by[name]["status"] == "ok (stub)", (name, by[name], log[-3000:])
    assert by["sanitize"]["status"] == "failed (stub)"
    assert res.returncode == 1                       # not every stage passed
    # The first failure again with CUDA_LAUNCH_BLOCKING=1.
    tests_log = (out / "tests.log").read_text()
    assert "rerun with CUDA_LAUNCH_BLOCKING=1: test_stub_gpu.py::test_stub_fails" in tests_log
    reruns = [r for r in results["records"] if r.get("kind") == "rerun"]
    assert [r["test"] for r in reruns] == ["test_stub_gpu.py::test_stub_fails"] and reruns[0]["rc"] != 0
    # Sanitizers: a finding, a refusal (nothing checked) and two clean runs, told apart.
    verdicts = {r["tool"]: r["verdict"] for r in results["records"] if r.get("kind") == "sanitizer"}
    assert verdicts == {"memcheck": "clean", "racecheck": "findings", "synccheck": "clean",
                        "initcheck": "refused"}
    summary = (out / "summary.md").read_text()
    assert summary.startswith("**DRY RUN: every GPU step was stubbed. No number in this file was measured")
    assert "initcheck: refused (nothing checked" in summary
    assert "racecheck: findings (1 errors" in summary
    assert "- sanitizers clean (all four ran): not measured (stub)" in summary
    assert "1 passed, 1 failed, 0 errors, 1 skipped (stub)" in summary
    # The summary is what the run ends with (the device tool returns the output's tail).
    assert res.stdout.rstrip().endswith(summary.rstrip().splitlines()[-1])
    assert (out / "run.log").read_text().count("==== [") >= len(STAGES)


def test_dry_run_deadline_skips_what_it_cannot_finish(tmp_path):
    # 25 s, 10 of them kept for the summary, and every stubbed stage taking 4 s: env runs, the
    # stages that need more than what is left are reported as skipped, in order, and the run
    # ends near its deadline.
    res, out, took, results = dry_run(tmp_path, GPU_CHECK_DEADLINE_S="25", GPU_CHECK_STUB_SLEEP="4")
    stages = results["stages"]
    assert [s["stage"] for s in stages] == STAGES, res.stdout[-3000:]
    assert stages[0]["status"] == "ok (stub)"
    skipped = [s["stage"] for s in stages if s["status"] == "skipped (deadline)"]
    assert "peers" in skipped and "build" in skipped, stages
    assert all("s left, needs" in s["note"] for s in stages if s["stage"] in skipped)
    assert took < 25 + 20, f"the run took {took:.0f} s with a 25 s deadline"
    assert res.returncode == 1
    summary = (out / "summary.md").read_text()
    assert "| peers | skipped (deadline) | - | 0 |" in summary
    assert "speed, b at 65,536 points | not measured" in summary
    assert len(list(out.iterdir())) <= 6


def test_dry_run_needs_no_pybind11(tmp_path):
    """pybind11 is a build requirement (pip's isolated build environment has it, a fresh venv
    with the test extras does not): the dry run, which builds nothing, must not ask for it."""
    shadow = tmp_path / "shadow" / "pybind11"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('pybind11 hidden by the test')\n")
    path = os.pathsep.join(p for p in (str(shadow.parent), os.environ.get("PYTHONPATH")) if p)
    res, out, took, results = dry_run(tmp_path, PYTHONPATH=path)
    by = {s["stage"]: s for s in results["stages"]}
    assert by["env"]["status"] == "ok (stub)", (by["env"], res.stdout[-2000:])
    assert res.returncode == 0, res.stdout[-3000:]


def test_unknown_argument_is_refused(tmp_path):
    res = subprocess.run(["bash", str(SCRIPT), "--dryrun"], capture_output=True, text=True,
                         env={**os.environ, "OUT": str(tmp_path / "o"), "BUILD": str(tmp_path / "b")})
    assert res.returncode == 2 and "unknown argument '--dryrun'" in res.stderr
    assert not (tmp_path / "o").exists()


# ------------------------------------------------------------------ the parsers


def test_sanitizer_verdicts():
    S = _summary_module()
    refused = ("========= COMPUTE-SANITIZER\n========= Error: Device not supported. Please refer\n"
               "NO DEVICE: cudaGetDeviceCount: cudaErrorUnknown (unknown error)\n"
               "========= ERROR SUMMARY: 0 errors\n")
    v = S.parse_sanitizer(refused, 2)
    assert v["verdict"] == "refused" and "Device not supported" in v["reason_line"]
    clean = "float32 ok\nCASE DONE\n========= ERROR SUMMARY: 0 errors\n"
    assert S.parse_sanitizer(clean, 0)["verdict"] == "clean"
    # 0 errors but the case did not finish: not clean.
    assert S.parse_sanitizer("float32 ok\n========= ERROR SUMMARY: 0 errors\n", 1)["verdict"] == "incomplete"
    assert S.parse_sanitizer("float32 ok\n", 124)["verdict"] == "timed out"
    found = ("========= Invalid __global__ read of size 8 bytes\n=========     at train_kernel\n"
             "CASE DONE\n========= ERROR SUMMARY: 2 errors\n")
    v = S.parse_sanitizer(found, 3)
    assert v["verdict"] == "findings" and v["errors"] == 2 and "Invalid __global__ read" in v["first"]
    race = ("CASE DONE\n========= RACECHECK SUMMARY: 3 hazards displayed (1 error, 2 warnings)\n")
    v = S.parse_sanitizer(race, 0)
    assert v["verdict"] == "findings" and v["errors"] == 1 and v["warnings"] == 2
    race0 = "CASE DONE\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n"
    assert S.parse_sanitizer(race0, 0)["verdict"] == "clean"


def test_pytest_parse_finds_failures_and_a_hung_test():
    S = _summary_module()
    text = ("tests/test_cuda.py::test_a[x] PASSED [ 10%]\n"
            "tests/test_cuda.py::test_b SKIPPED (needs two GPUs) [ 20%]\n"
            "tests/test_cuda.py::test_c[float64] FAILED [ 30%]\n"
            "tests/test_cuda.py::test_d PASSED [ 40%]\n"
            "tests/test_cuda.py::test_e +++++++++++++++++++ Timeout +++++++++++++++++++\n"
            "~~~ Stack of MainThread ~~~\n")
    r = S.parse_pytest(text)
    assert (r["passed"], r["failed"], r["skipped"]) == (2, 1, 1)
    assert r["first_failed"] == "tests/test_cuda.py::test_c[float64]"
    assert r["hung"] == "tests/test_cuda.py::test_e"
    # Only a hang: the hung test is the one to rerun.
    r = S.parse_pytest("tests/test_cuda.py::test_a PASSED\ntests/test_cuda.py::test_e \n")
    assert r["first_failed"] == r["hung"] == "tests/test_cuda.py::test_e"
    r = S.parse_pytest("tests/test_cuda.py::test_a PASSED [100%]\n=== 1 passed in 0.1s ===\n")
    assert r["first_failed"] is None and r["hung"] is None and r["passed"] == 1


def test_ptxas_parse():
    S = _summary_module()
    log = ("ptxas info    : Compiling entry function '_ZN8helmpinn4cuda12train_kernelIdLi3ELb0EEEvNS0_7N' for 'sm_90'\n"
           "ptxas info    : Function properties for _ZN8helmpinn4cuda12train_kernelIdLi3ELb0EEEvNS0_7N\n"
           "    8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
           "ptxas info    : Used 168 registers, used 1 barriers, 16 bytes smem\n"
           "ptxas info    : Compiling entry function '_ZN8helmpinn4cuda14forward_kernelIfLi1ELb1EEEvX' for 'sm_90'\n"
           "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
           "ptxas info    : Used 120 registers, used 1 barriers\n"
           "ptxas info    : Compiling entry function '_ZN8helmpinn4cuda13reduce_kernelIfEEvPKT_' for 'sm_90'\n"
           "ptxas info    : Used 30 registers\n")
    r = S.parse_ptxas(log)
    assert set(r["kernels"]) == {"train_kernel<double,d=3,shared> [sm_90]",
                                 "forward_kernel<float,d=1,global> [sm_90]", "reduce_kernel<float> [sm_90]"}
    assert r["fused_registers"] == [120, 168] and r["fused_spill_bytes"] == 8
    assert r["fused_static_smem"] == 16 and r["fused_count"] == 2
