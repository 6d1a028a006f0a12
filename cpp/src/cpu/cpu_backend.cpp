// The CPU backend: fused, tiled forward streams and adjoint pass (MATH.md) on OpenMP threads.
//
// value_and_grad lines up the tiles (`tile` points each) of all loss terms in one sequence. A
// tile goes forward through every layer into its thread's scratch rows (which stay hot in cache
// from one tile to the next), seeds the loss adjoints, and goes backward through every layer at
// once. Tile t always adds its gradient into slot t % num_slots, a slot takes its tiles in
// increasing t, and the slots are summed in a fixed order at the end: the result is bitwise the
// same for any thread count and any batch_size. forward() walks the points in chunks of
// batch_size and writes each tile's rows of the workspace caches, which hold the last chunk.
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
    static constexpr std::size_t num_slots = 32;  // fixed gradient slots (independent of threads)

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
        adj_stride_ = std::size_t(S_) * tile * sp_.max_width();
        slot_grad_.resize(num_slots * np_);
        slot_loss_.resize(num_slots * 3);
        slot_fresh_.resize(num_slots);
        // Per-thread tile rows and adjoint buffers for value_and_grad, for as many threads as
        // the machine runs.
        scratch_threads_ = std::max(cpu::max_threads(), 1);
        scratch_stride_ = 2 * adj_stride_;
        for (int l = 0; l <= L_; ++l)
            scratch_stride_ += std::size_t(S_) * tile * (sp_.layer_out(l) + (l < L_ ? H_ : 0));
        scratch_stride_ += std::size_t(tile) * d_ + std::size_t(S_) * tile * 2 * m_;
        scratch_.resize(std::size_t(scratch_threads_) * scratch_stride_);
        zero(grad_.data(), np_);

        point_buffers(bufs_, sp_, B_, x_input_, feat_, z_, h_, du_dx_, d2u_, grad_);
    }

    const WorkspaceBuffers<T>& buffers() const override { return bufs_; }

    std::size_t memory_bytes() const override {
        std::size_t b = x_input_.bytes() + feat_.bytes() + du_dx_.bytes() + d2u_.bytes() +
                        grad_.bytes() + wt_.bytes() + omega_.bytes() + Omega_.bytes() +
                        slot_grad_.bytes() + slot_loss_.bytes() + scratch_.bytes();
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
                    const TileRows rows = cache_rows(p0);
                    forward_tile<D(), NS()>(params, rows, np, x + (c0 + p0) * d_);
                    copy_outputs(NS(), rows, np, c0 + p0, u, grad_u, lap_u);
                });
            }
        });
    }

    LossBreakdown value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                 void*) override {
        prepare(params);
        std::fill(slot_fresh_.begin(), slot_fresh_.end(), char(1));  // zeroed on first use
        std::fill(slot_loss_.begin(), slot_loss_.end(), 0.0);

        // The tiles of all terms in one sequence (pde, data, bc); tile t goes to slot t % slots.
        TermTiles terms[3];
        int nterms = 0;
        std::size_t total = 0;
        const auto add = [&](Term term, const T* x, std::size_t n, int ns, T w) {
            if (!n) return;
            terms[nterms++] = TermTiles{term, x, n, ns, T(2) * w / T(n), total};
            total += (n + tile - 1) / tile;
        };
        add(kPde, in.x_pde, in.n_pde, d_ + 2, in.w_pde);
        add(kData, in.x_data, in.n_data, 1, in.w_data);
        add(kBc, in.x_bc, in.n_bc, d_ + 1, in.w_bc);
        const std::size_t used = std::min(num_slots, total);
        cpu::parallel_for(
            long(used), cpu::Schedule::dynamic,
            [&](long k) {
                const TileRows rows = scratch_rows(cpu::thread_index());
                for (std::size_t t = std::size_t(k); t < total; t += num_slots) {
                    int i = nterms - 1;
                    while (terms[i].first_tile > t) --i;
                    train_tile(params, in, terms[i], t - terms[i].first_tile, rows, int(k));
                }
            },
            true, scratch_threads_);

        // Fixed-order reduction of the slots, parallel over parameters.
        constexpr long block = 2048;  // parameters per task, summed as vectors
        const long nblocks = (long(np_) + block - 1) / block;
        cpu::parallel_for(nblocks, cpu::Schedule::fixed, [&](long b) {
            const std::size_t i0 = std::size_t(b * block);
            const int n = int(std::min<std::size_t>(block, np_ - i0));
            T* out = grad + i0;
            zero(out, std::size_t(n));
            for (std::size_t k = 0; k < used; ++k) {
                if (slot_fresh_[k]) continue;
                const T* src = slot_grad_.data() + k * np_ + i0;
#pragma omp simd
                for (int i = 0; i < n; ++i) out[i] += src[i];
            }
        });
        if (!in.train_fourier) zero(grad, std::size_t(d_) * m_);

        double sums[3] = {0, 0, 0};  // indexed by Term: pde, data, bc
        for (std::size_t k = 0; k < num_slots; ++k)
            for (int term = 0; term < 3; ++term) sums[term] += slot_loss_[k * 3 + term];
        return loss_breakdown(sums, in);
    }

