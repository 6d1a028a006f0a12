"""The command line, end to end on tiny problems."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from helmpinn.cli import main
from helmpinn.model import Model

TINY = ["--steps", "40", "--hidden", "16", "--layers", "2", "--fourier", "8", "--points", "64",
        "--eval-every", "10", "--quiet"]


def test_problems_lists_builtins(capsys):
    assert main(["problems"]) == 0
    out = capsys.readouterr().out
    for name in ("plane1d", "dirichlet2d", "heterogeneous2d", "cube3d"):
        assert name in out


def test_train_writes_every_file(tmp_path):
    out = tmp_path / "run"
    rc = main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--lbfgs", "5",
               "--checkpoint-every", "20", "--out", str(out)])
    assert rc == 0
    for name in ("model.npz", "metrics.json", "solution.png", "error.png", "history.png"):
        assert (out / name).stat().st_size > 0, name
    assert sorted(os.listdir(out)) == ["error.png", "history.png", "metrics.json", "model.npz", "solution.png"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 40 and metrics["settings"]["problem_options"] == {"k": 5.0}
    assert metrics["wall_time_s"] > 0 and metrics["steps_per_s"] > 0
    assert 0 < metrics["final"]["relative_l2"] < 10
    assert len(metrics["history"]["loss"]) == 40 and metrics["lbfgs"]["iterations"] >= 1
    model = Model.load(out / "model.npz")
    assert model.dtype == np.float32 and model.metadata["problem"] == "plane1d"
    assert model.optimizer_state["step"] == 40


@pytest.mark.parametrize("problem,extra", [("dirichlet2d", ["--n", "1"]), ("cube3d", ["--k", "3"])])
def test_train_2d_3d_figures(tmp_path, problem, extra):
    out = tmp_path / problem
    rc = main(["train", "--problem", problem, *extra, *TINY, "--steps", "5", "--bc-points", "24",
               "--dtype", "float64", "--out", str(out)])
    assert rc == 0
    for name in ("model.npz", "metrics.json", "solution.png", "error.png", "history.png"):
        assert (out / name).exists(), name


def test_bad_options(tmp_path, capsys):
    assert main(["train", "--problem", "plane1d", "--n", "3", "--out", str(tmp_path)]) == 2
    assert "takes no option --n" in capsys.readouterr().err
    assert main(["train", "--problem", "nope", "--out", str(tmp_path)]) == 2
    assert main(["train", "--out", str(tmp_path)]) == 2
    assert "--problem is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--problem", "plane1d", "--steps", "many"])


def test_python_dash_m(tmp_path):
    r = subprocess.run([sys.executable, "-m", "helmpinn", "problems"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "dirichlet2d" in r.stdout
