"""Decompositions sized by the local wavenumber: graded levels (cells of their own widths), the
cell edges' rule, the subdomains' own Fourier scales, and points drawn in proportion to k^d
with their importance weights. The graded windows are checked against an independent NumPy
evaluation (the operator by fourth-order finite differences in x)."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import reference as ref
import helmpinn as hp
from helmpinn import ModelSpec
from helmpinn.defaults import graded_edges, local_wavenumbers
from helmpinn.models.decomposition import DecomposedModel, Level, Rows
from helmpinn.problems.geometry import Box
from helmpinn.problems.sampler import CellDensity
from helmpinn.training.dd_driver import decomposed_settings, sampled_problem, subdomain_wavenumbers

EDGES = [[-1.0, -0.2, 0.1, 0.3, 0.6, 1.5], [0.0, 0.3, 0.45, 0.6, 0.95, 1.2]]   # cells 0.15 to 0.9 wide
LO, HI = np.array([-1.0, 0.0]), np.array([1.5, 1.2])


def graded_model(overlap=0.6, seed=0):
    grid = (len(EDGES[0]) - 1, len(EDGES[1]) - 1)
    return DecomposedModel.create(LO, HI, [grid], overlap=overlap, ff_dim=4, hidden_dim=6, wavenumber=3.0,
                                  seed=seed, edges=[EDGES])


def numpy_u(model, x):
    """u at x from scratch: each axis's bumps on its own cells, normalised; N_j by reference.py."""
    lv = model.levels[0]
    spec = model.specs[0]
    bumps = []
    for a in range(2):
        e = np.asarray(EDGES[a])
        c, h = 0.5 * (e[1:] + e[:-1]), 0.5 * np.diff(e) * (1 + lv.overlap)
        t = (x[None, :, a] - c[:, None]) / h[:, None]
        v = np.where(np.abs(t) < 1, np.exp(-1 / np.maximum(1 - t * t, 1e-300)), 0.0)
        bumps.append((v / v.sum(0), c, h))
    u = np.zeros(len(x), complex)
    for j, index in enumerate(lv.indices):
        om = np.prod([bumps[a][0][i] for a, i in enumerate(index)], axis=0)
        centre = np.array([bumps[a][1][i] for a, i in enumerate(index)])
        half = np.array([bumps[a][2][i] for a, i in enumerate(index)])
        val = ref.network(model.params[model.subdomains[j]["slice"]][None], spec, (x - centre) / half, 0)[0]
        u += np.where(om > 1e-13, om, 0.0) * (val[:, 0] + 1j * val[:, 1])
    return u


