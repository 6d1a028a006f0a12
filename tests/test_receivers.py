"""Receivers (python/helmpinn/receivers.py): a trained field sampled along a line, saved as .npz
and plotted; with a scattered-field problem the total field is the network's plus u0."""
from __future__ import annotations

import math

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.receivers import load_recording, plot_recording, receiver_line, record, save_recording


def test_a_line_of_receivers_records_the_field_and_round_trips(tmp_path):
    model = hp.Model.create(2, 8, 16, 2, dtype="float64", seed=3)
    x = receiver_line((-1.0, 0.5), (1.0, -0.5), 41)
    assert x.shape == (41, 2) and np.allclose(x[0], [-1, 0.5]) and np.allclose(x[-1], [1, -0.5])
    rec = record(model, x)
    u = model.predict(x)
    np.testing.assert_array_equal(rec["u"], u)
    np.testing.assert_allclose(rec["distance"][-1], math.hypot(2.0, 1.0), rtol=1e-14)
    np.testing.assert_allclose(rec["amplitude"] * np.exp(1j * rec["phase"]), u, rtol=1e-12)
    assert np.all(np.abs(np.diff(rec["phase"])) < math.pi)  # unwrapped
    assert "u_scattered" not in rec
    save_recording(tmp_path / "line.npz", rec)
    back = load_recording(tmp_path / "line.npz")
    assert sorted(back) == sorted(rec)
    for key in rec:
        np.testing.assert_array_equal(back[key], rec[key])
    plot_recording(rec, tmp_path / "line.png", title="test")
    assert (tmp_path / "line.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["line.npz", "line.png"]  # no temporaries


def test_a_scattered_field_problem_records_the_total_field(tmp_path):
    src = hp.sources.FreeSpaceSource((0.0, 0.0), 4.0)
    prob = hp.Problem(Box([-1, -1], [1, 1]), kappa=16.0, bcs={}, pml=hp.PML(0.5), background=src)
    model = hp.Model.create(2, 8, 16, 2, dtype="float64", seed=4)
    pts = np.array([[0.5, 0.5], [0.7, -0.2], [-0.9, 0.1]])  # a point set, not a line
    rec = record(model, pts, prob)
    np.testing.assert_array_equal(rec["u_scattered"], model.predict(pts))
    np.testing.assert_allclose(rec["u"], model.predict(pts) + src(pts), rtol=1e-14)
    plot_recording(rec, tmp_path / "pts.png")
    assert (tmp_path / "pts.png").stat().st_size > 0


def test_receiver_errors():
    model = hp.Model.create(2, 4, 8, 1, dtype="float64")
    with pytest.raises(ValueError, match="n must be an integer >= 2"):
        receiver_line((0, 0), (1, 1), 1)
    with pytest.raises(ValueError, match="same dimension"):
        receiver_line((0, 0), (1, 1, 1), 5)
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        record(model, np.zeros((3, 3)))
    with pytest.raises(ValueError, match="finite"):
        record(model, np.array([[0.0, np.nan]]))


def test_the_plot_draws_amplitude_and_phase_along_the_line(tmp_path):
    model = hp.Model.create(2, 8, 16, 2, dtype="float64", seed=3)
    rec = record(model, receiver_line((-1.0, 0.0), (1.0, 0.0), 21))
    fig = plot_recording(rec, tmp_path / "line.png")
    amp_ax, phase_ax = fig.axes
    (amp,), (phase,) = amp_ax.lines, phase_ax.lines
    np.testing.assert_array_equal(amp.get_xdata(), rec["distance"])
    np.testing.assert_array_equal(amp.get_ydata(), rec["amplitude"])
    np.testing.assert_array_equal(phase.get_ydata(), rec["phase"])
    assert "amplitude" in amp_ax.get_ylabel() and "phase" in phase_ax.get_ylabel()


def test_a_receiver_at_the_background_source_records_nan_and_the_rest_is_kept(tmp_path):
    # a surface survey through the source: receiver 10 of 21 sits exactly on it
    src = hp.sources.FreeSpaceSource((0.0, 0.5), 4.0)
    prob = hp.Problem(Box([-1, -1], [1, 1]), kappa=16.0, bcs={}, pml=hp.PML(0.5), background=src)
    model = hp.Model.create(prob, 8, 16, 2, dtype="float64", seed=4)
    x = receiver_line((-1.0, 0.5), (1.0, 0.5), 21)
    rec = record(model, x, prob)
    bad = np.isnan(rec["u"])
    assert bad.tolist() == [i == 10 for i in range(21)]
    assert np.isnan(rec["amplitude"][10]) and np.isnan(rec["phase"][10])
    ok = ~bad
    np.testing.assert_allclose(rec["u"][ok], model.predict(x[ok]) + src(x[ok]), rtol=1e-14)
    np.testing.assert_allclose(rec["amplitude"][ok] * np.exp(1j * rec["phase"][ok]), rec["u"][ok], rtol=1e-12)
    assert np.all(np.abs(np.diff(rec["phase"][ok])) < math.pi)   # unwrapped across the gap
    assert np.all(np.isfinite(rec["u_scattered"]))
    save_recording(tmp_path / "survey.npz", rec)
    assert np.isnan(load_recording(tmp_path / "survey.npz")["u"][10])
    plot_recording(rec, tmp_path / "survey.png")
