// The CPU backend's buffers and their sizes, stated once: the backend allocates what
// buffer_sizes() gives (cpu_backend.hpp), and Workspace checks the same total against the
// machine's memory before it builds one (common/workspace.cpp).
#pragma once

#include <cstddef>

#include "helmpinn/spec.hpp"
#include "helmpinn/workspace.hpp"

namespace helmpinn {
namespace cpu {

constexpr int kTile = 64;              ///< points per tile
constexpr std::size_t kNumSlots = 32;  ///< fixed gradient slots (independent of threads)

/// Elements of every buffer of a CPU backend (of T unless noted). Per point of a chunk (batch
/// points, S = d + 2 streams): x_input [B, d], feat [S, B, 2m], z[l] [S, B, out_l], h[l]
/// [S, B, H], du_dx [B, d, 2], d2u [B, 2]. Per parameter: grad, the transposed weights wt and
/// vt (jvp's), the slots' gradients. Per thread: the tile rows and adjoints of value_and_grad
/// (scratch_stride) and the residual level's two row buffers (row_stride).
struct BufferSizes {
    int Sx;  ///< streams of the per-thread rows: d + 2, or the general operator's 2d + 1
    int threads;
    std::size_t x_input, feat, z[max_layers], h[max_layers], du_dx, d2u, grad;
    std::size_t wt, wt_off[max_layers];  ///< wt_off[l]: layer l's W^T in wt (and vt)
    std::size_t omega, Omega, slot_grad;
    std::size_t slot_loss;   ///< doubles: kNumSlots x the terms
    std::size_t slot_fresh;  ///< chars
    std::size_t adj_stride;  ///< one adjoint buffer [Sx, tile, max width]
    std::size_t scratch_stride, scratch;
    std::size_t row_adj, row_stride, row_scratch;
    /// Bytes of every buffer with T of `sizeof_t` bytes (vt counted with wt).
    std::size_t bytes(std::size_t sizeof_t) const;
};

/// The sizes for `spec`, chunks of `batch` points and per-thread buffers for `threads`
/// threads, every product and sum checked (detail::OutOfMemory naming "Workspace" when one
/// overflows std::size_t).
BufferSizes buffer_sizes(const ModelSpec& spec, std::size_t batch, int threads);

/// Threads the per-thread buffers are sized for: as many as a parallel_for may run here.
int buffer_threads();

}  // namespace cpu
}  // namespace helmpinn
