// Learning-rate schedules, after torch.optim.lr_scheduler. A scheduler owns nothing but a
// step counter: the rate at step t is a closed-form function of t and each group's base
// rate, so a schedule restored from a checkpoint (set_step) continues exactly.
//
// As in PyTorch, constructing a scheduler sets the step-0 rate, and step() is called once per
// epoch (or per optimizer step for the per-step schedules), after optimizer.step().
// Thread-safety: none; a scheduler belongs to its optimizer's training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/optim/optimizer.h"

namespace anvil::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler();
  // Advances one step and sets every group's rate.
  void step();
  int64_t last_step() const { return step_; }
  // Jumps to step t (resuming from a checkpoint) and sets the rates for it.
  void set_step(int64_t t);
  std::vector<double> get_last_lr() const;
  // Multiplies every group's base rate by `factor` and applies the current step's rates: the
  // whole schedule scaled (what a manual "halve the learning rate" means under a schedule).
  void scale_base_lrs(double factor);
  virtual std::string name() const = 0;

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Call at the end of a subclass constructor: records base rates and applies step 0.
  void Start();
  // The rate at step t for a group whose base rate is `base`.
  virtual double lr_at(int64_t t, double base) const = 0;
  // After the rates of step t are set: other options a schedule drives (1cycle's momentum).
  virtual void on_apply(std::vector<ParamGroup>& /*groups*/, int64_t /*t*/) {}

 private:
  void Apply();
  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  int64_t step_ = 0;
};

// base * gamma^floor(t / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  std::string name() const override { return "StepLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// base * gamma^(number of milestones <= t)
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma = 0.1);
  std::string name() const override { return "MultiStepLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// SGDR (Loshchilov & Hutter): cosine from base down to eta_min over T_0 steps, restarting at
// base; each period T_mult times the one before. PyTorch's step-by-step T_cur / T_i, in closed
// form.
class CosineAnnealingWarmRestarts : public LRScheduler {
 public:
  CosineAnnealingWarmRestarts(Optimizer& opt, int64_t t_0, int64_t t_mult = 1, double eta_min = 0.0);
  std::string name() const override { return "CosineAnnealingWarmRestarts"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  int64_t t_0_, t_mult_;
  double eta_min_;
};

// base * lambda(t), with a C++ callable (one for every group).
class LambdaLR : public LRScheduler {
 public:
  LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda);
  std::string name() const override { return "LambdaLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  std::function<double(int64_t)> lambda_;
};

// base * gamma^t
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& opt, double gamma);
  std::string name() const override { return "ExponentialLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  double gamma_;
};

// base * (start_factor + (end_factor - start_factor) * min(t, total_iters) / total_iters)
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& opt, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);
  std::string name() const override { return "LinearLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  double start_, end_;
  int64_t total_;
};

// base * factor until total_iters, then base
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& opt, double factor = 1.0 / 3.0, int64_t total_iters = 5);
  std::string name() const override { return "ConstantLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  double factor_;
  int64_t total_;
};

// base * (1 - min(t, total_iters) / total_iters)^power
class PolynomialLR : public LRScheduler {
 public:
  PolynomialLR(Optimizer& opt, int64_t total_iters = 5, double power = 1.0);
  std::string name() const override { return "PolynomialLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  int64_t total_;
  double power_;
};

// eta_min + (base - eta_min) * (1 + cos(pi * t / T_max)) / 2, the closed form (SGDR without
// restarts); after T_max it continues the cosine, as PyTorch's closed form does.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0.0);
  std::string name() const override { return "CosineAnnealingLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear warm-up from base / warmup_steps to base over warmup_steps, then cosine decay to
// min_lr at total_steps, then min_lr. Per optimizer step.
class WarmupCosineLR : public LRScheduler {
 public:
  WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_lr = 0.0);
  std::string name() const override { return "WarmupCosineLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;

 private:
  int64_t warmup_, total_;
  double min_lr_;
};

// The 1cycle policy (Smith & Topin) with cosine annealing, two phases, per optimizer step, as
// PyTorch's OneCycleLR: max_lr / div_factor up to max_lr at step pct_start * total - 1 (not
// rounded: with 30 steps and 0.25 the peak falls between steps 6 and 7), then down to
// max_lr / div_factor / final_div_factor at step total - 1. With cycle_momentum the momentum
// (SGD's, RMSprop's) or beta1 (Adam's) runs the other way, max_momentum down to base_momentum
// at the peak and back; the optimizer's own value is overwritten from the first step, as in
// PyTorch.
struct OneCycleOptions {
  double pct_start = 0.3;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, const OneCycleOptions& options = {});
  OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start, double div_factor = 25.0,
             double final_div_factor = 1e4);
  std::string name() const override { return "OneCycleLR"; }

 protected:
  double lr_at(int64_t t, double base) const override;
  void on_apply(std::vector<ParamGroup>& groups, int64_t t) override;

 private:
  double Phase(int64_t t, double start, double peak, double end) const;
  double max_lr_, initial_, final_;
  int64_t total_;
  double peak_step_;
  OneCycleOptions options_;
  std::string momentum_key_;  // "momentum" or "beta1"; empty without cycle_momentum
};

// Multiplies the rate by `factor` when a metric has not improved for `patience` checks.
// "Improved" is relative (better than best * (1 -/+ threshold)) or, with ThresholdMode::kAbs,
// absolute (best -/+ threshold). A rate never goes below its group's floor (`min_lrs`, one per
// group, else `min_lr`), and a reduction smaller than `eps` is not made. Not a closed-form
// schedule: its state is (best, bad_checks, cooldown_left), all exposed for checkpoints.
class ReduceLROnPlateau {
 public:
  enum class Mode { kMin, kMax };
  enum class ThresholdMode { kRel, kAbs };
  ReduceLROnPlateau(Optimizer& opt, Mode mode = Mode::kMin, double factor = 0.1, int64_t patience = 10,
                    double threshold = 1e-4, int64_t cooldown = 0, double min_lr = 0.0,
                    ThresholdMode threshold_mode = ThresholdMode::kRel, double eps = 1e-8,
                    std::vector<double> min_lrs = {});
  // Feeds one metric value; returns true when it lowered the rate.
  bool step(double metric);
  double best() const { return best_; }
  int64_t bad_checks() const { return bad_; }
  int64_t cooldown_left() const { return cooldown_left_; }
  void set_state(double best, int64_t bad_checks, int64_t cooldown_left);

 private:
  Optimizer& optimizer_;
  Mode mode_;
  ThresholdMode threshold_mode_;
  double factor_, threshold_, min_lr_, eps_;
  std::vector<double> min_lrs_;
  int64_t patience_, cooldown_;
  double best_;
  int64_t bad_ = 0, cooldown_left_ = 0;
};

}  // namespace anvil::optim
