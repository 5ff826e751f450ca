// Element-wise math, shared by the CPU and CUDA backends (__host__ __device__), so the
// CPU tests exercise exactly the arithmetic the GPU runs. Functors take and return the
// op-math type (float for 16-bit floats); parameters are members. A row of the op table whose
// Kernel column is Functor runs fn::<Id>F, built by `from(args)` from the row's Args struct
// when it has one.
//
// Numerics: ExpF on float is a range-reduced polynomial (max error ~1 ulp) that compilers
// vectorise, where std::exp would be a scalar libm call per element. Everything built on
// exp (sigmoid, tanh for large |x|, softplus, erf) inherits that speed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/util/macros.h"

namespace anvil::fn {

// c0 + c1 t + ... + cn t^n by Horner's rule, given lowest first: p = cn, then p = p * t + ck for
// k from n - 1 down to 0, one multiply-add at a time, the order every series below is
// evaluated in (a negative coefficient is added: p * t + (-c) is p * t - c to the bit).
template <typename T>
ANVIL_INLINE T Horner(T, T c0) {
  return c0;
}
template <typename T, typename... Rest>
ANVIL_INLINE T Horner(T t, T c0, Rest... rest) {
  return Horner(t, rest...) * t + c0;
}

ANVIL_INLINE float exp_f32(float x) {
  // exp(x) = 2^n * exp(r), r = x - n ln2 in [-ln2/2, ln2/2]; Taylor to r^7 (< 1 ulp). 2^n is
  // applied as two factors 2^(n/2) and 2^(n - n/2), each a normal float for n in [-150, 128]:
  // the results near FLT_MAX (n = 128) stay finite and those below FLT_MIN come out as the
  // subnormals IEEE rounding gives (one rounding, in the last multiply), as PyTorch's do.
  const float hi = 88.72283935546875f;  // the largest float x with exp(x) < FLT_MAX rounded up
  const float lo = -103.97208f;         // below: exp(x) rounds to 0
  const float xc = x > hi ? hi : (x < lo ? lo : x);
  const float n = std::floor(xc * 1.44269504088896341f + 0.5f);
  const float r = (xc - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
  const float p = Horner(r, 1.0f, 1.0f, 0.5f, 1.0f / 6.0f, 1.0f / 24.0f, 1.0f / 120.0f, 1.0f / 720.0f, 1.0f / 5040.0f);
  const int32_t n1 = static_cast<int32_t>(n) / 2, n2 = static_cast<int32_t>(n) - n1;
  const int32_t bits1 = (n1 + 127) << 23, bits2 = (n2 + 127) << 23;
  float scale1, scale2;
  std::memcpy(&scale1, &bits1, 4);
  std::memcpy(&scale2, &bits2, 4);
  float y = (p * scale1) * scale2;
  y = x > hi ? std::numeric_limits<float>::infinity() : y;
  y = x < lo ? 0.0f : y;
  return x != x ? x : y;
}

template <typename T>
ANVIL_INLINE T Exp(T x) {
  if constexpr (std::is_same_v<T, float>)
    return exp_f32(x);
  else
    return std::exp(x);
}

template <typename T>
ANVIL_INLINE T Erf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    // |x| < 0.5: Maclaurin series to x^13 (truncation < 1e-9 relative), which keeps the
    // relative accuracy near 0 that a rational fit loses. Elsewhere Abramowitz & Stegun
    // 7.1.26 (|error| < 1.5e-7 against values >= 0.52). Both are computed and selected so
    // the loop stays branch-free.
    const float ax = std::fabs(x);
    const float x2 = x * x;
    const float s =
        Horner(x2, -1.0f / 3.0f, 1.0f / 10.0f, -1.0f / 42.0f, 1.0f / 216.0f, -1.0f / 1320.0f, 1.0f / 9360.0f);
    const float small = std::copysign(1.1283791670955126f * (x + x * x2 * s), x);  // erf(-0) is -0
    const float t = 1.0f / (1.0f + 0.3275911f * ax);
    float y = Horner(t, 0.254829592f, -0.284496736f, 1.421413741f, -1.453152027f, 1.061405429f);
    y = 1.0f - y * t * exp_f32(-ax * ax);
    const float big = x < 0 ? -y : y;
    return ax < 0.5f ? small : big;
  } else {
    return std::erf(x);
  }
}

