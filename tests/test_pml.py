"""Perfectly matched layers and variable density (python/helmpinn/problems/pml.py, Problem(pml=, density=)):
the coefficients against a direct NumPy evaluation, the layer's sampling, the 1-D outgoing wave
through the PML's equation, and the cylinder-scattering problems' exact solutions."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Ball, Box, BoxMinusBall, Disk, Interval


def _direct_coefficients(x, lo, hi, w, s0, p, k, rho=None, grad_rho=None):
    """a, b of the stretched operator, written out point by point."""
    n, d = x.shape
    a = np.empty((n, d), complex)
    b = np.empty((n, d), complex)
    for q in range(n):
        r = 1.0 if rho is None else rho[q]
        for j in range(d):
            if x[q, j] > hi[j]:
                t, sgn = (x[q, j] - hi[j]) / w, 1.0
            elif x[q, j] < lo[j]:
                t, sgn = (lo[j] - x[q, j]) / w, -1.0
            else:
                t, sgn = 0.0, 0.0
            s = 1 + 1j * s0 * t**p / k
            ds = 1j * sgn * s0 * p * t ** (p - 1) / w / k if t > 0 else 0.0
            gr = 0.0 if grad_rho is None else grad_rho[q, j]
            a[q, j] = 1 / (r * s * s)
            b[q, j] = -gr / (r * r * s * s) - ds / (r * s**3)
    return a, b


@pytest.mark.parametrize("d", [1, 2, 3])
@pytest.mark.parametrize("power", [1, 2, 3.5])
def test_pml_coefficients_match_a_direct_evaluation(d, power):
    rng = np.random.default_rng(d)
    lo, hi = -np.ones(d), np.linspace(1.0, 2.0, d)
    pml = hp.PML(0.7, strength=None if power == 2 else 9.0, power=power)
    dom = Interval(lo[0], hi[0]) if d == 1 else Box(lo, hi)
    k = 3.0
    prob = hp.Problem(dom, kappa=k * k, bcs={}, pml=pml)
    x = rng.uniform(lo - 0.7, hi + 0.7, (200, d))
    a, b = prob.operator_at(x)
    a_ref, b_ref = _direct_coefficients(x, lo, hi, 0.7, pml.strength, power, k)
    np.testing.assert_allclose(a, a_ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(b, b_ref, rtol=1e-13, atol=1e-15)
    inside = ~prob.in_layer(x)
    assert inside.any() and (~inside).any()
    assert np.all(a[inside] == 1) and np.all(b[inside] == 0)


def test_default_strength_gives_the_stated_reflection():
    for width, power in [(0.5, 2), (1.0, 2), (2.0, 3)]:
        pml = hp.PML(width, power=power)
        assert math.isclose(pml.strength, (power + 1) * math.log(1e4) / (2 * width))
        assert math.isclose(pml.reflection(), 1e-4, rel_tol=1e-12)
    assert hp.PML(1.0, strength=5.0).strength == 5.0


def test_density_coefficients_and_finite_difference_gradient():
    rng = np.random.default_rng(3)
    x = rng.uniform(-1.5, 1.5, (50, 2))
    rho = lambda x: 2.0 + np.sin(x[:, 0]) * np.cos(2 * x[:, 1])  # noqa: E731
    grad = lambda x: np.stack([np.cos(x[:, 0]) * np.cos(2 * x[:, 1]),  # noqa: E731
                               -2 * np.sin(x[:, 0]) * np.sin(2 * x[:, 1])], axis=1)
    pml = hp.PML(0.5)
    box = Box([-1, -1], [1, 1])
    with_grad = hp.Problem(box, kappa=4.0, bcs={}, pml=pml, density=rho, density_grad=grad)
    fd_grad = hp.Problem(box, kappa=4.0, bcs={}, pml=pml, density=rho)
    a, b = with_grad.operator_at(x)
    a_ref, b_ref = _direct_coefficients(x, [-1, -1], [1, 1], 0.5, pml.strength, 2, 2.0,
                                        rho(x), grad(x))
    np.testing.assert_allclose(a, a_ref, rtol=1e-13)
    np.testing.assert_allclose(b, b_ref, rtol=1e-12, atol=1e-15)
    a2, b2 = fd_grad.operator_at(x)
    np.testing.assert_allclose(a2, a, rtol=1e-13)
    np.testing.assert_allclose(b2, b, rtol=1e-8, atol=1e-10)
    # density alone: div(rho^-1 grad u) written out
    plain = hp.Problem(box, kappa=4.0, bcs={"*": hp.Dirichlet(0)}, density=rho, density_grad=grad)
    a3, b3 = plain.operator_at(x)
    np.testing.assert_allclose(a3, (1 / rho(x))[:, None] * np.ones((1, 2)), rtol=1e-14)
    np.testing.assert_allclose(b3, -grad(x) / rho(x)[:, None] ** 2, rtol=1e-14)


def test_layer_samples_lie_in_the_layer_and_the_wall_is_zero():
    k = 2.0
    dom = BoxMinusBall(Box([-1.0, -1.0], [1.0, 1.0]), Disk((0.2, 0.0), 0.3))
    prob = hp.Problem(dom, kappa=k * k, bcs={"scatterer": hp.Neumann()}, pml=hp.PML(0.5))
    assert prob.part_names == ("scatterer",)
    ts = prob.sample(4000, 200, rng=1)
    x = ts.x_pde
    assert np.all(np.abs(x) <= 1.5 + 1e-12)                       # inside the outer wall
    assert np.all(np.hypot(x[:, 0] - 0.2, x[:, 1]) > 0.3)          # outside the scatterer
    layer = prob.in_layer(x)
    expected = 1.0 - (4.0 - math.pi * 0.09) / (9.0 - math.pi * 0.09)
    assert abs(layer.mean() - expected) < 0.03                     # by volume
    a = ts.a_pde
    assert np.all(a[~layer] == 1) and np.all(np.any(a[layer].imag != 0, axis=1))
    # data: the outer wall, u = 0; bc: the scatterer only
    assert np.allclose(np.max(np.abs(ts.x_data), axis=1), 1.5) and np.all(ts.y == 0)
    assert np.allclose(np.hypot(ts.x_bc[:, 0] - 0.2, ts.x_bc[:, 1]), 0.3)
    core = ts.to_core(np.float64)
    assert core["a_pde"].shape == (4000, 2, 2) and core["b_pde"].shape == (4000, 2, 2)


def test_pml_argument_errors():
    box = Box([0, 0], [1, 1])
    with pytest.raises(ValueError, match="width"):
        hp.PML(0.0)
    with pytest.raises(ValueError, match="power"):
        hp.PML(1.0, power=0.5)
    with pytest.raises(ValueError, match="strength"):
        hp.PML(1.0, strength=-1.0)
    with pytest.raises(TypeError, match="pml"):
        hp.Problem(Ball([0, 0], 1.0), kappa=1.0, bcs={"*": None}, pml=hp.PML(0.5))
    with pytest.raises(TypeError, match="pml"):
        hp.Problem(box, kappa=1.0, bcs={}, pml=0.5)
    with pytest.raises(ValueError, match="inside the PML"):
        hp.Problem(box, kappa=1.0, bcs={"xmin": hp.Dirichlet(1.0)}, pml=hp.PML(0.5))
    with pytest.raises(ValueError, match="density"):
        hp.Problem(box, kappa=1.0, bcs={"*": None}, density=lambda x: -np.ones(len(x))).sample(10, 4, 0)


def _solve_1d(a, b, kappa, x, u0):
    """a u'' + b u' + kappa u = 0 on the grid x, u(x_0) = u0, u(x_end) = 0 (second-order FD)."""
    from scipy.sparse import diags
    from scipy.sparse.linalg import spsolve

    h = x[1] - x[0]
    n = len(x) - 2
    ai, bi = a[1:-1], b[1:-1]
    lower = ai / h**2 - bi / (2 * h)
    upper = ai / h**2 + bi / (2 * h)
    main = -2 * ai / h**2 + kappa
    A = diags([lower[1:], main, upper[:-1]], [-1, 0, 1], format="csc")
    rhs = np.zeros(n, complex)
    rhs[0] = -lower[0] * u0
    u = np.empty(len(x), complex)
    u[0], u[-1] = u0, 0.0
    u[1:-1] = spsolve(A, rhs)
    return u


