"""The workloads of benchmarks/gpu_check.sh, one per sub-command, each printing JSON lines.

    python benchmarks/gpu_cases.py env                 # packages, GPU, helmpinn build
    python benchmarks/gpu_cases.py sanitize-case       # the small workload the sanitizers run
    python benchmarks/gpu_cases.py agreement           # GPU vs CPU, float64 (and float32)
    python benchmarks/gpu_cases.py scale               # a cache above 2^31 elements; width 256
    python benchmarks/gpu_cases.py bench               # helmpinn: configs, tile sweep, FP32 peak
    python benchmarks/gpu_cases.py peer --impl NAME    # torch-eager, jax-fwdlap, torch-compile

With --stub (gpu_check.sh --dry-run) each prints records of the same shape with "stub": true
and made-up values, touching no GPU: they exist to exercise the script and the summary, and
the summary says so. Records are flushed one by one, so a run cut short keeps what it finished.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX must not take the GPU
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from common import (CHECK_N_DATA, CHECK_N_PDE, CONFIGS, flops_per_step, make_problem,  # noqa: E402
                    time_steps, with_points)

SIZES = {"a": ("a", None), "b": ("b", None), "c": ("c", None), "b65k": ("b", 65536),
         "b1m": ("b", 1048576)}
AGREE_TOL = 1e-12          # float64 GPU vs CPU, relative (issue 17)
F32_TOL = 1e-4             # float32 forward, relative
F32_GRAD_TOL = 1e-3        # float32 sums over many points, relative


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


def config(name: str):
    base, n_pde = SIZES[name]
    cfg = CONFIGS[base]
    return with_points(cfg, n_pde, cfg.n_data, name) if n_pde else cfg


def rel(a, b) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    den = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / (den if den > 0 else 1.0)


@contextlib.contextmanager
def captured_fd2(sink: list):
    """Collects what C++ writes to stderr (the CUDA plan line) while the block runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            text = tmp.read().decode(errors="replace")
            sink.append(text)
            sys.stderr.write(text)


def cuda_workspace(spec, batch, dtype):
    import helmpinn
    os.environ["HELMPINN_CUDA_VERBOSE"] = "1"
    out: list = []
    with captured_fd2(out):
        ws = helmpinn.Workspace(spec, batch, dtype=dtype, device="cuda")
    plan = next((ln.split(": ", 1)[1] for ln in "".join(out).splitlines()
                 if ln.startswith("helmpinn CUDA plan")), None)
    return ws, plan


# ---------------------------------------------------------------------------------- env

def cmd_env(args) -> None:
    rec = dict(kind="env", python=sys.version.split()[0], stub=args.stub)
    pk = {}
    for name in ("numpy", "pybind11", "pytest", "pytest_timeout", "torch", "jax", "cupy"):
        try:
            mod = __import__(name)
            pk[name] = getattr(mod, "__version__", "present")
        except Exception as e:  # noqa: BLE001 - any import failure means missing
            pk[name] = None
            rec.setdefault("import_errors", {})[name] = f"{type(e).__name__}: {str(e)[:120]}"
    rec["packages"] = pk
    if not args.stub:
        try:
            q = "name,driver_version,memory.total,clocks.max.sm"
            r = subprocess.run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader"],
                               capture_output=True, text=True, timeout=30)
            rec["gpu"] = r.stdout.strip() or r.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            rec["gpu"] = f"nvidia-smi failed: {e}"
    else:
        rec["gpu"] = "STUB GPU (dry run)"
    try:
        import helmpinn
        rec["helmpinn"] = dict(file=helmpinn.__file__, has_cuda=helmpinn.has_cuda(),
                               devices=helmpinn.cuda_device_count(),
                               device_error=helmpinn.cuda_device_error())
    except Exception as e:  # noqa: BLE001
        rec["helmpinn"] = dict(error=f"{type(e).__name__}: {e}")
    emit(rec)


# ---------------------------------------------------------------------------------- sanitizers

