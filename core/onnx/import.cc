#include "core/onnx/import.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <numeric>
#include <set>

#include "core/autograd/grad_mode.h"
#include "core/nn/functional.h"
#include "core/onnx/node_attrs.h"
#include "core/onnx/qdq_fusion.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/ops/op_table.h"
#include "core/util/utf8.h"
#include "onnx/onnx_pb.h"

namespace anvil::onnx {
namespace {

namespace pb = ::onnx;
namespace F = nn::functional;

[[noreturn]] void Fail(const std::string& msg) { throw ImportError("ONNX import: " + msg); }

// Sizes a graph may make at run time (ConstantOfShape, Expand, Range): beyond this, a request
// could make the server allocate without bound.
constexpr int64_t kMaxRuntimeElements = int64_t{1} << 28;

// ---- attributes (node_attrs.h) ----
const pb::AttributeProto* FindAttr(const pb::NodeProto& n, const char* name) { return attrs::Find(n, name); }
using attrs::Float;
using attrs::Int;
using attrs::Ints;
using attrs::Str;

using attrs::DefaultDomain;

// ---- tensors ----
ScalarType DType(int32_t t, const std::string& what) {
  switch (t) {
    case pb::TensorProto::FLOAT:
      return kFloat32;
    case pb::TensorProto::DOUBLE:
      return kFloat64;
    case pb::TensorProto::INT64:
      return kInt64;
    case pb::TensorProto::INT32:
      return kInt32;
    case pb::TensorProto::INT8:
      return kInt8;
    case pb::TensorProto::UINT8:
      return kUInt8;
    case pb::TensorProto::BOOL:
      return kBool;
    case pb::TensorProto::FLOAT16:
      return ScalarType::Float16;
    default:
      Fail(what + ": element type " + std::to_string(t) +
           " is not supported (float, double, int64, int32, int8, uint8, bool, float16 are)");
  }
}

Tensor FromProto(const pb::TensorProto& t, const std::string& what) {
  if (t.data_location() == pb::TensorProto::EXTERNAL || t.external_data_size() > 0) {
    Fail(what +
         " keeps its data in an external file; external data is refused (no path named in a model file "
         "is opened): save the model with its data inside the file");
  }
  const ScalarType dt = DType(t.data_type(), what);
  IntArray dims;
  int64_t numel = 1;
  for (int64_t d : t.dims()) {
    if (d < 0) Fail(what + ": negative dim " + std::to_string(d));
    if (d > 0 && numel > (int64_t{1} << 40) / d) Fail(what + ": its shape claims more than 2^40 elements");
    numel *= d;
    dims.push_back(d);
  }
  // The data present is checked against the shape before anything is allocated: a shape is a few
  // bytes of the file, and must not make the importer allocate what the file does not hold.
  const auto bytes = static_cast<size_t>(numel) * static_cast<size_t>(itemsize(dt));
  if (t.has_raw_data()) {
    if (t.raw_data().size() != bytes) {
      Fail(anvil::detail::StrCat(what, ": ", t.raw_data().size(), " bytes of data for shape ", shape_str(dims), " of ",
                                 dtype_name(dt), " (", bytes, " expected)"));
    }
    Tensor out = empty(dims, TensorOptions(dt));
    if (bytes > 0) std::memcpy(out.data_ptr(), t.raw_data().data(), bytes);
    return out;
  }
  const int64_t have = t.data_type() == pb::TensorProto::FLOAT    ? t.float_data_size()
                       : t.data_type() == pb::TensorProto::DOUBLE ? t.double_data_size()
                       : t.data_type() == pb::TensorProto::INT64  ? t.int64_data_size()
                                                                  : t.int32_data_size();
  if (have != numel) {
    Fail(anvil::detail::StrCat(what, ": ", have, " values for shape ", shape_str(dims), " (", numel, " expected)"));
  }
  Tensor out = empty(dims, TensorOptions(dt));
  switch (t.data_type()) {
    case pb::TensorProto::FLOAT:
      std::copy(t.float_data().begin(), t.float_data().end(), out.data_ptr<float>());
      break;
    case pb::TensorProto::DOUBLE:
      std::copy(t.double_data().begin(), t.double_data().end(), out.data_ptr<double>());
      break;
    case pb::TensorProto::INT64:
      std::copy(t.int64_data().begin(), t.int64_data().end(), out.data_ptr<int64_t>());
      break;
    default: {
      Tensor wide = empty(dims, TensorOptions(kInt32));
      std::copy(t.int32_data().begin(), t.int32_data().end(), wide.data_ptr<int32_t>());
      if (dt == ScalarType::Float16) {  // int32_data holds the raw 16-bit patterns
        for (int64_t i = 0; i < numel; ++i) {
          const auto bits = static_cast<uint16_t>(wide.data_ptr<int32_t>()[i]);
          std::memcpy(static_cast<char*>(out.data_ptr()) + 2 * i, &bits, 2);
        }
      } else {
        out = wide.to(dt);
      }
    }
  }
  return out;
}

std::vector<int64_t> Int64Values(const Tensor& t, const char* what) {
  ANVIL_CHECK(t.defined() && (t.dtype() == kInt64 || t.dtype() == kInt32) && t.dim() <= 1, what,
              ": expected a 1-D int64 tensor");
  return t.to(kInt64).to_vector<int64_t>();
}

int64_t Wrap(int64_t axis, int64_t rank, const char* what) {
  ANVIL_CHECK(axis >= -rank && axis < rank, what, ": axis ", axis, " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// ---- operators ----

struct Call {
  const pb::NodeProto& node;
  const std::vector<Tensor>& in;  // undefined: an absent optional input
  std::vector<Tensor>& out;
  int64_t opset;
  Device device;  // the graph input's: tensors a node makes from nothing go there
  const Tensor& x(size_t i) const {
    ANVIL_CHECK(i < in.size() && in[i].defined(), node.op_type(), " \"", node.name(), "\": input ", i, " is missing");
    return in[i];
  }
  bool has(size_t i) const { return i < in.size() && in[i].defined(); }
};
using OpFn = std::function<void(Call&)>;

Tensor Reduce(const Call& c, const std::string& op) {
  const Tensor& x = c.x(0);
  std::vector<int64_t> axes;
  const bool as_input = op == "ReduceSum" ? c.opset >= 13 : c.opset >= 18;
  if (as_input) {
    if (c.has(1)) axes = Int64Values(c.in[1], "axes");
  } else {
    axes = Ints(c.node, "axes");
  }
  const bool keep = Int(c.node, "keepdims", 1) != 0;
  if (axes.empty() && Int(c.node, "noop_with_empty_axes", 0) != 0) return x;
  IntArray dims;
  for (int64_t a : axes) dims.push_back(Wrap(a, x.dim(), op.c_str()));
  if (dims.empty())
    for (int64_t d = 0; d < x.dim(); ++d) dims.push_back(d);
  if (op == "ReduceMean") return x.mean(dims, keep);
  if (op == "ReduceSum") return x.sum(dims, keep);
  if (op == "ReduceMax") return amax(x, dims, keep);
  return amin(x, dims, keep);
}

// ONNX counts MaxPool's Indices (and MaxUnpool's) over the whole [N, C, H, W] tensor; Anvil
// (as PyTorch) within each [H, W] plane: the plane starts (n C + c) H W, [N, C, 1, 1].
Tensor PlaneStarts(const Tensor& like, int64_t plane) {
  const int64_t N = like.size(0), C = like.size(1);
  return arange(0, N * C, 1, TensorOptions(kInt64).with_device(like.device())).view({N, C, 1, 1}) * plane;
}

void Pool(const Call& c, bool max) {
  const Tensor& x = c.x(0);
  ANVIL_CHECK(x.dim() == 4, c.node.op_type(), ": 2-D pooling of [N, C, H, W] only, got rank ", x.dim());
  const std::vector<int64_t> k = Ints(c.node, "kernel_shape"), s = Ints(c.node, "strides"), pads = Ints(c.node, "pads"),
                             dil = Ints(c.node, "dilations");
  ANVIL_CHECK(k.size() == 2, c.node.op_type(), ": expected a 2-D kernel_shape");
  ANVIL_CHECK(pads.empty() || (pads.size() == 4 && pads[0] == pads[2] && pads[1] == pads[3]), c.node.op_type(),
              ": asymmetric pads are not supported");
  ANVIL_CHECK(dil.empty() || dil.size() == 2, c.node.op_type(), ": expected 2 dilations");
  ANVIL_CHECK(max || dil.empty() || (dil[0] == 1 && dil[1] == 1), c.node.op_type(), ": dilations are not supported");
  const std::string auto_pad = Str(c.node, "auto_pad", "NOTSET");
  ANVIL_CHECK(auto_pad == "NOTSET" || auto_pad == "VALID", c.node.op_type(), ": auto_pad ", auto_pad,
              " is not supported (NOTSET and VALID are)");
  F::Pool2dParams p;
  p.kernel = {k[0], k[1]};
  p.stride = {s.empty() ? 1 : s[0], s.empty() ? 1 : s[1]};
  p.padding = {pads.empty() ? 0 : pads[0], pads.empty() ? 0 : pads[1]};
  p.ceil_mode = Int(c.node, "ceil_mode", 0) != 0;
  p.count_include_pad = Int(c.node, "count_include_pad", 0) != 0;
  if (!dil.empty()) p.dilation = {dil[0], dil[1]};
  const bool indices = max && c.out.size() > 1 && !c.node.output(1).empty();
  if (!indices) {
    c.out[0] = max ? F::max_pool2d(x, p) : F::avg_pool2d(x, p);
    return;
  }
  ANVIL_CHECK(Int(c.node, "storage_order", 0) == 0,
              "MaxPool: column-major indices (storage_order 1) are not supported");
  auto [y, plane_indices] = F::max_pool2d_with_indices(x, p);
  c.out[0] = y;
  c.out[1] = plane_indices + PlaneStarts(x, x.size(2) * x.size(3));
}

// MaxUnpool of [N, C, h, w] values at ONNX's whole-tensor indices; output_shape (input 2),
// when given, is [N, C, H, W].
Tensor Unpool(const Call& c) {
  const Tensor& x = c.x(0);
  ANVIL_CHECK(x.dim() == 4, "MaxUnpool: 2-D unpooling of [N, C, H, W] only, got rank ", x.dim());
  const std::vector<int64_t> k = Ints(c.node, "kernel_shape"), s = Ints(c.node, "strides"), pads = Ints(c.node, "pads");
  ANVIL_CHECK(k.size() == 2, "MaxUnpool: expected a 2-D kernel_shape");
  ANVIL_CHECK(pads.empty() || (pads.size() == 4 && pads[0] == pads[2] && pads[1] == pads[3]),
              "MaxUnpool: asymmetric pads are not supported");
  F::MaxUnpool2dParams p;
  p.kernel = {k[0], k[1]};
  p.stride = {s.empty() ? 1 : s[0], s.empty() ? 1 : s[1]};
  p.padding = {pads.empty() ? 0 : pads[0], pads.empty() ? 0 : pads[1]};
  std::array<int64_t, 2> hw{};
  for (size_t i = 0; i < 2; ++i)
    hw[i] = (x.size(static_cast<int64_t>(i) + 2) - 1) * p.stride[i] - 2 * p.padding[i] + p.kernel[i];
  if (c.has(2)) {
    const std::vector<int64_t> shape = Int64Values(c.in[2], "output_shape");
    ANVIL_CHECK(shape.size() == 4, "MaxUnpool: expected output_shape [N, C, H, W], got ", shape.size(), " sizes");
    hw = {shape[2], shape[3]};
    p.output_size = std::vector<int64_t>{hw[0], hw[1]};
  }
  return F::max_unpool2d(x, c.x(1) - PlaneStarts(x, hw[0] * hw[1]), p);
}

// Conv's attributes applied to x and w (and a bias, or none): Conv, and ConvInteger on its
// shifted integers.
Tensor ConvOf(const Call& c, Tensor x, Tensor w, const Tensor& bias) {
  const bool one_d = x.dim() == 3;
  ANVIL_CHECK(x.dim() == 4 || one_d, "Conv: 1-D or 2-D convolutions only, got input rank ", x.dim());
  std::vector<int64_t> s = Ints(c.node, "strides"), pads = Ints(c.node, "pads"), dil = Ints(c.node, "dilations");
  if (one_d) {
    x = x.unsqueeze(2);
    w = w.unsqueeze(2);
    s = {1, s.empty() ? 1 : s[0]};
    dil = {1, dil.empty() ? 1 : dil[0]};
    pads = pads.empty() ? std::vector<int64_t>{} : std::vector<int64_t>{0, pads[0], 0, pads[1]};
  }
  const std::string auto_pad = Str(c.node, "auto_pad", "NOTSET");
  F::Conv2dParams p;
  p.stride = {s.empty() ? 1 : s[0], s.empty() ? 1 : s[1]};
  p.dilation = {dil.empty() ? 1 : dil[0], dil.empty() ? 1 : dil[1]};
  p.groups = Int(c.node, "group", 1);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    ANVIL_CHECK(p.stride[0] == 1 && p.stride[1] == 1, "Conv: auto_pad ", auto_pad, " with a stride is not supported");
    p.same = true;
  } else {
    ANVIL_CHECK(auto_pad == "NOTSET" || auto_pad == "VALID", "Conv: unknown auto_pad ", auto_pad);
    if (!pads.empty() && auto_pad == "NOTSET") {
      ANVIL_CHECK(pads.size() == 4, "Conv: expected 4 pads, got ", pads.size());
      if (pads[0] == pads[2] && pads[1] == pads[3]) {
        p.padding = {pads[0], pads[1]};
      } else {
        x = F::pad(x, {pads[1], pads[3], pads[0], pads[2]});
      }
    }
  }
  Tensor y = F::conv2d(x, w, bias, p);
  return one_d ? y.squeeze(2) : y;
}

Tensor Conv(const Call& c) { return ConvOf(c, c.x(0), c.x(1), c.has(2) ? c.in[2] : Tensor()); }

// ConvInteger: (x - x_zero_point) convolved with (w - w_zero_point; per output channel when a
// vector) into int32, the padding zeros of the shifted input. Computed in float64, exact for
// any sum of 8-bit products over fewer than 2^37 terms, as MatMulInteger.
Tensor ConvInteger(const Call& c) {
  Tensor x = c.x(0).to(kFloat64), w = c.x(1).to(kFloat64);
  if (c.has(2)) x = x - c.in[2].to(kFloat64).reshape({});
  if (c.has(3)) {
    const Tensor wz = c.in[3].to(kFloat64);
    ANVIL_CHECK(wz.numel() == 1 || wz.numel() == w.size(0), "ConvInteger: expected one weight zero point or ",
                w.size(0), " (one per output channel), got ", wz.numel());
    IntArray shape(static_cast<size_t>(w.dim()), 1);
    shape[0] = wz.numel();
    w = w - wz.reshape(shape);
  }
  return ConvOf(c, x, w, Tensor()).to(kInt32);
}

Tensor Gemm(const Call& c) {
  Tensor a = c.x(0), b = c.x(1);
  if (Int(c.node, "transA", 0)) a = a.t();
  const bool tb = Int(c.node, "transB", 0) != 0;
  const double alpha = Float(c.node, "alpha", 1), beta = Float(c.node, "beta", 1);
  if (tb && alpha == 1 && beta == 1 && (!c.has(2) || c.in[2].dim() == 1)) {
    return linear(a, b, c.has(2) ? c.in[2] : Tensor());  // the engine's fused x W^T + b
  }
  Tensor y = matmul(a, tb ? b.t() : b);
  if (alpha != 1) y = y * alpha;
  if (c.has(2)) y = y + (beta == 1 ? c.in[2] : c.in[2] * beta);
  return y;
}

Tensor ReshapeTo(const Tensor& x, std::vector<int64_t> shape, bool allowzero) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowzero) {
      ANVIL_CHECK(static_cast<int64_t>(i) < x.dim(), "Reshape: 0 at dim ", i, " copies a dim the input does not have");
      shape[i] = x.size(static_cast<int64_t>(i));
    }
  }
  return x.reshape(IntArray(shape.begin(), shape.end()));
}

