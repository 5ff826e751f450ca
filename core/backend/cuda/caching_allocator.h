// CachingAllocator: the device-independent bookkeeping of Anvil's CUDA memory allocator,
// modelled on PyTorch's CUDACachingAllocator. cudaMalloc and cudaFree are slow (cudaFree
// synchronises the whole device), so memory is taken from the device in large segments,
// carved into blocks, and freed blocks are kept for reuse instead of returned.
//
// NOTE [ Caching allocator pools ]
// - Sizes round up to 512 bytes. Requests up to 1 MiB come from the small pool, whose
//   segments are 2 MiB; larger ones from the large pool, whose segments are 20 MiB for
//   requests under 10 MiB and the request rounded up to 2 MiB otherwise. Keeping small
//   blocks apart stops short-lived small tensors from pinning big segments.
// - Each (stream, pool) has its own free set ordered by (size, address); a request takes
//   the smallest block that fits (best fit). Memory freed on a stream is reused only by
//   that stream, which keeps reuse ordered after the stream's earlier work without any
//   synchronisation.
// - A block is split when the rest is worth keeping: >= 512 B in the small pool, > 1 MiB in
//   the large pool. A freed block merges with free neighbours in its segment.
// - max_split_size (off by default): large blocks at least this big are never split, a
//   request below it never takes such a block, and a request at or above it takes a cached
//   block at most 20 MiB larger. Big segments then serve big requests only instead of
//   fragmenting into pieces nobody can use.
// - Expandable segments (ANVIL_CUDA_ALLOC_CONF=expandable_segments:true): each
//   (stream, pool) reserves one address range the size of the device and maps pages at its
//   end when no free block fits, so freed memory is one contiguous range that later, larger
//   requests can reuse. max_split_size does not apply: blocks always split (>= 512 B left).
// - A block used on another stream (record_stream) is, once freed, held back until an
//   event recorded on each such stream at free time completes; allocate() polls those
//   events, empty_cache() waits for them.
// - When the device runs out, the allocator empties its cache and retries once; failing
//   again it throws OutOfMemoryError with what was asked for and what is in use.
//
// Ownership: borrows the provider, which must outlive the allocator. Owns every segment it
// got from the provider and returns them all on destruction, in use or not.
// Thread-safety: every public method is thread-safe (one mutex, held across provider calls).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/backend/cuda/device_memory.h"
#include "core/util/mutex.h"

namespace anvil::cuda {

// Outside the class so that `Options options = {}` works as a default argument.
struct CachingAllocatorOptions {
  bool expandable_segments = false;
  size_t max_split_size = SIZE_MAX;  // bytes; SIZE_MAX = no limit
};

class CachingAllocator {
 public:
  using Options = CachingAllocatorOptions;

  struct Stats {
    int64_t allocated_bytes = 0;  // in blocks handed out (rounded sizes, unsplit rests)
    int64_t reserved_bytes = 0;   // held from the device: segments plus mapped pages
    int64_t active_blocks = 0;    // handed out, or freed but waiting on another stream
    int64_t largest_free_block = 0;
    // 1 - largest_free_block / (reserved - allocated); 0 when no block is free. High means
    // the cache holds memory that no single request can use.
    double fragmentation = 0;
    int64_t num_device_mallocs = 0;  // successful provider malloc() and map() calls
    int64_t num_device_frees = 0;    // provider free() and unmap() calls
    int64_t num_ooms = 0;            // OutOfMemoryError thrown
    int64_t num_alloc_retries = 0;   // cache emptied to retry a failed device allocation
    int64_t peak_allocated_bytes = 0;
  };

  // Parses "key:value,key:value" (ANVIL_CUDA_ALLOC_CONF). Keys: expandable_segments
  // (true|false), max_split_size_mb (an integer > 20). Throws std::invalid_argument naming
  // the key and what it accepts.
  static Options parse_options(std::string_view conf);
  // The block size for a request of `nbytes`: a multiple of 512, at least 512.
  static size_t round_size(size_t nbytes);
  // The segment size taken from the device for a (rounded) request of `size`.
  static size_t allocation_size(size_t size);

  // `provider` is borrowed. `device_index` only names the device in messages.
  explicit CachingAllocator(DeviceMemoryProvider* provider, Options options = {}, int device_index = 0);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // At least `nbytes` for use on `stream`; nullptr for 0 bytes. Blocks start at multiples
  // of 512 bytes from the provider's segment bases.
  // Throws OutOfMemoryError when the device cannot supply it even after empty_cache().
  void* allocate(size_t nbytes, StreamId stream);
  // Returns memory from allocate(); reusable by its stream at once, by nothing while a
  // stream recorded with record_stream() may still use it. nullptr is ignored. A pointer that
  // is not live (a double free) is a bug in the caller: an internal assert (anvil::Error).
  void deallocate(void* ptr);
  // Marks the allocated block at `ptr` as used by work on `stream` as well as its own.
  void record_stream(void* ptr, StreamId stream);
  // Waits for pending stream events, then returns every fully free segment, and the free
  // pages at the end of each expandable segment, to the provider.
  void empty_cache();

  Stats stats() const;
  // Restarts peak_allocated_bytes from the current allocated_bytes.
  void reset_peak();

 private:
  struct Block;
  struct Segment;
  // Orders free blocks by (size, address): lower_bound(size) is the best fit.
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  struct Pool {
    StreamId stream = 0;
    bool small = false;
    std::set<Block*, BlockLess> free_blocks;  // reusable now
    Segment* expandable = nullptr;            // this pool's growable segment, if any
  };

  // The pools, segments and blocks (reached through pools_ and segments_) are mu_'s: every
  // helper below runs with it held.
  Pool& GetPool(StreamId stream, bool small) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* FindOrGetBlock(Pool& pool, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* FindFreeBlock(Pool& pool, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* NewSegment(Pool& pool, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Block* GrowExpandable(Pool& pool, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool ShouldSplit(const Block& block, size_t size) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  uintptr_t Claim(Block* block, size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeBlock(Block* block) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Absorb(Block* lo, Block* hi) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProcessEvents(bool wait) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseCachedBlocks() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ShrinkExpandable(Segment& segment) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  size_t LargestFreeBlock() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  [[noreturn]] void ThrowOutOfMemory(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DeviceMemoryProvider* const provider_ ABSL_PT_GUARDED_BY(mu_);  // borrowed; called with mu_ held
  const Options options_;
  const int device_index_;

  mutable Mutex mu_;
  std::map<std::pair<StreamId, bool>, Pool> pools_ ABSL_GUARDED_BY(mu_);         // key: (stream, small)
  std::map<uintptr_t, std::unique_ptr<Segment>> segments_ ABSL_GUARDED_BY(mu_);  // by base address
  std::unordered_map<uintptr_t, Block*> allocated_ ABSL_GUARDED_BY(mu_);         // handed out, by address
  std::vector<std::pair<EventId, Block*>> pending_ ABSL_GUARDED_BY(mu_);         // events holding freed blocks
  // The counters; largest_free_block and fragmentation are computed.
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace anvil::cuda
