// Workspace: the model's buffers and every call that computes on them (forward, the loss
// level, the residual level) and views of its caches.
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "batch_args.hpp"
#include "common.hpp"

namespace helmpinn {
namespace bindings {

namespace {

py::dtype parse_dtype(py::handle obj) {
    py::dtype dt = py::dtype::from_args(py::reinterpret_borrow<py::object>(obj));
    if (!dt.equal(py::dtype::of<float>()) && !dt.equal(py::dtype::of<double>()))
        throw py::type_error("dtype: expected 'float32' or 'float64', got " +
                             std::string(py::str(dt)));
    return dt;
}

// The one parser of device names, for Workspace and (as _core.parse_device) for the Python
// layer: "cpu" -> (cpu, 0: the core's unused id), "cuda" -> (cuda, 0), "cuda:N" -> (cuda, N)
// with N ASCII digits that fit an int; ValueError naming the argument for anything else.
std::pair<Device, int> parse_device(const std::string& s) {
    if (s == "cpu") return {Device::cpu, 0};
    if (s == "cuda") return {Device::cuda, 0};
    if (s.rfind("cuda:", 0) != 0)
        throw py::value_error("device: expected 'cpu' or 'cuda', got '" + s + "'");
    constexpr long long most = std::numeric_limits<int>::max();
    long long id = 0;
    bool ok = s.size() > 5;
    for (std::size_t i = 5; ok && i < s.size(); ++i) {
        ok = s[i] >= '0' && s[i] <= '9';
        id = std::min(10 * id + (s[i] - '0'), most + 1);
    }
    if (!ok || id > most)
        throw py::value_error("device: expected 'cuda:N' with N a device number from 0 to " +
                              std::to_string(most) + ", got '" + s + "'");
    return {Device::cuda, int(id)};
}

// A view of workspace memory that keeps the workspace alive through `base`.
template <typename T>
py::array view(T* ptr, Shape shape, py::handle base) {
    return py::array_t<T>(shape, ptr, base);
}

}  // namespace

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
        const auto [d, id] = parse_device(dev);
        if (dt.equal(py::dtype::of<float>()))
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

template <typename T, typename Space>
py::object value_and_grad_impl(PyWorkspace& pw, Workspace<T>& ws, Space& space, py::handle params,
                               py::handle grad, py::object grad_kappa, bool breakdown,
                               const BatchArgs& b) {
    const py::ssize_t npar = py::ssize_t(ws.spec().num_params());
    auto P = space.check(params, "params", {npar}, false);
    auto G = space.check(grad, "grad", {npar}, true);
    check_no_overlap(G, "grad", P, "params");
    std::vector<std::pair<Checked<T>, const char*>> inputs;
    LossInputs<T> in = build_inputs(ws.spec(), space, b, inputs);
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
    LossInputs<T> in = build_inputs(ws.spec(), space, b, inputs);
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

}  // namespace

void register_workspace(py::module_& mod) {
    mod.def("parse_device", [](py::handle device) {
        const std::string expected = "device: expected 'cpu', 'cuda' or 'cuda:N', got ";
        if (!py::isinstance<py::str>(device))
            throw py::type_error(expected +
                                 std::string(py::str(py::type::of(device).attr("__name__"))));
        std::string name;
        try {
            name = device.cast<std::string>();
        } catch (const py::cast_error&) {  // not UTF-8 (a lone surrogate)
            throw py::value_error(expected + std::string(py::repr(device)));
        }
        const auto [d, id] = parse_device(name);
        // Python's "cpu" has no device number: -1
        return d == Device::cpu ? std::pair<std::string, int>("cpu", -1)
                                : std::pair<std::string, int>("cuda", id);
    }, py::arg("device"),
    "(\"cpu\", -1) or (\"cuda\", N) for \"cpu\", \"cuda\" (device 0) or \"cuda:N\": the parser "
    "Workspace uses; ValueError (TypeError for a non-string) naming anything else. Checks nothing "
    "about the machine.");
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
             "batch= (a helmpinn.Batch) or the array keywords of loss_terms() (x_pde, kappa, "
             "...) and counts; options: each term's weight (w_pde, ...), train_fourier, "
             "check_finite. breakdown=True: a LossBreakdown instead of the total.")
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

}

}  // namespace bindings
}  // namespace helmpinn
