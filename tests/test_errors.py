"""Bad input is refused at the border, before any work, with an error that names the argument:
TypeError for a wrong dtype, ValueError for a wrong shape, layout or value."""

from __future__ import annotations

import numpy as np
import pytest

import helmpinn
import reference as R

SPEC = (2, 3, 5, 2)
N = 6


@pytest.fixture
def setup(rng):
    spec = helmpinn.ModelSpec(*SPEC)
    ws = helmpinn.Workspace(spec, 16, dtype="float64")
    theta = R.random_params(SPEC, rng)
    x = lambda: rng.uniform(-1, 1, (N, 2))
    nrm = rng.normal(size=(N, 2))
    terms = dict(x_pde=x(), kappa=rng.uniform(1, 5, N), f=rng.normal(size=(N, 2)),
                 x_data=x(), y=rng.normal(size=(N, 2)),
                 x_bc=x(), n_bc=nrm / np.linalg.norm(nrm, axis=1, keepdims=True),
                 alpha_bc=rng.normal(size=(N, 2)), g_bc=rng.normal(size=(N, 2)))
    return ws, theta, terms


SENTINEL = 777.0


def _raises(setup, exc, match, *, params=None, grad=None, **changes):
    """value_and_grad with `changes` applied must raise exc matching `match`, leaving grad alone."""
    ws, theta, terms = setup
    grad_arr = np.full(theta.size, SENTINEL) if grad is None else grad
    before = grad_arr.copy()
    kw = dict(terms)
    for k, v in changes.items():
        if v is _DROP:
            kw.pop(k)
        else:
            kw[k] = v
    with pytest.raises(exc, match=match):
        ws.value_and_grad(theta if params is None else params, grad_arr, **kw)
    np.testing.assert_array_equal(grad_arr, before)   # nothing was written: checked first


_DROP = object()


def test_sanity_valid_inputs_work(setup):
    ws, theta, terms = setup
    grad = np.full(theta.size, SENTINEL)
    val = ws.value_and_grad(theta, grad, **terms)
    assert np.isfinite(val) and not np.any(grad == SENTINEL)


# ------------------------------------------------------------------ dtype

@pytest.mark.parametrize("name", ["x_pde", "kappa", "f", "x_data", "y", "x_bc", "n_bc",
                                  "alpha_bc", "g_bc"])
def test_wrong_dtype_names_argument(setup, name):
    arr = setup[2][name].astype(np.float32)
    _raises(setup, TypeError, rf"\b{name}\b", **{name: arr})


def test_integer_dtype_is_refused(setup):
    _raises(setup, TypeError, r"\by\b", y=np.ones((N, 2), dtype=np.int64))


def test_float32_params_with_float64_workspace(setup):
    ws, theta, terms = setup
    _raises(setup, TypeError, "params", params=theta.astype(np.float32))
    _raises(setup, TypeError, "grad", grad=np.full(theta.size, SENTINEL, dtype=np.float32))


# ------------------------------------------------------------------ shapes

@pytest.mark.parametrize("name", ["x_pde", "x_data", "x_bc", "n_bc"])
def test_wrong_dimension_names_argument(setup, name):
    _raises(setup, ValueError, rf"\b{name}\b", **{name: np.zeros((N, 3))})
    _raises(setup, ValueError, rf"\b{name}\b", **{name: np.zeros(N)})


@pytest.mark.parametrize("name, bad", [("kappa", np.ones(N + 1)), ("kappa", np.ones((N, 1))),
                                       ("f", np.ones((N - 1, 2))), ("f", np.ones((N, 3))),
                                       ("y", np.ones((N + 2, 2))), ("n_bc", np.ones((N - 1, 2))),
                                       ("alpha_bc", np.ones((N + 1, 2))),
                                       ("alpha_bc", np.ones((N, 3))),
                                       ("g_bc", np.ones((N + 1, 2)))])
def test_point_count_mismatch_names_argument(setup, name, bad):
    _raises(setup, ValueError, rf"\b{name}\b", **{name: bad})


@pytest.mark.parametrize("missing", ["y", "x_data", "n_bc", "x_bc", "x_pde"])
def test_half_a_term_names_missing_argument(setup, missing):
    """A term given without one of its required arrays (the others of the term still given)."""
    _raises(setup, ValueError, rf"\b{missing}\b", **{missing: _DROP})


def test_wrong_grad_and_params_length(setup):
    ws, theta, terms = setup
    _raises(setup, ValueError, "grad", grad=np.full(theta.size - 1, SENTINEL))
    _raises(setup, ValueError, "grad", grad=np.full((theta.size, 1), SENTINEL))
    _raises(setup, ValueError, "params", params=np.concatenate([theta, [0.0]]))


