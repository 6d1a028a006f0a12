"""Load probing for the CPU benchmark: how busy the machine is (``/proc/stat``: other processes'
CPU share and the hypervisor's steal), what machine and libraries it is, and which of helmpinn,
PyTorch and JAX import (each probed in a throw-away process, so no thread pool starts here).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

import datetime as _dt  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from cpu_workers import _worker_env  # noqa: E402


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
