"""Default settings of a training run, in one place: the model, the points and each optimiser's
run settings, chosen from a problem's wavenumber and dimension (what ``helmpinn train`` and
:class:`~helmpinn.Trainer` take when an option is not given).

- :func:`fourier_sigma`: the scale of the Fourier frequencies B.
- :func:`auto_weights`: the loss weights.
- :func:`default_settings`: Adam's run (the CLI's default optimiser).
- :func:`run_settings`: the run of any optimiser ("adam", "lbfgs", "lm", or "auto": LM, after an
  Adam warm start when its dense system is too large): Adam's settings with what the optimiser
  changes (L-BFGS: float64 on fixed points; LM: :func:`helmpinn.lm.lm_defaults`), the Adam warm
  start, and the optimiser's own options.

The optimisers' own options and their defaults are their settings tables in
:mod:`helmpinn.drivers` (``AdamSettings``, ``LBFGSSettings``, ``LMSettings``).
A problem's ``hints`` replace any entry (``hints["weights"]``, ``hints["adam"]``, ``hints["lm"]``).
"""
from __future__ import annotations

import math
from typing import Any, Mapping

__all__ = ["OPTIMIZERS", "fourier_sigma", "auto_weights", "default_settings", "run_settings"]

#: The optimisers a run (and ``helmpinn train --optimizer``) can use by name.
OPTIMIZERS = ("adam", "lbfgs", "lm")


def fourier_sigma(problem: Any) -> float:
    """``sigma = k / (2π sqrt(d))``, the standard deviation of the entries of B ~ N(0, sigma²):
    the features' angular frequencies ``2π|B|`` then have a root mean square of k (the problem's
    largest wavenumber, at least 1) in any dimension d."""
    k = max(float(problem.wavenumber), 1.0)
    return k / (2 * math.pi * math.sqrt(int(problem.dim)))


def auto_weights(problem: Any) -> dict[str, float]:
    """Default loss weights from the problem's largest wavenumber k (at least 1):
    ``pde = 1/k²``, ``data = 100``, ``bc = 100/k²``.

    A Robin residual of an error e is about k e, so the bc term is scaled by 1/k² to sit with
    the data term. The PDE term, whose residual is about k² e, is scaled by only 1/k², which
    weights interior errors k²/100 times more than boundary errors. Measured on plane1d (k = 20)
    and dirichlet2d (n = 2), this converges much faster than putting every term on the scale of
    the squared error (pde = 1/k⁴), with which Adam stalls far from the solution. A problem's
    ``hints["weights"]`` replace any of them.
    """
    k = max(problem.wavenumber, 1.0)
    weights = {"pde": 1.0 / k**2, "data": 100.0, "bc": 100.0 / k**2}
    return _apply_hints(weights, getattr(problem, "hints", {}).get("weights"), "weights")


def _apply_hints(settings: dict[str, Any], hints: Mapping[str, Any] | None, what: str) -> dict[str, Any]:
    """``settings`` with a problem's hints for them applied (unknown keys raise ValueError)."""
    unknown = set(hints or {}) - set(settings)
    if unknown:
        raise ValueError(f"problem hints[{what!r}]: unknown keys {sorted(unknown)}; known: {sorted(settings)}")
    return {**settings, **dict(hints or {})}


def default_settings(problem: Any) -> dict[str, Any]:
    """Model and training settings of an Adam run on ``problem`` (``helmpinn train``'s defaults).

    Fourier frequencies from :func:`fourier_sigma`; a float32 network of 2 × 64 on 32
    frequencies; 2000 steps with a cosine schedule (Adam's own defaults, ``AdamSettings``);
    Sobol points redrawn every 100 steps. A problem's ``hints["adam"]`` replace any setting.
    """
    from .drivers import AdamSettings

    adam = AdamSettings()
    d = problem.dim
    settings: dict[str, Any] = {
        "ff_dim": 32,
        "hidden": 64,
        "layers": 2,
        "sigma": fourier_sigma(problem),
        "dtype": "float32",
        "steps": 2000,
        "lr": adam.lr,
        "schedule": adam.schedule,
        "betas": adam.betas,
        "pde_points": {1: 512, 2: 2048}.get(d, 4096),
        "bc_points": {1: 2, 2: 256}.get(d, 768),
        "sampling": "sobol",
        "resample_every": 100,
        "eval_every": 100,
        "weights": auto_weights(problem),
        "lbfgs": 0,
    }
    return _apply_hints(settings, getattr(problem, "hints", {}).get("adam"), "adam")


def run_settings(problem: Any, optimizer: str = "adam", memory_bytes: int = 2 << 30) -> dict[str, Any]:
    """The settings ``helmpinn train --optimizer OPTIMIZER`` starts from on ``problem``.

    Adam's (:func:`default_settings`) plus ``optimizer`` and ``warm_start`` (Adam steps before
    L-BFGS or LM; 0), changed by the optimiser: "lbfgs" trains a float64 model on fixed points
    (2000 iterations, the error every 50), "lm" takes :func:`helmpinn.lm.lm_defaults` (its
    network, points and precision) and its options under ``settings["lm"]`` (keywords of
    :class:`helmpinn.drivers.LMDriver`). "auto" (:func:`helmpinn.solve`) is "lm" when the
    dense system fits ``memory_bytes`` (8 bytes × (P·R + P²), P parameters and R residuals),
    else :func:`default_settings`'s Adam steps as a warm start, then LM with its matrix-free
    solver ("cg", memory O(P + R)).
    """
    if optimizer == "auto":
        from . import _core

        settings = run_settings(problem, "lm")
        P = _core.ModelSpec(problem.dim, settings["ff_dim"], settings["hidden"], settings["layers"]).num_params
        R = 2 * (settings["pde_points"] + settings["bc_points"])   # (re, im) per point
        if 8 * (P * R + P * P) > memory_bytes:
            settings.update(warm_start=default_settings(problem)["steps"], lm={**settings["lm"], "solver": "cg"})
        return settings
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS} or 'auto', got {optimizer!r}")
    settings = {**default_settings(problem), "optimizer": optimizer, "warm_start": 0}
    if optimizer == "lbfgs":
        settings.update(dtype="float64", steps=2000, resample_every=0, eval_every=50, lbfgs=0)
    elif optimizer == "lm":
        from .lm import lm_defaults, lm_options

        d = lm_defaults(problem)
        settings.update({k: d[k] for k in ("ff_dim", "hidden", "layers", "sigma", "dtype", "pde_points",
                                            "bc_points", "sampling", "resample_every", "eval_every",
                                            "warm_start")})
        settings.update(steps=d["iterations"], lbfgs=0, lm=lm_options(d))
    return settings
