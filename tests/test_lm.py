"""Levenberg-Marquardt (helmpinn.optim.lm): the step against dense NumPy normal equations, the three
solvers against each other, convergence on a tiny problem, rejected and non-finite steps."""
import json
import math
import warnings

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.optim import NonFiniteLoss, StepStatus
from helmpinn.optim.lm import CGSystem, CoreResiduals, FunctionResiduals, LevenbergMarquardt, _Trials, lm_defaults, lm_options
from helmpinn.training.trainer import relative_l2

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
    # JᵀJ in float32, its factor preconditioning CG on the float64 system
    lm = LevenbergMarquardt(res, solver="primal", damping=damping, gram="float32", refine_tol=1e-12)
    steps["float32"] = lm.solve(theta, lam)
    ref = steps["primal"].delta
    scale = np.abs(ref).max()
    np.testing.assert_allclose(steps["dual"].delta, ref, rtol=0, atol=1e-8 * scale)
    np.testing.assert_allclose(steps["cg"].delta, ref, rtol=0, atol=1e-6 * scale)
    # CG's residual 1e-12 times cond(JᵀJ + λD) ~ 1e6: the step to about 1e-7 (measured 4e-9, 2e-8)
    np.testing.assert_allclose(steps["float32"].delta, ref, rtol=0, atol=1e-7 * scale)
    assert steps["cg"].method == "cg" and steps["cg"].cg_iterations > 1
    assert steps["float32"].method == "cholesky+cg" and 1 <= steps["float32"].cg_iterations <= 8
    for s in steps.values():
        assert s.predicted == pytest.approx(steps["primal"].predicted, rel=1e-6)


def test_auto_solver_picks_by_shape():
    _, _, _, res = tiny(n_pde=60)
    assert LevenbergMarquardt(res).solver == "primal"
    _, _, _, res = tiny(n_pde=20)
    assert LevenbergMarquardt(res).solver == "dual"
    assert LevenbergMarquardt(res, max_matrix_bytes=8 * 10 * 10).solver == "cg"


@pytest.mark.parametrize("geodesic", [False, True])
@pytest.mark.parametrize("solver", ["primal", "dual", "cg", "primal-float32"])
def test_reaches_a_small_error_in_bounded_iterations(solver, geodesic):
    prob, spec, theta, res = tiny(n_pde=60 if solver != "dual" else 40)
    options = {}
    if solver == "primal-float32":   # JᵀJ in float32, preconditioning CG
        solver, options = "primal", {"gram": "float32"}
    model = hp.Model(spec, theta)
    x = prob.test_points(200)
    u = prob.exact_at(x)
    err0 = relative_l2(model.predict(x), u)
    lm = LevenbergMarquardt(res, solver=solver, damping="identity", geodesic=geodesic, cg_tol=1e-6,
                            cg_maxiter=300, **options)
    for _ in range(25):
        lm.step(model.params)
    err = relative_l2(model.predict(x), u)
    assert err0 > 0.5 and err < 1e-3, (err0, err)


@pytest.mark.parametrize("n_pde, solver, gram", [(60, "primal", "float64"), (20, "dual", "float64"),
                                                (60, "cg", "float64"), (60, "primal", "float32")])
def test_geodesic_trial_point_equals_dense_formula(n_pde, solver, gram):
    # θ − δ − a/2, (JᵀJ + λI) a = Jᵀ r_vv, r_vv the central second difference along δ (step h)
    _, _, theta, res = tiny(n_pde=n_pde)
    lam, h = 100.0, 0.1   # mean diag(JᵀJ) ~ 124: a short step on a slightly bent path
    J, r = res.jacobian(theta), res.residuals(theta)
    M = J.T @ J + lam * np.eye(res.num_params)
    delta = np.linalg.solve(M, J.T @ r)
    r_vv = (res.residuals(theta + h * delta) - 2 * r + res.residuals(theta - h * delta)) / h**2
    acc = np.linalg.solve(M, J.T @ r_vv)
    assert 2 * np.linalg.norm(acc) <= 0.75 * np.linalg.norm(delta)  # the accelerated branch is taken
    expected = theta - delta - 0.5 * acc
    lm = LevenbergMarquardt(res, solver=solver, damping="identity", geodesic=True, geodesic_h=h,
                            cg_tol=1e-13, cg_maxiter=3000, gram=gram, refine_tol=1e-13)
    lm.lam, lm._lam_relative = lam, False
    system = _Trials(lm, lm.linearize(theta), theta.dtype, {"solve": 0.0})
    before = lm.evaluations
    trial = lm._accelerate(system, system.solve(lam), theta.astype(np.float64))
    assert lm.evaluations - before == 2
    tol = 1e-7 if solver == "cg" or gram == "float32" else 1e-10
    np.testing.assert_allclose(trial, expected, rtol=0, atol=tol * np.abs(theta - expected).max())
    plain = LevenbergMarquardt(res, solver=solver, damping="identity", cg_tol=1e-13, cg_maxiter=3000)
    assert np.abs(plain.solve(theta, lam).delta - delta).max() < tol * np.abs(delta).max()


