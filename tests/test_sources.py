"""PointSource (python/helmpinn/problems/sources.py) and the sampling that resolves sources: the Gaussian's
normalisation and default width, several sources summed, and the importance weights: the
weighted PDE loss is an unbiased estimate of the uniform one, and the weights reach the core as
sqrt(w) on every PDE coefficient (the residual of a point times sqrt(w), its square times w)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.special import erf

import helmpinn as hp
from helmpinn.problems.geometry import Box, Interval
from helmpinn.problems import TrainingSet


@pytest.mark.parametrize("d", [1, 2])
def test_point_source_is_a_normalised_gaussian(d):
    src = hp.PointSource([0.1] * d, amplitude=2 - 1j, width=0.05)
    axis = np.linspace(-0.5, 0.7, 601)
    h = axis[1] - axis[0]
    mesh = np.meshgrid(*[axis] * d, indexing="ij")
    x = np.stack([m.ravel() for m in mesh], axis=1)
    total = src(x).sum() * h**d
    assert abs(total - (2 - 1j)) < 1e-9
    peak = src(np.array([[0.1] * d]))[0]
    assert peak == pytest.approx((2 - 1j) / (2 * math.pi * 0.05**2) ** (d / 2))


def test_default_width_comes_from_the_wavelength_and_sources_are_summed():
    k = 8.0
    extra = lambda x: np.full(len(x), 0.5 + 0j)  # noqa: E731
    srcs = [hp.PointSource((0.3, 0.4)), hp.PointSource((0.7, 0.6), amplitude=-1j, width=0.02), extra]
    prob = hp.Problem(Box([0, 0], [1, 1]), kappa=k * k, source=srcs, bcs={"*": hp.Dirichlet()})
    w0, w1 = (s.width for s in prob.point_sources)
    assert w0 == pytest.approx(2 * math.pi / k / 10) and w1 == 0.02
    assert srcs[0].width is None  # the user's object is not changed
    assert prob.source_share == 0.25
    x = np.random.default_rng(0).random((20, 2))
    expected = prob.point_sources[0](x) + prob.point_sources[1](x) + 0.5
    np.testing.assert_allclose(prob.source_at(x), expected, rtol=1e-14)
    # one source alone, and the errors
    single = hp.Problem(Box([0, 0], [1, 1]), kappa=k * k, source=hp.PointSource((0.5, 0.5), width=0.1),
                        bcs={"*": None}, source_share=0.0)
    assert single.source_share == 0.0 and single.sample(10, 2, rng=0).pde_weight is None
    with pytest.raises(ValueError, match="no width"):
        hp.PointSource((0.0, 0.0))(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="PointSource in 1-D for a 2-D domain"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, source=hp.PointSource(0.5), bcs={"*": None})
    with pytest.raises(ValueError, match="wavenumber, which is 0; give width="):
        hp.Problem(Box([0, 0], [1, 1]), kappa=0.0, source=hp.PointSource((0.5, 0.5)), bcs={"*": None})
    with pytest.raises(ValueError, match="source_share: the problem has no PointSource"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, source=extra, source_share=0.5, bcs={"*": None})
    with pytest.raises(ValueError, match="source_share must be a finite number >= 0 and < 1"):
        hp.Problem(Box([0, 0], [1, 1]), kappa=1.0, source=srcs, source_share=1.0, bcs={"*": None})
    with pytest.raises(ValueError, match="PointSource: width must be a finite number > 0"):
        hp.PointSource((0.0, 0.0), width=-1.0)


def _gauss_mean_on_box(c, s, lo, hi):
    """The mean over the box [lo, hi] of exp(-|x - c|^2 / (2 s^2)) (exact, by erf)."""
    out = 1.0
    for cj, a, b in zip(c, lo, hi):
        t = s * math.sqrt(math.pi / 2) * (erf((b - cj) / (s * math.sqrt(2))) - erf((a - cj) / (s * math.sqrt(2))))
        out *= t / (b - a)
    return out


@pytest.mark.filterwarnings("ignore:source. the PointSource")   # its place near the PML is incidental here
@pytest.mark.parametrize("pml_share", [None, 0.4])
def test_the_weighted_mean_estimates_the_base_mean_without_bias(pml_share):
    # A function peaked at a source: the weighted mean over the drawn points (what the core
    # takes: the mean of w |r|^2) against its exact mean under the base density, with a fixed
    # seed (deterministic); the same estimate from points drawn without the sources' share.
    src = hp.PointSource((0.3, 0.2), width=0.03)
    kw = dict(kappa=100.0, source=[src], bcs={})
    pml = hp.PML(0.25)
    prob = hp.Problem(Box([0, 0], [1, 1]), pml=pml, pml_share=pml_share, source_share=0.5, **kw)
    s = 0.01
    h = lambda x: np.exp(-np.sum((x - [0.3, 0.2]) ** 2, axis=1) / (2 * s * s))  # noqa: E731
    lo, hi = np.array([-0.25, -0.25]), np.array([1.25, 1.25])
    if pml_share is None:   # uniform over the box and its layer
        exact = _gauss_mean_on_box((0.3, 0.2), s, lo, hi)
    else:                   # the physical box gets 1 - pml_share of the points; h ~ 0 in the layer
        exact = (1 - pml_share) * _gauss_mean_on_box((0.3, 0.2), s, [0, 0], [1, 1])
    x, w = prob.sample_pde(200_000, rng=7)
    assert w is not None and len(x) <= 200_000 and np.all(w > 0)
    weighted = np.mean(w * h(x))
    assert abs(weighted / exact - 1) < 0.03
    # the weights' own mean is an unbiased estimate of 1 (h = 1)
    assert abs(np.mean(w) - 1) < 0.01
    if pml_share is not None:  # and of the layer's share (h = the layer's indicator)
        assert abs(np.mean(w * prob.in_layer(x)) - pml_share) < 0.01
    # the base points alone (no source share) estimate the same mean far less well
    plain = hp.Problem(Box([0, 0], [1, 1]), pml=pml, pml_share=pml_share, source_share=0.0, **kw)
    xu, wu = plain.sample_pde(200_000, rng=7)
    assert wu is None
    assert abs(np.mean(w * h(x)) - exact) < abs(np.mean(h(xu)) - exact)


def _unweighted_batch(prob, x):
    """The PDE batch of x without weights, built from the problem's own pieces."""
    ts = TrainingSet(x_pde=x, kappa=prob.kappa_at(x), f=prob.source_at(x), x_data=np.empty((0, prob.dim)),
                     y=np.empty(0, complex), x_bc=np.empty((0, prob.dim)), n_bc=np.empty((0, prob.dim)),
                     alpha=0j, g=None)
    if prob.uses_operator:
        ts.a_pde, ts.b_pde = prob.operator_at(x)
    return ts.to_batch(np.float64)


