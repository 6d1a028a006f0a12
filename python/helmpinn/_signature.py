"""A problem's fingerprint: what the ranks of an MPI run compare before training
(:func:`helmpinn.distributed.check_same_run`) and what a checkpoint records so that a resumed run
knows its problem is still the one it trained on (``helmpinn train --resume``).

The fingerprint is one small draw of the problem's training data with a fixed seed (8 interior
and 8 boundary points: the points, κ, the source, the boundary data and coefficients, the
operator's coefficients) and the exact solution at the interior points, each array cut to at
most :data:`KEEP` evenly spaced numbers after its size. Two problems with the same geometry,
medium, sources and boundary conditions give the same numbers; a factory that builds another
problem on another node (a node-local data file), or a factory edited since a run was saved,
gives others. The values are compared to a relative tolerance (:func:`differences`), as two
machines' libm may round the last bit of a sine differently.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _core

__all__ = ["problem_signature", "differences", "flat", "record", "changed"]

#: The most numbers kept of each array.
KEEP = 16
#: The fields of the draw compared, with the words a message uses for them.
FIELDS = {"x_pde": "the interior points (the geometry)", "kappa": "κ (the medium)", "f": "the source",
          "x_data": "the Dirichlet points", "y": "the Dirichlet data", "x_bc": "the Robin points",
          "n_bc": "the Robin normals", "alpha": "the Robin coefficient", "g": "the Robin data",
          "a_pde": "the operator's coefficients a", "b_pde": "the operator's coefficients b",
          "exact": "the exact solution"}
_SEED = 20250611
_RTOL = 1e-9


def _cut(value: Any) -> list[float]:
    """[size, up to KEEP evenly spaced numbers] of an array (complex as re, im); [] for None."""
    if value is None:
        return []
    a = np.asarray(value)
    a = np.stack([a.real, a.imag], axis=-1) if np.iscomplexobj(a) else a
    a = np.asarray(a, dtype=np.float64).ravel()
    pick = np.unique(np.linspace(0, a.size - 1, min(a.size, KEEP)).astype(np.int64)) if a.size else []
    return [float(a.size), *a[pick].tolist()]


def problem_signature(problem: Any) -> dict[str, list[float]]:
    """The fingerprint of ``problem``: field name -> [size, numbers] (see the module). The draw
    is the problem class's own ``sample`` (an instance's patched one is not asked)."""
    rng = np.random.default_rng(_SEED)
    with np.errstate(all="ignore"):
        ts = type(problem).sample(problem, 8, 8, rng, "uniform")
        sig = {name: _cut(getattr(ts, name, None)) for name in FIELDS if name != "exact"}
        if getattr(problem, "exact", None) is not None and len(ts.x_pde):
            sig["exact"] = _cut(problem.exact_at(ts.x_pde))
    return sig


def flat(sig: dict[str, list[float]]) -> np.ndarray:
    """The numbers of a fingerprint, in :data:`FIELDS` order, each field after its length."""
    out: list[float] = []
    for name in FIELDS:
        values = sig.get(name, [])
        out += [float(len(values)), *values]
    return np.asarray(out, dtype=np.float64)


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The words (:data:`FIELDS`) of the fields in which fingerprints ``a`` and ``b`` differ
    (beyond a relative 1e-9; NaN equals NaN); empty when they agree."""
    out = []
    for name, words in FIELDS.items():
        x = np.asarray(a.get(name, []), dtype=np.float64)
        y = np.asarray(b.get(name, []), dtype=np.float64)
        if x.shape != y.shape:
            out.append(words)
            continue
        scale = max(float(np.max(np.abs(x[np.isfinite(x)]), initial=0.0)), 1e-300)
        if not np.allclose(x, y, rtol=_RTOL, atol=_RTOL * scale, equal_nan=True):
            out.append(words)
    return out


def record(problem: Any) -> dict[str, Any] | None:
    """The fingerprint as a checkpoint's metadata holds it: ``{"helmpinn": version, "fields":
    fingerprint}`` (a fingerprint is compared only with one of the same helmpinn, whose draw
    is the same); None when the problem cannot be drawn from (nothing is then compared)."""
    try:
        return {"helmpinn": str(_core.__version__), "fields": problem_signature(problem)}
    except Exception:   # noqa: BLE001 - a fingerprint is a check, never a reason to fail a save
        return None


def changed(recorded: Any, problem: Any) -> list[str]:
    """The words of the fields in which ``problem`` differs from a checkpoint's ``recorded``
    fingerprint (:func:`record`); empty when they agree, or when there is nothing to compare
    (no record, another helmpinn's, or a record that is not one)."""
    if not isinstance(recorded, dict) or recorded.get("helmpinn") != str(_core.__version__) \
            or not isinstance(recorded.get("fields"), dict):
        return []
    now = record(problem)
    if now is None:
        return []
    try:
        return differences(recorded["fields"], now["fields"])
    except (TypeError, ValueError):   # a record that is not numbers: nothing to compare
        return []