private:
    static void zero(T* p, std::size_t n) { std::memset(p, 0, n * sizeof(T)); }

    // Where a tile's activations live. Stream s of row r of layer l's z is
    // z[l][(s * ss + r0 + r) * width]: the chunk caches (ss = batch, r0 = the tile's first
    // point) or a thread's scratch (ss = tile, r0 = 0), which also holds the two adjoint
    // buffers of the backward pass (adj, adj + adj_stride_; tile-local layout [ns, tile, width]).
    struct TileRows {
        T* x;
        T* feat;
        T* z[16];
        T* h[16];
        std::size_t ss, r0;
        T* adj;
    };

    TileRows cache_rows(int p0) {
        TileRows r{x_input_.data(), feat_.data(), {}, {}, B_, std::size_t(p0), nullptr};
        for (int l = 0; l <= L_; ++l) r.z[l] = z_[l].data();
        for (int l = 0; l < L_; ++l) r.h[l] = h_[l].data();
        return r;
    }

    TileRows scratch_rows(int thread) {
        T* q = scratch_.data() + std::size_t(thread) * scratch_stride_;
        const std::size_t st = std::size_t(S_) * tile;
        TileRows r{q, nullptr, {}, {}, std::size_t(tile), 0, nullptr};
        q += std::size_t(tile) * d_;
        r.feat = q;
        q += st * 2 * m_;
        for (int l = 0; l <= L_; ++l) {
            r.z[l] = q;
            q += st * sp_.layer_out(l);
            if (l < L_) {
                r.h[l] = q;
                q += st * H_;
            }
        }
        r.adj = q;
        return r;
    }

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

    // Forward streams of the np points x[0 .. np) into the tile rows R.
    template <int D, int NS>
    void forward_tile(const T* params, const TileRows& R, int np, const T* x) {
        const std::size_t B = R.ss, p0 = R.r0;
        const int m = m_, H = H_;
        const std::ptrdiff_t ssF = std::ptrdiff_t(B * 2 * m);
        for (int p = 0; p < np; ++p) {
            const std::size_t gp = p0 + std::size_t(p);
            T* xi = R.x + gp * D;
            for (int i = 0; i < D; ++i) xi[i] = x[std::size_t(p) * D + i];
            T* f = R.feat + gp * 2 * m;
            // Frequencies in blocks of fj: phases, their sin and cos as vectors, then the streams.
            constexpr int fj = 64;
            for (int j0 = 0; j0 < m; j0 += fj) {
                const int nj = std::min(fj, m - j0);
                const T* om = omega_.data() + j0;
                alignas(64) T ph[fj], S[fj], C[fj];
#pragma omp simd
                for (int j = 0; j < nj; ++j) ph[j] = math::fourier_phase(xi, om + j, m, D);
                cpu::sincos_array(ph, S, C, nj);
#pragma omp simd
                for (int j = 0; j < nj; ++j)
                    math::fourier_streams(S[j], C[j], om + j, m, Omega_[j0 + j], D, NS,
                                          f + j0 + j, f + m + j0 + j, ssF);
            }
        }
        const T* A = R.feat;
        for (int l = 0; l <= L_; ++l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const std::size_t ssA = B * in, ssZ = B * out;
            T* Z = R.z[l];
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
            if (l == L_) {
                for (int p = 0; p < np; ++p) {
                    T* zr = Z + std::size_t(p0 + p) * out;
                    for (int j = 0; j < out; ++j) zr[j] += bias[j];
                }
                break;
            }
            // Bias, tanh and the tanh streams in one pass over each point's row.
            T* Hh = R.h[l];
            for (int p = 0; p < np; ++p) {
                const std::size_t r = (p0 + std::size_t(p)) * H;
                T* zr = Z + r;
                T* hr = Hh + r;
#pragma omp simd
                for (int j = 0; j < H; ++j) {
                    const T zv = zr[j] + bias[j];
                    zr[j] = zv;
                    math::tanh_streams(zr + j, cpu::tanh_fast(zv), hr + j, std::ptrdiff_t(ssZ), D,
                                       NS);
                }
            }
            A = Hh;
        }
    }

    // Outputs of the tile in the cache rows R, whose first point is point g0 of the call.
    void copy_outputs(int ns, const TileRows& R, int np, std::size_t g0, T* u, T* grad_u,
                      T* lap_u) {
        const std::size_t B = R.ss;
        const int d = d_;
        const T* U = R.z[L_];
        for (int p = 0; p < np; ++p) {
            const std::size_t lp = R.r0 + std::size_t(p), gp = g0 + std::size_t(p);
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

    // One loss term's points, and where its tiles start in value_and_grad's tile sequence.
    struct TermTiles {
        Term term;
        const T* x;
        std::size_t n;
        int ns;  // streams: d + 2 (pde), 1 (data), d + 1 (bc)
        T c;     // 2 w / n, the seed's scale
        std::size_t first_tile;
    };

    // Tile `lt` of a term: forward into the thread's scratch rows, loss seeds, backward into
    // slot k (a slot's first tile in a call writes its gradient, later ones add).
    void train_tile(const T* params, const LossInputs<T>& in, const TermTiles& term,
                    std::size_t lt, const TileRows& rows, int k) {
        const std::size_t g0 = lt * tile;  // the tile's first point
        const int np = int(std::min<std::size_t>(tile, term.n - g0));
        const bool first = slot_fresh_[k] != 0;
        slot_fresh_[k] = 0;
        with_streams(d_, term.ns, [&](auto D, auto NS) {
            forward_tile<D(), NS()>(params, rows, np, term.x + g0 * d_);
            slot_loss_[std::size_t(k) * 3 + term.term] +=
                seed(term.term, in, NS(), rows, np, g0, term.c, rows.adj);
            backward_tile<D(), NS()>(params, rows, np, k, first, in.train_fourier);
        });
    }

    // Loss adjoints at the output, tile-local layout [ns, tile, 2], of the tile in rows R whose
    // first point is point g0 of the term; returns the tile's sum |r|^2.
    double seed(Term term, const LossInputs<T>& in, int ns, const TileRows& R, int np,
                std::size_t g0, T c, T* g) const {
        const int d = d_;
        const T* U = R.z[L_];
        const std::ptrdiff_t ssU = std::ptrdiff_t(R.ss * 2), ssG = 2 * tile;
        double acc = 0.0;
        for (int p = 0; p < np; ++p) {
            const std::size_t lp = R.r0 + std::size_t(p), gp = g0 + std::size_t(p);
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

    // Adjoint pass of the tile in the scratch rows R (seeded in R.adj); adds its gradient into
    // slot k.
    template <int D, int NS>
    void backward_tile(const T* params, const TileRows& R, int np, int k, bool first,
                       bool train_fourier) {
        const std::size_t B = R.ss, p0 = R.r0;
        const int m = m_;
        T* gcur = R.adj;
        T* gnext = gcur + adj_stride_;
        T* sg = slot_grad_.data() + std::size_t(k) * np_;
        for (int l = L_; l >= 0; --l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const std::ptrdiff_t ssG = std::ptrdiff_t(tile) * out;
            // Adjoints through tanh (hidden layers) and the bias gradient, row by row.
            T* db = sg + sp_.offset_b(l);
            if (first) zero(db, std::size_t(out));
            const T* Z = R.z[l];
            const T* Hh = l < L_ ? R.h[l] : nullptr;
            const std::ptrdiff_t ssZ = std::ptrdiff_t(B * out);
            for (int p = 0; p < np; ++p) {
                const std::size_t r = std::size_t(p0 + p) * out;
                T* g = gcur + std::size_t(p) * out;
                if (Hh) {
#pragma omp simd
                    for (int j = 0; j < out; ++j) {
                        math::tanh_backward(Z + r + j, ssZ, Hh[r + j], g + j, ssG, D, NS);
                        db[j] += g[j];
                    }
                } else {
                    for (int j = 0; j < out; ++j) db[j] += g[j];
                }
            }
            const T* A = l == 0 ? R.feat : R.h[l - 1];
            const std::size_t ssA = B * in;
            T* dW = sg + sp_.offset_W(l);
            for (int s = 0; s < NS; ++s)  // dW += G_s^T A_s
                gemm<T>(out, in, np, gcur + s * ssG, 1, out, A + s * ssA + std::size_t(p0) * in,
                        in, dW, in, !(first && s == 0));
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
            const T* xi = R.x + (p0 + p) * D;
            const T* f = R.feat + (p0 + p) * 2 * m;  // value stream: sin, cos
            const T* g = gcur + std::size_t(p) * 2 * m;
#pragma omp simd
            for (int j = 0; j < m; ++j) {
                T sbar, wbar[D];
                math::fourier_backward_point(f[j], f[m + j], omega_.data() + j, m, Omega_[j], D,
                                             NS, g + j, g + m + j, ssF, sbar, wbar);
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
        slot_grad_;
    AlignedArray<double> slot_loss_;
    AlignedArray<char> slot_fresh_;
    std::size_t wt_off_[16] = {};
    std::size_t adj_stride_ = 0;
    AlignedArray<T> scratch_;  // scratch_threads_ blocks of TileRows for value_and_grad
    std::size_t scratch_stride_ = 0;
    int scratch_threads_ = 1;
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
