// helmpinn/spec.hpp: the model's shape and the layout of its ONE flat parameter buffer.
//
// The network is a Fourier-feature tanh MLP with two outputs (Re u, Im u):
//
//     phi = [sin(2 pi x B) ; cos(2 pi x B)]          B  [in_dim, ff_dim]
//     h_0 = tanh(W_0 phi + b_0)                      W_0 [hidden, 2 ff_dim]
//     h_l = tanh(W_l h_{l-1} + b_l), l = 1..L-1      W_l [hidden, hidden]
//     u   = W_L h_{L-1} + b_L                        W_L [2, hidden]
//
// with L = num_hidden_layers. Every parameter tensor is a row-major slice of one contiguous
// buffer, in this fixed order: B, W0, b0, W1, b1, ..., W{L}, b{L}. A gradient or optimiser
// state buffer has the same layout. Nothing here allocates except layout().
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace helmpinn {

/// The most tanh layers a model may have (a Workspace refuses more), and so the most linear
/// layers: every per-layer array of the library is sized by these two.
constexpr int max_hidden_layers = 15;
constexpr int max_layers = max_hidden_layers + 1;

/// One named tensor of the flat parameter buffer.
struct ParamInfo {
    std::string name;                 ///< "B", "W0", "b0", ..., "W{L}", "b{L}"
    std::vector<std::size_t> shape;   ///< row-major shape
    std::size_t offset;               ///< first element inside the flat buffer
    std::size_t size;                 ///< number of elements
};

/// The shape of a model. All members are plain ints so that the struct can be filled by
/// aggregate initialisation: ModelSpec{2, 32, 128, 4}.
struct ModelSpec {
    int in_dim = 1;             ///< spatial dimension d: 1, 2 or 3
    int ff_dim = 16;            ///< number of Fourier frequencies m (features are 2m)
    int hidden_dim = 64;        ///< width H of every hidden layer
    int num_hidden_layers = 3;  ///< number L of tanh layers (>= 1)

    /// Largest ff_dim: the feature width 2 * ff_dim must fit in an int.
    static constexpr int max_ff_dim = 1073741823;
    /// Largest number of parameters: a float64 buffer of them must fit in a signed 64-bit
    /// byte count (num_params * 8 < 2^63), so every size derived from it does too.
    static constexpr std::size_t max_num_params = std::size_t(1) << 59;

    /// Throws std::invalid_argument naming the bad member if the shape is not usable,
    /// including a shape whose parameter count exceeds max_num_params (its size arithmetic is
    /// overflow-checked).
    void validate() const;

    /// Number of linear layers, L + 1 (hidden layers plus the linear output layer).
    int num_layers() const { return num_hidden_layers + 1; }
    /// Input and output width of linear layer l (0 <= l <= L).
    int layer_in(int l) const { return l == 0 ? feature_width() : hidden_dim; }
    int layer_out(int l) const { return l == num_hidden_layers ? 2 : hidden_dim; }

    /// Width of the Fourier features, 2 * ff_dim; throws std::invalid_argument when it
    /// overflows an int (ff_dim > max_ff_dim).
    int feature_width() const;

    /// Offsets (in elements) into the flat buffer (overflow-checked: std::invalid_argument).
    std::size_t offset_B() const { return 0; }
    std::size_t offset_W(int l) const;
    std::size_t offset_b(int l) const;
    std::size_t num_params() const { return offset_W(num_hidden_layers + 1); }

    /// Largest width any activation has (max of 2m and H).
    int max_width() const { return feature_width() > hidden_dim ? feature_width() : hidden_dim; }

    /// (name, shape, offset, size) of every tensor, in buffer order.
    std::vector<ParamInfo> layout() const;

    /// Forward + backward matrix-product flops per point for `streams` streams
    /// (MATH.md: 6 * streams * (2mH + (L-1)H^2 + 2H)).
    double flops_per_point(int streams) const;

    bool operator==(const ModelSpec& o) const {
        return in_dim == o.in_dim && ff_dim == o.ff_dim && hidden_dim == o.hidden_dim &&
               num_hidden_layers == o.num_hidden_layers;
    }
    bool operator!=(const ModelSpec& o) const { return !(*this == o); }
};

}  // namespace helmpinn
