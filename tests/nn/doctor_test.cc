// The training doctor's rules (core/train/doctor.h): each fires on a metric stream or first
// batch that shows its problem, with the evidence, and stays quiet on a healthy twin; then
// real training runs with provoked faults over five seeds.
#include "core/train/doctor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <set>
#include <thread>

#include "core/anvil.h"
#include "core/backend/cuda/caching_allocator.h"
#include "core/nn/nn.h"
#include "core/optim/scheduler.h"
#include "tests/core/fake_device_memory.h"
#include "tests/nn/digits_recipe.h"

namespace anvil::train {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> Codes(const std::vector<Finding>& fs) {
  std::vector<std::string> out;
  for (const Finding& f : fs) out.push_back(f.code);
  return out;
}

double Evidence(const Finding& f, const std::string& name) {
  for (const auto& [k, v] : f.evidence)
    if (k == name) return v;
  ADD_FAILURE() << f.code << " has no evidence '" << name << "'";
  return std::nan("");
}

// A healthy run: loss falling smoothly, steady grad norm, little data wait.
StepMetrics Healthy(int64_t i) {
  StepMetrics m;
  m.step = 10 * (i + 1);
  m.loss = 2.0 * std::exp(-0.05 * static_cast<double>(i)) + 0.1;
  m.grad_norm = 1.0 + 0.05 * std::sin(static_cast<double>(i));
  m.lr = 1e-3;
  m.data_wait_ratio = 0.01;
  m.step_seconds = 0.01;
  m.samples_per_second = 6400;
  m.update_ratio = 1e-3;
  return m;
}

std::vector<Finding> Feed(Doctor& d, int64_t intervals, const std::function<void(StepMetrics&, int64_t)>& change) {
  std::vector<Finding> all;
  for (int64_t i = 0; i < intervals; ++i) {
    StepMetrics m = Healthy(i);
    change(m, i);
    for (Finding& f : d.on_step(m)) all.push_back(std::move(f));
  }
  return all;
}

// A healthy model run through `around` (a fault wrapped around it: a sleep, a host read).
struct Around : nn::Module {
  std::shared_ptr<nn::Module> inner;
  std::function<Tensor(nn::Module&, const Tensor&)> around;
  Around(std::shared_ptr<nn::Module> m, std::function<Tensor(nn::Module&, const Tensor&)> f)
      : nn::Module("Around"), around(std::move(f)) {
    inner = register_module("inner", std::move(m));
  }
  Tensor forward(const Tensor& x) override { return around(*inner, x); }
};

// Trains `model` with SGD on x, the sign of its first column as the class, under a doctor;
// `seen` is shown every interval's metrics. The codes that fired, in order.
struct DoctorRun {
  double lr = 0.05;
  int64_t batch = 8, epochs = 3, metric_interval = 2;
  DoctorOptions options = {};
};
std::vector<std::string> TrainUnderDoctor(const std::shared_ptr<nn::Module>& model, const Tensor& x, const DoctorRun& r,
                                          const std::function<void(const StepMetrics&)>& seen = {}) {
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", r.lr}});
  Trainer t(model, opt,
            {.epochs = r.epochs,
             .metric_interval = r.metric_interval,
             .activation_sample_intervals = 1,
             .checkpoint_every_epoch = false});
  data::DataLoader train(std::make_shared<data::TensorDataset>(x, (x.select(1, 0) > 0).to(kInt64)),
                         {.batch_size = r.batch});
  Doctor doctor({.loader_workers = 0, .batch_size = r.batch, .loss = "cross_entropy"}, r.options);
  std::vector<Finding> found;
  t.set_callbacks({.on_step =
                       [&](const StepMetrics& m) {
                         if (seen) seen(m);
                         for (Finding& f : doctor.on_step(m)) found.push_back(f);
                       },
                   .on_epoch = {},
                   .on_checkpoint = {}});
  t.fit(train);
  return Codes(found);
}

TEST(Doctor, AHealthyRunIsQuiet) {
  Doctor d({.loader_workers = 2, .batch_size = 64, .loss = "cross_entropy"});
  EXPECT_TRUE(Feed(d, 40, [](StepMetrics&, int64_t) {}).empty());
  EXPECT_TRUE(d.check_first_batch(randn({8, 1, 8, 8}), randint(0, 10, {8})).empty());
  for (int64_t e = 0; e < 6; ++e) {
    EpochMetrics m{e, 100 * e, 1.0 / (1 + e), 1.1 / (1 + e), 0.9, true};
    EXPECT_TRUE(d.on_epoch(m).empty());
  }
}

// Every threshold by name (JobSpec.doctor.thresholds): the table covers every DoctorOptions
// field (all of them 8 bytes: a field added without its row fails here), each name takes a
// value in its range, a changed threshold changes what fires, and a bad name or value is
// refused with what was expected.
TEST(DoctorOptionsByName, EveryThresholdIsSetByNameWithinItsRange) {
  EXPECT_EQ(doctor_option_names().size() * 8, sizeof(DoctorOptions));
  // Each name writes its own field: one 8-byte slot changes, a different one for every name.
  std::set<size_t> slots;
  for (const std::string& name : doctor_option_names()) {
    std::vector<size_t> changed;
    for (const double v : {1.0, 0.0}) {
      const DoctorOptions before;
      DoctorOptions after;
      ASSERT_EQ(set_doctor_option(after, name, v), "") << name;
      const auto* a = reinterpret_cast<const unsigned char*>(&before);
      const auto* b = reinterpret_cast<const unsigned char*>(&after);
      for (size_t slot = 0; slot < sizeof(DoctorOptions) / 8; ++slot)
        if (std::memcmp(a + 8 * slot, b + 8 * slot, 8) != 0) changed.push_back(slot);
      if (!changed.empty()) break;  // 1 may be the default; then 0 is not
    }
    ASSERT_EQ(changed.size(), 1u) << name;
    EXPECT_TRUE(slots.insert(changed[0]).second) << name << " writes a field another name writes";
  }
  DoctorOptions o;
  for (const std::string& name : doctor_option_names()) EXPECT_EQ(set_doctor_option(o, name, 1.0), "") << name;
  DoctorOptions lenient;
  EXPECT_EQ(set_doctor_option(lenient, "data_stall_warning", 0.5), "");
  EXPECT_EQ(lenient.data_stall_warning, 0.5);
  EXPECT_EQ(set_doctor_option(lenient, "utilisation_window", 20), "");
  EXPECT_EQ(lenient.utilisation_window, 20);
  EXPECT_EQ(set_doctor_option(lenient, "memory_growth_min_bytes", 1e9), "");
  EXPECT_EQ(lenient.memory_growth_min_bytes, 1000000000);
  // A 30 % wait warns under the default line and is worth knowing (info) under a 50 % one.
  const auto wait = [](StepMetrics& m, int64_t) { m.data_wait_ratio = 0.3; };
  Doctor strict({.loader_workers = 0, .batch_size = 64});
  Doctor relaxed({.loader_workers = 0, .batch_size = 64}, lenient);
  const std::vector<Finding> a = Feed(strict, 5, wait), b = Feed(relaxed, 5, wait);
  ASSERT_EQ(Codes(a), std::vector<std::string>{"DATA_STALL"});
  ASSERT_EQ(Codes(b), std::vector<std::string>{"DATA_STALL"});
  EXPECT_EQ(a[0].severity, Severity::kWarning);
  EXPECT_EQ(b[0].severity, Severity::kInfo);

  EXPECT_THAT(set_doctor_option(o, "data_stall", 0.2), HasSubstr("no threshold named \"data_stall\"; expected one of "
                                                                 "data_stall_warning, data_stall_info,"));
  EXPECT_EQ(set_doctor_option(o, "data_stall_warning", 1.5), "expected a share from 0 to 1, got 1.5");
  EXPECT_EQ(set_doctor_option(o, "grad_growth", -1), "expected a number of 0 or more, got -1");
  EXPECT_EQ(set_doctor_option(o, "grad_window", 2.5), "expected a window, a whole number from 1 to 1000, got 2.5");
  EXPECT_EQ(set_doctor_option(o, "grad_window", 1e6), "expected a window, a whole number from 1 to 1000, got 1000000");
  EXPECT_EQ(set_doctor_option(o, "warmup_steps", std::nan("")), "expected a finite number, got nan");
  EXPECT_EQ(o.grad_window, 1) << "a refused value leaves the field as it was";
}

TEST(Doctor, DataStallFiresAfterWarmUpWithTheLoaderInTheAdvice) {
  Doctor d({.loader_workers = 0, .batch_size = 64});
  const auto f = Feed(d, 30, [](StepMetrics& m, int64_t) { m.data_wait_ratio = 0.45; });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"DATA_STALL"});
  EXPECT_EQ(f[0].severity, Severity::kWarning);
  EXPECT_GE(f[0].first_step, 20);  // not during warm-up
  EXPECT_DOUBLE_EQ(Evidence(f[0], "data_wait_ratio"), 0.45);
  EXPECT_THAT(f[0].advice, HasSubstr("raise loader_workers (now 0)"));
  // 8 % of a 20 ms step is worth knowing, not a warning.
  Doctor info({});
  const auto g = Feed(info, 30, [](StepMetrics& m, int64_t) {
    m.data_wait_ratio = 0.08;
    m.step_seconds = 0.02;
  });
  ASSERT_EQ(g.size(), 1u);
  EXPECT_EQ(g[0].severity, Severity::kInfo);
  // Half of a 0.5 ms step is 0.25 ms a step: a tiny model fed without workers, no problem.
  Doctor tiny({});
  EXPECT_TRUE(Feed(tiny, 30, [](StepMetrics& m, int64_t) {
                m.data_wait_ratio = 0.5;
                m.step_seconds = 0.0005;
              }).empty());
}

