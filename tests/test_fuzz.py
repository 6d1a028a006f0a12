"""Property-based fuzzing (hypothesis) of every binding of helmpinn._core.

Each argument starts as a valid one and is, at random, replaced by a hostile variant: another
dtype, the other byte order, a non-contiguous or read-only view, a wrong shape, zero points,
None, a scalar, a list, NaN/Inf values, a view overlapping another argument, or a huge extent.
Whatever comes in, a call may only return or raise a Python exception (TypeError, ValueError,
MemoryError, RuntimeError, OverflowError); a crash kills the run. Every output is a slice of a
larger buffer filled with a guard value: a write outside the slice is an out-of-bounds write.
A call that returns normally must leave its output shapes and the guards as documented.
Budget: a few hundred examples in all, a few seconds per test (max_examples, deadline=None).
"""

from __future__ import annotations

import numpy as np
import pytest

from hypothesis import HealthCheck, example, given, settings  # the `test` extra installs it
from hypothesis import strategies as st

import helmpinn as hp

ALLOWED = (TypeError, ValueError, MemoryError, RuntimeError, OverflowError)
GUARD = 12345.0
PAD = 7
FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

SPEC = hp.ModelSpec(2, 3, 5, 2)   # small: valid calls are cheap
WS = {dt: hp.Workspace(SPEC, 8, dtype=dt) for dt in ("float32", "float64")}


class Guarded:
    """A writable array `a` of `shape` inside a buffer with PAD guard elements on each side."""

    def __init__(self, shape, dtype):
        n = int(np.prod(shape))
        self.buf = np.full(n + 2 * PAD, GUARD, dtype=dtype)
        self.a = self.buf[PAD:PAD + n].reshape(shape)

    def check(self):
        assert (self.buf[:PAD] == GUARD).all() and (self.buf[-PAD:] == GUARD).all(), \
            "write outside an output array"


def hostile(draw, valid, pool=()):
    """`valid` (an ndarray) or, with probability ~1/2, a hostile variant of it."""
    kind = draw(st.sampled_from([
        "valid", "valid", "valid", "valid", "valid", "valid", "dtype", "byteorder", "strided",
        "readonly", "shape", "ndim", "empty", "none", "scalar", "list", "nan", "overlap",
        "huge", "fortran"]))
    a = valid
    if kind == "valid":
        return a
    if kind == "dtype":
        return a.astype(draw(st.sampled_from(
            [np.float16, np.int32, np.int64, np.complex128, np.bool_, object,
             np.float32 if a.dtype == np.float64 else np.float64])))
    if kind == "byteorder":
        return a.astype(a.dtype.newbyteorder(">"))
    if kind == "strided":
        big = np.repeat(a[..., None], 2, axis=-1) if a.ndim else np.array([a, a])
        return big[..., 0] if a.ndim else big[::2]
    if kind == "readonly":
        b = a.copy()
        b.flags.writeable = False
        return b
    if kind == "shape":
        if a.ndim == 0:
            return np.zeros(3, a.dtype)
        shape = list(a.shape)
        i = draw(st.integers(0, a.ndim - 1))
        shape[i] = draw(st.sampled_from([0, 1, shape[i] + 1, max(shape[i] - 1, 0), 7]))
        return np.zeros(shape, a.dtype)
    if kind == "ndim":
        return a.reshape(-1) if a.ndim > 1 else a.reshape(1, *a.shape)
    if kind == "empty":
        return np.zeros((0,) + a.shape[1:], a.dtype)
    if kind == "none":
        return None
    if kind == "scalar":
        return draw(st.sampled_from([1.5, 0, float("nan"), "x", 2**70, True]))
    if kind == "list":
        return a.tolist()
    if kind == "nan":
        b = a.copy()
        if b.size:
            b.reshape(-1)[draw(st.integers(0, b.size - 1))] = draw(
                st.sampled_from([np.nan, np.inf, -np.inf, 1e38, -0.0]))
        return b
    if kind == "overlap" and pool:
        other = draw(st.sampled_from(list(pool)))
        if isinstance(other, np.ndarray) and other.dtype == a.dtype and other.size >= a.size \
                and other.flags.c_contiguous and a.size:
            return other.reshape(-1)[:a.size].reshape(a.shape)
        return a
    if kind == "huge":
        # a huge extent without huge memory: zero strides (read-only, non-contiguous)
        shape = (2**40,) + a.shape[1:] if a.ndim else (2**40,)
        return np.lib.stride_tricks.as_strided(np.zeros(1, a.dtype), shape=shape,
                                               strides=(0,) * len(shape), writeable=False)
    if kind == "fortran":
        return np.asfortranarray(a.T) if a.ndim > 1 else a
    return a


