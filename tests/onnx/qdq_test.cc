// ONNX export of int8 models as QDQ graphs: the node pattern written (int8 weights behind a
// DequantizeLinear only, int32 bias with scale s_x * s_w, uint8 activations), and in
// onnxruntime (from .venv; skipped without it) the operators its optimizer fuses the graph
// into and the outputs against Anvil's int8 forward.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>

#include "core/anvil.h"
#include "core/nn/activation.h"
#include "core/nn/container.h"
#include "core/nn/conv.h"
#include "core/nn/linear.h"
#include "core/nn/normalization.h"
#include "core/nn/pooling.h"
#include "core/onnx/export.h"
#include "core/onnx/import.h"
#include "core/onnx/quantize_graph.h"
#include "core/quant/quantize.h"
#include "core/quant/quantized_layers.h"
#include "onnx/onnx_pb.h"
#include "tests/paths.h"

namespace anvil::onnx {
namespace {

using nlohmann::json;

std::shared_ptr<nn::Sequential> Mlp(bool with_stub) {
  auto model = std::make_shared<nn::Sequential>();
  if (with_stub) model->push_back(std::make_shared<quant::QuantStub>());
  model->push_back(std::make_shared<nn::Linear>(16, 32));
  model->push_back(std::make_shared<nn::ReLU>());
  model->push_back(std::make_shared<nn::Linear>(32, 10));
  model->eval();
  return model;
}

// The digits CNN's shape: Conv2d-BN-ReLU-MaxPool-Flatten-Linear-ReLU-Linear on 1x8x8.
std::shared_ptr<nn::Sequential> Cnn() {
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  {
    NoGradGuard g;
    bn->running_mean.copy_(randn({4}) * 0.1);
    bn->running_var.copy_(rand({4}) + 0.5);
    bn->weight.copy_(rand({4}) + 0.5);
    bn->bias.copy_(randn({4}) * 0.1);
  }
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Conv2d>(1, 4, std::array<int64_t, 2>{3, 3}, nn::ConvOptions{{1, 1}, {1, 1}}), bn,
      std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}),
      std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(64, 16), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(16, 10)});
  model->eval();
  return model;
}

// fuse, prepare, calibrate on 8 random batches of `sample` inputs, convert.
void QuantizeStatic(nn::Module& model, const IntArray& sample, bool per_channel) {
  quant::fuse_modules(model);
  quant::QConfig q;
  q.activation = quant::ActivationObserver::kMinMax;
  q.per_channel_weights = per_channel;
  quant::prepare(model, q);
  NoGradGuard g;
  for (int i = 0; i < 8; ++i) {
    IntArray shape{32};
    shape.insert(shape.end(), sample.begin(), sample.end());
    model.forward(randn(shape));
  }
  quant::convert(model);
  model.eval();  // the layers convert() made start in training mode, which export refuses
}

// The output scale of the model's last quantized layer: one step of the output grid.
double OutputStep(nn::Module& model) {
  double step = 0;
  for (const auto& [name, m] : model.named_modules()) {
    if (const auto* l = dynamic_cast<const quant::QuantizedLinear*>(m)) step = l->output_qparams().scale;
  }
  return step;
}

struct Exported {
  std::string bytes;
  ::onnx::ModelProto proto;
};

Exported Export(nn::Module& model, const IntArray& sample) {
  Exported e;
  e.bytes = export_model(model, {InputSignature{"input", sample, kFloat32}}, ExportOptions{});
  EXPECT_TRUE(e.proto.ParseFromString(e.bytes));
  return e;
}

std::multiset<std::string> OpTypes(const ::onnx::GraphProto& g) {
  std::multiset<std::string> ops;
  for (const auto& n : g.node()) ops.insert(n.op_type());
  return ops;
}

const ::onnx::TensorProto* Initializer(const ::onnx::GraphProto& g, const std::string& name) {
  for (const auto& t : g.initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

// Every DequantizeLinear whose input is an initializer dequantizes int8 weights or an int32
// bias, and every QuantizeLinear writes uint8: the pattern onnxruntime's selectors match.
// `per_channel` unset: layers of both kinds.
void ExpectQdqPattern(const ::onnx::GraphProto& g, int64_t weights, int64_t biases, std::optional<bool> per_channel) {
  int64_t int8_weights = 0, int32_biases = 0;
  for (const auto& n : g.node()) {
    if (n.op_type() == "QuantizeLinear") {
      const auto* zp = Initializer(g, n.input(2));
      ASSERT_NE(zp, nullptr) << "a QuantizeLinear's zero point is not an initializer";
      EXPECT_EQ(zp->data_type(), ::onnx::TensorProto::UINT8);
      EXPECT_EQ(zp->dims_size(), 0);
    }
    if (n.op_type() != "DequantizeLinear") continue;
    const auto* x = Initializer(g, n.input(0));
    if (x == nullptr) continue;
    const auto* scale = Initializer(g, n.input(1));
    ASSERT_NE(scale, nullptr);
    bool has_axis = false;
    for (const auto& a : n.attribute()) has_axis |= a.name() == "axis";
    EXPECT_EQ(scale->dims_size(), has_axis ? 1 : 0) << n.name();
    if (per_channel) {
      EXPECT_EQ(has_axis, *per_channel) << n.name();
    }
    if (x->data_type() == ::onnx::TensorProto::INT8) ++int8_weights;
    if (x->data_type() == ::onnx::TensorProto::INT32) ++int32_biases;
  }
  EXPECT_EQ(int8_weights, weights);
  EXPECT_EQ(int32_biases, biases);
  // No float weights are left: every float initializer is a scale.
  for (const auto& t : g.initializer()) {
    if (t.data_type() == ::onnx::TensorProto::FLOAT) {
      EXPECT_LE(t.dims_size(), 1) << t.name();
    }
  }
}

// ---- onnxruntime ----

std::string TempDir() {
  static const std::string dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "anvil-qdq-XXXXXX").string();
    return std::string(mkdtemp(t.data()));
  }();
  return dir;
}

