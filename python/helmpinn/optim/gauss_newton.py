"""Matrix-free Gauss-Newton / Levenberg-Marquardt for domain-decomposed models.

One iteration linearises the residuals ``r(θ)`` of a
:class:`~helmpinn.models.decomposition.DecomposedResiduals` and solves

    (JᵀJ + λD) δ = Jᵀr,     θ ← θ − δ,

by preconditioned conjugate gradients through the subnetworks' ``jvp`` and ``vjp`` (one core
call per subnetwork per product, in float32 by default: ``products="core32"``, or "core" in
float64), or through the Jacobian blocks kept from the linearisation (``products="blocks"``: two
BLAS matrix-vector products per subnetwork, memory ``Σ_j R_j P_j``). No matrix over all
parameters is formed: with the core's products the linearisation holds one
Jacobian block at a time, the blocks' Gram matrices (``Σ_j P_j²``), their output-layer columns
and the coarse matrix.

**Preconditioner** (two-level additive Schwarz). Each subnetwork's diagonal block
``G_j = J_jᵀJ_j`` (its Jacobian block's Gram matrix, ``P_j × P_j``, formed a batch of blocks
at a time on the engine's threads: ``_grams``) plus ``λD_j`` is factored by Cholesky once per
trial λ; with ``coarse="last_layer"`` (default) a coarse space adds the exact Gauss-Newton
system restricted to every subnetwork's output layer (``2H + 2`` parameters each):
the columns ``J_Z`` couple neighbouring subnetworks through the rows they share, so
``Z(ZᵀAZ)⁻¹Zᵀ`` carries the global coupling of a wave problem that the blocks alone lack. The
coarse matrix is assembled from the blocks over the overlaps (``DecomposedResiduals.overlaps``)
and factored once per trial. With ``two_level="deflated"`` the coarse correction is applied
multiplicatively instead, ``P = (I − QA) M + Q`` (A-DEF2 of Tang, Nabben, Vuik & Erlangga, J. Sci.
Comput. 2009; ``Q = Z (ZᵀAZ)⁻¹ Zᵀ``, M the blocks), with CG started from ``Q b``: the coarse
space's components are solved exactly rather than added to the blocks' (which contain the output
layers too), at the cost of one more product per iteration. CG then reaches ``cg_tol`` in far
fewer iterations, but its early stop no longer regularises the coarse directions: at small λ
the steps overshoot and are rejected, and whole runs end higher, so the default is additive
(docs/benchmarks-archive.md, "The coarse correction: additive or deflated").

**Damping** as :class:`helmpinn.LevenbergMarquardt`: a trial is accepted when the loss falls and
the linear model predicted a decrease (``rho`` the ratio), else λ grows and another trial runs
with the same linearisation: the one damped step of :mod:`helmpinn.optim.damped`, to which
:meth:`MatrixFreeGN.step` passes its preconditioned CG solve; ``update`` is the rule
(:func:`helmpinn.optim.damped.next_damping`), Nielsen's
by default here (λ falls by up to 3 on acceptance, the more the better the model predicted, and
grows by a doubling factor on rejection): the fixed rule's ``λ /= 3`` after every acceptance made
every other step of the decomposed runs a rejected trial (docs/benchmarks-archive.md, "hp.solve
with its defaults, after the speed-ups"). New points
(:meth:`MatrixFreeGN.set_residuals`: a resample, or the points grown) often cost the first step
on them a rejected trial or two, the model's misfit at the new points rather than its
nonlinearity, and Nielsen's rule, which lowers λ only where ρ is well above ½, then held the
raised λ for the rest of the run; so the first step accepted on new points returns λ to at
most its value before them (``lam_after_new_points="restore"``, default; "keep": not).
``damping="marquardt"`` (default, D = diag(JᵀJ):
every subnetwork's parameters damped on their own scale, which the decomposed models need far
more than one network does), ``"identity"`` (D = 1, the initial ``lam`` relative to the mean
of ``diag(JᵀJ)``, :mod:`helmpinn.optim.lm`'s default) or ``"geometric"`` (D = sqrt(diag(JᵀJ) × its
mean), halfway between the two on a log scale; :func:`helmpinn.training.dd_driver.decomposed_settings`'
choice for a hard-constrained box: there it ended lower than Marquardt's and far lower than the
identity, and a little behind Marquardt's on the problems with a PML; docs/benchmarks-archive.md,
"The damping's scale"). Optional geodesic
acceleration (``geodesic=True``) as in :mod:`helmpinn.optim.lm`, one more CG solve per trial.

**Backtracking** (``backtrack``, default :data:`BACKTRACK` = 3): a rejected trial's step is
halved, up to ``backtrack`` times, before λ grows; the first θ − αδ (α = 1/2, 1/4, ...) at which
the loss falls is accepted; λ stays and ν starts again (the shorter step has answered the
overshoot: raising λ by 1/α as well, tried, kept a run's later steps damped, Nielsen's rule
leaving λ as it is at the ρ ≈ ½ of late steps). Each α costs one residual
evaluation, where a trial at a larger λ costs a CG solve; and where a Gauss-Newton step overshoots
a decomposed model, the direction is often right and the length wrong: the rejected trials
measured lowered the loss at half their length, where raising λ instead took several more CG
solves and left λ raised by orders of magnitude for many steps (docs/benchmarks-archive.md,
"Backtracking a rejected step"). (With ``geodesic``, the shortened steps leave out the
acceleration.) ``backtrack=0``: λ grows at once.

**Warm start** (``cg_warm=True``, default): CG starts from the last step, scaled by the
minimiser of the quadratic model along it (one product more; from zero, without that product,
where the scale is not positive), where that step was accepted with ``rho >= WARM_RHO`` (a
poorly predicted or rejected step is not repeated): the initialisation of Martens'
Hessian-free optimisation (ICML 2010). A warm-started trial that is rejected does not count
against λ: the next trial solves the same system from zero. The start is rarely taken: a full
Gauss-Newton step overshoots along itself, so the next gradient points away from it and the
scale is not positive; on the built-in problems it was taken only at a few of the first steps,
and small (docs/benchmarks-archive.md, "hp.solve with its defaults, after the speed-ups", its
part "How often the start is taken").

**Output layers projected** (``varpro=True``): the residuals are linear in the subnetworks'
output layers z (``u = Σ ω_j (W_j h_j + b_j)``, times the constraint's distance), so before each
step's trials z can be set to its least-squares values for the current hidden layers,
``z ← z − (J_ZᵀJ_Z + εI_diag)⁻¹ J_Zᵀ r`` (variable projection, Golub & Pereyra 1973), with the
coarse space's matrix, factored once more, and no residual evaluation beyond the one that
checks it. From poor hidden layers the projection fits the residual with large fields the
residual barely sees (in a closed box its near-resonant modes) and the run does not recover;
so a projection that lowers the loss more than ``VARPRO_MAX_FALL`` (2) times is refused. Early
in a run every projection would lower it tens to thousands of times and is refused; once the
Gauss-Newton steps have brought the hidden layers close, it is taken. Measured, it helps some
runs (the 5-wavelength box, three seeds of four) and hurts others (it fits the training points
more than the field: the fourth seed, ``free-source``, ``dirichlet2d``), so it is off by default
(docs/benchmarks-archive.md, "The coarse correction: additive or deflated", its part "Output
layers projected, late").

**Mode rows** (residuals built with ``modes=``,
:class:`~helmpinn.models.decomposition.DecomposedResiduals`): the loss also holds 2q rows, each the
point rows' residual projected on one near-resonant mode of a closed box and weighted by the
error such a residual causes (:func:`helmpinn.problems.waves.resonance_rows`). Their Jacobian ``FᵀJ`` is
dense over the subnetworks but of rank 2q, so the preconditioner adds their term ``UUᵀ`` of
``JᵀJ`` (``U = JᵀF``, each block's ``J_jᵀF_j`` taken from the Jacobian blocks of the
linearisation) to the additive two-level one by Woodbury's identity
(:mod:`helmpinn.optim.low_rank`: one application of it to U's 2q columns at once per trial λ,
by blocks since U and ``M U`` are dense only on each block's few columns and the output
layers' rows, and a 2q × 2q factor): without that
term CG takes several times the iterations and a run can stall (docs/benchmarks-archive.md,
"Mode rows"). D stays the point rows'. Not with the deflated preconditioner or ``varpro``.
CG's tolerance is relative to the point rows' share of the gradient, ``‖J_pᵀ r_p‖``, where
that is smaller than ``‖Jᵀr‖`` (``cg_tol_on="points"``, default): early in a run the mode rows
can hold most of the loss, the preconditioner solves their part at once, and a tolerance
relative to the whole gradient then stopped CG after a few iterations with the point rows'
part barely solved (a user's room whose source excites its near-resonant modes stayed near
its starting error for 30 steps; docs/benchmarks-archive.md, "Mode rows"). ``"all"``: relative to
``‖Jᵀr‖``.

The step is a function of the parameters only (:meth:`MatrixFreeGN.step`), so a run loop's
driver wraps it in a few lines: build the residuals from the run's training set
(:meth:`~helmpinn.models.decomposition.DecomposedModel.residuals_for`), call ``step(model.params)``
each iteration, :meth:`MatrixFreeGN.set_residuals` after a resample, and
``state_dict``/``load_state_dict`` for checkpoints.

**Over MPI** the solver follows its residuals: built with ``comm=``
(:class:`~helmpinn.models.decomposition.DecomposedResiduals`), each rank linearises, factors and
applies the preconditioner blocks of its own subdomains only, and the parameter vector stays
replicated: CG's vectors hold this rank's own range (zeros elsewhere), its inner products are
global sums taken alike on every rank, each ``J v`` is one ``Allreduce`` of the 2N residual
vector and ``Jᵀw`` is local. The coarse matrix is assembled by the owners of its block rows
(each rank receives the output-layer columns of the other ranks' subdomains that share points
with its own, one ``alltoall``) and gathered whole on every rank (one ``Allgatherv``), where it
is factored; each coarse correction gathers the coarse components of its argument (one
``Allgatherv`` of the coarse dimension), and so does ``varpro``'s projection. An accepted step
gathers the new parameters on every rank (one ``Allgatherv``); the damping's decisions use rank
0's loss values. ``step`` and the other methods are then collectives: every rank calls them
with the same (replicated) parameters. Local failures (a block that cannot be factored) are
agreed (:func:`helmpinn.distributed.collective`), so every rank raises instead of waiting.
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import numpy as np
from numpy.typing import NDArray

from .. import _core, distributed
from .._blas import blas_limit, check_blas_threads
from .damped import Damped, Direction, NonFiniteLoss, StepRecord
from .lm import DAMPINGS as LM_DAMPINGS, pcg
from .low_rank import BlockColumns, woodbury

__all__ = ["Linearization", "MatrixFreeGN", "SPARSE_COARSE_ABOVE", "WARM_RHO", "VARPRO_RIDGE", "VARPRO_MAX_FALL", "BACKTRACK",
           "DAMPINGS", "GRAM_BATCH", "GRAM_BATCH_BYTES"]

#: Coarse systems of more unknowns than this are assembled and factored sparse (SuperLU): a
#: subdomain's output layer couples only to its neighbours', and the dense factor's
#: (66 s)³/3 flops for s subdomains of 1,154 parameters grow faster than the rest of a step.
SPARSE_COARSE_ABOVE = 3000
#: With ``cg_warm``, CG starts from the last step only where that step was accepted with at least
#: this ratio of actual to predicted decrease (module docstring).
WARM_RHO = 0.25
#: With ``varpro``, the output layers' least-squares system is solved with this ridge, relative
#: to its own diagonal (it holds the box's exactly resonant modes, which no residual sees).
VARPRO_RIDGE = 1e-8
#: With ``varpro``, a projection that lowers the loss more than this factor is refused (module
#: docstring: from poor hidden layers it fits the residual with fields the residual barely sees).
VARPRO_MAX_FALL = 2.0
#: ``backtrack``'s default: a rejected trial's step is halved up to this many times, and the first
#: at which the loss falls is taken (module docstring, "Backtracking").
BACKTRACK = 3
#: The linearisation holds up to this many Jacobian blocks per engine thread, or
#: :data:`GRAM_BATCH_BYTES` of them (whole blocks, Green's carrier rows included), before their
#: Gram matrices are formed side by side on the engine's threads (``_grams``: each thread one
#: block at a time, whichever is free taking the next). The same matrices whatever the batch.
GRAM_BATCH = 4
GRAM_BATCH_BYTES = 256 << 20
#: The damping matrices D of (JᵀJ + λD) δ = Jᵀr (module docstring): LM's and the geometric one.
DAMPINGS = (*LM_DAMPINGS, "geometric")


@dataclass(eq=False)
class Linearization:
    """:meth:`MatrixFreeGN.linearize`'s result at ``theta``: the residuals ``r`` (float64, the
    point rows then any mode rows), the subdomain blocks' Gram matrices ``grams`` {part: the upper
    triangle of J_jᵀJ_j, in ``gram``'s dtype} of this rank's parts, ``diag`` = diag(JᵀJ) of the
    point rows (all of it, on every rank), the Jacobian ``blocks`` {part: J_j} where
    ``products="blocks"`` keeps them (else None), the mode rows' gradients ``U`` = JᵀF [P, 2q]
    (None without mode rows), ``g`` = Jᵀr (this rank's range), ``g_scale`` (the point rows'
    share ‖J_pᵀr_p‖ that CG's tolerance is relative to, None: ‖g‖) and ``coarse`` (the output
    layers' matrix and their positions, ``(Gc, idx)``; None without a coarse level). ``varpro``'s
    projection replaces ``r`` and ``g``."""

    theta: NDArray
    r: NDArray
    grams: dict[int, NDArray]
    diag: NDArray
    blocks: dict[int, NDArray] | None = None
    U: NDArray | None = None
    g: NDArray | None = None
    g_scale: float | None = None
    coarse: tuple[Any, NDArray] | None = None


def _blas_routine(name: str, dtype: Any) -> Any:
    """SciPy's BLAS routine ``name`` (``"syrk"``, ``"gemm"``, ``"trsv"``) for ``dtype`` (its s- or
    d- form), as the function pointer ``scipy.linalg.cython_blas`` exports: what the core's
    host-work bindings call on the engine's threads."""
    from scipy.linalg import cython_blas

    return cython_blas.__pyx_capi__[("s" if np.dtype(dtype) == np.float32 else "d") + name]


