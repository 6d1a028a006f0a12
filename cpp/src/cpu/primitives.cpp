// The seed's backward primitives and the fused Adam step on host memory (OpenMP).
// Every parallel loop owns disjoint outputs and sums in a fixed order: the same bits for any
// thread count. No temporaries: dz = dL_dh * (1 - h^2) is recomputed where it is used.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "../backend.hpp"
#include "../common/stream_math.hpp"
#include "parallel.hpp"

namespace helmpinn {

namespace {
void require_ptr(const void* p, const char* name) {
    if (!p) throw std::invalid_argument(std::string(name) + " is null");
}

// fn(begin, end) over fixed blocks of 8192 elements covering [0, total); threaded when there
// are more than 8 blocks. Elementwise work, so the result does not depend on the split.
template <typename F>
void for_blocks(long total, F&& fn) {
    const long block = 8192, blocks = (total + block - 1) / block;
    cpu::parallel_for(blocks, cpu::Schedule::fixed, [&](long b) {
        fn(b * block, std::min(total, (b + 1) * block));
    }, blocks > 8);
}

}  // namespace

template <typename T>
void cpu_mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out) {
    require_ptr(pred, "pred");
    require_ptr(target, "target");
    require_ptr(out, "out");
    if (n == 0) return;
    const T scale = T(2) / T(n);
    const long total = long(n * cols);
    for_blocks(total, [&](long begin, long end) {
        for (long k = begin; k < end; ++k) out[k] = scale * (pred[k] - target[k]);
    });
}

template <typename T>
void cpu_layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                    std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW, T* db,
                    T* dh_prev) {
    require_ptr(dL_dh, "dL_dh");
    require_ptr(h_prev, "h_prev");
    require_ptr(W, "W");
    require_ptr(dW, "dW");
    require_ptr(db, "db");
    if (apply_tanh_grad) require_ptr(h, "h");
    auto dz = [&](std::size_t r, std::size_t o) {
        const T g = dL_dh[r * out_dim + o];
        if (!apply_tanh_grad) return g;
        const T hv = h[r * out_dim + o];
        return g * (T(1) - hv * hv);
    };
    const long no = long(out_dim), nr = long(n);
    const bool big = n * out_dim * in_dim > 65536;
    // dW[o, :] = sum_r dz[r, o] h_prev[r, :];  db[o] = sum_r dz[r, o]
    cpu::parallel_for(no, cpu::Schedule::fixed, [&](long o) {
        T* w = dW + std::size_t(o) * in_dim;
        for (std::size_t i = 0; i < in_dim; ++i) w[i] = T(0);
        T bsum = T(0);
        for (std::size_t r = 0; r < n; ++r) {
            const T g = dz(r, std::size_t(o));
            bsum += g;
            const T* a = h_prev + r * in_dim;
            for (std::size_t i = 0; i < in_dim; ++i) w[i] += g * a[i];
        }
        db[o] = bsum;
    }, big);
    if (!dh_prev) return;
    // dh_prev[r, :] = sum_o dz[r, o] W[o, :]
    cpu::parallel_for(nr, cpu::Schedule::fixed, [&](long r) {
        T* a = dh_prev + std::size_t(r) * in_dim;
        for (std::size_t i = 0; i < in_dim; ++i) a[i] = T(0);
        for (std::size_t o = 0; o < out_dim; ++o) {
            const T g = dz(std::size_t(r), o);
            const T* w = W + o * in_dim;
            for (std::size_t i = 0; i < in_dim; ++i) a[i] += g * w[i];
        }
    }, big);
}

template <typename T>
void cpu_fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                      std::size_t m, T* dB) {
    require_ptr(dL_dphi, "dL_dphi");
    require_ptr(x, "x");
    require_ptr(B, "B");
    require_ptr(dB, "dB");
    const long nm = long(m);
    cpu::parallel_for(nm, cpu::Schedule::fixed, [&](long j) {
        T acc[3] = {T(0), T(0), T(0)};
        for (std::size_t p = 0; p < n; ++p) {
            const T* xp = x + p * d;
            T s = T(0);
            for (std::size_t i = 0; i < d; ++i) s += xp[i] * T(math::two_pi) * B[i * m + j];
            const T g = dL_dphi[p * 2 * m + j] * std::cos(s) - dL_dphi[p * 2 * m + m + j] * std::sin(s);
            for (std::size_t i = 0; i < d; ++i) acc[i] += T(math::two_pi) * xp[i] * g;
        }
        for (std::size_t i = 0; i < d; ++i) dB[i * m + j] = acc[i];
    }, n * m * d > 65536);
}

template <typename T>
void cpu_adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
               double beta1, double beta2, double eps, double weight_decay) {
    require_ptr(params, "params");
    require_ptr(grad, "grad");
    require_ptr(m, "m");
    require_ptr(v, "v");
    if (step < 1) throw std::invalid_argument("adam_step: step must be >= 1");
    const math::AdamScalars<T> c(step, lr, beta1, beta2, eps, weight_decay);
    const long total = long(n);
    for_blocks(total, [&](long begin, long end) {
        for (long k = begin; k < end; ++k)
            math::adam_update(params[k], grad[k], m[k], v[k], c.b1, c.b2, c.a, c.c2, c.eps, c.wd);
    });
}

#define HELMPINN_INSTANTIATE(T)                                                                  \
    template void cpu_mse_backward<T>(const T*, const T*, std::size_t, std::size_t, T*);            \
    template void cpu_layer_backward<T>(const T*, const T*, const T*, const T*, std::size_t,         \
                                    std::size_t, std::size_t, bool, T*, T*, T*);                 \
    template void cpu_fourier_backward<T>(const T*, const T*, const T*, std::size_t, std::size_t,    \
                                      std::size_t, T*);                                          \
    template void cpu_adam_step<T>(T*, const T*, T*, T*, std::size_t, long, double, double, double, \
                               double, double);
HELMPINN_INSTANTIATE(float)
HELMPINN_INSTANTIATE(double)
#undef HELMPINN_INSTANTIATE

}  // namespace helmpinn
