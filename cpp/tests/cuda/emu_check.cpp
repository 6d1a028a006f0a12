// The CUDA backend's kernels and host logic, run on the CPU under emulation and compared with
// the CPU backend through the public API: Workspace and the seed primitives, Device::cuda vs
// Device::cpu.
//
// Build and run: the CMake target helmpinn_cuda_emulation_check of the C++ tests
// (-DHELMPINN_BUILD_TESTS=ON; tests/test_cuda.py builds and runs it; no GPU or CUDA toolkit
// needed), or by hand with the core's host sources (cpp/src/host_sources.txt):
//     c++ -std=c++20 -O1 -DHELMPINN_CUDA_EMULATION -Icpp/include -Icpp/src \
//         cpp/tests/cuda/emu_check.cpp $(grep -o '^cpp/[^ ]*' cpp/src/host_sources.txt) \
//         -o emu_check && ./emu_check
//
// Checks, for d = 1, 2, 3 and float32 / float64: forward() u, grad u, lap u and the caches;
// value_and_grad() for each loss term and all together (constant and per-point kappa and
// alpha, with and without f and g, frozen Fourier features); several chunks and a partial last
// tile; widths that are not multiples of the vector and warp-unit sizes; bitwise equality of
// two runs; shared-memory and global-scratch activation buffers (HELMPINN_EMU_SMEM); odd tiles
// (HELMPINN_CUDA_TILE); check_finite. The residual level (check_rows): residuals,
// value_and_grad's residuals and grad_kappa, the Jacobian whole and by row ranges crossing
// tiles, chunks and terms (bitwise the rows of the whole), jvp and vjp (bitwise twice, and equal
// to J v and J^T w of the device's own J), frozen B and global counts. The seed primitives (mse_backward, layer_backward with
// and without the tanh factor and dh_prev, fourier_backward for d = 1, 2, 3, adam_step) on
// sizes that are not multiples of any block size, against the host primitives, and bitwise
// equality of two runs. Prints one line per check; exit status 1 on a failure.
// The host side of the backend against what a GPU does and the emulation models
// (check_host_side): the dynamic shared-memory limit is the opt-in limit minus the kernels'
// static shared memory; the tile is chosen by occupancy (registers and shared memory); a kernel
// compiled for fewer threads than a block has is refused with a clear error; the global scratch
// is initialised at allocation; a call on another stream waits for the previous call's
// last-use event, which is recorded with the workspace's device current; a failing
// cudaGetDeviceCount is reported with its error. The core's runtime API (check_runtime_api):
// DeviceScope, pointer_info, DeviceBuffer, copies and stream_wait on a second device. The
// emulation itself (check_emulation): a missing __syncthreads shows in its results, a
// __syncthreads in divergent code ends the run with a message.
// --quick runs the Workspace checks in float64 on three shapes and in float32 on two.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cuda/cuda_backend.cuh"
#include "cuda/primitives.cu"  // the device seed primitives (cuda_mse_backward, ...), emulated
#include "cuda/runtime_cuda.cu"  // has_cuda, cuda_device_count, cuda_device_error, emulated
#include "helmpinn/primitives.hpp"
#include "helmpinn/workspace.hpp"

namespace helmpinn {
template std::unique_ptr<Backend<float>> make_cuda_backend<float>(const ModelSpec&, std::size_t, int);
template std::unique_ptr<Backend<double>> make_cuda_backend<double>(const ModelSpec&, std::size_t, int);
}  // namespace helmpinn

using namespace helmpinn;

namespace {

int failures = 0;

double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
    double num = 0, den = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += b[i] * b[i];
    }
    if (!std::isfinite(num)) return INFINITY;
    return std::sqrt(num) / std::max(std::sqrt(den), 1e-300);
}

template <typename T>
std::vector<double> dbl(const T* p, std::size_t n) {
    return std::vector<double>(p, p + n);
}

void report(bool ok, const std::string& what, double err = -1) {
    if (!ok) ++failures;
    if (err >= 0)
        std::printf("%s %s (rel err %.2e)\n", ok ? "ok  " : "FAIL", what.c_str(), err);
    else
        std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
}

template <typename T>
double tol() {
    return sizeof(T) == 8 ? 1e-13 : 2e-5;
}

template <typename T>
struct Problem {
    ModelSpec spec;
    std::vector<T> theta, x_pde, kappa, f, x_data, y, x_bc, num_bc, alpha, g, a_pde, b_pde, c_pde,
        a_lap;
    std::size_t num_pde = 0, num_data = 0, n_bc_pts = 0;

    Problem(const ModelSpec& s, std::size_t np, std::size_t nd, std::size_t nb, unsigned seed)
        : spec(s), num_pde(np), num_data(nd), n_bc_pts(nb) {
        std::mt19937_64 rng(seed);
        std::normal_distribution<double> N(0.0, 1.0);
        std::uniform_real_distribution<double> U(-1.0, 1.0);
        theta.resize(spec.num_params());
        for (const auto& p : spec.layout()) {
            for (std::size_t k = 0; k < p.size; ++k) {
                double v;
                if (p.name == "B") v = 0.7 * N(rng);
                else if (p.name[0] == 'W') v = N(rng) * std::sqrt(2.0 / double(p.shape[0] + p.shape[1]));
                else v = 0.1 * N(rng);
                theta[p.offset + k] = T(v);
            }
        }
        const int d = spec.in_dim;
        auto fill = [&](std::vector<T>& v, std::size_t n, bool unif) {
            v.resize(n);
            for (auto& e : v) e = T(unif ? U(rng) : N(rng));
        };
        fill(x_pde, np * d, true);
        kappa.resize(np);
        for (auto& e : kappa) e = T(1.0 + 9.0 * (U(rng) + 1.0) / 2.0);
        fill(f, np * 2, false);
        fill(x_data, nd * d, true);
        fill(y, nd * 2, false);
        fill(x_bc, nb * d, true);
        fill(num_bc, nb * d, false);
        for (std::size_t p = 0; p < nb; ++p) {
            double s = 0;
            for (int i = 0; i < d; ++i) s += double(num_bc[p * d + i]) * num_bc[p * d + i];
            for (int i = 0; i < d; ++i) num_bc[p * d + i] = T(num_bc[p * d + i] / std::sqrt(s));
        }
        fill(alpha, nb * 2, false);
        fill(g, nb * 2, false);
        fill(a_pde, np * d * 2, false);  // the general operator's complex coefficients
        fill(b_pde, np * d * 2, false);
        fill(c_pde, np * 2, false);
        for (auto& e : c_pde) e *= T(3);
        fill(a_lap, np * 2, false);  // the scalar form's one a per point
    }

