"""Workspace.forward (u, grad u, Laplacian u) and Workspace.value_and_grad (the whole
Helmholtz PINN loss and its exact gradient) against the float64 reference and finite
differences, in 1, 2 and 3 dimensions, plus float32, thread-count and chunking agreement."""

from __future__ import annotations

import os

import numpy as np
import pytest

import helmpinn
import reference as R

GRAD_TOL = 1e-7   # float64 analytic gradient against central finite differences

# name -> keyword arguments of make_inputs
CASES = {
    "pde_scalar_kappa_no_f": dict(n_pde=12, kappa="scalar", f=False),
    "pde_array_kappa_f": dict(n_pde=12, kappa="array", f=True),
    "data": dict(n_data=10),
    "bc_scalar_alpha_no_g": dict(n_bc=11, alpha="scalar", g=False),
    "bc_sommerfeld_g": dict(n_bc=11, alpha="sommerfeld", g=True),
    "bc_array_alpha_g": dict(n_bc=11, alpha="array", g=True),
    "all_scalar": dict(n_pde=9, n_data=7, n_bc=8, kappa="scalar", alpha="scalar", f=False,
                       g=False),
    "all_array_weighted": dict(n_pde=9, n_data=7, n_bc=8, kappa="array", alpha="array",
                               weights=(0.7, 1.9, 0.35)),
}


def _ws(spec_tuple, batch=64, dtype="float64"):
    return helmpinn.Workspace(helmpinn.ModelSpec(*spec_tuple), batch, dtype=dtype)


@pytest.fixture
def restore_threads():
    n = helmpinn.get_num_threads()
    yield
    helmpinn.set_num_threads(n)


# ------------------------------------------------------------------ forward streams

def test_forward_matches_reference_and_fd_in_x(spec_tuple, rng):
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng, fourier_sigma=0.7)
    x = rng.uniform(-1, 1, (23, d))
    ws = _ws(spec_tuple, batch=64)
    u, gu, lu = ws.forward(theta, x, 2)
    assert u.shape == (23, 2) and gu.shape == (23, d, 2) and lu.shape == (23, 2)
    assert u.dtype == gu.dtype == lu.dtype == np.float64
    ur, gur, lur = R.forward(theta, spec_tuple, x, 2)
    assert R.rel_err(u, ur) < 1e-13
    assert R.rel_err(gu, gur) < 1e-12
    assert R.rel_err(lu, lur) < 1e-12
    # finite differences of the core's own u in x
    ufun = lambda xx: ws.forward(theta, np.ascontiguousarray(xx), 0).copy()
    assert R.rel_err(gu, R.fd_x_grad(ufun, x)) < 1e-9
    assert R.rel_err(lu, R.fd_x_lap(ufun, x)) < 1e-6
    # derivatives=1 gives the same u and grad u
    u1, gu1 = ws.forward(theta, x, 1)
    np.testing.assert_array_equal(u1, u)
    np.testing.assert_array_equal(gu1, gu)
    np.testing.assert_array_equal(ws.forward(theta, x, 0), u)


# ------------------------------------------------------------------ value_and_grad vs FD

def _check_value_and_grad(spec_tuple, theta, terms, ws=None):
    ws = ws or _ws(spec_tuple)
    grad = np.full(theta.size, 1e3)            # overwritten, not accumulated into
    val = ws.value_and_grad(theta, grad, **terms)
    assert isinstance(val, float)
    ref_total, ref_parts = R.loss_terms(theta, spec_tuple, **terms)
    assert val == pytest.approx(ref_total, rel=1e-12)
    g_fd = R.loss_grad_fd(theta, spec_tuple, **terms)
    err = R.rel_err(grad, g_fd)
    assert err < GRAD_TOL, f"relative gradient error {err:.3e}"
    last = ws.last_loss
    assert last["total"] == pytest.approx(val, rel=1e-14)
    for key in ("pde", "data", "bc"):
        assert last[key] == pytest.approx(ref_parts[key], rel=1e-12, abs=0.0), key
    return val, grad


