// The Anvil binding of each golden case family (see bindings.h and make_golden.py, whose
// functions write the cases these run).
#include "tests/conformance/bindings.h"

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include "core/nn/nn.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/quant/choose_qparams.h"
#include "core/quant/histogram_observer.h"
#include "core/quant/observer.h"
#include "core/quant/qtensor.h"
#include "core/quant/quantize.h"
#include "core/quant/quantized_layers.h"

namespace anvil::conformance {
namespace {

using json = nlohmann::json;
namespace F = nn::functional;

Result One(Tensor t) { return Result{{std::move(t)}, {}}; }

[[noreturn]] void NoBinding(const std::string& what) {
  throw BindingError("the conformance bindings do not know " + what);
}

// A Python number from the attributes, as the Scalar PyTorch's call received: its kind
// ("int", "float", "bool") decides type promotion.
double Num(const json& v);

Scalar ScalarOf(const json& v, const std::string& kind) {
  if (v.is_string()) return Scalar(Num(v));  // inf, -inf, nan
  if (kind == "bool" || v.is_boolean()) return Scalar(v.get<bool>());
  if (kind == "int" || (kind.empty() && v.is_number_integer())) return Scalar(v.get<int64_t>());
  return Scalar(v.get<double>());
}

// A number that may be infinite or NaN (JSON has neither: make_golden.py sends "inf").
double Num(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    return std::numeric_limits<double>::quiet_NaN();
  }
  return v.get<double>();
}

std::string Kind(const json& a) { return a.contains("kind") ? a.at("kind").get<std::string>() : std::string(); }

ScalarType DtypeOf(const std::string& name) {
  static const std::map<std::string, ScalarType> names = {
      {"bool", kBool},   {"uint8", kUInt8},     {"int8", kInt8},         {"int16", kInt16},     {"int32", kInt32},
      {"int64", kInt64}, {"float16", kFloat16}, {"bfloat16", kBFloat16}, {"float32", kFloat32}, {"float64", kFloat64}};
  const auto it = names.find(name);
  if (it == names.end()) NoBinding("the dtype " + name);
  return it->second;
}

IntArray Dims(const json& v) {
  IntArray d;
  if (v.is_null()) return d;
  for (const auto& x : v) d.push_back(x.get<int64_t>());
  return d;
}

F::Reduction ReductionOf(const json& a) {
  const std::string r = a.at("reduction").get<std::string>();
  if (r == "none") return F::Reduction::kNone;
  if (r == "sum") return F::Reduction::kSum;
  return F::Reduction::kMean;
}

std::optional<Scalar> OptScalar(const json& v, const std::string& kind) {
  if (v.is_null()) return std::nullopt;
  return ScalarOf(v, kind);
}

// ---- element-wise ----

Tensor Unary(const std::string& op, const Tensor& x) {
  // Every row whose function the table generates, and square (composed).
  static const std::map<std::string, Tensor (*)(const Tensor&)> fns = {
#define ANVIL_BIND_FnMethod(name) {#name, static_cast<Tensor (*)(const Tensor&)>(&name)},
#define ANVIL_BIND_FnMethodInplace ANVIL_BIND_FnMethod
#define ANVIL_BIND_FnDim(name)
#define ANVIL_BIND_Hand(name)
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, ...) ANVIL_BIND_##api(name)
#include "core/ops/op_table.def"
#undef ANVIL_OP
#undef ANVIL_BIND_FnMethodInplace
#undef ANVIL_BIND_FnMethod
#undef ANVIL_BIND_FnDim
#undef ANVIL_BIND_Hand
      {"square", square}};
  const auto it = fns.find(op);
  if (it == fns.end()) NoBinding("the unary op " + op);
  return it->second(x);
}

Tensor Binary(const std::string& op, const Tensor& a, const Tensor& b) {
  static const std::map<std::string, Tensor (*)(const Tensor&, const Tensor&)> fns = {{"mul", mul},
                                                                                      {"div", div},
                                                                                      {"maximum", maximum},
                                                                                      {"minimum", minimum},
                                                                                      {"remainder", remainder},
                                                                                      {"atan2", atan2},
                                                                                      {"eq", eq},
                                                                                      {"ne", ne},
                                                                                      {"lt", lt},
                                                                                      {"le", le},
                                                                                      {"gt", gt},
                                                                                      {"ge", ge},
                                                                                      {"logical_and", logical_and},
                                                                                      {"logical_or", logical_or},
                                                                                      {"logical_xor", logical_xor},
                                                                                      {"fmax", fmax},
                                                                                      {"fmin", fmin},
                                                                                      {"fmod", fmod},
                                                                                      {"floor_divide", floor_divide}};
  if (op == "add") return add(a, b);
  if (op == "sub") return sub(a, b);
  if (op == "pow") return pow(a, b);
  const auto it = fns.find(op);
  if (it == fns.end()) NoBinding("the binary op " + op);
  return it->second(a, b);
}

Tensor BinaryScalar(const std::string& op, const Tensor& a, const Scalar& s) {
  if (op == "add") return a + s;
  if (op == "sub") return a - s;
  if (op == "mul") return a * s;
  if (op == "div") return a / s;
  NoBinding("the binary op " + op + " with a Python number");
}

Result Activation(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string op = a.at("op").get<std::string>();
  if (op == "silu") return One(silu(in[0]));
  if (op == "gelu")
    return One(gelu(in[0], a.contains("approximate") ? a.at("approximate").get<std::string>() : "none"));
  if (op == "leaky_relu") return One(leaky_relu(in[0], a.at("slope").get<double>()));
  if (op == "elu") return One(elu(in[0], a.at("alpha").get<double>()));
  if (op == "softplus") return One(softplus(in[0], a.at("beta").get<double>(), a.at("threshold").get<double>()));
  NoBinding("the activation " + op);
}

// ---- reductions ----

Result Reduce(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string op = a.at("op").get<std::string>();
  const Tensor& x = in[0];
  const bool all_dims = a.at("dim").is_null();
  const IntArray dims = Dims(a.at("dim"));
  const bool keep = a.value("keepdim", false);
  if (op == "sum") return One(sum(x, dims, keep));
  if (op == "mean") return One(mean(x, dims, keep));
  if (op == "prod") return One(prod(x, dims, keep));
  if (op == "amax") return One(amax(x, dims, keep));
  if (op == "amin") return One(amin(x, dims, keep));
  if (op == "logsumexp") {
    IntArray d = dims;
    if (all_dims) {
      for (int64_t i = 0; i < x.dim(); ++i) d.push_back(i);
    }
    return One(logsumexp(x, d, keep));
  }
  if (op == "var") return One(var(x, dims, a.at("correction").get<int64_t>(), keep));
  if (op == "std") return One(anvil::std(x, dims, a.at("correction").get<int64_t>(), keep));
  if (op == "norm") return One(norm(x, Num(a.at("p")), dims, keep));
  if (op == "all") return One(all(x, dims, keep));
  if (op == "any") return One(any(x, dims, keep));
  if (op == "argmax" || op == "argmin") {
    const std::optional<int64_t> d = all_dims ? std::nullopt : std::optional<int64_t>(dims[0]);
    return One(op == "argmax" ? argmax(x, d, keep) : argmin(x, d, keep));
  }
  if (op == "max_dim" || op == "min_dim") {
    auto [v, i] = op == "max_dim" ? max(x, dims[0], keep) : min(x, dims[0], keep);
    return Result{{v, i}, {}};
  }
  if (op == "max_all") return One(max(x));
  if (op == "min_all") return One(min(x));
  if (op == "cumsum") return One(cumsum(x, dims[0]));
  if (op == "cumprod") return One(cumprod(x, dims[0]));
  if (op == "kthvalue") {
    auto [v, i] = kthvalue(x, a.at("k").get<int64_t>(), dims[0], keep);
    return Result{{v, i}, {}};
  }
  if (op == "median_dim") {
    auto [v, i] = median(x, dims[0], keep);
    return Result{{v, i}, {}};
  }
  if (op == "median_all") return One(median(x));
  NoBinding("the reduction " + op);
}

// ---- losses ----

Result Loss(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string op = a.at("op").get<std::string>();
  const F::Reduction r = ReductionOf(a);
  if (op == "mse_loss") return One(F::mse_loss(in[0], in[1], r));
  if (op == "l1_loss") return One(F::l1_loss(in[0], in[1], r));
  if (op == "smooth_l1_loss") return One(F::smooth_l1_loss(in[0], in[1], r, a.at("beta").get<double>()));
  if (op == "huber_loss") return One(F::huber_loss(in[0], in[1], r, a.at("delta").get<double>()));
  if (op == "soft_margin_loss") return One(F::soft_margin_loss(in[0], in[1], r));
  if (op == "cosine_embedding_loss") {
    return One(F::cosine_embedding_loss(in[0], in[1], in[2], a.value("margin", 0.0), r));
  }
  if (op == "margin_ranking_loss") {
    return One(F::margin_ranking_loss(in[0], in[1], in[2], a.value("margin", 0.0), r));
  }
  if (op == "poisson_nll_loss") {
    return One(F::poisson_nll_loss(in[0], in[1], a.at("log_input").get<bool>(), a.at("full").get<bool>(),
                                   a.value("eps", 1e-8), r));
  }
  NoBinding("the loss " + op);
}

