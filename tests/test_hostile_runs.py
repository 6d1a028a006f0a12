"""``helmpinn train`` and the Trainer against hostile run folders and factories (issue #61): a
run folder is data and never names code to run; a user's factory that exits, raises or has
defaults JSON cannot write is one line before training; a checkpoint that cannot be written
does not end the run; a resumed run whose problem changed is named as such."""
import json
import os
import sys

import numpy as np
import pytest

from helmpinn.cli import main

TINY = ["--optimizer", "adam", "--hidden", "8", "--layers", "1", "--fourier", "4", "--points", "32",
        "--bc-points", "8", "--eval-every", "0", "--quiet", "--no-plots"]

FACTORY = '''
import numpy as np
import helmpinn as hp

def make(k: float = 3.0):
    """A 1-D plane wave of my own."""
    return hp.Problem(hp.geometry.Interval(0, 1), kappa=k * k,
                      bcs={"xmin": hp.Dirichlet(1.0), "xmax": hp.Sommerfeld(k)},
                      exact=lambda x: np.exp(1j * k * x[:, 0]))
'''


def _one_line(err):
    assert err.count("\n") == 1 and err.startswith("helmpinn: ") and "Traceback" not in err, err


def _rewrite_metadata(path, **changes):
    """Rewrite model.npz's metadata (its settings too) as someone handing over a folder could."""
    arrays = dict(np.load(path))
    meta = json.loads(str(arrays["metadata"]))
    for key, value in changes.items():
        meta[key] = value
        meta["settings"][key] = value
    arrays["metadata"] = np.array(json.dumps(meta))
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


@pytest.fixture
def user_file(tmp_path):
    path = tmp_path / "my_problem.py"
    path.write_text(FACTORY)
    return path


# -- finding 1: a run folder never names code to run -----------------------------------------------
def test_resume_never_calls_what_the_run_folder_names(tmp_path, capsys):
    out, marker = tmp_path / "run", tmp_path / "ran"
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", "2", "--out", str(out)]) == 0
    _rewrite_metadata(out / "model.npz", problem="os:system", problem_options={"command": f"touch {marker}"})
    before = (out / "model.npz").read_bytes()
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--steps", "4"]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "names the problem 'os:system', a factory that is not built in" in err
    assert "--problem os:system" in err   # what to pass, for a factory the user trusts
    assert not marker.exists()
    assert (out / "model.npz").read_bytes() == before
    # a --problem that names another problem than the run's is refused too
    assert main(["train", "--resume", str(out), "--steps", "4", "--problem", "plane1d"]) == 2
    assert "is a run of problem 'os:system'; --problem 'plane1d' names another" in capsys.readouterr().err
    assert not marker.exists()


