// Device arrays at the Python border, for Workspaces on device='cuda' and for the seed
// primitives called on device arrays.
//
// An argument is taken zero-copy from any object that exposes __cuda_array_interface__ (CuPy,
// PyTorch, Numba, helmpinn's own DeviceArray) or DLPack (__dlpack__ / __dlpack_device__, or a
// "dltensor" capsule). Each is checked before any work, like the host arrays of arrays.hpp:
// dtype (TypeError), shape, C-contiguity, writability of outputs, and that the pointer really
// is CUDA device (or managed) memory on the call's device (helmpinn::pointer_info): the
// Workspace's, or that of a primitive's first array (cuda_array_device). All with a message
// that names the argument (ValueError).
//
// Streams. The caller's `stream=` (None/0 = the legacy default stream, an int handle, or an
// object with .cuda_stream (PyTorch), .ptr (CuPy), .handle (Numba) or __cuda_stream__) is the
// stream the work is enqueued on. DLPack is preferred when an object offers both: the producer
// is handed our stream (the protocol makes it order its own work before it); PyTorch's
// __cuda_array_interface__ names no stream, so work pending on torch's current stream would not
// be waited for. A __cuda_array_interface__ (helmpinn's DeviceArray, Numba; CuPy's when DLPack
// fails) that names a producer stream gets an event recorded on that stream and waited on by
// ours, with the call's device current (helmpinn::stream_wait).
//
// This file parses and checks; it includes no CUDA header. Everything that asks or tells the
// CUDA runtime something (device scope, pointer queries, allocation, copies, stream ordering)
// is the core's runtime API (helmpinn/runtime.hpp), which in a build without CUDA throws
// "built without CUDA support": a primitive called on a CUDA array gets that error from
// cuda_array_device; the rest is unreachable then, since no CUDA Workspace can be made.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "guard.hpp"  // first: the casters of the classes bound here
#include "arrays.hpp"
#include "dlpack_abi.hpp"
#include "helmpinn/runtime.hpp"

namespace helmpinn {
namespace bindings {

namespace py = pybind11;

inline std::string type_name(py::handle obj) {
    py::handle t = py::type::handle_of(obj);
    std::string mod;
    if (py::hasattr(t, "__module__")) mod = py::str(t.attr("__module__"));
    std::string name = py::str(t.attr("__name__"));
    return mod.empty() || mod == "builtins" ? name : mod + "." + name;
}

/// The numeric handle of a stream argument (0 = the legacy default stream).
inline std::uintptr_t stream_handle(py::handle s) {
    if (s.is_none()) return 0;
    py::object v;
    if (py::isinstance<py::int_>(s)) {
        v = py::reinterpret_borrow<py::object>(s);
    } else if (py::hasattr(s, "__cuda_stream__")) {
        py::object t = s.attr("__cuda_stream__")();
        v = py::reinterpret_borrow<py::tuple>(t)[1];
    } else if (py::hasattr(s, "cuda_stream")) {  // torch.cuda.Stream
        v = s.attr("cuda_stream");
    } else if (py::hasattr(s, "ptr")) {          // cupy.cuda.Stream
        v = s.attr("ptr");
    } else if (py::hasattr(s, "handle")) {       // numba stream: ctypes c_void_p
        v = s.attr("handle");
        if (py::hasattr(v, "value")) v = v.attr("value");
    } else {
        throw py::type_error("stream: expected None, an int CUDA stream handle, or a stream object "
                             "(.cuda_stream, .ptr, .handle or __cuda_stream__), got " + type_name(s));
    }
    if (v.is_none()) return 0;
    long long h = 0;
    try {
        h = v.cast<long long>();
    } catch (const py::cast_error&) {
        throw py::type_error("stream: the stream handle is not an integer (" + type_name(v) + ")");
    }
    if (h < 0) throw py::value_error("stream: a CUDA stream handle must be >= 0, got " + std::to_string(h));
    return static_cast<std::uintptr_t>(h);
}

/// One call's device context: the workspace's device, our stream, the producer streams named
/// by the inputs' __cuda_array_interface__, and the DLPack capsules kept alive for the call.
struct CallContext {
    int device = 0;
    std::uintptr_t stream = 0;
    /// For messages: what fixes the call's device (a Workspace, or a seed primitive's first
    /// array), and what to tell the caller who passed a NumPy array instead.
    std::string owner = "the Workspace";
    std::string host_hint = "this Workspace is on device='cuda': pass a CuPy/PyTorch/Numba "
                            "device array (or use a CPU Workspace)";
    std::vector<std::uintptr_t> producers;
    std::vector<py::object> keep;