@pytest.mark.filterwarnings("ignore:source. the PointSource")   # its place near the PML is incidental here
@pytest.mark.parametrize("with_pml", [False, True])
def test_weights_reach_the_core_as_sqrt_w_on_every_coefficient(with_pml):
    # Exact algebra (docs/MATH.md, General operator): r = sum a_i u_ii + sum b_i u_i + c u - f,
    # so a, b, c, f all times sqrt(w_i) give sqrt(w_i) r_i and the loss's |r_i|^2 times w_i.
    prob = hp.Problem(Box([0, 0], [1, 1]), kappa=36.0, bcs={} if with_pml else {"*": None},
                      source=[hp.PointSource((0.4, 0.6), 1 + 2j), lambda x: np.cos(x[:, 0]) + 0j],
                      pml=hp.PML(0.3) if with_pml else None, source_share=0.6)
    ts = prob.sample(300, 0, rng=3)
    assert ts.pde_weight is not None and len(ts.x_data) == 0 and len(ts.x_bc) == 0
    model = hp.Model.create(2, 8, 16, 2, dtype="float64", seed=1)
    ws = model.workspace()
    r_w = ws.residuals(model.params, batch=ts.to_batch(np.float64))
    r_u = ws.residuals(model.params, batch=_unweighted_batch(prob, ts.x_pde))
    n = len(ts.x_pde)
    r_w, r_u = r_w[: 2 * n].reshape(n, 2), r_u[: 2 * n].reshape(n, 2)
    np.testing.assert_allclose(r_w, np.sqrt(ts.pde_weight)[:, None] * r_u, rtol=1e-10, atol=1e-13)
    # so the loss's PDE term is the weighted mean of the unweighted squared residuals
    assert np.sum(r_w**2) == pytest.approx(np.sum(ts.pde_weight * np.sum(r_u**2, axis=1)), rel=1e-12)


