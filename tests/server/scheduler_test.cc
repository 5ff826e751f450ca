// The scheduler against fake workers: queueing, priorities, placement, cancellation, worker
// failures, quotas and the drain, in milliseconds and without training anything. The fake
// records what the scheduler asks of it; the test plays the worker's events.
#include "server/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/util/file.h"
#include "server/artifacts/file_artifacts.h"
#include "server/artifacts/job_checkpoints.h"
#include "server/metrics/service_metrics.h"
#include "server/status.h"
#include "server/store_sqlite.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using workers::WorkerEvent;

// What a fake worker was asked to do, shared with the test (the scheduler owns the worker).
struct FakeLog {
  std::mutex mu;
  std::vector<std::string> runs;                    // job ids, in order
  std::vector<workers::RunJob> jobs;                // the same, whole
  std::vector<std::pair<std::string, bool>> stops;  // (job id, interrupt)
  bool busy = false;
  workers::EventSink sink;
};

class FakeWorker final : public workers::Worker {
 public:
  FakeWorker(std::string device, std::shared_ptr<FakeLog> log) : device_(std::move(device)), log_(std::move(log)) {}
  const std::string& device() const override { return device_; }
  bool idle() const override {
    std::lock_guard<std::mutex> lock(log_->mu);
    return !log_->busy;
  }
  void run(workers::RunJob job) override {  // called with the scheduler's lock held: record only
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->runs.push_back(job.job_id);
    log_->jobs.push_back(job);
    log_->busy = true;
  }
  void stop(const std::string& job_id, bool interrupt) override {
    std::lock_guard<std::mutex> lock(log_->mu);
    log_->stops.emplace_back(job_id, interrupt);
  }
  void shutdown() override {}

 private:
  std::string device_;
  std::shared_ptr<FakeLog> log_;
};

class SchedulerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) / ("scheduler-" + std::to_string(::getpid()) + "-" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
    store_ = std::make_unique<SqliteStore>((root_ / "anvil.db").string());
    registry_ = std::make_unique<ModelRegistry>(*store_, root_.string(), BatchingOptions{});
  }
  void TearDown() override {
    scheduler_.reset();
    registry_.reset();
    store_.reset();
    fs::remove_all(root_);
  }

  // A scheduler over fake workers on `devices`; logs_[i] is the i-th worker's.
  void Start(const std::vector<std::string>& devices, int64_t max_pending = 1000,
             metrics::ServiceMetrics* metrics = nullptr) {
    std::vector<WorkerFactory> factories;
    for (const std::string& d : devices) {
      auto log = std::make_shared<FakeLog>();
      logs_.push_back(log);
      factories.push_back([d, log](workers::EventSink sink) {
        log->sink = std::move(sink);
        return std::make_unique<FakeWorker>(d, log);
      });
    }
    SchedulerOptions o{root_.string(), (root_ / "datasets").string(), max_pending, 0, 2};
    scheduler_ = std::make_unique<Scheduler>(*store_, hub_, *registry_, o, factories, metrics);
    scheduler_->recover();
  }

  absl::StatusOr<Scheduler::Submitted> TrySubmit(const std::string& name, int64_t priority = 0,
                                                 const std::string& device = "cpu",
                                                 const std::string& client_job_id = "") {
    v1::JobSpec spec;
    spec.set_name(name);
    spec.set_priority(static_cast<int32_t>(priority));
    spec.set_device(device);
    spec.set_client_job_id(client_job_id);
    return scheduler_->submit(spec);
  }
  std::string Submit(const std::string& name, int64_t priority = 0, const std::string& device = "cpu",
                     const std::string& client_job_id = "") {
    return TrySubmit(name, priority, device, client_job_id).value().row.id;
  }

  // The worker's side: an event for `job` on worker `w` (from the test's thread, as a
  // worker's thread would send it).
  void Emit(size_t w, const std::string& job, WorkerEvent::Kind kind, const std::string& message = "",
            const std::string& path = "") {
    WorkerEvent e;
    e.kind = kind;
    e.job_id = job;
    e.path = path;
    e.message =
        kind == WorkerEvent::Kind::kStarted ? "fake-device-" + std::to_string(w) : message;  // started: the device
    // A failure as the engine reports most: its content refused (workers/status.h).
    if (kind == WorkerEvent::Kind::kFailed) e.status = absl::InvalidArgumentError(message);
    const bool ends = kind == WorkerEvent::Kind::kSucceeded || kind == WorkerEvent::Kind::kFailed ||
                      kind == WorkerEvent::Kind::kCancelled || kind == WorkerEvent::Kind::kInterrupted;
    if (ends) {
      std::lock_guard<std::mutex> lock(logs_[w]->mu);
      logs_[w]->busy = false;  // the real worker is idle before its terminal event is delivered
    }
    logs_[w]->sink(e);
  }

  std::vector<std::string> Runs(size_t w) {
    std::lock_guard<std::mutex> lock(logs_[w]->mu);
    return logs_[w]->runs;
  }
  JobState State(const std::string& id) { return store_->get_job(id)->state; }
  std::string Reason(const std::string& id) { return store_->get_job(id)->reason; }

  fs::path root_;
  std::unique_ptr<Store> store_;
  MetricsHub hub_;
  std::unique_ptr<ModelRegistry> registry_;
  std::vector<std::shared_ptr<FakeLog>> logs_;
  std::unique_ptr<Scheduler> scheduler_;
};

