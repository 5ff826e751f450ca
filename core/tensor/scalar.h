// A number passed to an op (`x + 2`, `clamp(x, 0.0, 1.0)`). Keeps whether it was an
// integer, a float or a bool, because type promotion treats them differently: an int
// scalar never widens a float tensor, a float scalar turns an int tensor into float32.
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/tensor/dtype.h"

namespace anvil {

class Scalar {
 public:
  enum class Kind : int8_t { Bool, Int, Float };
  Scalar() : Scalar(int64_t{0}) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}  // NOLINT
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : kind_(Kind::Float), i_(static_cast<int64_t>(v)), d_(static_cast<double>(v)) {}  // NOLINT
  Scalar(bool v) : kind_(Kind::Bool), i_(v), d_(v) {}                                           // NOLINT
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}                                             // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}                                         // NOLINT

  Kind kind() const { return kind_; }
  bool is_floating_point() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }
  double to_double() const { return d_; }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  // The dtype this scalar has as a "wrapped number": int64, float32 (the default) or bool.
  ScalarType dtype() const { return kind_ == Kind::Float ? default_dtype() : (kind_ == Kind::Int ? kInt64 : kBool); }
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>)
      return d_ != 0;
    else if constexpr (std::is_integral_v<T>)
      return static_cast<T>(to_int());
    else if constexpr (std::is_same_v<T, double>)
      return d_;
    else
      return T(static_cast<float>(d_));
  }

 private:
  Kind kind_;
  int64_t i_;
  double d_;
};

}  // namespace anvil
