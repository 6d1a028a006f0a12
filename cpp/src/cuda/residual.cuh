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

/// Rows of one tile: points p0 .. p0 + np of the chunk that starts at point c0 of the term.
template <typename T, int D>
__device__ __forceinline__ void row_tile(const NetArgs<T>& net, const CacheArgs<T>& cache,
                                         const TileArgs<T>& ta, const RowSmem<T>& sm,
                                         const LossInputs<T>& in, const RowLaunch<T>& ra,
                                         long long c0, int p0, int np) {
    const int tid = threadIdx.x;
    const int P = ta.P, ld = ta.ld, ns = ra.ns, Q = 2 * P;
    const int ss = P * ld, ss2 = Q * ld;
    const int m = net.m, H = net.H, L = net.L, F = 2 * m;
    const long long B = cache.B, NP = ra.num_params;
    const long long first_row = ra.row0 + 2 * (c0 + p0);

    forward_tile<T, D>(net, cache, ta, sm.base, ra.x, c0, p0, np, ns, OutArgs<T>{});

    if (ra.kind == kRowResiduals) {
        if (tid < np) {
            const T* y = sm.base.Y + tid * ld;
            T u[2 * math::kMaxStreams], r[2];
            for (int s = 0; s < ns; ++s) {
                u[2 * s] = y[s * ss];
                u[2 * s + 1] = y[s * ss + 1];
            }
            terms::with_term(ra.entry, [&](auto entry) {
                decltype(entry)::residual(in, std::size_t(c0 + p0 + tid), u, 2, D, r);
            });
            for (int c = 0; c < 2; ++c) {
                const long long row = first_row + 2 * tid + c;
                if (row >= ra.r0 && row < ra.r1) ra.out[row - ra.r0] = ra.s * r[c];
            }
        }
        __syncthreads();  // the next tile's forward rewrites Y
        return;
    }

    const bool jac = ra.kind == kRowJacobian;
    // Row q of the tile: its point, its output row, and whether the caller wants it.
    auto row_of = [&](int q) { return first_row + 2 * (q % P) + q / P; };
    auto wanted = [&](int q) {
        const long long row = row_of(q);
        return q % P < np && row >= ra.r0 && row < ra.r1;
    };

    T* G = sm.base.X;  // h_{L-1} is in the caches: X becomes the first adjoint buffer
    T* N = sm.base.Y;
    T* Z = sm.Z;

    // Seeds: the adjoint of u's streams for w = s e_c (c = q / P), zero past the tile's end.
    for (int q = tid; q < Q; q += kThreads) {
        const int p = q % P, c = q / P;
        T* g = G + q * ld;
        if (p < np) {
            T w[2] = {T(0), T(0)}, ub[2 * math::kMaxStreams];
            w[c] = ra.s;
            terms::with_term(ra.entry, [&](auto entry) {
                decltype(entry)::adjoint(in, std::size_t(c0 + p0 + p), w, ub, 2, D);
            });
            for (int s = 0; s < ns; ++s) {
                g[s * ss2] = ub[2 * s];
                g[s * ss2 + 1] = ub[2 * s + 1];
            }
        } else {
            for (int s = 0; s < ns; ++s) g[s * ss2] = g[s * ss2 + 1] = T(0);
        }
        sm.acc[q] = T(0);
    }
    __syncthreads();

    const int R2 = ns * Q;
    for (int l = L; l >= 0; --l) {
        const int in_w = l == 0 ? F : H, out_w = l == L ? 2 : H;
        if (l < L) {  // adjoint of h_l -> adjoint of z_l, in place
            const T* zc = cache.z[l];
            const T* hc = cache.h[l];
            for (int k = tid; k < Q * out_w; k += kThreads) {
                const int q = k / out_w, j = k % out_w, p = q % P;
                T* g = G + q * ld + j;
                if (p < np) {
                    const long long e = static_cast<long long>(p0 + p) * out_w + j;
                    math::tanh_backward(zc + e, static_cast<std::ptrdiff_t>(B * out_w), hc[e], g,
                                        static_cast<std::ptrdiff_t>(ss2), D, ns);
                } else {
                    for (int s = 0; s < ns; ++s) g[s * ss2] = T(0);
                }
            }
            __syncthreads();
        }
        // The layer's inputs A_s[p][i] = Ac[(s B + p0 + p) in_w + i] (caches).
        const T* Ac = l == 0 ? cache.feat : cache.h[l - 1];
        if (jac) {
            for (int k = tid; k < Q * out_w; k += kThreads) {
                const int q = k / out_w, o = k % out_w;
                if (wanted(q)) ra.out[(row_of(q) - ra.r0) * NP + net.offb[l] + o] = G[q * ld + o];
            }
            const long long nk = static_cast<long long>(Q) * out_w * in_w;
            for (long long k = tid; k < nk; k += kThreads) {
                const int q = int(k / (static_cast<long long>(out_w) * in_w));
                if (!wanted(q)) continue;
                const int rem = int(k - static_cast<long long>(q) * out_w * in_w);
                const int o = rem / in_w, i = rem % in_w, p = q % P;
                T a = T(0);
                for (int s = 0; s < ns; ++s)
                    a = fma(G[s * ss2 + q * ld + o], Ac[(s * B + p0 + p) * in_w + i], a);
                ra.out[(row_of(q) - ra.r0) * NP + net.offW[l] + static_cast<long long>(o) * in_w + i] = a;
            }
        } else {
            // Z = G V_W (all streams), then row q's sum_s Z_s[q] . A_s[p] + G_0[q] . v_b in
            // kRowParts partial sums, kept in N (free until N = G W below).
            block_gemm<T, true>(G, Z, ld, R2, ra.v + net.offW[l], in_w, out_w, in_w, nullptr, 0,
                                sm.base.ws);
            __syncthreads();
            const T* vb = ra.v + net.offb[l];
            for (int k = tid; k < Q * kRowParts; k += kThreads) {
                const int q = k / kRowParts, g8 = k % kRowParts, p = q % P;
                T a = T(0);
                if (p < np) {
                    for (int s = 0; s < ns; ++s) {
                        const T* zr = Z + s * ss2 + q * ld;
                        const T* ar = Ac + (s * B + p0 + p) * in_w;
                        for (int i = g8; i < in_w; i += kRowParts) a = fma(zr[i], ar[i], a);
                    }
                    for (int o = g8; o < out_w; o += kRowParts) a = fma(G[q * ld + o], vb[o], a);
                }
                N[k] = a;
            }
            __syncthreads();
            for (int q = tid; q < Q; q += kThreads) {
                T a = T(0);
                for (int g8 = 0; g8 < kRowParts; ++g8) a += N[q * kRowParts + g8];
                sm.acc[q] += a;
            }
        }
        __syncthreads();
        if (l == 0 && !ra.train_fourier) break;
        // adjoint of the layer's input: N = G W_l, all streams and rows
        block_gemm<T, true>(G, N, ld, R2, net.params + net.offW[l], in_w, out_w, in_w, nullptr, 0,
                            sm.base.ws);
        __syncthreads();
        T* t = G;
        G = N;
        N = t;
    }

    if (ra.train_fourier) {
        // G: the feature adjoints [ns, Q, 2m]; sin and cos from the feature cache (stream 0).
        for (int k = tid; k < Q * m; k += kThreads) {
            const int q = k / m, j = k % m, p = q % P;
            if (p >= np || (jac && !wanted(q))) continue;
            const T* f = cache.feat + static_cast<long long>(p0 + p) * F;
            const T* xp = sm.base.xs + p * D;
            T sbar, wbar[D];
            math::fourier_backward_point(f[j], f[m + j], net.omega + j,
                                         static_cast<std::ptrdiff_t>(m), net.Omega[j], D, ns,
                                         G + q * ld + j, G + q * ld + m + j,
                                         static_cast<std::ptrdiff_t>(ss2), sbar, wbar);
            if (jac) {
                T* dB = ra.out + (row_of(q) - ra.r0) * NP;  // B is the first parameter block
#pragma unroll
                for (int i = 0; i < D; ++i) dB[i * m + j] = T(math::two_pi) * (xp[i] * sbar + wbar[i]);
            } else {
                T a = T(0);
#pragma unroll
                for (int i = 0; i < D; ++i)
                    a = fma(T(math::two_pi) * (xp[i] * sbar + wbar[i]), ra.v[i * m + j], a);
                Z[q * m + j] = a;
            }
        }
        __syncthreads();
        if (!jac)
            for (int q = tid; q < Q; q += kThreads) {
                if (q % P >= np) continue;
                T a = T(0);
                for (int j = 0; j < m; ++j) a += Z[q * m + j];
                sm.acc[q] += a;
            }
    } else if (jac) {
        for (int k = tid; k < Q * D * m; k += kThreads) {
            const int q = k / (D * m);
            if (wanted(q)) ra.out[(row_of(q) - ra.r0) * NP + k % (D * m)] = T(0);
        }
    }
    __syncthreads();
    if (!jac)
        for (int q = tid; q < Q; q += kThreads)
            if (wanted(q)) ra.out[row_of(q) - ra.r0] = sm.acc[q];
    __syncthreads();  // the next tile's seeds rewrite acc
}

/// residuals(), jacobian(), jvp(): the tiles of one chunk of nc points of one loss term, the
/// chunk starting at point c0 of the term.
template <typename T, int D, bool GS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM)
    rows_kernel(NetArgs<T> net, CacheArgs<T> cache, TileArgs<T> ta, LossInputs<T> in,
                RowLaunch<T> ra, long long c0, int nc) {
    HELMPINN_DYNAMIC_SMEM(smem);
    const RowSmem<T> sm = carve_rows<T, GS>(smem, ta);
    const int ntiles = (nc + ta.P - 1) / ta.P;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int p0 = t * ta.P;
        const int np = nc - p0 < ta.P ? nc - p0 : ta.P;
        row_tile<T, D>(net, cache, ta, sm, in, ra, c0, p0, np);
    }
}

}  // namespace cuda
}  // namespace helmpinn
