// Pinned host memory and staged host-to-device copies: see pinned_memory.h.
#include "core/backend/cuda/pinned_memory.h"

#include <cuda_runtime.h>

#include <cstring>

#include "core/backend/cuda/cuda_check.h"
#include "core/backend/cuda/runtime.h"
#include "core/util/error.h"

namespace anvil::cuda {
namespace {

class CudaHostMemory final : public HostMemoryProvider {
 public:
  void* allocate(size_t bytes) override {
    void* p = nullptr;
    // Portable: usable by copies to every device, not only the one current now.
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    ANVIL_CUDA_CHECK(e);
    return p;
  }
  void free(void* ptr) override { ANVIL_CUDA_CHECK(cudaFreeHost(ptr)); }
  // The caller has made the stream's device current.
  EventId record_event(StreamId stream) override { return cuda::record_event(stream); }
  bool query_event(EventId event) override { return event_completed(event); }
  void destroy_event(EventId event) override { cuda::destroy_event(event); }
};

HostBlockCache& Cache() {
  // Leaked: pinned tensors may outlive static destructors, and cudaFreeHost after the runtime
  // has shut down fails.
  static HostMemoryProvider* provider = new CudaHostMemory();
  static HostBlockCache* cache = new HostBlockCache(provider);
  return *cache;
}

class PinnedAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override { return Cache().allocate(nbytes); }
  void deallocate(void* ptr, size_t) override { Cache().deallocate(ptr); }
  Device device() const override { return kCPU; }
  bool is_pinned() const override { return true; }
  AllocatorStats stats() const override {
    const HostBlockCache::Stats s = Cache().stats();
    AllocatorStats out;
    out.allocated_bytes = s.allocated_bytes;
    out.cached_bytes = s.cached_bytes;
    out.num_system_allocs = s.num_host_allocs;
    out.num_cache_hits = s.num_reuses;
    return out;
  }
  void empty_cache() override { Cache().empty_cache(); }
};

}  // namespace

Allocator* pinned_allocator() {
  static PinnedAllocator allocator;
  return &allocator;
}

void copy_host_to_device(void* dst, int device, const void* src, size_t nbytes, bool non_blocking) {
  DeviceGuard guard(device);
  const cudaStream_t stream = current_stream(device);
  const StreamId id = reinterpret_cast<StreamId>(stream);
  HostBlockCache& cache = Cache();
  const bool pinned = cache.contains(src, nbytes);
  if (pinned && non_blocking) {
    ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
    cache.record_use(src, id);
    return;
  }
  // Without staging: the driver's path (from pageable memory it waits for the stream first;
  // from pinned memory the copy is truly asynchronous, so wait: the caller may write the source
  // next).
  auto direct_copy = [&] {
    ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
    if (pinned) wait_for_stream(stream);
  };
  if (nbytes > kMaxStagingBytes) return direct_copy();
  void* staging = nullptr;
  try {
    staging = cache.allocate(nbytes);
  } catch (const OutOfMemoryError&) {
    return direct_copy();  // no page-locked memory to be had
  }
  std::memcpy(staging, src, nbytes);
  try {
    ANVIL_CUDA_CHECK(cudaMemcpyAsync(dst, staging, nbytes, cudaMemcpyHostToDevice, stream));
    cache.record_use(staging, id);
  } catch (...) {
    // The copy may be queued without its event: let it finish before the block is reused.
    (void)cudaStreamSynchronize(stream);
    cache.deallocate(staging);
    throw;
  }
  cache.deallocate(staging);  // reused once the copy has run
}

}  // namespace anvil::cuda
