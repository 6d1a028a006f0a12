"""helmpinn's value_and_grad step on a GPU: the benchmark configs (common.py: a, b, c, and b on
65,536 and 1,048,576 points), a tile-size sweep on b65k, and optionally PyTorch / JAX on the
same problems (peers.py), float32.

    python benchmarks/gpu_bench.py [--configs "a b c b65k b1m"] [--peers torch-eager,jax-fwdlap]
                                   [--json out.json] [--dry-run]

One JSON record per measurement to stdout (and all of them to --json), then a Markdown table.
A CUDA build of helmpinn and a visible GPU are required: without them it stops with the reason
(exit 2) and measures nothing; --dry-run prints the configs and their flop counts and measures
nothing. The correctness of the GPU backend is the tests' business (tests/test_cuda.py,
test_backend_cases.py, test_device.py with HELMPINN_REQUIRE_GPU=1), not this script's.
Not yet run on a GPU: no GPU was available to the sessions that wrote it.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")   # JAX must not take the GPU
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from common import CONFIGS, flops_per_step, make_problem, time_steps, with_points  # noqa: E402

SIZES = {"a": ("a", None), "b": ("b", None), "c": ("c", None), "b65k": ("b", 65536),
         "b1m": ("b", 1048576)}


def config(name: str):
    base, n_pde = SIZES[name]
    cfg = CONFIGS[base]
    return with_points(cfg, n_pde, cfg.n_data, name) if n_pde else cfg


def helmpinn_step(cfg):
    import helmpinn
    D = helmpinn.DeviceArray.from_host
    prob = make_problem(cfg, dtype=np.float32)
    ws = helmpinn.Workspace(helmpinn.ModelSpec(*cfg.spec), max(cfg.n_pde, cfg.n_data),
                            dtype="float32", device="cuda")
    th, g = D(prob["theta"]), D(np.zeros_like(prob["theta"]))
    kw = dict(x_pde=D(prob["x_pde"]), kappa=prob["kappa"], f=D(prob["f"]),
              x_data=D(prob["x_data"]), y=D(prob["y"]), w_pde=prob["w_pde"], w_data=prob["w_data"])
    return lambda: ws.value_and_grad(th, g, **kw)          # returns the loss: synchronises


def peer_step(impl: str, cfg):
    import peers
    prob = make_problem(cfg, dtype=np.float32)
    if impl.startswith("torch"):
        import torch
        orig = peers._torch_setup

        def on_gpu(cfg_, prob_, dtype_name):                # the CPU benchmark's setup, moved
            torch_, dt, params, data = orig(cfg_, prob_, dtype_name)
            params = [p.detach().to("cuda").requires_grad_(True) for p in params]
            return torch_, dt, params, {k: v.to("cuda") for k, v in data.items()}

        peers._torch_setup = on_gpu
        try:
            im = peers.build(impl, cfg, prob, "float32")
        finally:
            peers._torch_setup = orig
        return lambda: (im.step(), torch.cuda.synchronize())
    import jax
    if jax.devices()[0].platform != "gpu":
        raise RuntimeError(f"JAX runs on {jax.devices()[0].platform}, not a GPU")
    im = peers.build(impl, cfg, prob, "float32")
    return lambda: im.block(im.step())


def measure(rec: dict, make, steps: int) -> dict:
    try:
        step = make()
        rec.update(time_steps(step, lambda r: None, steps=steps, warmup=3, min_time=0.3))
        rec["gflops"] = rec["gflop"] / (rec["median_ms"] / 1e3)
    except Exception as e:  # noqa: BLE001 - reported in the record; the run goes on
        rec["error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--configs", default="a b c b65k b1m")
    ap.add_argument("--tiles", default="8 16 32 64", help="HELMPINN_CUDA_TILE values on b65k")
    ap.add_argument("--peers", default="", help="comma list: torch-eager, torch-compile, jax-fwdlap")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json", help="also write the records to this file")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()
    names = args.configs.split()
    unknown = [n for n in names if n not in SIZES]
    if unknown:
        ap.error(f"--configs: unknown {unknown}; expected some of {list(SIZES)}")
    if args.dry_run:
        for n in names:
            cfg = config(n)
            print(f"DRY RUN, not measured: {n}: {cfg.spec}, {cfg.n_pde} + {cfg.n_data} points, "
                  f"{flops_per_step(cfg) / 1e9:.2f} GFLOP a step")
        return 0
    import helmpinn
    if not helmpinn.has_cuda() or helmpinn.cuda_device_count() == 0:
        print(f"gpu_bench: no usable GPU ({helmpinn.cuda_device_error()}): nothing measured",
              file=sys.stderr)
        return 2
    records = []

    def emit(rec):
        records.append(rec)
        print(json.dumps(rec), flush=True)

    for impl in ["helmpinn", *filter(None, args.peers.split(","))]:
        for n in names:
            cfg = config(n)
            make = (lambda c=cfg: helmpinn_step(c)) if impl == "helmpinn" else \
                   (lambda c=cfg, i=impl: peer_step(i, c))
            emit(measure(dict(impl=impl, config=n, tile="auto", n_pde=cfg.n_pde,
                              gflop=flops_per_step(cfg) / 1e9), make, args.steps))
    cfg = config("b65k")
    for tile in args.tiles.split():
        os.environ["HELMPINN_CUDA_TILE"] = tile
        emit(measure(dict(impl="helmpinn", config="b65k", tile=tile, n_pde=cfg.n_pde,
                          gflop=flops_per_step(cfg) / 1e9), lambda: helmpinn_step(cfg), args.steps))
    os.environ.pop("HELMPINN_CUDA_TILE", None)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(dict(gpu=helmpinn.cuda_device_count(), records=records), fh, indent=1)
    print("\n| impl | config | tile | median ms | GFLOP/s |\n|---|---|---|---|---|")
    for r in records:
        ms = f"{r['median_ms']:.3f}" if "median_ms" in r else r.get("error", "?")
        gf = f"{r['gflops']:.0f}" if "gflops" in r else "-"
        print(f"| {r['impl']} | {r['config']} | {r['tile']} | {ms} | {gf} |")
    return 1 if any("error" in r for r in records if r["impl"] == "helmpinn") else 0


if __name__ == "__main__":
    sys.exit(main())