    void* stream_ptr() const { return reinterpret_cast<void*>(stream); }

    /// Orders our stream after every producer stream (helmpinn::stream_wait: an event per
    /// device, recorded on the producer's stream and waited on by ours, with ctx.device current
    /// whatever the caller's current device).
    void wait_for_producers() {
        for (std::uintptr_t p : producers) {
            try {
                stream_wait(stream_ptr(), reinterpret_cast<void*>(p), device);
            } catch (const std::runtime_error& e) {
                throw py::value_error(std::string("stream: cannot order the call after the "
                                                  "inputs' producer stream: ") + e.what());
            }
        }
    }
};

/// True when obj should be read as a device array (rather than as a Python scalar).
inline bool looks_like_array(py::handle obj) {
    if (py::isinstance<py::array>(obj)) return py::reinterpret_borrow<py::array>(obj).ndim() > 0;
    return py::hasattr(obj, "__cuda_array_interface__") || py::hasattr(obj, "__dlpack__") ||
           PyCapsule_CheckExact(obj.ptr());
}

namespace detail {

struct RawView {
    std::uintptr_t ptr = 0;
    Shape shape;
    std::vector<long long> strides;  // in elements; empty = C-contiguous
    bool strides_in_bytes = false;
    std::string dtype;               // "float32", "float64", ...
    bool readonly = false;
};

inline std::string typestr_name(const std::string& ts) {
    if (ts.size() >= 3 && (ts[0] == '<' || ts[0] == '|' || ts[0] == '=')) {
        const std::string k = ts.substr(1);
        if (k == "f4") return "float32";
        if (k == "f8") return "float64";
        if (k == "f2") return "float16";
    }
    try {
        return py::str(py::dtype(ts));
    } catch (...) {
        return ts;
    }
}

inline std::string dl_name(const dlpack::DataType& t) {
    std::string base;
    switch (t.code) {
        case dlpack::kInt: base = "int"; break;
        case dlpack::kUInt: base = "uint"; break;
        case dlpack::kFloat: base = "float"; break;
        case dlpack::kBfloat: base = "bfloat"; break;
        case dlpack::kComplex: base = "complex"; break;
        case dlpack::kBool: return "bool";
        default: base = "type" + std::to_string(t.code) + "_";
    }
    std::string s = base + std::to_string(t.bits);
    if (t.lanes != 1) s += "x" + std::to_string(t.lanes);
    return s;
}

// __cuda_array_interface__ (versions 2 and 3).
inline RawView from_cai(py::handle cai_obj, const char* name, CallContext& ctx) {
    if (!py::isinstance<py::dict>(cai_obj))
        throw py::type_error(std::string(name) + ": __cuda_array_interface__ is not a dict");
    py::dict cai = py::reinterpret_borrow<py::dict>(cai_obj);
    RawView v;
    py::tuple data = cai["data"].cast<py::tuple>();
    v.ptr = data[0].cast<std::uintptr_t>();
    v.readonly = data[1].cast<bool>();
    for (py::handle e : cai["shape"].cast<py::tuple>()) v.shape.push_back(e.cast<py::ssize_t>());
    v.dtype = typestr_name(cai["typestr"].cast<std::string>());
    if (cai.contains("strides") && !cai["strides"].is_none()) {
        for (py::handle e : cai["strides"].cast<py::tuple>()) v.strides.push_back(e.cast<long long>());
        v.strides_in_bytes = true;
    }
    if (cai.contains("mask") && !cai["mask"].is_none())
        throw py::value_error(std::string(name) + ": masked device arrays are not supported");
    if (cai.contains("stream") && !cai["stream"].is_none()) {
        const long long s = cai["stream"].cast<long long>();
        if (s > 0) ctx.producers.push_back(static_cast<std::uintptr_t>(s));
    }
    return v;
}

// A "dltensor" capsule (kept alive in ctx until the call returns; its producer frees it).
inline RawView from_capsule(py::handle cap, const char* name, CallContext& ctx) {
    auto* mt = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), "dltensor"));
    if (!mt) {
        PyErr_Clear();
        throw py::type_error(std::string(name) +
                             ": expected a DLPack capsule named 'dltensor' (an unused one)");
    }
    ctx.keep.push_back(py::reinterpret_borrow<py::object>(cap));
    const dlpack::Tensor& t = mt->dl_tensor;
    const int dt = t.device.device_type;
    if (dt != dlpack::kCUDA && dt != dlpack::kCUDAManaged)
        throw py::value_error(std::string(name) + ": expected CUDA device memory on device " +
                              std::to_string(ctx.device) + ", got " +
                              (dt == dlpack::kCPU || dt == dlpack::kCUDAHost
                                   ? std::string("host memory")
                                   : "DLPack device type " + std::to_string(dt)));
    if (dt == dlpack::kCUDA && t.device.device_id != ctx.device)
        throw py::value_error(std::string(name) + ": is on CUDA device " +
                              std::to_string(t.device.device_id) + ", but " + ctx.owner +
                              " is on device " + std::to_string(ctx.device));
    RawView v;
    v.ptr = reinterpret_cast<std::uintptr_t>(t.data) + static_cast<std::uintptr_t>(t.byte_offset);
    for (int i = 0; i < t.ndim; ++i) v.shape.push_back(static_cast<py::ssize_t>(t.shape[i]));
    if (t.strides)
        for (int i = 0; i < t.ndim; ++i) v.strides.push_back(t.strides[i]);
    v.dtype = dl_name(t.dtype);
    return v;
}

