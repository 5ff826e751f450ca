// Mixed-precision training through the Trainer (TrainerOptions::precision, docs/amp.md):
// bfloat16 digits presets reach float32's accuracy within half a point; float16 with a loss
// scale that overflows skips those steps, backs off and still converges; a run with the scaler
// resumes bitwise from a checkpoint; the scale and skipped steps reach the metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/amp/autocast.h"
#include "core/anvil.h"
#include "core/data/data.h"
#include "core/models/archive.h"
#include "core/models/spec.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/train/trainer.h"
#include "tests/nn/digits_recipe.h"

namespace anvil::train {
namespace {

using test::DigitsDir;

bool HaveDigits() { return std::filesystem::exists(std::filesystem::path(DigitsDir()) / "digits.csv.gz"); }

// The service's recipe in `precision`: the test accuracy (evaluated in that precision) and the
// trained first-layer weight; the master weights stay float32.
std::pair<double, Tensor> DigitsAccuracy(const std::string& preset, ScalarType precision, int64_t epochs) {
  const test::DigitsRun run = test::TrainDigitsPreset(preset, epochs, precision);
  for (const Tensor& p : run.model->parameters()) EXPECT_EQ(p.dtype(), kFloat32) << "master weights stay float32";
  return {*run.test_accuracy, run.model->parameters()[0].clone()};
}

TEST(AmpTraining, Bfloat16DigitsPresetsReachFloat32AccuracyWithinHalfAPoint) {
  if (!HaveDigits()) GTEST_SKIP() << "digits.csv.gz not in " << DigitsDir() << ": run `make data`";
  for (const std::string preset : {"mlp", "lenet5"}) {
    const auto [fp32, w32] = DigitsAccuracy(preset, kFloat32, 30);
    const auto [bf16, w16] = DigitsAccuracy(preset, kBFloat16, 30);
    // The runs took different paths (bfloat16 products round differently) to the same accuracy.
    const double moved = (w32 - w16).abs().max().item<double>();
    EXPECT_GT(moved, 1e-4) << preset << ": the bfloat16 run trained exactly as the float32 one";
    std::printf("preset %s: float32 %.4f, bfloat16 %.4f\n", preset.c_str(), fp32, bf16);
    RecordProperty(preset + "_fp32", std::to_string(fp32));
    RecordProperty(preset + "_bf16", std::to_string(bf16));
    EXPECT_GE(fp32, 0.96) << preset;
    EXPECT_GE(bf16, fp32 - 0.005) << preset << ": bfloat16 lost more than half a point";
  }
}

// A two-layer model whose second layer overflows float16 (3.2e6 > 65504) on inputs of 100:
// anomaly detection names that layer; "autocast": false on it in the spec keeps it in float32,
// and the model then runs finite under the same region.
std::shared_ptr<nn::Sequential> Overflowing(bool second_in_float32) {
  const std::string spec = std::string(R"({"input_shape": [4], "layers": [
      {"type": "linear", "out_features": 8},
      {"type": "linear", "out_features": 3)") +
                           (second_in_float32 ? R"(, "autocast": false)" : "") + "}]}";
  auto model = models::build_model(spec).module;
  NoGradGuard no_grad;
  for (auto& [name, p] : model->named_parameters())
    p.fill_(name.find("bias") != std::string::npos ? 0.0 : name.rfind("0.", 0) == 0 ? 1.0 : 1000.0);
  return std::dynamic_pointer_cast<nn::Sequential>(model);
}

TEST(AmpTraining, AnomalyNamesTheLayerAndAutocastFalseKeepsItInFloat32) {
  const Tensor x = full({2, 4}, 100.0);
  {
    auto model = Overflowing(false);
    AutocastGuard amp(DeviceType::CPU, kFloat16);
    EXPECT_FALSE(isfinite((*model)(x).to(kFloat32)).any().item<bool>());  // silently inf without the check
    autocast::AnomalyGuard anomaly;
    try {
      (void)(*model)(x);
      ADD_FAILURE() << "no anomaly reported";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("Sequential layer 1 (Linear): AMP anomaly: linear produced inf in its float16 output [2, 3]"),
                std::string::npos)
          << m;
      EXPECT_NE(m.find("input 0: float16 [2, 8] in [400, 400]"), std::string::npos) << m;
    }
  }
  auto kept = Overflowing(true);
  EXPECT_FALSE((*kept)[1]->autocast());
  EXPECT_TRUE((*kept)[0]->autocast());
  AutocastGuard amp(DeviceType::CPU, kFloat16);
  autocast::AnomalyGuard anomaly;
  const Tensor y = (*kept)(x);
  EXPECT_EQ(y.dtype(), kFloat32);
  EXPECT_TRUE(allclose(y, full({2, 3}, 3.2e6)));
  // The key is checked like every other one.
  EXPECT_THROW(models::build_model(R"({"input_shape": [4], "layers": [{"type": "relu", "autocast": 1}]})"), Error);
}

// The Trainer's amp_anomaly option: the float16 run fails at its first forward, naming the layer.
TEST(AmpTraining, TheTrainersAnomalyOptionFailsTheRunNamingTheLayer) {
  auto model = Overflowing(false);
  auto opt = std::make_shared<optim::SGD>(model->parameters(), optim::Options{{"lr", 1e-3}});
  Trainer t(model, opt, {.epochs = 1, .checkpoint_every_epoch = false, .precision = kFloat16, .amp_anomaly = true});
  data::DataLoader loader(std::make_shared<data::TensorDataset>(full({8, 4}, 100.0), zeros({8}, kInt64)),
                          {.batch_size = 4});
  try {
    t.fit(loader);
    ADD_FAILURE() << "the run did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Sequential layer 1 (Linear): AMP anomaly"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.step(), 0);
}

// A model archive keeps its serving precision and accuracies; a precision no one can serve in
// is refused when the archive loads, naming the file, not later when it serves.
TEST(AmpTraining, ArchivesKeepTheServingPrecisionAndRefuseUnknownOnes) {
  const auto built = models::build_model(R"({"input_shape": [4], "layers": [{"type": "linear", "out_features": 3}]})");
  const std::string path = ::testing::TempDir() + "/amp_archive.anvil";
  models::ModelInfo info{"m", 1, "job", {}, 0};
  info.precision = "bf16";
  info.accuracy = {{"fp32", 0.97}, {"bf16", 0.96}};
  models::save_model_archive(path, *built.module, built.spec, info);
  const models::LoadedModel loaded = models::load_model_archive(path);
  EXPECT_EQ(loaded.info.precision, "bf16");
  EXPECT_EQ(loaded.info.accuracy, info.accuracy);
  info.precision = "fp8";
  models::save_model_archive(path, *built.module, built.spec, info);
  try {
    (void)models::load_model_archive(path);
    ADD_FAILURE() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad \"anvil.info\" metadata: precision: expected"), std::string::npos)
        << e.what();
  }
}

