"""Where the benchmarks say the error lies: bench_sharp.py's and bench_solve.py's regions split
the test points without gaps or double counts, put the points where they are named, and each
region's share of a squared error is that region's part of the sum."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import load_benchmark

import helmpinn as hp


@pytest.fixture(scope="module")
def sharp():
    return load_benchmark("bench_sharp")


@pytest.fixture(scope="module")
def solve_bench():
    return load_benchmark("bench_solve")


def _partition(regions, n):
    stacked = np.stack(list(regions.values()))
    assert stacked.shape == (len(regions), n)
    np.testing.assert_array_equal(stacked.sum(axis=0), np.ones(n))   # each point in exactly one


def test_sharp_regions(sharp):
    problem, distance, lam_in = sharp.CASES["disc"]()
    x = problem.test_points()
    near = distance(x) < lam_in / 10
    regions = sharp.error_regions(problem, x, near)
    assert list(regions) == ["interface", "source", "edge", "rest"]
    _partition(regions, len(x))
    np.testing.assert_array_equal(regions["interface"], near)
    # the source sits at (0.3, 0.75) in v = 1 at f = 2.5: a quarter wavelength is 0.1
    r = np.linalg.norm(x - [0.3, 0.75], axis=1)
    np.testing.assert_array_equal(regions["source"], (r < 0.1) & ~near)
    assert regions["source"].any() and regions["edge"].any()
    # shares: a unit error on one region only is that region's whole share
    d = regions["edge"].astype(float)
    shares = sharp.error_shares(d, regions)
    assert shares["edge"] == pytest.approx(1.0) and shares["rest"] == 0.0
    d = np.random.default_rng(0).standard_normal(len(x))
    shares = sharp.error_shares(d, regions)
    assert sum(shares.values()) == pytest.approx(1.0)
    assert shares["rest"] == pytest.approx(np.sum(d[regions["rest"]] ** 2) / np.sum(d ** 2))


def test_solve_regions_scatterer(solve_bench, capsys):
    problem = hp.get_problem("scatter-hard", k=8.0)
    x = problem.domain.sample_interior(4000, np.random.default_rng(1))
    regions = solve_bench.error_regions(problem, x)
    assert list(regions) == ["scatterer", "edge", "rest"]
    _partition(regions, len(x))
    quarter = 0.5 * np.pi / 8.0
    r = np.linalg.norm(x, axis=1)
    # the cylinder's rim sampled at 20,000 points: the distance to it within a hair of r - R
    sure_in, sure_out = r - np.pi / 4 < quarter - 1e-3, r - np.pi / 4 > quarter + 1e-3
    assert regions["scatterer"][sure_in].all() and not regions["scatterer"][sure_out].any()
    edge = np.min(np.pi - np.abs(x), axis=1) < quarter
    np.testing.assert_array_equal(regions["edge"], edge & ~regions["scatterer"])
    assert "scatterer" in capsys.readouterr().out


def test_solve_regions_without_scatterer(solve_bench):
    problem = hp.get_problem("free-source")
    x = problem.domain.sample_interior(2000, np.random.default_rng(1))
    regions = solve_bench.error_regions(problem, x)
    assert list(regions) == ["edge", "rest"]
    _partition(regions, len(x))