inline RawView parse(py::handle obj, const char* name, const std::string& want, CallContext& ctx) {
    if (py::isinstance<py::array>(obj))
        throw py::value_error(std::string(name) + ": expected a CUDA device " + want +
                              " on device " + std::to_string(ctx.device) +
                              ", got host memory (a numpy.ndarray); " + ctx.host_hint);
    if (PyCapsule_CheckExact(obj.ptr())) return from_capsule(obj, name, ctx);
    // DLPack first: the producer is handed our stream and orders its pending work before it.
    // PyTorch's __cuda_array_interface__ names no stream (its work on torch's current stream
    // would not be waited for); CuPy's names one, and both offer DLPack.
    std::string dl_error, cai_error;
    if (py::hasattr(obj, "__dlpack__")) {
        if (py::hasattr(obj, "__dlpack_device__")) {
            py::tuple dev = obj.attr("__dlpack_device__")().cast<py::tuple>();
            const int dt = dev[0].cast<int>();
            if (dt == dlpack::kCPU || dt == dlpack::kCUDAHost)
                throw py::value_error(std::string(name) + ": expected a CUDA device " + want +
                                      " on device " + std::to_string(ctx.device) +
                                      ", got host memory (" + type_name(obj) + ")");
        }
        // The consumer's stream: 1 stands for the legacy default stream in the protocol.
        const std::uintptr_t s = ctx.stream == 0 ? 1 : ctx.stream;
        try {
            py::object cap;
            try {
                cap = obj.attr("__dlpack__")(py::arg("stream") = s);
            } catch (py::error_already_set& e) {
                if (!e.matches(PyExc_TypeError)) throw;  // a producer without stream=
                cap = obj.attr("__dlpack__")();
            }
            return from_capsule(cap, name, ctx);
        } catch (py::error_already_set& e) {  // e.g. a torch tensor that requires grad
            dl_error = e.what();
            if (!py::hasattr(obj, "__cuda_array_interface__")) throw;
        }
    }
    if (py::hasattr(obj, "__cuda_array_interface__")) {
        try {
            py::object cai = obj.attr("__cuda_array_interface__");
            return from_cai(cai, name, ctx);
        } catch (py::error_already_set& e) {
            cai_error = e.what();
            if (dl_error.empty()) throw;
        }
    }
    if (!dl_error.empty())
        throw py::type_error(std::string(name) + ": expected a CUDA device " + want +
                             ", got " + type_name(obj) + " that exports neither by DLPack (" +
                             dl_error + ") nor by __cuda_array_interface__ (" + cai_error + ")");
    throw py::type_error(std::string(name) + ": expected a CUDA device " + want +
                         " (an object with __cuda_array_interface__ or __dlpack__), got " +
                         type_name(obj));
}

