"""The general diagonal operator r = sum_i a_i u_ii + sum_i b_i u_i + c u - f at the PDE points
(a_pde, b_pde, c_pde; MATH.md, General operator): the Helmholtz case against the Laplacian path,
random complex coefficients against the float64 reference, float64 central differences of the
core's own loss and residuals, and against finite differences of forward(), in d = 1, 2, 3; each
for both of its forms, an a per axis (a_pde) and one a per point (a_lap, the scalar form from the
Laplacian's streams), and the two forms against each other."""

from __future__ import annotations

import numpy as np
import pytest

import helmpinn
import reference as R


def _ws(spec_tuple, dtype="float64"):
    return helmpinn.Workspace(helmpinn.ModelSpec(*spec_tuple), 16, dtype=dtype)


def _theta(spec_tuple, rng):
    return R.random_params(spec_tuple, rng, fourier_sigma=0.4)


def _operator_inputs(rng, d, n_pde=7, n_data=3, n_bc=4, c="array", a="a_pde"):
    """Random complex per-point a, b, c (c: "array" [N, 2], "complex" constant, "kappa" real [N];
    a: "a_pde" one per axis [N, d, 2], "a_lap" one per point [N, 2]) with the data and Robin
    terms beside them."""
    x = rng.uniform(-1.0, 1.0, (n_pde, d))
    out = dict(x_pde=x, f=rng.normal(size=(n_pde, 2)), b_pde=rng.normal(size=(n_pde, d, 2)),
               w_pde=0.8)
    out[a] = rng.normal(size=(n_pde, d, 2) if a == "a_pde" else (n_pde, 2))
    if c == "array":
        out["c_pde"] = rng.normal(size=(n_pde, 2)) * 3.0
    elif c == "complex":
        out["c_pde"] = complex(rng.normal() * 3.0, rng.normal())
    else:
        out["kappa"] = rng.uniform(1.0, 10.0, n_pde)
    if n_data:
        out["x_data"] = rng.uniform(-1.0, 1.0, (n_data, d))
        out["y"] = rng.normal(size=(n_data, 2))
    if n_bc:
        nrm = rng.normal(size=(n_bc, d))
        out["x_bc"] = rng.uniform(-1.0, 1.0, (n_bc, d))
        out["n_bc"] = nrm / np.linalg.norm(nrm, axis=1, keepdims=True)
        out["alpha_bc"] = complex(0.0, -2.0)
    return out


@pytest.mark.parametrize("form", ["arrays", "constants"])
def test_identity_coefficients_equal_the_helmholtz_path(spec_tuple, d, rng, make_inputs, form):
    """a = 1, b = 0, c = kappa is the Laplacian residual: loss, gradient, residuals, grad_kappa."""
    terms = make_inputs(d, n_pde=9, n_data=3, n_bc=4, kappa="array")
    n = len(terms["x_pde"])
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    if form == "arrays":
        ones = np.zeros((n, d, 2))
        ones[..., 0] = 1.0
        op = dict(terms, a_pde=ones, b_pde=np.zeros((n, d, 2)),
                  c_pde=np.stack([terms.pop("kappa"), np.zeros(n)], axis=1))
        op.pop("kappa", None)
    else:
        op = dict(terms, a_pde=1 + 0j, b_pde=0j)  # kappa stands for a real c
    g_lap, g_op = np.zeros_like(theta), np.zeros_like(theta)
    gk_lap, gk_op = np.zeros(n), np.zeros(n)
    base = dict(terms)
    if "kappa" not in base:
        base["kappa"] = op["c_pde"][:, 0].copy()
    l_lap = ws.value_and_grad(theta, g_lap, grad_kappa=gk_lap, **base)
    l_op = ws.value_and_grad(theta, g_op, grad_kappa=gk_op, **op)
    assert abs(l_op - l_lap) <= 1e-12 * abs(l_lap)
    np.testing.assert_allclose(g_op, g_lap, rtol=0, atol=1e-12 * np.abs(g_lap).max())
    np.testing.assert_allclose(gk_op, gk_lap, rtol=0, atol=1e-12 * np.abs(gk_lap).max())
    r_lap, r_op = ws.residuals(theta, **base), ws.residuals(theta, **op)
    np.testing.assert_allclose(r_op, r_lap, rtol=0, atol=1e-12 * np.abs(r_lap).max())


@pytest.mark.parametrize("c", ["array", "complex", "kappa"])
@pytest.mark.parametrize("a", ["a_pde", "a_lap"])
def test_random_complex_coefficients_match_the_reference(spec_tuple, d, rng, c, a):
    terms = _operator_inputs(rng, d, c=c, a=a)
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    r = ws.residuals(theta, **terms)
    ref = R.residuals(theta, spec_tuple, **terms)
    np.testing.assert_allclose(r, ref, rtol=1e-12, atol=1e-12 * np.abs(ref).max())
    grad = np.zeros_like(theta)
    loss = ws.value_and_grad(theta, grad, **terms)
    assert np.isclose(loss, r @ r, rtol=1e-13, atol=0)
    g_fd = R.fd_grad(lambda th: R.loss(th, spec_tuple, **terms), theta)
    np.testing.assert_allclose(grad, g_fd, rtol=0, atol=2e-8 * np.abs(g_fd).max())


