// Optimizer base, gradient clipping: see optimizer.h.
#include "core/optim/optimizer.h"

#include <cmath>
#include <limits>
#include <set>

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::optim {

Optimizer::~Optimizer() = default;

Optimizer::Optimizer(std::vector<ParamGroup> groups, Options defaults) : defaults_(std::move(defaults)) {
  ANVIL_CHECK(!groups.empty(), "optimizer: got an empty parameter list");
  for (auto& g : groups) add_param_group(std::move(g));
}

Options Optimizer::WithOverrides(Options defaults, const Options& overrides, const char* who) {
  for (const auto& [k, v] : overrides) {
    ANVIL_CHECK(defaults.count(k), who, ": unknown option '", k, "'");
    defaults[k] = v;
  }
  return defaults;
}

void Optimizer::add_param_group(ParamGroup group) {
  ANVIL_CHECK(!group.params.empty(), "optimizer: a parameter group has no parameters");
  for (const auto& [key, value] : group.options) {
    ANVIL_CHECK(defaults_.count(key), "optimizer: unknown option '", key, "'; this optimizer takes ", [&] {
      std::string s;
      for (const auto& [k, v] : defaults_) s += (s.empty() ? "" : ", ") + k;
      return s;
    }());
  }
  for (const auto& [key, value] : defaults_) group.options.emplace(key, value);
  ANVIL_CHECK(!std::isnan(group.options.at("lr")), "optimizer: 'lr' is required");
  ANVIL_CHECK(group.options.at("lr") >= 0.0, "optimizer: expected lr >= 0, got ", group.options.at("lr"));
  std::set<const TensorImpl*> seen;
  for (const auto& g : groups_) {
    for (const auto& p : g.params) seen.insert(p.impl());
  }
  for (const auto& p : group.params) {
    ANVIL_CHECK(p.defined() && p.is_leaf(), "optimizer: can only optimize leaf tensors (parameters)");
    ANVIL_CHECK(p.is_floating_point(), "optimizer: can only optimize floating-point tensors, got ", p.dtype());
    ANVIL_CHECK(seen.insert(p.impl()).second,
                "optimizer: a parameter appears in more than one group (or twice); "
                "it would be updated twice per step");
  }
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  for (auto& g : groups_) {
    for (auto& p : g.params) {
      if (!p.grad().defined()) continue;
      p.set_grad(set_to_none ? Tensor() : zeros_like(p.grad()));
    }
  }
}

double Optimizer::lr() const { return groups_.at(0).options.at("lr"); }

void Optimizer::set_lr(double lr) {
  for (auto& g : groups_) g.options["lr"] = lr;
}

ParamState& Optimizer::state(const Tensor& param) { return state_[param.impl()]; }

Tensor& Optimizer::buffer(ParamState& s, const char* name, const Tensor& like) {
  auto it = s.buffers.find(name);
  if (it == s.buffers.end()) it = s.buffers.emplace(name, zeros_like(like)).first;
  return it->second;
}

namespace {
// A parameter's step count wherever it lives (a host read when it is on the device).
int64_t StepOf(const ParamState& s) {
  return s.device_step.defined() ? static_cast<int64_t>(s.device_step.to_vector<double>()[0]) : s.step;
}
}  // namespace

int64_t& Optimizer::host_step(ParamState& s) {
  s.step = StepOf(s);
  s.device_step = Tensor();
  return s.step;
}

bool Optimizer::SkipFlag::read_on_host() {
  if (flag_ == nullptr) return false;
  if (!host_) host_ = flag_->item<float>() != 0.0f;
  return *host_;
}

OptimizerState Optimizer::state_dict() const {
  OptimizerState out;
  int64_t index = 0;
  for (const auto& g : groups_) {
    out.groups.push_back(g.options);
    for (const auto& p : g.params) {
      if (auto it = state_.find(p.impl()); it != state_.end()) {
        ParamState copy;
        copy.step = StepOf(it->second);
        for (const auto& [k, t] : it->second.buffers) copy.buffers[k] = t.clone();
        out.params[index] = std::move(copy);
      }
      ++index;
    }
  }
  return out;
}

void Optimizer::load_state_dict(const OptimizerState& s) {
  ANVIL_CHECK(s.groups.size() == groups_.size(), "optimizer load_state_dict: the state has ", s.groups.size(),
              " parameter groups, the optimizer has ", groups_.size());
  std::vector<const Tensor*> flat;
  for (const auto& g : groups_) {
    for (const auto& p : g.params) flat.push_back(&p);
  }
  for (const auto& [index, ps] : s.params) {
    ANVIL_CHECK(index >= 0 && index < static_cast<int64_t>(flat.size()),
                "optimizer load_state_dict: state for "
                "parameter ",
                index, " but the optimizer has ", flat.size(), " parameters");
    for (const auto& [k, t] : ps.buffers) {
      ANVIL_CHECK(t.sizes() == flat[static_cast<size_t>(index)]->sizes(), "optimizer load_state_dict: buffer '", k,
                  "' of parameter ", index, " does not match the parameter's shape");
    }
  }
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].options = s.groups[g];
    for (const auto& [key, value] : defaults_) groups_[g].options.emplace(key, value);
  }
  state_.clear();
  for (const auto& [index, ps] : s.params) {
    ParamState copy;
    copy.step = ps.step;
    const Tensor& param = *flat[static_cast<size_t>(index)];
    // Buffers live where their parameter does (a checkpoint read on the CPU resumes a GPU job).
    for (const auto& [k, t] : ps.buffers)
      copy.buffers[k] = t.device() == param.device() ? t.clone() : t.to(param.device());
    state_[param.impl()] = std::move(copy);
  }
}

