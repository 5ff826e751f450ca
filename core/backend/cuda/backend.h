// The CUDA backend object (allocator per device, copies, kernel table) and the few controls
// the rest of Anvil reaches for: memory statistics and empty_cache per device.
//
// Thread-safety: safe from any thread; each device's allocator is made once, under the
// backend's mutex, and is itself thread-safe (caching_allocator.h).
#pragma once

#include "core/backend/cuda/caching_allocator.h"
#include "core/backend/registry.h"

namespace anvil::cuda {

// The process's CUDA backend; built on first use. Throws when no device is usable.
Backend& backend();

// The CUDA kernel table (filled without touching a device, so a test on a machine without a
// GPU can check that every row of the op table has a CUDA kernel).
const KernelTable& kernel_table();

// The caching allocator's statistics for cuda:`device` (see CachingAllocator::Stats).
CachingAllocator::Stats memory_stats(int device);
// Returns cuda:`device`'s unused cached memory to the driver.
void empty_cache(int device);
// Restarts cuda:`device`'s peak_allocated_bytes from the bytes allocated now.
void reset_peak(int device);

}  // namespace anvil::cuda
