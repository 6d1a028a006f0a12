"""Perfectly matched layers and variable density: the coefficients of the core's general operator.

A :class:`PML` of width ``w`` around a domain's outer box ``[lo, hi]`` (on every face, or on the
faces named by ``faces``) stretches each coordinate in the layer, ``∂_j → (1/s_j) ∂_j`` with
``s_j(x_j) = 1 + i σ_j(x_j)/k`` and the polynomial profile ``σ_j = σ₀ (δ_j/w)^p`` (``δ_j``
the distance outside ``[lo_j, hi_j]``, 0 inside). The Helmholtz operator becomes the core's
diagonal operator (docs/MATH.md, General operator)

    Σ_j a_j ∂²u/∂x_j² + Σ_j b_j ∂u/∂x_j + κ u,   a_j = 1/s_j²,   b_j = −s_j′/s_j³,

and with a density ρ (``∇·(ρ⁻¹∇u) + κu``) ``a_j = 1/(ρ s_j²)``,
``b_j = ∂_j(ρ⁻¹)/s_j² − s_j′/(ρ s_j³)``. :func:`operator_coefficients` evaluates them.

Default strength: an outgoing plane wave entering the layer at normal incidence decays as
``exp(−∫σ)``; after the round trip to the wall (where u = 0) and back its amplitude is
``R = exp(−2 σ₀ w/(p+1))``, independent of k (the 1/k in s_j makes the decay per unit length
the same at every frequency). The default σ₀ makes that round trip ``R = 1e-4`` (``σ₀ = (p+1)
ln(10⁴)/(2w)``, 13.8/w for p = 2): at 60° incidence the round trip is still ``R^{cos 60°} = 1e-2``
of an amplitude that itself is far below the field in most problems. Much larger σ₀ makes the
field in the layer decay over a fraction of a wavelength, which a PINN resolves badly.

In a medium the stretching divides σ by the problem's wavenumber k (its largest), so a wave of
local wavenumber ``k_x < k`` (a faster part of the medium) decays as ``exp(−(k_x/k)∫σ)``: its
round trip is ``R^{k_x/k}``. The plain default thus matches only waves of wavenumber k; in
Marmousi at 3 Hz (velocities 1.5 to 5.5) the fastest make the round trip ``R^{0.27}`` = 8e-2.
A :class:`~helmpinn.Problem` whose κ varies matches its layer to the wavenumbers the layer
holds, ``k_min`` to ``k_max``: the default σ₀ times ``k/sqrt(k_min k_max)`` when that exceeds 1
(:meth:`PML.for_medium`), so that the geometric mean of the two makes the round trip R, the
fastest ``R^{sqrt(k_min/k_max)}`` and the slowest ``R^{sqrt(k_max/k_min)}`` (a homogeneous layer
around a slower inclusion: R exactly). Matching the fastest instead makes the slowest decay
over a fraction of a wavelength (docs/benchmarks-archive.md, "A PML in a medium"). A given
``strength`` is used as given.

Faces: ``faces`` names the faces of the box that carry the layer by the box's boundary-part
names (:class:`~helmpinn.problems.geometry.Box`: ``"xmin"``, ``"xmax"``, ``"ymin"``, ``"ymax"``,
``"zmin"``, ``"zmax"``), the names a Problem's ``bcs`` uses; default every face. The sampled box
grows by ``w`` on those faces only, and σ is zero across the others. A face without the layer
stays a boundary part of the problem: it takes the condition ``bcs`` gives it (by its name or
``"*"``), else ``u = 0``, the layer's wall condition: a pressure-release **free surface**. A
seismic section with coordinates ``(x, z)``, z the depth downwards from the surface z = 0, has
its surface on the face ``"ymin"``: ``PML(w, faces=("xmin", "xmax", "ymax"))``. The name of a
face that does not exist in the problem's dimension is refused when the layer meets its box.
"""
from __future__ import annotations

import math
import re
from typing import Callable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._checks import real_number

__all__ = ["PML", "operator_coefficients", "DEFAULT_REFLECTION", "face_name"]

#: The round-trip reflection at normal incidence that the default strength aims at.
DEFAULT_REFLECTION = 1e-4
#: The largest profile exponent p a PML accepts (σ ∝ δ^p; 2 to 4 are the usual choices).
MAX_POWER = 10.0
#: The largest σ₀/k a Problem accepts: |s| up to about this, so 1/s² stays above 1e-12.
MAX_STRETCH = 1e6
#: A face's name: the axis (x, y, z, or x3, x4, ... beyond the third) and min or max.
_FACE = re.compile(r"^(x|y|z|x[3-9]|x[1-9][0-9]+)(min|max)$")


