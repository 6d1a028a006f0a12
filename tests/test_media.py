"""GridField (python/helmpinn/problems/media.py): cubic B-spline interpolation of a field on a regular
grid, its first and second derivatives against an analytic field (the order of convergence as
the spacing halves), the loaders, and its use as a Problem's velocity and density."""
from __future__ import annotations

import math
import sys

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems.geometry import Box
from helmpinn.problems.media import GridField

# An analytic field on [0, 1]^d and its derivatives: f = prod_j sin(w_j x_j + p_j).
W = np.array([2.0, 3.0, 1.5])
P = np.array([0.5, -0.2, 0.3])


def _f(x, order=None):
    d = x.shape[1]
    order = order or (0,) * d
    out = np.ones(len(x))
    for j in range(d):
        t = W[j] * x[:, j] + P[j]
        out *= [np.sin(t), W[j] * np.cos(t), -W[j] ** 2 * np.sin(t)][order[j]]
    return out


def _grid(d, n):
    h = 1.0 / (n - 1)
    axes = [np.linspace(0.0, 1.0, n)] * d
    mesh = np.meshgrid(*axes, indexing="ij")
    pts = np.stack([m.ravel() for m in mesh], axis=1)
    return GridField(_f(pts).reshape((n,) * d), 0.0, h)


def _errors(d, n, x):
    g = _grid(d, n)
    e0 = np.max(np.abs(g(x) - _f(x)))
    e1 = np.max(np.abs(g.gradient(x) - np.stack([_f(x, tuple(int(i == j) for i in range(d)))
                                                  for j in range(d)], axis=1)))
    hess = g.hessian(x)
    e2 = 0.0
    for i in range(d):
        for j in range(d):
            order = [0] * d
            order[i] += 1
            order[j] += 1
            e2 = max(e2, np.max(np.abs(hess[:, i, j] - _f(x, tuple(order)))))
    return np.array([e0, e1, e2])


@pytest.mark.parametrize("d, n", [(1, 16), (2, 12), (3, 8)])
def test_interpolation_and_derivatives_converge_at_the_cubic_spline_orders(d, n):
    x = np.random.default_rng(d).random((300, d))
    coarse, fine = _errors(d, n, x), _errors(d, 2 * n - 1, x)  # spacing h and h/2
    order = np.log2(coarse / fine)
    # O(h^4) values, O(h^3) first and O(h^2) second derivatives (the not-a-knot ends set these).
    assert order[0] > 3.5 and order[1] > 2.5 and order[2] > 1.6, order
    assert fine[0] < 1e-3


def test_nodes_are_reproduced_and_complex_values_work():
    rng = np.random.default_rng(0)
    v = rng.normal(size=(5, 7)) + 1j * rng.normal(size=(5, 7))
    g = GridField(v, origin=(-1.0, 2.0), spacing=(0.5, 0.25))
    ii, jj = np.meshgrid(np.arange(5), np.arange(7), indexing="ij")
    x = np.stack([-1.0 + 0.5 * ii.ravel(), 2.0 + 0.25 * jj.ravel()], axis=1)
    np.testing.assert_allclose(g(x), v.ravel(), rtol=0, atol=1e-12)
    assert g(x).dtype == np.complex128 and g(np.empty((0, 2))).shape == (0,)


def test_outside_points_error_or_continue_by_the_edge():
    g = GridField(np.arange(5.0) ** 2, origin=0.0, spacing=1.0)
    with pytest.raises(ValueError, match=r"point \[4.5\] lies outside the grid's box \[0.0\] .. \[4.0\]"):
        g(np.array([[4.5]]))
    e = GridField(np.arange(5.0) ** 2, outside="nearest")
    np.testing.assert_allclose(e(np.array([[-3.0], [7.0]])), [0.0, 16.0], atol=1e-12)
    np.testing.assert_array_equal(e.gradient(np.array([[-3.0], [7.0]])), [[0.0], [0.0]])
    np.testing.assert_allclose(e.gradient(np.array([[2.0]])), [[4.0]], atol=1e-12)


@pytest.mark.parametrize("args, kwargs, exc, match", [
    ((np.ones(3),), {}, ValueError, "at least 4 nodes along each axis"),
    ((np.ones((4, 4, 4, 4)),), {}, ValueError, "1-, 2- or 3-D"),
    ((np.array([1.0, np.nan, 2, 3]),), {}, ValueError, "finite"),
    ((np.ones(5), 0.0, -1.0), {}, ValueError, "spacing must be 1 finite numbers in"),
    ((np.ones((4, 4)), 0.0, 1e-300), {}, ValueError, "spacing must be 2 finite numbers in"),
    ((np.ones((5, 5)), (0.0, 0.0, 0.0)), {}, ValueError, "origin must be 2 finite numbers"),
    ((np.array(["a"] * 5),), {}, TypeError, "real or complex array"),
    ((np.ones(5),), {"outside": "wrap"}, ValueError, "outside must be"),
])
def test_gridfield_argument_errors(args, kwargs, exc, match):
    with pytest.raises(exc, match=match):
        GridField(*args, **kwargs)