def test_geodesic_falls_back_to_the_plain_step_when_the_acceleration_is_large():
    # r = (x1 − x0², x1): the path bends strongly at x = (3, 0), so 2‖a‖ > 0.75 ‖δ‖ for small λ
    res = FunctionResiduals(lambda x: np.array([x[1] - x[0] ** 2, x[1]]),
                            lambda x: np.array([[-2 * x[0], 1.0], [0.0, 1.0]]), 2, 2)
    theta = np.array([3.0, 0.0])
    lm = LevenbergMarquardt(res, solver="primal", damping="identity", lam=1e-12, geodesic=True)
    lm._lam_relative = False
    system = _Trials(lm, lm.linearize(theta), theta.dtype, {"solve": 0.0})
    d = system.solve(lm.lam)
    trial = lm._accelerate(system, d, theta.copy())
    np.testing.assert_array_equal(trial, theta - d.delta)


def rosenbrock_problem():
    # r = (10 (x1 − x0²), 1 − x0): the curved valley that geodesic acceleration is made for
    return FunctionResiduals(lambda x: np.array([10 * (x[1] - x[0] ** 2), 1 - x[0]]),
                             lambda x: np.array([[-20 * x[0], 10.0], [-1.0, 0.0]]), 2, 2)


@pytest.mark.parametrize("geodesic", [False, True])
def test_rosenbrock_valley_converges(geodesic):
    lm = LevenbergMarquardt(rosenbrock_problem(), solver="primal", damping="identity", lam=1.0,
                            geodesic=geodesic)
    theta = np.array([-1.2, 1.0])
    for _ in range(60):
        info = lm.step(theta)
        if info.loss < 1e-20:
            break
    np.testing.assert_allclose(theta, [1.0, 1.0], atol=1e-9)


def atan_problem():
    # r(x) = atan(x): from x = 2 the undamped Gauss-Newton step overshoots to |x| > 2.
    return FunctionResiduals(lambda x: np.arctan(x), lambda x: np.diag(1.0 / (1.0 + x**2)), 1, 1)


@pytest.mark.parametrize("update", ["fixed", "nielsen"])
def test_rejected_step_leaves_parameters_unchanged(update):
    lm = LevenbergMarquardt(atan_problem(), lam=1e-12, max_trials=1, damping="marquardt", update=update)
    theta = np.array([2.0])
    info = lm.step(theta)
    assert not info.accepted and info.trials == 1 and info.rho < 0
    assert theta[0] == 2.0 and info.loss == info.loss0
    assert lm.lam > 1e-12 * 1.5                      # damping went up
    iters = lm.iterations
    for _ in range(30):                              # the same Jacobian until a step is accepted
        info = lm.step(theta)
        if info.accepted:
            break
    assert info.accepted and abs(theta[0]) < 2.0
    assert lm.iterations == iters


@pytest.mark.parametrize("update", ["fixed", "nielsen"])
def test_non_finite_trial_is_rejected(update):
    # r(x) = sqrt(x) - 0.1: the Gauss-Newton step from x = 1 lands at x < 0 (NaN)
    res = FunctionResiduals(lambda x: np.sqrt(x) - 0.1, lambda x: np.diag(0.5 / np.sqrt(x)), 1, 1)
    lm = LevenbergMarquardt(res, lam=1e-3, damping="identity", update=update)
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
    assert theta.dtype == np.float32 and info.accepted and info.loss < before @ before


