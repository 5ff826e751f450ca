// The pinned host block cache: see host_block_cache.h, NOTE [ Pinned staging ].
#include "core/backend/cuda/host_block_cache.h"

#include <bit>

#include "core/util/error.h"

namespace anvil::cuda {

HostBlockCache::HostBlockCache(HostMemoryProvider* provider) : provider_(provider) {}

HostBlockCache::~HostBlockCache() {
  for (auto& [addr, b] : blocks_) {
    for (EventId e : b.uses) provider_->destroy_event(e);
    provider_->free(reinterpret_cast<void*>(addr));
  }
}

size_t HostBlockCache::round_size(size_t bytes) { return std::bit_ceil(std::max<size_t>(bytes, 4096)); }

bool HostBlockCache::Idle(Block& b) {
  std::erase_if(b.uses, [&](EventId e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {  // called here, under mu_
    if (!provider_->query_event(e)) return false;
    provider_->destroy_event(e);
    return true;
  });
  return b.uses.empty();
}

void* HostBlockCache::allocate(size_t bytes) {
  const size_t size = round_size(bytes);
  MutexLock lock(&mu_);
  for (auto [it, end] = free_.equal_range(size); it != end; ++it) {
    Block& b = blocks_.at(it->second);
    if (!Idle(b)) continue;  // the GPU may still read it
    const uintptr_t addr = it->second;
    free_.erase(it);
    b.allocated = true;
    stats_.allocated_bytes += static_cast<int64_t>(size);
    stats_.cached_bytes -= static_cast<int64_t>(size);
    ++stats_.num_reuses;
    return reinterpret_cast<void*>(addr);
  }
  void* p = provider_->allocate(size);
  if (p == nullptr) {
    ReleaseIdle();  // idle cached blocks of other sizes may be what the system is short of
    p = provider_->allocate(size);
  }
  if (p == nullptr) {
    throw OutOfMemoryError(detail::StrCat("out of page-locked host memory: tried to allocate ", size, " bytes with ",
                                          stats_.allocated_bytes, " bytes in use and ", stats_.cached_bytes,
                                          " bytes cached (raise the locked-memory limit, ulimit -l, or use "
                                          "pin_memory=false)"));
  }
  blocks_[reinterpret_cast<uintptr_t>(p)] = Block{size, true, {}};
  stats_.allocated_bytes += static_cast<int64_t>(size);
  ++stats_.num_host_allocs;
  return p;
}

void HostBlockCache::deallocate(void* ptr) {
  MutexLock lock(&mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(ptr));
  ANVIL_INTERNAL_ASSERT(it != blocks_.end() && it->second.allocated, "pinned host free of ", ptr,
                        ", which is not a block in use");
  it->second.allocated = false;
  free_.emplace(it->second.size, it->first);
  stats_.allocated_bytes -= static_cast<int64_t>(it->second.size);
  stats_.cached_bytes += static_cast<int64_t>(it->second.size);
}

HostBlockCache::Blocks::const_iterator HostBlockCache::Find(const void* ptr) const {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(ptr);
  auto it = blocks_.upper_bound(addr);
  if (it == blocks_.begin()) return blocks_.end();
  --it;
  return addr < it->first + it->second.size ? it : blocks_.end();
}

bool HostBlockCache::record_use(const void* ptr, StreamId stream) {
  MutexLock lock(&mu_);
  auto it = Find(ptr);
  if (it == blocks_.end()) return false;
  Block& b = blocks_.at(it->first);
  Idle(b);  // a long-lived pinned tensor copied every step keeps only its pending events
  b.uses.push_back(provider_->record_event(stream));
  return true;
}

bool HostBlockCache::contains(const void* ptr, size_t bytes) const {
  MutexLock lock(&mu_);
  auto it = Find(ptr);
  if (it == blocks_.end() || !it->second.allocated) return false;
  return reinterpret_cast<uintptr_t>(ptr) + bytes <= it->first + it->second.size;
}

void HostBlockCache::ReleaseIdle() {
  for (auto it = free_.begin(); it != free_.end();) {
    Block& b = blocks_.at(it->second);
    if (!Idle(b)) {
      ++it;
      continue;
    }
    provider_->free(reinterpret_cast<void*>(it->second));
    stats_.cached_bytes -= static_cast<int64_t>(b.size);
    blocks_.erase(it->second);
    it = free_.erase(it);
  }
}

void HostBlockCache::empty_cache() {
  MutexLock lock(&mu_);
  ReleaseIdle();
}

HostBlockCache::Stats HostBlockCache::stats() const {
  MutexLock lock(&mu_);
  Stats s = stats_;
  s.pending_blocks = 0;
  for (const auto& [size, addr] : free_) s.pending_blocks += blocks_.at(addr).uses.empty() ? 0 : 1;
  return s;
}

}  // namespace anvil::cuda
