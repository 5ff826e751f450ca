// Adam, AdamW and RMSprop: see optimizer.h. Updates follow PyTorch's single-tensor code paths.
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"
#include "core/optim/optimizer.h"
#include "core/util/error.h"

namespace anvil::optim {
namespace {

Options AdamDefaults(double weight_decay) {
  return {{"lr", 1e-3}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", weight_decay}, {"amsgrad", 0.0}};
}

Tensor& Buffer(ParamState& s, const char* name, const Tensor& like) {
  auto it = s.buffers.find(name);
  if (it == s.buffers.end()) it = s.buffers.emplace(name, zeros_like(like)).first;
  return it->second;
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, Options options) : Adam({ParamGroup{std::move(params), {}}}, std::move(options)) {}
Adam::Adam(std::vector<ParamGroup> groups, Options defaults) : Adam(std::move(groups), std::move(defaults), false) {}

Adam::Adam(std::vector<ParamGroup> groups, Options defaults, bool decoupled)
    : Optimizer(std::move(groups), WithOverrides(AdamDefaults(decoupled ? 1e-2 : 0.0), defaults, decoupled ? "AdamW" : "Adam")),
      decoupled_(decoupled) {
  for (const auto& g : param_groups()) {
    const Options& o = g.options;
    ANVIL_CHECK(o.at("beta1") >= 0.0 && o.at("beta1") < 1.0 && o.at("beta2") >= 0.0 && o.at("beta2") < 1.0,
                name(), ": expected betas in [0, 1), got (", o.at("beta1"), ", ", o.at("beta2"), ")");
    ANVIL_CHECK(o.at("eps") >= 0.0, name(), ": expected eps >= 0, got ", o.at("eps"));
  }
}

void Adam::step() {
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), b1 = o.at("beta1"), b2 = o.at("beta2"), eps = o.at("eps");
    const double wd = o.at("weight_decay");
    const bool amsgrad = o.at("amsgrad") != 0.0;
    for (auto& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      ParamState& s = state(p);
      const int64_t t = ++s.step;
      if (wd != 0.0) {
        if (decoupled_) {
          p.mul_(1.0 - lr * wd);
        } else {
          g = g + p * wd;
        }
      }
      Tensor& m = Buffer(s, "exp_avg", p);
      Tensor& v = Buffer(s, "exp_avg_sq", p);
      m.lerp_(g, 1.0 - b1);
      v.mul_(b2).addcmul_(g, g, 1.0 - b2);
      const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
      Tensor second = v;
      if (amsgrad) {
        Tensor& vmax = Buffer(s, "max_exp_avg_sq", p);
        vmax.copy_(maximum(vmax, v));
        second = vmax;
      }
      const Tensor denom = sqrt(second) * (1.0 / std::sqrt(bc2)) + eps;
      p.addcdiv_(m, denom, -lr / bc1);
    }
  }
}

AdamW::AdamW(std::vector<Tensor> params, Options options)
    : AdamW({ParamGroup{std::move(params), {}}}, std::move(options)) {}
AdamW::AdamW(std::vector<ParamGroup> groups, Options defaults) : Adam(std::move(groups), std::move(defaults), true) {}

RMSprop::RMSprop(std::vector<Tensor> params, Options options)
    : RMSprop({ParamGroup{std::move(params), {}}}, std::move(options)) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, Options defaults)
    : Optimizer(std::move(groups), WithOverrides({{"lr", 1e-2}, {"alpha", 0.99}, {"eps", 1e-8}, {"weight_decay", 0.0},
                                          {"momentum", 0.0}, {"centered", 0.0}},
                                         defaults, "RMSprop")) {}

void RMSprop::step() {
  NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), alpha = o.at("alpha"), eps = o.at("eps"), wd = o.at("weight_decay");
    const double momentum = o.at("momentum");
    const bool centered = o.at("centered") != 0.0;
    for (auto& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      ParamState& s = state(p);
      ++s.step;
      if (wd != 0.0) g = g + p * wd;
      Tensor& sq = Buffer(s, "square_avg", p);
      sq.mul_(alpha).addcmul_(g, g, 1.0 - alpha);
      Tensor avg;
      if (centered) {
        Tensor& ga = Buffer(s, "grad_avg", p);
        ga.lerp_(g, 1.0 - alpha);
        avg = sqrt(sq - ga * ga) + eps;
      } else {
        avg = sqrt(sq) + eps;
      }
      if (momentum > 0.0) {
        Tensor& buf = Buffer(s, "momentum_buffer", p);
        buf.mul_(momentum).addcdiv_(g, avg);
        p.add_(buf, -lr);
      } else {
        p.addcdiv_(g, avg, -lr);
      }
    }
  }
}

}  // namespace anvil::optim
