#!/usr/bin/env python
"""The seismic cases of Song, Alkhalifah & Waheed (GJI 2022) against their finite-difference
solutions: the homogeneous 4 Hz model and Marmousi at 3 Hz.

    python benchmarks/bench_seismic.py --data DIR --case homogeneous4hz|marmousi3hz
        [--time-limit 600] [--optimizer auto|lm|adam] [--source point|grid|background]
        [--absorber pml|damping] [--points N] [--pml-nodes N] [--pml-share S]
        [--ff-dim M --hidden H --layers L] [--steps N] [--seed 0] [--fd-only]
        [--check-reference] [--no-progress] [--json out.json]

Data. The authors publish their models, absorbing-layer coefficients and finite-difference
solutions in the public repository songc0a/PINN-Helmholtz-solver-adaptive-sine (its README
cites the paper). Download it and give its folder as ``--data``::

    git clone https://github.com/songc0a/PINN-Helmholtz-solver-adaptive-sine
    python benchmarks/bench_seismic.py --data PINN-Helmholtz-solver-adaptive-sine --case homogeneous4hz

The script reads ``Homo_4Hz_singlesource_ps.mat`` or ``Marmousi_3Hz_singlesource_ps.mat``
(MATLAB v5 files, read with ``scipy.io.loadmat``). Each holds column vectors over every node of
their grid, the absorbing layer included, in MATLAB's column-major order (depth fastest):
``x_star``, ``z_star`` (km), ``m`` (slowness squared, s²/km²), ``Ps`` (the complex source term),
``A``, ``B``, ``C`` (their layer's coefficients) and ``U_real``, ``U_imag`` (their
finite-difference solution). Nothing of theirs is copied into this repository.

Their equation is ``∂x(A ∂x U) + ∂z(B ∂z U) + C ω² m U = Ps`` with ``A = e_z/e_x``,
``B = e_x/e_z``, ``C = e_x e_z`` and ``e_j = 1 − i σ_j/ω`` (σ_j quadratic in the depth into a
layer of 50 nodes): in the interior ``ΔU + ω² m U = Ps``, helmpinn's ``Δu + κu = f``, with the
stretching of the time convention e^{+iωt}. helmpinn's is e^{−iωt} (``s = 1 + iσ/k``), so the
problem posed here is the complex conjugate of theirs: source ``conj(Ps)``, and their ``U`` is
the conjugate of helmpinn's u. The PML is helmpinn's own :class:`~helmpinn.PML` over their
layer's extent (50 nodes) with their strength (σ/ω at the wall, read from ``C``) and profile
power 2 (``--pml-nodes N``: a thinner layer of N nodes with helmpinn's default strength, still
compared on their nodes: fewer wavelengths for the network; since 2026-12-05 that default
strength is matched to the velocities in the layer, :meth:`helmpinn.PML.for_medium`).
Coordinates are (x, z) in km, z the depth; the velocity is ``1/sqrt(m)`` in km/s as a
:class:`~helmpinn.GridField` over the whole grid.

Absorbers (``--absorber``). Their PINN is given the PML above, but their finite-difference
solution was not computed with it: their script calls ``Helm2D(ω/v, o, d, n, nb)``, which is not
in that repository; the one in the first author's earlier repository
(songc0a/PINN-based-Helmholtz-solver, ``isotropic/Helm2D.m``, a version of T. van Leeuwen's
SLIM operator) reproduces their ``U`` to 1e-14 (``--check-reference`` rebuilds it here from its
description, :func:`reference_operator`). It discretises, on the whole grid (their layer
included), ``ΔU + k_d² U = Ps`` with a damping layer, ``k_d = (ω/v) w(x) w(z)``,
``w = 1/(1 + iβr²)``, β = 0.55, ``r`` from 1 at the outer node to 0 at their layer's inner node,
by the optimal 9-point scheme of Jo, Shin & Suh (1996), with a first-order absorbing condition
``∂U/∂n = −i k_d U`` on the sides and the bottom and ``∂U/∂n = U/h`` on the top row (its ghost
node is twice the top node).

- ``pml`` (default): helmpinn's PML over the physical domain (above): the problem their PINN poses.
- ``damping``: the problem their finite-difference solution solves (in helmpinn's convention: the
  conjugate): the whole grid as the domain, complex ``κ = conj(k_d)²``, Robin conditions
  ``∂u/∂n = i conj(k_d) u`` on the sides and bottom and ``∂u/∂n = u/h`` on the top. No PML.

Sources (``--source``): their ``Ps`` is a point source smoothed by a Gaussian of 3 nodes
truncated at ±6 nodes, times a complex Ricker amplitude.

- ``point`` (default): a :class:`~helmpinn.PointSource` at its centre, width 3 nodes, amplitude
  ``h² Σ conj(Ps)`` times the far-field factor of the truncation (the truncated kernel's Fourier
  transform at |ξ| = k, averaged over directions, over the full Gaussian's ``exp(−k²σ²/2)``):
  the same field away from the source, and sampling that resolves it.
- ``grid``: ``conj(Ps)`` itself as a complex GridField (the same source term exactly; no
  sampling at the source).
- ``background``: the scattered-field form, a :class:`~helmpinn.FreeSpaceSource` of the
  same far field (the medium is homogeneous around the source in both cases); the total field is
  singular at the source, so its errors leave out a disc of 4 widths around it.

Steps: (1) ``helmpinn.reference.fd_solve`` of the posed problem on their grid, compared with
their solution on the physical domain (their layer left out), with the complex factor that fits
best; (2) a network trained for ``--time-limit`` seconds of wall clock (``lm``: Levenberg-
Marquardt with :func:`helmpinn.optim.lm.lm_defaults` and ``--points``; ``adam``:
:func:`helmpinn.default_settings`; ``auto``: ``hp.solve`` with its defaults, which decomposes a
problem of more than 4.5 wavelengths across, its PML included), its relative L2 error against their solution (and against
``fd_solve``) at their nodes of the physical domain: ``interior`` (all of them) and ``away``
(leaving out a disc of 4 source widths around the source). Wall-clock numbers depend on the
machine and its load.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

CASES = {
    "homogeneous4hz": {"file": "Homo_4Hz_singlesource_ps.mat", "frequency": 4.0, "layer_nodes": 50},
    "marmousi3hz": {"file": "Marmousi_3Hz_singlesource_ps.mat", "frequency": 3.0, "layer_nodes": 50},
}
VARIABLES = ("x_star", "z_star", "m", "Ps", "C", "U_real", "U_imag")
#: The errors of the scattered-field form leave out the nodes closer than this many source
#: widths to the source (its total field is singular there).
EXCLUDE_WIDTHS = 4.0
#: The scattered-field form's point source sits this many node spacings off their source node.
BACKGROUND_OFFSET = 1e-6
#: Their finite-difference solution's damping layer (``--absorber damping``): the wavenumber is
#: ``k / (1 + i β r²)`` (their convention) at the depth ``r`` (0 to 1) into its nodes.
DAMPING_BETA = 0.55
#: The optimal 9-point scheme of Jo, Shin & Suh (Geophysics 1996) their solution is computed with.
JO_ALPHA, JO_DELTA, JO_GAMMA = 0.5461, 0.09381, 0.6248


@dataclass
class SongCase:
    """One case on their grid: arrays ``[nx, nz]`` (axis 0 is x, axis 1 the depth z)."""

    name: str
    frequency: float        # Hz
    h: float                # node spacing (km), the same in x and z
    velocity: np.ndarray    # km/s, over the whole grid (their layer included)
    source: np.ndarray      # their Ps (complex)
    field: np.ndarray       # their finite-difference solution U (complex, e^{+iωt})
    layer_nodes: int        # their absorbing layer's thickness in nodes
    stretch: float          # their σ/ω at the wall: e = 1 − i stretch (δ/L)²

    @property
    def shape(self) -> tuple[int, int]:
        return self.velocity.shape

    @property
    def omega(self) -> float:
        return 2 * math.pi * self.frequency

    @property
    def nodes(self) -> np.ndarray:
        """Every node [N, 2] (x, z), in the order of ``array.ravel()``."""
        ix, iz = np.indices(self.shape)
        return np.stack([ix.ravel() * self.h, iz.ravel() * self.h], axis=1)

    @property
    def box(self) -> tuple[np.ndarray, np.ndarray]:
        """The physical domain (inside their layer), in km."""
        n = self.layer_nodes
        return (np.array([n * self.h, n * self.h]),
                np.array([(self.shape[0] - 1 - n) * self.h, (self.shape[1] - 1 - n) * self.h]))

    @property
    def interior(self) -> np.ndarray:
        """Boolean [nx, nz]: the nodes of the physical domain."""
        n = self.layer_nodes
        mask = np.zeros(self.shape, bool)
        mask[n:self.shape[0] - n, n:self.shape[1] - n] = True
        return mask

    @property
    def source_node(self) -> tuple[int, int]:
        return tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(self.source)), self.shape))

    @property
    def source_width(self) -> float:
        """σ of their Gaussian smoothing (km), from the ratio of neighbouring values."""
        i, j = self.source_node
        ratio = abs(self.source[i + 1, j] / self.source[i, j])
        return self.h * math.sqrt(-1.0 / (2.0 * math.log(ratio)))


def load_case(data_dir: str | os.PathLike, case: str) -> SongCase:
    """Read one of their ``.mat`` files from ``data_dir`` (see the module docstring)."""
    from scipy import io

    if case not in CASES:
        raise ValueError(f"--case: expected one of {sorted(CASES)}, got {case!r}")
    meta = CASES[case]
    path = os.path.join(os.fspath(data_dir), meta["file"])
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--data: no {meta['file']} in {os.fspath(data_dir)!r}; clone "
                                f"songc0a/PINN-Helmholtz-solver-adaptive-sine and give its folder")
    raw = io.loadmat(path)
    missing = [v for v in VARIABLES if v not in raw]
    if missing:
        raise ValueError(f"{path}: variables {missing} missing (expected {list(VARIABLES)})")
    x, z = np.ravel(raw["x_star"]).real, np.ravel(raw["z_star"]).real
    xs, zs = np.unique(x), np.unique(z)
    nx, nz = len(xs), len(zs)
    if nx * nz != len(x):
        raise ValueError(f"{path}: x_star, z_star are not a full grid ({nx} x {nz} != {len(x)})")
    h = float(xs[1] - xs[0])
    if not (np.allclose(np.diff(xs), h, rtol=1e-6) and np.allclose(np.diff(zs), h, rtol=1e-6)):
        raise ValueError(f"{path}: the grid is not regular with one spacing in x and z")

    def grid(name: str) -> np.ndarray:
        v = np.ravel(raw[name])
        if len(v) != nx * nz:
            raise ValueError(f"{path}: {name} has {len(v)} values, expected {nx * nz}")
        return v.reshape(nx, nz)   # column-major over (z, x): z runs fastest

    if not (np.allclose(grid("x_star"), xs[:, None]) and np.allclose(grid("z_star"), zs[None, :])):
        raise ValueError(f"{path}: the nodes are not in column-major (depth fastest) order")
    if xs[0] != 0 or zs[0] != 0:
        raise ValueError(f"{path}: the grid should start at (0, 0), got ({xs[0]}, {zs[0]})")
    m = grid("m").real
    if not np.all(m > 0):
        raise ValueError(f"{path}: m (slowness squared) must be > 0")
    n = meta["layer_nodes"]
    c_mid = grid("C")[:, nz // 2]
    # Their σ/ω = stretch (δ/L)² with δ = (n - 1 - i) h at node i < n, L = n h: read it at node 0.
    stretch = float(-c_mid[0].imag) / ((n - 1) / n) ** 2
    if not (np.all(c_mid[n:nx - n] == 1) and c_mid[n - 2] != 1 and stretch > 0):
        raise ValueError(f"{path}: C does not describe an absorbing layer of {n} nodes")
    return SongCase(name=case, frequency=meta["frequency"], h=h, velocity=1.0 / np.sqrt(m),
                    source=grid("Ps").astype(np.complex128),
                    field=grid("U_real") + 1j * grid("U_imag"), layer_nodes=n, stretch=stretch)


def far_field_factor(case: SongCase) -> float:
    """Their truncated, renormalised Gaussian kernel's Fourier transform at |ξ| = k (k at the
    source), averaged over directions, over the full Gaussian's ``exp(−k²σ²/2)``."""
    i, j = case.source_node
    nonzero = np.nonzero(np.abs(case.source[:, j]) > 0)[0]
    taps = np.arange(nonzero[0], nonzero[-1] + 1) - i
    w = np.abs(case.source[i + taps, j])
    w = w / w.sum()
    k = case.omega / case.velocity[i, j]
    one_d = lambda xi: np.sum(w * np.cos(xi * taps * case.h))  # noqa: E731
    angles = np.linspace(0.0, math.pi / 2, 91)
    truncated = np.mean([one_d(k * math.cos(t)) * one_d(k * math.sin(t)) for t in angles])
    return float(truncated / math.exp(-0.5 * (k * case.source_width) ** 2))


