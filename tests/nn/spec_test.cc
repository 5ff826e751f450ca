// Model specs: shape inference, errors that name the layer, and every preset building,
// running forward and backward.
#include "core/models/spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/anvil.h"
#include "core/nn/functional.h"
#include "tests/core/test_util.h"

namespace anvil::models {
namespace {

using test::ErrorOf;
using ::testing::HasSubstr;
namespace F = nn::functional;

TEST(SpecTest, InfersSizesLayerByLayer) {
  const BuiltModel m = build_model(R"({"input_shape": [1, 8, 8], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": "same"}, {"type": "relu"},
      {"type": "maxpool2d", "kernel_size": 2}, {"type": "conv2d", "out_channels": 6, "kernel_size": [3, 2], "stride": 2},
      {"type": "flatten"}, {"type": "dropout", "p": 0.1}, {"type": "linear", "out_features": 10}]})");
  // 8x8 -> same conv 4x8x8 -> pool 4x4x4 -> conv (3x2 kernel, stride 2) 6x1x2 -> 12 -> 10.
  EXPECT_EQ(m.output_shape, (IntArray{10}));
  EXPECT_EQ(m.module->num_parameters(), (4 * 9 + 4) + (6 * 4 * 6 + 6) + (12 * 10 + 10));
  EXPECT_EQ((*m.module)(randn({5, 1, 8, 8})).sizes(), (IntArray{5, 10}));
  EXPECT_THAT(m.spec, HasSubstr("\"output_shape\":[10]"));
}

// The pooling, batch norm and embedding options PyTorch has reach the modules, and the
// inferred shapes follow PyTorch's output-size rule (dilation, ceil_mode).
TEST(SpecTest, PoolingBatchNormAndEmbeddingOptionsReachTheModules) {
  manual_seed(3);
  const BuiltModel m = build_model(R"({"input_shape": [2, 9, 8], "layers": [
      {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2, "ceil_mode": true},
      {"type": "avgpool2d", "kernel_size": 2, "stride": 2, "ceil_mode": true, "count_include_pad": false,
       "divisor_override": 3}]})");
  // Height 9: dilated window span 5, ceil((9 + 2 - 5) / 2) + 1 = 4; width 8: ceil(5 / 2) + 1 = 4,
  // and the last window (start 6) begins inside the input. Then 4x4 -> 2x2.
  EXPECT_EQ(m.output_shape, (IntArray{2, 2, 2}));
  const Tensor x = randn({3, 2, 9, 8});
  const Tensor pooled =
      F::max_pool2d(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .ceil_mode = true, .dilation = {2, 2}});
  EXPECT_EQ(pooled.sizes(), (IntArray{3, 2, 4, 4}));
  // divisor_override = 3 divides each 2x2 window's sum by 3.
  const Tensor want = pooled.reshape({3, 2, 2, 2, 2, 2}).sum({3, 5}) / 3.0;
  EXPECT_TRUE(allclose((*m.module)(x), want, 1e-5, 1e-6));
  EXPECT_THAT(ErrorOf([] {
                build_model(R"({"input_shape": [1, 4, 4], "layers": [{"type": "avgpool2d", "kernel_size": 2,
                    "divisor_override": 0}]})");
              }),
              HasSubstr("'divisor_override' must be a non-zero integer"));
  EXPECT_THAT(ErrorOf([] {
                build_model(R"({"input_shape": [1, 4, 4], "layers": [{"type": "avgpool2d", "kernel_size": 2,
                    "dilation": 2}]})");
              }),
              HasSubstr("unknown key 'dilation'"));
  EXPECT_THAT(
      ErrorOf([] {
        build_model(R"({"input_shape": [1, 4, 4], "layers": [{"type": "maxpool2d", "kernel_size": 2, "padding": 2}]})");
      }),
      HasSubstr("'padding' must be at most half the kernel size"));

  // "momentum": null: the running mean is the plain average of the batches' means.
  const BuiltModel bn = build_model(R"({"input_shape": [3], "layers": [{"type": "batchnorm1d", "momentum": null}]})");
  bn.module->train();
  const Tensor a = randn({4, 3}), b = randn({6, 3});
  (*bn.module)(a);
  (*bn.module)(b);
  const Tensor running_mean = bn.module->state_dict().tensors.at(2).second;  // weight, bias, running_mean, ...
  EXPECT_EQ(bn.module->state_dict().tensors.at(2).first, "0.running_mean");
  EXPECT_TRUE(allclose(running_mean, (a.mean({0}) + b.mean({0})) / 2.0, 1e-5, 1e-6));

  // max_norm: the rows looked up are scaled to norm max_norm (in place, in the module's weight).
  const BuiltModel emb = build_model(R"({"input_shape": [3], "layers": [{"type": "embedding", "num_embeddings": 5,
      "embedding_dim": 4, "max_norm": 0.5, "norm_type": 1.0}]})");
  const Tensor rows = (*emb.module)(tensor(std::vector<int64_t>{0, 3, 3}).unsqueeze(0));
  const std::vector<double> l1 = rows.abs().sum({2}).reshape({-1}).to_vector<double>();
  for (double n : l1) EXPECT_NEAR(n, 0.5, 1e-5);
  EXPECT_THAT(ErrorOf([] {
                build_model(R"({"input_shape": [3], "layers": [{"type": "embedding", "num_embeddings": 5,
                    "embedding_dim": 4, "max_norm": -1}]})");
              }),
              HasSubstr("'max_norm' must be positive"));
}

