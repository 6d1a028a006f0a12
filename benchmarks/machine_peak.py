"""The machine's own arithmetic rates, against which the benchmarks report helmpinn: the float32
SGEMM rate of NumPy's BLAS (and PyTorch's, for information), measured in a worker process
(``worker_sgemm`` / ``do_sgemm``), and the float32 FMA peak of a small C kernel
(``fma_peak``, used by bench_residual.py).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from cpu_workers import run_worker  # noqa: E402

FMA_SRC = os.path.join(HERE, "..", "..", "shared", "tools", "fma_peak.c")


def worker_sgemm(job: dict) -> dict:
    from threadpoolctl import threadpool_info, threadpool_limits
    threads = job["threads"]
    out = {"numpy": {}, "torch": None}
    rng = np.random.default_rng(0)
    best_rate = 0.0
    with threadpool_limits(limits=threads, user_api="blas"):
        for n in job["sizes"]:
            a = rng.standard_normal((n, n), dtype=np.float32)
            b = rng.standard_normal((n, n), dtype=np.float32)
            c = np.empty((n, n), np.float32)
            np.matmul(a, b, out=c)
            best = min(_timeit(lambda: np.matmul(a, b, out=c)) for _ in range(job["reps"]))
            rate = 2.0 * n ** 3 / best / 1e9
            out["numpy"][str(n)] = rate
            best_rate = max(best_rate, rate)
        out["blas_info"] = [{k: i.get(k) for k in ("internal_api", "version", "architecture",
                                                   "num_threads", "threading_layer")}
                            for i in threadpool_info() if i.get("user_api") == "blas"]
    out["numpy_best"] = best_rate
    torch = None
    if job.get("torch"):
        try:
            import torch
        except Exception:  # information only
            torch = None
    if torch is not None:
        torch.set_num_threads(threads)
        tr = {}
        for n in job["sizes"]:
            a, b = torch.randn(n, n), torch.randn(n, n)
            torch.mm(a, b)
            best = min(_timeit(lambda: torch.mm(a, b)) for _ in range(job["reps"]))
            tr[str(n)] = 2.0 * n ** 3 / best / 1e9
        out["torch"] = tr
        out["torch_best"] = max(tr.values())
    return out


def _timeit(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def do_sgemm(args, when: str) -> dict:
    job = dict(kind="sgemm", threads=args.threads, sizes=[2048] if args.quick else [2048, 4096],
               reps=3 if args.quick else 5, torch=True)
    r = run_worker(job, "sgemm", args, timeout=300) or {}
    np_best = r.get("numpy_best", float("nan"))
    print(f"\n## Machine matrix-product rate, {when} (float32 SGEMM, {args.threads} threads, "
          f"best of {job['reps']})\n")
    for n, v in r.get("numpy", {}).items():
        print(f"- NumPy matmul {n}x{n}: {v:.1f} GFLOP/s")
    for b in r.get("blas_info", []):
        print(f"  (BLAS: {b.get('internal_api')} {b.get('version')}, kernel "
              f"{b.get('architecture')}, {b.get('num_threads')} threads)")
    if r.get("torch"):
        for n, v in r["torch"].items():
            print(f"- torch.mm (MKL) {n}x{n}: {v:.1f} GFLOP/s (information)")
    if any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")):
        print("- note: OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are set here; "
              + ("kept for the SGEMM worker (--keep-openblas-env): the rate may be low."
                 if args.keep_openblas_env else
                 "unset for the SGEMM worker alone (they slow a current NumPy); kernel above."))
    r["rate"] = np_best
    return r


def fma_peak(threads: int, src: str = FMA_SRC) -> float | None:
    """float32 FMA peak in GFLOP/s on `threads` threads, or None when it cannot be built."""
    import subprocess

    if not os.path.isfile(src):
        print(f"fma_peak: {src} not found; pass --fma-src", file=sys.stderr)
        return None
    with tempfile.TemporaryDirectory() as tmp:
        exe = os.path.join(tmp, "fma_peak")
        build = subprocess.run(["gcc", "-O3", "-march=native", "-fopenmp", src, "-o", exe],
                               capture_output=True, text=True)
        if build.returncode != 0:
            print("fma_peak: build failed:\n" + build.stderr, file=sys.stderr)
            return None
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        out = subprocess.run([exe], capture_output=True, text=True, env=env, check=True)
        return float(out.stdout.strip().splitlines()[-1])
