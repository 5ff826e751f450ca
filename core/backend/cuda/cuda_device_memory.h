// The DeviceMemoryProvider of a real GPU: cudaMalloc/cudaFree for plain segments, the
// driver's virtual-memory calls for expandable segments, CUDA events for stream ordering.
//
// The driver API is reached through cudaGetDriverEntryPointByVersion rather than linked:
// binaries then need no libcuda at link time and start (CPU-only) on machines without one.
//
// Thread-safety: none of its own: the CachingAllocator that owns it calls it under its mutex,
// one call at a time (device_memory.h).
#pragma once

#include <cstdint>
#include <map>

#include "core/backend/cuda/device_memory.h"

namespace anvil::cuda {

class CudaDeviceMemory final : public DeviceMemoryProvider {
 public:
  explicit CudaDeviceMemory(int device);
  ~CudaDeviceMemory() override;

  void* malloc(size_t bytes) override;
  void free(void* ptr) override;
  size_t granularity() const override { return granularity_; }
  void* reserve_address(size_t bytes) override;
  void release_address(void* base, size_t bytes) override;
  bool map(void* addr, size_t bytes) override;
  void unmap(void* addr, size_t bytes) override;
  EventId record_event(StreamId stream) override;
  bool query_event(EventId event) override;
  void synchronize_event(EventId event) override;
  void destroy_event(EventId event) override;
  size_t total_bytes() const override { return total_; }

 private:
  struct Driver;
  const int device_;
  size_t total_ = 0;
  size_t granularity_ = size_t{2} << 20;
  Driver* driver_ = nullptr;                    // null until expandable segments are used
  std::map<uintptr_t, uint64_t> page_handles_;  // mapped page address -> physical allocation
  Driver& GetDriver();
};

}  // namespace anvil::cuda
