"""Polygons, boxes with an obstacle removed, and fd_solve around a sound-soft and a sound-hard obstacle."""
from __future__ import annotations

import math

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems import geometry as geo
from helmpinn.problems.registry import get_problem
from helmpinn.reference import fd_solve
from helmpinn.reference.obstacle import nearest_boundary

L_SHAPE = [[0.0, 0.0], [2.0, 0.0], [2.0, 1.0], [1.0, 1.0], [1.0, 2.0], [0.0, 2.0]]   # area 3, perimeter 8


def test_polygon_orientation_area_perimeter_and_monte_carlo():
    ccw = geo.Polygon(L_SHAPE)
    cw = geo.Polygon(L_SHAPE[::-1])
    np.testing.assert_array_equal(np.sort(ccw.vertices, axis=0), np.sort(cw.vertices, axis=0))
    for p in (ccw, cw):
        v = p.vertices   # kept counter-clockwise: positive shoelace area
        assert 0.5 * np.sum(v[:, 0] * np.roll(v[:, 1], -1) - np.roll(v[:, 0], -1) * v[:, 1]) == pytest.approx(3.0)
        assert p.volume == pytest.approx(3.0) and p.surface == pytest.approx(8.0)
    # Monte Carlo areas: the polygon's and the box's without it
    u = geo.Box([-1.0, -1.0], [3.0, 3.0]).sample_interior(200_000, 3)
    inside = ccw.contains(u)
    assert inside.mean() * 16 == pytest.approx(3.0, abs=0.05)
    dom = geo.BoxMinusObstacle(geo.Box([-1.0, -1.0], [3.0, 3.0]), ccw)
    assert dom.volume == pytest.approx(13.0)
    assert dom.contains(u).mean() * 16 == pytest.approx(13.0, abs=0.05)
    # the notch of the L is outside, its corners and edges inside (closed)
    assert ccw.contains([[1.5, 1.5], [0.5, 1.5], [1.0, 1.0], [2.0, 0.5], [2.0001, 0.5]]).tolist() == \
        [False, True, True, True, False]


