// Saturating int64 arithmetic for estimates built from untrusted sizes (a model spec's layer
// widths): a product that would overflow stays huge instead of wrapping to a small number
// that passes a budget check. kSaturated leaves headroom for a few more additions.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>

namespace anvil {

inline constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max() / 4;

// For non-negative operands.
inline int64_t sat_add(int64_t a, int64_t b) { return a > kSaturated - b ? kSaturated : a + b; }
inline int64_t sat_mul(int64_t a, int64_t b) { return a != 0 && b > kSaturated / a ? kSaturated : a * b; }
inline int64_t sat_prod(std::initializer_list<int64_t> xs) {
  int64_t r = 1;
  for (int64_t x : xs) r = sat_mul(r, x);
  return r;
}

}  // namespace anvil
