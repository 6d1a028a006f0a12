"""The residual level of a device="cuda" Workspace on a GPU, against the CPU backend, where the
loss-case table does not reach: global counts given for all three terms at once, with
per-point kappa and alpha (value_and_grad, residuals, jacobian), and a config-b-like wide
network (2, 32, 128, 3) in float64 whose Jacobian rows, jvp and vjp run in small rows tiles and
chunks of 64 (float64: relative error < 1e-11; float32: < 1e-4).

Every loss case at the residual level (residuals; the Jacobian whole and by row ranges across
the terms; jvp, vjp bitwise twice; value_and_grad's grad_kappa and breakdown; frozen Fourier
features; activation buffers in shared memory and in global scratch) is in the table
cpp/tests/cuda/loss_cases.inc, run on a GPU by tests/test_backend_cases.py
(test_cuda_against_cpu). The helpers here (dev, host, split, close, TOL) are also
tests/test_cuda_operator.py's.

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


def _pair(spec_tuple, dtype, batch=32):
    spec = helmpinn.ModelSpec(*spec_tuple)
    return (helmpinn.Workspace(spec, batch, dtype=dtype),
            helmpinn.Workspace(spec, batch, dtype=dtype, device="cuda"))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_counts_on_gpu(gpu, rng, make_inputs, dtype):
    """Global counts: the CUDA workspace divides by them as the CPU one does."""
    spec = (2, 4, 6, 2)
    terms = make_inputs(2, n_pde=40, n_data=17, n_bc=23, kappa="array", alpha="array")
    counts = {"pde": 57, "data": 34, "bc": 100}
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
