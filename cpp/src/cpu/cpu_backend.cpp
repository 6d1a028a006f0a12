// The CPU backend: fused, tiled forward streams and adjoint pass (MATH.md) on OpenMP threads.
//
// Points are walked in chunks of batch_size; a chunk in tiles of `tile` points. A tile goes
// forward through every layer (its rows of the workspace caches stay hot in cache), seeds the
// loss adjoints, and goes backward through every layer at once. Tile t of a chunk always adds
// its gradient into slot t % num_slots, slots are processed in increasing t, and the slots are
// summed in a fixed order at the end: the result is bitwise the same for any thread count.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#include "../backend.hpp"
#include "../common/stream_math.hpp"
#include "aligned.hpp"
#include "gemm.hpp"
#include "parallel.hpp"
#include "vmath.hpp"
#include <type_traits>

namespace helmpinn {
namespace {

using cpu::AlignedArray;
using cpu::gemm;

enum Term { kPde = 0, kData = 1, kBc = 2 };

template <int V>
using Int = std::integral_constant<int, V>;

// Calls f(Int<d>, Int<ns>) for the compile-time pair (d, ns), ns in {1, d+1, d+2}: the
// per-element stream math then unrolls and the loops over features vectorise.
template <typename F>
void with_streams(int d, int ns, F&& f) {
    switch (d * 10 + ns) {
        case 11: f(Int<1>{}, Int<1>{}); break;
        case 12: f(Int<1>{}, Int<2>{}); break;
        case 13: f(Int<1>{}, Int<3>{}); break;
        case 21: f(Int<2>{}, Int<1>{}); break;
        case 23: f(Int<2>{}, Int<3>{}); break;
        case 24: f(Int<2>{}, Int<4>{}); break;
        case 31: f(Int<3>{}, Int<1>{}); break;
        case 34: f(Int<3>{}, Int<4>{}); break;
        case 35: f(Int<3>{}, Int<5>{}); break;
        default: throw std::logic_error("helmpinn: unsupported stream count");
    }
}

template <typename T>
class CpuBackend final : public Backend<T> {
public:
    static constexpr int tile = 64;       // points per tile
    static constexpr int num_slots = 32;  // fixed gradient slots (independent of threads)

    CpuBackend(const ModelSpec& spec, std::size_t batch)
        : sp_(spec), B_(batch), d_(spec.in_dim), m_(spec.ff_dim), H_(spec.hidden_dim),
          L_(spec.num_hidden_layers), S_(spec.in_dim + 2), np_(spec.num_params()) {
        const std::size_t Bs = B_ * S_;
        x_input_.resize(B_ * d_);
        feat_.resize(Bs * 2 * m_);
        for (int l = 0; l <= L_; ++l) z_[l].resize(Bs * sp_.layer_out(l));
        for (int l = 0; l < L_; ++l) h_[l].resize(Bs * H_);
        du_dx_.resize(B_ * d_ * 2);
        d2u_.resize(B_ * 2);
        grad_.resize(np_);
        std::size_t wt = 0;
        for (int l = 0; l <= L_; ++l) {
            wt_off_[l] = wt;
            wt += std::size_t(sp_.layer_in(l)) * sp_.layer_out(l);
        }
        wt_.resize(wt);
        omega_.resize(std::size_t(d_) * m_);
        Omega_.resize(m_);
        slots_ = std::min<std::size_t>(num_slots, (B_ + tile - 1) / tile);
        adj_stride_ = std::size_t(S_) * tile * sp_.max_width();
        adj_.resize(slots_ * 2 * adj_stride_);
        slot_grad_.resize(slots_ * np_);
        slot_loss_.resize(slots_ * 3);
        slot_fresh_.resize(slots_);
        zero(grad_.data(), np_);

        point_buffers(bufs_, sp_, B_, x_input_, feat_, z_, h_, du_dx_, d2u_, grad_);
    }

    const WorkspaceBuffers<T>& buffers() const override { return bufs_; }

