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
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
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

template <typename T>
class CudaBackend final : public Backend<T> {
public:
    CudaBackend(const ModelSpec& spec, std::size_t batch, int device_id)
        : sp_(spec), B_(batch), d_(spec.in_dim), m_(spec.ff_dim), H_(spec.hidden_dim),
          L_(spec.num_hidden_layers), S_(spec.in_dim + 2), np_(spec.num_params()),
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
        plan();
        allocate();
        plan_rows();
        plan_operator();
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
        check(cudaMemsetAsync(grad_.data(), 0, np_ * sizeof(T), s), "zero_grad: cudaMemsetAsync");
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
            HELMPINN_LAUNCH(kernel, grid, kThreads, smem_bytes_, s)(
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
            check_finite(params, in, s, op == RowOp::jvp ? v : nullptr, np_, "v");
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
        ra.num_params = static_cast<long long>(np_);
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
                const int grid = std::min((nc + g.tile.P - 1) / g.tile.P, rblocks_);
                dispatch(d_, rgs_, [&](auto Dc, auto GSc) {
                    constexpr int D = decltype(Dc)::value;
                    constexpr bool GS = decltype(GSc)::value;
                    auto* kernel = &rows_kernel<T, D, GS>;
                    HELMPINN_LAUNCH(kernel, grid, kThreads, rsmem_bytes_, s)(
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
            const int grid = std::min(tiles(nc, g), blocks_);
            dispatch(d_, gs_, [&](auto Dc, auto GSc) { launch(Dc, GSc, grid, c0, nc); });
            check(cudaGetLastError(), what);
        }
    }

    // The attributes of forward_kernel and train_kernel for (d, mode) that the plan needs: the
    // larger static shared memory, the smaller thread limit, train_kernel's registers.
    struct KernelAttrs {
        int static_smem = 0, max_threads = 0, regs = 0;
    };
    KernelAttrs kernel_attrs(bool gs) const {
        KernelAttrs k;
        dispatch(d_, gs, [&](auto Dc, auto GSc) {
            constexpr int D = decltype(Dc)::value;
            constexpr bool GS = decltype(GSc)::value;
            cudaFuncAttributes f{}, t{};
            check(cudaFuncGetAttributes(&f, forward_kernel<T, D, GS>), "cudaFuncGetAttributes(forward_kernel)");
            check(cudaFuncGetAttributes(&t, train_kernel<T, D, GS>), "cudaFuncGetAttributes(train_kernel)");
            k.static_smem = int(std::max(f.sharedSizeBytes, t.sharedSizeBytes));
            k.max_threads = std::min(f.maxThreadsPerBlock, t.maxThreadsPerBlock);
            k.regs = t.numRegs;
        });
        return k;
    }

    // Raises the dynamic shared-memory limit of forward_kernel and train_kernel for (d, mode) to
    // `limit` (the opt-in limit minus their static shared memory), and returns train_kernel's
    // occupancy with `smem` bytes. The attribute belongs to the kernel, shared by every workspace
    // of this (T, d, mode) on the device: it is always raised to the device's limit, never to
    // one workspace's need (a smaller workspace made later would break a larger one).
    int raise_and_occupancy(bool gs, int limit, int smem) const {
        int per_sm = 0;
        dispatch(d_, gs, [&](auto Dc, auto GSc) {
            constexpr int D = decltype(Dc)::value;
            constexpr bool GS = decltype(GSc)::value;
            check(cudaFuncSetAttribute(forward_kernel<T, D, GS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
                  "cudaFuncSetAttribute(forward_kernel)");
            check(cudaFuncSetAttribute(train_kernel<T, D, GS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
                  "cudaFuncSetAttribute(train_kernel)");
            check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, train_kernel<T, D, GS>,
                                                                kThreads, smem),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        });
        return per_sm;
    }

    // Tile size, buffer sizes, shared or global activation buffers, and the number of blocks
    // (= gradient slots) from the device's shared memory, the kernels' static shared memory,
    // registers and thread limit, the SM count and the occupancy of each candidate tile.
    void plan() {
        int optin = 0, sms = 0;
        check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_),
              "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_),
              "cudaDeviceGetAttribute");
        const int ld = plan_ld<T>(sp_.max_width());
        const long long fixed = fixed_smem_bytes<T>();
        auto smem_for = [&](int P) {
            return fixed + 2 * plan_buffer<T>(P, S_, ld, d_, m_) * long(sizeof(T));
        };
        // Useful rows per tile: the PDE term's d + 2 streams of P points fill whole 32-row warp
        // tiles only for some P (4 points of d = 2: 16 rows of 32).
        auto fill = [&](int P) {
            const double rows = double(S_) * P;
            return rows / double(round_up(static_cast<long long>(S_) * P, 32));
        };
        const KernelAttrs shared_k = kernel_attrs(false), global_k = kernel_attrs(true);
        const int shared_limit = optin - shared_k.static_smem;
        const int global_limit = optin - global_k.static_smem;
        // Tuning knobs (read once, here): HELMPINN_CUDA_TILE = points per tile (1..64);
        // HELMPINN_CUDA_SCRATCH=global puts the activation buffers in global memory.
        int P = 0, per_sm = 0;
        const char* scratch_env = std::getenv("HELMPINN_CUDA_SCRATCH");
        bool gs = scratch_env && std::string(scratch_env) == "global";
        if (const char* env = std::getenv("HELMPINN_CUDA_TILE")) {
            const int want = std::atoi(env);
            if (want >= 1 && want <= kMaxTile) {
                P = want;
                gs = gs || smem_for(P) > shared_limit;
            }
        }
        if (P == 0 && !gs) {
            // Among the tiles whose buffers fit in shared memory, the one that keeps the most
            // useful rows resident per SM (occupancy x P x warp-tile fill); on a tie the larger
            // tile, which stages every weight fewer times. Below 4 points a tile fills too
            // little of its warp tiles: global scratch with 16 is better.
            double best = 0.0;
            for (int cand : {32, 16, 8, 4}) {
                if (smem_for(cand) > shared_limit) continue;
                const int occ = raise_and_occupancy(false, shared_limit, int(smem_for(cand)));
                const double score = double(occ) * cand * fill(cand);
                if (occ > 0 && score > best * (1.0 + 1e-9)) {
                    best = score;
                    P = cand;
                    per_sm = occ;
                }
            }
            gs = P == 0;
        }
        if (P == 0) P = 16;
        tile_.P = P;
        tile_.ld = ld;
        tile_.buf = plan_buffer<T>(P, S_, ld, d_, m_);
        gs_ = gs;
        smem_bytes_ = int(gs ? fixed : smem_for(P));
        const KernelAttrs& k = gs ? global_k : shared_k;
        const int limit = gs ? global_limit : shared_limit;

        if (k.max_threads < kThreads)
            throw std::runtime_error("helmpinn CUDA: the fused kernels were compiled for at most " +
                                     std::to_string(k.max_threads) + " threads per block on device " +
                                     std::to_string(dev_) + " (" + std::to_string(k.regs) +
                                     " registers per thread); they need " + std::to_string(kThreads));
        if (smem_bytes_ > limit)
            throw std::runtime_error("helmpinn CUDA: device " + std::to_string(dev_) + " has " +
                                     std::to_string(optin) + " bytes of shared memory per block (" +
                                     std::to_string(k.static_smem) + " of them static); " +
                                     std::to_string(smem_bytes_) + " are needed");
        per_sm = raise_and_occupancy(gs_, limit, smem_bytes_);
        if (per_sm < 1)
            throw std::runtime_error("helmpinn CUDA: the fused kernel cannot run on device " +
                                     std::to_string(dev_) + " with " +
                                     std::to_string(smem_bytes_) + " bytes of shared memory");
        // One gradient slot per resident block, at most one per tile of a chunk; slots (and
        // GS scratch) capped at 512 MiB each.
        long long blocks = static_cast<long long>(sms) * per_sm;
        blocks = std::min<long long>(blocks, (static_cast<long long>(B_) + P - 1) / P);
        const long long cap = 512LL << 20;
        const long long slot_bytes = static_cast<long long>(np_) * sizeof(T);
        blocks = std::min<long long>(blocks, std::max<long long>(1, cap / slot_bytes));
        if (gs_) {
            const long long scr = 2 * tile_.buf * static_cast<long long>(sizeof(T));
            blocks = std::min<long long>(blocks, std::max<long long>(1, cap / scr));
        }
        blocks_ = int(std::max<long long>(1, blocks));

        plan_ = LaunchPlan{P, gs_, smem_bytes_, limit, k.static_smem, per_sm, blocks_, k.regs};
        if (const char* v = std::getenv("HELMPINN_CUDA_VERBOSE"); v && std::string(v) == "1")
            std::fprintf(stderr,
                         "helmpinn CUDA plan: %s d=%d m=%d H=%d L=%d batch=%zu: tile %d, %s, "
                         "%d B dynamic shared memory (limit %d, static %d), %d regs, %d blocks/SM, "
                         "%d blocks\n",
                         sizeof(T) == 4 ? "float32" : "float64", d_, m_, H_, L_, B_, P,
                         gs_ ? "global scratch" : "shared buffers", smem_bytes_, limit,
                         k.static_smem, k.regs, per_sm, blocks_);
    }

    void allocate() {
        const std::size_t Bs = B_ * S_;
        x_input_.allocate(B_ * d_, "x_input");
        feat_.allocate(Bs * 2 * m_, "features");
        for (int l = 0; l <= L_; ++l) z_[l].allocate(Bs * sp_.layer_out(l), "z");
        for (int l = 0; l < L_; ++l) h_[l].allocate(Bs * H_, "h");
        du_dx_.allocate(B_ * d_ * 2, "du_dx");
        d2u_.allocate(B_ * 2, "d2u_dx2");
        grad_.allocate(np_, "grad");
        omega_.allocate(std::size_t(d_) * m_, "omega");
        Omega_.allocate(m_, "Omega");
        slot_grad_.allocate(std::size_t(blocks_) * np_, "gradient slots");
        slot_loss_.allocate(std::size_t(blocks_) * 3, "loss slots");
        loss_sums_.allocate(3, "loss sums");
        flags_.allocate(kMaxChecked, "finite flags");
        if (gs_) {
            // Set once: the kernels read (and discard) the padding rows of a partial tile, which
            // nothing writes; initialised, they are neither garbage nor an initcheck finding.
            scratch_.allocate(std::size_t(blocks_) * 2 * std::size_t(tile_.buf), "scratch");
            check(cudaMemset(scratch_.data(), 0, scratch_.bytes()), "cudaMemset(scratch)");
        }
        host_sums_.allocate(3, "cudaMallocHost(loss)");
        host_flags_.allocate(kMaxChecked, "cudaMallocHost(flags)");
        check(cudaMemset(grad_.data(), 0, grad_.bytes()), "cudaMemset(grad)");
        check(cudaDeviceSynchronize(), "Workspace allocation");

        tile_.scratch = scratch_.data();
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
        used = std::min(used, blocks_);
        if (used > 0)
            check(cudaMemsetAsync(slot_grad_.data(), 0, std::size_t(used) * np_ * sizeof(T), s),
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
                HELMPINN_LAUNCH(kernel, grid, kThreads, smem_bytes_, s)(
                    net, g.cache, g.tile, in, tl, static_cast<long long>(c0), nc, tf,
                    slot_grad_.data(), static_cast<long long>(np_), slot_loss_.data());
            });
        }