def _grams(blocks: list[NDArray], dtype: str = "float64") -> list[NDArray]:
    """The upper triangles of ``J_jᵀJ_j`` for the blocks J_j [R_j, P_j] (the strict lower
    triangles zero; their one use, the Cholesky factors of :func:`_cholesky`, reads the upper
    ones), Fortran-ordered [P_j, P_j] in ``dtype``: one ssyrk (``dtype="float32"``, the blocks
    rounded to it where they are float64) or dsyrk a block, the blocks spread over the engine's
    threads (:func:`helmpinn._core.gram_blocks`) with the BLAS at one thread. Not the BLAS's own
    threads block after block: between the engine's calls that make the blocks, its idle
    threads spin (OpenBLAS: 2²⁸ cycles after each call) on the cores the engine then needs; on
    ``dirichlet2d`` n = 8 with 2 threads the linearisation took 3.9-5.5 s a step where it now
    takes 1.8-2.3 s (docs/benchmarks-archive.md, "The Gram matrices on the engine's threads")."""
    dt = np.float32 if dtype == "float32" else np.float64
    blocks = [np.ascontiguousarray(J, dt) for J in blocks]
    out = [np.zeros((J.shape[1],) * 2, dt, order="F") for J in blocks]
    with blas_limit(1):
        _core.gram_blocks(_blas_routine("syrk", dt), blocks, out)
    return out


