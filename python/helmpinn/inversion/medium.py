"""The medium of an inversion: ``m = 1/v²`` as a tensor-product cubic B-spline on a regular grid.

:class:`SplineMedium` holds the grid (nodes ``lo + i h`` over a box, at least 4 a side) and the
basis: the not-a-knot cubic B-splines of :class:`~helmpinn.GridField` (the knots that
``scipy.interpolate.make_interp_spline`` gives the nodes), so that a coefficient vector ``c``
(``M = Π n_j`` entries, C order over the node array) and the GridField of its node values are
the same function. The unknowns of the inversion are ``c``; ``m(x) = Σ_j c_j B_j(x)`` with
``B_j(x) = Π_axis b_{j_axis}(x_axis)``, so the basis values at N points are a sparse ``[N, M]``
matrix with ``4^d`` entries a row (:meth:`SplineMedium.basis`). Points outside the box (a PML
around it) take the value at the nearest point of the box (the GridField's ``outside="nearest"``):
the layer holds the medium of the box's edge and adds no unknowns.

Bounds: a B-spline lies in the convex hull of its coefficients, so clipping ``c`` to
``[1/v_max², 1/v_min²]`` keeps ``m(x)`` between those values everywhere (the projection used by
:func:`helmpinn.invert`).

Regularisation (:meth:`SplineMedium.gradient_rows`): Tikhonov on the gradient,
``L² / |box| ∫_box |∇m / m_ref|² dx`` (dimensionless: L the box's largest extent, ``m_ref`` a
reference slowness squared), by the tensor Gauss-Legendre rule with 2 points per axis on every
grid cell (exact for the spline's squared gradient up to the rule's degree 3 per axis: the
squared gradient is of degree 4 along the derivative's axis and 6 across, so the rule is
close, not exact), as ``G c`` with a sparse ``G``.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike, NDArray

from .._checks import integer, real_number
from ..problems.media import GridField

__all__ = ["SplineMedium"]

_DEGREE = 3


def _knots(nodes: NDArray) -> NDArray:
    """The not-a-knot cubic knots of ``make_interp_spline`` on ``nodes`` (as GridField's)."""
    from scipy.interpolate import make_interp_spline

    return make_interp_spline(nodes, np.zeros(len(nodes)), k=_DEGREE).t


def _axis_basis(t: NDArray, n: int, x: NDArray, nu: int) -> tuple[NDArray, NDArray]:
    """``(index [N, 4], value [N, 4])``: the 4 cubic basis functions (their ``nu``-th
    derivative) that are non-zero at each x, from the knots t (x inside [t[0], t[-1]])."""
    from scipy.interpolate import BSpline

    if nu == 0:
        m = BSpline.design_matrix(x, t, _DEGREE)
        return m.indices.reshape(len(x), 4), m.data.reshape(len(x), 4)
    # the derivative of every basis function (n is small, a few dozen), then the span's four
    span = np.clip(np.searchsorted(t, x, side="right") - 1, _DEGREE, n - 1)
    idx = span[:, None] - _DEGREE + np.arange(4)[None, :]
    dense = BSpline(t, np.eye(n), _DEGREE).derivative(nu)(x)
    val = np.take_along_axis(dense, idx, axis=1)
    return idx, val


class SplineMedium:
    """A cubic B-spline medium ``m(x) = Σ c_j B_j(x)`` on the nodes of a box (module docstring).

    Parameters
    ----------
    lo, hi : sequence of d floats
        The box (the survey's physical domain); the nodes span it exactly.
    shape : sequence of d ints >= 4
        Nodes per axis.
    """

    def __init__(self, lo: ArrayLike, hi: ArrayLike, shape: Sequence[int]):
        self.lo = np.asarray(lo, np.float64).reshape(-1)
        self.hi = np.asarray(hi, np.float64).reshape(-1)
        self.dim = len(self.lo)
        if self.hi.shape != self.lo.shape or not np.all(np.isfinite(self.lo) & np.isfinite(self.hi)) \
                or not np.all(self.hi > self.lo):
            raise ValueError(f"SplineMedium: need finite lo < hi, got {self.lo.tolist()} and {self.hi.tolist()}")
        shape = tuple(integer("SplineMedium", "shape", n, low=_DEGREE + 1) for n in shape)
        if len(shape) != self.dim:
            raise ValueError(f"SplineMedium: shape must have {self.dim} entries, got {shape}")
        self.shape = shape
        self.size = int(np.prod(shape))
        self.nodes = [np.linspace(a, b, n) for a, b, n in zip(self.lo, self.hi, shape)]
        self.spacing = (self.hi - self.lo) / (np.asarray(shape) - 1)
        self.knots = [_knots(nd) for nd in self.nodes]

    @classmethod
    def for_wavelength(cls, lo: ArrayLike, hi: ArrayLike, wavelength: float,
                       per_wavelength: float = 4.0) -> "SplineMedium":
        """The grid whose spacing is at most ``wavelength / per_wavelength`` (the shortest
        wavelength of the survey, ``v_min / f_max``), at least 4 nodes a side."""
        wavelength = real_number("SplineMedium.for_wavelength", "wavelength", wavelength, low=0.0)
        per = real_number("SplineMedium.for_wavelength", "per_wavelength", per_wavelength, low=0.0)
        lo, hi = np.asarray(lo, np.float64), np.asarray(hi, np.float64)
        h = wavelength / per
        shape = [max(_DEGREE + 1, int(math.ceil((b - a) / h - 1e-9)) + 1) for a, b in zip(lo, hi)]
        return cls(lo, hi, shape)

    def __repr__(self) -> str:
        return f"SplineMedium(lo={self.lo.tolist()}, hi={self.hi.tolist()}, shape={self.shape})"

    # -- the basis ------------------------------------------------------------------------------
    def _tensor(self, x: ArrayLike, orders: Sequence[int]) -> sp.csr_matrix:
        x = np.asarray(x, np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"SplineMedium: expected points of shape (N, {self.dim}), got {x.shape}")
        xc = np.clip(x, self.lo, self.hi)
        n = len(xc)
        idx = np.zeros((n, 1), np.int64)
        val = np.ones((n, 1))
        for j in range(self.dim):
            i_j, v_j = _axis_basis(self.knots[j], self.shape[j], xc[:, j], orders[j])
            if orders[j]:   # outside the box along j the field is constant along j
                v_j = np.where(((x[:, j] < self.lo[j]) | (x[:, j] > self.hi[j]))[:, None], 0.0, v_j)
            idx = (idx[:, :, None] * self.shape[j] + i_j[:, None, :]).reshape(n, -1)
            val = (val[:, :, None] * v_j[:, None, :]).reshape(n, -1)
        rows = np.repeat(np.arange(n), idx.shape[1])
        return sp.csr_matrix((val.ravel(), (rows, idx.ravel())), shape=(n, self.size))

    def basis(self, x: ArrayLike) -> sp.csr_matrix:
        """The basis values ``B_j(x)`` at x [N, d]: a sparse [N, M] matrix (x outside the box:
        the nearest point of the box)."""
        return self._tensor(x, (0,) * self.dim)

    def values(self, c: ArrayLike, x: ArrayLike) -> NDArray[np.float64]:
        """``m(x)`` for the coefficients c [M]."""
        return self.basis(x) @ self._coefficients(c)

    def _coefficients(self, c: ArrayLike) -> NDArray[np.float64]:
        c = np.asarray(c, np.float64).reshape(-1)
        if c.shape != (self.size,):
            raise ValueError(f"SplineMedium: expected {self.size} coefficients, got {c.shape}")
        return c

    def node_points(self) -> NDArray[np.float64]:
        """The nodes [M, d] in the coefficients' (C) order."""
        grids = np.meshgrid(*self.nodes, indexing="ij")
        return np.stack([g.ravel() for g in grids], axis=1)

    def fit(self, m: Callable | float) -> NDArray[np.float64]:
        """The coefficients whose spline interpolates ``m`` (a number or a callable
        ``x [N, d] -> [N]``) at the nodes."""
        pts = self.node_points()
        target = np.broadcast_to(np.asarray(m(pts) if callable(m) else m, np.float64), (self.size,))
        return np.asarray(sp.linalg.spsolve(self.basis(pts).tocsc(), target), np.float64).reshape(-1)

    def node_values(self, c: ArrayLike) -> NDArray[np.float64]:
        """``m`` at the nodes, as an array of the grid's shape."""
        return self.values(c, self.node_points()).reshape(self.shape)

    def gridfield(self, c: ArrayLike, *, velocity: bool = False) -> Any:
        """A :class:`~helmpinn.GridField` of ``m`` (the same spline), or with ``velocity=True``
        of ``v = 1/sqrt(m)`` at the nodes (the spline through those node values: between the
        nodes it differs from ``1/sqrt(m(x))`` by the interpolation error), ``outside="nearest"``."""
        m = self.node_values(c)
        values = 1.0 / np.sqrt(np.maximum(m, np.finfo(np.float64).tiny)) if velocity else m
        return GridField(values, self.lo, self.spacing, outside="nearest")

    # -- the regularisation -----------------------------------------------------------------------
    def quadrature(self) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(x [Q, d], w [Q])``: the 2-point Gauss-Legendre rule on every cell, weights summing
        to the box's measure."""
        g = np.array([-1.0, 1.0]) / math.sqrt(3.0)
        axes, weights = [], []
        for nd in self.nodes:
            mid, half = 0.5 * (nd[1:] + nd[:-1]), 0.5 * np.diff(nd)
            axes.append((mid[:, None] + half[:, None] * g[None, :]).ravel())
            weights.append(np.repeat(half, 2))
        grids = np.meshgrid(*axes, indexing="ij")
        wgrids = np.meshgrid(*weights, indexing="ij")
        return np.stack([a.ravel() for a in grids], axis=1), np.prod([w.ravel() for w in wgrids], axis=0)

    def gradient_rows(self, m_ref: float) -> sp.csr_matrix:
        """``G`` [d Q, M]: ``‖G c‖² = L²/|box| ∫ |∇m / m_ref|² dx`` (module docstring)."""
        m_ref = real_number("SplineMedium.gradient_rows", "m_ref", m_ref, low=0.0)
        x, w = self.quadrature()
        length = float(np.max(self.hi - self.lo))
        scale = np.sqrt(w / np.sum(w)) * length / m_ref
        blocks = []
        for j in range(self.dim):
            order = [0] * self.dim
            order[j] = 1
            blocks.append(sp.diags(scale) @ self._tensor(x, order))
        return sp.vstack(blocks).tocsr()