        const long long zero_below = in.train_fourier ? 0 : static_cast<long long>(d_) * m_;
        const int rgrid = int((np_ + 255) / 256);
        auto* rk = &reduce_kernel<T>;
        HELMPINN_LAUNCH(rk, rgrid, 256, 0, s)(slot_grad_.data(), used,
                                               static_cast<long long>(np_), grad, zero_below,
                                               slot_loss_.data(), loss_sums_.data());
        check(cudaGetLastError(),
              w ? "vjp: reduce kernel launch" : "value_and_grad: reduce kernel launch");
    }

    // The residual level's tiles and buffers (rows_kernel: three activation buffers of 2 P
    // rows per stream), planned after plan() and allocate(): in shared memory when the train
    // kernel's are and three fit, else a global scratch slice per block. HELMPINN_CUDA_TILE = P
    // gives rows tiles of max(1, P / 2) points.
    void plan_rows() {
        int optin = 0, sms = 0;
        check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_),
              "cudaDeviceGetAttribute");
        check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev_),
              "cudaDeviceGetAttribute");
        // The dynamic limit is the opt-in minus rows_kernel's static shared memory (as in plan()).
        auto static_of = [&](bool g) {
            int st = 0;
            dispatch(d_, g, [&](auto Dc, auto GSc) {
                constexpr int D = decltype(Dc)::value;
                constexpr bool GS = decltype(GSc)::value;
                cudaFuncAttributes a{};
                check(cudaFuncGetAttributes(&a, rows_kernel<T, D, GS>),
                      "cudaFuncGetAttributes(rows_kernel)");
                st = int(a.sharedSizeBytes);
            });
            return st;
        };
        const int shared_limit = optin - static_of(false), global_limit = optin - static_of(true);
        const int ld = tile_.ld;
        const long long fixed = row_fixed_smem_bytes<T>();
        auto buf_for = [&](int P) { return plan_buffer<T>(2 * P, S_, ld, d_, m_); };
        auto smem_for = [&](int P) { return fixed + 3 * buf_for(P) * long(sizeof(T)); };
        const bool env_tile = std::getenv("HELMPINN_CUDA_TILE") != nullptr &&
                              std::atoi(std::getenv("HELMPINN_CUDA_TILE")) >= 1 &&
                              std::atoi(std::getenv("HELMPINN_CUDA_TILE")) <= kMaxTile;
        int P = 0;
        bool gs = gs_;
        if (env_tile) {
            P = std::max(1, tile_.P / 2);
            gs = gs || smem_for(P) > shared_limit;
        } else if (!gs) {
            for (int cand : {16, 8, 4, 2, 1}) {
                if (smem_for(cand) <= shared_limit) {
                    P = cand;
                    break;
                }
            }
            gs = P == 0;
        }
        if (P == 0) P = 8;
        rtile_.P = P;
        rtile_.ld = ld;
        rtile_.buf = buf_for(P);
        rgs_ = gs;
        rsmem_bytes_ = int(gs ? fixed : smem_for(P));
        const int limit = gs ? global_limit : shared_limit;
        if (rsmem_bytes_ > limit)
            throw std::runtime_error("helmpinn CUDA: device " + std::to_string(dev_) + " has " +
                                     std::to_string(optin) + " bytes of shared memory per block (" +
                                     std::to_string(optin - limit) + " of them static); " +
                                     std::to_string(rsmem_bytes_) + " are needed");
        int per_sm = 0;
        dispatch(d_, rgs_, [&](auto Dc, auto GSc) {
            constexpr int D = decltype(Dc)::value;
            constexpr bool GS = decltype(GSc)::value;
            check(cudaFuncSetAttribute(rows_kernel<T, D, GS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, limit),
                  "cudaFuncSetAttribute(rows_kernel)");
            check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, rows_kernel<T, D, GS>,
                                                                kThreads, rsmem_bytes_),
                  "cudaOccupancyMaxActiveBlocksPerMultiprocessor");
        });
        if (per_sm < 1)
            throw std::runtime_error("helmpinn CUDA: the residual-level kernel cannot run on "
                                     "device " + std::to_string(dev_) + " with " +
                                     std::to_string(rsmem_bytes_) + " bytes of shared memory");
        long long blocks = static_cast<long long>(sms) * per_sm;
        blocks = std::min<long long>(blocks, (static_cast<long long>(B_) + P - 1) / P);
        if (rgs_) {
            const long long scr = 3 * rtile_.buf * static_cast<long long>(sizeof(T));
            blocks = std::min<long long>(blocks, std::max<long long>(1, (512LL << 20) / scr));
        }
        rblocks_ = int(std::max<long long>(1, blocks));
        if (rgs_) {
            row_scratch_.allocate(std::size_t(rblocks_) * 3 * std::size_t(rtile_.buf),
                                  "residual-level scratch");
            // Set once, as the train kernel's scratch: padding rows are read, never written.
            check(cudaMemset(row_scratch_.data(), 0, row_scratch_.bytes()), "cudaMemset(scratch)");
        }
        rtile_.scratch = row_scratch_.data();
    }

    // The general operator's geometry (the file's head comment): in buffers planned for S = d + 2
    // streams, a tile of P points has round_up(S P, 32) rows (rows_kernel: round_up(2 S P, 32)
    // for its 2 P rows a stream), so the operator's tile takes the most points p <= P whose
    // 2d + 1 streams fit in them; the caches hold S batch_size rows a layer, so its chunk takes
    // floor(S batch_size / (2d + 1)) points, and its caches' point stride is that chunk. For
    // d = 1 (2d + 1 = d + 2) both are the Laplacian's. p <= P and the chunk <= batch_size keep
    // every other area (loss partials, tile points, the Fourier scratch d m P, x_input) in
    // bounds; the GS scratch slice of a block is the same size.
    void plan_operator() {
        const long long ns = terms::term_streams(terms::kPdeOperator, d_);  // 2d + 1
        auto fit = [&](int P, int rows_per_stream) {
            const long long rows = round_up(static_cast<long long>(S_) * rows_per_stream * P, 32);
            return int(std::max<long long>(1, std::min<long long>(P, rows / (ns * rows_per_stream))));
        };
        geo_ = Geometry{tile_, cache_, B_};
        rgeo_ = Geometry{rtile_, cache_, B_};
        geo_op_ = geo_;
        rgeo_op_ = rgeo_;
        geo_op_.tile.P = fit(tile_.P, 1);
        rgeo_op_.tile.P = fit(rtile_.P, 2);
        const std::size_t chunk =
            std::max<std::size_t>(1, B_ * std::size_t(S_) / std::size_t(ns));
        geo_op_.chunk = rgeo_op_.chunk = chunk;
        geo_op_.cache.B = rgeo_op_.cache.B = static_cast<long long>(chunk);
        plan_.op_tile = geo_op_.tile.P;
        plan_.op_chunk = chunk;
        plan_.row_tile = rtile_.P;
        plan_.row_op_tile = rgeo_op_.tile.P;
        if (const char* v = std::getenv("HELMPINN_CUDA_VERBOSE"); v && std::string(v) == "1")
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
        a.n[0] = np_;
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
    std::size_t np_;
    int dev_;

    TileArgs<T> tile_;
    TileArgs<T> rtile_;  // rows_kernel's tiles and buffers (plan_rows)
    // Launch geometries (plan_operator): train/forward and rows, Laplacian and general operator
    Geometry geo_, geo_op_, rgeo_, rgeo_op_;
    bool gs_ = false, rgs_ = false;
    int rsmem_bytes_ = 0, rblocks_ = 1;
    int smem_bytes_ = 0;
    int blocks_ = 1;
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
