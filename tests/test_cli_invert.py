"""``helmpinn invert``: a tiny run of each method end to end, every bad input refused (one line,
status 2, nothing written, no folder), SIGTERM during a run leaving a consistent folder, and a
second run into a locked folder refused (each run in-process, a few steps on a coarse survey)."""
import json
import os
import signal

import numpy as np
import pytest
from conftest import terminate_at

import helmpinn as hp
from helmpinn import runfiles
from helmpinn.cli import invert as cli_invert
from helmpinn.cli import main
from helmpinn.problems.geometry import Box

BOOKKEEPING = {".helmpinn-manifest.json", ".helmpinn.lock"}
PINN = ["--network", "3", "6", "1", "--points", "60", "--max-steps", "3"]


def _true(x):
    return 1.0 + 0.1 * np.exp(-((x[:, 0] - 0.5) ** 2 + (x[:, 1] - 0.5) ** 2) / 0.02)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A survey of 2 sources and 10 receivers at one frequency (data on a 1/24 grid), the
    starting and true velocity on an 11 x 11 grid of spacing 0.1 over the unit square."""
    d = tmp_path_factory.mktemp("inputs")
    src = [hp.PointSource([0.2, 0.5], width=0.1), hp.PointSource([0.8, 0.5], width=0.1)]
    rec = np.concatenate([np.stack([np.full(6, 0.5), np.linspace(0.2, 0.8, 6)], 1),
                          np.stack([np.linspace(0.2, 0.8, 4), np.full(4, 0.2)], 1)])
    hp.Survey.synthetic(_true, Box([0, 0], [1, 1]), src, rec, [1.0], pml=hp.PML(0.3), h=1 / 24).save(d / "survey.npz")
    xs = np.linspace(0, 1, 11)
    grid = np.stack([g.ravel() for g in np.meshgrid(xs, xs, indexing="ij")], axis=1)
    np.save(d / "v0.npy", np.ones((11, 11)))
    np.save(d / "vt.npy", _true(grid).reshape(11, 11))
    return d


def _args(files, out, *extra, method="pinn"):
    return ["invert", "--survey", str(files / "survey.npz"), "--initial", str(files / "v0.npy"), "--spacing", "0.1",
            "--pml", "0.3", "--bounds", "0.8", "1.3", "--time-limit", "20", "--method", method, "--out", str(out),
            *(PINN if method == "pinn" else ["--max-steps", "3"]), *extra]


def _outputs(out):
    return {n: (out / n).read_bytes() for n in os.listdir(out) if n not in BOOKKEEPING}


def test_pinn_run_writes_its_result_report_and_figure(files, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(_args(files, out, "--true", str(files / "vt.npy"), "--quiet")) == 0
    assert capsys.readouterr().err == ""
    assert set(os.listdir(out)) == BOOKKEEPING | {"inversion.npz", "velocity.npy", "metrics.json", "inversion.png"}
    inv = hp.Inversion.load(out / "inversion.npz")
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["method"] == "pinn" and metrics["result"] == "inversion.npz" and not metrics["interrupted"]
    assert metrics["steps"] == len(inv.history) == len(metrics["history"]) >= 2
    assert 0 < metrics["final"]["velocity_error"] < 1, "the velocity error is measured and lower than at the start"
    assert metrics["settings"]["survey"] == str(files / "survey.npz")
    # velocity.npy is the recovered velocity, in the form --initial reads
    g = metrics["velocity_grid"]
    back = hp.GridField.from_npy(out / "velocity.npy", g["origin"], g["spacing"])
    x = np.random.default_rng(0).uniform(0, 1, (20, 2))
    np.testing.assert_allclose(back(x), inv.velocity(x), rtol=1e-12)


def test_fwi_run_and_a_new_run_replacing_it(files, tmp_path):
    out = tmp_path / "run"
    assert main(_args(files, out, "--true", str(files / "vt.npy"), "--quiet", "--no-plots", method="fwi")) == 0
    assert set(os.listdir(out)) == BOOKKEEPING | {"fwi.npz", "velocity.npy", "metrics.json"}
    metrics = json.loads((out / "metrics.json").read_text())
    with np.load(out / "fwi.npz", allow_pickle=False) as z:
        assert str(z["format"]) == "helmpinn-fwi" and len(z["misfit"]) == metrics["steps"] == 3
        np.testing.assert_array_equal(z["velocity"], np.load(out / "velocity.npy"))
        assert np.all((z["velocity"] >= 0.8 - 1e-12) & (z["velocity"] <= 1.3 + 1e-12))
    assert metrics["stopped"] == "max_iter in every group" and 0 < metrics["final"]["velocity_error"] < 1
    assert metrics["history"][-1]["misfit"] < metrics["history"][0]["misfit"]
    # a pinn run into the same folder replaces the report and removes the fwi result it did not replace
    assert main(_args(files, out, "--quiet", "--no-plots")) == 0
    assert set(os.listdir(out)) == BOOKKEEPING | {"inversion.npz", "velocity.npy", "metrics.json"}
    assert json.loads((out / "metrics.json").read_text())["method"] == "pinn"


def _fifo(path):
    os.mkfifo(path)
    return str(path)


def _nan_survey(files, tmp_path):
    with np.load(files / "survey.npz", allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["data"][0, 1, 3] = np.nan
    np.savez(tmp_path / "nan.npz", **arrays)
    return str(tmp_path / "nan.npz")


def _grid(tmp_path, values):
    np.save(tmp_path / "grid.npy", values)
    return str(tmp_path / "grid.npy")


def _step():
    """A velocity grid whose cubic spline goes below 0 between its nodes (a step of 3 to 0.01)."""
    v = np.full((11, 11), 3.0)
    v[:, 5:] = 0.01
    return v


BAD = {
    "missing survey": (lambda f, t: ["--survey", str(t / "none.npz")], "no such file"),
    "survey a FIFO": (lambda f, t: ["--survey", _fifo(t / "fifo.npz")], "not a regular file"),
    "corrupt survey": (lambda f, t: ["--survey", str(t / "bad.npz")], "not an .npz"),
    "NaN data": (lambda f, t: ["--survey", _nan_survey(f, t)], "data must be finite"),
    "grid short of the domain": (lambda f, t: ["--domain", "0", "0", "1.2", "1"], "not the domain"),
    "bounds exclude the initial model": (lambda f, t: ["--bounds", "1.05", "1.3"], "exclude the initial model"),
    "receivers outside the domain": (lambda f, t: ["--domain", "0", "0", "0.4", "1"], "receiver 0"),
    "NaN in the initial grid": (lambda f, t: ["--initial", _grid(t, np.full((11, 11), np.nan))], "finite"),
    "negative initial velocity": (lambda f, t: ["--initial", _grid(t, -np.ones((11, 11)))], "> 0"),
    "initial overshoots below 0": (lambda f, t: ["--initial", _grid(t, _step())], "overshoots between the nodes"),
    "complex initial grid": (lambda f, t: ["--initial", _grid(t, np.ones((11, 11), complex))], "must be real"),
    "initial a FIFO": (lambda f, t: ["--initial", _fifo(t / "fifo.npy")], "not a regular file"),
    "true grid short": (lambda f, t: ["--true", _grid(t, np.ones((5, 11)))], "--true: its grid covers"),
    "two starts": (lambda f, t: ["--initial-velocity", "1"], "give one of --initial"),
    "zero time limit": (lambda f, t: ["--time-limit", "0"], "--time-limit must be a positive"),
    "NaN pml": (lambda f, t: ["--pml", "nan"], "--pml must be"),
    "odd domain": (lambda f, t: ["--domain", "0", "0", "1"], "2 d numbers"),
    "regularisation decay above 1": (lambda f, t: ["--regularization-decay", "2"],
                                     "--regularization-decay must be a number in [0, 1]"),
    "resume with other settings": (lambda f, t: ["--resume", str(t / "old")], "--survey, --initial, --spacing"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_line_and_writes_nothing(files, tmp_path, capsys, case):
    make, match = BAD[case]
    (tmp_path / "bad.npz").write_bytes(b"garbage, not a zip archive")
    out = tmp_path / "run"
    assert main(_args(files, out, *make(files, tmp_path))) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("helmpinn: ") and match in err, err
    assert not out.exists(), "no folder, no lock"


@pytest.mark.parametrize("args, match", [
    (["--initial-velocity", "1.0"], "--domain x0"),
    (["--initial-velocity", "1", "--method", "fwi"], "--method fwi needs --bounds"),
    (["--initial-velocity", "1", "--method", "fwi", "--bounds", "0.8", "1.3", "--seed", "1"],
     "--seed set helmpinn.invert's"),
    (["--initial-velocity", "1", "--method", "fwi", "--bounds", "0.8", "1.3", "--regularization-decay", "0.5"],
     "--regularization-decay set helmpinn.invert's"),
    (["--initial", "v0.npy"], "give the grid's --spacing"),
    ([], "--survey FILE.npz is required"),
])
def test_options_that_go_together(files, tmp_path, capsys, args, match):
    out = tmp_path / "run"
    assert main(["invert", "--out", str(out), *(["--survey", str(files / "survey.npz")] if args else []),
                 *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err and not out.exists()


def test_a_homogeneous_start_with_a_domain(files, tmp_path):
    out = tmp_path / "run"
    assert main(["invert", "--survey", str(files / "survey.npz"), "--initial-velocity", "1.0", "--domain", "0", "0",
                 "1", "1", "--pml", "0.3", "--time-limit", "20", "--out", str(out), *PINN, "--quiet",
                 "--no-plots"]) == 0
    assert json.loads((out / "metrics.json").read_text())["settings"]["initial_velocity"] == 1.0


_terminate_at = terminate_at   # (conftest: SIGTERM from the progress line of a step)


def test_sigterm_leaves_a_consistent_folder(files, tmp_path, capsys, monkeypatch):
    """A run stopped by SIGTERM writes its result so far: a pinn run its Inversion with the
    state to continue from (replacing the previous run's files), an fwi run its best model so far.
    Both exit with 143 and leave no temporary file."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        pytest.skip("SIGTERM is ignored in this process")
    out = tmp_path / "run"
    assert main(_args(files, out, "--quiet", "--no-plots", method="fwi")) == 0
    (out / "interrupted-metrics.json").write_text("{}")   # as an earlier version left it
    folder = runfiles.RunFolder.acquire(str(out))
    folder.record("interrupted-metrics.json")
    folder.release()
    handler = signal.getsignal(signal.SIGTERM)
    _terminate_at(monkeypatch, 2)
    assert main(_args(files, out, "--no-plots")) == 143
    err = capsys.readouterr().err
    assert "terminated, stopped on request" in err and f"--resume {out} continues it" in err
    stopped = json.loads((out / "metrics.json").read_text())
    assert stopped["interrupted"] and stopped["stopped"] == "terminated" and len(stopped["history"]) == 2
    assert stopped["result"] == "inversion.npz" and stopped["resumable"]
    assert set(os.listdir(out)) == BOOKKEEPING | {"inversion.npz", "velocity.npy", "metrics.json"}
    assert hp.Inversion.load(out / "inversion.npz").status == 3
    assert signal.getsignal(signal.SIGTERM) is handler

    seen = _terminate_at(monkeypatch, 1)
    assert main(_args(files, out, "--no-plots", method="fwi")) == 143
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["interrupted"] and metrics["stopped"] == "terminated" and metrics["steps"] == len(seen) == 1
    assert set(os.listdir(out)) == BOOKKEEPING | {"fwi.npz", "velocity.npy", "metrics.json"}
    with np.load(out / "fwi.npz", allow_pickle=False) as z:
        np.testing.assert_array_equal(z["velocity"], np.load(out / "velocity.npy"))


def test_ctrl_c_stops_after_the_step(files, tmp_path, capsys, monkeypatch):
    """Ctrl-C (SIGINT) as SIGTERM, with status 130: fwi writes its best model so far."""
    seen = []

    def progress(entry):
        seen.append(entry)
        if len(seen) == 1:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(cli_invert, "_progress", progress)
    out = tmp_path / "run"
    assert main(_args(files, out, "--no-plots", method="fwi")) == 130
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["stopped"] == "interrupted" and metrics["steps"] == len(seen) == 1
    assert "interrupted (Ctrl-C)" in capsys.readouterr().err


def test_a_second_run_into_a_running_runs_folder_is_refused(files, tmp_path, capsys, monkeypatch):
    """While a run is under way (its progress line), another into its folder is refused and
    changes nothing; the first run goes on and writes its result."""
    out = tmp_path / "run"
    second = []

    def progress(entry):
        if not second:
            second.append(main(_args(files, out, "--quiet", method="fwi")))
            second.append(sorted(os.listdir(out)))

    monkeypatch.setattr(cli_invert, "_progress", progress)
    assert main(_args(files, out, "--no-plots")) == 0
    assert second == [2, [".helmpinn.lock"]]
    assert "is in use by another helmpinn run" in capsys.readouterr().err
    assert json.loads((out / "metrics.json").read_text())["method"] == "pinn"


def test_a_locked_folder_is_refused(files, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    with runfiles.RunFolder.acquire(str(out)):   # another run holds the folder
        assert main(_args(files, out, "--quiet")) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "in use by another helmpinn run" in err
    assert set(os.listdir(out)) == {".helmpinn.lock"}


def test_a_file_helmpinn_did_not_write_is_kept(files, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text("my notes")
    assert main(_args(files, out, "--quiet")) == 2
    assert "was not written by helmpinn" in capsys.readouterr().err
    assert (out / "metrics.json").read_text() == "my notes" and "inversion.npz" not in os.listdir(out)


def test_resume_continues_a_stopped_run_as_if_uninterrupted(files, tmp_path, capsys, monkeypatch):
    """SIGTERM at step 2, then --resume DIR (with a longer --time-limit only): the folder's result
    is the uninterrupted run's, bit for bit (helmpinn.invert's start=), and its report says so."""
    full = tmp_path / "full"
    decay = ["--regularization-decay", "0.5"]   # a setting --resume must carry over (invert's start= checks it)
    assert main(_args(files, full, "--quiet", "--no-plots", *decay)) == 0
    out = tmp_path / "run"
    _terminate_at(monkeypatch, 2)
    assert main(_args(files, out, "--no-plots", *decay)) == 143   # (the progress lines send the signal)
    monkeypatch.setattr(cli_invert, "_progress", lambda entry: None)
    capsys.readouterr()
    assert main(["invert", "--resume", str(out), "--time-limit", "30", "--no-plots"]) == 0
    assert "continuing the run in" in capsys.readouterr().err
    a, b = hp.Inversion.load(full / "inversion.npz"), hp.Inversion.load(out / "inversion.npz")
    assert np.array_equal(a.coefficients, b.coefficients) and b.resume is None and b.status == a.status
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed"] and not metrics["resumable"] and metrics["steps"] == len(a.history)
    assert metrics["settings"]["time_limit"] == 30 and metrics["settings"]["seed"] is None
    assert metrics["settings"]["regularization"] == hp.inversion.api.DEFAULT_REGULARIZATION   # the β used
    # a finished run has nothing to continue; the folder is left as it was
    before = _outputs(out)
    assert main(["invert", "--resume", str(out)]) == 2
    assert "nothing to continue" in capsys.readouterr().err and _outputs(out) == before


def test_resume_of_a_folder_written_before_the_stage_decay(files, tmp_path, capsys, monkeypatch):
    """A folder whose report and saved Inversion lack ``regularization_decay`` (written before
    the option existed, with a fixed β), and whose report records no β (written before reports
    recorded the β used, when the default was 1e-5), resumes with those: the uninterrupted run
    with --regularization-decay 1 --regularization 1e-5."""
    full = tmp_path / "full"
    fixed = ["--regularization-decay", "1", "--regularization", "1e-5"]
    assert main(_args(files, full, "--quiet", "--no-plots", *fixed)) == 0
    out = tmp_path / "run"
    _terminate_at(monkeypatch, 2)
    assert main(_args(files, out, "--no-plots", *fixed)) == 143
    monkeypatch.setattr(cli_invert, "_progress", lambda entry: None)
    report = json.loads((out / "metrics.json").read_text())
    del report["settings"]["regularization_decay"]
    report["settings"]["regularization"] = None
    (out / "metrics.json").write_text(json.dumps(report))
    saved = hp.Inversion.load(out / "inversion.npz")
    del saved.resume["settings"]["regularization_decay"]
    saved.save(out / "inversion.npz")
    folder = runfiles.RunFolder.acquire(str(out))   # as that version recorded its files
    folder.record("metrics.json")
    folder.record("inversion.npz")
    folder.release()
    capsys.readouterr()
    assert main(["invert", "--resume", str(out), "--time-limit", "30", "--no-plots"]) == 0, capsys.readouterr().err
    a, b = hp.Inversion.load(full / "inversion.npz"), hp.Inversion.load(out / "inversion.npz")
    assert np.array_equal(a.coefficients, b.coefficients) and b.resume is None


def test_resume_continues_a_stopped_fwi_run(files, tmp_path, capsys, monkeypatch):
    """SIGTERM at fwi's iteration 2 of 5, then --resume DIR: helmpinn.reference.fwi's start=
    continues the frequency from the saved best model (L-BFGS-B's memory afresh), the history
    continued: the saved run's entries first, 5 iterations in all; the report says it was
    resumed and is not resumable any more."""
    out = tmp_path / "run"
    _terminate_at(monkeypatch, 2)
    assert main(_args(files, out, "--no-plots", "--max-steps", "5", method="fwi")) == 143
    stopped = json.loads((out / "metrics.json").read_text())
    assert stopped["resumable"] and stopped["steps"] == 2 and stopped["method"] == "fwi"
    saved = hp.reference.FWIResult.load(out / "fwi.npz")
    assert saved.resume["iterations"] == 2 and saved.stopped == "callback"
    monkeypatch.setattr(cli_invert, "_progress", lambda entry: None)
    capsys.readouterr()
    assert main(["invert", "--resume", str(out), "--no-plots"]) == 0
    assert "continuing the run in" in capsys.readouterr().err
    done = hp.reference.FWIResult.load(out / "fwi.npz")
    assert done.resume is None and done.stopped == "max_iter in every group"
    assert done.history["objective"][:2] == saved.history["objective"] and len(done.history["time"]) == 5
    assert done.history["objective"][2] <= saved.history["objective"][1]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed"] and not metrics["resumable"] and metrics["steps"] == 5 and metrics["ranks"] == 1
    np.testing.assert_array_equal(np.load(out / "velocity.npy"), done.velocity.values)


@pytest.mark.parametrize("case, match", [
    ("no folder", "no such folder"),
    ("no report", "no report of a helmpinn invert run"),
    ("fwi run", "that run ended (max_iter in every group); nothing to continue"),
    ("settings of the wrong type", "setting 'spacing' is not what --spacing takes"),
    ("an option for a path", "--survey: --help: no such file"),
    ("a setting out of range", "--pml must be a width >= 0"),
    ("a FIFO for the result", "not a regular file"),
    ("another --out", "--out cannot name another folder"),
])
def test_resume_refuses_what_it_cannot_continue(files, tmp_path, capsys, case, match):
    """A run folder's content is data: its settings become options parsed and checked again, its
    result is read without pickle; anything else is one line, status 2."""
    out = tmp_path / "run"
    extra = []
    if case != "no folder":
        out.mkdir()
    if case == "fwi run":
        assert main(_args(files, out, "--quiet", "--no-plots", method="fwi")) == 0
    elif case in ("settings of the wrong type", "an option for a path", "a setting out of range",
                  "a FIFO for the result"):
        settings = {"survey": str(files / "survey.npz"), "initial": str(files / "v0.npy"), "spacing": [0.1]}
        if case == "settings of the wrong type":
            settings["spacing"] = "__import__('os').system('echo hi')"
        if case == "an option for a path":
            settings["survey"] = "--help"
        if case == "a setting out of range":
            settings["pml"] = float("nan")
        (out / "metrics.json").write_text(json.dumps({"method": "pinn", "settings": settings}))
        if case == "a FIFO for the result":
            os.mkfifo(out / "inversion.npz")
            folder = runfiles.RunFolder.acquire(str(out))
            folder.record("metrics.json")
            folder.record("inversion.npz")
            folder.release()
    elif case == "another --out":
        extra = ["--out", str(tmp_path / "elsewhere")]
    assert main(["invert", "--resume", str(out), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err