TEST_F(SchedulerTest, HigherPriorityRunsFirstAndEqualPrioritiesInSubmissionOrder) {
  Start({"cpu"});
  const std::string a = Submit("a");  // placed at once: the worker is idle
  const std::string b = Submit("b", 0), c = Submit("c", 5), d = Submit("d", 5), e = Submit("e", 1);
  EXPECT_THAT(Runs(0), ElementsAre(a));
  EXPECT_EQ(State(b), JobState::kQueued);
  for (const std::string& finished : {a, c, d, e}) {
    Emit(0, finished, WorkerEvent::Kind::kStarted);
    Emit(0, finished, WorkerEvent::Kind::kCancelled, "done");
  }
  EXPECT_THAT(Runs(0), ElementsAre(a, c, d, e, b));
}

TEST_F(SchedulerTest, JobsArePlacedOnAWorkerWhoseDeviceFits) {
  Start({"cpu", "cuda:0", "cuda:1"});
  const std::string g1 = Submit("g1", 0, "cuda");
  const std::string c1 = Submit("c1", 0, "cpu");
  const std::string g2 = Submit("g2", 0, "cuda:1");
  const std::string g3 = Submit("g3", 0, "cuda");   // both GPUs busy: waits
  const std::string any = Submit("any", 0, "any");  // every worker busy: waits
  EXPECT_THAT(Runs(0), ElementsAre(c1));
  EXPECT_THAT(Runs(1), ElementsAre(g1));
  EXPECT_THAT(Runs(2), ElementsAre(g2));
  EXPECT_EQ(State(g3), JobState::kQueued);
  Emit(0, c1, WorkerEvent::Kind::kFailed, "boom");  // the CPU frees: "any" fits it, g3 does not
  EXPECT_THAT(Runs(0), ElementsAre(c1, any));
  EXPECT_EQ(State(g3), JobState::kQueued);
  Emit(2, g2, WorkerEvent::Kind::kCancelled, "done");
  EXPECT_THAT(Runs(2), ElementsAre(g2, g3));
}

TEST_F(SchedulerTest, CancellingAQueuedJobEndsItWithoutRunningIt) {
  Start({"cpu"});
  const std::string a = Submit("a"), b = Submit("b");
  const JobRow row = scheduler_->cancel(b).value();
  EXPECT_EQ(row.state, JobState::kCancelled);
  EXPECT_EQ(State(b), JobState::kCancelled);
  EXPECT_THAT(Reason(b), HasSubstr("before it started"));
  Emit(0, a, WorkerEvent::Kind::kCancelled, "done");
  EXPECT_THAT(Runs(0), ElementsAre(a));  // b never ran
}

