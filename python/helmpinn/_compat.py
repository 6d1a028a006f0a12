"""Renamed arguments: an old keyword keeps working for a while, with a DeprecationWarning."""
from __future__ import annotations

import warnings
from typing import Any

UNSET: Any = object()


def renamed(where: str, new: str, value: Any, old: str, old_value: Any, stacklevel: int = 3) -> Any:
    """``value`` of the argument ``new``, or that of its old name ``old`` (with a
    DeprecationWarning) when only that was given; both given is a TypeError naming them."""
    if old_value is UNSET:
        return value
    if value is not None:
        raise TypeError(f"{where}: {old}= is the old name of {new}=; give only {new}=")
    warnings.warn(f"{where}: {old}= is deprecated, use {new}= (the name n_bc is kept for the "
                  f"boundary normals)", DeprecationWarning, stacklevel=stacklevel)
    return old_value
