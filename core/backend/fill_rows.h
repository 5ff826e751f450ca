// The random and arange rows of the op table, written once for every backend: each backend
// supplies `Gen::run<T>(out, f)`, which stores f(i) into element i (row-major) of `out`,
// and the per-element draws come from core/ops/random_draws.h. So a seeded draw is the same
// numbers on every device.
#pragma once

#include "core/backend/kernel_slots.h"
#include "core/backend/registry.h"
#include "core/ops/functions.h"
#include "core/ops/random_draws.h"

namespace anvil::fill_rows {

// The fill value as T: nonzero is true for bool; other types convert through opmath_t<T>.
template <typename T>
T FillValue(double v) {
  if constexpr (std::is_same_v<T, bool>)
    return v != 0;
  else
    return static_cast<T>(static_cast<opmath_t<T>>(v));
}

template <typename Gen>
void Arange(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const ArangeArgs& a = c.attrs.get<ArangeArgs>();
  ANVIL_DISPATCH_NUMERIC(out.dtype(), "arange", [&] {
    Gen::template run<scalar_t>(out, fn::ArangeDraw<scalar_t>{a.start, a.step, a.end, a.symmetric, out.numel()});
  });
}

template <typename Gen>
void Uniform(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const UniformArgs& a = c.attrs.get<UniformArgs>();
  ANVIL_DISPATCH_FLOATING(out.dtype(), "uniform_", [&] {
    Gen::template run<scalar_t>(out, fn::UniformDraw<scalar_t>{a.low, a.high, a.philox.seed, a.philox.offset});
  });
}

template <typename Gen>
void Normal(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const NormalArgs& a = c.attrs.get<NormalArgs>();
  ANVIL_DISPATCH_FLOATING(out.dtype(), "normal_", [&] {
    Gen::template run<scalar_t>(out, fn::NormalDraw<scalar_t>{a.mean, a.std, a.philox.seed, a.philox.offset});
  });
}

// inputs[0]: probabilities (broadcast to out), or none (BernoulliArgs::p). The probabilities
// are made contiguous float64 on out's device first, so element i reads p[i].
template <typename Gen>
void Bernoulli(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  const BernoulliArgs& a = c.attrs.get<BernoulliArgs>();
  const bool has_p = !c.inputs.empty();
  Tensor p = has_p ? c.inputs[0].to(kFloat64).expand(out.sizes()).contiguous() : Tensor();
  const double* pp = has_p ? p.data_ptr<double>() : nullptr;
  ANVIL_DISPATCH_ALL(out.dtype(), "bernoulli", [&] {
    Gen::template run<scalar_t>(out, fn::BernoulliDraw<scalar_t>{a.philox.seed, a.philox.offset, pp, a.p});
  });
}

}  // namespace anvil::fill_rows

// Declares `struct Name`, a backend's generator for these rows, from the Generate<T>(out, f)
// of the namespace it is expanded in.
#define ANVIL_FILL_GENERATOR(Name)                   \
  struct Name {                                      \
    template <typename T, typename F>                \
    static void run(const Tensor& out, const F& f) { \
      Generate<T>(out, f);                           \
    }                                                \
  };

// Defines the four rows' kernel slots (core/backend/kernel_slots.h) with generator Gen.
#define ANVIL_FILL_ROW_SLOTS(Gen)                     \
  ANVIL_KERNEL_SLOT(Arange, fill_rows::Arange<Gen>)   \
  ANVIL_KERNEL_SLOT(Uniform, fill_rows::Uniform<Gen>) \
  ANVIL_KERNEL_SLOT(Normal, fill_rows::Normal<Gen>)   \
  ANVIL_KERNEL_SLOT(Bernoulli, fill_rows::Bernoulli<Gen>)
