// The CPU kernel of MaxPool2dIndices: each (n, c) plane on one thread of the pool.
//
// Tap-major: the plane's windows are updated together, one kernel tap (ki, kj) at a time in
// row-major order, which is the order backend::MaxPoolArgmax (the CUDA kernel's per-window
// scan) visits each window's elements, so both choose the same element. Per window the scan is
// a chain of dependent compare-and-selects; across windows the updates are independent, so in
// this order the compiler vectorises them.
//
// Float32 on AVX-512 takes sixteen windows at a time instead (GroupIndicesAvx512): the planes'
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
#include <numeric>
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

// What the planes of one call share on the AVX-512 path. A group of `planes` consecutive planes
// is the unit: its outputs, row-major over [planes, OH, OW], in blocks of 16 (groups are sized
// so that small planes, such as the digits CNN's 2x2 outputs, fill whole blocks; the last
// block's missing lanes are off in every mask):
// - origin: q * H * W + y0 * W + x0 for the window of output (q, oy, ox), y0 = oy * SH - PT,
//   x0 = ox * SW - PL, so tap (ki, kj) reads origin + tap_offset[ki * KW + kj], with
//   tap_offset = ki * DH * W + kj * DW;
// - plane_base: q * H * W, taken off the index stored;
// - first: the index of the window's first element inside the input (its index when every
//   element is -inf, as the scalar loop's starting value), plane_base included;
// - inside: per block and tap, the lanes whose tap lands inside the input.
struct Avx512Plan {
  int64_t outputs = 0, blocks = 0;
  std::vector<int32_t> origin, plane_base, first, tap_offset;
  std::vector<uint16_t> inside;
};

// Planes per group: the fewest whose outputs are a whole number of blocks of 16.
int64_t PlanesPerGroup(int64_t plane_out) { return 16 / std::gcd<int64_t>(plane_out, 16); }

// Whether a group's offsets fit 32 bits.
bool FitsInt32(const backend::Geom& g) {
  const int64_t limit = int64_t{1} << 26, span_h = g.PT + g.SH * g.OH + g.KH * g.DH,
                span_w = g.PL + g.SW * g.OW + g.KW * g.DW;
  return g.H * g.W < limit && g.OH * g.OW < limit && span_h * g.W < limit && span_w < limit;
}

Avx512Plan MakeAvx512Plan(const backend::Geom& g, int64_t planes) {
  Avx512Plan plan;
  const int64_t plane_in = g.H * g.W, plane_out = g.OH * g.OW, taps = g.KH * g.KW;
  plan.outputs = planes * plane_out;
  plan.blocks = (plan.outputs + 15) / 16;
  for (std::vector<int32_t>* v : {&plan.origin, &plan.plane_base, &plan.first})
    v->assign(static_cast<size_t>(plan.blocks * 16), 0);
  plan.inside.assign(static_cast<size_t>(plan.blocks * taps), 0);
  for (int64_t ki = 0; ki < g.KH; ++ki)
    for (int64_t kj = 0; kj < g.KW; ++kj) plan.tap_offset.push_back(static_cast<int32_t>(ki * g.DH * g.W + kj * g.DW));
  for (int64_t o = 0; o < plan.outputs; ++o) {
    const int64_t q = o / plane_out, r = o % plane_out;
    const int64_t y0 = (r / g.OW) * g.SH - g.PT, x0 = (r % g.OW) * g.SW - g.PL, base = q * plane_in;
    const size_t at = static_cast<size_t>(o);
    plan.origin[at] = static_cast<int32_t>(base + y0 * g.W + x0);
    plan.plane_base[at] = static_cast<int32_t>(base);
    plan.first[at] = static_cast<int32_t>(base + backend::MaxPoolFirstInside(y0, g.DH) * g.W +
                                          backend::MaxPoolFirstInside(x0, g.DW));
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

// One group's indices: src is its first plane, best its first plane's outputs.
ANVIL_POOL_AVX512 void GroupIndicesAvx512(const float* src, const Avx512Plan& plan, int64_t* __restrict best) {
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
      const __m512 v = _mm512_mask_i32gather_ps(minus_inf, in, at, src, 4);
      // Greater, or NaN: the scalar loop's rule, lane by lane.
      const __mmask16 take = in & (_mm512_cmp_ps_mask(v, value, _CMP_GT_OQ) | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
      value = _mm512_mask_mov_ps(value, take, v);
      index = _mm512_mask_mov_epi32(index, take, at);
    }
    index = _mm512_sub_epi32(index, _mm512_loadu_si512(plan.plane_base.data() + b * 16));
    const int64_t lanes = std::min<int64_t>(16, plan.outputs - b * 16);
    const __mmask16 out = static_cast<__mmask16>((1u << lanes) - 1);
    int64_t* dst = best + b * 16;
    _mm512_mask_storeu_epi64(dst, static_cast<__mmask8>(out & 0xff),
                             _mm512_cvtepi32_epi64(_mm512_castsi512_si256(index)));
    _mm512_mask_storeu_epi64(dst + 8, static_cast<__mmask8>(out >> 8),
                             _mm512_cvtepi32_epi64(_mm512_extracti64x4_epi64(index, 1)));
  }
}

// The AVX-512 path over all N * C planes: whole groups on the pool, then the remaining planes
// as one smaller group.
void IndicesAvx512(const float* src, const backend::Geom& g, int64_t grain, int64_t* indices) {
  const int64_t plane_in = g.H * g.W, plane_out = g.OH * g.OW, planes = g.N * g.C;
  const int64_t per_group = std::min(PlanesPerGroup(plane_out), planes), groups = planes / per_group;
  const Avx512Plan plan = MakeAvx512Plan(g, per_group);
  parallel_for(0, groups, std::max<int64_t>(1, grain / per_group), [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k)
      GroupIndicesAvx512(src + k * per_group * plane_in, plan, indices + k * per_group * plane_out);
  });
  const int64_t rest = planes - groups * per_group;
  if (rest > 0)
    GroupIndicesAvx512(src + groups * per_group * plane_in, MakeAvx512Plan(g, rest),
                       indices + groups * per_group * plane_out);
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
    IndicesAvx512(in.data_ptr<float>(), g, grain, indices);
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
