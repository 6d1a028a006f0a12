"""The corner rows (helmpinn.problems.corners): Green's identity on a corner's sector against
closed forms and quadrature, the sectors a problem's corners take, and the rows through a
decomposed model and the Gauss-Newton driver."""
import math

import numpy as np
import pytest
from scipy.special import h1vp, hankel1, jv, jvp

from helmpinn import Problem
from helmpinn.problems import Dirichlet, Neumann, Sommerfeld
from helmpinn.problems.corners import (CORNER_ORDERS_BEYOND, Wedge, corner_moments, corner_rows, corner_wedges,
                                       wedge_functionals)
from helmpinn.problems.geometry import Box, BoxMinusObstacle, Polygon
from helmpinn.problems.pml import PML

K = 7.0
SQUARE = [[-0.25, -0.25], [0.25, -0.25], [0.25, 0.25], [-0.25, 0.25]]


def _square(bc, pml=True, side_box=1.0, **kw):
    return Problem(BoxMinusObstacle(Box([-side_box] * 2, [side_box] * 2), Polygon(SQUARE)), kappa=K * K,
                   bcs={"scatterer": bc, "*": Dirichlet(0.0)} if not pml else {"scatterer": bc},
                   wavenumber=K, pml=PML(0.5) if pml else None, **kw)


def _polar(w: Wedge, x):
    d = x - w.vertex
    return np.hypot(d[:, 0], d[:, 1]), (np.arctan2(d[:, 1], d[:, 0]) - w.start) % (2 * math.pi)


def _wedge_wave(w: Wedge, nu, kind):
    """``Z_ν(kr) ang(νθ)`` about the vertex and its gradient, Z = J or H⁽¹⁾."""
    Z, dZ = (jv, jvp) if kind == "J" else (hankel1, h1vp)
    ang = (np.sin, np.cos) if w.condition == "dirichlet" else (np.cos, lambda t: -np.sin(t))

    def field(x):
        r, th = _polar(w, x)
        z, dz = Z(nu, w.k * r), w.k * dZ(nu, w.k * r)
        # on the edges sin(νθ) is 0 (Dirichlet's u, Neumann's ∂_θ u) exactly, not 1e-16 times a
        # Hankel function that grows as r^(−ν) by the vertex
        edge = (np.minimum(th, 2 * math.pi - th) < 1e-9) | (np.abs(th - w.opening) < 1e-9)
        a0, a1 = ang[0](nu * th), ang[1](nu * th)
        (a0 if w.condition == "dirichlet" else a1)[edge] = 0.0
        u = z * a0
        ur, ut = dz * a0, z * nu * a1 / r
        ct, st = np.cos(w.start + th), np.sin(w.start + th)
        return u, np.stack([ur * ct - ut * st, ur * st + ut * ct], 1)
    return field


@pytest.mark.parametrize("bc,condition", [(Dirichlet(lambda x: -np.exp(1j * K * x[:, 0])), "dirichlet"),
                                          (Neumann(), "neumann")])
def test_sectors_of_a_square_obstacle(bc, condition):
    """A sound-soft or sound-hard square: four sectors of opening 3π/2 about its vertices, the
    domain's side (outside the square), of radius CORNER_ROW_RADIUS times the corner weights'
    radius; the orders ν = nπ/α to kR + CORNER_ORDERS_BEYOND, from n = 1 (Dirichlet) or 0 (Neumann)."""
    p = _square(bc)
    ws = corner_wedges(p)
    assert len(ws) == 4
    for w in ws:
        assert w.opening == pytest.approx(1.5 * math.pi) and w.condition == condition and w.k == pytest.approx(K)
        assert w.radius == pytest.approx(1.2 * 0.25 * 2 * math.pi / K)
        # the sector lies outside the square: its bisector points away from the centre
        mid = w.start + w.opening / 2
        assert np.dot([math.cos(mid), math.sin(mid)], w.vertex) > 0
        nus = w.orders
        assert nus[0] == (pytest.approx(2 / 3) if condition == "dirichlet" else 0.0)
        assert nus[-1] >= K * w.radius + CORNER_ORDERS_BEYOND > nus[-2]