void WriteRaw(const std::string& path, const Tensor& t) {
  const Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
}

bool HavePeers() {
  const std::string python = anvil::test::PeerPython();
  return std::filesystem::exists(python) &&
         std::system((python + " -c 'import onnxruntime, onnx, numpy' >/dev/null 2>&1").c_str()) == 0;
}

struct OrtRun {
  std::multiset<std::string> ops;  // the optimized graph's operators
  std::vector<double> errors;      // per batch, the largest |onnxruntime - Anvil|
};

// Runs the exported file in onnxruntime (graph optimizations on) on batches of 1, 7 and 64.
OrtRun RunOnnxRuntime(nn::Module& model, const Exported& e, const std::string& tag, const IntArray& sample) {
  const std::string dir = TempDir() + "/" + tag;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/model.onnx", std::ios::binary)
      .write(e.bytes.data(), static_cast<std::streamsize>(e.bytes.size()));
  json manifest{{"model", dir + "/model.onnx"}, {"optimized", dir + "/optimized.onnx"}, {"cases", json::array()}};
  manual_seed(11);
  int i = 0;
  for (int64_t batch : {1, 7, 64}) {
    IntArray shape{batch};
    shape.insert(shape.end(), sample.begin(), sample.end());
    const Tensor x = randn(shape);
    Tensor y;
    {
      NoGradGuard g;
      y = model.forward(x);
    }
    const std::string in = dir + "/x" + std::to_string(i) + ".bin", out = dir + "/y" + std::to_string(i) + ".bin";
    ++i;
    WriteRaw(in, x);
    WriteRaw(out, y);
    manifest["cases"].push_back({{"input", in},
                                 {"input_shape", std::vector<int64_t>(shape.begin(), shape.end())},
                                 {"output", out},
                                 {"output_shape", std::vector<int64_t>(y.sizes().begin(), y.sizes().end())}});
  }
  std::ofstream(dir + "/manifest.json") << manifest.dump();
  const std::string cmd = anvil::test::PeerPython() + " " + anvil::test::SourceDir() +
                          "/tests/onnx/run_onnxruntime_qdq.py " + dir + "/manifest.json 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe) != nullptr) text += buf;
  const int rc = pclose(pipe);
  EXPECT_EQ(rc, 0) << text;
  OrtRun r;
  if (rc != 0) return r;
  const json result = json::parse(text.substr(text.rfind('{')));
  for (const auto& op : result.at("ops")) r.ops.insert(op.get<std::string>());
  for (const auto& err : result.at("errors")) r.errors.push_back(err.get<double>());
  EXPECT_EQ(r.errors.size(), 3u) << text;
  return r;
}

std::string Join(const std::multiset<std::string>& ops) {
  std::string s;
  for (const auto& op : ops) s += (s.empty() ? "" : " ") + op;
  return s;
}

double ImportedError(nn::Module& model, const Exported& e, const IntArray& sample);

// ---- static ----

TEST(OnnxQdq, StaticMlpWritesInt8WeightsInt32BiasAndUint8Activations) {
  manual_seed(1);
  auto model = Mlp(/*with_stub=*/true);
  QuantizeStatic(*model, {16}, /*per_channel=*/true);
  const Exported e = Export(*model, {16});
  const auto ops = OpTypes(e.proto.graph());
  EXPECT_EQ(ops.count("Gemm"), 2u) << Join(ops);
  EXPECT_EQ(ops.count("Relu"), 1u) << Join(ops);  // the fused ReLU, before the output's QuantizeLinear
  // The stub's pair is the first layer's input: 3 activation pairs (stub, layer 1, layer 2
  // outputs), plus 2 weights and 2 biases dequantized.
  EXPECT_EQ(ops.count("QuantizeLinear"), 3u) << Join(ops);
  EXPECT_EQ(ops.count("DequantizeLinear"), 7u) << Join(ops);
  ExpectQdqPattern(e.proto.graph(), 2, 2, /*per_channel=*/true);
  EXPECT_EQ(e.proto.opset_import(0).version(), kDefaultOpset);
}