std::shared_ptr<data::TensorDataset> Blobs(int64_t n) {
  return std::make_shared<data::TensorDataset>(data::make_blobs(n, 3, 4, 2.0, 7));
}

std::shared_ptr<nn::Sequential> Mlp() {
  return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(4, 32), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(32, 3)});
}

// SGD with momentum (skips inside its fused kernel) or AdamW (its step count on the device).
std::shared_ptr<optim::Optimizer> OverflowOptimizer(bool adamw, const std::vector<Tensor>& params) {
  if (adamw) return std::make_shared<optim::AdamW>(params, optim::Options{{"lr", 0.01}});
  return std::make_shared<optim::SGD>(params, optim::Options{{"lr", 0.05}, {"momentum", 0.9}});
}

// A float16 trainer whose first loss scale, 2^40, overflows float16 gradients.
Trainer OverflowingTrainer(const std::shared_ptr<nn::Sequential>& model, const std::shared_ptr<optim::Optimizer>& opt,
                           int64_t epochs, int64_t metric_interval) {
  optim::GradScalerOptions scaler;
  scaler.init_scale = std::ldexp(1.0, 40);
  return Trainer(model, opt,
                 {.epochs = epochs,
                  .metric_interval = metric_interval,
                  .checkpoint_every_epoch = false,
                  .precision = kFloat16,
                  .grad_scaler = scaler});
}

// A float16 run whose first loss scale (2^40) overflows float16 gradients: the scaler skips
// those steps (no weight changes), halves the scale each time until the gradients fit, and the
// run still converges. The metrics carry the scale and the skipped count.
TEST(AmpTraining, Float16OverflowsAreSkippedTheScaleBacksOffAndTheRunConverges) {
  // SGD skips inside its fused kernel; AdamW too, with its step count on the device, which
  // must end at the number of steps taken.
  for (const bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    manual_seed(3);
    auto model = Mlp();
    const std::shared_ptr<optim::Optimizer> opt = OverflowOptimizer(adamw, model->parameters());
    Trainer t = OverflowingTrainer(model, opt, 8, 1);
    std::vector<StepMetrics> seen;
    t.set_callbacks({.on_step = [&](const StepMetrics& m) { seen.push_back(m); }});
    const Tensor w0 = model->parameters()[0].clone();
    data::DataLoader loader(Blobs(640), {.batch_size = 32, .shuffle = true, .seed = 2});
    const TrainResult r = t.fit(loader);
    ASSERT_EQ(r.steps, 160);
    ASSERT_EQ(seen.size(), 160u);
    // float16's largest value is 65504: a scale above ~2^16 times these gradients overflows.
    EXPECT_GE(t.skipped_steps(), 10);
    EXPECT_LE(t.skipped_steps(), 40);
    EXPECT_EQ(seen.back().skipped_steps, t.skipped_steps());
    // Every skipped step halved the scale; the growth interval (2000) was never reached.
    EXPECT_EQ(seen.back().loss_scale, std::ldexp(1.0, 40 - static_cast<int>(t.skipped_steps())));
    EXPECT_EQ(t.grad_scaler().get_scale(), seen.back().loss_scale);
    // The first step overflowed: skipped, the weights untouched, the scale halved.
    EXPECT_EQ(seen.front().skipped_steps, 1);
    EXPECT_EQ(seen.front().loss_scale, std::ldexp(1.0, 39));
    EXPECT_FALSE(equal(w0, model->parameters()[0]));  // later steps were taken
    double first = 0, last = 0;
    for (int i = 0; i < 10; ++i) {
      first += seen[static_cast<size_t>(i)].loss / 10;
      last += seen[seen.size() - 1 - static_cast<size_t>(i)].loss / 10;
    }
    EXPECT_LT(last, 0.25 * first) << "the float16 run did not converge: loss " << first << " -> " << last;
    for (const Tensor& p : model->parameters()) EXPECT_EQ(p.dtype(), kFloat32);
    if (adamw) {
      EXPECT_EQ(opt->state_dict().params.at(0).step, r.steps - t.skipped_steps());
    }
  }
}