def build_problem(case: SongCase, source: str = "point", pml_share: float | None = None,
                  pml_nodes: int | None = None, absorber: str = "pml"):
    """The helmpinn Problem of ``case`` in helmpinn's convention (the complex conjugate of
    theirs), with its source in the form ``source`` (see the module docstring). ``absorber``
    "pml": the PML spans their layer with their strength; ``pml_nodes`` (1 to their layer's
    nodes) makes it that many node spacings thick instead, with helmpinn's default strength.
    "damping": the problem their finite-difference solution solves (:func:`damping_problem`)."""
    import helmpinn as hp

    if absorber == "damping":
        if pml_nodes is not None or pml_share is not None:
            raise ValueError("--pml-nodes, --pml-share: not with --absorber damping (no PML)")
        return damping_problem(case, source)
    if absorber != "pml":
        raise ValueError(f"--absorber: expected pml or damping, got {absorber!r}")
    lo, hi = case.box
    k = case.omega / float(case.velocity.min())
    velocity = hp.GridField(case.velocity, origin=(0.0, 0.0), spacing=case.h)
    if pml_nodes is None or pml_nodes == case.layer_nodes:
        pml = hp.PML(case.layer_nodes * case.h, strength=case.stretch * k, power=2)  # σ₀/k = their σ/ω
    elif 1 <= pml_nodes < case.layer_nodes:
        pml = hp.PML(pml_nodes * case.h, power=2)
    else:
        raise ValueError(f"--pml-nodes: expected 1 to {case.layer_nodes}, got {pml_nodes}")
    return hp.Problem(hp.geometry.Box(lo, hi), frequency=case.frequency, velocity=velocity,
                      pml=pml, wavenumber=k, pml_share=pml_share, exact=_theirs(case),
                      name=case.name, **_source(case, source))