def face_name(axis: int, side: int) -> str:
    """The boundary-part name of a box's face: ``axis`` 0, 1, 2, ... and ``side`` 0 (min) or 1
    (max), as :class:`~helmpinn.problems.geometry.Box` names its parts."""
    return ("xyz"[axis] if axis < 3 else f"x{axis}") + ("max" if side else "min")


def _face_index(name: str) -> tuple[int, int]:
    m = _FACE.match(name)
    axis = "xyz".index(m.group(1)) if len(m.group(1)) == 1 else int(m.group(1)[1:])
    return axis, int(m.group(2) == "max")


def checked_faces(faces, what: str = "PML: faces", empty: bool = False) -> tuple[str, ...]:
    """``faces`` (a face's name or a sequence of them) as distinct face names in the box's order,
    or a TypeError/ValueError naming ``what``; an empty sequence only where ``empty``."""
    given = (faces,) if isinstance(faces, str) else faces
    try:
        given = list(given)
    except TypeError:
        raise TypeError(f"{what} must be face names such as ('xmin', 'xmax', 'ymax'), got "
                        f"{type(faces).__name__}") from None
    for f in given:
        if not isinstance(f, str) or not _FACE.match(f):
            raise ValueError(f"{what}: {f!r} is not a face's name; expected names such as "
                             f"'xmin', 'xmax', 'ymin', 'ymax', 'zmin', 'zmax' (the box's boundary parts)")
    if not given and not empty:
        raise ValueError(f"{what} must name at least one face (no face: give pml=None)")
    if len(set(given)) != len(given):
        twice = sorted({f for f in given if given.count(f) > 1})
        raise ValueError(f"{what} names {twice} more than once")
    return tuple(sorted(given, key=_face_index))


def faces_of(dim: int) -> list[str]:
    """The names of a ``dim``-D box's faces in the box's order (xmin, xmax, ymin, ...)."""
    return [face_name(a, s) for a in range(dim) for s in (0, 1)]


def face_axis(name: str) -> int:
    """The axis (0, 1, 2, ...) of a face named as :func:`face_name` names it."""
    return _face_index(name)[0]


