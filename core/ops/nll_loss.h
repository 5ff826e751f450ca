// The per-row math of the NllLoss rows, shared by the CPU and CUDA kernels so both count,
// weight and scale rows alike.
#pragma once

#include <cstdint>

#include "core/util/macros.h"

namespace anvil::nll {

// NllLossArgs::reduction (core/ops/op_args.h).
enum Reduction : int64_t { kNone = 0, kMean = 1, kSum = 2 };

// Optional per-class weights: data == nullptr means every class weighs 1.
template <typename T>
struct ClassWeights {
  const T* data = nullptr;
  int64_t stride = 0;
};

// The weight of a row whose target is t: 0 when t is ignore_index, else the class weight.
// t is known to be in range here.
template <typename M, typename T>
ANVIL_INLINE M RowWeight(int64_t t, int64_t ignore_index, ClassWeights<T> w) {
  if (t == ignore_index) return M(0);
  return w.data != nullptr ? M(w.data[t * w.stride]) : M(1);
}

// d loss / d log_probs[i, t] for a row of weight w: -w * g, divided by the total weight for
// the mean (g is the row's own gradient for reduction none, else the scalar's).
template <typename M>
ANVIL_INLINE M TargetGrad(M w, M g, int64_t reduction, M total_weight) {
  const M scaled = -w * g;
  return reduction == kMean ? scaled / total_weight : scaled;
}

}  // namespace anvil::nll
