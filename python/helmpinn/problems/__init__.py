"""Helmholtz problems and what they are made of.

- :mod:`~helmpinn.problems.problem`: :class:`~helmpinn.problems.problem.Problem` (``Δu + κu = f``
  in a domain, with boundary conditions per part), made of three parts: its medium
  (:mod:`~helmpinn.problems.medium`: κ, the operator's coefficients, the background field), its
  source terms (:mod:`~helmpinn.problems.source_terms`) and its sampler
  (:mod:`~helmpinn.problems.sampler`: where and how its points are drawn);
- :mod:`~helmpinn.problems.conditions`: the boundary conditions (``Dirichlet``, ``Robin``,
  ``Neumann``, ``Sommerfeld``);
- :mod:`~helmpinn.problems.training_set`: ``TrainingSet``, one draw of a problem's points
  with what the loss needs there;
- :mod:`~helmpinn.problems.geometry`: domains, their boundary parts and sampling;
- :mod:`~helmpinn.problems.pml`: the PML and the general operator's coefficients;
- :mod:`~helmpinn.problems.corners`: a polygon's corners, the rows that keep their residual from
  radiating;
- :mod:`~helmpinn.problems.media`: media on grids (:class:`~helmpinn.problems.media.GridField`);
- :mod:`~helmpinn.problems.sources`: point sources, the free-space source;
- :mod:`~helmpinn.problems.batch`: :class:`~helmpinn.problems.batch.Batch`, the points and rows
  the core reads;
- :mod:`~helmpinn.problems.builtin`, :mod:`~helmpinn.problems.scattering`,
  :mod:`~helmpinn.problems.waves`: the built-in problems, and
  :mod:`~helmpinn.problems.registry`: them by name (``helmpinn.get_problem``).

The package's own names (``from helmpinn.problems import Problem, Dirichlet, ...``) are those
the problem module used to hold; the registry's are not among them (``helmpinn.get_problem``, or
:mod:`helmpinn.problems.registry`).
"""
from .conditions import Dirichlet, Neumann, Robin, Sommerfeld
from .problem import Problem
from .training_set import TrainingSet, complex_to_pairs, pairs_to_complex

__all__ = ["Dirichlet", "Robin", "Neumann", "Sommerfeld", "Problem", "TrainingSet", "complex_to_pairs",
           "pairs_to_complex"]
