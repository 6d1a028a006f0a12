"""A problem's medium: κ (from ``kappa``, or ``frequency`` and ``velocity``), the general
operator's coefficients (the PML's stretching, a density ``ρ``, a user's ``a`` and ``b``;
:func:`helmpinn.problems.pml.operator_coefficients`), the largest wavenumber, and the background
field of the scattered-field form (a :class:`~helmpinn.problems.sources.FreeSpaceSource` u₀ and
the source ``−L u₀`` it puts on the scattered field). :class:`Medium` holds them for a
:class:`~helmpinn.problems.problem.Problem` (whose ``kappa``, ``pml``, ``density``, ``a``, ``b``,
``wavenumber``, ``velocity`` and ``background`` are the medium's)."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
from numpy.typing import NDArray

from .._checks import complex_number, real_number
from .conditions import complex_values
from .geometry import Domain
from .pml import PML, operator_coefficients
from .sources import FreeSpaceSource
from .training_set import check_finite_data

__all__ = ["Medium", "BACKGROUND_TOLERANCE", "medium_kappa", "operator_arguments"]

#: How closely the medium at a background source must match it: ``|κ(x₀) − k₀²| <= this × k₀²``
#: (and ``|a − 1|``, ``|b|/k₀`` <= this): a grid medium's spline may ripple slightly. A mismatch leaves
#: ``(κ − k₀²) u₀`` singular at x₀ in the scattered field's source.
BACKGROUND_TOLERANCE = 1e-3


def medium_kappa(kappa, frequency, velocity):
    """κ from ``kappa``, or from ``frequency`` and ``velocity`` (κ = (2πf)²/v²)."""
    if frequency is None and velocity is None:
        if kappa is None:
            raise TypeError("Problem: give kappa (k², a number or a callable), or frequency= and "
                            "velocity=")
        if callable(kappa):
            return kappa
        if isinstance(kappa, (complex, np.complexfloating)) and complex(kappa).imag != 0:
            return complex_number("Problem", "kappa", kappa)
        return real_number("Problem", "kappa", complex(kappa).real if np.iscomplexobj(kappa) else kappa)
    if kappa is not None:
        raise TypeError("Problem: give kappa or frequency= with velocity=, not both")
    if frequency is None or velocity is None:
        raise TypeError("Problem: frequency= and velocity= go together (κ = (2πf)²/v²)")
    omega = 2 * math.pi * real_number("Problem", "frequency", frequency, low=0.0)
    if not callable(velocity):
        v = real_number("Problem", "velocity", velocity, low=0.0)
        return omega * omega / (v * v)

    named = f"velocity ({velocity!r})" if getattr(velocity, "path", None) else "velocity"

    def kappa_from_velocity(x):
        v = np.asarray(velocity(x), np.float64)
        if v.shape != (len(x),):
            raise ValueError(f"{named} must give one value per point, shape ({len(x)},), got "
                             f"shape {v.shape}")
        bad = ~(np.isfinite(v) & (v > 0))
        if bad.any():
            i = int(np.argmax(bad))
            raise ValueError(f"{named} must be finite and > 0 at every point (a PML included), "
                             f"got {v[i]:g} at x = {np.asarray(x)[i].tolist()} ({int(bad.sum())} "
                             f"of {len(x)} points asked for)")
        return omega * omega / (v * v)
    return kappa_from_velocity


def operator_arguments(pml, density, density_grad) -> Callable | None:
    """Check ``pml``, ``density`` and ``density_grad``; returns ρ's gradient (given, or a
    :class:`~helmpinn.problems.media.GridField`'s own spline gradient, or None: central
    differences of ρ)."""
    if pml is not None and not isinstance(pml, PML):
        raise TypeError(f"pml must be a helmpinn.PML, got {type(pml).__name__}")
    if density is not None and not callable(density):
        raise TypeError("density must be a callable x [N, d] -> real [N] (> 0)")
    if density_grad is not None and density is None:
        raise ValueError("density_grad: given without density")
    if density_grad is not None and not callable(density_grad):
        raise TypeError("density_grad must be a callable x [N, d] -> real [N, d]")
    if density_grad is None and callable(getattr(density, "gradient", None)):
        density_grad = density.gradient  # a GridField's own spline gradient
    return density_grad


def coefficient(name: str, value, dim: int, vector: bool = False):
    """A user's operator coefficient: None, a callable, or a constant (checked now)."""
    if value is None or callable(value):
        return value
    if vector:
        v = np.asarray(value, np.complex128).reshape(-1)
        if v.shape != (dim,) or not np.all(np.isfinite(v)):
            raise ValueError(f"{name}: expected {dim} finite numbers or a callable "
                             f"x -> [N, {dim}], got {value!r}")
        return v
    return complex_number("Problem", name, value, "a number or a callable x -> [N]")


