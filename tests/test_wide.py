"""The CPU's register-blocked matrix product (cpp/src/cpu/gemm.hpp) on layers at least
as wide as its micro-kernel tile, against the independent float64 reference (tests/reference.py)
and finite differences.

The micro-kernel covers NR columns: two vector registers, i.e. 16 float64 / 32 float32 columns
with AVX-512, 8 / 16 with AVX2, 4 / 8 with SSE2; narrower remainders take a plain loop. The
other numerical tests use widths up to 8, so only these cases run the tiled path against a value
that does not come from the engine itself. Widths here (40, 64, 96 hidden units; 2 ff_dim = 34,
42, 66 features, odd ff_dim) exceed every NR, with remainder columns, and the point counts are
not multiples of the 64-point tile or the 4/8-row block, so every row remainder runs too. The
build's instruction set is the one helmpinn.cpu_isa() reports (the kernels are compiled for it).
"""

from __future__ import annotations

import numpy as np
import pytest

import helmpinn as hp
import reference as R

# (in_dim, ff_dim, hidden_dim, num_hidden_layers)
WIDE = [(1, 17, 40, 2), (2, 21, 64, 2), (3, 33, 96, 1), (2, 8, 96, 3)]
ISA = hp.cpu_isa()
VECTOR_BYTES = {"avx512": 64, "avx2": 32, "avx": 32}.get(ISA, 16)


def _id(s):
    return f"d{s[0]}-m{s[1]}-H{s[2]}-L{s[3]}-{ISA}"


def _terms(rng, d, n_pde=37, n_data=29, n_bc=31):
    nrm = rng.normal(size=(n_bc, d))
    return dict(
        x_pde=rng.uniform(-1, 1, (n_pde, d)), kappa=rng.uniform(1, 10, n_pde),
        f=rng.normal(size=(n_pde, 2)),
        x_data=rng.uniform(-1, 1, (n_data, d)), y=rng.normal(size=(n_data, 2)),
        x_bc=rng.uniform(-1, 1, (n_bc, d)), n_bc=nrm / np.linalg.norm(nrm, axis=1, keepdims=True),
        alpha_bc=rng.normal(size=(n_bc, 2)), g_bc=rng.normal(size=(n_bc, 2)),
        w_pde=0.3, w_data=1.7, w_bc=0.9)


def _params(spec, rng):
    # sigma 0.3 keeps the Laplacian term O(1) for the widest Fourier layers
    return R.random_params(spec, rng, fourier_sigma=0.3)


def test_widths_exceed_the_micro_kernel_tile():
    for dtype_bytes in (4, 8):
        nr = 2 * VECTOR_BYTES // dtype_bytes
        for d, m, h, _ in WIDE:
            assert h > nr and h % nr != 0 or h >= 2 * nr, (ISA, nr, h)
        assert any(2 * m > nr and (2 * m) % nr for _, m, _, _ in WIDE), (ISA, nr)


@pytest.mark.parametrize("spec", WIDE, ids=_id)
def test_wide_forward_float64_matches_reference_and_fd(spec, rng):
    d = spec[0]
    theta = _params(spec, rng)
    x = rng.uniform(-1, 1, (77, d))
    ws = hp.Workspace(hp.ModelSpec(*spec), 50, dtype="float64")  # 77 points: two chunks
    u, gu, lu = ws.forward(theta, x, 2)
    ur, gur, lur = R.forward(theta, spec, x, 2)
    assert R.rel_err(u, ur) < 1e-12
    assert R.rel_err(gu, gur) < 1e-11
    assert R.rel_err(lu, lur) < 1e-10
    ufun = lambda xx: ws.forward(theta, np.ascontiguousarray(xx), 0).copy()  # noqa: E731
    assert R.rel_err(gu, R.fd_x_grad(ufun, x)) < 1e-8
    assert R.rel_err(lu, R.fd_x_lap(ufun, x)) < 1e-5


