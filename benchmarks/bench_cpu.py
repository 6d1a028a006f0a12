#!/usr/bin/env python
"""CPU benchmark: helmpinn's value_and_grad against PyTorch and JAX on identical work.

    python benchmarks/bench_cpu.py [--configs a,b,c] [--steps 20] [--threads 2]
                                   [--scaling] [--quick] [--json out.json]

Run from the repository root with helmpinn importable (installed, or PYTHONPATH=python).
See benchmarks/README.md for what is measured and how.

Every implementation runs in its own worker process (this script, re-invoked with --worker),
so OpenMP/MKL/Eigen thread pools of one library never spin against another's timed region and
each library gets exactly the configured threads. All workers build bit-identical weights and
points from the same seed (common.make_problem).
"""
from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import common  # noqa: E402
from common import CONFIGS, Config, flops_per_step, make_problem, with_points  # noqa: E402

RESULT_TAG = "@@HELMPINN_BENCH_RESULT@@"
CHECK_TOL = 1e-6
JAX_IMPLS = ("jax-hessian", "jax-jvp2", "jax-fwdlap")
TORCH_IMPLS = ("torch-eager", "torch-fwdlap-eager", "torch-compile")
PEER_LABEL = {
    "helmpinn": "helmpinn",
    "torch-eager": "PyTorch eager, nested autograd",
    "torch-fwdlap-eager": "PyTorch eager, forward Laplacian (info)",
    "torch-compile": "PyTorch torch.compile, forward Laplacian",
    "jax-hessian": "JAX jit, vmap(hessian)",
    "jax-jvp2": "JAX jit, jvp of jvp",
    "jax-fwdlap": "JAX jit, forward Laplacian",
}


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
    fn = {"sgemm": worker_sgemm, "check": worker_check, "scaling": worker_scaling}[kind]
    out = fn(job)
    sys.stdout.write("\n" + RESULT_TAG + json.dumps(out) + "\n")
    sys.stdout.flush()


# ============================================================================================
# orchestrator side


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
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)]
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


def read_stat() -> dict:
    """CPU jiffies of the whole machine (/proc/stat) and of this process tree, to tell how much
    CPU other processes took while we measured (a shared machine is noisy)."""
    out = {"t": time.perf_counter(), "own": sum(os.times()[:4])}
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        v += [0] * (8 - len(v))
        hz = os.sysconf("SC_CLK_TCK")
        out.update(busy=(v[0] + v[1] + v[2] + v[5] + v[6]) / hz, steal=v[7] / hz,
                   total=sum(v[:8]) / hz)
    except (OSError, ValueError):
        pass
    return out


def other_load(s0: dict, s1: dict) -> dict:
    """Fraction of the machine's CPUs that other processes used between two read_stat()s."""
    if "busy" not in s0 or "busy" not in s1:
        return {}
    wall = s1["t"] - s0["t"]
    ncpu = os.cpu_count() or 1
    other = (s1["busy"] - s0["busy"]) - (s1["own"] - s0["own"])
    tot = s1["total"] - s0["total"]
    return {"other_cpu_fraction": max(0.0, other) / max(wall * ncpu, 1e-9),
            "steal_fraction": (s1["steal"] - s0["steal"]) / tot if tot else 0.0}


def background_load(seconds: float = 1.0) -> dict:
    s0 = read_stat()
    time.sleep(seconds)
    return other_load(s0, read_stat())


def machine_info() -> dict:
    info = {"date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "platform": platform.platform(), "python": platform.python_version(),
            "cpu": platform.processor() or "?", "logical_cpus": os.cpu_count(),
            "affinity_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
            else os.cpu_count(), "numpy": np.__version__}
    try:
        with open("/proc/cpuinfo") as fh:
            txt = fh.read()
        for line in txt.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        flags = next((ln.split(":", 1)[1].split() for ln in txt.splitlines()
                      if ln.startswith("flags")), [])
        info["isa"] = ("avx512" if "avx512f" in flags else "avx2" if "avx2" in flags
                       else "sse/other") + (" fma" if "fma" in flags else "")
    except OSError:
        pass
    try:
        info["loadavg_start"] = open("/proc/loadavg").read().split()[:3]
    except OSError:
        pass
    for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        if k in os.environ:
            info[k] = os.environ[k]
    for mod in ("torch", "jax"):
        if importlib.util.find_spec(mod) is not None:
            try:  # version without importing the package (cheap, no thread pools here)
                from importlib.metadata import version
                info[mod] = version(mod)
            except Exception:
                info[mod] = "?"
    return info


