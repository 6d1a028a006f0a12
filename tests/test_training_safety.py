"""Training that never loses work: damaged model files, file permissions, the output folder,
Ctrl-C and --resume, diverging runs and CLI misuse."""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import wait_for

from helmpinn.cli import main
from helmpinn.training.status import RunStatus
from helmpinn.model import Model

TINY = ["--optimizer", "adam", "--hidden", "16", "--layers", "2", "--fourier", "8", "--points", "64",
        "--eval-every", "10", "--quiet", "--no-plots"]
#: What helmpinn train keeps in its output folder besides the outputs (helmpinn.runfiles).
BOOKKEEPING = [".helmpinn-manifest.json", ".helmpinn.lock"]


def _saved_model(tmp_path):
    m = Model.create(1, 8, 16, 2, seed=1)
    path = tmp_path / "model.npz"
    m.save(path, optimizer_state={"m": np.ones_like(m.params), "v": np.ones_like(m.params), "step": 3})
    return m, path


# -- damaged model files ---------------------------------------------------------------------
def test_load_truncated_file_names_the_path(tmp_path):
    _, path = _saved_model(tmp_path)
    data = path.read_bytes()
    bad = tmp_path / "truncated.npz"
    for cut in (0, 10, len(data) // 3, len(data) // 2, len(data) - 30, len(data) - 1):
        bad.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=re.escape(str(bad))):
            Model.load(bad)


def test_load_corrupted_file_names_the_path(tmp_path):
    m, path = _saved_model(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.find(m.params.tobytes())  # np.savez stores the arrays uncompressed
    assert at > 0
    data[at + 17] ^= 0xFF  # one flipped byte inside the parameters: a CRC mismatch
    bad = tmp_path / "corrupted.npz"
    bad.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=re.escape(str(bad)) + ".*(truncated or corrupted)"):
        Model.load(bad)
    with pytest.raises(ValueError, match=re.escape(str(tmp_path / "absent.npz"))):
        Model.load(tmp_path / "absent.npz")
    npy = tmp_path / "params.npy"  # a single array, not an archive
    np.save(npy, m.params)
    with pytest.raises(ValueError, match=re.escape(str(npy)) + ".*not an .npz archive"):
        Model.load(npy)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_save_permissions_follow_the_umask(tmp_path, umask):
    old = os.umask(umask)
    try:
        _, path = _saved_model(tmp_path)
        with open(tmp_path / "plain.txt", "w") as fh:  # what any other output gets
            fh.write("x")
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    assert os.stat(path).st_mode & 0o777 == os.stat(tmp_path / "plain.txt").st_mode & 0o777