/// Checks that ptr is device (or managed) memory on ctx.device.
inline void check_pointer(std::uintptr_t ptr, const char* name, const CallContext& ctx) {
    PointerInfo info;
    try {
        info = pointer_info(reinterpret_cast<const void*>(ptr));
    } catch (const std::runtime_error& e) {
        if (!has_cuda()) throw;
        throw py::value_error(std::string(name) + ": cannot query the pointer (" + e.what() +
                              "); expected CUDA device memory on device " +
                              std::to_string(ctx.device));
    }
    if (!info.on_device())
        throw py::value_error(std::string(name) + ": expected CUDA device memory on device " +
                              std::to_string(ctx.device) + ", got " +
                              (info.kind == MemoryKind::pinned_host ? "pinned host memory"
                                                                    : "host memory"));
    if (info.kind == MemoryKind::device && info.device != ctx.device)
        throw py::value_error(std::string(name) + ": is on CUDA device " +
                              std::to_string(info.device) + ", but " + ctx.owner +
                              " is on device " + std::to_string(ctx.device));
}

}  // namespace detail

/// The device-array counterpart of check_array: returns the pointer and shape of a checked
/// C-contiguous device array of dtype T matching `pattern` (writable when `writable`).
template <typename T>
Checked<T> check_device_array(py::handle obj, const char* name, const Shape& pattern,
                              bool writable, CallContext& ctx, const char* dims_doc = nullptr) {
    const std::string want = std::string(dtype_name<T>()) + " array of shape " +
                             (dims_doc ? std::string(dims_doc) : shape_str(pattern));
    detail::RawView v = detail::parse(obj, name, want, ctx);
    if (v.dtype != dtype_name<T>())
        throw py::type_error(std::string(name) + ": expected a CUDA device " + want +
                             ", got dtype " + v.dtype);
    bool ok = v.shape.size() == pattern.size();
    for (std::size_t i = 0; ok && i < v.shape.size(); ++i) ok = pattern[i] < 0 || pattern[i] == v.shape[i];
    if (!ok)
        throw py::value_error(std::string(name) + ": expected a CUDA device " + want +
                              ", got shape " + shape_str(v.shape));
    py::ssize_t size = 1;
    for (auto e : v.shape) size *= e;
    if (!v.strides.empty() && size > 0) {
        long long expect = v.strides_in_bytes ? static_cast<long long>(sizeof(T)) : 1;
        for (int i = int(v.shape.size()) - 1; i >= 0; --i) {
            if (v.shape[i] != 1 && v.strides[i] != expect)
                throw py::value_error(std::string(name) +
                                      ": must be C-contiguous (use .contiguous() or cupy.ascontiguousarray)");
            expect *= v.shape[i];
        }
    }
    if (writable && v.readonly)
        throw py::value_error(std::string(name) + ": output array must be writable");
    if (size > 0) {
        if (v.ptr == 0) throw py::value_error(std::string(name) + ": null device pointer");
        if (v.ptr % alignof(T) != 0)
            throw py::value_error(std::string(name) + ": device pointer is not aligned to " +
                                  std::to_string(alignof(T)) + " bytes");
        detail::check_pointer(v.ptr, name, ctx);
    }
    Checked<T> out;
    out.ptr = size > 0 ? reinterpret_cast<T*>(v.ptr) : nullptr;
    out.shape = std::move(v.shape);
    return out;
}

