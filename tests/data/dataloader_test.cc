// DataLoader: determinism for any worker count, epochs, bounded prefetch, errors with the
// sample index, prompt shutdown, timeouts, resume positions, iterable datasets and stats.
#include "core/data/dataloader.h"

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/backend/registry.h"
#include "core/data/philox_stream.h"
#include "core/data/sample_random.h"
#include "core/util/thread_pool.h"
#include "tests/core/test_util.h"

namespace anvil::data {
namespace {

using test::ErrorOf;
using test::Vals;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Sample i is an 8x8 single-channel image filled with i and target i. get() sleeps a
// pseudo-random 0-`jitter_us` microseconds so that workers finish out of order.
class SlowDataset : public Dataset {
 public:
  explicit SlowDataset(int64_t n, int jitter_us = 300, int64_t fail_at = -1)
      : n_(n), jitter_us_(jitter_us), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  Example get(int64_t i) const override {
    CheckIndex(i);
    gets.fetch_add(1);
    if (i == fail_at_) throw Error("bad record in shard 3");
    if (jitter_us_ > 0)
      std::this_thread::sleep_for(
          std::chrono::microseconds(MixKey(99, static_cast<uint64_t>(i)) % static_cast<uint64_t>(jitter_us_)));
    if (const WorkerInfo* w = worker_info()) {
      std::lock_guard<std::mutex> lock(mu);
      worker_ids.insert(w->id);
      thread_ids.insert(std::this_thread::get_id());
    }
    return Example{{"input", full({1, 8, 8}, static_cast<double>(i))}, {"target", scalar_tensor(i, kInt64)}};
  }
  std::string name() const override { return "SlowDataset"; }

  mutable std::atomic<int64_t> gets{0};
  mutable std::mutex mu;
  mutable std::set<int> worker_ids;
  mutable std::set<std::thread::id> thread_ids;

 private:
  int64_t n_;
  int jitter_us_;
  int64_t fail_at_;
};

// A pipeline with random augmentation on top of SlowDataset.
std::shared_ptr<Dataset> Augmented(std::shared_ptr<Dataset> base) {
  auto pipeline = std::make_shared<Compose>(std::vector<std::shared_ptr<Transform>>{
      std::make_shared<RandomCrop>(6, 6, 1, /*seed=*/5), std::make_shared<RandomHorizontalFlip>(0.5, 6),
      // Draws from the global generator from several threads at once: must be safe (the
      // values are discarded, since that generator's order does depend on scheduling).
      std::make_shared<Lambda>([](const Tensor& t) { return t + rand_like(t) * 0.0; }, "Id"),
      std::make_shared<RandomErasing>(RandomErasing::Options{.p = 0.7, .value = {-1.0}}, 7)});
  return std::make_shared<MapDataset>(base, pipeline);
}

std::vector<Example> Epoch(DataLoader& loader) {
  std::vector<Example> out;
  for (Example& b : loader) out.push_back(b);
  return out;
}

void ExpectSameBatches(const std::vector<Example>& a, const std::vector<Example>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_TRUE(equal(a[k]["input"], b[k]["input"])) << "batch " << k;
    EXPECT_TRUE(equal(a[k]["target"], b[k]["target"])) << "batch " << k;
  }
}

// Threads of this process. Starts the intra-op pool first so that its lazily created threads
// are counted before and after alike.
int ThreadCount() {
  parallel_for(0, 1 << 20, 1, [](int64_t, int64_t) {});
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

TEST(DataLoaderTest, BatchesAreIdenticalForAnyWorkerCount) {
  auto ds = Augmented(std::make_shared<SlowDataset>(103));
  std::vector<std::vector<Example>> runs;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .num_workers = workers, .seed = 11});
    std::vector<Example> two_epochs = Epoch(loader);
    for (Example& b : Epoch(loader)) two_epochs.push_back(b);
    runs.push_back(std::move(two_epochs));
  }
  ExpectSameBatches(runs[0], runs[1]);
  ExpectSameBatches(runs[0], runs[2]);
  // And the augmentation is real: some crops/erasures differ from the plain sample value.
  const Tensor first = runs[0][0]["input"][0];
  const double v = static_cast<double>(runs[0][0]["target"][0].item<int64_t>());
  EXPECT_FALSE(equal(first, full_like(first, v)));
}

