// ONNX export: the graphs written for the presets and the nn layers (symbolic batch, the
// operators chosen, ONNX's checker and shape inference passing inside export), and their
// outputs in onnxruntime against Anvil's at batch 1, 7 and 64 (and two sequence lengths where
// the sequence is symbolic).
#include "core/onnx/export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/anvil.h"
#include "core/models/spec.h"
#include "core/nn/rnn.h"
#include "core/onnx/import.h"
#include "core/ops/dispatch.h"
#include "core/ops/op_table.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "tests/paths.h"

namespace anvil::onnx {
namespace {

struct Exported {
  models::BuiltModel built;
  std::vector<InputSignature> inputs;
  std::string bytes;
  ::onnx::ModelProto proto;
};

Exported Export(const std::string& spec, const ExportOptions& options = {}) {
  Exported e;
  e.built = models::build_model(spec);
  e.built.module->eval();
  e.inputs = {InputSignature{"input", e.built.input_shape, e.built.input_dtype}};
  e.bytes = export_model(*e.built.module, e.inputs, options);
  EXPECT_TRUE(e.proto.ParseFromString(e.bytes));
  return e;
}

std::multiset<std::string> OpTypes(const ::onnx::ModelProto& m) {
  std::multiset<std::string> ops;
  for (const auto& n : m.graph().node()) ops.insert(n.op_type());
  return ops;
}

std::string Dim(const ::onnx::ValueInfoProto& v, int d) {
  const auto& dim = v.type().tensor_type().shape().dim(d);
  return dim.has_dim_param() ? dim.dim_param() : std::to_string(dim.dim_value());
}

TEST(OnnxExport, MlpHasASymbolicBatchNamedWeightsAndGemms) {
  const Exported e = Export(models::preset_spec("mlp", {64}, 10));
  const auto& g = e.proto.graph();
  ASSERT_EQ(g.input_size(), 1);
  EXPECT_EQ(g.input(0).name(), "input");
  EXPECT_EQ(Dim(g.input(0), 0), "batch");
  EXPECT_EQ(Dim(g.input(0), 1), "64");
  ASSERT_EQ(g.output_size(), 1);
  EXPECT_EQ(Dim(g.output(0), 0), "batch");
  EXPECT_EQ(Dim(g.output(0), 1), "10");
  const auto ops = OpTypes(e.proto);
  EXPECT_EQ(ops.count("Gemm"), 3u);
  EXPECT_EQ(ops.count("Relu"), 2u);
  std::set<std::string> initializers;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  for (const auto& [name, p] : e.built.module->named_parameters()) {
    EXPECT_TRUE(initializers.count(name)) << "no initializer named " << name;
  }
  EXPECT_EQ(e.proto.opset_import(0).version(), kDefaultOpset);
  EXPECT_EQ(e.proto.producer_name(), "anvil");
}

TEST(OnnxExport, CnnFlattensWithMinusOneNotTheCaptureBatch) {
  const Exported e = Export(models::preset_spec("lenet5", {1, 8, 8}, 10));
  const auto ops = OpTypes(e.proto);
  EXPECT_EQ(ops.count("Conv"), 2u);
  EXPECT_EQ(ops.count("MaxPool"), 2u);
  // The flatten's Reshape target is a constant with -1 for the batch, never 2, 3 or 5.
  for (const auto& n : e.proto.graph().node()) {
    if (n.op_type() != "Reshape") continue;
    bool found = false;
    for (const auto& t : e.proto.graph().initializer()) {
      if (t.name() != n.input(1)) continue;
      found = true;
      ASSERT_EQ(t.data_type(), ::onnx::TensorProto::INT64);
      std::vector<int64_t> shape(static_cast<size_t>(t.raw_data().size() / 8));
      std::memcpy(shape.data(), t.raw_data().data(), t.raw_data().size());
      EXPECT_EQ(shape[0], -1) << "Reshape " << n.name();
    }
    EXPECT_TRUE(found) << "Reshape " << n.name() << " takes a computed shape";
  }
}

TEST(OnnxExport, BatchNormAndLayerNormAreSingleNodes) {
  const Exported e = Export(R"({"input_shape": [3, 6, 6], "layers": [
      {"type": "conv2d", "out_channels": 4, "kernel_size": 3, "padding": "same"},
      {"type": "batchnorm2d"}, {"type": "relu"}, {"type": "flatten"},
      {"type": "linear", "out_features": 8}, {"type": "layernorm"}]})");
  const auto ops = OpTypes(e.proto);
  EXPECT_EQ(ops.count("BatchNormalization"), 1u);
  EXPECT_EQ(ops.count("LayerNormalization"), 1u);
  EXPECT_EQ(ops.count("ReduceMean"), 0u) << "the normalisations' inner ops leaked into the graph";
}

