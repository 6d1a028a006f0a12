"""Point sources: :class:`PointSource`, a normalised Gaussian source term, and their density for
sampling that resolves them.

A problem takes several sources summed in its ``source=`` argument, as one list:
``Problem(..., source=[PointSource((0, 0)), PointSource((1, 0), amplitude=-1j), my_callable])``
(a PointSource is itself a callable ``x -> complex [N]``).

``PointSource(position, amplitude, width)`` is ``f(x) = A exp(−|x − x₀|²/(2σ²)) / (2πσ²)^{d/2}``,
a Gaussian of integral A that tends to ``A δ(x − x₀)`` as σ → 0. Without a width a Problem gives
it ``σ = λ/10``, λ = 2π/k with k the medium's wavenumber at the source (the problem's wavenumber
in a constant medium): narrow enough that, in a homogeneous medium, the field away from the
source is the point source's times ``exp(−k²σ²/2) ≈ 0.82`` (the Gaussian's Fourier transform at
``|ξ| = k``), wide enough for a network whose frequencies are about k to resolve it.
"""
from __future__ import annotations

import math
import sys
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import complex_number, real_number

__all__ = ["PointSource", "FreeSpaceSource", "WIDTH_PER_WAVELENGTH", "mixture_density", "sample_mixture"]

#: A PointSource without a width gets σ = λ / WIDTH_PER_WAVELENGTH from its problem.
WIDTH_PER_WAVELENGTH = 10.0


def _width_with_finite_peak(width, dim: int, amplitude: complex) -> float:
    """``width`` checked as a PointSource's σ: a finite number > 0 whose Gaussian's
    normalisation ``(2πσ²)^{d/2}`` is a positive finite float with a finite peak ``|A| /
    (2πσ²)^{d/2}`` and a normal float σ²: below about 1.5e-154 (1e-103 in 3-D) σ² or the
    normalisation underflows and the source is NaN or infinite at its centre; above about 1e154
    σ² overflows and the source vanishes everywhere."""
    s = real_number("PointSource", "width", width, low=0.0)
    try:
        norm = (2 * math.pi * s * s) ** (dim / 2)
    except OverflowError:   # Python's float power raises where NumPy's gives inf
        norm = math.inf
    if not (s * s >= sys.float_info.min and math.isfinite(norm) and norm > 0
            and math.isfinite(max(1.0, abs(amplitude)) / norm)):
        what = "underflows (the source would be infinite or NaN at its centre)" if s < 1 else \
            "overflows (the source would be zero everywhere)"
        raise ValueError(f"PointSource: width {width!r} is out of range in {dim}-D: the Gaussian's "
                         f"normalisation (2π width²)^(d/2) {what}")
    return s


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
        wavenumber (see the module docstring), set when the Problem is built. A width whose
        normalisation ``(2πσ²)^{d/2}`` underflows or overflows in float64 is refused.
    """

    def __init__(self, position: ArrayLike, amplitude: complex = 1.0, width: float | None = None):
        pos = np.atleast_1d(np.asarray(position, np.float64))
        # |x| below 1e150: distances (their squares) to the source stay finite
        if pos.ndim != 1 or not 1 <= pos.size <= 3 or not np.all(np.abs(pos) < 1e150):
            raise ValueError(f"PointSource: position must be 1 to 3 finite coordinates (below 1e150 "
                             f"in size), got {position!r}")
        self.position = pos
        self.amplitude = complex_number("PointSource", "amplitude", amplitude)
        self.dim = pos.size
        self.width = None if width is None else _width_with_finite_peak(width, self.dim, self.amplitude)

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
        with np.errstate(over="ignore", under="ignore"):   # far from a narrow source: exp(−inf) = 0
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
    """g(x): the sources' Gaussians mixed in proportion to ``|amplitude|`` (equal shares when all
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