def test_sectors_of_an_l_shaped_domain_and_where_none_are_taken():
    """A polygon domain's reflex vertex takes a sector through the domain; a box wall near the
    vertices shrinks the sectors; a Robin (absorbing) obstacle, a κ varying in the sector, a
    source in it: none (a point source's tail far away does not count)."""
    L = Polygon([[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]])
    p = Problem(L, kappa=K * K, bcs={"polygon": Dirichlet(0.0)}, wavenumber=K)
    ws = corner_wedges(p)
    assert len(ws) == 1 and np.allclose(ws[0].vertex, [1, 1]) and ws[0].opening == pytest.approx(1.5 * math.pi)
    mid = ws[0].start + ws[0].opening / 2
    assert L.contains(ws[0].vertex[None] + 0.1 * np.array([[math.cos(mid), math.sin(mid)]]))[0]
    assert corner_wedges(_square(Sommerfeld(K))) == []
    # a box wall near the vertices: the sectors shrink to 0.9 of the distance to it
    assert [w.radius for w in corner_wedges(_square(Dirichlet(0.0), side_box=0.3))] == pytest.approx([0.045] * 4)
    box = BoxMinusObstacle(Box([-1, -1], [1, 1]), Polygon(SQUARE))
    varying = Problem(box, kappa=lambda x: K * K * (1 + 0.1 * x[:, 0]), bcs={"scatterer": Dirichlet(0.0)},
                      wavenumber=K, pml=PML(0.5))
    assert corner_wedges(varying) == []
    src = Problem(box, kappa=K * K, bcs={"scatterer": Dirichlet(0.0)}, wavenumber=K, pml=PML(0.5),
                  source=lambda x: np.exp(-np.sum((x - 0.3) ** 2, 1) / 0.001))
    # the source by the vertex (0.25, 0.25) takes its sector away; the others, far, keep theirs
    kept = corner_wedges(src)
    assert len(kept) == 3 and not any(np.allclose(w.vertex, [0.25, 0.25]) for w in kept)
    # a point source's Gaussian far from the vertices: its tail there is no source
    from helmpinn import PointSource
    far = Problem(box, kappa=K * K, bcs={"scatterer": Dirichlet(0.0)}, wavenumber=K, pml=PML(0.5),
                  source=PointSource([0.53, 0.0], width=0.01))
    assert len(corner_wedges(far)) == 4


@pytest.mark.parametrize("bc", [Dirichlet(0.0), Neumann()])
def test_moments_of_wedge_waves(bc):
    """The identity against closed forms: an outgoing wave of order ν_m about the vertex (its
    residual a source at the vertex) has moment ``iα/π`` at n = m (``2iα/π`` at ν = 0) and none at
    the others (Bessel's Wronskian ``J H' − J' H = 2i/(πz)``); a regular wave of any order, a
    plane wave and a point source's field beyond the sector have none."""
    p = _square(bc)
    w = corner_wedges(p)[0]
    nus = w.orders
    for m in range(len(nus)):
        got = corner_moments(p, _wedge_wave(w, nus[m], "H"), w.radius)[0]
        want = np.zeros(len(nus), complex)
        want[m] = 1j * w.opening / math.pi * (2 if nus[m] == 0 else 1)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
        assert np.abs(corner_moments(p, _wedge_wave(w, nus[m], "J"), w.radius)[0]).max() < 1e-7
    d = np.array([math.cos(0.3), math.sin(0.3)])
    plane = lambda x: (np.exp(1j * K * x @ d), 1j * K * np.exp(1j * K * x @ d)[:, None] * d)
    src = np.array([0.6, -0.5])

    def point(x):
        r = np.hypot(*(x - src).T)
        return hankel1(0, K * r), (-K * hankel1(1, K * r) / r)[:, None] * (x - src)
    for field in (plane, point):
        for m in corner_moments(p, field):
            assert np.abs(m).max() < 1e-9


