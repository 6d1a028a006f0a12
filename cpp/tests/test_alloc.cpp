// Zero heap allocations per step: once a Workspace exists, forward(), value_and_grad(), the
// residual level (residuals, jacobian, jvp, vjp), zero_grad(), adam_step() and parallel_tasks()
// must not allocate, whatever the number of points (several chunks) and whichever terms are given, on
// 2 OpenMP threads.
//
// Every allocation of the process is counted, not only helmpinn's own: the global operator
// new/delete (all C++17 variants) are replaced, and on glibc so are malloc, calloc, realloc,
// free, aligned_alloc, posix_memalign, memalign, valloc and pvalloc (forwarded to glibc's
// __libc_* entry points). Definitions in the executable interpose the shared libraries' calls
// too, so an allocation made by the OpenMP runtime or libstdc++ on behalf of a step counts.
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <vector>

#include "check.hpp"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_new{0};     // operator new / new[] (any variant)
std::atomic<long> g_malloc{0};  // malloc family (C allocation functions)
std::atomic<long> g_free{0};    // operator delete + free of non-null pointers

inline void count(std::atomic<long>& c) {
    if (g_counting.load(std::memory_order_relaxed)) c.fetch_add(1, std::memory_order_relaxed);
}
}  // namespace

// ---- the C allocation functions (glibc) ------------------------------------------------------
#if defined(__GLIBC__)
#define HELMPINN_COUNT_MALLOC 1
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void __libc_free(void*);
void* __libc_memalign(std::size_t, std::size_t);
void* __libc_valloc(std::size_t);
void* __libc_pvalloc(std::size_t);

void* malloc(std::size_t n) noexcept {
    count(g_malloc);
    return __libc_malloc(n);
}
void* calloc(std::size_t k, std::size_t n) noexcept {
    count(g_malloc);
    return __libc_calloc(k, n);
}
void* realloc(void* p, std::size_t n) noexcept {
    count(g_malloc);
    return __libc_realloc(p, n);
}
void free(void* p) noexcept {
    if (p) count(g_free);
    __libc_free(p);
}
void* aligned_alloc(std::size_t a, std::size_t n) noexcept {
    count(g_malloc);
    return __libc_memalign(a, n);
}
void* memalign(std::size_t a, std::size_t n) noexcept {
    count(g_malloc);
    return __libc_memalign(a, n);
}
int posix_memalign(void** out, std::size_t a, std::size_t n) noexcept {
    count(g_malloc);
    if (a < sizeof(void*) || (a & (a - 1)) != 0) return EINVAL;
    void* p = __libc_memalign(a, n);
    if (!p && n) return ENOMEM;
    *out = p;
    return 0;
}
void* valloc(std::size_t n) noexcept {
    count(g_malloc);
    return __libc_valloc(n);
}
void* pvalloc(std::size_t n) noexcept {
    count(g_malloc);
    return __libc_pvalloc(n);
}
}  // extern "C"
#define HP_RAW_MALLOC(n) __libc_malloc(n)
#define HP_RAW_ALIGNED(a, n) __libc_memalign(a, n)
#define HP_RAW_FREE(p) __libc_free(p)
#else
#define HELMPINN_COUNT_MALLOC 0
#define HP_RAW_MALLOC(n) std::malloc(n)
#define HP_RAW_ALIGNED(a, n) std::aligned_alloc(a, ((n) + (a) - 1) / (a) * (a))
#define HP_RAW_FREE(p) std::free(p)
#endif

// ---- the global operator new / delete, every replaceable variant -----------------------------
namespace {
void* counted_new(std::size_t n) {
    count(g_new);
    void* p = HP_RAW_MALLOC(n ? n : 1);
    if (!p) throw std::bad_alloc();
    return p;
}
void* counted_new_aligned(std::size_t n, std::align_val_t al) {
    count(g_new);
    std::size_t a = static_cast<std::size_t>(al);
    if (a < sizeof(void*)) a = sizeof(void*);
    void* p = HP_RAW_ALIGNED(a, n ? n : 1);
    if (!p) throw std::bad_alloc();
    return p;
}
void counted_delete(void* p) noexcept {
    if (!p) return;
    count(g_free);
    HP_RAW_FREE(p);
}
}  // namespace

