// The loss-term table: every term of the PINN loss, defined once for both backends.
//
// A term is one entry: which points of LossInputs it reads, how many streams its points carry,
// its complex residual r at one point from the output streams of u, and the adjoint of those
// streams for a given adjoint w of r (the transpose of the linear map u-streams -> r: every
// residual here is linear in u's streams). Everything a backend does with a term is built from
// these two functions (MATH.md, Loss and Residual level):
//
//   value_and_grad   w = (2 w_t / N_t) r         loss += w_t / N_t |r|^2
//   vjp              w = sqrt(w_t / N_t) w_row   (the caller's row weights)
//   residuals        r_row = sqrt(w_t / N_t) r
//   jacobian, jvp    w = sqrt(w_t / N_t) e_c     (one output component c = re, im at a time)
//
// with N_t the term's count (LossInputs::count_*, or its number of points). A new term is one
// more struct here, one more case in the with_term switch, its fields in LossInputs, and its
// arrays in term_arrays; backends iterate kNumTerms and need no edit. A term may have more than
// one entry (the PDE term: the Laplacian, or the general operator); term_entry picks it.
//
// Functions are inline for host and device code (stream_math.hpp's HELMPINN_HD). u and ubar are
// "stream-strided": stream s of the point at u[s * ss], its components re, im at +0 and +1.
#pragma once

#include <cmath>
#include <cstddef>

#include "helmpinn/workspace.hpp"
#include "stream_math.hpp"

