// The job state machine's table (server/job_transitions.h), transition by transition: which
// worker events each state accepts, where each leaves the row, and the side effects named for
// each. The expected matrix is written out here, apart from the table it checks.
#include "server/job_transitions.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>

namespace anvil::server {
namespace {

using Kind = workers::WorkerEvent::Kind;
using ::testing::HasSubstr;

const std::vector<JobState> kStates = {JobState::kQueued, JobState::kRunning,   JobState::kSucceeded,
                                       JobState::kFailed, JobState::kCancelled, JobState::kInterrupted};
const std::vector<Kind> kKinds = {Kind::kStarted,   Kind::kStep,   Kind::kEpoch,     Kind::kCheckpoint,
                                  Kind::kSucceeded, Kind::kFailed, Kind::kCancelled, Kind::kInterrupted,
                                  Kind::kFinding,   Kind::kChecked};

TEST(JobTransitions, EveryEventKindHasOneRow) {
  std::set<Kind> seen;
  for (const JobTransition& t : job_transitions())
    EXPECT_TRUE(seen.insert(t.event).second) << worker_event_name(t.event);
  EXPECT_EQ(seen.size(), kKinds.size());
  for (Kind k : kKinds) EXPECT_EQ(job_transition(k).event, k);
}

TEST(JobTransitions, EachStateAcceptsTheEventsOfItsPlaceInALife) {
  // 'y': allowed. A finished job (SUCCEEDED, FAILED, CANCELLED) accepts nothing; progress
  // (steps, epochs, checkpoints, findings, doctor checks) and success come only while RUNNING; a start, a
  // failure, a cancel or an interruption may also reach a job still QUEUED or INTERRUPTED (its
  // worker took it before its row said so, or stopped before the first step).
  const std::map<Kind, std::string> allowed = {
      // states:              Q R S F C I
      {Kind::kStarted, "yy...y"},    {Kind::kStep, ".y...."},        {Kind::kEpoch, ".y...."},
      {Kind::kCheckpoint, ".y...."}, {Kind::kSucceeded, ".y...."},   {Kind::kFailed, "yy...y"},
      {Kind::kCancelled, "yy...y"},  {Kind::kInterrupted, "yy...y"}, {Kind::kFinding, ".y...."},
      {Kind::kChecked, ".y...."},
  };
  for (Kind k : kKinds) {
    for (size_t s = 0; s < kStates.size(); ++s) {
      const absl::Status st = check_job_transition(kStates[s], k);
      SCOPED_TRACE(worker_event_name(k) + " on " + std::string(job_state_name(kStates[s])));
      if (allowed.at(k)[s] == 'y') {
        EXPECT_TRUE(st.ok()) << st;
      } else {
        EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_THAT(std::string(st.message()),
                    HasSubstr("a " + worker_event_name(k) + " event for a " + std::string(job_state_name(kStates[s])) +
                              " job is not a transition"));
      }
    }
  }
}

TEST(JobTransitions, EachEventLeavesTheRowInItsStateWithItsEffects) {
  struct Expect {
    std::optional<JobState> to;
    unsigned effects;
  };
  const std::map<Kind, Expect> expected = {
      {Kind::kStarted, {JobState::kRunning, kTruncateEvents}},
      {Kind::kStep, {std::nullopt, kNoEffect}},
      {Kind::kEpoch, {std::nullopt, kNoEffect}},
      {Kind::kCheckpoint, {std::nullopt, kPublishCheckpoint}},
      {Kind::kFinding, {std::nullopt, kNoEffect}},
      {Kind::kChecked, {std::nullopt, kNoEffect}},
      {Kind::kSucceeded, {JobState::kSucceeded, kRegisterModel | kStampFinished | kExpireFinished | kFreeSlot}},
      {Kind::kFailed, {JobState::kFailed, kStampFinished | kExpireFinished | kFreeSlot}},
      {Kind::kCancelled, {JobState::kCancelled, kStampFinished | kExpireFinished | kFreeSlot}},
      // Not finished: it resumes on the next start, from any replica (the lease goes with it).
      {Kind::kInterrupted, {JobState::kInterrupted, kReleaseLease | kFreeSlot}},
  };
  for (Kind k : kKinds) {
    SCOPED_TRACE(worker_event_name(k));
    const JobTransition& t = job_transition(k);
    EXPECT_EQ(t.to, expected.at(k).to);
    EXPECT_EQ(t.effects, expected.at(k).effects);
    // A state a row is left in is one a finished job keeps, or one that hears more events.
    if (t.to && !is_terminal(*t.to)) {
      EXPECT_TRUE(check_job_transition(*t.to, Kind::kCancelled).ok());
    }
  }
}

}  // namespace
}  // namespace anvil::server
