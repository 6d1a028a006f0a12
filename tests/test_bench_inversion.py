"""benchmarks/bench_inversion.py: the inversion cases of issue #60 are the ones stated (the data
themselves take Survey.synthetic's seconds and are made by the benchmark runs only)."""

import numpy as np
import pytest
from conftest import load_benchmark, run_benchmark

from helmpinn.problems.geometry import Box


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("bench_inversion")


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


def _stand_in_model():
    """A Marmousi-shaped stand-in [depths, positions] at 25 m (covering the window: 61 × 301
    nodes): 1.5 km/s water to 0.25 km, then 1.8 + 1.2 z km/s with a faster block."""
    z = 0.025 * np.arange(61)[:, None]
    x = 0.025 * np.arange(301)[None, :]
    v = np.where(z < 0.25, 1.5, 1.8 + 1.2 * z) + 0 * x
    return v + 0.5 * ((np.abs(x - 6.0) < 0.4) & (np.abs(z - 0.8) < 0.2))


def test_the_marmousi_loader_takes_an_array_or_a_file_and_refuses_bad_ones(bench, tmp_path):
    v = _stand_in_model()
    np.testing.assert_array_equal(bench.load_marmousi(v), v)
    np.save(tmp_path / "m.npy", v)
    np.testing.assert_array_equal(bench.load_marmousi(str(tmp_path / "m.npy")), v)
    from scipy import io
    io.savemat(tmp_path / "mar_v.mat", {"v": v})
    np.testing.assert_array_equal(bench.load_marmousi(str(tmp_path)), v)     # a folder holding mar_v.mat
    with pytest.raises(FileNotFoundError, match="no Marmousi model"):
        bench.load_marmousi(str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="must cover the window"):
        bench.load_marmousi(v[:40])
    with pytest.raises(ValueError, match="finite values > 0"):
        bench.load_marmousi(-v)


def test_the_marmousi_starts(bench):
    models = bench.marmousi_models(_stand_in_model())
    assert models["true"].shape == (121, 61)                          # x then depth, 3 × 1.5 km at 25 m
    np.testing.assert_allclose(models["true"][:, 0], 1.5)               # the surface row
    assert models["true"][60, 32] == pytest.approx(2.3 + 1.2 * 0.8)     # the block at x = 6.0, z = 0.8
    lin = models["linear"]
    np.testing.assert_array_equal(lin, np.broadcast_to(lin[:1], lin.shape))   # 1-D
    slope = np.diff(lin[0])
    np.testing.assert_allclose(slope, slope[0])                          # a straight line in depth ...
    assert 0 < slope[0] / 0.025 < 3                                     # ... increasing with depth
    assert lin[0, 0] == pytest.approx(1.5)                              # from the surface's velocity
    smooth = models["smooth"]                                           # smoother than the truth, same mean
    assert np.max(np.abs(np.diff(smooth, axis=1))) < 0.5 * np.max(np.abs(np.diff(models["true"], axis=1)))
    assert abs(np.mean(smooth) - np.mean(models["true"])) < 0.05


def test_the_marmousi_case_builds(bench, tmp_path, monkeypatch):
    import helmpinn as hp

    calls = []

    def synthetic(velocity, domain, sources, receivers, frequencies, **kw):
        calls.append((velocity, domain, sources, receivers, frequencies))
        data = np.ones((len(frequencies), len(sources), len(receivers)), np.complex128)
        return hp.Survey(sources, receivers, frequencies, data)
    monkeypatch.setattr(hp.Survey, "synthetic", staticmethod(synthetic))
    path = str(tmp_path / "survey.npz")
    case = bench.make_case("marmousi", data=_stand_in_model(), start="linear", survey_file=path)
    velocity, domain, sources, receivers, frequencies = calls[0]
    np.testing.assert_allclose(domain.hi, [3.0, 1.5])
    src = np.array([s.position for s in sources])
    assert src.shape == (16, 2) and np.all(src[:, 1] == 0.05)
    assert receivers.shape == (119, 2) and np.allclose(np.diff(receivers[:, 0]), 0.025)
    assert list(frequencies) == [3.0, 4.0, 5.0]
    assert velocity is case["true"]
    assert case["true"](np.array([[1.5, 0.8]]))[0] == pytest.approx(2.3 + 1.2 * 0.8)
    w = case["survey"].weights                                           # the near-source receivers muted
    assert w.shape == (3, 16, 119) and 0 < np.sum(w == 0) < 16 * 3 * 8
    assert case["bounds"][0] == 1.4 and case["bounds"][1] >= np.max(_stand_in_model())
    assert bench.velocity_error(case["true"], case) == 0.0
    assert bench.velocity_error(case["initial"], case) == pytest.approx(1.0)
    assert case["region"](np.array([[1.5, 0.5], [1.5, 1.2], [0.05, 0.5]])).tolist() == [True, False, False]
    # The data file: read back by the next call (no second synthesis), refused for another geometry.
    again = bench.make_case("marmousi", data=_stand_in_model(), start="smooth", survey_file=path)
    assert len(calls) == 1 and np.array_equal(again["survey"].data, case["survey"].data)
    hp.Survey(sources[:4], receivers, frequencies, np.ones((3, 4, 119))).save(path)
    with pytest.raises(ValueError, match="not this case's geometry"):
        bench.make_case("marmousi", data=_stand_in_model(), survey_file=path)
    bench.plot_case(case, case["initial"], str(tmp_path / "m.png"), "marmousi")
    assert (tmp_path / "m.png").stat().st_size > 10_000


