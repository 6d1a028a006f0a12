// The fused kernels of the CUDA backend (MATH.md), in the spirit of tiny-cuda-nn's fully fused
// MLP: a thread block takes a tile of P points through every layer, all of the tile's streams
// stacked as the rows of one matrix, the activations in shared memory, and the weights staged
// through shared memory one warp slice at a time.
//
// Rows. Inside a block, stream s of tile point p is row r = s * P + p of an activation buffer
// (leading dimension `ld`), so every layer is ONE matrix product over ns * P rows, as in the
// CPU backend. Two buffers X and Y ping-pong between layers:
//     forward:  X (layer input) --GEMM--> Y (z) --tanh--> X (h) --GEMM--> Y ...
//     backward: G (adjoint of z) and A (the layer input, re-read from the caches) --> dW, db;
//               G W --> A, which becomes the next G.
// Buffers live in dynamic shared memory when they fit: on an H100/H200 (227 kB a block) every
// width up to 256, with tiles of 32 points shrinking to 16 (float32, H = 256, d = 3) or 4
// (float64, H = 256). Otherwise (wider layers, GPUs with less shared memory, or
// HELMPINN_CUDA_SCRATCH=global) they are a per-block slice of a global scratch buffer
// (template flag GS): slower, correct for any width.
//
// Determinism. Block b of a launch takes tiles b, b + grid, b + 2 grid, ... in that order and
// adds every gradient and loss partial it makes into its own slot; slots are summed in slot
// order by reduce_kernel. Inside a block every sum runs in a fixed order. No floating-point
// atomics anywhere: two runs with the same inputs give the same bits.
//
// All per-point mathematics (Fourier features, tanh streams, their adjoints, loss seeds) is
// called from common/stream_math.hpp, the same functions the CPU backend uses.
#pragma once

#include <cstddef>

#include "cuda_common.cuh"  // the CUDA runtime (or its CPU emulation), HELMPINN_LAUNCH
#include "../common/loss_terms.hpp"
#include "../common/stream_math.hpp"