Result CrossEntropy(const Case& c, const std::vector<Tensor>& in, bool nll) {
  const json& a = c.attrs();
  F::CrossEntropyOptions o;
  o.reduction = ReductionOf(a);
  o.label_smoothing = a.value("label_smoothing", 0.0);
  if (a.value("weight", false)) o.weight = in[2];
  return One(nll ? F::nll_loss(in[0], in[1], o) : F::cross_entropy(in[0], in[1], o));
}

Result KlDiv(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string r = a.at("reduction").get<std::string>();
  const F::KLReduction kr = r == "none"   ? F::KLReduction::kNone
                            : r == "sum"  ? F::KLReduction::kSum
                            : r == "mean" ? F::KLReduction::kMean
                                          : F::KLReduction::kBatchMean;
  return One(F::kl_div(in[0], in[1], kr, a.at("log_target").get<bool>()));
}

// ---- nn layers: built from the case's attributes, PyTorch's state dict loaded by name ----

// Pooling options as PyTorch's keyword arguments name them (each optional but the kernel).
F::Pool2dParams PoolParams(const json& a) {
  const auto pair = [&](const char* key, int64_t fallback) {
    if (!a.contains(key)) return std::array<int64_t, 2>{fallback, fallback};
    return std::array<int64_t, 2>{a.at(key)[0].get<int64_t>(), a.at(key)[1].get<int64_t>()};
  };
  F::Pool2dParams p;
  p.kernel = pair("kernel", 0);
  p.stride = pair("stride", 0);
  p.padding = pair("padding", 0);
  p.dilation = pair("dilation", 1);
  p.ceil_mode = a.value("ceil_mode", false);
  p.count_include_pad = a.value("count_include_pad", true);
  if (a.contains("divisor_override") && !a.at("divisor_override").is_null())
    p.divisor_override = a.at("divisor_override").get<int64_t>();
  return p;
}

F::MaxUnpool2dParams UnpoolParams(const json& a) {
  const F::Pool2dParams p = PoolParams(a);
  F::MaxUnpool2dParams u{p.kernel, p.stride, p.padding, std::nullopt};
  if (a.contains("output_size") && !a.at("output_size").is_null())
    u.output_size = a.at("output_size").get<std::vector<int64_t>>();
  return u;
}

// BatchNorm over several batches: the case's state dict, `steps` training batches, one in
// eval mode; the outputs, then the running statistics; parameter gradients of every output.
Result BatchNormSteps(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const int64_t features = a.at("features").get<int64_t>(), steps = a.at("steps").get<int64_t>();
  const std::optional<double> momentum =
      a.at("momentum").is_null() ? std::nullopt : std::optional<double>(a.at("momentum").get<double>());
  const bool track = a.at("track").get<bool>();
  std::shared_ptr<nn::BatchNorm> bn;
  if (a.at("type").get<std::string>() == "BatchNorm2d")
    bn = std::make_shared<nn::BatchNorm2d>(features, 1e-5, momentum, true, track);
  else
    bn = std::make_shared<nn::BatchNorm1d>(features, 1e-5, momentum, true, track);
  nn::StateDict state;
  for (const auto& key : c.meta.at("extra")) {
    const std::string k = key.get<std::string>();
    if (k.rfind("state.", 0) == 0) state.tensors.emplace_back(k.substr(6), c.get("x." + k));
  }
  bn->load_state_dict(state, /*strict=*/true);
  Result r;
  bn->train(true);
  for (int64_t t = 0; t < steps; ++t) r.outputs.push_back(bn->forward(in[static_cast<size_t>(t)]));
  bn->train(false);
  r.outputs.push_back(bn->forward(in[static_cast<size_t>(steps)]));
  const std::vector<Tensor> ys = r.outputs;
  if (track) r.outputs.insert(r.outputs.end(), {bn->running_mean, bn->running_var, bn->num_batches_tracked});
  std::vector<Tensor> ones_each;
  for (const Tensor& y : ys) ones_each.push_back(ones_like(y));
  const std::vector<Tensor> g = autograd::grad(ys, {bn->weight, bn->bias}, ones_each, /*retain_graph=*/true);
  r.extra.push_back({"gradient of parameter weight", g[0], c.get("x.pgrad.weight")});
  r.extra.push_back({"gradient of parameter bias", g[1], c.get("x.pgrad.bias")});
  return r;
}

std::shared_ptr<nn::Module> MakeModule(const json& a) {
  using A2 = std::array<int64_t, 2>;
  const std::string type = a.at("type").get<std::string>();
  const auto pair = [&](const char* key) { return A2{a.at(key)[0].get<int64_t>(), a.at(key)[1].get<int64_t>()}; };
  if (type == "Linear") {
    return std::make_shared<nn::Linear>(a.at("in").get<int64_t>(), a.at("out").get<int64_t>(),
                                        a.at("bias").get<bool>());
  }
  if (type == "Conv2d") {
    nn::ConvOptions o;
    o.stride = pair("stride");
    o.padding = pair("padding");
    o.dilation = pair("dilation");
    o.groups = a.at("groups").get<int64_t>();
    o.bias = a.at("bias").get<bool>();
    return std::make_shared<nn::Conv2d>(a.at("in").get<int64_t>(), a.at("out").get<int64_t>(), pair("kernel"), o);
  }
  if (type == "Conv1d") {
    nn::Conv1dOptions o;
    o.stride = a.at("stride").get<int64_t>();
    o.padding = a.at("padding").get<int64_t>();
    o.dilation = a.at("dilation").get<int64_t>();
    o.groups = a.at("groups").get<int64_t>();
    o.bias = a.at("bias").get<bool>();
    return std::make_shared<nn::Conv1d>(a.at("in").get<int64_t>(), a.at("out").get<int64_t>(),
                                        a.at("kernel").get<int64_t>(), o);
  }
  if (type == "BatchNorm2d") return std::make_shared<nn::BatchNorm2d>(a.at("features").get<int64_t>());
  if (type == "BatchNorm1d") return std::make_shared<nn::BatchNorm1d>(a.at("features").get<int64_t>());
  if (type == "LayerNorm") return std::make_shared<nn::LayerNorm>(Dims(a.at("shape")));
  if (type == "GroupNorm") {
    return std::make_shared<nn::GroupNorm>(a.at("groups").get<int64_t>(), a.at("channels").get<int64_t>());
  }
  if (type == "Embedding") {
    const std::optional<double> max_norm =
        a.contains("max_norm") ? std::optional<double>(Num(a.at("max_norm"))) : std::nullopt;
    const std::optional<int64_t> padding_idx =
        a.at("padding_idx").is_null() ? std::nullopt : std::optional<int64_t>(a.at("padding_idx").get<int64_t>());
    return std::make_shared<nn::Embedding>(a.at("num").get<int64_t>(), a.at("dim").get<int64_t>(), padding_idx,
                                           max_norm, a.value("norm_type", 2.0));
  }
  if (type == "MaxPool2d") {
    if (a.contains("dilation")) return std::make_shared<nn::MaxPool2d>(PoolParams(a));
    if (a.value("ceil_mode", false))
      return std::make_shared<nn::MaxPool2d>(pair("kernel"), pair("stride"), pair("padding"), true);
    return std::make_shared<nn::MaxPool2d>(pair("kernel"), pair("stride"), pair("padding"));
  }
  if (type == "AvgPool2d") {
    if (a.contains("divisor_override")) return std::make_shared<nn::AvgPool2d>(PoolParams(a));
    return std::make_shared<nn::AvgPool2d>(pair("kernel"), pair("stride"), pair("padding"),
                                           a.at("count_include_pad").get<bool>());
  }
  if (type == "AdaptiveAvgPool2d") return std::make_shared<nn::AdaptiveAvgPool2d>(pair("size"));
  if (type == "Dropout") return std::make_shared<nn::Dropout>(a.at("p").get<double>());
  if (type == "ReLU") return std::make_shared<nn::ReLU>();
  if (type == "GELU") return std::make_shared<nn::GELU>();
  if (type == "SiLU") return std::make_shared<nn::SiLU>();
  if (type == "Tanh") return std::make_shared<nn::Tanh>();
  if (type == "Sigmoid") return std::make_shared<nn::Sigmoid>();
  if (type == "Hardswish") return std::make_shared<nn::Hardswish>();
  if (type == "LeakyReLU") return std::make_shared<nn::LeakyReLU>(a.at("slope").get<double>());
  if (type == "Softmax") return std::make_shared<nn::Softmax>(a.at("dim").get<int64_t>());
  if (type == "LogSoftmax") return std::make_shared<nn::LogSoftmax>(a.at("dim").get<int64_t>());
  if (type == "Flatten") return std::make_shared<nn::Flatten>();
  if (type == "Identity") return std::make_shared<nn::Identity>();
  if (type == "Sequential") {
    return std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
        std::make_shared<nn::Linear>(4, 6), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(6, 2)});
  }
  if (type == "LSTM" || type == "GRU" || type == "RNN") {
    nn::RNNOptions o;
    o.num_layers = a.at("layers").get<int64_t>();
    o.batch_first = a.at("batch_first").get<bool>();
    const int64_t in = a.at("in").get<int64_t>(), hidden = a.at("hidden").get<int64_t>();
    if (type == "LSTM") return std::make_shared<nn::LSTM>(in, hidden, o);
    if (type == "RNN") return std::make_shared<nn::RNN>(in, hidden, o);
    return std::make_shared<nn::GRU>(in, hidden, o);
  }
  if (type == "TransformerEncoderLayer") {
    nn::TransformerEncoderOptions o;
    o.dim_feedforward = a.at("ff").get<int64_t>();
    o.dropout = 0.0;
    o.batch_first = true;
    o.norm_first = a.at("norm_first").get<bool>();
    o.gelu = a.at("gelu").get<bool>();
    return std::make_shared<nn::TransformerEncoderLayer>(a.at("dim").get<int64_t>(), a.at("heads").get<int64_t>(), o);
  }
  if (type == "MultiheadAttention") {
    return std::make_shared<nn::MultiheadAttention>(a.at("dim").get<int64_t>(), a.at("heads").get<int64_t>(), 0.0,
                                                    a.value("batch_first", true));
  }
  NoBinding("the module " + type);
}

