"""The float64 reference checked on its own: layout, derivatives in x against finite differences
and the complex step, the loss against a plain complex-arithmetic evaluation, and its
finite-difference gradient against the complex-step gradient."""

from __future__ import annotations

import numpy as np
import pytest

import reference as R


def test_layout_is_contiguous_and_in_documented_order():
    spec = (2, 3, 5, 3)
    lay = R.layout(spec)
    assert [name for name, _, _ in lay] == ["B", "W0", "b0", "W1", "b1", "W2", "b2", "W3", "b3"]
    shapes = dict((name, shape) for name, shape, _ in lay)
    assert shapes["B"] == (2, 3) and shapes["W0"] == (5, 6) and shapes["W1"] == (5, 5)
    assert shapes["W3"] == (2, 5) and shapes["b3"] == (2,)
    off = 0
    for _, shape, o in lay:
        assert o == off
        off += int(np.prod(shape))
    assert R.num_params(spec) == off == 2 * 3 + (5 * 6 + 5) + 2 * (5 * 5 + 5) + (2 * 5 + 2)
    theta = np.arange(off, dtype=np.float64)
    views = R.unpack(theta, spec)
    assert np.shares_memory(views["W1"], theta)
    assert views["W0"][1, 0] == 6 + 6  # row-major: W0[1, 0] is 2m = 6 past W0's start (6)


def _complex_step_x(fun, x, h=1e-30):
    """[N, d, ...]: Im fun(x + i h e_i) / h for each i (fun of complex x)."""
    n, d = x.shape
    outs = []
    for i in range(d):
        xc = x.astype(np.complex128)
        xc[:, i] += 1j * h
        outs.append(fun(xc).imag / h)
    return np.stack(outs, axis=1)


def test_grad_and_laplacian_in_x(spec_tuple, rng):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.7)
    x = rng.uniform(-1, 1, (17, d))
    u, du, lap = R.forward(theta, spec_tuple, x, 2)
    assert u.shape == (17, 2) and du.shape == (17, d, 2) and lap.shape == (17, 2)
    u0 = R.forward(theta, spec_tuple, x, 0)
    u1, du1 = R.forward(theta, spec_tuple, x, 1)
    np.testing.assert_array_equal(u0, u)
    np.testing.assert_array_equal(u1, u)
    np.testing.assert_array_equal(du1, du)

    ufun = lambda xx: R.forward(theta, spec_tuple, xx, 0)
    assert R.rel_err(du, R.fd_x_grad(ufun, x)) < 1e-9
    assert R.rel_err(lap, R.fd_x_lap(ufun, x)) < 1e-6

    # complex step: exact to rounding
    th = theta[None, :]
    cs_du = _complex_step_x(lambda xc: R.network(th, spec_tuple, xc, 0)[0], x)
    assert R.rel_err(du, cs_du) < 1e-13
    # Hessian = complex step of the Jacobian; Laplacian = its trace
    cs_hess = _complex_step_x(lambda xc: R.network(th, spec_tuple, xc, 1)[1][0], x)  # [N,i,j,2]
    hess = R.hessian(theta, spec_tuple, x)
    assert R.rel_err(hess, cs_hess) < 1e-12
    np.testing.assert_allclose(hess, np.swapaxes(hess, 1, 2), rtol=1e-12, atol=1e-12)
    assert R.rel_err(lap, np.einsum("nii...->n...", cs_hess)) < 1e-12


def test_batched_theta_matches_single(spec_tuple, rng):
    d = spec_tuple[0]
    thetas = np.stack([R.random_params(spec_tuple, rng) for _ in range(3)])
    x = rng.uniform(-1, 1, (5, d))
    u, du, hess = R.network(thetas, spec_tuple, x, 2)
    for k in range(3):
        uk, duk, lapk = R.forward(thetas[k], spec_tuple, x, 2)
        np.testing.assert_allclose(u[k], uk, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(du[k], duk, rtol=1e-14, atol=1e-14)
        np.testing.assert_allclose(np.einsum("nii...->n...", hess[k]), lapk, rtol=1e-13, atol=1e-13)


def test_layer_values_match_forward(spec_tuple, rng):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng)
    x = rng.uniform(-1, 1, (7, d))
    phi, zs, hs = R.layer_values(theta, spec_tuple, x)
    assert len(zs) == len(hs) == spec_tuple[3] + 1
    np.testing.assert_allclose(hs[-1], R.forward(theta, spec_tuple, x, 0), rtol=1e-14, atol=1e-14)
    np.testing.assert_array_equal(zs[-1], hs[-1])
    np.testing.assert_allclose(hs[0], np.tanh(zs[0]), rtol=0, atol=0)
    s = 2 * np.pi * x @ R.unpack(theta, spec_tuple)["B"]
    np.testing.assert_allclose(phi, np.concatenate([np.sin(s), np.cos(s)], 1), rtol=1e-15, atol=0)


