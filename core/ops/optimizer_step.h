// The per-element updates of the fused optimizer steps (the SgdStep / AdamStep rows), shared by
// the CPU and CUDA kernels (__host__ __device__): what one element of a parameter and its state
// become in one step. The arithmetic follows the optimizers' per-tensor code (core/optim), op
// by op, so the fused and unfused paths agree to rounding.
//
// T is the op-math type (float for float32 parameters, double for float64); the scalars are
// converted from the step's float64 attributes once per launch, as the per-tensor ops convert
// a Scalar to the tensor's dtype.
#pragma once

#include <cmath>

#include "core/ops/attrs.h"
#include "core/util/macros.h"

namespace anvil::fn {

template <typename T>
struct SgdStepF {
  T lr, weight_decay, momentum, one_minus_dampening;
  bool nesterov, first_step, has_weight_decay, has_momentum;

  static SgdStepF make(const OptimizerStepAttrs& a) {
    return {static_cast<T>(a.lr), static_cast<T>(a.weight_decay), static_cast<T>(a.momentum),
            static_cast<T>(1.0 - a.dampening), a.nesterov, a.first_step, a.weight_decay != 0.0, a.momentum != 0.0};
  }

  // buf is ignored (may be null) without momentum.
  ANVIL_INLINE void operator()(T& p, T g, T* buf) const {
    if (has_weight_decay) g = g + p * weight_decay;
    if (has_momentum) {
      const T b = first_step ? g : *buf * momentum + g * one_minus_dampening;
      *buf = b;
      g = nesterov ? g + b * momentum : b;
    }
    p = p + g * -lr;
  }
};

template <typename T>
struct AdamStepF {
  T one_minus_lr_wd;      // AdamW: the decay factor
  T weight_decay;         // Adam: L2 added to the gradient
  T one_minus_beta1, beta2, one_minus_beta2;
  T inv_sqrt_bias_correction2, eps, neg_step_size;
  bool decoupled, amsgrad, has_weight_decay;

  static AdamStepF make(const OptimizerStepAttrs& a) {
    return {static_cast<T>(1.0 - a.lr * a.weight_decay), static_cast<T>(a.weight_decay),
            static_cast<T>(1.0 - a.beta1), static_cast<T>(a.beta2), static_cast<T>(1.0 - a.beta2),
            static_cast<T>(1.0 / std::sqrt(a.bias_correction2)), static_cast<T>(a.eps),
            static_cast<T>(-a.lr / a.bias_correction1), a.decoupled, a.amsgrad, a.weight_decay != 0.0};
  }

  // vmax is ignored (may be null) without amsgrad.
  ANVIL_INLINE void operator()(T& p, T g, T& m, T& v, T* vmax) const {
    if (has_weight_decay) {
      if (decoupled) {
        p = p * one_minus_lr_wd;
      } else {
        g = g + p * weight_decay;
      }
    }
    m = m + (g - m) * one_minus_beta1;  // lerp towards g
    v = v * beta2 + g * g * one_minus_beta2;
    T second = v;
    if (amsgrad) {
      second = *vmax > v ? *vmax : v;
      *vmax = second;
    }
    const T denom = std::sqrt(second) * inv_sqrt_bias_correction2 + eps;
    p = p + m / denom * neg_step_size;
  }
};

}  // namespace anvil::fn
