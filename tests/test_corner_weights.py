"""Re-entrant corners (a polygonal obstacle's vertices, an L-shaped polygon's inner corner): which
vertices they are, and the weights that the PDE rows and the Robin (Neumann) rows get about them
(sampler.corner_weights)."""
from __future__ import annotations

import numpy as np
import pytest

import helmpinn as hp
from helmpinn.problems import geometry as geo
from helmpinn.problems.sampler import CORNER_WAVELENGTHS, corner_weights

L_SHAPE = [[0.0, 0.0], [2.0, 0.0], [2.0, 1.0], [1.0, 1.0], [1.0, 2.0], [0.0, 2.0]]


def test_reentrant_corners_of_polygons_and_obstacles():
    corners, sizes = geo.Polygon(L_SHAPE).reentrant_corners()
    np.testing.assert_allclose(corners, [[1.0, 1.0]])
    np.testing.assert_allclose(sizes, [1.0])
    # a convex polygon has none; a straight vertex (the middle of an edge) is no corner either way
    assert len(geo.Polygon([[0, 0], [1, 0], [2, 0], [2, 1], [0, 1]]).reentrant_corners()[0]) == 0
    obstacle = geo.Polygon([[0, 0], [1, 0], [2, 0], [2, 1], [0, 1]])
    corners, sizes = geo.BoxMinusObstacle(geo.Box([-1, -1], [3, 3]), obstacle).reentrant_corners()
    assert sorted(map(tuple, corners)) == [(0, 0), (0, 1), (2, 0), (2, 1)]
    np.testing.assert_allclose(sizes, 1.0)
    # seen from outside, an obstacle's reflex vertex is a convex corner of the domain: not listed
    corners, _ = geo.BoxMinusObstacle(geo.Box([-1, -1], [3, 3]), geo.Polygon(L_SHAPE)).reentrant_corners()
    assert (1.0, 1.0) not in map(tuple, corners) and len(corners) == 5
    # a ball, a box: none
    assert len(geo.BoxMinusBall(geo.Box([-1, -1], [1, 1]), geo.Disk((0, 0), 0.3)).reentrant_corners()[0]) == 0
    assert geo.Box([0, 0, 0], [1, 1, 1]).reentrant_corners()[0].shape == (0, 3)


def test_corner_weights_values_and_the_edge_cap():
    corners, sizes = np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([0.5, 0.1])
    x = np.array([[0.0, 0.0], [0.1, 0.0], [0.0, 0.3], [0.5, 0.5], [1.03, 0.04], [1.0, 0.06]])
    w = corner_weights(x, corners, sizes, radius=0.2)
    # the first corner's radius 0.2 (its edge allows 0.25), the second's capped at 0.05
    np.testing.assert_allclose(w, [0.0, 0.25, 1.0, 1.0, 0.05**2 / 0.05**2 * (0.03**2 + 0.04**2) / 0.05**2, 1.0])
    assert np.all((w >= 0) & (w <= 1))


def _triangle_problem(obstacle):
    domain = geo.BoxMinusObstacle(geo.Box([-1, -1], [1, 1]), obstacle)
    return hp.Problem(domain, frequency=1.0, velocity=1.0, source=hp.PointSource((-0.5, 0.0)),
                      bcs={"scatterer": hp.Dirichlet(0.0)}, pml=hp.PML(0.5))


