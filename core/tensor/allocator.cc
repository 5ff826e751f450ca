#include "core/tensor/allocator.h"

#include <absl/container/flat_hash_map.h>
#include <sys/mman.h>

#include <cstdlib>
#include <vector>

#include "core/util/error.h"
#include "core/util/mutex.h"

namespace anvil {
namespace {

constexpr size_t kAlignment = 64;
constexpr size_t kHugePage = size_t{2} << 20;

// Four classes per power of two above 512 bytes (waste under 25%); 64-byte steps below.
size_t RoundSize(size_t n) {
  if (n == 0) n = 1;
  if (n <= 512) return (n + 63) & ~size_t{63};
  size_t p = size_t{1} << (63 - __builtin_clzll(n - 1));  // largest power of two < n
  size_t step = p / 4;
  return (n + step - 1) / step * step;
}

class CachingCpuAllocator final : public Allocator {
 public:
  CachingCpuAllocator() {
    int64_t mb = 2048;
    if (const char* env = std::getenv("ANVIL_CPU_CACHE_MB")) mb = std::atoll(env);
    cache_limit_ = mb << 20;
  }
  ~CachingCpuAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    const size_t size = RoundSize(nbytes);
    {
      MutexLock lock(&mu_);
      ++stats_.num_allocs;
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.cached_bytes -= size;
        ++stats_.num_cache_hits;
        Account(size);
        return p;
      }
    }
    void* p = SystemAlloc(size);
    if (p == nullptr) {
      empty_cache();  // give the cache back and try once more
      p = SystemAlloc(size);
    }
    if (p == nullptr) {
      AllocatorStats s = stats();
      throw OutOfMemoryError(detail::StrCat("CPU out of memory: tried to allocate ", size, " bytes; ",
                                            s.allocated_bytes, " bytes allocated by tensors"));
    }
    MutexLock lock(&mu_);
    ++stats_.num_system_allocs;
    Account(size);
    return p;
  }

  void deallocate(void* ptr, size_t nbytes) override {
    if (ptr == nullptr) return;
    const size_t size = RoundSize(nbytes);
    {
      MutexLock lock(&mu_);
      stats_.allocated_bytes -= size;
      if (stats_.cached_bytes + static_cast<int64_t>(size) <= cache_limit_) {
        free_[size].push_back(ptr);
        stats_.cached_bytes += size;
        return;
      }
    }
    std::free(ptr);
  }

  Device device() const override { return kCPU; }

  AllocatorStats stats() const override {
    MutexLock lock(&mu_);
    return stats_;
  }

  void empty_cache() override {
    MutexLock lock(&mu_);
    for (auto& [size, blocks] : free_) {
      for (void* p : blocks) std::free(p);
      blocks.clear();
    }
    stats_.cached_bytes = 0;
  }

 private:
  static void* SystemAlloc(size_t size) {
    const bool huge = size >= kHugePage;
    const size_t align = huge ? kHugePage : kAlignment;
    const size_t padded = (size + align - 1) / align * align;
    void* p = std::aligned_alloc(align, padded);
    if (p != nullptr && huge) madvise(p, padded, MADV_HUGEPAGE);
    return p;
  }
  void Account(size_t size) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    stats_.allocated_bytes += size;
    if (stats_.allocated_bytes > stats_.peak_allocated_bytes) {
      stats_.peak_allocated_bytes = stats_.allocated_bytes;
    }
  }

  mutable Mutex mu_;
  absl::flat_hash_map<size_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);  // probed by every allocation
  AllocatorStats stats_ ABSL_GUARDED_BY(mu_);
  int64_t cache_limit_ = 0;  // set by the constructor
};

}  // namespace

Allocator* cpu_allocator() {
  // Leaked on purpose: tensors in static storage may be freed after main returns.
  static auto* alloc = new CachingCpuAllocator();
  return alloc;
}

size_t cpu_size_class(size_t nbytes) { return RoundSize(nbytes); }

}  // namespace anvil
