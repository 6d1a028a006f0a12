// The CPU backend's kernel set, chosen once per process (isa.hpp).
//
// A dispatching build has a baseline, an AVX2 and an AVX-512 set; the best one the processor
// supports is used, unless the environment variable HELMPINN_CPU_ISA names one (baseline, avx2
// or avx512; for tests and benchmarks), which must then be supported. A single-set build has
// only its native set.
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "../backend.hpp"

namespace helmpinn {
namespace cpu {

namespace {

enum Level { kBaseline = 0, kAvx2 = 1, kAvx512 = 2 };
const char* const kNames[] = {"baseline", "avx2", "avx512"};

#if defined(HELMPINN_CPU_DISPATCH)
bool supported(int level) {
    if (level == kAvx512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2");
    if (level == kAvx2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("bmi2");
    return true;
}

// The level to use, or -1 with `error` set when HELMPINN_CPU_ISA asks for the impossible.
int choose(std::string& error) {
    __builtin_cpu_init();
    const char* forced = std::getenv("HELMPINN_CPU_ISA");
    if (forced && *forced) {
        for (int l = kBaseline; l <= kAvx512; ++l)
            if (std::strcmp(forced, kNames[l]) == 0) {
                if (supported(l)) return l;
                error = std::string("HELMPINN_CPU_ISA=") + forced +
                        ": this processor does not support that instruction set";
                return -1;
            }
        error = std::string("HELMPINN_CPU_ISA=") + forced +
                ": expected baseline, avx2 or avx512";
        return -1;
    }
    return supported(kAvx512) ? kAvx512 : supported(kAvx2) ? kAvx2 : kBaseline;
}

struct Choice {
    std::string error;  // before level: choose() writes it
    int level;
    Choice() : error(), level(choose(error)) {}
};

const Choice& choice() {
    static const Choice c;  // thread-safe, once
    return c;
}
#endif

}  // namespace

const char* isa_name() {
#if defined(HELMPINN_CPU_DISPATCH)
    const Choice& c = choice();
    return c.level < 0 ? "invalid" : kNames[c.level];
#elif defined(__AVX512F__)
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

const char* kernel_sets() {
#if defined(HELMPINN_CPU_DISPATCH)
    return "baseline,avx2,avx512";
#else
    return "native";
#endif
}

}  // namespace cpu

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(const ModelSpec& spec, std::size_t batch_size) {
#if defined(HELMPINN_CPU_DISPATCH)
    const auto& c = cpu::choice();
    if (c.level < 0) throw std::invalid_argument(c.error);
    if (c.level == cpu::kAvx512) return make_cpu_backend_avx512<T>(spec, batch_size);
    if (c.level == cpu::kAvx2) return make_cpu_backend_avx2<T>(spec, batch_size);
    return make_cpu_backend_baseline<T>(spec, batch_size);
#else
    return make_cpu_backend_native<T>(spec, batch_size);
#endif
}

template std::unique_ptr<Backend<float>> make_cpu_backend(const ModelSpec&, std::size_t);
template std::unique_ptr<Backend<double>> make_cpu_backend(const ModelSpec&, std::size_t);

}  // namespace helmpinn
