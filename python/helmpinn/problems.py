"""Helmholtz problems: ``Δu + κ(x) u = f(x)`` in a domain, with boundary conditions per part.

A :class:`Problem` holds

- ``domain``: a :mod:`helmpinn.geometry` domain (a :class:`~helmpinn.geometry.PointCloud` for
  explicit point sets);
- ``kappa``: ``κ = k²``, a constant or a callable ``x [N, d] -> [N]`` (heterogeneous medium);
  complex values (``κ = k²(1 + iε)``) make an absorbing medium (the core's complex ``c``). Or,
  instead of ``kappa``, ``frequency`` (f, in Hz) and ``velocity`` (v(x) > 0, a constant or a
  callable such as a :class:`~helmpinn.media.GridField`, in length units per second):
  ``κ = (2πf)²/v²``;
- ``source``: ``f``, a callable ``x -> complex [N]``, a :class:`~helmpinn.sources.PointSource`,
  a list of them (summed), or None (zero); PointSources without a width get λ/10 (the local
  wavelength at the source);
- ``bcs``: a dict from boundary part name (or a tuple of names, or ``"*"`` for every part not
  named otherwise) to a boundary condition: :class:`Dirichlet` (``u = value``, enters the loss's
  data term), :class:`Robin` (``∂u/∂n + α u = g``, the loss's bc term) and its helpers
  :func:`Neumann` (α = 0) and :func:`Sommerfeld` (``∂u/∂n − i k u = g``, α = −ik); ``None``
  leaves a part free on purpose;
- ``data``: optional extra data points ``(x [N, d], y complex [N])`` (the data term);
- ``exact``: an optional exact solution ``x -> complex [N]``, used for error reports;
- ``pml``: an optional :class:`~helmpinn.pml.PML` around the domain's outer box (a
  :class:`~helmpinn.geometry.Box`, :class:`~helmpinn.geometry.Interval` or
  :class:`~helmpinn.geometry.BoxMinusBall`): the box's faces are then no boundary at all, the layer
  is sampled with the domain, ``u = 0`` on its outer wall, and ``bcs`` names only the remaining
  parts (a scatterer); errors, plots and predictions stay on the physical domain (a
  :class:`~helmpinn.geometry.PointCloud` holds its layer itself: see below); where κ varies in
  the layer, a default strength is matched to the wavenumbers there
  (:meth:`~helmpinn.pml.PML.for_medium`; ``problem.pml`` is the layer used); a
  :class:`~helmpinn.sources.PointSource` in the layer or within half a local wavelength of it
  gets a ``UserWarning``;
- ``density``: an optional ``ρ(x) -> real [N] > 0`` (with ``density_grad(x) -> [N, d]``, or
  ρ's own ``gradient`` for a :class:`~helmpinn.media.GridField`, or central differences of ρ):
  the equation becomes ``∇·(ρ⁻¹∇u) + κu = f``;
- ``a``, ``b``: optional coefficients of the operator ``a ∇·(ρ⁻¹∇u) + b·∇u + κu`` (``a`` a
  constant or ``x -> [N]``, real or complex; ``b`` a vector or ``x -> [N, d]``), combined with
  the PML's stretching and the density (:func:`helmpinn.pml.operator_coefficients`);
- ``pml_share``: with a PML, the share of the PDE points drawn in the layer (the rest in the
  physical domain); None (the default) draws them uniformly over the domain and the layer, which
  gives the layer its share of the area ``1 − |box|/|outer box|`` (in 2-D 75% for a layer half
  as wide as the box, say 1 wavelength around a box of 2). The layer's residuals count with
  that share in the PDE term;
- ``source_share``: the share of the PDE points drawn from the PointSources' Gaussians (default
  0.25 when ``source`` holds PointSources, else 0), re-weighted so that the PDE loss stays an
  unbiased estimate of the loss under the uniform (or ``pml_share``) sampling: a point's weight
  ``w = p/q`` (p the uniform density, q the mixture's) scales its residual by ``sqrt(w)`` through
  the general operator's per-point coefficients (``a_pde``, ``b_pde``, ``c``, ``f`` all times
  ``sqrt(w)``: ``|r|²`` times w);
- ``background``: an optional :class:`~helmpinn.sources.FreeSpaceSource` (an exact point source
  ``u₀ = A G(|x − x₀|)``, ``Δu₀ + k₀²u₀ = −Aδ``) for the scattered-field form: the unknown is
  ``u_s = u − u₀``, smooth where the medium is homogeneous (κ = k₀², a = 1, b = 0, checked at
  x₀ to :data:`BACKGROUND_TOLERANCE`) around x₀, with the source ``f − L u₀`` (L the problem's
  operator, PML included, applied to u₀ away from x₀: ``−(κ − k₀²) u₀`` in the physical
  domain), the conditions and data shifted by u₀'s
  (``u_s = −u₀`` on a PML's wall), ``exact`` read as the total field's; the total field is
  :meth:`Problem.total_field` of the network's ``u_s``. At the source itself (points closer than
  the source's ``core_radius``, :meth:`Problem.at_source`) u₀ is infinite (2-D, 3-D): the
  scattered field's source takes its limit 0 there, the total field and ``exact_at`` are NaN,
  and the test points leave such a point out;
- ``hints``: optional training defaults measured for this problem, over those derived from its
  wavenumber: ``{"weights": {...}}`` (loss weights, :func:`helmpinn.training.trainer.auto_weights`),
  ``{"adam": {...}}`` (keys of :func:`helmpinn.training.trainer.default_settings`), ``{"lm": {...}}``
  (keys of :func:`helmpinn.optim.lm.lm_defaults`).

With a PML, a density, ``a``/``b``, a complex κ or weighted points the PDE points carry the
core's general operator (``a_pde``, ``b_pde``, ``c_pde``; docs/MATH.md, General operator)
instead of the Laplacian.

A :class:`~helmpinn.geometry.PointCloud` domain with a PML holds the layer's points itself: the
cloud's bounding box is the layer's outer wall, the physical box that box shrunk by the width,
and the cloud's boundary parts (the wall among them) take conditions as usual.

Complex values are complex NumPy arrays in Python; :meth:`TrainingSet.to_batch` converts them,
once per draw, into a :class:`~helmpinn.Batch` for the core (``[N, 2]`` real pairs (re, im) in
the model's dtype).

Problems by name: :func:`~helmpinn.registry.get_problem` and
:func:`~helmpinn.registry.list_problems` in :mod:`helmpinn.registry` (and at the top level,
``helmpinn.get_problem``; the registry imports this module, never the reverse); the built-in problems with exact solutions (``"plane1d"``, ``"dirichlet2d"``,
``"heterogeneous2d"``, ``"cube3d"``) are in :mod:`helmpinn.builtin`, the scattering ones in
:mod:`helmpinn.scattering`.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _device
from ._checks import complex_number, real_number
from ._compat import UNSET, renamed
from .batch import Batch, operator_a
from .geometry import BoundarySample, Box, BoxMinusBall, Domain, Interval, PointCloud
from .pml import PML, operator_coefficients
from .sources import FreeSpaceSource, PointSource, mixture_density, sample_mixture

__all__ = [
    "Dirichlet",
    "Robin",
    "Neumann",
    "Sommerfeld",
    "Problem",
    "TrainingSet",
    "complex_to_pairs",
    "pairs_to_complex",
]

ComplexFn = Callable[[NDArray[np.float64]], NDArray[np.complex128]]

#: How closely the medium at a background source must match it: ``|κ(x₀) − k₀²| <= this × k₀²``
#: (and ``|a − 1|``, ``|b|/k₀`` <= this): a grid medium's spline may ripple slightly. A mismatch leaves
#: ``(κ − k₀²) u₀`` singular at x₀ in the scattered field's source.
BACKGROUND_TOLERANCE = 1e-3


def complex_to_pairs(z: ArrayLike, dtype: Any = np.float64) -> NDArray:
    """complex [N] -> real [N, 2] (re, im), C-contiguous, in ``dtype``."""
    z = np.asarray(z)
    out = np.empty(z.shape + (2,), dtype=dtype)
    out[..., 0] = z.real
    out[..., 1] = z.imag
    return out


def pairs_to_complex(p: ArrayLike) -> NDArray[np.complex128]:
    """real [..., 2] (re, im) -> complex [...] (complex128)."""
    p = np.asarray(p)
    if p.shape[-1] != 2:
        raise ValueError(f"expected a last axis of 2 (re, im), got shape {p.shape}")
    return p[..., 0].astype(np.float64) + 1j * p[..., 1].astype(np.float64)


def check_finite_data(where: str, what: str, values: Any, x: NDArray, points: str) -> None:
    """A ValueError when ``values`` (a number, [N] or [N, ...], one row per point of x [N, d])
    is not finite everywhere, naming ``what`` (the array: "kappa", "source", a condition's
    value), its first bad point (its index among ``points`` and its coordinates) and value, and
    saying that the problem's data is at fault: a NaN or Inf there would otherwise surface
    as a non-finite loss blamed on the network's parameters."""
    v = np.asarray(values)
    if v.size == 0 or v.dtype.kind not in "fc":
        return
    ok = np.isfinite(v)
    if ok.all():
        return
    if v.ndim == 0:
        raise ValueError(f"{where}: {what} is {v.item()!r}; the problem's data must be finite")
    rows = ok.reshape(len(v), -1).all(axis=1)
    i = int(np.argmin(rows))
    n_bad = int(np.count_nonzero(~rows))
    shown = v[i].tolist() if v.ndim > 1 else v[i].item()
    raise ValueError(f"{where}: {what} is not finite at {points} {i} of {len(v)}, x = "
                     f"{np.asarray(x)[i].tolist()} (value {shown}; {n_bad} such point(s)); the "
                     f"problem's data (κ, the source, the conditions, the data points) must be "
                     f"finite at every point: fix the problem, not the training settings")


