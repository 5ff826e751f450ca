// The CUDA caching allocator's bookkeeping, on a fake device (tests/core/fake_device_memory.h):
// size classes, best fit, splitting and merging, per-stream reuse, record_stream, the
// out-of-memory path, expandable segments and the statistics. Expected values are worked
// out by hand from PyTorch's rules (NOTE [ Caching allocator pools ]), not read back from
// the allocator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/backend/cuda/caching_allocator.h"
#include "core/util/error.h"
#include "tests/core/fake_device_memory.h"

using anvil::Error;
using anvil::OutOfMemoryError;
using anvil::cuda::CachingAllocator;
using anvil::test::FakeDeviceMemory;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

namespace {

constexpr size_t kKiB = size_t{1} << 10;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;
constexpr anvil::cuda::StreamId kS1 = 1;
constexpr anvil::cuda::StreamId kS2 = 2;

uintptr_t A(void* p) { return reinterpret_cast<uintptr_t>(p); }

CachingAllocator::Options Expandable() {
  CachingAllocator::Options o;
  o.expandable_segments = true;
  return o;
}

// The message of the OutOfMemoryError that allocate() throws (a test failure if none).
std::string OomMessage(CachingAllocator& alloc, size_t bytes, anvil::cuda::StreamId stream) {
  try {
    alloc.allocate(bytes, stream);
  } catch (const OutOfMemoryError& e) {
    return e.what();
  }
  ADD_FAILURE() << "allocate(" << bytes << ") did not throw OutOfMemoryError";
  return "";
}

}  // namespace

TEST(CudaCachingAllocator, RoundsRequestsTo512Bytes) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), kMiB + 512);
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* p = alloc.allocate(1, kS1);
  void* q = alloc.allocate(513, kS1);
  EXPECT_EQ(A(q), A(p) + 512);  // carved right after the 512-byte block
  EXPECT_EQ(alloc.stats().allocated_bytes, 512 + 1024);
}

TEST(CudaCachingAllocator, SegmentSizesFollowPyTorch) {
  EXPECT_EQ(CachingAllocator::allocation_size(512), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::allocation_size(kMiB), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::allocation_size(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::allocation_size(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(CachingAllocator::allocation_size(10 * kMiB), 10 * kMiB);  // PyTorch: size < 10 MiB
  EXPECT_EQ(CachingAllocator::allocation_size(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(CachingAllocator::allocation_size(21 * kMiB), 22 * kMiB);
}

TEST(CudaCachingAllocator, SmallRequestsShareOneSmallSegment) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* p = alloc.allocate(1000, kS1);
  void* q = alloc.allocate(4000, kS1);
  void* r = alloc.allocate(kMiB, kS1);
  EXPECT_THAT(dev.malloc_sizes, ElementsAre(2 * kMiB));
  EXPECT_EQ(A(q), A(p) + 1024);
  EXPECT_EQ(A(r), A(q) + 4096);
  // Leaves exactly 512 bytes of the segment: still worth a block of its own.
  void* t = alloc.allocate(kMiB - 5 * 1024 - 512, kS1);
  EXPECT_EQ(A(alloc.allocate(1, kS1)), A(t) + kMiB - 5 * 1024 - 512);
  // Just over 1 MiB belongs to the large pool, even though the small segment has room.
  alloc.allocate(kMiB + 1, kS1);
  EXPECT_THAT(dev.malloc_sizes, ElementsAre(2 * kMiB, 20 * kMiB));
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
}

TEST(CudaCachingAllocator, LargeRequestsRoundToTwoMiB) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  alloc.allocate(11 * kMiB, kS1);      // 12 MiB segment; the 1 MiB rest is not split off
  alloc.allocate(10 * kMiB + 1, kS1);  // 12 MiB segment; the ~2 MiB rest is split off
  alloc.allocate(21 * kMiB, kS1);      // 22 MiB segment, 1 MiB rest kept
  EXPECT_THAT(dev.malloc_sizes, ElementsAre(12 * kMiB, 12 * kMiB, 22 * kMiB));
  const auto s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, int64_t(12 * kMiB + 10 * kMiB + 512 + 22 * kMiB));
  EXPECT_EQ(s.reserved_bytes, int64_t(46 * kMiB));
  EXPECT_EQ(s.largest_free_block, int64_t(2 * kMiB - 512));
}

TEST(CudaCachingAllocator, FreedBlockIsReusedForTheSameSize) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* p = alloc.allocate(3 * kMiB, kS1);
  alloc.deallocate(p);
  EXPECT_EQ(alloc.allocate(3 * kMiB, kS1), p);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 1);
}

