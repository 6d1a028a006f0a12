// helmpinn/runtime.hpp: what this build of helmpinn can do, and its thread count.
#pragma once

#include <string>

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
/// Why cuda_device_count() is 0: the failing cudaGetDeviceCount's error (name and text), "no
/// CUDA device found", or "helmpinn was built without CUDA support"; empty when there are devices.
std::string cuda_device_error();
/// The CPU kernel set in use. A dispatching build (the default with GCC on x86-64) compiles
/// three and picks the best one the processor supports at first use: "avx512", "avx2" or
/// "baseline"; the environment variable HELMPINN_CPU_ISA forces one of them (then "invalid"
/// when it names none the processor supports, and creating a CPU Workspace throws
/// std::invalid_argument saying why). A native build (HELMPINN_NATIVE) has one set, named after
/// the instruction set it was compiled for ("avx512", "avx2", "avx", "sse2", ...).
const char* cpu_isa();
/// The kernel sets this build has, comma-separated: "baseline,avx2,avx512" or "native".
const char* cpu_kernel_sets();

}  // namespace helmpinn
