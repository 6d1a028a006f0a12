"""helmpinn.invert over MPI ranks (comm=): the wavefields split, the medium's sums reduced.

Each test starts ``mpiexec -n 2`` on this file, whose ``__main__`` part runs one worker case on
every rank; the workers write what the test checks into a folder. They skip, saying why, only
where mpi4py or mpiexec is missing (conftest.mpiexec_command); under CI they fail instead.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import mpiexec_command, run_mpi_case

RANKS = 2
HERE = os.path.abspath(__file__)


def _launch(case: str, out, timeout: float = 180, env: dict | None = None) -> None:
    run_mpi_case(HERE, case, out, RANKS, timeout=timeout, env=env)


def _survey(S=3):
    import helmpinn as hp

    rng = np.random.default_rng(0)
    sources = [hp.PointSource((0.3 + 0.4 * s / max(S - 1, 1), 0.4 + 0.2 * (s % 2)), width=0.1) for s in range(S)]
    return hp.Survey(sources, rng.uniform(0.2, 0.8, (8, 2)), [1.0, 1.5],
                     0.05 * np.exp(1j * rng.uniform(0, 3, (2, S, 8))))


def _options():
    from helmpinn.problems.geometry import Box

    return dict(domain=Box([0.0, 0.0], [1.0, 1.0]), bounds=(0.8, 1.25), network=(3, 6, 1), pde_points=60,
                boundary_points=16, max_steps=3, tol=0.0)


def _relative(a, b) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


# -- the tests (one process) -------------------------------------------------------------------
def test_two_ranks_give_the_one_process_medium(tmp_path):
    """3 sources on 2 ranks (2 + 1), two frequency stages of 3 steps, float64: every rank ends
    with the same medium bit for bit, and it is the one process's to 1e-10 (the sums over the
    wavefields are added in another order), as are the networks and the history's losses."""
    import helmpinn as hp

    _launch("same", tmp_path)
    one = hp.invert(_survey(), 1.0, **_options())
    ranks = [hp.Inversion.load(tmp_path / f"rank{r}.npz") for r in range(RANKS)]
    for inv in ranks:
        assert np.array_equal(inv.coefficients, ranks[0].coefficients)
        assert sorted(inv.params) == sorted(one.params)
        assert _relative(inv.coefficients, one.coefficients) < 1e-10
        assert max(_relative(inv.params[k], one.params[k]) for k in one.params) < 1e-10
        assert _relative(np.array([h["loss"] for h in inv.history]), np.array([h["loss"] for h in one.history])) < 1e-10
    assert np.abs(one.coefficients - one.initial_coefficients).max() > 1e-6   # the medium moved
    # one source on two ranks: rank 1 holds no wavefield and still takes part in every sum
    one = hp.invert(_survey(1), 1.0, **_options())
    for r in range(RANKS):
        inv = hp.Inversion.load(tmp_path / f"single{r}.npz")
        assert _relative(inv.coefficients, one.coefficients) < 1e-10 and sorted(inv.params) == sorted(one.params)


def test_a_stop_asked_on_one_rank_stops_all_and_continues_in_one_process(tmp_path):
    """Rank 1's callback alone asks to stop in stage 0: both ranks stop at the same step with
    the same state; that file continued in one process ends as the uninterrupted one-process
    run, to 1e-10."""
    import helmpinn as hp

    _launch("stop", tmp_path)
    saved = [hp.Inversion.load(tmp_path / f"rank{r}.npz") for r in range(RANKS)]
    assert all(s.status == 3 for s in saved)
    assert saved[0].resume["steps"] == saved[1].resume["steps"] == 2
    assert np.array_equal(saved[0].resume["D"], saved[1].resume["D"])
    done = hp.invert(_survey(), None, start=saved[0], **_options())
    one = hp.invert(_survey(), 1.0, **_options())
    assert _relative(done.coefficients, one.coefficients) < 1e-10


def test_a_failing_rank_fails_every_rank(tmp_path):
    """A rank whose callback raises, or whose residuals are not finite, raises its own error;
    the other raises a CollectiveError naming it; neither waits."""
    _launch("fail", tmp_path)
    with open(tmp_path / "rank0.json") as fh:
        zero = json.load(fh)
    with open(tmp_path / "rank1.json") as fh:
        one = json.load(fh)
    assert one["callback"] == ["ValueError", "rank 1's callback"]
    assert zero["callback"][0] == "CollectiveError" and "rank 1 failed" in zero["callback"][1]
    assert zero["nonfinite"][0] == "NonFiniteLoss"
    assert one["nonfinite"][0] == "CollectiveError" and "rank 0 failed" in one["nonfinite"][1]


