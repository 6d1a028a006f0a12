"""The run loop's model protocol, and a domain-decomposed model that has it.

**The model protocol.** The run loop trains any model with ``params`` (a float vector updated in
place), ``predict``, ``save(path, optimizer_state=, metadata=)`` / ``load``, ``copy``,
``params_host`` / ``set_params``, ``optimizer_state``, ``metadata``, ``device`` / ``to``,
``dtype``, ``in_dim`` and ``num_params``: :class:`helmpinn.Model` has them, and
:class:`TrainableDecomposedModel` adds them to a
:class:`~helmpinn.decomposition.DecomposedModel` (float64, CPU). A ``Trainer`` given a plain
``DecomposedModel`` trains it through :meth:`TrainableDecomposedModel.wrap`, which shares its
state (the same parameters, trained in place). A decomposed model computes its own loss
(:meth:`TrainableDecomposedModel.loss_function`), so the Trainer makes no core workspace for it.
Its file is the decomposition's ``.npz`` (:data:`helmpinn.decomposition.FORMAT`), the
optimiser state under the metadata key ``"optimizer_state"``; :func:`load_model` reads either
kind of file.

:func:`trainable` gives a model the protocol where it lacks it (the Trainer calls it on what it
is given); :func:`term_means` turns a decomposed model's weighted sums into the unweighted term
means a step reports.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable, ClassVar, Mapping

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import distributed
from .batch import TERMS
from .decomposition import FORMAT, DecomposedModel, Rows
from .model import Model

__all__ = ["TrainableDecomposedModel", "trainable", "load_model", "term_means", "STATE_KEY"]

#: The metadata key under which a decomposed model's file keeps its optimiser state.
STATE_KEY = "optimizer_state"


def _jsonable(obj: Any) -> Any:
    """``obj`` with NumPy scalars and arrays as JSON numbers and lists (complex as [re, im])."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, complex):
        return [obj.real, obj.imag]
    return obj