namespace helmpinn {
namespace cuda {

#if defined(HELMPINN_CUDA_EMULATION)
using std::fma;
using std::isfinite;
#endif

constexpr int kThreads = 256;               // threads per block
constexpr int kWarps = kThreads / 32;
constexpr int kTO = 8;                      // output columns per warp unit (forward GEMMs)
constexpr int kMaxTile = 64;                // most points a tile may hold
constexpr int kMaxLayers = max_layers;  // spec.hpp
constexpr int kLossBytes = kMaxTile * 8;    // per-point loss partials (double)
constexpr int kPointBytes = kMaxTile * 3 * 8;  // tile points x [P, d]
// Blocks per SM the fused kernels are compiled for (__launch_bounds__' second argument: the
// register cap is 64k / (kThreads * this)). The plan's tiles fill most of an H100/H200's shared
// memory, so one block per SM is what runs: 1 leaves the compiler up to 255 registers instead of
// capping them at 128 (and spilling) for a second block that would not fit anyway. The plan
// reads the compiled registers back (cudaFuncGetAttributes / occupancy) and chooses the tile
// by occupancy. -DHELMPINN_CUDA_MIN_BLOCKS=2 (CMake cache variable) compiles the cap back in.
#ifndef HELMPINN_CUDA_MIN_BLOCKS
#define HELMPINN_CUDA_MIN_BLOCKS 1
#endif
constexpr int kMinBlocksPerSM = HELMPINN_CUDA_MIN_BLOCKS;

/// Compile-time sizes for one scalar type: `vec` elements make one 16-byte access.
template <typename T>
struct Cfg {
    static constexpr int vec = 16 / int(sizeof(T));
    static constexpr int kc = sizeof(T) == 4 ? 64 : 32;   // k-slice of a staged weight slice
    static constexpr int kcp = kc + vec;                  // its padded row
    static constexpr int ld_align = 128 / int(sizeof(T)); // rows start on 128-byte multiples + 16
};

template <typename T>
struct alignas(16) Pack {
    T v[16 / sizeof(T)];
};

/// 16-byte loads and stores (LDS.128 / STS.128). Under emulation, a misaligned address aborts
/// (a GPU would fault where x86 would not).
template <typename T>
__device__ __forceinline__ Pack<T> load_pack(const T* p) {
#if defined(HELMPINN_CUDA_EMULATION)
    emu::check_aligned(p);
#endif
    return *reinterpret_cast<const Pack<T>*>(p);
}
template <typename T>
__device__ __forceinline__ void store_pack(T* p, const Pack<T>& v) {
#if defined(HELMPINN_CUDA_EMULATION)
    emu::check_aligned(p);
#endif
    *reinterpret_cast<Pack<T>*>(p) = v;
}

__host__ __device__ inline long long round_up(long long a, long long b) { return (a + b - 1) / b * b; }

/// Leading dimension of the activation buffers: rows padded to a multiple of 128 bytes plus one
/// 16-byte access, so that the 8 lanes of a quarter-warp reading 16 bytes each from 8
/// consecutive rows hit distinct banks.
template <typename T>
inline int plan_ld(int max_width) {
    return int(round_up(max_width, Cfg<T>::ld_align)) + Cfg<T>::vec;
}

/// Elements of one activation buffer for tiles of P points with up to `streams` streams: the
/// rows padded to whole warps, and room for the Fourier backward's [d, m, P] scratch.
template <typename T>
inline long long plan_buffer(int P, int streams, int ld, int d, int m) {
    const long long rows = round_up(static_cast<long long>(streams) * P, 32);
    long long n = rows * ld;
    const long long scratch = static_cast<long long>(d) * m * P;
    if (scratch > n) n = scratch;
    return round_up(n, Cfg<T>::vec);
}

/// Shared memory every block uses whatever the mode: loss partials, tile points, weight slices.
template <typename T>
inline int fixed_smem_bytes() {
    return kLossBytes + kPointBytes + kWarps * kTO * Cfg<T>::kcp * int(sizeof(T));
}

/// The network: parameters (device), the Fourier frequencies 2 pi B and their squared norms
/// (device, made by prep_kernel), and the flat layout.
template <typename T>
struct NetArgs {
    const T* params = nullptr;
    const T* omega = nullptr;  // [d, m]
    const T* Omega = nullptr;  // [m]
    int m = 0, H = 0, L = 0;
    long long offW[kMaxLayers] = {};
    long long offb[kMaxLayers] = {};
};

/// The workspace caches (device), stream-major [streams, B, width] as in WorkspaceBuffers.
template <typename T>
struct CacheArgs {
    T* x_input = nullptr;
    T* feat = nullptr;
    T* z[kMaxLayers] = {};
    T* h[kMaxLayers] = {};
    T* du_dx = nullptr;
    T* d2u = nullptr;
    long long B = 0;
};

/// The activation buffers of one launch: points per tile, leading dimension, elements per
/// buffer and (GS mode) the global scratch holding two buffers per block.
template <typename T>
struct TileArgs {
    int P = 1, ld = 1;
    long long buf = 0;
    T* scratch = nullptr;
};

/// forward()'s outputs (device, may be null) and whether to write them.
template <typename T>
struct OutArgs {
    T* u = nullptr;
    T* grad_u = nullptr;
    T* lap_u = nullptr;
    bool write = false;
};

/// One loss term of a value_and_grad or vjp launch (the term's arrays are in the kernel's
/// LossInputs): its table entry, streams, points, scales and first residual row, where its seeds
/// come from (w == null: the loss, c r; else vjp's row weights, s w_row), and the per-point
/// outputs asked for (device, null = not wanted).
template <typename T>
struct TermLaunch {
    int term = terms::kPde;   // terms::Term: the loss slot
    int entry = terms::kPde;  // terms::Entry: the table entry computing it
    int ns = 1;
    const T* x = nullptr;
    T c = T(0);            // 2 w / N
    T s = T(0);            // sqrt(w / N)
    long long row0 = 0;    // the term's first row in the residual vector
    const T* w = nullptr;  // vjp: row weights [R]
    T* residuals = nullptr;
    T* grad_kappa = nullptr;
};

// ------------------------------------------------------------------------------------------
// Matrix products inside a block
// ------------------------------------------------------------------------------------------

/// One warp computes Y[r][n0 .. n0+kTO) for the RM * 32 rows r = row0 + q * 32 + lane of
///     Y[r][n] = sum_{k<K} X[r][k] * Wop(k, n)   (+ bias[n] when r < bias_rows),
/// Wop(k, n) = W[n * ldw + k] (W is [N, K]: forward) or W[k * ldw + n] (TRANS: W is [K, N]).
/// The weights pass through this warp's slice `ws` [kTO, kcp] of shared memory, kc columns
/// of k at a time; X rows are read 16 bytes at a time. Sums run in increasing k.
template <typename T, int RM, bool TRANS>
__device__ __forceinline__ void warp_unit(const T* X, T* Y, int ld, int row0, int n0,
                                          const T* __restrict__ W, int ldw, int K, int N,
                                          const T* __restrict__ bias, int bias_rows, T* ws,
                                          int lane) {
    constexpr int VEC = Cfg<T>::vec, KC = Cfg<T>::kc, KCP = Cfg<T>::kcp;
    T acc[RM][kTO];
#pragma unroll
    for (int q = 0; q < RM; ++q)
#pragma unroll
        for (int j = 0; j < kTO; ++j) acc[q][j] = T(0);
    const T* xr[RM];
#pragma unroll
    for (int q = 0; q < RM; ++q) xr[q] = X + static_cast<long long>(row0 + q * 32 + lane) * ld;

    for (int kc = 0; kc < K; kc += KC) {
        const int kn = K - kc < KC ? K - kc : KC;
        // Stage Wop(kc .. kc+kn, n0 .. n0+kTO) as ws[j][kk]; zeros outside the matrix.
        for (int idx = lane; idx < kTO * KC; idx += 32) {
            int j, kk;
            if (TRANS) {
                j = idx % kTO;
                kk = idx / kTO;
            } else {
                kk = idx % KC;
                j = idx / KC;
            }
            const int n = n0 + j;
            T v = T(0);
            if (n < N && kk < kn)
                v = TRANS ? W[static_cast<long long>(kc + kk) * ldw + n]
                          : W[static_cast<long long>(n) * ldw + kc + kk];
            ws[j * KCP + kk] = v;
        }
        __syncwarp();
        int kk = 0;
#pragma unroll 2
        for (; kk + VEC <= kn; kk += VEC) {
            Pack<T> a[RM];
#pragma unroll
            for (int q = 0; q < RM; ++q) a[q] = load_pack(xr[q] + kc + kk);
#pragma unroll
            for (int j = 0; j < kTO; ++j) {
                const Pack<T> w = load_pack(ws + j * KCP + kk);
#pragma unroll
                for (int v = 0; v < VEC; ++v)
#pragma unroll
                    for (int q = 0; q < RM; ++q) acc[q][j] = fma(a[q].v[v], w.v[v], acc[q][j]);
            }
        }
        for (; kk < kn; ++kk) {
#pragma unroll
            for (int q = 0; q < RM; ++q) {
                const T a = xr[q][kc + kk];
#pragma unroll
                for (int j = 0; j < kTO; ++j) acc[q][j] = fma(a, ws[j * KCP + kk], acc[q][j]);
            }
        }
        __syncwarp();  // the slice is rewritten by the next k-slice
    }

#pragma unroll
    for (int q = 0; q < RM; ++q) {
        const int r = row0 + q * 32 + lane;
        T* yr = Y + static_cast<long long>(r) * ld;
        const bool add_bias = bias != nullptr && r < bias_rows;
        if (n0 + kTO <= N) {
            T vals[kTO];
#pragma unroll
            for (int j = 0; j < kTO; ++j) {
                vals[j] = acc[q][j];
                if (add_bias) vals[j] += bias[n0 + j];
            }
#pragma unroll
            for (int v = 0; v < kTO / VEC; ++v) {
                Pack<T> pk;
#pragma unroll
                for (int e = 0; e < VEC; ++e) pk.v[e] = vals[v * VEC + e];
                store_pack(yr + n0 + v * VEC, pk);
            }
        } else {
#pragma unroll
            for (int j = 0; j < kTO; ++j) {
                if (n0 + j < N) {
                    T val = acc[q][j];
                    if (add_bias) val += bias[n0 + j];
                    yr[n0 + j] = val;
                }
            }
        }
    }
}

/// Y = X Wop (+ bias on rows < bias_rows) for the first R rows of X (rows are computed in
/// whole warps: rows R .. round_up(R, 32) hold garbage that nobody reads). The block's warps
/// share the (64-row group, kTO-column group) units.
template <typename T, bool TRANS>
__device__ __forceinline__ void block_gemm(const T* X, T* Y, int ld, int R,
                                           const T* __restrict__ W, int ldw, int K, int N,
                                           const T* __restrict__ bias, int bias_rows, T* ws_all) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    T* ws = ws_all + warp * kTO * Cfg<T>::kcp;
    const int rows = int(round_up(R, 32));
    const int nrg = (rows + 63) / 64, ncg = (N + kTO - 1) / kTO;
    for (int u = warp; u < nrg * ncg; u += kWarps) {
        const int rg = u % nrg, cg = u / nrg;
        const int row0 = rg * 64;
        if (rows - row0 >= 64)
            warp_unit<T, 2, TRANS>(X, Y, ld, row0, cg * kTO, W, ldw, K, N, bias, bias_rows, ws, lane);
        else
            warp_unit<T, 1, TRANS>(X, Y, ld, row0, cg * kTO, W, ldw, K, N, bias, bias_rows, ws, lane);
    }
}

/// dW[o][i] += sum_{r<R} G[r][o] A[r][i] (all streams) for o < out, i < in, into the block's
/// own gradient slot (global). Each thread owns 8 x vec entries; rows are summed in order.
template <typename T>
__device__ __forceinline__ void block_dW(const T* G, const T* A, int ld, int R, int out, int in,
                                         T* __restrict__ dW) {
    constexpr int VEC = Cfg<T>::vec;
    const int nig = (in + VEC - 1) / VEC, nog = (out + 7) / 8;
    for (int u = threadIdx.x; u < nog * nig; u += kThreads) {
        const int og = u / nig, ig = u % nig;
        T acc[8][VEC];
#pragma unroll
        for (int j = 0; j < 8; ++j)
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[j][v] = T(0);
        const T* gp = G + og * 8;
        const T* ap = A + ig * VEC;
#pragma unroll 2
        for (int r = 0; r < R; ++r) {
            const long long o = static_cast<long long>(r) * ld;
            const Pack<T> a = load_pack(ap + o);
            Pack<T> g[8 / VEC];
#pragma unroll
            for (int t = 0; t < 8 / VEC; ++t) g[t] = load_pack(gp + o + t * VEC);
#pragma unroll
            for (int j = 0; j < 8; ++j)
#pragma unroll
                for (int v = 0; v < VEC; ++v) acc[j][v] = fma(g[j / VEC].v[j % VEC], a.v[v], acc[j][v]);
        }
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const int o = og * 8 + j;
            if (o >= out) break;
#pragma unroll
            for (int v = 0; v < VEC; ++v) {
                const int i = ig * VEC + v;
                if (i < in) dW[static_cast<long long>(o) * in + i] += acc[j][v];
            }
        }
    }
}

