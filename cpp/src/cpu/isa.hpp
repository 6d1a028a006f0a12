// Which instruction set this compilation of the CPU kernels (cpu_backend.cpp, residuals.cpp:
// the sources marked "kernels" in host_sources.txt, with cpu_backend.hpp, gemm.hpp and
// vmath.hpp) targets.
//
// A dispatching build (CMake HELMPINN_CPU_DISPATCH, the default with GCC on x86-64) compiles the
// kernels once per entry of CMakeLists.txt's HELMPINN_CPU_KERNEL_SET_LIST (baseline x86-64,
// AVX2 + FMA, AVX-512), each with HELMPINN_CPU_KERNELS (its name) and, beyond the baseline,
// HELMPINN_CPU_TARGET (its GCC target string), and cpu/dispatch.cpp picks one at run time from
// what the processor supports (or HELMPINN_CPU_ISA). Each set's code lives in its own inline
// namespace (HELMPINN_CPU_KERNELS), so the sets never share a symbol, and the target is raised
// (HELMPINN_CPU_TARGET_BEGIN) only after every shared header is included: code outside the
// kernels (the standard library, the per-point math where it is not inlined) stays baseline
// code. Without HELMPINN_CPU_KERNELS there is one kernel set for the compiler's own flags
// (-march=native with HELMPINN_NATIVE).
#pragma once

#if !defined(HELMPINN_CPU_KERNELS)
#define HELMPINN_CPU_KERNELS native
#endif

#define HELMPINN_CPU_PRAGMA(x) _Pragma(#x)
#define HELMPINN_CPU_TARGET_PRAGMA(t) HELMPINN_CPU_PRAGMA(GCC target(t))

namespace helmpinn {
namespace cpu {

/// Whether the comma-separated GCC target string `target` names `feature`.
constexpr bool target_has(const char* target, const char* feature) {
    for (const char* p = target;; ++p) {
        const char* f = feature;
        while (*f && *p == *f) ++p, ++f;
        if (!*f && (*p == ',' || !*p)) return true;
        while (*p && *p != ',') ++p;
        if (!*p) return false;
    }
}

}  // namespace cpu
}  // namespace helmpinn

// HELMPINN_CPU_TARGET_BEGIN ... HELMPINN_CPU_TARGET_END: the kernel set's code, compiled for
// its target. HELMPINN_CPU_VECTOR_BYTES: the width of its vector registers (the matrix
// product's blocking), from the target's features or, for the native set, the compiler's.
#if defined(HELMPINN_CPU_TARGET)
#define HELMPINN_CPU_TARGET_BEGIN \
    _Pragma("GCC push_options") HELMPINN_CPU_TARGET_PRAGMA(HELMPINN_CPU_TARGET)
#define HELMPINN_CPU_TARGET_END _Pragma("GCC pop_options")
#define HELMPINN_CPU_VECTOR_BYTES                                     \
    (::helmpinn::cpu::target_has(HELMPINN_CPU_TARGET, "avx512f") ? 64 \
     : ::helmpinn::cpu::target_has(HELMPINN_CPU_TARGET, "avx2") ||    \
             ::helmpinn::cpu::target_has(HELMPINN_CPU_TARGET, "avx")  \
         ? 32                                                         \
         : 16)
#else
#define HELMPINN_CPU_TARGET_BEGIN
#define HELMPINN_CPU_TARGET_END
#if defined(__AVX512F__)
#define HELMPINN_CPU_VECTOR_BYTES 64
#elif defined(__AVX__)
#define HELMPINN_CPU_VECTOR_BYTES 32
#else
#define HELMPINN_CPU_VECTOR_BYTES 16
#endif
#endif
