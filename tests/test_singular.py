"""The corners' singular functions (helmpinn.problems.singular) against finite differences and
their defining properties, their amplitudes projected out of a decomposed model's residuals
(helmpinn.models.decomposition.SingularResiduals) against a dense least-squares solve, and the
Gauss-Newton plan that adds them."""
import math

import numpy as np
import pytest

from helmpinn import PointSource, Problem
from helmpinn.models.decomposition import DecomposedModel, Rows, SingularResiduals
from helmpinn.problems import Dirichlet, Neumann
from helmpinn.problems.corners import Wedge, corner_wedges
from helmpinn.problems.geometry import Box, BoxMinusObstacle, Polygon
from helmpinn.problems.pml import PML
from helmpinn.problems.singular import (SINGULAR_INNER, SINGULAR_WAVELENGTHS, CornerSingularities,
                                        corner_singularities, singular_orders)

K = 7.0
TRIANGLE = [[-0.3, -0.2], [0.3, -0.25], [0.0, 0.35]]
WEDGES = [Wedge(np.array([0.2, -0.1]), 0.4, 1.5 * math.pi, 0.5, K, "dirichlet"),
          Wedge(np.array([-0.3, 0.25]), -2.0, 5 * math.pi / 3, 0.4, 5.0, "neumann")]


def _sector(w, n, rng, lo=0.02, hi=0.98, margin=0.03):
    r = w.radius * rng.uniform(lo, hi, n)
    th = rng.uniform(margin, w.opening - margin, n)
    return w.vertex + np.stack([r * np.cos(w.start + th), r * np.sin(w.start + th)], 1)


def test_orders():
    """The singular orders: ν = mπ/α below 2 and not integers."""
    np.testing.assert_allclose(singular_orders(1.5 * math.pi), [2 / 3, 4 / 3])
    np.testing.assert_allclose(singular_orders(5 * math.pi / 3), [0.6, 1.2, 1.8])
    np.testing.assert_allclose(singular_orders(1.25 * math.pi), [0.8, 1.6])
    np.testing.assert_allclose(singular_orders(2 * math.pi), [0.5, 1.5])   # a crack (ν = 1 is smooth)


@pytest.mark.parametrize("w", WEDGES, ids=["dirichlet", "neumann"])
def test_functions_against_finite_differences_and_their_properties(w):
    """Each function's gradient and Laplacian agree with central differences of its values (the
    cutoff's ramp included); it solves Δψ + k²ψ = 0 where the cutoff is 1, vanishes beyond the
    sector's radius, and meets the corner's condition on both edges, points exactly on the first
    edge included (θ = 0 there, not 2π − ε)."""
    rng = np.random.default_rng(0)
    s = CornerSingularities([w])
    assert s.count == len(singular_orders(w.opening))
    x = _sector(w, 400, rng)
    psi, grad, lap = s.functions(x)
    h = 1e-5
    shifted = [s.functions(x + h * e)[0] for e in np.eye(2)] + [s.functions(x - h * e)[0] for e in np.eye(2)]
    fd_grad = np.stack([(shifted[i] - shifted[i + 2]) / (2 * h) for i in range(2)], 2)
    fd_lap = (sum(shifted) - 4 * psi) / h ** 2
    np.testing.assert_allclose(grad, fd_grad, rtol=0, atol=1e-6 * np.abs(grad).max())
    np.testing.assert_allclose(lap, fd_lap, rtol=0, atol=1e-4 * np.abs(lap).max())
    r = np.hypot(*(x - w.vertex).T)
    inner = r < SINGULAR_INNER * w.radius
    assert inner.sum() > 20 and np.abs(lap + w.k ** 2 * psi)[inner].max() == 0
    assert np.abs(lap + w.k ** 2 * psi)[~inner].max() > 1e-3   # the ring holds the residual
    beyond = _sector(w, 50, rng, lo=1.0, hi=1.5)
    assert not np.any(s.functions(beyond)[0])
    for theta in (0.0, w.opening):
        t = np.array([math.cos(w.start + theta), math.sin(w.start + theta)])
        edge = w.vertex + np.outer(np.linspace(0.01, 0.99, 60) * w.radius, t)
        v, g, _ = s.functions(edge)
        if w.condition == "dirichlet":
            assert np.abs(v).max() < 1e-13
        else:
            assert np.abs(g @ np.array([-t[1], t[0]])).max() < 1e-12 and np.abs(v).max() > 0.1


