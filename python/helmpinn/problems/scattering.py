"""Built-in open-domain problems: a plane wave scattered by a circular cylinder, with a PML.

The unknown is the scattered field ``u`` of the incident plane wave
``u_inc = exp(i k (x cos θ + y sin θ))`` on a cylinder of radius ``R`` at the origin, in the box
``[−π, π]²`` surrounded by a :class:`~helmpinn.problems.pml.PML`. Its exact solution is the Hankel series
(outgoing waves ``H_n = H_n^{(1)}``, time convention ``e^{−iωt}``, as the Sommerfeld condition
``∂u/∂n − iku = 0``)

    u(r, φ) = −Σ_n i^n c_n H_n(kr) e^{in(φ − θ)},   c_n = J_n(kR)/H_n(kR) (sound-soft),
                                                    c_n = J_n′(kR)/H_n′(kR) (sound-hard),

from ``u_inc = Σ_n i^n J_n(kr) e^{in(φ−θ)}``: sound-soft is ``u = −u_inc`` on the cylinder
(Dirichlet), sound-hard ``∂u/∂n = −∂u_inc/∂n`` (Neumann, n pointing into the cylinder).
"""
from __future__ import annotations

import math

import numpy as np

from .._checks import real_number
from .builtin import MAX_WAVENUMBER
from .geometry import Box, BoxMinusBall, Disk
from .pml import PML
from .conditions import Dirichlet, Neumann
from .problem import Problem

__all__ = ["cylinder_scattered_field", "series_terms", "MAX_SERIES_TERMS", "PROBLEMS"]

#: The most orders m (``|n| <= m``) the exact series may take: ``k * radius <= MAX_SERIES_TERMS - 20``.
MAX_SERIES_TERMS = 2000

_HALF = math.pi  # the physical box is [-pi, pi]^2 (DeepXDE's sound-hard benchmark box)


def series_terms(k: float, radius: float, where: str = "cylinder_scattered_field") -> int:
    """m, the largest order of the exact series (``|n| <= m``): terms beyond ``kR + 20`` are below
    double precision for r >= R. Raises ValueError naming k, the radius and the limit when m
    exceeds :data:`MAX_SERIES_TERMS` (the series would take minutes at every evaluation)."""
    kr = float(k) * float(radius)
    m = int(math.ceil(kr)) + 20 if math.isfinite(kr) else math.inf
    if not m <= MAX_SERIES_TERMS:
        raise ValueError(f"{where}: k = {k:g} with radius = {radius:g} needs {m} orders of the "
                         f"exact Hankel series; the limit is {MAX_SERIES_TERMS} "
                         f"(k * radius <= {MAX_SERIES_TERMS - 20})")
    return m


def cylinder_scattered_field(x, k: float, radius: float, theta: float, hard: bool):
    """The exact scattered field (complex [N]) at points x [N, 2] outside the cylinder."""
    from scipy import special

    x = np.asarray(x, np.float64)
    r = np.hypot(x[:, 0], x[:, 1])
    phi = np.arctan2(x[:, 1], x[:, 0])
    m = series_terms(k, radius)
    kR = k * radius
    u = np.zeros(len(x), np.complex128)
    for n in range(-m, m + 1):
        if hard:
            c = special.jvp(n, kR) / special.h1vp(n, kR)
        else:
            c = special.jv(n, kR) / special.hankel1(n, kR)
        u -= (1j**n) * c * special.hankel1(n, k * r) * np.exp(1j * n * (phi - theta))
    return u


def _scatter(hard: bool, k: float, radius: float, theta: float, pml_width: float) -> Problem:
    """The problem as a user would write it: no hints, its training settings are the general
    defaults' (:mod:`helmpinn.defaults`; measurements in docs/benchmarks-archive.md)."""
    where = "scatter-hard" if hard else "scatter-soft"
    k = real_number(where, "k", k, low=0.0, high=MAX_WAVENUMBER)
    radius = real_number(where, "radius", radius, low=0.0, high=_HALF, high_open=True)
    theta = real_number(where, "theta", theta)
    pml_width = real_number(where, "pml_width", pml_width, low=0.0)
    series_terms(k, radius, where)  # refuse before any evaluation of the series
    dvec = np.array([math.cos(theta), math.sin(theta)])

    def incident(x):
        return np.exp(1j * k * (np.asarray(x) @ dvec))

    def exact(x):
        return cylinder_scattered_field(x, k, radius, theta, hard)

    if hard:
        # d(u + u_inc)/dn = 0: du/dn = -grad(u_inc) . n = -i k (d . n) u_inc
        bc = Neumann(lambda x, nrm: -1j * k * (nrm @ dvec) * incident(x))
    else:
        bc = Dirichlet(lambda x: -incident(x))
    domain = BoxMinusBall(Box([-_HALF, -_HALF], [_HALF, _HALF]), Disk((0.0, 0.0), radius))
    return Problem(domain, kappa=k * k, source=None, bcs={"scatterer": bc}, exact=exact,
                   wavenumber=k, pml=PML(pml_width))


def scatter_hard(k: float = 2.0, radius: float = math.pi / 4, theta: float = 0.0,
                 pml_width: float = 1.0) -> Problem:
    return _scatter(True, k, radius, theta, pml_width)


def scatter_soft(k: float = 2.0, radius: float = math.pi / 4, theta: float = 0.0,
                 pml_width: float = 1.0) -> Problem:
    return _scatter(False, k, radius, theta, pml_width)


#: The scattering problems by name: (factory, one-line description); :mod:`helmpinn.problems.registry` reads it.
PROBLEMS = {
    "scatter-hard": (scatter_hard,
                     "plane wave on a sound-hard cylinder in [-pi,pi]^2 with a PML, Hankel-series "
                     "solution (options k, radius, theta, pml_width)"),
    "scatter-soft": (scatter_soft,
                     "plane wave on a sound-soft cylinder in [-pi,pi]^2 with a PML, Hankel-series "
                     "solution (options k, radius, theta, pml_width)"),
}
