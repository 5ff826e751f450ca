#include "core/backend/cuda/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/util/error.h"

namespace anvil::cuda {
namespace {

// PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp); see NOTE [ Caching allocator pools ].
constexpr size_t kMinBlockSize = 512;
constexpr size_t kSmallSize = size_t{1} << 20;
constexpr size_t kSmallBuffer = size_t{2} << 20;
constexpr size_t kLargeBuffer = size_t{20} << 20;
constexpr size_t kMinLargeAlloc = size_t{10} << 20;
constexpr size_t kRoundLarge = size_t{2} << 20;
// Larger requests cannot be rounded without overflow and no device has this much.
constexpr size_t kMaxRequest = SIZE_MAX / 4;

size_t RoundUp(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

void* AsPtr(uintptr_t addr) { return reinterpret_cast<void*>(addr); }
uintptr_t AsAddr(void* ptr) { return reinterpret_cast<uintptr_t>(ptr); }

// "512 bytes", "1.50 KiB", "200.00 MiB", "8.00 GiB", as PyTorch prints sizes.
std::string FormatBytes(size_t n) {
  if (n < 1024) return std::to_string(n) + " bytes";
  const char* unit = "KiB";
  double v = n / 1024.0;
  if (n >= (size_t{1} << 30)) {
    unit = "GiB";
    v = n / double(size_t{1} << 30);
  } else if (n >= (size_t{1} << 20)) {
    unit = "MiB";
    v = n / double(size_t{1} << 20);
  }
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.2f %s", v, unit);
  return buf;
}

}  // namespace

// A run of bytes inside one segment: handed out, free, or freed but waiting on events.
struct CachingAllocator::Block {
  uintptr_t addr = 0;
  size_t size = 0;
  Pool* pool = nullptr;
  Segment* segment = nullptr;
  Block* prev = nullptr;  // address-order neighbours in the same segment
  Block* next = nullptr;
  bool allocated = false;
  int pending_events = 0;             // > 0: freed, another stream may still use it
  std::vector<StreamId> stream_uses;  // other streams it was used on (record_stream)

  bool is_free() const { return !allocated && pending_events == 0; }
};

// Memory from one provider malloc(), or one expandable reservation. Its blocks tile
// [base, base + mapped) in address order. Merges keep the lower block, so `head` lives as
// long as the segment keeps any memory.
struct CachingAllocator::Segment {
  uintptr_t base = 0;
  size_t mapped = 0;    // bytes backed by memory
  size_t reserved = 0;  // bytes of address range; == mapped unless expandable
  bool expandable = false;
  Pool* pool = nullptr;
  Block* head = nullptr;
  Block* tail = nullptr;
};

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  return a->size != b->size ? a->size < b->size : a->addr < b->addr;
}

size_t CachingAllocator::round_size(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize : RoundUp(nbytes, kMinBlockSize);
}

size_t CachingAllocator::allocation_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return RoundUp(size, kRoundLarge);
}

CachingAllocator::CachingAllocator(DeviceMemoryProvider* provider, Options options, int device_index)
    : provider_(provider), options_(options), device_index_(device_index) {
  ANVIL_INTERNAL_ASSERT(provider_ != nullptr);
}