def _complex_values(v, x: NDArray, *args) -> NDArray[np.complex128]:
    """Evaluate a constant or callable to a complex [N] array at x."""
    n = len(x)
    if callable(v):
        out = np.asarray(v(x, *args), dtype=np.complex128)
        if out.ndim == 0:
            out = np.full(n, complex(out))
        if out.shape != (n,):
            raise ValueError(f"boundary/source callable returned shape {out.shape}, expected ({n},)")
        return out
    return np.full(n, complex(v), dtype=np.complex128)


class Dirichlet:
    """``u = value`` on a boundary part; ``value`` is a complex constant or ``x -> complex [N]``."""

    def __init__(self, value: complex | ComplexFn = 0.0):
        self.value = value

    def values(self, x: NDArray) -> NDArray[np.complex128]:
        return _complex_values(self.value, x)

    def __repr__(self) -> str:
        return f"Dirichlet({self.value!r})"


class Robin:
    """``∂u/∂n + α u = g`` on a boundary part (n the outward unit normal).

    ``alpha``: a complex constant or ``x -> complex [N]``. ``g``: None (zero), a complex constant,
    or ``(x, normals) -> complex [N]``.
    """

    def __init__(self, alpha: complex | ComplexFn, g: complex | Callable | None = None):
        self.alpha = alpha
        self.g = g

    def alpha_values(self, x: NDArray) -> NDArray[np.complex128]:
        return _complex_values(self.alpha, x)

    def g_values(self, x: NDArray, normals: NDArray) -> NDArray[np.complex128] | None:
        if self.g is None:
            return None
        return _complex_values(self.g, x, normals)

    def __repr__(self) -> str:
        return f"Robin(alpha={self.alpha!r}, g={self.g!r})"


