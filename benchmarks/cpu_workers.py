"""The CPU benchmark's worker processes: what runs inside one (build an implementation, check it,
serve timed steps on request, the scaling study) and the orchestrator's handles on them
(``run_worker`` for one job, ``Server`` for a timing server).

Every implementation runs in its own worker process, so OpenMP/MKL/Eigen thread pools of one
library never spin against another's timed region and each library gets exactly the configured
threads. A worker is this file run as ``python cpu_workers.py JOB_JSON``; it answers on stdout
with lines tagged ``RESULT_TAG``.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import common  # noqa: E402
from common import CONFIGS, Config, flops_per_step, make_problem, with_points  # noqa: E402

RESULT_TAG = "@@HELMPINN_BENCH_RESULT@@"


# ============================================================================================
# worker side

def _limit_affinity(threads: int) -> None:
    """Pin the worker to `threads` CPUs when fewer than available: the one limit every library
    (JAX's thread pool included) obeys. With threads >= available this changes nothing."""
    if not hasattr(os, "sched_getaffinity"):
        return
    cpus = sorted(os.sched_getaffinity(0))
    if threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])


def _import_helmpinn():
    import helmpinn
    if not hasattr(helmpinn, "Workspace"):
        from helmpinn import _core as helmpinn  # noqa: F811
    return helmpinn


def _helmpinn_impl(hp, cfg: Config, prob: dict, dtype: str, batch_size: int | None):
    from peers import Impl
    spec = hp.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L)
    if spec.num_params != common.num_params(cfg):
        raise RuntimeError(f"helmpinn num_params {spec.num_params} != {common.num_params(cfg)}")
    lay = [(n, tuple(s)) for n, s, _ in spec.layout()]
    if lay != common.layout(cfg):
        raise RuntimeError(f"helmpinn layout {lay} != benchmark layout {common.layout(cfg)}")
    kw = {} if batch_size is None else {"batch_size": batch_size}
    ws = hp.Workspace(spec, dtype=dtype, **kw)
    theta = prob["theta"]
    grad = np.zeros_like(theta)
    args = dict(x_pde=prob["x_pde"], kappa=float(prob["kappa"]), f=prob["f"],
                x_data=prob["x_data"], y=prob["y"], w_pde=prob["w_pde"], w_data=prob["w_data"])

    def step():
        return ws.value_and_grad(theta, grad, **args)

    impl = Impl("helmpinn", step, lambda r: None, lambda r: (float(r), grad.astype(np.float64)))
    return impl, ws, spec


def _set_threads(framework: str, threads: int):
    if framework == "torch":
        import torch
        torch.set_num_threads(threads)
    elif framework == "helmpinn":
        hp = _import_helmpinn()
        hp.set_num_threads(threads)


def _framework(impl: str) -> str:
    return impl.split("-")[0]


def _build(impl: str, cfg: Config, prob: dict, dtype: str, batch_size=None):
    if impl == "helmpinn":
        return _helmpinn_impl(_import_helmpinn(), cfg, prob, dtype, batch_size)[0]
    import peers
    return peers.build(impl, cfg, prob, dtype)


def worker_check(job: dict) -> dict:
    """float64 loss and gradient of each impl on each (reduced) config, saved as .npz."""
    res = {}
    fw = _framework(job["impls"][0])
    _set_threads(fw, job["threads"])
    for cname in job["configs"]:
        cfg = with_points(CONFIGS[cname], common.CHECK_N_PDE, common.CHECK_N_DATA)
        prob = make_problem(cfg, np.float64)
        for impl in job["impls"]:
            variants = [(impl, None)]
            if impl == "helmpinn":  # also through several chunks (a partial one included)
                variants.append(("helmpinn-chunks96", 96))
            for label, bs in variants:
                key = f"{cname}/{label}"
                try:
                    t0 = time.perf_counter()
                    I = _build(impl, cfg, prob, "float64", bs)
                    loss, grad = I.flat(I.step())
                    np.savez(os.path.join(job["out_dir"], f"{cname}_{label}.npz"),
                             loss=loss, grad=grad)
                    res[key] = {"ok": True, "seconds": time.perf_counter() - t0}
                except Exception as e:  # reported, and counted as a failure by the caller
                    res[key] = {"ok": False, "error": f"{type(e).__name__}: {e}"}
    return res