def test_loaders(tmp_path, monkeypatch):
    from scipy import io

    v = np.random.default_rng(1).random((6, 5))
    np.save(tmp_path / "v.npy", v)
    g = GridField.from_npy(tmp_path / "v.npy", origin=(0, 0), spacing=(0.1, 0.2))
    np.testing.assert_array_equal(g.values, v)
    assert g.hi.tolist() == pytest.approx([0.5, 0.8])
    io.savemat(tmp_path / "v.mat", {"vp": v, "vs": v / 2})
    np.testing.assert_array_equal(GridField.from_mat(tmp_path / "v.mat", "vs").values, v / 2)
    with pytest.raises(ValueError, match=r"give key=, one of \['vp', 'vs'\]"):
        GridField.from_mat(tmp_path / "v.mat")
    with pytest.raises(ValueError, match="no variable 'rho'"):
        GridField.from_mat(tmp_path / "v.mat", "rho")
    with pytest.raises(FileNotFoundError, match="from_npy: no such file"):
        GridField.from_npy(tmp_path / "missing.npy")
    monkeypatch.setitem(sys.modules, "segyio", None)  # as if it were not installed
    with pytest.raises(ImportError, match="pip install segyio"):
        GridField.from_segy(tmp_path / "model.sgy", spacing=(10.0, 10.0))


def test_velocity_on_a_grid_gives_kappa_and_a_density_brings_its_gradient():
    n = 21
    axes = np.linspace(0.0, 1.0, n)
    X, Y = np.meshgrid(axes, axes, indexing="ij")
    v = 1500.0 + 500.0 * X + 200.0 * Y * Y
    f = 50.0
    prob = hp.Problem(Box([0, 0], [1, 1]), frequency=f, velocity=GridField(v, 0.0, 1 / (n - 1)),
                      bcs={"*": None})
    x = np.random.default_rng(2).random((50, 2))
    exact_v = 1500.0 + 500.0 * x[:, 0] + 200.0 * x[:, 1] ** 2
    np.testing.assert_allclose(prob.kappa_at(x), (2 * math.pi * f) ** 2 / exact_v**2, rtol=1e-12)
    assert prob.wavenumber == pytest.approx(2 * math.pi * f / 1500.0, rel=1e-3)  # from samples
    # a constant velocity, and the errors
    const = hp.Problem(Box([0, 0], [1, 1]), frequency=2.0, velocity=4.0, bcs={"*": None})
    assert const.kappa == pytest.approx(math.pi**2)
    with pytest.raises(TypeError, match="not both"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, frequency=2.0, velocity=4.0, bcs={"*": None})
    with pytest.raises(TypeError, match="go together"):
        hp.Problem(Box([0, 0], [1, 1]), frequency=2.0, bcs={"*": None})
    with pytest.raises(ValueError, match="velocity must be a finite number > 0"):
        hp.Problem(Box([0, 0], [1, 1]), frequency=2.0, velocity=-4.0, bcs={"*": None})
    with pytest.raises(ValueError, match="velocity must be finite and > 0 at every point"):
        hp.Problem(Box([0, 0], [1, 1]), frequency=2.0, velocity=GridField(v - 1800.0, 0.0, 1 / (n - 1)),
                   bcs={"*": None})
    # density on a grid: b = grad(1/rho) from the spline's own gradient
    rho = 1.0 + 0.5 * X * Y
    dens = hp.Problem(Box([0, 0], [1, 1]), kappa=4.0, bcs={"*": None},
                      density=GridField(rho, 0.0, 1 / (n - 1)))
    a, b = dens.operator_at(x)
    r = 1.0 + 0.5 * x[:, 0] * x[:, 1]
    grad = 0.5 * x[:, ::-1]
    np.testing.assert_allclose(a, (1 / r)[:, None] * np.ones((1, 2)), rtol=1e-10)
    np.testing.assert_allclose(b, -grad / r[:, None] ** 2, rtol=1e-9, atol=1e-12)


def test_a_gridfield_works_wherever_a_callable_coefficient_does():
    n = 9
    axes = np.linspace(0.0, 1.0, n)
    X, Y = np.meshgrid(axes, axes, indexing="ij")
    grid = lambda v: GridField(v, 0.0, 1 / (n - 1))  # noqa: E731
    kappa = grid(16.0 * (1 + 0.1j) + 0 * X)            # complex: an absorbing medium
    a = grid(1.0 + 0.5 * X)
    src = grid((X + 1j * Y) ** 2)
    prob = hp.Problem(Box([0, 0], [1, 1]), kappa=kappa, a=a, source=src, bcs={"*": hp.Dirichlet()})
    ts = prob.sample(20, 8, rng=0)
    x = ts.x_pde
    np.testing.assert_allclose(ts.kappa, 16.0 * (1 + 0.1j), rtol=1e-12)
    np.testing.assert_allclose(ts.f, (x[:, 0] + 1j * x[:, 1]) ** 2, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ts.a_pde, (1.0 + 0.5 * x[:, :1]) * np.ones((1, 2)), rtol=1e-12)
    assert "c_pde" in ts.to_batch(np.float64)