    std::size_t memory_bytes() const override {
        std::size_t b = x_input_.bytes() + feat_.bytes() + du_dx_.bytes() + d2u_.bytes() +
                        grad_.bytes() + wt_.bytes() + omega_.bytes() + Omega_.bytes() +
                        adj_.bytes() + slot_grad_.bytes() + slot_loss_.bytes();
        for (int l = 0; l <= L_; ++l) b += z_[l].bytes();
        for (int l = 0; l < L_; ++l) b += h_[l].bytes();
        return b;
    }

    void zero_grad(void*) override { zero(grad_.data(), np_); }

    void forward(const T* params, const T* x, std::size_t n, int derivatives, T* u, T* grad_u,
                 T* lap_u, void*) override {
        prepare(params);
        const int ns = derivatives == 0 ? 1 : derivatives == 1 ? d_ + 1 : d_ + 2;
        with_streams(d_, ns, [&](auto D, auto NS) {
            for (std::size_t c0 = 0; c0 < n; c0 += B_) {
                const int nc = int(std::min(B_, n - c0));
                const int ntiles = (nc + tile - 1) / tile;
                cpu::parallel_for(ntiles, cpu::Schedule::dynamic, [&](int t) {
                    const int p0 = t * tile, np = std::min(tile, nc - p0);
                    forward_tile<D(), NS()>(params, p0, np, x + c0 * d_);
                    copy_outputs(NS(), p0, np, c0, u, grad_u, lap_u);
                });
            }
        });
    }

    LossBreakdown value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                 void*) override {
        prepare(params);
        const std::size_t counts[3] = {in.n_pde, in.n_data, in.n_bc};
        std::size_t used = 0;
        for (std::size_t c : counts) used = std::max(used, (std::min(c, B_) + tile - 1) / tile);
        used = std::min(used, slots_);
        std::fill(slot_fresh_.begin(), slot_fresh_.end(), char(1));  // zeroed on first use
        std::fill(slot_loss_.begin(), slot_loss_.end(), 0.0);

        if (in.n_pde) run_term(kPde, params, in, in.x_pde, in.n_pde, d_ + 2);
        if (in.n_data) run_term(kData, params, in, in.x_data, in.n_data, 1);
        if (in.n_bc) run_term(kBc, params, in, in.x_bc, in.n_bc, d_ + 1);

        // Fixed-order reduction of the slots, parallel over parameters.
        const long np = long(np_);
        cpu::parallel_for(np, cpu::Schedule::fixed, [&](long i) {
            T s = T(0);
            for (std::size_t k = 0; k < used; ++k)
                if (!slot_fresh_[k]) s += slot_grad_[k * np_ + i];
            grad[i] = s;
        });
        if (!in.train_fourier) zero(grad, std::size_t(d_) * m_);

        double sums[3] = {0, 0, 0};  // indexed by Term: pde, data, bc
        for (std::size_t k = 0; k < slots_; ++k)
            for (int term = 0; term < 3; ++term) sums[term] += slot_loss_[k * 3 + term];
        return loss_breakdown(sums, in);
    }

private:
    static void zero(T* p, std::size_t n) { std::memset(p, 0, n * sizeof(T)); }

    // W^T of every layer and the Fourier frequencies 2 pi B, once per call.
    void prepare(const T* params) {
        for (int l = 0; l <= L_; ++l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const T* W = params + sp_.offset_W(l);
            T* WT = wt_.data() + wt_off_[l];
            for (int o = 0; o < out; ++o)
                for (int i = 0; i < in; ++i) WT[std::size_t(i) * out + o] = W[std::size_t(o) * in + i];
        }
        for (int j = 0; j < m_; ++j) {
            T s = T(0);
            for (int i = 0; i < d_; ++i) {
                const T w = T(math::two_pi) * params[sp_.offset_B() + std::size_t(i) * m_ + j];
                omega_[std::size_t(i) * m_ + j] = w;
                s += w * w;
            }
            Omega_[j] = s;
        }
    }

