"""helmpinn.solve: the plan (run_settings "auto"), the stops (tolerance on the error or, without
an exact solution, the validation loss; a time limit over both phases, with a stubbed clock),
the Solution, and helmpinn train --optimizer auto."""
import copy
import json

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.cli import main
from helmpinn.defaults import run_settings
from helmpinn.optim import make_schedule
from helmpinn.training.trainer import Trainer

TINY = dict(ff_dim=4, hidden=8, layers=1, pde_points=60, sigma=0.6, eval_every=2)


def test_plan_is_lm_unless_its_dense_system_is_too_large():
    p = hp.get_problem("plane1d", k=4.0)
    lm = run_settings(p, "lm")
    auto = run_settings(p, "auto")
    assert auto == lm and auto["optimizer"] == "lm" and auto["warm_start"] == 0
    big = run_settings(p, "auto", memory_bytes=1 << 20)
    assert big["lm"] == {**lm["lm"], "solver": "cg"} and big["warm_start"] == 2000 and big["optimizer"] == "lm"


def test_solve_stops_at_the_tolerance_and_returns_the_solution(tmp_path):
    p = hp.get_problem("plane1d", k=4.0)
    sol = hp.solve(p, tol=1e-3, progress=False, lm={"blas_threads": 1}, **TINY)
    assert sol.error < 1e-3 and sol.stop_reason.startswith("target error 0.001 reached")
    assert sol.settings["optimizer"] == "lm" and sol.history.lr[-1] > 0 and sol.val_loss > 0
    x = np.linspace(0, 1, 7)[:, None]
    np.testing.assert_array_equal(sol.predict(x), sol.model.predict(x))
    text = repr(sol)   # one line, not the history
    assert "\n" not in text and len(text) < 400 and f"steps={len(sol.history.loss)}" in text
    assert f"error={sol.error:.3e}" in text and "status=TARGET_REACHED, message='target error" in text
    assert sol.success and sol.status is hp.RunStatus.TARGET_REACHED and sol.message == sol.stop_reason
    sol.save(tmp_path / "u.npz")
    back = hp.Model.load(tmp_path / "u.npz")
    assert back.params.tobytes() == sol.model.params.tobytes() and back.metadata["settings"]["hidden"] == 8
    with pytest.raises(ValueError, match=r"unknown settings \['width'\]"):
        hp.solve(p, width=3)


def test_solve_without_an_exact_solution_stops_on_the_validation_loss():
    p = copy.copy(hp.get_problem("plane1d", k=4.0))
    p.exact = None
    sol = hp.solve(p, tol=1e-2, progress=False, lm={"blas_threads": 1}, **TINY)
    assert sol.error is None and sol.stop_reason.startswith("target validation loss 0.01 reached")
    assert sol.history.eval_val_loss[-1] < 1e-2


def test_solve_time_limit_covers_both_phases(monkeypatch):
    """A stubbed clock that advances one second per step: 4 Adam steps, then LM until 7 s."""
    now = [0.0]
    record = Trainer.record

    def timed(self, info):
        now[0] += 1.0
        return record(self, info)

    monkeypatch.setattr(Trainer, "record", timed)
    p = hp.get_problem("plane1d", k=4.0)
    sol = hp.solve(p, time_limit=7.0, progress=False, clock=lambda: now[0], warm_start=4,
                   lm={"blas_threads": 1, "stall_window": 100}, **TINY)
    h = sol.history
    assert h.step == list(range(1, 8)) and sol.stop_reason == "time limit 7 s reached at step 7"
    cosine = make_schedule("cosine", 1e-2, 4)
    assert h.lr[:4] == [cosine(s) for s in range(1, 5)]   # Adam's learning rates, then LM's damping
    assert len(h.lr) == 7 and all(lam not in h.lr[:4] for lam in h.lr[4:])


@pytest.mark.parametrize("flags", [["--optimizer", "auto"], []])
def test_cli_optimizer_auto(tmp_path, flags):
    """--optimizer auto, the CLI's default on the CPU, is hp.solve's choice (LM here)."""
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", "--k", "4", *flags, "--steps", "3", "--hidden", "8",
                 "--layers", "1", "--fourier", "4", "--points", "60", "--quiet", "--no-plots", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["optimizer"] == "lm" and metrics["lm"]["steps"] == 3 == metrics["final_step"]