def test_columns_and_field():
    """``columns`` is each function through the rows' operator ``a Δ + b·∇ + c``; a row with
    a_xx != a_yy that reads a function is refused; ``field`` sums the amplitudes' functions; the
    configuration round-trips and bad entries are refused."""
    rng = np.random.default_rng(1)
    s = CornerSingularities(WEDGES, rng.normal(size=5) + 1j * rng.normal(size=5))
    x = np.concatenate([_sector(w, 30, rng) for w in WEDGES])
    n = len(x)
    a = np.repeat((rng.normal(size=n) + 1j * rng.normal(size=n))[:, None], 2, 1)
    b = rng.normal(size=(n, 2)) + 1j * rng.normal(size=(n, 2))
    c = rng.normal(size=n) + 1j * rng.normal(size=n)
    psi, grad, lap = s.functions(x)
    want = a[:, :1] * lap + np.einsum("nd,nkd->nk", b, grad) + c[:, None] * psi
    np.testing.assert_allclose(s.columns(x, a, b, c), want, rtol=1e-14, atol=0)
    bad = a.copy()
    bad[3, 1] += 0.1
    with pytest.raises(ValueError, match="a_xx"):
        s.columns(x, bad, b, c)
    np.testing.assert_allclose(s.field(x), psi @ s.amplitudes, rtol=1e-14)
    t = CornerSingularities.from_config(s.config())
    assert t.count == s.count and np.array_equal(t.amplitudes, s.amplitudes)
    np.testing.assert_array_equal(t.functions(x)[0], psi)
    for change in ({"opening": 3.0}, {"radius": -1.0}, {"condition": "robin"}, {"k": math.nan}):
        cfg = s.config()
        cfg["wedges"][0].update(change)
        with pytest.raises(ValueError, match="singular"):
            CornerSingularities.from_config(cfg)
    with pytest.raises(ValueError, match="amplitudes"):
        CornerSingularities(WEDGES, np.zeros(3))


def _triangle(bc):
    return Problem(BoxMinusObstacle(Box([-1, -1], [1, 1]), Polygon(TRIANGLE)), kappa=K * K, wavenumber=K,
                   bcs={"scatterer": bc}, pml=PML(0.4))


@pytest.mark.parametrize("bc", [Neumann(), Dirichlet(lambda x: np.exp(1j * K * x[:, 0]))], ids=["hard", "soft"])
def test_the_problems_singularities(bc):
    """A triangle's three corners take their functions on sectors of SINGULAR_WAVELENGTHS
    wavelengths (cos for a Neumann, sin for a Dirichlet obstacle; three orders each at ~300°); a
    Robin obstacle, a box without corners and a 3-D problem take none."""
    p = _triangle(bc)
    s = corner_singularities(p)
    assert s is not None and len(s.wedges) == 3 and s.count == 9
    lam = 2 * math.pi / K   # the sectors: 0.9 wavelength, or 0.9 of the distance to the triangle's far edge
    assert all(w.radius <= SINGULAR_WAVELENGTHS * lam for w in s.wedges)
    assert [w.radius for w in s.wedges] == [w.radius for w in corner_wedges(p, SINGULAR_WAVELENGTHS * lam)]
    assert {w.condition for w in s.wedges} == {"dirichlet" if isinstance(bc, Dirichlet) else "neumann"}
    assert corner_singularities(_triangle(Neumann(lambda x, n: 1.0 + 0 * x[:, 0]))) is not None
    from helmpinn.problems import Sommerfeld
    assert corner_singularities(_triangle(Sommerfeld(K))) is None
    assert corner_singularities(Problem(Box([0, 0], [1, 1]), kappa=1.0, bcs={"*": Dirichlet(0.0)})) is None


def _projected_case():
    p = _triangle(Neumann())
    rows = Rows.from_problem(p, 300, 80, 0)
    lo, hi = p.sampling_domain.bounds
    model = DecomposedModel.create(lo, hi, [(3, 3)], ff_dim=4, hidden_dim=6, wavenumber=K, seed=2)
    return p, rows, model


