// The per-plane im2col / col2im loops, shared by the Im2Col/Col2Im kernels and the fused
// convolution kernels (the geometry: backend/common/window_geom.h).
#pragma once

#include <algorithm>

#include "core/backend/common/window_geom.h"
#include "core/ops/functors.h"

namespace anvil::cpu {

using backend::Geom;
using backend::MakeGeom;

// The output columns ox whose input column x0 + ox * SW lies inside [0, W): [lo, hi).
inline void ValidColumns(const Geom& g, int64_t x0, int64_t& lo, int64_t& hi) {
  lo = x0 >= 0 ? 0 : (-x0 + g.SW - 1) / g.SW;
  hi = g.W - x0 <= 0 ? 0 : std::min(g.OW, (g.W - x0 + g.SW - 1) / g.SW);
  lo = std::min(lo, hi);
}

// One (n, c) plane: KH*KW rows of OH*OW columns. Padding columns are written as zeros outside
// the copy loop, so the inner loop has no bounds test (and is a memcpy for stride 1).
template <typename T>
void Im2ColPlane(const T* in, T* cols, const Geom& g) {
  for (int64_t i = 0; i < g.KH; ++i) {
    for (int64_t j = 0; j < g.KW; ++j) {
      T* row = cols + (i * g.KW + j) * g.OH * g.OW;
      const int64_t x0 = j * g.DW - g.PL;
      int64_t lo, hi;
      ValidColumns(g, x0, lo, hi);
      for (int64_t oy = 0; oy < g.OH; ++oy) {
        const int64_t y = oy * g.SH - g.PT + i * g.DH;
        T* out = row + oy * g.OW;
        if (y < 0 || y >= g.H) {
          std::fill(out, out + g.OW, T(0));
          continue;
        }
        const T* src = in + y * g.W;  // input column of ox: x0 + ox * SW, inside the row for [lo, hi)
        std::fill(out, out + lo, T(0));
        if (g.SW == 1) {
          std::copy(src + x0 + lo, src + x0 + hi, out + lo);
        } else {
          for (int64_t ox = lo; ox < hi; ++ox) out[ox] = src[x0 + ox * g.SW];
        }
        std::fill(out + hi, out + g.OW, T(0));
      }
    }
  }
}

// The adjoint: sums every window's column back into its input position, in `Out` (T, or
// float for 16-bit columns, so that overlapping windows' sums round once, at the end).
template <typename T, typename Out = T>
void Col2ImPlane(const T* cols, Out* out, const Geom& g) {
  std::fill(out, out + g.H * g.W, Out(0));
  for (int64_t i = 0; i < g.KH; ++i) {
    for (int64_t j = 0; j < g.KW; ++j) {
      const T* row = cols + (i * g.KW + j) * g.OH * g.OW;
      const int64_t x0 = j * g.DW - g.PL;
      int64_t lo, hi;
      ValidColumns(g, x0, lo, hi);
      for (int64_t oy = 0; oy < g.OH; ++oy) {
        const int64_t y = oy * g.SH - g.PT + i * g.DH;
        if (y < 0 || y >= g.H) continue;
        Out* dst = out + y * g.W;
        const T* src = row + oy * g.OW;
        if (g.SW == 1) {  // contiguous: vectorises
          Out* d = dst + (x0 + lo);
          const T* s = src + lo;
          for (int64_t t = 0; t < hi - lo; ++t) d[t] = Out(opmath_t<Out>(d[t]) + opmath_t<T>(s[t]));
        } else {
          for (int64_t ox = lo; ox < hi; ++ox) {
            Out& d = dst[x0 + ox * g.SW];
            d = Out(opmath_t<Out>(d) + opmath_t<T>(src[ox]));
          }
        }
      }
    }
  }
}

}  // namespace anvil::cpu
