"""Boundary conditions: :class:`Dirichlet` (``u = value``), :class:`Robin` (``∂u/∂n + α u = g``)
and its helpers :func:`Neumann` and :func:`Sommerfeld`, and how a problem's ``bcs`` mapping is
resolved to one condition per boundary part (:func:`resolve_bcs`)."""
from __future__ import annotations

from typing import Callable, Mapping

import numpy as np
from numpy.typing import NDArray

__all__ = ["Dirichlet", "Robin", "Neumann", "Sommerfeld", "complex_values", "resolve_bcs"]

ComplexFn = Callable[[NDArray[np.float64]], NDArray[np.complex128]]


def complex_values(v, x: NDArray, *args) -> NDArray[np.complex128]:
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
        return complex_values(self.value, x)

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
        return complex_values(self.alpha, x)

    def g_values(self, x: NDArray, normals: NDArray) -> NDArray[np.complex128] | None:
        if self.g is None:
            return None
        return complex_values(self.g, x, normals)

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


def resolve_bcs(bcs: Mapping, parts: tuple[str, ...], absorbed: tuple[str, ...] = (),
                free: tuple[str, ...] = ()) -> dict[str, Dirichlet | Robin | None]:
    """One condition (or None) per boundary part of ``parts`` from a problem's ``bcs``: keys are
    part names, tuples of them, or ``"*"`` for every part not named otherwise; a part that a PML
    replaced (``absorbed``), an unknown part and a part left without a condition are refused,
    except a face that a PML leaves without its layer (``free``), whose condition defaults to
    ``Dirichlet(0)``, the layer's wall condition (a free surface)."""
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
            if name in absorbed:
                raise ValueError(f"boundary part {name!r} lies inside the PML (the layer "
                                 f"replaces it; u = 0 on the layer's outer wall); "
                                 f"name only {parts}")
            if name not in parts:
                raise ValueError(f"unknown boundary part {name!r}; this domain has {parts}")
            out[name] = bc
    for name in parts:
        if name not in out:
            if default == "__unset__" and name in free:
                out[name] = Dirichlet(0.0)
                continue
            if default == "__unset__":
                raise ValueError(f"boundary part {name!r} has no boundary condition; give one "
                                 f"(or None to leave it free, or '*' for all remaining parts)")
            out[name] = default
    return out