TEST(CudaCachingAllocator, SteadyTrainingLoopMakesNoDeviceCalls) {
  FakeDeviceMemory dev(8 * kGiB);
  CachingAllocator alloc(&dev);
  std::vector<void*> params;
  for (size_t bytes : {4 * kMiB, 4 * kMiB, 700 * kKiB, 33 * kMiB}) {
    params.push_back(alloc.allocate(bytes, kS1));
  }
  const int64_t param_bytes = alloc.stats().allocated_bytes;
  const std::vector<size_t> act_sizes = {64 * kKiB, 700 * kKiB, 3 * kMiB, 12 * kMiB,
                                         33 * kMiB, 5 * kKiB,   8 * kMiB, 1 * kMiB};
  int64_t after_first = -1;
  for (int iter = 0; iter < 101; ++iter) {
    std::vector<void*> acts, grads;
    for (size_t bytes : act_sizes) acts.push_back(alloc.allocate(bytes, kS1));  // forward
    for (size_t i = act_sizes.size(); i-- > 0;) {                               // backward frees as it goes
      grads.push_back(alloc.allocate(act_sizes[i], kS1));
      alloc.deallocate(acts[i]);
      if (i % 3 == 0) {  // some gradients die early, out of order
        alloc.deallocate(grads.front());
        grads.erase(grads.begin());
      }
    }
    void* workspace = alloc.allocate(17 * kMiB, kS1);  // optimizer scratch
    for (void* g : grads) alloc.deallocate(g);
    alloc.deallocate(workspace);
    if (iter == 0) after_first = alloc.stats().num_device_mallocs;
  }
  const auto s = alloc.stats();
  EXPECT_GT(after_first, 0);
  EXPECT_EQ(s.num_device_mallocs, after_first);
  EXPECT_EQ(s.num_device_frees, 0);
  EXPECT_EQ(s.allocated_bytes, param_bytes);
  EXPECT_EQ(s.active_blocks, 4);
}

TEST(CudaCachingAllocator, SplitBlocksMergeBackInAnyFreeOrder) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  // Large pool: 3 + 5 + 4 MiB from one 20 MiB segment, 8 MiB left.
  void* a = alloc.allocate(3 * kMiB, kS1);
  void* b = alloc.allocate(5 * kMiB, kS1);
  void* c = alloc.allocate(4 * kMiB, kS1);
  EXPECT_EQ(A(b), A(a) + 3 * kMiB);
  EXPECT_EQ(A(c), A(b) + 5 * kMiB);
  alloc.deallocate(b);  // alone between two live blocks
  EXPECT_EQ(alloc.stats().largest_free_block, int64_t(8 * kMiB));
  alloc.deallocate(c);  // merges with b below and the 8 MiB rest above
  EXPECT_EQ(alloc.stats().largest_free_block, int64_t(17 * kMiB));
  alloc.deallocate(a);  // merges with everything above
  EXPECT_EQ(alloc.stats().largest_free_block, int64_t(20 * kMiB));
  EXPECT_EQ(alloc.allocate(12 * kMiB, kS1), a);
  // Small pool: three 512-byte blocks freed high, low, middle; 1536 bytes fit at the start
  // only if all three merged.
  void* x = alloc.allocate(512, kS1);
  void* y = alloc.allocate(512, kS1);
  void* z = alloc.allocate(512, kS1);
  alloc.deallocate(z);
  alloc.deallocate(x);
  alloc.deallocate(y);
  EXPECT_EQ(alloc.allocate(1536, kS1), x);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
}

TEST(CudaCachingAllocator, BlocksFreedOnOneStreamAreNotReusedByAnother) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* p = alloc.allocate(3 * kMiB, kS1);
  alloc.deallocate(p);
  void* q = alloc.allocate(3 * kMiB, kS2);
  EXPECT_NE(q, p);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
  EXPECT_EQ(alloc.allocate(3 * kMiB, kS1), p);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
}