def test_cli_default_optimizer_on_a_gpu_is_adam():
    """With --device cuda and no --optimizer the run takes Adam (LM and Gauss-Newton are CPU
    only); the settings are resolved before the device is checked, so no GPU is needed here."""
    from helmpinn.cli import build_parser
    from helmpinn.cli.train_settings import new_settings

    args = build_parser().parse_args(["train", "--problem", "plane1d", "--device", "cuda"])
    problem = hp.get_problem("plane1d")
    assert new_settings(args, problem)["optimizer"] == "adam"
    args = build_parser().parse_args(["train", "--problem", "plane1d"])
    assert new_settings(args, problem)["optimizer"] == "lm"


@pytest.mark.parametrize("name", ["plane1d", "dirichlet2d", "heterogeneous2d", "cube3d", "waveguide",
                                  "scatter-hard", "box-source", "free-source"])
def test_cli_takes_hp_solves_plan(name):
    """``helmpinn train --problem NAME`` with no other flag runs hp.solve's plan
    (:func:`helmpinn.run_plan`) field for field: every entry of the plan's record is in the
    CLI's settings with the same value, under the same name. (#63 measured the waveguide
    through both; a plan entry the CLI dropped or set on its own would train another run.)"""
    from helmpinn.cli import build_parser
    from helmpinn.cli.train_settings import new_settings

    problem = hp.get_problem(name)
    cli = new_settings(build_parser().parse_args(["train", "--problem", name]), problem)
    want = hp.run_plan(problem).record()
    assert {key: cli[key] for key in want} == want
    assert cli["seed"] == 0 and cli["train_fourier"]   # hp.solve's seed; the Trainer's default


@pytest.mark.parametrize("name, value, error, words", [
    ("hidden", 1.5, ValueError, "solve: hidden must be an integer, got 1.5"),   # was: one hidden unit
    ("pde_points", 2.5, ValueError, "solve: pde_points must be an integer, got 2.5"),
    ("steps", "2", TypeError, "solve: steps must be an integer, got '2'"),
    ("steps", True, TypeError, "solve: steps must be an integer, got True"),
    ("warm_start", 1.5, ValueError, "solve: warm_start must be an integer, got 1.5"),
    ("lbfgs", -1, ValueError, "solve: lbfgs must be an integer >= 0, got -1"),   # was: accepted
    ("seed", -1, ValueError, "solve: seed must be an integer >= 0, got -1"),
    ("ff_dim", "a", TypeError, "solve: ff_dim must be an integer, got 'a'"),
])
def test_solve_refuses_a_count_that_is_not_a_whole_number(name, value, error, words):
    """A count is never truncated (``hidden=1.5`` trained a network of one hidden unit)."""
    with pytest.raises(error, match=words.replace("(", r"\(")):
        hp.solve(hp.get_problem("plane1d", k=4.0), progress=False, **{**TINY, name: value})


def test_model_and_trainer_refuse_counts_that_are_not_whole_numbers():
    p = hp.get_problem("plane1d", k=4.0)
    with pytest.raises(ValueError, match="Model.create: hidden_dim must be an integer, got 1.5"):
        hp.Model.create(1, 4, 1.5, 1)
    with pytest.raises(ValueError, match="DecomposedModel.create: num_hidden_layers must be an integer, got 1.5"):
        hp.decomposition.DecomposedModel.create([0.0], [1.0], [[2]], num_hidden_layers=1.5)
    model = hp.Model.create(1, 4, 8, 1, dtype="float64")
    with pytest.raises(ValueError, match="Trainer: pde_points must be an integer, got 2.5"):
        Trainer(p, model, pde_points=2.5, progress=False)
    t = Trainer(p, model, pde_points=20, bc_points=2, progress=False, eval_every=0)
    with pytest.raises(ValueError, match="Trainer: steps must be an integer, got 1.5"):
        t.fit(1.5)
    with pytest.raises(ValueError, match="Trainer: maxiter must be an integer >= 0, got -2"):
        t.polish(-2)
    assert t.step == 0
    assert hp.Model.create(1, 4.0, np.int64(8), 1).spec.hidden_dim == 8   # integral values are counts


