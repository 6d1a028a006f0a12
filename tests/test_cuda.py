"""The CUDA backend.

Without a GPU (any machine):
  * has_cuda() / cuda_device_count() are consistent with the build; a CUDA Workspace raises a
    clear RuntimeError ("built without CUDA support" in a stub build; "CUDA device N is not
    available" when there is no such device); `stream=` is refused on CPU workspaces.
  * The CUDA kernels and the backend's host logic run under a CPU emulation of CUDA
    (cpp/src/cuda/emulation; the checker cpp/tests/cuda/emu_check.cpp, the CMake target
    helmpinn_cuda_emulation_check of the C++ test build that tests/test_cpp.py uses) and are
    compared with the CPU backend (forward, every loss term, chunking, partial tiles,
    shared-memory and global-scratch buffers, odd tiles, bitwise reproducibility, check_finite),
    and the device seed primitives with the host ones; and the residual level (residuals,
    Jacobian rows, jvp, vjp, grad_kappa, counts); the loss cases are the table loss_cases.inc, which
    tests/test_backend_cases.py runs on a real GPU; and the core's CUDA runtime API (device
    scope, pointer queries, device buffers, copies, stream ordering) on two emulated devices.
  * The seed primitives on CUDA arrays refuse a call without out= and, where CUDA cannot be
    used, say why naming the argument; `stream=` is refused with host arrays.

With a GPU: forward (u / grad u / lap u, d = 1, 2, 3, float32 and float64) and the caches of a
device="cuda" Workspace are compared with the CPU backend on the same random inputs (float64:
relative error < 1e-10; float32: < 1e-4) and forward with the float64 reference; value_and_grad
(every term together) on realistic and wide shapes and on a cache above 2^31 elements, under the
tuning knobs (tile size, global scratch), in several chunk sizes, and with workspaces of
different sizes side by side, against the CPU; two runs are bitwise identical; results are
written zero-copy into caller-provided device arrays (helmpinn's DeviceArray, and PyTorch / CuPy
when importable); host arrays and wrong device arrays are refused with errors naming the
argument. The loss of each term and their combinations (constants and per-point coefficients,
frozen B, counts, the general operator), the gradient and the residual level against the CPU are
the loss-case table's, in tests/test_backend_cases.py (test_cuda_against_cpu). The seed
primitives (mse_backward, layer_backward, fourier_backward, adam_step) on helmpinn / PyTorch /
CuPy device arrays agree with NumPy, are bitwise reproducible, run on a given stream, and refuse
host arrays and bad arguments naming them. GPU tests skip with the reason when there is no
device, and FAIL instead when HELMPINN_REQUIRE_GPU=1 (for runs on a GPU machine).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

import helmpinn
import reference as R
from conftest import REQUIRE_GPU, SPECS, no_gpu_reason

ROOT = Path(__file__).resolve().parents[1]
DeviceArray = helmpinn._core.DeviceArray


# ------------------------------------------------------------------ helpers

def _missing(what: str):
    """Skips for a missing optional GPU library; fails instead under HELMPINN_REQUIRE_GPU=1 (the
    PyTorch and CuPy tests are the only tests of stream= and of DLPack on a GPU)."""
    if REQUIRE_GPU:
        pytest.fail(f"HELMPINN_REQUIRE_GPU=1 but {what}")
    pytest.skip(what)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def _cupy():
    try:
        import cupy
    except ImportError:
        return None
    try:
        return cupy if cupy.cuda.runtime.getDeviceCount() > 0 else None
    except Exception:  # noqa: BLE001 - any CUDA runtime failure means no usable CuPy
        return None


def need_torch():
    torch = _torch_cuda()
    if torch is None:
        _missing("PyTorch with CUDA is not importable")
    return torch


def need_cupy():
    cp = _cupy()
    if cp is None:
        _missing("CuPy is not importable")
    return cp


def dev(a, dtype=None):
    """A DeviceArray copy of a host array (dtype converted when given)."""
    a = np.asarray(a)
    return DeviceArray.from_host(np.ascontiguousarray(a, dtype=dtype or a.dtype))


def host(a) -> np.ndarray:
    if isinstance(a, DeviceArray):
        return a.copy_to_host()
    if hasattr(a, "detach"):                       # torch
        return a.detach().cpu().numpy()
    if hasattr(a, "get"):                          # cupy
        return a.get()
    return np.asarray(a)


def to_device(terms: dict, dtype) -> dict:
    return {k: (dev(v, dtype) if isinstance(v, np.ndarray) else v) for k, v in terms.items()}


def cast(terms: dict, dtype) -> dict:
    return {k: (np.ascontiguousarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v)
            for k, v in terms.items()}


TOL = {"float64": 1e-10, "float32": 1e-4}

#: Every term, per-point coefficients, weighted: the inputs (conftest's make_inputs) of the
#: tests below that check something else than the loss itself (the loss cases are
#: tests/test_backend_cases.py's).
ALL_TERMS = dict(n_pde=39, n_data=27, n_bc=33, kappa="array", alpha="array",
                 weights=(0.7, 1.9, 0.35))


def _pair(spec_tuple, batch, dtype):
    spec = helmpinn.ModelSpec(*spec_tuple)
    return (helmpinn.Workspace(spec, batch, dtype=dtype),
            helmpinn.Workspace(spec, batch, dtype=dtype, device="cuda"))


def _compare_value_and_grad(spec_tuple, theta, terms, dtype, batch=32, **kw):
    cpu, gpu = _pair(spec_tuple, batch, dtype)
    th = np.ascontiguousarray(theta, dtype=dtype)
    g_cpu = np.empty(th.size, dtype=dtype)
    v_cpu = cpu.value_and_grad(th, g_cpu, **cast(terms, dtype), **kw)
    g_gpu = dev(np.full(th.size, 123.0, dtype=dtype))        # overwritten, not accumulated
    v_gpu = gpu.value_and_grad(dev(th), g_gpu, **to_device(terms, dtype), **kw)
    assert isinstance(v_gpu, float)
    assert v_gpu == pytest.approx(v_cpu, rel=TOL[dtype])
    for key in ("total", "pde", "data", "bc"):
        assert gpu.last_loss[key] == pytest.approx(cpu.last_loss[key], rel=TOL[dtype], abs=0.0), key
    err = R.rel_err(host(g_gpu), g_cpu)
    assert err < TOL[dtype], f"GPU vs CPU relative gradient error {err:.3e}"
    return v_gpu, host(g_gpu), gpu


# ------------------------------------------------------------------ without a GPU

def test_has_cuda_and_device_count_are_consistent():
    assert isinstance(helmpinn.has_cuda(), bool)
    n = helmpinn.cuda_device_count()
    assert isinstance(n, int) and n >= 0
    if not helmpinn.has_cuda():
        assert n == 0
    # Zero devices come with the reason (the CUDA runtime's error, e.g. a driver older than the
    # runtime or a tool refusing the device), never a bare "0 devices".
    err = helmpinn.cuda_device_error()
    if n > 0:
        assert err is None
    elif not helmpinn.has_cuda():
        assert err == "helmpinn was built without CUDA support"
    else:
        assert isinstance(err, str) and (err.startswith("cudaGetDeviceCount: cudaError")
                                         or err == "no CUDA device found"), err
    # .ci/run sets HELMPINN_EXPECT_CUDA=1 where nvcc is on the PATH and then asks the README's
    # install for the CUDA backend (HELMPINN_ENABLE_CUDA=ON; pyproject.toml leaves it out
    # unless asked): it must have been built (a CMake that silently lost nvcc fails here).
    expect = os.environ.get("HELMPINN_EXPECT_CUDA")
    if expect is not None:
        assert helmpinn.has_cuda() == (expect == "1"), f"HELMPINN_EXPECT_CUDA={expect}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_workspace_without_device_raises(dtype):
    spec = helmpinn.ModelSpec(2, 4, 8, 2)
    if not helmpinn.has_cuda():
        with pytest.raises(RuntimeError, match="built without CUDA support"):
            helmpinn.Workspace(spec, 16, dtype=dtype, device="cuda")
        return
    n = helmpinn.cuda_device_count()
    if n == 0:
        err = helmpinn.cuda_device_error()
        why = "" if err == "no CUDA device found" else ": " + err
        with pytest.raises(RuntimeError, match="CUDA device 0 is not available: no CUDA device "
                                               "found" + re.escape(why)):
            helmpinn.Workspace(spec, 16, dtype=dtype, device="cuda")
    with pytest.raises(RuntimeError, match=f"CUDA device {n + 3} is not available"):
        helmpinn.Workspace(spec, 16, dtype=dtype, device=f"cuda:{n + 3}")


def test_stream_keyword_is_for_cuda_workspaces_only(rng):
    ws = helmpinn.Workspace(helmpinn.ModelSpec(1, 4, 8, 2), 16, dtype="float64")
    theta = R.random_params((1, 4, 8, 2), rng)
    x = rng.uniform(-1, 1, (5, 1))
    with pytest.raises(ValueError, match="stream: only for Workspaces on device='cuda'"):
        ws.forward(theta, x, 0, stream=0)
    with pytest.raises(ValueError, match="stream: only for Workspaces on device='cuda'"):
        ws.value_and_grad(theta, np.empty(theta.size), x_data=x, y=np.zeros((5, 2)), stream=1)
    with pytest.raises(ValueError, match="stream: only for Workspaces on device='cuda'"):
        ws.zero_grad(stream=0)
    ws.zero_grad(stream=None)
    assert isinstance(ws.forward(theta, x, 0, stream=None), np.ndarray)


def test_device_array_type():
    assert hasattr(DeviceArray, "__cuda_array_interface__")
    if no_gpu_reason() is not None:
        with pytest.raises(RuntimeError):
            DeviceArray.from_host(np.zeros(3))
    with pytest.raises(TypeError, match="float32 or float64"):
        DeviceArray.from_host(np.zeros(3, dtype=np.int64))


def _emulation_sources():
    """The emulation driver and the core's host sources, from cpp/src/host_sources.txt: the list
    CMake builds the core and the helmpinn_cuda_emulation_check target from (one list, so that a
    new core file is not silently missing here); the CUDA backend comes in through the driver,
    which includes its kernels."""
    driver = ROOT / "cpp/tests/cuda/emu_check.cpp"
    listing = ROOT / "cpp/src/host_sources.txt"
    if not driver.exists() or not listing.exists():
        return None
    srcs = []
    for line in listing.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            srcs.append(ROOT / line.split()[0])  # "path" or "path kernels"
    return [driver, *srcs]


@pytest.fixture(scope="module")
def emu_check(tmp_path_factory):
    """The CPU emulation of the CUDA backend (cpp/tests/cuda/emu_check.cpp): HELMPINN_EMU_CHECK
    when set, else the CMake target helmpinn_cuda_emulation_check of the C++ test build that
    tests/test_cpp.py uses (HELMPINN_TEST_BUILD_DIR, or the one built once a session)."""
    if _emulation_sources() is None:
        pytest.skip("the C++ sources are not next to the tests (installed package)")
    if os.environ.get("HELMPINN_EMU_CHECK"):
        return Path(os.environ["HELMPINN_EMU_CHECK"])
    import test_cpp  # noqa: PLC0415  (tests/ is on sys.path: conftest.py)
    reason = test_cpp._why_not()
    if reason:
        pytest.skip(f"the CUDA emulation cannot be built: {reason}")
    base = tmp_path_factory.getbasetemp() / "helmpinn-cxx"
    base.mkdir(exist_ok=True)
    tree = test_cpp.cxx_build_tree(base, build_it=False)
    if "HELMPINN_HAS_UCONTEXT:INTERNAL=1" not in (tree / "CMakeCache.txt").read_text():
        pytest.skip("the system has no <ucontext.h> or mmap, which the CUDA "
                    "emulation needs")
    tree = test_cpp.cxx_build_tree(base, target="helmpinn_cuda_emulation_check")
    exe = tree / "cpp" / "tests" / "helmpinn_cuda_emulation_check"
    assert exe.is_file(), f"{exe} was not built"
    return exe


def test_emulation_sources_are_the_core_list():
    """The checker is built from cpp/src/host_sources.txt, which must name every C++ source of
    common/ and cpu/ (one missing would be missing from the core too) and only files that exist
    (a wrong path fails here, not in a compiler error)."""
    srcs = _emulation_sources()
    if srcs is None:
        pytest.skip("the C++ sources are not next to the tests (installed package)")
    missing = [str(p) for p in srcs if not p.is_file()]
    assert not missing, f"host_sources.txt names files that do not exist: {missing}"
    on_disk = {p.resolve() for d in ("cpp/src/common", "cpp/src/cpu") for p in (ROOT / d).glob("*.cpp")}
    listed = {p.resolve() for p in srcs[1:]}
    assert on_disk <= listed, f"not in host_sources.txt: {sorted(map(str, on_disk - listed))}"


@pytest.mark.parametrize("env,args", [
    # activation buffers in shared memory (an H100's 227 kB): every shape, both dtypes
    ({}, []),
    # too little shared memory: global scratch buffers; and an odd tile size
    ({"HELMPINN_EMU_SMEM": "20000", "HELMPINN_CUDA_TILE": "7"}, ["--quick"]),
    # kernels with static shared memory (the dynamic limit is the opt-in minus it) and 200
    # registers per thread (one block per SM)
    ({"HELMPINN_EMU_STATIC_SMEM": "1024", "HELMPINN_EMU_REGS": "200"}, ["--quick"]),
], ids=["shared", "global-scratch-tile7", "static-smem-regs200"])
def test_cuda_kernels_under_cpu_emulation(emu_check, env, args):
    res = subprocess.run([str(emu_check), *args], capture_output=True, text=True,
                         env={**os.environ, **env}, timeout=600)
    failed = [line for line in res.stdout.splitlines() if line.startswith("FAIL")]
    assert res.returncode == 0 and not failed, res.stdout[-6000:] + res.stderr[-2000:]
    oks = [line for line in res.stdout.splitlines() if line.startswith("ok ")]
    # Every shape of the mode ran, in both dtypes, and the host-side checks did.
    shapes = {"float64": ["d=1 m=4 H=8 L=2", "d=2 m=5 H=13 L=2", "d=3 m=3 H=6 L=3"],
              "float32": ["d=2 m=5 H=13 L=2", "d=2 m=12 H=40 L=1"]}
    if not args:
        shapes = {t: shapes["float64"] + ["d=2 m=12 H=40 L=1"] for t in ("float64", "float32")}
    for t, tags in shapes.items():
        for tag in tags:
            assert any(line.startswith(f"ok   {t} {tag} value_and_grad all") for line in oks), (t, tag)
            # the general operator (2d + 1 streams): loss and gradient, and the residual level
            for what in ("value_and_grad pde (per-point kappa/alpha, f, g) operator(",
                         "rows terms=7 per-point operator("):
                assert any(line.startswith(f"ok   {t} {tag} {what}") for line in oks), (t, tag, what)
    for host_check in ("plan: dynamic shared-memory limit", "plan: occupancy picks",
                       "plan: general operator in the Laplacian's buffers",
                       "global scratch", "last-use event", "device count error shown",
                       "runtime: DeviceScope", "runtime: DeviceBuffer", "runtime: stream_wait",
                       # the emulation's own: a missing barrier shows, a divergent one ends the run
                       "emulation: without __syncthreads", "emulation: a __syncthreads that"):
        assert any(host_check in line for line in oks), host_check
    assert len(oks) > (200 if not args else 150)


# ------------------------------------------------------------------ on a GPU: agreement with the CPU

@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_forward_matches_cpu(gpu, spec_tuple, rng, dtype):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.7).astype(dtype)
    x = rng.uniform(-1, 1, (77, d)).astype(dtype)          # 3 chunks of 32, a partial tile
    cpu, gpu_ws = _pair(spec_tuple, 32, dtype)
    for der in (0, 1, 2):
        ref = cpu.forward(theta, x, der)
        out = gpu_ws.forward(dev(theta), dev(x), der)
        ref = ref if der else (ref,)
        out = out if der else (out,)
        for a, b in zip(out, ref):
            assert isinstance(a, DeviceArray) and a.shape == b.shape
            assert R.rel_err(host(a), b) < TOL[dtype]
    if dtype == "float64":                                   # and the independent reference
        u, gu, lu = (host(a) for a in gpu_ws.forward(dev(theta), dev(x), 2))
        ur, gur, lur = R.forward(theta, spec_tuple, x, 2)
        assert R.rel_err(u, ur) < 1e-12 and R.rel_err(gu, gur) < 1e-11 and R.rel_err(lu, lur) < 1e-11


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(2, 32, 128, 4), (3, 32, 64, 4), (1, 16, 64, 3), (2, 5, 13, 1)],
                         ids=["cfg-b", "cfg-c", "cfg-a", "odd-widths"])
def test_realistic_shapes(gpu, rng, make_inputs, shape, dtype):
    theta = R.random_params(shape, rng, fourier_sigma=0.5)
    terms = make_inputs(shape[0], n_pde=300, n_data=70, n_bc=90, kappa="array", alpha="array")
    _compare_value_and_grad(shape, theta, terms, dtype, batch=256)


def test_wide_layers_use_global_scratch(gpu, rng, make_inputs):
    """2m = 600 float64 features do not fit in shared memory: the global-scratch kernels."""
    shape = (2, 300, 48, 2)
    theta = R.random_params(shape, rng, fourier_sigma=0.3)
    terms = make_inputs(2, n_pde=70, n_data=20, n_bc=30, kappa="array", alpha="array")
    _compare_value_and_grad(shape, theta, terms, "float64", batch=64)


def test_cache_above_2_31_elements(gpu, rng):
    """A workspace whose Fourier cache has more than 2^31 elements (d = 1, 2m = 512 features,
    3 streams: 3 B 512 > 2^31 floats, 8.6 GB), so its indices must be 64-bit: forward at sampled
    rows (the last included, whose Laplacian reads past element 2^31) and value_and_grad over
    every point against the CPU. Needs about 10 GB of device memory."""
    shape = (1, 256, 8, 1)
    B = 2**31 // (3 * 512) + 1024
    spec = helmpinn.ModelSpec(*shape)
    theta = rng.normal(0, 0.5, spec.num_params).astype(np.float32)
    x = rng.uniform(-1, 1, (B, 1)).astype(np.float32)
    ws = helmpinn.Workspace(spec, B, dtype="float32", device="cuda")
    out = [host(a) for a in ws.forward(dev(theta), dev(x), 2)]
    idx = np.unique(np.concatenate([rng.integers(0, B, 200), [0, B - 1]]))
    ref = helmpinn.Workspace(spec, len(idx), dtype="float32").forward(theta, x[idx], 2)
    for name, a, b in zip(("u", "grad u", "lap u"), out, ref):
        assert R.rel_err(a[idx], b) < 1e-4, name
    f = rng.normal(size=(B, 2)).astype(np.float32)
    g = dev(np.zeros(spec.num_params, np.float32))
    v = ws.value_and_grad(dev(theta), g, x_pde=dev(x), kappa=30.0, f=dev(f))
    g_cpu = np.empty(spec.num_params, np.float32)
    v_cpu = helmpinn.Workspace(spec, 4096, dtype="float32").value_and_grad(
        theta, g_cpu, x_pde=x, kappa=30.0, f=f)
    assert v == pytest.approx(v_cpu, rel=1e-3) and R.rel_err(host(g), g_cpu) < 1e-3


@pytest.mark.parametrize("env", [{"HELMPINN_CUDA_TILE": "5"}, {"HELMPINN_CUDA_SCRATCH": "global"},
                                 {"HELMPINN_CUDA_SCRATCH": "global", "HELMPINN_CUDA_TILE": "3"}],
                         ids=["tile5", "global-scratch", "global-scratch-tile3"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_tuning_knobs(gpu, rng, make_inputs, monkeypatch, env, dtype):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    shape = (3, 8, 40, 2)
    theta = R.random_params(shape, rng)
    terms = make_inputs(3, **ALL_TERMS)
    _compare_value_and_grad(shape, theta, terms, dtype, batch=23)


def test_workspaces_of_different_sizes_coexist(gpu, rng, make_inputs):
    """Kernel attributes are shared by workspaces: a small one made later must not break a big one."""
    big, small = (2, 32, 128, 2), (2, 3, 8, 2)
    terms = make_inputs(2, n_pde=70, n_data=20, kappa="array")
    theta_big = R.random_params(big, rng)
    cpu, gbig = _pair(big, 64, "float32")
    g_ref = np.empty(theta_big.size, dtype=np.float32)
    v_ref = cpu.value_and_grad(theta_big.astype(np.float32), g_ref, **cast(terms, np.float32))
    gsmall = helmpinn.Workspace(helmpinn.ModelSpec(*small), 8, dtype="float32", device="cuda")
    g = dev(np.zeros(theta_big.size, np.float32))
    v = gbig.value_and_grad(dev(theta_big, np.float32), g, **to_device(terms, np.float32))
    assert v == pytest.approx(v_ref, rel=1e-4) and R.rel_err(host(g), g_ref) < 1e-4
    assert gsmall.memory_bytes < gbig.memory_bytes


PLAN = re.compile(r"tile (\d+), (shared buffers|global scratch), (\d+) B dynamic shared memory "
                  r"\(limit (\d+), static (\d+)\), (\d+) regs, (\d+) blocks/SM, (\d+) blocks")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_launch_plan_fits_the_device(gpu, rng, capfd, monkeypatch, dtype):
    """HELMPINN_CUDA_VERBOSE=1 prints the plan: its dynamic shared memory is within the kernels'
    limit (the opt-in minus their static shared memory: a limit set above that fails every
    workspace), at least one block fits per SM, and the workspace computes what the CPU does."""
    monkeypatch.setenv("HELMPINN_CUDA_VERBOSE", "1")
    for shape in [(2, 32, 128, 4), (3, 128, 256, 3)]:
        ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 256, dtype=dtype, device="cuda")
        err = capfd.readouterr().err
        m = PLAN.search(err)
        assert m, err
        tile, smem, limit, static, regs, per_sm, blocks = (int(m.group(i)) for i in (1, 3, 4, 5, 6, 7, 8))
        assert 1 <= tile <= 64 and smem <= limit and static >= 0 and regs > 0
        assert per_sm >= 1 and blocks >= 1
        theta = R.random_params(shape, rng, fourier_sigma=0.5).astype(dtype)
        x = rng.uniform(-1, 1, (300, shape[0])).astype(dtype)
        cpu = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 256, dtype=dtype)
        for a, b in zip(ws.forward(dev(theta), dev(x), 2), cpu.forward(theta, x, 2)):
            assert R.rel_err(host(a), b) < TOL[dtype]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_bitwise_reproducible(gpu, rng, make_inputs, dtype):
    shape = (2, 16, 64, 3)
    theta = dev(R.random_params(shape, rng), dtype)
    terms = to_device(make_inputs(2, n_pde=900, n_data=300, n_bc=200, kappa="array",
                                  alpha="array", weights=(0.5, 2.0, 0.8)), dtype)
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 512, dtype=dtype, device="cuda")
    runs = []
    for _ in range(3):
        g = dev(np.zeros(theta.size, dtype=dtype))
        v = ws.value_and_grad(theta, g, **terms)
        runs.append((v, host(g), [host(a) for a in ws.forward(theta, terms["x_pde"], 2)]))
    for v, g, fw in runs[1:]:
        assert v == runs[0][0]
        np.testing.assert_array_equal(g, runs[0][1])
        for a, b in zip(fw, runs[0][2]):
            np.testing.assert_array_equal(a, b)


def test_chunking_on_gpu(gpu, rng, make_inputs):
    shape = SPECS[2]
    theta = R.random_params(shape, rng)
    terms = make_inputs(2, n_pde=300, n_data=300, n_bc=300, kappa="array", alpha="array")
    vals = {}
    for batch in (512, 64, 7):
        v, g, ws = _compare_value_and_grad(shape, theta, terms, "float64", batch=batch)
        vals[batch] = (v, g)
    for batch in (64, 7):
        assert vals[batch][0] == pytest.approx(vals[512][0], rel=1e-12)
        assert R.rel_err(vals[batch][1], vals[512][1]) < 1e-12


# ------------------------------------------------------------------ caches, grad buffer, outputs

@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_caches_are_device_views(gpu, spec_tuple, rng, dtype):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng).astype(dtype)
    x = rng.uniform(-1, 1, (45, d)).astype(dtype)            # last chunk of 32 holds 13 points
    cpu, g = _pair(spec_tuple, 32, dtype)
    cpu.forward(theta, x, 2)
    g.forward(dev(theta), dev(x), 2)
    last = 45 - 32
    names = ["x_input", "fourier_features", "fourier_streams", "du_dx", "d2u_dx2"]
    for name in names:
        a, b = getattr(g, name), getattr(cpu, name)
        assert isinstance(a, DeviceArray) and a.shape == b.shape, name
        cai = a.__cuda_array_interface__
        assert cai["shape"] == b.shape and cai["typestr"] == np.dtype(dtype).str and cai["version"] == 3
        ah = host(a)
        if name == "fourier_streams":
            assert R.rel_err(ah[:, :last], b[:, :last]) < TOL[dtype], name
        else:
            assert R.rel_err(ah[:last], b[:last]) < TOL[dtype], name
    for name in ("z_streams", "h_streams"):
        for a, b in zip(getattr(g, name), getattr(cpu, name)):
            assert isinstance(a, DeviceArray) and a.shape == b.shape
            assert R.rel_err(host(a)[:, :last], b[:, :last]) < TOL[dtype], name
    # views stay valid and see the next call
    z0 = g.z[0]
    g.forward(dev(theta), dev(x[:3]), 0)
    cpu.forward(theta, x[:3], 0)
    assert R.rel_err(host(z0)[:3], cpu.z[0][:3]) < TOL[dtype]


def test_grad_buffer_and_zero_grad(gpu, rng, make_inputs):
    shape = SPECS[2]
    theta = dev(R.random_params(shape, rng))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 32, dtype="float64", device="cuda")
    buf = ws.grad
    assert isinstance(buf, DeviceArray) and buf.shape == (ws.spec.num_params,)
    np.testing.assert_array_equal(host(buf), 0.0)
    terms = to_device(make_inputs(2, n_pde=20, kappa="array"), "float64")
    ws.value_and_grad(theta, buf, **terms)                   # the workspace's own accumulator
    assert np.any(host(buf) != 0.0)
    assert [a.shape for a in ws.dW] == [tuple(s) for n, s, _ in ws.spec.layout() if n.startswith("W")]
    ws.zero_grad()
    np.testing.assert_array_equal(host(buf), 0.0)


def test_outputs_written_in_place(gpu, rng):
    shape = SPECS[3]
    theta = R.random_params(shape, rng)
    x = rng.uniform(-1, 1, (19, 3))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 8, dtype="float64", device="cuda")
    u, gu, lu = dev(np.zeros((19, 2))), dev(np.zeros((19, 3, 2))), dev(np.zeros((19, 2)))
    out = ws.forward(dev(theta), dev(x), 2, u=u, grad_u=gu, lap_u=lu)
    assert out[0] is u and out[1] is gu and out[2] is lu
    ref = R.forward(theta, shape, x, 2)
    for a, b in zip((u, gu, lu), ref):
        assert R.rel_err(host(a), b) < 1e-11


def test_torch_zero_copy_and_streams(gpu, rng, make_inputs):
    torch = need_torch()
    shape = SPECS[2]
    theta = R.random_params(shape, rng)
    terms = make_inputs(2, **ALL_TERMS)
    cpu = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64")
    g_ref = np.empty(theta.size)
    v_ref = cpu.value_and_grad(theta, g_ref, **terms)
    T = lambda a: torch.as_tensor(a, device="cuda")  # noqa: E731
    tterms = {k: (T(v) if isinstance(v, np.ndarray) else v) for k, v in terms.items()}
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64", device="cuda")
    grad = torch.full((theta.size,), 5.0, dtype=torch.float64, device="cuda")
    stream = torch.cuda.Stream()
    for s in (None, 0, stream, stream.cuda_stream):
        grad.fill_(5.0)
        v = ws.value_and_grad(T(theta), grad, stream=s, **tterms)
        torch.cuda.synchronize()
        assert v == pytest.approx(v_ref, rel=1e-10)
        assert R.rel_err(grad.cpu().numpy(), g_ref) < 1e-10
    # forward into caller tensors; DLPack capsules work too
    x = T(terms["x_pde"])
    u = torch.empty((x.shape[0], 2), dtype=torch.float64, device="cuda")
    ws.forward(T(theta), torch.utils.dlpack.to_dlpack(x), 0, u=u)
    torch.cuda.synchronize()
    assert R.rel_err(u.cpu().numpy(), cpu.forward(theta, terms["x_pde"], 0)) < 1e-11
    # workspace caches are zero-copy for torch
    z = ws.z[0]
    assert torch.as_tensor(z, device="cuda").data_ptr() == z.ptr
    # a tensor on the CPU is refused, naming the argument
    with pytest.raises(ValueError, match="x: expected a CUDA device .* got host memory"):
        ws.forward(T(theta), torch.as_tensor(terms["x_pde"]), 0)


def test_cupy_zero_copy(gpu, rng):
    cp = need_cupy()
    shape = SPECS[1]
    theta = R.random_params(shape, rng)
    x = rng.uniform(-1, 1, (21, 1))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64", device="cuda")
    u = cp.zeros((21, 2))
    ws.forward(cp.asarray(theta), cp.asarray(x), 0, u=u, stream=cp.cuda.get_current_stream())
    assert R.rel_err(u.get(), R.forward(theta, shape, x, 0)[0]) < 1e-11
    assert cp.asarray(ws.x_input).data.ptr == ws.x_input.ptr


class StreamRecordingTensor:
    """A torch tensor seen through both protocols, recording the stream helmpinn hands to
    __dlpack__ (PyTorch's __cuda_array_interface__ names no stream)."""

    def __init__(self, t):
        self.t = t
        self.streams = []
        self.__cuda_array_interface__ = t.__cuda_array_interface__

    def __dlpack__(self, stream=None):
        self.streams.append(stream)
        return self.t.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


def test_dlpack_preferred_and_handed_our_stream(gpu, rng):
    """An object with both protocols is taken by DLPack, handed the call's stream (1 for the
    legacy default stream), so the producer orders its pending work before ours."""
    torch = need_torch()
    shape = SPECS[2]
    theta = R.random_params(shape, rng)
    x = rng.uniform(-1, 1, (21, 2))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64", device="cuda")
    side = torch.cuda.Stream()
    for s, want in ((side, side.cuda_stream), (None, 1)):
        X = StreamRecordingTensor(torch.as_tensor(x, device="cuda"))
        u = ws.forward(torch.as_tensor(theta, device="cuda"), X, 0, stream=s)
        torch.cuda.synchronize()
        assert X.streams == [want]
        assert R.rel_err(host(u), R.forward(theta, shape, x, 0)[0]) < 1e-11


def test_inputs_written_on_torch_stream_are_waited_for(gpu, rng):
    """x is written on a torch side stream held back by a long sleep; the call on another stream
    must still read the written values (DLPack orders the producer's work before ours)."""
    torch = need_torch()
    shape = SPECS[1]
    theta = R.random_params(shape, rng)
    x = rng.uniform(-1, 1, (33, 1))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 64, dtype="float64", device="cuda")
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    X = torch.zeros((33, 1), dtype=torch.float64, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(producer):
        torch.cuda._sleep(200_000_000)                          # ~0.1 s of GPU time first
        X.copy_(torch.as_tensor(x, device="cuda"))
        u = ws.forward(torch.as_tensor(theta, device="cuda"), X, 0, stream=consumer)
    torch.cuda.synchronize()
    assert R.rel_err(host(u), R.forward(theta, shape, x, 0)[0]) < 1e-11


def test_calls_on_two_streams_are_ordered(gpu, rng):
    """The workspace's caches are shared: a call on stream B after one on stream A (held back
    by a sleep) waits for it (the last-use event), so the caches hold B's points at the end."""
    torch = need_torch()
    shape = SPECS[2]
    theta = torch.as_tensor(R.random_params(shape, rng), device="cuda")
    xa, xb = rng.uniform(-1, 1, (10, 2)), rng.uniform(-1, 1, (10, 2))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64", device="cuda")
    a, b = torch.cuda.Stream(), torch.cuda.Stream()
    Xa, Xb = torch.as_tensor(xa, device="cuda"), torch.as_tensor(xb, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(a):
        torch.cuda._sleep(200_000_000)
    ws.forward(theta, Xa, 0, stream=a)
    ws.forward(theta, Xb, 0, stream=b)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(host(ws.x_input)[:10], xb)


def test_second_gpu_waits_on_its_own_device(gpu, rng):
    """A workspace on cuda:1 called while cuda:0 is current, with an input produced on a
    cuda:1 stream: the wait happens with cuda:1 current (else the event record fails)."""
    if helmpinn.cuda_device_count() < 2:
        pytest.skip("needs two GPUs")
    cp = need_cupy()
    shape = SPECS[1]
    theta = R.random_params(shape, rng)
    x = rng.uniform(-1, 1, (9, 1))
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64", device="cuda:1")
    with cp.cuda.Device(1):
        s1 = cp.cuda.Stream(non_blocking=True)
        with s1:
            th1, x1, u1 = cp.asarray(theta), cp.asarray(x), cp.zeros((9, 2))
    with cp.cuda.Device(0):
        ws.forward(th1, x1, 0, u=u1, stream=s1)
    s1.synchronize()
    assert R.rel_err(u1.get(), R.forward(theta, shape, x, 0)[0]) < 1e-11


# ------------------------------------------------------------------ errors at the border on CUDA

@pytest.fixture
def cuda_setup(gpu, rng):
    shape = (2, 3, 5, 2)
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*shape), 16, dtype="float64", device="cuda")
    theta = R.random_params(shape, rng)
    x = rng.uniform(-1, 1, (6, 2))
    return ws, theta, x