TEST(OnnxQdq, BiasIsRoundedToStepsOfInputTimesWeightScale) {
  manual_seed(2);
  auto model = Mlp(false);
  QuantizeStatic(*model, {16}, /*per_channel=*/false);
  const Exported e = Export(*model, {16});
  ExpectQdqPattern(e.proto.graph(), 2, 2, /*per_channel=*/false);
  // The first layer's bias: round(b / (s_x * s_w)) with scale s_x * s_w, from the layer's own
  // parameters.
  auto* layer = dynamic_cast<quant::QuantizedLinear*>(model->children()[0].get());
  ASSERT_NE(layer, nullptr);
  const float step = static_cast<float>(layer->input_qparams().scale) * static_cast<float>(layer->qweight().q_scale());
  const std::vector<float> bias = layer->float_bias().to_vector<float>();
  bool found = false;
  for (const auto& n : e.proto.graph().node()) {
    if (n.op_type() != "DequantizeLinear") continue;
    const auto* q = Initializer(e.proto.graph(), n.input(0));
    if (q == nullptr || q->data_type() != ::onnx::TensorProto::INT32 || q->dims(0) != 32) continue;
    const auto* s = Initializer(e.proto.graph(), n.input(1));
    float scale;
    std::memcpy(&scale, s->raw_data().data(), sizeof scale);
    EXPECT_EQ(scale, step);
    const auto* ints = reinterpret_cast<const int32_t*>(q->raw_data().data());
    for (size_t j = 0; j < bias.size(); ++j) EXPECT_EQ(ints[j], std::nearbyint(double(bias[j]) / double(step))) << j;
    found = true;
  }
  EXPECT_TRUE(found);
}

TEST(OnnxQdq, StaticMlpFusesInOnnxRuntimeWithinOneOutputStep) {
  if (!HavePeers()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
  for (bool per_channel : {true, false}) {
    manual_seed(3);
    auto model = Mlp(/*with_stub=*/per_channel);
    QuantizeStatic(*model, {16}, per_channel);
    const Exported e = Export(*model, {16});
    const OrtRun r = RunOnnxRuntime(*model, e, per_channel ? "mlp_channel" : "mlp_tensor", {16});
    EXPECT_EQ(r.ops.count("QGemm"), 2u) << Join(r.ops);
    EXPECT_EQ(r.ops.count("Gemm"), 0u) << Join(r.ops);
    const double step = OutputStep(*model);
    for (double err : r.errors) {
      std::printf("onnxruntime qdq mlp %s max_abs_error %.3g = %.2f output steps\n",
                  per_channel ? "per-channel" : "per-tensor", err, err / step);
      EXPECT_LE(err, step * 1.001);
    }
  }
}

TEST(OnnxQdq, StaticCnnFusesIntoQLinearConvAndQGemmWithinOneOutputStep) {
  manual_seed(4);
  auto model = Cnn();
  QuantizeStatic(*model, {1, 8, 8}, /*per_channel=*/true);
  const Exported e = Export(*model, {1, 8, 8});
  const auto ops = OpTypes(e.proto.graph());
  EXPECT_EQ(ops.count("Conv"), 1u) << Join(ops);
  EXPECT_EQ(ops.count("Gemm"), 2u) << Join(ops);
  EXPECT_EQ(ops.count("BatchNormalization"), 0u) << Join(ops);  // folded by fuse_modules
  ExpectQdqPattern(e.proto.graph(), 3, 3, /*per_channel=*/true);
  if (!HavePeers()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
  const OrtRun r = RunOnnxRuntime(*model, e, "cnn", {1, 8, 8});
  EXPECT_EQ(r.ops.count("QLinearConv"), 1u) << Join(r.ops);
  EXPECT_EQ(r.ops.count("QGemm"), 2u) << Join(r.ops);
  EXPECT_EQ(r.ops.count("Conv"), 0u) << Join(r.ops);
  const double step = OutputStep(*model);
  for (double err : r.errors) {
    std::printf("onnxruntime qdq cnn max_abs_error %.3g = %.2f output steps\n", err, err / step);
    EXPECT_LE(err, step * 1.001);
  }
}

// Layers built directly with chosen parameters: per-tensor weights, no bias, a strided and
// dilated convolution whose fused ReLU has a nonzero output zero point (the Relu stays in the
// graph), and a linear layer on [batch, 5, 16] (MatMul with [in, out] weights, then Add).
TEST(OnnxQdq, HandMadeLayersMatchOnnxRuntimeAndImport) {
  manual_seed(9);
  const quant::ActivationQParams q0{0.03, 128}, q1{0.02, 10}, q2{0.05, 100};
  const quant::QTensor wc = quant::quantize_per_tensor(randn({6, 3, 3, 3}) * 0.2, 0.004, 0, quant::QDtype::QInt8);
  nn::ConvOptions o;
  o.stride = {2, 2};
  o.padding = {2, 2};
  o.dilation = {2, 2};
  auto conv = std::make_shared<quant::QuantizedConv2d>(wc, Tensor(), o, q0, q1, /*relu=*/true);
  const Tensor wl = randn({4, 6 * 5 * 5}) * 0.1;
  const Tensor ws = amax(wl.abs(), {1}).to(kFloat64) / 127.5;
  auto lin = std::make_shared<quant::QuantizedLinear>(
      quant::quantize_per_channel(wl, ws, zeros({4}, kInt64), 0, quant::QDtype::QInt8), randn({4}), q1, q2, false);
  auto cnn = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<quant::QuantStub>(q0), conv, std::make_shared<nn::Flatten>(), lin});
  cnn->eval();
  const Exported ce = Export(*cnn, {3, 9, 9});
  const auto ops = OpTypes(ce.proto.graph());
  EXPECT_EQ(ops.count("Relu"), 1u) << Join(ops);
  ExpectQdqPattern(ce.proto.graph(), 2, 1, std::nullopt);  // the conv has no bias

  const quant::QTensor w3 = quant::quantize_per_tensor(randn({8, 16}) * 0.3, 0.006, 0, quant::QDtype::QInt8);
  auto seq = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<quant::QuantizedLinear>(w3, randn({8}) * 0.1, q0, q2, true)});
  seq->eval();
  const Exported se = Export(*seq, {5, 16});
  const auto seq_ops = OpTypes(se.proto.graph());
  EXPECT_EQ(seq_ops.count("MatMul"), 1u) << Join(seq_ops);
  EXPECT_EQ(seq_ops.count("Add"), 1u) << Join(seq_ops);

  for (const auto& [name, model, e, sample, step] :
       {std::tuple{"hand-made cnn", cnn, &ce, IntArray{3, 9, 9}, q2.scale},
        std::tuple{"rank-3 linear", seq, &se, IntArray{5, 16}, q2.scale}}) {
    {
      // The outputs spread over many steps (no saturated or constant output that would agree
      // trivially).
      NoGradGuard g;
      IntArray shape{64};
      shape.insert(shape.end(), sample.begin(), sample.end());
      const Tensor y = model->forward(randn(shape));
      EXPECT_GT((y.max() - y.min()).item<double>(), 20 * step) << name;
    }
    const double imported = ImportedError(*model, *e, sample);
    std::printf("imported qdq %s max_abs_error %.3g = %.2f output steps\n", name, imported, imported / step);
    EXPECT_LE(imported, step * 1.001) << name;
    if (!HavePeers()) continue;
    const OrtRun r = RunOnnxRuntime(*model, *e, std::string(name) == "hand-made cnn" ? "hand_cnn" : "rank3", sample);
    for (double err : r.errors) {
      std::printf("onnxruntime qdq %s max_abs_error %.3g = %.2f output steps (%s)\n", name, err, err / step,
                  Join(r.ops).c_str());
      EXPECT_LE(err, step * 1.001) << name;
    }
  }
}

