// The one internal interface every device implements (CPU: cpu/, CUDA: cuda/).
// Workspace<T> validates its arguments and forwards to a Backend<T>; backends assume valid input.
#pragma once

#include <cstddef>
#include <memory>

#include "common/loss_terms.hpp"
#include "helmpinn/workspace.hpp"

namespace helmpinn {

/// The per-row operations of the residual level, one backend entry point for the three.
enum class RowOp { residuals, jacobian, jvp };

template <typename T>
class Backend {
public:
    virtual ~Backend() = default;
    virtual const WorkspaceBuffers<T>& buffers() const = 0;
    virtual std::size_t memory_bytes() const = 0;
    virtual void forward(const T* params, const T* x, std::size_t n, int derivatives, T* u,
                         T* grad_u, T* lap_u, void* stream) = 0;
    /// The loss into out.loss, its gradient into grad, out's per-point outputs where asked.
    virtual void value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                LossOutputs<T>& out, void* stream) = 0;
    /// J^T w into out [num_params].
    virtual void vjp(const T* params, const T* w, const LossInputs<T>& in, T* out,
                     void* stream) = 0;
    /// Rows [r0, r1) of: residuals (out [r1 - r0]), jacobian (out [r1 - r0, P]), or jvp with
    /// v [P] (out [r1 - r0]).
    virtual void rows(RowOp op, const T* params, const LossInputs<T>& in, std::size_t r0,
                      std::size_t r1, const T* v, T* out, void* stream) = 0;
    virtual void zero_grad(void* stream) = 0;
};

/// The loss of a call from each term's sum of squared residuals, sums indexed by terms::Term:
/// means per term over its count (0 for an absent term) and their weighted total.
template <typename T>
LossBreakdown loss_breakdown(const double sums[terms::kNumTerms], const LossInputs<T>& in) {
    LossBreakdown out;
    for (int t = 0; t < terms::kNumTerms; ++t) {
        const terms::TermPoints<T> tp = terms::term_points(in, t);
        const double mean = tp.n ? sums[t] / double(tp.count) : 0.0;
        out.mean[t] = mean;
        out.total += double(tp.w) * mean;
    }
    return out;
}

/// Points `b` at a backend's cache arrays (anything with data() -> T*), with the layout that
/// WorkspaceBuffers documents: z[0..L], h[0..L-1] and h[L] == z[L].
template <typename T, typename Array>
void point_buffers(WorkspaceBuffers<T>& b, const ModelSpec& spec, std::size_t batch,
                   Array& x_input, Array& features, Array* z, Array* h, Array& du_dx,
                   Array& d2u_dx2, Array& grad) {
    const int L = spec.num_hidden_layers;
    b.max_streams = spec.in_dim + 2;
    b.batch_size = batch;
    b.x_input = x_input.data();
    b.features = features.data();
    for (int l = 0; l <= L; ++l) b.z[l] = z[l].data();
    for (int l = 0; l < L; ++l) b.h[l] = h[l].data();
    b.h[L] = z[L].data();
    b.du_dx = du_dx.data();
    b.d2u_dx2 = d2u_dx2.data();
    b.grad = grad.data();
}

/// The CPU backend with the kernel set cpu/dispatch.cpp picks (cpu/isa.hpp); each set's own
/// factory, make_cpu_backend_<set>, is cpu_backend.cpp compiled for that set.
template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(const ModelSpec& spec, std::size_t batch_size);

/// Defined in cuda/ when CUDA is enabled, else by cuda_stub.cpp (which throws).
template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend(const ModelSpec& spec, std::size_t batch_size,
                                              int device_id);

/// The seed primitives on host memory (primitives.hpp with Device::cpu; cpu/primitives.cpp).
template <typename T>
void cpu_mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out);
template <typename T>
void cpu_layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                        std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW,
                        T* db, T* dh_prev);
template <typename T>
void cpu_fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                          std::size_t m, T* dB);
template <typename T>
void cpu_adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
                   double beta1, double beta2, double eps, double weight_decay);

/// The seed primitives on device memory (primitives.hpp with Device::cuda; arguments as there,
/// `stream` a cudaStream_t). Defined in cuda/primitives.cu when CUDA is enabled, else by
/// cuda_stub.cpp (which throws).
template <typename T>
void cuda_mse_backward(const T* pred, const T* target, std::size_t n, std::size_t cols, T* out,
                       void* stream);
template <typename T>
void cuda_layer_backward(const T* dL_dh, const T* h, const T* h_prev, const T* W, std::size_t n,
                         std::size_t out_dim, std::size_t in_dim, bool apply_tanh_grad, T* dW,
                         T* db, T* dh_prev, void* stream);
template <typename T>
void cuda_fourier_backward(const T* dL_dphi, const T* x, const T* B, std::size_t n, std::size_t d,
                           std::size_t m, T* dB, void* stream);
template <typename T>
void cuda_adam_step(T* params, const T* grad, T* m, T* v, std::size_t n, long step, double lr,
                    double beta1, double beta2, double eps, double weight_decay, void* stream);

// The explicit instantiations of the four, for cuda/primitives.cu and cuda_stub.cpp alike.
#define HELMPINN_INSTANTIATE_CUDA_PRIMITIVES(T)                                                  \
    template void cuda_mse_backward<T>(const T*, const T*, std::size_t, std::size_t, T*, void*); \
    template void cuda_layer_backward<T>(const T*, const T*, const T*, const T*, std::size_t,    \
                                         std::size_t, std::size_t, bool, T*, T*, T*, void*);     \
    template void cuda_fourier_backward<T>(const T*, const T*, const T*, std::size_t,            \
                                           std::size_t, std::size_t, T*, void*);                 \
    template void cuda_adam_step<T>(T*, const T*, T*, T*, std::size_t, long, double, double,     \
                                    double, double, double, void*);

}  // namespace helmpinn
