"""Independent float64 NumPy reference of the helmpinn model and its Helmholtz PINN loss.

Nothing here imports helmpinn: this is the yardstick the compiled core is measured against, by
the tests (pytest puts tests/ on the path) and by the benchmarks (benchmarks/common.py puts
tests/ on the path and takes its layout from here): one reference, one layout helper.

* Layout: one flat vector, in the order B [d, m], W0 [H, 2m], b0 [H], W1 [H, H], b1 [H], ...,
  W{L} [2, H], b{L} [2] (L = number of hidden tanh layers), every tensor row-major.
* Spatial derivatives: full second-order forward mode. Each layer carries the value, the
  Jacobian with respect to x ([.., d, width]) and the FULL Hessian ([.., d, d, width]), pushed
  through tanh by the chain rule  h_ij = t z_ij + t' z_i z_j  (t = 1 - h^2, t' = -2 h t);
  the Laplacian is the trace of the Hessian. This is a different route from the core's
  Laplacian-stream recursion and is checked against finite differences and the complex step
  in x by test_reference.py.
* Loss gradient with respect to theta: central finite differences (`fd_grad`) and, as an
  independent check of those, the complex-step derivative (`cs_grad`); every operation in
  the loss is analytic (tanh, sin, cos, products, squares of real and imaginary parts kept as
  separate real numbers), so theta may be complex.
* Every function takes theta as [P] or as a batch [K, P]; batching is what keeps a finite
  difference over all parameters fast (`loss_and_grad`, the adjoint route, takes [P]).
* `loss_and_grad`: the gradient a second way, by the adjoint of MATH.md's streams, for networks
  too large for finite differences (the benchmarks' agreement check).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

TWO_PI = 2.0 * math.pi


# --------------------------------------------------------------------------------------------
# Shapes and the flat layout
# --------------------------------------------------------------------------------------------

def as_tuple(spec: Any) -> tuple[int, int, int, int]:
    """(in_dim, ff_dim, hidden_dim, num_hidden_layers) from a tuple or a ModelSpec-like object."""
    if isinstance(spec, tuple):
        d, m, h, n_layers = spec
    else:
        d, m, h, n_layers = spec.in_dim, spec.ff_dim, spec.hidden_dim, spec.num_hidden_layers
    return int(d), int(m), int(h), int(n_layers)


def layout(spec: Any) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, shape, offset) of every tensor of the flat buffer, in buffer order."""
    d, m, h, n_layers = as_tuple(spec)
    out: list[tuple[str, tuple[int, ...], int]] = []
    off = 0

    def add(name: str, shape: tuple[int, ...]) -> None:
        nonlocal off
        out.append((name, shape, off))
        off += int(np.prod(shape))

    add("B", (d, m))
    for layer in range(n_layers + 1):
        n_in = 2 * m if layer == 0 else h
        n_out = 2 if layer == n_layers else h
        add(f"W{layer}", (n_out, n_in))
        add(f"b{layer}", (n_out,))
    return out


def num_params(spec: Any) -> int:
    name, shape, off = layout(spec)[-1]
    return off + int(np.prod(shape))


def unpack(theta: np.ndarray, spec: Any) -> dict[str, np.ndarray]:
    """Views of theta [..., P] as named tensors [..., *shape]."""
    theta = np.asarray(theta)
    assert theta.shape[-1] == num_params(spec), (theta.shape, num_params(spec))
    lead = theta.shape[:-1]
    return {name: theta[..., off:off + int(np.prod(shape))].reshape(lead + shape)
            for name, shape, off in layout(spec)}


