// Small host-side helpers of the CUDA backend: error checks that throw (never abort), the guard
// that makes the workspace's device current for the duration of a call and typed owning device
// buffers (both the core runtime's, helmpinn/runtime.hpp), and pinned host buffers. Nothing here launches kernels; the two macros below are how kernels are launched and
// reach their dynamic shared memory, so that the CPU emulation (HELMPINN_CUDA_EMULATION, for
// tests: emulation/cuda_emulation.hpp) can replace them.
#pragma once

#if defined(HELMPINN_CUDA_EMULATION)
#include "emulation/cuda_emulation.hpp"
#else
#include <cuda_runtime.h>
#define HELMPINN_LAUNCH(kernel, grid, block, smem, stream) kernel<<<grid, block, smem, stream>>>
#define HELMPINN_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

#include "helmpinn/runtime.hpp"

namespace helmpinn {
namespace cuda {

/// Throws std::runtime_error("helmpinn CUDA: <what>: <cuda error>") when e is not cudaSuccess.
/// The runtime's last-error state is cleared so that a later call does not see a stale error.
inline void check(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return;
    (void)cudaGetLastError();
    throw std::runtime_error(std::string("helmpinn CUDA: ") + what + ": " + cudaGetErrorName(e) +
                             " (" + cudaGetErrorString(e) + ")");
}

/// Makes `device` current and restores the caller's device on exit: the core's DeviceScope
/// (helmpinn/runtime.hpp, runtime_cuda.cu), the one device guard of the library.
using DeviceGuard = ::helmpinn::DeviceScope;

/// cudaMalloc'd memory of the current device, freed on destruction: a typed DeviceBuffer
/// (helmpinn/runtime.hpp). Allocated once, at workspace construction.
template <typename T>
class DeviceArray {
public:
    void allocate(std::size_t n, const char* what) {
        buf_.reset();
        if (n == 0) return;
        int device = 0;
        check(cudaGetDevice(&device), "cudaGetDevice");
        try {
            buf_ = DeviceBuffer(n * sizeof(T), device);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string("helmpinn CUDA Workspace: cannot allocate ") + what +
                                     " (" + std::to_string(n * sizeof(T)) + " bytes): " + e.what());
        }
    }
    void reset() { buf_.reset(); }
    T* data() const { return static_cast<T*>(buf_.data()); }
    std::size_t size() const { return buf_.bytes() / sizeof(T); }
    std::size_t bytes() const { return buf_.bytes(); }

private:
    DeviceBuffer buf_;
};

/// cudaMallocHost'd (pinned) memory for the few values that come back to the host.
template <typename T>
class PinnedArray {
public:
    PinnedArray() = default;
    ~PinnedArray() {
        if (p_) (void)cudaFreeHost(p_);
    }
    PinnedArray(const PinnedArray&) = delete;
    PinnedArray& operator=(const PinnedArray&) = delete;
    void allocate(std::size_t n, const char* what) {
        void* p = nullptr;
        check(cudaMallocHost(&p, n * sizeof(T)), what);
        p_ = static_cast<T*>(p);
    }
    T* data() const { return p_; }

private:
    T* p_ = nullptr;
};

}  // namespace cuda
}  // namespace helmpinn