@pytest.mark.parametrize("spec", WIDE, ids=_id)
def test_wide_forward_float32_matches_reference(spec, rng):
    d = spec[0]
    theta = _params(spec, rng)
    x = rng.uniform(-1, 1, (77, d))
    ws = hp.Workspace(hp.ModelSpec(*spec), 64, dtype="float32")
    u, gu, lu = ws.forward(theta.astype(np.float32), x.astype(np.float32), 2)
    ur, gur, lur = R.forward(theta, spec, x.astype(np.float32).astype(np.float64), 2)
    assert R.rel_err(u, ur) < 2e-5
    assert R.rel_err(gu, gur) < 2e-5
    assert R.rel_err(lu, lur) < 5e-5


def _directions(spec, rng):
    """One random direction per parameter tensor (zero elsewhere): a wrong block of the
    gradient shows in its own directional derivative."""
    out = []
    p = R.num_params(spec)
    for _, shape, off in R.layout(spec):
        v = np.zeros(p)
        size = int(np.prod(shape))
        v[off:off + size] = rng.normal(size=size)
        out.append(v)
    return np.array(out)


def _directional_fd(theta, spec, dirs, terms, h=1e-4):
    """Five-point central differences of the reference loss along each direction."""
    h = h / np.abs(dirs).max(axis=1, keepdims=True)
    pts = np.concatenate([theta + c * h * dirs for c in (1.0, -1.0, 2.0, -2.0)])
    v = R.loss(pts, spec, **terms).reshape(4, len(dirs))
    return (8 * (v[0] - v[1]) - (v[2] - v[3])) / (12 * h[:, 0])


@pytest.mark.parametrize("spec", WIDE, ids=_id)
def test_wide_value_and_grad_float64_matches_reference_and_fd(spec, rng):
    d = spec[0]
    theta = _params(spec, rng)
    terms = _terms(rng, d)
    ws = hp.Workspace(hp.ModelSpec(*spec), 64, dtype="float64")
    grad = np.full(theta.size, 7.0)
    val = ws.value_and_grad(theta, grad, **terms)
    assert val == pytest.approx(R.loss(theta, spec, **terms), rel=1e-11)
    dirs = _directions(spec, rng)
    fd = _directional_fd(theta, spec, dirs, terms)
    an = dirs @ grad
    names = [name for name, _, _ in R.layout(spec)]
    err = np.abs(an - fd) / np.maximum(np.abs(fd), 1e-3 * np.abs(fd).max())
    assert err.max() < 1e-7, dict(zip(names, err))


@pytest.mark.parametrize("spec", WIDE, ids=_id)
def test_wide_value_and_grad_float32_matches_float64_reference(spec, rng):
    d = spec[0]
    theta = _params(spec, rng)
    terms = _terms(rng, d)
    terms32 = {k: (v.astype(np.float32) if isinstance(v, np.ndarray) else v)
               for k, v in terms.items()}
    # the reference at the float32-rounded inputs; the float64 gradient validated above
    terms_r = {k: (v.astype(np.float64) if isinstance(v, np.ndarray) else v)
               for k, v in terms32.items()}
    th32 = theta.astype(np.float32)
    ws32 = hp.Workspace(hp.ModelSpec(*spec), 64, dtype="float32")
    g32 = np.empty_like(th32)
    val = ws32.value_and_grad(th32, g32, **terms32)
    assert val == pytest.approx(R.loss(th32.astype(np.float64), spec, **terms_r), rel=2e-4)
    ws64 = hp.Workspace(hp.ModelSpec(*spec), 64, dtype="float64")
    g64 = np.empty(theta.size)
    ws64.value_and_grad(th32.astype(np.float64), g64, **terms_r)
    for name, shape, off in R.layout(spec):
        sl = slice(off, off + int(np.prod(shape)))
        assert R.rel_err(g32[sl], g64[sl]) < 2e-3, name