def _cli_inputs(folder) -> list[str]:
    """A survey of 3 sources (2 + 1 on two ranks) at one frequency and a homogeneous start: the
    command line's inputs, written into ``folder``."""
    import helmpinn as hp
    from helmpinn.problems.geometry import Box

    src = [hp.PointSource(p, width=0.1) for p in ([0.2, 0.5], [0.8, 0.5], [0.5, 0.8])]
    rec = np.concatenate([np.stack([np.full(6, 0.5), np.linspace(0.2, 0.8, 6)], 1),
                          np.stack([np.linspace(0.2, 0.8, 4), np.full(4, 0.2)], 1)])
    true = lambda x: 1.0 + 0.1 * np.exp(-((x[:, 0] - 0.5) ** 2 + (x[:, 1] - 0.5) ** 2) / 0.02)  # noqa: E731
    hp.Survey.synthetic(true, Box([0, 0], [1, 1]), src, rec, [1.0, 1.5], pml=hp.PML(0.3), h=1 / 24).save(
        os.path.join(folder, "survey.npz"))
    np.save(os.path.join(folder, "v0.npy"), np.ones((11, 11)))
    return _cli_args(folder)


def _cli_args(folder) -> list[str]:
    """The command line on the inputs of :func:`_cli_inputs` (the pinn method's options last)."""
    return ["invert", "--survey", os.path.join(folder, "survey.npz"), "--initial", os.path.join(folder, "v0.npy"),
            "--spacing", "0.1", "--pml", "0.3", "--bounds", "0.8", "1.3", "--max-steps", "3", "--quiet",
            "--no-plots", "--network", "3", "6", "1", "--points", "60"]