def caller(allowed):
    """``call(fn, *args, **kwargs)`` -> ("ok", result) or ("raised", exception) for an exception
    of the types ``allowed``, which must have a message; anything else propagates."""
    def call(fn, *args, **kwargs):
        try:
            return "ok", fn(*args, **kwargs)
        except allowed as e:
            assert str(e), f"{type(e).__name__} without a message"
            return "raised", e
    return call


call = caller(ALLOWED)


dtypes = st.sampled_from(["float32", "float64"])
npoints = st.sampled_from([0, 1, 3, 9, 17])


@FUZZ
@given(data=st.data(), dt=dtypes, n=npoints, deriv=st.sampled_from([-1, 0, 1, 2, 3, 2**40]))
def test_fuzz_forward(data, dt, n, deriv):
    ws = WS[dt]
    rng = np.random.default_rng(n)
    params = hostile(data.draw, rng.normal(size=SPEC.num_params).astype(dt))
    x = hostile(data.draw, rng.uniform(-1, 1, (n, 2)).astype(dt), [params])
    outs = {}
    for name, shape, need in (("u", (n, 2), 0), ("grad_u", (n, 2, 2), 1), ("lap_u", (n, 2), 2)):
        if data.draw(st.booleans()):
            g = Guarded(shape, dt)
            outs[name] = g
    kw = {k: hostile(data.draw, g.a, [params, x]) for k, g in outs.items()}
    status, res = call(ws.forward, params, x, deriv, **kw)
    for g in outs.values():
        g.check()
    if status == "ok":
        first = res if deriv == 0 else res[0]
        assert first.shape == (n, 2)


def _batch(draw, dt, pool):
    rng = np.random.default_rng(0)
    kw = {}
    terms = draw(st.sets(st.sampled_from(["pde", "data", "bc"])))
    if "pde" in terms:
        n = draw(npoints)
        kw["x_pde"] = hostile(draw, rng.uniform(-1, 1, (n, 2)).astype(dt), pool)
        kw["kappa"] = draw(st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                     st.just(rng.uniform(1, 2, n).astype(dt))))
        if isinstance(kw["kappa"], np.ndarray):
            kw["kappa"] = hostile(draw, kw["kappa"], pool)
        if draw(st.booleans()):
            kw["f"] = hostile(draw, rng.normal(size=(n, 2)).astype(dt), pool)
    if "data" in terms:
        n = draw(npoints)
        kw["x_data"] = hostile(draw, rng.uniform(-1, 1, (n, 2)).astype(dt), pool)
        kw["y"] = hostile(draw, rng.normal(size=(n, 2)).astype(dt), pool)
    if "bc" in terms:
        n = draw(npoints)
        kw["x_bc"] = hostile(draw, rng.uniform(-1, 1, (n, 2)).astype(dt), pool)
        kw["n_bc"] = hostile(draw, np.tile(np.array([[1, 0]], dt), (n, 1)), pool)
        kw["alpha_bc"] = draw(st.one_of(st.complex_numbers(allow_nan=True, allow_infinity=True),
                                        st.just(rng.normal(size=(n, 2)).astype(dt))))
        if isinstance(kw["alpha_bc"], np.ndarray):
            kw["alpha_bc"] = hostile(draw, kw["alpha_bc"], pool)
    for w in ("w_pde", "w_data", "w_bc"):
        if draw(st.booleans()):
            kw[w] = draw(st.sampled_from([0.0, 1.0, -1.0, 1e39, float("nan"), "1", None]))
    kw["check_finite"] = draw(st.booleans())
    kw["train_fourier"] = draw(st.sampled_from([True, False, 1, None]))
    return kw