@pytest.mark.parametrize("case", list(CASES))
def test_value_and_grad_matches_fd(spec_tuple, rng, make_inputs, case):
    theta = R.random_params(spec_tuple, rng)
    terms = make_inputs(spec_tuple[0], **CASES[case])
    _check_value_and_grad(spec_tuple, theta, terms)


@pytest.mark.parametrize("case", ["pde_array_kappa_f", "bc_array_alpha_g", "all_array_weighted"])
def test_frozen_fourier(spec_tuple, rng, make_inputs, case):
    d, m = spec_tuple[:2]
    theta = R.random_params(spec_tuple, rng)
    terms = make_inputs(d, **CASES[case])
    ws = _ws(spec_tuple)
    _, g_train = _check_value_and_grad(spec_tuple, theta, terms, ws)
    _, g_frozen = _check_value_and_grad(spec_tuple, theta, dict(terms, train_fourier=False), ws)
    nb = d * m
    assert np.all(g_frozen[:nb] == 0.0)          # exactly zero, not small
    assert np.any(g_train[:nb] != 0.0)
    assert R.rel_err(g_frozen[nb:], g_train[nb:]) < 1e-13


def test_sommerfeld_scalar_equals_per_point(rng, make_inputs):
    spec_tuple = (2, 4, 6, 2)
    theta = R.random_params(spec_tuple, rng)
    terms = make_inputs(2, n_bc=13, alpha="sommerfeld")
    k = -terms["alpha_bc"].imag
    ws = _ws(spec_tuple)
    g1, g2 = np.empty(theta.size), np.empty(theta.size)
    v1 = ws.value_and_grad(theta, g1, **terms)
    v2 = ws.value_and_grad(theta, g2, **dict(terms, alpha_bc=np.tile([0.0, -k], (13, 1))))
    assert v1 == pytest.approx(v2, rel=1e-14)
    assert R.rel_err(g1, g2) < 1e-14


def test_last_loss_breakdown(rng, make_inputs):
    spec_tuple = (3, 3, 6, 2)
    theta = R.random_params(spec_tuple, rng)
    ws = _ws(spec_tuple)
    grad = np.empty(theta.size)
    terms = make_inputs(3, **CASES["all_array_weighted"])
    val = ws.value_and_grad(theta, grad, **terms)
    last = dict(ws.last_loss)
    assert set(last) >= {"total", "pde", "data", "bc"}
    _, parts = R.loss_terms(theta, spec_tuple, **terms)
    for key in ("pde", "data", "bc"):
        assert last[key] == pytest.approx(parts[key], rel=1e-12)   # unweighted means
    assert last["total"] == pytest.approx(
        terms["w_pde"] * last["pde"] + terms["w_data"] * last["data"] + terms["w_bc"] * last["bc"],
        rel=1e-13)
    assert last["total"] == pytest.approx(val, rel=1e-14)
    # absent terms are 0 in the breakdown
    val = ws.value_and_grad(theta, grad, x_data=terms["x_data"], y=terms["y"])
    last = ws.last_loss
    assert last["pde"] == 0.0 and last["bc"] == 0.0
    assert last["data"] == pytest.approx(val, rel=1e-14)


# ------------------------------------------------------------------ float32, threads, chunks

