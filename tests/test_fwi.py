"""helmpinn.reference.fwi: classical adjoint-state FWI on fd_solve's operator."""
import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.reference import fwi as fwi_function
from helmpinn.reference.fwi import FWIObjective, _medium_axes

BOX = Box([0.0, 0.0], [1.0, 1.0])


def _random_survey(seed=0):
    rng = np.random.default_rng(seed)
    src = [hp.PointSource([0.2, 0.3], width=0.08), hp.PointSource([0.8, 0.6], amplitude=1j, width=0.08)]
    rec = rng.uniform(0.1, 0.9, (6, 2))
    data = rng.normal(size=(2, 2, 6)) + 1j * rng.normal(size=(2, 2, 6))
    return hp.Survey(src, rec, [1.0, 1.5], data, rng.uniform(0.5, 1.5, (2, 2, 6)))


@pytest.mark.parametrize("pml", [hp.PML(0.3), None], ids=["pml", "absorbing-faces"])
def test_the_adjoint_state_gradient_is_the_derivative(pml):
    """∂J/∂m by the adjoint state against central differences of J (float64), data misfit of
    two frequencies and two sources with weights, plus the Tikhonov term."""
    rng = np.random.default_rng(1)
    axes = _medium_axes(BOX, 0.2)
    shape = tuple(len(a) for a in axes)
    m0 = 1 + 0.2 * rng.uniform(size=shape)
    obj = FWIObjective(_random_survey(), [1.0, 1.5], domain=BOX, pml=pml, medium_axes=axes,
                       m_initial=m0, h=1 / 16, regularization=1e-3, m_scale=1.0)
    x = m0.ravel() * (1 + 0.1 * rng.uniform(size=m0.size))
    f, g, data = obj(x)
    assert 0 < data < f
    for _ in range(2):
        d = rng.normal(size=x.size)
        eps = 1e-5
        fd = (obj(x + eps * d)[0] - obj(x - eps * d)[0]) / (2 * eps)
        assert abs(fd - g @ d) < 1e-6 * abs(g @ d), (fd, g @ d)


def _true(x):
    return 1.0 + 0.25 * np.exp(-((x[:, 0] - 0.5) ** 2 + (x[:, 1] - 0.5) ** 2) / (2 * 0.12**2))


def _ring_survey():
    t = 2 * np.pi * np.arange(6) / 6
    src = [hp.PointSource([0.5 + 0.4 * np.cos(a), 0.5 + 0.4 * np.sin(a)], width=0.06) for a in t]
    tr = 2 * np.pi * (np.arange(18) + 0.5) / 18
    rec = np.stack([0.5 + 0.4 * np.cos(tr), 0.5 + 0.4 * np.sin(tr)], axis=1)
    return hp.Survey.synthetic(_true, BOX, src, rec, [1.0, 1.5], pml=hp.PML(0.4), h=1 / 40)


def test_a_tiny_inversion_reduces_the_misfit_and_the_velocity_error():
    survey = _ring_survey()
    seen = []
    r = fwi_function(survey, 1.0, domain=BOX, pml=hp.PML(0.3), bounds=(0.8, 1.6), max_iter=8,
                     true=_true, callback=lambda info: seen.append(info) and False)
    misfit = r.history["misfit"]
    err = r.history["velocity_error"]
    assert r.initial_error == pytest.approx(1.0)
    assert misfit[-1] < 0.2 * misfit[0] and err[-1] < 0.6, (misfit, err)
    assert [f[0] for f in r.history["frequencies"]][0] == 1.0 and r.history["frequencies"][-1] == [1.5]
    assert len(seen) == len(misfit) and r.stopped == "max_iter in every group"
    assert isinstance(r.velocity, hp.GridField) and np.all(r.velocity.values >= 0.8 - 1e-12)
    np.testing.assert_allclose(r.velocity.values, r.medium.values ** -0.5, rtol=1e-12)


def test_time_limit_and_callback_stop_it():
    survey = _ring_survey()
    r = fwi_function(survey, 1.0, domain=BOX, pml=hp.PML(0.3), bounds=(0.8, 1.6), max_iter=50,
                     time_limit=1e-9)
    assert r.stopped == "time_limit" and r.history["misfit"] == []
    np.testing.assert_array_equal(r.velocity.values, 1.0)
    r = fwi_function(survey, 1.0, domain=BOX, pml=hp.PML(0.3), bounds=(0.8, 1.6), max_iter=50,
                     callback=lambda info: True)
    assert r.stopped == "callback" and len(r.history["misfit"]) == 1


