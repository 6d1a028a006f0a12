#!/usr/bin/env bash
# helmpinn on a GPU machine: build with the CUDA backend, test, check the kernels with
# compute-sanitizer, and time one training step (loss + gradient of every parameter, float32)
# beside PyTorch (eager nested autograd; forward-Laplacian under torch.compile) and JAX (jit of
# the forward-Laplacian) on the same GPU and the same work: configs a, b, c of issue 4, and
# config b with 65,536 and 1,048,576 PDE points. Prints a Markdown table for the README.
#
#     bash benchmarks/gpu_check.sh                 # all stages: build test sanitize bench
#     bash benchmarks/gpu_check.sh build test      # or any subset, in this order
#
# Stages share $BUILD (default build/gpu-check), so they can run in separate commands on a
# machine that stays up. Everything is offline: the machine's python3 must already have
# numpy, pybind11, pytest (and torch / jax for the peers, which are skipped when missing).
# Knobs (environment):
#     PYTHON=python3  CUDA_ARCH=90  BUILD=build/gpu-check  OUT=$BUILD/out (or $OUT when set)
#     CONFIGS="a b c b65k b1m"   PEERS="torch-eager torch-compile jax-fwdlap"
#     PEER_CONFIGS="a b c b65k"  (peers skip b1m unless listed)   STEPS=30
#     HELMPINN_CUDA_TILE=P       (points per tile; default: the backend's choice)
#     HELMPINN_CUDA_SCRATCH=global  (activation buffers in global memory instead of shared)
# Budget on an H200 (16 cores): build ~1-2 min, tests ~2 min, sanitize ~1 min, bench ~5 min.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PY=${PYTHON:-python3}
BUILD=${BUILD:-$ROOT/build/gpu-check}
OUTDIR=${OUT:-$BUILD/out}
ARCH=${CUDA_ARCH:-90}
STAGES=${*:-build test sanitize bench}
PKG=$BUILD/pkg
mkdir -p "$BUILD" "$OUTDIR"

has_stage() { [[ " $STAGES " == *" $1 "* ]]; }
say() { printf '\n==== %s ====\n' "$*"; }

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || true
command -v nvcc >/dev/null && nvcc --version | tail -2 || echo "nvcc not on PATH"
"$PY" -c 'import sys; print("python", sys.version.split()[0])'

if has_stage build; then
  say "build (CUDA architectures $ARCH)"
  start=$(date +%s)
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DHELMPINN_PYTHON=ON -DHELMPINN_ENABLE_CUDA=ON -DHELMPINN_CUDA_VERBOSE=ON \
    -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DPython_EXECUTABLE="$(command -v "$PY")" \
    -Dpybind11_DIR="$("$PY" -c 'import pybind11; print(pybind11.get_cmake_dir())')" \
    > "$OUTDIR/cmake_configure.log"
  cmake --build "$BUILD" -j "$(nproc)" > "$OUTDIR/cmake_build.log" 2>&1 || { tail -50 "$OUTDIR/cmake_build.log"; exit 1; }
  echo "built in $(( $(date +%s) - start )) s; ptxas (registers / spills) in $OUTDIR/cmake_build.log:"
  grep -E "spill|registers" "$OUTDIR/cmake_build.log" | sort | uniq -c | sort -rn | head -8 || true
  rm -rf "$PKG" && mkdir -p "$PKG"
  cp -r "$ROOT/python/helmpinn" "$PKG/"
  rm -f "$PKG"/helmpinn/_core*.so
  cp "$BUILD"/_core*.so "$PKG/helmpinn/"
fi

export PYTHONPATH="$PKG${PYTHONPATH:+:$PYTHONPATH}"
"$PY" - <<'EOF'
import helmpinn
print("helmpinn", helmpinn.__version__, "from", helmpinn.__file__)
print("has_cuda", helmpinn.has_cuda(), "cuda_device_count", helmpinn.cuda_device_count())
assert helmpinn.has_cuda() and helmpinn.cuda_device_count() > 0, "no CUDA build or no GPU"
EOF

