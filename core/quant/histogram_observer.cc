#include "core/quant/histogram_observer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::quant {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// torch.histc's edges use one linspace evaluation per chunk of at::parallel_for: a range
// longer than its grain size (32768) is split in two on any machine with two threads or more.
constexpr int64_t kGrainSize = 32768;
// The float lanes of ATen's Vectorized<float> at its AVX-512 capability, which evaluates
// linspace as base + lane * step per vector.
constexpr int64_t kLanes = 16;

// torch.linspace(start, end, steps) in float32 as ATen's CPU kernel evaluates it: from the
// start up to halfway, from the end after it; a vector of lanes shares one base.
std::vector<float> LinspaceF32(double start_d, double end_d, int64_t steps) {
  const float start = static_cast<float>(start_d), end = static_cast<float>(end_d);
  std::vector<float> out(steps);
  if (steps == 1) {
    out[0] = start;
    return out;
  }
  const float step = (end - start) / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  auto value = [&](int64_t idx) {
    return idx < halfway ? start + step * static_cast<float>(idx) : end - step * static_cast<float>(steps - idx - 1);
  };
  const int64_t chunk = steps > kGrainSize ? (steps + 1) / 2 : steps;
  for (int64_t begin = 0; begin < steps; begin += chunk) {
    const int64_t n = std::min(chunk, steps - begin);
    int64_t i = 0;
    // The vectorised loop takes two vectors at a time; the rest goes one by one.
    for (; i + 2 * kLanes <= n; i += 2 * kLanes) {
      for (int64_t v = 0; v < 2; ++v) {
        const int64_t idx = begin + i + v * kLanes;
        const float base = value(idx);
        for (int64_t lane = 0; lane < kLanes; ++lane) out[idx + lane] = base + static_cast<float>(lane) * step;
      }
    }
    for (; i < n; ++i) out[begin + i] = value(begin + i);
  }
  return out;
}

// torch.histc(x, bins, min, max) in float32: the range from min and max (the data's when
// they are equal, widened by 1 each way when that is still one point), each value's bin by
// linear interpolation, the last bin closed on the right, values outside ignored.
std::vector<float> Histc(const std::vector<float>& x, int64_t bins, double lo, double hi) {
  if (lo == hi && !x.empty()) {
    const auto [mn, mx] = std::minmax_element(x.begin(), x.end());
    lo = *mn;
    hi = *mx;
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  const float left = static_cast<float>(lo), right = static_cast<float>(hi);
  std::vector<float> hist(bins, 0.0f);
  for (float v : x) {
    if (!(v >= left && v <= right)) continue;
    int64_t pos = static_cast<int64_t>((v - left) * static_cast<float>(bins) / (right - left));
    if (pos == bins) pos -= 1;
    hist[pos] += 1.0f;
  }
  return hist;
}

// c10::div_floor_floating: Python's floor division.
float DivFloor(float a, float b) {
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1.0f;
  if (div == 0) return std::copysign(0.0f, a / b);
  float floordiv = std::floor(div);
  if (div - floordiv > 0.5f) floordiv += 1.0f;
  return floordiv;
}

// _get_norm: density * (end^3 - begin^3) / 3, one float32 rounding per operation.
float Norm(float begin, float end, float density) {
  const float e3 = end * end * end, b3 = begin * begin * begin;
  return density * ((e3 - b3) / 3.0f);
}

// A float32 sum, as torch.sum: accumulated wider, rounded once.
float SumF32(const std::vector<float>& v) {
  double s = 0;
  for (float f : v) s += f;
  return static_cast<float>(s);
}

}  // namespace

HistogramObserver::HistogramObserver(int64_t bins, const ObserverOptions& options)
    : UniformObserver(options), bins_(bins), dst_nbins_(256), histogram_(bins, 0.0f), min_val_(kInf), max_val_(-kInf) {
  ANVIL_CHECK(!is_per_channel(options.qscheme),
              "HistogramObserver: expected per_tensor_affine or per_tensor_symmetric, got ",
              qscheme_name(options.qscheme));
  ANVIL_CHECK(bins > 0, "HistogramObserver: expected a positive number of bins, got ", bins);
}

void HistogramObserver::forward(const Tensor& x) {
  std::vector<float> v = values(x);
  if (v.empty()) return;
  // Infinite values are dropped: the range would be infinite.
  if (std::any_of(v.begin(), v.end(), [](float f) { return std::isinf(f); })) {
    v.erase(std::remove_if(v.begin(), v.end(), [](float f) { return std::isinf(f); }), v.end());
    if (v.empty()) return;
  }
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  const float x_min = *mn, x_max = *mx;
  if (min_val_ == kInf || max_val_ == -kInf) {
    min_val_ = x_min;
    max_val_ = x_max;
    histogram_ = Histc(v, bins_, x_min, x_max);
    return;
  }
  const float new_min = std::min(min_val_, x_min), new_max = std::max(max_val_, x_max);
  const std::vector<float> update = Histc(v, bins_, new_min, new_max);
  if (new_min == min_val_ && new_max == max_val_) {
    for (int64_t i = 0; i < bins_; ++i) histogram_[i] += update[i];
    return;
  }
  histogram_ = combine(update, new_min, new_max);
  min_val_ = new_min;
  max_val_ = new_max;
}

