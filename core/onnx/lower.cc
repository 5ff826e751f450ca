#include "core/onnx/lower.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <variant>

#include "core/onnx/qdq_bias.h"
#include "core/ops/attrs.h"
#include "core/ops/functions.h"
#include "onnx/onnx_pb.h"

namespace anvil::onnx {
namespace {

using exporter::CaptureError;

[[noreturn]] void Refuse(const std::string& what) { throw CaptureError("export: " + what); }

bool IsFloating(ScalarType t) {
  return t == kFloat32 || t == kFloat64 || t == ScalarType::Float16 || t == ScalarType::BFloat16;
}

class Lowerer {
 public:
  Lowerer(const exporter::Trace& trace, int64_t opset) : trace_(trace), opset_(opset) {
    for (const exporter::Value& v : trace.values) {
      LValue l;
      l.kind = v.kind == exporter::Value::kInput      ? LValue::kInput
               : v.kind == exporter::Value::kConstant ? LValue::kConstant
                                                      : LValue::kComputed;
      l.sizes = v.sizes;
      l.dtype = v.dtype;
      if (l.kind == LValue::kConstant) l.constant = v.tensor;
      l.name = v.name;
      l.maker = v.maker;
      out_.values.push_back(std::move(l));
    }
    out_.inputs = trace.inputs;
    out_.outputs = trace.outputs;
  }

  Lowered run() {
    for (const exporter::Node& n : trace_.nodes) {
      origin_ = n.label();
      if (!n.composite.empty()) {
        Composite(n);
      } else {
        Row(n);
      }
    }
    return std::move(out_);
  }

 private:
  // ---- values ----
  const LValue& val(int id) const { return out_.values[static_cast<size_t>(id)]; }
  ScalarType dtype(int id) const { return val(id).dtype; }
  const IntArray& sizes(int id) const { return val(id).sizes; }
  int64_t rank(int id) const { return static_cast<int64_t>(sizes(id).size()); }

  int NewValue(LValue v) {
    out_.values.push_back(std::move(v));
    return static_cast<int>(out_.values.size()) - 1;
  }
  int Constant(const Tensor& t) {
    LValue v;
    v.kind = LValue::kConstant;
    v.constant = t.contiguous();
    v.sizes = t.sizes();
    v.dtype = t.dtype();
    v.maker = origin_;
    return NewValue(std::move(v));
  }
  int Scalar(double value, ScalarType dt) { return Constant(full({}, value, TensorOptions(dt))); }
  int Int64s(const IntArray& values) {
    Tensor t = empty({static_cast<int64_t>(values.size())}, TensorOptions(kInt64));
    for (size_t i = 0; i < values.size(); ++i) t.data_ptr<int64_t>()[i] = values[i];
    return Constant(t);
  }
  int ShapeArg(IntArray entries, LValue::ShapeUse use, int like = -1, IntArray like_dims = {}) {
    LValue v;
    v.kind = LValue::kShape;
    v.dtype = kInt64;
    v.sizes = {static_cast<int64_t>(entries.size())};
    v.shape = std::move(entries);
    v.use = use;
    v.like = like;
    v.like_dims = std::move(like_dims);
    v.maker = origin_;
    return NewValue(std::move(v));
  }
  // A node whose output is a new intermediate of dtype `dt`.
  int Emit(const char* op, std::vector<int> inputs, ScalarType dt, Attributes attrs = {}) {
    LValue v;
    v.kind = LValue::kComputed;
    v.dtype = dt;
    const int id = NewValue(std::move(v));
    EmitTo(op, std::move(inputs), id, std::move(attrs));
    return id;
  }
  // A new intermediate of dtype `dt` for a node emitted later.
  int Temp(ScalarType dt) {
    LValue v;
    v.kind = LValue::kComputed;
    v.dtype = dt;
    return NewValue(std::move(v));
  }
  void EmitTo(const char* op, std::vector<int> inputs, int output, Attributes attrs = {}) {
    out_.nodes.push_back(LNode{op, std::move(attrs), std::move(inputs), {output}, origin_});
  }
  // `id` as dtype `dt`: itself, a converted constant, or a Cast node.
  int CastTo(int id, ScalarType dt) {
    if (id < 0 || dtype(id) == dt) return id;
    if (val(id).kind == LValue::kConstant) return Constant(val(id).constant.to(dt));
    return Emit("Cast", {id}, dt, {{"to", int64_t{onnx_dtype(dt)}}});
  }

