// AVX-512-BF16 GEMM (interface and why: bf16_gemm.h).
//
// Compiled for the baseline target; only the functions marked with the AVX-512-BF16 target use
// it, and bf16_gemm_available() is checked first.
#include "core/backend/cpu/bf16_gemm.h"

// GCC 12's AVX-512 headers build some vectors from an undefined one (_mm512_undefined_*), which
// its -Wmaybe-uninitialized (and, for the unpack intrinsics, -Wuninitialized) reports at every use.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/backend/cpu/bf16_gemm_amx.h"
#include "core/backend/cpu/bf16_pack.h"
#include "core/backend/cpu/gemm_tile_store.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/onednn_primitives.h"
#include "core/backend/cpu/transpose_avx512.h"
#include "core/util/cpu_features.h"
#include "core/util/error.h"
#include "core/util/half.h"

#define ANVIL_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

namespace anvil::cpu {

namespace {

// Blocking, measured on Zen 4 (1024^3 and 2048^3, one thread: 93-94 % of the core's vdpbf16ps
// peak, against 86-92 % with k chunks of 512 and 144-row blocks under which every B panel passed
// while the A block waited in L2):
// - k in chunks of kKc: C's tile is read and written once per chunk, from memory, so longer
//   chunks halve that traffic;
// - an A panel (12 rows x kKc: 24 KiB) stays in L1 while a group of kNcPanels B panels
//   (8 x 64 KiB) passes under it from L2;
// - rows in blocks of kMc, whose packed A (192 KiB) stays in L2 beside that group.
constexpr int64_t kKc = 1024;
constexpr int kMr = 12;
constexpr int64_t kMc = 96;  // rows per block: 8 panels of 12
constexpr int64_t kNcPanels = 8;

#define ANVIL_ROWS12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

// C tile (MR rows x 32 columns; `rows` and the column masks say which are stored) =
// beta * C + sum over kc2 pairs of A pair(i) . B pair(j). `pa`: kc2 x MR pairs (p-major);
// `pb`: kc2 x 32 pairs.
template <int MR>
ANVIL_BF16_TARGET void MicroKernel(int64_t kc2, const uint32_t* pa, const uint32_t* pb, float* c, int64_t ldc,
                                   float beta, int rows, __mmask16 m0, __mmask16 m1) {
  // The tile's rows of C are fetched while the k loop runs: C is megabytes and each tile is
  // met once per k chunk, so its lines are not in cache and the accumulating loads and the
  // stores at the end would wait for them (3-5 % of a 2048^3 product on Zen 4). A prefetch
  // never faults, so the last line may lie past C.
  for (int i = 0; i < rows; ++i) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 31), _MM_HINT_T0);
  }
#define ANVIL_DECL(i) __m512 x##i = _mm512_setzero_ps(), y##i = _mm512_setzero_ps();
  ANVIL_ROWS12(ANVIL_DECL)
#undef ANVIL_DECL
  for (int64_t q = 0; q < kc2; ++q) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(pb + q * 32);
    const __m512bh b1 = (__m512bh)_mm512_loadu_si512(pb + q * 32 + 16);
    const uint32_t* aq = pa + q * MR;
#define ANVIL_STEP(i)                                                         \
  if constexpr (i < MR) {                                                     \
    const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(aq[i])); \
    x##i = _mm512_dpbf16_ps(x##i, av, b0);                                    \
    y##i = _mm512_dpbf16_ps(y##i, av, b1);                                    \
  }
    ANVIL_ROWS12(ANVIL_STEP)
#undef ANVIL_STEP
  }
  const bool accumulate = beta != 0.0f;
#define ANVIL_STORE(i)                                                       \
  if constexpr (i < MR) {                                                    \
    if (i < rows) StoreTileRow(c + i * ldc, x##i, y##i, accumulate, m0, m1); \
  }
  ANVIL_ROWS12(ANVIL_STORE)
#undef ANVIL_STORE
}

#undef ANVIL_ROWS12

using TileFn = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, float, int, __mmask16, __mmask16);

int PanelRows(int64_t rows) { return rows > 8 ? 12 : rows > 4 ? 8 : 4; }

TileFn PickTile(int mr) {
  switch (mr) {
    case 12:
      return &MicroKernel<12>;
    case 8:
      return &MicroKernel<8>;
    default:
      return &MicroKernel<4>;
  }
}