TEST(SpecTest, HardswishIsALayerType) {
  const BuiltModel m = build_model(R"({"input_shape": [4], "layers": [{"type": "hardswish"}]})");
  const Tensor x = tensor(std::vector<float>{-4, -1.5, 1, 4});
  // x * relu6(x + 3) / 6: 0, -0.375, 0.6667, 4.
  const std::vector<double> y = (*m.module)(x).to_vector<double>();
  ASSERT_EQ(y.size(), 4u);
  EXPECT_NEAR(y[0], 0.0, 1e-7);
  EXPECT_NEAR(y[1], -1.5 * 1.5 / 6, 1e-6);
  EXPECT_NEAR(y[2], 4.0 / 6, 1e-6);
  EXPECT_NEAR(y[3], 4.0, 1e-6);
}

// The activation layers PyTorch composes: each is a layer type with PyTorch's options, and the
// values follow from their definitions.
TEST(SpecTest, MoreActivationsAreLayerTypes) {
  const Tensor x = tensor(std::vector<float>{-4, -0.75, 0.25, 2, 7, 3});
  auto run = [&](const std::string& layer) {
    const BuiltModel m = build_model(R"({"input_shape": [6], "layers": [)" + layer + "]}");
    EXPECT_EQ(m.output_shape, IntArray{6}) << layer;
    return (*m.module)(x).to_vector<double>();
  };
  const std::vector<double> relu6 = run(R"({"type": "relu6"})");
  EXPECT_DOUBLE_EQ(relu6[0], 0.0);
  EXPECT_DOUBLE_EQ(relu6[4], 6.0);
  const std::vector<double> ht = run(R"({"type": "hardtanh", "min_val": -0.5, "max_val": 2.5})");
  EXPECT_DOUBLE_EQ(ht[0], -0.5);
  EXPECT_DOUBLE_EQ(ht[2], 0.25);
  EXPECT_DOUBLE_EQ(ht[4], 2.5);
  const std::vector<double> hs = run(R"({"type": "hardsigmoid"})");
  EXPECT_NEAR(hs[1], (3 - 0.75) / 6, 1e-7);
  EXPECT_DOUBLE_EQ(hs[0], 0.0);
  const std::vector<double> th = run(R"({"type": "threshold", "threshold": 1.0, "value": -9})");
  EXPECT_DOUBLE_EQ(th[2], -9.0);
  EXPECT_DOUBLE_EQ(th[3], 2.0);
  const std::vector<double> ss = run(R"({"type": "softshrink", "lambd": 1})");
  EXPECT_DOUBLE_EQ(ss[0], -3.0);
  EXPECT_DOUBLE_EQ(ss[1], 0.0);
  const std::vector<double> hk = run(R"({"type": "hardshrink"})");
  EXPECT_DOUBLE_EQ(hk[1], -0.75);
  EXPECT_DOUBLE_EQ(hk[2], 0.0);
  EXPECT_NEAR(run(R"({"type": "softsign"})")[3], 2.0 / 3, 1e-7);
  EXPECT_NEAR(run(R"({"type": "logsigmoid"})")[3], -std::log1p(std::exp(-2.0)), 1e-6);
  EXPECT_NEAR(run(R"({"type": "mish"})")[3], 2 * std::tanh(std::log1p(std::exp(2.0))), 1e-6);
  EXPECT_NEAR(run(R"({"type": "selu"})")[0], 1.0507009873554805 * 1.6732632423543772 * std::expm1(-4.0), 1e-6);
  EXPECT_NEAR(run(R"({"type": "celu", "alpha": 2})")[0], 2 * std::expm1(-2.0), 1e-6);
  const std::vector<double> sm = run(R"({"type": "softmin"})");
  double total = 0;
  for (double v : sm) total += v;
  EXPECT_NEAR(total, 1.0, 1e-6);
  EXPECT_GT(sm[0], sm[5]);
}

