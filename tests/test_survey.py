"""hp.Survey: the data of a survey, its file, its checks and its synthetic data from fd_solve."""
import os

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.reference import fd_solve

DOMAIN = Box([0.0, 0.0], [1.0, 1.0])


def _velocity(x):
    return 1.0 + 0.2 * np.exp(-((x[:, 0] - 0.5) ** 2 + (x[:, 1] - 0.45) ** 2) / 0.02)


def _small(F=2, S=3, R=5, seed=0, weights=False):
    rng = np.random.default_rng(seed)
    src = [hp.PointSource(rng.uniform(0.2, 0.8, 2), amplitude=1 + 0.5j, width=0.05) for _ in range(S)]
    rec = rng.uniform(0.1, 0.9, (R, 2))
    data = rng.normal(size=(F, S, R)) + 1j * rng.normal(size=(F, S, R))
    w = rng.uniform(0.5, 2.0, (F, S, R)) if weights else None
    return hp.Survey(src, rec, np.arange(1.0, F + 1), data, w)


def test_sizes_and_properties():
    s = _small(F=2, S=3, R=5)
    assert (s.dim, s.n_frequencies, s.n_sources, s.n_receivers) == (2, 2, 3, 5)
    assert s.data.dtype == np.complex128 and s.receivers.dtype == np.float64


def test_synthetic_is_fd_solve_per_source_from_one_factorisation():
    """Each datum is what fd_solve gives for that source alone on the same grid, read by
    FDSolution's interpolant (one LU per frequency serves all sources)."""
    src = [hp.PointSource([0.3, 0.4], width=0.06), hp.PointSource([0.7, 0.6], amplitude=-1j, width=0.06)]
    rec = np.array([[0.2, 0.8], [0.5, 0.5], [0.85, 0.15]])
    pml = hp.PML(0.25)
    s = hp.Survey.synthetic(_velocity, DOMAIN, src, rec, [2.0, 2.5], pml=pml, h=1 / 30)
    for i, f in enumerate((2.0, 2.5)):
        for j, src_j in enumerate(src):
            p = hp.Problem(DOMAIN, frequency=f, velocity=_velocity, pml=pml, source=src_j)
            want = fd_solve(p, 1 / 30)(rec)
            np.testing.assert_allclose(s.data[i, j], want, rtol=1e-12, atol=0)


def test_synthetic_default_grid_and_source_width():
    """The default grid has 20 nodes per shortest wavelength (min v / max f); a PointSource
    without a width gets λ_min/10, and the survey returned carries it."""
    src = [hp.PointSource([0.3, 0.4])]
    rec = np.array([[0.6, 0.5]])
    s = hp.Survey.synthetic(1.0, DOMAIN, src, rec, [1.0, 1.5], pml=hp.PML(0.3))
    lam = 1.0 / 1.5
    assert s.sources[0].width == pytest.approx(lam / 10)
    explicit = hp.Survey.synthetic(1.0, DOMAIN, [hp.PointSource([0.3, 0.4], width=lam / 10)], rec,
                                   [1.0, 1.5], pml=hp.PML(0.3), h=lam / 20)
    np.testing.assert_array_equal(s.data, explicit.data)


def test_synthetic_noise_is_relative_and_seeded():
    src = [hp.PointSource([0.3 + 0.1 * i, 0.4], width=0.08) for i in range(4)]
    rec = np.stack([np.linspace(0.1, 0.9, 30), np.full(30, 0.8)], axis=1)
    kw = dict(pml=hp.PML(0.3), h=1 / 24)
    clean = hp.Survey.synthetic(1.0, DOMAIN, src, rec, [1.0, 2.0], **kw)
    noisy = hp.Survey.synthetic(1.0, DOMAIN, src, rec, [1.0, 2.0], noise=0.05, seed=3, **kw)
    again = hp.Survey.synthetic(1.0, DOMAIN, src, rec, [1.0, 2.0], noise=0.05, seed=3, **kw)
    other = hp.Survey.synthetic(1.0, DOMAIN, src, rec, [1.0, 2.0], noise=0.05, seed=4, **kw)
    np.testing.assert_array_equal(noisy.data, again.data)
    assert not np.array_equal(noisy.data, other.data)
    for i in range(2):   # per frequency, relative to that frequency's RMS (240 samples)
        rms = np.sqrt(np.mean(np.abs(clean.data[i]) ** 2))
        level = np.sqrt(np.mean(np.abs(noisy.data[i] - clean.data[i]) ** 2)) / rms
        assert 0.04 < level < 0.06, level


