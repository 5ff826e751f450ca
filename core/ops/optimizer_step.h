// The per-element updates of the fused optimizer steps (the SgdStep / AdamStep / RmspropStep
// rows), shared by the CPU and CUDA kernels (__host__ __device__): what one element of a
// parameter and its state become in one step. The arithmetic follows the optimizers'
// per-tensor code (core/optim), op by op, so the fused and unfused paths agree to rounding.
//
// T is the op-math type (float for float32 parameters, double for float64); the scalars are
// converted from the step's float64 attributes once per launch, as the per-tensor ops convert
// a Scalar to the tensor's dtype. The options that change the arithmetic (weight decay on or
// off, momentum, AMSGrad, ...) are template flags of step(), chosen once per call with
// dispatch_flags: a loop over elements then has no branch left and vectorises.
#pragma once

#include <cmath>

#include "core/ops/attrs.h"
#include "core/ops/functors.h"
#include "core/util/macros.h"

namespace anvil::fn {

// Calls f.template operator()<b1, ..., bn>() with the runtime flags as compile-time ones.
template <bool... Chosen, typename F>
void dispatch_flags(const F& f) {
  f.template operator()<Chosen...>();
}
template <bool... Chosen, typename F, typename... Rest>
void dispatch_flags(const F& f, bool flag, Rest... rest) {
  if (flag) {
    dispatch_flags<Chosen..., true>(f, rest...);
  } else {
    dispatch_flags<Chosen..., false>(f, rest...);
  }
}

template <typename T>
struct SgdStepF {
  T lr, weight_decay, momentum, one_minus_dampening;
  bool has_weight_decay, has_momentum, first_step, nesterov;  // the flags of step(), in order

  static SgdStepF make(const OptimizerStepArgs& a) {
    return {static_cast<T>(a.lr),
            static_cast<T>(a.weight_decay),
            static_cast<T>(a.momentum),
            static_cast<T>(1.0 - a.dampening),
            a.weight_decay != 0.0,
            a.momentum != 0.0,
            a.first_step,
            a.nesterov};
  }

  // buf is not touched without momentum.
  template <bool kWeightDecay, bool kMomentum, bool kFirstStep, bool kNesterov>
  ANVIL_INLINE void step(T& p, T g, T* buf) const {
    if constexpr (kWeightDecay) g = g + p * weight_decay;
    if constexpr (kMomentum) {
      T b;
      if constexpr (kFirstStep) {
        b = g;
      } else {
        b = *buf * momentum + g * one_minus_dampening;
      }
      *buf = b;
      if constexpr (kNesterov) {
        g = g + b * momentum;
      } else {
        g = b;
      }
    }
    p = p + g * -lr;
  }
};

template <typename T>
struct AdamStepF {
  T one_minus_lr_wd;  // AdamW: the decay factor
  T weight_decay;     // Adam: L2 added to the gradient
  T one_minus_beta1, beta2, one_minus_beta2;
  T inv_sqrt_bias_correction2, eps, neg_step_size;
  bool has_weight_decay, decoupled, amsgrad;  // the flags of step(), in order

  static AdamStepF make(const OptimizerStepArgs& a) {
    return {static_cast<T>(1.0 - a.lr * a.weight_decay),
            static_cast<T>(a.weight_decay),
            static_cast<T>(1.0 - a.beta1),
            static_cast<T>(a.beta2),
            static_cast<T>(1.0 - a.beta2),
            static_cast<T>(1.0 / std::sqrt(a.bias_correction2)),
            static_cast<T>(a.eps),
            static_cast<T>(-a.lr / a.bias_correction1),
            a.weight_decay != 0.0,
            a.decoupled,
            a.amsgrad};
  }

  // vmax is not touched without AMSGrad.
  template <bool kWeightDecay, bool kDecoupled, bool kAmsgrad>
  ANVIL_INLINE void step(T& p, T g, T& m, T& v, T* vmax) const {
    step_corrected<kWeightDecay, kDecoupled, kAmsgrad>(p, g, m, v, vmax, inv_sqrt_bias_correction2, neg_step_size);
  }