TEST(CudaCachingAllocator, RecordStreamDelaysReuseUntilThatStreamFinishes) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  // 20 MiB requests fill their segments exactly, so a block is either p or a new segment.
  void* p = alloc.allocate(20 * kMiB, kS1);
  alloc.record_stream(p, kS2);
  alloc.deallocate(p);
  auto s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 0);
  EXPECT_EQ(s.active_blocks, 1);  // kS2 may still read it
  EXPECT_EQ(s.largest_free_block, 0);
  void* q = alloc.allocate(20 * kMiB, kS1);
  EXPECT_NE(q, p);
  alloc.deallocate(q);  // no other stream: reusable at once
  EXPECT_EQ(alloc.allocate(20 * kMiB, kS1), q);
  alloc.deallocate(q);
  dev.finish_stream(kS2);
  EXPECT_EQ(alloc.allocate(20 * kMiB, kS1), p);  // both free now; best fit takes the lower
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
  EXPECT_EQ(dev.live_events(), 0u);
  // Recording the block's own stream changes nothing.
  alloc.record_stream(p, kS1);
  alloc.deallocate(p);
  EXPECT_EQ(alloc.stats().active_blocks, 0);
  EXPECT_EQ(dev.live_events(), 0u);
}

TEST(CudaCachingAllocator, EmptyCacheWaitsForRecordedStreams) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* p = alloc.allocate(20 * kMiB, kS1);
  alloc.record_stream(p, kS2);
  alloc.record_stream(p, kS2);  // recorded once
  alloc.deallocate(p);
  EXPECT_EQ(dev.live_events(), 1u);
  alloc.empty_cache();
  EXPECT_EQ(dev.synchronizes, 1);
  EXPECT_EQ(dev.frees, 1);
  EXPECT_EQ(dev.used(), 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
  EXPECT_EQ(alloc.stats().active_blocks, 0);
}

TEST(CudaCachingAllocator, EmptyCacheKeepsSegmentsThatAreInUse) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* a = alloc.allocate(3 * kMiB, kS1);
  void* b = alloc.allocate(3 * kMiB, kS1);
  void* c = alloc.allocate(3 * kMiB, kS2);
  alloc.deallocate(a);  // the segment's first block is free, b is not
  alloc.deallocate(c);  // kS2's segment is free as a whole
  alloc.empty_cache();
  EXPECT_EQ(dev.frees, 1);
  EXPECT_EQ(alloc.stats().reserved_bytes, int64_t(20 * kMiB));
  alloc.deallocate(b);
  EXPECT_EQ(alloc.stats().largest_free_block, int64_t(20 * kMiB));
  alloc.empty_cache();
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CudaCachingAllocator, MaxSplitSizeKeepsBigBlocksForBigRequests) {
  FakeDeviceMemory dev(kGiB);
  {  // Without a limit a cached 100 MiB block is split for a 30 MiB request.
    CachingAllocator alloc(&dev);
    void* a = alloc.allocate(100 * kMiB, kS1);
    alloc.deallocate(a);
    EXPECT_EQ(alloc.allocate(30 * kMiB, kS1), a);
    EXPECT_EQ(alloc.stats().largest_free_block, int64_t(70 * kMiB));
    EXPECT_EQ(alloc.stats().num_device_mallocs, 1);
  }
  CachingAllocator alloc(&dev, CachingAllocator::parse_options("max_split_size_mb:64"));
  void* a = alloc.allocate(100 * kMiB, kS1);
  alloc.deallocate(a);
  void* b = alloc.allocate(30 * kMiB, kS1);  // below the limit: not from the 100 MiB block
  EXPECT_NE(b, a);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
  alloc.deallocate(b);
  void* c = alloc.allocate(90 * kMiB, kS1);  // oversize, within 20 MiB: reused, not split
  EXPECT_EQ(c, a);
  EXPECT_EQ(alloc.stats().allocated_bytes, int64_t(100 * kMiB));
  EXPECT_EQ(alloc.stats().num_device_mallocs, 2);
  alloc.deallocate(c);
  void* d = alloc.allocate(70 * kMiB, kS1);  // oversize, but 30 MiB of slack is too much
  EXPECT_NE(d, a);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 3);
  void* e = alloc.allocate(3 * kMiB, kS1);  // blocks under the limit still split
  EXPECT_EQ(alloc.stats().allocated_bytes, int64_t(70 * kMiB + 3 * kMiB));
  alloc.deallocate(d);
  alloc.deallocate(e);
}

