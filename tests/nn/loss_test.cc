// Losses: values against float64 formulas evaluated element by element here, gradients by
// gradcheck (central differences), and the errors PITFALLS 4 asks for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/anvil.h"
#include "core/nn/functional.h"
#include "tests/core/test_util.h"

namespace anvil::nn {
namespace {

using F::Reduction;
using test::ErrorOf;
using test::Vals;
using ::testing::HasSubstr;

// log-softmax of row r of a [N, C] float64 tensor, by the definition.
std::vector<double> LogSoftmaxRow(const std::vector<double>& v, int64_t C, int64_t r) {
  double mx = -1e300;
  for (int64_t c = 0; c < C; ++c) mx = std::max(mx, v[static_cast<size_t>(r * C + c)]);
  double s = 0;
  for (int64_t c = 0; c < C; ++c) s += std::exp(v[static_cast<size_t>(r * C + c)] - mx);
  std::vector<double> out;
  for (int64_t c = 0; c < C; ++c) out.push_back(v[static_cast<size_t>(r * C + c)] - mx - std::log(s));
  return out;
}

void ExpectGradcheck(const std::function<Tensor(const Tensor&)>& loss, const Tensor& x) {
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{loss(in[0])}; },
                               {x.detach().requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(LossTest, RegressionLossesMatchFormulas) {
  Tensor x = randn({4, 3}, kFloat64) * 2.0, y = randn({4, 3}, kFloat64);
  const auto xv = Vals(x), yv = Vals(y);
  double mse = 0, l1 = 0, smooth = 0, huber = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    const double d = std::abs(xv[i] - yv[i]);
    mse += d * d;
    l1 += d;
    smooth += d < 0.5 ? 0.5 * d * d / 0.5 : d - 0.25;
    huber += d < 2.0 ? 0.5 * d * d : 2.0 * (d - 1.0);
  }
  const double n = static_cast<double>(xv.size());
  EXPECT_NEAR(F::mse_loss(x, y).item<double>(), mse / n, 1e-12);
  EXPECT_NEAR(F::l1_loss(x, y, Reduction::kSum).item<double>(), l1, 1e-12);
  EXPECT_NEAR(F::smooth_l1_loss(x, y, Reduction::kMean, 0.5).item<double>(), smooth / n, 1e-12);
  EXPECT_NEAR(F::huber_loss(x, y, Reduction::kMean, 2.0).item<double>(), huber / n, 1e-12);
  EXPECT_EQ(F::mse_loss(x, y, Reduction::kNone).sizes(), x.sizes());
  ExpectGradcheck([&](const Tensor& a) { return F::mse_loss(a, y); }, x);
  ExpectGradcheck([&](const Tensor& a) { return F::smooth_l1_loss(a, y, Reduction::kSum, 0.5); }, x);
}

TEST(LossTest, ShapeMismatchIsAnErrorNotABroadcast) {
  // The classic: predictions [N, 1] against targets [N] broadcast to [N, N].
  const std::string msg = ErrorOf([] { F::mse_loss(zeros({8, 1}), zeros({8})); });
  EXPECT_THAT(msg, HasSubstr("input shape [8, 1] and target shape [8] differ"));
}

TEST(LossTest, CrossEntropyWithIndicesWeightsIgnoreAndSmoothing) {
  const int64_t N = 5, C = 4;
  Tensor logits = randn({N, C}, kFloat64) * 3.0;
  Tensor target = tensor(std::vector<int64_t>{0, 3, -100, 2, 1});
  Tensor weight = tensor(std::vector<double>{1.0, 2.0, 0.5, 3.0});
  const auto lv = Vals(logits), wv = Vals(weight);
  const double eps = 0.1;
  double num = 0, den = 0, smooth_num = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = std::vector<int64_t>{0, 3, -100, 2, 1}[static_cast<size_t>(r)];
    if (t == -100) continue;
    const auto lp = LogSoftmaxRow(lv, C, r);
    num += -wv[static_cast<size_t>(t)] * lp[static_cast<size_t>(t)];
    den += wv[static_cast<size_t>(t)];
    for (int64_t c = 0; c < C; ++c) smooth_num += -wv[static_cast<size_t>(c)] * lp[static_cast<size_t>(c)];
  }
  F::CrossEntropyOptions o{.weight = weight};
  EXPECT_NEAR(F::cross_entropy(logits, target, o).item<double>(), num / den, 1e-12);
  o.label_smoothing = eps;
  const double expected = (1 - eps) * num / den + eps / C * smooth_num / den;
  EXPECT_NEAR(F::cross_entropy(logits, target, o).item<double>(), expected, 1e-12);
  ExpectGradcheck([&](const Tensor& a) { return F::cross_entropy(a, target, o); }, logits);
}

// nll_loss runs as one fused row: each reduction against the definition, the mean over
// counted weight (all rows ignored: NaN, as in PyTorch), int32 targets, and the kernel's
// gradient equal to the one recorded under create_graph (composed from scatter).
TEST(LossTest, NllLossReductionsMatchTheDefinition) {
  const int64_t N = 6, C = 5;
  const Tensor logp = log_softmax(randn({N, C}, kFloat64), 1);
  const std::vector<int64_t> tv{4, 0, -100, 2, 2, 1};
  const Tensor target = tensor(tv);
  const Tensor weight = tensor(std::vector<double>{0.5, 1.0, 2.0, 0.0, 3.0});
  const auto lv = Vals(logp), wv = Vals(weight);
  std::vector<double> per_row(N, 0.0);
  double sum = 0, den = 0;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t t = tv[static_cast<size_t>(r)];
    if (t == -100) continue;
    per_row[static_cast<size_t>(r)] = -wv[static_cast<size_t>(t)] * lv[static_cast<size_t>(r * C + t)];
    sum += per_row[static_cast<size_t>(r)];
    den += wv[static_cast<size_t>(t)];
  }
  F::CrossEntropyOptions o{.weight = weight, .reduction = Reduction::kNone};
  const auto none = Vals(F::nll_loss(logp, target, o));
  ASSERT_EQ(none.size(), per_row.size());
  for (size_t r = 0; r < per_row.size(); ++r) EXPECT_NEAR(none[r], per_row[r], 1e-15);
  o.reduction = Reduction::kSum;
  EXPECT_NEAR(F::nll_loss(logp, target, o).item<double>(), sum, 1e-14);
  o.reduction = Reduction::kMean;
  EXPECT_NEAR(F::nll_loss(logp, target, o).item<double>(), sum / den, 1e-14);
  EXPECT_NEAR(F::nll_loss(logp, target.to(kInt32), o).item<double>(), sum / den, 1e-14);
  const Tensor all_ignored = full({N}, Scalar(int64_t{-100}), kInt64);
  EXPECT_TRUE(std::isnan(F::nll_loss(logp, all_ignored).item<double>()));
  for (Reduction red : {Reduction::kNone, Reduction::kMean, Reduction::kSum}) {
    o.reduction = red;
    SCOPED_TRACE(static_cast<int>(red));
    ExpectGradcheck([&](const Tensor& a) { return F::nll_loss(a, target, o); }, logp);
    const Tensor up = red == Reduction::kNone ? randn({N}, kFloat64) : full({}, 2.5, kFloat64);
    const Tensor a = logp.detach().requires_grad_();
    const Tensor fused = autograd::grad({F::nll_loss(a, target, o)}, {a}, {up})[0];
    // With create_graph the gradient is recorded as a function of the upstream gradient.
    const Tensor up_var = up.detach().requires_grad_();
    const Tensor recorded = autograd::grad({F::nll_loss(a, target, o)}, {a}, {up_var}, {}, /*create_graph=*/true)[0];
    EXPECT_TRUE(recorded.requires_grad());
    EXPECT_TRUE(allclose(fused, recorded.detach(), 0, 1e-15));
  }
}