if has_stage test; then
  say "tests (HELMPINN_REQUIRE_GPU=1: GPU tests fail instead of skipping)"
  HELMPINN_REQUIRE_GPU=1 HELMPINN_EXPECT_CUDA=1 "$PY" -m pytest "$ROOT/tests/test_cuda.py" -q -ra \
    -p no:cacheprovider 2>&1 | tee "$OUTDIR/pytest_cuda.log" | tail -25
  HELMPINN_REQUIRE_GPU=1 "$PY" -m pytest "$ROOT/tests" -q -p no:cacheprovider -x \
    --ignore="$ROOT/tests/test_cuda.py" 2>&1 | tee "$OUTDIR/pytest_all.log" | tail -5
fi

if has_stage sanitize; then
  say "compute-sanitizer: memcheck and racecheck on small problems (every kernel, both dtypes)"
  SAN=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
  if [[ -z "$SAN" ]]; then
    echo "compute-sanitizer not found: skipped"
  else
    cat > "$BUILD/sanitize_case.py" <<'EOF'
import sys
import numpy as np
import helmpinn
D = helmpinn._core.DeviceArray.from_host
rng = np.random.default_rng(0)
for dtype in ("float32", "float64"):
    for shape in ((1, 4, 8, 2), (2, 5, 13, 2), (3, 3, 24, 2), (2, 300, 16, 1)):   # last: global scratch
        d = shape[0]
        spec = helmpinn.ModelSpec(*shape)
        ws = helmpinn.Workspace(spec, 40, dtype=dtype, device="cuda")
        th = D(rng.normal(0, 0.3, spec.num_params).astype(dtype))
        g = D(np.zeros(spec.num_params, dtype))
        a = lambda *s: D(rng.uniform(-1, 1, s).astype(dtype))
        nrm = rng.normal(size=(33, d)); nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
        v = ws.value_and_grad(th, g, x_pde=a(45, d), kappa=a(45), f=a(45, 2), x_data=a(21, d),
                              y=a(21, 2), x_bc=a(33, d), n_bc=D(nrm.astype(dtype)),
                              alpha_bc=a(33, 2), g_bc=a(33, 2), check_finite=True)
        ws.forward(th, a(50, d), 2)
        print(dtype, shape, "loss", v, flush=True)
EOF
    for tool in memcheck racecheck; do
      echo "-- $tool"
      "$SAN" --tool "$tool" --error-exitcode 3 "$PY" "$BUILD/sanitize_case.py" \
        > "$OUTDIR/sanitize_$tool.log" 2>&1 && echo "$tool: clean" \
        || { echo "$tool: FAILED (see $OUTDIR/sanitize_$tool.log)"; tail -40 "$OUTDIR/sanitize_$tool.log"; }
    done
  fi
fi

if has_stage bench; then
  say "benchmark (float32; median ms per step)"
  BENCH=$BUILD/gpu_bench.py
  cat > "$BENCH" <<'EOF'
"""One implementation on the GPU per process; results as JSON lines. Used by gpu_check.sh."""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX must not take the GPU
import numpy as np

sys.path.insert(0, os.environ["HELMPINN_BENCH_DIR"])
from common import CHECK_N_DATA, CHECK_N_PDE, CONFIGS, flops_per_step, make_problem, time_steps, with_points  # noqa: E402

SIZES = {"a": ("a", None), "b": ("b", None), "c": ("c", None), "b65k": ("b", 65536), "b1m": ("b", 1048576)}


def config(name):
    base, n_pde = SIZES[name]
    cfg = CONFIGS[base]
    return with_points(cfg, n_pde, cfg.n_data, name) if n_pde else cfg


def sgemm_rate():
    """The card's float32 matrix-product rate (no TF32), TFLOP/s, from a large SGEMM."""
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    n = 8192
    a = torch.randn(n, n, device="cuda")
    b = torch.randn(n, n, device="cuda")
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = []
    for _ in range(10):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        a @ b
        e.record()
        torch.cuda.synchronize()
        t.append(s.elapsed_time(e) / 1e3)
    return 2 * n**3 / float(np.median(t)) / 1e12


