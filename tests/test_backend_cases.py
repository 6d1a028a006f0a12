"""The loss-case table (cpp/tests/cuda/loss_cases.inc), ONE table for every backend:

* cpu:  the CPU backend against the float64 NumPy reference (residuals and loss to 1e-12; the
        gradient and Jacobian against central differences of the reference; frozen B: its
        gradient is exactly 0);
* cuda-emulated: the same table in emu_check.cpp (ctest / tests/test_cuda.py), against cpu;
* cuda: here, a device="cuda" Workspace on helmpinn DeviceArrays against cpu on the same inputs
        (float64: relative error < 1e-11, float32: < 1e-4), with the activation buffers in
        shared memory and in global scratch (conftest's ``scratch``). Every entry:
        value_and_grad's loss, breakdown and gradient (the gradient overwritten, not
        accumulated; frozen B exactly 0; a second call without breakdown returns a float, and
        it, its gradient and last_loss are bitwise the first's); in float64 also the loss
        against the reference's r @ r. "rows" entries also: residuals (a DeviceArray; in
        float64 r @ r is the loss and 2 J^T r the gradient), the whole Jacobian (frozen B: its
        columns exactly 0), row ranges across the terms' boundaries (into out= arrays, and one
        allocated; bitwise those rows of the whole), jvp and vjp (bitwise twice), and
        value_and_grad's grad_kappa. Skipped without a GPU, with the reason (FAIL instead with
        HELMPINN_REQUIRE_GPU=1).

d = 1, 2, 3 (conftest's SPECS) for every entry.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import helmpinn
import reference as R
from conftest import SPECS

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "cpp/tests/cuda/loss_cases.inc"
TOL = {"float64": 1e-11, "float32": 1e-4}
FIELDS = ("check", "terms", "variant", "train_fourier", "counts", "op", "quick")


def _cases() -> list[dict]:
    if not TABLE.exists():
        return []
    cases = []
    for line in TABLE.read_text().splitlines():
        m = re.fullmatch(r"HELMPINN_LOSS_CASE\((.*)\)", line.strip())
        if m:
            vals = [v.strip() for v in m.group(1).split(",")]
            c = dict(zip(FIELDS, vals))
            for k in ("terms", "variant", "train_fourier", "counts", "quick"):
                c[k] = int(c[k])
            cases.append(c)
    return cases


CASES = _cases()


def _id(c: dict) -> str:
    return (f"{c['check']}-t{c['terms']}-v{c['variant']}{'' if c['train_fourier'] else '-frozenB'}"
            f"{'-counts' if c['counts'] else ''}-{c['op']}")


def test_the_table_is_read():
    if not TABLE.exists():
        pytest.skip("the C++ sources are not next to the tests (installed package)")
    assert len(CASES) >= 10 and {c["op"] for c in CASES} >= {"laplacian", "op_arrays", "op_lap"}
    assert all(c["check"] in ("grad", "rows") for c in CASES)
    assert {c["variant"] for c in CASES} == {0, 1, 2}


def inputs(case: dict, d: int, rng, n=(9, 5, 7)) -> dict:
    """The keywords of one entry, as emu_check.cpp's Problem::inputs builds them."""
    n_pde, n_data, n_bc = n
    t, var, op = case["terms"], case["variant"], case["op"]
    out: dict = dict(w_pde=0.7, w_data=1.9, w_bc=0.35, train_fourier=bool(case["train_fourier"]))
    if t & 1:
        out["x_pde"] = rng.uniform(-1, 1, (n_pde, d))
        if op == "laplacian":
            out["kappa"] = rng.uniform(1, 10, n_pde) if var == 0 else 7.3
        elif op == "op_arrays":
            out.update(a_pde=rng.normal(size=(n_pde, d, 2)), b_pde=rng.normal(size=(n_pde, d, 2)),
                       c_pde=3 * rng.normal(size=(n_pde, 2)))
        elif op == "op_constants":
            out.update(a_pde=0.8 - 0.45j, b_pde=-1.3 + 0.6j, c_pde=6.1 + 1.7j)
        elif op == "op_lap":
            out.update(a_lap=rng.normal(size=(n_pde, 2)), b_pde=rng.normal(size=(n_pde, d, 2)),
                       c_pde=3 * rng.normal(size=(n_pde, 2)))
        else:  # op_kappa
            out.update(a_pde=rng.normal(size=(n_pde, d, 2)), b_pde=-1.3 + 0.6j,
                       kappa=rng.uniform(1, 10, n_pde))
        if var != 1:
            out["f"] = rng.normal(size=(n_pde, 2))
    if t & 2:
        out["x_data"] = rng.uniform(-1, 1, (n_data, d))
        out["y"] = rng.normal(size=(n_data, 2))
    if t & 4:
        nrm = rng.normal(size=(n_bc, d))
        out["x_bc"] = rng.uniform(-1, 1, (n_bc, d))
        out["n_bc"] = nrm / np.linalg.norm(nrm, axis=1, keepdims=True)
        if var == 0:
            out["alpha_bc"] = rng.normal(size=(n_bc, 2))
        else:
            out["alpha_bc"] = -2.1j if var == 2 else 0.3 - 2.1j   # 2: Sommerfeld-like, -i k
        if var != 1:
            out["g_bc"] = rng.normal(size=(n_bc, 2))
    if case["counts"]:
        out["counts"] = {k: (v + 13 if k == "pde" else 2 * v if k == "data" else v + 1)
                         for k, v, bit in (("pde", n_pde, 1), ("data", n_data, 2), ("bc", n_bc, 4))
                         if t & bit}
    return out


