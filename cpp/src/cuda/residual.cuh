// The residual level on CUDA (MATH.md, Residual level): residuals, rows of the Jacobian and
// J v, one kernel for the three (rows_kernel), built on fused.cuh's tile forward and block GEMMs.
//
// A block takes a tile of P points of one loss term. It runs the tile forward (fused.cuh's
// forward_tile: the caches hold the tile's activations afterwards), then
//   residuals: each point's residual from the loss-term table, scaled by s = sqrt(w / N);
//   jacobian, jvp: an adjoint pass over Q = 2 P rows at once, row q = c P + p carrying the seed
//     w = s e_c of point p's component c (terms' adjoint), stream s of row q at row s Q + q of
//     the activation buffers, so that each layer's adjoint is ONE block GEMM over ns Q rows as
//     in the train kernel. Per layer, with G_s the adjoints of z_l and A_s the layer's inputs
//     (re-read from the caches):
//       jacobian: row q's entries db = G_0[q], dW[o][i] = sum_s G_s[q][o] A_s[p][i], and at the
//                 end dB from the feature adjoints, written straight to J;
//       jvp:      row q's J v += sum_s (G_s V_W)[q] . A_s[p] + G_0[q] . v_b (+ dB . v_B at the
//                 end), the products G_s V_W made by one more block GEMM, the dot products in
//                 8 partial sums per row added in a fixed order.
// Three activation buffers: G, the next G (= G W), and Z (= G V_W, then the Fourier scratch);
// in shared memory when they fit, else a per-block slice of a global scratch buffer (GS).
// Every output entry is written by exactly one thread: no atomics, deterministic, and a row's
// numbers do not depend on which other rows share its tile or range.
//
// row_tile runs the tile's forward, then row_residuals, or row_adjoint<Jac> (jacobian or jvp,
// the mode a template parameter): row_seeds, per layer the shared tanh and W adjoints around the
// mode's jacobian_layer or jvp_layer, and fourier_rows for B.
#pragma once

#include "fused.cuh"

namespace helmpinn {
namespace cuda {

enum RowKind : int { kRowResiduals = 0, kRowJacobian = 1, kRowJvp = 2 };

constexpr int kMaxRowTile = kMaxTile / 2;          // points of a rows tile (2 rows each)
constexpr int kRowParts = 8;                       // partial sums per row (jvp)

/// Shared memory every rows block uses whatever the mode: fused.cuh's fixed part, whose loss
/// area holds the rows' J v accumulators [2 kMaxRowTile].
template <typename T>
inline int row_fixed_smem_bytes() {
    static_assert(2 * kMaxRowTile * sizeof(T) <= kLossBytes, "J v accumulators");
    return fixed_smem_bytes<T>();
}

/// One loss term of a rows launch, the rows [r0, r1) wanted and where they go.
template <typename T>
struct RowLaunch {
    int kind = kRowResiduals;
    int entry = terms::kPde;  // terms::Entry
    int ns = 1;
    int train_fourier = 1;
    const T* x = nullptr;
    T s = T(0);             // sqrt(w / N)
    long long row0 = 0;     // the term's first row in the residual vector
    long long r0 = 0, r1 = 0;
    const T* v = nullptr;   // jvp: the tangent [P]
    T* out = nullptr;       // residuals / jvp: [r1 - r0]; jacobian: [r1 - r0, P]
    long long num_params = 0;
};

template <typename T>
struct RowSmem {
    Smem<T> base;  // loss area (J v accumulators), points, weight slices, X, Y
    T* Z;          // third activation buffer
    T* acc;        // [2 P], in the loss area
};

template <typename T, bool GS>
__device__ __forceinline__ RowSmem<T> carve_rows(unsigned char* smem, const TileArgs<T>& t) {
    RowSmem<T> s;
    s.base.loss = reinterpret_cast<double*>(smem);
    s.acc = reinterpret_cast<T*>(smem);
    s.base.xs = reinterpret_cast<T*>(smem + kLossBytes);
    s.base.ws = reinterpret_cast<T*>(smem + kLossBytes + kPointBytes);
    if (GS)
        s.base.X = t.scratch + static_cast<long long>(blockIdx.x) * 3 * t.buf;
    else
        s.base.X = s.base.ws + kWarps * kTO * Cfg<T>::kcp;
    s.base.Y = s.base.X + t.buf;
    s.Z = s.base.Y + t.buf;
    return s;
}

/// One tile of a rows launch (points p0 .. p0 + np of the chunk that starts at point c0 of the
/// term) and what every part of row_tile reads. Row q = c P + p of the adjoint pass is point
/// p's component c.
template <typename T>
struct RowTile {
    const NetArgs<T>& net;
    const CacheArgs<T>& cache;
    const RowSmem<T>& sm;
    const LossInputs<T>& in;
    const RowLaunch<T>& ra;
    long long c0;
    int p0, np;
    int P, ld, ns, Q, ss2;  // Q = 2 P rows; stream s of row q at row s Q + q (ss2 = Q ld apart)
    long long first_row;    // the output row of the tile's first point's first component

