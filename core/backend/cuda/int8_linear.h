// The static int8 Linear (core/quant/quantized_layers.h, QuantizedLinear) on a CUDA device:
// the input quantized to uint8 by a kernel, the product in int8 through cuBLASLt (blas_lt.h),
// and the uint8 epilogue and dequantization by a second kernel, both kernels running the CPU's
// element formulas (core/quant/int8_elements.h). The int32 product is exact on both devices, so
// the layer's output on the GPU is the CPU's, bit for bit.
//
// cuBLASLt multiplies signed bytes only: each uint8 activation q enters as q - 128, and the
// input's zero point z as z - 128, which leaves q - z, and so every compensated sum, unchanged.
// Its layout wants k and n in multiples of 4: the weight is stored padded with zero rows and
// columns to multiples of 16 (16-byte rows, what its fastest kernels read), and the quantized
// input with zero columns; zeros add nothing to a sum.
//
// Thread-safety: immutable after construction (which waits for its uploads, so any stream may
// read them); forward may run on several threads at once, each call with its own scratch on its
// thread's current stream.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::cuda {

class StaticInt8Linear {
 public:
  // What the layer has computed on the host, as its CPU epilogue uses it.
  struct Spec {
    const int8_t* weight = nullptr;  // [n, k], row-major, on the host
    int64_t n = 0, k = 0;
    const int32_t* row_sums = nullptr;  // [n]: each output's sum of weights
    std::vector<float> bias_term;       // [n] the bias in the accumulator's units, or empty
    std::vector<float> multiplier;      // [n]
    float input_inv_scale = 1;          // 1.0f / float(input scale), as the CPU quantizes
    int32_t input_zero_point = 0, output_zero_point = 0;
    float output_scale = 1;
    bool relu = false;
  };
  // Uploads the padded weight and the column constants to `device` (a CUDA device index).
  StaticInt8Linear(int device, const Spec& spec);
  // Waits for the device's queued work first: other streams may still be reading the weights.
  ~StaticInt8Linear();
  StaticInt8Linear(const StaticInt8Linear&) = delete;
  StaticInt8Linear& operator=(const StaticInt8Linear&) = delete;

  // x: float32 [m, k], contiguous, on this layer's device -> float32 [m, n] there. An
  // undefined tensor, with nothing computed, when cuBLASLt has no int8 algorithm for the
  // shape (the caller then computes another way).
  Tensor forward(const Tensor& x) const;

 private:
  int device_;
  int64_t n_, k_, n_padded_, k_padded_;
  Tensor weight_;                             // int8 [n_padded, k_padded]
  Tensor row_sums_, bias_term_, multiplier_;  // [n_padded]; bias_term_ undefined without a bias
  float input_inv_scale_, input_zero_point_;
  int32_t output_zero_point_;
  float output_scale_;
  bool relu_;
};

}  // namespace anvil::cuda
