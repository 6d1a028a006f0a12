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
// more struct here, one more case in the with_term switch, its fields in LossInputs and its
// enumerator in terms::Term (workspace.hpp), one row in term_table and its arrays' rows in
// array_table (below); the backends, the argument checks, LossBreakdown and the Python binding
// iterate those tables and need no edit.
// A term may have more than one entry (the PDE term: the Laplacian, or the general operator);
// term_entry picks it.
//
// Functions are inline for host and device code (stream_math.hpp's HELMPINN_HD). u and ubar are
// "stream-strided": stream s of the point at u[s * ss], its components re, im at +0 and +1.
#pragma once

#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "helmpinn/workspace.hpp"
#include "stream_math.hpp"

namespace helmpinn {
namespace terms {

// Term, kPde, kData, kBc and kNumTerms: helmpinn/workspace.hpp (they index LossBreakdown::mean).

/// out = conj(a) w for complex a = (ar, ai) and w: the adjoint of a complex factor a.
template <typename T>
HELMPINN_HD void conj_mul(T ar, T ai, const T w[2], T* out) {
    out[0] = ar * w[0] + ai * w[1];
    out[1] = ar * w[1] - ai * w[0];
}

/// Table entries: one per term, and two more for the PDE term (the general operator, chosen by
/// LossInputs::pde_operator: its diagonal form with an a_i per axis, or its scalar form where
/// one a multiplies the Laplacian). An entry's `id` is the term it computes.
enum Entry : int {
    kPdeLaplacian = 0, kDataMisfit = 1, kRobinBc = 2, kPdeOperator = 3, kPdeScalarOperator = 4
};

/// The entry that computes term t of `in`: with the general operator, the scalar form unless
/// a_pde gives an a_i per axis (a_const, or a_lap, is the same a on every axis).
template <typename T>
HELMPINN_HD int term_entry(const LossInputs<T>& in, int t) {
    if (t != kPde || !in.pde_operator) return t;
    return in.a_pde ? int(kPdeOperator) : int(kPdeScalarOperator);
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

/// The general operator with one a per point (MATH.md, General operator):
///   r = a lap u + sum_i b_i du/dx_i + c u - f;  d + 2 streams (the Laplacian's layout).
/// a = a_lap[p] or a_const; b_i and c as PdeOperator's. The diagonal form's residual wherever
/// every a_i = a, from d - 1 fewer streams.
struct PdeScalarOperator {
    static constexpr Term id = kPde;
    static constexpr const char* name = "pde";
    HELMPINN_HD static int streams(int d) { return d + 2; }
    template <typename T>
    HELMPINN_HD static void residual(const LossInputs<T>& in, std::size_t p, const T* u,
                                     std::ptrdiff_t ss, int d, T r[2]) {
        T cr, ci, ar, ai;
        PdeOperator::c_coef(in, p, cr, ci);
        PdeOperator::coef(in.a_lap, in.a_const, p, ar, ai);
        const T* lap = u + (d + 1) * ss;
        T re = cr * u[0] - ci * u[1] + ar * lap[0] - ai * lap[1] - (in.f ? in.f[p * 2] : T(0));
        T im = cr * u[1] + ci * u[0] + ar * lap[1] + ai * lap[0] - (in.f ? in.f[p * 2 + 1] : T(0));
        for (int i = 0; i < d; ++i) {
            T br, bi;
            PdeOperator::coef(in.b_pde, in.b_const, p * std::size_t(d) + std::size_t(i), br, bi);
            const T* g = u + (1 + i) * ss;  // du/dx_i
            re += br * g[0] - bi * g[1];
            im += br * g[1] + bi * g[0];
        }
        r[0] = re;
        r[1] = im;
    }
    /// ubar = conj(c) w, ubar_i = conj(b_i) w, ubar_lap = conj(a) w.
    template <typename T>
    HELMPINN_HD static void adjoint(const LossInputs<T>& in, std::size_t p, const T w[2], T* ubar,
                                    std::ptrdiff_t ss, int d) {
        T cr, ci, ar, ai;
        PdeOperator::c_coef(in, p, cr, ci);
        conj_mul(cr, ci, w, ubar);
        for (int i = 0; i < d; ++i) {
            T br, bi;
            PdeOperator::coef(in.b_pde, in.b_const, p * std::size_t(d) + std::size_t(i), br, bi);
            conj_mul(br, bi, w, ubar + (1 + i) * ss);
        }
        PdeOperator::coef(in.a_lap, in.a_const, p, ar, ai);
        conj_mul(ar, ai, w, ubar + (d + 1) * ss);
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
        case kPdeScalarOperator: f(PdeScalarOperator{}); break;
        case kRobinBc: f(Robin{}); break;
        default:  // not an entry of the table: a programming error, never a silent Robin term
#ifdef __CUDA_ARCH__
            __trap();
#else
            throw std::logic_error("helmpinn: loss-term entry out of range");
#endif
    }
}

// ---- The tables: each term and each of its arrays, described once -----------------------------
// Host code only (the argument checks, the backends' launch planning, the Python binding):
// kernels read LossInputs' fields through the entries above.

/// A field of LossInputs<T> of type M. Spelled through this alias, not as `M LossInputs<T>::*`:
/// nvcc's front end rewrites such a member declaration as `M (LossInputs<T>::*name)` in the host
/// code it hands to the host compiler, which then warns of unnecessary parentheses (-Wparentheses).
template <typename T, typename M>
using Field = M LossInputs<T>::*;

/// One term (its index in the table is its terms::Term, and LossBreakdown::mean's index): its
/// name, its weight's keyword and its fields in LossInputs (points, global count, weight).
template <typename T>
struct TermInfo {
    const char* name;
    const char* weight_name;
    Field<T, const T*> x;
    Field<T, std::size_t> num;
    Field<T, std::size_t> count;
    Field<T, T> weight;
};

/// An array's shape: N rows of d, 1, 2 (a complex value as (re, im)) or d x 2 values; N is the
/// number of points of its term.
enum class Extent : int { d, one, two, d_two };
/// What may stand in for the array: nothing, a real constant, a complex constant.
enum class Constant : int { none, real, complex };

/// One array of a term: its keyword (the Python and LossInputs name), its term, its shape per
/// point, whether the term needs it, the constant that may stand in for it (and its field in
/// LossInputs), and whether giving it selects the term's second entry (the general operator).
/// The term's first array holds its points (TermInfo::x, shape [N, d]).
template <typename T>
struct ArrayInfo {
    const char* name;
    int term;
    Extent extent;
    bool required;
    Constant constant;
    bool selects_operator;
    Field<T, const T*> array;
    Field<T, T> real_const;           ///< Constant::real
    Field<T, T[2]> complex_const;     ///< Constant::complex
};

template <typename T>
struct Tables {
    using In = LossInputs<T>;
    static constexpr TermInfo<T> terms[kNumTerms] = {
        {"pde", "w_pde", &In::x_pde, &In::num_pde, &In::count_pde, &In::w_pde},
        {"data", "w_data", &In::x_data, &In::num_data, &In::count_data, &In::w_data},
        {"bc", "w_bc", &In::x_bc, &In::num_bc, &In::count_bc, &In::w_bc},
    };
    static constexpr ArrayInfo<T> arrays[] = {
        {"x_pde", kPde, Extent::d, true, Constant::none, false, &In::x_pde, nullptr, nullptr},
        // kappa: required without the operator; with it, c_pde or kappa (a real c) gives c.
        {"kappa", kPde, Extent::one, false, Constant::real, false, &In::kappa, &In::kappa_const, nullptr},
        {"f", kPde, Extent::two, false, Constant::none, false, &In::f, nullptr, nullptr},
        {"a_pde", kPde, Extent::d_two, false, Constant::complex, true, &In::a_pde, nullptr, &In::a_const},
        {"b_pde", kPde, Extent::d_two, false, Constant::complex, true, &In::b_pde, nullptr, &In::b_const},
        {"c_pde", kPde, Extent::two, false, Constant::complex, true, &In::c_pde, nullptr, &In::c_const},
        // a_lap: one a per point (the scalar form; a constant a is a_pde's constant).
        {"a_lap", kPde, Extent::two, false, Constant::none, true, &In::a_lap, nullptr, nullptr},
        {"x_data", kData, Extent::d, true, Constant::none, false, &In::x_data, nullptr, nullptr},
        {"y", kData, Extent::two, true, Constant::none, false, &In::y, nullptr, nullptr},
        {"x_bc", kBc, Extent::d, true, Constant::none, false, &In::x_bc, nullptr, nullptr},
        {"n_bc", kBc, Extent::d, true, Constant::none, false, &In::normal_bc, nullptr, nullptr},
        {"alpha_bc", kBc, Extent::two, false, Constant::complex, false, &In::alpha_bc, nullptr, &In::alpha_const},
        {"g_bc", kBc, Extent::two, false, Constant::none, false, &In::g_bc, nullptr, nullptr},
    };
};

/// The term table (indexed by Term) and the array table (terms in order, each term's points
/// first).
template <typename T>
constexpr const TermInfo<T>* term_table() { return Tables<T>::terms; }
template <typename T>
constexpr int num_arrays() { return int(sizeof(Tables<T>::arrays) / sizeof(Tables<T>::arrays[0])); }
template <typename T>
constexpr const ArrayInfo<T>* array_table() { return Tables<T>::arrays; }

/// The most arrays one term has.
constexpr int kMaxTermArrays = 7;

/// Values per point of an array of `extent` in dimension d.
inline std::size_t extent_size(Extent e, std::size_t d) {
    return e == Extent::d ? d : e == Extent::one ? 1 : e == Extent::two ? 2 : 2 * d;
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
TermPoints<T> term_points(const LossInputs<T>& in, int t) {
    const TermInfo<T>& info = term_table<T>()[t];
    TermPoints<T> tp;
    tp.x = in.*info.x;
    tp.n = in.*info.num;
    tp.w = in.*info.weight;
    const std::size_t given = in.*info.count;
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
    std::size_t n = 0;
    for (int t = 0; t < kNumTerms; ++t) n += in.*term_table<T>()[t].num;
    return 2 * n;
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

/// Every array of term t (at most kMaxTermArrays), in the table's order (the order check_finite
/// reports them in); returns how many.
template <typename T>
int term_arrays(const LossInputs<T>& in, int t, std::size_t d, TermArray<T>* out) {
    const std::size_t n = in.*term_table<T>()[t].num;
    int k = 0;
    for (int a = 0; a < num_arrays<T>(); ++a) {
        const ArrayInfo<T>& info = array_table<T>()[a];
        if (info.term != t) continue;
        out[k++] = {in.*info.array, n * extent_size(info.extent, d), info.name, info.required};
    }
    return k;
}

/// Calls f(name, values, count) for every scalar of `in` that check_finite scans besides the
/// arrays: the constants that stand in for arrays (the table's order), then each term's weight.
template <typename T, typename F>
void for_each_scalar(const LossInputs<T>& in, F&& f) {
    for (int a = 0; a < num_arrays<T>(); ++a) {
        const ArrayInfo<T>& info = array_table<T>()[a];
        if (info.constant == Constant::real) f(info.name, &(in.*info.real_const), 1);
        if (info.constant == Constant::complex) f(info.name, in.*info.complex_const, 2);
    }
    for (int t = 0; t < kNumTerms; ++t) {
        const TermInfo<T>& info = term_table<T>()[t];
        f(info.weight_name, &(in.*info.weight), 1);
    }
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