// The gradients of every parameter of `m` for upstream gradients `gouts` of `outs`, as checks
// against PyTorch's pgrad.<name> (a parameter PyTorch lacks is a failure too).
void CheckParameterGrads(const Case& c, nn::Module& m, const std::vector<Tensor>& outs,
                         const std::vector<Tensor>& gouts, Result& r) {
  std::vector<Tensor> params;
  std::vector<std::string> names;
  for (const auto& [name, p] : m.named_parameters()) {
    params.push_back(p);
    names.push_back(name);
  }
  const std::vector<Tensor> grads = autograd::grad(outs, params, gouts, /*retain_graph=*/true, false, true);
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string key = "pgrad." + names[i];
    if (!c.has(key)) {
      r.extra.push_back({"parameter " + names[i] + " (PyTorch has no such parameter)", Tensor(), Tensor()});
      continue;
    }
    r.extra.push_back(
        {"gradient of parameter " + names[i], grads[i].defined() ? grads[i] : zeros_like(params[i]), c.get(key)});
  }
}

Result Module(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  std::shared_ptr<nn::Module> m = MakeModule(a);
  // PyTorch's state dict, every key by PyTorch's name: strict loading fails on any mismatch.
  nn::StateDict state;
  for (const auto& key : c.meta.at("extra"))
    state.tensors.emplace_back(key.get<std::string>(), c.get("x." + key.get<std::string>()));
  m->load_state_dict(state, /*strict=*/true);
  m->train(a.at("train").get<bool>());
  Result r;
  const std::string type = a.at("type").get<std::string>();
  if (type == "LSTM" || type == "GRU" || type == "RNN") {
    auto* rnn = dynamic_cast<nn::RNNBase*>(m.get());
    nn::RNNOutput o = rnn->forward_all(in[0]);
    r.outputs = {o.output, o.h_n};
    if (o.c_n.defined()) r.outputs.push_back(o.c_n);
  } else if (type == "MultiheadAttention" && a.contains("need_weights")) {
    // Inputs: query, key, value, then key_padding_mask and attn_mask where the case has them.
    auto* mha = dynamic_cast<nn::MultiheadAttention*>(m.get());
    size_t next = 3;
    const Tensor kpm = a.at("kpm").get<bool>() ? in.at(next++) : Tensor();
    const Tensor mask = a.at("attn_mask").get<bool>() ? in.at(next++) : Tensor();
    auto [out, weights] = mha->forward(in[0], in[1], in[2], kpm, a.at("need_weights").get<bool>(), mask,
                                       a.at("average_attn_weights").get<bool>());
    r.outputs = {out};
    if (weights.defined()) r.outputs.push_back(weights);
  } else if (type == "MaxPool2d" && a.value("return_indices", false)) {
    auto [out, indices] = dynamic_cast<nn::MaxPool2d*>(m.get())->forward_with_indices(in[0]);
    r.outputs = {out, indices};
  } else if (type == "MultiheadAttention") {
    auto* mha = dynamic_cast<nn::MultiheadAttention*>(m.get());
    r.outputs = {mha->attend(in[0], in[1], in[2], a.value("mask", false) ? in[3] : Tensor())};
  } else {
    r.outputs = {m->forward(in[0])};
  }
  // Parameter gradients of sum(output 0) (PyTorch: output[0].backward(ones)).
  if (c.meta.contains("param_grads")) CheckParameterGrads(c, *m, {r.outputs[0]}, {ones_like(r.outputs[0])}, r);
  return r;
}

// ---- recurrent layers (group rnn2): every option, initial states, every gradient ----

// nn.RNN / LSTM / GRU from the case's attributes with PyTorch's state dict loaded strictly by
// its key names (weight_ih_l1_reverse, ...); inputs x and optionally h0 (and c0); outputs
// output, h_n (and c_n); the parameters' gradients for the case's upstream gradients of every
// output, against PyTorch's pgrad.<name>.
Result Recurrent(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  nn::RNNOptions o;
  o.num_layers = a.at("layers").get<int64_t>();
  o.batch_first = a.at("batch_first").get<bool>();
  o.bidirectional = a.at("bidirectional").get<bool>();
  o.bias = a.at("bias").get<bool>();
  o.dropout = a.at("dropout").get<double>();
  o.nonlinearity = a.at("nonlinearity").get<std::string>();
  o.proj_size = a.value("proj_size", int64_t{0});
  const std::string type = a.at("type").get<std::string>();
  const int64_t input_size = a.at("in").get<int64_t>(), hidden = a.at("hidden").get<int64_t>();
  std::shared_ptr<nn::RNNBase> m;
  if (type == "LSTM") {
    m = std::make_shared<nn::LSTM>(input_size, hidden, o);
  } else if (type == "GRU") {
    m = std::make_shared<nn::GRU>(input_size, hidden, o);
  } else if (type == "RNN") {
    m = std::make_shared<nn::RNN>(input_size, hidden, o);
  } else {
    NoBinding("the recurrent layer " + type);
  }
  nn::StateDict state;
  for (const auto& key : c.meta.at("extra"))
    state.tensors.emplace_back(key.get<std::string>(), c.get("x." + key.get<std::string>()));
  m->load_state_dict(state, /*strict=*/true);
  m->train(a.at("train").get<bool>());
  if (a.value("quantize_dynamic", false)) {  // group qlayers: the int8 dynamic LSTM / GRU
    quant::QConfig q;
    q.per_channel_weights = a.at("per_channel").get<bool>();
    quant::quantize_dynamic(*m, q);
  }
  const nn::RNNOutput o_all = m->forward_all(in[0], in.size() > 1 ? in[1] : Tensor(), in.size() > 2 ? in[2] : Tensor());
  Result r;
  r.outputs = {o_all.output, o_all.h_n};
  if (o_all.c_n.defined()) r.outputs.push_back(o_all.c_n);
  if (!c.meta.contains("param_grads")) return r;
  std::vector<Tensor> outs, gouts;
  for (const auto& i : c.meta.at("gout_of")) {
    const size_t k = i.get<size_t>();
    if (k >= r.outputs.size()) return r;  // the output count is compared (and reported) after the call
    outs.push_back(r.outputs[k]);
    gouts.push_back(c.get("gout" + std::to_string(k)));
  }
  CheckParameterGrads(c, *m, outs, gouts, r);
  return r;
}