/// db[o] += sum_{p<P} G[p][o] (value stream only), summed in point order.
template <typename T>
__device__ __forceinline__ void block_db(const T* G, int ld, int P, int out, T* __restrict__ db) {
    for (int o = threadIdx.x; o < out; o += kThreads) {
        T s = T(0);
        for (int p = 0; p < P; ++p) s += G[static_cast<long long>(p) * ld + o];
        db[o] += s;
    }
}

// ------------------------------------------------------------------------------------------
// One tile: forward streams, loss seeds, adjoint pass
// ------------------------------------------------------------------------------------------

/// Shared (or scratch) memory of one block.
template <typename T>
struct Smem {
    double* loss;  // [kMaxTile]
    T* xs;         // [P, d]
    T* ws;         // [kWarps, kTO, kcp]
    T* X;          // activation buffer
    T* Y;          // activation buffer
};

template <typename T, bool GS>
__device__ __forceinline__ Smem<T> carve(unsigned char* smem, const TileArgs<T>& t) {
    Smem<T> s;
    s.loss = reinterpret_cast<double*>(smem);
    s.xs = reinterpret_cast<T*>(smem + kLossBytes);
    s.ws = reinterpret_cast<T*>(smem + kLossBytes + kPointBytes);
    if (GS) {
        s.X = t.scratch + static_cast<long long>(blockIdx.x) * 2 * t.buf;
    } else {
        s.X = s.ws + kWarps * kTO * Cfg<T>::kcp;
    }
    s.Y = s.X + t.buf;
    return s;
}

