// helmpinn/device.hpp: where a call's memory lives and runs. No CUDA types: a CUDA stream
// crosses the API as a void* (a cudaStream_t; nullptr = the default stream).
#pragma once

namespace helmpinn {

/// Device::cpu: host memory, OpenMP threads. Device::cuda: CUDA device memory, CUDA kernels.
enum class Device { cpu, cuda };

}  // namespace helmpinn