// One step of nn::RNNCell / GRUCell / LSTMCell with PyTorch's state dict: h' (and c'), and
// every parameter's gradient for the case's upstream gradients.
Result Cell(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string type = a.at("type").get<std::string>();
  const int64_t input_size = a.at("in").get<int64_t>(), hidden = a.at("hidden").get<int64_t>();
  const bool bias = a.at("bias").get<bool>();
  const Tensor h = in.size() > 1 ? in[1] : Tensor();
  std::shared_ptr<nn::Module> m;
  Result r;
  nn::StateDict state;
  for (const auto& key : c.meta.at("extra"))
    state.tensors.emplace_back(key.get<std::string>(), c.get("x." + key.get<std::string>()));
  if (type == "LSTMCell") {
    auto cell = std::make_shared<nn::LSTMCell>(input_size, hidden, bias);
    cell->load_state_dict(state, /*strict=*/true);
    auto [h_next, c_next] =
        cell->forward(in[0], in.size() > 2 ? std::optional<std::tuple<Tensor, Tensor>>({in[1], in[2]}) : std::nullopt);
    r.outputs = {h_next, c_next};
    m = cell;
  } else if (type == "GRUCell") {
    auto cell = std::make_shared<nn::GRUCell>(input_size, hidden, bias);
    cell->load_state_dict(state, /*strict=*/true);
    r.outputs = {cell->forward(in[0], h)};
    m = cell;
  } else if (type == "RNNCell") {
    auto cell = std::make_shared<nn::RNNCell>(input_size, hidden, bias, a.at("nonlinearity").get<std::string>());
    cell->load_state_dict(state, /*strict=*/true);
    r.outputs = {cell->forward(in[0], h)};
    m = cell;
  } else {
    NoBinding("the recurrent cell " + type);
  }
  if (!c.meta.contains("param_grads")) return r;
  std::vector<Tensor> outs, gouts;
  for (const auto& i : c.meta.at("gout_of")) {
    const size_t k = i.get<size_t>();
    if (k >= r.outputs.size()) return r;
    outs.push_back(r.outputs[k]);
    gouts.push_back(c.get("gout" + std::to_string(k)));
  }
  CheckParameterGrads(c, *m, outs, gouts, r);
  return r;
}

// The Transformer layers and stacks with PyTorch's state dict: inputs in PyTorch's call order
// (encoder layer/stack: src, mask, key padding mask; decoder layer: tgt, memory, tgt_mask,
// memory_mask, tgt and memory key padding masks; decoder stack: tgt, memory, tgt_mask).
Result Transformer(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string type = a.at("type").get<std::string>();
  nn::TransformerEncoderOptions o;
  o.dim_feedforward = a.at("ff").get<int64_t>();
  o.dropout = 0.0;
  o.norm_first = a.at("norm_first").get<bool>();
  o.gelu = a.at("gelu").get<bool>();
  o.batch_first = a.at("batch_first").get<bool>();
  const int64_t E = a.at("dim").get<int64_t>(), heads = a.at("heads").get<int64_t>();
  auto arg = [&](size_t i) { return i < in.size() ? in[i] : Tensor(); };
  std::shared_ptr<nn::Module> m;
  std::function<Tensor()> run;
  if (type == "TransformerEncoderLayer") {
    auto l = std::make_shared<nn::TransformerEncoderLayer>(E, heads, o);
    run = [l, arg] { return l->forward(arg(0), arg(1), arg(2)); };
    m = l;
  } else if (type == "TransformerDecoderLayer") {
    auto l = std::make_shared<nn::TransformerDecoderLayer>(E, heads, o);
    run = [l, arg] { return l->forward(arg(0), arg(1), arg(2), arg(3), arg(4), arg(5)); };
    m = l;
  } else if (type == "TransformerEncoder") {
    auto l = std::make_shared<nn::TransformerEncoder>(E, heads, a.at("layers").get<int64_t>(), o,
                                                      a.at("final_norm").get<bool>());
    run = [l, arg] { return l->forward(arg(0), arg(1), arg(2)); };
    m = l;
  } else if (type == "TransformerDecoder") {
    auto l = std::make_shared<nn::TransformerDecoder>(E, heads, a.at("layers").get<int64_t>(), o,
                                                      a.at("final_norm").get<bool>());
    run = [l, arg] { return l->forward(arg(0), arg(1), arg(2)); };
    m = l;
  } else {
    NoBinding("the transformer module " + type);
  }
  nn::StateDict state;
  for (const auto& key : c.meta.at("extra"))
    state.tensors.emplace_back(key.get<std::string>(), c.get("x." + key.get<std::string>()));
  m->load_state_dict(state, /*strict=*/true);
  m->eval();
  Result r;
  r.outputs = {run()};
  if (c.meta.contains("param_grads")) CheckParameterGrads(c, *m, r.outputs, {c.get("gout0")}, r);
  return r;
}

// ---- optimizers: 10 steps from PyTorch's initial parameters with its gradients ----

optim::Options OptimOptions(const json& o) {
  optim::Options out;
  for (const auto& [k, v] : o.items()) {
    if (k == "betas") {
      out["beta1"] = v[0].get<double>();
      out["beta2"] = v[1].get<double>();
    } else if (v.is_boolean()) {
      out[k] = v.get<bool>() ? 1.0 : 0.0;
    } else {
      out[k] = v.get<double>();
    }
  }
  return out;
}

Result Optim(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  std::vector<Tensor> params;
  for (const Tensor& t : in) params.push_back(t.detach().clone().requires_grad_(true));
  const std::string type = a.at("type").get<std::string>();
  const optim::Options opts = OptimOptions(a.at("options"));
  std::unique_ptr<optim::Optimizer> opt;
  if (type == "SGD")
    opt = std::make_unique<optim::SGD>(params, opts);
  else if (type == "Adam")
    opt = std::make_unique<optim::Adam>(params, opts);
  else if (type == "AdamW")
    opt = std::make_unique<optim::AdamW>(params, opts);
  else if (type == "RMSprop")
    opt = std::make_unique<optim::RMSprop>(params, opts);
  else
    NoBinding("the optimizer " + type);
  std::vector<Tensor> rows;
  const int64_t steps = a.at("steps").get<int64_t>();
  for (int64_t t = 0; t < steps; ++t) {
    for (size_t i = 0; i < params.size(); ++i) {
      params[i].set_grad(c.get("x.g" + std::to_string(t) + "." + std::to_string(i)));
    }
    opt->step();
    std::vector<Tensor> flat;
    for (const Tensor& p : params) flat.push_back(p.detach().reshape({-1}));
    rows.push_back(cat(flat));
  }
  return One(stack(rows));
}

// ---- LR schedules: the rate (and momentum) before each of the steps ----

Result Sched(const Case& c, const std::vector<Tensor>&) {
  const json& a = c.attrs();
  const json& o = a.at("options");
  const std::string type = a.at("type").get<std::string>();
  Tensor p = zeros({1}).requires_grad_(true);
  optim::Options so{{"lr", 0.1}};
  if (!a.at("momentum").is_null()) so["momentum"] = a.at("momentum").get<double>();
  optim::SGD opt({p}, so);
  std::unique_ptr<optim::LRScheduler> s;
  if (type == "StepLR") {
    s = std::make_unique<optim::StepLR>(opt, o.at("step_size").get<int64_t>(), o.at("gamma").get<double>());
  } else if (type == "MultiStepLR") {
    std::vector<int64_t> ms;
    for (const auto& m : o.at("milestones")) ms.push_back(m.get<int64_t>());
    s = std::make_unique<optim::MultiStepLR>(opt, ms, o.at("gamma").get<double>());
  } else if (type == "CosineAnnealingWarmRestarts") {
    s = std::make_unique<optim::CosineAnnealingWarmRestarts>(opt, o.at("T_0").get<int64_t>(), o.value("T_mult", 1),
                                                             o.value("eta_min", 0.0));
  } else if (type == "LambdaLR") {
    // The lambdas the golden cases name (a C++ callable cannot travel in a file).
    const std::string fn = o.at("lambda").get<std::string>();
    std::function<double(int64_t)> f;
    if (fn == "0.95**t") f = [](int64_t t) { return std::pow(0.95, static_cast<double>(t)); };
    if (fn == "warmup5") f = [](int64_t t) { return std::min(1.0, static_cast<double>(t + 1) / 5.0); };
    if (!f) NoBinding("the LambdaLR lambda " + fn);
    s = std::make_unique<optim::LambdaLR>(opt, f);
  } else if (type == "ExponentialLR") {
    s = std::make_unique<optim::ExponentialLR>(opt, o.at("gamma").get<double>());
  } else if (type == "LinearLR") {
    s = std::make_unique<optim::LinearLR>(opt, o.value("start_factor", 1.0 / 3.0), o.value("end_factor", 1.0),
                                          o.value("total_iters", int64_t{5}));
  } else if (type == "ConstantLR") {
    s = std::make_unique<optim::ConstantLR>(opt, o.value("factor", 1.0 / 3.0), o.value("total_iters", int64_t{5}));
  } else if (type == "PolynomialLR") {
    s = std::make_unique<optim::PolynomialLR>(opt, o.value("total_iters", int64_t{5}), o.value("power", 1.0));
  } else if (type == "CosineAnnealingLR") {
    s = std::make_unique<optim::CosineAnnealingLR>(opt, o.at("T_max").get<int64_t>(), o.at("eta_min").get<double>());
  } else if (type == "OneCycleLR") {
    optim::OneCycleOptions oc;
    oc.pct_start = o.value("pct_start", 0.3);
    oc.div_factor = o.value("div_factor", 25.0);
    oc.final_div_factor = o.value("final_div_factor", 1e4);
    oc.cycle_momentum = o.value("cycle_momentum", true);
    s = std::make_unique<optim::OneCycleLR>(opt, o.at("max_lr").get<double>(), o.at("total_steps").get<int64_t>(), oc);
  } else {
    NoBinding("the schedule " + type);
  }
  const int64_t steps = a.at("steps").get<int64_t>();
  std::vector<double> lrs, moms;
  for (int64_t t = 0; t < steps; ++t) {
    lrs.push_back(opt.lr());
    const auto& g = opt.param_groups()[0].options;
    moms.push_back(g.count("momentum") ? g.at("momentum") : 0.0);
    p.set_grad(zeros({1}));
    opt.step();
    s->step();
  }
  return Result{{tensor(lrs), tensor(moms)}, {}};
}