def _reference_kwargs(kw: dict) -> dict:
    return {k: v for k, v in kw.items() if k != "train_fourier"}


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
@pytest.mark.parametrize("d", sorted(SPECS))
def test_cpu_against_the_reference(case, d, rng):
    spec = SPECS[d]
    kw = inputs(case, d, rng)
    theta = R.random_params(spec, rng, fourier_sigma=0.5)
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 4, dtype="float64")  # several chunks
    ref = _reference_kwargs(kw)
    r_ref = R.residuals(theta, spec, **ref)
    grad = np.zeros_like(theta)
    loss = ws.value_and_grad(theta, grad, **kw)
    assert loss == pytest.approx(r_ref @ r_ref, rel=1e-12)
    J_fd = R.fd_jacobian(lambda th: R.residuals(th, spec, **ref), theta)
    frozen = slice(0, 0) if case["train_fourier"] else slice(0, d * spec[1])
    g_fd = 2 * J_fd.T @ r_ref
    g_fd[frozen] = 0.0
    np.testing.assert_allclose(grad, g_fd, rtol=0, atol=1e-7 * np.abs(g_fd).max())
    assert np.all(grad[frozen] == 0.0)
    if case["check"] == "rows":
        r = ws.residuals(theta, **kw)
        np.testing.assert_allclose(r, r_ref, rtol=0, atol=1e-12 * np.abs(r_ref).max())
        J = ws.jacobian(theta, **kw)
        J_fd[:, frozen] = 0.0
        assert np.max(np.abs(J - J_fd)) <= 1e-7 * np.abs(J_fd).max()
        v, w = rng.normal(size=theta.size), rng.normal(size=r.size)
        np.testing.assert_allclose(ws.jvp(theta, v, **kw), J @ v, rtol=0,
                                   atol=1e-12 * np.abs(J @ v).max())
        np.testing.assert_allclose(ws.vjp(theta, w, **kw), J.T @ w, rtol=0,
                                   atol=1e-12 * np.abs(J.T @ w).max())