/// Forward streams of tile points p0 .. p0+np of the chunk that starts at point c0 of x:
/// Fourier features, every layer's z and h (kept in X/Y and written to the caches), and, when
/// out.write, the outputs u, grad u, lap u and the du_dx / d2u_dx2 caches. Points p >= np of
/// the tile are computed from x = 0 (finite, never stored). On return Y holds the u streams
/// and X holds h_{L-1}, for all ns * P rows.
template <typename T, int D>
__device__ __forceinline__ void forward_tile(const NetArgs<T>& net, const CacheArgs<T>& cache,
                                             const TileArgs<T>& ta, const Smem<T>& sm,
                                             const T* __restrict__ x, long long c0, int p0, int np,
                                             int ns, const OutArgs<T>& outs) {
    const int tid = threadIdx.x;
    const int P = ta.P, ld = ta.ld, ss = P * ld;
    const int m = net.m, H = net.H, L = net.L, F = 2 * m;
    const long long B = cache.B;
    T* X = sm.X;
    T* Y = sm.Y;

    for (int k = tid; k < P * D; k += kThreads) {
        const int p = k / D, i = k % D;
        T v = T(0);
        if (p < np) {
            v = x[(c0 + p0 + p) * D + i];
            cache.x_input[static_cast<long long>(p0 + p) * D + i] = v;
        }
        sm.xs[k] = v;
    }
    __syncthreads();

    for (int k = tid; k < P * m; k += kThreads) {
        const int p = k / m, j = k % m;
        T* fs = X + p * ld + j;
        math::fourier_forward(sm.xs + p * D, net.omega + j, static_cast<std::ptrdiff_t>(m),
                              net.Omega[j], D, ns, fs, fs + m, static_cast<std::ptrdiff_t>(ss));
        if (p < np) {
            for (int s = 0; s < ns; ++s) {
                T* dst = cache.feat + (s * B + p0 + p) * F;
                dst[j] = fs[s * ss];
                dst[m + j] = fs[s * ss + m];
            }
        }
    }
    __syncthreads();

    const int R = ns * P;
    for (int l = 0; l <= L; ++l) {
        const int in = l == 0 ? F : H, out = l == L ? 2 : H;
        block_gemm<T, false>(X, Y, ld, R, net.params + net.offW[l], in, in, out,
                             net.params + net.offb[l], P, sm.ws);
        __syncthreads();
        T* zc = cache.z[l];
        T* hc = cache.h[l];
        for (int k = tid; k < P * out; k += kThreads) {
            const int p = k / out, j = k % out;
            const bool valid = p < np;
            const T* zs = Y + p * ld + j;
            const long long e = static_cast<long long>(p0 + p) * out + j;  // stream 0 in a cache
            if (valid)
                for (int s = 0; s < ns; ++s) zc[s * B * out + e] = zs[s * ss];
            if (l < L) {
                T* hs = X + p * ld + j;
                math::tanh_forward(zs, hs, static_cast<std::ptrdiff_t>(ss), D, ns);
                if (valid)
                    for (int s = 0; s < ns; ++s) hc[s * B * out + e] = hs[s * ss];
            } else if (valid && outs.write) {
                const long long gp = c0 + p0 + p;
                const long long lp = p0 + p;
                if (outs.u) outs.u[gp * 2 + j] = zs[0];
                if (ns > 1) {
                    for (int i = 0; i < D; ++i) {
                        const T v = zs[(1 + i) * ss];
                        cache.du_dx[(lp * D + i) * 2 + j] = v;
                        if (outs.grad_u) outs.grad_u[(gp * D + i) * 2 + j] = v;
                    }
                }
                if (ns > D + 1) {
                    const T v = zs[(D + 1) * ss];
                    cache.d2u[lp * 2 + j] = v;
                    if (outs.lap_u) outs.lap_u[gp * 2 + j] = v;
                }
            }
        }
        __syncthreads();
    }
}