TEST(OnnxExport, RecurrentLayersAreOnnxNodesNotUnrolledLoops) {
  const Exported e = Export(R"({"input_shape": [6, 5], "layers": [
      {"type": "lstm", "hidden_size": 7, "num_layers": 2, "return": "sequence"},
      {"type": "gru", "hidden_size": 4}]})");
  const auto ops = OpTypes(e.proto);
  EXPECT_EQ(ops.count("LSTM"), 2u);
  EXPECT_EQ(ops.count("GRU"), 1u);
  EXPECT_EQ(ops.count("Sigmoid"), 0u) << "the recurrence was unrolled";
}

TEST(OnnxExport, BidirectionalLayersAreOneBidirectionalNodePerLayer) {
  const Exported e = Export(R"({"input_shape": [6, 5], "layers": [
      {"type": "lstm", "hidden_size": 7, "num_layers": 2, "bidirectional": true, "return": "sequence"},
      {"type": "gru", "hidden_size": 4, "bidirectional": true}]})");
  const auto ops = OpTypes(e.proto);
  EXPECT_EQ(ops.count("LSTM"), 2u);
  EXPECT_EQ(ops.count("GRU"), 1u);
  EXPECT_EQ(ops.count("Sigmoid"), 0u) << "the recurrence was unrolled";
  std::map<std::string, const ::onnx::TensorProto*> inits;
  for (const auto& t : e.proto.graph().initializer()) inits[t.name()] = &t;
  for (const auto& n : e.proto.graph().node()) {
    if (n.op_type() != "LSTM" && n.op_type() != "GRU") continue;
    std::string direction;
    for (const auto& a : n.attribute())
      if (a.name() == "direction") direction = a.s();
    EXPECT_EQ(direction, "bidirectional") << n.name();
    // W, R and B hold one row per direction.
    for (int i = 1; i <= 3; ++i) {
      ASSERT_TRUE(inits.count(n.input(i))) << n.name() << " input " << i;
      EXPECT_EQ(inits[n.input(i)]->dims(0), 2) << n.name() << " input " << i;
    }
  }
}

TEST(OnnxExport, BatchNormFoldsIntoTheConvolutionOnRequest) {
  ExportOptions fold;
  fold.fold_batch_norm = true;
  const std::string spec = models::preset_spec("resnet", {3, 16, 16}, 10);
  const auto plain = OpTypes(Export(spec).proto), folded = OpTypes(Export(spec, fold).proto);
  EXPECT_EQ(plain.count("BatchNormalization"), 7u);
  EXPECT_EQ(folded.count("BatchNormalization"), 0u);
  EXPECT_EQ(folded.count("Conv"), plain.count("Conv"));
}