def Neumann(g: complex | Callable | None = None) -> Robin:
    """``∂u/∂n = g`` (sound-hard when g is None): Robin with α = 0."""
    return Robin(0.0, g)


def Sommerfeld(k: float | Callable, g: complex | Callable | None = None) -> Robin:
    """First-order absorbing condition ``∂u/∂n − i k u = g``: Robin with α = −ik.
    ``k`` may be a callable ``x -> real [N]`` (local wavenumber)."""
    if callable(k):
        return Robin(lambda x: -1j * np.asarray(k(x)), g)
    return Robin(-1j * float(k), g)


@dataclass
class TrainingSet:
    """One draw of collocation points with everything the loss needs (float64 / complex128).

    PDE: ``x_pde``, ``kappa`` (float or [N]), ``f`` (complex [N] or None). Data (Dirichlet
    boundary points and extra data): ``x_data``, ``y`` (complex). Robin: ``x_bc``, ``n_bc``,
    ``alpha`` (complex scalar or [N]), ``g`` (complex [N] or None). ``a_pde``, ``b_pde``
    (complex [N_pde, d] or None): the general operator's coefficients (PML, density, ``a``,
    ``b``). ``kappa`` complex: the operator's complex c (absorbing media). ``pde_weight`` ([N] or
    None): the importance weights of the PDE points, for reference: they are already applied, as
    ``sqrt(w)`` times ``a_pde``, ``b_pde``, ``kappa`` and ``f``.
    """

    x_pde: NDArray[np.float64]
    kappa: float | NDArray[np.float64]
    f: NDArray[np.complex128] | None
    x_data: NDArray[np.float64]
    y: NDArray[np.complex128]
    x_bc: NDArray[np.float64]
    n_bc: NDArray[np.float64]
    alpha: complex | NDArray[np.complex128]
    g: NDArray[np.complex128] | None
    sizes: dict[str, int] = field(default_factory=dict)
    a_pde: NDArray[np.complex128] | None = None
    b_pde: NDArray[np.complex128] | None = None
    pde_weight: NDArray[np.float64] | None = None

    def to_batch(self, dtype: Any = np.float32, *, counts: Mapping[str, int] | None = None,
                 device: str = "cpu") -> Batch:
        """The :class:`~helmpinn.Batch` of these points for a workspace of ``dtype``: every array
        converted once (C-contiguous, complex values as (re, im) pairs); absent terms are left
        out. ``counts``: the global point counts when this set is one shard of a larger one.
        ``device``: "cuda" / "cuda:N" copies the converted arrays once to that GPU
        (:meth:`Batch.to_device`; checked before any conversion)."""
        if device != "cpu":
            _device.check(device, "TrainingSet.to_batch")
        kw: dict[str, Any] = {}
        if len(self.x_pde):
            kw.update(x_pde=self.x_pde, f=self.f)
            if np.iscomplexobj(self.kappa):  # the general operator's complex c
                kw.update(c_pde=self.kappa)
            else:
                kw.update(kappa=self.kappa)
            if self.a_pde is not None:  # the general operator, with kappa as its (real) c
                kw.update(operator_a(self.a_pde), b_pde=self.b_pde)
        if len(self.x_data):
            kw.update(x_data=self.x_data, y=self.y)
        if len(self.x_bc):
            kw.update(x_bc=self.x_bc, n_bc=self.n_bc, alpha_bc=self.alpha, g_bc=self.g)
        batch = Batch(**kw, counts=counts, dtype=dtype)
        return batch if device == "cpu" else batch.to_device(device)

    def to_core(self, dtype: Any = np.float32) -> Batch:
        """The same as :meth:`to_batch` (its older name): a Batch is also the mapping of the
        keywords of ``Workspace.value_and_grad``, so ``**ts.to_core(dtype)`` still works."""
        return self.to_batch(dtype)


def _medium_kappa(kappa, frequency, velocity):
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


def _warn_sources_near_pml(self: "Problem") -> None:
    """Warn about a PointSource in a PML or within half a local wavelength of it: its near
    field enters the layer, whose stretching then spreads the error over the domain
    (Marmousi at 3 Hz, source 0.1 wavelength from a 15-node layer: 3.3e-2 from free space,
    5.4e-3 with the source 1.5 wavelengths away; docs/benchmarks-archive.md, "A PML in a medium")."""
    if self.pml is None or not self.point_sources or self._box is None:
        return
    lo, hi = (np.asarray(b, np.float64) for b in self._box)
    for src in self.point_sources:
        x0 = np.asarray(src.position, np.float64)
        if not self.sampling_domain.contains(x0[None, :])[0]:
            continue   # outside the domain altogether: _warn_sources_outside's warning
        gap = float(np.min(np.concatenate([x0 - lo, hi - x0])))
        k = float(self.local_wavenumber(x0[None, :])[0]) or self.wavenumber
        if gap < 0:
            warnings.warn(f"source: the PointSource at {x0.tolist()} lies in the PML (outside the "
                          f"physical box {lo.tolist()} .. {hi.tolist()}); the layer is not a "
                          f"physical medium", UserWarning, stacklevel=3)
        elif k > 0 and gap * k / (2 * math.pi) < self.SOURCE_PML_WAVELENGTHS:
            warnings.warn(f"source: the PointSource at {x0.tolist()} is {gap:.3g} from the PML "
                          f"({gap * k / (2 * math.pi):.2g} local wavelengths); its near field "
                          f"enters the layer and the error spreads over the domain: keep sources "
                          f"{self.SOURCE_PML_WAVELENGTHS:g} wavelength from a PML (a larger box)",
                          UserWarning, stacklevel=3)

