"""The memory estimate of a decomposed run (helmpinn.memory): refused before anything is
allocated by the CLI, hp.solve and the Trainer alike, within a small factor of what a run takes."""
from __future__ import annotations

import os

import numpy as np
import pytest

import helmpinn as hp
from helmpinn import _budget, memory
from helmpinn.cli import main
from helmpinn.models.decomposition import DecomposedModel, Rows


def test_the_cli_refuses_a_run_over_the_limit_before_the_folder_is_made(tmp_path, monkeypatch, capsys):
    """Issue 61, finding 3: box-source at 50 wavelengths passed the CLI's check (one
    subnetwork's parameters), locked the folder, printed its plan and died with a MemoryError
    after ~25 s (the Gram blocks alone 9.8 GB)."""
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "16G")
    out = tmp_path / "out"
    code = main(["train", "--problem", "box-source", "--wavelengths", "50", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "1,849 subdomains" in err and "needs about" in err and "Gram matrices" in err
    assert memory.LIMIT_VARIABLE in err and "fewer subdomains" in err


def test_solve_refuses_a_run_over_the_limit_before_sampling(monkeypatch):
    """Finding 3: hp.solve at 200 wavelengths died while sampling 25 M points."""
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "64G")
    with pytest.raises(memory.MemoryEstimateError, match=r"28,900 subdomains.*25,000,000 points.*needs about"):
        hp.solve(hp.get_problem("box-source", wavelengths=200), progress=False)
    with pytest.raises(ValueError, match="more than the 64.0 GiB"):   # a ValueError too
        hp.solve(hp.get_problem("box-source", wavelengths=200), progress=False)


def test_the_trainer_refuses_a_fit_before_drawing_its_points(monkeypatch):
    """Finding 3: the Trainer checks a decomposed model's fit (by its driver) before the points."""
    model = DecomposedModel.create([0, 0], [1, 1], [(4, 4)], ff_dim=4, hidden_dim=8)
    trainer = hp.Trainer(hp.get_problem("box-source"), model, pde_points=2000, bc_points=0, progress=False)
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1M")
    for optimizer in ("gn", "adam"):
        with pytest.raises(memory.MemoryEstimateError, match=rf"16 subdomains.*2,000 points, {optimizer}\)"):
            trainer.fit(1, optimizer=optimizer)
        assert trainer.training_set is None and trainer.step == 0
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "none")
    trainer.fit(1, optimizer="adam")
    assert trainer.step == 1


def test_the_limit_and_its_override(monkeypatch):
    monkeypatch.delenv(memory.LIMIT_VARIABLE, raising=False)
    from helmpinn import runfiles

    avail = runfiles.available_memory()
    assert memory.limit() == (None if avail is None else int(runfiles.MEMORY_FRACTION * avail))
    for text, value in (("123", 123), ("64G", 64 << 30), ("1.5M", 3 << 19), ("2 TiB", 2 << 40), ("none", None)):
        monkeypatch.setenv(memory.LIMIT_VARIABLE, text)
        assert memory.limit() == value
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "lots")
    with pytest.raises(ValueError, match="HELMPINN_MEMORY_LIMIT='lots'"):
        memory.limit()


_MEASURE = """
import json
import numpy as np
from helmpinn import memory
from helmpinn.models.decomposition import DecomposedModel, Rows
from helmpinn.optim.gauss_newton import MatrixFreeGN

def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key))

model = DecomposedModel.create([0, 0], [1, 1], [(4, 4)], ff_dim=16, hidden_dim=20, wavenumber=20.0)
x = np.random.default_rng(0).random((5_000, 2))
with open("/proc/self/clear_refs", "w") as fh:   # the peak starts again from here
    fh.write("5")
before = status("VmRSS")
res = model.residuals_for(Rows(x, 1.0, 0.0, 100.0, 1.0, "pde"))
gn = MatrixFreeGN(res)
s = gn.linearize(model.params, {"jacobian": 0.0, "gram": 0.0})
D = gn._D(s)
first = gn.preconditioner(s, 1e-3, D)
second = gn.preconditioner(s, 1e-2, D)
assert np.all(np.isfinite(first(second(np.ones(res.num_params)))))
sizes = memory.decomposed_run(memory.decomposed_layout(model), len(x))
print(json.dumps({"grew": status("VmHWM") - before, "sizes": sizes}))
"""


