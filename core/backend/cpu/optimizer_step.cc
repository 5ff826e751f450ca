// Fused optimizer steps on the CPU (the SgdStep / AdamStep / RmspropStep rows): every element
// of every parameter is read and written once, with the shared per-element math of
// core/ops/optimizer_step.h. The lists are walked as one long range split across the pool, so
// a model of many small tensors and one of a few large ones both use every thread.
#include "core/ops/optimizer_step.h"

#include <algorithm>
#include <vector>

#include "core/backend/cpu/kernels.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {
namespace {

// Elements per pool task: an Adam step touches ~20 bytes per element per list, so this keeps
// tasks well above the pool's hand-off cost.
constexpr int64_t kGrain = 1 << 15;

// Calls body(list index, element begin, element end) over [begin, end) of the concatenation of
// the `count` tensors whose sizes are `numels` (prefix sums in `starts`).
template <typename F>
void ForEachSpan(const std::vector<int64_t>& starts, int64_t begin, int64_t end, const F& body) {
  size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin()) - 1;
  for (; begin < end; ++i) {
    const int64_t tensor_end = starts[i + 1];
    const int64_t stop = std::min(end, tensor_end);
    if (stop > begin) body(i, begin - starts[i], stop - starts[i]);
    begin = stop;
  }
}

// The lists of a Foreach call: list k holds inputs[k * n .. (k + 1) * n). After the lists come
// `per_param - num_lists` more tensors per parameter (Adam's step counts), then GradScaler's
// flag when the call has one.
template <typename T>
struct Lists {
  size_t n;
  std::vector<int64_t> starts;  // n + 1 prefix sums of the parameters' sizes
  const std::vector<Tensor>& inputs;

  Lists(const KernelCall& c, size_t per_param)
      : n((c.inputs.size() - (c.attrs.get<OptimizerStepArgs>().skip_if_found_inf ? 1 : 0)) / per_param),
        inputs(c.inputs) {
    starts.push_back(0);
    for (size_t i = 0; i < n; ++i) starts.push_back(starts.back() + inputs[i].numel());
  }
  T* ptr(size_t list, size_t i) const { return inputs[list * n + i].template data_ptr<T>(); }
  int64_t total() const { return starts.back(); }
  // body(parameter index, element begin, element end) over every element of the parameters,
  // split across the pool in blocks of kGrain elements.
  template <typename F>
  void parallel_spans(const F& body) const {
    parallel_for(0, total(), kGrain, [&](int64_t b, int64_t e) { ForEachSpan(starts, b, e, body); });
  }
};

// GradScaler's flag (OptimizerStepArgs::skip_if_found_inf): the last input, read where it lives.
bool SkippedByFoundInf(const KernelCall& c) {
  return c.attrs.get<OptimizerStepArgs>().skip_if_found_inf && c.inputs.back().data_ptr<float>()[0] != 0.0f;
}

template <typename T>
void SgdStep(const KernelCall& c) {
  if (SkippedByFoundInf(c)) return;
  const auto f = fn::SgdStepF<T>::make(c.attrs.get<OptimizerStepArgs>());
  const Lists<T> l(c, f.has_momentum ? 3 : 2);
  fn::dispatch_flags(
      [&]<bool kWd, bool kMomentum, bool kFirst, bool kNesterov>() {
        l.parallel_spans([&](size_t i, int64_t lo, int64_t hi) {
          T* __restrict p = l.ptr(0, i);
          const T* __restrict g = l.ptr(1, i);
          T* __restrict buf = kMomentum ? l.ptr(2, i) : nullptr;
          for (int64_t j = lo; j < hi; ++j)
            f.template step<kWd, kMomentum, kFirst, kNesterov>(p[j], g[j], kMomentum ? buf + j : nullptr);
        });
      },
      f.has_weight_decay, f.has_momentum, f.first_step, f.nesterov);
}