def _products(a: list[NDArray], b: list[NDArray]) -> list[NDArray]:
    """``a_jᵀ b_j`` [P_j, K_j] in the blocks' dtype for the pairs of blocks a_j [m_j, P_j], b_j
    [m_j, K_j] (one dtype): one ?gemm a pair, the pairs spread over the engine's threads
    (:func:`helmpinn._core.product_blocks`) with the BLAS at one thread, as :func:`_grams`. The
    mode rows' gradients ``U_j = J_jᵀF_j`` over Green's carriers: in 3-D most of a block's rows
    (docs/benchmarks-archive.md, "The Gram matrices on the engine's threads")."""
    if not a:
        return []
    dt = a[0].dtype
    a = [np.ascontiguousarray(x, dt) for x in a]
    b = [np.ascontiguousarray(x, dt) for x in b]
    out = [np.zeros((x.shape[1], y.shape[1]), dt, order="F") for x, y in zip(a, b)]
    with blas_limit(1):
        _core.product_blocks(_blas_routine("gemm", dt), a, b, out)
    return out


def _jacobian_blocks(res: Any, theta: NDArray, gram: str, keep: bool, index: list[NDArray] | None,
                     times: dict[str, float]) -> tuple[dict, dict, dict, NDArray | None]:
    """``(grams, blocks, zcols, U)`` at θ over this rank's parts of the residuals ``res``: the
    Gram matrices of the Jacobian blocks' counted rows (:func:`_grams` in ``gram``'s dtype, a
    batch of blocks at a time on the engine's threads), the blocks themselves where ``keep``,
    their output-layer columns (``index`` per part; float64) for the coarse matrix, and with mode
    rows their gradients ``U = JᵀF`` [P, 2q] (:class:`~helmpinn.optim.low_rank.BlockColumns`: each
    part's block in the columns of the mode rows that read it; this rank's parts; else None).
    ``times["gram"]`` gains the seconds of the Gram matrices."""
    grams, blocks, zcols, cols = {}, {}, {}, {}
    # with mode rows, their gradients U = Jᵀ F [P, 2q] from the same blocks (this rank's parts)
    u_blocks: list[tuple[int, NDArray, NDArray]] = []
    # the blocks in float32 where they only make float32 Gram matrices (and the coarse
    # columns, which only precondition, or start varpro's projection, checked by the loss)
    dtype = "float32" if gram == "float32" and not keep else "float64"
    # the Gram matrices (and U's products) a batch of blocks at a time, on the engine's threads
    batch: list[tuple[int, NDArray, NDArray | None, NDArray | None]] = []
    held = 0   # the bytes of the batch's whole blocks (a row range keeps its block alive)
    per_batch = GRAM_BATCH * _core.get_num_threads()

    def batch_done() -> None:
        nonlocal held
        t1 = time.perf_counter()
        for (j, *_), G in zip(batch, _grams([Jc for _, Jc, _, _ in batch], gram)):
            grams[j] = G
        times["gram"] += time.perf_counter() - t1
        pairs = [(j, Ja, Fa) for j, _, Ja, Fa in batch if Ja is not None]
        for (j, _, _), Uj in zip(pairs, _products([Ja for _, Ja, _ in pairs], [Fa for _, _, Fa in pairs])):
            u_blocks.append((res.parts[j]["slice"].start, cols[j], np.asarray(Uj, np.float64)))   # (float64)
        batch.clear()
        held = 0

    with distributed.collective(res.comm, "the Jacobian blocks"), blas_limit(1):
        for j in res.local:
            J = res.block(theta, j, dtype)
            Ja = Fa = None
            if res.num_modes:   # over the rows the mode rows read (Green's: the carriers)
                F, cols[j] = res.mode_columns(j)
                live = np.flatnonzero(F.any(1))
                lo, hi = (live[0], live[-1] + 1) if len(live) else (0, 0)
                Ja, Fa = J[lo:hi], np.ascontiguousarray(F[lo:hi], J.dtype)
            counted = res.parts[j]["counted"]   # the rows after the carriers
            batch.append((j, J[counted:], Ja, Fa))
            held += J.nbytes
            if keep:
                blocks[j] = J
            if index is not None:   # only the output layers' columns stay
                zcols[j] = np.ascontiguousarray(J[counted:, index[j]], np.float64)
            del J
            if len(batch) >= per_batch or held >= GRAM_BATCH_BYTES:
                batch_done()
        batch_done()
    U = BlockColumns((res.num_params, 2 * res.num_modes), u_blocks) if res.num_modes else None
    return grams, blocks, zcols, U


def _sla() -> Any:
    """``scipy.linalg``, imported on first use (importing helmpinn leaves SciPy's linear algebra
    out; tests/test_lm.py)."""
    import scipy.linalg

    return scipy.linalg


def _sparse() -> Any:
    """``scipy.sparse``, imported on first use (as :func:`_sla`)."""
    from scipy import sparse

    return sparse


def _sparse_blocks(blocks: list[tuple[int, int, NDArray]], n: int) -> Any:
    """The sparse CSC matrix [n, n] that sums the dense ``blocks`` (row offset, column offset,
    block) where they fall."""
    from scipy import sparse

    rows, cols, vals = [], [], []
    for r0, c0, B in blocks:
        r, c = np.indices(B.shape)
        rows.append((r + r0).ravel())
        cols.append((c + c0).ravel())
        vals.append(B.ravel())
    if not blocks:
        return sparse.csc_matrix((n, n))
    return sparse.coo_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                             shape=(n, n)).tocsc()   # duplicates summed


def _cholesky(A: NDArray, dtype: str = "float64", diagonal: NDArray | None = None) -> NDArray:
    """The upper Cholesky factor U of the SPD matrix ``A + diag(diagonal)`` (= UᵀU; factored in
    float64 in one copy of A, the diagonal raised further until it succeeds; A's strict lower
    triangle is not read), Fortran-ordered in ``dtype``. ``dtype="float32"``: half the memory a
    solve reads (a solve is bound by reading its factor); ``ŨᵀŨ`` of the rounded factor is still
    SPD, so it stays a fixed, symmetric preconditioner. The strict lower triangle holds whatever
    LAPACK left there (?trsv does not read it)."""
    import scipy.linalg as sla

    n = len(A)
    on_diagonal = np.diag(A).astype(np.float64) + (0.0 if diagonal is None else diagonal)
    scale = float(np.mean(on_diagonal)) if n else 1.0
    shift = 0.0
    for _ in range(30):
        M = np.array(A, np.float64, order="F")   # the one copy LAPACK factors in place
        M[np.arange(n), np.arange(n)] = on_diagonal + shift
        try:
            U = sla.cho_factor(M, lower=False, overwrite_a=True, check_finite=False)[0]
            break
        except np.linalg.LinAlgError:
            shift = max(shift * 10.0, 1e-14 * max(scale, 1e-300))
    else:
        raise np.linalg.LinAlgError("could not factor a preconditioner block (not positive definite)")
    return np.asarray(U, np.float32 if dtype == "float32" else np.float64, order="F")