// The worker count changed between passes (the doctor's on_data_stall: add_workers): the
// running pass keeps its threads, the next pass runs on the new count, and the batches are those
// of a loader that had that count from the start. Persistent workers are replaced too.
TEST(DataLoaderTest, TheWorkerCountChangesAtTheNextPassAndTheBatchesDoNot) {
  for (const bool persistent : {false, true}) {
    auto base = std::make_shared<SlowDataset>(201, 50);
    auto ds = Augmented(base);
    DataLoader reference(ds, {.batch_size = 8, .shuffle = true, .num_workers = 0, .seed = 5});
    std::vector<Example> expected = Epoch(reference);
    for (Example& b : Epoch(reference)) expected.push_back(b);
    for (Example& b : Epoch(reference)) expected.push_back(b);

    DataLoader loader(ds, {.batch_size = 8,
                           .shuffle = true,
                           .num_workers = persistent ? 1 : 0,
                           .persistent_workers = persistent,
                           .seed = 5});
    std::vector<Example> got;
    bool changed = false;
    for (Example& b : loader) {  // the first pass
      got.push_back(b);
      if (!changed) {
        loader.set_num_workers(3);  // mid-pass: this pass keeps its count
        changed = true;
      }
    }
    EXPECT_EQ(loader.options().num_workers, persistent ? 1 : 0);
    {
      std::lock_guard<std::mutex> lock(base->mu);
      EXPECT_EQ(base->worker_ids, persistent ? std::set<int>{0} : std::set<int>{});
      base->worker_ids.clear();
    }
    for (Example& b : Epoch(loader)) got.push_back(b);
    EXPECT_EQ(loader.options().num_workers, 3);
    {
      std::lock_guard<std::mutex> lock(base->mu);
      EXPECT_EQ(base->worker_ids, (std::set<int>{0, 1, 2})) << "the second pass ran on three workers";
    }
    loader.set_num_workers(0);  // and back to the consumer's thread
    for (Example& b : Epoch(loader)) got.push_back(b);
    EXPECT_EQ(loader.options().num_workers, 0);
    ExpectSameBatches(got, expected);
  }
  DataLoader loader(std::make_shared<SlowDataset>(4), {.batch_size = 2});
  EXPECT_THAT(ErrorOf([&] { loader.set_num_workers(-1); }), HasSubstr("expected num_workers >= 0, got -1"));
}

// pin_memory: with a GPU every batch tensor arrives page-locked (built on the worker) with the
// values of an unpinned run, and copies to the GPU from it are exact; without one it changes
// nothing and says so, and pinning a tensor by hand is a clear error.
TEST(DataLoaderTest, PinMemoryDeliversPageLockedBatchesOrIsAClearNoOp) {
  auto ds = std::make_shared<SlowDataset>(20, 0);
  DataLoader plain(ds, {.batch_size = 8, .num_workers = 2});
  DataLoader pinned(ds, {.batch_size = 8, .num_workers = 2, .pin_memory = true});
  const std::vector<Example> a = Epoch(plain), b = Epoch(pinned);
  ExpectSameBatches(a, b);
  EXPECT_FALSE(plain.pins_memory());
  EXPECT_FALSE(a[0]["input"].is_pinned());
  if (!cuda_is_available()) {
    EXPECT_FALSE(pinned.pins_memory());
    for (const Example& batch : b) EXPECT_FALSE(batch["input"].is_pinned());
    try {
      (void)ones({2}).pin_memory();
      ADD_FAILURE() << "pin_memory without a GPU should throw";
    } catch (const NotImplementedError& e) {
      EXPECT_THAT(e.what(), HasSubstr("pin_memory: page-locked memory is for copies to a GPU, and there is none: " +
                                      cuda_unavailable_reason()));
    }
    return;
  }
  EXPECT_TRUE(pinned.pins_memory());
  for (const Example& batch : b) {
    EXPECT_TRUE(batch["input"].is_pinned());
    EXPECT_TRUE(batch["target"].is_pinned());
    EXPECT_TRUE(equal(batch["input"].to(CUDA(0)).to(kCPU), batch["input"]));
  }
  const Tensor p = b[0]["input"];
  EXPECT_EQ(p.pin_memory().data_ptr(), p.data_ptr()) << "pinning a pinned tensor is free";
}

// Copies to the GPU are staged unless non_blocking is asked for a pinned source: the source may
// be overwritten as soon as to() returns, while the copy is still queued behind other work.
TEST(DataLoaderTest, StagedCopiesToTheGpuDoNotReadTheSourceLater) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  for (bool pinned : {false, true}) {
    Tensor busy = randn({2048, 2048}).to(CUDA(0));
    std::vector<Tensor> on_gpu;
    Tensor host = pinned ? zeros({1 << 16}).pin_memory() : zeros({1 << 16});
    for (int i = 0; i < 20; ++i) {
      busy = busy.matmul(busy) * 1e-3;  // keeps the stream busy so copies queue behind it
      host.fill_(static_cast<double>(i));
      on_gpu.push_back(host.to(CUDA(0)));
    }
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(on_gpu[static_cast<size_t>(i)].sum().item<double>(), double{1 << 16} * i)
          << "pinned=" << pinned << " " << i;
    }
  }
}

