"""The 3-D open-domain benchmarks: ``free-source-3d``, a Gaussian source at the centre of a cube
closed by a PML, with the exact outgoing field in closed form, and ``scatter-sphere``, a plane wave
on a sound-soft sphere in a PML cube, with its exact series.

The source is the normalised Gaussian of width s, ``g(r) = exp(−r²/(2s²)) / (2πs²)^{3/2}``, and
the equation ``Δu + k²u = −A g`` (the sign of the 2-D ``free-source``; a
:class:`~helmpinn.problems.sources.PointSource` of amplitude A is ``f = +A g``, whose field is minus
this one). The outgoing field (time convention ``e^{−iωt}``) is the free-space Green's function
``e^{ikr}/(4πr)`` convolved with A g. For a radial field ``Δu = (ru)″/r``, so ``v = r u``
solves the 1-D problem ``v″ + k²v = −A r g(r)`` on the whole line (``r g`` is odd, v(0) = 0),
whose outgoing solution is ``v = (i/(2k)) ∫ e^{ik|r−t|} A t g(t) dt``. With ``t g = −s² g′``,
one integration by parts and the Gaussian integrals in Faddeeva's function
``w(z) = e^{−z²} erfc(−iz)``:

    u(r) = A / (8πr) · [ 2 e^{−k²s²/2} e^{ikr} − e^{−r²/(2s²)} ( w(z₋) + w(z₊) ) ],
    z± = (i r ± k s²) / (s√2),

both arguments in the upper half plane, where w is bounded: no overflow at any r. Far from the
source (r ≳ 5 s) the second term is below 1e-10 of the first and u is exactly the point
source's field times ``e^{−k²s²/2}``, the Gaussian's Fourier transform at ``|ξ| = k``. At r → 0 the
bracket vanishes to first order: below ``r = 1e-3 s`` the field is its Taylor polynomial
``u(0) + u″(0) r²/2`` with ``u(0) = A s² (1 + i√π q w(q)) / (2πs²)^{3/2}``, ``q = ks/√2``, and
``3 u″(0) = Δu(0) = −k²u(0) − A g(0)`` (its error is O((r/s)⁴), below 1e-12).

``free-source-3d`` poses it as a user would: the physical cube ``[−1, 1]³``, ``W`` wavelengths
across (``k = πW``), the source a :class:`~helmpinn.problems.sources.PointSource` of amplitude −1 at the
origin (width ``s``: the PointSource default λ/10 when not given) and a PML ``pml_width`` wide
(one wavelength by default).

``scatter-sphere``: the incident plane wave ``u_inc = e^{ikz}`` on a sound-soft sphere of radius a
at the origin (``u + u_inc = 0`` on it); the unknown is the scattered field u in the cube
``[−1, 1]³`` less the ball, in a PML. With ``e^{ikz} = Σ_n i^n (2n+1) j_n(kr) P_n(cos θ)``
(θ the angle from the z axis) and outgoing spherical waves ``h_n = h_n^{(1)} = j_n + i y_n``
(time convention ``e^{−iωt}``), the field that cancels the incident one on ``r = a`` is

    u(r, θ) = −Σ_n i^n (2n+1) (j_n(ka) / h_n(ka)) h_n(kr) P_n(cos θ),

summed to ``n = ka + 20`` (for r >= a each term is at most about ``(2n+1)|j_n(ka)|`` and those
beyond fall below double precision: :func:`sphere_series_terms`).
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import real_number
from .builtin import MAX_WAVENUMBER
from .conditions import Dirichlet
from .geometry import Ball, Box, BoxMinusBall
from .pml import PML
from .problem import Problem
from .sources import WIDTH_PER_WAVELENGTH, PointSource

__all__ = ["gaussian_source_field_3d", "free_source_3d", "sphere_scattered_field", "sphere_series_terms",
           "scatter_sphere", "MAX_SPHERE_TERMS", "PROBLEMS"]

#: The most orders n the sphere's series may take (``ka <= MAX_SPHERE_TERMS - 20``).
MAX_SPHERE_TERMS = 400

#: Below this share of the width the field is its Taylor polynomial (see the module docstring).
_TAYLOR_BELOW = 1e-3


def _radial_field(r: NDArray, k: float, s: float) -> NDArray[np.complex128]:
    """u(r) for A = 1 (the module docstring's formula), r >= 0."""
    from scipy.special import wofz

    a = s * math.sqrt(2.0)
    q = k * s / math.sqrt(2.0)
    near = r < _TAYLOR_BELOW * s
    rr = np.where(near, 1.0, r)
    zm = (1j * rr - k * s * s) / a
    zp = (1j * rr + k * s * s) / a
    bracket = (2.0 * math.exp(-0.5 * k * k * s * s) * np.exp(1j * k * rr)
               - np.exp(-rr * rr / (2 * s * s)) * (wofz(zm) + wofz(zp)))
    u = bracket / (8.0 * math.pi * rr)
    peak = 1.0 / (2.0 * math.pi * s * s) ** 1.5
    u0 = peak * s * s * (1.0 + 1j * math.sqrt(math.pi) * q * complex(wofz(q)))
    u2 = (-k * k * u0 - peak) / 3.0   # 3u″(0) = Δu(0) = −k²u(0) − g(0)
    return np.where(near, u0 + 0.5 * u2 * r * r, u)


def gaussian_source_field_3d(x: ArrayLike, k: float, s: float, amplitude: complex = 1.0,
                             centre: ArrayLike = (0.0, 0.0, 0.0)) -> NDArray[np.complex128]:
    """The outgoing field (complex [N]) at x [N, 3] of ``Δu + k²u = −A g``, g the normalised
    Gaussian of width s centred at ``centre`` (the closed form of the module docstring).

    A :class:`~helmpinn.problems.sources.PointSource` ``(centre, amplitude=B, width=s)`` is ``f = +B g``:
    its field is this one with ``amplitude = −B``."""
    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"gaussian_source_field_3d: x must have shape (N, 3), got {x.shape}")
    k = real_number("gaussian_source_field_3d", "k", k, low=0.0, high=MAX_WAVENUMBER)
    s = real_number("gaussian_source_field_3d", "s", s, low=0.0)
    c = np.asarray(centre, np.float64)
    if c.shape != (3,) or not np.all(np.isfinite(c)):
        raise ValueError(f"gaussian_source_field_3d: centre must be 3 finite numbers, got {centre!r}")
    r = np.sqrt(np.sum((x - c) ** 2, axis=1))
    return complex(amplitude) * _radial_field(r, k, s)


