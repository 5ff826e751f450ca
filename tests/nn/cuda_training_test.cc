// Training on a GPU (skipped without one): the digits CNN reaches on cuda:0 the accuracy it
// reaches on the CPU, through the same Trainer the service's workers run; and the caching
// allocator serves steady-state training steps without a single device malloc.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/anvil.h"
#include "core/backend/registry.h"
#include "core/data/data.h"
#include "core/models/spec.h"
#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/train/trainer.h"

#if ANVIL_WITH_CUDA
#include "core/backend/cuda/backend.h"
#endif

namespace anvil::nn {
namespace {

std::string DigitsDir() {
  if (const char* env = std::getenv("ANVIL_DATA_DIR")) return env;
  return ANVIL_TEST_DATA_DIR;
}

// Test accuracy of the lenet5 preset after `epochs` on `device` (same seed, same batches).
double TrainDigitsCnn(Device device, int64_t epochs) {
  manual_seed(0);
  auto digits = std::make_shared<data::MapDataset>(
      std::make_shared<data::Digits>(DigitsDir(), data::DigitsOptions{.as_image = true}),
      std::make_shared<data::Lambda>([](const Tensor& x) { return x / 16.0; }, "Scale"));
  auto split = data::random_split(digits, std::vector<double>{0.8, 0.2}, /*seed=*/0);
  const models::BuiltModel m = models::build_model(models::preset_spec("lenet5", IntArray{1, 8, 8}, 10));
  m.module->to(device);
  auto opt = std::make_shared<optim::AdamW>(m.module->parameters(), optim::Options{{"lr", 3e-3}});
  train::Trainer trainer(m.module, opt, {.epochs = epochs, .checkpoint_every_epoch = false});
  data::DataLoader train_loader(split[0], {.batch_size = 64, .shuffle = true, .num_workers = 1, .seed = 1});
  data::DataLoader test_loader(split[1], {.batch_size = 256});
  trainer.fit(train_loader);
  EXPECT_EQ(m.module->parameters()[0].device(), device);
  return *trainer.evaluate(test_loader).second;
}

TEST(CudaTraining, DigitsCnnReachesTheCpuAccuracyOnCuda) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  if (!std::filesystem::exists(std::filesystem::path(DigitsDir()) / "digits.csv.gz")) {
    GTEST_SKIP() << "digits.csv.gz not in " << DigitsDir() << ": run `make data`";
  }
  const double cpu = TrainDigitsCnn(kCPU, 15);
  const double gpu = TrainDigitsCnn(CUDA(0), 15);
  std::printf("digits lenet5, 15 epochs: test accuracy cpu %.4f, cuda:0 %.4f\n", cpu, gpu);
  EXPECT_GE(gpu, 0.97);
  EXPECT_NEAR(gpu, cpu, 0.015);
}

#if ANVIL_WITH_CUDA
TEST(CudaTraining, SteadyStateStepsMakeNoDeviceMallocs) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  manual_seed(5);
  Sequential model{std::make_shared<Linear>(64, 128), std::make_shared<ReLU>(), std::make_shared<Linear>(128, 10)};
  model.to(CUDA(0));
  optim::SGD opt(model.parameters(), {{"lr", 0.1}, {"momentum", 0.9}});
  const Tensor x = randn({32, 64}).to(CUDA(0));
  const Tensor y = randint(0, 10, {32}).to(CUDA(0));
  auto step = [&] {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(model.forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  step();
  step();
  const int64_t after_warmup = cuda::memory_stats(0).num_device_mallocs;
  Tensor loss;
  for (int i = 0; i < 100; ++i) loss = step();
  EXPECT_LT(loss.item<float>(), 2.3f);
  EXPECT_EQ(cuda::memory_stats(0).num_device_mallocs, after_warmup) << "device mallocs in 100 steady-state steps";
  EXPECT_GT(cuda::memory_stats(0).reserved_bytes, 0);
}
#endif

}  // namespace
}  // namespace anvil::nn
