// A 16 x 16 transpose of 32-bit words on AVX-512, shared by the kernels that pack operands
// word-interleaved: the bfloat16 GEMM (pairs of bf16, bf16_gemm.cc) and the VNNI int8 GEMM
// (groups of four bytes, int8_gemm_vnni.cc). Inline, for callers compiled for AVX-512 targets
// (its own target is their common subset).
//
// Thread-safe (pure function).
#pragma once

// GCC 12's AVX-512 headers build some vectors from an undefined one (_mm512_undefined_*), which
// its -Wmaybe-uninitialized (and, for the unpack intrinsics, -Wuninitialized) reports at every use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <cstdint>

namespace anvil::cpu {

// out[q * out_stride + i] = word q of row i, for q < 16 and the i set in out_mask, where row i
// (64 bytes) starts at src + i * src_stride bytes and rows from `valid` on read as zeros (and
// are not read). Rows interleaved by 32 then 64 bits within each 128-bit lane, then the lanes
// gathered twice across registers.
__attribute__((target("avx512f"))) inline void TransposeWords16(const void* src, int64_t src_stride, int valid,
                                                                uint32_t* out, int64_t out_stride, __mmask16 out_mask) {
  const char* base = static_cast<const char*>(src);
  __m512i r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < valid ? _mm512_loadu_si512(base + i * src_stride) : _mm512_setzero_si512();
  // t[2i], t[2i+1]: rows 2i and 2i+1 interleaved (words 0,1 and 2,3 of each lane).
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  // r[4g + c]: lane L holds word 4L + c of rows 4g .. 4g+3.
  for (int g = 0; g < 4; ++g) {
    r[4 * g + 0] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
    r[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
    r[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
  }
  for (int c = 0; c < 4; ++c) {
    // Lanes 0 and 2 (then 1 and 3) of the four row groups, then each word's four lanes.
    const __m512i v = _mm512_shuffle_i32x4(r[c], r[4 + c], 0x88), x = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0x88);
    const __m512i u = _mm512_shuffle_i32x4(r[c], r[4 + c], 0xdd), y = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], 0xdd);
    _mm512_mask_storeu_epi32(out + (0 + c) * out_stride, out_mask, _mm512_shuffle_i32x4(v, x, 0x88));
    _mm512_mask_storeu_epi32(out + (8 + c) * out_stride, out_mask, _mm512_shuffle_i32x4(v, x, 0xdd));
    _mm512_mask_storeu_epi32(out + (4 + c) * out_stride, out_mask, _mm512_shuffle_i32x4(u, y, 0x88));
    _mm512_mask_storeu_epi32(out + (12 + c) * out_stride, out_mask, _mm512_shuffle_i32x4(u, y, 0xdd));
  }
}

}  // namespace anvil::cpu

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
