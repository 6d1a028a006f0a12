// helmpinn/workspace.hpp: pre-allocated buffers and the fused forward / loss-and-gradient pass.
//
// A Workspace<T> (T = float or double) owns every buffer one step needs for one model shape
// and a chunk of `batch_size` points. It is allocated once; forward() and value_and_grad()
// then allocate nothing, whatever the number of points: they walk the points in chunks of
// batch_size, and each chunk in tiles of points that go forward and backward through every
// layer while their activations are hot in cache (CPU) or shared memory (GPU).
//
// Pointers: on Device::cpu every pointer argument is host memory; on Device::cuda every
// pointer argument (params, grad, points, outputs) is device memory on the workspace's device,
// and `stream` is a cudaStream_t (nullptr = the default stream). All arrays are dense and
// row-major with points along the leading axis (MATH.md, Conventions).
//
// Threading: a Workspace is not safe to use from two threads at once; separate Workspaces
// are independent. On the CPU each call runs on the OpenMP threads (helmpinn::set_num_threads).
// Results are bitwise identical for any number of threads: gradient partials are kept per
// tile slot and reduced in a fixed order. They may depend on batch_size through the order in
// which chunks are summed (the CPU backend's value_and_grad does not chunk: there they do not).
//
// Ownership: every array is owned by the caller and only borrowed for the duration of a call;
// a Workspace keeps no pointer to it afterwards (LossInputs is a plain bundle of such pointers).
// The workspace owns its caches (buffers()); they live as long as the Workspace.
//
// Errors: bad arguments throw std::invalid_argument with a message naming the argument, before
// any work (outputs are left untouched); a CUDA workspace in a build without CUDA throws
// std::runtime_error("... built without CUDA support"), and one on a device that does not exist
// std::runtime_error naming the device. Nothing aborts.
#pragma once

#include <cstddef>
#include <memory>

#include "helmpinn/device.hpp"
#include "helmpinn/spec.hpp"

namespace helmpinn {

/// The three loss terms. A term is active when its point count is > 0; every pointer of an
/// active term marked "required" must be non-null. Shapes (row-major):
///   x_pde [num_pde, d], kappa [num_pde] or kappa_const, f [num_pde, 2] or null (= 0)
///   x_data [num_data, d], y [num_data, 2]
///   x_bc [num_bc, d], normal_bc [num_bc, d] (unit outward), alpha_bc [num_bc, 2] or alpha_const,
///   g_bc [num_bc, 2] or null (= 0)
/// Loss: w_pde/N_c sum |lap u + kappa u - f|^2 + w_data/N_d sum |u - y|^2
///       (with pde_operator: the general operator's residual in place of lap u + kappa u - f)
///       + w_bc/N_b sum |n.grad u + alpha u - g|^2   (complex alpha u, |.|^2 sums re and im)
template <typename T>
struct LossInputs {
    const T* x_pde = nullptr;  std::size_t num_pde = 0;  // required if num_pde > 0
    const T* kappa = nullptr;  T kappa_const = T(0);   // per point if non-null, else constant
    const T* f = nullptr;                              // complex source, null = 0
    /// The general diagonal operator instead of the Laplacian at the PDE points (MATH.md,
    /// General operator): r = sum_i a_i d^2u/dx_i^2 + sum_i b_i du/dx_i + c u - f, complex
    /// coefficients. a_i = a_pde [num_pde, d, 2] or a_const; b_i = b_pde [num_pde, d, 2] or b_const;
    /// c = c_pde [num_pde, 2], else kappa [num_pde] (real), else c_const (kappa_const is not read:
    /// setting it with pde_operator throws). Ignored arrays must be null when pde_operator is false.
    /// Where every a_i is the same per point (a_pde null: a_const, or a_lap [num_pde, 2], one
    /// complex a per point, never together with a_pde), the operator is a lap u + sum_i b_i du/dx_i
    /// + c u - f and its points carry the Laplacian's d + 2 streams instead of 2d + 1 (MATH.md,
    /// General operator): the same residual, fewer flops.
    bool pde_operator = false;
    const T* a_pde = nullptr;  T a_const[2] = {T(1), T(0)};
    const T* a_lap = nullptr;
    const T* b_pde = nullptr;  T b_const[2] = {T(0), T(0)};
    const T* c_pde = nullptr;  T c_const[2] = {T(0), T(0)};

