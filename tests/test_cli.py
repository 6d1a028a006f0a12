"""The command line, end to end on tiny problems: on the CPU, and with --device cuda on a GPU
(test_train_on_gpu skips without one, with the reason; FAIL instead with HELMPINN_REQUIRE_GPU=1);
without a GPU --device cuda is refused naming the reason."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import no_gpu_reason
from helmpinn.cli import main
from helmpinn.models.model import Model

TINY = ["--optimizer", "adam", "--steps", "40", "--hidden", "16", "--layers", "2", "--fourier", "8",
        "--points", "64", "--eval-every", "10", "--quiet"]


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
    # the five outputs, the record of what helmpinn wrote and the lock file, nothing else
    assert sorted(os.listdir(out)) == [".helmpinn-manifest.json", ".helmpinn.lock", "error.png", "history.png",
                                       "metrics.json", "model.npz", "solution.png"]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 40 and metrics["settings"]["problem_options"] == {"k": 5.0}
    assert metrics["wall_time_s"] > 0 and metrics["steps_per_s"] > 0
    assert 0 < metrics["final"]["relative_l2"] < 10
    polished = metrics["lbfgs"]["iterations"]   # L-BFGS iterations are steps of the run too
    assert len(metrics["history"]["loss"]) == 40 + polished and polished >= 1
    model = Model.load(out / "model.npz")
    assert model.dtype == np.float32 and model.metadata["problem"] == "plane1d"
    assert model.optimizer_state["step"] == 40 + polished == metrics["final_step"]


@pytest.mark.parametrize("problem,extra", [("dirichlet2d", ["--n", "1"]), ("cube3d", ["--k", "3"])])
def test_train_2d_3d_figures(tmp_path, problem, extra):
    out = tmp_path / problem
    rc = main(["train", "--problem", problem, *extra, *TINY, "--steps", "5", "--bc-points", "24",
               "--dtype", "float64", "--out", str(out)])
    assert rc == 0
    for name in ("model.npz", "metrics.json", "solution.png", "error.png", "history.png"):
        assert (out / name).exists(), name


def test_train_notes_a_box_near_resonance(tmp_path, capsys):
    """dirichlet2d n = 8: the modes (1, 16) and (16, 1) lie π² from κ = 256π² (helmpinn.problems.waves);
    the run's announcement names them, and a box away from resonance gets no note."""
    quiet = [arg for arg in TINY if arg != "--quiet"]
    args = ["train", "--problem", "dirichlet2d", *quiet, "--steps", "2", "--bc-points", "16"]
    assert main([*args, "--n", "8", "--out", str(tmp_path / "near")]) == 0
    err = capsys.readouterr().err
    assert "helmpinn: note: the closed box [0, 1] × [0, 1] is near resonance: its mode (1, 16)" in err
    assert "amplified 256 times" in err
    assert main([*args, "--n", "1.1", "--out", str(tmp_path / "far")]) == 0
    assert "resonance" not in capsys.readouterr().err


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


def test_device_option_in_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--device {cpu,cuda}" in out
    # options whose defaults come from the problem do not claim "None"
    assert "default: None" not in out and "(default: False)" in out


def test_device_is_saved_and_resumed(tmp_path):
    """The default device (cpu) is a setting of the run: in the model's metadata and the report."""
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "5", "--no-plots",
                 "--out", str(out)]) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["device"] == "cpu"
    assert Model.load(out / "model.npz").metadata["settings"]["device"] == "cpu"
    assert main(["train", "--resume", str(out), "--steps", "8", "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["device"] == "cpu" and metrics["final_step"] == 8


def _no_gpu_words() -> str:
    import helmpinn

    return ("helmpinn was built without CUDA support" if not helmpinn.has_cuda()
            else "no CUDA device is visible")


def test_device_cuda_refused_without_a_gpu(tmp_path, capsys):
    """--device cuda where no GPU can be used: status 2, one line naming --device and why, and
    nothing written."""
    if no_gpu_reason() is None:
        pytest.skip("a GPU is usable here")
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, "--device", "cuda", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("helmpinn: --device cuda: " + _no_gpu_words()), err
    assert not out.exists()
    # a saved run that trains on the GPU cannot be resumed here either, and says so
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "5", "--no-plots",
                 "--out", str(out)]) == 0
    model = Model.load(out / "model.npz")
    model.metadata["settings"]["device"] = "cuda"
    model.save(out / "model.npz")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--steps", "8", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "the run trains with --device cuda, but " + _no_gpu_words() in err, err
    assert Model.load(out / "model.npz").optimizer_state["step"] == 5


