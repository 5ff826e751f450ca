// GradScaler against PyTorch's update rule (torch.cuda.amp.GradScaler: backoff on a
// non-finite step, growth after growth_interval finite steps in a row), its skipped steps, its
// state machine's errors and its state_dict.
#include "core/optim/grad_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "core/anvil.h"
#include "core/optim/optimizer.h"

namespace anvil::optim {
namespace {

void ExpectError(const std::function<void()>& f, const std::string& words) {
  try {
    f();
    ADD_FAILURE() << "no error; expected: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(GradScaler, FollowsPyTorchsUpdateRuleOverAScriptedSeries) {
  Tensor p = zeros({3}).requires_grad_();
  SGD sgd({p}, {{"lr", 0.5}});
  GradScaler scaler({.init_scale = 8.0, .growth_factor = 2.0, .backoff_factor = 0.5, .growth_interval = 3});
  // F: finite gradients (d loss / dp = 1), I: an infinite one.
  const std::string series = "FFFFIFFFIIF";
  // The rule, by hand: growth every 3rd finite step in a row, halving on each infinite one.
  const std::vector<double> expected_scale{8, 8, 16, 16, 8, 8, 8, 16, 8, 4, 4};
  double expected_p = 0;
  for (size_t i = 0; i < series.size(); ++i) {
    sgd.zero_grad();
    const double c = series[i] == 'F' ? 1.0 : INFINITY;
    const Tensor loss = (p * c).sum();
    scaler.scale(loss).backward();
    scaler.step(sgd);                         // skipped on the device for an infinite gradient
    if (series[i] == 'F') expected_p -= 0.5;  // lr * the unscaled gradient
    EXPECT_FLOAT_EQ(p.detach()[0].item<float>(), static_cast<float>(expected_p)) << "step " << i;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), expected_scale[i]) << "after step " << i;
  }
  EXPECT_EQ(scaler.skipped_steps(), 3);
}

// The same series through every optimizer path: SGD, Adam, AdamW and RMSprop fused (the flag
// decided inside the kernel; Adam's and RMSprop's step counts on the device), SGD, Adam and
// RMSprop per-tensor (the host decides), SGD with momentum and dampening, RMSprop centered with
// momentum: each skips exactly the infinite steps, and the counts are those of the steps taken.
TEST(GradScaler, EveryOptimizerPathSkipsTheSameSteps) {
  const std::string series = "IFIFFIIF";  // the first step infinite: new momentum buffers skipped too
  for (int path = 0; path < 9; ++path) {
    auto make = [path](const Tensor& param) -> std::unique_ptr<Optimizer> {
      const std::vector<Tensor> ps{param};
      if (path == 0) return std::make_unique<SGD>(ps, Options{{"lr", 0.1}, {"momentum", 0.9}});
      if (path == 1) return std::make_unique<SGD>(ps, Options{{"lr", 0.1}, {"fused", 0.0}});
      if (path == 2) return std::make_unique<SGD>(ps, Options{{"lr", 0.1}, {"momentum", 0.9}, {"dampening", 0.5}});
      if (path == 3) return std::make_unique<Adam>(ps, Options{{"lr", 0.1}});
      if (path == 4) return std::make_unique<Adam>(ps, Options{{"lr", 0.1}, {"fused", 0.0}});
      if (path == 5) return std::make_unique<AdamW>(ps, Options{{"lr", 0.1}, {"amsgrad", 1.0}});
      if (path == 6) return std::make_unique<RMSprop>(ps, Options{{"lr", 0.1}});
      if (path == 7) return std::make_unique<RMSprop>(ps, Options{{"lr", 0.1}, {"fused", 0.0}});
      return std::make_unique<RMSprop>(ps, Options{{"lr", 0.1}, {"centered", 1.0}, {"momentum", 0.9}});
    };
    Tensor p = tensor({1.0, -2.0}).requires_grad_();
    const std::unique_ptr<Optimizer> opt = make(p);
    // The reference: the same optimizer stepped only on the finite steps, no scaler.
    Tensor q = tensor({1.0, -2.0}).requires_grad_();
    const std::unique_ptr<Optimizer> ref = make(q);
    GradScaler scaler({.init_scale = 4.0});
    for (char c : series) {
      opt->zero_grad();
      scaler.scale((p * p * (c == 'F' ? 1.0 : INFINITY)).sum()).backward();
      scaler.step(*opt);
      scaler.update();
      if (c == 'F') {
        ref->zero_grad();
        (q * q).sum().backward();
        ref->step();
      }
      EXPECT_TRUE(allclose(p.detach(), q.detach(), 1e-6, 1e-7)) << "path " << path;
    }
    EXPECT_EQ(scaler.skipped_steps(), 4) << "path " << path;
    if (path >= 3) {  // SGD keeps no count
      EXPECT_EQ(opt->state_dict().params.at(0).step, 4) << "path " << path;
    }
  }
}

// No host read per step: 100 scaled steps (unscale, clipping by norm, step, update; every 7th
// gradient infinite) of fused SGD with momentum, Adam, AdamW with AMSGrad and RMSprop read
// nothing back until the metrics are asked for. The per-tensor path (fused 0) reads the flag
// once a step: what the count sees.
TEST(GradScaler, AScaledLoopMakesNoHostReadPerStep) {
  manual_seed(0);
  const Tensor w0 = randn({8, 4}), b0 = zeros({8});
  const Tensor x = randn({16, 4}), target = randn({16, 8});
  const Tensor inf = full({}, INFINITY), one = full({}, 1.0);
  for (int which = 0; which < 5; ++which) {
    Tensor w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    std::unique_ptr<Optimizer> opt;
    if (which == 0) opt = std::make_unique<SGD>(std::vector<Tensor>{w, b}, Options{{"lr", 0.01}, {"momentum", 0.9}});
    if (which == 1) opt = std::make_unique<Adam>(std::vector<Tensor>{w, b}, Options{{"lr", 0.01}});
    if (which == 2) opt = std::make_unique<AdamW>(std::vector<Tensor>{w, b}, Options{{"lr", 0.01}, {"amsgrad", 1.0}});
    if (which == 3) opt = std::make_unique<RMSprop>(std::vector<Tensor>{w, b}, Options{{"lr", 0.01}});
    if (which == 4) opt = std::make_unique<RMSprop>(std::vector<Tensor>{w, b}, Options{{"lr", 0.01}, {"fused", 0.0}});
    SCOPED_TRACE(opt->name() + " #" + std::to_string(which));
    GradScaler scaler({.init_scale = 1024.0, .growth_interval = 10});
    const int64_t before = host_value_reads();
    for (int i = 0; i < 100; ++i) {
      opt->zero_grad();
      const Tensor loss = ((linear(x, w, b) - target).pow(2.0).mean()) * (i % 7 == 3 ? inf : one);
      scaler.scale(loss).backward();
      scaler.unscale_(*opt);
      (void)clip_grad_norm_deferred_({w, b}, 1.0);
      scaler.step(*opt);
      scaler.update();
    }
    EXPECT_EQ(host_value_reads() - before, which == 4 ? 100 : 0) << "host reads in 100 scaled steps";
    EXPECT_EQ(scaler.skipped_steps(), 14);  // i = 3, 10, ..., 94
    EXPECT_TRUE(isfinite(w).all().item<bool>());
    if (which != 0) {
      EXPECT_EQ(opt->state_dict().params.at(0).step, 86);
    }
  }
}

TEST(GradScaler, UnscaledGradientsAreTheTrueOnes) {
  Tensor p = tensor({1.0, 2.0}).requires_grad_();
  SGD sgd({p}, {{"lr", 0.1}});
  GradScaler scaler({.init_scale = 1024.0});
  scaler.scale((p * p).sum()).backward();
  EXPECT_TRUE(allclose(p.grad(), tensor({2048.0, 4096.0})));
  scaler.unscale_(sgd);
  EXPECT_TRUE(allclose(p.grad(), tensor({2.0, 4.0})));  // 2p, ready for clipping
  scaler.step(sgd);
  EXPECT_TRUE(allclose(p.detach(), tensor({0.8, 1.6})));
  scaler.update();
}

TEST(GradScaler, RefusesPyTorchsMisuses) {
  Tensor p = ones({2}).requires_grad_();
  SGD sgd({p}, {{"lr", 0.1}});
  GradScaler scaler;
  ExpectError([&] { scaler.update(); }, "No inf checks were recorded prior to update.");
  ExpectError([&] { scaler.unscale_(sgd); }, "No inf checks were recorded for this optimizer.");
  GradScaler fresh;
  fresh.scale(p.sum()).backward();
  fresh.unscale_(sgd);
  ExpectError([&] { fresh.unscale_(sgd); },
              "unscale_() has already been called on this optimizer since the last update().");
  fresh.step(sgd);
  ExpectError([&] { fresh.step(sgd); }, "step() has already been called since the last update().");
  ExpectError([&] { fresh.unscale_(sgd); }, "unscale_() is being called after step().");
  fresh.update();
  EXPECT_THROW(GradScaler({.growth_factor = 0.5}), Error);
}

TEST(GradScaler, StateDictRoundTripsAndDisabledIsTransparent) {
  GradScaler a({.init_scale = 256.0, .growth_interval = 5});
  Tensor p = ones({2}).requires_grad_();
  SGD sgd({p}, {{"lr", 0.1}});
  for (int i = 0; i < 2; ++i) {
    sgd.zero_grad();
    a.scale(p.sum()).backward();
    a.step(sgd);
    a.update();
  }
  const auto state = a.state_dict();
  EXPECT_EQ(state.at("scale"), 256.0);
  EXPECT_EQ(state.at("_growth_tracker"), 2.0);
  GradScaler b;
  b.load_state_dict(state);
  EXPECT_EQ(b.get_scale(), 256.0);
  EXPECT_EQ(b.growth_tracker(), 2);
  EXPECT_EQ(b.state_dict(), state);
  GradScaler off({.enabled = false});
  const Tensor loss = p.sum();
  EXPECT_EQ(off.scale(loss).impl(), loss.impl());
  EXPECT_TRUE(off.state_dict().empty());
}

}  // namespace
}  // namespace anvil::optim
