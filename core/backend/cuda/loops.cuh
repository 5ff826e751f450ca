// Element-wise launches for CUDA kernels. The host lays the operands out exactly as the CPU
// does (backend::StridedLoop: inputs broadcast to the output, dimensions coalesced, byte
// strides), the struct travels to the device by value, and each thread turns its linear
// index into one byte offset per operand (PyTorch's OffsetCalculator idea). A fully
// contiguous launch skips the index arithmetic.
#pragma once

#include <cuda_runtime.h>

#include <array>

#include "core/backend/common/strided_loop.h"
#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"

namespace anvil::cuda {

constexpr int kBlock = 256;

// Blocks for a grid-stride loop over n elements: enough to fill the GPU, no more.
inline unsigned GridFor(int64_t n) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(blocks, 65535 * 8)));
}

template <int N>
struct Offsets {
  int ndim;
  int64_t sizes[backend::kMaxDims];       // innermost first
  int64_t strides[N][backend::kMaxDims];  // bytes
  char* base[N];

  __device__ __forceinline__ void at(int64_t linear, char* (&p)[N]) const {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = base[k];
    for (int d = 0; d < ndim; ++d) {
      const int64_t i = linear % sizes[d];
      linear /= sizes[d];
#pragma unroll
      for (int k = 0; k < N; ++k) p[k] += i * strides[k][d];
    }
  }
};

// body(p) reads and writes through the N operand pointers of one element.
template <int N, typename Body>
__global__ void StridedKernel(Offsets<N> o, int64_t n, Body body) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    char* p[N];
    o.at(i, p);
    body(p);
  }
}

// One dimension after coalescing (dense, or broadcast along it): p[k] = base[k] + i * stride[k].
template <int N, typename Body>
__global__ void FlatKernel(Offsets<N> o, int64_t n, Body body) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    char* p[N];
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = o.base[k] + i * o.strides[k][0];
    body(p);
  }
}

// The device-side view of operands laid out by backend::StridedLoop (ops[0] is the output).
template <int N>
Offsets<N> MakeOffsets(const std::array<const Tensor*, N>& ops) {
  backend::StridedLoop<N> loop;
  loop.Build(ops);
  Offsets<N> o{};
  o.ndim = loop.ndim;
  for (int d = 0; d < loop.ndim; ++d) o.sizes[d] = loop.sizes[d];
  for (int k = 0; k < N; ++k) {
    o.base[k] = loop.base[k];
    for (int d = 0; d < loop.ndim; ++d) o.strides[k][d] = loop.strides[k][d];
  }
  return o;
}

// Runs body over the output ops[0] with its inputs ops[1..] broadcast to it, on the current
// stream of the output's device.
template <int N, typename Body>
void LaunchElementwise(const std::array<const Tensor*, N>& ops, const Body& body) {
  const Tensor& out = *ops[0];
  const int64_t n = out.numel();
  if (n == 0) return;
  Offsets<N> o = MakeOffsets<N>(ops);
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (o.ndim <= 1) {
    if (o.ndim == 0) {
      for (int k = 0; k < N; ++k) o.strides[k][0] = 0;
    }
    FlatKernel<N><<<GridFor(n), kBlock, 0, stream>>>(o, n, body);
  } else {
    StridedKernel<N><<<GridFor(n), kBlock, 0, stream>>>(o, n, body);
  }
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename Bits>
struct BitCopyBody {
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<Bits*>(p[0]) = *reinterpret_cast<const Bits*>(p[1]);
  }
};

// dst = src for one dtype (src broadcast to dst's shape), any layouts: a copy of the bits, one
// kernel per element size rather than per dtype.
inline void CopyBits(const Tensor& dst, const Tensor& src) {
  switch (dst.element_size()) {
    case 1:
      return LaunchElementwise<2>({&dst, &src}, BitCopyBody<uint8_t>{});
    case 2:
      return LaunchElementwise<2>({&dst, &src}, BitCopyBody<uint16_t>{});
    case 4:
      return LaunchElementwise<2>({&dst, &src}, BitCopyBody<uint32_t>{});
    default:
      return LaunchElementwise<2>({&dst, &src}, BitCopyBody<uint64_t>{});
  }
}

}  // namespace anvil::cuda
