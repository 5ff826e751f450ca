// The heavy calls (dry runs, ONNX exports, quantizations, uploads) wait for the server's work
// pool without holding a thread of the call pool: the cheap calls keep answering while they
// queue (server/heavy_work.h).
#include "server/heavy_work.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "core/util/fault_point.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "tests/server/server_fixture.h"

namespace anvil::server {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

// The bound on a cheap call while heavy ones queue. Sanitized builds run several times slower.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr auto kCheapCallBound = std::chrono::milliseconds(500);
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr auto kCheapCallBound = std::chrono::milliseconds(500);
#else
constexpr auto kCheapCallBound = std::chrono::milliseconds(100);
#endif
#else
constexpr auto kCheapCallBound = std::chrono::milliseconds(100);
#endif

// How long a client waits before it leaves a heavy call that the slow fault point delays by a
// second: long enough for the call to reach the work pool's first check (sanitized builds run
// the handler several times slower), short of the second.
constexpr auto kClientLeavesAfter = kCheapCallBound > std::chrono::milliseconds(100) ? std::chrono::milliseconds(700)
                                                                                     : std::chrono::milliseconds(300);

class HeavyWorkTest : public ServerFixture {
 protected:
  void TearDown() override {
    set_fault_point("");
    ServerFixture::TearDown();
  }
  // A server whose call pool has 2 threads and whose work pool runs 2 jobs at once.
  void StartSmall(int heavy_queue = 64) {
    Stop();
    ServerOptions o;
    o.limits.max_concurrent_calls = 2;
    o.limits.max_concurrent_heavy_work = 2;
    o.limits.max_heavy_work_queue = heavy_queue;
    Start(o);
  }
  // Ten rounds of ListJobs and Health.Check, 100 ms apart, while heavy calls queue: each
  // answers within kCheapCallBound, and ListJobs lists `jobs` jobs.
  void ExpectCheapCallsAnswer(int jobs) {
    auto health = grpc::health::v1::Health::NewStub(channel_);
    Clock::duration slowest_list{}, slowest_health{};
    for (int round = 0; round < 10; ++round) {
      Clock::time_point t0 = Clock::now();
      {
        grpc::ClientContext ctx;
        v1::ListJobsResponse listed;
        ASSERT_TRUE(training_->ListJobs(&ctx, v1::ListJobsRequest(), &listed).ok());
        EXPECT_EQ(listed.jobs_size(), jobs);
      }
      slowest_list = std::max(slowest_list, Clock::now() - t0);
      t0 = Clock::now();
      {
        grpc::ClientContext ctx;
        grpc::health::v1::HealthCheckResponse h;
        ASSERT_TRUE(health->Check(&ctx, grpc::health::v1::HealthCheckRequest(), &h).ok());
      }
      slowest_health = std::max(slowest_health, Clock::now() - t0);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    using std::chrono::duration_cast;
    using std::chrono::milliseconds;
    EXPECT_LT(slowest_list, kCheapCallBound) << duration_cast<milliseconds>(slowest_list).count() << " ms";
    EXPECT_LT(slowest_health, kCheapCallBound) << duration_cast<milliseconds>(slowest_health).count() << " ms";
  }
  grpc::Status DryRun(v1::SubmitJobResponse* resp, std::chrono::milliseconds deadline = std::chrono::seconds(120)) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + deadline);
    v1::SubmitJobRequest req;
    *req.mutable_spec() = BlobsSpec(1);
    req.set_dry_run(true);
    return training_->SubmitJob(&ctx, req, resp);
  }
};

TEST_F(HeavyWorkTest, SlowExportsAndDryRunsLeaveListJobsAndHealthAnswering) {
  StartSmall();
  Stream(Submit(BlobsSpec(1)).id());        // a model to export
  set_fault_point("heavy_work:slow=fire");  // each heavy job takes a second from here on

  constexpr int kEach = 8;
  std::vector<grpc::Status> export_status(kEach), dry_run_status(kEach);
  std::vector<std::string> exported(kEach);
  std::vector<v1::SubmitJobResponse> dry_runs(kEach);
  std::vector<std::thread> heavy;
  for (int i = 0; i < kEach; ++i) {
    heavy.emplace_back([&, i] {
      std::string sha;
      int64_t total = 0;
      exported[i] = Export("blobs-mlp", v1::ONNX, &export_status[i], &sha, &total);
    });
    heavy.emplace_back([&, i] { dry_run_status[i] = DryRun(&dry_runs[i]); });
  }
  // 16 jobs of a second, two at a time: the work pool is busy for 8 s. Meanwhile every cheap
  // call answers within the bound (on the old path, dry runs took the call pool's 2 threads
  // and ListJobs waited seconds).
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ExpectCheapCallsAnswer(1);  // dry runs queue nothing

  for (std::thread& t : heavy) t.join();
  for (int i = 0; i < kEach; ++i) {
    // Queued, not refused, and each did its work.
    EXPECT_TRUE(export_status[i].ok()) << export_status[i].error_message();
    EXPECT_GT(exported[i].size(), 100u);
    EXPECT_TRUE(dry_run_status[i].ok()) << dry_run_status[i].error_message();
    EXPECT_FALSE(dry_runs[i].created());
    EXPECT_EQ(dry_runs[i].job().spec().name(), "blobs-mlp");
  }
}