TEST(CudaCachingAllocator, OutOfMemoryEmptiesTheCacheAndRetries) {
  FakeDeviceMemory dev(40 * kMiB);
  CachingAllocator alloc(&dev);
  void* a = alloc.allocate(20 * kMiB, kS1);
  void* b = alloc.allocate(20 * kMiB, kS2);
  alloc.deallocate(a);
  alloc.deallocate(b);
  alloc.allocate(30 * kMiB, kS1);  // the device is full of cached 20 MiB segments
  const auto s = alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.num_device_frees, 2);
  EXPECT_EQ(s.reserved_bytes, int64_t(30 * kMiB));
  EXPECT_EQ(dev.failed_mallocs, 1);
  EXPECT_THAT(dev.malloc_sizes, ElementsAre(20 * kMiB, 20 * kMiB, 30 * kMiB));
}

TEST(CudaCachingAllocator, OutOfMemoryMessageStatesTheNumbers) {
  FakeDeviceMemory dev(40 * kMiB);
  CachingAllocator alloc(&dev, {}, /*device_index=*/3);
  alloc.allocate(8 * kMiB, kS1);  // a 20 MiB segment, 12 MiB of it free
  EXPECT_EQ(OomMessage(alloc, 24 * kMiB, kS1),
            "CUDA out of memory on cuda:3: tried to allocate 24.00 MiB; 8.00 MiB allocated, "
            "20.00 MiB reserved, largest free block 12.00 MiB, device total 40.00 MiB");
  auto s = alloc.stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.reserved_bytes, int64_t(20 * kMiB));  // the partly used segment survives
  // Still usable: the free 12 MiB serves a request that fits.
  alloc.allocate(12 * kMiB, kS1);
  EXPECT_EQ(alloc.stats().num_device_mallocs, 1);
}

TEST(CudaCachingAllocator, OutOfMemoryMessageUsesGiBAndHintsAtFragmentation) {
  {
    FakeDeviceMemory dev(8 * kGiB);
    CachingAllocator alloc(&dev);
    alloc.allocate(6 * kGiB, kS1);
    EXPECT_EQ(OomMessage(alloc, 3 * kGiB, kS1),
              "CUDA out of memory on cuda:0: tried to allocate 3.00 GiB; 6.00 GiB allocated, "
              "6.00 GiB reserved, largest free block 0 bytes, device total 8.00 GiB");
  }
  FakeDeviceMemory dev(40 * kMiB);
  CachingAllocator alloc(&dev);
  alloc.allocate(8 * kMiB, kS1);
  alloc.allocate(8 * kMiB, kS2);
  // 24 MiB are cached, but in two 12 MiB pieces.
  const std::string m = OomMessage(alloc, 15 * kMiB, kS1);
  EXPECT_THAT(m, HasSubstr("largest free block 12.00 MiB"));
  EXPECT_THAT(m, HasSubstr("expandable_segments:true"));
}

TEST(CudaCachingAllocator, AbsurdRequestThrowsWithoutTouchingTheDevice) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  EXPECT_THROW(alloc.allocate(SIZE_MAX, kS1), OutOfMemoryError);
  EXPECT_EQ(dev.failed_mallocs, 0);
  EXPECT_EQ(alloc.stats().num_ooms, 1);
}

TEST(CudaCachingAllocator, ExpandableSegmentGrowsByMappingPages) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev, Expandable());
  void* p = alloc.allocate(3 * kMiB, kS1);
  EXPECT_EQ(dev.reserves, 1);
  EXPECT_THAT(dev.map_sizes, ElementsAre(4 * kMiB));
  void* q = alloc.allocate(3 * kMiB, kS1);  // the free 1 MiB tail plus one new page
  EXPECT_EQ(A(q), A(p) + 3 * kMiB);
  void* r = alloc.allocate(100 * kMiB, kS1);
  EXPECT_EQ(A(r), A(q) + 3 * kMiB);
  EXPECT_THAT(dev.map_sizes, ElementsAre(4 * kMiB, 2 * kMiB, 100 * kMiB));
  EXPECT_EQ(dev.reserves, 1);  // growth never needs a new reservation
  EXPECT_TRUE(dev.malloc_sizes.empty());
  auto s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, int64_t(106 * kMiB));
  EXPECT_EQ(s.num_device_mallocs, 3);
  alloc.allocate(kKiB, kS1);  // the small pool has a range of its own
  EXPECT_EQ(dev.reserves, 2);
}

