// The CPU backend's buffer sizes (buffers.hpp).
#include "buffers.hpp"

#include <initializer_list>

#include "../common/checked.hpp"
#include "parallel.hpp"

namespace helmpinn {
namespace cpu {

namespace {

constexpr const char* kWhat = "Workspace";

std::size_t mul(std::size_t a, std::size_t b) { return helmpinn::detail::checked_mul(a, b, kWhat); }
std::size_t add(std::size_t a, std::size_t b) { return helmpinn::detail::checked_add(a, b, kWhat); }

}  // namespace

BufferSizes buffer_sizes(const ModelSpec& sp, std::size_t batch, int threads) {
    const int d = sp.in_dim, m = sp.ff_dim, H = sp.hidden_dim, L = sp.num_hidden_layers;
    const std::size_t S = std::size_t(d) + 2, tile = std::size_t(kTile), np = sp.num_params();
    const std::size_t Bs = mul(batch, S);
    BufferSizes z{};
    z.Sx = d + 2 > 2 * d + 1 ? d + 2 : 2 * d + 1;
    z.threads = threads;
    const std::size_t Sx = std::size_t(z.Sx), rows = Sx * tile;  // a tile's rows of every stream
    z.x_input = mul(batch, std::size_t(d));
    z.feat = mul(Bs, 2 * std::size_t(m));
    for (int l = 0; l <= L; ++l) z.z[l] = mul(Bs, std::size_t(sp.layer_out(l)));
    for (int l = 0; l < L; ++l) z.h[l] = mul(Bs, std::size_t(H));
    z.du_dx = mul(batch, 2 * std::size_t(d));
    z.d2u = mul(batch, 2);
    z.grad = np;
    for (int l = 0; l <= L; ++l) {
        z.wt_off[l] = z.wt;
        z.wt = add(z.wt, mul(std::size_t(sp.layer_in(l)), std::size_t(sp.layer_out(l))));
    }
    z.omega = mul(std::size_t(d), std::size_t(m));
    z.Omega = std::size_t(m);
    z.slot_grad = mul(kNumSlots, np);
    z.slot_loss = kNumSlots * terms::kNumTerms;
    z.slot_fresh = kNumSlots;
    z.adj_stride = mul(rows, std::size_t(sp.max_width()));
    // value_and_grad's rows: two adjoint buffers, every layer's z and h, x, the features
    std::size_t st = mul(2, z.adj_stride);
    for (int l = 0; l <= L; ++l)
        st = add(st, mul(rows, std::size_t(sp.layer_out(l)) + (l < L ? std::size_t(H) : 0)));
    st = add(st, add(tile * std::size_t(d), mul(rows, 2 * std::size_t(m))));
    z.scratch_stride = st;
    z.scratch = mul(std::size_t(threads), st);
    // The residual level: two buffers [Sx, 2 tile, width], the jacobian's adjoints of both
    // components' rows or jvp's tangents (one tile of rows each), in 16-element blocks.
    z.row_adj = mul(2, z.adj_stride);
    z.row_stride = add(mul(2, z.row_adj), 15) / 16 * 16;
    z.row_scratch = mul(std::size_t(threads), z.row_stride);
    return z;
}

std::size_t BufferSizes::bytes(std::size_t sizeof_t) const {
    std::size_t n = 0;  // elements of T
    for (std::size_t v : {x_input, feat, du_dx, d2u, grad, wt, wt, omega, Omega, slot_grad,
                          scratch, row_scratch})
        n = add(n, v);
    for (int l = 0; l < max_layers; ++l) n = add(add(n, z[l]), h[l]);
    return add(add(mul(n, sizeof_t), mul(slot_loss, sizeof(double))), slot_fresh);
}

int buffer_threads() {
    const int t = max_threads();
    return t > 1 ? t : 1;
}

}  // namespace cpu
}  // namespace helmpinn
