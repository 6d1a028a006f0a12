"""Model persistence, optimisers and the trainer."""
import math
import os

import numpy as np
import pytest

import helmpinn
from helmpinn.models.model import Model
from helmpinn.training.status import RunStatus
from helmpinn.optim import Adam, constant, cosine, exponential, lbfgs, make_schedule
from helmpinn.problems.registry import get_problem
from helmpinn.training.trainer import Trainer, auto_weights, default_settings, relative_l2


def small_model(d=1, dtype="float32", seed=0, sigma=2.0):
    return Model.create(d, 8, 16, 2, dtype=dtype, seed=seed, fourier_sigma=sigma)


# -- model ---------------------------------------------------------------------------------------
def test_views_share_the_flat_buffer():
    m = small_model(2)
    v = m.views
    assert set(v) == {"B", "W0", "b0", "W1", "b1", "W2", "b2"}
    assert v["B"].shape == (2, 8) and v["W0"].shape == (16, 16) and v["W2"].shape == (2, 16)
    v["b2"][:] = 7.0
    assert np.all(m.params[-2:] == 7.0)
    assert sum(a.size for a in v.values()) == m.num_params


def test_predict_any_n_chunked():
    m = small_model(2, dtype="float64")
    x = np.random.default_rng(0).random((1000, 2))
    full = m.predict(x, batch_size=4096)
    chunked = m.predict(x, batch_size=77)
    assert full.dtype == np.complex128 and full.shape == (1000,)
    np.testing.assert_allclose(chunked, full, rtol=1e-13, atol=1e-13)
    assert m.predict(np.empty((0, 2))).shape == (0,)
    with pytest.raises(ValueError, match=r"\[N, 2\]"):
        m.predict(np.zeros((3, 3)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_save_load_round_trip_bit_for_bit(tmp_path, dtype):
    m = small_model(2, dtype=dtype, seed=3)
    opt = Adam(m.params, lr=1e-2)
    grad = np.random.default_rng(0).standard_normal(m.num_params).astype(dtype)
    for _ in range(3):
        opt.step(m.params, grad)
    m.metadata = {"problem": "dirichlet2d", "step": 3, "options": {"n": 2}}
    path = tmp_path / "sub" / "model.npz"
    m.save(path, optimizer_state=opt.state_dict())
    assert os.listdir(tmp_path / "sub") == ["model.npz"], "no temporary file may be left behind"
    r = Model.load(path)
    assert r.spec == m.spec and r.dtype == m.dtype
    assert r.params.tobytes() == m.params.tobytes()
    assert r.optimizer_state["m"].tobytes() == opt.m.tobytes()
    assert r.optimizer_state["v"].tobytes() == opt.v.tobytes()
    assert r.optimizer_state["step"] == 3
    assert r.metadata == m.metadata
    x = np.random.default_rng(1).random((10, 2))
    np.testing.assert_array_equal(r.predict(x), m.predict(x))
    # and the optimiser continues exactly where it was
    opt2 = Adam(r.params, lr=1e-2)
    opt2.load_state_dict(r.optimizer_state)
    opt.step(m.params, grad)
    opt2.step(r.params, grad)
    assert r.params.tobytes() == m.params.tobytes()


def _write_npz(path, **arrays):
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def test_load_validates(tmp_path):
    m = small_model(1)
    good = tmp_path / "good.npz"
    m.save(good)
    base = dict(np.load(good))

    def broken(name, **changes):
        arrays = {**base, **changes}
        arrays = {k: v for k, v in arrays.items() if v is not None}
        p = tmp_path / f"{name}.npz"
        _write_npz(p, **arrays)
        return p

    with pytest.raises(ValueError, match="missing 'params'"):
        Model.load(broken("noparams", params=None))
    with pytest.raises(ValueError, match="needs"):
        Model.load(broken("short", params=base["params"][:-1]))
    with pytest.raises(ValueError, match="params are float64 but dtype says float32"):
        Model.load(broken("dtype", params=base["params"].astype(np.float64)))
    with pytest.raises(ValueError, match="NaN or Inf"):
        Model.load(broken("nan", params=np.full_like(base["params"], np.nan)))
    with pytest.raises(ValueError, match="invalid spec"):
        Model.load(broken("spec", spec=np.array([1, 8, 16, 0])))
    with pytest.raises(ValueError, match="format_version"):
        Model.load(broken("version", format_version=np.array(99)))
    with pytest.raises(ValueError, match="optimiser state 'm'"):
        Model.load(broken("optm", **{"opt/m": np.zeros(3, np.float32)}))
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="not a helmpinn model file: not an .npz"):
        Model.load(junk)


# -- optimisers ----------------------------------------------------------------------------------
def test_adam_matches_reference_and_schedules():
    rng = np.random.default_rng(0)
    p = rng.standard_normal(50)
    p_ref = p.copy()
    m_ref = np.zeros(50)
    v_ref = np.zeros(50)
    opt = Adam(p, lr=exponential(1e-2, rate=0.5, every=2))
    for t in range(1, 5):
        g = rng.standard_normal(50)
        opt.step(p, g)
        lr = 1e-2 * 0.5 ** (t / 2)
        m_ref = 0.9 * m_ref + 0.1 * g
        v_ref = 0.999 * v_ref + 0.001 * g * g
        p_ref -= lr * (m_ref / (1 - 0.9**t)) / (np.sqrt(v_ref / (1 - 0.999**t)) + 1e-8)
    np.testing.assert_allclose(p, p_ref, rtol=1e-12, atol=1e-14)
    assert opt.state_dict()["step"] == 4
    assert constant(0.1)(1000) == 0.1
    c = cosine(1.0, 100, final_lr=0.0, warmup=10)
    assert c(5) == pytest.approx(0.5) and c(10) == pytest.approx(1.0)
    assert c(55) == pytest.approx(0.5) and c(100) == pytest.approx(0.0) and c(500) == 0.0
    e = make_schedule("exponential", 1.0, 1000)
    assert e(1000) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="unknown schedule"):
        make_schedule("step", 1.0, 10)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_adam_weight_decay_matches_numpy(dtype):
    """Decoupled (AdamW) decay: p -= lr * m_hat / (sqrt(v_hat) + eps) + lr * wd * p, with the
    p of before the step; checked against NumPy in float64 (flipping the decay's sign fails)."""
    rng = np.random.default_rng(4)
    p = rng.standard_normal(64).astype(dtype)
    p_ref = p.astype(np.float64)
    m_ref = np.zeros(64)
    v_ref = np.zeros(64)
    lr, wd, b1, b2, eps = 3e-2, 0.5, 0.8, 0.95, 1e-6
    opt = Adam(p, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for t in range(1, 6):
        g = rng.standard_normal(64).astype(dtype)
        opt.step(p, g)
        g = g.astype(np.float64)
        m_ref = b1 * m_ref + (1 - b1) * g
        v_ref = b2 * v_ref + (1 - b2) * g * g
        p_ref = p_ref - lr * (m_ref / (1 - b1**t)) / (np.sqrt(v_ref / (1 - b2**t)) + eps) - lr * wd * p_ref
    tol = 1e-13 if dtype == "float64" else 2e-6
    np.testing.assert_allclose(p, p_ref, rtol=tol, atol=tol)
    # the decay is visible: without it the parameters differ by far more than the tolerance
    q = rng.standard_normal(64)
    q_nodecay, q_decay = q.copy(), q.copy()
    g = rng.standard_normal(64)
    Adam(q_nodecay, lr=lr).step(q_nodecay, g)
    Adam(q_decay, lr=lr, weight_decay=wd).step(q_decay, g)
    np.testing.assert_allclose(q_decay - q_nodecay, -lr * wd * q, rtol=1e-12)


def test_relative_l2_known_values():
    u_exact = np.array([3.0 + 4.0j, 0.0, 0.0])  # |u_exact| = 5
    u = np.array([3.0 + 1.0j, 4.0, 0.0])        # |u - u_exact| = sqrt(9 + 16) = 5
    assert relative_l2(u, u_exact) == pytest.approx(1.0, rel=1e-15)
    assert relative_l2(u_exact + 0.3, u_exact) == pytest.approx(math.sqrt(3 * 0.09) / 5, rel=1e-14)
    assert relative_l2(np.array([6.0, 8.0]), np.zeros(2)) == pytest.approx(10.0), "absolute when exact is 0"
    assert relative_l2(u_exact, u_exact) == 0.0


def _fourier_slice(spec):
    n = spec.in_dim * spec.ff_dim  # B comes first in the flat vector
    v = spec.views(np.arange(spec.num_params, dtype=np.float64))["B"]
    assert v.ravel().tolist() == list(range(n))
    return slice(0, n)


def test_train_fourier_false_reaches_the_core():
    tr = make_trainer(train_fourier=False, problem="dirichlet2d")
    B = _fourier_slice(tr.model.spec)
    before = tr.model.params.copy()
    tr.fit(5)
    assert np.all(tr.grad[B] == 0), "the core gave no gradient for B"
    assert tr.model.params[B].tobytes() == before[B].tobytes()
    assert not np.array_equal(tr.model.params[B.stop:], before[B.stop:])
    before = tr.model.params.copy()
    tr.polish(5)  # the Trainer's L-BFGS
    assert tr.model.params[B].tobytes() == before[B].tobytes()
    assert not np.array_equal(tr.model.params, before)
    trained = make_trainer(problem="dirichlet2d")
    trained.fit(1)
    assert np.any(trained.grad[B] != 0), "with train_fourier=True, B has a gradient"

    p = get_problem("plane1d", k=4.0)
    m = small_model(1, dtype="float64", sigma=0.5)
    before = m.params.copy()
    batch = p.sample(64, 2, 0, "sobol").to_core(np.float64)
    res = lbfgs(m.params, m.spec, batch, 10, weights=auto_weights(p), train_fourier=False)
    assert res.loss_after < res.loss_before
    assert m.params[_fourier_slice(m.spec)].tobytes() == before[_fourier_slice(m.spec)].tobytes()
    assert not np.array_equal(m.params, before)


def test_value_and_grad_into_the_workspace_grad():
    p = get_problem("dirichlet2d")
    m = small_model(2, dtype="float64")
    batch = p.sample(96, 24, 0, "sobol").to_core(np.float64)
    ws = helmpinn.Workspace(m.spec, 40, "float64")  # several chunks
    separate = np.full(m.num_params, 7.0)
    loss_sep = ws.value_and_grad(m.params, separate, **batch)
    ws.grad[...] = 3.0  # stale contents must be overwritten, not added to
    loss_own = ws.value_and_grad(m.params, ws.grad, **batch)
    assert loss_own == loss_sep
    np.testing.assert_allclose(ws.grad, separate, rtol=1e-12, atol=1e-14)
    assert np.count_nonzero(separate) > 0.9 * m.num_params


def test_lbfgs_polish_lowers_loss():
    p = get_problem("plane1d", k=4.0)
    m = small_model(1, dtype="float32", sigma=0.5)
    batch = p.sample(128, 2, 0, "sobol").to_core(np.float32)
    res = lbfgs(m.params, m.spec, batch, 40, weights=auto_weights(p))
    assert m.params.dtype == np.float32
    assert res.loss_after < 0.5 * res.loss_before
    ws = helmpinn.Workspace(m.spec, 4096, "float64")
    b64 = p.sample(128, 2, 0, "sobol").to_core(np.float64)
    w = auto_weights(p)
    loss = ws.value_and_grad(m.params.astype(np.float64), np.zeros(m.num_params), **b64,
                             w_pde=w["pde"], w_data=w["data"], w_bc=w["bc"])
    assert loss == pytest.approx(res.loss_after, rel=1e-3)


def test_lbfgs_runs_the_blas_on_one_thread():
    """SciPy's L-BFGS-B calls the BLAS between value_and_grad calls; threaded BLAS workers
    would spin on the cores helmpinn needs, so lbfgs limits them to one (and restores them)."""
    import threadpoolctl  # a dependency of the package: missing, this must fail, not skip

    def blas_threads():
        return [i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"]

    np.ones(8) @ np.ones(8)  # NumPy's BLAS is loaded
    before = blas_threads()
    assert before, "no BLAS library found by threadpoolctl"
    p = get_problem("plane1d", k=4.0)
    m = small_model(1, dtype="float64", sigma=0.5)
    batch = p.sample(64, 2, 0, "sobol").to_core(np.float64)
    seen = []
    lbfgs(m.params, m.spec, batch, 3, callback=lambda it, loss, th: seen.append(blas_threads()))
    assert seen and all(t == [1] * len(before) for t in seen)
    assert blas_threads() == before


# -- trainer -------------------------------------------------------------------------------------
def make_trainer(tmp_path=None, problem="plane1d", **kw):
    p = get_problem(problem, k=6.0) if problem == "plane1d" else get_problem(problem)
    m = small_model(p.dim, sigma=6.0 / (2 * math.pi))
    kw.setdefault("pde_points", 128)
    kw.setdefault("progress", False)
    kw.setdefault("eval_every", 20)
    if tmp_path is not None:
        kw.setdefault("checkpoint_path", tmp_path / "ckpt.npz")
    return Trainer(p, m, lr=1e-2, **kw)


def test_short_training_lowers_loss_and_error():
    tr = make_trainer()
    h = tr.fit(150)
    assert len(h.step) == 150 and h.step[-1] == 150 == tr.step
    assert np.mean(h.loss[-10:]) < 0.1 * np.mean(h.loss[:10])
    assert h.eval_step[-1] == 150 and h.eval_error[-1] < 0.9 * h.eval_error[0]
    assert all(math.isfinite(v) for v in h.pde + h.data + h.bc)
    assert tr.evaluate() == pytest.approx(relative_l2(tr.model.predict(tr.x_test), tr.u_test))
    assert tr.model.optimizer_state["step"] == 150


def test_resampling_draws_new_points():
    tr = make_trainer(resample_every=5, sampling="halton", problem="dirichlet2d")
    tr.fit(5)
    first = tr.training_set.x_pde.copy()
    tr.fit(1)
    assert not np.array_equal(first, tr.training_set.x_pde)
    tr2 = make_trainer(resample_every=0, problem="dirichlet2d")
    tr2.fit(3)
    x = tr2.training_set.x_pde
    tr2.fit(6)
    assert tr2.training_set.x_pde is x


def test_early_stop_on_target_error():
    tr = make_trainer(target_error=10.0)
    tr.fit(100)
    assert tr.step == 20 and "target error" in tr.stop_reason and not tr.diverged


def test_target_error_met_at_a_later_evaluation():
    free = make_trainer()
    free.fit(200)
    errors, steps = free.history.eval_error, free.history.eval_step
    # the first evaluation that beats every earlier one (the run is deterministic)
    i = next(i for i in range(1, len(errors)) if errors[i] < min(errors[:i]))
    target = 0.5 * (errors[i] + min(errors[:i]))
    tr = make_trainer(target_error=target)
    tr.fit(200)
    assert tr.step == steps[i] > steps[0] and not tr.diverged
    assert tr.stop_reason == f"target error {target:g} reached at step {steps[i]}"
    assert tr.status is RunStatus.TARGET_REACHED
    assert tr.history.eval_error == errors[:i + 1]


def test_nonfinite_parameters_at_a_checkpoint_restore_it(tmp_path):
    def inject(trainer, step):
        if step == 20:  # a checkpoint step: caught by the save, before any loss sees it
            trainer.model.params[7] = np.nan

    tr = make_trainer(tmp_path, checkpoint_every=10, callbacks=[inject])
    h = tr.fit(100)
    assert tr.diverged and tr.stop_reason == "non-finite parameters at step 20; restored the last good state (step 10)"
    assert tr.status is RunStatus.DIVERGED and not tr.status.success
    assert tr.step == 10 and h.step[-1] == 20 and tr.optimizer.step_count == 10
    ckpt = Model.load(tmp_path / "ckpt.npz")
    assert ckpt.optimizer_state["step"] == 10
    assert ckpt.params.tobytes() == tr.model.params.tobytes()
    assert ckpt.optimizer_state["m"].tobytes() == tr.optimizer.m.tobytes()


def test_nan_mid_run_keeps_last_good_checkpoint(tmp_path):
    def inject(trainer, step):
        if step == 27:
            trainer.model.params[5] = np.nan

    tr = make_trainer(tmp_path, checkpoint_every=10, callbacks=[inject])
    h = tr.fit(100)
    assert tr.diverged and "non-finite loss" in tr.stop_reason and "step 28" in tr.stop_reason
    assert tr.step == 20 and h.step[-1] == 27
    ckpt = Model.load(tmp_path / "ckpt.npz")  # still there and valid
    assert ckpt.metadata["step"] == 20 and ckpt.optimizer_state["step"] == 20
    assert np.all(np.isfinite(tr.model.params))
    assert ckpt.params.tobytes() == tr.model.params.tobytes(), "model restored to the checkpoint"
    assert tr.optimizer.step_count == 20
    # training can go on from the restored state
    tr.callbacks.clear()
    tr.fit(5)
    assert tr.step == 25 and not tr.diverged


def test_resume_from_checkpoint(tmp_path):
    tr = make_trainer(tmp_path, checkpoint_every=10)
    tr.fit(10)
    resumed = Model.load(tmp_path / "ckpt.npz")
    tr2 = Trainer(tr.problem, resumed, lr=1e-2, pde_points=128, progress=False, eval_every=0)
    tr2.fit(5)
    assert tr2.step == 15 and tr2.optimizer.step_count == 15 and tr2.history.step[0] == 11


def test_nan_before_any_checkpoint_restores_start(tmp_path):
    tr = make_trainer(tmp_path, checkpoint_every=50, callbacks=[
        lambda t, s: t.model.params.__setitem__(0, np.inf) if s == 3 else None])
    start = tr.model.params.copy()
    tr.fit(20)
    assert tr.diverged and tr.step == 0
    assert tr.model.params.tobytes() == start.tobytes()
    assert not (tmp_path / "ckpt.npz").exists()


def test_trainer_checks():
    p = get_problem("dirichlet2d")
    with pytest.raises(ValueError, match="1-D points but the problem is 2-D"):
        Trainer(p, small_model(1))
    with pytest.raises(ValueError, match="checkpoint_path"):
        Trainer(p, small_model(2), checkpoint_every=5)
    with pytest.raises(ValueError, match="unknown terms"):
        Trainer(p, small_model(2), weights={"boundary": 1.0})
    s = default_settings(p)
    assert s["pde_points"] > 0 and s["bc_points"] >= 0 and s["sigma"] > 0 and set(s["weights"]) == {"pde", "data", "bc"}


# -- the run loop and its drivers --------------------------------------------------------------------
def test_fit_is_a_plain_adam_loop_on_the_same_points():
    """Trainer.fit on fixed points takes exactly the steps of a hand-written loop: the core's
    value_and_grad on the trainer's batch, then Adam with the cosine schedule over the fit."""
    from helmpinn.optim import make_schedule

    tr = make_trainer(problem="dirichlet2d", resample_every=0, eval_every=0, val_points=0)
    start = tr.model.params.copy()
    tr.fit(20)
    params = start.copy()
    adam = Adam(params, lr=make_schedule("cosine", 1e-2, 20), betas=(0.9, 0.99))
    grad = np.empty_like(params)
    w = tr.weights
    losses = []
    for _ in range(20):
        losses.append(tr.workspace.value_and_grad(params, grad, batch=tr.batch, w_pde=w["pde"], w_data=w["data"],
                                                  w_bc=w["bc"], train_fourier=True))
        adam.step(params, grad)
    assert tr.history.loss == losses
    assert tr.model.params.tobytes() == params.tobytes()


def test_fit_lm_and_polish_are_their_optimisers_on_the_same_points():
    from helmpinn.optim.lm import CoreResiduals, LevenbergMarquardt

    p = get_problem("plane1d", k=4.0)
    model = small_model(1, dtype="float64", sigma=0.6)
    start = model.params.copy()
    tr = Trainer(p, model, pde_points=48, bc_points=2, resample_every=0, eval_every=0, progress=False)
    tr.fit_lm(4, blas_threads=1)
    lm = LevenbergMarquardt(CoreResiduals(tr.workspace, tr.batch, tr.weights), blas_threads=1)
    theta = start.copy()
    assert tr.history.loss == [lm.step(theta).loss for _ in range(4)] and tr.history.lr[-1] == lm.lam
    assert model.params.tobytes() == theta.tobytes()

    before = model.params.copy()
    summary = tr.polish(6)
    res = lbfgs(before, model.spec, tr.batch, 6, weights=tr.weights)
    assert model.params.tobytes() == before.tobytes() and summary["loss_after"] == res.loss_after
    assert tr.step == 4 + summary["iterations"] == len(tr.history.loss)   # L-BFGS iterations are steps
    assert all(math.isnan(r) for r in tr.history.lr[4:])
    assert tr.polish(0)["iterations"] == 0 and tr.step == 4 + summary["iterations"]   # SciPy would take one


class _GradientDescent:
    """A user's own optimiser: plain gradient descent through the Driver interface."""

    def __new__(cls, *a, **k):
        from helmpinn.training.drivers import Driver, StepInfo

        class GD(Driver):
            name = "gd"

            def __init__(self, lr):
                self.lr, self.taken, self.draws = lr, 0, 0

            def step(self, run):
                loss, terms = run.value_and_grad()
                run.model.params[...] -= self.lr * run.grad
                self.taken += 1
                return StepInfo(loss, terms, self.lr, status=f"gd={self.taken}")

            def resampled(self, run):
                self.draws += 1

            def state_dict(self):
                return {"gd_taken": self.taken}

            def load_state_dict(self, state):
                self.taken = int(state["gd_taken"])

        return GD(*a, **k)


def test_a_users_driver_runs_in_the_loop(tmp_path):
    tr = make_trainer(tmp_path, checkpoint_every=5, resample_every=4, eval_every=5)
    gd = _GradientDescent(1e-6)
    h = tr.fit(12, optimizer=gd)
    assert tr.driver is gd and gd.taken == 12 and gd.draws == 2   # new points before steps 5 and 9
    assert h.step == list(range(1, 13)) and h.lr == [1e-6] * 12 and h.loss[-1] < h.loss[0]
    assert h.eval_step == [5, 10, 12] and all(v > 0 for v in h.eval_val_loss)
    saved = Model.load(tmp_path / "ckpt.npz")
    assert saved.optimizer_state == {"step": 12, "gd_taken": 12} and saved.params.tobytes() == tr.model.params.tobytes()
    with pytest.raises(TypeError, match="optimizer must be"):
        tr.fit(1, optimizer=3)
    with pytest.raises(ValueError, match="optimizer must be one of"):
        tr.fit(1, optimizer="sgd")


def test_time_limit_stops_by_the_clock():
    now = [0.0]
    tr = make_trainer(time_limit=5.0, clock=lambda: now[0], eval_every=2,
                      callbacks=[lambda t, step: now.__setitem__(0, float(step))])   # a step takes 1 s
    tr.fit(100)
    assert tr.step == 5 and tr.stop_reason == "time limit 5 s reached at step 5" and not tr.diverged
    assert tr.status is RunStatus.TIME_LIMIT
    assert tr.train_time == 5.0 and tr.history.eval_time == [2.0, 4.0, 5.0]
    tr.fit(3)   # the limit is per fit
    assert tr.step == 8 and tr.stop_reason is None and tr.train_time == 8.0
    with pytest.raises(ValueError, match="time_limit"):
        make_trainer(time_limit=0)


def test_validation_loss_is_recorded_and_changes_nothing():
    plain = make_trainer(val_points=0, resample_every=10)
    plain.fit(40)
    tr = make_trainer(resample_every=10)
    h = tr.fit(40)
    assert h.loss == plain.history.loss and tr.model.params.tobytes() == plain.model.params.tobytes()
    assert plain.history.eval_val_loss == [None, None] and h.eval_step == [20, 40]
    assert len(h.eval_val_loss) == 2 and all(v > 0 for v in h.eval_val_loss)
    # the loss of the last evaluation, recomputed on fresh points drawn the same way
    rng = np.random.default_rng(np.random.SeedSequence([0, 0x76616C]))
    ts = tr.problem.sample(128, 2, rng, "uniform")
    w = tr.weights
    loss = Trainer(tr.problem, tr.model, progress=False).workspace.value_and_grad(
        tr.model.params, np.empty_like(tr.model.params), batch=ts.to_batch(np.float32), w_pde=w["pde"],
        w_data=w["data"], w_bc=w["bc"])
    assert h.eval_val_loss[-1] == loss == tr.last_val_loss


def test_validation_without_an_exact_solution_shows_overfitting():
    """Six training points fitted by LM: a tiny training loss, a validation loss far above it."""
    import copy

    p = copy.copy(get_problem("plane1d", k=4.0))
    p.exact = None
    model = small_model(1, dtype="float64", sigma=0.6)
    tr = Trainer(p, model, pde_points=6, bc_points=2, resample_every=0, eval_every=5, val_points=200,
                 progress=False)
    h = tr.fit_lm(20, blas_threads=1, grow_gap=None)   # the fixed points kept, whatever the gap
    assert h.eval_step[0] == 5 and h.eval_error == [None] * len(h.eval_step) and tr.evaluate() is None
    assert h.loss[-1] < 1e-8 and h.eval_val_loss[-1] > 1e4 * h.loss[-1]
    assert tr.last_gap == h.eval_val_loss[-1] / h.loss[-1] and tr.pde_points == 6


def _overfitting_lm(**kw):
    """LM on six points of plane1d without an exact solution: it fits them, not the field."""
    import copy

    p = copy.copy(get_problem("plane1d", k=4.0))
    p.exact = None
    return Trainer(p, small_model(1, dtype="float64", sigma=0.6), pde_points=6, bc_points=2, resample_every=0,
                   eval_every=5, val_points=200, progress=False, **kw)


def test_lm_grows_its_points_while_the_gap_says_it_fits_them():
    """Fails without the rule (LMDriver.points_factor, the loop's growth): with the defaults
    (gap 3, two evaluations, a factor 1.5, at most 4 times the first draw) the six points grow
    to 9, 14 and 21, each draw new, and the validation loss falls with the gap."""
    from helmpinn import defaults

    sizes = []
    tr = _overfitting_lm(callbacks=[lambda t, step: sizes.append(len(t.training_set.x_pde))])
    h = tr.fit_lm(40, blas_threads=1)
    kept = _overfitting_lm()
    kept.fit_lm(40, blas_threads=1, grow_gap=None)
    grew = [step + 1 for step in range(1, len(sizes)) if sizes[step] != sizes[step - 1]]
    assert sorted(set(sizes)) == [6, 9, 14, 21] and tr.pde_points == 21 and tr.bc_points == 2   # 1-D: the ends
    gaps = [v / h.loss[s - 1] for s, v in zip(h.eval_step, h.eval_val_loss)]
    # each growth follows two evaluations in a row whose gap exceeded LM_GROW_GAP, the step after the second
    for step in grew:
        at = h.eval_step.index(step - 1)
        assert gaps[at] > defaults.LM_GROW_GAP and gaps[at - 1] > defaults.LM_GROW_GAP
    assert len(grew) == 3 and h.eval_val_loss[-1] < 1e-3 * kept.history.eval_val_loss[-1]
    # the trajectories agree up to the first growth, and stay the same without it
    first = grew[0] - 1
    assert h.loss[:first] == kept.history.loss[:first]


def test_lm_growth_is_capped_by_grow_max_and_memory():
    from helmpinn.training.drivers import LMDriver
    from helmpinn.optim.lm import LevenbergMarquardt

    tr = _overfitting_lm()
    tr.fit_lm(40, blas_threads=1, grow_max=2.0)
    assert tr.pde_points == 12          # 6, 9, then 12 = 2 x 6 rather than 14
    # a stubbed run: the gap given, LM's memory budget decides
    lm = LevenbergMarquardt(_overfitting_lm_residuals(), solver="primal")
    driver = LMDriver()
    driver.lm, driver.growth.first = lm, 100
    run = type("Run", (), {"last_gap": 50.0, "pde_points": 100})()
    assert [driver.points_factor(run) for _ in range(3)] == [1.0, 1.5, 1.0]   # patience 2, then counted anew
    run.last_gap = None
    assert driver.points_factor(run) == 1.0
    run.last_gap = 50.0
    from helmpinn.optim.lm import memory_estimate

    P, R = lm.res.num_params, lm.res.num_residuals
    lm.max_matrix_bytes = memory_estimate(P, R, "primal")   # the points fit now, 1.5 times them not
    assert memory_estimate(P, math.ceil(1.5 * R), "primal") > lm.max_matrix_bytes
    assert [driver.points_factor(run) for _ in range(3)] == [1.0, 1.0, 1.0] and not lm.fits(1.5) and lm.fits(1.0)
    lm.requested_solver = "cg"           # matrix-free: memory O(R + P), the points may grow
    assert lm.fits(1.5)


def _overfitting_lm_residuals():
    from helmpinn.optim.lm import CoreResiduals

    tr = _overfitting_lm()
    tr.resample()
    return CoreResiduals(tr.workspace, tr.batch, tr.weights)


def test_lm_grown_points_survive_a_checkpoint(tmp_path):
    """A run resumed from a checkpoint written after the points grew draws as many again."""
    path = tmp_path / "m.npz"
    tr = _overfitting_lm(checkpoint_path=path)
    tr.fit_lm(40, blas_threads=1)
    assert Model.load(path).metadata["grown_points"] == [21, 2]
    again = Trainer(tr.problem, Model.load(path), pde_points=6, bc_points=2, resample_every=0, eval_every=5,
                    val_points=200, progress=False)
    again.fit_lm(0, blas_threads=1)
    assert again.pde_points == 21 and np.array_equal(again.training_set.x_pde, tr.training_set.x_pde)
    plain = tmp_path / "plain.npz"
    _overfitting_lm(checkpoint_path=plain).fit_lm(3, blas_threads=1)
    assert "grown_points" not in Model.load(plain).metadata


def test_lm_stall_window_counts_only_the_current_points():
    """Fails when the stall window straddles a draw: losses on other points do not compare
    (with points redrawn every 3 steps a window of 3 never lies within one draw)."""
    tr = _overfitting_lm()
    tr.resample_every = 3
    tr.fit_lm(10, blas_threads=1, stall_window=3, stall_factor=1e-300, grow_gap=None)
    assert tr.step == 10 and tr.stop_reason is None and tr.status is RunStatus.STEPS_DONE
    tr = _overfitting_lm()
    tr.fit_lm(10, blas_threads=1, stall_window=3, stall_factor=1e-300, grow_gap=None)
    assert tr.step == 4 and tr.stop_reason.startswith("loss fell by less than")


def test_defaults_in_one_place():
    from helmpinn import defaults
    from helmpinn.training import trainer
    from helmpinn.training.drivers import AdamSettings, LMSettings

    assert trainer.default_settings is defaults.default_settings and trainer.auto_weights is defaults.auto_weights
    for name, d in (("plane1d", 1), ("dirichlet2d", 2), ("cube3d", 3)):
        p = get_problem(name)
        s = defaults.default_settings(p)
        assert s["steps"] == 2000 and s["sigma"] == max(p.wavenumber, 1) / (2 * math.pi * math.sqrt(d))
        assert (s["lr"], s["schedule"], s["betas"]) == (1e-2, "cosine", (0.9, 0.99))
    p = get_problem("plane1d")
    assert defaults.run_settings(p, "lbfgs")["dtype"] == "float64"
    assert defaults.run_settings(p, "adam")["warm_start"] == defaults.run_settings(p, "lbfgs")["warm_start"] == 0
    assert defaults.run_settings(p, "lm")["lm"]["solver"] == "auto"
    with pytest.raises(ValueError, match="optimizer must be one of"):
        defaults.run_settings(p, "sgd")
    for bad, match in (({"lr": -1.0}, "lr must be"), ({"schedule": "step"}, "schedule must be"),
                       ({"betas": (0.9, 1.0)}, "betas must be")):
        with pytest.raises(ValueError, match=match):
            AdamSettings(**bad)
        with pytest.raises(ValueError, match=match):
            Trainer(p, small_model(1), **bad)
    with pytest.raises(ValueError, match="stall_window"):
        LMSettings(stall_window=0)
    for bad in ({"grow_gap": 0.5}, {"grow_gap": math.inf}, {"grow_patience": 0}, {"grow_factor": 1.0},
                {"grow_max": 0.5}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            LMSettings(**bad)
    s = defaults.lm_settings(p)
    assert (s["grow_gap"], s["grow_patience"], s["grow_factor"], s["grow_max"]) == (
        LMSettings.grow_gap, LMSettings.grow_patience, LMSettings.grow_factor, LMSettings.grow_max) == (
        defaults.LM_GROW_GAP, defaults.LM_GROW_PATIENCE, defaults.LM_GROW_FACTOR, defaults.LM_GROW_MAX)
    assert defaults.run_settings(p, "lm")["lm"]["grow_gap"] == defaults.LM_GROW_GAP
    with pytest.raises(ValueError, match=r"unknown \['lamda'\]"):
        Trainer(p, small_model(1, dtype="float64"), progress=False).fit_lm(1, lamda=1.0)


def test_progress_bar_shows_the_error_and_the_validation_loss(capsys):
    tr = make_trainer(progress=True, eval_every=5, log_every=1)
    tr.fit(10)
    err = capsys.readouterr().err
    assert "loss=" in err and f"err={tr.last_error:.2e}" in err and f"val={tr.last_val_loss:.2e}" in err
    assert tr.last_gap == tr.history.eval_val_loss[-1] / tr.history.loss[-1] and f"gap={tr.last_gap:.3g}" in err


def test_progress_bar_with_a_time_limit_counts_seconds_and_leaves_out_absent_terms(capsys):
    """With a time limit the bar runs over its seconds (a step count's ETA would promise the step
    cap) and shows the steps in its status; a term the problem does not have (dirichlet2d: its
    Dirichlet values are the data term, it has no Robin term "bc") is not shown as 0."""
    tr = make_trainer(problem="dirichlet2d", progress=True, eval_every=5, log_every=1, time_limit=3600.0)
    tr.fit(10)
    err = capsys.readouterr().err
    assert "/3600 s" in err and "step 10/10" in err and "loss=" in err and "pde=" in err and "data=" in err
    assert "bc=" not in err and "step/s" not in err
    tr = make_trainer(problem="dirichlet2d", progress=True, log_every=1)
    tr.fit(3)
    err = capsys.readouterr().err
    assert "3/3" in err and " s," not in err and "data=" in err and "bc=" not in err


def test_each_stop_sets_its_status():
    """The loop records the kind of each stop where it arises: every step taken, a driver's own
    stop, a callback's; a fit that stopped early and then one that did not."""
    from helmpinn.training.drivers import Driver, StepInfo

    p = get_problem("plane1d", k=4.0)

    class Stops(Driver):
        def step(self, run):
            return StepInfo(1.0, {}, stop="converged" if run.step + 1 == 2 else None)

    def trainer(**kw):
        return Trainer(p, Model.create(1, 4, 8, 1, seed=0), pde_points=16, bc_points=2, progress=False, **kw)

    tr = trainer()
    assert tr.status is None
    tr.fit(3, optimizer=Stops())
    assert tr.step == 2 and tr.status is RunStatus.OPTIMIZER_STOP and tr.stop_reason == "converged"
    tr = trainer(callbacks=[lambda t, s: setattr(t, "stop_reason", "mine") if s == 2 else None])
    tr.fit(5)
    assert tr.step == 2 and tr.status is RunStatus.CALLBACK and tr.stop_reason == "mine" and tr.status.success
    tr.callbacks = []
    tr.fit(2)
    assert tr.step == 4 and tr.status is RunStatus.STEPS_DONE and tr.stop_reason is None
    with pytest.raises(TypeError, match="status: expected a RunStatus"):
        tr.stop("time limit", "words")


def test_the_polish_follows_the_status_not_the_words():
    """A callback's stop whose words start as a reached target's does not skip the L-BFGS
    polish (nothing decides on a stop by its message); a reached target does."""
    p = get_problem("plane1d", k=4.0)
    tiny = dict(ff_dim=4, hidden=8, layers=1, pde_points=40, sigma=0.6, eval_every=1, progress=False)

    def words(trainer, step):
        if step == 2:
            trainer.stop_reason = "target error 1 reached at step 2"
    sol = helmpinn.solve(p, optimizer="adam", steps=5, lbfgs=3, callbacks=[words], **tiny)
    assert sol.history.step[-1] > 2 and sol.settings["lbfgs"] == 3   # the polish ran after step 2
    reached = helmpinn.solve(p, optimizer="adam", steps=5, lbfgs=3, tol=10.0, **tiny)
    assert reached.status is RunStatus.TARGET_REACHED and reached.success and reached.history.step[-1] == 1
