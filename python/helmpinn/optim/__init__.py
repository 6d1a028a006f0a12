"""The optimisers over a flat parameter vector.

- :mod:`helmpinn.optim.first_order`: :class:`Adam` (the fused C++ step, with a learning-rate
  :class:`Schedule`) and :func:`lbfgs` (SciPy's L-BFGS-B in float64).
- :mod:`helmpinn.optim.damped`: the one damped Gauss-Newton (Levenberg-Marquardt) step, its
  trial loop, λ rule, geodesic acceleration and backtracking, with the step's record
  (:class:`StepRecord`, :class:`StepStatus`) and the one exception for a non-finite loss
  (:class:`NonFiniteLoss`). The two optimisers below differ only in the linear solve they pass it.
- :mod:`helmpinn.optim.lm`: :class:`LevenbergMarquardt` on one network's residuals (dense normal
  equations, their dual form, or CG).
- :mod:`helmpinn.optim.gauss_newton`: :class:`MatrixFreeGN` on a decomposed model's residuals
  (CG with a two-level Schwarz preconditioner).
"""
from .damped import UPDATES, NonFiniteLoss, StepRecord, StepStatus, next_damping
from .first_order import (SCHEDULES, Adam, AdamSettings, LBFGSResult, Schedule, constant, cosine, exponential,
                          lbfgs, make_schedule, minimize_lbfgs)
from .lm import LevenbergMarquardt
from .gauss_newton import MatrixFreeGN

__all__ = ["Adam", "AdamSettings", "Schedule", "constant", "exponential", "cosine", "make_schedule", "SCHEDULES",
           "lbfgs", "minimize_lbfgs", "LBFGSResult", "LevenbergMarquardt", "MatrixFreeGN", "StepRecord",
           "StepStatus", "NonFiniteLoss", "UPDATES", "next_damping"]