class TrainableDecomposedModel(DecomposedModel):
    """A :class:`~helmpinn.decomposition.DecomposedModel` with the run loop's model protocol
    (module docstring): float64 on the CPU, its optimiser state kept in its file's metadata.
    Construct it as a ``DecomposedModel`` (``create``, ``load``) or wrap one with :meth:`wrap`."""

    #: The optimiser a Trainer runs on it when none is named.
    default_optimizer: ClassVar[str] = "gn"

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.optimizer_state = dict(self.metadata.pop(STATE_KEY, None) or {})

    @classmethod
    def wrap(cls, model: DecomposedModel) -> "TrainableDecomposedModel":
        """``model`` itself if it is one already, else a view of it with this protocol that
        shares its state (the same parameter vector and metadata: training it trains ``model``)."""
        if isinstance(model, cls):
            return model
        if not isinstance(model, DecomposedModel):
            raise TypeError(f"model: expected a helmpinn.decomposition.DecomposedModel, got {type(model).__name__}")
        view = cls.__new__(cls)
        view.__dict__ = model.__dict__
        if "optimizer_state" not in view.__dict__:
            view.optimizer_state = dict(view.metadata.pop(STATE_KEY, None) or {})
        return view

    @property
    def device(self) -> str:
        return "cpu"

    @property
    def dtype(self) -> np.dtype:
        return self.params.dtype

    def to(self, device: str) -> "TrainableDecomposedModel":
        if device != "cpu":
            raise ValueError(f"device: a decomposed model trains on the CPU (its products are host "
                             f"arrays), got {device!r}; use device='cpu'")
        return self

    def params_host(self) -> NDArray[np.float64]:
        """A copy of the parameters."""
        return self.params.copy()

    def set_params(self, values: ArrayLike) -> None:
        """Overwrite the parameters in place."""
        values = np.asarray(values, np.float64)
        if values.shape != self.params.shape:
            raise ValueError(f"set_params: expected shape {self.params.shape}, got {values.shape}")
        self.params[...] = values

    def copy(self) -> "TrainableDecomposedModel":
        """An independent copy (parameters, metadata and optimiser state)."""
        return type(self)(self.levels, self.specs, self.params.copy(), self.constraint,
                          {**json.loads(json.dumps(_jsonable(self.metadata))),
                           STATE_KEY: _jsonable(self.optimizer_state)})

    def save(self, path: str | os.PathLike, *, optimizer_state: Mapping[str, Any] | None = None,
             metadata: Mapping[str, Any] | None = None) -> None:
        """Write the model (the decomposition's format) with ``optimizer_state`` and ``metadata``
        (default: its own) in the metadata, atomically; the folder is created if needed."""
        state = self.optimizer_state if optimizer_state is None else optimizer_state
        meta = self.metadata if metadata is None else metadata
        os.makedirs(os.path.dirname(os.path.abspath(os.fspath(path))), exist_ok=True)
        own = self.metadata
        self.metadata = _jsonable({**meta, STATE_KEY: dict(state)})
        try:
            super().save(path)
        finally:
            self.metadata = own

    def loss_function(self, training_set: Any, weights: Mapping[str, float]) -> Callable[[NDArray], float]:
        """``θ -> loss`` on the points of ``training_set`` with ``weights`` (the core's loss:
        each term's weight times its mean squared residual)."""
        res = self.training_residuals(training_set, weights)
        return lambda theta: float(np.sum(res.residuals(theta) ** 2))

    def training_rows(self, training_set: Any, weights: Mapping[str, float]) -> Rows:
        """The rows of the points ``training_set`` with ``weights``; with a hard constraint,
        without the data rows that it satisfies identically (zero data where φ = 0: their
        residuals and gradients are zero, so the loss is the same)."""
        rows = Rows.from_training_set(training_set, weights)
        if self.constraint is None or not np.any(rows.term == "data"):
            return rows
        phi = np.ones(len(rows))
        data = rows.term == "data"
        phi[data] = self.constraint(rows.x[data])[0]
        keep = ~(data & (phi == 0) & (rows.f == 0))
        return Rows(*(getattr(rows, k)[keep] for k in ("x", "a", "b", "c", "f", "term")))

    def training_residuals(self, training_set: Any, weights: Mapping[str, float], comm: Any = None,
                           modes: Callable[[Rows], Any] | None = None) -> Any:
        """The :class:`~helmpinn.decomposition.DecomposedResiduals` of :meth:`training_rows`,
        with ``modes(rows)``'s mode rows where given (None: none; ``modes`` may also return
        ``(more, M)``: rows of its own, appended after the points', and M over all of them).
        Over MPI (``comm`` of several ranks, ``training_set`` this rank's share of a run's
        points) every rank holds every rank's points
        (:func:`helmpinn.distributed.gather_training_set`) and its own subdomains
        (``residuals_for(rows, comm=)``): the subdomains, not the points, are split."""
        comm = comm if comm is not None and comm.Get_size() > 1 else None
        if comm is not None:
            training_set = distributed.gather_training_set(comm, training_set)
        rows = self.training_rows(training_set, weights)
        m = None if modes is None else modes(rows)
        if isinstance(m, tuple):   # rows of their own for the mode rows, after the points'
            more, m = m
            rows = Rows.concat([rows, more])
        return self.residuals_for(rows, comm=comm, modes=m)

    def objective(self, training_set: Any, weights: Mapping[str, float], comm: Any = None
                  ) -> Callable[[NDArray, NDArray], tuple[float, dict[str, float]]]:
        """The loss on a run's points and its gradient, for an optimiser that needs only these
        (Adam, :class:`helmpinn.training.drivers.AdamDriver`): ``value_and_grad(θ, grad) -> (loss,
        terms)``, the loss ``Σ r²`` of :meth:`training_residuals`' ``r``, its gradient
        ``2 Jᵀr`` (one core ``vjp`` per subnetwork) written into ``grad``, and each term's
        unweighted mean. Over MPI the same numbers on every rank (the residuals are summed over
        the ranks, the gradient's ranges gathered)."""
        res = self.training_residuals(training_set, weights, comm)

        def value_and_grad(theta: NDArray, grad: NDArray) -> tuple[float, dict[str, float]]:
            r = res.residuals(theta)
            g = res.gather(res.vjp(theta, r))
            np.multiply(g, 2.0, out=grad)
            return float(r @ r), term_means(res.term_losses(r), weights)

        return value_and_grad


def term_means(sums: Mapping[str, float], weights: Mapping[str, float]) -> dict[str, float]:
    """Each term's unweighted mean (what a :class:`~helmpinn.training.drivers.StepInfo` reports) from
    its weighted sum of squared residuals ``sums`` (a term without rows: 0)."""
    return {t: float(sums.get(t, 0.0)) / weights[t] if weights[t] > 0 else 0.0 for t in TERMS}


def trainable(model: Any) -> Any:
    """``model`` with the run loop's model protocol: a plain ``DecomposedModel`` through
    :meth:`TrainableDecomposedModel.wrap`, anything else as it is."""
    if isinstance(model, DecomposedModel) and not isinstance(model, TrainableDecomposedModel):
        return TrainableDecomposedModel.wrap(model)
    return model


def load_model(path: str | os.PathLike) -> Any:
    """The model in ``path``: a :class:`TrainableDecomposedModel` for a decomposed model's file,
    else :meth:`helmpinn.Model.load`'s (ValueError naming the file when it is neither)."""
    kind = None
    if os.path.isfile(path):   # (a FIFO or device is never opened here: Model.load refuses it)
        try:
            with np.load(os.fspath(path), allow_pickle=False) as z:
                kind = json.loads(str(z["config"])).get("kind") if "config" in z.files else None
        except Exception:   # noqa: BLE001 - not a decomposed model's file: Model.load names what is wrong
            kind = None
    if kind == FORMAT:
        return TrainableDecomposedModel.load(path)
    return Model.load(path)