def test_host_arrays_are_refused(cuda_setup):
    ws, theta, x = cuda_setup
    with pytest.raises(ValueError, match="x: expected a CUDA device float64 array .* got host memory"):
        ws.forward(dev(theta), x, 0)
    with pytest.raises(ValueError, match="params: expected a CUDA device .* got host memory"):
        ws.value_and_grad(theta, dev(np.zeros(theta.size)), x_data=dev(x), y=dev(np.zeros((6, 2))))
    with pytest.raises(ValueError, match="grad: expected a CUDA device .* got host memory"):
        ws.value_and_grad(dev(theta), np.zeros(theta.size), x_data=dev(x), y=dev(np.zeros((6, 2))))
    with pytest.raises(TypeError, match="x: expected a CUDA device float64 array .* got list"):
        ws.forward(dev(theta), [[0.0, 0.0]], 0)


def test_wrong_device_arrays_name_the_argument(cuda_setup):
    ws, theta, x = cuda_setup
    with pytest.raises(TypeError, match="x: expected a CUDA device float64 array .* got dtype float32"):
        ws.forward(dev(theta), dev(x, np.float32), 0)
    with pytest.raises(ValueError, match=r"x: expected a CUDA device float64 array of shape \(N, 2\), got shape \(6, 3\)"):
        ws.forward(dev(theta), dev(np.zeros((6, 3))), 0)
    with pytest.raises(ValueError, match="y: expected a CUDA device"):
        ws.value_and_grad(dev(theta), dev(np.zeros(theta.size)), x_data=dev(x), y=dev(np.zeros((5, 2))))
    g = dev(np.zeros(theta.size))
    with pytest.raises(ValueError, match="grad: output must not share memory with params"):
        ws.value_and_grad(g, g, x_data=dev(x), y=dev(np.zeros((6, 2))))
    with pytest.raises(TypeError, match="stream: expected None, an int CUDA stream handle"):
        ws.forward(dev(theta), dev(x), 0, stream="default")


