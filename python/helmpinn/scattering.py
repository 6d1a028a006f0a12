"""Built-in open-domain problems: a plane wave scattered by a circular cylinder, with a PML.

The unknown is the scattered field ``u`` of the incident plane wave
``u_inc = exp(i k (x cos θ + y sin θ))`` on a cylinder of radius ``R`` at the origin, in the box
``[−π, π]²`` surrounded by a :class:`~helmpinn.pml.PML`. Its exact solution is the Hankel series
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

from .geometry import Box, BoxMinusBall, Disk
from .pml import PML
from .problems import Dirichlet, Neumann, Problem, register_problem

__all__ = ["cylinder_scattered_field"]

_HALF = math.pi  # the physical box is [-pi, pi]^2 (DeepXDE's sound-hard benchmark box)


def cylinder_scattered_field(x, k: float, radius: float, theta: float, hard: bool):
    """The exact scattered field (complex [N]) at points x [N, 2] outside the cylinder."""
    from scipy import special

    x = np.asarray(x, np.float64)
    r = np.hypot(x[:, 0], x[:, 1])
    phi = np.arctan2(x[:, 1], x[:, 0])
    kR = k * radius
    # Terms beyond |n| ~ kR + 20 are below double precision for r >= R.
    m = int(math.ceil(kR)) + 20
    u = np.zeros(len(x), np.complex128)
    for n in range(-m, m + 1):
        if hard:
            c = special.jvp(n, kR) / special.h1vp(n, kR)
        else:
            c = special.jv(n, kR) / special.hankel1(n, kR)
        u -= (1j**n) * c * special.hankel1(n, k * r) * np.exp(1j * n * (phi - theta))
    return u


def _scatter(hard: bool, k: float, radius: float, theta: float, pml_width: float) -> Problem:
    k, radius, theta, pml_width = float(k), float(radius), float(theta), float(pml_width)
    if not (k > 0):
        raise ValueError(f"k must be > 0, got {k}")
    if not (0 < radius < _HALF):
        raise ValueError(f"radius must be in (0, pi), got {radius}")
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
                   wavenumber=k, pml=PML(pml_width), hints=_hints(k))


def _hints(k: float) -> dict:
    """Training defaults measured on these problems (k = 2; README, Open domains).

    Loss weights: every boundary term on the scale of the PDE term for an error e (PDE residual
    about k² e, weighted 1/k²; a Dirichlet residual e, weighted k²; a Neumann residual about k e,
    weighted 1) instead of the general defaults' 100 and 100/k². With those, the optimiser first
    fits the scatterer's condition by a field that dies out a short way from it (relative L2 error
    near 1 with small losses) and leaves that state only slowly: 0.37 after 2000 Adam steps.
    Adam then needs about 10000 steps, not 2000, and LM a larger network than the wavenumber alone
    asks for (the sampled box with its layer spans 2.6 wavelengths, and the near field of the
    cylinder varies faster than the incident wave): with m 24, 2x48 (4850 parameters) on
    5500 + 1375 fixed points LM overfits them below an error of 2e-3 (the loss on fresh points
    18 times the training loss after 150 iterations, the error rising again from 2.0e-3); on
    9500 + 2375 points it passes 1e-3 after 47 iterations, as m 32, 2x64 (8514 parameters) does
    on the same points (about 50), for a third of the cost of JᵀJ (R P²) and a fifth of a
    Cholesky factor's (P³). ``gram="float32"`` halves JᵀJ's
    cost again (helmpinn.lm): 275 s for 50 iterations on 2 cores (CLI, README).
    """
    return {"weights": {"data": k * k, "bc": 1.0},
            "adam": {"steps": 10000},
            "lm": {"ff_dim": 24, "hidden": 48, "pde_points": 9500, "bc_points": 2375, "gram": "float32"}}


@register_problem("scatter-hard",
                  "plane wave on a sound-hard cylinder in [-pi,pi]^2 with a PML, Hankel-series "
                  "solution (options k, radius, theta, pml_width)")
def scatter_hard(k: float = 2.0, radius: float = math.pi / 4, theta: float = 0.0,
                 pml_width: float = 1.0) -> Problem:
    return _scatter(True, k, radius, theta, pml_width)


@register_problem("scatter-soft",
                  "plane wave on a sound-soft cylinder in [-pi,pi]^2 with a PML, Hankel-series "
                  "solution (options k, radius, theta, pml_width)")
def scatter_soft(k: float = 2.0, radius: float = math.pi / 4, theta: float = 0.0,
                 pml_width: float = 1.0) -> Problem:
    return _scatter(False, k, radius, theta, pml_width)