@pytest.mark.parametrize("change, message", [
    (dict(bounds=(1.2, 2.0)), r"bounds \(1.2, 2.0\) exclude the initial model"),
    (dict(initial=lambda x: 1 + x[:, 0]), "exclude the initial model"),
    (dict(bounds=(1.5, 1.0)), r"bounds\[1\] \(v_max\) must be a finite number > 1.5"),
    (dict(bounds=(0.0, 2.0)), r"bounds\[0\] \(v_min\) must be"),
    (dict(bounds=1.0), "bounds must be"),
    (dict(initial=-1.0), "initial must be"),
    (dict(initial=lambda x: np.full(len(x), np.nan)), "initial must give finite velocities"),
    (dict(frequencies=[1.0, 2.5]), "frequency 2.5 .* is not one of the survey's"),
    (dict(max_iter=0), "max_iter must be an integer >= 1"),
    (dict(time_limit=-1.0), "time_limit must be"),
    (dict(regularization=float("nan")), "regularization must be"),
    (dict(pml="0.3"), "pml must be a helmpinn.PML"),
    (dict(survey=[1, 2]), "survey must be a helmpinn.Survey"),
    (dict(domain=Box([0.0, 0.0], [0.5, 0.5])), "receiver .* lies in the PML"),
    (dict(callback=3), "callback must be callable"),
    (dict(true=lambda x: np.zeros(len(x))), "true must give finite velocities > 0"),
])
def test_bad_input_is_one_clear_error_before_any_solve(monkeypatch, change, message):
    built = []
    monkeypatch.setattr(FWIObjective, "__init__", lambda self, *a, **k: built.append(1))
    kw = dict(survey=_random_survey(), initial=1.0, domain=BOX, pml=hp.PML(0.3), bounds=(0.8, 1.6))
    kw.update(change)
    survey, initial = kw.pop("survey"), kw.pop("initial")
    with pytest.raises((ValueError, TypeError), match=message):
        fwi_function(survey, initial, **kw)
    assert built == []


@pytest.mark.parametrize("d", [1, 3])
def test_the_gradient_in_one_and_three_dimensions(d):
    from helmpinn.problems.geometry import Interval

    rng = np.random.default_rng(d)
    dom = Interval(0.0, 1.0) if d == 1 else Box(np.zeros(d), np.ones(d))
    src = [hp.PointSource(np.full(d, 0.3), width=0.1), hp.PointSource(np.full(d, 0.7), width=0.1)]
    rec = rng.uniform(0.1, 0.9, (5, d))
    survey = hp.Survey(src, rec, [1.0], rng.normal(size=(1, 2, 5)) + 1j * rng.normal(size=(1, 2, 5)))
    axes = _medium_axes(dom, 0.3)
    m0 = 1 + 0.2 * rng.uniform(size=tuple(len(a) for a in axes))
    obj = FWIObjective(survey, [1.0], domain=dom, pml=hp.PML(0.3), medium_axes=axes, m_initial=m0,
                       h=1 / 8 if d == 3 else 1 / 40, regularization=1e-3, m_scale=1.0)
    x = m0.ravel()
    g = obj(x)[1]
    direction = rng.normal(size=x.size)
    eps = 1e-5
    fd = (obj(x + eps * direction)[0] - obj(x - eps * direction)[0]) / (2 * eps)
    assert abs(fd - g @ direction) < 1e-6 * abs(g @ direction)


# -- continuing a stopped run (start=) -------------------------------------------------------------
RUN = dict(domain=BOX, pml=hp.PML(0.3), bounds=(0.8, 1.6), max_iter=4, true=_true)


@pytest.fixture(scope="module")
def ring():
    survey = _ring_survey()
    return survey, fwi_function(survey, 1.0, **RUN)


def _stop_at(k):
    return lambda info: info["iteration"] == k


def _same(a, b):
    assert np.array_equal(a.medium.values, b.medium.values) and a.stopped == b.stopped
    assert {k: v for k, v in a.history.items() if k != "time"} == {k: v for k, v in b.history.items() if k != "time"}