def test_gradient_against_central_differences_of_the_core(spec_tuple, d, rng):
    """The core's gradient against float64 central differences of the core's own loss, along
    random directions (independent of the reference)."""
    terms = _operator_inputs(rng, d)
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    grad = np.zeros_like(theta)
    ws.value_and_grad(theta, grad, **terms)
    scratch = np.zeros_like(theta)
    for _ in range(4):
        v = rng.normal(size=theta.size)
        h = 1e-5
        lp = ws.value_and_grad(theta + h * v, scratch, **terms)
        lm = ws.value_and_grad(theta - h * v, scratch, **terms)
        fd = (lp - lm) / (2 * h)
        assert abs(fd - grad @ v) <= 1e-6 * max(abs(fd), np.abs(grad).max())


@pytest.mark.parametrize("a", ["a_pde", "a_lap"])
def test_jacobian_jvp_vjp(spec_tuple, d, rng, a):
    terms = _operator_inputs(rng, d, a=a)
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    J = ws.jacobian(theta, **terms)
    J_fd = R.fd_jacobian(lambda th: R.residuals(th, spec_tuple, **terms), theta)
    scale = np.max(np.abs(J_fd))
    assert np.max(np.abs(J - J_fd)) <= 1e-7 * scale
    # row ranges: the PDE block alone, and rows straddling PDE and data points
    np.testing.assert_array_equal(ws.jacobian(theta, rows=(3, 17), **terms), J[3:17])
    r = ws.residuals(theta, **terms)
    grad = np.zeros_like(theta)
    ws.value_and_grad(theta, grad, **terms)
    np.testing.assert_allclose(2 * J.T @ r, grad, rtol=0, atol=1e-12 * np.abs(grad).max())
    v = rng.normal(size=theta.size)
    w = rng.normal(size=r.size)
    np.testing.assert_allclose(ws.jvp(theta, v, **terms), J @ v, rtol=0,
                               atol=1e-12 * np.abs(J @ v).max())
    np.testing.assert_allclose(ws.vjp(theta, w, **terms), J.T @ w, rtol=0,
                               atol=1e-12 * np.abs(J.T @ w).max())


@pytest.mark.parametrize("a", ["a_pde", "a_lap"])
def test_residuals_against_finite_differences_of_forward(spec_tuple, d, rng, a):
    """The operator residual rebuilt from forward() values by central differences in x."""
    terms = _operator_inputs(rng, d, n_data=0, n_bc=0, a=a)
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    x = terms["x_pde"]
    n = len(x)
    cplx = lambda p: p[..., 0] + 1j * p[..., 1]  # noqa: E731
    u = lambda pts: cplx(ws.forward(theta, np.ascontiguousarray(pts), 0))  # noqa: E731
    u0 = u(x)
    b = cplx(terms["b_pde"])
    a = cplx(terms["a_pde"]) if a == "a_pde" else np.repeat(cplx(terms["a_lap"])[:, None], d, axis=1)
    r = cplx(terms["c_pde"]) * u0 - cplx(terms["f"])
    h = 1e-3  # fourth-order central stencils
    for i in range(d):
        e = np.zeros(d)
        e[i] = h
        up, um, up2, um2 = u(x + e), u(x - e), u(x + 2 * e), u(x - 2 * e)
        uii = (-up2 + 16 * up - 30 * u0 + 16 * um - um2) / (12 * h**2)
        ui = (8 * (up - um) - (up2 - um2)) / (12 * h)
        r = r + a[:, i] * uii + b[:, i] * ui
    got = ws.residuals(theta, **terms) / np.sqrt(terms["w_pde"] / n)
    got = got[0::2] + 1j * got[1::2]
    assert np.max(np.abs(got - r)) <= 1e-5 * np.max(np.abs(r))


@pytest.mark.parametrize("a", ["a_pde", "a_lap"])
def test_float32_agrees_with_float64(spec_tuple, d, rng, a):
    terms = _operator_inputs(rng, d, a=a)
    theta = _theta(spec_tuple, rng)
    g64, g32 = np.zeros_like(theta), np.zeros(theta.size, np.float32)
    l64 = _ws(spec_tuple).value_and_grad(theta, g64, **terms)
    t32 = {k: (np.ascontiguousarray(v, np.float32) if isinstance(v, np.ndarray) else v)
           for k, v in terms.items()}
    l32 = _ws(spec_tuple, "float32").value_and_grad(theta.astype(np.float32), g32, **t32)
    assert abs(l32 - l64) <= 1e-4 * l64
    assert np.max(np.abs(g32 - g64)) <= 1e-3 * np.abs(g64).max()


