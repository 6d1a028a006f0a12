"""helmpinn.training.dd_driver: decomposed models in the run loop (the Gauss-Newton driver and Adam through
Trainer, checkpoints and resume, the model protocol), the plan of hp.solve (decomposed above the
threshold, one network below) and the CLI's path to them."""
import importlib
import json
import math
import os
import sys

import numpy as np
import pytest

import helmpinn as hp
from helmpinn import defaults, waves
from helmpinn.training import dd_driver
from helmpinn.cli import main
from helmpinn.training.dd_driver import GNDriver, GNStepInfo, load_model
from helmpinn.models.decomposition import BoxConstraint, DecomposedModel, Rows
from helmpinn.training.drivers import AdamDriver, LMDriver, mismatch
from helmpinn.training.progress import bar_status as _bar_status
from helmpinn.problems.geometry import Box

SMALL = dict(ff_dim=4, hidden_dim=8, overlap=0.6)


def box(wavelengths=2.0):
    return hp.get_problem("box-source", wavelengths=wavelengths)


def small_model(problem, grid=(2, 2), seed=0, cls=DecomposedModel):
    k = problem.wavenumber
    return cls.create([0, 0], [1, 1], [grid], wavenumber=k, constraint=BoxConstraint([0, 0], [1, 1], 1 / k),
                      seed=seed, **SMALL)


def trainer(problem, model, **kw):
    opts = dict(pde_points=600, bc_points=40, resample_every=0, eval_every=2, progress=False, n_test=15,
                val_points=100)
    return hp.Trainer(problem, model, **{**opts, **kw})


def test_gn_driver_lowers_the_loss_through_the_trainer():
    p = box()
    m = small_model(p)
    t = trainer(p, m)
    h = t.fit(5, optimizer="gn")
    assert h.step == [1, 2, 3, 4, 5] and t.stop_reason is None
    assert h.loss[-1] < 0.1 * h.loss[0]
    assert all(lam > 0 for lam in h.lr)                     # the damping is the history's rate
    assert h.eval_step == [2, 4, 5] and all(e is not None for e in h.eval_error)
    assert h.eval_val_loss[-1] < h.eval_val_loss[0]          # the validation loss, from the model's residuals
    s = t.driver.summary()
    assert s["steps"] == 5 and len(s["cg_iterations"]) == 5 and min(s["cg_iterations"]) >= 1
    # the user's DecomposedModel itself was trained (it has the run loop's protocol)
    assert t.model is m
    np.testing.assert_array_equal(t.model.predict(t.x_test), m.predict(t.x_test))


def test_step_info_and_progress_show_damping_and_cg_iterations():
    p = box()
    t = trainer(p, small_model(p))
    driver = GNDriver(cg_maxiter=50)
    t.fit(1, optimizer=driver)
    info = driver.step(t)
    assert isinstance(info, GNStepInfo) and info.trials >= 1 and info.cg_iterations
    status = _bar_status(t, info)
    assert f"lam={info.rate:.1e}" in status and f"cg={sum(info.cg_iterations)}" in status and "err=" in status
    assert "step=" not in status and driver.log[-1]["alpha"] == 1.0   # a full step


def test_progress_shows_a_shortened_step():
    """A trial whose step was halved (``backtrack``) shows the fraction taken, and the log keeps it."""
    from test_gauss_newton import _Overshoot

    p = box()
    t = trainer(p, small_model(p))
    driver = GNDriver(lam=1e-6, cg_tol=1e-10, cg_maxiter=500, cg_warm=False)
    t.fit(1, optimizer=driver)
    driver.gn.__class__ = _Overshoot   # CG's answers six times too long: the step accepted is shortened
    driver.gn.scale = 6.0
    info = driver.step(t)
    alpha = driver.log[-1]["alpha"]
    assert alpha < 1.0 and info.accepted
    assert f"step={alpha:g}" in _bar_status(t, info)


def test_default_optimizer_of_a_decomposed_model_is_gn_and_one_network_drivers_are_refused():
    p = box()
    t = trainer(p, small_model(p))
    t.fit(1)
    assert isinstance(t.driver, GNDriver)
    for name in ("lm", "lbfgs"):
        with pytest.raises(TypeError, match=f"optimizer '{name}' trains one network, not a decomposed model "
                                            r"\(the model is a DecomposedModel\)"):
            t.fit(1, optimizer=name)
    net = hp.Trainer(p, hp.Model.create(2, 4, 8, 1, dtype="float64"), pde_points=100, bc_points=20, progress=False)
    with pytest.raises(TypeError, match="optimizer 'gn' trains a decomposed model, not one network"):
        net.fit(1, optimizer="gn")