    const T* x_data = nullptr; std::size_t num_data = 0; // required if num_data > 0
    const T* y = nullptr;                              // required if num_data > 0

    const T* x_bc = nullptr;   std::size_t num_bc = 0;   // required if num_bc > 0
    const T* normal_bc = nullptr;                      // required if num_bc > 0
    const T* alpha_bc = nullptr; T alpha_const[2] = {T(0), T(0)};  // per point if non-null
    const T* g_bc = nullptr;                           // null = 0

    T w_pde = T(1), w_data = T(1), w_bc = T(1);
    /// Global point counts: a term's mean divides by its count instead of its number of points
    /// here (0 = that number). The shards of a data-parallel run, each given the totals, add up
    /// to the loss and gradient of all points exactly. A count must be 0 or >= the term's n.
    std::size_t count_pde = 0, count_data = 0, count_bc = 0;
    bool train_fourier = true;   ///< false: B is frozen, its gradient is written as 0
    bool check_finite = false;   ///< true: scan inputs (and jvp's v, vjp's w) and throw naming any NaN/Inf array
};

namespace terms {
/// The loss terms, in the order of the core's term table (src/common/loss_terms.hpp, which gives
/// each its name, weight and arrays; helmpinn._core.loss_terms() in Python). They index
/// LossBreakdown::mean.
enum Term : int { kPde = 0, kData = 1, kBc = 2 };
constexpr int kNumTerms = 3;
}  // namespace terms

/// The loss of one value_and_grad call: total = sum_t w_t * mean[t] over the terms t
/// (terms::Term), mean[t] the term's unweighted mean (0 for an absent term).
struct LossBreakdown {
    double total = 0;
    double mean[terms::kNumTerms] = {};
};

/// Optional per-point outputs of value_and_grad (null = not wanted), in the workspace's memory.
template <typename T>
struct LossOutputs {
    LossBreakdown loss;          ///< written: the loss of the call
    T* residuals = nullptr;      ///< [R] the scaled residuals, as Workspace::residuals writes them
    T* grad_kappa = nullptr;     ///< [num_pde] dL/dkappa_i at every PDE point (for inverse problems;
                                 ///< with pde_operator: dL/d Re(c_i))
};

/// Views of a workspace's caches, all in the workspace's memory space (host or device).
/// Stream-major activations: stream s of point p, feature j lives at [(s * batch + p) * width + j];
/// stream 0 is the value, 1..d the partials, d+1 the Laplacian (MATH.md, Streams).
template <typename T>
struct WorkspaceBuffers {
    int max_streams = 0;              ///< d + 2
    std::size_t batch_size = 0;
    T* x_input = nullptr;             ///< [batch, d]         points of the last chunk
    T* features = nullptr;            ///< [streams, batch, 2m] Fourier features and derivatives
    T* z[max_layers] = {};            ///< z[l]: [streams, batch, out_l], l = 0..L (z[L] = u streams)
    T* h[max_layers] = {};            ///< h[l]: [streams, batch, H], l = 0..L-1; h[L] == z[L]
    T* du_dx = nullptr;               ///< [batch, d, 2]  grad u of the last forward() chunk
    T* d2u_dx2 = nullptr;             ///< [batch, 2]     Laplacian of u of the last forward() chunk
    T* grad = nullptr;                ///< [num_params]   gradient accumulator (seed-style dW, db, dB)
};

/// Backend interface (internal; one implementation per device).
template <typename T>
class Backend;

template <typename T>
class Workspace {
public:
    /// Maximum number of hidden layers a Workspace supports.
    static constexpr int max_hidden_layers = helmpinn::max_hidden_layers;