@pytest.mark.parametrize("k", [5.0, 20.0])
def test_1d_outgoing_wave_through_the_pml_equation(k):
    """The PML's equation, solved on [0, 1 + w] with u(0) = 1 and u = 0 on the wall, gives the
    outgoing exp(ikx) in the physical interval (to the default reflection); without the layer's
    absorption the wall reflects everything."""
    w = 0.5
    x = np.linspace(0.0, 1.0 + w, 30001)
    phys = x <= 1.0
    errors = {}
    for name, pml in [("default", hp.PML(w)), ("none", hp.PML(w, strength=1e-9))]:
        prob = hp.Problem(Interval(0.0, 1.0), kappa=k * k, bcs={}, pml=pml)
        a, b = prob.operator_at(x[:, None])
        u = _solve_1d(a[:, 0], b[:, 0], k * k, x, 1.0)
        errors[name] = np.max(np.abs(u[phys] - np.exp(1j * k * x[phys])))
    assert errors["default"] < 3e-3, errors
    assert errors["none"] > 0.5, errors


@pytest.mark.parametrize("name", ["scatter-hard", "scatter-soft"])
def test_scattering_exact_solutions(name):
    prob = hp.get_problem(name, k=3.0, radius=0.6, theta=0.4)
    rng = np.random.default_rng(0)
    x = prob.domain.sample_interior(300, rng)
    u = prob.exact_at(x)
    res = prob.pde_residual_fd(x, h=1e-3)
    assert np.max(np.abs(res)) < 1e-4 * 9.0 * np.max(np.abs(u))      # Δu + k²u = 0 (FD error)
    bc = prob.bc_residuals_fd(256)["scatterer"]
    assert np.max(np.abs(bc)) < 1e-7                                  # the cylinder's condition
    # far from the cylinder the field is outgoing: du/dr - iku = O(r^-3/2)
    r = 40.0
    th = np.linspace(0, 2 * np.pi, 16, endpoint=False)
    pts = r * np.stack([np.cos(th), np.sin(th)], axis=1)
    h = 1e-4
    radial = (prob.exact_at(pts * (1 + h / r)) - prob.exact_at(pts * (1 - h / r))) / (2 * h)
    som = radial - 1j * 3.0 * prob.exact_at(pts)
    assert np.max(np.abs(som)) < 0.05 * np.max(np.abs(prob.exact_at(pts)))


