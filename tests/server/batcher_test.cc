// Dynamic batching: concurrent requests share forwards, each caller gets exactly its rows,
// deadlines and queue limits are enforced, and close() fails what is queued.
#include "server/batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/anvil.h"
#include "core/nn/nn.h"
#include "server/status.h"

namespace anvil::server {
namespace {

using Clock = Batcher::Clock;

// y = 2x + row-independent offset; counts forwards and the largest batch it saw. While held, each
// forward announces itself and waits for release: a test knows "the model is busy" from the
// forward itself, never from a sleep (a busy machine can be slower than any sleep).
class Probe : public nn::Module {
 public:
  Probe() : Module("Probe") {}
  Tensor forward(const Tensor& x) override {
    ++calls;
    int64_t n = x.size(0), prev = max_rows.load();
    while (n > prev && !max_rows.compare_exchange_weak(prev, n)) {
    }
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return !held_; });
    return x * 2 + 1;
  }
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = false;
    cv_.notify_all();
  }
  // Blocks until `n` forwards have begun.
  void wait_entered(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return entered_ >= n; });
  }
  std::atomic<int> calls{0};
  std::atomic<int64_t> max_rows{0};

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0;
  bool held_ = false;
};

// The batcher's own queue-depth reports (BatchObserver::on_depth): a test waits for "n requests
// are queued" as the batcher states it.
class QueueDepth {
 public:
  BatchObserver observer() {
    return {.on_depth = [this](int64_t depth) {
      std::lock_guard<std::mutex> lock(mu_);
      depth_ = depth;
      cv_.notify_all();
    }};
  }
  void wait_for(int64_t depth) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return depth_ == depth; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t depth_ = 0;
};

Clock::time_point Far() { return Clock::now() + std::chrono::seconds(30); }

// While the model is busy with the first request, the other 15 queue; the next forward takes
// all of them together, and each caller gets exactly its rows.
TEST(Batcher, ConcurrentRequestsShareForwardsAndGetTheirOwnRows) {
  auto probe = std::make_shared<Probe>();
  QueueDepth depth;
  Batcher b(probe, {.enabled = true, .max_batch = 64, .max_delay = std::chrono::milliseconds(20)}, depth.observer());
  constexpr int kClients = 16;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  auto client = [&](int c) {
    const Tensor x = full({2, 3}, static_cast<double>(c));
    const Tensor y = b.run(x, Far()).value();
    if (!allclose(y, x * 2 + 1)) ++wrong;
  };
  probe->hold();
  threads.emplace_back(client, 0);
  probe->wait_entered(1);
  for (int c = 1; c < kClients; ++c) threads.emplace_back(client, c);
  depth.wait_for(kClients - 1);
  probe->release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(probe->calls.load(), 2);  // the first alone, then the 15 queued behind it at once
  EXPECT_EQ(probe->max_rows.load(), 2 * (kClients - 1));
  EXPECT_EQ(b.stats().batches, 2);
  EXPECT_EQ(b.stats().requests, kClients);
  EXPECT_EQ(b.stats().rows, 2 * kClients);
}

TEST(Batcher, DisabledRunsEachRequestAlone) {
  auto probe = std::make_shared<Probe>();
  QueueDepth depth;
  Batcher b(probe, {.enabled = false}, depth.observer());
  std::vector<std::thread> threads;
  probe->hold();
  threads.emplace_back([&] { EXPECT_TRUE(b.run(ones({3, 2}), Far()).ok()); });
  probe->wait_entered(1);
  for (int c = 1; c < 8; ++c) threads.emplace_back([&] { EXPECT_TRUE(b.run(ones({3, 2}), Far()).ok()); });
  depth.wait_for(7);  // seven queued: batching would run them as one
  probe->release();
  for (auto& t : threads) t.join();
  EXPECT_EQ(probe->calls.load(), 8);
  EXPECT_EQ(probe->max_rows.load(), 3);
}

TEST(Batcher, ARequestWhoseDeadlinePassedInTheQueueDoesNotRun) {
  auto probe = std::make_shared<Probe>();
  QueueDepth depth;
  Batcher b(probe, {.enabled = false}, depth.observer());
  probe->hold();
  std::thread busy([&] { EXPECT_TRUE(b.run(ones({1, 1}), Far()).ok()); });  // occupies the model
  probe->wait_entered(1);
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(20);
  absl::Status st;
  std::thread late([&] { st = b.run(ones({1, 1}), deadline).status(); });
  depth.wait_for(1);
  // The deadline passes while the request is queued (the clock is what is under test here).
  std::this_thread::sleep_until(deadline + std::chrono::milliseconds(1));
  probe->release();
  busy.join();
  late.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_EQ(probe->calls.load(), 1);
}

TEST(Batcher, AFullQueueAnswersUnavailable) {
  auto probe = std::make_shared<Probe>();
  QueueDepth depth;
  Batcher b(probe, {.enabled = false, .max_queue = 1}, depth.observer());
  probe->hold();
  std::thread first([&] { EXPECT_TRUE(b.run(ones({1, 1}), Far()).ok()); });
  probe->wait_entered(1);  // first is running, the queue empty
  std::thread second([&] { EXPECT_TRUE(b.run(ones({1, 1}), Far()).ok()); });
  depth.wait_for(1);  // second is queued: the queue is full
  const absl::Status st = b.run(ones({1, 1}), Far()).status();
  probe->release();
  first.join();
  second.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("queue is full"));
  EXPECT_EQ(probe->calls.load(), 2);
}

TEST(Batcher, CloseFailsQueuedRequestsWithUnavailable) {
  auto probe = std::make_shared<Probe>();
  QueueDepth depth;
  auto b = std::make_unique<Batcher>(probe, BatchingOptions{.enabled = false}, depth.observer());
  probe->hold();
  std::thread first([&] { EXPECT_TRUE(b->run(ones({1, 1}), Far()).ok()); });
  probe->wait_entered(1);  // first is running
  std::atomic<int> code{-1};
  std::thread queued([&] { code = static_cast<int>(b->run(ones({1, 1}), Far()).status().code()); });
  depth.wait_for(1);  // queued is waiting behind it
  b->close();
  probe->release();
  first.join();
  queued.join();
  EXPECT_EQ(code.load(), static_cast<int>(absl::StatusCode::kUnavailable));
  EXPECT_EQ(probe->calls.load(), 1);  // the queued request never ran
}

}  // namespace
}  // namespace anvil::server
