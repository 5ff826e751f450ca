// Model specs: see spec.h. One function per layer type builds the module and the output
// shape from the input shape; the layer's JSON is checked against the keys it may have.
#include "core/models/spec.h"

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/models/layers.h"
#include "core/nn/nn.h"
#include "core/util/error.h"
#include "core/util/saturating.h"

namespace anvil::models {
namespace {

using Json = nlohmann::ordered_json;
using ModulePtr = std::shared_ptr<nn::Module>;

int64_t Numel(const IntArray& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n = sat_mul(n, d);
  return n;
}

// The context of one layer while it is built: where it is, for error messages.
struct Layer {
  const Json& j;
  std::string where;  // "layer 3 (conv2d)"
  ModelCost* cost;    // what the layer adds: parameters, buffers, activations per sample
  bool dry;           // estimate only: check and infer shapes, build (allocate) nothing

  // The module, or null in a dry walk (its parameters are never allocated).
  template <typename M, typename... Args>
  ModulePtr Make(Args&&... args) const {
    if (dry) return nullptr;
    return std::make_shared<M>(std::forward<Args>(args)...);
  }
  void Params(int64_t n) const { cost->parameters = sat_add(cost->parameters, n); }
  void Buffers(int64_t n) const { cost->buffers = sat_add(cost->buffers, n); }
  void Saved(int64_t n) const { cost->activations_per_sample = sat_add(cost->activations_per_sample, n); }

  [[noreturn]] void Fail(const std::string& what) const { throw Error("model spec: " + where + ": " + what); }
  void Keys(std::initializer_list<const char*> allowed) const {
    std::set<std::string> ok{"type", "autocast"};
    for (const char* k : allowed) ok.insert(k);
    for (const auto& [k, v] : j.items()) {
      if (!ok.count(k)) {
        std::string list;
        for (const auto& a : ok) list += (list.empty() ? "" : ", ") + a;
        Fail("unknown key '" + k + "' (allowed: " + list + ")");
      }
    }
  }
  int64_t Int(const char* key, std::optional<int64_t> fallback = std::nullopt, int64_t min = 1) const {
    if (!j.contains(key)) {
      if (!fallback) Fail(std::string("'") + key + "' is required");
      return *fallback;
    }
    if (!j[key].is_number_integer()) Fail(std::string("'") + key + "' must be an integer");
    const auto v = j[key].get<int64_t>();
    if (v < min) Fail(std::string("'") + key + "' must be >= " + std::to_string(min) + ", got " + std::to_string(v));
    if (v > kMaxModelDim) Fail(detail::StrCat("'", key, "' must be <= ", kMaxModelDim, ", got ", v));
    return v;
  }
  std::string Str(const char* key, const std::string& fallback) const {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_string()) Fail(std::string("'") + key + "' must be a string");
    return j[key].get<std::string>();
  }
  double Real(const char* key, double fallback) const {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_number()) Fail(std::string("'") + key + "' must be a number");
    return j[key].get<double>();
  }
  bool Bool(const char* key, bool fallback) const {
    if (!j.contains(key)) return fallback;
    if (!j[key].is_boolean()) Fail(std::string("'") + key + "' must be true or false");
    return j[key].get<bool>();
  }
  // An int or a pair [h, w].
  std::array<int64_t, 2> Pair(const char* key, std::optional<int64_t> fallback, int64_t min = 1) const {
    if (!j.contains(key)) {
      if (!fallback) Fail(std::string("'") + key + "' is required");
      return {*fallback, *fallback};
    }
    const Json& v = j[key];
    if (v.is_number_integer()) {
      const auto x = v.get<int64_t>();
      if (x < min || x > kMaxModelDim) Fail(detail::StrCat("'", key, "' must be in [", min, ", ", kMaxModelDim, "]"));
      return {x, x};
    }
    if (v.is_array() && v.size() == 2 && v[0].is_number_integer() && v[1].is_number_integer()) {
      const std::array<int64_t, 2> p{v[0].get<int64_t>(), v[1].get<int64_t>()};
      for (int64_t x : p) {
        if (x < min || x > kMaxModelDim) {
          Fail(detail::StrCat("'", key, "' entries must be in [", min, ", ", kMaxModelDim, "]"));
        }
      }
      return p;
    }
    Fail(std::string("'") + key + "' must be an integer or a pair [h, w]");
  }
  void Rank(const IntArray& in, size_t rank, const char* layout) const {
    if (in.size() != rank) Fail("expects input " + std::string(layout) + ", got shape " + shape_str(in));
  }
};