def test_save_load_round_trip(tmp_path):
    s = _small(weights=True)
    s.sources[1] = hp.PointSource([0.5, 0.5])       # no width: stored as NaN, read back as None
    path = s.save(tmp_path / "survey.npz")
    t = hp.Survey.load(path)
    np.testing.assert_array_equal(t.data, s.data)
    np.testing.assert_array_equal(t.weights, s.weights)
    np.testing.assert_array_equal(t.receivers, s.receivers)
    np.testing.assert_array_equal(t.frequencies, s.frequencies)
    for a, b in zip(s.sources, t.sources):
        assert (a.position.tolist(), a.amplitude, a.width) == (b.position.tolist(), b.amplitude, b.width)
    assert [f for f in os.listdir(tmp_path)] == ["survey.npz"]


def test_saving_a_callable_source_is_refused_and_writes_nothing(tmp_path):
    s = hp.Survey([lambda x: np.zeros(len(x), complex)], [[0.5, 0.5]], [1.0], np.ones((1, 1, 1)))
    with pytest.raises(TypeError, match=r"sources\[0\].*not a PointSource"):
        s.save(tmp_path / "s.npz")
    assert os.listdir(tmp_path) == []


def _write(path, **arrays):
    with open(path, "wb") as fh:
        np.savez(fh, **arrays)


def _arrays(s):
    return {"format": np.array("helmpinn-survey"), "format_version": np.array(1),
            "source_position": np.array([p.position for p in s.sources]),
            "source_amplitude": np.array([p.amplitude for p in s.sources]),
            "source_width": np.array([p.width for p in s.sources]),
            "receivers": s.receivers, "frequencies": s.frequencies, "data": s.data}


def test_a_version_1_file_loads_without_a_free_surface_record(tmp_path):
    """Files written before the free surface was recorded read as not recorded (None)."""
    s = _small()
    path = tmp_path / "v1.npz"
    _write(path, **_arrays(s))
    loaded = hp.Survey.load(path)
    assert loaded.free_surface is None
    np.testing.assert_array_equal(loaded.data, s.data)


@pytest.mark.parametrize("change, message", [
    ({"data": "nan"}, "data must be finite"),
    ({"data": "shape"}, r"data must have shape \[F, S, R\]"),
    ({"frequencies": np.array([1.0, -2.0])}, r"frequencies\[1\]"),
    ({"source_width": np.array([0.1, 0.1])}, "disagree in length"),
    ({"format": np.array("something-else")}, "not a helmpinn survey file"),
    ({"receivers": np.zeros((5, 2), complex)}, "receivers must be a 2-axis real array"),
    ({"extra": np.zeros(2)}, "unknown entries"),
    ({"format_version": np.array(3)}, r"format_version .* is not supported .*\[1, 2\]"),
    ({"free_surface": np.array(["top"])}, "free_surface: 'top' is not a face's name"),
    ({"free_surface": np.zeros(2)}, "free_surface must be a 1-D array of face names"),
])
def test_load_refuses_a_bad_file_naming_it(tmp_path, change, message):
    s = _small()
    arrays = _arrays(s)
    for key, value in change.items():
        if value == "nan" if isinstance(value, str) else False:
            arrays[key] = arrays[key].copy()
            arrays[key][1, 2, 3] = np.nan
        elif isinstance(value, str) and value == "shape":
            arrays[key] = arrays[key][:, :2]
        else:
            arrays[key] = value
    path = tmp_path / "bad.npz"
    _write(path, **arrays)
    with pytest.raises(ValueError, match=message) as err:
        hp.Survey.load(path)
    assert str(path) in str(err.value)


def test_load_refuses_non_regular_pickled_and_foreign_files(tmp_path):
    fifo = tmp_path / "fifo.npz"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        hp.Survey.load(fifo)
    with pytest.raises(ValueError, match="no such file"):
        hp.Survey.load(tmp_path / "missing.npz")
    pickled = tmp_path / "pickled.npz"
    with open(pickled, "wb") as fh:
        np.savez(fh, data=np.array([{"a": 1}], dtype=object))
    with pytest.raises(ValueError, match="pickled"):
        hp.Survey.load(pickled)
    text = tmp_path / "text.npz"
    text.write_text("hello")
    with pytest.raises(ValueError, match=f"{text}.*not a helmpinn survey file"):
        hp.Survey.load(text)


