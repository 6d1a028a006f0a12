"""The peers: the same loss and parameter gradient, written the ways people write them.

Each `build_*` takes (cfg, prob, dtype_name) and returns an `Impl`: `step()` runs one full step
(loss + gradient of every parameter), `block(result)` waits until that result is computed, and
`flat(result)` gives (loss, flat float64 gradient in helmpinn's layout) for the agreement check.
Conversion of the inputs happens once, outside `step`.

PyTorch
  torch-eager     nested autograd: torch.autograd.grad(u_c.sum(), x, create_graph=True) for the
                  gradient, then once more per partial for each second derivative (how PINN code
                  is usually written), separate parameter tensors, eager mode.
  torch-fwdlap    a hand-written forward Laplacian: value, d partials and Laplacian stacked and
                  pushed through each layer as one matrix product (MATH.md's streams); backward by
                  autograd. Eager (informative) and under torch.compile (the peer).
JAX (all under jax.jit(jax.value_and_grad(loss)))
  jax-hessian     vmap over points of jax.hessian of the per-point network, trace.
  jax-jvp2        forward-over-forward: jvp of jvp along each unit vector, on the batch.
  jax-fwdlap      the same hand-written forward Laplacian as torch-fwdlap.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from common import Config, split

TWO_PI = 2.0 * math.pi


@dataclass
class Impl:
    name: str
    step: Callable[[], Any]
    block: Callable[[Any], None]
    flat: Callable[[Any], tuple[float, np.ndarray]]


# --------------------------------------------------------------------------------------------
# PyTorch


def _torch_setup(cfg: Config, prob: dict, dtype_name: str):
    import torch
    dt = {"float32": torch.float32, "float64": torch.float64}[dtype_name]
    npdt = np.dtype(dtype_name)
    params = [torch.tensor(np.array(p, dtype=npdt)).requires_grad_(True)
              for p in split(cfg, np.asarray(prob["theta"]))]
    T = lambda a: torch.tensor(np.asarray(a, dtype=npdt))  # noqa: E731
    data = dict(x_pde=T(prob["x_pde"]), f=T(prob["f"]), x_data=T(prob["x_data"]), y=T(prob["y"]))
    return torch, dt, params, data


def _torch_flat(res):
    loss, grads = res
    return float(loss.detach().double()), np.concatenate(
        [g.detach().double().numpy().ravel() for g in grads])


def build_torch_eager(cfg: Config, prob: dict, dtype_name: str) -> Impl:
    torch, dt, params, data = _torch_setup(cfg, prob, dtype_name)
    L, d = cfg.L, cfg.d
    kappa, wp, wd = prob["kappa"], prob["w_pde"], prob["w_data"]
    x_pde = data["x_pde"].clone().requires_grad_(True)
    x_data, f, y = data["x_data"], data["f"], data["y"]

    def net(x):
        s = TWO_PI * (x @ params[0])
        h = torch.cat([torch.sin(s), torch.cos(s)], dim=1)
        for l in range(L):
            h = torch.tanh(h @ params[1 + 2 * l].T + params[2 + 2 * l])
        return h @ params[1 + 2 * L].T + params[2 + 2 * L]

    def step():
        u = net(x_pde)
        laps = []
        for c in range(2):
            g = torch.autograd.grad(u[:, c].sum(), x_pde, create_graph=True)[0]
            lap = 0.0
            for i in range(d):
                lap = lap + torch.autograd.grad(g[:, i].sum(), x_pde, create_graph=True)[0][:, i]
            laps.append(lap)
        r = torch.stack(laps, dim=1) + kappa * u - f
        loss = wp * (r ** 2).sum(dim=1).mean()
        e = net(x_data) - y
        loss = loss + wd * (e ** 2).sum(dim=1).mean()
        grads = torch.autograd.grad(loss, params)
        return loss.detach(), grads

    return Impl("torch-eager", step, lambda r: None, _torch_flat)


def torch_fwdlap_loss(torch, cfg: Config, params, x_pde, f, x_data, y, kappa, wp, wd):
    """Forward Laplacian: stacked streams, one matrix product per layer."""
    d, L = cfg.d, cfg.L
    Np, Nd = x_pde.shape[0], x_data.shape[0]
    Nv = Np + Nd
    om = TWO_PI * params[0]                       # [d, m]
    Om = (om * om).sum(0)                         # [m]
    s = torch.cat([x_pde, x_data], 0) @ om        # [Nv, m]
    S, C = torch.sin(s), torch.cos(s)
    Sp, Cp = S[:Np], C[:Np]
    rows = [torch.cat([S, C], 1)]                 # value: PDE and data points
    for i in range(d):
        rows.append(torch.cat([om[i] * Cp, -om[i] * Sp], 1))
    rows.append(torch.cat([-Om * Sp, -Om * Cp], 1))
    A = torch.cat(rows, 0)                        # [Nv + (d+1) Np, 2m]
    for l in range(L):
        Z = A @ params[1 + 2 * l].T
        zv = Z[:Nv] + params[2 + 2 * l]
        zd = Z[Nv:Nv + d * Np].reshape(d, Np, -1)
        zl = Z[Nv + d * Np:]
        h = torch.tanh(zv)
        t = 1.0 - h * h
        hp, tp = h[:Np], t[:Np]
        q = (zd * zd).sum(0)
        hd = tp * zd
        hl = tp * zl - 2.0 * hp * tp * q
        A = torch.cat([h, hd.reshape(d * Np, -1), hl], 0)
    WL, bL = params[1 + 2 * L], params[2 + 2 * L]
    uv = A[:Nv] @ WL.T + bL                       # partials not needed at the output
    ul = A[Nv + d * Np:] @ WL.T
    r = ul + kappa * uv[:Np] - f
    e = uv[Np:] - y
    return wp * (r * r).sum(1).mean() + wd * (e * e).sum(1).mean()


def build_torch_fwdlap(cfg: Config, prob: dict, dtype_name: str, compiled: bool) -> Impl:
    torch, dt, params, data = _torch_setup(cfg, prob, dtype_name)
    kappa, wp, wd = prob["kappa"], prob["w_pde"], prob["w_data"]

    def loss_fn(ps, x_pde, f, x_data, y):
        return torch_fwdlap_loss(torch, cfg, ps, x_pde, f, x_data, y, kappa, wp, wd)

    fn = torch.compile(loss_fn, dynamic=False, fullgraph=True) if compiled else loss_fn
    args = (data["x_pde"], data["f"], data["x_data"], data["y"])

    def step():
        loss = fn(params, *args)
        grads = torch.autograd.grad(loss, params)
        return loss.detach(), grads

    return Impl("torch-compile" if compiled else "torch-fwdlap-eager", step, lambda r: None,
                _torch_flat)


# --------------------------------------------------------------------------------------------
# JAX


def _jax_setup(cfg: Config, prob: dict, dtype_name: str):
    import jax
    if dtype_name == "float64":
        jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    npdt = np.dtype(dtype_name)
    params = [jnp.asarray(np.array(p, dtype=npdt)) for p in split(cfg, np.asarray(prob["theta"]))]
    J = lambda a: jnp.asarray(np.asarray(a, dtype=npdt))  # noqa: E731
    data = (J(prob["x_pde"]), J(prob["f"]), J(prob["x_data"]), J(prob["y"]))
    for a in params + list(data):
        assert a.dtype == npdt, (a.dtype, npdt)
    return jax, jnp, params, data


def _jax_net(jnp, cfg: Config, P, x):
    """The network on a batch x [N, d] (or a single point [d]) -> [N, 2] (or [2])."""
    s = TWO_PI * (x @ P[0])
    h = jnp.concatenate([jnp.sin(s), jnp.cos(s)], axis=-1)
    for l in range(cfg.L):
        h = jnp.tanh(h @ P[1 + 2 * l].T + P[2 + 2 * l])
    return h @ P[1 + 2 * cfg.L].T + P[2 + 2 * cfg.L]


def _jax_impl(name, jax, cfg, params, data, loss_fn) -> Impl:
    vg = jax.jit(jax.value_and_grad(loss_fn))

    def step():
        return vg(params, *data)

    def block(res):
        jax.block_until_ready(res)

    def flat(res):
        loss, grads = res
        return float(loss), np.concatenate([np.asarray(g, dtype=np.float64).ravel() for g in grads])

    return Impl(name, step, block, flat)


def build_jax(cfg: Config, prob: dict, dtype_name: str, variant: str) -> Impl:
    jax, jnp, params, data = _jax_setup(cfg, prob, dtype_name)
    d, L = cfg.d, cfg.L
    kappa, wp, wd = prob["kappa"], prob["w_pde"], prob["w_data"]

    def data_term(P, x_data, y):
        e = _jax_net(jnp, cfg, P, x_data) - y
        return wd * jnp.mean(jnp.sum(e * e, axis=1))

    if variant == "hessian":
        def u_point(P, x):                                   # x [d] -> [2]
            return _jax_net(jnp, cfg, P, x)

        def u_lap_point(P, x):
            Hs = jax.hessian(u_point, argnums=1)(P, x)       # [2, d, d]
            return u_point(P, x), jnp.trace(Hs, axis1=1, axis2=2)

        def loss_fn(P, x_pde, f, x_data, y):
            u, lap = jax.vmap(u_lap_point, in_axes=(None, 0))(P, x_pde)
            r = lap + kappa * u - f
            return wp * jnp.mean(jnp.sum(r * r, axis=1)) + data_term(P, x_data, y)

    elif variant == "jvp2":
        def loss_fn(P, x_pde, f, x_data, y):
            net = lambda X: _jax_net(jnp, cfg, P, X)       # noqa: E731
            lap = 0.0
            u = None
            for i in range(d):
                e_i = jnp.zeros_like(x_pde).at[:, i].set(1.0)
                first = lambda X: jax.jvp(net, (X,), (e_i,))  # noqa: E731, B023
                (u, _), (_, d2u) = jax.jvp(first, (x_pde,), (e_i,))
                lap = lap + d2u
            r = lap + kappa * u - f
            return wp * jnp.mean(jnp.sum(r * r, axis=1)) + data_term(P, x_data, y)

    elif variant == "fwdlap":
        def loss_fn(P, x_pde, f, x_data, y):
            Np, Nd = x_pde.shape[0], x_data.shape[0]
            Nv = Np + Nd
            om = TWO_PI * P[0]
            Om = (om * om).sum(0)
            s = jnp.concatenate([x_pde, x_data], 0) @ om
            S, C = jnp.sin(s), jnp.cos(s)
            Sp, Cp = S[:Np], C[:Np]
            rows = [jnp.concatenate([S, C], 1)]
            for i in range(d):
                rows.append(jnp.concatenate([om[i] * Cp, -om[i] * Sp], 1))
            rows.append(jnp.concatenate([-Om * Sp, -Om * Cp], 1))
            A = jnp.concatenate(rows, 0)
            for l in range(L):
                Z = A @ P[1 + 2 * l].T
                zv = Z[:Nv] + P[2 + 2 * l]
                zd = Z[Nv:Nv + d * Np].reshape(d, Np, -1)
                zl = Z[Nv + d * Np:]
                h = jnp.tanh(zv)
                t = 1.0 - h * h
                hp, tp = h[:Np], t[:Np]
                q = (zd * zd).sum(0)
                A = jnp.concatenate([h, (tp * zd).reshape(d * Np, -1),
                                     tp * zl - 2.0 * hp * tp * q], 0)
            WL, bL = P[1 + 2 * L], P[2 + 2 * L]
            uv = A[:Nv] @ WL.T + bL
            ul = A[Nv + d * Np:] @ WL.T
            r = ul + kappa * uv[:Np] - f
            e = uv[Np:] - y
            return wp * jnp.mean(jnp.sum(r * r, 1)) + wd * jnp.mean(jnp.sum(e * e, 1))
    else:
        raise ValueError(variant)

    return _jax_impl(f"jax-{variant}", jax, cfg, params, data, loss_fn)


JAX_VARIANTS = ("hessian", "jvp2", "fwdlap")
TORCH_IMPLS = ("torch-eager", "torch-fwdlap-eager", "torch-compile")


def build(impl: str, cfg: Config, prob: dict, dtype_name: str) -> Impl:
    if impl == "torch-eager":
        return build_torch_eager(cfg, prob, dtype_name)
    if impl == "torch-fwdlap-eager":
        return build_torch_fwdlap(cfg, prob, dtype_name, compiled=False)
    if impl == "torch-compile":
        return build_torch_fwdlap(cfg, prob, dtype_name, compiled=True)
    if impl.startswith("jax-"):
        return build_jax(cfg, prob, dtype_name, impl[4:])
    raise ValueError(impl)


