"""The loss-case table (cpp/src/cuda/emulation/loss_cases.inc), ONE table for every backend:

* cpu:  the CPU backend against the float64 NumPy reference (residuals and loss to 1e-12; the
        gradient and Jacobian against central differences of the reference);
* cuda-emulated: the same table in emu_check.cpp (ctest / tests/test_cuda.py), against cpu;
* cuda: here, a device="cuda" Workspace against cpu on the same inputs (float64 < 1e-11,
        float32 < 1e-4; bitwise twice), skipped without a GPU (FAIL with HELMPINN_REQUIRE_GPU=1).

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
TABLE = ROOT / "cpp/src/cuda/emulation/loss_cases.inc"
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
    assert len(CASES) >= 10 and {c["op"] for c in CASES} >= {"laplacian", "op_arrays"}
    assert all(c["check"] in ("grad", "rows") for c in CASES)


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
        else:  # op_kappa
            out.update(a_pde=rng.normal(size=(n_pde, d, 2)), b_pde=-1.3 + 0.6j,
                       kappa=rng.uniform(1, 10, n_pde))
        if var == 0:
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
            out["g_bc"] = rng.normal(size=(n_bc, 2))
        else:
            out["alpha_bc"] = 0.3 - 2.1j
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


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
@pytest.mark.parametrize("d", sorted(SPECS))
def test_cuda_against_cpu(gpu, case, d, dtype, rng):
    DeviceArray = helmpinn._core.DeviceArray
    dev = lambda a: DeviceArray.from_host(np.ascontiguousarray(a, dtype=dtype))  # noqa: E731
    spec = SPECS[d]
    kw = inputs(case, d, rng, n=(45, 23, 31))
    h = {k: (np.ascontiguousarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v)
         for k, v in kw.items()}
    g = {k: (dev(v) if isinstance(v, np.ndarray) else v) for k, v in h.items()}
    theta = R.random_params(spec, rng, fourier_sigma=0.5).astype(dtype)
    th = dev(theta)
    cpu = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 16, dtype=dtype)
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 16, dtype=dtype, device="cuda")

    def close(a, b, what):
        a = a.copy_to_host() if isinstance(a, DeviceArray) else np.asarray(a)
        err = R.rel_err(a, b)
        assert err < TOL[dtype], f"{what}: GPU vs CPU relative error {err:.3e}"
        return a

    grad1, grad2 = dev(np.zeros(theta.size)), dev(np.zeros(theta.size))
    l1 = ws.value_and_grad(th, grad1, breakdown=True, **g)
    l2 = ws.value_and_grad(th, grad2, breakdown=True, **g)
    grad_cpu = np.empty_like(theta)
    l_cpu = cpu.value_and_grad(theta, grad_cpu, breakdown=True, **h)
    for k in ("total", "pde", "data", "bc"):
        assert getattr(l1, k) == pytest.approx(getattr(l_cpu, k), rel=TOL[dtype]), k
        assert getattr(l1, k) == getattr(l2, k)
    np.testing.assert_array_equal(close(grad1, grad_cpu, "gradient"), grad2.copy_to_host())
    if case["check"] == "rows":
        close(ws.residuals(th, **g), cpu.residuals(theta, **h), "residuals")
        J = close(ws.jacobian(th, **g), cpu.jacobian(theta, **h), "jacobian")
        a, b = 3, min(J.shape[0], 70)
        np.testing.assert_array_equal(ws.jacobian(th, rows=(a, b), **g).copy_to_host(), J[a:b])
        v = rng.normal(size=theta.size).astype(dtype)
        w = rng.normal(size=J.shape[0]).astype(dtype)
        close(ws.jvp(th, dev(v), **g), cpu.jvp(theta, v, **h), "jvp")
        close(ws.vjp(th, dev(w), **g), cpu.vjp(theta, w, **h), "vjp")