// Data-parallel: every rank waits for the slowest loader at each all-reduce, so the finding
// names the rank whose data wait is worst, even when this rank's own is fine.
TEST(Doctor, DataStallNamesTheRankWhoseLoaderIsSlowest) {
  Doctor d({.loader_workers = 1, .batch_size = 64});
  const auto f = Feed(d, 30, [](StepMetrics& m, int64_t) { m.rank_data_wait = {0.01, 0.02, 0.38, 0.03}; });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"DATA_STALL"});
  EXPECT_EQ(f[0].severity, Severity::kWarning);
  EXPECT_DOUBLE_EQ(Evidence(f[0], "data_wait_ratio"), 0.38);
  EXPECT_DOUBLE_EQ(Evidence(f[0], "rank"), 2);
  EXPECT_THAT(f[0].advice, HasSubstr("on rank 2 (every rank waits for it)"));
  // Every rank's loader keeping up: quiet.
  Doctor quiet({});
  EXPECT_TRUE(Feed(quiet, 30, [](StepMetrics& m, int64_t) { m.rank_data_wait = {0.01, 0.02}; }).empty());
}

// Data-parallel: every rank's step time is the slowest rank's (the all-reduce waits), so the
// finding reads each rank's own compute: rank 2 at five times the others' median for three
// intervals in a row after warm-up.
TEST(Doctor, StragglerRankIsTheRankWhoseOwnComputeStaysAboveTheOthers) {
  Doctor d({});
  const auto f = Feed(d, 10, [](StepMetrics& m, int64_t) {
    m.step_seconds = 0.025;
    m.rank_step_seconds = {0.025, 0.025, 0.025, 0.025};
    m.rank_compute_seconds = {0.0040, 0.0042, 0.0210, 0.0039};
  });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"STRAGGLER_RANK"});
  EXPECT_EQ(f[0].severity, Severity::kWarning);
  EXPECT_EQ(f[0].first_step, 20);  // steps 20, 30 and 40 straggled: it fires at 40
  EXPECT_EQ(f[0].last_step, 40);
  EXPECT_DOUBLE_EQ(Evidence(f[0], "rank"), 2);
  EXPECT_DOUBLE_EQ(Evidence(f[0], "compute_seconds"), 0.021);
  EXPECT_DOUBLE_EQ(Evidence(f[0], "others_median_seconds"), 0.004);
  EXPECT_NEAR(Evidence(f[0], "slowdown"), 5.25, 1e-12);
  EXPECT_THAT(f[0].advice, HasSubstr("rank 2 computes its step in 21.0 ms against 4.0 ms"));
  EXPECT_THAT(f[0].advice, HasSubstr("idle about 68.0 %"));

  // Healthy twins: ranks within the factor; a slow rank that changes every interval (noise, not
  // a straggler); a slowdown under the floor on tiny steps; one process (no ranks).
  Doctor even({});
  EXPECT_TRUE(Feed(even, 10, [](StepMetrics& m, int64_t) {
                m.rank_compute_seconds = {0.0040, 0.0052, 0.0045, 0.0039};
              }).empty());
  Doctor moving({});
  EXPECT_TRUE(Feed(moving, 10, [](StepMetrics& m, int64_t i) {
                m.rank_compute_seconds = {0.004, 0.004};
                m.rank_compute_seconds[static_cast<size_t>(i % 2)] = 0.02;
              }).empty());
  Doctor tiny({});
  EXPECT_TRUE(Feed(tiny, 10, [](StepMetrics& m, int64_t) { m.rank_compute_seconds = {0.0002, 0.0006}; }).empty());
  Doctor single({});
  EXPECT_TRUE(Feed(single, 10, [](StepMetrics&, int64_t) {}).empty());

  // The straggler changes (rank 2, then from the sixth interval rank 0): a finding of its own,
  // rather than the first one's step range growing under the wrong rank.
  Doctor changing({});
  const auto g = Feed(changing, 12, [](StepMetrics& m, int64_t i) {
    m.rank_compute_seconds = {0.004, 0.004, 0.004};
    m.rank_compute_seconds[i < 6 ? 2 : 0] = 0.02;
  });
  ASSERT_EQ(Codes(g), (std::vector<std::string>{"STRAGGLER_RANK", "STRAGGLER_RANK"}));
  EXPECT_DOUBLE_EQ(Evidence(g[0], "rank"), 2);
  EXPECT_DOUBLE_EQ(Evidence(g[1], "rank"), 0);
  EXPECT_EQ(g[1].first_step, 70);
  ASSERT_EQ(changing.findings().size(), 1u);
  EXPECT_DOUBLE_EQ(Evidence(changing.findings()[0], "rank"), 0);
}

// The update-to-weight band: five intervals in a row below 1e-5 or above 0.1, after warm-up.
TEST(Doctor, UpdateRatioOutsideItsBandIsLrTooLowOrTooHigh) {
  Doctor low({});
  const auto f = Feed(low, 30, [](StepMetrics& m, int64_t) { m.update_ratio = 2e-7; });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"LR_TOO_LOW"});
  EXPECT_GE(f[0].first_step, 20);
  EXPECT_DOUBLE_EQ(Evidence(f[0], "update_ratio"), 2e-7);
  EXPECT_THAT(f[0].advice, HasSubstr("0.20 parts per million"));
  Doctor high({});
  const auto g = Feed(high, 30, [](StepMetrics& m, int64_t) { m.update_ratio = 0.4; });
  ASSERT_EQ(Codes(g), std::vector<std::string>{"LR_TOO_HIGH"});
  EXPECT_DOUBLE_EQ(Evidence(g[0], "update_ratio"), 0.4);
  // Inside the band, or outside for fewer than five intervals in a row: quiet.
  Doctor healthy({});
  EXPECT_TRUE(Feed(healthy, 30, [](StepMetrics& m, int64_t i) { m.update_ratio = i % 4 == 0 ? 1e-3 : 2e-7; }).empty());
}

TEST(Doctor, ExplodingGradientsNonFiniteIsCriticalGrowthIsAWarning) {
  Doctor d({});
  const auto f = Feed(d, 12, [](StepMetrics& m, int64_t i) {
    if (i == 11) m.grad_norm = std::numeric_limits<double>::infinity();
  });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"EXPLODING_GRADIENTS"});
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  Doctor growth({});
  const auto g = Feed(growth, 20, [](StepMetrics& m, int64_t i) {
    if (i >= 10) m.grad_norm = std::pow(1.6, static_cast<double>(i - 9));
  });
  ASSERT_FALSE(g.empty());
  EXPECT_EQ(g[0].code, "EXPLODING_GRADIENTS");
  EXPECT_EQ(g[0].severity, Severity::kWarning);
  EXPECT_GT(Evidence(g[0], "growth"), 2.0);
}

TEST(Doctor, EarlyDivergenceIsLrTooHigh) {
  Doctor d({});
  const auto f = Feed(d, 10, [](StepMetrics& m, int64_t i) { m.loss = 2.0 + 0.5 * static_cast<double>(i); });
  ASSERT_FALSE(f.empty());
  EXPECT_EQ(f[0].code, "LR_TOO_HIGH");
  EXPECT_GT(Evidence(f[0], "loss_now"), 1.5 * Evidence(f[0], "loss_first"));
}

// A run resumed from a checkpoint does not start where the model started: a loss that rises in
// its first intervals (a fresh optimizer state, a shuffled epoch) is not early divergence.
TEST(Doctor, AResumedRunIsNotJudgedAgainstItsFirstIntervals) {
  Doctor resumed({});
  resumed.set_resumed();
  const auto f = Feed(resumed, 10, [](StepMetrics& m, int64_t i) { m.loss = 2.0 + 0.5 * static_cast<double>(i); });
  EXPECT_TRUE(f.empty()) << ::testing::PrintToString(Codes(f));
}

TEST(Doctor, PlateauAndOscillation) {
  Doctor flat({});
  const auto f = Feed(flat, 30, [](StepMetrics& m, int64_t) { m.loss = 0.7; });
  EXPECT_EQ(Codes(f), std::vector<std::string>{"LOSS_PLATEAU"});
  Doctor zigzag({});
  const auto g = Feed(zigzag, 14, [](StepMetrics& m, int64_t i) { m.loss = 1.0 + (i % 2 ? 0.3 : -0.3); });
  EXPECT_THAT(Codes(g), ::testing::Contains("OSCILLATION"));
}

