"""PointSource (python/helmpinn/sources.py) and the sampling that resolves sources: the Gaussian's
normalisation and default width, several sources summed, and the importance weights: the
weighted PDE loss is an unbiased estimate of the uniform one, and the weights reach the core as
sqrt(w) on every PDE coefficient (the residual of a point times sqrt(w), its square times w)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erf

import helmpinn as hp
from helmpinn.geometry import Box, Interval
from helmpinn.problems import TrainingSet


@pytest.mark.parametrize("d", [1, 2])
def test_point_source_is_a_normalised_gaussian(d):
    src = hp.PointSource([0.1] * d, amplitude=2 - 1j, width=0.05)
    axis = np.linspace(-0.5, 0.7, 601)
    h = axis[1] - axis[0]
    mesh = np.meshgrid(*[axis] * d, indexing="ij")
    x = np.stack([m.ravel() for m in mesh], axis=1)
    total = src(x).sum() * h**d
    assert abs(total - (2 - 1j)) < 1e-9
    peak = src(np.array([[0.1] * d]))[0]
    assert peak == pytest.approx((2 - 1j) / (2 * math.pi * 0.05**2) ** (d / 2))


def test_default_width_comes_from_the_wavelength_and_sources_are_summed():
    k = 8.0
    extra = lambda x: np.full(len(x), 0.5 + 0j)  # noqa: E731
    srcs = [hp.PointSource((0.3, 0.4)), hp.PointSource((0.7, 0.6), amplitude=-1j, width=0.02), extra]
    prob = hp.Problem(Box([0, 0], [1, 1]), kappa=k * k, source=srcs, bcs={"*": hp.Dirichlet()})
    w0, w1 = (s.width for s in prob.point_sources)
    assert w0 == pytest.approx(2 * math.pi / k / 10) and w1 == 0.02
    assert srcs[0].width is None  # the user's object is not changed
    assert prob.source_share == 0.25
    x = np.random.default_rng(0).random((20, 2))
    expected = prob.point_sources[0](x) + prob.point_sources[1](x) + 0.5
    np.testing.assert_allclose(prob.source_at(x), expected, rtol=1e-14)
    # one source alone, and the errors
    single = hp.Problem(Box([0, 0], [1, 1]), kappa=k * k, source=hp.PointSource((0.5, 0.5), width=0.1),
                        bcs={"*": None}, source_share=0.0)
    assert single.source_share == 0.0 and single.sample(10, 2, rng=0).pde_weight is None
    with pytest.raises(ValueError, match="no width"):
        hp.PointSource((0.0, 0.0))(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="PointSource in 1-D for a 2-D domain"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, source=hp.PointSource(0.5), bcs={"*": None})
    with pytest.raises(ValueError, match="wavenumber, which is 0; give width="):
        hp.Problem(Box([0, 0], [1, 1]), kappa=0.0, source=hp.PointSource((0.5, 0.5)), bcs={"*": None})
    with pytest.raises(ValueError, match="source_share: the problem has no PointSource"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, source=extra, source_share=0.5, bcs={"*": None})
    with pytest.raises(ValueError, match="source_share must be a finite number >= 0 and < 1"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, source=srcs, source_share=1.0, bcs={"*": None})
    with pytest.raises(ValueError, match="PointSource: width must be a finite number > 0"):
        hp.PointSource((0.0, 0.0), width=-1.0)


def _gauss_mean_on_box(c, s, lo, hi):
    """The mean over the box [lo, hi] of exp(-|x - c|^2 / (2 s^2)) (exact, by erf)."""
    out = 1.0
    for cj, a, b in zip(c, lo, hi):
        t = s * math.sqrt(math.pi / 2) * (erf((b - cj) / (s * math.sqrt(2))) - erf((a - cj) / (s * math.sqrt(2))))
        out *= t / (b - a)
    return out


@pytest.mark.parametrize("pml_share", [None, 0.4])
def test_the_weighted_mean_estimates_the_base_mean_without_bias(pml_share):
    # A function peaked at a source: the weighted mean over the drawn points (what the core
    # takes: the mean of w |r|^2) against its exact mean under the base density, with a fixed
    # seed (deterministic); the same estimate from points drawn without the sources' share.
    src = hp.PointSource((0.3, 0.2), width=0.03)
    kw = dict(kappa=100.0, source=[src], bcs={})
    pml = hp.PML(0.25)
    prob = hp.Problem(Box([0, 0], [1, 1]), pml=pml, pml_share=pml_share, source_share=0.5, **kw)
    s = 0.01
    h = lambda x: np.exp(-np.sum((x - [0.3, 0.2]) ** 2, axis=1) / (2 * s * s))  # noqa: E731
    lo, hi = np.array([-0.25, -0.25]), np.array([1.25, 1.25])
    if pml_share is None:   # uniform over the box and its layer
        exact = _gauss_mean_on_box((0.3, 0.2), s, lo, hi)
    else:                   # the physical box gets 1 - pml_share of the points; h ~ 0 in the layer
        exact = (1 - pml_share) * _gauss_mean_on_box((0.3, 0.2), s, [0, 0], [1, 1])
    x, w = prob.sample_pde(200_000, rng=7)
    assert w is not None and len(x) <= 200_000 and np.all(w > 0)
    weighted = np.mean(w * h(x))
    assert abs(weighted / exact - 1) < 0.03
    # the weights' own mean is an unbiased estimate of 1 (h = 1)
    assert abs(np.mean(w) - 1) < 0.01
    if pml_share is not None:  # and of the layer's share (h = the layer's indicator)
        assert abs(np.mean(w * prob.in_layer(x)) - pml_share) < 0.01
    # the base points alone (no source share) estimate the same mean far less well
    plain = hp.Problem(Box([0, 0], [1, 1]), pml=pml, pml_share=pml_share, source_share=0.0, **kw)
    xu, wu = plain.sample_pde(200_000, rng=7)
    assert wu is None
    assert abs(np.mean(w * h(x)) - exact) < abs(np.mean(h(xu)) - exact)


def _unweighted_batch(prob, x):
    """The PDE batch of x without weights, built from the problem's own pieces."""
    ts = TrainingSet(x_pde=x, kappa=prob.kappa_at(x), f=prob.source_at(x), x_data=np.empty((0, prob.dim)),
                     y=np.empty(0, complex), x_bc=np.empty((0, prob.dim)), n_bc=np.empty((0, prob.dim)),
                     alpha=0j, g=None)
    if prob.uses_operator:
        ts.a_pde, ts.b_pde = prob.operator_at(x)
    return ts.to_batch(np.float64)


