// CPU kernels of the NllLoss rows (per-row math shared with CUDA: core/ops/nll_loss.h).
// Rows are walked in order on one thread with double accumulators: a loss is a few thousand
// rows at most, and a fixed order keeps the sum bitwise repeatable.
#include <algorithm>
#include <string>

#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/backend/nll_rows.h"
#include "core/util/error.h"

namespace anvil::cpu {
namespace {

void CheckTarget(int64_t t, int64_t classes, int64_t ignore_index) {
  if (t != ignore_index && (t < 0 || t >= classes)) {
    throw IndexError("nll_loss: target " + std::to_string(t) + " is out of bounds: expected class indices in [0, " +
                     std::to_string(classes) + ") or ignore_index " + std::to_string(ignore_index));
  }
}

void NllLossKernel(const KernelCall& c) {
  const nll_rows::Operands op = nll_rows::ForwardOperands(c);
  const Tensor &x = op.in, &target = op.target;
  const int64_t rows = op.rows, classes = op.classes, reduction = op.reduction, ignore_index = op.ignore_index;
  ANVIL_DISPATCH_FLOATING(x.dtype(), "nll_loss", [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    const T* px = x.data_ptr<T>();
    const int64_t* pt = target.data_ptr<int64_t>();
    const auto weights = nll_rows::Weights<T>(c, 2);
    T* out = c.outputs[0].data_ptr<T>();
    const int64_t so = reduction == nll::kNone ? c.outputs[0].stride(0) : 0;
    const int64_t sx0 = x.stride(0), sx1 = x.stride(1), st = target.stride(0);
    double total = 0, total_weight = 0;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = pt[i * st];
      CheckTarget(t, classes, ignore_index);
      const M w = nll::RowWeight<M>(t, ignore_index, weights);
      // An ignored row reads nothing (its target may be any number); a counted row of weight
      // 0 still multiplies, so a -inf log-probability there gives NaN, as in PyTorch.
      const M loss = t == ignore_index ? M(0) : -w * M(px[i * sx0 + t * sx1]);
      if (reduction == nll::kNone) out[i * so] = T(loss);
      total += static_cast<double>(loss);
      total_weight += static_cast<double>(w);
    }
    if (reduction == nll::kSum) out[0] = T(M(total));
    if (reduction == nll::kMean) out[0] = T(M(total / total_weight));  // all rows ignored: 0/0 = NaN
    c.outputs[1].data_ptr<T>()[0] = T(M(total_weight));
  });
}

void NllLossBackwardKernel(const KernelCall& c) {
  const nll_rows::Operands op = nll_rows::BackwardOperands(c);
  const Tensor &g = op.in, &target = op.target;
  const int64_t rows = op.rows, classes = op.classes, reduction = op.reduction, ignore_index = op.ignore_index;
  const Tensor& out = c.outputs[0];  // [rows, classes], fresh and contiguous
  ANVIL_DISPATCH_FLOATING(out.dtype(), "nll_loss_backward", [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    T* po = out.data_ptr<T>();
    std::fill(po, po + out.numel(), T(0));
    const T* pg = g.data_ptr<T>();
    const int64_t sg = reduction == nll::kNone ? g.stride(0) : 0;
    const int64_t* pt = target.data_ptr<int64_t>();
    const M total_weight = M(c.inputs[2].data_ptr<T>()[0]);
    const auto weights = nll_rows::Weights<T>(c, 3);
    const int64_t st = target.stride(0);
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t t = pt[i * st];
      CheckTarget(t, classes, ignore_index);
      if (t == ignore_index) continue;
      const M w = nll::RowWeight<M>(t, ignore_index, weights);
      po[i * classes + t] = T(nll::TargetGrad<M>(w, M(pg[i * sg]), reduction, total_weight));
    }
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(NllLoss, NllLossKernel)
ANVIL_KERNEL_SLOT(NllLossBackward, NllLossBackwardKernel)

}  // namespace anvil::cpu
