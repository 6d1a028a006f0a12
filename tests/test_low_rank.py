"""helmpinn.optim.low_rank: a BlockColumns matrix's products against its dense form, and the
Woodbury form against the inverse it stands for."""
from __future__ import annotations

import numpy as np
import pytest

from helmpinn.optim.low_rank import BlockColumns, woodbury


def _case(rng, with_rows: bool):
    """A [30, 7] matrix of three blocks (one with no columns) and, optionally, dense rows."""
    blocks = [(0, np.array([1, 4]), rng.normal(size=(8, 2))),
              (8, np.array([], np.intp), np.zeros((5, 0))),
              (13, np.array([0, 2, 6]), rng.normal(size=(11, 3))),
              (26, np.array([5]), rng.normal(size=(4, 1)))]
    rows = (np.array([2, 9, 20, 29]), rng.normal(size=(4, 7))) if with_rows else None
    return BlockColumns((30, 7), blocks, rows)


@pytest.mark.parametrize("with_rows", [False, True])
def test_block_columns_products_are_the_dense_ones(with_rows):
    rng = np.random.default_rng(0)
    A = _case(rng, with_rows)
    dense = A.toarray()
    assert dense.shape == (30, 7) and len(A.blocks) == 3   # (the block with no columns dropped)
    assert np.count_nonzero(dense[8:13]) == (7 if with_rows else 0)   # only the dense row 9 there
    s, c, B = A.blocks[0]   # a row that no dense row adds to: the block's own, zeros elsewhere
    np.testing.assert_array_equal(dense[0, c], B[0])
    assert np.count_nonzero(dense[0]) == 2
    if with_rows:   # a dense row inside a block: the two added
        at, R = A.rows
        np.testing.assert_allclose(dense[2, c], B[2] + R[0, c], rtol=1e-15)
    x, v = rng.normal(size=7), rng.normal(size=30)
    np.testing.assert_allclose(A.matvec(x), dense @ x, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(A.rmatvec(v), dense.T @ v, rtol=1e-13, atol=1e-13)
    at = np.array([0, 3, 9, 13, 25, 29])
    blocks_only = BlockColumns(A.shape, A.blocks).toarray()
    np.testing.assert_array_equal(A.take(at), blocks_only[at])
    U = BlockColumns(A.shape, A.blocks)
    W = BlockColumns(A.shape, [(s, c, rng.normal(size=B.shape)) for s, c, B in A.blocks], A.rows)
    np.testing.assert_allclose(U.gram(W), U.toarray().T @ W.toarray(), rtol=1e-13, atol=1e-13)


def test_block_columns_refuses_pieces_that_do_not_fit():
    with pytest.raises(ValueError, match="does not fit"):
        BlockColumns((10, 3), [(8, [0, 1], np.ones((4, 2)))])
    with pytest.raises(ValueError, match="does not fit"):
        BlockColumns((10, 3), [(0, [0], np.ones((4, 2)))])
    A = BlockColumns((10, 3), [(0, [0, 1], np.ones((4, 2)))])
    with pytest.raises(ValueError, match="same blocks"):
        A.gram(BlockColumns((10, 3), [(0, [0, 2], np.ones((4, 2)))]))
    with pytest.raises(ValueError, match="same blocks"):
        BlockColumns((10, 3), A.blocks, (np.array([1]), np.ones((1, 3)))).gram(A)


def test_woodbury_inverts_m_inverse_plus_u_u_transposed():
    """With M = B⁻¹ (B symmetric positive definite) and W = M U, ``woodbury`` applies
    ``(B + UUᵀ)⁻¹`` to rounding."""
    rng = np.random.default_rng(1)
    U = _case(rng, False)
    C = rng.normal(size=(30, 30))
    B = C @ C.T + 30 * np.eye(30)
    M = np.linalg.inv(B)
    MU = M @ U.toarray()
    W = BlockColumns(U.shape, [(s, c, MU[s:s + len(X), c]) for s, c, X in U.blocks],
                     (np.arange(30), MU - _blocks_part(MU, U)))   # W = M U, its blocks and the rest as rows
    np.testing.assert_allclose(W.toarray(), MU, rtol=1e-14, atol=1e-14)
    P = woodbury(lambda v: M @ v, U, W, lambda a: a)
    v = rng.normal(size=30)
    Ud = U.toarray()
    np.testing.assert_allclose(P(v), np.linalg.solve(B + Ud @ Ud.T, v), rtol=1e-10, atol=1e-12)


def _blocks_part(X, U):
    """X's entries where U's blocks lie (zero elsewhere)."""
    out = np.zeros_like(X)
    for s, c, B in U.blocks:
        out[s:s + len(B), c] = X[s:s + len(B), c]
    return out
