// A small register-blocked matrix product for the CPU backend's tiles.
//
//     C[m, n] (= or +=) sum_k A(m, k) * B[k * ldb + n],   A(m, k) = A[m * ars + k * acs]
//
// B and C have contiguous rows; A is addressed by two strides, so one kernel serves the three
// products of a layer: forward (A = activations, B = W^T), input adjoint (A = z-adjoint, B = W)
// and weight gradient (A = z-adjoint transposed through its strides, B = activations).
// The micro-kernel keeps an MR x NR block of C in registers; NR spans two vector registers of
// the instruction set the file is compiled for (isa.hpp), and the compiler vectorises the j loop.
#pragma once

#include <cstddef>
#include <cstring>

#include "isa.hpp"

namespace helmpinn {
namespace cpu {
inline namespace HELMPINN_CPU_KERNELS {

constexpr int vector_bytes = HELMPINN_CPU_VECTOR_BYTES;

template <typename T>
struct GemmShape {
    static constexpr int NR = 2 * vector_bytes / int(sizeof(T));  // columns in registers
    // rows in registers: 8 x 2 accumulators of 32 registers (AVX-512), 4 x 2 of 16 (AVX2);
    // 8 and 4 divide the backend's 32-point tiles, so no remainder rows in the hot loops.
    static constexpr int MR = vector_bytes == 64 ? 8 : 4;
};

#if defined(__GNUC__) || defined(__clang__)
// One vector register of T; NR = 2 of them. Written with vector extensions so that the compiler
// keeps the MR x NR block in registers and broadcasts A: left to itself, GCC vectorised the
// double kernel across rows with permutes and ran it at a tenth of its speed.
template <typename T>
struct VecOf;
template <>
struct VecOf<float> {
    typedef float type __attribute__((vector_size(vector_bytes)));
};
template <>
struct VecOf<double> {
    typedef double type __attribute__((vector_size(vector_bytes)));
};
template <typename T>
using Vec = typename VecOf<T>::type;

template <typename T>
inline Vec<T> load_vec(const T* p) {
    Vec<T> v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}

template <typename T, int MR, int NR>
inline void gemm_micro(int K, const T* __restrict A, std::ptrdiff_t ars, std::ptrdiff_t acs,
                       const T* __restrict B, std::ptrdiff_t ldb, T* __restrict C,
                       std::ptrdiff_t ldc, bool accumulate) {
    constexpr int VL = vector_bytes / int(sizeof(T));
    static_assert(NR == 2 * VL, "the micro-kernel spans two vector registers");
    Vec<T> c0[MR], c1[MR];
    for (int i = 0; i < MR; ++i) c0[i] = c1[i] = Vec<T>{} ;
    for (int k = 0; k < K; ++k) {
        const Vec<T> b0 = load_vec(B + k * ldb), b1 = load_vec(B + k * ldb + VL);
        for (int i = 0; i < MR; ++i) {
            const T a = A[i * ars + k * acs];
            c0[i] += a * b0;
            c1[i] += a * b1;
        }
    }
    for (int i = 0; i < MR; ++i) {
        T* ci = C + i * ldc;
        if (accumulate) {
            c0[i] += load_vec(ci);
            c1[i] += load_vec(ci + VL);
        }
        std::memcpy(ci, &c0[i], sizeof(Vec<T>));
        std::memcpy(ci + VL, &c1[i], sizeof(Vec<T>));
    }
}
#else
template <typename T, int MR, int NR>
inline void gemm_micro(int K, const T* __restrict A, std::ptrdiff_t ars, std::ptrdiff_t acs,
                       const T* __restrict B, std::ptrdiff_t ldb, T* __restrict C,
                       std::ptrdiff_t ldc, bool accumulate) {
    T c[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < NR; ++j) c[i][j] = T(0);
    for (int k = 0; k < K; ++k) {
        const T* b = B + k * ldb;
        for (int i = 0; i < MR; ++i) {
            const T a = A[i * ars + k * acs];
            for (int j = 0; j < NR; ++j) c[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < MR; ++i) {
        T* ci = C + i * ldc;
        for (int j = 0; j < NR; ++j) ci[j] = accumulate ? ci[j] + c[i][j] : c[i][j];
    }
}
#endif

// Columns that do not fill NR: a plain loop over a runtime width (the output layer's 2 columns).
template <typename T, int MR>
inline void gemm_edge(int K, int nr, const T* __restrict A, std::ptrdiff_t ars,
                      std::ptrdiff_t acs, const T* __restrict B, std::ptrdiff_t ldb,
                      T* __restrict C, std::ptrdiff_t ldc, bool accumulate) {
    constexpr int NR = GemmShape<T>::NR;
    T c[MR][NR];
    for (int i = 0; i < MR; ++i)
        for (int j = 0; j < nr; ++j) c[i][j] = T(0);
    for (int k = 0; k < K; ++k) {
        const T* b = B + k * ldb;
        for (int i = 0; i < MR; ++i) {
            const T a = A[i * ars + k * acs];
            for (int j = 0; j < nr; ++j) c[i][j] += a * b[j];
        }
    }
    for (int i = 0; i < MR; ++i) {
        T* ci = C + i * ldc;
        for (int j = 0; j < nr; ++j) ci[j] = accumulate ? ci[j] + c[i][j] : c[i][j];
    }
}

// The output layer's two dot products of one row, accumulated: c0 += a . w0, c1 += a . w1 over
// K entries (add() may be called again for another pair of rows), then sums(). Vectorised along
// the row with one vector accumulator per output, whose lanes are summed by halving (log2 of the
// lanes dependent additions): GCC's own `omp simd reduction` summed them one by one through the
// stack, 15 dependent additions per output with AVX-512 floats, a quarter of a J v with 32
// hidden units.
#if defined(__GNUC__) || defined(__clang__)
// The sum of the N lanes of a vector: its two halves added, recursively (each step one extract
// and one addition of half the width).
template <typename T, int N>
struct LaneSum {
    typedef T V __attribute__((vector_size(N * sizeof(T))));
    typedef T H __attribute__((vector_size(N / 2 * sizeof(T))));
    static inline T of(const V& v) {
        H lo, hi;
        std::memcpy(&lo, &v, sizeof(H));
        std::memcpy(&hi, reinterpret_cast<const char*>(&v) + sizeof(H), sizeof(H));
        return LaneSum<T, N / 2>::of(lo + hi);
    }
};
template <typename T>
struct LaneSum<T, 2> {
    typedef T V __attribute__((vector_size(2 * sizeof(T))));
    static inline T of(const V& v) { return v[0] + v[1]; }
};

template <typename T>
struct Dot2 {
    static constexpr int VL = vector_bytes / int(sizeof(T));
    Vec<T> c0{}, c1{};
    T r0 = T(0), r1 = T(0);

    inline void add(int K, const T* __restrict a, const T* __restrict w0, const T* __restrict w1) {
        int k = 0;
        for (; k + VL <= K; k += VL) {
            const Vec<T> x = load_vec(a + k);
            c0 += x * load_vec(w0 + k);
            c1 += x * load_vec(w1 + k);
        }
        for (; k < K; ++k) {
            r0 += a[k] * w0[k];
            r1 += a[k] * w1[k];
        }
    }
    inline void sums(T& u0, T& u1) const {
        u0 = LaneSum<T, VL>::of(c0) + r0;
        u1 = LaneSum<T, VL>::of(c1) + r1;
    }
};
#else
template <typename T>
struct Dot2 {
    T r0 = T(0), r1 = T(0);
    inline void add(int K, const T* a, const T* w0, const T* w1) {
        for (int k = 0; k < K; ++k) {
            r0 += a[k] * w0[k];
            r1 += a[k] * w1[k];
        }
    }
    inline void sums(T& u0, T& u1) const {
        u0 = r0;
        u1 = r1;
    }
};
#endif

template <typename T, int MR>
inline void gemm_rows(int N, int K, const T* A, std::ptrdiff_t ars, std::ptrdiff_t acs,
                      const T* B, std::ptrdiff_t ldb, T* C, std::ptrdiff_t ldc, bool accumulate) {
    constexpr int NR = GemmShape<T>::NR;
    int n = 0;
    for (; n + NR <= N; n += NR)
        gemm_micro<T, MR, NR>(K, A, ars, acs, B + n, ldb, C + n, ldc, accumulate);
    if (n < N) gemm_edge<T, MR>(K, N - n, A, ars, acs, B + n, ldb, C + n, ldc, accumulate);
}

/// C[M, N] (=|+=) A(M, K) B[K, N]; see the file comment for the strides.
template <typename T>
inline void gemm(int M, int N, int K, const T* A, std::ptrdiff_t ars, std::ptrdiff_t acs,
                 const T* B, std::ptrdiff_t ldb, T* C, std::ptrdiff_t ldc, bool accumulate) {
    constexpr int MR = GemmShape<T>::MR;
    int m = 0;
    for (; m + MR <= M; m += MR)
        gemm_rows<T, MR>(N, K, A + m * ars, ars, acs, B, ldb, C + m * ldc, ldc, accumulate);
    const T* a = A + m * ars;
    T* c = C + m * ldc;
    switch (M - m) {
        case 7: gemm_rows<T, 7>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        case 6: gemm_rows<T, 6>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        case 5: gemm_rows<T, 5>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        case 4: gemm_rows<T, 4>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        case 3: gemm_rows<T, 3>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        case 2: gemm_rows<T, 2>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        case 1: gemm_rows<T, 1>(N, K, a, ars, acs, B, ldb, c, ldc, accumulate); break;
        default: break;
    }
}

}  // namespace HELMPINN_CPU_KERNELS
}  // namespace cpu
}  // namespace helmpinn
