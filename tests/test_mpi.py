"""Data-parallel training over MPI (helmpinn.distributed, Trainer(comm=...), the CLI under mpiexec).

Each test starts ``mpiexec -n 2`` on this file, whose ``__main__`` part runs one worker case on
every rank; the workers assert what needs MPI and write what the test checks into a folder.
They skip, saying why, only where mpi4py or mpiexec is missing (``pip install ".[mpi]"``);
under CI (CI=true), where .ci/run installs them, they fail instead.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from conftest import run_mpi_case

RANKS = 2
HERE = os.path.abspath(__file__)


def _launch(case: str, out, *, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_mpi_case(HERE, case, out, RANKS, timeout=timeout, env=env)


# -- the tests (one process) -----------------------------------------------------------------------
def test_cli_lm_over_ranks_takes_cg_and_refuses_dual(tmp_path):
    """LM over MPI sums JᵀJ (primal) or the matrix-free products (cg) over the ranks: the CLI
    accepts --lm-solver cg there and refuses dual with exit status 2."""
    _launch("cli_lm_solvers", tmp_path)
    assert json.loads((tmp_path / "codes.json").read_text()) == [0, 2]


def test_sharded_value_and_grad_equals_union(tmp_path):
    """Uneven shards, every term, ranks without some terms or without any point: the loss, its
    terms and the gradient on every rank equal one process's on the union (1e-12 relative);
    bad input on one rank raises on every rank instead of hanging."""
    _launch("value_and_grad", tmp_path)
    done = sorted(p.name for p in tmp_path.iterdir())
    assert done == [f"ok{r}" for r in range(RANKS)]


def test_adam_steps_match_one_process(tmp_path):
    """20 Adam steps of Trainer(comm=...): the same parameters on every rank, bit for bit, and
    the same (to summation order) as one process on the union of the ranks' points; parameters
    changed on one rank only are caught by the replica check."""
    _launch("adam", tmp_path)
    r = np.load(tmp_path / "adam.npz")
    start = r["start"]
    for k in range(1, RANKS):
        np.testing.assert_array_equal(r["rank0"], r[f"rank{k}"])
    assert np.max(np.abs(r["rank0"] - start)) > 1e-3  # they did move
    np.testing.assert_allclose(r["rank0"], r["single"], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(r["loss"], r["loss_single"], rtol=1e-11)
    drift = json.loads((tmp_path / "drift.json").read_text())
    assert all("differ between ranks at step 5" in m for m in drift), drift


def test_cli_rank0_writes_and_checkpoint_resumes_in_one_process(tmp_path):
    """`mpiexec -n 2 helmpinn train`: one OpenMP thread per core share, rank 0 alone writes files
    (every write under the output folder is recorded by an audit hook on each rank), and the
    checkpoint written by 2 ranks resumes in one process."""
    import helmpinn as hp

    _launch("cli", tmp_path, env={"OMP_NUM_THREADS": None})
    writes = json.loads((tmp_path / "writes.json").read_text())
    assert writes["1"] == [], f"rank 1 wrote {writes['1']}"
    written = {os.path.basename(p) for p in writes["0"]}
    assert {"metrics.json", "history.png"} <= written, written
    assert any(name.endswith(".npz") for name in written), written
    out = tmp_path / "out"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["ranks"] == RANKS
    assert metrics["settings"]["threads"] == max(1, min(len(os.sched_getaffinity(0)),
                                                        (os.cpu_count() or 1) // RANKS))
    assert metrics["final_step"] == 10

    model = hp.Model.load(out / "model.npz")
    assert model.optimizer_state["step"] == 10
    m_saved = np.array(model.optimizer_state["m"])
    v_saved = np.array(model.optimizer_state["v"])
    assert np.abs(m_saved).max() > 0 and np.abs(v_saved).max() > 0
    trainer = hp.Trainer(hp.get_problem("dirichlet2d"), model, pde_points=64, bc_points=32, progress=False,
                         eval_every=0)
    seen = {}

    def record(t, step):   # copies: state_dict() hands out the live moment buffers
        state = t.optimizer.state_dict()
        seen[step] = {"m": np.array(state["m"]), "v": np.array(state["v"]), "step": state["step"],
                      "grad": np.array(t.grad)}

    trainer.callbacks.append(record)
    trainer.fit(3)
    assert sorted(seen) == [11, 12, 13] and trainer.step == 13
    assert trainer.optimizer.step_count == 13 and seen[11]["step"] == 11
    # The first resumed step started from the saved moments: m_11 = b1 m_10 + (1 - b1) g_11 and
    # v_11 = b2 v_10 + (1 - b2) g_11², with g_11 the gradient that step used (fresh moments
    # would give (1 - b1) g_11 and (1 - b2) g_11²).
    b1, b2 = trainer.optimizer.beta1, trainer.optimizer.beta2
    g = seen[11]["grad"]
    # (float32 moments: to a few float32 roundings)
    np.testing.assert_allclose(seen[11]["m"], b1 * m_saved + (1 - b1) * g, rtol=1e-5,
                               atol=1e-6 * np.abs(m_saved).max())
    np.testing.assert_allclose(seen[11]["v"], b2 * v_saved + (1 - b2) * g * g, rtol=1e-5,
                               atol=1e-6 * np.abs(v_saved).max())
    assert np.all(np.isfinite(trainer.history.loss))


@pytest.mark.parametrize("gram", ["float64", "float32", "cg"])
def test_levenberg_marquardt_matches_one_process(tmp_path, gram):
    """Trainer.fit_lm(comm=...): JᵀJ and Jᵀr summed over the ranks give every rank the same
    steps, the same (to summation order) as one process's LM on the union of the points; with
    gram="float32" the CG iterations sum Jᵀ(Jp) over the ranks too (to CG's tolerance, 1e-12);
    "cg": the matrix-free solver over the ranks (Jᵀr, diag(JᵀJ), Jᵀ(Jp) and ‖Jx‖² summed)."""
    _launch({"float64": "lm", "float32": "lm32", "cg": "lmcg"}[gram], tmp_path)
    r = np.load(tmp_path / "lm.npz")
    for k in range(1, RANKS):
        np.testing.assert_array_equal(r["rank0"], r[f"rank{k}"])
    assert np.max(np.abs(r["rank0"] - r["start"])) > 1e-3  # they did move
    tol = 1e-8 if gram == "float64" else 1e-6
    np.testing.assert_allclose(r["rank0"], r["single"], rtol=tol, atol=tol * 1e-2)
    np.testing.assert_allclose(r["loss"], r["loss_single"], rtol=tol * 0.1)
    np.testing.assert_allclose(r["predicted"], r["predicted_single"], rtol=tol)
    assert r["loss"][-1] < 0.5 * r["loss"][0]


def test_launch_detection_and_threads():
    from helmpinn import distributed as dist

    assert dist.launched_size({}) == 1
    assert dist.launched_size({"PMI_SIZE": "4"}) == 4  # MPICH (hydra)
    assert dist.launched_size({"OMPI_COMM_WORLD_SIZE": "3"}) == 3  # Open MPI
    assert dist.launched_size({"SLURM_NTASKS": "8"}) == 1  # an allocation, not srun
    assert dist.launched_size({"SLURM_NTASKS": "8", "SLURM_STEP_ID": "0"}) == 8
    assert dist.threads_per_rank(None, {"OMP_NUM_THREADS": "3"}) == 3
    assert [dist.shard_size(10, r, 3) for r in range(3)] == [4, 3, 3]
    assert [dist.shard_size(1, r, 2) for r in range(2)] == [1, 0]


def test_sample_shard_union_is_one_draw():
    """The ranks' boundary and data points together are exactly one draw of the whole set (the
    split over the boundary's parts is the global one); interior points come from each rank's
    own stream, so the ranks' interior points differ."""
    from helmpinn import distributed as dist
    import helmpinn as hp

    for name in ("plane1d", "heterogeneous2d"):
        problem = hp.get_problem(name)
        whole = problem.sample(0, 7, dist.rank_generators(5, 0)[1], "sobol")
        shards = [dist.sample_shard(problem, 11, 7, *dist.rank_generators(5, r), "sobol", r, 3)
                  for r in range(3)]
        assert [len(s.x_pde) for s in shards] == [4, 4, 3]
        assert not np.allclose(shards[0].x_pde[:3], shards[1].x_pde[:3])
        for field in ("x_data", "x_bc"):
            got = np.concatenate([getattr(s, field) for s in shards])
            want = getattr(whole, field)
            assert len(got) == len(want)
            key = lambda a: a[np.lexsort(a.T)]  # noqa: E731
            np.testing.assert_array_equal(key(got), key(want))


# -- the workers (run by mpiexec on every rank) ---------------------------------------------------
def _worker_value_and_grad(comm, out: str) -> None:
    import helmpinn as hp
    from helmpinn import distributed as dist
    from helmpinn.problems.batch import TERM_KEYWORDS
    from conftest import _make_inputs

    rank = comm.Get_rank()
    spec = hp.ModelSpec(2, 4, 6, 2)
    theta = hp.init_params(spec, seed=7, fourier_sigma=1.5, dtype="float64")
    ws = hp.Workspace(spec, 16, "float64")  # chunks smaller than the shards
    grad, want_grad = np.empty_like(theta), np.empty_like(theta)
    rng = np.random.default_rng(11)

    def check(full: dict, cuts: dict, **opts) -> None:
        """cuts[term] = the index where rank 1's share of that term starts."""
        want = ws.value_and_grad(theta, want_grad, **full, **opts)
        want_terms = ws.last_loss
        mine = {}
        for t, keys in TERM_KEYWORDS.items():
            for k in keys:
                v = full.get(k)
                if isinstance(v, np.ndarray):
                    n = len(full[dist._POINTS[t]])
                    mine[k] = np.ascontiguousarray(v[:cuts[t]] if rank == 0 else v[cuts[t]:])
                    assert len(v) == n
                elif k in full:
                    mine[k] = v
        for k in ("w_pde", "w_data", "w_bc"):
            mine[k] = full[k]
        got = dist.value_and_grad(ws, comm, theta, grad, breakdown=True, **mine, **opts)
        assert abs(got["total"] - want) <= 1e-12 * abs(want), (got, want)
        for t in dist.TERMS:
            assert abs(got[t] - want_terms[t]) <= 1e-12 * abs(want_terms[t]), (t, got, want_terms)
        err = np.max(np.abs(grad - want_grad))
        assert err <= 1e-12 * np.max(np.abs(want_grad)), (err, np.max(np.abs(want_grad)))
        # The same with the global counts given, and without the breakdown.
        counts = dist.global_counts(comm, mine)
        assert counts == dist.local_counts(full), (counts, dist.local_counts(full))
        loss = dist.value_and_grad(ws, comm, theta, grad, counts=counts, **mine, **opts)
        assert loss == got["total"]
        # The same through a Batch: without counts (one allreduce), and as shard_batch makes it
        # once per draw (the global counts inside, the terms this rank lacks left out).
        batch = hp.Batch(**{k: v for k, v in mine.items() if not k.startswith("w_")}, dtype="float64")
        weights = {k: v for k, v in mine.items() if k.startswith("w_")}
        for b in (batch, dist.shard_batch(batch, counts)):
            again = dist.value_and_grad(ws, comm, theta, grad, batch=b, breakdown=True, **weights, **opts)
            assert again == got, (again, got)
        assert dist.shard_batch(batch, counts).counts == {t: counts[t] for t in dist.TERMS
                                                          if batch.sizes[t]}

    weights = (0.3, 2.0, 0.7)
    full = _make_inputs(rng, 2, n_pde=23, n_data=11, n_bc=9, kappa="array", alpha="array",
                        weights=weights)
    check(full, {"pde": 5, "data": 0, "bc": 9})  # rank 0: no data points; rank 1: no bc points
    check(full, {"pde": 20, "data": 4, "bc": 3}, train_fourier=False)
    check(full, {"pde": 0, "data": 0, "bc": 0})  # rank 0 has no point at all
    full = _make_inputs(rng, 2, n_pde=17, n_data=5, n_bc=6, kappa="scalar", alpha="sommerfeld",
                        f=False, g=False, weights=weights)
    check(full, {"pde": 9, "data": 2, "bc": 5})

    # Bad input on one rank raises on every rank (no rank left waiting in a collective).
    x = rng.uniform(size=(4, 3 if rank == 1 else 2))
    try:
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x, kappa=1.0)
    except ValueError as exc:
        assert rank == 1 and "x_pde" in str(exc), (rank, exc)
    except dist.CollectiveError as exc:
        assert rank == 0 and "rank 1 failed" in str(exc) and "x_pde" in str(exc), (rank, exc)
    else:
        raise AssertionError("no exception")
    try:
        dist.value_and_grad(ws, comm, theta, grad, x_pde=x[:, :2], kappa=1.0, counts={"pde": 3})
    except ValueError as exc:
        assert "counts" in str(exc)
    else:
        raise AssertionError("counts below the local points were accepted")
    open(os.path.join(out, f"ok{rank}"), "w").close()


