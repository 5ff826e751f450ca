// CPU kernels for im2col and col2im (dims layout: ops/im2col.cc). Both walk (n, c) planes in
// parallel; each plane's writes are its own, so col2im's sums need no atomics and are
// deterministic. Inner loops run along output columns, contiguous in the column matrix.
#include "core/backend/cpu/kernels.h"
#include "core/ops/functors.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {
namespace {

struct Geom {
  int64_t N, C, H, W, KH, KW, SH, SW, PT, PL, DH, DW, OH, OW;
};

Geom MakeGeom(const IntArray& d, int64_t N, int64_t C) {
  Geom g{N, C, d[10], d[11], d[0], d[1], d[2], d[3], d[4], d[6], d[8], d[9], 0, 0};
  g.OH = (g.H + d[4] + d[5] - g.DH * (g.KH - 1) - 1) / g.SH + 1;
  g.OW = (g.W + d[6] + d[7] - g.DW * (g.KW - 1) - 1) / g.SW + 1;
  return g;
}

template <typename T>
void Im2ColPlane(const T* in, T* cols, const Geom& g) {  // one (n, c): KH*KW rows of OH*OW
  for (int64_t i = 0; i < g.KH; ++i) {
    for (int64_t j = 0; j < g.KW; ++j) {
      T* row = cols + (i * g.KW + j) * g.OH * g.OW;
      for (int64_t oy = 0; oy < g.OH; ++oy) {
        const int64_t y = oy * g.SH - g.PT + i * g.DH;
        T* out = row + oy * g.OW;
        if (y < 0 || y >= g.H) {
          for (int64_t ox = 0; ox < g.OW; ++ox) out[ox] = T(0);
          continue;
        }
        const T* src = in + y * g.W;
        const int64_t x0 = j * g.DW - g.PL;
        for (int64_t ox = 0; ox < g.OW; ++ox) {
          const int64_t x = x0 + ox * g.SW;
          out[ox] = (x >= 0 && x < g.W) ? src[x] : T(0);
        }
      }
    }
  }
}

template <typename T>
void Col2ImPlane(const T* cols, T* out, const Geom& g) {
  for (int64_t k = 0; k < g.H * g.W; ++k) out[k] = T(0);
  for (int64_t i = 0; i < g.KH; ++i) {
    for (int64_t j = 0; j < g.KW; ++j) {
      const T* row = cols + (i * g.KW + j) * g.OH * g.OW;
      for (int64_t oy = 0; oy < g.OH; ++oy) {
        const int64_t y = oy * g.SH - g.PT + i * g.DH;
        if (y < 0 || y >= g.H) continue;
        T* dst = out + y * g.W;
        const T* src = row + oy * g.OW;
        const int64_t x0 = j * g.DW - g.PL;
        for (int64_t ox = 0; ox < g.OW; ++ox) {
          const int64_t x = x0 + ox * g.SW;
          if (x >= 0 && x < g.W) dst[x] = T(opmath_t<T>(dst[x]) + opmath_t<T>(src[ox]));
        }
      }
    }
  }
}

void Im2ColKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const Geom g = MakeGeom(c.attrs.dims, in.size(0), in.size(1));
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
  const Geom g = MakeGeom(c.attrs.dims, out.size(0), out.size(1));
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

void RegisterIm2ColKernels(KernelTable& t) {
  t[static_cast<int>(OpId::Im2Col)] = &Im2ColKernel;
  t[static_cast<int>(OpId::Col2Im)] = &Col2ImKernel;
}

}  // namespace anvil::cpu
