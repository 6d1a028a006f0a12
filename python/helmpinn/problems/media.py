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
import stat
from typing import Any, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .._matcheck import check_mat5

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
        # 1e-100..1e100: a coordinate divided by the spacing stays finite (a finer or coarser
        # grid is a unit mistake, not a medium)
        if spacing.shape != (d,) or not np.all(np.isfinite(spacing) & (spacing >= 1e-100) & (spacing <= 1e100)):
            raise ValueError(f"GridField: spacing must be {d} finite numbers in [1e-100, 1e100], got {spacing.tolist()}")
        if outside not in ("error", "nearest"):
            raise ValueError(f"GridField: outside must be 'error' or 'nearest', got {outside!r}")
        self.values = v
        self.path: str | None = None   # the file a loader read it from
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
        where = "" if self.path is None else f", from {self.path!r}"
        return (f"GridField(shape={self.values.shape}, origin={self.origin.tolist()}, "
                f"spacing={self.spacing.tolist()}, outside={self.outside!r}{where})")

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
    # Each reads only a regular file, checks what it holds before allocating, and fails with one
    # ValueError naming the file and what is wrong (_read_npy, _read_mat, _read_segy).
    @classmethod
    def from_npy(cls, path: str | os.PathLike, origin: Any = 0.0, spacing: Any = 1.0,
                 **kwargs) -> "GridField":
        """A GridField from a ``.npy`` array file (loaded without pickle); axis j is x_j. The
        header's shape and dtype are checked against the file's size before the array is read."""
        path = os.fspath(path)
        return cls._from_file("from_npy", path, _read_npy(path), origin, spacing, kwargs)

    @classmethod
    def from_mat(cls, path: str | os.PathLike, key: str | None = None, origin: Any = 0.0,
                 spacing: Any = 1.0, **kwargs) -> "GridField":
        """A GridField from a MATLAB ``.mat`` file (``scipy.io.loadmat``, formats up to v7.2):
        the variable ``key`` (or the only numeric array variable in the file), a full (not
        sparse) real or complex array; axis j is x_j."""
        path = os.fspath(path)
        values = _read_mat(path, key)
        if values.ndim == 2 and 1 in values.shape:  # MATLAB stores vectors as 1 x n or n x 1
            values = values.reshape(-1)
        return cls._from_file("from_mat", path, values, origin, spacing, kwargs)

    @classmethod
    def from_segy(cls, path: str | os.PathLike, spacing: Any, origin: Any = 0.0, *,
                  scale: float = 1.0, **kwargs) -> "GridField":
        """A 2-D GridField from a SEG-Y file of traces (a velocity model, say), read with the
        optional ``segyio`` package (``pip install segyio``).

        Trace i is the column x = origin[0] + i * spacing[0], its samples the depths z =
        origin[1] + s * spacing[1]: values[i, s]. ``spacing`` is required (SEG-Y headers store
        the sample interval in microseconds, which a depth model does not use consistently);
        ``scale`` multiplies the values (e.g. 1000 for a model in km/s to m/s). The binary
        header's trace length is checked against the file's size before the traces are read
        (a truncated file is named as such).
        """
        try:
            import segyio
        except ImportError:
            raise ImportError("GridField.from_segy needs the segyio package: pip install segyio") from None
        scale = float(scale)
        if not (math.isfinite(scale) and scale != 0):
            raise ValueError(f"GridField.from_segy: scale must be a finite non-zero number, got {scale}")
        path = os.fspath(path)
        values = _read_segy(segyio, path)
        return cls._from_file("from_segy", path, values * scale, origin, spacing, kwargs)

    @classmethod
    def _from_file(cls, loader: str, path: str, values: NDArray, origin: Any, spacing: Any,
                   kwargs: dict) -> "GridField":
        """The GridField of a loader's array, its ``path`` recorded (:meth:`__repr__` shows it);
        a ValueError or TypeError about the values (not finite, too few nodes) names the file."""
        try:
            field = cls(values, origin, spacing, **kwargs)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"GridField.{loader}: {path!r}: {exc}") from None
        field.path = path
        return field


