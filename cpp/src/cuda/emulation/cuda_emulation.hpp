// A CPU emulation of the little of CUDA that the backend uses, for testing the kernels on a
// machine without a GPU (HELMPINN_CUDA_EMULATION; see cpp/tests/cuda/emu_check.cpp).
//
// The kernels compile as ordinary C++: a launch runs the grid's blocks one after another, each
// block's blockDim.x threads as fibers (user-space contexts, each with its own stack) on the
// calling OS thread, switched at __syncthreads and __syncwarp, which are barriers over the
// block and over each warp of 32 (see run_grid for the order the threads run in between two
// barriers). Dynamic shared memory is a per-block buffer that starts filled with 0xFF bytes (NaN
// in float and double) so that a read of memory nobody wrote shows up in the results. Device
// memory is host memory; streams are ignored (all work is synchronous, but the calls that order
// them are logged, see below); the device's attributes come from environment variables:
//     HELMPINN_EMU_SMEM (bytes of shared memory a block may opt in to; default 232448, an H100)
//     HELMPINN_EMU_SMS  (multiprocessors; default 3)
//     HELMPINN_EMU_STATIC_SMEM (static shared memory of every kernel, bytes; default 0)
//     HELMPINN_EMU_REGS (registers per thread of every kernel; default 128)
//     HELMPINN_EMU_MAX_THREADS (most threads a block of any kernel may have; default 1024)
//     HELMPINN_EMU_DEVICES (devices; default 1)
//     HELMPINN_EMU_DEVICE_COUNT_ERROR=1 (cudaGetDeviceCount fails as with a driver mismatch)
// As on a GPU: a block gets more than 48 kB of dynamic shared memory only after
// cudaFuncSetAttribute raised the kernel's limit, which may not exceed the opt-in limit minus
// the kernel's static shared memory (else cudaErrorInvalidValue); a launch over the limit, or
// with more threads than the kernel allows, fails (cudaGetLastError); occupancy is computed
// from shared memory (per multiprocessor: the opt-in limit plus 1 kB, 1 kB reserved per block),
// registers (64k per multiprocessor) and threads (2048). Event records and stream waits are
// appended to emu::stream_log() (tests read it to check the order a call asks for).
// What this cannot show: the interleavings of a GPU between two barriers (here each thread runs
// alone from one barrier to the next, in one of two orders; __syncwarp's mask is ignored: the
// whole warp waits), and anything about speed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <memory>
#include <mutex>
#include <vector>

