"""Levenberg-Marquardt (damped Gauss-Newton) on the loss's residuals.

The loss is a sum of squares, ``loss(θ) = r(θ)·r(θ)`` with ``r`` the scaled residuals of
``Workspace.residuals`` (PDE, data and boundary points, each as (re, im)). One iteration
linearises ``r`` with its Jacobian ``J = ∂r/∂θ`` and takes the step ``θ ← θ − δ`` with

    (JᵀJ + λD) δ = Jᵀr,

and a damping ``λ`` adapted trust-region style: a trial step is accepted when the actual
decrease of the loss is positive and the linear model predicted one (the ratio of the two is
reported as ``rho``); a rejected step leaves the parameters untouched and raises ``λ``.
``update="fixed"`` (default) divides λ by 3 on acceptance and multiplies it by 4 on rejection;
``update="nielsen"`` shrinks it by a factor from 1 to 3 that grows with ``rho`` (and doubles the
growth factor on successive rejections). Measured on ``plane1d`` (k = 20, the LM defaults, 40
iterations): fixed 5.1e-7, Nielsen 3.7e-6 relative L2 error; Nielsen's rule keeps λ high when
``rho`` sits near 0.5, which is common here. ``D`` is the identity (default; then the initial
``lam`` is relative to the mean of ``diag(JᵀJ)``) or Marquardt's ``diag(JᵀJ)`` (scale-free; it
reached 6.5e-6 on the same run).

Geodesic acceleration (``geodesic=True``, the default; Transtrum & Sethna, 2012): near the
solution the plain step stalls in the curved, narrow valleys of a PINN's loss: a smaller λ
gives a longer step along directions where J is nearly singular, the residuals' curvature
along it makes the loss rise, the step is rejected and λ stays up. The accelerated trial point
is ``θ − δ − a/2`` with ``(JᵀJ + λD) a = Jᵀ r_vv``, ``r_vv`` the second derivative of the
residuals along δ by a central difference (two residual evaluations, step ``geodesic_h``), the
factorisation reused (one more ``vjp`` in the primal form, nothing in the dual); the plain
trial is kept when ``2‖a‖ > geodesic_alpha ‖δ‖``. Measured (same points, network and start,
40 iterations): ``plane1d`` k = 100 1.6e-6 → 1.5e-7, ``dirichlet2d`` n = 2 5.6e-6 → 3.8e-6 with
the loss still falling where the plain step had stalled.

Three ways to solve the same system, picked by ``solver``:

- ``"primal"``: form the P×P matrix ``JᵀJ`` from Jacobian rows taken in chunks (``rows=``), so
  all of J never needs to be in memory; Cholesky. Cost per iteration: the Jacobian, ``R P²``
  for ``JᵀJ``, ``P³/3`` per trial.
- ``"dual"``: when there are fewer residuals than parameters (R < P) the same step is
  ``δ = D⁻¹Jᵀ (J D⁻¹ Jᵀ + λI)⁻¹ r`` (Woodbury), an R×R system. Holds all of J (R×P, smaller
  than P×P).
- ``"cg"``: matrix-free, conjugate gradients on ``(JᵀJ + λD) δ = Jᵀr`` through ``jvp``/``vjp``
  (two passes over the points per CG iteration, memory O(R + P)); for models too large for a
  P×P matrix. The step is inexact (to ``cg_tol``).
- ``"auto"`` (default): primal when R ≥ P, dual otherwise; cg when the P×P matrix would exceed
  ``max_matrix_bytes``.

Precision: the Jacobian is computed in the model's dtype, but ``JᵀJ`` (or ``JJᵀ``), ``Jᵀr`` and
every solve are accumulated and done in float64 whatever that dtype is. The normal equations
square the condition number of J: with cond(J) ~ 1e4, already common for a PINN near its
solution, cond(JᵀJ) ~ 1e8, which would leave a float32 solve (eps 6e-8) with no correct digit,
while float64 (eps 1e-16) keeps about eight. The linear algebra is LAPACK's through SciPy:
Cholesky (``potrf``), with a symmetric eigendecomposition (``syevd``) that drops the null space
when Cholesky fails (a singular or indefinite matrix from round-off at tiny ``λ``).

``gram="float32"`` (primal only) forms ``JᵀJ`` in single precision (``ssyrk``: 185 against 94
GFLOP/s for ``dsyrk`` on 2 cores, measured) and uses the Cholesky factor of that matrix plus λD
only as a preconditioner: the step solves the float64 system by conjugate gradients through
``jvp``/``vjp`` (to ``refine_tol``, at most ``refine_maxiter`` iterations, each one pass forward
and one back over the points), so the step is the float64 one whatever the rounding of the
Gram matrix. Where that matrix plus λD is not numerically positive definite (tiny λ), its
diagonal is raised until Cholesky succeeds; CG corrects the difference. Measured on
``scatter-hard`` (m 24, 2×48, 4850 parameters, 23750 residuals, 2 threads): ``JᵀJ`` 3.1 s
against 5.5 s, an iteration 4.9 s against 7.3 s over the first six; the error after 50
iterations 1.18e-3 against 1.13e-3 (one run each, one thread; the paths part as CG's
tolerance and the threads' summation order perturb the steps). It is not the default: near
errors of 1e-5 and below λ is tiny, the float32 factor a poorer preconditioner, CG stops at
``refine_maxiter`` short of the float64 step and LM slows (bench_time_to_accuracy.py
``--lm-gram float32``, same budgets as README's table: dirichlet2d n = 4 1.5e-4 against
1.3e-5 after 130 s, cube3d 4.2e-5 against 1.4e-5, heterogeneous2d 4.6e-7 against 2.1e-7,
though 1e-5 there after 56 s against 76 s).

The operations on residuals go through a small protocol (:class:`Residuals`):
:class:`CoreResiduals` wraps a :class:`~helmpinn.Workspace` and a batch;
:class:`FunctionResiduals` wraps NumPy callables (tests, user problems).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol

import numpy as np
from numpy.typing import NDArray

from .batch import KEYWORDS, Batch

__all__ = ["lm_defaults", "lm_options", "LM_OPTIONS", "Residuals", "CoreResiduals", "FunctionResiduals",
           "LevenbergMarquardt", "LMStep",
           "LMSolve", "SOLVERS", "DAMPINGS", "UPDATES", "NonFiniteLoss"]

SOLVERS = ("auto", "primal", "dual", "cg")
GRAMS = ("float64", "float32")
UPDATES = ("nielsen", "fixed")
DAMPINGS = ("marquardt", "identity")


class NonFiniteLoss(FloatingPointError):
    """The loss (or the Jacobian) at the current parameters is not finite."""


# -- defaults per problem ------------------------------------------------------------------------
def lm_defaults(problem: Any) -> dict[str, Any]:
    """Model and training settings for ``helmpinn train --optimizer lm`` on ``problem``: the
    rules of :func:`helmpinn.defaults.lm_settings` (network, points, options from the problem)."""
    from .defaults import lm_settings

    return lm_settings(problem)


#: The entries of :func:`lm_defaults` that are options of :meth:`helmpinn.Trainer.fit_lm`.
LM_OPTIONS = ("solver", "damping", "update", "lam", "geodesic", "gram", "stall_window", "stall_factor")


def lm_options(defaults: Mapping[str, Any]) -> dict[str, Any]:
    """The :meth:`~helmpinn.Trainer.fit_lm` keywords among ``defaults`` (an :func:`lm_defaults`)."""
    return {k: defaults[k] for k in LM_OPTIONS if k in defaults}


# -- residual operators ------------------------------------------------------------------------
class Residuals(Protocol):
    """What LM needs from a least-squares problem ``loss = r·r``."""

    num_params: int
    num_residuals: int
    dtype: np.dtype

    def residuals(self, theta: NDArray) -> NDArray: ...
    def jacobian(self, theta: NDArray, rows: tuple[int, int] | None = None) -> NDArray: ...
    def jvp(self, theta: NDArray, v: NDArray) -> NDArray: ...
    def vjp(self, theta: NDArray, w: NDArray) -> NDArray: ...


class FunctionResiduals:
    """Residuals from NumPy callables: ``fun(theta) -> r [R]``, ``jac(theta) -> J [R, P]``."""

    def __init__(self, fun: Callable[[NDArray], NDArray], jac: Callable[[NDArray], NDArray],
                 num_params: int, num_residuals: int, dtype: Any = np.float64):
        self.fun, self.jac = fun, jac
        self.num_params, self.num_residuals = int(num_params), int(num_residuals)
        self.dtype = np.dtype(dtype)

    def residuals(self, theta: NDArray) -> NDArray:
        return np.asarray(self.fun(theta), dtype=self.dtype)

    def jacobian(self, theta: NDArray, rows: tuple[int, int] | None = None) -> NDArray:
        J = np.asarray(self.jac(theta), dtype=self.dtype)
        return J if rows is None else J[rows[0]:rows[1]]

    def jvp(self, theta: NDArray, v: NDArray) -> NDArray:
        return self.jacobian(theta) @ np.asarray(v, dtype=self.dtype)

    def vjp(self, theta: NDArray, w: NDArray) -> NDArray:
        return self.jacobian(theta).T @ np.asarray(w, dtype=self.dtype)


class CoreResiduals:
    """The loss of ``Workspace.value_and_grad`` as residuals, through the core's
    ``residuals`` / ``jacobian`` (row ranges) / ``jvp`` / ``vjp``.

    ``batch``: a :class:`~helmpinn.Batch` (``TrainingSet.to_batch``) or the keyword arrays of
    ``value_and_grad``, converted once to the workspace's dtype; ``weights``: {"pde", "data",
    "bc"} (missing ones 1); ``counts``: the global point counts of a data-parallel run (each
    rank's rows are then scaled so that the ranks' sums of squares add up to the whole loss;
    a Batch may hold them already).
    """

    def __init__(self, workspace: Any, batch: Batch | Mapping[str, Any],
                 weights: Mapping[str, float] | None = None, train_fourier: bool = True,
                 counts: Mapping[str, int] | None = None):
        self.workspace = workspace
        self.dtype = np.dtype(workspace.dtype)
        if not isinstance(batch, Batch):
            unknown = set(batch) - set(KEYWORDS)
            if unknown:
                raise ValueError(f"batch: unknown keys {sorted(unknown)}; expected some of {KEYWORDS}")
            batch = Batch(**batch, dtype=self.dtype)
        batch = batch.astype(self.dtype)
        if counts is not None:
            batch = batch.replace(counts={k: int(v) for k, v in counts.items()})
        self.batch = batch
        w = dict(weights or {})
        # The keywords of every core call: the same Batch each time, and the loss options.
        self.kw = dict(batch=batch, w_pde=float(w.get("pde", 1.0)), w_data=float(w.get("data", 1.0)),
                       w_bc=float(w.get("bc", 1.0)), train_fourier=bool(train_fourier))
        self.num_params = int(workspace.spec.num_params)
        self.num_residuals = batch.num_residuals

    def residuals(self, theta: NDArray) -> NDArray:
        return self.workspace.residuals(theta, **self.kw)

    def jacobian(self, theta: NDArray, rows: tuple[int, int] | None = None) -> NDArray:
        return self.workspace.jacobian(theta, rows=rows, **self.kw)

    def jvp(self, theta: NDArray, v: NDArray) -> NDArray:
        return self.workspace.jvp(theta, np.ascontiguousarray(v, dtype=self.dtype), **self.kw)

    def vjp(self, theta: NDArray, w: NDArray) -> NDArray:
        return self.workspace.vjp(theta, np.ascontiguousarray(w, dtype=self.dtype), **self.kw)


# -- the optimiser -------------------------------------------------------------------------------
@dataclass
class LMSolve:
    """One solve: the step (float64, to be subtracted), the model's predicted decrease, how."""

    delta: NDArray
    predicted: float
    method: str            # "cholesky", "eigh" (fallback), "cg", or "cholesky+cg" (gram="float32")
    cg_iterations: int = 0
    _again: Callable[[NDArray], NDArray] | None = field(default=None, repr=False)  # same matrix, other rhs


