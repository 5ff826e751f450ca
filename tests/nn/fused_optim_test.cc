// Fused optimizer steps (core/ops/foreach.h): SGD, Adam, AdamW, AMSGrad and RMSprop on many float32
// tensors (one crossing the CPU kernel's task split, one empty, one non-contiguous that takes
// the per-tensor path) against the update rules evaluated in float64 here, fused against
// unfused, each tensor written once per step, parameters at different step counts, Adam's and
// RMSprop's step counts kept on the device (bitwise against the host's, across paths and
// checkpoints), and the fused calls' argument errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "core/anvil.h"
#include "core/ops/foreach.h"
#include "core/optim/optimizer.h"
#include "tests/core/test_util.h"

namespace anvil::optim {
namespace {

using test::ErrorOf;
using ::testing::HasSubstr;

// The gradient of parameter k, element i, at step t.
double Grad(int k, int t, int64_t i) {
  return std::sin(1.3 * t + 0.7 * static_cast<double>(i % 1000) + k) * (1.0 + 0.1 * t);
}
double Start(int k, int64_t i) { return std::cos(0.3 * static_cast<double>(i % 977) + k); }

const std::vector<IntArray> kShapes{{3}, {257, 129}, {0, 4}, {70001}, {5, 7}};

// Parameters of kShapes; the last is made non-contiguous (a transposed leaf) when asked.
std::vector<Tensor> MakeParams(bool with_transposed) {
  std::vector<Tensor> params;
  for (size_t k = 0; k < kShapes.size(); ++k) {
    const IntArray& shape = kShapes[k];
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<float>(Start(static_cast<int>(k), i));
    Tensor p = tensor(v, shape);
    if (with_transposed && k + 1 == kShapes.size()) p = p.reshape({shape[1], shape[0]}).t();
    params.push_back(p.requires_grad_());
  }
  return params;
}

// Sets each parameter's gradient for step t (same strides as the parameter).
void SetGrads(std::vector<Tensor>& params, int t) {
  for (size_t k = 0; k < params.size(); ++k) {
    Tensor& p = params[k];
    std::vector<float> g(static_cast<size_t>(p.numel()));
    for (int64_t i = 0; i < p.numel(); ++i)
      g[static_cast<size_t>(i)] = static_cast<float>(Grad(static_cast<int>(k), t, i));
    p.set_grad(tensor(g, p.sizes()));
  }
}

// Runs `steps` steps and returns the parameters' values (row-major) as doubles.
std::vector<std::vector<double>> RunSteps(Optimizer& opt, std::vector<Tensor>& params, int steps) {
  for (int t = 1; t <= steps; ++t) {
    SetGrads(params, t);
    opt.step();
  }
  std::vector<std::vector<double>> out;
  for (const Tensor& p : params) out.push_back(p.detach().to_vector<double>());
  return out;
}

// One element's trajectory under a rule: x is the parameter, state the rule's buffers.
using Rule = std::function<void(double& x, double g, std::vector<double>& state, int t)>;

std::vector<std::vector<double>> Reference(const Rule& rule, int steps, bool with_transposed) {
  const std::vector<Tensor> shapes = MakeParams(with_transposed);
  std::vector<std::vector<double>> out;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const std::vector<double> start = shapes[k].detach().to_vector<double>();  // float32-rounded start
    std::vector<double> x(start.size());
    for (size_t i = 0; i < start.size(); ++i) {
      double xi = start[i];
      std::vector<double> state(3, 0.0);
      for (int t = 1; t <= steps; ++t) {
        rule(xi, static_cast<double>(static_cast<float>(Grad(static_cast<int>(k), t, static_cast<int64_t>(i)))), state,
             t);
      }
      x[i] = xi;
    }
    out.push_back(x);
  }
  return out;
}

// max over elements of |a - b| / max(1, |b|).
double MaxRelError(const std::vector<std::vector<double>>& a, const std::vector<std::vector<double>>& b) {
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].size(), b[k].size());
    for (size_t i = 0; i < a[k].size() && i < b[k].size(); ++i) {
      worst = std::max(worst, std::abs(a[k][i] - b[k][i]) / std::max(1.0, std::abs(b[k][i])));
    }
  }
  return worst;
}

struct Case {
  std::string name;
  std::function<std::unique_ptr<Optimizer>(std::vector<Tensor>, bool fused)> make;
  Rule rule;
};

