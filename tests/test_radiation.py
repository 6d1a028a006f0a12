"""The radiation rows (helmpinn.problems.radiation): columns, what they weigh, and the driver's use."""
import math

import numpy as np
import pytest
import scipy.sparse

import helmpinn as hp
from helmpinn import memory
from helmpinn.models.decomposition import DecomposedModel
from helmpinn.problems.geometry import Box
from helmpinn.problems.jumps import RAMP_WEIGHT, RampWeights, training_problem
from helmpinn.problems.radiation import (RADIATION_ANGLES, RADIATION_LEVEL_RATIO, RADIATION_MOST, RADIATION_RAMP_WEIGHT,
                                         RADIATION_WITH_JUMPS, radiation_count, radiation_rows, radiation_windows)
from helmpinn.training.dd_driver import GNDriver, GNSettings, sampled_problem


def open_problem(velocity=1.0):
    return hp.Problem(Box([-1, -1], [1, 1]), frequency=2.0, velocity=velocity, source=hp.PointSource((-0.5, 0.0)),
                      bcs={}, pml=hp.PML(0.5))


def points(n=20000, seed=0):
    x = np.random.default_rng(seed).uniform(-1.5, 1.5, size=(n, 2))
    pde = np.ones(n, bool)
    pde[:200] = False   # boundary rows, say
    return x, pde


def test_columns_are_windowed_plane_waves_of_the_given_weight():
    p = open_problem()
    x, pde = points()
    M = radiation_rows(p, x, pde, 8.0)
    assert scipy.sparse.issparse(M) and M.shape[0] == len(x)
    inside = pde & np.all(np.abs(x) <= 1, axis=1)
    D = M.toarray()
    assert not D[~inside].any()   # nothing off the PDE points or in the layer
    np.testing.assert_allclose(np.linalg.norm(D, axis=0), math.sqrt(63.0), rtol=1e-12)
    # windows 0.8 wavelengths apart (λ = 0.5 here): 6 a side, 2 columns per direction each
    assert M.shape[1] == 36 * 2 * RADIATION_ANGLES
    assert np.diff(M.indptr).max() <= 4 * 2 * RADIATION_ANGLES   # a point lies in at most 4 windows
    # a window's column is its bump times cos/sin of k d·x (k = 4π here): the first, the corner (-1, -1)
    c = D[:, 0]
    on = np.flatnonzero(c)
    h = 0.4
    bump = np.cos(0.5 * np.pi * (x[on, 0] + 1) / h) ** 2 * np.cos(0.5 * np.pi * (x[on, 1] + 1) / h) ** 2
    ratio = c[on] / (bump * np.cos(p.wavenumber * x[on, 0]))
    np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)


def test_they_weigh_a_radiating_residual_and_hardly_a_sharp_one():
    """A residual that is a plane wave at the wavenumber (in a direction between the table's) is
    seen by the rows with more than twice its norm; one at four times the wavenumber, with a
    few per cent: the loss then weighs the first ~150 times, the second ~3 times."""
    p = open_problem()
    x, pde = points()
    M = radiation_rows(p, x, pde, 8.0)
    inside = pde & np.all(np.abs(x) <= 1, axis=1)

    def seen(k, angle):
        r = np.where(inside, np.cos(k * (math.cos(angle) * x[:, 0] + math.sin(angle) * x[:, 1])), 0.0)
        return np.linalg.norm(M.T @ r) ** 2 / 63.0 / np.linalg.norm(r) ** 2

    k = p.wavenumber
    for angle in (0.3, 1.1, 2.0):
        assert seen(k, angle) > 2.0
        assert seen(4 * k, angle) < 0.06
        assert seen(2 * k, angle) < 0.25


