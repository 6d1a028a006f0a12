"""One batch of loss inputs: :class:`Batch`, the points and data of every loss term, converted once.

Every loss-level operation of a :class:`~helmpinn.Workspace` (``value_and_grad``, ``residuals``,
``jacobian``, ``jvp``, ``vjp``) takes ``batch=`` in place of the array keywords (``x_pde``,
``kappa``, ``f``, ``a_pde``, ``b_pde``, ``c_pde``, ``a_lap``, ``x_data``, ``y``, ``x_bc``, ``n_bc``,
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

from collections.abc import Mapping
from typing import Any, Iterator

import numpy as np

from .. import _core, _device

__all__ = ["Batch", "KEYWORDS", "TERM_KEYWORDS", "TERMS", "POINTS", "WEIGHTS", "alike_on_every_axis",
           "operator_a"]

# The loss terms and their arrays, from the core's table (helmpinn._core.loss_terms()): nothing
# here names a term or an array.
_TERMS = _core.loss_terms()
# The keywords of each term in the core's order, its points first (a term is present when its
# points are).
TERM_KEYWORDS = {t["term"]: tuple(a["keyword"] for a in t["arrays"]) for t in _TERMS}
# The core's array keywords, in the order the terms take them, and counts.
KEYWORDS = tuple(k for keys in TERM_KEYWORDS.values() for k in keys) + ("counts",)
# The term names in order ("pde", "data", "bc": the keys of counts= and of LossBreakdown), each
# term's points keyword ("x_pde", ...) and its weight keyword ("w_pde", ...).
TERMS = tuple(TERM_KEYWORDS)
POINTS = {t: keys[0] for t, keys in TERM_KEYWORDS.items()}
WEIGHTS = {t["term"]: t["weight"] for t in _TERMS}
_ARRAYS = {a["keyword"]: a for t in _TERMS for a in t["arrays"]}
_POINTS = POINTS


def alike_on_every_axis(a: Any) -> np.ndarray:
    """Per point, whether the general operator's ``a`` (``[N, d]``, one coefficient per axis)
    is the same on every axis (exactly): where it is, the operator's scalar form applies."""
    a = np.asarray(a)
    if a.ndim != 2:
        raise ValueError(f"a: expected the general operator's coefficients [N, d], got shape {a.shape}")
    return np.all(a == a[:, :1], axis=1)


def operator_a(a: Any) -> dict[str, np.ndarray]:
    """The keyword that gives the general operator its ``a`` (complex ``[N, d]``, one
    coefficient per axis): ``{"a_lap": a[:, 0]}`` where every point's coefficients are equal
    (:func:`alike_on_every_axis`: the operator's scalar form, whose points carry the Laplacian's
    d + 2 streams instead of 2d + 1: the same residual, a fifth fewer flops in 2-D, two sevenths
    in 3-D), else ``{"a_pde": a}``."""
    a = np.asarray(a)
    if not alike_on_every_axis(a).all():
        return {"a_pde": a}
    return {"a_lap": np.ascontiguousarray(a[:, 0])}


def _is_device_array(a: Any) -> bool:
    return not isinstance(a, np.ndarray) and (hasattr(a, "__cuda_array_interface__")
                                              or hasattr(a, "__dlpack__"))