/// The output adjoints of one point of a value_and_grad or vjp launch, from the loss-term
/// table: w = c r (the loss; also writes the point's scaled residual rows and dL/dkappa where
/// asked) or w = s w_row (vjp), then the term's adjoint of w. The point's u streams are at
/// y[s * ss] (components at +0, +1) and are overwritten by their adjoints. Returns |r|^2 (0 for
/// vjp), the same arithmetic as the CPU backend's seed().
template <typename T, int D>
__device__ __forceinline__ double seed_point(const LossInputs<T>& in, const TermLaunch<T>& tl,
                                             long long gp, T* y, int ss) {
    double r2 = 0.0;
    const int ns = tl.ns;
    terms::with_term(tl.entry, [&](auto entry) {
        using E = decltype(entry);
        T u[2 * math::kMaxStreams], ub[2 * math::kMaxStreams], r[2], w[2];
        const long long row = tl.row0 + 2 * gp;
        if (tl.w) {
            w[0] = tl.s * tl.w[row];
            w[1] = tl.s * tl.w[row + 1];
        } else {
            for (int s = 0; s < ns; ++s) {
                u[2 * s] = y[s * ss];
                u[2 * s + 1] = y[s * ss + 1];
            }
            E::residual(in, std::size_t(gp), u, 2, D, r);
            r2 = double(r[0] * r[0] + r[1] * r[1]);
            w[0] = tl.c * r[0];
            w[1] = tl.c * r[1];
            if (tl.residuals) {
                tl.residuals[row] = tl.s * r[0];
                tl.residuals[row + 1] = tl.s * r[1];
            }
            if (E::id == terms::kPde && tl.grad_kappa)
                tl.grad_kappa[gp] = w[0] * u[0] + w[1] * u[1];  // dr/dkappa = u
        }
        E::adjoint(in, std::size_t(gp), w, ub, 2, D);
        for (int s = 0; s < ns; ++s) {
            y[s * ss] = ub[2 * s];
            y[s * ss + 1] = ub[2 * s + 1];
        }
    });
    return r2;
}