def test_the_local_wavenumber_sets_each_window_and_nothing_for_a_below_one_or_3d():
    """A window takes the wavenumber at its centre; one that straddles a jump (k's ratio over it
    above RADIATION_LEVEL_RATIO) takes plane waves at each side's, the outside's first."""
    slow = open_problem(velocity=lambda x: np.where(np.all(np.abs(x) < 0.3, axis=1), 0.5, 1.0))
    x, pde = points()
    M = radiation_rows(slow, x, pde, 4.0).toarray()
    k = slow.local_wavenumber(np.array([[0.2, 0.2], [-1.0, -1.0]]))
    assert k[0] == pytest.approx(2 * k[1])
    centres, h, levels = radiation_windows(slow)
    assert np.allclose(centres[0], np.linspace(-1, 1, 6)) and np.allclose(h, 0.4)
    i = int(np.argmin(np.abs(centres[0] - 0.2)))
    assert levels[0] == [pytest.approx(k[1])]   # the corner window: the outside alone
    assert levels[i * 6 + i] == [pytest.approx(k[1]), pytest.approx(k[0])]   # over the slow square: both
    assert M.shape[1] == sum(len(w) for w in levels) * 2 * RADIATION_ANGLES == radiation_count(slow, 4.0)
    mild = open_problem(velocity=lambda x: np.where(np.all(np.abs(x) < 0.3, axis=1), 0.7, 1.0))   # 1.43 < 1.5
    assert all(len(w) == 1 for w in radiation_windows(mild)[2]) and RADIATION_LEVEL_RATIO == 1.5
    first = 2 * RADIATION_ANGLES * sum(len(w) for w in levels[:i * 6 + i])   # that window's first column

    def ratio(col, kk):
        on = np.flatnonzero(col)
        bump = np.prod(np.cos(0.5 * np.pi * (x[on] - centres[0][i]) / h[0]) ** 2, axis=1)
        return col[on] / (bump * np.cos(kk * x[on, 0]))
    for col, kk in ((M[:, first], k[1]), (M[:, first + 2 * RADIATION_ANGLES], k[0])):   # cos(k x), then cos(2k x)
        r = ratio(col, kk)
        np.testing.assert_allclose(r, r[0], rtol=1e-9)
    assert radiation_rows(slow, x, pde, 1.0) is None and radiation_rows(slow, x, pde, 0.0) is None
    x3 = np.random.default_rng(1).uniform(-1, 1, size=(50, 3))
    assert radiation_rows(slow, x3, np.ones(50, bool), 8.0) is None
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="radiation"):
            radiation_rows(slow, x, pde, bad)


def test_they_read_rows_weighted_down_at_full_size():
    """Where the sampler weighs PDE rows down (row_weights w: a smoothed jump's ramps, the rows
    carrying sqrt(w)), each column there is the plain one times 1/sqrt(w), renormalised; a row of
    weight 0 is not read."""
    x, pde = points()
    plain = radiation_rows(open_problem(), x, pde, 8.0).toarray()
    p = open_problem()

    def ramps(y):
        r = np.hypot(y[:, 0] - 0.2, y[:, 1])
        return np.where(r < 0.3, 0.25, np.where(r < 0.4, 0.0, 1.0))
    p.sampler.row_weights = ramps
    D = radiation_rows(p, x, pde, 8.0).toarray()
    assert D.shape == plain.shape
    np.testing.assert_allclose(np.linalg.norm(D, axis=0), math.sqrt(63.0), rtol=1e-12)
    w = ramps(x)
    assert not D[w == 0].any() and plain[w == 0].any()
    reads = np.where(w > 0, 1.0 / np.sqrt(np.where(w > 0, w, 1.0)), 0.0)
    for j in range(D.shape[1]):
        on = np.flatnonzero(plain[:, j] * reads)
        ratio = D[on, j] / (plain[on, j] * reads[on])
        np.testing.assert_allclose(ratio, ratio[0], rtol=1e-9)
    # a smoothed jump's problem (training_problem) reads its ramps (weight 1/4) twice as large
    slow = open_problem(velocity=lambda y: np.where(np.all(np.abs(y) < 0.3, axis=1), 0.5, 1.0))
    smooth = training_problem(slow)[0]
    on_ramp = smooth.sampler.row_weights(x) < 1
    read = radiation_rows(smooth, x, pde, 8.0).toarray()
    smooth.sampler.row_weights = None
    unread = radiation_rows(smooth, x, pde, 8.0).toarray()
    j = int(np.argmax(np.abs(unread[on_ramp]).sum(axis=0)))   # a column over the ramps
    on = np.flatnonzero(unread[:, j])
    ratio = read[on, j] / unread[on, j]
    assert on_ramp[on].any() and not on_ramp[on].all()
    np.testing.assert_allclose(ratio[on_ramp[on]] / ratio[~on_ramp[on]][0], 2.0, rtol=1e-9)


