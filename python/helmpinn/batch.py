"""One batch of loss inputs: :class:`Batch`, the points and data of every loss term, converted once.

Every loss-level operation of a :class:`~helmpinn.Workspace` (``value_and_grad``, ``residuals``,
``jacobian``, ``jvp``, ``vjp``) takes ``batch=`` in place of the array keywords (``x_pde``,
``kappa``, ``f``, ``a_pde``, ``b_pde``, ``c_pde``, ``x_data``, ``y``, ``x_bc``, ``n_bc``,
``alpha_bc``, ``g_bc``, ``counts``); the loss options (``w_pde``, ``w_data``, ``w_bc``,
``train_fourier``, ``check_finite``) stay keywords beside it. Giving ``batch=`` together with
any array keyword is a TypeError naming them.

A Batch converts its arrays when it is made (C-contiguous, in its ``dtype``, complex arrays to
the core's ``[..., 2]`` (re, im) pairs) and never again: a training loop makes one per draw of
points (:meth:`helmpinn.problems.TrainingSet.to_batch`) and hands the same object to every
step. Its arrays are read-only views; an array that already had the right dtype and layout is
not copied, so the Batch shares its memory. A Batch is also a read-only mapping of the keywords
it holds, so ``ws.value_and_grad(theta, grad, **batch)`` works as well.

For a CUDA workspace, :meth:`Batch.to_device` copies every array once into device memory the
library owns (:class:`helmpinn.DeviceArray`); the scalars and ``counts`` stay as they are. A
Batch given device arrays (any with ``__cuda_array_interface__`` or DLPack) keeps them as they
are, unconverted, for the core to check.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from . import _device

__all__ = ["Batch", "KEYWORDS", "TERM_KEYWORDS"]

# The core's array keywords, in the order the terms take them.
KEYWORDS = ("x_pde", "kappa", "f", "a_pde", "b_pde", "c_pde", "x_data", "y", "x_bc", "n_bc",
            "alpha_bc", "g_bc", "counts")
# The keywords of each term (a term is present when its points are).
TERM_KEYWORDS = {"pde": ("x_pde", "kappa", "f", "a_pde", "b_pde", "c_pde"),
                 "data": ("x_data", "y"),
                 "bc": ("x_bc", "n_bc", "alpha_bc", "g_bc")}
_POINTS = {"pde": "x_pde", "data": "x_data", "bc": "x_bc"}
_REAL_ROWS = ("x_pde", "x_data", "x_bc", "n_bc")      # real [N, d]
_PAIRS = ("f", "y", "g_bc")                          # complex [N] or real pairs [N, 2]
_COEFFICIENTS = ("a_pde", "b_pde", "c_pde", "alpha_bc")  # a complex constant or an array


def _is_device_array(a: Any) -> bool:
    return not isinstance(a, np.ndarray) and (hasattr(a, "__cuda_array_interface__")
                                              or hasattr(a, "__dlpack__"))


def _frozen(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a`` as a read-only C-contiguous array of ``dtype``: ``a`` itself when it already is one,
    else a read-only view of the converted array (no copy when only the flag differs)."""
    if a.dtype == dtype and a.flags.c_contiguous and not a.flags.writeable:
        return a
    out = np.ascontiguousarray(a, dtype=dtype).view()
    out.flags.writeable = False
    return out


def _array(name: str, value: Any, dtype: np.dtype, *, complex_ok: bool) -> Any:
    if _is_device_array(value):
        return value  # device memory: checked by the core, never copied here
    a = np.asarray(value)
    if np.iscomplexobj(a):
        if not complex_ok:
            raise TypeError(f"{name}: expected real values, got {a.dtype}")
        pairs = np.empty(a.shape + (2,), dtype=dtype)
        pairs[..., 0] = a.real
        pairs[..., 1] = a.imag
        a = pairs
    elif not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected an array of numbers, got dtype {a.dtype}")
    return _frozen(a, dtype)


