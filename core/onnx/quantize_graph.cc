#include "core/onnx/quantize_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>

#include "core/autograd/grad_mode.h"
#include "core/onnx/graph_uses.h"
#include "core/onnx/import.h"
#include "core/onnx/node_attrs.h"
#include "core/onnx/qdq_bias.h"
#include "core/quant/observer.h"
#include "core/quant/quantized_layers.h"
#include "onnx/onnx_pb.h"

namespace anvil::onnx {
namespace {

namespace pb = ::onnx;

using attrs::DefaultDomain;

// A node to quantize: its weights (and bias) are float initializers.
struct Candidate {
  int node = -1;
  std::string x;           // the activation it reads
  std::string y;           // the value its output grid applies to (after its ReLU / bias Add)
  int producer_of_y = -1;  // the node making y (the candidate, its bias Add, or its ReLU)
  int bias_add = -1;       // MatMul: the Add of its bias
  std::string weight, bias;
  int64_t out_axis = 0;  // where the output channels are in the weight initializer
  bool relu = false;
  std::string description;
};

pb::TensorProto ToProto(const Tensor& t, const std::string& name) {
  pb::TensorProto p;
  p.set_name(name);
  for (int64_t d : t.sizes()) p.add_dims(d);
  const Tensor c = t.contiguous();
  switch (t.dtype()) {
    case kFloat32:
      p.set_data_type(pb::TensorProto::FLOAT);
      break;
    case kInt8:
      p.set_data_type(pb::TensorProto::INT8);
      break;
    case kUInt8:
      p.set_data_type(pb::TensorProto::UINT8);
      break;
    case kInt32:
      p.set_data_type(pb::TensorProto::INT32);
      break;
    default:
      throw Error(std::string("ONNX quantization: no initializer of ") + std::string(dtype_name(t.dtype())));
  }
  p.set_raw_data(
      std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel() * itemsize(c.dtype()))));
  return p;
}

Tensor FromInitializer(const pb::TensorProto& t) {
  ANVIL_CHECK(t.data_type() == pb::TensorProto::FLOAT, "initializer \"", t.name(), "\" is not float32");
  IntArray dims(t.dims().begin(), t.dims().end());
  Tensor out = empty(dims, TensorOptions(kFloat32));
  if (t.has_raw_data()) {
    ANVIL_CHECK(t.raw_data().size() == static_cast<size_t>(out.numel()) * 4, "initializer \"", t.name(),
                "\": its data does not fill its shape");
    std::memcpy(out.data_ptr(), t.raw_data().data(), t.raw_data().size());
  } else {
    ANVIL_CHECK(t.float_data_size() == out.numel(), "initializer \"", t.name(), "\": its data does not fill its shape");
    std::copy(t.float_data().begin(), t.float_data().end(), out.data_ptr<float>());
  }
  return out;
}

class Rewriter {
 public:
  Rewriter(pb::ModelProto model, const quant::QConfig& qconfig)
      : model_(std::move(model)), qconfig_(qconfig), uses_(model_.graph()) {
    const pb::GraphProto& g = model_.graph();
    for (const auto& init : g.initializer()) initializers_[init.name()] = &init;
    for (const auto& n : g.node())
      for (const std::string& name : n.input()) taken_.insert(name);
    for (const auto& n : g.node())
      for (const std::string& name : n.output()) taken_.insert(name);
    for (const auto& in : g.input()) taken_.insert(in.name());
    for (int i = 0; i < g.node_size(); ++i) Consider(i);
  }

  const std::vector<Candidate>& candidates() const { return candidates_; }
  const std::vector<std::string>& kept() const { return kept_; }
  // The names of the Conv, Gemm and MatMul nodes considered (what keep_float may name).
  const std::vector<std::string>& considered() const { return considered_; }

  // The values the calibration observes: each candidate's input and output.
  std::set<std::string> observed() const {
    std::set<std::string> names;
    for (const Candidate& c : candidates_) {
      names.insert(c.x);
      names.insert(c.y);
    }
    return names;
  }

