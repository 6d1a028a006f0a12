"""The residual level of Workspace: residuals, jacobian (whole and by row ranges), jvp, vjp,
value_and_grad's grad_kappa, breakdown and counts, in d = 1, 2, 3 for every loss term, against
the float64 reference (tests/reference.py) and finite differences."""

from __future__ import annotations

import numpy as np
import pytest

import helmpinn
import reference as R

# name -> keyword arguments of make_inputs; every term alone, and all together with weights.
CASES = {
    "pde_scalar_kappa": dict(n_pde=7, kappa="scalar", f=False),
    "pde_array_kappa_f": dict(n_pde=7, kappa="array", f=True),
    "data": dict(n_data=6),
    "bc_scalar_alpha": dict(n_bc=5, alpha="scalar", g=False),
    "bc_array_alpha_g": dict(n_bc=5, alpha="array", g=True),
    "all_weighted": dict(n_pde=6, n_data=5, n_bc=4, kappa="array", alpha="array",
                         weights=(0.7, 1.9, 0.35)),
}


def _ws(spec_tuple, dtype="float64"):
    return helmpinn.Workspace(helmpinn.ModelSpec(*spec_tuple), 16, dtype=dtype)


def _theta(spec_tuple, rng, dtype=np.float64):
    return R.random_params(spec_tuple, rng, fourier_sigma=0.4).astype(dtype)


@pytest.mark.parametrize("case", CASES)
def test_residuals_match_reference_and_sum_to_the_loss(spec_tuple, d, rng, make_inputs, case):
    terms = make_inputs(d, **CASES[case])
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    r = ws.residuals(theta, **terms)
    ref = R.residuals(theta, spec_tuple, **terms)
    n = sum(len(terms.get(k, ())) for k in ("x_pde", "x_data", "x_bc"))
    assert r.shape == ref.shape == (2 * n,)
    np.testing.assert_allclose(r, ref, rtol=1e-12, atol=1e-12)
    loss = ws.value_and_grad(theta, np.zeros_like(theta), **terms)
    assert np.isclose(r @ r, loss, rtol=1e-13, atol=0)


@pytest.mark.parametrize("case", CASES)
def test_jacobian_against_finite_differences(spec_tuple, d, rng, make_inputs, case):
    terms = make_inputs(d, **CASES[case])
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    J = ws.jacobian(theta, **terms)
    J_fd = R.fd_jacobian(lambda th: R.residuals(th, spec_tuple, **terms), theta)
    assert J.shape == J_fd.shape
    scale = np.max(np.abs(J_fd))
    assert np.max(np.abs(J - J_fd)) <= 1e-7 * scale
    # The core's own residuals, differenced, agree too (the rows are the same function).
    h = 1e-6
    k = rng.integers(theta.size)
    e = np.zeros_like(theta)
    e[k] = h
    col = (ws.residuals(theta + e, **terms) - ws.residuals(theta - e, **terms)) / (2 * h)
    np.testing.assert_allclose(J[:, k], col, rtol=1e-6, atol=1e-7 * scale)


@pytest.mark.parametrize("case", CASES)
def test_products_and_gradient_identities(spec_tuple, d, rng, make_inputs, case):
    terms = make_inputs(d, **CASES[case])
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    J = ws.jacobian(theta, **terms)
    r = ws.residuals(theta, **terms)
    grad = np.zeros_like(theta)
    ws.value_and_grad(theta, grad, **terms)
    np.testing.assert_allclose(2 * J.T @ r, grad, rtol=1e-12, atol=1e-12 * np.abs(grad).max())
    v = rng.normal(size=theta.size)
    w = rng.normal(size=r.size)
    Jv = ws.jvp(theta, v, **terms)
    JTw = ws.vjp(theta, w, **terms)
    np.testing.assert_allclose(Jv, J @ v, rtol=1e-12, atol=1e-12 * np.abs(J @ v).max())
    np.testing.assert_allclose(JTw, J.T @ w, rtol=1e-12, atol=1e-12 * np.abs(J.T @ w).max())
    # vjp with w = 2 r is the loss gradient.
    np.testing.assert_allclose(ws.vjp(theta, 2 * r, **terms), grad, rtol=1e-12,
                               atol=1e-12 * np.abs(grad).max())


