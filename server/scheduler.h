// Jobs from submission to a terminal state: a FIFO-within-priority queue, placement on an
// idle worker whose device satisfies the spec, the workers' events turned into store updates
// and metric events, and the model registered when a job succeeds.
//
// Recovery (recover(), before serving): jobs that were RUNNING or INTERRUPTED when the
// process stopped go back to the queue and resume from their checkpoint; their stored
// metric events past the checkpoint's step are dropped first, since the resumed run replays
// those steps, so every step appears in the stream exactly once.
//
// Thread-safety: all public methods may be called from any thread; worker events arrive on
// the workers' threads and are handled without the scheduler's lock except to free a slot
// (the store and the registry are thread-safe), so a slow SQLite write or model load in one
// worker's event holds up neither submissions nor the other workers.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/util/mutex.h"
#include "server/artifacts/checkpoint_publisher.h"
#include "server/job_span.h"
#include "server/metrics/service_metrics.h"
#include "server/metrics_hub.h"
#include "server/model_registry.h"
#include "server/store.h"
#include "server/tensorboard/event_file.h"
#include "workers/worker.h"

namespace anvil::server {

struct SchedulerOptions {
  std::string data_root;            // absolute
  std::string datasets_dir;         // built-in dataset files
  int64_t max_pending_jobs = 1000;  // queued + running; beyond: RESOURCE_EXHAUSTED
  int64_t max_job_memory = 0;       // bytes per job (workers/job_memory.h); 0 = no limit
  int max_crash_resumes = 2;        // resumes of a job the server died under, before it FAILS
  // Retention of finished jobs (SUCCEEDED, FAILED, CANCELLED): beyond the newest
  // max_finished_jobs, or finished longer ago than job_retention, a job is deleted with its
  // metric history and files (models it registered stay). 0: no bound of that kind.
  int64_t max_finished_jobs = 10000;
  std::chrono::milliseconds job_retention{0};
  // How long a job's progress waits for a store that cannot be reached (store_retry.h) before
  // the event is given up: a PostgreSQL restart takes seconds.
  std::chrono::milliseconds store_outage_wait{std::chrono::seconds(60)};
  // Called (on the store watch's thread) with the notices the scheduler does not act on itself,
  // e.g. "model VERSION NAME"; must not block.
  std::function<void(std::string_view)> on_notice;
  // Replicas (docs/replicas.md): this one's instance id, the claimed jobs' lease (renewed every
  // third of it), how long past a lapse before another replica requeues the job, and how often
  // an idle replica looks for jobs submitted on the others.
  std::string instance = "anvild";
  std::chrono::milliseconds lease{std::chrono::seconds(15)};
  std::chrono::milliseconds lease_grace{std::chrono::seconds(2)};
  std::chrono::milliseconds poll_interval{std::chrono::seconds(1)};
  // The training doctor's STALLED: a job running here that has sent no event (no step, epoch,
  // checkpoint or finding) for this long gets one finding from the keeper (the job's own worker
  // thread is the one that is stuck). 0 turns the watchdog off.
  std::chrono::milliseconds stalled_after{std::chrono::minutes(30)};
  // Data-parallel jobs spread over replicas (job_span.h); rank_slots 0: every rank here.
  SpanSettings span;
};

using WorkerFactory = std::function<std::unique_ptr<workers::Worker>(workers::EventSink)>;

class Scheduler {
 public:
  // `metrics` may be null (no metrics address). `lease_store`, when given, is a second
  // connection to the same store for the keeper's lease renewals and claims, so that a call of
  // a worker's that waits on a cut network cannot hold up the renewal (or the self-fencing
  // that follows its failure); null: `store`.
  Scheduler(Store& store, MetricsHub& hub, ModelRegistry& registry, SchedulerOptions options,
            const std::vector<WorkerFactory>& workers, metrics::ServiceMetrics* metrics = nullptr,
            Store* lease_store = nullptr);
  ~Scheduler();

  std::vector<std::string> devices() const;

  // Requeues interrupted and running jobs (resuming from checkpoints) and queued ones.
  void recover();

  // Inserts (idempotently by client_job_id) and queues a validated spec: the stored row, and
  // whether it is new. UNAVAILABLE while draining, RESOURCE_EXHAUSTED over the job quota,
  // ALREADY_EXISTS for a client_job_id used with another spec; a store failure's status.
  struct Submitted {
    JobRow row;
    bool created = false;
  };
  absl::StatusOr<Submitted> submit(const v1::JobSpec& spec);
  // QUEUED: cancelled at once; RUNNING: the worker stops it (the state follows). NOT_FOUND;
  // FAILED_PRECONDITION when it already ended.
  absl::StatusOr<JobRow> cancel(const std::string& job_id);
  // Deletes a finished job: its row, its metric events, and its folder but the model archive it
  // registered. FAILED_PRECONDITION for a job that has not finished; NOT_FOUND.
  absl::Status delete_job(const std::string& job_id);
  // Applies the retention options; the number of jobs deleted. Run at start and after each job
  // ends.
  int64_t expire_finished_jobs();

  // The reason a failed job's row and stream give: the message, led by the kind of failure
  // (e.g. "DATA_LOSS: ...") unless that is the common INVALID_ARGUMENT (the engine refused
  // the job's content), with the server's directories scrubbed.
  static std::string failure_reason(const absl::Status& status, const std::vector<std::string>& roots);