def cmd_sanitize_case(args) -> None:
    """Small problems through every kernel: both dtypes, odd tiles, global scratch, frozen
    Fourier features, derivatives 0/1/2, a width-256 d = 3 network, the seed primitives."""
    import helmpinn
    if helmpinn.cuda_device_count() == 0:
        print(f"NO DEVICE: {helmpinn.cuda_device_error()}", flush=True)
        sys.exit(2)
    D = helmpinn.DeviceArray.from_host
    rng = np.random.default_rng(0)
    modes = [("auto", {}), ("tile5", {"HELMPINN_CUDA_TILE": "5"}),
             ("global", {"HELMPINN_CUDA_SCRATCH": "global"}),
             ("global-tile3", {"HELMPINN_CUDA_SCRATCH": "global", "HELMPINN_CUDA_TILE": "3"})]
    shapes = [(1, 4, 8, 2), (2, 5, 13, 2), (3, 3, 24, 2)]
    for dtype in ("float32", "float64"):
        for mode, env in modes:
            for k in ("HELMPINN_CUDA_TILE", "HELMPINN_CUDA_SCRATCH"):
                os.environ.pop(k, None)
            os.environ.update(env)
            for shape in shapes + ([(3, 128, 256, 3)] if mode == "auto" else []):
                d = shape[0]
                spec = helmpinn.ModelSpec(*shape)
                n = 20 if shape[2] == 256 else 45
                ws = helmpinn.Workspace(spec, 32, dtype=dtype, device="cuda")
                th = D(rng.normal(0, 0.3, spec.num_params).astype(dtype))
                g = D(np.zeros(spec.num_params, dtype))

                def a(*s):
                    return D(rng.uniform(-1, 1, s).astype(dtype))

                nrm = rng.normal(size=(13, d))
                nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
                for tf in (True, False):
                    v = ws.value_and_grad(th, g, x_pde=a(n, d), kappa=a(n), f=a(n, 2),
                                          x_data=a(11, d), y=a(11, 2), x_bc=a(13, d),
                                          n_bc=D(nrm.astype(dtype)), alpha_bc=a(13, 2),
                                          g_bc=a(13, 2), check_finite=True, train_fourier=tf)
                    assert np.isfinite(v)
                for der in (0, 1, 2):
                    ws.forward(th, a(37, d), der)
                ws.zero_grad()
                print(dtype, mode, shape, "ok", flush=True)
        # the seed primitives on device arrays (outputs given)
        n = 37
        r = lambda *s: rng.uniform(-1, 1, s).astype(dtype)  # noqa: E731
        out = D(np.zeros((n, 3), dtype))
        helmpinn.mse_backward(D(r(n, 3)), D(r(n, 3)), out=out)
        for tanh in (True, False):
            outs = (D(np.zeros((13, 6), dtype)), D(np.zeros(13, dtype)), D(np.zeros((n, 6), dtype)))
            helmpinn.layer_backward(D(r(n, 13)), D(0.9 * r(n, 13)), D(r(n, 6)), D(r(13, 6)), tanh,
                                    out=outs)
        for dd in (1, 2, 3):
            helmpinn.fourier_backward(D(r(n, 10)), D(r(n, dd)), D(r(dd, 5)),
                                      out=D(np.zeros((dd, 5), dtype)))
        p, m, vv = D(r(300)), D(0.1 * r(300)), D(0.1 * np.abs(r(300)))
        for step in (1, 2):
            helmpinn.adam_step(p, D(r(300)), m, vv, step, 1e-2, weight_decay=0.01)
        p.copy_to_host()
        print(dtype, "primitives ok", flush=True)
    print("CASE DONE", flush=True)


def cmd_stub_sanitizer(args) -> None:
    """What compute-sanitizer prints, for the dry run: clean, or refusing the device."""
    refuse = args.tool in os.environ.get("GPU_CHECK_STUB_REFUSE", "").split(",")
    find = args.tool in os.environ.get("GPU_CHECK_STUB_FIND", "").split(",")
    print(f"========= COMPUTE-SANITIZER (STUB, dry run) tool {args.tool}")
    if refuse:
        print("========= Error: Device not supported. Please refer to the documentation (STUB)")
        print("NO DEVICE: cudaGetDeviceCount: cudaErrorUnknown (unknown error) (STUB)")
        sys.exit(2)
    if find:
        print("========= Invalid __global__ read of size 8 bytes (STUB)")
        print("CASE DONE")
        print("========= ERROR SUMMARY: 1 error")
        sys.exit(3)
    print("CASE DONE")
    print("========= ERROR SUMMARY: 0 errors")