// The trainer's float16 loop reads values back only at its metric intervals and epoch ends,
// never per step: one epoch of 20 steps and one of 40 (one metric interval each, no
// validation) make the same number of host reads, with SGD and with AdamW, overflowing steps
// included (the scale starts at 2^40).
TEST(AmpTraining, TheTrainersScaledLoopReadsNothingPerStep) {
  for (const bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    std::vector<int64_t> reads;
    for (const int64_t samples : {320, 640}) {
      manual_seed(5);
      auto model = Mlp();
      const std::shared_ptr<optim::Optimizer> opt = OverflowOptimizer(adamw, model->parameters());
      Trainer t = OverflowingTrainer(model, opt, 1, 1000);
      data::DataLoader loader(Blobs(samples), {.batch_size = 16, .shuffle = true, .seed = 2});
      const int64_t before = host_value_reads();
      const TrainResult r = t.fit(loader);
      reads.push_back(host_value_reads() - before);
      EXPECT_EQ(r.steps, samples / 16);
      EXPECT_GT(t.skipped_steps(), 0);
    }
    EXPECT_EQ(reads[0], reads[1]) << "host reads grew with the number of steps: " << reads[0] << " in 20 steps, "
                                  << reads[1] << " in 40";
  }
}

// float16 with the scaler, stopped at step 15 and resumed from its checkpoint, gives the losses
// of the uninterrupted run bit for bit: the scale (mid-back-off at the stop) and the skipped
// count travel in the checkpoint.
std::vector<double> ScaledRun(int64_t stop_at, const std::string& resume_from, const std::string& ckpt,
                              int64_t* skipped = nullptr, double* scale = nullptr) {
  manual_seed(4);
  auto model = Mlp();
  auto opt = std::make_shared<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-2}});
  optim::GradScalerOptions scaler;
  scaler.init_scale = std::ldexp(1.0, 28);
  scaler.growth_interval = 4;  // growth and back-off both happen within the run
  Trainer t(model, opt,
            {.epochs = 3,
             .max_steps = stop_at,
             .metric_interval = 1,
             .checkpoint_path = ckpt,
             .checkpoint_every_steps = 5,
             .precision = kFloat16,
             .grad_scaler = scaler});
  data::DataLoader loader(Blobs(160), {.batch_size = 16, .shuffle = true, .seed = 9});
  if (!resume_from.empty()) t.resume(resume_from, loader);
  t.fit(loader);
  if (skipped != nullptr) *skipped = t.skipped_steps();
  if (scale != nullptr) *scale = t.grad_scaler().get_scale();
  std::vector<double> losses;
  for (const auto& p : t.history()) {
    if (p.name == "train_loss" || p.name == "loss_scale") losses.push_back(p.value);
  }
  return losses;
}

TEST(AmpTraining, ResumeWithTheScalerContinuesTheSameRunBitwise) {
  const std::string dir = ::testing::TempDir();
  int64_t full_skipped = 0, resumed_skipped = 0, stop_skipped = 0;
  double full_scale = 0, resumed_scale = 0;
  const auto full = ScaledRun(-1, "", dir + "/amp_unused.ckpt", &full_skipped, &full_scale);
  ScaledRun(15, "", dir + "/amp_resume.ckpt", &stop_skipped);
  const auto resumed =
      ScaledRun(-1, dir + "/amp_resume.ckpt", dir + "/amp_after.ckpt", &resumed_skipped, &resumed_scale);
  ASSERT_EQ(full.size(), 60u);  // 30 losses and 30 scales
  EXPECT_EQ(resumed, full);
  EXPECT_GT(stop_skipped, 0) << "the first 15 steps should skip some (scale 2^28)";
  EXPECT_EQ(resumed_skipped, full_skipped);
  EXPECT_EQ(resumed_scale, full_scale);
  // A float32 trainer refuses the float16 run's checkpoint rather than dropping its scaler.
  manual_seed(4);
  auto model = Mlp();
  auto opt = std::make_shared<optim::Adam>(model->parameters(), optim::Options{{"lr", 1e-2}});
  Trainer plain(model, opt, {.epochs = 3});
  data::DataLoader loader(Blobs(160), {.batch_size = 16, .shuffle = true, .seed = 9});
  try {
    plain.resume(dir + "/amp_resume.ckpt", loader);
    ADD_FAILURE() << "resumed without a scaler";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loss scaling"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anvil::train
