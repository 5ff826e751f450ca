// Every layer's and loss's backward against central differences in float64: one table, each
// entry a function of float64 inputs built from a module in float64.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/anvil.h"
#include "core/nn/nn.h"

namespace anvil::nn {
namespace {

struct Entry {
  std::string name;
  std::shared_ptr<Module> module;  // may be null for pure functions
  std::function<Tensor(const Tensor&)> fn;
  IntArray input;
};

std::vector<Entry> Entries() {
  auto bn = std::make_shared<BatchNorm2d>(3);
  auto bn1 = std::make_shared<BatchNorm1d>(4);
  auto gn = std::make_shared<GroupNorm>(2, 4);
  auto conv1 = std::make_shared<Conv1d>(2, 3, 3, Conv1dOptions{.stride = 2, .padding = 1});
  auto gru = std::make_shared<GRU>(3, 2, RNNOptions{.num_layers = 2});
  auto lin = std::make_shared<Linear>(5, 3);
  auto y_idx = tensor(std::vector<int64_t>{2, 0, 1, 2});
  auto mha = std::make_shared<MultiheadAttention>(4, 2, 0.0, /*batch_first=*/true);
  auto prelu = std::make_shared<PReLU>(3, -0.3);
  // Indices of a 4x5 plane's maxima, for max_unpool2d: fixed (not a function of x).
  const Tensor unpool_idx = std::get<1>(F::max_pool2d_with_indices(randn({1, 2, 4, 5}), {.kernel = {2, 2}}));
  return {
      {"batchnorm2d_train", bn, [bn](const Tensor& x) { return (*bn)(x); }, {4, 3, 2, 2}},
      {"batchnorm1d_train", bn1, [bn1](const Tensor& x) { return (*bn1)(x); }, {5, 4}},
      {"groupnorm", gn, [gn](const Tensor& x) { return (*gn)(x); }, {2, 4, 3}},
      {"conv1d", conv1, [conv1](const Tensor& x) { return (*conv1)(x); }, {2, 2, 7}},
      {"avg_pool2d_pad",
       nullptr,
       [](const Tensor& x) {
         return F::avg_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
       },
       {1, 2, 5, 5}},
      {"avg_pool2d_ceil_divisor",
       nullptr,
       [](const Tensor& x) {
         return F::avg_pool2d(
             x, {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .divisor_override = 4});
       },
       {1, 2, 6, 5}},
      {"avg_pool2d_ceil_exclude_pad",
       nullptr,
       [](const Tensor& x) {
         return F::avg_pool2d(
             x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false, .ceil_mode = true});
       },
       {1, 1, 6, 6}},
      {"max_pool2d_dilated",
       nullptr,
       [](const Tensor& x) {
         return F::max_pool2d(x, {.kernel = {2, 3}, .stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 1}});
       },
       {1, 2, 6, 7}},
      {"max_unpool2d",
       nullptr,
       [unpool_idx](const Tensor& x) {
         return F::max_unpool2d(x, unpool_idx, {.kernel = {2, 2}, .output_size = std::vector<int64_t>{4, 5}});
       },
       {1, 2, 2, 2}},
      {"multihead_attention_masks_and_weights",
       mha,
       [mha, mask = randn({3, 3}, kFloat64),
        kpm = tensor(std::vector<uint8_t>{0, 0, 1, 0, 0, 0}, IntArray{2, 3}).to(kBool)](const Tensor& x) {
         auto [out, weights] = mha->forward(x, x, x, kpm, /*need_weights=*/true, mask, /*average_attn_weights=*/false);
         return cat({out.reshape({-1}), weights.reshape({-1})});
       },
       {2, 3, 4}},
      {"adaptive_avg_pool2d",
       nullptr,
       [](const Tensor& x) {
         return F::adaptive_avg_pool2d(x, {2, 3});
       },
       {1, 2, 5, 4}},
      {"prelu_per_channel", prelu, [prelu](const Tensor& x) { return (*prelu)(x); }, {2, 3, 4}},
      {"smooth_activations",
       nullptr,
       [](const Tensor& x) {
         return cat({F::mish(x), F::selu(x), F::celu(x, 0.7), F::softsign(x), F::logsigmoid(x), F::glu(x, 0),
                     F::softmin(x, 0)});
       },
       {6}},
      {"distances",
       nullptr,
       [y = randn({3, 5}, kFloat64)](const Tensor& x) {
         return cat(
             {F::normalize(x, 3.0, 1).reshape({-1}), F::cosine_similarity(x, y), F::pairwise_distance(x, y, 1.5)});
       },
       {3, 5}},
      // The composite ops whose gradients are stated rules: logit (a custom function), cummax
      // and cummin (to the index), logaddexp.
      {"logit_cummax_logaddexp",
       nullptr,
       [y = randn({2, 4}, kFloat64)](const Tensor& x) {
         return cat({logit(sigmoid(x)).reshape({-1}), logit(sigmoid(x), 0.3).reshape({-1}),
                     std::get<0>(cummax(x, 1)).reshape({-1}), std::get<0>(cummin(x, 0)).reshape({-1}),
                     logaddexp(x, y).reshape({-1})});
       },
       {2, 4}},
      {"gru_two_layers", gru, [gru](const Tensor& x) { return gru->forward_all(x).h_n; }, {3, 2, 3}},
      {"cross_entropy_smoothing",
       lin,
       [lin, y_idx](const Tensor& x) { return F::cross_entropy((*lin)(x), y_idx, {.label_smoothing = 0.2}); },
       {4, 5}},
      {"nll_weighted",
       lin,
       [lin, y_idx](const Tensor& x) {
         return F::nll_loss(log_softmax((*lin)(x), 1), y_idx, {.weight = tensor(std::vector<double>{1.0, 2.0, 0.5})});
       },
       {4, 5}},
      // Targets are fixed tensors: a target computed from x would move under the finite
      // differences while its gradient is (rightly) zero.
      {"huber",
       nullptr,
       [t = randn({6}, kFloat64)](const Tensor& x) { return F::huber_loss(x, t, F::Reduction::kMean, 0.4); },
       {6}},
      {"kl_div",
       nullptr,
       [t = softmax(randn({3, 4}, kFloat64), 1)](const Tensor& x) { return F::kl_div(log_softmax(x, 1), t); },
       {3, 4}},
      {"bce",
       nullptr,
       [t = rand({5}, kFloat64)](const Tensor& x) { return F::binary_cross_entropy(sigmoid(x), t); },
       {5}},
  };
}

