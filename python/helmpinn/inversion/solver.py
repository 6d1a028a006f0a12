"""Levenberg-Marquardt on the joint residual: the block-arrowhead normal equations, solved exactly.

With ``J_i = ∂r_i/∂θ_i`` (wavefield i's rows, its own network) and ``J_{m,i} = ∂r_i/∂c`` (the
same rows, the medium; the regularisation rows ``R`` depend on c only), the damped normal
matrix of ``(JᵀJ + λD) δ = Jᵀr`` is block-arrowhead::

    [ A_1            B_1 ]        A_i = J_iᵀJ_i + λ D_i
    [      ...       ... ]        B_i = J_iᵀ J_{m,i}
    [           A_W  B_W ]        C   = Σ_i J_{m,i}ᵀJ_{m,i} + RᵀR + λ D_m
    [ B_1ᵀ ... B_Wᵀ  C   ]

:class:`ArrowheadLM` eliminates every wavefield block exactly (Cholesky of ``A_i``, LAPACK
through :func:`helmpinn.optim.lm._spd_factor`, with its eigendecomposition fallback), forms the
medium's Schur complement ``S = C − Σ B_iᵀ A_i⁻¹ B_i`` (dense, M × M) and right-hand side
``g_m − Σ B_iᵀ A_i⁻¹ g_i``, solves ``S δc = ...`` and back-substitutes
``δθ_i = A_i⁻¹ (g_i − B_i δc)``: the exact Gauss-Newton/LM step of all the unknowns together.

**Memory.** The linearisation takes one wavefield at a time: its Jacobian ``J_i`` (``2N_i × P``)
is formed, reduced to ``J_iᵀJ_i`` (P × P), ``B_i`` (P × M), ``J_iᵀr_i`` and its share of C, and
dropped. Those reductions are kept for the trials (a rejected trial refactors at a new λ without
a new Jacobian): ``W (P² + P M)`` floats, W wavefields, plus ``M²``.

**Cost per step** (P network parameters, N points a wavefield, M medium coefficients, W
wavefields): the Jacobians ``W × (core's J)``; ``W × N P²`` for the Gram matrices (dsyrk),
``W × 2N × 16 × P`` for B_i (J_{m,i} has the basis' 16 entries a row in 2-D); then per trial
``W × (P³/3 + 2P²M + M² P)`` for the factorisations, the solves ``A_i⁻¹B_i`` and the Schur
products, ``M³/3`` for S; and the trial's loss, ``W`` residual evaluations. Linear in W: the
wavefields are independent given the medium.

**Damping.** Marquardt's ``D = diag(JᵀJ)`` (kept at its running maximum, as
:class:`helmpinn.LevenbergMarquardt` with ``damping="marquardt"``): the network weights and the
medium's coefficients have unrelated scales. The trial loop is the one damped step of every
Gauss-Newton optimiser, :meth:`helmpinn.optim.damped.Damped.trials`, to which :class:`ArrowheadLM`
passes this solve (:class:`_ArrowheadSolve`) with the unknowns as one vector (every wavefield's
parameters, then the medium's coefficients): λ follows
:func:`~helmpinn.optim.damped.next_damping` (``update``, default "fixed": ÷3 on acceptance, ×4
on rejection, the project's rule for PINNs); a trial is accepted when the loss falls; at most
``max_trials`` trials a step, and a trial rejected at ``lam_max`` ends it. Geodesic acceleration
and backtracking are off: the solve keeps ``J_iᵀJ_i``, not ``J_i``, so it cannot solve for
another right-hand side in residual space.

**Bounds** by projection (``project`` of :meth:`~helmpinn.optim.damped.Damped.trials`): the
trial medium is ``clip(c − δc, m_lo, m_hi)`` coefficient-wise; a B-spline lies in the convex
hull of its coefficients, so ``m(x)`` stays within the bounds everywhere
(:mod:`helmpinn.inversion.medium`). The predicted decrease ρ is that of the unprojected step.
With ``varpro``, an accepted step's medium is then re-solved for the networks as they are
(:meth:`ArrowheadLM.project_medium`), kept when it lowers the loss.

**Over MPI ranks** (``ranks``, :mod:`helmpinn.inversion.parallel`): ``joint`` holds this rank's
wavefields only; the sums over the wavefields (C, the medium's gradient and the loss; per trial
``Σ B_iᵀ A_i⁻¹ [B_i, g_i]``, the wavefields' share of the predicted decrease, then the trial's
loss) are each one Allreduce, the regularisation is added once after it, and every rank
solves the same medium system, so every rank takes the same step and the same decisions.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from numpy.typing import NDArray

from ..optim.damped import Damped, Direction, NonFiniteLoss, StepRecord
from ..optim.lm import _spd_factor
from .joint import JointResiduals
from .parallel import Ranks

__all__ = ["ArrowheadLM"]


class ArrowheadLM(Damped):
    """LM on a :class:`~helmpinn.inversion.joint.JointResiduals` (module docstring).

    ``bounds``: ``(m_lo, m_hi)`` for the medium's coefficients (None: unbounded); ``lam``: the
    initial λ (relative to D = diag(JᵀJ); 1 by default: on the ring case the first step from
    the start was accepted at λ ≈ 1 only, five rejected trials after a start at 1e-3);
    ``update``, ``lam_min``, ``lam_max``, ``max_trials``: the damping's rule and limits
    (:mod:`helmpinn.optim.damped`; ValueError naming a bad one); ``varpro``: re-solve the medium
    after each accepted step (module docstring); ``ranks``: a
    :class:`~helmpinn.inversion.parallel.Ranks` when ``joint`` holds one rank's share of the
    wavefields (module docstring; None: one process).
    """

    def __init__(self, joint: JointResiduals, *, bounds: tuple[float, float] | None = None,
                 lam: float = 1.0, update: str = "fixed", lam_min: float = 1e-15,
                 lam_max: float = 1e12, max_trials: int = 8, varpro: bool = False,
                 ranks: Ranks | None = None):
        self.set_damping(lam=lam, lam_min=lam_min, lam_max=lam_max, update=update, max_trials=max_trials,
                         geodesic=False, geodesic_h=0.1, geodesic_alpha=0.75, backtrack=0)
        self.joint = joint
        self.bounds = bounds
        self.varpro = bool(varpro)
        self._D: list[NDArray] | None = None
        self._Dm: NDArray | None = None
        self.ranks = Ranks() if ranks is None else ranks

    def state(self) -> dict:
        """What the next step depends on besides the unknowns: λ, ν and the running maximum of
        the damping's diagonals (this rank's wavefields' and the medium's), for a resumed run."""
        return {"lam": self.lam, "nu": self.nu, "D": None if self._D is None else [d.copy() for d in self._D],
                "Dm": None if self._Dm is None else self._Dm.copy()}

    def set_state(self, state: dict) -> None:
        """Continue from :meth:`state`'s values."""
        self.lam, self.nu = float(state["lam"]), float(state["nu"])
        self._D = None if state["D"] is None else [np.array(d, np.float64) for d in state["D"]]
        self._Dm = None if state["Dm"] is None else np.array(state["Dm"], np.float64)

    def global_loss(self, thetas: Sequence[NDArray], c: NDArray, extra: float = 0.0,
                    what: str = "the joint loss") -> tuple[float, float]:
        """The loss of all ranks' wavefields and the regularisation, and ``extra`` summed over
        the ranks (one Allreduce)."""
        def local():
            t = self.joint.terms(thetas, c)
            return t["pde"] + t["data"] + t["boundary"], t["reg"]

        out, err = self.ranks.run(local)
        wave, reg = out if out is not None else (0.0, 0.0)
        total, more = self.ranks.sum([wave, extra], what, err)
        return float(total) + reg, float(more)

    def project(self, c: NDArray) -> NDArray:
        """The medium's coefficients ``c`` clipped to the bounds (a new array; c itself without)."""
        return c if self.bounds is None else np.clip(c, self.bounds[0], self.bounds[1])

    def _linearize(self, thetas: Sequence[NDArray], c: NDArray):
        """The kept reductions of every wavefield's Jacobian (module docstring), the loss, and
        the residuals: this rank's wavefields', then the regularisation's rows (or None)."""
        from scipy.linalg import blas   # on first use: importing helmpinn leaves SciPy's linear algebra out

        joint, ws = self.joint, self.joint.workspace
        M = joint.medium.size
        C, gm = np.zeros((M, M)), np.zeros(M)
        blocks: list = []
        rs: list[NDArray] = []

        def local() -> float:   # this rank's wavefields
            loss = 0.0
            for w, theta in zip(joint.rows, thetas):
                r = w.residuals(ws, theta, c)
                J = w.jacobian(ws, theta, c)
                Jm = w.medium_jacobian(ws, theta)
                if not (np.all(np.isfinite(r)) and np.all(np.isfinite(J))):
                    raise NonFiniteLoss("the residuals or the Jacobian of a wavefield are not finite")
                A = blas.dsyrk(1.0, J.T, trans=0, lower=0)            # upper triangle of JᵀJ
                B = np.ascontiguousarray((Jm.T @ J).T)                  # [P, M]
                blocks.append((A, B, J.T @ r))
                C[:] += (Jm.T @ Jm).toarray()
                gm[:] += Jm.T @ r
                loss += float(r @ r)
                rs.append(r)
                del J
            return loss

        mine, err = self.ranks.run(local)
        C, gm, loss = self.ranks.sum([C, gm, mine or 0.0], "the linearisation", err)
        loss = float(loss)
        rr = None
        if joint.reg is not None:
            rr = joint.reg @ c
            C += (joint.reg.T @ joint.reg).toarray()
            gm += joint.reg.T @ rr
            loss += float(rr @ rr)
        return blocks, C, gm, loss, rs, rr

    def _damping(self, blocks, C) -> tuple[list[NDArray], NDArray]:
        diags = [np.diagonal(A).copy() for A, _, _ in blocks]
        dm = np.diagonal(C).copy()
        if self._D is None or len(self._D) != len(diags):
            self._D, self._Dm = diags, dm
        else:
            self._D = [np.maximum(a, b) for a, b in zip(self._D, diags)]
            self._Dm = np.maximum(self._Dm, dm)
        floor = lambda d: np.maximum(d, 1e-12 * max(float(np.max(d)), 1e-300))  # noqa: E731
        return [floor(d) for d in self._D], floor(self._Dm)

    def _solve(self, lam: float, blocks, C, gm, D, Dm):
        """The damped step ``(δθ_i, δc)`` and its predicted decrease in two parts: the medium's
        (the same on every rank) and this rank's wavefields' (to be summed over the ranks)."""
        M = len(gm)
        BX, By = np.zeros((M, M)), np.zeros(M)
        parts: list = []

        def local() -> None:
            for (A, B, g), d in zip(blocks, D):
                solve, _ = _spd_factor(A, lam * d)
                X, y = solve(B), solve(g)
                BX[:] += B.T @ X
                By[:] += B.T @ y
                parts.append((X, y))

        _, err = self.ranks.run(local)
        BX, By = self.ranks.sum([BX, By], "the Schur complement", err)
        S = C + np.diag(lam * Dm) - BX
        h = gm - By
        S = 0.5 * (S + S.T)
        solve_s, _ = _spd_factor(np.triu(S), np.zeros(len(S)))
        dc = solve_s(h)
        dthetas = [y - X @ dc for X, y in parts]
        pred_m = float(dc @ (gm + lam * Dm * dc))
        pred_w = sum(float(dt @ (g + lam * d * dt)) for dt, (_, _, g), d in zip(dthetas, blocks, D))
        return dthetas, dc, pred_m, pred_w

    def project_medium(self, thetas: Sequence[NDArray], c: NDArray, loss: float) -> tuple[NDArray, float]:
        """The medium that minimises the loss for the networks as they are (the residual is
        linear in c: one sparse least-squares solve, the networks' values only, no Jacobian),
        projected onto the bounds; ``(c, loss)`` as given when that does not lower the loss."""
        joint, ws = self.joint, self.joint.workspace
        M = joint.medium.size
        C, g = np.zeros((M, M)), np.zeros(M)

        def local() -> None:
            for w, theta in zip(joint.rows, thetas):
                r = w.residuals(ws, theta, c)
                Jm = w.medium_jacobian(ws, theta)
                C[:] += (Jm.T @ Jm).toarray()
                g[:] += Jm.T @ r

        _, err = self.ranks.run(local)
        C, g = self.ranks.sum([C, g], "the medium's projection", err)
        if joint.reg is not None:
            C += (joint.reg.T @ joint.reg).toarray()
            g += joint.reg.T @ (joint.reg @ c)
        solve, _ = _spd_factor(np.triu(C), np.full(M, 1e-12 * max(float(np.max(np.diagonal(C))), 1e-300)))
        new_c = self.project(c - solve(g))
        new_loss, _ = self.global_loss(thetas, new_c)
        return (new_c, new_loss) if new_loss < loss else (c, loss)

    def step(self, thetas: list[NDArray], c: NDArray) -> tuple[StepRecord, NDArray]:
        """One LM step: :meth:`~helmpinn.optim.damped.Damped.trials` on the arrowhead solve at
        ``(thetas, c)``. Updates the arrays of ``thetas`` in place on acceptance and returns
        ``(record, c)``: c the new coefficients (the old ones when no trial was accepted), the
        record's ``loss`` the loss after the step (with ``varpro``, after the medium's
        re-solve), its ``times`` the seconds in "linearize", "solve", "trial" and "varpro".
        Raises :class:`~helmpinn.optim.damped.NonFiniteLoss` when the loss or a Jacobian at
        the start is not finite (nothing changed)."""
        t0 = time.perf_counter()
        times = {"linearize": 0.0, "solve": 0.0, "trial": 0.0, "varpro": 0.0}
        system = _ArrowheadSolve(self, thetas, c, times)
        times["linearize"] = time.perf_counter() - t0
        record = self.trials(system, system.flat(thetas, c), times, project=system.feasible)
        if not record.accepted:
            return record, c
        new_c = system.accepted_c
        if self.varpro:
            t1 = time.perf_counter()
            new_c, record.loss = self.project_medium(thetas, new_c, record.loss)
            times["varpro"] = time.perf_counter() - t1
        return record, new_c