def _train_1d_pml_pinn(k, pml, iterations=40):
    """A tiny PINN trained with LM on [0, 1 + w]: the PML's operator (from ``Problem.operator_at``,
    through the core's general operator) on the whole interval, u(0) = 1 and u = 0 on the wall at
    1 + w; returns the relative L2 error against exp(ikx) on the physical interval [0, 1]."""
    from helmpinn.optim.lm import CoreResiduals
    from helmpinn.training.trainer import relative_l2

    w = pml.width
    prob = hp.Problem(Interval(0.0, 1.0), kappa=k * k, bcs={}, pml=pml)
    x = ((np.arange(200) + 0.5) / 200 * (1.0 + w))[:, None]
    assert prob.in_layer(x).any() and not prob.in_layer(x[x[:, 0] <= 1.0]).any()
    a, b = prob.operator_at(x)
    pairs = lambda z: np.ascontiguousarray(np.stack([np.real(z), np.imag(z)], -1))  # noqa: E731
    batch = {"x_pde": x, "kappa": k * k, "a_pde": pairs(a), "b_pde": pairs(b),
             "x_data": np.array([[0.0], [1.0 + w]]), "y": pairs(np.array([1.0, 0.0]))}
    model = hp.Model.create(1, 8, 16, 1, dtype="float64", seed=0, fourier_sigma=k / (2 * math.pi))
    ws = hp.Workspace(model.spec, 4096, "float64")
    lm = hp.LevenbergMarquardt(CoreResiduals(ws, batch, {"pde": 1 / k**2, "data": 100.0}))
    for _ in range(iterations):
        lm.step(model.params)
    xt = np.linspace(0.0, 1.0, 501)[:, None]
    return relative_l2(model.predict(xt), np.exp(1j * k * xt[:, 0]))


def test_trained_pinn_with_a_1d_pml_gives_the_outgoing_wave():
    """The whole chain (PML coefficients, the core's general operator, training): a PINN solving
    the layer's equation matches exp(ikx) in the physical interval; the same PINN with a layer
    that does not absorb gets the standing wave the wall reflects (error of order 1)."""
    k = 5.0
    err = _train_1d_pml_pinn(k, hp.PML(0.5))
    assert err < 2e-3, err
    err_none = _train_1d_pml_pinn(k, hp.PML(0.5, strength=1e-9))
    assert err_none > 0.5, err_none