@pytest.mark.parametrize("train_fourier", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_jvp_is_the_directional_derivative_of_the_residuals(spec_tuple, d, rng, make_inputs, case,
                                                            train_fourier):
    # jvp is computed in forward mode (its own formulas, docs/MATH.md), not from the Jacobian's
    # rows: check it against central differences of the float64 reference along v.
    terms = make_inputs(d, **CASES[case])
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    v = rng.normal(size=theta.size)
    if not train_fourier:
        v_fd = v.copy()
        v_fd[:d * spec_tuple[1]] = 0.0   # B frozen: its columns of J are zero
    else:
        v_fd = v
    h = 1e-6
    fd = (R.residuals(theta + h * v_fd, spec_tuple, **terms)
          - R.residuals(theta - h * v_fd, spec_tuple, **terms)) / (2 * h)
    Jv = ws.jvp(theta, v, train_fourier=train_fourier, **terms)
    np.testing.assert_allclose(Jv, fd, rtol=0, atol=1e-7 * np.abs(fd).max())


def test_row_ranges_equal_the_same_rows_of_the_full_jacobian(rng, make_inputs):
    spec = (2, 5, 9, 2)
    # More than one 64-point tile per term, so ranges cross tiles and terms.
    terms = make_inputs(2, n_pde=70, n_data=66, n_bc=65, kappa="array", alpha="array")
    theta = _theta(spec, rng)
    ws = _ws(spec)
    J = ws.jacobian(theta, **terms)
    R_ = J.shape[0]
    for start, stop in [(0, R_), (0, 1), (1, 2), (127, 141), (139, 140), (141, 273),
                        (R_ - 3, R_), (50, 50)]:
        part = ws.jacobian(theta, rows=(start, stop), **terms)
        assert part.shape == (stop - start, theta.size)
        np.testing.assert_array_equal(part, J[start:stop])
    out = np.full((10, theta.size), np.nan)
    assert ws.jacobian(theta, out=out, rows=(200, 210), **terms) is out
    np.testing.assert_array_equal(out, J[200:210])


def test_frozen_fourier_features_give_zero_B_columns(rng, make_inputs):
    spec = (2, 4, 6, 2)
    terms = make_inputs(2, n_pde=5, n_data=3, n_bc=4)
    theta = _theta(spec, rng)
    ws = _ws(spec)
    J = ws.jacobian(theta, train_fourier=False, **terms)
    nB = 2 * 4
    assert np.all(J[:, :nB] == 0)
    np.testing.assert_array_equal(J[:, nB:], ws.jacobian(theta, **terms)[:, nB:])
    v = rng.normal(size=theta.size)
    np.testing.assert_allclose(ws.jvp(theta, v, train_fourier=False, **terms), J @ v,
                               rtol=1e-12, atol=1e-13)
    w = rng.normal(size=J.shape[0])
    np.testing.assert_allclose(ws.vjp(theta, w, train_fourier=False, **terms), J.T @ w,
                               rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kappa", ["scalar", "array"])
def test_grad_kappa_against_finite_differences(spec_tuple, d, rng, make_inputs, kappa):
    terms = make_inputs(d, n_pde=6, n_bc=3, kappa=kappa, weights=(0.6, 1.0, 1.0))
    theta = _theta(spec_tuple, rng)
    ws = _ws(spec_tuple)
    gk = np.zeros(6)
    grad = np.zeros_like(theta)
    ws.value_and_grad(theta, grad, grad_kappa=gk, **terms)
    kap = np.broadcast_to(np.asarray(terms["kappa"], dtype=np.float64), (6,)).copy()
    h = 1e-5
    for i in range(6):
        plus, minus = kap.copy(), kap.copy()
        plus[i] += h
        minus[i] -= h
        lp = R.loss(theta, spec_tuple, **{**terms, "kappa": plus})
        lm = R.loss(theta, spec_tuple, **{**terms, "kappa": minus})
        assert gk[i] == pytest.approx((lp - lm) / (2 * h), rel=1e-7, abs=1e-10)


def test_breakdown_and_counts_shards_add_up(rng, make_inputs):
    spec = (2, 4, 6, 2)
    terms = make_inputs(2, n_pde=40, n_data=17, n_bc=23, kappa="array", alpha="array",
                        weights=(0.5, 2.0, 0.25))
    theta = _theta(spec, rng)
    ws = _ws(spec)
    full_grad = np.zeros_like(theta)
    full = ws.value_and_grad(theta, full_grad, breakdown=True, **terms)
    assert isinstance(full, helmpinn.LossBreakdown)
    ref_total, ref_parts = R.loss_terms(theta, spec, **terms)
    assert full.total == pytest.approx(ref_total, rel=1e-13)
    for k in ("pde", "data", "bc"):
        assert getattr(full, k) == pytest.approx(ref_parts[k], rel=1e-13)
    assert float(full) == full.total

    # Two uneven shards (shard b has no data points), each told the global counts.
    counts = {"pde": 40, "data": 17, "bc": 23}
    cut = {"pde": 13, "data": 17, "bc": 5}
    keys = {"pde": ("x_pde", "kappa", "f"), "data": ("x_data", "y"),
            "bc": ("x_bc", "n_bc", "alpha_bc", "g_bc")}

    def shard(first: bool) -> dict:
        out = {k: v for k, v in terms.items() if k.startswith("w_")}
        for term, names in keys.items():
            sl = slice(0, cut[term]) if first else slice(cut[term], None)
            if not first and cut[term] == counts[term]:
                continue
            for name in names:
                out[name] = terms[name][sl]
        return out

    ga, gb = np.zeros_like(theta), np.zeros_like(theta)
    la = ws.value_and_grad(theta, ga, counts=counts, **shard(True))
    lb = ws.value_and_grad(theta, gb, counts=counts, **shard(False))
    assert la + lb == pytest.approx(full.total, rel=1e-12)
    np.testing.assert_allclose(ga + gb, full_grad, rtol=1e-12, atol=1e-13)
    ra = ws.residuals(theta, counts=counts, **shard(True))
    rb = ws.residuals(theta, counts=counts, **shard(False))
    assert ra @ ra + rb @ rb == pytest.approx(full.total, rel=1e-12)


def test_float32_agrees_with_float64(rng, make_inputs):
    spec = (2, 8, 40, 2)   # wider than the micro-kernel's tile in both dtypes
    terms = make_inputs(2, n_pde=70, n_data=9, n_bc=11, kappa="array", alpha="array")
    theta = _theta(spec, rng)
    J64 = _ws(spec).jacobian(theta, **terms)
    ws32 = _ws(spec, "float32")
    t32 = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v) for k, v in terms.items()}
    J32 = ws32.jacobian(theta.astype(np.float32), **t32)
    assert J32.dtype == np.float32
    assert np.max(np.abs(J32 - J64)) <= 2e-4 * np.max(np.abs(J64))
    v = rng.normal(size=theta.size)
    jv32 = ws32.jvp(theta.astype(np.float32), v.astype(np.float32), **t32)
    assert np.max(np.abs(jv32 - J64 @ v)) <= 2e-4 * np.max(np.abs(J64 @ v))