/// Forward, seed and adjoint pass of one tile; adds its gradient into `slot` and its loss
/// into slot_loss[term] (both owned by this block).
template <typename T, int D>
__device__ __forceinline__ void train_tile(const NetArgs<T>& net, const CacheArgs<T>& cache,
                                           const TileArgs<T>& ta, const Smem<T>& sm,
                                           const LossInputs<T>& in, const TermLaunch<T>& term,
                                           long long c0, int p0, int np, bool train_fourier,
                                           T* __restrict__ slot, double* __restrict__ slot_loss) {
    const int tid = threadIdx.x;
    const int P = ta.P, ld = ta.ld, ss = P * ld, ns = term.ns;
    const int m = net.m, H = net.H, L = net.L, F = 2 * m;
    const long long B = cache.B;

    forward_tile<T, D>(net, cache, ta, sm, term.x, c0, p0, np, ns, OutArgs<T>{});

    // Output adjoints (in place over the u streams in Y) and the tile's loss, in point order.
    if (tid < P) {
        const int p = tid;
        double r = 0.0;
        T* y = sm.Y + p * ld;
        if (p < np) {
            r = seed_point<T, D>(in, term, c0 + p0 + p, y, ss);
        } else {
            for (int s = 0; s < ns; ++s) {
                y[s * ss] = T(0);
                y[s * ss + 1] = T(0);
            }
        }
        sm.loss[p] = r;
    }
    __syncthreads();
    if (tid == 0) {
        double acc = 0.0;
        for (int p = 0; p < P; ++p) acc += sm.loss[p];
        slot_loss[term.term] += acc;
    }

    T* G = sm.Y;  // adjoint of the current layer's output (z for l = L)
    T* A = sm.X;  // the current layer's input (h_{L-1} from the forward pass for l = L)
    const int R = ns * P;
    for (int l = L; l >= 0; --l) {
        const int in = l == 0 ? F : H, out = l == L ? 2 : H;
        if (l < L) {
            // adjoint of h_l -> adjoint of z_l, in place (tanh layer backward)
            const T* zc = cache.z[l];
            const T* hc = cache.h[l];
            for (int k = tid; k < P * out; k += kThreads) {
                const int p = k / out, j = k % out;
                T* g = G + p * ld + j;
                if (p < np) {
                    const long long e = static_cast<long long>(p0 + p) * out + j;
                    math::tanh_backward(zc + e, static_cast<std::ptrdiff_t>(B * out), hc[e], g,
                                        static_cast<std::ptrdiff_t>(ss), D, ns);
                } else {
                    for (int s = 0; s < ns; ++s) g[s * ss] = T(0);
                }
            }
            // the layer's input, all streams, back from the caches (zeros past the tile's end)
            const T* src = l == 0 ? cache.feat : cache.h[l - 1];
            for (int k = tid; k < P * in; k += kThreads) {
                const int p = k / in, i = k % in;
                for (int s = 0; s < ns; ++s)
                    A[s * ss + p * ld + i] =
                        p < np ? src[(s * B + p0 + p) * in + i] : T(0);
            }
            __syncthreads();
        }
        block_dW<T>(G, A, ld, R, out, in, slot + net.offW[l]);
        block_db<T>(G, ld, P, out, slot + net.offb[l]);
        __syncthreads();
        if (l == 0 && !train_fourier) break;
        // adjoint of the layer's input: A = G W_l
        block_gemm<T, true>(G, A, ld, R, net.params + net.offW[l], in, out, in, nullptr, 0, sm.ws);
        __syncthreads();
        T* t = G;
        G = A;
        A = t;
    }

    if (train_fourier) {
        // G holds the adjoints of the Fourier features [ns, P, 2m]; A is free scratch [d, m, P].
        T* scr = A;
        for (int k = tid; k < P * m; k += kThreads) {
            const int p = k / m, j = k % m;
            if (p < np) {
                const T* xp = sm.xs + p * D;
                T sbar, wbar[D];
                const T ph = math::fourier_phase(xp, net.omega + j, static_cast<std::ptrdiff_t>(m), D);
                math::fourier_backward_point(T(std::sin(ph)), T(std::cos(ph)), net.omega + j,
                                             static_cast<std::ptrdiff_t>(m),
                                             net.Omega[j], D, ns, G + p * ld + j,
                                             G + p * ld + m + j,
                                             static_cast<std::ptrdiff_t>(ss), sbar, wbar);
#pragma unroll
                for (int i = 0; i < D; ++i)
                    scr[(i * m + j) * P + p] = T(math::two_pi) * (xp[i] * sbar + wbar[i]);
            } else {
#pragma unroll
                for (int i = 0; i < D; ++i) scr[(i * m + j) * P + p] = T(0);
            }
        }
        __syncthreads();
        for (int k = tid; k < D * m; k += kThreads) {  // k = i * m + j, B's own layout
            T s = T(0);
            for (int p = 0; p < P; ++p) s += scr[k * P + p];
            slot[k] += s;
        }
    }
    __syncthreads();
}