inline uint32_t Pair(uint16_t lo, uint16_t hi) { return uint32_t{lo} | (uint32_t{hi} << 16); }

// out[q * out_stride + j] = the 32-bit word (pair) q of column j, for q < 16 and the j set in
// out_mask, where column j starts at col + j * col_stride (bf16 elements; words unaligned) and
// columns from `valid` on read as zeros (and are not read). A 16 x 16 transpose of 32-bit
// words: pairs of rows interleaved by 32 then 64 bits within each 128-bit lane, then the lanes
// gathered twice across registers.
ANVIL_BF16_TARGET void TransposePairs16(const uint16_t* col, int64_t col_stride, int valid, uint32_t* out,
                                        int64_t out_stride, __mmask16 out_mask) {
  TransposeWords16(col, col_stride * static_cast<int64_t>(sizeof(uint16_t)), valid, out, out_stride, out_mask);
}

// B into 32-column panels of pairs (the layout: bf16_pack.h's PackBPairs).
ANVIL_BF16_TARGET void PackB(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t p0, int64_t kc, int64_t n,
                             int64_t panel_pairs, uint32_t* out) {
  const int64_t kc2 = (kc + 1) / 2;
  for (int64_t j0 = 0; j0 < n; j0 += 32) {
    uint32_t* panel = out + (j0 / 32) * panel_pairs * 32;
    if (panel_pairs > kc2) std::memset(panel + kc2 * 32, 0, static_cast<size_t>((panel_pairs - kc2) * 32 * 4));
    const int64_t w = std::min<int64_t>(32, n - j0);
    if (b_cs == 1 && w == 32) {
      // Rows contiguous: interleave two rows of 32 values with one permute per 16 pairs.
      const __m512i lo_idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38,
                                              6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
      const __m512i hi_idx = _mm512_add_epi16(lo_idx, _mm512_set1_epi16(16));
      for (int64_t q = 0; q < kc2; ++q) {
        const int64_t p = p0 + 2 * q;
        const __m512i r0 = _mm512_loadu_si512(b + p * b_rs + j0);
        const __m512i r1 = 2 * q + 1 < kc ? _mm512_loadu_si512(b + (p + 1) * b_rs + j0) : _mm512_setzero_si512();
        _mm512_storeu_si512(panel + q * 32, _mm512_permutex2var_epi16(r0, lo_idx, r1));
        _mm512_storeu_si512(panel + q * 32 + 16, _mm512_permutex2var_epi16(r0, hi_idx, r1));
      }
      continue;
    }
    if (b_rs == 1) {
      // Columns contiguous (B is a transposed row-major matrix, as W^T in a Linear layer, or
      // the columns in a convolution's weight gradient): a pair is one 32-bit word, and 16
      // columns x 16 pairs are one 16 x 16 transpose of words.
      const int64_t full = kc / 2;
      const int64_t blocked = w == 32 ? full / 16 * 16 : 0;  // pairs done by the transposes
      if (blocked > 0) {
        for (int64_t jb = 0; jb < 32; jb += 16) {
          for (int64_t q0 = 0; q0 < blocked; q0 += 16) {
            TransposePairs16(b + (j0 + jb) * b_cs + p0 + 2 * q0, b_cs, 16, panel + q0 * 32 + jb, 32, 0xFFFF);
          }
        }
      }
      for (int64_t j = 0; j < 32; ++j) {
        if (j >= w) {
          for (int64_t q = 0; q < kc2; ++q) panel[q * 32 + j] = 0;
          continue;
        }
        const uint16_t* col = b + (j0 + j) * b_cs + p0;
        for (int64_t q = blocked; q < full; ++q) {
          uint32_t v;
          std::memcpy(&v, col + 2 * q, 4);
          panel[q * 32 + j] = v;
        }
        if (kc % 2 != 0) panel[full * 32 + j] = Pair(col[kc - 1], 0);
      }
      continue;
    }
    for (int64_t q = 0; q < kc2; ++q) {
      const int64_t p = p0 + 2 * q;
      for (int64_t j = 0; j < 32; ++j) {
        if (j >= w) {
          panel[q * 32 + j] = 0;
          continue;
        }
        const uint16_t* e = b + p * b_rs + (j0 + j) * b_cs;
        panel[q * 32 + j] = Pair(e[0], 2 * q + 1 < kc ? e[b_rs] : 0);
      }
    }
  }
}

