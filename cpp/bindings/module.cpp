// helmpinn._core: the pybind11 module. It converts and checks, nothing else: every array is
// checked (arrays.hpp) before the C++ core runs, and the GIL is released while it runs.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <complex>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "arrays.hpp"
#include "device_arrays.hpp"
#include "helmpinn/helmpinn.hpp"

namespace py = pybind11;
using namespace helmpinn;
using bindings::check_array;
using bindings::check_no_overlap;
using bindings::Checked;
using bindings::Shape;

namespace {

py::dtype parse_dtype(py::handle obj) {
    py::dtype dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(obj));
    if (!dt.is(py::dtype::of<float>()) && !dt.is(py::dtype::of<double>()))
        throw py::type_error("dtype: expected 'float32' or 'float64', got " +
                             std::string(py::str(dt)));
    return dt;
}

Device parse_device(const std::string& s) {
    if (s == "cpu") return Device::cpu;
    if (s == "cuda" || s.rfind("cuda:", 0) == 0) return Device::cuda;
    throw py::value_error("device: expected 'cpu' or 'cuda', got '" + s + "'");
}

int parse_device_id(const std::string& s) {
    if (s.rfind("cuda:", 0) == 0) return std::stoi(s.substr(5));
    return 0;
}

// A view of workspace memory that keeps the workspace alive through `base`.
template <typename T>
py::array view(T* ptr, Shape shape, py::handle base) {
    return py::array_t<T>(shape, ptr, base);
}

/// The Python Workspace: one Workspace<float> or Workspace<double>.
struct PyWorkspace {
    std::unique_ptr<Workspace<float>> f32;
    std::unique_ptr<Workspace<double>> f64;
    ModelSpec spec;
    std::string device_name;
    LossBreakdown last;
    std::atomic<bool> busy{false};  // a call is running (InUse)

    PyWorkspace(const ModelSpec& s, py::ssize_t batch, py::handle dtype, const std::string& dev)
        : spec(s), device_name(dev) {
        if (batch < 1)
            throw py::value_error("batch_size: expected an integer >= 1, got " + std::to_string(batch));
        const py::dtype dt = parse_dtype(dtype);
        const Device d = parse_device(dev);
        const int id = parse_device_id(dev);
        if (dt.is(py::dtype::of<float>()))
            f32 = std::make_unique<Workspace<float>>(s, std::size_t(batch), d, id);
        else
            f64 = std::make_unique<Workspace<double>>(s, std::size_t(batch), d, id);
    }
    bool is_f32() const { return bool(f32); }
    template <typename T>
    Workspace<T>& ws();
};
template <>
Workspace<float>& PyWorkspace::ws<float>() { return *f32; }
template <>
Workspace<double>& PyWorkspace::ws<double>() { return *f64; }

}  // namespace

// An object made by `Workspace.__new__(Workspace)` (or ModelSpec's) without __init__ has
// memory but no C++ object in it. Loading such an object as an argument (self included) raises
// TypeError instead of handing uninitialised memory to C++.
namespace pybind11 {
namespace detail {
template <typename C>
class initialised_caster : public type_caster_base<C> {
public:
    bool load(handle src, bool convert) {
        if (!type_caster_base<C>::load(src, convert)) return false;
        if (!src || src.is_none() || !isinstance<C>(src)) return true;
        auto* inst = reinterpret_cast<instance*>(src.ptr());
        if (!inst->get_value_and_holder(get_type_info(typeid(C))).holder_constructed()) {
            const std::string name = str(type::handle_of<C>().attr("__name__"));
            throw type_error(name + ": this object was made by " + name + ".__new__ without " +
                             "__init__ and holds nothing; create it with " + name + "(...)");
        }
        return true;
    }
};
template <>
class type_caster<ModelSpec> : public initialised_caster<ModelSpec> {};
template <>
class type_caster<PyWorkspace> : public initialised_caster<PyWorkspace> {};
}  // namespace detail
}  // namespace pybind11

namespace {

// fn(workspace, T{}) without taking the workspace: for properties that only read what a
// workspace never changes (its shape, its cache pointers).
template <typename F>
decltype(auto) inspect(PyWorkspace& w, F&& fn) {
    if (w.is_f32()) return fn(w.ws<float>(), float{});
    return fn(w.ws<double>(), double{});
}

// Holds a workspace for one call. The GIL is released while the core runs, so two Python
// threads could otherwise run calls on one workspace at once and each read the other's caches
// and loss slots; the second raises instead (README, Threads).
class InUse {
public:
    explicit InUse(PyWorkspace& w) : w_(w) {
        if (w_.busy.exchange(true))
            throw std::runtime_error(
                "Workspace: already running a call in another thread; a Workspace serves one "
                "call at a time: give each thread its own Workspace");
    }
    ~InUse() { w_.busy.store(false); }
    InUse(const InUse&) = delete;
    InUse& operator=(const InUse&) = delete;

private:
    PyWorkspace& w_;
};

// fn(workspace, T{}) for a call that computes: the workspace is held (InUse) until it returns.
template <typename F>
decltype(auto) dispatch(PyWorkspace& w, F&& fn) {
    InUse hold(w);
    return inspect(w, std::forward<F>(fn));
}

// Where a call's arrays live. Host: NumPy arrays (arrays.hpp), computed on the calling thread.
// Device: __cuda_array_interface__ / DLPack arrays (device_arrays.hpp) on the workspace's GPU
// (or a seed primitive's), ordered on the caller's stream. forward_impl, value_and_grad_impl
// and the seed primitives' impls are written once over it.
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
    bindings::CallContext ctx;
    DeviceSpace(int device, py::handle stream) {
        ctx.device = device;
        ctx.stream = bindings::stream_handle(stream);
    }
    Checked<T> check(py::handle o, const char* name, const Shape& pattern, bool writable,
                     const char* doc = nullptr) {
        return bindings::check_device_array<T>(o, name, pattern, writable, ctx, doc);
    }
    py::object allocate(const Shape& shape) {
        return py::cast(bindings::DeviceArray::allocate(shape, int(sizeof(T)), ctx.device));
    }
    bool is_array(py::handle o) { return bindings::looks_like_array(o); }
    void* stream() { return ctx.stream_ptr(); }
    void ready() { ctx.wait_for_producers(); }  // after every input producer's stream
};

// Runs fn(space) with the array space of the workspace; `stream=` is for CUDA workspaces only.
template <typename T, typename F>
decltype(auto) with_space(Workspace<T>& ws, const py::object& stream, F&& fn) {
    if (ws.device() == Device::cuda) {
        // The workspace's device is current for the whole call: the argument checks, the waits
        // on the inputs' producer streams (ready()) and the work all happen on it.
        DeviceScope current(ws.device_id());
        DeviceSpace<T> space(ws.device_id(), stream);
        return fn(space);
    }
    if (!stream.is_none()) throw py::value_error("stream: only for Workspaces on device='cuda'");
    HostSpace<T> space;
    return fn(space);
}

