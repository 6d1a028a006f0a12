"""Levenberg-Marquardt (helmpinn.lm): the step against dense NumPy normal equations, the three
solvers against each other, convergence on a tiny problem, rejected and non-finite steps."""
import math

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.lm import CoreResiduals, FunctionResiduals, LevenbergMarquardt, NonFiniteLoss
from helmpinn.trainer import relative_l2

K = 5.0
WEIGHTS = {"pde": 1 / K**2, "data": 100.0, "bc": 100 / K**2}


def tiny(n_pde=60, hidden=8, dtype="float64", seed=0):
    """plane1d (k = 5) on a one-layer network: P = 94 parameters, R = 2 (n_pde + 2) residuals."""
    prob = hp.get_problem("plane1d", k=K)
    spec = hp.ModelSpec(1, 4, hidden, 1)
    theta = hp.init_params(spec, dtype=dtype, seed=seed, fourier_sigma=K / (2 * math.pi))
    ws = hp.Workspace(spec, 64, dtype=dtype)
    batch = prob.sample(n_pde, 2, rng=seed, method="sobol").to_core(dtype)
    return prob, spec, theta, CoreResiduals(ws, batch, WEIGHTS)


def test_residuals_match_the_loss_and_gradient():
    _, _, theta, res = tiny()
    r = res.residuals(theta)
    J = res.jacobian(theta)
    assert r.shape == (res.num_residuals,) and J.shape == (res.num_residuals, res.num_params)
    grad = np.empty_like(theta)
    loss = res.workspace.value_and_grad(theta, grad, **res.kw)
    assert r @ r == pytest.approx(loss, rel=1e-13)
    np.testing.assert_allclose(2 * J.T @ r, grad, rtol=0, atol=1e-12 * np.abs(grad).max())
    np.testing.assert_array_equal(res.jacobian(theta, rows=(10, 20)), J[10:20])
    v = np.random.default_rng(1).standard_normal(res.num_params)
    w = np.random.default_rng(2).standard_normal(res.num_residuals)
    np.testing.assert_allclose(res.jvp(theta, v), J @ v, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.vjp(theta, w), J.T @ w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("damping", ["marquardt", "identity"])
def test_step_equals_dense_normal_equations(damping):
    _, _, theta, res = tiny()
    assert res.num_residuals >= res.num_params
    lm = LevenbergMarquardt(res, solver="primal", damping=damping, chunk_rows=7)  # chunks of odd size
    lam = 1e-3
    sol = lm.solve(theta, lam)
    J, r = res.jacobian(theta), res.residuals(theta)
    D = np.diag(J.T @ J) if damping == "marquardt" else np.ones(res.num_params)
    expected = np.linalg.solve(J.T @ J + lam * np.diag(D), J.T @ r)
    np.testing.assert_allclose(sol.delta, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
    assert sol.method == "cholesky"
    # the predicted decrease is that of the linear model
    assert sol.predicted == pytest.approx(r @ r - np.sum((r - J @ sol.delta) ** 2), rel=1e-8)


@pytest.mark.parametrize("n_pde", [60, 20])   # R >= P and R < P
@pytest.mark.parametrize("damping", ["marquardt", "identity"])
def test_primal_dual_and_matrix_free_give_the_same_step(n_pde, damping):
    _, _, theta, res = tiny(n_pde=n_pde)
    lam = 1e-2
    steps = {}
    for solver in ("primal", "dual", "cg"):
        lm = LevenbergMarquardt(res, solver=solver, damping=damping, cg_tol=1e-12, cg_maxiter=2000)
        steps[solver] = lm.solve(theta, lam)
    ref = steps["primal"].delta
    scale = np.abs(ref).max()
    np.testing.assert_allclose(steps["dual"].delta, ref, rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(steps["cg"].delta, ref, rtol=0, atol=1e-6 * scale)
    assert steps["cg"].method == "cg" and steps["cg"].cg_iterations > 1
    for s in steps.values():
        assert s.predicted == pytest.approx(steps["primal"].predicted, rel=1e-6)


def test_auto_solver_picks_by_shape():
    _, _, _, res = tiny(n_pde=60)
    assert LevenbergMarquardt(res).solver == "primal"
    _, _, _, res = tiny(n_pde=20)
    assert LevenbergMarquardt(res).solver == "dual"
    assert LevenbergMarquardt(res, max_matrix_bytes=8 * 10 * 10).solver == "cg"


@pytest.mark.parametrize("solver", ["primal", "dual", "cg"])
def test_reaches_a_small_error_in_bounded_iterations(solver):
    prob, spec, theta, res = tiny(n_pde=60 if solver != "dual" else 40)
    model = hp.Model(spec, theta)
    x = prob.test_points(200)
    u = prob.exact_at(x)
    err0 = relative_l2(model.predict(x), u)
    lm = LevenbergMarquardt(res, solver=solver, damping="identity", cg_tol=1e-10, cg_maxiter=1000)
    for _ in range(25):
        lm.step(model.params)
    err = relative_l2(model.predict(x), u)
    assert err0 > 0.5 and err < 1e-3, (err0, err)


def atan_problem():
    # r(x) = atan(x): from x = 2 the undamped Gauss-Newton step overshoots to |x| > 2.
    return FunctionResiduals(lambda x: np.arctan(x), lambda x: np.diag(1.0 / (1.0 + x**2)), 1, 1)


def test_rejected_step_leaves_parameters_unchanged():
    lm = LevenbergMarquardt(atan_problem(), lam=1e-12, max_trials=1, damping="marquardt")
    theta = np.array([2.0])
    info = lm.step(theta)
    assert not info.accepted and info.trials == 1 and info.rho < 0
    assert theta[0] == 2.0 and info.new_loss == info.loss
    assert lm.lam > 1e-12 * 1.5                      # damping went up
    iters = lm.iterations
    for _ in range(30):                              # the same Jacobian until a step is accepted
        info = lm.step(theta)
        if info.accepted:
            break
    assert info.accepted and abs(theta[0]) < 2.0
    assert lm.iterations == iters


def test_non_finite_trial_is_rejected():
    # r(x) = sqrt(x) - 0.1: the Gauss-Newton step from x = 1 lands at x < 0 (NaN)
    res = FunctionResiduals(lambda x: np.sqrt(x) - 0.1, lambda x: np.diag(0.5 / np.sqrt(x)), 1, 1)
    lm = LevenbergMarquardt(res, lam=1e-12, damping="identity")
    theta = np.array([1.0])
    with np.errstate(invalid="ignore"):
        info = lm.step(theta)
    assert info.accepted and info.trials > 1 and 0 < theta[0] < 1


def test_non_finite_loss_stops_and_keeps_parameters():
    _, _, theta, res = tiny()
    bad = theta.copy()
    bad[5] = np.nan
    lm = LevenbergMarquardt(res)
    with pytest.raises(NonFiniteLoss, match="non-finite loss"):
        lm.step(bad)
    assert np.isnan(bad[5]) and np.array_equal(np.delete(bad, 5), np.delete(theta, 5))


def test_float32_model_accumulates_in_float64():
    _, _, theta, res = tiny(dtype="float32")
    lm = LevenbergMarquardt(res, solver="primal")
    sol = lm.solve(theta, 1e-3)
    assert sol.delta.dtype == np.float64
    before = res.residuals(theta).astype(np.float64)
    info = lm.step(theta)
    assert theta.dtype == np.float32 and info.accepted and info.new_loss < before @ before


@pytest.mark.parametrize("kwargs, match", [
    ({"solver": "qr"}, "solver must be one of"),
    ({"damping": "none"}, "damping must be one of"),
    ({"lam": 0.0}, "lam must be a positive"),
    ({"lam": math.nan}, "lam must be a positive"),
    ({"lam_min": 1.0, "lam_max": 0.5}, "lam_min <= lam_max"),
    ({"max_trials": 0}, "max_trials"),
    ({"chunk_rows": 0}, "chunk_rows"),
    ({"cg_tol": 2.0}, "cg_tol"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LevenbergMarquardt(atan_problem(), **kwargs)


def test_bad_theta():
    lm = LevenbergMarquardt(atan_problem())
    with pytest.raises(ValueError, match="theta must be"):
        lm.step(np.zeros(3))


def test_state_round_trip():
    lm = LevenbergMarquardt(atan_problem(), damping="identity")
    theta = np.array([2.0])
    lm.step(theta)
    other = LevenbergMarquardt(atan_problem(), damping="identity")
    other.load_state_dict(lm.state_dict())
    assert other.lam == lm.lam and other.iterations == lm.iterations
    with pytest.raises(ValueError, match="lm_lambda"):
        other.load_state_dict({"lm_lambda": -1.0})
