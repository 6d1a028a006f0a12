"""The wave benchmarks of helmpinn.waves: exact solutions against their PDE (fourth-order finite
differences, written here independently of Problem.pde_residual_fd), free-source against the
far-field closed form, and box-source's error with the resonant modes removed."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import hankel1

import helmpinn as hp
from helmpinn import waves


def _lap4(u, x, h):
    """Fourth-order central-difference Laplacian of u at x."""
    out = np.zeros(len(x), complex) - 2.5 * x.shape[1] * u(x)
    for i in range(x.shape[1]):
        e = np.zeros(x.shape[1])
        e[i] = h
        out += (4.0 / 3.0) * (u(x + e) + u(x - e)) - (1.0 / 12.0) * (u(x + 2 * e) + u(x - 2 * e))
    return out / h ** 2


def test_registered():
    names = hp.problems.problem_names()
    assert "box-source" in names and "free-source" in names
    p = hp.get_problem("box-source", wavelengths=5)
    assert p.options["wavelengths"] == 5 and math.isclose(p.wavenumber, 10 * math.pi)
    q = hp.get_problem("free-source", wavelengths=5, s=0.05)
    assert q.pml is not None and math.isclose(q.wavenumber, 5 * math.pi)


@pytest.mark.parametrize("W", [2.5, 5.0])
def test_box_source_satisfies_pde(W):
    p = waves.box_source(W)
    w = 2 * math.pi * W
    x = np.random.default_rng(0).uniform(0.02, 0.98, (300, 2))
    r = _lap4(p.exact_at, x, 2e-3) + w * w * p.exact_at(x) - p.source_at(x)
    assert np.abs(r).max() < 2e-5 * np.abs(p.source_at(x)).max() + 1e-4
    # u = 0 on the boundary
    t = np.linspace(0, 1, 50)
    edge = np.concatenate([np.stack([t, 0 * t], 1), np.stack([t, 1 + 0 * t], 1),
                           np.stack([0 * t, t], 1), np.stack([1 + 0 * t, t], 1)])
    assert np.abs(p.exact_at(edge)).max() < 1e-12


def test_box_source_is_not_trivial():
    """The series is not the zero function and changes with sd (a wrong DST scale or sign fails
    the PDE test above; this guards against an all-zero series passing it with f ≈ 0 nowhere)."""
    x = np.random.default_rng(5).uniform(0, 1, (100, 2))
    u1 = waves.box_source_solution(5, 0.05)(x)
    u2 = waves.box_source_solution(5, 0.03)(x)
    assert np.abs(u1).max() > 1e-2 and np.abs(u1 - u2).max() > 1e-3


@pytest.mark.parametrize("W", [2.0, 5.0])
def test_free_source_satisfies_pde(W):
    q = waves.free_source(W, s=0.05)
    k = math.pi * W
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-1, 1, (200, 2)), rng.normal(0, 0.05, (100, 2))])
    x = x[np.hypot(*x.T) > 1e-2]   # 4th-order differences straddle r = 0 badly (log singularity of H0 pieces)
    r = _lap4(q.exact_at, x, 1e-3) + k * k * q.exact_at(x) - q.source_at(x)
    assert np.abs(r).max() < 1e-5 * np.abs(q.source_at(x)).max()


def test_free_source_far_field():
    k, s = 5 * math.pi, 0.05
    x = np.random.default_rng(2).uniform(-1, 1, (400, 2))
    x = x[np.hypot(*x.T) > 12 * s]
    r = np.hypot(*x.T)
    ref = 0.25j * math.exp(-k * k * s * s / 2) * hankel1(0, k * r)
    u = waves.free_source_field(x, k, s)
    assert np.abs(u - ref).max() < 1e-12 * np.abs(ref).max()
    # continuous through the origin and at the quadrature's outer radius
    u0 = waves.free_source_field(np.array([[0.0, 0.0], [1e-9, 0.0]]), k, s)
    assert abs(u0[0] - u0[1]) < 1e-7 * abs(u0[0])
    uR = waves.free_source_field(np.array([[12 * s * (1 - 1e-12), 0.0], [12 * s * (1 + 1e-12), 0]]), k, s)
    assert abs(uR[0] - uR[1]) < 1e-9 * abs(uR[0])


def test_resonant_modes():
    x = np.random.default_rng(3).uniform(0, 1, (50, 2))
    Z = waves.resonant_modes(x, 10 * math.pi)       # 5 wavelengths: (6, 8), (8, 6)
    assert Z.shape == (50, 2)
    assert np.allclose(Z[:, 0], np.sin(6 * np.pi * x[:, 0]) * np.sin(8 * np.pi * x[:, 1]))
    assert waves.resonant_modes(x, 10.0).shape == (50, 0)


def test_box_source_error_removes_modes():
    p = waves.box_source(5)
    x = np.random.default_rng(4).uniform(0, 1, (2000, 2))
    ue = p.exact_at(x)
    Z = waves.resonant_modes(x, 10 * math.pi)
    wrong = ue + 0.3 * Z[:, 0] - 0.1j * Z[:, 1]
    e = waves.box_source_error(wrong, ue, x, 10 * math.pi)
    assert e["raw"] > 0.5 and e["modes_removed"] < 1e-12
    other = ue * 1.01
    e = waves.box_source_error(other, ue, x, 10 * math.pi)
    assert math.isclose(e["raw"], 0.01, rel_tol=1e-9) and e["modes_removed"] <= e["raw"]
    with pytest.raises(ValueError, match="u and exact"):
        waves.box_source_error(ue[:3], ue, x, 10 * math.pi)


@pytest.mark.parametrize("bad", [0, -1, float("nan")])
def test_options_checked(bad):
    with pytest.raises(ValueError, match="wavelengths"):
        waves.box_source(bad)
    with pytest.raises(ValueError, match="s: expected"):
        waves.free_source(5, s=bad)
