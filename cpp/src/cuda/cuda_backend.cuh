// The CUDA backend: Backend<T> on one device. Every device buffer is allocated once, in the
// constructor; forward(), value_and_grad() and the residual level (vjp, rows) allocate nothing,
// launch on the caller's stream, and the only device-to-host copy is value_and_grad's loss sums
// (plus, when check_finite is asked for, one small copy of the finiteness flags before any
// work). Every loss term comes from the one loss-term table (common/loss_terms.hpp): the train
// kernel's seed step calls its residual and adjoint, rows_kernel (residual.cuh) its adjoint.
//
// Every buffer is sized for the Laplacian's d + 2 streams a point. The general operator's points
// carry 2d + 1 (loss_terms.hpp, PdeOperator: d - 1 streams more) and run in the same
// buffers (plan_operator): tiles of fewer points, whose 2d + 1 stream rows fit in the rows the
// Laplacian's tile was planned for, and chunks of fewer points, whose 2d + 1 streams fit in the
// caches' (d + 2) batch_size rows (the caches' point stride is then the smaller chunk). Nothing
// is allocated for it, and the Laplacian's tiles, chunks and kernels are what they were.
//
// Instantiated for float in cuda_backend_f32.cu and for double in cuda_backend_f64.cu (two
// translation units, so that a two-core build compiles them side by side).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../backend.hpp"
#include "cuda_common.cuh"
#include "fused.cuh"
#include "residual.cuh"

namespace helmpinn {
namespace cuda {

/// Calls f(std::integral_constant<int, d>, std::bool_constant<gs>) for run-time d in 1..3.
template <typename F>
void dispatch(int d, bool gs, F&& f) {
    using I1 = std::integral_constant<int, 1>;
    using I2 = std::integral_constant<int, 2>;
    using I3 = std::integral_constant<int, 3>;
    if (d == 1) {
        if (gs) f(I1{}, std::true_type{}); else f(I1{}, std::false_type{});
    } else if (d == 2) {
        if (gs) f(I2{}, std::true_type{}); else f(I2{}, std::false_type{});
    } else {
        if (gs) f(I3{}, std::true_type{}); else f(I3{}, std::false_type{});
    }
}

/// The backend's tuning knobs, read from the environment once per workspace (when it is made)
/// and nowhere else:
///   HELMPINN_CUDA_TILE=P          points per tile of the train and forward kernels, an integer
///                                 from 1 to kMaxTile (the residual level's tiles: max(1, P / 2));
///   HELMPINN_CUDA_SCRATCH=global  the activation buffers in global memory;
///   HELMPINN_CUDA_VERBOSE=1       the launch plan printed to stderr (other values: not printed).
/// Unset or empty, the plan chooses. Any other value of the first two is refused with
/// std::invalid_argument naming the variable, the value and what was expected.
struct TuningKnobs {
    int tile = 0;  // 0: chosen by the plan
    bool global_scratch = false;
    bool verbose = false;
};

inline TuningKnobs read_tuning_knobs() {
    TuningKnobs k;
    if (const char* v = std::getenv("HELMPINN_CUDA_TILE"); v && *v) {
        long long P = 0;
        bool digits = true;
        for (const char* c = v; digits && *c; ++c) {
            digits = *c >= '0' && *c <= '9';
            P = std::min<long long>(10 * P + (*c - '0'), kMaxTile + 1);
        }
        if (!digits || P < 1 || P > kMaxTile)
            throw std::invalid_argument("HELMPINN_CUDA_TILE: expected an integer from 1 to " +
                                        std::to_string(kMaxTile) + " (points per tile), got '" +
                                        v + "'");
        k.tile = int(P);
    }
    if (const char* v = std::getenv("HELMPINN_CUDA_SCRATCH"); v && *v) {
        if (std::string(v) != "global")
            throw std::invalid_argument(std::string("HELMPINN_CUDA_SCRATCH: expected 'global' "
                                                    "(or unset), got '") + v + "'");
        k.global_scratch = true;
    }
    const char* verbose = std::getenv("HELMPINN_CUDA_VERBOSE");
    k.verbose = verbose && std::string(verbose) == "1";
    return k;
}

/// The kernels one launch plan is made for (CudaBackend::plan_tiles), for compile-time
/// (d, global scratch): the train plan's forward_kernel and train_kernel, the residual level's
/// rows_kernel. The last one's occupancy is the plan's.
template <typename T>
struct TrainKernels {
    static constexpr const char* name = "fused kernels";
    template <int D, bool GS>
    static auto get() {
        return std::make_tuple(&forward_kernel<T, D, GS>, &train_kernel<T, D, GS>);
    }
};
template <typename T>
struct RowKernels {
    static constexpr const char* name = "residual-level kernels";
    template <int D, bool GS>
    static auto get() { return std::make_tuple(&rows_kernel<T, D, GS>); }
};

template <typename T>
class CudaBackend final : public Backend<T> {
public:
    CudaBackend(const ModelSpec& spec, std::size_t batch, int device_id)
        : sp_(spec), B_(batch), d_(spec.in_dim), m_(spec.ff_dim), H_(spec.hidden_dim),
          L_(spec.num_hidden_layers), S_(spec.in_dim + 2), num_params_(spec.num_params()),
          dev_(device_id) {
        int count = 0;
        const cudaError_t e = cudaGetDeviceCount(&count);
        std::string why;
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            why = std::string("no CUDA device found: cudaGetDeviceCount: ") + cudaGetErrorName(e) +
                  " (" + cudaGetErrorString(e) + ")";
            count = 0;
        } else if (count == 0) {
            why = "no CUDA device found";
        } else {
            why = std::to_string(count) + " CUDA device(s) visible";
        }
        if (device_id < 0 || device_id >= count)
            throw std::runtime_error("Workspace(device='cuda'): CUDA device " +
                                     std::to_string(device_id) + " is not available: " + why);
        if (B_ > std::size_t(1) << 30)
            throw std::invalid_argument("Workspace: batch_size must be <= 2^30 on CUDA");
        DeviceGuard guard(dev_);
        const TuningKnobs knobs = read_tuning_knobs();
        plan(knobs);
        allocate();
        plan_rows(knobs);
        plan_operator(knobs.verbose);
        check(cudaEventCreateWithFlags(&last_use_, cudaEventDisableTiming), "cudaEventCreate");
    }

