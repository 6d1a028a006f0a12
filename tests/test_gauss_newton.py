"""Matrix-free Gauss-Newton (helmpinn.optim.gauss_newton) on small decomposed models: the
preconditioned CG step equals the dense Gauss-Newton step, and LM steps lower the loss."""
from __future__ import annotations

import collections

import numpy as np
import pytest
import scipy.sparse

from helmpinn.optim.gauss_newton import VARPRO_MAX_FALL, VARPRO_RIDGE, MatrixFreeGN
from test_decomposition import make_case


@pytest.mark.parametrize("coarse", [None, "last_layer"])
@pytest.mark.parametrize("products", ["core", "blocks"])
@pytest.mark.parametrize("damping,gram", [("identity", "float32"), ("marquardt", "float64"),
                                          ("geometric", "float64")])
def test_cg_step_equals_dense(coarse, products, damping, gram):
    model, rows, _ = make_case(2, pml=True, hard=True, seed=3)
    res = model.residuals_for(rows)
    theta = model.params.copy()
    gn = MatrixFreeGN(res, coarse=coarse, products=products, damping=damping, cg_tol=1e-12, cg_maxiter=2000,
                      gram=gram)
    J = res.jacobian(theta)
    r = res.residuals(theta)
    G = J.T @ J
    lam = 1e-2 * float(np.mean(np.diag(G)))   # fewer rows than parameters here: keep the system tame
    delta, it = gn.direction(theta, lam)
    d = np.diag(G)
    if damping == "geometric":   # sqrt(diag(JᵀJ) × its mean)
        d = np.sqrt(d * d.mean())
    D = np.ones(len(theta)) if damping == "identity" else np.maximum(d, 1e-12 * d.max())
    A, b = G + lam * np.diag(D), J.T @ r
    dense = np.linalg.solve(A, b)
    # CG's relative residual 1e-12; the error it allows is cond(A) times that (cond ~ 1e5 here)
    assert np.linalg.norm(A @ delta - b) < 1e-11 * np.linalg.norm(b)
    assert np.linalg.norm(delta - dense) < 1e-6 * np.linalg.norm(dense)
    assert 1 <= it < 2000


def _marquardt_case():
    """A 2-D case with a PML and the hard constraint: its residuals, θ, J, r, JᵀJ, a λ of 1e-2
    times the mean of diag(JᵀJ) (fewer rows than parameters: a tame system) and Marquardt's D."""
    model, rows, _ = make_case(2, pml=True, hard=True, seed=3)
    res = model.residuals_for(rows)
    theta = model.params.copy()
    J, r = res.jacobian(theta), res.residuals(theta)
    G = J.T @ J
    lam = 1e-2 * float(np.mean(np.diag(G)))
    return res, theta, J, r, G, lam, np.maximum(np.diag(G), 1e-12 * np.diag(G).max())


def test_float32_products_give_the_dense_step_within_their_rounding():
    """``products="core32"``: CG's products in float32, the right-hand side Jᵀr in float64; the
    step equals the dense one to float32's rounding amplified by the system's condition."""
    res, theta, J, r, G, lam, D = _marquardt_case()
    dense = np.linalg.solve(G + lam * np.diag(D), J.T @ r)
    gn = MatrixFreeGN(res, products="core32", cg_tol=1e-6, cg_maxiter=2000)
    delta, it = gn.direction(theta, lam)
    assert np.linalg.norm(delta - dense) < 1e-3 * np.linalg.norm(dense)
    assert 1 <= it < 2000


@pytest.mark.parametrize("products", ["core", "blocks"])
def test_deflated_cg_step_equals_dense(products):
    """The deflated two-level preconditioner (A-DEF2, CG started from Q b) gives the dense
    Gauss-Newton step too, in fewer iterations than the additive one on this case."""
    res, theta, J, r, G, lam, D = _marquardt_case()
    A, b = G + lam * np.diag(D), J.T @ r
    dense = np.linalg.solve(A, b)
    its = {}
    for two_level in ("additive", "deflated"):
        gn = MatrixFreeGN(res, products=products, two_level=two_level, cg_tol=1e-12, cg_maxiter=2000,
                          gram="float64")
        delta, its[two_level] = gn.direction(theta, lam)
        assert np.linalg.norm(A @ delta - b) < 1e-11 * np.linalg.norm(b)
        assert np.linalg.norm(delta - dense) < 1e-6 * np.linalg.norm(dense)
    assert 1 <= its["deflated"] < its["additive"]


@pytest.mark.parametrize("products", ["core", "blocks"])
def test_warm_started_cg_step_equals_dense(products):
    """CG started from a given vector (``cg_warm``: the last step's) reaches the dense step to the
    same tolerance: from near the solution in fewer iterations than from zero; from a start
    against the solution (the quadratic model's minimiser along it has α < 0) from zero, in the
    same iterations as without a start and without the start's product."""
    res, theta, J, r, G, lam, D = _marquardt_case()
    A, b = G + lam * np.diag(D), J.T @ r
    dense = np.linalg.solve(A, b)
    gn = MatrixFreeGN(res, products=products, cg_tol=1e-12, cg_maxiter=2000, gram="float64", cg_warm=True)
    s = gn.linearize(theta, {"jacobian": 0.0, "gram": 0.0})
    M = gn.preconditioner(s, lam, D)
    assert np.allclose(s.g, b, rtol=1e-10, atol=1e-12 * np.abs(b).max())
    _, _, cold = gn.cg(s, lam, D, s.g, M)
    near = dense + 1e-4 * np.linalg.norm(dense) / np.sqrt(len(dense)) * np.random.default_rng(5).normal(size=len(dense))
    products = []
    jvp = gn._jvp
    gn._jvp = lambda *args: products.append(1) or jvp(*args)   # one J v per product
    for start, fewer in ((near, True), (3.0 * near, True), (-near, False)):
        products.clear()
        x, Jx, it = gn.cg(s, lam, D, s.g, M, start)
        assert len(products) == it + (1 if fewer else 0)
        assert np.linalg.norm(A @ x - b) < 1e-11 * np.linalg.norm(b)
        assert np.linalg.norm(x - dense) < 1e-6 * np.linalg.norm(dense)
        assert np.allclose(Jx, J @ x, rtol=0, atol=1e-9 * np.abs(J @ x).max())
        assert it < cold if fewer else it == cold


