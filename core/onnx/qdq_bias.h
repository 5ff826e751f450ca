// A float bias in the QDQ form: int32 steps of s_x * s_w (the float32 product, as fbgemm forms
// act_times_w_scale), round half to even, saturated to int32 -- what onnxruntime's QDQ
// selectors require of a Conv's or Gemm's bias. Shared by the exporter (lower.cc) and the
// quantizer of imported graphs (quantize_graph.cc).
//
// Thread-safety: a pure function.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops/functions.h"
#include "core/tensor/tensor.h"

namespace anvil::onnx {

struct Int32Bias {
  Tensor ints;   // int32 [n]
  Tensor steps;  // float32 [n] per channel, [1] per tensor: s_x * s_w
};

inline Int32Bias int32_bias(const Tensor& bias, double x_scale, const Tensor& w_scales, bool per_channel) {
  const std::vector<float> b = bias.to(kFloat32).contiguous().reshape({-1}).to_vector<float>();
  const std::vector<float> ws = w_scales.to_vector<float>();
  const auto n = static_cast<int64_t>(b.size());
  Int32Bias out{empty({n}, TensorOptions(kInt32)), empty({per_channel ? n : 1}, TensorOptions(kFloat32))};
  for (int64_t j = 0; j < out.steps.numel(); ++j)
    out.steps.data_ptr<float>()[j] = static_cast<float>(x_scale) * ws[static_cast<size_t>(j)];
  for (int64_t j = 0; j < n; ++j) {
    const double step = out.steps.data_ptr<float>()[per_channel ? j : 0];
    const double q = std::nearbyint(static_cast<double>(b[static_cast<size_t>(j)]) / step);
    out.ints.data_ptr<int32_t>()[j] = static_cast<int32_t>(std::clamp(q, -2147483648.0, 2147483647.0));
  }
  return out;
}

}  // namespace anvil::onnx