def test_check_finite_on_device(cuda_setup):
    ws, theta, x = cuda_setup
    bad = x.copy()
    bad[3, 1] = np.nan
    y = dev(np.zeros((6, 2)))
    with pytest.raises(ValueError, match=r"x_data contains NaN or Inf \(at flat index 7\)"):
        ws.value_and_grad(dev(theta), dev(np.zeros(theta.size)), x_data=dev(bad), y=y,
                          check_finite=True)
    with pytest.raises(ValueError, match=r"kappa contains NaN or Inf"):
        ws.value_and_grad(dev(theta), dev(np.zeros(theta.size)), x_pde=dev(x), kappa=float("nan"),
                          check_finite=True)
    v = ws.value_and_grad(dev(theta), dev(np.zeros(theta.size)), x_data=dev(x), y=y, check_finite=True)
    assert np.isfinite(v)


# ------------------------------------------------------------------ seed primitives on device arrays

class FakeCudaArray:
    """Presents __cuda_array_interface__ over memory that is not a GPU's: enough for the errors
    raised before any device work (out= missing, no CUDA, no device), on any machine."""

    def __init__(self, shape, typestr="<f8", ptr=0x7F0000001000):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr,
                                         "data": (ptr, False), "version": 3, "strides": None}


def test_device_primitives_need_out_without_a_gpu():
    a, w = FakeCudaArray((4, 3)), FakeCudaArray((3, 3))
    with pytest.raises(ValueError, match="out: required when pred is a CUDA device array"):
        helmpinn.mse_backward(a, a)
    with pytest.raises(ValueError, match="out: required when dL_dh is a CUDA device array"):
        helmpinn.layer_backward(a, a, a, w, True)
    with pytest.raises(ValueError, match="out: required when dL_dphi is a CUDA device array"):
        helmpinn.fourier_backward(FakeCudaArray((4, 6)), a, w)