def test_solve_polishes_by_lbfgs_after_the_optimiser_within_its_time_limit(monkeypatch):
    """``lbfgs=N`` (accepted and ignored by ``solve`` before) runs the polish after LM, as the
    CLI's --lbfgs does, and only while the time limit leaves time for it."""
    p = hp.get_problem("plane1d", k=4.0)
    opts = dict(progress=False, lm={"blas_threads": 1, "stall_window": 100}, **TINY)
    sol = hp.solve(p, steps=3, lbfgs=4, **opts)
    assert len(sol.history.step) > 3 and sol.history.step[:3] == [1, 2, 3]   # LM's 3, then the polish's
    plain = hp.solve(p, steps=3, **opts)
    assert len(plain.history.step) == 3 and sol.val_loss <= plain.val_loss
    with pytest.raises(ValueError, match="lbfgs .* trains one network"):
        hp.solve(hp.get_problem("box-source"), model="decomposed", lbfgs=5, progress=False)

    class TwoRanks:   # refused before any training, not after it
        def Get_size(self):
            return 2

        def Get_rank(self):
            return 0
    with pytest.raises(ValueError, match="L-BFGS runs on one process"):
        hp.solve(p, steps=3, lbfgs=4, comm=TwoRanks(), **opts)

    now = [0.0]
    record = Trainer.record

    def timed(self, info):   # one second a step
        now[0] += 1.0
        return record(self, info)

    monkeypatch.setattr(Trainer, "record", timed)
    ran_out = hp.solve(p, steps=10, lbfgs=4, time_limit=7.0, clock=lambda: now[0], **opts)
    assert len(ran_out.history.step) == 7 and ran_out.stop_reason == "time limit 7 s reached at step 7"
    now[0] = 0.0
    shared = hp.solve(p, steps=3, lbfgs=20, time_limit=5.0, clock=lambda: now[0], **opts)
    assert len(shared.history.step) == 5   # LM's 3 steps, the polish's 2 within the 5 s


def test_the_run_plan_is_one_typed_table():
    """run_plan: fields with the rules' values; overrides checked and merged (weights, lm); the
    record round-trips, and reads the CLI's former names."""
    from helmpinn.training.plan import RunPlan

    p = hp.get_problem("plane1d", k=4.0)
    plan = hp.run_plan(p)
    assert isinstance(plan, RunPlan) and plan.optimizer == "lm" and plan.model == "network"
    want = run_settings(p, "auto")
    assert all(getattr(plan, k) == v for k, v in want.items())
    assert plan.seed == 0 and plan.train_fourier and plan.gn is None and plan.decomposition is None
    mine = plan.with_overrides(hidden=4, weights={"pde": 2.0}, lm={"solver": "cg"})
    assert mine.hidden == 4 and mine.weights == {**plan.weights, "pde": 2.0}
    assert mine.lm == {**plan.lm, "solver": "cg"} and plan.hidden != 4   # a new plan; the old one unchanged
    assert RunPlan.from_record(mine.record()) == mine
    old = {{"ff_dim": "fourier", "pde_points": "points", "resample_every": "resample"}.get(k, k): v
           for k, v in mine.record().items()}
    assert RunPlan.from_record(old) == mine
    with pytest.raises(ValueError, match=r"run_plan: unknown settings \['width'\]"):
        plan.with_overrides(width=3)
    with pytest.raises(ValueError, match=r"unknown settings \['model'\]"):
        plan.with_overrides(model="decomposed")   # run_plan's choice, with its points
    with pytest.raises(ValueError, match=r"unknown settings \['gn'\]"):
        plan.with_overrides(gn={"lam": 1.0})      # no Gauss-Newton in this run
    with pytest.raises(ValueError, match="run_plan: steps must be an integer >= 0, got -1"):
        hp.run_plan(p, steps=-1)
    adam = hp.run_plan(p, optimizer="adam")
    assert adam.lm is None and "lm" not in adam.record() and adam.optimizer == "adam"
