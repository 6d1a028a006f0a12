// The DLPack ABI that device_arrays.hpp reads: the structs of dlpack.h, version 0.x, as a
// "dltensor" capsule holds them (written out here from the published layout, so that the
// bindings need no DLPack header). Only the fields and codes the bindings use are named.
#pragma once

#include <cstdint>

namespace helmpinn {
namespace bindings {

namespace dlpack {
enum DeviceType : std::int32_t { kCPU = 1, kCUDA = 2, kCUDAHost = 3, kCUDAManaged = 13 };
enum TypeCode : std::uint8_t { kInt = 0, kUInt = 1, kFloat = 2, kBfloat = 4, kComplex = 5, kBool = 6 };
struct Device {
    std::int32_t device_type;
    std::int32_t device_id;
};
struct DataType {
    std::uint8_t code;
    std::uint8_t bits;
    std::uint16_t lanes;
};
struct Tensor {
    void* data;
    Device device;
    std::int32_t ndim;
    DataType dtype;
    std::int64_t* shape;
    std::int64_t* strides;
    std::uint64_t byte_offset;
};
struct ManagedTensor {
    Tensor dl_tensor;
    void* manager_ctx;
    void (*deleter)(ManagedTensor*);
};
}  // namespace dlpack

}  // namespace bindings
}  // namespace helmpinn
