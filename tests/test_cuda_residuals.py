"""Issue 11 on a GPU: the residual level of a device="cuda" Workspace against the CPU backend.

Each operation (residuals; jacobian whole and by row ranges that cross tiles and terms; jvp;
vjp; value_and_grad's grad_kappa, breakdown and global counts; frozen Fourier features) on
helmpinn DeviceArrays, in d = 1, 2, 3, float32 and float64, with the activation buffers in
shared memory and in global scratch, compared with the CPU backend on the same inputs
(float64: relative error < 1e-11; float32: < 1e-4). Row ranges are bitwise the rows of the
whole Jacobian, and two runs of jvp / vjp are bitwise identical.

Without a GPU these tests skip with the reason, and FAIL instead when HELMPINN_REQUIRE_GPU=1.
The same kernels are checked on any machine under the CPU emulation of CUDA
(tests/test_cuda.py, test_cuda_kernels_under_cpu_emulation).
"""

from __future__ import annotations


import numpy as np
import pytest

import helmpinn
import reference as R

DeviceArray = helmpinn._core.DeviceArray
TOL = {"float64": 1e-11, "float32": 1e-4}


def dev(a, dtype=None):
    a = np.asarray(a)
    return DeviceArray.from_host(np.ascontiguousarray(a, dtype=dtype or a.dtype))


def host(a) -> np.ndarray:
    return a.copy_to_host() if isinstance(a, DeviceArray) else np.asarray(a)


def split(terms: dict, dtype) -> tuple[dict, dict]:
    """The inputs as host arrays and as device arrays of dtype (scalars unchanged)."""
    h = {k: (np.ascontiguousarray(v, dtype=dtype) if isinstance(v, np.ndarray) else v)
         for k, v in terms.items()}
    return h, {k: (dev(v) if isinstance(v, np.ndarray) else v) for k, v in h.items()}


def close(a, b, dtype, what):
    err = R.rel_err(host(a), b)
    assert err < TOL[dtype], f"{what}: GPU vs CPU relative error {err:.3e}"


@pytest.fixture(params=["shared", "global"])
def scratch(request, monkeypatch):
    """Activation buffers in shared memory (the default) or in global scratch."""
    if request.param == "global":
        monkeypatch.setenv("HELMPINN_CUDA_SCRATCH", "global")
    return request.param