std::vector<Case> Cases() {
  auto with = [](Options o, bool fused) {
    o["fused"] = fused ? 1.0 : 0.0;
    return o;
  };
  std::vector<Case> cases;
  cases.push_back({"sgd",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<SGD>(p, with({{"lr", 0.1}}, f));
                   },
                   [](double& x, double g, std::vector<double>&, int) { x -= 0.1 * g; }});
  cases.push_back({"sgd momentum dampening weight decay",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<SGD>(
                         p, with({{"lr", 0.05}, {"momentum", 0.9}, {"dampening", 0.25}, {"weight_decay", 0.01}}, f));
                   },
                   [](double& x, double g, std::vector<double>& s, int t) {
                     g += 0.01 * x;
                     s[0] = t == 1 ? g : 0.9 * s[0] + 0.75 * g;
                     x -= 0.05 * s[0];
                   }});
  cases.push_back({"sgd nesterov",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<SGD>(p, with({{"lr", 0.05}, {"momentum", 0.8}, {"nesterov", 1.0}}, f));
                   },
                   [](double& x, double g, std::vector<double>& s, int t) {
                     s[0] = t == 1 ? g : 0.8 * s[0] + g;
                     x -= 0.05 * (g + 0.8 * s[0]);
                   }});
  auto adam_rule = [](bool decoupled, bool amsgrad, double wd) {
    return [=](double& x, double g, std::vector<double>& s, int t) {
      const double lr = 0.01;
      if (decoupled) {
        x *= 1 - lr * wd;
      } else {
        g += wd * x;
      }
      s[0] = 0.9 * s[0] + 0.1 * g;
      s[1] = 0.999 * s[1] + 0.001 * g * g;
      s[2] = std::max(s[2], s[1]);
      const double vhat = (amsgrad ? s[2] : s[1]) / (1 - std::pow(0.999, t));
      x -= lr * (s[0] / (1 - std::pow(0.9, t))) / (std::sqrt(vhat) + 1e-8);
    };
  };
  cases.push_back({"adam weight decay",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<Adam>(p, with({{"lr", 0.01}, {"weight_decay", 0.1}}, f));
                   },
                   adam_rule(false, false, 0.1)});
  cases.push_back({"adamw",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<AdamW>(p, with({{"lr", 0.01}}, f));
                   },
                   adam_rule(true, false, 0.01)});
  cases.push_back({"adamw amsgrad",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<AdamW>(p, with({{"lr", 0.01}, {"amsgrad", 1.0}}, f));
                   },
                   adam_rule(true, true, 0.01)});
  // s: square average, grad average, momentum buffer.
  auto rmsprop_rule = [](double alpha, double wd, bool centered, double momentum) {
    return [=](double& x, double g, std::vector<double>& s, int) {
      const double lr = 0.01, eps = 1e-8;
      g += wd * x;
      s[0] = alpha * s[0] + (1 - alpha) * g * g;
      double avg = std::sqrt(s[0]) + eps;
      if (centered) {
        s[1] += (1 - alpha) * (g - s[1]);
        avg = std::sqrt(s[0] - s[1] * s[1]) + eps;
      }
      if (momentum > 0) {
        s[2] = momentum * s[2] + g / avg;
        x -= lr * s[2];
      } else {
        x -= lr * g / avg;
      }
    };
  };
  cases.push_back({"rmsprop",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<RMSprop>(p, with({{"lr", 0.01}}, f));
                   },
                   rmsprop_rule(0.99, 0.0, false, 0.0)});
  cases.push_back(
      {"rmsprop centered momentum weight decay",
       [=](std::vector<Tensor> p, bool f) {
         return std::make_unique<RMSprop>(
             p, with({{"lr", 0.01}, {"alpha", 0.9}, {"weight_decay", 0.01}, {"centered", 1.0}, {"momentum", 0.5}}, f));
       },
       rmsprop_rule(0.9, 0.01, true, 0.5)});
  cases.push_back({"rmsprop momentum",
                   [=](std::vector<Tensor> p, bool f) {
                     return std::make_unique<RMSprop>(p, with({{"lr", 0.01}, {"momentum", 0.9}}, f));
                   },
                   rmsprop_rule(0.99, 0.0, false, 0.9)});
  return cases;
}