// A workspace cache: a numpy view on the CPU, a DeviceArray (__cuda_array_interface__) on CUDA.
template <typename T>
py::object cache_view(const Workspace<T>& ws, T* ptr, Shape shape, py::handle base) {
    if (ws.device() == Device::cuda)
        return bindings::device_view(ptr, std::move(shape), ws.device_id(), base);
    return view(ptr, std::move(shape), base);
}

// Defines the read-only property `name` of Workspace: views of workspace caches listed by
// views(spec, buffers, batch) as (pointer, shape) pairs; one array, or a list when as_list.
template <typename Fn>
void def_cache(py::class_<PyWorkspace>& cls, const char* name, bool as_list, Fn views) {
    cls.def_property_readonly(name, [views, as_list](py::object self) {
        auto& w = self.cast<PyWorkspace&>();
        return inspect(w, [&](auto& ws, auto) -> py::object {
            const auto list = views(w.spec, ws.buffers(), py::ssize_t(ws.batch_size()));
            if (!as_list) return cache_view(ws, list[0].first, list[0].second, self);
            py::list out;
            for (const auto& [ptr, shape] : list) out.append(cache_view(ws, ptr, shape, self));
            return out;
        });
    });
}

template <typename T, typename Space>
py::object forward_impl(Workspace<T>& ws, Space& space, py::handle params, py::handle x,
                        int derivatives, py::object u, py::object grad_u, py::object lap_u) {
    const ModelSpec& sp = ws.spec();
    const py::ssize_t d = sp.in_dim, npar = py::ssize_t(sp.num_params());
    if (derivatives < 0 || derivatives > 2)
        throw py::value_error("derivatives: expected 0, 1 or 2, got " + std::to_string(derivatives));
    auto P = space.check(params, "params", {npar}, false);
    auto X = space.check(x, "x", {-1, d}, false);
    const py::ssize_t n = X.shape[0];
    if (derivatives < 1 && !grad_u.is_none())
        throw py::value_error("grad_u: given but derivatives < 1");
    if (derivatives < 2 && !lap_u.is_none())
        throw py::value_error("lap_u: given but derivatives < 2");
    // Outputs not given are allocated in the workspace's memory space; given ones are written.
    auto output = [&](py::object& o, const char* name, const Shape& shape) {
        if (o.is_none()) o = space.allocate(shape);
        return space.check(o, name, shape, true);
    };
    auto U = output(u, "u", {n, 2});
    Checked<T> G, Lp;
    if (derivatives >= 1) G = output(grad_u, "grad_u", {n, d, 2});
    if (derivatives == 2) Lp = output(lap_u, "lap_u", {n, 2});
    for (auto* o : {&U, &G, &Lp}) {
        const char* name = o == &U ? "u" : o == &G ? "grad_u" : "lap_u";
        check_no_overlap(*o, name, P, "params");
        check_no_overlap(*o, name, X, "x");
    }
    check_no_overlap(U, "u", G, "grad_u");
    check_no_overlap(U, "u", Lp, "lap_u");
    check_no_overlap(G, "grad_u", Lp, "lap_u");
    for (auto [arr, name] : {std::pair{&P, "params"}, {&X, "x"}, {&U, "u"}, {&G, "grad_u"},
                             {&Lp, "lap_u"}})
        bindings::check_no_cache_overlap(ws, *arr, name, false);
    space.ready();
    {
        py::gil_scoped_release release;
        ws.forward(P.ptr, X.ptr, std::size_t(n), derivatives, U.ptr, G.ptr, Lp.ptr, space.stream());
    }
    if (derivatives == 0) return u;
    if (derivatives == 1) return py::make_tuple(u, grad_u);
    return py::make_tuple(u, grad_u, lap_u);
}

bool given(const py::object& o) { return !o.is_none(); }

// The batch keywords every loss-level operation takes (value_and_grad, residuals, jacobian, jvp,
// vjp): parsed once from **kwargs, with an error naming any keyword that is not one of them.
struct BatchArgs {
    py::object x_pde, kappa, f, x_data, y, x_bc, n_bc, alpha_bc, g_bc, counts, a_pde, b_pde, c_pde;
    py::object batch_dtype;  ///< the dtype of a helmpinn.Batch given as batch=, else None
    double w_pde = 1.0, w_data = 1.0, w_bc = 1.0;
    bool train_fourier = true, check_finite = false;
};

BatchArgs parse_batch(const py::kwargs& kw, const char* op) {
    BatchArgs b;
    py::object* objects[] = {&b.x_pde, &b.kappa, &b.f,        &b.x_data, &b.y,
                             &b.x_bc,  &b.n_bc,  &b.alpha_bc, &b.g_bc,   &b.counts,
                             &b.a_pde, &b.b_pde, &b.c_pde};
    const char* object_names[] = {"x_pde", "kappa", "f",        "x_data", "y",
                                  "x_bc",  "n_bc",  "alpha_bc", "g_bc",   "counts",
                                  "a_pde", "b_pde", "c_pde"};
    constexpr int num_objects = 13;
    for (auto* o : objects) *o = py::none();
    b.batch_dtype = py::none();
    // batch=: a helmpinn.Batch (python/helmpinn/batch.py) holding the arrays, already converted;
    // its entries stand in for the array keywords, which may then not be given as well.
    py::object batch = py::none();
    if (kw.contains("batch")) batch = kw["batch"];
    if (given(batch)) {
        py::object cls = py::module_::import("helmpinn.batch").attr("Batch");
        if (!py::isinstance(batch, cls))
            throw py::type_error(std::string(op) + "(): batch: expected a helmpinn.Batch, got " +
                                 std::string(py::str(py::type::of(batch).attr("__name__"))) +
                                 " (a dict of keywords is passed unpacked, **batch)");
        std::string clash;
        for (auto item : kw) {
            const std::string key = py::str(item.first);
            for (int k = 0; k < num_objects; ++k)
                if (key == object_names[k]) clash += (clash.empty() ? "" : ", ") + key;
        }
        if (!clash.empty())
            throw py::type_error(std::string(op) + "(): batch= given together with " + clash +
                                 "; pass the points either in the helmpinn.Batch or as keywords, "
                                 "not both");
        for (auto item : py::dict(batch.attr("_keywords"))) {
            const std::string key = py::str(item.first);
            bool found = false;
            for (int k = 0; k < num_objects && !found; ++k)
                if (key == object_names[k])
                    *objects[k] = py::reinterpret_borrow<py::object>(item.second), found = true;
            if (!found) throw py::type_error("batch: unexpected entry '" + key + "'");
        }
        b.batch_dtype = batch.attr("dtype");
    }
    for (auto item : kw) {
        const std::string key = py::str(item.first);
        if (key == "batch") continue;
        py::object value = py::reinterpret_borrow<py::object>(item.second);
        bool found = false;
        for (int k = 0; k < num_objects && !found; ++k)
            if (key == object_names[k]) *objects[k] = value, found = true;
        if (found) continue;
        double* weight = key == "w_pde" ? &b.w_pde : key == "w_data" ? &b.w_data
                         : key == "w_bc" ? &b.w_bc : nullptr;
        bool* flag = key == "train_fourier" ? &b.train_fourier
                     : key == "check_finite" ? &b.check_finite : nullptr;
        if (weight) {
            try {
                *weight = value.cast<double>();
            } catch (const py::cast_error&) {
                throw py::type_error(key + ": expected a float, got " +
                                     std::string(py::str(py::type::of(value).attr("__name__"))));
            }
        } else if (flag) {
            if (!py::isinstance<py::bool_>(value))
                throw py::type_error(key + ": expected True or False");
            *flag = value.cast<bool>();
        } else {
            throw py::type_error(std::string(op) + "() got an unexpected keyword argument '" +
                                 key + "' (batch keywords: batch, x_pde, kappa, f, a_pde, b_pde, "
                                 "c_pde, x_data, y, x_bc, n_bc, alpha_bc, g_bc, w_pde, w_data, "
                                 "w_bc, counts, train_fourier, check_finite)");
        }
    }
    return b;
}

