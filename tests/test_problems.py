"""Geometry, sampling and problems: every built-in exact solution satisfies its PDE and boundary
conditions (finite differences), and the engine computes what the problem asks for."""
import math

import numpy as np
import pytest

import helmpinn
from helmpinn import geometry as geo
from helmpinn.models.model import Model
from helmpinn.problems import (
    Dirichlet,
    Neumann,
    Problem,
    Robin,
    Sommerfeld,
    complex_to_pairs,
    pairs_to_complex,
)
from helmpinn.problems.registry import get_problem, list_problems, problem_names

BUILTINS = ["plane1d", "dirichlet2d", "heterogeneous2d", "cube3d", "waveguide"]

DOMAINS = {
    "interval": lambda: geo.Interval(-1.0, 2.0),
    "box2": lambda: geo.Box([0.0, -1.0], [2.0, 1.0]),
    "box3": lambda: geo.Box([0.0, 0.0, 0.0], [1.0, 2.0, 0.5]),
    "box4": lambda: geo.Box([0.0] * 4, [1.0] * 4),
    "disk": lambda: geo.Disk((0.5, -0.25), 0.75),
    "ball3": lambda: geo.Ball((0.0, 1.0, 0.0), 2.0),
    "ball5": lambda: geo.Ball([0.0] * 5, 1.0),
    "scatterer2": lambda: geo.BoxMinusBall(geo.Box([0, 0], [2, 1]), geo.Ball((1.0, 0.5), 0.25)),
    "scatterer3": lambda: geo.BoxMinusBall(geo.Box([0, 0, 0], [1, 1, 1]), geo.Ball((0.5, 0.5, 0.5), 0.3)),
    "polygon": lambda: geo.Polygon([[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]]),
    "box-minus-polygon": lambda: geo.BoxMinusObstacle(geo.Box([-1, -1], [3, 3]),
                                                      geo.Polygon([[0, 0], [2, 0], [2, 1], [1, 1], [1, 2], [0, 2]])),
}


@pytest.mark.parametrize("method", geo.METHODS)
@pytest.mark.parametrize("name", list(DOMAINS))
def test_samples_inside_with_unit_outward_normals(name, method):
    dom = DOMAINS[name]()
    rng = np.random.default_rng(1)
    x = dom.sample_interior(500, rng, method)
    assert x.shape == (500, dom.dim) and x.dtype == np.float64
    assert dom.contains(x).all()
    b = dom.sample_boundary(300, rng, method)
    assert b.x.shape == b.normals.shape == (300, dom.dim) and b.parts.shape == (300,)
    assert dom.contains(b.x).all()
    np.testing.assert_allclose(np.linalg.norm(b.normals, axis=1), 1.0, rtol=1e-12)
    eps = 1e-6
    assert not dom.contains(b.x + eps * b.normals).any(), "normals must point out of the domain"
    assert dom.contains(b.x - eps * b.normals).all(), "normals must point out of the domain"
    assert set(b.parts.tolist()) <= set(dom.part_names)


def test_boundary_split_by_measure_and_scatterer_normals():
    box = geo.Box([0.0, 0.0], [2.0, 1.0])
    b = box.sample_boundary(600, 0)
    counts = {p: int((b.parts == p).sum()) for p in box.part_names}
    assert counts == {"xmin": 100, "xmax": 100, "ymin": 200, "ymax": 200}
    dom = geo.BoxMinusBall(box, geo.Ball((1.0, 0.5), 0.25))
    b = dom.sample_boundary(1000, 0, "sobol")
    s = b.parts == "scatterer"
    ratio = s.sum() / len(b)
    assert ratio == pytest.approx(2 * math.pi * 0.25 / (6 + 2 * math.pi * 0.25), abs=2e-3)
    towards_centre = (np.array([1.0, 0.5]) - b.x[s]) / 0.25
    np.testing.assert_allclose(b.normals[s], towards_centre, atol=1e-12)