def test_problem_hints_reach_the_defaults():
    from helmpinn.optim.lm import lm_defaults
    from helmpinn.training.trainer import auto_weights

    box = Box([0, 0], [1, 1])
    plain = hp.Problem(box, kappa=4.0, bcs={"*": hp.Dirichlet(0)})
    hinted = hp.Problem(box, kappa=4.0, bcs={"*": hp.Dirichlet(0)},
                        hints={"weights": {"bc": 0.5}, "adam": {"steps": 1234, "lr": 3e-3},
                               "lm": {"ff_dim": 24, "hidden": 48, "iterations": 77}})
    assert auto_weights(hinted) == {**auto_weights(plain), "bc": 0.5}
    s, s0 = hp.default_settings(hinted), hp.default_settings(plain)
    assert (s["steps"], s["lr"], s["weights"]["bc"]) == (1234, 3e-3, 0.5)
    assert {k: v for k, v in s.items() if k not in ("steps", "lr", "weights")} == \
        {k: v for k, v in s0.items() if k not in ("steps", "lr", "weights")}
    tr = hp.Trainer(hinted, hp.Model.create(2, 4, 8, 1, seed=0), progress=False)
    assert tr.weights["bc"] == 0.5
    d, d0 = lm_defaults(hinted), lm_defaults(plain)
    assert (d["ff_dim"], d["hidden"], d["iterations"]) == (24, 48, 77)
    assert d["pde_points"] > d0["pde_points"]      # the points follow the hinted network's size
    assert 2 * (d["pde_points"] + d["bc_points"]) > hp.ModelSpec(2, 24, 48, 2).num_params
    for bad in ({"adam": {"stepz": 1}}, {"lm": {"hiden": 3}}, {"weights": {"pd": 1.0}}):
        with pytest.raises(ValueError, match="hints"):
            p = hp.Problem(box, kappa=4.0, bcs={"*": hp.Dirichlet(0)}, hints=bad)
            hp.default_settings(p), lm_defaults(p)
    with pytest.raises(ValueError, match="hints"):
        hp.Problem(box, kappa=4.0, bcs={"*": hp.Dirichlet(0)}, hints={"sgd": {}})


# -- hostile values (issue #24 items 6, 10, 11) --------------------------------------------------

@pytest.mark.parametrize("kappa, wavenumber", [(0.0, None), (-4.0, None), (4.0, 0.0)])
def test_a_pml_refuses_a_wavenumber_that_is_not_positive(kappa, wavenumber):
    # The layer's stretching is 1 + i sigma/k: k <= 0 is refused, not replaced by 1e-12 (which
    # gave a_pde ~ 1e-27 in the layer).
    with pytest.raises(ValueError, match="PML: the wavenumber must be a finite number > 0"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=kappa, bcs={}, pml=hp.PML(0.5), wavenumber=wavenumber)


@pytest.mark.parametrize("args, match", [
    (dict(width=float("nan")), "PML: width must be a finite number > 0"),
    (dict(width=-1e300), "PML: width must be a finite number > 0"),
    (dict(width=float("inf")), "PML: width must be a finite number > 0"),
    (dict(width=1e-320), "PML: width 1e-320 is too small for the default strength"),
    (dict(width=1.0, strength=float("nan")), "PML: strength must be a finite number > 0"),
    (dict(width=1.0, strength=-5.0), "PML: strength must be a finite number > 0"),
    (dict(width=1.0, power=1e300), "PML: power must be a finite number >= 1 and <= 10"),
    (dict(width=1.0, power=float("nan")), "PML: power must be"),
    (dict(width=1.0, power=-9223372036854775807), "PML: power must be"),
])
def test_pml_constructor_names_the_bad_argument(args, match):
    with pytest.raises(ValueError, match=match):
        hp.PML(**args)


def test_pml_constructor_refuses_a_non_number():
    with pytest.raises(TypeError, match="PML: strength must be a real number"):
        hp.PML(1.0, strength="strong")
    with pytest.raises(TypeError, match="PML: width must be a real number"):
        hp.PML(None)


@pytest.mark.parametrize("pml, match", [
    (lambda: hp.PML(1e300), "PML: width 1e\\+300 around the box .* infinite extent"),
    (lambda: hp.PML(1e200), "PML: width 1e\\+200 around the box .* infinite extent"),  # area overflows
    (lambda: hp.PML(1e-9), "PML: strength/k = .* exceeds 1e\\+06 .*width=1e-09"),
    (lambda: hp.PML(0.5, strength=1e30), "PML: strength/k = .* exceeds"),
])
def test_a_problem_checks_its_pml_against_the_box_and_wavenumber(pml, match):
    # Before: accepted, then sampling failed with "n must be >= 0, got -9223372036854775807"
    # (face areas of inf) or the coefficients vanished.
    with pytest.raises(ValueError, match=match):
        hp.Problem(Box([0, 0], [1, 1]), kappa=4.0, bcs={}, pml=pml())