class Medium:
    """κ, the general operator's coefficients and the background field of a problem in ``dim``
    dimensions (the :class:`~helmpinn.problems.problem.Problem`'s arguments of those names,
    checked: ``kappa`` from :func:`medium_kappa`, ``a``/``b`` from :func:`coefficient`). ``box``:
    the physical box ``(lo, hi)`` the PML surrounds (None without one). ``wavenumber`` and
    ``background`` are set by :meth:`set_wavenumber` and :meth:`set_background`."""

    def __init__(self, dim: int, kappa, *, velocity=None, pml: PML | None = None, density=None,
                 density_grad=None, a=None, b=None, box=None):
        self.dim = dim
        self.kappa = kappa
        self.velocity = velocity    # as given (None with kappa=): the plots draw it
        self.pml = pml
        self.density = density
        self.density_grad = density_grad
        self.a = a
        self.b = b
        self.box = box
        self.wavenumber = 0.0
        self.background: FreeSpaceSource | None = None

    @property
    def uses_operator(self) -> bool:
        """True when the PDE points carry the general operator (a PML, a density, ``a``, ``b``)."""
        return self.pml is not None or self.density is not None or self.a is not None or self.b is not None

    def kappa_at(self, x: NDArray) -> complex | float | NDArray:
        """κ at x: a number, or [N] (real, or complex for an absorbing medium)."""
        if callable(self.kappa):
            k = np.asarray(self.kappa(x))
            if np.iscomplexobj(k) and not np.any(k.imag):
                k = k.real  # complex dtype, real values: the Laplacian path, no complex c
            k = k.astype(np.complex128 if np.iscomplexobj(k) else np.float64)
            if k.shape != (len(x),):
                raise ValueError(f"kappa callable returned shape {k.shape}, expected ({len(x)},)")
            return k
        return self.kappa

    def local_wavenumber(self, x: NDArray) -> NDArray[np.float64]:
        """``sqrt(max(Re κ, 0))`` at x [N, d] ([N]): 0 where the medium is evanescent."""
        kappa = np.broadcast_to(np.real(np.asarray(self.kappa_at(x))), (len(x),))
        return np.sqrt(np.maximum(kappa, 0.0))

    def set_wavenumber(self, wavenumber: float | None, domain: Domain) -> None:
        """The largest local wavenumber ``sqrt(max |κ|)``: as given, or estimated from κ (at
        4096 points drawn in ``domain`` by a generator seeded 0 when κ varies)."""
        if wavenumber is None:
            if callable(self.kappa):
                pts = domain.sample_interior(4096, np.random.default_rng(0))
                kappa_pts = self.kappa_at(pts)
                check_finite_data("Problem", "kappa", kappa_pts, pts, "probe point (for the wavenumber)")
                kmax = float(np.max(np.abs(kappa_pts) if np.iscomplexobj(kappa_pts) else kappa_pts))
            else:
                kmax = abs(self.kappa) if isinstance(self.kappa, complex) else self.kappa
            wavenumber = math.sqrt(max(kmax, 0.0))
        self.wavenumber = real_number("Problem", "wavenumber", wavenumber, low=0.0, low_open=False)

    def fit_pml(self, layer_points: Callable[[], NDArray]) -> None:
        """Check the PML against the box and the wavenumber, and match its default strength to
        the wavenumbers in the layer (:meth:`PML.for_medium`; ``layer_points()`` gives points of
        the layer, asked for only where κ varies)."""
        self.pml.check(*self.box, self.wavenumber)
        # a medium that is faster somewhere in the layer: a stronger default (PML.for_medium)
        k_min = k_max = self.wavenumber
        if callable(self.kappa):
            x = layer_points()
            if len(x):
                k = self.local_wavenumber(x)
                k_min, k_max = float(np.min(k)), float(np.max(k))
        self.pml = self.pml.for_medium(self.wavenumber, k_min, k_max)

    def user_coefficients(self, x: NDArray):
        """``(a [N] or None, b [N, d] or None)``: the user's ``a`` and ``b`` at x."""
        n, d = x.shape
        scale = drift = None
        if self.a is not None:
            scale = (complex_values(self.a, x) if callable(self.a)
                     else np.full(n, self.a, np.complex128))
        if self.b is not None:
            if callable(self.b):
                drift = np.asarray(self.b(x), np.complex128)
                if drift.shape != (n, d):
                    raise ValueError(f"b callable returned shape {drift.shape}, expected ({n}, {d})")
            else:
                drift = np.broadcast_to(self.b, (n, d))
            if not np.all(np.isfinite(drift)):
                raise ValueError("b must be finite at every point")
        if scale is not None and not np.all(np.isfinite(scale)):
            raise ValueError("a must be finite at every point")
        return scale, drift

    def operator_at(self, x: NDArray) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
        """``(a [N, d], b [N, d])``: the general operator's coefficients at x (docs/MATH.md,
        General operator; a = 1, b = 0 without a PML, density or a user's ``a``, ``b``)."""
        x = np.asarray(x, np.float64)
        lo, hi = self.box if self.box is not None else (None, None)
        scale, drift = self.user_coefficients(x)
        return operator_coefficients(x, pml=self.pml, box=(lo, hi), k=self.wavenumber,
                                     density=self.density, density_grad=self.density_grad,
                                     scale=scale, drift=drift)

    # -- the background field -----------------------------------------------------------------
    def set_background(self, background: FreeSpaceSource | None, data: Any, sampler: Any) -> None:
        """The scattered-field form: check that the source lies in the physical domain
        (``sampler``'s), away from its boundary and from the ``data`` points, and that the medium
        is homogeneous there."""
        self.background = background
        if background is None:
            return
        if not isinstance(background, FreeSpaceSource):
            raise TypeError(f"background must be a helmpinn.problems.sources.FreeSpaceSource, got "
                            f"{type(background).__name__}")
        if background.dim != self.dim:
            raise ValueError(f"background: a {background.dim}-D source for a {self.dim}-D domain")
        if data is not None and self.dim > 1 and background.at_source(data[0]).any():
            i = int(np.flatnonzero(background.at_source(data[0]))[0])
            raise ValueError(f"data: point {i}, {data[0][i].tolist()}, is at the background source, "
                             f"where the total field is infinite")
        x0 = background.position[None, :]
        outer = sampler.sampling_domain
        if sampler.in_layer(x0)[0] or not outer.contains(x0)[0]:
            raise ValueError(f"background: the source {x0[0].tolist()} must lie in the physical domain")
        gap = outer.boundary_distance(x0)
        if gap is not None and gap[0] <= background.core_radius:
            raise ValueError(f"background: the source {x0[0].tolist()} lies on the domain's boundary "
                             f"({outer!r}), where the boundary conditions would take u0 "
                             f"and its gradient, infinite at the source: move it inside the domain")
        k0 = background.wavenumber
        kappa0 = complex(np.ravel(self.kappa_at(x0))[0])
        if abs(kappa0 - k0 * k0) > BACKGROUND_TOLERANCE * k0 * k0:
            shown = f"{kappa0.real:.6g}" if kappa0.imag == 0 else f"{kappa0:.6g}"
            raise ValueError(f"background: kappa at the source is {shown}, not k0^2 = {k0 * k0:.6g} "
                             f"(the medium must be homogeneous, of wavenumber k0, around the source)")
        if self.uses_operator:
            a, b = self.operator_at(x0)
            if np.max(np.abs(a - 1)) > BACKGROUND_TOLERANCE or np.max(np.abs(b)) > BACKGROUND_TOLERANCE * k0:
                raise ValueError("background: the operator at the source must be the Laplacian "
                                 "(a = 1, b = 0: no density variation, a or b there)")

    def background_at(self, x: NDArray) -> NDArray[np.complex128]:
        """u₀ at x (zero without a background; ValueError at the background source in 2-D and
        3-D, where u₀ is infinite: :meth:`at_source`)."""
        x = np.asarray(x, np.float64)
        return np.zeros(len(x), np.complex128) if self.background is None else self.background(x)

    def at_source(self, x: NDArray) -> NDArray[np.bool_]:
        """Which points of x [N, d] are at the background source (closer to it than its
        ``core_radius``; none without a background)."""
        x = np.asarray(x, np.float64)
        return np.zeros(len(x), bool) if self.background is None else self.background.at_source(x)

    def singular(self, x: NDArray) -> NDArray[np.bool_]:
        """The points where u₀ is infinite: at the background source in 2-D and 3-D."""
        return self.at_source(x) if self.dim > 1 else np.zeros(len(x), bool)

    def background_source(self, x: NDArray) -> NDArray[np.complex128]:
        """``−L u₀`` away from the source: the scattered field's source term (the problem
        module's docstring). ``Σ_j a_j ∂_jj u₀ = a_1 Δu₀ + Σ_j (a_j − a_1) ∂_jj u₀`` with
        ``Δu₀ = −k₀² u₀``, so the singular second partials are only evaluated where the operator
        is anisotropic (the layer), and the gradient only where b ≠ 0. At the source itself
        (:meth:`at_source`) it is 0, its limit where the medium is homogeneous around the source
        (checked by :meth:`set_background`)."""
        at = self.at_source(x)
        if at.any():
            out = np.zeros(len(x), np.complex128)
            out[~at] = self.background_source(x[~at])
            return out
        u0 = self.background(x)
        kappa = self.kappa_at(x)
        k0 = self.background.wavenumber
        if not self.uses_operator:
            return -(kappa - k0 * k0) * u0
        a, b = self.operator_at(x)
        lu = (kappa - k0 * k0 * a[:, 0]) * u0
        aniso = np.any(a != a[:, :1], axis=1)
        if aniso.any():
            lu[aniso] += np.sum((a[aniso] - a[aniso, :1]) * self.background.second_partials(x[aniso]), axis=1)
        drift = np.any(b != 0, axis=1)
        if drift.any():
            lu[drift] += np.sum(b[drift] * self.background.gradient(x[drift]), axis=1)
        return -lu

    def background_robin(self, alpha: NDArray, x: NDArray, nrm: NDArray) -> NDArray[np.complex128]:
        """``∂u₀/∂n + α u₀`` at boundary points x with normals nrm (a Robin condition's g is
        shifted by it; call with a background only)."""
        return np.sum(self.background.gradient(x) * nrm, axis=1) + alpha * self.background(x)