def _loss_by_complex_numbers(theta, spec, t):
    """The loss written independently with numpy complex128 arithmetic."""
    total, parts = 0.0, {}
    u, du, lap = R.forward(theta, spec, t["x_pde"], 2)
    uc, lapc = u[:, 0] + 1j * u[:, 1], lap[:, 0] + 1j * lap[:, 1]
    f = t["f"][:, 0] + 1j * t["f"][:, 1] if t.get("f") is not None else 0
    r = lapc + np.asarray(t["kappa"]) * uc - f
    parts["pde"] = np.mean(np.abs(r) ** 2)
    u = R.forward(theta, spec, t["x_data"], 0)
    parts["data"] = np.mean(np.sum((u - t["y"]) ** 2, axis=1))
    u, du = R.forward(theta, spec, t["x_bc"], 1)
    uc = u[:, 0] + 1j * u[:, 1]
    dn = np.einsum("nj,njc->nc", t["n_bc"], du)
    a = t["alpha_bc"]
    ac = a[:, 0] + 1j * a[:, 1] if isinstance(a, np.ndarray) else complex(a)
    g = t["g_bc"][:, 0] + 1j * t["g_bc"][:, 1] if t.get("g_bc") is not None else 0
    rho = dn[:, 0] + 1j * dn[:, 1] + ac * uc - g
    parts["bc"] = np.mean(np.abs(rho) ** 2)
    total = t["w_pde"] * parts["pde"] + t["w_data"] * parts["data"] + t["w_bc"] * parts["bc"]
    return total, parts


@pytest.mark.parametrize("variant", ["scalar", "array"])
def test_loss_matches_complex_arithmetic(spec_tuple, make_inputs, rng, variant):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng)
    t = make_inputs(d, n_pde=9, n_data=7, n_bc=8, kappa=variant, alpha=variant,
                    f=variant == "array", g=variant == "array", weights=(0.7, 1.3, 0.4))
    total, parts = R.loss_terms(theta, spec_tuple, **t)
    e_total, e_parts = _loss_by_complex_numbers(theta, spec_tuple, t)
    assert np.isscalar(total) or np.ndim(total) == 0
    assert abs(total - e_total) <= 1e-13 * abs(e_total)
    for key in ("pde", "data", "bc"):
        assert abs(parts[key] - e_parts[key]) <= 1e-13 * abs(e_parts[key])
    # each term alone; absent terms are zero
    only_data = {k: t[k] for k in ("x_data", "y")}
    tot, p = R.loss_terms(theta, spec_tuple, **only_data)
    assert p["pde"] == 0 and p["bc"] == 0 and tot == pytest.approx(e_parts["data"], rel=1e-14)


def test_sommerfeld_scalar_equals_per_point_alpha(rng, make_inputs):
    spec = (2, 3, 5, 2)
    theta = R.random_params(spec, rng)
    t = make_inputs(2, n_bc=6, alpha="sommerfeld", g=False)
    k = -t["alpha_bc"].imag
    t_arr = dict(t, alpha_bc=np.tile([0.0, -k], (6, 1)))
    assert R.loss(theta, spec, **t) == pytest.approx(R.loss(theta, spec, **t_arr), rel=1e-15)
    # alpha = 0: Neumann, |n . grad u|^2 only
    u, du = R.forward(theta, spec, t["x_bc"], 1)
    dn = np.einsum("nj,njc->nc", t["n_bc"], du)
    t0 = dict(t, alpha_bc=0j)
    assert R.loss(theta, spec, **t0) == pytest.approx(np.mean(np.sum(dn**2, 1)), rel=1e-14)


@pytest.mark.parametrize("train_fourier", [True, False])
def test_fd_gradient_matches_complex_step(spec_tuple, make_inputs, rng, train_fourier):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng)
    t = make_inputs(d, n_pde=10, n_data=8, n_bc=9, kappa="array", alpha="array",
                    weights=(0.7, 1.3, 0.4))
    t["train_fourier"] = train_fourier
    g_cs = R.loss_grad_cs(theta, spec_tuple, **t)
    g_fd = R.loss_grad_fd(theta, spec_tuple, **t)
    assert R.rel_err(g_fd, g_cs) < 1e-9
    nb = d * spec_tuple[1]
    assert np.all(g_cs[:nb] == 0) == (not train_fourier)
    # the plain 3-point stencil at h = 1e-6 agrees too (looser: rounding)
    g_fd2 = R.loss_grad_fd(theta, spec_tuple, h_rel=1e-6, order=2, **t)
    assert R.rel_err(g_fd2, g_cs) < 1e-7


def test_fd_gradient_of_simple_function():
    # sanity of the stencil on a known function
    theta = np.array([0.3, -1.7, 4.0])
    fun = lambda t: np.sum(np.sin(t) * t**2, axis=-1)
    exact = np.cos(theta) * theta**2 + 2 * theta * np.sin(theta)
    assert R.rel_err(R.fd_grad(fun, theta), exact) < 1e-11
    assert R.rel_err(R.cs_grad(fun, theta), exact) < 1e-15


@pytest.mark.parametrize("terms", ["pde", "data", "both"])
def test_adjoint_route_matches_the_loss_and_its_complex_step(spec_tuple, make_inputs, rng, terms):
    """loss_and_grad (the streams' adjoint, what the benchmarks check against) gives the loss of
    `loss` and its complex-step gradient."""
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng)
    t = make_inputs(d, n_pde=11 if terms != "data" else 0, n_data=6 if terms != "pde" else 0,
                    kappa="scalar", f=True, weights=(0.7, 1.3, 1.0))
    t.pop("w_bc")
    value, grad = R.loss_and_grad(theta, spec_tuple, **t)
    assert value == pytest.approx(R.loss(theta, spec_tuple, **t), rel=1e-13)
    assert R.rel_err(grad, R.loss_grad_cs(theta, spec_tuple, **t)) < 1e-12
