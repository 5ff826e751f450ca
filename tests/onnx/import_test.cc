// ONNX import: Anvil's own exports come back equal (round trip), files written by the onnx
// Python package's helpers (other exporters' idioms: Flatten, Constant, Unsqueeze, opsets 13
// and 18) match onnxruntime, and hostile files get clear ImportErrors, never a crash.
#include "core/onnx/import.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/anvil.h"
#include "core/models/spec.h"
#include "core/nn/functional.h"
#include "core/nn/rnn.h"
#include "core/quant/quantize.h"
#include "onnx/onnx_pb.h"
#include "tests/paths.h"

namespace anvil::onnx {
namespace {

namespace F = nn::functional;

Tensor Forward(nn::Module& m, const Tensor& x) {
  NoGradGuard no_grad;
  return m.forward(x);
}

struct RoundTrip {
  const char* name;
  std::string spec;
  std::vector<SymbolicAxis> axes;
  std::vector<IntArray> shapes;
};

class OnnxRoundTrip : public ::testing::TestWithParam<RoundTrip> {};

TEST_P(OnnxRoundTrip, ExportThenImportPredictsTheSame) {
  const RoundTrip& c = GetParam();
  models::BuiltModel built = models::build_model(c.spec);
  built.module->eval();
  ExportOptions options;
  options.dynamic_axes = c.axes;
  const std::string bytes = export_model(*built.module, {{"input", built.input_shape, built.input_dtype}}, options);
  const ImportedModel imported = import_model(bytes);
  EXPECT_EQ(imported.input.name, "input");
  EXPECT_EQ(imported.input.dtype, built.input_dtype);
  EXPECT_EQ(imported.symbolic_dims[0], "batch");
  EXPECT_EQ(imported.opset, kDefaultOpset);
  // Its weights are its initializers: the model's parameters, and the BatchNorm statistics
  // (buffers in the model, weights like any other in the file).
  int64_t statistics = 0;
  for (const auto& [name, b] : built.module->named_buffers())
    if (name.find("running_") != std::string::npos) statistics += b.numel();
  EXPECT_EQ(quant::parameter_count(*imported.module), built.module->num_parameters() + statistics) << c.name;
  manual_seed(3);
  for (const IntArray& shape : c.shapes) {
    const Tensor x = built.input_dtype == kInt64 ? randint(0, 16, shape) : randn(shape);
    const Tensor want = Forward(*built.module, x), got = Forward(*imported.module, x);
    ASSERT_EQ(got.sizes(), want.sizes()) << c.name;
    EXPECT_TRUE(allclose(got, want, 1e-5, 1e-5))
        << c.name << " at " << shape_str(shape) << ": max error " << (got - want).abs().max().item<float>();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, OnnxRoundTrip,
    ::testing::Values(
        RoundTrip{"mlp", models::preset_spec("mlp", {64}, 10), {}, {{1, 64}, {7, 64}}},
        RoundTrip{"lenet5", models::preset_spec("lenet5", {1, 8, 8}, 10), {}, {{1, 1, 8, 8}, {7, 1, 8, 8}}},
        RoundTrip{"resnet", models::preset_spec("resnet", {3, 16, 16}, 10), {}, {{2, 3, 16, 16}}},
        RoundTrip{"gru", models::preset_spec("gru", {6}, 4, 16), {}, {{1, 6}, {7, 6}}},
        RoundTrip{
            "transformer", models::preset_spec("transformer", {8}, 4, 16), {{0, 1, "seq"}}, {{1, 8}, {7, 8}, {3, 5}}}),
    [](const ::testing::TestParamInfo<RoundTrip>& info) { return std::string(info.param.name); });

TEST(OnnxRoundTrip, AnElmanRnnIsAnOnnxRnnNode) {
  nn::RNN rnn(5, 4, {.num_layers = 2, .batch_first = true});
  rnn.eval();
  ExportOptions options;
  options.dynamic_axes = {{0, 1, "seq"}};
  const std::string bytes = export_model(rnn, {{"input", {6, 5}, kFloat32}}, options);
  const ImportedModel imported = import_model(bytes);
  EXPECT_EQ(imported.operators, std::vector<std::string>({"Identity", "RNN", "Squeeze", "Transpose"}));
  for (const IntArray& shape : {IntArray{2, 6, 5}, IntArray{3, 9, 5}}) {
    const Tensor x = randn(shape);
    EXPECT_TRUE(allclose(Forward(*imported.module, x), Forward(rnn, x), 1e-5, 1e-5)) << shape_str(shape);
  }
}

TEST(OnnxRoundTrip, BidirectionalLayersComeBackEqual) {
  for (const std::string kind : {"RNN", "RNN_relu", "GRU", "LSTM"}) {
    nn::RNNOptions o{.num_layers = 2, .batch_first = true, .bidirectional = true};
    if (kind == "RNN_relu") o.nonlinearity = "relu";
    std::shared_ptr<nn::RNNBase> m;
    if (kind == "GRU")
      m = std::make_shared<nn::GRU>(5, 4, o);
    else if (kind == "LSTM")
      m = std::make_shared<nn::LSTM>(5, 4, o);
    else
      m = std::make_shared<nn::RNN>(5, 4, o);
    m->eval();
    ExportOptions options;
    options.dynamic_axes = {{0, 1, "seq"}};
    const ImportedModel imported = import_model(export_model(*m, {{"input", {6, 5}, kFloat32}}, options));
    const std::string op = kind.substr(0, kind.find('_'));
    EXPECT_EQ(std::count(imported.operators.begin(), imported.operators.end(), op), 1) << kind;  // operator kinds
    for (const IntArray& shape : {IntArray{2, 6, 5}, IntArray{3, 9, 5}}) {
      const Tensor x = randn(shape);
      EXPECT_TRUE(allclose(Forward(*imported.module, x), Forward(*m, x), 1e-5, 1e-5))
          << kind << " " << shape_str(shape);
    }
  }
}

// Pooling's options reach the file and come back: MaxPool's dilations and ceil_mode,
// AveragePool's ceil_mode and count_include_pad, MaxPool's Indices output and MaxUnpool (the
// indices are per plane in Anvil and over the whole tensor in ONNX, both ways).
class PoolUnpool : public nn::Module {
 public:
  PoolUnpool() : nn::Module("PoolUnpool") { eval(); }
  Tensor forward(const Tensor& x) override {
    auto [pooled, indices] = F::max_pool2d_with_indices(x, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
    // Output 7x8 where the default is 7x7: MaxUnpool's output_shape input carries it.
    const Tensor unpooled = F::max_unpool2d(
        pooled, indices,
        {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .output_size = std::vector<int64_t>{7, 8}});
    const Tensor dilated =
        F::max_pool2d(unpooled, {.kernel = {2, 2}, .stride = {1, 2}, .ceil_mode = true, .dilation = {2, 3}});
    const Tensor averaged = F::avg_pool2d(
        x, {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false, .ceil_mode = true});
    return cat({dilated.flatten(1), averaged.flatten(1), indices.to(kFloat32).flatten(1)}, 1);
  }
};

TEST(OnnxRoundTrip, PoolingOptionsIndicesAndUnpoolingComeBack) {
  PoolUnpool m;
  const std::string bytes = export_model(m, {{"input", {2, 7, 8}, kFloat32}}, {});
  ::onnx::ModelProto proto;
  ASSERT_TRUE(proto.ParseFromString(bytes));
  int unpools = 0, pools_with_indices = 0, dilated = 0;
  for (const auto& n : proto.graph().node()) {
    unpools += n.op_type() == "MaxUnpool";
    pools_with_indices += n.op_type() == "MaxPool" && n.output_size() == 2 && n.output(1) != "";
    for (const auto& a : n.attribute()) dilated += n.op_type() == "MaxPool" && a.name() == "dilations";
  }
  EXPECT_EQ(unpools, 1);
  EXPECT_GE(pools_with_indices, 1);
  EXPECT_EQ(dilated, 1);
  const ImportedModel imported = import_model(bytes);
  manual_seed(4);
  for (const IntArray& shape : {IntArray{1, 2, 7, 8}, IntArray{3, 2, 7, 8}}) {
    const Tensor x = randn(shape);
    const Tensor want = Forward(m, x), got = Forward(*imported.module, x);
    ASSERT_EQ(got.sizes(), want.sizes()) << shape_str(shape);
    EXPECT_TRUE(allclose(got, want, 1e-5, 1e-6)) << shape_str(shape);
  }
}

// ---- files from other exporters: the onnx package's helpers, checked in onnxruntime ----

const char* kBuildScript = R"PY(
import sys, numpy as np, onnx, onnxruntime as ort
from onnx import helper, TensorProto, numpy_helper
out, opset = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(opset)
def init(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.3, name)
def axes_input(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)
# An MLP the way many exporters write it: Flatten, Gemm with transB, Relu, a Constant scale.
mlp = helper.make_graph(
    [helper.make_node("Flatten", ["x"], ["f"], axis=1, name="flatten"),
     helper.make_node("Gemm", ["f", "w1", "b1"], ["h"], transB=1, name="fc1"),
     helper.make_node("Relu", ["h"], ["r"], name="relu"),
     helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array(0.5, np.float32)), name="c"),
     helper.make_node("Mul", ["r", "s"], ["m"], name="scale"),
     helper.make_node("Gemm", ["m", "w2", "b2"], ["y"], transB=1, name="fc2")],
    "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])],
    [init("w1", 16, 16), init("b1", 16), init("w2", 5, 16), init("b2", 5)])
# A CNN: Conv, BatchNormalization, Relu, MaxPool, GlobalAveragePool, Squeeze with axes as the
# opset wants them, Gemm.
squeeze = helper.make_node("Squeeze", ["g", "sq_axes"], ["s"], name="squeeze")
cnn_inits = [init("cw", 4, 3, 3, 3), init("cb", 4),
             numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype(np.float32) + 0.5, "scale"),
             init("bias", 4), init("mean", 4),
             numpy_helper.from_array(np.abs(rng.standard_normal(4)).astype(np.float32) + 0.5, "var"),
             init("fw", 6, 4), init("fb", 6), axes_input("sq_axes", [2, 3])]
cnn = helper.make_graph(
    [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1], name="conv"),
     helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"], epsilon=1e-5, name="bn"),
     helper.make_node("Relu", ["bn"], ["r"], name="relu"),
     helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool"),
     helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
     squeeze,
     helper.make_node("Gemm", ["s", "fw", "fb"], ["y"], transB=1, name="fc")],
    "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 6])], cnn_inits)
