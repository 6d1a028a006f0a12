"""Hostile and careless inputs to the compiled core. Each case was a crash, a silent
wrong number or an OOM kill; each must now be a clear Python exception (or, for NaN inputs, a
NaN result). Cases that crashed the interpreter run in a child process, so that a regression
fails one test instead of killing the session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import helmpinn as hp

REPO = Path(__file__).resolve().parents[1]


def run_child(code: str, mem_limit: int | None = None, timeout: float = 120) -> str:
    """Runs `code` in a fresh interpreter that imports this helmpinn; returns its stdout.
    A crash (signal) or non-zero exit fails the test with the child's output. `mem_limit`
    caps the child's address space (bytes), so that a regression that would allocate the whole
    machine gets std::bad_alloc instead."""
    prelude = "import resource\n"
    if mem_limit:
        prelude += f"resource.setrlimit(resource.RLIMIT_AS, ({mem_limit}, {mem_limit}))\n"
    prelude += "import numpy as np\nimport helmpinn as hp\n"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(hp.__file__).parents[1])] +
                                        env.get("PYTHONPATH", "").split(os.pathsep))
    env.setdefault("OMP_NUM_THREADS", "2")
    proc = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, (f"child exited with {proc.returncode}\n"
                                  f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}")
    return proc.stdout


def _theta(spec, dtype, rng, scale=0.5):
    return (rng.normal(size=spec.num_params) * scale).astype(dtype)


# ----------------------------------------------------------------- 1, 2, 4: sizes

def test_batch_size_whose_bytes_overflow_is_refused():
    out = run_child("""
        spec = hp.ModelSpec(2, 8, 16, 2)
        for batch in (2**62, 2**63 - 1):
            try:
                ws = hp.Workspace(spec, batch)
            except MemoryError as e:
                print("MemoryError:", e)
            else:
                print("accepted", ws.memory_bytes)
                ws.forward(np.zeros(spec.num_params, np.float32), np.zeros((1, 2), np.float32))
    """, mem_limit=8 << 30)
    lines = out.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("MemoryError: Workspace") for line in lines), out
    assert all("overflow" in line for line in lines), out


def test_model_spec_whose_parameter_count_overflows_is_refused():
    with pytest.raises(ValueError, match=r"ff_dim must be <= 1073741823"):
        hp.ModelSpec(1, 2**31 - 2, 2**31 - 100, 1)
    with pytest.raises(ValueError, match=r"too large.*hidden_dim=2147483548"):
        hp.ModelSpec(1, 2**30 - 1, 2**31 - 100, 1)
    with pytest.raises(ValueError, match=r"too large"):
        hp.ModelSpec(3, 32, 10**9, 3)
    # the largest accepted feature width still has consistent sizes
    s = hp.ModelSpec(1, 2**20, 1, 1)
    assert s.num_params == 2**20 + 1 * 2**21 + 1 + 2 * 1 + 2
    assert s.layout()[1] == ("W0", (1, 2**21), 2**20)


def test_workspace_larger_than_the_machine_raises_memory_error_before_allocating():
    # ~2x the machine's memory in per-point caches, each buffer well below it: with overcommit
    # every allocation would be granted and the process killed while zeroing them. The child's
    # address space is capped so that a regression gets bad_alloc instead of the OOM killer;
    # the fix refuses before allocating and names the bytes.
    phys = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    out = run_child(f"""
        spec = hp.ModelSpec(3, 32, 64, 3)
        per_point = hp.Workspace(spec, 4096).memory_bytes / 4096
        batch = int(2 * {phys} / per_point)
        try:
            hp.Workspace(spec, batch)
        except MemoryError as e:
            print("MemoryError:", e)
        try:
            hp.Workspace(hp.ModelSpec(3, 32, 10**8, 3), 1)
        except MemoryError as e:
            print("MemoryError:", e)
    """, mem_limit=min(phys // 2, 8 << 30))
    lines = out.strip().splitlines()
    assert len(lines) == 2, out
    for line in lines:
        assert line.startswith("MemoryError: Workspace: needs "), line
        assert "bytes" in line and "more than this machine's memory" in line, line


# ----------------------------------------------------------------- 3: __new__ without __init__

NEW_WITHOUT_INIT = [("Workspace", "w", e) for e in (
    "w.batch_size", "w.memory_bytes", "w.spec", "w.zero_grad()", "w.grad", "w.z",
    "w.forward(np.zeros(10), np.zeros((1, 1)))", "repr(w)",
    "w.value_and_grad(np.zeros(10), np.zeros(10), x_data=np.zeros((1, 1)), y=np.zeros((1, 2)))",
)] + [("ModelSpec", "s", e) for e in (
    "s.in_dim", "s.num_params", "s.layout()", "repr(s)", "s == hp.ModelSpec(1, 2, 3, 1)",
    "hash(s)", "hp.Workspace(s, 4)", "s.views(np.zeros(3))", "s.__getstate__()",
)]


@pytest.mark.parametrize("cls, name, expr", NEW_WITHOUT_INIT)
def test_new_without_init_raises(cls, name, expr):
    out = run_child(f"""
        {name} = hp.{cls}.__new__(hp.{cls})
        try:
            {expr}
        except TypeError as e:
            print("TypeError:", e)
    """)
    assert out.startswith(f"TypeError: {cls}: this object was made by {cls}.__new__ without __init__"), out


def test_model_spec_pickle_still_works():
    import pickle
    s = hp.ModelSpec(2, 3, 4, 2)
    assert pickle.loads(pickle.dumps(s)) == s


# ----------------------------------------------------------------- 5: outputs over the caches

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_forward_refuses_arrays_overlapping_its_own_caches(dtype, rng):
    spec = hp.ModelSpec(2, 4, 8, 2)
    ws = hp.Workspace(spec, 16, dtype=dtype)
    th = _theta(spec, dtype, rng)
    x = rng.uniform(-1, 1, (5, 2)).astype(dtype)
    flat = lambda a, n: a.reshape(-1)[:n]  # noqa: E731  (a view of the cache)
    cases = [
        (dict(u=ws.d2u_dx2[:5]), "u", "d2u_dx2"),
        (dict(u=flat(ws.du_dx, 10).reshape(5, 2)), "u", "du_dx"),
        (dict(u=flat(ws.z_streams[1], 10).reshape(5, 2)), "u", r"z_streams\[1\]"),
        (dict(u=flat(ws.h_streams[0], 10).reshape(5, 2)), "u", r"h_streams\[0\]"),
        (dict(grad_u=flat(ws.fourier_streams, 20).reshape(5, 2, 2)), "grad_u", "fourier_streams"),
        (dict(lap_u=ws.x_input[:5]), "lap_u", "x_input"),
    ]
    for kw, name, cache in cases:
        with pytest.raises(ValueError, match=rf"^{name}: must not share memory with the "
                                             rf"workspace's own cache Workspace\.{cache}"):
            ws.forward(th, x, 2, **kw)
    with pytest.raises(ValueError, match=r"^x: .*Workspace\.x_input"):
        ws.forward(th, ws.x_input[:5], 0)
    # value_and_grad: its gradient may be ws.grad (documented), not another cache
    y = np.zeros((5, 2), dtype)
    with pytest.raises(ValueError, match=r"^grad: .*Workspace\.z_streams\[0\]"):
        ws.value_and_grad(th, flat(ws.z_streams[0], th.size), x_data=x, y=y)
    ref = np.empty_like(th)
    v = ws.value_and_grad(th, ref, x_data=x, y=y)
    assert ws.value_and_grad(th, ws.grad, x_data=x, y=y) == v
    np.testing.assert_array_equal(ws.grad, ref)


# ----------------------------------------------------------------- 6: NaN and Inf points

@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("d", [1, 2, 3])
def test_nan_and_inf_points_give_nan_not_a_finite_value(dtype, d, rng):
    spec = hp.ModelSpec(d, 5, 40, 2)  # 40: wide enough for the vectorised tanh and GEMM
    ws = hp.Workspace(spec, 64, dtype=dtype)
    th = _theta(spec, dtype, rng)
    good = rng.uniform(-1, 1, (70, d)).astype(dtype)
    x = good.copy()
    bad_rows = [0, 3, 40, 69]
    for r, v in zip(bad_rows, [np.nan, np.inf, -np.inf, np.nan]):
        x[r, r % d] = v
    u, gu, lu = ws.forward(th, x, 2)
    u0, gu0, lu0 = ws.forward(th, good, 2)
    ok = np.setdiff1d(np.arange(70), bad_rows)
    for a, a0 in ((u, u0), (gu, gu0), (lu, lu0)):
        assert np.isnan(a[bad_rows]).all(), a[bad_rows]
        np.testing.assert_array_equal(a[ok], a0[ok])
    # one NaN or Inf point makes every loss term NaN (or, with check_finite, an error)
    grad = np.empty_like(th)
    y = np.zeros((70, 2), dtype)
    normals = np.zeros((70, d), dtype)
    normals[:, 0] = 1
    for terms in (dict(x_data=x, y=y), dict(x_pde=x, kappa=2.0), dict(x_bc=x, n_bc=normals)):
        v = ws.value_and_grad(th, grad, **terms)
        assert np.isnan(v), (terms.keys(), v)
        assert np.isnan(grad).any()
        name = next(iter(terms))
        with pytest.raises(ValueError, match=rf"{name} contains NaN or Inf"):
            ws.value_and_grad(th, grad, check_finite=True, **terms)


# ----------------------------------------------------------------- 7: threads

@pytest.mark.parametrize("call", ["value_and_grad", "forward"])
def test_one_workspace_from_two_threads_never_mixes_results(call, rng):
    spec = hp.ModelSpec(2, 16, 64, 3)
    ws = hp.Workspace(spec, 1024, dtype="float64")
    th = rng.normal(size=spec.num_params) * 0.1
    data = {k: (rng.uniform(-1, 1, (3000, 2)), rng.normal(size=(3000, 2))) for k in "ab"}

    def run(k):
        x, y = data[k]
        if call == "forward":
            return ws.forward(th, x, 2)[2].copy()
        return ws.value_and_grad(th, np.empty_like(th), x_data=x, y=y)

    ref = {k: run(k) for k in "ab"}
    counts = {"ok": 0, "wrong": 0, "busy": 0}
    messages = []

    def worker(k):
        for _ in range(30):
            try:
                r = run(k)
            except RuntimeError as e:
                counts["busy"] += 1
                messages.append(str(e))
                continue
            counts["ok" if np.array_equal(r, ref[k]) else "wrong"] += 1

    threads = [threading.Thread(target=worker, args=(k,)) for k in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts["wrong"] == 0, counts
    assert counts["ok"] >= 30, counts  # at least one thread's calls all ran
    for m in messages:
        assert m.startswith("Workspace: already running a call in another thread"), m


def test_separate_workspaces_run_in_parallel_threads(rng):
    spec = hp.ModelSpec(2, 8, 32, 2)
    th = rng.normal(size=spec.num_params) * 0.1
    x, y = rng.uniform(-1, 1, (500, 2)), rng.normal(size=(500, 2))
    ref = hp.Workspace(spec, 256, "float64").value_and_grad(th, np.empty_like(th), x_data=x, y=y)
    out = []

    def worker():
        ws = hp.Workspace(spec, 256, "float64")
        out.extend(ws.value_and_grad(th, np.empty_like(th), x_data=x, y=y) for _ in range(10))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [ref] * 20


# ----------------------------------------------------------------- 8: Adam hyper-parameters

@pytest.mark.parametrize("kw, name", [
    (dict(eps=0.0), "eps"), (dict(eps=-1.0), "eps"), (dict(eps=float("nan")), "eps"),
    (dict(beta1=1.0), "beta1"), (dict(beta2=1.0), "beta2"), (dict(beta1=float("nan")), "beta1"),
    (dict(beta2=float("nan")), "beta2"), (dict(beta1=-0.5), "beta1"), (dict(beta2=2.0), "beta2"),
    (dict(lr=float("inf")), "lr"), (dict(lr=float("nan")), "lr"),
    (dict(weight_decay=float("inf")), "weight_decay"),
    (dict(weight_decay=-1.0), "weight_decay"),
])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_step_refuses_hyper_parameters_that_make_nan(kw, name, dtype):
    p = np.ones(5, dtype)
    g = np.zeros(5, dtype)
    m = np.zeros(5, dtype)
    v = np.zeros(5, dtype)
    args = dict(lr=1e-3)
    args.update(kw)
    with pytest.raises(ValueError, match=rf"\b{name}\b"):
        hp.adam_step(p, g, m, v, 1, **args)
    np.testing.assert_array_equal(p, 1)
    np.testing.assert_array_equal(m, 0)
    np.testing.assert_array_equal(v, 0)


# ----------------------------------------------------------------- 9: float32 overflow

def test_float64_scalars_overflowing_float32_are_named(rng):
    spec = hp.ModelSpec(2, 4, 8, 2)
    ws = hp.Workspace(spec, 16, dtype="float32")
    th = _theta(spec, "float32", rng)
    g = np.empty_like(th)
    x = rng.uniform(-1, 1, (4, 2)).astype(np.float32)
    n = np.tile(np.array([[1, 0]], np.float32), (4, 1))
    cases = [
        (dict(x_pde=x, kappa=1e39), "kappa"), (dict(x_pde=x, kappa=-1e39), "kappa"),
        (dict(x_pde=x, kappa=2.0, w_pde=1e300), "w_pde"),
        (dict(x_data=x, y=np.zeros((4, 2), np.float32), w_data=-3.5e38), "w_data"),
        (dict(x_bc=x, n_bc=n, alpha_bc=complex(1e40, 1)), r"alpha_bc \(real part\)"),
        (dict(x_bc=x, n_bc=n, alpha_bc=complex(1, -1e40)), r"alpha_bc \(imaginary part\)"),
        (dict(x_bc=x, n_bc=n, w_bc=1e39), "w_bc"),
    ]
    for kw, name in cases:
        for check in (False, True):
            with pytest.raises(ValueError, match=rf"^{name}: .* overflows float32"):
                ws.value_and_grad(th, g, check_finite=check, **kw)
    # float64 takes them; a real Inf is still reported as one
    ws64 = hp.Workspace(spec, 16, dtype="float64")
    th64 = th.astype(np.float64)
    assert np.isfinite(ws64.value_and_grad(th64, np.empty_like(th64), x_pde=x.astype(float),
                                           kappa=1e39))
    with pytest.raises(ValueError, match="kappa contains NaN or Inf"):
        ws.value_and_grad(th, g, x_pde=x, kappa=float("inf"), check_finite=True)


# ----------------------------------------------------------------- 11: plain cmake with nvcc

@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("cmake") is None,
                    reason="needs nvcc and cmake on PATH (a machine where CUDA is auto-enabled)")
def test_plain_cmake_configure_with_nvcc(tmp_path):
    """`cmake -S . -B build` with nvcc on PATH (CUDA auto-enabled, no architectures given)
    must configure and generate; it failed with "CUDA_ARCHITECTURES is empty"."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDAARCHS", "CMAKE_ARGS")}
    proc = subprocess.run(["cmake", "-S", str(REPO), "-B", str(tmp_path / "build"),
                           "-DHELMPINN_PYTHON=OFF"], env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "CUDA=ON" in proc.stdout, proc.stdout
    cache = (tmp_path / "build" / "CMakeCache.txt").read_text()
    assert "CMAKE_CUDA_ARCHITECTURES:STRING=80-real;90-real;90-virtual" in cache