// The same for the other heavy calls: quantizations of a served model (calibrated on its
// training job's data) and model uploads (RegisterModel's conversion and trial forward).
TEST_F(HeavyWorkTest, SlowQuantizationsAndUploadsLeaveListJobsAndHealthAnswering) {
  StartSmall();
  Stream(Submit(BlobsSpec(1)).id());  // a model to quantize, and its ONNX file to upload
  grpc::Status st;
  std::string sha;
  int64_t total = 0;
  const std::string onnx = Export("blobs-mlp", v1::ONNX, &st, &sha, &total);
  ASSERT_TRUE(st.ok()) << st.error_message();
  set_fault_point("heavy_work:slow=fire");

  constexpr int kEach = 4;
  std::vector<grpc::Status> quantized(kEach), uploaded(kEach);
  std::vector<v1::QuantizeResponse> replies(kEach);
  std::vector<v1::Model> models(kEach);
  std::vector<std::thread> heavy;
  for (int i = 0; i < kEach; ++i) {
    heavy.emplace_back([&, i] {
      grpc::ClientContext ctx;
      v1::QuantizeRequest req;
      req.set_model("blobs-mlp");
      req.set_version("1");
      req.mutable_spec()->set_mode("dynamic");
      req.mutable_spec()->set_max_accuracy_drop(100);
      quantized[i] = serving_->Quantize(&ctx, req, &replies[i]);
    });
    heavy.emplace_back([&, i] { uploaded[i] = RegisterModel("upload-" + std::to_string(i), onnx, &models[i]); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ExpectCheapCallsAnswer(1);
  for (std::thread& t : heavy) t.join();
  for (int i = 0; i < kEach; ++i) {
    EXPECT_TRUE(quantized[i].ok()) << quantized[i].error_message();
    EXPECT_TRUE(replies[i].registered()) << replies[i].message();
    EXPECT_EQ(replies[i].model().precision(), "int8");
    EXPECT_TRUE(uploaded[i].ok()) << uploaded[i].error_message();
    EXPECT_EQ(models[i].name(), "upload-" + std::to_string(i));
  }
}

TEST_F(HeavyWorkTest, AFullWorkPoolRefusesAndAQueuedCallEndsAtItsDeadline) {
  StartSmall(/*heavy_queue=*/1);
  set_fault_point("heavy_work:slow=fire");
  // Two run, one waits: three dry runs fill the pool. The last is the one whose client gives
  // up after 300 ms, while it still waits.
  std::vector<grpc::Status> status(3);
  std::vector<std::thread> calls;
  for (int i = 0; i < 2; ++i) {
    calls.emplace_back([&, i] {
      v1::SubmitJobResponse resp;
      status[i] = DryRun(&resp);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  calls.emplace_back([&] {
    v1::SubmitJobResponse resp;
    status[2] = DryRun(&resp, std::chrono::milliseconds(300));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // A fourth finds no room: refused at once, naming the bound.
  v1::SubmitJobResponse resp;
  const grpc::Status full = DryRun(&resp);
  EXPECT_EQ(full.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << full.error_message();
  EXPECT_THAT(full.error_message(), HasSubstr("too many heavy calls"));
  EXPECT_THAT(full.error_message(), HasSubstr("2 running and 1 queued"));
  for (std::thread& t : calls) t.join();
  EXPECT_TRUE(status[0].ok()) << status[0].error_message();
  EXPECT_TRUE(status[1].ok()) << status[1].error_message();
  EXPECT_EQ(status[2].error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  // The pool is free again, and serves.
  set_fault_point("");
  EXPECT_TRUE(DryRun(&resp).ok());
}

// A client that leaves while its heavy call runs stops the work at its next phase: the dry
// run after its data (its model is not built), the verified export after its capture (it is
// not verified). Each is counted as abandoned while running, none while queued.
TEST_F(HeavyWorkTest, AClientThatLeavesDuringTheWorkStopsItAtItsNextPhase) {
  StartSmall();
  Stream(Submit(BlobsSpec(1)).id());        // a model to export
  set_fault_point("heavy_work:slow=fire");  // each heavy job starts a second late: the client leaves first
  const std::string running = "anvil_heavy_work_abandoned_total{when=\"running\"}";
  const std::string queued = "anvil_heavy_work_abandoned_total{when=\"queued\"}";
  const double running_before = MetricValue(running), queued_before = MetricValue(queued);

  v1::SubmitJobResponse resp;
  EXPECT_EQ(DryRun(&resp, kClientLeavesAfter).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(running) == running_before + 1; }, std::chrono::seconds(30)));

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + kClientLeavesAfter);
  v1::ExportRequest req;
  req.set_model("blobs-mlp");
  req.set_format(v1::ONNX);
  req.set_verify(true);
  auto reader = serving_->Export(&ctx, req);
  v1::ExportChunk chunk;
  EXPECT_FALSE(reader->Read(&chunk));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(WaitUntil([&] { return MetricValue(running) == running_before + 2; }, std::chrono::seconds(30)));
  EXPECT_EQ(MetricValue(queued), queued_before);

  // A client that stays gets the whole work, verified.
  set_fault_point("");
  grpc::Status status;
  std::string sha, verification;
  int64_t total = 0;
  EXPECT_GT(Export("blobs-mlp", v1::ONNX, &status, &sha, &total, 0, {}, /*verify=*/true, &verification).size(), 100u);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(verification, HasSubstr("max |error|"));
  EXPECT_TRUE(DryRun(&resp).ok());
  EXPECT_EQ(MetricValue(running), running_before + 2);
}

}  // namespace
}  // namespace anvil::server
