// The CPU backend's one way to run a loop on the OpenMP threads.
//
// parallel_for(n, schedule, body) runs body(i) for i in [0, n) on the OpenMP threads, or
// serially on this thread when only one is available or the range is too small to be worth a team.
// A plain branch rather than an `if` clause or a one-thread team: libgomp allocates (and frees)
// a team for every such region, which would break "no heap allocation in a step"
// (cpp/tests/test_alloc.cpp proves there is none, at 1 and 2 threads).
#pragma once

#if defined(HELMPINN_WITH_OPENMP)
#include <omp.h>
#endif

namespace helmpinn {
namespace cpu {

enum class Schedule { fixed, dynamic };

#if defined(__GNUC__) || defined(__clang__)
#define HELMPINN_NOINLINE __attribute__((noinline))
#else
#define HELMPINN_NOINLINE
#endif

// Both the threaded and the inline loop call the body through this one function, so the body
// is compiled once: were it inlined into each loop, the compiler could vectorise or contract
// it differently in the two places, and results would differ in the last bit between one
// thread and several.
template <typename I, typename F>
HELMPINN_NOINLINE void run_body(F& body, I i) {
    body(i);
}

/// The most threads a parallel_for may run here: OpenMP's current setting or the processor
/// count, whichever is larger (1 without OpenMP). Per-thread buffers are sized by it.
inline int max_threads() {
#if defined(HELMPINN_WITH_OPENMP)
    const int a = omp_get_max_threads(), b = omp_get_num_procs();
    return a > b ? a : b;
#else
    return 1;
#endif
}

namespace detail {
// The index parallel_for gave the calling thread: omp_get_thread_num() in its team, 0 when the
// loop runs inline (even inside a caller's own OpenMP team, whose thread numbers are not ours).
inline thread_local int team_index = 0;
}  // namespace detail

/// The calling thread's index in the running parallel_for: in [0, its team size), 0 when the
/// loop runs inline on the calling thread.
inline int thread_index() { return detail::team_index; }

inline bool use_threads(long n, bool worth_it) {
#if defined(HELMPINN_WITH_OPENMP)
    return worth_it && n > 1 && omp_get_max_threads() > 1 && !omp_in_parallel();
#else
    (void)n;
    (void)worth_it;
    return false;
#endif
}

/// max_team > 0 caps the team (bodies that index per-thread buffers by thread_index()).
template <typename I, typename F>
void parallel_for(I n, Schedule schedule, F&& body, bool worth_it = true, int max_team = 0) {
#if defined(HELMPINN_WITH_OPENMP)
    if (use_threads(long(n), worth_it)) {
        int team = omp_get_max_threads();
        if (max_team > 0 && team > max_team) team = max_team;
        if (schedule == Schedule::dynamic) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(team)
            for (I i = 0; i < n; ++i) {
                detail::team_index = omp_get_thread_num();
                run_body(body, i);
            }
        } else {
#pragma omp parallel for schedule(static) num_threads(team)
            for (I i = 0; i < n; ++i) {
                detail::team_index = omp_get_thread_num();
                run_body(body, i);
            }
        }
        detail::team_index = 0;  // the calling thread was thread 0 of the team
        return;
    }
#endif
    const int outer = detail::team_index;
    detail::team_index = 0;
    for (I i = 0; i < n; ++i) run_body(body, i);
    detail::team_index = outer;
}

}  // namespace cpu
}  // namespace helmpinn