    // Forward streams of points p0 .. p0+np of the current chunk (x points at the chunk start).
    template <int D, int NS>
    void forward_tile(const T* params, int p0, int np, const T* x) {
        const std::size_t B = B_;
        const int m = m_, H = H_;
        for (int p = 0; p < np; ++p) {
            const std::size_t gp = std::size_t(p0 + p);
            T* xi = x_input_.data() + gp * D;
            for (int i = 0; i < D; ++i) xi[i] = x[gp * D + i];
            T* f = feat_.data() + gp * 2 * m;
            for (int j = 0; j < m; ++j)
                math::fourier_forward(xi, omega_.data() + j, m, Omega_[j], D, NS, f + j, f + m + j,
                                      std::ptrdiff_t(B * 2 * m));
        }
        const T* A = feat_.data();
        for (int l = 0; l <= L_; ++l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const std::size_t ssA = B * in, ssZ = B * out;
            T* Z = z_[l].data();
            if (l < L_) {
                for (int s = 0; s < NS; ++s)
                    gemm<T>(np, out, in, A + s * ssA + std::size_t(p0) * in, in, 1,
                            wt_.data() + wt_off_[l], out, Z + s * ssZ + std::size_t(p0) * out,
                            out, false);
            } else {  // two outputs: two dot products per row, vectorised along the row
                const T* W0 = params + sp_.offset_W(l);
                const T* W1 = W0 + in;
                for (int s = 0; s < NS; ++s)
                    for (int p = 0; p < np; ++p) {
                        const T* a = A + s * ssA + std::size_t(p0 + p) * in;
                        T u0 = T(0), u1 = T(0);
#pragma omp simd reduction(+ : u0, u1)
                        for (int i = 0; i < in; ++i) {
                            u0 += a[i] * W0[i];
                            u1 += a[i] * W1[i];
                        }
                        T* zr = Z + s * ssZ + std::size_t(p0 + p) * 2;
                        zr[0] = u0;
                        zr[1] = u1;
                    }
            }
            const T* bias = params + sp_.offset_b(l);
            for (int p = 0; p < np; ++p) {
                T* zr = Z + std::size_t(p0 + p) * out;
                for (int j = 0; j < out; ++j) zr[j] += bias[j];
            }
            if (l == L_) break;
            T* Hh = h_[l].data();
            const std::size_t r0 = std::size_t(p0) * H;
            cpu::tanh_array<T>(Z + r0, Hh + r0, np * H);  // value stream, vectorised
            if (NS > 1) {
                for (int p = 0; p < np; ++p) {
                    const std::size_t r = std::size_t(p0 + p) * H;
#pragma omp simd
                    for (int j = 0; j < H; ++j)
                        math::tanh_streams(Z + r + j, Hh[r + j], Hh + r + j,
                                           std::ptrdiff_t(ssZ), D, NS);
                }
            }
            A = Hh;
        }
    }

    void copy_outputs(int ns, int p0, int np, std::size_t c0, T* u, T* grad_u, T* lap_u) {
        const std::size_t B = B_;
        const int d = d_;
        const T* U = z_[L_].data();
        for (int p = 0; p < np; ++p) {
            const std::size_t lp = std::size_t(p0 + p), gp = c0 + lp;
            for (int c = 0; c < 2; ++c) {
                if (u) u[gp * 2 + c] = U[lp * 2 + c];
                if (ns > 1)
                    for (int i = 0; i < d; ++i) {
                        const T v = U[(1 + i) * B * 2 + lp * 2 + c];
                        du_dx_[(lp * d + i) * 2 + c] = v;
                        if (grad_u) grad_u[(gp * d + i) * 2 + c] = v;
                    }
                if (ns > d + 1) {
                    const T v = U[(d + 1) * B * 2 + lp * 2 + c];
                    d2u_[lp * 2 + c] = v;
                    if (lap_u) lap_u[gp * 2 + c] = v;
                }
            }
        }
    }