def _union(sets):
    from helmpinn.problems import TrainingSet

    def cat(name):
        parts = [getattr(s, name) for s in sets if len(s.x_pde if name in ("kappa", "f") else
                                                       s.x_data if name == "y" else s.x_bc)]
        if not parts or parts[0] is None or np.ndim(parts[0]) == 0:
            return parts[0] if parts else 0j
        return np.concatenate(parts)

    return TrainingSet(x_pde=np.concatenate([s.x_pde for s in sets]), kappa=cat("kappa"), f=cat("f"),
                       x_data=np.concatenate([s.x_data for s in sets]), y=np.concatenate([s.y for s in sets]),
                       x_bc=np.concatenate([s.x_bc for s in sets]), n_bc=np.concatenate([s.n_bc for s in sets]),
                       alpha=cat("alpha"), g=cat("g"))


def _worker_adam(comm, out: str) -> None:
    import helmpinn as hp
    from helmpinn.optim import constant

    rank = comm.Get_rank()
    problem = hp.get_problem("heterogeneous2d")
    weights = {"pde": 0.01, "data": 10.0, "bc": 1.0}
    model = hp.Model.create(2, 6, 12, 2, dtype="float64", seed=3, fourier_sigma=1.0)
    start = model.params.copy()
    trainer = hp.Trainer(problem, model, comm=comm, lr=constant(1e-2), betas=(0.9, 0.99),
                         pde_points=37, bc_points=19, resample_every=0, eval_every=0, weights=weights,
                         batch_size=16, progress=False, seed=1, check_every=5)
    h = trainer.fit(20)
    assert trainer.training_set.sizes["pde"] == (19 if rank == 0 else 18)
    params = comm.gather(model.params.copy())
    sets = comm.gather(trainer.training_set)
    if rank == 0:
        # One process on the union of the ranks' points.
        batch = _union(sets).to_core(np.float64)
        theta = start.copy()
        opt = hp.Adam(theta, lr=1e-2, betas=(0.9, 0.99))
        ws = hp.Workspace(model.spec, 16, "float64")
        g = np.empty_like(theta)
        losses = []
        for _ in range(20):
            losses.append(ws.value_and_grad(theta, g, **batch, w_pde=0.01, w_data=10.0, w_bc=1.0))
            opt.step(theta, g)
        np.savez(os.path.join(out, "adam.npz"), start=start, single=theta, loss=np.array(h.loss),
                 loss_single=np.array(losses), **{f"rank{r}": p for r, p in enumerate(params)})

    # Parameters changed on one rank only: the next replica check (step 5) raises on all ranks.
    def nudge(t, step):
        if step == 3 and t.rank == 1:
            t.model.params[0] += 1e-6

    model = hp.Model.create(2, 6, 12, 2, dtype="float64", seed=3)
    trainer = hp.Trainer(problem, model, comm=comm, pde_points=37, bc_points=19, eval_every=0,
                         progress=False, check_every=5, callbacks=[nudge])
    try:
        trainer.fit(8)
    except RuntimeError as exc:
        msg = str(exc)
    else:
        msg = "no error"
    msgs = comm.gather(msg)
    if rank == 0:
        with open(os.path.join(out, "drift.json"), "w") as fh:
            json.dump(msgs, fh)

    # A rank without any point (1 point over 2 ranks) takes part in every step of every fit.
    trainer = hp.Trainer(problem, hp.Model.create(2, 4, 8, 1, dtype="float64"), comm=comm,
                         pde_points=1, bc_points=0, eval_every=0, resample_every=0, progress=False)
    trainer.fit(2)
    trainer.fit(2)
    assert trainer.training_set.sizes["pde"] == 1 - rank and trainer.step == 4