def _factor(A: Any, dtype: str = "float64") -> Callable[[NDArray], NDArray]:
    """A solve with the SPD matrix A: by SuperLU for a sparse A, else by :func:`_cholesky`'s
    factor and two ?trsv (:class:`_BlockSolves` with one block; LAPACK's ?potrs goes through
    ?trsm, several times slower for one right-hand side); a 2-D b [n, k] by two ?trsm."""
    from scipy import sparse
    from scipy.sparse.linalg import splu

    if sparse.issparse(A):   # SuperLU with a symmetric ordering; λD > 0 keeps A definite
        lu = splu(A, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0, options={"SymmetricMode": True})
        return lambda b: lu.solve(np.asarray(b, np.float64))
    one = _BlockSolves([(slice(0, len(A)), _cholesky(A, dtype))])

    def solve(b: NDArray) -> NDArray:
        if b.ndim == 1 or not b.size:
            return one(b) if b.ndim == 1 else np.zeros(b.shape)
        return one.columns(BlockColumns(b.shape, [(0, np.arange(b.shape[1]), b)]))[0][2]
    return solve


class _BlockSolves:
    """The block-diagonal solve ``v ↦ (U_jᵀU_j)⁻¹ v_j`` on each block's slice of v (zero outside
    the blocks), for the upper factors U_j of :func:`_cholesky` (``blocks``: (slice, U_j), one
    dtype). The blocks are solved on the engine's own threads
    (:func:`helmpinn._core.cholesky_solves`, two of SciPy's ?trsv a block), not on this thread
    alone: a solve is bound by reading its factor, and the second core reads the others'
    meanwhile (docs/benchmarks-archive.md, "The block solves on the engine's threads").
    :meth:`columns` solves the blocks of a :class:`~helmpinn.optim.low_rank.BlockColumns` (the
    mode rows' ``M U``)."""

    def __init__(self, blocks: list[tuple[slice, NDArray]]):
        self.dtype = blocks[0][1].dtype if blocks else np.dtype(np.float64)
        self.factors = [U for _, U in blocks]
        for sl, _ in blocks:
            if sl.step not in (None, 1):
                raise ValueError(f"_BlockSolves: a block's slice must be contiguous, got {sl}")
        self.starts = [int(sl.start or 0) for sl, _ in blocks]
        self._trsv = _blas_routine("trsv", self.dtype)

    def __call__(self, v: NDArray) -> NDArray:
        x = np.zeros(len(v), self.dtype)
        for s, U in zip(self.starts, self.factors):
            x[s:s + len(U)] = v[s:s + len(U)]
        _core.cholesky_solves(self._trsv, self.factors, self.starts, x)
        return x.astype(np.float64)

    def columns(self, V: BlockColumns) -> list[tuple[int, NDArray, NDArray]]:
        """The blocks of ``M V`` [P, k] for M this solve: each of V's blocks (which must start
        where a factor's block does and lie within it) solved in its own columns, two ?trsm a
        block on the calling thread (the BLAS's threads as the caller set them), float64."""
        from scipy.linalg import blas

        trsm = blas.strsm if self.dtype == np.float32 else blas.dtrsm
        at = {s: U for s, U in zip(self.starts, self.factors)}
        out = []
        for s, c, B in V.blocks:
            U = at.get(s)
            if U is None or len(B) != len(U):
                raise ValueError(f"_BlockSolves.columns: no factor of {len(B)} rows starts at row {s}")
            Y = trsm(1.0, U, np.array(B, self.dtype, order="F"), trans_a=1, overwrite_b=1)   # Uᵀ Y = B, U X = Y
            out.append((s, c, np.asarray(trsm(1.0, U, Y, overwrite_b=1), np.float64)))
        return out


def _additive_columns(U: BlockColumns, local: _BlockSolves, space: _CoarseSpace | None,
                      coarse: tuple | None) -> BlockColumns:
    """``W = M U`` by pieces for the additive preconditioner M (the block solves ``local`` plus
    the coarse level ``coarse`` of ``space``, or none): the blocks' solves of U's blocks, and the
    coarse correction ``Q U``, nonzero on this rank's output-layer rows only."""
    rows = None
    if coarse is not None:
        _, own_idx, lo, hi, _, _ = coarse
        rows = (own_idx, space.solve(coarse, U.take(own_idx))[lo:hi])
    return BlockColumns(U.shape, local.columns(U), rows)


