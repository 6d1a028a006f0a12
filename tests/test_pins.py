"""Behaviour that one-line changes used to break without a failing test (issue #26): LM's
redrawn points, its stall and largest-damping stops, and the CLI's use of --sigma, --schedule,
--sampling, --seed, --threads, --w-data / --w-bc and --freeze-fourier. Each test fails under
the change its docstring names."""
import json
import math

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.training.status import RunStatus
from helmpinn.cli import main
from helmpinn.optim.lm import CoreResiduals
from helmpinn.optim import make_schedule

K = 4.0


def lm_trainer(**kw):
    prob = hp.get_problem("plane1d", k=K)
    model = hp.Model.create(1, 4, 8, 1, dtype="float64", seed=0, fourier_sigma=K / (2 * math.pi))
    opts = dict(pde_points=40, bc_points=2, resample_every=0, eval_every=0, val_points=0, progress=False)
    return hp.Trainer(prob, model, **{**opts, **kw})


# -- Levenberg-Marquardt in the loop -----------------------------------------------------------------
def test_lm_steps_on_the_points_drawn_last():
    """Fails when the LM driver keeps its old residuals after a draw (``LMDriver.resampled`` not
    calling ``lm.set_residuals``) or the loop stops drawing for LM: every recorded loss must be
    the loss of the current points."""
    seen = []

    def check(tr, step):
        r = CoreResiduals(tr.workspace, tr.batch, tr.weights).residuals(tr.model.params)
        seen.append((tr.training_set.x_pde.copy(), tr.history.loss[-1], float(r @ r)))

    tr = lm_trainer(resample_every=2, callbacks=[check])
    tr.fit_lm(5, blas_threads=1, stall_window=100)
    assert tr.step == 5 and tr.driver.lm.steps == 5
    draws = [x for x, _, _ in seen]
    assert [np.array_equal(draws[i], draws[i + 1]) for i in range(4)] == [True, False, True, False]
    for _, recorded, on_current_points in seen:
        assert recorded == pytest.approx(on_current_points, rel=1e-12)


def test_lm_stall_stop():
    """Fails when the loop's stall check (``driver.stall``) is removed: with a window of 2 and a
    factor no loss can beat, LM stops at step 3."""
    tr = lm_trainer()
    tr.fit_lm(10, blas_threads=1, stall_window=2, stall_factor=1e-300)
    assert tr.step == 3 and tr.stop_reason == "loss fell by less than a factor 1e-300 over 2 steps at step 3"
    assert tr.status is RunStatus.STALLED
    # a window that straddles earlier steps of another fit counts them too (the history's)
    tr.fit_lm(10, blas_threads=1, stall_window=2, stall_factor=1e-300)
    assert tr.step == 4 and tr.stop_reason.endswith("at step 4")


def test_lm_stops_at_the_largest_damping():
    """Fails when the LM driver no longer reports its step's status LAM_MAX as a stop: a damping so
    large that the step cannot move the parameters ends the run at its first step."""
    tr = lm_trainer()
    before = tr.model.params.copy()
    tr.fit_lm(10, blas_threads=1, lam=1e290, lam_max=1e291, geodesic=False)
    assert tr.step == 1 and not tr.diverged
    assert tr.stop_reason.startswith("no decrease at the largest damping") and "at step 1" in tr.stop_reason
    assert tr.model.params.tobytes() == before.tobytes()


# -- the CLI's options reach the run ------------------------------------------------------------------
BASE = ["train", "--problem", "plane1d", "--k", "5", "--optimizer", "adam", "--hidden", "8", "--layers", "1",
        "--fourier", "4", "--points", "60", "--eval-every", "0", "--quiet", "--no-plots"]


def run_cli(tmp_path, name, *extra):
    out = tmp_path / name
    assert main([*BASE, *extra, "--out", str(out)]) == 0
    return json.loads((out / "metrics.json").read_text()), hp.Model.load(out / "model.npz")


def initial_model(settings, seed=0):
    return hp.Model.create(1, settings["ff_dim"], settings["hidden"], settings["layers"], dtype=settings["dtype"],
                           seed=seed, fourier_sigma=settings["sigma"])