    ~CudaBackend() override {
        // Members free their memory; make the right device current while they do.
        int prev = 0;
        if (cudaGetDevice(&prev) == cudaSuccess && prev != dev_) {
            (void)cudaSetDevice(dev_);
            release();
            (void)cudaSetDevice(prev);
        } else {
            release();
        }
    }

    /// What plan() chose (for tests, and printed when HELMPINN_CUDA_VERBOSE=1).
    struct LaunchPlan {
        int tile = 0;            // points per tile
        bool global_scratch = false;
        int smem_bytes = 0;      // dynamic shared memory per block
        int smem_limit = 0;      // the kernels' dynamic limit: opt-in minus static shared memory
        int static_smem = 0;     // the kernels' static shared memory (largest of the two)
        int blocks_per_sm = 0;   // occupancy of train_kernel with this tile
        int blocks = 0;          // blocks per launch = gradient slots
        int regs = 0;            // registers per thread of train_kernel
        // The general operator's 2d + 1 streams in the same buffers (plan_operator): its tile
        // and chunk for train_kernel, and rows_kernel's tiles for the Laplacian and for it.
        int op_tile = 0;
        std::size_t op_chunk = 0;
        int row_tile = 0, row_op_tile = 0;
    };
    const LaunchPlan& launch_plan() const { return plan_; }
    /// The global scratch buffer (GS mode; null otherwise), for tests.
    const T* scratch() const { return scratch_.data(); }
    std::size_t scratch_size() const { return scratch_.size(); }
    const T* row_scratch() const { return row_scratch_.data(); }
    std::size_t row_scratch_size() const { return row_scratch_.size(); }

    const WorkspaceBuffers<T>& buffers() const override { return bufs_; }

    std::size_t memory_bytes() const override {
        std::size_t b = x_input_.bytes() + feat_.bytes() + du_dx_.bytes() + d2u_.bytes() +
                        grad_.bytes() + omega_.bytes() + Omega_.bytes() + slot_grad_.bytes() +
                        scratch_.bytes() + slot_loss_.bytes() + loss_sums_.bytes() +
                        flags_.bytes() + row_scratch_.bytes();
        for (int l = 0; l <= L_; ++l) b += z_[l].bytes();
        for (int l = 0; l < L_; ++l) b += h_[l].bytes();
        return b;
    }

    void zero_grad(void* stream) override {
        DeviceGuard guard(dev_);
        const cudaStream_t s = as_stream(stream);
        after_last_use(s);
        check(cudaMemsetAsync(grad_.data(), 0, num_params_ * sizeof(T), s), "zero_grad: cudaMemsetAsync");
        mark_use(s);
    }

    void forward(const T* params, const T* x, std::size_t n, int derivatives, T* u, T* grad_u,
                 T* lap_u, void* stream) override {
        DeviceGuard guard(dev_);
        const cudaStream_t s = as_stream(stream);
        after_last_use(s);
        prep(params, s);
        const int ns = derivatives == 0 ? 1 : derivatives == 1 ? d_ + 1 : d_ + 2;
        OutArgs<T> outs{u, grad_u, lap_u, true};
        const NetArgs<T> net = net_args(params);
        const Geometry& g = geo_;  // at most d + 2 streams: the Laplacian's geometry
        launch_chunks(n, g, "forward: kernel launch",
                      [&](auto Dc, auto GSc, int grid, std::size_t c0, int nc) {
            constexpr int D = decltype(Dc)::value;
            constexpr bool GS = decltype(GSc)::value;
            auto* kernel = &forward_kernel<T, D, GS>;
            HELMPINN_LAUNCH(kernel, grid, kThreads, train_.smem, s)(
                net, g.cache, g.tile, x, static_cast<long long>(c0), nc, ns, outs);
        });
        mark_use(s);
    }

    void vjp(const T* params, const T* w, const LossInputs<T>& in, T* out,
             void* stream) override {
        DeviceGuard guard(dev_);
        const cudaStream_t s = as_stream(stream);
        after_last_use(s);
        LossOutputs<T> none;
        reduce(params, out, in, none, w, s);
        mark_use(s);
    }

