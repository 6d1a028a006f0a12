"""helmpinn: exact, fused physics-informed neural networks for the Helmholtz equation.

The compiled core (``helmpinn._core``) computes a Fourier-feature tanh MLP's value, gradient and
Laplacian and the exact gradient of the PDE/data/Robin loss in one fused pass; this package
re-exports it and adds initialisation, problems, training and a CLI on top.
"""
from ._core import __version__
from . import core
# the engine's names by their short names too (hp.ModelSpec, hp.Workspace, ...); the seed's
# primitives (mse_backward, layer_backward, fourier_backward, adam_step) are helmpinn.core's,
# answered here for the code written before but left out of __all__
from .core import (DeviceArray, LossBreakdown, ModelSpec, Workspace, adam_step, cpu_isa, cpu_kernel_sets,
                   cuda_device_count, cuda_device_error, fourier_backward, get_num_threads, has_cuda, has_openmp,
                   layer_backward, mse_backward, set_num_threads)
from ._compat import find_moved_modules
from ._cxx import get_build_flags, get_cmake_dir, get_include, get_library_dir
from .params import init_params
from .problems.batch import Batch
from . import distributed
from .models.model import Model
from .optim import Adam, LevenbergMarquardt, lbfgs
from .problems import Dirichlet, Neumann, Problem, Robin, Sommerfeld
from .problems.registry import get_problem, list_problems
from .problems.pml import PML
from .training.trainer import Trainer, default_settings
from .problems.media import GridField
from .problems.sources import FreeSpaceSource, PointSource
from . import receivers
from . import defaults, training
from .training import RunPlan, RunStatus, run_plan
from .training import drivers
from .solving import Solution, solve
from .estimate import estimate_error
from .survey import Survey
from .inversion import Inversion, invert
# the subpackages' modules by their short names, as before they moved (hp.geometry.Box, hp.waves, ...)
from .problems import batch, builtin, geometry, media, pml, registry, scattering, sources, waves
from .models import decomposition, model, model_protocol

find_moved_modules()   # the modules that moved into helmpinn.problems / helmpinn.models, by their old names

__all__ = [
    "Adam",
    "Batch",
    "Dirichlet",
    "LevenbergMarquardt",
    "Model",
    "Neumann",
    "PML",
    "Problem",
    "Robin",
    "Sommerfeld",
    "Trainer",
    "default_settings",
    "distributed",
    "geometry",
    "get_problem",
    "lbfgs",
    "list_problems",
    "DeviceArray",
    "LossBreakdown",
    "ModelSpec",
    "Workspace",
    "__version__",
    "core",
    "cpu_isa",
    "cpu_kernel_sets",
    "cuda_device_count",
    "cuda_device_error",
    "get_build_flags",
    "get_cmake_dir",
    "get_include",
    "get_library_dir",
    "get_num_threads",
    "has_cuda",
    "has_openmp",
    "init_params",
    "set_num_threads",
    "GridField",
    "PointSource",
    "FreeSpaceSource",
    "receivers",
    "defaults",
    "drivers",
    "training",
    "RunPlan",
    "RunStatus",
    "run_plan",
    "Solution",
    "solve",
    "estimate_error",
    "Survey",
    "Inversion",
    "invert",
]
