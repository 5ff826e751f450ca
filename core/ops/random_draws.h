// What element i of a fill or random draw holds, as __host__ __device__ functors shared by
// the CPU and CUDA kernels: element i always uses Philox block (offset + i / per_block), so a
// draw depends on (seed, offset, i) only — not on the thread count, the layout of the
// output, or the device.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/tensor/dtype.h"
#include "core/tensor/random.h"
#include "core/util/macros.h"

namespace anvil::fn {

// start + step * i; in linspace mode the second half counts back from `end` so both ends
// are hit exactly.
template <typename T>
struct ArangeDraw {
  double start, step, end;
  bool symmetric;
  int64_t n;
  ANVIL_INLINE T operator()(int64_t i) const {
    const double v =
        (symmetric && i >= n / 2) ? end - step * static_cast<double>(n - 1 - i) : start + step * static_cast<double>(i);
    return static_cast<T>(static_cast<opmath_t<T>>(v));
  }
};

template <typename T>
struct UniformDraw {
  double lo, hi;
  uint64_t key, base;
  ANVIL_INLINE T operator()(int64_t i) const {
    if constexpr (std::is_same_v<T, double>) {
      auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 2);
      const int lane = static_cast<int>(i % 2) * 2;
      return lo + (hi - lo) * uniform_double(r[lane], r[lane + 1]);
    } else {
      auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 4);
      // As many random bits as the type's mantissa holds, so rounding to the type can never
      // produce `hi` itself: 24 for float, 11 for float16, 8 for bfloat16.
      constexpr int bits = std::is_same_v<T, float> ? 24 : (std::is_same_v<T, Half> ? 11 : 8);
      const float u = static_cast<float>(r[i % 4] >> (32 - bits)) * (1.0f / static_cast<float>(1u << bits));
      return T(static_cast<float>(lo + (hi - lo) * u));
    }
  }
};

template <typename T>
struct NormalDraw {
  double mean, std;
  uint64_t key, base;
  ANVIL_INLINE T operator()(int64_t i) const {
    // Box-Muller on one block per pair of elements: even -> cos, odd -> sin.
    auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 2);
    const double u1 = 1.0 - uniform_double(r[0], r[1]);  // (0, 1]: log is finite
    const double u2 = uniform_double(r[2], r[3]);
    const double rad = std::sqrt(-2.0 * std::log(u1));
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double z = (i % 2 == 0) ? rad * std::cos(kTwoPi * u2) : rad * std::sin(kTwoPi * u2);
    return T(static_cast<opmath_t<T>>(mean + std * z));
  }
};

// `p`: per-element probabilities (contiguous, float64, in the output's row-major order), or
// null for the constant `p_const`.
template <typename T>
struct BernoulliDraw {
  uint64_t key, base;
  const double* p;
  double p_const;
  ANVIL_INLINE T operator()(int64_t i) const {
    auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 2);
    const int lane = static_cast<int>(i % 2) * 2;
    const double u = uniform_double(r[lane], r[lane + 1]);
    const double prob = p != nullptr ? p[i] : p_const;
    return static_cast<T>(u < prob ? 1 : 0);
  }
};

}  // namespace anvil::fn
