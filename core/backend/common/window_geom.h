// One window call's geometry (batch, channels, image, window and output size), the same for
// the CPU's loops and the CUDA kernels: made from the row's WindowArgs in one place.
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

}  // namespace anvil::backend
