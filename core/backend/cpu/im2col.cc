// CPU kernels for im2col and col2im (dims layout: ops/im2col.cc). Both walk (n, c) planes in
// parallel; each plane's writes are its own, so col2im's sums need no atomics and are
// deterministic. Inner loops run along output columns, contiguous in the column matrix.
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

void Col2ImKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = MakeGeom(c.attrs.get<WindowArgs>(), out.size(0), out.size(1));
  ANVIL_DISPATCH_FLOATING(in.dtype(), "col2im", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    scalar_t* dst = out.data_ptr<scalar_t>();
    const int64_t plane_in = g.KH * g.KW * g.OH * g.OW, plane_out = g.H * g.W;
    parallel_for(0, g.N * g.C, 1, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) Col2ImPlane(src + p * plane_in, dst + p * plane_out, g);
    });
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(Im2Col, Im2ColKernel)
ANVIL_KERNEL_SLOT(Col2Im, Col2ImKernel)

}  // namespace anvil::cpu
