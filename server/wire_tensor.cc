#include "server/wire_tensor.h"

#include <cstring>
#include <limits>

#include "core/ops/functions.h"
#include "server/status.h"

namespace anvil::server {
namespace {}  // namespace

ScalarType from_wire_dtype(v1::DType dtype, const std::string& tensor_name) {
  switch (dtype) {
    case v1::FLOAT32:
      return kFloat32;
    case v1::FLOAT64:
      return kFloat64;
    case v1::FLOAT16:
      return kFloat16;
    case v1::BFLOAT16:
      return kBFloat16;
    case v1::INT64:
      return kInt64;
    case v1::INT32:
      return kInt32;
    case v1::UINT8:
      return kUInt8;
    case v1::BOOL:
      return kBool;
    default:
      throw ServiceError(absl::StatusCode::kInvalidArgument,
                         "tensor '" + tensor_name +
                             "': expected a dtype (FLOAT32, FLOAT64, FLOAT16, BFLOAT16, INT64, "
                             "INT32, UINT8 or BOOL), got " +
                             v1::DType_Name(dtype));
  }
}

v1::DType to_wire_dtype(ScalarType dtype) {
  switch (dtype) {
    case kFloat32:
      return v1::FLOAT32;
    case kFloat64:
      return v1::FLOAT64;
    case kFloat16:
      return v1::FLOAT16;
    case kBFloat16:
      return v1::BFLOAT16;
    case kInt64:
      return v1::INT64;
    case kInt32:
      return v1::INT32;
    case kUInt8:
      return v1::UINT8;
    case kBool:
      return v1::BOOL;
    default:
      throw ServiceError(absl::StatusCode::kInternal, detail::StrCat("dtype ", dtype, " has no wire form"));
  }
}

std::string wire_dtype_name(v1::DType dtype) {
  // A value no release defines (a newer client, a hostile one) by its number, not as "".
  const std::string name = v1::DType_Name(dtype);
  return name.empty() ? "DType(" + std::to_string(static_cast<int>(dtype)) + ")" : name;
}

Tensor decode_tensor(const v1::Tensor& wire) {
  const std::string name = wire.name().empty() ? "input" : wire.name();
  const ScalarType dtype = from_wire_dtype(wire.dtype(), name);
  IntArray shape;
  shape.reserve(wire.shape_size());
  int64_t count = 1;
  bool overflow = false;
  for (int64_t d : wire.shape()) {
    ANVIL_SERVICE_CHECK(d >= 0, absl::StatusCode::kInvalidArgument, "tensor '", name,
                        "': dims must be non-negative, got ", d, " in shape ",
                        shape_str(IntArray(wire.shape().begin(), wire.shape().end())));
    if (d != 0 && count > std::numeric_limits<int64_t>::max() / d) overflow = true;
    if (!overflow) count *= d;
    shape.push_back(d);
  }
  const int64_t item = itemsize(dtype);
  const auto raw_size = static_cast<int64_t>(wire.raw().size());
  ANVIL_SERVICE_CHECK(!overflow && count <= std::numeric_limits<int64_t>::max() / item,
                      absl::StatusCode::kInvalidArgument, "tensor '", name, "': shape ", shape_str(shape),
                      " has more elements than fit in memory (", raw_size, " bytes were sent)");
  ANVIL_SERVICE_CHECK(count * item == raw_size, absl::StatusCode::kInvalidArgument, "tensor '", name, "': shape ",
                      shape_str(shape), " of ", wire_dtype_name(wire.dtype()), " needs ", count * item, " bytes (",
                      count, " x ", item, "), got ", raw_size);
  Tensor t;
  try {
    t = empty(shape, TensorOptions(dtype));
  } catch (const Error& e) {  // a shape with a zero dim whose other dims overflow the strides
    throw ServiceError(absl::StatusCode::kInvalidArgument, detail::StrCat("tensor '", name, "': ", e.what()));
  }
  if (raw_size > 0) std::memcpy(t.data_ptr(), wire.raw().data(), static_cast<size_t>(raw_size));
  return t;
}

void encode_tensor(const Tensor& t, const std::string& name, v1::Tensor* wire) {
  const Tensor c = t.to(kCPU).contiguous();
  wire->set_name(name);
  wire->set_dtype(to_wire_dtype(c.dtype()));
  wire->clear_shape();
  for (int64_t d : c.sizes()) wire->add_shape(d);
  wire->set_raw(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * itemsize(c.dtype())));
}

}  // namespace anvil::server