def helmpinn_impl(cfg, dtype="float32"):
    import helmpinn
    D = helmpinn._core.DeviceArray.from_host
    prob = make_problem(cfg, dtype=np.dtype(dtype))
    spec = helmpinn.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L)
    ws = helmpinn.Workspace(spec, max(cfg.n_pde, cfg.n_data), dtype=dtype, device="cuda")
    th, g = D(prob["theta"]), D(np.zeros_like(prob["theta"]))
    kw = dict(x_pde=D(prob["x_pde"]), kappa=prob["kappa"], f=D(prob["f"]), x_data=D(prob["x_data"]),
              y=D(prob["y"]), w_pde=prob["w_pde"], w_data=prob["w_data"])
    return (lambda: ws.value_and_grad(th, g, **kw)), (lambda r: None), ws, g


def agreement():
    """helmpinn GPU vs CPU in float64 on the check sizes of every config."""
    import helmpinn
    out = {}
    for name in ("a", "b", "c"):
        cfg = with_points(CONFIGS[name], CHECK_N_PDE, CHECK_N_DATA)
        step, _, _, g = helmpinn_impl(cfg, "float64")
        v = step()
        prob = make_problem(cfg, dtype=np.float64)
        cpu = helmpinn.Workspace(helmpinn.ModelSpec(cfg.d, cfg.m, cfg.H, cfg.L), 4096, dtype="float64")
        gc = np.empty_like(prob["theta"])
        vc = cpu.value_and_grad(prob["theta"], gc, x_pde=prob["x_pde"], kappa=prob["kappa"], f=prob["f"],
                                x_data=prob["x_data"], y=prob["y"], w_pde=prob["w_pde"], w_data=prob["w_data"])
        gg = g.copy_to_host()
        out[name] = dict(loss_rel=abs(v - vc) / abs(vc),
                         grad_rel=float(np.linalg.norm(gg - gc) / np.linalg.norm(gc)))
    return out