// A rows i0 .. i0+rows, columns p0 .. p0+kc, into one panel of mr rows (kc2 x mr pairs; rows
// past `rows` zero).
ANVIL_BF16_TARGET void PackA(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t i0, int64_t rows, int mr,
                             int64_t p0, int64_t kc, uint32_t* panel) {
  const int64_t kc2 = (kc + 1) / 2;
  if (a_rs == 1) {
    // A column-major (a transposed operand, as g^T in a Linear layer's weight gradient): the
    // two halves of a row of pairs are contiguous runs of A's columns p and p + 1, widened to
    // 32 bits and merged; masked loads read nothing past the panel's rows, and rows past
    // `rows` come out zero.
    const auto in_mask = static_cast<__mmask16>((1u << rows) - 1), out_mask = static_cast<__mmask16>((1u << mr) - 1);
    for (int64_t q = 0; q < kc2; ++q) {
      const int64_t p = p0 + 2 * q;
      const __m256i lo = _mm256_maskz_loadu_epi16(in_mask, a + p * a_cs + i0);
      const __m256i hi =
          2 * q + 1 < kc ? _mm256_maskz_loadu_epi16(in_mask, a + (p + 1) * a_cs + i0) : _mm256_setzero_si256();
      const __m512i pairs =
          _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
      _mm512_mask_storeu_epi32(panel + q * mr, out_mask, pairs);
    }
    return;
  }
  const int64_t full = kc / 2;
  // Rows contiguous (the common case): 16 pairs of the panel's rows at a time are one 16 x 16
  // transpose of words, rows past `rows` zero; a word-by-word copy took 5-7 % of a 1024^3
  // product.
  const int64_t blocked = a_cs == 1 ? full / 16 * 16 : 0;
  for (int64_t q0 = 0; q0 < blocked; q0 += 16) {
    TransposePairs16(a + i0 * a_rs + p0 + 2 * q0, a_rs, static_cast<int>(rows), panel + q0 * mr, mr,
                     static_cast<__mmask16>((1u << mr) - 1));
  }
  for (int64_t i = 0; i < mr; ++i) {
    if (i >= rows) {
      for (int64_t q = blocked; q < kc2; ++q) panel[q * mr + i] = 0;
      continue;
    }
    const uint16_t* row = a + (i0 + i) * a_rs + p0 * a_cs;
    if (a_cs == 1) {
      for (int64_t q = blocked; q < full; ++q) {
        uint32_t v;
        std::memcpy(&v, row + 2 * q, 4);
        panel[q * mr + i] = v;
      }
    } else {
      for (int64_t q = 0; q < full; ++q) panel[q * mr + i] = Pair(row[2 * q * a_cs], row[(2 * q + 1) * a_cs]);
    }
    if (kc % 2 != 0) panel[full * mr + i] = Pair(row[(kc - 1) * a_cs], 0);
  }
}

}  // namespace

void packing::PackBPairs(const uint16_t* b, int64_t b_rs, int64_t b_cs, int64_t p0, int64_t kc, int64_t n,
                         int64_t panel_pairs, uint32_t* out) {
  PackB(b, b_rs, b_cs, p0, kc, n, panel_pairs, out);
}

bool bf16_gemm_available() { return cpu_features().avx512_bf16 && isa_at_least(CpuIsa::kAvx512); }

const char* bf16_gemm_kernel_name() {
  if (!bf16_gemm_available()) return "none (widened to float32)";
  return amx_bf16_gemm_available() ? "anvil-amx-bf16 (tdpbf16ps)" : "anvil-avx512-bf16 (vdpbf16ps)";
}

namespace {
// Whether a product is worth AMX tiles: a tile is 16 rows x 32 k values x 16 columns, and a
// product with fewer rows or columns than that leaves most of each tdpbf16ps idle, where
// vdpbf16ps wastes nothing. (Not tuned on hardware: no AMX CPU has been measured.)
bool WorthTiles(int64_t m, int64_t n, int64_t k) { return m >= 16 && n >= 16 && k >= 32; }
}  // namespace

