// The CPU backend's loss level: the fused loss and its exact gradient (value_and_grad) and
// J^T w (vjp), one adjoint pass per tile (MATH.md); and the kernel set's factory.
//
// value_and_grad lines up the tiles (`tile` points each) of all loss terms in one sequence. A
// tile goes forward through every layer into its thread's scratch rows, seeds the loss
// adjoints, and goes backward through every layer at once. Tile t always adds its gradient into
// slot t % num_slots, a slot takes its tiles in increasing t, and the slots are summed in a
// fixed order at the end: the result is bitwise the same for any thread count and any
// batch_size.
//
// This file is one kernel set of a dispatching build (isa.hpp).
#include "cpu_backend.hpp"

HELMPINN_CPU_TARGET_BEGIN

namespace helmpinn {
namespace cpu {
inline namespace HELMPINN_CPU_KERNELS {

template <typename T>
void CpuBackend<T>::value_and_grad(const T* params, T* grad, const LossInputs<T>& in,
                                   LossOutputs<T>& out, void*) {
    out.loss = reduce(params, grad, in, &out, nullptr);
}

template <typename T>
void CpuBackend<T>::vjp(const T* params, const T* w, const LossInputs<T>& in, T* out, void*) {
    reduce(params, out, in, nullptr, w);
}

// value_and_grad (w == null: seeds from the residuals, loss returned, out's per-point outputs
// written) or vjp (seeds from the row weights w): the gradient into grad.
template <typename T>
inline LossBreakdown CpuBackend<T>::reduce(const T* params, T* grad, const LossInputs<T>& in,
                                           LossOutputs<T>* out, const T* w) {
    prepare(params);
    std::fill(slot_fresh_.begin(), slot_fresh_.end(), char(1));  // zeroed on first use
    std::fill(slot_loss_.begin(), slot_loss_.end(), 0.0);

    // The tiles of all terms in one sequence; tile t goes to slot t % slots.
    TermTiles tt[kNumTerms];
    int nterms = 0;
    const std::size_t total = line_up(in, tt, nterms);
    const std::size_t used = std::min(num_slots, total);
    const SeedArgs sa{out, w};
    parallel_for(
        long(used), Schedule::dynamic,
        [&](long k) {
            const TileRows rows = scratch_rows(thread_index());
            for (std::size_t t = std::size_t(k); t < total; t += num_slots) {
                int i = nterms - 1;
                while (tt[i].first_tile > t) --i;
                train_tile(params, in, sa, tt[i], t - tt[i].first_tile, rows, int(k));
            }
        },
        true, sz_.threads);

    // Fixed-order reduction of the slots, parallel over parameters.
    constexpr long block = 2048;  // parameters per task, summed as vectors
    const long nblocks = (long(num_params_) + block - 1) / block;
    parallel_for(nblocks, Schedule::fixed, [&](long b) {
        const std::size_t i0 = std::size_t(b * block);
        const int n = int(std::min<std::size_t>(block, num_params_ - i0));
        T* o = grad + i0;
        zero(o, std::size_t(n));
        for (std::size_t k = 0; k < used; ++k) {
            if (slot_fresh_[k]) continue;
            const T* src = slot_grad_.data() + k * num_params_ + i0;
#pragma omp simd
            for (int i = 0; i < n; ++i) o[i] += src[i];
        }
    });
    if (!in.train_fourier) zero(grad, std::size_t(d_) * m_);

    double sums[kNumTerms] = {};
    for (std::size_t k = 0; k < num_slots; ++k)
        for (int t = 0; t < kNumTerms; ++t) sums[t] += slot_loss_[k * kNumTerms + t];
    return loss_breakdown(sums, in);
}

// Tile `lt` of a term: forward into the thread's scratch rows, seeds, backward into slot k
// (a slot's first tile in a call writes its gradient, later ones add).
template <typename T>
inline void CpuBackend<T>::train_tile(const T* params, const LossInputs<T>& in, const SeedArgs& sa,
                                      const TermTiles& term, std::size_t lt, const TileRows& rows,
                                      int k) {
    const std::size_t g0 = lt * tile;  // the tile's first point
    const int np = int(std::min<std::size_t>(tile, term.n - g0));
    const bool first = slot_fresh_[k] != 0;
    slot_fresh_[k] = 0;
    with_streams(d_, term.ns, [&](auto D, auto NS) {
        forward_tile<D(), NS()>(params, rows, np, term.x + g0 * d_);
        slot_loss_[std::size_t(k) * kNumTerms + term.t] +=
            seed(term, in, sa, NS(), rows, np, g0, rows.adj);
        backward_tile<D(), NS()>(params, rows, np, k, first, in.train_fourier);
    });
}

// Loss (or vjp) adjoints at the output, tile-local layout [ns, tile, 2], of the tile in rows R
// whose first point is point g0 of the term; returns the tile's sum |r|^2 (0 for vjp).
template <typename T>
inline double CpuBackend<T>::seed(const TermTiles& term, const LossInputs<T>& in,
                                  const SeedArgs& sa, int ns, const TileRows& R, int np,
                                  std::size_t g0, T* g) const {
    const int d = d_;
    const std::ptrdiff_t ssG = 2 * tile;
    double acc = 0.0;
    terms::with_term(term.e, [&](auto entry) {
        using E = decltype(entry);
        for (int p = 0; p < np; ++p) {
            const std::size_t gp = g0 + std::size_t(p), row = term.row0 + 2 * gp;
            T u[2 * math::kMaxStreams] = {}, ub[2 * math::kMaxStreams] = {}, r[2], w[2];
            if (sa.w) {  // vjp
                w[0] = term.scale.s * sa.w[row];
                w[1] = term.scale.s * sa.w[row + 1];
            } else {
                gather_u(R, L_, R.r0 + std::size_t(p), ns, u);
                E::residual(in, gp, u, 2, d, r);
                acc += double(r[0] * r[0] + r[1] * r[1]);
                w[0] = term.scale.c * r[0];
                w[1] = term.scale.c * r[1];
                if (sa.out && sa.out->residuals) {
                    sa.out->residuals[row] = term.scale.s * r[0];
                    sa.out->residuals[row + 1] = term.scale.s * r[1];
                }
                if (E::id == terms::kPde && sa.out && sa.out->grad_kappa)
                    sa.out->grad_kappa[gp] = w[0] * u[0] + w[1] * u[1];  // dr/dkappa = u
            }
            E::adjoint(in, gp, w, ub, 2, d);
            T* gu = g + std::size_t(p) * 2;
            for (int s = 0; s < ns; ++s) {
                gu[s * ssG] = ub[2 * s];
                gu[s * ssG + 1] = ub[2 * s + 1];
            }
        }
    });
    return acc;
}

// Adjoint pass of the tile in the scratch rows R (seeded in R.adj); adds its gradient into
// slot k.
template <typename T>
template <int D, int NS>
inline void CpuBackend<T>::backward_tile(const T* params, const TileRows& R, int np, int k,
                                         bool first, bool train_fourier) {
    const std::size_t B = R.ss, p0 = R.r0;
    const int m = m_;
    T* gcur = R.adj;
    T* gnext = gcur + sz_.adj_stride;
    T* sg = slot_grad_.data() + std::size_t(k) * num_params_;
    for (int l = L_; l >= 0; --l) {
        const int in = sp_.layer_in(l), out = sp_.layer_out(l);
        const std::ptrdiff_t ssG = std::ptrdiff_t(tile) * out;
        // Adjoints through tanh (hidden layers) and the bias gradient, row by row.
        T* db = sg + sp_.offset_b(l);
        if (first) zero(db, std::size_t(out));
        const T* Z = R.z[l];
        const T* Hh = l < L_ ? R.h[l] : nullptr;
        const std::ptrdiff_t ssZ = std::ptrdiff_t(B * out);
        for (int p = 0; p < np; ++p) {
            const std::size_t r = std::size_t(p0 + p) * out;
            T* g = gcur + std::size_t(p) * out;
            if (Hh) {
#pragma omp simd
                for (int j = 0; j < out; ++j) {
                    math::tanh_backward(Z + r + j, ssZ, Hh[r + j], g + j, ssG, D, NS);
                    db[j] += g[j];
                }
            } else {
                for (int j = 0; j < out; ++j) db[j] += g[j];
            }
        }
        const T* A = l == 0 ? R.feat : R.h[l - 1];
        const std::size_t ssA = B * in;
        T* dW = sg + sp_.offset_W(l);
        for (int s = 0; s < NS; ++s)  // dW += G_s^T A_s
            gemm<T>(out, in, np, gcur + s * ssG, 1, out, A + s * ssA + std::size_t(p0) * in,
                    in, dW, in, !(first && s == 0));
        if (l == 0 && !train_fourier) return;
        const T* W = params + sp_.offset_W(l);
        for (int s = 0; s < NS; ++s)  // A-adjoint_s = G_s W
            gemm<T>(np, in, out, gcur + s * ssG, out, 1, W, in,
                    gnext + std::size_t(s) * tile * in, in, false);
        std::swap(gcur, gnext);
    }
    // Fourier layer: gcur holds the feature adjoints [ns, tile, 2m]. The tile's points are
    // summed per frequency, fj frequencies at a time, and added to dB once. The loop over the
    // frequencies is left to GCC's own vectoriser: under `omp simd` the per-lane copies of
    // wbar[D] defeated it and the loop ran scalar (a sixth of a vjp with m = 16).
    T* dB = sg + sp_.offset_B();
    if (first) zero(dB, std::size_t(D) * m);
    const std::ptrdiff_t ssF = std::ptrdiff_t(tile) * 2 * m;
    constexpr int fj = 64;
    for (int j0 = 0; j0 < m; j0 += fj) {
        const int nj = std::min(fj, m - j0);
        alignas(64) T acc[D][fj];
        for (int i = 0; i < D; ++i)
            for (int j = 0; j < nj; ++j) acc[i][j] = T(0);
        for (int p = 0; p < np; ++p) {
            const T* xi = R.x + (p0 + p) * D;
            const T* f = R.feat + (p0 + p) * 2 * m + j0;  // value stream: sin, cos
            const T* g = gcur + std::size_t(p) * 2 * m + j0;
            const T* om = omega_.data() + j0;
            const T* Om = Omega_.data() + j0;
            for (int j = 0; j < nj; ++j) {
                T sbar, wbar[D];
                math::fourier_backward_point(f[j], f[m + j], om + j, m, Om[j], D, NS, g + j,
                                             g + m + j, ssF, sbar, wbar);
                for (int i = 0; i < D; ++i) acc[i][j] += xi[i] * sbar + wbar[i];
            }
        }
        for (int i = 0; i < D; ++i)
            for (int j = 0; j < nj; ++j)
                dB[std::size_t(i) * m + j0 + j] += T(math::two_pi) * acc[i][j];
    }
}

}  // namespace HELMPINN_CPU_KERNELS
}  // namespace cpu

#define HELMPINN_CAT2(a, b) a##b
#define HELMPINN_CAT(a, b) HELMPINN_CAT2(a, b)
#define HELMPINN_CPU_FACTORY HELMPINN_CAT(make_cpu_backend_, HELMPINN_CPU_KERNELS)

template <typename T>
std::unique_ptr<Backend<T>> HELMPINN_CPU_FACTORY(const ModelSpec& spec, std::size_t batch_size) {
    return std::make_unique<cpu::CpuBackend<T>>(spec, batch_size);
}

template std::unique_ptr<Backend<float>> HELMPINN_CPU_FACTORY(const ModelSpec&, std::size_t);
template std::unique_ptr<Backend<double>> HELMPINN_CPU_FACTORY(const ModelSpec&, std::size_t);

}  // namespace helmpinn

HELMPINN_CPU_TARGET_END
