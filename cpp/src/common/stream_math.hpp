// Per-point, per-feature mathematics of MATH.md and the Adam update, shared by the CPU and
// CUDA backends.
//
// Everything here is an inline function on scalars and strided pointers, callable from host
// and device code. A "stream-strided" pointer p holds stream s of one element at p[s * ss]:
// stream 0 is the value, 1..d the partial derivatives, then either the Laplacian (stream d+1;
// the "Laplacian layout") or the d second partials d^2/dx_i^2 (streams d+1 .. 2d; the "diagonal
// layout", MATH.md, General operator). `ns` is the number of streams present: 1 (value), d+1
// (value, gradient), d+2 (Laplacian layout) or 2d+1 (diagonal layout). For d = 1 the two layouts
// are the same three streams and lap_layout wins; the functions below branch on the layout at
// compile time when ns and d are constants, so the Laplacian code is what it was.
#pragma once

#include <cmath>
#include <cstddef>

#if defined(__CUDACC__)
#define HELMPINN_HD __host__ __device__ __forceinline__
#else
#define HELMPINN_HD inline
#endif

namespace helmpinn {
namespace math {

constexpr double two_pi = 6.283185307179586476925286766559;

/// Most streams a point carries: 2d + 1 for d = 3 (diagonal layout).
constexpr int kMaxStreams = 7;

/// Stream ns of dimension d holds the Laplacian (stream d+1).
HELMPINN_HD constexpr bool lap_layout(int d, int ns) { return ns == d + 2; }
/// Streams d+1 .. 2d hold the second partials d^2/dx_i^2 (d > 1; for d = 1 see lap_layout).
HELMPINN_HD constexpr bool diag_layout(int d, int ns) { return d > 1 && ns == 2 * d + 1; }

/// Phase of Fourier frequency j at one point: s = sum_i x_i * omega_i (omega_i = 2 pi B_ij),
/// with `omega` strided by `os` (omega[i * os]).
template <typename T>
HELMPINN_HD T fourier_phase(const T* x, const T* omega, std::ptrdiff_t os, int d) {
    T s = T(0);
    for (int i = 0; i < d; ++i) s += x[i] * omega[i * os];
    return s;
}

/// Fourier features of one frequency j at one point, all streams, from S = sin s, C = cos s:
///   value [S ; C], partial i [omega_i C ; -omega_i S], Laplacian [-Omega S ; -Omega C].
/// out_sin/out_cos are stream-strided by ss. A backend computes S and C its own way (the CPU
/// backend for a whole row of frequencies at once).
template <typename T>
HELMPINN_HD void fourier_streams(T S, T C, const T* omega, std::ptrdiff_t os, T Omega, int d,
                                 int ns, T* out_sin, T* out_cos, std::ptrdiff_t ss) {
    out_sin[0] = S;
    out_cos[0] = C;
    if (ns > 1) {
        for (int i = 0; i < d; ++i) {
            const T w = omega[i * os];
            out_sin[(1 + i) * ss] = w * C;
            out_cos[(1 + i) * ss] = -w * S;
        }
    }
    if (lap_layout(d, ns)) {
        out_sin[(d + 1) * ss] = -Omega * S;
        out_cos[(d + 1) * ss] = -Omega * C;
    } else if (diag_layout(d, ns)) {  // d^2/dx_i^2 [S ; C] = -omega_i^2 [S ; C]
        for (int i = 0; i < d; ++i) {
            const T w2 = omega[i * os] * omega[i * os];
            out_sin[(d + 1 + i) * ss] = -w2 * S;
            out_cos[(d + 1 + i) * ss] = -w2 * C;
        }
    }
}

/// fourier_phase, its sin and cos, and fourier_streams for one frequency at one point.
template <typename T>
HELMPINN_HD void fourier_forward(const T* x, const T* omega, std::ptrdiff_t os, T Omega, int d,
                                 int ns, T* out_sin, T* out_cos, std::ptrdiff_t ss) {
    const T s = fourier_phase(x, omega, os, d);
    fourier_streams(T(std::sin(s)), T(std::cos(s)), omega, os, Omega, d, ns, out_sin, out_cos,
                    ss);
}

/// Adjoint of fourier_streams for one frequency j at one point, S = sin s and C = cos s as in
/// the forward pass. Given the adjoints of its outputs (stream-strided gs, gc for the sin and cos
/// halves), sets sbar to the adjoint of s and wbar[i] (i < d) to that of omega_i (MATH.md,
/// Fourier layer). B's gradient is then 2 pi (x_i sbar + wbar_i).
template <typename T>
HELMPINN_HD void fourier_backward_point(T S, T C, const T* omega, std::ptrdiff_t os, T Omega,
                                        int d, int ns, const T* gs, const T* gc,
                                        std::ptrdiff_t ss, T& sbar, T* wbar) {
    T sb = gs[0] * C - gc[0] * S;
    for (int i = 0; i < d; ++i) wbar[i] = T(0);
    if (ns > 1) {
        for (int i = 0; i < d; ++i) {
            const T w = omega[i * os];
            const T a = gs[(1 + i) * ss], b = gc[(1 + i) * ss];
            sb -= w * (a * S + b * C);
            wbar[i] += a * C - b * S;
        }
    }
    if (lap_layout(d, ns)) {
        const T a = gs[(d + 1) * ss], b = gc[(d + 1) * ss];
        sb -= Omega * (a * C - b * S);
        for (int i = 0; i < d; ++i) wbar[i] -= T(2) * omega[i * os] * (a * S + b * C);
    } else if (diag_layout(d, ns)) {
        for (int i = 0; i < d; ++i) {
            const T w = omega[i * os];
            const T a = gs[(d + 1 + i) * ss], b = gc[(d + 1 + i) * ss];
            sb -= w * w * (a * C - b * S);
            wbar[i] -= T(2) * w * (a * S + b * C);
        }
    }
    sbar = sb;
}

/// Tangent of fourier_streams for one frequency j at one point (forward mode, MATH.md, Jacobian-
/// vector product): the features' derivative along a direction vomega of the frequencies
/// (vomega_i = 2 pi V_B[i, j], strided by os). With sdot = sum_i x_i vomega_i and
/// Odot = 2 sum_i omega_i vomega_i:
///   value [C sdot ; -S sdot], partial i [vomega_i C - omega_i S sdot ; -vomega_i S - omega_i C sdot],
///   Laplacian [-Odot S - Omega C sdot ; -Odot C + Omega S sdot], and per dimension in the
///   diagonal layout [-2 omega_i vomega_i S - omega_i^2 C sdot ; -2 omega_i vomega_i C + omega_i^2 S sdot].
template <typename T>
HELMPINN_HD void fourier_tangent(T S, T C, const T* x, const T* omega, const T* vomega,
                                 std::ptrdiff_t os, T Omega, int d, int ns, T* out_sin, T* out_cos,
                                 std::ptrdiff_t ss) {
    T sd = T(0), Od = T(0);
    for (int i = 0; i < d; ++i) {
        sd += x[i] * vomega[i * os];
        Od += T(2) * omega[i * os] * vomega[i * os];
    }
    out_sin[0] = C * sd;
    out_cos[0] = -S * sd;
    if (ns > 1) {
        for (int i = 0; i < d; ++i) {
            const T w = omega[i * os], vw = vomega[i * os];
            out_sin[(1 + i) * ss] = vw * C - w * S * sd;
            out_cos[(1 + i) * ss] = -vw * S - w * C * sd;
        }
    }
    if (lap_layout(d, ns)) {
        out_sin[(d + 1) * ss] = -Od * S - Omega * C * sd;
        out_cos[(d + 1) * ss] = -Od * C + Omega * S * sd;
    } else if (diag_layout(d, ns)) {
        for (int i = 0; i < d; ++i) {
            const T w = omega[i * os], w2d = T(2) * w * vomega[i * os], w2 = w * w;
            out_sin[(d + 1 + i) * ss] = -w2d * S - w2 * C * sd;
            out_cos[(d + 1 + i) * ss] = -w2d * C + w2 * S * sd;
        }
    }
}

/// tanh layer, forward, one unit at one point (MATH.md, Streams), given hv = tanh z[0]:
///   h = hv, t = 1 - h^2, h_i = t z_i, h_lap = t z_lap - 2 h t q, q = sum_i z_i^2.
/// z and h are stream-strided by ss (they may not alias). Taking hv lets a backend compute
/// tanh with its own (vectorised) routine.
template <typename T>
HELMPINN_HD void tanh_streams(const T* z, T hv, T* h, std::ptrdiff_t ss, int d, int ns) {
    const T t = T(1) - hv * hv;
    h[0] = hv;
    if (ns > 1) {
        T q = T(0);
        for (int i = 1; i <= d; ++i) {
            const T zi = z[i * ss];
            h[i * ss] = t * zi;
            q += zi * zi;
        }
        if (lap_layout(d, ns)) {
            h[(d + 1) * ss] = t * z[(d + 1) * ss] - T(2) * hv * t * q;
        } else if (diag_layout(d, ns)) {  // h_ii = t z_ii - 2 h t z_i^2
            for (int i = 1; i <= d; ++i) {
                const T zi = z[i * ss];
                h[(d + i) * ss] = t * z[(d + i) * ss] - T(2) * hv * t * zi * zi;
            }
        }
    }
}

/// tanh_streams with hv = tanh z[0].
template <typename T>
HELMPINN_HD void tanh_forward(const T* z, T* h, std::ptrdiff_t ss, int d, int ns) {
    tanh_streams(z, T(std::tanh(z[0])), h, ss, d, ns);
}

/// tanh layer, tangent (forward mode), one unit at one point, in place: zd holds the tangents of
/// the inputs (z, z_i, z_lap or z_ii) on entry and those of the outputs on exit (stream-strided
/// by ds); z is the cached pre-activation (strided by zs), hv = tanh z[0]. With t = 1 - h^2,
/// hd = t zd, td = -2 h hd, q = sum_i z_i^2 and qd = 2 sum_i z_i zd_i:
///   hd_i = td z_i + t zd_i,  hd_lap = td z_lap + t zd_lap - 2 (hd t + h td) q - 2 h t qd,
///   hd_ii = td z_ii + t zd_ii - 2 (hd t + h td) z_i^2 - 4 h t z_i zd_i.
template <typename T>
HELMPINN_HD void tanh_tangent(const T* z, std::ptrdiff_t zs, T hv, T* zd, std::ptrdiff_t ds, int d,
                              int ns) {
    const T t = T(1) - hv * hv;
    const T hd = t * zd[0], td = T(-2) * hv * hd;
    zd[0] = hd;
    if (ns == 1) return;
    const T e = T(2) * (hd * t + hv * td);  // d/d(eps) of 2 h t
    if (lap_layout(d, ns)) {
        T q = T(0), qd = T(0);
        for (int i = 1; i <= d; ++i) {
            const T zi = z[i * zs], zdi = zd[i * ds];
            q += zi * zi;
            qd += zi * zdi;
            zd[i * ds] = td * zi + t * zdi;
        }
        zd[(d + 1) * ds] = td * z[(d + 1) * zs] + t * zd[(d + 1) * ds] - e * q -
                           T(4) * hv * t * qd;
    } else if (diag_layout(d, ns)) {
        for (int i = 1; i <= d; ++i) {
            const T zi = z[i * zs], zdi = zd[i * ds];
            zd[i * ds] = td * zi + t * zdi;
            zd[(d + i) * ds] = td * z[(d + i) * zs] + t * zd[(d + i) * ds] - e * zi * zi -
                               T(4) * hv * t * zi * zdi;
        }
    } else {
        for (int i = 1; i <= d; ++i) zd[i * ds] = td * z[i * zs] + t * zd[i * ds];
    }
}

/// tanh layer, backward, one unit at one point, in place: g holds the adjoints of the outputs
/// (h, h_i, h_lap) on entry and those of the inputs (z, z_i, z_lap) on exit. z is the cached
/// pre-activation (stream-strided by zs), g is stream-strided by gs, hv = tanh z[0].
///   zbar_lap = t hbar_lap
///   zbar_i   = t hbar_i - 4 h t z_i hbar_lap
///   zbar     = t [hbar - 2 t q hbar_lap - 2 h (sum_i hbar_i z_i + hbar_lap (z_lap - 2 h q))]
template <typename T>
HELMPINN_HD void tanh_backward(const T* z, std::ptrdiff_t zs, T hv, T* g, std::ptrdiff_t gs,
                               int d, int ns) {
    const T t = T(1) - hv * hv;
    if (ns == 1) {
        g[0] = t * g[0];
        return;
    }
    T q = T(0), dot = T(0);
    for (int i = 1; i <= d; ++i) {
        const T zi = z[i * zs];
        q += zi * zi;
        dot += g[i * gs] * zi;
    }
    if (diag_layout(d, ns)) {
        // Diagonal layout (MATH.md, General operator), with u = 2h z_ii + 2(t - 2h^2) z_i^2:
        //   zbar_ii = t hbar_ii,  zbar_i = t hbar_i - 4 h t z_i hbar_ii,
        //   zbar = t [hbar - 2h sum_i hbar_i z_i - sum_i hbar_ii (2h z_ii + 2(t - 2h^2) z_i^2)]
        T acc = g[0] - T(2) * hv * dot;
        const T e = T(2) * (t - T(2) * hv * hv);
        for (int i = 1; i <= d; ++i) {
            const T zi = z[i * zs], gii = g[(d + i) * gs];
            acc -= gii * (T(2) * hv * z[(d + i) * zs] + e * zi * zi);
            g[i * gs] = t * g[i * gs] - T(4) * hv * t * zi * gii;
            g[(d + i) * gs] = t * gii;
        }
        g[0] = t * acc;
    } else if (lap_layout(d, ns)) {
        const T gl = g[(d + 1) * gs];
        const T zl = z[(d + 1) * zs];
        g[0] = t * (g[0] - T(2) * t * q * gl - T(2) * hv * (dot + gl * (zl - T(2) * hv * q)));
        const T c = T(4) * hv * t * gl;
        for (int i = 1; i <= d; ++i) g[i * gs] = t * g[i * gs] - c * z[i * zs];
        g[(d + 1) * gs] = t * gl;
    } else {
        g[0] = t * (g[0] - T(2) * hv * dot);
        for (int i = 1; i <= d; ++i) g[i * gs] = t * g[i * gs];
    }
}

/// Adam(W) step constants (primitives.hpp, adam_step), computed in double as the backends do:
/// a = lr / (1 - beta1^step), c2 = 1 / (1 - beta2^step), wd = lr * weight_decay.
template <typename T>
struct AdamScalars {
    T b1, b2, a, c2, eps, wd;
    AdamScalars(long step, double lr, double beta1, double beta2, double eps_, double weight_decay)
        : b1(T(beta1)), b2(T(beta2)), a(T(lr / (1.0 - std::pow(beta1, double(step))))),
          c2(T(1.0 / (1.0 - std::pow(beta2, double(step))))), eps(T(eps_)),
          wd(T(lr * weight_decay)) {}
};

/// One Adam(W) update of one parameter p with gradient g and moments m, v (in place).
template <typename T>
HELMPINN_HD void adam_update(T& p, T g, T& m, T& v, T b1, T b2, T a, T c2, T eps, T wd) {
    const T mk = b1 * m + (T(1) - b1) * g;
    const T vk = b2 * v + (T(1) - b2) * g * g;
    m = mk;
    v = vk;
    p -= a * mk / (std::sqrt(vk * c2) + eps) + wd * p;
}

}  // namespace math
}  // namespace helmpinn
