// The acceptance check of the nn stack on real data: an MLP on the built-in digits set
// (fixed 80/20 split) reaches >= 97 % test accuracy.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/models/spec.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/train/trainer.h"
#include "tests/nn/digits_recipe.h"

namespace anvil::nn {
namespace {

using test::DigitsDir;

double Accuracy(Module& model, const std::shared_ptr<data::Dataset>& ds, bool image = false) {
  NoGradGuard no_grad;
  model.eval();
  data::DataLoader loader(ds, {.batch_size = 256});
  int64_t correct = 0;
  for (auto& b : loader) {
    Tensor x = b["input"] / 16.0;
    if (image) x = x.reshape({-1, 1, 8, 8});
    correct += (model(x).argmax(1) == b["target"]).sum().item<int64_t>();
  }
  model.train();
  return static_cast<double>(correct) / static_cast<double>(ds->size());
}

TEST(DigitsTest, MlpReachesNinetySevenPercent) {
  if (!std::filesystem::exists(std::filesystem::path(DigitsDir()) / "digits.csv.gz")) {
    GTEST_SKIP() << "digits.csv.gz not in " << DigitsDir() << ": run `make data`";
  }
  manual_seed(0);
  auto digits = std::make_shared<data::Digits>(DigitsDir());
  auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
  Sequential model{std::make_shared<Linear>(64, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 128),
                   std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)};
  optim::Adam opt(model.parameters(), {{"lr", 2e-3}});
  data::DataLoader loader(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 1, .seed = 1});
  for (int epoch = 0; epoch < 40; ++epoch) {
    for (auto& b : loader) {
      opt.zero_grad();
      Tensor loss = F::cross_entropy(model(b["input"] / 16.0), b["target"]);
      loss.backward();
      opt.step();
    }
  }
  const double acc = Accuracy(model, split[1]);
  RecordProperty("test_accuracy", std::to_string(acc));
  EXPECT_GE(acc, 0.97);
  EXPECT_GE(Accuracy(model, split[0]), 0.99);
}

TEST(DigitsTest, LenetStyleCnnReachesNinetyEightPercent) {
  if (!std::filesystem::exists(std::filesystem::path(DigitsDir()) / "digits.csv.gz")) {
    GTEST_SKIP() << "digits.csv.gz not in " << DigitsDir() << ": run `make data`";
  }
  manual_seed(0);
  auto digits = std::make_shared<data::Digits>(DigitsDir());
  auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
  Sequential model{std::make_shared<Conv2d>(1, 32, std::array<int64_t, 2>{3, 3}, ConvOptions{.same = true}),
                   std::make_shared<BatchNorm2d>(32),
                   std::make_shared<ReLU>(),
                   std::make_shared<MaxPool2d>(std::array<int64_t, 2>{2, 2}),
                   std::make_shared<Conv2d>(32, 64, std::array<int64_t, 2>{3, 3}, ConvOptions{.same = true}),
                   std::make_shared<BatchNorm2d>(64),
                   std::make_shared<ReLU>(),
                   std::make_shared<MaxPool2d>(std::array<int64_t, 2>{2, 2}),
                   std::make_shared<Flatten>(),
                   std::make_shared<Linear>(64 * 2 * 2, 128),
                   std::make_shared<ReLU>(),
                   std::make_shared<Dropout>(0.25),
                   std::make_shared<Linear>(128, 10)};
  optim::Adam opt(model.parameters(), {{"lr", 2e-3}});
  data::DataLoader loader(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 1, .seed = 1});
  for (int epoch = 0; epoch < 20; ++epoch) {
    for (auto& b : loader) {
      opt.zero_grad();
      Tensor loss = F::cross_entropy(model((b["input"] / 16.0).reshape({-1, 1, 8, 8})), b["target"]);
      loss.backward();
      opt.step();
    }
  }
  const double acc = Accuracy(model, split[1], /*image=*/true);
  RecordProperty("test_accuracy", std::to_string(acc));
  std::printf("CNN test accuracy %.4f\n", acc);
  EXPECT_GE(acc, 0.98);
}

// The service's path: a preset spec, the Trainer, the fixed split; accuracy and wall time.
TEST(DigitsTest, PresetsReachTheirTargetsThroughTheTrainer) {
  if (!std::filesystem::exists(std::filesystem::path(DigitsDir()) / "digits.csv.gz")) {
    GTEST_SKIP() << "digits.csv.gz not in " << DigitsDir() << ": run `make data`";
  }
  for (const auto& [preset, target] : {std::pair<std::string, double>{"mlp", 0.97}, {"lenet5", 0.98}}) {
    const test::DigitsRun run = test::TrainDigitsPreset(preset, /*epochs=*/40, kFloat32, /*loader_workers=*/1);
    const double acc = *run.test_accuracy;
    std::printf("preset %s: test accuracy %.4f (loss %.4f) in %.2f s\n", preset.c_str(), acc, run.test_loss,
                run.fit_seconds);
    EXPECT_GE(acc, target) << preset;
  }
}

}  // namespace
}  // namespace anvil::nn