ANVIL_BF16_TARGET void anvil_bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                                       const uint16_t* b, int64_t b_rs, int64_t b_cs, float beta, float* c,
                                       int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  if (WorthTiles(m, n, k) && amx_bf16_gemm_available()) {
    amx_bf16_gemm(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
    return;
  }
  // Reused per thread: fresh pages cost more than the packing.
  thread_local std::vector<uint32_t> packed_a, packed_b;
  const int64_t panels = (n + 31) / 32;
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const int64_t kc2 = (kc + 1) / 2;
    const float chunk_beta = p0 == 0 ? beta : 1.0f;
    packed_b.resize(static_cast<size_t>(panels * kc2 * 32));
    PackB(b, b_rs, b_cs, p0, kc, n, kc2, packed_b.data());
    // Rows in blocks of kMc (blocking: above).
    packed_a.resize(static_cast<size_t>((kMc + kMr) * kc2));
    for (int64_t ic = 0; ic < m; ic += kMc) {
      const int64_t mc = std::min(kMc, m - ic);
      int64_t offset = 0;
      for (int64_t i0 = 0; i0 < mc;) {
        const int mr = PanelRows(mc - i0);
        const int64_t rows = std::min<int64_t>(mr, mc - i0);
        PackA(a, a_rs, a_cs, ic + i0, rows, mr, p0, kc, packed_a.data() + offset);
        offset += mr * kc2;
        i0 += rows;
      }
      for (int64_t jg = 0; jg < panels; jg += kNcPanels) {
        const int64_t group_end = std::min(panels, jg + kNcPanels);
        offset = 0;
        for (int64_t i0 = 0; i0 < mc;) {
          const int mr = PanelRows(mc - i0);
          const int rows = static_cast<int>(std::min<int64_t>(mr, mc - i0));
          const TileFn tile = PickTile(mr);
          for (int64_t jp = jg; jp < group_end; ++jp) {
            const int64_t j0 = jp * 32;
            const int64_t w = std::min<int64_t>(32, n - j0);
            const __mmask16 m0 = w >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << w) - 1);
            const __mmask16 m1 = w >= 32 ? __mmask16(0xFFFF) : w <= 16 ? __mmask16(0) : __mmask16((1u << (w - 16)) - 1);
            tile(kc2, packed_a.data() + offset, packed_b.data() + jp * kc2 * 32, c + (ic + i0) * ldc + j0, ldc,
                 chunk_beta, rows, m0, m1);
          }
          offset += mr * kc2;
          i0 += rows;
        }
      }
    }
  }
}

namespace {

std::optional<Bf16GemmCandidate> ForcedBf16Candidate() {
  static const std::optional<Bf16GemmCandidate> forced = []() -> std::optional<Bf16GemmCandidate> {
    const char* v = std::getenv("ANVIL_BF16_GEMM");
    if (v == nullptr || *v == '\0') return std::nullopt;
    for (Bf16GemmCandidate c : {Bf16GemmCandidate::kAnvil, Bf16GemmCandidate::kOneDnn}) {
      if (bf16_gemm_candidate_name(c) != v) continue;
      const std::string why = bf16_gemm_unavailable_reason(c);
      ANVIL_CHECK(why.empty(), "ANVIL_BF16_GEMM=", v, ": that candidate cannot run here: ", why);
      return c;
    }
    throw Error(std::string("ANVIL_BF16_GEMM='") + v + "': expected anvil or onednn");
  }();
  return forced;
}

// Where oneDNN's bf16 matmul is preferred (one thread: the calling thread's share of a product).
// - amx level: oneDNN's AMX-BF16 kernels, for products worth tiles. Measured on an Intel Xeon
//   with AMX (family 6 model 207; anvil_bench_amp "" onednn-gemm, bench/RESULTS.md "int8 and
//   bf16 on AMX", one thread): level with Anvil's AMX kernel on cubes (256^3 0.91x, 1024^3
//   0.92x, 2048^3 1.00x) and ahead on the MLP's products (256x1024x1024 1.68x forward, 1.55x
//   backward), the narrow ones (256x10x1024 18x, batch-1 and batch-8 Linear 2.7x and 3.3x)
//   and the lenet5 ones (1.05-1.6x).
// - avx512 with AVX-512-BF16, measured on Zen 5 (anvil_bench_amp "" onednn-gemm; bench/RESULTS.md,
//   "oneDNN bf16 and int8 primitives"): on square and MLP-sized products the two are within
//   12 % of each other, the sign varying between runs (2048^3: Anvil 461 GFLOP/s, oneDNN 417),
//   so Anvil's kernel stays. oneDNN's brgemm wins on narrow products with a long inner
//   dimension, where Anvil's 12 x 32 tiles run mostly empty: n <= 16 (256x10x1024: 181 against
//   112 GFLOP/s; 256x16x1024: 285 against 179) and m < 16 (10x1024x256: 264 against 182; batch
//   1 and 8 Linear 1024x1024: 1.39x and 1.07x). It loses where k is short or n is 24
//   (256x1024x10: 110 against 291; 64x10x84: 62 against 78; 256x24x1024: 224 against 267), its
//   fixed cost per call showing.
bool OneDnnPreferred(int64_t m, int64_t n, int64_t k) {
  if (isa_at_least(CpuIsa::kAmx)) return WorthTiles(m, n, k);
  const bool narrow = n <= 16 || m < 16;
  return narrow && k >= 256 && m * n * k >= (int64_t{1} << 18);
}

}  // namespace

