// Page-locked ("pinned") host memory for asynchronous host-to-device copies, as a cache of
// blocks whose reuse waits for the GPU.
//
// NOTE [ Pinned staging ]
// The GPU's copy engines read host memory by DMA, which needs pages that cannot move. From
// ordinary (pageable) memory, cudaMemcpyAsync first waits for everything queued on the stream
// and then copies through a driver buffer: a host-to-device copy in the training loop would
// hold the host until the GPU has finished the previous step, and the next step's kernels
// could not be queued ahead. From page-locked memory the copy is queued like a kernel and the
// host moves on. So host-to-device copies go through page-locked blocks: either the tensor
// already lives in one (Tensor::pin_memory(), DataLoaderOptions::pin_memory), or the bytes are
// first copied into a staging block on the host.
//
// A block may be read by the GPU after the host is done with it (the copy is still queued).
// Each copy records an event on the stream it was queued on against the block
// (record_use), and a freed block is handed out again only when all its events have
// completed. Page-locking is slow (a system call and page-table work per block) and limited
// by the system, so blocks are kept and reused: sizes are rounded up to powers of two from
// 4 KiB, and empty_cache() returns free, idle blocks.
//
// The bookkeeping sits on HostMemoryProvider (cudaHostAlloc / cudaFreeHost and events in the
// CUDA backend; a fake in the tests), so it is tested on machines without a GPU.
//
// Thread-safety: all methods are thread-safe (one mutex); the provider is called with it held.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "core/backend/cuda/device_memory.h"
#include "core/util/mutex.h"

namespace anvil::cuda {

class HostMemoryProvider {
 public:
  virtual ~HostMemoryProvider() = default;
  // `bytes` of page-locked memory, or nullptr when none can be had.
  virtual void* allocate(size_t bytes) = 0;
  virtual void free(void* ptr) = 0;
  // As DeviceMemoryProvider's: an event at the current end of `stream`'s queued work.
  virtual EventId record_event(StreamId stream) = 0;
  virtual bool query_event(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
};

class HostBlockCache {
 public:
  struct Stats {
    int64_t allocated_bytes = 0;  // in blocks handed out
    int64_t cached_bytes = 0;     // in blocks kept for reuse (idle or still read by the GPU)
    int64_t pending_blocks = 0;   // freed blocks the GPU may still be reading
    int64_t num_host_allocs = 0;  // page-locked allocations made (each is slow)
    int64_t num_reuses = 0;       // requests served by a cached block
  };

  explicit HostBlockCache(HostMemoryProvider* provider);
  ~HostBlockCache();  // frees every block: callers make sure the GPU is done with them
  HostBlockCache(const HostBlockCache&) = delete;
  HostBlockCache& operator=(const HostBlockCache&) = delete;

  // The block size a request of `bytes` gets (a power of two, at least 4 KiB).
  static size_t round_size(size_t bytes);

  // A block of at least `bytes`: a cached one of its size whose recorded uses have all
  // completed, else a new one (after emptying the cache once if the provider refuses).
  // Throws OutOfMemoryError when no page-locked memory can be had.
  void* allocate(size_t bytes);
  // Returns a block from allocate(); it is reused once every use recorded on it completes.
  void deallocate(void* ptr);
  // Records that work queued on `stream` reads or writes the block holding `ptr` (which may
  // point inside it). Returns false, recording nothing, when `ptr` is in no block.
  bool record_use(const void* ptr, StreamId stream);
  // Whether [ptr, ptr + bytes) lies inside one block handed out by allocate().
  bool contains(const void* ptr, size_t bytes) const;
  // Frees every cached block whose recorded uses have completed.
  void empty_cache();
  Stats stats() const;

 private:
  struct Block {
    size_t size = 0;
    bool allocated = false;
    std::vector<EventId> uses;  // events not yet seen completed
  };
  using Blocks = std::map<uintptr_t, Block>;  // by address

  // Drops the completed events of `b`; true when none is left.
  bool Idle(Block& b) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Blocks::const_iterator Find(const void* ptr) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees every cached block whose uses have completed.
  void ReleaseIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  HostMemoryProvider* const provider_ ABSL_PT_GUARDED_BY(mu_);  // called with mu_ held
  mutable Mutex mu_;
  Blocks blocks_ ABSL_GUARDED_BY(mu_);
  std::multimap<size_t, uintptr_t> free_ ABSL_GUARDED_BY(mu_);  // cached blocks by size
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace anvil::cuda