def _worker_lm(comm, out: str, gram: str = "float64", solver: str = "auto") -> None:
    import helmpinn as hp
    from helmpinn.optim.lm import CoreResiduals, LevenbergMarquardt

    rank = comm.Get_rank()
    problem = hp.get_problem("heterogeneous2d")
    weights = {"pde": 0.01, "data": 10.0, "bc": 1.0}
    model = hp.Model.create(2, 4, 10, 2, dtype="float64", seed=5, fourier_sigma=1.0)
    start = model.params.copy()
    trainer = hp.Trainer(problem, model, comm=comm, pde_points=41, bc_points=21, resample_every=0,
                         eval_every=0, weights=weights, batch_size=16, progress=False, seed=2)
    options = {"gram": gram, "refine_tol": 1e-12, "refine_maxiter": 200, "solver": solver,
               "cg_tol": 1e-12, "cg_maxiter": 2000}
    h = trainer.fit_lm(6, stall_window=100, **options)
    assert trainer.training_set.sizes["pde"] == (21 if rank == 0 else 20)
    params = comm.gather(model.params.copy())
    sets = comm.gather(trainer.training_set)
    predicted = trainer.driver.lm.solve(model.params, 1e-3).predicted   # the model's decrease, summed
    if rank == 0:
        # One process, the same LM settings, on the union of the ranks' points.
        batch = _union(sets).to_core(np.float64)
        theta = start.copy()
        ws = hp.Workspace(model.spec, 16, "float64")
        lm = LevenbergMarquardt(CoreResiduals(ws, batch, weights), **options)
        losses = [lm.step(theta).loss for _ in range(6)]
        lm.reset_cache()
        np.savez(os.path.join(out, "lm.npz"), start=start, single=theta, loss=np.array(h.loss),
                 loss_single=np.array(losses), predicted=predicted,
                 predicted_single=lm.solve(np.array(params[0].tolist()), 1e-3).predicted,   # (unpickled: fresh dtype)
                 **{f"rank{r}": p for r, p in enumerate(params)})


