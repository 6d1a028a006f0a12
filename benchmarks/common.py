"""Shared pieces of the CPU benchmark: configs, the flat parameter layout, the problem data,
the flop count and the timing loop.

Every implementation (helmpinn and each peer) builds its inputs from `make_problem`, which is
deterministic (seeded NumPy), so separate worker processes see bit-identical weights and points.
"""
from __future__ import annotations

import gc
import math
import os
import sys
import time
from dataclasses import asdict, dataclass

import numpy as np

# The float64 reference and the flat layout are the tests' (tests/reference.py), imported as a
# plain module from the source tree, as pytest does: one reference for tests and benchmarks.
_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
if _TESTS not in sys.path:
    sys.path.append(_TESTS)
import reference  # noqa: E402


@dataclass(frozen=True)
class Config:
    name: str
    d: int          # input dimension
    m: int          # Fourier features (ff_dim)
    H: int          # hidden width
    L: int          # hidden layers
    n_pde: int      # collocation points
    n_data: int     # data points

    def asdict(self) -> dict:
        return asdict(self)

    @property
    def spec(self) -> tuple[int, int, int, int]:
        """(in_dim, ff_dim, hidden_dim, num_hidden_layers), as helmpinn.ModelSpec takes them."""
        return (self.d, self.m, self.H, self.L)


CONFIGS: dict[str, Config] = {
    "a": Config("a", d=1, m=16, H=64, L=3, n_pde=4096, n_data=512),
    "b": Config("b", d=2, m=32, H=128, L=4, n_pde=8192, n_data=1024),
    "c": Config("c", d=3, m=32, H=64, L=4, n_pde=8192, n_data=1024),
}

# Points for the float64 agreement check: the configs' networks on fewer points.
CHECK_N_PDE = 256
CHECK_N_DATA = 64

KAPPA = (2.0 * math.pi) ** 2   # k = 2 pi
W_PDE = 1.0
W_DATA = 1.0
SEED = 1234


def with_points(cfg: Config, n_pde: int, n_data: int, name: str | None = None) -> Config:
    return Config(name or cfg.name, cfg.d, cfg.m, cfg.H, cfg.L, n_pde, n_data)


def layout(cfg: Config) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every tensor in flat-buffer order (MATH.md): B, W0, b0, ..., W_L, b_L;
    the tests' reference layout (tests/reference.py), the one layout helper."""
    return [(name, shape) for name, shape, _ in reference.layout(cfg.spec)]


def num_params(cfg: Config) -> int:
    return reference.num_params(cfg.spec)


def split(cfg: Config, theta: np.ndarray) -> list[np.ndarray]:
    """Views of the flat vector in layout order."""
    assert theta.size == num_params(cfg)
    return list(reference.unpack(theta, cfg.spec).values())


def reference_loss_and_grad(cfg: Config, prob: dict) -> tuple[float, np.ndarray]:
    """The float64 loss and gradient of `prob` (make_problem) by the tests' reference."""
    return reference.loss_and_grad(prob["theta"], cfg.spec, x_pde=prob["x_pde"],
                                   kappa=float(prob["kappa"]), f=prob["f"], x_data=prob["x_data"],
                                   y=prob["y"], w_pde=prob["w_pde"], w_data=prob["w_data"])


def flops_per_point(cfg: Config, streams: int) -> float:
    """MATH.md: 6 * streams * (2 m H + (L-1) H^2 + 2 H) per point for one step."""
    return 6.0 * streams * (2 * cfg.m * cfg.H + (cfg.L - 1) * cfg.H ** 2 + 2 * cfg.H)


def flops_per_step(cfg: Config) -> float:
    return cfg.n_pde * flops_per_point(cfg, cfg.d + 2) + cfg.n_data * flops_per_point(cfg, 1)


def make_problem(cfg: Config, dtype=np.float64, seed: int = SEED) -> dict:
    """Weights (one flat vector), points and targets; identical for every implementation.

    Generated in float64 from a seed depending only on the shapes, then cast to `dtype`.
    """
    rng = np.random.default_rng([seed, cfg.d, cfg.m, cfg.H, cfg.L, cfg.n_pde, cfg.n_data])
    parts = []
    for name, shape in layout(cfg):
        if name == "B":
            parts.append(rng.normal(0.0, 1.0, size=shape))           # frequencies ~ N(0, 1)
        elif name.startswith("W"):
            fan_out, fan_in = shape
            std = math.sqrt(2.0 / (fan_in + fan_out))                 # Xavier normal
            parts.append(rng.normal(0.0, std, size=shape))
        else:
            parts.append(rng.normal(0.0, 0.1, size=shape))
    theta = np.concatenate([p.ravel() for p in parts])
    x_pde = rng.uniform(-1.0, 1.0, size=(cfg.n_pde, cfg.d))
    f = rng.normal(0.0, 1.0, size=(cfg.n_pde, 2))
    x_data = rng.uniform(-1.0, 1.0, size=(cfg.n_data, cfg.d))
    y = rng.normal(0.0, 1.0, size=(cfg.n_data, 2))
    c = lambda a: np.ascontiguousarray(a, dtype=dtype)  # noqa: E731
    return dict(theta=c(theta), x_pde=c(x_pde), f=c(f), x_data=c(x_data), y=c(y),
                kappa=KAPPA, w_pde=W_PDE, w_data=W_DATA)