@pytest.mark.parametrize("bc", [Dirichlet(0.0), Neumann()])
def test_moments_are_the_residuals_moments(bc):
    """Green's identity itself: for a field that is no solution, ``u = e^{−|x − c|²/s²}`` (values
    and slopes on the edges too), the moments equal ``∫_S φ_n (Δu + k²u)`` by a polar
    Gauss-Legendre quadrature of the sector."""
    p = _square(bc)
    c, s = np.array([-0.3, -0.2]), 0.1

    def field(x):
        d = x - c
        g = np.exp(-np.sum(d * d, 1) / s ** 2)
        return g, (-2 / s ** 2) * g[:, None] * d

    def residual(x):
        d = x - c
        q = np.sum(d * d, 1) / s ** 2
        g = np.exp(-q)
        return g * (4 * q / s ** 2 - 4 / s ** 2) + K * K * g   # Δg in 2-D: (4q − 4)/s² g
    for w, got in zip(corner_wedges(p), corner_moments(p, field)):
        a, aw = np.polynomial.legendre.leggauss(200)
        r, rw = 0.5 * w.radius * (a + 1), 0.5 * w.radius * aw
        t, tw = 0.5 * w.opening * (a + 1), 0.5 * w.opening * aw
        rr, tt = np.meshgrid(r, t, indexing="ij")
        x = w.vertex + np.stack([rr.ravel() * np.cos(w.start + tt.ravel()), rr.ravel() * np.sin(w.start + tt.ravel())], 1)
        quad = np.outer(rw * r, tw).ravel()
        phi = jv(w.orders[None], w.k * rr.ravel()[:, None]) * w.angular(tt.ravel())
        want = phi.T @ (quad * residual(x))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-8 * max(1.0, np.abs(want).max()))


def test_rows_scale_and_shape():
    """corner_rows: the sectors' functionals stacked, each sector's columns its moments' weights
    times ``weight sqrt(L0 π/(α k L))``; none without corners, at weight 0 or a zero field's
    loss of 0."""
    p = _square(Dirichlet(0.0))
    x, b, c, C = corner_rows(p, 4.0, 2.0)
    parts = [wedge_functionals(w) for w in corner_wedges(p)]
    assert len(x) == sum(len(q[0]) for q in parts) and C.shape[1] == sum(q[3].shape[1] for q in parts)
    w = corner_wedges(p)[0]
    scale = 2.0 * math.sqrt(4.0 * math.pi / (w.opening * w.k * math.sqrt(p.domain.volume)))
    np.testing.assert_allclose(C[:len(parts[0][0]), :parts[0][3].shape[1]], parts[0][3] * scale, rtol=1e-14)
    assert corner_rows(p, 4.0, 0.0) is None and corner_rows(p, 0.0) is None
    assert corner_rows(Problem(Box([0, 0], [1, 1]), kappa=1.0, bcs={"*": Dirichlet(0.0)}), 1.0) is None


def test_corner_rows_through_a_decomposed_model():
    """The rows as the Gauss-Newton driver builds them (value and slope rows of scale
    GREEN_ROW_SCALE after the points', the columns 1/scale larger, joined to the points' by
    ``_joined_modes``): the residuals' mode rows are the weighted moments of the model's own field
    (its slopes by central differences), J v agrees with central differences and Jᵀw with J."""
    from helmpinn.models.decomposition import CARRIER_TERM, DecomposedModel, Rows
    from helmpinn.training.dd_driver import GREEN_ROW_SCALE, _joined_modes
    p = _square(Dirichlet(lambda x: -np.exp(1j * K * x[:, 0])))
    rows = Rows.from_problem(p, 300, 60, 0)
    lo, hi = p.sampling_domain.bounds
    model = DecomposedModel.create(lo, hi, [(3, 3)], ff_dim=4, hidden_dim=6, wavenumber=K)
    L0 = float(np.sum(np.abs(rows.f) ** 2))
    x, b, c, C = corner_rows(p, L0)
    s = GREEN_ROW_SCALE
    more, M = _joined_modes(len(rows), [(Rows(x, 0.0, s * b, s * c, 0.0, CARRIER_TERM), C / s)])
    res = model.residuals_for(Rows.concat([rows, more]), modes=M)
    theta = model.params
    r = res.residuals(theta)
    n, q = res.num_points, C.shape[1]
    assert res.num_modes == q and len(r) == n + 2 * q

    def field(z):
        h = 1e-6
        g = [(model.predict(z + h * e) - model.predict(z - h * e)) / (2 * h) for e in np.eye(2)]
        return model.predict(z), np.stack(g, 1)
    u, grad = field(x)
    ell = c * u + np.sum(b * grad, 1)
    want = C.T @ ell
    np.testing.assert_allclose(r[n:n + q] + 1j * r[n + q:], want, rtol=0, atol=1e-7 * np.abs(want).max())
    rng = np.random.default_rng(3)
    v = rng.normal(size=model.num_params)
    eps = 1e-5
    fd = (res.residuals(theta + eps * v) - res.residuals(theta - eps * v)) / (2 * eps)
    Jv = res.jvp(theta, v)
    assert np.abs(Jv[n:] - fd[n:]).max() < 1e-6 * np.abs(fd[n:]).max()
    J = res.jacobian(theta)
    w = rng.normal(size=res.num_residuals)
    np.testing.assert_allclose(res.vjp(theta, w), J.T @ w, rtol=0, atol=1e-10 * np.abs(J).max() * len(w))
    # a point-row part beside it: columns side by side, the points' part first
    P = rng.normal(size=(len(rows), 2))
    more2, M2 = _joined_modes(len(rows), [P, (more, M[len(rows):])])
    assert M2.shape == (len(rows) + len(more), 2 + q) and np.array_equal(M2[:len(rows), :2], P)
    assert np.array_equal(M2[len(rows):, 2:], M[len(rows):]) and not M2[len(rows):, :2].any()