  // ---- ONNX conventions ----
  // A reduction's axes: an attribute before opset 18 (13 for ReduceSum), an input after.
  void Reduce(const char* op, int x, const IntArray& dims, bool keepdim, int output) {
    Attributes attrs{{"keepdims", int64_t{keepdim ? 1 : 0}}};
    std::vector<int> inputs{x};
    if (!dims.empty()) {
      IntArray axes;
      for (int64_t d : dims) axes.push_back(d < 0 ? d + rank(x) : d);
      const bool as_input = std::string_view(op) == "ReduceSum" ? opset_ >= 13 : opset_ >= 18;
      if (as_input) {
        inputs.push_back(Int64s(axes));
      } else {
        attrs.emplace_back("axes", std::vector<int64_t>(axes.begin(), axes.end()));
      }
    }
    EmitTo(op, inputs, output, std::move(attrs));
  }
  IntArray AllDimsIfEmpty(const IntArray& dims, int x) const {
    if (!dims.empty()) return dims;
    IntArray all;
    for (int64_t d = 0; d < rank(x); ++d) all.push_back(d);
    return all;
  }
  // The number of elements a reduction over `dims` of x combines (a constant of the trace).
  int64_t ReducedCount(int x, const IntArray& dims) const {
    int64_t n = 1;
    for (int64_t d : AllDimsIfEmpty(dims, x)) n *= sizes(x)[static_cast<size_t>(d < 0 ? d + rank(x) : d)];
    return n;
  }

