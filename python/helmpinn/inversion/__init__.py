"""Physics-informed waveform inversion: the medium from receiver data (:func:`invert`).

A floor above the models and optimisers: it uses the problems, the models, the core's exact
residual Jacobians and the LM machinery of :mod:`helmpinn.optim.lm`; nothing below imports it.

- :mod:`~helmpinn.inversion.medium`: the medium ``m = 1/v²`` as a cubic B-spline
  (:class:`SplineMedium`), its sparse basis and its gradient regularisation;
- :mod:`~helmpinn.inversion.joint`: the joint residual of all wavefields and the medium, and its
  exact Jacobian (:class:`WavefieldRows`, :class:`JointResiduals`);
- :mod:`~helmpinn.inversion.solver`: LM on it, the block-arrowhead normal equations solved by
  eliminating the wavefields (:class:`ArrowheadLM`), its trials the one damped step of
  :mod:`helmpinn.optim.damped`;
- :mod:`~helmpinn.inversion.parallel`: the wavefields split over MPI ranks, the medium's sums
  reduced (:class:`Ranks`);
- :mod:`~helmpinn.inversion.api`: :func:`invert`, frequency continuation and warm starts,
  callbacks, continuing a stopped run;
- :mod:`~helmpinn.inversion.result`: :class:`Inversion`, the result (save/load, figure).
"""
from .api import invert, velocity_error
from .joint import JointResiduals, WavefieldRows
from .medium import SplineMedium
from .result import Inversion
from .solver import ArrowheadLM

__all__ = ["invert", "velocity_error", "Inversion", "SplineMedium", "JointResiduals", "WavefieldRows",
           "ArrowheadLM"]