def test_checkpoint_and_resume_give_the_uninterrupted_iterate(tmp_path):
    p = box()
    straight = trainer(p, small_model(p))
    straight.fit(4, optimizer="gn")

    path = tmp_path / "run.npz"
    first = trainer(p, small_model(p), checkpoint_path=path)
    first.fit(2, optimizer="gn")
    back = load_model(path)
    assert isinstance(back, DecomposedModel) and back.optimizer_state["step"] == 2
    assert back.optimizer_state["gn_lambda"] == first.driver.gn.lam
    second = trainer(p, back, checkpoint_path=path)
    second.fit(2, optimizer="gn")
    assert second.step == 4
    np.testing.assert_array_equal(second.model.params, straight.model.params)
    assert second.history.loss == straight.history.loss[2:]


# -- Adam on a decomposed model ---------------------------------------------------------------------
def _adam_case(case):
    """(model, training set, weights): free-source with its PML (the general operator's a and b
    at the PDE points, data rows on the wall, no constraint) or box-source under the hard
    constraint with boundary data rows (which the constraint satisfies: left out)."""
    rng = np.random.default_rng(3)
    if case == "pml":
        p = hp.get_problem("free-source", wavelengths=1.0, s=0.2)
        lo, hi = p.sampling_domain.bounds
        m = DecomposedModel.create(lo, hi, [(2, 2)], wavenumber=p.wavenumber, seed=1, **SMALL)
        ts = p.sample(300, 40, rng)
        assert ts.a_pde is not None and len(ts.x_data)
    else:
        p = box()
        m = small_model(p, seed=1)
        ts = p.sample(300, 40, rng)
    m.params[...] += 0.1 * rng.normal(size=m.num_params)   # away from the initial zeros of the last layers
    return m, ts, {"pde": 1.0, "data": 7.0, "bc": 3.0}


@pytest.mark.parametrize("case", ["pml", "hard"])
def test_adam_gradient_is_the_loss_derivative(case):
    """The loss and gradient Adam steps on (DecomposedModel.objective) in float64: the
    loss is Σ r² of every row's residual (the hard constraint's dropped rows add nothing), the
    gradient equals central finite differences along coordinates and random directions."""
    m, ts, w = _adam_case(case)
    value_and_grad = m.objective(ts, w)
    theta = m.params.copy()
    grad = np.zeros(m.num_params)
    loss, terms = value_and_grad(theta, grad)
    full = m.residuals_for(Rows.from_training_set(ts, w))   # every row, none dropped
    r = full.residuals(theta)
    assert loss == pytest.approx(float(r @ r), rel=1e-12)
    if case == "hard":
        assert len(m.training_rows(ts, w)) == len(ts.x_pde) < len(full.rows)   # the data rows left out
        assert terms["data"] == 0.0
    sums = full.term_losses(r)
    assert terms["pde"] == pytest.approx(sums["pde"] / w["pde"], rel=1e-12)
    if case == "pml":
        assert terms["data"] == pytest.approx(sums["data"] / w["data"], rel=1e-12) and terms["data"] > 0

    def f(th):
        return value_and_grad(th, np.zeros(m.num_params))[0]
    h = 1e-6
    rng = np.random.default_rng(0)
    for i in rng.choice(m.num_params, 8, replace=False):
        e = np.zeros(m.num_params)
        e[i] = h
        fd = (f(theta + e) - f(theta - e)) / (2 * h)
        assert fd == pytest.approx(grad[i], rel=1e-5, abs=1e-7 * np.max(np.abs(grad)))
    for _ in range(3):
        v = rng.normal(size=m.num_params)
        fd = (f(theta + h * v) - f(theta - h * v)) / (2 * h)
        assert fd == pytest.approx(grad @ v, rel=1e-6)
    np.testing.assert_array_equal(m.params, theta)   # nothing moved


def test_adam_trains_a_decomposed_model_through_the_trainer():
    p = box()
    m = small_model(p)
    t = trainer(p, m, lr=1e-2, schedule="constant")
    h = t.fit(30, optimizer="adam")
    assert isinstance(t.driver, AdamDriver) and t.stop_reason is None and h.step == list(range(1, 31))
    assert h.loss[-1] < 0.2 * h.loss[0]
    assert h.lr == [1e-2] * 30 and t.optimizer.step_count == 30   # the Trainer's Adam
    assert h.eval_val_loss[-1] < h.eval_val_loss[0] and all(e is not None for e in h.eval_error)
    assert all(math.isfinite(x) for x in h.pde) and h.data == [0.0] * 30   # data rows: held by the constraint
    assert t.model.params is m.params   # the user's DecomposedModel was trained in place
    t.fit(5, optimizer="gn")            # and Gauss-Newton goes on from there
    assert h.step[-1] == 35 and h.loss[-1] < h.loss[29]


def test_adam_on_a_decomposed_model_checkpoint_and_resume(tmp_path):
    p = box()
    kw = dict(lr=1e-2, schedule="constant")
    straight = trainer(p, small_model(p), **kw)
    straight.fit(6, optimizer="adam")

    path = tmp_path / "run.npz"
    first = trainer(p, small_model(p), checkpoint_path=path, **kw)
    first.fit(3, optimizer="adam")
    back = load_model(path)
    assert isinstance(back, DecomposedModel) and back.optimizer_state["step"] == 3
    np.testing.assert_array_equal(np.asarray(back.optimizer_state["v"]), first.optimizer.v)
    second = trainer(p, back, checkpoint_path=path, **kw)
    second.fit(3, optimizer="adam")
    assert second.step == 6 and second.optimizer.step_count == 6
    np.testing.assert_array_equal(second.model.params, straight.model.params)
    assert second.history.loss == straight.history.loss[3:]