TEST(LossTest, CrossEntropyWithProbabilitiesAndSpatialTargets) {
  Tensor logits = randn({3, 5}, kFloat64);
  Tensor probs = softmax(randn({3, 5}, kFloat64), 1);
  const auto lv = Vals(logits), pv = Vals(probs);
  double total = 0;
  for (int64_t r = 0; r < 3; ++r) {
    const auto lp = LogSoftmaxRow(lv, 5, r);
    for (int64_t c = 0; c < 5; ++c) total += -pv[static_cast<size_t>(r * 5 + c)] * lp[static_cast<size_t>(c)];
  }
  EXPECT_NEAR(F::cross_entropy(logits, probs).item<double>(), total / 3, 1e-12);
  // [N, C, H] logits with [N, H] targets equal the flattened [N*H, C] problem.
  Tensor seg = randn({2, 3, 4}, kFloat64);
  Tensor seg_t = randint(0, 3, {2, 4});
  Tensor flat = F::cross_entropy(seg.movedim(1, -1).reshape({-1, 3}), seg_t.reshape({-1}));
  EXPECT_NEAR(F::cross_entropy(seg, seg_t).item<double>(), flat.item<double>(), 1e-12);
}

TEST(LossTest, CrossEntropyErrorsSayWhatWasExpected) {
  Tensor logits = randn({4, 10});
  EXPECT_THAT(ErrorOf([&] {
                F::cross_entropy(logits, tensor(std::vector<int64_t>{1, 2, 10, 3}));
              }),
              HasSubstr("target 10 is out of bounds: expected class indices in [0, 10)"));
  // One-hot floats of the wrong shape (here [4, 9]).
  EXPECT_THAT(ErrorOf([&] {
                F::cross_entropy(logits, zeros({4, 9}));
              }),
              HasSubstr("must have the logits' shape [4, 10], got [4, 9]"));
  EXPECT_THAT(ErrorOf([&] {
                F::cross_entropy(logits, zeros({4, 1}, kInt64));
              }),
              HasSubstr("expected a target of shape [4]"));
  F::CrossEntropyOptions nine_weights{.weight = ones({9})};
  EXPECT_THAT(ErrorOf([&] {
                F::cross_entropy(logits, tensor(std::vector<int64_t>{1, 2, 3, 4}), nine_weights);
              }),
              HasSubstr("expected class weights of shape [10]"));
}