def test_scattering_refuses_a_series_too_long_before_evaluating_it(monkeypatch):
    from scipy import special

    from helmpinn import scattering

    def refuse(*args):
        raise AssertionError("the exact series was evaluated")

    monkeypatch.setattr(special, "hankel1", refuse)
    monkeypatch.setattr(special, "h1vp", refuse)
    for name in ("scatter-hard", "scatter-soft"):
        with pytest.raises(ValueError, match=f"{name}: k = 5000 with radius = 0.785398 needs 3947 "
                                             f"orders .* the limit is 2000"):
            hp.get_problem(name, k=5000.0)
        with pytest.raises(ValueError, match=f"{name}: k must be a finite number > 0 and <= 10000"):
            hp.get_problem(name, k=1e6)
    with pytest.raises(ValueError, match="cylinder_scattered_field: k = 1e\\+06"):
        scattering.cylinder_scattered_field(np.ones((3, 2)), 1e6, 1.0, 0.0, True)


@pytest.mark.parametrize("name, options, match", [
    ("plane1d", dict(k=float("nan")), "plane1d: k must be a finite number > 0"),
    ("plane1d", dict(k=1e300), "plane1d: k must be a finite number > 0 and <= 10000"),
    ("plane1d", dict(k=0.0), "plane1d: k must be"),
    ("dirichlet2d", dict(n=-1), "dirichlet2d: n must be a finite number > 0"),
    ("dirichlet2d", dict(n=float("inf")), "dirichlet2d: n must be"),
    ("heterogeneous2d", dict(k=-3.0), "heterogeneous2d: k must be"),
    ("heterogeneous2d", dict(theta=float("nan")), "heterogeneous2d: theta must be a finite number"),
    ("cube3d", dict(k=float("inf")), "cube3d: k must be a finite number >= -10000"),
    ("scatter-hard", dict(k=float("nan")), "scatter-hard: k must be"),
    ("scatter-hard", dict(radius=4.0), "scatter-hard: radius must be a finite number > 0 and < 3.14159"),
    ("scatter-soft", dict(pml_width=-1.0), "scatter-soft: pml_width must be a finite number > 0"),
    ("scatter-soft", dict(pml_width=1e300), "PML: width 1e\\+300 around the box"),
    ("scatter-soft", dict(theta=float("inf")), "scatter-soft: theta must be"),
])
def test_builtin_problem_options_are_checked(name, options, match):
    with pytest.raises(ValueError, match=match):
        hp.get_problem(name, **options)


@pytest.mark.parametrize("domain", [Interval(0.0, 1.0), Box([0.0, -1.0], [1.0, 1.0]),
                                    Box([0.0, 0.0, 0.0], [1.0, 1.0, 2.0])],
                         ids=["interval", "box2", "box3"])
def test_box_with_a_pml_puts_its_boundary_points_on_the_outer_wall(domain):
    # Pins issue #26: sampling the physical boundary (the box's faces) instead of the PML's
    # outer wall would leave the layer unterminated and the box's faces wrongly at u = 0.
    w = 0.25
    prob = hp.Problem(domain, kappa=9.0, bcs={}, pml=hp.PML(w))
    ts = prob.sample(500, 64, rng=3)
    lo, hi = domain.lo - w, domain.hi + w
    assert len(ts.x_data) == 64 and np.all(ts.y == 0) and len(ts.x_bc) == 0
    on_wall = np.any(np.isclose(ts.x_data, lo) | np.isclose(ts.x_data, hi), axis=1)
    assert np.all(on_wall)
    assert np.all((ts.x_data >= lo - 1e-12) & (ts.x_data <= hi + 1e-12))
    # and the PDE points fill the layer as well as the box
    assert prob.in_layer(ts.x_pde).any() and (~prob.in_layer(ts.x_pde)).any()


# -- a user's operator coefficients, complex kappa, point clouds, pml_share (issue #23) -----------

