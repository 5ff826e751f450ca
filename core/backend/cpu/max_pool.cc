// The CPU kernel of MaxPool2dIndices: each (n, c) plane on one thread of the pool.
//
// Tap-major: the plane's windows are updated together, one kernel tap (ki, kj) at a time in
// row-major order, which is the order backend::MaxPoolArgmax (the CUDA kernel's per-window
// scan) visits each window's elements, so both choose the same element. Per window the scan is
// a chain of dependent compare-and-selects; across windows the updates are independent, so in
// this order the compiler vectorises them.
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/backend/common/max_pool_window.h"
#include "core/backend/cpu/kernels.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {
namespace {

// One [H, W] plane's indices, [OH, OW]; best_value is scratch of OH * OW. kStride: the
// column stride when it is known at compile time (1 or 2: the loads then vectorise), else 0.
template <int kStride, typename T>
void PlaneIndices(const T* plane, const backend::Geom& g, opmath_t<T>* __restrict best_value,
                  int64_t* __restrict best) {
  using M = opmath_t<T>;
  // The geometry in locals: read through `g` the compiler must reload it after every store to
  // best (it cannot rule out that they alias), and the loop does not vectorise.
  const int64_t H = g.H, W = g.W, OH = g.OH, OW = g.OW, SH = g.SH, DH = g.DH, DW = g.DW;
  const int64_t SW = kStride > 0 ? kStride : g.SW;
  for (int64_t oy = 0; oy < OH; ++oy) {
    const int64_t y = backend::MaxPoolFirstInside(oy * SH - g.PT, DH);
    for (int64_t ox = 0; ox < OW; ++ox) best[oy * OW + ox] = y * W + backend::MaxPoolFirstInside(ox * SW - g.PL, DW);
  }
  std::fill(best_value, best_value + OH * OW, -std::numeric_limits<M>::infinity());
  for (int64_t ki = 0; ki < g.KH; ++ki) {
    for (int64_t kj = 0; kj < g.KW; ++kj) {
      // The output columns whose tap kj lands inside the row: x = ox * SW + x_off in [0, W).
      const int64_t x_off = kj * DW - g.PL;
      const int64_t lo = x_off >= 0 ? 0 : (-x_off + SW - 1) / SW;
      const int64_t hi = W - x_off <= 0 ? 0 : std::min(OW, (W - x_off + SW - 1) / SW);
      for (int64_t oy = 0; oy < OH; ++oy) {
        const int64_t y = oy * SH - g.PT + ki * DH;
        if (y < 0 || y >= H) continue;
        const int64_t first = y * W + x_off;
        const T* row = plane + first;
        M* __restrict bv = best_value + oy * OW;
        int64_t* __restrict bi = best + oy * OW;
        for (int64_t ox = lo; ox < hi; ++ox) {
          // Greater, or NaN: PyTorch's update rule, with no branch: which element wins is
          // data, and a branch per element mispredicted more often than not (the windows'
          // updates are independent, so without the branch they overlap).
          const M v = static_cast<M>(row[ox * SW]);
          if constexpr (std::is_same_v<M, float>) {
            const __m128 vv = _mm_set_ss(v), old = _mm_load_ss(bv + ox);
            const __m128 take = _mm_or_ps(_mm_cmpgt_ss(vv, old), _mm_cmpunord_ss(vv, vv));
            _mm_store_ss(bv + ox, _mm_blendv_ps(old, vv, take));
            const int64_t mask = -static_cast<int64_t>(_mm_movemask_ps(take) & 1);
            bi[ox] ^= (bi[ox] ^ (first + ox * SW)) & mask;
          } else {
            const bool take = (v > bv[ox]) | (v != v);
            bv[ox] = take ? v : bv[ox];
            bi[ox] = take ? first + ox * SW : bi[ox];
          }
        }
      }
    }
  }
}

void MaxPool2dIndicesKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const backend::Geom g = backend::MakeGeom(c.attrs.get<WindowArgs>(), in.size(0), in.size(1));
  int64_t* indices = out.data_ptr<int64_t>();
  ANVIL_DISPATCH_FLOATING(in.dtype(), "max_pool2d_indices", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
    const int64_t plane_in = g.H * g.W, plane_out = g.OH * g.OW;
    // A plane is a few hundred comparisons at the digits' sizes: the grain keeps small
    // poolings on the calling thread.
    const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, plane_out * g.KH * g.KW));
    parallel_for(0, g.N * g.C, grain, [&](int64_t b, int64_t e) {
      std::vector<opmath_t<scalar_t>> best_value(static_cast<size_t>(plane_out));
      const auto planes = [&](auto plane_indices) {
        for (int64_t p = b; p < e; ++p)
          plane_indices(src + p * plane_in, g, best_value.data(), indices + p * plane_out);
      };
      if (g.SW == 1) {
        planes(PlaneIndices<1, scalar_t>);
      } else if (g.SW == 2) {
        planes(PlaneIndices<2, scalar_t>);
      } else {
        planes(PlaneIndices<0, scalar_t>);
      }
    });
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(MaxPool2dIndices, MaxPool2dIndicesKernel)

}  // namespace anvil::cpu
