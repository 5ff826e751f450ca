// Learning-rate schedules: see scheduler.h. Formulas are PyTorch's closed forms.
#include "core/optim/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/util/error.h"

namespace anvil::optim {

LRScheduler::~LRScheduler() = default;

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}

void LRScheduler::Start() {
  for (const auto& g : optimizer_.param_groups()) base_lrs_.push_back(g.options.at("lr"));
  Apply();
}

void LRScheduler::Apply() {
  auto& groups = optimizer_.param_groups();
  for (size_t i = 0; i < groups.size(); ++i) groups[i].options["lr"] = lr_at(step_, base_lrs_.at(i));
  on_apply(groups, step_);
}

void LRScheduler::scale_base_lrs(double factor) {
  ANVIL_CHECK(std::isfinite(factor) && factor > 0, name(), ": expected a positive finite factor, got ", factor);
  for (double& b : base_lrs_) b *= factor;
  Apply();
}

void LRScheduler::step() {
  ++step_;
  Apply();
}

void LRScheduler::set_step(int64_t t) {
  ANVIL_CHECK(t >= 0, name(), ": expected a non-negative step, got ", t);
  step_ = t;
  Apply();
}

std::vector<double> LRScheduler::get_last_lr() const {
  std::vector<double> out;
  for (const auto& g : optimizer_.param_groups()) out.push_back(g.options.at("lr"));
  return out;
}

StepLR::StepLR(Optimizer& opt, int64_t step_size, double gamma)
    : LRScheduler(opt), step_size_(step_size), gamma_(gamma) {
  ANVIL_CHECK(step_size > 0, "StepLR: expected step_size > 0, got ", step_size);
  Start();
}

double StepLR::lr_at(int64_t t, double base) const {
  return base * std::pow(gamma_, static_cast<double>(t / step_size_));
}

MultiStepLR::MultiStepLR(Optimizer& opt, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(opt), milestones_(std::move(milestones)), gamma_(gamma) {
  // As PyTorch's Counter of milestones: any order, and a repeated one multiplies by gamma as
  // often as it is listed (upper_bound on the sorted list counts the repeats).
  std::sort(milestones_.begin(), milestones_.end());
  Start();
}

double MultiStepLR::lr_at(int64_t t, double base) const {
  const auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin();
  return base * std::pow(gamma_, static_cast<double>(passed));
}

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& opt, int64_t t_0, int64_t t_mult, double eta_min)
    : LRScheduler(opt), t_0_(t_0), t_mult_(t_mult), eta_min_(eta_min) {
  ANVIL_CHECK(t_0 > 0, "CosineAnnealingWarmRestarts: expected a positive T_0, got ", t_0);
  ANVIL_CHECK(t_mult >= 1, "CosineAnnealingWarmRestarts: expected T_mult >= 1, got ", t_mult);
  Start();
}

double CosineAnnealingWarmRestarts::lr_at(int64_t t, double base) const {
  // Where PyTorch's counters are after t steps: T_cur within the period T_i.
  int64_t t_cur = t, t_i = t_0_;
  while (t_cur >= t_i) {
    t_cur -= t_i;
    t_i *= t_mult_;
  }
  constexpr double kPi = 3.14159265358979323846;
  return eta_min_ +
         (base - eta_min_) * (1.0 + std::cos(kPi * static_cast<double>(t_cur) / static_cast<double>(t_i))) / 2.0;
}

LambdaLR::LambdaLR(Optimizer& opt, std::function<double(int64_t)> lambda)
    : LRScheduler(opt), lambda_(std::move(lambda)) {
  ANVIL_CHECK(static_cast<bool>(lambda_), "LambdaLR: expected a callable, got none");
  Start();
}

double LambdaLR::lr_at(int64_t t, double base) const { return base * lambda_(t); }

ExponentialLR::ExponentialLR(Optimizer& opt, double gamma) : LRScheduler(opt), gamma_(gamma) { Start(); }

double ExponentialLR::lr_at(int64_t t, double base) const { return base * std::pow(gamma_, static_cast<double>(t)); }

