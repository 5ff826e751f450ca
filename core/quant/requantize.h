// The epilogues of the int8 matrix product (core/backend/cpu/int8_gemm.h): from the exact
// int32 sums of u8 activations x s8 weights to the layer's output, with PyTorch's (fbgemm's)
// float32 formulas, one rounding per operation, so Anvil's quantized layers give PyTorch's
// bits. Weights are symmetric (zero point 0, fbgemm's default), so only the activation's zero
// point needs compensating: raw = acc - a_zero_point * w_row_sum[j].
//
//   to float (dynamic Linear, fbgemm ReQuantizeForFloat's vector path):
//     out = fma(float(raw), a_scale * w_scale[j], bias[j])  (max 0 when relu)
//   to uint8 (static Linear/Conv2d, fbgemm ReQuantizeOutput with a float bias):
//     act_times_w_scale[j] = a_scale * w_scale[j],  multiplier[j] = act_times_w_scale[j] / out_scale
//     v = float(raw) (+ bias[j] / act_times_w_scale[j], or bias * (1 / act_times_w_scale) per tensor)
//     q = lrintf(v * multiplier[j]) + out_zp
//     clamped to [relu ? out_zp : 0, 255]
//
// Thread-safe (pure functions).
#pragma once

#include <cstdint>
#include <vector>

namespace anvil::quant {

// What the epilogues need of a layer's weights and bias. Scales are float32 (PyTorch packs
// them so); one per output column, or one for all when per_channel is false.
struct GemmEpilogue {
  const int32_t* w_row_sums = nullptr;  // [n]
  const float* w_scales = nullptr;      // [n] or [1]
  bool per_channel = true;
  const float* bias = nullptr;  // [n] or null
  bool relu = false;
};

// acc [m, n] (row stride ld_acc) -> out float [m, n] (row stride ld_out).
void requantize_to_float(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point, float a_scale,
                         const GemmEpilogue& e, float* out, int64_t ld_out);

// The per-column constants of the uint8 epilogue, computed once per layer.
struct RequantConstants {
  std::vector<float> act_times_w_scale;  // a_scale * w_scale[j]
  std::vector<float> multiplier;         // act_times_w_scale[j] / out_scale
};
RequantConstants requant_constants(float a_scale, const float* w_scales, bool per_channel, int64_t n, float out_scale);

// Each column's constants as the uint8 epilogue applies them (int8_elements.h): the bias in
// the accumulator's units (empty without a bias) and the multiplier, n of each, for a device
// that runs the epilogue itself.
struct RequantColumns {
  std::vector<float> bias_term, multiplier;
};
RequantColumns requant_columns(const GemmEpilogue& e, const RequantConstants& k, int64_t n);

// acc [m, n] -> out uint8 [m, n].
void requantize_to_uint8(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point,
                         const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point, uint8_t* out,
                         int64_t ld_out);

// requantize_to_uint8's bytes dequantized with the output's parameters, as dequantize_uint8
// computes them (float(q - out_zero_point) * out_scale), into float [m, n] (row stride
// ld_out), without storing the bytes: a static layer's float output. Equal to the two calls.
void requantize_to_dequantized_float(const int32_t* acc, int64_t ld_acc, int64_t m, int64_t n, int32_t a_zero_point,
                                     const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point,
                                     float out_scale, float* out, int64_t ld_out);

// The same epilogue over a convolution's own layout: acc holds, for each of `images` images and
// `channels` output channels, a plane of `plane` sums already compensated for the input's zero
// point, as float32 values that are integers below 2^24 in magnitude (so exactly the int32
// sums) -> out uint8 in the same [images, channels, plane] order. Gives requantize_to_uint8's
// bits for the same sums.
void requantize_planes_to_uint8(const float* acc, int64_t images, int64_t channels, int64_t plane,
                                const GemmEpilogue& e, const RequantConstants& k, int32_t out_zero_point, uint8_t* out);

}  // namespace anvil::quant