def test_polygon_boundary_is_uniform_along_the_edges_with_orthogonal_unit_normals():
    p = geo.Polygon(L_SHAPE)
    b = p.sample_boundary(4096, 0, "sobol")
    v, e = p.vertices, np.roll(p.vertices, -1, axis=0) - p.vertices
    # each point on its nearest edge, its normal that edge's: unit, orthogonal, pointing out
    t = np.einsum("nkd,kd->nk", b.x[:, None, :] - v[None], e) / np.sum(e * e, axis=1)
    dist = np.linalg.norm(b.x[:, None, :] - v[None] - np.clip(t, 0, 1)[..., None] * e[None], axis=2)
    edge = np.argmin(dist, axis=1)
    assert np.max(dist.min(axis=1)) < 1e-12
    np.testing.assert_allclose(np.linalg.norm(b.normals, axis=1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(np.einsum("nd,nd->n", b.normals, e[edge]), 0.0, atol=1e-14)
    assert not p.contains(b.x + 1e-6 * b.normals).any() and p.contains(b.x - 1e-6 * b.normals).all()
    # uniform in arc length: each edge holds its length's share of the points
    share = np.bincount(edge, minlength=len(v)) / len(b)
    np.testing.assert_allclose(share, np.linalg.norm(e, axis=1) / 8.0, atol=2e-3)
    assert set(b.parts.tolist()) == {"polygon"}


def test_polygon_interior_angles_and_edge_frames():
    for vertices, angles in ((L_SHAPE, [90, 90, 90, 270, 90, 90]), ([[0, 0], [1, 0], [0, 1]], [90, 45, 45]),
                             (L_SHAPE[::-1], [90, 90, 270, 90, 90, 90])):
        p = geo.Polygon(vertices)
        got = np.degrees(p.interior_angles())
        # the same angles at the same vertices, however the vertices were given
        order = [int(np.flatnonzero(np.all(np.isclose(p.vertices, v), axis=1))[0]) for v in np.asarray(vertices, float)]
        np.testing.assert_allclose(got[order], angles, atol=1e-12)
        assert got.sum() == pytest.approx(180 * (len(vertices) - 2))
        d, n = p.edge_directions, p.edge_normals
        np.testing.assert_allclose(np.linalg.norm(d, axis=1), 1.0, rtol=1e-15)
        np.testing.assert_allclose(np.sum(d * n, axis=1), 0.0, atol=1e-15)
        mid = p.vertices + 0.5 * (np.roll(p.vertices, -1, axis=0) - p.vertices)
        assert not p.contains(mid + 1e-6 * n).any() and p.contains(mid - 1e-6 * n).all()


def test_box_minus_polygon_samples_and_scatterer_normals_point_into_the_obstacle():
    square = geo.Polygon([[0.4, 0.4], [0.8, 0.4], [0.8, 0.8], [0.4, 0.8]])
    dom = geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [2.0, 1.5]), square)
    assert dom.part_names == ("xmin", "xmax", "ymin", "ymax", "scatterer")
    for method in geo.METHODS:
        x = dom.sample_interior(800, 1, method)
        assert dom.contains(x).all() and not square.contains(x).any()
        b = dom.sample_boundary(700, 2, method)
        s = b.parts == "scatterer"
        assert s.sum() == round(700 * 1.6 / (7.0 + 1.6))   # by measure
        assert square.contains(b.x[s] + 1e-6 * b.normals[s]).all()   # into the obstacle
        assert dom.contains(b.x - 1e-6 * b.normals).all()
    # with a PML, the obstacle stays and the box grows
    p = hp.Problem(dom, 25.0, bcs={"scatterer": hp.Dirichlet(1.0)}, pml=hp.PML(0.3))
    assert isinstance(p.sampling_domain, geo.BoxMinusObstacle)
    assert p.sampling_domain.obstacle is square
    np.testing.assert_allclose(p.sampling_domain.bounds[0], [-0.3, -0.3])
    ts = p.sample(400, 200, rng=0)
    assert len(ts.x_pde) == 400 and not square.contains(ts.x_pde).any()
    on_square = square.boundary_distance(ts.x_data) < 1e-12   # Dirichlet rows: the data term
    assert on_square.sum() > 0 and np.allclose(ts.y[on_square], 1.0)


@pytest.mark.parametrize("vertices, match", [
    ([[0, 0], [1, 0]], "n >= 3"),
    ([[0, 0], [1, 0], [np.nan, 1]], "finite"),
    ([[0, 0], [1, 1], [1, 0], [0, 1]], "simple polygon"),
    ([[0, 0], [1, 0], [1, 0], [0, 1]], "coincide"),
    ([[0, 0], [1, 0], [2, 0]], "simple polygon|no area"),
    ([[0, 0], [2, 0], [1, 0], [1, 1]], "simple polygon"),
    ("abc", "vertices must be"),
])
def test_polygon_refuses_bad_vertices_naming_them(vertices, match):
    with pytest.raises(ValueError, match=f"Polygon: .*({match})"):
        geo.Polygon(vertices)


