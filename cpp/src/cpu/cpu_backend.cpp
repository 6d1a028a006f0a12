// The CPU backend: fused, tiled forward streams and adjoint pass (MATH.md) on OpenMP threads.
//
// value_and_grad lines up the tiles (`tile` points each) of all loss terms in one sequence. A
// tile goes forward through every layer into its thread's scratch rows (which stay hot in cache
// from one tile to the next), seeds the loss adjoints, and goes backward through every layer at
// once. Tile t always adds its gradient into slot t % num_slots, a slot takes its tiles in
// increasing t, and the slots are summed in a fixed order at the end: the result is bitwise the
// same for any thread count and any batch_size. forward() walks the points in chunks of
// batch_size and writes each tile's rows of the workspace caches, which hold the last chunk.
//
// This file is one kernel set of a dispatching build (isa.hpp): every header shared with the
// rest of the library comes first, then the target is raised for the kernels alone.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "../backend.hpp"
#include "../common/stream_math.hpp"
#include "aligned.hpp"
#include "isa.hpp"
#include "parallel.hpp"

#if defined(HELMPINN_CPU_LEVEL) && HELMPINN_CPU_LEVEL > 0
#pragma GCC push_options
#if HELMPINN_CPU_LEVEL == 2
#pragma GCC target("avx512f,avx512cd,avx512dq,avx512bw,avx512vl,avx2,fma,bmi,bmi2,lzcnt,popcnt,prefer-vector-width=512")
#else
#pragma GCC target("avx2,fma,bmi,bmi2,lzcnt,popcnt")
#endif
#endif

#include "gemm.hpp"
#include "vmath.hpp"

#define HELMPINN_CAT2(a, b) a##b
#define HELMPINN_CAT(a, b) HELMPINN_CAT2(a, b)
#define HELMPINN_CPU_FACTORY HELMPINN_CAT(make_cpu_backend_, HELMPINN_CPU_KERNELS)

namespace helmpinn {
namespace {

using cpu::AlignedArray;
using cpu::gemm;

using terms::kNumTerms;

template <int V>
using Int = std::integral_constant<int, V>;

// Calls f(Int<d>, Int<ns>) for the compile-time pair (d, ns), ns in {1, d+1, d+2, 2d+1} (2d+1:
// the general operator's diagonal layout, a case of its own; for d = 1 it is d+2): the
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
        case 25: f(Int<2>{}, Int<5>{}); break;
        case 31: f(Int<3>{}, Int<1>{}); break;
        case 34: f(Int<3>{}, Int<4>{}); break;
        case 35: f(Int<3>{}, Int<5>{}); break;
        case 37: f(Int<3>{}, Int<7>{}); break;
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
          L_(spec.num_hidden_layers), S_(spec.in_dim + 2),
          Sx_(std::max(spec.in_dim + 2, 2 * spec.in_dim + 1)), np_(spec.num_params()) {
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
        vt_.resize(wt);
        omega_.resize(std::size_t(d_) * m_);
        Omega_.resize(m_);
        adj_stride_ = std::size_t(Sx_) * tile * sp_.max_width();
        slot_grad_.resize(num_slots * np_);
        slot_loss_.resize(num_slots * kNumTerms);
        slot_fresh_.resize(num_slots);
        // Per-thread tile rows and adjoint buffers for value_and_grad, for as many threads as
        // the machine runs.
        scratch_threads_ = std::max(cpu::max_threads(), 1);
        scratch_stride_ = 2 * adj_stride_;
        for (int l = 0; l <= L_; ++l)
            scratch_stride_ += std::size_t(Sx_) * tile * (sp_.layer_out(l) + (l < L_ ? H_ : 0));
        scratch_stride_ += std::size_t(tile) * d_ + std::size_t(Sx_) * tile * 2 * m_;
        scratch_.resize(std::size_t(scratch_threads_) * scratch_stride_);
        // Per-thread rows of the residual level: two buffers [S, 2 tile, width], the jacobian's
        // adjoints of both components' rows or jvp's tangents (one tile of rows each).
        row_adj_ = std::size_t(Sx_) * 2 * tile * sp_.max_width();
        row_stride_ = (2 * row_adj_ + 15) / 16 * 16;
        row_scratch_.resize(std::size_t(scratch_threads_) * row_stride_);
        zero(grad_.data(), np_);

        point_buffers(bufs_, sp_, B_, x_input_, feat_, z_, h_, du_dx_, d2u_, grad_);
    }