@dataclass
class LMStep:
    """What one :meth:`LevenbergMarquardt.step` did."""

    loss: float            # at the parameters before the step
    new_loss: float        # after (== loss when nothing was accepted)
    accepted: bool
    lam: float             # damping after the step's update
    trials: int            # trial points evaluated
    rho: float             # actual / predicted decrease of the last trial
    message: str = ""
    times: dict[str, float] = field(default_factory=dict)  # jacobian, jtj, solve, trial (s)
    residuals: NDArray | None = None  # r (float64) at the parameters after the step


def _auto_blas_threads() -> int:
    """helmpinn's thread count when the machine looks idle apart from this process (1-minute
    load average below that count + 0.75: this process's own threads count in it), else 1:
    BLAS threads that share their cores with other work spin against it and against the
    engine's threads (see LevenbergMarquardt)."""
    import os

    from . import _core

    threads = _core.get_num_threads()
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):   # no load average on this platform
        return threads
    return threads if load < threads + 0.75 else 1


def _one_blas_thread_or(n: int | str | None) -> contextlib.AbstractContextManager:
    if n == "auto":
        n = _auto_blas_threads()
    if n is None:
        return contextlib.nullcontext()
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - a source tree without the dependency installed
        return contextlib.nullcontext()
    return threadpool_limits(limits=int(n), user_api="blas")