Tensor ConstantTensor(const pb::NodeProto& n) {
  if (const auto* a = FindAttr(n, "value")) return FromProto(a->t(), "Constant \"" + n.name() + "\"");
  if (const auto* a = FindAttr(n, "value_float")) return full({}, a->f(), TensorOptions(kFloat32));
  if (const auto* a = FindAttr(n, "value_int")) return full({}, a->i(), TensorOptions(kInt64));
  if (const auto* a = FindAttr(n, "value_floats")) {
    return tensor(std::vector<float>(a->floats().begin(), a->floats().end()));
  }
  if (const auto* a = FindAttr(n, "value_ints")) {
    return tensor(std::vector<int64_t>(a->ints().begin(), a->ints().end()));
  }
  Fail("Constant \"" + n.name() + "\": no value attribute (value, value_float(s), value_int(s) are read)");
}

// The element-wise operators whose ONNX meaning is not one row's: Add and Sub (rows with an
// alpha), Div (integers truncate in ONNX, where the row computes in float), and Max and Min
// (variadic; each pair is one row).
Tensor Broadcast2(const char* op, const Tensor& a, const Tensor& b) {
  const std::string s(op);
  if (s == "Add") return a + b;
  if (s == "Sub") return a - b;
  if (s == "Div") return is_floating_point(a.dtype()) ? a / b : div(a, b, "trunc");
  if (s == "Max") return maximum(a, b);
  return minimum(a, b);
}

