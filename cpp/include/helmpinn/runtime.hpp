// helmpinn/runtime.hpp: what this build of helmpinn can do, and its thread count.
#pragma once

namespace helmpinn {

/// Version string of the library ("MAJOR.MINOR.PATCH").
const char* version();
/// True when the library was compiled with OpenMP.
bool has_openmp();
/// Threads the CPU backend uses (OpenMP max threads; 1 without OpenMP).
int get_num_threads();
/// Sets the CPU backend's thread count (omp_set_num_threads: it applies to parallel work started
/// from the calling thread). Throws std::invalid_argument if n < 1; no effect without OpenMP.
void set_num_threads(int n);
/// True when the library was compiled with its CUDA backend.
bool has_cuda();
/// Number of CUDA devices visible (0 without CUDA support or without a GPU).
int cuda_device_count();
/// Name of the vector instruction set the CPU kernels were compiled for ("avx512", "avx2", ...).
const char* cpu_isa();

}  // namespace helmpinn
