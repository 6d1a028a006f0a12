"""The run loop's model protocol (:class:`TrainableModel`), and reading either kind of model file.

**The protocol.** A :class:`~helmpinn.Trainer` trains any object that has the members of
:class:`TrainableModel`, and asks it nothing else (it never checks the model's class):

- its state: ``params`` (one float vector, trained in place), ``optimizer_state`` and
  ``metadata`` (dicts that a checkpoint writes with it);
- where it lives: ``device``, ``to(device)``, ``dtype``, ``in_dim``, ``num_params``,
  ``params_host()``, ``set_params(values)``;
- ``predict(x)`` (the error on the test grid) and ``save(path, optimizer_state=, metadata=)``
  (checkpoints);
- what trains it: ``kind``, the name the optimiser drivers' ``trains`` use
  (:func:`helmpinn.training.drivers.mismatch` refuses a driver that does not train that kind), and
  ``default_optimizer`` (what ``Trainer.fit`` runs when none is named);
- its loss. Either it is one core network (``spec`` a :class:`~helmpinn.ModelSpec`): the loop
  computes the loss and gradient on a core workspace of its own, and ``objective`` and
  ``loss_function`` return None. Or it computes its own (``spec`` None):
  ``objective(training_set, weights, comm)`` returns ``value_and_grad(θ, grad) -> (loss,
  terms)`` on a run's points (what Adam steps on), ``loss_function(training_set, weights)``
  returns ``θ -> loss`` (the validation loss).

:class:`helmpinn.Model` (kind "network") and
:class:`~helmpinn.models.decomposition.DecomposedModel` (kind "decomposed", its own loss)
implement it. A driver may ask more of the kinds it trains: L-BFGS and Levenberg-Marquardt a
network's ``spec``, Gauss-Newton a decomposed model's ``training_residuals``. Why a protocol: what
differs between kinds of model is asked of the model, so the loop has no branch per kind, and a
new kind of model (with Adam, which needs only the loss and its gradient) is a new class, not a
change in :mod:`helmpinn.training`.

:func:`check_trainable` is the Trainer's check (a TypeError naming the members a model lacks);
:func:`load_model` reads either kind of model file. The old names ``TrainableDecomposedModel``
(every ``DecomposedModel`` has the protocol now) and ``trainable`` still work, with a
DeprecationWarning.
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any, Callable, Mapping, Protocol, runtime_checkable

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .decomposition import FORMAT, STATE_KEY, DecomposedModel, term_means
from .model import Model

__all__ = ["TrainableModel", "MEMBERS", "check_trainable", "load_model", "term_means", "STATE_KEY",
           "TrainableDecomposedModel", "trainable"]


@runtime_checkable
class TrainableModel(Protocol):
    """What the run loop asks of a model (module docstring); ``isinstance(m, TrainableModel)``
    checks that ``m`` has every member."""

    #: The kind of model, as the drivers' ``trains`` name it ("network", "decomposed", or a
    #: new kind's own name).
    kind: str
    #: The optimiser ``Trainer.fit`` runs when none is named ("adam", "gn", ...).
    default_optimizer: str
    #: The core's ModelSpec of a model that is one core network (its loss computed by the
    #: loop), None for a model that computes its own loss.
    spec: Any
    #: The parameters: one float vector, trained in place.
    params: Any
    optimizer_state: dict[str, Any]
    metadata: dict[str, Any]

    @property
    def device(self) -> str: ...

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def in_dim(self) -> int: ...

    @property
    def num_params(self) -> int: ...

    def to(self, device: str) -> Any: ...

    def params_host(self) -> NDArray: ...

    def set_params(self, values: ArrayLike) -> None: ...

    def predict(self, x: ArrayLike) -> NDArray: ...

    def save(self, path: str | os.PathLike, *, optimizer_state: Mapping[str, Any] | None = None,
             metadata: Mapping[str, Any] | None = None) -> None: ...

    def objective(self, training_set: Any, weights: Mapping[str, float], comm: Any = None
                  ) -> Callable[[Any, Any], tuple[float, dict[str, float]]] | None: ...

    def loss_function(self, training_set: Any, weights: Mapping[str, float]) -> Callable[[Any], float] | None: ...


#: The members of :class:`TrainableModel`, in the order :func:`check_trainable` names them.
MEMBERS = ("kind", "default_optimizer", "spec", "params", "optimizer_state", "metadata", "device", "dtype",
           "in_dim", "num_params", "to", "params_host", "set_params", "predict", "save", "objective",
           "loss_function")


def check_trainable(model: Any, where: str = "Trainer") -> None:
    """A TypeError (naming ``where``, the argument ``model`` and each member it lacks) unless
    ``model`` has every member of :class:`TrainableModel`."""
    missing = [name for name in MEMBERS if not hasattr(model, name)]
    if missing:
        raise TypeError(f"{where}: model: expected a model with the run loop's protocol "
                        f"(helmpinn.models.model_protocol.TrainableModel), but the {type(model).__name__} "
                        f"given lacks {', '.join(missing)}")


def load_model(path: str | os.PathLike) -> Any:
    """The model in ``path``: a :class:`~helmpinn.models.decomposition.DecomposedModel` for a
    decomposed model's file, else :meth:`helmpinn.Model.load`'s (ValueError naming the file when
    it is neither)."""
    kind = None
    if os.path.isfile(path):   # (a FIFO or device is never opened here: Model.load refuses it)
        try:
            with np.load(os.fspath(path), allow_pickle=False) as z:
                kind = json.loads(str(z["config"])).get("kind") if "config" in z.files else None
        except Exception:   # noqa: BLE001 - not a decomposed model's file: Model.load names what is wrong
            kind = None
    if kind == FORMAT:
        return DecomposedModel.load(path)
    return Model.load(path)


# -- the old names ---------------------------------------------------------------------------------
def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"helmpinn.models.model_protocol.{old} is deprecated: {new}", DeprecationWarning, stacklevel=3)


class TrainableDecomposedModel(DecomposedModel):
    """Deprecated: every :class:`~helmpinn.models.decomposition.DecomposedModel` has the run
    loop's protocol now; make one of those (``DecomposedModel(...)``, ``create``, ``load``)."""

    def __init__(self, *args: Any, **kwargs: Any):
        _deprecated("TrainableDecomposedModel", "every DecomposedModel has the run loop's protocol now; "
                                                "use helmpinn.models.decomposition.DecomposedModel")
        super().__init__(*args, **kwargs)

    @classmethod
    def wrap(cls, model: DecomposedModel) -> DecomposedModel:
        """Deprecated: ``model`` itself (it has the protocol already)."""
        _deprecated("TrainableDecomposedModel.wrap", "a DecomposedModel has the run loop's protocol itself; "
                                                     "use the model as it is")
        if not isinstance(model, DecomposedModel):
            raise TypeError(f"model: expected a helmpinn.models.decomposition.DecomposedModel, got {type(model).__name__}")
        return model


def trainable(model: Any) -> Any:
    """Deprecated: ``model`` as it is (a ``DecomposedModel`` has the protocol itself now; the
    Trainer checks a model with :func:`check_trainable`)."""
    _deprecated("trainable", "every model the Trainer takes has the run loop's protocol itself; use the model "
                             "as it is (check_trainable checks one)")
    return model
