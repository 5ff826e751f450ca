// Adam, AdamW and RMSprop: see optimizer.h. Updates follow PyTorch's single-tensor code paths.
#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/ops/foreach.h"
#include "core/ops/functions.h"
#include "core/optim/fused_buckets.h"
#include "core/optim/optimizer.h"
#include "core/util/error.h"

namespace anvil::optim {
namespace {

Options AdamDefaults(double weight_decay) {
  return {{"lr", 1e-3},     {"beta1", 0.9},    {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", weight_decay},
          {"amsgrad", 0.0}, {"maximize", 0.0}, {"fused", 1.0}};
}

}  // namespace

Adam::Adam(std::vector<Tensor> params, Options options)
    : Adam({ParamGroup{std::move(params), {}}}, std::move(options)) {}
Adam::Adam(std::vector<ParamGroup> groups, Options defaults) : Adam(std::move(groups), std::move(defaults), false) {}

Adam::Adam(std::vector<ParamGroup> groups, Options defaults, bool decoupled)
    : Optimizer(std::move(groups),
                WithOverrides(AdamDefaults(decoupled ? 1e-2 : 0.0), defaults, decoupled ? "AdamW" : "Adam")),
      decoupled_(decoupled) {
  for (const auto& g : param_groups()) {
    const Options& o = g.options;
    ANVIL_CHECK(o.at("beta1") >= 0.0 && o.at("beta1") < 1.0 && o.at("beta2") >= 0.0 && o.at("beta2") < 1.0, name(),
                ": expected betas in [0, 1), got (", o.at("beta1"), ", ", o.at("beta2"), ")");
    ANVIL_CHECK(o.at("eps") >= 0.0, name(), ": expected eps >= 0, got ", o.at("eps"));
  }
}

void Adam::Step(const Tensor* found_inf) {
  NoGradGuard no_grad;
  // The per-tensor path asks the host; the fused path decides on the device.
  SkipFlag flag(found_inf);
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), b1 = o.at("beta1"), b2 = o.at("beta2"), eps = o.at("eps");
    const double wd = o.at("weight_decay");
    const bool amsgrad = o.at("amsgrad") != 0.0;
    const bool fused = o.at("fused") != 0.0;
    const bool maximize = o.at("maximize") != 0.0;
    // One per (device, dtype): each parameter brings its own step count.
    FusedBuckets buckets;
    for (auto& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (maximize) g = -g;  // ascent: the update sees the negated gradient (the stored one stays)
      ParamState& s = state(p);
      if (fused && fused_step_supported(p, g)) {
        // New moments are zeros, which a skipped first step leaves exact.
        const Tensor& m = buffer(s, "exp_avg", p);
        const Tensor& v = buffer(s, "exp_avg_sq", p);
        const Tensor vmax = amsgrad ? buffer(s, "max_exp_avg_sq", p) : Tensor();
        if (buckets.add_counted_on_device(p, g, s, m, v, vmax)) continue;
      }
      if (flag.read_on_host()) continue;
      const int64_t t = ++host_step(s);
      if (wd != 0.0) {
        if (decoupled_) {
          p.mul_(1.0 - lr * wd);
        } else {
          g = g + p * wd;
        }
      }
      Tensor& m = buffer(s, "exp_avg", p);
      Tensor& v = buffer(s, "exp_avg_sq", p);
      m.lerp_(g, 1.0 - b1);
      v.mul_(b2).addcmul_(g, g, 1.0 - b2);
      const double bc1 = 1.0 - std::pow(b1, static_cast<double>(t));
      const double bc2 = 1.0 - std::pow(b2, static_cast<double>(t));
      Tensor second = v;
      if (amsgrad) {
        Tensor& vmax = buffer(s, "max_exp_avg_sq", p);
        vmax.copy_(maximum(vmax, v));
        second = vmax;
      }
      // In place after the sqrt, as PyTorch's single-tensor path: a parameter-sized
      // temporary instead of three.
      Tensor denom = sqrt(second);
      denom.mul_(1.0 / std::sqrt(bc2)).add_(eps);
      p.addcdiv_(m, denom, -lr / bc1);
    }
    for (const FusedBucket& b : buckets) {
      if (flag.skipped_on_host()) continue;
      OptimizerStepArgs a;
      a.lr = lr;
      a.weight_decay = wd;
      a.beta1 = b1;
      a.beta2 = b2;
      a.eps = eps;
      a.decoupled = decoupled_;
      a.amsgrad = amsgrad;
      fused_adam_(b.lists[0], b.lists[1], b.lists[2], b.lists[3], b.lists[4], b.lists[5], a, flag.device_gate());
    }
  }
}

