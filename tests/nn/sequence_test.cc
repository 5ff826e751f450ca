// GRU, LSTM, multi-head attention and the Transformer encoder layer: forward against the
// published equations evaluated here in float64 scalars, gradients by gradcheck, masks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/anvil.h"
#include "core/io/safetensors.h"
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

// The time steps of x [T, ...] in reverse order.
Tensor Reversed(const Tensor& x) {
  std::vector<int64_t> idx;
  for (int64_t t = x.size(0) - 1; t >= 0; --t) idx.push_back(t);
  return index_select(x, 0, tensor(idx));
}

std::shared_ptr<RNNBase> MakeRnn(const std::string& kind, int64_t in, int64_t hidden, const RNNOptions& o) {
  if (kind == "LSTM") return std::make_shared<LSTM>(in, hidden, o);
  if (kind == "GRU") return std::make_shared<GRU>(in, hidden, o);
  return std::make_shared<RNN>(in, hidden, o);
}

// A bidirectional layer is two unidirectional ones (checked against the equations above): the
// forward one on x, the backward one on x reversed in time, its outputs reversed back; layer 2
// reads both halves. Built here from the bidirectional module's own weights, loaded by name.
TEST(RnnTest, BidirectionalIsAForwardAndABackwardPassOverTheReversedSequence) {
  for (const std::string kind : {"RNN", "GRU", "LSTM"}) {
    const int64_t F = 3, H = 4, T = 5, B = 2;
    auto bi = MakeRnn(kind, F, H, {.num_layers = 2, .bidirectional = true});
    bi->to(kFloat64);
    const StateDict state = bi->state_dict();
    // direction d of layer l as a one-layer unidirectional module.
    auto single = [&](int64_t l, bool reverse) {
      auto m = MakeRnn(kind, l == 0 ? F : 2 * H, H, {});
      m->to(kFloat64);
      StateDict sd;
      for (const char* w : {"weight_ih", "weight_hh", "bias_ih", "bias_hh"}) {
        const std::string from = std::string(w) + "_l" + std::to_string(l) + (reverse ? "_reverse" : "");
        sd.tensors.emplace_back(std::string(w) + "_l0", *state.find(from));
      }
      m->load_state_dict(sd);
      return m;
    };
    const Tensor x = randn({T, B, F}, kFloat64), h0 = randn({4, B, H}, kFloat64), c0 = randn({4, B, H}, kFloat64);
    const bool lstm = kind == "LSTM";
    const RNNOutput out = bi->forward_all(x, h0, lstm ? c0 : Tensor());
    ASSERT_EQ(out.output.sizes(), (IntArray{T, B, 2 * H})) << kind;
    ASSERT_EQ(out.h_n.sizes(), (IntArray{4, B, H})) << kind;
    Tensor layer_in = x;
    for (int64_t l = 0; l < 2; ++l) {
      const int64_t f = 2 * l, b = 2 * l + 1;  // h_n's rows: layer-major, forward first
      const RNNOutput fw =
          single(l, false)->forward_all(layer_in, h0.narrow(0, f, 1), lstm ? c0.narrow(0, f, 1) : Tensor());
      const RNNOutput bw =
          single(l, true)->forward_all(Reversed(layer_in), h0.narrow(0, b, 1), lstm ? c0.narrow(0, b, 1) : Tensor());
      layer_in = cat({fw.output, Reversed(bw.output)}, 2);
      EXPECT_TRUE(allclose(out.h_n[f], fw.h_n[0], 1e-12, 1e-12)) << kind << " layer " << l;
      EXPECT_TRUE(allclose(out.h_n[b], bw.h_n[0], 1e-12, 1e-12)) << kind << " layer " << l;
      if (lstm) {
        EXPECT_TRUE(allclose(out.c_n[f], fw.c_n[0], 1e-12, 1e-12)) << kind << " layer " << l;
        EXPECT_TRUE(allclose(out.c_n[b], bw.c_n[0], 1e-12, 1e-12)) << kind << " layer " << l;
      }
    }
    EXPECT_TRUE(allclose(out.output, layer_in, 1e-12, 1e-12)) << kind;
  }
}