# ---------------------------------------------------------------------------------- agreement

def _loss_inputs(prob, D):
    return dict(x_pde=D(prob["x_pde"]), kappa=prob["kappa"], f=D(prob["f"]),
                x_data=D(prob["x_data"]), y=D(prob["y"]), w_pde=prob["w_pde"],
                w_data=prob["w_data"])


def cmd_agreement(args) -> None:
    if args.stub:
        for dtype in ("float64", "float32"):
            emit(dict(kind="agreement", stub=True, dtype=dtype,
                      tol=AGREE_TOL if dtype == "float64" else F32_GRAD_TOL,
                      cases={k: dict(loss=1e-16, grad=2e-15, u=1e-16, grad_u=1e-16, lap_u=1e-15)
                             for k in "abc"}))
        return
    import helmpinn
    D = helmpinn.DeviceArray.from_host
    for dtype in ("float64", "float32"):
        cases = {}
        for name in ("a", "b", "c"):
            cfg = with_points(CONFIGS[name], CHECK_N_PDE, CHECK_N_DATA)
            prob = make_problem(cfg, dtype=np.dtype(dtype))
            spec = helmpinn.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L)
            gpu, _ = cuda_workspace(spec, 4096, dtype)
            cpu = helmpinn.Workspace(spec, 4096, dtype=dtype)
            g = D(np.zeros_like(prob["theta"]))
            v = gpu.value_and_grad(D(prob["theta"]), g, **_loss_inputs(prob, D))
            gc = np.empty_like(prob["theta"])
            vc = cpu.value_and_grad(prob["theta"], gc, x_pde=prob["x_pde"], kappa=prob["kappa"],
                                    f=prob["f"], x_data=prob["x_data"], y=prob["y"],
                                    w_pde=prob["w_pde"], w_data=prob["w_data"])
            out = gpu.forward(D(prob["theta"]), D(prob["x_pde"]), 2)
            ref = cpu.forward(prob["theta"], prob["x_pde"], 2)
            cases[name] = dict(loss=abs(v - vc) / abs(vc), grad=rel(g.copy_to_host(), gc),
                               u=rel(out[0].copy_to_host(), ref[0]),
                               grad_u=rel(out[1].copy_to_host(), ref[1]),
                               lap_u=rel(out[2].copy_to_host(), ref[2]))
        emit(dict(kind="agreement", stub=False, dtype=dtype,
                  tol=AGREE_TOL if dtype == "float64" else F32_GRAD_TOL, cases=cases))


# ---------------------------------------------------------------------------------- scale

def _gather(dev_arr, index_tuple):
    """dev_arr[index_tuple] on the device (torch or CuPy), copied to the host; None without."""
    try:
        import torch
        t = torch.as_tensor(dev_arr, device="cuda")
        return t[tuple(torch.as_tensor(i, device="cuda") if isinstance(i, np.ndarray) else i
                       for i in index_tuple)].cpu().numpy()
    except ImportError:
        pass
    try:
        import cupy as cp
        return cp.asnumpy(cp.asarray(dev_arr)[index_tuple])
    except ImportError:
        return None


def _rows(dev_arr, idx):
    got = _gather(dev_arr, (idx,))
    return got if got is not None else dev_arr.copy_to_host()[idx]


def cmd_scale(args) -> None:
    if args.stub:
        emit(dict(kind="scale", stub=True, case="cache>2^31", dtype="float32", elements=2**31 + 512,
                  n=1398102, errors=dict(u=1e-7, grad_u=1e-7, lap_u=1e-6, cache=1e-7, loss=1e-6,
                                         grad=1e-5), tol=F32_GRAD_TOL, ok=True))
        for dtype in ("float64", "float32"):
            emit(dict(kind="scale", stub=True, case="width256-d3", dtype=dtype, n=65536,
                      errors=dict(u=1e-15, grad_u=1e-15, lap_u=1e-14, loss=1e-15, grad=1e-14),
                      tol=AGREE_TOL if dtype == "float64" else F32_GRAD_TOL, ok=True))
        return
    rng = np.random.default_rng(7)
    scale_big_cache(rng)
    scale_wide(rng)


