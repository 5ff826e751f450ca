// The element-wise rows' kernels (core/ops/elementwise_rows.def, plus gelu and pow with a
// scalar), written once for every backend. A backend supplies the loops:
//   B::unary<T>(out, x, f)      out = f(x) computed in opmath_t<T>, out bool when f returns bool
//   B::binary<T>(out, a, b, f)  out = f(a, b), a and b broadcast to out
//   B::check_divisor(b, op)     throws if an integer b holds a zero (the ANVIL_DIVIDING rows)
// and registers the rows with extra logic itself (where, casts).
#pragma once

#include "core/backend/registry.h"
#include "core/ops/functors.h"

namespace anvil::elementwise_kernels {

#define ANVIL_UNARY(Name, DISPATCH, MAKE)                                                                \
  template <typename B>                                                                                  \
  void Name(const KernelCall& c) {                                                                       \
    const auto& a = c.attrs;                                                                             \
    (void)a;                                                                                             \
    auto f = MAKE;                                                                                       \
    DISPATCH(c.inputs[0].dtype(), #Name, [&] { B::template unary<scalar_t>(c.outputs[0], c.inputs[0], f); }); \
  }
#define ANVIL_BINARY(Name, DISPATCH, MAKE)                                                       \
  template <typename B>                                                                          \
  void Name(const KernelCall& c) {                                                               \
    const auto& a = c.attrs;                                                                     \
    (void)a;                                                                                     \
    auto f = MAKE;                                                                               \
    DISPATCH(c.inputs[0].dtype(), #Name,                                                         \
             [&] { B::template binary<scalar_t>(c.outputs[0], c.inputs[0], c.inputs[1], f); });  \
  }
#define ANVIL_DIVIDING(Name, DISPATCH, MAKE)                                                     \
  template <typename B>                                                                          \
  void Name(const KernelCall& c) {                                                               \
    B::check_divisor(c.inputs[1], c.op);                                                         \
    auto f = MAKE;                                                                               \
    DISPATCH(c.inputs[0].dtype(), #Name,                                                         \
             [&] { B::template binary<scalar_t>(c.outputs[0], c.inputs[0], c.inputs[1], f); });  \
  }
#include "core/ops/elementwise_rows.def"
#undef ANVIL_UNARY
#undef ANVIL_BINARY
#undef ANVIL_DIVIDING

template <typename B>
void Gelu(const KernelCall& c) {
  ANVIL_DISPATCH_FLOATING(c.inputs[0].dtype(), "gelu", [&] {
    if (c.attrs.get<GeluArgs>().tanh_approximation) B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::GeluF<true>{});
    else B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::GeluF<false>{});
  });
}

template <typename B>
void PowScalar(const KernelCall& c) {
  ANVIL_DISPATCH_NUMERIC(c.inputs[0].dtype(), "pow", [&] {
    if (c.attrs.get<PowScalarArgs>().exponent == 2.0) B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::SquareF{});
    else B::template unary<scalar_t>(c.outputs[0], c.inputs[0], fn::PowScalarF{c.attrs.get<PowScalarArgs>().exponent});
  });
}

template <typename B>
void Register(KernelTable& t) {
#define ANVIL_UNARY(Name, ...) t[static_cast<int>(OpId::Name)] = &Name<B>;
#define ANVIL_BINARY(Name, ...) t[static_cast<int>(OpId::Name)] = &Name<B>;
#define ANVIL_DIVIDING(Name, ...) t[static_cast<int>(OpId::Name)] = &Name<B>;
#include "core/ops/elementwise_rows.def"
#undef ANVIL_UNARY
#undef ANVIL_BINARY
#undef ANVIL_DIVIDING
  t[static_cast<int>(OpId::Gelu)] = &Gelu<B>;
  t[static_cast<int>(OpId::PowScalar)] = &PowScalar<B>;
}

}  // namespace anvil::elementwise_kernels