def test_graded_residuals_match_finite_differences():
    """The residual of a graded model (windows and their derivatives with each cell's own
    half-width) against the operator applied to the NumPy u by fourth-order differences."""
    model = graded_model()
    rng = np.random.default_rng(0)
    x = rng.uniform(LO + 0.01, HI - 0.01, (60, 2))
    a = np.stack([np.full(60, 1.0 + 0.3j), np.full(60, 0.7)], axis=1)
    b = rng.normal(size=(60, 2)) * 0.5
    f = rng.normal(size=60) + 1j * rng.normal(size=60)
    rows = Rows(x, a, b, 9.0, f, "pde")
    r = model.residuals_for(rows).residuals(model.params)
    h = 2.5e-4   # (the narrowest windows' derivatives need a short step)
    u0 = numpy_u(model, x)
    expected = 9.0 * u0 - f
    for ax in range(2):
        e = np.zeros(2)
        e[ax] = h
        up, um, up2, um2 = (numpy_u(model, x + s * e) for s in (1, -1, 2, -2))
        expected += a[:, ax] * (-(up2 + um2) + 16 * (up + um) - 30 * u0) / (12 * h * h)
        expected += b[:, ax] * (8 * (up - um) - (up2 - um2)) / (12 * h)
    got = r[0::2] + 1j * r[1::2]
    assert np.abs(got - expected).max() < 1e-5 * max(1.0, np.abs(expected).max())
    assert np.allclose(model.predict(x), u0, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("overlap", [0.05, 0.6, 1.0])
def test_graded_windows_sum_to_one_and_are_the_dense_ones(overlap):
    lv = Level(LO, HI, (5, 5), overlap, EDGES)
    rng = np.random.default_rng(1)
    x = np.concatenate([[LO, HI], LO + (HI - LO) * rng.random((3000, 2))])
    dense = lv.axis_windows(x)
    for a in range(2):
        assert np.abs(dense[a][0].sum(0) - 1).max() < 1e-14
        i, *w = lv.axis_candidates(x[:, a], a)
        for m in range(3):
            sparse = np.zeros_like(dense[a][m])
            np.add.at(sparse, (np.where(i >= 0, i, 0), np.broadcast_to(np.arange(len(x)), i.shape)),
                      np.where(i >= 0, w[m], 0.0))
            assert np.allclose(sparse, dense[a][m], rtol=1e-13, atol=1e-13 * np.abs(dense[a][m]).max())
    model = DecomposedModel.create(LO, HI, [(5, 5)], overlap=overlap, ff_dim=3, hidden_dim=4, edges=[EDGES])
    assert np.abs(model.window_sums(x) - 1).max() < 1e-14
    covered = np.zeros(len(x), int)
    for _, idx, *_ in model.pieces(x, derivatives=False):
        covered[idx] += 1
    assert covered.min() >= 1


def test_graded_model_saves_and_loads(tmp_path):
    model = graded_model(seed=3)
    x = np.random.default_rng(2).uniform(LO, HI, (50, 2))
    model.save(tmp_path / "m.npz")
    back = DecomposedModel.load(tmp_path / "m.npz")
    assert [e.tolist() for e in back.levels[0].edges] == EDGES
    assert np.array_equal(back.predict(x), model.predict(x))


def test_bad_edges_name_the_axis():
    with pytest.raises(ValueError, match=r"edges\[1\]: expected 6 increasing edges"):
        Level(LO, HI, (5, 5), 0.6, [EDGES[0], [0.0, 0.5, 0.4, 0.6, 0.9, 1.2]])
    with pytest.raises(ValueError, match=r"edges\[0\]: expected 6 increasing edges from -1 to 1.5"):
        Level(LO, HI, (5, 5), 0.6, [EDGES[0][:-1] + [1.4], EDGES[1]])
    with pytest.raises(ValueError, match=r"edges\[0\]: neighbouring cells too unequal"):
        Level(LO, HI, (3, 5), 0.6, [[-1.0, -0.99, 1.4, 1.5], EDGES[1]])
    with pytest.raises(ValueError, match="edges: expected None or 2 arrays"):
        Level(LO, HI, (5, 5), 0.6, [EDGES[0]])


def test_subdomains_take_their_own_fourier_scale():
    """σ_j = k_j h_j / (2π sqrt(d)) with each subdomain's wavenumber and its own half-width."""
    lv = Level(LO, HI, (5, 5), 0.6, EDGES)
    ks = np.linspace(2.0, 40.0, len(lv))
    model = DecomposedModel.create(LO, HI, [(5, 5)], overlap=0.6, ff_dim=64, hidden_dim=4, wavenumber=ks,
                                   edges=[EDGES], seed=1)
    for j, sd in enumerate(model.subdomains):
        B = model.subnetwork(j).views["B"]
        sigma = ks[j] * float(np.mean(sd["half"])) / (2 * math.pi * math.sqrt(2))
        assert abs(np.std(B) / sigma - 1) < 0.3
    with pytest.raises(ValueError, match="wavenumber: expected a number >= 0 or 25 of them"):
        DecomposedModel.create(LO, HI, [(5, 5)], overlap=0.6, wavenumber=ks[:3], edges=[EDGES])


def test_graded_edges_rule():
    limit = 2 * math.pi / 0.85
    # a constant k: the equal cells of the rule
    e = graded_edges(0.0, 3.0, np.full(100, 4 * math.pi), 0.85, 0.6)
    assert len(e) - 1 == math.ceil(0.85 * 3.0 * 4 * math.pi / (2 * math.pi)) and np.allclose(np.diff(e), 3.0 / (len(e) - 1))
    # a slow band (k doubled on [1.4, 1.8]): finer cells there, every cell within the limit under
    # its subdomain, neighbours within a factor 2
    t = (np.arange(300) + 0.5) / 100
    k = np.where((t > 1.4) & (t < 1.8), 8 * math.pi, 4 * math.pi)
    e = graded_edges(0.0, 3.0, k, 0.85, 0.6)
    w = np.diff(e)
    assert e[0] == 0.0 and e[-1] == 3.0 and np.all(w > 0)
    assert len(w) < math.ceil(0.85 * 3.0 * 4)   # fewer than by the largest k everywhere (11)
    for lo, wi in zip(e[:-1], w):
        under = (t + 0.005 > lo - 0.3 * wi) & (t - 0.005 < lo + wi + 0.3 * wi)
        assert wi * k[under].max() <= limit * (1 + 1e-6)
    assert np.all(w[1:] <= 2 * w[:-1] * (1 + 1e-9))
    assert w[np.searchsorted(e, 1.6) - 1] < 0.7 * w.max()


def _inclusion(v_in=0.5, constant=False):
    if constant:
        return hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), frequency=2.0, velocity=1.0,
                          source=hp.PointSource((-0.5, 0.0)), bcs={}, pml=hp.PML(0.5))

    def velocity(x):
        return np.where(np.all((x >= [-0.1, -0.1]) & (x <= [0.3, 0.3]), axis=1), v_in, 1.0)
    return hp.Problem(Box([-1.0, -1.0], [1.0, 1.0]), frequency=2.0, velocity=velocity,
                      source=hp.PointSource((-0.5, 0.0)), bcs={}, pml=hp.PML(0.5))


