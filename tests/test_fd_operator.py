"""helmpinn.reference.FDOperator / FDFactor: the finite-difference operator as a reusable object
(κ changed cheaply, one factorisation for many right-hand sides and their adjoints), its memory
estimate, and the checks of non-finite κ and sources."""
import numpy as np
import pytest
from scipy.sparse import csc_matrix

import helmpinn as hp
from helmpinn import _budget, memory
from helmpinn.problems.geometry import Box
from helmpinn.reference import FDFactor, FDOperator, fd_solve, lu_fill

BOX = Box([0.0, 0.0], [1.0, 1.0])


def _velocity(x):
    return 1.0 + 0.3 * np.exp(-((x[:, 0] - 0.5) ** 2 + (x[:, 1] - 0.5) ** 2) / 0.03)


def _problem(**kw):
    kw.setdefault("velocity", _velocity)
    return hp.Problem(BOX, frequency=2.0, pml=hp.PML(0.3), **kw)


def test_one_factorisation_serves_many_sources_as_fd_solve_does():
    sources = [hp.PointSource([0.3, 0.35], width=0.06), hp.PointSource([0.7, 0.6], 2 - 1j, width=0.06)]
    op = FDOperator(_problem(), 1 / 24)
    lu = op.factorize()
    u = lu.solve(np.stack([op.rhs(s) for s in sources], axis=1))
    for j, s in enumerate(sources):
        want = fd_solve(_problem(source=s), 1 / 24).values.ravel()
        np.testing.assert_allclose(u[:, j], want, rtol=0, atol=1e-12 * np.abs(want).max())


def test_a_new_kappa_changes_only_the_diagonal():
    """The operator of a homogeneous medium given another medium's κ is that medium's operator
    (the same PML: its coefficients depend on the wavenumber and strength, given to both)."""
    src = hp.PointSource([0.3, 0.35], width=0.06)
    bump = _problem(source=src)
    pml = hp.PML(0.3, strength=bump.pml.strength)
    homogeneous = hp.Problem(BOX, kappa=16 * np.pi**2, pml=pml, wavenumber=bump.wavenumber, source=src)
    target = hp.Problem(BOX, kappa=bump.kappa, pml=pml, wavenumber=bump.wavenumber, source=src)
    op, want = FDOperator(homogeneous, 1 / 24), FDOperator(target, 1 / 24)
    kappa = target.kappa_at(op.interior_points)
    assert (op.matrix() != want.matrix()).nnz > 0
    np.testing.assert_array_equal(op.matrix(kappa).toarray(), want.matrix().toarray())
    np.testing.assert_array_equal(op.factorize(kappa).solve(op.rhs()), want.factorize().solve(want.rhs()))
    full = np.zeros(op.shape, complex)      # a grid-shaped κ: its wall values are not used
    full.ravel()[op.interior_nodes] = kappa
    np.testing.assert_array_equal(op.matrix(full).toarray(), want.matrix().toarray())
    with pytest.raises(ValueError, match="kappa must be a number"):
        op.matrix(np.ones(7))


def test_the_adjoint_solve_solves_the_conjugate_transpose():
    op = FDOperator(_problem(), 1 / 20)
    lu = op.factorize()
    b = np.random.default_rng(0).normal(size=(op.size, 3)) + 0j
    lam = lu.solve(b, adjoint=True)
    A = op.matrix()
    assert np.abs(A.conj().T @ lam - b).max() < 1e-10 * np.abs(b).max()


def test_a_non_finite_kappa_or_source_is_named_not_blamed_on_resonance():
    def kappa(x):
        k = np.full(len(x), 30.0)
        k[np.argmin(np.sum((x - 0.5) ** 2, axis=1))] = np.nan
        return k

    p = hp.Problem(BOX, kappa=kappa, pml=hp.PML(0.3), wavenumber=5.0,
                   source=hp.PointSource([0.3, 0.3], width=0.1))
    with pytest.raises(ValueError, match=r"kappa is not finite at interior node \d+ of \d+, x = \[0.5.* 1 such point"):
        fd_solve(p, 1 / 20)

    def source(x):
        f = np.zeros(len(x), complex)
        f[x[:, 0] > 0.9] = np.inf
        return f
    p = hp.Problem(BOX, kappa=30.0, pml=hp.PML(0.3), source=source)
    with pytest.raises(ValueError, match="right-hand side .* is not finite"):
        fd_solve(p, 1 / 20)


def test_a_grid_beyond_the_memory_is_refused_before_any_assembly(monkeypatch):
    calls = []

    def velocity(x):
        calls.append(len(x))
        return np.ones(len(x))

    p = hp.Problem(BOX, frequency=2.0, velocity=velocity, pml=hp.PML(0.3), wavenumber=4 * np.pi)
    calls.clear()
    monkeypatch.delenv(memory.LIMIT_VARIABLE, raising=False)
    monkeypatch.setattr(_budget, "available_memory", lambda: 50_000_000)   # the one reading of every kind
    with pytest.raises(ValueError, match=r"needs about .* more than 80% of the 47.7 MiB of memory available; "
                                         r"use a larger h"):
        fd_solve(p, 1 / 200)
    assert calls == []
    fd_solve(p, 1 / 20)     # 37² nodes: an estimate of a few MB, accepted


@pytest.mark.parametrize("d, n", [(2, 48), (3, 10)])
def test_the_fill_model_does_not_underestimate(d, n):
    p = hp.Problem(Box(np.zeros(d), np.ones(d)), frequency=1.0, velocity=1.0, pml=hp.PML(0.3))
    op = FDOperator(p, 1.6 / n)
    fill = op.factorize().fill
    assert fill <= lu_fill(op.size, d) <= 3 * fill, (fill, lu_fill(op.size, d))


def test_a_failed_diagonal_pivot_is_refactorised_with_partial_pivoting():
    A = csc_matrix(np.array([[1e-17, 1, 0], [1, 1e-17, 1], [0, 1, 2]], complex))
    f = FDFactor(A)
    b = np.array([1.0, 2.0, 3.0])
    u = f.solve(b)
    assert f.ordering == "COLAMD"
    assert np.abs(A @ u - b).max() < 1e-12


def test_orderings_agree():
    p = _problem(source=hp.PointSource([0.3, 0.35], width=0.06))
    a = fd_solve(p, 1 / 24).values
    b = fd_solve(p, 1 / 24, ordering="COLAMD").values
    assert np.abs(a - b).max() < 1e-11 * np.abs(a).max()
    with pytest.raises(ValueError, match="ordering must be one of"):
        fd_solve(p, 1 / 24, ordering="AMD")


def test_a_singular_matrix_is_one_clear_error():
    with pytest.raises(FloatingPointError, match="the matrix is singular"):
        FDFactor(csc_matrix(np.array([[0, 0], [0, 1]], complex)))