def _theirs(case: SongCase):
    """Their solution in helmpinn's convention, as the problem's ``exact``."""
    import helmpinn as hp

    return hp.GridField(np.conj(case.field), origin=(0.0, 0.0), spacing=case.h)


def _source(case: SongCase, source: str) -> dict:
    """The Problem's source keyword (``source`` or ``background``) in the form ``source``."""
    import helmpinn as hp

    i, j = case.source_node
    x0 = (i * case.h, j * case.h)
    mass = complex(np.sum(np.conj(case.source))) * case.h**2
    if source == "grid":
        return {"source": hp.GridField(np.conj(case.source), origin=(0.0, 0.0), spacing=case.h)}
    if source == "point":
        return {"source": hp.PointSource(x0, amplitude=mass * far_field_factor(case), width=case.source_width)}
    if source == "background":
        k0 = case.omega / float(case.velocity[i, j])
        g = math.exp(-0.5 * (k0 * case.source_width) ** 2) * far_field_factor(case)
        # Δu + k²u = f, f of integral M, far away: u = −M g G with ΔG + k²G = −δ. u₀ is singular
        # at x₀, which is one of their nodes (and fd_solve's): move it off by BACKGROUND_OFFSET.
        x0 = (x0[0] + BACKGROUND_OFFSET * case.h, x0[1])
        return {"background": hp.FreeSpaceSource(x0, k0, amplitude=-mass * g)}
    raise ValueError(f"--source: expected point, grid or background, got {source!r}")