  std::string Rewrite(const std::map<std::string, quant::ActivationQParams>& grids) {
    pb::GraphProto& g = *model_.mutable_graph();
    std::map<int, const Candidate*> by_node, by_y_producer;
    for (const Candidate& c : candidates_) {
      by_node[c.node] = &c;
      by_y_producer[c.producer_of_y] = &c;
    }
    std::vector<pb::NodeProto> nodes;
    std::set<std::string> on_grid;  // values already replaced by their DequantizeLinear
    for (int i = 0; i < g.node_size(); ++i) {
      pb::NodeProto n = g.node(i);
      if (const auto it = by_node.find(i); it != by_node.end()) {
        const Candidate& c = *it->second;
        const quant::ActivationQParams& in = grids.at(c.x);
        // The input on its grid: shared with the layer that made it, else a pair of its own.
        if (!on_grid.count(c.x)) {
          const std::string q = Fresh(c.x + "_quantized"), dq = Fresh(c.x + "_dequantized");
          const auto [s, z] = GridConstants(c.x, in);
          nodes.push_back(Node("QuantizeLinear", {c.x, s, z}, q));
          nodes.push_back(Node("DequantizeLinear", {q, s, z}, dq));
          n.set_input(0, dq);
        }
        const Tensor w = FromInitializer(*initializers_.at(c.weight));
        // [out, ...] rows for quantize_weight; MatMul's and Gemm's [in, out] transposed.
        const quant::QTensor qw =
            quant::quantize_weight(c.out_axis == 0 ? w : w.t().contiguous(), qconfig_.per_channel_weights);
        const bool per_channel = quant::is_per_channel(qw.qscheme);
        const Tensor ints = c.out_axis == 0 ? qw.data : qw.data.t().contiguous();
        Tensor w_scales = qw.scales.to(kFloat32);
        const std::string w_dq = Fresh(c.weight + "_dequantized");
        nodes.push_back(PerAxisDequantize(c.weight, ints, w_scales, per_channel ? c.out_axis : -1, w_dq));
        n.set_input(1, w_dq);
        if (!c.bias.empty()) {
          const std::string b_dq = Fresh(c.bias + "_dequantized");
          nodes.push_back(BiasDequantize(c.bias, FromInitializer(*initializers_.at(c.bias)), in.scale, w_scales,
                                         per_channel, b_dq));
          if (c.bias_add < 0) {
            n.set_input(2, b_dq);
          } else {
            bias_inputs_[c.bias_add] = b_dq;
          }
        }
      }
      if (const auto b = bias_inputs_.find(i); b != bias_inputs_.end()) {
        const Candidate& c = *by_node.at(CandidateOfAdd(i));
        n.set_input(n.input(0) == c.bias ? 0 : 1, b->second);
      }
      if (const auto it = by_y_producer.find(i); it != by_y_producer.end()) {
        // The output on its grid: the producer writes a float value of a new name, and the
        // DequantizeLinear the old name, so every reader (the next layer too) reads the grid.
        const Candidate& c = *it->second;
        const std::string raw = Fresh(c.y + "_float"), q = Fresh(c.y + "_quantized");
        for (int o = 0; o < n.output_size(); ++o)
          if (n.output(o) == c.y) n.set_output(o, raw);
        nodes.push_back(n);
        const auto [s, z] = GridConstants(c.y, grids.at(c.y));
        nodes.push_back(Node("QuantizeLinear", {raw, s, z}, q));
        nodes.push_back(Node("DequantizeLinear", {q, s, z}, c.y));
        on_grid.insert(c.y);
        continue;
      }
      nodes.push_back(std::move(n));
    }
    g.clear_node();
    for (pb::NodeProto& n : nodes) *g.add_node() = std::move(n);
    return Finish();
  }