def test_device_primitives_without_cuda_or_device():
    """A CUDA array where no GPU can be used: a RuntimeError naming the argument."""
    a, o = FakeCudaArray((4, 3)), FakeCudaArray((4, 3), ptr=0x7F0000002000)
    if not helmpinn.has_cuda():
        why = "pred: is a CUDA device array, but helmpinn was built without CUDA support"
    elif helmpinn.cuda_device_count() == 0:
        err = helmpinn.cuda_device_error()
        why = "pred: is a CUDA device array, but no CUDA device is available" + (
            "" if err == "no CUDA device found" else re.escape(": " + err))
    else:                                       # a GPU: the fake pointer is not device memory
        with pytest.raises(ValueError, match="pred: expected CUDA device memory on device"):
            helmpinn.mse_backward(a, a, out=o)
        return
    with pytest.raises(RuntimeError, match=why):
        helmpinn.mse_backward(a, a, out=o)
    with pytest.raises(RuntimeError, match=why.replace("pred", "params")):
        helmpinn.adam_step(a, a, a, a, 1, 1e-3)


def test_primitive_stream_keyword_is_for_device_arrays_only(rng):
    p, t = rng.normal(size=(4, 2)), rng.normal(size=(4, 2))
    with pytest.raises(ValueError, match=r"stream: only for CUDA device arrays \(pred is a host array\)"):
        helmpinn.mse_backward(p, t, stream=0)
    with pytest.raises(ValueError, match="stream: only for CUDA device arrays"):
        helmpinn.adam_step(p.ravel(), t.ravel(), np.zeros(8), np.zeros(8), 1, 1e-3, stream=0)
    np.testing.assert_array_equal(helmpinn.mse_backward(p, t, stream=None), 2 / 4 * (p - t))


