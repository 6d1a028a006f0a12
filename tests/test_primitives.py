"""The seed's backward primitives (mse_backward, layer_backward, fourier_backward) from
Python: the seed's own two tests, float64 finite-difference checks for d = 1, 2, 3, out= writing
in place, float32 against float64, and a full data-loss backward chained from the primitives on
the Workspace caches, checked against finite differences and against Workspace.value_and_grad."""

from __future__ import annotations

import numpy as np
import pytest

import helmpinn
import reference as R

F64 = np.float64


# ------------------------------------------------------------------ the seed's two tests

@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_seed_gradient_workspace_creation(dtype):
    spec = helmpinn.ModelSpec(1, 16, 64, 3)
    ws = helmpinn.Workspace(spec, 32, dtype=dtype)
    assert len(ws.z) == 4  # 3 hidden + 1 output
    assert len(ws.h) == 4
    assert len(ws.dW) == 4
    assert len(ws.db) == 4
    assert ws.dW[0].shape == (64, 32)  # hidden x 2 ff_dim
    assert ws.dW[1].shape == (64, 64)  # hidden x hidden
    assert ws.dW[2].shape == (64, 64)
    assert ws.dW[3].shape == (2, 64)   # output x hidden
    assert [b.shape for b in ws.db] == [(64,), (64,), (64,), (2,)]
    assert ws.dB.shape == (1, 16)
    assert [z.shape for z in ws.z] == [(32, 64)] * 3 + [(32, 2)]
    assert [h.shape for h in ws.h] == [(32, 64)] * 3 + [(32, 2)]
    assert ws.fourier_features.shape == (32, 32)
    assert ws.x_input.shape == (32, 1)
    assert ws.du_dx.shape == (32, 1, 2)
    assert ws.d2u_dx2.shape == (32, 2)
    for arr in [*ws.z, *ws.h, *ws.dW, *ws.db, ws.dB, ws.fourier_features, ws.x_input,
                ws.du_dx, ws.d2u_dx2, ws.grad]:
        assert arr.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_seed_mse_backward(dtype):
    pred = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=dtype)
    target = np.zeros((2, 2), dtype=dtype)
    grad = helmpinn.mse_backward(pred, target)
    # dL/dpred = (2/2) * (pred - 0) = pred
    assert grad.dtype == dtype and grad.shape == (2, 2)
    assert abs(grad[0, 0] - 1.0) < 1e-5
    assert abs(grad[0, 1] - 2.0) < 1e-5
    np.testing.assert_allclose(grad, [[1.0, 2.0], [3.0, 4.0]], rtol=0, atol=1e-6)


# ------------------------------------------------------------------ finite differences, float64

def test_mse_backward_fd(rng):
    n = 11
    pred, target = rng.normal(size=(n, 2)), rng.normal(size=(n, 2))
    g = helmpinn.mse_backward(pred, target)
    fun = lambda p: np.sum((p.reshape(-1, n, 2) - target) ** 2, axis=(1, 2)) / n
    assert R.rel_err(g, R.fd_grad(fun, pred.ravel()).reshape(n, 2)) < 1e-10
    np.testing.assert_allclose(g, 2.0 / n * (pred - target), rtol=1e-15, atol=0)


def _layer_inputs(rng, n, n_in, n_out, tanh):
    W = rng.normal(0, 1 / np.sqrt(n_in), (n_out, n_in))
    b = rng.normal(0, 0.3, n_out)
    h_prev = rng.uniform(-1, 1, (n, n_in))
    z = h_prev @ W.T + b
    h = np.tanh(z) if tanh else z
    G = rng.normal(size=(n, n_out))      # dL/dh
    return W, b, h_prev, h, G


@pytest.mark.parametrize("tanh", [True, False], ids=["tanh", "linear"])
def test_layer_backward_fd(spec_tuple, rng, tanh):
    d, m, hdim, n_layers = spec_tuple
    n = 9
    for n_in, n_out in [(2 * m, hdim), (hdim, hdim), (hdim, 2)]:
        W, b, h_prev, h, G = _layer_inputs(rng, n, n_in, n_out, tanh)
        dW, db, dh_prev = helmpinn.layer_backward(G, h, h_prev, W, tanh)
        assert dW.shape == (n_out, n_in) and db.shape == (n_out,) and dh_prev.shape == (n, n_in)
        sizes = [W.size, b.size, h_prev.size]

        def fun(v):  # L = sum(G * act(h_prev W^T + b)), v = [W | b | h_prev] batched
            Wk = v[:, :sizes[0]].reshape(-1, n_out, n_in)
            bk = v[:, sizes[0]:sizes[0] + sizes[1]]
            hk = v[:, sizes[0] + sizes[1]:].reshape(-1, n, n_in)
            zk = np.einsum("kni,koi->kno", hk, Wk) + bk[:, None, :]
            return np.sum(G * (np.tanh(zk) if tanh else zk), axis=(1, 2))

        g = R.fd_grad(fun, np.concatenate([W.ravel(), b, h_prev.ravel()]))
        gW, gb, gh = np.split(g, np.cumsum(sizes)[:-1])
        assert R.rel_err(dW, gW.reshape(W.shape)) < 1e-9
        assert R.rel_err(db, gb) < 1e-9
        assert R.rel_err(dh_prev, gh.reshape(h_prev.shape)) < 1e-9


