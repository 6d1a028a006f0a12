"""helmpinn.problems.jumps: finding a medium's jumps, the averages of κ about them, fd_solve's treatment of
a jump (its order there, its warning) and the medium hp.solve trains on (float64 throughout)."""
import warnings
from fractions import Fraction

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Box, Interval
from helmpinn.problems.jumps import (RAMP_WEIGHT, SMOOTHING_PER_WAVELENGTH, average_kappa, find_grid_jumps,
                                     find_jumps, problem_jumps, smoothed_kappa, training_problem)
from helmpinn.problems.media import GridField
from helmpinn.reference import fd_solve
from helmpinn.reference.fd import MediumJumpWarning


def _axes(n=65):
    return [np.linspace(0.0, 1.0, n), np.linspace(0.0, 1.0, n)]


@pytest.mark.parametrize("at", [0.3137, 0.5])   # between nodes, and on a node (0.5 = node 32 of 64)
def test_a_step_is_found_on_its_interface(at):
    kappa = lambda x: np.where(x[:, 0] < at, 36.0, 144.0)   # noqa: E731
    found = find_jumps(kappa, _axes())
    h = 1 / 64
    assert len(found) == 65            # one pair per row of the grid
    assert np.all(found.axis == 0)
    assert np.all(np.abs(found.points[:, 0] - at) <= h / 2 + 1e-12)
    assert found.largest == pytest.approx(0.75)


def test_a_resolved_ramp_and_a_constant_have_no_jump():
    ramp = lambda x: 36.0 * (2.5 + 1.5 * np.tanh((x[:, 0] - 0.4) / 0.05))   # noqa: E731
    ax = _axes(129)
    mesh = np.stack([m.ravel() for m in np.meshgrid(*ax, indexing="ij")], axis=1)
    v = ramp(mesh).reshape(129, 129)
    assert (np.abs(np.diff(v, axis=0)) / v[1:] > 0.05).any()        # steep enough to be probed again
    assert not find_jumps(ramp, ax)
    assert not find_jumps(lambda x: np.full(len(x), 36.0), ax)


def test_grid_jumps_are_steps_not_ramps():
    v = np.ones((20, 10))
    v[12:] = 0.5                                   # a step between rows 11 and 12
    found = find_grid_jumps(v, origin=(1.0, -2.0), spacing=0.1)
    assert len(found) == 10 and np.all(found.axis == 0)
    np.testing.assert_allclose(found.points[:, 0], 1.0 + 11.5 * 0.1)
    ramp = np.linspace(1.0, 3.0, 20)[:, None] * np.ones((1, 10))   # steps of 5-10% each, alike
    assert not find_grid_jumps(ramp, origin=(0, 0), spacing=0.1)


def _disc(velocity_inside=0.7):
    c = np.array([0.5, 0.5])
    v = lambda x: np.where(np.linalg.norm(x - c, axis=1) <= 0.25, velocity_inside, 1.0)   # noqa: E731
    return hp.Problem(Box([0, 0], [1, 1]), frequency=1.5, velocity=v, source=hp.PointSource((0.5, 0.5)),
                      bcs={}, pml=hp.PML(0.3))


def test_problem_jumps_lie_on_the_disc():
    found = problem_jumps(_disc())
    assert found
    r = np.linalg.norm(found.points - 0.5, axis=1)
    assert np.all(np.abs(r - 0.25) <= found.spacing.max())
    assert not problem_jumps(_disc(1.0))                                   # no contrast
    assert not problem_jumps(hp.Problem(Box([0, 0], [1, 1]), kappa=30.0, bcs={"*": hp.Dirichlet(0)}))


def test_a_grid_field_with_a_step_has_jumps_through_the_problem():
    g = np.linspace(-0.5, 1.5, 41)
    v = np.where(g[:, None] + 0 * g[None, :] > 0.52, 0.6, 1.0)
    field = GridField(v, origin=(-0.5, -0.5), spacing=g[1] - g[0])
    grid = find_grid_jumps(field.values, field.origin, field.spacing)
    assert len(grid) == 41 and np.allclose(grid.points[:, 0], 0.525)
    p = hp.Problem(Box([0, 0], [1, 1]), frequency=1.0, velocity=field, source=hp.PointSource((0.5, 0.5)),
                   bcs={}, pml=hp.PML(0.5))
    found = problem_jumps(p)    # the grid's own steps (its spline steps within one cell)
    assert len(found) == 41 and np.allclose(found.points[:, 0], 0.525)