PRIM_TOL = {"float64": 1e-12, "float32": 1e-5}


def _device_lib(name):
    """(to_device, zeros) for a device array library, or a skip when it is not importable."""
    if name == "helmpinn":
        return (lambda a: dev(a)), (lambda shape, dtype: dev(np.zeros(shape, dtype)))
    if name == "torch":
        torch = need_torch()
        return ((lambda a: torch.as_tensor(a, device="cuda")),
                (lambda shape, dtype: torch.zeros(shape, dtype=getattr(torch, dtype), device="cuda")))
    cp = need_cupy()
    return (lambda a: cp.asarray(a)), (lambda shape, dtype: cp.zeros(shape, dtype=dtype))


def _primitive_runs(rng, dtype, D, Z, d=2, n=300, n_out=20, n_in=17, m=5):
    """Each primitive on NumPy (the reference) and on device arrays (D: to device, Z: zeros):
    a list of (name, host results, device results)."""
    r = lambda *shape: rng.uniform(-1, 1, shape).astype(dtype)  # noqa: E731
    runs = []
    pred, target = r(n, 3), r(n, 3)
    out = Z((n, 3), dtype)
    assert helmpinn.mse_backward(D(pred), D(target), out=out) is out
    runs.append(("mse_backward", [helmpinn.mse_backward(pred, target)], [out]))
    G, h, A, W = r(n, n_out), 0.99 * r(n, n_out), r(n, n_in), r(n_out, n_in)
    for tanh in (True, False):
        outs = (Z((n_out, n_in), dtype), Z((n_out,), dtype), Z((n, n_in), dtype))
        res = helmpinn.layer_backward(D(G), D(h), D(A), D(W), tanh, out=outs)
        assert all(a is b for a, b in zip(res, outs))
        runs.append((f"layer_backward tanh={tanh}", helmpinn.layer_backward(G, h, A, W, tanh), outs))
    for dd in (1, 2, 3):
        dphi, x, B = r(n, 2 * m), r(n, dd), r(dd, m)
        out = Z((dd, m), dtype)
        helmpinn.fourier_backward(D(dphi), D(x), D(B), out=out)
        runs.append((f"fourier_backward d={dd}", [helmpinn.fourier_backward(dphi, x, B)], [out]))
    p, g, mm, v = r(1000), r(1000), 0.1 * r(1000), 0.1 * np.abs(r(1000))
    dp, dm, dv = D(p), D(mm), D(v)
    for step in (1, 2, 3):
        helmpinn.adam_step(p, g, mm, v, step, 1e-2, weight_decay=0.01)
        helmpinn.adam_step(dp, D(g), dm, dv, step, 1e-2, weight_decay=0.01)
    runs.append(("adam_step x3", [p, mm, v], [dp, dm, dv]))
    return runs


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("lib", ["helmpinn", "torch", "cupy"])
def test_device_primitives_match_numpy(gpu, rng, lib, dtype):
    D, Z = _device_lib(lib)
    for name, ref, got in _primitive_runs(rng, dtype, D, Z):
        for a, b in zip(got, ref):
            a = host(a)
            assert a.dtype == b.dtype and a.shape == b.shape, name
            assert R.rel_err(a, b) < PRIM_TOL[dtype], f"{name}: {R.rel_err(a, b):.3e}"


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_device_primitives_bitwise_reproducible(gpu, dtype):
    D, Z = _device_lib("helmpinn")
    first, second = (_primitive_runs(np.random.default_rng(5), dtype, D, Z) for _ in range(2))
    for (name, _, a), (_, _, b) in zip(first, second):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(host(x), host(y), err_msg=name)


