"""The general diagonal operator (a_pde, b_pde, c_pde; MATH.md, General operator) on a GPU: a
device="cuda" Workspace against the CPU backend on the same inputs, d = 1, 2, 3, float32 and
float64, activation buffers in shared memory and in global scratch (float64: relative error
< 1e-11; float32: < 1e-4): value_and_grad (loss, breakdown, gradient, grad_kappa = dL/d Re c),
residuals, the Jacobian whole and by row ranges (bitwise the rows of the whole), jvp and vjp
(bitwise twice), per-point and constant coefficients, several chunks; and the Helmholtz case
a = 1, b = 0, c = kappa against the CUDA Laplacian path.

Its points carry 2d + 1 streams in buffers planned for the Laplacian's d + 2 (smaller tiles and
chunks; cpp/src/cuda/cuda_backend.cuh, plan_operator). Without a GPU these tests skip with the
reason, and FAIL instead when HELMPINN_REQUIRE_GPU=1; the same kernels are checked on any machine
under the CPU emulation of CUDA (tests/test_cuda.py, test_cuda_kernels_under_cpu_emulation).
"""

from __future__ import annotations

import numpy as np
import pytest

import helmpinn
import reference as R
from test_cuda_residuals import TOL, DeviceArray, close, dev, host, split
from test_operator import _operator_inputs


def _pair(spec_tuple, dtype, batch):
    spec = helmpinn.ModelSpec(*spec_tuple)
    return (helmpinn.Workspace(spec, batch, dtype=dtype),
            helmpinn.Workspace(spec, batch, dtype=dtype, device="cuda"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("c", ["array", "complex", "kappa"])
def test_operator_matches_cpu(gpu, scratch, spec_tuple, d, rng, dtype, c):
    # 45 PDE points in chunks of 16 (the operator's chunks are smaller still for d > 1)
    terms = _operator_inputs(rng, d, n_pde=45, n_data=11, n_bc=13, c=c)
    h, g = split(terms, dtype)
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.4).astype(dtype)
    th = dev(theta)
    cpu, ws = _pair(spec_tuple, dtype, batch=16)

    grad, gk = dev(np.full(theta.size, 5.0, dtype)), dev(np.full(45, 5.0, dtype))
    loss = ws.value_and_grad(th, grad, grad_kappa=gk, breakdown=True, **g)
    grad_cpu, gk_cpu = np.empty_like(theta), np.empty(45, dtype)
    loss_cpu = cpu.value_and_grad(theta, grad_cpu, grad_kappa=gk_cpu, breakdown=True, **h)
    for k in ("total", "pde", "data", "bc"):
        assert getattr(loss, k) == pytest.approx(getattr(loss_cpu, k), rel=TOL[dtype]), k
    close(grad, grad_cpu, dtype, "value_and_grad grad")
    close(gk, gk_cpu, dtype, "grad_kappa (dL/d Re c)")

    r = ws.residuals(th, **g)
    assert isinstance(r, DeviceArray)
    r_cpu = cpu.residuals(theta, **h)
    close(r, r_cpu, dtype, "residuals")
    Rn = r_cpu.size
    J = host(ws.jacobian(th, **g))
    close(J, cpu.jacobian(theta, **h), dtype, "jacobian")
    b1 = 2 * 45
    for a, b in [(0, 1), (5, 40), (b1 - 5, b1 + 9), (Rn - 3, Rn)]:
        out = dev(np.full((b - a, theta.size), np.nan, dtype=dtype))
        ws.jacobian(th, rows=(a, b), out=out, **g)
        np.testing.assert_array_equal(host(out), J[a:b], err_msg=f"rows ({a}, {b})")
    v = rng.normal(size=theta.size).astype(dtype)
    w = rng.normal(size=Rn).astype(dtype)
    jv1, jv2 = host(ws.jvp(th, dev(v), **g)), host(ws.jvp(th, dev(v), **g))
    close(jv1, cpu.jvp(theta, v, **h), dtype, "jvp")
    np.testing.assert_array_equal(jv1, jv2)
    jw1, jw2 = host(ws.vjp(th, dev(w), **g)), host(ws.vjp(th, dev(w), **g))
    close(jw1, cpu.vjp(theta, w, **h), dtype, "vjp")
    np.testing.assert_array_equal(jw1, jw2)
    if dtype == "float64":
        r_h = host(r)
        assert r_h @ r_h == pytest.approx(loss.total, rel=1e-12)
        close(2 * J.T @ r_h, host(grad), dtype, "2 J^T r vs gradient")


def test_operator_against_the_reference_on_gpu(gpu, spec_tuple, d, rng):
    """float64 residuals and loss of the CUDA workspace against the float64 NumPy reference."""
    terms = _operator_inputs(rng, d, n_pde=30)
    h, g = split(terms, "float64")
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.4)
    _, ws = _pair(spec_tuple, "float64", batch=32)
    ref = R.residuals(theta, spec_tuple, **terms)
    close(ws.residuals(dev(theta), **g), ref, "float64", "residuals vs reference")
    grad = dev(np.zeros(theta.size))
    assert ws.value_and_grad(dev(theta), grad, **g) == pytest.approx(ref @ ref, rel=1e-12)


def test_identity_operator_equals_the_laplacian_on_gpu(gpu, spec_tuple, d, rng, make_inputs):
    """a = 1, b = 0, c = kappa through the operator's 2d + 1 streams gives the CUDA Laplacian
    path's loss, gradient, grad_kappa and residuals."""
    terms = make_inputs(d, n_pde=40, n_data=9, n_bc=12, kappa="array")
    h, g = split(terms, "float64")
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.4)
    _, ws = _pair(spec_tuple, "float64", batch=16)
    th = dev(theta)
    g_lap, g_op = dev(np.zeros(theta.size)), dev(np.zeros(theta.size))
    k_lap, k_op = dev(np.zeros(40)), dev(np.zeros(40))
    l_lap = ws.value_and_grad(th, g_lap, grad_kappa=k_lap, **g)
    l_op = ws.value_and_grad(th, g_op, grad_kappa=k_op, a_pde=1 + 0j, b_pde=0j, **g)
    assert l_op == pytest.approx(l_lap, rel=1e-12)
    close(g_op, host(g_lap), "float64", "gradient")
    close(k_op, host(k_lap), "float64", "grad_kappa")
    close(ws.residuals(th, a_pde=1 + 0j, b_pde=0j, **g), host(ws.residuals(th, **g)), "float64",
          "residuals")
