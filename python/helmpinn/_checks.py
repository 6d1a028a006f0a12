"""Argument checks shared by the problem modules: one message format naming the argument."""
from __future__ import annotations

import math
import numbers


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