def test_the_driver_adds_them_as_mode_rows():
    """GNDriver(radiation=a): the residuals' mode rows are radiation_rows at the run's points;
    the trainer's gap reads the points' part of the loss (StepInfo.fit_loss)."""
    p = open_problem()
    model = DecomposedModel.create([-1.5, -1.5], [1.5, 1.5], [(3, 3)], wavenumber=p.wavenumber, seed=0,
                                   ff_dim=4, hidden_dim=8, overlap=0.6)
    t = hp.Trainer(p, model, pde_points=1500, bc_points=0, resample_every=0, eval_every=2, progress=False,
                   n_test=15, val_points=100)
    h = t.fit(2, optimizer=GNDriver(radiation=8.0))
    res = t.driver.gn.res
    rows = res.rows
    expected = radiation_rows(t.problem, rows.x, rows.term == "pde", 8.0)
    np.testing.assert_array_equal(res.modes.toarray(), expected.toarray())
    assert res.num_modes == expected.shape[1] and h.loss[-1] < h.loss[0]
    # the gap compares the validation loss with the points' part of the loss, not with the mode rows'
    r, n = res.residuals(t.model.params), res.num_points
    assert t.last_fit_loss == pytest.approx(float(r[:n] @ r[:n]), rel=1e-12) and t.last_fit_loss < 0.99 * h.loss[-1]
    assert t.last_gap == pytest.approx(h.eval_val_loss[-1] / t.last_fit_loss, rel=1e-12)
    with pytest.raises(ValueError, match="radiation"):
        GNSettings(radiation=-1.0)


def test_the_plan_adds_them_where_the_jumps_were_smoothed():
    """`hp.solve` and the CLI plan on the problem trained on: a decomposed run on a medium whose jumps
    were smoothed takes radiation rows of RADIATION_WITH_JUMPS where they fit; a smooth medium, the
    medium as given, or one too many wavelengths across, none."""
    slow = hp.Problem(Box([-1, -1], [1, 1]), frequency=2.0, source=hp.PointSource((-0.5, 0.0)), bcs={},
                      pml=hp.PML(0.5), velocity=lambda x: np.where(np.all(np.abs(x - 0.2) < 0.2, axis=1), 0.5, 1.0))
    trained, found = training_problem(slow)
    assert found and trained.smoothed_jumps is found
    assert hp.run_plan(trained, "decomposed", "gn").record()["gn"]["radiation"] == RADIATION_WITH_JUMPS
    assert hp.run_plan(slow, "decomposed", "gn").record()["gn"]["radiation"] == 0.0
    # the memory estimate counts their columns (two [P, 2q] arrays and the columns)
    q = radiation_count(trained, RADIATION_WITH_JUMPS)
    assert q == 360 and memory._modes(trained, "gn", {"radiation": RADIATION_WITH_JUMPS}, False)[0] == q   # 9 windows at two
    assert memory._modes(trained, "gn", {"radiation": 0.0}, False)[0] == 0
    wide = hp.Problem(Box([-3, -3], [3, 3]), frequency=2.0, source=hp.PointSource((-0.5, 0.0)), bcs={},
                      pml=hp.PML(0.5), velocity=lambda x: np.where(np.all(np.abs(x - 0.2) < 0.2, axis=1), 0.5, 1.0))
    assert training_problem(wide)[1] and radiation_count(training_problem(wide)[0], 8.0) == 0
    assert hp.run_plan(training_problem(wide)[0], "decomposed", "gn").record()["gn"]["radiation"] == 0.0
    smooth = open_problem()
    assert training_problem(smooth)[0] is smooth
    assert hp.run_plan(smooth, "decomposed", "gn").record()["gn"]["radiation"] == 0.0


