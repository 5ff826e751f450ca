// The serving worker: model work sent to it runs on its own thread (the one that owns the
// device), replies carry the output or the module's error, the worker keeps serving after an
// error, and a batcher given the worker's runner runs every forward there. Also the engine's
// top-classes function the Predict handler converts.
#include "workers/serving_worker.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "core/anvil.h"
#include "core/models/serving.h"
#include "server/batcher.h"

namespace anvil::workers {
namespace {

// Records the threads its forward ran on; throws for an input whose first value is negative.
class ThreadProbe : public nn::Module {
 public:
  ThreadProbe() : Module("ThreadProbe") {}
  Tensor forward(const Tensor& x) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
      grad_enabled.push_back(GradMode::is_enabled());
    }
    if (x.numel() > 0 && x.reshape({-1})[0].item<float>() < 0) throw Error("negative input");
    return x * 3;
  }
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::vector<bool> grad_enabled;
};

TEST(ServingWorker, ForwardsRunOnTheWorkersThreadInInferenceMode) {
  ServingWorker worker(kCPU, ServingWorker::Mode::kOwnThread);
  auto probe = std::make_shared<ThreadProbe>();
  const Tensor y = worker.run(ForwardBatch{probe, tensor(std::vector<float>{1, 2})}).value();
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{3, 6}));
  ASSERT_EQ(probe->threads.size(), 1u);
  EXPECT_NE(*probe->threads.begin(), std::this_thread::get_id());
  EXPECT_FALSE(probe->grad_enabled.at(0));
  EXPECT_TRUE(worker.run(PlaceModule{probe}).ok());  // the CPU: a no-op move, still through the worker
  EXPECT_EQ(worker.stats().commands, 2);
}

// One budget for every batch in flight: an output still held (its reply not yet written)
// counts against the next forward, whichever model it runs; released, it no longer does.
TEST(ServingWorker, OneBudgetBoundsEveryBatchInFlight) {
  ServingWorker worker(kCPU, ServingWorker::Mode::kOwnThread);
  auto a = std::make_shared<ThreadProbe>();
  auto b = std::make_shared<ThreadProbe>();
  // 1 MiB of float32 per output; the budget holds one output and a bit more.
  const Tensor x = zeros({256, 1024});
  auto budget = std::make_shared<MemoryBudget>((1 << 20) + (1 << 19), "the Predicts in flight", "--max-predict-memory");
  absl::StatusOr<Tensor> first = worker.run(ForwardBatch{a, x, kFloat32, budget});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_GE(budget->live(), int64_t{1} << 20);  // the output, still held
  const absl::Status second = worker.run(ForwardBatch{b, x, kFloat32, budget}).status();
  EXPECT_EQ(second.code(), absl::StatusCode::kResourceExhausted) << second;
  EXPECT_THAT(std::string(second.message()), ::testing::HasSubstr("the Predicts in flight would hold more than"));
  first = Tensor();  // the first reply written
  EXPECT_EQ(budget->live(), 0);
  EXPECT_TRUE(worker.run(ForwardBatch{b, x, kFloat32, budget}).ok());
  // Separate budgets (the bound per batch it replaced) would have let both run at once.
  const absl::StatusOr<Tensor> held = worker.run(ForwardBatch{a, x, kFloat32, budget});
  EXPECT_TRUE(
      worker.run(ForwardBatch{b, x, kFloat32, std::make_shared<MemoryBudget>((1 << 20) + (1 << 19), "one batch")})
          .ok());
}

TEST(ServingWorker, AnErrorReachesTheCallerAndTheWorkerKeepsServing) {
  ServingWorker worker(kCPU, ServingWorker::Mode::kOwnThread);
  auto probe = std::make_shared<ThreadProbe>();
  // The engine's anvil::Error comes back as its status: the caller's input, INVALID_ARGUMENT.
  const absl::Status st = worker.run(ForwardBatch{probe, tensor(std::vector<float>{-1})}).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_THAT(std::string(st.message()), ::testing::HasSubstr("negative input"));
  EXPECT_EQ(worker.run(ForwardBatch{probe, tensor(std::vector<float>{2})})->to_vector<float>(),
            (std::vector<float>{6}));
}

