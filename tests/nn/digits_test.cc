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

namespace anvil::nn {
namespace {

std::string DigitsDir() {
  if (const char* env = std::getenv("ANVIL_DATA_DIR")) return env;
  return ANVIL_TEST_DATA_DIR;
}

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
    manual_seed(0);
    const bool image = preset != "mlp";
    auto digits = std::make_shared<data::MapDataset>(
        std::make_shared<data::Digits>(DigitsDir(), data::DigitsOptions{.as_image = image}),
        std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale"));
    auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
    const models::BuiltModel m =
        models::build_model(models::preset_spec(preset, image ? IntArray{1, 8, 8} : IntArray{64}, 10));
    // The recipe the service uses by default: AdamW with a one-cycle schedule.
    const int64_t epochs = 40;
    auto opt = std::make_shared<optim::AdamW>(m.module->parameters(), optim::Options{{"lr", 3e-3}});
    train::Trainer trainer(m.module, opt,
                           {.epochs = epochs, .scheduler_per_step = true, .checkpoint_every_epoch = false});
    data::DataLoader train_loader(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 1, .seed = 1});
    trainer.set_scheduler(std::make_shared<optim::OneCycleLR>(*opt, 3e-3, epochs * train_loader.size()));
    data::DataLoader test_loader(split[1], {.batch_size = 256});
    const auto start = std::chrono::steady_clock::now();
    trainer.fit(train_loader);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto [loss, acc] = trainer.evaluate(test_loader);
    std::printf("preset %s: test accuracy %.4f (loss %.4f) in %.2f s\n", preset.c_str(), *acc, loss, secs);
    EXPECT_GE(*acc, target) << preset;
  }
}

}  // namespace
}  // namespace anvil::nn