def test_corner_weight_setting_is_checked():
    from helmpinn.training.dd_driver import GNDriver, GNSettings
    assert GNSettings().corners == 1.0
    for bad in (-1.0, math.nan, "1"):
        with pytest.raises((TypeError, ValueError), match="corners"):
            GNSettings(corners=bad)
    assert GNDriver(corners=0.0).settings.corners == 0.0


def test_memory_estimate_counts_the_corner_rows():
    """The decomposed run's memory estimate counts the corners' rows with the mode rows (their
    gradients and columns) in a run without the corners' singular functions, unless ``corners``
    is 0 or the optimiser is not Gauss-Newton; a run with the functions (the default) adds no
    corner rows."""
    from helmpinn.memory import _modes
    from helmpinn.problems.corners import CORNER_ROW_RADIUS, rows_corner_radius
    p = _square(Dirichlet(0.0))
    q = sum(len(w.orders) for w in corner_wedges(p, CORNER_ROW_RADIUS * rows_corner_radius(p)))   # the run's sectors
    off = {"singular": False}
    assert q > sum(len(w.orders) for w in corner_wedges(p)) and _modes(p, "gn", off, False) == (q, None)
    assert _modes(p, "gn", {"corners": 0.0, **off}, False) == (0, None) and _modes(p, "adam", off, False) == (0, None)
    assert _modes(p, "gn", {}, False) == (0, None)


def test_a_run_with_the_rows_weighs_down_a_wider_region():
    """The decomposed Gauss-Newton plan with the corner rows draws its points from a copy of the
    problem whose corner weights reach CORNER_WAVELENGTHS_WITH_ROWS wavelengths (the user's
    problem unchanged); without the rows, or where a corner would take none, the problem's own."""
    from helmpinn.problems.corners import CORNER_WAVELENGTHS_WITH_ROWS, rows_corner_radius
    from helmpinn.problems.sampler import CORNER_WAVELENGTHS
    from helmpinn.training.dd_driver import sampled_problem
    from helmpinn.training.plan import run_plan
    lam = 2 * math.pi / K
    p = _square(Dirichlet(0.0))
    assert p.sampler.corner_radius == pytest.approx(CORNER_WAVELENGTHS * lam)
    assert rows_corner_radius(p) == pytest.approx(CORNER_WAVELENGTHS_WITH_ROWS * lam)
    q = sampled_problem(p, None, corners=True)
    assert q is not p and q.sampler.corner_radius == pytest.approx(CORNER_WAVELENGTHS_WITH_ROWS * lam)
    assert p.sampler.corner_radius == pytest.approx(CORNER_WAVELENGTHS * lam)
    assert sampled_problem(p, None) is p
    assert rows_corner_radius(_square(Sommerfeld(K))) is None
    # a box wall near the vertices: the sectors (0.045) cannot hold the weighted discs
    assert rows_corner_radius(_square(Dirichlet(0.0), side_box=0.3)) is None
    assert rows_corner_radius(Problem(Box([0, 0], [1, 1]), kappa=1.0, bcs={"*": Dirichlet(0.0)})) is None
    plan = run_plan(p, model="decomposed")
    assert plan.model == "decomposed" and plan.corner_rows()
    assert not plan.with_overrides(gn={"corners": 0.0}).corner_rows()
