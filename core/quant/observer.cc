#include "core/quant/observer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Python's floor division (reduce_range on a given range: -128 // 2 == -64, 127 // 2 == 63).
int64_t FloorDiv2(int64_t v) { return v >= 0 ? v / 2 : -((-v + 1) / 2); }

}  // namespace

std::pair<int64_t, int64_t> calculate_qmin_qmax(std::optional<int64_t> quant_min, std::optional<int64_t> quant_max,
                                                QDtype dtype, bool reduce_range) {
  ANVIL_CHECK(quant_min.has_value() == quant_max.has_value(),
              "observer: give both quant_min and quant_max, or neither (got only ",
              quant_min ? "quant_min" : "quant_max", ")");
  if (quant_min) {
    const int64_t lo = *quant_min, hi = *quant_max;
    ANVIL_CHECK(lo <= 0 && 0 <= hi, "observer: the quantization range must include 0, got [", lo, ", ", hi, "]");
    ANVIL_CHECK(lo < hi, "observer: quant_min must be less than quant_max, got [", lo, ", ", hi, "]");
    if (dtype == QDtype::QInt8) {
      ANVIL_CHECK(hi - lo + 1 <= 256, "observer: the quantization range of qint8 holds at most 256 values, got [", lo,
                  ", ", hi, "]");
    }
    return reduce_range ? std::pair<int64_t, int64_t>{FloorDiv2(lo), FloorDiv2(hi)}
                        : std::pair<int64_t, int64_t>{lo, hi};
  }
  if (dtype == QDtype::QInt8)
    return reduce_range ? std::pair<int64_t, int64_t>{-64, 63} : std::pair<int64_t, int64_t>{-128, 127};
  return reduce_range ? std::pair<int64_t, int64_t>{0, 127} : std::pair<int64_t, int64_t>{0, 255};
}

UniformObserver::UniformObserver(const ObserverOptions& options)
    : options_(options), eps_(static_cast<float>(options.eps)) {
  std::tie(quant_min_, quant_max_) =
      calculate_qmin_qmax(options.quant_min, options.quant_max, options.dtype, options.reduce_range);
}

std::vector<float> UniformObserver::values(const Tensor& x) {
  ANVIL_CHECK_TYPE(x.defined() && is_floating_point(x.dtype()), "observer: expected a floating-point tensor, got ",
                   x.defined() ? std::string(dtype_name(x.dtype())) : std::string("an undefined tensor"));
  return x.detach().cpu().to(kFloat32).contiguous().to_vector<float>();
}

QParams UniformObserver::qparams_from(const std::vector<float>& min_val, const std::vector<float>& max_val) const {
  const bool unobserved = min_val.empty() || (min_val.size() == 1 && !is_per_channel(options_.qscheme) &&
                                              min_val[0] == kInf && max_val[0] == -kInf);
  if (unobserved) return {tensor(std::vector<float>{1.0f}), tensor(std::vector<int64_t>{0})};
  for (size_t c = 0; c < min_val.size(); ++c) {
    ANVIL_CHECK(!(min_val[c] > max_val[c]), "observer: min ", min_val[c], " should be less than max ", max_val[c],
                min_val.size() > 1 ? " (channel " + std::to_string(c) + ")" : std::string());
  }
  const size_t n = min_val.size();
  std::vector<float> scale(n);
  const float qrange = static_cast<float>(quant_max_ - quant_min_);
  if (is_symmetric(options_.qscheme)) {
    int64_t zp = 0;
    if (options_.dtype == QDtype::QUInt8) {
      zp = options_.quant_min ? FloorDiv2(quant_min_ + quant_max_) : 128;
    }
    // (quant_max - quant_min) / 2 is a Python float, exact in float32 for 8-bit ranges.
    const float half_range = static_cast<float>(static_cast<double>(quant_max_ - quant_min_) / 2);
    for (size_t c = 0; c < n; ++c) {
      const float min_neg = std::min(min_val[c], 0.0f), max_pos = std::max(max_val[c], 0.0f);
      const float amax = std::max(-min_neg, max_pos);
      scale[c] = std::max(amax / half_range, eps_);
    }
    return {tensor(scale), tensor(std::vector<int64_t>(n, zp))};
  }
  std::vector<int32_t> zp(n);
  for (size_t c = 0; c < n; ++c) {
    const float min_neg = std::min(min_val[c], 0.0f), max_pos = std::max(max_val[c], 0.0f);
    scale[c] = std::max((max_pos - min_neg) / qrange, eps_);
    const int64_t z = quant_min_ - static_cast<int64_t>(static_cast<int32_t>(std::nearbyint(min_neg / scale[c])));
    zp[c] = static_cast<int32_t>(std::clamp(z, quant_min_, quant_max_));
  }
  return {tensor(scale), tensor(zp)};
}