def test_a_run_stopped_between_groups_continues_as_the_uninterrupted_run(ring, tmp_path):
    """Stopped at the first group's last iteration, saved, loaded and continued (initial None):
    the later group starts from the same medium with a fresh L-BFGS-B in both runs, so the
    result is the uninterrupted run's bit for bit."""
    survey, full = ring
    first = sum(g == [1.0] for g in full.history["frequencies"])
    assert full.resume is None and 1 <= first <= RUN["max_iter"] < len(full.history["time"])
    stopped = fwi_function(survey, 1.0, **RUN, callback=_stop_at(first))
    assert stopped.stopped == "callback" and stopped.resume["group"] == 0
    assert stopped.resume["iterations"] == first and len(stopped.history["time"]) == first
    path = stopped.save(tmp_path / "stopped.npz")
    back = hp.reference.FWIResult.load(path)
    assert all(np.array_equal(back.resume[k], stopped.resume[k]) for k in ("x", "group_start", "x_initial"))
    done = fwi_function(survey, None, **RUN, start=path)
    _same(done, full)
    assert done.resume is None and done.initial_error == full.initial_error and done.n_solves == full.n_solves


def test_a_run_stopped_inside_a_group_continues_its_objective_from_its_best_medium(ring, monkeypatch):
    """Stopped at iteration 2 of 4 in the first group: the continued run evaluates the same
    objective (the group's operator from the medium it started from), first at the stopped
    run's best medium, where it has the stopped run's best value bit for bit; the group then
    runs its 2 remaining iterations (L-BFGS-B's memory starts empty: other steps than the
    uninterrupted run's) and the later group follows."""
    survey, full = ring
    stopped = fwi_function(survey, 1.0, **RUN, callback=_stop_at(2))
    assert stopped.resume["iterations"] == 2 and np.array_equal(stopped.resume["group_start"],
                                                                 stopped.resume["x_initial"])
    seen = []
    call = FWIObjective.__call__

    def record(self, x):
        out = call(self, x)
        seen.append((x.copy(), out[0]))
        return out
    monkeypatch.setattr(FWIObjective, "__call__", record)
    done = fwi_function(survey, 1.0, **RUN, start=stopped)
    assert np.array_equal(seen[0][0], stopped.resume["x"]) and seen[0][1] == stopped.history["objective"][-1]
    groups = done.history["frequencies"]
    assert groups[:2] == stopped.history["frequencies"] and done.history["objective"][:2] == stopped.history["objective"]
    assert 2 < sum(g == [1.0] for g in groups) <= RUN["max_iter"] and groups[-1] == [1.5]
    assert done.history["objective"][2] <= stopped.history["objective"][1]
    assert done.resume is None and done.stopped == "max_iter in every group" and done.n_solves > stopped.n_solves
    # it still inverts: the misfit falls as the uninterrupted run's does (not to the same bits)
    assert done.history["misfit"][-1] < 0.01 * full.history["misfit"][0]


def test_time_limit_stop_continues(ring):
    survey, _ = ring
    stopped = fwi_function(survey, 1.0, **{**RUN, "max_iter": 50}, time_limit=1e-9)
    assert stopped.stopped == "time_limit" and stopped.resume == {**stopped.resume, "group": 0, "iterations": 0}
    done = fwi_function(survey, None, **RUN, start=stopped)
    assert done.resume is None and len(done.history["time"]) > 0


def test_continuing_refuses_what_does_not_continue(ring, tmp_path):
    survey, full = ring
    with pytest.raises(ValueError, match="nothing to continue"):
        fwi_function(survey, 1.0, **RUN, start=full)
    stopped = fwi_function(survey, 1.0, **RUN, callback=_stop_at(1))
    with pytest.raises(ValueError, match="regularization 0.0001 there, 0.001 here"):
        fwi_function(survey, None, **{**RUN, "regularization": 1e-3}, start=stopped)
    with pytest.raises(ValueError, match="bounds"):
        fwi_function(survey, None, **{**RUN, "bounds": (0.7, 1.6)}, start=stopped)
    other = _ring_survey()
    other.data[0, 0, 0] *= 2
    with pytest.raises(ValueError, match="survey"):
        fwi_function(other, None, **RUN, start=stopped)
    with pytest.raises(ValueError, match="initial is not the initial model"):
        fwi_function(survey, 1.1, **RUN, start=stopped)
    with pytest.raises(TypeError, match="start must be"):
        fwi_function(survey, None, **RUN, start=3)
    with pytest.raises(TypeError, match="initial .* is required"):
        fwi_function(survey, None, **RUN)
    (tmp_path / "bad.npz").write_bytes(b"not a file")
    with pytest.raises(ValueError, match="bad.npz"):
        fwi_function(survey, None, **RUN, start=tmp_path / "bad.npz")
    back = hp.reference.FWIResult.load(full.save(tmp_path / "full.npz"))
    _same(back, full)
    assert back.resume is None and back.history["time"] == full.history["time"]