// counts={"pde": n, "data": m, "bc": q}: each given count must be >= the local points of its
// term (checked again in the core); a missing key keeps the local count.
template <typename T>
void parse_counts(const py::object& counts, LossInputs<T>& in) {
    if (!given(counts)) return;
    if (!py::isinstance<py::dict>(counts))
        throw py::type_error("counts: expected a dict like {'pde': n, 'data': m, 'bc': q}");
    for (auto item : counts.cast<py::dict>()) {
        const std::string key = py::str(item.first);
        std::size_t* slot = key == "pde" ? &in.count_pde : key == "data" ? &in.count_data
                            : key == "bc" ? &in.count_bc : nullptr;
        if (!slot)
            throw py::value_error("counts: unknown term '" + key + "' (expected 'pde', 'data', 'bc')");
        long long v;
        try {
            v = py::reinterpret_borrow<py::object>(item.second).cast<long long>();
        } catch (const py::cast_error&) {
            throw py::type_error("counts['" + key + "']: expected an integer");
        }
        const std::size_t local = key == "pde" ? in.num_pde : key == "data" ? in.num_data : in.num_bc;
        if (v < 0 || std::size_t(v) < local)
            throw py::value_error("counts['" + key + "']: expected an integer >= the " + key +
                                  " points given here (" + std::to_string(local) + "), got " +
                                  std::to_string(v));
        *slot = std::size_t(v);
    }
}

// The core's LossInputs from the batch keywords: every array checked (dtype, shape, contiguity,
// device), and listed in `inputs` for the caller's overlap checks against its outputs.
template <typename T, typename Space>
LossInputs<T> build_inputs(Workspace<T>& ws, Space& space, const BatchArgs& b,
                           std::vector<std::pair<Checked<T>, const char*>>& inputs) {
    const ModelSpec& sp = ws.spec();
    const py::ssize_t d = sp.in_dim;
    const std::string dshape = "(N, " + std::to_string(d) + ")";
    const py::object &x_pde = b.x_pde, &kappa = b.kappa, &f = b.f, &x_data = b.x_data, &y = b.y,
                     &x_bc = b.x_bc, &n_bc = b.n_bc, &alpha_bc = b.alpha_bc, &g_bc = b.g_bc;
    if (given(b.batch_dtype)) {
        const py::dtype dt = py::dtype::from_args(b.batch_dtype);
        if (dt.kind() != 'f' || dt.itemsize() != py::ssize_t(sizeof(T)))
            throw py::type_error("batch: holds " + std::string(py::str(dt)) + " arrays but the workspace is " +
                                 std::string(py::str(py::dtype::of<T>())) +
                                 "; convert it once with batch.astype(workspace.dtype)");
    }
    LossInputs<T> in;
    in.w_pde = bindings::to_scalar<T>(b.w_pde, "w_pde");
    in.w_data = bindings::to_scalar<T>(b.w_data, "w_data");
    in.w_bc = bindings::to_scalar<T>(b.w_bc, "w_bc");
    in.train_fourier = b.train_fourier;
    in.check_finite = b.check_finite;

    // PDE term
    if (given(x_pde)) {
        auto X = space.check(x_pde, "x_pde", {-1, d}, false, dshape.c_str());
        const py::ssize_t n = X.shape[0];
        in.x_pde = X.ptr;
        in.num_pde = std::size_t(n);
        inputs.push_back({X, "x_pde"});
        const bool op = given(b.a_pde) || given(b.b_pde) || given(b.c_pde);
        in.pde_operator = op;
        if (op) {
            // The general operator (MATH.md, General operator): a_pde, b_pde [N_pde, d, 2] or a
            // complex constant; c_pde [N_pde, 2] or a complex constant, or kappa in its place.
            const std::string ndshape = "(N_pde, " + std::to_string(d) + ", 2) with N_pde = len(x_pde)";
            auto coefficient = [&](const py::object& o, const char* name, const Shape& shape,
                                   const std::string& doc, const T*& ptr, T* cst) {
                if (!given(o)) return;
                if (space.is_array(o)) {
                    auto A = space.check(o, name, shape, false, doc.c_str());
                    ptr = A.ptr;
                    inputs.push_back({A, name});
                    return;
                }
                std::complex<double> v;
                try {
                    v = o.cast<std::complex<double>>();
                } catch (const py::cast_error&) {
                    throw py::type_error(std::string(name) + ": expected a complex number or an array of shape " + doc);
                }
                cst[0] = T(v.real());
                cst[1] = T(v.imag());
            };
            coefficient(b.a_pde, "a_pde", {n, d, 2}, ndshape, in.a_pde, in.a_const);
            coefficient(b.b_pde, "b_pde", {n, d, 2}, ndshape, in.b_pde, in.b_const);
            if (given(b.c_pde) && given(kappa))
                throw py::value_error("c_pde: given together with kappa; give one of them (c_pde is the general operator's c, kappa a real c)");
            if (!given(b.c_pde) && !given(kappa))
                throw py::value_error("c_pde: required with a_pde or b_pde (or kappa in its place): a complex constant or an array of shape (N_pde, 2)");
            coefficient(b.c_pde, "c_pde", {n, 2}, "(N_pde, 2) with N_pde = len(x_pde)", in.c_pde,
                        in.c_const);
        }
        if (!given(kappa)) {
            if (!op)  // (with the operator, c came from c_pde)
                throw py::value_error("kappa: required with x_pde (a float k^2, or an array of shape (N_pde,))");
        } else if (space.is_array(kappa)) {
            auto K = space.check(kappa, "kappa", {n}, false, "(N_pde,) with N_pde = len(x_pde)");
            in.kappa = K.ptr;
            inputs.push_back({K, "kappa"});
        } else {
            double k;
            try {
                k = kappa.cast<double>();
            } catch (const py::cast_error&) {
                throw py::type_error("kappa: expected a float or an array of shape (N_pde,)");
            }
            (op ? in.c_const[0] : in.kappa_const) = bindings::to_scalar<T>(k, "kappa");
        }
        if (given(f)) {
            auto F = space.check(f, "f", {n, 2}, false, "(N_pde, 2) with N_pde = len(x_pde)");
            in.f = F.ptr;
            inputs.push_back({F, "f"});
        }
    } else {
        if (given(kappa)) throw py::value_error("kappa: given without x_pde");
        if (given(b.a_pde)) throw py::value_error("a_pde: given without x_pde");
        if (given(b.b_pde)) throw py::value_error("b_pde: given without x_pde");
        if (given(b.c_pde)) throw py::value_error("c_pde: given without x_pde");
        if (given(f)) throw py::value_error("f: given without x_pde");
    }

    // data term
    if (given(x_data)) {
        auto X = space.check(x_data, "x_data", {-1, d}, false, dshape.c_str());
        const py::ssize_t n = X.shape[0];
        if (!given(y)) throw py::value_error("y: required with x_data (array of shape (N_data, 2))");
        auto Y = space.check(y, "y", {n, 2}, false, "(N_data, 2) with N_data = len(x_data)");
        in.x_data = X.ptr;
        in.num_data = std::size_t(n);
        in.y = Y.ptr;
        inputs.push_back({X, "x_data"});
        inputs.push_back({Y, "y"});
    } else if (given(y)) {
        throw py::value_error("y: given without x_data");
    }

    // Robin boundary term
    if (given(x_bc)) {
        auto X = space.check(x_bc, "x_bc", {-1, d}, false, dshape.c_str());
        const py::ssize_t n = X.shape[0];
        if (!given(n_bc))
            throw py::value_error("n_bc: required with x_bc (unit outward normals, shape (N_bc, " +
                                  std::to_string(d) + "))");
        auto Nn = space.check(n_bc, "n_bc", {n, d}, false,
                              ("(N_bc, " + std::to_string(d) + ") with N_bc = len(x_bc)").c_str());
        in.x_bc = X.ptr;
        in.num_bc = std::size_t(n);
        in.normal_bc = Nn.ptr;
        inputs.push_back({X, "x_bc"});
        inputs.push_back({Nn, "n_bc"});
        if (given(alpha_bc)) {
            if (space.is_array(alpha_bc)) {
                auto A = space.check(alpha_bc, "alpha_bc", {n, 2}, false,
                                     "(N_bc, 2) with N_bc = len(x_bc)");
                in.alpha_bc = A.ptr;
                inputs.push_back({A, "alpha_bc"});
            } else {
                std::complex<double> a;
                try {
                    a = alpha_bc.cast<std::complex<double>>();
                } catch (const py::cast_error&) {
                    throw py::type_error("alpha_bc: expected a complex number or an array of shape (N_bc, 2)");
                }
                in.alpha_const[0] = bindings::to_scalar<T>(a.real(), "alpha_bc (real part)");
                in.alpha_const[1] = bindings::to_scalar<T>(a.imag(), "alpha_bc (imaginary part)");
            }
        }
        if (given(g_bc)) {
            auto Gb = space.check(g_bc, "g_bc", {n, 2}, false, "(N_bc, 2) with N_bc = len(x_bc)");
            in.g_bc = Gb.ptr;
            inputs.push_back({Gb, "g_bc"});
        }
    } else {
        if (given(n_bc)) throw py::value_error("n_bc: given without x_bc");
        if (given(alpha_bc)) throw py::value_error("alpha_bc: given without x_bc");
        if (given(g_bc)) throw py::value_error("g_bc: given without x_bc");
    }
    parse_counts(b.counts, in);
    return in;
}