def scale_big_cache(rng, min_elements: int = 2**31) -> None:
    """A cache above 2^31 elements: d = 1, 2m = 512 features, 3 streams: fourier_streams has
    3 * B * 512 > 2^31 elements (8.6 GB in float32); indices past 2^31 must be 64-bit."""
    import helmpinn
    D = helmpinn.DeviceArray.from_host
    shape = (1, 256, 8, 1)
    B = min_elements // (3 * 512) + 1024
    spec = helmpinn.ModelSpec(*shape)
    theta = rng.normal(0, 0.5, spec.num_params).astype(np.float32)
    x = rng.uniform(-1, 1, (B, 1)).astype(np.float32)
    t0 = time.perf_counter()
    ws, plan = cuda_workspace(spec, B, "float32")
    u, gu, lu = ws.forward(D(theta), D(x), 2)
    idx = np.unique(np.concatenate([rng.integers(0, B, 200), [0, B - 1]]))
    cpu = helmpinn.Workspace(spec, len(idx), dtype="float32")
    ur, gur, lur = cpu.forward(theta, x[idx], 2)
    errs = dict(u=rel(_rows(u, idx), ur), grad_u=rel(_rows(gu, idx), gur),
                lap_u=rel(_rows(lu, idx), lur))
    feats = _gather(ws.fourier_streams, (2, idx))        # the last stream: elements >= 2^31
    if feats is not None:
        errs["cache"] = rel(feats, np.asarray(cpu.fourier_streams)[2, :len(idx)])
    f = rng.normal(size=(B, 2)).astype(np.float32)
    g = D(np.zeros(spec.num_params, np.float32))
    v = ws.value_and_grad(D(theta), g, x_pde=D(x), kappa=30.0, f=D(f))
    gc = np.empty(spec.num_params, np.float32)
    cpu_all = helmpinn.Workspace(spec, 4096, dtype="float32")
    vc = cpu_all.value_and_grad(theta, gc, x_pde=x, kappa=30.0, f=f)
    errs["loss"] = abs(v - vc) / abs(vc)
    errs["grad"] = rel(g.copy_to_host(), gc)
    elements = 3 * B * 512
    emit(dict(kind="scale", stub=False, case="cache>2^31", dtype="float32", elements=elements,
              n=B, plan=plan, errors=errs, tol=F32_GRAD_TOL,
              ok=bool(elements > min_elements and all(e < F32_GRAD_TOL for e in errs.values())),
              seconds=time.perf_counter() - t0))


def scale_wide(rng, n: int = 65536, n_pde: int = 8192, n_data: int = 1024) -> None:
    """Width 256, d = 3, both dtypes: 65,536 points forward (sampled), 8192 + 1024 loss."""
    import helmpinn
    D = helmpinn.DeviceArray.from_host
    shape = (3, 128, 256, 3)
    spec = helmpinn.ModelSpec(*shape)
    for dtype in ("float64", "float32"):
        t0 = time.perf_counter()
        theta = (rng.normal(0, 1, spec.num_params) / 16).astype(dtype)
        x = rng.uniform(-1, 1, (n, 3)).astype(dtype)
        ws, plan = cuda_workspace(spec, 16384, dtype)
        out = ws.forward(D(theta), D(x), 2)
        idx = np.sort(rng.choice(n, 256, replace=False))
        cpu = helmpinn.Workspace(spec, 4096, dtype=dtype)
        ref = cpu.forward(theta, x[idx], 2)
        errs = {k: rel(_rows(o, idx), r) for k, o, r in zip(("u", "grad_u", "lap_u"), out, ref)}
        xp, fp = x[:n_pde], rng.normal(size=(n_pde, 2)).astype(dtype)
        xd, yd = x[n_pde:n_pde + n_data], rng.normal(size=(n_data, 2)).astype(dtype)
        g = D(np.zeros(spec.num_params, dtype))
        v = ws.value_and_grad(D(theta), g, x_pde=D(xp), kappa=40.0, f=D(fp), x_data=D(xd), y=D(yd))
        gc = np.empty(spec.num_params, dtype)
        vc = cpu.value_and_grad(theta, gc, x_pde=xp, kappa=40.0, f=fp, x_data=xd, y=yd)
        errs["loss"] = abs(v - vc) / abs(vc)
        errs["grad"] = rel(g.copy_to_host(), gc)
        tol = AGREE_TOL if dtype == "float64" else F32_GRAD_TOL
        emit(dict(kind="scale", stub=False, case="width256-d3", dtype=dtype, n=n, plan=plan,
                  errors=errs, tol=tol, ok=bool(all(e < tol for e in errs.values())),
                  seconds=time.perf_counter() - t0))


