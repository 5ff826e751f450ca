// The epilogue of the AVX-512 GEMM micro-kernels (sgemm_avx512.cc, bf16_gemm.cc,
// int8_gemm_vnni.cc): one row of a register tile, two zmm accumulators of 16 lanes, added to
// the row of C already there when the product accumulates, then stored under the column masks
// (m0 for columns 0-15, m1 for 16-31), so a partial tile touches no column outside C.
//
// Force-inlined into each kernel's unrolled rows: a call would pass the accumulators through
// memory. Its target (avx512f) is the common subset of the kernels' targets, so it inlines into
// each of them, and the kernels' instructions and their order stay what they were.
//
// Thread-safe (pure functions of their arguments).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace anvil::cpu {

// C row `ci` [+]= (x, y) under the masks; with kTwoVectors false only x and columns 0-15.
template <bool kTwoVectors = true>
__attribute__((target("avx512f"), always_inline)) inline void StoreTileRow(float* ci, __m512 x, __m512 y,
                                                                           bool accumulate, __mmask16 m0,
                                                                           __mmask16 m1) {
  if (accumulate) {
    x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m0, ci));
    if constexpr (kTwoVectors) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(m1, ci + 16));
  }
  _mm512_mask_storeu_ps(ci, m0, x);
  if constexpr (kTwoVectors) _mm512_mask_storeu_ps(ci + 16, m1, y);
}

// The same for int32 sums (the int8 kernels' C).
__attribute__((target("avx512f"), always_inline)) inline void StoreTileRow(int32_t* ci, __m512i x, __m512i y,
                                                                           bool accumulate, __mmask16 m0,
                                                                           __mmask16 m1) {
  if (accumulate) {
    x = _mm512_add_epi32(x, _mm512_maskz_loadu_epi32(m0, ci));
    y = _mm512_add_epi32(y, _mm512_maskz_loadu_epi32(m1, ci + 16));
  }
  _mm512_mask_storeu_epi32(ci, m0, x);
  _mm512_mask_storeu_epi32(ci + 16, m1, y);
}

}  // namespace anvil::cpu