def random_params(spec: Any, rng: np.random.Generator, fourier_sigma: float = 0.5,
                  bias_scale: float = 0.1) -> np.ndarray:
    """Random float64 parameters: Glorot-normal weights, small random biases, B ~ N(0, sigma^2)."""
    theta = np.empty(num_params(spec))
    views = unpack(theta, spec)
    for name, arr in views.items():
        if name == "B":
            arr[...] = rng.normal(0.0, fourier_sigma, arr.shape)
        elif name.startswith("W"):
            n_out, n_in = arr.shape
            arr[...] = rng.normal(0.0, math.sqrt(2.0 / (n_in + n_out)), arr.shape)
        else:
            arr[...] = rng.normal(0.0, bias_scale, arr.shape)
    return theta


# --------------------------------------------------------------------------------------------
# Forward: value, Jacobian and Hessian in x
# --------------------------------------------------------------------------------------------

def _batched(theta: np.ndarray) -> tuple[np.ndarray, bool]:
    theta = np.asarray(theta)
    if theta.ndim == 1:
        return theta[None, :], True
    assert theta.ndim == 2
    return theta, False


def network(theta: np.ndarray, spec: Any, x: np.ndarray, order: int = 0):
    """u [K, N, 2], and with order >= 1 du/dx [K, N, d, 2], with order 2 d2u/dx2 [K, N, d, d, 2].

    theta [K, P] (complex allowed); x [N, d] real (or complex, for a complex step in x).
    """
    d, m, hdim, n_layers = as_tuple(spec)
    p = unpack(theta, spec)
    x = np.asarray(x)
    assert x.ndim == 2 and x.shape[1] == d, x.shape
    B = p["B"]                                     # [K, d, m]
    om = TWO_PI * B                                # omega [K, d, m]
    s = TWO_PI * np.einsum("ni,kim->knm", x, B)    # [K, N, m]
    sin_s, cos_s = np.sin(s), np.cos(s)
    a = np.concatenate([sin_s, cos_s], axis=-1)    # [K, N, 2m]
    a1 = a2 = None
    if order >= 1:
        # d phi / d x_i = [omega_i cos s, -omega_i sin s]
        a1 = np.concatenate([om[:, None, :, :] * cos_s[:, :, None, :],
                             -om[:, None, :, :] * sin_s[:, :, None, :]], axis=-1)   # [K,N,d,2m]
    if order >= 2:
        # d2 phi / dx_i dx_j = -omega_i omega_j [sin s, cos s]
        oo = om[:, :, None, :] * om[:, None, :, :]                                 # [K,d,d,m]
        a2 = -np.concatenate([oo[:, None] * sin_s[:, :, None, None, :],
                              oo[:, None] * cos_s[:, :, None, None, :]], axis=-1)    # [K,N,d,d,2m]
    for layer in range(n_layers + 1):
        W, b = p[f"W{layer}"], p[f"b{layer}"]
        z = np.einsum("kni,koi->kno", a, W) + b[:, None, :]
        z1 = np.einsum("knji,koi->knjo", a1, W) if order >= 1 else None
        z2 = np.einsum("knjli,koi->knjlo", a2, W) if order >= 2 else None
        if layer == n_layers:
            return (z, z1, z2)[: order + 1] if order else z
        h = np.tanh(z)
        t = 1.0 - h * h
        if order >= 2:
            dt = -2.0 * h * t
            a2 = (t[:, :, None, None, :] * z2
                  + dt[:, :, None, None, :] * z1[:, :, :, None, :] * z1[:, :, None, :, :])
        if order >= 1:
            a1 = t[:, :, None, :] * z1
        a = h
    raise AssertionError("unreachable")


def forward(theta: np.ndarray, spec: Any, x: np.ndarray, derivatives: int = 2):
    """For one theta [P]: u [N, 2]; grad_u [N, d, 2]; lap_u [N, 2] (as Workspace.forward)."""
    theta = np.asarray(theta)
    assert theta.ndim == 1
    if derivatives == 0:
        return network(theta[None], spec, x, 0)[0]
    res = network(theta[None], spec, x, derivatives)
    u, du = res[0][0], res[1][0]
    if derivatives == 1:
        return u, du
    lap = np.einsum("nii...->n...", res[2][0])
    return u, du, lap