// ---- the device of a seed primitive's call ----------------------------------------------------

/// True when `obj` presents itself as a CUDA array: __cuda_array_interface__, or DLPack (an
/// object or a capsule) on a CUDA device. Asks the CUDA runtime nothing.
inline bool is_cuda_array(py::handle obj) {
    if (py::isinstance<py::array>(obj)) return false;
    if (py::hasattr(obj, "__cuda_array_interface__")) return true;
    int type = 0;
    if (PyCapsule_CheckExact(obj.ptr())) {
        auto* mt = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), "dltensor"));
        if (!mt) {
            PyErr_Clear();
            return false;
        }
        type = mt->dl_tensor.device.device_type;
    } else if (py::hasattr(obj, "__dlpack_device__")) {
        type = obj.attr("__dlpack_device__")().cast<py::tuple>()[0].cast<int>();
    }
    return type == dlpack::kCUDA || type == dlpack::kCUDAManaged;
}

/// The CUDA device that holds the CUDA array `obj` (is_cuda_array): the one DLPack names, or
/// the one pointer_info finds for a __cuda_array_interface__ pointer; the current
/// device for managed or empty arrays (the argument checks say what is wrong with a pointer
/// that is not device memory). Raises RuntimeError when CUDA cannot be used here.
inline int cuda_array_device(py::handle obj, const char* name) {
    if (!has_cuda())
        throw std::runtime_error(std::string(name) +
                                 ": is a CUDA device array, but helmpinn was built without CUDA support");
    const int count = cuda_device_count();
    if (count == 0) {
        const std::string why = cuda_device_error();
        throw std::runtime_error(std::string(name) +
                                 ": is a CUDA device array, but no CUDA device is available" +
                                 (why == "no CUDA device found" ? std::string() : ": " + why));
    }
    int device = -1;
    if (PyCapsule_CheckExact(obj.ptr())) {
        auto* mt = static_cast<dlpack::ManagedTensor*>(PyCapsule_GetPointer(obj.ptr(), "dltensor"));
        if (!mt) PyErr_Clear();
        else if (mt->dl_tensor.device.device_type == dlpack::kCUDA) device = mt->dl_tensor.device.device_id;
    } else if (py::hasattr(obj, "__dlpack_device__")) {
        py::tuple dev = obj.attr("__dlpack_device__")().cast<py::tuple>();
        if (dev[0].cast<int>() == dlpack::kCUDA) device = dev[1].cast<int>();
    } else {
        py::dict cai = obj.attr("__cuda_array_interface__").cast<py::dict>();
        const auto ptr = cai["data"].cast<py::tuple>()[0].cast<std::uintptr_t>();
        if (ptr != 0) {
            try {
                const PointerInfo info = pointer_info(reinterpret_cast<const void*>(ptr));
                if (info.kind == MemoryKind::device) device = info.device;
            } catch (const std::runtime_error&) {
                // Unknown here: the argument checks say what is wrong with the pointer.
            }
        }
    }
    if (device < 0) {
        try {
            device = current_device();
        } catch (const std::runtime_error&) {
            device = 0;
        }
    }
    if (device >= count)
        throw std::runtime_error(std::string(name) + ": is on CUDA device " + std::to_string(device) +
                                 ", which is not available (" + std::to_string(count) +
                                 " CUDA device(s) visible)");
    return device;
}

// ---- DeviceArray: device memory seen from Python ----------------------------------------------