@FUZZ
@given(data=st.data(), dt=dtypes)
def test_fuzz_value_and_grad(data, dt):
    ws = WS[dt]
    params = hostile(data.draw, np.random.default_rng(1).normal(size=SPEC.num_params).astype(dt))
    g = Guarded((SPEC.num_params,), dt)
    grad = hostile(data.draw, g.a, [params])
    kw = _batch(data.draw, dt, [params, grad])
    status, res = call(ws.value_and_grad, params, grad, **kw)
    g.check()
    if status == "ok":
        assert isinstance(res, float)


@FUZZ
@given(data=st.data(), dt=dtypes, op=st.sampled_from(["residuals", "jacobian", "jvp", "vjp"]))
def test_fuzz_residual_level(data, dt, op):
    ws = WS[dt]
    if not hasattr(ws, op):
        pytest.skip(f"this helmpinn has no Workspace.{op}")
    rng = np.random.default_rng(2)
    params = hostile(data.draw, rng.normal(size=SPEC.num_params).astype(dt))
    kw = _batch(data.draw, dt, [params])
    kw.pop("check_finite")
    args = [params]
    guards = []
    if op in ("jvp", "vjp"):
        size = SPEC.num_params if op == "jvp" else data.draw(st.sampled_from([0, 3, 20]))
        args.append(hostile(data.draw, rng.normal(size=size).astype(dt), [params]))
    if data.draw(st.booleans()):
        shape = {"residuals": (data.draw(st.sampled_from([0, 4, 30])),),
                 "jacobian": (data.draw(st.sampled_from([0, 4])), SPEC.num_params),
                 "jvp": (data.draw(st.sampled_from([0, 4, 30])),),
                 "vjp": (SPEC.num_params,)}[op]
        g = Guarded(shape, dt)
        guards.append(g)
        kw["out"] = hostile(data.draw, g.a, args)
    if op == "jacobian" and data.draw(st.booleans()):
        kw["rows"] = data.draw(st.sampled_from([(0, 0), (0, 4), (3, 1), (-1, 2), (0, 2**62),
                                                 "x", (1,), None]))
    call(getattr(ws, op), *args, **kw)
    for g in guards:
        g.check()


@FUZZ
@given(data=st.data(), dt=dtypes, n=npoints, c=st.sampled_from([1, 2, 5]))
def test_fuzz_mse_backward(data, dt, n, c):
    rng = np.random.default_rng(3)
    pred = hostile(data.draw, rng.normal(size=(n, c)).astype(dt))
    target = hostile(data.draw, rng.normal(size=(n, c)).astype(dt), [pred])
    kw = {}
    g = None
    if data.draw(st.booleans()):
        g = Guarded((n, c), dt)
        kw["out"] = hostile(data.draw, g.a, [pred, target])
    call(hp.mse_backward, pred, target, **kw)
    if g:
        g.check()


@FUZZ
@given(data=st.data(), dt=dtypes, n=npoints, o=st.sampled_from([1, 3, 40]),
       i=st.sampled_from([1, 2, 33]), tanh=st.sampled_from([True, False, None, 1]))
def test_fuzz_layer_backward(data, dt, n, o, i, tanh):
    rng = np.random.default_rng(4)
    dl = hostile(data.draw, rng.normal(size=(n, o)).astype(dt))
    h = hostile(data.draw, np.tanh(rng.normal(size=(n, o))).astype(dt), [dl])
    hprev = hostile(data.draw, rng.normal(size=(n, i)).astype(dt), [dl, h])
    W = hostile(data.draw, rng.normal(size=(o, i)).astype(dt), [dl, h, hprev])
    guards = []
    kw = {}
    if data.draw(st.booleans()):
        guards = [Guarded((o, i), dt), Guarded((o,), dt), Guarded((n, i), dt)]
        outs = [hostile(data.draw, g.a, [dl, h, hprev, W]) for g in guards]
        kw["out"] = data.draw(st.sampled_from([tuple(outs), tuple(outs[:2]), outs, None]))
    call(hp.layer_backward, dl, h, hprev, W, tanh, **kw)
    for g in guards:
        g.check()


@FUZZ
@given(data=st.data(), dt=dtypes, n=npoints, d=st.sampled_from([0, 1, 2, 3, 4]),
       m=st.sampled_from([1, 3, 17]))
