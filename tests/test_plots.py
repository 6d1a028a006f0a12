"""Figures (python/helmpinn/plots.py): the solution plot draws the medium when it varies (contour
lines of the velocity or the local wavenumber; a line on a second axis in 1-D) and none for a
homogeneous one; files are replaced only by whole ones; a background source on the plot grid."""
from __future__ import annotations

import numpy as np
import pytest
from matplotlib.contour import ContourSet
from matplotlib.figure import Figure

import helmpinn as hp
from helmpinn import plots
from helmpinn.problems.geometry import Box, Interval


def _contours(fig):
    return [c for ax in fig.axes for c in ax.collections if isinstance(c, ContourSet)]


def _images(fig):
    return [ax for ax in fig.axes if ax.images]


def _box_problem(**kw):
    exact = lambda x: np.exp(1j * 3.0 * x[:, 0])  # noqa: E731
    return hp.Problem(Box([0, 0], [1, 1]), bcs={"*": hp.Dirichlet(exact)}, exact=exact, **kw)


def test_a_varying_kappa_is_drawn_over_every_panel_and_a_constant_one_is_not():
    model = hp.Model.create(2, 4, 8, 1, dtype="float64")
    lens = _box_problem(kappa=lambda x: 9.0 * (1 + 0.5 * np.exp(-20 * np.sum((x - 0.5) ** 2, 1))))
    fig = plots.solution_figure(lens, model, n=41)
    images = _images(fig)
    assert len(images) == 4   # Re and Im, PINN and exact
    for ax in images:
        (cs,) = [c for c in ax.collections if isinstance(c, ContourSet)]
        # levels of k = sqrt(κ) over its range on the box, 3.00003 (corners) to 3.674 (centre)
        assert len(cs.levels) >= 4 and 2.9 <= min(cs.levels) and max(cs.levels) <= 3.8
        assert "local wavenumber" in ax.get_title()
    for homogeneous in (_box_problem(kappa=9.0), _box_problem(kappa=lambda x: np.full(len(x), 9.0))):
        fig = plots.solution_figure(homogeneous, model, n=41)
        assert len(_images(fig)) == 4 and _contours(fig) == []
        assert "contours" not in " ".join(ax.get_title() for ax in fig.axes)


def test_a_velocity_model_on_a_grid_is_drawn_as_velocity_contours():
    axis = np.linspace(-0.1, 1.1, 13)
    v = 1.0 + 0.5 * axis[None, :] + 0 * axis[:, None]          # faster with depth y
    vel = hp.GridField(v, origin=(-0.1, -0.1), spacing=0.1)
    prob = hp.Problem(Box([0, 0], [1, 1]), frequency=1.0, velocity=vel, bcs={"*": hp.Dirichlet(0.0)})
    fig = plots.solution_figure(prob, hp.Model.create(prob, 4, 8, 1), n=31)
    sets = _contours(fig)
    assert len(sets) == 2 and all("velocity" in ax.get_title() for ax in _images(fig))
    assert len(sets[0].levels) >= 4 and 0.9 <= min(sets[0].levels) and max(sets[0].levels) <= 1.6


def test_a_1d_medium_is_a_line_on_a_second_axis():
    kappa = lambda x: (4.0 + x[:, 0]) ** 2  # noqa: E731
    prob = hp.Problem(Interval(0.0, 1.0), kappa=kappa, bcs={"*": hp.Dirichlet(0.0)})
    fig = plots.solution_figure(prob, hp.Model.create(prob, 4, 8, 1), n=101)
    twins = [ax for ax in fig.axes if ax.get_ylabel() == "local wavenumber"]
    assert len(twins) == 1
    x, k = twins[0].lines[0].get_data()
    np.testing.assert_allclose(k, 4.0 + x, rtol=1e-12)
    plain = hp.Problem(Interval(0.0, 1.0), kappa=16.0, bcs={"*": hp.Dirichlet(0.0)})
    fig = plots.solution_figure(plain, hp.Model.create(plain, 4, 8, 1), n=101)
    assert len(fig.axes) == 2


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    prob = _box_problem(kappa=9.0)
    model = hp.Model.create(prob, 4, 8, 1)
    target = tmp_path / "solution.png"
    target.write_bytes(b"old figure")

    def broken(self, fh, **kw):
        fh.write(b"half a PNG")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken)
    with pytest.raises(OSError, match="disk full"):
        plots.plot_solution(prob, model, target, n=11)
    assert target.read_bytes() == b"old figure"
    assert [p.name for p in tmp_path.iterdir()] == ["solution.png"]
    monkeypatch.undo()
    assert plots.plot_solution(prob, model, target, n=11) == str(target)
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_of_a_background_source_on_the_grid(tmp_path):
    # the source at the box's centre is a node of the plot grid: the exact scattered field is
    # NaN (blank) there, the rest is drawn
    src = hp.sources.FreeSpaceSource((0.0, 0.0), 4.0)
    prob = hp.Problem(Box([-1, -1], [1, 1]), kappa=16.0, bcs={}, pml=hp.PML(0.5), background=src, exact=src)
    model = hp.Model.create(prob, 4, 8, 1, dtype="float64")
    files = plots.plot_all(prob, model, {"step": [0, 1], "loss": [1.0, 0.5]}, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["error.png", "history.png", "solution.png"]
    assert len(files) == 3