def damping_ramp(case: SongCase, t: np.ndarray, axis: int) -> np.ndarray:
    """Their damping layer's ``r`` at coordinates ``t`` (km) along ``axis`` (0: x, 1: z): 1 at the
    grid's outer nodes, falling linearly to 0 at their layer's innermost node, 0 inside."""
    width = (case.layer_nodes - 1) * case.h
    length = (case.shape[axis] - 1) * case.h
    return np.clip(np.maximum(width - t, t - (length - width)) / width, 0.0, 1.0)


def damped_wavenumber(case: SongCase, velocity, x: np.ndarray, conjugate: bool = True) -> np.ndarray:
    """``k_d = (ω/v) w(x) w(z)``, ``w = 1/(1 + iβr²)`` at the points ``x`` [N, 2] (``velocity``:
    a callable, or values at ``x``); helmpinn's convention (its conjugate) unless ``conjugate`` is
    False."""
    v = velocity(x) if callable(velocity) else np.asarray(velocity)
    sign = -1.0 if conjugate else 1.0
    w = [1.0 / (1.0 + sign * 1j * DAMPING_BETA * damping_ramp(case, x[:, a], a) ** 2) for a in (0, 1)]
    return case.omega / v * w[0] * w[1]


def damping_problem(case: SongCase, source: str = "point"):
    """The problem their finite-difference solution solves (module docstring, "Absorbers"), in
    helmpinn's convention: the whole grid as a Box, ``κ = k_d²`` (complex), Robin
    ``∂u/∂n − i k_d u = 0`` on the sides and the bottom (x = 0, x = L_x, z = L_z) and
    ``∂u/∂n − u/h = 0`` on the top (z = 0)."""
    import helmpinn as hp

    velocity = hp.GridField(case.velocity, origin=(0.0, 0.0), spacing=case.h)
    k_d = lambda x: damped_wavenumber(case, velocity, x)   # noqa: E731
    absorbing = hp.Robin(lambda x: -1j * k_d(x))
    top = hp.Robin(-1.0 / case.h)
    hi = (np.array(case.shape) - 1) * case.h
    return hp.Problem(hp.geometry.Box((0.0, 0.0), hi), kappa=lambda x: k_d(x) ** 2,
                      bcs={"xmin": absorbing, "xmax": absorbing, "ymax": absorbing, "ymin": top},
                      wavenumber=case.omega / float(case.velocity.min()), exact=_theirs(case),
                      name=f"{case.name}-damping", **_source(case, source))


