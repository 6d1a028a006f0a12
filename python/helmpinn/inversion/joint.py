"""The joint residual of an inversion and its exact Jacobian, one wavefield at a time.

Unknowns: one network per wavefield (frequency f, source s), parameters ``θ_fs``, and the
medium's spline coefficients ``c`` (:class:`~helmpinn.inversion.medium.SplineMedium`,
``m = 1/v²``). The residual is the concatenation of

- per wavefield (:class:`WavefieldRows`), scaled by ``1/sqrt(W)`` (W wavefields: the loss is a
  mean over them) and by ``1/u_f`` (``u_f`` the root mean square of frequency f's data, so every
  frequency weighs alike):

  - the PDE rows at its collocation points (the physical box and, with a PML, the layer):
    ``sqrt(w_p / N_p) (L u − f_s) / k_f²`` with ``L u = Σ a_j ∂²u/∂x_j² + Σ b_j ∂u/∂x_j + κ u``,
    ``κ(x) = ω_f² m(x)``, ``(a, b)`` the PML's stretching from
    :meth:`helmpinn.Problem.operator_at` (a = 1, b = 0 without one; in this formulation the
    layer leaves κ as it is: ``c = κ`` in docs/MATH.md's general operator), ``k_f`` the
    problem's wavenumber, ``w_p`` the points' importance weights of
    :meth:`helmpinn.Problem.sample_pde` (the source's Gaussian is sampled more densely);
  - the data rows at the receivers: ``sqrt(λ_d ω_r / R) (u(x_r) − d_fsr)`` (ω_r the survey's
    per-datum weight normalised to mean 1 over the survey, 1 without);
  - the boundary rows: ``u = 0`` on the PML's outer wall (the data term of the core) or, without
    a PML, the first-order absorbing condition ``∂u/∂n − i k u = 0`` on the box (the core's
    Robin term), ``sqrt(1/N_b)`` each, the Robin rows also divided by ``k_f``;

- the medium's regularisation ``sqrt(β) G c`` (:meth:`SplineMedium.gradient_rows`).

**Scattered-field form** (``background=``): given a field ``u₀`` that solves the problem in a
medium ``m₀`` (``L₀ u₀ = f``, e.g. :func:`helmpinn.reference.fd_solve` in the stage's starting
medium, same PML), the network holds ``u_s = u − u₀``. Then ``L u − f = L u_s + ω² (m − m₀) u₀``:
the PDE rows take the source ``−ω² (m − m₀) u₀`` (only u₀'s values, no derivatives), the
receivers ``d − u₀(x_r)``, the wall ``u_s = 0``. The point source's near field, the hardest part
of the field for a network, is then in u₀, and ``u_s`` starts at 0 where ``m = m₀``. The medium
columns use the total field ``u_s + u₀``.

The core computes each wavefield's residuals and network Jacobian exactly
(:meth:`helmpinn.Workspace.residuals` / ``jacobian``, every term with weight 1 and its own
``sqrt(1/count)``); the scalings above are applied to its rows afterwards (a row's scale times
the core's row). The medium columns of the PDE rows are exact too: the residual is linear in κ,
so ``∂r/∂c_j = row scale × ω_f² u(x) B_j(x)`` (u's real part in the row's real half, its
imaginary part in the imaginary half), a sparse matrix with the basis' ``4^d`` entries a row.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import scipy.sparse as sp
from numpy.typing import NDArray

from .. import _core
from ..problems.batch import Batch, operator_a
from .medium import SplineMedium

__all__ = ["WavefieldRows", "JointResiduals"]


class WavefieldRows:
    """The rows of one wavefield (frequency, source): residuals, network Jacobian and medium
    Jacobian, for the network parameters θ and medium coefficients c (module docstring).

    ``problem``: the :class:`~helmpinn.Problem` of this frequency and source (its operator, PML,
    source and boundary conditions; its κ is replaced by the medium's); ``omega2`` = ω²;
    ``receivers`` [R, d], ``data`` complex [R], ``weights`` [R] (the per-datum weights, scaled
    already: see the module docstring); ``scale``: the row scale ``1/(u_f sqrt(W))``.
    """

    def __init__(self, problem: Any, medium: SplineMedium, omega2: float, receivers: NDArray,
                 data: NDArray, weights: NDArray, *, pde_points: int, boundary_points: int,
                 lambda_data: float, scale: float, rng: np.random.Generator,
                 background: Any = None, background_medium: NDArray | None = None):
        ts = problem.sample(pde_points, boundary_points, rng)
        self.problem, self.medium, self.omega2 = problem, medium, float(omega2)
        self.k2 = float(problem.wavenumber) ** 2
        n_p = len(ts.x_pde)
        root = np.sqrt(ts.pde_weight) if ts.pde_weight is not None else np.ones(n_p)
        self.x_pde, self.root = ts.x_pde, root
        self.basis = medium.basis(ts.x_pde)
        self._fixed: dict[str, Any] = dict(x_pde=ts.x_pde)
        self._f = ts.f
        self.u0 = None
        if background is not None:   # the scattered-field form (module docstring)
            if background_medium is None:
                raise ValueError("WavefieldRows: background needs background_medium (its coefficients)")
            self.u0 = np.asarray(background(ts.x_pde), np.complex128)
            self.m0 = self.basis @ np.asarray(background_medium, np.float64)
            data = np.asarray(data, np.complex128) - np.asarray(background(receivers), np.complex128)
        if ts.a_pde is not None:
            self._fixed.update(operator_a(ts.a_pde), b_pde=ts.b_pde)
        self.target = np.asarray(data, np.complex128)   # what u(x_r) (u_s(x_r)) should be
        n_wall = len(ts.x_data)
        x_data = np.concatenate([ts.x_data, receivers]) if n_wall else np.asarray(receivers)
        y = np.concatenate([ts.y, data]) if n_wall else np.asarray(data, np.complex128)
        self._fixed.update(x_data=np.ascontiguousarray(x_data), y=y)
        n_d, n_b = len(x_data), len(ts.x_bc)
        self._fixed.update(ts.bc_inputs())
        self.sizes = {"pde": n_p, "wall": n_wall, "data": len(receivers), "bc": n_b}
        # The row scales over the core's (each term weight 1, sqrt(1/count)): module docstring.
        per_point = np.concatenate([
            np.full(n_p, scale / self.k2),
            np.full(n_wall, scale * math.sqrt(n_d / max(n_wall, 1))),
            scale * np.sqrt(lambda_data * np.asarray(weights, np.float64) * n_d / len(receivers)),
            np.full(n_b, scale / math.sqrt(self.k2)),
        ])
        self.rowscale = np.repeat(per_point, 2)
        self.num_residuals = len(self.rowscale)
        self._c: NDArray | None = None
        self.batch: Batch | None = None

    def slices(self) -> dict[str, slice]:
        """The row ranges of the terms ("pde", "wall", "data", "bc") in :meth:`residuals`."""
        out, start = {}, 0
        for name in ("pde", "wall", "data", "bc"):
            out[name] = slice(start, start + 2 * self.sizes[name])
            start += 2 * self.sizes[name]
        return out

    def set_medium(self, c: NDArray) -> None:
        """Rebuild the batch for the medium's coefficients c (κ = ω² m at the PDE points)."""
        if self._c is not None and np.array_equal(self._c, c):
            return
        m = self.basis @ c
        f = self._f if self.u0 is None else -self.omega2 * (m - self.m0) * self.u0 * self.root
        self.batch = Batch(**self._fixed, kappa=self.omega2 * m * self.root, f=f, dtype=np.float64)
        self._c = np.array(c, np.float64, copy=True)

    def _kw(self, c: NDArray) -> dict[str, Any]:
        self.set_medium(c)
        return dict(batch=self.batch, w_pde=1.0, w_data=1.0, w_bc=1.0)

    def residuals(self, ws: _core.Workspace, theta: NDArray, c: NDArray) -> NDArray:
        """r [R] of this wavefield (float64)."""
        return ws.residuals(theta, **self._kw(c)) * self.rowscale

    def jacobian(self, ws: _core.Workspace, theta: NDArray, c: NDArray) -> NDArray:
        """∂r/∂θ [R, P], exact (the core's, rows scaled)."""
        J = ws.jacobian(theta, **self._kw(c))
        J *= self.rowscale[:, None]
        return J

    def medium_jacobian(self, ws: _core.Workspace, theta: NDArray) -> sp.csr_matrix:
        """∂r/∂c [R, M], sparse: ``row scale × sqrt(1/N_p) × ω² u(x) B(x)`` on the PDE rows,
        0 on the others (module docstring)."""
        n_p = self.sizes["pde"]
        u = ws.forward(theta, np.ascontiguousarray(self.x_pde), 0)        # [N, 2] (re, im)
        if self.u0 is not None:   # the total field u_s + u0
            u = u + np.stack([self.u0.real, self.u0.imag], axis=1)
        factor = (self.omega2 / math.sqrt(n_p)) * self.root[:, None] * u  # [N, 2]
        pairs = self.rowscale[: 2 * n_p] * factor.reshape(-1)
        rows = sp.diags(pairs) @ sp.kron(self.basis, np.ones((2, 1)), format="csr")
        extra = sp.csr_matrix((self.num_residuals - 2 * n_p, self.medium.size))
        return sp.vstack([rows, extra], format="csr")


class JointResiduals:
    """All wavefields' rows and the medium's regularisation (module docstring).

    ``rows``: the :class:`WavefieldRows`; ``spec``: the networks' common ModelSpec;
    ``regularization``: the matrix ``sqrt(β) G`` (sparse [Q, M]) or None.
    """

    def __init__(self, rows: Sequence[WavefieldRows], spec: Any, medium: SplineMedium,
                 regularization: sp.spmatrix | None, batch_size: int = 4096):
        self.rows = list(rows)
        self.medium = medium
        self.reg = None if regularization is None else sp.csr_matrix(regularization)
        self.workspace = _core.Workspace(spec, int(batch_size), "float64")
        self.num_params = int(spec.num_params)

    def terms(self, thetas: Sequence[NDArray], c: NDArray) -> dict[str, float]:
        """The loss ``r·r`` by term: "pde", "data", "boundary" (the wall or Robin rows), "reg",
        and "total"."""
        rs = [w.residuals(self.workspace, theta, c) for w, theta in zip(self.rows, thetas)]
        return self.split_terms(rs, None if self.reg is None else self.reg @ c)

    def split_terms(self, rs: Sequence[NDArray], g: NDArray | None) -> dict[str, float]:
        """:meth:`terms` of given residuals: ``rs`` every wavefield's (in the order of
        ``rows``), ``g`` the regularisation's rows (None: none). The sums run in one fixed order,
        so the same residuals give the same loss bit for bit wherever it is computed."""
        out = {"pde": 0.0, "data": 0.0, "boundary": 0.0, "reg": 0.0}
        for w, r in zip(self.rows, rs):
            s = w.slices()
            out["pde"] += float(r[s["pde"]] @ r[s["pde"]])
            out["data"] += float(r[s["data"]] @ r[s["data"]])
            for name in ("wall", "bc"):
                out["boundary"] += float(r[s[name]] @ r[s[name]])
        if g is not None:
            out["reg"] = float(g @ g)
        out["total"] = sum(out.values())
        return out

    def loss(self, thetas: Sequence[NDArray], c: NDArray) -> float:
        return self.terms(thetas, c)["total"]
