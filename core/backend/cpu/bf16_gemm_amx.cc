// The AMX bfloat16 GEMM (interface and why: bf16_gemm_amx.h).
//
// Blocking: k in chunks of kKc; per chunk, B packed into 32-column panels of pairs (the layout
// the AVX-512-BF16 kernel packs, padded to whole tiles: bf16_pack.h), A into 32-row panels whose
// rows are the chunk's k values, padded with zeros to whole tiles. Each 32 x 32 block of C is
// four float32 tiles (tmm0-3) fed by two A tiles (tmm4-5, 16 rows x 16 pairs each) and two B
// tiles (tmm6-7, 16 pairs x 16 columns); a B panel (kc x 32, 32 KiB) stays in L1 while the row
// panels of a kMc block pass under it.
#include "core/backend/cpu/bf16_gemm_amx.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "core/backend/cpu/amx_tiles.h"
#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/bf16_pack.h"
#include "core/backend/cpu/isa.h"
#include "core/util/cpu_features.h"
#include "core/util/error.h"
#include "core/util/half.h"
#include "core/util/log.h"

namespace anvil::cpu {

namespace {

constexpr int64_t kKc = 512;  // k values per chunk: a B panel is 32 KiB
constexpr int64_t kMc = 128;  // rows per block: 4 row panels of 32
using amx::CacheLineAligned;
using amx::kTileBytes;  // bytes per tile row: 16 float32 or 16 bf16 pairs
using amx::kTileRows;
using amx::LoadC;
using amx::StoreC;
constexpr int64_t kPairsPerStep = 16;   // pairs (32 k values) per tdpbf16ps
constexpr int64_t kBPanelStride = 128;  // bytes per pair row of a 32-column B panel

// The hardware policy: the shared tile instructions and this kernel's dot product.
struct AmxTiles : amx::HardwareTiles {
  template <int C, int A, int B>
  static void Dot() {
    static_assert(C != A && C != B && A != B, "tdpbf16ps raises #UD unless its three tiles differ");
    asm volatile("tdpbf16ps %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(C), "i"(A), "i"(B));
  }
};

// The emulated policy: the shared tile emulation and this kernel's dot product from the
// instruction set reference's pseudo-code.
struct EmulatedTiles : amx::EmulatedTiles {
  // make_fp32 with DAZ: a denormal bf16 reads as a zero of its sign.
  static float Fp32(uint16_t bits) {
    if ((bits & 0x7f80) == 0) bits &= 0x8000;
    return detail::BitsFloat(uint32_t{bits} << 16);
  }
  // DAZ on a float32 input and FTZ on a result: a denormal becomes a zero of its sign.
  static float Flush(float x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.0f, x) : x; }
  // Per row m: the even and the odd products of each column's pairs accumulate apart, over all
  // 16 pairs of A's row (float32 FMAs, each rounded to nearest even); then their sum is added
  // to dst.row[m].fp32[n]. The reference's order, so a test on emulated tiles sums as the
  // hardware does.
  template <int C, int A, int B>
  static void Dot() {
    static_assert(C != A && C != B && A != B, "tdpbf16ps raises #UD unless its three tiles differ");
    float dst[kTileRows][16];
    uint16_t a[kTileRows][32], b[kTileRows][32];
    std::memcpy(dst, Rows(C), sizeof(dst));
    std::memcpy(a, Rows(A), sizeof(a));
    std::memcpy(b, Rows(B), sizeof(b));
    for (int m = 0; m < kTileRows; ++m) {
      float even[16] = {}, odd[16] = {};
      for (int k = 0; k < 16; ++k) {
        for (int n = 0; n < 16; ++n) {
          even[n] = Flush(std::fma(Fp32(a[m][2 * k]), Fp32(b[k][2 * n]), even[n]));
          odd[n] = Flush(std::fma(Fp32(a[m][2 * k + 1]), Fp32(b[k][2 * n + 1]), odd[n]));
        }
      }
      for (int n = 0; n < 16; ++n) dst[m][n] = Flush(Flush(dst[m][n]) + Flush(even[n] + odd[n]));
    }
    std::memcpy(Rows(C), dst, sizeof(dst));
  }
};

// A rows i0 .. i0+rows (rows <= 32), k values p0 .. p0+kc, into a 32-row panel whose row r is
// `ld` bf16 values (ld >= 2 * kc2p, a whole number of tile steps): A(i0+r, p0+p) at r * ld + p,
// zero past kc and for rows past `rows`.
void PackARows(const uint16_t* a, int64_t a_rs, int64_t a_cs, int64_t i0, int64_t rows, int64_t p0, int64_t kc,
               int64_t ld, uint16_t* panel) {
  std::memset(panel, 0, static_cast<size_t>(32 * ld) * sizeof(uint16_t));
  if (a_cs == 1) {
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(panel + r * ld, a + (i0 + r) * a_rs + p0, static_cast<size_t>(kc) * sizeof(uint16_t));
    }
    return;
  }
  // Column-major or strided A (a transposed operand): one column of the panel at a time, so
  // each read runs along A's contiguous direction when a_rs is 1.
  for (int64_t p = 0; p < kc; ++p) {
    const uint16_t* col = a + (p0 + p) * a_cs + i0 * a_rs;
    for (int64_t r = 0; r < rows; ++r) panel[r * ld + p] = col[r * a_rs];
  }
}

// The A panel's row length in bf16 values for kc2p pairs: one cache line more than the pairs,
// so the 16 rows a tile load reads do not all fall in the same few L1 sets (at kc 512 an
// unpadded row is 1 KiB: 16 rows would share 4 of the 64 sets).
int64_t PanelRowLength(int64_t kc2p) { return 2 * kc2p + 32; }

// C block (rows x cols of it inside C, both <= 32) = [C +] A panel x B panel over kc2p pairs.
template <class Tiles>
void Block32(int64_t kc2p, const uint16_t* pa, const uint32_t* pb, float* c, int64_t ldc, bool accumulate, int64_t rows,
             int64_t cols, float* edge) {
  const int64_t ld = PanelRowLength(kc2p);
  const int64_t a_stride = ld * 2;               // bytes per row of the A panel
  const uint16_t* pa_low = pa + kTileRows * ld;  // rows 16 .. 31
  const bool low = rows > kTileRows;             // whether rows 16 .. 31 hold any of C
  LoadC<Tiles, 0>(accumulate, c, ldc, rows, cols, edge);
  LoadC<Tiles, 1>(accumulate, c + 16, ldc, rows, cols - 16, edge);
  if (low) {
    LoadC<Tiles, 2>(accumulate, c + kTileRows * ldc, ldc, rows - kTileRows, cols, edge);
    LoadC<Tiles, 3>(accumulate, c + kTileRows * ldc + 16, ldc, rows - kTileRows, cols - 16, edge);
  }
  for (int64_t q0 = 0; q0 < kc2p; q0 += kPairsPerStep) {
    Tiles::template Load<4>(pa + 2 * q0, a_stride);
    Tiles::template Load<6>(pb + q0 * 32, kBPanelStride);
    Tiles::template Load<7>(pb + q0 * 32 + 16, kBPanelStride);
    Tiles::template Dot<0, 4, 6>();
    Tiles::template Dot<1, 4, 7>();
    if (low) {
      Tiles::template Load<5>(pa_low + 2 * q0, a_stride);
      Tiles::template Dot<2, 5, 6>();
      Tiles::template Dot<3, 5, 7>();
    }
  }
  StoreC<Tiles, 0>(c, ldc, rows, cols, edge);
  StoreC<Tiles, 1>(c + 16, ldc, rows, cols - 16, edge);
  if (low) {
    StoreC<Tiles, 2>(c + kTileRows * ldc, ldc, rows - kTileRows, cols, edge);
    StoreC<Tiles, 3>(c + kTileRows * ldc + 16, ldc, rows - kTileRows, cols - 16, edge);
  }
}

template <class Tiles>
void TiledGemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
               int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (beta == 0.0f) {
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    }
    return;
  }
  // Reused per thread: fresh pages cost more than the packing. Both start on a cache line (every
  // stride is a multiple of 64 bytes, so no tile row then straddles two lines).
  thread_local std::vector<uint32_t> packed_b_storage;
  thread_local std::vector<uint16_t> packed_a_storage;
  alignas(64) float edge[kTileRows * 16];
  const int64_t panels = (n + 31) / 32;
  Tiles::Configure();
  for (int64_t p0 = 0; p0 < k; p0 += kKc) {
    const int64_t kc = std::min(kKc, k - p0);
    const int64_t kc2p = ((kc + 1) / 2 + kPairsPerStep - 1) / kPairsPerStep * kPairsPerStep;
    const bool accumulate = p0 > 0 || beta != 0.0f;
    uint32_t* packed_b = CacheLineAligned(packed_b_storage, panels * kc2p * 32);
    packing::PackBPairs(b, b_rs, b_cs, p0, kc, n, kc2p, packed_b);
    const int64_t ld = PanelRowLength(kc2p);
    for (int64_t ic = 0; ic < m; ic += kMc) {
      const int64_t mc = std::min(kMc, m - ic);
      const int64_t row_panels = (mc + 31) / 32;
      uint16_t* packed_a = CacheLineAligned(packed_a_storage, row_panels * 32 * ld);
      for (int64_t rp = 0; rp < row_panels; ++rp) {
        PackARows(a, a_rs, a_cs, ic + rp * 32, std::min<int64_t>(32, mc - rp * 32), p0, kc, ld,
                  packed_a + rp * 32 * ld);
      }
      for (int64_t jp = 0; jp < panels; ++jp) {
        const int64_t cols = std::min<int64_t>(32, n - jp * 32);
        for (int64_t rp = 0; rp < row_panels; ++rp) {
          Block32<Tiles>(kc2p, packed_a + rp * 32 * ld, packed_b + jp * kc2p * 32, c + (ic + rp * 32) * ldc + jp * 32,
                         ldc, accumulate, std::min<int64_t>(32, mc - rp * 32), cols, edge);
        }
      }
    }
  }
  Tiles::Release();
}