@pytest.mark.parametrize("a_const", [False, True])
def test_scalar_form_equals_the_diagonal_form(spec_tuple, d, rng, a_const):
    """One a per point (a_lap: d + 2 streams; or a constant a_pde, which selects the same form)
    against the same a on every axis (a_pde [N, d, 2]: 2d + 1 streams): loss, gradient,
    grad_kappa (dL/d Re c), residuals, Jacobian (whole and a row range), J v and J^T w agree to
    rounding."""
    terms = _operator_inputs(rng, d, a="a_lap")
    n = len(terms["x_pde"])
    if a_const:
        terms["a_lap"] = np.tile([0.7, -0.35], (n, 1))
    scalar = dict(terms)
    if a_const:
        scalar["a_pde"] = complex(*terms["a_lap"][0])
        del scalar["a_lap"]
    diag = dict(terms, a_pde=np.repeat(terms["a_lap"][:, None, :], d, axis=1))
    del diag["a_lap"]
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)

    def close(got, want, what):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * np.abs(want).max(), err_msg=what)

    g_s, g_d, k_s, k_d = np.zeros_like(theta), np.zeros_like(theta), np.zeros(n), np.zeros(n)
    l_s = ws.value_and_grad(theta, g_s, grad_kappa=k_s, **scalar)
    l_d = ws.value_and_grad(theta, g_d, grad_kappa=k_d, **diag)
    assert abs(l_s - l_d) <= 1e-12 * l_d
    close(g_s, g_d, "gradient")
    close(k_s, k_d, "grad_kappa")
    close(ws.residuals(theta, **scalar), ws.residuals(theta, **diag), "residuals")
    J = ws.jacobian(theta, **diag)
    close(ws.jacobian(theta, **scalar), J, "jacobian")
    close(ws.jacobian(theta, rows=(3, 11), **scalar), J[3:11], "jacobian rows")
    v, w = rng.normal(size=theta.size), rng.normal(size=len(J))
    close(ws.jvp(theta, v, **scalar), J @ v, "jvp")
    close(ws.vjp(theta, w, **scalar), J.T @ w, "vjp")


def test_operator_a_picks_the_scalar_form_where_every_axis_is_alike():
    from helmpinn.problems.batch import operator_a

    a = np.array([[1 + 2j, 1 + 2j], [0.5, 0.5], [3j, 3j]])
    got = operator_a(a)
    assert list(got) == ["a_lap"]
    np.testing.assert_array_equal(got["a_lap"], a[:, 0])
    b = a.copy()
    b[1, 1] = 0.5 + 1e-15   # not equal: the diagonal form, exactly as given
    assert list(operator_a(b)) == ["a_pde"] and operator_a(b)["a_pde"] is not None
    np.testing.assert_array_equal(operator_a(b)["a_pde"], b)
    assert list(operator_a(np.ones((4, 1)))) == ["a_lap"]   # d = 1: one axis
    with pytest.raises(ValueError, match=r"a: expected .* \[N, d\]"):
        operator_a(np.ones(4))


def test_bad_operator_arguments_name_the_argument():
    spec = (2, 4, 6, 2)
    ws = _ws(spec)
    rng = np.random.default_rng(0)
    theta = _theta(spec, rng)
    grad = np.zeros_like(theta)
    x = rng.uniform(size=(5, 2))
    with pytest.raises(ValueError, match="a_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde=np.zeros((5, 3, 2)), c_pde=1j)
    with pytest.raises(ValueError, match="b_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, b_pde=np.zeros((4, 2, 2)), kappa=1.0)
    with pytest.raises(ValueError, match="c_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde=1.0, c_pde=np.zeros((5, 3)))
    with pytest.raises(ValueError, match="c_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde=1.0)  # neither c_pde nor kappa
    with pytest.raises(ValueError, match="c_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, c_pde=1.0, kappa=1.0)
    with pytest.raises(ValueError, match="a_pde: given without x_pde"):
        ws.value_and_grad(theta, grad, a_pde=1.0, x_data=x, y=np.zeros((5, 2)))
    with pytest.raises(TypeError, match="a_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde="one", kappa=1.0)
    bad = np.zeros((5, 2, 2))
    bad[2, 1, 0] = np.nan
    with pytest.raises(ValueError, match="a_pde contains NaN"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde=bad, kappa=1.0, check_finite=True)
    with pytest.raises(ValueError, match="a_lap: given together with a_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde=1.0, a_lap=np.ones((5, 2)), kappa=1.0)
    with pytest.raises(ValueError, match="a_lap: given together with a_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_pde=np.ones((5, 2, 2)), a_lap=np.ones((5, 2)), kappa=1.0)
    with pytest.raises(ValueError, match="a_lap"):
        ws.value_and_grad(theta, grad, x_pde=x, a_lap=np.ones((5, 2, 2)), kappa=1.0)   # [N, d, 2]
    with pytest.raises(ValueError, match="a_lap"):
        ws.value_and_grad(theta, grad, x_pde=x, a_lap=np.ones((4, 2)), kappa=1.0)
    with pytest.raises(ValueError, match="c_pde: required with a_pde, a_lap or b_pde"):
        ws.value_and_grad(theta, grad, x_pde=x, a_lap=np.ones((5, 2)))
    bad = np.ones((5, 2))
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="a_lap contains NaN or Inf"):
        ws.value_and_grad(theta, grad, x_pde=x, a_lap=bad, kappa=1.0, check_finite=True)
    assert np.all(grad == 0)  # nothing written on any error