    // terms: bit 0 pde, 1 data, 2 bc; variant: 0 = per-point kappa/alpha with f/g, 1 = constants
    // (kappa 7.3, alpha 0.3 - 2.1i), no f/g, 2 = constants with f/g and a Sommerfeld-like alpha
    // (0 - 2.1i); op (the PDE term's entry): kLaplacian, or the general operator with per-point
    // a, b, c (kOpArrays), complex constants (kOpConstants: the scalar form, a_pde being null),
    // per-point a, constant b and a real per-point c given as kappa (kOpKappa), or the scalar
    // form with per-point a_lap, b, c (kOpLap); f with variants 0 and 2 whatever the entry.
    LossInputs<T> inputs(int terms, int variant, bool train_fourier, int op = 0) const {
        LossInputs<T> in;
        if (terms & 1) {
            in.x_pde = x_pde.data();
            in.num_pde = num_pde;
            if (variant == 0) {
                in.kappa = kappa.data();
            } else {
                in.kappa_const = T(7.3);
            }
            if (variant != 1) in.f = f.data();
            if (op != 0) {
                in.pde_operator = true;
                in.kappa_const = T(0);  // not read with the operator
                in.kappa = op == 3 ? kappa.data() : nullptr;
                if (op == 1 || op == 4) {
                    if (op == 1) in.a_pde = a_pde.data();
                    if (op == 4) in.a_lap = a_lap.data();
                    in.b_pde = b_pde.data();
                    in.c_pde = c_pde.data();
                } else {
                    in.a_const[0] = T(0.8), in.a_const[1] = T(-0.45);
                    in.b_const[0] = T(-1.3), in.b_const[1] = T(0.6);
                    in.c_const[0] = T(6.1), in.c_const[1] = T(1.7);
                    if (op == 3) in.a_pde = a_pde.data();
                }
            }
        }
        if (terms & 2) {
            in.x_data = x_data.data();
            in.num_data = num_data;
            in.y = y.data();
        }
        if (terms & 4) {
            in.x_bc = x_bc.data();
            in.num_bc = n_bc_pts;
            in.normal_bc = num_bc.data();
            if (variant == 0) {
                in.alpha_bc = alpha.data();
            } else {
                in.alpha_const[0] = T(variant == 2 ? 0.0 : 0.3);
                in.alpha_const[1] = T(-2.1);
            }
            if (variant != 1) in.g_bc = g.data();
        }
        in.w_pde = T(0.7);
        in.w_data = T(1.9);
        in.w_bc = T(0.35);
        in.train_fourier = train_fourier;
        return in;
    }
};

/// The PDE term's entry in a case: the Laplacian, or the general operator's coefficients (see
/// Problem::inputs).
enum OpKind : int { kLaplacian = 0, kOpArrays = 1, kOpConstants = 2, kOpKappa = 3, kOpLap = 4 };
const char* op_name(int op) {
    static const char* names[] = {"", " operator(a, b, c per point)", " operator(constants)",
                                  " operator(a per point, c = kappa)",
                                  " operator(one a, b, c per point)"};
    return names[op];
}

/// A case's variant (see Problem::inputs) in the names of the checks.
const char* variant_name(int variant) {
    static const char* names[] = {" (per-point kappa/alpha, f, g)", " (constants)",
                                  " (constants, f, g, Sommerfeld alpha)"};
    return names[variant];
}
const char* variant_short(int variant) {
    static const char* names[] = {" per-point", " constants", " constants f g"};
    return names[variant];
}

template <typename T>
void check_forward(const Problem<T>& pb, std::size_t batch, const std::string& tag) {
    Workspace<T> cpu(pb.spec, batch, Device::cpu), gpu(pb.spec, batch, Device::cuda);
    const int d = pb.spec.in_dim;
    const std::size_t n = pb.num_pde;
    for (int der = 0; der <= 2; ++der) {
        std::vector<T> u1(n * 2), g1(n * d * 2), l1(n * 2), u2(n * 2), g2(n * d * 2), l2(n * 2);
        cpu.forward(pb.theta.data(), pb.x_pde.data(), n, der, u1.data(),
                    der >= 1 ? g1.data() : nullptr, der == 2 ? l1.data() : nullptr);
        gpu.forward(pb.theta.data(), pb.x_pde.data(), n, der, u2.data(),
                    der >= 1 ? g2.data() : nullptr, der == 2 ? l2.data() : nullptr);
        double e = rel_err(dbl(u2.data(), n * 2), dbl(u1.data(), n * 2));
        if (der >= 1) e = std::max(e, rel_err(dbl(g2.data(), n * d * 2), dbl(g1.data(), n * d * 2)));
        if (der == 2) e = std::max(e, rel_err(dbl(l2.data(), n * 2), dbl(l1.data(), n * 2)));
        report(e < tol<T>(), tag + " forward derivatives=" + std::to_string(der), e);
    }
    // caches of the last chunk (after derivatives=2): valid rows only
    const auto& bc = cpu.buffers();
    const auto& bg = gpu.buffers();
    const std::size_t last = n % batch == 0 ? batch : n % batch;
    const int S = d + 2;
    double e = 0;
    auto cmp_streams = [&](const T* a, const T* b, int width) {
        for (int s = 0; s < S; ++s)
            e = std::max(e, rel_err(dbl(b + (s * batch) * width, last * width),
                                    dbl(a + (s * batch) * width, last * width)));
    };
    cmp_streams(bc.features, bg.features, 2 * pb.spec.ff_dim);
    for (int l = 0; l <= pb.spec.num_hidden_layers; ++l) {
        cmp_streams(bc.z[l], bg.z[l], pb.spec.layer_out(l));
        cmp_streams(bc.h[l], bg.h[l], pb.spec.layer_out(l));
    }
    e = std::max(e, rel_err(dbl(bg.du_dx, last * d * 2), dbl(bc.du_dx, last * d * 2)));
    e = std::max(e, rel_err(dbl(bg.d2u_dx2, last * 2), dbl(bc.d2u_dx2, last * 2)));
    e = std::max(e, rel_err(dbl(bg.x_input, last * d), dbl(bc.x_input, last * d)));
    report(e < tol<T>(), tag + " forward caches (features, z, h, du_dx, d2u_dx2, x_input)", e);
}

