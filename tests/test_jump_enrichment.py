"""benchmarks/jump_enrichment.py: the enriched windows' product rule, checked against differences
of the model's own values (float64), so that the measurement in docs/benchmarks.md ("Media with
jumps") trained the model it names."""
from __future__ import annotations

import numpy as np

from conftest import load_benchmark
from helmpinn.models.decomposition import DecomposedModel, Rows


def _kappa(x):
    """A slow square with smoothed edges (the ramps' kind), κ = 40 outside, 90 inside."""
    s = np.prod(0.5 * (np.tanh((0.3 - np.abs(x - 0.1)) / 0.05) + 1.0), axis=1)
    return 40.0 + 50.0 * s


def test_the_enrichment_and_its_derivatives_agree_with_differences():
    je = load_benchmark("jump_enrichment")
    field = je.enrichment(_kappa, [-1, -1], [1, 1], sigma=0.15, h=0.01)
    x = np.random.default_rng(0).uniform(-0.8, 0.8, (40, 2))
    e, e1, e2 = field(x, True)
    assert np.max(np.abs(e)) > 0.1 and field(x, False)[1] is None
    h = 1e-3
    for a in range(2):
        step = h * np.eye(2)[a]
        ep, em = field(x + step, False)[0], field(x - step, False)[0]
        np.testing.assert_allclose((ep - em) / (2 * h), e1[:, a], atol=1e-3 * np.abs(e1).max())
        np.testing.assert_allclose((ep - 2 * e + em) / h ** 2, e2[:, a], atol=2e-3 * np.abs(e2).max())


def _field(x, derivatives):
    """An enrichment with exact derivatives: e = sin(2x) cos(3y) (the product rule's check is not
    then bounded by the splines' own consistency, 1e-4 at a grid of 0.01: the test above)."""
    sx, cx, sy, cy = np.sin(2 * x[:, 0]), np.cos(2 * x[:, 0]), np.sin(3 * x[:, 1]), np.cos(3 * x[:, 1])
    e = sx * cy
    if not derivatives:
        return e, None, None
    return e, np.stack([2 * cx * cy, -3 * sx * sy], 1), np.stack([-4 * e, -9 * e], 1)


def test_the_enriched_models_laplacian_is_the_product_rules():
    je = load_benchmark("jump_enrichment")
    base = DecomposedModel.create([-1, -1], [1, 1], [(2, 2)], ff_dim=4, hidden_dim=8, wavenumber=6.0, seed=1)
    model = je.enriched_model(base, _field, (2, 2), 6.0, zero=False)
    assert len(model.levels) == 2 and model.num_params == 2 * base.num_params
    np.testing.assert_array_equal(model.params[:base.num_params], base.params)
    zero = je.enriched_model(base, _field, (2, 2), 6.0)
    x = np.random.default_rng(1).uniform(-0.7, 0.7, (30, 2))
    np.testing.assert_allclose(zero.predict(x), base.predict(x), rtol=0, atol=1e-15)   # starts as the plain one
    assert not np.allclose(model.predict(x), base.predict(x))
    # rows of Δu through the residuals (the core's products on the enriched windows) against differences
    rows = Rows(x, np.ones((len(x), 2)), np.zeros((len(x), 2)), np.zeros(len(x)), np.zeros(len(x)),
                np.full(len(x), "pde"))
    r = model.residuals_for(rows).residuals(model.params)
    lap = r[0::2] + 1j * r[1::2]
    u = model.predict

    def fd(h):
        return sum(u(x + h * np.eye(2)[a]) - 2 * u(x) + u(x - h * np.eye(2)[a]) for a in range(2)) / h ** 2
    richardson = (4 * fd(1e-3) - fd(2e-3)) / 3   # fourth order: the differences' own error some 1e-8
    np.testing.assert_allclose(lap, richardson, rtol=0, atol=1e-6 * np.abs(richardson).max())