TEST(Doctor, OverfittingNeedsThreeEvaluationsOfDivergence) {
  Doctor d({});
  std::vector<Finding> all;
  const double train[] = {1.0, 0.8, 0.6, 0.5, 0.4, 0.3};
  const double val[] = {1.1, 0.9, 0.95, 1.0, 1.1, 1.2};
  for (int64_t e = 0; e < 6; ++e) {
    for (Finding& f : d.on_epoch({e, 100 * (e + 1), train[e], val[e], std::nullopt, false})) all.push_back(f);
    if (e == 3) {
      EXPECT_TRUE(all.empty()) << "two evaluations of divergence are not enough";
    }
  }
  ASSERT_EQ(Codes(all), std::vector<std::string>{"OVERFITTING"});
  EXPECT_NEAR(Evidence(all[0], "gap"), 1.1 - 0.4, 1e-12);  // fired at the third diverging evaluation
  EXPECT_EQ(all[0].first_step, 200);                       // the evaluation divergence started from
}

// A model memorising a small training set: the gap widens at each evaluation and the
// validation loss only creeps down (under 10 % over the widening), three times the training
// loss. Its twin's validation loss keeps improving while the gap widens: quiet.
TEST(Doctor, AWideningGapWhileTheValidationLossStallsIsOverfitting) {
  const auto run = [](const std::vector<double>& train, const std::vector<double>& val) {
    Doctor d({});
    std::vector<Finding> all;
    for (size_t e = 0; e < train.size(); ++e) {
      for (Finding& f : d.on_epoch(
               {static_cast<int64_t>(e), 10 * static_cast<int64_t>(e + 1), train[e], val[e], std::nullopt, false}))
        all.push_back(f);
    }
    return all;
  };
  const auto memorising = run({1.5, 0.9, 0.5, 0.3, 0.2}, {1.6, 1.0, 0.97, 0.95, 0.93});
  ASSERT_EQ(Codes(memorising), std::vector<std::string>{"OVERFITTING"});
  EXPECT_NEAR(Evidence(memorising[0], "val_to_train"), 0.93 / 0.2, 1e-12);
  EXPECT_EQ(memorising[0].first_step, 20);  // the evaluation the widening started from
  EXPECT_TRUE(run({1.5, 0.9, 0.5, 0.3, 0.2}, {1.6, 1.2, 1.0, 0.8, 0.65}).empty()) << "still generalising better";
  EXPECT_TRUE(run({1.5, 1.2, 1.0, 0.9, 0.85}, {1.6, 1.5, 1.49, 1.48, 1.47}).empty()) << "gap under 3x";
}

TEST(Doctor, AmpSkipStormAndScaleFloor) {
  Doctor d({.precision = "fp16"});
  const auto f = Feed(d, 20, [](StepMetrics& m, int64_t i) {
    m.loss_scale = 1024;
    m.skipped_steps = 3 * (i + 1);  // 30 % of steps
  });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"AMP_SKIP_STORM"});
  Doctor floor({.precision = "fp16"});
  const auto g = Feed(floor, 3, [](StepMetrics& m, int64_t) { m.loss_scale = 1.0; });
  EXPECT_EQ(Codes(g), std::vector<std::string>{"AMP_SKIP_STORM"});
}

TEST(Doctor, FirstBatchInputPitfalls) {
  Doctor d({.loss = "cross_entropy"});
  const Tensor pixels = randint(0, 256, {8, 1, 8, 8}).to(kFloat32);
  auto f = d.check_first_batch(pixels, randint(0, 10, {8}));
  ASSERT_EQ(Codes(f), std::vector<std::string>{"INPUT_NOT_NORMALIZED"});
  EXPECT_THAT(f[0].advice, HasSubstr("raw pixel values"));
  Doctor hwc({.loss = "cross_entropy"});
  EXPECT_EQ(Codes(hwc.check_first_batch(rand({4, 32, 32, 3}), randint(0, 10, {4}))),
            std::vector<std::string>{"CHANNEL_ORDER_SUSPECT"});
  Doctor labels({.loss = "cross_entropy"});
  const Tensor multi = (rand({16, 5}) > 0.4).to(kFloat32);
  EXPECT_EQ(Codes(labels.check_first_batch(randn({16, 4}), multi)), std::vector<std::string>{"LABELS_LOOK_MULTILABEL"});
  // What the loss receives: probabilities (a sigmoid's output) given to a loss taking logits,
  // at both looks (the first step, and after training began).
  Doctor probabilities({.loss = "bce_with_logits"});
  const Tensor binary = (rand({16, 1}) > 0.5).to(kFloat32);
  EXPECT_TRUE(probabilities.check_loss_input(sigmoid(randn({16, 1})), binary).empty()) << "one look is not enough";
  EXPECT_EQ(Codes(probabilities.check_loss_input(sigmoid(randn({16, 1})), binary)),
            std::vector<std::string>{"LOGITS_PASSED_AS_PROBABILITIES"});
  // Healthy twins: logits that start inside [0, 1] and then spread, logits, the same
  // probabilities under a loss that takes them, too few values to judge, one-hot labels,
  // NCHW images.
  Doctor spreads({.loss = "bce_with_logits"});
  EXPECT_TRUE(spreads.check_loss_input(0.4 + 0.1 * rand({16, 1}), binary).empty());
  EXPECT_TRUE(spreads.check_loss_input(3.0 * randn({16, 1}), binary).empty());
  Doctor logits({.loss = "bce_with_logits"});
  EXPECT_TRUE(logits.check_loss_input(randn({16, 1}), binary).empty());
  EXPECT_TRUE(logits.check_loss_input(randn({16, 1}), binary).empty());
  Doctor bce({.loss = "bce"});
  EXPECT_TRUE(bce.check_loss_input(sigmoid(randn({16, 1})), binary).empty());
  EXPECT_TRUE(bce.check_loss_input(sigmoid(randn({16, 1})), binary).empty());
  Doctor few({.loss = "bce_with_logits"});
  EXPECT_TRUE(few.check_loss_input(sigmoid(randn({8, 1})), binary.slice(0, 0, 8)).empty());
  EXPECT_TRUE(few.check_loss_input(sigmoid(randn({8, 1})), binary.slice(0, 0, 8)).empty());
  Doctor onehot({.loss = "cross_entropy"});
  EXPECT_TRUE(onehot.check_first_batch(randn({4, 3, 32, 32}), one_hot(randint(0, 5, {4}), 5).to(kFloat32)).empty());
}

TEST(Doctor, AHostReadInEveryStepIsHostSyncPerStepAWarningOnAGpu) {
  for (const std::string device : {"cpu", "cuda"}) {
    Doctor d({.loader_workers = 2, .batch_size = 64, .device = device});
    // Reads in warm-up, and in two intervals in a row (three are needed), stay quiet.
    EXPECT_TRUE(Feed(d, 8, [](StepMetrics& m, int64_t i) {
                  m.host_reads_per_step = i == 0 || i == 4 || i == 5 ? 1 : 0;
                }).empty());
    const std::vector<Finding> f = Feed(d, 6, [](StepMetrics& m, int64_t) { m.host_reads_per_step = 2; });
    ASSERT_EQ(Codes(f), std::vector<std::string>{"HOST_SYNC_PER_STEP"}) << device;
    EXPECT_EQ(f[0].severity, device == "cuda" ? Severity::kWarning : Severity::kInfo);
    EXPECT_EQ(Evidence(f[0], "host_reads_per_step"), 2.0);
    EXPECT_THAT(f[0].advice, HasSubstr("metric interval"));
  }
  // Fewer reads than steps (a read every other step) is not every step.
  Doctor quiet({.loader_workers = 2, .batch_size = 64});
  EXPECT_TRUE(Feed(quiet, 20, [](StepMetrics& m, int64_t) { m.host_reads_per_step = 0.5; }).empty());
}

TEST(Doctor, AWeightGradientFarBelowTheLastLayersIsVanishingGradients) {
  const auto layers = [](double first) {
    return std::vector<std::pair<std::string, double>>{
        {"0.weight", first}, {"2.weight", 10 * first}, {"4.weight", 0.5}};
  };
  Doctor healthy({.loader_workers = 2, .batch_size = 64});
  EXPECT_TRUE(Feed(healthy, 30, [&](StepMetrics& m, int64_t) { m.layer_grad_norms = layers(0.05); }).empty());
  Doctor d({.loader_workers = 2, .batch_size = 64});
  // Vanishing during warm-up, or for two intervals in a row, is not yet a finding.
  EXPECT_TRUE(Feed(d, 6, [&](StepMetrics& m, int64_t i) {
                m.layer_grad_norms = layers(i == 0 || i >= 4 ? 1e-7 : 0.05);
              }).empty());
  const std::vector<Finding> f = Feed(d, 4, [&](StepMetrics& m, int64_t) { m.layer_grad_norms = layers(2e-7); });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"VANISHING_GRADIENTS"});
  EXPECT_NEAR(Evidence(f[0], "ratio"), 4e-7, 1e-12);
  EXPECT_EQ(Evidence(f[0], "layer_index"), 0.0);
  EXPECT_THAT(f[0].advice, HasSubstr("0.weight"));
  // A last layer with no gradient says nothing about the others.
  Doctor dead({.loader_workers = 2, .batch_size = 64});
  EXPECT_TRUE(Feed(dead, 30, [&](StepMetrics& m, int64_t) {
                m.layer_grad_norms = layers(0.0);
                m.layer_grad_norms.back().second = 0.0;
              }).empty());
}