def test_box_minus_obstacle_refuses_an_obstacle_not_inside():
    box = geo.Box([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="strictly inside the box"):
        geo.BoxMinusObstacle(box, geo.Polygon([[0.5, 0.5], [1.2, 0.5], [0.5, 0.9]]))
    with pytest.raises(TypeError, match="obstacle must be"):
        geo.BoxMinusObstacle(box, geo.Box([0.2, 0.2], [0.4, 0.4]))
    with pytest.raises(TypeError, match="box must be a Box"):
        geo.BoxMinusObstacle(geo.Ball((0, 0), 2.0), geo.Ball((0, 0), 0.5))
    with pytest.raises(ValueError, match="same dimension"):
        geo.BoxMinusObstacle(geo.Box([0, 0, 0], [1, 1, 1]), geo.Polygon([[0.2, 0.2], [0.4, 0.2], [0.3, 0.4]]))


# -- fd_solve around a sound-soft obstacle -----------------------------------------------------
K = 7.0


def _g(x):   # a smooth field, the obstacle's and the walls' Dirichlet data
    return np.exp(1j * (3 * x[:, 0] + 2 * x[:, 1])) * np.cos(4 * x[:, 1] - x[:, 0])


def _f(x):   # Δg + K² g
    e = np.exp(1j * (3 * x[:, 0] + 2 * x[:, 1]))
    c, s = np.cos(4 * x[:, 1] - x[:, 0]), np.sin(4 * x[:, 1] - x[:, 0])
    return (-9 * c + 6j * s - c) * e + (-4 * c - 16j * s - 16 * c) * e + K * K * _g(x)


OBSTACLES = {
    "grid-aligned square": lambda: geo.Polygon([[0.3, 0.35], [0.6, 0.35], [0.6, 0.65], [0.3, 0.65]]),
    "slanted triangle": lambda: geo.Polygon([[0.31, 0.33], [0.67, 0.41], [0.42, 0.71]]),
    "disk": lambda: geo.Ball([0.5, 0.5], 0.2),
}


def _max_error(obstacle, n, order):
    dom = geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]), obstacle)
    p = hp.Problem(dom, kappa=K * K, source=_f, bcs={"*": hp.Dirichlet(_g)}, exact=_g)
    sol = fd_solve(p, 1.0 / n, order=order)
    x = sol.points
    keep = ~obstacle.contains(x)
    return np.max(np.abs(sol.values.ravel()[keep] - _g(x[keep])))


def test_the_finite_difference_check_of_the_manufactured_source():
    x = np.random.default_rng(0).random((20, 2))
    h = 1e-3
    lap = sum((_g(x + h * e) - 2 * _g(x) + _g(x - h * e)) / h**2 for e in np.eye(2))
    np.testing.assert_allclose(_f(x), lap + K * K * _g(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", list(OBSTACLES))
@pytest.mark.parametrize("order, ratio", [(4, 12.0), (2, 3.5)])
def test_fd_solve_around_a_sound_soft_obstacle_converges_at_its_order(name, order, ratio):
    """Manufactured: the field g outside the obstacle, g on it and on the walls; the cut stencils
    keep the order next to a grid-aligned, a slanted and a curved boundary (no staircase)."""
    e = [_max_error(OBSTACLES[name](), n, order) for n in (20, 40, 80)]
    assert e[0] / e[1] > ratio and e[1] / e[2] > ratio, e


def _grad_g(x):
    e = np.exp(1j * (3 * x[:, 0] + 2 * x[:, 1]))
    a = 4 * x[:, 1] - x[:, 0]
    c, s = np.cos(a), np.sin(a)
    return np.stack([e * (3j * c + s), e * (2j * c - 4 * s)], 1)


def test_the_manufactured_gradient_matches_finite_differences():
    x = np.random.default_rng(1).random((20, 2))
    h = 1e-6
    fd = np.stack([(_g(x + h * e) - _g(x - h * e)) / (2 * h) for e in np.eye(2)], 1)
    np.testing.assert_allclose(_grad_g(x), fd, rtol=1e-7, atol=1e-7)


def _hard_max_error(obstacle, n, order, alpha):
    dom = geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]), obstacle)
    # ∂g/∂n + α g with n the domain's outward normal (into the obstacle)
    bc = hp.Robin(alpha, lambda x, nrm: np.sum(_grad_g(x) * nrm, 1) + alpha * _g(x))
    p = hp.Problem(dom, kappa=K * K, source=_f, bcs={"scatterer": bc, "*": hp.Dirichlet(_g)}, exact=_g)
    sol = fd_solve(p, 1.0 / n, order=order)
    x = sol.points
    keep = ~obstacle.contains(x)
    return np.max(np.abs(sol.values.ravel()[keep] - _g(x[keep])))


@pytest.mark.parametrize("name", list(OBSTACLES))
@pytest.mark.parametrize("alpha", [0.0, 5.0])
def test_fd_solve_around_a_sound_hard_obstacle_converges_at_fourth_order(name, alpha):
    """Manufactured: ∂g/∂n + α g on the obstacle (Neumann, Robin), g on the walls; the ghost
    nodes' constrained fits keep fourth order at a grid-aligned, a slanted and a curved boundary
    (measured ratios 11.6 to 33 a halving, docs/guide/reference-solver.md; a smooth field needs
    none of the corners' singular functions, which cost the triangle a factor 2 to 4)."""
    e = [_hard_max_error(OBSTACLES[name](), n, 4, alpha) for n in (20, 40, 80)]
    assert e[0] / e[1] > 10.0 and e[1] / e[2] > 10.0, e
    assert e[2] < 2e-5, e


