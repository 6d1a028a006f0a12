"""Point sources: :class:`PointSource`, a normalised Gaussian source term, and their density for
sampling that resolves them.

A problem takes several sources summed in its ``source=`` argument, as one list:
``Problem(..., source=[PointSource((0, 0)), PointSource((1, 0), amplitude=-1j), my_callable])``
(a PointSource is itself a callable ``x -> complex [N]``).

``PointSource(position, amplitude, width)`` is ``f(x) = A exp(−|x − x₀|²/(2σ²)) / (2πσ²)^{d/2}``,
a Gaussian of integral A that tends to ``A δ(x − x₀)`` as σ → 0. Without a width a Problem gives
it ``σ = λ/10``, λ = 2π/k with k the problem's wavenumber: narrow enough that, in a homogeneous
medium, the field away from the source is the point source's times ``exp(−k²σ²/2) ≈ 0.82`` (the
Gaussian's Fourier transform at |ξ| = k), wide enough for a network whose frequencies are about k
to resolve it.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import real_number

__all__ = ["PointSource", "WIDTH_PER_WAVELENGTH", "mixture_density", "sample_mixture"]

#: A PointSource without a width gets σ = λ / WIDTH_PER_WAVELENGTH from its problem.
WIDTH_PER_WAVELENGTH = 10.0


class PointSource:
    """A normalised Gaussian source of integral ``amplitude`` centred at ``position``.

    Parameters
    ----------
    position : sequence of d floats
        The centre x₀ (length units).
    amplitude : complex
        A, the integral of the source term (the weight of δ(x − x₀) it approximates).
    width : float > 0 or None
        σ, the Gaussian's standard deviation (length units); None: λ/10 from the problem's
        wavenumber (see the module docstring), set when the Problem is built.
    """

    def __init__(self, position: ArrayLike, amplitude: complex = 1.0, width: float | None = None):
        pos = np.atleast_1d(np.asarray(position, np.float64))
        if pos.ndim != 1 or not 1 <= pos.size <= 3 or not np.all(np.isfinite(pos)):
            raise ValueError(f"PointSource: position must be 1 to 3 finite coordinates, got {position!r}")
        try:
            amp = complex(amplitude)
        except (TypeError, ValueError):
            raise TypeError(f"PointSource: amplitude must be a complex number, got {amplitude!r}") from None
        if not (math.isfinite(amp.real) and math.isfinite(amp.imag)):
            raise ValueError(f"PointSource: amplitude must be finite, got {amplitude!r}")
        self.position = pos
        self.amplitude = amp
        self.width = None if width is None else real_number("PointSource", "width", width, low=0.0)
        self.dim = pos.size

    def __repr__(self) -> str:
        return (f"PointSource(position={self.position.tolist()}, amplitude={self.amplitude!r}, "
                f"width={self.width!r})")

    def with_wavenumber(self, k: float) -> "PointSource":
        """This source with its width set from the wavenumber k when it has none (σ = λ/10)."""
        if self.width is not None:
            return self
        k = real_number("PointSource", "the problem's wavenumber (for the default width)", k, low=0.0)
        return PointSource(self.position, self.amplitude, 2 * math.pi / k / WIDTH_PER_WAVELENGTH)

    def _width(self) -> float:
        if self.width is None:
            raise ValueError("PointSource: no width; give width= or use it in a Problem, which sets "
                             "it from the wavenumber")
        return self.width

    def density(self, x: ArrayLike) -> NDArray[np.float64]:
        """The normalised Gaussian ``exp(−|x − x₀|²/(2σ²)) / (2πσ²)^{d/2}`` at x [N, d]."""
        x = np.asarray(x, np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"PointSource: expected points of shape (N, {self.dim}), got {x.shape}")
        s = self._width()
        r2 = np.sum((x - self.position) ** 2, axis=1)
        return np.exp(-r2 / (2 * s * s)) / (2 * math.pi * s * s) ** (self.dim / 2)

    def __call__(self, x: ArrayLike) -> NDArray[np.complex128]:
        """The source term A × density at x [N, d]."""
        return self.amplitude * self.density(x)

    def sample(self, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
        """n points drawn from the Gaussian (unbounded)."""
        return self.position + self._width() * rng.standard_normal((int(n), self.dim))


def _shares(sources: Sequence[PointSource]) -> NDArray[np.float64]:
    mass = np.array([abs(s.amplitude) for s in sources], np.float64)
    if mass.sum() == 0:
        mass = np.ones(len(sources))
    return mass / mass.sum()


def mixture_density(sources: Sequence[PointSource], x: ArrayLike) -> NDArray[np.float64]:
    """g(x): the sources' Gaussians mixed in proportion to |amplitude| (equal shares when all
    amplitudes are 0); a probability density on R^d."""
    x = np.asarray(x, np.float64)
    g = np.zeros(len(x))
    for share, s in zip(_shares(sources), sources):
        g += share * s.density(x)
    return g


def sample_mixture(sources: Sequence[PointSource], n: int, rng: np.random.Generator) -> NDArray[np.float64]:
    """n points drawn from :func:`mixture_density` (unbounded: the caller drops those outside
    its domain)."""
    counts = rng.multinomial(int(n), _shares(sources))
    parts = [s.sample(c, rng) for s, c in zip(sources, counts) if c]
    d = sources[0].dim
    return np.concatenate(parts) if parts else np.empty((0, d))
