// A sequential reader over one Philox4x32 stream, with unbiased integer and open-interval
// draws. Shared by the samplers, random_split, the random transforms and the synthetic
// datasets so that every random choice in the data pipeline is a pure function of
// (key, subsequence) and reproducible across runs, processes and backends.
// Thread-safety: none; each worker makes its own stream from (key, subsequence), so none is shared.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor/random.h"

namespace anvil::data {

// A sequential reader over the Philox blocks of one (key, subsequence) stream. The
// subsequence carries the epoch, so each epoch reads a disjoint, independent stream while
// staying a pure function of (seed, epoch).
class PhiloxStream {
 public:
  PhiloxStream(uint64_t key, uint64_t subsequence) : key_(key), subsequence_(subsequence) {}

  uint32_t NextU32() {
    if (pos_ == 4) {
      block_ = philox4x32(key_, counter_++, subsequence_);
      pos_ = 0;
    }
    return block_[pos_++];
  }
  uint64_t NextU64() {
    const uint64_t hi = NextU32();
    return (hi << 32) | NextU32();
  }
  // Uniform in [0, bound). Rejects the top sliver of the 64-bit range so that every value
  // is exactly equally likely; a plain modulo would favour small values.
  uint64_t UniformInt(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    uint64_t r = NextU64();
    while (r < threshold) r = NextU64();
    return r % bound;
  }
  // Uniform in the open interval (0, 1): never 0, so log() of it is finite.
  double UniformOpen() {
    const uint64_t bits = NextU64() >> 11;  // 53 bits
    return (static_cast<double>(bits) + 0.5) * (1.0 / 9007199254740992.0);
  }

 private:
  uint64_t key_;
  uint64_t subsequence_;
  uint64_t counter_ = 0;
  std::array<uint32_t, 4> block_{};
  int pos_ = 4;
};

// Mixes two 64-bit values into one key (splitmix64 finaliser over a combination), so that
// nearby seeds and indices give unrelated Philox keys.
inline uint64_t MixKey(uint64_t a, uint64_t b) {
  uint64_t z = a + 0x9E3779B97F4A7C15ull * (b + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace anvil::data
