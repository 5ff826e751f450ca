// GRU, LSTM, multi-head attention and the Transformer encoder layer: forward against the
// published equations evaluated here in float64 scalars, gradients by gradcheck, masks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/anvil.h"
#include "core/nn/nn.h"
#include "tests/core/test_util.h"

namespace anvil::nn {
namespace {

using test::Vals;

double Sig(double v) { return 1.0 / (1.0 + std::exp(-v)); }

// Row r of W [R, C] dotted with v, plus b[r].
double Affine(const std::vector<double>& W, int64_t C, int64_t r, const std::vector<double>& v,
              const std::vector<double>& b) {
  double s = b.empty() ? 0.0 : b[static_cast<size_t>(r)];
  for (int64_t j = 0; j < C; ++j) s += W[static_cast<size_t>(r * C + j)] * v[static_cast<size_t>(j)];
  return s;
}

TEST(RnnTest, GruAndLstmMatchTheirEquations) {
  for (bool lstm : {false, true}) {
    const int64_t F = 3, H = 4, T = 3;
    std::shared_ptr<RNNBase> rnn = lstm ? std::shared_ptr<RNNBase>(std::make_shared<LSTM>(F, H))
                                        : std::shared_ptr<RNNBase>(std::make_shared<GRU>(F, H));
    rnn->to(kFloat64);
    Tensor x = randn({T, 1, F}, kFloat64);
    const RNNOutput out = rnn->forward_all(x);
    auto params = rnn->parameters();
    const auto Wi = Vals(params[0]), Wh = Vals(params[1]), bi = Vals(params[2]), bh = Vals(params[3]);
    std::vector<double> h(H, 0.0), c(H, 0.0);
    const auto xv = Vals(x);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> xt(xv.begin() + t * F, xv.begin() + (t + 1) * F), hn(H), cn(H);
      for (int64_t u = 0; u < H; ++u) {
        auto gi = [&](int64_t g) { return Affine(Wi, F, g * H + u, xt, bi); };
        auto gh = [&](int64_t g) { return Affine(Wh, H, g * H + u, h, bh); };
        if (lstm) {
          const double i = Sig(gi(0) + gh(0)), f = Sig(gi(1) + gh(1)), g = std::tanh(gi(2) + gh(2)),
                       o = Sig(gi(3) + gh(3));
          cn[static_cast<size_t>(u)] = f * c[static_cast<size_t>(u)] + i * g;
          hn[static_cast<size_t>(u)] = o * std::tanh(cn[static_cast<size_t>(u)]);
        } else {
          const double r = Sig(gi(0) + gh(0)), z = Sig(gi(1) + gh(1)), n = std::tanh(gi(2) + r * gh(2));
          hn[static_cast<size_t>(u)] = (1 - z) * n + z * h[static_cast<size_t>(u)];
        }
      }
      h = hn;
      c = cn;
      const auto got = Vals(out.output[t][0]);
      for (int64_t u = 0; u < H; ++u) EXPECT_NEAR(got[static_cast<size_t>(u)], h[static_cast<size_t>(u)], 1e-12);
    }
    EXPECT_TRUE(equal(out.h_n[0], out.output[T - 1]));
  }
}

TEST(RnnTest, MultiLayerBatchFirstShapesAndGradcheck) {
  GRU gru(3, 5, {.num_layers = 2, .batch_first = true});
  EXPECT_EQ(gru(randn({4, 7, 3})).sizes(), (IntArray{4, 7, 5}));
  EXPECT_EQ(gru.named_parameters().size(), 8u);
  LSTM lstm(2, 3);
  lstm.to(kFloat64);
  auto r = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{lstm.forward_all(in[0]).output}; },
      {randn({3, 2, 2}, kFloat64).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

TEST(AttentionTest, MatchesPerHeadScaledDotProductAndHonoursPaddingMask) {
  const int64_t B = 2, T = 3, E = 4, Hh = 2, D = 2;
  MultiheadAttention mha(E, Hh, 0.0, /*batch_first=*/true);
  mha.to(kFloat64);
  Tensor x = randn({B, T, E}, kFloat64);
  Tensor y = mha(x);
  const auto W = Vals(mha.in_proj_weight), bvec = Vals(mha.in_proj_bias);
  const auto Wo = Vals(mha.out_proj->weight), bo = Vals(mha.out_proj->bias);
  const auto xv = Vals(x), yv = Vals(y);
  for (int64_t b = 0; b < B; ++b) {
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> xt(xv.begin() + (b * T + t) * E, xv.begin() + (b * T + t + 1) * E);
      for (int64_t r = 0; r < E; ++r) {
        q[static_cast<size_t>(t)].push_back(Affine(W, E, r, xt, bvec));
        k[static_cast<size_t>(t)].push_back(Affine(W, E, E + r, xt, bvec));
        v[static_cast<size_t>(t)].push_back(Affine(W, E, 2 * E + r, xt, bvec));
      }
    }
    for (int64_t t = 0; t < T; ++t) {
      std::vector<double> ctx(E, 0.0);
      for (int64_t h = 0; h < Hh; ++h) {
        std::vector<double> s(T);
        double mx = -1e300, sum = 0;
        for (int64_t u = 0; u < T; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[static_cast<size_t>(t)][static_cast<size_t>(h * D + d)] *
                   k[static_cast<size_t>(u)][static_cast<size_t>(h * D + d)];
          s[static_cast<size_t>(u)] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[static_cast<size_t>(u)]);
        }
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u < T; ++u)
          for (int64_t d = 0; d < D; ++d)
            ctx[static_cast<size_t>(h * D + d)] +=
                s[static_cast<size_t>(u)] / sum * v[static_cast<size_t>(u)][static_cast<size_t>(h * D + d)];
      }
      for (int64_t r = 0; r < E; ++r) {
        EXPECT_NEAR(yv[static_cast<size_t>((b * T + t) * E + r)], Affine(Wo, E, r, ctx, bo), 1e-12);
      }
    }
  }
  // A padded key changes nothing, whatever its value.
  Tensor mask = zeros({B, T}, kBool);
  mask.index_put_({Slice(), 2}, true);
  Tensor x2 = x.clone();
  x2.index_put_({Slice(), 2}, randn({B, E}, kFloat64) * 100.0);
  Tensor a = mha.attend(x, x, x, mask), c = mha.attend(x2, x2, x2, mask);
  EXPECT_TRUE(allclose(a.narrow(1, 0, 2), c.narrow(1, 0, 2), 1e-12, 1e-12));
}

TEST(TransformerTest, EncoderLayerShapesEvalDeterminismAndGradcheck) {
  TransformerEncoderLayer layer(8, 2, {.dim_feedforward = 16, .dropout = 0.1, .batch_first = true});
  Tensor x = randn({3, 5, 8});
  EXPECT_EQ(layer(x).sizes(), x.sizes());
  layer.eval();
  EXPECT_TRUE(equal(layer(x), layer(x)));  // no dropout in eval
  TransformerEncoderLayer small(4, 2, {.dim_feedforward = 6, .dropout = 0.0, .batch_first = true, .norm_first = true});
  small.to(kFloat64);
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{small(in[0])}; },
                               {randn({2, 3, 4}, kFloat64).requires_grad_()});
  EXPECT_TRUE(r.ok) << r.message;
}

}  // namespace
}  // namespace anvil::nn