def test_a_1d_source_problem_samples_near_the_source():
    prob = hp.Problem(Interval(0.0, 1.0), kappa=400.0, source=hp.PointSource(0.5, width=0.01),
                      bcs={"*": hp.Dirichlet()})
    x, w = prob.sample_pde(1000, rng=0)
    near, far = np.abs(x[:, 0] - 0.5) < 0.01, np.abs(x[:, 0] - 0.5) > 0.08
    assert len(x) == 1000 and near.sum() > 150  # a quarter of the points from the source
    assert np.all(w[near] < 0.2)
    np.testing.assert_allclose(w[far], 1 / 0.75, rtol=1e-12)  # p/q where the Gaussian is ~0


# -- the scattered-field form: an exact point source as the background -----------------------------

@pytest.mark.parametrize("d", [1, 2, 3])
def test_free_space_field_derivatives_and_equation(d):
    src = hp.sources.FreeSpaceSource([0.1] * d, 3.0, amplitude=1 - 2j)
    x = np.random.default_rng(d).uniform(0.5, 1.0, (6, d))
    h = 1e-4
    grad, second = src.gradient(x), src.second_partials(x)
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        np.testing.assert_allclose(grad[:, j], (src(x + e) - src(x - e)) / (2 * h), rtol=1e-6)
        np.testing.assert_allclose(second[:, j], (src(x + e) - 2 * src(x) + src(x - e)) / h**2, rtol=1e-5)
    np.testing.assert_allclose(second.sum(axis=1), -9.0 * src(x), rtol=1e-12)  # Δu0 = -k0² u0
    # (Δ + k0²) u0 = -A δ: the flux of grad u0 through a small sphere around x0 tends to -A
    r = 1e-6
    if d == 1:
        flux = src.gradient(np.array([[0.1 + r]]))[0, 0] - src.gradient(np.array([[0.1 - r]]))[0, 0]
    elif d == 2:
        flux = 2 * math.pi * r * src.gradient(np.array([[0.1 + r, 0.1]]))[0, 0]
    else:
        flux = 4 * math.pi * r * r * src.gradient(np.array([[0.1 + r, 0.1, 0.1]]))[0, 0]
    assert abs(flux - (-(1 - 2j))) < 1e-4
    at = np.array([[0.1] * d])
    assert src.at_source(at).tolist() == [True] and not src.at_source(x).any()
    if d == 1:   # finite at the source in 1-D: iA/(2k0)
        assert src(at)[0] == pytest.approx(0.5j * (1 - 2j) / 3.0, rel=1e-15)
    else:
        with pytest.raises(ValueError, match=r"u0: x\[1\] = .* is at the source .* where u0 is singular"):
            src(np.concatenate([x[:1], at]))
    for what in ("gradient", "second_partials"):
        with pytest.raises(ValueError, match=f"{what}: x\\[0\\] = .* is at the source"):
            getattr(src, what)(at)


def _medium(x):
    """k0² = 36 within 0.6 of the source at (-0.3, 0), 64 elsewhere (smoothly)."""
    r = np.hypot(x[:, 0] + 0.3, x[:, 1])
    t = np.clip((r - 0.6) / 0.4, 0, 1)
    return 36.0 + 28.0 * t * t * (3 - 2 * t)


def test_scattered_form_is_the_total_problem_shifted_by_u0():
    # For any smooth v, the scattered problem's residual at v is the total problem's at v + u0
    # (away from the source), PML layer included.
    src = hp.sources.FreeSpaceSource((-0.3, 0.0), 6.0, amplitude=2.0)
    box, pml = Box([-1, -1], [1, 1]), hp.PML(0.5)
    scattered = hp.Problem(box, kappa=_medium, bcs={}, pml=pml, background=src, wavenumber=8.0)
    total = hp.Problem(box, kappa=_medium, bcs={}, pml=pml, wavenumber=8.0)
    v = lambda x: np.sin(2 * x[:, 0]) * np.exp(1j * x[:, 1])  # noqa: E731
    rng = np.random.default_rng(0)
    x = rng.uniform(-1.5, 1.5, (400, 2))
    x = x[np.hypot(x[:, 0] + 0.3, x[:, 1]) > 0.4]
    assert scattered.in_layer(x).any()
    r_s = scattered.pde_residual_fd(x, h=1e-4, u=v)
    r_t = total.pde_residual_fd(x, h=1e-4, u=lambda y: v(y) + src(y))
    np.testing.assert_allclose(r_s, r_t, rtol=0, atol=1e-4 * np.max(np.abs(r_t)))
    # in the homogeneous region around the source the scattered field's source vanishes
    near = np.array([[-0.3 + 0.1, 0.05], [-0.5, -0.2]])
    np.testing.assert_array_equal(scattered.source_at(near), 0)
    # the sampled conditions: u_s = -u0 on the wall
    ts = scattered.sample(200, 40, rng=1)
    np.testing.assert_allclose(ts.y, -src(ts.x_data), rtol=1e-14)
    np.testing.assert_allclose(scattered.total_field(x, np.zeros(len(x))), src(x))