Tensor grad_norm(const std::vector<Tensor>& params, double norm_type) {
  NoGradGuard no_grad;
  Tensor total = zeros({}, TensorOptions(kFloat64).with_device(params.empty() ? kCPU : params[0].device()));
  for (const auto& p : params) {
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    // Accumulate in float64 so the norm of many float32 gradients does not lose precision.
    const Tensor a = abs(g.to(kFloat64));
    total = std::isinf(norm_type) ? maximum(total, a.max()) : total + pow(a, norm_type).sum();
  }
  return std::isinf(norm_type) ? total : pow(total, 1.0 / norm_type);
}

Tensor clip_grad_norm_deferred_(const std::vector<Tensor>& params, double max_norm, double norm_type) {
  ANVIL_CHECK(max_norm >= 0.0, "clip_grad_norm_: expected max_norm >= 0, got ", max_norm);
  NoGradGuard no_grad;
  const Tensor total = grad_norm(params, norm_type);
  // min(1, max / (norm + 1e-6)) as a tensor: scaling by 1 leaves gradients bitwise unchanged,
  // so there is no branch on the value and no host read.
  const Tensor coef = clamp(max_norm / (total + 1e-6), std::nullopt, 1.0);
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.mul_(coef.to(g.dtype()));
  }
  return total;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  ANVIL_CHECK(max_norm >= 0.0, "clip_grad_norm_: expected max_norm >= 0, got ", max_norm);
  const double total = grad_norm(params, norm_type).item<double>();
  ANVIL_CHECK(std::isfinite(total) || !error_if_nonfinite, "clip_grad_norm_: the total norm of the gradients is ",
              total, "; a loss or gradient became non-finite");
  // A non-finite norm scales too, as in PyTorch: by 0 for an infinite norm (an inf gradient
  // becomes NaN, finite ones 0) and by NaN for a NaN norm; the step that follows shows it.
  clip_grad_norm_deferred_(params, max_norm, norm_type);
  return total;
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  ANVIL_CHECK(clip_value >= 0.0, "clip_grad_value_: expected clip_value >= 0, got ", clip_value);
  NoGradGuard no_grad;
  for (const auto& p : params) {
    Tensor g = p.grad();
    if (g.defined()) g.clamp_(-clip_value, clip_value);
  }
}

}  // namespace anvil::optim