# ------------------------------------------------------------------ layout and writability

def test_non_contiguous_arrays(setup):
    ws, theta, terms = setup
    wide = np.zeros((N, 4))
    wide[:, ::2] = terms["x_pde"]
    _raises(setup, ValueError, r"\bx_pde\b", x_pde=wide[:, ::2])
    _raises(setup, ValueError, r"\bf\b", f=np.asfortranarray(terms["f"]))
    kap = np.repeat(terms["kappa"], 2)[::2]
    _raises(setup, ValueError, r"\bkappa\b", kappa=kap)
    _raises(setup, ValueError, "params", params=np.repeat(theta, 2)[::2])
    _raises(setup, ValueError, "grad", grad=np.full(2 * theta.size, SENTINEL)[::2])


def test_read_only_grad(setup):
    ws, theta, terms = setup
    grad = np.full(theta.size, SENTINEL)
    grad.flags.writeable = False
    with pytest.raises((ValueError, TypeError), match="grad"):
        ws.value_and_grad(theta, grad, **terms)
    assert np.all(grad == SENTINEL)


# ------------------------------------------------------------------ check_finite

@pytest.mark.parametrize("name, bad", [("x_pde", np.nan), ("kappa", np.inf), ("f", np.nan),
                                       ("x_data", np.nan), ("y", -np.inf), ("x_bc", np.nan),
                                       ("n_bc", np.nan), ("alpha_bc", np.inf),
                                       ("g_bc", np.nan)])
def test_check_finite_names_the_array(setup, name, bad):
    arr = setup[2][name].copy()
    arr.flat[3] = bad
    _raises(setup, (ValueError, FloatingPointError), rf"\b{name}\b", check_finite=True,
            **{name: arr})


# ------------------------------------------------------------------ forward

def test_forward_errors(rng):
    spec = helmpinn.ModelSpec(*SPEC)
    ws = helmpinn.Workspace(spec, 8, dtype="float64")
    theta = R.random_params(SPEC, rng)
    x = rng.uniform(-1, 1, (N, 2))
    with pytest.raises(ValueError, match=r"\bx\b"):
        ws.forward(theta, np.zeros((N, 3)))
    with pytest.raises(TypeError, match=r"\bx\b"):
        ws.forward(theta, x.astype(np.float32))
    with pytest.raises(TypeError, match="params"):
        ws.forward(theta.astype(np.float32), x)
    with pytest.raises(ValueError, match="params"):
        ws.forward(theta[:-1].copy(), x)
    with pytest.raises(ValueError, match="derivatives"):
        ws.forward(theta, x, 3)
    with pytest.raises(ValueError, match=r"\bx\b"):
        ws.forward(theta, np.asfortranarray(x))
    u = np.full((N + 1, 2), SENTINEL)
    with pytest.raises(ValueError, match=r"\bu\b"):
        ws.forward(theta, x, 0, u=u)
    assert np.all(u == SENTINEL)
    gu = np.full((N, 3, 2), SENTINEL)
    with pytest.raises(ValueError, match="grad_u"):
        ws.forward(theta, x, 1, grad_u=gu)
    with pytest.raises(TypeError, match="lap_u"):
        ws.forward(theta, x, 2, lap_u=np.zeros((N, 2), dtype=np.float32))
    ro = np.zeros((N, 2))
    ro.flags.writeable = False
    with pytest.raises((ValueError, TypeError), match=r"\bu\b"):
        ws.forward(theta, x, 0, u=ro)


# ------------------------------------------------------------------ primitives

