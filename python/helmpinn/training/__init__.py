"""Training: the run loop and the optimisers' drivers.

- :mod:`~helmpinn.training.trainer`: :class:`Trainer`, the run loop (points, history,
  evaluations, checkpoints, stops) and :class:`History`;
- :mod:`~helmpinn.training.drivers`: the :class:`~helmpinn.training.drivers.Driver` interface
  and the drivers of Adam, L-BFGS and Levenberg-Marquardt, each owning its optimiser's state;
- :mod:`~helmpinn.training.dd_driver`: the decomposition's Gauss-Newton driver and its default
  sizing.
"""
from .trainer import History, Trainer

__all__ = ["Trainer", "History"]