// The inputs a Node row's operator takes (op_table.def: the element-wise kinds by their arity;
// the one Other row exported as a Node, Clone, takes one). op_table_test checks every Node row.
size_t NodeRowInputs(const OpInfo& info) {
  switch (info.kind) {
    case OpKind::Binary:
    case OpKind::Matmul:
      return 2;
    case OpKind::Ternary:
      return 3;
    default:
      return 1;
  }
}

// One node of a Node row's operator, run by the row as users call it: element-wise rows with
// their type promotion (integer inputs of float rows compute in float; operands of two types
// meet in their result type, as the dispatcher never sees), where() with its bool condition.
void RunRow(const OpInfo& info, Call& c) {
  const size_t n = NodeRowInputs(info);
  ANVIL_CHECK(c.in.size() == n, c.node.op_type(), " \"", c.node.name(), "\": expected ", n, " input", n == 1 ? "" : "s",
              ", got ", c.in.size());
  std::vector<Tensor> xs;
  for (size_t i = 0; i < n; ++i) xs.push_back(c.x(i));
  switch (info.kind) {
    case OpKind::Unary:
      c.out[0] = unary_op(info.id, xs[0]);
      return;
    case OpKind::Binary:
      c.out[0] = binary_op(info.id, xs[0], xs[1]);
      return;
    default:
      break;
  }
  // Where is the one Ternary row (its public form promotes the two values); Clone, one operand.
  c.out[0] = info.id == OpId::Where ? where(xs[0], xs[1], xs[2]) : dispatch1(info.id, xs, {});
}

// One direction of a GRU / LSTM / RNN over X [T, B, F] with that direction's W [G*H, F], R
// [G*H, H] and B [2*G*H]: ONNX's equations, step by step (`reverse`: from the last step to the
// first, each output at its own step). `h` and `cell` come in as the initial states and leave
// as the final ones; returns Y [T, B, H].
Tensor RecurrentDirection(const Tensor& x, const Tensor& w, const Tensor& r, const Tensor& bias, int64_t gates,
                          int64_t H, const std::string& act, bool lbr, bool reverse, Tensor& h, Tensor& cell) {
  const int64_t T = x.size(0);
  const Tensor wb = bias.narrow(0, 0, gates * H), rb = bias.narrow(0, gates * H, gates * H);
  const Tensor gi = linear(x, w, wb);  // every step's input projections
  std::vector<Tensor> ys(static_cast<size_t>(T));
  for (int64_t s = 0; s < T; ++s) {
    const int64_t t = reverse ? T - 1 - s : s;
    const Tensor gx = gi[t];
    if (gates == 1) {
      const Tensor pre = gx + linear(h, r, rb);
      h = act == "Relu" ? relu(pre) : tanh(pre);
    } else if (gates == 4) {  // i, o, f, c
      const Tensor g = gx + linear(h, r, rb);
      const Tensor i = sigmoid(g.narrow(1, 0, H)), o = sigmoid(g.narrow(1, H, H)), f = sigmoid(g.narrow(1, 2 * H, H));
      cell = f * cell + i * tanh(g.narrow(1, 3 * H, H));
      h = o * tanh(cell);
    } else {  // z, r, h
      const Tensor gh = linear(h, r.narrow(0, 0, 2 * H), rb.narrow(0, 0, 2 * H));
      const Tensor z = sigmoid(gx.narrow(1, 0, H) + gh.narrow(1, 0, H));
      const Tensor rr = sigmoid(gx.narrow(1, H, H) + gh.narrow(1, H, H));
      const Tensor rh = r.narrow(0, 2 * H, H), rbh = rb.narrow(0, 2 * H, H);
      const Tensor hh = lbr ? rr * linear(h, rh, rbh) : linear(rr * h, rh, rbh);
      const Tensor nn = tanh(gx.narrow(1, 2 * H, H) + hh);
      h = (1.0 - z) * nn + z * h;
    }
    ys[static_cast<size_t>(t)] = h;
  }
  return T > 0 ? stack(ys, 0) : zeros({0, x.size(1), H}, TensorOptions(x.dtype()).with_device(x.device()));
}

