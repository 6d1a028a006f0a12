"""Hostile input under ``mpiexec -n 2``: a failure on one rank ends the job on every rank with
its message, never a hang or an MPI abort ("Message truncated").

Each test launches this file under ``mpiexec -n 2`` with one case; the ranks run it, and every
rank that raises writes ``<Type>: <message>`` to a file (and stderr) before the exception leaves
(``helmpinn.distributed`` makes the ranks raise together), and the ranks meet once more before
they exit. The test asserts a non-zero exit,
every rank's message, and that the job ended within the timeout. They skip, saying why, only
where mpi4py or mpiexec is missing; under CI (CI=true) they fail instead.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from conftest import mpiexec_command

RANKS = 2
HERE = os.path.abspath(__file__)
TIMEOUT = 60


def _launch(case: str, tmp_path) -> subprocess.CompletedProcess:
    cmd = [*mpiexec_command(RANKS), sys.executable, HERE, case, os.fspath(tmp_path)]
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)   # mpiexec and its ranks
        out, err = proc.communicate()
        pytest.fail(f"mpiexec -n {RANKS} {case} hung (no end in {TIMEOUT} s):\n{out}\n{err}")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _raised(folder) -> dict[int, str]:
    """{rank: "<Type>: <message>"} of the ranks that raised (each writes raised<rank>.txt; the
    same goes to stderr, where the ranks' lines may interleave)."""
    return {int(p.stem[6:]): p.read_text(encoding="utf-8") for p in folder.glob("raised*.txt")}


# case: (rank 0's exception, rank 1's), each a regular expression of "<Type>: <message>"
BAD_VALUE_AND_GRAD = "CollectiveError: rank 1 failed in distributed.value_and_grad: "
CASES = {
    "batch_dict": (BAD_VALUE_AND_GRAD + "TypeError: batch: expected a helmpinn.Batch, got dict",
                   "TypeError: batch: expected a helmpinn.Batch, got dict"),
    "batch_and_points": (BAD_VALUE_AND_GRAD + "TypeError: .*batch= given together with x_pde",
                         "TypeError: distributed.value_and_grad: batch= given together with x_pde"),
    "counts_on_one_rank": ("ValueError: .*counts= given on rank\\(s\\) 0 only",) * 2,
    "counts_differ": ("ValueError: .*counts\\['pde'\\] differs between ranks: rank 0: 9, rank 1: 10",) * 2,
    "models_differ": ("ValueError: .*the ranks' models differ .*rank 0: 118 parameters.*rank 1: 170 parameters",) * 2,
    "dtypes_differ": ("ValueError: .*the ranks' models differ .*rank 0: 118 parameters, float64.*"
                      "rank 1: 118 parameters, float32",) * 2,
    "core_error": (BAD_VALUE_AND_GRAD + "ValueError: .*x_pde", "ValueError: .*x_pde"),
    "memory_error_in_block": ("CollectiveError: rank 1 failed in drawing points: MemoryError: no room",
                              "MemoryError: no room"),
    "memory_error_meets_next_collective": (
        "CollectiveError: rank 1 failed in resample: MemoryError: no room \\(this rank stopped in global_counts\\)",
        "MemoryError: no room"),
    "sample_shard": ("CollectiveError: rank 1 failed in distributed.sample_shard: MemoryError: no room",
                     "MemoryError: no room"),
    "models_differ_before_training": ("ValueError: the ranks' models differ .*rank 0: 118 parameters.*"
                                      "rank 1: 170 parameters",) * 2,
    "replicas_length": ("RuntimeError: the parameters differ between ranks .*\\(5\\).*\\(6\\)",) * 2,
    "lm_budget_on_one_rank": ("ValueError: solver 'primal' needs about .* GiB .*R = 4000 residuals "
                              "\\(the largest share; P×P on each of the 2 ranks\\), over max_matrix_bytes",) * 2,
    "trainer_resample_recipe": ("CollectiveError: rank 1 failed in Trainer.resample: MemoryError: no room "
                                "\\(this rank stopped in Trainer.resample\\)", "MemoryError: no room"),
    "lm_failure_on_one_rank": ("CollectiveError: rank 1 failed in LM: .*: MemoryError: no room for J",
                               "MemoryError: no room for J"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_failure_on_one_rank_raises_on_every_rank(case, tmp_path):
    res = _launch(case, tmp_path)
    assert res.returncode != 0, res.stderr
    assert "Message truncated" not in res.stderr
    raised = _raised(tmp_path)
    assert sorted(raised) == list(range(RANKS)), res.stderr
    for rank, want in enumerate(CASES[case]):
        assert re.search(want, raised[rank]), (rank, raised[rank], want)


def test_abort_on_error_ends_a_job_whose_other_rank_waits(tmp_path):
    """An exception that escapes on rank 1 while rank 0 waits in a collective of its own (a
    bcast): abort_on_error prints it and aborts every rank (non-zero exit) instead of a hang."""
    res = _launch("abort", tmp_path)
    assert res.returncode != 0
    assert "helmpinn: rank 1 of 2: MemoryError: no room; aborting every rank" in res.stderr, res.stderr
    assert not os.path.exists(tmp_path / "rank0-went-on")


def test_cli_train_with_a_failure_on_one_rank_ends(tmp_path):
    """`helmpinn train` under mpiexec with a MemoryError on rank 1 while it draws its points:
    the draw is collective about errors (Trainer.resample) and cli.main ends the job on every
    rank with the message (distributed.abort_on_error) instead of a hang."""
    res = _launch("cli", tmp_path)
    assert res.returncode != 0
    assert re.search(r"MemoryError: no room for the points", res.stderr), res.stderr


# A user's factory that fails on one rank only (a data file missing on one node): rank 1 raises
RANK_FACTORY = """
import os
import helmpinn as hp

RANK = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))   # MPICH's, Open MPI's
if {on_import} and RANK == "1":
    raise {error}("no velocity file on this node")

def make(k: float = 3.0):
    if RANK == "1":
        raise {error}("no velocity file on this node")
    return hp.get_problem("plane1d", k=k)
"""


@pytest.mark.parametrize("error, on_import", [("ValueError", False), ("RuntimeError", False),
                                              ("RuntimeError", True)])
def test_cli_usage_error_on_one_rank_ends_every_rank_with_its_message(tmp_path, error, on_import):
    """`helmpinn train` under mpiexec whose problem factory fails on rank 1 only (when it is
    called, or when its file is loaded, before the command line is read): every rank agrees on
    it before any other collective (no hang in the threads' count or the Trainer's draw, or in
    the set-up's agreement itself), exits with status 2, and rank 0 prints rank 1's message in
    one line."""
    (tmp_path / "factory.py").write_text(RANK_FACTORY.format(error=error, on_import=on_import))
    res = _launch("cli_usage_error", tmp_path)
    assert res.returncode == 2, res.stderr
    assert [(tmp_path / f"rc{r}.txt").read_text() for r in range(RANKS)] == ["2", "2"], res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("helmpinn: ")]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    kind = "" if error == "ValueError" else f"the factory raised {error}: "
    assert re.search(f"rank 1: problem .*factory.py:make.: {kind}no velocity file on this node", lines[0]), lines
    assert not os.path.exists(tmp_path / "run")   # nothing written: the folder comes after the checks


NODE_FACTORY = """
import helmpinn as hp
from mpi4py import MPI

def make(k: float = 3.0):
    # a wavenumber read from a node-local file: another on rank 1
    return hp.get_problem("plane1d", k=k + MPI.COMM_WORLD.Get_rank())
"""


def test_cli_ranks_whose_problems_differ_stop_before_training(tmp_path):
    """A factory that builds another problem on rank 1: the Trainer compares the ranks'
    problems (distributed.check_same_run) before its first draw; every rank exits with status
    2 and rank 0 says what differs, instead of training each rank on its own problem."""
    (tmp_path / "factory.py").write_text(NODE_FACTORY)
    res = _launch("cli_usage_error", tmp_path)
    assert res.returncode == 2, res.stderr
    assert [(tmp_path / f"rc{r}.txt").read_text() for r in range(RANKS)] == ["2", "2"], res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("helmpinn: ")]
    assert len(lines) == 1, res.stderr
    assert re.search(r"the ranks' problems differ .*rank 1 differs from rank 0's in .*κ \(the medium\)",
                     lines[0]), lines


def test_threads_per_rank_with_different_environments(tmp_path):
    """OMP_NUM_THREADS set on rank 0 only (an MPMD launch): both ranks still count the ranks on
    their node together (a collective), and go on in step."""
    res = _launch("threads", tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "threads.txt").read_text().split()[0] == "3"


# -- the workers (run by mpiexec on every rank) ---------------------------------------------------
def _setup(rank: int, hidden: int = 6, dtype: str = "float64"):
    import helmpinn as hp

    spec = hp.ModelSpec(2, 4, hidden, 2)
    theta = hp.init_params(spec, seed=1, dtype=dtype)
    ws = hp.Workspace(spec, 16, dtype)
    x = np.random.default_rng(rank).uniform(size=(5 + rank, 2))
    return hp, ws, theta, np.empty_like(theta), x


def _case(name: str, comm, out: str) -> None:
    from helmpinn import distributed as dist

    rank = comm.Get_rank()
    if name == "batch_dict":
        hp, ws, theta, grad, x = _setup(rank)
        b = hp.Batch(x_pde=x, kappa=1.0) if rank == 0 else {"x_pde": x, "kappa": 1.0}
        dist.value_and_grad(ws, comm, theta, grad, batch=b)
    elif name == "batch_and_points":
        hp, ws, theta, grad, x = _setup(rank)
        extra = {"x_pde": x} if rank == 1 else {}
        dist.value_and_grad(ws, comm, theta, grad, batch=hp.Batch(x_pde=x, kappa=1.0), **extra)
    elif name == "counts_on_one_rank":
        hp, ws, theta, grad, x = _setup(rank)
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x, kappa=1.0,
                            counts={"pde": 11} if rank == 0 else None)
    elif name == "counts_differ":
        hp, ws, theta, grad, x = _setup(rank)
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x, kappa=1.0, counts={"pde": 9 + rank})
    elif name == "models_differ":
        hp, ws, theta, grad, x = _setup(rank, hidden=6 if rank == 0 else 8)
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x, kappa=1.0)
    elif name == "dtypes_differ":
        hp, ws, theta, grad, x = _setup(rank, dtype="float64" if rank == 0 else "float32")
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x, kappa=1.0)
    elif name == "core_error":
        hp, ws, theta, grad, x = _setup(rank)
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x if rank == 0 else x[:, :1], kappa=1.0)
    elif name == "memory_error_in_block":
        with dist.collective(comm, "drawing points"):
            if rank == 1:
                raise MemoryError("no room")
        dist.global_counts(comm, {"x_pde": np.zeros((3, 2))})
    elif name == "memory_error_meets_next_collective":
        # rank 1 fails in work of its own and agrees; rank 0 is already in the next collective
        if rank == 1:
            try:
                raise MemoryError("no room")
            except MemoryError as exc:
                dist.agree(comm, exc, "resample")
        dist.global_counts(comm, {"x_pde": np.zeros((3, 2))})
    elif name == "sample_shard":
        import helmpinn as hp

        problem = hp.get_problem("dirichlet2d")
        if rank == 1:
            def sample(*args, **kw):
                raise MemoryError("no room")
            problem.sample = sample
        dist.sample_shard(problem, 10, 4, *dist.rank_generators(0, rank), "sobol", rank, 2, comm=comm)
    elif name == "models_differ_before_training":
        import helmpinn as hp

        model = hp.Model.create(2, 4, 6 if rank == 0 else 8, 2, dtype="float64", seed=0)
        hp.Trainer(hp.get_problem("dirichlet2d"), model, comm=comm, pde_points=20, bc_points=8,
                   eval_every=0, progress=False)
    elif name == "replicas_length":
        dist.check_replicas(comm, np.zeros(5 + rank))
    elif name == "lm_failure_on_one_rank":
        from helmpinn.optim.lm import FunctionResiduals, LevenbergMarquardt

        A = np.random.default_rng(rank).standard_normal((8, 3))
        calls = {"n": 0}

        def jac(x):
            calls["n"] += 1
            if rank == 1 and calls["n"] == 2:
                raise MemoryError("no room for J")
            return A

        lm = LevenbergMarquardt(FunctionResiduals(lambda x: A @ x - 1.0, jac, 3, 8), comm=comm)
        theta = np.zeros(3)
        for _ in range(3):
            lm.step(theta)
    elif name == "lm_budget_on_one_rank":
        # rank 1 holds many more rows: the budget fits rank 0's alone; every rank must decide alike
        from helmpinn.optim.lm import FunctionResiduals, LevenbergMarquardt, memory_estimate

        R = 4 if rank == 0 else 4000
        A = np.ones((R, 3))
        res = FunctionResiduals(lambda x: A @ x, lambda x: A, 3, R)
        budget = memory_estimate(3, 4, "primal", ranks=2)
        names = comm.allgather(LevenbergMarquardt(res, comm=comm, max_matrix_bytes=budget).solver)
        assert names == ["cg", "cg"], names
        LevenbergMarquardt(res, comm=comm, solver="primal", max_matrix_bytes=budget)
        comm.Barrier()   # where rank 0 went on alone, the test reports a hang
    elif name == "threads":
        n = dist.threads_per_rank(comm, {"OMP_NUM_THREADS": "3"} if rank == 0 else {})
        everyone = comm.allgather(n)   # rank 0 alone in Split_type would leave this mismatched
        if rank == 0:
            with open(os.path.join(out, "threads.txt"), "w") as fh:
                fh.write(" ".join(map(str, everyone)))
    elif name == "trainer_resample_recipe":
        # Trainer.resample as the integrator is to wire it (trainer.py is not this branch's):
        # the local draw and conversion in one collective block, then the collective counts.
        import helmpinn as hp

        def resample(self):
            self._draw_state = self.rng.bit_generator.state
            with dist.collective(self.comm, "Trainer.resample"):
                self.training_set = dist.sample_shard(
                    self.problem, self.pde_points, self.bc_points, self.rng, self._shared_rng,
                    self.sampling, self.rank, self._ranks)
                batch = self.training_set.to_batch(self.model.dtype)
            self.batch = dist.shard_batch(batch, dist.global_counts(self.comm, batch))
            self._check_inputs = True

        hp.Trainer.resample = resample
        problem = hp.get_problem("dirichlet2d")
        if rank == 1:
            def sample(*args, **kw):
                raise MemoryError("no room")
            problem.sample = sample
        model = hp.Model.create(2, 4, 8, 1, dtype="float64", seed=0)
        hp.Trainer(problem, model, comm=comm, pde_points=20, bc_points=8, eval_every=0,
                   progress=False).fit(2)
    elif name == "abort":
        with dist.abort_on_error(comm):
            if rank == 1:
                raise MemoryError("no room")
            comm.bcast(None, root=1)   # waits for rank 1 forever without the abort
            open(os.path.join(out, "rank0-went-on"), "w").close()
    elif name == "cli":
        from helmpinn import cli

        real = dist.sample_shard

        def sample_shard(*args, **kw):
            if rank == 1:
                raise MemoryError("no room for the points")
            return real(*args, **kw)

        dist.sample_shard = sample_shard
        cli.main(["train", "--problem", "dirichlet2d", "--optimizer", "adam", "--steps", "3", "--points", "64",
                  "--bc-points", "32", "--hidden", "8", "--layers", "1", "--fourier", "4", "--quiet",
                  "--no-plots", "--out", os.path.join(out, "run")])
    elif name == "cli_usage_error":
        from helmpinn import cli

        rc = cli.main(["train", "--problem", os.path.join(out, "factory.py:make"), "--optimizer", "adam",
                       "--steps", "3", "--points", "64", "--bc-points", "4", "--hidden", "8", "--layers", "1",
                       "--fourier", "4", "--quiet", "--no-plots", "--out", os.path.join(out, "run")])
        with open(os.path.join(out, f"rc{rank}.txt"), "w") as fh:
            fh.write(str(rc))
        comm.Barrier()
        sys.exit(rc)
    else:
        raise KeyError(name)


