// CPU kernels for the element-wise rows (unary, binary, where, cast/clone), built from the
// shared functors in core/ops/functors.h.
#include "core/backend/common/cast_dispatch.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/backend/elementwise_kernels.h"
#include "core/ops/functors.h"

namespace anvil::cpu {
namespace {

// Output of type Out from input of type T, computing in opmath_t<T>.
template <typename T, typename F>
void Unary(const Tensor& out, const Tensor& x, const F& f) {
  using M = opmath_t<T>;
  using R = decltype(f(M{}));
  if constexpr (std::is_same_v<R, bool>) {
    ElementwiseKernel<bool, T, 1>(out, {&x}, [f](T a) { return f(M(a)); });
  } else {
    ElementwiseKernel<T, T, 1>(out, {&x}, [f](T a) { return T(f(M(a))); });
  }
}

template <typename T, typename F>
void Binary(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  using M = opmath_t<T>;
  using R = decltype(f(M{}, M{}));
  if constexpr (std::is_same_v<R, bool>) {
    ElementwiseKernel<bool, T, 2>(out, {&a, &b}, [f](T x, T y) { return f(M(x), M(y)); });
  } else {
    ElementwiseKernel<T, T, 2>(out, {&a, &b}, [f](T x, T y) { return T(f(M(x), M(y))); });
  }
}

// Integer division by zero has no value: an error, as PyTorch's.
void CheckNoZeroDivisor(const Tensor& b, OpId op) {
  ANVIL_DISPATCH_ALL(b.dtype(), "division", [&] {
    if constexpr (std::is_integral_v<scalar_t> && !std::is_same_v<scalar_t, bool>) {
      StridedLoop<1> loop;
      loop.Build({&b});
      bool zero = false;
      loop.Run(0, loop.numel(), [&](char** p, const int64_t* st, int64_t n) {
        for (int64_t j = 0; j < n; ++j) zero |= *reinterpret_cast<scalar_t*>(p[0] + j * st[0]) == 0;
      });
      ANVIL_CHECK(!zero, "ZeroDivisionError: integer ", op_name(op), " by zero");
    }
  });
}

// The loops behind the shared element-wise rows (core/backend/elementwise_kernels.h).
ANVIL_ELEMENTWISE_LOOPS(CpuLoops)

void WhereKernel(const KernelCall& c) {
  const Tensor &cond = c.inputs[0], &x = c.inputs[1], &y = c.inputs[2];
  ANVIL_DISPATCH_ALL(x.dtype(), "where", [&] {
    StridedLoop<4> loop;
    loop.Build({&c.outputs[0], &cond, &x, &y});
    loop.ParallelRun([&](char** p, const int64_t* st, int64_t n) {
      // __restrict: the output never overlaps an input here (the dispatcher allocates it), and
      // without the promise GCC keeps a scalar loop with a branch per element.
      scalar_t* __restrict o = reinterpret_cast<scalar_t*>(p[0]);
      const uint8_t* __restrict k = reinterpret_cast<const uint8_t*>(p[1]);
      const scalar_t* __restrict a = reinterpret_cast<const scalar_t*>(p[2]);
      const scalar_t* __restrict b = reinterpret_cast<const scalar_t*>(p[3]);
      constexpr auto kSize = static_cast<int64_t>(sizeof(scalar_t));
      const int64_t so = st[0] / kSize, sk = st[1], sa = st[2] / kSize, sb = st[3] / kSize;
      // Both sides are loaded and the condition selects (no branch on data), so the loops
      // if-convert and vectorise; a branch mispredicts on half of random signs (ReLU's backward).
      if (so == 1 && sk == 1 && sa == 1 && sb == 1) {
        for (int64_t j = 0; j < n; ++j) {
          const scalar_t va = a[j], vb = b[j];
          o[j] = k[j] != 0 ? va : vb;
        }
      } else if (so == 1 && sk == 1 && sa == 1 && sb == 0) {
        const scalar_t vb = b[0];
        for (int64_t j = 0; j < n; ++j) {
          const scalar_t va = a[j];
          o[j] = k[j] != 0 ? va : vb;
        }
      } else if (so == 1 && sk == 1 && sa == 0 && sb == 1) {
        const scalar_t va = a[0];
        for (int64_t j = 0; j < n; ++j) {
          const scalar_t vb2 = b[j];
          o[j] = k[j] != 0 ? va : vb2;
        }
      } else if (so == 1 && sk == 1 && sa == 0 && sb == 0) {  // e.g. ReLU's backward of a sum
        const scalar_t va = a[0], vb = b[0];
        for (int64_t j = 0; j < n; ++j) o[j] = k[j] != 0 ? va : vb;
      } else {
        for (int64_t j = 0; j < n; ++j) {
          const scalar_t va = a[j * sa], vb = b[j * sb];
          o[j * so] = k[j * sk] != 0 ? va : vb;
        }
      }
    });
  });
}

// Also the copy_ kernel: writes input (broadcast to the output's shape) converted to the
// output's dtype, into any output layout.
void CastKernel(const KernelCall& c) {
  backend::DispatchCast(c, [&]<typename In, typename Out>() {
    ElementwiseKernel<Out, In, 1>(c.outputs[0], {&c.inputs[0]}, [](In v) {
      if constexpr (std::is_same_v<Out, bool>)
        return static_cast<float>(v) != 0.0f;
      else if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>)
        return Out(static_cast<float>(v));
      else if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>)
        return Out(static_cast<float>(v));
      else
        return static_cast<Out>(v);
    });
  });
}

void CloneKernel(const KernelCall& c) { CastKernel(c); }

}  // namespace

void CopyInto(const Tensor& dst, const Tensor& src) {
  std::vector<Tensor> outs{dst};
  CastKernel(KernelCall{OpId::Cast, {src}, outs, OpAttrs{}});
}

#define ANVIL_ELEMENTWISE_SLOT(Id) ANVIL_KERNEL_SLOT(Id, elementwise_kernels::Id<CpuLoops>)
#include "core/backend/elementwise_slot_rows.def"
#undef ANVIL_ELEMENTWISE_SLOT
ANVIL_KERNEL_SLOT(Where, WhereKernel)
ANVIL_KERNEL_SLOT(Cast, CastKernel)
ANVIL_KERNEL_SLOT(Clone, CloneKernel)

}  // namespace anvil::cpu
