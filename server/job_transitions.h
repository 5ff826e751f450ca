// The job state machine as a table: for each event a worker sends about a job, the states the
// job's row may be in when it arrives, the state it leaves the row in, and the side effects the
// scheduler performs for it, named. Scheduler::OnEvent follows the table: an event the table
// does not allow from the row's state (a step for a job already cancelled, a second success)
// is an error, logged and counted, and changes nothing, instead of overwriting a finished row.
// The transitions the service makes itself (submit -> QUEUED, a queued job cancelled, a
// crashed job requeued at start-up) are the scheduler's and the store's.
// Thread-safety: immutable data and pure functions.
#pragma once

#include <absl/status/status.h>

#include <optional>
#include <string>
#include <vector>

#include "server/store.h"
#include "workers/worker.h"

namespace anvil::server {

// What the scheduler does for an event besides writing the row and recording the event.
enum JobEffect : unsigned {
  kNoEffect = 0,
  kTruncateEvents = 1u << 0,     // a (re)start: the events after its step are dropped (a resume replays them)
  kRegisterModel = 1u << 1,      // the archive (and an int8 one) registered and served; FAILED if that fails
  kStampFinished = 1u << 2,      // finished_ms set: the job never runs again
  kReleaseLease = 1u << 3,       // the lease given up with the row: any replica may resume the job
  kExpireFinished = 1u << 4,     // the retention policy applied to finished jobs
  kFreeSlot = 1u << 5,           // the worker is free: the next queued job is placed
  kPublishCheckpoint = 1u << 6,  // the checkpoint published off this thread; no row change here
};

struct JobTransition {
  workers::WorkerEvent::Kind event;
  std::vector<JobState> from;  // the states the row may be in when the event arrives
  // The state the row is left in (unset: unchanged). kRegisterModel's event leaves FAILED
  // instead when the model cannot be registered.
  std::optional<JobState> to;
  unsigned effects = kNoEffect;
};

// Every worker event kind's row, in WorkerEvent::Kind's order.
const std::vector<JobTransition>& job_transitions();
const JobTransition& job_transition(workers::WorkerEvent::Kind event);

// OK when `event` may arrive for a row in `from`; FAILED_PRECONDITION naming both otherwise.
absl::Status check_job_transition(JobState from, workers::WorkerEvent::Kind event);

// "STARTED", "STEP", ...: an event kind as the log and the error name it.
std::string worker_event_name(workers::WorkerEvent::Kind event);

}  // namespace anvil::server