TEST(FusedOptimTest, FusedAndPerTensorStepsMatchTheRulesOnManyTensors) {
  for (const Case& c : Cases()) {
    SCOPED_TRACE(c.name);
    const auto want = Reference(c.rule, 6, /*with_transposed=*/true);
    std::vector<Tensor> fused_params = MakeParams(true), plain_params = MakeParams(true);
    ASSERT_FALSE(fused_params.back().is_contiguous());
    auto fused = c.make(fused_params, true);
    auto plain = c.make(plain_params, false);
    const auto got_fused = RunSteps(*fused, fused_params, 6);
    const auto got_plain = RunSteps(*plain, plain_params, 6);
    // float32 arithmetic against float64: a few ulps per step.
    EXPECT_LT(MaxRelError(got_fused, want), 2e-5);
    EXPECT_LT(MaxRelError(got_plain, want), 2e-5);
    EXPECT_LT(MaxRelError(got_fused, got_plain), 2e-6);
  }
}

TEST(FusedOptimTest, AFusedStepWritesEachTensorOnce) {
  // The per-tensor AdamW writes p twice (decay, update) and exp_avg_sq twice (mul_, addcmul_);
  // the fused step reads and writes each element of each tensor once.
  for (bool fused : {true, false}) {
    Tensor p = randn({10}).requires_grad_();
    AdamW opt({p}, {{"fused", fused ? 1.0 : 0.0}});
    p.set_grad(randn({10}));
    opt.step();
    const uint64_t before = p._version();
    p.set_grad(randn({10}));
    opt.step();
    EXPECT_EQ(p._version() - before, fused ? 1u : 2u) << "fused=" << fused;
  }
}

TEST(FusedOptimTest, ParametersAtDifferentStepCountsGetTheirOwnBiasCorrection) {
  // b has no gradient in step 1, so at step 2 a is at t=2 and b at t=1.
  std::vector<std::vector<double>> results;
  for (bool fused : {true, false}) {
    Tensor a = tensor(std::vector<float>{1.0f, -2.0f}).requires_grad_(),
           b = tensor(std::vector<float>{0.5f}).requires_grad_();
    Adam opt({a, b}, {{"lr", 0.1}, {"fused", fused ? 1.0 : 0.0}});
    a.set_grad(tensor(std::vector<float>{0.3f, -0.1f}));
    opt.step();
    a.set_grad(tensor(std::vector<float>{0.2f, 0.4f}));
    b.set_grad(tensor(std::vector<float>{-0.7f}));
    opt.step();
    results.push_back(
        {a.detach().to_vector<double>()[0], a.detach().to_vector<double>()[1], b.detach().to_vector<double>()[0]});
    EXPECT_EQ(opt.state_dict().params.at(0).step, 2);
    EXPECT_EQ(opt.state_dict().params.at(1).step, 1);
  }
  // b's first step moves it by lr exactly (Adam's first step is lr * sign(g) up to eps).
  EXPECT_NEAR(results[0][2], 0.5 + 0.1, 1e-6);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(results[0][i], results[1][i], 1e-6) << i;
}

// The fused Adam counts steps on the parameters' device (ParamState::device_step): its bias
// corrections come from there. Bitwise the same as the same kernel given the host's count.
TEST(FusedOptimTest, StepCountsOnTheDeviceGiveTheHostCountsBits) {
  for (bool amsgrad : {false, true}) {
    SCOPED_TRACE(amsgrad ? "amsgrad" : "adam");
    manual_seed(3);
    const Tensor start = randn({1000});
    Tensor p1 = start.clone(), m1 = zeros({1000}), v1 = zeros({1000}), x1 = zeros({1000});
    Tensor p2 = start.clone(), m2 = zeros({1000}), v2 = zeros({1000}), x2 = zeros({1000});
    Tensor count = tensor(std::vector<double>{0.0, 0.0, 0.0});
    OptimizerStepArgs a;
    a.lr = 0.01;
    a.weight_decay = 0.02;
    a.amsgrad = amsgrad;
    const std::vector<Tensor> vmax1 = amsgrad ? std::vector<Tensor>{x1} : std::vector<Tensor>{};
    const std::vector<Tensor> vmax2 = amsgrad ? std::vector<Tensor>{x2} : std::vector<Tensor>{};
    for (int t = 1; t <= 6; ++t) {
      const Tensor g = randn({1000});
      OptimizerStepArgs host = a;
      host.bias_correction1 = 1.0 - std::pow(a.beta1, t);
      host.bias_correction2 = 1.0 - std::pow(a.beta2, t);
      fused_adam_({p1}, {g}, {m1}, {v1}, vmax1, host);
      fused_adam_({p2}, {g}, {m2}, {v2}, vmax2, {count}, a);
      EXPECT_EQ(count.to_vector<double>()[0], t);
    }
    EXPECT_TRUE(equal(p1, p2)) << "max |diff| " << (p1 - p2).abs().max().item<float>();
    EXPECT_TRUE(equal(v1, v2));
  }
}

