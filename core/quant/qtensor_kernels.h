// Quantizing and dequantizing contiguous float32 runs with QTensor's formulas (qtensor.h),
// without building tensors: the per-batch work of the quantized layers.
// Thread-safe (pure functions).
#pragma once

#include <cstdint>

namespace anvil::quant {

// out[i] = clamp(zero_point + nearbyint(x[i] * (1.0f / float(scale))), 0, 255)
void quantize_to_uint8(const float* x, int64_t n, double scale, int64_t zero_point, uint8_t* out);
// fbgemm's Quantize<uint8_t> with its default LEGACY formula, which the dynamic Linear's
// activation packing uses: clamp(nearbyint(fma(x[i], 1.0f / float(scale), zero_point)), 0, 255).
void quantize_to_uint8_fma(const float* x, int64_t n, double scale, int64_t zero_point, uint8_t* out);
// ONNX's DynamicQuantizeLinear over a batch whose min and max are lo and hi, in float32: the
// range widened to hold 0, scale = (hi - lo) / 255 (1 when that is 0: an all-zero batch),
// zero_point = clamp(round(-lo / scale), 0, 255), rounding half to even.
struct OnnxDynamicQParams {
  float scale;
  float zero_point;
};
OnnxDynamicQParams onnx_dynamic_qparams(float lo, float hi);
// ONNX's QuantizeLinear rounding, which divides: clamp(nearbyint(x[i] / scale) + zero_point, 0,
// 255), NaN to 0.
void quantize_to_uint8_divide(const float* x, int64_t n, float scale, float zero_point, uint8_t* out);
// out[i] = float(q[i] - zero_point) * float(scale)
void dequantize_uint8(const uint8_t* q, int64_t n, double scale, int64_t zero_point, float* out);

}  // namespace anvil::quant