def _row_ranges(case: dict, n: tuple[int, int, int], R: int) -> list[tuple[int, int]]:
    """Row ranges of the Jacobian: the first and last row, most rows, an empty range, and one
    across each boundary between two terms."""
    sizes = [2 * k for k, bit in zip(n, (1, 2, 4)) if case["terms"] & bit]
    bounds = np.cumsum(sizes)[:-1]
    return ([(0, 1), (R - 1, R), (3, R - 2), (R // 2, R // 2)]
            + [(max(int(b) - 5, 0), min(int(b) + 9, R)) for b in bounds])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
@pytest.mark.parametrize("d", sorted(SPECS))
def test_cuda_against_cpu(gpu, scratch, case, d, dtype, rng):
    DeviceArray = helmpinn._core.DeviceArray
    dev = lambda a: DeviceArray.from_host(np.ascontiguousarray(a, dtype=dtype))  # noqa: E731
    spec = SPECS[d]
    frozen = slice(0, 0) if case["train_fourier"] else slice(0, d * spec[1])
    n = (45, 23, 31)
    kw = inputs(case, d, rng, n=n)
    h = {k: (np.ascontiguousarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v)
         for k, v in kw.items()}
    g = {k: (dev(v) if isinstance(v, np.ndarray) else v) for k, v in h.items()}
    theta64 = R.random_params(spec, rng, fourier_sigma=0.5)
    theta = theta64.astype(dtype)
    th = dev(theta)
    cpu = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 16, dtype=dtype)
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 16, dtype=dtype, device="cuda")

    def close(a, b, what):
        a = a.copy_to_host() if isinstance(a, DeviceArray) else np.asarray(a)
        assert a.shape == np.shape(b), f"{what}: shape {a.shape}, CPU {np.shape(b)}"
        err = R.rel_err(a, b)
        assert err < TOL[dtype], f"{what}: GPU vs CPU relative error {err:.3e}"
        return a

    # value_and_grad: grad is overwritten, not accumulated (it starts at 123 / -5)
    grad1, grad2 = dev(np.full(theta.size, 123.0)), dev(np.full(theta.size, -5.0))
    l1 = ws.value_and_grad(th, grad1, breakdown=True, **g)
    l2 = ws.value_and_grad(th, grad2, **g)
    grad_cpu = np.empty_like(theta)
    l_cpu = cpu.value_and_grad(theta, grad_cpu, breakdown=True, **h)
    assert isinstance(l2, float) and l2 == l1.total
    for k in ("total", "pde", "data", "bc"):
        assert getattr(l1, k) == pytest.approx(getattr(l_cpu, k), rel=TOL[dtype]), k
        assert ws.last_loss[k] == getattr(l1, k), k
    grad = close(grad1, grad_cpu, "gradient")
    np.testing.assert_array_equal(grad, grad2.copy_to_host())
    assert np.all(grad[frozen] == 0.0)
    if dtype == "float64":  # and the independent reference: the loss is r @ r
        r_ref = R.residuals(theta64, spec, **_reference_kwargs(kw))
        assert l1.total == pytest.approx(r_ref @ r_ref, rel=1e-11)
    if case["check"] != "rows":
        return

    r = ws.residuals(th, **g)
    assert isinstance(r, DeviceArray)
    r = close(r, cpu.residuals(theta, **h), "residuals")
    J = close(ws.jacobian(th, **g), cpu.jacobian(theta, **h), "jacobian")
    assert J.shape == (r.size, theta.size)
    assert np.all(J[:, frozen] == 0.0)
    if dtype == "float64":
        assert r @ r == pytest.approx(l1.total, rel=1e-12)
        close(2 * J.T @ r, grad, "2 J^T r vs gradient")
    # row ranges: bitwise the rows of the whole Jacobian, into out= and allocated
    for a, b in _row_ranges(case, n, r.size):
        out = dev(np.full((b - a, theta.size), np.nan))
        assert ws.jacobian(th, rows=(a, b), out=out, **g) is out
        np.testing.assert_array_equal(out.copy_to_host(), J[a:b], err_msg=f"rows ({a}, {b})")
    a, b = 3, min(r.size, 70)
    np.testing.assert_array_equal(ws.jacobian(th, rows=(a, b), **g).copy_to_host(), J[a:b])
    # jvp, vjp: twice each, bitwise the same
    v = rng.normal(size=theta.size).astype(dtype)
    w = rng.normal(size=r.size).astype(dtype)
    jv = close(ws.jvp(th, dev(v), **g), cpu.jvp(theta, v, **h), "jvp")
    np.testing.assert_array_equal(jv, ws.jvp(th, dev(v), **g).copy_to_host())
    jw = close(ws.vjp(th, dev(w), **g), cpu.vjp(theta, w, **h), "vjp")
    np.testing.assert_array_equal(jw, ws.vjp(th, dev(w), **g).copy_to_host())
    # value_and_grad's grad_kappa (d loss / d kappa_i; with the operator d loss / d Re c_i)
    if case["terms"] & 1:
        gk, gk_cpu = dev(np.full(n[0], 5.0)), np.empty(n[0], dtype)
        lk = ws.value_and_grad(th, grad1, grad_kappa=gk, **g)
        assert lk == pytest.approx(cpu.value_and_grad(theta, grad_cpu, grad_kappa=gk_cpu, **h),
                                   rel=TOL[dtype])
        close(gk, gk_cpu, "grad_kappa")
        close(grad1, grad_cpu, "gradient with grad_kappa")
