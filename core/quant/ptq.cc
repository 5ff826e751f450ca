#include "core/quant/ptq.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

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

// Each top-level layer of the int8 model against the float one, on the float activations.
std::vector<LayerError> LayerErrors(nn::Module& float_model, nn::Module& int8_model, const Tensor& batch) {
  std::vector<LayerError> out;
  auto* f = dynamic_cast<nn::Sequential*>(&float_model);
  auto* q = dynamic_cast<nn::Sequential*>(&int8_model);
  if (f == nullptr || q == nullptr || f->size() != q->size()) return out;
  Tensor x = batch;
  for (size_t i = 0; i < f->size(); ++i) {
    const Tensor y = (*f)[i]->forward(x);
    if (dynamic_cast<QuantizedModule*>((*q)[i].get()) != nullptr) {
      // A layer whose float twin was fused with the ReLU after it is compared after that ReLU.
      Tensor reference = y;
      auto* ql = dynamic_cast<QuantizedLinear*>((*q)[i].get());
      auto* qc = dynamic_cast<QuantizedConv2d*>((*q)[i].get());
      const bool relu = (ql != nullptr && ql->relu()) || (qc != nullptr && qc->relu());
      if (relu) reference = y.relu();
      // With a folded batch norm the float layer's output is compared after the batch norm.
      if (qc != nullptr && i + 1 < f->size() && (*f)[i + 1]->type_name() == "BatchNorm2d") {
        reference = (*f)[i + 1]->forward(y);
        if (relu) reference = reference.relu();
      }
      out.push_back({std::to_string(i), (*q)[i]->type_name(), Sqnr(reference, (*q)[i]->forward(x))});
    }
    x = y;
  }
  std::sort(out.begin(), out.end(), [](const LayerError& a, const LayerError& b) { return a.sqnr_db < b.sqnr_db; });
  return out;
}

}  // namespace

PtqMode ptq_mode_from_name(const std::string& name) {
  if (name == "dynamic") return PtqMode::kDynamic;
  if (name == "static") return PtqMode::kStatic;
  throw Error("unknown quantization mode \"" + name + "\": expected \"dynamic\" or \"static\"");
}

const char* ptq_mode_name(PtqMode mode) { return mode == PtqMode::kDynamic ? "dynamic" : "static"; }

std::optional<double> classification_accuracy(nn::Module& model, data::DataLoader& loader, const std::string& input_key,
                                              const std::string& target_key) {
  NoGradGuard no_grad;
  int64_t n = 0, correct = 0;
  for (auto& b : loader) {
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
    for (auto& b : calibration) {
      sample = b[options.input_key];
      break;
    }
  } else {
    r.fusions = fuse_modules(*copy);
    prepare(*copy, options.qconfig);
    int64_t seen = 0;
    for (auto& b : calibration) {
      if (seen == options.calibration_batches) break;
      const Tensor x = b[options.input_key];
      if (!sample.defined()) sample = x;
      copy->forward(x);
      ++seen;
    }
    ANVIL_CHECK(seen > 0, "quantize (static): the calibration loader produced no batch");
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
      std::snprintf(buf, sizeof(buf), ". The worst quantized layer is %s (%s, SQNR %.1f dB): keep it in float",
                    r.layers.front().path.c_str(), r.layers.front().type.c_str(), r.layers.front().sqnr_db);
      r.summary += buf;
    }
    if (options.mode == PtqMode::kStatic)
      r.summary += ", or calibrate on more representative batches (calibration_batches " +
                   std::to_string(options.calibration_batches) + ")";
  }
  return r;
}

}  // namespace anvil::quant
