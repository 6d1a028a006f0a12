"""Flat parameter vectors: initialisation and named views."""
from __future__ import annotations

import math

import numpy as np

from ._checks import integer, real_number
from ._core import ModelSpec

__all__ = ["init_params", "sigma_for"]


def sigma_for(wavenumber: float, dim: int) -> float:
    """The Fourier scale for waves of ``wavenumber`` (angular, in the network's own coordinates)
    in ``dim`` dimensions: ``σ = k / (2π sqrt(d))``, so that the features' angular frequencies
    ``2π|B_j|``, B ~ N(0, σ²), have a root mean square of k in any dimension (a single network:
    :func:`helmpinn.defaults.fourier_sigma`; a subdomain's network: k times its half-width,
    :meth:`helmpinn.models.decomposition.DecomposedModel.create`)."""
    k = real_number("sigma_for", "wavenumber", wavenumber, low=0.0, low_open=False)
    return k / (2 * math.pi * math.sqrt(integer("sigma_for", "dim", dim, low=1)))


def init_params(spec: ModelSpec, dtype: str | np.dtype = "float32", seed: int | None = 0,
                fourier_sigma: float = 1.0) -> np.ndarray:
    """A new flat parameter vector for `spec`.

    Weights are Glorot-normal (std = sqrt(2 / (fan_in + fan_out))), biases zero, and the
    Fourier frequencies B ~ N(0, fourier_sigma^2). The same seed gives the same vector.
    """
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"spec: expected a helmpinn.ModelSpec, got {type(spec).__name__}")
    dt = np.dtype(dtype)
    if dt not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"dtype: expected float32 or float64, got {dt}")
    if not np.isfinite(fourier_sigma) or fourier_sigma < 0:
        raise ValueError(f"fourier_sigma: expected a finite number >= 0, got {fourier_sigma}")
    if seed is not None:
        seed = integer("init_params", "seed", seed, low=0)
    rng = np.random.default_rng(seed)
    theta = np.zeros(spec.num_params, dtype=np.float64)
    for name, shape, offset in spec.layout():
        size = int(np.prod(shape))
        block = theta[offset:offset + size]
        if name == "B":
            block[:] = rng.normal(0.0, fourier_sigma, size)
        elif name.startswith("W"):
            fan_out, fan_in = shape
            block[:] = rng.normal(0.0, np.sqrt(2.0 / (fan_in + fan_out)), size)
    return theta.astype(dt)