TEST(ServingWorker, ConcurrentCallersEachGetTheirOwnReplyAndShutdownRefusesNewWork) {
  ServingWorker worker(kCPU, ServingWorker::Mode::kOwnThread);
  auto probe = std::make_shared<ThreadProbe>();
  std::atomic<int> right{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&, i] {
      for (int k = 0; k < 20; ++k) {
        const float v = static_cast<float>(i * 100 + k);
        if (worker.run(ForwardBatch{probe, tensor(std::vector<float>{v})})->to_vector<float>()[0] == 3 * v) ++right;
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(right.load(), 160);
  EXPECT_EQ(probe->threads.size(), 1u);  // all on the worker's one thread
  worker.shutdown();
  EXPECT_EQ(worker.run(ForwardBatch{probe, tensor(std::vector<float>{1})}).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(ServingWorker, ABatcherWithTheWorkersRunnerRunsEveryForwardThere) {
  auto worker = std::make_shared<ServingWorker>(kCPU, ServingWorker::Mode::kOwnThread);
  auto probe = std::make_shared<ThreadProbe>();
  server::Batcher b(probe, {.enabled = true, .max_batch = 16}, {},
                    [worker](const std::shared_ptr<nn::Module>& m, Tensor x) {
                      return worker->run(ForwardBatch{m, std::move(x)});
                    });
  std::vector<std::thread> callers;
  std::atomic<int> right{0};
  for (int i = 0; i < 4; ++i) {
    callers.emplace_back([&, i] {
      const Tensor y = b.run(tensor(std::vector<float>{static_cast<float>(i), 1.0f}, IntArray{2, 1}),
                             server::Batcher::Clock::now() + std::chrono::seconds(30))
                           .value();
      if (y.to_vector<float>() == std::vector<float>{3.0f * static_cast<float>(i), 3.0f}) ++right;
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(right.load(), 4);
  ASSERT_EQ(probe->threads.size(), 1u);
}

TEST(ServingWorker, OnTheCpuACommandRunsOnTheCallersThreadAndStillRefusesAfterShutdown) {
  ServingWorker worker(kCPU);
  EXPECT_FALSE(worker.own_thread());
  auto probe = std::make_shared<ThreadProbe>();
  EXPECT_EQ(worker.run(ForwardBatch{probe, tensor(std::vector<float>{2})})->to_vector<float>(),
            (std::vector<float>{6}));
  ASSERT_EQ(probe->threads.size(), 1u);
  EXPECT_EQ(*probe->threads.begin(), std::this_thread::get_id());
  EXPECT_FALSE(probe->grad_enabled.at(0));
  EXPECT_EQ(worker.run(ForwardBatch{probe, tensor(std::vector<float>{-1})}).status().code(),
            absl::StatusCode::kInvalidArgument);
  worker.shutdown();
  EXPECT_EQ(worker.run(ForwardBatch{probe, tensor(std::vector<float>{1})}).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST(TopClasses, AreTheSoftmaxsLargestProbabilitiesInOrder) {
  // Rows of logits with known softmax: log(p) for p = (0.1, 0.6, 0.3) and (0.5, 0.2, 0.3).
  const Tensor logits = tensor(
      std::vector<double>{std::log(0.1), std::log(0.6), std::log(0.3), std::log(0.5), std::log(0.2), std::log(0.3)},
      IntArray{2, 3});
  const models::TopClasses top = models::top_classes(logits, 2);
  EXPECT_EQ(top.classes.to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 0, 2}));
  const std::vector<float> p = top.probabilities.to_vector<float>();
  ASSERT_EQ(p.size(), 4u);
  EXPECT_NEAR(p[0], 0.6, 1e-6);
  EXPECT_NEAR(p[1], 0.3, 1e-6);
  EXPECT_NEAR(p[2], 0.5, 1e-6);
  EXPECT_NEAR(p[3], 0.3, 1e-6);
  EXPECT_EQ(top.probabilities.dtype(), kFloat32);
  EXPECT_EQ(models::top_classes(logits, 10).classes.size(1), 3);  // k clamped to the classes
  EXPECT_THROW(models::top_classes(tensor(std::vector<float>{1, 2}), 1), Error);
}

}  // namespace
}  // namespace anvil::workers
