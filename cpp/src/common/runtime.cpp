#include "helmpinn/runtime.hpp"

#include "../cpu/parallel.hpp"

#include <stdexcept>
#include <string>

#if defined(HELMPINN_WITH_OPENMP)
#include <omp.h>
#endif

#ifndef HELMPINN_VERSION
#define HELMPINN_VERSION "0.0.0"
#endif

namespace helmpinn {

namespace cpu {
const char* isa_name();     // cpu/dispatch.cpp
const char* kernel_sets();  // cpu/dispatch.cpp
}

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

void parallel_tasks(std::int64_t n, void (*task)(std::int64_t i, void* context), void* context) {
    if (n < 0) throw std::invalid_argument("parallel_tasks: n must be >= 0, got " + std::to_string(n));
    if (task == nullptr) throw std::invalid_argument("parallel_tasks: task is null");
    cpu::parallel_for(n, cpu::Schedule::dynamic, [task, context](std::int64_t i) { task(i, context); });
}

const char* cpu_isa() { return cpu::isa_name(); }

const char* cpu_kernel_sets() { return cpu::kernel_sets(); }

}  // namespace helmpinn