@pytest.mark.parametrize("with_pml", [False, True])
def test_weights_reach_the_core_as_sqrt_w_on_every_coefficient(with_pml):
    # Exact algebra (docs/MATH.md, General operator): r = sum a_i u_ii + sum b_i u_i + c u - f,
    # so a, b, c, f all times sqrt(w_i) give sqrt(w_i) r_i and the loss's |r_i|^2 times w_i.
    prob = hp.Problem(Box([0, 0], [1, 1]), kappa=36.0, bcs={} if with_pml else {"*": None},
                      source=[hp.PointSource((0.4, 0.6), 1 + 2j), lambda x: np.cos(x[:, 0]) + 0j],
                      pml=hp.PML(0.3) if with_pml else None, source_share=0.6)
    ts = prob.sample(300, 0, rng=3)
    assert ts.pde_weight is not None and len(ts.x_data) == 0 and len(ts.x_bc) == 0
    model = hp.Model.create(2, 8, 16, 2, dtype="float64", seed=1)
    ws = model.workspace()
    r_w = ws.residuals(model.params, batch=ts.to_batch(np.float64))
    r_u = ws.residuals(model.params, batch=_unweighted_batch(prob, ts.x_pde))
    n = len(ts.x_pde)
    r_w, r_u = r_w[: 2 * n].reshape(n, 2), r_u[: 2 * n].reshape(n, 2)
    np.testing.assert_allclose(r_w, np.sqrt(ts.pde_weight)[:, None] * r_u, rtol=1e-10, atol=1e-13)
    # so the loss's PDE term is the weighted mean of the unweighted squared residuals
    assert np.sum(r_w**2) == pytest.approx(np.sum(ts.pde_weight * np.sum(r_u**2, axis=1)), rel=1e-12)


def test_a_1d_source_problem_samples_near_the_source():
    prob = hp.Problem(Interval(0.0, 1.0), kappa=400.0, source=hp.PointSource(0.5, width=0.01),
                      bcs={"*": hp.Dirichlet()})
    x, w = prob.sample_pde(1000, rng=0)
    near, far = np.abs(x[:, 0] - 0.5) < 0.01, np.abs(x[:, 0] - 0.5) > 0.08
    assert len(x) == 1000 and near.sum() > 150  # a quarter of the points from the source
    assert np.all(w[near] < 0.2)
    np.testing.assert_allclose(w[far], 1 / 0.75, rtol=1e-12)  # p/q where the Gaussian is ~0
