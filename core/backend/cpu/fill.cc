// CPU kernels for fills and random draws. Outputs are passed in (Fill rows write into an
// existing tensor), so these serve both factories and in-place fill_/uniform_/normal_.
// Random element i always uses Philox block (offset + i / per_block): the stream does not
// depend on the thread count or on the layout of the output.
#include <algorithm>
#include <cmath>

#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/ops/random_draws.h"

namespace anvil::cpu {
namespace {

// Calls f(linear index) -> value for every element of out, in row-major order.
template <typename T, typename F>
void Generate(const Tensor& out, const F& f) {
  StridedLoop<1> loop;
  loop.Build({&out});
  // Run walks row-major order, so a running counter from b is the linear index.
  parallel_for(0, loop.numel(), kGrain, [&](int64_t b, int64_t e) {
    int64_t i = b;
    loop.Run(b, e, [&](char** p, const int64_t* st, int64_t n) {
      for (int64_t j = 0; j < n; ++j, ++i) *reinterpret_cast<T*>(p[0] + j * st[0]) = f(i);
    });
  });
}

void FillKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const double v = c.attrs.alpha;
  ANVIL_DISPATCH_ALL(out.dtype(), "fill", [&] {
    scalar_t value;
    if constexpr (std::is_same_v<scalar_t, bool>) value = v != 0;
    else value = static_cast<scalar_t>(static_cast<opmath_t<scalar_t>>(v));
    if (out.is_contiguous()) {  // the common case (zeros, ones, full): a plain vectorised fill
      scalar_t* p = out.data_ptr<scalar_t>();
      parallel_for(0, out.numel(), 1 << 16, [&](int64_t b, int64_t e) { std::fill(p + b, p + e, value); });
      return;
    }
    Generate<scalar_t>(out, [&](int64_t) { return value; });
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

}  // namespace anvil::cpu
