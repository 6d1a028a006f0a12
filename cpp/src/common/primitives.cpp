// The seed primitives (primitives.hpp): the one place that picks the host implementation
// (cpu/primitives.cpp) or the CUDA one (cuda/primitives.cu; in a build without CUDA,
// cuda_stub.cpp's, which throw).
#include "../backend.hpp"
#include "helmpinn/primitives.hpp"

namespace helmpinn {

template <typename T>
void mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out,
                  Device device, void* stream) {
    if (device == Device::cuda) return cuda_mse_backward(pred, target, n, cols, out, stream);
    cpu_mse_backward(pred, target, n, cols, out);
}

template <typename T>
void layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                    std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW, T* db,
                    T* dh_prev, Device device, void* stream) {
    if (device == Device::cuda)
        return cuda_layer_backward(dL_dh, h, h_prev, W, n, out_dim, in_dim, apply_tanh_grad, dW,
                                   db, dh_prev, stream);
    cpu_layer_backward(dL_dh, h, h_prev, W, n, out_dim, in_dim, apply_tanh_grad, dW, db, dh_prev);
}

template <typename T>
void fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                      std::size_t m, T* dB, Device device, void* stream) {
    if (device == Device::cuda) return cuda_fourier_backward(dL_dphi, x, B, n, d, m, dB, stream);
    cpu_fourier_backward(dL_dphi, x, B, n, d, m, dB);
}

template <typename T>
void adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
               double beta1, double beta2, double eps, double weight_decay, Device device,
               void* stream) {
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
