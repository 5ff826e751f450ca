// The digits presets trained end to end, Anvil beside PyTorch (bench/digits_peer.py on
// Debian's python3-torch) with the same recipe: AdamW 3e-3 + one-cycle, batch 64, 40 epochs,
// 80/20 split, inputs / 16. Reports wall time, steps/s and test accuracy.
//
// Usage: anvil_bench_digits [threads]   (needs the digits file: make data)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "bench/harness.h"
#include "core/anvil.h"
#include "core/data/data.h"
#include "core/models/spec.h"
#include "core/optim/scheduler.h"
#include "core/train/trainer.h"

#ifndef ANVIL_BENCH_DIGITS_PEER
#define ANVIL_BENCH_DIGITS_PEER "bench/digits_peer.py"
#endif

using namespace anvil;

namespace {

struct Result {
  double seconds = 0, accuracy = 0;
  int64_t steps = 0;
};

Result TrainAnvil(const std::string& preset, const std::string& dir) {
  manual_seed(0);
  const bool image = preset != "mlp";
  auto digits = std::make_shared<data::MapDataset>(
      std::make_shared<data::Digits>(dir, data::DigitsOptions{.as_image = image}),
      std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale"));
  auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, 0);
  const auto m = models::build_model(models::preset_spec(preset, image ? IntArray{1, 8, 8} : IntArray{64}, 10));
  const int64_t epochs = 40;
  auto opt = std::make_shared<optim::AdamW>(m.module->parameters(), optim::Options{{"lr", 3e-3}});
  train::Trainer trainer(
      m.module, opt,
      {.epochs = epochs, .metric_interval = 50, .scheduler_per_step = true, .checkpoint_every_epoch = false});
  data::DataLoader train_loader(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 1, .seed = 1});
  data::DataLoader test_loader(split[1], {.batch_size = 512});
  trainer.set_scheduler(std::make_shared<optim::OneCycleLR>(*opt, 3e-3, epochs * train_loader.size()));
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = trainer.fit(train_loader);
  Result out;
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  out.accuracy = *trainer.evaluate(test_loader).second;
  out.steps = r.steps;
  return out;
}

double Field(const std::string& json, const std::string& key) {
  const auto pos = json.find("\"" + key + "\":");
  return pos == std::string::npos ? -1 : std::atof(json.c_str() + pos + key.size() + 3);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  set_num_threads(threads);
  const std::string dir = data::default_data_dir();
  std::string file;
  try {
    file = data::find_digits(dir);
  } catch (const std::exception& e) {
    std::printf("anvil_bench_digits: %s\n", e.what());
    return 0;
  }
  std::printf("# Digits presets end to end, Anvil vs PyTorch (%d threads, %s)\n\n%s\n\n", threads,
              bench::CpuModel().c_str(), bench::KernelLine().c_str());
  std::printf(
      "| preset | anvil s | anvil steps/s | anvil accuracy | torch s | torch steps/s | torch accuracy | time ratio "
      "|\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const std::string preset : {"mlp", "lenet5"}) {
    const Result a = TrainAnvil(preset, dir);
    const std::string cmd = std::string("/usr/bin/python3 ") + ANVIL_BENCH_DIGITS_PEER + " " + file + " " + preset +
                            " " + std::to_string(threads) + " 2>/dev/null";
    std::string json;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[512];
      while (std::fgets(buf, sizeof buf, p)) json = buf;
      pclose(p);
    }
    const double ts = Field(json, "seconds"), tacc = Field(json, "accuracy"), tsteps = Field(json, "steps");
    if (ts > 0) {
      std::printf("| %s | %.2f | %.0f | %.2f %% | %.2f | %.0f | %.2f %% | %.2f |\n", preset.c_str(), a.seconds,
                  static_cast<double>(a.steps) / a.seconds, 100 * a.accuracy, ts, tsteps / ts, 100 * tacc,
                  a.seconds / ts);
    } else {
      std::printf("| %s | %.2f | %.0f | %.2f %% | n/a | n/a | n/a | n/a |\n", preset.c_str(), a.seconds,
                  static_cast<double>(a.steps) / a.seconds, 100 * a.accuracy);
    }
    std::fflush(stdout);
  }
  return 0;
}
