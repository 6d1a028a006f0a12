// has_cuda() and cuda_device_count() of a build with the CUDA backend. With the static CUDA
// runtime, a machine without a driver or a GPU makes cudaGetDeviceCount fail: that is 0 devices.
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

}  // namespace helmpinn