def test_a_source_by_a_corner_keeps_its_functions():
    """A point source near a vertex drops that corner's rows (their moments assume a source-free
    sector) but not its singular functions (the source is the network's smooth part): all
    three corners keep them, on the same sectors as without the source."""
    lam = 2 * math.pi / K
    near = Problem(BoxMinusObstacle(Box([-1, -1], [1, 1]), Polygon(TRIANGLE)), kappa=K * K, wavenumber=K,
                   source=PointSource([0.0, 0.5], width=0.05), bcs={"scatterer": Neumann()}, pml=PML(0.4))
    assert len(corner_wedges(near, SINGULAR_WAVELENGTHS * lam)) < 3
    s = corner_singularities(near)
    assert s is not None and len(s.wedges) == 3
    assert [w.radius for w in s.wedges] == [w.radius for w in corner_singularities(_triangle(Neumann())).wedges]


def test_singular_residuals_are_the_least_squares_projection():
    """The residuals of a model with the corners' functions: ``r_N + B a`` at the amplitudes a
    that minimise it (a dense least-squares solve on B built here from ``columns``), J v and Jᵀw
    the projected products (J against central differences of the residuals), and the model's
    ``residuals_for`` wraps its residuals so."""
    p, rows, model = _projected_case()
    s = corner_singularities(p)
    plain = model.residuals_for(rows)
    res = SingularResiduals(plain, s)
    theta = model.params
    C = s.columns(rows.x, rows.a, rows.b, rows.c)
    B = np.zeros((2 * len(rows), 2 * s.count))
    B[0::2, 0::2], B[1::2, 0::2] = C.real, C.imag
    B[0::2, 1::2], B[1::2, 1::2] = -C.imag, C.real
    assert np.count_nonzero(np.abs(B).sum(1)) > 20
    rN = plain.residuals(theta)
    coef = np.linalg.lstsq(B, -rN, rcond=None)[0]
    np.testing.assert_allclose(res.residuals(theta), rN + B @ coef, rtol=0, atol=1e-12 * np.abs(rN).max())
    np.testing.assert_allclose(res.amplitudes(theta), coef[0::2] + 1j * coef[1::2], rtol=1e-8)
    rng = np.random.default_rng(4)
    v, w = rng.normal(size=model.num_params), rng.normal(size=res.num_residuals)
    eps = 1e-6
    fd = (res.residuals(theta + eps * v) - res.residuals(theta - eps * v)) / (2 * eps)
    Jv = res.jvp(theta, v)
    np.testing.assert_allclose(Jv, fd, rtol=0, atol=1e-6 * np.abs(fd).max())
    J = res.jacobian(theta)
    np.testing.assert_allclose(J @ v, Jv, rtol=0, atol=1e-12 * np.abs(Jv).max())
    np.testing.assert_allclose(res.vjp(theta, w), J.T @ w, rtol=0, atol=1e-11 * np.abs(J).max() * len(w) ** 0.5)
    assert np.abs(B.T @ res.residuals(theta)).max() < 1e-10 * np.abs(rN).max()
    assert res.num_params == plain.num_params and res.parts is plain.parts
    a = np.arange(1, s.count + 1) * (0.3 - 0.1j)   # any amplitudes: r_N + B a
    c = np.empty(2 * s.count)
    c[0::2], c[1::2] = a.real, a.imag
    np.testing.assert_allclose(res.residuals_at(theta, a), rN + B @ c, rtol=0, atol=1e-12 * np.abs(rN + B @ c).max())
    model.singular = s
    assert isinstance(model.residuals_for(rows), SingularResiduals)


def test_the_validation_loss_reads_the_models_own_amplitudes():
    """``loss_function`` (the validation loss) is the loss of the field the model holds, at its
    amplitudes as they are when it is called, not at the best ones for its points."""
    p, rows, model = _projected_case()
    model.singular = corner_singularities(p)
    ts = p.sample(300, 80, np.random.default_rng(0), "sobol")
    loss = model.loss_function(ts, {})
    res = model.training_residuals(ts, {})
    best = res.amplitudes(model.params)
    model.singular.amplitudes = best
    at_best = loss(model.params)
    assert at_best == pytest.approx(float(np.sum(res.residuals(model.params) ** 2)), rel=1e-10)
    model.singular.amplitudes = best + 0.5
    assert loss(model.params) > 1.01 * at_best