    /// Allocates every buffer for `spec` and chunks of `batch_size` points (>= 1). Throws
    /// std::invalid_argument for a bad spec or batch_size, std::bad_alloc when out of memory.
    Workspace(const ModelSpec& spec, std::size_t batch_size, Device device = Device::cpu,
              int device_id = 0);
    ~Workspace();
    Workspace(Workspace&&) noexcept;
    Workspace& operator=(Workspace&&) noexcept;
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    const ModelSpec& spec() const { return spec_; }
    std::size_t batch_size() const { return batch_size_; }
    Device device() const { return device_; }
    int device_id() const { return device_id_; }
    /// Bytes of memory the workspace holds (host or device).
    std::size_t memory_bytes() const;
    /// Cache views (see WorkspaceBuffers); valid for the workspace's lifetime.
    const WorkspaceBuffers<T>& buffers() const;

    /// Network value u [n, 2] at points x [n, d]; with derivatives >= 1 also grad_u [n, d, 2],
    /// with derivatives == 2 also lap_u [n, 2] (outputs may be null when not wanted).
    /// The caches (z, h, features, x_input, du_dx, d2u_dx2) hold the last chunk afterwards.
    /// Allocates nothing.
    void forward(const T* params, const T* x, std::size_t n, int derivatives, T* u, T* grad_u,
                 T* lap_u, void* stream = nullptr);

    /// The loss of `in` and its gradient with respect to every parameter, written into
    /// grad [num_params] (overwritten, same layout as params). Allocates nothing.
    /// Afterwards the caches' contents are unspecified: the CPU backend keeps each tile's
    /// activations in per-thread scratch rows and leaves the caches as forward() left them.
    LossBreakdown value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                 void* stream = nullptr);

    /// value_and_grad with the loss in out.loss and, where out asks for them, the scaled
    /// residuals and dL/dkappa_i = (2 w_pde / N_pde) Re(conj(r_i) u_i) at every PDE point.
    void value_and_grad(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>& out,
                        void* stream = nullptr);

    // ---- The residual level (MATH.md, Residual level) --------------------------------------
    // The residual vector r of `in` has R = num_residuals(in) = 2 (num_pde + num_data + num_bc) rows:
    // PDE points, then data points, then boundary points, each point as (re, im), each row
    // scaled by sqrt(w_t / N_t) (N_t = the term's count), so that the loss is exactly sum r^2
    // and its gradient 2 J^T r. Weights must be >= 0. None of these allocates; rows are
    // independent, so results do not depend on the thread count. Columns of B are 0 when
    // in.train_fourier is false.

    /// R for these inputs.
    std::size_t num_residuals(const LossInputs<T>& in) const;
    /// r [R].
    void residuals(const T* params, const LossInputs<T>& in, T* r, void* stream = nullptr);
    /// Rows [row_begin, row_end) of J = dr/dtheta into J [row_end - row_begin, num_params],
    /// row-major in the parameter layout. Any R fits in bounded memory, a range at a time.
    void jacobian(const T* params, const LossInputs<T>& in, std::size_t row_begin,
                  std::size_t row_end, T* J, void* stream = nullptr);
    /// J v [R] for v [num_params].
    void jvp(const T* params, const T* v, const LossInputs<T>& in, T* Jv, void* stream = nullptr);
    /// J^T w [num_params] for w [R].
    void vjp(const T* params, const T* w, const LossInputs<T>& in, T* JTw,
             void* stream = nullptr);

    /// Sets the gradient accumulator buffers().grad to zero.
    void zero_grad(void* stream = nullptr);

private:
    void check_inputs(const char* op, const T* params, const LossInputs<T>& in, bool residual,
                      const T* extra = nullptr, std::size_t extra_size = 0,
                      const char* extra_name = nullptr);
    ModelSpec spec_;
    std::size_t batch_size_;
    Device device_;
    int device_id_;
    std::unique_ptr<Backend<T>> impl_;
};

extern template class Workspace<float>;
extern template class Workspace<double>;

}  // namespace helmpinn
