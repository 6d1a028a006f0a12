// Linked when helmpinn is built without CUDA: the CUDA entry points exist and say so.
#include <stdexcept>

#include "backend.hpp"
#include "helmpinn/runtime.hpp"

namespace helmpinn {

bool has_cuda() { return false; }
int cuda_device_count() { return 0; }

template <typename T>
std::unique_ptr<Backend<T>> make_cuda_backend(const ModelSpec&, std::size_t, int) {
    throw std::runtime_error("helmpinn was built without CUDA support (device='cuda' unavailable)");
}

template std::unique_ptr<Backend<float>> make_cuda_backend(const ModelSpec&, std::size_t, int);
template std::unique_ptr<Backend<double>> make_cuda_backend(const ModelSpec&, std::size_t, int);

}  // namespace helmpinn