#include <sys/mman.h>
#include <ucontext.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __align__(n) alignas(n)

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace helmpinn {
namespace emu {

// ---- fibers: the emulated threads, user-space contexts switched at barriers ------------------
// On x86-64 (GCC, Clang) a switch saves the callee-saved registers and the SSE/x87 control words
// on the stack and changes stacks (helmpinn_emu_switch, below): no system call, unlike
// swapcontext, which sets the signal mask each time. Elsewhere, or with HELMPINN_EMU_UCONTEXT
// defined, the POSIX ucontext functions.
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(HELMPINN_EMU_UCONTEXT)
extern "C" void helmpinn_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .p2align 4
    .weak helmpinn_emu_switch
    .type helmpinn_emu_switch, @function
helmpinn_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size helmpinn_emu_switch, .-helmpinn_emu_switch
)");
struct Context {
    void* sp = nullptr;
};
inline void switch_context(Context& save, const Context& load) { helmpinn_emu_switch(&save.sp, load.sp); }
/// A context that starts entry() (which must never return) on the stack [stack, stack + bytes):
/// the frame helmpinn_emu_switch pops, with entry as its return address, entered as if called.
inline void make_context(Context& c, unsigned char* stack, std::size_t bytes, void (*entry)()) {
    auto* top = reinterpret_cast<std::uint64_t*>(
        reinterpret_cast<std::uintptr_t>(stack + bytes) & ~std::uintptr_t(15));
    std::uint32_t mxcsr = 0;
    std::uint16_t fcw = 0;
    asm volatile("stmxcsr %0\n\tfnstcw %1" : "=m"(mxcsr), "=m"(fcw));
    top[-1] = 0;                                         // entry's return address: none
    top[-2] = reinterpret_cast<std::uintptr_t>(entry);   // popped by ret
    for (int k = 3; k <= 8; ++k) top[-k] = 0;            // rbp, rbx, r12 .. r15
    top[-9] = mxcsr | (std::uint64_t(fcw) << 32);
    c.sp = top - 9;
}
#else
struct Context {
    ucontext_t uc;
};
inline void switch_context(Context& save, const Context& load) { swapcontext(&save.uc, &load.uc); }
inline void make_context(Context& c, unsigned char* stack, std::size_t bytes, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = bytes;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
#endif

struct Barrier;

/// An emulated GPU thread: a fiber (a user-space context with its own stack) and what
/// threadIdx, blockIdx, blockDim, gridDim and the dynamic shared memory read in it.
struct ThreadState {
    dim3 thread, block, block_dim, grid_dim;
    unsigned char* smem = nullptr;
    Barrier* block_barrier = nullptr;
    Barrier* warp_barrier = nullptr;
};

/// A barrier over `expected` fibers: arrivals are counted; the last one opens it (a new
/// generation), and the fibers that wait on the old generation become runnable.
struct Barrier {
    unsigned expected = 0, arrived = 0;
    unsigned long generation = 0;
    const char* name = "";
};

struct Fiber {
    Context ctx;
    ThreadState st;
    const Barrier* waits_on = nullptr;  // blocked until waits_on->generation != wait_generation
    unsigned long wait_generation = 0;
    bool done = false;
};

/// The state of the launch being run: its fibers, the scheduler's context, the block order.
struct Grid {
    std::vector<Fiber> fibers;
    Context scheduler;
    Fiber* running = nullptr;
    const std::function<void()>* fn = nullptr;
    Barrier edge, sync;                 // the block's start/end, and __syncthreads
    std::vector<Barrier> warps;         // __syncwarp, one a warp of 32
    std::size_t smem_alloc = 0;
    unsigned long serial = 0;           // the launch's number
    unsigned long block_index = 0;      // the block being run (row-major over the grid)
};
inline Grid* grid_now = nullptr;  // the launch being run (launches do not nest)

inline ThreadState& ts() { return grid_now->running->st; }
inline unsigned char* dynamic_smem() { return ts().smem; }

inline void check_aligned(const void* p) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
        std::fprintf(stderr, "emulation: misaligned 16-byte access at %p\n", p);
        std::abort();
    }
}

inline long env_long(const char* name, long fallback) {
    const char* v = std::getenv(name);
    return v ? std::atol(v) : fallback;
}

/// Arrives at b and hands control to the scheduler until b opens (the last arrival opens it
/// and yields too, so that every phase between two barriers runs in the scheduler's order).
inline void arrive_and_wait(Barrier& b) {
    Fiber* f = grid_now->running;
    f->waits_on = &b;
    f->wait_generation = b.generation;
    if (++b.arrived == b.expected) {
        b.arrived = 0;
        ++b.generation;
    }
    switch_context(f->ctx, grid_now->scheduler);
}

/// The fibers' stacks (256 kB each, a guard page below), made once and reused by every launch.
inline unsigned char* fiber_stack(unsigned t, std::size_t& bytes) {
    static std::vector<unsigned char*> stacks;
    constexpr std::size_t kStack = 256 * 1024, kGuard = 4096;
    while (stacks.size() <= t) {
        void* p = mmap(nullptr, kStack + kGuard, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED || mprotect(p, kGuard, PROT_NONE) != 0) {
            std::fprintf(stderr, "emulation: cannot map a fiber stack\n");
            std::abort();
        }
        stacks.push_back(static_cast<unsigned char*>(p) + kGuard);
    }
    bytes = kStack;
    return stacks[t];
}

