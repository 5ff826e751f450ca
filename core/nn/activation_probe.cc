#include "core/nn/activation_probe.h"

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"

namespace anvil::nn {
namespace {

thread_local ActivationProbe* open_probe = nullptr;

// The share of a ReLU output's units that are zero for the whole batch: dim 1 holds the units
// ([N, F] features, [N, C, ...] channels); one unit per output when it has a single dim.
Tensor Above(const Tensor& v, double bound) { return gt(v, wrap_scalar(bound, v.device())); }
Tensor Below(const Tensor& v, double bound) { return lt(v, wrap_scalar(bound, v.device())); }

Tensor DeadShare(const Tensor& y) {
  const Tensor active = Above(y, 0.0).to(kFloat64);
  if (y.dim() < 2) return active.mean() * -1.0 + 1.0;
  const Tensor per_unit = amax(active.transpose(0, 1).reshape({y.size(1), -1}), {1});
  return per_unit.mean() * -1.0 + 1.0;
}

}  // namespace

const char* activation_kind_name(ActivationKind k) {
  switch (k) {
    case ActivationKind::kRelu:
      return "relu";
    case ActivationKind::kSigmoid:
      return "sigmoid";
    case ActivationKind::kTanh:
      return "tanh";
  }
  return "?";
}

ActivationProbe::ActivationProbe() : previous_(open_probe) { open_probe = this; }

ActivationProbe::~ActivationProbe() { open_probe = previous_; }

void record_activation(const Module& m, ActivationKind kind, const Tensor& y) {
  ActivationProbe* probe = open_probe;
  if (probe == nullptr || !y.defined() || y.numel() == 0 || !is_floating_point(y.dtype())) return;
  NoGradGuard no_grad;
  const Tensor v = y.detach();
  Tensor share;
  switch (kind) {
    case ActivationKind::kRelu:
      share = DeadShare(v);
      break;
    case ActivationKind::kSigmoid:
      share = logical_or(Below(v, 0.01), Above(v, 0.99)).to(kFloat64).mean();
      break;
    case ActivationKind::kTanh:
      share = Above(v.abs(), 0.99).to(kFloat64).mean();
      break;
  }
  probe->records_.push_back({&m, kind, share});
}

}  // namespace anvil::nn