def test_device_primitives_on_a_stream(gpu, rng):
    torch = need_torch()
    pred, target = rng.normal(size=(70, 2)), rng.normal(size=(70, 2))
    stream = torch.cuda.Stream()
    for s in (stream, stream.cuda_stream, 0):
        out = torch.full((70, 2), 7.0, dtype=torch.float64, device="cuda")
        helmpinn.mse_backward(torch.as_tensor(pred, device="cuda"),
                              torch.as_tensor(target, device="cuda"), out=out, stream=s)
        torch.cuda.synchronize()
        assert R.rel_err(out.cpu().numpy(), helmpinn.mse_backward(pred, target)) < 1e-15


def test_device_primitives_refuse_host_arrays(gpu, rng):
    p, t = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    with pytest.raises(ValueError, match="target: expected a CUDA device float64 array .* got host "
                                         "memory .*pred is a CUDA device array"):
        helmpinn.mse_backward(dev(p), t, out=dev(np.zeros((6, 2))))
    with pytest.raises(ValueError, match="out: expected a CUDA device .* got host memory"):
        helmpinn.mse_backward(dev(p), dev(t), out=np.zeros((6, 2)))
    with pytest.raises(ValueError, match="out: required when pred is a CUDA device array"):
        helmpinn.mse_backward(dev(p), dev(t))
    G, A, W = rng.normal(size=(6, 3)), rng.normal(size=(6, 4)), rng.normal(size=(3, 4))
    outs = (dev(np.zeros((3, 4))), dev(np.zeros(3)), np.zeros((6, 4)))
    with pytest.raises(ValueError, match=r"out\[2\] \(dh_prev\): expected a CUDA device .* got host memory"):
        helmpinn.layer_backward(dev(G), dev(G), dev(A), dev(W), True, out=outs)
    with pytest.raises(ValueError, match="m: expected a CUDA device .* got host memory"):
        helmpinn.adam_step(dev(p.ravel()), dev(t.ravel()), np.zeros(12), dev(np.zeros(12)), 1, 1e-3)


