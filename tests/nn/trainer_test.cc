// The Trainer: accumulation equals one big batch, non-finite losses name their step and the
// last good checkpoint, early stopping restores the best weights, cancellation, and resuming
// through a checkpoint continues the same run.
#include "core/train/trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/nn/nn.h"
#include "tests/core/test_util.h"

namespace anvil::train {
namespace {

using ::testing::HasSubstr;

std::shared_ptr<data::TensorDataset> Blobs(int64_t n, uint64_t seed = 7) {
  return std::make_shared<data::TensorDataset>(data::make_blobs(n, 3, 4, 2.0, seed));
}

std::shared_ptr<nn::Sequential> Mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 16), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(16, 3)});
}

TEST(TrainerTest, AccumulatingMicroBatchesEqualsOneBigBatch) {
  std::vector<Tensor> finals;
  for (auto [batch, accumulation] : {std::pair<int64_t, int64_t>{32, 1}, {8, 4}}) {
    manual_seed(3);
    auto model = Mlp();
    model->to(kFloat64);
    auto ds = std::make_shared<data::MapDataset>(Blobs(96), [](data::Example ex) {
      ex.set("input", ex["input"].to(kFloat64));
      return ex;
    });
    auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.5}, {"momentum", 0.9}});
    Trainer t(model, opt,
              {.epochs = 1, .max_steps = 3, .accumulation_steps = accumulation, .checkpoint_every_epoch = false});
    data::DataLoader loader(ds, {.batch_size = batch});
    const TrainResult r = t.fit(loader);
    EXPECT_EQ(r.steps, 3);
    finals.push_back(model->parameters()[0].clone());
  }
  EXPECT_TRUE(allclose(finals[0], finals[1], 0, 1e-12)) << (finals[0] - finals[1]).abs().max().item<double>();
}

TEST(TrainerTest, NonFiniteLossNamesTheStepAndLastGoodCheckpoint) {
  manual_seed(0);
  auto model = Mlp();
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.1}});
  const std::string path = ::testing::TempDir() + "/nan.ckpt";
  int calls = 0;
  LossFn loss = [&](const Tensor& out, const Tensor& target) {
    Tensor l = nn::F::cross_entropy(out, target);
    return ++calls == 7 ? l * NAN : l;
  };
  Trainer t(model, opt, {.epochs = 5, .metric_interval = 4, .checkpoint_path = path, .checkpoint_every_steps = 2},
            loss);
  data::DataLoader loader(Blobs(400), {.batch_size = 8});
  try {
    t.fit(loader);
    FAIL() << "no error";
  } catch (const NonFiniteLossError& e) {
    EXPECT_EQ(e.step(), 7);
    EXPECT_THAT(e.what(), HasSubstr("training loss became nan at step 7"));
    EXPECT_THAT(e.what(), HasSubstr("last good checkpoint: " + path + " (step 6)"));
  }
}

TEST(TrainerTest, EarlyStoppingRestoresTheBestWeights) {
  manual_seed(1);
  auto model = Mlp();
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 0.05}});
  // From epoch 2 on, the rate is 10^4 times larger: validation loss gets worse, not better.
  auto sched = std::make_shared<optim::MultiStepLR>(*opt, std::vector<int64_t>{2}, 1e4);
  Trainer t(model, opt, {.epochs = 20, .patience = 1, .checkpoint_every_epoch = false});
  t.set_scheduler(sched);
  std::vector<Tensor> best_weights;
  t.set_callbacks({.on_epoch = [&](const EpochMetrics& m) {
    if (m.improved) best_weights = model->parameters();
    if (m.improved)
      for (auto& w : best_weights) w = w.clone();
  }});
  data::DataLoader train(Blobs(300), {.batch_size = 16, .shuffle = true, .seed = 2});
  data::DataLoader val(Blobs(100, 8), {.batch_size = 50});
  const TrainResult r = t.fit(train, &val);
  EXPECT_EQ(r.status, TrainResult::Status::kEarlyStopped);
  EXPECT_LT(r.epochs, 20);
  ASSERT_FALSE(best_weights.empty());
  for (size_t i = 0; i < best_weights.size(); ++i) EXPECT_TRUE(equal(model->parameters()[i], best_weights[i]));
  EXPECT_NEAR(t.evaluate(val).first, *r.best_metric, 1e-6);
}

TEST(TrainerTest, CancellationStopsAtTheNextStep) {
  manual_seed(0);
  auto model = Mlp();
  auto opt = std::make_shared<optim::Adam>(model->parameters());
  std::atomic<bool> cancel{false};
  Trainer t(model, opt, {.epochs = 100, .metric_interval = 1, .checkpoint_every_epoch = false});
  std::vector<int64_t> seen;
  t.set_callbacks({.on_step = [&](const StepMetrics& m) {
    seen.push_back(m.step);
    EXPECT_GT(m.samples_per_second, 0.0);
    EXPECT_GE(m.data_wait_ratio, 0.0);
    if (m.step == 5) cancel = true;
  }});
  data::DataLoader loader(Blobs(300), {.batch_size = 10});
  const TrainResult r = t.fit(loader, nullptr, &cancel);
  EXPECT_EQ(r.status, TrainResult::Status::kCancelled);
  EXPECT_EQ(r.steps, 5);
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2, 3, 4, 5}));
}