// log(exp(a) + exp(b)) without overflow: max + log1p(exp(min - max)). Equal infinities give
// themselves (inf - inf would be NaN); a NaN operand gives NaN. logcumsumexp's step on both
// backends.
template <typename T>
ANVIL_INLINE T LogAddExp(T a, T b) {
  if (a != a || b != b) return a != a ? a : b;
  const T hi = a < b ? b : a, lo = a < b ? a : b;
  if (hi == lo && !(hi - hi == T(0))) return hi;  // both +inf or both -inf
  return hi + T(std::log1p(std::exp(lo - hi)));
}

template <typename T>
ANVIL_INLINE T Sigmoid(T x) {
  return T(1) / (T(1) + Exp(-x));
}

template <typename T>
ANVIL_INLINE T Tanh(T x) {
  if constexpr (std::is_same_v<T, float>) {
    // Small |x|: Taylor series to x^13 (truncation < 1e-9 relative for |x| < 0.4), where
    // (1 - e)/(1 + e) would cancel; elsewhere via exp. Both are computed and selected so the
    // loop stays branch-free and vectorises.
    const float ax = std::fabs(x);
    const float x2 = x * x;
    const float p = Horner(x2, -1.0f / 3.0f, 2.0f / 15.0f, -17.0f / 315.0f, 62.0f / 2835.0f, -1382.0f / 155925.0f,
                           21844.0f / 6081075.0f);
    // copysign: tanh(-0) is -0 (x + x * x2 * p would give +0 there).
    const float small = std::copysign(x + x * x2 * p, x);
    const float e = exp_f32(-2.0f * ax);
    const float big = (1.0f - e) / (1.0f + e);
    return ax < 0.4f ? small : (x < 0 ? -big : big);
  } else {
    return std::tanh(x);
  }
}

