"""The networks the run loop trains.

- :mod:`~helmpinn.models.model`: :class:`Model`, one Fourier-feature MLP (the compiled core's
  network, its parameters and files);
- :mod:`~helmpinn.models.decomposition`: :class:`DecomposedModel`, networks on overlapping
  subdomains (FBPINNs), their rows and residuals;
- :mod:`~helmpinn.models.model_protocol`: what the run loop asks of a model, and
  :class:`TrainableDecomposedModel`, the decomposed model that has it.
"""
from .model import Model
from .decomposition import DecomposedModel
from .model_protocol import TrainableDecomposedModel, load_model, trainable

__all__ = ["Model", "DecomposedModel", "TrainableDecomposedModel", "load_model", "trainable"]
