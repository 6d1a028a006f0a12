// Small host-side helpers of the CUDA backend: error checks that throw (never abort), a guard
// that makes the workspace's device current for the duration of a call, and an owning device
// buffer. Nothing here launches kernels; the two macros below are how kernels are launched and
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

/// Makes `device` current and restores the caller's device on exit.
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        check(cudaGetDevice(&prev_), "cudaGetDevice");
        if (prev_ != device) check(cudaSetDevice(device), "cudaSetDevice");
        changed_ = prev_ != device;
    }
    ~DeviceGuard() {
        if (changed_) (void)cudaSetDevice(prev_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int prev_ = 0;
    bool changed_ = false;
};

/// cudaMalloc'd memory, freed on destruction. Allocated once, at workspace construction.
template <typename T>
class DeviceArray {
public:
    DeviceArray() = default;
    ~DeviceArray() { reset(); }
    DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
    DeviceArray& operator=(DeviceArray&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            n_ = std::exchange(o.n_, 0);
        }
        return *this;
    }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    void allocate(std::size_t n, const char* what) {
        reset();
        if (n == 0) return;
        void* p = nullptr;
        const cudaError_t e = cudaMalloc(&p, n * sizeof(T));
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            throw std::runtime_error(std::string("helmpinn CUDA Workspace: cannot allocate ") + what +
                                     " (" + std::to_string(n * sizeof(T)) + " bytes): " +
                                     cudaGetErrorString(e));
        }
        p_ = static_cast<T*>(p);
        n_ = n;
    }
    void reset() {
        if (p_) (void)cudaFree(p_);
        p_ = nullptr;
        n_ = 0;
    }
    T* data() const { return p_; }
    std::size_t size() const { return n_; }
    std::size_t bytes() const { return n_ * sizeof(T); }

private:
    T* p_ = nullptr;
    std::size_t n_ = 0;
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
