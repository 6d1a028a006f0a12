"""Media given on grids: :class:`GridField`, a coefficient sampled on a regular 1/2/3-D grid.

A GridField is a callable ``x [N, d] -> [N]`` and works wherever a :class:`~helmpinn.Problem`
takes a callable coefficient (``kappa``, ``velocity``, ``density``, ``a``, ``source``).
Between the grid nodes it is the cubic B-spline interpolant (not-a-knot ends, through
``scipy.interpolate.make_interp_spline`` along each axis), so its first and second derivatives
are continuous and available (:meth:`GridField.gradient`, :meth:`GridField.hessian`,
:meth:`GridField.derivative`); a density given as a GridField brings its own gradient.

Units: the grid's ``origin`` and ``spacing`` are in the problem's length unit (that of x); the
values are in whatever unit the coefficient takes (a velocity in length units per second when
the problem is given a frequency in Hz: ``κ = (2πf)²/v²`` in 1/length²).
"""
from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["GridField"]

_DEGREE = 3


class GridField:
    """A coefficient on a regular grid, interpolated by cubic B-splines.

    Parameters
    ----------
    values : array [n_0] / [n_0, n_1] / [n_0, n_1, n_2], real or complex
        The field at the nodes ``origin + i * spacing``; array axis j is the coordinate x_j
        ("ij" indexing: the first axis is x, the second y, the third z). At least 4 nodes along
        each axis (a cubic spline).
    origin : float or sequence of d floats
        The coordinates of ``values[0, ..., 0]`` (length units).
    spacing : float or sequence of d floats > 0
        The node spacing along each axis (length units).
    outside : {"error", "nearest"}
        Points outside the grid's box: "error" (default) refuses them with a ValueError naming
        the box; "nearest" continues the field as its value at the nearest point of the box (its
        derivative across that face is then 0: continuous, but not smooth there).

    Notes
    -----
    The interpolant's error is O(h⁴) for a smooth field (O(h³) for its first derivatives,
    O(h²) for the second), h the spacing.
    """

    def __init__(self, values: ArrayLike, origin: float | Sequence[float] = 0.0,
                 spacing: float | Sequence[float] = 1.0, *, outside: str = "error"):
        v = np.asarray(values)
        if v.dtype.kind not in "fiuc":
            raise TypeError(f"GridField: values must be a real or complex array, got dtype {v.dtype}")
        if v.ndim not in (1, 2, 3):
            raise ValueError(f"GridField: values must be 1-, 2- or 3-D, got shape {v.shape}")
        if min(v.shape) < _DEGREE + 1:
            raise ValueError(f"GridField: values need at least {_DEGREE + 1} nodes along each axis "
                             f"(cubic splines), got shape {v.shape}")
        v = v.astype(np.complex128 if v.dtype.kind == "c" else np.float64)
        if not np.all(np.isfinite(v)):
            raise ValueError("GridField: values must be finite (no NaN or Inf)")
        d = v.ndim
        origin = np.broadcast_to(np.asarray(origin, np.float64), (d,)).copy() if np.ndim(origin) == 0 \
            else np.asarray(origin, np.float64)
        spacing = np.broadcast_to(np.asarray(spacing, np.float64), (d,)).copy() if np.ndim(spacing) == 0 \
            else np.asarray(spacing, np.float64)
        if origin.shape != (d,) or not np.all(np.isfinite(origin)):
            raise ValueError(f"GridField: origin must be {d} finite numbers, got {origin.tolist()}")
        if spacing.shape != (d,) or not np.all(np.isfinite(spacing) & (spacing > 0)):
            raise ValueError(f"GridField: spacing must be {d} finite numbers > 0, got {spacing.tolist()}")
        if outside not in ("error", "nearest"):
            raise ValueError(f"GridField: outside must be 'error' or 'nearest', got {outside!r}")
        self.values = v
        self.origin, self.spacing, self.outside = origin, spacing, outside
        self.dim = d
        self.lo = origin
        self.hi = origin + spacing * (np.asarray(v.shape) - 1)
        self._fit()

    def _fit(self) -> None:
        from scipy.interpolate import BSpline, make_interp_spline

        c = self.values
        self._axes = []  # per axis: (knots by derivative order, coefficient maps by order)
        for j in range(self.dim):
            nodes = self.lo[j] + self.spacing[j] * np.arange(self.values.shape[j])
            spl = make_interp_spline(nodes, c, k=_DEGREE, axis=j)
            c = np.moveaxis(spl.c, 0, j)  # make_interp_spline puts axis j first
            n = len(nodes)
            basis = BSpline(spl.t, np.eye(n), _DEGREE)
            knots, maps = [], []
            for nu in range(3):
                deriv = basis.derivative(nu) if nu else basis
                knots.append(deriv.t)
                maps.append(deriv.c[: len(deriv.t) - (_DEGREE - nu) - 1])
            self._axes.append((knots, maps))
        self._coef = c
        self._coef_by_order: dict[tuple[int, ...], NDArray] = {}

    def __repr__(self) -> str:
        return (f"GridField(shape={self.values.shape}, origin={self.origin.tolist()}, "
                f"spacing={self.spacing.tolist()}, outside={self.outside!r})")

    # -- evaluation -----------------------------------------------------------------------------
    def _points(self, x: ArrayLike) -> tuple[NDArray, NDArray]:
        x = np.asarray(x, np.float64)
        if x.ndim == 1 and self.dim == 1:
            x = x[:, None]
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"GridField: expected points of shape (N, {self.dim}), got {x.shape}")
        tol = 1e-9 * self.spacing
        below, above = x < self.lo - tol, x > self.hi + tol
        out = below | above
        if self.outside == "error" and out.any():
            bad = x[np.any(out, axis=1)][0]
            raise ValueError(f"GridField: point {bad.tolist()} lies outside the grid's box "
                             f"{self.lo.tolist()} .. {self.hi.tolist()} (give outside='nearest' "
                             f"to continue the field by its edge values)")
        return np.clip(x, self.lo, self.hi), out

    def derivative(self, x: ArrayLike, order: Sequence[int]) -> NDArray:
        """The mixed partial derivative ``∂^{order[0]}_x0 ∂^{order[1]}_x1 ... f`` at x [N, d]
        (each order 0, 1 or 2)."""
        order = tuple(int(o) for o in order)
        if len(order) != self.dim or not all(0 <= o <= 2 for o in order):
            raise ValueError(f"GridField.derivative: order must be {self.dim} integers in 0..2, got {order}")
        from scipy.interpolate import BSpline

        x, out = self._points(x)
        if len(x) == 0:
            return np.zeros(0, self._coef.dtype)
        coef = self._coef_by_order.get(order)
        if coef is None:
            coef = self._coef
            for j, nu in enumerate(order):
                coef = np.moveaxis(np.tensordot(self._axes[j][1][nu], coef, axes=(1, j)), 0, j)
            self._coef_by_order[order] = coef
        n = len(x)
        idx, val = [], []
        for j, nu in enumerate(order):
            t = self._axes[j][0][nu]
            m = BSpline.design_matrix(x[:, j], t, _DEGREE - nu)
            per = _DEGREE - nu + 1
            idx.append(m.indices.reshape(n, per))
            val.append(m.data.reshape(n, per))
        result = np.zeros(n, coef.dtype)
        for combo in np.ndindex(*[v.shape[1] for v in val]):
            term = coef[tuple(idx[j][:, combo[j]] for j in range(self.dim))]
            for j in range(self.dim):
                term = term * val[j][:, combo[j]]
            result += term
        if self.outside == "nearest":
            for j, nu in enumerate(order):
                if nu:
                    result[out[:, j]] = 0.0
        return result

    def __call__(self, x: ArrayLike) -> NDArray:
        """The field at x [N, d] (a 1-D field also takes x [N])."""
        return self.derivative(x, (0,) * self.dim)

    def gradient(self, x: ArrayLike) -> NDArray:
        """The gradient [N, d] at x."""
        cols = [self.derivative(x, tuple(int(i == j) for i in range(self.dim))) for j in range(self.dim)]
        return np.stack(cols, axis=1)

    def hessian(self, x: ArrayLike) -> NDArray:
        """The second derivatives [N, d, d] at x."""
        d = self.dim
        n = len(np.asarray(x).reshape(-1, d))
        h = np.empty((n, d, d), self._coef.dtype)
        for i in range(d):
            for j in range(i, d):
                order = [0] * d
                order[i] += 1
                order[j] += 1
                h[:, i, j] = h[:, j, i] = self.derivative(x, order)
        return h

    def map(self, fn) -> "GridField":
        """A GridField of ``fn(values)`` on the same grid (e.g. a velocity to a slowness)."""
        return GridField(fn(self.values), self.origin, self.spacing, outside=self.outside)

    # -- loaders --------------------------------------------------------------------------------
    @classmethod
    def from_npy(cls, path: str | os.PathLike, origin: Any = 0.0, spacing: Any = 1.0,
                 **kwargs) -> "GridField":
        """A GridField from a ``.npy`` array file (loaded without pickle); axis j is x_j."""
        try:
            values = np.load(os.fspath(path), allow_pickle=False)
        except FileNotFoundError:
            raise FileNotFoundError(f"GridField.from_npy: no such file {os.fspath(path)!r}") from None
        if not isinstance(values, np.ndarray):
            raise ValueError(f"GridField.from_npy: {os.fspath(path)!r} holds several arrays (an "
                             f".npz); load it with numpy and give the array to GridField")
        return cls(values, origin, spacing, **kwargs)

    @classmethod
    def from_mat(cls, path: str | os.PathLike, key: str | None = None, origin: Any = 0.0,
                 spacing: Any = 1.0, **kwargs) -> "GridField":
        """A GridField from a MATLAB ``.mat`` file (``scipy.io.loadmat``, formats up to v7.2):
        the variable ``key`` (or the only array variable in the file); axis j is x_j."""
        from scipy import io

        try:
            data = io.loadmat(os.fspath(path))
        except FileNotFoundError:
            raise FileNotFoundError(f"GridField.from_mat: no such file {os.fspath(path)!r}") from None
        arrays = {k: v for k, v in data.items() if not k.startswith("__") and isinstance(v, np.ndarray)}
        if key is None:
            if len(arrays) != 1:
                raise ValueError(f"GridField.from_mat: give key=, one of {sorted(arrays)}")
            key = next(iter(arrays))
        if key not in arrays:
            raise ValueError(f"GridField.from_mat: no variable {key!r} in {os.fspath(path)!r}; "
                             f"it has {sorted(arrays)}")
        values = arrays[key]
        if values.ndim == 2 and 1 in values.shape:  # MATLAB stores vectors as 1 x n or n x 1
            values = values.reshape(-1)
        return cls(values, origin, spacing, **kwargs)

    @classmethod
    def from_segy(cls, path: str | os.PathLike, spacing: Any, origin: Any = 0.0, *,
                  scale: float = 1.0, **kwargs) -> "GridField":
        """A 2-D GridField from a SEG-Y file of traces (a velocity model, say), read with the
        optional ``segyio`` package (``pip install segyio``).

        Trace i is the column x = origin[0] + i * spacing[0], its samples the depths z =
        origin[1] + s * spacing[1]: values[i, s]. ``spacing`` is required (SEG-Y headers store
        the sample interval in microseconds, which a depth model does not use consistently);
        ``scale`` multiplies the values (e.g. 1000 for a model in km/s to m/s).
        """
        try:
            import segyio
        except ImportError:
            raise ImportError("GridField.from_segy needs the segyio package: pip install segyio") from None
        scale = float(scale)
        if not (math.isfinite(scale) and scale != 0):
            raise ValueError(f"GridField.from_segy: scale must be a finite non-zero number, got {scale}")
        with segyio.open(os.fspath(path), "r", ignore_geometry=True) as f:
            values = np.asarray(f.trace.raw[:], dtype=np.float64)
        return cls(values * scale, origin, spacing, **kwargs)