// A parameter whose gradient is sometimes strided takes the per-tensor path on those steps:
// its count moves between the device and the host and no step is lost or counted twice.
// The optimizers whose fused path keeps the step count on the device: AdamW, and RMSprop
// centered with momentum (every state list).
std::unique_ptr<Optimizer> DeviceCountOptimizer(int which, const Tensor& p, double fused) {
  if (which == 0) return std::make_unique<AdamW>(std::vector<Tensor>{p}, Options{{"lr", 0.05}, {"fused", fused}});
  return std::make_unique<RMSprop>(std::vector<Tensor>{p},
                                   Options{{"lr", 0.01}, {"centered", 1.0}, {"momentum", 0.5}, {"fused", fused}});
}

TEST(FusedOptimTest, AParameterMovingBetweenPathsKeepsItsStepCount) {
  for (int which : {0, 1}) {
    manual_seed(4);
    const Tensor start = randn({6, 5});
    Tensor a = start.clone().requires_grad_(), b = start.clone().requires_grad_();
    const auto mixed = DeviceCountOptimizer(which, a, 1.0), plain = DeviceCountOptimizer(which, b, 0.0);
    SCOPED_TRACE(mixed->name());
    for (int t = 1; t <= 7; ++t) {
      const Tensor g = randn({5, 6}).t();  // strided
      a.set_grad(t % 3 == 0 ? g : g.contiguous());
      b.set_grad(g.contiguous());
      mixed->step();
      plain->step();
      EXPECT_EQ(mixed->state_dict().params.at(0).step, t);
    }
    EXPECT_TRUE(allclose(a.detach(), b.detach(), 1e-6, 1e-7));
  }
}

// A checkpoint taken with the count on the device resumes bitwise.
TEST(FusedOptimTest, ResumesBitwiseFromADeviceCount) {
  for (int which : {0, 1}) {
    manual_seed(5);
    const Tensor start = randn({64});
    std::vector<Tensor> grads;
    for (int t = 0; t < 8; ++t) grads.push_back(randn({64}));
    Tensor a = start.clone().requires_grad_();
    const auto whole = DeviceCountOptimizer(which, a, 1.0);
    SCOPED_TRACE(whole->name());
    for (const Tensor& g : grads) {
      a.set_grad(g);
      whole->step();
    }
    Tensor b = start.clone().requires_grad_();
    OptimizerState saved;
    {
      const auto first = DeviceCountOptimizer(which, b, 1.0);
      for (int t = 0; t < 5; ++t) {
        b.set_grad(grads[static_cast<size_t>(t)]);
        first->step();
      }
      saved = first->state_dict();
    }
    EXPECT_EQ(saved.params.at(0).step, 5);
    const auto resumed = DeviceCountOptimizer(which, b, 1.0);
    resumed->load_state_dict(saved);
    for (size_t t = 5; t < grads.size(); ++t) {
      b.set_grad(grads[t]);
      resumed->step();
    }
    EXPECT_TRUE(equal(a.detach(), b.detach()));
    EXPECT_EQ(resumed->state_dict().params.at(0).step, 8);
  }
}

TEST(FusedOptimTest, StepCountListsAreChecked) {
  Tensor p = zeros({4}), g = zeros({4}), m = zeros({4}), v = zeros({4});
  Tensor p2 = zeros({4}), g2 = zeros({4}), m2 = zeros({4}), v2 = zeros({4});
  OptimizerStepArgs a;
  a.lr = 0.1;
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {g}, {m}, {v}, {}, {}, a); }),
              HasSubstr("expected 1 step_counts (one per parameter), got 0"));
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {g}, {m}, {v}, {}, {zeros({3})}, a); }),
              HasSubstr("step_counts[0] must be a contiguous float64 tensor of 3 elements"));
  const Tensor count = zeros({3}, kFloat64);
  EXPECT_THAT(ErrorOf([&] {
                fused_adam_({p, p2}, {g, g2}, {m, m2}, {v, v2}, {}, {count, count}, a);
              }),
              HasSubstr("a step count shares memory with another step count or a list's tensor"));
  const Tensor p64 = zeros({3}, kFloat64);  // a float64 parameter passed as its own count
  EXPECT_THAT(ErrorOf([&] {
                fused_adam_({p64}, {zeros({3}, kFloat64)}, {zeros({3}, kFloat64)}, {zeros({3}, kFloat64)}, {}, {p64},
                            a);
              }),
              HasSubstr("a step count shares memory"));
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {g}, {m}, {v}, {}, {count}, a, zeros({2})); }),
              HasSubstr("found_inf must be a float32 tensor of one element"));
  EXPECT_EQ(p._version(), 0u);
  EXPECT_EQ(count.to_vector<double>()[0], 0.0);
  // A flag that is set: nothing moves, the count included.
  fused_adam_({p}, {ones({4})}, {m}, {v}, {}, {count}, a, ones({1}));
  EXPECT_EQ(count.to_vector<double>()[0], 0.0);
  EXPECT_TRUE(equal(p, zeros({4})));
  fused_adam_({p}, {ones({4})}, {m}, {v}, {}, {count}, a, zeros({1}));
  EXPECT_EQ(count.to_vector<double>()[0], 1.0);
  EXPECT_NEAR(p.to_vector<double>()[0], -0.1, 1e-6);  // Adam's first step: lr * sign(g)
}