/// A fiber's life: the blocks of the grid in order, each between two barriers over the block
/// (shared memory refilled with NaN bytes at each block's start); then back to the scheduler
/// for good.
inline void fiber_main() {
    Grid& g = *grid_now;
    Fiber& f = *g.running;
    const dim3 grid = f.st.grid_dim;
    for (unsigned by = 0; by < grid.y; ++by) {
        for (unsigned bx = 0; bx < grid.x; ++bx) {
            f.st.block = dim3(bx, by, 0);
            if (f.st.thread.x == 0) {
                std::memset(f.st.smem, 0xFF, g.smem_alloc);
                g.block_index = std::size_t(by) * grid.x + bx;
            }
            arrive_and_wait(g.edge);
            (*g.fn)();
            arrive_and_wait(g.edge);
        }
    }
    f.done = true;
    switch_context(f.ctx, g.scheduler);
    std::abort();  // a finished fiber is never resumed
}

/// Runs fn() as the threads of every block of the grid, the blocks one after another, each
/// block's threads as fibers on this OS thread, switched at __syncthreads and __syncwarp. Between
/// two barriers the threads run one after another, in ascending order in a block of even number
/// and descending in an odd one, the parities swapped every launch: a read of shared memory that
/// another thread writes in the same phase (a missing barrier) reads it unwritten (NaN) one time
/// or another, whichever thread writes it. A barrier that some threads of the block never reach
/// (a barrier in divergent code) ends the run with a message.
inline void run_grid(dim3 grid, dim3 block, std::size_t smem_bytes, const std::function<void()>& fn) {
    const unsigned nt = block.x * block.y * block.z;
    static unsigned long launches = 0;
    Grid g;
    g.serial = launches++;
    g.fn = &fn;
    g.smem_alloc = (smem_bytes + 255) / 128 * 128;
    std::unique_ptr<unsigned char, decltype(&std::free)> smem(
        static_cast<unsigned char*>(std::aligned_alloc(128, g.smem_alloc)), &std::free);  // 128-byte aligned
    g.edge = Barrier{nt, 0, 0, "the kernel's end"};  // and the next block's start
    g.sync = Barrier{nt, 0, 0, "__syncthreads"};
    const unsigned nwarps = (nt + 31) / 32;
    for (unsigned w = 0; w < nwarps; ++w)
        g.warps.push_back(Barrier{std::min(32u, nt - 32 * w), 0, 0, "__syncwarp"});
    g.fibers.resize(nt);
    for (unsigned t = 0; t < nt; ++t) {
        Fiber& f = g.fibers[t];
        f.st.thread = dim3(t, 0, 0);
        f.st.block_dim = block;
        f.st.grid_dim = grid;
        f.st.smem = smem.get();
        f.st.block_barrier = &g.sync;
        f.st.warp_barrier = &g.warps[t / 32];
        std::size_t bytes = 0;
        unsigned char* stack = fiber_stack(t, bytes);
        make_context(f.ctx, stack, bytes, &fiber_main);
    }
    grid_now = &g;
    for (unsigned left = nt; left > 0;) {
        const bool descending = ((g.serial + g.block_index) & 1) != 0;
        bool ran = false;
        for (unsigned k = 0; k < nt; ++k) {
            Fiber& f = g.fibers[descending ? nt - 1 - k : k];
            if (f.done || (f.waits_on && f.waits_on->generation == f.wait_generation)) continue;
            f.waits_on = nullptr;
            g.running = &f;
            switch_context(g.scheduler, f.ctx);
            ran = true;
            if (f.done) --left;
        }
        if (!ran) {  // every fiber left waits at a barrier that will not open
            std::vector<const Barrier*> barriers = {&g.sync, &g.edge};
            for (const Barrier& w : g.warps) barriers.push_back(&w);
            std::string where;
            for (const Barrier* b : barriers)
                if (b->arrived) where += ", " + std::to_string(b->arrived) + " at " + b->name;
            std::fflush(stdout);
            std::fprintf(stderr, "emulation: deadlock in block (%u, %u) of %u threads: %s (a "
                         "barrier in divergent code?)\n", g.fibers[0].st.block.x,
                         g.fibers[0].st.block.y, nt, where.c_str() + 2);
            std::abort();
        }
    }
    grid_now = nullptr;
}