namespace helmpinn {
namespace terms {

enum Term : int { kPde = 0, kData = 1, kBc = 2 };
constexpr int kNumTerms = 3;

/// out = conj(a) w for complex a = (ar, ai) and w: the adjoint of a complex factor a.
template <typename T>
HELMPINN_HD void conj_mul(T ar, T ai, const T w[2], T* out) {
    out[0] = ar * w[0] + ai * w[1];
    out[1] = ar * w[1] - ai * w[0];
}

/// Table entries: one per term, and a second one for the PDE term (the general operator, chosen
/// by LossInputs::pde_operator). An entry's `id` is the term it computes.
enum Entry : int { kPdeLaplacian = 0, kDataMisfit = 1, kRobinBc = 2, kPdeOperator = 3 };

/// The entry that computes term t of `in`.
template <typename T>
HELMPINN_HD int term_entry(const LossInputs<T>& in, int t) {
    return t == kPde && in.pde_operator ? int(kPdeOperator) : t;
}

/// PDE residual r = lap u + kappa u - f (MATH.md, Loss); d + 2 streams.
struct Pde {
    static constexpr Term id = kPde;
    static constexpr const char* name = "pde";
    HELMPINN_HD static int streams(int d) { return d + 2; }
    template <typename T>
    HELMPINN_HD static T kappa(const LossInputs<T>& in, std::size_t p) {
        return in.kappa ? in.kappa[p] : in.kappa_const;
    }
    template <typename T>
    HELMPINN_HD static void residual(const LossInputs<T>& in, std::size_t p, const T* u,
                                     std::ptrdiff_t ss, int d, T r[2]) {
        const T k = kappa(in, p);
        const T* lap = u + (d + 1) * ss;
        r[0] = lap[0] + k * u[0] - (in.f ? in.f[p * 2] : T(0));
        r[1] = lap[1] + k * u[1] - (in.f ? in.f[p * 2 + 1] : T(0));
    }
    /// ubar_lap = w, ubar = kappa w, ubar_i = 0.
    template <typename T>
    HELMPINN_HD static void adjoint(const LossInputs<T>& in, std::size_t p, const T w[2], T* ubar,
                                    std::ptrdiff_t ss, int d) {
        const T k = kappa(in, p);
        ubar[0] = k * w[0];
        ubar[1] = k * w[1];
        for (int i = 1; i <= d; ++i) ubar[i * ss] = ubar[i * ss + 1] = T(0);
        ubar[(d + 1) * ss] = w[0];
        ubar[(d + 1) * ss + 1] = w[1];
    }
};

/// General diagonal second-order operator (MATH.md, General operator), complex coefficients:
///   r = sum_i a_i d^2u/dx_i^2 + sum_i b_i du/dx_i + c u - f;  2d + 1 streams (diagonal layout).
/// a_i = a_pde[p, i] or a_const, b_i = b_pde[p, i] or b_const, c = c_pde[p], else (kappa[p], 0),
/// else c_const.
struct PdeOperator {
    static constexpr Term id = kPde;
    static constexpr const char* name = "pde";
    HELMPINN_HD static int streams(int d) { return 2 * d + 1; }
    template <typename T>
    HELMPINN_HD static void coef(const T* arr, const T* cst, std::size_t k, T& re, T& im) {
        re = arr ? arr[k * 2] : cst[0];
        im = arr ? arr[k * 2 + 1] : cst[1];
    }
    template <typename T>
    HELMPINN_HD static void c_coef(const LossInputs<T>& in, std::size_t p, T& re, T& im) {
        if (in.c_pde) {
            re = in.c_pde[p * 2], im = in.c_pde[p * 2 + 1];
        } else if (in.kappa) {
            re = in.kappa[p], im = T(0);
        } else {
            re = in.c_const[0], im = in.c_const[1];
        }
    }
    template <typename T>
    HELMPINN_HD static void residual(const LossInputs<T>& in, std::size_t p, const T* u,
                                     std::ptrdiff_t ss, int d, T r[2]) {
        T cr, ci;
        c_coef(in, p, cr, ci);
        T re = cr * u[0] - ci * u[1] - (in.f ? in.f[p * 2] : T(0));
        T im = cr * u[1] + ci * u[0] - (in.f ? in.f[p * 2 + 1] : T(0));
        for (int i = 0; i < d; ++i) {
            const std::size_t k = p * std::size_t(d) + std::size_t(i);
            T ar, ai, br, bi;
            coef(in.a_pde, in.a_const, k, ar, ai);
            coef(in.b_pde, in.b_const, k, br, bi);
            const T* g = u + (1 + i) * ss;      // du/dx_i
            const T* h = u + (1 + d + i) * ss;  // d^2u/dx_i^2
            re += ar * h[0] - ai * h[1] + br * g[0] - bi * g[1];
            im += ar * h[1] + ai * h[0] + br * g[1] + bi * g[0];
        }
        r[0] = re;
        r[1] = im;
    }
    /// ubar = conj(c) w, ubar_i = conj(b_i) w, ubar_ii = conj(a_i) w.
    template <typename T>
    HELMPINN_HD static void adjoint(const LossInputs<T>& in, std::size_t p, const T w[2], T* ubar,
                                    std::ptrdiff_t ss, int d) {
        T cr, ci;
        c_coef(in, p, cr, ci);
        conj_mul(cr, ci, w, ubar);
        for (int i = 0; i < d; ++i) {
            const std::size_t k = p * std::size_t(d) + std::size_t(i);
            T ar, ai, br, bi;
            coef(in.a_pde, in.a_const, k, ar, ai);
            coef(in.b_pde, in.b_const, k, br, bi);
            conj_mul(br, bi, w, ubar + (1 + i) * ss);
            conj_mul(ar, ai, w, ubar + (1 + d + i) * ss);
        }
    }
};

/// Data misfit r = u - y; 1 stream.
struct Data {
    static constexpr Term id = kData;
    static constexpr const char* name = "data";
    HELMPINN_HD static int streams(int) { return 1; }
    template <typename T>
    HELMPINN_HD static void residual(const LossInputs<T>& in, std::size_t p, const T* u,
                                     std::ptrdiff_t, int, T r[2]) {
        r[0] = u[0] - in.y[p * 2];
        r[1] = u[1] - in.y[p * 2 + 1];
    }
    template <typename T>
    HELMPINN_HD static void adjoint(const LossInputs<T>&, std::size_t, const T w[2], T* ubar,
                                    std::ptrdiff_t, int) {
        ubar[0] = w[0];
        ubar[1] = w[1];
    }
};

/// Robin residual rho = n . grad u + alpha u - g (complex alpha); d + 1 streams.
struct Robin {
    static constexpr Term id = kBc;
    static constexpr const char* name = "bc";
    HELMPINN_HD static int streams(int d) { return d + 1; }
    template <typename T>
    HELMPINN_HD static void alpha(const LossInputs<T>& in, std::size_t p, T& re, T& im) {
        re = in.alpha_bc ? in.alpha_bc[p * 2] : in.alpha_const[0];
        im = in.alpha_bc ? in.alpha_bc[p * 2 + 1] : in.alpha_const[1];
    }
    template <typename T>
    HELMPINN_HD static void residual(const LossInputs<T>& in, std::size_t p, const T* u,
                                     std::ptrdiff_t ss, int d, T r[2]) {
        T ar, ai;
        alpha(in, p, ar, ai);
        T re = ar * u[0] - ai * u[1] - (in.g_bc ? in.g_bc[p * 2] : T(0));
        T im = ar * u[1] + ai * u[0] - (in.g_bc ? in.g_bc[p * 2 + 1] : T(0));
        const T* n = in.normal_bc + p * std::size_t(d);
        for (int i = 0; i < d; ++i) {
            re += n[i] * u[(1 + i) * ss];
            im += n[i] * u[(1 + i) * ss + 1];
        }
        r[0] = re;
        r[1] = im;
    }
    /// ubar_i = w n_i (both parts), ubar = conj(alpha) w.
    template <typename T>
    HELMPINN_HD static void adjoint(const LossInputs<T>& in, std::size_t p, const T w[2], T* ubar,
                                    std::ptrdiff_t ss, int d) {
        T ar, ai;
        alpha(in, p, ar, ai);
        const T* n = in.normal_bc + p * std::size_t(d);
        for (int i = 0; i < d; ++i) {
            ubar[(1 + i) * ss] = w[0] * n[i];
            ubar[(1 + i) * ss + 1] = w[1] * n[i];
        }
        conj_mul(ar, ai, w, ubar);
    }
};

/// Calls f(Entry{}) for table entry e (an Entry; a Term names its default entry).
template <typename F>
HELMPINN_HD void with_term(int e, F&& f) {
    switch (e) {
        case kPdeLaplacian: f(Pde{}); break;
        case kDataMisfit: f(Data{}); break;
        case kPdeOperator: f(PdeOperator{}); break;
        default: f(Robin{}); break;
    }
}

/// The points of term t in `in`: coordinates, number, weight and the count its mean divides by.
template <typename T>
struct TermPoints {
    const T* x = nullptr;
    std::size_t n = 0;
    T w = T(1);
    std::size_t count = 0;  ///< the given global count, else n
};

template <typename T>
HELMPINN_HD TermPoints<T> term_points(const LossInputs<T>& in, int t) {
    TermPoints<T> tp;
    std::size_t given = 0;
    if (t == kPde) {
        tp.x = in.x_pde, tp.n = in.num_pde, tp.w = in.w_pde, given = in.count_pde;
    } else if (t == kData) {
        tp.x = in.x_data, tp.n = in.num_data, tp.w = in.w_data, given = in.count_data;
    } else {
        tp.x = in.x_bc, tp.n = in.num_bc, tp.w = in.w_bc, given = in.count_bc;
    }
    tp.count = given ? given : tp.n;
    return tp;
}

/// Streams of entry t's points in dimension d.
HELMPINN_HD int term_streams(int t, int d) {
    int s = 0;
    with_term(t, [&](auto e) { s = decltype(e)::streams(d); });
    return s;
}

/// Number of residual rows of `in`: 2 per point of every term.
template <typename T>
std::size_t num_residuals(const LossInputs<T>& in) {
    return 2 * (in.num_pde + in.num_data + in.num_bc);
}

/// One array of a term, for the argument checks above the backends: its pointer, its number of
/// elements when present, its Python/C++ name, and whether the term needs it.
template <typename T>
struct TermArray {
    const T* p;
    std::size_t size;
    const char* name;
    bool required;
};

/// Every array of term t (at most 6), in the order check_finite reports them; returns how many.
template <typename T>
int term_arrays(const LossInputs<T>& in, int t, std::size_t d, TermArray<T>* out) {
    if (t == kPde) {
        out[0] = {in.x_pde, in.num_pde * d, "x_pde", true};
        out[1] = {in.kappa, in.num_pde, "kappa", false};
        out[2] = {in.f, in.num_pde * 2, "f", false};
        out[3] = {in.a_pde, in.num_pde * d * 2, "a_pde", false};
        out[4] = {in.b_pde, in.num_pde * d * 2, "b_pde", false};
        out[5] = {in.c_pde, in.num_pde * 2, "c_pde", false};
        return 6;
    }
    if (t == kData) {
        out[0] = {in.x_data, in.num_data * d, "x_data", true};
        out[1] = {in.y, in.num_data * 2, "y", true};
        return 2;
    }
    out[0] = {in.x_bc, in.num_bc * d, "x_bc", true};
    out[1] = {in.normal_bc, in.num_bc * d, "n_bc", true};
    out[2] = {in.alpha_bc, in.num_bc * 2, "alpha_bc", false};
    out[3] = {in.g_bc, in.num_bc * 2, "g_bc", false};
    return 4;
}

/// The scales of one term: c = 2 w / N (the loss seed's), s = sqrt(w / N) (a residual row's).
template <typename T>
struct TermScale {
    T c, s;
};

template <typename T>
TermScale<T> term_scale(const TermPoints<T>& tp) {
    const double N = tp.count ? double(tp.count) : 1.0;
    return {T(2) * tp.w / T(N), T(std::sqrt(double(tp.w) / N))};
}

}  // namespace terms
}  // namespace helmpinn
