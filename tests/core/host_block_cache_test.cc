// The pinned host block cache behind Tensor::pin_memory and staged host-to-device copies
// (NOTE [ Pinned staging ]), on a fake provider: real host memory under a byte cap, and events
// that complete when the test says the GPU has got there. A block the GPU may still read is
// never handed out again; idle blocks are reused instead of page-locking new memory.
#include "core/backend/cuda/host_block_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "core/util/error.h"

namespace anvil::cuda {
namespace {

using ::testing::HasSubstr;

class FakeHostMemory : public HostMemoryProvider {
 public:
  explicit FakeHostMemory(size_t capacity) : capacity_(capacity) {}
  ~FakeHostMemory() override {
    EXPECT_TRUE(live_.empty()) << "blocks never freed";
    EXPECT_TRUE(events_.empty()) << "events never destroyed";
  }
  void* allocate(size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(4096, bytes);
    live_[p] = bytes;
    used_ += bytes;
    ++allocations;
    return p;
  }
  void free(void* ptr) override {
    auto it = live_.find(ptr);
    ASSERT_NE(it, live_.end()) << "freeing memory that was not allocated";
    used_ -= it->second;
    live_.erase(it);
    std::free(ptr);
  }
  EventId record_event(StreamId stream) override {
    const EventId e = next_event_++;
    events_[e] = stream;
    return e;
  }
  bool query_event(EventId event) override {
    EXPECT_TRUE(events_.count(event)) << "querying a destroyed event";
    return done_.count(event) > 0;
  }
  void destroy_event(EventId event) override {
    EXPECT_EQ(events_.erase(event), 1u) << "event destroyed twice";
    done_.erase(event);
  }
  // The GPU has run everything queued on `stream` so far.
  void finish_stream(StreamId stream) {
    for (const auto& [e, s] : events_) {
      if (s == stream) done_.insert(e);
    }
  }
  size_t live_events() const { return events_.size(); }
  size_t used() const { return used_; }
  int allocations = 0;