struct Built {
  ModulePtr module;
  IntArray shape;
};

Built BuildSequence(const Json& layers, IntArray shape, const std::string& prefix, bool* int_input, ModelCost* cost,
                    bool dry);

Built BuildLayer(const Layer& L, const IntArray& in, bool first, bool* int_input) {
  const std::string type = L.j["type"].get<std::string>();
  // Every layer's output is kept for the backward pass (an upper bound: views share storage).
  L.Saved(Numel(in));
  auto act = [&](ModulePtr m) {
    L.Keys({});
    return Built{std::move(m), in};
  };
  if (type == "relu") return act(L.Make<nn::ReLU>());
  if (type == "gelu") return act(L.Make<nn::GELU>());
  if (type == "tanh") return act(L.Make<nn::Tanh>());
  if (type == "sigmoid") return act(L.Make<nn::Sigmoid>());
  if (type == "silu") return act(L.Make<nn::SiLU>());
  if (type == "hardswish") return act(L.Make<nn::Hardswish>());
  if (type == "relu6") return act(L.Make<nn::ReLU6>());
  if (type == "hardsigmoid") return act(L.Make<nn::Hardsigmoid>());
  if (type == "mish") return act(L.Make<nn::Mish>());
  if (type == "selu") return act(L.Make<nn::SELU>());
  if (type == "softsign") return act(L.Make<nn::Softsign>());
  if (type == "logsigmoid") return act(L.Make<nn::LogSigmoid>());
  if (type == "hardtanh") {
    L.Keys({"min_val", "max_val"});
    const double lo = L.Real("min_val", -1.0), hi = L.Real("max_val", 1.0);
    if (lo > hi) L.Fail("'min_val' must not be greater than 'max_val'");
    return {L.Make<nn::Hardtanh>(lo, hi), in};
  }
  if (type == "celu") {
    L.Keys({"alpha"});
    const double alpha = L.Real("alpha", 1.0);
    if (alpha == 0) L.Fail("'alpha' cannot be 0");
    return {L.Make<nn::CELU>(alpha), in};
  }
  if (type == "hardshrink" || type == "softshrink") {
    L.Keys({"lambd"});
    const double lambd = L.Real("lambd", 0.5);
    if (type == "softshrink" && lambd < 0) L.Fail("'lambd' must be >= 0");
    if (type == "hardshrink") return {L.Make<nn::Hardshrink>(lambd), in};
    return {L.Make<nn::Softshrink>(lambd), in};
  }
  if (type == "threshold") {
    L.Keys({"threshold", "value"});
    if (!L.j.contains("threshold") || !L.j.contains("value")) L.Fail("'threshold' and 'value' are required");
    return {L.Make<nn::Threshold>(L.Real("threshold", 0.0), L.Real("value", 0.0)), in};
  }
  if (type == "glu" || type == "softmin") {
    // dim counts the batch dim, as in PyTorch (default -1, the last); the batch dim itself is
    // refused.
    L.Keys({"dim"});
    const int64_t rank = static_cast<int64_t>(in.size());
    const int64_t dim = L.Int("dim", -1, -rank);
    if (dim == 0 || dim > rank)
      L.Fail("'dim' must be in [-" + std::to_string(rank) + ", " + std::to_string(rank) +
             "] and not 0 (the batch dim), got " + std::to_string(dim));
    const size_t d = static_cast<size_t>(dim < 0 ? rank + dim : dim - 1);
    if (type == "softmin") return {L.Make<nn::Softmin>(dim), in};
    if (in[d] % 2 != 0) L.Fail("halves dim " + std::to_string(dim) + ", which must be even, got " + shape_str(in));
    IntArray out = in;
    out[d] /= 2;
    return {L.Make<nn::GLU>(dim), out};
  }
  if (type == "prelu") {
    // One slope, or one per channel: the first dim of a sample (dim 1 of the batch).
    L.Keys({"num_parameters", "init"});
    const int64_t n = L.Int("num_parameters", 1);
    const int64_t channels = in.empty() ? 1 : in[0];
    if (n != 1 && n != channels) {
      L.Fail("'num_parameters' must be 1 or the channel count " + std::to_string(channels) + ", got " +
             std::to_string(n));
    }
    L.Params(n);
    return {L.Make<nn::PReLU>(n, L.Real("init", 0.25)), in};
  }
  if (type == "leakyrelu") {
    L.Keys({"negative_slope"});
    return {L.Make<nn::LeakyReLU>(L.Real("negative_slope", 0.01)), in};
  }
  if (type == "dropout") {
    L.Keys({"p"});
    const double p = L.Real("p", 0.5);
    if (p < 0 || p >= 1) L.Fail("'p' must be in [0, 1)");
    return {L.Make<nn::Dropout>(p), in};
  }
  if (type == "flatten") {
    L.Keys({});
    return {L.Make<nn::Flatten>(), {Numel(in)}};
  }
  if (type == "unflatten") {  // [F] -> "shape" (e.g. a flat 64-feature row into [1, 8, 8])
    L.Keys({"shape"});
    const Json& shape = L.j.contains("shape") ? L.j["shape"] : Json();
    IntArray out;
    int64_t n = 1;
    for (const auto& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > kMaxModelDim) {
        L.Fail(detail::StrCat("'shape' entries must be integers in [1, ", kMaxModelDim, "]"));
      }
      out.push_back(d.get<int64_t>());
      n = sat_mul(n, out.back());
    }
    if (out.empty()) L.Fail("'shape' (the sample shape to unflatten into) is required");
    const int64_t have = Numel(in);
    if (in.size() != 1 || have != n) {
      L.Fail("expects a flat input of " + std::to_string(n) + " features for shape " + shape_str(out) + ", got shape " +
             shape_str(in));
    }
    return {L.Make<nn::Unflatten>(1, out), out};
  }
  if (type == "linear") {
    L.Keys({"out_features", "bias"});
    if (in.empty()) L.Fail("expects at least one dim, got a scalar input");
    IntArray out = in;
    out.back() = L.Int("out_features");
    const bool bias = L.Bool("bias", true);
    L.Params(sat_add(sat_mul(in.back(), out.back()), bias ? out.back() : 0));
    return {L.Make<nn::Linear>(in.back(), out.back(), bias), out};
  }
  if (type == "conv2d" || type == "conv1d") {
    L.Keys({"out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "bias"});
    const bool two_d = type == "conv2d";
    L.Rank(in, two_d ? 3 : 2, two_d ? "[C, H, W]" : "[C, L]");
    const int64_t oc = L.Int("out_channels"), groups = L.Int("groups", 1);
    if (in[0] % groups != 0 || oc % groups != 0) {
      L.Fail("groups = " + std::to_string(groups) + " must divide the input channels (" + std::to_string(in[0]) +
             ") and out_channels (" + std::to_string(oc) + ")");
    }
    std::array<int64_t, 2> k = L.Pair("kernel_size", std::nullopt), stride = L.Pair("stride", 1),
                           dil = L.Pair("dilation", 1), pad{0, 0};
    bool same = false;
    if (L.j.contains("padding") && L.j["padding"].is_string()) {
      const auto p = L.j["padding"].get<std::string>();
      if (p == "same")
        same = true;
      else if (p != "valid")
        L.Fail("'padding' must be an integer, a pair, \"same\" or \"valid\", got \"" + p + "\"");
    } else {
      pad = L.Pair("padding", 0, 0);
    }
    if (!two_d) {  // 1-D: the pair's first entry is the (unit) height
      k = {1, k[0]};
      stride = {1, stride[0]};
      dil = {1, dil[0]};
      pad = {0, pad[0]};
    }
    if (same && (stride[0] != 1 || stride[1] != 1)) L.Fail("padding \"same\" needs stride 1");
    const IntArray spatial = two_d ? IntArray{in[1], in[2]} : IntArray{1, in[1]};
    std::array<int64_t, 2> out_hw{};
    for (int d = 0; d < 2; ++d) {
      const int64_t span = dil[static_cast<size_t>(d)] * (k[static_cast<size_t>(d)] - 1) + 1;
      const int64_t padded = spatial[static_cast<size_t>(d)] + (same ? span - 1 : 2 * pad[static_cast<size_t>(d)]);
      if (padded < span) {
        L.Fail("the kernel " + std::to_string(k[0]) + "x" + std::to_string(k[1]) + " does not fit the input " +
               shape_str(in));
      }
      out_hw[static_cast<size_t>(d)] =
          same ? spatial[static_cast<size_t>(d)] : (padded - span) / stride[static_cast<size_t>(d)] + 1;
    }
    const bool bias = L.Bool("bias", true);
    L.Params(sat_add(sat_prod({oc, in[0] / groups, k[0], k[1]}), bias ? oc : 0));
    if (two_d) {
      return {L.Make<nn::Conv2d>(in[0], oc, k, nn::ConvOptions{stride, pad, dil, groups, bias, same}),
              {oc, out_hw[0], out_hw[1]}};
    }
    return {L.Make<nn::Conv1d>(in[0], oc, k[1], nn::Conv1dOptions{stride[1], pad[1], dil[1], groups, bias, same}),
            {oc, out_hw[1]}};
  }
  if (type == "maxpool2d" || type == "avgpool2d") {
    const bool max = type == "maxpool2d";
    if (max)
      L.Keys({"kernel_size", "stride", "padding", "dilation", "ceil_mode"});
    else
      L.Keys({"kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"});
    L.Rank(in, 3, "[C, H, W]");
    nn::F::Pool2dParams p;
    p.kernel = L.Pair("kernel_size", std::nullopt);
    p.stride = L.Pair("stride", 0, 0);
    p.padding = L.Pair("padding", 0, 0);
    p.ceil_mode = L.Bool("ceil_mode", false);
    if (max) p.dilation = L.Pair("dilation", 1);
    if (!max) {
      p.count_include_pad = L.Bool("count_include_pad", true);
      if (L.j.contains("divisor_override") && !L.j["divisor_override"].is_null()) {
        const Json& d = L.j["divisor_override"];
        if (!d.is_number_integer() || d.get<int64_t>() == 0) L.Fail("'divisor_override' must be a non-zero integer");
        p.divisor_override = d.get<int64_t>();
      }
    }
    IntArray out{in[0]};
    for (size_t d = 0; d < 2; ++d) {
      const int64_t k = p.kernel[d], s = p.stride[d] > 0 ? p.stride[d] : k;
      if (2 * p.padding[d] > k) L.Fail("'padding' must be at most half the kernel size");
      out.push_back(nn::F::pool_output_size(in[d + 1], k, s, p.padding[d], p.dilation[d], p.ceil_mode));
      if (out.back() < 1) L.Fail("the window does not fit the input " + shape_str(in));
    }
    if (max) return {L.Make<nn::MaxPool2d>(p), out};
    return {L.Make<nn::AvgPool2d>(p), out};
  }
  if (type == "adaptiveavgpool2d") {
    L.Keys({"output_size"});
    L.Rank(in, 3, "[C, H, W]");
    const auto o = L.Pair("output_size", 1);
    return {L.Make<nn::AdaptiveAvgPool2d>(o), {in[0], o[0], o[1]}};
  }
  if (type == "batchnorm1d" || type == "batchnorm2d") {
    L.Keys({"eps", "momentum"});
    const bool two_d = type == "batchnorm2d";
    if (two_d)
      L.Rank(in, 3, "[C, H, W]");
    else if (in.size() != 1 && in.size() != 2)
      L.Fail("expects input [C] or [C, L], got shape " + shape_str(in));
    const double eps = L.Real("eps", 1e-5);
    // "momentum": null is PyTorch's momentum=None (a cumulative average of the batches).
    const std::optional<double> momentum = L.j.contains("momentum") && L.j["momentum"].is_null()
                                               ? std::nullopt
                                               : std::optional<double>(L.Real("momentum", 0.1));
    L.Params(sat_mul(2, in[0]));
    L.Buffers(sat_add(sat_mul(2, in[0]), 1));
    if (two_d) return {L.Make<nn::BatchNorm2d>(in[0], eps, momentum), in};
    return {L.Make<nn::BatchNorm1d>(in[0], eps, momentum), in};
  }
  if (type == "layernorm") {
    L.Keys({"eps"});
    if (in.empty()) L.Fail("expects at least one dim");
    L.Params(sat_mul(2, in.back()));
    return {L.Make<nn::LayerNorm>(IntArray{in.back()}, L.Real("eps", 1e-5)), in};
  }
  if (type == "groupnorm") {
    L.Keys({"num_groups", "eps"});
    if (in.empty()) L.Fail("expects input [C, ...]");
    const int64_t g = L.Int("num_groups");
    if (in[0] % g != 0)
      L.Fail("num_groups = " + std::to_string(g) + " must divide the " + std::to_string(in[0]) + " channels");
    L.Params(sat_mul(2, in[0]));
    return {L.Make<nn::GroupNorm>(g, in[0], L.Real("eps", 1e-5)), in};
  }
  if (type == "embedding") {
    L.Keys({"num_embeddings", "embedding_dim", "padding_idx", "max_norm", "norm_type"});
    if (!first) L.Fail("must be the first layer (its input is integer token ids)");
    L.Rank(in, 1, "[T] (token ids)");
    *int_input = true;
    const int64_t d = L.Int("embedding_dim"), n = L.Int("num_embeddings");
    L.Params(sat_mul(n, d));
    const std::optional<double> max_norm = L.j.contains("max_norm") && !L.j["max_norm"].is_null()
                                               ? std::optional<double>(L.Real("max_norm", 0.0))
                                               : std::nullopt;
    if (max_norm && !(*max_norm > 0)) L.Fail("'max_norm' must be positive");
    // padding_idx as PyTorch's: absent or null for none, negative counting from the end.
    const std::optional<int64_t> padding_idx = L.j.contains("padding_idx") && !L.j["padding_idx"].is_null()
                                                   ? std::optional<int64_t>(L.Int("padding_idx", 0, -n))
                                                   : std::nullopt;
    if (padding_idx && *padding_idx >= n) {
      L.Fail("'padding_idx' must be within num_embeddings [" + std::to_string(-n) + ", " + std::to_string(n) +
             "), got " + std::to_string(*padding_idx));
    }
    return {L.Make<nn::Embedding>(n, d, padding_idx, max_norm, L.Real("norm_type", 2.0)), {in[0], d}};
  }
  if (type == "positional") {
    L.Keys({});
    L.Rank(in, 2, "[T, E]");
    L.Params(sat_mul(in[0], in[1]));
    return {L.Make<LearnedPositions>(in[0], in[1]), in};
  }
  if (type == "gru" || type == "lstm") {
    L.Keys({"hidden_size", "num_layers", "dropout", "return", "bidirectional"});
    L.Rank(in, 2, "[T, F]");
    nn::RNNOptions o{L.Int("num_layers", 1), true, L.Real("dropout", 0.0), true};
    o.bidirectional = L.Bool("bidirectional", false);
    const int64_t h = L.Int("hidden_size"), dirs = o.bidirectional ? 2 : 1;
    const std::string ret = L.Str("return", "last");
    if (ret != "last" && ret != "sequence") L.Fail("'return' must be \"last\" or \"sequence\"");
    const int64_t gates = type == "gru" ? 3 : 4;
    // weight_ih, weight_hh and both biases per layer and direction: the first layer reads the
    // input, the others the layer below (in closed form: num_layers may be up to kMaxModelDim).
    const auto layer = [&](int64_t input) {
      return sat_mul(dirs, sat_mul(gates, sat_add(sat_mul(h, sat_add(input, h)), sat_mul(2, h))));
    };
    L.Params(layer(in[1]));
    L.Params(sat_mul(o.num_layers - 1, layer(sat_mul(dirs, h))));
    L.Saved(sat_prod({in[0], gates, h, o.num_layers, 2, dirs}));  // the gates of every step
    const IntArray out = ret == "last" ? IntArray{sat_mul(dirs, h)} : IntArray{in[0], sat_mul(dirs, h)};
    if (L.dry) return {nullptr, out};
    std::shared_ptr<nn::RNNBase> rnn;
    if (type == "gru")
      rnn = std::make_shared<nn::GRU>(in[1], h, o);
    else
      rnn = std::make_shared<nn::LSTM>(in[1], h, o);
    return {std::make_shared<SequenceEncoder>(rnn, ret == "last"), out};
  }
  if (type == "transformer_encoder") {
    L.Keys({"nhead", "dim_feedforward", "dropout", "num_layers", "norm_first", "activation"});
    L.Rank(in, 2, "[T, E]");
    const int64_t heads = L.Int("nhead");
    if (in[1] % heads != 0)
      L.Fail("nhead = " + std::to_string(heads) + " must divide the embedding size " + std::to_string(in[1]));
    const std::string activation = L.Str("activation", "relu");
    if (activation != "relu" && activation != "gelu") L.Fail("'activation' must be \"relu\" or \"gelu\"");
    const nn::TransformerEncoderOptions o{L.Int("dim_feedforward", sat_mul(4, in[1])), L.Real("dropout", 0.1), true,
                                          L.Bool("norm_first", false), activation == "gelu"};
    const int64_t layers = L.Int("num_layers", 1), e = in[1], f = o.dim_feedforward, t = in[0];
    // Per layer: attention in/out projections, the two feed-forward linears, two norms.
    const int64_t per_layer = sat_add(sat_add(sat_mul(4, sat_mul(e, e)), sat_mul(4, e)),
                                      sat_add(sat_add(sat_mul(2, sat_mul(e, f)), sat_add(f, e)), sat_mul(4, e)));
    L.Params(sat_mul(layers, per_layer));
    // Saved per layer: q, k, v, the attention weights per head, the feed-forward hidden.
    L.Saved(sat_mul(layers, sat_add(sat_add(sat_mul(t, sat_mul(6, e)), sat_mul(t, f)), sat_prod({2, heads, t, t}))));
    if (L.dry) return {nullptr, in};
    auto stack = std::make_shared<nn::Sequential>();
    for (int64_t i = 0; i < layers; ++i) stack->push_back(std::make_shared<nn::TransformerEncoderLayer>(e, heads, o));
    return {stack, in};
  }
  if (type == "mean_pool") {
    L.Keys({"dim"});
    if (in.empty()) L.Fail("expects at least one dim");
    const int64_t d = L.Int("dim", 0, 0);
    if (d >= static_cast<int64_t>(in.size()))
      L.Fail("'dim' " + std::to_string(d) + " is out of range for shape " + shape_str(in));
    IntArray out = in;
    out.erase(out.begin() + d);
    return {L.Make<MeanPool>(d + 1), out};
  }
  if (type == "residual") {
    L.Keys({"layers"});
    if (!L.j.contains("layers") || !L.j["layers"].is_array() || L.j["layers"].empty())
      L.Fail("'layers' must be a non-empty list");
    // Each level recurses: bounded, so a hostile spec cannot overflow the stack.
    if (++L.cost->depth > kMaxModelNesting) {
      L.Fail(detail::StrCat("nested more than ", kMaxModelNesting, " residuals deep"));
    }
    bool inner_int = false;
    Built body = BuildSequence(L.j["layers"], in, L.where + " > ", &inner_int, L.cost, L.dry);
    ModulePtr shortcut;
    if (body.shape != in) {
      // Match the shortcut to the body: a 1x1 strided convolution for images, else a linear map.
      if (in.size() == 3 && body.shape.size() == 3 && in[1] % body.shape[1] == 0 && in[2] % body.shape[2] == 0) {
        const int64_t s = in[1] / body.shape[1];
        L.Params(sat_add(sat_mul(in[0], body.shape[0]), body.shape[0]));
        shortcut = L.Make<nn::Conv2d>(in[0], body.shape[0], std::array<int64_t, 2>{1, 1},
                                      nn::ConvOptions{.stride = {s, in[2] / body.shape[2]}});
      } else if (in.size() == 1 && body.shape.size() == 1) {
        L.Params(sat_add(sat_mul(in[0], body.shape[0]), body.shape[0]));
        shortcut = L.Make<nn::Linear>(in[0], body.shape[0]);
      } else {
        L.Fail("cannot add the input " + shape_str(in) + " to the body's output " + shape_str(body.shape));
      }
    }
    --L.cost->depth;
    if (L.dry) return {nullptr, body.shape};
    return {std::make_shared<Residual>(body.module, shortcut), body.shape};
  }
  L.Fail("unknown layer type '" + type + "'");
}

Built BuildSequence(const Json& layers, IntArray shape, const std::string& prefix, bool* int_input, ModelCost* cost,
                    bool dry) {
  auto seq = dry ? nullptr : std::make_shared<nn::Sequential>();
  for (size_t i = 0; i < layers.size(); ++i) {
    const Json& j = layers[i];
    if (++cost->layers > kMaxModelLayers) {
      throw Error(detail::StrCat("model spec: more than ", kMaxModelLayers, " layers (nested ones included)"));
    }
    const std::string where = prefix + "layer " + std::to_string(i);
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      throw Error("model spec: " + where + ": expected an object with a \"type\"");
    }
    const Layer L{j, where + " (" + j["type"].get<std::string>() + ")", cost, dry};
    Built b = BuildLayer(L, shape, prefix.empty() && i == 0, int_input);
    // "autocast": false keeps the layer in float32 under mixed precision (nn::Module::set_autocast).
    const bool autocast = L.Bool("autocast", true);
    if (!autocast && b.module) b.module->set_autocast(false);
    if (seq) seq->push_back(b.module);
    for (int64_t d : b.shape) {
      if (d > kMaxModelDim) {
        throw Error(detail::StrCat("model spec: ", where, ": the output shape ", shape_str(b.shape),
                                   " has a dimension above ", kMaxModelDim));
      }
    }
    shape = b.shape;
  }
  return {seq, shape};
}

}  // namespace