def test_user_coefficients_combine_with_the_pml_and_the_density():
    # operator alpha div(rho^-1 grad u) + beta . grad u + kappa u, stretched:
    # a_j = alpha/(rho s_j^2), b_j = alpha (d_j(1/rho)/s_j^2 - s_j'/(rho s_j^3)) + beta_j/s_j
    lo, hi, w, k = np.array([0.0, 0.0]), np.array([1.0, 2.0]), 0.5, 3.0
    alpha = lambda x: 1.0 + 0.5j * x[:, 0]  # noqa: E731
    beta = lambda x: np.stack([np.sin(x[:, 1]), 0.3 + 0j * x[:, 0]], axis=1)  # noqa: E731
    rho = lambda x: 1.0 + 0.2 * x[:, 0] ** 2  # noqa: E731
    grad = lambda x: np.stack([0.4 * x[:, 0], 0 * x[:, 0]], axis=1)  # noqa: E731
    pml = hp.PML(w, power=2)
    prob = hp.Problem(Box(lo, hi), kappa=k * k, bcs={}, pml=pml, density=rho, density_grad=grad,
                      a=alpha, b=beta)
    x = np.random.default_rng(0).uniform(lo - w, hi + w, (64, 2))
    a, b = prob.operator_at(x)
    a0, b0 = _direct_coefficients(x, lo, hi, w, pml.strength, 2, k, rho(x), grad(x))
    s, _ = pml.stretch(x, lo, hi, k)
    np.testing.assert_allclose(a, alpha(x)[:, None] * a0, rtol=1e-13)
    np.testing.assert_allclose(b, alpha(x)[:, None] * b0 + beta(x) / s, rtol=1e-13, atol=1e-15)
    # constants, without a PML: a Laplacian times a, a constant drift
    plain = hp.Problem(Box(lo, hi), kappa=4.0, bcs={"*": None}, a=2.0, b=[1.0, -1.0])
    a, b = plain.operator_at(x)
    assert plain.uses_operator
    np.testing.assert_array_equal(a, np.full((64, 2), 2.0 + 0j))
    np.testing.assert_array_equal(b, np.tile([1.0 + 0j, -1.0 + 0j], (64, 1)))
    ts = plain.sample(10, 4, rng=0)
    assert ts.a_pde.shape == (10, 2) and np.all(ts.a_pde == 2.0)
    with pytest.raises(ValueError, match="b: expected 2 finite numbers"):
        hp.Problem(Box(lo, hi), kappa=4.0, bcs={"*": None}, b=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="a must be finite"):
        hp.Problem(Box(lo, hi), kappa=4.0, bcs={"*": None}, a=lambda x: np.full(len(x), np.nan)).sample(5, 0, 0)


def test_an_absorbing_medium_takes_a_complex_kappa_to_the_core():
    # u = exp(i q x) with q^2 = kappa complex solves u'' + kappa u = 0: the problem's residual
    # vanishes, and the core gets kappa as the operator's complex c (c_pde).
    kappa = 25.0 * (1 + 0.2j)
    q = np.sqrt(kappa)
    prob = hp.Problem(Interval(0.0, 1.0), kappa=kappa, bcs={"*": None}, exact=lambda x: np.exp(1j * q * x[:, 0]))
    assert prob.kappa == kappa and prob.wavenumber == pytest.approx(abs(kappa) ** 0.5)
    x = np.linspace(0.1, 0.9, 9)[:, None]
    assert np.max(np.abs(prob.pde_residual_fd(x, h=1e-4))) < 1e-4 * abs(kappa)
    ts = prob.sample(16, 0, rng=0)
    batch = ts.to_batch(np.float64)
    assert "c_pde" in batch and "kappa" not in batch
    # the core's residual differs from that of Re(kappa) by i Im(kappa) u (scaled by 1/sqrt(N))
    model = hp.Model.create(1, 4, 8, 1, dtype="float64", seed=2)
    ws = model.workspace()
    r_c = ws.residuals(model.params, batch=batch).reshape(-1, 2)
    r_r = ws.residuals(model.params, batch=batch.replace(c_pde=None, kappa=kappa.real)).reshape(-1, 2)
    diff = (r_c[:, 0] - r_r[:, 0]) + 1j * (r_c[:, 1] - r_r[:, 1])
    np.testing.assert_allclose(diff, 1j * kappa.imag * model.predict(ts.x_pde) / math.sqrt(16), rtol=1e-10)
    # a callable kappa may be complex too
    cp = hp.Problem(Interval(0.0, 1.0), kappa=lambda x: np.full(len(x), kappa), bcs={"*": None})
    assert np.iscomplexobj(cp.sample(8, 0, rng=0).kappa) and cp.wavenumber == pytest.approx(abs(kappa) ** 0.5)