def test_free_space_source_with_a_pml_has_the_stretched_field_as_exact_solution():
    # In a homogeneous medium the total field with a PML is u0 at the stretched coordinates
    # x~_j = x_j + (i/k) ∫ sigma_j: so u_s = u0(x~) - u0(x) solves the scattered problem (0 in the box).
    from scipy.special import hankel1

    k, w, x0 = 5.0, 0.6, np.array([0.2, -0.1])
    lo, hi = np.array([-1.0, -1.0]), np.array([1.0, 1.0])
    pml = hp.PML(w)
    src = hp.sources.FreeSpaceSource(x0, k)

    def stretched(x):
        below, above = np.maximum(lo - x, 0), np.maximum(x - hi, 0)
        dist = np.where(above > 0, above, -below)
        integral = np.sign(dist) * pml.strength * w * (np.abs(dist) / w) ** (pml.power + 1) / (pml.power + 1)
        return x + 1j * integral / k

    def u_s(x):
        d = stretched(x) - x0
        rt = np.sqrt(d[:, 0] ** 2 + d[:, 1] ** 2)
        return 0.25j * hankel1(0, k * rt) - src(x)

    prob = hp.Problem(Box(lo, hi), kappa=k * k, bcs={}, pml=pml, background=src, exact=None)
    x = np.random.default_rng(3).uniform(-1.6, 1.6, (300, 2))
    x = x[np.hypot(*(x - x0).T) > 0.3]
    res = prob.pde_residual_fd(x, h=1e-4, u=u_s)
    scale = np.max(np.abs(k * k * src(x)))
    assert np.max(np.abs(res)) < 1e-4 * scale
    inside = ~prob.in_layer(x)
    assert np.max(np.abs(u_s(x[inside]))) < 1e-12


def test_background_errors():
    box = Box([-1, -1], [1, 1])
    src = hp.sources.FreeSpaceSource((0.0, 0.0), 3.0)
    with pytest.raises(ValueError, match="kappa at the source is 16, not k0\\^2 = 9"):
        hp.Problem(box, kappa=16.0, bcs={"*": None}, background=src)
    with pytest.raises(ValueError, match="must lie in the physical domain"):
        hp.Problem(box, kappa=9.0, bcs={}, pml=hp.PML(0.5),
                   background=hp.sources.FreeSpaceSource((1.2, 0.0), 3.0))
    with pytest.raises(ValueError, match="must be the Laplacian"):
        hp.Problem(box, kappa=9.0, bcs={"*": None}, density=lambda x: 2.0 + 0 * x[:, 0], background=src)
    with pytest.raises(TypeError, match="FreeSpaceSource"):
        hp.Problem(box, kappa=9.0, bcs={"*": None}, background=hp.PointSource((0.0, 0.0)))
    with pytest.raises(ValueError, match="1-D source for a 2-D domain"):
        hp.Problem(box, kappa=9.0, bcs={"*": None}, background=hp.sources.FreeSpaceSource(0.0, 3.0))
    for k in (1e-300, 0.0, 1e300):   # a field that would overflow: refused by name
        with pytest.raises(ValueError, match="wavenumber must be a finite number >= 1e-08 and <= 1e"):
            hp.sources.FreeSpaceSource((0.0, 0.0), k)


def test_dirichlet_and_robin_conditions_of_the_total_field_are_shifted():
    # With u = u0 exactly (a homogeneous medium, conditions taken from u0 itself), the scattered
    # problem's exact solution is 0: zero source, zero conditions.
    src = hp.sources.FreeSpaceSource((0.3, 0.4), 4.0, amplitude=1j)
    g = lambda x, n: np.sum(src.gradient(x) * n, axis=1) + 2j * src(x)  # noqa: E731
    prob = hp.Problem(Box([0, 0], [1, 1]), kappa=16.0, background=src,
                      bcs={"xmin": hp.Dirichlet(src), ("xmax", "ymin", "ymax"): hp.Robin(2j, g)},
                      exact=src)
    ts = prob.sample(100, 80, rng=0)
    np.testing.assert_allclose(ts.y, 0, atol=1e-14)
    np.testing.assert_allclose(ts.g, 0, atol=1e-13)
    np.testing.assert_array_equal(ts.f, 0)
    np.testing.assert_array_equal(prob.exact_at(ts.x_pde), 0)
    for r in prob.bc_residuals_fd(u=lambda x: np.zeros(len(x), complex)).values():
        assert np.max(np.abs(r)) < 1e-12


