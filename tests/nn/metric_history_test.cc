// The bounded metric history: what it keeps is checked against the closed form of an even
// sample (group ordinals that are multiples of the stride), not against its own output.
#include "core/train/metric_history.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <vector>

namespace anvil::train {
namespace {

// One interval's group: three values at one step, as the Trainer records them.
void RecordGroup(MetricHistory& h, int64_t step) {
  h.record(step, "train_loss", 1.0 / static_cast<double>(step));
  h.record(step, "grad_norm", 2.0 * static_cast<double>(step));
  h.record(step, "lr", 0.1);
}

std::vector<int64_t> KeptSteps(const MetricHistory& h) {
  std::vector<int64_t> steps;
  for (const auto& p : h.points()) {
    if (steps.empty() || steps.back() != p.step) steps.push_back(p.step);
  }
  return steps;
}

TEST(MetricHistoryTest, KeepsEverythingUnderTheBound) {
  MetricHistory h(300);
  for (int64_t s = 1; s <= 100; ++s) RecordGroup(h, s);
  ASSERT_EQ(h.points().size(), 300u);
  EXPECT_EQ(h.stride(), 1);
  for (size_t i = 0; i < h.points().size(); ++i) EXPECT_EQ(h.points()[i].step, static_cast<int64_t>(i / 3) + 1);
}

TEST(MetricHistoryTest, AMillionStepsStayAnEvenSampleWithinTheBound) {
  MetricHistory h(300);
  const int64_t n = 1000000;
  size_t most = 0;
  for (int64_t s = 1; s <= n; ++s) {
    RecordGroup(h, s);
    most = std::max(most, h.points().size());
  }
  EXPECT_LE(most, 300u);
  EXPECT_GE(h.points().size(), 150u);  // at least half the bound stays in use
  // Closed form: the kept groups are the ordinals 0, stride, 2 stride, ... below n (step = ordinal + 1).
  std::vector<int64_t> expected;
  for (int64_t ordinal = 0; ordinal < n; ordinal += h.stride()) expected.push_back(ordinal + 1);
  EXPECT_EQ(KeptSteps(h), expected);
  EXPECT_EQ(h.stride() & (h.stride() - 1), 0) << "the stride doubles: a power of two";
  EXPECT_EQ(h.points().size(), 3 * expected.size()) << "groups are kept whole";
  for (const auto& p : h.points()) {
    if (p.name == "grad_norm") {
      EXPECT_EQ(p.value, 2.0 * static_cast<double>(p.step));  // values stay with their step
    }
  }
}

TEST(MetricHistoryTest, ValuesAtTheSameStepShareTheirGroupsFate) {
  // An epoch's validation values arrive after the interval's values at the same step.
  MetricHistory h(16);
  for (int64_t s = 1; s <= 500; ++s) {
    RecordGroup(h, s);
    if (s % 7 == 0) h.record(s, "val_loss", 0.5);
  }
  std::set<int64_t> kept;
  for (const auto& p : h.points()) kept.insert(p.step);
  for (const auto& p : h.points()) {
    if (p.name == "val_loss") {
      EXPECT_EQ(p.step % 7, 0);
    }
  }
  for (int64_t s : kept) {
    int names = 0;
    for (const auto& p : h.points()) names += p.step == s;
    EXPECT_EQ(names, s % 7 == 0 ? 4 : 3) << "step " << s << " kept partly";
  }
}

TEST(MetricHistoryTest, ARestoredHistoryContinuesTheSameSample) {
  MetricHistory full(40), first(40);
  for (int64_t s = 1; s <= 5000; ++s) RecordGroup(full, s);
  for (int64_t s = 1; s <= 1234; ++s) RecordGroup(first, s);
  MetricHistory resumed(40);
  resumed.restore(first.points(), first.stride(), first.pending());
  for (int64_t s = 1235; s <= 5000; ++s) RecordGroup(resumed, s);
  EXPECT_EQ(KeptSteps(resumed), KeptSteps(full));
  EXPECT_EQ(resumed.stride(), full.stride());
}

TEST(MetricHistoryTest, RestoringMoreThanTheBoundThinsIt) {
  MetricHistory big(1000);
  for (int64_t s = 1; s <= 300; ++s) RecordGroup(big, s);
  MetricHistory small(100);
  small.restore(big.points(), big.stride(), big.pending());
  EXPECT_LE(small.points().size(), 100u);
  EXPECT_GE(small.stride(), 4);
  EXPECT_EQ(KeptSteps(small).front(), 1);
}

}  // namespace
}  // namespace anvil::train