def test_sampling_reproducible_and_quasi_random_even():
    box = geo.Box([0.0, 0.0], [1.0, 1.0])
    a = box.sample_interior(256, np.random.default_rng(5), "sobol")
    b = box.sample_interior(256, np.random.default_rng(5), "sobol")
    np.testing.assert_array_equal(a, b)
    # Sobol' with 2^8 points: each of the 16 x 16 cells holds exactly one point.
    cells = np.floor(a * 16).astype(int)
    assert len({tuple(c) for c in cells}) == 256
    with pytest.raises(ValueError, match="method"):
        box.sample_interior(10, 0, "grid")


def test_point_cloud_domain():
    rng = np.random.default_rng(0)
    interior = rng.random((50, 2))
    t = np.linspace(0, 2 * np.pi, 40, endpoint=False)
    nrm = np.stack([np.cos(t), np.sin(t)], axis=1)
    cloud = geo.PointCloud(interior, 0.5 + nrm, nrm, parts=np.where(t < np.pi, "top", "bottom"))
    assert cloud.part_names == ("top", "bottom")
    assert len(cloud.sample_interior(None)) == 50 and len(cloud.sample_interior(10, 0)) == 10
    b = cloud.sample_boundary(8, 0)
    assert len(b) == 8
    with pytest.raises(ValueError, match="unit"):
        geo.PointCloud(interior, nrm, 2 * nrm)


def test_complex_pairs_round_trip():
    z = np.array([1 + 2j, -3.5 + 0.25j])
    p = complex_to_pairs(z, np.float32)
    assert p.dtype == np.float32 and p.shape == (2, 2) and p.flags.c_contiguous
    np.testing.assert_array_equal(pairs_to_complex(p), z)


def test_registry():
    assert set(BUILTINS) <= set(problem_names())
    assert all(desc for _, desc in list_problems())
    assert get_problem("plane1d", k=5).wavenumber == 5
    with pytest.raises(ValueError, match="takes no option"):
        get_problem("plane1d", n=3)
    with pytest.raises(ValueError, match="unknown problem"):
        get_problem("nope")


def test_heterogeneous_medium_varies_by_two():
    p = get_problem("heterogeneous2d")
    x = p.test_points(101)
    k2 = p.kappa_at(x)
    assert k2.max() / k2.min() >= 2.0


def _interior_away_from_boundary(p, n=400):
    x = p.domain.sample_interior(n, np.random.default_rng(3))
    lo, hi = p.domain.bounds
    return x[np.all((x > lo + 0.01) & (x < hi - 0.01), axis=1)]


@pytest.mark.parametrize("name", BUILTINS)
def test_exact_solution_satisfies_pde_and_bcs(name):
    p = get_problem(name)
    x = _interior_away_from_boundary(p)
    h = 1e-3
    res = p.pde_residual_fd(x, h=h)
    # central differences are O(h^2 k^4); compare with the size of the terms
    scale = p.wavenumber**2 * np.abs(p.exact_at(x)).max()
    assert np.abs(res).max() / scale < 1e-4
    # halving h divides the residual by ~4: it is truncation error, not a wrong source
    res2 = p.pde_residual_fd(x, h=h / 2)
    assert np.abs(res2).max() < 0.3 * np.abs(res).max() + 1e-9 * scale
    bc = p.bc_residuals_fd(n=400)
    assert set(bc) == {part for part, c in p.bcs.items() if c is not None}
    for part, r in bc.items():
        assert np.abs(r).max() < 1e-6 * max(p.wavenumber, 1.0) * np.abs(p.exact_at(x)).max(), part