class MatrixFreeGN(Damped):
    """Levenberg-Marquardt with CG solves preconditioned by subdomain blocks and a coarse level.

    ``residuals``: a :class:`~helmpinn.models.decomposition.DecomposedResiduals`. Options: ``lam``
    (initial λ; relative to the mean of diag(JᵀJ) with ``damping="identity"``), ``damping``
    (:data:`DAMPINGS`: "marquardt", "identity" or "geometric"), ``lam_min`` / ``lam_max``,
    ``max_trials``, ``cg_tol`` (CG stops at ``‖residual‖ <= cg_tol ‖Jᵀr‖``), ``cg_maxiter``,
    ``coarse`` ("last_layer" or None), ``products`` ("core32", default: CG's jvp/vjp by the core
    in float32, the residuals, Jᵀr and the trials staying float64: faster CG iterations, and the
    same errors step by step within the runs' spread, docs/benchmarks-archive.md; "core": the same
    in float64, memory O(R + P) either way; "blocks": the Jacobian blocks kept, memory
    Σ_j R_j P_j), ``geodesic`` / ``geodesic_h`` / ``geodesic_alpha``, ``gram``
    ("float32", default: the Jacobian blocks computed by the core in float32, their Gram
    matrices by ssyrk, twice dsyrk's rate, and their Cholesky factors kept in float32 for CG's
    solves, which read half the memory; they only precondition, CG solves the float64 system;
    or "float64"; with ``products="blocks"`` the kept blocks are float64 either way), ``two_level`` ("additive",
    default, or "deflated": how the coarse correction joins the blocks, :meth:`preconditioner`),
    ``blas_threads`` (the BLAS's threads for the Gram matrices and the factors, as
    :class:`helmpinn.LevenbergMarquardt`'s: "auto", None or an int; CG runs with one BLAS
    thread whatever this says: its block solves alternate with the engine's products, and run on
    the engine's own OpenMP threads, against which idle BLAS threads would spin), ``cg_warm`` (True, default: CG
    may start from the last step where it went as predicted, module docstring; False: from zero),
    ``varpro`` (True: the output layers projected before each step, module docstring; needs
    ``coarse="last_layer"`` and the core's products), ``lam_after_new_points`` ("restore",
    default: the first step accepted after :meth:`set_residuals` returns λ to at most its value
    before the new points, module docstring; "keep": λ as the damping rule leaves it),
    ``backtrack`` (:data:`BACKTRACK`: the halvings of a rejected trial's step tried before λ
    grows, module docstring; 0: none), ``cg_tol_on`` ("points", default: with mode rows, CG's
    tolerance relative to the point rows' share of Jᵀr where smaller, module docstring; "all":
    to the whole Jᵀr; the same without mode rows).
    """

    def __init__(self, residuals: Any, *, lam: float = 1e-3, damping: str = "marquardt",
                 lam_min: float = 1e-15, lam_max: float = 1e12, max_trials: int = 10,
                 cg_tol: float = 1e-3, cg_maxiter: int = 200, coarse: str | None = "last_layer",
                 products: str = "core32", geodesic: bool = False, geodesic_h: float = 0.1,
                 geodesic_alpha: float = 0.75, gram: str = "float32", two_level: str = "additive",
                 blas_threads: int | str | None = "auto", update: str = "nielsen", cg_warm: bool = True,
                 varpro: bool = False, lam_after_new_points: str = "restore", backtrack: int = BACKTRACK,
                 cg_tol_on: str = "points"):
        self.set_damping(lam=lam, lam_min=lam_min, lam_max=lam_max, update=update, max_trials=max_trials,
                         geodesic=geodesic, geodesic_h=geodesic_h, geodesic_alpha=geodesic_alpha, backtrack=backtrack)
        if damping not in DAMPINGS:
            raise ValueError(f"damping: expected one of {', '.join(map(repr, DAMPINGS))}, got {damping!r}")
        if not 0 < cg_tol < 1:
            raise ValueError(f"cg_tol: expected a number in (0, 1), got {cg_tol}")
        if int(cg_maxiter) < 1:
            raise ValueError(f"cg_maxiter: expected an integer >= 1, got {cg_maxiter}")
        if coarse not in (None, "last_layer"):
            raise ValueError(f"coarse: expected None or 'last_layer', got {coarse!r}")
        if two_level not in ("additive", "deflated"):
            raise ValueError(f"two_level: expected 'additive' or 'deflated', got {two_level!r}")
        self.two_level = two_level
        if not isinstance(cg_warm, (bool, np.bool_)):
            raise ValueError(f"cg_warm: expected True or False, got {cg_warm!r}")
        self.cg_warm = bool(cg_warm)
        if not isinstance(varpro, (bool, np.bool_)):
            raise ValueError(f"varpro: expected True or False, got {varpro!r}")
        if varpro and (coarse is None or products == "blocks"):
            raise ValueError("varpro: needs coarse='last_layer' (its matrix is the output layers' system) and "
                             f"the core's products (kept blocks would be stale after it), got coarse={coarse!r}, "
                             f"products={products!r}")
        self.varpro = bool(varpro)
        if lam_after_new_points not in ("restore", "keep"):
            raise ValueError(f"lam_after_new_points: expected 'restore' or 'keep', got {lam_after_new_points!r}")
        self.lam_after_new_points = lam_after_new_points
        if cg_tol_on not in ("points", "all"):
            raise ValueError(f"cg_tol_on: expected 'points' or 'all', got {cg_tol_on!r}")
        self.cg_tol_on = cg_tol_on
        self._lam_before_new_points: float | None = None   # λ when the points last changed
        self._warm: NDArray | None = None   # CG's next start (cg_warm): the last well-predicted step
        if gram not in ("float32", "float64"):
            raise ValueError(f"gram: expected 'float32' or 'float64', got {gram!r}")
        self.gram = gram
        self.blas_threads = check_blas_threads(blas_threads)
        if products not in ("core", "core32", "blocks"):
            raise ValueError(f"products: expected 'core', 'core32' or 'blocks', got {products!r}")
        self.damping = damping
        self.cg_tol, self.cg_maxiter = float(cg_tol), int(cg_maxiter)
        self.coarse, self.products = coarse, products
        self._lam_relative = damping == "identity"
        self.sparse_coarse_above = SPARSE_COARSE_ABOVE   # (an attribute, for tests)
        self.varpro_max_fall = VARPRO_MAX_FALL            # (an attribute, for tests)
        self.steps = 0
        self.start_scale = 0.0   # the last cg()'s scale of its start (0: it started from zero)
        self.res = None
        self.set_residuals(residuals)

    # -- state ---------------------------------------------------------------------------------
    def set_residuals(self, residuals: Any) -> None:
        """Use new residuals (new points) from the next step on; the first step accepted on
        them returns λ to at most its value now (``lam_after_new_points="restore"``)."""
        if self.res is not None and self.lam_after_new_points == "restore":
            self._lam_before_new_points = self.lam
        if getattr(residuals, "num_modes", 0) and (self.two_level == "deflated" or self.varpro):
            raise ValueError("residuals: mode rows (modes=) go with the additive preconditioner and without varpro "
                             f"(their low-rank term is added to it by Woodbury's identity), got "
                             f"two_level={self.two_level!r}, varpro={self.varpro}")
        self.res = residuals
        self._next: tuple[bytes, NDArray] | None = None
        self._coarse = _CoarseSpace(residuals) if self.coarse else None

    def state_dict(self) -> dict[str, Any]:
        """λ, ν, the steps taken, and with ``cg_warm`` CG's next start (the whole vector, alike on
        every rank), so that a resumed run takes the uninterrupted one's steps."""
        state = {"gn_lambda": self.lam, "gn_nu": self.nu, "gn_steps": self.steps, "gn_lam_relative": self._lam_relative}
        if self._lam_before_new_points is not None:
            state["gn_lambda_before_new_points"] = self._lam_before_new_points
        if self._warm is not None:
            state["gn_warm"] = self._warm
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        lam = float(state["gn_lambda"])
        if not (math.isfinite(lam) and lam > 0):
            raise ValueError(f"state: gn_lambda must be positive and finite, got {lam}")
        self.lam = min(max(lam, self.lam_min), self.lam_max)
        self.steps = int(state.get("gn_steps", 0))
        self.nu = float(state.get("gn_nu", 2.0))
        self._lam_relative = bool(state.get("gn_lam_relative", False))
        before = state.get("gn_lambda_before_new_points")
        if before is not None and not (math.isfinite(float(before)) and float(before) > 0):
            raise ValueError(f"state: gn_lambda_before_new_points must be positive and finite, got {before}")
        self._lam_before_new_points = None if before is None else float(before)
        warm = state.get("gn_warm")
        if warm is not None:
            warm = np.array(warm, np.float64)
            if warm.shape != (self.res.num_params,) or not np.all(np.isfinite(warm)):
                raise ValueError(f"state: gn_warm must be {self.res.num_params} finite numbers, got shape {warm.shape}")
        self._warm = warm

    # -- pieces --------------------------------------------------------------------------------
    def _jvp(self, s: Linearization, v: NDArray, dtype: str = "float64") -> NDArray:
        if self.products == "blocks":
            out = np.zeros(self.res.num_points)
            for j, J in s.blocks.items():
                p = self.res.parts[j]
                if len(J):
                    out[p["rows"]] += J @ v[p["slice"]]
            return self.res.extend(self.res.allsum(out))
        return self.res.jvp(s.theta, v, dtype)

    def _vjp(self, s: Linearization, w: NDArray, dtype: str = "float64") -> NDArray:
        if self.products == "blocks":
            w = self.res.fold(w)
            out = np.zeros(self.res.num_params)
            for j, J in s.blocks.items():
                p = self.res.parts[j]
                if len(J):
                    out[p["slice"]] = J.T @ w[p["rows"]]
            return out
        return self.res.vjp(s.theta, w, dtype)

    def linearize(self, theta: NDArray, times: dict[str, float]) -> Linearization:
        """r, the blocks' Gram matrices, diag(JᵀJ), Jᵀr and the coarse Gram matrix at θ."""
        res = self.res
        t0 = time.perf_counter()
        if self._next is not None and self._next[0] == theta.tobytes():
            r = self._next[1]
        else:
            r = res.residuals(theta)
        keep = self.products == "blocks"
        index = None if self._coarse is None else self._coarse.index
        grams, blocks, zcols, U = _jacobian_blocks(res, theta, self.gram, keep, index, times)
        diag = np.zeros(res.num_params)
        for j, G in grams.items():
            diag[res.parts[j]["slice"]] = np.diag(G)
        res.gather(diag)   # the point rows' diagonal: D leaves the mode rows out (module docstring)
        s = Linearization(theta, r, grams, diag, blocks if keep else None, U)
        s.g = self._vjp(s, r)
        # CG's tolerance relative to the point rows' share of Jᵀr where it is smaller (module docstring)
        if U is not None and self.cg_tol_on == "points":
            gp = s.g - U.matvec(r[res.num_points:])
            s.g_scale = math.sqrt(res.dot(gp, gp))
        if self._coarse is not None:
            t1 = time.perf_counter()
            s.coarse = self._coarse.gram(zcols, self.sparse_coarse_above)
            times["gram"] += time.perf_counter() - t1
        times["jacobian"] += time.perf_counter() - t0 - times["gram"]
        return s

    def _D(self, s: Linearization) -> NDArray:
        if self.damping == "identity":
            return np.ones(self.res.num_params)
        d = s.diag
        if self.damping == "geometric":   # Marquardt's D and the identity (at the mean), halfway
            d = np.sqrt(d * float(np.mean(d)))
        return np.maximum(d, 1e-12 * float(d.max()) if d.max() > 0 else 1.0)

    def _normal(self, s: Linearization, lam: float, D: NDArray) -> Callable[[NDArray], tuple[NDArray, NDArray]]:
        """``p ↦ (J p, (JᵀJ + λD) p)`` at the linearisation s."""
        dt = "float32" if self.products == "core32" else "float64"

        def normal(p: NDArray) -> tuple[NDArray, NDArray]:
            Jp = self._jvp(s, p, dt)
            return Jp, self._vjp(s, Jp, dt) + lam * D * p
        return normal

    def preconditioner(self, s: Linearization, lam: float, D: NDArray) -> Callable[[NDArray], NDArray]:
        """The two-level Schwarz preconditioner for ``A = JᵀJ + λD`` at the linearisation s:
        ``M v + Q v`` (``two_level="additive"``) or ``(I − QA) M v + Q v`` ("deflated"), with M the
        subdomain blocks' solves and ``Q = Z (ZᵀAZ)⁻¹ Zᵀ`` the coarse correction. A deflated
        preconditioner carries Q as its ``deflate`` attribute (:meth:`cg` starts from ``Q b``).
        With mode rows the additive one has their term added (:func:`~helmpinn.optim.low_rank.woodbury`,
        ``W = M U`` by blocks: the blocks' solves of U's blocks and the coarse correction's rows)."""
        res = self.res
        with distributed.collective(res.comm, "factoring the preconditioner"):
            local = _BlockSolves([(res.parts[j]["slice"], _cholesky(G, self.gram, lam * D[res.parts[j]["slice"]]))
                                   for j, G in s.grams.items()])
            coarse = self._coarse.factor(s.coarse, lam * D[s.coarse[1]]) if s.coarse is not None else None

        def coarse_into(y: NDArray, v: NDArray) -> NDArray:   # y + Q v, in place
            _, own_idx, lo, hi, _, _ = coarse
            y[own_idx] += self._coarse.solve(coarse, v[own_idx])[lo:hi]
            return y

        def Q(v: NDArray) -> NDArray:
            return coarse_into(np.zeros_like(v), v)

        if coarse is not None and self.two_level == "deflated":   # (no mode rows: set_residuals)
            normal = self._normal(s, lam, D)

            def deflated(v: NDArray) -> NDArray:
                y = local(v)
                return y + Q(v - normal(y)[1])
            deflated.deflate = Q   # type: ignore[attr-defined]
            return deflated

        def additive(v: NDArray) -> NDArray:
            return coarse_into(local(v), v)
        M = local if coarse is None else additive
        # the mode rows' term UUᵀ of JᵀJ added to M by Woodbury's identity
        return M if s.U is None else woodbury(M, s.U, _additive_columns(s.U, local, self._coarse, coarse), res.sum_ranks)

    def cg(self, s: Linearization, lam: float, D: NDArray, rhs: NDArray,
           precond: Callable[[NDArray], NDArray], start: NDArray | None = None,
           scale: float | None = None) -> tuple[NDArray, NDArray, int]:
        """Preconditioned CG on ``(JᵀJ + λD) x = rhs``: ``(x, J x, iterations)``
        (:func:`helmpinn.optim.lm.pcg`). With a deflated preconditioner CG starts from ``x0 = Q rhs``
        (whose residual has no coarse component, which the iterations then keep); given a
        ``start`` (the warm start, additive only) from ``x0 = α start`` with α the minimiser of
        the quadratic model along it, ``startᵀrhs / startᵀA start`` (from zero when α <= 0; its
        sign is known before the product that gives the denominator, which is then not spent).
        Either way CG stops at the same ``cg_tol ‖rhs‖``, or ``cg_tol scale`` where a ``scale``
        is given and smaller (the point rows' share of Jᵀr, module docstring); each of its
        iterations costs two products, a start taken one more."""
        normal = self._normal(s, lam, D)
        dot = self.res.dot
        Q = getattr(precond, "deflate", None)
        self.start_scale = 0.0
        ref = math.sqrt(dot(rhs, rhs))   # what cg_tol is relative to
        ref = ref if scale is None else min(ref, scale)
        xb = dot(start, rhs) if start is not None and Q is None else 0.0   # α's numerator
        if Q is not None:
            x0 = Q(rhs)
            Jx0, Ax0 = normal(x0)
        elif xb > 0:   # else α <= 0: no product spent on the start
            Jx0, Ax0 = normal(start)
            xAx = dot(start, Ax0)
            alpha = xb / xAx if xAx > 0 else 0.0
            x0, Jx0, Ax0 = alpha * start, alpha * Jx0, alpha * Ax0
            self.start_scale = alpha
        else:
            return pcg(normal, rhs, self.res.num_residuals, precond, self.cg_tol, self.cg_maxiter, dot=dot, ref=ref)
        b = rhs - Ax0
        nb = math.sqrt(dot(b, b))
        if not nb > 0:
            return x0, Jx0, 0
        y, Jy, it = pcg(normal, b, self.res.num_residuals, precond, self.cg_tol, self.cg_maxiter, dot=dot, ref=ref)
        return x0 + y, Jx0 + Jy, it

    def direction(self, theta: NDArray, lam: float | None = None) -> tuple[NDArray, int]:
        """The step δ of ``(JᵀJ + λD) δ = Jᵀr`` at θ (default: the current λ, absolute) and the
        CG iterations it took; nothing changes."""
        times = {"jacobian": 0.0, "gram": 0.0}
        lam = self.lam if lam is None else float(lam)
        with blas_limit(self.blas_threads):   # the BLAS threads as in step
            s = self.linearize(np.ascontiguousarray(theta, np.float64), times)
            D = self._D(s)
            M = self.preconditioner(s, lam, D)
        with blas_limit(1):
            delta, _, it = self.cg(s, lam, D, s.g, M, scale=s.g_scale)
        return self.res.gather(delta), it

    # -- one iteration -------------------------------------------------------------------------
    def step(self, theta: NDArray) -> StepRecord:
        """One LM iteration in place on ``theta`` (the model's float64 params):
        :meth:`~helmpinn.optim.damped.Damped.trials` on the linearisation at ``theta`` (after
        ``varpro``'s projection, if taken), a rejected warm-started trial followed by one from
        zero at the same λ. The record adds ``cg_iterations``, ``terms`` and ``projected``; its
        ``times`` holds the seconds in "jacobian", "gram", "factor", "cg" and "trial".
        :class:`~helmpinn.optim.damped.NonFiniteLoss` when the loss or diag(JᵀJ) at ``theta`` is
        not finite."""
        if theta.ndim != 1 or theta.shape != (self.res.num_params,) or theta.dtype != np.float64:
            raise ValueError(f"theta: expected a float64 vector of {self.res.num_params} parameters, "
                             f"got {theta.dtype} {theta.shape}")
        times = {"jacobian": 0.0, "gram": 0.0, "factor": 0.0, "cg": 0.0, "trial": 0.0}
        self.steps += 1
        # the BLAS on one thread wherever the step does not ask for more: a dot product or matrix
        # product left at the BLAS's own count (OpenBLAS reads OMP_NUM_THREADS) would sum in
        # another order on another thread count; with blas_threads=1 a step is the same for any
        with blas_limit(1):
            return self._step(theta, times)

    def _step(self, theta: NDArray, times: dict[str, float]) -> StepRecord:
        with blas_limit(self.blas_threads):
            s = self.linearize(theta, times)
        loss0, = self.res.same(float(s.r @ s.r))
        if not math.isfinite(loss0) or not np.all(np.isfinite(s.diag)):
            raise NonFiniteLoss(f"non-finite loss or Jacobian at the current parameters (loss {loss0})")
        if self._lam_relative:
            self.lam = min(max(self.lam * max(float(np.mean(s.diag)), 1e-300), self.lam_min), self.lam_max)
            self._lam_relative = False
        with blas_limit(self.blas_threads):   # the coarse factor, as the preconditioner's
            projected = self._project(theta, s, loss0) if self.varpro else None
        system = _Trials(self, s, self._D(s), loss0 if projected is None else projected, times)
        record = self.trials(system, theta, times)
        record.loss0, record.projected, record.cg_iterations = loss0, projected, system.its
        record.terms = self.res.term_losses(record.residuals)
        if record.accepted:
            if self._lam_before_new_points is not None:   # the first step accepted on new points
                self.lam = record.lam = min(self.lam, max(self._lam_before_new_points, self.lam_min))
                self._lam_before_new_points = None
            self._next = (theta.tobytes(), record.residuals)
        return record

    def _project(self, theta: NDArray, s: Linearization, loss0: float) -> float | None:
        """``varpro``: the output layers z set to their least-squares values for the current
        hidden layers, ``z ← z − (J_ZᵀJ_Z + εI_diag)⁻¹ J_Zᵀ r`` (the coarse matrix of the
        linearisation s, ε = :data:`VARPRO_RIDGE` of its diagonal; the residuals are linear in
        z, so the new residuals are exact), in place on ``theta``, with s's residuals and
        gradient updated; the new loss, or None (``theta`` untouched) where the loss would not
        fall or would fall more than ``varpro_max_fall`` (:data:`VARPRO_MAX_FALL`) times. The Gram blocks stay those
        of the linearisation: they only precondition."""
        Gc, idx = s.coarse
        d = np.asarray(Gc.diagonal() if _sparse().issparse(Gc) else np.diag(Gc), np.float64)
        ridge = VARPRO_RIDGE * np.maximum(d, 1e-300)
        with distributed.collective(self.res.comm, "factoring the output layers' system"):
            coarse = self._coarse.factor(s.coarse, ridge)
        dz = self._coarse.solve(coarse, s.g[coarse[1]])
        new = theta.copy()
        new[idx] -= dz
        r1 = self.res.residuals(new)
        loss1, = self.res.same(float(r1 @ r1))
        if not (math.isfinite(loss1) and loss0 / self.varpro_max_fall <= loss1 < loss0):
            return None
        theta[...] = new
        s.r, s.g = r1, self._vjp(s, r1)
        self._next = (theta.tobytes(), r1)
        return loss1