# Recurrent nodes in every direction, batch-first input transposed to ONNX's [T, N, F]: a
# bidirectional LSTM, a bidirectional RNN with Relu forward and Tanh backward, a reverse GRU
# with linear_before_reset = 0 (not PyTorch's form), its final state the output.
def merge_directions(y, out):  # Y [T, D, N, H] -> [T, N, D * H]
    return [helper.make_node("Transpose", [y], [out + "_t"], perm=[0, 2, 1, 3], name=out + "_t"),
            helper.make_node("Reshape", [out + "_t", "merge_shape"], [out], name=out)]
rnn_inits = [init("lw", 2, 16, 3), init("lr", 2, 16, 4), init("lb", 2, 32),
             init("rw", 2, 5, 8), init("rr", 2, 5, 5), init("rb", 2, 10),
             init("gw", 1, 9, 10), init("gr", 1, 9, 3), init("gb", 1, 18),
             axes_input("merge_shape", [0, 0, -1]), axes_input("yh_axes", [0])]
rnn = helper.make_graph(
    [helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="time_major"),
     helper.make_node("LSTM", ["xt", "lw", "lr", "lb"], ["ly"], hidden_size=4, direction="bidirectional",
                      name="lstm"),
     *merge_directions("ly", "l_out"),
     helper.make_node("RNN", ["l_out", "rw", "rr", "rb"], ["ry"], hidden_size=5, direction="bidirectional",
                      activations=["Relu", "Tanh"], name="rnn"),
     *merge_directions("ry", "r_out"),
     helper.make_node("GRU", ["r_out", "gw", "gr", "gb"], ["", "gh"], hidden_size=3, direction="reverse",
                      name="gru"),
     helper.make_node("Squeeze", ["gh", "yh_axes"], ["y"], name="last")],
    "rnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 5, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])], rnn_inits)