TEST(OnnxExport, OpsetAndMetadataAreWritten) {
  ExportOptions options;
  options.opset = 13;
  options.metadata = {{"labels", "[\"a\",\"b\"]"}};
  options.producer_version = "9.9";
  const Exported e = Export(models::preset_spec("mlp", {4}, 2), options);
  EXPECT_EQ(e.proto.opset_import(0).version(), 13);
  EXPECT_EQ(e.proto.producer_version(), "9.9");
  ASSERT_EQ(e.proto.metadata_props_size(), 1);
  EXPECT_EQ(e.proto.metadata_props(0).key(), "labels");
  ExportOptions bad;
  bad.opset = 19;
  const auto built = models::build_model(models::preset_spec("mlp", {4}, 2));
  built.module->eval();
  try {
    export_model(*built.module, {InputSignature{"input", {4}, kFloat32}}, bad);
    FAIL() << "opset 19 accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("13 to 17"), std::string::npos) << err.what();
  }
}

TEST(OnnxExport, ParsesDynamicAxes) {
  const std::vector<InputSignature> in{{"tokens", {12}, kInt64}};
  const SymbolicAxis a = parse_dynamic_axis("tokens:1=seq", in);
  EXPECT_EQ(a.input, 0);
  EXPECT_EQ(a.dim, 1);
  EXPECT_EQ(a.name, "seq");
  EXPECT_EQ(parse_dynamic_axis("0:1=len", in).name, "len");
  for (const char* bad : {"tokens:2=seq", "tokens:0=seq", "other:1=seq", "tokens=seq", "tokens:1=", "tokens:1=batch"}) {
    EXPECT_THROW(parse_dynamic_axis(bad, in), Error) << bad;
  }
}

// ---- numerics in onnxruntime ----

std::string TempDir() {
  static const std::string dir = [] {
    std::string t = (std::filesystem::temp_directory_path() / "anvil-onnx-XXXXXX").string();
    return std::string(mkdtemp(t.data()));
  }();
  return dir;
}

void WriteRaw(const std::string& path, const Tensor& t) {
  const Tensor c = t.contiguous();
  std::ofstream(path, std::ios::binary)
      .write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.numel() * c.element_size()));
}

bool HaveOnnxRuntime() {
  static const bool have = [] {
    const std::string python = anvil::test::PeerPython();
    return std::filesystem::exists(python) &&
           std::system((python + " -c 'import onnxruntime, numpy' >/dev/null 2>&1").c_str()) == 0;
  }();
  return have;
}

// One model for onnxruntime: its file and the cases Anvil ran (inputs and outputs).
struct OrtModel {
  std::string tag;
  std::string bytes;
  std::vector<Tensor> inputs, outputs;
};

const char* NumpyDtype(ScalarType t) {
  switch (t) {
    case kInt64:
      return "int64";
    case kBool:
      return "bool";
    default:
      return "float32";
  }
}

// Runs onnxruntime once over every model's cases; returns the largest error per case, in
// order (empty without the Python peers). Strings are appended, not `"x" + s`: GCC 12 at -O3
// reports a false -Wrestrict on a literal prepended to a temporary string.
std::vector<double> CompareWithOnnxRuntime(const std::vector<OrtModel>& models) {
  if (!HaveOnnxRuntime()) return {};
  std::string manifests;
  size_t cases = 0;
  for (const OrtModel& m : models) {
    const std::string dir = TempDir() + "/" + m.tag;
    std::filesystem::create_directories(dir);
    std::ofstream(dir + "/model.onnx", std::ios::binary)
        .write(m.bytes.data(), static_cast<std::streamsize>(m.bytes.size()));
    nlohmann::json manifest{{"model", dir + "/model.onnx"}, {"cases", nlohmann::json::array()}};
    for (size_t i = 0; i < m.inputs.size(); ++i) {
      const Tensor& x = m.inputs[i];
      const Tensor y = m.outputs[i].to(kFloat32);
      const std::string in = dir + "/x" + std::to_string(i) + ".bin", out = dir + "/y" + std::to_string(i) + ".bin";
      WriteRaw(in, x);
      WriteRaw(out, y);
      manifest["cases"].push_back({{"input", in},
                                   {"input_shape", std::vector<int64_t>(x.sizes().begin(), x.sizes().end())},
                                   {"input_dtype", NumpyDtype(x.dtype())},
                                   {"output", out},
                                   {"output_shape", std::vector<int64_t>(y.sizes().begin(), y.sizes().end())}});
      ++cases;
    }
    std::ofstream(dir + "/manifest.json") << manifest.dump();
    manifests.append(" ").append(dir).append("/manifest.json");
  }
  const std::string cmd = anvil::test::PeerPython() + " " + anvil::test::SourceDir() +
                          "/tests/onnx/run_onnxruntime.py" + manifests + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string text;
  char buf[512];
  while (fgets(buf, sizeof buf, pipe) != nullptr) text += buf;
  const int rc = pclose(pipe);
  EXPECT_EQ(rc, 0) << text;
  std::vector<double> errors;
  std::istringstream lines(text);
  int64_t batch = 0;
  double err = 0;
  while (lines >> batch >> err) errors.push_back(err);
  EXPECT_EQ(errors.size(), cases) << text;
  return errors;
}