class _CoarseSpace:
    """The coarse level of :class:`MatrixFreeGN`'s preconditioner for one set of residuals
    ``res``: every subdomain's output layer (``index``: per part, the positions of its output
    layer's parameters within its block), the coarse matrix ``J_ZᵀJ_Z`` assembled over the
    subdomains' overlaps (:meth:`gram`), factored (:meth:`factor`) and solved (:meth:`solve`),
    over several ranks each rank holding its own subdomains' block rows."""

    def __init__(self, res: Any):
        self.res = res
        self._pairs: list[tuple[int, int, NDArray, NDArray]] | None = None   # (pairs)
        self.index = self._last_layer()

    def _last_layer(self) -> list[NDArray]:
        """Per part, the positions of its output layer's parameters within its block."""
        out = []
        model = self.res.model
        for p in self.res.parts:
            spec = model.specs[p["level"]]
            L = spec.num_hidden_layers
            pos = [np.arange(off, off + int(np.prod(shape))) for name, shape, off in spec.layout()
                   if name in (f"W{L}", f"b{L}")]
            out.append(np.concatenate(pos))
        return out

    def offsets(self) -> NDArray:
        """Where each part's output-layer parameters start in the coarse vector (and the end)."""
        return np.concatenate([[0], np.cumsum([len(z) for z in self.index])]).astype(np.int64)

    def gram(self, zcols: Mapping[int, NDArray], sparse_above: int) -> tuple[Any, NDArray]:
        """``(Gc, idx)``: ``J_Zᵀ J_Z`` over the output layers' columns ``idx`` (global), from each
        block's columns ``zcols[j]`` (its rows after Green's carriers) summed over the point rows
        the blocks share (:meth:`pairs`): a dense array, or
        above ``sparse_above`` coarse unknowns a sparse CSC matrix (a subdomain's
        block row holds only its neighbours). Over several ranks each rank fills the block rows
        of its own subdomains (the columns of another rank's subdomain restricted to the shared
        rows come by one ``alltoall``) and the rows are gathered whole on every rank (the dense
        rows by one ``Allgatherv``, the sparse blocks by one ``allgather``)."""
        res = self.res
        zi = self.index
        offs = self.offsets()
        pairs = self.pairs()
        halo: dict[tuple[int, int], NDArray] = {}
        if res.comm is not None:
            send: list[dict] = [{} for _ in range(res.size)]
            for q, (i, j, pi, pj) in enumerate(pairs):
                oi, oj = int(res.owner[i]), int(res.owner[j])
                if oi != oj and oi == res.rank:
                    send[oj][(q, 0)] = zcols[i][_rows(pi)]
                if oi != oj and oj == res.rank:
                    send[oi][(q, 1)] = zcols[j][_rows(pj)]
            for got in res.comm.alltoall(send):
                halo.update(got)
        n = int(offs[-1])
        blocks = []   # (row offset, column offset, block) of this rank's block rows
        for q, (i, j, pi, pj) in enumerate(pairs):
            own_i, own_j = res.parts[i]["own"], res.parts[j]["own"]
            if not (own_i or own_j):
                continue
            Zi = zcols[i][_rows(pi)] if own_i else halo[(q, 0)]
            Zj = zcols[j][_rows(pj)] if own_j else halo[(q, 1)]
            B = Zi.T @ Zj
            if own_i:
                blocks.append((offs[i], offs[j], B))
            if own_j and i != j:
                blocks.append((offs[j], offs[i], B.T))
        if n > sparse_above:
            if res.comm is not None:   # every rank's blocks, on every rank (a few per subdomain)
                blocks = [b for got in res.comm.allgather(blocks) for b in got]
            Gc = _sparse_blocks(blocks, n)
        else:
            Gc = np.zeros((n, n))
            for r0, c0, B in blocks:
                Gc[r0:r0 + B.shape[0], c0:c0 + B.shape[1]] += B
            if res.comm is not None:
                from mpi4py import MPI
                ranges = self.ranges()
                res.comm.Allgatherv(MPI.IN_PLACE, [Gc, (ranges[:, 1] - ranges[:, 0]) * n, ranges[:, 0] * n,
                                                   MPI.DOUBLE])
        idx = np.concatenate([p["slice"].start + z for p, z in zip(res.parts, zi)])
        return Gc, idx

    def pairs(self) -> list[tuple[int, int, NDArray, NDArray]]:
        """The parts' overlaps (:meth:`~helmpinn.models.decomposition.DecomposedResiduals.overlaps`)
        without the carriers of Green's mode rows (each part's first ``counted / 2`` points), which
        the coarse matrix leaves out as the blocks' Gram matrices do (their own ``JᵀJ`` is 1e-16
        of the rest; in 3-D they are most of the shared rows), the positions counted from each
        part's first point after them (the rows of ``zcols``); pairs left with no shared point
        dropped. Found once per residuals (alike on every rank)."""
        if self._pairs is None:
            parts, out = self.res.parts, []
            for i, j, pi, pj in self.res.overlaps():
                ci, cj = parts[i]["counted"] // 2, parts[j]["counted"] // 2
                keep = pi >= ci   # a carrier in one part is one in the other
                if keep.any():
                    out.append((i, j, pi[keep] - ci, pj[keep] - cj))
            self._pairs = out
        return self._pairs

    def ranges(self) -> NDArray:
        """``[ranks, 2]``: each rank's range of the coarse vector (its subdomains' output layers)."""
        offs, res = self.offsets(), self.res
        out = np.zeros((res.size, 2), np.int64)
        for k in range(res.size):
            mine = np.nonzero(res.owner == k)[0]
            if len(mine):
                out[k] = (offs[mine[0]], offs[mine[-1] + 1])
        return out

    def factor(self, coarse: tuple[Any, NDArray], shift: NDArray) -> tuple:
        """The coarse matrix ``J_ZᵀJ_Z + diag(shift)`` (``coarse``: ``(Gc, idx)`` of a linearisation) factored (whole on
        every rank), with this rank's output-layer positions, its range ``lo:hi`` of the coarse
        vector, every rank's ranges and the coarse dimension (what each solve needs, found once)."""
        Gc, idx = coarse
        ranges = self.ranges()
        lo, hi = (int(e) for e in ranges[self.res.rank])
        shifted = (Gc + _sparse().diags(shift)).tocsc() if _sparse().issparse(Gc) else Gc + np.diag(shift)
        return _factor(shifted), idx[lo:hi], lo, hi, ranges, len(idx)

    def solve(self, coarse: tuple, own: NDArray) -> NDArray:
        """The coarse system's solution for the output-layer components ``own`` of a vector
        (``v[own_idx]``: this rank's own range; one ``Allgatherv`` over several ranks): the whole
        coarse vector, alike on every rank; for a 2-D ``own`` [m, k] the k columns' at once
        ([n, k])."""
        solve, own_idx, lo, hi, ranges, n = coarse
        vc = np.zeros((n,) + own.shape[1:])
        vc[lo:hi] = own
        if self.res.comm is not None:
            from mpi4py import MPI
            k = int(np.prod(own.shape[1:], dtype=np.int64))   # the rows of vc are contiguous
            self.res.comm.Allgatherv(MPI.IN_PLACE, [vc, (ranges[:, 1] - ranges[:, 0]) * k, ranges[:, 0] * k,
                                                    MPI.DOUBLE])
        return solve(vc)