inline std::mutex& atomic_mutex() {
    static std::mutex m;
    return m;
}

/// The runtime's sticky-until-read error state (cudaGetLastError reads and clears it).
inline int& last_error() {
    static thread_local int e = 0;
    return e;
}

inline long optin_smem() { return env_long("HELMPINN_EMU_SMEM", 232448); }
inline long static_smem() { return env_long("HELMPINN_EMU_STATIC_SMEM", 0); }
inline long max_threads() { return env_long("HELMPINN_EMU_MAX_THREADS", 1024); }
inline long regs_per_thread() { return env_long("HELMPINN_EMU_REGS", 128); }

/// Each kernel's cudaFuncAttributeMaxDynamicSharedMemorySize (48 kB until raised).
inline std::map<const void*, long>& max_dynamic_smem() {
    static std::map<const void*, long> m;
    return m;
}
inline long kernel_max_dynamic(const void* k) {
    std::lock_guard<std::mutex> lock(atomic_mutex());
    auto it = max_dynamic_smem().find(k);
    return it == max_dynamic_smem().end() ? 49152 : it->second;
}

template <typename... KArgs>
struct Launch {
    void (*kernel)(KArgs...);
    dim3 grid, block;
    std::size_t smem;
    template <typename... A>
    void operator()(A&&... a) const {
        const long threads = long(block.x) * block.y * block.z;
        if (threads > max_threads()) {
            last_error() = 701;  // cudaErrorLaunchOutOfResources
            return;
        }
        if (long(smem) > kernel_max_dynamic(reinterpret_cast<const void*>(kernel)) ||
            long(smem) + static_smem() > optin_smem()) {
            last_error() = 1;  // cudaErrorInvalidValue
            return;
        }
        auto k = kernel;
        std::tuple<KArgs...> args(std::forward<A>(a)...);
        run_grid(grid, block, smem, [&] { std::apply(k, args); });
    }
};

template <typename... KArgs>
Launch<KArgs...> launch(void (*k)(KArgs...), dim3 g, dim3 b, std::size_t smem) {
    return Launch<KArgs...>{k, g, b, smem};
}

}  // namespace emu
}  // namespace helmpinn

#define threadIdx (::helmpinn::emu::ts().thread)
#define blockIdx (::helmpinn::emu::ts().block)
#define blockDim (::helmpinn::emu::ts().block_dim)
#define gridDim (::helmpinn::emu::ts().grid_dim)

inline void __syncthreads() { helmpinn::emu::arrive_and_wait(*helmpinn::emu::ts().block_barrier); }
inline void __syncwarp(unsigned = 0xffffffffu) {
    helmpinn::emu::arrive_and_wait(*helmpinn::emu::ts().warp_barrier);
}

inline unsigned long long atomicMin(unsigned long long* p, unsigned long long v) {
    std::lock_guard<std::mutex> lock(helmpinn::emu::atomic_mutex());
    const unsigned long long old = *p;
    if (v < old) *p = v;
    return old;
}

// ---- the runtime API subset -------------------------------------------------------------------
using cudaError_t = int;
constexpr cudaError_t cudaSuccess = 0;
constexpr cudaError_t cudaErrorInvalidValue = 1;
constexpr cudaError_t cudaErrorMemoryAllocation = 2;
constexpr cudaError_t cudaErrorInsufficientDriver = 35;
constexpr cudaError_t cudaErrorNoDevice = 100;
constexpr cudaError_t cudaErrorInvalidDevice = 101;
constexpr cudaError_t cudaErrorLaunchOutOfResources = 701;
using cudaStream_t = void*;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