namespace {

// The parsed spec's top level, checked: the input shape and the layer list.
struct ParsedSpec {
  Json spec;
  IntArray input;
};

ParsedSpec ParseSpec(const std::string& text) {
  ANVIL_CHECK(text.size() <= kMaxModelSpecBytes, "model spec: ", text.size(), " bytes; expected at most ",
              kMaxModelSpecBytes);
  ParsedSpec p;
  Json& spec = p.spec;
  try {
    spec = Json::parse(text);
  } catch (const std::exception& e) {
    throw Error(std::string("model spec: not valid JSON: ") + e.what());
  }
  ANVIL_CHECK(spec.is_object(), "model spec: expected a JSON object with input_shape and layers");
  for (const auto& [k, v] : spec.items()) {
    ANVIL_CHECK(k == "input_shape" || k == "layers" || k == "name" || k == "output_shape", "model spec: unknown key '",
                k, "' (allowed: input_shape, layers, name, output_shape)");
  }
  ANVIL_CHECK(spec.contains("input_shape") && spec["input_shape"].is_array() && !spec["input_shape"].empty(),
              "model spec: 'input_shape' (the shape of one sample, without the batch dim) is required");
  for (const auto& d : spec["input_shape"]) {
    ANVIL_CHECK(d.is_number_integer() && d.get<int64_t>() > 0 && d.get<int64_t>() <= kMaxModelDim,
                "model spec: 'input_shape' entries must be integers in [1, ", kMaxModelDim, "], got ", d.dump());
    p.input.push_back(d.get<int64_t>());
  }
  ANVIL_CHECK(spec.contains("layers") && spec["layers"].is_array() && !spec["layers"].empty(),
              "model spec: 'layers' must be a non-empty list");
  return p;
}

}  // namespace