def test_device_primitives_check_arguments(gpu, rng):
    p, t = dev(rng.normal(size=(6, 2))), dev(rng.normal(size=(6, 2)))
    with pytest.raises(TypeError, match="target: expected a CUDA device float64 array .* got dtype float32"):
        helmpinn.mse_backward(p, dev(np.zeros((6, 2)), np.float32), out=dev(np.zeros((6, 2))))
    with pytest.raises(ValueError, match=r"out: expected a CUDA device float64 array of shape \(6, 2\)"):
        helmpinn.mse_backward(p, t, out=dev(np.zeros((5, 2))))
    with pytest.raises(ValueError, match="out: output must not share memory with pred"):
        helmpinn.mse_backward(p, t, out=p)
    with pytest.raises(ValueError, match="B: expected shape"):
        helmpinn.fourier_backward(dev(np.zeros((6, 8))), dev(np.zeros((6, 4))),
                                  dev(np.zeros((4, 4))), out=dev(np.zeros((4, 4))))
    with pytest.raises(ValueError, match="step: expected an integer >= 1"):
        helmpinn.adam_step(dev(np.zeros(4)), dev(np.zeros(4)), dev(np.zeros(4)), dev(np.zeros(4)),
                           0, 1e-3)
    with pytest.raises(TypeError, match="stream: expected None, an int CUDA stream handle"):
        helmpinn.mse_backward(p, t, out=dev(np.zeros((6, 2))), stream="default")