def free_source_3d(wavelengths: float = 2.0, s: float | None = None, pml_width: float | None = None) -> Problem:
    """A Gaussian source at the centre of the cube ``[−1, 1]³`` in a PML (module docstring):
    ``wavelengths`` W across the cube (k = πW), the source's width ``s`` (default λ/10, the
    PointSource default), the layer ``pml_width`` wide (default one wavelength)."""
    W = real_number("free-source-3d", "wavelengths", wavelengths, low=0.0, high=MAX_WAVENUMBER / math.pi)
    k = math.pi * W
    lam = 2.0 * math.pi / k
    s = lam / WIDTH_PER_WAVELENGTH if s is None else real_number("free-source-3d", "s", s, low=0.0, high=1.0)
    width = lam if pml_width is None else real_number("free-source-3d", "pml_width", pml_width, low=0.0)
    return Problem(Box([-1.0] * 3, [1.0] * 3), kappa=k * k,
                   source=PointSource((0.0, 0.0, 0.0), amplitude=-1.0, width=s), bcs={},
                   exact=lambda x: gaussian_source_field_3d(x, k, s), wavenumber=k, pml=PML(width))


def sphere_series_terms(k: float, radius: float, where: str = "sphere_scattered_field") -> int:
    """N, the last order of the sphere's series (``n = 0 .. N``): ``ceil(ka) + 20``. Raises
    ValueError naming k, the radius and the limit beyond :data:`MAX_SPHERE_TERMS`."""
    ka = float(k) * float(radius)
    n = int(math.ceil(ka)) + 20 if math.isfinite(ka) else math.inf
    if not n <= MAX_SPHERE_TERMS:
        raise ValueError(f"{where}: k = {k:g} with radius = {radius:g} needs {n} orders of the sphere's "
                         f"series; the limit is {MAX_SPHERE_TERMS} (k * radius <= {MAX_SPHERE_TERMS - 20})")
    return n