template <typename T, typename Space>
py::object value_and_grad_impl(PyWorkspace& pw, Workspace<T>& ws, Space& space, py::handle params,
                               py::handle grad, py::object grad_kappa, bool breakdown,
                               const BatchArgs& b) {
    const py::ssize_t npar = py::ssize_t(ws.spec().num_params());
    auto P = space.check(params, "params", {npar}, false);
    auto G = space.check(grad, "grad", {npar}, true);
    check_no_overlap(G, "grad", P, "params");
    std::vector<std::pair<Checked<T>, const char*>> inputs;
    LossInputs<T> in = build_inputs(ws, space, b, inputs);
    LossOutputs<T> out;
    Checked<T> GK;
    if (given(grad_kappa)) {
        if (!in.num_pde) throw py::value_error("grad_kappa: given without x_pde");
        GK = space.check(grad_kappa, "grad_kappa", {py::ssize_t(in.num_pde)}, true,
                         "(N_pde,) with N_pde = len(x_pde)");
        check_no_overlap(GK, "grad_kappa", G, "grad");
        check_no_overlap(GK, "grad_kappa", P, "params");
        for (auto& [arr, name] : inputs) check_no_overlap(GK, "grad_kappa", arr, name);
        bindings::check_no_cache_overlap(ws, GK, "grad_kappa", true);
        out.grad_kappa = GK.ptr;
    }
    for (auto& [arr, name] : inputs) check_no_overlap(G, "grad", arr, name);
    bindings::check_no_cache_overlap(ws, G, "grad", false);  // ws.grad itself is allowed

    space.ready();
    {
        py::gil_scoped_release release;
        ws.value_and_grad(P.ptr, G.ptr, in, out, space.stream());
    }
    pw.last = out.loss;
    if (breakdown) return py::cast(out.loss);
    return py::float_(out.loss.total);
}

// The residual level. `op`: residuals (v null), jvp (v = the tangent [P]), vjp (v = the row
// weights [R]) or jacobian (rows = None or (start, stop)); the output is allocated in the
// workspace's memory space when not given.
enum class ResidualOp { residuals, jacobian, jvp, vjp };

template <typename T, typename Space>
py::object residual_impl(ResidualOp op, Workspace<T>& ws, Space& space, py::handle params,
                         py::handle v, py::object out, py::object rows, const BatchArgs& b) {
    const py::ssize_t npar = py::ssize_t(ws.spec().num_params());
    auto P = space.check(params, "params", {npar}, false);
    std::vector<std::pair<Checked<T>, const char*>> inputs;
    LossInputs<T> in = build_inputs(ws, space, b, inputs);
    const py::ssize_t R = py::ssize_t(ws.num_residuals(in));
    Checked<T> V;
    if (op == ResidualOp::jvp)
        V = space.check(v, "v", {npar}, false,
                        ("(" + std::to_string(npar) + ",), the number of parameters").c_str());
    if (op == ResidualOp::vjp)
        V = space.check(v, "w", {R}, false,
                        ("(" + std::to_string(R) + ",), R = 2 (N_pde + N_data + N_bc)").c_str());
    py::ssize_t r0 = 0, r1 = R;
    if (op == ResidualOp::jacobian && given(rows)) {
        try {
            auto t = rows.cast<std::pair<py::ssize_t, py::ssize_t>>();
            r0 = t.first;
            r1 = t.second;
        } catch (const py::cast_error&) {
            throw py::type_error("rows: expected None or a pair (start, stop) of integers");
        }
        if (r0 < 0 || r0 > r1 || r1 > R)
            throw py::value_error("rows: expected 0 <= start <= stop <= R = " + std::to_string(R) +
                                  ", got (" + std::to_string(r0) + ", " + std::to_string(r1) + ")");
    } else if (given(rows)) {
        throw py::value_error("rows: only for jacobian");
    }
    const Shape shape = op == ResidualOp::jacobian ? Shape{r1 - r0, npar}
                        : op == ResidualOp::vjp    ? Shape{npar}
                                                   : Shape{R};
    if (out.is_none()) out = space.allocate(shape);
    auto O = space.check(out, "out", shape, true);
    check_no_overlap(O, "out", P, "params");
    if (V.ptr) check_no_overlap(O, "out", V, op == ResidualOp::vjp ? "w" : "v");
    for (auto& [arr, arr_name] : inputs) check_no_overlap(O, "out", arr, arr_name);
    bindings::check_no_cache_overlap(ws, O, "out", true);
    space.ready();
    {
        py::gil_scoped_release release;
        switch (op) {
            case ResidualOp::residuals: ws.residuals(P.ptr, in, O.ptr, space.stream()); break;
            case ResidualOp::jacobian:
                ws.jacobian(P.ptr, in, std::size_t(r0), std::size_t(r1), O.ptr, space.stream());
                break;
            case ResidualOp::jvp: ws.jvp(P.ptr, V.ptr, in, O.ptr, space.stream()); break;
            case ResidualOp::vjp: ws.vjp(P.ptr, V.ptr, in, O.ptr, space.stream()); break;
        }
    }
    return out;
}

