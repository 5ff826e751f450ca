#include "core/quant/qtensor.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <vector>

#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::quant {
namespace {

// fbgemm::Quantize<T, /*LEGACY=*/false>: the zero point is added after rounding, so ties
// round to even whatever the zero point; the clamp is done in float before the cast.
template <typename T>
T QuantizeValue(float x, float inv_scale, int64_t zero_point, int64_t qmin, int64_t qmax) {
  float v = static_cast<float>(zero_point) + std::nearbyint(x * inv_scale);
  v = std::min(std::max(v, static_cast<float>(qmin)), static_cast<float>(qmax));
  return static_cast<T>(v);
}

std::vector<float> FloatValues(const Tensor& x, const char* fn) {
  ANVIL_CHECK_TYPE(x.defined() && is_floating_point(x.dtype()), fn, ": expected a floating-point tensor, got ",
                   x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  return x.detach().cpu().to(kFloat32).contiguous().to_vector<float>();
}

void CheckZeroPoint(int64_t zero_point, QDtype dtype, const char* fn) {
  const auto [lo, hi] = qdtype_range(dtype);
  ANVIL_CHECK(zero_point >= lo && zero_point <= hi, fn, ": zero_point ", zero_point, " is out of range for ",
              qdtype_name(dtype), " (expected ", lo, "..", hi, ")");
}

void CheckScale(double scale, const char* fn) {
  ANVIL_CHECK(std::isfinite(scale) && scale > 0, fn, ": scale must be positive and finite, got ", scale);
}

template <typename T>
Tensor QuantizeAll(const std::vector<float>& x, const IntArray& sizes, int64_t inner, int64_t channels,
                   const std::vector<double>& scales, const std::vector<int64_t>& zps, QDtype dtype) {
  const auto [qmin, qmax] = qdtype_range(dtype);
  std::vector<T> out(x.size());
  std::vector<float> inv(scales.size());
  for (size_t c = 0; c < scales.size(); ++c) inv[c] = 1.0f / static_cast<float>(scales[c]);
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t c = channels == 1 ? 0 : static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels);
    out[i] = QuantizeValue<T>(x[i], inv[c], zps[c], qmin, qmax);
  }
  return tensor(out, sizes);
}

Tensor QuantizeStorage(const std::vector<float>& x, const IntArray& sizes, int64_t inner, int64_t channels,
                       const std::vector<double>& scales, const std::vector<int64_t>& zps, QDtype dtype) {
  return dtype == QDtype::QUInt8 ? QuantizeAll<uint8_t>(x, sizes, inner, channels, scales, zps, dtype)
                                 : QuantizeAll<int8_t>(x, sizes, inner, channels, scales, zps, dtype);
}

}  // namespace

double QTensor::q_scale() const {
  ANVIL_CHECK(!is_per_channel(qscheme), "q_scale: expected a per-tensor quantized tensor, got ", qscheme_name(qscheme),
              " (use scales)");
  return scales.to_vector<double>()[0];
}

int64_t QTensor::q_zero_point() const {
  ANVIL_CHECK(!is_per_channel(qscheme), "q_zero_point: expected a per-tensor quantized tensor, got ",
              qscheme_name(qscheme), " (use zero_points)");
  return zero_points.to_vector<int64_t>()[0];
}

QTensor quantize_per_tensor(const Tensor& x, double scale, int64_t zero_point, QDtype dtype) {
  const char* fn = "quantize_per_tensor";
  const std::vector<float> v = FloatValues(x, fn);
  CheckScale(scale, fn);
  CheckZeroPoint(zero_point, dtype, fn);
  QTensor q;
  q.data = QuantizeStorage(v, x.sizes(), 1, 1, {scale}, {zero_point}, dtype);
  q.dtype = dtype;
  q.qscheme = QScheme::PerTensorAffine;
  q.scales = tensor(std::vector<double>{scale});
  q.zero_points = tensor(std::vector<int64_t>{zero_point});
  return q;
}