TEST(Doctor, ManySmallOpsInSmallStepsAreOverheadBoundAndOneSignalAloneIsNot) {
  const auto with = [](double step_seconds, double ops) {
    return [=](StepMetrics& m, int64_t) {
      m.step_seconds = step_seconds;
      m.ops_per_step = ops;
      m.dispatch_seconds_per_op = 2e-6;
    };
  };
  for (const auto& [step_seconds, ops] :
       std::vector<std::pair<double, double>>{{0.01, 200},      // a healthy step: 4 % dispatch, not small
                                              {0.002, 200},     // small, 20 % dispatch: one signal
                                              {0.02, 6000}}) {  // 60 % dispatch, not small: one signal
    Doctor d({.loader_workers = 2, .batch_size = 64});
    EXPECT_TRUE(Feed(d, 30, with(step_seconds, ops)).empty()) << step_seconds << " s, " << ops << " ops";
  }
  Doctor d({.loader_workers = 2, .batch_size = 4});
  // Steps 10 (warm-up) to 50: four intervals in the window, one short of its five.
  EXPECT_TRUE(Feed(d, 5, with(0.002, 800)).empty());
  // The medians decide: one interval of the five slowed (a 20 ms step) does not hide it.
  const std::vector<Finding> f = Feed(d, 2, [&](StepMetrics& m, int64_t i) {
    with(0.002, 800)(m, i);
    if (i == 1) m.step_seconds = 0.02;  // step 20: the window's newest
  });
  ASSERT_EQ(Codes(f), std::vector<std::string>{"OVERHEAD_BOUND"});
  EXPECT_DOUBLE_EQ(Evidence(f[0], "dispatch_share"), 0.8);
  EXPECT_EQ(Evidence(f[0], "batch_size"), 4.0);
  EXPECT_THAT(f[0].advice, HasSubstr("Raise the batch size (now 4)"));
}

