// The dynamic path's choice of activation parameters: ATen's
// quant_utils::ChooseQuantizationParams (aten/src/ATen/native/quantized/cpu/QuantUtils.h),
// which torch.ops.quantized.linear_dynamic and torch._choose_qparams_per_tensor run on each
// batch's min and max. Unlike the observers it works in double precision:
//   [min, max] widened to hold 0; scale = (double(max) - min) / (qmax - qmin), 0.1 where it
//   is 0 in float32 or its float32 reciprocal overflows, raised to 6.1e-5f (the range scaled
//   to match); zero point from whichever end gives the smaller error term, rounded half to
//   even, clamped to [qmin, qmax]. reduce_range halves qmin and qmax (C++ division).
// preserve_sparsity (symmetric) centres the zero point when the range spans 0.
#pragma once

#include <cstdint>
#include <vector>

namespace anvil::quant {

struct ChosenQParams {
  double scale;
  int32_t zero_point;
};

ChosenQParams choose_quantization_params(float min, float max, int32_t qmin, int32_t qmax,
                                         bool preserve_sparsity = false, bool reduce_range = false);

// torch._choose_qparams_per_tensor(x, reduce_range): the range [0, 255] over x's min and max.
ChosenQParams choose_qparams_per_tensor(const std::vector<float>& x, bool reduce_range);

}  // namespace anvil::quant
