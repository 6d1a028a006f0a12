"""Smoke test of an installed helmpinn (a wheel), run from outside the source tree: it imports,
one value_and_grad agrees with central differences, and `helmpinn train` runs a few steps and
writes its model. Used by .ci/wheel.sh and by cibuildwheel's test-command (pyproject.toml).

    python .ci/smoke.py
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

import helmpinn as hp

here = Path(__file__).resolve().parents[1]
where = Path(hp.__file__).resolve()
assert here not in where.parents, f"helmpinn imported from the source tree: {where}"
print(f"helmpinn {hp.__version__} from {where.parent}; OpenMP={hp.has_openmp()} "
      f"CUDA={hp.has_cuda()}")

spec = hp.ModelSpec(2, 4, 8, 2)
theta = hp.init_params(spec, dtype="float64", seed=0, fourier_sigma=1.0)
ws = hp.Workspace(spec, 32, dtype="float64")
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, (50, 2))
f = rng.normal(size=(50, 2))
grad = np.zeros_like(theta)
loss = ws.value_and_grad(theta, grad, x_pde=x, kappa=9.0, f=f)
h, i = 1e-6, 7
tp, tm = theta.copy(), theta.copy()
tp[i] += h
tm[i] -= h
g = np.empty_like(theta)
fd = (ws.value_and_grad(tp, g, x_pde=x, kappa=9.0, f=f)
      - ws.value_and_grad(tm, g, x_pde=x, kappa=9.0, f=f)) / (2 * h)
assert np.isfinite(loss) and abs(fd - grad[i]) < 1e-6 * max(1.0, abs(fd)), (loss, fd, grad[i])
print(f"value_and_grad: loss {loss:.6g}, d loss/d theta[{i}] {grad[i]:.6g} (central difference {fd:.6g})")

with tempfile.TemporaryDirectory() as tmp:
    out = Path(tmp) / "run"
    cmd = ["helmpinn", "train", "--problem", "plane1d", "--steps", "5", "--no-plots", "--quiet",
           "--out", str(out)]
    exe = Path(sys.executable).parent / "helmpinn"
    if exe.exists():                     # the console script of this environment
        cmd[0] = str(exe)
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp,
                         env={**os.environ, "OMP_NUM_THREADS": "2"}, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (out / "model.npz").is_file() and (out / "metrics.json").is_file(), sorted(out.iterdir())
    print(f"{' '.join(cmd[1:4])} ...: exit 0, wrote {sorted(p.name for p in out.iterdir())}")
print("smoke test passed")