// ---- unary ----
struct NegF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return -x;
  }
};
struct AbsF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T> || std::is_same_v<T, bool>)
      return x;
    else if constexpr (std::is_floating_point_v<T>)
      return std::fabs(x);  // clears the sign bit: abs(-0.0) is +0.0, as in PyTorch
    else
      return x < T(0) ? T(-x) : x;
  }
};
struct SignF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>)
      return x;
    else
      return T((T(0) < x) - (x < T(0)));
  }
};
struct ExpF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return Exp(x);
  }
};
struct Expm1F {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::expm1(x);
  }
};
struct LogF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::log(x);
  }
};
struct Log1pF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::log1p(x);
  }
};
struct SqrtF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::sqrt(x);
  }
};
struct RsqrtF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return T(1) / std::sqrt(x);
  }
};
struct ReciprocalF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return T(1) / x;
  }
};
struct SinF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::sin(x);
  }
};
struct CosF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::cos(x);
  }
};
struct TanF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::tan(x);
  }
};
struct AtanF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return std::atan(x);
  }
};
struct TanhF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return Tanh(x);
  }
};
struct SigmoidF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return Sigmoid(x);
  }
};
struct ReluF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return x < T(0) ? T(0) : x;  // NaN and -0 pass through, as clamp_min(x, 0) leaves them in PyTorch
  }
};
// relu's gradient from its result: a NaN result passes no gradient, like where(y > 0, g, 0).
struct ReluBackwardF {
  // As PyTorch's threshold_backward: zero where y <= 0, so a NaN passes the gradient.
  template <typename T>
  ANVIL_INLINE T operator()(T g, T y) const {
    return y <= T(0) ? T(0) : g;
  }
};
struct LeakyReluF {
  double slope;
  template <typename Args>
  static LeakyReluF from(const Args& a) {
    LeakyReluF f;
    f.slope = a.negative_slope;
    return f;
  }
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return x > T(0) ? x : T(x * T(slope));
  }
};
struct EluF {
  double alpha;
  template <typename Args>
  static EluF from(const Args& a) {
    EluF f;
    f.alpha = a.alpha;
    return f;
  }
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return x > T(0) ? x : T(T(alpha) * (Exp(x) - T(1)));
  }
};
// The approximation is a template parameter, not a member: a run-time branch inside the
// loop body stops the compiler from vectorising it.
template <bool kTanh>
struct GeluF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (kTanh) {
      const T inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);
      return T(0.5) * x * (T(1) + Tanh(inner));
    } else {
      return T(0.5) * x * (T(1) + Erf(x * T(0.7071067811865476)));
    }
  }
};
struct SiluF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return x * Sigmoid(x);
  }
};
// x * relu6(x + 3) / 6 (MobileNetV3). Written with selects, so a NaN stays NaN.
struct HardswishF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    const T r = x + T(3);
    const T relu6 = r < T(0) ? T(0) : (r > T(6) ? T(6) : r);
    return x * relu6 / T(6);
  }
};
struct SoftplusF {
  double beta, threshold;
  template <typename Args>
  static SoftplusF from(const Args& a) {
    return {a.beta, a.threshold};
  }
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    const T bx = x * T(beta);
    return bx > T(threshold) ? x : T(std::log1p(Exp(bx)) / T(beta));
  }
};
struct ErfF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return Erf(x);
  }
};
struct PowScalarF {
  double e;
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) {
      T r = 1;
      for (int64_t i = 0; i < static_cast<int64_t>(e); ++i) r = static_cast<T>(r * x);
      return r;
    } else {
      // The exponents PyTorch's pow kernel maps to other operations, with their results at
      // -0 and -inf (sqrt(-0) = -0, sqrt(-inf) = NaN, 1/-0 = -inf) where std::pow differs.
      if (e == 2.0) return x * x;
      if (e == 3.0) return x * x * x;
      if (e == 0.5) return std::sqrt(x);
      if (e == -0.5) return T(1) / std::sqrt(x);
      if (e == -1.0) return T(1) / x;
      if (e == -2.0) return T(1) / (x * x);
      return std::pow(x, T(e));
    }
  }
};
struct SquareF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    return T(x * x);
  }
};
struct ClampF {
  double lo, hi;
  bool has_lo, has_hi;
  template <typename Args>
  static ClampF from(const Args& a) {
    return {a.min.value_or(0), a.max.value_or(0), a.min.has_value(), a.max.has_value()};
  }
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if (x != x) return x;
    if constexpr (std::is_floating_point_v<T>) {
      // A NaN bound makes every element NaN (PyTorch's min(max(x, lo), hi) propagates it).
      if ((has_lo && lo != lo) || (has_hi && hi != hi)) return std::numeric_limits<T>::quiet_NaN();
    }
    if (has_lo && x < T(lo)) x = T(lo);
    if (has_hi && x > T(hi)) x = T(hi);
    return x;
  }
};
struct FloorF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x;
    else
      return std::floor(x);
  }
};
struct CeilF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x;
    else
      return std::ceil(x);
  }
};
struct RoundF {  // half to even, like PyTorch
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x;
    else
      return std::nearbyint(x);
  }
};
struct TruncF {
  template <typename T>
  ANVIL_INLINE T operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return x;
    else
      return std::trunc(x);
  }
};
struct LogicalNotF {
  template <typename T>
  ANVIL_INLINE bool operator()(T x) const {
    return !static_cast<bool>(x);
  }
};
struct IsNanF {
  template <typename T>
  ANVIL_INLINE bool operator()(T x) const {
    return x != x;
  }
};
struct IsFiniteF {
  template <typename T>
  ANVIL_INLINE bool operator()(T x) const {
    if constexpr (std::is_integral_v<T>)
      return true;
    else
      return std::isfinite(x);
  }
};