TEST(DataLoaderTest, EveryIndexOnceAndEpochsChangeTheOrder) {
  auto ds = std::make_shared<SlowDataset>(50, 0);
  DataLoader loader(ds, {.batch_size = 16, .shuffle = true, .num_workers = 2, .seed = 3});
  ASSERT_EQ(loader.size(), 4);
  std::vector<std::vector<double>> orders;
  for (int e = 0; e < 2; ++e) {
    EXPECT_EQ(loader.epoch(), e);
    std::vector<double> order;
    for (Example& b : loader) {
      for (double t : Vals(b["target"])) order.push_back(t);
    }
    ASSERT_EQ(order.size(), 50u);
    EXPECT_EQ(std::set<double>(order.begin(), order.end()).size(), 50u);
    orders.push_back(order);
  }
  EXPECT_NE(orders[0], orders[1]);  // set_epoch was applied without being called by hand
  loader.set_epoch(0);
  std::vector<double> replay;
  for (Example& b : loader) {
    for (double t : Vals(b["target"])) replay.push_back(t);
  }
  EXPECT_EQ(replay, orders[0]);
}

TEST(DataLoaderTest, DropLastAndShortLastBatch) {
  auto ds = std::make_shared<SlowDataset>(10, 0);
  DataLoader keep(ds, {.batch_size = 4});
  auto batches = Epoch(keep);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2]["target"].size(0), 2);
  DataLoader drop(ds, {.batch_size = 4, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(drop.size(), 2);
  EXPECT_EQ(Epoch(drop).size(), 2u);
}

TEST(DataLoaderTest, PrefetchIsBoundedByWorkersTimesFactor) {
  auto ds = std::make_shared<SlowDataset>(400, 0);
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 2, .prefetch_factor = 2});
  auto first = loader.next();
  ASSERT_TRUE(first.has_value());
  // A stalled consumer: batch 0 delivered, the workers fill the 2 * 2 prefetch slots behind it
  // (waited for by the count itself, however slow the machine) ...
  const auto until = std::chrono::steady_clock::now() + 60s;
  while (ds->gets.load() < (1 + 2 * 2) * 4 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(ds->gets.load(), (1 + 2 * 2) * 4);
  // ... and build nothing more: a grace period for a loader that overran its bound to show it.
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(ds->gets.load(), (1 + 2 * 2) * 4);
}

TEST(DataLoaderTest, WorkerExceptionCarriesSampleIndexAndMessage) {
  for (int workers : {0, 2}) {
    auto ds = std::make_shared<SlowDataset>(40, 0, /*fail_at=*/17);
    DataLoader loader(ds, {.batch_size = 5, .num_workers = workers});
    try {
      for (Example& b : loader) (void)b;
      FAIL() << "no error";
    } catch (const DataLoaderError& e) {
      EXPECT_EQ(e.sample_index(), 17);
      EXPECT_EQ(e.batch_index(), 3);
      EXPECT_THAT(e.what(), HasSubstr("sample 17 (batch 3"));
      EXPECT_THAT(e.what(), HasSubstr("bad record in shard 3"));
      EXPECT_EQ(e.worker_id() >= 0, workers > 0);
    }
    // The loader is still usable: the position is the batch that failed.
    EXPECT_EQ(loader.position().batch, 3);
  }
}

TEST(DataLoaderTest, CollateErrorsNameTheBatch) {
  auto ds = std::make_shared<SlowDataset>(8, 0);
  DataLoader loader(ds, {.batch_size = 4, .num_workers = 1, .collate = [](std::vector<Example>&) -> Example {
                           throw Error("ragged");
                         }});
  EXPECT_THAT(ErrorOf([&] { loader.next(); }), HasSubstr("collating batch 0 (worker 0) failed: ragged"));
}