  // ---- rows ----
  void Row(const exporter::Node& n) {
    const OpInfo& info = op_info(n.op);
    std::vector<int> in = n.inputs;
    const int out = n.outputs.empty() ? -1 : n.outputs[0];
    const ScalarType odt = out >= 0 ? dtype(out) : kFloat32;
    // Element-wise rows compute in the output's type (float rows promote integer inputs);
    // comparisons and logical rows in the inputs' promoted type.
    if (info.kind == OpKind::Unary && IsFloating(odt)) in[0] = CastTo(in[0], odt);
    if (info.kind == OpKind::Binary) {
      ScalarType common = info.infer == InferFamily::BinaryCompare || info.infer == InferFamily::BinaryLogical
                              ? promote_types(dtype(in[0]), dtype(in[1]))
                              : odt;
      if (info.infer == InferFamily::BinaryLogical) common = kBool;
      in[0] = CastTo(in[0], common);
      in[1] = CastTo(in[1], common);
    }
    // ONNX's Not takes bool only and IsNaN floating point only; Anvil's rows take any dtype.
    if (n.op == OpId::LogicalNot) in[0] = CastTo(in[0], kBool);
    if (n.op == OpId::IsNan && !IsFloating(dtype(in[0]))) in[0] = CastTo(in[0], kFloat32);
    if (n.op == OpId::Where) {
      in[0] = CastTo(in[0], kBool);
      in[1] = CastTo(in[1], odt);
      in[2] = CastTo(in[2], odt);
    }
    if (info.export_form == ExportForm::Node) {
      out_.nodes.push_back(LNode{std::string(info.onnx), {}, in, n.outputs, origin_});
      return;
    }
    switch (n.op) {
      case OpId::Expm1:
        EmitTo("Sub", {Emit("Exp", {in[0]}, odt), Scalar(1, odt)}, out);
        return;
      case OpId::Log1p:
        EmitTo("Log", {Emit("Add", {in[0], Scalar(1, odt)}, odt)}, out);
        return;
      case OpId::Rsqrt:
        EmitTo("Reciprocal", {Emit("Sqrt", {in[0]}, odt)}, out);
        return;
      case OpId::Silu:
        EmitTo("Mul", {in[0], Emit("Sigmoid", {in[0]}, odt)}, out);
        return;
      case OpId::IsFinite: {
        const int bad = Emit("Or", {Emit("IsInf", {in[0]}, kBool), Emit("IsNaN", {in[0]}, kBool)}, kBool);
        EmitTo("Not", {bad}, out);
        return;
      }
      case OpId::LeakyRelu:
        EmitTo("LeakyRelu", in, out, {{"alpha", n.attrs.get<LeakyReluArgs>().negative_slope}});
        return;
      case OpId::Elu:
        EmitTo("Elu", in, out, {{"alpha", n.attrs.get<EluArgs>().alpha}});
        return;
      case OpId::Gelu:
        Gelu(in[0], n.attrs.get<GeluArgs>().tanh_approximation, out);
        return;
      case OpId::Softplus: {
        const auto& a = n.attrs.get<SoftplusArgs>();
        if (a.beta == 1) {
          EmitTo("Softplus", in, out);
        } else {
          const int scaled = Emit("Softplus", {Emit("Mul", {in[0], Scalar(a.beta, odt)}, odt)}, odt);
          EmitTo("Div", {scaled, Scalar(a.beta, odt)}, out);
        }
        return;
      }
      case OpId::PowScalar:
        EmitTo("Pow", {in[0], Scalar(n.attrs.get<PowScalarArgs>().exponent, odt)}, out);
        return;
      case OpId::Clamp: {
        const auto& a = n.attrs.get<ClampArgs>();
        EmitTo("Clip", {in[0], a.min ? Scalar(*a.min, odt) : -1, a.max ? Scalar(*a.max, odt) : -1}, out);
        return;
      }
      case OpId::Trunc: {  // toward zero: floor of |x| with the sign back
        EmitTo("Mul", {Emit("Floor", {Emit("Abs", {in[0]}, odt)}, odt), Emit("Sign", {in[0]}, odt)}, out);
        return;
      }
      case OpId::Add:
      case OpId::Sub: {
        const double alpha = n.attrs.get<ScaleArgs>().alpha;
        const int y = alpha == 1 ? in[1] : Emit("Mul", {in[1], Scalar(alpha, odt)}, odt);
        EmitTo(n.op == OpId::Add ? (odt == kBool ? "Or" : "Add") : "Sub", {in[0], y}, out);
        return;
      }
      case OpId::Remainder:
      case OpId::Fmod: {
        if (!IsFloating(odt)) {
          EmitTo("Mod", in, out, {{"fmod", int64_t{n.op == OpId::Fmod ? 1 : 0}}});
        } else if (n.op == OpId::Fmod) {
          EmitTo("Mod", in, out, {{"fmod", int64_t{1}}});
        } else {  // Python's remainder for floats: x - floor(x / y) * y
          const int q = Emit("Floor", {Emit("Div", {in[0], in[1]}, odt)}, odt);
          EmitTo("Sub", {in[0], Emit("Mul", {q, in[1]}, odt)}, out);
        }
        return;
      }
      case OpId::Fmax:
      case OpId::Fmin: {  // NaN loses: take the other operand where one is NaN
        const int m = Emit(n.op == OpId::Fmax ? "Max" : "Min", {in[0], in[1]}, odt);
        const int first_nan = Emit("IsNaN", {in[0]}, kBool), second_nan = Emit("IsNaN", {in[1]}, kBool);
        EmitTo("Where", {first_nan, in[1], Emit("Where", {second_nan, in[0], m}, odt)}, out);
        return;
      }
      case OpId::FloorDivide: {
        const int q = Emit("Div", {CastTo(in[0], kFloat64), CastTo(in[1], kFloat64)}, kFloat64);
        EmitTo("Cast", {Emit("Floor", {q}, kFloat64)}, out, {{"to", int64_t{onnx_dtype(odt)}}});
        return;
      }
      case OpId::TruncDivide: {
        if (!IsFloating(odt)) {
          EmitTo("Div", in, out);  // integer Div truncates
        } else {
          const int q = Emit("Div", in, odt);
          EmitTo("Mul", {Emit("Floor", {Emit("Abs", {q}, odt)}, odt), Emit("Sign", {q}, odt)}, out);
        }
        return;
      }
      case OpId::Atan2:
        Refuse("'atan2' has no ONNX operator (opset <= 17) and no lowering yet");
      case OpId::Ne:
        EmitTo("Not", {Emit("Equal", in, kBool)}, out);
        return;
      case OpId::Cast:
        EmitTo("Cast", in, out, {{"to", int64_t{onnx_dtype(odt)}}});
        return;
      case OpId::Sum:
      case OpId::Mean:
      case OpId::Prod:
      case OpId::Amax:
      case OpId::Amin:
      case OpId::LogSumExp: {
        const auto& a = n.attrs.get<ReduceArgs>();
        const char* op = n.op == OpId::Sum    ? "ReduceSum"
                         : n.op == OpId::Mean ? "ReduceMean"
                         : n.op == OpId::Prod ? "ReduceProd"
                         : n.op == OpId::Amax ? "ReduceMax"
                         : n.op == OpId::Amin ? "ReduceMin"
                                              : "ReduceLogSumExp";
        const int x = CastTo(in[0], odt);
        if (rank(x) == 0) {
          EmitTo("Identity", {x}, out);
        } else {
          Reduce(op, x, a.dims, a.keepdim, out);
        }
        return;
      }
      case OpId::Var: {
        // The mean of squared deviations, rescaled for the correction: ReduceMean keeps its axes
        // an attribute below opset 18, which more runtimes read than ReduceSum's axes input.
        const auto& a = n.attrs.get<ReduceArgs>();
        const int mean = Temp(odt);
        Reduce("ReduceMean", in[0], a.dims, true, mean);
        const int d = Emit("Sub", {in[0], mean}, odt);
        const double count = static_cast<double>(ReducedCount(in[0], a.dims));
        if (a.correction == 0) {
          Reduce("ReduceMean", Emit("Mul", {d, d}, odt), a.dims, a.keepdim, out);
        } else {
          const int m2 = Temp(odt);
          Reduce("ReduceMean", Emit("Mul", {d, d}, odt), a.dims, a.keepdim, m2);
          const double scale = count > a.correction ? count / (count - a.correction) : INFINITY;
          EmitTo("Mul", {m2, Scalar(scale, odt)}, out);
        }
        return;
      }
      case OpId::Norm: {
        const auto& a = n.attrs.get<ReduceArgs>();
        if (a.p != 1 && a.p != 2)
          Refuse("'norm' with p = " + std::to_string(a.p) + " has no lowering (p = 1 and 2 have)");
        Reduce(a.p == 2 ? "ReduceL2" : "ReduceL1", in[0], a.dims, a.keepdim, out);
        return;
      }
      case OpId::Argmax:
      case OpId::Argmin: {
        const auto& a = n.attrs.get<ReduceArgs>();
        int x = in[0];
        int64_t axis = 0;
        if (a.dims.empty()) {
          x = Emit("Reshape", {x, Int64s({-1})}, dtype(x));
        } else {
          axis = a.dims[0] < 0 ? a.dims[0] + rank(x) : a.dims[0];
        }
        EmitTo(n.op == OpId::Argmax ? "ArgMax" : "ArgMin", {x}, out,
               {{"axis", axis}, {"keepdims", int64_t{a.keepdim && !a.dims.empty() ? 1 : 0}}});
        return;
      }
      case OpId::MaxDim:
      case OpId::MinDim: {
        const auto& a = n.attrs.get<ReduceArgs>();
        const int64_t axis = a.dims.empty() ? 0 : (a.dims[0] < 0 ? a.dims[0] + rank(in[0]) : a.dims[0]);
        Reduce(n.op == OpId::MaxDim ? "ReduceMax" : "ReduceMin", in[0], {axis}, a.keepdim, n.outputs[0]);
        EmitTo(n.op == OpId::MaxDim ? "ArgMax" : "ArgMin", {in[0]}, n.outputs[1],
               {{"axis", axis}, {"keepdims", int64_t{a.keepdim ? 1 : 0}}});
        return;
      }
      case OpId::CumSum: {
        const int64_t dim = n.attrs.get<DimArgs>().dim;
        EmitTo("CumSum", {CastTo(in[0], odt), Int64s({dim < 0 ? dim + rank(in[0]) : dim})}, out);
        return;
      }
      case OpId::Softmax:
      case OpId::LogSoftmax: {
        const int64_t dim = n.attrs.get<DimArgs>().dim;
        EmitTo(n.op == OpId::Softmax ? "Softmax" : "LogSoftmax", {CastTo(in[0], odt)}, out,
               {{"axis", dim < 0 ? dim + rank(in[0]) : dim}});
        return;
      }
      case OpId::Linear:
      case OpId::LinearRelu: {
        const int y = n.op == OpId::Linear ? out : Temp(odt);
        if (rank(in[0]) == 2) {
          std::vector<int> gemm{in[0], in[1]};
          if (in.size() > 2 && in[2] >= 0) gemm.push_back(in[2]);
          EmitTo("Gemm", gemm, y, {{"transB", int64_t{1}}});
        } else {
          const int wt = Emit("Transpose", {in[1]}, dtype(in[1]), {{"perm", std::vector<int64_t>{1, 0}}});
          if (in.size() > 2 && in[2] >= 0) {
            EmitTo("Add", {Emit("MatMul", {in[0], wt}, odt), in[2]}, y);
          } else {
            EmitTo("MatMul", {in[0], wt}, y);
          }
        }
        if (n.op == OpId::LinearRelu) EmitTo("Relu", {y}, out);
        return;
      }
      case OpId::Cat: {
        const int64_t dim = n.attrs.get<DimArgs>().dim;
        std::vector<int> parts;
        for (int id : in) parts.push_back(CastTo(id, odt));
        EmitTo("Concat", parts, out, {{"axis", dim < 0 ? dim + rank(out) : dim}});
        return;
      }
      case OpId::IndexSelect: {
        const int64_t dim = n.attrs.get<IndexArgs>().dim;
        EmitTo("Gather", in, out, {{"axis", dim < 0 ? dim + rank(in[0]) : dim}});
        return;
      }
      case OpId::Gather: {
        const int64_t dim = n.attrs.get<IndexArgs>().dim;
        EmitTo("GatherElements", in, out, {{"axis", dim < 0 ? dim + rank(in[0]) : dim}});
        return;
      }
      case OpId::View:
      case OpId::Permute:
      case OpId::Expand:
      case OpId::AsStrided:
        View(n, in[0], out);
        return;
      case OpId::Conv2d: {
        const auto& w = n.attrs.get<WindowArgs>();
        Attributes attrs{{"kernel_shape", std::vector<int64_t>{w.kernel_h, w.kernel_w}},
                         {"strides", std::vector<int64_t>{w.stride_h, w.stride_w}},
                         {"pads", std::vector<int64_t>{w.pad_top, w.pad_left, w.pad_bottom, w.pad_right}},
                         {"dilations", std::vector<int64_t>{w.dilation_h, w.dilation_w}},
                         {"group", w.groups}};
        std::vector<int> conv{in[0], in[1]};
        if (in.size() > 2 && in[2] >= 0) conv.push_back(in[2]);
        EmitTo("Conv", conv, out, std::move(attrs));
        return;
      }
      default:
        break;
    }
    Refuse(anvil::detail::StrCat(
        "op '", info.name, "' has no ONNX lowering yet",
        info.onnx.empty() ? std::string() : anvil::detail::StrCat(" (it would map to ", info.onnx, ")")));
  }