// ---- binary ----
struct AddF {
  double alpha;
  template <typename Args>
  static AddF from(const Args& a) {
    AddF f;
    f.alpha = a.alpha;
    return f;
  }
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    // No alpha == 1 special case: a branch would stop vectorisation, and a + 1 * b == a + b.
    if constexpr (std::is_same_v<T, bool>)
      return a || (alpha != 0 && b);
    else
      return T(a + T(alpha) * b);
  }
};
struct SubF {
  double alpha;
  template <typename Args>
  static SubF from(const Args& a) {
    SubF f;
    f.alpha = a.alpha;
    return f;
  }
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    return T(a - T(alpha) * b);
  }
};
struct MulF {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>)
      return a && b;
    else
      return T(a * b);
  }
};
struct DivF {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    return a / b;
  }
};
struct PowF {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) {
      return a || !b;
    } else if constexpr (std::is_integral_v<T>) {
      if (b < 0) {  // like ATen's powi: only +-1 survive a negative integer exponent
        if (a == 1) return T(1);
        if constexpr (std::is_signed_v<T>) {
          if (a == -1) return T((b % 2 == 0) ? 1 : -1);
        }
        return T(0);
      }
      T r = 1, base = a;
      for (T e = b; e > 0; e = static_cast<T>(e >> 1)) {  // square-and-multiply
        if (e & 1) r = static_cast<T>(r * base);
        base = static_cast<T>(base * base);
      }
      return r;
    } else {
      return std::pow(a, b);
    }
  }
};
struct MaximumF {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return a + b;
    }
    return a > b ? a : b;
  }
};
struct MinimumF {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a || b != b) return a + b;
    }
    return a < b ? a : b;
  }
};
struct RemainderF {  // Python's %, the result takes the divisor's sign
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);  // a % -1 traps for the smallest a
      }
      T r = static_cast<T>(a % b);
      if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
      return r;
    } else {
      T r = std::fmod(a, b);
      if (r != T(0) && ((r < T(0)) != (b < T(0)))) r += b;
      return r;
    }
  }
};
// -a in two's complement, defined for the smallest value too (it stays itself).
template <typename T>
ANVIL_INLINE T NegateWrapping(T a) {
  using U = std::make_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(U(0) - static_cast<U>(a)));
}
struct FmodF {  // C's fmod: the result takes the dividend's sign (truncated division)
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return T(0);  // a % -1 traps for the smallest a
      }
      return static_cast<T>(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
};
struct FloorDivideF {  // a / b rounded down (Python's //)
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return NegateWrapping(a);  // the smallest a / -1 traps; PyTorch wraps
      }
      T q = static_cast<T>(a / b);
      if ((a % b != 0) && ((a < 0) != (b < 0))) q = static_cast<T>(q - 1);
      return q;
    } else {
      // As PyTorch: floor of the true quotient, computed from fmod so that 7.5 // 2.5 is 3.
      if (b == T(0)) return a / b;
      const T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
      if (div == T(0)) return std::copysign(T(0), a / b);
      const T floored = std::floor(div);
      return div - floored > T(0.5) ? floored + T(1) : floored;
    }
  }
};
struct TruncDivideF {  // a / b rounded toward zero
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      if constexpr (std::is_signed_v<T>) {
        if (b == T(-1)) return NegateWrapping(a);
      }
      return static_cast<T>(a / b);
    } else {
      return std::trunc(a / b);
    }
  }
};
struct FmaxF {  // maximum that ignores a NaN (NaN only when both are)
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return b;
      if (b != b) return a;
    }
    return a > b ? a : b;
  }
};
struct FminF {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return b;
      if (b != b) return a;
    }
    return a < b ? a : b;
  }
};
struct Atan2F {
  template <typename T>
  ANVIL_INLINE T operator()(T a, T b) const {
    return std::atan2(a, b);
  }
};
struct EqF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return a == b;
  }
};
struct NeF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return a != b;
  }
};
struct LtF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return a < b;
  }
};
struct LeF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return a <= b;
  }
};
struct GtF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return a > b;
  }
};
struct GeF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return a >= b;
  }
};
struct LogicalAndF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return bool(a) && bool(b);
  }
};
struct LogicalOrF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return bool(a) || bool(b);
  }
};
struct LogicalXorF {
  template <typename T>
  ANVIL_INLINE bool operator()(T a, T b) const {
    return bool(a) != bool(b);
  }
};

}  // namespace anvil::fn