@pytest.mark.parametrize("make, message", [
    (lambda s: hp.Survey([], s.receivers, s.frequencies, np.zeros((2, 0, 5))), "an empty survey"),
    (lambda s: hp.Survey(s.sources, np.zeros((0, 2)), s.frequencies, np.zeros((2, 3, 0))), "an empty survey"),
    (lambda s: hp.Survey(s.sources, s.receivers, [1.0, 0.0], s.data), r"frequencies\[1\] = 0.0"),
    (lambda s: hp.Survey(s.sources, s.receivers, [1.0, np.inf], s.data), "finite and > 0"),
    (lambda s: hp.Survey(s.sources, s.receivers, s.frequencies, s.data[:, :2]), "data must have shape"),
    (lambda s: hp.Survey(s.sources, s.receivers, s.frequencies, s.data * np.nan), "data must be finite"),
    (lambda s: hp.Survey(s.sources, s.receivers, s.frequencies, s.data, -np.ones(s.data.shape)),
     "weights must be finite and >= 0"),
    (lambda s: hp.Survey(s.sources, s.receivers, s.frequencies, s.data, np.ones((2, 3))),
     "weights must have 3 axes"),
    (lambda s: hp.Survey(s.sources[0], s.receivers, s.frequencies, s.data), "sources must be a list"),
    (lambda s: hp.Survey([1.0, 2.0, 3.0], s.receivers, s.frequencies, s.data), r"sources\[0\]"),
    (lambda s: hp.Survey([hp.PointSource([0.5])] * 3, s.receivers, s.frequencies, s.data), "1-D PointSource"),
    (lambda s: hp.Survey(s.sources, s.receivers, s.frequencies, s.data.real.astype(str)), "numeric"),
])
def test_bad_surveys_are_refused(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make(_small())


def test_receivers_outside_the_domain_or_in_the_pml():
    s = _small()
    s.validate(DOMAIN, hp.PML(0.2))
    s.receivers[2] = [1.1, 0.5]
    with pytest.raises(ValueError, match=r"receiver 2 at \[1.1, 0.5\] lies in the PML"):
        s.validate(DOMAIN, hp.PML(0.2))
    with pytest.raises(ValueError, match="receiver 2 .* lies outside the domain"):
        s.validate(DOMAIN)
    s.receivers[2] = [5.0, 0.5]
    with pytest.raises(ValueError, match="lies outside the domain"):
        s.validate(DOMAIN, hp.PML(0.2))


def test_synthetic_checks_everything_before_any_solve():
    calls = []

    def velocity(x):
        calls.append(len(x))
        return np.ones(len(x))

    src = [hp.PointSource([0.5, 0.5], width=0.05)]
    bad = [
        (dict(receivers=[[1.2, 0.5]]), "in the PML"),
        (dict(frequencies=[1.0, -1.0]), r"frequencies\[1\]"),
        (dict(noise=-0.1), "noise must be"),
        (dict(noise=float("nan")), "noise must be"),
        (dict(seed=1.5), "seed must be an integer"),
        (dict(sources=[]), "an empty survey"),
        (dict(pml="wide"), "pml must be a helmpinn.PML"),
    ]
    for change, message in bad:
        kw = dict(velocity=velocity, domain=DOMAIN, sources=src, receivers=[[0.3, 0.3]],
                  frequencies=[1.0], pml=hp.PML(0.3))
        kw.update(change)
        with pytest.raises((ValueError, TypeError), match=message):
            hp.Survey.synthetic(**kw)
    assert calls == []
    with pytest.raises(ValueError, match="velocity must be"):
        hp.Survey.synthetic(-1.0, DOMAIN, src, [[0.3, 0.3]], [1.0], pml=hp.PML(0.3))


def test_fuzz_survey_files_fail_only_with_a_value_error_naming_the_file(tmp_path):
    """Survey.load on archives whose entries have random dtypes and shapes, missing or extra:
    a Survey or a ValueError naming the file, nothing else."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    good = _arrays(_small())
    kinds = st.sampled_from(["keep", "drop", "float", "complex", "int", "bool", "str", "empty",
                             "scalar", "nan", "transpose"])

    @settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(changes=st.dictionaries(st.sampled_from(sorted(good)), kinds, max_size=3))
    def check(changes):
        arrays = dict(good)
        for key, how in changes.items():
            a = np.asarray(arrays[key])
            arrays.pop(key) if how == "drop" else None
            if how in ("float", "complex", "int", "bool"):
                arrays[key] = np.ones(a.shape, {"float": float, "complex": complex, "int": int,
                                                "bool": bool}[how])
            elif how == "str":
                arrays[key] = np.full(a.shape, "x")
            elif how == "empty":
                arrays[key] = np.zeros((0,) * max(a.ndim, 1))
            elif how == "scalar":
                arrays[key] = np.array(1.5)
            elif how == "nan":
                arrays[key] = np.full(a.shape, np.nan)
            elif how == "transpose":
                arrays[key] = a.T
        path = tmp_path / "fuzz.npz"
        _write(path, **arrays)
        try:
            s = hp.Survey.load(path)
        except ValueError as exc:
            assert str(path) in str(exc)
        else:
            assert np.all(np.isfinite(s.data)) and s.data.shape == (s.n_frequencies, s.n_sources, s.n_receivers)

    check()