def test_warm_steps_keep_the_last_step():
    """``cg_warm=True``: CG starts from the last step where it was accepted with ρ >= WARM_RHO
    (from zero after a rejected or poorly predicted one); the steps lower the loss."""
    from helmpinn.optim.gauss_newton import WARM_RHO
    model, rows, _ = make_case(2, pml=True, hard=False, seed=4)
    res = model.residuals_for(rows)
    gn = MatrixFreeGN(res, cg_tol=1e-6, cg_warm=True)
    assert gn._warm is None
    losses, kept = [], 0
    for _ in range(5):
        before = model.params.copy()
        st = gn.step(model.params)
        assert st.loss <= st.loss0
        if st.accepted and st.rho >= WARM_RHO:
            np.testing.assert_allclose(gn._warm, before - model.params, rtol=0, atol=1e-14 * np.abs(before).max())
            kept += 1
        else:
            assert gn._warm is None
        losses.append(st.loss)
        state = gn.state_dict()
        assert ("gn_warm" in state) == (gn._warm is not None)
    assert kept and losses[-1] < losses[0]
    again = MatrixFreeGN(res, cg_warm=True)
    again.load_state_dict(state)
    assert (again._warm is None) == (gn._warm is None)
    if gn._warm is not None:
        np.testing.assert_array_equal(again._warm, gn._warm)
    with pytest.raises(ValueError, match="gn_warm"):
        again.load_state_dict({**state, "gn_warm": [1.0, 2.0]})


def test_a_failed_warm_start_retries_at_the_same_damping_from_zero():
    """A trial from the warm start that is rejected does not raise λ: the next trial solves the
    same system from zero, and the step is the one a solver without the start takes."""
    class BadStart(MatrixFreeGN):   # every warm-started CG answers uphill
        started = 0

        def cg(self, s, lam, D, rhs, precond, start=None, scale=None):
            x, Jx, it = super().cg(s, lam, D, rhs, precond, start, scale)
            self.started += self.start_scale > 0
            return (-10.0 * x, -10.0 * Jx, it) if self.start_scale > 0 else (x, Jx, it)

    # a case whose second step takes the warm start (the scale along the last step positive)
    model, rows, _ = make_case(2, pml=True, hard=False, seed=3)
    res = model.residuals_for(rows)
    theta = model.params.copy()
    bad = BadStart(res, cg_tol=1e-8, cg_maxiter=500, cg_warm=True)
    bad.step(theta)   # a first (cold) step, whose δ becomes the start
    assert bad._warm is not None
    cold = MatrixFreeGN(res, cg_tol=1e-8, cg_maxiter=500, cg_warm=False)
    cold.lam, cold.nu = bad.lam, bad.nu
    theta_cold = theta.copy()
    st = bad.step(theta)
    assert bad.started == 1
    ref = cold.step(theta_cold)
    assert st.accepted and st.trials == ref.trials + 1
    assert st.lam == ref.lam and st.loss == ref.loss
    np.testing.assert_array_equal(theta, theta_cold)


class _Overshoot(MatrixFreeGN):
    """Every CG answer ``scale`` times too long: a step that overshoots along the right direction."""
    scale = 3.0

    def cg(self, s, lam, D, rhs, precond, start=None, scale=None):
        x, Jx, it = super().cg(s, lam, D, rhs, precond, start, scale)
        return self.scale * x, self.scale * Jx, it


def test_a_rejected_step_is_halved_before_lam_grows():
    """``backtrack``: a trial whose step overshoots (three times the Gauss-Newton step at a small
    λ, past the model's own minimum) is halved, and the half step is taken in the same trial:
    θ − 1.5δ for the dense δ, ``alpha`` ½, its loss the loss there, ρ against the model's
    prediction for 1.5δ, λ as it was and ν back to 2. With ``backtrack=0`` the same trial is
    rejected and λ grows by ν."""
    res, theta, J, r, G, lam, D = _marquardt_case()
    lam *= 1e-2
    delta = np.linalg.solve(G + lam * np.diag(D), J.T @ r)
    loss0 = float(r @ r)
    gn = _Overshoot(res, lam=lam, products="core", gram="float64", cg_tol=1e-12, cg_maxiter=2000, cg_warm=False)
    assert gn.backtrack == 3
    theta1 = theta.copy()
    st = gn.step(theta1)
    assert st.accepted and st.trials == 1 and st.alpha == 0.5 and st.loss < st.loss0 == loss0
    np.testing.assert_allclose(theta1, theta - 1.5 * delta, rtol=0, atol=1e-8 * np.abs(delta).max())
    r1 = res.residuals(theta1)
    assert np.isclose(float(r1 @ r1), st.loss, rtol=1e-12)
    rs = r - 1.5 * (J @ delta)
    assert np.isclose(st.rho, (loss0 - st.loss) / (loss0 - float(rs @ rs)), rtol=1e-6)
    assert gn.lam == lam and gn.nu == 2.0
    rf = r - 3.0 * (J @ delta)   # the full step: past the model's minimum, no decrease predicted
    assert float(rf @ rf) > loss0

    plain = _Overshoot(res, lam=lam, products="core", gram="float64", cg_tol=1e-12, cg_maxiter=2000,
                       cg_warm=False, backtrack=0)
    theta2 = theta.copy()
    st2 = plain.step(theta2)
    assert st2.trials > 1 and st2.alpha == 1.0 and not np.array_equal(theta2, theta1)


