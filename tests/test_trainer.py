"""Model persistence, optimisers and the trainer."""
import math
import os

import numpy as np
import pytest

import helmpinn
from helmpinn.model import Model
from helmpinn.optim import Adam, constant, cosine, exponential, lbfgs, make_schedule
from helmpinn.problems import get_problem
from helmpinn.trainer import Trainer, auto_weights, default_settings, relative_l2


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
    with pytest.raises(ValueError, match="not a readable helmpinn model"):
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
    threadpoolctl = pytest.importorskip("threadpoolctl")

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
    kw.setdefault("n_pde", 128)
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
    tr2 = Trainer(tr.problem, resumed, lr=1e-2, n_pde=128, progress=False, eval_every=0)
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
    assert s["n_pde"] > 0 and s["sigma"] > 0 and set(s["weights"]) == {"pde", "data", "bc"}
