// The runtime: DeviceArray, the thread count, the CPU's kernel sets, the CUDA devices, and host
// work on the engine's threads (cholesky_solves, gram_blocks, product_blocks).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common.hpp"

namespace helmpinn {
namespace bindings {

namespace {

// SciPy's scipy.linalg.cython_blas ?trsv: the Fortran calling convention, every argument by
// pointer. The capsule's name is the C signature Cython gives it.
template <typename T>
using Trsv = void (*)(char*, char*, char*, int*, T*, int*, T*, int*);

// SciPy's scipy.linalg.cython_blas ?syrk (uplo, trans, n, k, alpha, a, lda, beta, c, ldc).
template <typename T>
using Syrk = void (*)(char*, char*, int*, int*, T*, T*, int*, T*, T*, int*);

// A capsule of scipy.linalg.cython_blas for the routine `routine` (its s- or d- form, by T), told
// by the C signature Cython names it with, argument by argument: `kinds` has 'c' for char *,
// 'i' for int * and 'T' for a pointer to Cython's typedef of T (cython_blas_s or _d).
template <typename T>
void check_blas_capsule(py::capsule cap, const char* routine, const std::string& kinds, const char* argument) {
    const char* name = cap.name();
    const std::string real = std::is_same<T, float>::value ? "cython_blas_s *" : "cython_blas_d *";
    bool ok = name != nullptr;
    std::string sig = ok ? name : "";
    const std::string head = "void (";
    ok = ok && sig.compare(0, head.size(), head) == 0 && sig.size() > head.size() && sig.back() == ')';
    std::size_t at = head.size();
    for (std::size_t k = 0; ok && k < kinds.size(); ++k) {
        const std::size_t end = std::min(sig.find(", ", at), sig.size() - 1);
        const std::string arg = sig.substr(at, end - at);
        if (kinds[k] == 'c')
            ok = arg == "char *";
        else if (kinds[k] == 'i')
            ok = arg == "int *";
        else
            ok = arg.size() >= real.size() && arg.compare(arg.size() - real.size(), real.size(), real) == 0;
        ok = ok && (k + 1 < kinds.size() ? end < sig.size() - 1 : end == sig.size() - 1);
        at = end + 2;
    }
    if (!ok)
        throw py::value_error(std::string(argument) + ": expected scipy.linalg.cython_blas.__pyx_capi__['" +
                              (std::is_same<T, float>::value ? "s" : "d") + routine + "'] for arrays of dtype " +
                              dtype_name<T>() + ", got a capsule named " + (name ? name : "(none)"));
}

// SciPy's scipy.linalg.cython_blas ?gemm (transa, transb, m, n, k, alpha, a, lda, b, ldb, beta,
// c, ldc).
template <typename T>
using Gemm = void (*)(char*, char*, int*, int*, int*, T*, T*, int*, T*, int*, T*, T*, int*);

template <typename T>
struct CholeskySolves {
    Trsv<T> trsv = nullptr;
    std::vector<T*> factors, blocks;
    std::vector<int> sizes;
};

// Block j: x_j <- (U_jᵀ U_j)⁻¹ x_j by two triangular solves in place (Uᵀ y = x, then U x = y).
template <typename T>
void cholesky_solve_task(std::int64_t j, void* context) {
    auto& c = *static_cast<CholeskySolves<T>*>(context);
    int n = c.sizes[std::size_t(j)], one = 1;
    if (n == 0) return;
    char upper = 'U', trans = 'T', no_trans = 'N', non_unit = 'N';
    c.trsv(&upper, &trans, &non_unit, &n, c.factors[std::size_t(j)], &n, c.blocks[std::size_t(j)], &one);
    c.trsv(&upper, &no_trans, &non_unit, &n, c.factors[std::size_t(j)], &n, c.blocks[std::size_t(j)], &one);
}

template <typename T>
void cholesky_solves(py::capsule trsv, py::list factors, py::list starts, py::array x) {
    check_blas_capsule<T>(trsv, "trsv", "ccciTiTi", "trsv");
    if (py::len(starts) != py::len(factors))
        throw py::value_error("starts: expected one start per factor (" + std::to_string(py::len(factors)) +
                              "), got " + std::to_string(py::len(starts)));
    const auto length = std::int64_t(x.shape(0));
    CholeskySolves<T> c;
    c.trsv = reinterpret_cast<Trsv<T>>(trsv.get_pointer());
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (std::size_t j = 0; j < py::len(factors); ++j) {
        const std::string which = "[" + std::to_string(j) + "]";
        py::handle f = factors[j];
        if (!py::isinstance<py::array_t<T>>(f))
            throw py::value_error("factors" + which + ": expected a NumPy array of dtype " + dtype_name<T>() +
                                  " (the dtype of x)");
        auto a = py::reinterpret_borrow<py::array>(f);
        if (a.ndim() != 2 || a.shape(0) != a.shape(1) ||
            !(a.flags() & py::array::f_style) || a.shape(0) > 0x7fffffff)
            throw py::value_error("factors" + which + ": expected a square Fortran-ordered array of dtype " +
                                  std::string(dtype_name<T>()) + ", got shape " + shape_str(Shape(a.shape(), a.shape() + a.ndim())) +
                                  " of dtype " + std::string(py::str(a.dtype())));
        py::handle sj = starts[j];
        if (!py::isinstance<py::int_>(sj) || py::isinstance<py::bool_>(sj))
            throw py::value_error("starts" + which + ": expected an int, got " + std::string(py::repr(sj)));
        const std::int64_t start = sj.cast<std::int64_t>(), n = a.shape(0);
        if (start < 0 || start > length - n)
            throw py::value_error("starts" + which + ": block [" + std::to_string(start) + ", " +
                                  std::to_string(start + n) + ") is not inside x of length " + std::to_string(length));
        ranges.emplace_back(start, n);
        c.factors.push_back(static_cast<T*>(a.mutable_data()));
        c.blocks.push_back(static_cast<T*>(x.mutable_data()) + start);
        c.sizes.push_back(int(n));
    }
    std::sort(ranges.begin(), ranges.end());
    for (std::size_t k = 1; k < ranges.size(); ++k)
        if (ranges[k - 1].first + ranges[k - 1].second > ranges[k].first)
            throw py::value_error("starts: the blocks overlap (at " + std::to_string(ranges[k].first) + ")");
    py::gil_scoped_release release;
    helmpinn::parallel_tasks(std::int64_t(c.sizes.size()), &cholesky_solve_task<T>, &c);
}

// The outputs [P_j, K_j] of the blocks' tasks: each a writable Fortran-ordered array of T of
// its shape, no two sharing memory (the tasks write them in parallel) and none among the inputs'
// bytes (`read`: each input's [first, last); another thread may still be reading them); their
// data pointers.
template <typename T>
std::vector<T*> checked_outputs(py::list outs, const std::vector<std::pair<py::ssize_t, py::ssize_t>>& shapes,
                                const std::vector<std::pair<const char*, const char*>>& read,
                                const std::string& argument) {
    if (py::len(outs) != shapes.size())
        throw py::value_error(argument + ": expected one output per block (" + std::to_string(shapes.size()) +
                              "), got " + std::to_string(py::len(outs)));
    std::vector<T*> data;
    std::vector<std::pair<const char*, const char*>> written;
    for (std::size_t j = 0; j < shapes.size(); ++j) {
        const std::string which = argument + "[" + std::to_string(j) + "]";
        py::handle o = outs[j];
        if (!py::isinstance<py::array_t<T>>(o))
            throw py::value_error(which + ": expected a NumPy array of dtype " + dtype_name<T>() + " (the blocks' dtype)");
        auto G = py::reinterpret_borrow<py::array>(o);
        const auto rows = shapes[j].first, cols = shapes[j].second;
        if (G.ndim() != 2 || G.shape(0) != rows || G.shape(1) != cols || !(G.flags() & py::array::f_style) ||
            !G.writeable())
            throw py::value_error(which + ": expected a writable Fortran-ordered array of shape (" +
                                  std::to_string(rows) + ", " + std::to_string(cols) + "), got shape " +
                                  shape_str(Shape(G.shape(), G.shape() + G.ndim())));
        auto* out = static_cast<T*>(G.mutable_data());
        const char* lo = reinterpret_cast<const char*>(out);
        const char* hi = reinterpret_cast<const char*>(out + rows * cols);
        for (const auto& r : read)
            if (lo < hi && r.first < r.second && lo < r.second && r.first < hi)
                throw py::value_error(which + ": shares memory with an input block");
        written.emplace_back(lo, hi);
        data.push_back(out);
    }
    std::sort(written.begin(), written.end());
    for (std::size_t k = 1; k < written.size(); ++k)
        if (written[k - 1].second > written[k].first && written[k].first != written[k].second)
            throw py::value_error(argument + ": two outputs share memory (the blocks are written in parallel)");
    return data;
}

// The bytes of a C-contiguous array.
inline std::pair<const char*, const char*> bytes_of(const py::array& a) {
    const char* p = static_cast<const char*>(a.data());
    return {p, p + a.nbytes()};
}

// blocks[j] of `argument`: a C-contiguous 2-D array of T whose sizes fit an int.
template <typename T>
py::array checked_block(py::handle b, const std::string& which) {
    if (!py::isinstance<py::array_t<T>>(b))
        throw py::value_error(which + ": expected a NumPy array of dtype " + dtype_name<T>());
    auto J = py::reinterpret_borrow<py::array>(b);
    if (J.ndim() != 2 || !(J.flags() & py::array::c_style) || J.shape(0) > 0x7fffffff || J.shape(1) > 0x7fffffff)
        throw py::value_error(which + ": expected a C-contiguous 2-D array, got shape " +
                              shape_str(Shape(J.shape(), J.shape() + J.ndim())));
    return J;
}

template <typename T>
struct GramBlocks {
    Syrk<T> syrk = nullptr;
    std::vector<const T*> blocks;
    std::vector<T*> grams;
    std::vector<int> rows, cols;
};

// Block j: the upper triangle of G_j <- J_jᵀ J_j. J_j [R, P] C-ordered is the Fortran matrix
// A = J_jᵀ [P, R] (lda = P), so ?syrk's C = A Aᵀ with trans = 'N'.
template <typename T>
void gram_block_task(std::int64_t j, void* context) {
    auto& c = *static_cast<GramBlocks<T>*>(context);
    const auto i = std::size_t(j);
    int n = c.cols[i], k = c.rows[i], lda = std::max(n, 1);
    if (n == 0) return;
    char upper = 'U', no_trans = 'N';
    T one = 1, zero = 0;
    c.syrk(&upper, &no_trans, &n, &k, &one, const_cast<T*>(c.blocks[i]), &lda, &zero, c.grams[i], &lda);
}

template <typename T>
void gram_blocks(py::capsule syrk, py::list blocks, py::list grams) {
    check_blas_capsule<T>(syrk, "syrk", "cciiTTiTTi", "syrk");
    GramBlocks<T> c;
    c.syrk = reinterpret_cast<Syrk<T>>(syrk.get_pointer());
    std::vector<std::pair<py::ssize_t, py::ssize_t>> shapes;
    std::vector<std::pair<const char*, const char*>> read;
    for (std::size_t j = 0; j < py::len(blocks); ++j) {
        auto J = checked_block<T>(blocks[j], "blocks[" + std::to_string(j) + "]");
        shapes.emplace_back(J.shape(1), J.shape(1));
        read.push_back(bytes_of(J));
        c.blocks.push_back(static_cast<const T*>(J.data()));
        c.rows.push_back(int(J.shape(0)));
        c.cols.push_back(int(J.shape(1)));
    }
    c.grams = checked_outputs<T>(grams, shapes, read, "grams");
    py::gil_scoped_release release;
    helmpinn::parallel_tasks(std::int64_t(c.grams.size()), &gram_block_task<T>, &c);
}

template <typename T>
struct ProductBlocks {
    Gemm<T> gemm = nullptr;
    std::vector<const T*> a, b;
    std::vector<T*> out;
    std::vector<int> rows, cols_a, cols_b;
};

// Block j: out_j <- a_jᵀ b_j. a_j [m, P] and b_j [m, K] C-ordered are the Fortran matrices
// A = a_jᵀ [P, m] and B = b_jᵀ [K, m], so ?gemm's C = A Bᵀ with transa = 'N', transb = 'T'.
template <typename T>
void product_block_task(std::int64_t j, void* context) {
    auto& c = *static_cast<ProductBlocks<T>*>(context);
    const auto i = std::size_t(j);
    int m = c.cols_a[i], n = c.cols_b[i], k = c.rows[i], lda = std::max(m, 1), ldb = std::max(n, 1);
    if (m == 0 || n == 0) return;
    char no_trans = 'N', trans = 'T';
    T one = 1, zero = 0;
    c.gemm(&no_trans, &trans, &m, &n, &k, &one, const_cast<T*>(c.a[i]), &lda, const_cast<T*>(c.b[i]), &ldb, &zero,
           c.out[i], &lda);
}

template <typename T>
void product_blocks(py::capsule gemm, py::list a, py::list b, py::list out) {
    check_blas_capsule<T>(gemm, "gemm", "cciiiTTiTiTTi", "gemm");
    if (py::len(b) != py::len(a))
        throw py::value_error("b: expected one block per block of a (" + std::to_string(py::len(a)) + "), got " +
                              std::to_string(py::len(b)));
    ProductBlocks<T> c;
    c.gemm = reinterpret_cast<Gemm<T>>(gemm.get_pointer());
    std::vector<std::pair<py::ssize_t, py::ssize_t>> shapes;
    std::vector<std::pair<const char*, const char*>> read;
    for (std::size_t j = 0; j < py::len(a); ++j) {
        const std::string which = "[" + std::to_string(j) + "]";
        auto A = checked_block<T>(a[j], "a" + which), B = checked_block<T>(b[j], "b" + which);
        if (B.shape(0) != A.shape(0))
            throw py::value_error("b" + which + ": expected the rows of a" + which + " (" + std::to_string(A.shape(0)) +
                                  "), got " + std::to_string(B.shape(0)));
        shapes.emplace_back(A.shape(1), B.shape(1));
        read.push_back(bytes_of(A));
        read.push_back(bytes_of(B));
        c.a.push_back(static_cast<const T*>(A.data()));
        c.b.push_back(static_cast<const T*>(B.data()));
        c.rows.push_back(int(A.shape(0)));
        c.cols_a.push_back(int(A.shape(1)));
        c.cols_b.push_back(int(B.shape(1)));
    }
    c.out = checked_outputs<T>(out, shapes, read, "out");
    py::gil_scoped_release release;
    helmpinn::parallel_tasks(std::int64_t(c.out.size()), &product_block_task<T>, &c);
}

// The argument `name`: a capsule of scipy.linalg.cython_blas (whose routine the typed functions
// above check), else ValueError naming it and the expected `routines`.
py::capsule blas_argument(py::handle h, const char* name, const char* routines) {
    if (!py::isinstance<py::capsule>(h))
        throw py::value_error(std::string(name) + ": expected a PyCapsule of scipy.linalg.cython_blas (" +
                              routines + ")");
    return py::reinterpret_borrow<py::capsule>(h);
}

// The argument `name`: a list, else ValueError naming it.
py::list list_argument(py::handle h, const char* name) {
    if (!py::isinstance<py::list>(h))
        throw py::value_error(std::string(name) + ": expected a list, got " + std::string(py::str(py::type::handle_of(h))));
    return py::reinterpret_borrow<py::list>(h);
}

// f(T{}) with T the element type of the array `first` (float or double), else ValueError naming `what`.
template <typename F>
void by_dtype(py::handle first, const std::string& what, F&& f) {
    if (py::isinstance<py::array_t<float>>(first))
        f(float{});
    else if (py::isinstance<py::array_t<double>>(first))
        f(double{});
    else if (py::array::check_(first))
        throw py::value_error(what + ": expected dtype float32 or float64, got " +
                              std::string(py::str(py::reinterpret_borrow<py::array>(first).dtype())));
    else
        throw py::value_error(what + ": expected a NumPy array of dtype float32 or float64");
}

}  // namespace

void register_runtime(py::module_& mod) {
    bindings::register_device_array(mod);

    mod.def("has_openmp", &helmpinn::has_openmp);
    mod.def("has_cuda", &helmpinn::has_cuda);
    mod.def("cuda_device_count", &helmpinn::cuda_device_count);
    mod.def("cuda_device_error", []() -> py::object {
        const std::string e = helmpinn::cuda_device_error();
        return e.empty() ? py::object(py::none()) : py::object(py::str(e));
    }, "Why cuda_device_count() is 0 (the CUDA runtime's error), or None when there are devices.");
    mod.def("get_num_threads", &helmpinn::get_num_threads);
    mod.def("set_num_threads", &helmpinn::set_num_threads, py::arg("n"));
    mod.def("cpu_isa", &helmpinn::cpu_isa);
    mod.def("cpu_kernel_sets", [] {
        py::list out;
        std::string sets = helmpinn::cpu_kernel_sets();
        for (std::size_t a = 0, b; a <= sets.size(); a = b + 1) {
            b = sets.find(',', a);
            if (b == std::string::npos) b = sets.size();
            out.append(sets.substr(a, b - a));
        }
        return out;
    });
    mod.def("cholesky_solves", [](py::object trsv, py::object factors, py::object starts, py::object x) {
        auto c = blas_argument(trsv, "trsv", "strsv or dtrsv");
        auto f = list_argument(factors, "factors"), s = list_argument(starts, "starts");
        if (!py::array::check_(x))
            throw py::value_error("x: expected a NumPy array");
        auto arr = py::reinterpret_borrow<py::array>(x);
        if (arr.ndim() != 1 || !(arr.flags() & py::array::c_style) || !arr.writeable())
            throw py::value_error("x: expected a writable contiguous 1-D array");
        by_dtype(x, "x", [&](auto t) { cholesky_solves<decltype(t)>(c, f, s, arr); });
    }, py::arg("trsv"), py::arg("factors"), py::arg("starts"), py::arg("x"),
       "x[s_j : s_j + n_j] <- (U_jᵀ U_j)⁻¹ x[s_j : s_j + n_j] in place for every upper Cholesky factor "
       "U_j of `factors` (square, Fortran-ordered, the dtype of x) at its start s_j of `starts`, by two "
       "calls of `trsv` (scipy.linalg.cython_blas.__pyx_capi__['strsv'] for float32, 'dtrsv' for "
       "float64) per block, the blocks spread over the engine's threads (helmpinn::parallel_tasks) with "
       "the GIL released. The blocks must not overlap; x outside them is left as it is.");
    mod.def("gram_blocks", [](py::object syrk, py::object blocks, py::object grams) {
        auto c = blas_argument(syrk, "syrk", "ssyrk or dsyrk");
        auto b = list_argument(blocks, "blocks"), g = list_argument(grams, "grams");
        if (py::len(b) == 0) {
            if (py::len(g) != 0)
                throw py::value_error("grams: expected one output per block (0), got " + std::to_string(py::len(g)));
            return;
        }
        by_dtype(b[0], "blocks[0]", [&](auto t) { gram_blocks<decltype(t)>(c, b, g); });
    }, py::arg("syrk"), py::arg("blocks"), py::arg("grams"),
       "grams[j] <- the upper triangle of blocks[j]ᵀ blocks[j] for every C-contiguous block [R_j, P_j] "
       "(one dtype), into its Fortran-ordered output [P_j, P_j] (the strict lower triangle left as it is), "
       "by one call of `syrk` (scipy.linalg.cython_blas.__pyx_capi__['ssyrk'] for float32, 'dsyrk' for "
       "float64) a block, the blocks spread over the engine's threads (helmpinn::parallel_tasks) with the "
       "GIL released: call it with the BLAS limited to one thread. The outputs must not share memory.");
    mod.def("product_blocks", [](py::object gemm, py::object a, py::object b, py::object out) {
        auto c = blas_argument(gemm, "gemm", "sgemm or dgemm");
        auto la = list_argument(a, "a"), lb = list_argument(b, "b"), lo = list_argument(out, "out");
        if (py::len(la) == 0) {
            if (py::len(lb) != 0 || py::len(lo) != 0)
                throw py::value_error("b, out: expected one per block of a (0)");
            return;
        }
        by_dtype(la[0], "a[0]", [&](auto t) { product_blocks<decltype(t)>(c, la, lb, lo); });
    }, py::arg("gemm"), py::arg("a"), py::arg("b"), py::arg("out"),
       "out[j] <- a[j]ᵀ b[j] for every pair of C-contiguous blocks a[j] [m_j, P_j] and b[j] [m_j, K_j] "
       "(one dtype), into its Fortran-ordered output [P_j, K_j], by one call of `gemm` "
       "(scipy.linalg.cython_blas.__pyx_capi__['sgemm'] for float32, 'dgemm' for float64) a block, the "
       "blocks spread over the engine's threads (helmpinn::parallel_tasks) with the GIL released: call it "
       "with the BLAS limited to one thread. The outputs must not share memory.");
}

}  // namespace bindings
}  // namespace helmpinn