// PyTorch's parameter names, shapes and order (weight_ih_l{k}{_reverse}, ... layer-major, the
// forward direction first; layer 1 reads 2 * H features), which state dicts from PyTorch need.
TEST(RnnTest, BidirectionalParametersHavePyTorchsNamesShapesAndOrder) {
  LSTM lstm(3, 5, {.num_layers = 2, .bias = true, .bidirectional = true});
  std::vector<std::pair<std::string, IntArray>> want;
  for (const char* k : {"0", "0_reverse", "1", "1_reverse"}) {
    const int64_t in = k[0] == '0' ? 3 : 10;
    want.emplace_back(std::string("weight_ih_l") + k, IntArray{20, in});
    want.emplace_back(std::string("weight_hh_l") + k, IntArray{20, 5});
    want.emplace_back(std::string("bias_ih_l") + k, IntArray{20});
    want.emplace_back(std::string("bias_hh_l") + k, IntArray{20});
  }
  const auto got = lstm.named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first);
    EXPECT_EQ(got[i].second.sizes(), want[i].second) << want[i].first;
  }
  EXPECT_THAT(lstm.extra_repr(), ::testing::HasSubstr("bidirectional=true"));
  GRU nobias(2, 3, {.bias = false, .bidirectional = true});
  EXPECT_EQ(nobias.named_parameters().size(), 4u);  // weight_ih/hh, forward and reverse
}

// proj_size: weight_hr_l{k}[_reverse] [P, H] after each direction's biases, weight_hh [4H, P],
// layer 1 reading 2P features; h is P wide, c stays H; the refusals PyTorch makes; export
// refuses (ONNX's LSTM has no projection).
TEST(RnnTest, LstmProjectionShapesNamesAndRefusals) {
  LSTM lstm(3, 5, {.num_layers = 2, .bidirectional = true, .proj_size = 2});
  const auto params = lstm.named_parameters();
  ASSERT_EQ(params.size(), 20u);
  EXPECT_EQ(params[4].first, "weight_hr_l0");
  EXPECT_EQ(params[4].second.sizes(), (IntArray{2, 5}));
  EXPECT_EQ(params[1].second.sizes(), (IntArray{20, 2}));   // weight_hh_l0
  EXPECT_EQ(params[10].second.sizes(), (IntArray{20, 4}));  // weight_ih_l1: both directions' P
  EXPECT_EQ(params[19].first, "weight_hr_l1_reverse");
  const RNNOutput out = lstm.forward_all(randn({6, 3, 3}));
  EXPECT_EQ(out.output.sizes(), (IntArray{6, 3, 4}));
  EXPECT_EQ(out.h_n.sizes(), (IntArray{4, 3, 2}));
  EXPECT_EQ(out.c_n.sizes(), (IntArray{4, 3, 5}));
  EXPECT_THAT(lstm.extra_repr(), ::testing::HasSubstr("proj_size=2"));
  EXPECT_THROW(GRU(3, 5, {.proj_size = 2}), Error);
  EXPECT_THROW(LSTM(3, 5, {.proj_size = 5}), Error);
  EXPECT_THROW(LSTM(3, 5, {.proj_size = -1}), Error);
  EXPECT_THROW(lstm.forward_all(randn({6, 3, 3}), zeros({4, 3, 5})), Error);  // h0 must be P wide
  // The projection is differentiable through every weight, first and second order.
  LSTM small(2, 3, {.proj_size = 1});
  small.to(kFloat64);
  const Tensor x = randn({4, 2, 2}, kFloat64).requires_grad_();
  auto r = autograd::gradcheck([&](const std::vector<Tensor>& in) { return std::vector<Tensor>{small.forward(in[0])}; },
                               {x});
  EXPECT_TRUE(r.ok) << r.message;
}

