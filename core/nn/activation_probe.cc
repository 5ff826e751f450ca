#include "core/nn/activation_probe.h"

#include "core/autograd/grad_mode.h"
#include "core/ops/functions.h"

namespace anvil::nn {
namespace {

thread_local ActivationProbe* open_probe = nullptr;

// The share of a ReLU output's units that are zero for the whole batch: dim 1 holds the units
// ([N, F] features, [N, C, ...] channels); one unit per output when it has a single dim.
Tensor Above(const Tensor& v, double bound) { return gt(v, wrap_scalar(bound, v.device())); }

// One pass over the output: a ReLU's unit is alive on the batch when its largest output is
// above 0; the rest are [units]-sized.
Tensor DeadShare(const Tensor& y) {
  if (y.dim() < 2) return Above(y, 0.0).to(kFloat64).mean() * -1.0 + 1.0;
  IntArray others;
  for (int64_t d = 0; d < y.dim(); ++d)
    if (d != 1) others.push_back(d);
  return Above(amax(y, others), 0.0).to(kFloat64).mean() * -1.0 + 1.0;
}

// The share of `v`'s elements above `bound`, counted in float32 (exact for fewer than 2^24
// elements per block of the reduction) and returned as a float64 scalar.
Tensor ShareAbove(const Tensor& v, double bound) { return Above(v, bound).to(kFloat32).mean().to(kFloat64); }

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
      share = ShareAbove((v - 0.5).abs(), 0.49);  // below 0.01 or above 0.99
      break;
    case ActivationKind::kTanh:
      share = ShareAbove(v.abs(), 0.99);
      break;
  }
  probe->records_.push_back({&m, kind, share});
}

}  // namespace anvil::nn
