"""The built-in problems with exact solutions, registered by name for :func:`helmpinn.get_problem`
and ``helmpinn train --problem``: ``plane1d``, ``dirichlet2d``, ``heterogeneous2d``, ``cube3d``,
``waveguide`` (the scattering problems with a PML are in :mod:`helmpinn.problems.scattering`).

Each is a factory ``f(**options) -> Problem``; :func:`helmpinn.problems.registry.problem_options` lists
a problem's options with their defaults. Every option is checked when the problem is built (a
finite number in its range, the wavenumbers at most :data:`MAX_WAVENUMBER`); a bad value is a
ValueError naming the problem and the option.
"""
from __future__ import annotations

import math

import numpy as np

from .._checks import integer, real_number
from .geometry import Box, Interval
from .conditions import Dirichlet, Neumann, Sommerfeld
from .problem import Problem

__all__ = ["plane1d", "dirichlet2d", "heterogeneous2d", "cube3d", "waveguide", "MAX_WAVENUMBER", "PROBLEMS"]

#: The largest wavenumber a built-in problem accepts (about 1600 wavelengths per unit length,
#: far beyond what a network of the default size resolves; κ = k² stays far inside float32).
MAX_WAVENUMBER = 1e4


def plane1d(k: float = 20.0) -> Problem:
    k = real_number("plane1d", "k", k, low=0.0, high=MAX_WAVENUMBER)
    return Problem(
        Interval(0.0, 1.0), kappa=k * k, source=None,
        bcs={"xmin": Dirichlet(1.0), "xmax": Sommerfeld(k)},
        exact=lambda x: np.exp(1j * k * x[:, 0]),
        exact_grad=lambda x: (1j * k * np.exp(1j * k * x[:, 0]))[:, None],
        wavenumber=k,
    )


def dirichlet2d(n: float = 2) -> Problem:
    n = real_number("dirichlet2d", "n", n, low=0.0, high=MAX_WAVENUMBER / (2 * math.pi))
    k0 = 2.0 * math.pi * n

    def exact(x):
        return np.sin(k0 * x[:, 0]) * np.sin(k0 * x[:, 1]) + 0j

    # Δu = -2 k0² u, so with κ = k0²: Δu + κu = -k0² u.
    return Problem(
        Box([0.0, 0.0], [1.0, 1.0]), kappa=k0 * k0,
        source=lambda x: -k0 * k0 * exact(x),
        bcs={"*": Dirichlet(0.0)}, exact=exact, wavenumber=k0,
    )


def heterogeneous2d(k: float = 10.0, theta: float = math.pi / 6) -> Problem:
    k = real_number("heterogeneous2d", "k", k, low=0.0, high=MAX_WAVENUMBER)
    theta = real_number("heterogeneous2d", "theta", theta)
    dvec = np.array([math.cos(theta), math.sin(theta)])
    a, s, c = 0.5, 0.15, np.array([0.5, 0.5])
    pi = math.pi

    def kappa(x):
        r2 = np.sum((x - c) ** 2, axis=1)
        return k * k * (1.0 + 2.0 * np.exp(-r2 / (2 * s * s)))

    def parts(x):
        p = np.exp(1j * k * (x @ dvec))
        sx, sy = np.sin(pi * x[:, 0]), np.sin(pi * x[:, 1])
        cx, cy = np.cos(pi * x[:, 0]), np.cos(pi * x[:, 1])
        amp = 1.0 + a * sx * sy
        grad_amp = a * pi * np.stack([cx * sy, sx * cy], axis=1)
        lap_amp = -2.0 * pi * pi * a * sx * sy
        return p, amp, grad_amp, lap_amp

    def exact(x):
        p, amp, _, _ = parts(x)
        return p * amp

    def exact_grad(x):
        p, amp, grad_amp, _ = parts(x)
        return p[:, None] * (1j * k * dvec[None, :] * amp[:, None] + grad_amp)

    def source(x):
        # Δ(p A) = p (Δ A + 2 i k d·∇A − k² A); f = Δu + κ u.
        p, amp, grad_amp, lap_amp = parts(x)
        lap = p * (lap_amp + 2j * k * (grad_amp @ dvec) - k * k * amp)
        return lap + kappa(x) * p * amp

    def local_k(x):
        return np.sqrt(kappa(x))

    def g(x, nrm):  # ∂u/∂n − i k(x) u
        return np.sum(exact_grad(x) * nrm, axis=1) - 1j * local_k(x) * exact(x)

    return Problem(
        Box([0.0, 0.0], [1.0, 1.0]), kappa=kappa, source=source,
        bcs={"xmin": Dirichlet(exact), ("xmax", "ymin", "ymax"): Sommerfeld(local_k, g)},
        exact=exact, exact_grad=exact_grad, wavenumber=k * math.sqrt(3.0),
    )


