// CPU kernels for im2col and col2im (dims layout: ops/im2col.cc). Both walk (n, c) planes in
// parallel; each plane's writes are its own, so col2im's sums need no atomics and are
// deterministic. Inner loops run along output columns, contiguous in the column matrix.
#include <type_traits>
#include <vector>

#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/window.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {
namespace {

void Im2ColKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = MakeGeom(c.attrs.get<WindowArgs>(), in.size(0), in.size(1));
  ANVIL_DISPATCH_FLOATING(in.dtype(), "im2col", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    const int64_t plane_in = g.H * g.W, plane_out = g.KH * g.KW * g.OH * g.OW;
    parallel_for(0, g.N * g.C, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) Im2ColPlane(src + p * plane_in, dst + p * plane_out, g);
    });
  });
}

// 16-bit floats: each plane summed in float32 and rounded once (the sums of overlapping
// windows, a 3x3 stride-1 pooling's gradient, would otherwise round at every add), then
// narrowed in one vectorised pass.
template <typename T>
void Col2ImWidened(const T* src, T* dst, const Geom& g) {
  const int64_t plane_in = g.KH * g.KW * g.OH * g.OW, plane_out = g.H * g.W;
  parallel_for(0, g.N * g.C, 1, [&](int64_t b, int64_t e) {
    std::vector<float> acc(static_cast<size_t>(plane_out));
    for (int64_t p = b; p < e; ++p) {
      Col2ImPlane<T, float>(src + p * plane_in, acc.data(), g);
      T* o = dst + p * plane_out;
      if constexpr (std::is_same_v<T, BFloat16>) {
        float_to_bf16(acc.data(), reinterpret_cast<uint16_t*>(o), plane_out);
      } else {
        for (int64_t i = 0; i < plane_out; ++i) o[i] = T(acc[static_cast<size_t>(i)]);
      }
    }
  });
}

void Col2ImKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = MakeGeom(c.attrs.get<WindowArgs>(), out.size(0), out.size(1));
  ANVIL_DISPATCH_FLOATING(in.dtype(), "col2im", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    if constexpr (std::is_same_v<scalar_t, BFloat16> || std::is_same_v<scalar_t, Half>) {
      Col2ImWidened(src, dst, g);
    } else {
      const int64_t plane_in = g.KH * g.KW * g.OH * g.OW, plane_out = g.H * g.W;
      parallel_for(0, g.N * g.C, 1, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) Col2ImPlane(src + p * plane_in, dst + p * plane_out, g);
      });
    }
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(Im2Col, Im2ColKernel)
ANVIL_KERNEL_SLOT(Col2Im, Col2ImKernel)

}  // namespace anvil::cpu