def _default_dtype(values: Mapping[str, Any]) -> np.dtype:
    for key in ("x_pde", "x_data", "x_bc"):
        a = values.get(key)
        dt = getattr(a, "dtype", None)
        if dt is not None and np.dtype(dt) in (np.float32, np.float64):
            return np.dtype(dt)
    return np.dtype(np.float64)


@dataclass(frozen=True, eq=False, repr=False)
class Batch(Mapping):
    """The inputs of every loss term, converted once to C-contiguous arrays of ``dtype``.

    PDE term: ``x_pde [N, d]``, ``kappa`` (a float or ``[N]``), ``f`` (complex ``[N]`` or real
    pairs ``[N, 2]``); the general operator's ``a_pde``, ``b_pde`` (complex ``[N, d]``, pairs
    ``[N, d, 2]`` or a complex constant) and ``c_pde`` (complex ``[N]``, pairs or a constant).
    Data term: ``x_data [M, d]``, ``y`` (complex ``[M]`` or pairs). Robin term: ``x_bc [Q, d]``,
    ``n_bc [Q, d]`` (the unit outward normals), ``alpha_bc`` (a complex constant or complex
    ``[Q]`` / pairs), ``g_bc`` (complex ``[Q]`` or pairs). ``counts``: the global number of
    points of each term, ``{"pde": n, "data": m, "bc": q}``, when these are one shard of a
    larger set (data-parallel training). ``dtype``: "float32" or "float64" (None: that of the
    first point array given, float64 if none is float32 or float64); it must match the
    workspace's.

    Shapes are checked by the core when the Batch is used, with errors naming the keyword.
    """

    x_pde: Any = None
    kappa: Any = None
    f: Any = None
    a_pde: Any = None
    b_pde: Any = None
    c_pde: Any = None
    x_data: Any = None
    y: Any = None
    x_bc: Any = None
    n_bc: Any = None
    alpha_bc: Any = None
    g_bc: Any = None
    counts: Mapping[str, int] | None = None
    dtype: Any = None
    _keywords: dict[str, Any] = field(init=False, compare=False)

    def __post_init__(self) -> None:
        given = {k: getattr(self, k) for k in KEYWORDS if getattr(self, k) is not None}
        dtype = _default_dtype(given) if self.dtype is None else np.dtype(self.dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"dtype: expected float32 or float64, got {dtype}")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        set_("dtype", dtype)
        for key, value in given.items():
            if key in _REAL_ROWS:
                value = _array(key, value, dtype, complex_ok=False)
                if isinstance(value, np.ndarray) and value.ndim != 2:
                    raise ValueError(f"{key}: expected an array of shape (N, d), got shape {value.shape}")
            elif key in _PAIRS:
                value = _array(key, value, dtype, complex_ok=True)
            elif key in _COEFFICIENTS:
                if np.ndim(value) == 0 and not _is_device_array(value):
                    try:
                        value = complex(value)
                    except (TypeError, ValueError):
                        raise TypeError(f"{key}: expected a complex number or an array, got "
                                        f"{type(value).__name__}") from None
                else:
                    value = _array(key, value, dtype, complex_ok=True)
            elif key == "kappa":
                if np.ndim(value) == 0 and not _is_device_array(value):
                    if np.iscomplexobj(value):
                        raise TypeError("kappa: expected a real number (k²) or a real array; "
                                        "a complex coefficient goes in c_pde")
                    value = float(value)
                else:
                    value = _array(key, value, dtype, complex_ok=False)
            elif key == "counts":
                value = _counts(value)
            set_(key, value)
            given[key] = value
        set_("_keywords", given)

    # -- the mapping of keywords ----------------------------------------------------------------
    def __getitem__(self, key: str) -> Any:
        return self._keywords[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keywords)

    def __len__(self) -> int:
        return len(self._keywords)

    __eq__ = object.__eq__
    __hash__ = object.__hash__

    def __repr__(self) -> str:
        n = self.sizes
        return (f"Batch(pde={n['pde']}, data={n['data']}, bc={n['bc']}, dtype={self.dtype.name}"
                + (f", counts={self.counts}" if self.counts is not None else "") + ")")

    # -- derived ---------------------------------------------------------------------------------
    @property
    def sizes(self) -> dict[str, int]:
        """The points of each term held here: ``{"pde": N, "data": M, "bc": Q}``."""
        return {t: (0 if self._keywords.get(k) is None else int(self._keywords[k].shape[0]))
                for t, k in _POINTS.items()}

    @property
    def num_residuals(self) -> int:
        """``R = 2 (N + M + Q)``, the rows of ``Workspace.residuals`` on this batch."""
        return 2 * sum(self.sizes.values())

    @property
    def device(self) -> str:
        """Where the arrays are: "cpu" when every one is host memory, "cuda:N" when they are
        helmpinn DeviceArrays on GPU N, "cuda" for other device arrays."""
        for v in self._keywords.values():
            if _device.is_device_array(v):
                return _device.name_of(v)
            if _is_device_array(v):
                return "cuda"
        return "cpu"

    def to_device(self, device: str = "cuda") -> "Batch":
        """This Batch with every array copied once to ``device`` ("cuda", "cuda:N"; "cpu" is
        :meth:`to_host`) into new :class:`helmpinn.DeviceArray`s the library owns; scalars and
        ``counts`` are kept. Itself when it is already there. RuntimeError (before any copy)
        when helmpinn has no CUDA support or no such GPU."""
        where = _device.check(device, "Batch.to_device")
        if where == "cpu":
            return self.to_host()
        if self.device == where:
            return self
        changes = {}
        for k, v in self._keywords.items():
            if _is_device_array(v):
                v = _host_copy(k, v)
            if isinstance(v, np.ndarray):
                changes[k] = _device.upload(v, where)
        return dataclasses.replace(self, **changes)

    def to_host(self) -> "Batch":
        """This Batch with every helmpinn DeviceArray copied back to NumPy (itself when it holds
        none); TypeError for other device arrays, which helmpinn cannot copy."""
        changes = {k: _host_copy(k, v) for k, v in self._keywords.items() if _is_device_array(v)}
        return dataclasses.replace(self, **changes) if changes else self

    def replace(self, **changes: Any) -> "Batch":
        """A Batch with some entries changed (None removes one); the others are the same arrays,
        not converted again."""
        unknown = sorted(set(changes) - set(KEYWORDS) - {"dtype"})
        if unknown:
            raise TypeError(f"Batch.replace: unknown entries {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def astype(self, dtype: Any) -> "Batch":
        """This Batch in ``dtype`` (itself when it is already). A Batch on a GPU is converted on
        the host and copied back (three copies of every array)."""
        dtype = np.dtype(dtype)
        if dtype == self.dtype:
            return self
        where = self.device
        if where != "cpu":
            return self.to_host().replace(dtype=dtype).to_device(where)
        return self.replace(dtype=dtype)

    def without_empty_terms(self) -> "Batch":
        """This Batch without the entries of terms that have no points (itself when none)."""
        sizes = self.sizes
        drop = {k: None for t, keys in TERM_KEYWORDS.items() if not sizes[t] for k in keys
                if self._keywords.get(k) is not None}
        return self.replace(**drop) if drop else self


def _host_copy(name: str, value: Any) -> np.ndarray:
    if not _device.is_device_array(value):
        raise TypeError(f"{name}: a {type(value).__module__}.{type(value).__name__} device array "
                        f"cannot be copied by helmpinn; give the Batch host arrays or "
                        f"helmpinn.DeviceArrays")
    return value.copy_to_host()


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        raise TypeError("counts: expected a dict like {'pde': n, 'data': m, 'bc': q}")
    out = {}
    for key, v in value.items():
        if key not in _POINTS:
            raise ValueError(f"counts: unknown term {key!r} (expected 'pde', 'data', 'bc')")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"counts[{key!r}]: expected an integer >= 0, got {v!r}")
        out[key] = int(v)
    return out