// Runs onnxruntime on `e`'s file for inputs of the given full shapes; returns the largest
// error per case (empty without the Python peers).
std::vector<double> CompareWithOnnxRuntime(const Exported& e, const std::string& tag,
                                           const std::vector<IntArray>& shapes) {
  if (!HaveOnnxRuntime()) return {};
  OrtModel m{tag, e.bytes, {}, {}};
  manual_seed(7);
  for (const IntArray& shape : shapes) {
    const Tensor x = e.built.input_dtype == kInt64 ? randint(0, 16, shape) : randn(shape);
    NoGradGuard no_grad;
    m.inputs.push_back(x);
    m.outputs.push_back(e.built.module->forward(x));
  }
  return CompareWithOnnxRuntime({m});
}

struct ZooCase {
  const char* name;
  std::string spec;
  ExportOptions options;
  std::vector<IntArray> shapes;  // full input shapes, batch first
};

std::vector<ZooCase> Zoo() {
  auto batches = [](IntArray sample) {
    std::vector<IntArray> out;
    for (int64_t b : {1, 7, 64}) {
      IntArray s{b};
      s.insert(s.end(), sample.begin(), sample.end());
      out.push_back(s);
    }
    return out;
  };
  std::vector<ZooCase> zoo;
  zoo.push_back({"mlp", models::preset_spec("mlp", {64}, 10), {}, batches({64})});
  zoo.push_back({"lenet5", models::preset_spec("lenet5", {1, 8, 8}, 10), {}, batches({1, 8, 8})});
  zoo.push_back({"resnet", models::preset_spec("resnet", {3, 16, 16}, 10), {}, batches({3, 16, 16})});
  ZooCase folded{"resnet_folded", models::preset_spec("resnet", {3, 16, 16}, 10), {}, batches({3, 16, 16})};
  folded.options.fold_batch_norm = true;
  zoo.push_back(folded);
  zoo.push_back({"conv_layers",
                 R"({"input_shape": [4, 9, 9], "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "padding": "same", "groups": 2, "dilation": 2},
      {"type": "groupnorm", "num_groups": 4}, {"type": "leakyrelu", "negative_slope": 0.2},
      {"type": "conv2d", "out_channels": 8, "kernel_size": 3, "stride": 2},
      {"type": "batchnorm2d"}, {"type": "silu"}, {"type": "avgpool2d", "kernel_size": 2},
      {"type": "hardswish"}, {"type": "adaptiveavgpool2d", "output_size": 1}, {"type": "flatten"},
      {"type": "linear", "out_features": 6}, {"type": "gelu"}, {"type": "layernorm"},
      {"type": "tanh"}, {"type": "linear", "out_features": 3}, {"type": "sigmoid"}]})",
                 {},
                 batches({4, 9, 9})});
  // Pooling's options: MaxPool dilations and ceil_mode, AveragePool ceil_mode with and without
  // the padding counted.
  zoo.push_back({"pool_options",
                 R"({"input_shape": [3, 11, 10], "layers": [
      {"type": "maxpool2d", "kernel_size": 3, "stride": 2, "padding": 1, "dilation": [2, 1], "ceil_mode": true},
      {"type": "avgpool2d", "kernel_size": 2, "stride": 2, "padding": 1, "ceil_mode": true},
      {"type": "avgpool2d", "kernel_size": [3, 2], "stride": 2, "padding": 1, "ceil_mode": true,
       "count_include_pad": false}, {"type": "flatten"}]})",
                 {},
                 batches({3, 11, 10})});
  zoo.push_back({"residual_mlp",
                 R"({"input_shape": [12], "layers": [
      {"type": "residual", "layers": [{"type": "linear", "out_features": 12}, {"type": "relu"}]},
      {"type": "residual", "layers": [{"type": "linear", "out_features": 20}]},
      {"type": "unflatten", "shape": [4, 5]}, {"type": "flatten"}, {"type": "linear", "out_features": 5}]})",
                 {},
                 batches({12})});
  zoo.push_back({"gru", models::preset_spec("gru", {6}, 4, 16), {}, batches({6})});
  // Recurrent layers export as ONNX GRU / LSTM nodes, so the sequence can stay symbolic.
  ZooCase lstm{"lstm_2_layers_seq",
               R"({"input_shape": [6, 5], "layers": [
      {"type": "lstm", "hidden_size": 7, "num_layers": 2, "return": "sequence"},
      {"type": "gru", "hidden_size": 4}, {"type": "linear", "out_features": 3}]})",
               {},
               batches({6, 5})};
  lstm.options.dynamic_axes = {{0, 1, "seq"}};
  lstm.shapes.push_back({5, 9, 5});
  lstm.shapes.push_back({3, 1, 5});
  zoo.push_back(lstm);
  ZooCase bidirectional{"bidirectional_seq",
                        R"({"input_shape": [6, 5], "layers": [
      {"type": "lstm", "hidden_size": 7, "num_layers": 2, "bidirectional": true, "return": "sequence"},
      {"type": "gru", "hidden_size": 4, "bidirectional": true}, {"type": "linear", "out_features": 3}]})",
                        {},
                        batches({6, 5})};
  bidirectional.options.dynamic_axes = {{0, 1, "seq"}};
  bidirectional.shapes.push_back({5, 9, 5});
  bidirectional.shapes.push_back({3, 1, 5});
  zoo.push_back(bidirectional);
  ZooCase gru_seq{"gru_seq", models::preset_spec("gru", {6}, 4, 16), {}, batches({6})};
  gru_seq.options.dynamic_axes = {{0, 1, "seq"}};
  gru_seq.shapes.push_back({4, 11});
  zoo.push_back(gru_seq);
  ZooCase transformer{"transformer", models::preset_spec("transformer", {8}, 4, 16), {}, batches({8})};
  transformer.options.dynamic_axes = {{0, 1, "seq"}};
  transformer.shapes.push_back({5, 5});
  transformer.shapes.push_back({3, 2});
  zoo.push_back(transformer);
  return zoo;
}