AdamW::AdamW(std::vector<Tensor> params, Options options)
    : AdamW({ParamGroup{std::move(params), {}}}, std::move(options)) {}
AdamW::AdamW(std::vector<ParamGroup> groups, Options defaults) : Adam(std::move(groups), std::move(defaults), true) {}

RMSprop::RMSprop(std::vector<Tensor> params, Options options)
    : RMSprop({ParamGroup{std::move(params), {}}}, std::move(options)) {}

RMSprop::RMSprop(std::vector<ParamGroup> groups, Options defaults)
    : Optimizer(std::move(groups), WithOverrides({{"lr", 1e-2},
                                                  {"alpha", 0.99},
                                                  {"eps", 1e-8},
                                                  {"weight_decay", 0.0},
                                                  {"momentum", 0.0},
                                                  {"centered", 0.0},
                                                  {"fused", 1.0}},
                                                 defaults, "RMSprop")) {
  // PyTorch's checks: each of these must be >= 0 (a negative alpha or momentum diverges).
  for (const auto& g : param_groups()) {
    for (const char* key : {"alpha", "eps", "momentum", "weight_decay"}) {
      ANVIL_CHECK(g.options.at(key) >= 0.0, "RMSprop: expected ", key, " >= 0, got ", g.options.at(key));
    }
  }
}

void RMSprop::Step(const Tensor* found_inf) {
  NoGradGuard no_grad;
  // The per-tensor path asks the host; the fused path decides on the device.
  SkipFlag flag(found_inf);
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), alpha = o.at("alpha"), eps = o.at("eps"), wd = o.at("weight_decay");
    const double momentum = o.at("momentum");
    const bool centered = o.at("centered") != 0.0;
    const bool fused = o.at("fused") != 0.0;
    FusedBuckets buckets;
    for (auto& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      ParamState& s = state(p);
      if (fused && fused_step_supported(p, g)) {
        // New buffers are zeros, which a skipped first step leaves exact. Lists: params, grads,
        // square averages, grad averages, momentum buffers, counts.
        const Tensor& sq = buffer(s, "square_avg", p);
        const Tensor ga = centered ? buffer(s, "grad_avg", p) : Tensor();
        const Tensor buf = momentum > 0.0 ? buffer(s, "momentum_buffer", p) : Tensor();
        if (buckets.add_counted_on_device(p, g, s, sq, ga, buf)) continue;
      }
      if (flag.read_on_host()) continue;
      ++host_step(s);
      if (wd != 0.0) g = g + p * wd;
      Tensor& sq = buffer(s, "square_avg", p);
      sq.mul_(alpha).addcmul_(g, g, 1.0 - alpha);
      Tensor avg;
      if (centered) {
        Tensor& ga = buffer(s, "grad_avg", p);
        ga.lerp_(g, 1.0 - alpha);
        avg = sqrt(sq - ga * ga) + eps;
      } else {
        avg = sqrt(sq) + eps;
      }
      if (momentum > 0.0) {
        Tensor& buf = buffer(s, "momentum_buffer", p);
        buf.mul_(momentum).addcdiv_(g, avg);
        p.add_(buf, -lr);
      } else {
        p.addcdiv_(g, avg, -lr);
      }
    }
    if (flag.skipped_on_host()) continue;
    OptimizerStepArgs a;
    a.lr = lr;
    a.weight_decay = wd;
    a.alpha = alpha;
    a.eps = eps;
    a.momentum = momentum;
    a.centered = centered;
    for (const FusedBucket& b : buckets) {
      fused_rmsprop_(b.lists[0], b.lists[1], b.lists[2], b.lists[3], b.lists[4], b.lists[5], a, flag.device_gate());
    }
  }
}

}  // namespace anvil::optim