def _corner_field(poly, i, k, r1=0.02, r2=0.25):
    """``χ(r) J_ν(kr) cos(νφ)`` about vertex i of ``poly`` (φ from its outgoing edge through the
    domain, ν = π/ω): the Helmholtz field a sound-hard corner makes, cut off smoothly between r1
    and r2 by χ (a degree-7 smoothstep); returns (u, ∇u, f = Δu + k²u)."""
    from scipy.special import jv, jvp

    v = poly.vertices[i]
    e_a = poly.edge_directions[i]
    n_a = poly.edge_normals[i]
    nu = math.pi / (2 * math.pi - poly.interior_angles()[i])

    def polar(x):
        r = x - v
        a, b = r @ e_a, r @ n_a
        phi = np.arctan2(b, a)
        return np.hypot(a, b), np.where(phi < -1e-12, phi + 2 * math.pi, phi), a, b

    def chi(r):   # (χ, χ', χ'')
        t = np.clip((r - r1) / (r2 - r1), 0.0, 1.0)
        s, ds, d2s = (35 * t**4 - 84 * t**5 + 70 * t**6 - 20 * t**7, 140 * t**3 * (1 - t) ** 3,
                      420 * t**2 * (1 - t) ** 2 * (1 - 2 * t))
        return 1 - s, -ds / (r2 - r1), -d2s / (r2 - r1) ** 2

    def u(x):
        r, phi, _, _ = polar(x)
        return chi(r)[0] * jv(nu, k * r) * np.cos(nu * phi)

    def grad(x):
        r, phi, a, b = polar(x)
        c, dc, _ = chi(r)
        rr = np.maximum(r, 1e-300)
        d_r = (c * k * jvp(nu, k * r) + dc * jv(nu, k * r)) * np.cos(nu * phi)
        d_phi = -c * nu * jv(nu, k * r) * np.sin(nu * phi) / rr
        g_ab = np.where(r[:, None] > 1e-12, (d_r[:, None] * np.stack([a, b], 1) + d_phi[:, None] * np.stack([-b, a], 1))
                        / rr[:, None], 0.0)   # at the vertex itself: ∂u/∂n = 0 on both edges
        return g_ab[:, :1] * e_a + g_ab[:, 1:] * n_a

    def f(x):   # Δ(χ s) + k² χ s = 2 χ' s_r + s (χ'' + χ'/r), s = J_ν(kr) cos(νφ)
        r, phi, _, _ = polar(x)
        _, dc, d2c = chi(r)
        s, s_r = jv(nu, k * r) * np.cos(nu * phi), k * jvp(nu, k * r) * np.cos(nu * phi)
        return 2 * dc * s_r + s * (d2c + dc / np.maximum(r, 1e-300))

    return u, grad, f


def test_fd_solve_by_a_sound_hard_corner_converges():
    """The field a 66° sound-hard vertex makes (``J_ν(kr) cos(νφ)``, ν = 0.61, singular gradient)
    about the slanted triangle's first vertex, cut off smoothly, with a plane wave: the ghosts'
    fits with the vertex's singular functions, the corrected rows by it and the entries across
    its tip make fd_solve converge (measured 6e-2, 1e-3, 5e-4 at h = 1/40, 1/80, 1/160;
    polynomial ghosts and plain rows alone: 0.28, 0.20, 0.14, docs/guide/reference-solver.md)."""
    poly = OBSTACLES["slanted triangle"]()
    k = 6.0 * np.sqrt(1 + 0.2j)   # damped: no resonance of the closed box
    u, grad, f = _corner_field(poly, 0, k)
    wave = np.array([0.6, 0.8]) * k

    def exact(x):
        return u(x) + 0.3 * np.exp(1j * x @ wave)

    def normal_derivative(x, nrm):
        return np.sum((grad(x) + 0.3j * np.exp(1j * x @ wave)[:, None] * wave) * nrm, 1)

    dom = geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]), poly)
    p = hp.Problem(dom, kappa=k * k, source=f, bcs={"scatterer": hp.Neumann(normal_derivative),
                                                    "*": hp.Dirichlet(exact)}, exact=exact)
    errors = []
    for n in (40, 80):
        sol = fd_solve(p, 1.0 / n)
        x = sol.points[~poly.contains(sol.points)]
        errors.append(np.max(np.abs(sol(x) - exact(x))))
    assert errors[1] < 3e-3 and errors[0] / errors[1] > 10, errors