def reference_operator(case: SongCase):
    """Their finite-difference operator (module docstring, "Absorbers"), rebuilt from its
    description: a sparse matrix over every node in their order (column-major, depth fastest),
    their convention; ``spsolve(H, Ps)`` is their ``U``. The 9-point scheme of Jo et al. is
    ``γ k² u + δ Σ₄ k² u + (1−γ−4δ)/4 Σ₄ₓ k² u + α L₀ u + (1−α) L₄₅ u`` (Σ₄ over the four edge
    neighbours, Σ₄ₓ the four diagonal ones, both of the damped k², L₀ the 5-point Laplacian, L₄₅
    the one on the diagonals, spacing h√2). Edge rows as in their code: L₀'s ghost nodes are
    ``u/(1 + i k_d h)`` on the sides and the bottom and ``2u`` on the top; L₄₅ has no diagonal
    term at an edge node and no coupling to one (an edge node's row keeps those to its interior
    diagonal neighbours); the Σ sums run over the grid's nodes in their vector's order, so
    a neighbour one index away across a column's end is the next column's end node (kept, as
    they have it)."""
    from scipy import sparse

    nz, nx = case.shape[1], case.shape[0]
    n = nx * nz
    h = case.h
    ix, iz = np.divmod(np.arange(n), nz)            # index q = ix nz + iz
    k_d = damped_wavenumber(case, case.velocity.ravel(), np.stack([ix * h, iz * h], 1), conjugate=False)
    top, bottom, side = iz == 0, iz == nz - 1, (ix == 0) | (ix == nx - 1)
    edge = top | bottom | side
    rows, cols, vals = [], [], []

    def add(offset: int, value, where=None):
        """value at (q, q + offset), for the q (in ``where``) whose q + offset is a node."""
        q = np.arange(n)
        ok = (q + offset >= 0) & (q + offset < n) & (True if where is None else where)
        rows.append(q[ok])
        cols.append(q[ok] + offset)
        vals.append(np.broadcast_to(np.asarray(value, np.complex128), (n,))[ok])

    k2 = k_d ** 2
    add(0, JO_GAMMA * k2)
    for off in (-nz, -1, 1, nz):      # mass: edge neighbours in vector order (wrapping at column ends)
        add(off, JO_DELTA * np.roll(k2, -off))
    for off in (-nz - 1, -nz + 1, nz - 1, nz + 1):
        add(off, 0.25 * (1 - JO_GAMMA - 4 * JO_DELTA) * np.roll(k2, -off))
    ghost = 1.0 / (1.0 + 1j * k_d * h)
    diag_z = np.where(top, 0.0, -2.0 + np.where(bottom, ghost, 0.0))   # top: ghost 2u
    diag_x = -2.0 + np.where(side, ghost, 0.0)
    add(0, JO_ALPHA * (diag_z + diag_x) / h**2)
    add(1, JO_ALPHA / h**2, ~bottom)                # no coupling across a column's end
    add(-1, JO_ALPHA / h**2, ~top)
    add(nz, JO_ALPHA / h**2)
    add(-nz, JO_ALPHA / h**2)
    d2 = 2 * h * h
    add(0, (1 - JO_ALPHA) * np.where(edge, 0.0, -4.0) / d2)
    for off in (-nz - 1, -nz + 1, nz - 1, nz + 1):  # rotated: none to an edge node
        target = np.roll(edge, -off)
        add(off, (1 - JO_ALPHA) / d2, ~target)
    return sparse.csc_matrix((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))


def check_reference(case: SongCase) -> float:
    """The relative difference between their ``U`` and :func:`reference_operator`'s solution."""
    from scipy.sparse.linalg import spsolve

    u = spsolve(reference_operator(case), case.source.ravel())   # [nx, nz] C order = theirs
    return relative_error(u.reshape(case.shape), case.field)