    void run_term(Term term, const T* params, const LossInputs<T>& in, const T* x, std::size_t n,
                  int ns) {
        const T w = term == kPde ? in.w_pde : term == kData ? in.w_data : in.w_bc;
        const T c = T(2) * w / T(n);
        with_streams(d_, ns, [&](auto D, auto NS) {
            for (std::size_t c0 = 0; c0 < n; c0 += B_) {
                const int nc = int(std::min(B_, n - c0));
                const int ntiles = (nc + tile - 1) / tile;
                const int nsl = int(std::min<std::size_t>(slots_, std::size_t(ntiles)));
                cpu::parallel_for(nsl, cpu::Schedule::dynamic, [&](int k) {
                    for (int t = k; t < ntiles; t += int(slots_)) {
                        const int p0 = t * tile, np = std::min(tile, nc - p0);
                        forward_tile<D(), NS()>(params, p0, np, x + c0 * d_);
                        T* g0 = adj_.data() + std::size_t(k) * 2 * adj_stride_;
                        slot_loss_[std::size_t(k) * 3 + term] +=
                            seed(term, in, NS(), p0, np, c0, c, g0);
                        // The first tile of a slot in this call writes its gradient, later ones add.
                        const bool first = slot_fresh_[k] != 0;
                        slot_fresh_[k] = 0;
                        backward_tile<D(), NS()>(params, p0, np, k, first, in.train_fourier);
                    }
                });
            }
        });
    }

    // Loss adjoints at the output, tile-local layout [ns, tile, 2]; returns the tile's sum |r|^2.
    double seed(Term term, const LossInputs<T>& in, int ns, int p0, int np, std::size_t c0, T c,
                T* g) const {
        const std::size_t B = B_;
        const int d = d_;
        const T* U = z_[L_].data();
        const std::ptrdiff_t ssU = std::ptrdiff_t(B * 2), ssG = 2 * tile;
        double acc = 0.0;
        for (int p = 0; p < np; ++p) {
            const std::size_t lp = std::size_t(p0 + p), gp = c0 + lp;
            const T* u = U + lp * 2;
            T* gu = g + std::size_t(p) * 2;
            T tmp[2 * 5] = {};  // u streams gathered to a small local stride for the seed functions
            if (term == kPde) {
                for (int s = 0; s < ns; ++s) {
                    tmp[2 * s] = u[s * ssU];
                    tmp[2 * s + 1] = u[s * ssU + 1];
                }
                const T kap = in.kappa ? in.kappa[gp] : in.kappa_const;
                const T fr = in.f ? in.f[gp * 2] : T(0), fi = in.f ? in.f[gp * 2 + 1] : T(0);
                acc += double(math::pde_seed(tmp, 2, d, kap, fr, fi, c, tmp));
            } else if (term == kData) {
                tmp[0] = u[0];
                tmp[1] = u[1];
                acc += double(math::data_seed(tmp, in.y[gp * 2], in.y[gp * 2 + 1], c, tmp));
            } else {
                for (int s = 0; s < ns; ++s) {
                    tmp[2 * s] = u[s * ssU];
                    tmp[2 * s + 1] = u[s * ssU + 1];
                }
                const T ar = in.alpha_bc ? in.alpha_bc[gp * 2] : in.alpha_const[0];
                const T ai = in.alpha_bc ? in.alpha_bc[gp * 2 + 1] : in.alpha_const[1];
                const T gr = in.g_bc ? in.g_bc[gp * 2] : T(0);
                const T gi = in.g_bc ? in.g_bc[gp * 2 + 1] : T(0);
                acc += double(math::robin_seed(tmp, 2, d, in.normal_bc + gp * d, ar, ai, gr, gi,
                                               c, tmp));
            }
            for (int s = 0; s < ns; ++s) {
                gu[s * ssG] = tmp[2 * s];
                gu[s * ssG + 1] = tmp[2 * s + 1];
            }
        }
        return acc;
    }

