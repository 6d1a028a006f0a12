"""Model.create reads the Fourier scale from the problem's wavenumber (issue #23): a Problem as
in_dim or problem=, fourier_sigma="auto" through helmpinn.defaults.fourier_sigma."""
import math

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.defaults import fourier_sigma
from helmpinn.problems.geometry import Box


def _problem(k):
    return hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=k * k, bcs={"*": hp.Dirichlet(0.0)})


@pytest.mark.parametrize("k", [3.0, 40.0])
def test_create_from_a_problem_takes_the_rule_sigma(k):
    p = _problem(k)
    rule = fourier_sigma(p)
    assert rule == pytest.approx(max(k, math.pi) / (2 * math.pi * math.sqrt(2)))
    spec = hp.ModelSpec(2, 16, 8, 1)
    expected = hp.init_params(spec, dtype="float64", seed=4, fourier_sigma=rule)
    for model in (hp.Model.create(p, 16, 8, 1, dtype="float64", seed=4),
                  hp.Model.create(2, 16, 8, 1, dtype="float64", seed=4, problem=p),
                  hp.Model.create(2, 16, 8, 1, dtype="float64", seed=4, problem=p, fourier_sigma="auto")):
        np.testing.assert_array_equal(model.params, expected)
    # the frequencies' angular spread is k: 2π |B| has a root mean square of about k
    B = hp.Model.create(p, 512, 8, 1, dtype="float64", seed=0).views["B"]   # [d, m]
    assert 2 * math.pi * np.sqrt(np.mean(np.sum(B**2, axis=0))) == pytest.approx(max(k, math.pi), rel=0.1)


def test_create_without_a_problem_keeps_sigma_one_and_a_number_wins():
    spec = hp.ModelSpec(2, 8, 8, 1)
    np.testing.assert_array_equal(hp.Model.create(2, 8, 8, 1, seed=1).params,
                                  hp.init_params(spec, seed=1, fourier_sigma=1.0))
    np.testing.assert_array_equal(hp.Model.create(_problem(30.0), 8, 8, 1, seed=1, fourier_sigma=0.5).params,
                                  hp.init_params(spec, seed=1, fourier_sigma=0.5))


def test_create_refuses_what_does_not_fit():
    p = _problem(5.0)
    with pytest.raises(ValueError, match="in_dim 3 does not match the problem's dimension 2"):
        hp.Model.create(3, problem=p)
    with pytest.raises(ValueError, match="fourier_sigma must be a number or 'auto'"):
        hp.Model.create(p, fourier_sigma="wavenumber")
    with pytest.raises(ValueError, match="give it once"):
        hp.Model.create(p, problem=_problem(5.0))
