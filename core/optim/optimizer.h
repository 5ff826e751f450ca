// Optimizers, after torch.optim: parameter groups with their own hyper-parameters, per-parameter
// state (momentum buffers, Adam moments), zero_grad and a state_dict for checkpoints.
//
// Hyper-parameters live in a name -> value map per group ("lr", "momentum", "weight_decay",
// ...), like PyTorch's param_groups, so schedulers and checkpoints treat every optimizer alike.
// Each optimizer declares its names and defaults; a group that sets an unknown name is an
// error (a typo such as "weight_dacay" would otherwise be ignored silently).
//
// step() runs under NoGradGuard and updates parameters in place; parameters without a
// gradient are skipped. Thread-safety: none (one training thread).
//
// Fused steps: SGD, Adam, AdamW and RMSprop take option "fused" (1 by default, like PyTorch's
// fused=True where it applies). Parameters that are dense, contiguous float32/float64 tensors
// with a gradient of the same kind are updated by one multi-tensor kernel per device and dtype
// (core/ops/foreach.h); others, and every parameter with fused=0, go through the per-tensor
// ops. Both paths compute the same update to rounding.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::optim {

using Options = std::map<std::string, double>;

struct ParamGroup {
  std::vector<Tensor> params;
  Options options;  // missing names take the optimizer's defaults
};

// Per-parameter state: the step count and named buffers ("momentum_buffer", "exp_avg", ...).
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> buffers;
  // Adam's and RMSprop's fused paths keep the count where the parameter is (float64 [3],
  // fn::AdamStepCount), so that a step skipped on the device needs no host read. When defined
  // it supersedes `step`; state_dict() reads it (one read per checkpoint, not per step).
  Tensor device_step;
};

// The optimizer's state for checkpoints: each group's options, and each parameter's state by
// its position across groups (group 0's parameters first), as PyTorch numbers them.
struct OptimizerState {
  std::vector<Options> groups;
  std::map<int64_t, ParamState> params;
};

class Optimizer {
 public:
  virtual ~Optimizer();
  void step() { Step(nullptr); }
  // A step that does nothing when `found_inf` (float32 [1] on the parameters' device,
  // GradScaler's flag) is non-zero. SGD, Adam, AdamW and RMSprop decide on the device, inside
  // their fused kernels, so a scaled training loop makes no host read per step (docs/amp.md);
  // their per-tensor paths read the flag once (SkipFlag).
  void step_unless(const Tensor& found_inf) { Step(&found_inf); }
  virtual std::string name() const = 0;
  // Clears every parameter's gradient: to undefined (default) or to zeros.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  void add_param_group(ParamGroup group);
  // The learning rate of group 0, and setting it on every group (what schedulers use).
  double lr() const;
  void set_lr(double lr);

  OptimizerState state_dict() const;
  // Requires the same groups and parameter counts; buffers must match the parameters' shapes.
  // Options the saved groups lack (a state saved before the option existed) take the defaults.
  void load_state_dict(const OptimizerState& state);

 protected:
  Optimizer(std::vector<ParamGroup> groups, Options defaults);
  // One step of the optimizer's update; `found_inf`: null, or GradScaler's flag (step_unless).
  virtual void Step(const Tensor* found_inf) = 0;
  ParamState& state(const Tensor& param);
  // The state buffer `name` of a parameter, created as zeros shaped like `like` if missing.
  static Tensor& buffer(ParamState& s, const char* name, const Tensor& like);
  // The step count on the host, folding in (one read) a count kept on the device.
  static int64_t& host_step(ParamState& s);

  // GradScaler's flag as one step sees it (step_unless): the fused kernels decide on the
  // device; a per-tensor path asks the host, which reads the flag once per step, and from then
  // on the fused kernels need no flag (the host has decided for them).
  class SkipFlag {
   public:
    explicit SkipFlag(const Tensor* found_inf) : flag_(found_inf) {}
    // Whether this step is skipped (false without a flag); reads the flag the first time.
    bool read_on_host();
    // Whether the host has read the flag and it says skip.
    bool skipped_on_host() const { return host_.value_or(false); }
    // What a fused kernel gets: the flag, or nothing when there is none or the host has decided.
    Tensor device_gate() const { return flag_ != nullptr && !host_ ? *flag_ : Tensor(); }

   private:
    const Tensor* flag_;
    std::optional<bool> host_;
  };
  // `defaults` with the caller's `overrides` applied; an unknown name is an error naming `who`.
  static Options WithOverrides(Options defaults, const Options& overrides, const char* who);

 private:
  std::vector<ParamGroup> groups_;
  Options defaults_;
  std::map<const TensorImpl*, ParamState> state_;
};

// SGD with momentum, dampening, Nesterov momentum and L2 weight decay (PyTorch's update).
// Options: lr (required), momentum 0, dampening 0, weight_decay 0, nesterov 0 (1 = on), fused 1.
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, Options options);
  SGD(std::vector<ParamGroup> groups, Options defaults);
  std::string name() const override { return "SGD"; }

 private:
  void Step(const Tensor* found_inf) override;
};

// Adam (Kingma & Ba) with bias correction; weight_decay adds wd * p to the gradient (L2).
// Options: lr 1e-3, beta1 0.9, beta2 0.999, eps 1e-8, weight_decay 0, amsgrad 0, maximize 0
// (1: ascend the objective, the update taking the negated gradient), fused 1.
// The fused path counts steps on the parameters' device (ParamState::device_step), as
// PyTorch's fused Adam does, so step_unless decides inside the kernel and never reads the flag.
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, Options options = {});
  Adam(std::vector<ParamGroup> groups, Options defaults);
  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }

 protected:
  Adam(std::vector<ParamGroup> groups, Options defaults, bool decoupled);

 private:
  void Step(const Tensor* found_inf) override;
  bool decoupled_ = false;
};

// AdamW (Loshchilov & Hutter): weight decay decoupled from the gradient, p *= 1 - lr * wd.
// Options as Adam, with weight_decay 1e-2 by default.
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, Options options = {});
  AdamW(std::vector<ParamGroup> groups, Options defaults);
};

// RMSprop. Options: lr 1e-2, alpha 0.99, eps 1e-8, weight_decay 0, momentum 0, centered 0,
// fused 1. The fused path counts steps on the parameters' device, as Adam's does, so
// step_unless decides inside the kernel and never reads the flag.
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<Tensor> params, Options options = {});
  RMSprop(std::vector<ParamGroup> groups, Options defaults);
  std::string name() const override { return "RMSprop"; }

 private:
  void Step(const Tensor* found_inf) override;
};

// Scales all gradients together so that their global norm is at most max_norm; returns the
// norm before clipping (the grad-norm metric). A non-finite norm is an error when
// error_if_nonfinite, else the gradients are left as they are.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);
// The global norm of the gradients as a 0-dim float64 tensor, computed without reading any
// value back to the host (on a GPU the training loop need not wait for it).
Tensor grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);
// clip_grad_norm_ without a host read: scales by min(1, max_norm / (norm + 1e-6)) as a tensor
// and returns the norm tensor. A non-finite norm propagates into the gradients; the trainer
// detects it from the loss.
Tensor clip_grad_norm_deferred_(const std::vector<Tensor>& params, double max_norm, double norm_type = 2.0);
// Clamps every gradient element to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

}  // namespace anvil::optim
