// The CPU kernel of MaxPool2dIndices: each (n, c) plane on one thread of the pool.
//
// Tap-major: the plane's windows are updated together, one kernel tap (ki, kj) at a time in
// row-major order, which is the order backend::MaxPoolArgmax (the CUDA kernel's per-window
// scan) visits each window's elements, so both choose the same element. Per window the scan is
// a chain of dependent compare-and-selects; across windows the updates are independent, so in
// this order the compiler vectorises them.
//
// Float32 on AVX-512 takes sixteen windows at a time instead (PlaneIndicesAvx512): the plane's
// outputs in row-major blocks of sixteen, each tap's sixteen elements gathered at once, the
// same taps in the same order with the same update rule. Small planes (the digits CNN's 8x8
// and 4x4 maps) spend most of the scalar loop in its bounds and setup.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/backend/common/max_pool_window.h"
#include "core/backend/cpu/isa.h"
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

// What every plane of one call shares on the AVX-512 path, for the plane's outputs in blocks of
// 16 (row-major over [OH, OW]; the last block's missing lanes are off in every mask):
// - origin: y0 * W + x0 of each output's window (y0 = oy * SH - PT, x0 = ox * SW - PL), so tap
//   (ki, kj) reads origin + tap_offset[ki * KW + kj] with tap_offset = ki * DH * W + kj * DW;
// - first: the index of the window's first element inside the input (its index when every
//   element is -inf, as the scalar loop's starting value);
// - inside: per block and tap, the lanes whose tap lands inside the input.
struct Avx512Plan {
  int64_t blocks = 0;
  std::vector<int32_t> origin, first, tap_offset;
  std::vector<uint16_t> inside;
};

// Whether the AVX-512 path can index this geometry with 32-bit offsets.
bool FitsInt32(const backend::Geom& g) {
  const int64_t limit = int64_t{1} << 30;
  return g.H * g.W < limit && g.OH * g.OW < limit && g.KH * g.DH * g.W < limit && g.KW * g.DW < limit &&
         (g.PT + g.SH * g.OH) * g.W < limit && g.PL + g.SW * g.OW < limit;
}

Avx512Plan MakeAvx512Plan(const backend::Geom& g) {
  Avx512Plan plan;
  const int64_t plane_out = g.OH * g.OW, taps = g.KH * g.KW;
  plan.blocks = (plane_out + 15) / 16;
  plan.origin.assign(static_cast<size_t>(plan.blocks * 16), 0);
  plan.first.assign(static_cast<size_t>(plan.blocks * 16), 0);
  plan.inside.assign(static_cast<size_t>(plan.blocks * taps), 0);
  for (int64_t ki = 0; ki < g.KH; ++ki)
    for (int64_t kj = 0; kj < g.KW; ++kj) plan.tap_offset.push_back(static_cast<int32_t>(ki * g.DH * g.W + kj * g.DW));
  for (int64_t o = 0; o < plane_out; ++o) {
    const int64_t oy = o / g.OW, ox = o % g.OW, y0 = oy * g.SH - g.PT, x0 = ox * g.SW - g.PL;
    plan.origin[static_cast<size_t>(o)] = static_cast<int32_t>(y0 * g.W + x0);
    plan.first[static_cast<size_t>(o)] =
        static_cast<int32_t>(backend::MaxPoolFirstInside(y0, g.DH) * g.W + backend::MaxPoolFirstInside(x0, g.DW));
    for (int64_t ki = 0; ki < g.KH; ++ki) {
      const int64_t y = y0 + ki * g.DH;
      if (y < 0 || y >= g.H) continue;
      for (int64_t kj = 0; kj < g.KW; ++kj) {
        const int64_t x = x0 + kj * g.DW;
        if (x >= 0 && x < g.W) plan.inside[static_cast<size_t>((o / 16) * taps + ki * g.KW + kj)] |= 1u << (o % 16);
      }
    }
  }
  return plan;
}

#define ANVIL_POOL_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq")))

ANVIL_POOL_AVX512 void PlaneIndicesAvx512(const float* plane, const Avx512Plan& plan, int64_t plane_out,
                                          int64_t* __restrict best) {
  const int64_t taps = static_cast<int64_t>(plan.tap_offset.size());
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int64_t b = 0; b < plan.blocks; ++b) {
    const __m512i origin = _mm512_loadu_si512(plan.origin.data() + b * 16);
    __m512i index = _mm512_loadu_si512(plan.first.data() + b * 16);
    __m512 value = minus_inf;
    const uint16_t* inside = plan.inside.data() + b * taps;
    for (int64_t t = 0; t < taps; ++t) {
      const __mmask16 in = inside[t];
      const __m512i at = _mm512_add_epi32(origin, _mm512_set1_epi32(plan.tap_offset[static_cast<size_t>(t)]));
      const __m512 v = _mm512_mask_i32gather_ps(minus_inf, in, at, plane, 4);
      // Greater, or NaN: the scalar loop's rule, lane by lane.
      const __mmask16 take = in & (_mm512_cmp_ps_mask(v, value, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
      value = _mm512_mask_mov_ps(value, take, v);
      index = _mm512_mask_mov_epi32(index, take, at);
    }
    const int64_t lanes = std::min<int64_t>(16, plane_out - b * 16);
    const __mmask16 out = static_cast<__mmask16>((1u << lanes) - 1);
    int64_t* dst = best + b * 16;
    _mm512_mask_storeu_epi64(dst, static_cast<__mmask8>(out & 0xff),
                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(index)));
    _mm512_mask_storeu_epi64(dst + 8, static_cast<__mmask8>(out >> 8),
                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(index, 1)));
  }
}

void MaxPool2dIndicesKernel(const KernelCall& c) {
  const Tensor in = c.inputs[0].contiguous();
  const Tensor& out = c.outputs[0];
  const backend::Geom g = backend::MakeGeom(c.attrs.get<WindowArgs>(), in.size(0), in.size(1));
  int64_t* indices = out.data_ptr<int64_t>();
  const int64_t plane_in = g.H * g.W, plane_out = g.OH * g.OW;
  // A plane is a few hundred comparisons at the digits' sizes: the grain keeps small poolings
  // on the calling thread.
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, plane_out * g.KH * g.KW));
  if (in.dtype() == kFloat32 && isa_at_least(CpuIsa::kAvx512) && FitsInt32(g)) {
    const Avx512Plan plan = MakeAvx512Plan(g);
    const float* src = in.data_ptr<float>();
    parallel_for(0, g.N * g.C, grain, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) PlaneIndicesAvx512(src + p * plane_in, plan, plane_out, indices + p * plane_out);
    });
    return;
  }
  ANVIL_DISPATCH_FLOATING(in.dtype(), "max_pool2d_indices", [&] {
    const scalar_t* src = in.data_ptr<scalar_t>();
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
