"""The thread count changes the speed, not the numbers: with ``blas_threads=1`` a run of every
optimiser gives the same bits on one thread and on two (the engine's own operations give the same
bits for any thread count; the BLAS's threaded routines do not, so LM and Gauss-Newton keep the
BLAS on one thread wherever ``blas_threads`` does not ask for more). Each count runs in its own
process, since OpenBLAS takes its thread count from ``OMP_NUM_THREADS`` when it loads."""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

SCRIPT = r"""
import json, sys
import numpy as np
import helmpinn as hp
from helmpinn.models.decomposition import BoxConstraint, DecomposedModel
from helmpinn.training.dd_driver import GNDriver
from helmpinn.training.drivers import LMDriver

out = {}
p = hp.get_problem("box-source", wavelengths=2.0)
k = p.wavenumber
m = DecomposedModel.create([0, 0], [1, 1], [(2, 2)], wavenumber=k, constraint=BoxConstraint([0, 0], [1, 1], 1 / k),
                           seed=0, ff_dim=4, hidden_dim=8, overlap=0.6)
t = hp.Trainer(p, m, pde_points=60000, bc_points=400, resample_every=0, eval_every=0, progress=False)
t.fit(3, optimizer=GNDriver(blas_threads=1))
out["gn"] = [float(v).hex() for v in t.history.loss] + [float(v).hex() for v in t.model.params[:20]]
q = hp.get_problem("dirichlet2d")
net = hp.Model.create(2, 8, 16, 2, seed=1)
t = hp.Trainer(q, net, pde_points=400, bc_points=80, resample_every=0, eval_every=0, progress=False)
t.fit(4, optimizer=LMDriver(blas_threads=1, solver="primal"))
out["lm"] = [float(v).hex() for v in t.history.loss] + [float(v).hex() for v in t.model.params_host()[:20]]
t.fit(3, optimizer="adam")
out["adam"] = [float(v).hex() for v in t.history.loss]
print(json.dumps(out))
"""


def _run(threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    env.pop("OPENBLAS_NUM_THREADS", None)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600, env=env,
                          cwd=HERE)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two CPUs for two threads to differ from one")
def test_one_and_two_threads_give_the_same_bits():
    one, two = _run(1), _run(2)
    assert set(one) == {"gn", "lm", "adam"}
    for name in one:
        assert one[name] == two[name], f"{name}: the steps differ between one thread and two"