def test_a_polygonal_obstacle_weighs_its_pde_rows_down_about_its_vertices_only():
    triangle = geo.Polygon([(0.1, -0.3), (0.5, 0.0), (0.1, 0.3)])
    p = _triangle_problem(triangle)
    assert p.sampler.corner_radius == pytest.approx(CORNER_WAVELENGTHS * 1.0)   # the wavelength is 1
    bare = hp.Problem(p.domain, frequency=1.0, velocity=1.0, source=hp.PointSource((-0.5, 0.0)),
                      bcs={"scatterer": hp.Dirichlet(0.0)}, pml=hp.PML(0.5))
    bare.sampler.corner_radius = None   # the same draw without the corners' weights
    x, w = p.sample_pde(4000, 3, "sobol")
    x0, w0 = bare.sample_pde(4000, 3, "sobol")
    np.testing.assert_array_equal(x, x0)
    corners, sizes = triangle.corners(convex=True)
    np.testing.assert_allclose(w, w0 * corner_weights(x, corners, sizes, p.sampler.corner_radius))
    near = np.min(np.linalg.norm(x[:, None] - triangle.vertices[None], axis=2), axis=1) < 0.25
    assert near.any() and np.all(w[~near] == w0[~near]) and np.all(w[near] < w0[near])
    assert not triangle.contains(x[triangle.boundary_distance(x) > 1e-9]).any()   # none inside
    # the training set carries them on its PDE rows
    ts = p.sample(2000, 400, 5, "sobol")
    xw, ww = p.sample_pde(2000, np.random.default_rng(5), "sobol")
    np.testing.assert_allclose(ts.pde_weight, ww)


@pytest.mark.parametrize("bc", [hp.Neumann(), hp.Robin(2.0 - 1.0j, lambda x, n: x[:, 0] + 1j)])
def test_the_robin_rows_take_the_corner_weights_and_the_dirichlet_rows_do_not(bc):
    triangle = geo.Polygon([(0.1, -0.3), (0.5, 0.0), (0.1, 0.3)])
    domain = geo.BoxMinusObstacle(geo.Box([-1, -1], [1, 1]), triangle)
    make = lambda b: hp.Problem(domain, frequency=1.0, velocity=1.0, source=hp.PointSource((-0.5, 0.0)),  # noqa: E731
                                bcs={"scatterer": b}, pml=hp.PML(0.5))
    p, bare = make(bc), make(bc)
    bare.sampler.corner_radius = None   # the same draw without the corners' weights
    ts, t0 = p.sample(500, 2000, 4, "sobol"), bare.sample(500, 2000, 4, "sobol")
    np.testing.assert_array_equal(ts.x_bc, t0.x_bc)
    assert len(ts.x_bc) > 500 and np.allclose(triangle.boundary_distance(ts.x_bc), 0.0)
    corners, sizes = triangle.corners(convex=True)
    root = np.sqrt(corner_weights(ts.x_bc, corners, sizes, p.sampler.corner_radius))
    assert np.any(root < 0.5) and np.any(root == 1.0)
    # the whole row times sqrt(w): its |r|² counts w times
    np.testing.assert_allclose(ts.n_bc, t0.n_bc * root[:, None], rtol=1e-15, atol=0)
    np.testing.assert_allclose(np.broadcast_to(ts.alpha, root.shape), t0.alpha * root, rtol=1e-15, atol=0)
    if t0.g is not None:
        np.testing.assert_allclose(ts.g, t0.g * root, rtol=1e-15, atol=0)
    np.testing.assert_array_equal(ts.x_data, t0.x_data)   # the PML's wall: values, unweighted
    np.testing.assert_array_equal(ts.y, t0.y)
    # a sound-soft obstacle's rows are values (data rows): unweighted
    soft, soft0 = make(hp.Dirichlet(0.0)), make(hp.Dirichlet(0.0))
    soft0.sampler.corner_radius = None
    s, s0 = soft.sample(500, 2000, 4, "sobol"), soft0.sample(500, 2000, 4, "sobol")
    np.testing.assert_array_equal(s.x_data, s0.x_data)
    np.testing.assert_array_equal(s.y, s0.y)
    assert len(s.x_bc) == 0


def test_problems_without_reentrant_corners_draw_exactly_as_before():
    disc = _triangle_problem(geo.Disk((0.25, 0.0), 0.2))
    assert disc.sampler.corner_radius is None
    x, w = disc.sample_pde(3000, 7, "sobol")
    x0, w0 = disc.sampler._drawn(3000, np.random.default_rng(7), "sobol", disc.point_sources, disc.source_share)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(w, w0)
    box = hp.Problem(geo.Box([0, 0], [1, 1]), kappa=4.0, source=lambda x: np.ones(len(x)), bcs={"*": hp.Dirichlet(0.0)})
    assert box.sampler.corner_radius is None and box.sample_pde(100, 0)[1] is None