def _worker_cli(comm, out: str) -> None:
    from helmpinn.cli import main

    target = os.path.abspath(os.path.join(out, "out"))
    writes: list[str] = []

    def hook(event, args):  # every file written, renamed or made under target
        if event == "open":
            path, mode, flags = args
            if isinstance(path, int):
                return
            writing = (mode is not None and any(c in mode for c in "wax+")) or (
                mode is None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND))
            paths = [path] if writing else []
        elif event in ("os.rename", "os.replace", "os.mkdir", "os.remove", "os.symlink"):
            paths = [args[0], args[1]] if event in ("os.rename", "os.replace") else [args[0]]
        else:
            return
        for p in paths:
            p = os.path.abspath(os.fsdecode(p))
            if p == target or p.startswith(target + os.sep):
                writes.append(p)

    sys.addaudithook(hook)
    rc = main(["train", "--problem", "dirichlet2d", "--optimizer", "adam", "--steps", "10", "--points", "64",
               "--bc-points", "32", "--hidden", "8", "--layers", "1", "--fourier", "4",
               "--eval-every", "5", "--checkpoint-every", "5", "--quiet", "--out", target])
    assert rc == 0, rc
    everyone = comm.gather(writes)
    if comm.Get_rank() == 0:
        with open(os.path.join(out, "writes.json"), "w") as fh:
            json.dump({str(r): w for r, w in enumerate(everyone)}, fh)