// The seed primitives, written once over the array space as forward_impl is: the host (NumPy,
// outputs allocated when not given) or a CUDA device (outputs required, see with_primitive_space).
template <typename T, typename Space>
py::object mse_backward_impl(Space& space, py::handle pred, py::handle target, py::object out) {
    auto Pp = space.check(pred, "pred", {-1, -1}, false, "(N, C)");
    auto Tt = space.check(target, "target", Pp.shape, false);
    if (out.is_none()) out = space.allocate(Pp.shape);
    auto O = space.check(out, "out", Pp.shape, true);
    check_no_overlap(O, "out", Pp, "pred");
    check_no_overlap(O, "out", Tt, "target");
    space.ready();
    py::gil_scoped_release release;
    mse_backward<T>(Pp.ptr, Tt.ptr, std::size_t(Pp.shape[0]), std::size_t(Pp.shape[1]), O.ptr,
                    Space::device, space.stream());
    return out;
}

template <typename T, typename Space>
py::tuple layer_backward_impl(Space& space, py::handle dL_dh, py::handle h, py::handle h_prev,
                              py::handle W, bool apply_tanh_grad, py::object out) {
    auto Wm = space.check(W, "W", {-1, -1}, false, "(out, in)");
    const py::ssize_t o = Wm.shape[0], i = Wm.shape[1];
    const std::string s_out = "(N, " + std::to_string(o) + ")", s_in = "(N, " + std::to_string(i) + ")";
    auto G = space.check(dL_dh, "dL_dh", {-1, o}, false, s_out.c_str());
    const py::ssize_t n = G.shape[0];
    auto Hh = space.check(h, "h", {n, o}, false);
    auto A = space.check(h_prev, "h_prev", {n, i}, false);
    py::object dW, db, dh;
    if (out.is_none()) {
        dW = space.allocate(Shape{o, i});
        db = space.allocate(Shape{o});
        dh = space.allocate(Shape{n, i});
    } else {
        py::tuple t = py::reinterpret_borrow<py::object>(out).cast<py::tuple>();
        if (t.size() != 3) throw py::value_error("out: expected a tuple (dW, db, dh_prev)");
        dW = t[0];
        db = t[1];
        dh = t[2];
    }
    auto DW = space.check(dW, "out[0] (dW)", {o, i}, true);
    auto DB = space.check(db, "out[1] (db)", {o}, true);
    auto DH = space.check(dh, "out[2] (dh_prev)", {n, i}, true);
    const Checked<T>* ins[] = {&G, &Hh, &A, &Wm};
    const char* in_names[] = {"dL_dh", "h", "h_prev", "W"};
    for (int k = 0; k < 4; ++k) {
        check_no_overlap(DW, "out[0] (dW)", *ins[k], in_names[k]);
        check_no_overlap(DB, "out[1] (db)", *ins[k], in_names[k]);
        check_no_overlap(DH, "out[2] (dh_prev)", *ins[k], in_names[k]);
    }
    check_no_overlap(DW, "out[0] (dW)", DB, "out[1] (db)");
    check_no_overlap(DW, "out[0] (dW)", DH, "out[2] (dh_prev)");
    check_no_overlap(DB, "out[1] (db)", DH, "out[2] (dh_prev)");
    space.ready();
    {
        py::gil_scoped_release release;
        layer_backward<T>(G.ptr, Hh.ptr, A.ptr, Wm.ptr, std::size_t(n), std::size_t(o),
                          std::size_t(i), apply_tanh_grad, DW.ptr, DB.ptr, DH.ptr, Space::device,
                          space.stream());
    }
    return py::make_tuple(dW, db, dh);
}

template <typename T, typename Space>
py::object fourier_backward_impl(Space& space, py::handle dL_dphi, py::handle x, py::handle B,
                                 py::object out) {
    auto Bm = space.check(B, "B", {-1, -1}, false, "(d, m)");
    const py::ssize_t d = Bm.shape[0], m = Bm.shape[1];
    if (d < 1 || d > 3) throw py::value_error("B: expected shape (d, m) with d in 1..3, got d = " + std::to_string(d));
    auto X = space.check(x, "x", {-1, d}, false);
    const py::ssize_t n = X.shape[0];
    auto G = space.check(dL_dphi, "dL_dphi", {n, 2 * m}, false);
    if (out.is_none()) out = space.allocate(Shape{d, m});
    auto O = space.check(out, "out", {d, m}, true);
    check_no_overlap(O, "out", G, "dL_dphi");
    check_no_overlap(O, "out", X, "x");
    check_no_overlap(O, "out", Bm, "B");
    space.ready();
    py::gil_scoped_release release;
    fourier_backward<T>(G.ptr, X.ptr, Bm.ptr, std::size_t(n), std::size_t(d), std::size_t(m), O.ptr,
                        Space::device, space.stream());
    return out;
}

template <typename T, typename Space>
void adam_impl(Space& space, py::handle params, py::handle grad, py::handle m, py::handle v,
               long step, double lr, double b1, double b2, double eps, double wd) {
    auto P = space.check(params, "params", {-1}, true, "(P,)");
    const py::ssize_t n = P.shape[0];
    auto G = space.check(grad, "grad", {n}, false);
    auto M = space.check(m, "m", {n}, true);
    auto V = space.check(v, "v", {n}, true);
    if (step < 1) throw py::value_error("step: expected an integer >= 1, got " + std::to_string(step));
    if (!(lr >= 0)) throw py::value_error("lr: expected a number >= 0");
    check_no_overlap(P, "params", G, "grad");
    check_no_overlap(P, "params", M, "m");
    check_no_overlap(P, "params", V, "v");
    check_no_overlap(M, "m", V, "v");
    check_no_overlap(M, "m", G, "grad");
    check_no_overlap(V, "v", G, "grad");
    space.ready();
    py::gil_scoped_release release;
    adam_step<T>(P.ptr, G.ptr, M.ptr, V.ptr, std::size_t(n), step, lr, b1, b2, eps, wd,
                 Space::device, space.stream());
}

