// ModelSpec, LossBreakdown and loss_terms(): the model's shape and the loss's terms.
#include <pybind11/stl.h>

#include <string>

#include "batch_args.hpp"
#include "common.hpp"

namespace helmpinn {
namespace bindings {

void register_spec(py::module_& mod) {
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

    // The loss of one call: its total and its terms' means, each term's name from the table.
    const auto* terms = terms::term_table<double>();
    auto per_term = [terms](const LossBreakdown& l) {
        py::dict d;
        for (int t = 0; t < terms::kNumTerms; ++t) d[terms[t].name] = l.mean[t];
        return d;
    };
    auto as_dict = [per_term](const LossBreakdown& l) {
        py::dict d;
        d["total"] = l.total;
        for (auto item : per_term(l)) d[item.first] = item.second;
        return d;
    };
    py::class_<LossBreakdown> breakdown(mod, "LossBreakdown",
                                        "The loss of one call: total = the sum of w_t * t over "
                                        "the terms t of loss_terms() (pde, data, bc), each term "
                                        "its unweighted mean over its count (0 when absent): "
                                        "b.terms (a dict by term name) or b.pde, b.data, ...");
    breakdown.def_readonly("total", &LossBreakdown::total);
    breakdown.def_property_readonly("terms", per_term,
                                    "Each term's unweighted mean, keyed by the term names of "
                                    "loss_terms(), in their order.");
    for (int t = 0; t < terms::kNumTerms; ++t)
        breakdown.def_property_readonly(terms[t].name,
                                        [t](const LossBreakdown& l) { return l.mean[t]; });
    breakdown.def("__float__", [](const LossBreakdown& l) { return l.total; })
        .def("as_dict", as_dict)
        .def("__repr__", [as_dict](const LossBreakdown& l) {
            std::string out = "LossBreakdown(";
            bool first = true;
            for (auto item : as_dict(l)) {
                out += (first ? "" : ", ") + std::string(py::str(item.first)) + "=" +
                       std::string(py::repr(item.second));
                first = false;
            }
            return out + ")";
        });

    mod.def("loss_terms", &loss_terms,
            "The loss terms in order, each a dict: 'term' (its name, the key of counts= and of "
            "LossBreakdown), 'weight' (its weight's keyword) and 'arrays' (its array keywords in "
            "order, the points first, each a dict: 'keyword', 'shape' ('N' points, 'd' "
            "dimensions, 2 a complex value as (re, im)), 'required', 'constant' (None, 'real' or "
            "'complex': what may stand in for the array) and 'operator' (giving it selects the "
            "general operator)).");
}

}  // namespace bindings
}  // namespace helmpinn
