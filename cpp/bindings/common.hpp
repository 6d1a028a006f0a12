// What every part of helmpinn._core shares: the guard against objects made by __new__ without
// __init__, the array spaces (host / CUDA device) the calls are written over, and the functions
// that register each part of the module (module.cpp calls them in order).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <string>
#include <utility>

#include "arrays.hpp"
#include "device_arrays.hpp"
#include "guard.hpp"
#include "helmpinn/helmpinn.hpp"

namespace helmpinn {
namespace bindings {

namespace py = pybind11;

/// Registers one part of the module (each defined in the file of its name).
void register_spec(py::module_& mod);        // ModelSpec, LossBreakdown, loss_terms()
void register_workspace(py::module_& mod);   // Workspace
void register_primitives(py::module_& mod);  // the seed primitives
void register_runtime(py::module_& mod);     // DeviceArray, threads, CPU and CUDA queries

// Where a call's arrays live. Host: NumPy arrays (arrays.hpp), computed on the calling thread.
// Device: __cuda_array_interface__ / DLPack arrays (device_arrays.hpp) on the workspace's GPU
// (or a seed primitive's), ordered on the caller's stream. The workspace calls and the seed
// primitives are written once over it.
template <typename T>
struct HostSpace {
    static constexpr Device device = Device::cpu;
    Checked<T> check(py::handle o, const char* name, const Shape& pattern, bool writable,
                     const char* doc = nullptr) {
        return check_array<T>(o, name, pattern, writable, doc);
    }
    py::object allocate(const Shape& shape) { return py::array_t<T>(shape); }
    bool is_array(py::handle o) {
        return py::isinstance<py::array>(o) && py::reinterpret_borrow<py::array>(o).ndim() > 0;
    }
    void* stream() { return nullptr; }
    void ready() {}
};

template <typename T>
struct DeviceSpace {
    static constexpr Device device = Device::cuda;
    CallContext ctx;
    DeviceSpace(int device, py::handle stream) {
        ctx.device = device;
        ctx.stream = stream_handle(stream);
    }
    Checked<T> check(py::handle o, const char* name, const Shape& pattern, bool writable,
                     const char* doc = nullptr) {
        return check_device_array<T>(o, name, pattern, writable, ctx, doc);
    }
    py::object allocate(const Shape& shape) {
        return py::cast(DeviceArray::allocate(shape, int(sizeof(T)), ctx.device));
    }
    bool is_array(py::handle o) { return looks_like_array(o); }
    void* stream() { return ctx.stream_ptr(); }
    void ready() { ctx.wait_for_producers(); }  // after every input producer's stream
};

inline bool given(const py::object& o) { return !o.is_none(); }

/// Whether host array `a` (argument `name`) is float32 (true) or float64 (false); TypeError
/// for anything else.
inline bool first_is_f32(py::handle a, const char* name) {
    if (!py::isinstance<py::array>(a))
        throw py::type_error(std::string(name) + ": expected a numpy float32 or float64 array, got " +
                             std::string(py::str(py::type::of(a).attr("__name__"))));
    auto dt = py::reinterpret_borrow<py::array>(a).dtype();
    if (dt.equal(py::dtype::of<float>())) return true;
    if (dt.equal(py::dtype::of<double>())) return false;
    throw py::type_error(std::string(name) + ": expected a float32 or float64 array, got dtype " +
                         std::string(py::str(dt)));
}

}  // namespace bindings
}  // namespace helmpinn