# ---------------------------------------------------------------------------------- bench

def fp32_peak() -> dict:
    """The FP32 peak (SMs x FP32 lanes per SM x 2 x max SM clock) and a measured SGEMM rate."""
    import torch
    prop = torch.cuda.get_device_properties(0)
    lanes = {(7, 0): 64, (7, 5): 64, (8, 0): 64}.get((prop.major, prop.minor), 128)
    out = dict(sms=prop.multi_processor_count, lanes=lanes, name=prop.name)
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=clocks.max.sm",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=30)
        mhz = float(r.stdout.split()[0])
        out["max_sm_mhz"] = mhz
        out["peak_tflops"] = prop.multi_processor_count * lanes * 2 * mhz * 1e6 / 1e12
    except (OSError, ValueError, IndexError, subprocess.TimeoutExpired):
        out["peak_tflops"] = None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    n = 8192
    a, b = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    ts = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) / 1e3)
    out["sgemm_tflops"] = 2 * n**3 / float(np.median(ts)) / 1e12
    return out


def helmpinn_step(cfg, dtype="float32"):
    import helmpinn
    D = helmpinn.DeviceArray.from_host
    prob = make_problem(cfg, dtype=np.dtype(dtype))
    spec = helmpinn.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L)
    ws, plan = cuda_workspace(spec, max(cfg.n_pde, cfg.n_data), dtype)
    th, g = D(prob["theta"]), D(np.zeros_like(prob["theta"]))
    kw = _loss_inputs(prob, D)
    return (lambda: ws.value_and_grad(th, g, **kw)), ws, plan


def cmd_bench(args) -> None:
    names = args.configs.split()
    if args.stub:
        emit(dict(kind="peak", stub=True, name="STUB", sms=132, lanes=128, max_sm_mhz=1980.0,
                  peak_tflops=66.9, sgemm_tflops=50.0))
        for i, name in enumerate(names):
            cfg = config(name)
            gf = flops_per_step(cfg) / 1e9
            emit(dict(kind="bench", stub=True, impl="helmpinn", config=name, n_pde=cfg.n_pde,
                      gflop=gf, median_ms=gf / 30.0, tile="auto", plan="STUB"))
        for tile in ["auto"] + args.tiles.split():
            emit(dict(kind="tile", stub=True, config=args.sweep, tile=tile, median_ms=1.0,
                      plan="STUB"))
        return
    try:
        emit(dict(kind="peak", stub=False, **fp32_peak()))
    except Exception as e:  # noqa: BLE001 - report and go on
        emit(dict(kind="peak", stub=False, error=f"{type(e).__name__}: {str(e)[:200]}"))
    failed = False
    for name in names:
        cfg = config(name)
        rec = dict(kind="bench", stub=False, impl="helmpinn", config=name, n_pde=cfg.n_pde,
                   n_data=cfg.n_data, gflop=flops_per_step(cfg) / 1e9, tile="auto")
        try:
            t0 = time.perf_counter()
            step, ws, plan = helmpinn_step(cfg)
            rec["plan"] = plan
            rec["workspace_mb"] = ws.memory_bytes / 2**20
            rec["loss"] = step()
            rec["setup_s"] = time.perf_counter() - t0
            rec.update(time_steps(step, lambda r: None, steps=args.steps, warmup=3, min_time=0.3))
            del ws, step
        except Exception as e:  # noqa: BLE001 - report and go on (e.g. out of memory)
            rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        emit(rec)
        failed = failed or "error" in rec
    cfg = config(args.sweep)
    for tile in ["auto"] + args.tiles.split():
        os.environ.pop("HELMPINN_CUDA_TILE", None)
        if tile != "auto":
            os.environ["HELMPINN_CUDA_TILE"] = tile
        rec = dict(kind="tile", stub=False, config=args.sweep, tile=tile,
                   gflop=flops_per_step(cfg) / 1e9)
        try:
            step, ws, plan = helmpinn_step(cfg)
            rec["plan"] = plan
            rec.update(time_steps(step, lambda r: None, steps=args.steps, warmup=3, min_time=0.2))
            del ws, step
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        emit(rec)
    os.environ.pop("HELMPINN_CUDA_TILE", None)
    if failed:
        sys.exit("bench: helmpinn failed on some config (see the records)")


