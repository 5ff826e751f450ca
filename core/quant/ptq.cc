#include "core/quant/ptq.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>

#include "core/autograd/grad_mode.h"
#include "core/nn/container.h"
#include "core/quant/quantized_layers.h"
#include "core/util/error.h"

namespace anvil::quant {
namespace {

std::string Percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%%", 100.0 * v);
  return buf;
}

double Sqnr(const Tensor& reference, const Tensor& got) {
  const double signal = reference.to(kFloat64).square().sum().item<double>();
  const double noise = (reference.to(kFloat64) - got.to(kFloat64)).square().sum().item<double>();
  if (noise == 0) return std::numeric_limits<double>::infinity();
  if (signal == 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

// Records the input of the float layer it stands in for, and runs that layer.
class InputRecorder final : public nn::Module {
 public:
  InputRecorder(std::shared_ptr<nn::Module> inner, Tensor* input)
      : nn::Module("InputRecorder"), inner_(std::move(inner)), input_(input) {}
  Tensor forward(const Tensor& x) override {
    *input_ = x;
    return inner_->forward(x);
  }

 private:
  std::shared_ptr<nn::Module> inner_;
  Tensor* input_;
};

// Each pair of Sequentials at the same place in the float and int8 models (the model itself, a
// residual block's body, ...), with its path ("" for the model, else "2.body").
void ForEachSequentialPair(nn::Module& f, nn::Module& q, const std::string& path,
                           const std::function<void(nn::Sequential&, nn::Sequential&, const std::string&)>& fn) {
  auto* fs = dynamic_cast<nn::Sequential*>(&f);
  auto* qs = dynamic_cast<nn::Sequential*>(&q);
  if (fs != nullptr && qs != nullptr && fs->size() == qs->size()) fn(*fs, *qs, path);
  const auto q_children = q.named_children();
  for (const auto& [name, child] : f.named_children()) {
    for (const auto& [q_name, q_child] : q_children) {
      if (q_name == name) ForEachSequentialPair(*child, *q_child, path.empty() ? name : path + "." + name, fn);
    }
  }
}

// Each quantized layer of the int8 model, wherever it sits, against its float twin on the same
// input: the input the float model gives that layer on `batch`, caught by an InputRecorder put
// in the float layer's place for one forward (and taken out again).
std::vector<LayerError> LayerErrors(nn::Module& float_model, nn::Module& int8_model, const Tensor& batch) {
  struct Site {
    nn::Sequential* f;
    nn::Sequential* q;
    size_t i;
    std::string path;
    std::shared_ptr<nn::Module> float_layer;
    Tensor input;
  };
  std::vector<std::unique_ptr<Site>> sites;
  ForEachSequentialPair(float_model, int8_model, "", [&](nn::Sequential& f, nn::Sequential& q, const std::string& p) {
    for (size_t i = 0; i < q.size(); ++i) {
      if (dynamic_cast<QuantizedModule*>(q[i].get()) == nullptr) continue;
      sites.push_back(std::make_unique<Site>(
          Site{&f, &q, i, p.empty() ? std::to_string(i) : p + "." + std::to_string(i), f[i], Tensor()}));
    }
  });
  {
    // The recorders leave the float model as it was, whatever the forward does.
    struct Restore {
      std::vector<std::unique_ptr<Site>>& sites;
      ~Restore() {
        for (auto& s : sites) s->f->replace(s->i, s->float_layer);
      }
    } restore{sites};
    for (auto& s : sites) s->f->replace(s->i, std::make_shared<InputRecorder>(s->float_layer, &s->input));
    float_model.forward(batch);
  }
  std::vector<LayerError> out;
  for (const auto& s : sites) {
    if (!s->input.defined()) continue;  // a layer the forward did not reach
    nn::Sequential& f = *s->f;
    const Tensor y = s->float_layer->forward(s->input);
    // A layer whose float twin was fused with the ReLU after it is compared after that ReLU.
    Tensor reference = y;
    auto* ql = dynamic_cast<QuantizedLinear*>((*s->q)[s->i].get());
    auto* qc = dynamic_cast<QuantizedConv2d*>((*s->q)[s->i].get());
    const bool relu = (ql != nullptr && ql->relu()) || (qc != nullptr && qc->relu());
    if (relu) reference = y.relu();
    // With a folded batch norm the float layer's output is compared after the batch norm.
    if (qc != nullptr && s->i + 1 < f.size() && f[s->i + 1]->type_name() == "BatchNorm2d") {
      reference = f[s->i + 1]->forward(y);
      if (relu) reference = reference.relu();
    }
    out.push_back({s->path, (*s->q)[s->i]->type_name(), Sqnr(reference, (*s->q)[s->i]->forward(s->input))});
  }
  std::sort(out.begin(), out.end(), [](const LayerError& a, const LayerError& b) { return a.sqnr_db < b.sqnr_db; });
  return out;
}

}  // namespace

// Quantization needs finite values: one NaN or infinity in a calibration batch makes its
// observer's range, and so every scale after it, NaN; in a validation batch it makes the gate's
// accuracies meaningless.
void check_finite_batch(const Tensor& x, const char* what, int64_t batch) {
  if (!x.defined() || !is_floating_point(x.dtype()) || x.numel() == 0) return;
  const Tensor values = x.to(kCPU).to(kFloat32).contiguous();
  const float* v = values.data_ptr<float>();
  int64_t bad = 0, first = -1;
  for (int64_t i = 0; i < values.numel(); ++i) {
    if (std::isfinite(v[i])) continue;
    if (first < 0) first = i;
    ++bad;
  }
  if (bad == 0) return;
  throw NonFiniteInputError(detail::StrCat(
      "quantize: ", what, " batch ", batch, " holds ", std::isnan(v[first]) ? "NaN" : "an infinite value", " (", bad,
      " of its ", values.numel(), " values, the first in sample ",
      first / (values.dim() == 0 ? 1 : std::max<int64_t>(1, values.numel() / std::max<int64_t>(1, values.size(0)))),
      "): int8 quantization needs finite inputs"));
}

PtqMode ptq_mode_from_name(const std::string& name) {
  if (name == "dynamic") return PtqMode::kDynamic;
  if (name == "static") return PtqMode::kStatic;
  throw Error("unknown quantization mode \"" + name + "\": expected \"dynamic\" or \"static\"");
}

const char* ptq_mode_name(PtqMode mode) { return mode == PtqMode::kDynamic ? "dynamic" : "static"; }

std::optional<double> classification_accuracy(nn::Module& model, data::DataLoader& loader, const std::string& input_key,
                                              const std::string& target_key) {
  NoGradGuard no_grad;
  int64_t n = 0, correct = 0, batches = 0;
  for (auto& b : loader) {
    check_finite_batch(b[input_key], "validation", batches++);
    const Tensor out = model.forward(b[input_key]);
    const Tensor y = b[target_key];
    if (out.dim() != 2 || y.dtype() != kInt64 || y.dim() != 1) return std::nullopt;
    correct += (out.argmax(1) == y.to(out.device())).sum().item<int64_t>();
    n += y.size(0);
  }
  if (n == 0) return std::nullopt;
  return static_cast<double>(correct) / static_cast<double>(n);
}

GateVerdict accuracy_gate(std::optional<double> float_accuracy, std::optional<double> int8_accuracy, PtqMode mode,
                          double max_accuracy_drop) {
  GateVerdict v;
  const std::string name = ptq_mode_name(mode);
  if (!float_accuracy || !int8_accuracy) {
    v.passed = true;  // nothing to gate on: not a classifier
    v.summary = "int8 (" + name + "): the model's outputs are not class scores; no accuracy gate applies";
    return v;
  }
  const double drop = 100.0 * (*float_accuracy - *int8_accuracy);
  v.passed = drop <= max_accuracy_drop;
  char buf[160];
  std::snprintf(buf, sizeof(buf), "int8 (%s) accuracy %s against float32 %s: %s %.2f points (limit %.2f)", name.c_str(),
                Percent(*int8_accuracy).c_str(), Percent(*float_accuracy).c_str(),
                drop >= 0 ? "a loss of" : "a gain of", std::fabs(drop), max_accuracy_drop);
  v.summary = buf;
  return v;
}

PtqResult post_training_quantize(nn::Module& trained, std::shared_ptr<nn::Module> copy, data::DataLoader& calibration,
                                 data::DataLoader& validation, const PtqOptions& options) {
  ANVIL_CHECK(copy != nullptr, "post_training_quantize: no model copy to quantize");
  ANVIL_CHECK(options.calibration_batches > 0, "post_training_quantize: calibration_batches must be positive, got ",
              options.calibration_batches);
  trained.eval();
  copy->load_state_dict(trained.state_dict());
  copy->eval();
  PtqResult r;
  NoGradGuard no_grad;
  Tensor sample;  // one calibration batch, for the per-layer errors
  if (options.mode == PtqMode::kDynamic) {
    ANVIL_CHECK(!quantize_dynamic(*copy, options.qconfig).empty(),
                "quantize (dynamic): the model has no Linear layer in a Sequential to quantize");
    // No calibration, but the batches static quantization would read are checked as it checks
    // them: both modes refuse the same data. The first is the per-layer errors' sample.
    int64_t seen = 0;
    for (auto& b : calibration) {
      if (seen == options.calibration_batches) break;
      check_finite_batch(b[options.input_key], "calibration", seen++);
      if (!sample.defined()) sample = b[options.input_key];
    }
  } else {
    r.fusions = fuse_modules(*copy);
    prepare(*copy, options.qconfig);
    int64_t seen = 0;
    for (auto& b : calibration) {
      if (seen == options.calibration_batches) break;
      const Tensor x = b[options.input_key];
      check_finite_batch(x, "calibration", seen);
      if (!sample.defined()) sample = x;
      copy->forward(x);
      ++seen;
    }
    ANVIL_CHECK(seen > 0, "quantize (static): the calibration loader produced no batch");
    r.calibration_batches = seen;
    r.converted = convert(*copy);
  }
  r.model = copy;
  r.float_accuracy = classification_accuracy(trained, validation, options.input_key, options.target_key);
  r.int8_accuracy = classification_accuracy(*copy, validation, options.input_key, options.target_key);
  if (sample.defined()) r.layers = LayerErrors(trained, *copy, sample);
  const GateVerdict verdict = accuracy_gate(r.float_accuracy, r.int8_accuracy, options.mode, options.max_accuracy_drop);
  r.passed = verdict.passed;
  r.summary = verdict.summary;
  if (!r.passed) {
    r.summary += "; not registered for serving";
    if (!r.layers.empty()) {
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    ". The worst quantized layer is %s (%s, SQNR %.1f dB): keep it in float (keep_float \"%s\")",
                    r.layers.front().path.c_str(), r.layers.front().type.c_str(), r.layers.front().sqnr_db,
                    r.layers.front().path.c_str());
      r.summary += buf;
    }
    if (options.mode == PtqMode::kStatic)
      r.summary += ", or calibrate on more representative batches (calibration_batches " +
                   std::to_string(options.calibration_batches) + ")";
  }
  return r;
}

}  // namespace anvil::quant
