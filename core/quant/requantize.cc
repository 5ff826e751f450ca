#include "core/quant/requantize.h"

#include <algorithm>
#include <cmath>

namespace anvil::quant {

void requantize_to_float(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point, float a_scale,
                         const GemmEpilogue& e, float* out, int64_t ld_out) {
  for (int64_t i = 0; i < m; ++i) {
    const int32_t* a = acc + i * ld_acc;
    float* o = out + i * ld_out;
    for (int64_t j = 0; j < n; ++j) {
      const int32_t raw = a[j] - a_zero_point * e.w_row_sums[j];
      // fbgemm's vector path (requantizeForFloatAvx2): one multiplier a_scale * w_scale, then
      // a fused multiply-add with the bias.
      const float multiplier = a_scale * e.w_scales[e.per_channel ? j : 0];
      float v = e.bias != nullptr ? std::fma(static_cast<float>(raw), multiplier, e.bias[j])
                                  : static_cast<float>(raw) * multiplier;
      if (e.relu) v = std::max(v, 0.0f);
      o[j] = v;
    }
  }
}

RequantConstants requant_constants(float a_scale, const float* w_scales, bool per_channel, int64_t n, float out_scale) {
  RequantConstants k;
  const int64_t count = per_channel ? n : 1;
  k.act_times_w_scale.resize(static_cast<size_t>(count));
  k.multiplier.resize(static_cast<size_t>(count));
  for (int64_t j = 0; j < count; ++j) {
    k.act_times_w_scale[static_cast<size_t>(j)] = a_scale * w_scales[j];
    k.multiplier[static_cast<size_t>(j)] = k.act_times_w_scale[static_cast<size_t>(j)] / out_scale;
  }
  return k;
}

void requantize_to_uint8(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point,
                         const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point, uint8_t* out,
                         int64_t ld_out) {
  const long lo = e.relu ? out_zero_point : 0;
  // Per tensor, fbgemm divides the bias by multiplying with the reciprocal; per channel it divides.
  const float reciprocal = 1.0f / k.act_times_w_scale[0];
  for (int64_t i = 0; i < m; ++i) {
    const int32_t* a = acc + i * ld_acc;
    uint8_t* o = out + i * ld_out;
    for (int64_t j = 0; j < n; ++j) {
      const size_t c = e.per_channel ? static_cast<size_t>(j) : 0;
      const int32_t raw = a[j] - a_zero_point * e.w_row_sums[j];
      float v = static_cast<float>(raw);
      if (e.bias != nullptr) v = v + (e.per_channel ? e.bias[j] / k.act_times_w_scale[c] : e.bias[j] * reciprocal);
      const long rounded = std::lrintf(v * k.multiplier[c]) + out_zero_point;
      o[j] = static_cast<uint8_t>(std::clamp(rounded, lo, 255L));
    }
  }
}

}  // namespace anvil::quant