def test_adam_on_a_decomposed_model_restores_the_last_good_state_on_a_non_finite_loss():
    p = box()

    def poison(run, step):   # the next step meets a non-finite loss
        if step == 2:
            run.model.params[:] = np.inf
    t = trainer(p, small_model(p), callbacks=[poison])
    t.fit(5, optimizer="adam")
    assert t.diverged and t.stop_reason.startswith("non-finite loss") and t.step == 0
    assert np.all(np.isfinite(t.model.params)) and t.optimizer.step_count == 0


def test_adam_on_new_points_rebuilds_the_loss():
    """With resample_every=2 the third step's loss is the loss on the points drawn for it (at
    the parameters after step 2), not on the first draw's."""
    p = box()
    seen = {}

    def keep(run, step):
        seen[step] = (run.model.params.copy(), run.training_set)
    t = trainer(p, small_model(p), lr=1e-2, schedule="constant", resample_every=2, callbacks=[keep])
    h = t.fit(3, optimizer="adam")
    theta, first = seen[2]
    assert seen[3][1] is t.training_set and t.training_set is not first
    grad = np.zeros(t.model.num_params)
    on_new = t.model.objective(t.training_set, t.weights)(theta, grad)[0]
    on_old = t.model.objective(first, t.weights)(theta, grad)[0]
    assert h.loss[2] == pytest.approx(on_new, rel=1e-12) and abs(on_old - on_new) > 1e-6 * on_new


def _mpi_trainer(comm=None):
    """A run loop over a 2x2 decomposition of box-source (2 wavelengths, hard constraint), Adam
    at a constant learning rate."""
    p = box()
    return hp.Trainer(p, small_model(p, seed=5), pde_points=400, bc_points=0, resample_every=0, eval_every=0,
                      val_points=0, progress=False, comm=comm, seed=11, lr=1e-2, schedule="constant")


def test_adam_over_two_ranks_takes_one_process_steps(tmp_path):
    """Trainer(comm=) with optimizer "adam" on a decomposed model: each rank draws its share of
    the points, every rank holds all of them and its own subdomains (the residuals summed over
    the ranks, the gradient's ranges gathered), and the ranks' parameters and losses equal one
    process's on that union of points."""
    import pickle
    import subprocess

    from conftest import mpiexec_command

    cmd = [*mpiexec_command(2), sys.executable, os.path.abspath(__file__), os.fspath(tmp_path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"mpiexec -n 2 did not finish (a rank waiting in a collective?):\n{exc.stdout}\n{exc.stderr}")
    assert proc.returncode == 0, f"mpiexec -n 2 failed:\n{proc.stdout}\n{proc.stderr}"
    got = np.load(tmp_path / "adam.npz")
    np.testing.assert_array_equal(got["last0"], got["last1"])   # replicas stay equal
    with open(tmp_path / "points.pkl", "rb") as fh:
        union = pickle.load(fh)
    t = _mpi_trainer()
    t.resample()
    np.testing.assert_array_equal(t.model.params, got["start"])
    t.training_set = union
    t.fit(5, optimizer="adam")
    scale = np.max(np.abs(t.model.params))
    assert np.max(np.abs(t.model.params - got["start"])) > 1e-3 * scale
    assert np.max(np.abs(t.model.params - got["last0"])) <= 1e-10 * scale
    np.testing.assert_allclose(t.history.loss, got["loss"], rtol=1e-10)


def test_model_protocol_save_load_copy(tmp_path):
    p = box()
    m = small_model(p)
    m.optimizer_state = {"gn_lambda": 0.5, "step": 3}
    c = m.copy()
    c.params[0] += 1.0
    assert c.params[0] != m.params[0] and c.optimizer_state == m.optimizer_state
    assert m.device == "cpu" and m.to("cpu") is m and m.in_dim == 2 and m.dtype == np.float64
    with pytest.raises(ValueError, match="device: a decomposed model trains on the CPU"):
        m.to("cuda")
    m.save(tmp_path / "m.npz")   # a plain load gives the optimiser state back as its own, not in the metadata
    back = DecomposedModel.load(tmp_path / "m.npz")
    assert back.optimizer_state == {"gn_lambda": 0.5, "step": 3} and "optimizer_state" not in back.metadata


def test_load_model_reads_both_kinds(tmp_path):
    p = box()
    m = small_model(p)
    m.save(tmp_path / "sub" / "dd.npz", optimizer_state={"gn_lambda": 0.25}, metadata={"a": np.float64(1.5)})
    back = load_model(tmp_path / "sub" / "dd.npz")
    assert back.optimizer_state == {"gn_lambda": 0.25} and back.metadata == {"a": 1.5}
    np.testing.assert_array_equal(back.params, m.params)
    net = hp.Model.create(2, 4, 8, 1)
    net.save(tmp_path / "net.npz")
    assert isinstance(load_model(tmp_path / "net.npz"), hp.Model)
    (tmp_path / "junk.npz").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="junk.npz"):
        load_model(tmp_path / "junk.npz")
    os.mkfifo(tmp_path / "fifo.npz")   # refused, not opened (a FIFO would block the reader)
    with pytest.raises(ValueError, match="fifo.npz: not a regular file"):
        load_model(tmp_path / "fifo.npz")