def test_a_run_with_them_weighs_the_ramps_rows_as_they_ask():
    """The rows read the ramps at full size, so a run that adds them draws the ramps' PDE rows at
    RADIATION_RAMP_WEIGHT (the plan's Trainer, through sampled_problem); the problem trained on
    keeps RAMP_WEIGHT, and a run without them (a = 0, or a problem where they do not fit) draws it."""
    slow = hp.Problem(Box([-1, -1], [1, 1]), frequency=2.0, source=hp.PointSource((-0.5, 0.0)), bcs={},
                      pml=hp.PML(0.5), velocity=lambda x: np.where(np.all(np.abs(x - 0.2) < 0.2, axis=1), 0.5, 1.0))
    trained = training_problem(slow)[0]
    assert trained.sampler.row_weights.weight == RAMP_WEIGHT != RADIATION_RAMP_WEIGHT
    got = sampled_problem(trained, None, radiation=RADIATION_WITH_JUMPS)
    assert got is not trained and got.sampler.row_weights.weight == RADIATION_RAMP_WEIGHT
    assert trained.sampler.row_weights.weight == RAMP_WEIGHT
    x = np.random.default_rng(0).uniform(-1, 1, size=(3000, 2))
    ramp = trained.sampler.row_weights(x) < 1
    assert ramp.any() and np.array_equal(got.sampler.row_weights(x) < 1, ramp)
    assert np.all(got.sampler.row_weights(x)[ramp] == RADIATION_RAMP_WEIGHT)
    assert sampled_problem(trained, None) is trained and sampled_problem(slow, None, radiation=RADIATION_WITH_JUMPS) is slow
    assert sampled_problem(trained, None, radiation=1.0) is trained   # a <= 1: no rows
    wide = hp.Problem(Box([-3, -3], [3, 3]), frequency=2.0, source=hp.PointSource((-0.5, 0.0)), bcs={},
                      pml=hp.PML(0.5), velocity=lambda x: np.where(np.all(np.abs(x - 0.2) < 0.2, axis=1), 0.5, 1.0))
    wide = training_problem(wide)[0]   # windows of more than RADIATION_MOST columns: no rows to read the ramps
    assert isinstance(wide.sampler.row_weights, RampWeights) and sampled_problem(wide, None, radiation=8.0) is wide
    model = DecomposedModel.create([-1.5, -1.5], [1.5, 1.5], [(3, 3)], wavenumber=slow.wavenumber, seed=0,
                                   ff_dim=4, hidden_dim=8, overlap=0.6)
    for gn, weight in (({}, RADIATION_RAMP_WEIGHT), ({"radiation": 0.0}, RAMP_WEIGHT)):
        plan = hp.run_plan(trained, "decomposed", "gn", gn=gn, pde_points=500)
        assert plan.trainer(trained, model, progress=False).problem.sampler.row_weights.weight == weight


def test_no_rows_where_the_windows_would_take_more_than_radiation_most_columns():
    """A domain so many wavelengths across that windows 0.8 wavelengths apart would take more than
    RADIATION_MOST columns gets none; the spacing follows the median local wavelength, so a small
    slow region does not shrink it."""
    big = hp.Problem(Box([-5, -5], [5, 5]), frequency=2.0, velocity=1.0, source=hp.PointSource((0.0, 0.0)), bcs={},
                     pml=hp.PML(0.5))
    assert radiation_windows(big) is None and radiation_count(big, 8.0) == 0
    x = np.random.default_rng(2).uniform(-5, 5, size=(2000, 2))
    assert radiation_rows(big, x, np.ones(len(x), bool), 8.0) is None
    fits = hp.Problem(Box([-2, -2], [2, 2]), frequency=2.0, velocity=1.0, source=hp.PointSource((0.0, 0.0)), bcs={},
                      pml=hp.PML(0.5))   # 11 x 11 windows: 968 columns > 512
    assert radiation_windows(fits) is None
    assert radiation_count(open_problem(), 8.0) == 288 <= RADIATION_MOST
    slow = open_problem(velocity=lambda x: np.where(np.all(np.abs(x) < 0.3, axis=1), 0.5, 1.0))
    assert np.allclose(radiation_windows(slow)[1], 0.4)   # 0.8 of the outside wavelength, 0.5