// The hardware kernel against float64 on a product with a partial tile in every direction, a
// column-major A and a second k chunk; "" when it agrees.
std::string CheckHardwareKernel() {
  const int64_t m = 45, n = 37, k = 600;
  std::vector<uint16_t> a(m * k), b(k * n);
  uint32_t state = 12345;
  auto next = [&state] {
    state = state * 1664525u + 1013904223u;
    return BFloat16(static_cast<float>(static_cast<int32_t>(state >> 8) % 2001 - 1000) / 500.0f).bits;
  };
  for (auto& x : a) x = next();
  for (auto& x : b) x = next();
  auto value = [](uint16_t bits) { return static_cast<double>(detail::BitsFloat(uint32_t{bits} << 16)); };
  std::vector<float> c(m * n, 0.25f);
  // A column-major (a_rs 1, a_cs m), B row-major; beta 1.
  TiledGemm<AmxTiles>(m, n, k, a.data(), 1, m, b.data(), n, 1, 1.0f, c.data(), n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = 0.25, mag = 0.25;
      for (int64_t p = 0; p < k; ++p) {
        const double t = value(a[p * m + i]) * value(b[p * n + j]);
        ref += t;
        mag += std::fabs(t);
      }
      const double got = c[i * n + j];
      if (!(std::fabs(got - ref) <= 1e-5 * mag)) {
        return "the AMX bfloat16 kernel disagreed with float64 at C[" + std::to_string(i) + ", " + std::to_string(j) +
               "] (" + std::to_string(got) + " vs " + std::to_string(ref) + ")";
      }
    }
  }
  return "";
}

