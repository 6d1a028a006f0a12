// The batch keywords and LossInputs, looped over the loss-term table (batch_args.hpp).
#include "batch_args.hpp"

#include <complex>
#include <string>

namespace helmpinn {
namespace bindings {

using namespace terms;

namespace {

// The tables' names and shapes do not depend on T.
const TermInfo<double>& term_info(int t) { return term_table<double>()[t]; }
const ArrayInfo<double>& array_info(int a) { return array_table<double>()[a]; }

// The index of `key` in the array table, or -1.
int array_index(const std::string& key) {
    for (int a = 0; a < num_arrays<double>(); ++a)
        if (key == array_info(a).name) return a;
    return -1;
}

// The index of the term whose weight keyword is `key`, or -1.
int weight_index(const std::string& key) {
    for (int t = 0; t < kNumTerms; ++t)
        if (key == term_info(t).weight_name) return t;
    return -1;
}

// "'pde', 'data', 'bc'" and "{'pde': n, 'data': n, 'bc': n}".
std::string term_names(bool as_dict) {
    std::string out;
    for (int t = 0; t < kNumTerms; ++t)
        out += std::string(t ? ", " : "") + "'" + term_info(t).name + "'" + (as_dict ? ": n" : "");
    return as_dict ? "{" + out + "}" : out;
}

// Every keyword a loss-level call takes besides its own arguments, for the error message.
std::string batch_keywords() {
    std::string out = "batch";
    for (int a = 0; a < num_arrays<double>(); ++a) out += std::string(", ") + array_info(a).name;
    for (int t = 0; t < kNumTerms; ++t) out += std::string(", ") + term_info(t).weight_name;
    return out + ", counts, train_fourier, check_finite";
}

std::string name_of_type(py::handle o) { return py::str(py::type::of(o).attr("__name__")); }

// The shape of an array of `extent` in words, N named `N` ("(N_pde, 2, 2)"), and its pattern.
std::string shape_doc(Extent e, const std::string& N, py::ssize_t d) {
    const std::string ds = std::to_string(d);
    switch (e) {
        case Extent::d: return "(" + N + ", " + ds + ")";
        case Extent::one: return "(" + N + ",)";
        case Extent::two: return "(" + N + ", 2)";
        case Extent::d_two: return "(" + N + ", " + ds + ", 2)";
    }
    return "";
}

Shape shape_pattern(Extent e, py::ssize_t n, py::ssize_t d) {
    switch (e) {
        case Extent::d: return {n, d};
        case Extent::one: return {n};
        case Extent::two: return {n, 2};
        case Extent::d_two: return {n, d, 2};
    }
    return {};
}

// counts={"pde": n, ...}: each given count must be >= the local points of its term (checked
// again in the core); a missing key keeps the local count.
template <typename T>
void parse_counts(const py::object& counts, LossInputs<T>& in) {
    if (!given(counts)) return;
    if (!py::isinstance<py::dict>(counts))
        throw py::type_error("counts: expected a dict like " + term_names(true));
    for (auto item : counts.cast<py::dict>()) {
        const std::string key = py::str(item.first);
        int t = 0;
        while (t < kNumTerms && key != term_info(t).name) ++t;
        if (t == kNumTerms)
            throw py::value_error("counts: unknown term '" + key + "' (expected " +
                                  term_names(false) + ")");
        long long v;
        try {
            v = py::reinterpret_borrow<py::object>(item.second).cast<long long>();
        } catch (const py::cast_error&) {
            throw py::type_error("counts['" + key + "']: expected an integer");
        }
        const TermInfo<T>& term = term_table<T>()[t];
        const std::size_t local = in.*term.num;
        if (v < 0 || std::size_t(v) < local)
            throw py::value_error("counts['" + key + "']: expected an integer >= the " + key +
                                  " points given here (" + std::to_string(local) + "), got " +
                                  std::to_string(v));
        in.*term.count = std::size_t(v);
    }
}

// A constant given in place of array `a`: a real or complex number, converted to T.
template <typename T>
void set_constant(const ArrayInfo<T>& a, const py::object& o, const std::string& shape,
                  LossInputs<T>& in) {
    const std::string name = a.name;
    if (a.constant == Constant::real) {
        double v;
        try {
            v = o.cast<double>();
        } catch (const py::cast_error&) {
            throw py::type_error(name + ": expected a float or an array of shape " + shape);
        }
        in.*a.real_const = to_scalar<T>(v, a.name);
        return;
    }
    std::complex<double> v;
    try {
        v = o.cast<std::complex<double>>();
    } catch (const py::cast_error&) {
        throw py::type_error(name + ": expected a complex number or an array of shape " + shape);
    }
    (in.*a.complex_const)[0] = to_scalar<T>(v.real(), (name + " (real part)").c_str());
    (in.*a.complex_const)[1] = to_scalar<T>(v.imag(), (name + " (imaginary part)").c_str());
}

}  // namespace

BatchArgs parse_batch(const py::kwargs& kw, const char* op) {
    BatchArgs b;
    auto take = [&](const std::string& key, py::handle value) {
        if (key == "counts") {
            b.counts = py::reinterpret_borrow<py::object>(value);
            return true;
        }
        if (array_index(key) < 0) return false;
        if (!value.is_none()) b.arrays[py::str(key)] = value;
        return true;
    };
    if (kw.contains("batch") && given(kw["batch"])) {
        py::object batch = kw["batch"];
        if (!py::hasattr(batch, "__helmpinn_batch__"))
            throw py::type_error(std::string(op) + "(): batch: expected a helmpinn.Batch, got " +
                                 name_of_type(batch) +
                                 " (a dict of keywords is passed unpacked, **batch)");
        std::string clash;
        for (auto item : kw) {
            const std::string key = py::str(item.first);
            if (key == "counts" || array_index(key) >= 0) clash += (clash.empty() ? "" : ", ") + key;
        }
        if (!clash.empty())
            throw py::type_error(std::string(op) + "(): batch= given together with " + clash +
                                 "; pass the points either in the helmpinn.Batch or as keywords, "
                                 "not both");
        py::tuple t = batch.attr("__helmpinn_batch__")();
        for (auto item : py::dict(t[0])) {
            const std::string key = py::str(item.first);
            if (!take(key, item.second)) throw py::type_error("batch: unexpected entry '" + key + "'");
        }
        b.batch_dtype = t[1];
    }
    for (auto item : kw) {
        const std::string key = py::str(item.first);
        if (key == "batch" || take(key, item.second)) continue;
        py::object value = py::reinterpret_borrow<py::object>(item.second);
        if (const int t = weight_index(key); t >= 0) {
            try {
                b.weights[t] = value.cast<double>();
            } catch (const py::cast_error&) {
                throw py::type_error(key + ": expected a float, got " + name_of_type(value));
            }
        } else if (key == "train_fourier" || key == "check_finite") {
            if (!py::isinstance<py::bool_>(value))
                throw py::type_error(key + ": expected True or False");
            (key == "train_fourier" ? b.train_fourier : b.check_finite) = value.cast<bool>();
        } else {
            throw py::type_error(std::string(op) + "() got an unexpected keyword argument '" + key +
                                 "' (batch keywords: " + batch_keywords() + ")");
        }
    }
    return b;
}

template <typename T, typename Space>
LossInputs<T> build_inputs(const ModelSpec& spec, Space& space, const BatchArgs& b,
                           Inputs<T>& inputs) {
    const py::ssize_t d = spec.in_dim;
    if (given(b.batch_dtype)) {
        const py::dtype dt = py::dtype::from_args(b.batch_dtype);
        if (dt.kind() != 'f' || dt.itemsize() != py::ssize_t(sizeof(T)))
            throw py::type_error("batch: holds " + std::string(py::str(dt)) +
                                 " arrays but the workspace is " + dtype_name<T>() +
                                 "; convert it once with batch.astype(workspace.dtype)");
    }
    auto get = [&](const char* name) -> py::object {
        return b.arrays.contains(name) ? py::object(b.arrays[name]) : py::object(py::none());
    };
    LossInputs<T> in;
    for (int t = 0; t < kNumTerms; ++t) {
        const TermInfo<T>& term = term_table<T>()[t];
        in.*term.weight = to_scalar<T>(b.weights[t], term.weight_name);
    }
    in.train_fourier = b.train_fourier;
    in.check_finite = b.check_finite;

    for (int a0 = 0; a0 < num_arrays<T>();) {
        // The arrays of one term: a0 its points, then the others up to a1.
        const int t = array_table<T>()[a0].term;
        int a1 = a0 + 1;
        while (a1 < num_arrays<T>() && array_table<T>()[a1].term == t) ++a1;
        const ArrayInfo<T>& points = array_table<T>()[a0];
        const py::object x = get(points.name);
        if (!given(x)) {
            for (int a = a0 + 1; a < a1; ++a)
                if (given(get(array_table<T>()[a].name)))
                    throw py::value_error(std::string(array_table<T>()[a].name) +
                                          ": given without " + points.name);
            a0 = a1;
            continue;
        }
        const TermInfo<T>& term = term_table<T>()[t];
        const std::string N = std::string("N_") + term.name;
        auto X = space.check(x, points.name, {-1, d}, false, shape_doc(Extent::d, "N", d).c_str());
        const py::ssize_t n = X.shape[0];
        in.*points.array = X.ptr;
        in.*term.num = std::size_t(n);
        inputs.push_back({X, points.name});
        for (int a = a0 + 1; a < a1; ++a) {
            const ArrayInfo<T>& info = array_table<T>()[a];
            const py::object o = get(info.name);
            const std::string shape = shape_doc(info.extent, N, d) + " with " + N + " = len(" +
                                      points.name + ")";
            if (!given(o)) {
                if (info.required)
                    throw py::value_error(std::string(info.name) + ": required with " +
                                          points.name + " (an array of shape " + shape + ")");
                continue;
            }
            in.pde_operator = in.pde_operator || info.selects_operator;
            if (info.constant != Constant::none && !space.is_array(o)) {
                set_constant(info, o, shape, in);
                continue;
            }
            auto A = space.check(o, info.name, shape_pattern(info.extent, n, d), false,
                                 shape.c_str());
            in.*info.array = A.ptr;
            inputs.push_back({A, info.name});
        }
        a0 = a1;
    }

    // The PDE term's c: kappa without the general operator; with it, c_pde or kappa (a real c)
    // in its place, exactly one of them. Its a: a_pde (an a per axis, or a constant) or a_lap
    // (one a per point), not both.
    if (in.num_pde) {
        const bool kappa = given(get("kappa")), c = given(get("c_pde"));
        if (given(get("a_pde")) && given(get("a_lap")))
            throw py::value_error("a_lap: given together with a_pde; give one of them (a_pde: an a "
                                  "per axis [N_pde, d] or a constant, a_lap: one a per point [N_pde])");
        if (in.pde_operator) {
            if (kappa && c)
                throw py::value_error("c_pde: given together with kappa; give one of them (c_pde "
                                      "is the general operator's c, kappa a real c)");
            if (!kappa && !c)
                throw py::value_error("c_pde: required with a_pde, a_lap or b_pde (or kappa in its "
                                      "place): a complex constant or an array of shape (N_pde, 2)");
            if (kappa && !in.kappa) {  // a constant kappa is the operator's constant c
                in.c_const[0] = in.kappa_const;
                in.kappa_const = T(0);
            }
        } else if (!kappa) {
            throw py::value_error("kappa: required with x_pde (a float k^2, or an array of shape "
                                  "(N_pde,))");
        }
    }
    parse_counts(b.counts, in);
    return in;
}

py::list loss_terms() {
    py::list out;
    for (int t = 0; t < kNumTerms; ++t) {
        py::list arrays;
        for (int a = 0; a < num_arrays<double>(); ++a) {
            const ArrayInfo<double>& info = array_info(a);
            if (info.term != t) continue;
            const Extent e = info.extent;
            py::list dims;
            dims.append("N");
            if (e == Extent::d || e == Extent::d_two) dims.append("d");
            if (e == Extent::two || e == Extent::d_two) dims.append(2);
            const py::tuple shape(dims);
            py::dict entry;
            entry["keyword"] = info.name;
            entry["shape"] = shape;
            entry["required"] = info.required;
            entry["constant"] = info.constant == Constant::real      ? py::object(py::str("real"))
                                : info.constant == Constant::complex ? py::object(py::str("complex"))
                                                                     : py::object(py::none());
            entry["operator"] = info.selects_operator;
            arrays.append(entry);
        }
        py::dict term;
        term["term"] = term_info(t).name;
        term["weight"] = term_info(t).weight_name;
        term["arrays"] = arrays;
        out.append(term);
    }
    return out;
}

template LossInputs<float> build_inputs(const ModelSpec&, HostSpace<float>&, const BatchArgs&,
                                        Inputs<float>&);
template LossInputs<double> build_inputs(const ModelSpec&, HostSpace<double>&, const BatchArgs&,
                                         Inputs<double>&);
template LossInputs<float> build_inputs(const ModelSpec&, DeviceSpace<float>&, const BatchArgs&,
                                        Inputs<float>&);
template LossInputs<double> build_inputs(const ModelSpec&, DeviceSpace<double>&, const BatchArgs&,
                                         Inputs<double>&);

}  // namespace bindings
}  // namespace helmpinn
