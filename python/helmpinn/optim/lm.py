"""Levenberg-Marquardt (damped Gauss-Newton) on the loss's residuals.

The loss is a sum of squares, ``loss(θ) = r(θ)·r(θ)`` with ``r`` the scaled residuals of
``Workspace.residuals`` (PDE, data and boundary points, each as (re, im)). One iteration
linearises ``r`` with its Jacobian ``J = ∂r/∂θ`` and takes the step ``θ ← θ − δ`` with

    (JᵀJ + λD) δ = Jᵀr,

and a damping ``λ`` adapted trust-region style: the trial loop, the λ rules (``update``), geodesic
acceleration and the step's record are the one damped step of :mod:`helmpinn.optim.damped`
(:class:`LevenbergMarquardt` passes it its linear system; :class:`helmpinn.optim.gauss_newton.MatrixFreeGN`
passes its own). ``update="fixed"`` is LM's default: ρ often sits near 0.5 for PINNs, where
Nielsen's rule hardly lowers λ. ``D`` is the identity (default; then the initial ``lam`` is
relative to the mean of ``diag(JᵀJ)``) or Marquardt's ``diag(JᵀJ)``, kept at its running maximum
over iterations (scale-free: use it when the parameters' scales differ widely).

Geodesic acceleration (``geodesic=True``, the default; Transtrum & Sethna, 2012): near the
solution the plain step stalls in the curved, narrow valleys of a PINN's loss: a smaller λ
gives a longer step along directions where J is nearly singular, the residuals' curvature
along it makes the loss rise, the step is rejected and λ stays up. The accelerated trial point
``θ − δ − a/2`` reuses the factorisation (one more ``vjp`` in the primal form, nothing in the
dual) and costs two residual evaluations per trial: turn it off only to save them where the
plain step does not stall.

Three ways to solve the same system (the typed systems :class:`PrimalSystem`,
:class:`DualSystem`, :class:`CGSystem`, made by :meth:`LevenbergMarquardt.linearize`), picked
by ``solver``:

- ``"primal"``: form the P×P matrix ``JᵀJ`` from Jacobian rows taken in chunks (``rows=``), so
  all of J never needs to be in memory; Cholesky. Cost per iteration: the Jacobian, ``R P²``
  for ``JᵀJ``, ``P³/3`` per trial. Memory: two P×P matrices (``JᵀJ`` and its factor) and a chunk.
- ``"dual"``: when there are fewer residuals than parameters (R < P) the same step is
  ``δ = D⁻¹Jᵀ (J D⁻¹ Jᵀ + λI)⁻¹ r`` (Woodbury), an R×R system. Holds all of J (R×P) and two
  R×R matrices. One process only.
- ``"cg"``: matrix-free, conjugate gradients on ``(JᵀJ + λD) δ = Jᵀr`` through ``jvp``/``vjp``
  (two passes over the points per CG iteration, memory O(R + P)); for models too large for a
  dense matrix. The step is inexact (to ``cg_tol``).
- ``"auto"`` (default): primal when R ≥ P (always over MPI), dual otherwise, each only within
  ``max_matrix_bytes``; then the other dense one if it fits; else cg. :func:`memory_estimate`
  gives the bytes of each before anything is allocated, and :func:`choose_solver` the choice
  (an explicit dense solver over the budget is refused with the sizes).

Precision: the Jacobian is computed in the model's dtype, but ``JᵀJ`` (or ``JJᵀ``), ``Jᵀr`` and
every solve are accumulated and done in float64 whatever that dtype is. The normal equations
square the condition number of J: with cond(J) ~ 1e4, already common for a PINN near its
solution, cond(JᵀJ) ~ 1e8, which would leave a float32 solve (eps 6e-8) with no correct digit,
while float64 (eps 1e-16) keeps about eight. The linear algebra is LAPACK's through SciPy:
Cholesky (``potrf``), with a symmetric eigendecomposition (``syev``) that drops the null space
when Cholesky fails (a singular or indefinite matrix from round-off at tiny ``λ``).

``gram="float32"`` (primal only) forms ``JᵀJ`` in single precision (``ssyrk``, about twice the
rate of ``dsyrk``) and uses the Cholesky factor of that matrix plus λD only as a
preconditioner: the step solves the float64 system by conjugate gradients through
``jvp``/``vjp`` (to ``refine_tol``, at most ``refine_maxiter`` iterations, each one pass forward
and one back over the points), so the step is the float64 one whatever the rounding of the
Gram matrix. Where that matrix plus λD is not numerically positive definite (tiny λ), its
diagonal is raised until Cholesky succeeds; CG corrects the difference. When the sums of squares
could leave float32's range (R times the largest squared entry of J above 2¹⁰⁰ or below
2⁻⁶⁰), the rows are scaled by a power of two before ``ssyrk`` and the matrix scaled back in
float64, both exactly; an overflow is then reported only where float64's own range ends. Use it for
problems whose ``JᵀJ`` dominates the iteration (many residuals, P in the thousands) at moderate
accuracy; near errors of 1e-5 and below λ is tiny, the float32 factor a poorer preconditioner,
CG stops at ``refine_maxiter`` short of the float64 step and LM slows: keep float64 there.

The operations on residuals go through a small protocol (:class:`Residuals`):
:class:`CoreResiduals` wraps a :class:`~helmpinn.Workspace` and a batch;
:class:`FunctionResiduals` wraps NumPy callables (tests, user problems).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Mapping, Protocol

import numpy as np
from numpy.typing import NDArray

from .. import distributed
from .._blas import blas_limit, check_blas_threads
from ..problems.batch import KEYWORDS, Batch
from ..defaults import LM_OPTIONS, lm_memory_rule, lm_options, lm_settings
from .damped import Damped, Direction, NonFiniteLoss, StepRecord

__all__ = ["lm_defaults", "lm_options", "LM_OPTIONS", "Residuals", "CoreResiduals", "FunctionResiduals",
           "LevenbergMarquardt", "LMSolve", "LinearSystem", "PrimalSystem", "DualSystem",
           "CGSystem", "memory_estimate", "choose_solver", "pcg", "SOLVERS", "DAMPINGS"]

SOLVERS = ("auto", "primal", "dual", "cg")
GRAMS = ("float64", "float32")
DAMPINGS = ("marquardt", "identity")


# -- defaults per problem ------------------------------------------------------------------------
def lm_defaults(problem: Any) -> dict[str, Any]:
    """Model and training settings for ``helmpinn train --optimizer lm`` on ``problem``: the
    rules of :func:`helmpinn.defaults.lm_settings` (network, points, options from the problem)."""
    return lm_settings(problem)


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


# -- memory ----------------------------------------------------------------------------------------
_GIB = float(1 << 30)


def _chunk_rows(P: int, R: int, chunk_rows: int | None, chunk_bytes: int) -> int:
    """Jacobian rows per chunk: ``chunk_rows``, else as many float64 rows as fit ``chunk_bytes``
    (even, at least 2)."""
    if chunk_rows is not None:
        return int(chunk_rows)
    rows = int(chunk_bytes) // (8 * max(int(P), 1))
    return max(2, rows - rows % 2)


def _memory_parts(P: int, R: int, solver: str, *, gram: str = "float64", damping: str = "identity",
                  ranks: int = 1, dtype: Any = np.float64, chunk_rows: int | None = None,
                  chunk_bytes: int = 256 << 20) -> dict[str, int]:
    """The arrays behind :func:`memory_estimate`, by name (bytes)."""
    if solver not in SOLVERS[1:]:
        raise ValueError(f"solver must be one of {SOLVERS[1:]}, got {solver!r}")
    if gram not in GRAMS:
        raise ValueError(f"gram must be one of {GRAMS}, got {gram!r}")
    P, R = int(P), int(R)
    if P < 0 or R < 0 or int(ranks) < 1:
        raise ValueError(f"need P >= 0, R >= 0 and ranks >= 1, got {P}, {R}, {ranks}")
    item = np.dtype(dtype).itemsize
    rows = min(_chunk_rows(P, R, chunk_rows, chunk_bytes), R)
    # a chunk from the core in the model's dtype, its float64 copy (none for float64), and the
    # float32 copy that ssyrk reads (gram="float32")
    # (and its scaled float64 copy when its squares would leave float32's range)
    chunk = rows * P * (item + (8 if item != 8 else 0) + (12 if solver == "primal" and gram == "float32" else 0))
    vectors = 8 * (12 * P + 6 * R)   # r, Jᵀr, D, CG's vectors, trial residuals
    if solver == "primal":
        # JᵀJ (float64 after a float32 one is converted) and the shifted copy that Cholesky
        # factors in place (the eigendecomposition fallback works in that copy too); over MPI
        # the library's reduction buffer of JᵀJ comes and goes before the copy exists.
        parts = {"JᵀJ" + (" per rank" if ranks > 1 else ""): 8 * P * P,
                 "its factor" + (" (or MPI's reduction buffer)" if ranks > 1 else ""): 8 * P * P}
    elif solver == "dual":
        parts = {"J": 8 * R * P}
        if damping == "marquardt":
            parts["J D^-1/2"] = 8 * R * P
        parts["JJᵀ"] = 8 * R * R
        parts["its factor"] = 8 * R * R
    else:
        parts = {}
    parts["a Jacobian chunk"] = chunk
    parts["vectors"] = vectors
    return parts


def memory_estimate(P: int, R: int, solver: str, *, gram: str = "float64", damping: str = "identity",
                    ranks: int = 1, dtype: Any = np.float64, chunk_rows: int | None = None,
                    chunk_bytes: int = 256 << 20) -> int:
    """Bytes that :class:`LevenbergMarquardt` holds at most at once with ``solver`` ("primal",
    "dual" or "cg") for ``P`` parameters and ``R`` residuals (on this rank: R is twice its
    points, each residual a (re, im) pair), before allocating any of it.

    Counted: "primal" the P×P ``JᵀJ`` (float64, per rank over MPI) and the copy that is
    factored, plus one Jacobian chunk; "dual" all of J (R×P, twice with Marquardt's scaling)
    plus the R×R ``JJᵀ`` and its factor; "cg" (matrix-free) one Jacobian chunk (for
    ``diag(JᵀJ)``) and vectors of P and R. ``dtype`` is the model's (the Jacobian's), ``ranks``
    the MPI ranks, ``chunk_rows`` / ``chunk_bytes`` as for :class:`LevenbergMarquardt`. Not
    counted: the engine's workspace and the batch (the same for every solver).
    """
    return sum(_memory_parts(P, R, solver, gram=gram, damping=damping, ranks=ranks, dtype=dtype,
                             chunk_rows=chunk_rows, chunk_bytes=chunk_bytes).values())


def choose_solver(P: int, R: int, solver: str = "auto", *, max_matrix_bytes: int = 2 << 30,
                  ranks: int = 1, **memory: Any) -> str:
    """The solver :class:`LevenbergMarquardt` uses for ``P`` parameters and ``R`` residuals
    within ``max_matrix_bytes`` (:func:`memory_estimate`; ``memory``: its other keywords).

    ``"auto"``: :func:`helmpinn.defaults.lm_memory_rule` with :func:`memory_estimate` (over MPI
    (``ranks`` > 1) primal; else primal when R >= P, dual when R < P; when that one does not fit
    the other dense one if it fits, else "cg", matrix-free). An explicit
    "primal" or "dual" that does not fit raises ValueError naming the sizes and the budget; "cg"
    is always accepted. Call it before allocating anything (the CLI does, before it touches a
    file).
    """
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    distributed.check_ranks(f"lm:{solver}", ranks)
    budget = int(max_matrix_bytes)

    def need(name: str) -> int:
        return memory_estimate(P, R, name, ranks=ranks, **memory)

    if solver == "cg":
        return solver
    if solver != "auto":
        if need(solver) > budget:
            parts = _memory_parts(P, R, solver, ranks=ranks, **memory)
            raise ValueError(
                f"solver {solver!r} needs about {need(solver) / _GIB:.3g} GiB ("
                + ", ".join(f"{k} {v / _GIB:.3g} GiB" for k, v in parts.items())
                + f") for P = {P} parameters and R = {R} residuals"
                + (f" (the largest share; P×P on each of the {ranks} ranks)" if ranks > 1 else "")
                + f", over max_matrix_bytes = {budget / _GIB:.3g} GiB; use solver='cg' "
                "(matrix-free) or 'auto', or raise max_matrix_bytes")
        return solver
    return lm_memory_rule(P, R, need, budget, ranks)


# -- the optimiser -------------------------------------------------------------------------------
@dataclass
class LMSolve:
    """One solve: the step (float64, to be subtracted), the model's predicted decrease, how."""

    delta: NDArray
    predicted: float
    method: str            # "cholesky", "eigh" (fallback), "cg", or "cholesky+cg" (gram="float32")
    cg_iterations: int = 0
    _again: Callable[[NDArray], NDArray] | None = field(default=None, repr=False)  # same matrix, other rhs


