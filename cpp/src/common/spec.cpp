#include "helmpinn/spec.hpp"

#include <stdexcept>
#include <string>

#include "checked.hpp"

namespace helmpinn {

namespace {

[[noreturn]] void too_big(const ModelSpec& s) {
    throw std::invalid_argument(
        "ModelSpec: the model is too large: its parameter count overflows (in_dim=" +
        std::to_string(s.in_dim) + ", ff_dim=" + std::to_string(s.ff_dim) + ", hidden_dim=" +
        std::to_string(s.hidden_dim) + ", num_hidden_layers=" +
        std::to_string(s.num_hidden_layers) + "; at most " +
        std::to_string(ModelSpec::max_num_params) + " parameters)");
}

// a * b + c for sizes of one spec, or too_big(s).
std::size_t mul_add(const ModelSpec& s, std::size_t a, std::size_t b, std::size_t c) {
    std::size_t r;
    if (detail::mul_overflows(a, b, r) || detail::add_overflows(r, c, r)) too_big(s);
    return r;
}

// Every extent as a size_t; negative members (an unvalidated spec) are refused, not wrapped.
std::size_t extent(int v, const char* name) {
    if (v < 0)
        throw std::invalid_argument(std::string("ModelSpec: ") + name + " must be >= 1, got " +
                                    std::to_string(v));
    return std::size_t(v);
}

}  // namespace

int ModelSpec::feature_width() const {
    if (ff_dim > max_ff_dim)
        throw std::invalid_argument("ModelSpec: ff_dim must be <= " + std::to_string(max_ff_dim) +
                                    " (2 * ff_dim features must fit in an int), got " +
                                    std::to_string(ff_dim));
    return 2 * ff_dim;
}

void ModelSpec::validate() const {
    auto bad = [](const char* name, int v, const char* want) {
        throw std::invalid_argument(std::string("ModelSpec: ") + name + " must be " + want +
                                    ", got " + std::to_string(v));
    };
    if (in_dim < 1 || in_dim > 3) bad("in_dim", in_dim, "1, 2 or 3");
    if (ff_dim < 1) bad("ff_dim", ff_dim, ">= 1");
    if (hidden_dim < 1) bad("hidden_dim", hidden_dim, ">= 1");
    if (num_hidden_layers < 1 || num_hidden_layers > 15)
        bad("num_hidden_layers", num_hidden_layers, "between 1 and 15");
    (void)feature_width();  // ff_dim <= max_ff_dim
    if (num_params() > max_num_params) too_big(*this);
}

std::size_t ModelSpec::offset_W(int l) const {
    const std::size_t in = extent(in_dim, "in_dim"), m = extent(ff_dim, "ff_dim");
    std::size_t off = mul_add(*this, in, m, 0);  // B
    for (int k = 0; k < l; ++k) {
        const std::size_t o = extent(layer_out(k), "hidden_dim");
        off = mul_add(*this, o, extent(layer_in(k), "hidden_dim") + 1, off);  // W_k and b_k
    }
    return off;
}

std::size_t ModelSpec::offset_b(int l) const {
    return mul_add(*this, extent(layer_out(l), "hidden_dim"), extent(layer_in(l), "hidden_dim"),
                   offset_W(l));
}

std::vector<ParamInfo> ModelSpec::layout() const {
    validate();
    std::vector<ParamInfo> out;
    out.push_back({"B", {std::size_t(in_dim), std::size_t(ff_dim)}, offset_B(),
                   std::size_t(in_dim) * ff_dim});
    for (int l = 0; l <= num_hidden_layers; ++l) {
        const std::size_t o = layer_out(l), i = layer_in(l);
        out.push_back({"W" + std::to_string(l), {o, i}, offset_W(l), o * i});
        out.push_back({"b" + std::to_string(l), {o}, offset_b(l), o});
    }
    return out;
}

double ModelSpec::flops_per_point(int streams) const {
    const double m = ff_dim, H = hidden_dim, L = num_hidden_layers;
    return 6.0 * streams * (2.0 * m * H + (L - 1.0) * H * H + 2.0 * H);
}

}  // namespace helmpinn