    void value_and_grad(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>& out,
                        void* stream) override {
        DeviceGuard guard(dev_);
        const cudaStream_t s = as_stream(stream);
        after_last_use(s);
        reduce(params, grad, in, out, nullptr, s);
        check(cudaMemcpyAsync(host_sums_.data(), loss_sums_.data(),
                              terms::kNumTerms * sizeof(double), cudaMemcpyDeviceToHost, s),
              "value_and_grad: copying the loss to the host");
        mark_use(s);
        check(cudaStreamSynchronize(s), "value_and_grad: kernels");
        out.loss = loss_breakdown(host_sums_.data(), in);  // sums indexed by terms::Term
    }

    // Rows [r0, r1) of the residual vector, its Jacobian or J v: for every term whose rows meet
    // the range, the chunks of the points that own those rows through rows_kernel.
    void rows(RowOp op, const T* params, const LossInputs<T>& in, std::size_t r0, std::size_t r1,
              const T* v, T* out, void* stream) override {
        if (r0 >= r1) return;
        DeviceGuard guard(dev_);
        const cudaStream_t s = as_stream(stream);
        const char* what = op == RowOp::residuals  ? "residuals: kernel launch"
                           : op == RowOp::jacobian ? "jacobian: kernel launch"
                                                   : "jvp: kernel launch";
        after_last_use(s);
        if (in.check_finite)
            check_finite(params, in, s, op == RowOp::jvp ? v : nullptr, num_params_, "v");
        prep(params, s);
        const NetArgs<T> net = net_args(params);
        RowLaunch<T> ra;
        ra.kind = op == RowOp::residuals ? kRowResiduals
                  : op == RowOp::jacobian ? kRowJacobian
                                          : kRowJvp;
        ra.train_fourier = in.train_fourier ? 1 : 0;
        ra.r0 = static_cast<long long>(r0);
        ra.r1 = static_cast<long long>(r1);
        ra.v = v;
        ra.out = out;
        ra.num_params = static_cast<long long>(num_params_);
        std::size_t row0 = 0;
        for (int t = 0; t < terms::kNumTerms; ++t) {
            const terms::TermPoints<T> tp = terms::term_points(in, t);
            const std::size_t rows_t = 2 * tp.n, first = row0;
            row0 += rows_t;
            if (!tp.n || first + rows_t <= r0 || first >= r1) continue;
            // The points whose rows meet [r0, r1).
            const std::size_t pa = (std::max(r0, first) - first) / 2;
            const std::size_t pb = (std::min(r1, first + rows_t) - first + 1) / 2;
            ra.entry = terms::term_entry(in, t);
            ra.ns = terms::term_streams(ra.entry, d_);
            ra.x = tp.x;
            ra.s = terms::term_scale(tp).s;
            ra.row0 = static_cast<long long>(first);
            const Geometry& g = row_geometry(ra.entry);
            for (std::size_t c0 = pa; c0 < pb; c0 += g.chunk) {
                const int nc = int(std::min(g.chunk, pb - c0));
                const int grid = std::min((nc + g.tile.P - 1) / g.tile.P, rows_.blocks);
                dispatch(d_, rows_.gs, [&](auto Dc, auto GSc) {
                    constexpr int D = decltype(Dc)::value;
                    constexpr bool GS = decltype(GSc)::value;
                    auto* kernel = &rows_kernel<T, D, GS>;
                    HELMPINN_LAUNCH(kernel, grid, kThreads, rows_.smem, s)(
                        net, g.cache, g.tile, in, ra, static_cast<long long>(c0), nc);
                });
                check(cudaGetLastError(), what);
            }
        }
        mark_use(s);
    }

private:
    static cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

    // The workspace's buffers (caches, slots, scratch) are shared by every call: a call on
    // another stream than the previous one first waits for the previous one's work (the
    // last-use event, recorded at the end of every call). A call on the same stream is
    // ordered by the stream itself.
    void after_last_use(cudaStream_t s) {
        if (used_ && s != last_stream_)
            check(cudaStreamWaitEvent(s, last_use_, 0), "waiting for the workspace's previous call");
    }
    void mark_use(cudaStream_t s) {
        check(cudaEventRecord(last_use_, s), "cudaEventRecord(last use)");
        last_stream_ = s;
        used_ = true;
    }

    // Where the points of one launch go: the tiles (points per tile, activation buffers), the
    // caches (their point stride B is the chunk) and the points per chunk. The Laplacian's
    // (every term but the general operator) is the plan's; the operator's is plan_operator's.
    struct Geometry {
        TileArgs<T> tile;
        CacheArgs<T> cache;
        std::size_t chunk = 0;
    };
    const Geometry& train_geometry(int entry) const {
        return entry == terms::kPdeOperator ? geo_op_ : geo_;
    }
    const Geometry& row_geometry(int entry) const {
        return entry == terms::kPdeOperator ? rgeo_op_ : rgeo_;
    }

    static int tiles(int nc, const Geometry& g) { return (nc + g.tile.P - 1) / g.tile.P; }

