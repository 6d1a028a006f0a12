"""ModelSpec and its flat layout, init_params, and the Workspace's zero-copy views
(shared with the C++ buffers, valid across calls), zero_grad, and its stream caches."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import helmpinn
import reference as R


# ------------------------------------------------------------------ ModelSpec and the layout

def test_spec_layout_matches_documented_order(spec_tuple):
    spec = helmpinn.ModelSpec(*spec_tuple)
    d, m, hdim, L = spec_tuple
    assert (spec.in_dim, spec.ff_dim, spec.hidden_dim, spec.num_hidden_layers) == spec_tuple
    assert spec.num_layers == L + 1
    assert spec.num_params == R.num_params(spec_tuple)
    got = [(name, tuple(shape), int(off)) for name, shape, off in spec.layout()]
    assert got == R.layout(spec_tuple)


def test_spec_layout_deep():
    spec = helmpinn.ModelSpec(3, 5, 7, 4)
    names = [name for name, _, _ in spec.layout()]
    assert names == ["B", "W0", "b0", "W1", "b1", "W2", "b2", "W3", "b3", "W4", "b4"]
    assert [(n, tuple(s), o) for n, s, o in spec.layout()] == R.layout((3, 5, 7, 4))
    assert spec.num_params == 15 + (70 + 7) + 3 * (49 + 7) + (14 + 2)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_spec_views_are_zero_copy(spec_tuple, dtype):
    spec = helmpinn.ModelSpec(*spec_tuple)
    theta = np.arange(spec.num_params, dtype=dtype)
    views = spec.views(theta)
    ref = R.unpack(theta, spec_tuple)
    assert list(views) == [name for name, _, _ in R.layout(spec_tuple)]
    for name, v in views.items():
        assert v.dtype == dtype
        assert np.shares_memory(v, theta), name
        np.testing.assert_array_equal(v, ref[name])
    views["W1"][0, 0] = -5
    assert theta[R.layout(spec_tuple)[3][2]] == -5


def test_spec_equality_pickle_and_flops():
    a, b = helmpinn.ModelSpec(2, 16, 64, 3), helmpinn.ModelSpec(2, 16, 64, 3)
    assert a == b and not (a == helmpinn.ModelSpec(2, 16, 32, 3))
    c = pickle.loads(pickle.dumps(a))
    assert c == a and c.num_params == a.num_params
    # MATH.md: 6 (streams) (2mH + (L-1)H^2 + 2H)
    assert a.flops_per_point(4) == pytest.approx(6 * 4 * (2 * 16 * 64 + 2 * 64 * 64 + 2 * 64))
    spec = helmpinn.ModelSpec(1, 16, 64, 3)
    assert spec.flops_per_point(3) == pytest.approx(187e3, rel=0.01)  # MATH.md's example


# ------------------------------------------------------------------ init_params

def test_init_params_distribution_and_seed():
    spec = helmpinn.ModelSpec(3, 1024, 64, 2)
    theta = helmpinn.init_params(spec, dtype="float64", seed=7, fourier_sigma=2.5)
    assert theta.dtype == np.float64 and theta.shape == (spec.num_params,)
    assert theta.flags.c_contiguous
    v = R.unpack(theta, (3, 1024, 64, 2))
    for name, arr in v.items():
        if name.startswith("b"):
            np.testing.assert_array_equal(arr, 0.0)
        elif name.startswith("W"):
            n_out, n_in = arr.shape
            std = np.sqrt(2.0 / (n_in + n_out))            # Glorot normal
            assert abs(arr.std() / std - 1) < (0.05 if arr.size > 1000 else 0.35), name
            assert abs(arr.mean()) < 5 * std / np.sqrt(arr.size), name
    B = v["B"]
    assert abs(B.std() / 2.5 - 1) < 0.08 and abs(B.mean()) < 5 * 2.5 / np.sqrt(B.size)
    # same seed, same array; another seed, another array
    np.testing.assert_array_equal(theta, helmpinn.init_params(spec, dtype="float64", seed=7,
                                                              fourier_sigma=2.5))
    other = helmpinn.init_params(spec, dtype="float64", seed=8, fourier_sigma=2.5)
    assert not np.array_equal(theta, other)
    t32 = helmpinn.init_params(spec, dtype="float32", seed=7, fourier_sigma=2.5)
    assert t32.dtype == np.float32 and t32.shape == theta.shape
    # sigma scales B only
    t1 = helmpinn.init_params(spec, dtype="float64", seed=7, fourier_sigma=1.0)
    b_size = 3 * 1024
    assert abs(R.unpack(t1, (3, 1024, 64, 2))["B"].std() - 1.0) < 0.08
    assert abs(theta[:b_size].std() / t1[:b_size].std() - 2.5) < 0.25


# ------------------------------------------------------------------ Workspace views

def test_workspace_properties(spec_tuple):
    spec = helmpinn.ModelSpec(*spec_tuple)
    ws = helmpinn.Workspace(spec, 24, dtype="float64")
    assert ws.spec == spec
    assert ws.batch_size == 24
    assert ws.dtype == np.dtype(np.float64)
    assert ws.device == "cpu"
    assert ws.grad.shape == (spec.num_params,)
    assert ws.memory_bytes >= ws.grad.nbytes + ws.fourier_streams.nbytes + sum(
        z.nbytes for z in ws.z_streams)
    d, m, hdim, L = spec_tuple
    assert ws.fourier_streams.shape == (d + 2, 24, 2 * m)
    assert [z.shape for z in ws.z_streams] == [(d + 2, 24, hdim)] * L + [(d + 2, 24, 2)]
    assert [h.shape for h in ws.h_streams] == [(d + 2, 24, hdim)] * L + [(d + 2, 24, 2)]
    assert ws.x_input.shape == (24, d) and ws.du_dx.shape == (24, d, 2)
    assert ws.dB.shape == (d, m)
    default = helmpinn.Workspace(spec)
    assert default.batch_size == 4096 and default.dtype == np.dtype(np.float32)
    assert default.device == "cpu" and default.grad.dtype == np.float32


def test_views_share_memory_and_stay_valid(spec_tuple, rng):
    spec = helmpinn.ModelSpec(*spec_tuple)
    d, m, hdim, L = spec_tuple
    theta = R.random_params(spec_tuple, rng)
    n = 11
    ws = helmpinn.Workspace(spec, 16, dtype="float64")
    # take the views once, before any computation
    z, h, ff, xin = ws.z, ws.h, ws.fourier_features, ws.x_input
    du, lap, zs, fs = ws.du_dx, ws.d2u_dx2, ws.z_streams, ws.fourier_streams
    mem = ws.memory_bytes
    for _ in range(2):
        x = rng.uniform(-1, 1, (n, d))
        u, gu, lu = ws.forward(theta, x, 2)
        phi, zr, hr = R.layer_values(theta, spec_tuple, x)
        ur, gur, lur = R.forward(theta, spec_tuple, x, 2)
        # the views taken before still hold the newest chunk
        np.testing.assert_array_equal(xin[:n], x)
        assert R.rel_err(ff[:n], phi) < 1e-13
        for l in range(L + 1):
            assert R.rel_err(z[l][:n], zr[l]) < 1e-13
            assert R.rel_err(h[l][:n], hr[l]) < 1e-13
        assert R.rel_err(du[:n], gur) < 1e-12
        assert R.rel_err(lap[:n], lur) < 1e-12
        np.testing.assert_array_equal(du[:n], gu)
        np.testing.assert_array_equal(lap[:n], lu)
        # stream caches: value, d partials, Laplacian
        assert R.rel_err(fs[0, :n], phi) < 1e-13
        np.testing.assert_array_equal(zs[L][0, :n], u)
        for i in range(d):
            np.testing.assert_array_equal(zs[L][1 + i, :n], gu[:, i, :])
        np.testing.assert_array_equal(zs[L][d + 1, :n], lu)
        for l in range(L):
            np.testing.assert_array_equal(ws.h_streams[l][0, :n], h[l][:n])
    # new property reads are views of the same memory
    for a, b in [(ws.z[0], z[0]), (ws.h[L], h[L]), (ws.fourier_features, ff), (ws.x_input, xin),
                 (ws.du_dx, du), (ws.d2u_dx2, lap), (ws.z_streams[1], zs[1])]:
        assert np.shares_memory(a, b)
    assert np.shares_memory(ws.z[L], ws.z_streams[L]) and np.shares_memory(ws.h[0], ws.h_streams[0])
    assert ws.memory_bytes == mem


def test_views_change_with_new_forward(rng):
    spec_tuple = (2, 3, 5, 2)
    spec = helmpinn.ModelSpec(*spec_tuple)
    theta = R.random_params(spec_tuple, rng)
    ws = helmpinn.Workspace(spec, 8, dtype="float64")
    h0 = ws.h[0]
    ws.forward(theta, rng.uniform(-1, 1, (8, 2)))
    before = h0.copy()
    x2 = rng.uniform(-1, 1, (8, 2))
    ws.forward(theta, x2)
    assert not np.array_equal(h0, before)
    assert R.rel_err(h0, R.layer_values(theta, spec_tuple, x2)[2][0]) < 1e-13


def test_caches_hold_last_chunk(rng):
    spec_tuple = (1, 4, 8, 2)
    spec = helmpinn.ModelSpec(*spec_tuple)
    theta = R.random_params(spec_tuple, rng)
    ws = helmpinn.Workspace(spec, 8, dtype="float64")
    x = rng.uniform(-1, 1, (21, 1))     # chunks of 8, 8, 5
    ws.forward(theta, x, 2)
    np.testing.assert_array_equal(ws.x_input[:5], x[16:])
    _, gu, lu = R.forward(theta, spec_tuple, x[16:], 2)
    assert R.rel_err(ws.du_dx[:5], gu) < 1e-12 and R.rel_err(ws.d2u_dx2[:5], lu) < 1e-12


def test_gradient_views_follow_flat_layout_and_zero_grad(spec_tuple):
    spec = helmpinn.ModelSpec(*spec_tuple)
    ws = helmpinn.Workspace(spec, 4, dtype="float64")
    grad = ws.grad
    dW, db, dB = ws.dW, ws.db, ws.dB
    assert len(dW) == len(db) == spec.num_layers
    for arr in [*dW, *db, dB]:
        assert np.shares_memory(arr, grad)
    grad[:] = np.arange(spec.num_params, dtype=np.float64) + 1.0
    ref = R.unpack(grad.copy(), spec_tuple)
    np.testing.assert_array_equal(dB, ref["B"])
    for l in range(spec.num_layers):
        np.testing.assert_array_equal(dW[l], ref[f"W{l}"])
        np.testing.assert_array_equal(db[l], ref[f"b{l}"])
    ws.zero_grad()
    # zeroed in place: the views taken before see the zeros, and no new buffer was made
    np.testing.assert_array_equal(grad, 0.0)
    for arr in [*dW, *db, dB]:
        np.testing.assert_array_equal(arr, 0.0)
    assert np.shares_memory(ws.grad, grad) and np.shares_memory(ws.dW[0], dW[0])


@pytest.mark.parametrize("derivatives", [0, 1, 2])
def test_forward_outputs_in_place_and_chunked(spec_tuple, rng, derivatives):
    spec = helmpinn.ModelSpec(*spec_tuple)
    d = spec_tuple[0]
    theta = R.random_params(spec_tuple, rng)
    n = 37
    x = rng.uniform(-1, 1, (n, d))
    ws = helmpinn.Workspace(spec, 16, dtype="float64")   # 3 chunks
    ref = R.forward(theta, spec_tuple, x, derivatives)
    ref = ref if isinstance(ref, tuple) else (ref,)
    outs = [np.full((n, 2), np.nan), np.full((n, d, 2), np.nan), np.full((n, 2), np.nan)]
    kw = dict(zip(["u", "grad_u", "lap_u"], outs[: derivatives + 1]))
    res = ws.forward(theta, x, derivatives, **kw)
    res = res if isinstance(res, tuple) else (res,)
    assert len(res) == derivatives + 1
    for r, o, e in zip(res, outs, ref):
        assert r is o
        assert R.rel_err(o, e) < 1e-12
    # allocating form gives the same numbers
    res2 = ws.forward(theta, x, derivatives)
    res2 = res2 if isinstance(res2, tuple) else (res2,)
    for r, e in zip(res2, res):
        np.testing.assert_array_equal(r, e)
