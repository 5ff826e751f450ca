// A quantized tensor: int8/uint8 storage with a per-tensor or per-channel (axis) scale and
// zero point, as torch.quantize_per_tensor / torch.quantize_per_channel make them. Values
// are quantized as PyTorch's CPU kernels (fbgemm) do, bit for bit:
//   q = clamp(zero_point + nearbyint(x * (1.0f / float(scale))), qmin, qmax)
// (round half to even, the reciprocal in float32), and dequantized as
//   per tensor:  float(q - zero_point) * float(scale)          (float32 arithmetic)
//   per channel: float((q - zero_point) * scale)               (float64, then rounded)
// which are the two formulas PyTorch's dequantize kernels use.
//
// Thread-safety: as Tensor's: a QTensor may be read from any number of threads; one that is
// written is not shared.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "core/quant/qscheme.h"
#include "core/tensor/tensor.h"

namespace anvil::quant {

struct QTensor {
  Tensor data;  // the integers (int_repr): kUInt8 for quint8, kInt8 for qint8
  QDtype dtype = QDtype::QUInt8;
  QScheme qscheme = QScheme::PerTensorAffine;
  Tensor scales;       // float64 [1] per tensor, [size(axis)] per channel
  Tensor zero_points;  // int64, shaped as scales
  int64_t axis = -1;   // the channel axis; -1 per tensor

  const IntArray& sizes() const { return data.sizes(); }
  // A copy of the integers (Tensor.int_repr()).
  Tensor int_repr() const { return data.clone(); }
  // Per-tensor only (Tensor.q_scale() / q_zero_point()); they refuse a per-channel tensor.
  double q_scale() const;
  int64_t q_zero_point() const;
};

// torch.quantize_per_tensor(x, scale, zero_point, dtype). `x` floating point (read as
// float32); `zero_point` inside the dtype's range; `scale` positive and finite.
QTensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, QDtype dtype);
// torch.quantize_per_channel(x, scales, zero_points, axis, dtype): one scale (float64) and
// zero point (int64) per index of x's dimension `axis`.
QTensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                             QDtype dtype);
// Tensor.dequantize(): float32, on the CPU.
Tensor dequantize(const QTensor& q);

// As PyTorch prints a quantized tensor: the dequantized values, then size, dtype, scheme and
// the quantization parameters.
std::string to_string(const QTensor& q);
std::ostream& operator<<(std::ostream& os, const QTensor& q);

}  // namespace anvil::quant