 private:
  size_t capacity_, used_ = 0;
  std::map<void*, size_t> live_;
  std::map<EventId, StreamId> events_;
  std::set<EventId> done_;
  EventId next_event_ = 1;
};

constexpr StreamId kStream = 7;

TEST(HostBlockCache, SizesArePowersOfTwoFrom4KiB) {
  EXPECT_EQ(HostBlockCache::round_size(1), 4096u);
  EXPECT_EQ(HostBlockCache::round_size(4096), 4096u);
  EXPECT_EQ(HostBlockCache::round_size(4097), 8192u);
  EXPECT_EQ(HostBlockCache::round_size(size_t{3} << 20), size_t{4} << 20);
}

TEST(HostBlockCache, ABlockTheGpuMayStillReadIsNotReusedUntilItsCopyHasRun) {
  FakeHostMemory mem(size_t{64} << 20);
  HostBlockCache cache(&mem);
  void* a = cache.allocate(10000);
  std::memset(a, 1, 10000);                   // real, writable host memory
  ASSERT_TRUE(cache.record_use(a, kStream));  // a copy from it is queued
  cache.deallocate(a);
  EXPECT_EQ(cache.stats().pending_blocks, 1);
  void* b = cache.allocate(10000);  // same size class, but `a` may still be read
  EXPECT_NE(b, a);
  EXPECT_EQ(mem.allocations, 2);
  cache.deallocate(b);
  mem.finish_stream(kStream);
  void* c = cache.allocate(9000);  // 16 KiB class again: either idle block, no new page-locking
  EXPECT_TRUE(c == a || c == b);
  EXPECT_EQ(mem.allocations, 2);
  EXPECT_EQ(cache.stats().num_reuses, 1);
  EXPECT_EQ(cache.stats().pending_blocks, 0);
  EXPECT_EQ(mem.live_events(), 0u) << "completed events are destroyed when seen";
  cache.deallocate(c);
}

TEST(HostBlockCache, RecordsUsesOnlyForItsOwnBlocksAndKnowsWhatItHolds) {
  FakeHostMemory mem(size_t{64} << 20);
  HostBlockCache cache(&mem);
  char* a = static_cast<char*>(cache.allocate(5000));  // an 8 KiB block
  EXPECT_TRUE(cache.contains(a, 5000));
  EXPECT_TRUE(cache.contains(a + 100, 8092));   // a view inside the block
  EXPECT_FALSE(cache.contains(a + 100, 8093));  // runs past its end
  int on_the_stack = 0;
  EXPECT_FALSE(cache.contains(&on_the_stack, sizeof(on_the_stack)));
  EXPECT_FALSE(cache.record_use(&on_the_stack, kStream));
  EXPECT_EQ(mem.live_events(), 0u);
  EXPECT_TRUE(cache.record_use(a + 4000, kStream));  // an interior pointer marks its block
  cache.deallocate(a);
  EXPECT_FALSE(cache.contains(a, 1)) << "a freed block holds no tensor";
  mem.finish_stream(kStream);
}

TEST(HostBlockCache, ALongLivedBlockCopiedEveryStepKeepsOnlyItsPendingEvents) {
  FakeHostMemory mem(size_t{64} << 20);
  HostBlockCache cache(&mem);
  void* a = cache.allocate(4096);  // a pinned tensor that lives for the whole run
  for (int step = 0; step < 100; ++step) {
    ASSERT_TRUE(cache.record_use(a, kStream));
    mem.finish_stream(kStream);  // the GPU gets through the step's copy
  }
  EXPECT_EQ(mem.live_events(), 1u) << "completed events are released as new ones are recorded";
  cache.deallocate(a);
}

TEST(HostBlockCache, EmptyCacheFreesIdleBlocksOnly) {
  FakeHostMemory mem(size_t{64} << 20);
  HostBlockCache cache(&mem);
  void* in_use = cache.allocate(4096);
  void* pending = cache.allocate(8192);
  void* idle = cache.allocate(16384);
  cache.record_use(pending, kStream);
  cache.deallocate(pending);
  cache.deallocate(idle);
  cache.empty_cache();
  EXPECT_EQ(mem.used(), 4096u + 8192u) << "the idle block is gone; the pending one waits for the GPU";
  EXPECT_EQ(cache.stats().cached_bytes, 8192);
  EXPECT_EQ(cache.stats().allocated_bytes, 4096);
  mem.finish_stream(kStream);
  cache.empty_cache();
  EXPECT_EQ(mem.used(), 4096u);
  cache.deallocate(in_use);
}

TEST(HostBlockCache, RunningOutFreesIdleBlocksOfOtherSizesThenFailsClearly) {
  FakeHostMemory mem(size_t{1} << 20);  // 1 MiB of lockable memory
  HostBlockCache cache(&mem);
  void* small = cache.allocate(256 << 10);
  cache.deallocate(small);
  void* half = cache.allocate(512 << 10);  // fits next to the cached 256 KiB block
  cache.deallocate(half);
  void* big = cache.allocate(1 << 20);  // only after both idle blocks are freed
  EXPECT_EQ(cache.stats().cached_bytes, 0);
  try {
    cache.allocate(4096);
    FAIL() << "expected an out-of-memory error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("out of page-locked host memory: tried to allocate 4096 bytes with 1048576 bytes in use"));
    EXPECT_THAT(e.what(), HasSubstr("pin_memory=false"));
  }
  cache.deallocate(big);
}

TEST(HostBlockCache, ConcurrentCopiesNeverShareABlock) {
  FakeHostMemory mem(size_t{256} << 20);
  HostBlockCache cache(&mem);
  std::vector<std::thread> threads;
  std::atomic<int> overlaps{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto* p = static_cast<unsigned char*>(cache.allocate(4096 * (1 + i % 3)));
        std::memset(p, t, 4096);
        for (int j = 0; j < 4096; j += 512) overlaps += p[j] != t;
        cache.deallocate(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(cache.stats().allocated_bytes, 0);
  EXPECT_LE(mem.allocations, 12) << "blocks are reused, not page-locked per request";
}

}  // namespace
}  // namespace anvil::cuda