def test_primitive_errors(rng):
    pred, target = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    with pytest.raises(ValueError, match="target"):
        helmpinn.mse_backward(pred, target[:4].copy())
    with pytest.raises(TypeError, match="target"):
        helmpinn.mse_backward(pred, target.astype(np.float32))
    with pytest.raises(ValueError, match="out"):
        helmpinn.mse_backward(pred, target, out=np.zeros((5, 3)))
    ro = np.zeros((5, 2))
    ro.flags.writeable = False
    with pytest.raises((ValueError, TypeError), match="out"):
        helmpinn.mse_backward(pred, target, out=ro)

    W = rng.normal(size=(4, 3))
    h_prev, G = rng.normal(size=(5, 3)), rng.normal(size=(5, 4))
    h = np.tanh(h_prev @ W.T)
    with pytest.raises(ValueError, match=r"\bW\b"):
        helmpinn.layer_backward(G, h, h_prev, rng.normal(size=12), True)
    with pytest.raises(TypeError, match=r"\bW\b"):
        helmpinn.layer_backward(G, h, h_prev, W.astype(np.float32), True)
    with pytest.raises(ValueError, match="dL_dh"):   # W [4, 3] says 4 outputs
        helmpinn.layer_backward(G[:, :3].copy(), h, h_prev, W, True)
    with pytest.raises(ValueError, match=r"\bh\b"):
        helmpinn.layer_backward(G, h[:, :3].copy(), h_prev, W, True)
    with pytest.raises(ValueError, match="h_prev"):
        helmpinn.layer_backward(G, h, h_prev[:4].copy(), W, True)
    with pytest.raises(TypeError, match="dL_dh"):
        helmpinn.layer_backward(G.astype(np.int64), h, h_prev, W, True)
    with pytest.raises(ValueError, match="out|dW"):
        helmpinn.layer_backward(G, h, h_prev, W, True,
                                out=(np.zeros((3, 4)), np.zeros(4), np.zeros((5, 3))))

    x, B, dphi = rng.normal(size=(5, 2)), rng.normal(size=(2, 3)), rng.normal(size=(5, 6))
    with pytest.raises(ValueError, match=r"\bB\b"):
        helmpinn.fourier_backward(dphi, x, rng.normal(size=(4, 3)))   # d = 4
    with pytest.raises(ValueError, match=r"\bx\b"):                 # B [2, 3] says d = 2
        helmpinn.fourier_backward(dphi, rng.normal(size=(5, 3)), B)
    with pytest.raises(ValueError, match="dL_dphi"):
        helmpinn.fourier_backward(rng.normal(size=(5, 5)), x, B)
    with pytest.raises(ValueError, match=r"\bx\b|dL_dphi"):          # N disagrees: either name
        helmpinn.fourier_backward(dphi, x[:4].copy(), B)
    with pytest.raises(ValueError, match="out"):
        helmpinn.fourier_backward(dphi, x, B, out=np.zeros((3, 2)))


# ------------------------------------------------------------------ ModelSpec and Workspace

@pytest.mark.parametrize("args, name", [((4, 3, 5, 2), "in_dim"), ((0, 3, 5, 2), "in_dim"),
                                        ((2, 0, 5, 2), "ff_dim"), ((2, -1, 5, 2), "ff_dim"),
                                        ((2, 3, 0, 2), "hidden_dim"),
                                        ((2, 3, -5, 2), "hidden_dim"),
                                        ((2, 3, 5, 0), "num_hidden_layers"),
                                        ((2, 3, 5, -1), "num_hidden_layers")])
def test_bad_model_spec(args, name):
    with pytest.raises(ValueError, match=name):
        helmpinn.ModelSpec(*args)


def test_bad_workspace():
    spec = helmpinn.ModelSpec(*SPEC)
    with pytest.raises(ValueError, match="batch_size"):
        helmpinn.Workspace(spec, 0, dtype="float64")
    with pytest.raises((ValueError, TypeError), match="dtype"):
        helmpinn.Workspace(spec, 8, dtype="float16")


def test_aliasing_outputs_are_refused(setup):
    ws, theta, terms = setup
    with pytest.raises(ValueError, match="grad|params"):
        ws.value_and_grad(theta, theta, **terms)
    grad = np.full(theta.size + N, SENTINEL)
    before = grad.copy()
    with pytest.raises(ValueError, match="grad|kappa"):
        # kappa's memory overlaps the last two elements of grad
        ws.value_and_grad(theta, grad[:theta.size], **dict(terms, kappa=grad[theta.size - 2:][:N]))
    np.testing.assert_array_equal(grad, before)
    x = terms["x_pde"].copy()
    with pytest.raises(ValueError, match=r"\bu\b|\bx\b"):
        ws.forward(theta, x, 0, u=x)


def test_views_of_wrong_length():
    spec = helmpinn.ModelSpec(*SPEC)
    with pytest.raises(ValueError, match="theta"):
        spec.views(np.zeros(spec.num_params - 1))


def test_non_finite_input_without_check_is_computed(setup):
    """Without check_finite the NaN is not looked for: the call runs and the loss is NaN."""
    ws, theta, terms = setup
    f = terms["f"].copy()
    f[0, 0] = np.nan
    grad = np.empty(theta.size)
    assert np.isnan(ws.value_and_grad(theta, grad, **dict(terms, f=f)))
