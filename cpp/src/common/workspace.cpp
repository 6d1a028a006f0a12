// Workspace<T>: argument checks, then one dispatch to the device's backend.
#include "helmpinn/workspace.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "backend.hpp"

namespace helmpinn {

namespace {

// Takes a C string: a std::string parameter would be built (and heap-allocated) on every call.
void require(bool ok, const char* msg) {
    if (!ok) throw std::invalid_argument(msg);
}

template <typename T>
void require_finite(const T* p, std::size_t n, const char* name) {
    if (!p) return;
    for (std::size_t k = 0; k < n; ++k)
        if (!std::isfinite(p[k]))
            throw std::invalid_argument(std::string(name) + " contains NaN or Inf (at flat index " +
                                        std::to_string(k) + ")");
}

}  // namespace

template <typename T>
Workspace<T>::Workspace(const ModelSpec& spec, std::size_t batch_size, Device device,
                        int device_id)
    : spec_(spec), batch_size_(batch_size), device_(device), device_id_(device_id) {
    spec_.validate();
    require(batch_size >= 1, "Workspace: batch_size must be >= 1");
    require(spec.num_hidden_layers <= max_hidden_layers,
            "Workspace: num_hidden_layers must be <= 15");
    if (device == Device::cpu)
        impl_ = make_cpu_backend<T>(spec_, batch_size_);
    else
        impl_ = make_cuda_backend<T>(spec_, batch_size_, device_id);
}

template <typename T>
Workspace<T>::~Workspace() = default;
template <typename T>
Workspace<T>::Workspace(Workspace&&) noexcept = default;
template <typename T>
Workspace<T>& Workspace<T>::operator=(Workspace&&) noexcept = default;

template <typename T>
std::size_t Workspace<T>::memory_bytes() const {
    return impl_->memory_bytes();
}

template <typename T>
const WorkspaceBuffers<T>& Workspace<T>::buffers() const {
    return impl_->buffers();
}

template <typename T>
void Workspace<T>::forward(const T* params, const T* x, std::size_t n, int derivatives, T* u,
                           T* grad_u, T* lap_u, void* stream) {
    require(params != nullptr, "forward: params is null");
    require(n == 0 || x != nullptr, "forward: x is null");
    if (derivatives < 0 || derivatives > 2)
        throw std::invalid_argument("forward: derivatives must be 0, 1 or 2, got " +
                                    std::to_string(derivatives));
    impl_->forward(params, x, n, derivatives, u, grad_u, lap_u, stream);
}

template <typename T>
LossBreakdown Workspace<T>::value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                           void* stream) {
    require(params != nullptr, "value_and_grad: params is null");
    require(grad != nullptr, "value_and_grad: grad is null");
    if (in.n_pde) require(in.x_pde != nullptr, "value_and_grad: x_pde is null but n_pde > 0");
    if (in.n_data) {
        require(in.x_data != nullptr, "value_and_grad: x_data is null but n_data > 0");
        require(in.y != nullptr, "value_and_grad: y is required with x_data");
    }
    if (in.n_bc) {
        require(in.x_bc != nullptr, "value_and_grad: x_bc is null but n_bc > 0");
        require(in.normal_bc != nullptr, "value_and_grad: n_bc (normals) is required with x_bc");
    }
    if (in.check_finite && device_ == Device::cpu) {
        const std::size_t d = spec_.in_dim;
        require_finite(params, spec_.num_params(), "params");
        require_finite(in.x_pde, in.n_pde * d, "x_pde");
        require_finite(in.kappa, in.n_pde, "kappa");
        require_finite(in.f, in.n_pde * 2, "f");
        require_finite(in.x_data, in.n_data * d, "x_data");
        require_finite(in.y, in.n_data * 2, "y");
        require_finite(in.x_bc, in.n_bc * d, "x_bc");
        require_finite(in.normal_bc, in.n_bc * d, "n_bc");
        require_finite(in.alpha_bc, in.n_bc * 2, "alpha_bc");
        require_finite(in.g_bc, in.n_bc * 2, "g_bc");
        require_finite(&in.kappa_const, 1, "kappa");
        require_finite(in.alpha_const, 2, "alpha_bc");
        require_finite(&in.w_pde, 1, "w_pde");
        require_finite(&in.w_data, 1, "w_data");
        require_finite(&in.w_bc, 1, "w_bc");
    }
    return impl_->value_and_grad(params, grad, in, stream);
}

template <typename T>
void Workspace<T>::zero_grad(void* stream) {
    impl_->zero_grad(stream);
}

template class Workspace<float>;
template class Workspace<double>;

}  // namespace helmpinn