// Trains 3 epochs of 10 steps (stopping after `stop_at`, resuming from `resume_from`) and
// returns the train losses of the history.
std::vector<double> ResumableRun(int64_t stop_at, const std::string& resume_from, const std::string& ckpt,
                                 size_t history_max_points = MetricHistory::kDefaultMaxPoints) {
  manual_seed(4);
  auto model = Mlp();
  auto opt = std::make_shared<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-2}});
  Trainer t(model, opt,
            {.epochs = 3,
             .max_steps = stop_at,
             .metric_interval = 1,
             .checkpoint_path = ckpt,
             .checkpoint_every_steps = 5,
             .history_max_points = history_max_points});
  t.set_scheduler(std::make_shared<optim::CosineAnnealingLR>(*opt, 100));
  data::DataLoader loader(Blobs(160), {.batch_size = 16, .shuffle = true, .num_workers = 2, .seed = 9});
  if (!resume_from.empty()) t.resume(resume_from, loader);
  t.fit(loader);
  std::vector<double> losses;
  for (const auto& p : t.history()) {
    if (p.name == "train_loss") losses.push_back(p.value);
  }
  return losses;
}

TEST(TrainerTest, ResumeContinuesTheSameRun) {
  const auto run = [](int64_t stop_at, const std::string& resume_from, const std::string& ckpt) {
    return ResumableRun(stop_at, resume_from, ckpt);
  };
  const std::string ckpt = ::testing::TempDir() + "/resume_trainer.ckpt";
  const auto full = run(-1, "", ::testing::TempDir() + "/unused.ckpt");
  run(15, "", ckpt);  // stops after 15 of 30 steps, checkpointed
  const auto resumed = run(-1, ckpt, ::testing::TempDir() + "/after.ckpt");
  ASSERT_EQ(full.size(), 30u);
  EXPECT_EQ(resumed, full);  // the restored history plus the continued steps, bitwise
}

TEST(TrainerTest, ABoundedHistoryIsCheckpointedAndResumedWithItsSample) {
  // 30 steps of 3 values in 16 points: thinned three times; the checkpoint at step 15 carries
  // the sample's stride, so the resumed run keeps exactly the uninterrupted run's points.
  const std::string ckpt = ::testing::TempDir() + "/bounded_history.ckpt";
  const auto full = ResumableRun(-1, "", ::testing::TempDir() + "/bounded_unused.ckpt", 16);
  ResumableRun(15, "", ckpt, 16);
  const auto resumed = ResumableRun(-1, ckpt, ::testing::TempDir() + "/bounded_after.ckpt", 16);
  EXPECT_LE(full.size() * 3, 16u);
  EXPECT_GE(full.size(), 2u);
  EXPECT_EQ(resumed, full);
  const auto unbounded = ResumableRun(-1, "", ::testing::TempDir() + "/bounded_unused2.ckpt");
  ASSERT_EQ(unbounded.size(), 30u);
  EXPECT_EQ(full.front(), unbounded.front());  // the sample is of the same curve, from its start
}

// Early stopping across a resume: only epoch 0 counts as an improvement (min_delta is huge),
// patience 2, so the run stops after epoch 3 and puts epoch 0's weights back. Interrupted at
// the end of epoch 1's steps, the resumed run must stop at the same epoch with the same
// weights: the best value, the bad-epoch count and the best weights travel in the checkpoint.
TEST(TrainerTest, EarlyStoppingContinuesAcrossAResume) {
  struct Outcome {
    TrainResult result;
    std::vector<Tensor> weights;
  };
  const auto run = [](int64_t stop_at, const std::string& resume_from, const std::string& ckpt) {
    manual_seed(6);
    auto model = Mlp();
    auto opt = std::make_shared<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-2}});
    Trainer t(model, opt,
              {.epochs = 10,
               .max_steps = stop_at,
               .monitor = "train_loss",
               .patience = 2,
               .min_delta = 1e9,
               .checkpoint_path = ckpt});
    data::DataLoader loader(Blobs(160), {.batch_size = 16, .shuffle = true, .seed = 3});
    if (!resume_from.empty()) t.resume(resume_from, loader);
    Outcome o{t.fit(loader), {}};
    for (const Tensor& p : model->parameters()) o.weights.push_back(p.detach().clone());
    return o;
  };
  const std::string dir = ::testing::TempDir();
  const Outcome full = run(-1, "", dir + "/early_full.ckpt");
  ASSERT_EQ(full.result.status, TrainResult::Status::kEarlyStopped);
  ASSERT_EQ(full.result.epochs, 4);
  run(20, "", dir + "/early_stop.ckpt");  // 2 epochs of 10 steps, then checkpointed
  const Outcome resumed = run(-1, dir + "/early_stop.ckpt", dir + "/early_after.ckpt");
  EXPECT_EQ(resumed.result.status, TrainResult::Status::kEarlyStopped);
  EXPECT_EQ(resumed.result.epochs, full.result.epochs);
  ASSERT_TRUE(resumed.result.best_metric.has_value());
  EXPECT_EQ(*resumed.result.best_metric, *full.result.best_metric);
  ASSERT_EQ(resumed.weights.size(), full.weights.size());
  for (size_t i = 0; i < full.weights.size(); ++i) EXPECT_TRUE(equal(resumed.weights[i], full.weights[i])) << i;
}

}  // namespace
}  // namespace anvil::train