# -- the linear systems ----------------------------------------------------------------------------
def _allsum(comm: Any, x: float) -> float:
    """x summed over the ranks of ``comm`` (a data-parallel run), else x."""
    return x if comm is None else float(comm.allreduce(x))


def _allsum_array(comm: Any, a: NDArray) -> None:
    """``a`` (float64, C-contiguous) summed in place over the ranks of ``comm``, if any."""
    if comm is not None:
        comm.Allreduce(distributed._mpi().IN_PLACE, a, op=distributed._mpi().SUM)


def _collective(comm: Any, what: str) -> contextlib.AbstractContextManager:
    """A block of local work whose failure on one rank raises on every rank (no-op alone)."""
    if comm is None:
        return contextlib.nullcontext()
    return distributed.collective(comm, what)


@dataclass(eq=False)
class _MatrixFree:
    """The products with J and Jᵀ at ``theta`` (through the residuals' ``jvp`` / ``vjp``, summed
    over the ranks) and preconditioned CG on (JᵀJ + λD) x = b, which every system uses."""

    res: Any
    comm: Any
    theta: NDArray
    cg_tol: float
    cg_maxiter: int
    refine_tol: float
    refine_maxiter: int

    def jt(self, w: NDArray) -> NDArray:
        """Jᵀw over the union of the ranks' rows (w: this rank's rows, float64)."""
        with _collective(self.comm, "LM: vjp"):
            out = np.asarray(self.res.vjp(self.theta, w.astype(self.res.dtype)), dtype=np.float64)
        _allsum_array(self.comm, out)
        return out

    def cg(self, lam: float, D: NDArray, diag: NDArray | None, g: NDArray,
           precond: Callable[[NDArray], NDArray] | None = None) -> tuple[NDArray, NDArray, int]:
        """Preconditioned CG on (JᵀJ + λD) x = g; returns x, Jx (this rank's rows) and the
        iterations. ``precond``: an approximate inverse (the factor of a float32 JᵀJ, then to
        ``refine_tol`` in at most ``refine_maxiter`` iterations), else the Jacobi preconditioner
        diag(JᵀJ) + λD (to ``cg_tol`` in ``cg_maxiter``)."""
        res, theta, dt = self.res, self.theta, self.res.dtype
        if precond is not None:
            tol, maxiter = self.refine_tol, self.refine_maxiter
        else:
            tol, maxiter = self.cg_tol, self.cg_maxiter
            if diag is not None:
                jacobi = diag + lam * D
                precond = lambda v: v / jacobi  # noqa: E731
        def normal(p: NDArray) -> tuple[NDArray, NDArray]:
            with _collective(self.comm, "LM: CG products"):
                Jp = np.asarray(res.jvp(theta, p.astype(dt)), dtype=np.float64)
                Ap = np.asarray(res.vjp(theta, Jp.astype(dt)), dtype=np.float64)
            _allsum_array(self.comm, Ap)   # Jᵀ(Jp) over the union of the ranks' rows
            Ap += lam * D * p
            return Jp, Ap

        return pcg(normal, g, res.num_residuals, precond, tol, maxiter)