def test_trainer_runs_on_a_scattered_field_problem_with_sources_and_a_grid_medium():
    # End to end through the Trainer: a background source, a PointSource (importance-weighted
    # points), a velocity on a grid and a PML; the loss is finite and falls.
    n = 16
    axes = np.linspace(-1.6, 1.6, n)
    X, Y = np.meshgrid(axes, axes, indexing="ij")
    v = 1.0 + 0.3 * np.clip(X, 0, None) ** 2            # homogeneous (v = 1) around the source
    f = 1.0                                              # k0 = 2 pi f / v = 2 pi
    vel = hp.GridField(v, origin=(-1.6, -1.6), spacing=3.2 / (n - 1))
    prob = hp.Problem(Box([-1, -1], [1, 1]), frequency=f, velocity=vel, bcs={}, pml=hp.PML(0.5),
                      background=hp.sources.FreeSpaceSource((-0.5, 0.0), 2 * math.pi),
                      source=[hp.PointSource((0.4, 0.3), 0.5)])
    model = hp.Model.create(2, 8, 16, 2, dtype="float64", seed=0)
    tr = hp.Trainer(prob, model, lr=1e-2, pde_points=256, bc_points=32, progress=False, eval_every=0)
    hist = tr.fit(30)
    assert np.all(np.isfinite(hist.loss)) and hist.loss[-1] < hist.loss[0]


@pytest.mark.parametrize("d", [2, 3])
def test_points_a_hair_from_the_source_get_a_clear_error_not_an_overflow(d):
    # 1e-160 from x0: r is positive but 1/r³ and H1(k r)/r overflow (RuntimeWarning, inf/NaN)
    src = hp.sources.FreeSpaceSource([0.0] * d, 4.0)
    x = np.array([[1e-160] + [0.0] * (d - 1)])
    for what in ("gradient", "second_partials"):
        with pytest.raises(ValueError, match=f"{what}: x\\[0\\] .* \\(within core_radius 1e-09\\)"):
            getattr(src, what)(x)
    far = x + 1.1e-9   # just outside the core: finite values
    assert np.all(np.isfinite(src.second_partials(far))) and np.all(np.isfinite(src.gradient(far)))


def test_a_background_source_on_a_grid_node_trains_evaluates_and_solves():
    # The source at the box's centre is a node of the test grid, of fd_solve's grid and of the
    # plots' grid: each used to raise (u0 is infinite there). Now the scattered field's source
    # takes its limit 0 there, the test points leave the node out, total field and exact are NaN.
    from helmpinn.reference import fd_solve

    k0 = 6.0
    src = hp.sources.FreeSpaceSource((0.0, 0.0), k0)
    prob = hp.Problem(Box([-1, -1], [1, 1]), kappa=k0 * k0, bcs={}, pml=hp.PML(0.5), background=src,
                      exact=src)     # in free space the total field is u0 (up to the PML's reflection)
    x = np.array([[0.0, 0.0], [0.5, 0.0], [1e-12, 0.0]])
    assert prob.at_source(x).tolist() == [True, False, True]
    np.testing.assert_array_equal(prob.source_at(x), 0)
    u = prob.total_field(x, np.ones(3))
    assert np.isnan(u[[0, 2]]).all() and u[1] == 1 + src(x[1:2])[0]
    e = prob.exact_at(x)
    assert np.isnan(e[[0, 2]]).all() and e[1] == 0
    pts = prob.test_points()
    assert len(pts) == 101 * 101 - 1 and not prob.at_source(pts).any()
    tr = hp.Trainer(prob, hp.Model.create(prob, 4, 8, 1, dtype="float64"), pde_points=64, bc_points=16,
                    progress=False)
    assert np.isfinite(tr.evaluate())
    sol = fd_solve(prob, 0.1)   # its grid has a node at the source
    far = np.array([[0.5, 0.5], [-0.7, 0.2]])
    assert np.all(np.abs(sol(far)) < 0.1 * np.abs(src(far)))   # u_s: small (the PML, the coarse grid)
    with pytest.raises(ValueError, match=r"data: point 1, \[0.0, 0.0\], is at the background source"):
        hp.Problem(Box([-1, -1], [1, 1]), kappa=k0 * k0, bcs={}, pml=hp.PML(0.5), background=src,
                   data=(np.array([[0.5, 0.5], [0.0, 0.0]]), np.zeros(2)))