// With device_step_counts the inputs are the lists, one float64 [3] step count per parameter,
// then (optionally) the flag: the counts are advanced here, serially, before the elements.
template <typename T>
void AdamStep(const KernelCall& c) {
  const OptimizerStepArgs& a = c.attrs.get<OptimizerStepArgs>();
  if (SkippedByFoundInf(c)) return;
  const auto f = fn::AdamStepF<T>::make(a);
  const size_t num_lists = f.amsgrad ? 5 : 4;
  const Lists<T> l(c, num_lists + (a.device_step_counts ? 1 : 0));
  const size_t n = l.n;
  // Per parameter: 1 / sqrt(bias correction 2) and -lr / bias correction 1.
  std::vector<T> inv_sqrt_bc2(n, f.inv_sqrt_bias_correction2), neg_step(n, f.neg_step_size);
  if (a.device_step_counts) {
    const auto count = fn::AdamStepCount::make(a);
    for (size_t i = 0; i < n; ++i) {
      double* s = c.inputs[n * num_lists + i].data_ptr<double>();
      count.advance(s);
      neg_step[i] = static_cast<T>(s[1]);
      inv_sqrt_bc2[i] = static_cast<T>(s[2]);
    }
  }
  fn::dispatch_flags(
      [&]<bool kWd, bool kDecoupled, bool kAmsgrad>() {
        l.parallel_spans([&](size_t i, int64_t lo, int64_t hi) {
          T* __restrict p = l.ptr(0, i);
          const T* __restrict g = l.ptr(1, i);
          T* __restrict m = l.ptr(2, i);
          T* __restrict v = l.ptr(3, i);
          T* __restrict vmax = kAmsgrad ? l.ptr(4, i) : nullptr;
          const T bc2 = inv_sqrt_bc2[i], step = neg_step[i];
          for (int64_t j = lo; j < hi; ++j)
            f.template step_corrected<kWd, kDecoupled, kAmsgrad>(p[j], g[j], m[j], v[j], kAmsgrad ? vmax + j : nullptr,
                                                                 bc2, step);
        });
      },
      f.has_weight_decay, f.decoupled, f.amsgrad);
}

// The lists (fn::RmspropStepF::num_lists), then one float64 [3] step count per parameter,
// advanced here, serially, then (optionally) the flag.
template <typename T>
void RmspropStep(const KernelCall& c) {
  const OptimizerStepArgs& a = c.attrs.get<OptimizerStepArgs>();
  if (SkippedByFoundInf(c)) return;
  const auto f = fn::RmspropStepF<T>::make(a);
  const size_t num_lists = static_cast<size_t>(f.num_lists());
  const Lists<T> l(c, num_lists + (a.device_step_counts ? 1 : 0));
  if (a.device_step_counts) {
    const size_t n = l.n;
    for (size_t i = 0; i < n; ++i) fn::PlainStepCount{}.advance(c.inputs[n * num_lists + i].data_ptr<double>());
  }
  const size_t buf_list = static_cast<size_t>(f.momentum_list());
  fn::dispatch_flags(
      [&]<bool kWd, bool kCentered, bool kMomentum>() {
        l.parallel_spans([&](size_t i, int64_t lo, int64_t hi) {
          T* __restrict p = l.ptr(0, i);
          const T* __restrict g = l.ptr(1, i);
          T* __restrict sq = l.ptr(2, i);
          T* __restrict ga = kCentered ? l.ptr(3, i) : nullptr;
          T* __restrict buf = kMomentum ? l.ptr(buf_list, i) : nullptr;
          for (int64_t j = lo; j < hi; ++j)
            f.template step<kWd, kCentered, kMomentum>(p[j], g[j], sq[j], kCentered ? ga + j : nullptr,
                                                       kMomentum ? buf + j : nullptr);
        });
      },
      f.has_weight_decay, f.centered, f.has_momentum);
}

// The rows take float32 or float64 lists (ops/foreach.cc checks).
void SgdKernel(const KernelCall& c) { c.inputs[0].dtype() == kFloat64 ? SgdStep<double>(c) : SgdStep<float>(c); }
void AdamKernel(const KernelCall& c) { c.inputs[0].dtype() == kFloat64 ? AdamStep<double>(c) : AdamStep<float>(c); }
void RmspropKernel(const KernelCall& c) {
  c.inputs[0].dtype() == kFloat64 ? RmspropStep<double>(c) : RmspropStep<float>(c);
}

}  // namespace

ANVIL_KERNEL_SLOT(SgdStep, SgdKernel)
ANVIL_KERNEL_SLOT(AdamStep, AdamKernel)
ANVIL_KERNEL_SLOT(RmspropStep, RmspropKernel)

}  // namespace anvil::cpu