def test_fourier_backward_fd(spec_tuple, rng):
    d, m = spec_tuple[:2]
    n = 10
    x = rng.uniform(-1, 1, (n, d))
    B = rng.normal(0, 0.7, (d, m))
    G = rng.normal(size=(n, 2 * m))
    dB = helmpinn.fourier_backward(G, x, B)
    assert dB.shape == (d, m)

    def fun(v):
        s = 2 * np.pi * np.einsum("ni,kim->knm", x, v.reshape(-1, d, m))
        return np.sum(G * np.concatenate([np.sin(s), np.cos(s)], -1), axis=(1, 2))

    assert R.rel_err(dB, R.fd_grad(fun, B.ravel()).reshape(d, m)) < 1e-9


# ------------------------------------------------------------------ out=: in place, no copy

def test_mse_backward_out_in_place(rng):
    pred, target = rng.normal(size=(6, 2)), rng.normal(size=(6, 2))
    out = np.full((6, 2), np.nan)
    res = helmpinn.mse_backward(pred, target, out=out)
    assert res is out
    assert np.shares_memory(res, out)
    np.testing.assert_array_equal(out, helmpinn.mse_backward(pred, target))


@pytest.mark.parametrize("tanh", [True, False], ids=["tanh", "linear"])
def test_layer_backward_out_in_place(rng, tanh):
    W, b, h_prev, h, G = _layer_inputs(rng, 7, 6, 5, tanh)
    ref = helmpinn.layer_backward(G, h, h_prev, W, tanh)
    out = (np.full((5, 6), np.nan), np.full(5, np.nan), np.full((7, 6), np.nan))
    res = helmpinn.layer_backward(G, h, h_prev, W, tanh, out=out)
    assert len(res) == 3
    for r, o, e in zip(res, out, ref):
        assert r is o
        np.testing.assert_array_equal(o, e)


def test_fourier_backward_out_in_place(rng):
    x, B, G = rng.uniform(-1, 1, (8, 2)), rng.normal(size=(2, 3)), rng.normal(size=(8, 6))
    out = np.full((2, 3), np.nan)
    res = helmpinn.fourier_backward(G, x, B, out=out)
    assert res is out
    np.testing.assert_array_equal(out, helmpinn.fourier_backward(G, x, B))


def test_out_into_workspace_gradient_views(rng):
    """out= may be the Workspace's own accumulators (views into ws.grad): written in place."""
    spec = helmpinn.ModelSpec(2, 3, 5, 2)
    ws = helmpinn.Workspace(spec, 8, dtype="float64")
    ws.zero_grad()
    W, b, h_prev, h, G = _layer_inputs(rng, 7, 5, 2, False)
    dh = np.empty((7, 5))
    res = helmpinn.layer_backward(G, h, h_prev, W, False, out=(ws.dW[2], ws.db[2], dh))
    assert np.shares_memory(res[0], ws.grad) and np.shares_memory(res[1], ws.grad)
    np.testing.assert_allclose(ws.dW[2], G.T @ h_prev, rtol=1e-13)
    np.testing.assert_allclose(ws.db[2], G.sum(0), rtol=1e-13)
    off = dict((name, o) for name, _, o in spec.layout())
    np.testing.assert_allclose(ws.grad[off["W2"]:off["W2"] + 10], (G.T @ h_prev).ravel(), rtol=1e-13)
    np.testing.assert_array_equal(ws.grad[: off["W2"]], 0.0)


# ------------------------------------------------------------------ float32 against float64

def test_primitives_float32_match_float64(rng):
    f32 = np.float32
    pred, target = rng.normal(size=(9, 2)), rng.normal(size=(9, 2))
    g64 = helmpinn.mse_backward(pred, target)
    g32 = helmpinn.mse_backward(pred.astype(f32), target.astype(f32))
    assert g32.dtype == f32 and R.rel_err(g32, g64) < 1e-6
    for tanh in (True, False):
        W, b, h_prev, h, G = _layer_inputs(rng, 9, 8, 6, tanh)
        r64 = helmpinn.layer_backward(G, h, h_prev, W, tanh)
        r32 = helmpinn.layer_backward(G.astype(f32), h.astype(f32), h_prev.astype(f32),
                                      W.astype(f32), tanh)
        for a, e in zip(r32, r64):
            assert a.dtype == f32 and R.rel_err(a, e) < 1e-5
    x, B, G = rng.uniform(-1, 1, (9, 3)), rng.normal(size=(3, 4)), rng.normal(size=(9, 8))
    dB64 = helmpinn.fourier_backward(G, x, B)
    dB32 = helmpinn.fourier_backward(G.astype(f32), x.astype(f32), B.astype(f32))
    assert dB32.dtype == f32 and R.rel_err(dB32, dB64) < 1e-5