TEST(SpecTest, GluHalvesItsDimAndPreluLearnsOneSlopePerChannel) {
  const BuiltModel g = build_model(R"({"input_shape": [3, 4], "layers": [{"type": "glu"}]})");
  EXPECT_EQ(g.output_shape, (IntArray{3, 2}));
  const BuiltModel g1 = build_model(R"({"input_shape": [4, 3], "layers": [{"type": "glu", "dim": 1}]})");
  EXPECT_EQ(g1.output_shape, (IntArray{2, 3}));
  EXPECT_THAT(ErrorOf([] { build_model(R"({"input_shape": [3], "layers": [{"type": "glu"}]})"); }),
              HasSubstr("must be even"));
  EXPECT_THAT(ErrorOf([] { build_model(R"({"input_shape": [4], "layers": [{"type": "glu", "dim": 0}]})"); }),
              HasSubstr("not 0 (the batch dim)"));

  const BuiltModel p = build_model(R"({"input_shape": [3, 2], "layers": [{"type": "prelu", "num_parameters": 3,
      "init": 0.1}]})");
  EXPECT_EQ(p.module->num_parameters(), 3);
  const Tensor x = full({1, 3, 2}, -2.0);
  for (double v : (*p.module)(x).to_vector<double>()) EXPECT_NEAR(v, -0.2, 1e-7);
  EXPECT_THAT(
      ErrorOf([] { build_model(R"({"input_shape": [3, 2], "layers": [{"type": "prelu", "num_parameters": 2}]})"); }),
      HasSubstr("'num_parameters' must be 1 or the channel count 3"));
  EXPECT_THAT(ErrorOf([] { build_model(R"({"input_shape": [3], "layers": [{"type": "threshold"}]})"); }),
              HasSubstr("'threshold' and 'value' are required"));
  EXPECT_THAT(ErrorOf([] {
                build_model(R"({"input_shape": [3], "layers": [{"type": "hardtanh", "min_val": 2, "max_val": 1}]})");
              }),
              HasSubstr("'min_val' must not be greater than 'max_val'"));
}

TEST(SpecTest, UnflattenTurnsRowsIntoImagesAndItsOwnSpecRebuilds) {
  const BuiltModel m = build_model(R"({"input_shape": [64], "layers": [{"type": "unflatten", "shape": [1, 8, 8]},
      {"type": "conv2d", "out_channels": 2, "kernel_size": 3}, {"type": "flatten"}]})");
  EXPECT_EQ(m.output_shape, (IntArray{2 * 6 * 6}));
  const Tensor x = randn({3, 64});
  const Tensor y = (*m.module)(x);
  EXPECT_EQ(y.sizes(), (IntArray{3, 72}));
  // The row is read in C order: element (c, h, w) of the image is feature (c*8 + h)*8 + w.
  const BuiltModel image = build_model(R"({"input_shape": [1, 8, 8], "layers": [
      {"type": "conv2d", "out_channels": 2, "kernel_size": 3}, {"type": "flatten"}]})");
  nn::StateDict moved;  // the convolution is layer 1 after the unflatten, layer 0 here
  for (const auto& [name, t] : m.module->state_dict().tensors) moved.tensors.push_back({"0" + name.substr(1), t});
  image.module->load_state_dict(moved);
  EXPECT_TRUE(allclose((*image.module)(x.reshape({3, 1, 8, 8})), y));
  // The normalised spec (with output_shape) builds again; a wrong output_shape does not.
  EXPECT_EQ(build_model(m.spec).output_shape, m.output_shape);
  EXPECT_THAT(
      ErrorOf([] { build_model(R"({"input_shape": [4], "output_shape": [3], "layers": [{"type": "relu"}]})"); }),
      HasSubstr("'output_shape' [3] differs from the layers' output [4]"));
  EXPECT_THAT(
      ErrorOf([] { build_model(R"({"input_shape": [60], "layers": [{"type": "unflatten", "shape": [1, 8, 8]}]})"); }),
      HasSubstr("expects a flat input of 64 features for shape [1, 8, 8], got shape [60]"));
}

