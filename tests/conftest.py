"""Shared fixtures of the numerical tests: a seeded RNG, small model shapes for d = 1, 2, 3,
a helper that makes random loss inputs in the keyword form of Workspace.value_and_grad, and the
``gpu`` fixture of every GPU test (with ``scratch``, which runs a GPU test with the activation
buffers in shared memory and in global scratch)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

# The float64 reference (tests/reference.py) is imported as a plain module by the tests, whatever
# pytest's import mode.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# (in_dim, ff_dim, hidden_dim, num_hidden_layers): small enough for finite differences over
# every parameter to take milliseconds.
SPECS = {1: (1, 4, 8, 2), 2: (2, 4, 6, 2), 3: (3, 3, 6, 2)}


#: HELMPINN_REQUIRE_GPU=1 (a run on a GPU machine): a GPU test that cannot run fails instead of skipping.
REQUIRE_GPU = os.environ.get("HELMPINN_REQUIRE_GPU") == "1"


def no_gpu_reason() -> str | None:
    """Why this build cannot run on a GPU here, or None when it can."""
    import helmpinn

    if not helmpinn.has_cuda():
        return "helmpinn was built without CUDA support"
    if helmpinn.cuda_device_count() == 0:
        return f"no CUDA device visible: {helmpinn.cuda_device_error()}"
    return None


@pytest.fixture
def gpu():
    """Skips (with the reason) without a usable GPU; fails instead under HELMPINN_REQUIRE_GPU=1."""
    reason = no_gpu_reason()
    if reason is not None:
        if REQUIRE_GPU:
            pytest.fail(f"HELMPINN_REQUIRE_GPU=1 but {reason}")
        pytest.skip(reason)


@pytest.fixture(params=["shared", "global"])
def scratch(request, monkeypatch):
    """A GPU test's CUDA workspaces keep their activation buffers in shared memory (the default)
    or in global scratch (HELMPINN_CUDA_SCRATCH=global, read when a CUDA Workspace is made)."""
    if request.param == "global":
        monkeypatch.setenv("HELMPINN_CUDA_SCRATCH", "global")
    return request.param


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20250101)


@pytest.fixture(params=[1, 2, 3], ids=lambda d: f"d{d}")
def d(request) -> int:
    return request.param


@pytest.fixture
def spec_tuple(d) -> tuple[int, int, int, int]:
    return SPECS[d]


def _unit_normals(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    v = rng.normal(size=(n, d))
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _make_inputs(rng: np.random.Generator, d: int, *, n_pde: int = 0, n_data: int = 0,
                 n_bc: int = 0, kappa: str = "scalar", alpha: str = "scalar", f: bool = True,
                 g: bool = True, weights: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> dict:
    """Random float64 loss inputs as keyword arguments of value_and_grad (absent terms omitted).

    kappa: "scalar" (a Python float) or "array" ([n_pde]); alpha: "scalar" (a Python complex),
    "sommerfeld" (complex 0 - i k) or "array" ([n_bc, 2]); f, g: given or None.
    """
    out: dict = {}
    if n_pde:
        out["x_pde"] = rng.uniform(-1.0, 1.0, (n_pde, d))
        out["kappa"] = (float(rng.uniform(1.0, 10.0)) if kappa == "scalar"
                        else rng.uniform(1.0, 10.0, n_pde))
        out["f"] = rng.normal(size=(n_pde, 2)) if f else None
    if n_data:
        out["x_data"] = rng.uniform(-1.0, 1.0, (n_data, d))
        out["y"] = rng.normal(size=(n_data, 2))
    if n_bc:
        out["x_bc"] = rng.uniform(-1.0, 1.0, (n_bc, d))
        out["n_bc"] = _unit_normals(rng, n_bc, d)
        if alpha == "scalar":
            out["alpha_bc"] = complex(rng.normal(), rng.normal())
        elif alpha == "sommerfeld":
            out["alpha_bc"] = complex(0.0, -float(rng.uniform(1.0, 3.0)))
        else:
            out["alpha_bc"] = rng.normal(size=(n_bc, 2))
        out["g_bc"] = rng.normal(size=(n_bc, 2)) if g else None
    out["w_pde"], out["w_data"], out["w_bc"] = (float(w) for w in weights)
    return out


@pytest.fixture
def make_inputs(rng):
    """make_inputs(d, n_pde=.., n_data=.., n_bc=.., kappa=.., alpha=.., f=.., g=.., weights=..)."""
    return functools.partial(_make_inputs, rng)


def cast_inputs(terms: dict, dtype) -> dict:
    """The same inputs with every array converted (C-contiguous) to dtype; scalars unchanged."""
    return {k: (np.ascontiguousarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v)
            for k, v in terms.items()}


@pytest.fixture
def cast():
    return cast_inputs


def mpiexec_command(ranks: int) -> list[str]:
    """``[mpiexec, ..., "-n", ranks]`` for the tests that launch MPI jobs: the mpiexec installed
    next to this Python (the mpich wheel of the [mpi] extra) first, with Open MPI's flags for
    root and for more ranks than cores. Skips, saying why, where mpi4py or mpiexec is missing;
    fails instead under CI, which installs the [mpi] extra."""
    missing = []
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        missing.append("mpi4py is not installed")
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if mpiexec is None:
        missing.append("no mpiexec on PATH")
    if missing:
        msg = "; ".join(missing) + ' (pip install ".[mpi]")'
        if os.environ.get("CI"):
            pytest.fail("CI installs the [mpi] extra, but " + msg)
        pytest.skip(msg)
    cmd = [mpiexec]
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:  # refuses root and more ranks than cores
        cmd += ["--allow-run-as-root", "--oversubscribe"]
    return cmd + ["-n", str(ranks)]


def run_mpi_case(script: str, case: str, out, ranks: int, *, timeout: float, env: dict | None = None):
    """Run ``python script case out`` on ``ranks`` MPI ranks (:func:`mpiexec_command`), one thread
    each (``env`` added; a None value removes the variable): a timeout fails the test, saying a
    rank may be waiting in a collective, and so does a nonzero exit, with the ranks' output.
    Returns the CompletedProcess."""
    cmd = [*mpiexec_command(ranks), sys.executable, script, case, os.fspath(out)]
    run_env = {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})}
    run_env = {k: v for k, v in run_env.items() if v is not None}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=run_env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpiexec -n {ranks} {case} did not finish in {timeout} s (a rank waiting in a "
                    f"collective?):\n{exc.stdout}\n{exc.stderr}")
    assert res.returncode == 0, f"mpiexec -n {ranks} {case} failed:\n{res.stdout}\n{res.stderr}"
    return res


def wait_for(path, proc, timeout: float = 120.0) -> None:
    """Wait until ``path`` exists while the subprocess ``proc`` runs (a checkpoint of a training
    run under test); fails if the process ends first or after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def terminate_at(monkeypatch, step, sig=None):
    """Make ``helmpinn invert`` send this process ``sig`` (SIGTERM by default) from its progress
    line of step ``step``; returns the list of the entries seen."""
    import signal

    from helmpinn.cli import invert as cli_invert

    seen = []

    def progress(entry):
        seen.append(entry)
        if len(seen) == step:
            os.kill(os.getpid(), signal.SIGTERM if sig is None else sig)

    monkeypatch.setattr(cli_invert, "_progress", progress)
    return seen


BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def load_benchmark(name: str):
    """The module benchmarks/NAME.py (with benchmarks/ on the path while it loads: the scripts
    import each other), registered in ``sys.modules`` under NAME (a dataclass looks its module up
    there); the test is skipped where there is no source checkout."""
    import importlib.util

    path = os.path.join(BENCHMARKS, f"{name}.py")
    if not os.path.exists(path):
        pytest.skip("benchmarks/ (a source checkout) not available")
    sys.path.insert(0, BENCHMARKS)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    finally:
        sys.path.remove(BENCHMARKS)


def run_benchmark(script: str, *args: str, env: dict | None = None, timeout: float = 300):
    """benchmarks/SCRIPT run with args on the helmpinn this process imports (a source tree with
    its built core, or the installed package), one OpenMP thread, in benchmarks/; the completed
    process (text output captured). Skipped where there is no source checkout."""
    import helmpinn

    path = os.path.join(BENCHMARKS, script)
    if not os.path.exists(path):
        pytest.skip("benchmarks/ (a source checkout) not available")
    here = os.path.dirname(os.path.dirname(os.path.abspath(helmpinn.__file__)))
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]),
            "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, path, *args], capture_output=True, text=True, env=full,
                          cwd=BENCHMARKS, timeout=timeout)