def test_backtracking_gives_up_after_its_halvings():
    """A step six times too long is still too long after one halving: ``backtrack=1`` gives the
    trial up (λ grows by ν, ν doubles, another trial runs), where ``backtrack=3`` takes 1.5δ (α ¼)."""
    res, theta, J, r, G, lam, D = _marquardt_case()
    lam *= 1e-2

    class Far(_Overshoot):
        scale = 6.0

    one = Far(res, lam=lam, products="core", gram="float64", cg_tol=1e-12, cg_maxiter=2000, cg_warm=False,
              backtrack=1)
    st = one.step(theta.copy())
    assert st.trials > 1
    three = Far(res, lam=lam, products="core", gram="float64", cg_tol=1e-12, cg_maxiter=2000, cg_warm=False)
    st = three.step(theta.copy())
    assert st.accepted and st.trials == 1 and st.alpha == 0.25 and three.lam == lam


def test_preconditioner_is_the_block_inverse_without_coarse():
    """With one subdomain the block preconditioner is the exact inverse: CG converges at once."""
    from helmpinn.models.decomposition import DecomposedModel, Rows
    rng = np.random.default_rng(0)
    model = DecomposedModel.create([0.0], [1.0], [(1,)], ff_dim=4, hidden_dim=6, wavenumber=3.0)
    x = rng.uniform(0, 1, (30, 1))
    rows = Rows(x, 1.0, 0.0, 9.0, rng.normal(size=30), "pde")
    gn = MatrixFreeGN(model.residuals_for(rows), coarse=None, cg_tol=1e-10, gram="float64", products="core")
    _, it = gn.direction(model.params, 1e-2)
    assert it == 1