def hessian(theta: np.ndarray, spec: Any, x: np.ndarray) -> np.ndarray:
    """d2u/dx_i dx_j [N, d, d, 2] for one theta."""
    return network(np.asarray(theta)[None], spec, x, 2)[2][0]


def layer_values(theta: np.ndarray, spec: Any, x: np.ndarray):
    """Value stream caches for one theta: (phi [N, 2m], z list, h list) with z[L] = h[L] = u."""
    d, m, hdim, n_layers = as_tuple(spec)
    p = unpack(np.asarray(theta), spec)
    s = TWO_PI * np.asarray(x) @ p["B"]
    phi = np.concatenate([np.sin(s), np.cos(s)], axis=-1)
    a = phi
    zs, hs = [], []
    for layer in range(n_layers + 1):
        z = a @ p[f"W{layer}"].T + p[f"b{layer}"]
        h = z if layer == n_layers else np.tanh(z)
        zs.append(z)
        hs.append(h)
        a = h
    return phi, zs, hs


# --------------------------------------------------------------------------------------------
# Loss
# --------------------------------------------------------------------------------------------

def _pair(v, n: int, name: str) -> np.ndarray:
    """A complex scalar or an [n, 2] array as (re, im) arrays broadcastable to [n]."""
    if np.ndim(v) == 0:
        c = complex(v)
        return np.array([c.real, c.imag])[None, :].repeat(n, axis=0)
    v = np.asarray(v, dtype=np.float64)
    assert v.shape == (n, 2), (name, v.shape)
    return v


def _coef(v, shape: tuple[int, ...], default: complex) -> np.ndarray:
    """A general-operator coefficient (None, a complex scalar, or real pairs [..., 2]) as a
    complex array broadcast to shape."""
    if v is None:
        return np.full(shape, default, dtype=np.complex128)
    if np.ndim(v) == 0:
        return np.full(shape, complex(v), dtype=np.complex128)
    v = np.asarray(v, dtype=np.float64)
    assert v.shape == shape + (2,), (v.shape, shape)
    return v[..., 0] + 1j * v[..., 1]


def residual_parts(theta: np.ndarray, spec: Any, *, x_pde=None, kappa=None, f=None, x_data=None,
                   y=None, x_bc=None, n_bc=None, alpha_bc=None, g_bc=None, a_pde=None,
                   b_pde=None, c_pde=None, a_lap=None, **_ignored):
    """Unscaled complex residuals per term as {"pde", "data", "bc"}: arrays [K, N, 2] (re, im)
    for theta [K, P] (a term without points is absent).

    pde: lap u + kappa u - f, or with any of a_pde, b_pde, c_pde, a_lap the general operator
    sum_i a_i u_ii + sum_i b_i u_i + c u - f (c = c_pde, else kappa; a_lap [N, 2]: every
    a_i = a_lap) ; data: u - y ;
    bc: n . grad u + alpha u - g (complex alpha u).
    Keyword names follow Workspace.value_and_grad; extra keywords are ignored.
    """
    th, _ = _batched(theta)
    parts = {}
    if x_pde is not None and len(x_pde):
        n = len(x_pde)
        u, du, hess = network(th, spec, x_pde, 2)
        kap = np.asarray(kappa if kappa is not None else 0.0, dtype=np.float64)
        kap = np.broadcast_to(kap, (n,)) if kap.ndim == 0 else kap
        assert kap.shape == (n,)
        if a_pde is None and b_pde is None and c_pde is None and a_lap is None:
            lap = np.einsum("knii...->kn...", hess)                 # [K, N, 2]
            r = lap + kap[None, :, None] * u
        else:
            d = np.asarray(x_pde).shape[1]
            if a_lap is not None:
                assert a_pde is None
                a = np.repeat(_coef(a_lap, (n,), 1.0)[:, None], d, axis=1)
            else:
                a = _coef(a_pde, (n, d), 1.0)
            b = _coef(b_pde, (n, d), 0.0)
            c = kap.astype(np.complex128) if c_pde is None else _coef(c_pde, (n,), 0.0)
            cplx = lambda z: z[..., 0] + 1j * z[..., 1]  # noqa: E731
            uii = cplx(np.einsum("knii...->kni...", hess))         # [K, N, d]
            rc = (np.sum(a[None] * uii, axis=2) + np.sum(b[None] * cplx(du), axis=2)
                  + c[None] * cplx(u))
            r = np.stack([rc.real, rc.imag], axis=-1)
        if f is not None:
            r = r - np.asarray(f, dtype=np.float64)[None]
        parts["pde"] = r

    if x_data is not None and len(x_data):
        u = network(th, spec, x_data, 0)
        parts["data"] = u - np.asarray(y, dtype=np.float64)[None]

    if x_bc is not None and len(x_bc):
        n = len(x_bc)
        u, du = network(th, spec, x_bc, 1)
        nrm = np.asarray(n_bc, dtype=np.float64)
        dn = np.einsum("nj,knjc->knc", nrm, du)                     # n . grad u   [K, N, 2]
        al = _pair(alpha_bc if alpha_bc is not None else 0.0, n, "alpha_bc")
        ar, ai = al[None, :, 0], al[None, :, 1]
        ur, ui = u[..., 0], u[..., 1]
        rho_r = dn[..., 0] + ar * ur - ai * ui
        rho_i = dn[..., 1] + ar * ui + ai * ur
        if g_bc is not None:
            g = np.asarray(g_bc, dtype=np.float64)
            rho_r = rho_r - g[None, :, 0]
            rho_i = rho_i - g[None, :, 1]
        parts["bc"] = np.stack([rho_r, rho_i], axis=-1)
    return parts