class PML:
    """A perfectly matched layer of thickness ``width`` around a domain's outer box.

    ``strength``: σ₀, the profile's value at the wall (default: a round-trip reflection of
    :data:`DEFAULT_REFLECTION` at normal incidence, see the module docstring); ``power``: the
    profile's exponent p (σ = σ₀ (δ/w)^p; p >= 1, default 2, so that σ and σ′ vanish at the
    interface with the physical domain; at most :data:`MAX_POWER`). Each must be a finite
    number; a :class:`~helmpinn.Problem` further checks the layer against its box and
    wavenumber (:meth:`check`). ``faces``: the faces that carry the layer, by the box's part
    names (a name or a sequence of them, e.g. ``("xmin", "xmax", "ymax")``; default None: every
    face); the others are boundary parts of the problem, ``u = 0`` unless its ``bcs`` says
    otherwise (module docstring, Faces).
    """

    def __init__(self, width: float, strength: float | None = None, power: float = 2, *, faces=None):
        self.width = real_number("PML", "width", width, low=0.0)
        if strength is not None:
            strength = real_number("PML", "strength", strength, low=0.0)
        self.power = real_number("PML", "power", power, low=1.0, low_open=False, high=MAX_POWER)
        self._strength = strength
        self.faces = None if faces is None else checked_faces(faces)
        if not math.isfinite(self.strength):
            raise ValueError(f"PML: width {self.width!r} is too small for the default strength "
                             f"((p+1) ln(1/R)/(2 width) = {self.strength!r}); give a wider layer")

    def check(self, lo: ArrayLike, hi: ArrayLike, k: float) -> None:
        """Raise ValueError, naming the PML's argument, when this layer around the box [lo, hi]
        at wavenumber k would give unusable coefficients or samples: k not finite and > 0, an
        outer box whose extent or measure is not finite, or a stretching ``σ₀/k`` above
        :data:`MAX_STRETCH` (the coefficients ``1/s²`` would fall below ``1e-12`` and vanish in
        float32)."""
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"PML: the wavenumber must be a finite number > 0 (the layer's "
                             f"stretching is 1 + i sigma/k), got {k!r}; give the Problem a "
                             f"positive kappa or wavenumber=")
        olo, ohi = self.outer_box(lo, hi)
        with np.errstate(over="ignore", invalid="ignore"):
            ext = ohi - olo
            finite = (np.all(np.isfinite(ext)) and np.isfinite(np.prod(ext))
                      and all(np.isfinite(np.prod(np.delete(ext, j))) for j in range(len(ext))))
        if not finite:
            raise ValueError(f"PML: width {self.width!r} around the box {np.asarray(lo).tolist()} .. "
                             f"{np.asarray(hi).tolist()} gives a sampling box of infinite extent or measure")
        if self.strength / k > MAX_STRETCH:
            raise ValueError(f"PML: strength/k = {self.strength:.3g}/{k:.3g} exceeds {MAX_STRETCH:g} "
                             f"(the coefficients 1/s^2 vanish); give a smaller strength or a wider "
                             f"layer (width={self.width!r})")

    @property
    def strength(self) -> float:
        """σ₀: the given strength, or the default from the width and power."""
        if self._strength is not None:
            return self._strength
        return (self.power + 1) * math.log(1.0 / DEFAULT_REFLECTION) / (2.0 * self.width)

    def for_medium(self, k: float, k_min: float, k_max: float | None = None) -> "PML":
        """The layer a :class:`~helmpinn.Problem` uses where the local wavenumbers in the layer
        range from ``k_min`` to ``k_max`` (default ``k``) below the problem's ``k``: with the
        default strength, a copy whose σ₀ is the default times ``k/sqrt(k_min k_max)`` when that
        exceeds 1 (see the module docstring); otherwise, or with a given strength, ``self``."""
        k_max = k if k_max is None else k_max
        if self._strength is not None or not (0.0 < k_min <= k_max):
            return self
        factor = k / math.sqrt(k_min * k_max)
        if not factor > 1.0:
            return self
        return PML(self.width, strength=self.strength * factor, power=self.power, faces=self.faces)

    def reflection(self) -> float:
        """The round-trip amplitude ``exp(−2 σ₀ w/(p+1))`` of a wave at normal incidence."""
        return math.exp(-2.0 * self.strength * self.width / (self.power + 1))

    def __repr__(self) -> str:
        s = "None" if self._strength is None else repr(self._strength)
        f = "" if self.faces is None else f", faces={self.faces!r}"
        return f"PML(width={self.width!r}, strength={s}, power={self.power!r}{f})"

    def sides(self, dim: int) -> NDArray[np.bool_]:
        """``[dim, 2]``: True where face (axis, side: 0 min, 1 max) of a ``dim``-D box carries
        the layer; a ValueError names ``faces`` when one of them is not a face in ``dim``."""
        out = np.ones((dim, 2), bool)
        if self.faces is None:
            return out
        out[:] = False
        for name in self.faces:
            axis, side = _face_index(name)
            if axis >= dim:
                raise ValueError(f"PML: faces: {name!r} is not a face of a {dim}-D box; its faces are "
                                 f"{faces_of(dim)}")
            out[axis, side] = True
        return out

    def layered_faces(self, dim: int) -> tuple[str, ...]:
        """The names of the faces of a ``dim``-D box that carry the layer, in the box's order."""
        sides = self.sides(dim)
        return tuple(face_name(a, s) for a in range(dim) for s in (0, 1) if sides[a, s])

    def free_faces(self, dim: int) -> tuple[str, ...]:
        """The names of the faces of a ``dim``-D box without the layer (boundary parts of the
        problem: ``u = 0`` unless its ``bcs`` names them)."""
        sides = self.sides(dim)
        return tuple(face_name(a, s) for a in range(dim) for s in (0, 1) if not sides[a, s])

    def faces_record(self, dim: int) -> list[str] | None:
        """What a run's settings record of the faces: None when every face of a ``dim``-D box
        carries the layer (as a record without faces reads), else the layered faces' names."""
        named = self.layered_faces(dim)
        return None if len(named) == 2 * dim else list(named)

    def outer_box(self, lo: ArrayLike, hi: ArrayLike) -> tuple[NDArray, NDArray]:
        """The layer's outer wall around the box [lo, hi] (grown on the layered faces only)."""
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        sides = self.sides(lo.size)
        return lo - self.width * sides[:, 0], hi + self.width * sides[:, 1]

    def stretch(self, x: ArrayLike, lo: ArrayLike, hi: ArrayLike, k: float
                ) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
        """``(s [N, d], s′ [N, d])``: the stretching ``s_j = 1 + i σ_j(x_j)/k`` and its derivative
        ``ds_j/dx_j`` at x, for the physical box [lo, hi] and wavenumber k."""
        x = np.asarray(x, np.float64)
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"PML: the wavenumber must be a finite number > 0, got {k}")
        sides = self.sides(lo.size)
        below = np.where(sides[:, 0], lo - x, 0.0)   # no layer beyond a free face: σ = 0 there
        above = np.where(sides[:, 1], x - hi, 0.0)
        delta = np.maximum(np.maximum(below, above), 0.0) / self.width  # [N, d], 0 inside
        side = np.where(above > 0, 1.0, np.where(below > 0, -1.0, 0.0))
        p, s0 = self.power, self.strength
        sigma = s0 * delta**p
        dsigma = side * s0 * p * delta ** (p - 1) / self.width if p > 1 else side * s0 / self.width
        dsigma = np.where(delta > 0, dsigma, 0.0)
        return 1.0 + 1j * sigma / k, 1j * dsigma / k