Result Plateau(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  Tensor p = zeros({1}).requires_grad_(true);
  optim::SGD opt({p}, {{"lr", 0.1}});
  optim::ReduceLROnPlateau s(opt,
                             a.at("mode").get<std::string>() == "max" ? optim::ReduceLROnPlateau::Mode::kMax
                                                                      : optim::ReduceLROnPlateau::Mode::kMin,
                             a.at("factor").get<double>(), a.at("patience").get<int64_t>(),
                             a.at("threshold").get<double>(), a.at("cooldown").get<int64_t>(),
                             a.at("min_lr").get<double>());
  std::vector<double> lrs;
  for (double m : in[0].to_vector<double>()) {
    p.set_grad(zeros({1}));
    opt.step();
    s.step(m);
    lrs.push_back(opt.lr());
  }
  return One(tensor(lrs));
}

// ReduceLROnPlateau with PyTorch's keyword options: mode, factor, patience, threshold,
// threshold_mode, cooldown, min_lr (a number, or one per parameter group), eps. The rates of
// every group after each metric.
Result Plateau2(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  std::vector<double> min_lrs;
  double min_lr = 0.0;
  if (a.contains("min_lr") && a.at("min_lr").is_array()) {
    for (const auto& v : a.at("min_lr")) min_lrs.push_back(v.get<double>());
  } else {
    min_lr = a.value("min_lr", 0.0);
  }
  const size_t groups = min_lrs.empty() ? 1 : min_lrs.size();
  std::vector<Tensor> ps;
  std::vector<optim::ParamGroup> pg;
  for (size_t i = 0; i < groups; ++i) {
    ps.push_back(zeros({1}).requires_grad_(true));
    pg.push_back({{ps.back()}, {}});
  }
  optim::SGD opt(pg, {{"lr", 0.1}});
  using P = optim::ReduceLROnPlateau;
  P s(opt, a.value("mode", std::string("min")) == "max" ? P::Mode::kMax : P::Mode::kMin, a.value("factor", 0.1),
      a.value("patience", int64_t{10}), a.value("threshold", 1e-4), a.value("cooldown", int64_t{0}), min_lr,
      a.value("threshold_mode", std::string("rel")) == "abs" ? P::ThresholdMode::kAbs : P::ThresholdMode::kRel,
      a.value("eps", 1e-8), min_lrs);
  std::vector<double> lrs;
  for (double m : in[0].to_vector<double>()) {
    for (Tensor& p : ps) p.set_grad(zeros({1}));
    opt.step();
    s.step(m);
    for (const auto& g : opt.param_groups()) lrs.push_back(g.options.at("lr"));
  }
  return One(tensor(lrs));
}

// clip_grad_norm_ over two parameters whose gradients are the inputs: the total norm (float64
// [1]) and the gradients after.
Result ClipGradNorm(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  Tensor p1 = zeros({in[0].numel()}).requires_grad_(true), p2 = zeros({in[1].numel()}).requires_grad_(true);
  p1.set_grad(in[0].clone());
  p2.set_grad(in[1].clone());
  const double total = optim::clip_grad_norm_({p1, p2}, Num(a.at("max_norm")), Num(a.at("norm_type")), false);
  return Result{{tensor(std::vector<double>{total}), p1.grad(), p2.grad()}, {}};
}

// ---- indexing ----

std::vector<TensorIndex> IndexSpec(const json& spec, const std::vector<Tensor>& in) {
  std::vector<TensorIndex> idx;
  for (const auto& it : spec) {
    const std::string k = it.at("kind").get<std::string>();
    if (k == "int") {
      idx.emplace_back(it.at("v").get<int64_t>());
    } else if (k == "slice") {
      const auto opt = [&](const char* key) -> std::optional<int64_t> {
        if (!it.contains(key) || it.at(key).is_null()) return std::nullopt;
        return it.at(key).get<int64_t>();
      };
      idx.emplace_back(Slice(opt("start"), opt("stop"), opt("step").value_or(1)));
    } else if (k == "none") {
      idx.emplace_back(None);
    } else if (k == "ellipsis") {
      idx.emplace_back(Ellipsis);
    } else if (k == "tensor") {
      idx.emplace_back(in.at(it.at("input").get<size_t>()));
    }
  }
  return idx;
}

Result IndexGet(const Case& c, const std::vector<Tensor>& in) {
  return One(in[0].index(IndexSpec(c.attrs().at("spec"), in)));
}

Result IndexSet(const Case& c, const std::vector<Tensor>& in) {
  // Inputs: x, v, then the index tensors (input 1 of the spec is the case's input 2).
  std::vector<Tensor> shifted(in.begin() + 1, in.end());
  Tensor y = in[0].clone();
  y.index_put_(IndexSpec(c.attrs().at("spec"), shifted), in[1]);
  return One(y);
}

Tensor ApplyChain(Tensor t, const json& chain) {
  for (const auto& step : chain) {
    const std::string op = step[0].get<std::string>();
    if (op == "transpose")
      t = t.transpose(step[1].get<int64_t>(), step[2].get<int64_t>());
    else if (op == "t")
      t = t.t();
    else if (op == "narrow")
      t = t.narrow(step[1].get<int64_t>(), step[2].get<int64_t>(), step[3].get<int64_t>());
    else if (op == "select")
      t = t.select(step[1].get<int64_t>(), step[2].get<int64_t>());
    else if (op == "unsqueeze")
      t = t.unsqueeze(step[1].get<int64_t>());
    else if (op == "squeeze")
      t = t.squeeze(step[1].get<int64_t>());
    else if (op == "expand")
      t = t.expand(Dims(step[1]));
    else if (op == "view")
      t = t.view(Dims(step[1]));
    else if (op == "reshape")
      t = t.reshape(Dims(step[1]));
    else if (op == "permute")
      t = t.permute(Dims(step[1]));
    else if (op == "flatten")
      t = t.flatten(step[1].get<int64_t>());
    else if (op == "movedim")
      t = t.movedim(step[1].get<int64_t>(), step[2].get<int64_t>());
    else if (op == "unflatten")
      t = t.unflatten(step[1].get<int64_t>(), Dims(step[2]));
    else if (op == "slice")
      t = t.slice(step[1].get<int64_t>(), step[2].get<int64_t>(), step[3].get<int64_t>(), step[4].get<int64_t>());
    else if (op == "as_strided")
      t = t.as_strided(Dims(step[1]), Dims(step[2]), step[3].get<int64_t>());
    else if (op == "split")
      t = t.split(step[1].get<int64_t>(), step[2].get<int64_t>()).at(step[3].get<size_t>());
    else if (op == "chunk")
      t = t.chunk(step[1].get<int64_t>(), step[2].get<int64_t>()).at(step[3].get<size_t>());
    else
      NoBinding("the view " + op);
  }
  return t;
}

// ---- factories ----

Result Factory(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string op = a.at("op").get<std::string>();
  const std::string kind = Kind(a);
  if (op == "full") return One(full(Dims(a.at("size")), ScalarOf(a.at("value"), kind)));
  if (op == "tensor") {
    const json& v = a.at("values");
    if (kind == "int") return One(tensor(v.get<std::vector<int64_t>>()));
    if (kind == "bool") {
      std::vector<uint8_t> b;
      for (const auto& x : v) b.push_back(x.get<bool>() ? 1 : 0);
      return One(tensor(b).to(kBool));
    }
    return One(tensor(v.get<std::vector<float>>()));
  }
  if (op == "arange") {
    return One(arange(ScalarOf(a.at("start"), kind), ScalarOf(a.at("end"), kind), ScalarOf(a.at("step"), kind)));
  }
  if (op == "linspace") {
    return One(linspace(a.at("start").get<double>(), a.at("end").get<double>(), a.at("steps").get<int64_t>()));
  }
  if (op == "eye") return One(eye(a.at("n").get<int64_t>(), a.at("m").get<int64_t>()));
  if (op == "zeros") return One(zeros(Dims(a.at("size"))));
  if (op == "ones_like") return One(ones_like(in[0]));
  if (op == "full_like") return One(full_like(in[0], a.at("value").get<double>()));
  NoBinding("the factory " + op);
}

