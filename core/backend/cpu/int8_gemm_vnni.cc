// The AVX-512-VNNI int8 kernel (layout: int8_gemm_kernels.h).
//
// vpdpbusd multiplies, in each int32 lane, four unsigned bytes of its first source by four
// signed bytes of its second and adds the four products (exactly: at most 4 * 255 * 128) to the
// lane. The micro-kernel keeps a tile of C (up to 12 rows x 32 columns) in 24 zmm accumulators;
// per group of four k values it loads the W panel's 128 bytes (two zmm) once and broadcasts each
// row's four bytes of A from a packed A panel (one pointer, constant offsets: broadcasting from
// twelve row pointers ran out of general registers and spilled).
//
// Blocking (measured on Zen 5, one thread: 4.4x sgemm at 256 x 1024 x 1024 and 4.1x at 2048^3,
// against 1.8x and 1.6x before A was packed, and 3.6x at 2048^3 with chunks of 1024):
// - k in chunks of kKc: C is read back and added once per chunk;
// - rows in blocks of kMc, whose packed A (96 rows x kKc: 192 KiB) stays in L2;
// - groups of kNcPanels W panels (8 x 64 KiB) pass from L2 under each 12-row A panel (24 KiB,
//   in L1).
//
// Compiled for the baseline target; only the functions marked with the VNNI target use
// AVX-512, and int8_gemm.cc checks the CPU first.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "core/backend/cpu/gemm_tile_store.h"
#include "core/backend/cpu/int8_gemm_kernels.h"
#include "core/backend/cpu/transpose_avx512.h"

#define ANVIL_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace anvil::cpu::int8_kernels {

namespace {

constexpr int64_t kPanelCols = 32;
constexpr int64_t kGroupBytes = 128;  // one group of four k values of a 32-column panel
constexpr int64_t kKc = 2048;         // a multiple of 4: only the last chunk ends in a partial group
constexpr int64_t kNcPanels = 8;
constexpr int kMr = 12;
constexpr int64_t kMc = kVnniRowBlock;  // rows per block: 8 panels of 12

int64_t PanelGroups(int64_t k) { return (k + 63) / 64 * 16; }

#define ANVIL_ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

// acc += vpdpbusd(a, b), in place. With the intrinsic (_mm512_dpbusd_epi32) GCC 12 copies each
// accumulator before every vpdpbusd and spills part of the tile to the stack: the kernel ran at
// 40 % of this speed (256 x 1024 x 1024 on Zen 5); the instruction accumulates into its
// destination itself.
ANVIL_VNNI_TARGET inline __m512i Dot(__m512i acc, __m512i a_u8, __m512i b_s8) {
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(a_u8), "v"(b_s8));
  return acc;
}

// C tile (MR rows x 32 columns; m0 and m1 the columns stored) [+]= the A panel pa (per group
// of four k values, MR words: row i's four bytes at word i) x panel pb, over `groups` groups.
template <int MR>
ANVIL_VNNI_TARGET void MicroKernel(const int32_t* pa, int64_t groups, const int8_t* pb, int32_t* c, int64_t ldc,
                                   bool accumulate, __mmask16 m0, __mmask16 m1) {
#define ANVIL_DECL(i) __m512i x##i = _mm512_setzero_si512(), y##i = _mm512_setzero_si512();
  ANVIL_ROWS12(ANVIL_DECL)
#undef ANVIL_DECL
  for (int64_t q = 0; q < groups; ++q) {
    const __m512i b0 = _mm512_loadu_si512(pb + q * kGroupBytes);
    const __m512i b1 = _mm512_loadu_si512(pb + q * kGroupBytes + 64);
    const int32_t* aq = pa + q * MR;
#define ANVIL_STEP(i)                            \
  if constexpr (i < MR) {                        \
    const __m512i av = _mm512_set1_epi32(aq[i]); \
    x##i = Dot(x##i, av, b0);                    \
    y##i = Dot(y##i, av, b1);                    \
  }
    ANVIL_ROWS12(ANVIL_STEP)
#undef ANVIL_STEP
  }
#define ANVIL_STORE(i) \
  if constexpr (i < MR) StoreTileRow(c + i * ldc, x##i, y##i, accumulate, m0, m1);
  ANVIL_ROWS12(ANVIL_STORE)
#undef ANVIL_STORE
}

#undef ANVIL_ROWS12

using TileFn = void (*)(const int32_t*, int64_t, const int8_t*, int32_t*, int64_t, bool, __mmask16, __mmask16);

template <int... R>
constexpr auto MakeTiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&MicroKernel<R + 1>...};
}
// kTiles[r - 1] handles r rows.
constexpr auto kTiles = MakeTiles(std::make_integer_sequence<int, kMr>{});

