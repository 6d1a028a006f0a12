// Which instruction set this compilation of the CPU kernels (cpu_backend.cpp, gemm.hpp,
// vmath.hpp) targets.
//
// A dispatching build (CMake HELMPINN_CPU_DISPATCH, the default with GCC on x86-64) compiles the
// kernels three times, with HELMPINN_CPU_LEVEL 0 (baseline x86-64: SSE2), 1 (AVX2 + FMA) and 2
// (AVX-512), and cpu/dispatch.cpp picks one at run time from what the processor supports (or
// HELMPINN_CPU_ISA). Each set's code lives in its own inline namespace (HELMPINN_CPU_KERNELS),
// so the three never share a symbol, and cpu_backend.cpp raises the target with
// `#pragma GCC target` only after every shared header is included: code outside the kernels
// (the standard library, the per-point math where it is not inlined) stays baseline code.
// Without HELMPINN_CPU_LEVEL there is one kernel set for the compiler's own flags
// (-march=native with HELMPINN_NATIVE).
#pragma once

#if defined(HELMPINN_CPU_LEVEL)
#if HELMPINN_CPU_LEVEL == 2
#define HELMPINN_CPU_KERNELS avx512
#define HELMPINN_CPU_VECTOR_BYTES 64
#elif HELMPINN_CPU_LEVEL == 1
#define HELMPINN_CPU_KERNELS avx2
#define HELMPINN_CPU_VECTOR_BYTES 32
#else
#define HELMPINN_CPU_KERNELS baseline
#define HELMPINN_CPU_VECTOR_BYTES 16
#endif
#else
#define HELMPINN_CPU_KERNELS native
#if defined(__AVX512F__)
#define HELMPINN_CPU_VECTOR_BYTES 64
#elif defined(__AVX__)
#define HELMPINN_CPU_VECTOR_BYTES 32
#else
#define HELMPINN_CPU_VECTOR_BYTES 16
#endif
#endif