def test_decomposition_follows_the_local_wavenumber():
    """A slow inclusion: fewer subdomains and points than by the largest wavenumber everywhere,
    the fine cells where the inclusion is; the subdomains over it with the larger wavenumber."""
    problem = _inclusion()
    by_max = decomposed_settings(problem)   # the default: the largest wavenumber everywhere
    assert by_max == decomposed_settings(problem, local_wavenumber=False)
    local = decomposed_settings(problem, local_wavenumber=True)
    assert by_max["decomposition"]["grids"] == [[11, 11]] and by_max["decomposition"]["edges"] is None
    g = local["decomposition"]["grids"][0]
    assert math.prod(g) < 0.6 * 121 and local["pde_points"] < 0.6 * by_max["pde_points"]
    for a in range(2):
        e = np.asarray(local["decomposition"]["edges"][0][a])
        w = np.diff(e)
        inside = (e[:-1] < 0.3) & (e[1:] > -0.1)
        assert w[inside].max() < 0.8 * w.max()
    assert hp.training.plan.run_plan(problem).build_model(problem).levels[0].edges is None
    model = hp.training.plan.run_plan(problem, decomposition={"local_wavenumber": True}).build_model(problem)
    assert model.levels[0].edges is not None
    ks = subdomain_wavenumbers(problem, model.levels, problem.wavenumber)
    assert ks.max() == pytest.approx(problem.wavenumber, rel=1e-6) and ks.min() == pytest.approx(4 * math.pi)
    # a constant medium: the plan as before (equal cells, points by the largest k, one σ)
    const = _inclusion(constant=True)
    assert local_wavenumbers(const) is None
    a, b = decomposed_settings(const, local_wavenumber=True), decomposed_settings(const)
    assert a["pde_points"] == b["pde_points"] and a["decomposition"]["grids"] == b["decomposition"]["grids"]
    assert a["decomposition"]["edges"] is None and sampled_problem(const, a["decomposition"]) is const
    with pytest.raises(TypeError, match="local_wavenumber must be True or False"):
        decomposed_settings(problem, local_wavenumber=1)