def error_masks(case: SongCase, problem) -> dict[str, np.ndarray]:
    """The node sets the errors are measured on: ``interior`` (the physical domain; not in the
    scattered-field form, whose total field is singular at the source) and ``away`` (the
    physical domain less a disc of EXCLUDE_WIDTHS source widths around the source)."""
    i, j = case.source_node
    r = np.linalg.norm(case.nodes - np.array([i * case.h, j * case.h]), axis=1).reshape(case.shape)
    masks = {"interior": case.interior, "away": case.interior & (r > EXCLUDE_WIDTHS * case.source_width)}
    if problem.background is not None:
        del masks["interior"]
    return masks


def relative_error(u: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(u - ref) / np.linalg.norm(ref))


def errors(case: SongCase, problem, values: np.ndarray) -> dict[str, float]:
    """Relative L2 errors of ``values`` (the unknown at every node, [nx, nz], helmpinn's
    convention) against their solution, per :func:`error_masks`."""
    out = {}
    for name, mask in error_masks(case, problem).items():
        u = problem.total_field(case.nodes[mask.ravel()], values[mask])
        out[name] = relative_error(u, np.conj(case.field[mask]))
    return out


def compare_fd(case: SongCase, problem) -> dict:
    """fd_solve of ``problem`` on their grid against their solution (:func:`errors`), and the
    complex factor that fits theirs best on the ``away`` nodes."""
    from helmpinn.reference import fd_solve

    t0 = time.perf_counter()
    sol = fd_solve(problem, case.h)
    seconds = time.perf_counter() - t0
    # fd_solve's grid is theirs, or its part inside a thinner PML: put it on their nodes.
    start = np.rint(np.array([a[0] for a in sol.axes]) / case.h).astype(int)
    if not all(np.allclose(a, (s + np.arange(len(a))) * case.h) for a, s in zip(sol.axes, start)):
        raise RuntimeError("fd_solve's grid is not a part of theirs")
    values = np.full(case.shape, np.nan, np.complex128)
    values[start[0]:start[0] + len(sol.axes[0]), start[1]:start[1] + len(sol.axes[1])] = sol.values
    mask = error_masks(case, problem)["away"]
    ours = problem.total_field(case.nodes[mask.ravel()], values[mask])
    theirs = np.conj(case.field[mask])          # in helmpinn's convention
    factor = complex(np.vdot(ours, theirs) / np.vdot(ours, ours))
    return {"fd_seconds": seconds, "fd_vs_theirs": errors(case, problem, values),
            "best_factor": [factor.real, factor.imag],
            "fd_vs_theirs_away_after_factor": relative_error(factor * ours, theirs),
            "fd_vs_theirs_by_layer_distance": by_layer_distance(case, problem, values),
            "solution": values}


#: The bands of :func:`by_layer_distance`: a node's distance to their layer, in km.
LAYER_BANDS = ((0.0, 0.5), (0.5, 1.0), (1.0, math.inf))


def by_layer_distance(case: SongCase, problem, values: np.ndarray) -> dict[str, float]:
    """Relative L2 errors of ``values`` against their solution on the ``away`` nodes, in bands of
    the distance to their absorbing layer (:data:`LAYER_BANDS`): where a difference between
    the two absorbing layers shows, it is largest next to them."""
    lo, hi = case.box
    nodes = case.nodes
    distance = np.min(np.concatenate([nodes - lo, hi - nodes], axis=1), axis=1).reshape(case.shape)
    away = error_masks(case, problem)["away"]
    out = {}
    for a, b in LAYER_BANDS:
        mask = away & (distance >= a - 1e-12) & (distance < b)
        if mask.any():
            u = problem.total_field(nodes[mask.ravel()], values[mask])
            out[f"{a:g}-{b:g} km"] = relative_error(u, np.conj(case.field[mask]))
    return out