def time_steps(step, block, steps: int, warmup: int = 3, min_time: float = 0.0) -> dict:
    """Run `step` `warmup` times untimed, then `steps` timed calls (each finished with `block`).

    Garbage collection is off in the timed loop (as timeit does), for every implementation.
    Also reports CPU utilisation (process CPU time / wall time) as a check on thread use.
    """
    for _ in range(warmup):
        block(step())
    gc.collect()
    gc.disable()
    try:
        times = []
        cpu0, wall0 = time.process_time(), time.perf_counter()
        while len(times) < steps or sum(times) < min_time:
            t0 = time.perf_counter()
            block(step())
            times.append(time.perf_counter() - t0)
        cpu1, wall1 = time.process_time(), time.perf_counter()
    finally:
        gc.enable()
    ts = np.array(times)
    return dict(median_ms=float(np.median(ts) * 1e3), min_ms=float(ts.min() * 1e3),
                mean_ms=float(ts.mean() * 1e3), steps=len(times),
                cpu_util=float((cpu1 - cpu0) / max(wall1 - wall0, 1e-12)))


# --------------------------------------------------------------------------------------------
# noise: how much CPU other processes took while we measured (the machine may be shared)


def _proc_stat_busy() -> float | None:
    """Busy CPU seconds of the whole machine so far (user+nice+system+irq+softirq), or None."""
    try:
        with open("/proc/stat") as fh:
            v = [int(x) for x in fh.readline().split()[1:8]]
        return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class NoiseMeter:
    """Fraction of the machine's CPUs used by processes other than this one over an interval:
    (machine busy time - this process's CPU time) / (wall time x CPUs). /proc/stat counts in
    jiffies (10 ms), so intervals should be a few tenths of a second or longer."""

    def __init__(self):
        self.ncpu = os.cpu_count() or 1

    def start(self):
        self.b0, self.c0, self.w0 = _proc_stat_busy(), time.process_time(), time.perf_counter()
        return self

    def stop(self, extra_own_cpu: float = 0.0) -> float:
        b1, c1, w1 = _proc_stat_busy(), time.process_time(), time.perf_counter()
        if self.b0 is None or b1 is None:
            return 0.0
        other = (b1 - self.b0) - (c1 - self.c0) - extra_own_cpu
        return max(0.0, other) / max((w1 - self.w0) * self.ncpu, 1e-9)


def wait_quiet(threshold: float, max_wait: float, probe: float = 0.5, need: int = 2) -> float:
    """Wait until other processes use under `threshold` of the CPUs for `need` probes in a row,
    at most `max_wait` seconds; returns the seconds waited."""
    t0 = time.perf_counter()
    ok = 0
    while time.perf_counter() - t0 < max_wait:
        m = NoiseMeter().start()
        time.sleep(probe)
        ok = ok + 1 if m.stop() < threshold else 0
        if ok >= need:
            break
    return time.perf_counter() - t0


def time_steps_quiet(step, block, steps: int, warmup: int = 1, batch: int = 5,
                     min_batch_s: float = 0.3, threshold: float = 0.15,
                     wait_budget: list | None = None) -> dict:
    """Like time_steps, but in batches of steps; a batch during which other processes used more
    than `threshold` of the machine is thrown away and redone after the machine is quiet again,
    while `wait_budget[0]` (seconds, shared and decremented) lasts. Reports what was rejected."""
    for _ in range(warmup):
        block(step())
    t0 = time.perf_counter()
    block(step())
    est = time.perf_counter() - t0
    k = max(batch, int(math.ceil(min_batch_s / max(est, 1e-6))))
    budget = wait_budget if wait_budget is not None else [0.0]
    times, noise, rejected = [], [], 0
    cpu, wall = 0.0, 0.0
    gc.collect()
    while len(times) < steps:
        gc.disable()
        m = NoiseMeter().start()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        ts = []
        for _ in range(min(k, max(steps - len(times), batch))):
            t1 = time.perf_counter()
            block(step())
            ts.append(time.perf_counter() - t1)
        cpu1, wall1 = time.process_time(), time.perf_counter()
        other = m.stop()
        gc.enable()
        if other > threshold and budget[0] > 0:
            rejected += 1
            budget[0] -= wait_quiet(threshold, min(budget[0], 30.0))
            continue
        times += ts
        noise.append(other)
        cpu += cpu1 - cpu0
        wall += wall1 - wall0
    ts = np.array(times)
    return dict(median_ms=float(np.median(ts) * 1e3), min_ms=float(ts.min() * 1e3),
                mean_ms=float(ts.mean() * 1e3), steps=len(times),
                cpu_util=float(cpu / max(wall, 1e-12)), other_load=float(np.mean(noise)),
                rejected_batches=rejected, times_ms=[round(1e3 * t, 4) for t in times])