def test_points_follow_the_density_with_unbiased_weights():
    """A CellDensity four times denser on one cell block: the points land there four times as
    densely, and the importance weights keep mean(w f) an estimate of f's mean over the box."""
    problem = hp.Problem(Box([0.0, 0.0], [2.0, 1.0]), kappa=4.0, bcs={"*": hp.Dirichlet(0.0)})
    rho = np.ones((8, 4))
    rho[2:4, 1:3] = 4.0   # [0.5, 1] x [0.25, 0.75]
    problem.sampler = copy.copy(problem.sampler)
    problem.sampler.density = CellDensity([0.0, 0.0], [2.0, 1.0], rho)
    rng = np.random.default_rng(0)
    x, w = problem.sample_pde(200_000, rng, "uniform")
    inside = (x[:, 0] > 0.5) & (x[:, 0] < 1.0) & (x[:, 1] > 0.25) & (x[:, 1] < 0.75)
    share = rho[2:4, 1:3].sum() / rho.sum()
    assert abs(inside.mean() / share - 1) < 0.03
    assert np.allclose(w[inside], w[inside][0]) and w[inside][0] == pytest.approx(w[~inside][0] / 4, rel=1e-3)

    def f(y):
        return np.sin(3 * y[:, 0]) ** 2 + y[:, 1]
    exact = (1.0 - np.sin(12.0) / 12.0) / 2 + 0.5   # f's mean over [0, 2] x [0, 1]
    assert abs(np.mean(w * f(x)) - exact) < 5e-3
    with pytest.raises(ValueError, match="CellDensity: values: expected positive numbers"):
        CellDensity([0.0, 0.0], [2.0, 1.0], np.zeros((2, 2)))


def test_residual_density_moves_points_to_the_large_residual():
    """Residual-based adaptive sampling: with u = 0 (zero parameters) the residual is −f, ten times
    larger on the right half; the new density is ρ ((1 − a) + a R/⟨R⟩) with R = |f|² per block."""
    from types import SimpleNamespace

    from helmpinn.training.dd_driver import residual_density

    def source(x):
        return np.where(x[:, 0] > 0.5, 10.0, 1.0) + 0j
    problem = hp.Problem(Box([0.0, 0.0], [1.0, 1.0]), kappa=4.0, source=source, bcs={"*": hp.Dirichlet(0.0)})
    problem.sampler = copy.copy(problem.sampler)
    problem.sampler.density = CellDensity([0.0, 0.0], [1.0, 1.0], np.ones((16, 16)))
    model = DecomposedModel.create([0.0, 0.0], [1.0, 1.0], [(2, 2)], ff_dim=3, hidden_dim=4)
    model.params[:] = 0.0
    run = SimpleNamespace(problem=problem, model=model, pde_points=4000, step=3, comm=None)
    share = 0.6
    new = residual_density(run, share)
    avg = (1.0 + 100.0) / 2   # the mean of |f|² under the uniform ρ
    left, right = (1 - share) + share * 1.0 / avg, (1 - share) + share * 100.0 / avg
    assert np.allclose(new.values[:8], left, rtol=1e-9) and np.allclose(new.values[8:], right, rtol=1e-9)
    # the draw follows it, with the weights that keep the loss the domain's mean of |r|²
    problem.sampler.density = new
    x, w = problem.sample_pde(100_000, np.random.default_rng(1), "uniform")
    assert abs(np.mean(x[:, 0] > 0.5) - right / (left + right)) < 0.01
    assert abs(np.mean(w * np.where(x[:, 0] > 0.5, 100.0, 1.0)) - avg) < 0.02 * avg