// _combine_histograms: the running histogram carried to [new_min, new_max], plus the update.
std::vector<float> HistogramObserver::combine(const std::vector<float>& update, float new_min, float new_max) const {
  std::vector<float> out(bins_);
  if (min_val_ == max_val_) {
    // All mass at one point: one bin of the new range takes it.
    const float mass = SumF32(histogram_);
    const std::vector<float> at = Histc({min_val_}, bins_, new_min, new_max);
    for (int64_t i = 0; i < bins_; ++i) out[i] = at[i] * mass + update[i];
    return out;
  }
  const std::vector<float> carried = upscale(new_min, new_max);
  for (int64_t i = 0; i < bins_; ++i) out[i] = update[i] + carried[i];
  return out;
}

// _upscale_histogram: each bin split in 16 equal parts, each part's midpoint assigned to
// the bin of the new range it falls in (torch.bucketize, right=True), its mass summed there.
std::vector<float> HistogramObserver::upscale(float new_min, float new_max) const {
  constexpr int64_t kRate = 16;
  const int64_t n = bins_ * kRate;
  const float bin_size = (max_val_ - min_val_) / static_cast<float>(n);
  const float half = 0.5f * bin_size;
  const std::vector<float> starts = LinspaceF32(min_val_, max_val_, n + 1);
  const std::vector<float> bounds = LinspaceF32(new_min, new_max, bins_ + 1);
  std::vector<float> out(bins_, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float mid = starts[i] + half;
    int64_t b = (std::upper_bound(bounds.begin(), bounds.end(), mid) - bounds.begin()) - 1;
    b = std::clamp<int64_t>(b, 0, bins_ - 1);
    out[b] += histogram_[i / kRate] / static_cast<float>(kRate);
  }
  return out;
}

// _compute_quantization_error: the L2 error of quantizing the histogram to dst_nbins bins
// over bins [start_bin, end_bin]; Python floats in double, the tensors in float32.
double HistogramObserver::quantization_error(int64_t start_bin, int64_t end_bin) const {
  const double bin_width = (static_cast<double>(max_val_) - static_cast<double>(min_val_)) / bins_;
  const double dst_bin_width = bin_width * (end_bin - start_bin + 1) / dst_nbins_;
  if (dst_bin_width == 0.0) return 0.0;
  const float bw = static_cast<float>(bin_width), dbw = static_cast<float>(dst_bin_width);
  const float half = static_cast<float>(dst_bin_width / 2), neg_half = static_cast<float>(-dst_bin_width / 2);
  const float top = static_cast<float>(dst_nbins_ - 1);
  std::vector<float> norm(bins_);
  const float inner = [&] {  // _get_norm(-w/2, w/2, 1) before the density
    const float e3 = half * half * half, b3 = neg_half * neg_half * neg_half;
    return (e3 - b3) / 3.0f;
  }();
  for (int64_t i = 0; i < bins_; ++i) {
    const float begin = static_cast<float>(i - start_bin) * bw;
    const float end = begin + bw;
    const float dst_begin = std::clamp(DivFloor(begin, dbw), 0.0f, top);
    const float dst_begin_center = (dst_begin + 0.5f) * dbw;
    const float dst_end = std::clamp(DivFloor(end, dbw), 0.0f, top);
    const float density = histogram_[i] / bw;
    float n = 0.0f + Norm(begin - dst_begin_center, half, density);
    n = n + ((dst_end - dst_begin) - 1.0f) * (density * inner);
    const float dst_end_center = dst_end * dbw + half;
    n = n + Norm(neg_half, end - dst_end_center, density);
    norm[i] = n;
  }
  return SumF32(norm);
}

// _non_linear_param_search: moves the range's ends inwards by quantiles of 1e-5 while the
// quantization error does not grow.
std::pair<float, float> HistogramObserver::non_linear_param_search() const {
  const float bin_width = (max_val_ - min_val_) / static_cast<float>(bins_);
  const double total = SumF32(histogram_);
  std::vector<float> csum(bins_);
  double acc = 0;
  for (int64_t i = 0; i < bins_; ++i) {
    acc += histogram_[i];
    csum[i] = static_cast<float>(acc);
  }
  const double stepsize = 1e-5;
  double alpha = 0.0, beta = 1.0;
  int64_t start_bin = 0, end_bin = bins_ - 1;
  double norm_min = std::numeric_limits<double>::infinity();
  while (alpha < beta) {
    const double next_alpha = alpha + stepsize, next_beta = beta - stepsize;
    // A tensor element against a Python float: compared in float32.
    const float lo_mass = static_cast<float>(next_alpha * total), hi_mass = static_cast<float>(next_beta * total);
    int64_t l = start_bin, r = end_bin;
    while (l < end_bin && csum[l] < lo_mass) ++l;
    while (r > start_bin && csum[r] > hi_mass) --r;
    int64_t next_start = start_bin, next_end = end_bin;
    if (l - start_bin > end_bin - r) {
      next_start = l;
      alpha = next_alpha;
    } else {
      next_end = r;
      beta = next_beta;
    }
    if (next_start == start_bin && next_end == end_bin) continue;
    const double norm = quantization_error(next_start, next_end);
    if (norm > norm_min) break;
    norm_min = norm;
    start_bin = next_start;
    end_bin = next_end;
  }
  const float step_lo = bin_width * static_cast<float>(start_bin),
              step_hi = bin_width * static_cast<float>(end_bin + 1);
  return {min_val_ + step_lo, min_val_ + step_hi};
}

QParams HistogramObserver::calculate_qparams() const {
  if (min_val_ == kInf && max_val_ == -kInf) return qparams_from({}, {});
  const auto [lo, hi] = non_linear_param_search();
  return qparams_from({lo}, {hi});
}

}  // namespace anvil::quant
