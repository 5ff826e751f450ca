// The AMX-INT8 kernel (layout: int8_gemm_kernels.h): tdpbusd multiplies a 16 x 64 u8 tile of A
// by a 64 x 16 s8 tile of W (16 rows of four-byte groups, 16 columns each) into a 16 x 16 int32
// tile of C, sixteen vpdpbusd's work per instruction, exactly.
//
// Written once over a tile-operations policy, as the bfloat16 AMX kernel (bf16_gemm_amx.cc):
// the AMX instructions, and an emulation of them from the instruction set reference's
// pseudo-code (tile loads and stores row by row at a byte stride; tdpbusd's four u8 x s8
// products per dword summed into the int32 element), so the packing, blocking and edge logic is
// tested on any CPU. On an AMX CPU the first use checks the hardware against the scalar
// definition on a product with edges in every direction, and leaves the products to the
// AVX-512-VNNI kernel (saying why) if they differ.
//
// Blocking: k in chunks of kKc; per chunk, A packed into 32-row panels of the chunk's bytes
// (zero-padded to whole tiles, so no tile load reads past A), W read in place from its packed
// panels (a B tile is 16 groups x 64 bytes at a stride of 128). Each 32 x 32 block of C is four
// int32 tiles (tmm0-3) fed by two A tiles (tmm4-5) and two W tiles (tmm6-7).
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "core/backend/cpu/amx_tiles.h"
#include "core/backend/cpu/int8_gemm_kernels.h"
#include "core/backend/cpu/isa.h"
#include "core/util/cpu_features.h"
#include "core/util/error.h"
#include "core/util/log.h"

