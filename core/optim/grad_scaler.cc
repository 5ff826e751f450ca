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
}

Tensor GradScaler::scale(const Tensor& loss) {
  if (!options_.enabled) return loss;
  if (scale_.device() != loss.device()) scale_ = scale_.to(loss.device());
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

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  PerOptimizer& st = per_optimizer_[&optimizer];
  ANVIL_CHECK(st.stage != Stage::kStepped, "step() has already been called since the last update().");
  if (st.stage == Stage::kReady) unscale_(optimizer);
  const bool finite = st.found_inf.item<float>() == 0.0f;
  if (finite) {
    optimizer.step();
  } else {
    ++skipped_;
  }
  st.stage = Stage::kStepped;
  return finite;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  ANVIL_CHECK(!per_optimizer_.empty(), "No inf checks were recorded prior to update.");
  bool found = false;
  for (auto& [opt, st] : per_optimizer_) {
    ANVIL_CHECK(st.found_inf.defined(), "No inf checks were recorded prior to update.");
    found = found || st.found_inf.item<float>() != 0.0f;
  }
  // PyTorch's _amp_update_scale_.
  NoGradGuard no_grad;
  if (found) {
    scale_.mul_(options_.backoff_factor);
    growth_tracker_ = 0;
  } else if (++growth_tracker_ == options_.growth_interval) {
    scale_.mul_(options_.growth_factor);
    growth_tracker_ = 0;
  }
  per_optimizer_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? scale_.to(kFloat64).item<double>() : 1.0; }

std::map<std::string, double> GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", get_scale()},
          {"growth_factor", options_.growth_factor},
          {"backoff_factor", options_.backoff_factor},
          {"growth_interval", static_cast<double>(options_.growth_interval)},
          {"_growth_tracker", static_cast<double>(growth_tracker_)}};
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
  growth_tracker_ = static_cast<int64_t>(state.at("_growth_tracker"));
}

}  // namespace anvil::optim