// ---- dynamic ----

TEST(OnnxQdq, DynamicMlpIsDynamicQuantizeLinearAndMatMulInteger) {
  manual_seed(5);
  auto model = Mlp(false);
  quant::quantize_dynamic(*model);
  model->eval();
  const Exported e = Export(*model, {16});
  const auto ops = OpTypes(e.proto.graph());
  EXPECT_EQ(ops.count("DynamicQuantizeLinear"), 2u) << Join(ops);
  EXPECT_EQ(ops.count("MatMulInteger"), 2u) << Join(ops);
  EXPECT_EQ(ops.count("Gemm") + ops.count("MatMul"), 0u) << Join(ops);
  int64_t int8_weights = 0;
  for (const auto& t : e.proto.graph().initializer()) {
    if (t.data_type() == ::onnx::TensorProto::INT8 && t.dims_size() == 2) ++int8_weights;
  }
  EXPECT_EQ(int8_weights, 2);
}

TEST(OnnxQdq, DynamicMlpFusesIntoDynamicQuantizeMatMul) {
  if (!HavePeers()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
  manual_seed(6);
  auto model = Mlp(false);
  quant::quantize_dynamic(*model);
  model->eval();
  const Exported e = Export(*model, {16});
  const OrtRun r = RunOnnxRuntime(*model, e, "dynamic_mlp", {16});
  EXPECT_EQ(r.ops.count("DynamicQuantizeMatMul"), 2u) << Join(r.ops);
  EXPECT_EQ(r.ops.count("MatMulInteger"), 0u) << Join(r.ops);
  // onnxruntime chooses each batch's activation parameters by the ONNX formula (the full
  // [0, 255] range, its own rounding), Anvil by PyTorch's (fbgemm's, 7 bits without VNNI):
  // the activations can land one step apart, so the outputs agree to a fraction of their
  // range rather than bit for bit.
  NoGradGuard g;
  manual_seed(11);
  const double range = model->forward(randn({64, 16})).abs().max().item<double>();
  for (double err : r.errors) {
    std::printf("onnxruntime qdq dynamic mlp max_abs_error %.3g (%.2f%% of the output range)\n", err,
                100 * err / range);
    EXPECT_LE(err, 0.03 * range);
  }
}

// ---- import ----

// The largest |imported - Anvil| over a batch of 64.
double ImportedError(nn::Module& model, const Exported& e, const IntArray& sample) {
  const ImportedModel imported = import_model(e.bytes);
  IntArray shape{64};
  shape.insert(shape.end(), sample.begin(), sample.end());
  manual_seed(12);
  const Tensor x = randn(shape);
  NoGradGuard g;
  return (imported.module->forward(x) - model.forward(x)).abs().max().item<double>();
}

TEST(OnnxQdq, StaticQdqFilesImportBackOntoTheInt8KernelsWithTheModelsBits) {
  for (const bool per_channel : {true, false}) {
    manual_seed(7);
    auto model = Cnn();
    QuantizeStatic(*model, {1, 8, 8}, per_channel);
    const Exported e = Export(*model, {1, 8, 8});
    const ImportedModel imported = import_model(e.bytes);
    for (const char* op : {"QuantizeLinear", "DequantizeLinear"}) {
      EXPECT_TRUE(std::count(imported.operators.begin(), imported.operators.end(), op)) << op;
    }
    // Each QDQ group runs as one int8 layer (qdq_fusion.h).
    ASSERT_EQ(imported.int8_layers.size(), 3u);
    EXPECT_THAT(imported.int8_layers[0], ::testing::HasSubstr("-> QuantizedConv2d (relu, "));
    EXPECT_THAT(imported.int8_layers[1], ::testing::HasSubstr("-> QuantizedLinear (relu, "));
    EXPECT_THAT(imported.int8_layers[2], ::testing::HasSubstr("-> QuantizedLinear ("));
    for (const std::string& l : imported.int8_layers)
      EXPECT_THAT(l, ::testing::HasSubstr(per_channel ? "per channel" : "per tensor"));
    // The int8 layers compute the model's integers again, with the file's biases: int32 steps
    // of s_x * s_w (the QDQ form) where the model holds float32 biases, so a requantization now
    // and then rounds the other way, by one output step.
    manual_seed(12);
    const Tensor x = randn({64, 1, 8, 8});
    NoGradGuard g;
    const Tensor mine = model->forward(x), theirs = imported.module->forward(x);
    const double step = OutputStep(*model);
    const double err = (mine - theirs).abs().max().item<double>();
    const int64_t same = eq(mine, theirs).sum().item<int64_t>();
    std::printf("imported qdq cnn (%s): %lld of %lld outputs bit-identical, max_abs_error %.3g = %.2f output steps\n",
                per_channel ? "per channel" : "per tensor", static_cast<long long>(same),
                static_cast<long long>(mine.numel()), err, err / step);
    EXPECT_LE(err, step * 1.001);
    EXPECT_GE(same, mine.numel() * 95 / 100);
  }
}

// A group that another node also reads stays as written (in float), and the graph still
// computes the same values.
TEST(OnnxQdq, GroupsWhoseValuesAreReadElsewhereAreNotFused) {
  manual_seed(13);
  auto model = Mlp(/*with_stub=*/true);
  QuantizeStatic(*model, {16}, true);
  Exported e = Export(*model, {16});
  // A second graph output that reads the first Gemm's float output: that group cannot fuse.
  ::onnx::GraphProto* g = e.proto.mutable_graph();
  std::string gemm_out;
  for (const auto& n : g->node())
    if (n.op_type() == "Gemm" && gemm_out.empty()) gemm_out = n.output(0);
  ASSERT_FALSE(gemm_out.empty());
  *g->add_output() = g->output(0);
  g->mutable_output(1)->set_name(gemm_out);
  std::string bytes;
  ASSERT_TRUE(e.proto.SerializeToString(&bytes));
  const ImportedModel imported = import_model(bytes);
  ASSERT_EQ(imported.int8_layers.size(), 1u);
  EXPECT_THAT(imported.int8_layers[0], ::testing::HasSubstr("-> QuantizedLinear (per channel)"));
  manual_seed(14);
  const Tensor x = randn({32, 16});
  NoGradGuard ng;
  const double err = (imported.module->forward(x) - model->forward(x)).abs().max().item<double>();
  // The unfused group computes in float and rounds its sums; a hidden value one step off can
  // move an output by a step more.
  EXPECT_LE(err, OutputStep(*model) * 2.001);
}

// ---- quantizing an imported float graph (quantize_graph.h) ----

// The scale of the DequantizeLinear that makes the graph's output: one output step.
double GraphOutputStep(const std::string& bytes) {
  ::onnx::ModelProto m;
  EXPECT_TRUE(m.ParseFromString(bytes));
  const ::onnx::GraphProto& g = m.graph();
  std::string out = g.output(0).name();
  for (auto n = g.node().rbegin(); n != g.node().rend(); ++n)
    if (n->op_type() == "Identity" && n->output(0) == out) out = n->input(0);  // an exporter's renaming
  for (const auto& n : g.node()) {
    if (n.op_type() != "DequantizeLinear" || n.output(0) != out) continue;
    const ::onnx::TensorProto* s = Initializer(g, n.input(1));
    float v = 0;
    if (s != nullptr && s->raw_data().size() == 4) std::memcpy(&v, s->raw_data().data(), 4);
    return v;
  }
  ADD_FAILURE() << "the graph's output is not made by a DequantizeLinear";
  return 0;
}

TEST(OnnxQuantize, AFloatGraphQuantizesStaticallyAndRunsOnTheInt8Kernels) {
  for (const bool per_channel : {true, false}) {
    manual_seed(15);
    auto model = Cnn();
    const Exported fp32 = Export(*model, {1, 8, 8});
    std::vector<Tensor> calibration;
    for (int i = 0; i < 8; ++i) calibration.push_back(randn({32, 1, 8, 8}));
    quant::QConfig q;
    q.activation = quant::ActivationObserver::kMinMax;
    q.per_channel_weights = per_channel;
    const GraphQuantization gq = quantize_onnx_static(fp32.bytes, calibration, q);
    ASSERT_EQ(gq.layers.size(), 3u) << gq.layers.size();
    EXPECT_THAT(gq.layers[0], ::testing::StartsWith("Conv "));
    // The QDQ pattern onnxruntime fuses: int8 weights and int32 biases behind DequantizeLinear.
    ::onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(gq.model));
    ExpectQdqPattern(m.graph(), 3, 3, per_channel);
    const ImportedModel imported = import_model(gq.model);
    ASSERT_EQ(imported.int8_layers.size(), 3u);
    // Against the float graph: within the int8 error of a model of this size.
    const ImportedModel float_graph = import_model(fp32.bytes);
    manual_seed(16);
    const Tensor x = randn({64, 1, 8, 8});
    NoGradGuard g;
    const Tensor y_float = float_graph.module->forward(x), y_int8 = imported.module->forward(x);
    const double range = y_float.abs().max().item<double>();
    const double err = (y_float - y_int8).abs().max().item<double>();
    const double step = GraphOutputStep(gq.model);
    std::printf("quantized float graph (%s): max |int8 - float| %.3g (%.2f%% of the output range, %.1f steps)\n",
                per_channel ? "per channel" : "per tensor", err, 100 * err / range, err / step);
    EXPECT_LE(err, 0.05 * range);
    // The same ranking of classes for nearly every input.
    const int64_t agree = eq(y_float.argmax(1), y_int8.argmax(1)).sum().item<int64_t>();
    EXPECT_GE(agree, 60) << agree << " of 64";
    // A QDQ file of its own: it quantizes no further, and exports back unchanged in kind.
    EXPECT_THROW(quantize_onnx_static(gq.model, calibration, q), Error);
    if (!HavePeers()) continue;
    // onnxruntime fuses the same file into its int8 operators, within one output step of Anvil.
    Exported qe;
    qe.bytes = gq.model;
    qe.proto = m;
    const OrtRun r = RunOnnxRuntime(*imported.module, qe, per_channel ? "graph_channel" : "graph_tensor", {1, 8, 8});
    EXPECT_EQ(r.ops.count("QLinearConv"), 1u) << Join(r.ops);
    for (double e : r.errors) {
      std::printf("onnxruntime on the quantized graph: max_abs_error %.3g = %.2f output steps\n", e, e / step);
      EXPECT_LE(e, step * 1.001);
    }
  }
}