def test_the_estimate_is_within_a_small_factor_of_the_peak():
    """The residuals, a Gauss-Newton linearisation and two trials' preconditioners (the most a
    step holds) of a small model, in a fresh process: the estimate is at least what the
    process's peak resident memory grew by, and at most 3 times it (the runs of
    docs/guide/errors-threads.md: 1.0 to 2.4)."""
    import json
    import subprocess
    import sys

    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (os.path.dirname(os.path.dirname(hp.__file__)),
                                                      os.environ.get("PYTHONPATH")) if p)}
    out = subprocess.run([sys.executable, "-c", _MEASURE], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    parts = ("rows", "windows", "subdomain batches", "Gram matrices", "Cholesky factors", "Jacobian blocks",
             "coarse space", "workspaces", "bookkeeping")
    estimate, grew = sum(got["sizes"][k] for k in parts if k in got["sizes"]), got["grew"]
    assert grew <= estimate <= 3 * grew, (estimate, grew)


def test_the_estimate_counts_ranks_and_settings():
    """One rank's share of the subdomains' arrays; float64 Gram matrices twice float32's."""
    layout = memory.decomposed_layout(dim=2, grids=[(8, 8)], spec=hp.ModelSpec(2, 16, 32, 1), overlap=0.6)
    one = memory.decomposed_run(layout, 40_000, 0, threads=1)
    four = memory.decomposed_run(layout, 40_000, 0, ranks=4, threads=1)
    assert four["Gram matrices"] * 4 == pytest.approx(one["Gram matrices"], rel=1e-6)
    assert four["windows"] == one["windows"]   # every rank holds every point's windows
    f64 = memory.decomposed_run(layout, 40_000, 0, options={"gram": "float64"}, threads=1)
    assert f64["Gram matrices"] == 2 * one["Gram matrices"]
    adam = memory.decomposed_run(layout, 40_000, 0, optimizer="adam", threads=1)
    assert "Gram matrices" not in adam and sum(adam.values()) < sum(one.values())


def test_gauss_newton_grows_its_points_only_while_the_run_fits(monkeypatch):
    """Finding 3: the points grow (PointsGrowth) by the validation gap alone; the Gauss-Newton
    driver now asks the estimate first, so a growth that would exceed the limit is not taken."""
    from helmpinn.training.dd_driver import GNDriver

    model = DecomposedModel.create([0, 0], [1, 1], [(2, 2)], ff_dim=2, hidden_dim=4)
    trainer = hp.Trainer(hp.get_problem("box-source"), model, pde_points=20_000, bc_points=0, progress=False)
    driver = GNDriver(grow_gap=1.0, grow_patience=1, grow_factor=2.0, grow_max=4.0)
    driver.growth.start(trainer)
    trainer.last_gap = 10.0
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "none")
    now = sum(memory.check_fit(trainer, driver).values())
    assert driver.points_factor(trainer) == 2.0
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(int(1.2 * now)))   # this run fits, twice the points not
    assert driver.points_factor(trainer) == 1.0


# -- one limit, one error, every kind of run (issue 61, "Also") -----------------------------------
def test_solve_refuses_an_oversized_network_before_allocating(monkeypatch):
    """hp.solve checked only decomposed runs: one network of 200,000 hidden units (40 G
    parameters, 320 GB in float64) or 10⁹ points went on to Model.create / the sampler. Now the
    plan is estimated (helmpinn.memory.check_network) and refused before anything is made."""
    import helmpinn.solving as solving

    monkeypatch.setenv(memory.LIMIT_VARIABLE, "4G")
    monkeypatch.setattr(solving.Model, "create", lambda *a, **k: pytest.fail("the model was allocated"))
    with pytest.raises(memory.MemoryEstimateError, match=r"one network of 40,007,\d{3},\d{3} parameters.*needs about"
                                                         r".*parameters .*more than the 4.0 GiB that "
                                                         r"HELMPINN_MEMORY_LIMIT allows; use fewer points"):
        hp.solve("dirichlet2d", model="network", hidden=200_000, progress=False)
    with pytest.raises(memory.MemoryEstimateError, match=r"1,000,000,\d{3} points.*training set"):
        hp.solve("dirichlet2d", model="network", pde_points=10**9, progress=False)