void* operator new(std::size_t n) { return counted_new(n); }
void* operator new[](std::size_t n) { return counted_new(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
    try { return counted_new(n); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
    try { return counted_new(n); } catch (...) { return nullptr; }
}
void* operator new(std::size_t n, std::align_val_t a) { return counted_new_aligned(n, a); }
void* operator new[](std::size_t n, std::align_val_t a) { return counted_new_aligned(n, a); }
void* operator new(std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try { return counted_new_aligned(n, a); } catch (...) { return nullptr; }
}
void* operator new[](std::size_t n, std::align_val_t a, const std::nothrow_t&) noexcept {
    try { return counted_new_aligned(n, a); } catch (...) { return nullptr; }
}
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t) noexcept { counted_delete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_delete(p); }
void operator delete(void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { counted_delete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { counted_delete(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_delete(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { counted_delete(p); }

// ---- the test --------------------------------------------------------------------------------
namespace {

using helmpinn::LossInputs;
using helmpinn::ModelSpec;
using helmpinn::Workspace;
using helmpinn_test::AllTerms;
using helmpinn_test::Rng;

struct Counts {
    long news, mallocs, frees;
};

/// Runs fn once to warm up (first-touch costs, the OpenMP thread pool), then `reps` more times
/// while counting; every allocation in the counted calls is a failure.
template <typename F>
Counts count_calls(const char* what, F&& fn, int reps = 3) {
    fn();
    g_new = 0;
    g_malloc = 0;
    g_free = 0;
    g_counting = true;
    for (int r = 0; r < reps; ++r) fn();
    g_counting = false;
    const Counts c{g_new.load(), g_malloc.load(), g_free.load()};
    std::printf("  %-58s new=%ld malloc=%ld free=%ld\n", what, c.news, c.mallocs, c.frees);
    CHECK(c.news == 0 && c.mallocs == 0 && c.frees == 0,
          what << ": " << c.news << " operator new, " << c.mallocs << " malloc-family and "
               << c.frees << " free calls in " << reps << " calls after warm-up (want 0)");
    return c;
}

template <typename T>
void run(const char* tname, int d) {
    const ModelSpec spec{d, 8, 24, 3};
    const std::size_t batch = 100;  // 4 tiles of 32 a chunk, the last one partial
    Rng rng(1234 + d);
    const std::vector<T> theta = helmpinn_test::random_params<T>(spec, rng);
    const std::size_t P = spec.num_params();

    // Everything the steps touch is allocated before counting starts.
    Workspace<T> ws(spec, batch);
    const std::size_t n = 3 * batch + 17;  // four chunks, the last one partial
    AllTerms<T> terms(rng, d, n, 2 * batch + 3, batch + 41);
    std::vector<T> x = rng.uniform_vec<T>(n * d, -1, 1);
    std::vector<T> u(n * 2), grad_u(n * d * 2), lap_u(n * 2), grad(P);
    std::vector<T> m(P), v(P), params(theta);

    std::printf("Workspace<%s> d=%d (P=%zu, batch=%zu, n=%zu, threads=%d)\n", tname, d, P,
                batch, n, helmpinn::get_num_threads());
    const std::string pre = std::string(tname) + " d=" + std::to_string(d) + " ";

    for (int der = 0; der <= 2; ++der)
        count_calls((pre + "forward(derivatives=" + std::to_string(der) + ")").c_str(), [&] {
            ws.forward(theta.data(), x.data(), n, der, u.data(), der >= 1 ? grad_u.data() : nullptr,
                       der == 2 ? lap_u.data() : nullptr);
        });
    count_calls((pre + "forward(derivatives=2, no outputs)").c_str(), [&] {
        ws.forward(theta.data(), x.data(), n, 2, nullptr, nullptr, nullptr);
    });

    const LossInputs<T> all = terms.inputs();
    count_calls((pre + "value_and_grad(all terms, per-point kappa/f/alpha/g)").c_str(), [&] {
        ws.value_and_grad(theta.data(), grad.data(), all);
    });

    LossInputs<T> scalars = all;  // constant kappa and alpha, no sources
    scalars.kappa = nullptr;
    scalars.kappa_const = T(9);
    scalars.f = nullptr;
    scalars.alpha_bc = nullptr;
    scalars.alpha_const[0] = T(0);
    scalars.alpha_const[1] = T(-3);
    scalars.g_bc = nullptr;
    count_calls((pre + "value_and_grad(all terms, scalar kappa/alpha)").c_str(), [&] {
        ws.value_and_grad(theta.data(), grad.data(), scalars);
    });

    LossInputs<T> frozen = all;
    frozen.train_fourier = false;
    frozen.check_finite = true;
    count_calls((pre + "value_and_grad(frozen B, check_finite)").c_str(), [&] {
        ws.value_and_grad(theta.data(), grad.data(), frozen);
    });

    for (int term = 0; term < 3; ++term) {  // each term alone, a different slot count each
        LossInputs<T> one = all;
        if (term != 0) one.num_pde = 0;
        if (term != 1) one.num_data = 0;
        if (term != 2) one.num_bc = 0;
        const char* names[3] = {"pde", "data", "bc"};
        count_calls((pre + "value_and_grad(" + names[term] + " only)").c_str(), [&] {
            ws.value_and_grad(theta.data(), grad.data(), one);
        });
    }

    // The residual level: residuals, Jacobian rows (a range crossing terms), J v, J^T w, and
    // value_and_grad with per-point outputs and global counts.
    LossInputs<T> counted = all;
    counted.count_pde = all.num_pde + 7;
    counted.count_bc = all.num_bc + 3;
    const std::size_t R = ws.num_residuals(all);
    std::vector<T> r(R), wv(R, T(0.5)), jv(R), jtw(P), gk(all.num_pde), tan(P, T(0.25));
    const std::size_t r0 = 2 * all.num_pde - 5, r1 = r0 + 40;
    std::vector<T> J((r1 - r0) * P);
    count_calls((pre + "residuals(all terms)").c_str(), [&] {
        ws.residuals(theta.data(), all, r.data());
    });
    count_calls((pre + "jacobian(40 rows across pde/data)").c_str(), [&] {
        ws.jacobian(theta.data(), all, r0, r1, J.data());
    });
    count_calls((pre + "jvp(all terms)").c_str(), [&] {
        ws.jvp(theta.data(), tan.data(), all, jv.data());
    });
    count_calls((pre + "vjp(all terms, counts)").c_str(), [&] {
        ws.vjp(theta.data(), wv.data(), counted, jtw.data());
    });
    helmpinn::LossOutputs<T> outs;
    outs.residuals = r.data();
    outs.grad_kappa = gk.data();
    count_calls((pre + "value_and_grad(residuals, grad_kappa, counts)").c_str(), [&] {
        ws.value_and_grad(theta.data(), grad.data(), counted, outs);
    });

    count_calls((pre + "zero_grad()").c_str(), [&] { ws.zero_grad(); });

    // A whole training step: loss and gradient, then the library's Adam.
    long step = 0;
    count_calls((pre + "training step (value_and_grad + adam_step)").c_str(), [&] {
        ws.value_and_grad(params.data(), grad.data(), all);
        helmpinn::adam_step(params.data(), grad.data(), m.data(), v.data(), P, ++step, 1e-3, 0.9,
                            0.999, 1e-8, 0.0);
    });
}

void run_adam(std::size_t n) {
    std::vector<double> p(n, 0.5), g(n, 0.25), m(n), v(n);
    long step = 0;
    count_calls(("adam_step<double>(n=" + std::to_string(n) + ")").c_str(), [&] {
        helmpinn::adam_step(p.data(), g.data(), m.data(), v.data(), n, ++step, 1e-3, 0.9, 0.999,
                            1e-8, 0.01);
    });
    std::vector<float> pf(n, 0.5f), gf(n, 0.25f), mf(n), vf(n);
    step = 0;
    count_calls(("adam_step<float>(n=" + std::to_string(n) + ")").c_str(), [&] {
        helmpinn::adam_step(pf.data(), gf.data(), mf.data(), vf.data(), n, ++step, 1e-3, 0.9,
                            0.999, 1e-8, 0.0);
    });
}

/// The seed primitives' out= forms write into caller buffers and allocate nothing either.
void run_primitives(std::size_t n) {
    const std::size_t d = 2, m = 8, in = 16, out = 24;
    Rng rng(77);
    const auto x = rng.uniform_vec<double>(n * d, -1, 1), B = rng.normal_vec<double>(d * m);
    const auto pred = rng.normal_vec<double>(n * 2), target = rng.normal_vec<double>(n * 2);
    const auto dphi = rng.normal_vec<double>(n * 2 * m), W = rng.normal_vec<double>(out * in);
    const auto dh = rng.normal_vec<double>(n * out), h = rng.uniform_vec<double>(n * out, -1, 1);
    const auto hp = rng.normal_vec<double>(n * in);
    std::vector<double> o(n * 2), dB(d * m), dW(out * in), db(out), dhp(n * in);
    const std::string sz = "(n=" + std::to_string(n) + ")";
    count_calls(("mse_backward<double>" + sz).c_str(),
                [&] { helmpinn::mse_backward(pred.data(), target.data(), n, 2, o.data()); });
    count_calls(("layer_backward<double>" + sz).c_str(), [&] {
        helmpinn::layer_backward(dh.data(), h.data(), hp.data(), W.data(), n, out, in, true,
                                 dW.data(), db.data(), dhp.data());
    });
    count_calls(("fourier_backward<double>" + sz).c_str(), [&] {
        helmpinn::fourier_backward(dphi.data(), x.data(), B.data(), n, d, m, dB.data());
    });
}

/// parallel_tasks runs every index once (each task marks its own slot), on this build's threads,
/// and allocates nothing (helmpinn's Gauss-Newton calls it once per CG iteration).
void run_parallel_tasks(std::int64_t n) {
    std::vector<std::atomic<int>> hits(std::size_t(n < 1 ? 1 : n));
    auto task = [](std::int64_t i, void* context) {
        static_cast<std::atomic<int>*>(context)[i].fetch_add(1, std::memory_order_relaxed);
    };
    count_calls(("parallel_tasks(n=" + std::to_string(n) + ")").c_str(),
                [&] { helmpinn::parallel_tasks(n, task, hits.data()); });
    for (std::int64_t i = 0; i < n; ++i)
        CHECK(hits[std::size_t(i)].load() == 4, "parallel_tasks(n=" << n << "): index " << i << " ran "
                                                   << hits[std::size_t(i)].load() << " times in 4 calls");
}

}  // namespace

int main(int argc, char** argv) {
    int threads = 2;
    if (argc > 1) threads = std::atoi(argv[1]);
    helmpinn::set_num_threads(threads);
    std::printf("helmpinn %s, OpenMP=%d, counting malloc family: %s\n", helmpinn::version(),
                int(helmpinn::has_openmp()), HELMPINN_COUNT_MALLOC ? "yes" : "no (not glibc)");

    // Sanity check of the counters themselves: they must see an allocation.
    {
        g_new = 0;
        g_malloc = 0;
        g_counting = true;
        std::vector<double>* probe = new std::vector<double>(100);
        void* raw = std::malloc(64);
        g_counting = false;
        std::free(raw);
        delete probe;
        CHECK(g_new.load() >= 2, "operator new is not being counted (" << g_new.load() << ")");
        if (HELMPINN_COUNT_MALLOC)
            CHECK(g_malloc.load() >= 1, "malloc is not being counted (" << g_malloc.load() << ")");
    }

    for (int d = 1; d <= 3; ++d) {
        run<float>("float", d);
        run<double>("double", d);
    }
    run_adam(1000);     // below the parallel threshold
    run_adam(100000);   // above it
    run_primitives(50);    // below the primitives' parallel thresholds
    run_primitives(5000);  // above them
    for (std::int64_t n : {0, 1, 25, 1000}) run_parallel_tasks(n);
    return helmpinn_test::report("test_alloc");
}