/// A dense C-contiguous float32/float64 array in CUDA device memory, exposed through
/// __cuda_array_interface__ (version 3): a zero-copy view of a Workspace buffer (keeping the
/// Workspace alive) or an array this module allocated for a forward() output (it owns a
/// helmpinn::DeviceBuffer then).
class DeviceArray {
public:
    /// A view of device memory that `owner` keeps alive.
    DeviceArray(std::uintptr_t ptr, Shape shape, int itemsize, int device, py::object owner)
        : ptr_(ptr), shape_(std::move(shape)), itemsize_(itemsize), device_(device),
          owner_(std::move(owner)) {}
    /// An array over `memory`, which it owns.
    DeviceArray(DeviceBuffer memory, Shape shape, int itemsize)
        : ptr_(reinterpret_cast<std::uintptr_t>(memory.data())), shape_(std::move(shape)),
          itemsize_(itemsize), device_(memory.device()), memory_(std::move(memory)) {}
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    /// A new array of `shape` on `device` (a DeviceBuffer: cudaMalloc, freed with the object).
    static std::unique_ptr<DeviceArray> allocate(const Shape& shape, int itemsize, int device) {
        py::ssize_t n = 1;
        for (auto e : shape) n *= e;
        try {
            return std::make_unique<DeviceArray>(DeviceBuffer(std::size_t(n) * itemsize, device),
                                                 shape, itemsize);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string("cannot allocate an output array: ") + e.what());
        }
    }

    /// A device copy of a float32/float64 host array (any layout; copied C-contiguous).
    static std::unique_ptr<DeviceArray> from_host(py::handle obj, int device) {
        py::array arr = py::array::ensure(obj);
        if (!arr) throw py::type_error("DeviceArray.from_host: expected an array-like");
        const bool f32 = arr.dtype().equal(py::dtype::of<float>());
        if (!f32 && !arr.dtype().equal(py::dtype::of<double>()))
            throw py::type_error("DeviceArray.from_host: expected a float32 or float64 array, got dtype " +
                                 std::string(py::str(arr.dtype())));
        arr = py::module_::import("numpy").attr("ascontiguousarray")(arr);
        Shape shape(arr.shape(), arr.shape() + arr.ndim());
        const int itemsize = f32 ? 4 : 8;
        auto out = allocate(shape, itemsize, device);
        try {
            copy_to_device(reinterpret_cast<void*>(out->ptr_), arr.data(),
                           std::size_t(out->size()) * itemsize, device);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string("DeviceArray.from_host: ") + e.what());
        }
        return out;
    }

    /// Overwrites this array in place with a host array of the same shape and dtype (a
    /// synchronous copy; the device memory and every view of it stay the same).
    void copy_from_host(py::handle obj) {
        py::array arr = py::array::ensure(obj);
        if (!arr) throw py::type_error("DeviceArray.copy_from_host: expected an array-like");
        if (!arr.dtype().equal(dtype()))
            throw py::type_error("DeviceArray.copy_from_host: expected a " +
                                 std::string(itemsize_ == 4 ? "float32" : "float64") +
                                 " array, got dtype " + std::string(py::str(arr.dtype())));
        const Shape shape(arr.shape(), arr.shape() + arr.ndim());
        if (shape != shape_)
            throw py::value_error("DeviceArray.copy_from_host: expected shape " + shape_str(shape_) +
                                  ", got " + shape_str(shape));
        arr = py::module_::import("numpy").attr("ascontiguousarray")(arr);
        if (size() == 0) return;
        const void* src = arr.data();
        try {
            py::gil_scoped_release release;
            copy_to_device(reinterpret_cast<void*>(ptr_), src,
                           std::size_t(size()) * itemsize_, device_);
        } catch (const std::runtime_error& e) {
            throw std::runtime_error(std::string("DeviceArray.copy_from_host: ") + e.what());
        }
    }

    std::uintptr_t ptr() const { return ptr_; }
    const Shape& shape() const { return shape_; }
    int itemsize() const { return itemsize_; }
    int device() const { return device_; }
    py::ssize_t size() const {
        py::ssize_t n = 1;
        for (auto e : shape_) n *= e;
        return n;
    }
    std::string typestr() const { return itemsize_ == 4 ? "<f4" : "<f8"; }
    py::dtype dtype() const { return itemsize_ == 4 ? py::dtype::of<float>() : py::dtype::of<double>(); }

    py::dict cuda_array_interface() const {
        py::dict d;
        py::tuple shape(shape_.size());
        for (std::size_t i = 0; i < shape_.size(); ++i) shape[i] = shape_[i];
        d["shape"] = shape;
        d["typestr"] = typestr();
        d["data"] = py::make_tuple(size() > 0 ? ptr_ : std::uintptr_t(0), false);
        d["version"] = 3;
        d["strides"] = py::none();
        // No stream: the data was written on the stream of the call that wrote it (the
        // caller's `stream=`, default: the legacy default stream, which CuPy and PyTorch also
        // use by default). Work on another stream must be ordered by the caller.
        d["stream"] = py::none();
        return d;
    }

    /// A numpy copy (waits for all work on the device first).
    py::array copy_to_host() const {
        py::array out(dtype(), shape_);
        if (size() > 0) {
            try {
                py::gil_scoped_release release;
                helmpinn::copy_to_host(out.mutable_data(), reinterpret_cast<const void*>(ptr_),
                                       std::size_t(size()) * itemsize_, device_);
            } catch (const std::runtime_error& e) {
                throw std::runtime_error(std::string("DeviceArray.copy_to_host: ") + e.what());
            }
        }
        return out;
    }