namespace {

ModelCost EstimateModel(const std::string& text) {
  const ParsedSpec p = ParseSpec(text);
  ModelCost cost;
  bool int_input = false;
  cost.activations_per_sample = Numel(p.input);
  const Built b = BuildSequence(p.spec["layers"], p.input, "", &int_input, &cost, /*dry=*/true);
  cost.activations_per_sample = sat_add(cost.activations_per_sample, Numel(b.shape));
  return cost;
}

BuiltModel BuildModel(const std::string& text) {
  const ParsedSpec p = ParseSpec(text);
  const Json& spec = p.spec;
  const IntArray& input = p.input;
  bool int_input = false;
  ModelCost cost;
  Built b = BuildSequence(spec["layers"], input, "", &int_input, &cost, /*dry=*/false);
  BuiltModel out;
  out.module = b.module;
  out.input_shape = input;
  out.output_shape = b.shape;
  out.input_dtype = int_input ? kInt64 : kFloat32;
  // A normalised spec (this function's own output) states its output shape: it must still be
  // what the layers produce.
  if (spec.contains("output_shape")) {
    IntArray stated;
    for (const auto& d : spec["output_shape"]) stated.push_back(d.is_number_integer() ? d.get<int64_t>() : -1);
    ANVIL_CHECK(stated == b.shape, "model spec: 'output_shape' ", shape_str(stated),
                " differs from the layers' output ", shape_str(b.shape));
  }
  Json normal = spec;
  normal["output_shape"] = b.shape;
  out.spec = normal.dump();
  return out;
}

}  // namespace

