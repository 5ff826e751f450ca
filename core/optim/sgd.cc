// SGD: see optimizer.h. The update is PyTorch's, step for step.
#include <limits>

#include "core/autograd/grad_mode.h"
#include "core/ops/foreach.h"
#include "core/ops/functions.h"
#include "core/optim/fused_buckets.h"
#include "core/optim/optimizer.h"
#include "core/util/error.h"

namespace anvil::optim {
namespace {
Options SgdDefaults() {
  return {{"lr", std::numeric_limits<double>::quiet_NaN()},
          {"momentum", 0.0},
          {"dampening", 0.0},
          {"weight_decay", 0.0},
          {"nesterov", 0.0},
          {"fused", 1.0}};
}
}  // namespace

SGD::SGD(std::vector<Tensor> params, Options options) : SGD({ParamGroup{std::move(params), {}}}, std::move(options)) {}

SGD::SGD(std::vector<ParamGroup> groups, Options defaults)
    : Optimizer(std::move(groups), WithOverrides(SgdDefaults(), defaults, "SGD")) {
  for (const auto& g : param_groups()) {
    const Options& o = g.options;
    ANVIL_CHECK(o.at("momentum") >= 0.0, "SGD: expected momentum >= 0, got ", o.at("momentum"));
    ANVIL_CHECK(o.at("nesterov") == 0.0 || (o.at("momentum") > 0.0 && o.at("dampening") == 0.0),
                "SGD: Nesterov momentum requires momentum > 0 and dampening 0");
  }
}

void SGD::Step(const Tensor* found_inf) {
  NoGradGuard no_grad;
  // The per-tensor path and a first step with dampening ask the host; the fused path decides
  // on the device.
  SkipFlag flag(found_inf);
  for (auto& group : param_groups()) {
    const Options& o = group.options;
    const double lr = o.at("lr"), momentum = o.at("momentum"), dampening = o.at("dampening");
    const double wd = o.at("weight_decay");
    const bool nesterov = o.at("nesterov") != 0.0;
    const bool fused = o.at("fused") != 0.0;
    // Fused buckets: one per (device, dtype, whether the momentum buffers are new).
    FusedBuckets buckets;
    for (auto& p : group.params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (fused && fused_step_supported(p, g)) {
        if (momentum == 0.0) {
          buckets.bucket_for(p, 0).add(p, g);
          continue;
        }
        ParamState& s = state(p);
        auto it = s.buffers.find("momentum_buffer");
        const bool first = it == s.buffers.end();
        // A first step the device may skip: with dampening 0 a zero buffer is exact (the next
        // step's 0 * momentum + g is the first step's g); with dampening the host decides.
        if (first && dampening != 0.0 && flag.read_on_host()) continue;
        if (first) {
          it = s.buffers.emplace("momentum_buffer", found_inf != nullptr ? zeros_like(p) : empty_like(p)).first;
        }
        if (fused_step_supported(p, it->second)) {
          buckets.bucket_for(p, first ? 1 : 0).add(p, g, it->second);
          continue;
        }
        if (first) s.buffers.erase(it);
      }
      if (flag.read_on_host()) continue;
      if (wd != 0.0) g = g + p * wd;
      if (momentum != 0.0) {
        ParamState& s = state(p);
        auto it = s.buffers.find("momentum_buffer");
        if (it == s.buffers.end()) {
          it = s.buffers.emplace("momentum_buffer", g.clone()).first;
        } else {
          it->second.mul_(momentum).add_(g, 1.0 - dampening);
        }
        g = nesterov ? g + it->second * momentum : it->second;
      }
      p.add_(g, -lr);
    }
    for (const FusedBucket& b : buckets) {
      OptimizerStepArgs a;
      a.lr = lr;
      a.weight_decay = wd;
      a.momentum = momentum;
      a.dampening = dampening;
      a.nesterov = nesterov;
      a.first_step = b.key == 1;
      if (flag.skipped_on_host()) continue;  // new momentum buffers stay zeros
      try {
        fused_sgd_(b.lists[0], b.lists[1], b.lists[2], a, flag.device_gate());
      } catch (...) {
        // New momentum buffers hold nothing yet: they must not count as existing next step.
        if (a.first_step) {
          for (const Tensor& p : b.lists[0]) state(p).buffers.erase("momentum_buffer");
        }
        throw;
      }
    }
  }
}

}  // namespace anvil::optim
