"""benchmarks/bench_inversion.py: the inversion cases of issue #60 are the ones stated (the data
themselves take Survey.synthetic's seconds and are made by the benchmark runs only)."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from helmpinn.problems.geometry import Box

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_inversion", ROOT / "benchmarks" / "bench_inversion.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_ring_and_crosswell_geometries(bench):
    src, rec, region = bench._ring_geometry()
    assert src.shape == (16, 2) and rec.shape == (64, 2)
    for p in (src, rec):
        np.testing.assert_allclose(np.linalg.norm(p - 0.5, axis=1), 0.45)
    assert np.min(np.linalg.norm(rec[None] - src[:, None], axis=2)) > 0.02   # receivers off the sources
    assert region(np.array([[0.5, 0.5], [0.05, 0.05]])).tolist() == [True, False]
    src, rec, region = bench._crosswell_geometry()
    assert src.shape == (8, 2) and rec.shape == (32, 2)
    assert np.all(src[:, 0] == 0.05) and np.all(rec[:, 0] == 0.95)


def test_the_true_medium_and_the_error_measure(bench):
    v = bench.true_velocity
    assert v(np.array([[0.38, 0.60]]))[0] == pytest.approx(1.15, abs=2e-3)      # +15 % Gaussian
    assert v(np.array([[0.62, 0.40]]))[0] == pytest.approx(0.90, abs=2e-3)      # -10 % disc
    assert v(np.array([[0.9, 0.9]]))[0] == pytest.approx(1.0, abs=1e-6)
    case = {"domain": Box([0.0, 0.0], [1.0, 1.0]), "region": bench._ring_geometry()[2],
            "true": v, "initial": 1.0}
    assert bench.velocity_error(v, case) == 0.0
    assert bench.velocity_error(1.0, case) == pytest.approx(1.0)
    assert bench.velocity_error(lambda x: 0.5 * (1 + v(x)), case) == pytest.approx(0.5)
    assert bench.regularization_rule(0.0) == 1e-5 and bench.regularization_rule(0.01) == pytest.approx(1e-3)


def test_the_figure_is_drawn(bench, tmp_path):
    import helmpinn as hp

    src, rec, region = bench._crosswell_geometry()
    survey = hp.Survey([hp.PointSource(p) for p in src], rec, [2.0], np.zeros((1, 8, 32)))
    case = {"domain": Box([0.0, 0.0], [1.0, 1.0]), "region": region, "true": bench.true_velocity,
            "initial": 1.0, "survey": survey}
    bench.plot_case(case, 1.0, str(tmp_path / "f.png"), "title")
    assert (tmp_path / "f.png").stat().st_size > 10_000