CachingAllocator::~CachingAllocator() {
  // Wait for the streams first: freeing memory they still read would corrupt their work.
  for (auto& [event, block] : pending_) {
    provider_->synchronize_event(event);
    provider_->destroy_event(event);
  }
  for (auto& [base, segment] : segments_) {
    for (Block* b = segment->head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
    if (!segment->expandable) {
      provider_->free(AsPtr(base));
      continue;
    }
    if (segment->mapped > 0) provider_->unmap(AsPtr(base), segment->mapped);
    provider_->release_address(AsPtr(base), segment->reserved);
  }
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  MutexLock lock(&mu_);
  if (nbytes > kMaxRequest) ThrowOutOfMemory(nbytes);
  ProcessEvents(/*wait=*/false);
  const size_t size = round_size(nbytes);
  Pool& pool = GetPool(stream, size <= kSmallSize);
  Block* block = FindOrGetBlock(pool, size);
  if (block == nullptr) {
    // Cached blocks of other sizes and streams may be what fills the device. Emptying the
    // cache also waits for pending events, which may free a block in this very pool.
    ++stats_.num_alloc_retries;
    ReleaseCachedBlocks();
    block = FindOrGetBlock(pool, size);
  }
  if (block == nullptr) ThrowOutOfMemory(size);
  return AsPtr(Claim(block, size));
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  MutexLock lock(&mu_);
  auto it = allocated_.find(AsAddr(ptr));
  ANVIL_INTERNAL_ASSERT(it != allocated_.end(), "deallocate(", ptr,
                        "): not a live allocation of this allocator (a double free?)");
  Block* block = it->second;
  allocated_.erase(it);
  block->allocated = false;
  stats_.allocated_bytes -= block->size;
  if (!block->stream_uses.empty()) {
    for (StreamId s : block->stream_uses) {
      pending_.emplace_back(provider_->record_event(s), block);
      ++block->pending_events;
    }
    block->stream_uses.clear();
    return;  // stays active until ProcessEvents sees the events complete
  }
  --stats_.active_blocks;
  FreeBlock(block);
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  MutexLock lock(&mu_);
  auto it = allocated_.find(AsAddr(ptr));
  ANVIL_INTERNAL_ASSERT(it != allocated_.end(), "record_stream(", ptr, "): not a live allocation of this allocator");
  Block* block = it->second;
  if (stream == block->pool->stream) return;  // its own stream orders reuse already
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void CachingAllocator::empty_cache() {
  MutexLock lock(&mu_);
  ReleaseCachedBlocks();
}

CachingAllocator::Stats CachingAllocator::stats() const {
  MutexLock lock(&mu_);
  Stats s = stats_;
  s.largest_free_block = static_cast<int64_t>(LargestFreeBlock());
  const int64_t unused = s.reserved_bytes - s.allocated_bytes;
  s.fragmentation = s.largest_free_block == 0 ? 0.0 : 1.0 - double(s.largest_free_block) / double(unused);
  return s;
}

void CachingAllocator::reset_peak() {
  MutexLock lock(&mu_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

CachingAllocator::Pool& CachingAllocator::GetPool(StreamId stream, bool small) {
  Pool& pool = pools_[{stream, small}];
  pool.stream = stream;
  pool.small = small;
  return pool;
}

CachingAllocator::Block* CachingAllocator::FindFreeBlock(Pool& pool, size_t size) {
  Block key;
  key.size = size;
  auto it = pool.free_blocks.lower_bound(&key);
  if (it == pool.free_blocks.end()) return nullptr;
  Block* block = *it;
  if (!options_.expandable_segments) {
    const size_t max_split = options_.max_split_size;
    // A big block would be split for a normal request, or wasted on an oversize one.
    if (size < max_split && block->size >= max_split) return nullptr;
    if (size >= max_split && block->size >= size + kLargeBuffer) return nullptr;
  }
  pool.free_blocks.erase(it);
  return block;
}

// A cached block for `size`, else new device memory; nullptr when the device is out.
CachingAllocator::Block* CachingAllocator::FindOrGetBlock(Pool& pool, size_t size) {
  if (Block* block = FindFreeBlock(pool, size)) return block;
  return options_.expandable_segments ? GrowExpandable(pool, size) : NewSegment(pool, size);
}

CachingAllocator::Block* CachingAllocator::NewSegment(Pool& pool, size_t size) {
  const size_t segment_size = allocation_size(size);
  void* ptr = provider_->malloc(segment_size);
  if (ptr == nullptr) return nullptr;
  ++stats_.num_device_mallocs;
  stats_.reserved_bytes += segment_size;
  auto segment = std::make_unique<Segment>();
  segment->base = AsAddr(ptr);
  segment->mapped = segment->reserved = segment_size;
  segment->pool = &pool;
  auto* block = new Block;
  block->addr = segment->base;
  block->size = segment_size;
  block->pool = &pool;
  block->segment = segment.get();
  segment->head = segment->tail = block;
  segments_.emplace(segment->base, std::move(segment));
  return block;
}

// Maps just enough pages at the end of the pool's range that its last block, extended if
// free, holds `size`. Returns that block, out of the free set; nullptr when out of memory.
CachingAllocator::Block* CachingAllocator::GrowExpandable(Pool& pool, size_t size) {
  const size_t page = provider_->granularity();
  Segment* segment = pool.expandable;
  if (segment == nullptr) {
    // Address space is free to reserve: one device's worth means the range never fills
    // before the memory does.
    const size_t bytes = RoundUp(std::max(provider_->total_bytes(), size), page);
    void* base = provider_->reserve_address(bytes);
    if (base == nullptr) return nullptr;
    auto owned = std::make_unique<Segment>();
    owned->base = AsAddr(base);
    owned->reserved = bytes;
    owned->expandable = true;
    owned->pool = &pool;
    segment = pool.expandable = owned.get();
    segments_.emplace(owned->base, std::move(owned));
  }
  Block* tail = segment->tail;
  const bool extend = tail != nullptr && tail->is_free();
  // Best fit failed, so a free tail is in the free set and smaller than `size`.
  ANVIL_INTERNAL_ASSERT(!extend || tail->size < size);
  const size_t grow = RoundUp(size - (extend ? tail->size : 0), page);
  if (segment->reserved - segment->mapped < grow) return nullptr;
  const uintptr_t end = segment->base + segment->mapped;
  if (!provider_->map(AsPtr(end), grow)) return nullptr;
  ++stats_.num_device_mallocs;
  stats_.reserved_bytes += grow;
  segment->mapped += grow;
  if (extend) {
    pool.free_blocks.erase(tail);
    tail->size += grow;
    return tail;
  }
  auto* block = new Block;
  block->addr = end;
  block->size = grow;
  block->pool = &pool;
  block->segment = segment;
  block->prev = tail;
  (tail != nullptr ? tail->next : segment->head) = block;
  segment->tail = block;
  return block;
}

bool CachingAllocator::ShouldSplit(const Block& block, size_t size) const {
  const size_t remaining = block.size - size;
  if (block.pool->small || options_.expandable_segments) return remaining >= kMinBlockSize;
  return size < options_.max_split_size && remaining > kSmallSize;
}

// Hands out `block` (out of any free set) for a request of `size`, splitting off the rest.
uintptr_t CachingAllocator::Claim(Block* block, size_t size) {
  if (ShouldSplit(*block, size)) {
    auto* rest = new Block;
    rest->addr = block->addr + size;
    rest->size = block->size - size;
    rest->pool = block->pool;
    rest->segment = block->segment;
    rest->prev = block;
    rest->next = block->next;
    (block->next != nullptr ? block->next->prev : block->segment->tail) = rest;
    block->next = rest;
    block->size = size;
    block->pool->free_blocks.insert(rest);
  }
  block->allocated = true;
  allocated_.emplace(block->addr, block);
  stats_.allocated_bytes += block->size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.active_blocks;
  return block->addr;
}

// Makes a block that nothing uses any more reusable, merged with its free neighbours.
void CachingAllocator::FreeBlock(Block* block) {
  if (block->next != nullptr && block->next->is_free()) Absorb(block, block->next);
  if (block->prev != nullptr && block->prev->is_free()) {
    Block* prev = block->prev;
    Absorb(prev, block);
    block = prev;
  }
  block->pool->free_blocks.insert(block);
}

// Merges `hi` into its lower neighbour `lo` and deletes it; both leave the free set.
void CachingAllocator::Absorb(Block* lo, Block* hi) {
  auto& free_blocks = lo->pool->free_blocks;
  free_blocks.erase(lo);  // erase before the size, which orders the set, changes
  free_blocks.erase(hi);
  lo->size += hi->size;
  lo->next = hi->next;
  (hi->next != nullptr ? hi->next->prev : lo->segment->tail) = lo;
  delete hi;
}

// Frees the blocks whose stream events have completed (all of them, waiting, if `wait`).
void CachingAllocator::ProcessEvents(bool wait) {
  size_t kept = 0;
  for (size_t i = 0; i < pending_.size(); ++i) {
    auto [event, block] = pending_[i];
    if (wait) {
      provider_->synchronize_event(event);
    } else if (!provider_->query_event(event)) {
      pending_[kept++] = pending_[i];
      continue;
    }
    provider_->destroy_event(event);
    if (--block->pending_events == 0) {
      --stats_.active_blocks;
      FreeBlock(block);
    }
  }
  pending_.resize(kept);
}

void CachingAllocator::ReleaseCachedBlocks() {
  ProcessEvents(/*wait=*/true);
  for (auto it = segments_.begin(); it != segments_.end();) {
    Segment& segment = *it->second;
    if (segment.expandable) {
      ShrinkExpandable(segment);
      if (segment.mapped > 0) {
        ++it;
        continue;
      }
      provider_->release_address(AsPtr(segment.base), segment.reserved);
      segment.pool->expandable = nullptr;
      it = segments_.erase(it);
      continue;
    }
    Block* head = segment.head;
    if (!head->is_free() || head->next != nullptr) {
      ++it;
      continue;
    }
    provider_->free(AsPtr(segment.base));
    ++stats_.num_device_frees;
    stats_.reserved_bytes -= segment.mapped;
    head->pool->free_blocks.erase(head);
    delete head;
    it = segments_.erase(it);
  }
}

// Unmaps the whole pages at the end of an expandable segment that its free tail covers.
void CachingAllocator::ShrinkExpandable(Segment& segment) {
  Block* tail = segment.tail;
  if (tail == nullptr || !tail->is_free()) return;
  const size_t keep = RoundUp(tail->addr - segment.base, provider_->granularity());
  if (keep >= segment.mapped) return;
  const size_t cut = segment.mapped - keep;
  provider_->unmap(AsPtr(segment.base + keep), cut);
  ++stats_.num_device_frees;
  stats_.reserved_bytes -= cut;
  segment.mapped = keep;
  segment.pool->free_blocks.erase(tail);
  if (tail->size > cut) {
    tail->size -= cut;
    segment.pool->free_blocks.insert(tail);
    return;
  }
  segment.tail = tail->prev;
  (tail->prev != nullptr ? tail->prev->next : segment.head) = nullptr;
  delete tail;
}

size_t CachingAllocator::LargestFreeBlock() const {
  size_t largest = 0;
  for (const auto& [key, pool] : pools_) {
    if (!pool.free_blocks.empty()) largest = std::max(largest, (*pool.free_blocks.rbegin())->size);
  }
  return largest;
}

void CachingAllocator::ThrowOutOfMemory(size_t size) {
  ++stats_.num_ooms;
  const size_t allocated = stats_.allocated_bytes;
  const size_t reserved = stats_.reserved_bytes;
  const size_t largest = LargestFreeBlock();
  std::string message =
      detail::StrCat("CUDA out of memory on cuda:", device_index_, ": tried to allocate ", FormatBytes(size), "; ",
                     FormatBytes(allocated), " allocated, ", FormatBytes(reserved), " reserved, largest free block ",
                     FormatBytes(largest), ", device total ", FormatBytes(provider_->total_bytes()));
  // Enough memory is cached, just not in one piece: the case expandable segments solve.
  if (!options_.expandable_segments && reserved - allocated >= size) {
    message +=
        ". Reserved but unallocated memory is fragmented; try "
        "ANVIL_CUDA_ALLOC_CONF=expandable_segments:true";
  }
  throw OutOfMemoryError(message);
}

}  // namespace anvil::cuda
