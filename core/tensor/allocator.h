// Memory allocators behind Storage.
//
// The CPU allocator caches freed blocks by size class and hands them back on the next
// request of that class. Why: first touch of fresh memory costs ~11 µs per 4 KiB page on
// the machines Anvil targets (~0.35 GB/s), so reusing a warm block is worth more than most
// kernel tricks. Blocks of 2 MiB and more are 2 MiB-aligned and advised as huge pages.
// Thread-safety: every Allocator is safe for concurrent use (the CPU one keeps its cache and
// statistics under one mutex).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/tensor/device.h"

namespace anvil {

struct AllocatorStats {
  int64_t allocated_bytes = 0;  // handed out and not yet returned
  int64_t cached_bytes = 0;     // returned, kept for reuse
  int64_t peak_allocated_bytes = 0;
  int64_t num_allocs = 0;         // calls to allocate
  int64_t num_cache_hits = 0;     // served from the cache
  int64_t num_system_allocs = 0;  // served by the operating system (the driver, on a GPU)
  // Caching device allocators only (0 elsewhere):
  int64_t active_blocks = 0;       // handed out, or freed but still in use by another stream
  int64_t largest_free_block = 0;  // the biggest request the cache can serve without the driver
  double fragmentation = 0;        // 1 - largest free block / cached bytes
  int64_t num_ooms = 0;            // out-of-memory errors raised
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns at least `nbytes` (64-byte aligned). Throws OutOfMemoryError.
  virtual void* allocate(size_t nbytes) = 0;
  // `nbytes` must be the size passed to allocate.
  virtual void deallocate(void* ptr, size_t nbytes) = 0;
  virtual Device device() const = 0;
  virtual AllocatorStats stats() const = 0;
  // Returns cached blocks to the system.
  virtual void empty_cache() = 0;
  // Page-locked host memory (CPU storage that GPU copies read without waiting).
  virtual bool is_pinned() const { return false; }
};

// The process-wide caching CPU allocator. ANVIL_CPU_CACHE_MB caps the cache (default 2048).
Allocator* cpu_allocator();

// The size class a request of `nbytes` is rounded up to (exposed for tests).
size_t cpu_size_class(size_t nbytes);

}  // namespace anvil
