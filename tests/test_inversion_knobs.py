"""benchmarks/inversion_knobs.py's diagnostics on a small survey: the PDE weight of penalty
continuation, the refitted background, and the field error against finite differences."""
import numpy as np
import pytest
from conftest import load_benchmark

import helmpinn as hp
from helmpinn.inversion.api import _Run
from helmpinn.inversion.joint import JointResiduals
from helmpinn.inversion.medium import SplineMedium
from helmpinn.inversion.parallel import Ranks
from helmpinn.inversion.solver import ArrowheadLM
from helmpinn.problems.geometry import Box

NETWORK = (3, 6, 1)
FIT = 30


@pytest.fixture(scope="module")
def knobs():
    return load_benchmark("inversion_knobs")


def _stage(c_shift=0.0):
    """A two-source survey on the unit box, its run, the stage's rows and networks at f = 1."""
    rng = np.random.default_rng(0)
    sources = [hp.PointSource((0.3 + 0.4 * s, 0.5), width=0.1) for s in range(2)]
    survey = hp.Survey(sources, rng.uniform(0.2, 0.8, (8, 2)), [1.0], 0.05 * np.exp(1j * rng.uniform(0, 3, (1, 2, 8))))
    domain = Box([0.0, 0.0], [1.0, 1.0])
    options = dict(lambda_data=1.0, pde_points=80, boundary_points=16, network=NETWORK, seed=0,
                   pml_share=None, warm_start="fd", v_min=0.8, true=None)
    run = _Run(survey, domain, None, options, Ranks())
    medium = SplineMedium(domain.lo, domain.hi, (5, 5))
    c = medium.fit(lambda x: 1.0 + c_shift * x[:, 0])
    rows, thetas = run.wavefields(0, medium, c, None)
    return run, medium, c, rows, thetas


def test_pde_weight_scales_the_pde_rows_only_and_does_not_compound(knobs):
    _, _, _, rows, _ = _stage()
    base = rows[0].rowscale.copy()
    pde = rows[0].slices()["pde"]
    knobs._set_pde_weight(rows, 4.0)
    knobs._set_pde_weight(rows, 9.0)
    np.testing.assert_allclose(rows[0].rowscale[pde], 3.0 * base[pde], rtol=1e-15)
    rest = np.ones(len(base), bool)
    rest[pde] = False
    np.testing.assert_array_equal(rows[0].rowscale[rest], base[rest])


def test_field_error_is_zero_for_the_background_itself_and_the_true_medium(knobs):
    run, medium, c, rows, thetas = _stage()
    joint = JointResiduals(rows, run.spec, medium, None)
    for theta in thetas:   # the networks' output 0: the total field is the background, FD in c
        theta[:] = 0.0
    now, true, signal = knobs._field_error(run, rows, thetas, joint, medium, c, c, 0)
    assert now < 1e-10 and true < 1e-10 and signal == 0.0
    other = medium.fit(lambda x: 1.0 / (1.0 + 0.1 * x[:, 1]) ** 2)
    now, true, signal = knobs._field_error(run, rows, thetas, joint, medium, c, other, 0)
    assert now < 1e-10 and true == pytest.approx(signal, rel=1e-12) and signal > 1e-3


def test_rebackground_keeps_the_total_field_on_the_new_background(knobs):
    run, medium, c, rows, thetas = _stage()
    joint = JointResiduals(rows, run.spec, medium, None)
    lm = ArrowheadLM(joint)
    for _ in range(3):
        _, c = lm.step(thetas, c)
    c_new = c * (1.0 + 0.05 * np.linspace(-1, 1, c.size))   # a medium the background is not in
    ws = joint.workspace

    def totals(rs, ts):
        out = []
        for w, t in zip(rs, ts):
            u = ws.forward(t, np.ascontiguousarray(w.x_pde), 0)
            out.append(u[:, 0] + 1j * u[:, 1] + w.u0)
        return np.concatenate(out)
    before = totals(rows, thetas)
    new_rows, new_thetas = knobs._rebackground(run, rows, thetas, joint, medium, c_new, 0, NETWORK, FIT)
    assert all(np.array_equal(a.x_pde, b.x_pde) for a, b in zip(rows, new_rows))
    np.testing.assert_allclose(new_rows[0].m0, new_rows[0].basis @ c_new)   # the new background's medium
    moved = np.linalg.norm(np.concatenate([w.u0 for w in new_rows]) - np.concatenate([w.u0 for w in rows]))
    kept = np.linalg.norm(totals(new_rows, new_thetas) - before)
    assert moved > 1e-3 * np.linalg.norm(before) and kept < 0.2 * moved