  void Gelu(int x, bool tanh_form, int out) {
    const ScalarType dt = dtype(x);
    int inner;
    if (!tanh_form) {  // x * 0.5 * (1 + erf(x / sqrt(2)))
      inner = Emit("Erf", {Emit("Mul", {x, Scalar(1.0 / std::numbers::sqrt2, dt)}, dt)}, dt);
    } else {  // x * 0.5 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))
      const int cube = Emit("Mul", {Emit("Mul", {x, x}, dt), x}, dt);
      const int arg = Emit("Add", {x, Emit("Mul", {cube, Scalar(0.044715, dt)}, dt)}, dt);
      inner = Emit("Tanh", {Emit("Mul", {arg, Scalar(std::sqrt(2.0 / std::numbers::pi), dt)}, dt)}, dt);
    }
    const int half = Emit("Mul", {Emit("Add", {inner, Scalar(1, dt)}, dt), Scalar(0.5, dt)}, dt);
    EmitTo("Mul", {x, half}, out);
  }

  void View(const exporter::Node& n, int x, int out) {
    const ViewFn& fn = n.attrs.get<ViewArgs>().fn;
    switch (fn.kind) {
      case ViewFn::Reshape:
        EmitTo("Reshape", {x, ShapeArg(sizes(out), LValue::kReshapeTarget)}, out);
        return;
      case ViewFn::Permute:
        EmitTo("Transpose", {x}, out, {{"perm", std::vector<int64_t>(fn.sizes.begin(), fn.sizes.end())}});
        return;
      case ViewFn::Expand:
        EmitTo("Expand", {x, ShapeArg(sizes(out), LValue::kExpandTarget, x)}, out);
        return;
      case ViewFn::Narrow:
      case ViewFn::Slice: {
        const int64_t step = fn.kind == ViewFn::Slice ? fn.step : 1;
        const int64_t end = fn.length == 0 ? fn.start : fn.start + (fn.length - 1) * step + 1;
        EmitTo("Slice",
               {x, ShapeArg({fn.start}, LValue::kSliceBound, x, {fn.dim}),
                ShapeArg({end}, LValue::kSliceBound, x, {fn.dim}), Int64s({fn.dim}), Int64s({step})},
               out);
        return;
      }
      case ViewFn::Select:
        EmitTo("Gather", {x, Scalar0(ShapeArg({fn.start}, LValue::kIndex, x, {fn.dim}))}, out, {{"axis", fn.dim}});
        return;
      default:
        break;
    }
    Refuse(anvil::detail::StrCat("a ",
                                 fn.kind == ViewFn::Diagonal ? "diagonal"
                                 : fn.kind == ViewFn::Unfold ? "unfold"
                                                             : "as_strided",
                                 " view has no ONNX form (it reads the storage with strides ONNX cannot express); use "
                                 "index_select or gather"));
  }
  // A 0-dim int64 from a 1-element shape argument (Gather with a scalar index drops the axis).
  int Scalar0(int one) { return Emit("Squeeze", {one, Int64s({0})}, kInt64); }

