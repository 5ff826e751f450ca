#include "core/quant/qtensor_kernels.h"

#include <algorithm>
#include <cmath>

namespace anvil::quant {

void quantize_to_uint8(const float* x, int64_t n, double scale, int64_t zero_point, uint8_t* out) {
  const float inv = 1.0f / static_cast<float>(scale);
  const float zp = static_cast<float>(zero_point);
  for (int64_t i = 0; i < n; ++i) {
    float v = zp + std::nearbyint(x[i] * inv);
    // NaN becomes 0, as the x86 conversion of fbgemm's unclamped NaN does.
    v = v >= 0.0f ? std::min(v, 255.0f) : 0.0f;
    out[i] = static_cast<uint8_t>(v);
  }
}

void quantize_to_uint8_fma(const float* x, int64_t n, double scale, int64_t zero_point, uint8_t* out) {
  const float inv = 1.0f / static_cast<float>(scale);
  const float zp = static_cast<float>(zero_point);
  for (int64_t i = 0; i < n; ++i) {
    float v = std::fma(x[i], inv, zp);
    v = v >= 0.0f ? std::min(v, 255.0f) : 0.0f;
    out[i] = static_cast<uint8_t>(std::nearbyint(v));
  }
}

void dequantize_uint8(const uint8_t* q, int64_t n, double scale, int64_t zero_point, float* out) {
  const float s = static_cast<float>(scale);
  const int32_t zp = static_cast<int32_t>(zero_point);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int32_t>(q[i]) - zp) * s;
}

}  // namespace anvil::quant