def test_float32_matches_float64(spec_tuple, rng, make_inputs, cast):
    theta32 = R.random_params(spec_tuple, rng).astype(np.float32)
    theta64 = theta32.astype(np.float64)
    terms64 = cast(make_inputs(spec_tuple[0], **CASES["all_array_weighted"]), np.float32)
    terms64 = cast(terms64, np.float64)          # identical values in both precisions
    terms32 = cast(terms64, np.float32)
    g64, g32 = np.empty(theta64.size), np.empty(theta32.size, dtype=np.float32)
    v64 = _ws(spec_tuple).value_and_grad(theta64, g64, **terms64)
    v32 = _ws(spec_tuple, dtype="float32").value_and_grad(theta32, g32, **terms32)
    assert abs(v32 - v64) <= 1e-4 * abs(v64)
    err = R.rel_err(g32, g64)
    assert err < 1e-4, f"float32 relative gradient error {err:.3e}"
    # forward too
    x = terms64["x_pde"]
    f64 = _ws(spec_tuple).forward(theta64, x, 2)
    f32 = _ws(spec_tuple, dtype="float32").forward(theta32, x.astype(np.float32), 2)
    for a, b in zip(f32, f64):
        assert a.dtype == np.float32 and R.rel_err(a, b) < 1e-4


def _big_terms(make_inputs, d):
    return make_inputs(d, n_pde=700, n_data=300, n_bc=250, kappa="array", alpha="array",
                       weights=(0.5, 2.0, 0.8))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_bitwise_identical_for_1_and_2_threads(spec_tuple, rng, make_inputs, cast, dtype,
                                               restore_threads):
    theta = R.random_params(spec_tuple, rng).astype(dtype)
    terms = cast(_big_terms(make_inputs, spec_tuple[0]), dtype)
    ws = _ws(spec_tuple, batch=1024, dtype=dtype)
    results = []
    for threads in (1, 2, 1, 2):
        helmpinn.set_num_threads(threads)
        assert helmpinn.get_num_threads() == (threads if helmpinn.has_openmp() else 1)
        grad = np.empty(theta.size, dtype=dtype)
        val = ws.value_and_grad(theta, grad, **terms)
        fwd = ws.forward(theta, terms["x_pde"], 2)
        results.append((val, grad, fwd))
    base_val, base_grad, base_fwd = results[0]
    for val, grad, fwd in results[1:]:
        assert val == base_val
        np.testing.assert_array_equal(grad, base_grad)
        for a, b in zip(fwd, base_fwd):
            np.testing.assert_array_equal(a, b)


def test_thread_count_changed_after_workspace_creation(rng, make_inputs, restore_threads):
    """The CPU backend keeps per-thread scratch sized when the Workspace is built; raising the
    thread count past it afterwards (or lowering it) must not change a bit of the result."""
    if not helmpinn.has_openmp():
        pytest.skip("built without OpenMP: one thread only")
    spec_tuple = (2, 6, 16, 2)
    theta = R.random_params(spec_tuple, rng)
    terms = _big_terms(make_inputs, 2)
    many = 3 * os.cpu_count() + 1
    results = []
    for threads_at_build, threads_at_call in ((1, 1), (1, many), (many, 2), (many, many)):
        helmpinn.set_num_threads(threads_at_build)
        ws = _ws(spec_tuple, batch=512)
        helmpinn.set_num_threads(threads_at_call)
        grad = np.empty(theta.size)
        results.append((ws.value_and_grad(theta, grad, **terms), grad))
    for val, grad in results[1:]:
        assert val == results[0][0]
        np.testing.assert_array_equal(grad, results[0][1])


def test_chunking_agrees(spec_tuple, rng, make_inputs):
    theta = R.random_params(spec_tuple, rng)
    terms = make_inputs(spec_tuple[0], n_pde=300, n_data=300, n_bc=300, kappa="array",
                        alpha="array", weights=(0.5, 2.0, 0.8))
    out = {}
    for batch in (512, 64, 7):
        grad = np.empty(theta.size)
        ws = _ws(spec_tuple, batch=batch)
        mem = ws.memory_bytes
        val = ws.value_and_grad(theta, grad, **terms)
        assert ws.memory_bytes == mem          # 900 points through a fixed-size workspace
        out[batch] = (val, grad)
    v_ref, g_ref = out[512]
    assert v_ref == pytest.approx(R.loss(theta, spec_tuple, **terms), rel=1e-12)
    for batch in (64, 7):
        val, grad = out[batch]
        # the CPU backend's value_and_grad does not chunk: batch_size changes no bit of it
        assert val == v_ref
        np.testing.assert_array_equal(grad, g_ref)
    # forward is point-wise: chunking changes nothing
    x = terms["x_pde"]
    f1 = _ws(spec_tuple, batch=512).forward(theta, x, 2)
    f2 = _ws(spec_tuple, batch=64).forward(theta, x, 2)
    for a, b in zip(f1, f2):
        np.testing.assert_array_equal(a, b)


