// The CUDA kernel of MaxPool2dIndices: one thread per output position, each running the scan
// the CPU runs (backend/common/max_pool_window.h), so both choose the same element.
#include "core/backend/common/max_pool_window.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"

namespace anvil::cuda {
namespace {

using backend::Geom;

template <typename T>
__global__ void MaxPoolIndicesKernel(const T* x, int64_t* indices, Geom g) {
  const int64_t plane_out = g.OH * g.OW, total = g.N * g.C * plane_out;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = t / plane_out, ox = t % g.OW, oy = (t % plane_out) / g.OW;
    indices[t] = backend::MaxPoolArgmax(x + p * g.H * g.W, g, oy, ox);
  }
}

void MaxPool2dIndicesRowKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = backend::MakeGeom(c.attrs.get<WindowArgs>(), in.size(0), in.size(1));
  const int device = out.device().index;
  DeviceGuard guard(device);
  const int64_t total = g.N * g.C * g.OH * g.OW;
  if (total == 0) return;
  ANVIL_DISPATCH_FLOATING(in.dtype(), "max_pool2d_indices", [&] {
    MaxPoolIndicesKernel<scalar_t>
        <<<GridFor(total), kBlock, 0, current_stream(device)>>>(in.data_ptr<scalar_t>(), out.data_ptr<int64_t>(), g);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(MaxPool2dIndices, MaxPool2dIndicesRowKernel)

}  // namespace anvil::cuda