def cube3d(k: float = 2 * math.pi) -> Problem:
    k = real_number("cube3d", "k", k, low=-MAX_WAVENUMBER, low_open=False, high=MAX_WAVENUMBER)
    pi = math.pi

    def exact(x):
        s = np.sin(pi * x)
        return s[:, 0] * s[:, 1] * s[:, 2] * np.exp(1j * k * x[:, 2])

    def source(x):
        # u = S e^{ikz}: Δu = e^{ikz}(ΔS + 2ik ∂zS − k²S), ΔS = −3π² S; κ = k².
        s = np.sin(pi * x)
        S = s[:, 0] * s[:, 1] * s[:, 2]
        dzS = pi * s[:, 0] * s[:, 1] * np.cos(pi * x[:, 2])
        return np.exp(1j * k * x[:, 2]) * (-3 * pi * pi * S + 2j * k * dzS)

    return Problem(
        Box([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]), kappa=k * k, source=source,
        bcs={"*": Dirichlet(0.0)}, exact=exact,
        wavenumber=math.sqrt(2 * pi * pi + (abs(k) + pi) ** 2),  # u's largest angular frequency
    )


def waveguide(k: float = 3 * math.pi, n: int = 1, length: float = 1.0, width: float = 4.0) -> Problem:
    """Mode ``n`` of a hard-walled duct ``[0, length] × [0, width]`` entering at x = 0 and leaving
    at x = length: ``u = cos(nπy/width) e^{iβx}``, ``β = sqrt(k² − (nπ/width)²)``, which solves
    ``Δu + k²u = 0`` with ``∂u/∂n = 0`` on the walls y = 0 and y = width. Both ends are the
    mode's port (Robin) condition ``∂u/∂n − iβu = g``: at the exit g = 0 (the mode leaves without
    reflection), at the inlet ``g = −2iβ cos(nπy/width)``, the incoming mode of unit amplitude
    (the outward normal there is −x, so the incoming wave gives ``−2iβ u`` and an outgoing one
    nothing). With Neumann walls the modes are n = 0 (the plane wave), 1, 2, ...; the default
    n = 1 is the second. The mode must propagate: ``nπ/width < k``."""
    k = real_number("waveguide", "k", k, low=0.0, high=MAX_WAVENUMBER)
    n = integer("waveguide", "n", n, low=0)
    length = real_number("waveguide", "length", length, low=0.0, high=1e3)
    width = real_number("waveguide", "width", width, low=0.0, high=1e3)
    ky = n * math.pi / width
    if not ky < k * (1 - 1e-9):
        raise ValueError(f"waveguide: mode n={n} does not propagate at k={k:g} in width {width:g} "
                         f"(n*pi/width = {ky:g} must be below k)")
    beta = math.sqrt(k * k - ky * ky)

    def exact(x):
        return np.cos(ky * x[:, 1]) * np.exp(1j * beta * x[:, 0])

    def exact_grad(x):
        e = np.exp(1j * beta * x[:, 0])
        return np.stack([1j * beta * np.cos(ky * x[:, 1]) * e, -ky * np.sin(ky * x[:, 1]) * e], axis=1)

    return Problem(
        Box([0.0, 0.0], [length, width]), kappa=k * k, source=None,
        bcs={"xmin": Sommerfeld(beta, lambda x, nrm: -2j * beta * np.cos(ky * x[:, 1]) + 0j),
             "xmax": Sommerfeld(beta), ("ymin", "ymax"): Neumann()},
        exact=exact, exact_grad=exact_grad, wavenumber=k,
    )


#: The built-in problems by name: (factory, one-line description); :mod:`helmpinn.problems.registry` reads it.
PROBLEMS = {
    "plane1d": (plane1d,
                 "plane wave u = exp(ikx) on [0,1]; u(0)=1, Sommerfeld at x=1 (option k)"),
    "dirichlet2d": (dirichlet2d,
                 "u = sin(k0 x) sin(k0 y), k0 = 2 pi n, on [0,1]^2, zero Dirichlet (option n)"),
    "heterogeneous2d": (heterogeneous2d,
                 "plane wave with a bump in a lens medium k^2(x) = k^2 (1 + 2 exp(-r^2/2s^2)) on [0,1]^2; "
                 "Dirichlet at x=0, local Sommerfeld elsewhere (options k, theta)"),
    "cube3d": (cube3d,
                 "u = sin(pi x) sin(pi y) sin(pi z) exp(ikz) on [0,1]^3, zero Dirichlet, "
                 "matching source (option k)"),
    "waveguide": (waveguide,
                  "mode n of the hard-walled duct [0,length]x[0,width], u = cos(n pi y/width) exp(i beta x), "
                  "injected and leaving through the mode's Robin ports (options k, n, length, width)"),
}
