"""The command line against hostile and unlucky use: two runs into one folder, SIGTERM, runs
that stop or diverge beside a previous run's files, files helmpinn did not write, typos that
would need more memory than there is, non-finite options, FIFOs and devices under helmpinn's
file names; and a fuzz of option combinations (each run in-process, a few steps)."""
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
from conftest import wait_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helmpinn import _budget, memory, runfiles
from helmpinn.cli import main
from helmpinn.models.model import Model
from helmpinn.problems.registry import list_problems, problem_options

TINY = ["--optimizer", "adam", "--hidden", "8", "--layers", "1", "--fourier", "4", "--points", "32",
        "--eval-every", "0", "--quiet", "--no-plots"]
BOOKKEEPING = {".helmpinn-manifest.json", ".helmpinn.lock"}
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p), "OMP_NUM_THREADS": "1"}


@pytest.fixture(autouse=True)
def _cap_address_space():
    """Every test here runs with at most 4 GiB more address space than the process has: a
    regression that allocates what a check should have refused (10⁹ points, /dev/zero read to
    the end) then fails with MemoryError instead of taking the machine's memory."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as fh:
        size = int(fh.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    cap = size + (4 << 30)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _train(out, *extra, steps=3):
    return main(["train", "--problem", "plane1d", "--k", "5", *TINY, "--steps", str(steps), "--out", str(out),
                 *extra])


def _files(out):
    """Every output file's bytes (the bookkeeping aside)."""
    return {n: (out / n).read_bytes() for n in os.listdir(out) if n not in BOOKKEEPING and (out / n).is_file()}


def _one_line(err):
    assert err.count("\n") == 1 and err.startswith("helmpinn: ") and "Traceback" not in err, err