// A JSON value of the wrong type met anywhere the layer code reads one (found by the model-spec
// fuzzer): a spec error like any other, never an internal error.
template <typename F>
auto WithJsonErrors(F&& f) {
  try {
    return f();
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("model spec: a field has the wrong type: ") + e.what());
  }
}

ModelCost estimate_model(const std::string& text) {
  return WithJsonErrors([&] { return EstimateModel(text); });
}

BuiltModel build_model(const std::string& text) {
  return WithJsonErrors([&] { return BuildModel(text); });
}

std::string preset_names() { return "mlp, lenet5, resnet, gru, transformer"; }

std::string preset_spec(const std::string& name, const IntArray& in, int64_t classes, int64_t vocab) {
  ANVIL_CHECK(classes >= 2, "preset ", name, ": expected at least 2 classes, got ", classes);
  Json layers = Json::array();
  auto add = [&](Json j) { layers.push_back(std::move(j)); };
  if (name == "mlp") {
    if (in.size() > 1) add({{"type", "flatten"}});
    for (int i = 0; i < 2; ++i) {
      add({{"type", "linear"}, {"out_features", 128}});
      add({{"type", "relu"}});
    }
  } else if (name == "lenet5") {
    ANVIL_CHECK(in.size() == 3, "preset lenet5: expected image input [C, H, W], got ", shape_str(in));
    add({{"type", "conv2d"}, {"out_channels", 6}, {"kernel_size", 5}, {"padding", "same"}});
    add({{"type", "relu"}});
    add({{"type", "maxpool2d"}, {"kernel_size", 2}});
    add({{"type", "conv2d"},
         {"out_channels", 16},
         {"kernel_size", 5},
         {"padding", in[1] >= 20 ? Json(0) : Json("same")}});
    add({{"type", "relu"}});
    add({{"type", "maxpool2d"}, {"kernel_size", 2}});
    add({{"type", "flatten"}});
    add({{"type", "linear"}, {"out_features", 120}});
    add({{"type", "relu"}});
    add({{"type", "linear"}, {"out_features", 84}});
    add({{"type", "relu"}});
  } else if (name == "resnet") {
    ANVIL_CHECK(in.size() == 3, "preset resnet: expected image input [C, H, W], got ", shape_str(in));
    add({{"type", "conv2d"}, {"out_channels", 16}, {"kernel_size", 3}, {"padding", 1}, {"bias", false}});
    add({{"type", "batchnorm2d"}});
    add({{"type", "relu"}});
    auto block = [&](int64_t channels, int64_t stride) {
      Json body = Json::array(
          {{{"type", "conv2d"},
            {"out_channels", channels},
            {"kernel_size", 3},
            {"stride", stride},
            {"padding", 1},
            {"bias", false}},
           {{"type", "batchnorm2d"}},
           {{"type", "relu"}},
           {{"type", "conv2d"}, {"out_channels", channels}, {"kernel_size", 3}, {"padding", 1}, {"bias", false}},
           {{"type", "batchnorm2d"}}});
      add({{"type", "residual"}, {"layers", body}});
      add({{"type", "relu"}});
    };
    block(16, 1);
    block(32, in[1] >= 8 ? 2 : 1);
    block(64, in[1] >= 16 ? 2 : 1);
    add({{"type", "adaptiveavgpool2d"}, {"output_size", 1}});
    add({{"type", "flatten"}});
  } else if (name == "gru" || name == "transformer") {
    ANVIL_CHECK(in.size() == 1, "preset ", name, ": expected token sequences [T], got ", shape_str(in));
    ANVIL_CHECK(vocab >= 2, "preset ", name, ": needs the vocabulary size");
    add({{"type", "embedding"}, {"num_embeddings", vocab}, {"embedding_dim", 64}});
    if (name == "gru") {
      add({{"type", "gru"}, {"hidden_size", 64}});
    } else {
      add({{"type", "positional"}});
      add({{"type", "transformer_encoder"},
           {"nhead", 4},
           {"dim_feedforward", 128},
           {"num_layers", 2},
           {"dropout", 0.1}});
      add({{"type", "mean_pool"}});
    }
  } else {
    throw Error("unknown model preset '" + name + "'; presets: " + preset_names());
  }
  add({{"type", "linear"}, {"out_features", classes}});
  return Json{{"name", name}, {"input_shape", in}, {"layers", layers}}.dump();
}

}  // namespace anvil::models
