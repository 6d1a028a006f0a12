"""Classical reference solvers beside the networks: :func:`fd_solve` (finite differences and a
sparse LU, :mod:`helmpinn.reference.fd`) and, on the same operator, adjoint-state full-waveform
inversion (:func:`fwi`, :mod:`helmpinn.reference.fwi`)."""
from .fd import (FDFactor, FDOperator, FDSolution, MediumJumpWarning, available_memory, check_memory,
                 fd_memory_estimate, fd_solve, lu_fill, stencil_weights)
from .fwi import FWIObjective, FWIResult, fwi

__all__ = ["fd_solve", "FDSolution", "FDOperator", "FDFactor", "MediumJumpWarning", "stencil_weights",
           "fd_memory_estimate", "check_memory", "available_memory", "lu_fill", "fwi", "FWIResult", "FWIObjective"]