for name, graph, shape in (("mlp", mlp, (7, 2, 8)), ("cnn", cnn, (7, 3, 8, 8)), ("rnn", rnn, (7, 5, 3))):
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="onnx-helper")
    model.ir_version = 8
    onnx.checker.check_model(model)
    path = f"{out}/{name}-{opset}.onnx"
    onnx.save(model, path)
    x = rng.standard_normal(shape).astype(np.float32)
    (y,) = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    x.tofile(f"{out}/{name}-{opset}.x")
    y.astype(np.float32).tofile(f"{out}/{name}-{opset}.y")
)PY";

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

Tensor ReadRaw(const std::string& path, IntArray shape) {
  const std::string bytes = ReadFile(path);
  Tensor t = empty(shape, TensorOptions(kFloat32));
  EXPECT_EQ(bytes.size(), static_cast<size_t>(t.numel()) * 4) << path;
  std::memcpy(t.data_ptr(), bytes.data(), std::min(bytes.size(), static_cast<size_t>(t.numel()) * 4));
  return t;
}

TEST(OnnxImport, FilesFromTheOnnxHelpersMatchOnnxRuntime) {
  const std::string python = anvil::test::PeerPython();
  if (!std::filesystem::exists(python) ||
      std::system((python + " -c 'import onnx, onnxruntime, numpy' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "no Python with onnx and onnxruntime at " << python;
  }
  std::string dir = (std::filesystem::temp_directory_path() / "anvil-onnx-import-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::ofstream(dir + "/build.py") << kBuildScript;
  for (int opset : {13, 18}) {
    ASSERT_EQ(std::system((python + " " + dir + "/build.py " + dir + " " + std::to_string(opset)).c_str()), 0);
    for (const auto& [name, in_shape, out_shape] :
         {std::tuple<std::string, IntArray, IntArray>{"mlp", {7, 2, 8}, {7, 5}},
          std::tuple<std::string, IntArray, IntArray>{"cnn", {7, 3, 8, 8}, {7, 6}},
          std::tuple<std::string, IntArray, IntArray>{"rnn", {7, 5, 3}, {7, 3}}}) {
      const std::string base = dir + "/" + name + "-" + std::to_string(opset);
      const ImportedModel m = import_model(ReadFile(base + ".onnx"));
      EXPECT_EQ(m.opset, opset);
      EXPECT_EQ(m.symbolic_dims[0], "N");
      EXPECT_EQ(m.producer, "onnx-helper");
      const Tensor got = Forward(*m.module, ReadRaw(base + ".x", in_shape));
      const Tensor want = ReadRaw(base + ".y", out_shape);
      ASSERT_EQ(got.sizes(), want.sizes());
      const float err = (got - want).abs().max().item<float>();
      EXPECT_LE(err, 1e-4) << base;
      std::printf("import %s opset %d: max |error| vs onnxruntime %.3g\n", name.c_str(), opset, err);
    }
  }
}

// ---- hostile files ----

::onnx::ModelProto TinyModel() {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("tiny");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("batch");
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->add_dims(3);
  w->add_dims(4);
  w->set_data_type(::onnx::TensorProto::FLOAT);
  w->set_raw_data(std::string(48, '\0'));
  auto* n = g->add_node();
  n->set_op_type("Gemm");
  n->set_name("fc");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  auto* a = n->add_attribute();
  a->set_name("transB");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(1);
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(::onnx::TensorProto::FLOAT);
  return m;
}

std::string Bytes(const ::onnx::ModelProto& m) {
  std::string s;
  m.SerializeToString(&s);
  return s;
}

void ExpectRefused(const std::string& bytes, std::initializer_list<const char*> words,
                   size_t max = kDefaultMaxImportBytes) {
  try {
    import_model(bytes, max);
    ADD_FAILURE() << "imported";
  } catch (const ImportError& e) {
    for (const char* w : words)
      EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << w << " not in: " << e.what();
  }
}

TEST(OnnxImport, TheTinyModelImportsAndRuns) {
  const ImportedModel m = import_model(Bytes(TinyModel()));
  EXPECT_EQ(m.input.shape, IntArray({4}));
  EXPECT_EQ(m.operators, std::vector<std::string>({"Gemm"}));
  EXPECT_EQ(Forward(*m.module, ones({2, 4})).sizes(), IntArray({2, 3}));
}

TEST(OnnxImport, HostileFilesAreRefusedClearly) {
  const std::string good = Bytes(TinyModel());
  ExpectRefused("", {"not an ONNX model"});
  ExpectRefused("\x08\x07garbage that is not protobuf \xff\xff\xff\xff", {"not an ONNX model"});
  ExpectRefused(good.substr(0, good.size() / 2), {"not an ONNX model"});
  ExpectRefused(good, {"over the limit of 10"}, 10);
  {
    auto m = TinyModel();
    m.mutable_graph()->mutable_node(0)->set_op_type("FancyOp");
    auto* n2 = m.mutable_graph()->add_node();
    n2->set_op_type("FancyOp");
    n2->set_name("second");
    ExpectRefused(Bytes(m), {"unsupported operators: FancyOp (nodes fc, second)", "Supported: "});
  }
  {
    auto m = TinyModel();
    m.mutable_graph()->mutable_node(0)->set_domain("com.example");
    ExpectRefused(Bytes(m), {"com.example::Gemm"});
  }
  {
    auto m = TinyModel();  // a cycle: the node reads its own output
    m.mutable_graph()->mutable_node(0)->set_input(0, "y");
    ExpectRefused(Bytes(m), {"reads \"y\"", "cycle"});
  }
  {
    auto m = TinyModel();
    m.mutable_graph()->clear_initializer();
    ExpectRefused(Bytes(m), {"reads \"w\"", "initializer is missing"});
  }
  {
    auto m = TinyModel();
    m.mutable_graph()->mutable_initializer(0)->set_raw_data(std::string(47, '\0'));
    ExpectRefused(Bytes(m), {"initializer \"w\"", "47 bytes", "48 expected"});
  }
  {
    auto m = TinyModel();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->set_data_location(::onnx::TensorProto::EXTERNAL);
    auto* e = w->add_external_data();
    e->set_key("location");
    e->set_value("/etc/passwd");
    ExpectRefused(Bytes(m), {"external", "no path"});
  }
  {
    auto m = TinyModel();  // a 2 GiB claim with no bytes behind it
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->set_dims(0, int64_t{1} << 30);
    w->set_dims(1, 2);
    ExpectRefused(Bytes(m), {"initializer \"w\"", "bytes of data"});
    w->set_dims(0, int64_t{1} << 40);
    w->set_dims(1, int64_t{1} << 20);
    ExpectRefused(Bytes(m), {"more than 2^40 elements"});
  }
  {
    // 80 GiB claimed by a shape with the values (not raw bytes) absent: refused before any of it is
    // allocated, which the allocator's peak shows.
    auto m = TinyModel();
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_raw_data();
    w->set_dims(0, int64_t{1} << 34);
    w->set_dims(1, 5);
    const int64_t peak_before = cpu_allocator()->stats().peak_allocated_bytes;
    ExpectRefused(Bytes(m), {"initializer \"w\"", "0 values for shape [17179869184, 5]"});
    w->set_data_type(::onnx::TensorProto::INT32);
    ExpectRefused(Bytes(m), {"initializer \"w\"", "0 values for shape"});
    EXPECT_LT(cpu_allocator()->stats().peak_allocated_bytes - peak_before, int64_t{1} << 30);
  }
  {
    auto m = TinyModel();  // a node that names no output
    m.mutable_graph()->mutable_node(0)->clear_output();
    ExpectRefused(Bytes(m), {"node \"fc\" (Gemm) names no output"});
  }
  {
    auto m = TinyModel();
    m.mutable_opset_import(0)->set_version(9);
    ExpectRefused(Bytes(m), {"opset 9", "13 to 18"});
  }
  {
    auto m = TinyModel();
    auto* x2 = m.mutable_graph()->add_input();
    x2->set_name("x2");
    ExpectRefused(Bytes(m), {"one input", "x, x2"});
  }
}

// A graph is the client's: an Expand and an Add make 768 MiB from a [64, 4] input. Under a
// memory budget (what a Predict runs under: core/tensor/memory_budget.h) the node is refused
// with OutOfMemoryError naming it, before the memory is allocated; small inputs still run.
TEST(OnnxImport, AGraphsHugeIntermediateStopsAtTheMemoryBudget) {
  auto m = TinyModel();
  auto* g = m.mutable_graph();
  auto* shape = g->add_initializer();
  shape->set_name("s");
  shape->add_dims(3);
  shape->set_data_type(::onnx::TensorProto::INT64);
  const int64_t target[3] = {int64_t{1} << 20, 1, 1};
  shape->set_raw_data(std::string(reinterpret_cast<const char*>(target), sizeof(target)));
  auto* n = g->add_node();
  n->set_op_type("Expand");
  n->set_name("big");
  n->add_input("y");
  n->add_input("s");
  n->add_output("z");
  auto* add = g->add_node();  // Expand is a view; the sum materialises it
  add->set_op_type("Add");
  add->set_name("sum");
  add->add_input("z");
  add->add_input("z");
  add->add_output("total");
  g->mutable_output(0)->set_name("total");
  const ImportedModel imported = import_model(Bytes(m));
  auto budget = std::make_shared<MemoryBudget>(int64_t{64} << 20, "this Predict's forward");
  MemoryBudgetScope scope(budget);
  const int64_t peak_before = cpu_allocator()->stats().peak_allocated_bytes;
  try {
    Forward(*imported.module, ones({64, 4}));  // [1 << 20, 64, 3] floats: 768 MiB
    ADD_FAILURE() << "the expansion ran";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("node \"sum\" (Add)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more than 64.0 MiB"), std::string::npos) << e.what();
  }
  EXPECT_LT(cpu_allocator()->stats().peak_allocated_bytes - peak_before, int64_t{64} << 20);
  EXPECT_EQ(budget->live(), 0);
  EXPECT_EQ(Forward(*imported.module, ones({1, 4})).sizes(), IntArray({1 << 20, 1, 3}));  // 12 MiB: fits
}

}  // namespace
}  // namespace anvil::onnx