  // The dynamic form (quantize_graph.h) of every Gemm and MatMul candidate; convolutions stay
  // float (kept, with the reason), as quantize_dynamic leaves Conv2d.
  std::string RewriteDynamic(std::vector<std::string>* layers) {
    pb::GraphProto& g = *model_.mutable_graph();
    std::map<int, const Candidate*> by_node;
    for (const Candidate& c : candidates_) {
      if (g.node(c.node).op_type() == "Conv") {
        Keep(g.node(c.node), "a convolution: dynamic quantization covers Gemm and MatMul");
        continue;
      }
      by_node[c.node] = &c;
      layers->push_back(c.description);
    }
    ANVIL_CHECK(!by_node.empty(),
                "ONNX quantization: no Gemm or MatMul with float32 initializer weights to quantize "
                "dynamically (convolutions stay float32 in dynamic mode; quantize statically)");
    std::vector<pb::NodeProto> nodes;
    for (int i = 0; i < g.node_size(); ++i) {
      const auto it = by_node.find(i);
      if (it == by_node.end()) {
        nodes.push_back(g.node(i));
        continue;
      }
      const Candidate& c = *it->second;
      const pb::NodeProto& n = g.node(i);
      const std::string y = n.output(0);
      const std::string xq = Fresh(c.x + "_quantized"), xs = Fresh(c.x + "_scale"), xz = Fresh(c.x + "_zero_point");
      pb::NodeProto dql = Node("DynamicQuantizeLinear", {c.x}, xq);
      dql.add_output(xs);
      dql.add_output(xz);
      nodes.push_back(std::move(dql));
      const Tensor w = FromInitializer(*initializers_.at(c.weight));
      const quant::QTensor qw =
          quant::quantize_weight(c.out_axis == 0 ? w : w.t().contiguous(), qconfig_.per_channel_weights);
      const bool per_channel = quant::is_per_channel(qw.qscheme);
      const Tensor w_scales = per_channel ? qw.scales.to(kFloat32) : qw.scales.to(kFloat32).reshape({});
      const std::string sums = Fresh(y + "_int32"), sums_f = Fresh(y + "_int32_float"), scale = Fresh(y + "_scale"),
                        product = Fresh(y + "_product");
      nodes.push_back(Node("MatMulInteger",
                           {xq, Initializer(c.weight + "_quantized", qw.data.t().contiguous()), xz,
                            Initializer(c.weight + "_zero_point", zeros(w_scales.sizes(), TensorOptions(kInt8)))},
                           sums));
      pb::NodeProto cast = Node("Cast", {sums}, sums_f);
      pb::AttributeProto* to = cast.add_attribute();
      to->set_name("to");
      to->set_type(pb::AttributeProto::INT);
      to->set_i(pb::TensorProto::FLOAT);
      nodes.push_back(std::move(cast));
      nodes.push_back(Node("Mul", {xs, Initializer(c.weight + "_scale", w_scales)}, scale));
      // A Gemm's bias becomes an Add after the product; a MatMul's Add stays where it is.
      const bool gemm_bias = n.op_type() == "Gemm" && !c.bias.empty();
      nodes.push_back(Node("Mul", {sums_f, scale}, gemm_bias ? product : y));
      if (gemm_bias) nodes.push_back(Node("Add", {product, c.bias}, y));
      // Node() names each node after its output; the product keeps the original node's name.
      if (!gemm_bias) nodes.back().set_name(n.name().empty() ? y : n.name());
    }
    g.clear_node();
    for (pb::NodeProto& n : nodes) *g.add_node() = std::move(n);
    return Finish();
  }

 private:
  // Drops the float initializers nothing reads any more, adds the new ones, and serializes.
  std::string Finish() {
    pb::GraphProto& g = *model_.mutable_graph();
    std::set<std::string> read;
    for (const auto& n : g.node())
      for (const std::string& in : n.input()) read.insert(in);
    google::protobuf::RepeatedPtrField<pb::TensorProto> kept_inits;
    for (auto& init : *g.mutable_initializer())
      if (read.count(init.name()) || uses_.IsGraphOutput(init.name())) *kept_inits.Add() = init;
    for (auto& t : new_initializers_) *kept_inits.Add() = std::move(t);
    g.mutable_initializer()->Swap(&kept_inits);
    std::string out;
    ANVIL_CHECK(model_.SerializeToString(&out), "ONNX quantization: the model does not serialize");
    return out;
  }

  const pb::TensorProto* FloatInitializer(const std::string& name) const {
    const auto it = initializers_.find(name);
    return it != initializers_.end() && it->second->data_type() == pb::TensorProto::FLOAT ? it->second : nullptr;
  }
  static int64_t Numel(const pb::TensorProto& t) {
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    return n;
  }

  void Keep(const pb::NodeProto& n, const std::string& why) {
    kept_.push_back(n.op_type() + " \"" + n.name() + "\": " + why);
  }

