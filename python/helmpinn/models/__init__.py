"""The networks the run loop trains.

- :mod:`~helmpinn.models.model`: :class:`Model`, one Fourier-feature MLP (the compiled core's
  network, its parameters and files);
- :mod:`~helmpinn.models.decomposition`: :class:`DecomposedModel`, networks on overlapping
  subdomains (FBPINNs), their rows and residuals;
- :mod:`~helmpinn.models.model_protocol`: :class:`TrainableModel`, what the run loop asks of a
  model (both of the above have it), and :func:`load_model`, which reads either kind's file.
"""
from .model import Model
from .decomposition import DecomposedModel
from .model_protocol import TrainableDecomposedModel, TrainableModel, check_trainable, load_model, trainable

__all__ = ["Model", "DecomposedModel", "TrainableModel", "check_trainable", "load_model",
           "TrainableDecomposedModel", "trainable"]