# -- the plan --------------------------------------------------------------------------------------
def test_threshold_from_the_measurements():
    """The problems measured on both sides (dd_driver's docstring): one network at 3 wavelengths
    and below, a decomposition from 3.5 (box-source), 3.95 (scatter-soft k = 3), 4 (free-source
    W = 2 with its PML, dirichlet2d n = 4) up."""
    assert not defaults.should_decompose(box(3.0)) and defaults.should_decompose(box(3.5))
    assert not defaults.should_decompose(hp.get_problem("heterogeneous2d"))
    assert defaults.should_decompose(hp.get_problem("scatter-soft", k=3.0))
    assert defaults.should_decompose(hp.get_problem("dirichlet2d", n=4))
    free = lambda w: hp.get_problem("free-source", wavelengths=w)   # noqa: E731 - 2 + 2 wavelengths of PML
    assert not defaults.should_decompose(free(1.0)) and defaults.should_decompose(free(1.5))
    assert not defaults.should_decompose(hp.get_problem("plane1d", k=200.0))


def test_threshold_counts_an_elongated_domain_by_its_area():
    """The ducts measured (dd_driver's docstring): 2 × 0.8 and 3 × 0.6 (4.4 and 6.6 wavelengths
    long, 2.78 and 2.95 across) train one network; 2 × 1.2 (3.41 across) is decomposed."""
    k0 = 4 * math.pi

    def duct(lx, ly):
        return hp.Problem(Box([0, 0], [lx, ly]), kappa=(1.1 * k0) ** 2, bcs={"*": hp.Sommerfeld(k0)})

    assert not defaults.should_decompose(duct(2.0, 0.8)) and not defaults.should_decompose(duct(3.0, 0.6))
    assert defaults.should_decompose(duct(2.0, 1.2))


def test_the_3d_threshold_lies_between_the_cubes_measured():
    """``cube3d`` at k = 3π (2.1 across: one network ahead after 150 s) trains one network, at
    k = 4π (2.6 across: the decomposition ahead) a decomposed model (dd_driver's docstring)."""
    assert not defaults.should_decompose(hp.get_problem("cube3d", k=3 * math.pi))
    assert defaults.should_decompose(hp.get_problem("cube3d", k=4 * math.pi))


def test_decomposed_settings_reproduce_the_measured_runs():
    s = dd_driver.decomposed_settings(box(5.0))
    dd = s["decomposition"]
    assert s["optimizer"] == "gn" and dd["grids"] == [[5, 5]] and dd["constraint"] and s["bc_points"] == 0
    assert s["pde_points"] == 16000 and (s["ff_dim"], s["hidden"], s["layers"]) == (16, 32, 1)
    f = dd_driver.decomposed_settings(hp.get_problem("free-source", wavelengths=5.0))
    assert f["decomposition"]["grids"] == [[6, 6]] and not f["decomposition"]["constraint"] and f["bc_points"] > 0
    # backtracking in 2-D and 3-D, where it was measured to help (dd_driver's docstring)
    from helmpinn.optim.gauss_newton import BACKTRACK   # the solver's default, not a copy of it

    assert s["gn"]["backtrack"] == f["gn"]["backtrack"] == BACKTRACK == 3
    # the damping halfway between Marquardt's and the identity under the hard constraint (the
    # boxes, in 2-D and 3-D), Marquardt's with a PML
    assert s["gn"]["damping"] == "geometric" and f["gn"]["damping"] == "marquardt"
    c3 = dd_driver.decomposed_settings(hp.get_problem("cube3d", k=8 * math.pi))["gn"]
    assert c3["backtrack"] == BACKTRACK and c3["damping"] == "geometric"
    # mode rows in 2-D and 3-D (measured there), not in 1-D; the 32 most amplified within 5% of κ
    assert s["gn"]["resonance"] == f["gn"]["resonance"] == c3["resonance"] == waves.RESONANCE_WITHIN
    assert s["gn"]["resonance_most"] == c3["resonance_most"] == waves.RESONANCE_MOST == 32
    assert dd_driver.GNDriver(**{**c3, "resonance_most": 64}).settings.resonance_most == 64
    assert dd_driver.decomposed_settings(hp.get_problem("plane1d", k=400.0))["gn"]["resonance"] == 0
    # the points grow at a lower gap than LM's (dd_driver's docstring), and the driver gets it
    from helmpinn.defaults import LM_GROW_GAP

    assert s["gn"]["grow_gap"] == defaults.DD_GROW_GAP == 1.5 < LM_GROW_GAP
    assert dd_driver.GNDriver(**s["gn"]).settings.grow_gap == defaults.DD_GROW_GAP
    c = dd_driver.decomposed_settings(box(5.0), subdomains_per_wavelength=0.5, coarse_level=True, hidden=16)
    assert c["decomposition"]["grids"] == [[3, 3], [1, 1]] and c["hidden"] == 16
    with pytest.raises(ValueError, match=r"decomposition: unknown settings \['width'\]"):
        dd_driver.decomposed_settings(box(5.0), width=3)