  // ---- composites ----
  void Composite(const exporter::Node& n) {
    const std::string& op = n.composite;
    if (op == "LayerNormalization" && opset_ < 17) {
      Refuse("layer_norm exports as LayerNormalization, which needs opset 17 or later (asked for " +
             std::to_string(opset_) + ")");
    }
    if (op == "GRU" || op == "LSTM" || op == "RNN") {
      // Y is [T, num_directions, B, H]; the layer's output is [T, B, num_directions * H]: one
      // direction squeezed out, two moved next to the features and merged ([forward, backward]
      // along the last dim, PyTorch's layout).
      const ScalarType dt = dtype(n.outputs[0]);
      const int y = Temp(dt);
      out_.nodes.push_back(LNode{op, n.composite_attrs, n.inputs, {y}, origin_});
      bool bidirectional = false;
      for (const auto& [key, value] : n.composite_attrs) {
        const auto* s = std::get_if<std::string>(&value);
        if (key == "direction" && s != nullptr && *s == "bidirectional") bidirectional = true;
      }
      if (!bidirectional) {
        EmitTo("Squeeze", {y, Int64s({1})}, n.outputs[0]);
        return;
      }
      const int t = Emit("Transpose", {y}, dt, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
      EmitTo("Reshape", {t, Int64s({0, 0, -1})}, n.outputs[0]);  // 0: keep T and B, symbolic or not
      return;
    }
    if (op == "MaxPool" && n.outputs.size() == 2) {
      MaxPoolWithIndices(n);
      return;
    }
    if (op == "MaxUnpool") {
      MaxUnpool(n);
      return;
    }
    if (op == "QuantizedLinear" || op == "QuantizedConv2d") {
      StaticQuantized(n);
      return;
    }
    if (op == "DynamicQuantizedLinear") {
      DynamicQuantizedLinear(n);
      return;
    }
    if (op == "QuantizeDequantize") {
      OutputQdq(n.inputs[0], AttrDouble(n, "y_scale"), AttrInt(n, "y_zero_point"), n.outputs[0]);
      return;
    }
    // One node of the operator, inputs in its order (embedding's Gather takes int32 or int64
    // indices as they come).
    static const char* const kOneNode[] = {"BatchNormalization", "LayerNormalization", "MaxPool", "AveragePool",
                                           "Gather"};
    for (const char* k : kOneNode) {
      if (op == k) {
        out_.nodes.push_back(LNode{op, n.composite_attrs, n.inputs, n.outputs, origin_});
        return;
      }
    }
    Refuse("'" + op + "' has no ONNX lowering yet");
  }

  // The flat index of every element's [H, W] plane start, [N, C, 1, 1]: a 1x1 MaxPool's
  // Indices are each element's own flat index over the whole tensor (n C + c) H W + h W + w;
  // their [0:1, 0:1] corner is the plane's start (PyTorch's exporter does the same).
  int PlaneStarts(int x) {
    const int flat = Temp(kInt64);
    out_.nodes.push_back(LNode{"MaxPool",
                               {{"kernel_shape", std::vector<int64_t>{1, 1}}, {"strides", std::vector<int64_t>{1, 1}}},
                               {x},
                               {Temp(dtype(x)), flat},
                               origin_});
    return Emit("Slice", {flat, Int64s({0, 0}), Int64s({1, 1}), Int64s({2, 3})}, kInt64);
  }

  // max_pool2d_with_indices: ONNX's Indices count over the whole tensor; Anvil's (PyTorch's)
  // within each plane, so the plane's start is subtracted.
  void MaxPoolWithIndices(const exporter::Node& n) {
    if (opset_ < 10) Refuse("max_pool2d's indices need MaxPool and Slice of opset 10 or later");
    const int x = n.inputs[0], onnx_indices = Temp(kInt64);
    out_.nodes.push_back(LNode{"MaxPool", n.composite_attrs, {x}, {n.outputs[0], onnx_indices}, origin_});
    EmitTo("Sub", {onnx_indices, PlaneStarts(x)}, n.outputs[1]);
  }

  // max_unpool2d: MaxUnpool takes indices over the whole output tensor, so each plane's start
  // (n C + c) OH OW is added: the pooled input's plane starts (n C + c) h w, divided by h w.
  void MaxUnpool(const exporter::Node& n) {
    const int x = n.inputs[0], indices = n.inputs[1];
    Attributes attrs;
    IntArray out_hw;
    for (const auto& [name, value] : n.composite_attrs) {
      if (name == "output_hw") {
        for (int64_t v : std::get<std::vector<int64_t>>(value)) out_hw.push_back(v);
      } else {
        attrs.emplace_back(name, value);
      }
    }
    const int64_t h = sizes(x)[2], w = sizes(x)[3];
    const int starts =
        Emit("Mul", {Emit("Div", {PlaneStarts(x), Int64s({h * w})}, kInt64), Int64s({out_hw[0] * out_hw[1]})}, kInt64);
    const int flat = Emit("Add", {indices, starts}, kInt64);
    // The output's shape: the input's N and C, then OH, OW (ONNX infers a size within a stride
    // of them only from this input).
    const int nc = Emit("Slice", {Emit("Shape", {x}, kInt64), Int64s({0}), Int64s({2}), Int64s({0})}, kInt64);
    const int shape = Emit("Concat", {nc, Int64s(out_hw)}, kInt64, {{"axis", int64_t{0}}});
    out_.nodes.push_back(LNode{"MaxUnpool", std::move(attrs), {x, flat, shape}, n.outputs, origin_});
  }

  // ---- quantized layers: the QDQ form (docs/onnx.md, "Quantized models") ----
  // Activations: QuantizeLinear (uint8, per tensor) -> DequantizeLinear; weights: int8
  // initializers behind a DequantizeLinear only; bias: int32 with scale s_x * s_w behind a
  // DequantizeLinear; then the float operator and QuantizeLinear with the output parameters.
  // onnxruntime's QDQ transformers recognise these groups and run them as QLinearConv,
  // QGemm or QLinearMatMul; any other runtime computes the same values in float.

  static const AttrValue& FindAttr(const exporter::Node& n, std::string_view key) {
    for (const auto& [k, v] : n.composite_attrs)
      if (k == key) return v;
    Refuse(anvil::detail::StrCat("'", n.composite, "' lacks its attribute '", key, "'"));
  }
  static double AttrDouble(const exporter::Node& n, std::string_view key) { return std::get<double>(FindAttr(n, key)); }
  static int64_t AttrInt(const exporter::Node& n, std::string_view key) { return std::get<int64_t>(FindAttr(n, key)); }

  // A quint8 activation's (scale, zero point) as the scalar initializers Q/DQ take.
  std::pair<int, int> ActivationParams(double scale, int64_t zero_point) {
    return {Scalar(static_cast<float>(scale), kFloat32), Scalar(static_cast<double>(zero_point), kUInt8)};
  }

  // `x` rounded to the quint8 grid of (scale, zero_point): Q -> DQ, or `x` itself when it is
  // already the DequantizeLinear of that grid (a layer's input quantized with the previous
  // layer's output parameters, as convert() arranges), so consecutive layers share one pair.
  int ActivationQdq(int x, double scale, int64_t zero_point) {
    if (auto it = on_grid_.find(x); it != on_grid_.end() && it->second == std::pair(scale, zero_point)) return x;
    const auto [s, z] = ActivationParams(scale, zero_point);
    const int q = Emit("QuantizeLinear", {x, s, z}, kUInt8);
    const int d = Emit("DequantizeLinear", {q, s, z}, kFloat32);
    on_grid_[d] = {scale, zero_point};
    return d;
  }
  // The layer's output: QuantizeLinear with its output parameters, dequantized into `out`.
  void OutputQdq(int y, double scale, int64_t zero_point, int out) {
    const auto [s, z] = ActivationParams(scale, zero_point);
    EmitTo("DequantizeLinear", {Emit("QuantizeLinear", {y, s, z}, kUInt8), s, z}, out);
    on_grid_[out] = {scale, zero_point};
  }

  // Scales [n] per channel along `axis`, or one scalar per tensor (axis < 0): DequantizeLinear's
  // attribute and parameter shapes.
  int PerAxisDequantize(const Tensor& ints, const Tensor& scales, const Tensor& zero_points, int64_t axis) {
    Attributes attrs;
    if (axis >= 0) attrs.emplace_back("axis", axis);
    const Tensor s = axis >= 0 ? scales : scales.reshape({});
    const Tensor z = axis >= 0 ? zero_points : zero_points.reshape({});
    return Emit("DequantizeLinear", {Constant(ints), Constant(s), Constant(z)}, kFloat32, std::move(attrs));
  }
  // The int8 weights (`w_scales`: float32, one per channel or one) behind a DequantizeLinear.
  int WeightDequantize(const Tensor& w, const Tensor& w_scales, int64_t axis) {
    return PerAxisDequantize(w, w_scales, zeros({w_scales.numel()}, TensorOptions(kInt8)), axis);
  }
  // The float bias as int32 steps of s_x * s_w (the float32 product, as fbgemm forms it):
  // round(bias / (s_x * s_w)), the form onnxruntime's QDQ selectors require.
  int BiasDequantize(Tensor bias, double x_scale, const Tensor& w_scales, bool per_channel) {
    const Int32Bias b = int32_bias(bias, x_scale, w_scales, per_channel);
    return PerAxisDequantize(b.ints, b.steps, zeros({b.steps.numel()}, TensorOptions(kInt32)), per_channel ? 0 : -1);
  }

  // QuantizedLinear and QuantizedConv2d: inputs (x, int8 weight, float32 weight scales, float
  // bias or absent); attributes x_/y_scale, x_/y_zero_point, relu, axis (0 per channel, -1 per
  // tensor), and the convolution's window.
  void StaticQuantized(const exporter::Node& n) {
    const bool conv = n.composite == "QuantizedConv2d";
    const int x = ActivationQdq(n.inputs[0], AttrDouble(n, "x_scale"), AttrInt(n, "x_zero_point"));
    // Copies of the handles: emitting constants grows out_.values, which would move a reference.
    const Tensor w = val(n.inputs[1]).constant;
    const Tensor w_scales = val(n.inputs[2]).constant;
    const bool per_channel = AttrInt(n, "axis") >= 0;
    const int bias = n.inputs[3] < 0
                         ? -1
                         : BiasDequantize(val(n.inputs[3]).constant, AttrDouble(n, "x_scale"), w_scales, per_channel);
    const int y = Temp(kFloat32);
    if (conv) {
      if (rank(n.inputs[0]) != 4) {
        Refuse("a quantized Conv2d exports for batched [N, C, H, W] inputs, got rank " +
               std::to_string(rank(n.inputs[0])));
      }
      Attributes attrs;
      for (const char* key : {"kernel_shape", "strides", "pads", "dilations"})
        attrs.emplace_back(key, FindAttr(n, key));
      std::vector<int> in{x, WeightDequantize(w, w_scales, per_channel ? 0 : -1)};
      if (bias >= 0) in.push_back(bias);
      EmitTo("Conv", in, y, std::move(attrs));
    } else if (rank(n.inputs[0]) == 2) {
      std::vector<int> in{x, WeightDequantize(w, w_scales, per_channel ? 0 : -1)};
      if (bias >= 0) in.push_back(bias);
      EmitTo("Gemm", in, y, {{"transB", int64_t{1}}});
    } else {
      // MatMul takes [in, out]: the weights transposed as integers, their channels on axis 1.
      const int wt = WeightDequantize(w.t().contiguous(), w_scales, per_channel ? 1 : -1);
      if (bias >= 0) {
        EmitTo("Add", {Emit("MatMul", {x, wt}, kFloat32), bias}, y);
      } else {
        EmitTo("MatMul", {x, wt}, y);
      }
    }
    // The fused ReLU: Relu then QuantizeLinear clamps at the zero point, as the layer does.
    const int activated = AttrInt(n, "relu") != 0 ? Emit("Relu", {y}, kFloat32) : y;
    OutputQdq(activated, AttrDouble(n, "y_scale"), AttrInt(n, "y_zero_point"), n.outputs[0]);
  }

  // DynamicQuantizedLinear: DynamicQuantizeLinear of the input (uint8, its range chosen per
  // run), MatMulInteger with the int8 weights [in, out], the int32 sums scaled back by
  // x_scale * w_scale, then the float bias. This is the graph onnxruntime's own dynamic
  // quantizer writes, which its optimizer fuses into MatMulIntegerToFloat and then
  // DynamicQuantizeMatMul (a graph of DequantizeLinear(weights) -> MatMul would run in float).
  void DynamicQuantizedLinear(const exporter::Node& n) {
    const int x = CastTo(n.inputs[0], kFloat32);
    // Copies of the handles: emitting constants grows out_.values, which would move a reference.
    const Tensor w = val(n.inputs[1]).constant;
    const Tensor w_scales = val(n.inputs[2]).constant;
    const bool per_channel = AttrInt(n, "axis") >= 0;
    const int xq = Temp(kUInt8), xs = Temp(kFloat32), xz = Temp(kUInt8);
    out_.nodes.push_back(LNode{"DynamicQuantizeLinear", {}, {x}, {xq, xs, xz}, origin_});
    const Tensor wz = zeros({per_channel ? w_scales.numel() : int64_t{1}}, TensorOptions(kInt8));
    const int acc = Emit("MatMulInteger",
                         {xq, Constant(w.t().contiguous()), xz, Constant(per_channel ? wz : wz.reshape({}))}, kInt32);
    const int scale = Emit("Mul", {xs, Constant(per_channel ? w_scales : w_scales.reshape({}))}, kFloat32);
    const int y = Emit("Mul", {CastTo(acc, kFloat32), scale}, kFloat32);
    if (n.inputs[3] >= 0) {
      EmitTo("Add", {y, CastTo(n.inputs[3], kFloat32)}, n.outputs[0]);
    } else {
      EmitTo("Identity", {y}, n.outputs[0]);
    }
  }

  const exporter::Trace& trace_;
  int64_t opset_;
  Lowered out_;
  std::string origin_;
  std::map<int, std::pair<double, int64_t>> on_grid_;  // DequantizeLinear outputs: their (scale, zero point)
};

}  // namespace

int32_t onnx_dtype(ScalarType t) {
  switch (t) {
    case kBool:
      return ::onnx::TensorProto::BOOL;
    case kUInt8:
      return ::onnx::TensorProto::UINT8;
    case kInt8:
      return ::onnx::TensorProto::INT8;
    case kInt16:
      return ::onnx::TensorProto::INT16;
    case kInt32:
      return ::onnx::TensorProto::INT32;
    case kInt64:
      return ::onnx::TensorProto::INT64;
    case ScalarType::Float16:
      return ::onnx::TensorProto::FLOAT16;
    case ScalarType::BFloat16:
      return ::onnx::TensorProto::BFLOAT16;
    case kFloat32:
      return ::onnx::TensorProto::FLOAT;
    case kFloat64:
      return ::onnx::TensorProto::DOUBLE;
  }
  return ::onnx::TensorProto::UNDEFINED;
}

Lowered lower(const exporter::Trace& trace, int64_t opset) { return Lowerer(trace, opset).run(); }

}  // namespace anvil::onnx
