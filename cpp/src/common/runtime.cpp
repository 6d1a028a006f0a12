#include "helmpinn/runtime.hpp"

#include <stdexcept>
#include <string>

#if defined(HELMPINN_WITH_OPENMP)
#include <omp.h>
#endif

#ifndef HELMPINN_VERSION
#define HELMPINN_VERSION "0.0.0"
#endif

namespace helmpinn {

const char* version() { return HELMPINN_VERSION; }

bool has_openmp() {
#if defined(HELMPINN_WITH_OPENMP)
    return true;
#else
    return false;
#endif
}

int get_num_threads() {
#if defined(HELMPINN_WITH_OPENMP)
    return omp_get_max_threads();
#else
    return 1;
#endif
}

void set_num_threads(int n) {
    if (n < 1) throw std::invalid_argument("set_num_threads: n must be >= 1, got " + std::to_string(n));
#if defined(HELMPINN_WITH_OPENMP)
    omp_set_num_threads(n);
#endif
}

const char* cpu_isa() {
#if defined(__AVX512F__)
    return "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
    return "avx2";
#elif defined(__AVX__)
    return "avx";
#elif defined(__SSE2__) || defined(_M_X64)
    return "sse2";
#elif defined(__ARM_NEON)
    return "neon";
#else
    return "generic";
#endif
}

}  // namespace helmpinn