    const WorkspaceBuffers<T>& buffers() const override { return bufs_; }

    std::size_t memory_bytes() const override {
        std::size_t b = x_input_.bytes() + feat_.bytes() + du_dx_.bytes() + d2u_.bytes() +
                        grad_.bytes() + wt_.bytes() + omega_.bytes() + Omega_.bytes() +
                        slot_grad_.bytes() + slot_loss_.bytes() + scratch_.bytes() +
                        vt_.bytes() + row_scratch_.bytes();
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

    void value_and_grad(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>& out,
                        void*) override {
        out.loss = reduce(params, grad, in, &out, nullptr);
    }

    void vjp(const T* params, const T* w, const LossInputs<T>& in, T* out, void*) override {
        reduce(params, out, in, nullptr, w);
    }

    void rows(RowOp op, const T* params, const LossInputs<T>& in, std::size_t r0, std::size_t r1,
              const T* v, T* out, void*) override {
        if (r0 >= r1) return;
        prepare(params);
        if (op == RowOp::jvp) prepare_tangent(v);
        TermTiles tt[kNumTerms];
        int nterms = 0;
        const std::size_t total = line_up(in, tt, nterms);
        cpu::parallel_for(
            long(total), cpu::Schedule::dynamic,
            [&](long t) {
                int i = nterms - 1;
                while (tt[i].first_tile > std::size_t(t)) --i;
                row_tile(op, params, in, tt[i], std::size_t(t) - tt[i].first_tile, r0, r1, v, out,
                         cpu::thread_index());
            },
            true, scratch_threads_);
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
        T* z[max_layers];
        T* h[max_layers];
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
        const std::size_t st = std::size_t(Sx_) * tile;
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

    // One loss term's points, where its tiles start in the call's tile sequence and where its
    // rows start in the residual vector.
    struct TermTiles {
        int t;   // terms::Term
        int e;   // terms::Entry: the table entry computing it
        const T* x;
        std::size_t n;
        int ns;  // streams: d + 2 (pde), 2d + 1 (pde operator), 1 (data), d + 1 (bc)
        terms::TermScale<T> scale;
        std::size_t first_tile, row0;
    };

    // Lines up the tiles of every term present, in table order; returns the number of tiles.
    std::size_t line_up(const LossInputs<T>& in, TermTiles* tt, int& nterms) const {
        std::size_t total = 0, rows = 0;
        nterms = 0;
        for (int t = 0; t < kNumTerms; ++t) {
            const terms::TermPoints<T> tp = terms::term_points(in, t);
            if (!tp.n) continue;
            const int e = terms::term_entry(in, t);
            tt[nterms++] = TermTiles{t,    e,    tp.x, tp.n, terms::term_streams(e, d_),
                                     terms::term_scale(tp), total, rows};
            total += (tp.n + tile - 1) / tile;
            rows += 2 * tp.n;
        }
        return total;
    }

    // value_and_grad (w == null: seeds from the residuals, loss returned, out's per-point outputs
    // written) or vjp (seeds from the row weights w): the gradient into grad.
    LossBreakdown reduce(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>* out,
                         const T* w) {
        prepare(params);
        std::fill(slot_fresh_.begin(), slot_fresh_.end(), char(1));  // zeroed on first use
        std::fill(slot_loss_.begin(), slot_loss_.end(), 0.0);

        // The tiles of all terms in one sequence; tile t goes to slot t % slots.
        TermTiles tt[kNumTerms];
        int nterms = 0;
        const std::size_t total = line_up(in, tt, nterms);
        const std::size_t used = std::min(num_slots, total);
        const SeedArgs sa{out, w};
        cpu::parallel_for(
            long(used), cpu::Schedule::dynamic,
            [&](long k) {
                const TileRows rows = scratch_rows(cpu::thread_index());
                for (std::size_t t = std::size_t(k); t < total; t += num_slots) {
                    int i = nterms - 1;
                    while (tt[i].first_tile > t) --i;
                    train_tile(params, in, sa, tt[i], t - tt[i].first_tile, rows, int(k));
                }
            },
            true, scratch_threads_);

        // Fixed-order reduction of the slots, parallel over parameters.
        constexpr long block = 2048;  // parameters per task, summed as vectors
        const long nblocks = (long(np_) + block - 1) / block;
        cpu::parallel_for(nblocks, cpu::Schedule::fixed, [&](long b) {
            const std::size_t i0 = std::size_t(b * block);
            const int n = int(std::min<std::size_t>(block, np_ - i0));
            T* o = grad + i0;
            zero(o, std::size_t(n));
            for (std::size_t k = 0; k < used; ++k) {
                if (slot_fresh_[k]) continue;
                const T* src = slot_grad_.data() + k * np_ + i0;
#pragma omp simd
                for (int i = 0; i < n; ++i) o[i] += src[i];
            }
        });
        if (!in.train_fourier) zero(grad, std::size_t(d_) * m_);

        double sums[kNumTerms] = {};
        for (std::size_t k = 0; k < num_slots; ++k)
            for (int t = 0; t < kNumTerms; ++t) sums[t] += slot_loss_[k * kNumTerms + t];
        return loss_breakdown(sums, in);
    }

    // What seeds a reduce pass: the loss (w == null; out may ask for per-point outputs) or vjp's
    // row weights w.
    struct SeedArgs {
        LossOutputs<T>* out;
        const T* w;
    };

    // Tile `lt` of a term: forward into the thread's scratch rows, seeds, backward into slot k
    // (a slot's first tile in a call writes its gradient, later ones add).
    void train_tile(const T* params, const LossInputs<T>& in, const SeedArgs& sa,
                    const TermTiles& term, std::size_t lt, const TileRows& rows, int k) {
        const std::size_t g0 = lt * tile;  // the tile's first point
        const int np = int(std::min<std::size_t>(tile, term.n - g0));
        const bool first = slot_fresh_[k] != 0;
        slot_fresh_[k] = 0;
        with_streams(d_, term.ns, [&](auto D, auto NS) {
            forward_tile<D(), NS()>(params, rows, np, term.x + g0 * d_);
            slot_loss_[std::size_t(k) * kNumTerms + term.t] +=
                seed(term, in, sa, NS(), rows, np, g0, rows.adj);
            backward_tile<D(), NS()>(params, rows, np, k, first, in.train_fourier);
        });
    }

    // Gathers the ns output streams of point lp of the rows R into u (stride 2: u[2s + c]).
    static void gather_u(const TileRows& R, int L, std::size_t lp, int ns, T* u) {
        const T* U = R.z[L] + lp * 2;
        const std::size_t ssU = R.ss * 2;
        for (int s = 0; s < ns; ++s) {
            u[2 * s] = U[s * ssU];
            u[2 * s + 1] = U[s * ssU + 1];
        }
    }

    // Loss (or vjp) adjoints at the output, tile-local layout [ns, tile, 2], of the tile in rows R
    // whose first point is point g0 of the term; returns the tile's sum |r|^2 (0 for vjp).
    double seed(const TermTiles& term, const LossInputs<T>& in, const SeedArgs& sa, int ns,
                const TileRows& R, int np, std::size_t g0, T* g) const {
        const int d = d_;
        const std::ptrdiff_t ssG = 2 * tile;
        double acc = 0.0;
        terms::with_term(term.e, [&](auto entry) {
            using E = decltype(entry);
            for (int p = 0; p < np; ++p) {
                const std::size_t gp = g0 + std::size_t(p), row = term.row0 + 2 * gp;
                T u[2 * math::kMaxStreams] = {}, ub[2 * math::kMaxStreams] = {}, r[2], w[2];
                if (sa.w) {  // vjp
                    w[0] = term.scale.s * sa.w[row];
                    w[1] = term.scale.s * sa.w[row + 1];
                } else {
                    gather_u(R, L_, R.r0 + std::size_t(p), ns, u);
                    E::residual(in, gp, u, 2, d, r);
                    acc += double(r[0] * r[0] + r[1] * r[1]);
                    w[0] = term.scale.c * r[0];
                    w[1] = term.scale.c * r[1];
                    if (sa.out && sa.out->residuals) {
                        sa.out->residuals[row] = term.scale.s * r[0];
                        sa.out->residuals[row + 1] = term.scale.s * r[1];
                    }
                    if (E::id == terms::kPde && sa.out && sa.out->grad_kappa)
                        sa.out->grad_kappa[gp] = w[0] * u[0] + w[1] * u[1];  // dr/dkappa = u
                }
                E::adjoint(in, gp, w, ub, 2, d);
                T* gu = g + std::size_t(p) * 2;
                for (int s = 0; s < ns; ++s) {
                    gu[s * ssG] = ub[2 * s];
                    gu[s * ssG + 1] = ub[2 * s + 1];
                }
            }
        });
        return acc;
    }

    // ---- The residual level: one tile of residual rows -------------------------------------
    //
    // residuals: the forward streams and each point's residual. jacobian: reverse mode over the
    // tile's rows, point p's components c = 0, 1 being adjoint rows q = c * np + p, so one
    // matrix product per layer carries both; each row's gradient is written out (dW_row =
    // sum_s G_s[q] A_s[p]^T, db_row = G_0[q], dB_row as in the Fourier backward). jvp: forward
    // mode, the tangents of every stream along v carried layer by layer (MATH.md, Jacobian-vector
    // product), then each row's J v from the output tangents and the term's adjoint seeds.
    void row_tile(RowOp op, const T* params, const LossInputs<T>& in, const TermTiles& term,
                  std::size_t lt, std::size_t r0, std::size_t r1, const T* v, T* out,
                  int thread) {
        const std::size_t g0 = lt * tile;
        const int np = int(std::min<std::size_t>(tile, term.n - g0));
        const std::size_t first_row = term.row0 + 2 * g0, end_row = first_row + 2 * np;
        if (end_row <= r0 || first_row >= r1) return;
        const TileRows R = scratch_rows(thread);
        with_streams(d_, term.ns, [&](auto D, auto NS) {
            forward_tile<D(), NS()>(params, R, np, term.x + g0 * d_);
            if (op == RowOp::residuals) {
                terms::with_term(term.e, [&](auto entry) {
                    for (int p = 0; p < np; ++p) {
                        T u[2 * math::kMaxStreams] = {}, r[2];
                        gather_u(R, L_, std::size_t(p), NS(), u);
                        decltype(entry)::residual(in, g0 + p, u, 2, d_, r);
                        for (int c = 0; c < 2; ++c) {
                            const std::size_t row = first_row + 2 * std::size_t(p) + c;
                            if (row >= r0 && row < r1) out[row - r0] = term.scale.s * r[c];
                        }
                    }
                });
            } else if (op == RowOp::jvp) {
                row_jvp<D(), NS()>(params, in, term, R, np, g0, r0, r1, v, out, thread);
            } else {
                row_jacobian<D(), NS()>(params, in, term, R, np, g0, r0, r1, out, thread);
            }
        });
    }

    // The seed of one residual row (point, component c) of a term: u's stream adjoints for
    // w = s e_c through the term's adjoint (row_jacobian, row_jvp).
    template <class Entry>
    void row_seed(const LossInputs<T>& in, const TermTiles& term, std::size_t point, int c, T* ub) const {
        T w[2] = {T(0), T(0)};
        w[c] = term.scale.s;
        std::fill(ub, ub + 2 * math::kMaxStreams, T(0));
        Entry::adjoint(in, point, w, ub, 2, d_);
    }

    template <int D, int NS>
    void row_jacobian(const T* params, const LossInputs<T>& in, const TermTiles& term,
                      const TileRows& R, int np, std::size_t g0, std::size_t r0, std::size_t r1,
                      T* out, int thread) {
        const int m = m_, nq = 2 * np;
        const std::size_t first_row = term.row0 + 2 * g0;
        T* gcur = row_scratch_.data() + std::size_t(thread) * row_stride_;
        T* gnext = gcur + row_adj_;
        // Row q = c * np + p of the tile, its output row, and whether the caller wants it.
        const auto row_of = [&](int q) { return first_row + 2 * std::size_t(q % np) + q / np; };
        const auto wanted = [&](int q) {
            const std::size_t row = row_of(q);
            return row >= r0 && row < r1;
        };
        const std::size_t P = np_;

        // Seeds: the adjoint of u's streams for w = s e_c, for both components c.
        {
            const std::ptrdiff_t ssG = std::ptrdiff_t(2) * tile * 2;
            terms::with_term(term.e, [&](auto entry) {
                for (int q = 0; q < nq; ++q) {
                    const int p = q % np, c = q / np;
                    T ub[2 * math::kMaxStreams];
                    row_seed<decltype(entry)>(in, term, g0 + p, c, ub);
                    T* gu = gcur + std::size_t(q) * 2;
                    for (int s = 0; s < NS; ++s) {
                        gu[s * ssG] = ub[2 * s];
                        gu[s * ssG + 1] = ub[2 * s + 1];
                    }
                }
            });
        }

        for (int l = L_; l >= 0; --l) {
            const int in_w = sp_.layer_in(l), out_w = sp_.layer_out(l);
            const std::ptrdiff_t ssG = std::ptrdiff_t(2) * tile * out_w;  // gcur's stream stride
            const T* Z = R.z[l];
            const std::ptrdiff_t ssZ = std::ptrdiff_t(tile) * out_w;
            if (l < L_) {
                const T* Hh = R.h[l];
                for (int q = 0; q < nq; ++q) {
                    const std::size_t r = std::size_t(q % np) * out_w;
                    T* g = gcur + std::size_t(q) * out_w;
#pragma omp simd
                    for (int j = 0; j < out_w; ++j)
                        math::tanh_backward(Z + r + j, ssZ, Hh[r + j], g + j, ssG, D, NS);
                }
            }
            // gcur: the adjoints of z_l for every row. Its input activations A_s:
            const T* A = l == 0 ? R.feat : R.h[l - 1];
            const std::size_t ssA = std::size_t(tile) * in_w;
            for (int q = 0; q < nq; ++q) {
                if (!wanted(q)) continue;
                const int p = q % np;
                T* Jr = out + (row_of(q) - r0) * P;
                const T* g = gcur + std::size_t(q) * out_w;
                T* db = Jr + sp_.offset_b(l);
                for (int o = 0; o < out_w; ++o) db[o] = g[o];
                // dW's row o = sum_s G_s[q, o] A_s[p], the streams summed in registers and
                // each number written once.
                T* dW = Jr + sp_.offset_W(l);
                const T* a = A + std::size_t(p) * in_w;
                for (int o = 0; o < out_w; ++o) {
                    T gs[NS];
                    for (int s = 0; s < NS; ++s) gs[s] = g[s * ssG + o];
                    T* row = dW + std::size_t(o) * in_w;
#pragma omp simd
                    for (int i = 0; i < in_w; ++i) {
                        T acc = gs[0] * a[i];
                        for (int s = 1; s < NS; ++s) acc += gs[s] * a[s * ssA + i];
                        row[i] = acc;
                    }
                }
            }
            if (l == 0 && !in.train_fourier) break;
            const T* W = params + sp_.offset_W(l);
            const std::ptrdiff_t ssN = std::ptrdiff_t(2) * tile * in_w;
            for (int s = 0; s < NS; ++s)  // A-adjoint_s = G_s W, both components at once
                gemm<T>(nq, in_w, out_w, gcur + s * ssG, out_w, 1, W, in_w, gnext + s * ssN, in_w,
                        false);
            std::swap(gcur, gnext);
        }
        if (in.train_fourier) {
            // Fourier layer: gcur holds the feature adjoints [NS, 2 tile, 2m] of every row.
            const std::ptrdiff_t ssF = std::ptrdiff_t(2) * tile * 2 * m;
            for (int q = 0; q < nq; ++q) {
                if (!wanted(q)) continue;
                const int p = q % np;
                const T* xi = R.x + std::size_t(p) * D;
                const T* f = R.feat + std::size_t(p) * 2 * m;
                const T* g = gcur + std::size_t(q) * 2 * m;
                T* dB = out + (row_of(q) - r0) * P + sp_.offset_B();
                for (int j = 0; j < m; ++j) {
                    T sbar, wbar[D];
                    math::fourier_backward_point(f[j], f[m + j], omega_.data() + j, m, Omega_[j],
                                                 D, NS, g + j, g + m + j, ssF, sbar, wbar);
                    for (int i = 0; i < D; ++i)
                        dB[std::size_t(i) * m + j] = T(math::two_pi) * (xi[i] * sbar + wbar[i]);
                }
            }
        } else {
            for (int q = 0; q < nq; ++q)
                if (wanted(q)) zero(out + (row_of(q) - r0) * P + sp_.offset_B(), std::size_t(D) * m);
        }
    }

    // J v of the tile's rows in forward mode: the tangents of the streams along v, layer by
    // layer (zd_s = W ad_s + V_W a_s (+ v_b for the value), then tanh_tangent), from the
    // Fourier features' tangents along v's B (zero when B is frozen: its columns of J are zero).
    // The residuals are affine in u's streams, so row (p, c) of J v is the adjoint seed of
    // w = s e_c dotted with the output tangents. Costs one forward pass of products more than
    // forward(): two per layer and stream, against value_and_grad's two for its backward pass.
    template <int D, int NS>
    void row_jvp(const T* params, const LossInputs<T>& in, const TermTiles& term, const TileRows& R,
                 int np, std::size_t g0, std::size_t r0, std::size_t r1, const T* v, T* out,
                 int thread) {
        const int m = m_;
        const std::size_t first_row = term.row0 + 2 * g0;
        T* ta = row_scratch_.data() + std::size_t(thread) * row_stride_;  // input tangents
        T* tb = ta + row_adj_;                                            // output tangents
        const bool fourier = in.train_fourier;
        if (fourier) {
            const std::ptrdiff_t ssF = std::ptrdiff_t(tile) * 2 * m;
            const T* vB = v + sp_.offset_B();
            T* vom = tb;  // 2 pi V_B, laid out as omega_
            for (std::size_t i = 0; i < std::size_t(D) * m; ++i) vom[i] = T(math::two_pi) * vB[i];
            for (int p = 0; p < np; ++p) {
                const T* xi = R.x + std::size_t(p) * D;
                const T* f = R.feat + std::size_t(p) * 2 * m;
                T* t = ta + std::size_t(p) * 2 * m;
#pragma omp simd
                for (int j = 0; j < m; ++j)
                    math::fourier_tangent(f[j], f[m + j], xi, omega_.data() + j, vom + j, m,
                                          Omega_[j], D, NS, t + j, t + m + j, ssF);
            }
        }
        T ud[tile][2 * NS];
        for (int l = 0; l <= L_; ++l) {
            const int in_w = sp_.layer_in(l), out_w = sp_.layer_out(l);
            const T* A = l == 0 ? R.feat : R.h[l - 1];
            const std::size_t ssA = std::size_t(tile) * in_w, ssO = std::size_t(tile) * out_w;
            const bool tangent_in = l > 0 || fourier;  // ad = 0 into layer 0 with B frozen
            const T* vb = v + sp_.offset_b(l);
            if (l == L_) {  // two outputs: dot products along each row, as forward_tile
                const T* W0 = params + sp_.offset_W(l);
                const T* W1 = W0 + in_w;
                const T* V0 = v + sp_.offset_W(l);
                const T* V1 = V0 + in_w;
                for (int s = 0; s < NS; ++s)
                    for (int p = 0; p < np; ++p) {
                        const T* a = A + s * ssA + std::size_t(p) * in_w;
                        const T* ad = ta + s * ssA + std::size_t(p) * in_w;
                        T u0 = T(0), u1 = T(0);
                        if (tangent_in) {
#pragma omp simd reduction(+ : u0, u1)
                            for (int i = 0; i < in_w; ++i) {
                                u0 += a[i] * V0[i] + ad[i] * W0[i];
                                u1 += a[i] * V1[i] + ad[i] * W1[i];
                            }
                        } else {
#pragma omp simd reduction(+ : u0, u1)
                            for (int i = 0; i < in_w; ++i) {
                                u0 += a[i] * V0[i];
                                u1 += a[i] * V1[i];
                            }
                        }
                        ud[p][2 * s] = u0 + (s == 0 ? vb[0] : T(0));
                        ud[p][2 * s + 1] = u1 + (s == 0 ? vb[1] : T(0));
                    }
                break;
            }
            for (int s = 0; s < NS; ++s) {
                gemm<T>(np, out_w, in_w, A + s * ssA, in_w, 1, vt_.data() + wt_off_[l], out_w,
                        tb + s * ssO, out_w, false);
                if (tangent_in)
                    gemm<T>(np, out_w, in_w, ta + s * ssA, in_w, 1, wt_.data() + wt_off_[l], out_w,
                            tb + s * ssO, out_w, true);
            }
            const T* Z = R.z[l];
            const T* Hh = R.h[l];
            for (int p = 0; p < np; ++p) {
                const std::size_t r = std::size_t(p) * out_w;
                T* zd = tb + r;
#pragma omp simd
                for (int j = 0; j < out_w; ++j) {
                    zd[j] += vb[j];
                    math::tanh_tangent(Z + r + j, std::ptrdiff_t(ssO), Hh[r + j], zd + j,
                                       std::ptrdiff_t(ssO), D, NS);
                }
            }
            std::swap(ta, tb);
        }
        terms::with_term(term.e, [&](auto entry) {
            for (int p = 0; p < np; ++p)
                for (int c = 0; c < 2; ++c) {
                    const std::size_t row = first_row + 2 * std::size_t(p) + c;
                    if (row < r0 || row >= r1) continue;
                    T ub[2 * math::kMaxStreams];
                    row_seed<decltype(entry)>(in, term, g0 + p, c, ub);
                    T a = T(0);
                    for (int k = 0; k < 2 * NS; ++k) a += ub[k] * ud[p][k];
                    out[row - r0] = a;
                }
        });
    }

    // V's weight matrices transposed (as prepare() does for W), for jvp's products V_W A_s.
    void prepare_tangent(const T* v) {
        for (int l = 0; l <= L_; ++l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const T* W = v + sp_.offset_W(l);
            T* WT = vt_.data() + wt_off_[l];
            for (int o = 0; o < out; ++o)
                for (int i = 0; i < in; ++i) WT[std::size_t(i) * out + o] = W[std::size_t(o) * in + i];
        }
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
    int Sx_;  // streams of the per-thread scratch rows: also the general operator's 2d + 1
    std::size_t np_;
    AlignedArray<T> x_input_, feat_, z_[max_layers], h_[max_layers], du_dx_, d2u_, grad_, wt_, omega_, Omega_,
        slot_grad_;
    AlignedArray<double> slot_loss_;
    AlignedArray<char> slot_fresh_;
    std::size_t wt_off_[max_layers] = {};
    std::size_t adj_stride_ = 0;
    AlignedArray<T> scratch_;  // scratch_threads_ blocks of TileRows for value_and_grad
    AlignedArray<T> vt_;       // jvp: V's weight matrices transposed, laid out as wt_
    AlignedArray<T> row_scratch_;  // scratch_threads_ blocks of the residual level's rows
    std::size_t row_adj_ = 0, row_stride_ = 0;
    std::size_t scratch_stride_ = 0;
    int scratch_threads_ = 1;
    WorkspaceBuffers<T> bufs_;
};

}  // namespace

template <typename T>
std::unique_ptr<Backend<T>> HELMPINN_CPU_FACTORY(const ModelSpec& spec, std::size_t batch_size) {
    return std::make_unique<CpuBackend<T>>(spec, batch_size);
}

template std::unique_ptr<Backend<float>> HELMPINN_CPU_FACTORY(const ModelSpec&, std::size_t);
template std::unique_ptr<Backend<double>> HELMPINN_CPU_FACTORY(const ModelSpec&, std::size_t);

}  // namespace helmpinn

#if defined(HELMPINN_CPU_LEVEL) && HELMPINN_CPU_LEVEL > 0
#pragma GCC pop_options
#endif