private:
    std::uintptr_t ptr_;
    Shape shape_;
    int itemsize_;
    int device_;
    py::object owner_;      // what keeps a view's memory alive
    DeviceBuffer memory_;   // an array's own memory (empty for a view)
};

/// A view of workspace device memory that keeps the workspace (`owner`) alive.
template <typename T>
py::object device_view(T* ptr, Shape shape, int device, py::handle owner) {
    return py::cast(std::make_unique<DeviceArray>(reinterpret_cast<std::uintptr_t>(ptr),
                                                  std::move(shape), int(sizeof(T)), device,
                                                  py::reinterpret_borrow<py::object>(owner)));
}

inline void register_device_array(py::module_& mod) {
    py::class_<DeviceArray>(mod, "DeviceArray",
                            "A float32/float64 array in CUDA device memory (zero-copy view of a "
                            "Workspace buffer, or a forward() output). Consume it with "
                            "cupy.asarray(a), torch.as_tensor(a, device='cuda') or "
                            "numba.cuda.as_cuda_array(a); copy_to_host() gives a numpy copy.")
        .def_property_readonly("__cuda_array_interface__", &DeviceArray::cuda_array_interface)
        .def_property_readonly("shape", [](const DeviceArray& a) {
            py::tuple t(a.shape().size());
            for (std::size_t i = 0; i < a.shape().size(); ++i) t[i] = a.shape()[i];
            return t;
        })
        .def_property_readonly("dtype", &DeviceArray::dtype)
        .def_property_readonly("ndim", [](const DeviceArray& a) { return a.shape().size(); })
        .def_property_readonly("size", &DeviceArray::size)
        .def_property_readonly("nbytes", [](const DeviceArray& a) { return a.size() * a.itemsize(); })
        .def_property_readonly("ptr", &DeviceArray::ptr)
        .def_property_readonly("device", &DeviceArray::device)
        .def("copy_to_host", &DeviceArray::copy_to_host, "A numpy copy of the data.")
        .def("copy_from_host", &DeviceArray::copy_from_host, py::arg("array"),
             "Overwrites the data in place with a host array of the same shape and dtype.")
        .def_static("from_host", &DeviceArray::from_host, py::arg("array"), py::arg("device") = 0,
                    "A device copy (a new device allocation + copy) of a float32/float64 host array.")
        .def("__len__", [](const DeviceArray& a) {
            if (a.shape().empty()) throw py::type_error("len() of a 0-d DeviceArray");
            return a.shape()[0];
        })
        .def("__repr__", [](const DeviceArray& a) {
            return "DeviceArray(shape=" + shape_str(a.shape(), "?") + ", dtype=" +
                   (a.itemsize() == 4 ? "float32" : "float64") + ", device='cuda:" +
                   std::to_string(a.device()) + "')";
        });
}

}  // namespace bindings
}  // namespace helmpinn
