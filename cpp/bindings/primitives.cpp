// The seed primitives (mse_backward, layer_backward, fourier_backward, adam_step): on NumPy
// arrays, or on CUDA device arrays on their device.
#include <initializer_list>
#include <string>
#include <utility>

#include "common.hpp"

namespace helmpinn {
namespace bindings {

namespace {

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
        if (!o.equal(dt))
            throw py::type_error(std::string(name) + ": dtype " + std::string(py::str(o)) +
                                 " differs from " + first_name + "'s " + std::string(py::str(dt)) +
                                 "; all arrays of one call must have the same dtype");
    }
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

void register_primitives(py::module_& mod) {
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
}

}  // namespace bindings
}  // namespace helmpinn
