// Learning-rate schedules: step-by-step values against recurrences or landmarks of the
// published schedules, resumption by set_step, and ReduceLROnPlateau's state machine.
#include "core/optim/scheduler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/anvil.h"

namespace anvil::optim {
namespace {

struct Fixture {
  Tensor p = zeros({1}).requires_grad_();
  SGD opt{std::vector<Tensor>{p}, Options{{"lr", 0.5}}};
};

std::vector<double> Trace(LRScheduler& s, Optimizer& opt, int steps) {
  std::vector<double> out{opt.lr()};
  for (int i = 0; i < steps; ++i) {
    s.step();
    out.push_back(opt.lr());
  }
  return out;
}

TEST(SchedulerTest, StepMultiStepExponentialFollowTheirRecurrences) {
  {
    Fixture f;
    StepLR s(f.opt, 3, 0.5);
    const auto lr = Trace(s, f.opt, 9);
    double expected = 0.5;
    for (int t = 0; t <= 9; ++t) {
      if (t > 0 && t % 3 == 0) expected *= 0.5;  // decays exactly at multiples of step_size
      EXPECT_DOUBLE_EQ(lr[static_cast<size_t>(t)], expected) << t;
    }
  }
  {
    Fixture f;
    MultiStepLR s(f.opt, {2, 5}, 0.1);
    const auto lr = Trace(s, f.opt, 6);
    EXPECT_DOUBLE_EQ(lr[1], 0.5);
    EXPECT_NEAR(lr[2], 0.05, 1e-15);
    EXPECT_NEAR(lr[4], 0.05, 1e-15);
    EXPECT_NEAR(lr[5], 0.005, 1e-15);
  }
  {
    Fixture f;
    ExponentialLR s(f.opt, 0.9);
    const auto lr = Trace(s, f.opt, 5);
    for (size_t t = 1; t < lr.size(); ++t) EXPECT_NEAR(lr[t], lr[t - 1] * 0.9, 1e-15);
  }
}

TEST(SchedulerTest, GetLastLrIsTheRateTheLastStepSet) {
  Fixture f;
  StepLR s(f.opt, 2, 0.1);
  EXPECT_EQ(s.get_last_lr(), std::vector<double>{0.5});  // the base rate before any step
  for (int t = 1; t <= 5; ++t) {
    s.step();
    ASSERT_EQ(s.get_last_lr().size(), 1u);
    EXPECT_NEAR(s.get_last_lr()[0], 0.5 * std::pow(0.1, t / 2), 1e-15) << t;
    EXPECT_EQ(s.get_last_lr()[0], f.opt.lr()) << t;
  }
}

TEST(SchedulerTest, CosineWarmupAndOneCycleLandmarks) {
  {
    Fixture f;
    CosineAnnealingLR s(f.opt, 10, 0.1);
    const auto lr = Trace(s, f.opt, 10);
    EXPECT_DOUBLE_EQ(lr[0], 0.5);
    EXPECT_NEAR(lr[5], (0.5 + 0.1) / 2, 1e-15);  // half way: the mean of the ends
    EXPECT_NEAR(lr[10], 0.1, 1e-15);
    for (size_t t = 1; t < lr.size(); ++t) EXPECT_LT(lr[t], lr[t - 1]);
  }
  {
    Fixture f;
    WarmupCosineLR s(f.opt, 4, 14, 0.0);
    const auto lr = Trace(s, f.opt, 16);
    EXPECT_NEAR(lr[0], 0.5 / 4, 1e-15);
    EXPECT_NEAR(lr[3], 0.5, 1e-15);
    EXPECT_NEAR(lr[4], 0.5, 1e-15);
    EXPECT_NEAR(lr[9], 0.25, 1e-15);
    EXPECT_NEAR(lr[14], 0.0, 1e-15);
    EXPECT_NEAR(lr[16], 0.0, 1e-15);
  }
  {
    Fixture f;
    OneCycleLR s(f.opt, 1.0, 100, 0.3, 25.0, 1e4);
    const auto lr = Trace(s, f.opt, 99);
    EXPECT_NEAR(lr[0], 1.0 / 25, 1e-15);
    EXPECT_NEAR(lr[29], 1.0, 1e-15);  // the peak at pct_start * total - 1
    EXPECT_NEAR(lr[99], 1.0 / 25 / 1e4, 1e-15);
    EXPECT_EQ(std::max_element(lr.begin(), lr.end()) - lr.begin(), 29);
  }
}

TEST(SchedulerTest, SetStepResumesExactly) {
  Fixture a, b;
  CosineAnnealingLR sa(a.opt, 20), sb(b.opt, 20);
  for (int i = 0; i < 13; ++i) sa.step();
  sb.set_step(13);
  EXPECT_DOUBLE_EQ(a.opt.lr(), b.opt.lr());
  sa.step();
  sb.step();
  EXPECT_DOUBLE_EQ(a.opt.lr(), b.opt.lr());
}

TEST(SchedulerTest, ReduceOnPlateauWaitsPatienceThenCoolsDown) {
  Fixture f;
  ReduceLROnPlateau s(f.opt, ReduceLROnPlateau::Mode::kMin, 0.5, /*patience=*/2, 1e-4, /*cooldown=*/1);
  EXPECT_FALSE(s.step(1.0));
  EXPECT_FALSE(s.step(0.9));   // improved
  EXPECT_FALSE(s.step(0.95));  // bad 1
  EXPECT_FALSE(s.step(0.9));   // bad 2 (equal is not an improvement)
  EXPECT_TRUE(s.step(0.91));   // bad 3 > patience: halve
  EXPECT_DOUBLE_EQ(f.opt.lr(), 0.25);
  EXPECT_FALSE(s.step(1.0));  // cooldown: not counted
  EXPECT_FALSE(s.step(1.0));
  EXPECT_FALSE(s.step(1.0));
  EXPECT_TRUE(s.step(1.0));
  EXPECT_DOUBLE_EQ(f.opt.lr(), 0.125);
  EXPECT_DOUBLE_EQ(s.best(), 0.9);
}

}  // namespace
}  // namespace anvil::optim