def test_plane1d_conditions():
    p = get_problem("plane1d", k=20.0)
    assert isinstance(p.bcs["xmin"], Dirichlet) and isinstance(p.bcs["xmax"], Robin)
    assert p.bcs["xmax"].alpha == -20j
    ts = p.sample(16, 2, 0)
    assert ts.sizes == {"pde": 16, "data": 1, "bc": 1}
    assert ts.x_data[0, 0] == 0.0 and ts.y[0] == 1.0 and ts.x_bc[0, 0] == 1.0 and ts.n_bc[0, 0] == 1.0


@pytest.mark.parametrize("name", BUILTINS)
def test_engine_residual_matches_problem(name):
    """The core's loss terms on a problem's points equal the residuals computed here from the
    engine's own forward pass (u, grad u, lap u): kappa, f, alpha, g and the (re, im) pairs
    reach the core as the problem means them."""
    p = get_problem(name)
    model = Model.create(p.dim, 8, 16, 2, dtype="float64", seed=1, fourier_sigma=1.0)
    ts = p.sample(64, 48, np.random.default_rng(0))
    ws = helmpinn.Workspace(model.spec, 32, "float64")
    grad = np.zeros_like(model.params)
    ws.value_and_grad(model.params, grad, **ts.to_core(np.float64))
    terms = ws.last_loss

    u, _, lap = model.predict_derivatives(ts.x_pde)
    f = 0 if ts.f is None else ts.f
    pde = np.mean(np.abs(lap + ts.kappa * u - f) ** 2)
    assert terms["pde"] == pytest.approx(pde, rel=1e-10)
    if ts.sizes["data"]:
        ud = model.predict(ts.x_data)
        assert terms["data"] == pytest.approx(np.mean(np.abs(ud - ts.y) ** 2), rel=1e-10)
    else:   # no Dirichlet part (waveguide: Robin ports and Neumann walls)
        assert terms["data"] == 0.0
    if ts.sizes["bc"]:
        ub, gb, _ = model.predict_derivatives(ts.x_bc)
        dudn = np.sum(gb * ts.n_bc, axis=1)
        g = 0 if ts.g is None else ts.g
        rho = dudn + ts.alpha * ub - g
        assert terms["bc"] == pytest.approx(np.mean(np.abs(rho) ** 2), rel=1e-10)
    else:
        assert terms["bc"] == 0.0


@pytest.mark.parametrize("d", [1, 2, 3])
def test_engine_lap_u_consistent_with_finite_differences(d):
    model = Model.create(d, 8, 24, 2, dtype="float64", seed=d, fourier_sigma=1.5)
    x = np.random.default_rng(d).random((40, d))
    u, g, lap = model.predict_derivatives(x)
    # fourth-order central differences of the engine's own u
    h = 1e-3
    g_fd = np.zeros_like(g)
    lap_fd = np.zeros_like(lap)
    for i in range(d):
        e = np.zeros(d)
        e[i] = h
        up1, um1 = model.predict(x + e), model.predict(x - e)
        up2, um2 = model.predict(x + 2 * e), model.predict(x - 2 * e)
        g_fd[:, i] = (-up2 + 8 * up1 - 8 * um1 + um2) / (12 * h)
        lap_fd += (-up2 + 16 * up1 - 30 * u + 16 * um1 - um2) / (12 * h * h)
    np.testing.assert_allclose(g, g_fd, atol=1e-6 * np.abs(g).max())
    np.testing.assert_allclose(lap, lap_fd, atol=1e-6 * np.abs(lap).max())