TEST(LossTest, BinaryCrossEntropyRejectsLogitsAndWithLogitsIsStable) {
  EXPECT_THAT(ErrorOf([] {
                F::binary_cross_entropy(tensor({-2.0, 0.5}), tensor({0.0, 1.0}));
              }),
              HasSubstr("use binary_cross_entropy_with_logits"));
  Tensor x = tensor(std::vector<double>{-1000, -3, 0, 2.5, 1000});
  Tensor t = tensor(std::vector<double>{1, 0, 1, 0.3, 0});
  Tensor pw = tensor(std::vector<double>{2, 2, 2, 2, 2});
  const auto xv = Vals(x), tv = Vals(t);
  double expected = 0;
  for (size_t i = 0; i < xv.size(); ++i) {
    // -[pw t log s(x) + (1 - t) log(1 - s(x))], with log s(x) = -softplus(-x), computed stably.
    const double log_s = -(std::max(-xv[i], 0.0) + std::log1p(std::exp(-std::abs(xv[i]))));
    const double log_1ms = -(std::max(xv[i], 0.0) + std::log1p(std::exp(-std::abs(xv[i]))));
    expected += -(2.0 * tv[i] * log_s + (1 - tv[i]) * log_1ms);
  }
  Tensor loss = F::binary_cross_entropy_with_logits(x, t, Tensor(), pw, Reduction::kSum);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_NEAR(loss.item<double>(), expected, 1e-9);
  Tensor p = tensor(std::vector<double>{0.2, 0.9, 0.5});
  Tensor y = tensor(std::vector<double>{0, 1, 1});
  const double bce = -(std::log(0.8) + std::log(0.9) + std::log(0.5)) / 3;
  EXPECT_NEAR(F::binary_cross_entropy(p, y).item<double>(), bce, 1e-12);
  ExpectGradcheck([&](const Tensor& a) { return F::binary_cross_entropy_with_logits(a, t, Tensor(), pw); },
                  tensor(std::vector<double>{-3, -0.5, 0.1, 2.5, 4}));
}

TEST(LossTest, KlDivBatchMeanAndLogTarget) {
  Tensor logq = log_softmax(randn({2, 3}, kFloat64), 1);
  Tensor p = softmax(randn({2, 3}, kFloat64), 1);
  const auto qv = Vals(logq), pv = Vals(p);
  double kl = 0;
  for (size_t i = 0; i < qv.size(); ++i) kl += pv[i] * (std::log(pv[i]) - qv[i]);
  EXPECT_NEAR(F::kl_div(logq, p).item<double>(), kl / 2, 1e-12);
  EXPECT_NEAR(F::kl_div(logq, log(p), F::KLReduction::kBatchMean, true).item<double>(), kl / 2, 1e-12);
}

}  // namespace
}  // namespace anvil::nn