inline const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
        default: return "cudaErrorUnknown";
    }
}
inline const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInsufficientDriver:
            return "CUDA driver version is insufficient for CUDA runtime version";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
        default: return "unknown error";
    }
}
inline cudaError_t cudaGetLastError() {
    const cudaError_t e = helmpinn::emu::last_error();
    helmpinn::emu::last_error() = cudaSuccess;
    return e;
}
namespace helmpinn {
namespace emu {
inline int& current_device() {
    static thread_local int d = 0;
    return d;
}
inline int device_count() { return int(env_long("HELMPINN_EMU_DEVICES", 1)); }
/// "record <event> on <stream> (device <d>)" and "wait <stream> for <event> (device <d>)", in
/// call order, with events and streams as the numbers tests give them (streams are pointers).
inline std::vector<std::string>& stream_log() {
    static std::vector<std::string> log;
    return log;
}
inline cudaError_t fail(cudaError_t e) {
    last_error() = e;
    return e;
}
}  // namespace emu
}  // namespace helmpinn
inline cudaError_t cudaGetDeviceCount(int* n) {
    *n = 0;
    if (helmpinn::emu::env_long("HELMPINN_EMU_DEVICE_COUNT_ERROR", 0))
        return helmpinn::emu::fail(cudaErrorInsufficientDriver);
    *n = helmpinn::emu::device_count();
    return cudaSuccess;
}
inline cudaError_t cudaGetDevice(int* d) {
    *d = helmpinn::emu::current_device();
    return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int d) {
    if (d < 0 || d >= helmpinn::emu::device_count()) return helmpinn::emu::fail(cudaErrorInvalidDevice);
    helmpinn::emu::current_device() = d;
    return cudaSuccess;
}
namespace helmpinn {
namespace emu {
/// "Device" allocations (start -> bytes and the device current at allocation), so that
/// cudaPointerGetAttributes can tell them apart and name their device.
struct Allocation {
    std::size_t bytes;
    int device;
};
inline std::map<std::uintptr_t, Allocation>& device_allocations() {
    static std::map<std::uintptr_t, Allocation> m;
    return m;
}
}  // namespace emu
}  // namespace helmpinn

inline cudaError_t cudaMalloc(void** p, std::size_t n) {
    *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    if (!*p) return helmpinn::emu::fail(cudaErrorMemoryAllocation);
    std::memset(*p, 0xFF, n);  // uninitialised device memory: NaN bytes
    std::lock_guard<std::mutex> lock(helmpinn::emu::atomic_mutex());
    helmpinn::emu::device_allocations()[reinterpret_cast<std::uintptr_t>(*p)] =
        helmpinn::emu::Allocation{n, helmpinn::emu::current_device()};
    return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
    {
        std::lock_guard<std::mutex> lock(helmpinn::emu::atomic_mutex());
        helmpinn::emu::device_allocations().erase(reinterpret_cast<std::uintptr_t>(p));
    }
    std::free(p);
    return cudaSuccess;
}
inline cudaError_t cudaMallocHost(void** p, std::size_t n) {
    *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    return *p ? cudaSuccess : helmpinn::emu::fail(cudaErrorMemoryAllocation);
}
inline cudaError_t cudaFreeHost(void* p) { std::free(p); return cudaSuccess; }

enum cudaMemoryType { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2,
                      cudaMemoryTypeManaged = 3 };
struct cudaPointerAttributes {
    cudaMemoryType type = cudaMemoryTypeUnregistered;
    int device = 0;
    void* devicePointer = nullptr;
    void* hostPointer = nullptr;
};
inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    *a = cudaPointerAttributes{};
    const auto q = reinterpret_cast<std::uintptr_t>(p);
    std::lock_guard<std::mutex> lock(helmpinn::emu::atomic_mutex());
    auto& m = helmpinn::emu::device_allocations();
    auto it = m.upper_bound(q);
    if (it != m.begin()) {
        --it;
        if (q < it->first + std::max<std::size_t>(it->second.bytes, 1)) {
            a->type = cudaMemoryTypeDevice;
            a->device = it->second.device;
            a->devicePointer = const_cast<void*>(p);
        }
    }
    return cudaSuccess;
}