// The layers themselves (the Elman RNN has no spec type): their whole output sequence
// [B, T, 2H] from a bidirectional two-layer RNN (tanh, and relu: an "activations" attribute),
// GRU and LSTM, one ONNX node per layer, with a symbolic sequence.
TEST(OnnxExport, BidirectionalLayersMatchOnnxRuntime) {
  for (const std::string kind : {"RNN", "RNN_relu", "GRU", "LSTM"}) {
    nn::RNNOptions o{.num_layers = 2, .batch_first = true, .bidirectional = true};
    if (kind == "RNN_relu") o.nonlinearity = "relu";
    Exported e;
    if (kind == "GRU")
      e.built.module = std::make_shared<nn::GRU>(5, 4, o);
    else if (kind == "LSTM")
      e.built.module = std::make_shared<nn::LSTM>(5, 4, o);
    else
      e.built.module = std::make_shared<nn::RNN>(5, 4, o);
    e.built.module->eval();
    ExportOptions options;
    options.dynamic_axes = {{0, 1, "seq"}};
    e.bytes = export_model(*e.built.module, {InputSignature{"input", {6, 5}, kFloat32}}, options);
    ASSERT_TRUE(e.proto.ParseFromString(e.bytes));
    const std::string op = kind.substr(0, kind.find('_'));
    EXPECT_EQ(OpTypes(e.proto).count(op), 2u) << kind;
    EXPECT_EQ(OpTypes(e.proto).count("Relu"), 0u) << kind << ": the recurrence was unrolled";
    const std::vector<IntArray> shapes{{1, 6, 5}, {7, 6, 5}, {3, 9, 5}};
    const std::vector<double> errors = CompareWithOnnxRuntime(e, "bidirectional_" + kind, shapes);
    if (errors.empty()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
    for (size_t i = 0; i < errors.size(); ++i) {
      EXPECT_LE(errors[i], 1e-5) << kind << " at input shape " << shape_str(shapes[i]);
      std::printf("onnxruntime bidirectional %s %s max_abs_error %.3g\n", kind.c_str(), shape_str(shapes[i]).c_str(),
                  errors[i]);
    }
  }
}

class OnnxZoo : public ::testing::TestWithParam<ZooCase> {};

TEST_P(OnnxZoo, MatchesAnvilInOnnxRuntime) {
  const ZooCase& c = GetParam();
  const Exported e = Export(c.spec, c.options);
  const std::vector<double> errors = CompareWithOnnxRuntime(e, c.name, c.shapes);
  if (errors.empty()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
  for (size_t i = 0; i < errors.size(); ++i) {
    EXPECT_LE(errors[i], 1e-4) << c.name << " at input shape " << shape_str(c.shapes[i]);
    std::printf("onnxruntime %s %s max_abs_error %.3g\n", c.name, shape_str(c.shapes[i]).c_str(), errors[i]);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, OnnxZoo, ::testing::ValuesIn(Zoo()),
                         [](const ::testing::TestParamInfo<ZooCase>& info) { return std::string(info.param.name); });

// ---- the op table's Node rows ----

// A Node row's call for the table walk below: its operands in the row's domain, one of them
// (float32: what an imported graph is served) the graph's input, the others constants.
struct RowCall {
  std::vector<Tensor> args;
  size_t input = 0;  // which operand the graph input is
  const Tensor& x() const { return args[input]; }
};

RowCall RowInputs(const OpInfo& info) {
  // Values in (0.1, 0.9): inside every float row's domain (log, sqrt, reciprocal, pow). The graph
  // input leads with the batch (1: a static export).
  auto values = [](IntArray shape) { return rand(shape) * 0.8 + 0.1; };
  auto bools = [](IntArray shape) { return rand(shape) < 0.5; };
  const Tensor x = values({1, 6});
  switch (info.infer) {
    case InferFamily::BinaryLogical:  // a float input with zeros in it: false where 0
      return {{x * (rand({1, 6}) < 0.5).to(kFloat32), bools({6})}};
    case InferFamily::Where:
      return {{bools({1, 6}), x, values({6})}, 1};
    case InferFamily::Mm:
      return {{values({1, 3}), values({3, 4})}};
    case InferFamily::Bmm:
      return {{values({1, 2, 3}), values({1, 3, 4})}};
    case InferFamily::UnaryBool:  // a NaN, an infinity and a zero among them
      return {{tensor(std::vector<float>{0.5f, NAN, 0.2f, INFINITY, 0.0f, -0.7f}).reshape({1, 6})}};
    default:
      break;
  }
  // Binary rows: about half of the second operand equal to the first (comparisons see both).
  if (info.kind == OpKind::Binary) return {{x, where(rand({6}) < 0.5, x.reshape({6}), values({6}))}};
  return {{x}};
}

// Every Node row of the op table (one ONNX operator, no attributes) exports as one node of
// its ONNX column's operator, imports back as the row, and runs in onnxruntime to Anvil's
// values: the column alone carries the mapping both ways (core/onnx/ holds no code for these
// rows, so a new 1:1 row needs no edit there).
TEST(OnnxTable, EveryNodeRowExportsAsItsOperatorImportsBackAndMatchesOnnxRuntime) {
  manual_seed(11);
  std::vector<OrtModel> ort;
  std::vector<std::string> names;
  for (int i = 0; i < kNumOps; ++i) {
    const OpInfo& info = op_info(static_cast<OpId>(i));
    if (info.export_form != ExportForm::Node) continue;
    const std::string name(info.name), op(info.onnx);
    SCOPED_TRACE(name);
    EXPECT_NE(::onnx::OpSchemaRegistry::Schema(op, kDefaultOpset, ""), nullptr)
        << name << ": '" << op << "' is not an operator of ai.onnx at opset " << kDefaultOpset;
    const RowCall call = RowInputs(info);
    exporter::ConstantNames constants;
    for (size_t k = 0; k < call.args.size(); ++k)
      if (k != call.input) constants.emplace_back(std::string("c").append(std::to_string(k)), call.args[k]);
    const exporter::Forward forward = [&info, &call](const std::vector<Tensor>& in) {
      std::vector<Tensor> args = call.args;
      args[call.input] = in[0];
      if (info.kind == OpKind::Unary) return std::vector<Tensor>{unary_op(info.id, args[0])};
      if (info.kind == OpKind::Binary) return std::vector<Tensor>{binary_op(info.id, args[0], args[1])};
      return std::vector<Tensor>{dispatch1(info.id, args, {})};
    };
    ExportOptions options;
    options.dynamic_batch = false;
    const std::string bytes = export_forward(
        forward, constants,
        {{"input", IntArray(call.x().sizes().begin() + 1, call.x().sizes().end()), call.x().dtype()}}, options);
    ::onnx::ModelProto proto;
    ASSERT_TRUE(proto.ParseFromString(bytes));
    // One node of the operator; besides it only the casts to the types it takes (Not: bool) and
    // the Identity that names the graph's output.
    const std::multiset<std::string> ops = OpTypes(proto);
    std::string listed;
    size_t others = 0;
    for (const std::string& o : ops) {
      listed.append(" ").append(o);
      others += o != op && o != "Cast" && o != "Identity";
    }
    EXPECT_EQ(ops.count(op), op == "Identity" ? 2u : 1u) << name << ":" << listed;
    EXPECT_EQ(others, 0u) << name << ":" << listed;

    Tensor want;
    {
      NoGradGuard no_grad;
      want = forward({call.x()})[0];
    }
    const ImportedModel imported = import_model(bytes);
    EXPECT_TRUE(std::count(imported.operators.begin(), imported.operators.end(), op)) << name;
    const Tensor got = imported.module->forward(call.x());
    ASSERT_EQ(got.sizes(), want.sizes()) << name;
    ASSERT_EQ(got.dtype(), want.dtype()) << name;
    EXPECT_TRUE(equal(got, want)) << name << ": the imported node differs from the row";
    ort.push_back({name, bytes, {call.x()}, {want}});
    names.push_back(name);
  }
  EXPECT_GT(names.size(), 30u);
  const std::vector<double> errors = CompareWithOnnxRuntime(ort);
  if (errors.empty()) GTEST_SKIP() << "no Python with onnxruntime at " << anvil::test::PeerPython();
  ASSERT_EQ(errors.size(), names.size());
  double worst = 0;
  for (size_t i = 0; i < errors.size(); ++i) {
    // Outputs reach 10 (reciprocal of 0.1), where a float32 step is 9.5e-7: a few steps apart.
    EXPECT_LE(errors[i], 1e-5) << names[i] << " in onnxruntime";
    worst = std::max(worst, errors[i]);
  }
  std::printf("onnxruntime: %zu Node rows, largest max_abs_error %.3g\n", names.size(), worst);
}

}  // namespace
}  // namespace anvil::onnx