// GRU / LSTM / RNN, any direction (forward, reverse, bidirectional: one row of W, R, B and of
// the states per direction, forward first), layout 0, the default activations (RNN: Tanh or
// Relu per direction), no peepholes.
void Recurrent(Call& c, int64_t gates) {
  const pb::NodeProto& n = c.node;
  const std::string& op = n.op_type();
  const std::string direction = Str(n, "direction", "forward");
  ANVIL_CHECK(direction == "forward" || direction == "reverse" || direction == "bidirectional", op,
              ": direction must be forward, reverse or bidirectional, got '", direction, "'");
  const int64_t D = direction == "bidirectional" ? 2 : 1;
  ANVIL_CHECK(Int(n, "layout", 0) == 0, op, ": only layout 0 ([T, B, F]) is supported");
  ANVIL_CHECK(!FindAttr(n, "clip"), op, ": clip is not supported");
  std::vector<std::string> acts(static_cast<size_t>(D), "Tanh");  // the RNN's, per direction
  if (const auto* a = FindAttr(n, "activations")) {
    const std::vector<std::string> given(a->strings().begin(), a->strings().end());
    const std::vector<std::string> one = gates == 1   ? std::vector<std::string>{"Tanh"}
                                         : gates == 3 ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                      : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    std::vector<std::string> defaults;
    for (int64_t d = 0; d < D; ++d) defaults.insert(defaults.end(), one.begin(), one.end());
    bool ok = given.size() == defaults.size();
    for (size_t i = 0; ok && i < given.size(); ++i) ok = given[i] == defaults[i] || (gates == 1 && given[i] == "Relu");
    ANVIL_CHECK(ok, op, ": only the default activations are supported (", defaults.size(),
                " for this direction; the RNN's may be Relu)");
    if (gates == 1) acts = given;
  }
  const Tensor& x = c.x(0);
  ANVIL_CHECK(x.dim() == 3, op, ": expected X [T, B, F], got rank ", x.dim());
  const int64_t T = x.size(0), B = x.size(1), H = Int(n, "hidden_size", 0);
  const TensorOptions like = TensorOptions(x.dtype()).with_device(x.device());
  ANVIL_CHECK(H > 0 && c.x(1).dim() == 3 && c.x(1).size(0) == D && c.x(1).size(1) == gates * H, op, ": expected W [", D,
              ", ", gates, " * hidden_size, F] for direction ", direction, ", got ", shape_str(c.x(1)));
  ANVIL_CHECK(c.x(2).dim() == 3 && c.x(2).size(0) == D && c.x(2).size(1) == gates * H && c.x(2).size(2) == H, op,
              ": expected R [", D, ", ", gates * H, ", ", H, "], got ", shape_str(c.x(2)));
  auto per_direction = [&](size_t i, const char* name, IntArray sizes) {
    if (!c.has(i)) return zeros(sizes, like);
    ANVIL_CHECK(c.in[i].sizes() == sizes, op, ": expected ", name, " ", shape_str(sizes), ", got ", shape_str(c.in[i]));
    return c.in[i];
  };
  const Tensor bias = per_direction(3, "B", {D, 2 * gates * H});
  if (c.has(4)) {
    const std::vector<int64_t> lens = Int64Values(c.in[4], "sequence_lens");
    for (int64_t len : lens) ANVIL_CHECK(len == T, op, ": sequence_lens shorter than the sequence are not supported");
  }
  ANVIL_CHECK(!c.has(7), op, ": peepholes are not supported");
  const Tensor h0 = per_direction(5, "initial_h", {D, B, H});
  const Tensor c0 = gates == 4 ? per_direction(6, "initial_c", {D, B, H}) : Tensor();
  const bool lbr = Int(n, "linear_before_reset", 0) != 0;
  std::vector<Tensor> ys, hs, cs;
  for (int64_t d = 0; d < D; ++d) {
    Tensor h = h0[d], cell = gates == 4 ? c0[d] : Tensor();
    const bool reverse = direction == "reverse" || d == 1;
    ys.push_back(RecurrentDirection(x, c.x(1)[d], c.x(2)[d], bias[d], gates, H, acts[static_cast<size_t>(d)], lbr,
                                    reverse, h, cell)
                     .unsqueeze(1));
    hs.push_back(h);
    cs.push_back(cell);
  }
  c.out[0] = cat(ys, 1);  // [T, D, B, H]
  if (c.out.size() > 1) c.out[1] = stack(hs, 0);
  if (c.out.size() > 2) c.out[2] = gates == 4 ? stack(cs, 0) : Tensor();
}

// ---- quantization (QDQ graphs, as export writes them for int8 models) ----
// Run in float: QuantizeLinear rounds to the integer grid, DequantizeLinear maps back, so an
// int8 model computes its quantized values with float operators between the pairs (results
// within a rounding of each requantization from an int8 runtime's).

// A scale or zero point shaped to broadcast against a rank-`rank` input: a scalar per tensor,
// or [n] along the node's axis (default 1) per axis.
Tensor QParam(const Call& c, const Tensor& p, int64_t rank) {
  if (p.dim() == 0 || (p.numel() == 1 && FindAttr(c.node, "axis") == nullptr)) return p.reshape({});
  const int64_t axis = Wrap(Int(c.node, "axis", 1), rank, c.node.op_type().c_str());
  ANVIL_CHECK(p.dim() == 1, c.node.op_type(), " \"", c.node.name(),
              "\": expected a scalar or 1-D scale/zero point, got ", shape_str(p.sizes()));
  IntArray shape(static_cast<size_t>(rank), 1);
  shape[static_cast<size_t>(axis)] = p.numel();
  return p.reshape(shape);
}

Tensor QuantizeLinear(const Call& c) {
  const Tensor x = c.x(0).to(kFloat32);
  const Tensor scale = QParam(c, c.x(1).to(kFloat32), x.dim());
  const ScalarType dt = c.has(2) ? c.in[2].dtype() : kUInt8;
  ANVIL_CHECK(dt == kUInt8 || dt == kInt8, "QuantizeLinear \"", c.node.name(),
              "\": expected a uint8 or int8 zero point, got ", dtype_name(dt));
  Tensor q = (x / scale).round();
  if (c.has(2)) q = q + QParam(c, c.in[2].to(kFloat32), x.dim());
  return dt == kUInt8 ? q.clamp(0.0, 255.0).to(kUInt8) : q.clamp(-128.0, 127.0).to(kInt8);
}

Tensor DequantizeLinear(const Call& c) {
  const Tensor& x = c.x(0);
  Tensor v = x.to(kFloat32);
  if (c.has(2)) v = v - QParam(c, c.in[2].to(kFloat32), x.dim());
  return v * QParam(c, c.x(1).to(kFloat32), x.dim());
}

// ONNX's DynamicQuantizeLinear: uint8 over the input's range widened to hold 0.
void DynamicQuantizeLinear(Call& c) {
  const Tensor x = c.x(0).to(kFloat32);
  const Tensor lo = minimum(amin(x), zeros({}, TensorOptions(kFloat32).with_device(x.device())));
  const Tensor hi = maximum(amax(x), zeros({}, TensorOptions(kFloat32).with_device(x.device())));
  const Tensor range = (hi - lo) / 255.0;
  const Tensor scale = where(range == 0.0, 1.0, range);  // an all-zero input: any scale maps it to 0
  const Tensor zp = (-lo / scale).round().clamp(0.0, 255.0);
  c.out[0] = ((x / scale).round() + zp).clamp(0.0, 255.0).to(kUInt8);
  if (c.out.size() > 1) c.out[1] = scale;
  if (c.out.size() > 2) c.out[2] = zp.to(kUInt8);
}

// MatMulInteger: (a - a_zero_point) x (b - b_zero_point) as int32, summed in float64 (exact
// for any product of 8-bit integers over fewer than 2^37 terms).
Tensor MatMulInteger(const Call& c) {
  Tensor a = c.x(0).to(kFloat64), b = c.x(1).to(kFloat64);
  if (c.has(2)) a = a - c.in[2].to(kFloat64);
  if (c.has(3)) b = b - c.in[3].to(kFloat64);
  return matmul(a, b).to(kInt32);
}