TEST(CudaCachingAllocator, ExpandableEmptyCacheUnmapsFreePagesAtTheEnd) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev, Expandable());
  void* p = alloc.allocate(3 * kMiB, kS1);
  void* q = alloc.allocate(3 * kMiB, kS1);  // 6 MiB mapped
  alloc.deallocate(q);                      // free from 3 MiB to the end
  alloc.empty_cache();                      // the page at [4, 6) MiB goes; [2, 4) is shared
  EXPECT_EQ(dev.unmaps, 1);
  auto s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, int64_t(4 * kMiB));
  EXPECT_EQ(s.largest_free_block, int64_t(kMiB));
  EXPECT_EQ(s.num_device_frees, 1);
  void* r = alloc.allocate(kMiB + 512, kS1);  // just over the free 1 MiB: one page again
  EXPECT_EQ(A(r), A(p) + 3 * kMiB);
  EXPECT_THAT(dev.map_sizes, ElementsAre(4 * kMiB, 2 * kMiB, 2 * kMiB));
  alloc.deallocate(r);
  alloc.deallocate(p);
  alloc.empty_cache();  // all free: every page unmapped and the range released
  EXPECT_EQ(dev.releases, 1);
  EXPECT_EQ(dev.used(), 0u);
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
  alloc.allocate(3 * kMiB, kS1);
  EXPECT_EQ(dev.reserves, 2);
}

TEST(CudaCachingAllocator, ExpandableSegmentsFragmentLessWhenSizesGrow) {
  // Four 11 MiB tensors, all freed, then four 13 MiB ones: fixed segments strand the old
  // 12 MiB segments; an expandable range merges them into one block the new ones fit in.
  auto run = [](CachingAllocator::Options options) {
    FakeDeviceMemory dev(kGiB);
    CachingAllocator alloc(&dev, options);
    std::vector<void*> blocks;
    for (int i = 0; i < 4; ++i) blocks.push_back(alloc.allocate(11 * kMiB, kS1));
    for (void* b : blocks) alloc.deallocate(b);
    for (int i = 0; i < 4; ++i) alloc.allocate(13 * kMiB, kS1);
    return alloc.stats();
  };
  const auto fixed = run({});
  const auto grown = run(Expandable());
  // Fixed: 4 x 12 MiB cached + 4 x 14 MiB (13 MiB, 1 MiB rest unsplit) in use.
  EXPECT_EQ(fixed.reserved_bytes, int64_t(104 * kMiB));
  EXPECT_EQ(fixed.allocated_bytes, int64_t(56 * kMiB));
  EXPECT_DOUBLE_EQ(fixed.fragmentation, 1.0 - 12.0 / 48.0);
  // Expandable: 44 MiB mapped for the first wave, 8 more for the second; nothing left over.
  EXPECT_EQ(grown.reserved_bytes, int64_t(52 * kMiB));
  EXPECT_EQ(grown.allocated_bytes, int64_t(52 * kMiB));
  EXPECT_DOUBLE_EQ(grown.fragmentation, 0.0);
  EXPECT_LT(grown.fragmentation, fixed.fragmentation);
  EXPECT_EQ(grown.num_device_mallocs, 5);
  EXPECT_EQ(fixed.num_device_mallocs, 8);
}

TEST(CudaCachingAllocator, ExpandableOutOfMemoryUnmapsOtherStreamsPages) {
  FakeDeviceMemory dev(40 * kMiB);
  CachingAllocator alloc(&dev, Expandable());
  alloc.deallocate(alloc.allocate(30 * kMiB, kS1));
  void* p = alloc.allocate(20 * kMiB, kS2);  // needs kS1's cached pages back first
  EXPECT_NE(p, nullptr);
  const auto s = alloc.stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.reserved_bytes, int64_t(20 * kMiB));
  EXPECT_EQ(dev.failed_maps, 1);
  EXPECT_EQ(dev.used(), 20 * kMiB);
}

