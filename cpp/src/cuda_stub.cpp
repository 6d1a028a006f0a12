// Linked when helmpinn is built without CUDA: the CUDA entry points (the device backend, the
// device seed primitives and the device runtime of helmpinn/runtime.hpp) exist and say so.
#include <stdexcept>
#include <string>

#include "backend.hpp"
#include "helmpinn/runtime.hpp"

namespace helmpinn {

bool has_cuda() { return false; }
int cuda_device_count() { return 0; }
std::string cuda_device_error() { return "helmpinn was built without CUDA support"; }

namespace {
[[noreturn]] void no_cuda_runtime(const char* function) {
    throw std::runtime_error(std::string(function) + ": helmpinn was built without CUDA support");
}
}  // namespace

int current_device() { no_cuda_runtime("current_device"); }
DeviceScope::DeviceScope(int) { no_cuda_runtime("DeviceScope"); }
DeviceScope::~DeviceScope() = default;
PointerInfo pointer_info(const void*) { no_cuda_runtime("pointer_info"); }
int device_for_pointer(const void*) { no_cuda_runtime("device_for_pointer"); }
DeviceBuffer::DeviceBuffer(std::size_t, int) { no_cuda_runtime("DeviceBuffer"); }
void DeviceBuffer::reset() noexcept {}  // never holds memory here
void copy_to_device(void*, const void*, std::size_t, int) { no_cuda_runtime("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t, int) { no_cuda_runtime("copy_to_host"); }
void stream_wait(void*, void*, int) { no_cuda_runtime("stream_wait"); }

template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend(const ModelSpec&, std::size_t, int) {
    throw std::runtime_error("helmpinn was built without CUDA support (device='cuda' unavailable)");
}

template std::unique_ptr<Backend<float>> make_cuda_backend(const ModelSpec&, std::size_t, int);
template std::unique_ptr<Backend<double>> make_cuda_backend(const ModelSpec&, std::size_t, int);

namespace {
[[noreturn]] void no_cuda(const char* function) {
    throw std::runtime_error(std::string(function) +
                             "(Device::cuda): helmpinn was built without CUDA support");
}
}  // namespace

template <typename T>
void cuda_mse_backward(const T*, const T*, std::size_t, std::size_t, T*, void*) {
    no_cuda("mse_backward");
}
template <typename T>
void cuda_layer_backward(const T*, const T*, const T*, const T*, std::size_t, std::size_t,
                         std::size_t, bool, T*, T*, T*, void*) {
    no_cuda("layer_backward");
}
template <typename T>
void cuda_fourier_backward(const T*, const T*, const T*, std::size_t, std::size_t, std::size_t,
                           T*, void*) {
    no_cuda("fourier_backward");
}
template <typename T>
void cuda_adam_step(T*, const T*, T*, T*, std::size_t, long, double, double, double, double,
                    double, void*) {
    no_cuda("adam_step");
}

HELMPINN_INSTANTIATE_CUDA_PRIMITIVES(float)
HELMPINN_INSTANTIATE_CUDA_PRIMITIVES(double)

}  // namespace helmpinn