def _warn_sources_outside(self: "Problem") -> None:
    """Warn about a PointSource whose centre lies outside the domain (with a PML: outside its
    outer box): only its Gaussian's tail inside acts, a source the user hardly meant
    (:func:`_warn_sources_near_pml` warns about one in a PML or near it)."""
    for src in self.point_sources:
        x0 = np.asarray(src.position, np.float64)
        if not self.sampling_domain.contains(x0[None, :])[0]:
            lo, hi = (np.asarray(b).tolist() for b in self.sampling_domain.bounds)
            where = f"the PML's outer box {lo} .. {hi}" if self.pml is not None else repr(self.domain)
            warnings.warn(f"source: the PointSource at {x0.tolist()} lies outside the domain "
                          f"({where}); only its Gaussian's tail inside acts as a source",
                          UserWarning, stacklevel=3)


class Problem:
    """A Helmholtz problem ``Δu + κ u = f`` (see the module docstring for every argument).

    ``wavenumber``: the largest local wavenumber ``sqrt(max |κ|)``; estimated from κ when not
    given. The trainer picks Fourier frequencies and loss scales from it.
    """

    def __init__(self, domain: Domain, kappa: complex | Callable | None = None,
                 source: ComplexFn | PointSource | Sequence | None = None,
                 bcs: Mapping[str | tuple[str, ...], Dirichlet | Robin | None] | None = None,
                 data: tuple[ArrayLike, ArrayLike] | None = None, exact: ComplexFn | None = None,
                 *, name: str = "custom", description: str = "",
                 wavenumber: float | None = None, options: Mapping[str, Any] | None = None,
                 exact_grad: Callable | None = None, pml: PML | None = None,
                 density: Callable | None = None, density_grad: Callable | None = None,
                 hints: Mapping[str, Mapping[str, Any]] | None = None,
                 a: complex | Callable | None = None, b: ArrayLike | Callable | None = None,
                 frequency: float | None = None, velocity: float | Callable | None = None,
                 pml_share: float | None = None, source_share: float | None = None,
                 background: FreeSpaceSource | None = None):
        if not isinstance(domain, Domain):
            raise TypeError(f"domain must be a helmpinn.geometry.Domain, got {type(domain).__name__}")
        self.domain = domain
        self.dim = domain.dim
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
        self.hints = {key: dict(value) for key, value in (hints or {}).items()}
        unknown = set(self.hints) - {"weights", "adam", "lm"}
        if unknown:
            raise ValueError(f"hints: unknown keys {sorted(unknown)}; use 'weights', 'adam', 'lm'")
        self.pml = pml
        self.density = density
        self.density_grad = density_grad
        self.a = self._coefficient("a", a)
        self.b = self._coefficient("b", b, vector=True)
        self.sampling_domain = domain
        self._absorbed: tuple[str, ...] = ()
        self._box = domain.bounds if not isinstance(domain, PointCloud) else None
        if pml is not None:
            if isinstance(domain, BoxMinusBall):
                lo, hi = pml.outer_box(domain.box.lo, domain.box.hi)
                self.sampling_domain = BoxMinusBall(Box(lo, hi), domain.ball)
                self._absorbed = domain.box.part_names
            elif isinstance(domain, Box):
                lo, hi = pml.outer_box(domain.lo, domain.hi)
                self.sampling_domain = Interval(lo[0], hi[0]) if domain.dim == 1 else Box(lo, hi)
                self._absorbed = domain.part_names
            elif isinstance(domain, PointCloud):
                lo, hi = domain.bounds
                lo, hi = lo + pml.width, hi - pml.width
                if not np.all(hi > lo):
                    raise ValueError(f"pml: a PointCloud's bounding box is the layer's outer wall; "
                                     f"width {pml.width!r} leaves no physical box inside "
                                     f"{domain.bounds[0].tolist()} .. {domain.bounds[1].tolist()}")
                self._box = (lo, hi)
            else:
                raise TypeError(f"pml: the domain must be a Box, Interval, BoxMinusBall or PointCloud "
                                f"(a PML surrounds its outer box), got {type(domain).__name__}")
        self.pml_share = None
        if pml_share is not None:
            if pml is None:
                raise ValueError("pml_share: given without a pml")
            if isinstance(domain, PointCloud):
                raise ValueError("pml_share: a PointCloud's points are given, not drawn")
            self.pml_share = real_number("Problem", "pml_share", pml_share, low=0.0, low_open=False,
                                         high=1.0)
        self.kappa = _medium_kappa(kappa, frequency, velocity)
        self.velocity = velocity    # as given (None with kappa=): the plots draw it
        self.exact = exact
        self.exact_grad = exact_grad
        self.name = name
        self.description = description
        self.options = dict(options or {})
        self.bcs = self._resolve_bcs(bcs or {})
        if data is not None:
            xd = np.ascontiguousarray(np.asarray(data[0], dtype=np.float64))
            yd = np.asarray(data[1], dtype=np.complex128).reshape(-1)
            if xd.ndim != 2 or xd.shape[1] != self.dim or len(yd) != len(xd):
                raise ValueError(f"data must be (x [N, {self.dim}], y complex [N]), got shapes "
                                 f"{xd.shape} and {yd.shape}")
            check_finite_data("Problem", "data's x", xd, xd, "data point")
            check_finite_data("Problem", "data's y", yd, xd, "data point")
            self.data = (xd, yd)
        else:
            self.data = None
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
        if pml is not None:
            pml.check(*self._box, self.wavenumber)
            # a medium that is faster somewhere in the layer: a stronger default (PML.for_medium)
            self.pml = pml.for_medium(self.wavenumber, *self._layer_wavenumbers())
        self._set_source(source, source_share)
        _warn_sources_outside(self)
        _warn_sources_near_pml(self)
        self._set_background(background)
        if exact is not None and isinstance(domain, PointCloud):
            self.test_points()   # refuses a cloud without test points (its error would read 0)

    # -- construction helpers -----------------------------------------------------------------
    def _coefficient(self, name: str, value, vector: bool = False):
        """A user's operator coefficient: None, a callable, or a constant (checked now)."""
        if value is None or callable(value):
            return value
        if vector:
            v = np.asarray(value, np.complex128).reshape(-1)
            if v.shape != (self.dim,) or not np.all(np.isfinite(v)):
                raise ValueError(f"{name}: expected {self.dim} finite numbers or a callable "
                                 f"x -> [N, {self.dim}], got {value!r}")
            return v
        return complex_number("Problem", name, value, "a number or a callable x -> [N]")

    #: A PointSource closer than this many (local) wavelengths to a PML gets a warning.
    SOURCE_PML_WAVELENGTHS = 0.5

    def _set_source(self, source, source_share) -> None:
        """The source terms (PointSources given their width) and the share drawn at them."""
        items = list(source) if isinstance(source, (list, tuple)) else ([] if source is None else [source])
        for item in items:
            if not callable(item):
                raise TypeError(f"source must be a callable x -> complex [N], a PointSource or a "
                                f"list of them, got {type(item).__name__}")
            if isinstance(item, PointSource) and item.dim != self.dim:
                raise ValueError(f"source: a PointSource in {item.dim}-D for a {self.dim}-D domain")
        if any(isinstance(i, PointSource) and i.width is None for i in items) and not self.wavenumber > 0:
            raise ValueError("source: a PointSource without a width takes λ/10 from the problem's "
                             "wavenumber, which is 0; give width=")
        items = [i.with_wavenumber(_source_wavenumber(self, i)) if isinstance(i, PointSource) else i for i in items]
        self.point_sources = [i for i in items if isinstance(i, PointSource)]
        self._source_terms = items
        self.source = (items[0] if len(items) == 1 else self._summed_source) if items else None
        if source_share is None:
            source_share = 0.25 if self.point_sources and not isinstance(self.domain, PointCloud) else 0.0
        self.source_share = real_number("Problem", "source_share", source_share, low=0.0,
                                        low_open=False, high=1.0, high_open=True)
        if self.source_share > 0 and not self.point_sources:
            raise ValueError("source_share: the problem has no PointSource to draw points at")
        if self.source_share > 0 and isinstance(self.domain, PointCloud):
            raise ValueError("source_share: a PointCloud's points are given, not drawn")

    def _set_background(self, background) -> None:
        """The scattered-field form: check that the medium is homogeneous at the source."""
        self.background = background
        if background is None:
            return
        if not isinstance(background, FreeSpaceSource):
            raise TypeError(f"background must be a helmpinn.sources.FreeSpaceSource, got "
                            f"{type(background).__name__}")
        if background.dim != self.dim:
            raise ValueError(f"background: a {background.dim}-D source for a {self.dim}-D domain")
        if self.data is not None and self.dim > 1 and background.at_source(self.data[0]).any():
            i = int(np.flatnonzero(background.at_source(self.data[0]))[0])
            raise ValueError(f"data: point {i}, {self.data[0][i].tolist()}, is at the background source, "
                             f"where the total field is infinite")
        x0 = background.position[None, :]
        if self.in_layer(x0)[0] or not self.sampling_domain.contains(x0)[0]:
            raise ValueError(f"background: the source {x0[0].tolist()} must lie in the physical domain")
        gap = self.sampling_domain.boundary_distance(x0)
        if gap is not None and gap[0] <= background.core_radius:
            raise ValueError(f"background: the source {x0[0].tolist()} lies on the domain's boundary "
                             f"({self.sampling_domain!r}), where the boundary conditions would take u0 "
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

    def _singular(self, x: NDArray) -> NDArray[np.bool_]:
        """The points where u₀ is infinite: at the background source in 2-D and 3-D."""
        return self.at_source(x) if self.dim > 1 else np.zeros(len(x), bool)

    def total_field(self, x: NDArray, scattered: ArrayLike) -> NDArray[np.complex128]:
        """The total field ``u = u_s + u₀`` at x from the network's (scattered) values there: NaN
        at the background source in 2-D and 3-D, where u₀ is infinite."""
        x = np.asarray(x, np.float64)
        u = np.array(scattered, np.complex128)
        if self.background is None:
            return u
        bad = self._singular(x)
        u[bad] = np.nan
        u[~bad] += self.background(x[~bad])
        return u

    def _background_source(self, x: NDArray) -> NDArray[np.complex128]:
        """``−L u₀`` away from the source: the scattered field's source term (module docstring).
        ``Σ_j a_j ∂_jj u₀ = a_1 Δu₀ + Σ_j (a_j − a_1) ∂_jj u₀`` with ``Δu₀ = −k₀² u₀``, so the
        singular second partials are only evaluated where the operator is anisotropic (the
        layer), and the gradient only where b ≠ 0. At the source itself (:meth:`at_source`) it is
        0, its limit where the medium is homogeneous around the source (checked when the problem
        is built)."""
        at = self.at_source(x)
        if at.any():
            out = np.zeros(len(x), np.complex128)
            out[~at] = self._background_source(x[~at])
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

    def _dirichlet_at(self, bc: Dirichlet, x: NDArray) -> NDArray[np.complex128]:
        """The data term's target: the condition's value, less u₀ with a background."""
        return bc.values(x) - self.background_at(x)

    def _robin_g_at(self, bc: Robin, x: NDArray, nrm: NDArray) -> NDArray[np.complex128] | None:
        """The Robin term's g, less ``∂u₀/∂n + α u₀`` with a background."""
        g = bc.g_values(x, nrm)
        if self.background is None:
            return g
        shift = np.sum(self.background.gradient(x) * nrm, axis=1) + bc.alpha_values(x) * self.background(x)
        return (0 if g is None else g) - shift

    def _summed_source(self, x: NDArray) -> NDArray[np.complex128]:
        return sum(_complex_values(term, x) for term in self._source_terms)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"Problem({self.name}({opts}), {self.domain!r}, k_max={self.wavenumber:.4g})"

    @property
    def part_names(self) -> tuple[str, ...]:
        """The boundary parts that take conditions (with a PML: those the layer does not absorb)."""
        return tuple(p for p in self.domain.part_names if p not in self._absorbed)

    @property
    def uses_operator(self) -> bool:
        """True when the PDE points carry the general operator (a PML, a density, ``a``, ``b``)."""
        return self.pml is not None or self.density is not None or self.a is not None or self.b is not None

    def _user_coefficients(self, x: NDArray):
        n, d = x.shape
        scale = drift = None
        if self.a is not None:
            scale = (_complex_values(self.a, x) if callable(self.a)
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
        lo, hi = self._box if self._box is not None else (None, None)
        scale, drift = self._user_coefficients(x)
        return operator_coefficients(x, pml=self.pml, box=(lo, hi), k=self.wavenumber,
                                     density=self.density, density_grad=self.density_grad,
                                     scale=scale, drift=drift)

    def _layer_wavenumbers(self, n: int = 4096) -> tuple[float, float]:
        """``(k_min, k_max)``: the extremes of :meth:`local_wavenumber` at up to n
        random points of the PML (a point cloud's: its first n there); the problem's wavenumber
        twice when κ is a constant; k_min 0 when Re κ <= 0 somewhere there."""
        if not callable(self.kappa):
            return self.wavenumber, self.wavenumber
        if isinstance(self.domain, PointCloud):
            x = self.domain.interior[self.in_layer(self.domain.interior)][:n]
        else:
            x = self._sample_layer(n, np.random.default_rng(0))
        if not len(x):
            return self.wavenumber, self.wavenumber
        k = self.local_wavenumber(x)
        return float(np.min(k)), float(np.max(k))

    def in_layer(self, x: NDArray) -> NDArray[np.bool_]:
        """True for points of the PML (outside the physical box); all False without one."""
        x = np.asarray(x, np.float64)
        if self.pml is None:
            return np.zeros(len(x), bool)
        lo, hi = self._box
        return np.any((x < lo) | (x > hi), axis=1)

    def _resolve_bcs(self, bcs) -> dict[str, Dirichlet | Robin | None]:
        parts = self.part_names
        out: dict[str, Dirichlet | Robin | None] = {}
        default = "__unset__"
        for key, bc in bcs.items():
            if bc is not None and not isinstance(bc, (Dirichlet, Robin)):
                raise TypeError(f"boundary condition for {key!r} must be Dirichlet, Robin or None, "
                                f"got {type(bc).__name__}")
            if key == "*":
                default = bc
                continue
            for name in (key,) if isinstance(key, str) else tuple(key):
                if name in self._absorbed:
                    raise ValueError(f"boundary part {name!r} lies inside the PML (the layer "
                                     f"replaces it; u = 0 on the layer's outer wall); "
                                     f"name only {parts}")
                if name not in parts:
                    raise ValueError(f"unknown boundary part {name!r}; this domain has {parts}")
                out[name] = bc
        for name in parts:
            if name not in out:
                if default == "__unset__":
                    raise ValueError(f"boundary part {name!r} has no boundary condition; give one "
                                     f"(or None to leave it free, or '*' for all remaining parts)")
                out[name] = default
        return out

    # -- evaluation ---------------------------------------------------------------------------
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

    def source_at(self, x: NDArray) -> NDArray[np.complex128] | None:
        """f at x; with a background, the scattered field's: ``f − L u₀`` (away from x₀)."""
        f = None if self.source is None else _complex_values(self.source, x)
        if self.background is not None:
            fb = self._background_source(np.asarray(x, np.float64))
            f = fb if f is None else f + fb
        return f

    def exact_at(self, x: NDArray) -> NDArray[np.complex128]:
        """The exact solution at x (with a background: the scattered part, ``exact − u₀``, NaN at
        the background source in 2-D and 3-D, where both are infinite; ``exact`` is not called
        there)."""
        if self.exact is None:
            raise ValueError(f"problem {self.name!r} has no exact solution")
        if self.background is None:
            return _complex_values(self.exact, x)
        x = np.asarray(x, np.float64)
        bad = self._singular(x)
        if not bad.any():
            return _complex_values(self.exact, x) - self.background(x)
        out = np.full(len(x), np.nan + 0j)
        out[~bad] = self.exact_at(x[~bad])
        return out

    def test_points(self, n_per_dim: int | None = None) -> NDArray[np.float64]:
        """Points of a regular grid inside the domain for error reports (a point cloud's own
        interior points, without those of a PML), without those at the background source in 2-D
        and 3-D (where the exact solution is infinite). A ValueError when none is left: an
        error measured on no point would read 0 (a Problem with ``exact`` on a PointCloud
        without such points is refused when it is built)."""
        if isinstance(self.domain, PointCloud):
            pts = self.domain.interior
            pts = pts[~self.in_layer(pts)] if self.pml is not None else pts
        else:
            if n_per_dim is None:
                n_per_dim = {1: 1001, 2: 101}.get(self.dim, 31)
            pts = self.domain.grid(n_per_dim)[0]
        pts = pts[~self._singular(pts)] if self.background is not None else pts
        if len(pts):
            return pts
        if isinstance(self.domain, PointCloud):
            raise ValueError(f"exact: the error is measured at the PointCloud's interior points outside "
                             f"any PML and away from a background source, and this one has none "
                             f"({len(self.domain.interior)} interior point(s) in all): give interior "
                             f"points, or leave exact out")
        raise ValueError(f"test_points: no point of a grid of {n_per_dim} per axis lies inside "
                         f"{self.domain!r}; give more points per axis")

    # -- sampling -----------------------------------------------------------------------------
    def _layer_volume(self) -> float:
        return self.sampling_domain.volume - self.domain.volume

    def _base_sample(self, n: int, rng: np.random.Generator, method: str) -> NDArray[np.float64]:
        """n PDE points from the base density p: uniform over the domain and its layer, or with
        ``pml_share`` of them uniform in the layer and the rest uniform in the physical domain."""
        if self.pml_share is None:
            return self.sampling_domain.sample_interior(n, rng, method)
        n_layer = int(round(self.pml_share * n))
        inner = self.domain.sample_interior(n - n_layer, rng, method)
        return np.concatenate([inner, self._sample_layer(n_layer, rng, method)])

    def _sample_layer(self, n: int, rng: np.random.Generator, method: str = "uniform") -> NDArray[np.float64]:
        """n points uniform in the PML: the outer domain's draws outside the box."""
        layer, have = [], 0
        keep = max(self._layer_volume() / self.sampling_domain.volume, 1e-3)
        while have < n:
            m = int(math.ceil((n - have) / keep * 1.1)) + 8
            x = self.sampling_domain.sample_interior(m, rng, method)
            x = x[self.in_layer(x)][: n - have]
            layer.append(x)
            have += len(x)
        return np.concatenate(layer) if layer else np.empty((0, self.dim))

    def _base_density(self, x: NDArray) -> NDArray[np.float64]:
        """p(x), the density of :meth:`_base_sample`."""
        if self.pml_share is None:
            return np.full(len(x), 1.0 / self.sampling_domain.volume)
        layer = self.in_layer(x)
        return np.where(layer, self.pml_share / self._layer_volume(),
                        (1.0 - self.pml_share) / self.domain.volume)

    def sample_pde(self, n: int, rng: np.random.Generator | int | None = None,
                   method: str = "uniform") -> tuple[NDArray[np.float64], NDArray[np.float64] | None]:
        """``(x [M, d], w [M] or None)``: PDE points and their importance weights.

        Without PointSources to resolve (``source_share`` 0): n points of the base density p
        (uniform, or ``pml_share``) and no weights. Otherwise ``round((1 − s) n)`` base points and
        ``round(s n)`` draws from the sources' Gaussian mixture g (s = ``source_share``; draws
        outside the domain are dropped, so M <= n), with ``w = (M/n) p/q``, ``q = ((n − n_g) p +
        n_g g)/n``: the mean of ``w |r|²`` over the M points, which the core takes, is then an
        unbiased estimate of the mean of ``|r|²`` under p.
        """
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        if self.source_share == 0 or not n:  # (a PointCloud takes n = None: all its points)
            return self._base_sample(n, rng, method), None
        n = int(n)
        n_src = int(round(self.source_share * n))
        base = self._base_sample(n - n_src, rng, method)
        drawn = sample_mixture(self.point_sources, n_src, rng)
        drawn = drawn[self.sampling_domain.contains(drawn)]
        x = np.ascontiguousarray(np.concatenate([base, drawn]))
        p = self._base_density(x)
        q = ((n - n_src) * p + n_src * mixture_density(self.point_sources, x)) / n
        return x, (len(x) / n) * p / q

    def sample(self, pde_points: int | None = None, bc_points: int | None = None,
               rng: np.random.Generator | int | None = None, method: str = "uniform", *,
               n_pde: int = UNSET, n_bc: int = UNSET) -> TrainingSet:
        """Collocation points for one training stretch: ``pde_points`` interior points
        (:meth:`sample_pde`) and ``bc_points`` boundary points (split over the parts by measure;
        Dirichlet parts go to the data term, Robin parts to the bc term) plus the problem's data
        points. (``n_pde`` / ``n_bc`` are the deprecated names of the two counts.)"""
        pde_points = renamed("Problem.sample", "pde_points", pde_points, "n_pde", n_pde)
        bc_points = renamed("Problem.sample", "bc_points", bc_points, "n_bc", n_bc)
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        x_pde, weight = self.sample_pde(pde_points, rng, method)
        kappa = self.kappa_at(x_pde)
        f = self.source_at(x_pde)
        check = lambda what, v, x, points: check_finite_data(  # noqa: E731
            f"problem {self.name!r}", what, v, x, points)
        check("a PDE point's coordinates", x_pde, x_pde, "PDE point")
        check("kappa", np.broadcast_to(kappa, (len(x_pde),)), x_pde, "PDE point")
        check("the source", f, x_pde, "PDE point")
        if self._absorbed:
            # The outer box's faces are now the PML's outer wall (u = 0, data term); a scatterer
            # inside gets half the boundary points (by measure it would get a sliver of them).
            sd = self.sampling_domain
            if isinstance(sd, BoxMinusBall):
                n_wall = int(bc_points) // 2
                xd_wall = sd.box.sample_boundary(n_wall, rng, method).x
                inner = sd.ball.sample_boundary(int(bc_points) - n_wall, rng, method)
                b = BoundarySample(inner.x, -inner.normals, np.full(len(inner.x), "scatterer"))
            else:
                xd_wall = sd.sample_boundary(bc_points, rng, method).x
                b = BoundarySample(np.empty((0, self.dim)), np.empty((0, self.dim)),
                                   np.empty(0, dtype="<U9"))
        else:
            b = self.domain.sample_boundary(bc_points, rng, method)

        xd, yd = [], []
        if self._absorbed and len(xd_wall):
            xd.append(xd_wall)
            yd.append(-self.background_at(xd_wall))  # u = 0 on the wall: u_s = -u0
        xr, nr, ar, gr = [], [], [], []
        const_alpha: list[complex] = []
        any_g = False
        for part, bc in self.bcs.items():
            mask = b.parts == part
            if bc is None or not mask.any():
                continue
            x = b.x[mask]
            if isinstance(bc, Dirichlet):
                xd.append(x)
                yd.append(self._dirichlet_at(bc, x))
                check(f"the Dirichlet value on {part!r}", yd[-1], x, f"boundary point on {part!r}")
            else:
                nrm = b.normals[mask]
                xr.append(x)
                nr.append(nrm)
                ar.append(bc.alpha_values(x))
                check(f"the Robin alpha on {part!r}", ar[-1], x, f"boundary point on {part!r}")
                if not callable(bc.alpha):
                    const_alpha.append(complex(bc.alpha))
                g = self._robin_g_at(bc, x, nrm)
                check(f"the Robin g on {part!r}", g, x, f"boundary point on {part!r}")
                any_g |= g is not None
                gr.append(np.zeros(len(x), np.complex128) if g is None else g)
        if self.data is not None:
            xd.append(self.data[0])
            yd.append(self.data[1] - self.background_at(self.data[0]))
        d = self.dim
        cat = lambda a, shape: np.ascontiguousarray(np.concatenate(a)) if a else np.empty(shape)  # noqa: E731
        x_bc = cat(xr, (0, d))
        alpha = cat(ar, (0,)).astype(np.complex128)
        if len(const_alpha) == len(ar) and len(set(const_alpha)) == 1:
            alpha = const_alpha[0]
        elif len(alpha) and np.all(alpha == alpha[0]):
            alpha = complex(alpha[0])
        ts = TrainingSet(
            x_pde=x_pde, kappa=kappa, f=f,
            x_data=cat(xd, (0, d)), y=cat(yd, (0,)).astype(np.complex128),
            x_bc=x_bc, n_bc=cat(nr, (0, d)), alpha=alpha if len(x_bc) else 0j,
            g=cat(gr, (0,)) if any_g else None,
        )
        if self.uses_operator:
            ts.a_pde, ts.b_pde = self.operator_at(x_pde)
            check("the operator's a (from a=, the density, the PML)", ts.a_pde, x_pde, "PDE point")
            check("the operator's b (from b=, the density, the PML)", ts.b_pde, x_pde, "PDE point")
        if weight is not None:  # sqrt(w) on every PDE coefficient: |r|² times w (module docstring)
            root = np.sqrt(weight)
            if ts.a_pde is None:
                ts.a_pde = np.ones((len(x_pde), self.dim), np.complex128)
                ts.b_pde = np.zeros((len(x_pde), self.dim), np.complex128)
            ts.a_pde = ts.a_pde * root[:, None]
            ts.b_pde = ts.b_pde * root[:, None]
            ts.kappa = kappa * root
            ts.f = None if f is None else f * root
            ts.pde_weight = weight
        ts.sizes = {"pde": len(ts.x_pde), "data": len(ts.x_data), "bc": len(ts.x_bc)}
        return ts

    # -- checks of an exact solution ----------------------------------------------------------
    def pde_residual_fd(self, x: NDArray, h: float = 1e-3,
                        u: ComplexFn | None = None) -> NDArray[np.complex128]:
        """``Δu + κu − f`` at x with Δ by 2nd-order central differences (u defaults to exact);
        with a PML or density the general operator ``Σ a_i u_ii + Σ b_i u_i + κu − f``."""
        u = u or self.exact_at
        x = np.asarray(x, dtype=np.float64)
        u0 = u(x)
        lap = np.zeros(len(x), np.complex128)
        a = b = None
        if self.uses_operator:
            a, b = self.operator_at(x)
        for i in range(self.dim):
            e = np.zeros(self.dim)
            e[i] = h
            up, um = u(x + e), u(x - e)
            if a is None:
                lap += (up - 2 * u0 + um) / h**2
            else:
                lap += a[:, i] * (up - 2 * u0 + um) / h**2 + b[:, i] * (up - um) / (2 * h)
        f = self.source_at(x)
        return lap + self.kappa_at(x) * u0 - (0 if f is None else f)

    def bc_residuals_fd(self, n: int = 256, h: float = 1e-5, rng: int = 0,
                        u: ComplexFn | None = None) -> dict[str, NDArray[np.complex128]]:
        """Residual of each part's condition at sampled boundary points, for the exact solution
        (normal derivative by central differences along the normal)."""
        u = u or self.exact_at
        b = self.domain.sample_boundary(n, np.random.default_rng(rng), "uniform")
        out = {}
        for part, bc in self.bcs.items():
            mask = b.parts == part
            if bc is None or not mask.any():
                continue
            x, nrm = b.x[mask], b.normals[mask]
            if isinstance(bc, Dirichlet):
                out[part] = u(x) - self._dirichlet_at(bc, x)
            else:
                dudn = (u(x + h * nrm) - u(x - h * nrm)) / (2 * h)
                g = self._robin_g_at(bc, x, nrm)
                out[part] = dudn + bc.alpha_values(x) * u(x) - (0 if g is None else g)
        return out


def _source_wavenumber(problem: Problem, src: PointSource) -> float:
    """The k whose λ/10 a PointSource without a width takes: in a variable medium the local
    wavenumber at the source (the largest anywhere would make a source in a faster region
    needlessly narrow), the problem's where the medium is constant or evanescent there."""
    if src.width is not None or not callable(problem.kappa):
        return problem.wavenumber
    at = np.asarray(src.position, np.float64)[None, :]
    return float(problem.local_wavenumber(at)[0]) or problem.wavenumber