def sphere_scattered_field(x: ArrayLike, k: float, radius: float) -> NDArray[np.complex128]:
    """The field (complex [N]) at points x [N, 3] outside the sphere ``|x| = radius`` scattered by
    it from the plane wave ``e^{ikz}``, the sphere sound-soft (the series of the module
    docstring)."""
    from scipy.special import eval_legendre, spherical_jn, spherical_yn

    x = np.asarray(x, np.float64)
    if x.ndim != 2 or x.shape[1] != 3:
        raise ValueError(f"sphere_scattered_field: x must have shape (N, 3), got {x.shape}")
    k = real_number("sphere_scattered_field", "k", k, low=0.0, high=MAX_WAVENUMBER)
    radius = real_number("sphere_scattered_field", "radius", radius, low=0.0)
    r = np.linalg.norm(x, axis=1)
    if np.any(r < radius * (1 - 1e-12)):
        raise ValueError(f"sphere_scattered_field: points inside the sphere of radius {radius:g} "
                         f"(the smallest |x| is {float(r.min()):.3g})")
    cos_theta = x[:, 2] / r
    ka, kr = k * radius, k * r
    u = np.zeros(len(x), np.complex128)
    for n in range(sphere_series_terms(k, radius) + 1):
        c = spherical_jn(n, ka) / (spherical_jn(n, ka) + 1j * spherical_yn(n, ka))
        h = spherical_jn(n, kr) + 1j * spherical_yn(n, kr)
        u -= (1j ** n) * (2 * n + 1) * c * h * eval_legendre(n, cos_theta)
    return u


def scatter_sphere(wavelengths: float = 4.0, radius: float = 0.25, pml_width: float | None = None) -> Problem:
    """A plane wave ``e^{ikz}`` on a sound-soft sphere of ``radius`` at the centre of the cube
    ``[−1, 1]³`` in a PML (module docstring): ``wavelengths`` W across the cube (k = πW), the layer
    ``pml_width`` wide (default one wavelength); the unknown is the scattered field."""
    where = "scatter-sphere"
    W = real_number(where, "wavelengths", wavelengths, low=0.0, high=MAX_WAVENUMBER / math.pi)
    radius = real_number(where, "radius", radius, low=0.0, high=1.0, high_open=True)
    k = math.pi * W
    lam = 2.0 * math.pi / k
    width = lam if pml_width is None else real_number(where, "pml_width", pml_width, low=0.0)
    sphere_series_terms(k, radius, where)   # refuse before any evaluation of the series

    def incident(x):
        return np.exp(1j * k * np.asarray(x)[:, 2])

    domain = BoxMinusBall(Box([-1.0] * 3, [1.0] * 3), Ball((0.0, 0.0, 0.0), radius))
    return Problem(domain, kappa=k * k, source=None, bcs={"scatterer": Dirichlet(lambda x: -incident(x))},
                   exact=lambda x: sphere_scattered_field(x, k, radius), wavenumber=k, pml=PML(width))


#: The problems of this module by name (read by :mod:`helmpinn.problems.registry`).
PROBLEMS = {
    "free-source-3d": (free_source_3d,
                       "Gaussian source at the centre of [-1,1]^3 in a PML one wavelength wide; "
                       "closed-form solution (options wavelengths, s, pml_width)"),
    "scatter-sphere": (scatter_sphere,
                       "plane wave e^{ikz} on a sound-soft sphere at the centre of [-1,1]^3 in a PML one "
                       "wavelength wide; exact series (options wavelengths, radius, pml_width)"),
}