def operator_coefficients(x: ArrayLike, *, pml: PML | None = None, box=None, k: float = 1.0,
                          density: Callable | None = None, density_grad: Callable | None = None,
                          scale: ArrayLike | None = None, drift: ArrayLike | None = None
                          ) -> tuple[NDArray[np.complex128], NDArray[np.complex128]]:
    """``(a [N, d], b [N, d])`` of the core's general operator at x for a PML around ``box =
    (lo, hi)`` (wavenumber k) and/or a density ``ρ(x) -> [N]`` (> 0) with gradient
    ``density_grad(x) -> [N, d]`` (central differences of ρ when not given), and a user's
    coefficients: ``scale`` (α, complex [N]) and ``drift`` (β, complex [N, d]) of the physical
    operator ``α ∇·(ρ⁻¹∇u) + β·∇u + c u``.

    Stretched (``∂_j → (1/s_j) ∂_j``), that operator is ``Σ_j a_j ∂_jj u + Σ_j b_j ∂_j u + c u``
    with ``a_j = α/(ρ s_j²)`` and ``b_j = α (∂_j(ρ⁻¹)/s_j² − s_j′/(ρ s_j³)) + β_j/s_j``."""
    x = np.asarray(x, np.float64)
    n, d = x.shape
    if pml is not None:
        s, ds = pml.stretch(x, box[0], box[1], k)
    else:
        s, ds = np.ones((n, d), np.complex128), np.zeros((n, d), np.complex128)
    if density is None:
        a, b = 1.0 / s**2, -ds / s**3
    else:
        rho = density_values(density, x)
        grad = density_gradient(density, density_grad, x)
        inv = 1.0 / rho[:, None]
        # a_j = 1/(rho s_j^2); b_j = d_j(1/rho)/s_j^2 - s_j'/(rho s_j^3), d_j(1/rho) = -rho_j/rho^2.
        a, b = inv / s**2, -grad * inv**2 / s**2 - inv * ds / s**3
    if scale is not None:
        scale = np.asarray(scale, np.complex128).reshape(n, 1)
        a, b = scale * a, scale * b
    if drift is not None:
        b = b + np.asarray(drift, np.complex128).reshape(n, d) / s
    return a, b


def density_values(density: Callable, x: NDArray) -> NDArray[np.float64]:
    """ρ at x as a real [N] array; raises ValueError for a wrong shape or a value <= 0."""
    rho = np.asarray(density(x), dtype=np.float64)
    if rho.ndim == 0:
        rho = np.full(len(x), float(rho))
    if rho.shape != (len(x),):
        raise ValueError(f"density callable returned shape {rho.shape}, expected ({len(x)},)")
    if not np.all(np.isfinite(rho) & (rho > 0)):
        raise ValueError("density must be finite and > 0 at every point (including the PML)")
    return rho


def density_gradient(density: Callable, density_grad: Callable | None, x: NDArray
                     ) -> NDArray[np.float64]:
    """∇ρ at x [N, d]: ``density_grad(x)``, else fourth-order central differences of ρ."""
    n, d = x.shape
    if density_grad is not None:
        g = np.asarray(density_grad(x), dtype=np.float64)
        if g.shape != (n, d):
            raise ValueError(f"density_grad callable returned shape {g.shape}, expected ({n}, {d})")
        return g
    scale = max(1.0, float(np.max(np.abs(x))) if n else 1.0)
    h = 1e-3 * scale
    g = np.empty((n, d))
    for j in range(d):
        e = np.zeros(d)
        e[j] = h
        f = lambda c: density_values(density, x + c * e)  # noqa: E731
        g[:, j] = (8.0 * (f(1) - f(-1)) - (f(2) - f(-2))) / (12.0 * h)
    return g