// Dynamic quantization of a float graph: each Gemm becomes DynamicQuantizeLinear ->
// MatMulInteger -> Cast -> Mul [-> Add], the convolution stays float (named in `kept`), the
// importer runs the groups on the int8 kernels, and onnxruntime fuses the same file into
// DynamicQuantizeMatMul and computes what Anvil's import computes.
TEST(OnnxQuantize, AFloatGraphQuantizesDynamicallyAndRunsOnTheInt8Kernels) {
  for (const bool per_channel : {true, false}) {
    manual_seed(18);
    auto model = Cnn();
    const Exported fp32 = Export(*model, {1, 8, 8});
    quant::QConfig q;
    q.per_channel_weights = per_channel;
    const GraphQuantization gq = quantize_onnx_dynamic(fp32.bytes, q);
    ASSERT_EQ(gq.layers.size(), 2u);
    for (const std::string& l : gq.layers) EXPECT_THAT(l, ::testing::StartsWith("Gemm "));
    ASSERT_EQ(gq.kept.size(), 1u);
    EXPECT_THAT(gq.kept[0], ::testing::HasSubstr("a convolution: dynamic quantization covers Gemm and MatMul"));
    ::onnx::ModelProto m;
    ASSERT_TRUE(m.ParseFromString(gq.model));
    const auto ops = OpTypes(m.graph());
    EXPECT_EQ(ops.count("DynamicQuantizeLinear"), 2u) << Join(ops);
    EXPECT_EQ(ops.count("MatMulInteger"), 2u) << Join(ops);
    EXPECT_EQ(ops.count("Gemm"), 0u) << Join(ops);
    EXPECT_EQ(ops.count("Conv"), 1u) << Join(ops);
    const ImportedModel imported = import_model(gq.model);
    ASSERT_EQ(imported.int8_layers.size(), 2u);
    for (const std::string& l : imported.int8_layers)
      EXPECT_THAT(l, ::testing::HasSubstr(per_channel ? "-> DynamicQuantizedLinear (per channel, ONNX activations)"
                                                      : "-> DynamicQuantizedLinear (per tensor, ONNX activations)"));
    const ImportedModel float_graph = import_model(fp32.bytes);
    manual_seed(19);
    const Tensor x = randn({64, 1, 8, 8});
    NoGradGuard g;
    const Tensor y_float = float_graph.module->forward(x), y_int8 = imported.module->forward(x);
    const double range = y_float.abs().max().item<double>();
    const double err = (y_float - y_int8).abs().max().item<double>();
    std::printf("dynamically quantized float graph (%s): max |int8 - float| %.3g (%.2f%% of the output range)\n",
                per_channel ? "per channel" : "per tensor", err, 100 * err / range);
    EXPECT_LE(err, 0.03 * range);
    EXPECT_THROW(quantize_onnx_dynamic(gq.model, q), Error);  // int8 already
    // keep_float by node name: that Gemm stays float, listed as kept; a name the graph lacks
    // is refused with the names it has.
    std::string first_gemm;
    for (const auto& n : fp32.proto.graph().node())
      if (n.op_type() == "Gemm" && first_gemm.empty()) first_gemm = n.name();
    ASSERT_FALSE(first_gemm.empty());
    quant::QConfig keep = q;
    keep.keep_float = {first_gemm};
    const GraphQuantization kept = quantize_onnx_dynamic(fp32.bytes, keep);
    EXPECT_EQ(kept.layers.size(), 1u);
    EXPECT_THAT(Join(std::multiset<std::string>(kept.kept.begin(), kept.kept.end())),
                ::testing::HasSubstr("\"" + first_gemm + "\": kept in float as asked (keep_float)"));
    keep.keep_float = {"no-such-node"};
    try {
      quantize_onnx_dynamic(fp32.bytes, keep);
      ADD_FAILURE() << "an unknown node name was accepted";
    } catch (const quant::QuantizationInputError& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr("\"" + first_gemm + "\""));
    }
    if (!HavePeers()) continue;
    Exported qe;
    qe.bytes = gq.model;
    qe.proto = m;
    const OrtRun r = RunOnnxRuntime(*imported.module, qe, per_channel ? "dyn_channel" : "dyn_tensor", {1, 8, 8});
    EXPECT_EQ(r.ops.count("DynamicQuantizeMatMul"), 2u) << Join(r.ops);
    for (double e : r.errors) {
      std::printf("onnxruntime on the dynamically quantized graph: max_abs_error %.3g (%.2g%% of the range)\n", e,
                  100 * e / range);
      EXPECT_LE(e, 1e-4 * range);
    }
  }
}