def test_failed_save_leaves_no_temporary_file(tmp_path, monkeypatch):
    m, path = _saved_model(tmp_path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", boom)
    with pytest.raises(KeyboardInterrupt):
        m.save(path)
    assert os.listdir(tmp_path) == ["model.npz"] and path.read_bytes() == before


# -- CLI misuse: one line, exit 2, nothing created ----------------------------------------------
@pytest.mark.parametrize("bad, flag", [
    (["--steps", "0"], "--steps"), (["--points", "-5"], "--points"), (["--points", "0"], "--points"),
    (["--hidden", "0"], "--hidden"), (["--layers", "99"], "--layers"), (["--threads", "0"], "--threads"),
    (["--lr", "-1"], "--lr"), (["--lr", "nan"], "--lr"), (["--eval-every", "-1"], "--eval-every"),
    (["--resample", "-1"], "--resample"), (["--checkpoint-every", "-3"], "--checkpoint-every"),
    (["--seed", "-1"], "--seed"), (["--w-pde", "-1"], "--w-pde"), (["--target", "-1"], "--target"),
    (["--target", "nan"], "--target"), (["--time-limit", "0"], "--time-limit"),
])
def test_cli_misuse_is_one_line(tmp_path, capsys, bad, flag):
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "5", "--out", str(out), *bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("helmpinn: ") and flag in err, err
    assert not out.exists(), "nothing may be created before the options are checked"


def test_out_naming_a_file_is_refused_before_training(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("mine")
    for out, why in ((f, "is a file"), (f / "sub", "cannot write")):
        assert main(["train", "--problem", "plane1d", *TINY, "--steps", "5", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and why in err and "--out" in err
    assert f.read_text() == "mine"


def test_reused_out_keeps_user_files_and_drops_stale_outputs(tmp_path):
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY[:-1], "--steps", "6", "--out", str(out)]) == 0
    assert (out / "history.png").exists()
    (out / "notes.txt").write_text("my notes")
    (out / ".tmp-model.npz-0123456789ab.npz").write_bytes(b"half a save")  # a SIGKILL during a save
    (out / ".tmp-abcd1234.npz").write_bytes(b"not a name helmpinn gives")  # a user's, kept
    os.mkdir(out / "mine")
    # a misused second run removes nothing
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "0", "--out", str(out)]) == 2
    assert (out / "model.npz").exists() and (out / "history.png").exists()
    # a new run replaces the previous run's files: no figure of it is left beside the new metrics
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", "4", "--out", str(out)]) == 0
    assert sorted(os.listdir(out)) == [*BOOKKEEPING, ".tmp-abcd1234.npz", "metrics.json", "mine", "model.npz",
                                       "notes.txt"]
    assert (out / "notes.txt").read_text() == "my notes"
    assert Model.load(out / "model.npz").optimizer_state["step"] == 4
    assert json.loads((out / "metrics.json").read_text())["final_step"] == 4


def test_cli_outputs_have_the_same_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        assert main(["train", "--problem", "plane1d", *TINY, "--steps", "3", "--out", str(out)]) == 0
    finally:
        os.umask(old)
    modes = {name: os.stat(out / name).st_mode & 0o777 for name in os.listdir(out)}
    assert modes == {"model.npz": 0o644, "metrics.json": 0o644, **{name: 0o644 for name in BOOKKEEPING}}


