// 16-bit floating types stored as bits and computed in float: IEEE binary16 (Half) and
// bfloat16 (BFloat16). Conversions round to nearest even, like the hardware's. Usable on
// host and device so element-wise functors are shared between backends.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/util/macros.h"

namespace anvil {

namespace detail {
ANVIL_INLINE uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
ANVIL_INLINE float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  ANVIL_HOST_DEVICE BFloat16(float f) {  // NOLINT: implicit like a built-in float type
    uint32_t u = detail::FloatBits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep it quiet, never round to inf
      bits = static_cast<uint16_t>((u >> 16) | 0x40);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = static_cast<uint16_t>(u >> 16);
  }
  ANVIL_HOST_DEVICE operator float() const { return detail::BitsFloat(uint32_t{bits} << 16); }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  ANVIL_HOST_DEVICE Half(float f) { bits = FromFloat(f); }  // NOLINT
  ANVIL_HOST_DEVICE operator float() const { return ToFloat(bits); }

  ANVIL_HOST_DEVICE static float ToFloat(uint16_t h) {
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t out;
    if (exp == 0) {
      if (man == 0) {
        out = sign;
      } else {  // subnormal: normalise
        int e = -1;
        do {
          ++e;
          man <<= 1;
        } while ((man & 0x400u) == 0);
        out = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
      }
    } else if (exp == 0x1f) {
      out = sign | 0x7f800000u | (man << 13);
    } else {
      out = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return detail::BitsFloat(out);
  }
  ANVIL_HOST_DEVICE static uint16_t FromFloat(float f) {
    uint32_t u = detail::FloatBits(f);
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
    if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (a < 0x38800000u) {                                               // result is subnormal or zero
      if (a < 0x33000000u) return static_cast<uint16_t>(sign);           // below half the smallest
      uint32_t e = a >> 23;
      uint32_t m = (a & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - e;  // half subnormal = m * 2^(e-126), shift in [14, 24]
      uint32_t half_m = m >> shift;
      uint32_t rem = m & ((1u << shift) - 1);  // round to nearest even on the bits shifted out
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half_m & 1u))) ++half_m;
      return static_cast<uint16_t>(sign | half_m);
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);  // rebias and round
    return static_cast<uint16_t>(sign | (r >> 13));
  }
};

}  // namespace anvil