# ---------------------------------------------------------------------------------- peers

def peer_step(impl, cfg):
    import peers
    prob = make_problem(cfg, dtype=np.float32)
    if impl.startswith("torch"):
        import torch
        orig = peers._torch_setup

        def cuda_setup(cfg_, prob_, dtype_name):
            torch_, dt, params, data = orig(cfg_, prob_, dtype_name)
            params = [p.detach().to("cuda").requires_grad_(True) for p in params]
            return torch_, dt, params, {k: v.to("cuda") for k, v in data.items()}

        peers._torch_setup = cuda_setup
        try:
            im = peers.build(impl, cfg, prob, "float32")
        finally:
            peers._torch_setup = orig
        return im.step, (lambda r: torch.cuda.synchronize()), (lambda r: float(r[0]))
    import jax
    if jax.devices()[0].platform != "gpu":
        raise RuntimeError(f"JAX runs on {jax.devices()[0].platform}, not the GPU")
    im = peers.build(impl, cfg, prob, "float32")
    return im.step, im.block, (lambda r: float(r[0]))


def cmd_peer(args) -> None:
    failed = []
    for name in args.configs.split():
        cfg = config(name)
        rec = dict(kind="bench", stub=args.stub, impl=args.impl, config=name, n_pde=cfg.n_pde,
                   gflop=flops_per_step(cfg) / 1e9)
        if args.stub:
            rec.update(median_ms={"torch-eager": 10.0, "jax-fwdlap": 5.0,
                                  "torch-compile": 4.0}.get(args.impl, 7.0) * rec["gflop"] / 4,
                       setup_s=0.0)
            emit(rec)
            continue
        try:
            t0 = time.perf_counter()
            step, block, loss = peer_step(args.impl, cfg)
            r = step()
            block(r)
            rec["loss"] = loss(r)
            rec["setup_s"] = time.perf_counter() - t0      # includes compilation / JIT
            rec.update(time_steps(step, block, steps=args.steps, warmup=3, min_time=0.3))
        except Exception as e:  # noqa: BLE001 - report and go on (e.g. out of memory)
            rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
            failed.append(name)
        emit(rec)
    if failed:
        sys.exit(f"{args.impl}: failed on {' '.join(failed)} (see the records)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("env", "sanitize-case", "agreement", "scale", "bench", "peer", "stub-sanitizer"):
        p = sub.add_parser(name)
        p.add_argument("--stub", action="store_true")
        if name == "bench":
            p.add_argument("--configs", default="a b c b65k b1m")
            p.add_argument("--sweep", default="b65k")
            p.add_argument("--tiles", default="4 8 16 32")
            p.add_argument("--steps", type=int, default=20)
        if name == "peer":
            p.add_argument("--impl", required=True)
            p.add_argument("--configs", default="b65k b1m b a c")
            p.add_argument("--steps", type=int, default=10)
        if name == "stub-sanitizer":
            p.add_argument("--tool", required=True)
    args = ap.parse_args()
    {"env": cmd_env, "sanitize-case": cmd_sanitize_case, "agreement": cmd_agreement,
     "scale": cmd_scale, "bench": cmd_bench, "peer": cmd_peer,
     "stub-sanitizer": cmd_stub_sanitizer}[args.cmd](args)


if __name__ == "__main__":
    main()
