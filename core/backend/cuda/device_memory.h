// DeviceMemoryProvider: the few driver calls the CUDA caching allocator needs, behind an
// interface so that the allocator's bookkeeping builds and is tested without a GPU (tests
// plug in a fake address space; the CUDA backend plugs in the runtime and driver APIs).
//
// One provider serves one device. Implementations report out-of-memory by returning
// nullptr / false, never by throwing: running out is an expected event the allocator
// recovers from (it empties its cache and retries). Any other failure (an illegal address,
// a lost device) is not recoverable here, so implementations throw and the allocator lets
// the exception through.
//
// Thread-safety: the allocator calls the provider with its own mutex held, one call at a
// time; implementations need no locking of their own and must not call back into it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace anvil::cuda {

// A CUDA stream as an opaque id (the real backend uses the cudaStream_t bits). The
// allocator only compares ids: memory freed on one stream is reused by that stream alone,
// because work queued on one stream is ordered after earlier work on the same stream only.
using StreamId = uint64_t;

// A marker at the current end of one stream's queued work (a cudaEvent_t in the real
// backend). It completes when everything queued on that stream before it has run.
using EventId = uint64_t;

class DeviceMemoryProvider {
 public:
  virtual ~DeviceMemoryProvider() = default;

  // ---- Plain segments (cudaMalloc / cudaFree).
  // `bytes` of device memory, or nullptr when the device is out of memory.
  virtual void* malloc(size_t bytes) = 0;
  // Returns memory from malloc(). Real implementations may synchronise the device.
  virtual void free(void* ptr) = 0;

  // ---- Expandable segments (cuMemAddressReserve; cuMemCreate + cuMemMap + cuMemSetAccess;
  // cuMemUnmap + cuMemRelease; cuMemAddressFree). Reserving address space costs no memory,
  // so the allocator reserves one large range and backs it page by page as it grows: blocks
  // freed at the end merge with new pages instead of stranding memory in fixed segments.
  //
  // The page size of physical mappings (2 MiB on current GPUs). Addresses and sizes passed
  // to map() and unmap() are multiples of it.
  virtual size_t granularity() const = 0;
  // A range of `bytes` of virtual address space with nothing mapped, or nullptr when the
  // address space is exhausted.
  virtual void* reserve_address(size_t bytes) = 0;
  // Gives a range from reserve_address() back; everything in it has been unmapped.
  virtual void release_address(void* base, size_t bytes) = 0;
  // Backs [addr, addr + bytes) inside a reserved range with new physical memory, readable
  // and writable by this device. False when the device is out of memory (nothing mapped).
  // Each granularity() page must get its own physical allocation, because the allocator
  // later unmaps any page-aligned sub-range (the pages at the end it no longer uses).
  virtual bool map(void* addr, size_t bytes) = 0;
  // Unmaps a mapped page-aligned range and releases its physical memory.
  virtual void unmap(void* addr, size_t bytes) = 0;

  // ---- Stream ordering (cudaEventRecord / cudaEventQuery / cudaEventSynchronize /
  // cudaEventDestroy). A block freed while other streams may still read it (see
  // CachingAllocator::record_stream) is held back until an event on each of them completes.
  //
  // Records an event at the current end of `stream`'s queued work.
  virtual EventId record_event(StreamId stream) = 0;
  // Whether the event has completed; does not block.
  virtual bool query_event(EventId event) = 0;
  // Blocks until the event has completed.
  virtual void synchronize_event(EventId event) = 0;
  // Releases an event from record_event(); each is destroyed exactly once.
  virtual void destroy_event(EventId event) = 0;

  // The device's memory size, used for the expandable reservation and error messages.
  virtual size_t total_bytes() const = 0;
};

}  // namespace anvil::cuda