// LOW_DEVICE_UTILISATION: the 95th percentile over ten intervals after warm-up below 70 %;
// one busy interval in the window keeps it quiet (nearly every interval must be idle), and an
// unknown utilisation (-1) never fires. A warning on a GPU, worth knowing on the CPU.
TEST(Doctor, LowDeviceUtilisationIsTheWindowsP95BelowSeventyPercent) {
  const auto at = [](double u, int64_t busy_interval = -1) {
    return [=](StepMetrics& m, int64_t i) {
      m.device_utilisation = i == busy_interval ? 0.95 : u;
      m.data_wait_ratio = 0.04;  // under DATA_STALL's lines
    };
  };
  for (const double healthy : {0.9, 0.71}) {
    Doctor d({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    EXPECT_TRUE(Feed(d, 40, at(healthy)).empty()) << healthy;
  }
  {
    Doctor d({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    EXPECT_TRUE(Feed(d, 40, at(-1)).empty()) << "unknown";
  }
  {
    // Warm-up ends at step 20 (interval 1); the busy interval is step 110 (interval 10), in
    // every window of ten up to step 200. The first window of ten idle ones ends at step 210.
    Doctor early({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    EXPECT_TRUE(Feed(early, 20, at(0.4, 10)).empty());
    Doctor d({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    const std::vector<Finding> f = Feed(d, 21, at(0.4, 10));
    ASSERT_EQ(Codes(f), std::vector<std::string>{"LOW_DEVICE_UTILISATION"});
    EXPECT_EQ(f[0].severity, Severity::kWarning);
    EXPECT_DOUBLE_EQ(Evidence(f[0], "utilisation_p95"), 0.4);
    EXPECT_DOUBLE_EQ(Evidence(f[0], "utilisation_median"), 0.4);
    EXPECT_DOUBLE_EQ(Evidence(f[0], "data_wait_ratio"), 0.04);
    EXPECT_EQ(Evidence(f[0], "intervals"), 10.0);
    EXPECT_EQ(f[0].first_step, 120);
    EXPECT_EQ(f[0].last_step, 210);
    EXPECT_THAT(f[0].advice, HasSubstr("computed only 40.0 %"));
    EXPECT_THAT(f[0].advice, HasSubstr("the loader first (the step waits for data 4.0 %"));
  }
  {
    Doctor d({.loader_workers = 0, .batch_size = 8, .device = "cpu"});
    const std::vector<Finding> f = Feed(d, 12, [](StepMetrics& m, int64_t) {
      m.device_utilisation = 0.5;
      m.data_wait_ratio = 0.0;
    });
    ASSERT_EQ(Codes(f), std::vector<std::string>{"LOW_DEVICE_UTILISATION"});
    EXPECT_EQ(f[0].severity, Severity::kInfo);
    // Half the thread's time off a core with no data wait to explain it: another process.
    EXPECT_THAT(f[0].advice, HasSubstr("50.0 % of the training thread's time is off a core"));
  }
}

// On a GPU an idle device is OVERHEAD_BOUND's third signal: small steps on a device idle half
// the time fire it though dispatch takes little of the step; on the CPU, where the thread that
// dispatches also computes, the same numbers are one signal only.
TEST(Doctor, OnAGpuSmallStepsOnAnIdleDeviceAreOverheadBound) {
  const auto small_and_idle = [](StepMetrics& m, int64_t) {
    m.step_seconds = 0.002;
    m.ops_per_step = 100;
    m.dispatch_seconds_per_op = 2e-6;  // 10 % of the step
    m.device_utilisation = 0.5;
  };
  Doctor gpu({.loader_workers = 2, .batch_size = 4, .device = "cuda"});
  std::vector<std::string> codes = Codes(Feed(gpu, 30, small_and_idle));
  EXPECT_EQ(std::count(codes.begin(), codes.end(), "OVERHEAD_BOUND"), 1) << ::testing::PrintToString(codes);
  ASSERT_FALSE(gpu.findings().empty());
  for (const Finding& f : gpu.findings()) {
    if (f.code == "OVERHEAD_BOUND") {
      EXPECT_DOUBLE_EQ(Evidence(f, "device_utilisation"), 0.5);
      EXPECT_THAT(f.advice, HasSubstr("the device computed only 50.0 % of the time"));
    }
  }
  Doctor cpu({.loader_workers = 2, .batch_size = 4, .device = "cpu"});
  codes = Codes(Feed(cpu, 30, small_and_idle));
  EXPECT_EQ(std::count(codes.begin(), codes.end(), "OVERHEAD_BOUND"), 0) << ::testing::PrintToString(codes);
}

// MEMORY_FRAGMENTATION from a caching allocator's counters: a cache holding more than twice the
// run's peak (and over 512 MiB beyond it) for five intervals; a cache near its peak, or a small
// one, stays quiet. Then memory in use that grows at every interval.
TEST(Doctor, ACacheFarAboveThePeakAndMemoryGrowingEveryIntervalAreMemoryFragmentation) {
  constexpr int64_t kMiB = int64_t{1} << 20;
  const auto memory = [](int64_t reserved, int64_t peak) {
    return [=](StepMetrics& m, int64_t) {
      m.memory_allocated_bytes = peak / 2;
      m.memory_reserved_bytes = reserved;
      m.memory_peak_bytes = peak;
    };
  };
  for (const auto& [reserved, peak] : std::vector<std::pair<int64_t, int64_t>>{
           {1300 * kMiB, 1024 * kMiB},  // 21 % held beyond the peak: rounding and splitting
           {400 * kMiB, 40 * kMiB}}) {  // 90 % but 360 MiB: too little to matter
    Doctor d({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    EXPECT_TRUE(Feed(d, 40, memory(reserved, peak)).empty()) << reserved << " / " << peak;
  }
  {
    // Steps 20 to 50 over the line: four intervals, one short of five; step 60 the fifth.
    Doctor early({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    EXPECT_TRUE(Feed(early, 5, memory(4096 * kMiB, 1024 * kMiB)).empty());
    Doctor d({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
    const std::vector<Finding> f = Feed(d, 6, memory(4096 * kMiB, 1024 * kMiB));
    ASSERT_EQ(Codes(f), std::vector<std::string>{"MEMORY_FRAGMENTATION"});
    EXPECT_EQ(f[0].severity, Severity::kWarning);
    EXPECT_DOUBLE_EQ(Evidence(f[0], "unused_reserved_share"), 0.75);
    EXPECT_EQ(Evidence(f[0], "peak_allocated_bytes"), 1024.0 * kMiB);
    EXPECT_THAT(f[0].advice, HasSubstr("holds 4096 MiB while the run never had more than 1024 MiB"));
    EXPECT_THAT(f[0].advice, HasSubstr("expandable_segments:true"));
  }
  // Growth: 100 MiB in use, 4 MiB more at each interval: the tenth rise in a row fires (40 MiB:
  // above 10 % and above 4 MiB). Steady memory with noise, or a rise that stops, does not.
  const auto growing = [](int64_t stop_after) {
    return
        [=](StepMetrics& m, int64_t i) { m.memory_allocated_bytes = 100 * kMiB + 4 * kMiB * std::min(i, stop_after); };
  };
  {
    Doctor d({.loader_workers = 0, .batch_size = 64});
    EXPECT_TRUE(Feed(d, 40, [](StepMetrics& m, int64_t i) {
                  m.memory_allocated_bytes = 100 * kMiB + (i % 3) * 8 * kMiB;  // prefetched batches
                }).empty());
  }
  {
    Doctor d({.loader_workers = 0, .batch_size = 64});
    EXPECT_TRUE(Feed(d, 40, growing(9)).empty()) << "nine rises, then steady";
  }
  {
    // Warm-up ends at interval 1 (step 20): the rises at intervals 2 to 10 are nine, the one
    // at interval 11 (step 120) the tenth.
    Doctor early({.loader_workers = 0, .batch_size = 64});
    EXPECT_TRUE(Feed(early, 11, growing(100)).empty());
    Doctor d({.loader_workers = 0, .batch_size = 64});
    const std::vector<Finding> f = Feed(d, 12, growing(100));
    ASSERT_EQ(Codes(f), std::vector<std::string>{"MEMORY_FRAGMENTATION"});
    EXPECT_EQ(Evidence(f[0], "allocated_bytes_before"), 100.0 * kMiB + 4.0 * kMiB);
    EXPECT_EQ(Evidence(f[0], "allocated_bytes"), 100.0 * kMiB + 44.0 * kMiB);
    EXPECT_EQ(f[0].first_step, 20);
    EXPECT_EQ(f[0].last_step, 120);
    EXPECT_THAT(f[0].advice, HasSubstr("keeps each step's tensors alive"));
  }
}

// The fragmentation rule on a real caching allocator's counters (on a fake device): a run
// whose requests keep growing (sequences that get longer) leaves each old segment cached and
// unusable, and fires; the same run with expandable segments, the advice's remedy, grows one
// segment instead and stays quiet.
TEST(DoctorAllocator, GrowingRequestsFragmentTheCacheAndExpandableSegmentsDoNot) {
  for (const bool expandable : {false, true}) {
    test::FakeDeviceMemory memory(size_t{64} << 30);
    cuda::CachingAllocatorOptions options;
    options.expandable_segments = expandable;
    std::vector<Finding> found;
    {
      cuda::CachingAllocator cache(&memory, options);
      Doctor d({.loader_workers = 2, .batch_size = 64, .device = "cuda"});
      void* weights = cache.allocate(size_t{256} << 20, 1);
      cache.reset_peak();  // as the service does when a job starts: the peak is the run's
      for (int64_t i = 0; i < 30; ++i) {
        // Each interval's activations: 64 MiB more than the last interval's.
        void* activations = cache.allocate((size_t{64} << 20) * static_cast<size_t>(i + 1), 1);
        cache.deallocate(activations);
        const cuda::CachingAllocator::Stats s = cache.stats();
        StepMetrics m = Healthy(i);
        m.memory_allocated_bytes = s.allocated_bytes;
        m.memory_reserved_bytes = s.reserved_bytes;
        m.memory_peak_bytes = s.peak_allocated_bytes;
        for (Finding& f : d.on_step(m)) found.push_back(std::move(f));
      }
      cache.deallocate(weights);
    }
    SCOPED_TRACE(expandable ? "expandable segments" : "fixed segments");
    EXPECT_EQ(Codes(found), expandable ? std::vector<std::string>{} : std::vector<std::string>{"MEMORY_FRAGMENTATION"});
  }
}

// Real training: a deep, narrow MLP at batch 2 spends most of its step dispatching ops and fires
// OVERHEAD_BOUND; a wide one at batch 256 spends little of it there and does not. The trainer
// reports the ops each step ran and the dispatch cost it measured.
TEST(DoctorTrainer, ADeepNarrowModelAtBatchTwoIsOverheadBoundAndAWideOneIsNot) {
  double shares[2] = {0, 0};
  for (const bool narrow : {true, false}) {
    manual_seed(7);
    auto model = std::make_shared<nn::Sequential>();
    const int64_t layers = narrow ? 12 : 2, width = narrow ? 4 : 512, batch = narrow ? 2 : 256;
    for (int64_t l = 0; l < layers; ++l) {
      model->push_back(std::make_shared<nn::Linear>(l == 0 ? 8 : width, l + 1 == layers ? 2 : width));
      if (l + 1 < layers) model->push_back(std::make_shared<nn::Tanh>());
    }
    // The small-step line well above a sanitizer's slowdown: the dispatch share decides.
    DoctorRun run{.lr = 0.01, .batch = batch, .epochs = 1, .metric_interval = 4};
    run.options.overhead_small_step_seconds = 0.1;
    double ops = 0, dispatch = 0, share = 0;
    const std::vector<std::string> codes =
        TrainUnderDoctor(model, randn({narrow ? 128 : 4096, 8}), run, [&](const StepMetrics& m) {
          ops = m.ops_per_step;
          dispatch = m.dispatch_seconds_per_op;
          share = m.ops_per_step * m.dispatch_seconds_per_op / m.step_seconds;
        });
    shares[narrow ? 0 : 1] = share;
    SCOPED_TRACE(std::string(narrow ? "narrow" : "wide") + ": " + std::to_string(ops) + " ops per step, " +
                 std::to_string(dispatch * 1e6) + " us each, dispatch share " + std::to_string(share) + ", " +
                 ::testing::PrintToString(codes));
    EXPECT_GT(ops, narrow ? 100.0 : 10.0);
    EXPECT_GT(dispatch, 0.0);
    EXPECT_EQ(std::count(codes.begin(), codes.end(), "OVERHEAD_BOUND") > 0, narrow);
  }
  EXPECT_GT(shares[0], 4 * shares[1]);
}

// The probe's shares against values counted by hand: dead units per feature of a [N, F] output
// and per channel of a [N, C, H, W] one; saturated sigmoid and tanh outputs; nothing recorded
// without a probe, and a probe opened inside another records only its own.
TEST(ActivationProbe, CountsDeadUnitsAndSaturatedOutputs) {
  NoGradGuard g;
  nn::ReLU relu;
  nn::Sigmoid sigmoid;
  nn::Tanh tanh_layer;
  const Tensor features = tensor(std::vector<float>{-1, 2, -3, -4, 0, -1, -2, 5, -6, -1, -7, -8}).reshape({4, 3});
  Tensor images = randn({2, 4, 3, 3}).abs() + 0.1;  // all positive: alive
  images.select(1, 1).fill_(-1.0);                  // channel 1 dead on both images
  images.select(1, 3).fill_(-2.0);                  // channel 3 too
  {
    nn::ActivationProbe probe;
    relu.forward(features);
    relu.forward(images);
    sigmoid.forward(tensor(std::vector<float>{-10, -4, 0, 4, 10, 20, -20, 0.5}));
    {
      nn::ActivationProbe inner;
      tanh_layer.forward(tensor(std::vector<float>{-3, 3, 0.1, -0.2}));
      ASSERT_EQ(inner.records().size(), 1u);
      EXPECT_EQ(inner.records()[0].kind, nn::ActivationKind::kTanh);
      EXPECT_DOUBLE_EQ(inner.records()[0].share.item<double>(), 0.5);  // tanh(+-3) = +-0.995
    }
    ASSERT_EQ(probe.records().size(), 3u);
    EXPECT_EQ(probe.records()[0].module, &relu);
    // Columns: {-1, -4, -2, -1} dead, {2, 0, 5, -7} alive, {-3, -1, -6, -8} dead.
    EXPECT_DOUBLE_EQ(probe.records()[0].share.item<double>(), 2.0 / 3.0);
    EXPECT_DOUBLE_EQ(probe.records()[1].share.item<double>(), 2.0 / 4.0);
    // sigmoid(-10), sigmoid(10), sigmoid(20), sigmoid(-20) are in the tails; +-4 (0.018, 0.982) are not.
    EXPECT_EQ(probe.records()[2].kind, nn::ActivationKind::kSigmoid);
    EXPECT_DOUBLE_EQ(probe.records()[2].share.item<double>(), 4.0 / 8.0);
  }
  nn::ActivationProbe after;
  EXPECT_TRUE(after.records().empty());
  relu.forward(features);
  EXPECT_EQ(after.records().size(), 1u);
}

TEST(Doctor, AMostlyDeadReluLayerAndASaturatedSigmoidFireAfterThreeIntervals) {
  const auto shares = [](double relu, double sigmoid) {
    return std::vector<StepMetrics::ActivationShare>{
        {"1", "relu", 0.05}, {"3", "relu", relu}, {"5", "sigmoid", sigmoid}};
  };
  Doctor healthy({.loader_workers = 2, .batch_size = 64});
  EXPECT_TRUE(Feed(healthy, 30, [&](StepMetrics& m, int64_t) { m.activation_shares = shares(0.2, 0.3); }).empty());
  Doctor d({.loader_workers = 2, .batch_size = 64});
  // Over the line during warm-up, or for two intervals in a row, is not yet a finding.
  EXPECT_TRUE(Feed(d, 6, [&](StepMetrics& m, int64_t i) {
                m.activation_shares = shares(i == 0 || i >= 4 ? 0.9 : 0.2, i == 0 || i >= 4 ? 0.8 : 0.3);
              }).empty());
  const std::vector<Finding> f = Feed(d, 4, [&](StepMetrics& m, int64_t) { m.activation_shares = shares(0.75, 0.6); });
  ASSERT_EQ(Codes(f), (std::vector<std::string>{"DEAD_RELU", "SATURATED_ACTIVATION"}));
  EXPECT_DOUBLE_EQ(Evidence(f[0], "dead_unit_share"), 0.75);
  EXPECT_EQ(Evidence(f[0], "layer_index"), 1.0);
  EXPECT_THAT(f[0].advice, HasSubstr("ReLU layer 3"));
  EXPECT_DOUBLE_EQ(Evidence(f[1], "saturated_share"), 0.6);
  EXPECT_THAT(f[1].advice, HasSubstr("sigmoid layer 5"));
}

// Real training over five seeds: a ReLU layer whose biases start at -10 (every unit dead) fires
// DEAD_RELU in every seed and its default-initialised twin in none; a sigmoid layer whose
// weights are 30 times too large fires SATURATED_ACTIVATION in every seed and its twin in none.
TEST(DoctorTrainer, ADeadReluInitAndASaturatedSigmoidFireAndTheirTwinsDoNot) {
  for (int seed = 0; seed < 5; ++seed) {
    for (const bool sigmoid : {false, true}) {
      for (const bool faulty : {false, true}) {
        manual_seed(static_cast<uint64_t>(100 + seed));
        auto first = std::make_shared<nn::Linear>(8, 32);
        auto model = std::make_shared<nn::Sequential>();
        model->push_back(first);
        if (sigmoid) {
          model->push_back(std::make_shared<nn::Sigmoid>());
        } else {
          model->push_back(std::make_shared<nn::ReLU>());
        }
        model->push_back(std::make_shared<nn::Linear>(32, 2));
        if (faulty) {
          NoGradGuard g;
          if (sigmoid) {
            first->weight.mul_(30.0);
          } else {
            first->bias.fill_(-10.0);
          }
        }
        size_t sampled = 0;
        const std::vector<std::string> codes = TrainUnderDoctor(model, randn({128, 8}), {}, [&](const StepMetrics& m) {
          sampled = std::max(sampled, m.activation_shares.size());
        });
        SCOPED_TRACE("seed " + std::to_string(seed) + (sigmoid ? ", sigmoid" : ", relu") +
                     (faulty ? ", provoked" : ", twin") + ": " + ::testing::PrintToString(codes));
        EXPECT_EQ(sampled, 1u);
        const bool dead = std::count(codes.begin(), codes.end(), "DEAD_RELU") > 0;
        const bool saturated = std::count(codes.begin(), codes.end(), "SATURATED_ACTIVATION") > 0;
        EXPECT_EQ(dead, faulty && !sigmoid);
        EXPECT_EQ(saturated, faulty && sigmoid);
      }
    }
  }
}

// Real training over five seeds: a binary classifier whose model ends in a sigmoid, trained
// with BCE-with-logits (the sigmoid applied twice), fires LOGITS_PASSED_AS_PROBABILITIES from
// what the loss receives on the first step and after five intervals; the same model without
// its sigmoid does not. The check's own host reads are not the step's: the first interval
// reports none.
TEST(DoctorTrainer, ASigmoidBeforeBceWithLogitsFiresAndItsTwinDoesNot) {
  for (int seed = 0; seed < 5; ++seed) {
    for (const bool faulty : {false, true}) {
      manual_seed(static_cast<uint64_t>(200 + seed));
      auto model = std::make_shared<nn::Sequential>();
      model->push_back(std::make_shared<nn::Linear>(8, 16));
      model->push_back(std::make_shared<nn::ReLU>());
      model->push_back(std::make_shared<nn::Linear>(16, 1));
      if (faulty) model->push_back(std::make_shared<nn::Sigmoid>());
      const Tensor x = randn({256, 8});
      const Tensor y = (x.select(1, 0) > 0).to(kFloat32).unsqueeze(1);
      auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.1}});
      Trainer t(model, opt, {.epochs = 4, .metric_interval = 4, .checkpoint_every_epoch = false},
                [](const Tensor& out, const Tensor& target) {
                  return nn::functional::binary_cross_entropy_with_logits(out, target);
                });
      data::DataLoader train(std::make_shared<data::TensorDataset>(x, y), {.batch_size = 32});
      Doctor doctor({.loader_workers = 0, .batch_size = 32, .loss = "bce_with_logits"});
      std::vector<Finding> found;
      double first_reads = -1;
      t.set_callbacks({.on_step =
                           [&](const StepMetrics& m) {
                             if (first_reads < 0) first_reads = m.host_reads_per_step;
                           },
                       .on_epoch = {},
                       .on_checkpoint = {},
                       .on_loss_input =
                           [&](const Tensor& output, const Tensor& target) {
                             for (Finding& f : doctor.check_loss_input(output, target)) found.push_back(f);
                           }});
      t.fit(train);
      SCOPED_TRACE("seed " + std::to_string(seed) + (faulty ? ", sigmoid then BCE-with-logits" : ", logits"));
      EXPECT_EQ(Codes(found),
                faulty ? std::vector<std::string>{"LOGITS_PASSED_AS_PROBABILITIES"} : std::vector<std::string>{});
      EXPECT_EQ(first_reads, 0.0);
    }
  }
}

// Real training over five seeds: a ten-layer sigmoid MLP fires VANISHING_GRADIENTS in every
// seed, a two-layer ReLU MLP on the same data in none; the trainer reports every weight's norm.
TEST(DoctorTrainer, ADeepSigmoidStackVanishesAndAShallowReluTwinDoesNot) {
  for (int seed = 0; seed < 5; ++seed) {
    for (const bool deep : {false, true}) {
      manual_seed(static_cast<uint64_t>(seed));
      auto model = std::make_shared<nn::Sequential>();
      const int64_t layers = deep ? 10 : 2;
      for (int64_t l = 0; l < layers; ++l) {
        model->push_back(std::make_shared<nn::Linear>(l == 0 ? 8 : 32, l + 1 == layers ? 2 : 32));
        if (l + 1 < layers) {
          if (deep) {
            model->push_back(std::make_shared<nn::Sigmoid>());
          } else {
            model->push_back(std::make_shared<nn::ReLU>());
          }
        }
      }
      size_t reported = 0;
      const std::vector<std::string> codes = TrainUnderDoctor(
          model, randn({128, 8}), {}, [&](const StepMetrics& m) { reported = m.layer_grad_norms.size(); });
      SCOPED_TRACE("seed " + std::to_string(seed) + (deep ? ", deep sigmoid" : ", shallow relu") + ": " +
                   ::testing::PrintToString(codes));
      EXPECT_EQ(reported, static_cast<size_t>(layers));
      EXPECT_EQ(std::count(codes.begin(), codes.end(), "VANISHING_GRADIENTS") > 0, deep);
    }
  }
}

// The trainer's CPU utilisation (the training thread's CPU time over the interval's wall
// time): a step that sleeps 20 ms (a lock, a file read, another process's turn) leaves the CPU
// idle and fires LOW_DEVICE_UTILISATION; its twin computes through its steps. The bounds are
// loose on purpose: tests share the machine's cores.
TEST(DoctorTrainer, AStepThatSleepsLeavesTheCpuIdleAndItsTwinDoesNot) {
  const auto sleeps_first = [](nn::Module& inner, const Tensor& x) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return inner.forward(x);
  };
  double medians[2] = {0, 0};
  for (const bool sleeps : {true, false}) {
    manual_seed(4);
    std::shared_ptr<nn::Module> model = models::build_model(models::preset_spec("mlp", {8}, 2)).module;
    if (sleeps) model = std::make_shared<Around>(model, sleeps_first);
    std::vector<double> u;
    // The line at half its default: a test process shares the cores with other tests, and the
    // sleeping step (20 ms against well under 1 ms of compute, a few ms under a sanitizer) is
    // far below either line.
    DoctorRun run{.batch = 8, .epochs = 2};
    run.options.utilisation_p95 = 0.35;
    const std::vector<std::string> codes =
        TrainUnderDoctor(model, randn({256, 8}), run, [&](const StepMetrics& m) { u.push_back(m.device_utilisation); });
    ASSERT_FALSE(u.empty());
    for (double v : u) {
      EXPECT_GE(v, 0.0);
      EXPECT_LE(v, 1.0);
    }
    std::sort(u.begin(), u.end());
    medians[sleeps ? 0 : 1] = u[u.size() / 2];
    SCOPED_TRACE(std::string(sleeps ? "sleeping" : "twin") + ": median utilisation " + std::to_string(u[u.size() / 2]) +
                 ", " + ::testing::PrintToString(codes));
    EXPECT_EQ(std::count(codes.begin(), codes.end(), "LOW_DEVICE_UTILISATION") > 0, sleeps);
  }
  EXPECT_LT(medians[0], 0.3);
  EXPECT_GT(medians[1], 3 * medians[0]);
}

// Memory in use at each interval's end, from the trainer: a model that keeps every step's
// hidden activations (detached, "for a later look": 512 KiB a step) grows and fires
// MEMORY_FRAGMENTATION; its twin holds the same bytes at every interval's end.
TEST(DoctorTrainer, AModelThatKeepsItsActivationsGrowsMemoryAndItsTwinDoesNot) {
  struct KeepsActivations : nn::Module {
    std::shared_ptr<nn::Linear> in, out;
    bool keeps;
    std::vector<Tensor> kept;
    explicit KeepsActivations(bool k) : nn::Module("KeepsActivations"), keeps(k) {
      in = register_module("in", std::make_shared<nn::Linear>(64, 4096));
      out = register_module("out", std::make_shared<nn::Linear>(4096, 2));
    }
    Tensor forward(const Tensor& x) override {
      const Tensor h = in->forward(x).tanh();
      if (keeps) kept.push_back(h.detach());
      return out->forward(h);
    }
  };
  for (const bool keeps : {true, false}) {
    manual_seed(5);
    auto model = std::make_shared<KeepsActivations>(keeps);
    std::vector<int64_t> allocated;
    const std::vector<std::string> codes =
        TrainUnderDoctor(model, randn({1024, 64}), {.lr = 0.01, .batch = 32, .epochs = 2}, [&](const StepMetrics& m) {
          if (m.step > 20) allocated.push_back(m.memory_allocated_bytes);
          EXPECT_EQ(m.memory_peak_bytes, -1) << "the CPU allocator is the process's: no peak of the run";
          EXPECT_GE(m.memory_reserved_bytes, m.memory_allocated_bytes);
        });
    ASSERT_GT(allocated.size(), 12u);
    const auto [lo, hi] = std::minmax_element(allocated.begin(), allocated.end());
    SCOPED_TRACE(std::string(keeps ? "keeping" : "twin") + ": " + std::to_string(*lo) + " to " + std::to_string(*hi) +
                 " bytes, " + ::testing::PrintToString(codes));
    EXPECT_EQ(std::count(codes.begin(), codes.end(), "MEMORY_FRAGMENTATION") > 0, keeps);
    if (keeps) {
      EXPECT_GT(*hi - *lo, int64_t{16} << 20);
    } else {
      EXPECT_LT(*hi - *lo, int64_t{1} << 20);
    }
  }
}

// The trainer counts the reads of the step's own work, not its metric reads: a model that
// branches on a device value every forward reports one read per step, its twin none.
TEST(DoctorTrainer, AModelThatReadsTheHostEveryStepReportsOneReadPerStep) {
  const auto reads_the_host = [](nn::Module& inner, const Tensor& x) {
    const Tensor y = inner.forward(x);
    return y.abs().max().item<double>() > 1e6 ? y / 2.0 : y;  // a data-dependent branch
  };
  for (const bool reads : {false, true}) {
    manual_seed(2);
    std::shared_ptr<nn::Module> model = models::build_model(models::preset_spec("mlp", {4}, 2)).module;
    if (reads) model = std::make_shared<Around>(model, reads_the_host);
    auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.1}});
    Trainer t(model, opt, {.epochs = 2, .metric_interval = 4, .checkpoint_every_epoch = false});
    const Tensor x = randn({128, 4});
    const Tensor y = (x.select(1, 0) > 0).to(kInt64);
    data::DataLoader train(std::make_shared<data::TensorDataset>(x, y), {.batch_size = 8});
    std::vector<double> per_step;
    t.set_callbacks({.on_step = [&](const StepMetrics& m) { per_step.push_back(m.host_reads_per_step); },
                     .on_epoch = {},
                     .on_checkpoint = {}});
    t.fit(train);
    ASSERT_EQ(per_step.size(), 8u);
    for (double r : per_step) EXPECT_EQ(r, reads ? 1.0 : 0.0) << (reads ? "the reading model" : "its twin");
  }
  // A convolutional network's step (convolutions, max pooling, cross entropy) reads nothing
  // back either: max pooling once read the host every forward to look for NaN.
  manual_seed(3);
  std::shared_ptr<nn::Module> cnn = models::build_model(models::preset_spec("lenet5", {1, 8, 8}, 10)).module;
  auto opt = std::make_shared<optim::SGD>(cnn->parameters(), optim::Options{{"lr", 0.01}});
  Trainer t(cnn, opt, {.epochs = 1, .metric_interval = 2, .checkpoint_every_epoch = false});
  data::DataLoader images(std::make_shared<data::TensorDataset>(randn({32, 1, 8, 8}), randint(0, 10, {32})),
                          {.batch_size = 8});
  std::vector<double> per_step;
  t.set_callbacks({.on_step = [&](const StepMetrics& m) { per_step.push_back(m.host_reads_per_step); },
                   .on_epoch = {},
                   .on_checkpoint = {}});
  t.fit(images);
  ASSERT_EQ(per_step.size(), 2u);
  for (double r : per_step) EXPECT_EQ(r, 0.0) << "the lenet5 preset's training step";
}

// The trainer side of the doctor's actions: a stop requested from the epoch callback ends the
// run there as early stopping does, with the best epoch's weights restored; scaling the rate
// scales the schedule's base rates.
TEST(DoctorActions, RequestStopEndsTheRunWithTheBestWeightsAndTheRateScales) {
  manual_seed(1);
  auto model = models::build_model(models::preset_spec("mlp", {4}, 2)).module;
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.1}});
  TrainerOptions options{.epochs = 10, .checkpoint_every_epoch = false};
  options.track_best_weights = true;
  Trainer t(model, opt, options);
  const Tensor x = randn({64, 4});
  const Tensor y = (x.select(1, 0) > 0).to(kInt64);
  data::DataLoader train(std::make_shared<data::TensorDataset>(x, y), {.batch_size = 16});
  data::DataLoader val(std::make_shared<data::TensorDataset>(x, y), {.batch_size = 64});
  nn::StateDict best;
  double best_loss = 1e30;
  int64_t epochs_seen = 0;
  t.set_callbacks({.on_step = {},
                   .on_epoch =
                       [&](const EpochMetrics& m) {
                         ++epochs_seen;
                         if (*m.val_loss < best_loss) {
                           best_loss = *m.val_loss;
                           best = model->state_dict();
                           for (auto& [k, v] : best.tensors) v = v.clone();
                         }
                         if (m.epoch == 3) t.request_stop();
                       },
                   .on_checkpoint = {}});
  const TrainResult r = t.fit(train, &val);
  EXPECT_EQ(r.status, TrainResult::Status::kEarlyStopped);
  EXPECT_EQ(epochs_seen, 4);
  for (const auto& [k, v] : best.tensors) EXPECT_TRUE(equal(*model->state_dict().find(k), v)) << k;
  t.scale_learning_rate(0.5);
  EXPECT_DOUBLE_EQ(opt->lr(), 0.05);
  auto sched = std::make_shared<optim::StepLR>(*opt, 100, 0.1);
  t.set_scheduler(sched);
  t.scale_learning_rate(0.5);
  EXPECT_DOUBLE_EQ(opt->lr(), 0.025);
  sched->step();
  EXPECT_DOUBLE_EQ(opt->lr(), 0.025) << "the schedule keeps the scaled base rate";
}

// Real runs on digits over five seeds, each fault beside its healthy twin: AdamW at 100x the
// service's default rate (1e-3) fires a divergence or gradient finding in every seed; SGD at
// 1/1000 of the recipe's fires LR_TOO_LOW; pixels in [0, 255] fire INPUT_NOT_NORMALIZED on the
// first batch; the recipe itself fires none of these. (SGD with momentum at 100x its recipe,
// 0.3, trains this model well: no rule should call that rate too high.)
TEST(DoctorDigits, ProvokedFaultsFireAndHealthyTwinsStayQuiet) {
  if (!std::filesystem::exists(std::filesystem::path(test::DigitsDir()) / "digits.csv.gz"))
    GTEST_SKIP() << "digits.csv.gz not in " << test::DigitsDir() << ": run `make data`";
  for (int seed = 0; seed < 5; ++seed) {
    for (const std::string fault : {"none", "lr", "lr_low", "pixels"}) {
      const bool pixels = fault == "pixels";
      manual_seed(static_cast<uint64_t>(seed));
      auto digits = std::make_shared<data::MapDataset>(
          std::make_shared<data::Digits>(test::DigitsDir(), data::DigitsOptions{.as_image = false}),
          std::make_shared<data::Lambda>(
              [pixels](const Tensor& x) { return pixels ? (x * (255.0 / 16.0)).round() : x / 16.0; }, "Scale"));
      const models::BuiltModel m = models::build_model(models::preset_spec("mlp", {64}, 10));
      const double lr = fault == "lr_low" ? 3e-6 : 3e-3;  // 1/1000 the recipe's
      std::shared_ptr<optim::Optimizer> opt =
          fault == "lr"
              ? std::shared_ptr<optim::Optimizer>(
                    std::make_shared<optim::AdamW>(m.module->parameters(), optim::Options{{"lr", 0.1}}))
              : std::make_shared<optim::SGD>(m.module->parameters(), optim::Options{{"lr", lr}, {"momentum", 0.9}});
      Doctor doctor({.loader_workers = 0, .batch_size = 64, .loss = "cross_entropy"});
      std::vector<Finding> found;
      data::DataLoader loader(digits, {.batch_size = 64, .shuffle = true, .seed = static_cast<uint64_t>(seed)});
      for (auto& b : loader) {
        for (Finding& f : doctor.check_first_batch(b["input"], b["target"])) found.push_back(f);
        break;
      }
      Trainer t(m.module, opt, {.epochs = 3, .metric_interval = 2, .checkpoint_every_epoch = false});
      t.set_callbacks({.on_step =
                           [&](const StepMetrics& s) {
                             for (Finding& f : doctor.on_step(s)) found.push_back(f);
                           },
                       .on_epoch = {},
                       .on_checkpoint = {},
                       .on_loss_input =
                           [&](const Tensor& output, const Tensor& target) {
                             for (Finding& f : doctor.check_loss_input(output, target)) found.push_back(f);
                           }});
      t.fit(loader);
      const std::vector<std::string> codes = Codes(found);
      // A rate too high shows as the loss rising from where it started, a gradient explosion,
      // or a loss bouncing at every interval without progress.
      const bool gradient_or_divergence = std::count(codes.begin(), codes.end(), "EXPLODING_GRADIENTS") +
                                              std::count(codes.begin(), codes.end(), "LR_TOO_HIGH") +
                                              std::count(codes.begin(), codes.end(), "OSCILLATION") >
                                          0;
      SCOPED_TRACE("seed " + std::to_string(seed) + ", fault " + fault + ": " + ::testing::PrintToString(codes));
      EXPECT_EQ(std::count(codes.begin(), codes.end(), "INPUT_NOT_NORMALIZED") > 0, pixels);
      const bool too_low = std::count(codes.begin(), codes.end(), "LR_TOO_LOW") > 0;
      EXPECT_EQ(too_low, fault == "lr_low");
      if (fault == "lr") {
        EXPECT_TRUE(gradient_or_divergence);
      }
      if (fault == "none") {
        // The recipe's run fires none of the provoked faults. (A tiny MLP fed by a loader with
        // no workers does wait for its data, and DATA_STALL says so: that finding is real.)
        EXPECT_FALSE(gradient_or_divergence);
      }
    }
  }
}

// A rule counts as checked only once it had what it needs to decide: the windows filled after
// warm-up, the metric it reads measured. Three intervals check the early-divergence rule and
// DATA_STALL (step 20 is past warm-up) but not the ten-interval utilisation window; thirty
// check it. Rules whose metric never came (memory, per-layer norms, activations, the dispatch
// counters, ranks, a loss scale, a validation loss) stay unchecked. take_newly_checked hands
// each rule out once, in the order checked.
TEST(Doctor, ARuleIsCheckedOnlyOnceItHadWhatItNeeds) {
  Doctor d({.device = "cpu"});
  const auto with_utilisation = [](StepMetrics& m, int64_t) { m.device_utilisation = 0.95; };
  std::vector<std::string> handed_out;
  const auto take = [&] {
    for (std::string& c : d.take_newly_checked()) handed_out.push_back(std::move(c));
  };
  for (int64_t i = 0; i < 3; ++i) {
    StepMetrics m = Healthy(i);
    with_utilisation(m, i);
    EXPECT_TRUE(d.on_step(m).empty());
    take();
  }
  const auto has = [](const std::vector<std::string>& v, const std::string& c) {
    return std::find(v.begin(), v.end(), c) != v.end();
  };
  std::vector<std::string> early = d.checked();
  EXPECT_TRUE(has(early, "LR_TOO_HIGH")) << ::testing::PrintToString(early);
  EXPECT_TRUE(has(early, "DATA_STALL")) << ::testing::PrintToString(early);
  for (const char* c : {"LOW_DEVICE_UTILISATION", "OSCILLATION", "LOSS_PLATEAU", "EXPLODING_GRADIENTS"})
    EXPECT_FALSE(has(early, c)) << c << " after 3 intervals";
  for (int64_t i = 3; i < 30; ++i) {
    StepMetrics m = Healthy(i);
    with_utilisation(m, i);
    EXPECT_TRUE(d.on_step(m).empty()) << "interval " << i;
    take();
  }
  const std::vector<std::string> all = d.checked();
  for (const char* c : {"LOW_DEVICE_UTILISATION", "OSCILLATION", "LOSS_PLATEAU", "EXPLODING_GRADIENTS",
                        "HOST_SYNC_PER_STEP", "LR_TOO_LOW", "LR_TOO_HIGH", "DATA_STALL"})
    EXPECT_TRUE(has(all, c)) << c << " after 30 intervals: " << ::testing::PrintToString(all);
  for (const char* c : {"MEMORY_FRAGMENTATION", "VANISHING_GRADIENTS", "DEAD_RELU", "SATURATED_ACTIVATION",
                        "OVERHEAD_BOUND", "STRAGGLER_RANK", "AMP_SKIP_STORM", "OVERFITTING", "INPUT_NOT_NORMALIZED"})
    EXPECT_FALSE(has(all, c)) << c << " had nothing to go on";
  std::vector<std::string> sorted_out = handed_out, sorted_all = all;
  std::sort(sorted_out.begin(), sorted_out.end());
  std::sort(sorted_all.begin(), sorted_all.end());
  EXPECT_EQ(sorted_out, sorted_all) << "each rule handed out once";
  EXPECT_TRUE(d.take_newly_checked().empty());
  // A validation loss checks OVERFITTING once its window of evaluations filled.
  for (int64_t e = 0; e < 4; ++e) {
    EXPECT_FALSE(has(d.checked(), "OVERFITTING")) << "after " << e << " evaluations";
    EpochMetrics m;
    m.epoch = e;
    m.step = 100 * (e + 1);
    m.train_loss = 1.0 / static_cast<double>(e + 1);
    m.val_loss = 1.1 / static_cast<double>(e + 1);
    (void)d.on_epoch(m);
  }
  EXPECT_TRUE(has(d.checked(), "OVERFITTING"));
  EXPECT_EQ(d.take_newly_checked(), std::vector<std::string>{"OVERFITTING"});
}

// Every rule says what it needs, with the thresholds in force; the rules for one loss, one
// precision or data-parallel jobs apply to those only.
TEST(Doctor, EveryRuleSaysWhatItNeedsAndWhereItApplies) {
  DoctorOptions o;
  o.utilisation_window = 25;
  for (const std::string& rule : Doctor::rules()) EXPECT_FALSE(Doctor::needs(rule, o).empty()) << rule;
  EXPECT_EQ(Doctor::needs("LOW_DEVICE_UTILISATION", o),
            "25 metric intervals after warm-up (step 20), with the device's utilisation measured");
  EXPECT_EQ(Doctor::needs("NO_SUCH_RULE", o), "");
  const DoctorContext ce{.loss = "cross_entropy"}, bce{.loss = "bce_with_logits", .precision = "fp16"};
  EXPECT_FALSE(Doctor::applies("LOGITS_PASSED_AS_PROBABILITIES", ce, false));
  EXPECT_TRUE(Doctor::applies("LOGITS_PASSED_AS_PROBABILITIES", bce, false));
  EXPECT_TRUE(Doctor::applies("LABELS_LOOK_MULTILABEL", ce, false));
  EXPECT_FALSE(Doctor::applies("LABELS_LOOK_MULTILABEL", bce, false));
  EXPECT_FALSE(Doctor::applies("AMP_SKIP_STORM", ce, false));
  EXPECT_TRUE(Doctor::applies("AMP_SKIP_STORM", bce, false));
  EXPECT_FALSE(Doctor::applies("STRAGGLER_RANK", ce, false));
  EXPECT_TRUE(Doctor::applies("STRAGGLER_RANK", ce, true));
  EXPECT_TRUE(Doctor::applies("LOW_DEVICE_UTILISATION", ce, false));
}

// A run that stops on a non-finite loss before its first metric interval still names the rate
// it ran at (the trainer's, carried by NonFiniteLossError), not 0.
TEST(Doctor, ANonFiniteLossBeforeTheFirstIntervalNamesTheRate) {
  Doctor d({});
  const std::vector<Finding> f = d.on_non_finite(7, "training loss became nan at step 7", 10.0);
  ASSERT_EQ(Codes(f), std::vector<std::string>{"EXPLODING_GRADIENTS"});
  EXPECT_EQ(f[0].severity, Severity::kCritical);
  EXPECT_EQ(Evidence(f[0], "lr"), 10.0);
  EXPECT_THAT(f[0].advice, ::testing::HasSubstr("now 10.000000"));
}

}  // namespace
}  // namespace anvil::train