QTensor quantize_per_channel(const Tensor& x, const Tensor& scales, const Tensor& zero_points, int64_t axis,
                             QDtype dtype) {
  const char* fn = "quantize_per_channel";
  const std::vector<float> v = FloatValues(x, fn);
  ANVIL_CHECK_INDEX(axis >= 0 && axis < x.dim(), fn, ": axis ", axis, " is out of range for a tensor of ", x.dim(),
                    " dimensions");
  const int64_t channels = x.size(axis);
  ANVIL_CHECK(scales.defined() && scales.dim() == 1 && scales.numel() == channels, fn,
              ": expected one scale per index of dimension ", axis, " (", channels, "), got ",
              scales.defined() ? scales.numel() : 0);
  ANVIL_CHECK(zero_points.defined() && zero_points.dim() == 1 && zero_points.numel() == channels, fn,
              ": expected one zero point per index of dimension ", axis, " (", channels, "), got ",
              zero_points.defined() ? zero_points.numel() : 0);
  ANVIL_CHECK_TYPE(!is_floating_point(zero_points.dtype()) && zero_points.dtype() != kBool, fn,
                   ": expected integer zero points, got ", dtype_name(zero_points.dtype()));
  const std::vector<double> s = scales.detach().cpu().to(kFloat64).contiguous().to_vector<double>();
  const std::vector<int64_t> z = zero_points.cpu().to(kInt64).contiguous().to_vector<int64_t>();
  for (int64_t c = 0; c < channels; ++c) {
    CheckScale(s[c], fn);
    CheckZeroPoint(z[c], dtype, fn);
  }
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  QTensor q;
  q.data = QuantizeStorage(v, x.sizes(), inner, channels, s, z, dtype);
  q.dtype = dtype;
  q.qscheme = QScheme::PerChannelAffine;
  q.scales = tensor(s);
  q.zero_points = tensor(z);
  q.axis = axis;
  return q;
}

Tensor dequantize(const QTensor& q) {
  const std::vector<int64_t> ints = q.data.cpu().to(kInt64).contiguous().to_vector<int64_t>();
  const std::vector<double> s = q.scales.cpu().to_vector<double>();
  const std::vector<int64_t> z = q.zero_points.cpu().to_vector<int64_t>();
  std::vector<float> out(ints.size());
  if (!is_per_channel(q.qscheme)) {
    const float scale = static_cast<float>(s[0]);
    for (size_t i = 0; i < ints.size(); ++i) out[i] = static_cast<float>(ints[i] - z[0]) * scale;
  } else {
    const int64_t channels = q.data.size(q.axis);
    int64_t inner = 1;
    for (int64_t d = q.axis + 1; d < q.data.dim(); ++d) inner *= q.data.size(d);
    for (size_t i = 0; i < ints.size(); ++i) {
      const size_t c = static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels);
      out[i] = static_cast<float>(static_cast<double>(ints[i] - z[c]) * s[c]);
    }
  }
  return tensor(out, q.data.sizes());
}

std::string to_string(const QTensor& q) {
  std::ostringstream os;
  std::string values = anvil::to_string(dequantize(q));
  // "tensor([...])": the parameters go inside the parentheses, as PyTorch prints them.
  if (!values.empty() && values.back() == ')') values.pop_back();
  os << values << ", size=(";
  for (int64_t d = 0; d < q.data.dim(); ++d) os << (d ? ", " : "") << q.data.size(d);
  os << (q.data.dim() == 1 ? ",)" : ")") << ", dtype=torch." << qdtype_name(q.dtype)
     << ",\n       quantization_scheme=torch." << qscheme_name(q.qscheme);
  if (is_per_channel(q.qscheme)) {
    os << ", scale=" << anvil::to_string(q.scales) << ",\n       zero_point=" << anvil::to_string(q.zero_points)
       << ", axis=" << q.axis << ")";
  } else {
    os << ", scale=" << q.q_scale() << ", zero_point=" << q.q_zero_point() << ")";
  }
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const QTensor& q) { return os << to_string(q); }

}  // namespace anvil::quant
