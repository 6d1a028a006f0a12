// The seed primitives (primitives.hpp): the one place that picks the host implementation
// (cpu/primitives.cpp) or the CUDA one (cuda/primitives.cu; in a build without CUDA,
// cuda_stub.cpp's, which throw).
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <utility>

#include "../backend.hpp"
#include "checked.hpp"
#include "helmpinn/primitives.hpp"

namespace helmpinn {

namespace {

// Array sizes the devices form from the extents: checked once here, for both devices.
void check_sizes(std::initializer_list<std::pair<std::size_t, std::size_t>> products,
                 const char* fn) {
    for (const auto& [a, b] : products) (void)detail::checked_mul(a, b, fn);
}

std::string number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
}

// Adam's hyper-parameters, for both devices: a value outside these ranges turns every
// parameter into NaN or Inf on the first step (eps = 0 with a zero gradient divides 0 by 0,
// beta = 1 divides by 1 - beta^step = 0, lr = inf multiplies by it).
void check_adam(long step, double lr, double beta1, double beta2, double eps,
                double weight_decay) {
    auto bad = [](const char* name, double v, const char* want) {
        throw std::invalid_argument(std::string("adam_step: ") + name + " must be " + want +
                                    ", got " + number(v));
    };
    if (step < 1)
        throw std::invalid_argument("adam_step: step must be >= 1 (steps count from 1), got " +
                                    std::to_string(step));
    if (!(std::isfinite(lr) && lr >= 0)) bad("lr", lr, "a finite number >= 0");
    if (!(beta1 >= 0 && beta1 < 1)) bad("beta1", beta1, "in [0, 1)");
    if (!(beta2 >= 0 && beta2 < 1)) bad("beta2", beta2, "in [0, 1)");
    if (!(std::isfinite(eps) && eps > 0)) bad("eps", eps, "a finite number > 0");
    if (!(std::isfinite(weight_decay) && weight_decay >= 0))
        bad("weight_decay", weight_decay, "a finite number >= 0");
}

}  // namespace

template <typename T>
void mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out,
                  Device device, void* stream) {
    check_sizes({{n, cols}}, "mse_backward");
    if (device == Device::cuda) return cuda_mse_backward(pred, target, n, cols, out, stream);
    cpu_mse_backward(pred, target, n, cols, out);
}

template <typename T>
void layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                    std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW, T* db,
                    T* dh_prev, Device device, void* stream) {
    check_sizes({{n, out_dim}, {n, in_dim}, {out_dim, in_dim}, {n * out_dim, in_dim}},
                "layer_backward");
    if (device == Device::cuda)
        return cuda_layer_backward(dL_dh, h, h_prev, W, n, out_dim, in_dim, apply_tanh_grad, dW,
                                   db, dh_prev, stream);
    cpu_layer_backward(dL_dh, h, h_prev, W, n, out_dim, in_dim, apply_tanh_grad, dW, db, dh_prev);
}

template <typename T>
void fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                      std::size_t m, T* dB, Device device, void* stream) {
    check_sizes({{n, d}, {2 * m, n}, {d, m}, {n * m, d}}, "fourier_backward");
    if (device == Device::cuda) return cuda_fourier_backward(dL_dphi, x, B, n, d, m, dB, stream);
    cpu_fourier_backward(dL_dphi, x, B, n, d, m, dB);
}

template <typename T>
void adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
               double beta1, double beta2, double eps, double weight_decay, Device device,
               void* stream) {
    check_adam(step, lr, beta1, beta2, eps, weight_decay);
    if (device == Device::cuda)
        return cuda_adam_step(params, grad, m, v, n, step, lr, beta1, beta2, eps, weight_decay,
                              stream);
    cpu_adam_step(params, grad, m, v, n, step, lr, beta1, beta2, eps, weight_decay);
}

#define HELMPINN_INSTANTIATE(T)                                                                  \
    template void mse_backward<T>(const T*, const T*, std::size_t, std::size_t, T*, Device,     \
                                  void*);                                                        \
    template void layer_backward<T>(const T*, const T*, const T*, const T*, std::size_t,         \
                                    std::size_t, std::size_t, bool, T*, T*, T*, Device, void*);  \
    template void fourier_backward<T>(const T*, const T*, const T*, std::size_t, std::size_t,    \
                                      std::size_t, T*, Device, void*);                           \
    template void adam_step<T>(T*, const T*, T*, T*, std::size_t, long, double, double, double, \
                               double, double, Device, void*);
HELMPINN_INSTANTIATE(float)
HELMPINN_INSTANTIATE(double)
#undef HELMPINN_INSTANTIATE

}  // namespace helmpinn