@dataclass(eq=False)
class _ArrowheadSolve:
    """The arrowhead linearisation at ``(thetas, c)`` as :meth:`Damped.trials
    <helmpinn.optim.damped.Damped.trials>` takes it (:class:`~helmpinn.optim.damped.LinearSolve`):
    the unknowns as one float64 vector ``[θ_1, ..., θ_W, c]`` (this rank's wavefields, then the
    medium, which every rank holds alike); residual rows ``[r_1, ..., r_W, R c]``, the
    regularisation's rows on every rank and counted once in :meth:`total`. The loss of a trial
    point is :meth:`JointResiduals.split_terms` of its residuals, summed over the ranks."""

    lm: ArrowheadLM
    thetas: list[NDArray]
    c: NDArray
    times: dict[str, float]

    def __post_init__(self) -> None:
        lm = self.lm
        self.blocks, self.C, self.gm, self.loss, rs, rr = lm._linearize(self.thetas, self.c)
        if not np.isfinite(self.loss):
            raise NonFiniteLoss(f"the joint loss is {self.loss}")
        self.D, self.Dm = lm._damping(self.blocks, self.C)
        self.sizes = [w.num_residuals for w in lm.joint.rows]
        self.r = _rows(rs, rr)
        self.M = int(lm.joint.medium.size)
        self.accepted_c: NDArray | None = None
        self._error: BaseException | None = None

    def flat(self, thetas: Sequence[NDArray], c: NDArray) -> NDArray:
        """The unknowns as one float64 vector (a copy)."""
        return np.concatenate([*(np.asarray(t, np.float64) for t in thetas), np.asarray(c, np.float64)])

    def _split(self, x: NDArray) -> tuple[list[NDArray], NDArray]:
        """The views of x's wavefield parameters and medium coefficients."""
        P = self.lm.joint.num_params
        return [x[i * P:(i + 1) * P] for i in range(len(self.thetas))], x[len(x) - self.M:]

    def feasible(self, x: NDArray) -> NDArray:
        """x with its medium part clipped to the bounds (a new array)."""
        if self.lm.bounds is None:
            return x
        out = x.copy()
        out[len(x) - self.M:] = self.lm.project(x[len(x) - self.M:])
        return out

    def solve(self, lam: float) -> Direction:
        t0 = time.perf_counter()
        dthetas, dc, pred_m, pred_w = self.lm._solve(lam, self.blocks, self.C, self.gm, self.D, self.Dm)
        (pred_w,) = self.lm.ranks.sum([pred_w], "the predicted decrease")
        self.times["solve"] += time.perf_counter() - t0
        return Direction(np.concatenate([*dthetas, dc]), pred_m + float(pred_w), self._again)

    @staticmethod
    def _again(w: NDArray) -> NDArray:
        raise NotImplementedError("ArrowheadLM keeps JᵀJ, not J: it solves for no other residual-space "
                                  "right-hand side (no geodesic acceleration)")

    def residuals(self, x: NDArray) -> NDArray:
        """The residual rows at x; a failure on this rank is kept for :meth:`total`, where every
        rank learns of it (zeros stand in for its rows until then)."""
        joint = self.lm.joint
        thetas, c = self._split(x)

        def local() -> list[NDArray]:
            return [w.residuals(joint.workspace, theta, c) for w, theta in zip(joint.rows, thetas)]

        rs, self._error = self.lm.ranks.run(local)
        if rs is None:
            rs = [np.zeros(n) for n in self.sizes]
        return _rows(rs, None if joint.reg is None else joint.reg @ c)

    def total(self, r: NDArray) -> float:
        joint, ends = self.lm.joint, np.cumsum(self.sizes)
        rs = np.split(r[:ends[-1]], ends[:-1]) if len(ends) else []
        t = joint.split_terms(rs, None if joint.reg is None else r[len(r) - joint.reg.shape[0]:])
        error, self._error = self._error, None
        (wave,) = self.lm.ranks.sum([t["pde"] + t["data"] + t["boundary"]], "the trial's loss", error)
        return float(wave) + t["reg"]

    def dot(self, a: NDArray, b: NDArray) -> float:
        """Over every rank's wavefields, the medium's part once."""
        k = len(a) - self.M
        (waves,) = self.lm.ranks.sum([float(a[:k] @ b[:k])], "a dot product")
        return float(waves) + float(a[k:] @ b[k:])

    def limit(self) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def place(self, theta: NDArray, x: NDArray) -> None:
        """The accepted point into ``theta`` (the flat vector), the wavefields' arrays and
        :attr:`accepted_c`."""
        theta[...] = x
        thetas, c = self._split(x)
        for th, new in zip(self.thetas, thetas):
            th[:] = new
        self.accepted_c = c.copy()

    def tried(self, delta: NDArray, accepted: bool, rho: float) -> None:
        pass


def _rows(rs: Sequence[NDArray], reg_rows: NDArray | None) -> NDArray:
    """The wavefields' residuals ``rs`` and the regularisation's rows as one vector."""
    return np.concatenate([np.zeros(0), *rs, *([] if reg_rows is None else [reg_rows])])
