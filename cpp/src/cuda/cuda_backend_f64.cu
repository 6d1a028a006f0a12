// make_cuda_backend<double>: the CUDA backend's double kernels (cuda_backend.cuh, fused.cuh). float and
// double live in two translation units so that a two-core build compiles them side by side.
#include "cuda_backend.cuh"

namespace helmpinn {

template std::unique_ptr<Backend<double>> make_cuda_backend<double>(const ModelSpec&, std::size_t, int);

}  // namespace helmpinn