def test_fd_solve_by_a_sound_hard_polygon_ignores_rounding_at_its_vertices():
    """A vertex on a node sits on both its edges up to rounding; which edge a fit there takes
    must not depend on it: moving the vertices by 1e-12 moves the field by 2e-7 (the vertex
    node's fit takes both edges' conditions; 16 % before it did)."""
    tri = np.array([[0.31, 0.33], [0.67, 0.41], [0.42, 0.71]])      # on nodes at h = 1/100
    x = np.random.default_rng(3).uniform(0.0, 1.0, (3000, 2))
    x = x[geo.Polygon(tri).boundary_distance(x) > 0.05]
    out = []
    for step in (1e-12, -1e-12):
        poly = geo.Polygon(tri + step * np.array([[1.0, 0.3], [0.2, 1.0], [-1.0, 0.5]]))
        p = hp.Problem(geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]), poly), kappa=(K * K) * (1 + 0.1j),
                       source=hp.PointSource([0.2, 0.8], width=0.03), bcs={"scatterer": hp.Neumann(), "*": hp.Dirichlet(0.0)})
        out.append(fd_solve(p, 0.01)(x))
    assert np.linalg.norm(out[0] - out[1]) < 1e-5 * np.linalg.norm(out[1])


def test_fd_solve_around_a_sound_hard_disk_at_second_order():
    e = [_hard_max_error(OBSTACLES["disk"](), n, 2, 0.0) for n in (20, 40, 80)]
    assert e[0] / e[1] > 3.0 and e[1] / e[2] > 3.0, e


def test_nearest_boundary_points_and_normals():
    rng = np.random.default_rng(2)
    x = rng.uniform(0.1, 0.9, (200, 2))
    disk = geo.Ball([0.5, 0.5], 0.2)
    foot, nu = nearest_boundary(disk, x, 0.01)
    np.testing.assert_allclose(np.linalg.norm(foot - disk.center, axis=1), 0.2, rtol=1e-12)
    np.testing.assert_allclose(nu, (foot - disk.center) / 0.2, atol=1e-12)
    tri = OBSTACLES["slanted triangle"]()
    foot, nu = nearest_boundary(tri, x, 0.01)
    np.testing.assert_allclose(tri.boundary_distance(foot), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(x - foot, axis=1), tri.boundary_distance(x), rtol=1e-12, atol=1e-14)
    # the normal points out of the obstacle: a step along it leaves (or stays out of) the triangle
    assert not tri.contains(foot + 1e-6 * nu).any()
    on_edge = np.min(np.linalg.norm(foot[:, None, :] - tri.vertices[None], axis=2), axis=1) > 1e-4
    assert on_edge.sum() > 100 and tri.contains(foot[on_edge] - 1e-6 * nu[on_edge]).all()

    class Blob(geo.Domain):     # a disk the code does not recognise: the signed-distance path
        dim = 2
        contains, boundary_distance = disk.contains, disk.boundary_distance

    far = x[disk.boundary_distance(x) > 0.02]
    foot_g, nu_g = nearest_boundary(Blob(), far, 0.01)
    foot_e, nu_e = nearest_boundary(disk, far, 0.01)
    np.testing.assert_allclose(foot_g, foot_e, atol=1e-8)
    np.testing.assert_allclose(nu_g, nu_e, atol=1e-8)