def test_device_cuda_refuses_lm(tmp_path, capsys):
    """Levenberg-Marquardt runs on the CPU only (Trainer.fit_lm): refused before anything else,
    on any machine."""
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, "--device", "cuda", "--optimizer", "lm",
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--device cuda: --optimizer lm runs on the CPU only" in err, err
    assert not out.exists()


def test_train_on_gpu(gpu, tmp_path):
    """A few Adam steps of a built-in problem on the GPU write the model; --resume continues there."""
    out = tmp_path / "gpu"
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", "6",
                 "--dtype", "float64", "--device", "cuda", "--no-plots", "--out", str(out)]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["device"] == "cuda" and metrics["steps"] == 6
    assert np.isfinite(metrics["final"]["loss"]) and 0 < metrics["final"]["relative_l2"] < 10
    model = Model.load(out / "model.npz")
    assert model.device == "cpu" and model.optimizer_state["step"] == 6
    assert model.metadata["settings"]["device"] == "cuda"
    assert np.all(np.isfinite(model.params))
    assert main(["train", "--resume", str(out), "--steps", "9", "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["device"] == "cuda" and metrics["final_step"] == 9
    assert Model.load(out / "model.npz").optimizer_state["step"] == 9


USER_FACTORY = '''
import numpy as np
import helmpinn as hp

def make(k=3.0, side: int = 1, label="a", mirror=False, shift=None, steps=7):
    """A plane wave with options no built-in problem has."""
    shift = 0.0 if shift is None else shift
    return hp.Problem(hp.geometry.Interval(0, side), kappa=k * k,
                      bcs={"xmin": hp.Dirichlet(1.0), "xmax": hp.Sommerfeld(k)},
                      exact=lambda x: np.exp(1j * k * x[:, 0]))
'''


def test_user_factory_options_are_given_as_a_builtins_are(tmp_path, capsys):
    """--problem file.py:make takes make's own keyword options (--side, --label, --mirror,
    --shift) as a built-in problem takes its own; an option neither the factory nor train takes
    is refused naming the factory's options; a non-finite number is refused."""
    path = tmp_path / "mine.py"
    path.write_text(USER_FACTORY)
    spec, out = f"{path}:make", tmp_path / "run"
    assert main(["train", "--problem", spec, "--k", "4", "--side", "2", "--label", "b", "--mirror", "yes",
                 "--shift=0.5", *TINY, "--steps", "2", "--no-plots", "--out", str(out)]) == 0
    options = json.loads((out / "metrics.json").read_text())["settings"]["problem_options"]
    assert options == {"k": 4.0, "side": 2, "label": "b", "mirror": True, "shift": 0.5, "steps": 7}
    assert type(options["side"]) is int
    capsys.readouterr()
    assert main(["train", "--problem", spec, "--sidee", "2", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"helmpinn: --sidee is an option neither of helmpinn train nor of problem {spec!r} "
        "(it takes --k, --side, --label, --mirror, --shift, --steps)")
    assert main(["train", "--problem", spec, "--n", "2", "--out", str(tmp_path / "bad")]) == 2
    assert capsys.readouterr().err.strip() == (   # another problem's option
        f"helmpinn: problem {spec!r} takes no option --n (it takes --k, --side, --label, --mirror, --shift, --steps)")
    assert main(["train", "--problem", spec, "--shift", "nan", "--out", str(tmp_path / "bad")]) == 2
    assert "--shift must be a finite number" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:   # argparse: a word that is not true or false
        main(["train", "--problem", spec, "--mirror", "maybe", "--out", str(tmp_path / "bad")])
    assert info.value.code == 2 and "expected true or false, got 'maybe'" in capsys.readouterr().err
    # a factory that cannot be loaded: one line, status 2
    assert main(["train", "--problem", f"{tmp_path / 'nothere.py'}:make", "--side", "2"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


class _TwoRanks:
    """Rank 0 of a 2-rank communicator, for the checks made before anything runs over it."""

    def Get_rank(self):
        return 0

    def Get_size(self):
        return 2

    def allreduce(self, value):
        return value

    def Allgather(self, send, recv):   # the set-up's agreement: the other rank as this one
        recv[0][:] = send[0]

    def allgather(self, value):
        return [value, value]


@pytest.mark.parametrize("flags,flag,what", [(["--optimizer", "lbfgs"], "--optimizer lbfgs", "lbfgs"),
                                             (["--lbfgs", "3"], "--lbfgs 3", "lbfgs"),
                                             (["--optimizer", "lm", "--lm-solver", "dual"], "--lm-solver dual", "lm:dual")])
def test_what_does_not_run_over_ranks_is_refused_with_one_reason(tmp_path, capsys, monkeypatch, flags, flag, what):
    """helmpinn.distributed.ONE_PROCESS is the one place that says what runs over several MPI
    ranks: the CLI (status 2, nothing written), the L-BFGS driver and LM say its words."""
    import helmpinn as hp
    from helmpinn import distributed
    from helmpinn.optim import lm
    from helmpinn.training.drivers import LBFGSDriver

    monkeypatch.setattr(distributed, "launch_comm", lambda: _TwoRanks())
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, *flags, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == f"helmpinn: {flag}: {distributed.ONE_PROCESS[what]}"
    assert not out.exists()
    run = type("Run", (), {"comm": _TwoRanks()})()
    with pytest.raises(NotImplementedError) as info:
        LBFGSDriver().start(run, 5)
    assert str(info.value) == distributed.ONE_PROCESS["lbfgs"]
    with pytest.raises(ValueError) as info:
        lm.choose_solver(10, 20, "dual", ranks=2)
    assert str(info.value) == distributed.ONE_PROCESS["lm:dual"]
    res = lm.FunctionResiduals(lambda x: x - 1.0, lambda x: np.eye(3), 3, 3)
    with pytest.raises(ValueError) as info:
        lm.LevenbergMarquardt(res, solver="dual", comm=_TwoRanks())
    assert str(info.value) == distributed.ONE_PROCESS["lm:dual"]
    assert hp.distributed.check_ranks("lm:dual", 1) is None and distributed.check_ranks("adam", 2) is None


def test_resume_of_a_folder_written_before_the_plan_had_one_vocabulary(tmp_path):
    """A run folder whose model and report record the settings under the CLI's former names
    (``fourier``, ``points``, ``resample``) resumes: its settings read as the plan's fields, its
    history is kept, and the run goes on as the uninterrupted one does."""
    args = ["train", "--problem", "plane1d", "--k", "5", "--optimizer", "lm", "--hidden", "8", "--layers", "1",
            "--fourier", "4", "--points", "48", "--bc-points", "2", "--quiet", "--no-plots", "--target", "0"]
    old, whole = tmp_path / "old", tmp_path / "whole"
    assert main([*args, "--steps", "6", "--out", str(whole)]) == 0
    assert main([*args, "--steps", "3", "--out", str(old)]) == 0
    former = {"ff_dim": "fourier", "pde_points": "points", "resample_every": "resample"}
    m = Model.load(old / "model.npz")
    settings = {former.get(k, k): v for k, v in m.metadata["settings"].items()}
    m.save(old / "model.npz", optimizer_state=m.optimizer_state, metadata={**m.metadata, "settings": settings})
    report = json.loads((old / "metrics.json").read_text())
    report["settings"] = {former.get(k, k): v for k, v in report["settings"].items()}
    (old / "metrics.json").write_text(json.dumps(report))
    assert main(["train", "--resume", str(old), "--steps", "6", "--quiet", "--no-plots"]) == 0
    got, want = (json.loads((d / "metrics.json").read_text()) for d in (old, whole))
    assert got["settings"]["pde_points"] == 48 and got["settings"]["ff_dim"] == 4 and "points" not in got["settings"]
    assert got["resumed_from_step"] == 3 and got["history"]["step"] == list(range(1, 7))
    np.testing.assert_array_equal(got["history"]["loss"], want["history"]["loss"])
