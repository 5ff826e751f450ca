// Tensors on the wire (anvil.v1.Tensor): dtype, shape and raw little-endian bytes.
//
// Decoding validates before it allocates: a known dtype, non-negative dims, the element count
// computed with overflow checks, and the byte size equal to count x itemsize. Errors are
// INVALID_ARGUMENT naming the tensor and both sizes.
#pragma once

#include <string>

#include "core/tensor/tensor.h"
#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::server {

ScalarType from_wire_dtype(v1::DType dtype, const std::string& tensor_name);
v1::DType to_wire_dtype(ScalarType dtype);
std::string wire_dtype_name(v1::DType dtype);  // "FLOAT32", ...

// A tensor owning a copy of the bytes.
Tensor decode_tensor(const v1::Tensor& wire);
// Writes `t` (any layout, any device) as contiguous little-endian bytes.
void encode_tensor(const Tensor& t, const std::string& name, v1::Tensor* wire);

}  // namespace anvil::server
