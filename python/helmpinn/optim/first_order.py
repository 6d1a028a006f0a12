"""First-order optimisers over the flat parameter vector: Adam, L-BFGS and the learning-rate schedules.

- :class:`Adam`: the fused C++ step ``helmpinn._core.adam_step`` over the flat buffers (bias
  correction inside), with a learning-rate :class:`Schedule`; state ``m``, ``v``, ``step``.
  A step allocates nothing. On a :class:`helmpinn.DeviceArray` of parameters (a model on a GPU)
  ``m`` and ``v`` are DeviceArrays too and the step runs on the GPU (the device ``adam_step``).
- :func:`lbfgs`: L-BFGS-B from SciPy on the flat float64 vector, with the loss and its exact
  gradient from a float64 Workspace; for a final polish.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from numpy.typing import NDArray

from .. import _core, _device
from .._blas import blas_limit
from ..problems.batch import Batch
from ..defaults import ADAM_BETAS, ADAM_LR, ADAM_SCHEDULE

__all__ = ["AdamSettings", "Schedule", "constant", "exponential", "cosine", "make_schedule", "SCHEDULES",
           "Adam", "lbfgs", "minimize_lbfgs", "LBFGSResult"]


# -- learning-rate schedules -------------------------------------------------------------------
class Schedule:
    """A learning rate as a function of the step (counted from 1)."""

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def describe(self) -> dict[str, Any]:
        return {"kind": type(self).__name__.lower(), **self.__dict__}


class constant(Schedule):  # noqa: N801 (reads like a function)
    """lr at every step."""

    def __init__(self, lr: float):
        self.lr = float(lr)

    def __call__(self, step: int) -> float:
        return self.lr


class exponential(Schedule):  # noqa: N801
    """``lr * rate ** (step / every)``: multiplied by ``rate`` every ``every`` steps (smoothly)."""

    def __init__(self, lr: float, rate: float = 0.9, every: int = 1000):
        if not 0 < rate <= 1 or every < 1:
            raise ValueError(f"exponential: need 0 < rate <= 1 and every >= 1, got {rate}, {every}")
        self.lr, self.rate, self.every = float(lr), float(rate), int(every)

    def __call__(self, step: int) -> float:
        return self.lr * self.rate ** (step / self.every)


class cosine(Schedule):  # noqa: N801
    """Linear warm-up over ``warmup`` steps, then cosine decay from ``lr`` to ``final_lr``
    (default ``lr / 10``) at ``total`` steps (``final_lr`` after that)."""

    def __init__(self, lr: float, total: int, final_lr: float | None = None, warmup: int = 0):
        if total < 1:
            raise ValueError(f"cosine: total must be >= 1, got {total}")
        self.lr, self.total, self.warmup = float(lr), int(total), int(warmup)
        self.final_lr = self.lr * 0.1 if final_lr is None else float(final_lr)

    def __call__(self, step: int) -> float:
        if step <= self.warmup:
            return self.lr * step / max(self.warmup, 1)
        span = max(self.total - self.warmup, 1)
        t = min(max(step - self.warmup, 0) / span, 1.0)
        return self.final_lr + 0.5 * (self.lr - self.final_lr) * (1.0 + math.cos(math.pi * t))


SCHEDULES = ("constant", "exponential", "cosine")


def make_schedule(kind: str, lr: float, total: int, **kw) -> Schedule:
    """A schedule by name: "constant", "exponential" (decays to ~1% over ``total``) or "cosine"."""
    if kind == "constant":
        return constant(lr)
    if kind == "exponential":
        every = max(int(total) // 10, 1)
        return exponential(lr, rate=kw.get("rate", 10 ** (-0.2)), every=kw.get("every", every))
    if kind == "cosine":
        return cosine(lr, total, final_lr=kw.get("final_lr"), warmup=kw.get("warmup", 0))
    raise ValueError(f"unknown schedule {kind!r}; known: {', '.join(SCHEDULES)}")


# -- Adam ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AdamSettings:
    """Adam's settings: the peak learning rate ``lr`` (or a :class:`Schedule`),
    the ``schedule`` a number follows over the run ("constant", "exponential", "cosine"), and
    ``betas``; their defaults are :data:`helmpinn.defaults.ADAM_LR`, ``ADAM_SCHEDULE`` and
    ``ADAM_BETAS`` (β2 = 0.99 adapts faster than the usual 0.999, which measurably helps the
    slowly converging near-resonant modes of Helmholtz problems)."""

    lr: float | Schedule = ADAM_LR
    schedule: str = ADAM_SCHEDULE
    betas: tuple[float, float] = ADAM_BETAS

    def __post_init__(self) -> None:
        if not isinstance(self.lr, Schedule) and not (float(self.lr) > 0 and math.isfinite(float(self.lr))):
            raise ValueError(f"lr must be a positive finite number or a Schedule, got {self.lr!r}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be one of {SCHEDULES}, got {self.schedule!r}")
        betas = tuple(float(b) for b in self.betas)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas!r}")
        object.__setattr__(self, "betas", betas)


class Adam:
    """Adam(W) over one flat parameter vector, stepped by the fused C++ kernel.

    ``lr`` is a number or a :class:`Schedule`. ``state_dict()`` / ``load_state_dict()`` give the
    optimiser state (``m``, ``v`` the moment buffers, ``step`` the steps taken) as stored in a
    model file.

    ``params`` a :class:`helmpinn.DeviceArray` (a model on a GPU): ``m`` and ``v`` are made on
    its GPU (``device`` says where), each step is the device ``adam_step`` there (nothing is
    copied), ``state_dict()`` hands out those device arrays and ``load_state_dict()`` copies host
    (or device) arrays into them.
    """

    def __init__(self, params: NDArray, lr: float | Schedule = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0):
        on_device = _device.is_device_array(params)
        if params.ndim != 1 or not (on_device or params.flags.c_contiguous):
            raise ValueError("Adam: params must be a flat C-contiguous vector")
        self.schedule = lr if isinstance(lr, Schedule) else constant(lr)
        self.beta1, self.beta2 = float(betas[0]), float(betas[1])
        self.eps, self.weight_decay = float(eps), float(weight_decay)
        self.device = _device.name_of(params)
        self.m = _device.zeros(params.shape[0], params.dtype, self.device)
        self.v = _device.zeros(params.shape[0], params.dtype, self.device)
        self.step_count = 0

    @property
    def lr(self) -> float:
        """The learning rate of the next step."""
        return self.schedule(self.step_count + 1)

    def step(self, params: NDArray, grad: NDArray) -> None:
        """One Adam step in place on ``params`` (the gradient is not modified)."""
        self.step_count += 1
        _core.adam_step(params, grad, self.m, self.v, self.step_count, self.schedule(self.step_count),
                        self.beta1, self.beta2, self.eps, self.weight_decay)

    def state_dict(self) -> dict[str, Any]:
        return {"m": self.m, "v": self.v, "step": self.step_count}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        arrays = {}
        for name in ("m", "v"):
            arr = state[name]
            arr = arr if _device.is_device_array(arr) else np.asarray(arr)
            if tuple(arr.shape) != tuple(self.m.shape) or arr.dtype != self.m.dtype:
                raise ValueError(f"Adam state {name!r}: expected {self.m.dtype} {tuple(self.m.shape)}, "
                                 f"got {arr.dtype} {tuple(arr.shape)}")
            arrays[name] = arr
        if arrays["m"] is not self.m:
            _device.write(self.m, arrays["m"])
        if arrays["v"] is not self.v:
            _device.write(self.v, arrays["v"])
        self.step_count = int(state["step"])


# -- L-BFGS --------------------------------------------------------------------------------------
@dataclass
class LBFGSResult:
    loss_before: float
    loss_after: float
    iterations: int
    evaluations: int
    wall_s: float
    message: str


def lbfgs(params: NDArray, spec: _core.ModelSpec, batch: Batch | Mapping[str, Any], maxiter: int, *,
          weights: Mapping[str, float] | None = None, train_fourier: bool = True,
          batch_size: int = 4096, callback: Callable[[int, float, NDArray], Any] | None = None
          ) -> LBFGSResult:
    """Polish ``params`` in place with SciPy's L-BFGS-B on the flat float64 vector.

    ``batch``: a :class:`~helmpinn.Batch` or the keyword arrays of ``Workspace.value_and_grad``
    (any float dtype; converted to float64 once, before the first evaluation; a Batch of
    DeviceArrays is copied to the host first: L-BFGS runs on the CPU). The best finite point seen
    is kept, so a failed line search never makes the parameters worse. ``callback(iteration,
    loss, theta)`` is called after every iteration with the current float64 vector; it may
    return True to stop. (:class:`helmpinn.training.drivers.LBFGSDriver` runs it inside a Trainer.)
    """
    on_iteration = None if callback is None else (lambda it, loss, theta, terms: callback(it, loss, theta))
    return minimize_lbfgs(params, spec, batch, maxiter, weights=weights, train_fourier=train_fourier,
                          batch_size=batch_size, callback=on_iteration)


def minimize_lbfgs(params: NDArray, spec: _core.ModelSpec, batch: Batch | Mapping[str, Any], maxiter: int, *,
                   weights: Mapping[str, float] | None = None, train_fourier: bool = True,
                   batch_size: int = 4096, maxcor: int = 50,
                   callback: Callable[[int, float, NDArray, dict[str, float] | None], Any] | None = None
                   ) -> LBFGSResult:
    """:func:`lbfgs` with L-BFGS's memory ``maxcor`` and a callback that also gets the loss's
    unweighted terms at the iterate (``{"pde", "data", "bc"}``, None when the iterate was not
    among the last evaluations)."""
    from scipy.optimize import minimize

    ws = _core.Workspace(spec, batch_size, "float64")
    b64 = batch.to_host().astype(np.float64) if isinstance(batch, Batch) \
        else Batch(**batch, dtype=np.float64)
    w = dict(weights or {})
    kw = dict(w_pde=w.get("pde", 1.0), w_data=w.get("data", 1.0), w_bc=w.get("bc", 1.0),
              train_fourier=train_fourier)
    grad = np.empty(spec.num_params, dtype=np.float64)
    best = {"loss": math.inf, "x": np.asarray(params, dtype=np.float64).copy()}
    evals = [0]
    recent: dict[bytes, dict[str, float]] = {}   # the terms of the last few evaluations

    def fun(theta: NDArray) -> tuple[float, NDArray]:
        theta = np.ascontiguousarray(theta, dtype=np.float64)
        b = ws.value_and_grad(theta, grad, batch=b64, breakdown=True, **kw)
        loss = b.total
        evals[0] += 1
        if len(recent) >= 4:
            recent.pop(next(iter(recent)))
        recent[theta.tobytes()] = b.terms
        if not (math.isfinite(loss) and np.all(np.isfinite(grad))):
            return math.inf, np.zeros_like(grad)
        if loss < best["loss"]:
            best["loss"], best["x"] = loss, theta.copy()
        return loss, grad.copy()

    t0 = time.perf_counter()
    loss0 = fun(best["x"].copy())[0]
    it = [0]

    def cb(intermediate_result) -> None:
        it[0] += 1
        x = np.ascontiguousarray(intermediate_result.x, dtype=np.float64)
        if callback is not None and callback(it[0], float(intermediate_result.fun), x, recent.get(x.tobytes())):
            raise StopIteration

    # L-BFGS-B's vector algebra goes through the BLAS; left threaded, the BLAS's worker threads
    # spin between its calls on the cores value_and_grad needs (2x slower at 25k parameters).
    with blas_limit(1):
        res = minimize(fun, best["x"].copy(), jac=True, method="L-BFGS-B", callback=cb,
                       options={"maxiter": int(maxiter), "maxfun": int(maxiter) * 2 + 20,
                                "maxcor": int(maxcor), "ftol": 0.0, "gtol": 0.0})
    if math.isfinite(best["loss"]) and best["loss"] <= loss0:
        params[...] = best["x"].astype(params.dtype)
    return LBFGSResult(loss_before=float(loss0), loss_after=float(best["loss"]), iterations=int(res.nit),
                       evaluations=evals[0], wall_s=time.perf_counter() - t0, message=str(res.message))
