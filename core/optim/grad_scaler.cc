#include "core/optim/grad_scaler.h"

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::optim {

GradScaler::GradScaler(GradScalerOptions o) : options_(o) {
  ANVIL_CHECK(o.init_scale > 0 && o.growth_factor > 1.0 && o.backoff_factor > 0 && o.backoff_factor < 1.0 &&
                  o.growth_interval >= 1,
              "GradScaler: expected init_scale > 0, growth_factor > 1, 0 < backoff_factor < 1, growth_interval >= 1");
  scale_ = full({1}, o.init_scale, TensorOptions(kFloat32));
  growth_tracker_ = zeros({1}, TensorOptions(kFloat64));
  skipped_ = zeros({1}, TensorOptions(kFloat64));
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  if (scale_.device() != loss.device()) {
    scale_ = scale_.to(loss.device());
    growth_tracker_ = growth_tracker_.to(loss.device());
    skipped_ = skipped_.to(loss.device());
  }
  return loss * scale_.to(loss.dtype()).reshape({});
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  PerOptimizer& st = per_optimizer_[&optimizer];
  ANVIL_CHECK(st.stage != Stage::kUnscaled,
              "unscale_() has already been called on this optimizer since the last update().");
  ANVIL_CHECK(st.stage != Stage::kStepped, "unscale_() is being called after step().");
  NoGradGuard no_grad;
  const Tensor inv = reciprocal(scale_.to(kFloat64)).to(kFloat32);  // exact for powers of two
  Tensor found;
  for (ParamGroup& g : optimizer.param_groups()) {
    for (Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      // One pass: the non-finite check on the scaled gradient, then the division in place.
      const Tensor bad = logical_not(isfinite(grad)).any().to(kFloat32).reshape({1});
      found = found.defined() ? maximum(found, bad) : bad;
      grad.mul_(inv.to(grad.device()).to(grad.dtype()).reshape({}));
    }
  }
  ANVIL_CHECK(found.defined(), "No inf checks were recorded for this optimizer.");
  st.found_inf = found;
  st.stage = Stage::kUnscaled;
}

void GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return;
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  ANVIL_CHECK(st.stage != Stage::kStepped, "step() has already been called since the last update().");
  if (st.stage == Stage::kReady) unscale_(optimizer);
  optimizer.step_unless(st.found_inf);
  NoGradGuard no_grad;
  skipped_.add_(st.found_inf.to(skipped_.device()).to(kFloat64));
  st.stage = Stage::kStepped;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  ANVIL_CHECK(!per_optimizer_.empty(), "No inf checks were recorded prior to update.");
  NoGradGuard no_grad;
  Tensor found;
  for (auto& [opt, st] : per_optimizer_) {
    ANVIL_CHECK(st.found_inf.defined(), "No inf checks were recorded prior to update.");
    const Tensor f = st.found_inf.to(scale_.device()).to(kFloat64);
    found = found.defined() ? maximum(found, f) : f;
  }
  // PyTorch's _amp_update_scale_, as tensor ops (no host read): a non-finite step multiplies
  // the scale by backoff_factor and restarts the count; growth_interval finite steps in a row
  // multiply it by growth_factor. The factor is applied in float64 and rounded to float32
  // once, as PyTorch's kernel does.
  const Tensor finite = 1.0 - found;
  const Tensor counted = (growth_tracker_ + 1.0) * finite;
  // counted is a whole number: 1 once it reaches growth_interval, else 0.
  const Tensor grow = clamp(counted - static_cast<double>(options_.growth_interval - 1), 0.0, 1.0);
  const Tensor factor = found * options_.backoff_factor + finite * (grow * (options_.growth_factor - 1.0) + 1.0);
  scale_.copy_((scale_.to(kFloat64) * factor).to(kFloat32));
  growth_tracker_.copy_(counted * (1.0 - grow));
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? scale_.to(kFloat64).item<double>() : 1.0; }
int64_t GradScaler::growth_tracker() const { return static_cast<int64_t>(growth_tracker_.item<double>()); }
int64_t GradScaler::skipped_steps() const { return static_cast<int64_t>(skipped_.item<double>()); }

std::map<std::string, double> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker())}};
}

void GradScaler::load_state_dict(const std::map<std::string, double>& state) {
  ANVIL_CHECK(options_.enabled || state.empty(), "GradScaler: a state for a disabled scaler must be empty");
  if (state.empty()) return;
  for (const char* key : {"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}) {
    ANVIL_CHECK(state.count(key), "GradScaler.load_state_dict: missing key '", key, "'");
  }
  scale_ = full({1}, state.at("scale"), TensorOptions(kFloat32).with_device(scale_.device()));
  options_.growth_factor = state.at("growth_factor");
  options_.backoff_factor = state.at("backoff_factor");
  options_.growth_interval = static_cast<int64_t>(state.at("growth_interval"));
  growth_tracker_ = full({1}, state.at("_growth_tracker"), TensorOptions(kFloat64).with_device(scale_.device()));
}

}  // namespace anvil::optim
