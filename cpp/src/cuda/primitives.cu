// The seed primitives (primitives.hpp, Device::cuda) on device memory, float and double, with
// the formulas of cpu/primitives.cpp.
//
// mse_backward and adam_step are elementwise. The reductions are summed in a fixed order, so a
// call gives the same bits on every run, with no floating-point atomics and no scratch memory:
// each element of dW, db and dh_prev is summed by one thread, over the rows (dW, db) or the
// outputs (dh_prev) in order, as the CPU does; each frequency of dB by one block, whose threads
// take fixed strided subsets of the points and are then added in a fixed shared-memory tree.
// Everything is launched on the caller's stream; nothing is allocated, copied or waited for.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "../backend.hpp"
#include "../common/stream_math.hpp"  // math::two_pi, adam_update
#include "cuda_common.cuh"

namespace helmpinn {
namespace cuda {
namespace {

constexpr int kBlock = 256;        // threads per block of the elementwise and per-element kernels
constexpr int kReduce = 128;       // threads per block of the dB reduction (a power of two)
constexpr long long kMaxGrid = 1 << 20;  // the loops below stride over anything larger

__device__ __forceinline__ long long first_index() {
    return static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ long long grid_stride() {
    return static_cast<long long>(gridDim.x) * blockDim.x;
}

unsigned grid_for(long long total) {
    return unsigned(std::min((total + kBlock - 1) / kBlock, kMaxGrid));
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
mse_kernel(const T* pred, const T* target, long long total, T scale, T* out) {
    for (long long k = first_index(); k < total; k += grid_stride())
        out[k] = scale * (pred[k] - target[k]);
}

// dz = dL_dh * (1 - h^2), or dL_dh for a linear layer, of flat element k of [n, out].
template <typename T>
__device__ __forceinline__ T dz_at(const T* dL_dh, const T* h, long long k, bool tanh_grad) {
    const T g = dL_dh[k];
    if (!tanh_grad) return g;
    const T hv = h[k];
    return g * (T(1) - hv * hv);
}

// dW[o, i] = sum_r dz[r, o] h_prev[r, i] for i < in_dim, and db[o] = sum_r dz[r, o] as column
// i = in_dim: one thread per element, rows in order. Neighbouring threads read neighbouring
// h_prev columns and share dz.
template <typename T>
__global__ void __launch_bounds__(kBlock)
layer_weight_kernel(const T* dL_dh, const T* h, const T* h_prev, long long n, long long out_dim,
                    long long in_dim, bool tanh_grad, T* dW, T* db) {
    const long long cols = in_dim + 1;
    for (long long k = first_index(); k < out_dim * cols; k += grid_stride()) {
        const long long o = k / cols, i = k % cols;
        T acc = T(0);
        for (long long r = 0; r < n; ++r) {
            const T g = dz_at(dL_dh, h, r * out_dim + o, tanh_grad);
            acc += i < in_dim ? g * h_prev[r * in_dim + i] : g;
        }
        if (i < in_dim)
            dW[o * in_dim + i] = acc;
        else
            db[o] = acc;
    }
}

// dh_prev[r, i] = sum_o dz[r, o] W[o, i]: one thread per element, outputs in order.
template <typename T>
__global__ void __launch_bounds__(kBlock)
layer_input_kernel(const T* dL_dh, const T* h, const T* W, long long n, long long out_dim,
                   long long in_dim, bool tanh_grad, T* dh_prev) {
    for (long long k = first_index(); k < n * in_dim; k += grid_stride()) {
        const long long r = k / in_dim, i = k % in_dim;
        T acc = T(0);
        for (long long o = 0; o < out_dim; ++o)
            acc += dz_at(dL_dh, h, r * out_dim + o, tanh_grad) * W[o * in_dim + i];
        dh_prev[k] = acc;
    }
}

// dB[:, j] for the frequencies j = blockIdx.x, blockIdx.x + gridDim.x, ...: thread t sums the
// points t, t + kReduce, ... in order; then the kReduce partials of each of the D rows are
// added pairwise in a fixed tree in shared memory ([D][kReduce] values of T). D = d is a
// template parameter so that the accumulators stay in registers.
template <typename T, int D>
__global__ void __launch_bounds__(kReduce)
fourier_kernel(const T* dL_dphi, const T* x, const T* B, long long n, long long m, T* dB) {
    HELMPINN_DYNAMIC_SMEM(smem);
    T* part = reinterpret_cast<T*>(smem);
    const int t = int(threadIdx.x);
    const T tp = T(math::two_pi);
    for (long long j = blockIdx.x; j < m; j += gridDim.x) {
        T acc[D] = {};
        for (long long p = t; p < n; p += kReduce) {
            const T* xp = x + p * D;
            T s = T(0);
            for (int i = 0; i < D; ++i) s += xp[i] * tp * B[i * m + j];
            const T* gp = dL_dphi + p * 2 * m;
            const T g = gp[j] * std::cos(s) - gp[m + j] * std::sin(s);
            for (int i = 0; i < D; ++i) acc[i] += tp * xp[i] * g;
        }
        for (int i = 0; i < D; ++i) part[i * kReduce + t] = acc[i];
        __syncthreads();
        for (int half = kReduce / 2; half > 0; half /= 2) {
            if (t < half)
                for (int i = 0; i < D; ++i) part[i * kReduce + t] += part[i * kReduce + t + half];
            __syncthreads();
        }
        if (t < D) dB[t * m + j] = part[t * kReduce];
        __syncthreads();  // part is reused by the block's next frequency
    }
}

template <typename T>
__global__ void __launch_bounds__(kBlock)
adam_kernel(T* params, const T* grad, T* m, T* v, long long n, T b1, T b2, T a, T c2, T e, T wd) {
    for (long long k = first_index(); k < n; k += grid_stride())
        math::adam_update(params[k], grad[k], m[k], v[k], b1, b2, a, c2, e, wd);
}

// A pointer may be null only when its array is empty (an empty device array has no address).
void require(const void* p, std::size_t count, const char* name) {
    if (!p && count) throw std::invalid_argument(std::string(name) + " is null");
}

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

}  // namespace
}  // namespace cuda

template <typename T>
void cuda_mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out,
                       void* stream) {
    const std::size_t total = n * cols;
    cuda::require(pred, total, "pred");
    cuda::require(target, total, "target");
    cuda::require(out, total, "out");
    if (total == 0) return;
    auto* kernel = &cuda::mse_kernel<T>;
    HELMPINN_LAUNCH(kernel, cuda::grid_for(static_cast<long long>(total)), cuda::kBlock, 0,
                    cuda::as_stream(stream))(pred, target, static_cast<long long>(total),
                                             T(2) / T(n), out);
    cuda::check(cudaGetLastError(), "mse_backward: kernel launch");
}

template <typename T>
void cuda_layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                         std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW,
                         T* db, T* dh_prev, void* stream) {
    cuda::require(dL_dh, n * out_dim, "dL_dh");
    cuda::require(h_prev, n * in_dim, "h_prev");
    cuda::require(W, out_dim * in_dim, "W");
    cuda::require(dW, out_dim * in_dim, "dW");
    cuda::require(db, out_dim, "db");
    if (apply_tanh_grad) cuda::require(h, n * out_dim, "h");
    const cudaStream_t s = cuda::as_stream(stream);
    const auto N = static_cast<long long>(n), O = static_cast<long long>(out_dim),
               I = static_cast<long long>(in_dim);
    if (O > 0) {
        auto* kernel = &cuda::layer_weight_kernel<T>;
        HELMPINN_LAUNCH(kernel, cuda::grid_for(O * (I + 1)), cuda::kBlock, 0, s)(
            dL_dh, h, h_prev, N, O, I, apply_tanh_grad, dW, db);
        cuda::check(cudaGetLastError(), "layer_backward: kernel launch (dW, db)");
    }
    if (dh_prev && N * I > 0) {
        auto* kernel = &cuda::layer_input_kernel<T>;
        HELMPINN_LAUNCH(kernel, cuda::grid_for(N * I), cuda::kBlock, 0, s)(
            dL_dh, h, W, N, O, I, apply_tanh_grad, dh_prev);
        cuda::check(cudaGetLastError(), "layer_backward: kernel launch (dh_prev)");
    }
}

template <typename T>
void cuda_fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                           std::size_t m, T* dB, void* stream) {
    if (d < 1 || d > 3)
        throw std::invalid_argument("fourier_backward: d must be 1, 2 or 3, got " +
                                    std::to_string(d));
    cuda::require(dL_dphi, n * 2 * m, "dL_dphi");
    cuda::require(x, n * d, "x");
    cuda::require(B, d * m, "B");
    cuda::require(dB, d * m, "dB");
    if (m == 0) return;
    auto* kernel = d == 1   ? &cuda::fourier_kernel<T, 1>
                   : d == 2 ? &cuda::fourier_kernel<T, 2>
                            : &cuda::fourier_kernel<T, 3>;
    const auto M = static_cast<long long>(m);
    HELMPINN_LAUNCH(kernel, unsigned(std::min(M, cuda::kMaxGrid)), cuda::kReduce,
                    d * cuda::kReduce * sizeof(T), cuda::as_stream(stream))(
        dL_dphi, x, B, static_cast<long long>(n), M, dB);
    cuda::check(cudaGetLastError(), "fourier_backward: kernel launch");
}

template <typename T>
void cuda_adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
                    double beta1, double beta2, double eps, double weight_decay, void* stream) {
    cuda::require(params, n, "params");
    cuda::require(grad, n, "grad");
    cuda::require(m, n, "m");
    cuda::require(v, n, "v");
    if (step < 1) throw std::invalid_argument("adam_step: step must be >= 1");
    if (n == 0) return;
    const math::AdamScalars<T> c(step, lr, beta1, beta2, eps, weight_decay);  // as the CPU's
    auto* kernel = &cuda::adam_kernel<T>;
    HELMPINN_LAUNCH(kernel, cuda::grid_for(static_cast<long long>(n)), cuda::kBlock, 0,
                    cuda::as_stream(stream))(params, grad, m, v, static_cast<long long>(n), c.b1,
                                             c.b2, c.a, c.c2, c.eps, c.wd);
    cuda::check(cudaGetLastError(), "adam_step: kernel launch");
}

HELMPINN_INSTANTIATE_CUDA_PRIMITIVES(float)
HELMPINN_INSTANTIATE_CUDA_PRIMITIVES(double)

}  // namespace helmpinn