def test_float32_factor_is_a_close_symmetric_inverse():
    """``_factor(A, "float32")`` keeps the Cholesky factor in float32: its solve is a fixed,
    symmetric approximate inverse of A (CG's preconditioner), within float32 rounding."""
    from helmpinn.optim.gauss_newton import _factor
    rng = np.random.default_rng(1)
    B = rng.normal(size=(60, 40))
    A = B.T @ B + 1e-3 * np.eye(40)
    exact, single = _factor(A), _factor(A, "float32")
    b = rng.normal(size=40)
    x = single(b)
    assert x.dtype == np.float64
    assert np.linalg.norm(x - exact(b)) <= 1e-3 * np.linalg.norm(exact(b))
    M = np.column_stack([single(e) for e in np.eye(40)])
    assert np.allclose(M, M.T, rtol=0, atol=1e-5 * np.abs(M).max())
    assert np.all(np.linalg.eigvalsh(0.5 * (M + M.T)) > 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cholesky_adds_the_damping_in_its_one_copy(dtype):
    """``_cholesky(G, dtype, d)`` (the damping added on the diagonal of its one copy of G, the
    preconditioner's form) gives the factor of ``G + diag(d)`` bit for bit and leaves G as it
    was; a singular G without damping is factored after raising its diagonal a little, and a
    matrix with a negative eigenvalue far beyond that is refused."""
    import scipy.linalg as sla

    from helmpinn.optim.gauss_newton import _cholesky
    rng = np.random.default_rng(4)
    J = rng.normal(size=(30, 20))
    G = np.asfortranarray(J.T @ J)
    d = 1e-3 * np.diag(G)
    before = G.copy()
    U = _cholesky(G, dtype, d)
    assert U.dtype == np.dtype(dtype) and U.flags.f_contiguous
    expect = sla.cho_factor(G + np.diag(d), lower=False, check_finite=False)[0]
    np.testing.assert_array_equal(np.triu(U), np.triu(expect.astype(dtype)))
    np.testing.assert_array_equal(G, before)
    singular = np.asfortranarray(J[:5].T @ J[:5])   # rank 5 of 20
    U = _cholesky(singular)
    assert np.all(np.isfinite(U)) and np.all(np.diag(U) > 0)
    UtU = np.triu(U).T @ np.triu(U)
    assert np.abs(UtU - singular).max() <= 1e-6 * np.abs(singular).max()
    with pytest.raises(np.linalg.LinAlgError, match="not positive definite"):
        _cholesky(-np.eye(3))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_block_solves_are_each_blocks_solve(dtype, threads):
    """The preconditioner's block solves (``_BlockSolves``: all blocks in one call of
    ``_core.cholesky_solves``, spread over the engine's threads) give each block's own solve
    (SciPy's ?trsv twice, called from Python on this thread) bit for bit, in blocks of unequal
    sizes with gaps between them, zeros in the gaps; and they solve the blocks' systems."""
    from scipy.linalg import blas

    import helmpinn as hp
    from helmpinn.optim.gauss_newton import _BlockSolves, _cholesky
    from helmpinn.optim.low_rank import BlockColumns
    rng = np.random.default_rng(3)
    sizes, gaps = [7, 0, 30, 1, 12, 19], [2, 0, 3, 0, 1, 4]
    blocks, start = [], 0
    for n, gap in zip(sizes, gaps):
        start += gap
        B = rng.normal(size=(n + 5, n))
        blocks.append((slice(start, start + n), B.T @ B + 1e-3 * np.eye(n)))
        start += n
    v = rng.normal(size=start + 3)
    before = hp.get_num_threads()
    hp.set_num_threads(threads)
    try:
        factors = [(sl, _cholesky(A, dtype)) for sl, A in blocks if A.size]
        out = _BlockSolves(factors)(v)
    finally:
        hp.set_num_threads(before)
    assert out.dtype == np.float64
    inside = np.zeros(len(v), bool)
    tol = 1e-3 if dtype == "float32" else 1e-10
    trsv = blas.strsv if dtype == "float32" else blas.dtrsv
    for sl, U in factors:
        own = trsv(U, trsv(U, v[sl].astype(dtype), trans=1, lower=0), trans=0, lower=0)
        np.testing.assert_array_equal(out[sl], own.astype(np.float64))
    for sl, A in blocks:
        inside[sl] = True
        if A.size:
            exact = np.linalg.solve(A, v[sl])
            assert np.linalg.norm(out[sl] - exact) <= tol * np.linalg.norm(exact)
    assert np.all(out[~inside] == 0)
    # a BlockColumns V [P, k] (the mode rows' M U): each block's columns solved at once (two
    # ?trsm a block), as each column alone to rounding; a block where no factor starts refused
    k = 5
    pieces = [(sl.start, np.sort(rng.choice(k, 1 + i % 3, replace=False)), None) for i, (sl, U) in enumerate(factors)]
    pieces = [(s0, c, rng.normal(size=(len(U), len(c)))) for (s0, c, _), (_, U) in zip(pieces, factors)]
    V = BlockColumns((len(v), k), pieces)
    kept = [B.copy() for _, _, B in V.blocks]
    many = BlockColumns(V.shape, _BlockSolves(factors).columns(V)).toarray()
    assert all(np.array_equal(B, K) for (_, _, B), K in zip(V.blocks, kept))   # not overwritten
    dense = V.toarray()
    cols = np.stack([_BlockSolves(factors)(np.ascontiguousarray(dense[:, j])) for j in range(k)], 1)
    scale = np.abs(cols).max(0) + 1e-300
    assert np.all(np.abs(many - cols) <= (1e-5 if dtype == "float32" else 1e-12) * scale)
    assert np.all(many[~inside] == 0)
    with pytest.raises(ValueError, match="no factor"):
        _BlockSolves(factors).columns(BlockColumns((len(v), k), [(factors[0][0].start + 1, [0], np.ones((2, 1)))]))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grams_are_the_upper_triangles_the_factor_reads(dtype, threads):
    """``_grams`` fills each block's JᵀJ upper triangle (the strict lower one zero), in the
    blocks' dtype, blocks of any size (none, no rows, one column) spread over the engine's
    threads; ``_factor`` reads only the upper triangle, so its solves equal those of the full
    matrix."""
    from helmpinn import _core
    from helmpinn.optim.gauss_newton import _factor, _grams
    rng = np.random.default_rng(2)
    shapes = [(50, 30), (0, 4), (7, 1), (3, 12), (64, 9)]
    Js = [rng.normal(size=s) for s in shapes]
    before = _core.get_num_threads()
    _core.set_num_threads(threads)
    try:
        Gs = _grams(Js, dtype)
        assert _grams([], dtype) == []
    finally:
        _core.set_num_threads(before)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for J, G in zip(Js, Gs):
        full = J.T @ J
        assert G.dtype == np.dtype(dtype) and G.shape == full.shape and G.flags.f_contiguous
        assert np.allclose(np.triu(G), np.triu(full), rtol=0, atol=tol * max(np.abs(full).max(), 1.0))
        assert np.all(np.tril(G, -1) == 0)
    A = Gs[0] + 1e-2 * np.eye(30)
    b = rng.normal(size=30)
    exact = np.linalg.solve(Js[0].T @ Js[0] + 1e-2 * np.eye(30), b)
    assert np.linalg.norm(_factor(A)(b) - exact) <= 10 * tol * np.linalg.norm(exact)


@pytest.mark.parametrize("coarse", [None, "last_layer", "sparse"])
def test_woodbury_columns_are_the_preconditioner_of_each(coarse, monkeypatch):
    """With mode rows the preconditioner forms ``W = M U`` by pieces (the blocks' solves of U's
    blocks, the coarse correction's rows): each of its columns is M (the two-level
    preconditioner without the mode rows' term) applied to that column of U, to float32's
    rounding of the block factors; and the Woodbury form then inverts ``M⁻¹ + UUᵀ``. "sparse":
    the coarse level assembled and factored sparse (SuperLU), as above ``SPARSE_COARSE_ABOVE``."""
    from helmpinn.optim import gauss_newton
    model, res = _mode_rows_case()
    theta = model.params.copy()
    gn = MatrixFreeGN(res, coarse=coarse and "last_layer")
    if coarse == "sparse":
        gn.sparse_coarse_above = 0
    s = gn.linearize(theta, collections.defaultdict(float))
    assert (coarse == "sparse") == (s.coarse is not None and scipy.sparse.issparse(s.coarse[0]))
    D = gn._D(s)
    lam = 1e-2 * float(np.mean(D))
    seen = {}
    real = gauss_newton.woodbury

    def spy(M, U, W, sum_ranks):
        seen["W"] = W
        return real(M, U, W, sum_ranks)
    monkeypatch.setattr(gauss_newton, "woodbury", spy)
    P = gn.preconditioner(s, lam, D)
    U, s.U = s.U, None
    M = gn.preconditioner(s, lam, D)
    dense = U.toarray()
    cols = np.stack([M(np.ascontiguousarray(dense[:, k])) for k in range(dense.shape[1])], 1)
    W = seen["W"].toarray()
    assert np.abs(cols).max() > 0
    assert np.all(np.abs(W - cols) <= 1e-5 * np.abs(cols).max(0))
    v = np.random.default_rng(5).normal(size=res.num_params)
    y = P(v)   # (M⁻¹ + UUᵀ) y = v, with M⁻¹ y from M's own solve (to CG-free precision)
    Minv_y = _solve_linear(M, y)
    assert np.linalg.norm(Minv_y + dense @ (dense.T @ y) - v) <= 1e-4 * np.linalg.norm(v)


def _solve_linear(M, y):
    """``M⁻¹ y`` for a symmetric positive definite operator M, by forming M column by column."""
    n = len(y)
    A = np.stack([M(np.eye(n)[:, k]) for k in range(n)], 1)
    return np.linalg.solve((A + A.T) / 2, y)


def test_gram_matrices_do_not_depend_on_the_batch(monkeypatch):
    """The linearisation forms the blocks' Gram matrices a batch at a time (``GRAM_BATCH``
    blocks per thread, at most ``GRAM_BATCH_BYTES``): one block a batch gives the same matrices
    bit for bit, and the same D, Jᵀr and coarse matrix, as one batch of all."""
    from helmpinn.optim import gauss_newton
    model, rows, _ = make_case(2, pml=True, hard=True, seed=3)
    res = model.residuals_for(rows)
    theta = model.params.copy()
    assert len(res.parts) > 2
    lins = []
    for per, size in [(64, 1 << 30), (1, 1 << 30), (64, 1)]:
        monkeypatch.setattr(gauss_newton, "GRAM_BATCH", per)
        monkeypatch.setattr(gauss_newton, "GRAM_BATCH_BYTES", size)
        gn = MatrixFreeGN(res, coarse="last_layer")
        lins.append(gn.linearize(theta, collections.defaultdict(float)))
    for lin in lins[1:]:
        assert lins[0].grams.keys() == lin.grams.keys()
        for j, G in lins[0].grams.items():
            np.testing.assert_array_equal(G, lin.grams[j])
        np.testing.assert_array_equal(lins[0].diag, lin.diag)
        np.testing.assert_array_equal(lins[0].g, lin.g)
        np.testing.assert_array_equal(lins[0].coarse[0], lin.coarse[0])


@pytest.mark.parametrize("geodesic", [False, True])
def test_steps_lower_the_loss(geodesic):
    model, rows, _ = make_case(2, pml=True, hard=False, seed=4)
    res = model.residuals_for(rows)
    gn = MatrixFreeGN(res, geodesic=geodesic, cg_tol=1e-6)
    losses = []
    for _ in range(5):
        st = gn.step(model.params)
        losses.append(st.loss)
        assert st.loss <= st.loss0 and st.cg_iterations and set(st.terms) == {"pde", "data", "bc"}
        assert np.isclose(sum(st.terms.values()), st.loss, rtol=1e-12)
    r = res.residuals(model.params)
    assert np.isclose(float(r @ r), losses[-1], rtol=1e-12)
    assert losses[-1] < 0.5 * st.loss0 or losses[-1] < losses[0]
    state = gn.state_dict()
    gn2 = MatrixFreeGN(res)
    gn2.load_state_dict(state)
    assert gn2.lam == gn.lam


def test_options_checked():
    model, rows, _ = make_case(1)
    res = model.residuals_for(rows)
    for kw, word in [({"lam": -1}, "lam"), ({"damping": "x"}, "damping"), ({"cg_tol": 2}, "cg_tol"),
                     ({"coarse": "x"}, "coarse"), ({"products": "x"}, "products"),
                     ({"two_level": "multiplicative"}, "two_level"), ({"blas_threads": 0}, "blas_threads"),
                     ({"blas_threads": "many"}, "blas_threads"), ({"update": "halve"}, "update"),
                     ({"cg_warm": "yes"}, "cg_warm"), ({"cg_warm": 1}, "cg_warm"), ({"varpro": "yes"}, "varpro"),
                     ({"varpro": True, "coarse": None}, "varpro"), ({"varpro": True, "products": "blocks"}, "varpro"),
                     ({"lam_after_new_points": "reset"}, "lam_after_new_points"), ({"backtrack": -1}, "backtrack"),
                     ({"backtrack": 1.5}, "backtrack"), ({"backtrack": True}, "backtrack")]:
        with pytest.raises(ValueError, match=word):
            MatrixFreeGN(res, **kw)
    gn = MatrixFreeGN(res)
    with pytest.raises(ValueError, match="theta"):
        gn.step(np.zeros(3))


def test_a_non_finite_loss_raises_the_one_exception_of_the_damped_step():
    from helmpinn.optim import NonFiniteLoss
    model, rows, _ = make_case(1)
    gn = MatrixFreeGN(model.residuals_for(rows))
    theta = np.full(model.num_params, np.inf)
    with np.errstate(all="ignore"), pytest.raises(NonFiniteLoss, match="non-finite loss or Jacobian"):
        gn.step(theta)
    assert np.all(np.isinf(theta)) and gn.lam == 1e-3


def test_coarse_matrix_is_the_restricted_gram():
    """The coarse matrix assembled over the overlaps equals Zᵀ JᵀJ Z from the dense Jacobian
    (Z: every subnetwork's output-layer parameters), with blocks freed after their Gram."""
    model, rows, _ = make_case(2, pml=True, hard=True, seed=6)
    res = model.residuals_for(rows)
    gn = MatrixFreeGN(res, coarse="last_layer", gram="float64")
    s = gn.linearize(model.params, {"jacobian": 0.0, "gram": 0.0})
    Gc, idx = s.coarse
    J = res.jacobian(model.params)
    L = model.specs[0].num_hidden_layers
    per = 2 * model.specs[0].hidden_dim + 2
    assert len(idx) == per * len(model) and s.blocks is None
    assert np.allclose(Gc, (J[:, idx].T @ J[:, idx]), rtol=1e-12, atol=1e-12 * np.abs(Gc).max())
    assert L == 1


def test_sparse_coarse_matrix_equals_the_dense_one():
    """Above ``sparse_coarse_above`` unknowns the coarse matrix is assembled as a sparse matrix
    and factored by SuperLU: the same matrix, the same preconditioner and CG step."""
    from scipy import sparse
    model, rows, _ = make_case(2, pml=True, hard=True, seed=6)
    res = model.residuals_for(rows)
    dense, sp = (MatrixFreeGN(res, gram="float64", products="core", cg_tol=1e-10, cg_maxiter=2000)
                 for _ in range(2))
    sp.sparse_coarse_above = 0
    times = {"jacobian": 0.0, "gram": 0.0}
    sd, ss = dense.linearize(model.params, dict(times)), sp.linearize(model.params, dict(times))
    assert not sparse.issparse(sd.coarse[0]) and sparse.issparse(ss.coarse[0])
    np.testing.assert_allclose(ss.coarse[0].toarray(), sd.coarse[0], rtol=1e-13,
                               atol=1e-13 * np.abs(sd.coarse[0]).max())
    D = dense._D(sd)
    v = np.random.default_rng(2).normal(size=res.num_params)
    a, b = dense.preconditioner(sd, 1e-3, D)(v), sp.preconditioner(ss, 1e-3, D)(v)
    assert np.linalg.norm(a - b) < 1e-9 * np.linalg.norm(a)
    (d1, _), (d2, _) = dense.direction(model.params, 1e-3), sp.direction(model.params, 1e-3)
    # Both steps solve the same system to CG's tolerance (1e-10 of ‖Jᵀr‖), so A (d1 − d2) is
    # that small. (d1 − d2 itself is not: the system's conditioning, 650-700 CG iterations here,
    # amplifies the tolerance to a few 1e-7 on some machines; a bound on it failed on one.)
    _, A_diff = dense._normal(sd, 1e-3, D)(d1 - d2)
    assert np.linalg.norm(A_diff) < 1e-9 * np.linalg.norm(sd.g)
    assert np.linalg.norm(d1 - d2) < 1e-4 * np.linalg.norm(d1)


def test_varpro_solves_the_output_layers_exactly():
    """``varpro``: the output layers z move to their least-squares values for the current hidden
    layers (the coarse matrix with its ridge), nothing else moves; the residuals are linear in
    z, so the new ones are r − J_Z δz exactly and J_Zᵀ r is then ~0; the linearisation's
    residuals and gradient are those of the new parameters. A projection that lowers the loss
    more than ``varpro_max_fall`` times is refused, ``theta`` untouched."""
    res, theta, J, r, G, lam, D = _marquardt_case()
    loss0 = float(r @ r)
    gn = MatrixFreeGN(res, products="core", gram="float64", varpro=True)
    gn.varpro_max_fall = np.inf
    th = theta.copy()
    s = gn.linearize(th, {"jacobian": 0.0, "gram": 0.0})
    Gc, idx = s.coarse
    Z = J[:, idx]
    A = Z.T @ Z
    np.testing.assert_allclose(Gc, A, rtol=1e-12, atol=1e-12 * np.abs(A).max())
    dz = np.linalg.solve(A + VARPRO_RIDGE * np.diag(np.diag(A)), Z.T @ r)
    projected = gn._project(th, s, loss0)
    rest = np.setdiff1d(np.arange(len(theta)), idx)
    np.testing.assert_array_equal(th[rest], theta[rest])
    # (the ridge leaves the system's condition near 1e8: the two solves agree to about 1e-6)
    assert np.linalg.norm(theta[idx] - th[idx] - dz) < 1e-5 * np.linalg.norm(dz)
    r1 = res.residuals(th)
    np.testing.assert_allclose(r1, r - Z @ dz, rtol=0, atol=1e-8 * np.abs(r).max())
    assert projected == pytest.approx(float(r1 @ r1), rel=1e-12) and projected < loss0 / 2
    assert np.linalg.norm(Z.T @ r1) < 1e-5 * np.linalg.norm(Z.T @ r)
    assert s.theta is th
    np.testing.assert_array_equal(s.r, r1)
    J1 = res.jacobian(th)
    np.testing.assert_allclose(s.g, J1.T @ r1, rtol=0, atol=1e-10 * np.abs(J1.T @ r1).max())
    # the default refuses a fall of more than VARPRO_MAX_FALL (this one: more than twice)
    strict = MatrixFreeGN(res, products="core", gram="float64", varpro=True)
    assert strict.varpro_max_fall == VARPRO_MAX_FALL == 2.0
    th2 = theta.copy()
    assert strict._project(th2, strict.linearize(th2, {"jacobian": 0.0, "gram": 0.0}), loss0) is None
    np.testing.assert_array_equal(th2, theta)
    # in a step: the loss before the projection, after it, and after the accepted trial
    model = res.model
    model.params[...] = theta
    gn = MatrixFreeGN(res, products="core", gram="float64", varpro=True, cg_tol=1e-8)
    gn.varpro_max_fall = np.inf
    st = gn.step(model.params)
    assert st.accepted and st.loss0 == pytest.approx(loss0, rel=1e-12)
    assert st.projected == pytest.approx(projected, rel=1e-9) and st.loss < st.projected
    r2 = res.residuals(model.params)
    assert st.loss == pytest.approx(float(r2 @ r2), rel=1e-12)


def test_lam_returns_after_new_points():
    """New points (set_residuals) whose first steps raise λ by rejected trials: the first step
    accepted on them returns λ to its value before them ("restore", default), once; "keep" leaves
    the damping rule's λ. The value is carried by state_dict."""
    model, rows, _ = make_case(2, pml=True, hard=False, seed=4)
    res = model.residuals_for(rows)
    theta0 = model.params.copy()
    runs = {}
    for mode in ("restore", "keep"):
        theta = theta0.copy()
        gn = MatrixFreeGN(res, cg_tol=1e-6, lam_after_new_points=mode)
        first = gn.step(theta)
        assert first.accepted and gn._lam_before_new_points is None   # not armed by the construction
        lam_before = gn.lam
        gn.set_residuals(res)   # "new points" (the same ones: only λ's bookkeeping is looked at)
        assert gn._lam_before_new_points == (lam_before if mode == "restore" else None)
        gn.lam = 1e3 * lam_before   # as rejected trials on the new points would leave it
        if mode == "restore":
            state = gn.state_dict()
            assert state["gn_lambda_before_new_points"] == lam_before
            again = MatrixFreeGN(res)
            again.load_state_dict(state)
            assert again._lam_before_new_points == lam_before
            with pytest.raises(ValueError, match="gn_lambda_before_new_points"):
                again.load_state_dict({**state, "gn_lambda_before_new_points": -1.0})
        st = gn.step(theta)
        assert st.accepted
        runs[mode] = gn.lam
        assert gn._lam_before_new_points is None and "gn_lambda_before_new_points" not in gn.state_dict()
        if mode == "restore":
            assert gn.lam == lam_before
            gn.lam = 1e3 * lam_before
            gn.step(theta)   # once only: later steps follow the damping rule
            assert gn.lam > lam_before
    assert runs["keep"] > 10 * runs["restore"]


def _mode_rows_case(weight: float = 3.0):
    """The 2-D case with a PML and the hard constraint, with two mode rows on its PDE points
    (random columns times ``weight``)."""
    model, rows, _ = make_case(2, pml=True, hard=True, seed=3)
    M = np.random.default_rng(11).normal(size=(len(rows), 2)) * weight
    M[rows.term != "pde"] = 0.0
    return model, model.residuals_for(rows, modes=M)


@pytest.mark.parametrize("coarse", [None, "last_layer"])
@pytest.mark.parametrize("products", ["core", "blocks"])
def test_cg_step_with_mode_rows_equals_dense(coarse, products):
    """With mode rows the system is the whole Jacobian's (point and mode rows), D Marquardt's of
    the point rows alone, and the preconditioner (with the mode rows' low-rank term added by
    Woodbury's identity) leaves the step the dense one."""
    model, res = _mode_rows_case()
    theta = model.params.copy()
    gn = MatrixFreeGN(res, coarse=coarse, products=products, cg_tol=1e-12, cg_maxiter=2000, gram="float64")
    J, r = res.jacobian(theta), res.residuals(theta)
    Jp = J[:res.num_points]
    d = np.einsum("ij,ij->j", Jp, Jp)
    D = np.maximum(d, 1e-12 * d.max())
    lam = 1e-2 * float(np.mean(d))
    A, b = J.T @ J + lam * np.diag(D), J.T @ r
    delta, it = gn.direction(theta, lam)
    dense = np.linalg.solve(A, b)
    assert np.linalg.norm(A @ delta - b) < 1e-11 * np.linalg.norm(b)
    assert np.linalg.norm(delta - dense) < 1e-6 * np.linalg.norm(dense)
    assert 1 <= it < 2000


def test_mode_rows_low_rank_preconditioner_is_exact_with_one_subdomain(monkeypatch):
    """One subdomain, no coarse level: the block inverse plus the mode rows' term by Woodbury's
    identity is the exact inverse of the damped system, so CG converges at once."""
    from helmpinn.models.decomposition import DecomposedModel, Rows
    rng = np.random.default_rng(0)
    model = DecomposedModel.create([0.0], [1.0], [(1,)], ff_dim=4, hidden_dim=6, wavenumber=3.0)
    x = rng.uniform(0, 1, (30, 1))
    rows = Rows(x, 1.0, 0.0, 9.0, rng.normal(size=30), "pde")
    modes = np.stack([np.sin(np.pi * x[:, 0]), np.sin(2 * np.pi * x[:, 0])], 1) * 5.0
    gn = MatrixFreeGN(model.residuals_for(rows, modes=modes), coarse=None, cg_tol=1e-10, gram="float64",
                      products="core")
    _, it = gn.direction(model.params, 1e-2)
    assert it == 1
    # without the low-rank term the block inverse misses the mode rows: more iterations
    plain = MatrixFreeGN(model.residuals_for(rows, modes=modes), coarse=None, cg_tol=1e-10, gram="float64",
                         products="core")
    from helmpinn.optim import gauss_newton
    monkeypatch.setattr(gauss_newton, "woodbury", lambda M, U, W, sum_ranks: M)
    assert plain.direction(model.params, 1e-2)[1] > 1


def test_green_mode_rows_carriers_stay_out_of_the_gram_matrices():
    """Green's mode rows (dd_driver): value rows of the term "modes" at a negligible scale carry
    them, through the core's data term. The blocks' Gram matrices leave those carriers out (their
    own JᵀJ is ~1e-16 of the rest), the mode rows' term U is read from them: with one subdomain
    the preconditioner is still the exact inverse, CG converges at once."""
    from helmpinn.models.decomposition import DecomposedModel, Rows
    rng = np.random.default_rng(1)
    model = DecomposedModel.create([0.0], [1.0], [(1,)], ff_dim=4, hidden_dim=6, wavenumber=3.0)
    x, z = rng.uniform(0, 1, (30, 1)), np.linspace(0.01, 0.99, 25)[:, None]
    f = rng.normal(size=30)
    for s in (0.3, 1e-8):   # a scale whose JᵀJ would show, then dd_driver's kind
        rows = Rows.concat([Rows(x, 1.0, 0.0, 9.0, f, "pde"), Rows(z, 0.0, 0.0, s, 0.0, "modes")])
        modes = np.zeros((55, 2))
        modes[30:] = np.stack([np.sin(np.pi * z[:, 0]), np.sin(2 * np.pi * z[:, 0])], 1) * 0.2 / s
        res = model.residuals_for(rows, modes=modes)
        assert res.parts[0]["counted"] == 50   # the carriers, first in the part's rows
        gn = MatrixFreeGN(res, coarse=None, cg_tol=1e-10, gram="float64", products="core")
        theta = model.params
        J = res.jacobian(theta)
        pde = np.arange(res.num_points) < 60   # the PDE points' (re, im) rows; the carriers' after
        lin = gn.linearize(theta, collections.defaultdict(float))
        G = J[:res.num_points][pde]
        assert np.allclose(np.triu(lin.grams[0]), np.triu(G.T @ G), rtol=1e-12, atol=1e-12 * np.abs(G).max() ** 2)
        assert np.allclose(lin.U.toarray(), J[res.num_points:].T, rtol=1e-10, atol=1e-10 * np.abs(J).max())
        # the coarse matrix leaves them out too: the output layers' columns over the PDE rows
        two = MatrixFreeGN(res, coarse="last_layer", gram="float64", products="core")
        Gc, idx = two.linearize(theta, collections.defaultdict(float)).coarse
        Z = G[:, idx]
        assert np.allclose(Gc, Z.T @ Z, rtol=1e-12, atol=1e-12 * np.abs(Z).max() ** 2)
    _, it = gn.direction(theta, 1e-2)
    assert it == 1
    # over three overlapping subdomains (carriers shared between them) the same: the coarse
    # matrix sums the output layers' columns over the PDE rows the blocks share
    model = DecomposedModel.create([0.0], [1.0], [(3,)], overlap=0.5, ff_dim=4, hidden_dim=6, wavenumber=3.0)
    rows = Rows.concat([Rows(x, 1.0, 0.0, 9.0, f, "pde"), Rows(z, 0.0, 0.0, 0.3, 0.0, "modes")])   # a scale that shows
    modes = np.zeros((55, 2))
    modes[30:] = np.stack([np.sin(np.pi * z[:, 0]), np.sin(2 * np.pi * z[:, 0])], 1)
    res = model.residuals_for(rows, modes=modes)
    assert all(p["counted"] > 0 for p in res.parts)
    two = MatrixFreeGN(res, coarse="last_layer", gram="float64", products="core")
    theta = model.params
    Gc, idx = two.linearize(theta, collections.defaultdict(float)).coarse
    Z = res.jacobian(theta)[:res.num_points][pde][:, idx]
    assert np.allclose(Gc, Z.T @ Z, rtol=1e-12, atol=1e-12 * np.abs(Z).max() ** 2)


@pytest.mark.parametrize("products", ["core", "blocks"])
def test_cg_tolerance_is_relative_to_the_point_rows_share(products):
    """With mode rows that dominate the loss, CG's stop is ``cg_tol`` times the point rows'
    share of Jᵀr, ``‖J_pᵀ r_p‖`` (dense here), not the whole ``‖Jᵀr‖``: ``cg_tol_on="all"``
    stops earlier, with a residual above what "points" asks for."""
    model, res = _mode_rows_case(300.0)
    theta = model.params.copy()
    J, r = res.jacobian(theta), res.residuals(theta)
    n = res.num_points
    gp = np.linalg.norm(J[:n].T @ r[:n])
    g = np.linalg.norm(J.T @ r)
    assert g > 10 * gp   # the mode rows dominate
    d = np.einsum("ij,ij->j", J[:n], J[:n])
    lam = 1e-2 * float(np.mean(d))
    A, b = J.T @ J + lam * np.diag(np.maximum(d, 1e-12 * d.max())), J.T @ r
    cg_tol, out = 1e-2, {}
    for on in ("points", "all"):
        gn = MatrixFreeGN(res, coarse=None, products=products, cg_tol=cg_tol, cg_maxiter=2000, gram="float64",
                          cg_tol_on=on)
        delta, it = gn.direction(theta, lam)
        out[on] = it, np.linalg.norm(A @ delta - b)
    assert out["points"][1] <= cg_tol * gp * (1 + 1e-9)
    assert out["all"][1] <= cg_tol * g * (1 + 1e-9)
    assert out["all"][1] > cg_tol * gp and out["points"][0] > out["all"][0]
    with pytest.raises(ValueError, match="cg_tol_on"):
        MatrixFreeGN(res, cg_tol_on="modes")


def test_mode_rows_are_refused_with_the_deflated_preconditioner_and_varpro():
    _, res = _mode_rows_case()
    for options in ({"two_level": "deflated"}, {"varpro": True}):
        with pytest.raises(ValueError, match="mode rows"):
            MatrixFreeGN(res, **options)
