// One element of the int8 layers' float32 formulas (PyTorch's, after fbgemm), shared by the
// CPU's scalar paths (qtensor_kernels.cc, requantize.cc) and the CUDA kernels of the int8
// Linear (core/backend/cuda/int8_linear.cu) as __host__ __device__ functions, so the GPU
// computes the CPU's bits. Each operation rounds once: the files that use them compile with
// contraction off (-ffp-contract=off; nvcc --fmad=false), or a * b + c would become a fused
// multiply-add on one side only.
//
// Thread-safe (pure functions).
#pragma once

#include <math.h>

#include <cstdint>

#include "core/util/macros.h"

namespace anvil::quant::element {

// fbgemm's Quantize<uint8_t> (a static layer's input): zero_point + nearbyint(x * inv_scale),
// clamped to [0, 255], NaN to 0 (as the x86 conversion of fbgemm's unclamped NaN gives).
// rintf rounds half to even, as nearbyint does in the default rounding mode.
ANVIL_HOST_DEVICE inline uint8_t QuantizeToUint8(float x, float inv_scale, float zero_point) {
  const float v = zero_point + rintf(x * inv_scale);
  return static_cast<uint8_t>(v >= 0.0f ? fminf(v, 255.0f) : 0.0f);
}

// acc - a_zero_point * row_sum in int32 arithmetic that wraps, as fbgemm's vector code does:
// sums of real layers never come near the limits, and a hostile one gets the same bits on every
// path instead of undefined behaviour.
ANVIL_HOST_DEVICE inline int32_t Compensated(int32_t acc, int32_t a_zero_point, int32_t row_sum) {
  return static_cast<int32_t>(static_cast<uint32_t>(acc) -
                              static_cast<uint32_t>(a_zero_point) * static_cast<uint32_t>(row_sum));
}

// The static layers' uint8 epilogue for one value v = float(compensated sum): the bias term
// added (when there is a bias), scaled by the column's multiplier, rounded half to even,
// shifted by the output zero point and clamped to [lo, 255] (lo is the zero point under a
// fused ReLU, else 0). This is lrintf's result without a 64-bit conversion: products are
// clamped to +-2^30 first (every value beyond clamps to the same end once the zero point is
// added), and those lrintf cannot convert (NaN, |p| >= 2^63: it returns LONG_MIN) go to lo,
// where LONG_MIN clamps.
ANVIL_HOST_DEVICE inline int32_t RequantizeToUint8(float v, const float* bias_term, float multiplier,
                                                   int32_t out_zero_point, int32_t lo) {
  if (bias_term != nullptr) v = v + *bias_term;
  const float p = v * multiplier;
  if (!(fabsf(p) < 0x1p63f)) return lo;
  const int32_t q = static_cast<int32_t>(rintf(fminf(fmaxf(p, -0x1p30f), 0x1p30f))) + out_zero_point;
  return q < lo ? lo : (q > 255 ? 255 : q);
}

// dequantize_uint8's value: float(q - zero_point) * scale.
ANVIL_HOST_DEVICE inline float DequantizeUint8(int32_t q, int32_t zero_point, float scale) {
  return static_cast<float>(q - zero_point) * scale;
}

}  // namespace anvil::quant::element
