"""A classical reference solver: finite differences on a regular grid, solved by a sparse LU.

:func:`fd_solve` discretises the same equation a :class:`~helmpinn.Problem` poses to the network,

    Σ_j a_j ∂²u/∂x_j² + Σ_j b_j ∂u/∂x_j + κ u = f,

with the problem's own coefficients (``a``, ``b`` from its PML and density through
:meth:`Problem.operator_at`, ``a = 1, b = 0`` without them; κ from :meth:`Problem.kappa_at`;
``f`` from :meth:`Problem.source_at`; with a ``background`` point source, the scattered field
``u − u₀`` that the network solves for, its conditions shifted by u₀), on the nodes of a regular grid over the sampled domain
(the physical box and, with a PML, the layer around it). Derivatives are fourth-order central
differences (five points per direction); the nodes next to the boundary use the fourth-order
one-sided stencils of the same width. Boundary nodes carry the boundary conditions: ``u = 0`` on
a PML's outer wall (the grid spans the layer on its faces only: a face a ``PML(faces=...)``
leaves free, such as a free surface, is a face of the grid with its own condition, ``u = 0``
unless the problem's ``bcs`` says otherwise), ``u = value`` on Dirichlet faces, and ``∂u/∂n + α u = g`` on Robin faces
(Neumann, Sommerfeld) with a fourth-order one-sided derivative. The linear system is solved by
SciPy's sparse LU (SuperLU).

It is meant for validation: comparing a trained network with a classical solution of the same
problem (the PML and media included), and checking problems without an exact solution. The error
of the discretisation falls as h⁴ (tests/test_fd_reference.py checks the order on a plane wave,
a standing wave and a point source in a PML). With a PML of the default profile power 2 the
coefficients have a kink at the layer's inner edge (σ″ jumps) and the convergence there falls to
about second order; ``PML(width, power=4)`` keeps it fourth order. A medium whose κ jumps (an
inclusion, a layer boundary: :func:`helmpinn.problems.jumps.find_jumps` on the grid) makes κ sampled at
the nodes place the interface only to within a node, first order; by default (``jumps="average"``)
κ at the nodes whose stencil reaches the jump is the average of κ under the kernel the stencil
applies to u″ (:func:`helmpinn.problems.jumps.average_kappa`), second order or better there (a
:class:`MediumJumpWarning` says so; the measurements in docs/guide/reference-solver.md). Sources must be resolved by the grid (a Gaussian of
width s needs h well below s). Cost: one sparse LU of a matrix with N = Π (n_j + 1) rows and
about 4d + 1 entries per row, factorised with :data:`DEFAULT_ORDERING`; measured on 2 shared cores,
a 201² grid factorises in about 2 s and a 401² grid in about 35 s (0.9 GB), a 25³ grid in
about 20 s and a 33³ grid in about 150 s (1.5 GB): the 3-D fill limits it to some 30–40 nodes
a side. The memory is estimated before assembly and a grid beyond the memory limit refused
(:func:`helmpinn.memory.check_fd`, also importable here as ``check_memory``: the same limit
as every run's, :func:`helmpinn.memory.limit`, 80% of the memory available or
``HELMPINN_MEMORY_LIMIT``). :class:`FDOperator` keeps the assembled operator for other κ and many
right-hand sides (a survey's sources, the adjoint solves of :func:`~helmpinn.reference.fwi`).

Domains: :class:`~helmpinn.problems.geometry.Box` and :class:`~helmpinn.problems.geometry.Interval` (with or without
a PML), and a box with an obstacle removed (:class:`~helmpinn.problems.geometry.BoxMinusObstacle`:
a ball, a polygon, another shape): sound-soft (Dirichlet data on ``"scatterer"``) by cut stencils
of the same order, sound-hard (Neumann, or Robin) by ghost nodes, fourth order on smooth
boundaries (:mod:`helmpinn.reference.obstacle`); point clouds are not supported.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..problems.geometry import Box, BoxMinusObstacle
from ..problems.jumps import average_kappa, find_jumps
from ..problems import Dirichlet, Robin
from .._checks import finite_at_points
from .obstacle import ObstacleGrid
# The grid's memory estimate is helmpinn.memory's (the one limit of every kind of run); these
# names stay importable from here.
from .._budget import (ASSEMBLY_BYTES_PER_NODE, LU_BYTES_PER_ENTRY, available_memory, fd_memory_estimate,
                      lu_fill)
from .._budget import check_fd as check_memory

__all__ = ["fd_solve", "FDSolution", "FDOperator", "FDFactor", "MediumJumpWarning", "stencil_weights", "fd_memory_estimate",
           "check_memory", "available_memory", "lu_fill"]


def stencil_weights(offsets: ArrayLike, derivative: int) -> NDArray[np.float64]:
    """Weights ``w`` with ``Σ_k w_k u(x + o_k h) ≈ h^derivative u^(derivative)(x)``, exact for
    polynomials of degree ``len(offsets) - 1`` (a Vandermonde solve; the offsets are small
    integers, so it is exact to rounding)."""
    o = np.asarray(offsets, dtype=np.float64)
    n = len(o)
    if not 0 <= derivative < n:
        raise ValueError(f"need 0 <= derivative < len(offsets), got {derivative} and {n}")
    vander = np.vander(o, n, increasing=True).T  # row p: o^p
    rhs = np.zeros(n)
    rhs[derivative] = math.factorial(derivative)
    return np.linalg.solve(vander, rhs)


# Fourth-order stencils: (offsets, weights) for the first and second derivative, centred and at
# the node next to the lower boundary (mirrored at the upper one).
_CENTRED = np.arange(-2, 3)
_NEAR = np.arange(-1, 5)          # node 1: nodes 0..5
_WALL = np.arange(0, 5)           # node 0 (one-sided first derivative for Robin faces)


def _stencils(order: int) -> dict[str, tuple[NDArray, NDArray]]:
    if order == 2:
        c = np.arange(-1, 2)
        return {"d1": (c, stencil_weights(c, 1)), "d2": (c, stencil_weights(c, 2)),
                "d1_near": (c, stencil_weights(c, 1)), "d2_near": (c, stencil_weights(c, 2)),
                "wall": (np.arange(0, 3), stencil_weights(np.arange(0, 3), 1))}
    return {"d1": (_CENTRED, stencil_weights(_CENTRED, 1)),
            "d2": (_CENTRED, stencil_weights(_CENTRED, 2)),
            "d1_near": (_NEAR[:-1], stencil_weights(_NEAR[:-1], 1)),
            "d2_near": (_NEAR, stencil_weights(_NEAR, 2)),
            "wall": (_WALL, stencil_weights(_WALL, 1))}


@dataclass
class FDSolution:
    """The finite-difference solution: ``values`` (complex, the grid's shape) at the nodes
    ``axes[0] x axes[1] x ...`` (``indexing="ij"``), with spacing ``h`` per direction.
    Calling it interpolates (cubic, per real and imaginary part) at points ``x [N, d]``."""

    axes: list[NDArray[np.float64]]
    values: NDArray[np.complex128]
    h: NDArray[np.float64]
    order: int

    @property
    def points(self) -> NDArray[np.float64]:
        """Every node, ``[N, d]`` in the order of ``values.ravel()``."""
        mesh = np.meshgrid(*self.axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def __call__(self, x: ArrayLike) -> NDArray[np.complex128]:
        x = np.asarray(x, dtype=np.float64).reshape(-1, len(self.axes))
        lo = np.array([a[0] for a in self.axes])
        hi = np.array([a[-1] for a in self.axes])
        tol = 1e-12 * np.max(hi - lo)
        if np.any((x < lo - tol) | (x > hi + tol)):
            raise ValueError("FDSolution: points outside the grid "
                             f"[{lo.tolist()}, {hi.tolist()}]")
        x = np.clip(x, lo, hi)
        return _interpolate(self.axes, self.values, x)


def _interpolate(axes: list[NDArray], values: NDArray, x: NDArray) -> NDArray[np.complex128]:
    """The interpolating tensor-product cubic spline through the nodes (not-a-knot ends; fourth
    order, like the solution) at the points x [N, d], in any dimension: its coefficients by one
    1-D solve per axis (``make_interp_spline`` along it: the tensor product's system separates),
    its value at a point from the ``4^d`` B-splines that do not vanish there (each axis's
    ``BSpline.design_matrix``), a chunk of points at a time."""
    from scipy.interpolate import BSpline, make_interp_spline

    d = len(axes)
    c = np.stack([values.real, values.imag], -1)   # [n_0, ..., n_{d-1}, 2]
    knots = []
    for a, t in enumerate(axes):
        spline = make_interp_spline(t, np.moveaxis(c, a, 0), k=3)
        knots.append(spline.t)
        c = np.moveaxis(spline.c, 0, a)
    out = np.empty(len(x), np.complex128)
    chunk = max(1, (1 << 22) // 4 ** d)
    for lo in range(0, len(x), chunk):
        xs = x[lo:lo + chunk]
        index, weight = [], np.ones((len(xs),) + (1,) * d)
        for a in range(d):   # the 4 B-splines of axis a at each point, broadcast along axis a + 1
            B = BSpline.design_matrix(xs[:, a], knots[a], 3).tocsr()
            shape = (len(xs),) + (1,) * a + (4,) + (1,) * (d - 1 - a)
            index.append(B.indices.reshape(shape))
            weight = weight * B.data.reshape(shape)
        v = (c[tuple(index)] * weight[..., None]).reshape(len(xs), -1, 2).sum(1)
        out[lo:lo + chunk] = v[:, 0] + 1j * v[:, 1]
    return out


def _grid(problem, h: Any) -> tuple[list[NDArray], NDArray, NDArray]:
    domain = problem.sampling_domain
    if not isinstance(domain, (Box, BoxMinusObstacle)):
        raise NotImplementedError(
            f"fd_solve: the domain must be a Box, Interval or BoxMinusObstacle (with or without a PML), "
            f"got {type(domain).__name__}; point clouds are not supported")
    lo, hi = domain.bounds
    d = len(lo)
    try:   # a number, or one per axis
        hs = np.broadcast_to(np.asarray(h, dtype=np.float64), (d,)).astype(np.float64)
    except (ValueError, TypeError):
        raise ValueError(f"fd_solve: h must be a positive number or {d} of them (one per axis), "
                         f"got {h!r}") from None
    if not np.all(np.isfinite(hs) & (hs > 0)):
        raise ValueError(f"fd_solve: h must be positive and finite, got {h!r}")
    intervals = np.ceil((hi - lo) / hs - 1e-9)
    if float(np.prod(intervals + 1)) > 20_000_000:
        raise ValueError(f"fd_solve: h = {h!r} gives {float(np.prod(intervals + 1)):.3g} grid nodes, too "
                         f"many for a sparse direct solve; use a larger h")
    n = intervals.astype(np.int64)
    if np.any(n < 6):
        raise ValueError(f"fd_solve: h = {h!r} leaves fewer than 6 intervals across the domain "
                         f"{lo.tolist()}..{hi.tolist()}; use a smaller h")
    axes = [np.linspace(lo[j], hi[j], n[j] + 1) for j in range(d)]
    return axes, (hi - lo) / n, n


#: The factorisation's default: SuperLU's minimum-degree ordering of A^T + A, symmetric mode
#: (diagonal pivots, threshold 0), the fastest and least fill of SuperLU's orderings on these
#: structurally symmetric matrices (measured: docs/guide/reference-solver.md, "Cost"); a
#: factorisation whose solve leaves a relative residual above :data:`RESIDUAL_TOLERANCE` is
#: redone with "COLAMD" and partial pivoting (SuperLU's general default).
DEFAULT_ORDERING = "MMD_AT_PLUS_A"
_ORDERINGS = ("MMD_AT_PLUS_A", "COLAMD", "MMD_ATA", "NATURAL")
#: The relative residual ‖A u − b‖/‖b‖ a symmetric-mode solve must reach.
RESIDUAL_TOLERANCE = 1e-8


class FDOperator:
    """The finite-difference matrix of a problem's operator on a regular grid, assembled once
    (vectorised: one array operation per stencil entry and direction) so that κ can be changed
    and the matrix refactorised cheaply, and the factorisation reused for many right-hand sides.

    ``FDOperator(problem, h, order=4)`` discretises ``problem`` as :func:`fd_solve` does (see
    the module docstring): its ``a``, ``b`` (PML, density), boundary conditions and, by default,
    its κ and source. :meth:`matrix` / :meth:`factorize` take another κ at the interior nodes
    (``kappa``: a number, ``[n_interior]`` in the order of :attr:`interior_points`, or an array
    of the grid's shape), which changes only the matrix's diagonal: the rest of the assembly,
    the sparsity pattern and the map from stencil entries to matrix slots are kept. Before
    anything is assembled the memory the assembly and the LU's fill need is estimated
    (:func:`fd_memory_estimate`) and a grid that does not fit is refused.
    """

    def __init__(self, problem, h: float | ArrayLike, *, order: int = 4, jumps: str = "average"):
        if order not in (2, 4):
            raise ValueError(f"fd_solve: order must be 2 or 4, got {order!r}")
        if jumps not in JUMP_MODES:
            raise ValueError(f"fd_solve: jumps must be one of {JUMP_MODES}, got {jumps!r}")
        axes, hs, n = _grid(problem, h)
        d = len(axes)
        shape = tuple(int(m) + 1 for m in n)
        check_memory(int(np.prod(shape)), d)
        self.axes, self.h, self.order, self.shape = axes, np.asarray(hs), order, shape
        strides = np.array([int(np.prod(shape[j + 1:])) for j in range(d)], dtype=np.int64)
        idx = np.indices(shape).reshape(d, -1).T            # [N, d] node indices
        x = np.stack([axes[j][idx[:, j]] for j in range(d)], axis=1)
        node = idx @ strides
        on_wall = np.zeros(len(x), bool)
        for j in range(d):
            on_wall |= (idx[:, j] == 0) | (idx[:, j] == n[j])
        interior = ~on_wall
        cut = None
        if isinstance(problem.sampling_domain, BoxMinusObstacle):
            cut = ObstacleGrid(problem, axes, x, on_wall, order, _stencils(order))
            interior &= ~cut.fixed
        self.size = len(x)
        self.interior = interior
        self.interior_points = x[interior]
        self.interior_nodes = node[interior]
        self.boundary_rhs = np.zeros(len(x), np.complex128)
        rows, cols, vals, kappa, f = _pde_rows(problem, x[interior], idx[interior], node[interior],
                                               n, hs, strides, order, cut, self.boundary_rhs)
        self.jumps = _medium_jumps(problem, axes, x, interior, kappa, jumps, order)
        if self.jumps is not None:
            averaged = self.jumps[1]
            if getattr(problem, "background", None) is not None:
                # the scattered field's source f − L u₀ takes the operator's κ: (κ − κ̄) u₀ more
                moved = averaged != kappa
                f = f.copy()
                f[moved] += (kappa[moved] - averaged[moved]) * problem.background_at(x[interior][moved])
            kappa, vals[0] = averaged, averaged.copy()
            self.jumps = self.jumps[0]
        self.kappa = kappa
        if cut is not None:
            cut.fixed_rows(x, rows, cols, vals, self.boundary_rhs)
        _boundary_rows(problem, x[on_wall], idx[on_wall], node[on_wall], n, hs, strides, order,
                       rows, cols, vals, self.boundary_rhs)
        self.source = np.zeros(len(x), np.complex128)
        if f is not None:
            self.source[self.interior_nodes] = f
        self._rows = np.concatenate(rows)
        self._cols = np.concatenate(cols)
        self._vals = np.concatenate([np.asarray(vv, np.complex128) for vv in vals])
        self._n_kappa = len(self.interior_nodes)      # the first entries: the diagonal's κ

    @property
    def points(self) -> NDArray[np.float64]:
        """Every node, ``[N, d]`` in the order of the unknowns."""
        mesh = np.meshgrid(*self.axes, indexing="ij")
        return np.stack([m.ravel() for m in mesh], axis=1)

    def kappa_values(self, kappa: Any = None) -> NDArray[np.complex128]:
        """κ at the interior nodes ``[n_interior]`` (``None``: the problem's), checked finite."""
        if kappa is None:
            k = self.kappa
        else:
            k = np.asarray(kappa, np.complex128)
            if k.shape == self.shape:
                k = k.ravel()[self.interior_nodes]
            k = np.broadcast_to(k, (self._n_kappa,)) if k.ndim == 0 else k
            if k.shape != (self._n_kappa,):
                raise ValueError(f"fd_solve: kappa must be a number, {self._n_kappa} values at the "
                                 f"interior nodes or an array of the grid's shape {self.shape}, "
                                 f"got shape {k.shape}")
        finite_at_points("fd_solve", "kappa", k, self.interior_points, "interior node")
        return k

    def matrix(self, kappa: Any = None):
        """The sparse matrix (CSC, complex) with κ at the interior nodes (default: the problem's)."""
        from scipy.sparse import csc_matrix

        vals = self._vals.copy()
        vals[:self._n_kappa] = self.kappa_values(kappa)
        # SciPy's conversion sums the duplicate entries (a node's κ and its stencils' centres)
        # in its own order; the same call as ever keeps fd_solve's matrix the same to the bit.
        return csc_matrix((vals, (self._rows, self._cols)), shape=(self.size, self.size))

    def factorize(self, kappa: Any = None, *, ordering: str = DEFAULT_ORDERING) -> "FDFactor":
        """SuperLU's factorisation of :meth:`matrix` (``ordering``: the column ordering;
        "MMD_AT_PLUS_A" in symmetric mode, the others with partial pivoting)."""
        if ordering not in _ORDERINGS:
            raise ValueError(f"fd_solve: ordering must be one of {_ORDERINGS}, got {ordering!r}")
        return FDFactor(self.matrix(kappa), ordering)

    def rhs(self, source: Any = None) -> NDArray[np.complex128]:
        """The right-hand side: the boundary data and ``source`` (a callable ``x [N, d] ->
        complex [N]``, e.g. a :class:`~helmpinn.PointSource`, or ``None``: the problem's own) at
        the interior nodes; checked finite."""
        b = self.boundary_rhs.copy()
        if source is None:
            b += self.source
        else:
            f = np.asarray(source(self.interior_points), np.complex128)
            if f.shape != (self._n_kappa,):
                raise ValueError(f"fd_solve: the source returned shape {f.shape}, expected "
                                 f"({self._n_kappa},)")
            b[self.interior_nodes] += f
        finite_at_points("fd_solve", "the right-hand side (source and boundary data)", b, self.points, "node")
        return b

    def solution(self, u: ArrayLike) -> FDSolution:
        """The :class:`FDSolution` of the node values ``u [N]``."""
        return FDSolution(axes=self.axes, values=np.asarray(u).reshape(self.shape), h=self.h,
                          order=self.order)


class FDFactor:
    """A sparse LU of an :class:`FDOperator`'s matrix A: :meth:`solve` for any number of
    right-hand sides, of A or of its conjugate transpose A^H (the adjoint state).

    With the symmetric mode's diagonal pivots (the default ordering) the first solve checks its
    residual; above :data:`RESIDUAL_TOLERANCE` the matrix is factorised again with COLAMD and
    partial pivoting, which every later solve uses."""

    def __init__(self, matrix, ordering: str = DEFAULT_ORDERING):
        self.matrix = matrix
        self.lu, self.ordering = _splu(matrix, ordering)
        self._checked = self.ordering != "MMD_AT_PLUS_A"

    @property
    def fill(self) -> int:
        """The number of stored entries of L and U."""
        return int(self.lu.L.nnz + self.lu.U.nnz)

    def solve(self, rhs: ArrayLike, *, adjoint: bool = False) -> NDArray[np.complex128]:
        """``A⁻¹ rhs`` (``A^{-H} rhs`` when ``adjoint``); rhs ``[N]`` or ``[N, k]``."""
        b = np.asarray(rhs, np.complex128)
        trans = "H" if adjoint else "N"
        u = self.lu.solve(b, trans=trans)
        if not self._checked and np.all(np.isfinite(u)):
            a = self.matrix.conj().T if adjoint else self.matrix
            scale = np.linalg.norm(b)
            if scale > 0 and np.linalg.norm(a @ u - b) > RESIDUAL_TOLERANCE * scale:
                self.lu, self.ordering = _splu(self.matrix, "COLAMD")
                u = self.lu.solve(b, trans=trans)
            self._checked = True
        if not np.all(np.isfinite(u)):
            raise FloatingPointError("fd_solve: the solution is not finite (a singular system: a "
                                     "resonant closed box without damping?)")
        return u


def _splu(matrix, ordering: str):
    """``(SuperLU's LU, the ordering used)``; a zero diagonal pivot in symmetric mode is retried with partial pivoting,
    and a matrix singular to SuperLU is one clear FloatingPointError."""
    from scipy.sparse.linalg import splu

    try:
        if ordering == "MMD_AT_PLUS_A":
            try:
                return splu(matrix, permc_spec=ordering, diag_pivot_thresh=0.0,
                            options={"SymmetricMode": True}), ordering
            except RuntimeError:
                ordering = "COLAMD"
        return splu(matrix, permc_spec=ordering), ordering
    except RuntimeError as exc:
        raise FloatingPointError(f"fd_solve: the matrix is singular ({exc}): a resonant closed "
                                 f"box without damping?") from None


#: What fd_solve does at a jump of κ: "average" (κ averaged with the kernel the stencil applies to
#: u″, :func:`helmpinn.problems.jumps.average_kappa`, at each node whose kernel reaches the jump) or
#: "sample" (κ at the nodes, first order there).
JUMP_MODES = ("average", "sample")


def _medium_jumps(problem, axes, x, interior, kappa, mode, order):
    """The jumps of κ on the grid (:func:`helmpinn.problems.jumps.find_jumps`) and, for "average", κ at
    the interior nodes with the stencil kernel's average where a node's kernel reaches a jump
    (the nodes of the pairs across it and their neighbours); None for a constant κ or no jump.
    Warns once per grid (:class:`MediumJumpWarning`)."""
    if not callable(problem.kappa):
        return None
    shape = tuple(len(a) for a in axes)
    values = np.empty(len(x), np.complex128)
    values[interior] = kappa
    values[~interior] = np.asarray(problem.kappa_at(x[~interior]), np.complex128)
    found = find_jumps(problem.kappa_at, axes, values=values.reshape(shape))
    if not found:
        return None
    where = np.round(found.points[0], 4).tolist()
    if mode == "sample":
        warnings.warn(f"fd_solve: the medium jumps (a relative step up to {found.largest:.2g} across "
                      f"{len(found)} neighbouring node pairs, the first near {where}); with κ sampled at "
                      f"the nodes (jumps='sample') the solution converges at first order there: leave "
                      f"jumps='average' (the default) for second order or better", MediumJumpWarning, stacklevel=4)
        return None
    hs = np.array([a[1] - a[0] for a in axes])
    near = np.zeros(shape, bool)
    # the pair's lower node: its midpoint is half a step above it along the pair's axis
    idx = np.floor((found.points - np.array([a[0] for a in axes])) / hs + 0.25).astype(np.int64)
    for j in range(len(axes)):
        for shift in (0, 1):
            pos = idx.copy()
            pos[found.axis == j, j] += shift
            near[tuple(np.clip(pos, 0, np.array(shape) - 1).T)] = True
    for j in range(len(axes)):   # a support cut only at a corner: one node further in every direction
        grown = near.copy()
        grown[(slice(None),) * j + (slice(1, None),)] |= near[(slice(None),) * j + (slice(None, -1),)]
        grown[(slice(None),) * j + (slice(None, -1),)] |= near[(slice(None),) * j + (slice(1, None),)]
        near = grown
    flag = near.ravel()[interior]
    kappa = kappa.copy()
    lo = np.array([a[0] for a in axes])
    hi = np.array([a[-1] for a in axes])
    kappa[flag] = average_kappa(problem.kappa_at, x[interior][flag], hs, order=order, bounds=(lo, hi))
    warnings.warn(f"fd_solve: the medium jumps (a relative step up to {found.largest:.2g} across "
                  f"{len(found)} neighbouring node pairs, the first near {where}); κ is averaged with "
                  f"the stencil's kernel at the {int(flag.sum())} nodes beside the jump (jumps='average'), "
                  f"which converges there at second order or better where sampling κ at the nodes is "
                  f"first order, but not at fourth order: halve h to check the error",
                  MediumJumpWarning, stacklevel=4)
    return found, kappa


class MediumJumpWarning(UserWarning):
    """fd_solve's warning that the medium jumps, which lowers the order of convergence."""


def _pde_rows(problem, xi, ii, ni, n, hs, strides, order, cut=None, rhs=None):
    """The interior nodes' PDE rows: the κ diagonal first, then each direction's stencils (with
    an obstacle, ``cut``'s stencils where the regular ones would reach into it, their known
    boundary terms subtracted from ``rhs``)."""
    d = xi.shape[1]
    st = _stencils(order)
    rows: list[NDArray] = []
    cols: list[NDArray] = []
    vals: list[NDArray] = []
    if problem.uses_operator:
        a, b = problem.operator_at(xi)
    else:
        a = np.ones((len(xi), d), np.complex128)
        b = np.zeros((len(xi), d), np.complex128)
    kappa = np.broadcast_to(np.asarray(problem.kappa_at(xi), dtype=np.complex128), (len(xi),))
    rows.append(ni)
    cols.append(ni)
    vals.append(kappa.copy())
    f = problem.source_at(xi)
    for j in range(d):
        pos = ii[:, j]
        near_lo, near_hi = pos == 1, pos == n[j] - 1
        central = ~(near_lo | near_hi)
        if cut is not None:
            irregular = cut.cut(j, ni, pos, n[j])
            near_lo, near_hi, central = near_lo & ~irregular, near_hi & ~irregular, central & ~irregular
            cut.stencil(j, xi[irregular], ni[irregular], strides, a[irregular, j], b[irregular, j],
                        rows, cols, vals, rhs)
        for mask, key, flip in ((central, "", 1), (near_lo, "_near", 1), (near_hi, "_near", -1)):
            if not np.any(mask):
                continue
            for deriv, coef, power in (("d2", a[mask, j], 2), ("d1", b[mask, j], 1)):
                offs, w = st[deriv + key]
                for o, wk in zip(offs, w):
                    # Mirroring the stencil at the upper wall flips the first derivative's sign.
                    sign = flip ** power
                    rows.append(ni[mask])
                    cols.append(ni[mask] + flip * int(o) * strides[j])
                    vals.append(sign * wk * coef / hs[j] ** power)
    return rows, cols, vals, kappa.copy(), f


def _boundary_rows(problem, xw, iw, nw, n, hs, strides, order, rows, cols, vals, rhs) -> None:
    """Boundary rows: u = 0 on a PML's wall (the faces with the layer); each other face's
    condition (a face a PML leaves free: ``problem.bcs``, u = 0 by default; Dirichlet wins at
    edges). Appends to rows/cols/vals and writes the boundary data into rhs."""
    d = xw.shape[1]
    st = _stencils(order)
    done = np.zeros(len(xw), bool)
    # With a background u₀ (the scattered-field form) the unknown is u − u₀: its conditions are
    # the total field's shifted by u₀'s values (as Problem.sample shifts them).
    background = getattr(problem, "background", None)
    walls = np.zeros((d, 2), bool) if problem.pml is None else problem.pml.sides(d)
    faces = []
    for j in range(d):
        for side in (0, 1):
            name = problem.domain.part_names[2 * j + side]
            # the PML's wall: u = 0, as Dirichlet(0) (less u₀ with a background)
            faces.append((j, side, Dirichlet(0.0) if walls[j, side] else problem.bcs.get(name), name))
    for want in (Dirichlet, Robin):
        for j, side, bc, name in faces:
            on_face = (iw[:, j] == (n[j] if side else 0)) & ~done
            if not isinstance(bc, want) or not np.any(on_face):
                continue
            at, nodes_f = xw[on_face], nw[on_face]
            if isinstance(bc, Dirichlet):
                rows.append(nodes_f)
                cols.append(nodes_f)
                vals.append(np.ones(len(nodes_f), np.complex128))
                rhs[nodes_f] = bc.values(at) - (0 if background is None else background(at))
            else:
                # ∂u/∂n at the wall: one-sided into the domain; n points outward.
                offs, w = st["wall"]
                direction = -1 if side else 1         # into the domain
                outward = 1.0 if side else -1.0
                alpha = np.broadcast_to(bc.alpha_values(at), (len(at),))
                rows.append(nodes_f)
                cols.append(nodes_f)
                vals.append(alpha.astype(np.complex128))
                for o, wk in zip(offs, w):
                    # d/dx at the wall = direction * Σ w_k u(x + direction*o*h) / h
                    rows.append(nodes_f)
                    cols.append(nodes_f + direction * int(o) * strides[j])
                    vals.append(np.full(len(nodes_f), outward * direction * wk / hs[j],
                                        np.complex128))
                normals = np.zeros((len(at), d))
                normals[:, j] = outward
                g = bc.g_values(at, normals)
                if g is not None:
                    rhs[nodes_f] = g
                if background is not None:
                    rhs[nodes_f] -= (background.gradient(at)[:, j] * outward
                                     + alpha * background(at))
            done |= on_face
    if not np.all(done):
        missing = sorted({name for j, side, bc, name in faces if bc is None})
        raise NotImplementedError(f"fd_solve: boundary parts {missing} have no condition "
                                  f"(free); give each face a Dirichlet or Robin condition")


def fd_solve(problem, h: float | ArrayLike, *, order: int = 4,
             ordering: str = DEFAULT_ORDERING, jumps: str = "average") -> FDSolution:
    """Solve ``problem`` by finite differences of the given ``order`` (4, or 2) on a regular
    grid of spacing about ``h`` (a number, or one per direction; the grid fits the domain
    exactly, so the spacing is ``(hi - lo) / ceil((hi - lo) / h)``). See the module docstring.

    Returns an :class:`FDSolution` over the whole grid (the PML included); compare it with a
    network on the physical domain, e.g. at ``problem.test_points()``. κ and the right-hand side
    are checked finite first (a ValueError names the array and its first bad node); a grid
    whose assembly and factorisation would not fit within the memory limit is refused
    (:func:`helmpinn.memory.check_fd`, a :class:`~helmpinn.memory.MemoryEstimateError`).
    ``ordering``: the factorisation's (:meth:`FDOperator.factorize`; "COLAMD" with partial
    pivoting is SciPy's plain ``splu(A)``). ``jumps``: at a jump of κ, "average" (κ averaged
    beside it, the default) or "sample" (κ at the nodes, first order there); either warns
    (:class:`MediumJumpWarning`). Many sources or many κ on one grid: use :class:`FDOperator`.
    """
    if ordering not in _ORDERINGS:
        raise ValueError(f"fd_solve: ordering must be one of {_ORDERINGS}, got {ordering!r}")
    op = FDOperator(problem, h, order=order, jumps=jumps)
    rhs = op.rhs()
    u = op.factorize(ordering=ordering).solve(rhs)
    return op.solution(u)