if __name__ == "__main__":
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    try:
        _case(sys.argv[1], world, sys.argv[2])
    except BaseException as exc:
        note = f"{type(exc).__name__}: {exc}"
        with open(os.path.join(sys.argv[2], f"raised{world.Get_rank()}.txt"), "w", encoding="utf-8") as fh:
            fh.write(note)
        print(f"RANK {world.Get_rank()} {note}", file=sys.stderr, flush=True)
        # every rank prints before any exits (the launcher ends the job at the first failed
        # exit); where only one rank raised this waits, and the test reports a hang
        world.Barrier()
        raise


def test_a_shard_keeps_the_general_operator_and_its_weights():
    """sample_shard hands each rank the interior draw whole: a PML problem's operator
    coefficients (a_pde, b_pde) and anything else of the PDE rows survive the split (they were
    dropped, so data-parallel PML runs trained the plain Laplacian)."""
    import helmpinn as hp
    from helmpinn import distributed

    problem = hp.get_problem("scatter-soft")
    shard = distributed.sample_shard(problem, 64, 16, np.random.default_rng(1), np.random.default_rng(2),
                                     "uniform", 0, 2)
    whole = problem.sample(32, 0, np.random.default_rng(1), "uniform")
    assert shard.a_pde is not None and shard.b_pde is not None
    np.testing.assert_array_equal(shard.a_pde, whole.a_pde)
    np.testing.assert_array_equal(shard.x_pde, whole.x_pde)