def loss_terms(theta: np.ndarray, spec: Any, *, w_pde=1.0, w_data=1.0, w_bc=1.0, **terms):
    """(total, {"pde", "data", "bc"}) with arrays [K] for theta [K, P] or scalars for theta [P].

    L = w_pde/N_c sum |lap u + kappa u - f|^2 + w_data/N_d sum |u - y|^2
        + w_bc/N_b sum |n . grad u + alpha u - g|^2 ; |.|^2 sums real and imaginary parts.
    Keyword names follow Workspace.value_and_grad; extra keywords (train_fourier, ...) are ignored.
    """
    th, single = _batched(theta)
    zero = np.zeros(th.shape[0], dtype=th.dtype)
    parts = {"pde": zero, "data": zero, "bc": zero}
    for name, r in residual_parts(th, spec, **terms).items():
        parts[name] = np.sum(r * r, axis=(1, 2)) / r.shape[1]
    total = w_pde * parts["pde"] + w_data * parts["data"] + w_bc * parts["bc"]
    if single:
        return total[0], {key: val[0] for key, val in parts.items()}
    return total, parts


def residuals(theta: np.ndarray, spec: Any, *, w_pde=1.0, w_data=1.0, w_bc=1.0, counts=None,
              **terms) -> np.ndarray:
    """The residual vector of Workspace.residuals: [R] for theta [P], [K, R] for theta [K, P].

    PDE points, then data points, then boundary points, each point as (re, im), each scaled by
    sqrt(w / N) with N the term's count (counts={"pde": ..} or its number of points), so that
    sum(r**2) is the loss.
    """
    th, single = _batched(theta)
    weights = {"pde": w_pde, "data": w_data, "bc": w_bc}
    counts = counts or {}
    parts = residual_parts(th, spec, **terms)
    rows = [np.sqrt(weights[k] / counts.get(k, parts[k].shape[1])) *
            parts[k].reshape(th.shape[0], -1) for k in ("pde", "data", "bc") if k in parts]
    r = np.concatenate(rows, axis=1) if rows else np.zeros((th.shape[0], 0))
    return r[0] if single else r


