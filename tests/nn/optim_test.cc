// Optimizers: several steps against the published update rules evaluated in float64 scalars
// here, parameter groups, unknown options, state_dict round trips; gradient clipping.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/anvil.h"
#include "core/optim/optimizer.h"
#include "tests/core/test_util.h"

namespace anvil::optim {
namespace {

using test::ErrorOf;
using test::Vals;
using ::testing::HasSubstr;

// The gradient the tests feed at step t for element i: fixed, varied, with sign changes.
double Grad(int t, size_t i) { return std::sin(1.3 * t + 0.7 * static_cast<double>(i)) * (1.0 + 0.1 * t); }

// Runs `steps` steps of `opt` on p (float64, 3 elements) with the gradients above.
std::vector<double> RunSteps(Optimizer& opt, Tensor& p, int steps) {
  for (int t = 1; t <= steps; ++t) {
    std::vector<double> g;
    for (size_t i = 0; i < 3; ++i) g.push_back(Grad(t, i));
    p.set_grad(tensor(g));
    opt.step();
  }
  return Vals(p);
}

const std::vector<double> kStart{0.5, -1.0, 2.0};

TEST(OptimTest, SgdMomentumNesterovWeightDecayMatchTheRule) {
  for (bool nesterov : {false, true}) {
    Tensor p = tensor(kStart).requires_grad_();
    SGD opt({p}, {{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"nesterov", nesterov ? 1.0 : 0.0}});
    const auto got = RunSteps(opt, p, 5);
    for (size_t i = 0; i < 3; ++i) {
      double x = kStart[i], buf = 0;
      for (int t = 1; t <= 5; ++t) {
        double g = Grad(t, i) + 0.01 * x;
        buf = t == 1 ? g : 0.9 * buf + g;
        x -= 0.1 * (nesterov ? g + 0.9 * buf : buf);
      }
      EXPECT_NEAR(got[i], x, 1e-12) << "nesterov=" << nesterov << " i=" << i;
    }
  }
}

TEST(OptimTest, AdamAndAdamWMatchTheRule) {
  for (bool decoupled : {false, true}) {
    Tensor p = tensor(kStart).requires_grad_();
    Options o{{"lr", 0.05}, {"weight_decay", 0.1}};
    std::unique_ptr<Optimizer> opt;
    if (decoupled) {
      opt = std::make_unique<AdamW>(std::vector<Tensor>{p}, o);
    } else {
      opt = std::make_unique<Adam>(std::vector<Tensor>{p}, o);
    }
    const auto got = RunSteps(*opt, p, 6);
    for (size_t i = 0; i < 3; ++i) {
      double x = kStart[i], m = 0, v = 0;
      for (int t = 1; t <= 6; ++t) {
        double g = Grad(t, i);
        if (decoupled) {
          x *= 1 - 0.05 * 0.1;
        } else {
          g += 0.1 * x;
        }
        m = 0.9 * m + 0.1 * g;
        v = 0.999 * v + 0.001 * g * g;
        const double mhat = m / (1 - std::pow(0.9, t)), vhat = v / (1 - std::pow(0.999, t));
        x -= 0.05 * mhat / (std::sqrt(vhat) + 1e-8);
      }
      EXPECT_NEAR(got[i], x, 1e-10) << opt->name() << " i=" << i;
    }
  }
}

TEST(OptimTest, RmspropCenteredWithMomentumMatchesTheRule) {
  Tensor p = tensor(kStart).requires_grad_();
  RMSprop opt({p}, {{"lr", 0.01}, {"momentum", 0.5}, {"centered", 1.0}});
  const auto got = RunSteps(opt, p, 4);
  for (size_t i = 0; i < 3; ++i) {
    double x = kStart[i], sq = 0, ga = 0, buf = 0;
    for (int t = 1; t <= 4; ++t) {
      const double g = Grad(t, i);
      sq = 0.99 * sq + 0.01 * g * g;
      ga = 0.99 * ga + 0.01 * g;
      buf = 0.5 * buf + g / (std::sqrt(sq - ga * ga) + 1e-8);
      x -= 0.01 * buf;
    }
    EXPECT_NEAR(got[i], x, 1e-10);
  }
}

// PyTorch refuses a negative alpha, eps, momentum or weight decay ("Invalid alpha value"): so
// does RMSprop here, naming the option, for the defaults and for a group's own value.
TEST(OptimTest, RmspropRefusesNegativeHyperParameters) {
  Tensor p = tensor(kStart).requires_grad_();
  for (const char* key : {"alpha", "eps", "momentum", "weight_decay"}) {
    EXPECT_THAT(ErrorOf([&] {
                  RMSprop({p}, {{key, -0.5}});
                }),
                HasSubstr(std::string("RMSprop: expected ") + key + " >= 0, got -0.5"));
  }
  Tensor q = tensor(kStart).requires_grad_();
  EXPECT_THAT(ErrorOf([&] {
                RMSprop({ParamGroup{{p}, {}}, ParamGroup{{q}, {{"momentum", -1.0}}}}, {});
              }),
              HasSubstr("expected momentum >= 0, got -1"));
  EXPECT_NO_THROW(RMSprop({p}, {{"alpha", 0.0}, {"momentum", 0.0}, {"eps", 0.0}}));
}

TEST(OptimTest, GroupsOptionsAndStateDict) {
  Tensor a = tensor(kStart).requires_grad_(), b = tensor(kStart).requires_grad_();
  SGD opt(std::vector<ParamGroup>{{{a}, {{"lr", 0.1}}}, {{b}, {{"lr", 0.01}}}}, {{"momentum", 0.9}});
  EXPECT_EQ(opt.param_groups()[1].options.at("momentum"), 0.9);
  a.set_grad(ones({3}, kFloat64));
  b.set_grad(ones({3}, kFloat64));
  opt.step();
  EXPECT_NEAR(Vals(a)[0], 0.5 - 0.1, 1e-12);
  EXPECT_NEAR(Vals(b)[0], 0.5 - 0.01, 1e-12);
  EXPECT_THAT(ErrorOf([&] {
                SGD({a}, {{"lr", 0.1}, {"weight_dacay", 0.1}});
              }),
              HasSubstr("unknown option 'weight_dacay'"));
  EXPECT_THAT(ErrorOf([&] { SGD({a}, {}); }), HasSubstr("'lr' is required"));
  EXPECT_THAT(ErrorOf([&] { SGD({a, a}, {{"lr", 1.0}}); }), HasSubstr("more than one group"));
  // Saving and loading the momentum buffers continues the same trajectory.
  const OptimizerState saved = opt.state_dict();
  Tensor a2 = a.detach().clone().requires_grad_(), b2 = b.detach().clone().requires_grad_();
  SGD copy(std::vector<ParamGroup>{{{a2}, {{"lr", 0.5}}}, {{b2}, {{"lr", 0.5}}}}, {{"momentum", 0.0}});
  copy.load_state_dict(saved);
  for (Optimizer* o : {static_cast<Optimizer*>(&opt), static_cast<Optimizer*>(&copy)}) {
    for (auto& g : o->param_groups()) g.params[0].set_grad(full({3}, 2.0, kFloat64));
    o->step();
  }
  EXPECT_TRUE(equal(a, a2));
  EXPECT_TRUE(equal(b, b2));
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
}

TEST(OptimTest, ClipGradNormReturnsTheNormAndScales) {
  Tensor a = zeros({2}).requires_grad_(), b = zeros({1}).requires_grad_();
  a.set_grad(tensor({3.0f, 0.0f}));
  b.set_grad(tensor({4.0f}));
  EXPECT_NEAR(clip_grad_norm_({a, b}, 1.0), 5.0, 1e-6);
  EXPECT_NEAR(Vals(a.grad())[0], 3.0 / 5.0, 1e-5);
  EXPECT_NEAR(Vals(b.grad())[0], 4.0 / 5.0, 1e-5);
  EXPECT_NEAR(clip_grad_norm_({a, b}, 10.0, INFINITY), 0.8, 1e-5);  // below the limit: unchanged
  b.set_grad(tensor({NAN}));
  EXPECT_THAT(ErrorOf([&] { clip_grad_norm_({a, b}, 1.0, 2.0, true); }), HasSubstr("non-finite"));
  a.set_grad(tensor({-7.0f, 0.5f}));
  clip_grad_value_({a}, 1.0);
  EXPECT_EQ(Vals(a.grad()), (std::vector<double>{-1.0, 0.5}));
}

}  // namespace
}  // namespace anvil::optim