def first_loss(settings):
    """The loss at step 1 of the run ``settings`` describe, rebuilt here through the Python API."""
    problem = hp.get_problem(settings["problem"], **settings["problem_options"])
    tr = hp.Trainer(problem, initial_model(settings, settings["seed"]), pde_points=settings["pde_points"],
                    bc_points=settings["bc_points"], sampling=settings["sampling"], weights=settings["weights"],
                    seed=settings["seed"], progress=False)
    tr.resample()
    return tr.value_and_grad()[0]


def test_cli_sigma_sets_the_fourier_scale(tmp_path):
    """Fails when the CLI ignores --sigma (in the settings or in Model.create)."""
    metrics, model = run_cli(tmp_path, "s", "--sigma", "3.5", "--steps", "1", "--lr", "1e-12")
    assert metrics["settings"]["sigma"] == 3.5
    B = model.views["B"]
    np.testing.assert_allclose(B, initial_model(metrics["settings"]).views["B"], rtol=1e-5)
    default = hp.defaults.fourier_sigma(hp.get_problem("plane1d", k=5.0))
    assert np.std(B) == pytest.approx(np.std(initial_model({**metrics["settings"], "sigma": default}).views["B"])
                                      * 3.5 / default, rel=1e-5)


@pytest.mark.parametrize("schedule", ["constant", "exponential"])
def test_cli_schedule_sets_the_learning_rates(tmp_path, schedule):
    """Fails when the CLI ignores --schedule (the Trainer then follows its cosine default)."""
    metrics, _ = run_cli(tmp_path, schedule, "--schedule", schedule, "--lr", "0.005", "--steps", "4")
    expected = make_schedule(schedule, 0.005, 4)
    assert metrics["history"]["lr"] == [expected(s) for s in range(1, 5)]


def test_cli_sampling_seed_and_weights_reach_the_trainer(tmp_path):
    """Fails when the CLI ignores --sampling or --seed (points or initialisation), or swaps
    --w-data and --w-bc (in the settings or on their way to the core)."""
    runs = {}
    for name, extra in (("default", []), ("halton", ["--sampling", "halton"]), ("uniform", ["--sampling", "uniform"]),
                        ("seed", ["--seed", "7"])):
        metrics, _ = run_cli(tmp_path, name, *extra, "--steps", "1", "--dtype", "float64",
                             "--w-pde", "0.5", "--w-data", "3", "--w-bc", "7")
        s = metrics["settings"]
        assert s["weights"] == {"pde": 0.5, "data": 3.0, "bc": 7.0}
        h = metrics["history"]
        assert h["loss"][0] == first_loss(s)
        assert h["loss"][0] == pytest.approx(0.5 * h["pde"][0] + 3 * h["data"][0] + 7 * h["bc"][0], rel=1e-12)
        assert h["data"][0] > 0 and h["bc"][0] > 0 and h["data"][0] != h["bc"][0]
        runs[name] = (s["sampling"], s["seed"], h["loss"][0])
    assert [runs[n][:2] for n in runs] == [("sobol", 0), ("halton", 0), ("uniform", 0), ("sobol", 7)]
    assert len({loss for _, _, loss in runs.values()}) == 4


def test_cli_threads(tmp_path):
    """Fails when the CLI ignores --threads."""
    before = hp.get_num_threads()
    try:
        metrics, _ = run_cli(tmp_path, "t", "--threads", str(before + 1), "--steps", "1")
        assert metrics["settings"]["threads"] == before + 1 == hp.get_num_threads()
    finally:
        hp.set_num_threads(before)


def test_cli_freeze_fourier(tmp_path):
    """Fails when the CLI drops train_fourier (--freeze-fourier ignored): B stays as initialised."""
    metrics, model = run_cli(tmp_path, "f", "--freeze-fourier", "--steps", "3")
    assert metrics["settings"]["train_fourier"] is False
    start = initial_model(metrics["settings"])
    assert model.views["B"].tobytes() == start.views["B"].tobytes()
    assert not np.array_equal(model.params, start.params)
