"""helmpinn.estimate.estimate_error: the error of a model without the exact solution, against
finite-difference references, checked on models whose exact error is known by construction."""
from __future__ import annotations

import numpy as np
import pytest

import helmpinn as hp
from helmpinn import estimate
from helmpinn.problems import geometry as geo


class Perturbed:
    """A 'model' that predicts the exact solution plus a known relative error: ``(1 + a) u``
    (a global factor) and ``b · max|u| · sin(3x + 2y)`` (a smooth field of its own)."""

    def __init__(self, problem, a=0.0, b=0.0):
        self.problem, self.a, self.b = problem, a, b
        x = problem.test_points()
        self.peak = float(np.max(np.abs(problem.exact_at(x))))

    def predict(self, x):
        u = self.problem.exact_at(x)
        return (1 + self.a) * u + self.b * self.peak * np.sin(3 * x[:, 0] + 2 * x[:, -1])

    def error_at(self, x):
        u = self.problem.exact_at(x)
        return float(np.linalg.norm(self.predict(x) - u) / np.linalg.norm(u))


def _estimated_and_true(name, options, a, b):
    """The estimate for the built-in ``name`` solved with the error ``a, b`` (:class:`Perturbed`)
    and that error measured at the problem's test points in the physical domain."""
    problem = hp.get_problem(name, **options)
    model = Perturbed(problem, a, b)
    x = problem.test_points()
    return estimate.estimate_error(problem, model), model.error_at(x[estimate._physical(problem, x)])


@pytest.mark.parametrize("name,options", [("dirichlet2d", {"n": 2}), ("free-source", {"wavelengths": 3}),
                                          ("waveguide", {})])
@pytest.mark.parametrize("a,b", [(1e-2, 0.0), (0.0, 3e-3), (3e-2j, 1e-2)])
def test_estimate_matches_a_known_error(name, options, a, b):
    est, true = _estimated_and_true(name, options, a, b)
    assert est.reliable, est
    assert abs(est.error / true - 1) < 0.35, (est, true)
    assert est.error - est.reference_error <= 1.5 * true <= 1.5 * est.upper


def test_a_tiny_error_is_only_bounded():
    problem = hp.get_problem("free-source", wavelengths=3)
    est = estimate.estimate_error(problem, Perturbed(problem, 1e-9), max_nodes=20_000)
    assert not est.reliable
    assert est.upper >= 1e-9 and est.upper == est.error + est.reference_error
    assert "at most" in str(est)


def test_refines_until_reliable():
    problem = hp.get_problem("dirichlet2d", n=2)
    model = Perturbed(problem, 2e-4)
    coarse = estimate.estimate_error(problem, model, points_per_wavelength=6, max_nodes=2_000)
    fine = estimate.estimate_error(problem, model, points_per_wavelength=6)
    assert not coarse.reliable and fine.reliable
    assert max(fine.h) < max(coarse.h)
    assert abs(fine.error / 2e-4 - 1) < 0.35


@pytest.mark.parametrize("name,options,a,b", [("scatter-hard", {}, 1e-2, 0.0),
                                              ("scatter-soft", {"k": 6.0}, 0.0, 3e-3),
                                              ("scatter-hard", {"k": 6.0}, 3e-2j, 1e-2)])
def test_estimate_on_the_cylinders_matches_the_series_error(name, options, a, b):
    """Sound-hard and sound-soft cylinders in a PML against their Hankel series: measured
    estimate/exact 0.995 to 1.010 where reliable (docs/guide/reference-solver.md)."""
    est, true = _estimated_and_true(name, options, a, b)
    assert est.reliable, est
    assert abs(est.error / true - 1) < 0.1, (est, true)


def test_refusals():
    problem = hp.get_problem("dirichlet2d")
    cloud = hp.Problem(geo.PointCloud(np.random.default_rng(0).random((50, 2))), 4.0)
    with pytest.raises(ValueError, match="Box or Interval"):
        estimate.estimate_error(cloud, Perturbed(problem))
    hard = hp.get_problem("scatter-hard")
    with pytest.raises(ValueError, match="no finite-difference reference at h = 1 for this obstacle"):
        estimate.estimate_error(hard, Perturbed(hard), h=1.0)
    with pytest.raises(TypeError, match="model must have predict"):
        estimate.estimate_error(problem, object())
    with pytest.raises(ValueError, match="points_per_wavelength"):
        estimate.estimate_error(problem, Perturbed(problem), points_per_wavelength=-1)
    with pytest.raises(ValueError, match="max_nodes"):
        estimate.estimate_error(problem, Perturbed(problem), max_nodes=0)


def test_solution_estimate_error():
    """hp.solve's Solution estimates its own error; on plane1d it agrees with the exact one."""
    problem = hp.get_problem("plane1d", k=10.0)
    sol = hp.solve(problem, tol=1e-3, progress=False, steps=20)
    est = sol.estimate_error(problem)
    x = problem.test_points()
    true = float(np.linalg.norm(sol.predict(x) - problem.exact_at(x)) / np.linalg.norm(problem.exact_at(x)))
    assert est.reliable, est
    assert abs(est.error / true - 1) < 0.35, (est, true, sol.error)