TEST(DataLoaderTest, DestroyingMidEpochIsPromptAndLeavesNoThread) {
  const int threads_before = ThreadCount();
  auto ds = std::make_shared<SlowDataset>(2000, 0);
  auto slow = std::make_shared<MapDataset>(ds, [](Example ex) {
    std::this_thread::sleep_for(5ms);  // the full epoch would take 2000 * 5 ms / 3 > 3 s
    return ex;
  });
  auto t0 = std::chrono::steady_clock::now();
  {
    DataLoader loader(slow, {.batch_size = 64, .num_workers = 3, .prefetch_factor = 4});
    ASSERT_TRUE(loader.next().has_value());
    t0 = std::chrono::steady_clock::now();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.0);  // waits for at most one sample per worker, not for 12 batches
  EXPECT_EQ(ThreadCount(), threads_before);
  EXPECT_LT(ds->gets.load(), 2000);
}

TEST(DataLoaderTest, TimeoutRaisesWithTheBatchNumber) {
  auto ds = std::make_shared<SlowDataset>(10, 0);
  auto slow = std::make_shared<MapDataset>(ds, [](Example ex) {
    std::this_thread::sleep_for(300ms);
    return ex;
  });
  DataLoader loader(slow, {.batch_size = 2, .num_workers = 1, .timeout = 20ms});
  auto msg = ErrorOf([&] { loader.next(); });
  EXPECT_THAT(msg, HasSubstr("timed out after 20 ms waiting for batch 0"));
}

TEST(DataLoaderTest, ResumeAtAPositionGivesTheRemainingBatchesExactly) {
  auto ds = Augmented(std::make_shared<SlowDataset>(60, 0));
  DataLoader full(ds, {.batch_size = 7, .shuffle = true, .num_workers = 2, .seed = 9});
  full.set_epoch(2);
  std::vector<Example> all = Epoch(full);
  DataLoader resumed(ds, {.batch_size = 7, .shuffle = true, .num_workers = 3, .seed = 9});
  resumed.set_position({2, 4});
  std::vector<Example> rest = Epoch(resumed);
  ExpectSameBatches(std::vector<Example>(all.begin() + 4, all.end()), rest);
  EXPECT_EQ(resumed.epoch(), 3);
}

TEST(DataLoaderTest, AbandonedPassCountsAsAnEpoch) {
  auto ds = std::make_shared<SlowDataset>(20, 0);
  DataLoader loader(ds, {.batch_size = 5, .shuffle = true, .num_workers = 2});
  for (Example& b : loader) {
    (void)b;
    break;
  }
  EXPECT_EQ(loader.position().batch, 1);
  for (Example& b : loader) (void)b;  // restarts: a new epoch, not the rest of the old one
  EXPECT_EQ(loader.epoch(), 2);
}

TEST(DataLoaderTest, WorkersShareOneDatasetAndGetInfo) {
  auto ds = std::make_shared<SlowDataset>(64, 200);
  DataLoader loader(ds, {.batch_size = 2, .num_workers = 3});
  Epoch(loader);
  EXPECT_EQ(ds->gets.load(), 64);  // every get went to the one shared object
  for (int id : ds->worker_ids) EXPECT_TRUE(id >= 0 && id < 3);
  EXPECT_GE(ds->worker_ids.size(), 2u);
  EXPECT_EQ(worker_info(), nullptr);
}

TEST(DataLoaderTest, PersistentWorkersSurviveEpochsOthersAreJoined) {
  const int threads_before = ThreadCount();
  auto ds = std::make_shared<SlowDataset>(40, 100);
  DataLoader persistent(ds, {.batch_size = 4, .num_workers = 2, .persistent_workers = true});
  Epoch(persistent);
  EXPECT_EQ(ThreadCount(), threads_before + 2);
  Epoch(persistent);
  EXPECT_LE(ds->thread_ids.size(), 2u);  // the same two threads served both epochs
  DataLoader transient(ds, {.batch_size = 4, .num_workers = 2});
  Epoch(transient);
  EXPECT_EQ(ThreadCount(), threads_before + 2);  // only the persistent loader's threads remain
}

TEST(DataLoaderTest, StatsReportDataWaitAndThroughput) {
  auto ds = std::make_shared<SlowDataset>(24, 0);
  auto slow = std::make_shared<MapDataset>(ds, [](Example ex) {
    std::this_thread::sleep_for(2ms);
    return ex;
  });
  DataLoader loader(slow, {.batch_size = 4, .num_workers = 1});
  for (Example& b : loader) {
    (void)b;
    EXPECT_GT(loader.stats().last_wait_seconds, 0.0);
  }
  const LoaderStats s = loader.stats();
  EXPECT_EQ(s.batches, 6);
  EXPECT_GT(s.wait_seconds, 0.0);
  EXPECT_LE(s.wait_seconds, s.elapsed_seconds);
  EXPECT_GT(s.batches_per_second(), 0.0);
  EXPECT_GT(s.wait_ratio(), 0.5);  // the consumer did nothing but wait
}

