#!/usr/bin/env python
"""Weak scaling of data-parallel training over MPI (helmpinn.distributed).

    python benchmarks/bench_mpi.py [--ranks 1,2] [--config b] [--steps 20] [--threads 1]
                                   [--dtype float32] [--quick] [--json out.json]

Run from the repository root with helmpinn and mpi4py importable (``pip install ".[mpi]"``, or
PYTHONPATH=python on a source build). For each rank count R it starts
``mpiexec -n R python bench_mpi.py --worker ...``; every rank holds the config's points (points
per rank fixed: weak scaling) and takes ``--steps`` timed training steps (distributed
value_and_grad, then the Adam step). Reported, as the maximum over the ranks of the median per
step: the step, its local compute (value_and_grad on the rank's points alone), and one in-place
Allreduce of the P gradient numbers; efficiency = step time of 1 rank / step time of R ranks.

Ranks x threads should not exceed the cores (on one machine: R * --threads <= cores). Numbers
are for a quiet machine: each rank's compute is timed while the others run theirs.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

from common import CONFIGS, SEED, Config, flops_per_step, make_problem, num_params, with_points  # noqa: E402

TAG = "@@HELMPINN_BENCH_MPI@@"


def _median_ms(ts: list[float]) -> float:
    return float(np.median(ts) * 1e3)


def worker(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    import helmpinn as hp
    from helmpinn import distributed as dist

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    hp.set_num_threads(args.threads)
    cfg = Config(**json.loads(args.cfg))
    dtype = np.dtype(args.dtype)
    theta = make_problem(cfg, dtype, seed=SEED)["theta"].copy()  # the same on every rank
    mine = make_problem(cfg, dtype, seed=SEED + 1 + rank)        # this rank's points
    batch = {k: mine[k] for k in ("x_pde", "kappa", "f", "x_data", "y", "w_pde", "w_data")}
    spec = hp.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L)
    ws = hp.Workspace(spec, args.batch_size, dtype.name) if args.batch_size else hp.Workspace(spec, dtype=dtype.name)
    grad = np.zeros_like(theta)
    opt = hp.Adam(theta, lr=1e-4)
    counts = dist.global_counts(comm, batch)

    def timed(fn, n: int) -> list[float]:
        for _ in range(args.warmup):
            fn()
        comm.Barrier()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    def step() -> None:
        dist.value_and_grad(ws, comm, theta, grad, counts=counts, **batch)
        opt.step(theta, grad)

    t_step = timed(step, args.steps)
    t_compute = timed(lambda: ws.value_and_grad(theta, grad, **batch), args.steps)
    t_allreduce = timed(lambda: comm.Allreduce(MPI.IN_PLACE, grad, op=MPI.SUM), max(args.steps, 50))
    mine_ms = np.array([_median_ms(t_step), _median_ms(t_compute), _median_ms(t_allreduce)])
    worst = np.empty_like(mine_ms)
    comm.Reduce(mine_ms, worst, op=MPI.MAX, root=0)
    dist.check_replicas(comm, theta)
    if rank == 0:
        print(TAG + json.dumps({
            "ranks": size, "threads": hp.get_num_threads(), "params": int(theta.size),
            "allreduce_bytes": int(grad.nbytes), "points_per_rank": cfg.n_pde + cfg.n_data,
            "gflop_per_rank_step": flops_per_step(cfg) / 1e9, "step_ms": float(worst[0]),
            "compute_ms": float(worst[1]), "allreduce_ms": float(worst[2]),
            "mpi": MPI.Get_library_version().splitlines()[0].strip(),
        }), flush=True)


def _mpiexec() -> str:
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        sys.exit('bench_mpi: no mpiexec found (pip install ".[mpi]")')
    return found


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default="1,2", help="rank counts to run, comma-separated")
    p.add_argument("--config", default="b", choices=sorted(CONFIGS), help="benchmarks/common.py config")
    p.add_argument("--points", type=int, default=None, help="PDE points per rank (default: the config's)")
    p.add_argument("--steps", type=int, default=20, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    p.add_argument("--threads", type=int, default=1, help="OpenMP threads per rank")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--batch-size", type=int, default=0, help="Workspace chunk (0: its default)")
    p.add_argument("--quick", action="store_true", help="smoke run: config a, 512 points, 3 steps")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--mpiexec-args", default="", help="extra arguments for mpiexec (e.g. binding)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--cfg", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0

    cfg = CONFIGS[args.config]
    if args.quick:
        cfg, args.steps, args.warmup = with_points(CONFIGS["a"], 512, 64), 3, 1
    elif args.points:
        cfg = with_points(cfg, args.points, max(args.points // 8, 1))
    mpiexec = _mpiexec()
    version = subprocess.run([mpiexec, "--version"], capture_output=True, text=True).stdout
    extra = ["--allow-run-as-root", "--oversubscribe"] if "Open MPI" in version else []
    extra += args.mpiexec_args.split()
    rows = []
    for r in (int(s) for s in args.ranks.split(",")):
        cmd = [mpiexec, *extra, "-n", str(r), sys.executable, os.path.abspath(__file__), "--worker",
               "--cfg", json.dumps(cfg.asdict()), "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--threads", str(args.threads), "--dtype", args.dtype, "--batch-size", str(args.batch_size)]
        res = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": str(args.threads)})
        lines = [ln for ln in res.stdout.splitlines() if ln.startswith(TAG)]
        if res.returncode != 0 or not lines:
            print(f"bench_mpi: {r} ranks failed (exit {res.returncode}):\n{res.stdout}\n{res.stderr}", file=sys.stderr)
            return 1
        rows.append(json.loads(lines[-1][len(TAG):]))

    base = rows[0]["step_ms"]
    print(f"weak scaling: config {cfg.name} (d={cfg.d}, m={cfg.m}, H={cfg.H}, L={cfg.L}), "
          f"{cfg.n_pde} + {cfg.n_data} points per rank, {args.dtype}, {args.threads} thread(s) per rank, "
          f"P = {num_params(cfg)} ({rows[0]['allreduce_bytes'] / 1024:.0f} KiB per Allreduce); {rows[0]['mpi']}")
    print("| ranks | points in all | step ms | compute ms | Allreduce ms | efficiency |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        row["efficiency"] = base / row["step_ms"] if rows[0]["ranks"] == 1 else None
        eff = "n/a" if row["efficiency"] is None else f"{row['efficiency']:.2f}"
        print(f"| {row['ranks']} | {row['ranks'] * row['points_per_rank']} | {row['step_ms']:.2f} | "
              f"{row['compute_ms']:.2f} | {row['allreduce_ms']:.3f} | {eff} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"config": cfg.asdict(), "dtype": args.dtype, "threads": args.threads,
                       "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