// Events: an id and the device current at creation; records and waits are logged.
struct EmuEvent {
    int id;
    int device;
};
using cudaEvent_t = EmuEvent*;
constexpr unsigned cudaEventDisableTiming = 2;
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
    static int next = 0;
    *e = new EmuEvent{next++, helmpinn::emu::current_device()};
    return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
inline std::string emu_stream_name(cudaStream_t s) {
    return std::to_string(reinterpret_cast<std::uintptr_t>(s));
}
// As on a GPU: the event and the stream must belong to the current device (streams are
// numbers here, so only the event is checked) or the record fails.
inline cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr) {
    if (e->device != helmpinn::emu::current_device()) return helmpinn::emu::fail(cudaErrorInvalidValue);
    helmpinn::emu::stream_log().push_back("record " + std::to_string(e->id) + " on " +
                                          emu_stream_name(s) + " (device " +
                                          std::to_string(e->device) + ")");
    return cudaSuccess;
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned = 0) {
    helmpinn::emu::stream_log().push_back("wait " + emu_stream_name(s) + " for " +
                                          std::to_string(e->id) + " (device " +
                                          std::to_string(helmpinn::emu::current_device()) + ")");
    return cudaSuccess;
}
inline cudaError_t cudaMemset(void* p, int v, std::size_t n) { std::memset(p, v, n); return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, std::size_t n, cudaStream_t = nullptr) {
    return cudaMemset(p, v, n);
}
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, std::size_t n, cudaMemcpyKind, cudaStream_t = nullptr) {
    std::memcpy(d, s, n);
    return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, std::size_t n, cudaMemcpyKind k) {
    return cudaMemcpyAsync(d, s, n, k);
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
    *v = a == cudaDevAttrMultiProcessorCount ? int(helmpinn::emu::env_long("HELMPINN_EMU_SMS", 3))
                                             : int(helmpinn::emu::optin_smem());
    return cudaSuccess;
}
struct cudaFuncAttributes {
    std::size_t sharedSizeBytes = 0;  // static shared memory
    std::size_t constSizeBytes = 0;
    std::size_t localSizeBytes = 0;
    int maxThreadsPerBlock = 0;
    int numRegs = 0;
    int maxDynamicSharedSizeBytes = 0;
};
template <typename F>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F k) {
    *a = cudaFuncAttributes{};
    a->sharedSizeBytes = std::size_t(helmpinn::emu::static_smem());
    a->maxThreadsPerBlock = int(helmpinn::emu::max_threads());
    a->numRegs = int(helmpinn::emu::regs_per_thread());
    a->maxDynamicSharedSizeBytes = int(helmpinn::emu::kernel_max_dynamic(reinterpret_cast<const void*>(k)));
    return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaFuncSetAttribute(F k, cudaFuncAttribute, int value) {
    if (value < 0 || value > helmpinn::emu::optin_smem() - helmpinn::emu::static_smem())
        return helmpinn::emu::fail(cudaErrorInvalidValue);
    std::lock_guard<std::mutex> lock(helmpinn::emu::atomic_mutex());
    helmpinn::emu::max_dynamic_smem()[reinterpret_cast<const void*>(k)] = value;
    return cudaSuccess;
}
template <typename F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F k, int threads, std::size_t smem) {
    using namespace helmpinn::emu;
    *n = 0;
    if (threads > max_threads() || long(smem) > kernel_max_dynamic(reinterpret_cast<const void*>(k)))
        return cudaSuccess;
    const long per_block_smem = long(smem) + static_smem() + 1024;
    const long by_smem = (optin_smem() + 1024) / per_block_smem;
    const long by_regs = 65536 / (regs_per_thread() * threads);
    const long by_threads = 2048 / threads;
    *n = int(std::max(0L, std::min({by_smem, by_regs, by_threads, 32L})));
    return cudaSuccess;
}

#define HELMPINN_LAUNCH(kernel, grid, block, smem, stream) \
    ::helmpinn::emu::launch(kernel, dim3(grid), dim3(block), smem)
#define HELMPINN_DYNAMIC_SMEM(name) unsigned char* name = ::helmpinn::emu::dynamic_smem()
