// A worker owns one device and runs one training job at a time. Its boundary is a message
// interface — commands in (run, stop), events out through a sink — with no shared state, so a
// worker could move into a child process without the scheduler changing.
//
// Thread-safety: a Worker's methods may be called from any thread; its events come from its
// own thread.
#pragma once

#include <absl/status/status.h>
#include <absl/status/statusor.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/train/doctor.h"
#include "core/train/trainer.h"
#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::workers {

struct RunJob {
  std::string job_id;
  v1::JobSpec spec;           // validated
  std::string data_root;      // absolute
  std::string datasets_dir;   // built-in dataset files
  std::string job_dir;        // absolute: checkpoint and model archive go here
  bool resume = false;        // continue from job_dir's checkpoint when there is one
  int64_t memory_budget = 0;  // bytes the job may hold (estimated before it is built); 0 = no limit
  // Runs first, on the worker's thread (it may wait on a remote artifact store): brings the
  // job's checkpoint into job_dir and says whether to resume (replacing `resume`), with a note
  // for the job's RUNNING event when it had to take an older checkpoint. An error fails the
  // job with its status.
  struct Prepared {
    bool resume = false;
    std::string note;
  };
  std::function<absl::StatusOr<Prepared>()> prepare;
  std::string resume_note;  // set from prepare's note

  // A data-parallel job spread over replicas (docs/replicas.md): this worker runs node `node`
  // of `nnodes`, `nproc` ranks each, the ranks meeting through `rdzv_url` (the job store) under
  // `rdzv_id`. nnodes 1: every rank runs here (rank_group.h's single-node run).
  struct Span {
    int nnodes = 1, node = 0, nproc = 0;
    std::string rdzv_url, rdzv_id;
    std::string ifname = "lo";     // the interface the nodes' ranks reach each other on
    int first_attempt = 0;         // node > 0: the attempt it joins (it never restarts itself)
    int rendezvous_timeout_s = 0;  // how long ranks wait for the other nodes; 0 = the default
    // Node 0, before each attempt: opens the other nodes (throws when it cannot).
    std::function<void(int attempt)> open_attempt;
    // Node 0, polled while an attempt runs: why it cannot finish ("" = it can), e.g. a node's
    // replica stopped renewing its lease.
    std::function<std::string(int attempt)> trouble;
  };
  Span span;
};

struct WorkerEvent {
  enum class Kind {
    kStarted,
    kStep,
    kEpoch,
    kCheckpoint,
    kSucceeded,
    kFailed,
    kCancelled,
    kInterrupted,
    kFinding,
    kChecked
  };
  Kind kind = Kind::kStarted;
  std::string job_id;
  int64_t step = 0, epoch = 0, total_steps = 0;
  train::StepMetrics step_metrics;    // kStep
  train::EpochMetrics epoch_metrics;  // kEpoch
  train::Finding finding;             // kFinding: the training doctor's (core/train/doctor.h)
  std::vector<std::string> checked;   // kChecked: the doctor's rules checked for the first time
  absl::Status status;                // kFailed: why, with the kind of failure as its code
  std::string message;                // kStarted: the device; kCancelled, kSucceeded: a note
  std::string detail;                 // kStarted: how it resumed, when not from the newest checkpoint
  std::string path;                   // kCheckpoint: the checkpoint; kSucceeded: the model archive
  // kSucceeded with JobSpec.quantize: the int8 archive when it passed the accuracy gate ("" when
  // it did not; message says why).
  std::string quantized_path;
  // kSucceeded: what the registry needs.
  IntArray input_shape, output_shape;
  ScalarType input_dtype = kFloat32;
  std::vector<std::string> labels;
  int64_t parameters = 0;
  std::string spec_json;
};

using EventSink = std::function<void(const WorkerEvent&)>;

class Worker {
 public:
  virtual ~Worker() = default;
  virtual const std::string& device() const = 0;
  // False while a job runs: from run() until just before its terminal event is sent (a
  // worker is idle again before that event arrives, so the scheduler, which keeps the one
  // record of which worker is busy, may hand it the next job while handling the event).
  virtual bool idle() const = 0;
  // Starts a job; the worker must be idle. Events arrive on the sink from the worker's thread.
  virtual void run(RunJob job) = 0;
  // Stops the running job `job_id` (no-op for another id): kCancelled, or with `interrupt` a
  // checkpoint at the current step and kInterrupted (it resumes on the next start).
  virtual void stop(const std::string& job_id, bool interrupt) = 0;
  // Stops any job as by stop(.., true) and joins the thread.
  virtual void shutdown() = 0;
};

// Reads the worker's accelerator's utilisation now (0 to 1; nullopt when it cannot be read):
// the service's NVML reader for its GPU, handed to each job's trainer as
// TrainerOptions::device_utilisation (the doctor's LOW_DEVICE_UTILISATION). Called from the
// worker's thread.
using UtilisationSource = std::function<std::optional<double>()>;

// A worker for `device`: one thread; on the CPU jobs use the engine's intra-op pool, on a GPU
// the thread's own stream (and `utilisation`, when given, for the jobs' device utilisation).
std::unique_ptr<Worker> make_device_worker(Device device, EventSink sink, UtilisationSource utilisation = nullptr);

}  // namespace anvil::workers