def pcg(normal: Callable[[NDArray], tuple[NDArray, NDArray]], rhs: NDArray, num_residuals: int,
        precond: Callable[[NDArray], NDArray] | None, tol: float, maxiter: int, *,
        dot: Callable[[NDArray, NDArray], float] | None = None,
        ref: float | None = None) -> tuple[NDArray, NDArray, int]:
    """Preconditioned conjugate gradients on the damped normal equations ``(JᵀJ + λD) x = rhs``,
    the one CG of LM's matrix-free system and of :class:`helmpinn.optim.gauss_newton.MatrixFreeGN`.

    ``normal(p)`` returns ``(J p, (JᵀJ + λD) p)`` (J p over this process's ``num_residuals``
    rows); ``precond`` an approximate inverse of the matrix (None: none); ``dot`` the inner
    product of two parameter-space vectors (None: ``a @ b``; a global sum where the parameters
    are split over ranks). Stops when the residual's norm is at most ``tol`` times ``ref``
    (default ``|rhs|``), after ``maxiter`` iterations, or on a direction of non-positive curvature. Returns ``x``,
    ``J x`` (kept along, so that the caller needs no further product) and the iterations taken.
    """
    if dot is None:
        def dot(a: NDArray, b: NDArray) -> float:
            return float(a @ b)
    x = np.zeros_like(rhs)
    Jx = np.zeros(num_residuals)
    rr = rhs.copy()
    z = precond(rr) if precond is not None else rr
    p = z.copy()
    rz = dot(rr, z)
    stop = tol * (math.sqrt(dot(rhs, rhs)) if ref is None else ref)
    it = 0
    for it in range(1, maxiter + 1):
        Jp, Ap = normal(p)
        pAp = dot(p, Ap)
        if not pAp > 0:
            break
        alpha = rz / pAp
        x += alpha * p
        Jx += alpha * Jp
        rr -= alpha * Ap
        if math.sqrt(dot(rr, rr)) <= stop:
            break
        z = precond(rr) if precond is not None else rr
        rz_new = dot(rr, z)
        p = z + (rz_new / rz) * p
        rz = rz_new
    return x, Jx, it