def fd_jacobian(fun, theta: np.ndarray, h_rel: float = 1e-4, chunk: int = 256) -> np.ndarray:
    """Five-point central finite-difference Jacobian [R, P] of fun (theta [K, P] -> [K, R]) at
    theta [P], with the steps of fd_grad."""
    theta = np.asarray(theta, dtype=np.float64)
    p = theta.size
    h = fd_steps(theta, h_rel)
    vals = []
    for c in (1.0, -1.0, 2.0, -2.0):
        t = np.repeat(theta[None, :], p, axis=0)
        t[np.arange(p), np.arange(p)] += c * h
        vals.append(np.concatenate([np.asarray(fun(t[i:i + chunk])) for i in range(0, p, chunk)]))
    d = (8.0 * (vals[0] - vals[1]) - (vals[2] - vals[3])) / (12.0 * h[:, None])
    return d.T


def loss(theta: np.ndarray, spec: Any, **terms):
    """The total loss only; theta [P] -> scalar, theta [K, P] -> [K]."""
    return loss_terms(theta, spec, **terms)[0]


# --------------------------------------------------------------------------------------------
# Gradients in theta: central finite differences and the complex step
# --------------------------------------------------------------------------------------------

def fd_steps(theta: np.ndarray, h_rel: float) -> np.ndarray:
    return h_rel * np.maximum(1.0, np.abs(theta))


def fd_grad(fun, theta: np.ndarray, h_rel: float = 1e-4, order: int = 4,
            chunk: int = 512) -> np.ndarray:
    """Central finite-difference gradient of fun (theta [K, P] -> [K]) at theta [P].

    order 2: (f(+h) - f(-h)) / 2h ; order 4: the five-point central stencil
    (8 (f(+h) - f(-h)) - (f(+2h) - f(-2h))) / 12h, step h_k = h_rel * max(1, |theta_k|).
    """
    theta = np.asarray(theta, dtype=np.float64)
    p = theta.size
    h = fd_steps(theta, h_rel)
    mults = [1.0, -1.0] if order == 2 else [1.0, -1.0, 2.0, -2.0]
    rows = []
    for c in mults:
        t = np.repeat(theta[None, :], p, axis=0)
        t[np.arange(p), np.arange(p)] += c * h
        rows.append(t)
    pts = np.concatenate(rows, axis=0)
    vals = np.concatenate([np.asarray(fun(pts[i:i + chunk])) for i in range(0, len(pts), chunk)])
    v = vals.reshape(len(mults), p)
    if order == 2:
        return (v[0] - v[1]) / (2.0 * h)
    return (8.0 * (v[0] - v[1]) - (v[2] - v[3])) / (12.0 * h)


def cs_grad(fun, theta: np.ndarray, h: float = 1e-30, chunk: int = 512) -> np.ndarray:
    """Complex-step gradient Im f(theta + i h e_k) / h of fun (theta [K, P] -> [K]) at theta [P]."""
    theta = np.asarray(theta, dtype=np.float64)
    p = theta.size
    pts = np.repeat(theta[None, :].astype(np.complex128), p, axis=0)
    pts[np.arange(p), np.arange(p)] += 1j * h
    vals = np.concatenate([np.asarray(fun(pts[i:i + chunk])) for i in range(0, p, chunk)])
    return vals.imag / h


def loss_grad_fd(theta: np.ndarray, spec: Any, h_rel: float = 1e-4, order: int = 4,
                 **terms) -> np.ndarray:
    """Finite-difference gradient of the reference loss (train_fourier=False zeroes B's block)."""
    g = fd_grad(lambda t: loss(t, spec, **terms), theta, h_rel=h_rel, order=order)
    if not terms.get("train_fourier", True):
        g[: as_tuple(spec)[0] * as_tuple(spec)[1]] = 0.0
    return g