TINY_DD = dict(steps=2, pde_points=500, eval_every=1, decomposition={"ff_dim": 4, "hidden": 8})
TINY_NET = dict(ff_dim=4, hidden=8, layers=1, pde_points=200, bc_points=40, steps=1, lm={"blas_threads": 1})


def test_solve_decomposes_above_the_threshold_only(monkeypatch, tmp_path):
    p = box(2.0)
    below = hp.solve(p, progress=False, **TINY_NET)
    assert below.settings["model"] == "network" and isinstance(below.model, hp.Model)
    monkeypatch.setitem(defaults.DECOMPOSE_ABOVE, 2, 1.5)
    seen = []
    above = hp.solve(p, progress=False, callbacks=[lambda run, step: seen.append(step)], **TINY_DD)
    assert above.settings["model"] == "decomposed" and above.settings["optimizer"] == "gn"
    assert isinstance(above.model, DecomposedModel) and above.model.levels[0].grid == (2, 2)
    assert seen == [1, 2] and above.history.loss[-1] < above.history.loss[0] and above.error is not None
    above.save(tmp_path / "u.npz")
    back = load_model(tmp_path / "u.npz")
    assert back.metadata["settings"]["model"] == "decomposed"
    np.testing.assert_array_equal(back.predict(p.test_points(5)), above.predict(p.test_points(5)))
    # each choice can be set: one network above the threshold, a decomposition below it
    net = hp.solve(p, progress=False, model="network", **TINY_NET)
    assert net.settings["model"] == "network"
    monkeypatch.setitem(defaults.DECOMPOSE_ABOVE, 2, 4.5)
    dd = hp.solve(p, progress=False, optimizer="gn", **TINY_DD)
    assert dd.settings["model"] == "decomposed"
    mine = small_model(p)
    given = hp.solve(p, progress=False, model=mine, steps=1, pde_points=500)
    assert given.model.params is mine.params and given.settings["optimizer"] == "gn"


def test_solve_trains_a_decomposed_model_by_adam_when_asked():
    p = box(2.0)
    s = dd_driver.decomposed_settings(box(5.0), optimizer="adam")
    assert s["optimizer"] == "adam" and s["lr"] == defaults.DD_ADAM_SETTINGS["lr"] and s["schedule"] == "constant"
    assert s["decomposition"] == dd_driver.decomposed_settings(box(5.0))["decomposition"]   # the same model
    with pytest.raises(ValueError, match="optimizer: a decomposed model trains with 'adam' or 'gn', got 'lm'"):
        dd_driver.decomposed_settings(p, optimizer="lm")
    sol = hp.solve(p, progress=False, model="decomposed", optimizer="adam", lr=1e-2, **{**TINY_DD, "steps": 20})
    assert sol.settings["model"] == "decomposed" and sol.settings["optimizer"] == "adam"
    assert isinstance(sol.model, DecomposedModel) and sol.history.lr == [1e-2] * 20
    assert sol.history.loss[-1] < 0.5 * sol.history.loss[0]
    mine = small_model(p)
    given = hp.solve(p, progress=False, model=mine, optimizer="adam", steps=2, pde_points=500)
    assert given.model.params is mine.params and given.settings["optimizer"] == "adam" and given.history.step == [1, 2]


def test_one_table_says_which_optimiser_trains_which_model():
    from helmpinn.training.drivers import DRIVERS

    assert {name: d.trains for name, d in DRIVERS.items()} == {
        "adam": None, "lbfgs": ("network",), "lm": ("network",), "gn": ("decomposed",)}   # Adam: any kind
    assert mismatch("network", "adam") is None and mismatch("decomposed", "adam") is None
    assert mismatch("decomposed", "lbfgs") == "trains one network, not a decomposed model"
    assert mismatch("network", "gn") == "trains a decomposed model, not one network"
    assert mismatch("decomposed", GNDriver()) is None


def test_solve_refuses_mismatched_choices():
    p = box(2.0)
    with pytest.raises(ValueError, match=r"optimizer 'lm' trains one network, not a decomposed model "
                                         r"\(model='decomposed'\)"):
        hp.solve(p, model="decomposed", optimizer="lm")
    with pytest.raises(ValueError, match="optimizer 'gn' trains a decomposed model, not one network"):
        hp.solve(p, model="network", optimizer="gn")
    with pytest.raises(ValueError, match="optimizer 'lm' trains one network, not a decomposed model"):
        hp.solve(p, model="decomposed", optimizer=LMDriver())   # a driver instance: its own table entry
    # model "auto" with a driver picks a kind the driver trains: one network for LM on a wide problem
    assert hp.run_plan(box(5.0), optimizer=LMDriver()).model == "network"
    assert hp.run_plan(box(5.0), optimizer=GNDriver()).model == "decomposed"
    with pytest.raises(ValueError, match="model: expected one of"):
        hp.solve(p, model="grid")
    with pytest.raises(TypeError, match="model: expected 'auto'"):
        hp.solve(p, model=3)