template <typename T>
void check_grad(const Problem<T>& pb, std::size_t batch, int terms, int variant, bool tf, int op,
                const std::string& tag) {
    Workspace<T> cpu(pb.spec, batch, Device::cpu), gpu(pb.spec, batch, Device::cuda);
    const std::size_t np = pb.spec.num_params();
    const LossInputs<T> in = pb.inputs(terms, variant, tf, op);
    std::vector<T> g1(np, T(123)), g2(np, T(123)), g3(np, T(-5));
    const LossBreakdown l1 = cpu.value_and_grad(pb.theta.data(), g1.data(), in);
    const LossBreakdown l2 = gpu.value_and_grad(pb.theta.data(), g2.data(), in);
    const LossBreakdown l3 = gpu.value_and_grad(pb.theta.data(), g3.data(), in);
    const double eg = rel_err(dbl(g2.data(), np), dbl(g1.data(), np));
    const double el = std::fabs(l2.total - l1.total) / std::max(std::fabs(l1.total), 1e-300);
    double ep = 0;  // the worst term
    for (int t = 0; t < helmpinn::terms::kNumTerms; ++t)
        ep = std::max(ep, std::fabs(l2.mean[t] - l1.mean[t]) / std::max(std::fabs(l1.mean[t]), 1e-300));
    const char* names[8] = {"none", "pde", "data", "pde+data", "bc", "pde+bc", "data+bc", "all"};
    std::string what = tag + " value_and_grad " + names[terms] +
                       variant_name(variant) +
                       (tf ? "" : " frozen B") + op_name(op);
    bool frozen_ok = true;
    if (!tf)
        for (int k = 0; k < pb.spec.in_dim * pb.spec.ff_dim; ++k) frozen_ok &= g2[k] == T(0);
    report(eg < tol<T>() && el < tol<T>() && ep < tol<T>() && frozen_ok, what + " grad",
           std::max({eg, el, ep}));
    const bool same = std::memcmp(g2.data(), g3.data(), np * sizeof(T)) == 0 && l2.total == l3.total &&
                      std::equal(l2.mean, l2.mean + helmpinn::terms::kNumTerms, l3.mean);
    report(same, what + " bitwise reproducible");
}

template <typename F>
std::string error_of(F&& fn);

template <typename T>
void check_finite(const Problem<T>& pb) {
    Workspace<T> gpu(pb.spec, 16, Device::cuda);
    std::vector<T> x = pb.x_pde, g(pb.spec.num_params());
    x[5] = T(NAN);
    x[9] = T(INFINITY);
    LossInputs<T> in = pb.inputs(7, 0, true);
    in.x_pde = x.data();
    in.check_finite = true;
    std::string msg;
    try {
        gpu.value_and_grad(pb.theta.data(), g.data(), in);
    } catch (const std::invalid_argument& e) {
        msg = e.what();
    }
    report(msg == "x_pde contains NaN or Inf (at flat index 5)", "check_finite names x_pde, index 5 [" + msg + "]");
    in.x_pde = pb.x_pde.data();
    in.kappa_const = T(NAN);
    in.kappa = nullptr;
    msg.clear();
    try {
        gpu.value_and_grad(pb.theta.data(), g.data(), in);
    } catch (const std::invalid_argument& e) {
        msg = e.what();
    }
    report(msg == "kappa contains NaN or Inf (at flat index 0)", "check_finite names kappa [" + msg + "]");
    in.kappa_const = T(2);
    msg = "no exception";
    try {
        gpu.value_and_grad(pb.theta.data(), g.data(), in);
    } catch (const std::exception& e) {
        msg = e.what();
    }
    report(msg == "no exception", "check_finite passes finite inputs");
    // the general operator's coefficients: per point, and a constant
    std::vector<T> a = pb.a_pde;
    a[3] = T(NAN);
    in = pb.inputs(7, 0, true, kOpArrays);
    in.a_pde = a.data();
    in.check_finite = true;
    msg = error_of([&] { gpu.value_and_grad(pb.theta.data(), g.data(), in); });
    report(msg == "a_pde contains NaN or Inf (at flat index 3)",
           "check_finite names a_pde, index 3 [" + msg + "]");
    in = pb.inputs(7, 0, true, kOpConstants);
    in.c_const[1] = T(INFINITY);
    in.check_finite = true;
    msg = error_of([&] { gpu.value_and_grad(pb.theta.data(), g.data(), in); });
    report(msg == "c_pde contains NaN or Inf (at flat index 1)",
           "check_finite names c_pde, index 1 [" + msg + "]");
}

// ---- the seed primitives: Device::cuda (emulated) against the host primitives ---------------

template <typename T>
double prim_tol() {
    return sizeof(T) == 8 ? 1e-13 : 1e-5;
}

template <typename T>
std::vector<T> random_vec(std::size_t n, std::mt19937_64& rng, double lo = -1.0, double hi = 1.0) {
    std::uniform_real_distribution<double> U(lo, hi);
    std::vector<T> v(n);
    for (auto& e : v) e = T(U(rng));
    return v;
}

// Runs fn(outs) twice on device outputs that start as NaN (so that an element not written shows
// up), and reports its agreement with the host outputs and the bitwise equality of the two runs.
template <typename T, typename F>
void compare_device(const std::string& what, const std::vector<std::vector<T>>& host, F&& fn) {
    std::vector<std::vector<T>> a, b;
    for (const auto& h : host) a.emplace_back(h.size(), T(NAN));
    b = a;
    fn(a);
    fn(b);
    double e = 0;
    bool same = true;
    for (std::size_t k = 0; k < host.size(); ++k) {
        e = std::max(e, rel_err(dbl(a[k].data(), a[k].size()), dbl(host[k].data(), host[k].size())));
        same = same && std::memcmp(a[k].data(), b[k].data(), a[k].size() * sizeof(T)) == 0;
    }
    report(e < prim_tol<T>(), what, e);
    report(same, what + " bitwise reproducible");
}

// ---- the residual level: Device::cuda (emulated) against the CPU backend --------------------

template <typename T>
std::vector<T> nan_vec(std::size_t n) {
    return std::vector<T>(n, T(NAN));  // an entry the device does not write stays NaN
}

template <typename T>
bool same_bits(const T* a, const T* b, std::size_t n) {
    return std::memcmp(a, b, n * sizeof(T)) == 0;
}