# -- file readers of the loaders ------------------------------------------------------------------
_NPY_MAGIC = b"\x93NUMPY"


def _open_regular(loader: str, path: str):
    """A binary file object of ``path``, a regular file only: opened without blocking, then
    checked, so that a FIFO or a device under the name neither hangs nor is read without end."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileNotFoundError(f"GridField.{loader}: no such file {path!r}") from None
    except OSError as exc:
        raise ValueError(f"GridField.{loader}: {path!r} cannot be read ({exc.strerror or exc})") from None
    fh = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        fh.close()
        raise ValueError(f"GridField.{loader}: {path!r} is not a regular file (a directory, FIFO or device)")
    return fh


def _read_npy(path: str) -> NDArray:
    """The array of the ``.npy`` file at ``path``, its header's shape and dtype checked against
    the file's size first (a header claiming 12 GB in a 1 KB file is refused, not allocated)."""
    fmt = np.lib.format
    with _open_regular("from_npy", path) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(len(_NPY_MAGIC))
        fh.seek(0)
        if head.startswith(b"PK"):
            raise ValueError(f"GridField.from_npy: {path!r} holds several arrays (an .npz); load it "
                             f"with numpy and give the array to GridField")
        if head != _NPY_MAGIC:
            what = "it is empty" if not head else f"it starts with {head!r}"
            raise ValueError(f"GridField.from_npy: {path!r} is not a .npy file ({what})")
        try:
            version = fmt.read_magic(fh)
            read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read_header(fh)
        except Exception as exc:  # noqa: BLE001 - any failure here is a corrupt header, named as such
            raise ValueError(f"GridField.from_npy: {path!r} has no valid .npy header "
                             f"({type(exc).__name__}: {exc})") from None
        if dtype.hasobject:
            raise ValueError(f"GridField.from_npy: {path!r} holds Python objects (a pickled array), "
                             f"which are not loaded; GridField takes a numeric array")
        need, have = math.prod(shape) * dtype.itemsize, size - fh.tell()
        if need > have:
            raise ValueError(f"GridField.from_npy: {path!r} is truncated or corrupt: its header says "
                             f"shape {shape} of {dtype} ({need:,} bytes), but the file holds {have:,} "
                             f"bytes after the header")
        fh.seek(0)
        try:
            return np.load(fh, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - a short read after all: named with the file
            raise ValueError(f"GridField.from_npy: {path!r} could not be read "
                             f"({type(exc).__name__}: {exc})") from None


def _mat_kind(value: Any) -> str | None:
    """What a ``loadmat`` variable is when it is not a full numeric array (None when it is)."""
    from scipy import sparse

    if sparse.issparse(value):
        return "a sparse matrix"
    if not isinstance(value, np.ndarray):
        return f"a {type(value).__name__}"
    return {"f": None, "i": None, "u": None, "c": None, "b": "a logical array", "U": "text",
            "S": "text", "O": "a cell array or object", "V": "a struct"}.get(value.dtype.kind,
                                                                             f"of dtype {value.dtype}")


def _read_mat(path: str, key: str | None) -> NDArray:
    """The variable ``key`` (or the only full numeric array) of the ``.mat`` file at ``path``."""
    from scipy import io

    with _open_regular("from_mat", path) as fh:
        try:
            check_mat5(fh, os.fstat(fh.fileno()).st_size)   # a broken v5 file crashes loadmat
        except ValueError as exc:
            raise ValueError(f"GridField.from_mat: {path!r} is not a readable MATLAB file, truncated or "
                             f"corrupt: {exc}") from None
        try:
            data = io.loadmat(fh)
        except NotImplementedError:
            raise ValueError(f"GridField.from_mat: {path!r} is a MATLAB v7.3 (HDF5) file, which "
                             f"scipy.io.loadmat does not read: save it with save(..., '-v7'), or read "
                             f"the array with h5py and give it to GridField") from None
        except Exception as exc:  # noqa: BLE001 - scipy raises many kinds; all mean a bad file
            raise ValueError(f"GridField.from_mat: {path!r} is not a readable MATLAB file, truncated or "
                             f"corrupt ({type(exc).__name__}: {exc})") from None
    variables = {k: v for k, v in data.items() if not k.startswith("__")}
    kinds = {k: _mat_kind(v) for k, v in variables.items()}
    numeric = sorted(k for k, kind in kinds.items() if kind is None)
    listed = ", ".join(f"{k!r} ({kind or 'numeric'})" for k, kind in sorted(kinds.items())) or "none"
    if key is None:
        if len(numeric) != 1:
            raise ValueError(f"GridField.from_mat: give key=, one of {numeric}" if numeric else
                             f"GridField.from_mat: {path!r} holds no full numeric array; its "
                             f"variables: {listed}")
        key = numeric[0]
    if key not in variables:
        raise ValueError(f"GridField.from_mat: no variable {key!r} in {path!r}; it has {listed}")
    if kinds[key] is not None:
        raise ValueError(f"GridField.from_mat: variable {key!r} in {path!r} is {kinds[key]}; GridField "
                         f"takes a full real or complex array (in MATLAB: full(...) of a sparse "
                         f"matrix, double(...) of a logical one)")
    return variables[key]


#: SEG-Y sample sizes in bytes by the binary header's format code.
_SEGY_SAMPLE_BYTES = {1: 4, 2: 4, 3: 2, 5: 4, 6: 8, 8: 1, 9: 8, 10: 4, 11: 2, 12: 8, 15: 3, 16: 1}


def _check_segy(path: str) -> None:
    """Check the SEG-Y file at ``path`` against its own headers (big-endian, as segyio reads by
    default): a 3,600-byte file header, then whole traces of a 240-byte header and ns samples
    (ns and the sample format from the binary header, ns from the first trace's header when the
    binary header has 0). A truncated file is refused here, before segyio reads it."""
    with _open_regular("from_segy", path) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(3600 + 240)
    if len(head) < 3600:
        raise ValueError(f"GridField.from_segy: {path!r} is not a SEG-Y file, or a truncated one: "
                         f"{size:,} bytes, shorter than the 3,600-byte file header")
    ns, code, extended = (int.from_bytes(head[a:a + 2], "big", signed=True) for a in (3220, 3224, 3504))
    if ns == 0 and len(head) == 3840:
        ns = int.from_bytes(head[3600 + 114:3600 + 116], "big", signed=True)
    if code not in _SEGY_SAMPLE_BYTES or ns <= 0:
        raise ValueError(f"GridField.from_segy: {path!r} is not a readable SEG-Y file: its binary header "
                         f"gives {ns} samples per trace and sample format {code}")
    trace = 240 + ns * _SEGY_SAMPLE_BYTES[code]
    body = size - 3600 - 3200 * max(extended, 0)
    if body <= 0 or (extended >= 0 and body % trace):
        raise ValueError(f"GridField.from_segy: {path!r} is truncated or corrupt: {max(body, 0):,} bytes "
                         f"of traces is not a whole number of traces of {trace:,} bytes (a 240-byte "
                         f"header and {ns} samples of {_SEGY_SAMPLE_BYTES[code]} bytes)")


def _read_segy(segyio: Any, path: str) -> NDArray[np.float64]:
    """The traces [n_traces, ns] of the SEG-Y file at ``path`` (checked by :func:`_check_segy`
    first), read with ``segyio``; its errors are named with the file."""
    _check_segy(path)
    try:
        with segyio.open(path, "r", ignore_geometry=True) as f:
            return np.asarray(f.trace.raw[:], dtype=np.float64)
    except Exception as exc:  # noqa: BLE001 - segyio raises RuntimeError, IndexError, OSError, ...
        raise ValueError(f"GridField.from_segy: {path!r} is not a readable SEG-Y file "
                         f"({type(exc).__name__}: {exc})") from None