    /// Row q's output row, and whether the caller wants it.
    __device__ __forceinline__ long long row_of(int q) const {
        return first_row + 2 * (q % P) + q / P;
    }
    __device__ __forceinline__ bool wanted(int q) const {
        const long long row = row_of(q);
        return q % P < np && row >= ra.r0 && row < ra.r1;
    }
};

/// residuals: each point's residual from the loss-term table (u's streams in Y after the
/// tile's forward), scaled by s.
template <typename T, int D>
__device__ __forceinline__ void row_residuals(const RowTile<T>& t) {
    const int tid = threadIdx.x;
    if (tid < t.np) {
        const T* y = t.sm.base.Y + tid * t.ld;
        const int ss = t.P * t.ld;
        T u[2 * math::kMaxStreams], r[2];
        for (int s = 0; s < t.ns; ++s) {
            u[2 * s] = y[s * ss];
            u[2 * s + 1] = y[s * ss + 1];
        }
        terms::with_term(t.ra.entry, [&](auto entry) {
            decltype(entry)::residual(t.in, std::size_t(t.c0 + t.p0 + tid), u, 2, D, r);
        });
        for (int c = 0; c < 2; ++c) {
            const long long row = t.first_row + 2 * tid + c;
            if (row >= t.ra.r0 && row < t.ra.r1) t.ra.out[row - t.ra.r0] = t.ra.s * r[c];
        }
    }
}

/// The adjoint pass's seeds in G: the adjoint of u's streams for w = s e_c (c = q / P), zero
/// past the tile's end; the J v accumulators zeroed.
template <typename T, int D>
__device__ __forceinline__ void row_seeds(const RowTile<T>& t, T* G) {
    for (int q = threadIdx.x; q < t.Q; q += kThreads) {
        const int p = q % t.P, c = q / t.P;
        T* g = G + q * t.ld;
        if (p < t.np) {
            T w[2] = {T(0), T(0)}, ub[2 * math::kMaxStreams];
            w[c] = t.ra.s;
            terms::with_term(t.ra.entry, [&](auto entry) {
                decltype(entry)::adjoint(t.in, std::size_t(t.c0 + t.p0 + p), w, ub, 2, D);
            });
            for (int s = 0; s < t.ns; ++s) {
                g[s * t.ss2] = ub[2 * s];
                g[s * t.ss2 + 1] = ub[2 * s + 1];
            }
        } else {
            for (int s = 0; s < t.ns; ++s) g[s * t.ss2] = g[s * t.ss2 + 1] = T(0);
        }
        t.sm.acc[q] = T(0);
    }
}

/// jacobian, layer l: row q's entries db = G_0[q] and dW[o][i] = sum_s G_s[q][o] A_s[p][i],
/// written straight to J (A_s[p][i] = Ac[(s B + p0 + p) in_w + i], the caches).
template <typename T>
__device__ __forceinline__ void jacobian_layer(const RowTile<T>& t, const T* G, const T* Ac,
                                               int l, int in_w, int out_w) {
    const int tid = threadIdx.x;
    const long long B = t.cache.B, NP = t.ra.num_params;
    for (int k = tid; k < t.Q * out_w; k += kThreads) {
        const int q = k / out_w, o = k % out_w;
        if (t.wanted(q)) t.ra.out[(t.row_of(q) - t.ra.r0) * NP + t.net.offb[l] + o] = G[q * t.ld + o];
    }
    const long long nk = static_cast<long long>(t.Q) * out_w * in_w;
    for (long long k = tid; k < nk; k += kThreads) {
        const int q = int(k / (static_cast<long long>(out_w) * in_w));
        if (!t.wanted(q)) continue;
        const int rem = int(k - static_cast<long long>(q) * out_w * in_w);
        const int o = rem / in_w, i = rem % in_w, p = q % t.P;
        T a = T(0);
        for (int s = 0; s < t.ns; ++s)
            a = fma(G[s * t.ss2 + q * t.ld + o], Ac[(s * B + t.p0 + p) * in_w + i], a);
        t.ra.out[(t.row_of(q) - t.ra.r0) * NP + t.net.offW[l] + static_cast<long long>(o) * in_w + i] = a;
    }
}

/// jvp, layer l: Z = G V_W (all streams), then row q's sum_s Z_s[q] . A_s[p] + G_0[q] . v_b in
/// kRowParts partial sums, kept in N (free until N = G W), added in a fixed order to acc.
template <typename T>
__device__ __forceinline__ void jvp_layer(const RowTile<T>& t, const T* G, T* N, T* Z,
                                          const T* Ac, int l, int in_w, int out_w) {
    const int tid = threadIdx.x;
    const long long B = t.cache.B;
    block_gemm<T, true>(G, Z, t.ld, t.ns * t.Q, t.ra.v + t.net.offW[l], in_w, out_w, in_w,
                        nullptr, 0, t.sm.base.ws);
    __syncthreads();
    const T* vb = t.ra.v + t.net.offb[l];
    for (int k = tid; k < t.Q * kRowParts; k += kThreads) {
        const int q = k / kRowParts, g8 = k % kRowParts, p = q % t.P;
        T a = T(0);
        if (p < t.np) {
            for (int s = 0; s < t.ns; ++s) {
                const T* zr = Z + s * t.ss2 + q * t.ld;
                const T* ar = Ac + (s * B + t.p0 + p) * in_w;
                for (int i = g8; i < in_w; i += kRowParts) a = fma(zr[i], ar[i], a);
            }
            for (int o = g8; o < out_w; o += kRowParts) a = fma(G[q * t.ld + o], vb[o], a);
        }
        N[k] = a;
    }
    __syncthreads();
    for (int q = tid; q < t.Q; q += kThreads) {
        T a = T(0);
        for (int g8 = 0; g8 < kRowParts; ++g8) a += N[q * kRowParts + g8];
        t.sm.acc[q] += a;
    }
}

/// The Fourier layer's parameters B (the first parameter block) from the feature adjoints in G
/// [ns, Q, 2m] (sin and cos from the feature cache, stream 0): jacobian writes row q's dB to J;
/// jvp adds dB . v_B to acc (through Z).
template <typename T, int D, bool Jac>
__device__ __forceinline__ void fourier_rows(const RowTile<T>& t, const T* G, T* Z) {
    const int tid = threadIdx.x;
    const int m = t.net.m, F = 2 * m;
    for (int k = tid; k < t.Q * m; k += kThreads) {
        const int q = k / m, j = k % m, p = q % t.P;
        if (p >= t.np || (Jac && !t.wanted(q))) continue;
        const T* f = t.cache.feat + static_cast<long long>(t.p0 + p) * F;
        const T* xp = t.sm.base.xs + p * D;
        T sbar, wbar[D];
        math::fourier_backward_point(f[j], f[m + j], t.net.omega + j,
                                     static_cast<std::ptrdiff_t>(m), t.net.Omega[j], D, t.ns,
                                     G + q * t.ld + j, G + q * t.ld + m + j,
                                     static_cast<std::ptrdiff_t>(t.ss2), sbar, wbar);
        if constexpr (Jac) {
            T* dB = t.ra.out + (t.row_of(q) - t.ra.r0) * t.ra.num_params;
#pragma unroll
            for (int i = 0; i < D; ++i) dB[i * m + j] = T(math::two_pi) * (xp[i] * sbar + wbar[i]);
        } else {
            T a = T(0);
#pragma unroll
            for (int i = 0; i < D; ++i)
                a = fma(T(math::two_pi) * (xp[i] * sbar + wbar[i]), t.ra.v[i * m + j], a);
            Z[q * m + j] = a;
        }
    }
    __syncthreads();
    if constexpr (!Jac)
        for (int q = tid; q < t.Q; q += kThreads) {
            if (q % t.P >= t.np) continue;
            T a = T(0);
            for (int j = 0; j < m; ++j) a += Z[q * m + j];
            t.sm.acc[q] += a;
        }
}

/// jacobian (Jac) or jvp: the adjoint pass over the tile's Q rows after its forward, one block
/// GEMM a layer over all ns Q rows, each layer's adjoints used by jacobian_layer or jvp_layer.
template <typename T, int D, bool Jac>
__device__ __forceinline__ void row_adjoint(const RowTile<T>& t) {
    const int tid = threadIdx.x;
    const int H = t.net.H, L = t.net.L, F = 2 * t.net.m;
    const long long B = t.cache.B;
    T* G = t.sm.base.X;  // h_{L-1} is in the caches: X becomes the first adjoint buffer
    T* N = t.sm.base.Y;
    T* Z = t.sm.Z;
    row_seeds<T, D>(t, G);
    __syncthreads();
    for (int l = L; l >= 0; --l) {
        const int in_w = l == 0 ? F : H, out_w = l == L ? 2 : H;
        if (l < L) {  // adjoint of h_l -> adjoint of z_l, in place
            const T* zc = t.cache.z[l];
            const T* hc = t.cache.h[l];
            for (int k = tid; k < t.Q * out_w; k += kThreads) {
                const int q = k / out_w, j = k % out_w, p = q % t.P;
                T* g = G + q * t.ld + j;
                if (p < t.np) {
                    const long long e = static_cast<long long>(t.p0 + p) * out_w + j;
                    math::tanh_backward(zc + e, static_cast<std::ptrdiff_t>(B * out_w), hc[e], g,
                                        static_cast<std::ptrdiff_t>(t.ss2), D, t.ns);
                } else {
                    for (int s = 0; s < t.ns; ++s) g[s * t.ss2] = T(0);
                }
            }
            __syncthreads();
        }
        const T* Ac = l == 0 ? t.cache.feat : t.cache.h[l - 1];  // the layer's inputs
        if constexpr (Jac)
            jacobian_layer(t, G, Ac, l, in_w, out_w);
        else
            jvp_layer(t, G, N, Z, Ac, l, in_w, out_w);
        __syncthreads();
        if (l == 0 && !t.ra.train_fourier) break;
        // adjoint of the layer's input: N = G W_l, all streams and rows
        block_gemm<T, true>(G, N, t.ld, t.ns * t.Q, t.net.params + t.net.offW[l], in_w, out_w,
                            in_w, nullptr, 0, t.sm.base.ws);
        __syncthreads();
        T* const swap = G;
        G = N;
        N = swap;
    }

    if (t.ra.train_fourier) {
        fourier_rows<T, D, Jac>(t, G, Z);
    } else if constexpr (Jac) {  // frozen B: its columns are zero
        const int dm = D * t.net.m;
        for (int k = tid; k < t.Q * dm; k += kThreads) {
            const int q = k / dm;
            if (t.wanted(q)) t.ra.out[(t.row_of(q) - t.ra.r0) * t.ra.num_params + k % dm] = T(0);
        }
    }
    __syncthreads();
    if constexpr (!Jac)
        for (int q = tid; q < t.Q; q += kThreads)
            if (t.wanted(q)) t.ra.out[t.row_of(q) - t.ra.r0] = t.sm.acc[q];
}

/// Rows of one tile: points p0 .. p0 + np of the chunk that starts at point c0 of the term. The
/// tile's forward, then the mode's part: row_residuals, or row_adjoint for jacobian or jvp.
template <typename T, int D>
__device__ __forceinline__ void row_tile(const NetArgs<T>& net, const CacheArgs<T>& cache,
                                         const TileArgs<T>& ta, const RowSmem<T>& sm,
                                         const LossInputs<T>& in, const RowLaunch<T>& ra,
                                         long long c0, int p0, int np) {
    const int P = ta.P;
    const RowTile<T> t{net, cache, sm, in, ra, c0, p0, np, P, ta.ld, ra.ns, 2 * P,
                       2 * P * ta.ld, ra.row0 + 2 * (c0 + p0)};
    forward_tile<T, D>(net, cache, ta, sm.base, ra.x, c0, p0, np, ra.ns, OutArgs<T>{});
    if (ra.kind == kRowResiduals)
        row_residuals<T, D>(t);
    else if (ra.kind == kRowJacobian)
        row_adjoint<T, D, true>(t);
    else
        row_adjoint<T, D, false>(t);
    __syncthreads();  // the next tile's forward rewrites Y, its seeds rewrite acc
}

/// residuals(), jacobian(), jvp(): the tiles of one chunk of nc points of one loss term, the
/// chunk starting at point c0 of the term.
template <typename T, int D, bool GS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM)
    rows_kernel(NetArgs<T> net, CacheArgs<T> cache, TileArgs<T> ta, LossInputs<T> in,
                RowLaunch<T> ra, long long c0, int nc) {
    HELMPINN_DYNAMIC_SMEM(smem);
    const RowSmem<T> sm = carve_rows<T, GS>(smem, ta);
    for_block_tiles(nc, ta.P, [&](int p0, int np) {
        row_tile<T, D>(net, cache, ta, sm, in, ra, c0, p0, np);
    });
}

}  // namespace cuda
}  // namespace helmpinn
