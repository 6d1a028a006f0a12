"""Argument checks shared by the problem modules: one message format naming the argument."""
from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np


def real_number(where: str, name: str, value, *, low: float | None = None, high: float | None = None,
                low_open: bool = True, high_open: bool = False) -> float:
    """``value`` as a finite float in the given range, or a TypeError/ValueError that names
    ``where`` and ``name`` and what was expected (``low < value`` when ``low_open``, else
    ``low <= value``; ``value <= high`` unless ``high_open``). A bool is not a number here
    (``time_limit=True`` is a mistake, not one second)."""
    if isinstance(value, (str, bytes, complex, bool)):
        raise TypeError(f"{where}: {name} must be a real number, got {value!r}")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: {name} must be a real number, got {value!r}") from None
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    want = "a finite number" + (" " + " and ".join(parts) if parts else "")
    bad = not math.isfinite(v)
    if low is not None and not bad:
        bad = v <= low if low_open else v < low
    if high is not None and not bad:
        bad = v >= high if high_open else v > high
    if bad:
        raise ValueError(f"{where}: {name} must be {want}, got {value!r}")
    return v


def integer(where: str, name: str, value, *, low: int | None = None) -> int:
    """``value`` as an int (an integer, or a float with an integral value; not a bool), at least
    ``low`` when given, or a TypeError/ValueError that names ``where`` and ``name``: a count is
    never truncated silently (``hidden=1.5`` is an error, not one hidden unit)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{where}: {name} must be an integer, got {value!r}")
    if isinstance(value, numbers.Integral):
        v = int(value)
    else:
        f = float(value)
        if not (math.isfinite(f) and f == int(f)):
            raise ValueError(f"{where}: {name} must be an integer, got {value!r}")
        v = int(f)
    if low is not None and v < low:
        raise ValueError(f"{where}: {name} must be an integer >= {low}, got {value!r}")
    return v


def complex_number(where: str, name: str, value, expected: str = "a complex number") -> complex:
    """``value`` as a finite complex, or a TypeError (not a number: "must be ``expected``") or
    ValueError (not finite) that names ``where`` and ``name``."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{where}: {name} must be {expected}, got {value!r}")
    try:
        v = complex(value)
    except (TypeError, ValueError):
        raise TypeError(f"{where}: {name} must be {expected}, got {value!r}") from None
    if not (math.isfinite(v.real) and math.isfinite(v.imag)):
        raise ValueError(f"{where}: {name} must be finite, got {value!r}")
    return v


def finite_at_points(where: str, what: str, values: Any, x: Any, points: str, remedy: str = "") -> None:
    """A ValueError when ``values`` (a number, [N] or [N, ...], one row per point of ``x`` [N, d])
    is not finite everywhere, naming ``where``, the array ``what``, its first bad point (its
    index among the N ``points``, "PDE point", "node", ..., and its coordinates), its value and
    how many points are bad, then ``remedy``. Values that are not floating point or complex pass."""
    v = np.asarray(values)
    if v.size == 0 or v.dtype.kind not in "fc":
        return
    ok = np.isfinite(v)
    if ok.all():
        return
    if v.ndim == 0:
        raise ValueError(f"{where}: {what} is {v.item()!r}{remedy}")
    rows = ok.reshape(len(v), -1).all(axis=1)
    i = int(np.argmin(rows))
    n_bad = int(np.count_nonzero(~rows))
    shown = v[i].tolist() if v.ndim > 1 else v[i].item()
    raise ValueError(f"{where}: {what} is not finite at {points} {i} of {len(v)}, x = "
                     f"{np.asarray(x)[i].tolist()} (value {shown}; {n_bad} such point(s)){remedy}")


def same_settings(where: str, saved: dict, settings: dict) -> None:
    """A stopped run continued with ``start=``: ValueError naming every setting of ``settings``
    (this call's) that differs from ``saved`` (the stopped run's), with both values; a run
    continues only with its own survey and settings."""
    diff = [f"{k} {saved.get(k)!r} there, {v!r} here" for k, v in settings.items() if saved.get(k) != v]
    if diff:
        raise ValueError(f"{where}: start: a run continues with its own survey and settings; they differ: "
                         + "; ".join(diff))
