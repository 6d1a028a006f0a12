// The CPU backend's kernels, shared by the two files that implement it: cpu_backend.cpp (the
// fused loss and gradient: value_and_grad, vjp) and residuals.cpp (the residual level: residual
// rows, Jacobian rows, jvp). Both are compiled once per kernel set (isa.hpp) and include this
// header first.
//
// A tile (`tile` points of one loss term) goes forward through every layer into its thread's
// scratch rows, which stay hot in cache from one tile to the next (forward_tile); the loss level
// then seeds the loss adjoints and goes backward through every layer at once, the residual level
// writes a tile of rows. forward() walks the points in chunks of batch_size and writes each
// tile's rows of the workspace caches, which hold the last chunk.
//
// Every header shared with the rest of the library comes first, then the target is raised for
// the kernels alone (HELMPINN_CPU_TARGET_BEGIN; each .cpp raises it again for its own code).
#pragma once

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
#include "buffers.hpp"
#include "isa.hpp"
#include "parallel.hpp"

HELMPINN_CPU_TARGET_BEGIN

#include "gemm.hpp"
#include "vmath.hpp"

namespace helmpinn {
namespace cpu {
inline namespace HELMPINN_CPU_KERNELS {

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
    static constexpr int tile = kTile;
    static constexpr std::size_t num_slots = kNumSlots;

    CpuBackend(const ModelSpec& spec, std::size_t batch)
        : sp_(spec), sz_(buffer_sizes(spec, batch, buffer_threads())), B_(batch),
          d_(spec.in_dim), m_(spec.ff_dim), H_(spec.hidden_dim), L_(spec.num_hidden_layers),
          num_params_(spec.num_params()) {
        x_input_.resize(sz_.x_input);
        feat_.resize(sz_.feat);
        for (int l = 0; l <= L_; ++l) z_[l].resize(sz_.z[l]);
        for (int l = 0; l < L_; ++l) h_[l].resize(sz_.h[l]);
        du_dx_.resize(sz_.du_dx);
        d2u_.resize(sz_.d2u);
        grad_.resize(sz_.grad);
        wt_.resize(sz_.wt);
        vt_.resize(sz_.wt);
        omega_.resize(sz_.omega);
        Omega_.resize(sz_.Omega);
        slot_grad_.resize(sz_.slot_grad);
        slot_loss_.resize(sz_.slot_loss);
        slot_fresh_.resize(sz_.slot_fresh);
        scratch_.resize(sz_.scratch);
        row_scratch_.resize(sz_.row_scratch);
        zero(grad_.data(), num_params_);

        point_buffers(bufs_, sp_, B_, x_input_, feat_, z_, h_, du_dx_, d2u_, grad_);
    }

    const WorkspaceBuffers<T>& buffers() const override { return bufs_; }

    std::size_t memory_bytes() const override { return sz_.bytes(sizeof(T)); }

    void zero_grad(void*) override { zero(grad_.data(), num_params_); }

    void forward(const T* params, const T* x, std::size_t n, int derivatives, T* u, T* grad_u,
                 T* lap_u, void*) override {
        prepare(params);
        const int ns = derivatives == 0 ? 1 : derivatives == 1 ? d_ + 1 : d_ + 2;
        with_streams(d_, ns, [&](auto D, auto NS) {
            for (std::size_t c0 = 0; c0 < n; c0 += B_) {
                const int nc = int(std::min(B_, n - c0));
                const int ntiles = (nc + tile - 1) / tile;
                parallel_for(ntiles, Schedule::dynamic, [&](int t) {
                    const int p0 = t * tile, np = std::min(tile, nc - p0);
                    const TileRows rows = cache_rows(p0);
                    forward_tile<D(), NS()>(params, rows, np, x + (c0 + p0) * d_);
                    copy_outputs(NS(), rows, np, c0 + p0, u, grad_u, lap_u);
                });
            }
        });
    }

    // The loss level (cpu_backend.cpp).
    void value_and_grad(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>& out,
                        void*) override;
    void vjp(const T* params, const T* w, const LossInputs<T>& in, T* out, void*) override;
    // The residual level (residuals.cpp).
    void rows(RowOp op, const T* params, const LossInputs<T>& in, std::size_t r0, std::size_t r1,
              const T* v, T* out, void*) override;

private:
    static void zero(T* p, std::size_t n) { std::memset(p, 0, n * sizeof(T)); }

    // Where a tile's activations live. Stream s of row r of layer l's z is
    // z[l][(s * ss + r0 + r) * width]: the chunk caches (ss = batch, r0 = the tile's first
    // point) or a thread's scratch (ss = tile, r0 = 0), which also holds the two adjoint
    // buffers of the backward pass (adj, adj + sz_.adj_stride; tile-local layout
    // [ns, tile, width]).
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
        T* q = scratch_.data() + std::size_t(thread) * sz_.scratch_stride;
        const std::size_t st = std::size_t(sz_.Sx) * tile;
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

    // The weight matrices of theta (params, or jvp's v) transposed into WT (wt_ or vt_).
    void transpose_weights(const T* theta, T* WT) {
        for (int l = 0; l <= L_; ++l) {
            const int in = sp_.layer_in(l), out = sp_.layer_out(l);
            const T* W = theta + sp_.offset_W(l);
            T* Wl = WT + sz_.wt_off[l];
            for (int o = 0; o < out; ++o)
                for (int i = 0; i < in; ++i) Wl[std::size_t(i) * out + o] = W[std::size_t(o) * in + i];
        }
    }

    // W^T of every layer and the Fourier frequencies 2 pi B, once per call.
    void prepare(const T* params) {
        transpose_weights(params, wt_.data());
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
                sincos_array(ph, S, C, nj);
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
                            wt_.data() + sz_.wt_off[l], out, Z + s * ssZ + std::size_t(p0) * out,
                            out, false);
            } else {  // two outputs: two dot products per row (Dot2, gemm.hpp)
                const T* W0 = params + sp_.offset_W(l);
                const T* W1 = W0 + in;
                for (int s = 0; s < NS; ++s)
                    for (int p = 0; p < np; ++p) {
                        Dot2<T> dot;
                        dot.add(in, A + s * ssA + std::size_t(p0 + p) * in, W0, W1);
                        T* zr = Z + s * ssZ + std::size_t(p0 + p) * 2;
                        dot.sums(zr[0], zr[1]);
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
                    math::tanh_streams(zr + j, tanh_fast(zv), hr + j, std::ptrdiff_t(ssZ), D,
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

    // Gathers the ns output streams of point lp of the rows R into u (stride 2: u[2s + c]).
    static void gather_u(const TileRows& R, int L, std::size_t lp, int ns, T* u) {
        const T* U = R.z[L] + lp * 2;
        const std::size_t ssU = R.ss * 2;
        for (int s = 0; s < ns; ++s) {
            u[2 * s] = U[s * ssU];
            u[2 * s + 1] = U[s * ssU + 1];
        }
    }

    // ---- The loss level (cpu_backend.cpp) --------------------------------------------------

    // What seeds a reduce pass: the loss (w == null; out may ask for per-point outputs) or vjp's
    // row weights w.
    struct SeedArgs {
        LossOutputs<T>* out;
        const T* w;
    };

    LossBreakdown reduce(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>* out,
                         const T* w);
    void train_tile(const T* params, const LossInputs<T>& in, const SeedArgs& sa,
                    const TermTiles& term, std::size_t lt, const TileRows& rows, int k);
    double seed(const TermTiles& term, const LossInputs<T>& in, const SeedArgs& sa, int ns,
                const TileRows& R, int np, std::size_t g0, T* g) const;
    template <int D, int NS>
    void backward_tile(const T* params, const TileRows& R, int np, int k, bool first,
                       bool train_fourier);

    // ---- The residual level (residuals.cpp) ------------------------------------------------

    void row_tile(RowOp op, const T* params, const LossInputs<T>& in, const TermTiles& term,
                  std::size_t lt, std::size_t r0, std::size_t r1, const T* v, T* out,
                  int thread);
    template <class Entry>
    void row_seed(const LossInputs<T>& in, const TermTiles& term, std::size_t point, int c,
                  T* ub) const;
    template <int D, int NS>
    void row_jacobian(const T* params, const LossInputs<T>& in, const TermTiles& term,
                      const TileRows& R, int np, std::size_t g0, std::size_t r0, std::size_t r1,
                      T* out, int thread);
    template <int D, int NS>
    void row_jvp(const T* params, const LossInputs<T>& in, const TermTiles& term, const TileRows& R,
                 int np, std::size_t g0, std::size_t r0, std::size_t r1, const T* v, T* out,
                 int thread);

    ModelSpec sp_;
    BufferSizes sz_;  // every buffer's size (buffers.hpp), and the per-thread strides
    std::size_t B_;
    int d_, m_, H_, L_;
    std::size_t num_params_;
    AlignedArray<T> x_input_, feat_, z_[max_layers], h_[max_layers], du_dx_, d2u_, grad_, wt_,
        omega_, Omega_, slot_grad_;
    AlignedArray<double> slot_loss_;
    AlignedArray<char> slot_fresh_;
    AlignedArray<T> scratch_;  // sz_.threads blocks of TileRows for value_and_grad
    AlignedArray<T> vt_;       // jvp: V's weight matrices transposed, laid out as wt_
    AlignedArray<T> row_scratch_;  // sz_.threads blocks of the residual level's rows
    WorkspaceBuffers<T> bufs_;
};

}  // namespace HELMPINN_CPU_KERNELS
}  // namespace cpu
}  // namespace helmpinn

HELMPINN_CPU_TARGET_END