// residuals, value_and_grad's residuals and grad_kappa, jacobian (whole and by row ranges that
// cross tiles, chunks and terms), jvp and vjp, each against the CPU backend on the same inputs;
// `counts`: the global counts set above the local ones.
template <typename T>
void check_rows(const Problem<T>& pb, std::size_t batch, int terms_mask, int variant, bool tf,
                bool counts, int op, const std::string& tag0) {
    Workspace<T> cpu(pb.spec, batch, Device::cpu), gpu(pb.spec, batch, Device::cuda);
    const std::size_t P = pb.spec.num_params();
    LossInputs<T> in = pb.inputs(terms_mask, variant, tf, op);
    if (counts) {
        in.count_pde = in.num_pde ? in.num_pde + 13 : 0;
        in.count_data = in.num_data ? 2 * in.num_data : 0;
        in.count_bc = in.num_bc ? in.num_bc + 1 : 0;
    }
    const std::size_t R = cpu.num_residuals(in);
    const std::string tag = tag0 + " rows terms=" + std::to_string(terms_mask) +
                            variant_short(variant) + (tf ? "" : " frozen B") +
                            (counts ? " counts" : "") + op_name(op);
    report(gpu.num_residuals(in) == R && R == 2 * (in.num_pde + in.num_data + in.num_bc),
           tag + " num_residuals");

    // residuals
    std::vector<T> r1(R), r2 = nan_vec<T>(R);
    cpu.residuals(pb.theta.data(), in, r1.data());
    gpu.residuals(pb.theta.data(), in, r2.data());
    report(rel_err(dbl(r2.data(), R), dbl(r1.data(), R)) < tol<T>(), tag + " residuals",
           rel_err(dbl(r2.data(), R), dbl(r1.data(), R)));

    // value_and_grad with the per-point outputs
    {
        std::vector<T> g1(P), g2 = nan_vec<T>(P), rr1(R), rr2 = nan_vec<T>(R);
        std::vector<T> k1(in.num_pde), k2 = nan_vec<T>(in.num_pde);
        LossOutputs<T> o1, o2;
        o1.residuals = rr1.data();
        o2.residuals = rr2.data();
        if (in.num_pde) {
            o1.grad_kappa = k1.data();
            o2.grad_kappa = k2.data();
        }
        cpu.value_and_grad(pb.theta.data(), g1.data(), in, o1);
        gpu.value_and_grad(pb.theta.data(), g2.data(), in, o2);
        double e = rel_err(dbl(g2.data(), P), dbl(g1.data(), P));
        e = std::max(e, std::fabs(o2.loss.total - o1.loss.total) / std::max(o1.loss.total, 1e-300));
        report(e < tol<T>(), tag + " value_and_grad with outputs: grad, loss", e);
        e = rel_err(dbl(rr2.data(), R), dbl(rr1.data(), R));
        report(e < tol<T>(), tag + " value_and_grad residuals", e);
        double rsq = 0;
        for (T v : rr2) rsq += double(v) * double(v);
        e = std::fabs(rsq - o2.loss.total) / std::max(o2.loss.total, 1e-300);
        report(e < tol<T>(), tag + " sum r^2 == loss", e);
        if (in.num_pde) {
            e = rel_err(dbl(k2.data(), in.num_pde), dbl(k1.data(), in.num_pde));
            report(e < tol<T>(), tag + " value_and_grad grad_kappa", e);
        }
    }

    // the whole Jacobian, then row ranges: bitwise the same rows as the whole one
    std::vector<T> J1(R * P), J2 = nan_vec<T>(R * P);
    cpu.jacobian(pb.theta.data(), in, 0, R, J1.data());
    gpu.jacobian(pb.theta.data(), in, 0, R, J2.data());
    const double ej = rel_err(dbl(J2.data(), R * P), dbl(J1.data(), R * P));
    report(ej < tol<T>(), tag + " jacobian (all " + std::to_string(R) + " rows)", ej);
    bool frozen_ok = true;
    if (!tf)
        for (std::size_t r = 0; r < R; ++r)
            for (int k = 0; k < pb.spec.in_dim * pb.spec.ff_dim; ++k)
                frozen_ok &= J2[r * P + k] == T(0);
    report(frozen_ok, tag + " jacobian: B columns 0 when B is frozen");
    const std::size_t b1 = 2 * in.num_pde, b2 = b1 + 2 * in.num_data;
    const std::pair<std::size_t, std::size_t> ranges[] = {
        {0, 1}, {R - 1, R}, {1, R - 3}, {R / 3, std::min(R, R / 3 + 37)},
        {b1 > 5 ? b1 - 5 : 0, std::min(R, b1 + 7)}, {b2 > 3 ? b2 - 3 : 0, std::min(R, b2 + 4)},
        {R / 2, R / 2}};
    for (const auto& [a, b] : ranges) {
        std::vector<T> Jr = nan_vec<T>((b - a) * P + 1);
        const T sentinel = T(-7.25);
        Jr[(b - a) * P] = sentinel;  // nothing past the range is written
        gpu.jacobian(pb.theta.data(), in, a, b, Jr.data());
        const bool ok = same_bits(Jr.data(), J2.data() + a * P, (b - a) * P) &&
                        Jr[(b - a) * P] == sentinel;
        report(ok, tag + " jacobian rows [" + std::to_string(a) + ", " + std::to_string(b) +
                       ") == those rows of the whole");
    }

    // jvp and vjp, twice each (bitwise reproducible)
    std::mt19937_64 rng(7);
    const std::vector<T> v = random_vec<T>(P, rng), w = random_vec<T>(R, rng);
    std::vector<T> jv1(R), jv2 = nan_vec<T>(R), jv3 = nan_vec<T>(R);
    cpu.jvp(pb.theta.data(), v.data(), in, jv1.data());
    gpu.jvp(pb.theta.data(), v.data(), in, jv2.data());
    gpu.jvp(pb.theta.data(), v.data(), in, jv3.data());
    double e = rel_err(dbl(jv2.data(), R), dbl(jv1.data(), R));
    report(e < tol<T>() && same_bits(jv2.data(), jv3.data(), R), tag + " jvp (and bitwise again)",
           e);
    std::vector<T> jw1(P), jw2 = nan_vec<T>(P), jw3 = nan_vec<T>(P);
    cpu.vjp(pb.theta.data(), w.data(), in, jw1.data());
    gpu.vjp(pb.theta.data(), w.data(), in, jw2.data());
    gpu.vjp(pb.theta.data(), w.data(), in, jw3.data());
    e = rel_err(dbl(jw2.data(), P), dbl(jw1.data(), P));
    report(e < tol<T>() && same_bits(jw2.data(), jw3.data(), P), tag + " vjp (and bitwise again)",
           e);
    // J v and J^T w from the device's own Jacobian (in double)
    std::vector<double> Jv(R, 0.0), JTw(P, 0.0);
    for (std::size_t r = 0; r < R; ++r)
        for (std::size_t k = 0; k < P; ++k) {
            Jv[r] += double(J2[r * P + k]) * double(v[k]);
            JTw[k] += double(J2[r * P + k]) * double(w[r]);
        }
    e = std::max(rel_err(dbl(jv2.data(), R), Jv), rel_err(dbl(jw2.data(), P), JTw));
    report(e < 10 * tol<T>(), tag + " jvp, vjp == J v, J^T w of the device's J", e);
}

