// The runtime of a build with the CUDA backend: has_cuda(), cuda_device_count(),
// cuda_device_error(), and the device API of helmpinn/runtime.hpp (DeviceScope, pointer_info,
// DeviceBuffer, copies, stream_wait). The only place outside the kernels' own host code that
// calls the CUDA runtime; the Python bindings call these.
//
// With the static CUDA runtime a machine without a driver or a GPU makes cudaGetDeviceCount
// fail: cuda_device_count() says 0 and cuda_device_error() says why (no driver, a driver older
// than the runtime, a tool such as compute-sanitizer refusing the device, ...).
//
// Compiled by nvcc in a CUDA build, and by the host compiler under the CPU emulation of CUDA
// (cpp/tests/cuda/emu_check.cpp includes this file).
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "helmpinn/runtime.hpp"

namespace helmpinn {

namespace {

/// "cudaErrorX (text)", and the runtime's last-error state cleared.
std::string error_text(cudaError_t e) {
    (void)cudaGetLastError();
    return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

[[noreturn]] void fail(const std::string& what, cudaError_t e) {
    throw std::runtime_error("helmpinn CUDA: " + what + ": " + error_text(e));
}

}  // namespace

bool has_cuda() { return true; }

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

std::string cuda_device_error() {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess) return n > 0 ? std::string() : std::string("no CUDA device found");
    return "cudaGetDeviceCount: " + error_text(e);
}

int current_device() {
    int d = 0;
    const cudaError_t e = cudaGetDevice(&d);
    if (e != cudaSuccess) fail("current_device: cudaGetDevice", e);
    return d;
}

DeviceScope::DeviceScope(int device) {
    cudaError_t e = cudaGetDevice(&previous_);
    if (e == cudaSuccess && previous_ != device) {
        e = cudaSetDevice(device);
        changed_ = e == cudaSuccess;
    }
    if (e != cudaSuccess)
        fail("cannot make CUDA device " + std::to_string(device) + " current", e);
}

DeviceScope::~DeviceScope() {
    if (changed_ && cudaSetDevice(previous_) != cudaSuccess) (void)cudaGetLastError();
}

PointerInfo pointer_info(const void* ptr) {
    cudaPointerAttributes attr{};
    const cudaError_t e = cudaPointerGetAttributes(&attr, ptr);
    if (e != cudaSuccess) fail("pointer_info: cudaPointerGetAttributes", e);
    PointerInfo info;
    switch (attr.type) {
        case cudaMemoryTypeDevice: info.kind = MemoryKind::device; break;
        case cudaMemoryTypeManaged: info.kind = MemoryKind::managed; break;
        case cudaMemoryTypeHost: info.kind = MemoryKind::pinned_host; break;
        default: info.kind = MemoryKind::host; break;
    }
    info.device = info.kind == MemoryKind::host ? -1 : attr.device;
    return info;
}

int device_for_pointer(const void* ptr) {
    const PointerInfo info = pointer_info(ptr);
    return info.on_device() ? info.device : -1;
}

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : device_(device) {
    if (bytes == 0) return;
    DeviceScope scope(device);
    void* p = nullptr;
    const cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess)
        fail("cannot allocate " + std::to_string(bytes) + " bytes on CUDA device " +
                 std::to_string(device) + ": cudaMalloc",
             e);
    data_ = p;
    bytes_ = bytes;
}

void DeviceBuffer::reset() noexcept {
    if (!data_) return;
    // cudaFree with the buffer's device current; without a way to make it current (a driver
    // gone at exit) the memory goes with the process.
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess &&
        (prev == device_ || cudaSetDevice(device_) == cudaSuccess)) {
        (void)cudaFree(data_);
        if (prev != device_) (void)cudaSetDevice(prev);
    }
    (void)cudaGetLastError();
    data_ = nullptr;
    bytes_ = 0;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, int device) {
    if (bytes == 0) return;
    DeviceScope scope(device);
    const cudaError_t e = cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice);
    if (e != cudaSuccess) fail("copy_to_device: cudaMemcpy", e);
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, int device) {
    if (bytes == 0) return;
    DeviceScope scope(device);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) fail("copy_to_host: cudaDeviceSynchronize", e);
    e = cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) fail("copy_to_host: cudaMemcpy", e);
}

namespace {

bool same_stream(void* a, void* b) {
    // nullptr (0) and cudaStreamLegacy (1) both name the legacy default stream.
    const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
    return x == y || (x <= 1 && y <= 1);
}

}  // namespace

void stream_wait(void* consumer, void* producer, int device) {
    if (same_stream(consumer, producer)) return;
    if (device < 0) fail("stream_wait: device " + std::to_string(device), cudaErrorInvalidDevice);
    DeviceScope scope(device);  // the event and both streams belong to `device`
    // One event per device, created at first use and never destroyed (a static destructor may
    // run after the CUDA runtime is gone). The lock keeps another thread from recording it
    // between our record and our wait.
    static std::mutex mutex;
    static std::vector<cudaEvent_t> events;
    std::lock_guard<std::mutex> lock(mutex);
    if (events.size() <= std::size_t(device)) events.resize(std::size_t(device) + 1, nullptr);
    cudaEvent_t& ev = events[std::size_t(device)];
    if (!ev) {
        const cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
        if (e != cudaSuccess) {
            ev = nullptr;
            fail("stream_wait: cudaEventCreateWithFlags", e);
        }
    }
    cudaError_t e = cudaEventRecord(ev, static_cast<cudaStream_t>(producer));
    if (e != cudaSuccess) fail("stream_wait: cudaEventRecord on the producer stream", e);
    e = cudaStreamWaitEvent(static_cast<cudaStream_t>(consumer), ev, 0);
    if (e != cudaSuccess) fail("stream_wait: cudaStreamWaitEvent on the consumer stream", e);
}

}  // namespace helmpinn
