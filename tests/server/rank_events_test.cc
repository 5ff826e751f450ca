// The lines a data-parallel rank sends anvild (workers/rank_events.h): a step's per-rank
// numbers and a doctor's finding come back as they went, and a bad severity is refused.
#include "workers/rank_events.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace anvil::workers {
namespace {

TEST(RankEvents, AStepsPerRankNumbersComeBackAsTheyWent) {
  WorkerEvent e;
  e.kind = WorkerEvent::Kind::kStep;
  e.job_id = "j1";
  e.step = 40;
  e.step_metrics.step = 40;
  e.step_metrics.loss = NAN;  // non-finite: written as null, read back as NaN
  e.step_metrics.rank_step_seconds = {0.031, 0.030};
  e.step_metrics.rank_data_wait = {0.01, 0.02};
  e.step_metrics.rank_compute_seconds = {0.004, 0.027};
  const WorkerEvent back = decode_rank_event(encode_rank_event(e));
  EXPECT_EQ(back.kind, WorkerEvent::Kind::kStep);
  EXPECT_EQ(back.step, 40);
  EXPECT_TRUE(std::isnan(back.step_metrics.loss));
  EXPECT_EQ(back.step_metrics.rank_step_seconds, e.step_metrics.rank_step_seconds);
  EXPECT_EQ(back.step_metrics.rank_data_wait, e.step_metrics.rank_data_wait);
  EXPECT_EQ(back.step_metrics.rank_compute_seconds, e.step_metrics.rank_compute_seconds);
}

TEST(RankEvents, AFindingComesBackWithItsEvidenceAndAdvice) {
  WorkerEvent e;
  e.kind = WorkerEvent::Kind::kFinding;
  e.job_id = "j1";
  e.finding.code = "STRAGGLER_RANK";
  e.finding.severity = train::Severity::kWarning;
  e.finding.first_step = 25;
  e.finding.last_step = 35;
  e.finding.evidence = {{"rank", 1}, {"compute_seconds", 0.027}, {"others_median_seconds", 0.004}};
  e.finding.advice = "rank 1 computes 6.8x longer";
  const std::string line = encode_rank_event(e);
  const WorkerEvent back = decode_rank_event(line);
  EXPECT_EQ(back.kind, WorkerEvent::Kind::kFinding);
  EXPECT_EQ(back.finding.code, "STRAGGLER_RANK");
  EXPECT_EQ(back.finding.severity, train::Severity::kWarning);
  EXPECT_EQ(back.finding.first_step, 25);
  EXPECT_EQ(back.finding.last_step, 35);
  EXPECT_EQ(back.finding.evidence, e.finding.evidence);
  EXPECT_EQ(back.finding.advice, e.finding.advice);

  std::string bad = line;
  const size_t at = bad.find("\"severity\":1");
  ASSERT_NE(at, std::string::npos) << line;
  bad.replace(at, 12, "\"severity\":7");
  EXPECT_THROW(decode_rank_event(bad), Error);
}

TEST(RankEvents, TheDoctorsCheckedRulesComeBackAndAnUnknownKindIsRefused) {
  WorkerEvent e;
  e.kind = WorkerEvent::Kind::kChecked;
  e.job_id = "j1";
  e.step = 40;
  e.checked = {"DATA_STALL", "STRAGGLER_RANK"};
  const std::string line = encode_rank_event(e);
  const WorkerEvent back = decode_rank_event(line);
  EXPECT_EQ(back.kind, WorkerEvent::Kind::kChecked);
  EXPECT_EQ(back.step, 40);
  EXPECT_EQ(back.checked, e.checked);

  std::string bad = line;
  const std::string kind = "\"kind\":" + std::to_string(static_cast<int>(WorkerEvent::Kind::kChecked));
  const size_t at = bad.find(kind);
  ASSERT_NE(at, std::string::npos) << line;
  bad.replace(at, kind.size(), "\"kind\":42");
  try {
    decode_rank_event(bad);
    ADD_FAILURE() << "did not throw";
  } catch (const Error& err) {
    EXPECT_THAT(std::string(err.what()), ::testing::HasSubstr("got 42"));
  }
}

}  // namespace
}  // namespace anvil::workers