def peer_impl(impl, cfg):
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
        im = peers.build(impl, cfg, prob, "float32")
        return im.step, (lambda r: torch.cuda.synchronize()), (lambda r: float(r[0]))
    import jax
    assert jax.devices()[0].platform == "gpu", f"JAX runs on {jax.devices()[0].platform}, not the GPU"
    im = peers.build(impl, cfg, prob, "float32")
    return im.step, im.block, (lambda r: float(r[0]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--impl", required=True)
    ap.add_argument("--configs", default="a b c b65k b1m")
    ap.add_argument("--steps", type=int, default=30)
    args = ap.parse_args()
    if args.impl == "sgemm":
        print(json.dumps(dict(impl="sgemm", tflops=sgemm_rate())), flush=True)
        return
    if args.impl == "agreement":
        print(json.dumps(dict(impl="agreement", **agreement())), flush=True)
        return
    for name in args.configs.split():
        cfg = config(name)
        rec = dict(impl=args.impl, config=name, n_pde=cfg.n_pde, n_data=cfg.n_data,
                   gflop=flops_per_step(cfg) / 1e9)
        try:
            t0 = time.perf_counter()
            if args.impl == "helmpinn":
                step, block, ws, _ = helmpinn_impl(cfg)
                rec["workspace_mb"] = ws.memory_bytes / 2**20
                loss = lambda r: r  # noqa: E731
            else:
                step, block, loss = peer_impl(args.impl, cfg)
            r = step()
            block(r)
            rec["loss"] = loss(r)
            rec["setup_s"] = time.perf_counter() - t0          # includes compilation / JIT
            rec.update(time_steps(step, block, steps=args.steps, warmup=5, min_time=0.5))
        except Exception as e:  # noqa: BLE001 - report and go on (e.g. out of memory)
            rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
EOF
  RES=$OUTDIR/gpu_bench.jsonl
  : > "$RES"
  export HELMPINN_BENCH_DIR="$ROOT/benchmarks"
  CONFIGS=${CONFIGS:-a b c b65k b1m}
  PEER_CONFIGS=${PEER_CONFIGS:-a b c b65k}
  STEPS=${STEPS:-30}
  "$PY" "$BENCH" --impl sgemm >> "$RES" 2>>"$OUTDIR/bench_stderr.log" || echo "sgemm rate: torch missing"
  "$PY" "$BENCH" --impl agreement >> "$RES" 2>>"$OUTDIR/bench_stderr.log" || echo "agreement check failed"
  "$PY" "$BENCH" --impl helmpinn --configs "$CONFIGS" --steps "$STEPS" >> "$RES" 2>>"$OUTDIR/bench_stderr.log"
  for impl in ${PEERS:-torch-eager torch-compile jax-fwdlap}; do
    "$PY" "$BENCH" --impl "$impl" --configs "$PEER_CONFIGS" --steps "$STEPS" >> "$RES" \
      2>>"$OUTDIR/bench_stderr.log" || echo "$impl: failed (see $OUTDIR/bench_stderr.log)"
  done
  "$PY" - "$RES" <<'EOF' | tee "$OUTDIR/gpu_table.md"
import datetime, json, subprocess, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rate = next((r["tflops"] for r in rows if r["impl"] == "sgemm"), None)
agree = next((r for r in rows if r["impl"] == "agreement"), None)
try:
    gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
except OSError:
    gpu = "unknown GPU"
print(f"GPU: {gpu}; date {datetime.date.today()}; float32 SGEMM (no TF32): "
      + (f"{rate:.1f} TFLOP/s" if rate else "not measured"))
if agree:
    print("float64 agreement, helmpinn GPU vs CPU (loss / gradient rel. error): "
          + ", ".join(f"{k}: {v['loss_rel']:.1e} / {v['grad_rel']:.1e}" for k, v in agree.items() if k != "impl"))
peers = sorted({r["impl"] for r in rows if "config" in r and r["impl"] != "helmpinn"})
print()
print("| config | PDE pts | GFLOP | helmpinn ms | TFLOP/s | % SGEMM | " + " | ".join(f"{p} ms" for p in peers) + " | speed-up vs best peer |")
print("|---" * (7 + len(peers)) + "|")
for h in (r for r in rows if r["impl"] == "helmpinn"):
    c = h["config"]
    if "error" in h:
        print(f"| {c} | {h['n_pde']} | {h.get('gflop', float('nan')):.1f} | error: {h['error']} |"); continue
    ms = h["median_ms"]; tf = h["gflop"] / ms
    cells, best = [], None
    for p in peers:
        r = next((r for r in rows if r["impl"] == p and r.get("config") == c), None)
        if r is None: cells.append("-")
        elif "error" in r: cells.append("error")
        else:
            cells.append(f"{r['median_ms']:.2f}")
            best = r["median_ms"] if best is None else min(best, r["median_ms"])
    pct = f"{100 * tf / rate:.0f}%" if rate else "-"
    sp = f"{best / ms:.1f}x" if best else "-"
    print(f"| {c} | {h['n_pde']} | {h['gflop']:.1f} | {ms:.3f} | {tf:.1f} | {pct} | " + " | ".join(cells) + f" | {sp} |")
b = next((r for r in rows if r["impl"] == "helmpinn" and r.get("config") == "b65k" and "median_ms" in r), None)
if b:
    bp = [r["median_ms"] for r in rows if r.get("config") == "b65k" and r["impl"] != "helmpinn" and "median_ms" in r]
    if bp:
        s = min(bp) / b["median_ms"]
        print(f"\nissue 5 target (>= 5x the best peer on b65k): {s:.1f}x -> {'met' if s >= 5 else 'NOT met'}")
print("\nsetup (compile/JIT) seconds:", ", ".join(f"{r['impl']}/{r['config']}: {r.get('setup_s', float('nan')):.1f}" for r in rows if "config" in r))
EOF
fi
say "done; outputs in $OUTDIR"