class LevenbergMarquardt:
    """Levenberg-Marquardt on a :class:`Residuals` problem (see the module docstring).

    Options: ``solver`` (``SOLVERS``), ``damping`` ("identity", or "marquardt": ``D = diag(JᵀJ)``,
    kept at the running maximum over iterations as Moré advises), ``update`` (``UPDATES``: the
    λ rule, see the module docstring), ``lam`` (initial λ; with
    "identity" it is relative to the mean of ``diag(JᵀJ)``), ``lam_min`` / ``lam_max`` (λ is
    clipped to them; :meth:`step` reports ``message`` "damping at lam_max" when a step fails at
    ``lam_max``), ``max_trials`` (trial points per step before giving up and returning with the
    parameters unchanged), ``chunk_rows`` (Jacobian rows per chunk; default: chunks of at most
    ``chunk_bytes``), ``cg_tol`` / ``cg_maxiter`` (matrix-free solve), ``geodesic`` / ``geodesic_h`` /
    ``geodesic_alpha`` (geodesic acceleration, see the module docstring), ``gram`` / ``refine_tol``
    / ``refine_maxiter`` (``JᵀJ`` in float32 as CG's preconditioner, ditto), ``max_matrix_bytes`` (the
    largest P×P or R×R matrix "auto" forms), ``blas_threads`` (limit the BLAS to this many
    threads inside a step with threadpoolctl; None leaves it; "auto", the default: as many as
    helmpinn's own threads, :func:`helmpinn.get_num_threads`, when the machine's 1-minute load
    average is below that count + 0.75, else one, decided at every step). Measured on a quiet 2-core
    machine, 2 BLAS threads against 1: ``dirichlet2d`` n = 2 (primal) 1.0 -> 0.61 s a step
    (``JᵀJ`` 0.73 -> 0.39 s), ``plane1d`` k = 100 (dual) 2.3 -> 1.4 s. The Jacobian chunks are
    large by default (``chunk_bytes`` 256 MiB) because every switch between the engine's
    OpenMP threads and the BLAS's costs their spin-waits: with 32 MiB chunks the primal step
    took 0.78 s. On a machine whose cores are busy with other work, the BLAS's threads and
    the engine's spin against each other: with a compiler running beside it the solves of
    ``dirichlet2d`` n = 2 took 3.4 s a step (0.14-0.23 s on the quiet machine), hence the load test; pass
    ``blas_threads=1`` to be sure.

    The Jacobian of a rejected step is kept, so the next :meth:`step` at the same parameters
    only solves again; call :meth:`reset_cache` when the residuals change (new points).

    ``comm`` (an mpi4py communicator of several ranks, each with its own rows, scaled with the
    global counts): JᵀJ and Jᵀr are summed over the ranks in place (one ``Allreduce`` each) and
    every loss is summed, so every rank solves the same system and takes the same step as one
    process on the union of the rows; only the primal system is available then.
    """

    def __init__(self, residuals: Residuals, *, solver: str = "auto", damping: str = "identity",
                 lam: float = 1e-3, lam_min: float = 1e-15, lam_max: float = 1e12, max_trials: int = 10,
                 chunk_rows: int | None = None, chunk_bytes: int = 256 << 20, cg_tol: float = 1e-8,
                 cg_maxiter: int = 500, max_matrix_bytes: int = 2 << 30, blas_threads: int | str | None = "auto",
                 update: str = "fixed", comm: Any = None, geodesic: bool = True, geodesic_h: float = 0.1,
                 geodesic_alpha: float = 0.75, gram: str = "float64", refine_tol: float = 1e-6,
                 refine_maxiter: int = 20):
        if solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
        if damping not in DAMPINGS:
            raise ValueError(f"damping must be one of {DAMPINGS}, got {damping!r}")
        if update not in UPDATES:
            raise ValueError(f"update must be one of {UPDATES}, got {update!r}")
        if not (lam > 0 and math.isfinite(lam)):
            raise ValueError(f"lam must be a positive finite number, got {lam}")
        if not 0 < lam_min <= lam_max:
            raise ValueError(f"need 0 < lam_min <= lam_max, got {lam_min}, {lam_max}")
        if int(max_trials) < 1:
            raise ValueError(f"max_trials must be >= 1, got {max_trials}")
        if chunk_rows is not None and int(chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        if not 0 < cg_tol < 1 or int(cg_maxiter) < 1:
            raise ValueError(f"need 0 < cg_tol < 1 and cg_maxiter >= 1, got {cg_tol}, {cg_maxiter}")
        if not (blas_threads is None or blas_threads == "auto"
                or (isinstance(blas_threads, int) and not isinstance(blas_threads, bool) and blas_threads >= 1)):
            raise ValueError(f"blas_threads must be 'auto', None or an int >= 1, got {blas_threads!r}")
        if not 0 < geodesic_h <= 1 or not geodesic_alpha > 0:
            raise ValueError(f"need 0 < geodesic_h <= 1 and geodesic_alpha > 0, got {geodesic_h}, {geodesic_alpha}")
        if gram not in GRAMS:
            raise ValueError(f"gram must be one of {GRAMS}, got {gram!r}")
        if not 0 < refine_tol < 1 or int(refine_maxiter) < 1:
            raise ValueError(f"need 0 < refine_tol < 1 and refine_maxiter >= 1, got {refine_tol}, {refine_maxiter}")
        if comm is not None and comm.Get_size() > 1 and solver not in ("auto", "primal"):
            raise ValueError(f"solver {solver!r}: over several MPI ranks only the primal system "
                             "(JᵀJ and Jᵀr summed over the ranks) is available")
        self.comm = comm if comm is not None and comm.Get_size() > 1 else None
        self.res = residuals
        self.damping = damping
        self.update = update
        self.lam = float(lam)
        self.lam_min, self.lam_max = float(lam_min), float(lam_max)
        self.nu = 2.0
        self.max_trials = int(max_trials)
        self.chunk_bytes = int(chunk_bytes)
        self._chunk_rows = None if chunk_rows is None else int(chunk_rows)
        self.cg_tol, self.cg_maxiter = float(cg_tol), int(cg_maxiter)
        self.max_matrix_bytes = int(max_matrix_bytes)
        self.blas_threads = blas_threads
        self.requested_solver = solver
        self.geodesic = bool(geodesic)
        self.geodesic_h, self.geodesic_alpha = float(geodesic_h), float(geodesic_alpha)
        self.gram = gram
        self.refine_tol, self.refine_maxiter = float(refine_tol), int(refine_maxiter)
        self.steps = 0               # calls of step()
        self.iterations = 0          # Jacobians computed
        self.evaluations = 0         # residual evaluations (trials)
        self._lam_relative = damping == "identity"
        self._dmax: NDArray | None = None
        self.reset_cache()

    # -- bookkeeping ------------------------------------------------------------------------------
    @property
    def solver(self) -> str:
        """The solver in use ("primal", "dual" or "cg")."""
        if self.requested_solver != "auto":
            return self.requested_solver
        if self.comm is not None:
            return "primal"
        P, R = self.res.num_params, self.res.num_residuals
        n = P if R >= P else R
        if 8 * n * n > self.max_matrix_bytes:
            return "cg"
        return "primal" if R >= P else "dual"

    @property
    def chunk_rows(self) -> int:
        if self._chunk_rows is not None:
            return self._chunk_rows
        rows = self.chunk_bytes // (8 * max(self.res.num_params, 1))
        return max(2, rows - rows % 2)

    def set_residuals(self, residuals: Residuals) -> None:
        """Go on with other residuals (fresh points) of the same parameters."""
        if residuals.num_params != self.res.num_params:
            raise ValueError(f"residuals have {residuals.num_params} parameters, expected {self.res.num_params}")
        self.res = residuals
        self._dmax = None
        self.reset_cache()

    def reset_cache(self) -> None:
        """Forget the linearisation (call after the residuals' points change)."""
        self._key: bytes | None = None
        self._sys: dict[str, Any] = {}
        self._next: tuple[bytes, NDArray] | None = None

    def state_dict(self) -> dict[str, Any]:
        return {"lm_lambda": self.lam, "lm_nu": self.nu, "lm_steps": self.steps,
                "lm_iterations": self.iterations, "lm_evaluations": self.evaluations}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        lam = float(state["lm_lambda"])
        if not (lam > 0 and math.isfinite(lam)):
            raise ValueError(f"LM state: lm_lambda must be positive and finite, got {lam}")
        self.lam = min(max(lam, self.lam_min), self.lam_max)
        self.nu = float(state.get("lm_nu", 2.0))
        self.steps = int(state.get("lm_steps", 0))
        self.iterations = int(state.get("lm_iterations", 0))
        self.evaluations = int(state.get("lm_evaluations", 0))
        self._lam_relative = False

    # -- linearisation --------------------------------------------------------------------------
    def linearize(self, theta: NDArray, times: dict[str, float] | None = None) -> dict[str, Any]:
        """r, Jᵀr, D and (per solver) JᵀJ or J at ``theta``; cached for the same ``theta``."""
        key = theta.tobytes()
        if key == self._key:
            return self._sys
        times = {} if times is None else times
        res, solver = self.res, self.solver
        P, R = res.num_params, res.num_residuals
        if self._next is not None and self._next[0] == key:
            r = self._next[1]   # the residuals of the accepted trial point
        else:
            t0 = time.perf_counter()
            r = np.asarray(res.residuals(theta), dtype=np.float64)
            times["trial"] = times.get("trial", 0.0) + time.perf_counter() - t0
            self.evaluations += 1
        self._next = None
        loss = self._sum(float(r @ r))
        sys_: dict[str, Any] = {"r": r, "loss": loss, "solver": solver, "theta": theta.copy()}
        if not math.isfinite(loss):
            self._key, self._sys = key, sys_
            return sys_
        tj = tm = 0.0
        if solver == "primal":
            from scipy.linalg.blas import dsyrk, ssyrk

            single = self.gram == "float32"
            A = np.zeros((P, P), dtype=np.float32 if single else np.float64, order="F")
            g = np.zeros(P)
            step = self.chunk_rows
            for a in range(0, R, step):
                b = min(a + step, R)
                t1 = time.perf_counter()
                Jc = np.asarray(res.jacobian(theta, rows=(a, b)), dtype=np.float64)
                t2 = time.perf_counter()
                # upper triangle of A += Jcᵀ Jc (Jc.T is a Fortran-ordered P×rows view)
                if single:
                    A = ssyrk(1.0, Jc.astype(np.float32).T, beta=1.0, c=A, trans=0, lower=0, overwrite_c=1)
                else:
                    A = dsyrk(1.0, Jc.T, beta=1.0, c=A, trans=0, lower=0, overwrite_c=1)
                g += Jc.T @ r[a:b]
                tj += t2 - t1
                tm += time.perf_counter() - t2
            if single:
                t1 = time.perf_counter()
                A = A.astype(np.float64, order="F")
                tm += time.perf_counter() - t1
            if self.comm is not None:   # JᵀJ and Jᵀr of the union of the ranks' rows
                from .distributed import _mpi

                t1 = time.perf_counter()
                self.comm.Allreduce(_mpi().IN_PLACE, A.T, op=_mpi().SUM)  # A.T: C-ordered view
                self.comm.Allreduce(_mpi().IN_PLACE, g, op=_mpi().SUM)
                tm += time.perf_counter() - t1
            diag = np.diag(A).copy()
            sys_.update(A=A, g=g, diag=diag)
        elif solver == "dual":
            t1 = time.perf_counter()
            J = np.empty((R, P))
            step = self.chunk_rows
            for a in range(0, R, step):
                b = min(a + step, R)
                J[a:b] = res.jacobian(theta, rows=(a, b))
            t2 = time.perf_counter()
            g = J.T @ r
            diag = np.einsum("ij,ij->j", J, J)
            tj += t2 - t1
            tm += time.perf_counter() - t2
            sys_.update(J=J, g=g, diag=diag)
        else:  # cg
            t1 = time.perf_counter()
            g = np.asarray(res.vjp(theta, r), dtype=np.float64)
            diag = None
            if self.damping == "marquardt" or self._lam_relative:
                diag = np.zeros(P)   # column norms from chunks of rows: memory O(chunk x P)
                step = self.chunk_rows
                for a in range(0, R, step):
                    b = min(a + step, R)
                    Jc = np.asarray(res.jacobian(theta, rows=(a, b)), dtype=np.float64)
                    diag += np.einsum("ij,ij->j", Jc, Jc)
            tj += time.perf_counter() - t1
            sys_.update(g=g, diag=diag)
        times["jacobian"] = times.get("jacobian", 0.0) + tj
        times["jtj"] = times.get("jtj", 0.0) + tm
        finite = np.all(np.isfinite(sys_["g"])) and (sys_["diag"] is None or np.all(np.isfinite(sys_["diag"])))
        sys_["finite"] = bool(finite)
        if finite:
            sys_["D"] = self._scaling(sys_["diag"], P)
            if solver == "dual":   # J D⁻¹ Jᵀ (its upper triangle, R×R) does not depend on λ
                from scipy.linalg.blas import dsyrk

                t1 = time.perf_counter()
                Js = sys_["J"] if self.damping == "identity" else sys_["J"] / np.sqrt(sys_["D"])
                sys_["K"] = dsyrk(1.0, Js.T, trans=1, lower=0)
                times["jtj"] += time.perf_counter() - t1
            if self._lam_relative and sys_["diag"] is not None:
                self.lam = min(max(self.lam * max(float(np.mean(sys_["diag"])), 1e-300), self.lam_min), self.lam_max)
                self._lam_relative = False
        self.iterations += 1
        self._key, self._sys = key, sys_
        return sys_

    def _sum(self, x: float) -> float:
        """x summed over the ranks (a data-parallel run), else x."""
        return x if self.comm is None else float(self.comm.allreduce(x))

    def _scaling(self, diag: NDArray | None, P: int) -> NDArray:
        if self.damping == "identity" or diag is None:
            return np.ones(P)
        d = diag if self._dmax is None or self._dmax.shape != diag.shape else np.maximum(self._dmax, diag)
        self._dmax = d
        floor = 1e-12 * float(np.max(d)) if np.max(d) > 0 else 1.0
        return np.maximum(d, floor)

    # -- the solve --------------------------------------------------------------------------------
    def solve(self, theta: NDArray, lam: float | None = None) -> LMSolve:
        """The LM step δ at ``theta`` for damping ``lam`` (default: the current λ); the new point
        is ``theta − δ``. Does not change ``theta``."""
        lam = self.lam if lam is None else float(lam)
        s = self.linearize(np.ascontiguousarray(theta))
        if not (math.isfinite(s["loss"]) and s["finite"]):
            raise NonFiniteLoss("non-finite loss or Jacobian at the current parameters")
        with _one_blas_thread_or(self.blas_threads):
            return self._solve(s, lam)

    def _solve(self, s: dict[str, Any], lam: float) -> LMSolve:
        g, D = s["g"], s["D"]
        if s["solver"] == "primal":
            solve, how = _spd_factor(s["A"], lam * D, approximate=self.gram == "float32")
            if self.gram == "float32":   # the factor preconditions CG on the exact float64 system
                delta, Jd, it = self._cg(s, lam, g, precond=solve)
                again = lambda rhs: self._cg(s, lam, rhs, precond=solve)[0]  # noqa: E731
                pred = float(2.0 * (delta @ g)) - self._sum(float(Jd @ Jd))   # δ, g: the same on every rank
                return LMSolve(delta, pred, how + "+cg", it, _again=again)
            delta = solve(g)
            return LMSolve(delta, float(delta @ (g + lam * D * delta)), how, _again=solve)
        if s["solver"] == "dual":
            J = s["J"]
            solve, how = _spd_factor(s["K"], np.full(s["K"].shape[0], lam))
            delta = (J.T @ solve(s["r"])) / D
            return LMSolve(delta, float(delta @ (g + lam * D * delta)), how,
                           _again=lambda rhs: (J.T @ solve(rhs)) / D)
        x, Jx, it = self._cg(s, lam, g)
        return LMSolve(x, float(2.0 * (x @ g) - Jx @ Jx), "cg", it)

    def _solve_residual_rhs(self, s: dict[str, Any], lam: float, sol: LMSolve, w: NDArray) -> NDArray:
        """x with (JᵀJ + λD) x = Jᵀw, reusing the factorisation of ``sol`` where there is one."""
        if s["solver"] == "dual":
            return sol._again(w)
        Jtw = np.asarray(self.res.vjp(s["theta"], w.astype(self.res.dtype)), dtype=np.float64)
        if self.comm is not None:
            from .distributed import _mpi

            self.comm.Allreduce(_mpi().IN_PLACE, Jtw, op=_mpi().SUM)
        if s["solver"] == "primal":
            return sol._again(Jtw)
        return self._cg(s, lam, Jtw)[0]

    def _cg(self, s: dict[str, Any], lam: float, g: NDArray,
            precond: Callable[[NDArray], NDArray] | None = None) -> tuple[NDArray, NDArray, int]:
        """Matrix-free: preconditioned CG on (JᵀJ + λD) x = g through jvp and vjp; returns x, Jx
        and the iterations. ``precond``: an approximate inverse (the factor of a float32 JᵀJ,
        then to ``refine_tol`` in at most ``refine_maxiter`` iterations), else the Jacobi
        preconditioner diag(JᵀJ) + λD (to ``cg_tol`` in ``cg_maxiter``)."""
        D = s["D"]
        theta = s["theta"]
        res = self.res
        dt = res.dtype
        if precond is not None:
            tol, maxiter = self.refine_tol, self.refine_maxiter
        else:
            tol, maxiter = self.cg_tol, self.cg_maxiter
            if s["diag"] is not None:
                jacobi = s["diag"] + lam * D
                precond = lambda v: v / jacobi  # noqa: E731
        x = np.zeros_like(g)
        Jx = np.zeros(res.num_residuals)
        rr = g.copy()
        z = precond(rr) if precond is not None else rr
        p = z.copy()
        rz = float(rr @ z)
        g_norm = math.sqrt(float(g @ g))
        it = 0
        for it in range(1, maxiter + 1):
            Jp = np.asarray(res.jvp(theta, p.astype(dt)), dtype=np.float64)
            Ap = np.asarray(res.vjp(theta, Jp.astype(dt)), dtype=np.float64)
            if self.comm is not None:   # Jᵀ(Jp) over the union of the ranks' rows
                from .distributed import _mpi

                self.comm.Allreduce(_mpi().IN_PLACE, Ap, op=_mpi().SUM)
            Ap += lam * D * p
            pAp = float(p @ Ap)
            if not pAp > 0:
                break
            alpha = rz / pAp
            x += alpha * p
            Jx += alpha * Jp
            rr -= alpha * Ap
            if math.sqrt(float(rr @ rr)) <= tol * g_norm:
                break
            z = precond(rr) if precond is not None else rr
            rz_new = float(rr @ z)
            p = z + (rz_new / rz) * p
            rz = rz_new
        return x, Jx, it

    def _accelerate(self, s: dict[str, Any], lam: float, sol: LMSolve, theta64: NDArray,
                    dtype: Any) -> tuple[NDArray, int]:
        """Geodesic acceleration (Transtrum & Sethna): the trial point θ − δ − ½a with
        (JᵀJ + λD) a = Jᵀ r_vv and r_vv ≈ (r(θ + hδ) − 2r(θ) + r(θ − hδ)) / h², the residuals'
        second derivative along the step; the plain θ − δ when 2‖a‖/‖δ‖ exceeds
        ``geodesic_alpha`` (the step leaves the region where the quadratic path is trusted).
        Returns the trial point and the residual evaluations it took."""
        h, delta = self.geodesic_h, sol.delta
        r_plus = np.asarray(self.res.residuals((theta64 + h * delta).astype(dtype)), dtype=np.float64)
        r_minus = np.asarray(self.res.residuals((theta64 - h * delta).astype(dtype)), dtype=np.float64)
        r_vv = (r_plus - 2.0 * s["r"] + r_minus) / (h * h)
        acc = self._solve_residual_rhs(s, lam, sol, r_vv)
        num, den = self._sum(float(acc @ acc)), self._sum(float(delta @ delta))
        if self.comm is not None:   # every rank holds the same δ and a: count them once
            num, den = num / self.comm.Get_size(), den / self.comm.Get_size()
        if den > 0 and 2.0 * math.sqrt(num) <= self.geodesic_alpha * math.sqrt(den) and np.all(np.isfinite(acc)):
            return (theta64 - delta - 0.5 * acc).astype(dtype), 2
        return (theta64 - delta).astype(dtype), 2

    # -- one iteration ------------------------------------------------------------------------------
    def step(self, theta: NDArray) -> LMStep:
        """One LM iteration in place on ``theta`` (a float vector in the residuals' dtype).

        Linearises at ``theta`` (or reuses the last linearisation there), then tries up to
        ``max_trials`` damped steps, raising λ after each rejection; the first that lowers the
        loss is accepted and written to ``theta``. If none does, ``theta`` is left unchanged
        (``accepted`` False). Raises :class:`NonFiniteLoss` when the loss or the Jacobian at
        ``theta`` is not finite (``theta`` untouched).
        """
        if theta.ndim != 1 or theta.shape[0] != self.res.num_params or not theta.flags.c_contiguous:
            raise ValueError(f"theta must be a C-contiguous vector of {self.res.num_params} parameters, "
                             f"got shape {theta.shape}")
        times = {"jacobian": 0.0, "jtj": 0.0, "solve": 0.0, "trial": 0.0}
        self.steps += 1
        with _one_blas_thread_or(self.blas_threads):
            s = self.linearize(theta, times)
            loss0 = s["loss"]
            if not math.isfinite(loss0):
                raise NonFiniteLoss(f"non-finite loss ({loss0}) at the current parameters")
            if not s["finite"]:
                raise NonFiniteLoss("non-finite Jacobian at the current parameters")
            theta64 = theta.astype(np.float64)
            rho, trials = -math.inf, 0
            while trials < self.max_trials:
                trials += 1
                t0 = time.perf_counter()
                sol = self._solve(s, self.lam)
                t1 = time.perf_counter()
                times["solve"] += t1 - t0
                if self.geodesic:
                    trial, extra = self._accelerate(s, self.lam, sol, theta64, theta.dtype)
                    self.evaluations += extra
                else:
                    trial = (theta64 - sol.delta).astype(theta.dtype)
                r1 = np.asarray(self.res.residuals(trial), dtype=np.float64)
                self.evaluations += 1
                loss1 = self._sum(float(r1 @ r1))
                times["trial"] += time.perf_counter() - t1
                pred = sol.predicted
                rho = (loss0 - loss1) / pred if pred > 0 else -math.inf
                if math.isfinite(loss1) and loss1 < loss0 and pred > 0:
                    theta[...] = trial
                    if self.update == "nielsen":
                        # shrink λ by up to 3x, the more the better the model predicted
                        shrink = max(1.0 / 3.0, 1.0 - (2.0 * min(rho, 1.0) - 1.0) ** 3)
                    else:
                        shrink = 1.0 / 3.0
                    self.lam = max(self.lam * shrink, self.lam_min)
                    self.nu = 2.0
                    self.reset_cache()
                    self._next = (theta.tobytes(), r1)   # the next linearisation's r
                    return LMStep(loss0, loss1, True, self.lam, trials, rho, "", times, r1)
                if self.lam >= self.lam_max:
                    return LMStep(loss0, loss0, False, self.lam, trials, rho, "damping at lam_max", times,
                                  s["r"])
                if self.update == "nielsen":
                    self.lam = min(self.lam * self.nu, self.lam_max)
                    self.nu = min(self.nu * 2.0, 2.0 ** 20)
                else:
                    self.lam = min(self.lam * 4.0, self.lam_max)
        return LMStep(loss0, loss0, False, self.lam, trials, rho, "no decrease in max_trials trials", times,
                      s["r"])


def _spd_factor(A: NDArray, shift: NDArray, approximate: bool = False) -> tuple[Callable[[NDArray], NDArray], str]:
    """A solver for (A + diag(shift)) x = b, A symmetric with its upper triangle filled (not
    changed): Cholesky (LAPACK ``potrf`` on one copy, in place: SciPy's ``cho_factor`` copies
    again and measured 3.3 s against 2.1 s for P = 8514 on 2 cores), else the eigendecomposition
    without the non-positive part of the spectrum (a singular or indefinite matrix from
    round-off at tiny λ). ``approximate`` (A is a float32 JᵀJ, the solver a preconditioner):
    instead of the eigendecomposition (13 s for P = 4850, against 0.3 s for Cholesky) the
    diagonal is raised by 1e-7, 1e-6, ... of its largest entry until Cholesky succeeds, the
    size of float32's round-off in A."""
    import scipy.linalg as sl
    from scipy.linalg import lapack

    def shifted(extra: float = 0.0) -> NDArray:
        M = np.array(A, dtype=np.float64, order="F", copy=True)
        M[np.diag_indices_from(M)] += shift + extra
        return M

    extras = [0.0]
    if approximate:
        top = float(np.max(np.abs(np.diagonal(A)))) if A.size else 0.0
        extras += [top * 10.0 ** e for e in range(-7, -1)] if top > 0 else []
    for extra in extras:
        c, info = lapack.dpotrf(shifted(extra), lower=0, overwrite_a=1, clean=0)
        if info == 0 and np.all(np.isfinite(np.diagonal(c))):
            return (lambda b: lapack.dpotrs(c, b, lower=0)[0]), "cholesky"
    M = shifted()
    w, V = sl.eigh(M, lower=False, check_finite=False, overwrite_a=True)
    keep = w > max(float(w[-1]), 0.0) * M.shape[0] * np.finfo(np.float64).eps
    Vk, wk = V[:, keep], w[keep]
    return (lambda b: Vk @ ((Vk.T @ b) / wk)), "eigh"
