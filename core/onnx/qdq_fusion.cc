#include "core/onnx/qdq_fusion.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/onnx/graph_uses.h"
#include "core/onnx/node_attrs.h"
#include "core/ops/functions.h"
#include "core/quant/quantized_layers.h"

namespace anvil::onnx {
namespace {

namespace pb = ::onnx;

using attrs::DefaultDomain;

// A DequantizeLinear's or QuantizeLinear's per-tensor activation grid: a positive finite
// float32 scale and a uint8 zero point, both constants. The zero point must be there: without
// it a DequantizeLinear's input may be int8 or int32, and QuantizeLinear's output is uint8.
std::optional<quant::ActivationQParams> ActivationGrid(const pb::NodeProto& n, const ConstantLookup& constant) {
  if (n.input_size() < 3 || n.input(2).empty()) return std::nullopt;
  const Tensor s = constant(n.input(1));
  if (!s.defined() || s.dtype() != kFloat32 || s.numel() != 1) return std::nullopt;
  const double scale = s.to(kFloat64).reshape({}).item<double>();
  if (!(std::isfinite(scale) && scale > 0)) return std::nullopt;
  const Tensor z = constant(n.input(2));
  if (!z.defined() || z.dtype() != kUInt8 || z.numel() != 1) return std::nullopt;
  return quant::ActivationQParams{scale, z.to(kInt64).reshape({}).item<int64_t>()};
}

// A float32 constant of one value or `n` values, each positive and finite (a weight scale).
std::optional<Tensor> PositiveScales(const std::string& value, const ConstantLookup& constant, int64_t n) {
  const Tensor s = constant(value);
  if (!s.defined() || s.dtype() != kFloat32 || s.dim() > 1 || (s.numel() != 1 && s.numel() != n)) return std::nullopt;
  const Tensor flat = s.reshape({-1}).contiguous();
  for (const float v : flat.to_vector<float>())
    if (!(std::isfinite(v) && v > 0)) return std::nullopt;
  return flat;
}

// The float32 scales of a DequantizeLinear over a constant, one per index of `axis` or one in
// all, when its zero points are absent or all zero; else none.
std::optional<Tensor> SymmetricScales(const pb::NodeProto& dq, const ConstantLookup& constant, int64_t axis,
                                      int64_t channels) {
  if (dq.input_size() < 2) return std::nullopt;
  const Tensor s = constant(dq.input(1));
  if (!s.defined() || s.dtype() != kFloat32 || s.dim() > 1) return std::nullopt;
  if (s.numel() != 1) {
    // Per channel: 1-D, one scale per channel, on the axis the layer's output channels are.
    if (s.dim() != 1 || s.numel() != channels || attrs::Int(dq, "axis", 1) != axis) return std::nullopt;
  }
  if (dq.input_size() > 2 && !dq.input(2).empty()) {
    const Tensor z = constant(dq.input(2));
    if (!z.defined() || z.numel() != s.numel() || !equal(z.to(kInt64), zeros(z.sizes(), TensorOptions(kInt64))))
      return std::nullopt;
  }
  return PositiveScales(dq.input(1), constant, s.numel());
}

// The int8 weights behind `value` (a DequantizeLinear of an int8 constant with zero points 0)
// as a QTensor of [out, ...] rows: `out_axis` is the axis of the output channels in the
// constant (0, or 1 for the [in, out] weights of MatMul and Gemm without transB).
std::optional<quant::QTensor> Int8Weight(const std::string& value, const GraphUses& uses,
                                         const ConstantLookup& constant, int64_t out_axis, int64_t rank) {
  const pb::NodeProto* dq = uses.MadeBy(value, "DequantizeLinear");
  if (dq == nullptr) return std::nullopt;
  const Tensor w = constant(dq->input(0));
  if (!w.defined() || w.dtype() != kInt8 || w.dim() != rank) return std::nullopt;
  const std::optional<Tensor> scales = SymmetricScales(*dq, constant, out_axis, w.size(out_axis));
  if (!scales) return std::nullopt;
  quant::QTensor q;
  q.data = out_axis == 0 ? w.contiguous() : w.t().contiguous();
  q.dtype = quant::QDtype::QInt8;
  const bool per_channel = scales->numel() > 1;
  q.qscheme = per_channel ? quant::QScheme::PerChannelSymmetric : quant::QScheme::PerTensorSymmetric;
  q.scales = scales->to(kFloat64);
  q.zero_points = zeros({scales->numel()}, TensorOptions(kInt64));
  q.axis = per_channel ? 0 : -1;
  return q;
}

// A bias of `n` values: a float32 constant, or a DequantizeLinear of an int32 constant with
// zero points 0 (what QDQ graphs hold: steps of s_x * s_w), dequantized as ONNX does.
std::optional<Tensor> FloatBias(const std::string& value, const GraphUses& uses, const ConstantLookup& constant,
                                int64_t n) {
  if (const Tensor b = constant(value); b.defined()) {
    if (b.dtype() != kFloat32 || b.numel() != n || b.dim() > 2) return std::nullopt;
    return b.reshape({n}).contiguous();
  }
  const pb::NodeProto* dq = uses.MadeBy(value, "DequantizeLinear");
  if (dq == nullptr) return std::nullopt;
  const Tensor ints = constant(dq->input(0));
  if (!ints.defined() || ints.dtype() != kInt32 || ints.dim() != 1 || ints.numel() != n) return std::nullopt;
  const std::optional<Tensor> scales = SymmetricScales(*dq, constant, 0, n);
  if (!scales) return std::nullopt;
  return (ints.to(kFloat32) * (scales->numel() == 1 ? scales->reshape({}) : *scales)).contiguous();
}

// The tail of a group from the value `y` its operator makes: [Relu ->] QuantizeLinear ->
// DequantizeLinear with the same grid, each value read by the next node only.
struct Tail {
  bool relu = false;
  quant::ActivationQParams grid;
  std::vector<int> nodes;
  std::string output;
};
std::optional<Tail> OutputTail(const std::string& y, const GraphUses& uses, const pb::GraphProto& g,
                               const ConstantLookup& constant) {
  Tail t;
  std::string v = y;
  if (const int r = uses.OnlyReader(v, "Relu"); r >= 0) {
    t.relu = true;
    t.nodes.push_back(r);
    v = g.node(r).output(0);
  }
  const int q = uses.OnlyReader(v, "QuantizeLinear");
  if (q < 0) return std::nullopt;
  const std::optional<quant::ActivationQParams> qgrid = ActivationGrid(g.node(q), constant);
  if (!qgrid || attrs::Int(g.node(q), "saturate", 1) != 1) return std::nullopt;
  const int d = uses.OnlyReader(g.node(q).output(0), "DequantizeLinear");
  if (d < 0) return std::nullopt;
  const std::optional<quant::ActivationQParams> dgrid = ActivationGrid(g.node(d), constant);
  // Compared as float32, the precision ONNX gives the scale.
  if (!dgrid || static_cast<float>(dgrid->scale) != static_cast<float>(qgrid->scale) ||
      dgrid->zero_point != qgrid->zero_point)
    return std::nullopt;
  t.grid = *qgrid;
  t.nodes.push_back(q);
  t.nodes.push_back(d);
  t.output = g.node(d).output(0);
  return t;
}

std::string Describe(const pb::NodeProto& n, const char* layer, const Tail& t, const quant::QTensor& w) {
  return n.op_type() + " \"" + n.name() + "\" -> " + layer + " (" + (t.relu ? "relu, " : "") +
         (quant::is_per_channel(w.qscheme) ? "per channel" : "per tensor") + ")";
}

// One group around the Conv/Gemm/MatMul node `i`, or none.
std::optional<FusedQdqLayer> Match(int i, const pb::GraphProto& g, const GraphUses& uses,
                                   const ConstantLookup& constant) {
  const pb::NodeProto& n = g.node(i);
  if (!DefaultDomain(n) || n.input_size() < 2 || n.output_size() != 1) return std::nullopt;
  const std::string& op = n.op_type();
  // The input: on a uint8 grid.
  const pb::NodeProto* dx = uses.MadeBy(n.input(0), "DequantizeLinear");
  if (dx == nullptr) return std::nullopt;
  const std::optional<quant::ActivationQParams> in = ActivationGrid(*dx, constant);
  if (!in) return std::nullopt;

  FusedQdqLayer f;
  f.nodes.push_back(i);
  f.input = n.input(0);
  try {
    if (op == "Conv") {
      if (attrs::Int(n, "group", 1) != 1) return std::nullopt;
      const std::string pad_mode = attrs::Str(n, "auto_pad", "NOTSET");
      if (pad_mode != "NOTSET" && pad_mode != "VALID") return std::nullopt;
      const std::optional<quant::QTensor> w = Int8Weight(n.input(1), uses, constant, 0, 4);
      if (!w) return std::nullopt;
      const int64_t out = w->data.size(0);
      const std::vector<int64_t> k = attrs::Ints(n, "kernel_shape"), s = attrs::Ints(n, "strides"),
                                 p = attrs::Ints(n, "pads"), d = attrs::Ints(n, "dilations");
      if (!k.empty() && (k.size() != 2 || k[0] != w->data.size(2) || k[1] != w->data.size(3))) return std::nullopt;
      if ((!s.empty() && s.size() != 2) || (!d.empty() && d.size() != 2)) return std::nullopt;
      if (!p.empty() && (p.size() != 4 || p[0] != p[2] || p[1] != p[3])) return std::nullopt;
      nn::ConvOptions o;
      if (!s.empty()) o.stride = {s[0], s[1]};
      if (!d.empty()) o.dilation = {d[0], d[1]};
      if (!p.empty() && pad_mode == "NOTSET") o.padding = {p[0], p[1]};
      Tensor bias;
      if (n.input_size() > 2 && !n.input(2).empty()) {
        const std::optional<Tensor> b = FloatBias(n.input(2), uses, constant, out);
        if (!b) return std::nullopt;
        bias = *b;
      }
      const std::optional<Tail> t = OutputTail(n.output(0), uses, g, constant);
      if (!t) return std::nullopt;
      f.layer = std::make_shared<quant::QuantizedConv2d>(*w, bias, o, *in, t->grid, t->relu);
      f.nodes.insert(f.nodes.end(), t->nodes.begin(), t->nodes.end());
      f.output = t->output;
      f.description = Describe(n, "QuantizedConv2d", *t, *w);
      return f;
    }
    if (op == "Gemm" || op == "MatMul") {
      bool trans_b = false;
      if (op == "Gemm") {
        if (attrs::Int(n, "transA", 0) != 0 || attrs::Float(n, "alpha", 1) != 1 || attrs::Float(n, "beta", 1) != 1)
          return std::nullopt;
        trans_b = attrs::Int(n, "transB", 0) != 0;
      }
      // [out, in] with transB, else [in, out].
      const std::optional<quant::QTensor> w = Int8Weight(n.input(1), uses, constant, trans_b ? 0 : 1, 2);
      if (!w) return std::nullopt;
      const int64_t out = w->data.size(0);
      Tensor bias;
      std::string y = n.output(0);
      if (op == "Gemm" && n.input_size() > 2 && !n.input(2).empty()) {
        const std::optional<Tensor> b = FloatBias(n.input(2), uses, constant, out);
        if (!b) return std::nullopt;
        bias = *b;
      } else if (op == "MatMul") {
        // MatMul's bias is a following Add (either operand order).
        if (const int a = uses.OnlyReader(y, "Add"); a >= 0 && g.node(a).input_size() == 2) {
          const pb::NodeProto& add = g.node(a);
          const std::string& other = add.input(0) == y ? add.input(1) : add.input(0);
          if (std::optional<Tensor> b = FloatBias(other, uses, constant, out)) {
            bias = *b;
            f.nodes.push_back(a);
            y = add.output(0);
          }
        }
      }
      const std::optional<Tail> t = OutputTail(y, uses, g, constant);
      if (!t) return std::nullopt;
      f.layer = std::make_shared<quant::QuantizedLinear>(*w, bias, *in, t->grid, t->relu);
      f.nodes.insert(f.nodes.end(), t->nodes.begin(), t->nodes.end());
      f.output = t->output;
      f.description = Describe(n, "QuantizedLinear", *t, *w);
      return f;
    }
  } catch (const Error&) {
    return std::nullopt;  // a layer that refuses these parameters: the group runs as written
  }
  return std::nullopt;
}

// One dynamic group around the MatMulInteger node `i`, the form Anvil's export and
// onnxruntime's dynamic quantizer write:
//
//   DynamicQuantizeLinear(x) -> (x_q, x_scale, x_zp)
//   MatMulInteger(x_q, W: int8 [in, out] initializer, x_zp[, zero points 0]) -> Cast(FLOAT)
//   Mul(x_scale, w_scale: float32 constant, one or [out]) ─> Mul(cast, that) [-> Add(bias)]
//
// every value inside read by the group alone; or none.
std::optional<FusedQdqLayer> MatchDynamic(int i, const pb::GraphProto& g, const GraphUses& uses,
                                          const ConstantLookup& constant) {
  const pb::NodeProto& mm = g.node(i);
  if (!DefaultDomain(mm) || mm.input_size() < 3 || mm.output_size() != 1 || mm.input(2).empty()) return std::nullopt;
  const pb::NodeProto* dq = uses.MadeBy(mm.input(0), "DynamicQuantizeLinear");
  if (dq == nullptr || dq->output_size() != 3 || dq->output(0) != mm.input(0) || dq->output(2) != mm.input(2))
    return std::nullopt;
  // x_q and x_zp read by this MatMulInteger only, x_scale by the scale's Mul only.
  if (uses.OnlyReader(dq->output(0), "MatMulInteger") != i || uses.OnlyReader(dq->output(2), "MatMulInteger") != i)
    return std::nullopt;
  const Tensor w = constant(mm.input(1));
  if (!w.defined() || w.dtype() != kInt8 || w.dim() != 2) return std::nullopt;
  const int64_t out = w.size(1);
  if (mm.input_size() > 3 && !mm.input(3).empty()) {
    const Tensor z = constant(mm.input(3));
    if (!z.defined() || (z.numel() != 1 && z.numel() != out) ||
        !equal(z.to(kInt64), zeros(z.sizes(), TensorOptions(kInt64))))
      return std::nullopt;
  }
  const int cast = uses.OnlyReader(mm.output(0), "Cast");
  if (cast < 0 || attrs::Int(g.node(cast), "to", 0) != pb::TensorProto::FLOAT) return std::nullopt;
  const int scale_mul = uses.OnlyReader(dq->output(1), "Mul");
  if (scale_mul < 0 || g.node(scale_mul).input_size() != 2) return std::nullopt;
  const pb::NodeProto& sm = g.node(scale_mul);
  const std::optional<Tensor> w_scales =
      PositiveScales(sm.input(0) == dq->output(1) ? sm.input(1) : sm.input(0), constant, out);
  if (!w_scales) return std::nullopt;
  const int y_mul = uses.OnlyReader(g.node(cast).output(0), "Mul");
  if (y_mul < 0 || g.node(y_mul).input_size() != 2 || uses.OnlyReader(sm.output(0), "Mul") != y_mul)
    return std::nullopt;

  FusedQdqLayer f;
  f.nodes = {uses.Producer(mm.input(0)), i, cast, scale_mul, y_mul};
  f.input = dq->input(0);
  std::string y = g.node(y_mul).output(0);
  Tensor bias;
  if (const int a = uses.OnlyReader(y, "Add"); a >= 0 && g.node(a).input_size() == 2) {
    const pb::NodeProto& add = g.node(a);
    const Tensor b = constant(add.input(0) == y ? add.input(1) : add.input(0));
    if (b.defined() && b.dtype() == kFloat32 && b.numel() == out && b.dim() <= 2) {
      bias = b.reshape({out}).contiguous();
      f.nodes.push_back(a);
      y = add.output(0);
    }
  }
  quant::QTensor q;
  q.data = w.t().contiguous();
  q.dtype = quant::QDtype::QInt8;
  const bool per_channel = w_scales->numel() > 1;
  q.qscheme = per_channel ? quant::QScheme::PerChannelSymmetric : quant::QScheme::PerTensorSymmetric;
  q.scales = w_scales->to(kFloat64);
  q.zero_points = zeros({w_scales->numel()}, TensorOptions(kInt64));
  q.axis = per_channel ? 0 : -1;
  try {
    f.layer = std::make_shared<quant::DynamicQuantizedLinear>(q, bias, false, quant::DynamicActivations::kOnnx);
  } catch (const Error&) {
    return std::nullopt;
  }
  std::sort(f.nodes.begin(), f.nodes.end());
  f.output = y;
  f.description = "MatMulInteger \"" + mm.name() + "\" -> DynamicQuantizedLinear (" +
                  (per_channel ? "per channel" : "per tensor") + ", ONNX activations)";
  return f;
}

}  // namespace

std::vector<FusedQdqLayer> find_qdq_layers(const pb::GraphProto& graph, const ConstantLookup& constant) {
  const GraphUses uses(graph);
  std::vector<FusedQdqLayer> found;
  std::set<int> taken;
  for (int i = 0; i < graph.node_size(); ++i) {
    const std::string& op = graph.node(i).op_type();
    if (taken.count(i) || (op != "Conv" && op != "Gemm" && op != "MatMul" && op != "MatMulInteger")) continue;
    std::optional<FusedQdqLayer> f =
        op == "MatMulInteger" ? MatchDynamic(i, graph, uses, constant) : Match(i, graph, uses, constant);
    if (!f) continue;
    bool free = true;
    for (int n : f->nodes) free = free && !taken.count(n);
    if (!free) continue;
    taken.insert(f->nodes.begin(), f->nodes.end());
    found.push_back(std::move(*f));
  }
  return found;
}

}  // namespace anvil::onnx