TEST(SpecTest, ErrorsNameTheLayerAndWhatWasExpected) {
  EXPECT_THAT(
      ErrorOf([] { build_model(R"({"input_shape": [64], "layers": [{"type": "linear", "out_feature": 10}]})"); }),
      HasSubstr("layer 0 (linear): unknown key 'out_feature'"));
  EXPECT_THAT(
      ErrorOf([] {
        build_model(
            R"({"input_shape": [64], "layers": [{"type": "relu"}, {"type": "conv2d", "out_channels": 3, "kernel_size": 3}]})");
      }),
      HasSubstr("layer 1 (conv2d): expects input [C, H, W], got shape [64]"));
  EXPECT_THAT(
      ErrorOf([] {
        build_model(
            R"({"input_shape": [1, 4, 4], "layers": [{"type": "conv2d", "out_channels": 3, "kernel_size": 5}]})");
      }),
      HasSubstr("does not fit the input [1, 4, 4]"));
  EXPECT_THAT(ErrorOf([] { build_model(R"({"input_shape": [4], "layers": [{"type": "transformer"}]})"); }),
              HasSubstr("unknown layer type 'transformer'"));
  EXPECT_THAT(ErrorOf([] { build_model("{not json"); }), HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf([] { build_model(R"({"layers": []})"); }), HasSubstr("'input_shape'"));
  EXPECT_THAT(
      ErrorOf([] {
        build_model(R"({"input_shape": [3, 8, 8], "layers": [{"type": "residual", "layers": [{"type": "flatten"}]}]})");
      }),
      HasSubstr("layer 0 (residual): cannot add the input [3, 8, 8] to the body's output [192]"));
  EXPECT_THAT(ErrorOf([] {
                preset_spec("vgg", {1, 8, 8}, 10);
              }),
              HasSubstr("presets: mlp, lenet5, resnet, gru, transformer"));
}

// "bidirectional": both directions' features ([T, 2H] as a sequence); "last" is each
// direction's final state: the forward one's at the last step, the backward one's at the first.
TEST(SpecTest, BidirectionalRecurrentLayersDoubleTheFeaturesAndEndEachDirectionAtItsOwnEnd) {
  const BuiltModel stack = build_model(R"({"input_shape": [6, 5], "layers": [
      {"type": "lstm", "hidden_size": 4, "num_layers": 2, "bidirectional": true, "return": "sequence"},
      {"type": "gru", "hidden_size": 3, "bidirectional": true}, {"type": "linear", "out_features": 2}]})");
  EXPECT_EQ(stack.output_shape, (IntArray{2}));
  EXPECT_EQ((*stack.module)(randn({3, 6, 5})).sizes(), (IntArray{3, 2}));
  EXPECT_TRUE(stack.module->state_dict().contains("0.rnn.weight_ih_l1_reverse"));
  EXPECT_EQ(build_model(stack.spec).output_shape, stack.output_shape);  // the normalised spec rebuilds
  const BuiltModel seq = build_model(
      R"({"input_shape": [6, 5], "layers": [{"type": "gru", "hidden_size": 3, "bidirectional": true, "return": "sequence"}]})");
  const BuiltModel last =
      build_model(R"({"input_shape": [6, 5], "layers": [{"type": "gru", "hidden_size": 3, "bidirectional": true}]})");
  EXPECT_EQ(seq.output_shape, (IntArray{6, 6}));
  EXPECT_EQ(last.output_shape, (IntArray{6}));
  last.module->load_state_dict(seq.module->state_dict());
  const Tensor x = randn({2, 6, 5});
  const Tensor all = (*seq.module)(x), end = (*last.module)(x);
  EXPECT_TRUE(allclose(end, cat({all.select(1, 5).narrow(1, 0, 3), all.select(1, 0).narrow(1, 3, 3)}, 1)));
  EXPECT_THAT(
      ErrorOf([] {
        build_model(R"({"input_shape": [6, 5], "layers": [{"type": "lstm", "hidden_size": 3, "bidirectional": 1}]})");
      }),
      HasSubstr("layer 0 (lstm): 'bidirectional' must be true or false"));
}