const std::map<std::string, OpFn>& Ops() {
  static const std::map<std::string, OpFn> ops = [] {
    std::map<std::string, OpFn> m;
    for (const char* b : {"Add", "Sub", "Div"}) {
      m[b] = [b](Call& c) { c.out[0] = Broadcast2(b, c.x(0), c.x(1)); };
    }
    for (const char* v : {"Max", "Min", "Sum"}) {  // variadic
      m[v] = [v](Call& c) {
        Tensor acc = c.x(0);
        for (size_t i = 1; i < c.in.size(); ++i) acc = Broadcast2(std::string(v) == "Sum" ? "Add" : v, acc, c.x(i));
        c.out[0] = acc;
      };
    }
    m["Dropout"] = [](Call& c) {  // inference: the identity (and a mask of ones)
      c.out[0] = c.x(0);
      if (c.out.size() > 1) c.out[1] = ones(c.x(0).sizes(), TensorOptions(kBool));
    };
    m["Constant"] = [](Call& c) { c.out[0] = ConstantTensor(c.node).to(c.device); };
    m["LeakyRelu"] = [](Call& c) { c.out[0] = leaky_relu(c.x(0), Float(c.node, "alpha", 0.01)); };
    m["Elu"] = [](Call& c) { c.out[0] = elu(c.x(0), Float(c.node, "alpha", 1.0)); };
    m["Gelu"] = [](Call& c) { c.out[0] = gelu(c.x(0), Str(c.node, "approximate", "none")); };
    m["Softplus"] = [](Call& c) { c.out[0] = softplus(c.x(0)); };
    m["MatMul"] = [](Call& c) { c.out[0] = matmul(c.x(0), c.x(1)); };
    m["Gemm"] = [](Call& c) { c.out[0] = Gemm(c); };
    m["Conv"] = [](Call& c) { c.out[0] = Conv(c); };
    m["QuantizeLinear"] = [](Call& c) { c.out[0] = QuantizeLinear(c); };
    m["DequantizeLinear"] = [](Call& c) { c.out[0] = DequantizeLinear(c); };
    m["DynamicQuantizeLinear"] = DynamicQuantizeLinear;
    m["MatMulInteger"] = [](Call& c) { c.out[0] = MatMulInteger(c); };
    m["ConvInteger"] = [](Call& c) { c.out[0] = ConvInteger(c); };
    m["MaxPool"] = [](Call& c) { Pool(c, true); };
    m["AveragePool"] = [](Call& c) { Pool(c, false); };
    m["MaxUnpool"] = [](Call& c) { c.out[0] = Unpool(c); };
    m["GlobalAveragePool"] = [](Call& c) {
      IntArray dims;
      for (int64_t d = 2; d < c.x(0).dim(); ++d) dims.push_back(d);
      c.out[0] = c.x(0).mean(dims, true);
    };
    m["BatchNormalization"] = [](Call& c) {
      ANVIL_CHECK(Int(c.node, "training_mode", 0) == 0 && c.out.size() == 1,
                  "BatchNormalization: training mode is not supported");
      c.out[0] = F::batch_norm(c.x(0), c.x(3), c.x(4), c.x(1), c.x(2), false, 0.0, Float(c.node, "epsilon", 1e-5));
    };
    m["LayerNormalization"] = [](Call& c) {
      const Tensor& x = c.x(0);
      const int64_t axis = Wrap(Int(c.node, "axis", -1), x.dim(), "LayerNormalization");
      const IntArray shape(x.sizes().begin() + axis, x.sizes().end());
      c.out[0] = F::layer_norm(x, shape, c.x(1), c.has(2) ? c.in[2] : Tensor(), Float(c.node, "epsilon", 1e-5));
    };
    m["Softmax"] = [](Call& c) { c.out[0] = softmax(c.x(0), Wrap(Int(c.node, "axis", -1), c.x(0).dim(), "Softmax")); };
    m["LogSoftmax"] = [](Call& c) {
      c.out[0] = log_softmax(c.x(0), Wrap(Int(c.node, "axis", -1), c.x(0).dim(), "LogSoftmax"));
    };
    m["Flatten"] = [](Call& c) {
      const Tensor& x = c.x(0);
      const int64_t axis = Wrap(Int(c.node, "axis", 1), x.dim() + 1, "Flatten");
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= x.size(d);
      c.out[0] = x.reshape({outer, outer == 0 ? 0 : x.numel() / outer});
    };
    m["Reshape"] = [](Call& c) {
      c.out[0] = ReshapeTo(c.x(0), Int64Values(c.x(1), "Reshape shape"), Int(c.node, "allowzero", 0) != 0);
    };
    m["Transpose"] = [](Call& c) {
      std::vector<int64_t> perm = Ints(c.node, "perm");
      if (perm.empty()) {
        perm.resize(static_cast<size_t>(c.x(0).dim()));
        std::iota(perm.rbegin(), perm.rend(), 0);
      }
      c.out[0] = c.x(0).permute(IntArray(perm.begin(), perm.end()));
    };
    m["Concat"] = [](Call& c) {
      std::vector<Tensor> parts;
      for (size_t i = 0; i < c.in.size(); ++i) parts.push_back(c.x(i));
      c.out[0] = cat(parts, Wrap(Int(c.node, "axis", 0), parts[0].dim(), "Concat"));
    };
    m["Slice"] = [](Call& c) {
      const Tensor& x = c.x(0);
      const std::vector<int64_t> starts = Int64Values(c.x(1), "Slice starts"), ends = Int64Values(c.x(2), "Slice ends");
      std::vector<int64_t> axes = c.has(3) ? Int64Values(c.in[3], "Slice axes") : std::vector<int64_t>{};
      std::vector<int64_t> steps = c.has(4) ? Int64Values(c.in[4], "Slice steps") : std::vector<int64_t>{};
      if (axes.empty()) axes.resize(starts.size()), std::iota(axes.begin(), axes.end(), 0);
      if (steps.empty()) steps.assign(starts.size(), 1);
      ANVIL_CHECK(ends.size() == starts.size() && axes.size() == starts.size() && steps.size() == starts.size(),
                  "Slice: starts, ends, axes and steps differ in length");
      Tensor y = x;
      for (size_t i = 0; i < starts.size(); ++i) {
        ANVIL_CHECK(steps[i] > 0, "Slice: negative or zero steps are not supported, got ", steps[i]);
        const int64_t d = Wrap(axes[i], x.dim(), "Slice"), n = x.size(d);
        auto clampi = [n](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + n : v, 0, n); };
        y = y.slice(d, clampi(starts[i]), clampi(ends[i]), steps[i]);
      }
      c.out[0] = y;
    };
    m["Gather"] = [](Call& c) {
      const Tensor& x = c.x(0);
      const int64_t axis = Wrap(Int(c.node, "axis", 0), x.dim(), "Gather"), n = x.size(axis);
      Tensor idx = c.x(1).to(kInt64);
      idx = where(lt(idx, zeros_like(idx)), idx + n, idx);
      IntArray shape(x.sizes().begin(), x.sizes().begin() + axis);
      shape.insert(shape.end(), idx.sizes().begin(), idx.sizes().end());
      shape.insert(shape.end(), x.sizes().begin() + axis + 1, x.sizes().end());
      c.out[0] = index_select(x, axis, idx.reshape({-1})).reshape(shape);
    };
    m["Unsqueeze"] = [](Call& c) {
      std::vector<int64_t> axes = c.opset >= 13 ? Int64Values(c.x(1), "Unsqueeze axes") : Ints(c.node, "axes");
      const int64_t rank = c.x(0).dim() + static_cast<int64_t>(axes.size());
      for (int64_t& a : axes) a = Wrap(a, rank, "Unsqueeze");
      std::sort(axes.begin(), axes.end());
      Tensor y = c.x(0);
      for (int64_t a : axes) y = y.unsqueeze(a);
      c.out[0] = y;
    };
    m["Squeeze"] = [](Call& c) {
      std::vector<int64_t> axes = c.opset >= 13
                                      ? (c.has(1) ? Int64Values(c.in[1], "Squeeze axes") : std::vector<int64_t>{})
                                      : Ints(c.node, "axes");
      Tensor y = c.x(0);
      if (axes.empty()) {
        c.out[0] = y.squeeze();
        return;
      }
      for (int64_t& a : axes) a = Wrap(a, y.dim(), "Squeeze");
      std::sort(axes.rbegin(), axes.rend());
      for (int64_t a : axes) {
        ANVIL_CHECK(y.size(a) == 1, "Squeeze: dim ", a, " has size ", y.size(a), ", not 1");
        y = y.squeeze(a);
      }
      c.out[0] = y;
    };
    m["Cast"] = [](Call& c) { c.out[0] = c.x(0).to(DType(static_cast<int32_t>(Int(c.node, "to", 1)), "Cast")); };
    m["Clip"] = [](Call& c) {
      const Tensor& x = c.x(0);
      std::optional<Scalar> lo, hi;
      if (c.opset >= 11) {
        if (c.has(1)) lo = c.in[1].to(kFloat64).item<double>();
        if (c.has(2)) hi = c.in[2].to(kFloat64).item<double>();
      }
      c.out[0] = lo || hi ? clamp(x, lo, hi) : x;
    };
    m["Shape"] = [](Call& c) {
      const IntArray& s = c.x(0).sizes();
      const auto rank = static_cast<int64_t>(s.size());
      int64_t start = Int(c.node, "start", 0), end = Int(c.node, "end", rank);
      start = std::clamp<int64_t>(start < 0 ? start + rank : start, 0, rank);
      end = std::clamp<int64_t>(end < 0 ? end + rank : end, start, rank);
      c.out[0] = tensor(std::vector<int64_t>(s.begin() + start, s.begin() + end));
    };
    m["ConstantOfShape"] = [](Call& c) {
      const std::vector<int64_t> shape = Int64Values(c.x(0), "ConstantOfShape shape");
      int64_t numel = 1;
      for (int64_t d : shape) {
        ANVIL_CHECK(d >= 0 && (d == 0 || numel <= kMaxRuntimeElements / d), "ConstantOfShape: shape ",
                    shape_str(IntArray(shape.begin(), shape.end())), " is negative or beyond 2^28 elements");
        numel *= d;
      }
      Tensor v = FindAttr(c.node, "value") ? FromProto(FindAttr(c.node, "value")->t(), "ConstantOfShape value")
                                           : zeros({1}, TensorOptions(kFloat32));
      ANVIL_CHECK(v.numel() == 1, "ConstantOfShape: value must hold one element");
      c.out[0] = v.reshape({}).expand(IntArray(shape.begin(), shape.end())).contiguous().to(c.device);
    };
    m["Expand"] = [](Call& c) {
      const std::vector<int64_t> shape = Int64Values(c.x(1), "Expand shape");
      const IntArray target = broadcast_shapes(c.x(0).sizes(), IntArray(shape.begin(), shape.end()));
      int64_t numel = 1;
      for (int64_t d : target)
        numel = d == 0 ? 0 : (numel > kMaxRuntimeElements / d ? kMaxRuntimeElements + 1 : numel * d);
      ANVIL_CHECK(numel <= kMaxRuntimeElements, "Expand: target ", shape_str(target), " is beyond 2^28 elements");
      c.out[0] = c.x(0).expand(target);
    };
    m["Range"] = [](Call& c) {
      const double start = c.x(0).to(kFloat64).item<double>(), limit = c.x(1).to(kFloat64).item<double>(),
                   delta = c.x(2).to(kFloat64).item<double>();
      ANVIL_CHECK(delta != 0, "Range: delta is 0");
      const double n = std::max(0.0, std::ceil((limit - start) / delta));
      ANVIL_CHECK(n <= static_cast<double>(kMaxRuntimeElements), "Range: ", n, " elements is beyond 2^28");
      c.out[0] = arange(start, start + n * delta, delta, TensorOptions(c.x(0).dtype()).with_device(c.device));
    };
    for (const char* r : {"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"}) {
      m[r] = [r](Call& c) { c.out[0] = Reduce(c, r); };
    }
    m["ArgMax"] = [](Call& c) {
      const int64_t axis = Wrap(Int(c.node, "axis", 0), c.x(0).dim(), "ArgMax");
      c.out[0] = argmax(c.x(0), axis, Int(c.node, "keepdims", 1) != 0);
    };
    m["GRU"] = [](Call& c) { Recurrent(c, 3); };
    m["LSTM"] = [](Call& c) { Recurrent(c, 4); };
    m["RNN"] = [](Call& c) { Recurrent(c, 1); };
    // Every Node row of the op table (one ONNX operator, no attributes) imports as that row:
    // a new 1:1 row needs no edit here. An operator written above keeps its entry (its ONNX
    // meaning is wider than the row's: MatMul broadcasts where Mm and Bmm do not).
    for (int i = 0; i < kNumOps; ++i) {
      const OpInfo& info = op_info(static_cast<OpId>(i));
      if (info.export_form != ExportForm::Node) continue;
      m.emplace(std::string(info.onnx), [&info](Call& c) { RunRow(info, c); });
    }
    return m;
  }();
  return ops;
}