def test_a_users_factory_resumes_when_the_command_line_names_it(user_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    assert main(["train", "--problem", "my_problem.py:make", *TINY, "--steps", "2", "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--steps", "4"]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"--problem {user_file}:make" in err
    # named again (relative to here, as it was given): the run goes on
    assert main(["train", "--resume", str(out), "--steps", "4", "--problem", "my_problem.py:make"]) == 0
    assert json.loads((out / "metrics.json").read_text())["final_step"] == 4


# -- finding 19: a factory that exits or raises is one line, before anything is written ------------
@pytest.mark.parametrize("body, words", [
    ("import sys\n\ndef make(k: float = 3.0):\n    sys.exit(0)\n", "the factory called sys.exit(0)"),
    ("def make(k: float = 3.0):\n    raise RuntimeError('no data here')\n",
     "the factory raised RuntimeError: no data here"),
    ("raise RuntimeError('broken at import')\n\ndef make(k: float = 3.0):\n    pass\n",
     "the factory raised RuntimeError: broken at import"),
    ("raise SystemExit(3)\n", "the factory called sys.exit(3)"),
], ids=["exit", "raises", "raises-on-import", "exits-on-import"])
def test_a_factory_that_exits_or_raises_is_one_line(tmp_path, capsys, body, words):
    (tmp_path / "bad.py").write_text(body)
    out = tmp_path / "run"
    spec = f"{tmp_path / 'bad.py'}:make"
    assert main(["train", "--problem", spec, *TINY, "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"problem {spec!r}: {words}" in err
    assert not out.exists()


def test_resuming_after_the_factory_changed_names_it(user_file, tmp_path, capsys):
    """The checkpoint records the problem's fingerprint; a factory edited since (here: the
    interval doubled) is refused on resume naming what differs, before training."""
    out, spec = tmp_path / "run", f"{user_file}:make"
    assert main(["train", "--problem", spec, *TINY, "--steps", "2", "--out", str(out)]) == 0
    before = (out / "model.npz").read_bytes()
    user_file.write_text(FACTORY.replace("Interval(0, 1)", "Interval(0, 2)"))
    os.utime(user_file, ns=(1, 10**18))   # a new mtime, whatever the clock's resolution
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--steps", "4", "--problem", spec]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"problem {spec!r} now builds another problem than the run trained on (the interior points " \
           "(the geometry)" in err and "changed since" in err
    assert (out / "model.npz").read_bytes() == before
    # the factory as it was: the run goes on
    user_file.write_text(FACTORY)
    os.utime(user_file, ns=(1, 2 * 10**18))
    assert main(["train", "--resume", str(out), "--steps", "4", "--problem", spec]) == 0


# -- finding 10: options JSON cannot hold never fail a write at the end of a run -------------------
ODD_DEFAULTS = '''
import numpy as np
import helmpinn as hp

def make(k: float = 3.0, weight=lambda x: x, c: complex = 1 + 2j, shape=np.zeros(3)):
    assert callable(weight) and isinstance(c, complex) and isinstance(shape, np.ndarray)
    return hp.get_problem("plane1d", k=k)
'''


def test_a_factory_default_json_cannot_hold_is_not_recorded(tmp_path, capsys):
    """Defaults that are a function, a complex and an array: the run writes its model and its
    report (they record the other options, and these by repr), and resumes with the
    factory's defaults again."""
    (tmp_path / "odd.py").write_text(ODD_DEFAULTS)
    out, spec = tmp_path / "run", f"{tmp_path / 'odd.py'}:make"
    assert main(["train", "--problem", spec, *TINY, "--steps", "2", "--out", str(out), "--k", "4"]) == 0
    meta = json.loads(str(np.load(out / "model.npz")["metadata"]))
    assert meta["problem_options"] == {"k": 4.0}
    by_repr = meta["problem_options_by_repr"]
    assert set(by_repr) == {"weight", "c", "shape"} and by_repr["c"] == "(1+2j)"
    assert json.loads((out / "metrics.json").read_text())["settings"]["problem_options"] == {"k": 4.0}
    assert main(["train", "--resume", str(out), "--steps", "4", "--problem", spec]) == 0
    assert json.loads((out / "metrics.json").read_text())["final_step"] == 4


def test_metadata_a_checkpoint_cannot_hold_is_refused_before_training(tmp_path):
    import helmpinn as hp

    model = hp.Model.create(1, 4, 8, 1, seed=0)
    model.metadata = {"note": print}
    with pytest.raises(ValueError, match="checkpoint_path: the model's metadata cannot be written .*builtin_function"):
        hp.Trainer(hp.get_problem("plane1d"), model, checkpoint_path=tmp_path / "m.npz", progress=False)
    assert not (tmp_path / "m.npz").exists()


# -- finding 14: a checkpoint that cannot be written does not end the run --------------------------
def _full_disk(monkeypatch, fail_calls):
    """numpy.savez writes a little, then fails as a full disk does, on the calls numbered in
    ``fail_calls`` (from 1; "all": every call)."""
    import errno

    real, calls = np.savez, []

    def savez(fh, **arrays):
        calls.append(1)
        if fail_calls == "all" or len(calls) in fail_calls:
            fh.write(b"PK\x03\x04 part of a file")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fh, **arrays)

    monkeypatch.setattr(np, "savez", savez)
    return calls


def test_a_failed_periodic_checkpoint_is_retried_and_the_run_goes_on(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    _full_disk(monkeypatch, {1, 2})   # the checkpoints at steps 2 and 4; those at 6 and the end succeed
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", "7", "--checkpoint-every", "2",
                 "--out", str(out)]) == 0
    err = capsys.readouterr().err
    failures = [ln for ln in err.splitlines() if "could not write the checkpoint" in ln]
    assert len(failures) == 2 and "Traceback" not in err, err
    assert f"could not write the checkpoint {out / 'model.npz'} at step 2 (No space left on device); no " \
           "checkpoint of this run was written yet; training goes on and the next checkpoint tries again" in failures[0]
    assert "at step 4" in failures[1]
    assert json.loads(str(np.load(out / "model.npz")["metadata"]))["step"] == 7
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")]


def test_a_failed_last_checkpoint_keeps_the_last_good_file(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", "2", "--out", str(out)]) == 0
    before = (out / "model.npz").read_bytes()
    _full_disk(monkeypatch, "all")
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--steps", "6", "--checkpoint-every", "2"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("helmpinn: the run's last checkpoint was not written: could not write the checkpoint ")
    assert f"at step 6 (No space left on device); {out / 'model.npz'} keeps step 2; wrote {out / 'metrics.json'}" \
        in last
    assert (out / "model.npz").read_bytes() == before   # the last good file, whole
    assert json.loads((out / "metrics.json").read_text())["final_step"] == 6
    assert not [n for n in os.listdir(out) if n.startswith(".tmp-")]


# -- finding 19: hp.solve's numbers are checked before anything is planned -------------------------
@pytest.mark.parametrize("name, value, error, words", [
    ("tol", float("inf"), ValueError, "solve: tol must be a finite number > 0, got inf"),
    ("tol", "1e-3", TypeError, "solve: tol must be a real number, got '1e-3'"),
    ("tol", True, TypeError, "solve: tol must be a real number, got True"),
    ("time_limit", True, TypeError, "solve: time_limit must be a real number, got True"),
    ("time_limit", "5", TypeError, "solve: time_limit must be a real number, got '5'"),
    ("time_limit", float("nan"), ValueError, "solve: time_limit must be a finite number > 0, got nan"),
    ("memory_bytes", "2", TypeError, "solve: memory_bytes must be an integer, got '2'"),
    ("memory_bytes", True, TypeError, "solve: memory_bytes must be an integer, got True"),
    ("memory_bytes", -1, ValueError, "solve: memory_bytes must be an integer >= 1, got -1"),
])
def test_solve_checks_its_numbers_before_planning(monkeypatch, name, value, error, words):
    import helmpinn as hp
    from helmpinn import solving

    def plan(*args, **kw):
        raise AssertionError("planned before the arguments were checked")

    monkeypatch.setattr(solving, "run_plan", plan)
    with pytest.raises(error, match="^" + words.replace("(", r"\(") + "$"):
        hp.solve(hp.get_problem("plane1d", k=4.0), progress=False, **{name: value})


def test_a_report_that_cannot_be_written_is_one_line(tmp_path, capsys, monkeypatch):
    import errno

    from helmpinn import runfiles

    def write(self, name, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runfiles.RunFolder, "write", write)
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", "2", "--out", str(out)]) == 1
    err = capsys.readouterr().err
    _one_line(err)
    assert f"could not write the report or the figures in {out} (No space left on device); " \
           f"{out / 'model.npz'} holds step 2" in err
    assert json.loads(str(np.load(out / "model.npz")["metadata"]))["step"] == 2