// All array arguments of one call share the first one's dtype; a different one is named.
void require_same_dtype(py::handle first, const char* first_name,
                        std::initializer_list<std::pair<py::handle, const char*>> others) {
    const py::dtype dt = py::reinterpret_borrow<py::array>(first).dtype();
    for (const auto& [obj, name] : others) {
        if (obj.is_none() || !py::isinstance<py::array>(obj)) continue;
        const py::dtype o = py::reinterpret_borrow<py::array>(obj).dtype();
        if (!o.is(dt))
            throw py::type_error(std::string(name) + ": dtype " + std::string(py::str(o)) +
                                 " differs from " + first_name + "'s " + std::string(py::str(dt)) +
                                 "; all arrays of one call must have the same dtype");
    }
}

// Picks float or double from the dtype of the first array argument.
bool first_is_f32(py::handle a, const char* name) {
    if (!py::isinstance<py::array>(a))
        throw py::type_error(std::string(name) + ": expected a numpy float32 or float64 array, got " +
                             std::string(py::str(py::type::of(a).attr("__name__"))));
    auto dt = py::reinterpret_borrow<py::array>(a).dtype();
    if (dt.is(py::dtype::of<float>())) return true;
    if (dt.is(py::dtype::of<double>())) return false;
    throw py::type_error(std::string(name) + ": expected a float32 or float64 array, got dtype " +
                         std::string(py::str(dt)));
}

// Runs fn(space, T{}) for a seed primitive whose first array argument is `first`. A CUDA array
// (__cuda_array_interface__ or DLPack) takes the call to its device, made current for the call:
// every array argument must be a device array there (DeviceSpace checks them), `stream` orders
// the call as in Workspace.value_and_grad, and outputs must be given (`out_given`): helmpinn
// allocates no device memory per call. Anything else takes the host path, as it always has:
// NumPy arrays of the first one's dtype (`others`), and no stream.
template <typename F>
decltype(auto) with_primitive_space(py::handle first, const char* first_name,
                                    std::initializer_list<std::pair<py::handle, const char*>> others,
                                    bool out_given, const py::object& stream, F&& fn) {
    if (bindings::is_cuda_array(first)) {
        if (!out_given)
            throw py::value_error(std::string("out: required when ") + first_name +
                                  " is a CUDA device array (helmpinn allocates no device memory "
                                  "per call): pass preallocated device arrays");
        const int device = bindings::cuda_array_device(first, first_name);
        bindings::CallContext probe;
        probe.device = device;
        probe.stream = bindings::stream_handle(stream);
        const std::string dt =
            bindings::detail::parse(first, first_name, "float32 or float64 array", probe).dtype;
        DeviceScope current(device);
        auto run = [&](auto tag) -> decltype(auto) {
            DeviceSpace<decltype(tag)> space(device, stream);
            space.ctx.owner = first_name;
            space.ctx.host_hint = std::string(first_name) + " is a CUDA device array, so every "
                                  "array of this call must be one, on the same device";
            return fn(space, tag);
        };
        if (dt == "float32") return run(float{});
        if (dt == "float64") return run(double{});
        throw py::type_error(std::string(first_name) +
                             ": expected a CUDA device float32 or float64 array, got dtype " + dt);
    }
    const bool f32 = first_is_f32(first, first_name);
    require_same_dtype(first, first_name, others);
    if (!stream.is_none())
        throw py::value_error(std::string("stream: only for CUDA device arrays (") + first_name +
                              " is a host array)");
    if (f32) {
        HostSpace<float> space;
        return fn(space, float{});
    }
    HostSpace<double> space;
    return fn(space, double{});
}

}  // namespace

