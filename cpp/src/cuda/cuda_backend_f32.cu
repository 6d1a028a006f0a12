// make_cuda_backend<float>: the CUDA backend's float kernels (cuda_backend.cuh, fused.cuh). float and
// double live in two translation units so that a two-core build compiles them side by side.
#include "cuda_backend.cuh"

namespace helmpinn {

template std::unique_ptr<Backend<float>> make_cuda_backend<float>(const ModelSpec&, std::size_t, int);

}  // namespace helmpinn