// PyTorch's argument checks for LinearLR, ConstantLR and PolynomialLR.
LinearLR::LinearLR(Optimizer& opt, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(opt), start_(start_factor), end_(end_factor), total_(total_iters) {
  ANVIL_CHECK(start_factor > 0 && start_factor <= 1,
              "Starting multiplicative factor expected to be greater than 0 and less or equal to 1, got ",
              start_factor);
  ANVIL_CHECK(end_factor >= 0 && end_factor <= 1, "Ending multiplicative factor expected to be between 0 and 1, got ",
              end_factor);
  ANVIL_CHECK(total_iters > 0, "LinearLR: expected total_iters > 0, got ", total_iters);
  Start();
}
double LinearLR::lr_at(int64_t t, double base) const {
  return base * (start_ + (end_ - start_) * static_cast<double>(std::min(t, total_)) / static_cast<double>(total_));
}

ConstantLR::ConstantLR(Optimizer& opt, double factor, int64_t total_iters)
    : LRScheduler(opt), factor_(factor), total_(total_iters) {
  ANVIL_CHECK(factor >= 0 && factor <= 1, "Constant multiplicative factor expected to be between 0 and 1, got ",
              factor);
  Start();
}
double ConstantLR::lr_at(int64_t t, double base) const { return base * (t >= total_ ? 1.0 : factor_); }

PolynomialLR::PolynomialLR(Optimizer& opt, int64_t total_iters, double power)
    : LRScheduler(opt), total_(total_iters), power_(power) {
  ANVIL_CHECK(total_iters > 0, "PolynomialLR: expected total_iters > 0, got ", total_iters);
  Start();
}
double PolynomialLR::lr_at(int64_t t, double base) const {
  const double left = 1.0 - static_cast<double>(std::min(t, total_)) / static_cast<double>(total_);
  return base * std::pow(left, power_);
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min)
    : LRScheduler(opt), t_max_(t_max), eta_min_(eta_min) {
  ANVIL_CHECK(t_max > 0, "CosineAnnealingLR: expected T_max > 0, got ", t_max);
  Start();
}

double CosineAnnealingLR::lr_at(int64_t t, double base) const {
  return eta_min_ + (base - eta_min_) *
                        (1.0 + std::cos(std::numbers::pi * static_cast<double>(t) / static_cast<double>(t_max_))) / 2.0;
}

WarmupCosineLR::WarmupCosineLR(Optimizer& opt, int64_t warmup_steps, int64_t total_steps, double min_lr)
    : LRScheduler(opt), warmup_(warmup_steps), total_(total_steps), min_lr_(min_lr) {
  ANVIL_CHECK(warmup_steps >= 0 && total_steps > warmup_steps,
              "WarmupCosineLR: expected 0 <= warmup_steps < "
              "total_steps, got ",
              warmup_steps, " and ", total_steps);
  Start();
}

double WarmupCosineLR::lr_at(int64_t t, double base) const {
  if (t < warmup_) return base * static_cast<double>(t + 1) / static_cast<double>(warmup_);
  const double progress = std::min(1.0, static_cast<double>(t - warmup_) / static_cast<double>(total_ - warmup_));
  return min_lr_ + (base - min_lr_) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, const OneCycleOptions& o)
    : LRScheduler(opt),
      max_lr_(max_lr),
      initial_(max_lr / o.div_factor),
      final_(max_lr / o.div_factor / o.final_div_factor),
      total_(total_steps),
      peak_step_(o.pct_start * static_cast<double>(total_steps) - 1.0),
      options_(o) {
  ANVIL_CHECK(total_steps > 1 && o.pct_start > 0.0 && o.pct_start < 1.0 && peak_step_ > 0.0 &&
                  peak_step_ < static_cast<double>(total_steps - 1),
              "OneCycleLR: expected total_steps > 1 and 0 < pct_start < 1 leaving both phases non-empty, got "
              "total_steps ",
              total_steps, " and pct_start ", o.pct_start);
  if (o.cycle_momentum) {
    const auto& g = opt.param_groups().at(0).options;
    momentum_key_ = g.count("momentum") ? "momentum" : g.count("beta1") ? "beta1" : "";
    ANVIL_CHECK(!momentum_key_.empty(), "OneCycleLR: optimizer ", opt.name(),
                " has neither momentum nor beta1; pass cycle_momentum = false");
  }
  Start();
}

OneCycleLR::OneCycleLR(Optimizer& opt, double max_lr, int64_t total_steps, double pct_start, double div_factor,
                       double final_div_factor)
    : OneCycleLR(
          opt, max_lr, total_steps,
          OneCycleOptions{.pct_start = pct_start, .div_factor = div_factor, .final_div_factor = final_div_factor}) {}

// start -> peak over [0, peak_step], peak -> end over [peak_step, total - 1], cosine.
double OneCycleLR::Phase(int64_t t, double start, double peak, double end) const {
  auto anneal = [](double from, double to, double pct) {
    return to + (from - to) / 2.0 * (std::cos(std::numbers::pi * pct) + 1.0);
  };
  const double tt = static_cast<double>(std::min(t, total_ - 1));
  if (tt <= peak_step_) return anneal(start, peak, tt / peak_step_);
  return anneal(peak, end, (tt - peak_step_) / (static_cast<double>(total_ - 1) - peak_step_));
}

double OneCycleLR::lr_at(int64_t t, double) const { return Phase(t, initial_, max_lr_, final_); }

void OneCycleLR::on_apply(std::vector<ParamGroup>& groups, int64_t t) {
  if (momentum_key_.empty()) return;
  const double m = Phase(t, options_.max_momentum, options_.base_momentum, options_.max_momentum);
  for (auto& g : groups) g.options[momentum_key_] = m;
}

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& opt, Mode mode, double factor, int64_t patience, double threshold,
                                     int64_t cooldown, double min_lr, ThresholdMode threshold_mode, double eps,
                                     std::vector<double> min_lrs)
    : optimizer_(opt),
      mode_(mode),
      threshold_mode_(threshold_mode),
      factor_(factor),
      threshold_(threshold),
      min_lr_(min_lr),
      eps_(eps),
      min_lrs_(std::move(min_lrs)),
      patience_(patience),
      cooldown_(cooldown),
      best_(mode == Mode::kMin ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity()) {
  ANVIL_CHECK(factor > 0.0 && factor < 1.0, "ReduceLROnPlateau: expected 0 < factor < 1, got ", factor);
  ANVIL_CHECK(patience >= 0 && cooldown >= 0, "ReduceLROnPlateau: expected non-negative patience and cooldown");
  ANVIL_CHECK(min_lrs_.empty() || min_lrs_.size() == opt.param_groups().size(), "ReduceLROnPlateau: expected ",
              opt.param_groups().size(), " min_lr values (one per parameter group), got ", min_lrs_.size());
}

