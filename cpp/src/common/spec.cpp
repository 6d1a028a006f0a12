#include "helmpinn/spec.hpp"

#include <stdexcept>
#include <string>

namespace helmpinn {

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
}

std::size_t ModelSpec::offset_W(int l) const {
    std::size_t off = std::size_t(in_dim) * ff_dim;  // B
    for (int k = 0; k < l; ++k)
        off += std::size_t(layer_out(k)) * layer_in(k) + std::size_t(layer_out(k));
    return off;
}

std::vector<ParamInfo> ModelSpec::layout() const {
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