TEST(CudaCachingAllocator, StatsFollowASequenceOfCalls) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  void* a = alloc.allocate(1000, kS1);       // 1024 B from a 2 MiB small segment
  void* b = alloc.allocate(3 * kMiB, kS1);   // 3 MiB from a 20 MiB segment, 17 MiB rest
  void* c = alloc.allocate(12 * kMiB, kS1);  // 12 MiB of that rest, 5 MiB left
  const int64_t small_rest = 2 * kMiB - 1024;
  auto s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, int64_t(1024 + 15 * kMiB));
  EXPECT_EQ(s.reserved_bytes, int64_t(22 * kMiB));
  EXPECT_EQ(s.active_blocks, 3);
  EXPECT_EQ(s.largest_free_block, int64_t(5 * kMiB));
  EXPECT_DOUBLE_EQ(s.fragmentation, 1.0 - double(5 * kMiB) / double(small_rest + 5 * kMiB));
  EXPECT_EQ(s.num_device_mallocs, 2);
  EXPECT_EQ(s.peak_allocated_bytes, s.allocated_bytes);
  alloc.deallocate(b);  // 3 MiB free, but c keeps it apart from the 5 MiB rest
  s = alloc.stats();
  EXPECT_EQ(s.active_blocks, 2);
  EXPECT_EQ(s.largest_free_block, int64_t(5 * kMiB));
  alloc.deallocate(c);  // the whole 20 MiB segment is one free block again
  s = alloc.stats();
  EXPECT_EQ(s.allocated_bytes, 1024);
  EXPECT_EQ(s.largest_free_block, int64_t(20 * kMiB));
  EXPECT_EQ(s.peak_allocated_bytes, int64_t(1024 + 15 * kMiB));
  alloc.reset_peak();
  EXPECT_EQ(alloc.stats().peak_allocated_bytes, 1024);
  alloc.empty_cache();  // the large segment goes; the small one holds a
  s = alloc.stats();
  EXPECT_EQ(s.reserved_bytes, int64_t(2 * kMiB));
  EXPECT_EQ(s.num_device_frees, 1);
  EXPECT_EQ(s.largest_free_block, small_rest);
  EXPECT_DOUBLE_EQ(s.fragmentation, 0.0);  // the one free block is all the free memory
  alloc.deallocate(a);
  EXPECT_EQ(alloc.stats().active_blocks, 0);
  EXPECT_EQ(alloc.stats().num_ooms, 0);
  EXPECT_EQ(alloc.stats().num_alloc_retries, 0);
}

TEST(CudaCachingAllocator, ParseOptionsAcceptsTheDocumentedKeys) {
  auto o = CachingAllocator::parse_options("");
  EXPECT_FALSE(o.expandable_segments);
  EXPECT_EQ(o.max_split_size, SIZE_MAX);
  o = CachingAllocator::parse_options("expandable_segments:true");
  EXPECT_TRUE(o.expandable_segments);
  o = CachingAllocator::parse_options(" max_split_size_mb : 64 , expandable_segments:False,");
  EXPECT_FALSE(o.expandable_segments);
  EXPECT_EQ(o.max_split_size, 64 * kMiB);
}

