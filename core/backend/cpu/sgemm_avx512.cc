// AVX-512 float32 GEMM (interface and why: sgemm_avx512.h).
//
// Blocking: k in chunks of kKc (a chunk's B panel, kKc x 32 floats = 32 KiB, stays in L1
// while every row block of A passes over it); A is packed per chunk into row panels of MR
// rows, p-major, so the micro-kernel broadcasts from one sequential stream. The micro-kernel
// holds an MR x 32 tile of C in 2*MR zmm registers (MR = 12: 24 accumulators) and per p
// loads two B vectors and broadcasts MR values of A. The accumulators are named variables,
// not an array: GCC keeps arrays of vectors on the stack, which halves the speed.
//
// Compiled for the baseline target; only the functions marked target("avx512f") use
// AVX-512, and callers check the ISA level first (core/backend/cpu/isa.h).
#include "core/backend/cpu/sgemm_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "core/backend/cpu/gemm_tile_store.h"

namespace anvil::cpu {

namespace {

constexpr int64_t kKc = 256;

#define ANVIL_ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

// C tile (rows x up to 32 columns) = beta * C + A * B over kc steps, where A(i, p) =
// pa[a_rows[i] + p * acs] (a packed panel, a strided matrix, or rows at arbitrary offsets).
template <int MR, bool kTwoVectors = true>
__attribute__((target("avx512f"))) void MicroKernel(int64_t kc, const float* pa, const int64_t* a_rows, int64_t acs,
                                                    const float* b, const int64_t* b_offsets, float* c, int64_t ldc,
                                                    float beta, int rows, __mmask16 m0, __mmask16 m1) {
#define ANVIL_DECL(i)                                            \
  __m512 x##i = _mm512_setzero_ps(), y##i = _mm512_setzero_ps(); \
  const float* r##i = pa + (i < MR ? a_rows[i < MR ? i : 0] : 0);
  ANVIL_ROWS12(ANVIL_DECL)
#undef ANVIL_DECL
  for (int64_t p = 0; p < kc; ++p) {
    const float* bp = b + b_offsets[p];
    const __m512 b0 = _mm512_maskz_loadu_ps(m0, bp);
    const __m512 b1 = kTwoVectors ? _mm512_maskz_loadu_ps(m1, bp + 16) : _mm512_setzero_ps();
    const int64_t ap = p * acs;
#define ANVIL_STEP(i)                                                \
  if constexpr (i < MR) {                                            \
    const __m512 av = _mm512_set1_ps(r##i[ap]);                      \
    x##i = _mm512_fmadd_ps(av, b0, x##i);                            \
    if constexpr (kTwoVectors) y##i = _mm512_fmadd_ps(av, b1, y##i); \
  }
    ANVIL_ROWS12(ANVIL_STEP)
#undef ANVIL_STEP
  }
  const bool accumulate = beta != 0.0f;
#define ANVIL_STORE(i)                                                                    \
  if constexpr (i < MR) {                                                                 \
    if (i < rows) StoreTileRow<kTwoVectors>(c + i * ldc, x##i, y##i, accumulate, m0, m1); \
  }
  ANVIL_ROWS12(ANVIL_STORE)
#undef ANVIL_STORE
}

#undef ANVIL_ROWS12

using TileFn = void (*)(int64_t, const float*, const int64_t*, int64_t, const float*, const int64_t*, float*, int64_t,
                        float, int, __mmask16, __mmask16);

// The tile for `mr` rows (12, 8 or 4) and 32 or, when at most 16 columns are left, 16
// columns (no FMAs spent on masked-off lanes).
TileFn PickTile(int mr, int64_t columns) {
  const bool two = columns > 16;
  switch (mr) {
    case 12:
      return two ? &MicroKernel<12, true> : &MicroKernel<12, false>;
    case 8:
      return two ? &MicroKernel<8, true> : &MicroKernel<8, false>;
    default:
      return two ? &MicroKernel<4, true> : &MicroKernel<4, false>;
  }
}

constexpr int64_t kPanelRows[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};  // row i of a panel: offset i

int PanelRows(int64_t rows) { return rows >= 12 ? 12 : rows > 8 ? 12 : rows > 4 ? 8 : 4; }

}  // namespace

__attribute__((target("avx512f"))) void sgemm_avx512(int64_t m, int64_t n, int64_t k, const float* a,
                                                     const int64_t* a_row_offsets, int64_t a_row_stride,
                                                     int64_t a_col_stride, const float* b, const int64_t* b_offsets,
                                                     float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  auto row_offset = [&](int64_t i) { return a_row_offsets != nullptr ? a_row_offsets[i] : i * a_row_stride; };
  if (k <= 0) {
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  if (n <= 32) {
    // One column block: every element of A is used once, so packing would cost as much as it
    // saves; the micro-kernel reads A in place.
    const __mmask16 m0 = n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? __mmask16(0xFFFF) : n <= 16 ? __mmask16(0) : __mmask16((1u << (n - 16)) - 1);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0);
      const float chunk_beta = p0 == 0 ? beta : 1.0f;
      for (int64_t i0 = 0; i0 < m;) {
        float* ci = c + i0 * ldc;
        // A is not padded here: a tile taller than the rows left re-reads the last row (its
        // extra results are never stored), which beats a one-row tile's FMA latency chain.
        const int64_t left = m - i0;
        const int tile = PanelRows(left);
        const int live = static_cast<int>(std::min<int64_t>(tile, left));
        int64_t rows[12];
        for (int t = 0; t < tile; ++t) rows[t] = row_offset(i0 + std::min(t, live - 1));
        PickTile(tile, n)(kc, a + p0 * a_col_stride, rows, a_col_stride, b, b_offsets + p0, ci, ldc, chunk_beta, live,
                          m0, m1);
        i0 += live;
      }
    }
    return;
  }
  thread_local std::vector<float> packed;  // reused: fresh pages cost more than the packing
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const float chunk_beta = p0 == 0 ? beta : 1.0f;
    // Pack A[:, p0:p0+kc] into panels of PanelRows(rows left) rows, zero-padded.
    packed.resize(static_cast<size_t>((m + 12) * kc));
    int64_t offset = 0;
    for (int64_t i0 = 0; i0 < m;) {
      const int mr = PanelRows(m - i0);
      const int64_t rows = std::min<int64_t>(mr, m - i0);
      float* panel = packed.data() + offset;
      // Rows outer: reads run along A's rows (sequential when A is row-major, as for the
      // column matrices; a column-major A is small, a transposed weight).
      for (int64_t i = 0; i < mr; ++i) {
        if (i >= rows) {
          for (int64_t p = 0; p < kc; ++p) panel[p * mr + i] = 0.0f;
          continue;
        }
        const float* src = a + row_offset(i0 + i) + p0 * a_col_stride;
        for (int64_t p = 0; p < kc; ++p) panel[p * mr + i] = src[p * a_col_stride];
      }
      offset += mr * kc;
      i0 += rows;
    }
    for (int64_t j0 = 0; j0 < n; j0 += 32) {
      const int64_t w = std::min<int64_t>(32, n - j0);
      const __mmask16 m0 = w >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << w) - 1);
      const __mmask16 m1 = w >= 32 ? __mmask16(0xFFFF) : w <= 16 ? __mmask16(0) : __mmask16((1u << (w - 16)) - 1);
      const float* bj = b + j0;
      offset = 0;
      for (int64_t i0 = 0; i0 < m;) {
        const int mr = PanelRows(m - i0);
        const int rows = static_cast<int>(std::min<int64_t>(mr, m - i0));
        const float* panel = packed.data() + offset;
        float* cij = c + i0 * ldc + j0;
        PickTile(mr, w)(kc, panel, kPanelRows, mr, bj, b_offsets + p0, cij, ldc, chunk_beta, rows, m0, m1);
        offset += mr * kc;
        i0 += rows;
      }
    }
  }
}

}  // namespace anvil::cpu
