"""One draw of a problem's points with everything the loss needs (:class:`TrainingSet`), the
check that the problem's data at those points is finite (:func:`check_finite_data`), and the
conversions between complex values and the core's (re, im) pairs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .. import _device
from .._checks import finite_at_points
from .batch import Batch, operator_a

__all__ = ["TrainingSet", "check_finite_data", "complex_to_pairs", "pairs_to_complex"]


def complex_to_pairs(z: ArrayLike, dtype: Any = np.float64) -> NDArray:
    """complex [N] -> real [N, 2] (re, im), C-contiguous, in ``dtype``."""
    z = np.asarray(z)
    out = np.empty(z.shape + (2,), dtype=dtype)
    out[..., 0] = z.real
    out[..., 1] = z.imag
    return out


def pairs_to_complex(p: ArrayLike) -> NDArray[np.complex128]:
    """real [..., 2] (re, im) -> complex [...] (complex128)."""
    p = np.asarray(p)
    if p.shape[-1] != 2:
        raise ValueError(f"expected a last axis of 2 (re, im), got shape {p.shape}")
    return p[..., 0].astype(np.float64) + 1j * p[..., 1].astype(np.float64)


def check_finite_data(where: str, what: str, values: Any, x: NDArray, points: str) -> None:
    """A ValueError when ``values`` (a number, [N] or [N, ...], one row per point of x [N, d])
    is not finite everywhere, naming ``what`` (the array: "kappa", "source", a condition's
    value), its first bad point (its index among ``points`` and its coordinates) and value, and
    saying that the problem's data is at fault: a NaN or Inf there would otherwise surface
    as a non-finite loss blamed on the network's parameters (:func:`helmpinn._checks.finite_at_points`,
    the check ``fd_solve`` makes of its κ and right-hand side too)."""
    v = np.asarray(values)
    remedy = ("; the problem's data must be finite" if v.ndim == 0 else
              "; the problem's data (κ, the source, the conditions, the data points) must be finite at every "
              "point: fix the problem, not the training settings")
    finite_at_points(where, what, v, x, points, remedy)


@dataclass
class TrainingSet:
    """One draw of collocation points with everything the loss needs (float64 / complex128).

    PDE: ``x_pde``, ``kappa`` (float or [N]), ``f`` (complex [N] or None). Data (Dirichlet
    boundary points and extra data): ``x_data``, ``y`` (complex). Robin: ``x_bc``, ``n_bc``,
    ``alpha`` (complex scalar or [N]), ``g`` (complex [N] or None). ``a_pde``, ``b_pde``
    (complex [N_pde, d] or None): the general operator's coefficients (PML, density, ``a``,
    ``b``). ``kappa`` complex: the operator's complex c (absorbing media). ``pde_weight`` ([N] or
    None): the importance weights of the PDE points, for reference: they are already applied, as
    ``sqrt(w)`` times ``a_pde``, ``b_pde``, ``kappa`` and ``f``. By a re-entrant corner the Robin
    rows' ``n_bc``, ``alpha`` and ``g`` carry the corner's weights the same way (``sqrt(w)``
    times each: :meth:`helmpinn.problems.sampler.Sampler.corner_weights`), so ``n_bc`` is a unit
    normal only away from such corners.
    """

    x_pde: NDArray[np.float64]
    kappa: float | NDArray[np.float64]
    f: NDArray[np.complex128] | None
    x_data: NDArray[np.float64]
    y: NDArray[np.complex128]
    x_bc: NDArray[np.float64]
    n_bc: NDArray[np.float64]
    alpha: complex | NDArray[np.complex128]
    g: NDArray[np.complex128] | None
    sizes: dict[str, int] = field(default_factory=dict)
    a_pde: NDArray[np.complex128] | None = None
    b_pde: NDArray[np.complex128] | None = None
    pde_weight: NDArray[np.float64] | None = None

    def to_batch(self, dtype: Any = np.float32, *, counts: Mapping[str, int] | None = None,
                 device: str = "cpu") -> Batch:
        """The :class:`~helmpinn.Batch` of these points for a workspace of ``dtype``: every array
        converted once (C-contiguous, complex values as (re, im) pairs); absent terms are left
        out. ``counts``: the global point counts when this set is one shard of a larger one.
        ``device``: "cuda" / "cuda:N" copies the converted arrays once to that GPU
        (:meth:`Batch.to_device`; checked before any conversion)."""
        if device != "cpu":
            _device.check(device, "TrainingSet.to_batch")
        kw: dict[str, Any] = {}
        if len(self.x_pde):
            kw.update(x_pde=self.x_pde, f=self.f)
            if np.iscomplexobj(self.kappa):  # the general operator's complex c
                kw.update(c_pde=self.kappa)
            else:
                kw.update(kappa=self.kappa)
            if self.a_pde is not None:  # the general operator, with kappa as its (real) c
                kw.update(operator_a(self.a_pde), b_pde=self.b_pde)
        if len(self.x_data):
            kw.update(x_data=self.x_data, y=self.y)
        kw.update(self.bc_inputs())
        batch = Batch(**kw, counts=counts, dtype=dtype)
        return batch if device == "cpu" else batch.to_device(device)

    def bc_inputs(self) -> dict[str, Any]:
        """The Robin rows as the core's keywords (``x_bc``, ``n_bc``, ``alpha_bc``, ``g_bc``; none
        when there are no Robin points): the one place a training set names them."""
        if not len(self.x_bc):
            return {}
        return dict(x_bc=self.x_bc, n_bc=self.n_bc, alpha_bc=self.alpha, g_bc=self.g)

    def to_core(self, dtype: Any = np.float32) -> Batch:
        """The same as :meth:`to_batch` (its older name): a Batch is also the mapping of the
        keywords of ``Workspace.value_and_grad``, so ``**ts.to_core(dtype)`` still works."""
        return self.to_batch(dtype)

    def weigh(self, weight: NDArray[np.float64]) -> None:
        """Apply the PDE points' importance weights ``w``: ``sqrt(w)`` on every PDE coefficient
        (``a_pde``, ``b_pde``, ``kappa``, ``f``), so that each residual's ``|r|²`` counts w times
        (the Laplacian's a = 1, b = 0 made explicit where the set had none); kept in
        ``pde_weight``."""
        root = np.sqrt(weight)
        if self.a_pde is None:
            self.a_pde = np.ones(self.x_pde.shape, np.complex128)
            self.b_pde = np.zeros(self.x_pde.shape, np.complex128)
        self.a_pde = self.a_pde * root[:, None]
        self.b_pde = self.b_pde * root[:, None]
        self.kappa = self.kappa * root
        self.f = None if self.f is None else self.f * root
        self.pde_weight = weight
