// CUDA kernels for fills and random draws: the same per-element functors as the CPU
// (core/ops/random_draws.h), so a seeded draw gives the same numbers on both devices
// (up to the last bit of the device's double-precision log/cos for normal draws).
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/ops/functions.h"
#include "core/ops/random_draws.h"

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
  const double v = c.attrs.alpha;
  ANVIL_DISPATCH_ALL(out.dtype(), "fill", [&] {
    scalar_t value;
    if constexpr (std::is_same_v<scalar_t, bool>) value = v != 0;
    else value = static_cast<scalar_t>(static_cast<opmath_t<scalar_t>>(v));
    if (v == 0 && out.is_contiguous() && !std::signbit(v)) {  // zeros: all bits 0 in every dtype
      const int device = out.device().index;
      DeviceGuard guard(device);
      ANVIL_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()), current_stream(device)));
      return;
    }
    Generate<scalar_t>(out, Constant<scalar_t>{value});
  });
}

void ArangeKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  ANVIL_DISPATCH_NUMERIC(out.dtype(), "arange", [&] {
    Generate<scalar_t>(out, fn::ArangeDraw<scalar_t>{c.attrs.alpha, c.attrs.beta, c.attrs.gamma, c.attrs.keepdim,
                                                     out.numel()});
  });
}

void UniformKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  ANVIL_DISPATCH_FLOATING(out.dtype(), "uniform_", [&] {
    Generate<scalar_t>(out, fn::UniformDraw<scalar_t>{c.attrs.alpha, c.attrs.beta, c.attrs.seed, c.attrs.offset});
  });
}

void NormalKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  ANVIL_DISPATCH_FLOATING(out.dtype(), "normal_", [&] {
    Generate<scalar_t>(out, fn::NormalDraw<scalar_t>{c.attrs.alpha, c.attrs.beta, c.attrs.seed, c.attrs.offset});
  });
}

// inputs[0]: probabilities (broadcast to out), or none (attrs.alpha = p).
void BernoulliKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const bool has_p = !c.inputs.empty();
  Tensor p = has_p ? c.inputs[0].to(kFloat64).expand(out.sizes()).contiguous() : Tensor();
  const double* pp = has_p ? p.data_ptr<double>() : nullptr;
  ANVIL_DISPATCH_ALL(out.dtype(), "bernoulli", [&] {
    Generate<scalar_t>(out, fn::BernoulliDraw<scalar_t>{c.attrs.seed, c.attrs.offset, pp, c.attrs.alpha});
  });
}

}  // namespace

void RegisterFillKernels(KernelTable& t) {
  t[static_cast<int>(OpId::Fill)] = &FillKernel;
  t[static_cast<int>(OpId::Arange)] = &ArangeKernel;
  t[static_cast<int>(OpId::Uniform)] = &UniformKernel;
  t[static_cast<int>(OpId::Normal)] = &NormalKernel;
  t[static_cast<int>(OpId::Bernoulli)] = &BernoulliKernel;
}

}  // namespace anvil::cuda