def _frozen(name: str, a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``a`` as a read-only C-contiguous array of ``dtype``: ``a`` itself when it already is one,
    else a read-only view of the converted array (no copy when only the flag differs).
    ValueError when a finite value does not fit ``dtype`` (1e39 in float32), as the core says
    of the scalars it converts, instead of an Inf."""
    if a.dtype == dtype and a.flags.c_contiguous and not a.flags.writeable:
        return a
    with np.errstate(over="ignore"):
        out = np.ascontiguousarray(a, dtype=dtype)
    if out.dtype.itemsize < a.dtype.itemsize or a.dtype.kind in "iu":
        bad = np.flatnonzero(np.isinf(out) & np.isfinite(a))
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{name}: {float(a.reshape(-1)[i]):.9g} (at flat index {i}) "
                             f"overflows {dtype.name} (largest finite value "
                             f"{float(np.finfo(dtype).max):.9g})")
    out = out.view()
    out.flags.writeable = False
    return out


def _array(name: str, value: Any, dtype: np.dtype, *, complex_ok: bool) -> Any:
    if _is_device_array(value):
        return value  # device memory: checked by the core, never copied here
    a = np.asarray(value)
    if np.iscomplexobj(a):
        if not complex_ok:
            raise TypeError(f"{name}: expected real values, got {a.dtype}")
        a = np.stack([a.real, a.imag], axis=-1)   # (re, im) pairs, converted below
    elif not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected an array of numbers, got dtype {a.dtype}")
    return _frozen(name, a, dtype)


def _entry(key: str, value: Any, dtype: np.dtype) -> Any:
    """One array keyword's value, converted as the core's table describes it: the points real
    ``[N, d]``; a value per point complex (``[N]``, converted to ``[N, 2]`` pairs) where the core
    takes pairs; a real or complex constant where one may stand in for the array."""
    info = _ARRAYS[key]
    constant = info["constant"]
    if constant is not None and np.ndim(value) == 0 and not _is_device_array(value):
        if constant == "real":
            if np.iscomplexobj(value):
                raise TypeError(f"{key}: expected a real number or a real array, got a complex "
                                f"value")
            return float(value)
        try:
            return complex(value)
        except (TypeError, ValueError):
            raise TypeError(f"{key}: expected a complex number or an array, got "
                            f"{type(value).__name__}") from None
    value = _array(key, value, dtype, complex_ok=info["shape"][-1] == 2)
    if info["shape"] == ("N", "d") and isinstance(value, np.ndarray) and value.ndim != 2:
        raise ValueError(f"{key}: expected an array of shape (N, d), got shape {value.shape}")
    return value


def _default_dtype(values: Mapping[str, Any]) -> np.dtype:
    for key in _POINTS.values():
        a = values.get(key)
        dt = getattr(a, "dtype", None)
        if dt is not None and np.dtype(dt) in (np.float32, np.float64):
            return np.dtype(dt)
    return np.dtype(np.float64)


class Batch(Mapping):
    """The inputs of every loss term, converted once to C-contiguous arrays of ``dtype``.

    The keywords are the core's (:func:`helmpinn._core.loss_terms`, in ``TERM_KEYWORDS``).
    PDE term: ``x_pde [N, d]``, ``kappa`` (a float or ``[N]``), ``f`` (complex ``[N]`` or real
    pairs ``[N, 2]``); the general operator's ``a_pde``, ``b_pde`` (complex ``[N, d]``, pairs
    ``[N, d, 2]`` or a complex constant) and ``c_pde`` (complex ``[N]``, pairs or a constant);
    ``a_lap`` (complex ``[N]`` or pairs) in place of ``a_pde`` where one ``a`` multiplies the
    Laplacian (the same residual from fewer streams: faster).
    Data term: ``x_data [M, d]``, ``y`` (complex ``[M]`` or pairs). Robin term: ``x_bc [Q, d]``,
    ``n_bc [Q, d]`` (the unit outward normals), ``alpha_bc`` (a complex constant or complex
    ``[Q]`` / pairs), ``g_bc`` (complex ``[Q]`` or pairs). ``counts``: the global number of
    points of each term, ``{"pde": n, "data": m, "bc": q}``, when these are one shard of a
    larger set (data-parallel training). ``dtype``: "float32" or "float64" (None: that of the
    first point array given, float64 if none is float32 or float64); it must match the
    workspace's. A value that overflows ``dtype`` is a ValueError naming its keyword.

    Each keyword is also an attribute (None when not given). Shapes are checked by the core when
    the Batch is used, with errors naming the keyword. The core reads a Batch through
    ``__helmpinn_batch__()``: ``(the dict of its keywords, its dtype)``.
    """

    def __init__(self, *, dtype: Any = None, counts: Mapping[str, int] | None = None,
                 **arrays: Any) -> None:
        unknown = sorted(set(arrays) - set(_ARRAYS))
        if unknown:
            raise TypeError(f"Batch: unknown entries {', '.join(unknown)} (expected some of "
                            f"{', '.join(KEYWORDS)}, dtype)")
        given = {k: arrays[k] for k in _ARRAYS if arrays.get(k) is not None}
        dtype = _default_dtype(given) if dtype is None else np.dtype(dtype)
        if dtype not in (np.float32, np.float64):
            raise TypeError(f"dtype: expected float32 or float64, got {dtype}")
        keywords = {k: _entry(k, v, dtype) for k, v in given.items()}
        if counts is not None:
            keywords["counts"] = _counts(counts)
        self.__dict__.update(dtype=dtype, _keywords=keywords)

    def __getattr__(self, name: str) -> Any:
        if name in KEYWORDS:
            return self.__dict__.get("_keywords", {}).get(name)
        raise AttributeError(f"'Batch' object has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Batch is immutable: use batch.replace({name}=...)")

    def __helmpinn_batch__(self) -> tuple[dict[str, Any], np.dtype]:
        """What the core reads: the keywords held (a new dict) and the dtype."""
        return dict(self._keywords), self.dtype

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
        sizes = ", ".join(f"{t}={n}" for t, n in self.sizes.items())
        return (f"Batch({sizes}, dtype={self.dtype.name}"
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
        return self.replace(**changes)

    def to_host(self) -> "Batch":
        """This Batch with every helmpinn DeviceArray copied back to NumPy (itself when it holds
        none); TypeError for other device arrays, which helmpinn cannot copy."""
        changes = {k: _host_copy(k, v) for k, v in self._keywords.items() if _is_device_array(v)}
        return self.replace(**changes) if changes else self

    def replace(self, **changes: Any) -> "Batch":
        """A Batch with some entries changed (None removes one); the others are the same arrays,
        not converted again."""
        unknown = sorted(set(changes) - set(KEYWORDS) - {"dtype"})
        if unknown:
            raise TypeError(f"Batch.replace: unknown entries {', '.join(unknown)}")
        entries = {**self._keywords, **changes}
        entries.setdefault("dtype", self.dtype)
        return Batch(**entries)

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
    terms = ", ".join(repr(t) for t in _POINTS)
    if not isinstance(value, Mapping):
        raise TypeError("counts: expected a dict like {" + ", ".join(f"{t!r}: n" for t in _POINTS)
                        + "}")
    out = {}
    for key, v in value.items():
        if key not in _POINTS:
            raise ValueError(f"counts: unknown term {key!r} (expected {terms})")
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"counts[{key!r}]: expected an integer >= 0, got {v!r}")
        out[key] = int(v)
    return out