def test_the_command_line_over_two_ranks(tmp_path):
    """``mpiexec -n 2 helmpinn invert``: every rank exits 0, rank 0 alone writes (an audit hook
    records every write under the folder on each rank) and leaves the folder unlocked, one
    OpenMP thread per core share; the result is the one process's to 1e-10. ``--method fwi``
    is refused on every rank (status 2) before anything is written."""
    import helmpinn as hp
    from helmpinn import runfiles
    from helmpinn.cli import main

    args = _cli_inputs(tmp_path)
    _launch("cli", tmp_path, env={"OMP_NUM_THREADS": None})
    with open(tmp_path / "cli.json") as fh:
        seen = json.load(fh)
    assert seen["codes"] == [0, 0] and seen["fwi"] == [2, 2] and not (tmp_path / "fwi").exists()
    assert seen["writes"]["1"] == [], f"rank 1 wrote {seen['writes']['1']}"
    assert {"inversion.npz", "metrics.json", "velocity.npy"} <= {os.path.basename(p) for p in seen["writes"]["0"]}
    out = tmp_path / "out"
    with runfiles.RunFolder.acquire(str(out)):   # the lock was released
        pass
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["ranks"] == RANKS and metrics["threads"] == max(1, min(len(os.sched_getaffinity(0)),
                                                                        (os.cpu_count() or 1) // RANKS))
    assert main([*args, "--out", str(tmp_path / "one")]) == 0
    one, two = hp.Inversion.load(tmp_path / "one" / "inversion.npz"), hp.Inversion.load(out / "inversion.npz")
    assert sorted(one.params) == sorted(two.params) and len(one.params) == 6
    assert _relative(two.coefficients, one.coefficients) < 1e-10
    assert max(_relative(two.params[k], one.params[k]) for k in one.params) < 1e-10
    assert np.abs(one.coefficients - one.initial_coefficients).max() > 1e-6   # the medium moved


def _cli_job(args: list[str], log, timeout: float = 120.0, signal_at: str | None = None) -> int:
    """``mpiexec -n 2 python -m helmpinn ARGS`` in a process group of its own, stderr into
    ``log``; with ``signal_at``, SIGTERM to the whole group (mpiexec and both ranks, as a batch
    system sends it) once that text is on stderr. The job's exit status; a job that does not end
    in ``timeout`` seconds is killed and fails the test."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(log, "w") as err:
        proc = subprocess.Popen([*mpiexec_command(RANKS), sys.executable, "-m", "helmpinn", *args],
                                stdout=subprocess.DEVNULL, stderr=err, env=env, start_new_session=True)
    deadline = time.monotonic() + timeout
    try:
        while signal_at is not None and proc.poll() is None and time.monotonic() < deadline:
            with open(log) as fh:
                said = fh.read()
            if signal_at in said:
                os.killpg(proc.pid, signal.SIGTERM)
                break
            time.sleep(0.02)
        return proc.wait(timeout=max(deadline - time.monotonic(), 1.0))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        with open(log) as fh:
            pytest.fail(f"mpiexec -n {RANKS} {' '.join(args)} did not end in {timeout} s:\n{fh.read()}")


def test_sigterm_stops_the_command_line_on_every_rank(tmp_path):
    """SIGTERM to ``mpiexec -n 2 helmpinn invert`` and its ranks during stage 0: every rank stops
    after the same step and the job exits 143, rank 0 having written the stopped Inversion
    (status 3, resumable) and its report, said so once and released the folder's lock;
    ``--resume`` on two ranks then ends as the uninterrupted two-rank run, bit for bit."""
    import helmpinn as hp
    from helmpinn import runfiles

    args = [a for a in _cli_inputs(tmp_path) if a != "--quiet"]
    args[args.index("--max-steps") + 1] = "40"
    args[args.index("--points") + 1] = "1500"
    out, full = tmp_path / "out", tmp_path / "full"
    code = _cli_job([*args, "--out", str(out)], tmp_path / "stopped.log", signal_at="s, f = 1:")
    log = (tmp_path / "stopped.log").read_text()
    assert code == 143, log
    assert log.count("terminated (SIGTERM); stopping after the current step") == 1, log
    assert f"--resume {out} continues it" in log, log
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["interrupted"] and metrics["stopped"] == "terminated" and metrics["resumable"]
    assert metrics["ranks"] == RANKS
    saved = hp.Inversion.load(out / "inversion.npz")
    assert saved.status == 3 and 1 <= saved.resume["steps"] < 40 and saved.resume["stage"] == 0
    assert sorted(saved.params) == [(0, s) for s in range(3)]   # every rank's networks gathered
    with runfiles.RunFolder.acquire(str(out)):   # the lock was released
        pass
    assert _cli_job(["invert", "--resume", str(out), "--quiet"], tmp_path / "resumed.log") == 0, \
        (tmp_path / "resumed.log").read_text()
    assert _cli_job([*args, "--quiet", "--out", str(full)], tmp_path / "full.log") == 0, \
        (tmp_path / "full.log").read_text()
    a, b = hp.Inversion.load(full / "inversion.npz"), hp.Inversion.load(out / "inversion.npz")
    assert b.status == a.status != 3 and b.resume is None
    assert np.array_equal(a.coefficients, b.coefficients)
    assert sorted(a.params) == sorted(b.params) and all(np.array_equal(a.params[k], b.params[k]) for k in a.params)


# -- the workers (run by mpiexec on every rank) ----------------------------------------------------
def _worker_same(comm, out: str) -> None:
    import helmpinn as hp

    inv = hp.invert(_survey(), 1.0, comm=comm, **_options())
    inv.save(os.path.join(out, f"rank{comm.Get_rank()}.npz"))
    inv = hp.invert(_survey(1), 1.0, comm=comm, **_options())
    inv.save(os.path.join(out, f"single{comm.Get_rank()}.npz"))


def _worker_stop(comm, out: str) -> None:
    import helmpinn as hp

    calls = []

    def callback(entry):
        calls.append(entry)
        return comm.Get_rank() == 1 and len(calls) == 3   # stage 0's second step, on rank 1 only
    inv = hp.invert(_survey(), 1.0, comm=comm, callbacks=[callback], **_options())
    inv.save(os.path.join(out, f"rank{comm.Get_rank()}.npz"))


def _worker_fail(comm, out: str) -> None:
    import helmpinn as hp
    from helmpinn.inversion import WavefieldRows

    rank, seen = comm.Get_rank(), {}

    def callback(entry):
        if rank == 1 and entry["lam"] is not None:
            raise ValueError("rank 1's callback")
    try:
        hp.invert(_survey(), 1.0, comm=comm, callbacks=[callback], **_options())
    except Exception as exc:   # noqa: BLE001 - what each rank raised is the result
        seen["callback"] = [type(exc).__name__, str(exc)]
    original = WavefieldRows.residuals
    if rank == 0:
        WavefieldRows.residuals = lambda self, ws, theta, c: original(self, ws, theta, c) * np.nan
    try:
        hp.invert(_survey(), 1.0, comm=comm, **_options())
    except Exception as exc:   # noqa: BLE001
        seen["nonfinite"] = [type(exc).__name__, str(exc)]
    WavefieldRows.residuals = original
    with open(os.path.join(out, f"rank{rank}.json"), "w") as fh:
        json.dump(seen, fh)


def _worker_cli(comm, out: str) -> None:
    from helmpinn.cli import main

    target = os.path.abspath(os.path.join(out, "out"))
    writes: list[str] = []

    def hook(event, args):   # every file written, renamed or made under target
        paths = []
        if event == "open" and not isinstance(args[0], int):
            path, mode, flags = args
            if (mode is not None and any(c in mode for c in "wax+")) or (
                    mode is None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND)):
                paths = [path]
        elif event in ("os.rename", "os.replace"):
            paths = [args[0], args[1]]
        elif event in ("os.mkdir", "os.remove", "os.symlink"):
            paths = [args[0]]
        for p in paths:
            p = os.path.abspath(os.fsdecode(p))
            if p == target or p.startswith(target + os.sep):
                writes.append(p)

    sys.addaudithook(hook)
    args = _cli_args(out)
    code = main([*args, "--out", target])
    fwi = main([*args[:-6], "--method", "fwi", "--out", os.path.join(out, "fwi")])
    everyone = comm.gather((code, fwi, writes))
    if comm.Get_rank() == 0:
        with open(os.path.join(out, "cli.json"), "w") as fh:
            json.dump({"codes": [c for c, _, _ in everyone], "fwi": [f for _, f, _ in everyone],
                       "writes": {str(r): w for r, (_, _, w) in enumerate(everyone)}}, fh)


if __name__ == "__main__":
    from mpi4py import MPI

    case, folder = sys.argv[1], sys.argv[2]
    try:
        {"same": _worker_same, "stop": _worker_stop, "fail": _worker_fail,
         "cli": _worker_cli}[case](MPI.COMM_WORLD, folder)
    except BaseException:  # fail the whole job now rather than leave the other ranks waiting
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
