// Observers of torch.ao.quantization.observer: they record statistics of the tensors that
// pass through them and compute a scale and zero point from them, with PyTorch's formulas
// and float32 arithmetic, so calculate_qparams() equals PyTorch's bit for bit:
//   range      quant_min/quant_max given (reduce_range halves them, floor division), else
//              the dtype's range, [0, 127] / [-64, 63] with reduce_range;
//   affine     min_neg = min(min, 0), max_pos = max(max, 0) (0 is always representable),
//              scale = max((max_pos - min_neg) / (quant_max - quant_min), eps),
//              zero_point = clamp(quant_min - round_half_even(min_neg / scale)) as int32;
//   symmetric  scale = max(max(-min_neg, max_pos) / ((quant_max - quant_min) / 2), eps),
//              zero_point 0 for qint8, 128 for quint8 (the midpoint, rounded down, of a
//              range given by quant_min/quant_max), as int64;
//   unobserved scale [1.0], zero_point [0] (int64).
// eps defaults to float32's machine epsilon.
#pragma once

#include <cfloat>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/quant/qscheme.h"
#include "core/tensor/tensor.h"

namespace anvil::quant {

struct ObserverOptions {
  QDtype dtype = QDtype::QUInt8;
  QScheme qscheme = QScheme::PerTensorAffine;
  bool reduce_range = false;
  std::optional<int64_t> quant_min, quant_max;  // both or neither
  double eps = FLT_EPSILON;
};

// Scale (float32) and zero point (int32 affine, int64 symmetric), one per channel ([1] per tensor).
struct QParams {
  Tensor scale, zero_point;
};

// torch.ao.quantization.utils.calculate_qmin_qmax (after validate_qmin_qmax when a range is given).
std::pair<int64_t, int64_t> calculate_qmin_qmax(std::optional<int64_t> quant_min, std::optional<int64_t> quant_max,
                                                QDtype dtype, bool reduce_range);

// UniformQuantizationObserverBase: the options, the range, and _calculate_qparams.
// Thread-safety: none; an observer belongs to the one module (and thread) calibrating it.
class UniformObserver {
 public:
  explicit UniformObserver(const ObserverOptions& options);
  virtual ~UniformObserver() = default;

  // Records the statistics of `x` (any floating dtype, read as float32); an empty x is ignored.
  virtual void forward(const Tensor& x) = 0;
  virtual QParams calculate_qparams() const = 0;

  const ObserverOptions& options() const { return options_; }
  int64_t quant_min() const { return quant_min_; }
  int64_t quant_max() const { return quant_max_; }

 protected:
  // _calculate_qparams over per-channel (or a single) min and max; `observed` false gives
  // the unobserved defaults.
  QParams qparams_from(const std::vector<float>& min_val, const std::vector<float>& max_val) const;
  // The values of x as float32, on the host.
  static std::vector<float> values(const Tensor& x);

  ObserverOptions options_;
  int64_t quant_min_ = 0, quant_max_ = 0;
  float eps_;
};

// MinMaxObserver: the running min and max (per_tensor_affine or per_tensor_symmetric).
class MinMaxObserver : public UniformObserver {
 public:
  explicit MinMaxObserver(const ObserverOptions& options = {});
  void forward(const Tensor& x) override;
  QParams calculate_qparams() const override;
  void reset_min_max_vals();
  // inf and -inf until something is observed.
  float min_val() const { return min_val_; }
  float max_val() const { return max_val_; }

 protected:
  float min_val_, max_val_;
};

// MovingAverageMinMaxObserver: the first batch's min and max, then
// min += averaging_constant * (batch min - min), and the same for max (float32).
class MovingAverageMinMaxObserver : public MinMaxObserver {
 public:
  explicit MovingAverageMinMaxObserver(double averaging_constant = 0.01, const ObserverOptions& options = {});
  void forward(const Tensor& x) override;
  double averaging_constant() const { return averaging_constant_; }

 private:
  double averaging_constant_;
};

// PerChannelMinMaxObserver: the running min and max of each index of dimension ch_axis
// (per_channel_affine or per_channel_symmetric).
class PerChannelMinMaxObserver : public UniformObserver {
 public:
  explicit PerChannelMinMaxObserver(int64_t ch_axis = 0, const ObserverOptions& options = PerChannelDefaults());
  void forward(const Tensor& x) override;
  QParams calculate_qparams() const override;
  void reset_min_max_vals();
  int64_t ch_axis() const { return ch_axis_; }
  // Empty until something is observed.
  const std::vector<float>& min_val() const { return min_val_; }
  const std::vector<float>& max_val() const { return max_val_; }

  static ObserverOptions PerChannelDefaults() {
    ObserverOptions o;
    o.qscheme = QScheme::PerChannelAffine;
    return o;
  }

 private:
  int64_t ch_axis_;
  std::vector<float> min_val_, max_val_;
};

}  // namespace anvil::quant
