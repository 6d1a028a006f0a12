// helmpinn/primitives.hpp: the seed's backward primitives (value stream only), on host or GPU.
//
// These are the building blocks of the seed document's data-loss backward pass, generalised to
// d input dimensions. Each writes into caller-provided buffers and allocates nothing. Shapes
// are row-major. Arguments are not checked here beyond null pointers, adam_step's step and (on
// the device) fourier_backward's d: std::invalid_argument naming the argument.
//
// `device` says where the pointers live. Device::cpu (the default): host memory, the work runs
// on the OpenMP threads with the same bits for any thread count, and `stream` is ignored.
// Device::cuda: device memory on the current CUDA device (cudaSetDevice), and the work is
// enqueued on `stream` (a cudaStream_t; nullptr = the default stream): the call returns without
// waiting, copies nothing to or from the host and allocates no device memory. There a pointer
// may be null when its array is empty. Device results are the same bits on every run (sums in
// a fixed order, no atomics); they agree with the host's to rounding, not bitwise. CUDA errors
// throw std::runtime_error naming the function; Device::cuda in a build without CUDA throws
// std::runtime_error("... built without CUDA support").
#pragma once

#include <cstddef>

#include "helmpinn/device.hpp"

namespace helmpinn {

/// dL/dpred = 2/N (pred - target) for pred, target [n, cols]; out [n, cols].
template <typename T>
void mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out,
                  Device device = Device::cpu, void* stream = nullptr);

/// One linear layer's backward, with h = tanh(W h_prev + b) when apply_tanh_grad, else h = W h_prev + b:
///   dz = dL_dh * (1 - h^2)  (or dL_dh),  dW = dz^T h_prev,  db = sum_rows dz,  dh_prev = dz W.
/// dL_dh, h [n, out]; h_prev [n, in]; W [out, in]; dW [out, in]; db [out]; dh_prev [n, in].
/// dW and db are overwritten. dh_prev may be null (not wanted).
template <typename T>
void layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                    std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW, T* db,
                    T* dh_prev, Device device = Device::cpu, void* stream = nullptr);

/// Fourier frequencies' gradient from the value-stream adjoint of phi = [sin 2pi xB, cos 2pi xB]:
///   dB[i, j] = sum_p 2 pi x[p, i] (dL_dphi[p, j] cos s_pj - dL_dphi[p, m + j] sin s_pj).
/// dL_dphi [n, 2m]; x [n, d] with d = 1, 2 or 3; B [d, m]; dB [d, m] (overwritten).
template <typename T>
void fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                      std::size_t m, T* dB, Device device = Device::cpu, void* stream = nullptr);

/// One fused Adam(W) step over flat buffers, in place (step counts from 1):
///   m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
///   p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps) + lr * weight_decay * p.
template <typename T>
void adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
               double beta1, double beta2, double eps, double weight_decay,
               Device device = Device::cpu, void* stream = nullptr);

}  // namespace helmpinn