@dataclass(eq=False)
class LinearSystem:
    """One linearisation at ``theta``: the residuals ``r`` (float64, this rank's rows), the loss
    ``r·r`` (summed over the ranks), ``g = Jᵀr``, ``diag = diag(JᵀJ)`` (None where the matrix-free
    system does not need it) and the damping's diagonal ``D``. :meth:`solve` gives the LM step
    of (JᵀJ + λD) δ = Jᵀr; :class:`PrimalSystem`, :class:`DualSystem` and :class:`CGSystem` are
    the three ways. ``problem`` says why the system cannot be solved (a non-finite loss,
    Jacobian or sum), "" when it can; only then are ``g``, ``diag`` and ``D`` set."""

    theta: NDArray
    r: NDArray
    loss: float
    ops: _MatrixFree
    g: NDArray | None = None
    diag: NDArray | None = None
    D: NDArray | None = None
    problem: str = ""
    name: ClassVar[str] = "none"

    def solve(self, lam: float) -> LMSolve:
        """The step for damping ``lam``."""
        raise NonFiniteLoss(self.problem or "no linear system")

    def solve_residual_rhs(self, lam: float, sol: LMSolve, w: NDArray) -> NDArray:
        """x with (JᵀJ + λD) x = Jᵀw (``w`` this rank's residual rows), reusing ``sol``'s
        factorisation where there is one."""
        raise NonFiniteLoss(self.problem or "no linear system")


@dataclass(eq=False)
class PrimalSystem(LinearSystem):
    """The P×P normal equations: ``A = JᵀJ`` (float64, its upper triangle; summed over the
    ranks), factored per λ by Cholesky. ``approximate`` (``gram="float32"``): A was formed in
    float32 and its factor only preconditions CG on the float64 system."""

    A: NDArray | None = None
    approximate: bool = False
    name: ClassVar[str] = "primal"

    def solve(self, lam: float) -> LMSolve:
        g, D = self.g, self.D
        solve, how = _spd_factor(self.A, lam * D, approximate=self.approximate)
        if self.approximate:   # the factor preconditions CG on the exact float64 system
            delta, Jd, it = self.ops.cg(lam, D, self.diag, g, precond=solve)
            again = lambda rhs: self.ops.cg(lam, D, self.diag, rhs, precond=solve)[0]  # noqa: E731
            pred = float(2.0 * (delta @ g)) - _allsum(self.ops.comm, float(Jd @ Jd))   # δ, g: the same on every rank
            return LMSolve(delta, pred, how + "+cg", it, _again=again)
        delta = solve(g)
        return LMSolve(delta, float(delta @ (g + lam * D * delta)), how, _again=solve)

    def solve_residual_rhs(self, lam: float, sol: LMSolve, w: NDArray) -> NDArray:
        return sol._again(self.ops.jt(w))


@dataclass(eq=False)
class DualSystem(LinearSystem):
    """The R×R form for R < P (one process): ``δ = D⁻¹Jᵀ (J D⁻¹ Jᵀ + λI)⁻¹ r`` with all of J
    (R×P) and ``K = J D⁻¹ Jᵀ`` (its upper triangle)."""

    J: NDArray | None = None
    K: NDArray | None = None
    name: ClassVar[str] = "dual"

    def solve(self, lam: float) -> LMSolve:
        g, D, J = self.g, self.D, self.J
        solve, how = _spd_factor(self.K, np.full(self.K.shape[0], lam))
        delta = (J.T @ solve(self.r)) / D
        return LMSolve(delta, float(delta @ (g + lam * D * delta)), how,
                       _again=lambda rhs: (J.T @ solve(rhs)) / D)

    def solve_residual_rhs(self, lam: float, sol: LMSolve, w: NDArray) -> NDArray:
        return sol._again(w)


@dataclass(eq=False)
class CGSystem(LinearSystem):
    """Matrix-free: CG through ``jvp`` / ``vjp``, memory O(R + P); the step is inexact (to
    ``cg_tol``)."""

    name: ClassVar[str] = "cg"

    def solve(self, lam: float) -> LMSolve:
        x, Jx, it = self.ops.cg(lam, self.D, self.diag, self.g)
        return LMSolve(x, float(2.0 * (x @ self.g) - _allsum(self.ops.comm, float(Jx @ Jx))), "cg", it)

    def solve_residual_rhs(self, lam: float, sol: LMSolve, w: NDArray) -> NDArray:
        return self.ops.cg(lam, self.D, self.diag, self.ops.jt(w))[0]