def test_gradient_does_not_depend_on_previous_calls(rng, make_inputs):
    """grad is overwritten every call; nothing leaks from an earlier call with other terms."""
    spec_tuple = (2, 4, 6, 2)
    theta = R.random_params(spec_tuple, rng)
    ws = _ws(spec_tuple, batch=16)
    a = make_inputs(2, **CASES["all_array_weighted"])
    b = make_inputs(2, n_data=5)
    g1, g2, g3 = (np.empty(theta.size) for _ in range(3))
    v1 = ws.value_and_grad(theta, g1, **b)
    ws.value_and_grad(theta, g2, **a)
    v3 = ws.value_and_grad(theta, g3, **b)
    assert v1 == v3
    np.testing.assert_array_equal(g1, g3)


# ------------------------------------------------------------------ other shapes and scalars

@pytest.mark.parametrize("spec_tuple", [(2, 5, 7, 1), (3, 2, 4, 4), (1, 8, 5, 2), (2, 1, 3, 3)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("n", [1, 33])
def test_other_shapes_all_terms(spec_tuple, rng, make_inputs, n):
    """One hidden layer, four, 2m wider than H, a single frequency; one point and a tile + 1."""
    theta = R.random_params(spec_tuple, rng)
    terms = make_inputs(spec_tuple[0], n_pde=n, n_data=n, n_bc=n, kappa="array", alpha="array",
                        weights=(0.6, 1.1, 1.7))
    _check_value_and_grad(spec_tuple, theta, terms, _ws(spec_tuple, batch=16))
    x = terms["x_pde"]
    for got, exp in zip(_ws(spec_tuple, batch=16).forward(theta, x, 2),
                        R.forward(theta, spec_tuple, x, 2)):
        assert R.rel_err(got, exp) < 1e-12


def test_scalar_argument_forms(rng, make_inputs):
    """kappa as a NumPy scalar, alpha as a real number: same as the Python float / complex."""
    spec_tuple = (2, 4, 6, 2)
    theta = R.random_params(spec_tuple, rng)
    terms = make_inputs(2, n_pde=8, n_bc=8, kappa="scalar", alpha="scalar")
    ws = _ws(spec_tuple)
    g = [np.empty(theta.size) for _ in range(4)]
    v0 = ws.value_and_grad(theta, g[0], **dict(terms, alpha_bc=0.5 + 0j))
    v1 = ws.value_and_grad(theta, g[1], **dict(terms, alpha_bc=0.5))
    v2 = ws.value_and_grad(theta, g[2], **dict(terms, alpha_bc=0.5,
                                                   kappa=np.float64(terms["kappa"])))
    v3 = ws.value_and_grad(theta, g[3], **dict(terms, alpha_bc=np.tile([0.5, 0.0], (8, 1)),
                                                   kappa=np.full(8, terms["kappa"])))
    assert v0 == v1 == v2
    assert v3 == pytest.approx(v0, rel=1e-14)
    np.testing.assert_array_equal(g[0], g[1])
    np.testing.assert_array_equal(g[0], g[2])
    assert R.rel_err(g[3], g[0]) < 1e-14
    assert v0 == pytest.approx(R.loss(theta, spec_tuple, **dict(terms, alpha_bc=0.5)), rel=1e-12)