def _worker_cli_lm_solvers(comm, out: str) -> None:
    """`helmpinn train --optimizer lm` over the ranks: cg runs, dual is refused (exit 2)."""
    from helmpinn.cli import main

    args = ["train", "--problem", "plane1d", "--optimizer", "lm", "--steps", "2", "--points", "64",
            "--quiet", "--no-plots"]
    codes = [main([*args, "--lm-solver", "cg", "--out", os.path.join(out, "cg")]),
             main([*args, "--lm-solver", "dual", "--out", os.path.join(out, "dual")])]
    if comm.Get_rank() == 0:
        with open(os.path.join(out, "codes.json"), "w") as fh:
            json.dump(codes, fh)


if __name__ == "__main__":
    from mpi4py import MPI

    case, folder = sys.argv[1], sys.argv[2]
    try:
        {"value_and_grad": _worker_value_and_grad, "adam": _worker_adam, "lm": _worker_lm,
         "lm32": lambda comm, out: _worker_lm(comm, out, gram="float32"),
         "lmcg": lambda comm, out: _worker_lm(comm, out, solver="cg"),
         "cli": _worker_cli, "cli_lm_solvers": _worker_cli_lm_solvers}[case](MPI.COMM_WORLD, folder)
    except BaseException:  # fail the whole job now rather than leave the other ranks waiting
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)
