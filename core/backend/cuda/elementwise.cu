// CUDA kernels for the element-wise rows (unary, binary, where, cast/clone), built from the
// same functors as the CPU kernels (core/ops/elementwise_rows.def, core/ops/functors.h).
#include "core/backend/common/cast_dispatch.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/backend/elementwise_kernels.h"
#include "core/ops/functions.h"
#include "core/ops/functors.h"

namespace anvil::cuda {
namespace {

// Computes in opmath_t<In> (float for the 16-bit floats), stores as Out.
template <typename Out, typename In, typename F>
struct UnaryBody {
  F f;
  __device__ __forceinline__ void operator()(char** p) const {
    using M = opmath_t<In>;
    *reinterpret_cast<Out*>(p[0]) = Out(f(M(*reinterpret_cast<const In*>(p[1]))));
  }
};

template <typename Out, typename In, typename F>
struct BinaryBody {
  F f;
  __device__ __forceinline__ void operator()(char** p) const {
    using M = opmath_t<In>;
    *reinterpret_cast<Out*>(p[0]) =
        Out(f(M(*reinterpret_cast<const In*>(p[1])), M(*reinterpret_cast<const In*>(p[2]))));
  }
};

template <typename T>
struct WhereBody {
  __device__ __forceinline__ void operator()(char** p) const {
    const bool k = *reinterpret_cast<const uint8_t*>(p[1]) != 0;
    *reinterpret_cast<T*>(p[0]) = k ? *reinterpret_cast<const T*>(p[2]) : *reinterpret_cast<const T*>(p[3]);
  }
};

template <typename Out, typename In>
struct CastBody {
  __device__ __forceinline__ void operator()(char** p) const {
    const In v = *reinterpret_cast<const In*>(p[1]);
    Out& o = *reinterpret_cast<Out*>(p[0]);
    if constexpr (std::is_same_v<Out, bool>)
      o = static_cast<float>(v) != 0.0f;
    else if constexpr (std::is_same_v<In, Half> || std::is_same_v<In, BFloat16>)
      o = Out(static_cast<float>(v));
    else if constexpr (std::is_same_v<Out, Half> || std::is_same_v<Out, BFloat16>)
      o = Out(static_cast<float>(v));
    else
      o = static_cast<Out>(v);
  }
};

template <typename T, typename F>
void Unary(const Tensor& out, const Tensor& x, const F& f) {
  using R = decltype(f(opmath_t<T>{}));
  if constexpr (std::is_same_v<R, bool>)
    LaunchElementwise<2>({&out, &x}, UnaryBody<bool, T, F>{f});
  else
    LaunchElementwise<2>({&out, &x}, UnaryBody<T, T, F>{f});
}

template <typename T, typename F>
void Binary(const Tensor& out, const Tensor& a, const Tensor& b, const F& f) {
  using R = decltype(f(opmath_t<T>{}, opmath_t<T>{}));
  if constexpr (std::is_same_v<R, bool>)
    LaunchElementwise<3>({&out, &a, &b}, BinaryBody<bool, T, F>{f});
  else
    LaunchElementwise<3>({&out, &a, &b}, BinaryBody<T, T, F>{f});
}

template <typename T>
struct FlagZeroBody {
  int* flag;
  __device__ __forceinline__ void operator()(char** p) const {
    if (*reinterpret_cast<const T*>(p[0]) == T(0)) *flag = 1;
  }
};

// Integer division by zero is an error on the CPU; the GPU says the same, at the price of one
// device-to-host read for integer divisions only.
void CheckNoZeroDivisor(const Tensor& b, OpId op) {
  ANVIL_DISPATCH_ALL(b.dtype(), "division", [&] {
    if constexpr (std::is_integral_v<scalar_t> && !std::is_same_v<scalar_t, bool>) {
      const int device = b.device().index;
      DeviceGuard guard(device);
      Tensor flag = zeros({1}, TensorOptions(kInt32).with_device(b.device()));
      LaunchElementwise<1>({&b}, FlagZeroBody<scalar_t>{flag.data_ptr<int>()});
      ANVIL_CHECK(flag.item<int>() == 0, "ZeroDivisionError: integer ", op_name(op), " by zero");
    }
  });
}

// The loops behind the shared element-wise rows (core/backend/elementwise_kernels.h).
ANVIL_ELEMENTWISE_LOOPS(CudaLoops)

void WhereKernel(const KernelCall& c) {
  ANVIL_DISPATCH_ALL(c.inputs[1].dtype(), "where", [&] {
    LaunchElementwise<4>({&c.outputs[0], &c.inputs[0], &c.inputs[1], &c.inputs[2]}, WhereBody<scalar_t>{});
  });
}

// Also the copy_ kernel: the input broadcast to the output's shape, converted to its dtype,
// into any output layout.
void CastKernel(const KernelCall& c) {
  backend::DispatchCast(c, [&]<typename In, typename Out>() {
    LaunchElementwise<2>({&c.outputs[0], &c.inputs[0]}, CastBody<Out, In>{});
  });
}

void CloneKernel(const KernelCall& c) { CastKernel(c); }

}  // namespace

#define ANVIL_ELEMENTWISE_SLOT(Id) ANVIL_KERNEL_SLOT(Id, elementwise_kernels::Id<CudaLoops>)
#include "core/backend/elementwise_slot_rows.def"
#undef ANVIL_ELEMENTWISE_SLOT
ANVIL_KERNEL_SLOT(Where, WhereKernel)
ANVIL_KERNEL_SLOT(Cast, CastKernel)
ANVIL_KERNEL_SLOT(Clone, CloneKernel)

}  // namespace anvil::cuda