bool ReduceLROnPlateau::step(double metric) {
  const bool rel = threshold_mode_ == ThresholdMode::kRel;
  const bool better = mode_ == Mode::kMin ? metric < (rel ? best_ * (1.0 - threshold_) : best_ - threshold_)
                                          : metric > (rel ? best_ * (1.0 + threshold_) : best_ + threshold_);
  if (better) {
    best_ = metric;
    bad_ = 0;
  } else {
    ++bad_;
  }
  if (cooldown_left_ > 0) {
    --cooldown_left_;
    bad_ = 0;  // checks during cooldown do not count
  }
  if (bad_ > patience_) {
    bool lowered = false;
    auto& groups = optimizer_.param_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      const double old_lr = groups[i].options["lr"];
      const double floor = min_lrs_.empty() ? min_lr_ : min_lrs_[i];
      const double new_lr = std::max(old_lr * factor_, floor);
      // A change smaller than eps is not made (PyTorch's _reduce_lr): a rate at its floor, or
      // one too small to matter, stays as it is.
      if (old_lr - new_lr > eps_) {
        groups[i].options["lr"] = new_lr;
        lowered = true;
      }
    }
    cooldown_left_ = cooldown_;
    bad_ = 0;
    return lowered;
  }
  return false;
}

void ReduceLROnPlateau::set_state(double best, int64_t bad_checks, int64_t cooldown_left) {
  best_ = best;
  bad_ = bad_checks;
  cooldown_left_ = cooldown_left;
}

}  // namespace anvil::optim