// The columns of panel jp inside [j0, j1), as a mask of its 32.
uint32_t PanelMask(int64_t jp, int64_t j0, int64_t j1) {
  const int64_t lo = std::max<int64_t>(j0 - jp * kPanelCols, 0);
  const int64_t hi = std::min<int64_t>(j1 - jp * kPanelCols, kPanelCols);
  const uint64_t upto_hi = hi >= 32 ? 0xFFFFFFFFull : ((1ull << hi) - 1);
  const uint64_t below_lo = (1ull << lo) - 1;
  return static_cast<uint32_t>(upto_hi & ~below_lo);
}

// `rows` rows of A (from `a`, lda apart), kc bytes each, into a panel of ceil(kc / 4) groups
// of `rows` words (row i's bytes 4q .. 4q + 3 at word q * rows + i), the bytes past kc zero.
// Reads only the rows' kc bytes: whole runs of 64 bytes go through the transpose (a word-by-
// word copy took 6-7 % of a 256 x 1024 x 1024 product), the rest word by word.
ANVIL_VNNI_TARGET void PackA(const uint8_t* a, int64_t lda, int64_t rows, int64_t kc, int32_t* panel) {
  const int64_t full = kc / 4, tail = kc % 4;
  const int64_t blocked = full / 16 * 16;
  const auto mask = static_cast<__mmask16>((1u << rows) - 1);
  for (int64_t q0 = 0; q0 < blocked; q0 += 16) {
    // Word q of each row is bytes 4q .. 4q + 3 (transpose_avx512.h).
    TransposeWords16(a + 4 * q0, lda, static_cast<int>(rows), reinterpret_cast<uint32_t*>(panel + q0 * rows), rows,
                     mask);
  }
  for (int64_t i = 0; i < rows; ++i) {
    const uint8_t* row = a + i * lda;
    for (int64_t q = blocked; q < full; ++q) std::memcpy(panel + q * rows + i, row + 4 * q, 4);
    if (tail > 0) {
      int32_t word = 0;
      std::memcpy(&word, row + 4 * full, static_cast<size_t>(tail));
      panel[full * rows + i] = word;
    }
  }
}

}  // namespace

int64_t VnniPackedBytes(int64_t n, int64_t k) {
  return (n + kPanelCols - 1) / kPanelCols * PanelGroups(k) * kGroupBytes;
}

void PackVnni(const int8_t* w, int64_t n, int64_t k, int64_t ldw, int8_t* out) {
  static_assert(kGroupBytes == kPanelCols * 4, "a group row is four bytes per column");
  PackPanels<kPanelCols, 4>(w, n, k, ldw, PanelGroups(k), VnniPackedBytes(n, k), out);
}

void GemmVnni(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
              int64_t j1, int32_t* c, int64_t ldc) {
  if (EmptyProduct(m, k, j0, j1, c, ldc)) return;
  const int64_t panel_bytes = PanelGroups(k) * kGroupBytes;
  const int64_t first_panel = j0 / kPanelCols, end_panel = (j1 + kPanelCols - 1) / kPanelCols;
  thread_local std::vector<int32_t> packed_a;
  packed_a.resize(static_cast<size_t>(kMc * (kKc / 4)));
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const int64_t groups = (kc + 3) / 4;
    const bool accumulate = p0 > 0;
    for (int64_t ic = 0; ic < m; ic += kMc) {
      const int64_t mc = std::min(kMc, m - ic);
      for (int64_t i0 = 0; i0 < mc; i0 += kMr) {
        PackA(a + (ic + i0) * lda + p0, lda, std::min<int64_t>(kMr, mc - i0), kc, packed_a.data() + i0 * groups);
      }
      for (int64_t jg = first_panel; jg < end_panel; jg += kNcPanels) {
        const int64_t group_end = std::min(end_panel, jg + kNcPanels);
        for (int64_t i0 = 0; i0 < mc; i0 += kMr) {
          const int64_t rows = std::min<int64_t>(kMr, mc - i0);
          const TileFn tile = kTiles[static_cast<size_t>(rows - 1)];
          for (int64_t jp = jg; jp < group_end; ++jp) {
            const uint32_t mask = PanelMask(jp, j0, j1);
            tile(packed_a.data() + i0 * groups, groups, packed + jp * panel_bytes + (p0 / 4) * kGroupBytes,
                 c + (ic + i0) * ldc + jp * kPanelCols, ldc, accumulate, static_cast<__mmask16>(mask & 0xFFFF),
                 static_cast<__mmask16>(mask >> 16));
          }
        }
      }
    }
  }
}

}  // namespace anvil::cpu::int8_kernels
