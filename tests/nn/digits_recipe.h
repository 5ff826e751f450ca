// The service's digits recipe, shared by the digits acceptance test and the mixed-precision
// ones: a preset spec, AdamW at 3e-3 with a one-cycle schedule stepped per batch, batches of 64,
// the fixed 80/20 split (seed 0), inputs scaled to [0, 1].
#pragma once

#include <chrono>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/anvil.h"
#include "core/data/data.h"
#include "core/models/spec.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/train/trainer.h"
#include "tests/paths.h"

namespace anvil::test {

// The directory holding digits.csv.gz: $ANVIL_DATA_DIR, else the build's data directory.
inline std::string DigitsDir() {
  if (const char* env = std::getenv("ANVIL_DATA_DIR")) return env;
  return anvil::test::TestDataDir();
}

struct DigitsRun {
  std::shared_ptr<nn::Module> model;
  double test_loss = 0;
  std::optional<double> test_accuracy;  // evaluated in the run's precision
  double fit_seconds = 0;
};

// Trains `preset` ("mlp": flat [64] inputs; the others: [1, 8, 8] images) for `epochs` in
// `precision` (autocast; kFloat32: off).
inline DigitsRun TrainDigitsPreset(const std::string& preset, int64_t epochs, ScalarType precision = kFloat32,
                                   int loader_workers = 0) {
  manual_seed(0);
  const bool image = preset != "mlp";
  auto digits = std::make_shared<data::MapDataset>(
      std::make_shared<data::Digits>(DigitsDir(), data::DigitsOptions{.as_image = image}),
      std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale"));
  auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
  const models::BuiltModel m =
      models::build_model(models::preset_spec(preset, image ? IntArray{1, 8, 8} : IntArray{64}, 10));
  auto opt = std::make_shared<optim::AdamW>(m.module->parameters(), optim::Options{{"lr", 3e-3}});
  train::Trainer trainer(
      m.module, opt,
      {.epochs = epochs, .scheduler_per_step = true, .checkpoint_every_epoch = false, .precision = precision});
  data::DataLoader train_loader(split[0],
                                {.batch_size = 64, .shuffle = true, .num_workers = loader_workers, .seed = 1});
  trainer.set_scheduler(std::make_shared<optim::OneCycleLR>(*opt, 3e-3, epochs * train_loader.size()));
  data::DataLoader test_loader(split[1], {.batch_size = 256});
  const auto start = std::chrono::steady_clock::now();
  trainer.fit(train_loader);
  DigitsRun run;
  run.fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.model = m.module;
  std::tie(run.test_loss, run.test_accuracy) = trainer.evaluate(test_loader);
  return run;
}

}  // namespace anvil::test