std::string bf16_gemm_candidate_name(Bf16GemmCandidate c) {
  return c == Bf16GemmCandidate::kOneDnn ? "onednn" : "anvil";
}

std::string bf16_gemm_unavailable_reason(Bf16GemmCandidate c) {
  if (!bf16_gemm_available()) {
    return cpu_features().avx512_bf16 ? "the active ISA level is " + std::string(isa_name(active_isa())) +
                                            ", below avx512 (bfloat16 products are widened to float32)"
                                      : "no AVX512-BF16 on this CPU (bfloat16 products are widened to float32)";
  }
  if (c == Bf16GemmCandidate::kAnvil) return "";
  std::string why;
  return onednn::bf16_available(&why) ? "" : why;
}

std::optional<Bf16GemmCandidate> bf16_gemm_forced_candidate() { return ForcedBf16Candidate(); }

Bf16GemmCandidate bf16_gemm_candidate_for(int64_t m, int64_t n, int64_t k) {
  if (const std::optional<Bf16GemmCandidate> f = ForcedBf16Candidate()) return *f;
  static const bool library = onednn::available();  // loaded once; the level may change (ScopedIsa)
  return library && bf16_gemm_available() && OneDnnPreferred(m, n, k) ? Bf16GemmCandidate::kOneDnn
                                                                      : Bf16GemmCandidate::kAnvil;
}

void bf16_gemm_with(Bf16GemmCandidate candidate, int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs,
                    int64_t a_cs, const uint16_t* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  ANVIL_CHECK(bf16_gemm_available(), "bf16_gemm: ", bf16_gemm_unavailable_reason(candidate));
  if (candidate == Bf16GemmCandidate::kOneDnn) {
    onednn::bf16_matmul(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
    return;
  }
  anvil_bf16_gemm(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

bool bf16_gemm_takes_onednn(int64_t m, int64_t n, int64_t k, int64_t a_rs, int64_t a_cs, int64_t b_rs, int64_t b_cs) {
  // Operands with no unit stride (a strided view) stay on Anvil's kernel, which packs any layout;
  // a size-1 dimension's stride is free.
  return bf16_gemm_candidate_for(m, n, k) == Bf16GemmCandidate::kOneDnn &&
         onednn::bf16_matmul_supported(m == 1 ? 1 : a_rs, k == 1 ? 1 : a_cs, k == 1 ? 1 : b_rs, n == 1 ? 1 : b_cs);
}

void bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
               int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  if (bf16_gemm_takes_onednn(m, n, k, a_rs, a_cs, b_rs, b_cs)) {
    onednn::bf16_matmul(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
    return;
  }
  anvil_bf16_gemm(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

namespace {
// The scalar BFloat16 conversion's integer rounding, 16 at a time (vcvtneps2bf16 would flush
// denormals, which BFloat16(float) and PyTorch keep).
__attribute__((target("avx512f"))) void FloatToBf16Avx512(const float* in, uint16_t* out, int64_t n) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_castps_si512(_mm512_loadu_ps(in + i));
    const __m512i high = _mm512_srli_epi32(u, 16);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(bias, _mm512_and_si512(high, one))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    r = _mm512_mask_or_epi32(r, nan, high, quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) out[i] = BFloat16(in[i]).bits;
}
}  // namespace

void bf16_to_float(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = detail::BitsFloat(uint32_t{in[i]} << 16);
}

void float_to_bf16(const float* in, uint16_t* out, int64_t n) {
  if (isa_at_least(CpuIsa::kAvx512)) {
    FloatToBf16Avx512(in, out, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16(in[i]).bits;
}

}  // namespace anvil::cpu