def loss_grad_cs(theta: np.ndarray, spec: Any, **terms) -> np.ndarray:
    """Complex-step gradient of the reference loss (train_fourier=False zeroes B's block)."""
    g = cs_grad(lambda t: loss(t, spec, **terms), theta)
    if not terms.get("train_fourier", True):
        g[: as_tuple(spec)[0] * as_tuple(spec)[1]] = 0.0
    return g


# --------------------------------------------------------------------------------------------
# A second route to the loss gradient: MATH.md's value/partials/Laplacian streams and their
# adjoint, written out in NumPy (PDE term with a real kappa, and data term). Fast enough for the
# benchmarks' networks, where finite differences over every parameter are not; checked against
# the complex step of `loss` by test_reference.py.
# --------------------------------------------------------------------------------------------

def _forward_streams(spec: Any, P: list[np.ndarray], x: np.ndarray, derivs: bool):
    """Streams through the net. Returns the per-layer caches and the output streams.

    With derivs, a stream array has shape [d+2, N, K]: value, d partials, Laplacian.
    Without, [1, N, K] (value only).
    """
    d, m, _, L = as_tuple(spec)
    B = P[0]
    om = TWO_PI * B                      # [d, m]
    Om = (om ** 2).sum(0)                # [m]
    s = x @ om                           # [N, m]
    S, C = np.sin(s), np.cos(s)
    if derivs:
        a = np.empty((d + 2, x.shape[0], 2 * m))
        a[0] = np.concatenate([S, C], 1)
        for i in range(d):
            a[1 + i] = np.concatenate([om[i] * C, -om[i] * S], 1)
        a[d + 1] = np.concatenate([-Om * S, -Om * C], 1)
    else:
        a = np.concatenate([S, C], 1)[None]
    caches = []
    for l in range(L):
        W, b = P[1 + 2 * l], P[2 + 2 * l]
        z = a @ W.T
        z[0] += b
        h = np.tanh(z[0])
        t = 1.0 - h * h
        hs = np.empty_like(z)
        hs[0] = h
        q = None
        if derivs:
            zd = z[1:d + 1]
            q = (zd ** 2).sum(0)
            hs[1:d + 1] = t * zd
            hs[d + 1] = t * z[d + 1] - 2.0 * h * t * q
        caches.append((a, z, h, t, q))
        a = hs
    WL, bL = P[1 + 2 * L], P[2 + 2 * L]
    u = a @ WL.T
    u[0] += bL
    return dict(S=S, C=C, om=om, Om=Om, caches=caches, a_last=a, u=u)


def _backward_streams(spec: Any, P, x, fw, ubar, grads, derivs: bool):
    """Adjoint of _forward_streams (MATH.md 'Backward'), accumulating into grads (list of arrays)."""
    d, m, _, L = as_tuple(spec)
    WL = P[1 + 2 * L]
    a = fw["a_last"]
    # output layer
    grads[1 + 2 * L] += np.einsum("snk,snj->kj", ubar, a)
    grads[2 + 2 * L] += ubar[0].sum(0)
    abar = ubar @ WL                                   # [S, N, H]
    for l in reversed(range(L)):
        a_in, z, h, t, q = fw["caches"][l]
        W = P[1 + 2 * l]
        zbar = np.empty_like(z)
        if derivs:
            hb, hbd, hbl = abar[0], abar[1:d + 1], abar[d + 1]
            zd, zl = z[1:d + 1], z[d + 1]
            zbar[d + 1] = t * hbl
            zbar[1:d + 1] = t * hbd - 4.0 * h * t * zd * hbl
            zbar[0] = t * (hb - 2.0 * t * q * hbl
                           - 2.0 * h * ((hbd * zd).sum(0) + hbl * (zl - 2.0 * h * q)))
        else:
            zbar[0] = t * abar[0]
        grads[1 + 2 * l] += np.einsum("snk,snj->kj", zbar, a_in)
        grads[2 + 2 * l] += zbar[0].sum(0)
        abar = zbar @ W
    # Fourier layer
    S, C, om, Om = fw["S"], fw["C"], fw["om"], fw["Om"]
    ps, pc = abar[0][:, :m], abar[0][:, m:]
    sbar = ps * C - pc * S
    if derivs:
        lps, lpc = abar[d + 1][:, :m], abar[d + 1][:, m:]
        sbar = sbar - Om * (lps * C - lpc * S)
        Bbar = np.zeros_like(om)
        for i in range(d):
            dps, dpc = abar[1 + i][:, :m], abar[1 + i][:, m:]
            sbar = sbar - om[i] * (dps * S + dpc * C)
            ombar_i = dps * C - dpc * S - 2.0 * om[i] * (lps * S + lpc * C)   # [N, m]
            Bbar[i] += ombar_i.sum(0)
    else:
        Bbar = np.zeros_like(om)
    Bbar += x.T @ sbar
    grads[0] += TWO_PI * Bbar