// ---- ops3: rearranging, running extremes, searches, activations and distances ----

std::optional<double> OptNum(const json& a, const char* key) {
  if (!a.contains(key) || a.at(key).is_null()) return std::nullopt;
  return Num(a.at(key));
}

Result Ops3(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string op = a.at("op").get<std::string>();
  auto pair = [](std::tuple<Tensor, Tensor> r) { return Result{{std::get<0>(r), std::get<1>(r)}, {}}; };
  if (op == "flip") return One(in[0].flip(Dims(a.at("dims"))));
  if (op == "roll") return One(in[0].roll(Dims(a.at("shifts")), Dims(a.at("dims"))));
  if (op == "tril") return One(in[0].tril(a.at("diagonal").get<int64_t>()));
  if (op == "triu") return One(triu(in[0], a.at("diagonal").get<int64_t>()));
  if (op == "diff") {
    // Inputs: x, then prepend and/or append as the attributes say.
    const bool pre = a.value("prepend", false), app = a.value("append", false);
    const Tensor prepend = pre ? in[1] : Tensor(), append = app ? in[pre ? 2 : 1] : Tensor();
    return One(in[0].diff(a.at("n").get<int64_t>(), a.at("dim").get<int64_t>(), prepend, append));
  }
  if (op == "logaddexp") return One(in[0].logaddexp(in[1]));
  if (op == "nan_to_num") {
    return One(in[0].nan_to_num(OptNum(a, "nan").value_or(0.0), OptNum(a, "posinf"), OptNum(a, "neginf")));
  }
  if (op == "count_nonzero") return One(in[0].count_nonzero(Dims(a.at("dims"))));
  if (op == "cummax") return pair(in[0].cummax(a.at("dim").get<int64_t>()));
  if (op == "cummin") return pair(cummin(in[0], a.at("dim").get<int64_t>()));
  if (op == "logit") return One(in[0].logit(OptNum(a, "eps")));
  const bool right = a.value("right", false), i32 = a.value("out_int32", false);
  if (op == "searchsorted") return One(searchsorted(in[0], in[1], i32, right));
  if (op == "bucketize") return One(bucketize(in[0], in[1], i32, right));
  if (op == "meshgrid") return Result{meshgrid(in, a.at("indexing").get<std::string>()), {}};
  if (op == "hardtanh") return One(F::hardtanh(in[0], a.value("min_val", -1.0), a.value("max_val", 1.0)));
  if (op == "relu6") return One(F::relu6(in[0]));
  if (op == "hardsigmoid") return One(F::hardsigmoid(in[0]));
  if (op == "mish") return One(F::mish(in[0]));
  if (op == "selu") return One(F::selu(in[0]));
  if (op == "celu") return One(F::celu(in[0], a.value("alpha", 1.0)));
  if (op == "softsign") return One(F::softsign(in[0]));
  if (op == "logsigmoid") return One(F::logsigmoid(in[0]));
  if (op == "hardshrink") return One(F::hardshrink(in[0], a.value("lambd", 0.5)));
  if (op == "softshrink") return One(F::softshrink(in[0], a.value("lambd", 0.5)));
  if (op == "threshold") return One(F::threshold(in[0], a.at("threshold").get<double>(), a.at("value").get<double>()));
  if (op == "glu") return One(F::glu(in[0], a.at("dim").get<int64_t>()));
  if (op == "softmin") return One(F::softmin(in[0], a.at("dim").get<int64_t>()));
  if (op == "prelu") return One(F::prelu(in[0], in[1]));
  if (op == "normalize") {
    return One(F::normalize(in[0], Num(a.at("p")), a.at("dim").get<int64_t>(), a.value("eps", 1e-12)));
  }
  if (op == "cosine_similarity") {
    return One(F::cosine_similarity(in[0], in[1], a.at("dim").get<int64_t>(), a.value("eps", 1e-8)));
  }
  if (op == "pairwise_distance") {
    return One(F::pairwise_distance(in[0], in[1], Num(a.at("p")), a.value("eps", 1e-6), a.at("keepdim").get<bool>()));
  }
  NoBinding("the ops3 op " + op);
}

// torch.quantize_per_tensor / quantize_per_channel: the integers, then the dequantized values.
Result Quantize(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const quant::QDtype dtype = quant::qdtype_from_name(a.at("dtype").get<std::string>());
  const std::string scheme = a.at("scheme").get<std::string>();
  quant::QTensor q;
  if (scheme == "per_tensor") {
    q = quant::quantize_per_tensor(in[0], a.at("scale").get<double>(), a.at("zero_point").get<int64_t>(), dtype);
  } else if (scheme == "per_channel") {
    q = quant::quantize_per_channel(in[0], in[1], in[2], a.at("axis").get<int64_t>(), dtype);
  } else {
    NoBinding("the quantization scheme " + scheme);
  }
  return Result{{q.int_repr(), quant::dequantize(q)}, {}};
}

// quantize_dynamic(Sequential(Linear)) on the case's weights, then its forward.
Result LinearDynamic(const Case& c, const std::vector<Tensor>& in) {
  auto model = std::make_shared<nn::Sequential>();
  auto lin = std::make_shared<nn::Linear>(in[1].size(1), in[1].size(0));
  {
    NoGradGuard g;
    lin->weight.copy_(in[1]);
    lin->bias.copy_(in[2]);
  }
  model->push_back(lin);
  model->eval();
  quant::QConfig q;
  q.per_channel_weights = c.attrs().at("per_channel").get<bool>();
  quant::quantize_dynamic(*model, q);
  return Result{{model->forward(in[0])}, {}};
}

// The static CNN of make_golden.py's qlayers(): fuse, prepare, calibrate, convert, forward.
// Anvil places the input's quantization itself (the first layer's input observer); PyTorch's
// model has a QuantStub there, observed alike.
Result StaticCnn(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  auto conv = std::make_shared<nn::Conv2d>(1, 4, std::array<int64_t, 2>{3, 3}, nn::ConvOptions{{1, 1}, {1, 1}});
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  auto l1 = std::make_shared<nn::Linear>(64, 16);
  auto l2 = std::make_shared<nn::Linear>(16, 10);
  {
    NoGradGuard g;
    conv->weight.copy_(in[0]);
    conv->bias.copy_(in[1]);
    bn->weight.copy_(in[2]);
    bn->bias.copy_(in[3]);
    bn->running_mean.copy_(in[4]);
    bn->running_var.copy_(in[5]);
    l1->weight.copy_(in[6]);
    l1->bias.copy_(in[7]);
    l2->weight.copy_(in[8]);
    l2->bias.copy_(in[9]);
  }
  auto model = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      conv, bn, std::make_shared<nn::ReLU>(), std::make_shared<nn::MaxPool2d>(std::array<int64_t, 2>{2, 2}),
      std::make_shared<nn::Flatten>(), l1, std::make_shared<nn::ReLU>(), l2});
  model->eval();
  quant::fuse_modules(*model);
  quant::QConfig q;
  q.activation = quant::activation_observer_from_name(a.at("observer").get<std::string>());
  q.per_channel_weights = a.at("per_channel").get<bool>();
  q.reduce_range = a.at("reduce_range").get<bool>();
  quant::prepare(*model, q);
  {
    NoGradGuard g;
    for (int64_t i = 0; i < in[10].size(0); ++i) model->forward(in[10].select(0, i));
  }
  quant::convert(*model);
  return Result{{model->forward(in[11])}, {}};
}

// The case's weights quantized with its scales (zero points 0), per channel or per tensor.
quant::QTensor CaseWeight(const Tensor& w, const Tensor& scales, bool per_channel) {
  if (per_channel) return quant::quantize_per_channel(w, scales, zeros({w.size(0)}, kInt64), 0, quant::QDtype::QInt8);
  return quant::quantize_per_tensor(w, scales.to_vector<double>()[0], 0, quant::QDtype::QInt8);
}

// A quantized layer alone with given parameters: the output's integers and values.
Result StaticLayer(const Case& c, const std::vector<Tensor>& in, bool conv) {
  const json& a = c.attrs();
  const quant::ActivationQParams qin{a.at("in_scale").get<double>(), a.at("in_zp").get<int64_t>()};
  const quant::ActivationQParams qout{a.at("out_scale").get<double>(), a.at("out_zp").get<int64_t>()};
  const bool relu = a.at("relu").get<bool>();
  quant::QTensor w = CaseWeight(in[1], in[3], a.at("per_channel").get<bool>());
  std::shared_ptr<nn::Module> layer;
  if (conv) {
    nn::ConvOptions o;
    o.stride = {a.at("stride").get<int64_t>(), a.at("stride").get<int64_t>()};
    o.padding = {a.at("padding").get<int64_t>(), a.at("padding").get<int64_t>()};
    o.dilation = {a.at("dilation").get<int64_t>(), a.at("dilation").get<int64_t>()};
    layer = std::make_shared<quant::QuantizedConv2d>(w, in[2], o, qin, qout, relu);
  } else {
    layer = std::make_shared<quant::QuantizedLinear>(w, in[2], qin, qout, relu);
  }
  const Tensor y = layer->forward(in[0]);
  // The output is on the quint8 grid: its integers are round(y / scale) + zero point.
  const Tensor ints = ((y / qout.scale).round() + static_cast<double>(qout.zero_point)).to(kUInt8);
  return Result{{ints, y}, {}};
}

