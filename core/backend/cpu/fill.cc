// CPU kernels for fills and random draws. Outputs are passed in (Fill rows write into an
// existing tensor), so these serve both factories and in-place fill_/uniform_/normal_.
// Random element i always uses Philox block (offset + i / per_block): the stream does not
// depend on the thread count or on the layout of the output.
#include <algorithm>
#include <cmath>

#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/tensor/random.h"

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
  const double start = c.attrs.alpha, step = c.attrs.beta, end = c.attrs.gamma;
  const bool symmetric = c.attrs.keepdim;  // linspace: hit both ends exactly
  const int64_t n = out.numel();
  ANVIL_DISPATCH_NUMERIC(out.dtype(), "arange", [&] {
    Generate<scalar_t>(out, [&](int64_t i) {
      const double v = (symmetric && i >= n / 2) ? end - step * static_cast<double>(n - 1 - i)
                                                 : start + step * static_cast<double>(i);
      return static_cast<scalar_t>(static_cast<opmath_t<scalar_t>>(v));
    });
  });
}

void UniformKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const double lo = c.attrs.alpha, hi = c.attrs.beta;
  const uint64_t key = c.attrs.seed, base = c.attrs.offset;
  ANVIL_DISPATCH_FLOATING(out.dtype(), "uniform_", [&] {
    Generate<scalar_t>(out, [&](int64_t i) {
      if constexpr (std::is_same_v<scalar_t, double>) {
        auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 2);
        const int lane = static_cast<int>(i % 2) * 2;
        return lo + (hi - lo) * uniform_double(r[lane], r[lane + 1]);
      } else {
        auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 4);
        // As many random bits as the type's mantissa holds, so rounding to the type can
        // never produce `hi` itself: 24 for float, 11 for float16, 8 for bfloat16.
        constexpr int bits = std::is_same_v<scalar_t, float> ? 24 : (std::is_same_v<scalar_t, Half> ? 11 : 8);
        const float u = static_cast<float>(r[i % 4] >> (32 - bits)) * (1.0f / static_cast<float>(1u << bits));
        return scalar_t(static_cast<float>(lo + (hi - lo) * u));
      }
    });
  });
}

void NormalKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const double mean = c.attrs.alpha, std = c.attrs.beta;
  const uint64_t key = c.attrs.seed, base = c.attrs.offset;
  ANVIL_DISPATCH_FLOATING(out.dtype(), "normal_", [&] {
    Generate<scalar_t>(out, [&](int64_t i) {
      // Box-Muller on one block per pair of elements: even -> cos, odd -> sin.
      auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 2);
      const double u1 = 1.0 - uniform_double(r[0], r[1]);  // (0, 1]: log is finite
      const double u2 = uniform_double(r[2], r[3]);
      const double rad = std::sqrt(-2.0 * std::log(u1));
      const double z = (i % 2 == 0) ? rad * std::cos(2 * M_PI * u2) : rad * std::sin(2 * M_PI * u2);
      return scalar_t(static_cast<opmath_t<scalar_t>>(mean + std * z));
    });
  });
}

// inputs[0]: probabilities (broadcast to out), or none (attrs.alpha = p).
void BernoulliKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const uint64_t key = c.attrs.seed, base = c.attrs.offset;
  const bool has_p = !c.inputs.empty();
  Tensor p = has_p ? c.inputs[0].to(kFloat64).expand(out.sizes()).contiguous() : Tensor();
  const double* pp = has_p ? p.data_ptr<double>() : nullptr;
  const double pconst = c.attrs.alpha;
  ANVIL_DISPATCH_ALL(out.dtype(), "bernoulli", [&] {
    Generate<scalar_t>(out, [&](int64_t i) {
      auto r = philox4x32(key, base + static_cast<uint64_t>(i) / 2);
      const int lane = static_cast<int>(i % 2) * 2;
      const double u = uniform_double(r[lane], r[lane + 1]);
      const double prob = pp ? pp[i] : pconst;
      return static_cast<scalar_t>(u < prob ? 1 : 0);
    });
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
