"""A decomposed model that can follow the jump of u″ at a medium's jumps (partition-of-unity
enrichment), for ``bench_sharp.py --enrich GRID``.

Across a jump of κ the field u and its gradient are continuous and Δu jumps by −[κ] u: a smooth
subnetwork cannot follow the kink. The enriched model adds a level of subnetworks M_l whose
windows are multiplied by a function e that has the kink itself,

    u = Σ_j ω_j N_j + e Σ_l ω'_l M_l,    Δe = κ − G_σ ∗ κ,

(G_σ a Gaussian of standard deviation σ): e is C¹ with κ's jumps (here the training problem's
smoothed ramps) in its Laplacian, and decays away from them. It is found once by FFT on a grid
over the model's box (periodic; spacing ``h``), with its first and second derivatives, normalised
to a largest value of 1, and read at any point by cubic splines. Each enriched window's
derivatives are the product rule's, the hard constraint's
(:func:`helmpinn.models.decomposition.window_times`), so the residuals, Jacobians and
products are the core's, unchanged. A measurement, not a feature: the enrichment level's
subnetworks start at zero (their output layers), so the model starts as the plain one.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
from scipy import ndimage

from helmpinn.models.decomposition import DecomposedModel, Level, window_times
from helmpinn.params import init_params, sigma_for


def enrichment(kappa: Callable, lo, hi, sigma: float = 0.1, h: float = 0.006, pad: float = 0.3) -> Callable:
    """``E(x [N, d], derivatives) -> (e [N], ∂e [N, d] or None, ∂²_a e [N, d] or None)`` of the
    module docstring for the real part of ``kappa`` (2-D) on the box ``[lo, hi]`` (the grid
    reaches ``pad`` beyond it)."""
    lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
    if lo.shape != (2,):
        raise ValueError(f"enrichment: 2-D boxes only, got lo={lo.tolist()}")
    if not (sigma > 0 and h > 0 and pad >= 0):
        raise ValueError(f"enrichment: expected sigma > 0, h > 0 and pad >= 0, got {sigma}, {h}, {pad}")
    axes = [np.arange(lo[a] - pad, hi[a] + pad + h / 2, h) for a in range(2)]
    X, Y = np.meshgrid(*axes, indexing="ij")
    kap = np.real(np.asarray(kappa(np.stack([X.ravel(), Y.ravel()], 1)))).reshape(X.shape)
    q = kap - ndimage.gaussian_filter(kap, sigma / h, mode="wrap")
    kx, ky = np.meshgrid(*[2 * np.pi * np.fft.fftfreq(len(a), h) for a in axes], indexing="ij")
    k2 = kx ** 2 + ky ** 2
    k2[0, 0] = 1.0
    eh = -np.fft.fft2(q) / k2
    eh[0, 0] = 0.0
    fields = [np.fft.ifft2(eh * f).real for f in (1.0, 1j * kx, 1j * ky, -kx ** 2, -ky ** 2)]
    scale = float(np.abs(fields[0]).max())
    splines = [ndimage.spline_filter(f / scale, order=3) for f in fields]

    def field(x: np.ndarray, derivatives: bool):
        coords = [(x[:, a] - axes[a][0]) / h for a in range(2)]
        got = [ndimage.map_coordinates(s, coords, order=3, prefilter=False, mode="nearest")
               for s in (splines if derivatives else splines[:1])]
        if not derivatives:
            return got[0], None, None
        return got[0], np.stack(got[1:3], 1), np.stack(got[3:5], 1)
    return field


def enriched_model(base: DecomposedModel, field: Callable, grid, wavenumber: float, seed: int = 7,
                   zero: bool = True) -> DecomposedModel:
    """``base`` with one more level of ``grid`` subdomains (the first level's spec and overlap;
    Fourier scales for ``wavenumber``, as :meth:`DecomposedModel.create` sets them) whose windows
    are multiplied by ``field`` (:func:`enrichment`); ``zero``: their output layers start at zero."""
    plain = len(base.levels)

    class Enriched(type(base)):
        def _pieces(self, x, derivatives):
            ev = None
            for j, idx, psi, d1, d2, xi in super()._pieces(x, derivatives):
                if self.subdomains[j]["level"] >= plain:
                    if ev is None:
                        ev = field(x, derivatives)
                    e, e1, e2 = (None if v is None else v[idx] for v in ev)
                    psi, d1, d2 = window_times(e, e1, e2, psi, d1, d2)
                yield j, idx, psi, d1, d2, xi

    spec = base.specs[0]
    level = Level(base.lo, base.hi, grid, base.levels[0].overlap)
    out_name, out_shape, out_off = [(n, s, o) for n, s, o in spec.layout() if n.startswith("W")][-1]
    rng = np.random.default_rng(seed)
    extra = []
    for index in level.indices:
        theta = init_params(spec, dtype="float64", seed=int(rng.integers(1 << 31)), fourier_sigma=sigma_for(wavenumber * float(np.mean(level.half_of(index))), 2))
        if zero:
            theta[out_off:out_off + int(np.prod(out_shape))] = 0.0
        extra.append(theta)
    return Enriched(base.levels + [level], base.specs + [spec], np.concatenate([base.params] + extra))

