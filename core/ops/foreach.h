// Fused optimizer steps: one kernel call updates every parameter of a list, with its state, in
// place (the SgdStep / AdamStep / RmspropStep rows; per-element math in
// core/ops/optimizer_step.h). On a GPU this is one launch per ~hundred tensors instead of
// several per tensor; on the CPU it reads and writes each element once instead of building a
// temporary per arithmetic op.
//
// Requirements (checked, with a message naming the list and position): the lists are as long
// as `params`; every tensor is defined, dense and contiguous, on params[0]'s device, with its
// parameter's shape and dtype; the dtype is float32 or float64 (fused_step_supported says
// whether a parameter qualifies, so an optimizer can fall back to its per-tensor path).
// Runs without autograd; bumps the version of every tensor it writes.
#pragma once

#include <vector>

#include "core/ops/attrs.h"
#include "core/tensor/tensor.h"

namespace anvil {

// Whether `param` with gradient `grad` can be updated by a fused step.
bool fused_step_supported(const Tensor& param, const Tensor& grad);

// SGD: momentum_buffers is empty when attrs.momentum == 0. With `found_inf` (float32 [1] on the
// parameters' device) the step is skipped on the device when it is non-zero.
void fused_sgd_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                const std::vector<Tensor>& momentum_buffers, const OptimizerStepArgs& attrs,
                const Tensor& found_inf = Tensor());

// Adam / AdamW: max_exp_avg_sqs is empty unless attrs.amsgrad. The bias corrections are
// attrs' (one step count for every parameter).
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const OptimizerStepArgs& attrs);

// Adam / AdamW with each parameter's step count on the parameters' device: `step_counts` holds
// one float64 [3] per parameter (fn::AdamStepCount; {t, 0, 0} for a parameter at step t), which
// the kernel advances and takes the bias corrections from. With `found_inf` (float32 [1]) the
// whole step, counts included, is skipped on the device when it is non-zero: the host never
// needs to know a step count or the flag (GradScaler with no host read per step).
void fused_adam_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                 const std::vector<Tensor>& exp_avgs, const std::vector<Tensor>& exp_avg_sqs,
                 const std::vector<Tensor>& max_exp_avg_sqs, const std::vector<Tensor>& step_counts,
                 const OptimizerStepArgs& attrs, const Tensor& found_inf = Tensor());

// RMSprop with each parameter's step count on the parameters' device (float64 [3] as Adam's, of
// which only t is used and advanced): grad_avgs is empty unless attrs.centered,
// momentum_buffers unless attrs.momentum > 0. With `found_inf` the whole step, counts included,
// is skipped on the device when it is non-zero.
void fused_rmsprop_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
                    const std::vector<Tensor>& square_avgs, const std::vector<Tensor>& grad_avgs,
                    const std::vector<Tensor>& momentum_buffers, const std::vector<Tensor>& step_counts,
                    const OptimizerStepArgs& attrs, const Tensor& found_inf = Tensor());

}  // namespace anvil
