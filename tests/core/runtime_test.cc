// The runtime under the ops: the caching CPU allocator, the intra-op thread pool, the
// thread-local grad mode and the Philox generator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <future>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

#include "core/anvil.h"
#include "core/tensor/allocator.h"
#include "tests/core/test_util.h"

using namespace anvil;
using anvil::test::ThreadsGuard;
using ::testing::HasSubstr;

namespace {

// Runs parallel_for over [begin, end) and checks every index is visited exactly once and
// every chunk lies inside the range.
void ExpectExactCover(int64_t begin, int64_t end, int64_t grain) {
  const int64_t n = end - begin;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::atomic<int> bad_chunks{0};
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    if (b < begin || e > end || b >= e) bad_chunks++;
    for (int64_t i = b; i < e && i >= begin && i < end; ++i) hits[i - begin]++;
  });
  EXPECT_EQ(bad_chunks.load(), 0) << "grain " << grain;
  int64_t wrong = 0;
  for (auto& h : hits) wrong += h.load() != 1;
  EXPECT_EQ(wrong, 0) << "range [" << begin << ", " << end << ") grain " << grain << " threads " << get_num_threads();
}

}  // namespace

// ====================================================================== allocator

TEST(Allocator, SizeClassInvariants) {
  size_t prev = 0;
  for (size_t n = 0; n < (size_t{1} << 22); n = n < 4096 ? n + 1 : n * 5 / 4 + 3) {
    const size_t c = cpu_size_class(n);
    ASSERT_GE(c, n) << n;
    ASSERT_GT(c, 0u) << n;
    ASSERT_EQ(c % 64, 0u) << "size classes are 64-byte multiples: " << n;
    ASSERT_GE(c, prev) << "size classes are monotone: " << n;
    ASSERT_EQ(cpu_size_class(c), c) << "a class rounds to itself: " << n;
    if (n > 512) {
      ASSERT_LT(c - n, n / 4 + 1) << "waste under 25%: " << n;
    } else {
      ASSERT_LT(c - std::max<size_t>(n, 1), 64u) << "64-byte steps up to 512: " << n;
    }
    prev = c;
  }
  EXPECT_EQ(cpu_size_class(1), 64u);
  EXPECT_EQ(cpu_size_class(64), 64u);
  EXPECT_EQ(cpu_size_class(65), 128u);
  EXPECT_EQ(cpu_size_class(4096), 4096u);
  EXPECT_EQ(cpu_size_class(size_t{1} << 20), size_t{1} << 20);
}

TEST(Allocator, FreeThenAllocateSameSizeHitsTheCache) {
  Allocator* a = cpu_allocator();
  const size_t n = 12345;
  const size_t cls = cpu_size_class(n);
  void* p = a->allocate(n);
  ASSERT_NE(p, nullptr);
  const AllocatorStats s0 = a->stats();
  EXPECT_GE(s0.allocated_bytes, static_cast<int64_t>(cls));
  EXPECT_GE(s0.peak_allocated_bytes, s0.allocated_bytes);
  a->deallocate(p, n);
  const AllocatorStats s1 = a->stats();
  EXPECT_EQ(s1.allocated_bytes, s0.allocated_bytes - static_cast<int64_t>(cls));
  EXPECT_EQ(s1.cached_bytes, s0.cached_bytes + static_cast<int64_t>(cls));
  void* q = a->allocate(n);
  const AllocatorStats s2 = a->stats();
  EXPECT_EQ(q, p) << "the block just freed is handed back";
  EXPECT_EQ(s2.num_cache_hits, s1.num_cache_hits + 1);
  EXPECT_EQ(s2.num_allocs, s1.num_allocs + 1);
  EXPECT_EQ(s2.num_system_allocs, s1.num_system_allocs);
  EXPECT_EQ(s2.cached_bytes, s1.cached_bytes - static_cast<int64_t>(cls));
  a->deallocate(q, n);
}

TEST(Allocator, SameClassDifferentSizeHitsTheCache) {
  Allocator* a = cpu_allocator();
  const size_t n1 = 5000;
  size_t n2 = n1 + 1;
  while (cpu_size_class(n2 + 1) == cpu_size_class(n1)) ++n2;  // the largest request in n1's class
  ASSERT_EQ(cpu_size_class(n2), cpu_size_class(n1));
  ASSERT_NE(n1, n2);
  void* p = a->allocate(n1);
  a->deallocate(p, n1);
  const int64_t hits = a->stats().num_cache_hits;
  void* q = a->allocate(n2);
  EXPECT_EQ(a->stats().num_cache_hits, hits + 1);
  EXPECT_EQ(q, p);
  // The whole class is usable: write the last byte.
  static_cast<char*>(q)[n2 - 1] = 1;
  a->deallocate(q, n2);
  // The next class up is not served from this block.
  const size_t n3 = cpu_size_class(n1) + 1;
  void* r = a->allocate(n3);
  EXPECT_NE(r, p);
  a->deallocate(r, n3);
}