def test_a_point_cloud_holds_its_layer():
    rng = np.random.default_rng(4)
    inner = rng.uniform(-1.5, 1.5, (400, 2))   # the physical box [-1, 1]^2 and a layer of 0.5
    wall = np.array([[-1.5, 0.0], [1.5, 0.0], [0.0, -1.5], [0.0, 1.5]])
    normals = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])
    geo_cloud = hp.geometry.PointCloud(inner, wall, normals, parts="wall")
    prob = hp.Problem(geo_cloud, kappa=4.0, bcs={"wall": hp.Dirichlet(0.0)}, pml=hp.PML(0.5))
    layer = prob.in_layer(inner)
    np.testing.assert_array_equal(layer, np.any(np.abs(inner) > 1.0, axis=1))
    ts = prob.sample()
    assert len(ts.x_pde) == 400 and len(ts.x_data) == 4
    assert np.all(ts.a_pde[~layer] == 1) and np.all(np.any(ts.a_pde[layer].imag != 0, axis=1))
    np.testing.assert_array_equal(prob.test_points(), inner[~layer])
    with pytest.raises(ValueError, match="width 2.0 leaves no physical box"):
        hp.Problem(geo_cloud, kappa=4.0, bcs={"wall": None}, pml=hp.PML(2.0))
    with pytest.raises(ValueError, match="pml_share: a PointCloud's points are given"):
        hp.Problem(geo_cloud, kappa=4.0, bcs={"wall": None}, pml=hp.PML(0.5), pml_share=0.5)
    # Its layer's own points set the medium's strength: k 2 inside, 1 in the layer, so 2 times.
    medium = hp.Problem(geo_cloud, kappa=lambda x: np.where(np.any(np.abs(x) > 1.0, axis=1), 1.0, 4.0),
                        bcs={"wall": None}, pml=hp.PML(0.5))
    assert medium.wavenumber == pytest.approx(2.0)
    assert medium.pml.strength == pytest.approx(2.0 * hp.PML(0.5).strength)


@pytest.mark.parametrize("domain", [Box([0.0, 0.0], [1.0, 1.0]),
                                    BoxMinusBall(Box([0.0, 0.0], [1.0, 1.0]), Disk((0.5, 0.5), 0.2)),
                                    Interval(0.0, 1.0)], ids=["box", "scatterer", "interval"])
def test_pml_share_sets_the_layers_share_of_the_pde_points(domain):
    bcs = {"scatterer": hp.Neumann()} if isinstance(domain, BoxMinusBall) else {}
    prob = hp.Problem(domain, kappa=16.0, bcs=bcs, pml=hp.PML(1.0), pml_share=0.3)
    ts = prob.sample(1000, 20, rng=5)
    assert prob.in_layer(ts.x_pde).sum() == 300 and len(ts.x_pde) == 1000
    assert np.all(prob.sampling_domain.contains(ts.x_pde)) and ts.pde_weight is None
    default = hp.Problem(domain, kappa=16.0, bcs=bcs, pml=hp.PML(1.0))
    share = default.in_layer(default.sample(4000, 0, rng=5).x_pde).mean()
    area = 1 - domain.volume / default.sampling_domain.volume
    assert abs(share - area) < 0.03 and default.pml_share is None
    with pytest.raises(ValueError, match="pml_share: given without a pml"):
        hp.Problem(domain, kappa=16.0, bcs={"*": None}, pml_share=0.3)
    with pytest.raises(ValueError, match="pml_share must be a finite number >= 0 and <= 1"):
        hp.Problem(domain, kappa=16.0, bcs=bcs, pml=hp.PML(1.0), pml_share=1.5)


def test_a_complex_kappa_with_zero_imaginary_part_stays_real():
    prob = hp.Problem(Interval(0.0, 1.0), kappa=lambda x: np.full(len(x), 9.0 + 0j), bcs={"*": None})
    ts = prob.sample(8, 0, rng=0)
    assert not np.iscomplexobj(ts.kappa) and "kappa" in ts.to_batch(np.float64)
    assert hp.Problem(Interval(0.0, 1.0), kappa=9.0 + 0j, bcs={"*": None}).kappa == 9.0


def test_for_medium_scales_only_the_default_strength():
    pml = hp.PML(0.5)
    stronger = pml.for_medium(9.0, 1.0)                      # the layer holds k 1 to 9: sqrt(9/1)
    assert stronger.strength == pytest.approx(3.0 * pml.strength)
    assert (stronger.width, stronger.power) == (pml.width, pml.power)
    assert stronger.reflection() == pytest.approx(pml.reflection() ** 3.0)
    # A homogeneous layer of k 3 around a medium up to k 9: matched to 3 exactly.
    assert pml.for_medium(9.0, 3.0, 3.0).strength == pytest.approx(3.0 * pml.strength)
    assert pml.for_medium(9.0, 2.0, 8.0).strength == pytest.approx(9.0 / 4.0 * pml.strength)
    given = hp.PML(0.5, strength=7.0)
    assert given.for_medium(9.0, 1.0) is given               # a given strength is the user's
    assert pml.for_medium(9.0, 9.0) is pml and pml.for_medium(9.0, 12.0) is pml
    assert pml.for_medium(9.0, 8.0, 12.0) is pml             # slower in the layer: no weaker layer
    assert pml.for_medium(9.0, 0.0) is pml                   # Re κ <= 0 in the layer: no rule