// ------------------------------------------------------------------------------------------
// Kernels
// ------------------------------------------------------------------------------------------

/// omega = 2 pi B [d, m] and Omega_j = sum_i omega_ij^2, once per call.
template <typename T>
__global__ void prep_kernel(const T* __restrict__ params, int d, int m, T* __restrict__ omega,
                            T* __restrict__ Omega) {
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= m) return;
    T s = T(0);
    for (int i = 0; i < d; ++i) {
        const T w = T(math::two_pi) * params[i * m + j];
        omega[i * m + j] = w;
        s += w * w;
    }
    Omega[j] = s;
}

/// f(p0, np) for each tile of this block (a grid-stride loop): the tiles of P points of a chunk
/// of nc points, tile t at point p0 = t P with np = min(P, nc - p0) points.
template <typename F>
__device__ __forceinline__ void for_block_tiles(int nc, int P, F&& f) {
    const int ntiles = (nc + P - 1) / P;
    for (int t = blockIdx.x; t < ntiles; t += gridDim.x) {
        const int p0 = t * P;
        f(p0, nc - p0 < P ? nc - p0 : P);
    }
}

/// forward(): the tiles of one chunk of nc points starting at point c0 of x.
template <typename T, int D, bool GS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM)
    forward_kernel(NetArgs<T> net, CacheArgs<T> cache, TileArgs<T> ta, const T* __restrict__ x,
                   long long c0, int nc, int ns, OutArgs<T> outs) {
    HELMPINN_DYNAMIC_SMEM(smem);
    const Smem<T> sm = carve<T, GS>(smem, ta);
    for_block_tiles(nc, ta.P, [&](int p0, int np) {
        forward_tile<T, D>(net, cache, ta, sm, x, c0, p0, np, ns, outs);
    });
}