TEST(Allocator, TensorsReuseFreedBlocks) {
  Allocator* a = cpu_allocator();
  void* first = nullptr;
  {
    Tensor t = empty({777});
    first = t.data_ptr();
  }
  const AllocatorStats s0 = a->stats();
  Tensor u = empty({777});
  const AllocatorStats s1 = a->stats();
  EXPECT_EQ(s1.num_cache_hits, s0.num_cache_hits + 1);
  EXPECT_EQ(u.data_ptr(), first);
  // A view allocates nothing.
  const int64_t allocs = a->stats().num_allocs;
  Tensor v = u.view({7, 111}).t().narrow(0, 1, 5);
  EXPECT_EQ(a->stats().num_allocs, allocs);
  (void)v;
}

TEST(Allocator, AlignmentAndEmptyCache) {
  Allocator* a = cpu_allocator();
  for (size_t n : {size_t{1}, size_t{100}, size_t{4097}, size_t{100000}}) {
    void* p = a->allocate(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    a->deallocate(p, n);
  }
  const size_t big = size_t{3} << 20;
  void* p = a->allocate(big);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u) << "blocks >= 2 MiB are 2 MiB-aligned";
  a->deallocate(p, big);
  EXPECT_GT(a->stats().cached_bytes, 0);
  a->empty_cache();
  EXPECT_EQ(a->stats().cached_bytes, 0);
  const int64_t sys = a->stats().num_system_allocs;
  void* q = a->allocate(big);
  EXPECT_EQ(a->stats().num_system_allocs, sys + 1) << "after empty_cache the OS serves the request";
  a->deallocate(q, big);
  EXPECT_EQ(a->device(), kCPU);
}

TEST(Allocator, ConcurrentAllocateFreeKeepsStatsConsistent) {
  Allocator* a = cpu_allocator();
  const int64_t before = a->stats().allocated_bytes;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([a, t] {
      for (int i = 0; i < 2000; ++i) {
        const size_t n = 64 + static_cast<size_t>((i * 37 + t * 101) % 9000);
        void* p = a->allocate(n);
        static_cast<char*>(p)[0] = 1;
        static_cast<char*>(p)[n - 1] = 2;
        a->deallocate(p, n);
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(a->stats().allocated_bytes, before);
}

// ====================================================================== thread pool

TEST(ThreadPool, SetNumThreadsChangesGetNumThreads) {
  ThreadsGuard restore;
  set_num_threads(3);
  EXPECT_EQ(get_num_threads(), 3);
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  set_num_threads(2);
  EXPECT_EQ(get_num_threads(), 2);
  EXPECT_THROW(set_num_threads(0), Error);
  EXPECT_THROW(set_num_threads(-2), Error);
  EXPECT_EQ(get_num_threads(), 2);
}

TEST(ThreadPool, ParallelForCoversRangeExactlyOnce) {
  ThreadsGuard restore;
  for (int threads : {1, 2, 3, 4}) {
    set_num_threads(threads);
    for (int64_t grain : {1, 7, 64, 999, 1000, 1001, 100000}) {
      ExpectExactCover(0, 1000, grain);
      ExpectExactCover(5, 1005, grain);
      ExpectExactCover(-37, 63, grain);
    }
    ExpectExactCover(0, 1, 1);
    ExpectExactCover(0, 100003, 10);
    int calls = 0;
    parallel_for(10, 10, 1, [&](int64_t, int64_t) { ++calls; });
    parallel_for(10, 3, 1, [&](int64_t, int64_t) { ++calls; });
    EXPECT_EQ(calls, 0) << "empty ranges run nothing";
  }
}

TEST(ThreadPool, ChunkingIsDeterministic) {
  ThreadsGuard restore;
  set_num_threads(3);
  auto chunks = [] {
    std::mutex mu;
    std::set<std::pair<int64_t, int64_t>> s;
    parallel_for(0, 10000, 16, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      s.emplace(b, e);
    });
    return s;
  };
  const auto first = chunks();
  for (int r = 0; r < 20; ++r) EXPECT_EQ(chunks(), first);
}

TEST(ThreadPool, SerialGuardAndNestedCallsKeepTheSameChunks) {
  ThreadsGuard restore;
  set_num_threads(3);
  auto chunks = [] {
    std::mutex mu;
    std::set<std::pair<int64_t, int64_t>> s;
    std::set<std::thread::id> threads;
    parallel_for(0, 10000, 16, [&](int64_t b, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      s.emplace(b, e);
      threads.insert(std::this_thread::get_id());
    });
    return std::make_pair(s, threads.size());
  };
  const auto pooled = chunks();
  EXPECT_EQ(pooled.first.size(), 3u);
  {
    SerialGuard serial;
    const auto serial_run = chunks();
    EXPECT_EQ(serial_run.first, pooled.first);  // same partial sums, so same rounding
    EXPECT_EQ(serial_run.second, 1u);           // all on the calling thread
  }
  // A float reduction gives bitwise the same result on a serial-forced thread.
  Tensor x = rand({1 << 20});
  const float expected = x.sum().item<float>();
  float on_worker = 0;
  std::thread([&] {
    SerialGuard serial;
    on_worker = x.sum().item<float>();
  }).join();
  EXPECT_EQ(on_worker, expected);
}

TEST(ThreadPool, ExceptionInChunkPropagatesToCaller) {
  ThreadsGuard restore;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    // One chunk in the middle throws.
    try {
      parallel_for(0, 100000, 10, [](int64_t b, int64_t e) {
        if (b <= 50000 && 50000 < e) throw std::runtime_error("chunk failed at 50000");
      });
      ADD_FAILURE() << "no exception with " << threads << " threads";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("chunk failed at 50000"));
    }
    // The engine's own error types keep their type across the pool.
    EXPECT_THROW(parallel_for(0, 100000, 10,
                              [](int64_t, int64_t e) {
                                if (e == 100000) throw IndexError("index out of range in a worker");
                              }),
                 IndexError);
    // Every chunk throwing: exactly one exception reaches the caller, nothing terminates.
    EXPECT_THROW(parallel_for(0, 100000, 10, [](int64_t, int64_t) { throw std::logic_error("all"); }),
                 std::logic_error);
    // The pool still works afterwards.
    ExpectExactCover(0, 100000, 10);
  }
}