// The state dict through the safetensors format and back, strictly by name, gives the same layer.
TEST(RnnTest, BidirectionalStateDictRoundTripsThroughSafetensors) {
  GRU a(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  GRU b(3, 4, {.num_layers = 2, .batch_first = true, .bidirectional = true});
  const io::Safetensors file = io::parse_safetensors(io::serialize_safetensors(a.state_dict().tensors), "memory");
  StateDict loaded;
  loaded.tensors = file.tensors;
  EXPECT_NE(loaded.find("weight_hh_l1_reverse"), nullptr);
  b.load_state_dict(loaded, /*strict=*/true);
  const Tensor x = randn({2, 6, 3});
  EXPECT_TRUE(equal(a(x), b(x)));
  // A unidirectional layer refuses it: the reverse keys are unexpected.
  GRU one(3, 4, {.num_layers = 2, .batch_first = true});
  EXPECT_THROW(one.load_state_dict(loaded, /*strict=*/true), Error);
}

// Dropout acts between layers in training mode only, never on the last layer's output.
TEST(RnnTest, BidirectionalDropoutBetweenLayersInTrainingOnly) {
  LSTM two(3, 4, {.num_layers = 2, .dropout = 0.5, .bidirectional = true});
  LSTM plain(3, 4, {.num_layers = 2, .bidirectional = true});
  plain.load_state_dict(two.state_dict());
  const Tensor x = randn({5, 2, 3});
  two.eval();
  EXPECT_TRUE(equal(two(x), plain(x)));
  two.train();
  EXPECT_FALSE(allclose(two(x), plain(x)));
  LSTM one(3, 4, {.dropout = 0.5, .bidirectional = true});  // one layer: nothing to drop between
  LSTM one_plain(3, 4, {.bidirectional = true});
  one_plain.load_state_dict(one.state_dict());
  one.train();
  EXPECT_TRUE(equal(one(x), one_plain(x)));
}

TEST(RnnTest, BidirectionalGradcheckWithInitialStatesAndUnbatchedInput) {
  for (const std::string kind : {"RNN", "GRU", "LSTM"}) {
    auto m = MakeRnn(kind, 2, 3, {.num_layers = 2, .batch_first = true, .bidirectional = true});
    m->to(kFloat64);
    const bool lstm = kind == "LSTM";
    auto r = autograd::gradcheck(
        [&](const std::vector<Tensor>& in) {
          const RNNOutput o = m->forward_all(in[0], in[1], lstm ? in[2] : Tensor());
          std::vector<Tensor> outs{o.output, o.h_n};
          if (lstm) outs.push_back(o.c_n);
          return outs;
        },
        lstm ? std::vector<Tensor>{randn({2, 3, 2}, kFloat64).requires_grad_(),
                                   randn({4, 2, 3}, kFloat64).requires_grad_(),
                                   randn({4, 2, 3}, kFloat64).requires_grad_()}
             : std::vector<Tensor>{randn({2, 3, 2}, kFloat64).requires_grad_(),
                                   randn({4, 2, 3}, kFloat64).requires_grad_()});
    EXPECT_TRUE(r.ok) << kind << ": " << r.message;
    // Unbatched [T, F] is a batch of one without its batch dim (batch_first does not apply).
    const Tensor x = randn({4, 2}, kFloat64);
    const RNNOutput u = m->forward_all(x), b = m->forward_all(x.unsqueeze(0));
    EXPECT_EQ(u.output.sizes(), (IntArray{4, 6}));
    EXPECT_EQ(u.h_n.sizes(), (IntArray{4, 3}));
    EXPECT_TRUE(allclose(u.output, b.output[0], 1e-12, 1e-12));
    EXPECT_TRUE(allclose(u.h_n, b.h_n.select(1, 0), 1e-12, 1e-12));
  }
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
