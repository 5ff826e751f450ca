// One window call's geometry (batch, channels, image, window and output size) and a
// convolution's GEMM shape, the same for the CPU's loops and the CUDA kernels: made from the
// row's WindowArgs in one place.
#pragma once

#include <cstdint>

#include "core/ops/window_args.h"

namespace anvil::backend {

struct Geom {
  int64_t N, C, H, W, KH, KW, SH, SW, PT, PL, DH, DW, OH, OW;
};

inline Geom MakeGeom(const WindowArgs& w, int64_t N, int64_t C) {
  return {N,          C,          w.height,     w.width,    w.kernel_h, w.kernel_w, w.stride_h,
          w.stride_w, w.pad_top,  w.pad_left,   w.dilation_h, w.dilation_w, w.out_h(), w.out_w()};
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

}  // namespace anvil::backend
