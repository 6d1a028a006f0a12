"""A pure-NumPy float64 reference: MATH.md's forward streams and its adjoint formulas, as written.

Independent of autograd and of helmpinn; the benchmark checks it against PyTorch's autograd and
helmpinn against both. Only PDE and data terms (what the benchmark uses).
"""
from __future__ import annotations

import math

import numpy as np

from common import Config, split

TWO_PI = 2.0 * math.pi


def _forward_streams(cfg: Config, P: list[np.ndarray], x: np.ndarray, derivs: bool):
    """Streams through the net. Returns the per-layer caches and the output streams.

    With derivs, a stream array has shape [d+2, N, K]: value, d partials, Laplacian.
    Without, [1, N, K] (value only).
    """
    d, L = cfg.d, cfg.L
    B = P[0]
    om = TWO_PI * B                      # [d, m]
    Om = (om ** 2).sum(0)                # [m]
    s = x @ om                           # [N, m]
    S, C = np.sin(s), np.cos(s)
    if derivs:
        a = np.empty((d + 2, x.shape[0], 2 * cfg.m))
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


def _backward_streams(cfg: Config, P, x, fw, ubar, grads, derivs: bool):
    """Adjoint of _forward_streams (MATH.md 'Backward'), accumulating into grads (list of arrays)."""
    d, L = cfg.d, cfg.L
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
    m = cfg.m
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


def loss_and_grad(cfg: Config, prob: dict) -> tuple[float, np.ndarray]:
    theta = np.asarray(prob["theta"], dtype=np.float64)
    P = split(cfg, theta)
    grads = [np.zeros_like(p) for p in P]
    kappa, wp, wd = prob["kappa"], prob["w_pde"], prob["w_data"]
    loss = 0.0
    x = np.asarray(prob["x_pde"], np.float64)
    if x.shape[0]:
        fw = _forward_streams(cfg, P, x, True)
        u = fw["u"]
        r = u[cfg.d + 1] + kappa * u[0] - prob["f"]
        Nc = x.shape[0]
        loss += wp / Nc * float((r ** 2).sum())
        ubar = np.zeros_like(u)
        ubar[cfg.d + 1] = 2.0 * wp / Nc * r
        ubar[0] = kappa * ubar[cfg.d + 1]
        _backward_streams(cfg, P, x, fw, ubar, grads, True)
    xd = np.asarray(prob["x_data"], np.float64)
    if xd.shape[0]:
        fw = _forward_streams(cfg, P, xd, False)
        e = fw["u"][0] - prob["y"]
        Nd = xd.shape[0]
        loss += wd / Nd * float((e ** 2).sum())
        ubar = (2.0 * wd / Nd * e)[None]
        _backward_streams(cfg, P, xd, fw, ubar, grads, False)
    return loss, np.concatenate([g.ravel() for g in grads])
