"""The engine's level: the compiled core's types and primitives, by one name.

What the rest of the package builds on, for code that drives the engine directly: the network's
layout (:class:`ModelSpec`), the fused loss and derivatives (:class:`Workspace`,
:class:`LossBreakdown`), device buffers (:class:`DeviceArray`), the primitives the project
started from (``mse_backward``, ``layer_backward``, ``fourier_backward`` and the fused
``adam_step``, each with an ``out=`` form), and what the build and the machine offer (threads,
instruction sets, CUDA). They live in :mod:`helmpinn._core` (C++, bindings in cpp/bindings/);
this module gives them a public home apart from the training layer's ``hp.solve``. The top-level
namespace still answers the same names (``hp.ModelSpec``, ``hp.mse_backward``, ...) for the code
written before; the primitives are not in its ``__all__``.

Cython code declares the same C++ API with ``from helmpinn.core cimport ...``
(``helmpinn/core.pxd``, beside this module).
"""
from ._core import (
    DeviceArray,
    LossBreakdown,
    ModelSpec,
    Workspace,
    adam_step,
    cpu_isa,
    cpu_kernel_sets,
    cuda_device_count,
    cuda_device_error,
    fourier_backward,
    get_num_threads,
    has_cuda,
    has_openmp,
    layer_backward,
    mse_backward,
    set_num_threads,
)

__all__ = ["DeviceArray", "LossBreakdown", "ModelSpec", "Workspace", "adam_step", "cpu_isa", "cpu_kernel_sets",
           "cuda_device_count", "cuda_device_error", "fourier_backward", "get_num_threads", "has_cuda",
           "has_openmp", "layer_backward", "mse_backward", "set_num_threads"]
