// Training on a GPU (skipped without one): the digits CNN reaches on cuda:0 the accuracy it
// reaches on the CPU, through the same Trainer the service's workers run; and the caching
// allocator serves steady-state training steps without a single device malloc; the fused
// optimizer steps (multi-tensor launches) match the CPU's on lists long enough to need several
// launches and a tensor whose chunks span two; scaled mixed-precision steps make no host wait.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>

#include "core/anvil.h"
#include "core/backend/registry.h"
#include "core/data/data.h"
#include "core/models/spec.h"
#include "core/nn/nn.h"
#include "core/optim/grad_scaler.h"
#include "core/optim/optimizer.h"
#include "core/train/trainer.h"
#include "tests/paths.h"

#if ANVIL_WITH_CUDA
#include "core/backend/cuda/backend.h"
#include "core/backend/cuda/runtime.h"
#endif

namespace anvil::nn {
namespace {

std::string DigitsDir() {
  if (const char* env = std::getenv("ANVIL_DATA_DIR")) return env;
  return anvil::test::TestDataDir();
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

// 45 parameters (more than one launch holds at any list depth), one of them 330 chunks of
// 65536 elements (more blocks than one launch's table), the rest small and odd-sized.
std::vector<Tensor> FusedStepParams(uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> params;
  for (int k = 0; k < 45; ++k) params.push_back(randn({k == 7 ? int64_t{330} * 65536 + 3 : int64_t{1000} + 37 * k}));
  return params;
}

TEST(CudaTraining, FusedOptimizerStepsMatchTheCpu) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  struct Case {
    const char* name;
    std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)> make;
  };
  const std::vector<Case> cases{
      {"sgd nesterov",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::SGD>(
             p, optim::Options{{"lr", 0.1}, {"momentum", 0.9}, {"nesterov", 1.0}, {"weight_decay", 1e-2}});
       }},
      {"adam",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::Adam>(p, optim::Options{{"lr", 1e-2}, {"weight_decay", 1e-2}});
       }},
      {"adamw amsgrad",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::AdamW>(p, optim::Options{{"lr", 1e-2}, {"amsgrad", 1.0}});
       }},
      {"rmsprop centered momentum",
       [](std::vector<Tensor> p) {
         return std::make_unique<optim::RMSprop>(
             p, optim::Options{{"lr", 1e-2}, {"centered", 1.0}, {"momentum", 0.9}, {"weight_decay", 1e-2}});
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<Tensor> cpu = FusedStepParams(3), gpu;
    for (Tensor& p : cpu) {
      p.requires_grad_();
      gpu.push_back(p.detach().to(CUDA(0)).requires_grad_());
    }
    auto cpu_opt = c.make(cpu);
    auto gpu_opt = c.make(gpu);
    for (int t = 0; t < 3; ++t) {
      manual_seed(100 + static_cast<uint64_t>(t));
      for (size_t k = 0; k < cpu.size(); ++k) {
        const Tensor g = randn(cpu[k].sizes());
        cpu[k].set_grad(g);
        gpu[k].set_grad(g.to(CUDA(0)));
      }
      cpu_opt->step();
      gpu_opt->step();
    }
    for (size_t k = 0; k < cpu.size(); ++k) {
      const Tensor diff = (gpu[k].detach().to(kCPU) - cpu[k].detach()).abs().max();
      EXPECT_LE(diff.item<float>(), 1e-5f) << "parameter " << k;
    }
  }
}

// GradScaler on a GPU: 100 scaled steps (unscale, clipping by norm, step, update; every 7th
// gradient infinite) of fused SGD, Adam, AdamW and RMSprop make no host wait (counted where the engine
// blocks on the GPU: cuda::host_waits) and read no value, until the skipped count is asked
// for; the parameters end where the same loop on the CPU leaves them.
TEST(CudaTraining, ScaledStepsMakeNoHostWaitPerStep) {
  if (!cuda_is_available()) GTEST_SKIP() << "no usable CUDA device: " << cuda_unavailable_reason();
  for (int which = 0; which < 4; ++which) {
    auto make = [which](const std::vector<Tensor>& ps) -> std::unique_ptr<optim::Optimizer> {
      if (which == 0) return std::make_unique<optim::SGD>(ps, optim::Options{{"lr", 0.01}, {"momentum", 0.9}});
      if (which == 1) return std::make_unique<optim::Adam>(ps, optim::Options{{"lr", 0.01}});
      if (which == 2) return std::make_unique<optim::AdamW>(ps, optim::Options{{"lr", 0.01}, {"amsgrad", 1.0}});
      return std::make_unique<optim::RMSprop>(ps, optim::Options{{"lr", 0.01}, {"momentum", 0.9}});
    };
    struct Run {
      Tensor w, b;
      int64_t waits, reads;
    };
    auto run = [&](Device device) {
      manual_seed(0);
      const Tensor w0 = randn({64, 32}), x = randn({128, 32}).to(device), target = randn({128, 64}).to(device);
      Tensor w = w0.to(device).requires_grad_(), b = zeros({64}).to(device).requires_grad_();
      const Tensor inf = full({}, INFINITY).to(device), one = full({}, 1.0).to(device);
      const std::unique_ptr<optim::Optimizer> opt = make({w, b});
      optim::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 10});
      const int64_t waits = cuda::host_waits(), reads = host_value_reads();
      for (int i = 0; i < 100; ++i) {
        opt->zero_grad();
        const Tensor loss = ((linear(x, w, b) - target).pow(2.0).mean()) * (i % 7 == 3 ? inf : one);
        scaler.scale(loss).backward();
        scaler.unscale_(*opt);
        (void)optim::clip_grad_norm_deferred_({w, b}, 1.0);
        scaler.step(*opt);
        scaler.update();
      }
      Run r{w.detach(), b.detach(), cuda::host_waits() - waits, host_value_reads() - reads};
      EXPECT_EQ(scaler.skipped_steps(), 14);  // i = 3, 10, ..., 94
      return r;
    };
    const Run gpu = run(CUDA(0));
    SCOPED_TRACE(which == 0 ? "sgd" : which == 1 ? "adam" : which == 2 ? "adamw amsgrad" : "rmsprop momentum");
    EXPECT_EQ(gpu.waits, 0) << "host waits in 100 scaled steps";
    EXPECT_EQ(gpu.reads, 0) << "values read in 100 scaled steps";
    const Run cpu = run(kCPU);
    EXPECT_LE((gpu.w.to(kCPU) - cpu.w).abs().max().item<float>(), 1e-5f);
    EXPECT_LE((gpu.b.to(kCPU) - cpu.b).abs().max().item<float>(), 1e-5f);
  }
}
#endif

}  // namespace
}  // namespace anvil::nn