/// value_and_grad() and vjp(): forward, seed and backward of the tiles of one chunk of one loss
/// term.
/// Block b adds into gradient slot b (slot_grad + b * num_params) and loss slot b.
template <typename T, int D, bool GS>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSM)
    train_kernel(NetArgs<T> net, CacheArgs<T> cache, TileArgs<T> ta, LossInputs<T> in,
                 TermLaunch<T> term, long long c0, int nc, int train_fourier,
                 T* __restrict__ slot_grad, long long num_params, double* __restrict__ slot_loss) {
    HELMPINN_DYNAMIC_SMEM(smem);
    const Smem<T> sm = carve<T, GS>(smem, ta);
    T* slot = slot_grad + static_cast<long long>(blockIdx.x) * num_params;
    double* sl = slot_loss + static_cast<long long>(blockIdx.x) * terms::kNumTerms;
    for_block_tiles(nc, ta.P, [&](int p0, int np) {
        train_tile<T, D>(net, cache, ta, sm, in, term, c0, p0, np, train_fourier != 0, slot, sl);
    });
}

/// grad[i] = sum over the used slots, in slot order (0 for i < zero_below: frozen B); and the
/// three loss sums, in slot order.
template <typename T>
__global__ void reduce_kernel(const T* __restrict__ slot_grad, int used, long long num_params,
                              T* __restrict__ grad, long long zero_below,
                              const double* __restrict__ slot_loss, double* __restrict__ sums) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < num_params) {
        T s = T(0);
        for (int k = 0; k < used; ++k) s += slot_grad[k * num_params + i];
        grad[i] = i < zero_below ? T(0) : s;
    }
    if (blockIdx.x == 0 && threadIdx.x < terms::kNumTerms) {
        double s = 0.0;
        for (int k = 0; k < used; ++k) s += slot_loss[k * terms::kNumTerms + threadIdx.x];
        sums[threadIdx.x] = s;
    }
}

/// check_finite: first_bad[a] = smallest flat index of a NaN/Inf in array a (integer atomics;
/// the minimum does not depend on scheduling). first_bad starts at all ones.
// params, every array of the loss-term table, jvp's v / vjp's w
constexpr int kMaxChecked = 2 + terms::num_arrays<float>();
template <typename T>
struct FiniteArgs {
    const T* p[kMaxChecked] = {};
    unsigned long long n[kMaxChecked] = {};
};

template <typename T>
__global__ void finite_kernel(FiniteArgs<T> a, unsigned long long* __restrict__ first_bad) {
    const int k = blockIdx.y;
    const T* p = a.p[k];
    const unsigned long long n = a.n[k];
    if (!p) return;
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        if (!isfinite(p[i])) {
            atomicMin(first_bad + k, i);
            return;  // later indices of this thread are larger
        }
    }
}

}  // namespace cuda
}  // namespace helmpinn
