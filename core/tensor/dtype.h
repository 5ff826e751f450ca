// Element types and PyTorch's type-promotion lattice.
#pragma once

#include <cstdint>
#include <ostream>
#include <string_view>
#include <type_traits>

#include "core/util/error.h"
#include "core/util/half.h"

namespace anvil {

// Ordered so that promotion within a category picks the larger value.
enum class ScalarType : int8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};
constexpr int kNumScalarTypes = 10;

constexpr ScalarType kBool = ScalarType::Bool;
constexpr ScalarType kUInt8 = ScalarType::UInt8;
constexpr ScalarType kByte = ScalarType::UInt8;
constexpr ScalarType kInt8 = ScalarType::Int8;
constexpr ScalarType kChar = ScalarType::Int8;
constexpr ScalarType kInt16 = ScalarType::Int16;
constexpr ScalarType kShort = ScalarType::Int16;
constexpr ScalarType kInt32 = ScalarType::Int32;
constexpr ScalarType kInt = ScalarType::Int32;
constexpr ScalarType kInt64 = ScalarType::Int64;
constexpr ScalarType kLong = ScalarType::Int64;
constexpr ScalarType kFloat16 = ScalarType::Float16;
constexpr ScalarType kHalf = ScalarType::Float16;
constexpr ScalarType kBFloat16 = ScalarType::BFloat16;
constexpr ScalarType kFloat32 = ScalarType::Float32;
constexpr ScalarType kFloat = ScalarType::Float32;
constexpr ScalarType kFloat64 = ScalarType::Float64;
constexpr ScalarType kDouble = ScalarType::Float64;

constexpr int64_t itemsize(ScalarType t) {
  switch (t) {
    case kBool:
    case kUInt8:
    case kInt8:
      return 1;
    case kInt16:
    case kFloat16:
    case kBFloat16:
      return 2;
    case kInt32:
    case kFloat32:
      return 4;
    case kInt64:
    case kFloat64:
      return 8;
  }
  return 0;
}

constexpr bool is_floating_point(ScalarType t) {
  return t == kFloat16 || t == kBFloat16 || t == kFloat32 || t == kFloat64;
}
constexpr bool is_integral(ScalarType t, bool include_bool) {
  return (t >= kUInt8 && t <= kInt64) || (include_bool && t == kBool);
}

std::string_view dtype_name(ScalarType t);  // "float32", ...
std::ostream& operator<<(std::ostream& os, ScalarType t);

// PyTorch's promote_types: the smallest type both convert to without losing range.
ScalarType promote_types(ScalarType a, ScalarType b);

// The default floating dtype (float32), used for integer inputs of float-only ops.
ScalarType default_dtype();

template <typename T>
struct CppTypeToScalarType;
#define ANVIL_CPP_TO_DTYPE(T, D)           \
  template <>                              \
  struct CppTypeToScalarType<T> {          \
    static constexpr ScalarType value = D; \
  };
ANVIL_CPP_TO_DTYPE(bool, kBool)
ANVIL_CPP_TO_DTYPE(uint8_t, kUInt8)
ANVIL_CPP_TO_DTYPE(int8_t, kInt8)
ANVIL_CPP_TO_DTYPE(int16_t, kInt16)
ANVIL_CPP_TO_DTYPE(int32_t, kInt32)
ANVIL_CPP_TO_DTYPE(int64_t, kInt64)
ANVIL_CPP_TO_DTYPE(Half, kFloat16)
ANVIL_CPP_TO_DTYPE(BFloat16, kBFloat16)
ANVIL_CPP_TO_DTYPE(float, kFloat32)
ANVIL_CPP_TO_DTYPE(double, kFloat64)
#undef ANVIL_CPP_TO_DTYPE

// The type arithmetic runs in: float for the 16-bit floats, the type itself otherwise.
template <typename T>
struct OpMath {
  using type = T;
};
template <>
struct OpMath<Half> {
  using type = float;
};
template <>
struct OpMath<BFloat16> {
  using type = float;
};
template <typename T>
using opmath_t = typename OpMath<T>::type;

}  // namespace anvil

// Runs the trailing lambda body with `scalar_t` bound to the C++ type of `TYPE`.
#define ANVIL_DTYPE_CASE(D, T, ...) \
  case D: {                         \
    using scalar_t = T;             \
    return __VA_ARGS__();           \
  }
#define ANVIL_FLOATING_CASES(...)                                 \
  ANVIL_DTYPE_CASE(::anvil::kFloat32, float, __VA_ARGS__)         \
  ANVIL_DTYPE_CASE(::anvil::kFloat64, double, __VA_ARGS__)        \
  ANVIL_DTYPE_CASE(::anvil::kFloat16, ::anvil::Half, __VA_ARGS__) \
  ANVIL_DTYPE_CASE(::anvil::kBFloat16, ::anvil::BFloat16, __VA_ARGS__)
#define ANVIL_INTEGRAL_CASES(...)                         \
  ANVIL_DTYPE_CASE(::anvil::kInt64, int64_t, __VA_ARGS__) \
  ANVIL_DTYPE_CASE(::anvil::kInt32, int32_t, __VA_ARGS__) \
  ANVIL_DTYPE_CASE(::anvil::kInt16, int16_t, __VA_ARGS__) \
  ANVIL_DTYPE_CASE(::anvil::kInt8, int8_t, __VA_ARGS__)   \
  ANVIL_DTYPE_CASE(::anvil::kUInt8, uint8_t, __VA_ARGS__)
#define ANVIL_DISPATCH_FLOATING(TYPE, NAME, ...)                                                                   \
  [&] {                                                                                                            \
    switch (TYPE) {                                                                                                \
      ANVIL_FLOATING_CASES(__VA_ARGS__)                                                                            \
      default:                                                                                                     \
        throw ::anvil::TypeError(::anvil::detail::StrCat(NAME, ": expected a floating-point tensor, got ", TYPE)); \
    }                                                                                                              \
  }()
#define ANVIL_DISPATCH_ALL(TYPE, NAME, ...)                                                \
  [&] {                                                                                    \
    switch (TYPE) {                                                                        \
      ANVIL_FLOATING_CASES(__VA_ARGS__)                                                    \
      ANVIL_INTEGRAL_CASES(__VA_ARGS__)                                                    \
      ANVIL_DTYPE_CASE(::anvil::kBool, bool, __VA_ARGS__)                                  \
    }                                                                                      \
    throw ::anvil::TypeError(::anvil::detail::StrCat(NAME, ": unsupported dtype ", TYPE)); \
  }()
// All types but bool (arithmetic that PyTorch refuses on bool, like subtraction).
#define ANVIL_DISPATCH_NUMERIC(TYPE, NAME, ...)                                                      \
  [&] {                                                                                              \
    switch (TYPE) {                                                                                  \
      ANVIL_FLOATING_CASES(__VA_ARGS__)                                                              \
      ANVIL_INTEGRAL_CASES(__VA_ARGS__)                                                              \
      default:                                                                                       \
        throw ::anvil::TypeError(::anvil::detail::StrCat(NAME, ": not supported for dtype ", TYPE)); \
    }                                                                                                \
  }()