  void Consider(int i) {
    const pb::NodeProto& n = model_.graph().node(i);
    const std::string& op = n.op_type();
    if (!DefaultDomain(n) || (op != "Conv" && op != "Gemm" && op != "MatMul")) return;
    if (n.input_size() < 2 || n.output_size() != 1) return;
    considered_.push_back(n.name());
    if (qconfig_.keep_float.count(n.name())) return Keep(n, "kept in float as asked (keep_float)");
    Candidate c;
    c.node = i;
    c.x = n.input(0);
    c.weight = n.input(1);
    const pb::TensorProto* w = FloatInitializer(c.weight);
    if (w == nullptr) return Keep(n, "its weights are not a float32 initializer");
    if (initializers_.count(c.x)) return Keep(n, "its input is a constant");
    if (op == "Conv") {
      if (w->dims_size() != 4) return Keep(n, "not a 2-D convolution");
      if (attrs::Int(n, "group", 1) != 1) return Keep(n, "a grouped convolution");
      const std::string pad_mode = attrs::Str(n, "auto_pad", "NOTSET");
      if (pad_mode != "NOTSET" && pad_mode != "VALID") return Keep(n, "auto_pad " + pad_mode);
      const std::vector<int64_t> p = attrs::Ints(n, "pads");
      if (!p.empty() && (p.size() != 4 || p[0] != p[2] || p[1] != p[3])) return Keep(n, "asymmetric padding");
      c.out_axis = 0;
    } else {
      if (w->dims_size() != 2) return Keep(n, "its weights are not a matrix");
      if (op == "Gemm" &&
          (attrs::Int(n, "transA", 0) != 0 || attrs::Float(n, "alpha", 1) != 1 || attrs::Float(n, "beta", 1) != 1))
        return Keep(n, "Gemm with transA, alpha or beta");
      c.out_axis = op == "Gemm" && attrs::Int(n, "transB", 0) != 0 ? 0 : 1;
    }
    const int64_t out = w->dims(static_cast<int>(c.out_axis));
    if (n.input_size() > 2 && !n.input(2).empty()) {
      const pb::TensorProto* b = FloatInitializer(n.input(2));
      if (b == nullptr || Numel(*b) != out || b->dims_size() > 2) return Keep(n, "its bias is not a float32 vector");
      c.bias = n.input(2);
    }
    c.y = n.output(0);
    c.producer_of_y = i;
    if (op == "MatMul") {
      if (const int a = uses_.OnlyReader(c.y, "Add"); a >= 0 && model_.graph().node(a).input_size() == 2) {
        const pb::NodeProto& add = model_.graph().node(a);
        const std::string& other = add.input(0) == c.y ? add.input(1) : add.input(0);
        if (const pb::TensorProto* b = FloatInitializer(other);
            b != nullptr && Numel(*b) == out && b->dims_size() <= 2) {
          c.bias = other;
          c.bias_add = a;
          c.y = add.output(0);
          c.producer_of_y = a;
          if (uses_.Readers(other) != 1) return Keep(n, "its bias is shared");
        }
      }
    }
    if (const int r = uses_.OnlyReader(c.y, "Relu"); r >= 0) {
      c.relu = true;
      c.y = model_.graph().node(r).output(0);
      c.producer_of_y = r;
    }
    c.description = op + " \"" + n.name() + "\"" + (c.relu ? " (relu)" : "");
    candidates_.push_back(std::move(c));
  }

  int CandidateOfAdd(int add) const {
    for (const Candidate& c : candidates_)
      if (c.bias_add == add) return c.node;
    return -1;
  }

  std::string Fresh(const std::string& base) {
    std::string name = base;
    for (int k = 1; taken_.count(name) || initializers_.count(name); ++k) name = base + "_" + std::to_string(k);
    taken_.insert(name);
    return name;
  }

  static pb::NodeProto Node(const char* op, const std::vector<std::string>& in, const std::string& out) {
    pb::NodeProto n;
    n.set_op_type(op);
    n.set_name(out);
    for (const std::string& i : in) n.add_input(i);
    n.add_output(out);
    return n;
  }

  std::string Initializer(const std::string& base, const Tensor& t) {
    const std::string name = Fresh(base);
    new_initializers_.push_back(ToProto(t, name));
    return name;
  }

