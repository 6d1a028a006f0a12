"""The portable build's kernel sets against a single -march=native build, in one run.

`pip install .` compiles the CPU kernels three times (baseline x86-64, AVX2, AVX-512) and picks
one at run time (README, Build options). This times value_and_grad with each set this machine
has (forced with HELMPINN_CPU_ISA) and with a build configured with -DHELMPINN_NATIVE=ON, in
rounds that take every variant in turn, each in its own process (one module per process), and
reports the medians and the ratio to the native build.

    cmake -S . -B /tmp/build-native -DHELMPINN_PYTHON=ON -DHELMPINN_NATIVE=ON \\
          -DHELMPINN_ENABLE_CUDA=OFF -Dpybind11_DIR=$(python -m pybind11 --cmakedir)
    cmake --build /tmp/build-native --target _core
    python benchmarks/bench_dispatch.py --native /tmp/build-native [--configs a,b] [--rounds 3]

--native names the folder holding the native build's _core module (searched below it); the
portable one is the helmpinn that Python imports.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))

# One variant's timing, run in a fresh process: prints {"isa": ..., "ms": {config: median ms}}.
_CHILD = r"""
import json, os, sys
sys.path.insert(0, {here!r})
import numpy as np
import helmpinn as hp
import common
out = {{"isa": hp.cpu_isa(), "ms": {{}}}}
for name in {configs!r}:
    cfg = common.CONFIGS[name]
    prob = common.make_problem(cfg, dtype=np.float32)
    ws = hp.Workspace(hp.ModelSpec(*cfg.spec), dtype="float32")
    theta, grad = prob["theta"], np.zeros_like(prob["theta"])
    kw = dict(x_pde=prob["x_pde"], kappa=float(prob["kappa"]), f=prob["f"], x_data=prob["x_data"],
              y=prob["y"], w_pde=prob["w_pde"], w_data=prob["w_data"])
    out["ms"][name] = common.time_steps(lambda: ws.value_and_grad(theta, grad, **kw),
                                        lambda r: None, {steps}, warmup=2,
                                        min_time={min_time})["median_ms"]
print(json.dumps(out))
"""


def native_package(folder: str, into: str) -> str:
    """A copy of the imported helmpinn package with the native build's _core module in it."""
    import helmpinn

    mods = glob.glob(os.path.join(folder, "**", "_core*.so"), recursive=True)
    if not mods:
        raise SystemExit(f"--native {folder}: no _core*.so below it (build target _core there)")
    pkg = os.path.join(into, "helmpinn")
    shutil.copytree(os.path.dirname(helmpinn.__file__), pkg,
                    ignore=shutil.ignore_patterns("_core*.so", "__pycache__"))
    shutil.copy(mods[0], pkg)
    return into


def run_variant(path: str | None, isa: str | None, configs: list[str], steps: int,
                min_time: float, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    env.pop("HELMPINN_CPU_ISA", None)
    if isa:
        env["HELMPINN_CPU_ISA"] = isa
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    code = _CHILD.format(here=HERE, configs=configs, steps=steps, min_time=min_time)
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=False)
    if res.returncode:
        raise SystemExit(f"variant {isa or 'native'}: {res.stderr.strip()[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--native", required=True, help="folder of a -DHELMPINN_NATIVE=ON build")
    ap.add_argument("--configs", default="a,b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--min-time", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    import helmpinn

    configs = args.configs.split(",")
    sets = list(helmpinn.cpu_kernel_sets())
    with tempfile.TemporaryDirectory() as tmp:
        native = native_package(args.native, tmp)
        variants = [("native", native, None)] + [(s, None, s) for s in sets]
        times: dict[str, dict[str, list[float]]] = {v[0]: {c: [] for c in configs} for v in variants}
        chosen = {}
        for r in range(args.rounds):
            for name, path, isa in variants:
                out = run_variant(path, isa, configs, args.steps, args.min_time, args.threads)
                chosen[name] = out["isa"]
                for c in configs:
                    times[name][c].append(out["ms"][c])
            print(f"round {r + 1}: " + "; ".join(
                f"{n} " + ", ".join(f"{c} {times[n][c][-1]:.2f} ms" for c in configs)
                for n, _, _ in variants), flush=True)
    print(f"\nhelmpinn {helmpinn.__version__}, value_and_grad float32, {args.threads} threads, "
          f"medians of {args.rounds} rounds (each variant in its own process, in turn)\n")
    print("| kernels | " + " | ".join(f"config {c} (ms) | / native" for c in configs) + " |")
    print("|---|" + "---|---|" * len(configs))
    med = {n: {c: float(np.median(t[c])) for c in configs} for n, t in times.items()}
    for name, _, _ in variants:
        label = "native build" if name == "native" else f"portable, {name}"
        print(f"| {label} | " + " | ".join(
            f"{med[name][c]:.2f} | {med[name][c] / med['native'][c]:.3f}" for c in configs) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"times": times, "median": med, "isa": chosen}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
