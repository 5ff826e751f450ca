// The NllLoss rows' optional class weights, read alike by both backends (op_table.def, "losses";
// per-row math: core/ops/nll_loss.h).
#pragma once

#include <cstddef>

#include "core/backend/registry.h"
#include "core/ops/nll_loss.h"

namespace anvil::nll_rows {

// The class weights when the call has input `index` (NllLoss: 2, NllLossBackward: 3).
template <typename T>
nll::ClassWeights<T> Weights(const KernelCall& c, size_t index) {
  if (c.inputs.size() <= index) return {};
  return {c.inputs[index].data_ptr<T>(), c.inputs[index].stride(0)};
}

// A call's operands, sizes and arguments, as both rows read them: for NllLoss, the
// log-probabilities and targets with rows x classes of the former; for NllLossBackward, the
// loss's gradient and the targets, with rows x classes of the gradient it writes.
struct Operands {
  const Tensor& in;
  const Tensor& target;
  int64_t rows, classes, reduction, ignore_index;
};
inline Operands ForwardOperands(const KernelCall& c) {
  const NllLossArgs& a = c.attrs.get<NllLossArgs>();
  return {c.inputs[0], c.inputs[1], c.inputs[0].size(0), c.inputs[0].size(1), a.reduction, a.ignore_index};
}
inline Operands BackwardOperands(const KernelCall& c) {
  const NllLossArgs& a = c.attrs.get<NllLossArgs>();
  return {c.inputs[0], c.inputs[1], c.outputs[0].size(0), c.outputs[0].size(1), a.reduction, a.ignore_index};
}

}  // namespace anvil::nll_rows