def test_the_marmousi_case_needs_its_data(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--case", "marmousi", "--method", "fwi"])
    assert "needs --data" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--start must be one of"):
        bench.make_case("marmousi", data=_stand_in_model(), start="flat")


def test_the_marmousi_case_with_a_free_surface(bench, monkeypatch, capsys):
    """--free-surface: the data and both inversions take the PML on every face but the surface
    z = 0 ("ymin"); without it every face (the case as it was)."""
    import helmpinn as hp

    layers = []

    def synthetic(velocity, domain, sources, receivers, frequencies, **kw):
        layers.append(kw["pml"])
        return hp.Survey(sources, receivers, frequencies,
                         np.ones((len(frequencies), len(sources), len(receivers)), np.complex128))
    monkeypatch.setattr(hp.Survey, "synthetic", staticmethod(synthetic))
    free = bench.make_case("marmousi", data=_stand_in_model(), free_surface=True)
    every = bench.make_case("marmousi", data=_stand_in_model())
    assert bench.MARMOUSI_FREE_SURFACE == ("xmin", "xmax", "ymax")
    assert free["pml"].faces == layers[0].faces == ("xmin", "xmax", "ymax") and free["free_surface"]
    assert every["pml"].faces is None and layers[1].faces is None
    assert layers[0].width == layers[1].width == pytest.approx(np.max(_stand_in_model()) / 3.0)
    with pytest.raises(SystemExit):
        bench.main(["--case", "ring", "--free-surface"])
    assert "only the marmousi case has a surface" in capsys.readouterr().err


def _script(name, *args):
    out = run_benchmark(name, *args)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_inversion_diagnose_reports_a_step():
    """inversion_diagnose.py wraps ArrowheadLM's private steps: this fails when they change."""
    import re

    out = _script("inversion_diagnose.py", "--case", "ring", "--sources", "1", "--freqs", "2", "--steps", "1")
    step = re.search(r"step 1: accepted .* corr\(dm, todo\) ([-+]\d\.\d+) corr\(dm, fwi\) ([-+]\d\.\d+) "
                     r"predicted: medium (\S+) networks (\S+);.* error (\d\.\d+)", out)
    assert step, out
    assert all(-1 <= float(step.group(i)) <= 1 for i in (1, 2)) and float(step.group(3)) > 0, out
    assert "coefficients at a bound after the last step" in out


def test_inversion_knobs_runs_the_stages():
    import re

    out = _script("inversion_knobs.py", "--case", "ring", "--sources", "1", "--steps", "1")
    assert len(re.findall(r"^stage \d f=", out, re.M)) == 3, out
    assert re.search(r"final velocity error \d\.\d+", out), out


def test_fwi_by_stages_is_one_fwi_call_a_frequency_with_its_own_weight(bench):
    import types

    import helmpinn as hp
    from helmpinn.reference import fwi

    domain = Box([0.0, 0.0], [1.0, 1.0])
    v = lambda x: 1.0 + 0.1 * np.exp(-np.sum((x - 0.5) ** 2, axis=1) / 0.02)   # noqa: E731
    rec = 0.5 + 0.35 * np.stack([np.cos(np.arange(8)), np.sin(np.arange(8))], axis=1)
    survey = hp.Survey.synthetic(v, domain, [hp.PointSource((0.2, 0.5))], rec, [1.5, 1.0], pml=hp.PML(0.3))
    case = {"survey": survey, "initial": 1.0, "domain": domain, "pml": hp.PML(0.3), "bounds": (0.8, 1.3),
            "true": v, "region": lambda x: np.ones(len(x), bool), "time_limit": 1e4, "noise": 0.0}
    args = types.SimpleNamespace(stage_regularization="1e-3,1e-6", max_iter=2, time_limit=None, quiet=True,
                                 regularization=None)
    out = bench.run_fwi(case, args)
    velocity = 1.0
    for f, alpha in ((1.0, 1e-3), (1.5, 1e-6)):   # low to high, each from the last one's velocity
        velocity = fwi(survey, velocity, domain=domain, pml=case["pml"], bounds=case["bounds"],
                       regularization=alpha, frequencies=[f], max_iter=2).velocity
    x = np.random.default_rng(0).uniform(0.1, 0.9, (50, 2))
    np.testing.assert_allclose(out["velocity"](x), velocity(x), rtol=1e-12)
    assert out["regularization"] == [1e-3, 1e-6] and len(out["history"]["misfit"]) > 2
    with pytest.raises(SystemExit, match="one α per frequency"):
        bench.run_fwi(case, types.SimpleNamespace(**{**vars(args), "stage_regularization": "1e-3"}))
