// has_cuda(), cuda_device_count() and cuda_device_error() of a build with the CUDA backend. With
// the static CUDA runtime a machine without a driver or a GPU makes cudaGetDeviceCount fail:
// cuda_device_count() says 0 and cuda_device_error() says why (no driver, a driver older than
// the runtime, a tool such as compute-sanitizer refusing the device, ...).
#include <string>

#include "cuda_common.cuh"
#include "helmpinn/runtime.hpp"

namespace helmpinn {

bool has_cuda() { return true; }

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

std::string cuda_device_error() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n > 0 ? std::string() : std::string("no CUDA device found");
    (void)cudaGetLastError();
    return std::string("cudaGetDeviceCount: ") + cudaGetErrorName(e) + " (" +
           cudaGetErrorString(e) + ")";
}

}  // namespace helmpinn