TEST(FusedOptimTest, FusedCallsRejectMismatchedLists) {
  Tensor p = zeros({4}), g = zeros({4}), m = zeros({4}), v = zeros({4});
  OptimizerStepArgs a;
  a.lr = 0.1;
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {g}, {m}, {}, {}, a); }),
              HasSubstr("expected 1 exp_avg_sqs (one per parameter), got 0"));
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {zeros({4}, kFloat64)}, {m}, {v}, {}, a); }),
              HasSubstr("expected grads[0] to be float32 or float64 like its parameter (float32), got float64"));
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {zeros({5})}, {m}, {v}, {}, a); }),
              HasSubstr("grads[0] has shape [5] but its parameter has shape [4]"));
  Tensor strided = zeros({8}).slice(0, 0, 8, 2);
  EXPECT_THAT(ErrorOf([&] { fused_sgd_({p}, {strided}, {}, a); }), HasSubstr("grads[0] is not contiguous"));
  EXPECT_THAT(ErrorOf([&] { fused_sgd_({p}, {g}, {m}, a); }), HasSubstr("momentum buffers given with momentum 0"));
  EXPECT_THAT(ErrorOf([&] { fused_sgd_({zeros({4}, kFloat16)}, {zeros({4}, kFloat16)}, {}, a); }),
              HasSubstr("to be float32 or float64"));
  EXPECT_THAT(ErrorOf([&] { fused_adam_({p}, {g}, {m}, {m}, {}, a); }), HasSubstr("the same memory appears twice"));
  const Tensor count = zeros({3}, kFloat64);
  EXPECT_THAT(ErrorOf([&] { fused_rmsprop_({p}, {g}, {m}, {v}, {}, {count}, a); }),
              HasSubstr("grad_avgs given without centered"));
  EXPECT_THAT(ErrorOf([&] { fused_rmsprop_({p}, {g}, {m}, {}, {v}, {count}, a); }),
              HasSubstr("momentum buffers given with momentum 0"));
  a.centered = true;
  EXPECT_THAT(ErrorOf([&] { fused_rmsprop_({p}, {g}, {m}, {}, {}, {count}, a); }),
              HasSubstr("expected 1 grad_avgs (one per parameter), got 0"));
  EXPECT_THAT(ErrorOf([&] { fused_rmsprop_({p}, {g}, {m}, {v}, {}, {}, a); }),
              HasSubstr("expected 1 step_counts (one per parameter), got 0"));
  EXPECT_EQ(count._version(), 0u);
  // Nothing was written by a refused call.
  EXPECT_EQ(p._version(), 0u);
  EXPECT_FALSE(fused_step_supported(p, strided));
  EXPECT_TRUE(fused_step_supported(p, g));
}

TEST(FusedOptimTest, AStateSavedWithoutTheFusedOptionLoads) {
  Tensor p = ones({2}).requires_grad_();
  SGD opt({p}, {{"lr", 0.1}, {"momentum", 0.9}});
  p.set_grad(ones({2}));
  opt.step();
  OptimizerState state = opt.state_dict();
  for (auto& g : state.groups) g.erase("fused");
  SGD copy({p}, {{"lr", 0.1}, {"momentum", 0.9}});
  copy.load_state_dict(state);
  EXPECT_EQ(copy.param_groups()[0].options.at("fused"), 1.0);
  p.set_grad(ones({2}));
  copy.step();  // momentum buffer 1 -> 0.9 + 1: p = 1 - 0.1 - 0.19
  EXPECT_NEAR(p.detach().to_vector<double>()[0], 1.0 - 0.1 - 0.19, 1e-6);
}

}  // namespace
}  // namespace anvil::optim