def test_solve_passes_callbacks_to_the_run_loop():
    seen = []
    hp.solve(hp.get_problem("plane1d", k=4.0), progress=False, callbacks=[lambda run, step: seen.append(step)],
             steps=3, **{k: v for k, v in TINY_NET.items() if k != "steps"})
    assert seen == [1, 2, 3]


def test_solve_module_does_not_shadow_the_function():
    mod = importlib.import_module("helmpinn.solving")
    assert hp.solve is mod.solve and callable(hp.solve) and hp.Solution is mod.Solution
    assert "helmpinn.solve" not in sys.modules


# -- the CLI ----------------------------------------------------------------------------------------
def test_cli_auto_and_gn_train_a_decomposed_model(monkeypatch, tmp_path):
    monkeypatch.setitem(defaults.DECOMPOSE_ABOVE, 2, 1.5)
    out = tmp_path / "run"
    common = ["--problem", "box-source", "--wavelengths", "2", "--points", "500", "--hidden", "8",
              "--fourier", "4", "--quiet", "--out", str(out)]
    assert main(["train", "--optimizer", "auto", "--steps", "2", *common]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["optimizer"] == "gn" and metrics["gn"]["steps"] == 2 == metrics["final_step"]
    assert metrics["settings"]["decomposition"]["grids"] == [[2, 2]] and (out / "solution.png").exists()
    model = load_model(out / "model.npz")
    assert isinstance(model, DecomposedModel) and model.optimizer_state["step"] == 2
    assert main(["train", "--resume", str(out), "--steps", "3", "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["final_step"] == 3 and metrics["history"]["step"] == [1, 2, 3]
    out2 = tmp_path / "gn"
    assert main(["train", "--optimizer", "gn", "--steps", "1", "--no-plots", *common[:-1], str(out2)]) == 0
    assert json.loads((out2 / "metrics.json").read_text())["settings"]["optimizer"] == "gn"
    assert main(["train", "--optimizer", "gn", "--dtype", "float32", *common[:-1], str(tmp_path / "x")]) == 2
    assert main(["train", "--optimizer", "gn", "--warm-start", "3", *common[:-1], str(tmp_path / "x")]) == 2
    assert main(["train", "--optimizer", "gn", "--lbfgs", "3", *common[:-1], str(tmp_path / "x")]) == 2


def test_cli_model_decomposed_with_adam(tmp_path, capsys):
    """--model decomposed --optimizer adam: Adam on the decomposition hp.solve would build (its
    Adam settings), resumable; the combinations that cannot run are refused naming the flags."""
    out = tmp_path / "adam"
    common = ["--problem", "box-source", "--wavelengths", "2", "--points", "500", "--hidden", "8",
              "--fourier", "4", "--quiet", "--no-plots"]
    assert main(["train", "--model", "decomposed", "--optimizer", "adam", "--steps", "3", "--eval-every", "3",
                 *common, "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    s = metrics["settings"]
    assert (s["optimizer"], s["model"], metrics["final_step"]) == ("adam", "decomposed", 3)
    assert s["lr"] == defaults.DD_ADAM_SETTINGS["lr"] and s["decomposition"]["grids"] == [[2, 2]]
    model = load_model(out / "model.npz")
    assert isinstance(model, DecomposedModel) and model.optimizer_state["step"] == 3
    assert main(["train", "--resume", str(out), "--steps", "5", "--quiet", "--no-plots"]) == 0
    assert json.loads((out / "metrics.json").read_text())["history"]["step"][-1] == 5
    capsys.readouterr()
    bad = {("--model", "decomposed", "--optimizer", "lm"):
           "--optimizer lm trains one network, not a decomposed model (--model decomposed)",
           ("--model", "network", "--optimizer", "gn"):
           "--optimizer gn trains a decomposed model, not one network (--model network)",
           ("--model", "decomposed", "--warm-start", "3"): "--lbfgs and --warm-start train one network",
           ("--model", "decomposed", "--device", "cuda"): "a decomposed model trains on the CPU only"}
    for flags, message in bad.items():
        assert main(["train", *flags, *common, "--out", str(tmp_path / "bad")]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_gn_settings_are_checked():
    with pytest.raises(ValueError, match=r"Gauss-Newton options: unknown \['solver'\]"):
        GNDriver(solver="cg")
    with pytest.raises(ValueError, match="stall_window >= 1"):
        GNDriver(stall_window=0)
    with pytest.raises(ValueError, match="cg_tol"):
        p = box()
        trainer(p, small_model(p)).fit(1, optimizer=GNDriver(cg_tol=2.0))


def test_stop_request_time_limit_and_divergence_with_gn():
    p = box()
    t = trainer(p, small_model(p), callbacks=[lambda run, step: step == 2 and run.request_stop()])
    t.fit(5, optimizer="gn")
    assert t.step == 2 and t.stop_reason == "stop requested at step 2"
    now = [0.0]

    def tick(run, step):
        now[0] += 1.0
    t = trainer(p, small_model(p), callbacks=[tick], time_limit=3.0, clock=lambda: now[0])
    t.fit(10, optimizer="gn")
    assert t.step == 3 and t.stop_reason == "time limit 3 s reached at step 3"

    def poison(run, step):   # the next step meets a non-finite loss
        if step == 2:
            run.model.params[:] = np.inf
    t = trainer(p, small_model(p), callbacks=[poison])
    t.fit(5, optimizer="gn")
    assert t.diverged and "non-finite" in t.stop_reason and np.all(np.isfinite(t.model.params))


def test_gn_grows_its_points_while_the_gap_says_it_fits_them():
    """Fails without GNDriver.points_factor: 2x2 subnetworks (P 156) on 40 points fit them
    rather than the field; the gap exceeds 3 and the points grow by LM's rule (x 1.5, up to 4
    times the first draw), each draw new; with ``grow_gap=None`` they stay."""

    p = box()
    sizes = []
    t = trainer(p, small_model(p), pde_points=40, bc_points=0, eval_every=1, val_points=400,
                callbacks=[lambda tr, step: sizes.append(len(tr.training_set.x_pde))])
    h = t.fit(30, optimizer=GNDriver(lam=1e-3, cg_maxiter=400))
    kept = trainer(p, small_model(p), pde_points=40, bc_points=0, eval_every=1, val_points=400)
    kept.fit(30, optimizer=GNDriver(lam=1e-3, cg_maxiter=400, grow_gap=None))
    assert kept.pde_points == 40
    assert sorted(set(sizes))[:2] == [40, 60] and t.pde_points == max(sizes) <= 160
    grew = [i + 1 for i in range(1, len(sizes)) if sizes[i] != sizes[i - 1]]
    gaps = [v / h.loss[s - 1] for s, v in zip(h.eval_step, h.eval_val_loss)]
    for step in grew:   # each growth after two evaluations in a row above the gap
        at = h.eval_step.index(step - 1)
        assert gaps[at] > defaults.LM_GROW_GAP and gaps[at - 1] > defaults.LM_GROW_GAP
    with pytest.raises(ValueError, match="grow_gap"):
        GNDriver(grow_gap=0.5)


# -- the MPI worker (every rank, under mpiexec; test_adam_over_two_ranks_takes_one_process_steps) -----
def _worker(folder: str) -> None:
    import pickle

    from mpi4py import MPI

    from helmpinn.distributed import gather_training_set

    comm = MPI.COMM_WORLD
    t = _mpi_trainer(comm)
    start = t.model.params.copy()
    t.fit(5, optimizer="adam")
    assert len(t.training_set.x_pde) < 400 and not t.diverged, t.stop_reason   # this rank's share
    union = gather_training_set(comm, t.training_set)
    last = comm.gather(t.model.params.copy(), root=0)
    if comm.Get_rank() == 0:
        np.savez(os.path.join(folder, "adam.npz"), start=start, loss=np.array(t.history.loss),
                 **{f"last{k}": v for k, v in enumerate(last)})
        with open(os.path.join(folder, "points.pkl"), "wb") as fh:
            pickle.dump(union, fh)


if __name__ == "__main__":
    from mpi4py import MPI

    try:
        _worker(sys.argv[1])
    except BaseException:  # fail the whole job now rather than leave the other rank waiting
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


def test_gn_weighs_a_closed_box_near_resonance_by_its_mode_rows():
    """``resonance`` (the plan's default): the residuals of a closed box near resonance carry the
    mode rows of its near-resonant modes; under the hard constraint by Green's identity
    (helmpinn.problems.waves.resonance_green_rows: each row ``sqrt(a² − 1) sqrt(w_pde / |Ω|)
    ((κ − λ)⟨u, ψ̂⟩ − ⟨f, ψ̂⟩)``, checked here from the model's predictions on a fine grid, its
    value rows adding nothing to the loss), without it the points' sum (resonance_rows at the
    run's PDE points); none where it is 0 or the problem has no such mode; bad values are refused."""
    p = box(5.0)
    settings = dd_driver.decomposed_settings(p)
    assert settings["gn"]["resonance"] == waves.RESONANCE_WITHIN
    t = trainer(p, small_model(p, grid=(3, 3)))
    h = t.fit(2, optimizer=GNDriver(resonance=0.05))
    res = t.driver.gn.res
    assert h.loss[-1] < h.loss[0]
    modes = [m for m in waves.box_resonances(p, 0.05) if np.isfinite(m.amplification)]
    assert res.num_modes == len(modes) == 7
    n = res.num_points
    r = res.residuals(t.model.params)
    got = r[n:n + 7] + 1j * r[n + 7:]
    value_rows = res.rows.term == "modes"
    assert np.all(res.modes.toarray()[~value_rows] == 0) and (~value_rows).sum() == 600
    nq = math.isqrt(int(value_rows.sum()))   # the rows read u on an nq × nq Gauss-Legendre grid
    tq, wq = np.polynomial.legendre.leggauss(nq)
    X, Y = np.meshgrid((tq + 1) / 2, (tq + 1) / 2, indexing="ij")
    x = np.stack([X.ravel(), Y.ravel()], 1)
    np.testing.assert_allclose(res.rows.x[value_rows], x, rtol=0, atol=1e-15)
    w = np.outer(wq / 2, wq / 2).ravel()
    xf = (np.arange(1000) + 0.5) / 1000   # ⟨f, ψ̂⟩ by the midpoint rule (f vanishes at the walls)
    sd = 0.25 / 5.0   # box-source's default: 0.25 / wavelengths
    F = np.exp(-((xf[:, None] - 0.5) ** 2 + (xf[None, :] - 0.5) ** 2) / (2 * sd ** 2)) / (2 * np.pi * sd ** 2)
    u = t.model.predict(x).reshape(-1)
    for i, m in enumerate(modes):
        psi = np.sin(m.mode[0] * np.pi * x[:, 0]) * np.sin(m.mode[1] * np.pi * x[:, 1]) * 2.0   # ψ̂: norm 1
        fhat = np.sin(m.mode[0] * np.pi * xf) @ F @ np.sin(m.mode[1] * np.pi * xf) * 2.0 / 1000 ** 2
        row = (p.kappa - m.eigenvalue) * (w @ (u * psi)) - fhat
        expected = math.sqrt(m.amplification ** 2 - 1) * math.sqrt(t.weights["pde"]) * row
        assert abs(got[i] - expected) < 1e-8 * max(abs(expected), 1e-3), (m.mode, got[i], expected)
    assert res.term_losses(r)["modes"] < 1e-12 * h.loss[-1]
    # without the hard constraint: the points' sum
    soft = trainer(p, DecomposedModel.create([0, 0], [1, 1], [(3, 3)], wavenumber=p.wavenumber, seed=0, **SMALL))
    soft.fit(1, optimizer=GNDriver(resonance=0.05))
    rows = soft.driver.gn.res.rows
    np.testing.assert_array_equal(soft.driver.gn.res.modes.toarray(), waves.resonance_rows(p, rows.x, rows.term == "pde", 0.05))
    # the constraint forced on a box with a Neumann wall: Green's identity would miss its boundary term
    neumann = hp.Problem(hp.geometry.Box([0, 0], [1, 1]), kappa=p.kappa, source=p.source_at,
                         bcs={"xmin": hp.Neumann(), "*": hp.Dirichlet()})
    forced = trainer(neumann, small_model(p, grid=(3, 3)), bc_points=0)
    forced.fit(1, optimizer=GNDriver(resonance=0.05))
    rows = forced.driver.gn.res.rows
    assert forced.driver.gn.res.num_modes > 0 and not np.any(rows.term == "modes")
    np.testing.assert_array_equal(forced.driver.gn.res.modes.toarray(), waves.resonance_rows(neumann, rows.x, rows.term == "pde", 0.05))
    t2 = trainer(p, small_model(p, grid=(3, 3)))
    t2.fit(1, optimizer=GNDriver())                        # a driver's own default: none
    assert t2.driver.gn.res.num_modes == 0
    # resonance_most: of the modes, the most amplified only, in either form of the rows
    most3 = trainer(p, small_model(p, grid=(3, 3)))
    most3.fit(1, optimizer=GNDriver(resonance=0.05, resonance_most=3))
    assert most3.driver.gn.res.num_modes == 3 == waves.resonance_green_rows(p, 0.05, most=3)[1].shape[1]
    soft3 = trainer(p, DecomposedModel.create([0, 0], [1, 1], [(3, 3)], wavenumber=p.wavenumber, seed=0, **SMALL))
    soft3.fit(1, optimizer=GNDriver(resonance=0.05, resonance_most=3.0))
    assert soft3.driver.settings.resonance_most == 3 and type(soft3.driver.settings.resonance_most) is int
    rows = soft3.driver.gn.res.rows
    np.testing.assert_array_equal(soft3.driver.gn.res.modes.toarray(), waves.resonance_rows(p, rows.x, rows.term == "pde", 0.05)[:, :3])
    for bad in (0, -1, 2.5, True, "3"):
        with pytest.raises((TypeError, ValueError), match="resonance_most"):
            GNDriver(resonance=0.05, resonance_most=bad)
    f = hp.get_problem("free-source", wavelengths=2)
    assert waves.resonance_rows(f, rows.x) is None          # so a PML problem gets none from the plan either
    for bad in (-0.1, 1.0, True, "0.05"):
        with pytest.raises(ValueError, match="resonance"):
            GNDriver(resonance=bad)