def _pair(spec_tuple, dtype, batch=32):
    spec = helmpinn.ModelSpec(*spec_tuple)
    return (helmpinn.Workspace(spec, batch, dtype=dtype),
            helmpinn.Workspace(spec, batch, dtype=dtype, device="cuda"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("train_fourier", [True, False], ids=["B-trained", "B-frozen"])
def test_residual_level_matches_cpu(gpu, scratch, spec_tuple, rng, make_inputs, dtype,
                                    train_fourier):
    d, m = spec_tuple[:2]
    terms = make_inputs(d, n_pde=45, n_data=23, n_bc=31, kappa="array", alpha="array",
                        weights=(0.7, 1.9, 0.35))
    terms["train_fourier"] = train_fourier
    h, g = split(terms, dtype)
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.5).astype(dtype)
    th = dev(theta)
    cpu, ws = _pair(spec_tuple, dtype)

    r = ws.residuals(th, **g)
    assert isinstance(r, DeviceArray)
    r_cpu = cpu.residuals(theta, **h)
    close(r, r_cpu, dtype, "residuals")
    Rn = r_cpu.size

    J = host(ws.jacobian(th, **g))
    J_cpu = cpu.jacobian(theta, **h)
    assert J.shape == J_cpu.shape == (Rn, theta.size)
    close(J, J_cpu, dtype, "jacobian")
    if not train_fourier:
        assert np.all(J[:, : d * m] == 0.0)
    b1 = 2 * 45
    for a, b in [(0, 1), (Rn - 1, Rn), (3, Rn - 2), (b1 - 5, b1 + 9), (Rn // 2, Rn // 2)]:
        out = dev(np.full((b - a, theta.size), np.nan, dtype=dtype))
        res = ws.jacobian(th, rows=(a, b), out=out, **g)
        assert res is out
        np.testing.assert_array_equal(host(out), J[a:b], err_msg=f"rows ({a}, {b})")

    v = rng.normal(size=theta.size).astype(dtype)
    w = rng.normal(size=Rn).astype(dtype)
    jv1, jv2 = host(ws.jvp(th, dev(v), **g)), host(ws.jvp(th, dev(v), **g))
    close(jv1, cpu.jvp(theta, v, **h), dtype, "jvp")
    np.testing.assert_array_equal(jv1, jv2)
    jw1, jw2 = host(ws.vjp(th, dev(w), **g)), host(ws.vjp(th, dev(w), **g))
    close(jw1, cpu.vjp(theta, w, **h), dtype, "vjp")
    np.testing.assert_array_equal(jw1, jw2)

    # value_and_grad: grad_kappa and the breakdown in the same call; 2 J^T r is the gradient
    grad, gk = dev(np.full(theta.size, 5.0, dtype)), dev(np.full(45, 5.0, dtype))
    loss = ws.value_and_grad(th, grad, grad_kappa=gk, breakdown=True, **g)
    grad_cpu, gk_cpu = np.empty_like(theta), np.empty(45, dtype)
    loss_cpu = cpu.value_and_grad(theta, grad_cpu, grad_kappa=gk_cpu, breakdown=True, **h)
    for k in ("total", "pde", "data", "bc"):
        assert getattr(loss, k) == pytest.approx(getattr(loss_cpu, k), rel=TOL[dtype]), k
    close(grad, grad_cpu, dtype, "value_and_grad grad")
    close(gk, gk_cpu, dtype, "grad_kappa")
    if dtype == "float64":
        r_h = host(r)
        assert r_h @ r_h == pytest.approx(loss.total, rel=1e-12)
        close(2 * J.T @ r_h, host(grad), dtype, "2 J^T r vs gradient")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_counts_on_gpu(gpu, rng, make_inputs, dtype):
    """Global counts: the CUDA workspace divides by them as the CPU one does."""
    spec = (2, 4, 6, 2)
    terms = make_inputs(2, n_pde=40, n_data=17, n_bc=23, kappa="array", alpha="array")
    counts = {"pde": 57, "data": 17, "bc": 100}
    h, g = split(terms, dtype)
    theta = R.random_params(spec, rng).astype(dtype)
    cpu, ws = _pair(spec, dtype, batch=16)
    grad = dev(np.zeros(theta.size, dtype))
    loss = ws.value_and_grad(dev(theta), grad, counts=counts, **g)
    grad_cpu = np.empty_like(theta)
    assert loss == pytest.approx(cpu.value_and_grad(theta, grad_cpu, counts=counts, **h),
                                 rel=TOL[dtype])
    close(grad, grad_cpu, dtype, "grad with counts")
    close(ws.residuals(dev(theta), counts=counts, **g), cpu.residuals(theta, counts=counts, **h),
          dtype, "residuals with counts")
    close(ws.jacobian(dev(theta), counts=counts, **g), cpu.jacobian(theta, counts=counts, **h),
          dtype, "jacobian with counts")


def test_wide_network_rows_on_gpu(gpu, rng, make_inputs):
    """A config-b-like network in float64: small rows tiles in shared memory, chunks of 64."""
    spec = (2, 32, 128, 3)
    terms = make_inputs(2, n_pde=150, n_data=40, n_bc=60, kappa="array", alpha="array")
    h, g = split(terms, "float64")
    theta = R.random_params(spec, rng, fourier_sigma=0.5)
    cpu, ws = _pair(spec, "float64", batch=64)
    Rn = 2 * (150 + 40 + 60)
    J = host(ws.jacobian(dev(theta), rows=(100, 400), **g))
    close(J, cpu.jacobian(theta, rows=(100, 400), **h), "float64", "jacobian rows")
    v = rng.normal(size=theta.size)
    close(ws.jvp(dev(theta), dev(v), **g), cpu.jvp(theta, v, **h), "float64", "jvp")
    w = rng.normal(size=Rn)
    close(ws.vjp(dev(theta), dev(w), **g), cpu.vjp(theta, w, **h), "float64", "vjp")