MinMaxObserver::MinMaxObserver(const ObserverOptions& options)
    : UniformObserver(options), min_val_(kInf), max_val_(-kInf) {
  ANVIL_CHECK(!is_per_channel(options.qscheme),
              "MinMaxObserver: expected per_tensor_affine or per_tensor_symmetric, got ",
              qscheme_name(options.qscheme));
  ANVIL_CHECK(
      !(options.qscheme == QScheme::PerTensorSymmetric && options.reduce_range && options.dtype == QDtype::QUInt8),
      "MinMaxObserver: cannot reduce range for symmetric quantization for quint8");
}

void MinMaxObserver::forward(const Tensor& x) {
  const std::vector<float> v = values(x);
  if (v.empty()) return;
  float lo = v[0], hi = v[0];
  for (float f : v) {
    // aminmax propagates NaN.
    if (std::isnan(f) || std::isnan(lo)) {
      lo = hi = std::numeric_limits<float>::quiet_NaN();
      break;
    }
    lo = std::min(lo, f);
    hi = std::max(hi, f);
  }
  // torch.min / torch.max with the running values (NaN propagates).
  min_val_ = std::isnan(lo) || std::isnan(min_val_) ? lo : std::min(lo, min_val_);
  max_val_ = std::isnan(hi) || std::isnan(max_val_) ? hi : std::max(hi, max_val_);
}

QParams MinMaxObserver::calculate_qparams() const { return qparams_from({min_val_}, {max_val_}); }

void MinMaxObserver::reset_min_max_vals() {
  min_val_ = kInf;
  max_val_ = -kInf;
}

MovingAverageMinMaxObserver::MovingAverageMinMaxObserver(double averaging_constant, const ObserverOptions& options)
    : MinMaxObserver(options), averaging_constant_(averaging_constant) {}

void MovingAverageMinMaxObserver::forward(const Tensor& x) {
  const std::vector<float> v = values(x);
  if (v.empty()) return;
  const auto [lo_it, hi_it] = std::minmax_element(v.begin(), v.end());
  const float lo = *lo_it, hi = *hi_it;
  if (min_val_ == kInf && max_val_ == -kInf) {
    min_val_ = lo;
    max_val_ = hi;
    return;
  }
  // A Python float times a float32 tensor: float32 arithmetic, one rounding per operation.
  const float c = static_cast<float>(averaging_constant_);
  const float dmin = lo - min_val_, dmax = hi - max_val_;
  const float step_min = c * dmin, step_max = c * dmax;
  min_val_ = min_val_ + step_min;
  max_val_ = max_val_ + step_max;
}

PerChannelMinMaxObserver::PerChannelMinMaxObserver(int64_t ch_axis, const ObserverOptions& options)
    : UniformObserver(options), ch_axis_(ch_axis) {
  ANVIL_CHECK(is_per_channel(options.qscheme),
              "PerChannelMinMaxObserver: expected per_channel_affine or per_channel_symmetric, got ",
              qscheme_name(options.qscheme));
  ANVIL_CHECK(
      !(options.qscheme == QScheme::PerChannelSymmetric && options.reduce_range && options.dtype == QDtype::QUInt8),
      "PerChannelMinMaxObserver: cannot reduce range for symmetric quantization for quint8");
}

void PerChannelMinMaxObserver::forward(const Tensor& x) {
  const std::vector<float> v = values(x);
  if (v.empty()) return;
  const int64_t axis = ch_axis_ < 0 ? ch_axis_ + x.dim() : ch_axis_;
  ANVIL_CHECK_INDEX(axis >= 0 && axis < x.dim(), "PerChannelMinMaxObserver: ch_axis ", ch_axis_,
                    " is out of range for a tensor of ", x.dim(), " dimensions");
  const int64_t channels = x.size(axis);
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.dim(); ++d) inner *= x.size(d);
  std::vector<float> lo(channels, kInf), hi(channels, -kInf);
  for (size_t i = 0; i < v.size(); ++i) {
    const size_t c = static_cast<size_t>((static_cast<int64_t>(i) / inner) % channels);
    lo[c] = std::min(lo[c], v[i]);
    hi[c] = std::max(hi[c], v[i]);
  }
  if (min_val_.empty()) {
    min_val_ = lo;
    max_val_ = hi;
    return;
  }
  ANVIL_CHECK(static_cast<int64_t>(min_val_.size()) == channels, "PerChannelMinMaxObserver: observed ", min_val_.size(),
              " channels before, got ", channels, " along dimension ", axis);
  for (int64_t c = 0; c < channels; ++c) {
    min_val_[c] = std::min(lo[c], min_val_[c]);
    max_val_[c] = std::max(hi[c], max_val_[c]);
  }
}

QParams PerChannelMinMaxObserver::calculate_qparams() const { return qparams_from(min_val_, max_val_); }

void PerChannelMinMaxObserver::reset_min_max_vals() {
  min_val_.clear();
  max_val_.clear();
}

}  // namespace anvil::quant
