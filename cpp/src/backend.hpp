// The one internal interface every device implements (CPU: cpu/, CUDA: cuda/).
// Workspace<T> validates its arguments and forwards to a Backend<T>; backends assume valid input.
#pragma once

#include <cstddef>
#include <memory>

#include "helmpinn/workspace.hpp"

namespace helmpinn {

template <typename T>
class Backend {
public:
    virtual ~Backend() = default;
    virtual const WorkspaceBuffers<T>& buffers() const = 0;
    virtual std::size_t memory_bytes() const = 0;
    virtual void forward(const T* params, const T* x, std::size_t n, int derivatives, T* u,
                         T* grad_u, T* lap_u, void* stream) = 0;
    virtual LossBreakdown value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                         void* stream) = 0;
    virtual void zero_grad(void* stream) = 0;
};

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(const ModelSpec& spec, std::size_t batch_size);

/// Defined in cuda/ when CUDA is enabled, else by cuda_stub.cpp (which throws).
template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend(const ModelSpec& spec, std::size_t batch_size,
                                              int device_id);

}  // namespace helmpinn
