"""The CPU kernel sets of a dispatching build (baseline, AVX2, AVX-512), each forced in turn with
HELMPINN_CPU_ISA in a fresh process: every set the processor can run agrees with the float64
reference (values) and finite differences of it along random directions (gradient, Jacobian)
to the same tolerance, with layers wide enough for the matrix product's register-blocked path
(widths beyond every set's tile) and narrow ones."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import helmpinn

HERE = os.path.dirname(os.path.abspath(__file__))
SETS = helmpinn.cpu_kernel_sets()

# One child process per kernel set: forward, value_and_grad and jacobian on wide and narrow
# networks in float64 (against the reference) and float32 (against float64), errors printed
# as JSON.
CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import helmpinn, reference as R
    out = {"isa": helmpinn.cpu_isa(), "cases": []}
    rel = lambda a, b: float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))
    rng = np.random.default_rng(7)
    for spec in [(2, 5, 40, 2), (1, 17, 67, 2), (3, 24, 96, 1), (2, 3, 6, 2)]:  # widths 40-96
        d = spec[0]
        theta = R.random_params(spec, rng, fourier_sigma=0.4)
        x = rng.uniform(-1, 1, (70, d))   # more than one 64-point tile
        xb = rng.uniform(-1, 1, (9, d))
        nb = rng.normal(size=(9, d)); nb /= np.linalg.norm(nb, axis=1, keepdims=True)
        terms = dict(x_pde=x, kappa=3.0, f=rng.normal(size=(70, 2)), x_data=x[:11],
                     y=rng.normal(size=(11, 2)), x_bc=xb, n_bc=nb, alpha_bc=complex(0.5, -2.0))
        ws = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 64, dtype="float64")
        u, gu, lap = ws.forward(theta, x, 2)
        ru, rgu, rlap = R.forward(theta, spec, x, 2)
        grad = np.zeros_like(theta)
        loss = ws.value_and_grad(theta, grad, **terms)
        sub = dict(terms, x_pde=x[:5], f=terms["f"][:5], x_data=x[:3], y=terms["y"][:3],
                   x_bc=xb[:4], n_bc=nb[:4])
        J = ws.jacobian(theta, **sub)
        # Along random directions v (any wrong entry shows with probability 1): the gradient
        # against a 4th-order difference of the reference loss, J v against one of the reference
        # residuals.
        grad_err = jac_err = 0.0
        for _ in range(3):
            v = rng.normal(size=theta.size)
            h = 1e-3 / np.linalg.norm(v)
            th = np.stack([theta + c * h * v for c in (1, -1, 2, -2)])
            Ls = R.loss(th, spec, **terms)
            dL = (8 * (Ls[0] - Ls[1]) - (Ls[2] - Ls[3])) / (12 * h)
            grad_err = max(grad_err, abs(grad @ v - dL) / max(abs(dL), 1e-300))
            rs = R.residuals(th, spec, **sub)
            dr = (8 * (rs[0] - rs[1]) - (rs[2] - rs[3])) / (12 * h)
            jac_err = max(jac_err, rel(J @ v, dr))
        g64 = grad.copy()
        ws32 = helmpinn.Workspace(helmpinn.ModelSpec(*spec), 64, dtype="float32")
        t32 = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v) for k, v in terms.items()}
        g32 = np.zeros(theta.size, np.float32)
        l32 = ws32.value_and_grad(theta.astype(np.float32), g32, **t32)
        out["cases"].append({
            "spec": spec,
            "forward": max(rel(u, ru), rel(gu, rgu), rel(lap, rlap)),
            "loss": abs(loss - R.loss(theta, spec, **terms)) / abs(loss),
            "grad": grad_err,
            "jacobian": jac_err,
            "float32_loss": abs(l32 - loss) / abs(loss),
            "float32_grad": rel(g32, g64),
        })
    print(json.dumps(out))
""")


def _run(isa: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HELMPINN_CPU_ISA=isa)
    return subprocess.run([sys.executable, "-c", CHILD, HERE], capture_output=True, text=True,
                          env=env, timeout=300)


def _cpu_has(isa: str) -> bool:
    flags = ""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = next((line for line in fh if line.startswith("flags")), "")
    except OSError:
        pass
    words = set(flags.split())
    need = {"baseline": set(), "avx2": {"avx2", "fma", "bmi2"},
            "avx512": {"avx512f", "avx512dq", "avx512bw", "avx512vl", "avx512cd"}}[isa]
    return need <= words


@pytest.mark.skipif(SETS == ["native"], reason="a native build (HELMPINN_NATIVE) has one kernel set")
@pytest.mark.parametrize("isa", ["baseline", "avx2", "avx512"])
def test_each_kernel_set_agrees_with_the_reference(isa):
    if not _cpu_has(isa):
        pytest.skip(f"this processor cannot run the {isa} kernels")
    proc = _run(isa)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["isa"] == isa
    for case in out["cases"]:
        assert case["forward"] < 1e-12, case
        assert case["loss"] < 1e-12, case
        assert case["grad"] < 1e-7, case
        assert case["jacobian"] < 1e-7, case
        assert case["float32_loss"] < 1e-4, case
        assert case["float32_grad"] < 1e-3, case


@pytest.mark.skipif(SETS == ["native"], reason="a native build (HELMPINN_NATIVE) has one kernel set")
def test_the_best_supported_set_is_chosen_and_a_bad_request_is_refused():
    best = "avx512" if _cpu_has("avx512") else "avx2" if _cpu_has("avx2") else "baseline"
    env = {k: v for k, v in os.environ.items() if k != "HELMPINN_CPU_ISA"}
    probe = "import helmpinn; print(helmpinn.cpu_isa())"
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env,
                         check=True).stdout.strip()
    assert got == best
    bad = subprocess.run(
        [sys.executable, "-c",
         "import helmpinn\ntry:\n    helmpinn.Workspace(helmpinn.ModelSpec(1, 2, 4, 1), 8)\n"
         "except ValueError as e:\n    print(helmpinn.cpu_isa(), '|', e)"],
        capture_output=True, text=True, env=dict(env, HELMPINN_CPU_ISA="sse9"), check=True)
    assert bad.stdout.strip() == "invalid | HELMPINN_CPU_ISA=sse9: expected baseline, avx2 or avx512"
