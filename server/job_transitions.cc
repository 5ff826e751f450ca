#include "server/job_transitions.h"

#include <absl/strings/str_cat.h>

#include <algorithm>

namespace anvil::server {
namespace {

using Kind = workers::WorkerEvent::Kind;

// A job's row is RUNNING once a worker claimed it (the store marks it); QUEUED or INTERRUPTED
// rows may still hear from a worker that took them before the row said so, or that fails or is
// stopped before its first step. A finished row (SUCCEEDED, FAILED, CANCELLED) hears nothing.
const std::vector<JobState> kBeforeOrRunning = {JobState::kQueued, JobState::kRunning, JobState::kInterrupted};
const std::vector<JobState> kRunningOnly = {JobState::kRunning};

}  // namespace

const std::vector<JobTransition>& job_transitions() {
  static const std::vector<JobTransition> table = {
      {Kind::kStarted, kBeforeOrRunning, JobState::kRunning, kTruncateEvents},
      {Kind::kStep, kRunningOnly, std::nullopt, kNoEffect},
      {Kind::kEpoch, kRunningOnly, std::nullopt, kNoEffect},
      {Kind::kCheckpoint, kRunningOnly, std::nullopt, kPublishCheckpoint},
      {Kind::kSucceeded, kRunningOnly, JobState::kSucceeded,
       kRegisterModel | kStampFinished | kExpireFinished | kFreeSlot},
      {Kind::kFailed, kBeforeOrRunning, JobState::kFailed, kStampFinished | kExpireFinished | kFreeSlot},
      {Kind::kCancelled, kBeforeOrRunning, JobState::kCancelled, kStampFinished | kExpireFinished | kFreeSlot},
      // The server stopped under the job: it resumes from its checkpoint on the next start.
      {Kind::kInterrupted, kBeforeOrRunning, JobState::kInterrupted, kReleaseLease | kFreeSlot},
      {Kind::kFinding, kRunningOnly, std::nullopt, kNoEffect},
      {Kind::kChecked, kRunningOnly, std::nullopt, kNoEffect},
  };
  return table;
}

const JobTransition& job_transition(Kind event) {
  // The table is in WorkerEvent::Kind's order (job_transitions_test checks it).
  return job_transitions()[static_cast<size_t>(event)];
}

absl::Status check_job_transition(JobState from, Kind event) {
  const JobTransition& t = job_transition(event);
  if (std::find(t.from.begin(), t.from.end(), from) != t.from.end()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat("a ", worker_event_name(event), " event for a ",
                                                    std::string(job_state_name(from)),
                                                    " job is not a transition of the job "
                                                    "state machine (server/job_transitions.h); ignored"));
}

std::string worker_event_name(Kind event) {
  switch (event) {
    case Kind::kStarted:
      return "STARTED";
    case Kind::kStep:
      return "STEP";
    case Kind::kEpoch:
      return "EPOCH";
    case Kind::kCheckpoint:
      return "CHECKPOINT";
    case Kind::kSucceeded:
      return "SUCCEEDED";
    case Kind::kFailed:
      return "FAILED";
    case Kind::kCancelled:
      return "CANCELLED";
    case Kind::kInterrupted:
      return "INTERRUPTED";
    case Kind::kFinding:
      return "FINDING";
    case Kind::kChecked:
      return "CHECKED";
  }
  return "UNKNOWN";
}

}  // namespace anvil::server
