"""Training: the run loop and the optimisers' drivers.

- :mod:`~helmpinn.training.trainer`: :class:`Trainer`, the run loop (points, history,
  evaluations, checkpoints, stops) and :class:`History`;
- :mod:`~helmpinn.training.drivers`: the :class:`~helmpinn.training.drivers.Driver` interface
  and the drivers of Adam, L-BFGS and Levenberg-Marquardt, each owning its optimiser's state;
- :mod:`~helmpinn.training.dd_driver`: the decomposition's Gauss-Newton driver and its default
  sizing;
- :mod:`~helmpinn.training.plan`: the run's plan (:class:`RunPlan`, made by :func:`run_plan`),
  from which ``hp.solve`` and ``helmpinn train`` build the model and the Trainer, and its phases
  (:func:`~helmpinn.training.plan.train`, :func:`~helmpinn.training.plan.polish`);
- :mod:`~helmpinn.training.status`: :class:`RunStatus`, how a fit ended.
"""
from .status import RunStatus
from .trainer import History, Trainer
from .plan import RunPlan, run_plan

__all__ = ["Trainer", "History", "RunStatus", "RunPlan", "run_plan"]
