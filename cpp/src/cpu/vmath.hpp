// Vectorisable elementwise functions for the CPU backend.
//
// tanh_array<float> is a branch-free tanh the compiler vectorises (the C library's tanhf is a
// scalar call and cost a fifth of a float32 step). tanh|x| = -e / (e + 2) with e = expm1(-2|x|),
// expm1 from a range reduction y = k ln2 + r, |r| <= ln2/2, and a degree-7 Taylor polynomial:
// relative error below 2e-7 over the whole line; tanh(NaN) is NaN. tanh_array<double> uses the same method with a
// degree-13 polynomial, within a few ulp of std::tanh (tests/test_loss_grad.py and the C++ tests
// check the double results against independent references to 1e-12).
//
// sincos_array computes the Fourier features' sin and cos the same way (the C library's sincosf
// was a scalar call per feature, up to 8% of a float32 step): s = k pi/2 + r with a three-part
// Cody-Waite split of pi/2 whose first two parts make k * part exact, |r| <= pi/4, and Taylor
// polynomials of sin r and cos r, then the quadrant k mod 4 picks and signs them. Arguments beyond
// the split's exact range (|s| > 6000 in float, 1e6 in double) take the C library's path.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "isa.hpp"

namespace helmpinn {
namespace cpu {
inline namespace HELMPINN_CPU_KERNELS {

// The floating-point number whose bits are `bits` (T float with std::int32_t, double with
// std::int64_t).
template <class T, class Int>
inline T from_bits(Int bits) {
    static_assert(sizeof(T) == sizeof(Int), "from_bits: T and Int must have the same size");
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_bit_cast(T, bits);  // vectorises; memcpy through memory does not
#else
    T f;
    std::memcpy(&f, &bits, sizeof(T));
    return f;
#endif
}

inline float tanh_fast(float x) {
    const float a = std::fabs(x);
    // tanh(9) rounds to 1 in float. Written 9 < a ? 9 : a (minps(9, a)), so that a NaN passes
    // through, and on through the polynomial: tanh(NaN) is NaN at no cost (fmin would not
    // vectorise; a test of x at the end cost 20-35% of a whole step).
    const float ax = 9.0f < a ? 9.0f : a;
    const float y = -2.0f * ax;                        // in [-18, 0]
    const float kf = static_cast<float>(static_cast<int>(y * 1.44269504088896341f - 0.5f));
    const float r = (y - kf * 0.693145751953125f) - kf * 1.428606765330187e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    const float em_r = r + r * r * p;                  // expm1(r)
    const std::int32_t bits = (static_cast<std::int32_t>(kf) + 127) << 23;
    const float two_k = from_bits<float>(bits);
    const float em = two_k * em_r + (two_k - 1.0f);   // expm1(y) = 2^k expm1(r) + 2^k - 1
    const float t = -em / (em + 2.0f);
    return std::copysign(t, x);
}

inline double tanh_fast(double x) {
    const double a = std::fabs(x);
    const double ax = 19.1 < a ? 19.1 : a;  // tanh(19.1) rounds to 1 in double; NaN passes
    const double y = -2.0 * ax;              // in [-38.2, 0]
    const double kf = static_cast<double>(static_cast<std::int64_t>(y * 1.4426950408889634 - 0.5));
    const double r = (y - kf * 6.93147180369123816490e-01) - kf * 1.90821492927058770002e-10;
    double p = 1.0 / 6227020800.0;  // 1/13!
    p = p * r + 1.0 / 479001600.0;
    p = p * r + 1.0 / 39916800.0;
    p = p * r + 1.0 / 3628800.0;
    p = p * r + 1.0 / 362880.0;
    p = p * r + 1.0 / 40320.0;
    p = p * r + 1.0 / 5040.0;
    p = p * r + 1.0 / 720.0;
    p = p * r + 1.0 / 120.0;
    p = p * r + 1.0 / 24.0;
    p = p * r + 1.0 / 6.0;
    p = p * r + 0.5;
    const double em_r = r + r * r * p;  // expm1(r)
    const double two_k = from_bits<double>((static_cast<std::int64_t>(kf) + 1023) << 52);
    const double em = two_k * em_r + (two_k - 1.0);
    const double t = -em / (em + 2.0);
    return std::copysign(t, x);
}

template <typename T>
inline void tanh_array(const T* __restrict z, T* __restrict h, int n) {
#pragma omp simd
    for (int j = 0; j < n; ++j) h[j] = tanh_fast(z[j]);
}

// sin and cos of one argument |s| <= SinCos<T>::limit (see the file comment).
template <typename T>
struct SinCos;

template <>
struct SinCos<float> {
    static constexpr float limit = 6000.0f;  // |k| < 2^12: k * P1 and k * P2 are exact
    static constexpr float two_over_pi = 0.636619772367581343f;
    static constexpr float P1 = 1.57080078125f;              // 12 significant bits
    static constexpr float P2 = -4.453584551811218e-06f;     // 12 significant bits
    static constexpr float P3 = -8.705515752716053e-10f;
    static float sin_poly(float r2) {  // (sin r - r) / r^3, Taylor to r^9
        return -1.0f / 6.0f + r2 * (1.0f / 120.0f + r2 * (-1.0f / 5040.0f + r2 * (1.0f / 362880.0f)));
    }
    static float cos_poly(float r2) {  // (cos r - 1) / r^2, Taylor to r^10
        return -0.5f + r2 * (1.0f / 24.0f + r2 * (-1.0f / 720.0f +
                       r2 * (1.0f / 40320.0f + r2 * (-1.0f / 3628800.0f))));
    }
};

template <>
struct SinCos<double> {
    static constexpr double limit = 1.0e6;  // |k| < 2^20: k * P1 and k * P2 are exact
    static constexpr double two_over_pi = 0.63661977236758134308;
    static constexpr double P1 = 1.5707963267341256;     // 33 significant bits
    static constexpr double P2 = 6.077100506303966e-11;  // 33 significant bits
    static constexpr double P3 = 2.0222662487959506e-21;
    static double sin_poly(double r2) {  // (sin r - r) / r^3, Taylor to r^17
        double p = 1.0 / 355687428096000.0;  // 1/17!
        p = p * r2 - 1.0 / 1307674368000.0;
        p = p * r2 + 1.0 / 6227020800.0;
        p = p * r2 - 1.0 / 39916800.0;
        p = p * r2 + 1.0 / 362880.0;
        p = p * r2 - 1.0 / 5040.0;
        p = p * r2 + 1.0 / 120.0;
        return p * r2 - 1.0 / 6.0;
    }
    static double cos_poly(double r2) {  // (cos r - 1) / r^2, Taylor to r^16
        double p = 1.0 / 20922789888000.0;  // 1/16!
        p = p * r2 - 1.0 / 87178291200.0;
        p = p * r2 + 1.0 / 479001600.0;
        p = p * r2 - 1.0 / 3628800.0;
        p = p * r2 + 1.0 / 40320.0;
        p = p * r2 - 1.0 / 720.0;
        p = p * r2 + 1.0 / 24.0;
        return p * r2 - 0.5;
    }
};

template <typename T>
inline void sincos_fast(T s, T& sin_s, T& cos_s) {
    using K = SinCos<T>;
    const T y = s * K::two_over_pi;
    const int k = static_cast<int>(y + (y < T(0) ? T(-0.5) : T(0.5)));  // nearest integer
    const T kf = static_cast<T>(k);
    const T r = ((s - kf * K::P1) - kf * K::P2) - kf * K::P3;
    const T r2 = r * r;
    const T sr = r + r * r2 * K::sin_poly(r2);
    const T cr = T(1) + r2 * K::cos_poly(r2);
    const T sn = (k & 1) ? cr : sr, cs = (k & 1) ? sr : cr;
    sin_s = (k & 2) ? -sn : sn;
    cos_s = ((k + 1) & 2) ? -cs : cs;
}

/// sin_s[j] = sin s[j], cos_s[j] = cos s[j] for j < n (the outputs may not alias s).
template <typename T>
inline void sincos_array(const T* __restrict s, T* __restrict sin_s, T* __restrict cos_s, int n) {
    int outside = 0;  // arguments beyond the fast path's range, NaN and +-Inf included
#pragma omp simd reduction(+ : outside)
    for (int j = 0; j < n; ++j) outside += !(std::fabs(s[j]) <= SinCos<T>::limit);
    if (outside) {  // the C library: sin and cos of NaN or +-Inf are NaN
        for (int j = 0; j < n; ++j) {
            sin_s[j] = std::sin(s[j]);
            cos_s[j] = std::cos(s[j]);
        }
        return;
    }
#pragma omp simd
    for (int j = 0; j < n; ++j) sincos_fast(s[j], sin_s[j], cos_s[j]);
}

}  // namespace HELMPINN_CPU_KERNELS
}  // namespace cpu
}  // namespace helmpinn