TEST(CudaCachingAllocator, ParseOptionsRejectsWithTheAcceptedValues) {
  auto error = [](const char* conf) {
    try {
      CachingAllocator::parse_options(conf);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    ADD_FAILURE() << "'" << conf << "' was accepted";
    return std::string();
  };
  std::string m = error("garbage_collection_threshold:0.6");
  EXPECT_THAT(m, HasSubstr("'garbage_collection_threshold'"));
  EXPECT_THAT(m, HasSubstr("expandable_segments"));
  EXPECT_THAT(m, HasSubstr("max_split_size_mb"));
  m = error("expandable_segments:yes");
  EXPECT_THAT(m, HasSubstr("expandable_segments accepts true or false, got 'yes'"));
  EXPECT_THAT(error("expandable_segments"), HasSubstr("got ''"));
  for (const char* bad : {"max_split_size_mb:abc", "max_split_size_mb:20", "max_split_size_mb:-5",
                          "max_split_size_mb:64MB", "max_split_size_mb:99999999999999999999"}) {
    EXPECT_THAT(error(bad), HasSubstr("max_split_size_mb accepts an integer number of MiB")) << bad;
  }
}

TEST(CudaCachingAllocator, ConcurrentStreamsNeverGetOverlappingBlocks) {
  FakeDeviceMemory dev(64 * kGiB);
  CachingAllocator alloc(&dev);
  std::mutex mu;
  std::map<uintptr_t, size_t> live;  // every block handed out and not yet freed
  auto work = [&](anvil::cuda::StreamId stream) {
    uint64_t rng = stream * 0x9E3779B97F4A7C15ull;
    std::vector<std::pair<void*, size_t>> mine;
    for (int i = 0; i < 3000; ++i) {
      rng = rng * 6364136223846793005ull + 1442695040888963407ull;
      if (mine.size() < 8 && (rng >> 60) < 10) {
        const size_t bytes = size_t{1} << ((rng >> 32) % 25);  // 1 B .. 16 MiB
        void* p = alloc.allocate(bytes, stream);
        std::lock_guard<std::mutex> lock(mu);
        auto next = live.lower_bound(A(p));
        EXPECT_TRUE(next == live.end() || next->first >= A(p) + bytes);
        EXPECT_TRUE(next == live.begin() || std::prev(next)->first + std::prev(next)->second <= A(p));
        live[A(p)] = bytes;
        mine.emplace_back(p, bytes);
      } else if (!mine.empty()) {
        const size_t k = (rng >> 20) % mine.size();
        {
          std::lock_guard<std::mutex> lock(mu);
          live.erase(A(mine[k].first));
        }
        alloc.deallocate(mine[k].first);
        mine.erase(mine.begin() + k);
      }
    }
    for (auto& [p, bytes] : mine) {
      {
        std::lock_guard<std::mutex> lock(mu);
        live.erase(A(p));
      }
      alloc.deallocate(p);
    }
  };
  std::vector<std::thread> threads;
  for (anvil::cuda::StreamId s = 1; s <= 4; ++s) threads.emplace_back(work, s);
  for (auto& t : threads) t.join();
  EXPECT_EQ(alloc.stats().allocated_bytes, 0);
  EXPECT_EQ(alloc.stats().active_blocks, 0);
  alloc.empty_cache();
  EXPECT_EQ(alloc.stats().reserved_bytes, 0);
  EXPECT_EQ(dev.used(), 0u);
}

TEST(CudaCachingAllocator, DestructionReturnsEverythingToTheDevice) {
  FakeDeviceMemory dev(kGiB);
  {
    CachingAllocator fixed(&dev);
    CachingAllocator grown(&dev, Expandable());
    fixed.allocate(3 * kMiB, kS1);  // still in use
    void* p = fixed.allocate(20 * kMiB, kS1);
    fixed.record_stream(p, kS2);
    fixed.deallocate(p);  // waiting on kS2
    grown.allocate(5 * kMiB, kS1);
    grown.allocate(kKiB, kS2);
    EXPECT_GT(dev.used(), 0u);
  }
  EXPECT_EQ(dev.used(), 0u);
  EXPECT_EQ(dev.live_events(), 0u);
  EXPECT_EQ(dev.reserves, dev.releases);
  // (~FakeDeviceMemory checks that nothing is left mapped, reserved or allocated.)
}

TEST(CudaCachingAllocator, MisuseIsReported) {
  FakeDeviceMemory dev(kGiB);
  CachingAllocator alloc(&dev);
  EXPECT_EQ(alloc.allocate(0, kS1), nullptr);
  alloc.deallocate(nullptr);
  void* p = alloc.allocate(100, kS1);
  alloc.deallocate(p);
  EXPECT_THROW(alloc.deallocate(p), Error);  // double free
  EXPECT_THROW(alloc.record_stream(p, kS2), Error);
  int not_ours = 0;
  EXPECT_THROW(alloc.deallocate(&not_ours), Error);
  EXPECT_EQ(alloc.stats().allocated_bytes, 0);
}