@contextlib.contextmanager
def _deadline(seconds):
    """Fail (instead of hanging) when the block takes longer than ``seconds``."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _start(out, *extra):
    """A long run in a subprocess, checkpointing every 5 steps."""
    cmd = [sys.executable, "-m", "helmpinn", "train", "--problem", "plane1d", *TINY, "--steps", "1000000",
           "--checkpoint-every", "5", "--out", str(out), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)


def _stop(proc, sig):
    try:
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return err


# -- item 4: one run per folder ------------------------------------------------------------------
def test_second_run_into_a_locked_folder_is_refused_and_touches_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out) == 0
    before = _files(out)
    in_flight = out / ".tmp-model.npz-0123456789ab.npz"  # the first run's save under way
    in_flight.write_bytes(b"half a save")
    with runfiles.RunFolder.acquire(str(out)):  # the first run holds the folder
        capsys.readouterr()
        assert _train(out) == 2
        err = capsys.readouterr().err
        _one_line(err)
        assert "is in use by another helmpinn run" in err and f"pid {os.getpid()}" in err
        assert main(["train", "--resume", str(out), "--steps", "9", "--quiet"]) == 2
        assert "in use by another helmpinn run" in capsys.readouterr().err
        assert in_flight.read_bytes() == b"half a save", "the first run's temporary file is its own"
        assert _files(out) == {**before, in_flight.name: b"half a save"}
    # once the first run is gone, the next one cleans up what it left
    assert _train(out, steps=4) == 0
    assert not in_flight.exists()


def test_two_processes_one_folder(tmp_path):
    """A real second process: refused while the first trains; the first is not disturbed."""
    out = tmp_path / "run"
    proc = _start(out)
    try:
        wait_for(out / "model.npz", proc)
        r = subprocess.run([sys.executable, "-m", "helmpinn", "train", "--problem", "plane1d", *TINY,
                            "--steps", "5", "--out", str(out)], capture_output=True, text=True, env=ENV,
                           timeout=120)
        assert r.returncode == 2 and f"in use by another helmpinn run (pid {proc.pid})" in r.stderr, r.stderr
        assert proc.poll() is None, "the first run goes on"
    finally:
        err = _stop(proc, signal.SIGINT)
    assert proc.returncode == 130 and "Traceback" not in err, err
    assert Model.load(out / "model.npz").optimizer_state["step"] >= 5


# -- item 5a: SIGTERM -----------------------------------------------------------------------------
def test_a_sigterm_before_fit_begins_still_stops_the_run():
    """A SIGTERM that came after the CLI installed its handler but before fit began stays
    pending (Trainer.request_stop outside a fit) and stops the run after its first step."""
    import helmpinn as hp
    from helmpinn.cli.runs import stop_on_sigterm

    if signal.getsignal(signal.SIGTERM) is signal.SIG_IGN:
        pytest.skip("SIGTERM is ignored in this process")
    trainer = hp.Trainer(hp.get_problem("plane1d", k=5), hp.Model.create(1, 4, 8, 1, seed=0),
                         pde_points=32, progress=False, eval_every=0, val_points=0)
    with stop_on_sigterm(trainer) as seen, contextlib.redirect_stderr(io.StringIO()):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(0.01)
        assert seen == [True]
        trainer.fit(50)
    assert trainer.step == 1 and "terminated" in trainer.stop_reason
    assert signal.getsignal(signal.SIGTERM) is not None and not trainer.callbacks


def test_sigterm_checkpoints_and_exits_143(tmp_path):
    out = tmp_path / "run"
    proc = _start(out)
    wait_for(out / "model.npz", proc)
    err = _stop(proc, signal.SIGTERM)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "terminated at step" in err and f"--resume {out}" in err
    metrics = json.loads((out / "metrics.json").read_text())
    stopped = metrics["final_step"]
    assert metrics["interrupted"] is True and stopped >= 5 and metrics["stop_reason"].startswith("terminated")
    assert Model.load(out / "model.npz").optimizer_state["step"] == stopped
    assert main(["train", "--resume", str(out), "--steps", str(stopped + 3), "--quiet", "--no-plots"]) == 0
    assert json.loads((out / "metrics.json").read_text())["history"]["step"] == list(range(1, stopped + 4))


def test_a_second_sigterm_ends_the_process_at_once():
    """The first SIGTERM asks the trainer to stop; a second one ends the process (as SIGTERM does
    by default), for a stop that takes too long."""
    code = """if True:
        import os, signal, sys, time
        from helmpinn.cli.runs import stop_on_sigterm

        class Trainer:
            callbacks = []

            def request_stop(self, reason):
                print("stop requested:", reason, flush=True)

        with stop_on_sigterm(Trainer()) as seen:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            print("first seen:", seen, flush=True)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
        print("still alive", flush=True)
    """
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == -signal.SIGTERM, (r.returncode, r.stdout, r.stderr)
    assert "stop requested: terminated" in r.stdout and "first seen: [True]" in r.stdout
    assert "still alive" not in r.stdout


# -- item 5b: nothing moved aside before something better exists -----------------------------------
def test_new_run_keeps_the_previous_files_until_its_model_exists(tmp_path, monkeypatch):
    from helmpinn.training.trainer import Trainer

    out = tmp_path / "run"
    assert _train(out, "--eval-every", "2", "--no-plots", "--lbfgs", "0") == 0
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY[:-1], "--steps", "3", "--out", str(out)]) == 0
    previous = _files(out)
    assert {"model.npz", "metrics.json", "history.png"} <= set(previous)
    seen = {}
    fit = Trainer.fit

    def watching_fit(self, *args, **kwargs):
        seen.update(_files(out))
        return fit(self, *args, **kwargs)

    monkeypatch.setattr(Trainer, "fit", watching_fit)
    assert _train(out, steps=4) == 0
    assert seen == previous, "when training starts, the previous run's files are all there"
    # the new run has its model: the previous run's figures (this one draws none) are gone
    assert set(_files(out)) == {"model.npz", "metrics.json"}


def test_diverged_new_run_leaves_the_previous_run_in_place(tmp_path, capsys, monkeypatch):
    from helmpinn import optim

    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", "--k", "5", *TINY[:-1], "--steps", "3", "--out", str(out)]) == 0
    previous = _files(out)
    step = optim.Adam.step

    def faulty(self, params, grad):  # no checkpoint before the parameters blow up
        step(self, params, grad)
        if self.step_count == 2:
            params[:] = np.nan

    monkeypatch.setattr(optim.Adam, "step", faulty)
    capsys.readouterr()
    assert _train(out, steps=6) == 1
    err = capsys.readouterr().err
    assert "no model was written" in err and "previous run's model.npz" in err and "left as they were" in err
    now = _files(out)
    report = json.loads(now.pop("diverged-metrics.json"))
    assert report["diverged"] is True and report["final"]["relative_l2"] is None
    assert now == previous, "the previous run's model, report and figures are untouched"
    monkeypatch.undo()
    assert _train(out, steps=2) == 0  # a good run replaces everything, the diverged report too
    assert set(_files(out)) == {"model.npz", "metrics.json"}


def test_resume_keeps_the_history_whatever_stops_it(tmp_path, monkeypatch):
    """--resume does not delete metrics.json at start; a resumed leg killed before its report
    (SIGKILL: nothing written but checkpoints) loses only its own steps' history."""
    from helmpinn.cli import train_report
    from helmpinn.training.trainer import Trainer

    out = tmp_path / "run"
    assert _train(out, steps=5) == 0
    first = json.loads((out / "metrics.json").read_text())
    seen = []
    fit = Trainer.fit

    def watching_fit(self, *args, **kwargs):
        seen.append((out / "metrics.json").read_bytes())
        return fit(self, *args, **kwargs)

    def killed(*a, **k):  # the process dies after training, before any report
        raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "fit", watching_fit)
    monkeypatch.setattr(train_report, "write_outputs", killed)
    assert main(["train", "--resume", str(out), "--steps", "12", "--checkpoint-every", "4", "--quiet",
                 "--no-plots"]) == 130
    assert seen and json.loads(seen[0]) == first, "metrics.json is there while the resumed leg trains"
    assert json.loads((out / "metrics.json").read_text()) == first
    assert Model.load(out / "model.npz").optimizer_state["step"] == 12
    monkeypatch.undo()
    assert main(["train", "--resume", str(out), "--steps", "14", "--quiet", "--no-plots"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["history"]["step"] == [1, 2, 3, 4, 5, 13, 14], "the first leg's history is kept"


# -- item 5c: only helmpinn's files ---------------------------------------------------------------
@pytest.mark.parametrize("name", ["metrics.json", "model.npz", "history.png"])
def test_a_users_file_under_a_helmpinn_name_is_never_replaced(tmp_path, capsys, name):
    out = tmp_path / "run"
    out.mkdir()
    (out / name).write_text("my own")
    (out / ".tmp-notes.npz").write_text("my notes")
    extra = [] if name.endswith(".png") else ["--no-plots"]
    assert main(["train", "--problem", "plane1d", *TINY[:-1], *extra, "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"{name} there was not written by helmpinn" in err
    assert _files(out) == {name: b"my own", ".tmp-notes.npz": b"my notes"}
    if name.endswith(".png"):  # without figures the run does not need that name
        assert _train(out) == 0
        assert (out / name).read_text() == "my own"
    assert (out / ".tmp-notes.npz").read_text() == "my notes"


def test_a_file_changed_since_helmpinn_wrote_it_is_not_replaced(tmp_path, capsys):
    out = tmp_path / "run"
    assert _train(out) == 0
    for name in ("model.npz", "metrics.json"):
        with open(out / name, "ab") as fh:
            fh.write(b"\n")  # the user's now
        capsys.readouterr()
        assert _train(out) == 2
        assert f"{name} there was not written by helmpinn (or was changed since" in capsys.readouterr().err
        (out / name).unlink()
    assert _train(out) == 0


def test_outputs_without_a_record_are_not_replaced(tmp_path, capsys):
    """A folder of an older helmpinn (no manifest): named as such, and left as it is."""
    out = tmp_path / "run"
    assert _train(out) == 0
    (out / ".helmpinn-manifest.json").unlink()
    previous = _files(out)
    capsys.readouterr()
    assert _train(out) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "model.npz there was not written by helmpinn (or by a helmpinn older than its record" in err
    assert _files(out) == previous


def test_resume_of_a_folder_without_a_model_writes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    assert main(["train", "--resume", str(out), "--steps", "5"]) == 2
    assert "no model.npz there" in capsys.readouterr().err
    assert os.listdir(out) == []


@pytest.mark.parametrize("name", ["model.npz", "metrics.json", "solution.png", "error.png", "history.png"])
def test_a_directory_under_an_output_name_fails_before_training(tmp_path, capsys, name, monkeypatch):
    from helmpinn.training.trainer import Trainer

    out = tmp_path / "run"
    (out / name).mkdir(parents=True)
    monkeypatch.setattr(Trainer, "fit", lambda *a, **k: pytest.fail("trained"))
    assert main(["train", "--problem", "plane1d", *TINY[:-1], "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"{name} there is a directory" in err
    assert (out / name).is_dir() and not (out / "metrics.json").is_file()


# -- item 5d: memory before it is used -------------------------------------------------------------
@pytest.mark.parametrize("option, value", [("--points", "1000000000"), ("--bc-points", "1000000000"),
                                           ("--hidden", "200000"), ("--fourier", "100000000")])
def test_a_run_that_cannot_fit_in_memory_is_refused_before_anything(tmp_path, capsys, monkeypatch, option,
                                                                    value):
    out = tmp_path / "run"
    assert _train(out) == 0
    previous = _files(out)
    monkeypatch.setattr(_budget, "available_memory", lambda: 8 << 30)   # the one reading of every kind
    capsys.readouterr()
    assert _train(out, option, value) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"{option} {value}" in err and "more than 80% of the 8.0 GiB of memory available" in err
    for part in ("points arrays", "training set", "workspace", "parameters"):
        assert part in err, err
    assert _files(out) == previous
    assert _train(tmp_path / "new", option, value) == 2
    assert not (tmp_path / "new").exists(), "refused before the folder is made"


def test_lm_matrices_are_counted_before_anything(tmp_path, capsys, monkeypatch):
    """--optimizer lm: LM's own estimate of its system (helmpinn.optim.lm.choose_solver and
    memory_estimate) is part of the refusal, and LM's refusal of a dense solver is a usage error."""
    from helmpinn.optim import lm

    seen = []

    def choose_solver(P, R, solver="auto", *, max_matrix_bytes=2 << 30, **memory):
        seen.append((P, R, solver, max_matrix_bytes, memory))
        if solver == "dual":
            raise ValueError("solver 'dual' needs about 1 TiB")
        return "primal"

    monkeypatch.setattr(lm, "choose_solver", choose_solver, raising=False)
    monkeypatch.setattr(lm, "memory_estimate", lambda P, R, solver, **memory: 1 << 50, raising=False)
    out = tmp_path / "run"
    args = ["train", "--problem", "dirichlet2d", "--optimizer", "lm", "--points", "64", "--bc-points", "16",
            "--hidden", "8", "--fourier", "4", "--steps", "2", "--quiet", "--no-plots", "--out", str(out)]
    assert main(args) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "LM's primal system 1024.0 TiB" in err and "workspace" in err
    assert seen[0][1] == 2 * (64 + 16) and seen[0][2] == "auto"
    assert seen[0][4]["dtype"] == "float64" and seen[0][4]["gram"] in ("float64", "float32")
    assert main([*args, "--lm-solver", "dual"]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "--optimizer lm: solver 'dual' needs about 1 TiB" in err
    assert not out.exists()


def test_memory_estimate_adds_up():
    sizes = runfiles.training_memory(2, 1000, 100, 500, "float32", 12345)
    assert sizes["workspace"] == 12345 and sizes["parameters"] == 8 * 500 * 4
    assert sizes["points arrays"] > 1000 * 2 * 8 and sizes["training set"] > 1000 * (2 * 8 + 16)
    total = sum(sizes.values())
    assert runfiles.check_memory(sizes, "x", available=2 * total) == total
    with pytest.raises(runfiles.MemoryBudgetError, match="x needs about"):
        runfiles.check_memory(sizes, "x", available=total)
    avail = runfiles.available_memory()
    assert avail is None or avail > 0


def test_workspace_estimate_matches_the_core():
    """The estimate follows the core's own sizing: a workspace's memory_bytes, within 10-15%."""
    from helmpinn import _core

    for dims, dtype in (((1, 8, 16, 2), "float32"), ((3, 32, 64, 3), "float64"), ((2, 4, 200, 1), "float32")):
        spec = _core.ModelSpec(*dims)
        ws = _core.Workspace(spec, 512, dtype)
        threads = max(_core.get_num_threads(), len(os.sched_getaffinity(0)))  # as the core sizes it
        est = runfiles.workspace_bytes(spec, dtype, 512, threads=threads)
        assert 0.9 * ws.memory_bytes <= est <= 1.15 * ws.memory_bytes, (dims, est, ws.memory_bytes)


# -- item 10: options ------------------------------------------------------------------------------
PROBLEM_FLOATS = [(name, opt) for name, _ in list_problems() for opt in problem_options(name)]


@pytest.mark.parametrize("problem, option", PROBLEM_FLOATS)
@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_non_finite_problem_options_are_one_line(tmp_path, capsys, problem, option, value):
    out = tmp_path / "run"
    assert main(["train", "--problem", problem, f"--{option}={value}", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"--{option} must be a finite number" in err
    assert not out.exists()


@pytest.mark.parametrize("bad", [["--k", "1e300"], ["--sigma", "1e300"], ["--hidden", str(2**40)],
                                 ["--threads", "1000000"]], ids=["k", "sigma", "hidden", "threads"])
def test_extreme_numbers_are_one_line(tmp_path, capsys, bad):
    out = tmp_path / "run"
    assert main(["train", "--problem", "plane1d", *TINY, "--steps", "2", "--out", str(out), *bad]) == 2
    _one_line(capsys.readouterr().err)
    assert not (out / "model.npz").exists()


def test_threads_above_the_limit(tmp_path, capsys):
    cpus = len(os.sched_getaffinity(0))
    assert _train(tmp_path / "a", "--threads", str(4 * cpus + 1)) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert f"--threads {4 * cpus + 1}: at most {4 * cpus}" in err
    assert _train(tmp_path / "b", "--threads", str(4 * cpus)) == 0


# -- item 12: FIFOs, devices, files that are not models ---------------------------------------------
def test_a_fifo_named_model_npz_does_not_hang_resume(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / "model.npz")
    with _deadline(20):
        with pytest.raises(ValueError, match="not a regular file"):
            Model.load(out / "model.npz")
        assert main(["train", "--resume", str(out), "--steps", "5"]) == 2
    err = capsys.readouterr().err
    _one_line(err)
    assert "model.npz: not a regular file" in err


def test_metrics_json_on_a_device_is_not_read(tmp_path):
    """A metrics.json that is /dev/zero (a symlink to it, or it is a FIFO) is neither read
    without end nor replaced. In a subprocess with an address-space limit, so that a
    regression cannot take the machine's memory."""
    out = tmp_path / "run"
    assert _train(out) == 0
    (out / "metrics.json").unlink()
    os.symlink("/dev/zero", out / "metrics.json")
    os.mkfifo(tmp_path / "fifo")
    with _deadline(20), pytest.raises(OSError, match="not a regular file"):
        runfiles.read_regular(str(tmp_path / "fifo"), 1 << 20)
    code = ("import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30)); "
            "from helmpinn import runfiles; from helmpinn.cli import main\n"
            "try:\n"
            f"    runfiles.read_regular({str(out / 'metrics.json')!r}, 1 << 20)\n"
            "except OSError as exc:\n"
            "    assert 'not a regular file' in str(exc), exc\n"
            "else:\n"
            "    sys.exit('read /dev/zero')\n"
            f"sys.exit(main(['train', '--resume', {str(out)!r}, '--steps', '5', '--quiet']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
    assert r.returncode == 2, r.stderr
    _one_line(r.stderr)
    assert "metrics.json there is a symbolic link" in r.stderr
    assert os.readlink(out / "metrics.json") == "/dev/zero"


def test_read_regular_bounds_the_size(tmp_path):
    f = tmp_path / "big.json"
    f.write_bytes(b"x" * 1000)
    assert runfiles.read_regular(str(f), 1000) == b"x" * 1000
    with pytest.raises(OSError, match="larger than"):
        runfiles.read_regular(str(f), 999)


@pytest.mark.parametrize("content", [b"hello, this is not a model", b"\x80\x04\x95pickled", b""])
def test_a_file_that_is_not_a_zip_gets_a_helmpinn_error(tmp_path, content):
    path = tmp_path / "model.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError) as exc:
        Model.load(path)
    msg = str(exc.value)
    assert str(path) in msg and "not a helmpinn model file" in msg and "pickle" not in msg, msg


def test_an_object_array_in_the_archive_gets_a_helmpinn_error(tmp_path):
    path = tmp_path / "model.npz"
    np.savez(path, params=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError) as exc:
        Model.load(path)
    assert "allow_pickle" not in str(exc.value) and str(path) in str(exc.value)


# -- issue 26: Model.copy / astype on the CPU ---------------------------------------------------------
def test_model_copy_and_astype_are_independent():
    m = Model.create(2, 4, 8, 2, dtype="float32", seed=3)
    m.optimizer_state = {"m": np.ones(m.num_params, np.float32), "step": 4}
    m.metadata = {"tag": [1]}
    c = m.copy()
    assert c.params.tobytes() == m.params.tobytes() and c.dtype == m.dtype and c.spec == m.spec
    assert not np.shares_memory(c.params, m.params)
    assert not np.shares_memory(c.optimizer_state["m"], m.optimizer_state["m"])
    c.params[:] = 7.0
    c.optimizer_state["m"][:] = 5.0
    c.metadata["tag"] = "other"
    assert not np.any(m.params == 7.0) and np.all(m.optimizer_state["m"] == 1.0) and m.metadata == {"tag": [1]}
    d = m.astype("float64")
    assert d.dtype == np.float64 and d.params.dtype == np.float64 and m.dtype == np.float32
    assert np.array_equal(d.params, m.params.astype(np.float64)) and not np.shares_memory(d.params, m.params)
    same = m.astype("float32")
    assert same.dtype == np.float32 and not np.shares_memory(same.params, m.params)
    same.params[:] = 0.0
    assert np.any(m.params != 0.0)


# -- fuzz: option combinations ----------------------------------------------------------------------
def _opt(flag, values):
    """Absent (most often), or one of ``values``."""
    return st.one_of(st.just(()), st.just(()), st.just(()), st.sampled_from(values).map(lambda v: (f"{flag}={v}",)))


#: Valid settings, combined freely (each run trains a few steps of a tiny model).
VALID = st.tuples(
    _opt("--steps", [1, 3]), _opt("--points", [1, 7, 32]), _opt("--bc-points", [0, 1, 5]),
    _opt("--hidden", [1, 8]), _opt("--layers", [1, 2]), _opt("--fourier", [1, 4]),
    _opt("--lr", [1e-3, 0.5]), _opt("--sigma", [0.1, 30.0]), _opt("--w-pde", [0.0, 1.0]),
    _opt("--w-data", [0.0, 3.0]), _opt("--w-bc", [0.0, 2.0]), _opt("--target", [10.0, 1e-9]),
    _opt("--resample", [0, 1]), _opt("--eval-every", [0, 1, 10**30]), _opt("--checkpoint-every", [0, 1, 2]),
    _opt("--seed", [0, 7, 2**70]), _opt("--threads", [1, 2]), _opt("--dtype", ["float32", "float64"]),
    _opt("--lbfgs", [0, 2]), _opt("--sampling", ["uniform", "sobol", "halton"]),
    _opt("--schedule", ["constant", "exponential", "cosine"]), st.sampled_from([(), ("--freeze-fourier",)]),
)
#: Second-order optimisers with their own options. (Not yet "--optimizer=lbfgs" without
#: --warm-start: issue #24 item 1, a KeyError that the run-loop branch fixes; add it back then.)
OPTIMIZER = st.sampled_from([(), ("--optimizer=adam",), ("--optimizer=lbfgs", "--warm-start=1"),
                             ("--optimizer=lm",), ("--optimizer=lm", "--warm-start=1", "--lm-solver=dual"),
                             ("--optimizer=lm", "--lm-solver=cg", "--no-lm-geodesic"),
                             ("--optimizer=lm", "--lm-gram=float32"), ("--lm-solver=primal",), ("--optimizer=lbfgs",), ("--optimizer=auto",)])
#: At most one hostile value per run, so that each reaches as far as it can.
HOSTILE = st.sampled_from([
    (), (), (), ("--steps=0",), ("--points=0",), ("--points=1000000000000",), ("--bc-points=-1",),
    ("--bc-points=1000000000000",), ("--hidden=0",), (f"--hidden={2**40}",), ("--hidden=1000000",),
    ("--layers=0",), ("--layers=99",), ("--fourier=0",), ("--lr=-1",), ("--lr=0",), ("--lr=nan",),
    ("--lr=inf",), ("--lr=1e39",), ("--sigma=0",), ("--sigma=1e300",), ("--sigma=nan",), ("--w-pde=-1",),
    ("--w-bc=inf",), ("--target=0",), ("--resample=-1",), ("--eval-every=-1",), ("--checkpoint-every=-1",),
    ("--seed=-1",), ("--threads=0",), ("--threads=1000000",), ("--warm-start=-1",), ("--k=nan",), ("--k=inf",),
    ("--k=1e300",), ("--k=-1",), ("--k=0",), ("--n=2.5",), ("--n=-3",), ("--n=inf",), ("--theta=nan",),
])


@settings(max_examples=int(os.environ.get("HELMPINN_FUZZ_EXAMPLES", "60")), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["plane1d", "dirichlet2d"]), VALID, OPTIMIZER, HOSTILE)
def test_fuzz_option_combinations(problem, valid, optimizer, hostile):
    """Any combination: status 0 with a loadable model and report, 1 (diverged / bad data) with a
    message, or 2 with one line; never a traceback, never a user's file touched."""
    args = ["train", "--problem", problem, "--hidden", "8", "--fourier", "4", "--points", "32", "--bc-points", "8",
            "--steps", "2", "--eval-every", "0", "--quiet", "--no-plots"]
    for opt in (*valid, optimizer, hostile):
        args += list(opt)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run")
        os.mkdir(out)
        with open(os.path.join(out, "notes.txt"), "w") as fh:
            fh.write("mine")
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main([*args, "--out", out])
        err = err.getvalue()
        if os.environ.get("HELMPINN_FUZZ_LOG"):
            with open(os.environ["HELMPINN_FUZZ_LOG"], "a") as fh:
                fh.write(f"{rc} {' '.join(args[3:])} :: {err.strip().splitlines()[-1] if err.strip() else ''}\n")
        assert "Traceback" not in err
        if rc == 2:
            assert err.count("\n") == 1 and err.startswith("helmpinn: "), (args, err)
            assert not os.path.exists(os.path.join(out, "model.npz")), args
        elif rc == 1:
            assert err.startswith("helmpinn: ") or "\nhelmpinn: " in err, (args, err)
        else:
            assert rc == 0, (args, rc, err)
            model = Model.load(os.path.join(out, "model.npz"))
            with open(os.path.join(out, "metrics.json")) as fh:
                metrics = json.load(fh)
            assert model.optimizer_state["step"] == metrics["final_step"], args
        with open(os.path.join(out, "notes.txt")) as fh:
            assert fh.read() == "mine"
