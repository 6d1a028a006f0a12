// The CPU backend's residual level: rows [r0, r1) of the residual vector, of the Jacobian, or of
// J v (Backend::rows), one tile of rows at a time (MATH.md, Residual level). The tiles of every
// term are lined up as for value_and_grad; a row depends on its point alone, so the tiles run
// in any order on any thread.
//
// This file is one kernel set of a dispatching build (isa.hpp).
#include "cpu_backend.hpp"

HELMPINN_CPU_TARGET_BEGIN

namespace helmpinn {
namespace cpu {
inline namespace HELMPINN_CPU_KERNELS {

template <typename T>
void CpuBackend<T>::rows(RowOp op, const T* params, const LossInputs<T>& in, std::size_t r0,
                         std::size_t r1, const T* v, T* out, void*) {
    if (r0 >= r1) return;
    prepare(params);
    if (op == RowOp::jvp) transpose_weights(v, vt_.data());  // for jvp's products V_W A_s
    TermTiles tt[kNumTerms];
    int nterms = 0;
    const std::size_t total = line_up(in, tt, nterms);
    parallel_for(
        long(total), Schedule::dynamic,
        [&](long t) {
            int i = nterms - 1;
            while (tt[i].first_tile > std::size_t(t)) --i;
            row_tile(op, params, in, tt[i], std::size_t(t) - tt[i].first_tile, r0, r1, v, out,
                     thread_index());
        },
        true, sz_.threads);
}

// One tile of residual rows. residuals: the forward streams and each point's residual. jacobian: reverse mode over the
// tile's rows, point p's components c = 0, 1 being adjoint rows q = c * np + p, so one
// matrix product per layer carries both; each row's gradient is written out (dW_row =
// sum_s G_s[q] A_s[p]^T, db_row = G_0[q], dB_row as in the Fourier backward). jvp: forward
// mode, the tangents of every stream along v carried layer by layer (MATH.md, Jacobian-vector
// product), then each row's J v from the output tangents and the term's adjoint seeds.
template <typename T>
inline void CpuBackend<T>::row_tile(RowOp op, const T* params, const LossInputs<T>& in,
                                    const TermTiles& term, std::size_t lt, std::size_t r0,
                                    std::size_t r1, const T* v, T* out, int thread) {
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
template <typename T>
template <class Entry>
inline void CpuBackend<T>::row_seed(const LossInputs<T>& in, const TermTiles& term,
                                    std::size_t point, int c, T* ub) const {
    T w[2] = {T(0), T(0)};
    w[c] = term.scale.s;
    std::fill(ub, ub + 2 * math::kMaxStreams, T(0));
    Entry::adjoint(in, point, w, ub, 2, d_);
}

template <typename T>
template <int D, int NS>
inline void CpuBackend<T>::row_jacobian(const T* params, const LossInputs<T>& in,
                                        const TermTiles& term, const TileRows& R, int np,
                                        std::size_t g0, std::size_t r0, std::size_t r1, T* out,
                                        int thread) {
    const int m = m_, nq = 2 * np;
    const std::size_t first_row = term.row0 + 2 * g0;
    T* gcur = row_scratch_.data() + std::size_t(thread) * sz_.row_stride;
    T* gnext = gcur + sz_.row_adj;
    // Row q = c * np + p of the tile, its output row, and whether the caller wants it.
    const auto row_of = [&](int q) { return first_row + 2 * std::size_t(q % np) + q / np; };
    const auto wanted = [&](int q) {
        const std::size_t row = row_of(q);
        return row >= r0 && row < r1;
    };
    const std::size_t P = num_params_;

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
template <typename T>
template <int D, int NS>
inline void CpuBackend<T>::row_jvp(const T* params, const LossInputs<T>& in, const TermTiles& term,
                                   const TileRows& R, int np, std::size_t g0, std::size_t r0,
                                   std::size_t r1, const T* v, T* out, int thread) {
    const int m = m_;
    const std::size_t first_row = term.row0 + 2 * g0;
    T* ta = row_scratch_.data() + std::size_t(thread) * sz_.row_stride;  // input tangents
    T* tb = ta + sz_.row_adj;                                            // output tangents
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
                    Dot2<T> dot;
                    dot.add(in_w, a, V0, V1);
                    if (tangent_in) dot.add(in_w, ad, W0, W1);
                    T u0, u1;
                    dot.sums(u0, u1);
                    ud[p][2 * s] = u0 + (s == 0 ? vb[0] : T(0));
                    ud[p][2 * s + 1] = u1 + (s == 0 ? vb[1] : T(0));
                }
            break;
        }
        for (int s = 0; s < NS; ++s) {
            gemm<T>(np, out_w, in_w, A + s * ssA, in_w, 1, vt_.data() + sz_.wt_off[l], out_w,
                    tb + s * ssO, out_w, false);
            if (tangent_in)
                gemm<T>(np, out_w, in_w, ta + s * ssA, in_w, 1, wt_.data() + sz_.wt_off[l], out_w,
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

template void CpuBackend<float>::rows(RowOp, const float*, const LossInputs<float>&, std::size_t,
                                      std::size_t, const float*, float*, void*);
template void CpuBackend<double>::rows(RowOp, const double*, const LossInputs<double>&,
                                       std::size_t, std::size_t, const double*, double*, void*);

}  // namespace HELMPINN_CPU_KERNELS
}  // namespace cpu
}  // namespace helmpinn

HELMPINN_CPU_TARGET_END
