// The int8 kernels' entry points and packed layouts, for int8_gemm.cc's dispatch and the tests
// (the public contract: int8_gemm.h).
//
// Layouts of PackedInt8Weight::packed() (W is [n, k], row j = output column j of C):
//   avx2         panels of 16 columns; per pair of k values q, 32 bytes: column j's
//                W[j, 2q], W[j, 2q + 1] at bytes 2j, 2j + 1 (vpmovsxbw of each 16-byte half
//                gives the s16 pairs vpmaddwd wants); k padded to even with zeros.
//   avx512-vnni  panels of 32 columns; per group of four k values q, 128 bytes: column j's
//   and amx      W[j, 4q .. 4q + 3] at bytes 4j .. 4j + 3 (lane j of two zmm, the operand
//                vpdpbusd wants; and 16 rows of 64 bytes at a stride of 128 are an AMX B tile of
//                16 groups x 16 columns). k padded with zeros to a multiple of 64 (a tile's
//                depth), so the two kernels share one layout and the VNNI kernel can run an
//                AMX-packed weight for products too small for tiles.
// Columns past n are zero in the last panel.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

namespace anvil::cpu::int8_kernels {

// Bytes of the packed layout for W [n, k].
int64_t Avx2PackedBytes(int64_t n, int64_t k);
int64_t VnniPackedBytes(int64_t n, int64_t k);

// W (row j at w + j * ldw) into the layout above; `out` holds the sizes above.
void PackAvx2(const int8_t* w, int64_t n, int64_t k, int64_t ldw, int8_t* out);
void PackVnni(const int8_t* w, int64_t n, int64_t k, int64_t ldw, int8_t* out);

// The writer of both layouts: W into panels of kPanelCols columns, each a run of `panel_groups`
// rows of kPanelCols * kGroup bytes, group q of a panel holding column j's W[j, q * kGroup ..
// q * kGroup + kGroup - 1] at bytes (j % kPanelCols) * kGroup onwards. All `bytes` of `out` are
// zeroed first: that is the padding of k and of the columns past n.
template <int64_t kPanelCols, int64_t kGroup>
void PackPanels(const int8_t* w, int64_t n, int64_t k, int64_t ldw, int64_t panel_groups, int64_t bytes, int8_t* out) {
  constexpr int64_t kGroupBytes = kPanelCols * kGroup;
  std::memset(out, 0, static_cast<size_t>(bytes));
  for (int64_t j = 0; j < n; ++j) {
    int8_t* panel = out + (j / kPanelCols) * panel_groups * kGroupBytes + (j % kPanelCols) * kGroup;
    const int8_t* row = w + j * ldw;
    for (int64_t p = 0; p < k; ++p) panel[(p / kGroup) * kGroupBytes + p % kGroup] = row[p];
  }
}

// C[i, j] = sum_p A[i, p] * W[j, p] for i < m, j in [j0, j1) (j0 a multiple of 16), W packed
// in the kernel's layout above (n columns, depth k). A is read only inside its rows'
// first k bytes; C only at the columns written.
void GemmAvx2(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
              int64_t j1, int32_t* c, int64_t ldc);
void GemmVnni(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
              int64_t j1, int32_t* c, int64_t ldc);
void GemmAmx(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
             int64_t j1, int32_t* c, int64_t ldc);
// The AMX kernel on tiles emulated in scalar code (int8_gemm_amx.cc): runs on any CPU.
void GemmAmxEmulated(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
                     int64_t j1, int32_t* c, int64_t ldc);

// What every kernel does first, for the products with nothing to multiply: none at all (no rows
// or no columns), or depth 0, whose C columns [j0, j1) are zeros. True when the product was one
// of those (C is then done).
inline bool EmptyProduct(int64_t m, int64_t k, int64_t j0, int64_t j1, int32_t* c, int64_t ldc) {
  if (m <= 0 || j1 <= j0) return true;
  if (k != 0) return false;
  for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc + j0, c + i * ldc + j1, 0);
  return true;
}

// Whether the AMX-INT8 kernel runs here (the amx level is active, the CPU has AMX-INT8 and
// AVX-512-VNNI, and the kernel passed its first-use check), and why not ("" when it does).
bool AmxAvailable();
std::string AmxUnavailableReason();

// The fewest rows a product needs to take the tiles: a tile is 16 rows, and with fewer most of
// each tdpbusd is spent on zero rows while vpdpbusd wastes nothing.
inline constexpr int64_t kAmxMinRows = 16;

// Rows per block of A, whose packed bytes stay in L2 while every panel of W passes under them
// (W is streamed from memory once per block): 8 panels of 12 for the VNNI kernel, 4 panels of 32
// for the AMX one. Callers that run their own passes around the product block by block take
// them from int8_gemm_rows_per_block (int8_gemm.h).
inline constexpr int64_t kVnniRowBlock = 96;
inline constexpr int64_t kAmxRowBlock = 128;

}  // namespace anvil::cpu::int8_kernels