TEST(ModuleGradcheck, EveryLayerAndLossMatchesFiniteDifferences) {
  manual_seed(5);
  for (Entry& e : Entries()) {
    if (e.module) e.module->to(kFloat64);
    Tensor x = randn(e.input, kFloat64).requires_grad_();
    auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{e.fn(in[0])}; }, {x},
                                 {1e-6, 1e-5, 1e-3, false});
    EXPECT_TRUE(r.ok) << e.name << ": " << r.message;
    if (!e.module) continue;
    // And with respect to every parameter: L = sum(out * w) for a fixed random w; central
    // differences on a few elements of each parameter, perturbed in place.
    const Tensor xd = x.detach();
    const Tensor w = randn(e.fn(xd).sizes(), kFloat64);
    auto loss = [&] { return (e.fn(xd) * w).sum(); };
    e.module->zero_grad();
    loss().backward();
    for (auto& [pname, p] : e.module->named_parameters()) {
      ASSERT_TRUE(p.grad().defined()) << e.name << ": no gradient for " << pname;
      Tensor flat = p.detach().view({-1});
      const Tensor grad = p.grad().reshape({-1});
      for (int64_t k = 0; k < std::min<int64_t>(4, flat.numel()); ++k) {
        const int64_t i = (k * 7919) % flat.numel();
        const double orig = flat[i].item<double>();
        double plus, minus;
        {
          NoGradGuard no_grad;
          flat.index_put_({i}, orig + 1e-6);
          plus = loss().item<double>();
          flat.index_put_({i}, orig - 1e-6);
          minus = loss().item<double>();
          flat.index_put_({i}, orig);
        }
        const double numeric = (plus - minus) / 2e-6, analytic = grad[i].item<double>();
        EXPECT_NEAR(analytic, numeric, 1e-5 + 1e-3 * std::abs(numeric)) << e.name << " " << pname << "[" << i << "]";
      }
    }
  }
}

}  // namespace
}  // namespace anvil::nn
