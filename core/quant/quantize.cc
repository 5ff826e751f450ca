#include "core/quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/autograd/grad_mode.h"
#include "core/nn/activation.h"
#include "core/nn/container.h"
#include "core/nn/linear.h"
#include "core/nn/pooling.h"
#include "core/nn/rnn.h"
#include "core/ops/functions.h"
#include "core/quant/histogram_observer.h"
#include "core/quant/observer.h"
#include "core/quant/quantized_layers.h"
#include "core/quant/serialize.h"
#include "core/util/cpu_features.h"
#include "core/util/error.h"

namespace anvil::quant {
namespace {

using Json = nlohmann::ordered_json;

// A layer fusion absorbed: the identity, marked so the archive can say so.
class Absorbed : public nn::Module {
 public:
  Absorbed() : Module("Identity") { train(false); }
  Tensor forward(const Tensor& x) override { return x; }
};

// A layer with observers on its input and output, between prepare and convert.
class Observed : public nn::Module {
 public:
  Observed(std::shared_ptr<nn::Module> inner, std::unique_ptr<UniformObserver> in, std::unique_ptr<UniformObserver> out,
           QConfig qconfig)
      : Module("Observed"), inner(std::move(inner)), input(std::move(in)), output(std::move(out)), qconfig(qconfig) {
    register_module("module", this->inner);
  }
  Tensor forward(const Tensor& x) override {
    input->forward(x);
    Tensor y = inner->forward(x);
    output->forward(y);
    ++batches;
    return y;
  }
  std::shared_ptr<nn::Module> inner;
  std::unique_ptr<UniformObserver> input, output;
  QConfig qconfig;
  int64_t batches = 0;
};

// Calls f(sequential, path prefix) for every Sequential in the tree, parents first.
void ForEachSequential(nn::Module& m, const std::string& prefix,
                       const std::function<void(nn::Sequential&, const std::string&)>& f) {
  if (auto* seq = dynamic_cast<nn::Sequential*>(&m)) f(*seq, prefix);
  for (auto& [name, child] : m.named_children()) ForEachSequential(*child, prefix + name + ".", f);
}

bool Is(const std::shared_ptr<nn::Module>& m, const char* type) { return m && m->type_name() == type; }

// Layers after which values stay on the quint8 grid of their input.
bool KeepsGrid(const nn::Module& m) {
  const std::string& t = m.type_name();
  return t == "ReLU" || t == "MaxPool2d" || t == "MaxPool1d" || t == "Flatten" || t == "Unflatten" || t == "Dropout" ||
         t == "Identity" || t == "DeQuantStub";
}

}  // namespace

std::unique_ptr<UniformObserver> make_activation_observer(const QConfig& q) {
  ObserverOptions o;
  o.dtype = QDtype::QUInt8;
  o.qscheme = QScheme::PerTensorAffine;
  o.reduce_range = q.reduce_range.value_or(default_reduce_range());
  switch (q.activation) {
    case ActivationObserver::kMinMax:
      return std::make_unique<MinMaxObserver>(o);
    case ActivationObserver::kMovingAverageMinMax:
      return std::make_unique<MovingAverageMinMaxObserver>(q.averaging_constant, o);
    case ActivationObserver::kHistogram:
      return std::make_unique<HistogramObserver>(2048, o);
  }
  return nullptr;
}

ActivationQParams activation_qparams(const UniformObserver& obs) {
  const QParams q = obs.calculate_qparams();
  return ActivationQParams{q.scale.to(kFloat64).to_vector<double>()[0],
                           q.zero_point.to(kInt64).to_vector<int64_t>()[0]};
}

namespace {

bool Observable(const std::shared_ptr<nn::Module>& m) {
  return Is(m, "Linear") || Is(m, "Conv2d") || Is(m, "LinearReLU") || Is(m, "ConvReLU2d") || Is(m, "QuantStub");
}

// The int8 layer for an observed one, or a reason it stays float.
std::shared_ptr<nn::Module> ConvertOne(const Observed& o, const ActivationQParams& in, std::string* reason) {
  const ActivationQParams out = activation_qparams(*o.output);
  const bool per_channel = o.qconfig.per_channel_weights;
  std::shared_ptr<nn::Module> inner = o.inner;
  bool relu = false;
  if (auto* lr = dynamic_cast<LinearReLU*>(inner.get())) {
    inner = lr->linear;
    relu = true;
  } else if (auto* cr = dynamic_cast<ConvReLU2d*>(inner.get())) {
    inner = cr->conv;
    relu = true;
  }
  try {
    if (auto* lin = dynamic_cast<nn::Linear*>(inner.get())) {
      return std::make_shared<QuantizedLinear>(quantize_weight(lin->weight, per_channel), lin->bias, in, out, relu);
    }
    if (auto* conv = dynamic_cast<nn::Conv2d*>(inner.get())) {
      return std::make_shared<QuantizedConv2d>(quantize_weight(conv->weight, per_channel), conv->bias, conv->options(),
                                               in, out, relu);
    }
    if (dynamic_cast<QuantStub*>(inner.get()) != nullptr) return std::make_shared<QuantStub>(out);
  } catch (const Error& e) {
    *reason = e.what();
    return o.inner;
  }
  *reason = "no int8 version of " + inner->type_name();
  return o.inner;
}

}  // namespace

const char* activation_observer_name(ActivationObserver o) {
  switch (o) {
    case ActivationObserver::kMinMax:
      return "minmax";
    case ActivationObserver::kMovingAverageMinMax:
      return "moving_average_minmax";
    case ActivationObserver::kHistogram:
      return "histogram";
  }
  return "?";
}

ActivationObserver activation_observer_from_name(const std::string& name) {
  for (ActivationObserver o :
       {ActivationObserver::kMinMax, ActivationObserver::kMovingAverageMinMax, ActivationObserver::kHistogram})
    if (name == activation_observer_name(o)) return o;
  throw Error("unknown observer \"" + name + "\": expected minmax, moving_average_minmax or histogram");
}

bool default_reduce_range() {
  const CpuFeatures& f = cpu_features();
  return !(f.avx512_vnni || f.avx_vnni || f.amx_int8);
}

std::shared_ptr<nn::Conv2d> fuse_conv_bn_eval(const nn::Conv2d& conv, const nn::BatchNorm& bn) {
  ANVIL_CHECK(bn.running_mean.defined() && bn.running_var.defined(),
              "fuse_conv_bn_eval: the batch norm tracks no running statistics; there is nothing to fold");
  ANVIL_CHECK(bn.num_features == conv.out_channels, "fuse_conv_bn_eval: batch norm over ", bn.num_features,
              " channels after a convolution with ", conv.out_channels, " outputs");
  nn::ConvOptions options = conv.options();
  options.bias = true;
  auto fused = std::make_shared<nn::Conv2d>(conv.in_channels, conv.out_channels, conv.kernel_size(), options);
  NoGradGuard no_grad;
  const Tensor var_rsqrt = (bn.running_var.to(kFloat32) + bn.eps()).rsqrt();
  const Tensor gamma = bn.weight.defined() ? bn.weight.detach().to(kFloat32) : ones_like(var_rsqrt);
  const Tensor beta = bn.bias.defined() ? bn.bias.detach().to(kFloat32) : zeros_like(var_rsqrt);
  const Tensor factor = gamma * var_rsqrt;
  const Tensor b = conv.bias.defined() ? conv.bias.detach().to(kFloat32) : zeros_like(var_rsqrt);
  fused->weight.copy_(conv.weight.detach().to(kFloat32) * factor.reshape({-1, 1, 1, 1}));
  // torch.nn.utils.fusion.fuse_conv_bn_weights' order of operations.
  fused->bias.copy_((b - bn.running_mean.to(kFloat32)) * var_rsqrt * gamma + beta);
  return fused;
}

LinearReLU::LinearReLU(std::shared_ptr<nn::Module> l) : Module("LinearReLU"), linear(std::move(l)) {
  register_module("0", linear);
}
Tensor LinearReLU::forward(const Tensor& x) { return linear->forward(x).relu(); }

ConvReLU2d::ConvReLU2d(std::shared_ptr<nn::Conv2d> c) : Module("ConvReLU2d"), conv(std::move(c)) {
  register_module("0", conv);
}
Tensor ConvReLU2d::forward(const Tensor& x) { return conv->forward(x).relu(); }

std::vector<Fusion> fuse_modules(nn::Module& model) {
  ANVIL_CHECK(!model.is_training(),
              "fuse_modules: put the model in eval mode first (batch norm folds its running "
              "statistics)");
  std::vector<Fusion> done;
  ForEachSequential(model, "", [&](nn::Sequential& seq, const std::string& prefix) {
    for (size_t i = 0; i < seq.size(); ++i) {
      const auto next = [&](size_t d, const char* type) { return i + d < seq.size() && Is(seq[i + d], type); };
      auto name = [&](size_t d) { return prefix + std::to_string(i + d); };
      if (Is(seq[i], "Conv2d")) {
        std::shared_ptr<nn::Conv2d> conv = std::static_pointer_cast<nn::Conv2d>(seq[i]);
        size_t used = 1;
        std::string what = name(0);
        if (next(1, "BatchNorm2d")) {
          conv = fuse_conv_bn_eval(*conv, static_cast<const nn::BatchNorm&>(*seq[i + 1]));
          what += "+" + name(1);
          used = 2;
        }
        const bool relu = next(used, "ReLU");
        if (relu) what += "+" + name(used);
        if (used == 1 && !relu) continue;
        std::shared_ptr<nn::Module> fused =
            relu ? std::shared_ptr<nn::Module>(std::make_shared<ConvReLU2d>(conv)) : conv;
        fused->eval();
        seq.replace(i, fused);
        for (size_t d = 1; d < used + (relu ? 1 : 0); ++d) seq.replace(i + d, std::make_shared<Absorbed>());
        done.push_back({what + (relu ? " -> ConvReLU2d" : " -> Conv2d") + (used == 2 ? " (batch norm folded)" : "")});
        i += used + (relu ? 1 : 0) - 1;
      } else if (Is(seq[i], "Linear") && next(1, "ReLU")) {
        auto fused = std::make_shared<LinearReLU>(seq[i]);
        fused->eval();
        seq.replace(i, fused);
        seq.replace(i + 1, std::make_shared<Absorbed>());
        done.push_back({name(0) + "+" + name(1) + " -> LinearReLU"});
        ++i;
      }
    }
  });
  return done;
}

void check_keep_float(const QConfig& qconfig, const std::vector<std::string>& found, const std::string& what,
                      bool quote) {
  for (const std::string& path : qconfig.keep_float) {
    if (std::find(found.begin(), found.end(), path) != found.end()) continue;
    std::string names;
    for (const std::string& f : found) names += (names.empty() ? "" : ", ") + (quote ? "\"" + f + "\"" : f);
    throw QuantizationInputError("keep_float: \"" + path + "\" is not one of " + what + " (" +
                                 (names.empty() ? std::string("none") : names) + ")");
  }
}

int64_t prepare(nn::Module& model, const QConfig& qconfig) {
  // Two passes: the paths are checked before the model is touched, so a refused keep_float
  // leaves it as it was.
  for (const bool apply : {false, true}) {
    int64_t observed = 0;
    std::vector<std::string> found;
    ForEachSequential(model, "", [&](nn::Sequential& seq, const std::string& prefix) {
      for (size_t i = 0; i < seq.size(); ++i) {
        if (!Observable(seq[i])) continue;
        found.push_back(prefix + std::to_string(i));
        if (qconfig.keep_float.count(found.back())) continue;
        ++observed;
        if (!apply) continue;
        auto wrapped = std::make_shared<Observed>(seq[i], make_activation_observer(qconfig),
                                                  make_activation_observer(qconfig), qconfig);
        wrapped->train(seq[i]->is_training());
        seq.replace(i, wrapped);
      }
    });
    if (apply) return observed;
    check_keep_float(qconfig, found, "the model's Linear and Conv2d layers");
    ANVIL_CHECK(!found.empty(), "prepare: the model has no Linear or Conv2d layer in a Sequential to quantize");
    ANVIL_CHECK(observed > 0,
                "prepare: every Linear and Conv2d layer is kept in float (keep_float): nothing to quantize");
  }
  return 0;  // not reached
}

std::vector<ConvertedLayer> convert(nn::Module& model) {
  std::vector<ConvertedLayer> report;
  ForEachSequential(model, "", [&](nn::Sequential& seq, const std::string& prefix) {
    std::optional<ActivationQParams> grid;  // the quint8 grid the values flowing now are on
    for (size_t i = 0; i < seq.size(); ++i) {
      // Held here: replacing the layer below releases the sequential's reference.
      const std::shared_ptr<Observed> o = std::dynamic_pointer_cast<Observed>(seq[i]);
      if (o == nullptr) {
        if (!KeepsGrid(*seq[i])) grid.reset();
        continue;
      }
      ANVIL_CHECK(o->batches > 0, "convert: layer ", prefix, i, " (", o->inner->type_name(),
                  ") observed no calibration batch; run the model on calibration data after prepare()");
      const ActivationQParams in = grid.value_or(activation_qparams(*o->input));
      std::string reason;
      std::shared_ptr<nn::Module> q = ConvertOne(*o, in, &reason);
      const bool quantized = reason.empty();
      report.push_back({prefix + std::to_string(i), quantized ? q->type_name() : "float", reason});
      q->train(o->is_training());  // as the layer it replaces
      seq.replace(i, q);
      if (quantized) {
        grid = activation_qparams(*o->output);
      } else {
        grid.reset();
      }
    }
  });
  return report;
}

namespace {

// Calls f(path, rnn) for every LSTM and GRU in the tree (a sequence encoder's too).
void ForEachRnn(nn::Module& m, const std::string& path,
                const std::function<void(const std::string&, nn::RNNBase&)>& f) {
  if (auto* rnn = dynamic_cast<nn::RNNBase*>(&m); rnn != nullptr && (m.type_name() == "LSTM" || m.type_name() == "GRU"))
    f(path, *rnn);
  for (auto& [name, child] : m.named_children()) ForEachRnn(*child, path.empty() ? name : path + "." + name, f);
}

}  // namespace

std::vector<std::string> quantize_dynamic(nn::Module& model, const QConfig& qconfig) {
  const bool reduce_range = qconfig.reduce_range.value_or(true);  // fbgemm's dynamic Linear: always 7 bits
  // Two passes, as prepare's: the paths are checked before the model is touched.
  for (const bool apply : {false, true}) {
    std::vector<std::string> found, replaced;
    ForEachRnn(model, "", [&](const std::string& path, nn::RNNBase& rnn) {
      if (rnn.linears() != nullptr) return;
      found.push_back(path);
      if (qconfig.keep_float.count(path)) return;
      if (apply) DynamicRnnLinears::install(rnn, qconfig.per_channel_weights, reduce_range);
      replaced.push_back(path);
    });
    ForEachSequential(model, "", [&](nn::Sequential& seq, const std::string& prefix) {
      for (size_t i = 0; i < seq.size(); ++i) {
        auto* lin = dynamic_cast<nn::Linear*>(seq[i].get());
        if (lin == nullptr) continue;
        found.push_back(prefix + std::to_string(i));
        if (qconfig.keep_float.count(found.back())) continue;
        replaced.push_back(found.back());
        if (!apply) continue;
        auto q = std::make_shared<DynamicQuantizedLinear>(quantize_weight(lin->weight, qconfig.per_channel_weights),
                                                          lin->bias, reduce_range);
        q->train(lin->is_training());
        seq.replace(i, q);
      }
    });
    if (apply) return replaced;
    check_keep_float(qconfig, found, "the model's Linear, LSTM and GRU layers");
  }
  return {};  // not reached
}

namespace {

// Calls f(path, module) for each quantized or absorbed layer.
void ForEachRewritten(const nn::Module& model, const std::function<void(const std::string&, const nn::Module&)>& f) {
  ForEachSequential(const_cast<nn::Module&>(model), "", [&](nn::Sequential& seq, const std::string& prefix) {
    for (size_t i = 0; i < seq.size(); ++i) {
      if (dynamic_cast<const QuantizedModule*>(seq[i].get()) || dynamic_cast<const Absorbed*>(seq[i].get()) ||
          dynamic_cast<const QuantStub*>(seq[i].get()))
        f(prefix + std::to_string(i), *seq[i]);
    }
  });
}

}  // namespace

int64_t parameter_count(const nn::Module& model) {
  int64_t n = model.num_parameters();
  ForEachRewritten(model, [&](const std::string&, const nn::Module& m) {
    if (auto* q = dynamic_cast<const QuantizedModule*>(&m)) {
      n += q->qweight().data.numel();
      if (q->float_bias().defined()) n += q->float_bias().numel();
    }
  });
  // A dynamically quantized LSTM or GRU released its float matrices for int8 copies.
  ForEachRnn(const_cast<nn::Module&>(model), "", [&](const std::string&, nn::RNNBase& rnn) {
    if (auto* q = dynamic_cast<const DynamicRnnLinears*>(rnn.linears())) n += q->parameter_count();
  });
  // An imported ONNX graph (core/onnx/import.cc) holds its weights as initializers, registered
  // as buffers: every one but the int64 ones (shapes, axes, indices) and the scalars (an
  // attention's scale, an epsilon) is a weight, int8 weights and int32 biases of a QDQ graph
  // included.
  if (model.type_name() == "OnnxGraph")
    for (const auto& [name, b] : model.named_buffers())
      if (b.dtype() != kInt64 && b.dim() > 0) n += b.numel();
  return n;
}

bool is_quantized(const nn::Module& model) {
  bool any = false;
  ForEachRnn(const_cast<nn::Module&>(model), "",
             [&](const std::string&, nn::RNNBase& rnn) { any = any || rnn.linears() != nullptr; });
  ForEachRewritten(model, [&](const std::string&, const nn::Module& m) {
    any = any || dynamic_cast<const QuantizedModule*>(&m) != nullptr;
  });
  return any;
}

std::string describe_quantization(const nn::Module& model) {
  Json out = Json::object();
  ForEachRewritten(model, [&](const std::string& path, const nn::Module& m) {
    if (auto* q = dynamic_cast<const QuantizedModule*>(&m)) {
      out[path] = Json::parse(q->describe());
    } else if (auto* s = dynamic_cast<const QuantStub*>(&m)) {
      if (s->converted())
        out[path] = Json{{"kind", "quant_stub"},
                         {"output", {{"scale", s->qparams().scale}, {"zero_point", s->qparams().zero_point}}}};
    } else {
      out[path] = Json{{"kind", "identity"}};
    }
  });
  ForEachRnn(const_cast<nn::Module&>(model), "", [&](const std::string& path, nn::RNNBase& rnn) {
    if (auto* q = dynamic_cast<const DynamicRnnLinears*>(rnn.linears()))
      out[path] = Json{{"kind", "rnn_dynamic"}, {"reduce_range", q->reduce_range()}};
  });
  return out.dump();
}

void append_quantized_state(const nn::Module& model, io::NamedTensors* tensors, io::Metadata* metadata) {
  ForEachRewritten(model, [&](const std::string& path, const nn::Module& m) {
    if (auto* q = dynamic_cast<const QuantizedModule*>(&m)) q->append_state(path + ".", tensors, metadata);
  });
  ForEachRnn(const_cast<nn::Module&>(model), "", [&](const std::string& path, nn::RNNBase& rnn) {
    if (auto* q = dynamic_cast<const DynamicRnnLinears*>(rnn.linears())) q->append_state(path + ".", tensors, metadata);
  });
}

namespace {

ActivationQParams ReadActivation(const Json& j, const std::string& path, const char* key) {
  ANVIL_CHECK(j.contains(key), "quantized layer ", path, ": no \"", key, "\" parameters");
  return ActivationQParams{j.at(key).at("scale").get<double>(), j.at(key).at("zero_point").get<int64_t>()};
}

std::shared_ptr<nn::Module> Rebuild(const std::string& path, const Json& j, const nn::Module& original,
                                    const io::Safetensors& file, std::vector<std::string>* consumed) {
  const std::string kind = j.at("kind").get<std::string>();
  if (kind == "identity") return std::make_shared<Absorbed>();
  if (kind == "quant_stub") return std::make_shared<QuantStub>(ReadActivation(j, path, "output"));
  const bool linear = kind == "linear" || kind == "linear_dynamic";
  ANVIL_CHECK(linear || kind == "conv2d", "quantized layer ", path, ": unknown kind \"", kind, "\"");
  const char* expected = linear ? "Linear" : "Conv2d";
  ANVIL_CHECK(original.type_name() == expected, "quantized layer ", path, ": the spec has a ", original.type_name(),
              " there, not a ", expected);
  const std::string w = path + ".weight", b = path + ".bias";
  ANVIL_CHECK(has_qtensor(file, w), "quantized layer ", path, ": no quantized tensor \"", w, "\"");
  QTensor weight = read_qtensor(file, w);
  for (const char* suffix : {"", ".scale", ".zero_point"}) consumed->push_back(w + suffix);
  Tensor bias;
  if (const Tensor* t = file.find(b)) {
    bias = *t;
    consumed->push_back(b);
  }
  if (linear) {
    if (kind == "linear_dynamic")
      return std::make_shared<DynamicQuantizedLinear>(std::move(weight), bias, j.value("reduce_range", true));
    return std::make_shared<QuantizedLinear>(std::move(weight), bias, ReadActivation(j, path, "input"),
                                             ReadActivation(j, path, "output"), j.value("relu", false));
  }
  if (kind == "conv2d") {
    const auto* conv = dynamic_cast<const nn::Conv2d*>(&original);
    ANVIL_CHECK(conv != nullptr, "quantized layer ", path, ": the spec has a ", original.type_name(),
                " there, not a Conv2d");
    return std::make_shared<QuantizedConv2d>(std::move(weight), bias, conv->options(), ReadActivation(j, path, "input"),
                                             ReadActivation(j, path, "output"), j.value("relu", false));
  }
  throw Error("quantized layer " + path + ": unknown kind \"" + kind + "\"");
}

}  // namespace

void apply_quantization(nn::Module& model, const std::string& description, const io::Safetensors& file,
                        std::vector<std::string>* consumed) {
  Json layers;
  try {
    layers = Json::parse(description);
  } catch (const Json::exception& e) {
    throw Error(std::string("bad quantization description: ") + e.what());
  }
  ANVIL_CHECK(layers.is_object(), "bad quantization description: expected an object of layers");
  size_t applied = 0;
  ForEachSequential(model, "", [&](nn::Sequential& seq, const std::string& prefix) {
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string path = prefix + std::to_string(i);
      const auto it = layers.find(path);
      if (it == layers.end()) continue;
      try {
        seq.replace(i, Rebuild(path, *it, *seq[i], file, consumed));
      } catch (const Json::exception& e) {
        throw Error("quantized layer " + path + ": bad description: " + e.what());
      }
      ++applied;
    }
  });
  ForEachRnn(model, "", [&](const std::string& path, nn::RNNBase& rnn) {
    const auto it = layers.find(path);
    if (it == layers.end()) return;
    ANVIL_CHECK(it->value("kind", "") == "rnn_dynamic", "quantized layer ", path, ": the spec has a ", rnn.type_name(),
                " there, not a ", it->value("kind", ""));
    DynamicRnnLinears::load(rnn, file, path + ".", it->value("reduce_range", true), consumed);
    ++applied;
  });
  ANVIL_CHECK(applied == layers.size(), "bad quantization description: ", layers.size() - applied,
              " of its layers name no layer of a Sequential in the model");
}

}  // namespace anvil::quant