@pytest.mark.parametrize("order", [2, 4])
def test_average_kappa_of_a_step_is_the_exact_integral(order):
    """The kernels are piecewise linear with kinks at whole multiples of h; the midpoint rule
    integrates them exactly when the step lies on a quadrature cell's edge (θ = 1/4 of h)."""
    h, theta = 0.1, Fraction(1, 4)
    k1, k2 = 9.0, 25.0
    kappa = lambda x: np.where(x[:, 0] < 0.3 + float(theta) * h, k1, k2)   # noqa: E731
    got = average_kappa(kappa, np.array([[0.3]]), [h], order=order, m=16)
    hat = (1 - theta) ** 2 / 2                                  # ∫_θ^1 (1 − t) dt
    wide = (2 - theta) - (4 - theta ** 2) / 4                    # ∫_θ^2 (1 − t/2) dt
    beyond = hat if order == 2 else Fraction(4, 3) * hat - Fraction(1, 6) * wide
    np.testing.assert_allclose(got, k1 + (k2 - k1) * float(beyond), rtol=1e-14)


def test_average_kappa_moments_in_2d():
    """Both kernels keep a linear κ; the hat adds h²/6 to x², the order-4 kernel nothing."""
    x = np.array([[0.3, -0.2], [1.1, 0.7]])
    h = (0.05, 0.02)
    lin = lambda p: 2.0 + 3.0 * p[:, 0] - 5.0 * p[:, 1]   # noqa: E731
    sq = lambda p: p[:, 0] ** 2 + p[:, 1] ** 2            # noqa: E731
    for order in (2, 4):
        np.testing.assert_allclose(average_kappa(lin, x, h, order=order).real, lin(x), rtol=1e-13)
    second = (h[0] ** 2 + h[1] ** 2) / 6       # the midpoint rule is exact to 1/m² of it
    np.testing.assert_allclose(average_kappa(sq, x, h, order=2).real - sq(x), second, rtol=2e-3)
    assert np.all(np.abs(average_kappa(sq, x, h, order=4).real - sq(x)) < 1e-2 * second)
    with pytest.raises(ValueError, match="average_kappa: order must be 2 or 4"):
        average_kappa(sq, x, h, order=3)
    with pytest.raises(ValueError, match="average_kappa: m must be an even integer"):
        average_kappa(sq, x, h, m=7)


def _layered_1d(a, k1=7.0, k2=13.0):
    """u = C e^{ik₂x} right of a, A e^{ik₁x} + B e^{−ik₁x} left of it; u, u′ continuous at a."""
    m = np.array([[np.exp(1j * k1 * a), np.exp(-1j * k1 * a)],
                  [1j * k1 * np.exp(1j * k1 * a), -1j * k1 * np.exp(-1j * k1 * a)]])
    A, B = np.linalg.solve(m, [np.exp(1j * k2 * a), 1j * k2 * np.exp(1j * k2 * a)])

    def exact(x):
        x = x[:, 0]
        return np.where(x < a, A * np.exp(1j * k1 * x) + B * np.exp(-1j * k1 * x), np.exp(1j * k2 * x))
    kappa = lambda x: np.where(x[:, 0] < a, k1 ** 2, k2 ** 2)   # noqa: E731
    return hp.Problem(Interval(0, 1), kappa=kappa, source=None, bcs={"*": hp.Dirichlet(exact)}, exact=exact), exact


def _worst_error(n, jumps, order):
    worst = 0.0
    for a in (0.41, 0.43, 0.45, 0.47):
        p, exact = _layered_1d(a)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", MediumJumpWarning)
            s = fd_solve(p, 1 / n, jumps=jumps, order=order)
        x = s.axes[0][:, None]
        worst = max(worst, np.linalg.norm(s.values.ravel() - exact(x)) / np.linalg.norm(exact(x)))
    return worst


def test_fd_solve_converges_at_second_order_across_a_jump_and_first_when_sampled():
    avg = [_worst_error(n, "average", 2) for n in (80, 160, 320)]
    smp = [_worst_error(n, "sample", 2) for n in (80, 160, 320)]
    assert np.all(np.log2(np.array(avg[:-1]) / avg[1:]) > 1.8), avg
    assert np.all(np.log2(np.array(smp[:-1]) / smp[1:]) < 1.3), smp
    # the fourth-order stencil with its own kernel's average: far below the sampled medium's error
    assert _worst_error(160, "average", 4) < _worst_error(160, "sample", 4) / 20


