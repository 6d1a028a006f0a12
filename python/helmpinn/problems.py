"""Helmholtz problems: ``Δu + κ(x) u = f(x)`` in a domain, with boundary conditions per part.

A :class:`Problem` holds

- ``domain``: a :mod:`helmpinn.geometry` domain (a :class:`~helmpinn.geometry.PointCloud` for
  explicit point sets);
- ``kappa``: ``κ = k²``, a constant or a callable ``x [N, d] -> real [N]`` (heterogeneous medium);
- ``source``: ``f``, a callable ``x -> complex [N]`` or None (zero);
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
  parts (a scatterer); errors, plots and predictions stay on the physical domain;
- ``density``: an optional ``ρ(x) -> real [N] > 0`` (with ``density_grad(x) -> [N, d]``, or
  central differences of ρ): the equation becomes ``∇·(ρ⁻¹∇u) + κu = f``;
- ``hints``: optional training defaults measured for this problem, over those derived from its
  wavenumber: ``{"weights": {...}}`` (loss weights, :func:`helmpinn.trainer.auto_weights`),
  ``{"adam": {...}}`` (keys of :func:`helmpinn.trainer.default_settings`), ``{"lm": {...}}``
  (keys of :func:`helmpinn.lm.lm_defaults`).

With a PML or a density the PDE points carry the core's general operator (``a_pde``, ``b_pde``;
docs/MATH.md, General operator) instead of the Laplacian.

Complex values are complex NumPy arrays in Python; :meth:`TrainingSet.to_batch` converts them,
once per draw, into a :class:`~helmpinn.Batch` for the core (``[N, 2]`` real pairs (re, im) in
the model's dtype).

Problems by name: :func:`~helmpinn.registry.get_problem` and
:func:`~helmpinn.registry.list_problems` in :mod:`helmpinn.registry` (also importable from here);
the built-in problems with exact solutions (``"plane1d"``, ``"dirichlet2d"``,
``"heterogeneous2d"``, ``"cube3d"``) are in :mod:`helmpinn.builtin`, the scattering ones in
:mod:`helmpinn.scattering`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ._checks import real_number
from ._compat import UNSET, renamed
from .batch import Batch
from .geometry import BoundarySample, Box, BoxMinusBall, Domain, Interval, PointCloud
from .pml import PML, operator_coefficients

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
    (complex [N_pde, d] or None): the general operator's coefficients (PML, density).
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

    def to_batch(self, dtype: Any = np.float32, *, counts: Mapping[str, int] | None = None,
                 device: str = "cpu") -> Batch:
        """The :class:`~helmpinn.Batch` of these points for a workspace of ``dtype``: every array
        converted once (C-contiguous, complex values as (re, im) pairs); absent terms are left
        out. ``counts``: the global point counts when this set is one shard of a larger one.
        ``device``: "cuda" / "cuda:N" copies the converted arrays once to that GPU
        (:meth:`Batch.to_device`; checked before any conversion)."""
        if device != "cpu":
            from . import _device
            _device.check(device, "TrainingSet.to_batch")
        kw: dict[str, Any] = {}
        if len(self.x_pde):
            kw.update(x_pde=self.x_pde, kappa=self.kappa, f=self.f)
            if self.a_pde is not None:  # the general operator, with kappa as its (real) c
                kw.update(a_pde=self.a_pde, b_pde=self.b_pde)
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


class Problem:
    """A Helmholtz problem ``Δu + κ u = f`` (see the module docstring for every argument).

    ``wavenumber``: the largest local wavenumber ``sqrt(max κ)``; estimated from κ when not
    given. The trainer picks Fourier frequencies and loss scales from it.
    """

    def __init__(self, domain: Domain, kappa: float | Callable, source: ComplexFn | None = None,
                 bcs: Mapping[str | tuple[str, ...], Dirichlet | Robin | None] | None = None,
                 data: tuple[ArrayLike, ArrayLike] | None = None, exact: ComplexFn | None = None,
                 *, name: str = "custom", description: str = "",
                 wavenumber: float | None = None, options: Mapping[str, Any] | None = None,
                 exact_grad: Callable | None = None, pml: PML | None = None,
                 density: Callable | None = None, density_grad: Callable | None = None,
                 hints: Mapping[str, Mapping[str, Any]] | None = None):
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
        self.hints = {key: dict(value) for key, value in (hints or {}).items()}
        unknown = set(self.hints) - {"weights", "adam", "lm"}
        if unknown:
            raise ValueError(f"hints: unknown keys {sorted(unknown)}; use 'weights', 'adam', 'lm'")
        self.pml = pml
        self.density = density
        self.density_grad = density_grad
        self.sampling_domain = domain
        self._absorbed: tuple[str, ...] = ()
        if pml is not None:
            if isinstance(domain, BoxMinusBall):
                lo, hi = pml.outer_box(domain.box.lo, domain.box.hi)
                self.sampling_domain = BoxMinusBall(Box(lo, hi), domain.ball)
                self._absorbed = domain.box.part_names
            elif isinstance(domain, Box):
                lo, hi = pml.outer_box(domain.lo, domain.hi)
                self.sampling_domain = Interval(lo[0], hi[0]) if domain.dim == 1 else Box(lo, hi)
                self._absorbed = domain.part_names
            else:
                raise TypeError(f"pml: the domain must be a Box, Interval or BoxMinusBall (a PML "
                                f"surrounds its outer box), got {type(domain).__name__}")
        if not callable(kappa):
            kappa = float(kappa)
        self.kappa = kappa
        self.source = source
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
            self.data = (xd, yd)
        else:
            self.data = None
        if wavenumber is None:
            if callable(self.kappa):
                pts = domain.sample_interior(4096, np.random.default_rng(0))
                kmax = float(np.max(self.kappa_at(pts)))
            else:
                kmax = self.kappa
            wavenumber = math.sqrt(max(kmax, 0.0))
        self.wavenumber = real_number("Problem", "wavenumber", wavenumber, low=0.0, low_open=False)
        if pml is not None:
            lo, hi = domain.bounds
            pml.check(lo, hi, self.wavenumber)

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"Problem({self.name}({opts}), {self.domain!r}, k_max={self.wavenumber:.4g})"

    @property
    def part_names(self) -> tuple[str, ...]:
        """The boundary parts that take conditions (with a PML: those the layer does not absorb)."""
        return tuple(p for p in self.domain.part_names if p not in self._absorbed)

    @property
    def uses_operator(self) -> bool:
        """True when the PDE points carry the general operator (a PML or a density)."""
        return self.pml is not None or self.density is not None

    def operator_at(self, x: NDArray) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
        """``(a [N, d], b [N, d])``: the general operator's coefficients at x (docs/MATH.md,
        General operator; a = 1, b = 0 without a PML or density)."""
        lo, hi = self.domain.bounds
        return operator_coefficients(x, pml=self.pml, box=(lo, hi), k=self.wavenumber,
                                     density=self.density, density_grad=self.density_grad)

    def in_layer(self, x: NDArray) -> NDArray[np.bool_]:
        """True for points of the PML (outside the physical box); all False without one."""
        x = np.asarray(x, np.float64)
        if self.pml is None:
            return np.zeros(len(x), bool)
        lo, hi = self.domain.bounds
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
    def kappa_at(self, x: NDArray) -> float | NDArray[np.float64]:
        if callable(self.kappa):
            k = np.asarray(self.kappa(x), dtype=np.float64)
            if k.shape != (len(x),):
                raise ValueError(f"kappa callable returned shape {k.shape}, expected ({len(x)},)")
            return k
        return self.kappa

    def source_at(self, x: NDArray) -> NDArray[np.complex128] | None:
        return None if self.source is None else _complex_values(self.source, x)

    def exact_at(self, x: NDArray) -> NDArray[np.complex128]:
        if self.exact is None:
            raise ValueError(f"problem {self.name!r} has no exact solution")
        return _complex_values(self.exact, x)

    def test_points(self, n_per_dim: int | None = None) -> NDArray[np.float64]:
        """Points of a regular grid inside the domain for error reports (a point cloud's own
        interior points)."""
        if isinstance(self.domain, PointCloud):
            return self.domain.interior
        if n_per_dim is None:
            n_per_dim = {1: 1001, 2: 101}.get(self.dim, 31)
        return self.domain.grid(n_per_dim)[0]

    # -- sampling -----------------------------------------------------------------------------
    def sample(self, pde_points: int | None = None, bc_points: int | None = None,
               rng: np.random.Generator | int | None = None, method: str = "uniform", *,
               n_pde: int = UNSET, n_bc: int = UNSET) -> TrainingSet:
        """Collocation points for one training stretch: ``pde_points`` interior and ``bc_points``
        boundary points (split over the parts by measure; Dirichlet parts go to the data term,
        Robin parts to the bc term) plus the problem's data points. (``n_pde`` / ``n_bc`` are
        the deprecated names of the two counts.)"""
        pde_points = renamed("Problem.sample", "pde_points", pde_points, "n_pde", n_pde)
        bc_points = renamed("Problem.sample", "bc_points", bc_points, "n_bc", n_bc)
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        x_pde = self.sampling_domain.sample_interior(pde_points, rng, method)
        kappa = self.kappa_at(x_pde)
        f = self.source_at(x_pde)
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
            yd.append(np.zeros(len(xd_wall), np.complex128))
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
                yd.append(bc.values(x))
            else:
                nrm = b.normals[mask]
                xr.append(x)
                nr.append(nrm)
                ar.append(bc.alpha_values(x))
                if not callable(bc.alpha):
                    const_alpha.append(complex(bc.alpha))
                g = bc.g_values(x, nrm)
                any_g |= g is not None
                gr.append(np.zeros(len(x), np.complex128) if g is None else g)
        if self.data is not None:
            xd.append(self.data[0])
            yd.append(self.data[1])
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
                out[part] = u(x) - bc.values(x)
            else:
                dudn = (u(x + h * nrm) - u(x - h * nrm)) / (2 * h)
                g = bc.g_values(x, nrm)
                out[part] = dudn + bc.alpha_values(x) * u(x) - (0 if g is None else g)
        return out


# The registry (get_problem, list_problems, ...) lives in helmpinn.registry and the built-in
# factories in helmpinn.builtin; both import this module, never the reverse at import time. Their
# names stay importable from here (resolved on first use).
_FORWARDED = {name: "registry" for name in ("get_problem", "list_problems", "problem_names",
                                            "problem_options", "register_problem", "_REGISTRY")}
_FORWARDED.update({name: "builtin" for name in ("plane1d", "dirichlet2d", "heterogeneous2d", "cube3d")})


def __getattr__(name: str):
    if name in _FORWARDED:
        import importlib

        return getattr(importlib.import_module(f"{__package__}.{_FORWARDED[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
