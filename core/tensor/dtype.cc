#include "core/tensor/dtype.h"

namespace anvil {

std::string_view dtype_name(ScalarType t) {
  switch (t) {
    case kBool:
      return "bool";
    case kUInt8:
      return "uint8";
    case kInt8:
      return "int8";
    case kInt16:
      return "int16";
    case kInt32:
      return "int32";
    case kInt64:
      return "int64";
    case kFloat16:
      return "float16";
    case kBFloat16:
      return "bfloat16";
    case kFloat32:
      return "float32";
    case kFloat64:
      return "float64";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, ScalarType t) { return os << dtype_name(t); }

ScalarType promote_types(ScalarType a, ScalarType b) {
  if (a == b) return a;
  // Mirrors PyTorch's table for these ten types.
  constexpr ScalarType b1 = kBool, u1 = kUInt8, i1 = kInt8, i2 = kInt16, i4 = kInt32, i8 = kInt64, f2 = kFloat16,
                       bf = kBFloat16, f4 = kFloat32, f8 = kFloat64;
  static constexpr ScalarType table[kNumScalarTypes][kNumScalarTypes] = {
      /*        b1  u1  i1  i2  i4  i8  f2  bf  f4  f8 */
      /* b1 */ {b1, u1, i1, i2, i4, i8, f2, bf, f4, f8},
      /* u1 */ {u1, u1, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i1 */ {i1, i2, i1, i2, i4, i8, f2, bf, f4, f8},
      /* i2 */ {i2, i2, i2, i2, i4, i8, f2, bf, f4, f8},
      /* i4 */ {i4, i4, i4, i4, i4, i8, f2, bf, f4, f8},
      /* i8 */ {i8, i8, i8, i8, i8, i8, f2, bf, f4, f8},
      /* f2 */ {f2, f2, f2, f2, f2, f2, f2, f4, f4, f8},
      /* bf */ {bf, bf, bf, bf, bf, bf, f4, bf, f4, f8},
      /* f4 */ {f4, f4, f4, f4, f4, f4, f4, f4, f4, f8},
      /* f8 */ {f8, f8, f8, f8, f8, f8, f8, f8, f8, f8},
  };
  return table[static_cast<int>(a)][static_cast<int>(b)];
}

ScalarType default_dtype() { return kFloat32; }

}  // namespace anvil
