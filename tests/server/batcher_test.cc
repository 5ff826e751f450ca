// Dynamic batching: concurrent requests share forwards, each caller gets exactly its rows,
// deadlines and queue limits are enforced, and close() fails what is queued.
#include "server/batcher.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "core/anvil.h"
#include "core/nn/nn.h"
#include "server/status.h"

namespace anvil::server {
namespace {

using Clock = Batcher::Clock;

// y = 2x + row-independent offset; counts forwards and the largest batch it saw.
class Probe : public nn::Module {
 public:
  Probe() : Module("Probe") {}
  Tensor forward(const Tensor& x) override {
    ++calls;
    int64_t n = x.size(0), prev = max_rows.load();
    while (n > prev && !max_rows.compare_exchange_weak(prev, n)) {
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    return x * 2 + 1;
  }
  std::atomic<int> calls{0};
  std::atomic<int64_t> max_rows{0};
  std::chrono::milliseconds delay{0};
};

Clock::time_point Far() { return Clock::now() + std::chrono::seconds(30); }

TEST(Batcher, ConcurrentRequestsShareForwardsAndGetTheirOwnRows) {
  auto probe = std::make_shared<Probe>();
  Batcher b(probe, {.enabled = true, .max_batch = 64, .max_delay = std::chrono::milliseconds(20)});
  constexpr int kClients = 16;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      const Tensor x = full({2, 3}, static_cast<double>(c));
      const Tensor y = b.run(x, Far()).value();
      if (!allclose(y, x * 2 + 1)) ++wrong;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_LT(probe->calls.load(), kClients);  // some requests ran together
  EXPECT_GT(probe->max_rows.load(), 2);
  EXPECT_EQ(b.stats().requests, kClients);
  EXPECT_EQ(b.stats().rows, 2 * kClients);
}

TEST(Batcher, DisabledRunsEachRequestAlone) {
  auto probe = std::make_shared<Probe>();
  Batcher b(probe, {.enabled = false});
  std::vector<std::thread> threads;
  for (int c = 0; c < 8; ++c) threads.emplace_back([&] { EXPECT_TRUE(b.run(ones({3, 2}), Far()).ok()); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(probe->calls.load(), 8);
  EXPECT_EQ(probe->max_rows.load(), 3);
}

TEST(Batcher, ARequestWhoseDeadlinePassedInTheQueueDoesNotRun) {
  auto probe = std::make_shared<Probe>();
  probe->delay = std::chrono::milliseconds(150);
  Batcher b(probe, {.enabled = false});
  std::thread busy([&] { EXPECT_TRUE(b.run(ones({1, 1}), Far()).ok()); });  // occupies the model
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const absl::Status st = b.run(ones({1, 1}), Clock::now() + std::chrono::milliseconds(20)).status();
  busy.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_EQ(probe->calls.load(), 1);
}

TEST(Batcher, AFullQueueAnswersUnavailable) {
  auto probe = std::make_shared<Probe>();
  probe->delay = std::chrono::milliseconds(200);
  Batcher b(probe, {.enabled = false, .max_queue = 1});
  std::thread first([&] { EXPECT_TRUE(b.run(ones({1, 1}), Far()).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));                 // first is running, queue empty
  std::thread second([&] { EXPECT_TRUE(b.run(ones({1, 1}), Far()).ok()); });  // queued
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const absl::Status st = b.run(ones({1, 1}), Far()).status();
  first.join();
  second.join();
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("queue is full"));
}

TEST(Batcher, CloseFailsQueuedRequestsWithUnavailable) {
  auto probe = std::make_shared<Probe>();
  probe->delay = std::chrono::milliseconds(200);
  auto b = std::make_unique<Batcher>(probe, BatchingOptions{.enabled = false});
  std::thread first([&] { EXPECT_TRUE(b->run(ones({1, 1}), Far()).ok()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::atomic<int> code{-1};
  std::thread queued([&] { code = static_cast<int>(b->run(ones({1, 1}), Far()).status().code()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  b->close();
  first.join();
  queued.join();
  EXPECT_EQ(code.load(), static_cast<int>(absl::StatusCode::kUnavailable));
}

}  // namespace
}  // namespace anvil::server
