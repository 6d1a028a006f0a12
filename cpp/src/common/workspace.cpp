// Workspace<T>: argument checks, then one dispatch to the device's backend.
#include "helmpinn/workspace.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "backend.hpp"
#include "checked.hpp"
#include "cpu/buffers.hpp"

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

template <typename T>
const char* term_name(int t) {
    return terms::term_table<T>()[t].name;
}

// Bytes a workspace of T for `spec` and `batch` points holds. On the CPU: the backend's own
// sizes (cpu/buffers.hpp, every product checked there). A CUDA workspace holds the same
// per-point caches and per-block gradient slots (at most one block per point); its size is
// checked for overflow here, and its device allocations fail cleanly (cudaMalloc).
template <typename T>
std::size_t workspace_bytes(const ModelSpec& sp, std::size_t batch, Device device) {
    using detail::checked_add;
    using detail::checked_mul;
    if (device == Device::cpu)
        return cpu::buffer_sizes(sp, batch, cpu::buffer_threads()).bytes(sizeof(T));
    const char* what = "Workspace";
    const std::size_t d = std::size_t(sp.in_dim), S = d + 2, m = std::size_t(sp.ff_dim),
                      H = std::size_t(sp.hidden_dim), L = std::size_t(sp.num_hidden_layers),
                      np = sp.num_params();
    // per point: features (2m), z_l and h_l of every layer (L H + 2 + L H), x, grad u, lap u
    const std::size_t widths = checked_add(checked_mul(2 * L, H, what), 2 * m + 2, what);
    const std::size_t per_point = checked_add(checked_mul(S, widths, what), 3 * d + 2, what);
    std::size_t total = checked_mul(batch, per_point, what);
    total = checked_add(total, checked_mul(np, 35, what), what);
    total = checked_add(total, checked_mul(d + 1, m, what), what);
    total = checked_add(total, checked_mul(batch, np, what), what);
    return checked_mul(total, sizeof(T), what);
}

// Refuses a workspace whose buffers overflow std::size_t or, on the host, exceed the memory the
// machine can give (detail::host_memory_limit): with Linux's overcommit a too-large buffer
// would be granted and the process killed when the buffers are zeroed, instead of an error.
template <typename T>
void check_workspace_size(const ModelSpec& sp, std::size_t batch, Device device) {
    const std::size_t bytes = workspace_bytes<T>(sp, batch, device);
    if (device != Device::cpu) return;  // device allocations fail cleanly (cudaMalloc)
    const std::size_t limit = detail::host_memory_limit();
    if (limit && bytes > limit)
        throw detail::OutOfMemory(
            "Workspace: needs " + detail::format_bytes(bytes) + " for hidden_dim=" +
            std::to_string(sp.hidden_dim) + ", ff_dim=" + std::to_string(sp.ff_dim) +
            ", batch_size=" + std::to_string(batch) + ", more than this machine's memory, " +
            detail::format_bytes(limit) + "; reduce batch_size or the model");
}

}  // namespace