def _pow2_exponent(top: float, rows: int) -> int:
    """e such that the float32 sums of ``rows`` squares of entries up to ``top`` scaled by 2**e
    stay far from float32's range (about 2**80), 0 when they already are (2**-60 to 2**100):
    a power of two scales exactly."""
    if not (top > 0 and math.isfinite(top)):
        return 0
    size = 2.0 * math.log2(top) + math.log2(max(rows, 1))
    if -60.0 <= size <= 100.0:
        return 0
    return int(math.floor((80.0 - size) / 2.0))


class LevenbergMarquardt(Damped):
    """Levenberg-Marquardt on a :class:`Residuals` problem (see the module docstring).

    Options: ``solver`` (``SOLVERS``), ``damping`` ("identity", or "marquardt": ``D = diag(JᵀJ)``,
    kept at the running maximum over iterations as Moré advises), ``update``
    (:data:`~helmpinn.optim.damped.UPDATES`: the λ rule, :mod:`helmpinn.optim.damped`), ``lam`` (initial λ; with
    "identity" it is relative to the mean of ``diag(JᵀJ)``), ``lam_min`` / ``lam_max`` (λ is
    clipped to them; :meth:`step` reports the status :attr:`~helmpinn.optim.damped.StepStatus.LAM_MAX`
    when a step fails at ``lam_max``), ``max_trials`` (trial points per step before giving up and returning with the
    parameters unchanged), ``chunk_rows`` (Jacobian rows per chunk; default: chunks of at most
    ``chunk_bytes``), ``cg_tol`` / ``cg_maxiter`` (matrix-free solve), ``geodesic`` / ``geodesic_h`` /
    ``geodesic_alpha`` (geodesic acceleration, see the module docstring), ``gram`` / ``refine_tol``
    / ``refine_maxiter`` (``JᵀJ`` in float32 as CG's preconditioner, ditto), ``max_matrix_bytes``
    (the memory budget of the dense solvers, :func:`memory_estimate`: "auto" picks one that
    fits, else "cg"; an explicit "primal" or "dual" over it is refused, :func:`choose_solver`),
    ``blas_threads`` (limit the BLAS to this many threads inside a step with threadpoolctl;
    None leaves it; "auto", the default: as many as helmpinn's own threads,
    :func:`helmpinn.get_num_threads`, whatever the machine's load, so that a run gives the same
    numbers on a busy machine as on an idle one; BLAS threads that share their cores with other
    work spin against it and against the engine's threads: ``blas_threads=1`` is faster on a
    busy machine). The Jacobian chunks are large by default (``chunk_bytes`` 256 MiB) because
    every switch between the engine's OpenMP threads and the BLAS's costs their spin-waits.

    The Jacobian of a rejected step is kept, so the next :meth:`step` at the same parameters
    only solves again; call :meth:`reset_cache` when the residuals change (new points).

    ``comm`` (an mpi4py communicator of several ranks, each with its own rows, scaled with the
    global counts): JᵀJ and Jᵀr (or, matrix-free, the products Jᵀ(Jp)) are summed over the ranks
    in place and every loss is summed, so every rank solves the same system and takes the same
    step as one process on the union of the rows; the primal and the matrix-free systems are
    available then. Every failure inside a step is agreed between the ranks
    (:func:`helmpinn.distributed.agree`) before the next collective, so it raises on every rank.
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
        self.set_damping(lam=lam, lam_min=lam_min, lam_max=lam_max, update=update, max_trials=max_trials,
                         geodesic=geodesic, geodesic_h=geodesic_h, geodesic_alpha=geodesic_alpha)
        if chunk_rows is not None and int(chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        if int(chunk_bytes) < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        if not 0 < cg_tol < 1 or int(cg_maxiter) < 1:
            raise ValueError(f"need 0 < cg_tol < 1 and cg_maxiter >= 1, got {cg_tol}, {cg_maxiter}")
        if not int(max_matrix_bytes) > 0:
            raise ValueError(f"max_matrix_bytes must be > 0, got {max_matrix_bytes}")
        check_blas_threads(blas_threads)
        if gram not in GRAMS:
            raise ValueError(f"gram must be one of {GRAMS}, got {gram!r}")
        if not 0 < refine_tol < 1 or int(refine_maxiter) < 1:
            raise ValueError(f"need 0 < refine_tol < 1 and refine_maxiter >= 1, got {refine_tol}, {refine_maxiter}")
        distributed.check_ranks(f"lm:{solver}", 1 if comm is None else comm.Get_size())
        self.comm = comm if comm is not None and comm.Get_size() > 1 else None
        self.res = residuals
        self.damping = damping
        self.chunk_bytes = int(chunk_bytes)
        self._chunk_rows = None if chunk_rows is None else int(chunk_rows)
        self.cg_tol, self.cg_maxiter = float(cg_tol), int(cg_maxiter)
        self.max_matrix_bytes = int(max_matrix_bytes)
        self.blas_threads = blas_threads
        self.requested_solver = solver
        self.gram = gram
        self.refine_tol, self.refine_maxiter = float(refine_tol), int(refine_maxiter)
        self.steps = 0               # calls of step()
        self.iterations = 0          # Jacobians computed
        self.evaluations = 0         # residual evaluations (trials)
        self._lam_relative = damping == "identity"
        self._dmax: NDArray | None = None
        self._rows: tuple[int, int] = self._count_rows()
        self.solver   # an explicit dense solver over the memory budget is refused here
        self.reset_cache()

    # -- bookkeeping ------------------------------------------------------------------------------
    @property
    def solver(self) -> str:
        """The solver in use ("primal", "dual" or "cg"): :func:`choose_solver` for these
        residuals within ``max_matrix_bytes`` (over MPI for the rank with the most rows, so that
        every rank makes the same choice)."""
        return self._choose(self._rows[1])

    def _choose(self, rows: int) -> str:
        return choose_solver(self.res.num_params, rows, self.requested_solver,
                             max_matrix_bytes=self.max_matrix_bytes,
                             ranks=1 if self.comm is None else self.comm.Get_size(), gram=self.gram,
                             damping=self.damping, dtype=self.res.dtype, chunk_rows=self._chunk_rows,
                             chunk_bytes=self.chunk_bytes)

    def fits(self, factor: float) -> bool:
        """Whether ``factor`` times the residual rows (each rank's) keep the solver in use within
        ``max_matrix_bytes`` (:func:`memory_estimate`): a dense solver stays dense (with "auto"
        it may change between primal and dual, not to the slower "cg"); "cg" always fits."""
        try:
            chosen = self._choose(math.ceil(factor * self._rows[1]))
        except ValueError:   # an explicit dense solver over the budget
            return False
        return chosen != "cg" or self.solver == "cg"

    @property
    def chunk_rows(self) -> int:
        return _chunk_rows(self.res.num_params, self.res.num_residuals, self._chunk_rows, self.chunk_bytes)

    def set_residuals(self, residuals: Residuals) -> None:
        """Go on with other residuals (fresh points) of the same parameters."""
        if residuals.num_params != self.res.num_params:
            raise ValueError(f"residuals have {residuals.num_params} parameters, expected {self.res.num_params}")
        previous = self.res, self._rows
        self.res = residuals
        self._rows = self._count_rows()
        try:
            self.solver   # within the memory budget with the new number of residuals
        except ValueError:
            self.res, self._rows = previous
            raise
        self._dmax = None
        self.reset_cache()

    def _count_rows(self) -> tuple[int, int]:
        """(all residual rows, the most on one rank): over MPI one allgather (a collective, in
        the constructor and :meth:`set_residuals`), so that every rank refuses or picks a solver
        alike; alone (R, R)."""
        R = int(self.res.num_residuals)
        if self.comm is None:
            return R, R
        rows = self.comm.allgather(R)
        return int(sum(rows)), int(max(rows))

    def reset_cache(self) -> None:
        """Forget the linearisation (call after the residuals' points change)."""
        self._key: bytes | None = None
        self._sys: LinearSystem | None = None
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
    def _sum(self, x: float) -> float:
        """x summed over the ranks (a data-parallel run), else x."""
        return _allsum(self.comm, x)

    def _check_rows(self) -> None:
        """Refuse residuals without a single row (on every rank together)."""
        if self._rows[0] == 0:
            raise ValueError("residuals: there are none (R = 0: no points"
                             + (" on any rank" if self.comm is not None else "")
                             + "); Levenberg-Marquardt needs at least one residual")

    def linearize(self, theta: NDArray, times: dict[str, float] | None = None) -> LinearSystem:
        """The linear system at ``theta`` (per solver, :class:`LinearSystem`); cached for the same
        ``theta``."""
        key = theta.tobytes()
        if key == self._key:
            return self._sys
        self._check_rows()
        times = {} if times is None else times
        res, solver, comm = self.res, self.solver, self.comm
        P = res.num_params
        with _collective(comm, "LM: residuals"):
            if self._next is not None and self._next[0] == key:
                r = self._next[1]   # the residuals of the accepted trial point
            else:
                t0 = time.perf_counter()
                r = np.asarray(res.residuals(theta), dtype=np.float64)
                times["trial"] = times.get("trial", 0.0) + time.perf_counter() - t0
                self.evaluations += 1
        self._next = None
        loss = self._sum(float(r @ r))
        ops = _MatrixFree(res, comm, theta.copy(), self.cg_tol, self.cg_maxiter, self.refine_tol,
                          self.refine_maxiter)
        if not math.isfinite(loss):
            s = LinearSystem(ops.theta, r, loss, ops, problem=f"non-finite loss ({loss})")
            self._key, self._sys = key, s
            return s
        tm = 0.0
        extra: dict[str, Any] = {}
        if solver == "primal":
            single = self.gram == "float32"
            A, g, top, tj, tm = _primal_sums(res, theta, r, comm, self.chunk_rows, single)
            diag = np.diag(A).copy()
            cls, extra = PrimalSystem, {"A": A, "approximate": single}
        elif solver == "dual":
            J, g, diag, top, tj, tm = _dual_jacobian(res, theta, r, self.chunk_rows)
            cls, extra = DualSystem, {"J": J}
        else:  # cg
            need = self.damping == "marquardt" or self._lam_relative
            g, diag, top, tj = _gradient(res, theta, r, comm, self.chunk_rows, need)
            cls = CGSystem
        times["jacobian"] = times.get("jacobian", 0.0) + tj
        times["jtj"] = times.get("jtj", 0.0) + tm
        s = cls(ops.theta, r, loss, ops, g=g, diag=diag, **extra)
        s.problem = self._problem(s, top)
        if not s.problem:
            s.D = self._scaling(diag, P)
            if solver == "dual":   # J D⁻¹ Jᵀ (its upper triangle, R×R) does not depend on λ
                from scipy.linalg.blas import dsyrk

                t1 = time.perf_counter()
                Js = s.J if self.damping == "identity" else s.J / np.sqrt(s.D)
                s.K = dsyrk(1.0, Js.T, trans=1, lower=0)
                del Js
                times["jtj"] += time.perf_counter() - t1
            if self._lam_relative and diag is not None:
                self.lam = min(max(self.lam * max(float(np.mean(diag)), 1e-300), self.lam_min), self.lam_max)
                self._lam_relative = False
        self.iterations += 1
        self._key, self._sys = key, s
        return s

    def _problem(self, s: LinearSystem, top: float) -> str:
        """Why ``s`` cannot be solved: "" when Jᵀr and diag(JᵀJ) are finite (the same on every
        rank: both are summed); else whether the Jacobian itself is not finite or only its sums
        overflowed float64 (J finite, its largest entry ``top``), agreed over the ranks."""
        if np.all(np.isfinite(s.g)) and (s.diag is None or np.all(np.isfinite(s.diag))):
            return ""
        bad_j = not math.isfinite(top)
        if self.comm is not None:
            bad_j = bool(self.comm.allreduce(bad_j, op=distributed._mpi().LOR))
            top = float(self.comm.allreduce(0.0 if bad_j else top, op=distributed._mpi().MAX))
        if bad_j:
            return "non-finite Jacobian"
        if top == 0.0 and s.diag is None:   # matrix-free: J itself was not formed
            return "non-finite Jacobian (its product Jᵀr is not finite)"
        return (f"JᵀJ or Jᵀr overflows float64: the Jacobian is finite, but its largest entry "
                f"{top:.3g} squared and summed over the rows is not")

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
        if s.problem:
            raise NonFiniteLoss(f"{s.problem} at the current parameters")
        with blas_limit(self.blas_threads):
            return s.solve(lam)

    # -- one iteration ------------------------------------------------------------------------------
    def step(self, theta: NDArray) -> StepRecord:
        """One LM iteration in place on ``theta`` (a float vector in the residuals' dtype):
        :meth:`~helmpinn.optim.damped.Damped.trials` on the linearisation at ``theta`` (or the
        last one there, kept from a rejected step). The record's ``times`` holds the seconds in
        "jacobian", "jtj", "solve" and "trial"; its ``residuals`` are r after the step. Raises
        :class:`~helmpinn.optim.damped.NonFiniteLoss` when the loss or the Jacobian at ``theta``
        is not finite, or its sums overflow (``theta`` untouched); ValueError when there are no
        residuals.
        """
        if theta.ndim != 1 or theta.shape[0] != self.res.num_params or not theta.flags.c_contiguous:
            raise ValueError(f"theta must be a C-contiguous vector of {self.res.num_params} parameters, "
                             f"got shape {theta.shape}")
        times = {"jacobian": 0.0, "jtj": 0.0, "solve": 0.0, "trial": 0.0}
        self.steps += 1
        with blas_limit(self.blas_threads):
            s = self.linearize(theta, times)
            if s.problem:
                raise NonFiniteLoss(f"{s.problem} at the current parameters")
            record = self.trials(_Trials(self, s, theta.dtype, times), theta, times)
        if record.accepted:
            self.reset_cache()
            self._next = (theta.tobytes(), record.residuals)   # the next linearisation's r
        return record


@dataclass(eq=False)
class _Trials:
    """LM's side of the damped step (:class:`~helmpinn.optim.damped.LinearSolve`): the
    linearisation ``s`` solved per λ, the trial points' residuals in the parameters' ``dtype``
    (each counted in ``lm.evaluations``), sums over the ranks."""

    lm: LevenbergMarquardt
    s: LinearSystem
    dtype: Any
    times: dict[str, float]

    @property
    def r(self) -> NDArray:
        return self.s.r

    @property
    def loss(self) -> float:
        return self.s.loss

    def solve(self, lam: float) -> Direction:
        t0 = time.perf_counter()
        sol = self.s.solve(lam)
        self.times["solve"] += time.perf_counter() - t0
        return Direction(sol.delta, sol.predicted, lambda w: self.s.solve_residual_rhs(lam, sol, w))

    def residuals(self, x: NDArray) -> NDArray:
        with _collective(self.lm.comm, "LM: trial residuals"):
            r = np.asarray(self.lm.res.residuals(x.astype(self.dtype)), dtype=np.float64)
        self.lm.evaluations += 1
        return r

    def total(self, r: NDArray) -> float:
        return self.lm._sum(float(r @ r))

    def dot(self, a: NDArray, b: NDArray) -> float:
        comm = self.lm.comm   # every rank holds the same vectors: count them once
        return float(a @ b) if comm is None else self.lm._sum(float(a @ b)) / comm.Get_size()

    def limit(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()   # the whole step is within the optimiser's BLAS limit

    def place(self, theta: NDArray, x: NDArray) -> None:
        theta[...] = x

    def tried(self, delta: NDArray, accepted: bool, rho: float) -> None:
        pass

def _primal_sums(res: Any, theta: NDArray, r: NDArray, comm: Any, step: int,
                 single: bool) -> tuple[NDArray, NDArray, float, float, float]:
    """``(A, g, top, tj, tm)``: the upper triangle of ``A = JᵀJ`` (float64, Fortran-ordered;
    ``single``: summed in float32 by ssyrk, the rows scaled by a power of two where their squares
    would leave float32's range) and ``g = Jᵀr``, from Jacobian chunks of ``step`` rows and
    summed over the ranks; the largest |J| entry (NaN when J has a non-finite one); the seconds
    in the Jacobian and in the sums."""
    from scipy.linalg.blas import dsyrk, ssyrk

    P, R = res.num_params, res.num_residuals
    tj = tm = 0.0
    top = 0.0
    with _collective(comm, "LM: JᵀJ"):
        A = np.zeros((P, P), dtype=np.float32 if single else np.float64, order="F")
        g = np.zeros(P)
        e = None    # gram="float32": the rows are scaled by 2**e (exact), A by 4**e
        for a in range(0, R, step):
            b = min(a + step, R)
            t1 = time.perf_counter()
            Jc = np.asarray(res.jacobian(theta, rows=(a, b)), dtype=np.float64)
            t2 = time.perf_counter()
            top = _top(Jc, top)
            # upper triangle of A += Jcᵀ Jc (Jc.T is a Fortran-ordered P×rows view)
            if single:
                want = _pow2_exponent(top, R)
                if e is None or want < e:
                    if e is not None and want != e:
                        A *= np.float32(2.0 ** (2 * (want - e)))
                    e = want
                Js = Jc if e == 0 else Jc * 2.0 ** e
                A = ssyrk(1.0, Js.astype(np.float32).T, beta=1.0, c=A, trans=0, lower=0, overwrite_c=1)
            else:
                A = dsyrk(1.0, Jc.T, beta=1.0, c=A, trans=0, lower=0, overwrite_c=1)
            g += Jc.T @ r[a:b]
            Jc = Js = None   # before the next chunk is made
            tj += t2 - t1
            tm += time.perf_counter() - t2
        if single:
            t1 = time.perf_counter()
            A = A.astype(np.float64, order="F")
            if e:
                A *= 4.0 ** -e
            tm += time.perf_counter() - t1
    if comm is not None:   # JᵀJ and Jᵀr of the union of the ranks' rows
        t1 = time.perf_counter()
        _allsum_array(comm, A.T)  # A.T: C-ordered view
        _allsum_array(comm, g)
        tm += time.perf_counter() - t1
    return A, g, top, tj, tm


def _dual_jacobian(res: Any, theta: NDArray, r: NDArray,
                   step: int) -> tuple[NDArray, NDArray, NDArray, float, float, float]:
    """``(J, g, diag, top, tj, tm)``: all of J (float64, R×P, in chunks of ``step`` rows), Jᵀr,
    diag(JᵀJ), the largest |J| entry and the seconds in the Jacobian and in the products (one
    process)."""
    P, R = res.num_params, res.num_residuals
    t1 = time.perf_counter()
    J = np.empty((R, P))
    for a in range(0, R, step):
        b = min(a + step, R)
        J[a:b] = res.jacobian(theta, rows=(a, b))
    t2 = time.perf_counter()
    top = _top(J, 0.0)
    g = J.T @ r
    diag = np.einsum("ij,ij->j", J, J)
    return J, g, diag, top, t2 - t1, time.perf_counter() - t2


def _gradient(res: Any, theta: NDArray, r: NDArray, comm: Any, step: int,
              need_diag: bool) -> tuple[NDArray, NDArray | None, float, float]:
    """``(g, diag, top, seconds)``: Jᵀr by one ``vjp`` and, where ``need_diag``, diag(JᵀJ) from
    Jacobian chunks of ``step`` rows (memory O(chunk × P)), summed over the ranks; the largest
    |J| entry (0 where J was not formed)."""
    P, R = res.num_params, res.num_residuals
    top = 0.0
    t1 = time.perf_counter()
    with _collective(comm, "LM: Jᵀr"):
        g = np.asarray(res.vjp(theta, r), dtype=np.float64)
        diag = None
        if need_diag:
            diag = np.zeros(P)   # column norms from chunks of rows: memory O(chunk x P)
            for a in range(0, R, step):
                b = min(a + step, R)
                Jc = np.asarray(res.jacobian(theta, rows=(a, b)), dtype=np.float64)
                top = _top(Jc, top)
                diag += np.einsum("ij,ij->j", Jc, Jc)
                Jc = None   # before the next chunk is made
    _allsum_array(comm, g)
    if diag is not None:
        _allsum_array(comm, diag)
    return g, diag, top, time.perf_counter() - t1


def _top(J: NDArray, top: float) -> float:
    """max(top, the largest |entry| of J) without a temporary; NaN once J holds a NaN or Inf."""
    if J.size == 0 or not math.isfinite(top):
        return top
    hi, lo = float(np.max(J)), float(np.min(J))
    if not (math.isfinite(hi) and math.isfinite(lo)):
        return math.nan
    return max(top, hi, -lo)


def _spd_factor(A: NDArray, shift: NDArray, approximate: bool = False) -> tuple[Callable[[NDArray], NDArray], str]:
    """A solver for (A + diag(shift)) x = b, A symmetric with its upper triangle filled (not
    changed): Cholesky (LAPACK ``potrf`` on one copy, in place: SciPy's ``cho_factor`` would
    copy again), else the eigendecomposition (LAPACK ``syev``, in that same copy) without the
    non-positive part of the spectrum (a singular or indefinite matrix from round-off at tiny
    λ). Either way one copy of A is all it holds. ``approximate`` (A is a float32 JᵀJ, the
    solver a preconditioner): instead of the eigendecomposition (much slower than Cholesky)
    the diagonal is raised by 1e-7, 1e-6, ... of its largest entry until Cholesky succeeds, the
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
        c = None    # the failed factor goes before the next copy is made
        c, info = lapack.dpotrf(shifted(extra), lower=0, overwrite_a=1, clean=0)
        if info == 0 and np.all(np.isfinite(np.diagonal(c))):
            return (lambda b: lapack.dpotrs(c, b, lower=0)[0]), "cholesky"
    c = None
    M = shifted()
    n = M.shape[0]
    w, V = sl.eigh(M, lower=False, check_finite=False, overwrite_a=True, driver="ev")
    del M
    keep = w > max(float(w[-1]), 0.0) * n * np.finfo(np.float64).eps
    first = int(np.argmax(keep)) if keep.any() else n   # w ascends: the kept ones are a tail
    Vk, wk = V[:, first:], w[first:]
    return (lambda b: Vk @ ((Vk.T @ b) / wk)), "eigh"
