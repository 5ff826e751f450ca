// Fused optimizer steps on CUDA (the SgdStep / AdamStep / RmspropStep rows): one multi-tensor
// launch per ~hundred parameters (NOTE [ Multi-tensor apply ]), with the per-element math the
// CPU kernel runs (core/ops/optimizer_step.h).
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/multi_tensor_apply.cuh"
#include "core/ops/optimizer_step.h"

namespace anvil::cuda {
namespace {

template <typename T, bool... kFlags>
struct SgdBody {
  fn::SgdStepF<T> f;
  const float* found_inf;  // GradScaler's flag on the device, or null: non-zero skips the step
  __device__ __forceinline__ void operator()(void* const* p, int64_t i) const {
    if (found_inf != nullptr && *found_inf != 0.0f) return;
    T* buf = f.has_momentum ? static_cast<T*>(p[2]) + i : nullptr;
    f.template step<kFlags...>(static_cast<T*>(p[0])[i], static_cast<const T*>(p[1])[i], buf);
  }
};

// With kStepCounts the list after the state lists holds each parameter's float64 [3] step count
// (fn::AdamStepCount), advanced by AdvanceBody before this launch; the factors come from it.
template <typename T, bool kStepCounts, bool... kFlags>
struct AdamBody {
  fn::AdamStepF<T> f;
  const float* found_inf;  // GradScaler's flag on the device, or null: non-zero skips the step
  __device__ __forceinline__ void operator()(void* const* p, int64_t i) const {
    if (found_inf != nullptr && *found_inf != 0.0f) return;
    T* vmax = f.amsgrad ? static_cast<T*>(p[4]) + i : nullptr;
    T inv_sqrt_bc2 = f.inv_sqrt_bias_correction2, neg_step = f.neg_step_size;
    if constexpr (kStepCounts) {
      const double* count = static_cast<const double*>(p[f.amsgrad ? 5 : 4]);
      neg_step = static_cast<T>(count[1]);
      inv_sqrt_bc2 = static_cast<T>(count[2]);
    }
    f.template step_corrected<kFlags...>(static_cast<T*>(p[0])[i], static_cast<const T*>(p[1])[i],
                                         static_cast<T*>(p[2])[i], static_cast<T*>(p[3])[i], vmax, inv_sqrt_bc2,
                                         neg_step);
  }
};

// The lists: fn::RmspropStepF::num_lists (the flags are compile-time here).
template <typename T, bool kWd, bool kCentered, bool kMomentum>
struct RmspropBody {
  fn::RmspropStepF<T> f;
  const float* found_inf;  // GradScaler's flag on the device, or null: non-zero skips the step
  __device__ __forceinline__ void operator()(void* const* p, int64_t i) const {
    if (found_inf != nullptr && *found_inf != 0.0f) return;
    T* ga = kCentered ? static_cast<T*>(p[3]) + i : nullptr;
    T* buf = kMomentum ? static_cast<T*>(p[kCentered ? 4 : 3]) + i : nullptr;
    f.template step<kWd, kCentered, kMomentum>(static_cast<T*>(p[0])[i], static_cast<const T*>(p[1])[i],
                                               static_cast<T*>(p[2])[i], ga, buf);
  }
};

// Advances each step count once (element 0's thread), unless the flag says the step is skipped.
template <typename Count>
struct AdvanceBody {
  Count count;
  const float* found_inf;
  __device__ __forceinline__ void operator()(void* const* p, int64_t i) const {
    if (i != 0 || (found_inf != nullptr && *found_inf != 0.0f)) return;
    count.advance(static_cast<double*>(p[0]));
  }
};

template <typename T>
void Sgd(const KernelCall& c) {
  const OptimizerStepArgs& a = c.attrs.get<OptimizerStepArgs>();
  const auto f = fn::SgdStepF<T>::make(a);
  const int device = c.inputs[0].device().index;
  // The flag rides along as the last input; the lists are the rest.
  const float* found_inf = a.skip_if_found_inf ? c.inputs.back().data_ptr<float>() : nullptr;
  const std::vector<Tensor> lists(c.inputs.begin(), c.inputs.end() - (a.skip_if_found_inf ? 1 : 0));
  fn::dispatch_flags(
      [&]<bool kWd, bool kMomentum, bool kFirst, bool kNesterov>() {
        const SgdBody<T, kWd, kMomentum, kFirst, kNesterov> body{f, found_inf};
        if constexpr (kMomentum) {
          MultiTensorApply<3>(lists, device, body);
        } else {
          MultiTensorApply<2>(lists, device, body);
        }
      },
      f.has_weight_decay, f.has_momentum, f.first_step, f.nesterov);
}

template <typename T>
void Adam(const KernelCall& c) {
  const OptimizerStepArgs& a = c.attrs.get<OptimizerStepArgs>();
  const auto f = fn::AdamStepF<T>::make(a);
  const int device = c.inputs[0].device().index;
  const float* found_inf = a.skip_if_found_inf ? c.inputs.back().data_ptr<float>() : nullptr;
  // The lists (and step counts): the inputs without the flag.
  const std::vector<Tensor> lists(c.inputs.begin(), c.inputs.end() - (a.skip_if_found_inf ? 1 : 0));
  if (a.device_step_counts) {
    // The counts first, on the same stream: every block of the update then reads the new t.
    const size_t n = lists.size() / (f.amsgrad ? 6 : 5);
    const std::vector<Tensor> counts(lists.end() - static_cast<std::ptrdiff_t>(n), lists.end());
    MultiTensorApply<1>(counts, device, AdvanceBody<fn::AdamStepCount>{fn::AdamStepCount::make(a), found_inf});
  }
  fn::dispatch_flags(
      [&]<bool kStepCounts, bool kWd, bool kDecoupled, bool kAmsgrad>() {
        const AdamBody<T, kStepCounts, kWd, kDecoupled, kAmsgrad> body{f, found_inf};
        constexpr int kDepth = (kAmsgrad ? 5 : 4) + (kStepCounts ? 1 : 0);
        MultiTensorApply<kDepth>(lists, device, body);
      },
      a.device_step_counts, f.has_weight_decay, f.decoupled, f.amsgrad);
}

template <typename T>
void Rmsprop(const KernelCall& c) {
  const OptimizerStepArgs& a = c.attrs.get<OptimizerStepArgs>();
  const auto f = fn::RmspropStepF<T>::make(a);
  const int device = c.inputs[0].device().index;
  const float* found_inf = a.skip_if_found_inf ? c.inputs.back().data_ptr<float>() : nullptr;
  std::vector<Tensor> lists(c.inputs.begin(), c.inputs.end() - (a.skip_if_found_inf ? 1 : 0));
  if (a.device_step_counts) {
    // The counts are not read by the update: they go in a launch of their own and leave the lists.
    const size_t n = lists.size() / static_cast<size_t>(f.num_lists() + 1);
    const std::vector<Tensor> counts(lists.end() - static_cast<std::ptrdiff_t>(n), lists.end());
    MultiTensorApply<1>(counts, device, AdvanceBody<fn::PlainStepCount>{fn::PlainStepCount{}, found_inf});
    lists.resize(lists.size() - n);
  }
  fn::dispatch_flags(
      [&]<bool kWd, bool kCentered, bool kMomentum>() {
        const RmspropBody<T, kWd, kCentered, kMomentum> body{f, found_inf};
        constexpr int kDepth = 3 + (kCentered ? 1 : 0) + (kMomentum ? 1 : 0);
        MultiTensorApply<kDepth>(lists, device, body);
      },
      f.has_weight_decay, f.centered, f.has_momentum);
}

// The rows take float32 or float64 lists (ops/foreach.cc checks).
void SgdKernel(const KernelCall& c) { c.inputs[0].dtype() == kFloat64 ? Sgd<double>(c) : Sgd<float>(c); }
void AdamKernel(const KernelCall& c) { c.inputs[0].dtype() == kFloat64 ? Adam<double>(c) : Adam<float>(c); }
void RmspropKernel(const KernelCall& c) { c.inputs[0].dtype() == kFloat64 ? Rmsprop<double>(c) : Rmsprop<float>(c); }

}  // namespace

ANVIL_KERNEL_SLOT(SgdStep, SgdKernel)
ANVIL_KERNEL_SLOT(AdamStep, AdamKernel)
ANVIL_KERNEL_SLOT(RmspropStep, RmspropKernel)

}  // namespace anvil::cuda
