"""Helmholtz problems: ``Δu + κ(x) u = f(x)`` in a domain, with boundary conditions per part.

A :class:`Problem` holds

- ``domain``: a :mod:`helmpinn.problems.geometry` domain (a :class:`~helmpinn.problems.geometry.PointCloud` for
  explicit point sets);
- ``kappa``: ``κ = k²``, a constant or a callable ``x [N, d] -> [N]`` (heterogeneous medium);
  complex values (``κ = k²(1 + iε)``) make an absorbing medium (the core's complex ``c``). Or,
  instead of ``kappa``, ``frequency`` (f, in Hz) and ``velocity`` (v(x) > 0, a constant or a
  callable such as a :class:`~helmpinn.problems.media.GridField`, in length units per second):
  ``κ = (2πf)²/v²``;
- ``source``: ``f``, a callable ``x -> complex [N]``, a :class:`~helmpinn.problems.sources.PointSource`,
  a list of them (summed), or None (zero); PointSources without a width get λ/10 (the local
  wavelength at the source);
- ``bcs``: a dict from boundary part name (or a tuple of names, or ``"*"`` for every part not
  named otherwise) to a boundary condition: :class:`~helmpinn.problems.conditions.Dirichlet`
  (``u = value``, enters the loss's data term), :class:`~helmpinn.problems.conditions.Robin`
  (``∂u/∂n + α u = g``, the loss's bc term) and its helpers
  :func:`~helmpinn.problems.conditions.Neumann` (α = 0) and
  :func:`~helmpinn.problems.conditions.Sommerfeld` (``∂u/∂n − i k u = g``, α = −ik); ``None``
  leaves a part free on purpose;
- ``data``: optional extra data points ``(x [N, d], y complex [N])`` (the data term);
- ``exact``: an optional exact solution ``x -> complex [N]``, used for error reports;
- ``pml``: an optional :class:`~helmpinn.problems.pml.PML` around the domain's outer box (a
  :class:`~helmpinn.problems.geometry.Box`, :class:`~helmpinn.problems.geometry.Interval` or
  :class:`~helmpinn.problems.geometry.BoxMinusBall`): the box's faces the layer covers (every face,
  or its ``faces``) are then no boundary at all, the layer is sampled with the domain, ``u = 0`` on
  its outer wall, and ``bcs`` names only the remaining parts (a scatterer; a face without the
  layer, whose condition defaults to ``u = 0``: a free surface); errors, plots and predictions stay on the physical domain (a
  :class:`~helmpinn.problems.geometry.PointCloud` holds its layer itself: see below); where κ varies in
  the layer, a default strength is matched to the wavenumbers there
  (:meth:`~helmpinn.problems.pml.PML.for_medium`; ``problem.pml`` is the layer used); a
  :class:`~helmpinn.problems.sources.PointSource` in the layer or within half a local wavelength of it
  gets a ``UserWarning``;
- ``density``: an optional ``ρ(x) -> real [N] > 0`` (with ``density_grad(x) -> [N, d]``, or
  ρ's own ``gradient`` for a :class:`~helmpinn.problems.media.GridField`, or central differences of ρ):
  the equation becomes ``∇·(ρ⁻¹∇u) + κu = f``;
- ``a``, ``b``: optional coefficients of the operator ``a ∇·(ρ⁻¹∇u) + b·∇u + κu`` (``a`` a
  constant or ``x -> [N]``, real or complex; ``b`` a vector or ``x -> [N, d]``), combined with
  the PML's stretching and the density (:func:`helmpinn.problems.pml.operator_coefficients`);
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
- ``background``: an optional :class:`~helmpinn.problems.sources.FreeSpaceSource` (an exact point source
  ``u₀ = A G(|x − x₀|)``, ``Δu₀ + k₀²u₀ = −Aδ``) for the scattered-field form: the unknown is
  ``u_s = u − u₀``, smooth where the medium is homogeneous (κ = k₀², a = 1, b = 0, checked at
  x₀ to :data:`~helmpinn.problems.medium.BACKGROUND_TOLERANCE`) around x₀, with the source
  ``f − L u₀`` (L the problem's
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

A :class:`~helmpinn.problems.geometry.PointCloud` domain with a PML holds the layer's points itself: the
cloud's bounding box is the layer's outer wall, the physical box that box shrunk by the width,
and the cloud's boundary parts (the wall among them) take conditions as usual.

Complex values are complex NumPy arrays in Python;
:meth:`~helmpinn.problems.training_set.TrainingSet.to_batch` converts them,
once per draw, into a :class:`~helmpinn.Batch` for the core (``[N, 2]`` real pairs (re, im) in
the model's dtype).

Problems by name: :func:`~helmpinn.problems.registry.get_problem` and
:func:`~helmpinn.problems.registry.list_problems` in :mod:`helmpinn.problems.registry` (and at the top level,
``helmpinn.get_problem``; the registry imports this module, never the reverse); the built-in
problems with exact solutions (``"plane1d"``, ``"dirichlet2d"``, ``"heterogeneous2d"``,
``"cube3d"``) are in :mod:`helmpinn.problems.builtin`, the scattering ones in
:mod:`helmpinn.problems.scattering`.

A Problem is made of three parts, each its own object: its :class:`~helmpinn.problems.medium.Medium`
(``problem.medium``: κ, the operator's coefficients, the wavenumber, the background),
its :class:`~helmpinn.problems.source_terms.SourceTerms` (``problem.sources``: the source, its
point sources and their share of the points) and its :class:`~helmpinn.problems.sampler.Sampler`
(``problem.sampler``: where the points are drawn, and their draws); the attributes of those names
on the Problem (``problem.kappa``, ``problem.source``, ``problem.pml_share``, ...) are the parts'.
:meth:`Problem.sample` has the sampler draw the points and evaluates the medium, the source and the
conditions (:mod:`helmpinn.problems.conditions`) at them.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._compat import UNSET, renamed
from .conditions import ComplexFn, Dirichlet, Robin, complex_values, resolve_bcs
from .geometry import Domain, PointCloud
from .medium import Medium, coefficient, medium_kappa, operator_arguments
from .pml import PML
from .sampler import CORNER_WAVELENGTHS, Sampler
from .source_terms import SOURCE_PML_WAVELENGTHS, SourceTerms
from .sources import FreeSpaceSource, PointSource
from .training_set import TrainingSet, check_finite_data

__all__ = ["Problem"]


def _kept(part: str, name: str, doc: str) -> property:
    """An attribute of a :class:`Problem` kept by one of its parts (``medium``, ``sources``,
    ``sampler``) under the same name: read and written there."""
    def get(problem):
        return getattr(getattr(problem, part), name)

    def put(problem, value) -> None:
        setattr(getattr(problem, part), name, value)
    return property(get, put, doc=doc)


class Problem:
    """A Helmholtz problem ``Δu + κ u = f`` (see the module docstring for every argument).

    ``wavenumber``: the largest local wavenumber ``sqrt(max |κ|)``; estimated from κ when not
    given. The trainer picks Fourier frequencies and loss scales from it.
    """

    kappa = _kept("medium", "kappa",
                  "κ = k², a number (real, or complex for an absorbing medium) or a callable of the points.")
    velocity = _kept("medium", "velocity", "The velocity as given (None with kappa=), which the plots draw.")
    pml = _kept("medium", "pml", "The PML used (its default strength matched to the medium), or None.")
    density = _kept("medium", "density", "The density ρ, a callable of the points, or None.")
    density_grad = _kept("medium", "density_grad",
                         "The density's gradient (given, or a GridField's own), or None (central differences).")
    a = _kept("medium", "a", "The operator's coefficient a (None, a complex number or a callable).")
    b = _kept("medium", "b", "The operator's coefficient b (None, d complex numbers or a callable).")
    wavenumber = _kept("medium", "wavenumber",
                       "The largest local wavenumber (the square root of the largest modulus of κ).")
    background = _kept("medium", "background", "The FreeSpaceSource of the scattered-field form, or None.")
    source = _kept("sources", "source", "The source f as one callable (the sum of the terms), or None.")
    point_sources = _kept("sources", "point_sources", "The PointSources of the source, with their widths.")
    source_share = _kept("sources", "source_share", "The share of the PDE points drawn at the PointSources.")
    sampling_domain = _kept("sampler", "sampling_domain",
                            "Where the points are drawn (the domain, or with a PML its outer box).")
    pml_share = _kept("sampler", "pml_share",
                      "With a PML, the share of the PDE points drawn in the layer (None: by volume).")

    #: A PointSource closer than this many (local) wavelengths to a PML gets a warning.
    SOURCE_PML_WAVELENGTHS = SOURCE_PML_WAVELENGTHS

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
            raise TypeError(f"domain must be a helmpinn.problems.geometry.Domain, got {type(domain).__name__}")
        self.domain = domain
        self.dim = domain.dim
        density_grad = operator_arguments(pml, density, density_grad)
        self.hints = {key: dict(value) for key, value in (hints or {}).items()}
        unknown = set(self.hints) - {"weights", "adam", "lm"}
        if unknown:
            raise ValueError(f"hints: unknown keys {sorted(unknown)}; use 'weights', 'adam', 'lm'")
        a, b = coefficient("a", a, self.dim), coefficient("b", b, self.dim, vector=True)
        self.sampler = Sampler(domain, pml, pml_share)
        self.medium = Medium(self.dim, medium_kappa(kappa, frequency, velocity), velocity=velocity, pml=pml,
                             density=density, density_grad=density_grad, a=a, b=b, box=self.sampler.box)
        self.exact = exact
        self.exact_grad = exact_grad
        self.name = name
        self.description = description
        self.options = dict(options or {})
        self.bcs = resolve_bcs(bcs or {}, self.part_names, self.sampler.absorbed, self.sampler.free)
        self.data = None if data is None else self._checked_data(data)
        self.medium.set_wavenumber(wavenumber, domain)
        if len(domain.reentrant_corners()[0]):   # the PDE rows weighted down about them (sampler.corner_weights)
            k = float(self.wavenumber)
            self.sampler.corner_radius = CORNER_WAVELENGTHS * 2 * math.pi / k if k > 0 else math.inf
        if pml is not None:
            self.medium.fit_pml(self.sampler.layer_points)
        self.sources = SourceTerms(source, source_share, dim=self.dim, medium=self.medium,
                                   drawn=not isinstance(domain, PointCloud))
        self.sources.warn_outside(self.sampling_domain, self.pml, domain)
        self.sources.warn_near_pml(self.sampling_domain, self.sampler.box, self.medium)
        self.medium.set_background(background, self.data, self.sampler)
        if exact is not None and isinstance(domain, PointCloud):
            self.test_points()   # refuses a cloud without test points (its error would read 0)

    def _checked_data(self, data) -> tuple[NDArray[np.float64], NDArray[np.complex128]]:
        xd = np.ascontiguousarray(np.asarray(data[0], dtype=np.float64))
        yd = np.asarray(data[1], dtype=np.complex128).reshape(-1)
        if xd.ndim != 2 or xd.shape[1] != self.dim or len(yd) != len(xd):
            raise ValueError(f"data must be (x [N, {self.dim}], y complex [N]), got shapes "
                             f"{xd.shape} and {yd.shape}")
        check_finite_data("Problem", "data's x", xd, xd, "data point")
        check_finite_data("Problem", "data's y", yd, xd, "data point")
        return xd, yd

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options.items())
        return f"Problem({self.name}({opts}), {self.domain!r}, k_max={self.wavenumber:.4g})"

    @property
    def part_names(self) -> tuple[str, ...]:
        """The boundary parts that take conditions (with a PML: those the layer does not absorb)."""
        return tuple(p for p in self.domain.part_names if p not in self.sampler.absorbed)

    @property
    def uses_operator(self) -> bool:
        """True when the PDE points carry the general operator (a PML, a density, ``a``, ``b``)."""
        return self.medium.uses_operator

    def operator_at(self, x: NDArray) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
        """``(a [N, d], b [N, d])``: the general operator's coefficients at x (docs/MATH.md,
        General operator; a = 1, b = 0 without a PML, density or a user's ``a``, ``b``)."""
        return self.medium.operator_at(x)

    def in_layer(self, x: NDArray) -> NDArray[np.bool_]:
        """True for points of the PML (outside the physical box); all False without one."""
        return self.sampler.in_layer(x)

    # -- evaluation ---------------------------------------------------------------------------
    def kappa_at(self, x: NDArray) -> complex | float | NDArray:
        """κ at x: a number, or [N] (real, or complex for an absorbing medium)."""
        return self.medium.kappa_at(x)

    def local_wavenumber(self, x: NDArray) -> NDArray[np.float64]:
        """``sqrt(max(Re κ, 0))`` at x [N, d] ([N]): 0 where the medium is evanescent."""
        return self.medium.local_wavenumber(x)

    def source_at(self, x: NDArray) -> NDArray[np.complex128] | None:
        """f at x; with a background, the scattered field's: ``f − L u₀`` (away from x₀)."""
        f = self.sources.at(x)
        if self.background is not None:
            fb = self.medium.background_source(np.asarray(x, np.float64))
            f = fb if f is None else f + fb
        return f

    def background_at(self, x: NDArray) -> NDArray[np.complex128]:
        """u₀ at x (zero without a background; ValueError at the background source in 2-D and
        3-D, where u₀ is infinite: :meth:`at_source`)."""
        return self.medium.background_at(x)

    def at_source(self, x: NDArray) -> NDArray[np.bool_]:
        """Which points of x [N, d] are at the background source (closer to it than its
        ``core_radius``; none without a background)."""
        return self.medium.at_source(x)

    def total_field(self, x: NDArray, scattered: ArrayLike) -> NDArray[np.complex128]:
        """The total field ``u = u_s + u₀`` at x from the network's (scattered) values there: NaN
        at the background source in 2-D and 3-D, where u₀ is infinite."""
        x = np.asarray(x, np.float64)
        u = np.array(scattered, np.complex128)
        if self.background is None:
            return u
        bad = self.medium.singular(x)
        u[bad] = np.nan
        u[~bad] += self.background(x[~bad])
        return u

    def exact_at(self, x: NDArray) -> NDArray[np.complex128]:
        """The exact solution at x (with a background: the scattered part, ``exact − u₀``, NaN at
        the background source in 2-D and 3-D, where both are infinite; ``exact`` is not called
        there)."""
        if self.exact is None:
            raise ValueError(f"problem {self.name!r} has no exact solution")
        if self.background is None:
            return complex_values(self.exact, x)
        x = np.asarray(x, np.float64)
        bad = self.medium.singular(x)
        if not bad.any():
            return complex_values(self.exact, x) - self.background(x)
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
        pts = pts[~self.medium.singular(pts)] if self.background is not None else pts
        if len(pts):
            return pts
        if isinstance(self.domain, PointCloud):
            raise ValueError(f"exact: the error is measured at the PointCloud's interior points outside "
                             f"any PML and away from a background source, and this one has none "
                             f"({len(self.domain.interior)} interior point(s) in all): give interior "
                             f"points, or leave exact out")
        raise ValueError(f"test_points: no point of a grid of {n_per_dim} per axis lies inside "
                         f"{self.domain!r}; give more points per axis")

    def _dirichlet_at(self, bc: Dirichlet, x: NDArray) -> NDArray[np.complex128]:
        """The data term's target: the condition's value, less u₀ with a background."""
        return bc.values(x) - self.background_at(x)

    def _robin_g_at(self, bc: Robin, x: NDArray, nrm: NDArray) -> NDArray[np.complex128] | None:
        """The Robin term's g, less ``∂u₀/∂n + α u₀`` with a background."""
        g = bc.g_values(x, nrm)
        if self.background is None:
            return g
        return (0 if g is None else g) - self.medium.background_robin(bc.alpha_values(x), x, nrm)

    # -- sampling -----------------------------------------------------------------------------
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
        return self.sampler.sample_pde(n, rng, method, self.point_sources, self.source_share)

    def sample(self, pde_points: int | None = None, bc_points: int | None = None,
               rng: np.random.Generator | int | None = None, method: str = "uniform", *,
               n_pde: int = UNSET, n_bc: int = UNSET) -> TrainingSet:
        """Collocation points for one training stretch: ``pde_points`` interior points
        (:meth:`sample_pde`) and ``bc_points`` boundary points (split over the parts by measure;
        Dirichlet parts go to the data term, Robin parts to the bc term, their rows weighted
        about re-entrant corners as the PDE rows are: :meth:`Sampler.corner_weights
        <helmpinn.problems.sampler.Sampler.corner_weights>`) plus the problem's data points. (``n_pde`` / ``n_bc`` are the deprecated names of the two counts.)"""
        pde_points = renamed("Problem.sample", "pde_points", pde_points, "n_pde", n_pde)
        bc_points = renamed("Problem.sample", "bc_points", bc_points, "n_bc", n_bc)
        rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
        x_pde, weight = self.sample_pde(pde_points, rng, method)
        kappa = self.kappa_at(x_pde)
        f = self.source_at(x_pde)
        self._check("a PDE point's coordinates", x_pde, x_pde, "PDE point")
        self._check("kappa", np.broadcast_to(kappa, (len(x_pde),)), x_pde, "PDE point")
        self._check("the source", f, x_pde, "PDE point")
        parts, wall = self.sampler.sample_boundary(bc_points, rng, method)
        ts = TrainingSet(x_pde=x_pde, kappa=kappa, f=f, **self._boundary_rows(parts, wall))
        if self.uses_operator:
            ts.a_pde, ts.b_pde = self.operator_at(x_pde)
            self._check("the operator's a (from a=, the density, the PML)", ts.a_pde, x_pde, "PDE point")
            self._check("the operator's b (from b=, the density, the PML)", ts.b_pde, x_pde, "PDE point")
        if weight is not None:  # sqrt(w) on every PDE coefficient: |r|² times w (module docstring)
            ts.weigh(weight)
        ts.sizes = {"pde": len(ts.x_pde), "data": len(ts.x_data), "bc": len(ts.x_bc)}
        return ts

    def _check(self, what: str, values: Any, x: NDArray, points: str) -> None:
        check_finite_data(f"problem {self.name!r}", what, values, x, points)

    def _boundary_rows(self, b, wall: NDArray | None) -> dict[str, Any]:
        """The data and Robin rows of a TrainingSet from boundary points ``b`` (by part) and the
        PML's outer ``wall`` (u = 0 there: ``u_s = −u₀``), with the problem's data points."""
        xd, yd = [], []
        if wall is not None and len(wall):
            xd.append(wall)
            yd.append(-self.background_at(wall))
        xr, nr, ar, gr = [], [], [], []
        const_alpha: list[complex] = []
        any_g = False
        for part, bc in self.bcs.items():
            mask = b.parts == part
            if bc is None or not mask.any():
                continue
            x = b.x[mask]
            where = f"boundary point on {part!r}"
            if isinstance(bc, Dirichlet):
                xd.append(x)
                yd.append(self._dirichlet_at(bc, x))
                self._check(f"the Dirichlet value on {part!r}", yd[-1], x, where)
                continue
            nrm = b.normals[mask]
            xr.append(x)
            nr.append(nrm)
            ar.append(bc.alpha_values(x))
            self._check(f"the Robin alpha on {part!r}", ar[-1], x, where)
            if not callable(bc.alpha):
                const_alpha.append(complex(bc.alpha))
            g = self._robin_g_at(bc, x, nrm)
            self._check(f"the Robin g on {part!r}", g, x, where)
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
        n_bc, g = cat(nr, (0, d)), cat(gr, (0,)) if any_g else None
        weight = self.sampler.corner_weights(x_bc) if len(x_bc) else None
        if weight is not None:   # sqrt(w) on the whole row: |r|² counts w times (Sampler.corner_weights)
            root = np.sqrt(weight)
            n_bc, alpha = n_bc * root[:, None], alpha * root
            g = None if g is None else g * root
        return dict(x_data=cat(xd, (0, d)), y=cat(yd, (0,)).astype(np.complex128), x_bc=x_bc,
                    n_bc=n_bc, alpha=alpha if len(x_bc) else 0j, g=g)

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
