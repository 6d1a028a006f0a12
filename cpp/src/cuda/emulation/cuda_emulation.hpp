// A CPU emulation of the little of CUDA that the backend uses, for testing the kernels on a
// machine without a GPU (HELMPINN_CUDA_EMULATION; see cpp/tests/cuda/emu_check.cpp).
//
// The kernels compile as ordinary C++: a launch runs the grid's blocks one after another, each
// block as blockDim.x OS threads, with __syncthreads and __syncwarp as real barriers over the
// block and over each warp of 32, and dynamic shared memory as a per-block buffer that starts
// filled with 0xFF bytes (NaN in float and double) so that a read of memory nobody wrote shows
// up in the results. Device memory is host memory; streams are ignored (all work is
// synchronous, but the calls that order them are logged, see below); the device's attributes
// come from environment variables:
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
// What this cannot show: races that real concurrent warps could hit but these OS threads do
// not (every barrier is a full barrier here), and anything about speed.
#pragma once

#include <algorithm>
#include <atomic>
#include <barrier>
#include <condition_variable>
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
#include <thread>
#include <vector>

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

struct ThreadState {
    dim3 thread, block, block_dim, grid_dim;
    unsigned char* smem = nullptr;
    std::barrier<>* block_barrier = nullptr;
    std::barrier<>* warp_barrier = nullptr;
};
inline thread_local ThreadState ts;

inline unsigned char* dynamic_smem() { return ts.smem; }

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

/// Worker threads that persist across launches (creating 256 OS threads per launch would
/// dominate the run time). run(nt, work) calls work(t) on threads t = 0 .. nt-1 and waits.
class Pool {
public:
    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(mu_);
            stop_ = true;
            ++gen_;
        }
        cv_.notify_all();
        for (auto& w : workers_) w.join();
    }
    void run(unsigned nt, const std::function<void(unsigned)>& work) {
        std::unique_lock<std::mutex> lock(mu_);
        while (workers_.size() < nt) {
            const unsigned i = unsigned(workers_.size());
            workers_.emplace_back([this, i] { loop(i); });
        }
        work_ = &work;
        nt_ = nt;
        remaining_ = nt;
        ++gen_;
        cv_.notify_all();
        done_.wait(lock, [this] { return remaining_ == 0; });
        work_ = nullptr;
    }

private:
    void loop(unsigned i) {
        unsigned long seen = 0;
        {
            std::lock_guard<std::mutex> lock(mu_);
            seen = gen_ - (work_ && i < nt_ ? 1 : 0);  // a worker started during run() joins it
        }
        for (;;) {
            const std::function<void(unsigned)>* work = nullptr;
            {
                std::unique_lock<std::mutex> lock(mu_);
                cv_.wait(lock, [&] { return gen_ != seen; });
                seen = gen_;
                if (stop_) return;
                if (i >= nt_) continue;
                work = work_;
            }
            (*work)(i);
            std::lock_guard<std::mutex> lock(mu_);
            if (--remaining_ == 0) done_.notify_all();
        }
    }
    std::vector<std::thread> workers_;
    std::mutex mu_;
    std::condition_variable cv_, done_;
    unsigned long gen_ = 0;
    unsigned nt_ = 0, remaining_ = 0;
    const std::function<void(unsigned)>* work_ = nullptr;
    bool stop_ = false;
};

inline Pool& pool() {
    static Pool p;
    return p;
}

/// Runs fn() as the threads of every block of the grid: blockDim threads take the blocks in
/// order together (a barrier between blocks; shared memory refilled with NaN bytes per block).
inline void run_grid(dim3 grid, dim3 block, std::size_t smem_bytes, const std::function<void()>& fn) {
    const unsigned nt = block.x * block.y * block.z;
    const std::size_t smem_alloc = (smem_bytes + 255) / 128 * 128;
    std::unique_ptr<unsigned char, decltype(&std::free)> smem(
        static_cast<unsigned char*>(std::aligned_alloc(128, smem_alloc)), &std::free);  // 128-byte aligned
    std::barrier<> bar(nt);
    const unsigned nwarps = (nt + 31) / 32;
    std::vector<std::unique_ptr<std::barrier<>>> warps;
    for (unsigned w = 0; w < nwarps; ++w)
        warps.push_back(std::make_unique<std::barrier<>>(std::min(32u, nt - 32 * w)));
    const std::function<void(unsigned)> work = [&](unsigned t) {
        ts.thread = dim3(t, 0, 0);
        ts.block_dim = block;
        ts.grid_dim = grid;
        ts.smem = smem.get();
        ts.block_barrier = &bar;
        ts.warp_barrier = warps[t / 32].get();
        for (unsigned by = 0; by < grid.y; ++by) {
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                ts.block = dim3(bx, by, 0);
                if (t == 0) std::memset(smem.get(), 0xFF, smem_alloc);
                bar.arrive_and_wait();
                fn();
                bar.arrive_and_wait();
            }
        }
    };
    pool().run(nt, work);
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

#define threadIdx (::helmpinn::emu::ts.thread)
#define blockIdx (::helmpinn::emu::ts.block)
#define blockDim (::helmpinn::emu::ts.block_dim)
#define gridDim (::helmpinn::emu::ts.grid_dim)

inline void __syncthreads() { helmpinn::emu::ts.block_barrier->arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) { helmpinn::emu::ts.warp_barrier->arrive_and_wait(); }

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