    // The n points in chunks of g.chunk (train and forward kernels): launch(D, GS, grid, c0, nc)
    // launches one kernel over chunk [c0, c0 + nc) with the compile-time (d, global scratch)
    // pair, then errors are checked.
    template <typename Launch>
    void launch_chunks(std::size_t n, const Geometry& g, const char* what, Launch&& launch) {
        for (std::size_t c0 = 0; c0 < n; c0 += g.chunk) {
            const int nc = int(std::min(g.chunk, n - c0));
            const int grid = std::min(tiles(nc, g), train_.blocks);
            dispatch(d_, train_.gs, [&](auto Dc, auto GSc) { launch(Dc, GSc, grid, c0, nc); });
            check(cudaGetLastError(), what);
        }
    }

    // ---- launch planning: plan_tiles() decides for both kernel families ----------------------

    // The attributes of a family's kernels for (d, mode) that the plan needs: the largest static
    // shared memory, the smallest thread limit, and the registers of the family's last kernel
    // (the one whose occupancy counts).
    struct KernelAttrs {
        int static_smem = 0, max_threads = 0, regs = 0;
    };
    template <typename Kernels>
    KernelAttrs kernel_attrs(bool gs) const {
        KernelAttrs k{0, std::numeric_limits<int>::max(), 0};
        const std::string what = std::string("cudaFuncGetAttributes(") + Kernels::name + ")";
        dispatch(d_, gs, [&](auto Dc, auto GSc) {
            std::apply([&](auto... kernel) {
                auto one = [&](auto kern) {
                    cudaFuncAttributes a{};
                    check(cudaFuncGetAttributes(&a, kern), what.c_str());
                    k.static_smem = std::max(k.static_smem, int(a.sharedSizeBytes));
                    k.max_threads = std::min(k.max_threads, a.maxThreadsPerBlock);
                    k.regs = a.numRegs;
                };
                (one(kernel), ...);
            }, Kernels::template get<decltype(Dc)::value, decltype(GSc)::value>());
        });
        return k;
    }

