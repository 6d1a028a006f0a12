// Checking arrays at the Python border: dtype, shape, contiguity, writability, overlap.
// Every failure raises TypeError (dtype, not an array) or ValueError (shape, layout) with a
// message that names the argument and what was expected.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "helmpinn/workspace.hpp"

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
    if (!arr.dtype().equal(py::dtype::of<T>()))
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

/// A Python float as the workspace's T. A finite value beyond T's range (1e39 for float32)
/// raises ValueError saying so, instead of becoming Inf (later reported as "NaN or Inf").
template <typename T>
T to_scalar(double v, const char* name) {
    const T t = T(v);
    if (std::isfinite(v) && !std::isfinite(t)) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s: %.9g overflows %s (largest finite value %.9g)", name,
                      v, dtype_name<T>(), double(std::numeric_limits<T>::max()));
        throw py::value_error(buf);
    }
    return t;
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

/// The caches a workspace call writes (WorkspaceBuffers), as flat arrays named like the
/// Workspace properties that show them; the gradient accumulator `grad` only when with_grad.
template <typename T>
std::vector<std::pair<Checked<T>, std::string>> workspace_caches(const Workspace<T>& ws,
                                                                   bool with_grad) {
    const ModelSpec& sp = ws.spec();
    const auto& b = ws.buffers();
    const py::ssize_t B = py::ssize_t(ws.batch_size()), S = b.max_streams, d = sp.in_dim;
    std::vector<std::pair<Checked<T>, std::string>> out;
    auto add = [&](T* p, py::ssize_t n, std::string name) {
        Checked<T> c;
        c.ptr = p;
        c.shape = {n};
        out.emplace_back(c, std::move(name));
    };
    add(b.x_input, B * d, "x_input");
    add(b.features, S * B * 2 * sp.ff_dim, "fourier_streams");
    for (int l = 0; l <= sp.num_hidden_layers; ++l)
        add(b.z[l], S * B * sp.layer_out(l), "z_streams[" + std::to_string(l) + "]");
    for (int l = 0; l < sp.num_hidden_layers; ++l)
        add(b.h[l], S * B * sp.hidden_dim, "h_streams[" + std::to_string(l) + "]");
    add(b.du_dx, B * d * 2, "du_dx");
    add(b.d2u_dx2, B * 2, "d2u_dx2");
    if (with_grad) add(b.grad, py::ssize_t(sp.num_params()), "grad");
    return out;
}

/// Raises ValueError if array `arr` (argument `name`) shares memory with one of the workspace's
/// caches (workspace_caches): a call would overwrite its own input or output while running.
template <typename T>
void check_no_cache_overlap(const Workspace<T>& ws, const Checked<T>& arr, const char* name,
                            bool with_grad) {
    if (!arr.ptr || arr.size() == 0) return;
    for (const auto& [cache, cache_name] : workspace_caches(ws, with_grad))
        if (cache.ptr && arr.begin() < cache.end() && cache.begin() < arr.end())
            throw py::value_error(std::string(name) +
                                  ": must not share memory with the workspace's own cache "
                                  "Workspace." + cache_name + " (which the call overwrites); "
                                  "pass a separate array or a copy");
}

}  // namespace bindings
}  // namespace helmpinn