template <typename T>
void check_primitives(const char* tname) {
    std::mt19937_64 rng(99);
    const std::string pre = std::string(tname) + " primitive ";
    void* const stream = nullptr;

    for (std::size_t n : {37, 300}) {  // 111 and 900 elements: partial blocks, several blocks
        const std::size_t cols = 3;
        const auto pred = random_vec<T>(n * cols, rng), target = random_vec<T>(n * cols, rng);
        std::vector<T> out(n * cols);
        mse_backward(pred.data(), target.data(), n, cols, out.data());
        compare_device<T>(pre + "mse_backward n=" + std::to_string(n), {out}, [&](auto& o) {
            mse_backward(pred.data(), target.data(), n, cols, o[0].data(), Device::cuda, stream);
        });
    }

    struct LayerCase {
        std::size_t n, out, in;
    };
    for (const LayerCase c : {LayerCase{37, 13, 6}, LayerCase{70, 20, 17}, LayerCase{0, 5, 3}}) {
        const auto G = random_vec<T>(c.n * c.out, rng), H = random_vec<T>(c.n * c.out, rng, -0.99, 0.99),
                   A = random_vec<T>(c.n * c.in, rng), W = random_vec<T>(c.out * c.in, rng);
        for (bool tanh_grad : {true, false}) {
            for (bool want_dh : {true, false}) {
                std::vector<T> dW(c.out * c.in), db(c.out), dh(c.n * c.in);
                // The host wants real pointers even for n = 0; the device takes null for empty.
                T dummy = T(0);
                auto ptr = [&](const std::vector<T>& v) { return v.empty() ? &dummy : v.data(); };
                layer_backward(ptr(G), ptr(H), ptr(A), W.data(), c.n, c.out, c.in, tanh_grad,
                               dW.data(), db.data(), dh.data());
                std::vector<std::vector<T>> host = {dW, db};
                if (want_dh) host.push_back(dh);
                const std::string what = pre + "layer_backward n=" + std::to_string(c.n) + " out=" +
                                         std::to_string(c.out) + " in=" + std::to_string(c.in) +
                                         (tanh_grad ? " tanh" : " linear") +
                                         (want_dh ? " dh_prev" : " dh_prev=null");
                compare_device<T>(what, host, [&](auto& o) {
                    layer_backward(G.data(), tanh_grad ? H.data() : nullptr, A.data(), W.data(),
                                   c.n, c.out, c.in, tanh_grad, o[0].data(), o[1].data(),
                                   want_dh ? o[2].data() : nullptr, Device::cuda, stream);
                });
            }
        }
    }

    for (std::size_t d : {1, 2, 3}) {
        for (std::size_t n : {37, 300}) {  // 300 points: more than one per reducing thread
            const std::size_t m = 5;
            const auto G = random_vec<T>(n * 2 * m, rng), X = random_vec<T>(n * d, rng),
                       B = random_vec<T>(d * m, rng);
            std::vector<T> dB(d * m);
            fourier_backward(G.data(), X.data(), B.data(), n, d, m, dB.data());
            compare_device<T>(pre + "fourier_backward d=" + std::to_string(d) + " n=" +
                                  std::to_string(n), {dB}, [&](auto& o) {
                fourier_backward(G.data(), X.data(), B.data(), n, d, m, o[0].data(), Device::cuda,
                                 stream);
            });
        }
    }

    for (double wd : {0.0, 0.01}) {  // three steps from the same state
        const std::size_t n = 1000;
        const auto p0 = random_vec<T>(n, rng), g = random_vec<T>(n, rng);
        const auto m0 = random_vec<T>(n, rng, -0.1, 0.1), v0 = random_vec<T>(n, rng, 0.0, 0.1);
        std::vector<T> p = p0, m = m0, v = v0;
        for (long step = 1; step <= 3; ++step)
            adam_step(p.data(), g.data(), m.data(), v.data(), n, step, 1e-2, 0.9, 0.999, 1e-8, wd);
        compare_device<T>(pre + "adam_step x3 weight_decay=" + std::to_string(wd), {p, m, v},
                          [&](auto& o) {
            o[0] = p0;
            o[1] = m0;
            o[2] = v0;
            for (long step = 1; step <= 3; ++step)
                adam_step(o[0].data(), g.data(), o[1].data(), o[2].data(), n, step, 1e-2, 0.9,
                          0.999, 1e-8, wd, Device::cuda, stream);
        });
    }

    // Errors before any work: a null pointer of a non-empty array, step < 1, d > 3.
    std::vector<T> buf(64, T(1));
    auto expect = [&](const std::string& what, const std::string& needle, auto&& fn) {
        std::string msg;
        try {
            fn();
        } catch (const std::invalid_argument& e) {
            msg = e.what();
        }
        report(msg.find(needle) != std::string::npos, pre + what + " [" + msg + "]");
    };
    expect("mse_backward(target=null)", "target is null", [&] {
        mse_backward<T>(buf.data(), nullptr, 4, 2, buf.data() + 8, Device::cuda);
    });
    expect("layer_backward(h=null, tanh)", "h is null", [&] {
        layer_backward<T>(buf.data(), nullptr, buf.data(), buf.data(), 2, 2, 2, true,
                          buf.data() + 8, buf.data() + 16, nullptr, Device::cuda);
    });
    expect("fourier_backward(d=4)", "d must be 1, 2 or 3", [&] {
        fourier_backward<T>(buf.data(), buf.data(), buf.data(), 2, 4, 2, buf.data() + 32,
                            Device::cuda);
    });
    expect("adam_step(step=0)", "step", [&] {
        adam_step<T>(buf.data(), buf.data() + 8, buf.data() + 16, buf.data() + 24, 8, 0, 1e-3, 0.9,
                     0.999, 1e-8, 0.0, Device::cuda);
    });
}

// ---- host side: launch plan, attributes, scratch, streams, device errors --------------------

/// Sets environment variables for the life of the object (the emulation reads them per call).
class EnvScope {
public:
    /// A value of "-" unsets the variable.
    EnvScope(std::initializer_list<std::pair<const char*, std::string>> vars) {
        for (const auto& [k, v] : vars) {
            const char* old = std::getenv(k);
            saved_.push_back({k, old ? std::string(old) : std::string(), old != nullptr});
            if (v == "-") unsetenv(k);
            else setenv(k, v.c_str(), 1);
        }
    }
    ~EnvScope() {
        for (const auto& s : saved_) {
            if (s.had) setenv(s.name, s.value.c_str(), 1);
            else unsetenv(s.name);
        }
    }

private:
    struct Saved {
        const char* name;
        std::string value;
        bool had;
    };
    std::vector<Saved> saved_;
};