// The graph, run as a module: initializers are its buffers; each forward evaluates the nodes
// in order into a table of its own (so concurrent forwards share nothing mutable).
class OnnxGraph final : public nn::Module {
 public:
  OnnxGraph(const pb::GraphProto& graph, int64_t opset) : nn::Module("OnnxGraph"), opset_(opset) {
    auto slot_of = [this](const std::string& name) {
      auto [it, added] = slots_.try_emplace(name, static_cast<int>(slots_.size()));
      return it->second;
    };
    std::map<std::string, Tensor> constants;  // by value name: initializers and Constant nodes' values
    for (const auto& init : graph.initializer()) {
      const int s = slot_of(init.name());
      constants_.push_back(FromProto(init, "initializer \"" + init.name() + "\""));
      register_buffer(Sanitize(init.name()), constants_.back());
      constant_slots_.push_back(s);
      constants[init.name()] = constants_.back();
    }
    for (const auto& n : graph.node()) {
      if (!DefaultDomain(n) || n.op_type() != "Constant" || n.output_size() != 1) continue;
      try {
        constants[n.output(0)] = ConstantTensor(n);
      } catch (const Error&) {  // reported when the node runs, as for any other graph
      }
    }
    for (const auto& in : graph.input()) {
      if (!slots_.count(in.name())) input_slot_ = slot_of(in.name());
    }
    // The int8 layers of a QDQ graph (qdq_fusion.h): each replaces its group's nodes, at the
    // position of the group's last node.
    std::vector<FusedQdqLayer> fused = find_qdq_layers(graph, [&constants](const std::string& name) {
      const auto it = constants.find(name);
      return it == constants.end() ? Tensor() : it->second;
    });
    std::map<int, const FusedQdqLayer*> fused_at;  // by the group's last node
    std::set<int> replaced;
    for (const FusedQdqLayer& f : fused) {
      fused_at[f.nodes.back()] = &f;
      replaced.insert(f.nodes.begin(), f.nodes.end());
      fused_.push_back(f.description);
    }
    std::vector<Step> unfused;  // the steps as written, for DropStepsOnlyFusionRead
    for (int k = 0; k < graph.node_size(); ++k) {
      const pb::NodeProto& n = graph.node(k);
      Step step{n, k, {}, {}, &Ops().at(n.op_type()), nullptr};
      for (const std::string& i : n.input()) step.in.push_back(i.empty() ? -1 : slots_.at(i));
      for (const std::string& o : n.output()) step.out.push_back(o.empty() ? -1 : slot_of(o));
      if (const auto it = fused_at.find(k); it != fused_at.end()) {
        const FusedQdqLayer& f = *it->second;
        steps_.push_back(
            Step{graph.node(f.nodes.front()), k, {slots_.at(f.input)}, {slot_of(f.output)}, nullptr, f.layer});
      } else if (!replaced.count(k)) {
        steps_.push_back(step);
      }
      if (!fused.empty()) unfused.push_back(std::move(step));
    }
    output_slot_ = slots_.at(graph.output(0).name());
    if (!fused.empty()) DropStepsOnlyFusionRead(unfused);
    eval();
  }

  // The int8 layers found at import, described.
  const std::vector<std::string>& fused() const { return fused_; }

  Tensor forward(const Tensor& x) override { return Run(x, {}, nullptr); }