template <typename T>
Workspace<T>::Workspace(const ModelSpec& spec, std::size_t batch_size, Device device,
                        int device_id)
    : spec_(spec), batch_size_(batch_size), device_(device), device_id_(device_id) {
    spec_.validate();
    require(batch_size >= 1, "Workspace: batch_size must be >= 1");
    if (spec.num_hidden_layers > max_hidden_layers)
        throw std::invalid_argument("Workspace: num_hidden_layers must be <= " +
                                    std::to_string(max_hidden_layers) + ", got " +
                                    std::to_string(spec.num_hidden_layers));
    check_workspace_size<T>(spec_, batch_size_, device);
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

// The checks every loss-level operation shares, before any work (outputs untouched): each
// term's required arrays, its count, and (check_finite) every array's values, in the table's
// order. `residual`: the residual level, whose rows are scaled by sqrt(w), needs w >= 0.
// `extra` (extra_size values, named extra_name): the call's other input (jvp's v, vjp's w),
// scanned after the terms' arrays.
template <typename T>
void Workspace<T>::check_inputs(const char* op, const T* params, const LossInputs<T>& in,
                                bool residual, const T* extra, std::size_t extra_size,
                                const char* extra_name) {
    using namespace terms;
    if (!params) throw std::invalid_argument(std::string(op) + ": params is null");
    const std::size_t d = std::size_t(spec_.in_dim);
    for (int t = 0; t < kNumTerms; ++t) {
        const TermPoints<T> tp = term_points(in, t);
        TermArray<T> arrays[kMaxTermArrays];
        const int na = term_arrays(in, t, d, arrays);
        if (tp.n)
            for (int k = 0; k < na; ++k)
                if (arrays[k].required && !arrays[k].p)
                    throw std::invalid_argument(std::string(op) + ": " + arrays[k].name +
                                                " is required but null (" +
                                                std::to_string(tp.n) + " " +
                                                term_name<T>(t) + " points)");
        if (tp.count < tp.n)
            throw std::invalid_argument(std::string(op) + ": the " + term_name<T>(t) +
                                        " count (" + std::to_string(tp.count) +
                                        ") is below its number of points (" +
                                        std::to_string(tp.n) + ")");
        if (residual && !(tp.w >= T(0)))
            throw std::invalid_argument(std::string(op) + ": " + term_table<T>()[t].weight_name +
                                        " must be >= 0 (residual rows are scaled by sqrt(w))");
    }
    if (in.num_pde) {
        if (!in.pde_operator && (in.a_pde || in.b_pde || in.c_pde || in.a_lap))
            throw std::invalid_argument(
                std::string(op) + ": a_pde, b_pde, c_pde or a_lap given but pde_operator is false");
        if (in.a_pde && in.a_lap)
            throw std::invalid_argument(std::string(op) +
                                        ": give a_pde (an a per axis) or a_lap (one a), not both");
        if (in.a_lap && (in.a_const[0] != T(1) || in.a_const[1] != T(0)))
            throw std::invalid_argument(std::string(op) +
                                        ": a_const is not read with a_lap; leave it (1, 0)");
        if (in.pde_operator && in.kappa && in.c_pde)
            throw std::invalid_argument(std::string(op) +
                                        ": give c_pde or kappa with the general operator, not both");
        if (in.pde_operator && in.kappa_const != T(0))
            throw std::invalid_argument(
                std::string(op) +
                ": kappa_const is not read with pde_operator; set c_const (or c_pde, kappa)");
    }
    if (!in.check_finite || device_ != Device::cpu) return;
    require_finite(params, spec_.num_params(), "params");
    for (int t = 0; t < kNumTerms; ++t) {
        TermArray<T> arrays[kMaxTermArrays];
        const int na = term_arrays(in, t, d, arrays);
        for (int k = 0; k < na; ++k) require_finite(arrays[k].p, arrays[k].size, arrays[k].name);
    }
    require_finite(extra, extra_size, extra_name);
    for_each_scalar(in, [](const char* name, const T* v, int n) { require_finite(v, n, name); });
}

template <typename T>
LossBreakdown Workspace<T>::value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                           void* stream) {
    LossOutputs<T> out;
    value_and_grad(params, grad, in, out, stream);
    return out.loss;
}

template <typename T>
void Workspace<T>::value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                  LossOutputs<T>& out, void* stream) {
    require(grad != nullptr, "value_and_grad: grad is null");
    check_inputs("value_and_grad", params, in, out.residuals != nullptr);
    impl_->value_and_grad(params, grad, in, out, stream);
}

template <typename T>
std::size_t Workspace<T>::num_residuals(const LossInputs<T>& in) const {
    return terms::num_residuals(in);
}

template <typename T>
void Workspace<T>::residuals(const T* params, const LossInputs<T>& in, T* r, void* stream) {
    check_inputs("residuals", params, in, true);
    const std::size_t R = num_residuals(in);
    require(R == 0 || r != nullptr, "residuals: r is null");
    impl_->rows(RowOp::residuals, params, in, 0, R, nullptr, r, stream);
}

template <typename T>
void Workspace<T>::jacobian(const T* params, const LossInputs<T>& in, std::size_t row_begin,
                            std::size_t row_end, T* J, void* stream) {
    check_inputs("jacobian", params, in, true);
    const std::size_t R = num_residuals(in);
    if (row_begin > row_end || row_end > R)
        throw std::invalid_argument("jacobian: rows must satisfy 0 <= begin <= end <= R = " +
                                    std::to_string(R) + ", got [" + std::to_string(row_begin) +
                                    ", " + std::to_string(row_end) + ")");
    require(row_begin == row_end || J != nullptr, "jacobian: J is null");
    impl_->rows(RowOp::jacobian, params, in, row_begin, row_end, nullptr, J, stream);
}

template <typename T>
void Workspace<T>::jvp(const T* params, const T* v, const LossInputs<T>& in, T* Jv,
                       void* stream) {
    require(v != nullptr, "jvp: v is null");
    check_inputs("jvp", params, in, true, v, spec_.num_params(), "v");
    const std::size_t R = num_residuals(in);
    require(R == 0 || Jv != nullptr, "jvp: out is null");
    impl_->rows(RowOp::jvp, params, in, 0, R, v, Jv, stream);
}

template <typename T>
void Workspace<T>::vjp(const T* params, const T* w, const LossInputs<T>& in, T* JTw,
                       void* stream) {
    require(w != nullptr || num_residuals(in) == 0, "vjp: w is null");
    check_inputs("vjp", params, in, true, w, num_residuals(in), "w");
    require(JTw != nullptr, "vjp: out is null");
    impl_->vjp(params, w, in, JTw, stream);
}

template <typename T>
void Workspace<T>::zero_grad(void* stream) {
    impl_->zero_grad(stream);
}

template class Workspace<float>;
template class Workspace<double>;

}  // namespace helmpinn