Result FuseConvBn(const Case&, const std::vector<Tensor>& in) {
  nn::Conv2d conv(3, 5, {3, 3}, nn::ConvOptions{{1, 1}, {1, 1}});
  nn::BatchNorm2d bn(5);
  {
    NoGradGuard g;
    conv.weight.copy_(in[0]);
    conv.bias.copy_(in[1]);
    bn.weight.copy_(in[2]);
    bn.bias.copy_(in[3]);
    bn.running_mean.copy_(in[4]);
    bn.running_var.copy_(in[5]);
  }
  bn.eval();
  auto fused = quant::fuse_conv_bn_eval(conv, bn);
  NoGradGuard g;
  return Result{{fused->weight.detach(), fused->bias.detach(), fused->forward(in[6])}, {}};
}

// An observer over the case's batches: calculate_qparams() before any, then after each
// batch min_val, max_val (the histogram for HistogramObserver) and calculate_qparams().
Result Observer(const Case& c, const std::vector<Tensor>& in) {
  const json& a = c.attrs();
  const std::string type = a.at("type").get<std::string>();
  quant::ObserverOptions o;
  o.dtype = quant::qdtype_from_name(a.value("dtype", std::string("quint8")));
  o.qscheme = quant::qscheme_from_name(
      a.value("qscheme", std::string(type == "PerChannelMinMaxObserver" ? "per_channel_affine" : "per_tensor_affine")));
  o.reduce_range = a.value("reduce_range", false);
  if (a.contains("quant_min")) o.quant_min = a.at("quant_min").get<int64_t>();
  if (a.contains("quant_max")) o.quant_max = a.at("quant_max").get<int64_t>();
  auto scalar = [](float v) { return tensor(std::vector<float>{v}).reshape({}); };
  std::vector<Tensor> out;
  auto qparams = [&out](const quant::UniformObserver& obs) {
    const quant::QParams p = obs.calculate_qparams();
    out.push_back(p.scale);
    out.push_back(p.zero_point);
  };
  if (type == "MinMaxObserver" || type == "MovingAverageMinMaxObserver") {
    std::unique_ptr<quant::MinMaxObserver> obs;
    if (type == "MinMaxObserver") {
      obs = std::make_unique<quant::MinMaxObserver>(o);
    } else {
      obs = std::make_unique<quant::MovingAverageMinMaxObserver>(a.at("averaging_constant").get<double>(), o);
    }
    qparams(*obs);
    for (const Tensor& x : in) {
      obs->forward(x);
      out.push_back(scalar(obs->min_val()));
      out.push_back(scalar(obs->max_val()));
      qparams(*obs);
    }
  } else if (type == "PerChannelMinMaxObserver") {
    quant::PerChannelMinMaxObserver obs(a.value("ch_axis", int64_t{0}), o);
    qparams(obs);
    for (const Tensor& x : in) {
      obs.forward(x);
      out.push_back(tensor(obs.min_val()));
      out.push_back(tensor(obs.max_val()));
      qparams(obs);
    }
  } else if (type == "HistogramObserver") {
    quant::HistogramObserver obs(a.value("bins", int64_t{2048}), o);
    qparams(obs);
    for (const Tensor& x : in) {
      obs.forward(x);
      out.push_back(scalar(obs.min_val()));
      out.push_back(scalar(obs.max_val()));
      out.push_back(tensor(obs.histogram()));
      qparams(obs);
    }
  } else {
    NoBinding("the observer " + type);
  }
  return Result{out, {}};
}