def _line_source(strength_factor, ratio=3.0):
    """A Gaussian source on the line in a medium of wavenumber kl, the problem's wavenumber
    ratio times larger (as if a slower medium elsewhere set it), a PML of a quarter around."""
    kl = 2 * math.pi * 3
    pml = hp.PML(0.25)
    if strength_factor is not None:
        pml = hp.PML(0.25, strength=strength_factor * pml.strength)
    return kl, hp.Problem(Interval(-1, 1), kappa=lambda x: np.full(len(x), kl**2), wavenumber=ratio * kl,
                          source=hp.PointSource((0.0,), width=0.02), bcs={}, pml=pml)


def test_a_problem_faster_in_its_layer_gets_the_stronger_default():
    kl, p = _line_source(None)   # a homogeneous layer at a third of the problem's k: 3 times
    assert p.pml.strength == pytest.approx(3.0 * hp.PML(0.25).strength, rel=1e-12)
    # A layer that holds k and k/4: the default times 2 (the problem's k over their geometric mean).
    ramp = hp.Problem(Interval(-1, 1), kappa=lambda x: np.where(x[:, 0] > 1, 1 / 16, 1.0) * kl**2,
                      bcs={}, pml=hp.PML(0.25))
    assert ramp.pml.strength == pytest.approx(2.0 * hp.PML(0.25).strength, rel=1e-12)
    _, given = _line_source(1.0)
    assert given.pml.strength == pytest.approx(hp.PML(0.25).strength)
    constant = hp.Problem(Interval(-1, 1), kappa=kl**2, wavenumber=3 * kl, bcs={}, pml=hp.PML(0.25))
    assert constant.pml.strength == hp.PML(0.25).strength    # κ constant: no medium to adapt to
    # Slower in the layer than in the domain (k_min = the problem's k): the plain default.
    slow = hp.Problem(Interval(-1, 1), kappa=lambda x: np.where(np.abs(x[:, 0]) > 1, 4.0, 1.0) * kl**2,
                      bcs={}, pml=hp.PML(0.25))
    assert slow.wavenumber == pytest.approx(kl) and slow.pml.strength == hp.PML(0.25).strength


def test_the_stronger_default_reflects_less_of_a_faster_wave():
    # The outgoing field of a Gaussian source of width s, e^{-k²s²/2} e^{ik|x|}/(2ik) away from
    # it, through the layer with the plain default (round trip R^{1/3} = 4.6e-2) and with the
    # one matched to the layer's medium (R), by fd_solve.
    from helmpinn.reference import fd_solve

    x = np.linspace(-1, 1, 401)[:, None]
    far = np.abs(x[:, 0]) > 0.12
    errors = {}
    for factor in (1.0, None):
        kl, p = _line_source(factor)
        exact = np.exp(-(kl * 0.02) ** 2 / 2) * np.exp(1j * kl * np.abs(x[:, 0])) / (2j * kl)
        u = fd_solve(p, h=1 / 800)(x)
        errors[factor] = np.linalg.norm(u[far] - exact[far]) / np.linalg.norm(exact[far])
    assert errors[1.0] > 3e-2 and errors[None] < 1e-2


def test_a_source_near_or_in_the_pml_is_warned_about():
    # Half a local wavelength from the layer or more: quiet; closer, or in the layer: a warning
    # naming the source and the distance. k = 2π·3 here (λ = 1/3): the limit is 1/6.
    box = hp.geometry.Box([0.0, 0.0], [1.0, 1.0])

    def pose(position, velocity=1.0):
        return hp.Problem(box, frequency=3.0, velocity=velocity, pml=hp.PML(0.3),
                          source=hp.PointSource(position))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pose((0.5, 0.5))
        pose((0.2, 0.5))            # 0.6 wavelengths
    with pytest.warns(UserWarning, match=r"\[0.1, 0.5\] is 0.1 from the PML \(0.3 local wavelengths\)"):
        pose((0.1, 0.5))
    with pytest.warns(UserWarning, match="lies in the PML"):
        pose((0.5, 1.05))
    # The local wavelength: in a medium three times faster at the source, 0.2 is 0.2 wavelengths.
    faster = lambda x: np.where(x[:, 0] < 0.4, 3.0, 1.0)   # noqa: E731
    with pytest.warns(UserWarning, match="0.2 local wavelengths"):
        pose((0.2, 0.5), velocity=faster)
