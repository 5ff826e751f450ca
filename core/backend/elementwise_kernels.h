// The element-wise rows' kernels, written once for every backend: every row of the op table
// whose Kernel column is Functor, FunctorAll or Dividing runs its functor fn::<Id>F
// (core/ops/functors.h) through a backend's loops; gelu and pow with a scalar are written out
// below. A backend supplies
//   B::unary<T>(out, x, f)      out = f(x) computed in opmath_t<T>, out bool when f returns bool
//   B::binary<T>(out, a, b, f)  out = f(a, b), a and b broadcast to out
//   B::check_divisor(b, op)     throws if an integer b holds a zero (the Dividing rows)
// and defines these rows' slots by expanding core/backend/elementwise_slot_rows.def with
// ANVIL_ELEMENTWISE_SLOT (and where, cast and clone, which it writes itself, with
// ANVIL_KERNEL_SLOT).
#pragma once

#include <type_traits>

#include "core/backend/registry.h"
#include "core/ops/functors.h"

namespace anvil::elementwise_kernels {

// Declares `struct Name`, a backend's loops for these rows, from the Unary<T>(out, x, f),
// Binary<T>(out, a, b, f) and CheckNoZeroDivisor(b, op) of the namespace it is expanded in.
#define ANVIL_ELEMENTWISE_LOOPS(Name)                                                     \
  struct Name {                                                                           \
    static void check_divisor(const Tensor& b, OpId op) { CheckNoZeroDivisor(b, op); }    \
    template <typename T, typename F>                                                     \
    static void unary(const Tensor& out, const Tensor& x, const F& f) {                   \
      Unary<T>(out, x, f);                                                                \
    }                                                                                     \
    template <typename T, typename F>                                                     \
    static void binary(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) { \
      Binary<T>(out, a, b, f);                                                            \
    }                                                                                     \
  };

// A row's functor, built from its Args struct (default-constructed when the row has none).
template <typename F, typename Args>
F MakeFunctor(const OpAttrs& a) {
  if constexpr (std::is_same_v<Args, NoArgs>) {
    return F{};
  } else {
    return F::from(a.get<Args>());
  }
}

// The dtypes a Functor row runs over, by its Infer family (NOTE in op_table.def).
#define ANVIL_EW_DISPATCH_UnaryKeep ANVIL_DISPATCH_NUMERIC
#define ANVIL_EW_DISPATCH_UnaryFloat ANVIL_DISPATCH_FLOATING
#define ANVIL_EW_DISPATCH_UnaryFloating ANVIL_DISPATCH_FLOATING
#define ANVIL_EW_DISPATCH_UnaryBool ANVIL_DISPATCH_ALL
#define ANVIL_EW_DISPATCH_BinaryArith ANVIL_DISPATCH_NUMERIC
#define ANVIL_EW_DISPATCH_BinaryFloat ANVIL_DISPATCH_FLOATING
#define ANVIL_EW_DISPATCH_BinaryCompare ANVIL_DISPATCH_ALL
#define ANVIL_EW_DISPATCH_BinaryLogical ANVIL_DISPATCH_ALL

#define ANVIL_EW_Unary(Id, DISPATCH, Args, kDividing)                                                       \
  template <typename B>                                                                                     \
  void Id(const KernelCall& c) {                                                                            \
    const auto f = MakeFunctor<fn::Id##F, Args>(c.attrs);                                                   \
    DISPATCH(c.inputs[0].dtype(), #Id, [&] { B::template unary<scalar_t>(c.outputs[0], c.inputs[0], f); }); \
  }
#define ANVIL_EW_Binary(Id, DISPATCH, Args, kDividing)                                          \
  template <typename B>                                                                         \
  void Id(const KernelCall& c) {                                                                \
    if constexpr (kDividing) B::check_divisor(c.inputs[1], c.op);                               \
    const auto f = MakeFunctor<fn::Id##F, Args>(c.attrs);                                       \
    DISPATCH(c.inputs[0].dtype(), #Id,                                                          \
             [&] { B::template binary<scalar_t>(c.outputs[0], c.inputs[0], c.inputs[1], f); }); \
  }
#define ANVIL_EW_KERNEL_Functor(Id, kind, infer, Args) ANVIL_EW_##kind(Id, ANVIL_EW_DISPATCH_##infer, Args, false)
#define ANVIL_EW_KERNEL_FunctorAll(Id, kind, infer, Args) ANVIL_EW_##kind(Id, ANVIL_DISPATCH_ALL, Args, false)
#define ANVIL_EW_KERNEL_Dividing(Id, kind, infer, Args) ANVIL_EW_##kind(Id, ANVIL_EW_DISPATCH_##infer, Args, true)
#define ANVIL_EW_KERNEL_Own(Id, kind, infer, Args)
#define ANVIL_EW_KERNEL_NoKernel(Id, kind, infer, Args)
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, ...) \
  ANVIL_EW_KERNEL_##kernel(Id, kind, infer, args)
#include "core/ops/op_table.def"
#undef ANVIL_OP

template <typename B>
void Gelu(const KernelCall& c) {
  ANVIL_DISPATCH_FLOATING(c.inputs[0].dtype(), "gelu", [&] {
    if (c.attrs.get<GeluArgs>().tanh_approximation)
      B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::GeluF<true>{});
    else
      B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::GeluF<false>{});
  });
}

template <typename B>
void PowScalar(const KernelCall& c) {
  ANVIL_DISPATCH_NUMERIC(c.inputs[0].dtype(), "pow", [&] {
    if (c.attrs.get<PowScalarArgs>().exponent == 2.0)
      B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::SquareF{});
    else
      B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::PowScalarF{c.attrs.get<PowScalarArgs>().exponent});
  });
}

}  // namespace anvil::elementwise_kernels