def test_fuzz_fourier_backward(data, dt, n, d, m):
    rng = np.random.default_rng(5)
    dphi = hostile(data.draw, rng.normal(size=(n, 2 * m)).astype(dt))
    x = hostile(data.draw, rng.normal(size=(n, d)).astype(dt), [dphi])
    B = hostile(data.draw, rng.normal(size=(d, m)).astype(dt), [dphi, x])
    kw = {}
    g = None
    if data.draw(st.booleans()):
        g = Guarded((d, m), dt)
        kw["out"] = hostile(data.draw, g.a, [dphi, x, B])
    call(hp.fourier_backward, dphi, x, B, **kw)
    if g:
        g.check()


@FUZZ
@given(data=st.data(), dt=dtypes, n=st.sampled_from([0, 1, 5, 9000]),
       step=st.sampled_from([1, 2, 0, -1, 2**62]),
       hyper=st.tuples(*[st.floats(allow_nan=True, allow_infinity=True)] * 5))
def test_fuzz_adam_step(data, dt, n, step, hyper):
    gp, gg, gm, gv = (Guarded((n,), dt) for _ in range(4))
    gp.a[:] = 1
    gg.a[:] = 0.5
    gm.a[:] = 0
    gv.a[:] = 0
    p = hostile(data.draw, gp.a)
    g = hostile(data.draw, gg.a, [p])
    m = hostile(data.draw, gm.a, [p, g])
    v = hostile(data.draw, gv.a, [p, g, m])
    lr, b1, b2, eps, wd = hyper
    status, _ = call(hp.adam_step, p, g, m, v, step, lr, beta1=b1, beta2=b2, eps=eps,
                     weight_decay=wd)
    for x in (gp, gg, gm, gv):
        x.check()
    if status == "ok" and p is gp.a and g is gg.a and n and np.isfinite(lr) and lr < 1e30:
        assert np.isfinite(gp.a).all(), (hyper, gp.a)


HUGE = st.sampled_from([2**31 - 2, 2**31, 2**30, 2**62, 2**64, -2**63, -1, 0])


@FUZZ
@given(dims=st.tuples(st.one_of(st.integers(1, 3), HUGE), st.one_of(st.integers(1, 40), HUGE),
                      st.one_of(st.integers(1, 40), HUGE), st.one_of(st.integers(1, 3), HUGE)),
       batch=st.one_of(st.integers(-2, 64), st.sampled_from([2**31, 2**40, 2**62, 2**63, 2**64])),
       dt=st.sampled_from(["float32", "float64", "float32", "float16", None, 3]),
       device=st.sampled_from(["cpu", "cpu", "cpu", "gpu", "cuda:99", "", "cuda:x"]))
@example(dims=(2, 8, 16, 2), batch=2**62, dt="float32", device="cpu")  # wrapped size arithmetic
@example(dims=(1, 2**31 - 2, 2**31 - 100, 1), batch=1, dt="float64", device="cpu")  # 2
@example(dims=(3, 32, 10**9, 3), batch=1, dt="float32", device="cpu")  # 4
def test_fuzz_model_spec_and_workspace(dims, batch, dt, device):
    status, spec = call(hp.ModelSpec, *dims)
    if status != "ok":
        return
    assert spec.num_params >= 1 and spec.layout()[-1][0].startswith("b")
    status, ws = call(hp.Workspace, spec, batch, dtype=dt, device=device)
    if status == "ok" and ws.device == "cpu":
        assert ws.batch_size == batch and ws.memory_bytes > 0
        # the smallest sensible call must then work (or raise)
        x = np.zeros((3, spec.in_dim), ws.dtype)
        status, u = call(ws.forward, np.zeros(spec.num_params, ws.dtype), x, 2)
        assert status == "ok" and u[0].shape == (3, 2)


@FUZZ
@given(data=st.data(), dt=dtypes)
def test_fuzz_views(data, dt):
    theta = hostile(data.draw, np.arange(SPEC.num_params, dtype=dt))
    status, views = call(SPEC.views, theta)
    if status == "ok":
        assert sum(v.size for v in views.values()) == SPEC.num_params