TEST_F(SchedulerTest, CancellingARunningJobAsksItsWorkerAndEndsOnTheWorkersWord) {
  Start({"cpu"});
  const std::string a = Submit("a");
  Emit(0, a, WorkerEvent::Kind::kStarted);
  EXPECT_EQ(State(a), JobState::kRunning);
  ASSERT_TRUE(scheduler_->cancel(a).ok());
  {
    std::lock_guard<std::mutex> lock(logs_[0]->mu);
    ASSERT_EQ(logs_[0]->stops.size(), 1u);
    EXPECT_EQ(logs_[0]->stops[0], std::make_pair(a, false));
  }
  EXPECT_EQ(State(a), JobState::kRunning);  // until the worker says it stopped
  Emit(0, a, WorkerEvent::Kind::kCancelled, "cancelled at step 3");
  EXPECT_EQ(State(a), JobState::kCancelled);
  EXPECT_EQ(Reason(a), "cancelled at step 3");
  // An ended job cannot be cancelled again.
  EXPECT_EQ(scheduler_->cancel(a).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(scheduler_->cancel("no-such-job").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(SchedulerTest, AFailedJobKeepsTheWorkersReasonAndFreesTheWorker) {
  Start({"cpu"});
  const std::string a = Submit("a"), b = Submit("b");
  Emit(0, a, WorkerEvent::Kind::kStarted);
  Emit(0, a, WorkerEvent::Kind::kFailed, "training loss became nan at step 7 (epoch 0)");
  EXPECT_EQ(State(a), JobState::kFailed);
  EXPECT_EQ(Reason(a), "training loss became nan at step 7 (epoch 0)");
  EXPECT_GT(store_->get_job(a)->finished_ms, 0);
  EXPECT_THAT(Runs(0), ElementsAre(a, b));
}

// The state machine's table (server/job_transitions.h) at work: a finished job's row is
// final, whatever a worker sends after its end (a late step, a second ending).
TEST_F(SchedulerTest, EventsAfterAJobEndedChangeNothing) {
  metrics::Registry registry;
  metrics::ServiceMetrics metrics(registry);
  Start({"cpu"}, 1000, &metrics);
  const std::string a = Submit("a");
  Emit(0, a, WorkerEvent::Kind::kStarted);
  Emit(0, a, WorkerEvent::Kind::kFailed, "training loss became nan at step 7 (epoch 0)");
  const JobRow ended = *store_->get_job(a);
  const size_t events = store_->metrics(a, 0).size();
  for (WorkerEvent::Kind late : {WorkerEvent::Kind::kStep, WorkerEvent::Kind::kStarted, WorkerEvent::Kind::kCancelled,
                                 WorkerEvent::Kind::kSucceeded}) {
    Emit(0, a, late, "late");
  }
  const JobRow after = *store_->get_job(a);
  EXPECT_EQ(after.state, JobState::kFailed);
  EXPECT_EQ(after.reason, ended.reason);
  EXPECT_EQ(after.finished_ms, ended.finished_ms);
  EXPECT_EQ(after.step, ended.step);
  EXPECT_EQ(store_->metrics(a, 0).size(), events);  // nothing recorded either
  // Each was an illegal transition, counted for the operators (logged too).
  EXPECT_EQ(metrics.illegal_job_transitions.Value(), 4.0);
  scheduler_.reset();  // before the metrics it writes to
}

TEST_F(SchedulerTest, AFailedJobsReasonNamesItsKindUnlessTheEngineRefusedItsContent) {
  Start({"cpu"});
  const std::string a = Submit("a"), b = Submit("b");
  Emit(0, a, WorkerEvent::Kind::kStarted);
  WorkerEvent failed;
  failed.kind = WorkerEvent::Kind::kFailed;
  failed.job_id = a;
  failed.status = absl::DataLossError("no checkpoint of this job verifies (" + root_.string() + "/jobs/x is bad)");
  {
    std::lock_guard<std::mutex> lock(logs_[0]->mu);
    logs_[0]->busy = false;
  }
  logs_[0]->sink(failed);
  EXPECT_EQ(State(a), JobState::kFailed);
  EXPECT_EQ(Reason(a), "DATA_LOSS: no checkpoint of this job verifies (<data>/jobs/x is bad)");
  EXPECT_EQ(Scheduler::failure_reason(absl::InvalidArgumentError("spec: bad"), {}), "spec: bad");
  EXPECT_EQ(Scheduler::failure_reason(absl::ResourceExhaustedError("out of memory"), {}),
            "RESOURCE_EXHAUSTED: out of memory");
  EXPECT_THAT(Runs(0), ElementsAre(a, b));  // the worker was freed for the next job
}

TEST_F(SchedulerTest, ASucceededJobWhoseArchiveCannotBeRegisteredFails) {
  Start({"cpu"});
  const std::string a = Submit("a");
  Emit(0, a, WorkerEvent::Kind::kSucceeded, "", (root_ / "jobs" / a / "model.anvil").string());  // never written
  EXPECT_EQ(State(a), JobState::kFailed);
  EXPECT_THAT(Reason(a), HasSubstr("registering the model failed"));
  EXPECT_THAT(Reason(a), ::testing::Not(HasSubstr(root_.string())));  // no server paths
}

TEST_F(SchedulerTest, TheQuotaCountsQueuedAndRunningJobsAndIdempotentRetriesPassIt) {
  Start({"cpu"}, /*max_pending=*/2);
  const std::string a = Submit("a", 0, "cpu", "client-a");
  Submit("b");
  const absl::Status third = TrySubmit("c").status();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted) << "a third pending job was accepted";
  EXPECT_THAT(std::string(third.message()), HasSubstr("2 queued or running jobs"));
  EXPECT_EQ(Submit("a", 0, "cpu", "client-a"), a);  // the same job, not a new one
  Emit(0, a, WorkerEvent::Kind::kCancelled, "done");
  EXPECT_TRUE(TrySubmit("c").ok());
}

TEST_F(SchedulerTest, TheDrainInterruptsRunningJobsAndRefusesNewOnes) {
  Start({"cpu", "cpu"});
  const std::string a = Submit("a"), b = Submit("b"), c = Submit("c");
  Emit(0, a, WorkerEvent::Kind::kStarted);
  Emit(1, b, WorkerEvent::Kind::kStarted);
  std::thread worker_side([&] {
    // The workers report their interruption while drain() waits.
    for (;;) {
      {
        std::lock_guard<std::mutex> l0(logs_[0]->mu);
        std::lock_guard<std::mutex> l1(logs_[1]->mu);
        if (!logs_[0]->stops.empty() && !logs_[1]->stops.empty()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    Emit(0, a, WorkerEvent::Kind::kInterrupted);
    Emit(1, b, WorkerEvent::Kind::kInterrupted);
  });
  scheduler_->drain(std::chrono::seconds(10));
  worker_side.join();
  EXPECT_EQ(logs_[0]->stops[0], std::make_pair(a, true));
  EXPECT_EQ(State(a), JobState::kInterrupted);
  EXPECT_EQ(State(b), JobState::kInterrupted);
  EXPECT_EQ(State(c), JobState::kQueued);  // not started during the drain
  EXPECT_THAT(Runs(0), ElementsAre(a));
  EXPECT_THAT(Runs(1), ElementsAre(b));
  EXPECT_EQ(TrySubmit("d").status().code(), absl::StatusCode::kUnavailable) << "a job was accepted during the drain";
}

TEST_F(SchedulerTest, EveryStateChangeIsOneOrderedEventInTheStore) {
  Start({"cpu"});
  const std::string a = Submit("a");
  Emit(0, a, WorkerEvent::Kind::kStarted);
  WorkerEvent step;
  step.kind = WorkerEvent::Kind::kStep;
  step.job_id = a;
  step.step = 10;
  step.step_metrics.loss = 0.25;
  logs_[0]->sink(step);
  Emit(0, a, WorkerEvent::Kind::kFailed, "out of data");
  std::vector<std::string> kinds;
  int64_t last_seq = 0;
  for (const MetricRow& m : store_->metrics(a, 0)) {
    EXPECT_GT(m.seq, last_seq);
    last_seq = m.seq;
    kinds.push_back(m.kind);
  }
  EXPECT_THAT(kinds, ElementsAre("state", "state", "step", "state"));  // QUEUED, RUNNING, step 10, FAILED
  EXPECT_EQ(store_->get_job(a)->step, 10);
}

}  // namespace
}  // namespace anvil::server

namespace anvil::server {
namespace {

// The artifact store behind the registry, with a switch that makes it unreachable.
class UnreachableArtifacts final : public ArtifactStore {
 public:
  explicit UnreachableArtifacts(const std::string& root) : inner_(root) {}
  std::atomic<bool> down{false};
  ArtifactInfo publish(const std::string& k, const std::string& p) override { return Check(), inner_.publish(k, p); }
  std::string open(const std::string& k, const std::string& c, const std::string& e) override {
    return Check(), inner_.open(k, c, e);
  }
  ArtifactInfo fetch_to(const std::string& k, const std::string& p) override { return Check(), inner_.fetch_to(k, p); }
  std::optional<ArtifactInfo> stat(const std::string& k) override { return Check(), inner_.stat(k); }
  std::vector<std::string> list(const std::string& p) override { return Check(), inner_.list(p); }
  void remove(const std::string& k) override { Check(), inner_.remove(k); }
  std::string describe() const override { return "unreachable test store"; }

 private:
  void Check() const {
    if (down) throw ArtifactError("nothing answers at the test endpoint", ArtifactError::Kind::kUnavailable);
  }
  FileArtifactStore inner_;
};

// A job whose checkpoint cannot be brought from an unreachable artifact store is not failed:
// after the outage wait it goes back to the queue (not counted as a crash, under a new lease
// epoch) and runs again, resuming from its checkpoint once the store answers.
TEST_F(SchedulerTest, AJobWhoseCheckpointIsOutOfReachGoesBackToTheQueue) {
  scheduler_.reset();
  UnreachableArtifacts artifacts(root_.string());
  registry_ =
      std::make_unique<ModelRegistry>(*store_, root_.string(), BatchingOptions{}, nullptr, 32, kCPU, &artifacts);
  // A job that ran before: its row names a published checkpoint.
  JobRow row;
  row.name = "resumes";
  row.spec_json = R"({"name":"resumes","device":"cpu"})";
  row.device = "cpu";
  row = store_->insert_job(row).first;
  fs::create_directories(root_ / "elsewhere");
  std::ofstream(root_ / "elsewhere" / "ckpt") << "checkpoint bytes";
  row.checkpoint = publish_checkpoint(artifacts, row.id, 1, 40, (root_ / "elsewhere" / "ckpt").string());
  row.state = JobState::kInterrupted;
  row.step = 40;
  store_->update_job(row);
  artifacts.down = true;
  std::vector<WorkerFactory> factories;
  auto log = std::make_shared<FakeLog>();
  logs_.push_back(log);
  factories.push_back([log](workers::EventSink sink) {
    log->sink = std::move(sink);
    return std::make_unique<FakeWorker>("cpu", log);
  });
  SchedulerOptions o{root_.string(), (root_ / "datasets").string(), 1000, 0, 2};
  o.store_outage_wait = std::chrono::milliseconds(200);
  scheduler_ = std::make_unique<Scheduler>(*store_, hub_, *registry_, o, factories);
  scheduler_->recover();
  workers::RunJob job;
  {
    std::lock_guard<std::mutex> lock(log->mu);
    ASSERT_EQ(log->jobs.size(), 1u);
    job = log->jobs[0];
  }
  ASSERT_TRUE(job.prepare);
  const int64_t epoch = store_->get_job(row.id)->lease_epoch;
  const absl::StatusOr<workers::RunJob::Prepared> failed = job.prepare();  // as the worker's thread would
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(failed.status().message()), HasSubstr("nothing answers at the test endpoint"));
  WorkerEvent e;
  e.kind = WorkerEvent::Kind::kFailed;
  e.job_id = row.id;
  e.status = failed.status();
  {
    std::lock_guard<std::mutex> lock(log->mu);
    log->busy = false;
  }
  log->sink(e);
  const JobRow after = *store_->get_job(row.id);
  EXPECT_NE(after.state, JobState::kFailed);
  EXPECT_EQ(after.crashes, 0);
  EXPECT_GT(after.lease_epoch, epoch);
  // Placed again at once (this replica is idle), and once the store answers, it resumes.
  {
    std::lock_guard<std::mutex> lock(log->mu);
    ASSERT_EQ(log->jobs.size(), 2u);
    job = log->jobs[1];
  }
  artifacts.down = false;
  const absl::StatusOr<workers::RunJob::Prepared> ready = job.prepare();
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_TRUE(ready->resume);
  EXPECT_EQ(ready->note, "");
  EXPECT_EQ(read_file((root_ / "jobs" / row.id / "checkpoint.safetensors").string()), "checkpoint bytes");
  scheduler_.reset();
}

}  // namespace
}  // namespace anvil::server