PYBIND11_MODULE(_core, mod) {
    mod.doc() = "helmpinn's compiled core: exact Helmholtz PINN losses and gradients.";
    mod.attr("__version__") = helmpinn::version();

    py::class_<ModelSpec>(mod, "ModelSpec", "Shape of a Fourier-feature tanh MLP with outputs (Re u, Im u).")
        .def(py::init([](int in_dim, int ff_dim, int hidden_dim, int num_hidden_layers) {
                 ModelSpec s{in_dim, ff_dim, hidden_dim, num_hidden_layers};
                 s.validate();
                 return s;
             }),
             py::arg("in_dim"), py::arg("ff_dim"), py::arg("hidden_dim"), py::arg("num_hidden_layers"))
        .def_readonly("in_dim", &ModelSpec::in_dim)
        .def_readonly("ff_dim", &ModelSpec::ff_dim)
        .def_readonly("hidden_dim", &ModelSpec::hidden_dim)
        .def_readonly("num_hidden_layers", &ModelSpec::num_hidden_layers)
        .def_property_readonly("num_params", &ModelSpec::num_params)
        .def_property_readonly("num_layers", &ModelSpec::num_layers)
        .def("layout", [](const ModelSpec& s) {
            py::list out;
            for (const auto& p : s.layout()) {
                py::tuple shape(p.shape.size());
                for (std::size_t i = 0; i < p.shape.size(); ++i) shape[i] = p.shape[i];
                out.append(py::make_tuple(p.name, shape, p.offset));
            }
            return out;
        })
        .def("views", [](const ModelSpec& s, py::handle theta) {
            const py::ssize_t npar = py::ssize_t(s.num_params());
            py::dict out;
            auto make = [&](auto tag) {
                using T = decltype(tag);
                auto th = check_array<T>(theta, "theta", {npar}, false);
                for (const auto& p : s.layout()) {
                    Shape shape(p.shape.begin(), p.shape.end());
                    py::array_t<T> v(shape, th.ptr + p.offset, theta);
                    if (!py::reinterpret_borrow<py::array>(theta).writeable())
                        v.attr("flags").attr("writeable") = false;
                    out[py::str(p.name)] = v;
                }
            };
            if (first_is_f32(theta, "theta")) make(float{}); else make(double{});
            return out;
        }, py::arg("theta"), "Named zero-copy views of a flat parameter vector.")
        .def("flops_per_point", &ModelSpec::flops_per_point, py::arg("streams"))
        .def("__eq__", [](const ModelSpec& a, py::object b) {
            return py::isinstance<ModelSpec>(b) && a == b.cast<ModelSpec>();
        })
        .def("__hash__", [](const ModelSpec& s) {
            return py::hash(py::make_tuple(s.in_dim, s.ff_dim, s.hidden_dim, s.num_hidden_layers));
        })
        .def("__repr__", [](const ModelSpec& s) {
            return "ModelSpec(in_dim=" + std::to_string(s.in_dim) + ", ff_dim=" + std::to_string(s.ff_dim) +
                   ", hidden_dim=" + std::to_string(s.hidden_dim) +
                   ", num_hidden_layers=" + std::to_string(s.num_hidden_layers) + ")";
        })
        .def(py::pickle(
            [](const ModelSpec& s) { return py::make_tuple(s.in_dim, s.ff_dim, s.hidden_dim, s.num_hidden_layers); },
            [](py::tuple t) {
                ModelSpec s{t[0].cast<int>(), t[1].cast<int>(), t[2].cast<int>(), t[3].cast<int>()};
                s.validate();
                return s;
            }));

    py::class_<LossBreakdown>(mod, "LossBreakdown",
                              "The loss of one call: total = w_pde*pde + w_data*data + w_bc*bc, "
                              "each term its unweighted mean over its count (0 when absent).")
        .def_readonly("total", &LossBreakdown::total)
        .def_readonly("pde", &LossBreakdown::pde)
        .def_readonly("data", &LossBreakdown::data)
        .def_readonly("bc", &LossBreakdown::bc)
        .def("__float__", [](const LossBreakdown& l) { return l.total; })
        .def("as_dict", [](const LossBreakdown& l) {
            py::dict d;
            d["total"] = l.total;
            d["pde"] = l.pde;
            d["data"] = l.data;
            d["bc"] = l.bc;
            return d;
        })
        .def("__repr__", [](const LossBreakdown& l) {
            return "LossBreakdown(total=" + std::string(py::repr(py::float_(l.total))) +
                   ", pde=" + std::string(py::repr(py::float_(l.pde))) +
                   ", data=" + std::string(py::repr(py::float_(l.data))) +
                   ", bc=" + std::string(py::repr(py::float_(l.bc))) + ")";
        });

    py::class_<PyWorkspace> workspace(mod, "Workspace", "Every buffer one step needs, allocated once.");
    workspace
        .def(py::init<const ModelSpec&, py::ssize_t, py::handle, const std::string&>(), py::arg("spec"),
             py::arg("batch_size") = 4096, py::arg("dtype") = "float32", py::arg("device") = "cpu")
        .def_property_readonly("spec", [](const PyWorkspace& w) { return w.spec; })
        .def_property_readonly("batch_size", [](PyWorkspace& w) {
            return inspect(w, [](auto& ws, auto) { return ws.batch_size(); });
        })
        .def_property_readonly("dtype", [](PyWorkspace& w) {
            return w.is_f32() ? py::dtype::of<float>() : py::dtype::of<double>();
        })
        .def_property_readonly("device", [](const PyWorkspace& w) { return w.device_name; })
        .def_property_readonly("memory_bytes", [](PyWorkspace& w) {
            return inspect(w, [](auto& ws, auto) { return ws.memory_bytes(); });
        })
        .def_property_readonly("last_loss", [](const PyWorkspace& w) {
            return py::cast(w.last).attr("as_dict")();
        })
        .def("zero_grad", [](PyWorkspace& w, py::object stream) {
            dispatch(w, [&](auto& ws, auto) {
                with_space(ws, stream, [&](auto& space) {
                    py::gil_scoped_release r;
                    ws.zero_grad(space.stream());
                });
            });
        }, py::kw_only(), py::arg("stream") = py::none())
        .def("forward", [](PyWorkspace& w, py::handle params, py::handle x, int derivatives,
                           py::object u, py::object grad_u, py::object lap_u, py::object stream) {
                 return dispatch(w, [&](auto& ws, auto) {
                     return with_space(ws, stream, [&](auto& space) {
                         return forward_impl(ws, space, params, x, derivatives, u, grad_u, lap_u);
                     });
                 });
             },
             py::arg("params"), py::arg("x"), py::arg("derivatives") = 0, py::kw_only(),
             py::arg("u") = py::none(), py::arg("grad_u") = py::none(), py::arg("lap_u") = py::none(),
             py::arg("stream") = py::none(),
             "u [N,2]; with derivatives=1 also grad_u [N,d,2]; with 2 also lap_u [N,2].")
        .def("value_and_grad",
             [](PyWorkspace& w, py::handle params, py::handle grad, py::object grad_kappa,
                bool breakdown, py::object stream, py::kwargs kw) {
                 const BatchArgs b = parse_batch(kw, "value_and_grad");
                 return dispatch(w, [&](auto& ws, auto) {
                     return with_space(ws, stream, [&](auto& space) {
                         return value_and_grad_impl(w, ws, space, params, grad, grad_kappa,
                                                    breakdown, b);
                     });
                 });
             },
             py::arg("params"), py::arg("grad"), py::kw_only(), py::arg("grad_kappa") = py::none(),
             py::arg("breakdown") = false, py::arg("stream") = py::none(),
             "Loss of the given terms; writes its gradient into grad (overwritten). The points: "
             "batch= (a helmpinn.Batch) or the keywords x_pde, kappa, f, a_pde, b_pde, c_pde, x_data, "
             "y, x_bc, n_bc, alpha_bc, g_bc, counts; options w_pde, w_data, w_bc, train_fourier, "
             "check_finite.")
        .def("residuals",
             [](PyWorkspace& w, py::handle params, py::object out, py::object stream, py::kwargs kw) {
                 const BatchArgs b = parse_batch(kw, "residuals");
                 return dispatch(w, [&](auto& ws, auto) {
                     return with_space(ws, stream, [&](auto& space) {
                         return residual_impl(ResidualOp::residuals, ws, space, params, py::none(),
                                              out, py::none(), b);
                     });
                 });
             },
             py::arg("params"), py::kw_only(), py::arg("out") = py::none(),
             py::arg("stream") = py::none(),
             "Scaled residuals r [R] (loss == sum(r**2)); batch keywords as value_and_grad.")
        .def("jacobian",
             [](PyWorkspace& w, py::handle params, py::object out, py::object rows,
                py::object stream, py::kwargs kw) {
                 const BatchArgs b = parse_batch(kw, "jacobian");
                 return dispatch(w, [&](auto& ws, auto) {
                     return with_space(ws, stream, [&](auto& space) {
                         return residual_impl(ResidualOp::jacobian, ws, space, params, py::none(),
                                              out, rows, b);
                     });
                 });
             },
             py::arg("params"), py::kw_only(), py::arg("out") = py::none(),
             py::arg("rows") = py::none(), py::arg("stream") = py::none(),
             "J = dr/dparams [R, P], or rows=(start, stop) of it; batch keywords as value_and_grad.")
        .def("jvp",
             [](PyWorkspace& w, py::handle params, py::handle v, py::object out, py::object stream,
                py::kwargs kw) {
                 const BatchArgs b = parse_batch(kw, "jvp");
                 return dispatch(w, [&](auto& ws, auto) {
                     return with_space(ws, stream, [&](auto& space) {
                         return residual_impl(ResidualOp::jvp, ws, space, params, v, out,
                                              py::none(), b);
                     });
                 });
             },
             py::arg("params"), py::arg("v"), py::kw_only(), py::arg("out") = py::none(),
             py::arg("stream") = py::none(), "J v [R]; batch keywords as value_and_grad.")
        .def("vjp",
             [](PyWorkspace& w, py::handle params, py::handle wv, py::object out, py::object stream,
                py::kwargs kw) {
                 const BatchArgs b = parse_batch(kw, "vjp");
                 return dispatch(w, [&](auto& ws, auto) {
                     return with_space(ws, stream, [&](auto& space) {
                         return residual_impl(ResidualOp::vjp, ws, space, params, wv, out,
                                              py::none(), b);
                     });
                 });
             },
             py::arg("params"), py::arg("w"), py::kw_only(), py::arg("out") = py::none(),
             py::arg("stream") = py::none(), "J^T w [P]; batch keywords as value_and_grad.")
        .def("__repr__", [](const PyWorkspace& w) {
            return "Workspace(" + std::string(py::repr(py::cast(w.spec))) + ", dtype=" +
                   (w.is_f32() ? "float32" : "float64") + ", device='" + w.device_name + "')";
        });


    // Cache views (NumPy on the CPU, DeviceArray on CUDA) sharing memory with the workspace.
    def_cache(workspace, "x_input", false, [](const ModelSpec& s, const auto& b, py::ssize_t B) {
        return std::vector{std::pair{b.x_input, Shape{B, s.in_dim}}};
    });
    def_cache(workspace, "fourier_features", false, [](const ModelSpec& s, const auto& b, py::ssize_t B) {
        return std::vector{std::pair{b.features, Shape{B, 2 * s.ff_dim}}};
    });
    def_cache(workspace, "fourier_streams", false, [](const ModelSpec& s, const auto& b, py::ssize_t B) {
        return std::vector{std::pair{b.features, Shape{s.in_dim + 2, B, 2 * s.ff_dim}}};
    });
    def_cache(workspace, "du_dx", false, [](const ModelSpec& s, const auto& b, py::ssize_t B) {
        return std::vector{std::pair{b.du_dx, Shape{B, s.in_dim, 2}}};
    });
    def_cache(workspace, "d2u_dx2", false, [](const ModelSpec&, const auto& b, py::ssize_t B) {
        return std::vector{std::pair{b.d2u_dx2, Shape{B, 2}}};
    });
    def_cache(workspace, "grad", false, [](const ModelSpec& s, const auto& b, py::ssize_t) {
        return std::vector{std::pair{b.grad, Shape{py::ssize_t(s.num_params())}}};
    });
    def_cache(workspace, "dB", false, [](const ModelSpec& s, const auto& b, py::ssize_t) {
        return std::vector{std::pair{b.grad + s.offset_B(), Shape{s.in_dim, s.ff_dim}}};
    });
    // Per layer l = 0..L: value streams [batch, out_l], all streams [d+2, batch, out_l], and the
    // gradient accumulator's views.
    auto per_layer = [](auto fn) {
        return [fn](const ModelSpec& s, const auto& b, py::ssize_t B) {
            std::vector<decltype(fn(s, b, B, 0))> out;
            for (int l = 0; l <= s.num_hidden_layers; ++l) out.push_back(fn(s, b, B, l));
            return out;
        };
    };
    def_cache(workspace, "z", true, per_layer([](const ModelSpec& s, const auto& b, py::ssize_t B, int l) {
        return std::pair{b.z[l], Shape{B, s.layer_out(l)}};
    }));
    def_cache(workspace, "h", true, per_layer([](const ModelSpec& s, const auto& b, py::ssize_t B, int l) {
        return std::pair{b.h[l], Shape{B, s.layer_out(l)}};
    }));
    def_cache(workspace, "z_streams", true, per_layer([](const ModelSpec& s, const auto& b, py::ssize_t B, int l) {
        return std::pair{b.z[l], Shape{s.in_dim + 2, B, s.layer_out(l)}};
    }));
    def_cache(workspace, "h_streams", true, per_layer([](const ModelSpec& s, const auto& b, py::ssize_t B, int l) {
        return std::pair{b.h[l], Shape{s.in_dim + 2, B, s.layer_out(l)}};
    }));
    def_cache(workspace, "dW", true, per_layer([](const ModelSpec& s, const auto& b, py::ssize_t, int l) {
        return std::pair{b.grad + s.offset_W(l), Shape{s.layer_out(l), s.layer_in(l)}};
    }));
    def_cache(workspace, "db", true, per_layer([](const ModelSpec& s, const auto& b, py::ssize_t, int l) {
        return std::pair{b.grad + s.offset_b(l), Shape{s.layer_out(l)}};
    }));

    // The seed primitives: NumPy arrays on the host, or CUDA device arrays on their device
    // (with_primitive_space).
    mod.def("mse_backward", [](py::handle pred, py::handle target, py::object out, py::object stream) {
        return with_primitive_space(pred, "pred", {{target, "target"}, {out, "out"}}, !out.is_none(),
                                    stream, [&](auto& space, auto tag) {
            return mse_backward_impl<decltype(tag)>(space, pred, target, out);
        });
    }, py::arg("pred"), py::arg("target"), py::arg("out") = py::none(), py::kw_only(),
       py::arg("stream") = py::none(),
       "dL/dpred = 2/N (pred - target). On CUDA device arrays: out= required, stream= orders it.");
    mod.def("layer_backward", [](py::handle dL_dh, py::handle h, py::handle h_prev, py::handle W,
                                 bool apply_tanh_grad, py::object out, py::object stream) {
        return with_primitive_space(dL_dh, "dL_dh", {{h, "h"}, {h_prev, "h_prev"}, {W, "W"}},
                                    !out.is_none(), stream, [&](auto& space, auto tag) {
            return layer_backward_impl<decltype(tag)>(space, dL_dh, h, h_prev, W, apply_tanh_grad, out);
        });
    }, py::arg("dL_dh"), py::arg("h"), py::arg("h_prev"), py::arg("W"), py::arg("apply_tanh_grad"),
       py::arg("out") = py::none(), py::kw_only(), py::arg("stream") = py::none(),
       "Returns (dW, db, dh_prev) of one layer. On CUDA device arrays: out= required, stream= "
       "orders it.");
    mod.def("fourier_backward", [](py::handle dL_dphi, py::handle x, py::handle B, py::object out,
                                   py::object stream) {
        return with_primitive_space(dL_dphi, "dL_dphi", {{x, "x"}, {B, "B"}, {out, "out"}},
                                    !out.is_none(), stream, [&](auto& space, auto tag) {
            return fourier_backward_impl<decltype(tag)>(space, dL_dphi, x, B, out);
        });
    }, py::arg("dL_dphi"), py::arg("x"), py::arg("B"), py::arg("out") = py::none(), py::kw_only(),
       py::arg("stream") = py::none(),
       "dL/dB [d, m] from the adjoint of the Fourier features. On CUDA device arrays: out= "
       "required, stream= orders it.");
    mod.def("adam_step", [](py::handle params, py::handle grad, py::handle m, py::handle v, long step,
                            double lr, double beta1, double beta2, double eps, double weight_decay,
                            py::object stream) {
        with_primitive_space(params, "params", {{grad, "grad"}, {m, "m"}, {v, "v"}}, true, stream,
                             [&](auto& space, auto tag) {
            adam_impl<decltype(tag)>(space, params, grad, m, v, step, lr, beta1, beta2, eps,
                                     weight_decay);
        });
    }, py::arg("params"), py::arg("grad"), py::arg("m"), py::arg("v"), py::arg("step"), py::arg("lr"),
       py::arg("beta1") = 0.9, py::arg("beta2") = 0.999, py::arg("eps") = 1e-8,
       py::arg("weight_decay") = 0.0, py::kw_only(), py::arg("stream") = py::none(),
       "One fused Adam(W) step over flat buffers, in place (NumPy or CUDA device arrays).");

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
}
