// The doctor's on_data_stall action as the device worker wires it (workers::event_callbacks):
// a DATA_STALL warning doubles the training loader's workers from the next epoch (at least 2,
// at most the CPUs available and kMaxAddedWorkers), once, reported as DOCTOR_ADDED_WORKERS; an
// info-level wait and a spec without the action change nothing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "core/anvil.h"
#include "core/nn/nn.h"
#include "core/train/doctor.h"
#include "core/util/cpu_features.h"
#include "workers/job_steps.h"

namespace anvil::workers {
namespace {

// A stalled interval after warm-up: `share` of a 10 ms step spent waiting for data.
train::StepMetrics Stalled(int64_t step, double share) {
  train::StepMetrics m;
  m.step = step;
  m.loss = 1.0;
  m.grad_norm = 1.0;
  m.lr = 1e-3;
  m.step_seconds = 0.01;
  m.data_wait_ratio = share;
  return m;
}

struct Outcome {
  std::vector<std::string> codes;
  std::vector<train::Finding> actions;
};

Outcome Drive(const std::string& on_data_stall, double share, data::DataLoader& loader) {
  v1::JobSpec spec;
  spec.mutable_doctor()->set_on_data_stall(on_data_stall);
  auto model = std::make_shared<nn::Linear>(2, 2);
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.1}});
  train::Trainer trainer(model, opt, {.checkpoint_every_epoch = false});
  auto doctor = std::make_shared<train::Doctor>(train::DoctorContext{.loader_workers = loader.options().num_workers});
  Outcome run;
  const std::function<void(const WorkerEvent&)> emit = [&](const WorkerEvent& e) {
    if (e.kind != WorkerEvent::Kind::kFinding) return;
    run.codes.push_back(e.finding.code);
    if (e.finding.code.rfind("DOCTOR_", 0) == 0) run.actions.push_back(e.finding);
  };
  train::Callbacks callbacks =
      event_callbacks(WorkerEvent{}, 100, emit, doctor, doctor_actions(spec, trainer, &loader));
  for (int64_t i = 1; i <= 6; ++i) callbacks.on_step(Stalled(10 * i, share));
  return run;
}

std::vector<int64_t> Targets(data::DataLoader& loader) {
  std::vector<int64_t> out;
  for (data::Example& b : loader) {
    for (int64_t v : b["target"].to_vector<int64_t>()) out.push_back(v);
  }
  return out;
}

TEST(DoctorActionsTest, ADataStallWarningAddsLoaderWorkersFromTheNextEpochOnce) {
  auto ds = std::make_shared<data::TensorDataset>(randn({40, 2}), arange(40, TensorOptions(kInt64)));
  data::DataLoader loader(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  data::DataLoader reference(ds, {.batch_size = 8, .shuffle = true, .seed = 3});
  const std::vector<int64_t> first = Targets(loader);
  const Outcome run = Drive("add_workers", 0.45, loader);
  const int expected = std::min(kMaxAddedWorkers, std::max(1, available_cpu_threads()));
  ASSERT_EQ(run.actions.size(), 1u) << ::testing::PrintToString(run.codes);  // once, though DATA_STALL repeats
  EXPECT_EQ(run.actions[0].code, "DOCTOR_ADDED_WORKERS");
  if (expected >= 2) {
    EXPECT_THAT(run.actions[0].advice, ::testing::HasSubstr("runs 2 workers from the next epoch, up from 0"));
    EXPECT_EQ(loader.options().num_workers, 0) << "the running epoch keeps its count";
    const std::vector<int64_t> second = Targets(loader);
    EXPECT_EQ(loader.options().num_workers, 2);
    // The batches are those the loader would have given anyway.
    EXPECT_EQ(first, Targets(reference));
    EXPECT_EQ(second, Targets(reference));
  } else {
    EXPECT_THAT(run.actions[0].advice, ::testing::HasSubstr("the most this process's 1 CPUs allow"));
  }
  // An info-level wait (15 %) and a spec without the action: nothing is done.
  data::DataLoader quiet(ds, {.batch_size = 8});
  EXPECT_TRUE(Drive("add_workers", 0.15, quiet).actions.empty());
  EXPECT_TRUE(Drive("", 0.45, quiet).actions.empty());
  (void)Targets(quiet);
  EXPECT_EQ(quiet.options().num_workers, 0);
}

// The spec's thresholds reach the worker's doctor (make_doctor): a 30 % wait warns under the
// default line and is only worth knowing under a 50 % one.
TEST(DoctorThresholds, TheSpecsThresholdsReachTheWorkersDoctor) {
  for (const bool relaxed : {false, true}) {
    v1::JobSpec spec;
    if (relaxed) (*spec.mutable_doctor()->mutable_thresholds())["data_stall_warning"] = 0.5;
    std::shared_ptr<train::Doctor> doctor = make_doctor(spec, kCPU);
    std::vector<train::Finding> found;
    for (int64_t i = 1; i <= 4; ++i)
      for (train::Finding& f : doctor->on_step(Stalled(10 * i, 0.3))) found.push_back(std::move(f));
    ASSERT_EQ(found.size(), 1u);
    EXPECT_EQ(found[0].code, "DATA_STALL");
    EXPECT_EQ(found[0].severity, relaxed ? train::Severity::kInfo : train::Severity::kWarning);
  }
}

}  // namespace
}  // namespace anvil::workers