def test_fd_solve_matches_the_series_of_the_sound_hard_cylinder():
    """The Hankel series of a sound-hard cylinder in a PML of power 2: about second order (the
    PML's kink), as the sound-soft one; measured 3.7e-2, 8.1e-3, 1.5e-3."""
    p = get_problem("scatter-hard")
    x = p.test_points()
    exact = p.exact(x)
    err = [np.linalg.norm(fd_solve(p, h)(x) - exact) / np.linalg.norm(exact) for h in (0.2, 0.1, 0.05)]
    assert err[0] / err[1] > 4.0 and err[1] / err[2] > 4.0 and err[2] < 2e-3, err


def test_fd_solve_matches_the_series_of_the_sound_soft_cylinder():
    p = get_problem("scatter-soft")
    x = p.test_points()
    exact = p.exact(x)
    err = [np.linalg.norm(fd_solve(p, h)(x) - exact) / np.linalg.norm(exact) for h in (0.2, 0.1)]
    # second order: the PML of power 2 (docs/guide/reference-solver.md) and the spline next to
    # the cylinder
    assert err[1] < 1e-2 and err[0] / err[1] > 3.0, err


def test_fd_solve_refuses_a_free_obstacle_and_a_too_coarse_grid():
    free = hp.Problem(geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]), geo.Ball([0.5, 0.5], 0.2)), 9.0,
                      bcs={"scatterer": None, "*": hp.Dirichlet(0.0)})
    with pytest.raises(NotImplementedError, match="scatterer has no boundary condition"):
        fd_solve(free, 0.05)
    thin = geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]),
                                geo.Polygon([[0.2, 0.2], [0.8, 0.2], [0.8, 0.92], [0.2, 0.92]]))
    p = hp.Problem(thin, 9.0, bcs={"*": hp.Dirichlet(0.0)})
    with pytest.raises(ValueError, match="within 5 nodes of the grid's outer wall"):
        fd_solve(p, 1 / 20)


def test_scatter_square_soft_reference_holds_its_boundary_data_and_converges():
    p = get_problem("scatter-square-soft", wavelengths=2.0, ref_points=16)
    assert p.wavenumber == pytest.approx(2 * math.pi)
    sol = fd_solve(p, 1.0 / 16)    # the reference's own grid: 16 nodes a wavelength of 1
    x = sol.points
    on_edges = p.domain.obstacle.boundary_distance(x) < 1e-12
    assert on_edges.sum() == 4 * 8
    np.testing.assert_allclose(sol.values.ravel()[on_edges], -np.exp(1j * p.wavenumber * x[on_edges, 0]),
                               rtol=1e-12)
    t = p.test_points()
    assert not p.domain.obstacle.contains(t[p.domain.obstacle.boundary_distance(t) > 0]).any()
    finer = get_problem("scatter-square-soft", wavelengths=2.0, ref_points=32)
    a, b = p.exact(t), finer.exact(t)
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 3e-2
    with pytest.raises(ValueError, match="ref_points"):
        get_problem("scatter-square-soft", ref_points=4)


@pytest.mark.parametrize("alpha", [0.0, 2.0 - 1.0j])
def test_fd_solve_sound_hard_obstacle_in_the_scattered_field_form(alpha):
    """With a background source u₀ the unknown is u − u₀ and the obstacle's condition is the
    total field's: data ∂u₀/∂n + α u₀ on a disk and u₀ on the walls make the scattered field
    zero (a wrong sign in the ghost rows' shift would double u₀ there instead)."""
    from helmpinn.problems.sources import FreeSpaceSource

    k = 6.0
    u0 = FreeSpaceSource((0.2, 0.5), k)
    disk = geo.Ball([0.62, 0.5], 0.15)
    bc = hp.Robin(alpha, lambda x, nrm: np.sum(u0.gradient(x) * nrm, 1) + alpha * u0(x))
    p = hp.Problem(geo.BoxMinusObstacle(geo.Box([0.0, 0.0], [1.0, 1.0]), disk), k * k,
                   bcs={"scatterer": bc, "*": hp.Dirichlet(lambda x: u0(x))}, background=u0)
    sol = fd_solve(p, 1 / 40)
    x = sol.points
    keep = ~disk.contains(x) & (np.linalg.norm(x - u0.position, axis=1) > 0.1)
    assert np.max(np.abs(sol.values.ravel()[keep])) < 1e-9 * np.max(np.abs(u0(x[keep])))