# ------------------------------------------------------------------ chained data-loss backward

def _chain(spec, ws, theta, x, y, n):
    """The seed's data-loss backward, chained from the primitives on the Workspace caches."""
    L = spec.num_hidden_layers
    u = ws.forward(theta, x)
    views = spec.views(theta)
    phi = ws.fourier_features[:n]
    h = [a[:n] for a in ws.h]
    g = helmpinn.mse_backward(u, y)
    grads = {}
    for layer in range(L, -1, -1):
        h_prev = h[layer - 1] if layer > 0 else phi
        dW, db, g = helmpinn.layer_backward(g, h[layer], h_prev, views[f"W{layer}"], layer < L)
        grads[f"W{layer}"], grads[f"b{layer}"] = dW, db
    grads["B"] = helmpinn.fourier_backward(g, x, views["B"])
    flat = np.empty(spec.num_params)
    for name, shape, off in R.layout(spec):
        flat[off:off + int(np.prod(shape))] = grads[name].ravel()
    return u, flat


def test_data_loss_chained_from_primitives(spec_tuple, rng):
    spec = helmpinn.ModelSpec(*spec_tuple)
    theta = R.random_params(spec_tuple, rng)
    n = 13
    x, y = rng.uniform(-1, 1, (n, spec_tuple[0])), rng.normal(size=(n, 2))
    ws = helmpinn.Workspace(spec, 32, dtype="float64")
    u, g_chain = _chain(spec, ws, theta, x, y, n)

    # the caches the chain used are the reference's forward values
    phi, zs, hs = R.layer_values(theta, spec_tuple, x)
    assert R.rel_err(ws.fourier_features[:n], phi) < 1e-13
    assert R.rel_err(ws.x_input[:n], x) == 0.0
    for l in range(spec_tuple[3] + 1):
        assert R.rel_err(ws.z[l][:n], zs[l]) < 1e-13
        assert R.rel_err(ws.h[l][:n], hs[l]) < 1e-13
    assert R.rel_err(u, hs[-1]) < 1e-13

    g_fd = R.loss_grad_fd(theta, spec_tuple, x_data=x, y=y)
    assert R.rel_err(g_chain, g_fd) < 1e-7

    grad = np.full(spec.num_params, 123.0)
    val = ws.value_and_grad(theta, grad, x_data=x, y=y)
    assert val == pytest.approx(R.loss(theta, spec_tuple, x_data=x, y=y), rel=1e-13)
    assert R.rel_err(grad, g_chain) < 1e-12


def test_data_loss_chained_into_workspace_accumulators(rng):
    """The seed's zero-alloc form: every primitive writes into the Workspace's dW, db, dB."""
    spec_tuple = (2, 4, 6, 3)
    spec = helmpinn.ModelSpec(*spec_tuple)
    theta = R.random_params(spec_tuple, rng)
    n = 10
    x, y = rng.uniform(-1, 1, (n, 2)), rng.normal(size=(n, 2))
    ws = helmpinn.Workspace(spec, 16, dtype="float64")
    ws.zero_grad()
    L = spec.num_hidden_layers
    views = spec.views(theta)
    u = ws.forward(theta, x)
    d_loss = np.empty((n, 2))
    g = helmpinn.mse_backward(u, y, out=d_loss)
    for layer in range(L, -1, -1):
        h_prev = ws.h[layer - 1][:n] if layer > 0 else ws.fourier_features[:n]
        dprev = np.empty(h_prev.shape)
        _, _, g = helmpinn.layer_backward(g, ws.h[layer][:n], h_prev, views[f"W{layer}"],
                                          layer < L, out=(ws.dW[layer], ws.db[layer], dprev))
        assert g is dprev
    helmpinn.fourier_backward(g, x, views["B"], out=ws.dB)
    chained = ws.grad.copy()
    assert R.rel_err(chained, R.loss_grad_fd(theta, spec_tuple, x_data=x, y=y)) < 1e-7
    grad = np.empty(spec.num_params)
    ws.value_and_grad(theta, grad, x_data=x, y=y)
    assert R.rel_err(grad, chained) < 1e-12


def test_the_engine_level_is_helmpinn_core_and_the_top_level_keeps_its_names():
    # the seed's primitives have one public home, helmpinn.core; hp answers the same objects for
    # the code written before, but its __all__ (the training layer's names) leaves them out
    import helmpinn as hp
    import helmpinn.core as core
    from helmpinn import _core

    for name in core.__all__:
        assert getattr(core, name) is getattr(_core, name) is getattr(hp, name), name
    seed = {"mse_backward", "layer_backward", "fourier_backward", "adam_step"}
    assert seed <= set(core.__all__)
    assert not seed & set(hp.__all__)
    assert {"ModelSpec", "Workspace", "core", "solve"} <= set(hp.__all__)