TEST(SpecTest, EveryPresetBuildsRunsAndBackpropagates) {
  struct Case {
    std::string name;
    IntArray input;
    int64_t vocab;
  };
  for (const Case& c :
       {Case{"mlp", {64}, 0}, Case{"mlp", {1, 8, 8}, 0}, Case{"lenet5", {1, 8, 8}, 0}, Case{"lenet5", {1, 28, 28}, 0},
        Case{"resnet", {3, 16, 16}, 0}, Case{"gru", {12}, 50}, Case{"transformer", {12}, 50}}) {
    const BuiltModel m = build_model(preset_spec(c.name, c.input, 7, c.vocab));
    EXPECT_EQ(m.output_shape, (IntArray{7})) << c.name;
    IntArray batch{3};
    batch.insert(batch.end(), c.input.begin(), c.input.end());
    const Tensor x = m.input_dtype == kInt64 ? randint(0, c.vocab, batch) : randn(batch);
    const Tensor y = (*m.module)(x);
    ASSERT_EQ(y.sizes(), (IntArray{3, 7})) << c.name;
    y.sum().backward();
    for (const auto& [pname, p] : m.module->named_parameters()) {
      EXPECT_TRUE(p.grad().defined()) << c.name << ": no gradient for " << pname;
    }
  }
}

}  // namespace
}  // namespace anvil::models

namespace anvil::models {
namespace {

// The estimate prices a spec without building it: its parameter and buffer counts must be
// exactly what the built module holds, for every layer type and preset.
TEST(SpecCostTest, EstimateCountsExactlyWhatTheBuiltModelHolds) {
  std::vector<std::string> specs = {
      R"({"input_shape": [3, 12, 12], "layers": [
          {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "groups": 1, "padding": 1},
          {"type": "batchnorm2d"}, {"type": "relu"},
          {"type": "conv2d", "out_channels": 8, "kernel_size": [3, 1], "groups": 4, "bias": false},
          {"type": "groupnorm", "num_groups": 2}, {"type": "maxpool2d", "kernel_size": 2},
          {"type": "residual", "layers": [{"type": "conv2d", "out_channels": 16, "kernel_size": 3, "stride": 1, "padding": 1}]},
          {"type": "adaptiveavgpool2d", "output_size": 2}, {"type": "flatten"},
          {"type": "residual", "layers": [{"type": "linear", "out_features": 10}]},
          {"type": "layernorm"}, {"type": "linear", "out_features": 5, "bias": false}]})",
      R"({"input_shape": [4, 20], "layers": [{"type": "conv1d", "out_channels": 6, "kernel_size": 5},
          {"type": "batchnorm1d"}, {"type": "flatten"}, {"type": "linear", "out_features": 3}]})",
      R"({"input_shape": [7, 5], "layers": [{"type": "lstm", "hidden_size": 6, "num_layers": 2},
          {"type": "linear", "out_features": 2}]})",
      R"({"input_shape": [7, 5], "layers": [{"type": "lstm", "hidden_size": 6, "num_layers": 3, "bidirectional": true},
          {"type": "linear", "out_features": 2}]})",
      R"({"input_shape": [7, 5], "layers": [{"type": "gru", "hidden_size": 4, "num_layers": 2, "bidirectional": true,
          "return": "sequence"}, {"type": "gru", "hidden_size": 3}]})",
      R"({"input_shape": [9, 5], "layers": [{"type": "gru", "hidden_size": 4, "return": "sequence"},
          {"type": "transformer_encoder", "nhead": 2, "dim_feedforward": 12, "num_layers": 2},
          {"type": "mean_pool"}, {"type": "linear", "out_features": 2}]})",
      preset_spec("mlp", {1, 8, 8}, 10),
      preset_spec("lenet5", {1, 28, 28}, 10),
      preset_spec("resnet", {3, 32, 32}, 10),
      preset_spec("gru", {12}, 4, 50),
      preset_spec("transformer", {12}, 4, 50),
  };
  for (const std::string& spec : specs) {
    const ModelCost cost = estimate_model(spec);
    const BuiltModel built = build_model(spec);
    int64_t params = 0, buffers = 0;
    for (const Tensor& p : built.module->parameters()) params += p.numel();
    for (const Tensor& b : built.module->buffers()) buffers += b.numel();
    EXPECT_EQ(cost.parameters, params) << spec;
    EXPECT_EQ(cost.buffers, buffers) << spec;
    EXPECT_GT(cost.activations_per_sample, 0);
  }
}

