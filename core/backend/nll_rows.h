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

}  // namespace anvil::nll_rows