// A file quantized by onnxruntime's own dynamic quantizer (its MatMulInteger groups, with its
// choice of weight scales and zero-point inputs) imports onto the int8 kernels and computes
// what onnxruntime computes from the same file.
TEST(OnnxQuantize, OnnxRuntimesDynamicQuantizerOutputRunsOnTheInt8Kernels) {
  if (!HavePeers()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
  struct Case {
    std::string name;
    std::shared_ptr<nn::Sequential> model;
    IntArray sample;
  };
  manual_seed(22);
  const std::vector<Case> cases = {{"mlp", Mlp(false), {16}}, {"cnn", Cnn(), {1, 8, 8}}};
  for (const Case& c : cases)
    for (const bool per_channel : {true, false}) {
      auto& model = c.model;
      const Exported fp32 = Export(*model, c.sample);
      const std::string tag = "ort_dynamic_" + c.name + (per_channel ? "_channel" : "_tensor");
      const std::string dir = TempDir() + "/" + tag;
      std::filesystem::create_directories(dir);
      std::ofstream(dir + "/float.onnx", std::ios::binary)
          .write(fp32.bytes.data(), static_cast<std::streamsize>(fp32.bytes.size()));
      const std::string cmd = anvil::test::PeerPython() + " " + anvil::test::SourceDir() +
                              "/tests/onnx/ort_quantize_dynamic.py " + dir + "/float.onnx " + dir + "/int8.onnx " +
                              (per_channel ? "per_channel" : "per_tensor") + " 2>&1";
      FILE* pipe = popen(cmd.c_str(), "r");
      std::string text;
      char buf[512];
      while (fgets(buf, sizeof buf, pipe) != nullptr) text += buf;
      ASSERT_EQ(pclose(pipe), 0) << text;
      EXPECT_THAT(text, ::testing::HasSubstr("MatMulInteger"));
      Exported q;
      {
        std::ifstream in(dir + "/int8.onnx", std::ios::binary);
        q.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      }
      ASSERT_TRUE(q.proto.ParseFromString(q.bytes));
      const ImportedModel imported = import_model(q.bytes);
      // Two Linear layers in each model (the CNN's convolution is onnxruntime's ConvInteger
      // group, run as written).
      ASSERT_EQ(imported.int8_layers.size(), 2u) << text;
      for (const std::string& l : imported.int8_layers)
        EXPECT_THAT(l, ::testing::HasSubstr("-> DynamicQuantizedLinear ("));
      if (c.name == "cnn") {
        EXPECT_THAT(text, ::testing::HasSubstr("ConvInteger"));
      }
      NoGradGuard g;
      manual_seed(23);
      IntArray shape{64};
      shape.insert(shape.end(), c.sample.begin(), c.sample.end());
      const double range = model->forward(randn(shape)).abs().max().item<double>();
      const OrtRun r = RunOnnxRuntime(*imported.module, q, tag, c.sample);
      for (double e : r.errors) {
        std::printf(
            "onnxruntime's dynamic quantizer (%s, %s): Anvil's import against onnxruntime, max_abs_error %.3g\n",
            c.name.c_str(), per_channel ? "per channel" : "per tensor", e);
        EXPECT_LE(e, 1e-4 * range);
      }
    }
}

TEST(OnnxQuantize, RefusalsSayWhatWasFound) {
  manual_seed(17);
  auto model = Cnn();
  const Exported fp32 = Export(*model, {1, 8, 8});
  try {
    quantize_onnx_static(fp32.bytes, {});
    ADD_FAILURE() << "no calibration batch was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("at least one calibration batch"));
  }
  try {
    quantize_onnx_static(fp32.bytes, {randn({4, 3, 8, 8})});
    ADD_FAILURE() << "a batch of the wrong shape was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("node"));
  }
  // A graph with nothing to quantize names what it saw.
  auto act = std::make_shared<nn::Sequential>(
      std::initializer_list<std::shared_ptr<nn::Module>>{std::make_shared<nn::ReLU>()});
  act->eval();
  const Exported relu_only = Export(*act, {4});
  try {
    quantize_onnx_static(relu_only.bytes, {randn({2, 4})});
    ADD_FAILURE() << "a graph without Conv/Gemm/MatMul was quantized";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("no Conv, Gemm or MatMul"));
  }
}