  // forward(x), handing each value named in `names` to `observe` as it is made.
  Tensor Run(const Tensor& x, const std::set<std::string>& names, const ValueObserver& observe) {
    std::vector<bool> watched(slots_.size(), false);
    for (const std::string& name : names) {
      const auto it = slots_.find(name);
      ANVIL_CHECK(it != slots_.end(), "ONNX graph: no value named \"", name, "\"");
      watched[static_cast<size_t>(it->second)] = true;
    }
    std::vector<std::string> slot_names(observe ? slots_.size() : 0);
    if (observe)
      for (const auto& [name, slot] : slots_) slot_names[static_cast<size_t>(slot)] = name;
    std::vector<Tensor> v(slots_.size());
    for (size_t i = 0; i < constant_slots_.size(); ++i) v[static_cast<size_t>(constant_slots_[i])] = constants_[i];
    v[static_cast<size_t>(input_slot_)] = x;
    if (observe && watched[static_cast<size_t>(input_slot_)]) observe(slot_names[static_cast<size_t>(input_slot_)], x);
    for (const Step& s : steps_) {
      std::vector<Tensor> in;
      for (int i : s.in) in.push_back(i < 0 ? Tensor() : v[static_cast<size_t>(i)]);
      std::vector<Tensor> out(s.out.size());
      Call call{s.node, in, out, opset_, x.device()};
      try {
        if (s.layer) {
          out[0] = s.layer->forward(call.x(0));
        } else {
          (*s.fn)(call);
        }
      } catch (const OutOfMemoryError& e) {  // stays RESOURCE_EXHAUSTED for the service
        throw OutOfMemoryError(
            anvil::detail::StrCat("node \"", s.node.name(), "\" (", s.node.op_type(), "): ", e.what()));
      } catch (const Error& e) {
        throw Error(anvil::detail::StrCat("node \"", s.node.name(), "\" (", s.node.op_type(), "): ", e.what()));
      }
      for (size_t i = 0; i < s.out.size(); ++i) {
        if (s.out[i] < 0) continue;
        v[static_cast<size_t>(s.out[i])] = out[i];
        if (observe && watched[static_cast<size_t>(s.out[i])])
          observe(slot_names[static_cast<size_t>(s.out[i])], out[i]);
      }
    }
    return v[static_cast<size_t>(output_slot_)];
  }

 private:
  struct Step {
    pb::NodeProto node;  // for a fused layer, its group's operator node (named in errors)
    int index = -1;      // the node's position in the file (a fused layer: its group's last node)
    std::vector<int> in, out;
    const OpFn* fn;                     // the operator, or
    std::shared_ptr<nn::Module> layer;  // a fused int8 layer: one input, one output
  };
  // Which of `steps` the graph's output depends on.
  std::vector<bool> Live(const std::vector<Step>& steps) const {
    std::vector<bool> needed(slots_.size(), false), live(steps.size(), false);
    needed[static_cast<size_t>(output_slot_)] = true;
    for (size_t i = steps.size(); i-- > 0;) {
      for (int o : steps[i].out) live[i] = live[i] || (o >= 0 && needed[static_cast<size_t>(o)]);
      if (!live[i]) continue;
      for (int in : steps[i].in)
        if (in >= 0) needed[static_cast<size_t>(in)] = true;
    }
    return live;
  }
  // Steps that only fused groups read (their weights' DequantizeLinear nodes, an input
  // QuantizeLinear/DequantizeLinear pair only a group read) are not run. A node the file itself
  // leaves unread (`unfused`: the steps as written) still runs, as it did before fusion: the
  // registration's trial run checks every node of the file.
  void DropStepsOnlyFusionRead(const std::vector<Step>& unfused) {
    const std::vector<bool> was_live = Live(unfused), live = Live(steps_);
    std::set<int> live_as_written;
    for (size_t i = 0; i < unfused.size(); ++i)
      if (was_live[i]) live_as_written.insert(unfused[i].index);
    std::vector<Step> kept;
    for (size_t i = 0; i < steps_.size(); ++i) {
      // Dead now, live as written: made dead by a fused group.
      if (!live[i] && live_as_written.count(steps_[i].index)) continue;
      kept.push_back(std::move(steps_[i]));
    }
    steps_ = std::move(kept);
  }
  static std::string Sanitize(const std::string& name) {
    std::string s = name.empty() ? "initializer" : name;
    for (char& ch : s)
      if (ch == '.') ch = '_';  // a dot would read as a child module in state-dict names
    return s;
  }

  int64_t opset_;
  std::map<std::string, int> slots_;
  std::deque<Tensor> constants_;  // registered as buffers by reference: a deque keeps them in place
  std::vector<int> constant_slots_;
  std::vector<Step> steps_;
  int input_slot_ = -1, output_slot_ = -1;
  std::vector<std::string> fused_;
};

// Every string of the model that Anvil reads, keeps (the signature, labels, the producer) or
// quotes in a message must be UTF-8: it becomes JSON, a protobuf string and a stored row.
// Refused otherwise, naming the field; doc strings are never read and are not checked.
void CheckText(const std::string& text, const std::string& field) {
  try {
    check_utf8(text, field);
  } catch (const Error& e) {
    Fail(e.what());
  }
}

void CheckValueInfoText(const pb::ValueInfoProto& v, const std::string& field) {
  CheckText(v.name(), field + ".name");
  if (v.type().has_tensor_type()) {
    const auto& dims = v.type().tensor_type().shape().dim();
    for (int d = 0; d < dims.size(); ++d) {
      CheckText(dims[d].dim_param(), anvil::detail::StrCat(field, ".type.shape.dim[", d, "].dim_param"));
    }
  }
}

void CheckGraphText(const pb::GraphProto& g, const std::string& field) {
  CheckText(g.name(), field + ".name");
  for (int i = 0; i < g.input_size(); ++i)
    CheckValueInfoText(g.input(i), anvil::detail::StrCat(field, ".input[", i, "]"));
  for (int i = 0; i < g.output_size(); ++i) {
    CheckValueInfoText(g.output(i), anvil::detail::StrCat(field, ".output[", i, "]"));
  }
  for (int i = 0; i < g.value_info_size(); ++i) {
    CheckValueInfoText(g.value_info(i), anvil::detail::StrCat(field, ".value_info[", i, "]"));
  }
  for (int i = 0; i < g.initializer_size(); ++i) {
    CheckText(g.initializer(i).name(), anvil::detail::StrCat(field, ".initializer[", i, "].name"));
  }
  for (int k = 0; k < g.node_size(); ++k) {
    const pb::NodeProto& n = g.node(k);
    const std::string at = anvil::detail::StrCat(field, ".node[", k, "]");
    CheckText(n.name(), at + ".name");
    CheckText(n.op_type(), at + ".op_type");
    CheckText(n.domain(), at + ".domain");
    for (int i = 0; i < n.input_size(); ++i) CheckText(n.input(i), anvil::detail::StrCat(at, ".input[", i, "]"));
    for (int i = 0; i < n.output_size(); ++i) CheckText(n.output(i), anvil::detail::StrCat(at, ".output[", i, "]"));
    for (int a = 0; a < n.attribute_size(); ++a) {
      const pb::AttributeProto& attr = n.attribute(a);
      CheckText(attr.name(), anvil::detail::StrCat(at, ".attribute[", a, "].name"));
      if (attr.has_g()) CheckGraphText(attr.g(), anvil::detail::StrCat(at, ".attribute[", a, "].g"));
      for (int j = 0; j < attr.graphs_size(); ++j) {
        CheckGraphText(attr.graphs(j), anvil::detail::StrCat(at, ".attribute[", a, "].graphs[", j, "]"));
      }
    }
  }
}

// Every tensor a node carries (Constant's value, ConstantOfShape's, a subgraph's) is decoded
// once at import, so a shape that disagrees with its data or data kept in an external file is
// refused when the model is registered, not at its first request.
void CheckTensorAttributes(const pb::GraphProto& g, const std::string& field) {
  for (int k = 0; k < g.node_size(); ++k) {
    const pb::NodeProto& n = g.node(k);
    for (int a = 0; a < n.attribute_size(); ++a) {
      const pb::AttributeProto& attr = n.attribute(a);
      const std::string at = anvil::detail::StrCat(field, ".node[", k, "] (", n.op_type(), " \"", n.name(),
                                                   "\") attribute \"", attr.name(), "\"");
      if (attr.has_t()) (void)FromProto(attr.t(), at);
      for (int j = 0; j < attr.tensors_size(); ++j)
        (void)FromProto(attr.tensors(j), anvil::detail::StrCat(at, "[", j, "]"));
      if (attr.has_g()) CheckTensorAttributes(attr.g(), at);
      for (int j = 0; j < attr.graphs_size(); ++j)
        CheckTensorAttributes(attr.graphs(j), anvil::detail::StrCat(at, "[", j, "]"));
    }
  }
}