class FreeSpaceSource:
    """An exact point source in a homogeneous medium of wavenumber ``k0``: the outgoing field::

        u₀(x) = A G(|x − x₀|),   G(r) = (i/(2k₀)) e^{ik₀r} (1-D), (i/4) H₀⁽¹⁾(k₀r) (2-D),
                                        e^{ik₀r}/(4πr) (3-D),

    the solution of ``Δu₀ + k₀²u₀ = −A δ(x − x₀)`` (time convention e^{−iωt}). Given to a
    :class:`~helmpinn.Problem` as ``background=``, it turns the problem into its scattered-field
    form (see the Problem's module docstring): the network solves for ``u_s = u − u₀``, smooth
    where the medium is homogeneous around x₀, instead of the singular total field u.

    **At the source.** Points closer to x₀ than :attr:`core_radius` (``1e-9 (1 + max_i |x₀_i|)``
    length units: x₀ up to rounding) are "at the source" (:meth:`at_source`). In 2-D and 3-D u₀,
    its gradient and its second partials are infinite there, and evaluating them at such a point
    raises ValueError naming the point of ``x``; in 1-D u₀ is finite there (``iA/(2k₀)``) and only
    its derivatives raise. A :class:`~helmpinn.Problem` handles these points itself: its
    scattered-field source takes its limit 0 there (the medium is homogeneous around x₀),
    :meth:`~helmpinn.Problem.total_field` and :meth:`~helmpinn.Problem.exact_at` are NaN there
    (2-D, 3-D) and its test points leave them out.

    Parameters
    ----------
    position : sequence of d floats
        x₀ (length units).
    wavenumber : float in [1e-8, 1e8]
        k₀, the medium's wavenumber at the source (κ(x₀) = k₀² is checked by the Problem).
    amplitude : complex
        A.
    """

    def __init__(self, position: ArrayLike, wavenumber: float, amplitude: complex = 1.0):
        probe = PointSource(position, amplitude, width=1.0)  # the same checks of both
        self.position, self.amplitude, self.dim = probe.position, probe.amplitude, probe.dim
        # 1e-8..1e8: beyond them the field overflows (its 1/k² scale) or means nothing
        self.wavenumber = real_number("FreeSpaceSource", "wavenumber", wavenumber, low=1e-8, high=1e8,
                                      low_open=False)

    def __repr__(self) -> str:
        return (f"FreeSpaceSource(position={self.position.tolist()}, wavenumber={self.wavenumber!r}, "
                f"amplitude={self.amplitude!r})")

    def _radial(self, r: NDArray) -> tuple[NDArray, NDArray, NDArray]:
        """G, G′, G″ at the distances r (> 0)."""
        k = self.wavenumber
        if self.dim == 1:
            g = (0.5j / k) * np.exp(1j * k * r)
            return g, 1j * k * g, -k * k * g
        if self.dim == 2:
            from scipy.special import hankel1

            if r.size and k * float(np.max(r)) > 1e14:   # SciPy's Hankel functions give NaN there
                raise ValueError(f"FreeSpaceSource: k0 r = {k * float(np.max(r)):.3g} is beyond the "
                                 "range where H0(k0 r) is evaluated (1e14)")

            h0, h1 = hankel1(0, k * r), hankel1(1, k * r)
            return 0.25j * h0, -0.25j * k * h1, -0.25j * k * k * (h0 - h1 / (k * r))
        g = np.exp(1j * k * r) / (4 * math.pi * r)
        d1 = 1j * k - 1.0 / r
        return g, g * d1, g * (d1 * d1 + 1.0 / (r * r))

    @property
    def core_radius(self) -> float:
        """Points closer than this to the source are at it (:meth:`at_source`): ``1e-9 (1 +
        max_i |x₀_i|)``, in length units."""
        return 1e-9 * (1.0 + float(np.max(np.abs(self.position))))

    def _parts(self, x: ArrayLike, what: str, singular: bool = True):
        """(x − x₀, r) at x [N, d]; ValueError naming the first point at the source when
        ``singular`` (the value asked for is infinite there)."""
        x = np.asarray(x, np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"FreeSpaceSource: expected points of shape (N, {self.dim}), got {x.shape}")
        dx = x - self.position
        r = np.sqrt(np.sum(dx * dx, axis=1))
        if singular:
            near = np.flatnonzero(r < self.core_radius)
            if near.size:
                i = int(near[0])
                raise ValueError(f"FreeSpaceSource.{what}: x[{i}] = {x[i].tolist()} is at the source "
                                 f"{self.position.tolist()} (within core_radius {self.core_radius:.3g}), "
                                 f"where {what} is singular; at_source(x) finds such points")
        return dx, r

    def at_source(self, x: ArrayLike) -> NDArray[np.bool_]:
        """Which points of x [N, d] are at the source: closer to it than :attr:`core_radius`."""
        return self._parts(x, "at_source", singular=False)[1] < self.core_radius

    def __call__(self, x: ArrayLike) -> NDArray[np.complex128]:
        """u₀ at x [N, d] (ValueError at the source in 2-D and 3-D: see the class docstring)."""
        _, r = self._parts(x, "u0", singular=self.dim > 1)
        return self.amplitude * self._radial(r)[0]

    def gradient(self, x: ArrayLike) -> NDArray[np.complex128]:
        """∇u₀ [N, d] at x (ValueError at the source)."""
        dx, r = self._parts(x, "gradient")
        return self.amplitude * (self._radial(r)[1] / r)[:, None] * dx

    def second_partials(self, x: ArrayLike) -> NDArray[np.complex128]:
        """The second partials ``∂²u₀/∂x_j²`` [N, d] at x (their sum is ``−k₀² u₀``; ValueError
        at the source)."""
        dx, r = self._parts(x, "second_partials")
        _, g1, g2 = self._radial(r)
        e = dx * dx / (r * r)[:, None]
        return self.amplitude * (g2[:, None] * e + (g1 / r)[:, None] * (1.0 - e))
