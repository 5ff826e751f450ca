// Random numbers: a counter-based Philox4x32-10 generator. A draw is a pure function of
// (seed, counter), so any backend reproduces the same stream element by element, and
// parallel kernels need no shared state: element i of a fill uses counter offset + i/4.
// Thread-safety: a Generator is safe for concurrent use (its methods take an internal mutex);
// the free functions are pure.
#pragma once

#include <array>
#include <cstdint>
#include <utility>

#include "core/util/macros.h"
#include "core/util/mutex.h"

namespace anvil {

// One Philox4x32-10 block: 4 random 32-bit words for (key, counter).
ANVIL_INLINE std::array<uint32_t, 4> philox4x32(uint64_t key, uint64_t counter, uint64_t subsequence = 0) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32);
  uint32_t c2 = static_cast<uint32_t>(subsequence), c3 = static_cast<uint32_t>(subsequence >> 32);
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53u} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57u} * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c0 = n0;
    c1 = static_cast<uint32_t>(p1);
    c2 = n2;
    c3 = static_cast<uint32_t>(p0);
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// Uniform in [0, 1) from 24 (float) or 53 (double) random bits.
ANVIL_INLINE float uniform_float(uint32_t r) { return static_cast<float>(r >> 8) * (1.0f / 16777216.0f); }
ANVIL_INLINE double uniform_double(uint32_t hi, uint32_t lo) {
  const uint64_t bits = (uint64_t{hi} << 21) ^ (lo >> 11);
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * (1.0 / 9007199254740992.0);
}

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : seed_(seed) {}
  void manual_seed(uint64_t seed) {
    MutexLock lock(&mu_);
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t seed() const {
    MutexLock lock(&mu_);
    return seed_;
  }
  // Reserves `blocks` Philox blocks; returns (seed, first counter).
  std::pair<uint64_t, uint64_t> reserve(uint64_t blocks) {
    MutexLock lock(&mu_);
    const uint64_t first = offset_;
    offset_ += blocks;
    return {seed_, first};
  }
  // State for checkpoints: (seed, offset).
  std::pair<uint64_t, uint64_t> get_state() const {
    MutexLock lock(&mu_);
    return {seed_, offset_};
  }
  void set_state(uint64_t seed, uint64_t offset) {
    MutexLock lock(&mu_);
    seed_ = seed;
    offset_ = offset;
  }

 private:
  mutable Mutex mu_;
  uint64_t seed_ ABSL_GUARDED_BY(mu_);
  uint64_t offset_ ABSL_GUARDED_BY(mu_) = 0;
};

// The generator random ops draw from on the calling thread (torch.manual_seed seeds this one):
// the thread's own while a ScopedDefaultGenerator is installed on it, else the process-wide one.
Generator& default_generator();

// Makes `g` the calling thread's default generator for this scope. A training job installs its
// own on the thread that runs it, so its initialisation and dropout draw from one seeded stream
// that nothing else moves: a model built on another thread for serving, a dry run, another job.
// Scopes nest; the previous generator is restored at the end. Draws are reserved on the thread
// that calls the random op (parallel fills then compute from the reserved counters), so work
// handed to the pool needs no generator of its own.
// Thread-safety: the installation is the calling thread's; `g` itself is thread-safe and must
// outlive the scope.
class ScopedDefaultGenerator {
 public:
  explicit ScopedDefaultGenerator(Generator& g);
  ~ScopedDefaultGenerator();
  ScopedDefaultGenerator(const ScopedDefaultGenerator&) = delete;
  ScopedDefaultGenerator& operator=(const ScopedDefaultGenerator&) = delete;

 private:
  Generator* previous_;
};

}  // namespace anvil
