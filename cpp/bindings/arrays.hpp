// Checking arrays at the Python border: dtype, shape, contiguity, writability, overlap.
// Every failure raises TypeError (dtype, not an array) or ValueError (shape, layout) with a
// message that names the argument and what was expected.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

namespace helmpinn {
namespace bindings {

namespace py = pybind11;

/// A shape pattern: -1 matches any extent.
using Shape = std::vector<py::ssize_t>;

inline std::string shape_str(const Shape& s, const char* any = "N") {
    std::string out = "(";
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (i) out += ", ";
        out += s[i] < 0 ? std::string(any) : std::to_string(s[i]);
    }
    if (s.size() == 1) out += ",";
    return out + ")";
}

template <typename T>
const char* dtype_name() {
    return sizeof(T) == 4 ? "float32" : "float64";
}

/// A checked host array: its data pointer and actual shape.
template <typename T>
struct Checked {
    T* ptr = nullptr;
    Shape shape;
    py::ssize_t size() const {
        py::ssize_t n = 1;
        for (auto e : shape) n *= e;
        return n;
    }
    std::uintptr_t begin() const { return reinterpret_cast<std::uintptr_t>(ptr); }
    std::uintptr_t end() const { return begin() + std::uintptr_t(size()) * sizeof(T); }
};

/// Checks that `obj` is a C-contiguous numpy array of dtype T matching `pattern`
/// (writable when `writable`). Returns its pointer and shape.
template <typename T>
Checked<T> check_array(py::handle obj, const char* name, const Shape& pattern, bool writable,
                       const char* dims_doc = nullptr) {
    const std::string want = std::string(dtype_name<T>()) + " array of shape " +
                             (dims_doc ? std::string(dims_doc) : shape_str(pattern));
    if (!py::isinstance<py::array>(obj))
        throw py::type_error(std::string(name) + ": expected a numpy " + want + ", got " +
                             std::string(py::str(py::type::of(obj).attr("__name__"))));
    auto arr = py::reinterpret_borrow<py::array>(obj);
    if (!arr.dtype().is(py::dtype::of<T>()))
        throw py::type_error(std::string(name) + ": expected a " + want + ", got dtype " +
                             std::string(py::str(arr.dtype())));
    Shape shape(arr.shape(), arr.shape() + arr.ndim());
    bool ok = shape.size() == pattern.size();
    for (std::size_t i = 0; ok && i < shape.size(); ++i)
        ok = pattern[i] < 0 || pattern[i] == shape[i];
    if (!ok)
        throw py::value_error(std::string(name) + ": expected a " + want + ", got shape " +
                              shape_str(shape));
    if (!(arr.flags() & py::array::c_style))
        throw py::value_error(std::string(name) + ": must be C-contiguous (use np.ascontiguousarray)");
    if (writable && !arr.writeable())
        throw py::value_error(std::string(name) + ": output array must be writable");
    Checked<T> out;
    out.ptr = static_cast<T*>(const_cast<void*>(arr.data()));
    out.shape = std::move(shape);
    return out;
}

/// Raises ValueError if output `out` overlaps input `in`.
template <typename T>
void check_no_overlap(const Checked<T>& out, const char* out_name, const Checked<T>& in,
                      const char* in_name) {
    if (!out.ptr || !in.ptr || out.size() == 0 || in.size() == 0) return;
    if (out.begin() < in.end() && in.begin() < out.end())
        throw py::value_error(std::string(out_name) + ": output must not share memory with " +
                              in_name);
}

}  // namespace bindings
}  // namespace helmpinn