def test_results_do_not_depend_on_the_thread_count(rng, make_inputs):
    spec = (3, 6, 20, 2)
    terms = make_inputs(3, n_pde=150, n_data=70, n_bc=90, kappa="array", alpha="array")
    theta = _theta(spec, rng)
    ws = _ws(spec)
    v = rng.normal(size=theta.size)
    w = rng.normal(size=2 * (150 + 70 + 90))
    n = helmpinn.get_num_threads()
    try:
        results = []
        for threads in (1, 2, 3):
            helmpinn.set_num_threads(threads)
            results.append((ws.jacobian(theta, **terms), ws.jvp(theta, v, **terms),
                            ws.vjp(theta, w, **terms), ws.residuals(theta, **terms)))
    finally:
        helmpinn.set_num_threads(n)
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(a, b)


def test_errors_name_the_argument(rng, make_inputs):
    spec = (2, 4, 6, 2)
    terms = make_inputs(2, n_pde=5, n_data=3)
    theta = _theta(spec, rng)
    ws = _ws(spec)
    R_ = 16
    with pytest.raises(ValueError, match=r"rows: expected 0 <= start <= stop <= R = 16"):
        ws.jacobian(theta, rows=(3, 17), **terms)
    with pytest.raises(ValueError, match="rows: expected"):
        ws.jacobian(theta, rows=(5, 4), **terms)
    with pytest.raises(TypeError, match="rows: expected None or a pair"):
        ws.jacobian(theta, rows="all", **terms)
    with pytest.raises(ValueError, match=r"out: expected a float64 array of shape \(3, 118\), got shape \(2, 118\)"):
        ws.jacobian(theta, rows=(0, 3), out=np.zeros((2, theta.size)), **terms)
    with pytest.raises(ValueError, match=r"v: expected a float64 array of shape \(118,\), the number of parameters, got shape \(119,\)"):
        ws.jvp(theta, np.zeros(theta.size + 1), **terms)
    with pytest.raises(ValueError, match=r"w: expected a float64 array of shape \(16,\), R = 2 \(N_pde \+ N_data \+ N_bc\), got shape \(17,\)"):
        ws.vjp(theta, np.zeros(R_ + 1), **terms)
    with pytest.raises(TypeError, match="unexpected keyword argument 'x_pdf'"):
        ws.residuals(theta, x_pdf=terms["x_pde"])
    with pytest.raises(ValueError, match=r"counts\['pde'\]: expected an integer >= the pde points"):
        ws.residuals(theta, counts={"pde": 4}, **terms)
    with pytest.raises(ValueError, match="counts: unknown term 'bcs'"):
        ws.residuals(theta, counts={"bcs": 4}, **terms)
    with pytest.raises(ValueError, match=r"w_data must be >= 0"):
        ws.residuals(theta, **{**terms, "w_data": -1.0})
    with pytest.raises(ValueError, match="grad_kappa: given without x_pde"):
        ws.value_and_grad(theta, np.zeros_like(theta), grad_kappa=np.zeros(3),
                          x_data=terms["x_data"], y=terms["y"])
    with pytest.raises(ValueError, match="out: must not share memory with the workspace's own cache"):
        ws.jvp(theta, np.ones_like(theta), out=ws.grad[:R_], **terms)
    before = theta.copy()
    with pytest.raises(ValueError, match="out.*params"):
        ws.residuals(theta, out=theta[:R_], **terms)
    np.testing.assert_array_equal(theta, before)