def test_fd_solve_warns_about_a_jump_and_not_about_a_smooth_medium():
    p = _disc()
    with pytest.warns(MediumJumpWarning, match=r"the medium jumps .* second order or better .* halve h"):
        fd_solve(p, 0.05)
    with pytest.warns(MediumJumpWarning, match=r"first order there: leave jumps='average'"):
        fd_solve(p, 0.05, jumps="sample")
    smooth = lambda x: 1.0 - 0.15 * (1 - np.tanh((np.linalg.norm(x - 0.5, axis=1) - 0.25) / 0.08))   # noqa: E731
    q = hp.Problem(Box([0, 0], [1, 1]), frequency=1.5, velocity=smooth, source=hp.PointSource((0.5, 0.5)),
                   bcs={}, pml=hp.PML(0.3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fd_solve(q, 0.05)
    with pytest.raises(ValueError, match="fd_solve: jumps must be one of"):
        fd_solve(p, 0.05, jumps="smooth")


def test_fd_solve_of_a_smooth_medium_is_unchanged_by_the_jump_search():
    smooth = lambda x: 1.0 + 0.2 * np.sin(3 * x[:, 0]) * np.cos(2 * x[:, 1])   # noqa: E731
    q = hp.Problem(Box([0, 0], [1, 1]), frequency=1.5, velocity=smooth, source=hp.PointSource((0.5, 0.5)),
                   bcs={}, pml=hp.PML(0.3))
    a = fd_solve(q, 0.05).values
    b = fd_solve(q, 0.05, jumps="sample").values
    assert np.array_equal(a, b)


def test_training_problem_smooths_only_near_the_jumps():
    p = _disc()
    same, none = training_problem(p)
    assert same is not p and none
    x = np.random.default_rng(0).uniform(-0.3, 1.3, (4000, 2))
    r = np.linalg.norm(x - 0.5, axis=1)
    w = 0.1 * 2 * np.pi / p.wavenumber
    far = np.abs(r - 0.25) > 2 * w * np.sqrt(2) + 0.01
    assert np.array_equal(same.kappa_at(x)[far], p.kappa_at(x)[far])
    ks = same.kappa_at(x)
    assert len(np.unique(p.kappa_at(x))) == 2 and same.medium is not p.medium   # the user's problem keeps its jump
    lo, hi = np.min(p.kappa_at(x)), np.max(p.kappa_at(x))
    assert np.any((ks > lo * 1.01) & (ks < hi * 0.99))      # ramps between the two sides
    q = _disc(1.0)
    assert training_problem(q) == (q, None)
    assert training_problem(p, "off") == (p, None)
    with pytest.raises(ValueError, match="jumps: expected 'auto', 'off'"):
        training_problem(p, "smooth")
    with pytest.raises(ValueError, match="jumps"):
        training_problem(p, -1.0)


def test_training_problem_weighs_its_ramps_rows_down():
    """The PDE rows within 2 w of the jump (w the smoothing's half-width, plus half the probes'
    spacing) take RAMP_WEIGHT in the training problem's draws, every other row 1; the user's
    problem draws its rows unweighted, and a medium without jumps has no such weights."""
    p = _disc()
    tp, found = training_problem(p)
    assert tp.sampler is not p.sampler and p.sampler.row_weights is None
    x, w = tp.sampler.sample_pde(4000, np.random.default_rng(0), "sobol", [], 0.0)
    d = np.abs(np.linalg.norm(x - 0.5, axis=1) - 0.25)
    width = SMOOTHING_PER_WAVELENGTH * 2 * np.pi / p.wavenumber
    reach = 2 * width + 0.5 * np.max(found.spacing)
    assert np.all(w[d < 2 * width] == RAMP_WEIGHT) and np.all(w[d > reach + np.max(found.spacing)] == 1.0)
    assert 0 < np.mean(w < 1) < 0.2
    x0, w0 = p.sampler.sample_pde(4000, np.random.default_rng(0), "sobol", [], 0.0)
    assert w0 is None and np.array_equal(x0, x)
    assert training_problem(_disc(1.0))[0].sampler.row_weights is None


def test_smoothed_kappa_is_the_average_near_a_jump():
    kappa = lambda x: np.where(x[:, 0] < 0.5, 10.0, 40.0)   # noqa: E731
    found = find_jumps(kappa, _axes())
    k = smoothed_kappa(kappa, found, 0.02)
    x = np.array([[0.49, 0.3], [0.9, 0.3]])
    np.testing.assert_allclose(k(x)[0], average_kappa(kappa, x[:1], 0.02, order=4, m=8).real, rtol=1e-14)
    assert k(x)[1] == 40.0