def test_the_trainer_refuses_a_one_network_fit_before_drawing_its_points(monkeypatch):
    problem = hp.get_problem("dirichlet2d")
    trainer = hp.Trainer(problem, hp.Model.create(2, 4, 8, 1, seed=0), pde_points=10**9, bc_points=0,
                         progress=False)
    monkeypatch.setattr(problem, "sample", lambda *a, **k: pytest.fail("points drawn"))
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1G")
    with pytest.raises(memory.MemoryEstimateError, match=r"1,000,000,000 points.*use fewer points \(pde_points"):
        trainer.fit(1)
    assert trainer.training_set is None and trainer.step == 0


def test_the_override_applies_to_fd_solve(monkeypatch):
    """fd_solve had its own limit (all of MemAvailable, no override): a grid is now refused
    under HELMPINN_MEMORY_LIMIT like any run, and allowed with 'none'."""
    from helmpinn.reference import fd_solve

    problem = hp.get_problem("plane1d", k=1.0)
    need = memory.fd_memory_estimate(101, 1)   # h = 0.01 on [0, 1]: 101 nodes
    monkeypatch.setattr(_budget, "available_memory", lambda: 1 << 40)   # plenty: only the override refuses
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(need - 1))
    with pytest.raises(memory.MemoryEstimateError, match=r"fd_solve: a 1-D grid of 101 nodes needs about .*"
                                                         r"HELMPINN_MEMORY_LIMIT allows; use a larger h"):
        fd_solve(problem, 0.01)
    monkeypatch.setenv(memory.LIMIT_VARIABLE, str(need))
    assert fd_solve(problem, 0.01).values.shape == (101,)
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1")
    with pytest.raises(ValueError, match="HELMPINN_MEMORY_LIMIT"):   # a ValueError, as it was
        fd_solve(problem, 0.01)
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "none")
    assert fd_solve(problem, 0.01).values.shape == (101,)


def test_the_three_kinds_share_one_limit_function(monkeypatch):
    """One network, a decomposed run and an FD grid are refused by the same limit function
    with the same error: replacing helmpinn.memory.limit's reading of the available memory
    changes all three."""
    from helmpinn.reference.fd import FDOperator
    from helmpinn.runfiles import MemoryBudgetError

    assert MemoryBudgetError is memory.MemoryEstimateError and issubclass(memory.MemoryEstimateError, ValueError)
    monkeypatch.delenv(memory.LIMIT_VARIABLE, raising=False)
    spec = hp.ModelSpec(2, 8, 16, 2)
    layout = memory.decomposed_layout(dim=2, grids=[(4, 4)], spec=spec, overlap=0.5)
    runs = {"network": lambda: memory.check_network(spec, 10_000, 100, dtype="float64", threads=1),
            "decomposed": lambda: memory.check_decomposed(layout, 10_000, 100, threads=1),
            "fd": lambda: FDOperator(hp.get_problem("plane1d", k=1.0), 0.01)}
    monkeypatch.setattr(_budget, "available_memory", lambda: 1 << 40)
    for run in runs.values():
        run()
    seen = []

    def tiny():
        seen.append(1)
        return 1000   # bytes: every run exceeds 80% of it
    monkeypatch.setattr(_budget, "available_memory", tiny)
    for name, run in runs.items():
        with pytest.raises(memory.MemoryEstimateError, match=r"more than 80% of the 1000 B of memory available"):
            run()
    assert len(seen) == 3   # one reading per check, the same function for each kind


def test_the_cli_applies_the_override_to_one_network(tmp_path, monkeypatch, capsys):
    """The CLI's one-network check ignored HELMPINN_MEMORY_LIMIT; it is the one limit now."""
    monkeypatch.setenv(memory.LIMIT_VARIABLE, "1M")
    out = tmp_path / "out"
    code = main(["train", "--problem", "plane1d", "--points", "64", "--bc-points", "2", "--hidden", "8",
                 "--fourier", "4", "--steps", "1", "--quiet", "--no-plots", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "--points 64" in err and "workspace" in err and "HELMPINN_MEMORY_LIMIT allows" in err
