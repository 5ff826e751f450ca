// AMX tile operations shared by the AMX kernels (bf16_gemm_amx.cc, int8_gemm_amx.cc): the tile
// configuration every kernel uses (palette 1, tiles 0-7 of 16 rows x 64 bytes), the hardware
// instructions as asm statements, and their emulation from the instruction set reference's
// pseudo-code, so each kernel is written once over a policy (HardwareTiles or EmulatedTiles,
// extended by the kernel with its dot product) and its packing, blocking and edge logic is
// tested on any CPU; and the moves of C's tiles (float32 or int32 accumulators) in and out of
// tiles, partial ones at C's edges included, which both kernels' blocks make alike.
//
// Thread-safety: tiles are per thread, on the hardware and in the emulation (thread_local).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/util/error.h"

namespace anvil::cpu::amx {

constexpr int64_t kTileRows = 16;
constexpr int64_t kTileBytes = 64;  // bytes per tile row

// The 64-byte operand of ldtilecfg (palette 1): tiles 0-7 all 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64, "ldtilecfg reads 64 bytes");

constexpr TileConfig FullTiles() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = kTileBytes;
    cfg.rows[t] = kTileRows;
  }
  return cfg;
}
inline constexpr TileConfig kFullTiles = FullTiles();

// The AMX instructions. Written as asm statements (the assembler knows them; no target flags
// needed), each with a "memory" clobber where it reads or writes memory, so the compiler keeps
// the packing's stores before the loads that read them.
struct HardwareTiles {
  static void Configure() { asm volatile("ldtilecfg %0" ::"m"(kFullTiles)); }
  static void Release() { asm volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void Zero() {
    asm volatile("tilezero %%tmm%c0" ::"i"(T));
  }
  template <int T>
  static void Load(const void* base, int64_t stride) {
    asm volatile("tileloadd (%0,%1,1), %%tmm%c2" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
  template <int T>
  static void Store(void* base, int64_t stride) {
    asm volatile("tilestored %%tmm%c2, (%0,%1,1)" ::"r"(base), "r"(stride), "i"(T) : "memory");
  }
};

// The same operations in scalar code, from the pseudo-code for LDTILECFG, TILERELEASE,
// TILELOADD, TILESTORED and TILEZERO (with the configuration above). Tiles start (and end)
// zeroed, as LDTILECFG and TILERELEASE leave them.
struct EmulatedTiles {
  struct State {
    alignas(64) uint8_t tile[8][kTileRows][kTileBytes];
    bool configured = false;
  };
  static State& state() {
    thread_local State s;
    return s;
  }
  static void Configure() {
    std::memset(state().tile, 0, sizeof(state().tile));
    state().configured = true;
  }
  static void Release() {
    std::memset(state().tile, 0, sizeof(state().tile));
    state().configured = false;
  }
  static uint8_t* Rows(int t) {
    ANVIL_INTERNAL_ASSERT(state().configured, "a tile instruction before ldtilecfg (the hardware raises #UD)");
    return &state().tile[t][0][0];
  }
  template <int T>
  static void Zero() {
    std::memset(Rows(T), 0, kTileRows * kTileBytes);
  }
  template <int T>
  static void Load(const void* base, int64_t stride) {
    for (int64_t r = 0; r < kTileRows; ++r) {
      std::memcpy(Rows(T) + r * kTileBytes, static_cast<const uint8_t*>(base) + r * stride, kTileBytes);
    }
  }
  template <int T>
  static void Store(void* base, int64_t stride) {
    for (int64_t r = 0; r < kTileRows; ++r) {
      std::memcpy(static_cast<uint8_t*>(base) + r * stride, Rows(T) + r * kTileBytes, kTileBytes);
    }
  }
};

// C tile T at `c` (rows x cols of it inside C, either may be <= 0 or under 16) into tmm T: from
// C itself when the tile is whole, through `edge` (16 x 16 elements) when not; zero when not
// accumulating. E is the accumulators' four-byte type (float or int32_t).
template <class Tiles, int T, typename E>
void LoadC(bool accumulate, const E* c, int64_t ldc, int64_t rows, int64_t cols, E* edge) {
  static_assert(sizeof(E) == 4, "a tile row is 16 four-byte accumulators");
  if (!accumulate || rows <= 0 || cols <= 0) {
    Tiles::template Zero<T>();
    return;
  }
  if (rows >= kTileRows && cols >= 16) {
    Tiles::template Load<T>(c, ldc * 4);
    return;
  }
  std::fill(edge, edge + kTileRows * 16, E(0));
  for (int64_t r = 0; r < std::min(rows, kTileRows); ++r) {
    std::copy(c + r * ldc, c + r * ldc + std::min<int64_t>(cols, 16), edge + r * 16);
  }
  Tiles::template Load<T>(edge, kTileBytes);
}

// tmm T back to C (only its rows x cols inside C).
template <class Tiles, int T, typename E>
void StoreC(E* c, int64_t ldc, int64_t rows, int64_t cols, E* edge) {
  static_assert(sizeof(E) == 4, "a tile row is 16 four-byte accumulators");
  if (rows <= 0 || cols <= 0) return;
  if (rows >= kTileRows && cols >= 16) {
    Tiles::template Store<T>(c, ldc * 4);
    return;
  }
  Tiles::template Store<T>(edge, kTileBytes);
  for (int64_t r = 0; r < std::min(rows, kTileRows); ++r) {
    std::copy(edge + r * 16, edge + r * 16 + std::min<int64_t>(cols, 16), c + r * ldc);
  }
}

// `count` elements of `storage` starting on a 64-byte boundary (storage grows as needed), so
// that packed panels whose strides are multiples of 64 bytes have no tile row straddling two
// cache lines.
template <class T>
T* CacheLineAligned(std::vector<T>& storage, int64_t count) {
  const size_t slack = 64 / sizeof(T);
  storage.resize(static_cast<size_t>(count) + slack);
  const auto address = reinterpret_cast<uintptr_t>(storage.data());
  return storage.data() + ((64 - address % 64) % 64) / sizeof(T);
}

}  // namespace anvil::cpu::amx