// Why the hardware kernel may not run here ("" when it may), decided once per process.
const std::string& HardwareReason() {
  static const std::string reason = [] {
    const CpuFeatures& f = cpu_features();
    if (!f.amx_tile || !f.amx_bf16) {
      return std::string(f.amx_unavailable_reason.empty() ? "no AMX-BF16 on this CPU" : f.amx_unavailable_reason);
    }
    if (!bf16_gemm_available()) return std::string("no AVX-512-BF16 at the active level (the packing needs it)");
    std::string why = CheckHardwareKernel();
    if (!why.empty()) {
      why += "; bfloat16 products run on AVX-512-BF16";
      engine_log(LogSeverity::kWarning, why);
    }
    return why;
  }();
  return reason;
}

}  // namespace

bool amx_bf16_gemm_available() { return isa_at_least(CpuIsa::kAmx) && HardwareReason().empty(); }

std::string amx_bf16_gemm_unavailable_reason() {
  if (detected_isa() < CpuIsa::kAmx) return HardwareReason();  // the CPU's (or the OS's) reason
  if (!isa_at_least(CpuIsa::kAmx)) {
    return "the active ISA level is " + std::string(isa_name(active_isa())) + " (ANVIL_CPU_ISA), below amx";
  }
  return HardwareReason();
}

void amx_bf16_gemm(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs, const uint16_t* b,
                   int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  TiledGemm<AmxTiles>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

void amx_bf16_gemm_emulated(int64_t m, int64_t n, int64_t k, const uint16_t* a, int64_t a_rs, int64_t a_cs,
                            const uint16_t* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  TiledGemm<EmulatedTiles>(m, n, k, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

}  // namespace anvil::cpu