def _rows(points: NDArray) -> NDArray:
    """The (re, im) residual rows of points at positions ``points`` of a part."""
    return np.stack([2 * points, 2 * points + 1], 1).ravel()


class _Trials:
    """Gauss-Newton's side of the damped step (:class:`~helmpinn.optim.damped.LinearSolve`): CG
    on the linearisation ``s`` with the two-level preconditioner, factored once per λ (with the
    optimiser's BLAS threads; CG, its products and the trials' residuals with one), and
    warm-started from the last well-predicted step; the CG iterations per trial in ``its``."""

    def __init__(self, gn: MatrixFreeGN, s: Linearization, D: NDArray, loss: float, times: dict[str, float]):
        self.gn, self.s, self.D, self.loss, self.times = gn, s, D, loss, times
        self.r = s.r
        self.its: list[int] = []
        self.M: Callable[[NDArray], NDArray] | None = None
        self.M_lam: float | None = None

    def solve(self, lam: float) -> Direction:
        gn, s, D, r = self.gn, self.s, self.D, self.r
        t0 = time.perf_counter()
        if self.M_lam != lam:   # a retry from zero after a failed start keeps λ and the factors
            with blas_limit(gn.blas_threads):
                self.M, self.M_lam = gn.preconditioner(s, lam, D), lam
        t1 = time.perf_counter()
        self.times["factor"] += t1 - t0
        with blas_limit(1):   # the solves alternate with the engine's products: no BLAS threads spinning
            delta, Jd, it = gn.cg(s, lam, D, s.g, self.M, gn._warm if gn.cg_warm else None, scale=s.g_scale)
        warm_started = gn.start_scale > 0
        self.its.append(it)
        self.times["cg"] += time.perf_counter() - t1
        pred, = gn.res.same(self.loss - float((r - Jd) @ (r - Jd)))

        def again(w: NDArray) -> NDArray:
            acc, _, it = gn.cg(s, lam, D, gn._vjp(s, w), self.M)
            self.its[-1] += it
            return acc

        def shortened(alpha: float) -> float:
            rs = r - alpha * Jd
            return gn.res.same(self.loss - float(rs @ rs))[0]
        return Direction(delta, pred, again, shortened, retry=warm_started)

    def residuals(self, x: NDArray) -> NDArray:
        return self.gn.res.residuals(x)

    def total(self, r: NDArray) -> float:
        return self.gn.res.same(float(r @ r))[0]

    def dot(self, a: NDArray, b: NDArray) -> float:
        return self.gn.res.dot(a, b)

    def limit(self) -> contextlib.AbstractContextManager:
        return blas_limit(1)

    def place(self, theta: NDArray, x: NDArray) -> None:
        theta[...] = self.gn.res.gather(x)

    def tried(self, delta: NDArray, accepted: bool, rho: float) -> None:
        # CG's next start: this step, where the linear model predicted it well enough; whole on
        # every rank (a collective: every rank steps)
        gn = self.gn
        gn._warm = gn.res.gather(delta.copy()) if gn.cg_warm and accepted and rho >= WARM_RHO else None
