// helmpinn/runtime.hpp: what this build of helmpinn can do, its thread count, and the little of
// the CUDA runtime that callers holding device memory need (faiss-style: a device scope, which
// device owns a pointer, an owning device buffer, copies, ordering one stream after another).
//
// No CUDA header and no CUDA type here, and nothing depends on how the library was built: the
// same declarations exist in every build. A CUDA stream crosses as a void* (a cudaStream_t;
// nullptr = the legacy default stream). In a build without CUDA every device function below
// throws std::runtime_error("<function>: helmpinn was built without CUDA support"); with CUDA
// but no usable device they throw std::runtime_error with the CUDA runtime's error. Nothing
// aborts.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace helmpinn {

/// Version string of the library ("MAJOR.MINOR.PATCH").
const char* version();
/// True when the library was compiled with OpenMP.
bool has_openmp();
/// Threads the CPU backend uses (OpenMP max threads; 1 without OpenMP).
int get_num_threads();
/// Sets the CPU backend's thread count (omp_set_num_threads: it applies to parallel work started
/// from the calling thread). Throws std::invalid_argument if n < 1; no effect without OpenMP.
void set_num_threads(int n);
/// Runs task(i, context) for every i in [0, n) on the CPU backend's threads (OpenMP, one index
/// at a time to whichever thread is free; serially on the calling thread without OpenMP, with
/// one thread, or inside a parallel region). For host work a caller wants on the engine's own
/// threads, so that the two never compete for the cores: helmpinn's Gauss-Newton solver runs
/// its preconditioner's block solves (SciPy's BLAS) this way. task must not throw; no heap
/// allocation. Throws std::invalid_argument if n < 0 or task is null.
void parallel_tasks(std::int64_t n, void (*task)(std::int64_t i, void* context), void* context);
/// True when the library was compiled with its CUDA backend.
bool has_cuda();
/// Number of CUDA devices visible (0 without CUDA support or without a GPU).
int cuda_device_count();
/// Why cuda_device_count() is 0: the failing cudaGetDeviceCount's error (name and text), "no
/// CUDA device found", or "helmpinn was built without CUDA support"; empty when there are devices.
std::string cuda_device_error();
/// The CPU kernel set in use. A dispatching build (the default with GCC on x86-64) compiles
/// three and picks the best one the processor supports at first use: "avx512", "avx2" or
/// "baseline"; the environment variable HELMPINN_CPU_ISA forces one of them (then "invalid"
/// when it names none the processor supports, and creating a CPU Workspace throws
/// std::invalid_argument saying why). A native build (HELMPINN_NATIVE) has one set, named after
/// the instruction set it was compiled for ("avx512", "avx2", "avx", "sse2", ...).
const char* cpu_isa();
/// The kernel sets this build has, comma-separated: "baseline,avx2,avx512" or "native".
const char* cpu_kernel_sets();

// ---- the CUDA runtime -----------------------------------------------------------------------

/// The calling thread's current CUDA device (cudaGetDevice).
int current_device();

/// Makes `device` the calling thread's current CUDA device for the life of the object and then
/// restores the previous one (only when it had to change it). Throws std::runtime_error when
/// the device cannot be made current (no such device, no driver, no CUDA support).
class DeviceScope {
public:
    explicit DeviceScope(int device);
    ~DeviceScope();
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;
    /// The device that was current before (and will be again).
    int previous() const { return previous_; }

private:
    int previous_ = 0;
    bool changed_ = false;
};

/// What kind of memory a pointer points into, as the CUDA runtime sees it.
enum class MemoryKind {
    host,         ///< ordinary (pageable, unregistered) host memory, or a pointer CUDA does not know
    pinned_host,  ///< page-locked host memory (cudaMallocHost, cudaHostRegister)
    device,       ///< device memory of one device (cudaMalloc)
    managed,      ///< unified memory (cudaMallocManaged), reachable from every device
};

/// Where the memory at a pointer lives.
struct PointerInfo {
    MemoryKind kind = MemoryKind::host;
    /// The device that owns the memory: for device memory the only one that may touch it; for
    /// managed and pinned memory the one it was allocated with; -1 for host memory.
    int device = -1;
    /// True for memory a kernel of `device` can read and write in place (device or managed).
    bool on_device() const { return kind == MemoryKind::device || kind == MemoryKind::managed; }
};

/// Asks the CUDA runtime where `ptr` lives (cudaPointerGetAttributes). Throws
/// std::runtime_error when it cannot be asked.
PointerInfo pointer_info(const void* ptr);

/// The device that owns `ptr`, or -1 when it is host memory (pageable or pinned). Managed
/// memory: the device it was allocated with. As pointer_info.
int device_for_pointer(const void* ptr);

/// Device memory owned by the object: `bytes` allocated on `device` with cudaMalloc (that device
/// made current for the call) and freed on destruction with the same device current. Movable,
/// not copyable; a moved-from or default-constructed buffer is empty (data() == nullptr). Zero
/// bytes allocate nothing. The contents start undefined.
class DeviceBuffer {
public:
    DeviceBuffer() noexcept = default;
    /// Throws std::runtime_error naming the size and the device when it cannot allocate.
    DeviceBuffer(std::size_t bytes, int device);
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(DeviceBuffer&& o) noexcept
        : data_(o.data_), bytes_(o.bytes_), device_(o.device_) {
        o.data_ = nullptr;
        o.bytes_ = 0;
    }
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
        if (this != &o) {
            reset();
            data_ = o.data_;
            bytes_ = o.bytes_;
            device_ = o.device_;
            o.data_ = nullptr;
            o.bytes_ = 0;
        }
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    std::size_t bytes() const { return bytes_; }
    /// The device the memory is on (the one given at construction).
    int device() const { return device_; }
    bool empty() const { return data_ == nullptr; }
    /// Frees the memory now (errors are ignored: a destructor must not throw).
    void reset() noexcept;

private:
    void* data_ = nullptr;
    std::size_t bytes_ = 0;
    int device_ = 0;
};

/// Copies `bytes` from host memory to device memory of `device`, synchronously (cudaMemcpy with
/// `device` current; it is ordered after work on the legacy default stream). Zero bytes: nothing
/// is done (in a CUDA build).
void copy_to_device(void* dst, const void* src, std::size_t bytes, int device);
/// Copies `bytes` from device memory of `device` to host memory after all work on `device` has
/// finished (cudaDeviceSynchronize, then cudaMemcpy).
void copy_to_host(void* dst, const void* src, std::size_t bytes, int device);

/// Orders `consumer` after the work enqueued so far on `producer`, both streams of `device`
/// (made current for the call): an event is recorded on `producer` and waited for on `consumer`
/// (cudaEventRecord + cudaStreamWaitEvent; the host does not wait). Nothing is done when the two
/// are the same stream; nullptr and cudaStreamLegacy (the handle 1) are both the legacy default
/// stream. One event per device is created at first use and reused, under a lock.
void stream_wait(void* consumer, void* producer, int device);

}  // namespace helmpinn