TEST(SpecCostTest, HugeSizesSaturateInsteadOfOverflowing) {
  const ModelCost cost = estimate_model(R"({"input_shape": [2000000000], "layers": [
      {"type": "linear", "out_features": 2000000000}, {"type": "linear", "out_features": 2000000000}]})");
  EXPECT_GT(cost.parameters, int64_t{1} << 60);  // not wrapped around to a small number
  // The feed-forward width defaults to four times the embedding: that product saturates too.
  const ModelCost encoder = estimate_model(R"({"input_shape": [2, 2000000000], "layers": [
      {"type": "transformer_encoder", "nhead": 1}]})");
  EXPECT_GT(encoder.parameters, int64_t{1} << 60);
}

// Found by the model-spec fuzzer: sizes near int64's range overflowed shape formulas (a
// dilated kernel's span, 4x an embedding, an unflatten's product). Every size a spec names or
// a layer produces is now bounded by kMaxModelDim, which no formula can overflow below.
TEST(SpecCostTest, SizesBeyondTheBoundAreSpecErrorsNamingTheBound) {
  const std::string bound = std::to_string(kMaxModelDim);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input_shape": [2, 3000000000000000000], "layers": [{"type": "transformer_encoder", "nhead": 1}]})",
       "'input_shape' entries must be integers in [1, " + bound + "], got 3000000000000000000"},
      {R"({"input_shape": [1, 8, 8], "layers": [{"type": "conv2d", "out_channels": 1,
           "kernel_size": 4611686018427387904, "dilation": 4}]})",
       "layer 0 (conv2d): 'kernel_size' must be in [1, " + bound + "]"},
      {R"({"input_shape": [1, 8, 8], "layers": [{"type": "maxpool2d", "kernel_size": 2,
           "padding": [0, 4611686018427387904]}]})",
       "layer 0 (maxpool2d): 'padding' entries must be in [0, " + bound + "]"},
      {R"({"input_shape": [8], "layers": [{"type": "linear", "out_features": 9223372036854775807}]})",
       "layer 0 (linear): 'out_features' must be <= " + bound + ", got 9223372036854775807"},
      {R"({"input_shape": [4], "layers": [{"type": "unflatten", "shape": [4, 4294967296, 4294967296]}]})",
       "layer 0 (unflatten): 'shape' entries must be integers in [1, " + bound + "]"},
      {R"({"input_shape": [65536, 65536], "layers": [{"type": "flatten"}]})",
       "layer 0: the output shape [4294967296] has a dimension above " + bound},
  };
  for (const auto& c : cases) {
    const std::string& spec = c.first;
    const std::string& expected = c.second;
    for (int dry = 0; dry < 2; ++dry) {
      EXPECT_THAT(ErrorOf([&] {
                    if (dry)
                      estimate_model(spec);
                    else
                      build_model(spec);
                  }),
                  HasSubstr(expected))
          << spec;
    }
  }
}

}  // namespace
}  // namespace anvil::models

namespace anvil::models {
namespace {

// Found by the model-spec fuzzer: a field of the wrong JSON type where a layer reads a string
// was an uncaught JSON type error (INTERNAL at the service); now a spec error naming it.
TEST(SpecCostTest, FieldsOfTheWrongJsonTypeAreSpecErrors) {
  const std::string spec = R"({"input_shape": [5, 3], "layers": [{"type": "gru", "hidden_size": 4, "return": 5}]})";
  for (int dry = 0; dry < 2; ++dry) {
    try {
      if (dry)
        estimate_model(spec);
      else
        build_model(spec);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'return' must be a string"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace anvil::models
