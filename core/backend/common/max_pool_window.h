// Which input element max pooling takes for one output position (the MaxPool2dIndices row),
// written after PyTorch's max_pool2d kernels so that values and gradients land where PyTorch's
// do. The CUDA kernel runs this scan per output; the CPU kernel (cpu/max_pool.cc) visits the
// same elements in the same order, tap by tap over all of a plane's windows at once.
#pragma once

#include <cstdint>
#include <limits>

#include "core/backend/common/window_geom.h"
#include "core/tensor/dtype.h"
#include "core/util/macros.h"

namespace anvil::backend {

// The first coordinate start + k * dilation (k >= 0) that is not negative: where a window
// that begins in the padding first touches the plane.
ANVIL_HOST_DEVICE inline int64_t MaxPoolFirstInside(int64_t start, int64_t dilation) {
  while (start < 0) start += dilation;
  return start;
}

// The plane index (y * W + x) of window (oy, ox)'s maximum in one [H, W] plane. The window's
// elements inside the plane are scanned row by row (padding is never read: it stands for
// -inf); an element replaces the running maximum when it is greater or NaN, starting from -inf
// at the window's first element inside the plane. So: the first of equal maxima, the last NaN,
// and a window of -infs reports its first element inside the plane.
template <typename T>
ANVIL_HOST_DEVICE inline int64_t MaxPoolArgmax(const T* plane, const Geom& g, int64_t oy, int64_t ox) {
  using M = opmath_t<T>;
  int64_t y0 = oy * g.SH - g.PT, x0 = ox * g.SW - g.PL;
  const int64_t y_end = y0 + (g.KH - 1) * g.DH + 1 < g.H ? y0 + (g.KH - 1) * g.DH + 1 : g.H;
  const int64_t x_end = x0 + (g.KW - 1) * g.DW + 1 < g.W ? x0 + (g.KW - 1) * g.DW + 1 : g.W;
  y0 = MaxPoolFirstInside(y0, g.DH);
  x0 = MaxPoolFirstInside(x0, g.DW);
  int64_t best = y0 * g.W + x0;
  M best_value = -std::numeric_limits<M>::infinity();
  for (int64_t y = y0; y < y_end; y += g.DH) {
    for (int64_t x = x0; x < x_end; x += g.DW) {
      const M v = static_cast<M>(plane[y * g.W + x]);
      if (v > best_value || v != v) {
        best_value = v;
        best = y * g.W + x;
      }
    }
  }
  return best;
}

}  // namespace anvil::backend
