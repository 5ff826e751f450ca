// CUDA kernels of the NllLoss rows, with the CPU kernels' semantics (core/backend/cpu/loss.cc;
// per-row math: core/ops/nll_loss.h). Targets were range-checked before the launch
// (ops/loss.cc): a kernel cannot raise, so one that meets a bad target skips the row.
//
// The forward runs in one block: each thread sums a strided set of rows in double, and the
// partial sums are combined in a fixed order, so the loss is the same on every run.
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/backend/nll_rows.h"

namespace anvil::cuda {
namespace {

template <typename T>
__global__ void NllLossForward(const T* x, int64_t sx0, int64_t sx1, const int64_t* target, int64_t st,
                               nll::ClassWeights<T> weights, T* out, int64_t so, T* total_weight_out, int64_t rows,
                               int64_t classes, int64_t reduction, int64_t ignore_index) {
  using M = opmath_t<T>;
  __shared__ double loss_part[kBlock];
  __shared__ double weight_part[kBlock];
  double loss_sum = 0, weight_sum = 0;
  for (int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const int64_t t = target[i * st];
    const bool counted = t != ignore_index && t >= 0 && t < classes;
    const M w = counted ? nll::RowWeight<M>(t, ignore_index, weights) : M(0);
    const M loss = counted ? -w * M(x[i * sx0 + t * sx1]) : M(0);
    if (reduction == nll::kNone) out[i * so] = T(loss);
    loss_sum += static_cast<double>(loss);
    weight_sum += static_cast<double>(w);
  }
  loss_part[threadIdx.x] = loss_sum;
  weight_part[threadIdx.x] = weight_sum;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {  // pairwise, in a fixed order
    if (threadIdx.x < half) {
      loss_part[threadIdx.x] += loss_part[threadIdx.x + half];
      weight_part[threadIdx.x] += weight_part[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (reduction == nll::kSum) out[0] = T(M(loss_part[0]));
    if (reduction == nll::kMean) out[0] = T(M(loss_part[0] / weight_part[0]));
    *total_weight_out = T(M(weight_part[0]));
  }
}

// One thread per element of the [rows, classes] gradient: the target's element gets the
// row's gradient, every other element 0 (so no separate zero fill).
template <typename T>
__global__ void NllLossBackwardKernel(const T* g, int64_t sg, const int64_t* target, int64_t st, const T* total_weight,
                                      nll::ClassWeights<T> weights, T* out, int64_t rows, int64_t classes,
                                      int64_t reduction, int64_t ignore_index) {
  using M = opmath_t<T>;
  const int64_t n = rows * classes;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / classes, j = k % classes;
    const int64_t t = target[i * st];
    M v = M(0);
    if (t == j && t != ignore_index) {
      const M w = nll::RowWeight<M>(t, ignore_index, weights);
      v = nll::TargetGrad<M>(w, M(g[i * sg]), reduction, M(*total_weight));
    }
    out[k] = T(v);
  }
}

void NllLoss(const KernelCall& c) {
  const nll_rows::Operands op = nll_rows::ForwardOperands(c);
  const Tensor &x = op.in, &target = op.target;
  const int64_t rows = op.rows, classes = op.classes, reduction = op.reduction, ignore_index = op.ignore_index;
  const int device = x.device().index;
  DeviceGuard guard(device);
  ANVIL_DISPATCH_FLOATING(x.dtype(), "nll_loss", [&] {
    using T = scalar_t;
    const int64_t so = reduction == nll::kNone ? c.outputs[0].stride(0) : 0;
    NllLossForward<T><<<1, kBlock, 0, current_stream(device)>>>(
        x.data_ptr<T>(), x.stride(0), x.stride(1), target.data_ptr<int64_t>(), target.stride(0),
        nll_rows::Weights<T>(c, 2), c.outputs[0].data_ptr<T>(), so, c.outputs[1].data_ptr<T>(), rows, classes,
        reduction, ignore_index);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

void NllLossBackward(const KernelCall& c) {
  const nll_rows::Operands op = nll_rows::BackwardOperands(c);
  const Tensor &g = op.in, &target = op.target;
  const int64_t rows = op.rows, classes = op.classes, reduction = op.reduction, ignore_index = op.ignore_index;
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  ANVIL_DISPATCH_FLOATING(out.dtype(), "nll_loss_backward", [&] {
    using T = scalar_t;
    const int64_t sg = reduction == nll::kNone ? g.stride(0) : 0;
    NllLossBackwardKernel<T><<<GridFor(out.numel()), kBlock, 0, current_stream(device)>>>(
        g.data_ptr<T>(), sg, target.data_ptr<int64_t>(), target.stride(0), c.inputs[2].data_ptr<T>(),
        nll_rows::Weights<T>(c, 3), out.data_ptr<T>(), rows, classes, reduction, ignore_index);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(NllLoss, NllLoss)
ANVIL_KERNEL_SLOT(NllLossBackward, NllLossBackward)

}  // namespace anvil::cuda