void CheckModelText(const pb::ModelProto& m) {
  CheckText(m.producer_name(), "producer_name");
  CheckText(m.producer_version(), "producer_version");
  CheckText(m.domain(), "domain");
  for (int i = 0; i < m.opset_import_size(); ++i) {
    CheckText(m.opset_import(i).domain(), anvil::detail::StrCat("opset_import[", i, "].domain"));
  }
  for (int i = 0; i < m.metadata_props_size(); ++i) {
    CheckText(m.metadata_props(i).key(), anvil::detail::StrCat("metadata_props[", i, "].key"));
    CheckText(m.metadata_props(i).value(), anvil::detail::StrCat("metadata_props[", i, "].value"));
  }
  CheckGraphText(m.graph(), "graph");
}

}  // namespace

Tensor run_observing(nn::Module& graph, const Tensor& x, const std::set<std::string>& names,
                     const ValueObserver& observe) {
  auto* g = dynamic_cast<OnnxGraph*>(&graph);
  ANVIL_CHECK(g != nullptr, "run_observing: expected an imported ONNX graph, got ", graph.type_name());
  return g->Run(x, names, observe);
}

std::vector<std::string> importable_operators() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Ops()) names.push_back(name);
  return names;
}

ImportedModel import_model(const std::string& bytes, size_t max_bytes) {
  if (bytes.size() > max_bytes) {
    Fail(anvil::detail::StrCat("the file is ", bytes.size(), " bytes, over the limit of ", max_bytes));
  }
  pb::ModelProto model;
  if (bytes.empty() || !model.ParseFromString(bytes))
    Fail("the file is not an ONNX model (it does not parse as a ModelProto: truncated or another format)");
  if (!model.has_graph()) Fail("the model has no graph");
  CheckModelText(model);
  CheckTensorAttributes(model.graph(), "graph");
  const pb::GraphProto& g = model.graph();
  ImportedModel out;
  for (const auto& o : model.opset_import()) {
    if (o.domain().empty() || o.domain() == "ai.onnx") out.opset = o.version();
  }
  if (out.opset < kMinImportOpset || out.opset > kMaxImportOpset) {
    Fail(anvil::detail::StrCat("opset ", out.opset, " of the default domain is not supported: expected ",
                               kMinImportOpset, " to ", kMaxImportOpset, " (re-export the model with one of them)"));
  }
  if (g.node_size() > 100000) Fail(anvil::detail::StrCat("the graph has ", g.node_size(), " nodes, over 100000"));
  // Every operator known, or all unknown ones listed with their nodes.
  std::map<std::string, std::vector<std::string>> unknown;
  std::set<std::string> used;
  for (const auto& n : g.node()) {
    const bool default_domain = n.domain().empty() || n.domain() == "ai.onnx";
    const std::string op = default_domain ? n.op_type() : n.domain() + "::" + n.op_type();
    if (!default_domain || !Ops().count(n.op_type())) {
      unknown[op].push_back(n.name().empty() ? "(unnamed)" : n.name());
    } else {
      used.insert(op);
    }
  }
  if (!unknown.empty()) {
    std::string list;
    for (const auto& [op, nodes] : unknown) {
      list += (list.empty() ? "" : "; ") + op + " (node";
      list += nodes.size() > 1 ? "s " : " ";
      for (size_t i = 0; i < nodes.size() && i < 5; ++i) list += (i ? ", " : "") + nodes[i];
      if (nodes.size() > 5) list += ", ...";
      list += ")";
    }
    Fail("unsupported operators: " + list + ". Supported: " + [] {
      std::string s;
      for (const std::string& n : importable_operators()) s += (s.empty() ? "" : ", ") + n;
      return s;
    }());
  }
  // Values are defined before they are read: the nodes' order is a topological one.
  std::set<std::string> defined;
  for (const auto& init : g.initializer()) {
    if (!defined.insert(init.name()).second) Fail("initializer \"" + init.name() + "\" is defined twice");
  }
  std::vector<const pb::ValueInfoProto*> inputs;
  for (const auto& in : g.input()) {
    if (!defined.count(in.name())) inputs.push_back(&in);
    defined.insert(in.name());
  }
  if (inputs.size() != 1) {
    std::string names;
    for (const auto* in : inputs) names += (names.empty() ? "" : ", ") + in->name();
    Fail(anvil::detail::StrCat("a served model takes one input; this graph takes ", inputs.size(),
                               names.empty() ? "" : " (" + names + ")"));
  }
  for (const auto& n : g.node()) {
    for (const std::string& i : n.input()) {
      if (!i.empty() && !defined.count(i)) {
        Fail("node \"" + n.name() + "\" (" + n.op_type() + ") reads \"" + i +
             "\", which no input, initializer or earlier node makes (the nodes are not in topological order, form a "
             "cycle, or an initializer is missing)");
      }
    }
    // A node that makes nothing is malformed (the operators' code writes their first output slot;
    // a recurrent node may leave Y unnamed and give only Y_h).
    if (std::none_of(n.output().begin(), n.output().end(), [](const std::string& o) { return !o.empty(); }))
      Fail("node \"" + n.name() + "\" (" + n.op_type() + ") names no output");
    for (const std::string& o : n.output()) {
      if (!o.empty() && !defined.insert(o).second)
        Fail("value \"" + o + "\" is made twice (node \"" + n.name() + "\")");
    }
  }
  if (g.output_size() < 1 || !defined.count(g.output(0).name())) Fail("the graph's output is not made by any node");
  // The input's signature.
  const auto& type = inputs[0]->type();
  if (!type.has_tensor_type()) Fail("input \"" + inputs[0]->name() + "\" is not a tensor");
  out.input.name = inputs[0]->name();
  out.input.dtype = DType(type.tensor_type().elem_type(), "input \"" + inputs[0]->name() + "\"");
  if (out.input.dtype != kFloat32 && out.input.dtype != kInt64) {
    Fail("input \"" + out.input.name + "\" is " + std::string(dtype_name(out.input.dtype)) +
         "; float32 or int64 inputs are served");
  }
  const auto& dims = type.tensor_type().shape().dim();
  if (dims.size() < 1) Fail("input \"" + out.input.name + "\" has no batch dim (rank 0)");
  // ONNX's dims are a size (>= 0) or a name; -1 is neither, and would be taken for "any size".
  auto check_dims = [](const auto& ds, const std::string& what) {
    for (int d = 0; d < ds.size(); ++d) {
      if (ds[d].has_dim_value() && ds[d].dim_value() < 0) {
        Fail(anvil::detail::StrCat(what, ": dim ", d, " is ", ds[d].dim_value(),
                                   "; expected a size >= 0 or a named (symbolic) dim"));
      }
    }
  };
  check_dims(dims, "input \"" + out.input.name + "\"");
  check_dims(g.output(0).type().tensor_type().shape().dim(), "output \"" + g.output(0).name() + "\"");
  for (int d = 0; d < dims.size(); ++d) {
    out.symbolic_dims.push_back(dims[d].has_dim_param() ? dims[d].dim_param() : "");
    if (d > 0) out.input.shape.push_back(dims[d].has_dim_value() ? dims[d].dim_value() : -1);
  }
  out.output_name = g.output(0).name();
  const auto& odims = g.output(0).type().tensor_type().shape().dim();
  for (int d = 1; d < odims.size(); ++d)
    out.output_shape.push_back(odims[d].has_dim_value() ? odims[d].dim_value() : -1);
  out.producer = model.producer_name() + (model.producer_version().empty() ? "" : " " + model.producer_version());
  for (const auto& p : model.metadata_props()) out.metadata.emplace_back(p.key(), p.value());
  out.operators.assign(used.begin(), used.end());
  auto graph = std::make_shared<OnnxGraph>(g, out.opset);
  out.int8_layers = graph->fused();
  out.module = graph;
  return out;
}

}  // namespace anvil::onnx