    // Raises the dynamic shared-memory limit of a family's kernels for (d, mode) to `limit` (the
    // opt-in limit minus their static shared memory), and returns the last kernel's occupancy
    // with `smem` bytes. The attribute belongs to the kernel, shared by every workspace of this
    // (T, d, mode) on the device: it is always raised to the device's limit, never to one
    // workspace's need (a smaller workspace made later would break a larger one).
    template <typename Kernels>
    int raise_and_occupancy(bool gs, int limit, int smem) const {
        int per_sm = 0;
        const std::string set = std::string("cudaFuncSetAttribute(") + Kernels::name + ")";
        dispatch(d_, gs, [&](auto Dc, auto GSc) {
            const auto ks = Kernels::template get<decltype(Dc)::value, decltype(GSc)::value>();
            std::apply([&](auto... kernel) {
                (check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            limit),
                       set.c_str()),
                 ...);
            }, ks);
            constexpr std::size_t last = std::tuple_size<decltype(ks)>::value - 1;
            check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, std::get<last>(ks),
                                                                kThreads, smem),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        });
        return per_sm;
    }

    // What a kernel family asks of plan_tiles(): its blocks' buffers and how it picks a tile.
    struct TileRequest {
        long long fixed = 0;     // dynamic shared memory besides the activation buffers
        int buffers = 2;         // activation buffers a block
        int rows_per_point = 1;  // rows a point has in one stream of a buffer
        int tile = 0;            // > 0: this tile (HELMPINN_CUDA_TILE)
        bool global = false;     // global scratch asked for
        std::array<int, 5> candidates{};  // shared-memory tiles to try, largest first (0: none)
        bool by_occupancy = false;  // the most useful rows resident per SM, else the largest that fits
        int global_tile = 16;    // the tile in global scratch when none was asked for
        long long slot_bytes = 0;  // a gradient slot a block (0: none), capped as the scratch
    };
    // What plan_tiles() decided for a family.
    struct TilePlan {
        TileArgs<T> tile;        // P, ld, buf (scratch: set when allocated)
        bool gs = false;         // activation buffers in global scratch
        int smem = 0;            // dynamic shared memory a block
        int limit = 0;           // the kernels' dynamic limit: opt-in minus static shared memory
        int per_sm = 0;          // occupancy of the family's last kernel with this tile
        int blocks = 1;          // blocks a launch
        KernelAttrs k;           // the attributes in the chosen mode
    };

    // Tile size, buffer size, shared or global activation buffers, and the number of blocks of
    // one kernel family from the device's shared memory, the kernels' static shared memory,
    // registers and thread limit, the SM count and (by_occupancy) each candidate's occupancy.
    template <typename Kernels>
    TilePlan plan_tiles(const TileRequest& rq) const {
        int optin = 0, sms = 0;
        check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_),
              "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_),
              "cudaDeviceGetAttribute");
        const int ld = plan_ld<T>(sp_.max_width());
        const int rpp = rq.rows_per_point;
        auto buf_for = [&](int P) { return plan_buffer<T>(rpp * P, S_, ld, d_, m_); };
        auto smem_for = [&](int P) { return rq.fixed + rq.buffers * buf_for(P) * long(sizeof(T)); };
        // Useful rows per tile: the PDE term's d + 2 streams of P points fill whole 32-row warp
        // tiles only for some P (4 points of d = 2: 16 rows of 32).
        auto fill = [&](int P) {
            const long long rows = static_cast<long long>(S_) * rpp * P;
            return double(rows) / double(round_up(rows, 32));
        };
        const KernelAttrs shared_k = kernel_attrs<Kernels>(false);
        const KernelAttrs global_k = kernel_attrs<Kernels>(true);
        const int shared_limit = optin - shared_k.static_smem;
        const int global_limit = optin - global_k.static_smem;

        int P = rq.tile;
        bool gs = rq.global;
        if (P > 0) {
            gs = gs || smem_for(P) > shared_limit;
        } else if (!gs) {
            // Among the tiles whose buffers fit in shared memory, by_occupancy: the one that keeps
            // the most useful rows resident per SM (occupancy x P x warp-tile fill), on a tie the
            // larger tile, which stages every weight fewer times; else the largest.
            double best = 0.0;
            for (int cand : rq.candidates) {
                if (cand == 0 || smem_for(cand) > shared_limit) continue;
                if (!rq.by_occupancy) {
                    P = cand;
                    break;
                }
                const int occ = raise_and_occupancy<Kernels>(false, shared_limit, int(smem_for(cand)));
                const double score = double(occ) * cand * fill(cand);
                if (occ > 0 && score > best * (1.0 + 1e-9)) {
                    best = score;
                    P = cand;
                }
            }
            gs = P == 0;
        }
        if (P == 0) P = rq.global_tile;

        TilePlan tp;
        tp.tile.P = P;
        tp.tile.ld = ld;
        tp.tile.buf = buf_for(P);
        tp.gs = gs;
        tp.smem = int(gs ? rq.fixed : smem_for(P));
        tp.k = gs ? global_k : shared_k;
        tp.limit = gs ? global_limit : shared_limit;
        const std::string on = " on device " + std::to_string(dev_);
        if (tp.k.max_threads < kThreads)
            throw std::runtime_error("helmpinn CUDA: the " + std::string(Kernels::name) +
                                     " were compiled for at most " +
                                     std::to_string(tp.k.max_threads) + " threads per block" + on +
                                     " (" + std::to_string(tp.k.regs) +
                                     " registers per thread); they need " + std::to_string(kThreads));
        if (tp.smem > tp.limit)
            throw std::runtime_error("helmpinn CUDA: device " + std::to_string(dev_) + " has " +
                                     std::to_string(optin) + " bytes of shared memory per block (" +
                                     std::to_string(tp.k.static_smem) + " of them static); " +
                                     std::to_string(tp.smem) + " are needed");
        tp.per_sm = raise_and_occupancy<Kernels>(gs, tp.limit, tp.smem);
        if (tp.per_sm < 1)
            throw std::runtime_error("helmpinn CUDA: the " + std::string(Kernels::name) +
                                     " cannot run" + on + " with " + std::to_string(tp.smem) +
                                     " bytes of shared memory");
        // The blocks that are resident at once, at most one per tile of a chunk; their gradient
        // slots (slot_bytes each) and GS scratch capped at 512 MiB each.
        const long long cap = 512LL << 20;
        long long blocks = static_cast<long long>(sms) * tp.per_sm;
        blocks = std::min<long long>(blocks, (static_cast<long long>(B_) + P - 1) / P);
        if (rq.slot_bytes > 0)
            blocks = std::min<long long>(blocks, std::max<long long>(1, cap / rq.slot_bytes));
        if (gs) {
            const long long scr = rq.buffers * tp.tile.buf * static_cast<long long>(sizeof(T));
            blocks = std::min<long long>(blocks, std::max<long long>(1, cap / scr));
        }
        tp.blocks = int(std::max<long long>(1, blocks));
        return tp;
    }

    // The train and forward kernels' plan: two activation buffers of P rows a stream, the tile
    // chosen by occupancy among 32, 16, 8 and 4 points (below 4 a tile fills too little of its
    // warp tiles: global scratch with 16 is better), one gradient slot a block.
    void plan(const TuningKnobs& knobs) {
        TileRequest rq;
        rq.fixed = fixed_smem_bytes<T>();
        rq.buffers = 2;
        rq.rows_per_point = 1;
        rq.tile = knobs.tile;
        rq.global = knobs.global_scratch;
        rq.candidates = {32, 16, 8, 4};
        rq.by_occupancy = true;
        rq.global_tile = 16;
        rq.slot_bytes = static_cast<long long>(num_params_) * sizeof(T);
        train_ = plan_tiles<TrainKernels<T>>(rq);
        const TilePlan& t = train_;
        plan_ = LaunchPlan{t.tile.P, t.gs, t.smem, t.limit, t.k.static_smem, t.per_sm, t.blocks,
                           t.k.regs};
        if (knobs.verbose)
            std::fprintf(stderr,
                         "helmpinn CUDA plan: %s d=%d m=%d H=%d L=%d batch=%zu: tile %d, %s, "
                         "%d B dynamic shared memory (limit %d, static %d), %d regs, %d blocks/SM, "
                         "%d blocks\n",
                         sizeof(T) == 4 ? "float32" : "float64", d_, m_, H_, L_, B_, t.tile.P,
                         t.gs ? "global scratch" : "shared buffers", t.smem, t.limit,
                         t.k.static_smem, t.k.regs, t.per_sm, t.blocks);
    }

    void allocate() {
        const std::size_t Bs = B_ * S_;
        x_input_.allocate(B_ * d_, "x_input");
        feat_.allocate(Bs * 2 * m_, "features");
        for (int l = 0; l <= L_; ++l) z_[l].allocate(Bs * sp_.layer_out(l), "z");
        for (int l = 0; l < L_; ++l) h_[l].allocate(Bs * H_, "h");
        du_dx_.allocate(B_ * d_ * 2, "du_dx");
        d2u_.allocate(B_ * 2, "d2u_dx2");
        grad_.allocate(num_params_, "grad");
        omega_.allocate(std::size_t(d_) * m_, "omega");
        Omega_.allocate(m_, "Omega");
        slot_grad_.allocate(std::size_t(train_.blocks) * num_params_, "gradient slots");
        slot_loss_.allocate(std::size_t(train_.blocks) * 3, "loss slots");
        loss_sums_.allocate(3, "loss sums");
        flags_.allocate(kMaxChecked, "finite flags");
        if (train_.gs) {
            // Set once: the kernels read (and discard) the padding rows of a partial tile, which
            // nothing writes; initialised, they are neither garbage nor an initcheck finding.
            scratch_.allocate(std::size_t(train_.blocks) * 2 * std::size_t(train_.tile.buf), "scratch");
            check(cudaMemset(scratch_.data(), 0, scratch_.bytes()), "cudaMemset(scratch)");
        }
        host_sums_.allocate(3, "cudaMallocHost(loss)");
        host_flags_.allocate(kMaxChecked, "cudaMallocHost(flags)");
        check(cudaMemset(grad_.data(), 0, grad_.bytes()), "cudaMemset(grad)");
        check(cudaDeviceSynchronize(), "Workspace allocation");

        train_.tile.scratch = scratch_.data();
        cache_.x_input = x_input_.data();
        cache_.feat = feat_.data();
        for (int l = 0; l <= L_; ++l) cache_.z[l] = z_[l].data();
        for (int l = 0; l < L_; ++l) cache_.h[l] = h_[l].data();
        cache_.h[L_] = z_[L_].data();
        cache_.du_dx = du_dx_.data();
        cache_.d2u = d2u_.data();
        cache_.B = static_cast<long long>(B_);

        point_buffers(bufs_, sp_, B_, x_input_, feat_, z_, h_, du_dx_, d2u_, grad_);
    }

    void release() {
        if (last_use_) (void)cudaEventDestroy(last_use_);
        last_use_ = nullptr;
        x_input_.reset();
        feat_.reset();
        for (auto& a : z_) a.reset();
        for (auto& a : h_) a.reset();
        du_dx_.reset();
        d2u_.reset();
        grad_.reset();
        omega_.reset();
        Omega_.reset();
        slot_grad_.reset();
        slot_loss_.reset();
        loss_sums_.reset();
        flags_.reset();
        scratch_.reset();
        row_scratch_.reset();
    }

    NetArgs<T> net_args(const T* params) const {
        NetArgs<T> a;
        a.params = params;
        a.omega = omega_.data();
        a.Omega = Omega_.data();
        a.m = m_;
        a.H = H_;
        a.L = L_;
        for (int l = 0; l <= L_; ++l) {
            a.offW[l] = static_cast<long long>(sp_.offset_W(l));
            a.offb[l] = static_cast<long long>(sp_.offset_b(l));
        }
        return a;
    }

    void prep(const T* params, cudaStream_t s) {
        auto* kernel = &prep_kernel<T>;
        HELMPINN_LAUNCH(kernel, (m_ + 127) / 128, 128, 0, s)(params, d_, m_, omega_.data(),
                                                             Omega_.data());
        check(cudaGetLastError(), "prep kernel launch");
    }

    // value_and_grad (w == null: seeds from the loss, out's per-point outputs written) or vjp
    // (seeds from the row weights w): the gradient into grad, the loss sums into loss_sums_
    // (stream-ordered; nothing is copied to the host here).
    void reduce(const T* params, T* grad, const LossInputs<T>& in, LossOutputs<T>& out,
                const T* w, cudaStream_t s) {
        if (in.check_finite) check_finite(params, in, s, w, terms::num_residuals(in), "w");
        prep(params, s);

        int used = 0;
        for (int t = 0; t < terms::kNumTerms; ++t) {
            const std::size_t n = terms::term_points(in, t).n;
            const Geometry& g = train_geometry(terms::term_entry(in, t));
            if (n) used = std::max(used, tiles(int(std::min(n, g.chunk)), g));
        }
        used = std::min(used, train_.blocks);
        if (used > 0)
            check(cudaMemsetAsync(slot_grad_.data(), 0, std::size_t(used) * num_params_ * sizeof(T), s),
                  "value_and_grad: cudaMemsetAsync");
        check(cudaMemsetAsync(slot_loss_.data(), 0, slot_loss_.bytes(), s),
              "value_and_grad: cudaMemsetAsync");

        const NetArgs<T> net = net_args(params);
        // (C strings: messages built per call would allocate)
        const char* what = w ? "vjp: kernel launch" : "value_and_grad: kernel launch";
        std::size_t row0 = 0;
        for (int t = 0; t < terms::kNumTerms; ++t) {
            const terms::TermPoints<T> tp = terms::term_points(in, t);
            TermLaunch<T> tl;
            tl.term = t;
            tl.entry = terms::term_entry(in, t);
            tl.ns = terms::term_streams(tl.entry, d_);
            tl.x = tp.x;
            const terms::TermScale<T> sc = terms::term_scale(tp);
            tl.c = sc.c;
            tl.s = sc.s;
            tl.row0 = static_cast<long long>(row0);
            tl.w = w;
            tl.residuals = out.residuals;
            tl.grad_kappa = t == terms::kPde ? out.grad_kappa : nullptr;
            row0 += 2 * tp.n;
            if (!tp.n) continue;
            const int tf = in.train_fourier ? 1 : 0;
            const Geometry& g = train_geometry(tl.entry);
            launch_chunks(tp.n, g, what,
                          [&](auto Dc, auto GSc, int grid, std::size_t c0, int nc) {
                constexpr int D = decltype(Dc)::value;
                constexpr bool GS = decltype(GSc)::value;
                auto* kernel = &train_kernel<T, D, GS>;
                HELMPINN_LAUNCH(kernel, grid, kThreads, train_.smem, s)(
                    net, g.cache, g.tile, in, tl, static_cast<long long>(c0), nc, tf,
                    slot_grad_.data(), static_cast<long long>(num_params_), slot_loss_.data());
            });
        }

        const long long zero_below = in.train_fourier ? 0 : static_cast<long long>(d_) * m_;
        const int rgrid = int((num_params_ + 255) / 256);
        auto* rk = &reduce_kernel<T>;
        HELMPINN_LAUNCH(rk, rgrid, 256, 0, s)(slot_grad_.data(), used,
                                               static_cast<long long>(num_params_), grad, zero_below,
                                               slot_loss_.data(), loss_sums_.data());
        check(cudaGetLastError(),
              w ? "vjp: reduce kernel launch" : "value_and_grad: reduce kernel launch");
    }

    // The residual level's plan (rows_kernel: three activation buffers of 2 P rows a stream),
    // made after plan() and allocate(): in shared memory when the train kernel's buffers are and
    // three fit (the largest of 16 .. 1 points), else a global scratch slice per block (8
    // points). HELMPINN_CUDA_TILE = P gives rows tiles of max(1, P / 2) points.
    void plan_rows(const TuningKnobs& knobs) {
        TileRequest rq;
        rq.fixed = row_fixed_smem_bytes<T>();
        rq.buffers = 3;
        rq.rows_per_point = 2;
        rq.tile = knobs.tile > 0 ? std::max(1, knobs.tile / 2) : 0;
        rq.global = train_.gs;
        rq.candidates = {16, 8, 4, 2, 1};
        rq.by_occupancy = false;
        rq.global_tile = 8;
        rows_ = plan_tiles<RowKernels<T>>(rq);
        if (rows_.gs) {
            row_scratch_.allocate(std::size_t(rows_.blocks) * 3 * std::size_t(rows_.tile.buf),
                                  "residual-level scratch");
            // Set once, as the train kernel's scratch: padding rows are read, never written.
            check(cudaMemset(row_scratch_.data(), 0, row_scratch_.bytes()), "cudaMemset(scratch)");
        }
        rows_.tile.scratch = row_scratch_.data();
    }

    // The general operator's geometry (the file's head comment): in buffers planned for S = d + 2
    // streams, a tile of P points has round_up(S P, 32) rows (rows_kernel: round_up(2 S P, 32)
    // for its 2 P rows a stream), so the operator's tile takes the most points p <= P whose
    // 2d + 1 streams fit in them; the caches hold S batch_size rows a layer, so its chunk takes
    // floor(S batch_size / (2d + 1)) points, and its caches' point stride is that chunk. For
    // d = 1 (2d + 1 = d + 2) both are the Laplacian's. p <= P and the chunk <= batch_size keep
    // every other area (loss partials, tile points, the Fourier scratch d m P, x_input) in
    // bounds; the GS scratch slice of a block is the same size.
    void plan_operator(bool verbose) {
        const long long ns = terms::term_streams(terms::kPdeOperator, d_);  // 2d + 1
        auto fit = [&](int P, int rows_per_stream) {
            const long long rows = round_up(static_cast<long long>(S_) * rows_per_stream * P, 32);
            return int(std::max<long long>(1, std::min<long long>(P, rows / (ns * rows_per_stream))));
        };
        geo_ = Geometry{train_.tile, cache_, B_};
        rgeo_ = Geometry{rows_.tile, cache_, B_};
        geo_op_ = geo_;
        rgeo_op_ = rgeo_;
        geo_op_.tile.P = fit(train_.tile.P, 1);
        rgeo_op_.tile.P = fit(rows_.tile.P, 2);
        const std::size_t chunk =
            std::max<std::size_t>(1, B_ * std::size_t(S_) / std::size_t(ns));
        geo_op_.chunk = rgeo_op_.chunk = chunk;
        geo_op_.cache.B = rgeo_op_.cache.B = static_cast<long long>(chunk);
        plan_.op_tile = geo_op_.tile.P;
        plan_.op_chunk = chunk;
        plan_.row_tile = rows_.tile.P;
        plan_.row_op_tile = rgeo_op_.tile.P;
        if (verbose)
            std::fprintf(stderr,
                         "helmpinn CUDA plan: general operator (%lld streams): tile %d, chunk %zu; "
                         "residual level: tile %d (operator %d)\n",
                         ns, plan_.op_tile, chunk, plan_.row_tile, plan_.row_op_tile);
    }

    // check_finite on device arrays: one scan kernel, one small copy, then the scalars on the host.
    // Messages and order as the CPU backend's (Workspace::check_inputs). `extra` (extra_n
    // values, named extra_name): the call's other input (jvp's v, vjp's w), scanned last.
    void check_finite(const T* params, const LossInputs<T>& in, cudaStream_t s,
                      const T* extra = nullptr, std::size_t extra_n = 0,
                      const char* extra_name = nullptr) {
        // params, then every term's arrays in the loss-term table's order, then extra.
        const char* names[kMaxChecked] = {"params"};
        FiniteArgs<T> a;
        a.p[0] = params;
        a.n[0] = num_params_;
        int na = 1;
        auto add = [&](const T* p, std::size_t n, const char* name) {
            if (na >= kMaxChecked)
                throw std::logic_error("check_finite: raise kMaxChecked (fused.cuh)");
            names[na] = name;
            a.p[na] = n ? p : nullptr;
            a.n[na] = n;
            ++na;
        };
        for (int t = 0; t < terms::kNumTerms; ++t) {
            terms::TermArray<T> arrays[terms::kMaxTermArrays];
            const int k = terms::term_arrays(in, t, std::size_t(d_), arrays);
            for (int j = 0; j < k; ++j) add(arrays[j].p, arrays[j].size, arrays[j].name);
        }
        if (extra) add(extra, extra_n, extra_name);
        unsigned long long most = 0;
        for (int k = 0; k < na; ++k)
            if (a.p[k]) most = std::max<unsigned long long>(most, a.n[k]);
        check(cudaMemsetAsync(flags_.data(), 0xFF, flags_.bytes(), s), "check_finite: memset");
        if (most > 0) {
            const unsigned gx = unsigned(std::min<unsigned long long>((most + 255) / 256, 1024));
            auto* kernel = &finite_kernel<T>;
            HELMPINN_LAUNCH(kernel, dim3(gx, kMaxChecked), 256, 0, s)(a, flags_.data());
            check(cudaGetLastError(), "check_finite: kernel launch");
        }
        check(cudaMemcpyAsync(host_flags_.data(), flags_.data(), flags_.bytes(),
                              cudaMemcpyDeviceToHost, s),
              "check_finite: copy");
        check(cudaStreamSynchronize(s), "check_finite");
        for (int k = 0; k < na; ++k)
            if (host_flags_.data()[k] != ~0ULL)
                throw std::invalid_argument(std::string(names[k]) +
                                            " contains NaN or Inf (at flat index " +
                                            std::to_string(host_flags_.data()[k]) + ")");
        terms::for_each_scalar(in, [](const char* name, const T* v, int n) {
            for (int k = 0; k < n; ++k)
                if (!std::isfinite(v[k]))
                    throw std::invalid_argument(std::string(name) +
                                                " contains NaN or Inf (at flat index " +
                                                std::to_string(k) + ")");
        });
    }

    ModelSpec sp_;
    std::size_t B_;
    int d_, m_, H_, L_, S_;
    std::size_t num_params_;
    int dev_;

    // Launch geometries (plan_operator): train/forward and rows, Laplacian and general operator
    Geometry geo_, geo_op_, rgeo_, rgeo_op_;
    TilePlan train_;  // train_kernel's and forward_kernel's (plan)
    TilePlan rows_;   // rows_kernel's (plan_rows)
    CacheArgs<T> cache_;

    DeviceArray<T> x_input_, feat_, z_[kMaxLayers], h_[kMaxLayers], du_dx_, d2u_, grad_, omega_,
        Omega_, slot_grad_, scratch_, row_scratch_;
    DeviceArray<double> slot_loss_, loss_sums_;
    DeviceArray<unsigned long long> flags_;
    PinnedArray<double> host_sums_;
    PinnedArray<unsigned long long> host_flags_;
    WorkspaceBuffers<T> bufs_;
    LaunchPlan plan_;
    cudaEvent_t last_use_ = nullptr;
    cudaStream_t last_stream_ = nullptr;
    bool used_ = false;
};

}  // namespace cuda

/// backend.hpp's factory; instantiated for float and double in cuda_backend_f32.cu / _f64.cu.
template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend(const ModelSpec& spec, std::size_t batch_size,
                                              int device_id) {
    return std::make_unique<cuda::CudaBackend<T>>(spec, batch_size, device_id);
}

}  // namespace helmpinn
