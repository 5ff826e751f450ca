// Page-locked host memory in the CUDA backend (NOTE [ Pinned staging ] in host_block_cache.h):
// the allocator behind pinned CPU tensors, and host-to-device copies that never wait for the
// GPU.
//
// Thread-safety: safe from any thread (the allocator is a HostBlockCache, built once).
#pragma once

#include <cstddef>

#include "core/backend/cuda/host_block_cache.h"
#include "core/tensor/allocator.h"

namespace anvil::cuda {

// The process's pinned host allocator (CPU storage; is_pinned()). Requires a usable device.
Allocator* pinned_allocator();

// Queues a copy of `nbytes` from host memory at `src` to `dst` on cuda:`device`, on the calling
// thread's current stream, and returns without waiting for the GPU. With `non_blocking` a
// pinned source is read in place (its block is kept from reuse until the copy has run, and the
// caller does not write it until then); otherwise, and from pageable memory, sources up to
// kMaxStagingBytes are first copied to a pinned staging block, so the caller may write them at
// once. Larger pageable copies take the driver's path (it waits for the stream first); larger
// pinned ones without non_blocking wait for the copy. When no page-locked memory can be had,
// staging falls back to the driver's path.
void copy_host_to_device(void* dst, int device, const void* src, size_t nbytes, bool non_blocking);
constexpr size_t kMaxStagingBytes = size_t{64} << 20;

}  // namespace anvil::cuda