def train(case: SongCase, problem, *, optimizer: str, time_limit: float, points: int | None,
          ff_dim: int | None, hidden: int | None, layers: int | None, seed: int,
          steps: int | None = None, fd: np.ndarray | None = None, progress: bool = True) -> dict:
    """Train a network on ``problem`` for ``time_limit`` seconds; errors at the nodes (also
    against ``fd``, fd_solve's values on their nodes)."""
    import helmpinn as hp
    from helmpinn.optim.lm import lm_defaults, lm_options

    if optimizer == "auto":
        return _solve(case, problem, time_limit=time_limit, seed=seed, fd=fd, progress=progress)
    if optimizer == "lm":
        d = lm_defaults(problem)
    elif optimizer == "adam":
        d = hp.default_settings(problem)
    else:
        raise ValueError(f"--optimizer: expected auto, lm or adam, got {optimizer!r}")
    d.update({k: v for k, v in (("ff_dim", ff_dim), ("hidden", hidden), ("layers", layers),
                                ("pde_points", points)) if v is not None})
    if points is not None:
        d["bc_points"] = max(points // 4, 64)
    model = hp.Model.create(2, d["ff_dim"], d["hidden"], d["layers"], dtype=d["dtype"], seed=seed,
                            fourier_sigma=d["sigma"])
    start = time.perf_counter()

    shown = [0]

    def clock(trainer, step):
        elapsed = time.perf_counter() - start
        h = trainer.history
        if not progress and len(h.eval_step) > shown[0]:   # a log line per error evaluation
            shown[0] = len(h.eval_step)
            print(f"  step {h.eval_step[-1]}: loss {h.loss[-1]:.3e}, error of the unknown vs theirs "
                  f"on the test grid {h.eval_error[-1]:.3e}, {elapsed:.0f} s", flush=True)
        if elapsed > time_limit:
            trainer.request_stop(f"time limit of {time_limit:g} s")

    trainer = hp.Trainer(problem, model, pde_points=d["pde_points"], bc_points=d["bc_points"],
                         resample_every=d["resample_every"], sampling=d["sampling"],
                         eval_every=d["eval_every"] if optimizer == "lm" else 200,
                         callbacks=[clock], progress=progress, seed=seed,
                         **({} if optimizer == "lm" else {"lr": d["lr"], "betas": d["betas"]}))
    if optimizer == "lm":
        trainer.fit_lm(100_000, **lm_options(d))
    else:
        trainer.fit(d["steps"] if steps is None else steps)   # the cosine schedule spans them
    wall = time.perf_counter() - start
    out = {"optimizer": optimizer, "params": int(model.num_params), "pde_points": d["pde_points"],
           "bc_points": d["bc_points"], "network": [d["ff_dim"], d["hidden"], d["layers"]],
           "steps": int(trainer.step), "wall_s": wall, "train_s": trainer.train_time,
           "stop_reason": trainer.stop_reason}
    return _results(case, problem, model, trainer.history, out, fd)


def _solve(case: SongCase, problem, *, time_limit: float, seed: int, fd: np.ndarray | None,
           progress: bool) -> dict:
    """``hp.solve(problem, time_limit=)`` with its defaults (a decomposition above 4.5
    wavelengths across the sampled domain, else one network by LM)."""
    import helmpinn as hp

    start = time.perf_counter()

    shown = [0]

    def log(trainer, step):   # (the callbacks run before the step's own evaluation: the last one shown)
        h = trainer.history
        if not progress and len(h.eval_step) > shown[0]:
            shown[0] = len(h.eval_step)
            print(f"  step {h.eval_step[-1]}: error of the unknown vs theirs on the test grid "
                  f"{h.eval_error[-1]:.3e}, {h.eval_time[-1]:.0f} s of training", flush=True)

    sol = hp.solve(problem, time_limit=time_limit, seed=seed, progress=progress, callbacks=[log])
    st = sol.settings
    out = {"optimizer": f"auto: {st.get('model', 'network')} / {st.get('optimizer')}",
           "params": int(sol.model.num_params), "pde_points": st.get("pde_points"),
           "bc_points": st.get("bc_points"), "network": [st.get("ff_dim"), st.get("hidden"), st.get("layers")],
           "steps": len(sol.history.step), "wall_s": time.perf_counter() - start,
           "train_s": sol.history.eval_time[-1] if sol.history.eval_time else None,
           "stop_reason": sol.stop_reason}
    return _results(case, problem, sol.model, sol.history, out, fd)


def _results(case: SongCase, problem, model, history, out: dict, fd: np.ndarray | None) -> dict:
    """``out`` with the final loss, the errors against their solution (and ``fd``) at their
    nodes, and the history of the test-grid errors."""
    inside = case.interior.ravel()   # the errors' nodes (a decomposed model covers no more than its box)
    values = np.full(case.nodes.shape[0], np.nan, np.complex128)
    values[inside] = model.predict(case.nodes[inside])
    values = values.reshape(case.shape)
    out.update(final_loss=history.loss[-1] if history.loss else None,
               error_vs_theirs=errors(case, problem, values),
               error_vs_theirs_by_layer_distance=by_layer_distance(case, problem, values),
               history={"step": history.eval_step, "error": history.eval_error, "time": history.eval_time})
    if fd is not None:
        out["error_vs_fd_solve"] = {}
        for name, m in error_masks(case, problem).items():
            x = case.nodes[m.ravel()]   # total fields (the scattered form's u_s is ~0 there)
            out["error_vs_fd_solve"][name] = relative_error(problem.total_field(x, values[m]),
                                                            problem.total_field(x, fd[m]))
    return out


def describe(case: SongCase) -> dict:
    lo, hi = case.box
    v = case.velocity[case.interior]
    lam_min = float(v.min()) / case.frequency
    return {"case": case.name, "frequency_hz": case.frequency, "grid": list(case.shape),
            "h_km": case.h, "domain_km": [lo.tolist(), hi.tolist()],
            "layer_km": case.layer_nodes * case.h, "their_sigma_over_omega_at_wall": case.stretch,
            "velocity_km_s": [float(v.min()), float(v.max())],
            "wavelengths_across_at_vmin": ((hi - lo) / lam_min).tolist(),
            "source_km": [case.source_node[0] * case.h, case.source_node[1] * case.h],
            "source_width_km": case.source_width, "far_field_factor": far_field_factor(case)}


def _show(errs: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.3e}" for name, value in errs.items())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--data", required=True, help="folder of songc0a/PINN-Helmholtz-solver-adaptive-sine")
    p.add_argument("--case", required=True, choices=sorted(CASES))
    p.add_argument("--time-limit", type=float, default=600.0, help="training seconds (wall clock)")
    p.add_argument("--optimizer", choices=("auto", "lm", "adam"), default="lm",
                   help="auto: hp.solve with its defaults")
    p.add_argument("--source", choices=("point", "grid", "background"), default="point")
    p.add_argument("--absorber", choices=("pml", "damping"), default="pml",
                   help="pml: the PML their PINN is given; damping: the damping layer and edge "
                        "conditions their finite-difference solution was computed with")
    p.add_argument("--check-reference", action="store_true",
                   help="also solve their finite-difference operator, rebuilt, and compare with their U")
    p.add_argument("--points", type=int, default=None, help="PDE points (default: the optimiser's)")
    p.add_argument("--pml-nodes", type=int, default=None,
                   help="a thinner PML of this many node spacings (helmpinn's default strength for "
                        "the medium in it); "
                        "default: their layer, their strength")
    p.add_argument("--pml-share", type=float, default=None, help="share of PDE points in the layer")
    p.add_argument("--ff-dim", type=int, default=None)
    p.add_argument("--hidden", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--steps", type=int, default=None,
                   help="Adam: steps of its schedule (default: default_settings'); the time "
                        "limit may stop it first")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fd-only", action="store_true", help="only the finite-difference comparison")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", default=None, help="write the results to this file")
    a = p.parse_args(argv)
    if not a.time_limit > 0:
        p.error(f"--time-limit must be > 0, got {a.time_limit}")

    case = load_case(a.data, a.case)
    info = describe(case)
    problem = build_problem(case, a.source, a.pml_share, a.pml_nodes, a.absorber)
    info["absorber"] = a.absorber
    print(json.dumps(info, indent=1))
    if a.check_reference:
        info["reference_rebuilt_vs_theirs"] = check_reference(case)
        print(f"their operator, rebuilt: {info['reference_rebuilt_vs_theirs']:.2e} from their U (all nodes)")
    fd = compare_fd(case, problem)
    solution = fd.pop("solution")
    info.update(source=a.source, **fd)
    print(f"fd_solve vs theirs ({a.source} source): {_show(fd['fd_vs_theirs'])}; best factor "
          f"{complex(*fd['best_factor']):.5f} -> {fd['fd_vs_theirs_away_after_factor']:.3e} away "
          f"({fd['fd_seconds']:.1f} s); by distance to their layer: "
          f"{_show(fd['fd_vs_theirs_by_layer_distance'])}")
    if not a.fd_only:
        result = train(case, problem, optimizer=a.optimizer, time_limit=a.time_limit, points=a.points,
                       ff_dim=a.ff_dim, hidden=a.hidden, layers=a.layers, seed=a.seed,
                       steps=a.steps, fd=solution, progress=not a.no_progress)
        info["training"] = result
        print(f"{a.optimizer}: {result['steps']} steps, {result['wall_s']:.0f} s wall "
              f"({result['stop_reason']}); P = {result['params']}, {result['pde_points']} PDE points; "
              f"error vs theirs {_show(result['error_vs_theirs'])}; vs fd_solve "
              f"{_show(result.get('error_vs_fd_solve', {}))}; vs theirs by distance to their "
              f"layer {_show(result['error_vs_theirs_by_layer_distance'])}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(info, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