def test_user_problem_with_callables_and_point_sets():
    # Neumann on a disk: u = J-free manufactured u = exp(i k x), f = (kappa - k^2) u
    k = 3.0
    exact = lambda x: np.exp(1j * k * x[:, 0])  # noqa: E731
    grad = lambda x: np.stack([1j * k * exact(x), 0 * exact(x)], axis=1)  # noqa: E731
    p = Problem(geo.Disk((0, 0), 1.0), kappa=lambda x: 4.0 + x[:, 1] ** 2,
                source=lambda x: (4.0 + x[:, 1] ** 2 - k * k) * exact(x),
                bcs={"sphere": Neumann(lambda x, n: np.sum(grad(x) * n, axis=1))}, exact=exact)
    assert p.wavenumber == pytest.approx(math.sqrt(5.0), rel=1e-3)
    x = p.domain.sample_interior(100, 0) * 0.95
    assert np.abs(p.pde_residual_fd(x, h=1e-3)).max() < 1e-4
    assert np.abs(p.bc_residuals_fd()["sphere"]).max() < 1e-7
    ts = p.sample(100, 30, 0)
    assert ts.sizes == {"pde": 100, "data": 0, "bc": 30} and ts.alpha == 0
    core = ts.to_core(np.float32)
    assert core["kappa"].dtype == np.float32 and core["g_bc"].shape == (30, 2)
    assert "x_data" not in core

    # The same problem from explicit point sets, with extra data points and a Sommerfeld part.
    b = p.domain.sample_boundary(30, 1)
    cloud = geo.PointCloud(x, b.x, b.normals, parts=np.where(b.x[:, 0] > 0, "right", "left"))
    xd = np.array([[0.0, 0.0], [0.1, 0.2]])
    q = Problem(cloud, kappa=4.0, bcs={"right": Sommerfeld(2.0), "left": None}, data=(xd, exact(xd)))
    ts = q.sample(None, None)
    assert ts.sizes == {"pde": len(x), "data": 2, "bc": int((b.x[:, 0] > 0).sum())}
    assert ts.alpha == -2j and ts.g is None
    with pytest.raises(ValueError, match="no boundary condition"):
        Problem(cloud, kappa=4.0, bcs={"right": Neumann()})
    with pytest.raises(ValueError, match="unknown boundary part"):
        Problem(cloud, kappa=4.0, bcs={"up": Neumann(), "*": None})


def test_registry_is_explicit_with_no_import_circle():
    # Issue #26: problems.py imported builtin at its bottom (a circle) and the scattering problems
    # registered as a side effect of an import. Now the registry reads explicit tables, and
    # the problem's modules (the package's __init__, problem.py) import neither the registry nor
    # the factories at import time.
    import ast
    import pathlib

    import helmpinn.problems as package
    import helmpinn.problems.builtin as builtin
    import helmpinn.problems.obstacles as obstacles
    import helmpinn.problems.problem as problems
    import helmpinn.problems.registry as registry
    import helmpinn.problems.scattering as scattering
    import helmpinn.problems.waves as waves
    import helmpinn.problems.waves3d as waves3d

    def top_level_imports(module):
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        names = set()
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names.add(node.module or "")
                names.update(a.name for a in node.names if not node.module)
        return names

    assert not top_level_imports(problems) & {"builtin", "registry", "scattering"}
    assert not top_level_imports(package) & {"builtin", "registry", "scattering"}
    assert not top_level_imports(builtin) & {"registry", "scattering"}
    assert not top_level_imports(scattering) & {"registry"}
    assert not top_level_imports(waves) & {"registry"}
    assert not top_level_imports(waves3d) & {"registry"}
    assert not top_level_imports(obstacles) & {"registry"}
    assert registry._REGISTRY == {**builtin.PROBLEMS, **scattering.PROBLEMS, **obstacles.PROBLEMS,
                                  **waves.PROBLEMS, **waves3d.PROBLEMS}
    assert list(registry.problem_names())[:7] == BUILTINS + ["scatter-hard", "scatter-soft"]
    # the registry's names are its own (no forwarding from problems: tests/test_layers.py)
    assert not hasattr(problems, "get_problem") and not hasattr(problems, "cube3d")
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        problems.nope  # noqa: B018