template <typename F>
std::string error_of(F&& fn) {
    try {
        fn();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "no exception";
}

/// The emulation's log of event records and stream waits (emu::stream_log()) as one line,
/// "record E on 16 (device 1); wait 32 for E (device 1); ", with every event id written E (ids
/// differ between runs).
std::string stream_log_without_event_ids() {
    std::string norm;
    for (const auto& l : emu::stream_log()) {
        std::string t = l;
        if (t.rfind("record ", 0) == 0) t = "record E" + t.substr(t.find(" on "));
        else if (t.rfind("wait ", 0) == 0) t = t.substr(0, t.find(" for ")) + " for E" +
                                               t.substr(t.find(" (device"));
        norm += t + "; ";
    }
    return norm;
}

/// The core's CUDA runtime API (helmpinn/runtime.hpp, runtime_cuda.cu) on two emulated devices,
/// device 0 current throughout: the caller's device is restored by every call.
void check_runtime_api() {
    EnvScope env({{"HELMPINN_EMU_DEVICES", "2"}, {"HELMPINN_EMU_DEVICE_COUNT_ERROR", "-"}});
    cuda::check(cudaSetDevice(0), "cudaSetDevice");
    {
        int inside = -1, previous = -1;
        {
            DeviceScope scope(1);
            inside = current_device();
            previous = scope.previous();
        }
        const std::string bad = error_of([] { DeviceScope scope(5); });
        report(inside == 1 && previous == 0 && current_device() == 0 &&
                   bad.find("cannot make CUDA device 5 current: cudaErrorInvalidDevice") !=
                       std::string::npos,
               "runtime: DeviceScope makes device 1 current and restores 0; device 5 refused [" +
                   bad + "]");
    }
    {
        DeviceBuffer b(64, 1);
        void* const p = b.data();
        double host_value = 0;
        const PointerInfo in = pointer_info(p), last = pointer_info(static_cast<char*>(p) + 63),
                          hi = pointer_info(&host_value);
        bool ok = p != nullptr && b.bytes() == 64 && b.device() == 1 && current_device() == 0 &&
                  in.kind == MemoryKind::device && in.device == 1 && in.on_device() &&
                  last.kind == MemoryKind::device && device_for_pointer(p) == 1 &&
                  hi.kind == MemoryKind::host && hi.device == -1 && !hi.on_device() &&
                  device_for_pointer(&host_value) == -1;
        // Copies through the buffer, on device 1 with device 0 current.
        const double src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
        double back[8] = {};
        copy_to_device(p, src, sizeof src, 1);
        copy_to_host(back, p, sizeof back, 1);
        ok = ok && std::memcmp(src, back, sizeof src) == 0 && current_device() == 0;
        // Moves hand the memory over; reset frees it (the emulation forgets the pointer).
        DeviceBuffer c(std::move(b));
        DeviceBuffer d;
        d = std::move(c);
        ok = ok && b.empty() && c.empty() && d.data() == p && d.bytes() == 64 && d.device() == 1;
        d.reset();
        ok = ok && d.empty() && pointer_info(p).kind == MemoryKind::host;
        const DeviceBuffer none(0, 1);
        ok = ok && none.empty() && none.bytes() == 0;
        report(ok, "runtime: DeviceBuffer on device 1 (pointer_info, copies, moves, reset)");
    }
    {
        emu::stream_log().clear();
        void* const sa = reinterpret_cast<void*>(std::uintptr_t(16));
        void* const sb = reinterpret_cast<void*>(std::uintptr_t(32));
        void* const legacy = reinterpret_cast<void*>(std::uintptr_t(1));
        stream_wait(sb, sa, 1);
        stream_wait(sa, sa, 1);            // the same stream: nothing to do
        stream_wait(nullptr, legacy, 1);   // both the legacy default stream
        const std::string bad = error_of([&] { stream_wait(sb, sa, 7); });
        const std::string norm = stream_log_without_event_ids();
        report(norm == "record E on 16 (device 1); wait 32 for E (device 1); " &&
                   current_device() == 0 && bad.find("cannot make CUDA device 7 current") !=
                                                std::string::npos,
               "runtime: stream_wait records on the producer and waits on the consumer, device 1 "
               "current [" + norm + "] [" + bad + "]");
    }
}

// ---- the emulation itself: the order of the threads between barriers, divergent barriers ----

/// Thread t writes its own float of shared memory, then (after __syncthreads when `sync`)
/// reads its neighbours' t + 1 and t - 1 (cyclically) into out[2t] and out[2t + 1].
__global__ void neighbours_kernel(int sync, float* out) {
    HELMPINN_DYNAMIC_SMEM(smem);
    float* s = reinterpret_cast<float*>(smem);
    const unsigned t = threadIdx.x, n = blockDim.x;
    s[t] = float(t);
    if (sync) __syncthreads();
    out[2 * t] = s[(t + 1) % n];
    out[2 * t + 1] = s[(t + n - 1) % n];
}

/// Thread 0 leaves before the barrier that the others wait at.
__global__ void divergent_barrier_kernel(float* out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1.0f;
}

void check_emulation() {
    constexpr unsigned n = 64;
    const std::size_t smem = n * sizeof(float);
    // Without the barrier each neighbour's write is missed (read as the NaN bytes shared memory
    // starts with) in one of two launches: the threads of a phase run in one order, then in the
    // other, so a missing barrier shows whichever of two threads writes.
    std::vector<float> a(2 * n), b(2 * n);
    HELMPINN_LAUNCH(neighbours_kernel, 1, n, smem, nullptr)(0, a.data());
    HELMPINN_LAUNCH(neighbours_kernel, 1, n, smem, nullptr)(0, b.data());
    bool missed = true;
    for (unsigned k = 0; k < 2 * n; ++k) missed = missed && (std::isnan(a[k]) || std::isnan(b[k]));
    HELMPINN_LAUNCH(neighbours_kernel, 1, n, smem, nullptr)(1, a.data());
    HELMPINN_LAUNCH(neighbours_kernel, 1, n, smem, nullptr)(1, b.data());
    bool seen = true;
    for (unsigned t = 0; t < n; ++t)
        for (const auto* o : {&a, &b})
            seen = seen && (*o)[2 * t] == float((t + 1) % n) && (*o)[2 * t + 1] == float((t + n - 1) % n);
    report(missed && seen && cudaGetLastError() == cudaSuccess,
           "emulation: without __syncthreads every neighbour's write is missed in one of two "
           "launches (the threads run in both orders); with it every one is read");
    // A barrier that a thread of the block never reaches: a GPU may hang; the emulation ends
    // the process with a message (in a child process here, under an alarm in case it hangs).
    int pipe_fd[2];
    std::string msg;
    int status = -1;
    if (pipe(pipe_fd) == 0) {
        std::fflush(stdout);
        const pid_t pid = fork();
        if (pid == 0) {
            dup2(pipe_fd[1], 2);
            close(pipe_fd[0]);
            alarm(20);
            std::vector<float> out(n);
            HELMPINN_LAUNCH(divergent_barrier_kernel, 1, n, 0, nullptr)(out.data());
            _exit(0);
        }
        close(pipe_fd[1]);
        char buf[512];
        for (ssize_t r; (r = read(pipe_fd[0], buf, sizeof buf)) > 0;) msg.append(buf, std::size_t(r));
        close(pipe_fd[0]);
        if (pid > 0) waitpid(pid, &status, 0);
    }
    while (!msg.empty() && msg.back() == '\n') msg.pop_back();
    report(status != -1 && WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT &&
               msg.find("deadlock in block (0, 0) of 64 threads: 63 at __syncthreads, 1 at the "
                        "kernel's end") != std::string::npos,
           "emulation: a __syncthreads that thread 0 never reaches ends the run [" + msg + "]");
}

void check_host_side() {
    // These checks set the device and the knobs themselves: whatever the run was given is unset.
    EnvScope base({{"HELMPINN_CUDA_TILE", "-"}, {"HELMPINN_CUDA_SCRATCH", "-"},
                   {"HELMPINN_EMU_SMEM", "-"}, {"HELMPINN_EMU_SMS", "-"},
                   {"HELMPINN_EMU_STATIC_SMEM", "-"}, {"HELMPINN_EMU_REGS", "-"},
                   {"HELMPINN_EMU_MAX_THREADS", "-"}, {"HELMPINN_EMU_DEVICES", "-"},
                   {"HELMPINN_EMU_DEVICE_COUNT_ERROR", "-"}});
    using B64 = cuda::CudaBackend<double>;
    const ModelSpec spec(2, 8, 24, 2);  // d = 2: 4 PDE streams, 32-point tiles fill warp tiles
    const std::size_t batch = 256;
    // Shared memory of a d = 2 workspace's tiles of 32 and 16 points (float64).
    const int ld = cuda::plan_ld<double>(spec.max_width());
    auto smem_for = [&](int P) {
        return int(cuda::fixed_smem_bytes<double>() +
                   2 * cuda::plan_buffer<double>(P, 4, ld, 2, spec.ff_dim) * 8);
    };
    const int s32 = smem_for(32), s16 = smem_for(16);

    {   // Static shared memory counts against the opt-in limit (a GPU refuses the attribute
        // otherwise: cudaErrorInvalidValue, every CUDA Workspace would fail).
        EnvScope env({{"HELMPINN_EMU_STATIC_SMEM", "4096"}});
        std::string msg = error_of([&] {
            B64 b(spec, batch, 0);
            const auto& p = b.launch_plan();
            const bool ok = p.smem_limit == 232448 - 4096 && p.static_smem == 4096 &&
                            p.smem_bytes <= p.smem_limit && !p.global_scratch;
            report(ok, "plan: dynamic shared-memory limit = opt-in 232448 - static 4096 = " +
                           std::to_string(p.smem_limit));
        });
        report(msg == "no exception", "a workspace builds with 4096 B of static shared memory [" + msg + "]");
    }
    {   // A tile whose buffers fit the opt-in limit only without the static part is not taken.
        EnvScope env({{"HELMPINN_EMU_SMEM", std::to_string(s32 + 100)},
                      {"HELMPINN_EMU_STATIC_SMEM", "512"}});
        B64 b(spec, batch, 0);
        report(b.launch_plan().tile == 16, "plan: a tile that fits only without the static shared "
                                           "memory is not taken (tile " +
                                               std::to_string(b.launch_plan().tile) + ")");
    }
    {   // Occupancy chooses the tile: with 64 registers per thread (4 blocks by registers) and
        // shared memory for one 32-point block or three 16-point blocks, 16 points win
        // (48 resident points against 32) ...
        const std::string optin = std::to_string(3 * (s16 + 1024) - 1024);
        EnvScope env({{"HELMPINN_EMU_SMEM", optin}, {"HELMPINN_EMU_REGS", "64"}});
        B64 b(spec, batch, 0);
        const auto& p = b.launch_plan();
        report(p.tile == 16 && p.blocks_per_sm == 3 && s32 + 1024 > (3 * (s16 + 1024)) / 2,
               "plan: occupancy picks 16-point tiles x 3 blocks/SM over 32 x 1 (tile " +
                   std::to_string(p.tile) + ", " + std::to_string(p.blocks_per_sm) + " blocks/SM)");
    }
    {   // ... and with 128 registers (2 blocks by registers) it is a tie: the larger tile.
        const std::string optin = std::to_string(3 * (s16 + 1024) - 1024);
        EnvScope env({{"HELMPINN_EMU_SMEM", optin}, {"HELMPINN_EMU_REGS", "128"}});
        B64 b(spec, batch, 0);
        const auto& p = b.launch_plan();
        report(p.tile == 32 && p.blocks_per_sm == 1 && p.regs == 128,
               "plan: register-limited to 2 blocks/SM, 32-point tiles x 1 (tile " +
                   std::to_string(p.tile) + ", " + std::to_string(p.blocks_per_sm) + " blocks/SM)");
    }
    {   // The general operator's 2d + 1 = 5 streams run in the buffers of the Laplacian's 4: the
        // most points whose rows fit in a tile's, chunks whose streams fit in the caches' rows.
        for (const char* tile : {"-", "7", "3"}) {
            EnvScope env({{"HELMPINN_CUDA_TILE", tile}});
            B64 b(spec, batch, 0);
            const auto& p = b.launch_plan();
            auto fits_most = [](int P, int op, int q) {  // q rows a point and stream
                const long long rows = cuda::round_up(4LL * q * P, 32);
                return op >= 1 && op <= P && 5LL * q * op <= rows &&
                       (op == P || 5LL * q * (op + 1) > rows);
            };
            const bool ok = fits_most(p.tile, p.op_tile, 1) &&
                            fits_most(p.row_tile, p.row_op_tile, 2) &&
                            p.op_chunk == batch * 4 / 5 &&
                            (std::string(tile) == "3" || p.op_tile < p.tile);
            report(ok, std::string("plan: general operator in the Laplacian's buffers (tile ") +
                           tile + "): tile " + std::to_string(p.tile) + " -> " +
                           std::to_string(p.op_tile) + ", rows tile " +
                           std::to_string(p.row_tile) + " -> " + std::to_string(p.row_op_tile) +
                           ", chunk " + std::to_string(batch) + " -> " +
                           std::to_string(p.op_chunk));
        }
    }
    {   // Kernels compiled for fewer threads than a block has: a clear error, not a failed launch.
        EnvScope env({{"HELMPINN_EMU_MAX_THREADS", "128"}});
        const std::string msg = error_of([&] { B64 b(spec, batch, 0); });
        report(msg.find("compiled for at most 128 threads per block") != std::string::npos,
               "plan: kernels limited to 128 threads are refused [" + msg + "]");
    }
    {   // The global scratch is set at allocation (padding rows are read, never written).
        EnvScope env({{"HELMPINN_CUDA_SCRATCH", "global"}});
        B64 b(spec, batch, 0);
        const auto* bytes = reinterpret_cast<const unsigned char*>(b.scratch());
        bool zero = b.launch_plan().global_scratch && bytes && b.scratch_size() > 0;
        for (std::size_t i = 0; zero && i < b.scratch_size() * sizeof(double); ++i) zero = bytes[i] == 0;
        const auto* rbytes = reinterpret_cast<const unsigned char*>(b.row_scratch());
        bool rzero = rbytes && b.row_scratch_size() > 0;
        for (std::size_t i = 0; rzero && i < b.row_scratch_size() * sizeof(double); ++i)
            rzero = rbytes[i] == 0;
        report(zero && rzero, "global scratch (" + std::to_string(b.scratch_size()) +
                                  " elements) and residual-level scratch (" +
                                  std::to_string(b.row_scratch_size()) +
                                  " elements) are zero before the first call");
    }
    {   // The last-use event: a call on another stream waits for the previous call's work; a
        // call on the same stream does not need to. Workspace on device 1 of 2, device 0 current:
        // the event is created and recorded with device 1 current (else the record fails).
        EnvScope env({{"HELMPINN_EMU_DEVICES", "2"}});
        cuda::check(cudaSetDevice(0), "cudaSetDevice");
        Problem<double> pb(spec, 40, 10, 10, 5u);
        B64 b(spec, 32, 1);
        emu::stream_log().clear();
        void* const sa = reinterpret_cast<void*>(std::uintptr_t(16));
        void* const sb = reinterpret_cast<void*>(std::uintptr_t(32));
        std::vector<double> u(80), g(spec.num_params());
        std::string msg = error_of([&] {
            b.forward(pb.theta.data(), pb.x_pde.data(), 40, 0, u.data(), nullptr, nullptr, sa);
            LossOutputs<double> lo;
            b.value_and_grad(pb.theta.data(), g.data(), pb.inputs(7, 0, true), lo, sb);
            b.zero_grad(sb);
            b.forward(pb.theta.data(), pb.x_pde.data(), 40, 0, u.data(), nullptr, nullptr, sa);
        });
        const std::string norm = stream_log_without_event_ids();
        const std::string want =
            "record E on 16 (device 1); wait 32 for E (device 1); record E on 32 (device 1); "
            "record E on 32 (device 1); wait 16 for E (device 1); record E on 16 (device 1); ";
        int cur = -1;
        cudaGetDevice(&cur);
        report(msg == "no exception" && norm == want && cur == 0,
               "last-use event: other streams wait, the same stream does not, device 1 current "
               "[" + msg + "] [" + norm + "]");
    }
    {   // A failing cudaGetDeviceCount is shown with its error, not as "0 devices".
        EnvScope env({{"HELMPINN_EMU_DEVICE_COUNT_ERROR", "1"}});
        const std::string why = cuda_device_error();
        const std::string msg = error_of([&] { B64 b(spec, batch, 0); });
        report(cuda_device_count() == 0 &&
                   why == "cudaGetDeviceCount: cudaErrorInsufficientDriver (CUDA driver version "
                          "is insufficient for CUDA runtime version)" &&
                   msg.find("CUDA device 0 is not available: no CUDA device found: " + why) !=
                       std::string::npos,
               "device count error shown [" + why + "] [" + msg + "]");
    }
    report(cuda_device_error().empty() && cuda_device_count() == 1,
           "cuda_device_error() is empty with a device");
    check_runtime_api();
}

/// The loss cases (loss_cases.inc: ONE table, which tests/test_backend_cases.py runs on the CPU
/// against the NumPy reference and on a GPU against the CPU): every entry on every shape of
/// run_type in both dtypes (entries with quick = 0 are left out of --quick runs).
enum CheckKind : int { kGrad = 0, kRows = 1 };
struct LossCase {
    int check;
    int terms, variant;
    bool train_fourier, counts;
    int op;
    bool quick;
};
namespace loss_cases {  // the names the table's entries use
constexpr int grad = kGrad, rows = kRows;
constexpr int laplacian = kLaplacian, op_arrays = kOpArrays, op_constants = kOpConstants,
              op_kappa = kOpKappa, op_lap = kOpLap;
#define HELMPINN_LOSS_CASE(check, terms, variant, tf, counts, op, quick) \
    {check, terms, variant, tf != 0, counts != 0, op, quick != 0},
constexpr LossCase table[] = {
#include "loss_cases.inc"
};
#undef HELMPINN_LOSS_CASE
}  // namespace loss_cases

template <typename T>
void run_type(const char* tname, bool quick) {
    struct Case {
        ModelSpec spec;
        std::size_t np, nd, nb, batch;
    };
    std::vector<Case> cases = {
        {{1, 4, 8, 2}, 70, 37, 19, 32},    // chunks of 32, partial tiles
        {{2, 5, 13, 2}, 53, 11, 29, 64},   // widths off the vector / 8-column grid
        {{3, 3, 6, 3}, 41, 20, 33, 40},
    };
    if (!quick) cases.push_back({{2, 12, 40, 1}, 90, 30, 25, 1000});  // one chunk, L = 1
    if (quick) {  // --quick: float64 on the first three shapes, float32 on two (one of them L = 1)
        if (sizeof(T) == 4) cases = {cases[1], {{2, 12, 40, 1}, 90, 30, 25, 1000}};
    }
    for (const auto& c : cases) {
        const std::string tag = std::string(tname) + " d=" + std::to_string(c.spec.in_dim) +
                                " m=" + std::to_string(c.spec.ff_dim) + " H=" +
                                std::to_string(c.spec.hidden_dim) + " L=" +
                                std::to_string(c.spec.num_hidden_layers);
        Problem<T> pb(c.spec, c.np, c.nd, c.nb, 17u + unsigned(c.spec.in_dim));
        check_forward(pb, c.batch, tag);
        for (const LossCase& lc : loss_cases::table) {
            if (quick && !lc.quick) continue;
            if (lc.check == kGrad)
                check_grad(pb, c.batch, lc.terms, lc.variant, lc.train_fourier, lc.op, tag);
            else
                check_rows(pb, c.batch, lc.terms, lc.variant, lc.train_fourier, lc.counts, lc.op,
                           tag);
        }
    }
    check_finite(Problem<T>({2, 3, 5, 2}, 12, 6, 6, 3u));
    check_primitives<T>(tname);
}

}  // namespace

int main(int argc, char** argv) {
    const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
    const char* smem = std::getenv("HELMPINN_EMU_SMEM");
    const char* tile = std::getenv("HELMPINN_CUDA_TILE");
    const char* stat = std::getenv("HELMPINN_EMU_STATIC_SMEM");
    const char* regs = std::getenv("HELMPINN_EMU_REGS");
    std::printf("# CUDA backend under CPU emulation: shared memory %s bytes (static %s), "
                "%s registers, tile %s\n",
                smem ? smem : "232448 (default)", stat ? stat : "0", regs ? regs : "128",
                tile ? tile : "auto");
    try {
        check_emulation();
        check_host_side();
        run_type<double>("float64", quick);
        run_type<float>("float32", quick);
    } catch (const std::exception& e) {
        std::printf("FAIL exception: %s\n", e.what());
        return 1;
    }
    std::printf("# %d failure(s)\n", failures);
    return failures ? 1 : 0;
}