def worker_serve(job: dict) -> None:
    """Timing server for one framework on one config: build and warm up every impl, answer
    READY, then run batches of timed steps on request ("run IMPL K"), so that the orchestrator
    can interleave implementations in rounds (background load then hits all of them alike)."""
    import gc
    cfg = CONFIGS[job["config"]]
    prob = make_problem(cfg, np.float32)
    impls, ready = {}, {}
    for impl in job["impls"]:
        _set_threads(_framework(impl), job["threads"])
        try:
            t0 = time.perf_counter()
            I = _build(impl, cfg, prob, "float32", job.get("batch_size"))
            r = I.step()  # first call: compilation / JIT / allocation, untimed
            I.block(r)
            first = time.perf_counter() - t0
            info = dict(first_call_s=first, loss=I.flat(r)[0])
            del r
            tw = time.perf_counter()
            for _ in range(max(1, job["warmup"])):
                I.block(I.step())
            info["est_step_s"] = (time.perf_counter() - tw) / max(1, job["warmup"])
            if impl == "helmpinn":
                info["num_threads"] = _import_helmpinn().get_num_threads()
            impls[impl] = I
            ready[impl] = info
        except Exception as e:
            ready[impl] = {"error": f"{type(e).__name__}: {e}"}
    _reply(ready)
    for line in sys.stdin:
        cmd = line.split()
        if not cmd or cmd[0] == "quit":
            break
        impl, k = cmd[1], int(cmd[2])
        I = impls[impl]
        _set_threads(_framework(impl), job["threads"])
        gc.collect()
        gc.disable()
        times = []
        meter = common.NoiseMeter().start()
        c0, w0 = time.process_time(), time.perf_counter()
        for _ in range(k):
            t0 = time.perf_counter()
            I.block(I.step())
            times.append(time.perf_counter() - t0)
        c1, w1 = time.process_time(), time.perf_counter()
        other = meter.stop()
        gc.enable()
        _reply({"times": times, "cpu": c1 - c0, "wall": w1 - w0, "other": other})


def _reply(obj) -> None:
    sys.stdout.write(RESULT_TAG + json.dumps(obj) + "\n")
    sys.stdout.flush()


def worker_scaling(job: dict) -> dict:
    hp = _import_helmpinn()
    out = []
    budget = [job["max_wait"]]
    for j in job["runs"]:
        hp.set_num_threads(j["threads"])
        cfg = Config(j["label"], j["d"], j["m"], j["H"], j["L"], j["n_pde"], j["n_data"])
        prob = make_problem(cfg, np.float32)
        I, ws, spec = _helmpinn_impl(hp, cfg, prob, "float32", j.get("batch_size"))
        t = common.time_steps_quiet(I.step, I.block, j["steps"], warmup=1,
                                    threshold=job["noise"], wait_budget=budget)
        t.update(j)
        t.update(flops=flops_per_step(cfg), memory_bytes=int(ws.memory_bytes),
                 batch_size=int(ws.batch_size), num_threads=hp.get_num_threads())
        out.append(t)
        del ws, I
    return {"runs": out}


def worker_main(job: dict) -> None:
    _limit_affinity(job["threads"])
    kind = job["kind"]
    if kind == "serve":
        worker_serve(job)
        return
    from machine_peak import worker_sgemm
    fn = {"sgemm": worker_sgemm, "check": worker_check, "scaling": worker_scaling}[kind]
    out = fn(job)
    sys.stdout.write("\n" + RESULT_TAG + json.dumps(out) + "\n")
    sys.stdout.flush()


# ============================================================================================
# orchestrator side: starting workers and reading their answers

WORKER = os.path.abspath(__file__)


def _worker_env(threads: int, framework: str, keep_openblas_env: bool) -> dict:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[k] = str(threads)
    env["JAX_PLATFORMS"] = "cpu"
    eigen = "true" if threads > 1 else "false"
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") +
                        f" --xla_cpu_multi_thread_eigen={eigen}"
                        f" intra_op_parallelism_threads={threads}").strip()
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if framework == "sgemm" and not keep_openblas_env:
        # MACHINE NOTE: OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set on some machines to work
        # around old OpenBLAS bugs and slow a current NumPy; unset both, for this worker alone.
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    return env


def run_worker(job: dict, framework: str, args, timeout: float | None = None) -> dict | None:
    env = _worker_env(job["threads"], framework, args.keep_openblas_env)
    cmd = [sys.executable, WORKER, json.dumps(job)]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"  !! worker {framework}/{job['kind']} timed out after {timeout} s")
        return None
    dt = time.perf_counter() - t0
    if args.verbose:
        print(f"  [{framework}/{job['kind']} {job.get('config', '')} {dt:.1f}s]")
    for line in p.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    print(f"  !! worker {framework}/{job['kind']} failed (exit {p.returncode}); its output:")
    tail = (p.stdout + p.stderr).strip().splitlines()[-30:]
    print("     " + "\n     ".join(tail))
    return None


class Server:
    """A running worker_serve process."""

    def __init__(self, job: dict, framework: str, args):
        env = _worker_env(job["threads"], framework, args.keep_openblas_env)
        cmd = [sys.executable, WORKER, json.dumps(job)]
        self.framework = framework
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.p = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=self.stderr, text=True, bufsize=1)

    def read(self):
        for line in self.p.stdout:
            if line.startswith(RESULT_TAG):
                return json.loads(line[len(RESULT_TAG):])
        self.stderr.seek(0)
        tail = self.stderr.read().strip().splitlines()[-20:]
        print(f"  !! {self.framework} worker died (exit {self.p.wait()}):\n     "
              + "\n     ".join(tail))
        return None

    def run(self, impl: str, k: int):
        self.p.stdin.write(f"run {impl} {k}\n")
        self.p.stdin.flush()
        return self.read()

    def close(self):
        try:
            self.p.stdin.write("quit\n")
            self.p.stdin.flush()
            self.p.wait(timeout=60)
        except Exception:
            self.p.kill()
            self.p.wait()


if __name__ == "__main__":
    worker_main(json.loads(sys.argv[1]))