  // Stops taking jobs and interrupts running ones (checkpoint, INTERRUPTED); waits up to
  // `timeout` for the workers to report.
  void drain(std::chrono::milliseconds timeout);

  // Converts a stored row to the API's Job.
  static v1::Job to_job(const JobRow& row);

 private:
  struct Slot {
    std::unique_ptr<workers::Worker> worker;
    std::string job_id;  // running on it, "" when idle
    int64_t epoch = 0;   // the lease epoch of its claim: every write of the run is fenced on it
    bool lost = false;   // its lease was lost: the run is being stopped and writes nothing more
    // A node of another replica's data-parallel job (job_span.h), not a job: job_id is then
    // part_run_id(), epoch the job's, and its end is recorded on the part only.
    std::optional<JobPart> part;
    // The STALLED watchdog: when the run's last event came (its start at first), and whether
    // its silence was reported.
    std::chrono::steady_clock::time_point last_event{};
    bool stalled_reported = false;
  };

  absl::StatusOr<Submitted> SubmitLocked(const v1::JobSpec& spec) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<JobRow> CancelLocked(const std::string& job_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A worker's event, by the job state machine's table (server/job_transitions.h); frees the
  // slot of a job that ended whatever else fails.
  void OnEvent(const workers::WorkerEvent& e);
  void HandleEvent(const workers::WorkerEvent& e, bool ends);
  void FreeSlotOf(const std::string& job_id) ABSL_LOCKS_EXCLUDED(mu_);
  void OnEventFenced(const workers::WorkerEvent& e, int64_t fence, std::chrono::milliseconds wait);
  // A write of this replica was refused by the fencing epoch: logged, counted, the run stopped.
  void Fenced(const std::string& job_id, int64_t epoch);
  // Claims jobs for the idle slots (through `via`, default the store) and starts them.
  void DispatchLocked(Store* via = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Claims a node of another replica's data-parallel job for the idle CPU slot and starts it.
  void StartPartLocked(Slot& slot, Store& claims) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records how a part's ranks ended and removes its folder.
  void EndPart(const JobPart& part, const workers::WorkerEvent& e, bool lost);
  // A job whose server stopped under it (RUNNING: died; INTERRUPTED: drained) back to the
  // queue, or FAILED by the crash-loop guard, or CANCELLED if a cancel was asked; fenced on the
  // epoch in `row`: false when another replica moved it first.
  bool RequeueStopped(JobRow row) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The keeper thread: renews this replica's leases, stops runs whose lease is lost or that
  // another replica asked to cancel, requeues jobs whose lease lapsed, and claims jobs
  // submitted elsewhere.
  void StartKeeper();
  void KeepLeases();
  void LoseLease(Slot& slot, const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IsRunningHere(const std::string& job_id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllSlotsIdle() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `outage_wait` > 0: waits that long for a store that cannot be reached (a worker's event);
  // 0: fails at once (a request's, which the client retries on UNAVAILABLE).
  // `fence` > 0: only while the job's lease epoch is that (StoreError kFenced otherwise).
  // `via`: the store to write through (default store_; the keeper uses its own connection).
  void Record(JobRow& row, v1::MetricEvent event, std::chrono::milliseconds outage_wait = {}, int64_t fence = 0,
              Store* via = nullptr);
  // STALLED (SchedulerOptions::stalled_after): one finding per silent run, from the keeper.
  void CheckStalledLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Store& store_;
  Store& lease_store_;
  MetricsHub& hub_;
  ModelRegistry& registry_;
  // Uploads the jobs' checkpoints to the artifact store off their workers' threads.
  std::unique_ptr<CheckpointPublisher> publisher_;
  const SchedulerOptions options_;
  metrics::ServiceMetrics* metrics_;
  void UpdateMetrics(const workers::WorkerEvent& e, const JobRow& row);
  // The job's TensorBoard curves (jobs/<id>/tensorboard/): a failure to write them is logged
  // and ends that job's file, never the job.
  void WriteTensorBoard(const workers::WorkerEvent& e, const JobRow& row);
  Mutex tensorboard_mu_;  // the map only: one job's events come from one worker thread
  std::map<std::string, std::unique_ptr<tensorboard::EventFile>> tensorboard_ ABSL_GUARDED_BY(tensorboard_mu_);
  // The queue, the slots (a slot's job is the one record of "busy") and the drain flag; clang's
  // -Wthread-safety checks every access (the clang builds: server/CMakeLists.txt).
  mutable Mutex mu_;
  std::condition_variable_any idle_cv_;  // a slot was freed
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point last_renewal_ ABSL_GUARDED_BY(mu_);
  std::condition_variable_any keeper_cv_;        // wakes the keeper: a cancel to pass on, the end
  bool renew_now_ ABSL_GUARDED_BY(mu_) = false;  // a notice of a cancel: renew (and learn of it) at once
  bool poked_ ABSL_GUARDED_BY(mu_) = false;      // a notice came: claim at once
  std::thread keeper_;
  // The store's change notices (PostgreSQL's NOTIFY): wake the keeper to claim a job submitted
  // elsewhere, or to pass on a cancel, without waiting for the next poll. Null on SQLite.
  std::unique_ptr<StoreWatch> watch_;
};

}  // namespace anvil::server
