// The AVX2 int8 kernel (layout: int8_gemm_kernels.h), for x86-64-v3 CPUs without AVX-512-VNNI.
//
// Exact: A's bytes are widened to 16 bits unsigned (vpmovzxbw) and W's signed (vpmovsxbw), and
// vpmaddwd multiplies the 16-bit pairs and adds each pair's two products into an int32 lane
// (at most 2 * 255 * 128, far inside int16 x int16's range). vpmaddubsw, which multiplies the
// bytes directly, adds its pairs in saturating 16-bit arithmetic and is never used.
//
// Per k chunk, up to 6 rows of A are widened into a panel of 16-bit pairs (a broadcast of one
// pair is one 32-bit load), and each 16-column panel of W is widened as the micro-kernel reads
// it; the C tile (6 rows x 16 columns) stays in 12 ymm accumulators.
//
// The build's baseline (x86-64-v3) includes AVX2: no target attribute is needed.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>
#include <vector>

#include "core/backend/cpu/int8_gemm_kernels.h"

namespace anvil::cpu::int8_kernels {

namespace {

constexpr int64_t kPanelCols = 16;
constexpr int64_t kPairBytes = 32;  // one pair of k values of a 16-column panel
constexpr int64_t kKc = 1024;       // even: only the last chunk may end in half a pair
constexpr int kMr = 6;

int64_t Pairs(int64_t k) { return (k + 1) / 2; }

// The lanes (of 8) of columns in [lo, hi), as vpmaskmovd's mask (the sign bit of each lane).
__m256i LaneMask(int64_t lo, int64_t hi) {
  alignas(32) int32_t lanes[8];
  for (int64_t l = 0; l < 8; ++l) lanes[l] = l >= lo && l < hi ? -1 : 0;
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes));
}

#define ANVIL_ROWS6(X) X(0) X(1) X(2) X(3) X(4) X(5)

// C tile (MR rows x 16 columns; columns [lo, hi) of them stored) [+]= the A panel (MR rows of `pairs`
// 16-bit pairs, row r at pa + r * pairs) x the W panel pb over `pairs` pairs.
template <int MR>
void MicroKernel(const uint32_t* pa, int64_t pairs, const int8_t* pb, int32_t* c, int64_t ldc, bool accumulate,
                 int64_t lo, int64_t hi) {
#define ANVIL_DECL(i) __m256i x##i = _mm256_setzero_si256(), y##i = _mm256_setzero_si256();
  ANVIL_ROWS6(ANVIL_DECL)
#undef ANVIL_DECL
  for (int64_t q = 0; q < pairs; ++q) {
    const __m256i b0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + q * kPairBytes)));
    const __m256i b1 =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pb + q * kPairBytes + 16)));
#define ANVIL_STEP(i)                                                          \
  if constexpr (i < MR) {                                                      \
    const __m256i av = _mm256_set1_epi32(static_cast<int>(pa[i * pairs + q])); \
    x##i = _mm256_add_epi32(x##i, _mm256_madd_epi16(av, b0));                  \
    y##i = _mm256_add_epi32(y##i, _mm256_madd_epi16(av, b1));                  \
  }
    ANVIL_ROWS6(ANVIL_STEP)
#undef ANVIL_STEP
  }
#define ANVIL_STORE(i)                                                     \
  if constexpr (i < MR) {                                                  \
    int* ci = reinterpret_cast<int*>(c + i * ldc);                         \
    if (accumulate) {                                                      \
      x##i = _mm256_add_epi32(x##i, _mm256_maskload_epi32(ci, mask0));     \
      y##i = _mm256_add_epi32(y##i, _mm256_maskload_epi32(ci + 8, mask1)); \
    }                                                                      \
    _mm256_maskstore_epi32(ci, mask0, x##i);                               \
    _mm256_maskstore_epi32(ci + 8, mask1, y##i);                           \
  }
  const __m256i mask0 = LaneMask(lo, hi), mask1 = LaneMask(lo - 8, hi - 8);
  ANVIL_ROWS6(ANVIL_STORE)
#undef ANVIL_STORE
}

#undef ANVIL_ROWS6

using TileFn = void (*)(const uint32_t*, int64_t, const int8_t*, int32_t*, int64_t, bool, int64_t, int64_t);

template <int... R>
constexpr auto MakeTiles(std::integer_sequence<int, R...>) {
  return std::array<TileFn, sizeof...(R)>{&MicroKernel<R + 1>...};
}
constexpr auto kTiles = MakeTiles(std::make_integer_sequence<int, kMr>{});  // kTiles[r - 1]: r rows

// `rows` rows of A (from `a`, lda apart), kc bytes each, widened to 16 bits into rows of
// `pairs` pairs (the half pair past an odd kc zero). Reads only the rows' kc bytes.
void PackA(const uint8_t* a, int64_t lda, int64_t rows, int64_t kc, int64_t pairs, uint32_t* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = a + r * lda;
    auto* dst = reinterpret_cast<uint16_t*>(out + r * pairs);
    int64_t p = 0;
    for (; p + 16 <= kc; p += 16) {
      const __m256i wide = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + p)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + p), wide);
    }
    for (; p < kc; ++p) dst[p] = src[p];
    if (kc % 2 != 0) dst[kc] = 0;
  }
}

}  // namespace

int64_t Avx2PackedBytes(int64_t n, int64_t k) { return (n + kPanelCols - 1) / kPanelCols * Pairs(k) * kPairBytes; }

void PackAvx2(const int8_t* w, int64_t n, int64_t k, int64_t ldw, int8_t* out) {
  static_assert(kPairBytes == kPanelCols * 2, "a pair row is two bytes per column");
  PackPanels<kPanelCols, 2>(w, n, k, ldw, Pairs(k), Avx2PackedBytes(n, k), out);
}

void GemmAvx2(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
              int64_t j1, int32_t* c, int64_t ldc) {
  if (EmptyProduct(m, k, j0, j1, c, ldc)) return;
  const int64_t panel_bytes = Pairs(k) * kPairBytes;
  const int64_t first_panel = j0 / kPanelCols, end_panel = (j1 + kPanelCols - 1) / kPanelCols;
  thread_local std::vector<uint32_t> packed_a;
  packed_a.resize(static_cast<size_t>(kMr * Pairs(kKc)));
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const int64_t pairs = Pairs(kc);
    for (int64_t i0 = 0; i0 < m; i0 += kMr) {
      const int64_t rows = std::min<int64_t>(kMr, m - i0);
      PackA(a + i0 * lda + p0, lda, rows, kc, pairs, packed_a.data());
      const TileFn tile = kTiles[static_cast<size_t>(rows - 1)];
      for (int64_t jp = first_panel; jp < end_panel; ++jp) {
        const int64_t lo = std::max<int64_t>(j0 - jp * kPanelCols, 0);
        const int64_t hi = std::min<int64_t>(j1 - jp * kPanelCols, kPanelCols);
        tile(packed_a.data(), pairs, packed + jp * panel_bytes + (p0 / 2) * kPairBytes, c + i0 * ldc + jp * kPanelCols,
             ldc, p0 > 0, lo, hi);
      }
    }
  }
}

}  // namespace anvil::cpu::int8_kernels
