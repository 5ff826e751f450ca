// The training doctor's cost beside the digits CNN's training step: the doctor reads each
// metric interval's numbers (already on the host), so its cost per step is one on_step() call
// divided by the metric interval. Prints a markdown table (docs/doctor.md, bench/RESULTS.md).
//
//   anvil_bench_doctor [metric_interval (10)]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <vector>

#include "core/anvil.h"
#include "core/backend/cpu/kernel_info.h"
#include "core/models/spec.h"
#include "core/nn/activation_probe.h"
#include "core/nn/functional.h"
#include "core/optim/optimizer.h"
#include "core/train/doctor.h"
#include "core/train/trainer.h"

using namespace anvil;
using Clock = std::chrono::steady_clock;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t interval = argc > 1 ? std::atoll(argv[1]) : 10;
  manual_seed(0);
  // The digits CNN step: the lenet5 preset on [1, 8, 8] images, batch 64, AdamW.
  auto model = models::build_model(models::preset_spec("lenet5", {1, 8, 8}, 10)).module;
  optim::AdamW opt(model->parameters(), optim::Options{{"lr", 1e-3}});
  const Tensor x = rand({64, 1, 8, 8}), y = randint(0, 10, {64});
  auto train_step = [&] {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
  };
  // The step the trainer runs on each interval's last step: the forward under an activation
  // probe (core/nn/activation_probe.h), its shares gathered into one tensor for the interval's
  // read, as trainer.cc does.
  auto sampled_step = [&] {
    opt.zero_grad();
    Tensor loss;
    {
      nn::ActivationProbe probe;
      loss = nn::functional::cross_entropy(model->forward(x), y);
      std::vector<Tensor> shares;
      for (const nn::ActivationRecord& r : probe.records()) shares.push_back(r.share.reshape({1}));
      if (!shares.empty()) (void)cat(shares, 0);
    }
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 20; ++i) train_step();
  // Plain and sampled steps in alternating rounds, so both see the same machine.
  std::vector<double> step_us, sampled_us;
  for (int r = 0; r < 9; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < 50; ++i) train_step();
    step_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 50);
    t0 = Clock::now();
    for (int i = 0; i < 50; ++i) sampled_step();
    sampled_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / 50);
  }
  // The doctor over a long run's worth of intervals (its windows full).
  train::Doctor doctor({.loader_workers = 2, .batch_size = 64, .loss = "cross_entropy"});
  int64_t fired = 0;
  std::vector<double> call_us;
  for (int r = 0; r < 9; ++r) {
    const int calls = 20000;
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      train::StepMetrics m;
      const int64_t k = static_cast<int64_t>(r) * calls + i;
      m.step = (k + 1) * interval;
      m.loss = 2.0 * std::exp(-1e-4 * static_cast<double>(k)) + 0.1;
      m.grad_norm = 1.0 + 0.01 * std::sin(static_cast<double>(k));
      m.lr = 1e-3;
      m.data_wait_ratio = 0.01;
      m.step_seconds = step_us.back() * 1e-6;
      m.device_utilisation = 0.95;  // LOW_DEVICE_UTILISATION's and MEMORY_FRAGMENTATION's inputs
      m.memory_allocated_bytes = int64_t{64} << 20;
      m.memory_reserved_bytes = int64_t{80} << 20;
      fired += static_cast<int64_t>(doctor.on_step(m).size());
    }
    call_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
  }
  const double step = Median(step_us), call = Median(call_us);
  std::printf("CPU: %s\n", anvil::cpu_kernel_summary().c_str());
  std::printf(
      "\n| digits CNN step (batch 64) | doctor on_step | metric interval | doctor per step | share of the step |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  std::printf("| %.1f us | %.2f us | %lld | %.3f us | %.4f %% |\n", step, call, static_cast<long long>(interval),
              call / static_cast<double>(interval), 100.0 * call / static_cast<double>(interval) / step);
  std::printf("\n(%lld findings fired on the synthetic healthy stream)\n", static_cast<long long>(fired));
  // What the trainer adds per interval for those two rules: the training thread's CPU clock
  // (device_utilisation on the CPU) and the device allocator's statistics (memory_*).
  std::vector<double> reads_us;
  Allocator* allocator = cpu_allocator();
  for (int r = 0; r < 9; ++r) {
    const int calls = 20000;
    double sink = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) {
      timespec ts{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      sink += static_cast<double>(ts.tv_nsec) + static_cast<double>(allocator->stats().allocated_bytes);
    }
    reads_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
    if (sink < 0) std::printf("%f", sink);
  }
  const double reads = Median(reads_us);
  std::printf(
      "\n| the trainer's reads per interval (thread CPU clock, allocator statistics) | per step | share of the step "
      "|\n|---:|---:|---:|\n| %.2f us | %.3f us | %.4f %% |\n",
      reads, reads / static_cast<double>(interval), 100.0 * reads / static_cast<double>(interval) / step);
  // The activation sampling (DEAD_RELU, SATURATED_ACTIVATION): one step in every
  // TrainerOptions::activation_sample_intervals metric intervals.
  const double sampled = Median(sampled_us), extra = std::max(0.0, sampled - step);
  const double every = static_cast<double>(interval * train::TrainerOptions{}.activation_sample_intervals);
  std::printf(
      "\n| digits CNN step | the same step, activations sampled | extra per sampled step | steps per sample "
      "(default) | sampling per step | share of the step |\n|---:|---:|---:|---:|---:|---:|\n");
  std::printf("| %.1f us | %.1f us | %.2f us | %.0f | %.3f us | %.3f %% |\n", step, sampled, sampled - step, every,
              extra / every, 100.0 * extra / every / step);
  return 0;
}