namespace anvil::cpu::int8_kernels {

namespace {

constexpr int64_t kKc = 1024;          // k values per chunk (a multiple of a tile's 64)
constexpr int64_t kMc = kAmxRowBlock;  // rows per block: 4 row panels of 32
using amx::CacheLineAligned;
using amx::kTileBytes;  // bytes per tile row: 16 int32, or 64 u8, or 16 groups of 4 s8
using amx::kTileRows;
using amx::LoadC;
using amx::StoreC;
constexpr int64_t kGroupBytes = 128;  // one group of four k values of a 32-column W panel

int64_t PanelGroups(int64_t k) { return (k + 63) / 64 * 16; }

// The hardware policy: the shared tile instructions and this kernel's dot product.
struct AmxTiles : amx::HardwareTiles {
  template <int C, int A, int B>
  static void Dot() {
    static_assert(C != A && C != B && A != B, "tdpbusd raises #UD unless its three tiles differ");
    asm volatile("tdpbusd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

// The emulated policy: the shared tile emulation and this kernel's dot product from the
// instruction set reference's pseudo-code.
struct EmulatedTiles : amx::EmulatedTiles {
  // For each row m and column n: dst.row[m].dword[n] += the four products
  // ZEXT(a.row[m].byte[4k + i]) * SEXT(b.row[k].byte[4n + i]) for each k < 16, i < 4, in 32-bit
  // arithmetic that wraps (the reference's DPBD; no sum of at most 65536 products of
  // 255 x 128 ever wraps).
  template <int C, int A, int B>
  static void Dot() {
    static_assert(C != A && C != B && A != B, "tdpbusd raises #UD unless its three tiles differ");
    uint32_t dst[kTileRows][16];
    uint8_t a[kTileRows][kTileBytes];
    int8_t b[kTileRows][kTileBytes];
    std::memcpy(dst, Rows(C), sizeof(dst));
    std::memcpy(a, Rows(A), sizeof(a));
    std::memcpy(b, Rows(B), sizeof(b));
    for (int m = 0; m < kTileRows; ++m) {
      for (int k = 0; k < 16; ++k) {
        for (int n = 0; n < 16; ++n) {
          uint32_t dword = 0;
          for (int i = 0; i < 4; ++i) {
            dword += static_cast<uint32_t>(int32_t{a[m][4 * k + i]} * int32_t{b[k][4 * n + i]});
          }
          dst[m][n] += dword;
        }
      }
    }
    std::memcpy(Rows(C), dst, sizeof(dst));
  }
};

// A rows i0 .. i0+rows (rows <= 32), bytes p0 .. p0+kc, into a 32-row panel whose rows are `ld`
// bytes apart; zero past kc and for rows past `rows`. Reads only A's own bytes.
void PackARows(const uint8_t* a, int64_t lda, int64_t rows, int64_t kc, int64_t ld, uint8_t* panel) {
  std::memset(panel, 0, static_cast<size_t>(32 * ld));
  for (int64_t r = 0; r < rows; ++r) std::memcpy(panel + r * ld, a + r * lda, static_cast<size_t>(kc));
}

// One cache line more than the chunk's bytes, so a tile load's 16 rows do not share a few L1 sets.
int64_t PanelRowLength(int64_t kcp) { return kcp + 64; }

// C block (rows <= 32 of it; columns [g*16, g*16 + cols0) and [g*16 + 16, ... + cols1)) [+]= the A
// panel x the W tiles of column groups g and g + 1 (w0, w1: their first group row) over `steps`
// tiles of depth.
template <class Tiles>
void Block(int64_t steps, const uint8_t* pa, int64_t ld, const int8_t* w0, const int8_t* w1, int32_t* c, int64_t ldc,
           bool accumulate, int64_t rows, int64_t cols0, int64_t cols1, int32_t* edge) {
  const uint8_t* pa_low = pa + kTileRows * ld;
  const bool low = rows > kTileRows;
  const bool right = cols1 > 0;
  LoadC<Tiles, 0>(accumulate, c, ldc, rows, cols0, edge);
  if (right) LoadC<Tiles, 1>(accumulate, c + 16, ldc, rows, cols1, edge);
  if (low) {
    LoadC<Tiles, 2>(accumulate, c + kTileRows * ldc, ldc, rows - kTileRows, cols0, edge);
    if (right) LoadC<Tiles, 3>(accumulate, c + kTileRows * ldc + 16, ldc, rows - kTileRows, cols1, edge);
  }
  for (int64_t s = 0; s < steps; ++s) {
    Tiles::template Load<4>(pa + s * kTileBytes, ld);
    Tiles::template Load<6>(w0 + s * kTileRows * kGroupBytes, kGroupBytes);
    Tiles::template Dot<0, 4, 6>();
    if (right) {
      Tiles::template Load<7>(w1 + s * kTileRows * kGroupBytes, kGroupBytes);
      Tiles::template Dot<1, 4, 7>();
    }
    if (low) {
      Tiles::template Load<5>(pa_low + s * kTileBytes, ld);
      Tiles::template Dot<2, 5, 6>();
      if (right) Tiles::template Dot<3, 5, 7>();
    }
  }
  StoreC<Tiles, 0>(c, ldc, rows, cols0, edge);
  if (right) StoreC<Tiles, 1>(c + 16, ldc, rows, cols1, edge);
  if (low) {
    StoreC<Tiles, 2>(c + kTileRows * ldc, ldc, rows - kTileRows, cols0, edge);
    if (right) StoreC<Tiles, 3>(c + kTileRows * ldc + 16, ldc, rows - kTileRows, cols1, edge);
  }
}

template <class Tiles>
void TiledGemm(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
               int64_t j1, int32_t* c, int64_t ldc) {
  if (EmptyProduct(m, k, j0, j1, c, ldc)) return;
  thread_local std::vector<uint8_t> packed_a_storage;
  alignas(64) int32_t edge[kTileRows * 16];
  const int64_t panel_bytes = PanelGroups(k) * kGroupBytes;
  // The W tile of column group g (16 columns) at group row q: half of a 32-column panel.
  const auto w_tile = [&](int64_t g, int64_t q) {
    return packed + (g / 2) * panel_bytes + (g % 2) * 64 + q * kGroupBytes;
  };
  const int64_t first_group = j0 / 16, end_group = (j1 + 15) / 16;
  Tiles::Configure();
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const int64_t kcp = (kc + 63) / 64 * 64;
    const int64_t ld = PanelRowLength(kcp);
    for (int64_t ic = 0; ic < m; ic += kMc) {
      const int64_t mc = std::min(kMc, m - ic);
      const int64_t row_panels = (mc + 31) / 32;
      uint8_t* packed_a = CacheLineAligned(packed_a_storage, row_panels * 32 * ld);
      for (int64_t rp = 0; rp < row_panels; ++rp) {
        PackARows(a + (ic + rp * 32) * lda + p0, lda, std::min<int64_t>(32, mc - rp * 32), kc, ld,
                  packed_a + rp * 32 * ld);
      }
      for (int64_t g = first_group; g < end_group; g += 2) {
        const int64_t cols0 = std::min<int64_t>(16, j1 - g * 16);
        const int64_t cols1 = g + 1 < end_group ? std::min<int64_t>(16, j1 - (g + 1) * 16) : 0;
        for (int64_t rp = 0; rp < row_panels; ++rp) {
          Block<Tiles>(kcp / 64, packed_a + rp * 32 * ld, ld, w_tile(g, p0 / 4), w_tile(g + 1, p0 / 4),
                       c + (ic + rp * 32) * ldc + g * 16, ldc, p0 > 0, std::min<int64_t>(32, mc - rp * 32), cols0,
                       cols1, edge);
        }
      }
    }
  }
  Tiles::Release();
}

// The hardware kernel against the scalar definition on a product with a partial tile in every
// direction, a second k chunk, extreme values and a column split at an odd group; "" when equal.
std::string CheckHardwareKernel() {
  const int64_t m = 45, n = 37, k = 1100;
  std::vector<uint8_t> a(static_cast<size_t>(m * k));
  std::vector<int8_t> w(static_cast<size_t>(n * k));
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return state >> 24;
  };
  for (auto& x : a) x = static_cast<uint8_t>(next());
  for (auto& x : w) x = static_cast<int8_t>(next());
  for (int64_t p = 0; p < k; ++p) {  // row 0 of A all 255 against row 0 of W all -128
    a[static_cast<size_t>(p)] = 255;
    w[static_cast<size_t>(p)] = -128;
  }
  std::vector<int8_t> packed(static_cast<size_t>(VnniPackedBytes(n, k)));
  PackVnni(w.data(), n, k, k, packed.data());
  std::vector<int32_t> c(static_cast<size_t>(m * n), 7);
  TiledGemm<AmxTiles>(m, a.data(), k, packed.data(), n, k, 0, 16, c.data(), n);
  TiledGemm<AmxTiles>(m, a.data(), k, packed.data(), n, k, 16, n, c.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      int32_t ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += int32_t{a[i * k + p]} * w[j * k + p];
      const int32_t got = c[static_cast<size_t>(i * n + j)];
      if (got != ref) {
        return "the AMX int8 kernel disagreed with the scalar reference at C[" + std::to_string(i) + ", " +
               std::to_string(j) + "] (" + std::to_string(got) + " vs " + std::to_string(ref) + ")";
      }
    }
  }
  return "";
}

// Why the hardware kernel may not run here ("" when it may), decided once per process.
const std::string& HardwareReason() {
  static const std::string reason = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_tile || !f.amx_int8) {
      return std::string(f.amx_unavailable_reason.empty() ? "no AMX-INT8 on this CPU" : f.amx_unavailable_reason);
    }
    if (!f.avx512_vnni) return std::string("no AVX-512-VNNI (the kernel for products under a tile's rows)");
    std::string why = CheckHardwareKernel();
    if (!why.empty()) {
      why += "; int8 products run on AVX-512-VNNI";
      engine_log(LogSeverity::kWarning, why);
    }
    return why;
  }();
  return reason;
}

}  // namespace

bool AmxAvailable() { return isa_at_least(CpuIsa::kAmx) && HardwareReason().empty(); }

std::string AmxUnavailableReason() {
  if (detected_isa() < CpuIsa::kAmx) return HardwareReason();
  if (!isa_at_least(CpuIsa::kAmx)) {
    return "the active ISA level is " + std::string(isa_name(active_isa())) + " (ANVIL_CPU_ISA), below amx";
  }
  return HardwareReason();
}

void GemmAmx(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
             int64_t j1, int32_t* c, int64_t ldc) {
  TiledGemm<AmxTiles>(m, a, lda, packed, n, k, j0, j1, c, ldc);
}

void GemmAmxEmulated(int64_t m, const uint8_t* a, int64_t lda, const int8_t* packed, int64_t n, int64_t k, int64_t j0,
                     int64_t j1, int32_t* c, int64_t ldc) {
  TiledGemm<EmulatedTiles>(m, a, lda, packed, n, k, j0, j1, c, ldc);
}

}  // namespace anvil::cpu::int8_kernels