  // A quint8 grid's scalar scale and zero point, as initializers.
  std::pair<std::string, std::string> GridConstants(const std::string& value, const quant::ActivationQParams& q) {
    return {Initializer(value + "_scale", full({}, static_cast<float>(q.scale), TensorOptions(kFloat32))),
            Initializer(value + "_zero_point", full({}, static_cast<double>(q.zero_point), TensorOptions(kUInt8)))};
  }

  // DequantizeLinear of constant integers, per channel along `axis` or per tensor (axis < 0).
  pb::NodeProto PerAxisDequantize(const std::string& base, const Tensor& ints, const Tensor& scales, int64_t axis,
                                  const std::string& out) {
    const Tensor s = axis >= 0 ? scales : scales.reshape({});
    const Tensor z = zeros(s.sizes(), TensorOptions(ints.dtype()));
    pb::NodeProto n = Node(
        "DequantizeLinear",
        {Initializer(base + "_quantized", ints), Initializer(base + "_scale", s), Initializer(base + "_zero_point", z)},
        out);
    if (axis >= 0) {
      pb::AttributeProto* a = n.add_attribute();
      a->set_name("axis");
      a->set_type(pb::AttributeProto::INT);
      a->set_i(axis);
    }
    return n;
  }

  // The float bias as int32 steps of s_x * s_w (qdq_bias.h).
  pb::NodeProto BiasDequantize(const std::string& base, const Tensor& bias, double x_scale, const Tensor& w_scales,
                               bool per_channel, const std::string& out) {
    const Int32Bias b = int32_bias(bias, x_scale, w_scales, per_channel);
    return PerAxisDequantize(base, b.ints, b.steps, per_channel ? 0 : -1, out);
  }

  pb::ModelProto model_;
  quant::QConfig qconfig_;
  GraphUses uses_;  // of model_'s graph as read: Rewrite changes the graph only at its end
  std::map<std::string, const pb::TensorProto*> initializers_;
  std::set<std::string> taken_;  // every value name in use (new names avoid them)
  std::vector<Candidate> candidates_;
  std::vector<std::string> kept_;
  std::vector<std::string> considered_;
  std::vector<pb::TensorProto> new_initializers_;
  std::map<int, std::string> bias_inputs_;  // bias Add node -> its bias's DequantizeLinear output
};

}  // namespace

namespace {

// The float graph `bytes` imported (refused when it holds int8 layers already) and its
// rewriter; refused, naming what was found, when it has no node to quantize (`nodes` says
// which kinds were looked for).
// (The rewriter stays where it is made: it points into its model.)
std::pair<ImportedModel, std::unique_ptr<Rewriter>> FloatGraph(const std::string& bytes, const quant::QConfig& qconfig,
                                                               const char* nodes) {
  ImportedModel imported = import_model(bytes);
  ANVIL_CHECK(imported.int8_layers.empty(), "ONNX quantization: the model is quantized already (",
              imported.int8_layers.size(), " int8 layers)");
  pb::ModelProto model;
  ANVIL_CHECK(model.ParseFromString(bytes), "ONNX quantization: the model does not parse");
  auto rewriter = std::make_unique<Rewriter>(std::move(model), qconfig);
  quant::check_keep_float(qconfig, rewriter->considered(), "the graph's Conv, Gemm or MatMul nodes", /*quote=*/true);
  if (rewriter->candidates().empty()) {
    std::string found;
    for (const std::string& k : rewriter->kept()) found += "; " + k;
    throw Error(std::string("ONNX quantization: no ") + nodes + " with float32 initializer weights to quantize" +
                found);
  }
  return {std::move(imported), std::move(rewriter)};
}

}  // namespace