def probe_helmpinn() -> dict | None:
    """Import helmpinn in a throw-away process: version, ISA, OpenMP (None if not importable)."""
    code = ("import json, helmpinn\n"
            "c = getattr(helmpinn, '_core', helmpinn)\n"
            "print(json.dumps(dict(version=c.__version__, isa=c.cpu_isa(), openmp=c.has_openmp(),"
            " file=c.__file__)))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if p.returncode != 0:
        print("helmpinn is not importable (build/install it, or PYTHONPATH=python):\n  "
              + (p.stderr.strip().splitlines() or ["?"])[-1])
        return None
    return json.loads(p.stdout.strip().splitlines()[-1])


class ImportProbe:
    """`import MOD` in a throw-away process (started at once, read with .result()): None when it
    works, else the last line of the error. A peer that cannot be imported is skipped."""

    def __init__(self, mod: str):
        env = _worker_env(1, mod, True)
        self.p = subprocess.Popen([sys.executable, "-c", f"import {mod}"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def result(self):
        _, err = self.p.communicate()
        if self.p.returncode == 0:
            return None
        return (err.strip().splitlines() or ["exit code %d" % self.p.returncode])[-1][:200]


def rel_err(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = np.linalg.norm(b.ravel())
    return float(np.linalg.norm((a - b).ravel()) / (den if den > 0 else 1.0))


def fmt_ms(r: dict | None) -> str:
    if not r or "median_ms" not in r:
        return "–"
    return f"{r['median_ms']:.1f} ({r['min_ms']:.1f})"


def fmt_x(num: dict | None, den: dict | None) -> str:
    if not num or not den or "median_ms" not in num or "median_ms" not in den:
        return "–"
    return f"{num['median_ms'] / den['median_ms']:.1f}×"


def do_check(args, impls: list[str], have_hp: bool) -> dict:
    configs = args.check_configs
    print(f"\n## Agreement check (float64, configs' networks on {common.CHECK_N_PDE} PDE + "
          f"{common.CHECK_N_DATA} data points; relative 2-norm error vs the reference)\n")
    import reference
    out_dir = tempfile.mkdtemp(prefix="helmpinn_bench_")
    ref = {}
    for cname in configs:
        cfg = with_points(CONFIGS[cname], common.CHECK_N_PDE, common.CHECK_N_DATA)
        ref[cname] = reference.loss_and_grad(cfg, make_problem(cfg, np.float64))
    groups: dict[str, list[str]] = {}
    for impl in impls:
        groups.setdefault(_framework(impl), []).append(impl)
    status = {}
    for fw, group in groups.items():
        job = dict(kind="check", impls=group, configs=configs, threads=args.threads,
                   out_dir=out_dir)
        r = run_worker(job, fw, args, timeout=900)
        if r is None:
            r = {f"{c}/{i}": {"ok": False, "error": "worker failed"} for c in configs for i in group}
        status.update(r)
    # reference: helmpinn when present, else the NumPy MATH.md reference
    rows, worst = [], 0.0
    labels = ["numpy-reference"] + [k.split("/", 1)[1] for k in status if k.startswith(configs[0] + "/")]
    ref_label = "helmpinn" if have_hp else "numpy-reference"
    failures = []
    for cname in configs:
        def load(label):
            if label == "numpy-reference":
                return ref[cname]
            fn = os.path.join(out_dir, f"{cname}_{label}.npz")
            if not os.path.exists(fn):
                return None
            z = np.load(fn)
            return float(z["loss"]), z["grad"]
        base = load(ref_label)
        if base is None:
            failures.append(f"{cname}: reference {ref_label} missing "
                            f"({status.get(f'{cname}/{ref_label}', {}).get('error')})")
            continue
        for label in labels:
            if label == ref_label:
                continue
            got = load(label)
            if got is None:
                err = status.get(f"{cname}/{label}", {}).get("error", "missing")
                rows.append((cname, label, "FAILED", err[:80]))
                failures.append(f"{cname}/{label}: {err}")
                continue
            el = abs(got[0] - base[0]) / max(abs(base[0]), 1e-300)
            eg = rel_err(got[1], base[1])
            worst = max(worst, el, eg)
            ok = el <= CHECK_TOL and eg <= CHECK_TOL and np.all(np.isfinite(got[1]))
            rows.append((cname, label, f"{el:.1e}", f"{eg:.1e}" + ("" if ok else "  <-- FAIL")))
            if not ok:
                failures.append(f"{cname}/{label}: loss {el:.2e}, grad {eg:.2e}")
    print(f"reference: {ref_label}\n")
    print("| config | implementation | loss rel. err | gradient rel. err |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    if failures:
        print("\n" + "!" * 78)
        print(f"AGREEMENT CHECK FAILED (tolerance {CHECK_TOL:g}):")
        for f in failures:
            print("  - " + f)
        print("!" * 78)
        raise SystemExit(2)
    print(f"\nall agree within {CHECK_TOL:g} (worst {worst:.1e})")
    return {"reference": ref_label, "rows": rows, "worst": worst}


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


class Server:
    """A running worker_serve process."""

    def __init__(self, job: dict, framework: str, args):
        env = _worker_env(job["threads"], framework, args.keep_openblas_env)
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", json.dumps(job)]
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


def do_time(args, impls: list[str], wait_budget: list) -> dict:
    """Per config: start one server per framework (build, compile, warm up: untimed), then
    time in rounds, each round running `per_round` steps of every implementation in turn (order
    rotated each round, a short idle pause between turns), until each has `steps` steps."""
    results: dict[str, dict] = {}
    groups: dict[str, list[str]] = {}
    for impl in impls:
        groups.setdefault(_framework(impl), []).append(impl)
    for cname in args.configs:
        cfg = CONFIGS[cname]
        t0 = time.perf_counter()
        res: dict[str, dict] = {}
        servers: dict[str, Server] = {}
        for fw, group in groups.items():
            job = dict(kind="serve", impls=group, config=cname, threads=args.threads,
                       warmup=args.warmup, batch_size=args.batch_size)
            srv = Server(job, fw, args)
            ready = srv.read()
            if ready is None:
                res.update({i: {"error": "worker failed"} for i in group})
                srv.close()
                continue
            servers[fw] = srv
            res.update(ready)
        t_setup = time.perf_counter() - t0
        waited = common.wait_quiet(args.noise, min(wait_budget[0], 60))
        wait_budget[0] -= waited
        live = [i for i in impls if i in res and "error" not in res[i]]
        owner = {i: servers[_framework(i)] for i in live}
        times = {i: [] for i in live}
        cpu = {i: [0.0, 0.0] for i in live}
        noise = {i: [] for i in live}
        rejected = {i: 0 for i in live}
        per_round = max(1, args.per_round)
        # steps per turn: per_round, or more for fast ones so a turn lasts >= 0.3 s (the noise
        # meter's resolution); every implementation gets the same number of turns (rounds)
        k_turn = {i: max(per_round, int(np.ceil(0.3 / max(res[i].get("est_step_s", 1.0), 1e-6))))
                  for i in live}
        rounds = int(np.ceil(args.steps / per_round))
        for rnd in range(rounds):
            order = live[rnd % len(live):] + live[:rnd % len(live)] if live else []
            for i in order:
                while True:
                    time.sleep(args.pause)
                    r = owner[i].run(i, k_turn[i])
                    if r is None:
                        res[i] = {"error": "worker died while timing"}
                        live.remove(i)
                        break
                    if r["other"] > args.noise and wait_budget[0] > 0:
                        rejected[i] += 1          # someone else took the CPUs: redo the turn
                        wait_budget[0] -= common.wait_quiet(args.noise, min(wait_budget[0], 30))
                        continue
                    times[i] += r["times"]
                    cpu[i][0] += r["cpu"]
                    cpu[i][1] += r["wall"]
                    noise[i].append(r["other"])
                    break
        rnd = rounds
        for srv in servers.values():
            srv.close()
        for i in list(times):
            if "error" in res.get(i, {}):
                continue
            ts = np.array(times[i])
            res[i].update(median_ms=float(np.median(ts) * 1e3), min_ms=float(ts.min() * 1e3),
                          mean_ms=float(ts.mean() * 1e3), steps=len(ts),
                          cpu_util=cpu[i][0] / max(cpu[i][1], 1e-12), rounds=rnd,
                          other_load=float(np.mean(noise[i])) if noise[i] else 0.0,
                          rejected_turns=rejected[i],
                          times_ms=[round(1e3 * t, 4) for t in times[i]])
        res["_flops"] = flops_per_step(cfg)
        results[cname] = res
        print(f"  config {cname}: set-up {t_setup:.0f} s, timing {time.perf_counter() - t0 - t_setup:.0f} s"
              f" ({rnd} rounds): " + ", ".join(
                  f"{i} {fmt_ms(res[i])}" if "error" not in res[i] else f"{i} ERROR"
                  for i in impls if i in res), flush=True)
        for i in impls:
            if "error" in res.get(i, {}):
                print(f"    error in {i}: {res[i]['error'][:300]}")
    return results


def report(args, results: dict, sgemm_rate: float, impls: list[str], info: dict) -> dict:
    summary = {}
    print(f"\n## Results: float32, {args.threads} threads, median (min) ms per step of "
          f"{args.steps} timed steps after warm-up\n")
    print(f"Machine: {info.get('cpu')} ({info.get('isa')}), {info.get('affinity_cpus')} CPUs; "
          f"{info['date_utc']}; SGEMM {sgemm_rate:.0f} GFLOP/s\n")
    print("| config | GFLOP/step | helmpinn ms | helmpinn GFLOP/s | % of SGEMM | "
          "torch eager ms | speed-up | torch.compile ms | speed-up | best JAX ms | speed-up |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for cname, res in results.items():
        fl = res["_flops"]
        hp = res.get("helmpinn")
        jax = {i: res[i] for i in JAX_IMPLS if i in res and "median_ms" in res[i]}
        best_jax = min(jax, key=lambda i: jax[i]["median_ms"]) if jax else None
        s = {"gflop": fl / 1e9}
        if hp and "median_ms" in hp:
            s["gflops"] = fl / hp["median_ms"] / 1e6
            s["frac_sgemm"] = s["gflops"] / sgemm_rate
            gf, pct = f"{s['gflops']:.1f}", f"{100 * s['frac_sgemm']:.0f}%"
        else:
            gf = pct = "–"
        for i in ("torch-eager", "torch-compile"):
            if hp and i in res and "median_ms" in res.get(i, {}) and "median_ms" in hp:
                s[f"speedup_{i}"] = res[i]["median_ms"] / hp["median_ms"]
        if best_jax and hp and "median_ms" in hp:
            s["speedup_jax"] = jax[best_jax]["median_ms"] / hp["median_ms"]
            s["best_jax"] = best_jax
        jtxt = (f"{fmt_ms(jax[best_jax])} {best_jax[4:]}" if best_jax else "–")
        print(f"| {cname} | {fl / 1e9:.2f} | {fmt_ms(hp)} | {gf} | {pct} | "
              f"{fmt_ms(res.get('torch-eager'))} | {fmt_x(res.get('torch-eager'), hp)} | "
              f"{fmt_ms(res.get('torch-compile'))} | {fmt_x(res.get('torch-compile'), hp)} | "
              f"{jtxt} | {fmt_x(jax.get(best_jax) if best_jax else None, hp)} |")
        summary[cname] = s

    print("\nEvery implementation, median (min) ms per step [CPU utilisation: CPU time / wall "
          "time], first call (compilation etc., untimed), other processes' CPU load while timed "
          "when >= 5%:\n")
    cols = list(results)
    print("| implementation | " + " | ".join(f"config {c}" for c in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for impl in impls:
        cells = []
        for c in cols:
            r = results[c].get(impl)
            if not r:
                cells.append("–")
            elif "error" in r:
                cells.append("error")
            else:
                cells.append(f"{fmt_ms(r)} [{r['cpu_util']:.1f}] first call {r['first_call_s']:.1f} s"
                             + (f", other load {100 * r.get('other_load', 0):.0f}%"
                                if r.get("other_load", 0) >= 0.05 else "")
                             + (f", {r['rejected_turns']} noisy turns redone"
                                if r.get("rejected_turns") else ""))
        print(f"| {PEER_LABEL.get(impl, impl)} | " + " | ".join(cells) + " |")
    errs = [(c, i, results[c][i]["error"]) for c in cols for i in impls
            if isinstance(results[c].get(i), dict) and "error" in results[c][i]]
    for c, i, e in errs:
        print(f"\n  error in {i} on config {c}: {e}")

    # the targets
    if any("speedup_torch-eager" in s for s in summary.values()):
        print("\nTargets (issue 4): >= 10x PyTorch eager, >= 2x best of JAX and torch.compile, "
              ">= 60% of SGEMM on config b\n")
        for c, s in summary.items():
            chk = []
            if "speedup_torch-eager" in s:
                chk.append(f"vs eager {s['speedup_torch-eager']:.1f}x "
                           f"{'ok' if s['speedup_torch-eager'] >= 10 else 'MISSED'}")
            best_opt = min([s[k] for k in ("speedup_torch-compile", "speedup_jax") if k in s],
                           default=None)
            if best_opt is not None:
                chk.append(f"vs best of JAX/compile {best_opt:.1f}x "
                           f"{'ok' if best_opt >= 2 else 'MISSED'}")
            if c == "b" and "frac_sgemm" in s:
                chk.append(f"SGEMM fraction {100 * s['frac_sgemm']:.0f}% "
                           f"{'ok' if s['frac_sgemm'] >= 0.6 else 'MISSED'}")
            print(f"- config {c}: " + "; ".join(chk))
    return summary


SCALING_POINTS_SMALL = dict(label="small2d", d=2, m=16, H=32, L=3)
SCALING_POINTS_B = dict(label="b", d=2, m=32, H=128, L=4)


def do_scaling(args, sgemm_rate: float, wait_budget: list) -> dict:
    quick = args.quick
    runs_pts = []

    def steps_for(flop):  # about 2 s of timed steps for the big ones, at least 3 steps
        est = flop / 60e9
        return int(max(3, min(args.steps, 2.0 / max(est, 1e-9))))

    pts = [1000, 10000, 100000] if quick else [1000, 10000, 100000, 1000000]
    for net, plist in ((SCALING_POINTS_SMALL, pts),
                       (SCALING_POINTS_B, [1000, 10000] if quick else [1000, 10000, 100000])):
        for n in plist:
            cfg = Config(net["label"], net["d"], net["m"], net["H"], net["L"], n, n // 8)
            runs_pts.append(dict(net, n_pde=n, n_data=n // 8, threads=args.threads,
                                 steps=steps_for(flops_per_step(cfg)), batch_size=args.batch_size))
    runs_w = []
    for H in ([32, 128, 256] if quick else [32, 64, 128, 256]):
        cfg = Config(f"H{H}", 2, 32, H, 4, 8192, 1024)
        runs_w.append(dict(label=f"H{H}", d=2, m=32, H=H, L=4, n_pde=8192, n_data=1024,
                           threads=args.threads, steps=steps_for(flops_per_step(cfg)),
                           batch_size=args.batch_size))
    runs_t = []
    for cname in args.configs:
        c = CONFIGS[cname]
        for th in (1, 2):
            runs_t.append(dict(label=cname, d=c.d, m=c.m, H=c.H, L=c.L, n_pde=c.n_pde,
                               n_data=c.n_data, threads=th,
                               steps=steps_for(flops_per_step(c) * 2 / th),
                               batch_size=args.batch_size))
    runs_bs = []
    c = CONFIGS["b"]
    for bs in ([1024, 8192] if quick else [512, 1024, 2048, 4096, 8192]):
        runs_bs.append(dict(label="b", d=c.d, m=c.m, H=c.H, L=c.L, n_pde=c.n_pde,
                            n_data=c.n_data, threads=args.threads,
                            steps=steps_for(flops_per_step(c)), batch_size=bs))

    out = {}
    for name, runs, threads in (("points", runs_pts, args.threads), ("width", runs_w, args.threads),
                                ("threads", runs_t, max(r["threads"] for r in runs_t)),
                                ("batch_size", runs_bs, args.threads)):
        job = dict(kind="scaling", runs=runs, threads=threads, noise=args.noise,
                   max_wait=max(0.0, wait_budget[0]))
        r = run_worker(job, "helmpinn", args, timeout=1200)
        out[name] = r["runs"] if r else []

    def table(title, rows, key_cols):
        print(f"\n### {title}\n")
        print("| " + " | ".join(h for h, _ in key_cols) + " | ms/step (min) | µs/PDE pt | "
              "GFLOP/s | % SGEMM | workspace MiB | batch | steps | other load |")
        print("|" + "---|" * (len(key_cols) + 8))
        for r in rows:
            gfs = r["flops"] / r["median_ms"] / 1e6
            print("| " + " | ".join(str(f(r)) for _, f in key_cols) +
                  f" | {r['median_ms']:.2f} ({r['min_ms']:.2f}) | "
                  f"{1e3 * r['median_ms'] / r['n_pde']:.2f} | {gfs:.1f} | "
                  f"{100 * gfs / sgemm_rate:.0f}% | {r['memory_bytes'] / 2**20:.1f} | "
                  f"{r['batch_size']} | {r['steps']} | {100 * r.get('other_load', 0):.0f}%"
                  + (f" ({r['rejected_batches']} redone)" if r.get("rejected_batches") else "")
                  + " |")

    print("\n## helmpinn scaling (float32)")
    net = lambda r: f"{r['label']} (d={r['d']},m={r['m']},H={r['H']},L={r['L']})"  # noqa: E731
    table(f"Points (data points = PDE/8), {args.threads} threads", out["points"],
          [("net", net), ("PDE points", lambda r: f"{r['n_pde']:,}")])
    table(f"Hidden width (d=2, m=32, L=4, 8192 + 1024 points), {args.threads} threads",
          out["width"], [("H", lambda r: r["H"])])
    rows_t = out["threads"]
    table("Threads", rows_t, [("config", lambda r: r["label"]), ("threads", lambda r: r["threads"])])
    by = {}
    for r in rows_t:
        by.setdefault(r["label"], {})[r["threads"]] = r["median_ms"]
    for lab, d in by.items():
        if 1 in d and 2 in d:
            print(f"- config {lab}: 2-thread speed-up {d[1] / d[2]:.2f}x "
                  f"(parallel efficiency {50 * d[1] / d[2]:.0f}%)")
    table(f"Workspace batch size (config b), {args.threads} threads", out["batch_size"],
          [("batch_size", lambda r: r["batch_size"])])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--configs", default=None,
                    help="comma-separated subset of a,b,c (default a,b,c; a,b with --quick)")
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default 20; 5 --quick)")
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed steps after the first call (default 2; 1 --quick)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--per-round", type=int, default=5,
                    help="timed steps of one implementation per turn of the round-robin")
    ap.add_argument("--pause", type=float, default=0.2,
                    help="idle seconds before each turn (lets other thread pools go to sleep)")
    ap.add_argument("--batch-size", type=int, default=None,
                    help="helmpinn Workspace batch_size (default: the Workspace's default)")
    ap.add_argument("--impls", default=None,
                    help="comma-separated subset of helmpinn," + ",".join(TORCH_IMPLS + JAX_IMPLS))
    ap.add_argument("--scaling", action="store_true", help="also run helmpinn's scaling study")
    ap.add_argument("--scaling-only", action="store_true", help="only SGEMM + scaling")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run under 2 minutes: configs a,b, 5 timed steps, check on config a only "
                         "(numbers not for publishing: the issue asks for >= 20 steps)")
    ap.add_argument("--skip-check", action="store_true", help="skip the float64 agreement check")
    ap.add_argument("--noise", type=float, default=0.10,
                    help="a timed turn during which other processes used more than this "
                         "fraction of the CPUs is redone once the machine is quiet (default 0.10)")
    ap.add_argument("--max-wait", type=float, default=None,
                    help="seconds the whole run may spend waiting for a quiet machine (default "
                         "300; 20 with --quick; 0: never wait, keep noisy turns)")
    ap.add_argument("--keep-openblas-env", action="store_true",
                    help="do not unset OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE for the SGEMM worker")
    ap.add_argument("--json", default=None, help="write all results to this JSON file")
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.worker is not None:
        worker_main(json.loads(args.worker))
        return 0

    t_start = time.perf_counter()
    bg = background_load(1.0)
    stat0 = read_stat()
    if args.configs is None:
        args.configs = "a,b" if args.quick else "a,b,c"
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in args.configs:
        if c not in CONFIGS:
            ap.error(f"unknown config {c!r} (choose from {','.join(CONFIGS)})")
    if args.steps is None:
        args.steps = 5 if args.quick else 20
    if args.max_wait is None:
        args.max_wait = 20.0 if args.quick else 300.0
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.steps < 20 and not args.quick:
        print(f"note: --steps {args.steps} < 20; the issue asks for the median of at least 20")
    args.check_configs = args.configs[:1] if args.quick else args.configs

    info = machine_info()
    print(f"# helmpinn CPU benchmark — {info['date_utc']}\n")
    print(f"- CPU: {info.get('cpu')} ({info.get('isa')}), {info['affinity_cpus']} usable CPUs, "
          f"load average at start {' '.join(info.get('loadavg_start', []))}")
    print(f"- Python {info['python']}, NumPy {info['numpy']}, PyTorch {info.get('torch', '–')}, "
          f"JAX {info.get('jax', '–')}")
    if bg:
        print(f"- other processes' CPU load just before the run: "
              f"{100 * bg['other_cpu_fraction']:.0f}% of the machine"
              + ("  -- WARNING: the machine is busy; timings will be noisy"
                 if bg["other_cpu_fraction"] > 0.10 else ""))
    info["background_before"] = bg
    hp = probe_helmpinn()
    if hp:
        print(f"- helmpinn {hp['version']} (ISA {hp['isa']}, OpenMP {hp['openmp']}) from "
              f"{hp['file']}")
    info["helmpinn"] = hp
    if args.threads > info["affinity_cpus"]:
        print(f"- WARNING: {args.threads} threads on {info['affinity_cpus']} CPUs: oversubscribed")

    impls = ["helmpinn"] if hp else []
    probes = {m: ImportProbe(m) for m in ("torch", "jax")}
    for mod, label, group in (("torch", "PyTorch", TORCH_IMPLS), ("jax", "JAX", JAX_IMPLS)):
        err = probes[mod].result()
        if err is None:
            impls += list(group)
        else:
            print(f"- {label} peers skipped: `import {mod}` failed ({err}); "
                  f"pip install '.[bench]' to include them")
    if args.impls:
        want = [i.strip() for i in args.impls.split(",")]
        bad = [w for w in want if w not in ("helmpinn",) + TORCH_IMPLS + JAX_IMPLS]
        if bad:
            ap.error(f"unknown implementation(s) {bad}")
        impls = [i for i in impls if i in want]
    if ImportProbe("threadpoolctl").result() is not None:
        print("- threadpoolctl not installed: needed for the SGEMM rate (pip install threadpoolctl)")
        return 1

    out = {"machine": info, "args": {k: v for k, v in vars(args).items() if k != "worker"}}
    wait_budget = [args.max_wait]
    wait_budget[0] -= common.wait_quiet(args.noise, min(wait_budget[0], 60))
    sgemm = [do_sgemm(args, "at the start")]
    if not args.scaling_only:
        if not args.skip_check:
            out["check"] = do_check(args, impls, bool(hp))
        print(f"\n## Timing ({', '.join(impls)})\n")
        res = do_time(args, impls, wait_budget)
        out["results"] = res
    # measured again after the timing: the machine's rate is the better of the two
    # (a busy moment can only make SGEMM look slower)
    if not args.quick:
        wait_budget[0] -= common.wait_quiet(args.noise, min(max(wait_budget[0], 0), 60))
        sgemm.append(do_sgemm(args, "after the timing"))
    rate = max((g.get("rate", 0.0) for g in sgemm), default=float("nan")) or float("nan")
    out["sgemm"] = sgemm
    out["sgemm_rate"] = rate
    print(f"\nSGEMM rate used as the machine's rate: {rate:.1f} GFLOP/s (NumPy, best of the "
          f"sizes and of the two measurements)")
    if not args.scaling_only:
        out["summary"] = report(args, res, rate, impls, info)
    if (args.scaling or args.scaling_only) and hp:
        out["scaling"] = do_scaling(args, rate, wait_budget)
    elif args.scaling:
        print("\n(scaling skipped: helmpinn not importable)")
    ol = other_load(stat0, read_stat())
    out["background"] = ol
    print(f"\nTotal wall time {time.perf_counter() - t_start:.0f} s. During the run other "
          f"processes used {100 * ol.get('other_cpu_fraction', 0):.0f}% of the machine's CPUs "
          f"and the hypervisor stole {100 * ol.get('steal_fraction', 0):.1f}%"
          + ("  -- NOISY: rerun on a quiet machine before quoting these numbers"
             if ol.get("other_cpu_fraction", 0) > 0.10 or ol.get("steal_fraction", 0) > 0.05
             else "."))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1, default=str)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