TEST(ThreadPool, KernelErrorsFromWorkersReachTheCaller) {
  ThreadsGuard restore;
  set_num_threads(2);
  // A large gather whose bad index sits at the far end, in a worker's chunk.
  Tensor x = zeros({10});
  std::vector<int64_t> idx(1 << 18, 1);
  idx.back() = 99;
  Tensor index = tensor(idx);
  EXPECT_THROW(gather(x, 0, index), IndexError);
  // Then an ordinary op on the same pool.
  EXPECT_EQ(ones({1 << 18}).sum().item<double>(), static_cast<double>(1 << 18));
}

TEST(ThreadPool, InParallelRegionAndNesting) {
  ThreadsGuard restore;
  set_num_threads(2);
  EXPECT_FALSE(in_parallel_region());
  std::atomic<int> inside{0}, outside{0};
  std::vector<std::atomic<int>> hits(200 * 50);
  parallel_for(0, 200, 1, [&](int64_t b, int64_t e) {
    (in_parallel_region() ? inside : outside)++;
    for (int64_t i = b; i < e; ++i) {
      // A nested parallel_for runs inline and still covers its range.
      parallel_for(0, 50, 1, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) hits[i * 50 + j]++;
      });
    }
  });
  EXPECT_GT(inside.load(), 0);
  EXPECT_EQ(outside.load(), 0);
  EXPECT_FALSE(in_parallel_region());
  int64_t wrong = 0;
  for (auto& h : hits) wrong += h.load() != 1;
  EXPECT_EQ(wrong, 0);
}

TEST(ThreadPool, ConcurrentCallersFromSeveralThreads) {
  ThreadsGuard restore;
  set_num_threads(2);
  std::atomic<int> failures{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&failures] {
      for (int rep = 0; rep < 20; ++rep) {
        std::vector<std::atomic<int>> hits(5000);
        parallel_for(0, 5000, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
        for (auto& h : hits) failures += h.load() != 1;
      }
    });
  }
  for (auto& th : ts) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadPool, OpsGiveSameResultsForAnyThreadCount) {
  ThreadsGuard restore;
  manual_seed(123);
  Tensor x = randn({257, 1031}, kFloat64);
  set_num_threads(1);
  Tensor s1 = x.sum({1});
  Tensor e1 = exp(x);
  Tensor m1 = matmul(x.narrow(1, 0, 257), x.narrow(1, 0, 257).t());
  for (int threads : {2, 3}) {
    set_num_threads(threads);
    EXPECT_TRUE(equal(x.sum({1}), s1)) << threads;
    EXPECT_TRUE(equal(exp(x), e1)) << threads;
    EXPECT_TRUE(allclose(matmul(x.narrow(1, 0, 257), x.narrow(1, 0, 257).t()), m1, 1e-12, 1e-12)) << threads;
  }
}