GraphQuantization quantize_onnx_static(const std::string& bytes, const std::vector<Tensor>& calibration,
                                       const quant::QConfig& qconfig) {
  ANVIL_CHECK(!calibration.empty(), "ONNX quantization: expected at least one calibration batch");
  auto [imported, rewriter] = FloatGraph(bytes, qconfig, "Conv, Gemm or MatMul");
  GraphQuantization out;
  out.kept = rewriter->kept();
  // Calibration: an observer per activation, fed by running the float graph.
  std::map<std::string, std::unique_ptr<quant::UniformObserver>> observers;
  const std::set<std::string> names = rewriter->observed();
  for (const std::string& n : names) observers[n] = quant::make_activation_observer(qconfig);
  {
    NoGradGuard no_grad;
    for (const Tensor& batch : calibration) {
      run_observing(*imported.module, batch, names, [&](const std::string& name, const Tensor& v) {
        observers.at(name)->forward(v.detach().cpu().to(kFloat32));
      });
    }
  }
  std::map<std::string, quant::ActivationQParams> grids;
  for (const auto& [name, obs] : observers) grids[name] = quant::activation_qparams(*obs);
  out.model = rewriter->Rewrite(grids);
  for (const Candidate& c : rewriter->candidates()) out.layers.push_back(c.description);
  return out;
}

GraphQuantization quantize_onnx_dynamic(const std::string& bytes, const quant::QConfig& qconfig) {
  auto [imported, rewriter] = FloatGraph(bytes, qconfig, "Gemm or MatMul");
  GraphQuantization out;
  out.model = rewriter->RewriteDynamic(&out.layers);
  out.kept = rewriter->kept();
  return out;
}

OnnxPtqResult post_training_quantize_onnx(const std::string& bytes, data::DataLoader& calibration,
                                          data::DataLoader& validation, const quant::PtqOptions& options) {
  OnnxPtqResult r;
  if (options.mode == quant::PtqMode::kDynamic) {
    // Nothing to calibrate, but the batches static quantization would read are checked as it
    // checks them: both modes refuse the same data.
    int64_t seen = 0;
    for (auto& b : calibration) {
      if (seen == options.calibration_batches) break;
      quant::check_finite_batch(b[options.input_key], "calibration", seen++);
    }
    r.graph = quantize_onnx_dynamic(bytes, options.qconfig);
  } else {
    ANVIL_CHECK(options.calibration_batches > 0, "quantize: calibration_batches must be positive, got ",
                options.calibration_batches);
    std::vector<Tensor> batches;
    for (auto& b : calibration) {
      if (static_cast<int64_t>(batches.size()) == options.calibration_batches) break;
      quant::check_finite_batch(b[options.input_key], "calibration", static_cast<int64_t>(batches.size()));
      batches.push_back(b[options.input_key]);
    }
    r.calibration_batches = static_cast<int64_t>(batches.size());
    r.graph = quantize_onnx_static(bytes, batches, options.qconfig);
  }
  ImportedModel float_graph = import_model(bytes), int8_graph = import_model(r.graph.model);
  r.float_accuracy =
      quant::classification_accuracy(*float_graph.module, validation, options.input_key, options.target_key);
  r.int8_accuracy =
      quant::classification_accuracy(*int8_graph.module, validation, options.input_key, options.target_key);
  const quant::GateVerdict v =
      quant::accuracy_gate(r.float_accuracy, r.int8_accuracy, options.mode, options.max_accuracy_drop);
  r.passed = v.passed;
  r.summary = v.summary + "; " + std::to_string(r.graph.layers.size()) + " of the graph's nodes in int8";
  if (!r.graph.kept.empty()) r.summary += ", " + std::to_string(r.graph.kept.size()) + " kept in float";
  if (!r.passed) {
    r.summary += options.mode == quant::PtqMode::kDynamic
                     ? "; not registered for serving. Quantize fewer layers, or statically with calibration"
                     : "; not registered for serving. Calibrate on more representative batches (calibration_batches " +
                           std::to_string(options.calibration_batches) + "), or quantize fewer layers";
  }
  return r;
}

std::string with_metadata(const std::string& bytes, const std::vector<std::pair<std::string, std::string>>& entries) {
  pb::ModelProto m;
  ANVIL_CHECK(m.ParseFromString(bytes), "ONNX metadata: the model does not parse");
  for (const auto& [key, value] : entries) {
    pb::StringStringEntryProto* slot = nullptr;
    for (auto& p : *m.mutable_metadata_props())
      if (p.key() == key) slot = &p;
    if (slot == nullptr) slot = m.add_metadata_props();
    slot->set_key(key);
    slot->set_value(value);
  }
  std::string out;
  ANVIL_CHECK(m.SerializeToString(&out), "ONNX metadata: the model does not serialize");
  return out;
}

}  // namespace anvil::onnx