// The same graph with every MatMulInteger's output also a graph output: no dynamic group fuses,
// and the importer runs the graph as written, operator by operator.
std::string WithIntegerSumsExposed(Exported e) {
  ::onnx::GraphProto* g = e.proto.mutable_graph();
  std::vector<std::string> sums;
  for (const auto& n : g->node())
    if (n.op_type() == "MatMulInteger") sums.push_back(n.output(0));
  for (const std::string& v : sums) {
    *g->add_output() = g->output(0);
    g->mutable_output(g->output_size() - 1)->set_name(v);
  }
  std::string bytes;
  EXPECT_TRUE(e.proto.SerializeToString(&bytes));
  return bytes;
}

TEST(OnnxQdq, DynamicQdqFilesImportBack) {
  manual_seed(8);
  auto model = Mlp(false);
  quant::quantize_dynamic(*model);
  model->eval();
  const Exported e = Export(*model, {16});
  // Each DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul -> Add group runs as one int8
  // layer with ONNX's activation formula, giving the bits of the graph as written.
  const ImportedModel fused = import_model(e.bytes);
  ASSERT_EQ(fused.int8_layers.size(), 2u);
  for (const std::string& l : fused.int8_layers)
    EXPECT_THAT(l, ::testing::HasSubstr("-> DynamicQuantizedLinear (per channel, ONNX activations)"));
  const ImportedModel as_written = import_model(WithIntegerSumsExposed(e));
  EXPECT_TRUE(as_written.int8_layers.empty());
  for (const int64_t batch : {1, 7, 64}) {
    manual_seed(static_cast<uint64_t>(20 + batch));
    Tensor x = randn({batch, 16});
    if (batch == 7) x = x.relu();  // all >= 0: the range's low end is 0 itself
    NoGradGuard g;
    const Tensor a = fused.module->forward(x), b = as_written.module->forward(x);
    EXPECT_TRUE(equal(a, b)) << "batch " << batch << ": max |fused - as written| "
                             << (a - b).abs().max().item<double>();
  }
  const double err = ImportedError(*model, e, {16});
  NoGradGuard g;
  manual_seed(12);
  const double range = model->forward(randn({64, 16})).abs().max().item<double>();
  std::printf("imported qdq dynamic mlp max_abs_error %.3g (%.2f%% of the output range)\n", err, 100 * err / range);
  EXPECT_LE(err, 0.03 * range);
}

}  // namespace
}  // namespace anvil::onnx
