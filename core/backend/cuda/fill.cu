// CUDA kernels for fills and random draws: the same per-element functors as the CPU
// (core/ops/random_draws.h), so a seeded draw gives the same numbers on both devices
// (up to the last bit of the device's double-precision log/cos for normal draws).
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/backend/fill_rows.h"
#include "core/ops/functions.h"

namespace anvil::cuda {
namespace {

// out[element i in row-major order] = f(i), for any layout of out.
template <typename T, typename F>
__global__ void GenerateKernel(Offsets<1> o, int64_t n, F f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    char* p[1];
    o.at(i, p);
    *reinterpret_cast<T*>(p[0]) = f(i);
  }
}

template <typename T, typename F>
void Generate(const Tensor& out, const F& f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  GenerateKernel<T><<<GridFor(n), kBlock, 0, current_stream(device)>>>(MakeOffsets<1>({&out}), n, f);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename T>
struct Constant {
  T value;
  __device__ __forceinline__ T operator()(int64_t) const { return value; }
};

void FillKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const double v = c.attrs.get<FillArgs>().value;
  ANVIL_DISPATCH_ALL(out.dtype(), "fill", [&] {
    const scalar_t value = fill_rows::FillValue<scalar_t>(v);
    if (v == 0 && out.is_contiguous() && !std::signbit(v)) {  // zeros: all bits 0 in every dtype
      const int device = out.device().index;
      DeviceGuard guard(device);
      ANVIL_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()), current_stream(device)));
      return;
    }
    Generate<scalar_t>(out, Constant<scalar_t>{value});
  });
}

// Element i of out = f(i), for the shared fill rows (core/backend/fill_rows.h).
ANVIL_FILL_GENERATOR(CudaGenerate)

}  // namespace

ANVIL_KERNEL_SLOT(Fill, FillKernel)
ANVIL_FILL_ROW_SLOTS(CudaGenerate)

}  // namespace anvil::cuda