    // Adjoint pass of one tile; adds its gradient into slot k.
    template <int D, int NS>
    void backward_tile(const T* params, int p0, int np, int k, bool first, bool train_fourier) {
        const std::size_t B = B_;
        const int m = m_;
        T* gcur = adj_.data() + std::size_t(k) * 2 * adj_stride_;
        T* gnext = gcur + adj_stride_;
        T* sg = slot_grad_.data() + std::size_t(k) * np_;
        for (int l = L_; l >= 0; --l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const std::ptrdiff_t ssG = std::ptrdiff_t(tile) * out;
            if (l < L_) {
                const T* Z = z_[l].data();
                const T* Hh = h_[l].data();
                const std::ptrdiff_t ssZ = std::ptrdiff_t(B * out);
                for (int p = 0; p < np; ++p) {
                    const std::size_t r = std::size_t(p0 + p) * out;
                    T* g = gcur + std::size_t(p) * out;
#pragma omp simd
                    for (int j = 0; j < out; ++j)
                        math::tanh_backward(Z + r + j, ssZ, Hh[r + j], g + j, ssG, D, NS);
                }
            }
            const T* A = l == 0 ? feat_.data() : h_[l - 1].data();
            const std::size_t ssA = B * in;
            T* dW = sg + sp_.offset_W(l);
            for (int s = 0; s < NS; ++s)  // dW += G_s^T A_s
                gemm<T>(out, in, np, gcur + s * ssG, 1, out, A + s * ssA + std::size_t(p0) * in,
                        in, dW, in, !(first && s == 0));
            T* db = sg + sp_.offset_b(l);
            if (first) zero(db, std::size_t(out));
            for (int p = 0; p < np; ++p)
                for (int j = 0; j < out; ++j) db[j] += gcur[std::size_t(p) * out + j];
            if (l == 0 && !train_fourier) return;
            const T* W = params + sp_.offset_W(l);
            for (int s = 0; s < NS; ++s)  // A-adjoint_s = G_s W
                gemm<T>(np, in, out, gcur + s * ssG, out, 1, W, in,
                        gnext + std::size_t(s) * tile * in, in, false);
            std::swap(gcur, gnext);
        }
        // Fourier layer: gcur holds the feature adjoints [ns, tile, 2m].
        T* dB = sg + sp_.offset_B();
        if (first) zero(dB, std::size_t(D) * m);
        const std::ptrdiff_t ssF = std::ptrdiff_t(tile) * 2 * m;
        for (int p = 0; p < np; ++p) {
            const T* xi = x_input_.data() + std::size_t(p0 + p) * D;
            const T* g = gcur + std::size_t(p) * 2 * m;
            for (int j = 0; j < m; ++j) {
                T sbar, wbar[3];
                math::fourier_backward_point(xi, omega_.data() + j, m, Omega_[j], D, NS, g + j,
                                             g + m + j, ssF, sbar, wbar);
                for (int i = 0; i < D; ++i)
                    dB[std::size_t(i) * m + j] += T(math::two_pi) * (xi[i] * sbar + wbar[i]);
            }
        }
    }

    ModelSpec sp_;
    std::size_t B_;
    int d_, m_, H_, L_, S_;
    std::size_t np_;
    AlignedArray<T> x_input_, feat_, z_[16], h_[16], du_dx_, d2u_, grad_, wt_, omega_, Omega_,
        adj_, slot_grad_;
    AlignedArray<double> slot_loss_;
    AlignedArray<char> slot_fresh_;
    std::size_t wt_off_[16] = {};
    std::size_t slots_ = 1, adj_stride_ = 0;
    WorkspaceBuffers<T> bufs_;
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> make_cpu_backend(const ModelSpec& spec, std::size_t batch_size) {
    return std::make_unique<CpuBackend<T>>(spec, batch_size);
}

template std::unique_ptr<Backend<float>> make_cpu_backend(const ModelSpec&, std::size_t);
template std::unique_ptr<Backend<double>> make_cpu_backend(const ModelSpec&, std::size_t);

}  // namespace helmpinn