  // The same with the step count's factors given (AdamStepCount: each parameter at its own t).
  template <bool kWeightDecay, bool kDecoupled, bool kAmsgrad>
  ANVIL_INLINE void step_corrected(T& p, T g, T& m, T& v, T* vmax, T inv_sqrt_bc2, T neg_step) const {
    if constexpr (kWeightDecay) {
      if constexpr (kDecoupled) {
        p = p * one_minus_lr_wd;
      } else {
        g = g + p * weight_decay;
      }
    }
    m = m + (g - m) * one_minus_beta1;  // lerp towards g
    v = v * beta2 + g * g * one_minus_beta2;
    T second = v;
    if constexpr (kAmsgrad) {
      second = MaximumF{}(*vmax, v);  // NaN-propagating, as the per-tensor maximum
      *vmax = second;
    }
    const T denom = std::sqrt(second) * inv_sqrt_bc2 + eps;
    p = p + m / denom * neg_step;
  }
};

template <typename T>
struct RmspropStepF {
  T weight_decay, alpha, one_minus_alpha, eps, momentum, neg_lr;
  bool has_weight_decay, centered, has_momentum;  // the flags of step(), in order

  static RmspropStepF make(const OptimizerStepArgs& a) {
    return {static_cast<T>(a.weight_decay),
            static_cast<T>(a.alpha),
            static_cast<T>(1.0 - a.alpha),
            static_cast<T>(a.eps),
            static_cast<T>(a.momentum),
            static_cast<T>(-a.lr),
            a.weight_decay != 0.0,
            a.centered,
            a.momentum > 0.0};
  }

  // The kernels' lists: params, grads, square averages, then grad averages (centered) and
  // momentum buffers (momentum > 0).
  int num_lists() const { return 3 + (centered ? 1 : 0) + (has_momentum ? 1 : 0); }
  int momentum_list() const { return centered ? 4 : 3; }

  // grad_avg is not touched unless centered, buf without momentum. The per-tensor ops, in
  // order: sq.mul_(alpha).addcmul_(g, g, 1 - alpha); grad_avg.lerp_(g, 1 - alpha);
  // avg = sqrt(sq - grad_avg^2) + eps; buf.mul_(momentum).addcdiv_(g, avg); p.add_(buf, -lr).
  template <bool kWeightDecay, bool kCentered, bool kMomentum>
  ANVIL_INLINE void step(T& p, T g, T& sq, T* grad_avg, T* buf) const {
    if constexpr (kWeightDecay) g = g + p * weight_decay;
    sq = sq * alpha + g * g * one_minus_alpha;
    T avg;
    if constexpr (kCentered) {
      const T ga = *grad_avg + (g - *grad_avg) * one_minus_alpha;
      *grad_avg = ga;
      avg = std::sqrt(sq - ga * ga) + eps;
    } else {
      avg = std::sqrt(sq) + eps;
    }
    if constexpr (kMomentum) {
      const T b = *buf * momentum + g / avg;
      *buf = b;
      p = p + b * neg_lr;
    } else {
      p = p + g / avg * neg_lr;
    }
  }
};

// Adam's step count where the parameters are (OptimizerStepArgs::device_step_counts): a
// float64 [3] per parameter holding t, then -lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t) as
// of t. advance() runs once per parameter per step, before the elements are updated, and only
// when the step is taken; the factors are the same float64 expressions the host computes for
// a step count it knows, so on the CPU both give the same bits (a GPU's pow may differ from
// the host's by an ulp).
struct AdamStepCount {
  double lr, beta1, beta2;

  static AdamStepCount make(const OptimizerStepArgs& a) { return {a.lr, a.beta1, a.beta2}; }

  ANVIL_INLINE void advance(double* s) const {
    s[0] = s[0] + 1.0;
    s[1] = -lr / (1.0 - std::pow(beta1, s[0]));
    s[2] = 1.0 / std::sqrt(1.0 - std::pow(beta2, s[0]));
  }
};

// RMSprop's step count where the parameters are: the same float64 [3], of which only t is
// used (the update does not depend on it; checkpoints record it, as PyTorch's state["step"]).
struct PlainStepCount {
  ANVIL_INLINE void advance(double* s) const { s[0] = s[0] + 1.0; }
};

}  // namespace anvil::fn