@pytest.mark.parametrize("kwargs, match", [
    ({"solver": "qr"}, "solver must be one of"),
    ({"damping": "none"}, "damping must be one of"),
    ({"update": "slow"}, "update: expected one of"),
    ({"lam": 0.0}, "lam: expected a positive"),
    ({"lam": math.nan}, "lam: expected a positive"),
    ({"lam_min": 1.0, "lam_max": 0.5}, "lam_min <= lam_max"),
    ({"max_trials": 0}, "max_trials"),
    ({"chunk_rows": 0}, "chunk_rows"),
    ({"cg_tol": 2.0}, "cg_tol"),
    ({"geodesic_h": 0.0}, "geodesic_h"),
    ({"blas_threads": 0}, "blas_threads"),
    ({"blas_threads": "many"}, "blas_threads"),
    ({"geodesic_alpha": -1.0}, "geodesic_alpha"),
    ({"gram": "float16"}, "gram must be one of"),
    ({"refine_tol": 0.0}, "refine_tol"),
    ({"refine_maxiter": 0}, "refine_maxiter"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LevenbergMarquardt(atan_problem(), **kwargs)


def test_auto_blas_threads_are_helmpinns_whatever_the_load(monkeypatch):
    """"auto" is helmpinn's thread count on an idle and on a busy machine alike (a count read
    from the load changed the BLAS's sums, and with them a default run's numbers, with the
    machine's other work)."""
    import os

    from helmpinn import _blas

    threads = hp.get_num_threads()
    try:
        for n in (2, 3, 1):   # it follows helmpinn's own count, not the load
            hp.set_num_threads(n)
            for load in (0.0, n + 0.5, n + 1.0, 400.0):
                monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
                assert _blas.auto_blas_threads() == n, (n, load)
        monkeypatch.delattr(os, "getloadavg")   # a platform without one
        assert _blas.auto_blas_threads() == 1
    finally:
        hp.set_num_threads(threads)


def test_blas_limit_without_threadpoolctl_warns_once(monkeypatch):
    """A source tree run without threadpoolctl: the limit cannot be set, which is said once
    (it makes CG several times slower), and the block still runs."""
    import sys

    from helmpinn import _blas

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)   # import raises ImportError
    monkeypatch.setattr(_blas, "_warned", False)
    with pytest.warns(RuntimeWarning, match="threadpoolctl is not installed"):
        with _blas.blas_limit(1):
            pass
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with _blas.blas_limit(1):   # said once per process
            pass
    with _blas.blas_limit(None):   # no limit asked: nothing to say
        pass


def test_blas_limit_covers_scipys_blas_loaded_late():
    """A process whose first use of SciPy's BLAS is inside a limit (LM imports it in its first
    step): that BLAS is loaded before the limit is taken, so the limit holds for it too (a
    library loaded inside the block would run its default threads). A fresh interpreter."""
    import os
    import subprocess
    import sys

    code = (
        "import sys, numpy, helmpinn\n"
        "from helmpinn import _blas\n"
        "import threadpoolctl\n"
        "assert 'scipy.linalg' not in sys.modules\n"
        "with threadpoolctl.threadpool_limits(limits=3, user_api='blas'):\n"
        "    with _blas.blas_limit(1):\n"
        "        import scipy.linalg\n"
        "        inside = sorted({i['filepath']: i['num_threads'] for i in threadpoolctl.threadpool_info()"
        " if i['user_api'] == 'blas'}.values())\n"
        "print(inside)\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    inside = json.loads(out.stdout.strip().splitlines()[-1])
    assert inside and set(inside) == {1}

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


# -- Trainer.fit_lm and the CLI ------------------------------------------------------------------
def tiny_trainer(tmp_path=None, **kw):
    prob = hp.get_problem("plane1d", k=K)
    model = hp.Model.create(1, 4, 8, 1, dtype="float64", seed=0, fourier_sigma=K / (2 * math.pi))
    opts = dict(pde_points=60, bc_points=2, resample_every=0, eval_every=5, progress=False)
    if tmp_path is not None:
        opts["checkpoint_path"] = tmp_path / "m.npz"
    opts.update(kw)
    return hp.Trainer(prob, model, **opts)


def test_fit_lm_converges_and_records_history():
    tr = tiny_trainer(target_error=1e-3)
    h = tr.fit_lm(40)
    assert tr.last_error < 1e-3 and tr.stop_reason.startswith("target error")
    n = len(h.step)
    assert 0 < n < 40 and h.step == list(range(1, n + 1)) and len(h.lr) == n
    # the per-term losses, from the residuals, add up to the weighted total
    w = tr.weights
    total = w["pde"] * np.array(h.pde) + w["data"] * np.array(h.data) + w["bc"] * np.array(h.bc)
    np.testing.assert_allclose(total, h.loss, rtol=1e-12)
    assert tr.model.optimizer_state["lm_steps"] == n


def test_fit_lm_non_finite_restores_last_good(tmp_path):
    tr = tiny_trainer(tmp_path, checkpoint_every=4)

    def poison(trainer, step):
        if step == 6:
            trainer.model.params[3] = np.nan

    tr.callbacks.append(poison)
    tr.fit_lm(20)
    assert tr.diverged and "non-finite loss" in tr.stop_reason and "step 7" in tr.stop_reason
    assert "restored the last good state (step 4)" in tr.stop_reason
    saved = hp.Model.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(tr.model.params, saved.params)
    assert tr.step == 4 and np.all(np.isfinite(tr.model.params))


def test_fit_lm_resumes_damping_from_checkpoint(tmp_path):
    tr = tiny_trainer(tmp_path)
    tr.fit_lm(6)
    lam = tr.driver.lm.lam
    model = hp.Model.load(tmp_path / "m.npz")
    assert model.optimizer_state["lm_lambda"] == lam and model.optimizer_state["lm_steps"] == 6
    tr2 = hp.Trainer(tr.problem, model, pde_points=60, bc_points=2, resample_every=0, progress=False)
    tr2.fit_lm(0)
    assert tr2.driver.lm.lam == lam and tr2.step == 6


def test_fit_lm_resample_switches_points():
    tr = tiny_trainer(resample_every=3)
    tr.fit_lm(7)
    assert tr.driver.lm.steps == 7 and np.all(np.isfinite(tr.model.params))


@pytest.mark.parametrize("solver", ["auto", "dual"])
def test_cli_optimizer_lm(tmp_path, solver):
    from helmpinn.cli import main

    out = tmp_path / "run"
    rc = main(["train", "--problem", "plane1d", "--k", "5", "--optimizer", "lm", "--steps", "30",
               "--hidden", "8", "--layers", "1", "--fourier", "4", "--points", "60", "--quiet",
               "--lm-solver", solver, "--no-plots", "--out", str(out)])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["optimizer"] == "lm" and metrics["settings"]["dtype"] == "float64"
    assert metrics["lm"]["solver"] == {"auto": "primal", "dual": "dual"}[solver] and metrics["lm"]["steps"] == metrics["steps"] <= 30
    assert metrics["final"]["relative_l2"] < 1e-3
    assert set(metrics["lm"]["times_s"]) == {"jacobian", "jtj", "solve", "trial"}
    model = hp.Model.load(out / "model.npz")
    assert model.dtype == np.float64 and model.optimizer_state["lm_steps"] == metrics["steps"]


def test_cli_optimizer_lbfgs_with_warm_start(tmp_path):
    from helmpinn.cli import main

    out = tmp_path / "run"
    rc = main(["train", "--problem", "plane1d", "--k", "5", "--optimizer", "lbfgs", "--steps", "20",
               "--warm-start", "10", "--hidden", "8", "--layers", "1", "--fourier", "4", "--points", "60",
               "--quiet", "--no-plots", "--out", str(out)])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert 1 <= metrics["lbfgs"]["iterations"] <= 20
    # the warm start's steps, then L-BFGS's iterations, each a step of the run
    assert metrics["settings"]["warm_start"] == 10 and metrics["steps"] == 10 + metrics["lbfgs"]["iterations"]


def test_cli_lm_resume(tmp_path):
    from helmpinn.cli import main

    out = tmp_path / "run"
    args = ["train", "--problem", "plane1d", "--k", "5", "--optimizer", "lm", "--hidden", "8", "--layers", "1",
            "--fourier", "4", "--points", "60", "--quiet", "--no-plots", "--out", str(out)]
    assert main([*args, "--steps", "4"]) == 0
    first = hp.Model.load(out / "model.npz")
    assert first.optimizer_state["step"] == 4 and first.metadata["settings"]["optimizer"] == "lm"
    assert main(["train", "--resume", str(out), "--steps", "7", "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == 4 and metrics["final_step"] == 7 and metrics["lm"]["steps"] == 7
    # the same as 7 steps in one go (same points, λ carried over)
    assert main([*args, "--steps", "7", "--out", str(tmp_path / "one")]) == 0
    np.testing.assert_allclose(hp.Model.load(out / "model.npz").params,
                               hp.Model.load(tmp_path / "one" / "model.npz").params, rtol=0, atol=1e-10)


def test_cli_lm_solver_needs_lm(tmp_path, capsys):
    from helmpinn.cli import main

    adam = ["train", "--problem", "plane1d", "--optimizer", "adam", "--out", str(tmp_path)]
    assert main([*adam, "--lm-solver", "cg"]) == 2
    assert "--lm-solver, --lm-geodesic and --lm-gram go with --optimizer lm" in capsys.readouterr().err
    assert main([*adam, "--lm-gram", "float32"]) == 2
    assert "go with --optimizer lm" in capsys.readouterr().err
    assert main([*adam, "--no-lm-geodesic"]) == 2
    assert "go with --optimizer lm" in capsys.readouterr().err
    # where the default (auto) picks a decomposed model, the same flags are refused too
    wide = ["train", "--problem", "free-source", "--wavelengths", "6", "--out", str(tmp_path)]
    assert main([*wide, "--lm-solver", "cg"]) == 2
    assert "go with --optimizer lm; this run trains with gn (hp.solve's choice" in capsys.readouterr().err


def test_cli_lm_geodesic_switch(tmp_path):
    from helmpinn.cli import main

    args = ["train", "--problem", "plane1d", "--k", "5", "--optimizer", "lm", "--steps", "3", "--hidden", "8",
            "--layers", "1", "--fourier", "4", "--points", "60", "--no-plots", "--quiet"]
    for flag in ("--lm-geodesic", "--no-lm-geodesic"):
        out = tmp_path / flag
        assert main([*args, flag, "--out", str(out)]) == 0
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["settings"]["lm"]["geodesic"] is (flag == "--lm-geodesic")
        lm = metrics["lm"]
        # a trial costs one residual evaluation, two more with the acceleration (plus the first r)
        trials = lm["evaluations"] - 1 if flag == "--no-lm-geodesic" else (lm["evaluations"] - 1) // 3
        assert lm["evaluations"] == 1 + trials * (3 if flag == "--lm-geodesic" else 1) and trials >= 3


def test_general_operator_problem_pml():
    # scatter-hard's PML goes through the general operator (a_pde, b_pde): LM takes its residuals too
    prob = hp.get_problem("scatter-hard")
    model = hp.Model.create(2, 4, 8, 1, dtype="float64", seed=0, fourier_sigma=1.0)
    tr = hp.Trainer(prob, model, pde_points=100, bc_points=40, resample_every=0, progress=False, eval_every=0)
    tr.resample()
    assert "a_pde" in tr.batch
    res = CoreResiduals(tr.workspace, tr.batch, tr.weights)
    r = res.residuals(model.params)
    grad = np.empty_like(model.params)
    loss = tr.workspace.value_and_grad(model.params, grad, **res.kw)
    assert r @ r == pytest.approx(loss, rel=1e-12)
    # the problem's LM defaults: JᵀJ in float32, preconditioning CG on the float64 system
    d = lm_defaults(prob)
    assert d["gram"] == "float32" and (d["ff_dim"], d["hidden"], d["pde_points"]) == (24, 48, 5500)
    h = tr.fit_lm(3, **lm_options(d))
    assert tr.driver.lm.gram == "float32" and h.loss[-1] < h.loss[0]


def test_spd_factor_solves_and_falls_back_on_a_singular_matrix():
    from helmpinn.optim.lm import _spd_factor

    rng = np.random.default_rng(3)
    J = rng.standard_normal((40, 12))
    A = np.asfortranarray(J.T @ J)
    A0 = A.copy()
    shift = np.full(12, 0.5)
    solve, how = _spd_factor(np.triu(A), shift)   # only the upper triangle is read
    b = rng.standard_normal(12)
    assert how == "cholesky"
    np.testing.assert_allclose(solve(b), np.linalg.solve(A + np.diag(shift), b), rtol=1e-12)
    # rank 5, no shift: Cholesky fails; the eigendecomposition gives the minimum-norm solution
    Js = rng.standard_normal((5, 12))
    S = np.asfortranarray(Js.T @ Js)
    S0 = S.copy()
    solve, how = _spd_factor(S, np.zeros(12))
    assert how == "eigh"
    rhs = S @ rng.standard_normal(12)
    np.testing.assert_allclose(solve(rhs), np.linalg.pinv(S0, rcond=1e-10) @ rhs, rtol=1e-8, atol=1e-10)
    # a preconditioner for a float32 JᵀJ: a raised diagonal instead of the eigendecomposition
    solve, how = _spd_factor(S, np.zeros(12), approximate=True)
    assert how == "cholesky"
    x = solve(rhs)
    assert np.all(np.isfinite(x)) and np.linalg.norm(S0 @ x - rhs) < 0.5 * np.linalg.norm(rhs)
    np.testing.assert_array_equal(A, A0)   # the inputs are not changed
    np.testing.assert_array_equal(S, S0)


def test_cli_lm_gram(tmp_path):
    from helmpinn.cli import main

    # Fixed weights (the general defaults before the per-kind rule): with the rule's (data 12.5,
    # bc 0.25) CG stops at refine_maxiter in these tiny-network steps and the errors differ by 1%.
    args = ["train", "--problem", "plane1d", "--k", "5", "--optimizer", "lm", "--steps", "6", "--hidden", "8",
            "--layers", "1", "--fourier", "4", "--points", "60", "--no-plots", "--quiet",
            "--w-data", "100", "--w-bc", "4"]
    errors = {}
    for gram in ("float64", "float32"):
        out = tmp_path / gram
        assert main([*args, "--lm-gram", gram, "--out", str(out)]) == 0
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["settings"]["lm"]["gram"] == gram and metrics["adam_time_s"] is None
        assert metrics["main_time_s"] > 0 and metrics["lm"]["solver"] == "primal"
        errors[gram] = metrics["final"]["relative_l2"]
    # the float32 JᵀJ only preconditions the float64 system: the same steps to CG's tolerance
    assert errors["float32"] == pytest.approx(errors["float64"], rel=1e-3)


# -- memory, typed systems, hostile inputs, pinned behaviour -----------------------------------
def test_memory_estimate_bounds_what_a_step_allocates():
    """tracemalloc's peak over LM steps (NumPy's and LAPACK's arrays) stays within
    memory_estimate, for each solver and scaling, R > P and R < P."""
    import tracemalloc

    from helmpinn.optim.lm import memory_estimate

    for n_pde, hidden in ((300, 16), (40, 24)):
        prob = hp.get_problem("plane1d", k=K)
        spec = hp.ModelSpec(1, 4, hidden, 1)
        theta = hp.init_params(spec, dtype="float64", seed=0, fourier_sigma=1.0)
        res = CoreResiduals(hp.Workspace(spec, 64, dtype="float64"),
                            prob.sample(n_pde, 2, rng=0, method="sobol").to_core("float64"), WEIGHTS)
        P, R = res.num_params, res.num_residuals
        for solver, damping, gram in [("primal", "identity", "float64"), ("primal", "marquardt", "float32"),
                                      ("dual", "identity", "float64"), ("dual", "marquardt", "float64"),
                                      ("cg", "marquardt", "float64")]:
            lm = LevenbergMarquardt(res, solver=solver, damping=damping, gram=gram, chunk_rows=50,
                                    blas_threads=None)   # threadpoolctl's own bookkeeping is not LM's
            th = theta.copy()
            lm.step(th)
            tracemalloc.start()
            try:
                for _ in range(2):
                    lm.step(th)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            est = memory_estimate(P, R, solver, gram=gram, damping=damping, chunk_rows=50)
            assert 0.2 * est < peak <= est, (P, R, solver, damping, peak, est)


def test_memory_budget_switches_auto_and_refuses_an_explicit_solver():
    from helmpinn.optim.lm import choose_solver, memory_estimate

    GiB = 1 << 30
    # the sizes: P = 99k, R = 16k, 2 GiB
    P, R = 99_000, 16_000
    assert memory_estimate(P, R, "dual") > 8 * R * P + 16 * R * R
    assert memory_estimate(P, R, "primal") >= 16 * P * P
    assert memory_estimate(P, R, "primal", ranks=2) >= 16 * P * P
    assert memory_estimate(P, R, "cg") < 0.3 * GiB
    assert choose_solver(P, R) == "cg" and choose_solver(P, R, ranks=2) == "cg"
    with pytest.raises(ValueError, match=r"solver 'dual' needs about 15.9 GiB \(J 11\.8 GiB.*"
                                         r"P = 99000 parameters and R = 16000 residuals, over "
                                         r"max_matrix_bytes = 2 GiB"):
        choose_solver(P, R, "dual")
    with pytest.raises(ValueError, match=r"solver .primal. needs about 14[0-9.]* GiB .* on each of the 2 ranks"):
        choose_solver(P, R, "primal", ranks=2)
    with pytest.raises(ValueError, match="over several MPI ranks"):
        choose_solver(10, 20, "dual", ranks=2)
    assert choose_solver(P, R, "cg", max_matrix_bytes=1) == "cg"
    # the other dense solver when the preferred one does not fit
    assert choose_solver(1000, 800, max_matrix_bytes=memory_estimate(1000, 800, "dual")) == "dual"
    assert choose_solver(1000, 960, max_matrix_bytes=memory_estimate(1000, 960, "primal")) == "primal"

    # LevenbergMarquardt uses it: R < P, dual within the budget, cg below, refused explicitly
    _, _, theta, res = tiny(n_pde=20)
    P, R = res.num_params, res.num_residuals
    dual = memory_estimate(P, R, "dual")
    assert dual < memory_estimate(P, R, "primal")
    assert LevenbergMarquardt(res, max_matrix_bytes=dual).solver == "dual"
    lm = LevenbergMarquardt(res, max_matrix_bytes=dual - 1)
    assert lm.solver == "cg" and isinstance(lm.linearize(theta), CGSystem)
    with pytest.raises(ValueError, match=r"solver 'dual' needs about .* GiB .*max_matrix_bytes"):
        LevenbergMarquardt(res, solver="dual", max_matrix_bytes=dual - 1)
    # more residuals later (set_residuals) are checked too; the old ones stay on refusal
    lm = LevenbergMarquardt(res, solver="dual", max_matrix_bytes=dual)
    _, _, _, more = tiny(n_pde=40)
    with pytest.raises(ValueError, match="solver 'dual' needs about"):
        lm.set_residuals(more)
    assert lm.res is res


def test_typed_systems():
    from helmpinn.optim.lm import DualSystem, LinearSystem, PrimalSystem

    for n_pde, solver, cls in [(60, "primal", PrimalSystem), (20, "dual", DualSystem), (60, "cg", CGSystem)]:
        _, _, theta, res = tiny(n_pde=n_pde)
        s = LevenbergMarquardt(res, solver=solver).linearize(theta)
        assert type(s) is cls and isinstance(s, LinearSystem) and s.name == solver and s.problem == ""
        assert s.g.shape == (res.num_params,) and s.D.shape == (res.num_params,)
        sol = s.solve(1.0)
        assert sol.delta.shape == (res.num_params,) and sol.predicted > 0


def test_no_residuals_is_a_clear_error(capfd):
    # R = 0: dual by shape; the BLAS used to print "DSYRK parameter 10 illegal" and raise _flapack.error
    res = FunctionResiduals(lambda x: np.zeros(0), lambda x: np.zeros((0, 3)), 3, 0)
    for solver in ("auto", "primal", "cg"):
        lm = LevenbergMarquardt(res, solver=solver)
        with pytest.raises(ValueError, match=r"residuals: there are none \(R = 0"):
            lm.step(np.zeros(3))
    assert "DSYRK" not in capfd.readouterr().err


def linear_problem(scale, P=6, R=15, seed=4):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((R, P)) * scale
    b = rng.standard_normal(R) * scale
    return FunctionResiduals(lambda x: A @ x - b, lambda x: A, P, R), A, b


def test_float32_gram_scales_a_finite_jacobian_near_1e25():
    """JᵀJ of entries near 1e25 overflows float32 (and 1e-25 underflows): the rows are scaled by a
    power of two, so the step is the float64 one instead of "non-finite Jacobian"."""
    for scale in (1e25, 1e-25, 1.0):
        res, A, b = linear_problem(scale)
        theta = np.zeros(6)
        steps = {}
        for gram in ("float64", "float32"):
            lm = LevenbergMarquardt(res, solver="primal", gram=gram, refine_tol=1e-12, chunk_rows=4)
            steps[gram] = lm.solve(theta, 1e-6).delta
        np.testing.assert_allclose(steps["float32"], steps["float64"], rtol=1e-8)
        if scale < 1:
            continue   # (λ's floor lam_min dwarfs a JᵀJ of 1e-50: no full step there)
        lm = LevenbergMarquardt(res, solver="primal", gram="float32", geodesic=False)
        info = lm.step(theta)
        x = np.linalg.lstsq(A, b, rcond=None)[0]   # a linear problem: one step to its minimum
        best = float(np.sum((A @ x - b) ** 2))
        assert info.accepted and info.loss == pytest.approx(best, rel=1e-3)   # λ = 1e-3 × mean diag


@pytest.mark.parametrize("solver", ["primal", "dual", "cg"])
def test_non_finite_messages_say_what(solver):
    # J finite (entries 1e160), r small, but JᵀJ beyond float64: not a "non-finite Jacobian"
    R = 15 if solver != "dual" else 4
    A = np.random.default_rng(4).standard_normal((R, 6)) * 1e160
    res = FunctionResiduals(lambda x: A @ x, lambda x: A, 6, R)
    theta = np.full(6, 1e-170)
    with np.errstate(over="ignore", invalid="ignore"):
        with pytest.raises(NonFiniteLoss, match=r"JᵀJ or Jᵀr overflows float64: the Jacobian is finite, "
                                                r"but its largest entry [0-9.]+e\+160"):
            LevenbergMarquardt(res, solver=solver, damping="marquardt").step(theta)
    assert np.all(theta == 1e-170)
    # a NaN in J itself
    bad = FunctionResiduals(lambda x: np.ones(3), lambda x: np.array([[1.0, np.nan]] * 3), 2, 3)
    with pytest.raises(NonFiniteLoss, match="non-finite Jacobian at the current parameters"):
        LevenbergMarquardt(bad, solver="primal" if solver == "dual" else solver,
                           damping="marquardt").step(np.zeros(2))


def test_nielsen_update_factors():
    """Acceptance multiplies λ by max(1/3, 1 − (2ρ − 1)³) exactly; rejections by ν = 2, 4, 8."""
    lm = LevenbergMarquardt(atan_problem(), damping="marquardt", update="nielsen", lam=0.5, geodesic=False)
    theta = np.array([2.0])
    lam0 = lm.lam
    info = lm.step(theta)
    assert info.accepted and info.trials == 1 and 0 < info.rho < 0.9
    factor = max(1 / 3, 1 - (2 * min(info.rho, 1.0) - 1) ** 3)
    assert abs(factor - 1 / 3) > 0.05     # not the fixed rule's factor
    assert lm.lam == max(lam0 * factor, lm.lam_min)
    # a linear problem: the model is exact, ρ = 1, the factor its floor 1/3
    res, _, _ = linear_problem(1.0)
    lm = LevenbergMarquardt(res, damping="marquardt", update="nielsen", lam=1e-2, geodesic=False)
    info = lm.step(np.zeros(6))
    assert info.accepted and info.rho == pytest.approx(1.0, abs=1e-9) and lm.lam == 1e-2 * (1.0 / 3.0)
    # rejections: r = atan from x = 2 with a tiny λ overshoots (see test_rejected_step...)
    lm = LevenbergMarquardt(atan_problem(), damping="marquardt", update="nielsen", lam=1e-12,
                            geodesic=False, max_trials=1)
    theta = np.array([2.0])
    lams = []
    for _ in range(3):
        info = lm.step(theta)
        assert not info.accepted
        lams.append(lm.lam)
    assert lams == [1e-12 * 2, 1e-12 * 2 * 4, 1e-12 * 2 * 4 * 8]


def test_marquardt_scaling_keeps_the_running_maximum():
    # r = (a(x) x0, x1), J = diag(a, 1) with a large at the first point, small at the second
    a = {0: 10.0, 1: 0.1}
    at = {"i": 0}
    res = FunctionResiduals(lambda x: np.array([a[at["i"]] * x[0], x[1]]),
                            lambda x: np.diag([a[at["i"]], 1.0]), 2, 2)
    lm = LevenbergMarquardt(res, damping="marquardt", solver="primal")
    s1 = lm.linearize(np.array([1.0, 1.0]))
    np.testing.assert_array_equal(s1.D, [100.0, 1.0])
    at["i"] = 1
    s2 = lm.linearize(np.array([2.0, 1.0]))
    np.testing.assert_allclose(s2.diag, [0.01, 1.0])
    np.testing.assert_array_equal(s2.D, [100.0, 1.0])       # not diag(JᵀJ) = (0.01, 1)
    lm.set_residuals(res)                                   # new points: the maximum starts again
    s3 = lm.linearize(np.array([3.0, 1.0]))
    np.testing.assert_allclose(s3.D, [0.01, 1.0])


def test_auto_blas_threads_limit_inside_a_step(monkeypatch):
    """blas_threads="auto": the BLAS runs as many threads as helmpinn's inside the step, on a
    busy machine as on an idle one (and the limit is lifted after it)."""
    import os

    import scipy.linalg  # noqa: F401 - SciPy's BLAS loaded before this test's own limit is taken
    import threadpoolctl

    def blas():
        return {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}

    seen = []

    def jac(x):
        seen.append(blas())
        return np.diag(1.0 / (1.0 + x**2))

    res = FunctionResiduals(np.arctan, jac, 1, 1)
    threads = hp.get_num_threads()
    hp.set_num_threads(2)
    try:
        with threadpoolctl.threadpool_limits(limits=3, user_api="blas"):
            assert blas() == {3}
            monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 0.0, 0.0))   # busy
            LevenbergMarquardt(res, blas_threads="auto").step(np.array([2.0]))
            assert seen[-1] == {2} and blas() == {3}
            monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))    # idle
            LevenbergMarquardt(res, blas_threads="auto").step(np.array([2.0]))
            assert seen[-1] == {2} and blas() == {3}
            LevenbergMarquardt(res, blas_threads=None).step(np.array([2.0]))
            assert seen[-1] == {3}
    finally:
        hp.set_num_threads(threads)