def test_waveguide_mode_and_its_options():
    p = get_problem("waveguide", n=2)
    x = np.array([[0.3, 1.0], [0.7, 3.5]])
    beta = math.sqrt((3 * math.pi) ** 2 - (2 * math.pi / 4) ** 2)
    np.testing.assert_allclose(p.exact_at(x), np.cos(math.pi * x[:, 1] / 2) * np.exp(1j * beta * x[:, 0]))
    assert p.bcs["xmax"].alpha == pytest.approx(-1j * beta) and p.bcs["ymin"].alpha == 0.0
    with pytest.raises(ValueError, match="waveguide: mode n=12 does not propagate"):
        get_problem("waveguide", n=12)   # 12 pi / 4 = 3 pi: at cut-off
    with pytest.raises(ValueError, match="waveguide: n must be an integer"):
        get_problem("waveguide", n=1.5)


def _lens_problem_with_sources_and_pml(**kw):
    k = 2 * np.pi
    return Problem(geo.Box([0, 0], [1, 1]), kappa=lambda x: k * k * (1 + 0.3 * x[:, 0]),
                   source=[helmpinn.PointSource([0.5, 0.5]), lambda x: np.sin(x[:, 1]) + 0j],
                   bcs={}, pml=helmpinn.PML(0.3), **kw)


def test_a_problem_is_its_medium_sources_and_sampler():
    # Problem's attributes of the medium, the source and the draws are its parts', read and written
    # there (issue #62: the 613-line Problem split behind the same constructor)
    from helmpinn.problems.medium import Medium
    from helmpinn.problems.sampler import Sampler
    from helmpinn.problems.source_terms import SourceTerms

    p = _lens_problem_with_sources_and_pml(pml_share=0.3, density=lambda x: 1 + x[:, 0], a=1.5)
    assert isinstance(p.medium, Medium) and isinstance(p.sources, SourceTerms) and isinstance(p.sampler, Sampler)
    for name in ("kappa", "velocity", "pml", "density", "density_grad", "a", "b", "wavenumber", "background"):
        assert getattr(p, name) is getattr(p.medium, name), name
    for name in ("source", "point_sources", "source_share"):
        assert getattr(p, name) is getattr(p.sources, name), name
    for name in ("sampling_domain", "pml_share"):
        assert getattr(p, name) is getattr(p.sampler, name), name
    assert p.a == 1.5 and p.pml_share == 0.3 and p.source_share == 0.25 and len(p.point_sources) == 1
    assert p.pml is not None and p.medium.box is p.sampler.box
    p.pml_share = 0.5   # written where it is read: the draws take it
    assert p.sampler.pml_share == 0.5
    x = p.sample_pde(2000, 0)[0]
    assert abs(np.mean(p.in_layer(x[:1500])) - 0.5) < 0.05   # the base points: half in the layer
    assert not hasattr(helmpinn.problems, "__getattr__") and not hasattr(helmpinn.problems.problem, "__getattr__")


def test_a_draw_is_the_samplers_points_with_the_problems_values_there():
    p = _lens_problem_with_sources_and_pml()
    ts = p.sample(300, 60, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    x, w = p.sampler.sample_pde(300, rng, "uniform", p.point_sources, p.source_share)
    parts, wall = p.sampler.sample_boundary(60, rng, "uniform")
    np.testing.assert_array_equal(ts.x_pde, x)
    np.testing.assert_array_equal(ts.pde_weight, w)
    np.testing.assert_array_equal(ts.x_data, wall)   # a PML's outer wall: u = 0 (the data term)
    assert len(parts.x) == 0 and len(ts.x_bc) == 0
    root = np.sqrt(w)
    np.testing.assert_allclose(ts.kappa, p.kappa_at(x) * root, rtol=1e-15)
    np.testing.assert_allclose(ts.f, p.source_at(x) * root, rtol=1e-15)
    a, b = p.operator_at(x)
    np.testing.assert_allclose(ts.a_pde, a * root[:, None], rtol=1e-15)
    np.testing.assert_allclose(ts.b_pde, b * root[:, None], rtol=1e-15)