// ====================================================================== grad mode

TEST(GradMode, NoGradGuardScopesAndNests) {
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor w = ones({2}, TensorOptions().with_requires_grad());
  {
    NoGradGuard g;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = w * 2;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      NoGradGuard g2;
      EXPECT_FALSE(GradMode::is_enabled());
    }
    EXPECT_FALSE(GradMode::is_enabled());
    {
      EnableGradGuard e;
      EXPECT_TRUE(GradMode::is_enabled());
      EXPECT_TRUE((w * 2).requires_grad());
    }
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor z = w * 2;
  EXPECT_TRUE(z.requires_grad());
  EXPECT_NE(z.grad_fn(), nullptr);
}

TEST(GradMode, GuardIsThreadLocal) {
  Tensor w = ones({2}, TensorOptions().with_requires_grad());
  NoGradGuard g;
  ASSERT_FALSE(GradMode::is_enabled());
  bool other_enabled = false, other_records = false;
  std::thread t([&] {
    other_enabled = GradMode::is_enabled();
    Tensor y = w * 3;
    other_records = y.requires_grad() && y.grad_fn() != nullptr;
  });
  t.join();
  EXPECT_TRUE(other_enabled) << "a new thread starts with grad mode enabled";
  EXPECT_TRUE(other_records);
  EXPECT_FALSE(GradMode::is_enabled()) << "the other thread did not touch this one";
  EXPECT_FALSE((w * 3).requires_grad());
}

TEST(GradMode, GuardInAnotherThreadDoesNotLeak) {
  std::promise<void> entered, checked;
  std::future<void> checked_f = checked.get_future();
  bool inner_disabled = false;
  std::thread t([&] {
    NoGradGuard g;
    inner_disabled = !GradMode::is_enabled();
    entered.set_value();
    checked_f.wait();
  });
  entered.get_future().wait();
  EXPECT_TRUE(GradMode::is_enabled());
  Tensor w = ones({2}, TensorOptions().with_requires_grad());
  EXPECT_TRUE((w + 1).requires_grad());
  checked.set_value();
  t.join();
  EXPECT_TRUE(inner_disabled);
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(GradMode, GuardRestoresOnException) {
  try {
    NoGradGuard g;
    throw std::runtime_error("x");
  } catch (const std::runtime_error&) {
  }
  EXPECT_TRUE(GradMode::is_enabled());
}

// ====================================================================== generator

TEST(Generator, PhiloxKnownAnswers) {
  // Random123's published known-answer vectors for Philox4x32-10 (tests/kat_vectors).
  // Counter words (c0, c1, c2, c3) map to (counter lo, counter hi, subsequence lo, hi).
  EXPECT_EQ(philox4x32(0, 0, 0), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32(~uint64_t{0}, ~uint64_t{0}, ~uint64_t{0}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Generator, UniformHelpersStayInUnitInterval) {
  EXPECT_EQ(uniform_float(0), 0.0f);
  EXPECT_LT(uniform_float(0xffffffffu), 1.0f);
  EXPECT_EQ(uniform_double(0, 0), 0.0);
  EXPECT_LT(uniform_double(0xffffffffu, 0xffffffffu), 1.0);
}

TEST(Generator, ReserveIsThreadSafeAndContiguous) {
  Generator g(7);
  std::vector<std::vector<uint64_t>> firsts(4);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&g, &firsts, t] {
      for (int i = 0; i < 2000; ++i) firsts[t].push_back(g.reserve(3).second);
    });
  }
  for (auto& th : ts) th.join();
  std::vector<uint64_t> all;
  for (auto& f : firsts) all.insert(all.end(), f.begin(), f.end());
  std::sort(all.begin(), all.end());
  ASSERT_EQ(all.size(), 8000u);
  for (size_t i = 0; i < all.size(); ++i) ASSERT_EQ(all[i], 3 * i) << "reservations overlap or leave gaps";
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{7, 24000}));
  g.manual_seed(9);
  EXPECT_EQ(g.get_state(), (std::pair<uint64_t, uint64_t>{9, 0}));
}

TEST(Generator, StateRoundTripReproducesDraws) {
  manual_seed(2024);
  (void)rand({17});
  const auto state = default_generator().get_state();
  Tensor a = randn({64});
  default_generator().set_state(state.first, state.second);
  Tensor b = randn({64});
  EXPECT_TRUE(equal(a, b));
  EXPECT_EQ(default_generator().seed(), 2024u);
}
