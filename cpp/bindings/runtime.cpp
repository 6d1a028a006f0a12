// The runtime: DeviceArray, the thread count, the CPU's kernel sets, the CUDA devices, and host
// work on the engine's threads (cholesky_solves).
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
    const char* name = trsv.name();
    const char* blas_type = std::is_same<T, float>::value ? "cython_blas_s *" : "cython_blas_d *";
    if (name == nullptr || std::strncmp(name, "void (char *, char *, char *, int *, ", 37) != 0 ||
        std::strstr(name, blas_type) == nullptr)
        throw py::value_error(std::string("trsv: expected scipy.linalg.cython_blas.__pyx_capi__['") +
                              (std::is_same<T, float>::value ? "strsv" : "dtrsv") + "'] for x of dtype " +
                              dtype_name<T>() + ", got a capsule named " + (name ? name : "(none)"));
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
        if (!py::isinstance<py::capsule>(trsv))
            throw py::value_error("trsv: expected a PyCapsule of scipy.linalg.cython_blas (strsv or dtrsv)");
        if (!py::isinstance<py::list>(factors) || !py::isinstance<py::list>(starts))
            throw py::value_error("factors, starts: expected lists");
        if (!py::array::check_(x))
            throw py::value_error("x: expected a NumPy array");
        auto arr = py::reinterpret_borrow<py::array>(x);
        if (arr.ndim() != 1 || !(arr.flags() & py::array::c_style) || !arr.writeable())
            throw py::value_error("x: expected a writable contiguous 1-D array");
        auto c = py::reinterpret_borrow<py::capsule>(trsv);
        auto f = py::reinterpret_borrow<py::list>(factors), s = py::reinterpret_borrow<py::list>(starts);
        if (py::isinstance<py::array_t<float>>(x))
            cholesky_solves<float>(c, f, s, arr);
        else if (py::isinstance<py::array_t<double>>(x))
            cholesky_solves<double>(c, f, s, arr);
        else
            throw py::value_error("x: expected dtype float32 or float64, got " + std::string(py::str(arr.dtype())));
    }, py::arg("trsv"), py::arg("factors"), py::arg("starts"), py::arg("x"),
       "x[s_j : s_j + n_j] <- (U_jᵀ U_j)⁻¹ x[s_j : s_j + n_j] in place for every upper Cholesky factor "
       "U_j of `factors` (square, Fortran-ordered, the dtype of x) at its start s_j of `starts`, by two "
       "calls of `trsv` (scipy.linalg.cython_blas.__pyx_capi__['strsv'] for float32, 'dtrsv' for "
       "float64) per block, the blocks spread over the engine's threads (helmpinn::parallel_tasks) with "
       "the GIL released. The blocks must not overlap; x outside them is left as it is.");
}

}  // namespace bindings
}  // namespace helmpinn