def test_a_model_with_singular_functions_predicts_saves_and_copies_them(tmp_path):
    """``predict`` adds the functions at the model's amplitudes; save/load and copy keep them."""
    p, rows, model = _projected_case()
    x = rows.x[:50]
    bare = model.predict(x)
    s = corner_singularities(p)
    s.amplitudes = np.arange(s.count) * (0.1 - 0.2j)
    model.singular = s
    np.testing.assert_allclose(model.predict(x), bare + s.field(x), rtol=1e-14)
    np.testing.assert_allclose(model.predict(x, chunk=7), model.predict(x), rtol=1e-14)   # chunk by chunk
    model.save(tmp_path / "m.npz")
    back = DecomposedModel.load(tmp_path / "m.npz")
    np.testing.assert_array_equal(back.singular.amplitudes, s.amplitudes)
    np.testing.assert_allclose(back.predict(x), model.predict(x), rtol=1e-14)
    copy = model.copy()
    copy.singular.amplitudes[0] = 5.0
    assert model.singular.amplitudes[0] == 0.0


def test_a_gauss_newton_plan_adds_them():
    """A decomposed Gauss-Newton plan on the sound-hard triangle gives the model the corners'
    functions and draws its points without the corner weights (the user's problem unchanged); a
    step writes the amplitudes that minimise the loss into the model; ``gn={"singular": False}``
    leaves them out and keeps the corner rows' plan."""
    from helmpinn.training.dd_driver import GNSettings
    from helmpinn.training.drivers import make_driver
    from helmpinn.training.plan import run_plan
    p = _triangle(Neumann())
    plan = run_plan(p, model="decomposed")
    assert plan.singular_functions()
    model = plan.build_model(p)
    trainer = plan.trainer(p, model)
    assert model.singular is not None and model.singular.count == 9
    assert trainer.problem.sampler.corner_radius is None and p.sampler.corner_radius is not None
    trainer.fit(1, optimizer=make_driver("gn", **(plan.gn or {})))
    a = model.singular.amplitudes
    assert np.all(np.isfinite(a)) and np.abs(a).max() > 0
    off = plan.with_overrides(gn={"singular": False})
    assert not off.singular_functions()
    m2 = off.build_model(p)
    t2 = off.trainer(p, m2)
    assert m2.singular is None and t2.problem.sampler.corner_radius is not None
    with pytest.raises(ValueError, match="singular"):
        GNSettings(singular=1)


def test_a_problem_whose_corners_take_them_is_decomposed_by_default():
    """Below the decomposition's threshold (1.8 wavelengths across here) a problem whose corners
    take the singular functions gets the decomposed model (one network has none), the same box
    without corners, or with a Robin obstacle, one network."""
    from helmpinn.defaults import should_decompose
    from helmpinn.problems import Sommerfeld
    from helmpinn.training.plan import run_plan
    k = 4.0
    common = dict(kappa=k * k, wavenumber=k, pml=PML(0.4))
    hard = Problem(BoxMinusObstacle(Box([-1, -1], [1, 1]), Polygon(TRIANGLE)), bcs={"scatterer": Neumann()}, **common)
    robin = Problem(BoxMinusObstacle(Box([-1, -1], [1, 1]), Polygon(TRIANGLE)), bcs={"scatterer": Sommerfeld(k)}, **common)
    free = Problem(Box([-1, -1], [1, 1]), bcs={}, **common)
    assert should_decompose(hard) and run_plan(hard).model == "decomposed"
    assert not should_decompose(robin) and run_plan(robin).model == "network"
    assert not should_decompose(free) and run_plan(free).model == "network"


def test_the_memory_estimate_counts_their_columns():
    """A decomposed Gauss-Newton plan whose model adds the functions counts their columns, SVD
    and basis (128 bytes per function and row); ``gn={"singular": False}`` counts none."""
    from helmpinn.memory import check_settings
    from helmpinn.training.plan import run_plan
    p = _triangle(Neumann())
    plan = run_plan(p, model="decomposed")
    sizes = check_settings(plan.record(), p)
    assert sizes["singular functions"] == 128 * 9 * (plan.pde_points + plan.bc_points)
    off = plan.with_overrides(gn={"singular": False})
    assert "singular functions" not in check_settings(off.record(), p)
