// In-place forms: each equals its out-of-place op, bumps the version counter with its own
// name, and keeps gradients right when the tensor has history.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/anvil.h"

using namespace anvil;

namespace {

struct UnaryPair {
  const char* name;
  Tensor& (Tensor::*inplace)();
  Tensor (*outplace)(const Tensor&);
  bool positive;
};

TEST(Inplace, UnaryFormsMatchOutOfPlaceAndBumpTheVersion) {
  const UnaryPair ops[] = {
      {"neg_", &Tensor::neg_, &neg, false},       {"abs_", &Tensor::abs_, &abs, false},
      {"sign_", &Tensor::sign_, &sign, false},    {"exp_", &Tensor::exp_, &exp, false},
      {"expm1_", &Tensor::expm1_, &expm1, false}, {"log_", &Tensor::log_, &log, true},
      {"log1p_", &Tensor::log1p_, &log1p, true},  {"sqrt_", &Tensor::sqrt_, &sqrt, true},
      {"rsqrt_", &Tensor::rsqrt_, &rsqrt, true},  {"reciprocal_", &Tensor::reciprocal_, &reciprocal, true},
      {"sin_", &Tensor::sin_, &sin, false},       {"cos_", &Tensor::cos_, &cos, false},
      {"tanh_", &Tensor::tanh_, &tanh, false},    {"sigmoid_", &Tensor::sigmoid_, &sigmoid, false},
      {"relu_", &Tensor::relu_, &relu, false},    {"silu_", &Tensor::silu_, &silu, false},
      {"erf_", &Tensor::erf_, &erf, false},       {"floor_", &Tensor::floor_, &floor, false},
      {"ceil_", &Tensor::ceil_, &ceil, false},    {"round_", &Tensor::round_, &round, false},
      {"trunc_", &Tensor::trunc_, &trunc, false},
  };
  manual_seed(3);
  for (const auto& op : ops) {
    SCOPED_TRACE(op.name);
    Tensor base = op.positive ? rand({4, 5}) + 0.1 : randn({4, 5}) * 3;
    Tensor expected = op.outplace(base);
    Tensor x = base.clone().t();  // non-contiguous destination
    const uint64_t v = x._version();
    (x.*op.inplace)();
    EXPECT_TRUE(equal(x.t(), expected));
    EXPECT_EQ(x._version(), v + 1);
    EXPECT_STREQ(x.storage()->last_writer(), op.name);
  }
}

// The composite in-place forms (one product or difference, then add_ with alpha) keep
// history through a non-leaf, broadcast their operands into self, and refuse a result
// that would not fit self.
TEST(Inplace, CompositeFormsRecordHistoryAndBroadcast) {
  const Tensor a = tensor({1.0, 2.0, 3.0}, kFloat64).requires_grad_();
  const Tensor b = tensor({4.0, 5.0, 6.0}, kFloat64).requires_grad_();
  const Tensor c = tensor({0.5, -1.0, 2.0}, kFloat64).requires_grad_();
  Tensor y = a * 1.0;
  y.lerp_(b, 0.25);
  y.addcmul_(b, c, 2.0);
  y.addcdiv_(b, c, -1.0);
  const auto g = autograd::grad({y.sum()}, {a, b, c});
  // y = a + 0.25 (b - a) + 2 b c - b / c
  const std::vector<double> bv{4, 5, 6}, cv{0.5, -1, 2};
  std::vector<double> want_b, want_c;
  for (int i = 0; i < 3; ++i) {
    want_b.push_back(0.25 + 2 * cv[i] - 1 / cv[i]);
    want_c.push_back(2 * bv[i] + bv[i] / (cv[i] * cv[i]));
  }
  EXPECT_TRUE(allclose(g[0], full({3}, 0.75, kFloat64)));
  EXPECT_TRUE(allclose(g[1], tensor(want_b)));
  EXPECT_TRUE(allclose(g[2], tensor(want_c)));
  Tensor m = zeros({2, 3}, kFloat64);
  m.addcmul_(b.detach(), c.detach(), 1.0);  // [3] operands broadcast into [2, 3]
  EXPECT_TRUE(allclose(m.select(0, 1), b.detach() * c.detach()));
  Tensor small = zeros({3}, kFloat64);
  EXPECT_THROW(small.addcmul_(zeros({2, 3}, kFloat64), zeros({3}, kFloat64), 1.0), Error);
}

TEST(Inplace, BinaryAndCompositeForms) {
  Tensor a = tensor({1.0, 2.0, 3.0}, kFloat64);
  Tensor b = tensor({4.0, 5.0, 6.0}, kFloat64);
  EXPECT_TRUE(allclose(a.clone().pow_(tensor({2.0}, kFloat64)), a * a));
  EXPECT_TRUE(allclose(b.clone().remainder_(tensor({4.0}, kFloat64)), tensor({0.0, 1.0, 2.0}, kFloat64)));
  EXPECT_TRUE(allclose(a.clone().lerp_(b, 0.25), a + (b - a) * 0.25));
  EXPECT_TRUE(allclose(a.clone().addcmul_(a, b, 2), a + a * b * 2));
  EXPECT_TRUE(allclose(a.clone().addcdiv_(a, b, 2), a + a / b * 2));
  // Integer tensors cannot hold a float result in place (PyTorch's rule).
  Tensor i = arange(3);
  EXPECT_THROW(i.div_(tensor({2.0})), TypeError);
  EXPECT_THROW(i.add_(1.5), TypeError);
  i.add_(2);
  EXPECT_EQ(i.to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4}));
  // Broadcasting may not grow the destination.
  Tensor small = zeros({3});
  EXPECT_THROW(small.add_(zeros({2, 3})), Error);
}

TEST(Inplace, ExpandedDestinationIsRefused) {
  Tensor e = zeros({1, 3}).expand({4, 3});
  try {
    e.add_(1);
    FAIL() << "expected an error";
  } catch (const Error& err) {
    EXPECT_THAT(err.what(), ::testing::HasSubstr("more than one element of the written-to tensor"));
  }
}

TEST(Inplace, ChainOfInplaceOpsOnNonLeafHasCorrectGradient) {
  // y = ((2x).exp_() * 3).sigmoid_() ; compare with the out-of-place graph.
  Tensor x = tensor({0.1, -0.4, 0.7}, kFloat64).requires_grad_();
  Tensor y = x * 2;
  y.exp_();
  y.mul_(3);
  y.sigmoid_();
  y.sum().backward();
  Tensor g1 = x.grad().clone();
  Tensor x2 = x.detach().clone().requires_grad_();
  sigmoid(exp(x2 * 2) * 3).sum().backward();
  EXPECT_TRUE(allclose(g1, x2.grad(), 1e-12, 1e-12));
}

}  // namespace

namespace {
TEST(BoolTensors, MaxMinSortAndConversions) {
  Tensor b = tensor(std::vector<bool>{false, true, false}, IntArray{3});
  EXPECT_TRUE(b.max().item<bool>());
  EXPECT_FALSE(b.min().item<bool>());
  EXPECT_THROW(b.argmax(), TypeError);  // PyTorch: argmax does not support bool input
  EXPECT_EQ(std::get<0>(sort(b)).to_vector<bool>(), (std::vector<bool>{false, false, true}));
  EXPECT_EQ(arange(3).to(kInt16).to_vector<int16_t>(), (std::vector<int16_t>{0, 1, 2}));
  EXPECT_EQ(scalar_tensor(-7, kInt8).item<int8_t>(), -7);
}
}  // namespace