TEST(DataLoaderTest, OptionConflictsAreRejected) {
  auto ds = std::make_shared<SlowDataset>(4, 0);
  auto seq = std::make_shared<SequentialSampler>(4);
  EXPECT_THAT(ErrorOf([&] { DataLoader(ds, {.shuffle = true, .sampler = seq}); }), HasSubstr("mutually exclusive"));
  auto bs = std::make_shared<BatchSampler>(seq, 2, false);
  EXPECT_THAT(ErrorOf([&] { DataLoader(ds, {.batch_size = 2, .batch_sampler = bs}); }),
              HasSubstr("batch_sampler is mutually exclusive"));
  EXPECT_THAT(ErrorOf([&] { DataLoader(ds, {.num_workers = -1}); }), HasSubstr("num_workers >= 0"));
  DataLoader custom(ds, {.batch_sampler = bs});
  EXPECT_EQ(Epoch(custom).size(), 2u);
}

TEST(DataLoaderTest, DistributedSamplerShardsChangeEveryEpoch) {
  auto ds = std::make_shared<SlowDataset>(10, 0);
  auto sampler = std::make_shared<DistributedSampler>(10, 2, 0, true, 4);
  DataLoader loader(ds, {.batch_size = 5, .num_workers = 1, .sampler = sampler});
  auto e0 = Epoch(loader), e1 = Epoch(loader);
  EXPECT_FALSE(equal(e0[0]["target"], e1[0]["target"]));
}

// Counts 0..n-1, then ends; fails at `fail_at`.
class CountingStream : public IterableDataset {
 public:
  explicit CountingStream(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  void reset(int64_t) override { i_ = 0; }
  std::optional<Example> next() override {
    if (i_ >= n_) return std::nullopt;
    if (i_ == fail_at_) throw Error("checksum mismatch");
    const int64_t v = i_++;
    return Example{{"input", full({4, 4}, static_cast<double>(v))}, {"target", scalar_tensor(v, kInt64)}};
  }
  Example process(Example raw) const override {
    std::this_thread::sleep_for(
        std::chrono::microseconds(MixKey(1, static_cast<uint64_t>(raw["target"].item<int64_t>())) % 300));
    raw.set("input", flip_(raw["input"]));
    return raw;
  }
  std::string name() const override { return "CountingStream"; }

 private:
  int64_t n_, fail_at_, i_ = 0;
  RandomHorizontalFlip flip_{0.5, 3};
};

TEST(DataLoaderTest, IterableDatasetsKeepStreamOrderForAnyWorkerCount) {
  std::vector<std::vector<Example>> runs;
  for (int workers : {0, 1, 3}) {
    DataLoader loader(std::make_shared<CountingStream>(23), {.batch_size = 4, .num_workers = workers});
    runs.push_back(Epoch(loader));
    EXPECT_EQ(loader.epoch(), 1);
  }
  ASSERT_EQ(runs[0].size(), 6u);
  EXPECT_EQ(runs[0][5]["target"].size(0), 3);
  EXPECT_EQ(Vals(runs[0][1]["target"]), (std::vector<double>{4, 5, 6, 7}));
  ExpectSameBatches(runs[0], runs[1]);
  ExpectSameBatches(runs[0], runs[2]);
  DataLoader dropping(std::make_shared<CountingStream>(23), {.batch_size = 4, .drop_last = true, .num_workers = 2});
  EXPECT_EQ(Epoch(dropping).size(), 5u);
  EXPECT_THAT(ErrorOf([&] { (void)dropping.size(); }), HasSubstr("unknown"));
}

TEST(DataLoaderTest, IterableErrorsCarryTheStreamPosition) {
  DataLoader loader(std::make_shared<CountingStream>(30, 13), {.batch_size = 4, .num_workers = 2});
  try {
    Epoch(loader);
    FAIL() << "no error";
  } catch (const DataLoaderError& e) {
    EXPECT_EQ(e.sample_index(), 13);
    EXPECT_THAT(e.what(), HasSubstr("stream position 13 (batch 3"));
    EXPECT_THAT(e.what(), HasSubstr("checksum mismatch"));
  }
  EXPECT_THAT(ErrorOf([] { DataLoader(std::make_shared<CountingStream>(3), {.shuffle = true}); }),
              HasSubstr("defines its own order"));
}

}  // namespace
}  // namespace anvil::data
