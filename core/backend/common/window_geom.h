// One window call's geometry (batch, channels, image, window and output size) and a
// convolution's GEMM shape, the same for the CPU's loops and the CUDA kernels: made from the
// row's WindowArgs in one place.
#pragma once

#include <cstdint>

#include "core/backend/registry.h"
#include "core/ops/window_args.h"

namespace anvil::backend {

struct Geom {
  int64_t N, C, H, W, KH, KW, SH, SW, PT, PL, DH, DW, OH, OW;
};

inline Geom MakeGeom(const WindowArgs& w, int64_t N, int64_t C) {
  return {N,          C,         w.height,   w.width,      w.kernel_h,   w.kernel_w, w.stride_h,
          w.stride_w, w.pad_top, w.pad_left, w.dilation_h, w.dilation_w, w.out_h(),  w.out_w()};
}

// A convolution call's shape: the window geometry plus the GEMM sizes per group.
struct ConvShape {
  Geom g;                          // N, C (input channels), H, W, window, OH, OW
  int64_t OC, G, OCg, K, L, rows;  // K = C / G * KH * KW per group; rows = C * KH * KW
  bool direct;                     // 1x1, stride 1, no padding: columns = the image itself
};

inline ConvShape MakeConvShape(const WindowArgs& w, int64_t N, int64_t C, int64_t OC) {
  ConvShape s;
  s.g = MakeGeom(w, N, C);
  s.OC = OC;
  s.G = w.groups;
  s.OCg = OC / s.G;
  s.K = (C / s.G) * s.g.KH * s.g.KW;
  s.L = s.g.OH * s.g.OW;
  s.rows = C * s.g.KH * s.g.KW;
  s.direct = s.g.KH == 1 && s.g.KW == 1 && s.g.SH == 1 && s.g.SW == 1 && !w.padded();
  return s;
}

// The shape of a call of one of the three convolution rows, from where each keeps N, C and OC:
// Conv2d (x, w[, b]): x and w; Conv2dInputGrad (gy, w) -> grad_x: the output and w;
// Conv2dWeightGrad (gy, x) -> grad_w: x and gy's channels.
inline ConvShape ConvShapeOf(const KernelCall& c) {
  const WindowArgs& w = c.attrs.get<WindowArgs>();
  switch (c.op) {
    case OpId::Conv2d:
      return MakeConvShape(w, c.inputs[0].size(0), c.inputs[0].size(1), c.inputs[1].size(0));
    case OpId::Conv2dInputGrad:
      return MakeConvShape(w, c.outputs[0].size(0), c.outputs[0].size(1), c.inputs[1].size(0));
    default:  // Conv2dWeightGrad
      return MakeConvShape(w, c.inputs[1].size(0), c.inputs[1].size(1), c.inputs[0].size(1));
  }
}

// Conv2d's operands as its forward kernels read them: input, weight and bias (undefined when
// absent) made contiguous, and the call's shape.
struct ConvForwardOperands {
  Tensor x, w, b;
  ConvShape s;
};
inline ConvForwardOperands MakeConvForwardOperands(const KernelCall& call) {
  ConvForwardOperands o;
  o.x = call.inputs[0].contiguous();
  o.w = call.inputs[1].contiguous();
  o.b = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  o.s = MakeConvShape(call.attrs.get<WindowArgs>(), o.x.size(0), o.x.size(1), o.w.size(0));
  return o;
}

}  // namespace anvil::backend