std::map<std::string, Binding> Make() {
  std::map<std::string, Binding> b;
  b["binary"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(Binary(c.attrs().at("op").get<std::string>(), in[0], in[1]));
  };
  b["binary_scalar"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    return One(BinaryScalar(a.at("op").get<std::string>(), in[0], ScalarOf(a.at("scalar"), Kind(a))));
  };
  b["binary_scalar_"] = [](const Case& c, const std::vector<Tensor>& in) {  // in place, on a copy
    const json& a = c.attrs();
    const std::string op = a.at("op").get<std::string>();
    const Scalar v = ScalarOf(a.at("scalar"), Kind(a));
    Tensor x = in[0].clone();
    if (op == "add") return One(x.add_(v));
    if (op == "sub") return One(x.sub_(v));
    if (op == "mul") return One(x.mul_(v));
    if (op == "div") return One(x.div_(v));
    NoBinding("the in-place op " + op + "_ with a Python number");
  };
  b["add_alpha"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(add(in[0], in[1], ScalarOf(c.attrs().at("alpha"), Kind(c.attrs()))));
  };
  b["sub_alpha"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(sub(in[0], in[1], ScalarOf(c.attrs().at("alpha"), Kind(c.attrs()))));
  };
  b["where"] = [](const Case&, const std::vector<Tensor>& in) { return One(where(in[0], in[1], in[2])); };
  b["where_scalar"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(where(in[0], in[1], Scalar(c.attrs().at("scalar").get<double>())));
  };
  b["unary"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(Unary(c.attrs().at("op").get<std::string>(), in[0]));
  };
  b["activation"] = Activation;
  b["pow_scalar"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(pow(in[0], ScalarOf(c.attrs().at("exponent"), Kind(c.attrs()))));
  };
  b["clamp"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    return One(clamp(in[0], OptScalar(a.at("min"), Kind(a)), OptScalar(a.at("max"), Kind(a))));
  };
  b["clamp_tensor"] = [](const Case& c, const std::vector<Tensor>& in) {
    // attrs "min": false / "max": false: that bound is absent (the one given is input 1).
    const json& a = c.attrs();
    if (!a.value("min", true)) return One(clamp(in[0], Tensor(), in[1]));
    if (!a.value("max", true)) return One(clamp(in[0], in[1], Tensor()));
    return One(clamp(in[0], in[1], in[2]));
  };
  b["div_mode"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(div(in[0], in[1], c.attrs().at("mode").get<std::string>()));
  };
  b["lerp"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(lerp(in[0], in[1], c.attrs().at("weight").get<double>()));
  };
  b["addcmul"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(addcmul(in[0], in[1], in[2], c.attrs().at("value").get<double>()));
  };
  b["addcdiv"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(addcdiv(in[0], in[1], in[2], c.attrs().at("value").get<double>()));
  };
  b["to"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(in[0].to(DtypeOf(c.attrs().at("dtype").get<std::string>())));
  };
  b["reduce"] = Reduce;
  // Every row with a generated (x, dim) function.
  b["dim_op"] = [](const Case& c, const std::vector<Tensor>& in) {
    static const std::map<std::string, Tensor (*)(const Tensor&, int64_t)> fns = {
#define ANVIL_BIND_FnDim(name) {#name, static_cast<Tensor (*)(const Tensor&, int64_t)>(&name)},
#define ANVIL_BIND_Other(name)
#define ANVIL_BIND_FnMethodInplace ANVIL_BIND_Other
#define ANVIL_BIND_FnMethod ANVIL_BIND_Other
#define ANVIL_BIND_Hand ANVIL_BIND_Other
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, ...) ANVIL_BIND_##api(name)
#include "core/ops/op_table.def"
#undef ANVIL_OP
#undef ANVIL_BIND_FnDim
#undef ANVIL_BIND_Other
#undef ANVIL_BIND_FnMethodInplace
#undef ANVIL_BIND_FnMethod
#undef ANVIL_BIND_Hand
        {"softmax", [](const Tensor& x, int64_t d) { return softmax(x, d); }},
        {"log_softmax", [](const Tensor& x, int64_t d) { return log_softmax(x, d); }},
    };
    const std::string op = c.attrs().at("op").get<std::string>();
    const auto it = fns.find(op);
    if (it == fns.end()) NoBinding("the (x, dim) op " + op);
    return One(it->second(in[0], c.attrs().at("dim").get<int64_t>()));
  };
  b["sum_dtype"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(sum(in[0], {}, false, DtypeOf(c.attrs().at("dtype").get<std::string>())));
  };
  b["loss"] = Loss;
  b["bce"] = [](const Case& c, const std::vector<Tensor>& in) {
    const Tensor w = c.attrs().value("weight", false) ? in[2] : Tensor();
    return One(F::binary_cross_entropy(in[0], in[1], w, ReductionOf(c.attrs())));
  };
  b["bce_logits"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    const Tensor w = a.value("weight", false) ? in[2] : Tensor();
    const Tensor pw = a.value("pos_weight", false) ? in[2] : Tensor();
    return One(F::binary_cross_entropy_with_logits(in[0], in[1], w, pw, ReductionOf(a)));
  };
  b["cross_entropy"] = [](const Case& c, const std::vector<Tensor>& in) { return CrossEntropy(c, in, false); };
  b["nll_loss"] = [](const Case& c, const std::vector<Tensor>& in) { return CrossEntropy(c, in, true); };
  b["kl_div"] = KlDiv;
  b["module"] = Module;
  b["rnn"] = Recurrent;
  b["cell"] = Cell;
  b["transformer"] = Transformer;
  b["avg_pool2d"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(F::avg_pool2d(in[0], PoolParams(c.attrs())));
  };
  b["max_pool2d"] = [](const Case& c, const std::vector<Tensor>& in) {
    if (!c.attrs().at("return_indices").get<bool>()) return One(F::max_pool2d(in[0], PoolParams(c.attrs())));
    auto [out, indices] = F::max_pool2d_with_indices(in[0], PoolParams(c.attrs()));
    return Result{{out, indices}, {}};
  };
  b["max_unpool2d"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(F::max_unpool2d(in[0], in[1], UnpoolParams(c.attrs())));
  };
  b["pool_unpool"] = [](const Case& c, const std::vector<Tensor>& in) {
    auto [pooled, indices] = F::max_pool2d_with_indices(in[0], PoolParams(c.attrs()));
    F::MaxUnpool2dParams u = UnpoolParams(c.attrs());
    u.output_size = std::vector<int64_t>{in[0].size(-2), in[0].size(-1)};
    return One(F::max_unpool2d(pooled, indices, u));
  };
  b["batchnorm_steps"] = BatchNormSteps;
  b["pool1d"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    const std::string fn = a.at("fn").get<std::string>();
    if (fn == "adaptive") return One(F::adaptive_avg_pool1d(in[0], a.at("output_size").get<int64_t>()));
    F::Pool1dParams p;
    p.kernel = a.at("kernel_size").get<int64_t>();
    p.stride = a.value("stride", int64_t{0});
    p.padding = a.value("padding", int64_t{0});
    p.dilation = a.value("dilation", int64_t{1});
    p.ceil_mode = a.value("ceil_mode", false);
    p.count_include_pad = a.value("count_include_pad", true);
    if (fn == "max") return One(F::max_pool1d(in[0], p));
    if (fn == "avg") return One(F::avg_pool1d(in[0], p));
    if (fn != "max_indices") NoBinding("the 1-D pooling " + fn);
    auto [out, indices] = F::max_pool1d_with_indices(in[0], p);
    return Result{{out, indices}, {}};
  };
  // F.embedding(indices, weight, max_norm=...): the rows, then the weight after its in-place
  // renormalisation.
  b["embedding_renorm"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    const std::optional<int64_t> padding_idx =
        a.at("padding_idx").is_null() ? std::nullopt : std::optional<int64_t>(a.at("padding_idx").get<int64_t>());
    Tensor rows = F::embedding(in[0], in[1], padding_idx, Num(a.at("max_norm")), Num(a.at("norm_type")));
    return Result{{rows, in[1].detach().clone()}, {}};
  };
  b["optim"] = Optim;
  b["sched"] = Sched;
  b["plateau"] = Plateau;
  b["plateau2"] = Plateau2;
  b["clip_grad_norm"] = ClipGradNorm;
  b["index"] = IndexGet;
  b["index_put"] = IndexSet;
  b["index_put_acc"] = [](const Case&, const std::vector<Tensor>& in) {
    return One(index_put(in[0], {in[1]}, in[2], /*accumulate=*/true));
  };
  b["gather"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(gather(in[0], c.attrs().at("dim").get<int64_t>(), in[1]));
  };
  b["scatter"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(scatter(in[0], c.attrs().at("dim").get<int64_t>(), in[1], in[2]));
  };
  b["scatter_legacy_reduce"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(
        scatter(in[0], c.attrs().at("dim").get<int64_t>(), in[1], in[2], c.attrs().at("reduce").get<std::string>()));
  };
  b["scatter_add"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(scatter_add(in[0], c.attrs().at("dim").get<int64_t>(), in[1], in[2]));
  };
  b["scatter_reduce"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    return One(scatter_reduce(in[0], a.at("dim").get<int64_t>(), in[1], in[2], a.at("reduce").get<std::string>(),
                              a.at("include_self").get<bool>()));
  };
  b["index_select"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(index_select(in[0], c.attrs().at("dim").get<int64_t>(), in[1]));
  };
  b["index_add"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(index_add(in[0], c.attrs().at("dim").get<int64_t>(), in[1], in[2], c.attrs().at("alpha").get<double>()));
  };
  b["masked_fill"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(masked_fill(in[0], in[1], c.attrs().at("value").get<double>()));
  };
  b["masked_select"] = [](const Case&, const std::vector<Tensor>& in) { return One(masked_select(in[0], in[1])); };
  b["nonzero"] = [](const Case&, const std::vector<Tensor>& in) { return One(nonzero(in[0])); };
  b["sort"] = [](const Case& c, const std::vector<Tensor>& in) {
    auto [v, i] = sort(in[0], -1, c.attrs().at("descending").get<bool>());
    return Result{{v, i}, {}};
  };
  b["topk"] = [](const Case& c, const std::vector<Tensor>& in) {
    auto [v, i] = topk(in[0], c.attrs().at("k").get<int64_t>(), -1, c.attrs().at("largest").get<bool>());
    return Result{{v, i}, {}};
  };
  // Selections over ties: the values, and the input at the returned indices (PyTorch's CPU
  // kernels order tied indices their own way; docs/conformance.md).
  b["ties"] = [](const Case& c, const std::vector<Tensor>& in) {
    const std::string op = c.attrs().at("op").get<std::string>();
    const Tensor& x = in[0];
    std::tuple<Tensor, Tensor> r;
    if (op == "topk")
      r = topk(x, 3);
    else if (op == "topk_smallest")
      r = topk(x, 2, -1, false);
    else if (op == "kthvalue")
      r = kthvalue(x, 2, 1);
    else if (op == "median")
      r = median(x, 1);
    else
      NoBinding("the selection " + op);
    auto [v, i] = r;
    return Result{{v, gather(x, 1, i.reshape({x.size(0), -1})).reshape(i.sizes())}, {}};
  };
  b["repeat"] = [](const Case& c, const std::vector<Tensor>& in) {
    const IntArray reps = Dims(c.attrs().at("repeats"));
    return One(c.attrs().at("tile").get<bool>() ? in[0].tile(reps) : in[0].repeat(reps));
  };
  b["one_hot"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(one_hot(in[0], c.attrs().at("classes").get<int64_t>()));
  };
  b["cat"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(cat(in, c.attrs().at("dim").get<int64_t>()));
  };
  b["stack"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(stack(in, c.attrs().at("dim").get<int64_t>()));
  };
  b["pad"] = [](const Case& c, const std::vector<Tensor>& in) {
    const json& a = c.attrs();
    return One(F::pad(in[0], a.at("pads").get<std::vector<int64_t>>(), a.at("value").get<double>()));
  };
  b["view_chain"] = [](const Case& c, const std::vector<Tensor>& in) {
    return One(ApplyChain(in[0], c.attrs().at("chain")).contiguous() * 1.0);
  };
  b["view_inplace"] = [](const Case& c, const std::vector<Tensor>& in) {
    Tensor base = in[0].clone();
    Tensor v = ApplyChain(base, c.attrs().at("chain"));
    v.mul_(2.0).add_(1.0);
    return One(base);
  };
  b["factory"] = Factory;
  b["ops3"] = Ops3;
  b["quantize"] = Quantize;
  b["observer"] = Observer;
  b["linear_dynamic"] = LinearDynamic;
  b["static_cnn"] = StaticCnn;
  b["fuse_conv_bn"] = FuseConvBn;
  b["linear_static"] = [](const Case& c, const std::vector<Tensor>& in) { return StaticLayer(c, in, false); };
  b["conv2d_static"] = [](const Case& c, const std::vector<Tensor>& in) { return StaticLayer(c, in, true); };
  b["choose_qparams"] = [](const Case& c, const std::vector<Tensor>& in) {
    const quant::ChosenQParams p = quant::choose_qparams_per_tensor(in[0].contiguous().to_vector<float>(),
                                                                    c.attrs().at("reduce_range").get<bool>());
    return Result{{tensor(std::vector<double>{p.scale}), tensor(std::vector<int64_t>{p.zero_point})}, {}};
  };
  return b;
}

}  // namespace

Tensor Case::get(const std::string& key) const {
  const Tensor* t = file->find(name + "/" + key);
  if (t == nullptr) throw BindingError("golden case " + name + " has no tensor " + key);
  return t->clone();
}

const std::map<std::string, Binding>& bindings() {
  static const std::map<std::string, Binding> b = Make();
  return b;
}

}  // namespace anvil::conformance