# -- diverging runs -----------------------------------------------------------------------------
def test_overflowing_lr_writes_no_model(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["train", "--problem", "plane1d", *TINY, "--lr", "1e39", "--steps", "1", "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and not (out / "model.npz").exists(), "no non-finite (or untrained) model file"
    assert "non-finite" in err or "lr" in err, err
    assert "Traceback" not in err
    if (out / "metrics.json").exists():
        assert json.loads((out / "metrics.json").read_text())["diverged"] is True


def test_divergence_keeps_the_last_good_checkpoint(tmp_path, capsys, monkeypatch):
    from helmpinn import optim

    step = optim.Adam.step

    def faulty(self, params, grad):  # the parameters blow up at step 7
        step(self, params, grad)
        if self.step_count == 7:
            params[3] = np.inf

    monkeypatch.setattr(optim.Adam, "step", faulty)
    out = tmp_path / "run"
    rc = main(["train", "--problem", "plane1d", *TINY, "--steps", "20", "--checkpoint-every", "5",
               "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and "non-finite loss" in err and "step 8" in err and "kept the last good checkpoint" in err
    kept = Model.load(out / "model.npz")
    assert kept.optimizer_state["step"] == 5 and np.all(np.isfinite(kept.params))
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["diverged"] is True and metrics["final_step"] == 5


def test_untrained_weights_are_not_written_as_a_result(tmp_path, capsys, monkeypatch):
    from helmpinn import optim

    step = optim.Adam.step

    def faulty(self, params, grad):
        step(self, params, grad)
        if self.step_count == 3:
            params[:] = np.nan

    monkeypatch.setattr(optim.Adam, "step", faulty)
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "20", "--out", str(out)]) == 1
    assert "no model was written" in capsys.readouterr().err
    assert sorted(os.listdir(out)) == [*BOOKKEEPING, "metrics.json"]


# -- Ctrl-C and --resume ------------------------------------------------------------------------
def test_ctrl_c_saves_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-m", "helmpinn", "train", "--problem", "plane1d", *TINY, "--steps", "1000000",
           "--checkpoint-every", "5", "--out", str(out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_for(out / "model.npz", proc)  # training is under way
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and f"helmpinn train --resume {out}" in err
    metrics = json.loads((out / "metrics.json").read_text())
    saved = Model.load(out / "model.npz")
    stopped = metrics["final_step"]
    assert metrics["interrupted"] is True and stopped >= 5
    assert saved.optimizer_state["step"] == stopped == saved.metadata["step"]
    assert len(metrics["history"]["step"]) == stopped

    # --resume continues from the saved step, with the saved settings, to the new total
    assert main(["train", "--resume", str(out), "--steps", str(stopped + 7), "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    resumed = Model.load(out / "model.npz")
    assert resumed.optimizer_state["step"] == stopped + 7 == metrics["final_step"]
    assert metrics["resumed_from_step"] == stopped
    assert metrics["history"]["step"] == list(range(1, stopped + 8)), "the history goes on"
    assert metrics["settings"]["hidden"] == 16 and resumed.spec == saved.spec


def test_resume_misuse(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--resume", str(out)]) == 2
    assert "no such folder" in capsys.readouterr().err
    out.mkdir()
    assert main(["train", "--resume", str(out)]) == 2
    assert "no model.npz" in capsys.readouterr().err
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "4", "--out", str(out)]) == 0
    assert main(["train", "--resume", str(out), "--lr", "0.1"]) == 2
    assert "--lr cannot be given" in capsys.readouterr().err
    assert main(["train", "--resume", str(out), "--steps", "4"]) == 2
    assert "already at step 4" in capsys.readouterr().err
    Model.create(1, 8, 16, 2).save(out / "model.npz")  # a model, but not of a helmpinn train run
    assert main(["train", "--resume", str(out), "--steps", "8"]) == 2
    assert "no run settings" in capsys.readouterr().err


# -- the Trainer ------------------------------------------------------------------------------------
def _trainer(path=None, model=None, problem="dirichlet2d", **kw):
    from helmpinn.registry import get_problem
    from helmpinn.training.trainer import Trainer

    p = get_problem(problem)
    model = model or Model.create(p.dim, 8, 16, 2, seed=1, fourier_sigma=1.0)
    kw = {"lr": 1e-2, "pde_points": 128, "bc_points": 32, "progress": False, "eval_every": 0, "resample_every": 7,
          "seed": 3, "checkpoint_path": path, **kw}
    return Trainer(p, model, **kw)


@pytest.mark.parametrize("stop_at", [10, 14])  # 14: a checkpoint where new points are due next
def test_stopped_and_resumed_run_equals_an_uninterrupted_one(tmp_path, stop_at):
    full = _trainer()
    full.fit(30)
    path = tmp_path / "ckpt.npz"
    first = _trainer(path, callbacks=[lambda tr, s: tr.request_stop("test") if s == stop_at else None])
    first.fit(30)
    assert first.step == stop_at and first.stop_reason == f"test at step {stop_at}" and not first.diverged
    assert first.status is RunStatus.INTERRUPTED
    second = _trainer(path, model=Model.load(path))
    second.fit(30 - stop_at)
    assert second.step == 30 and second.history.step[0] == stop_at + 1
    assert second.history.loss == full.history.loss[stop_at:], "same points, same schedule, same steps"
    assert second.model.params.tobytes() == full.model.params.tobytes()


def test_sigint_stops_after_the_step(tmp_path):
    path = tmp_path / "ckpt.npz"

    def ctrl_c(tr, step):
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    # Python's own handler, whatever this process inherited: a job started with `&` by a
    # non-interactive shell ignores SIGINT, and Python then never installs it
    inherited = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        before = signal.getsignal(signal.SIGINT)
        tr = _trainer(path, callbacks=[ctrl_c], stop_on_interrupt=True)
        tr.fit(1000)
        assert tr.stop_reason.startswith("interrupted at step") and 3 <= tr.step < 10 and not tr.diverged
        assert Model.load(path).optimizer_state["step"] == tr.step, "the checkpoint is written"
        assert signal.getsignal(signal.SIGINT) is before, "the handler is put back"
        # without stop_on_interrupt, Ctrl-C is a KeyboardInterrupt as usual
        with pytest.raises(KeyboardInterrupt):
            _trainer(callbacks=[ctrl_c]).fit(1000)
    finally:
        signal.signal(signal.SIGINT, inherited)


def test_a_stop_requested_before_fit_stops_it_and_a_spent_one_does_not(tmp_path):
    """A SIGTERM (or any request_stop) that comes before fit() starts, or between two fits, is
    not lost: the fit stops after its first step, checkpointed. A request that stopped a fit is
    spent: the next fit runs its steps."""
    path = tmp_path / "ckpt.npz"
    tr = _trainer(path)
    tr.request_stop("terminated")
    tr.fit(50)
    assert tr.step == 1 and tr.stop_reason == "terminated at step 1" and not tr.diverged
    assert tr.status is RunStatus.INTERRUPTED
    assert tr.stop_requested == "terminated", "the reason stays readable after the fit"
    assert Model.load(path).optimizer_state["step"] == 1, "the checkpoint is written"
    tr.fit(4)   # the request stopped the first fit: the second runs all of its steps
    assert tr.step == 5 and tr.stop_reason is None and tr.stop_requested is None
    tr.request_stop("between fits")
    tr.fit_lm(6, blas_threads=1)
    assert tr.step == 6 and tr.stop_reason == "between fits at step 6"


def test_nonfinite_parameters_after_the_last_step(tmp_path):
    path = tmp_path / "ckpt.npz"

    def blow_up(tr, step):
        if step == 12:  # the last step: no loss evaluation follows it
            tr.model.params[0] = np.inf

    tr = _trainer(path, checkpoint_every=5, callbacks=[blow_up])
    tr.fit(12)
    assert tr.diverged and tr.stop_reason.startswith("non-finite parameters after step 12")
    assert tr.step == 10 and np.all(np.isfinite(tr.model.params))
    assert Model.load(path).params.tobytes() == tr.model.params.tobytes()


@pytest.mark.parametrize("draw", [1, 2])  # the first draw, or a later one (at step 8)
def test_nonfinite_training_data_is_named(draw):
    tr = _trainer()
    sample = tr.problem.sample
    draws = []

    def bad_sample(*a, **k):
        ts = sample(*a, **k)
        draws.append(ts)
        if len(draws) == draw:
            ts.x_pde[5, 1] = np.nan
        return ts

    tr.problem.sample = bad_sample
    with pytest.raises(ValueError, match=r"step (1|8):.*dirichlet2d.*\bx_pde\b"):
        tr.fit(20)
    assert np.all(np.isfinite(tr.model.params))


def test_trainer_and_fit_check_their_arguments():
    for kw, name in (({"pde_points": 0}, "pde_points"), ({"resample_every": -1}, "resample_every"),
                     ({"eval_every": -2}, "eval_every"), ({"checkpoint_every": -3}, "checkpoint_every"),
                     ({"bc_points": -1}, "bc_points")):
        with pytest.raises(ValueError, match=name):
            _trainer(**kw)
    tr = _trainer()
    with pytest.raises(ValueError, match="steps"):
        tr.fit(-1)
    tr.model.params[2] = np.nan
    with pytest.raises(ValueError, match="parameters contain NaN"):
        tr.fit(3)


# -- --optimizer lbfgs (issue #24 item 1) -------------------------------------------------------------
LBFGS_TINY = ["--problem", "plane1d", "--k", "5", "--optimizer", "lbfgs", "--hidden", "8", "--layers", "1",
              "--fourier", "4", "--points", "60", "--quiet", "--no-plots"]


@pytest.mark.parametrize("warm", [None, 0, 3])
def test_optimizer_lbfgs_writes_the_lbfgs_model(tmp_path, capsys, warm):
    """Without --warm-start (a KeyError once), with 0 (no model written once) and with 3 (the
    warm start's parameters written once): model.npz holds the L-BFGS result the report gives."""
    from helmpinn.registry import get_problem
    from helmpinn.training.trainer import relative_l2

    out = tmp_path / "run"
    extra = [] if warm is None else ["--warm-start", str(warm)]
    assert main(["train", *LBFGS_TINY, "--steps", "12", *extra, "--out", str(out)]) == 0, capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    model = Model.load(out / "model.npz")
    iterations = metrics["lbfgs"]["iterations"]
    done = (warm or 0) + iterations
    assert 1 <= iterations <= 12 and metrics["final_step"] == done == model.optimizer_state["step"]
    assert metrics["history"]["step"] == list(range(1, done + 1)) and metrics["steps"] == done
    problem = get_problem("plane1d", k=5.0)
    x = problem.test_points(None)
    assert relative_l2(model.predict(x), problem.exact_at(x)) == metrics["final"]["relative_l2"]
    assert metrics["final"]["relative_l2"] == metrics["lbfgs"]["error_after"]
    assert model.metadata["settings"]["warm_start"] == (warm or 0)


def test_optimizer_lbfgs_resumes_after_its_checkpoint(tmp_path):
    out = tmp_path / "run"
    assert main(["train", *LBFGS_TINY, "--steps", "5", "--warm-start", "2", "--out", str(out)]) == 0
    first = json.loads((out / "metrics.json").read_text())["final_step"]
    assert main(["train", "--resume", str(out), "--steps", "9", "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["resumed_from_step"] == first and metrics["final_step"] == Model.load(out / "model.npz").optimizer_state["step"]
    assert first < metrics["final_step"] <= 11 and metrics["history"]["step"] == list(range(1, metrics["final_step"] + 1))


# -- stops over MPI ---------------------------------------------------------------------------------
_STOP_WORKER = r'''
import json, sys
from mpi4py import MPI
import helmpinn as hp

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
now = [0.0]

def tick(tr, step):
    now[0] = float(step) if rank == 1 else 0.0   # only rank 1's clock runs: 1 s a step
    if rank == 0 and step == 5:
        tr.request_stop("rank 0 asked")

p = hp.get_problem("plane1d", k=4.0)
tr = hp.Trainer(p, hp.Model.create(1, 4, 8, 1, seed=0), pde_points=32, bc_points=2, progress=False, eval_every=0,
                comm=comm, time_limit=3.0, clock=lambda: now[0], callbacks=[tick])
tr.fit(50)
first = (tr.step, tr.stop_reason)
tr.time_limit = None
tr.fit(50)
json.dump({"first": first, "second": (tr.step, tr.stop_reason)}, open(sys.argv[1] + f"/rank{rank}.json", "w"))
'''


def test_time_limit_and_stop_request_on_one_rank_stop_every_rank(tmp_path):
    """A clock past the limit, or a stop request, on one rank only: every rank stops at the same
    step (one Allreduce of the two flags a step), where a rank alone would leave the others
    waiting in the next step's collective."""
    import shutil

    pytest.importorskip("mpi4py", reason='mpi4py is not installed (pip install ".[mpi]")')
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = mpiexec if os.access(mpiexec, os.X_OK) else shutil.which("mpiexec")
    if mpiexec is None:
        pytest.skip("no mpiexec on PATH")
    script = tmp_path / "worker.py"
    script.write_text(_STOP_WORKER)
    cmd = [mpiexec]
    if "Open MPI" in subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout:
        cmd += ["--allow-run-as-root", "--oversubscribe"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    try:
        res = subprocess.run([*cmd, "-n", "2", sys.executable, str(script), str(tmp_path)], capture_output=True,
                             text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the ranks did not stop together (a rank waiting in a collective):\n{exc.stderr}")
    assert res.returncode == 0, res.stderr
    r0, r1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert r0["first"] == r1["first"] == [3, "time limit 3 s reached at step 3"]
    assert r0["second"] == [5, "rank 0 asked at step 5"] and r1["second"] == [5, "stop requested on another rank at step 5"]