def loss_and_grad(theta: np.ndarray, spec: Any, *, x_pde=None, kappa=0.0, f=None, x_data=None,
                  y=None, w_pde: float = 1.0, w_data: float = 1.0) -> tuple[float, np.ndarray]:
    """float64 loss ``w_pde mean|lap u + kappa u - f|^2 + w_data mean|u - y|^2`` and its gradient
    [P] by the adjoint of the forward streams; theta [P], kappa a float, f [N, 2], y [M, 2]."""
    theta = np.asarray(theta, dtype=np.float64)
    P = list(unpack(theta, spec).values())
    grads = [np.zeros_like(p) for p in P]
    d = as_tuple(spec)[0]
    total = 0.0
    if x_pde is not None and len(x_pde):
        x = np.asarray(x_pde, np.float64)
        fw = _forward_streams(spec, P, x, True)
        u = fw["u"]
        r = u[d + 1] + kappa * u[0] - (0.0 if f is None else np.asarray(f, np.float64))
        n = x.shape[0]
        total += w_pde / n * float((r ** 2).sum())
        ubar = np.zeros_like(u)
        ubar[d + 1] = 2.0 * w_pde / n * r
        ubar[0] = kappa * ubar[d + 1]
        _backward_streams(spec, P, x, fw, ubar, grads, True)
    if x_data is not None and len(x_data):
        xd = np.asarray(x_data, np.float64)
        fw = _forward_streams(spec, P, xd, False)
        e = fw["u"][0] - np.asarray(y, np.float64)
        n = xd.shape[0]
        total += w_data / n * float((e ** 2).sum())
        ubar = (2.0 * w_data / n * e)[None]
        _backward_streams(spec, P, xd, fw, ubar, grads, False)
    return total, np.concatenate([g.ravel() for g in grads])


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------

def rel_err(a, b) -> float:
    """||a - b|| / max(||b||, tiny)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), np.finfo(np.float64).tiny))


def fd_x_grad(ufun, x: np.ndarray, h: float = 1e-4) -> np.ndarray:
    """Five-point central differences of u(x) [N, 2] in x: [N, d, 2]."""
    n, d = x.shape
    out = np.empty((n, d, 2))
    for i in range(d):
        e = np.zeros(d)
        e[i] = h
        out[:, i, :] = (8 * (ufun(x + e) - ufun(x - e)) - (ufun(x + 2 * e) - ufun(x - 2 * e))) / (12 * h)
    return out


def fd_x_lap(ufun, x: np.ndarray, h: float = 1e-3) -> np.ndarray:
    """Fourth-order central second differences of u(x) [N, 2], summed over the d axes: [N, 2]."""
    n, d = x.shape
    u0 = ufun(x)
    out = np.zeros((n, 2))
    for i in range(d):
        e = np.zeros(d)
        e[i] = h
        out += (-ufun(x + 2 * e) + 16 * ufun(x + e) - 30 * u0 + 16 * ufun(x - e)
                - ufun(x - 2 * e)) / (12 * h * h)
    return out
