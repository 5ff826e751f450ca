// Post-training quantization as a service runs it: quantize a trained model's copy (dynamic,
// or static with calibration on training batches), measure both versions on the validation
// split, and refuse the int8 one when it loses more than `max_accuracy_drop` points -- the
// practitioner's rule (the pitfalls guide's section 6.3: a quantized model that loses more
// than a point or two is not shipped; static int8 without a representative calibration set
// collapses). The report names the layer with the worst quantization error (its output's
// SQNR against the float layer's on the same input), the one to keep in float first.
//
// Thread-safety: none; runs on the thread that owns the model.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data/dataloader.h"
#include "core/nn/module.h"
#include "core/quant/quantize.h"

namespace anvil::quant {

enum class PtqMode { kDynamic, kStatic };
// "dynamic" / "static"; other names are refused, listing these.
PtqMode ptq_mode_from_name(const std::string& name);
const char* ptq_mode_name(PtqMode mode);

struct PtqOptions {
  PtqMode mode = PtqMode::kStatic;
  int64_t calibration_batches = 16;  // static: training batches the observers see
  QConfig qconfig;
  double max_accuracy_drop = 1.0;  // percentage points of validation accuracy
  std::string input_key = "input", target_key = "target";
};

// One quantized layer's error: 10 log10(sum y^2 / sum (y - y_q)^2) over a calibration
// batch, y the float layer's output and y_q the int8 layer's on the same float input.
struct LayerError {
  std::string path;
  std::string type;
  double sqnr_db = 0;
};

// Throws NonFiniteInputError naming `what` ("calibration", "validation"), the batch and the
// first sample with such a value.
void check_finite_batch(const Tensor& x, const char* what, int64_t batch);

struct PtqResult {
  std::shared_ptr<nn::Module> model;                    // the int8 model (eval mode)
  std::optional<double> float_accuracy, int8_accuracy;  // [0, 1]; none for non-classifiers
  bool passed = false;                                  // within max_accuracy_drop
  std::vector<LayerError> layers;                       // worst (lowest SQNR) first
  std::vector<Fusion> fusions;
  std::vector<ConvertedLayer> converted;
  // Static: the calibration batches the observers saw (at most calibration_batches; fewer
  // when the loader ran out first); dynamic: 0.
  int64_t calibration_batches = 0;
  // One line: both accuracies, the drop and the verdict; on failure the worst layer and the
  // advice to keep it in float.
  std::string summary;
};

// The gate's verdict on the two accuracies ([0, 1]; either none: not a classifier, no gate),
// in the words of PtqResult::summary (without the advice).
struct GateVerdict {
  bool passed = false;
  std::string summary;
};
GateVerdict accuracy_gate(std::optional<double> float_accuracy, std::optional<double> int8_accuracy, PtqMode mode,
                          double max_accuracy_drop);

// Quantizes `copy` (a second instance of `trained`'s architecture; its weights are set from
// `trained`) and evaluates both. `calibration` feeds the observers (static) and the SQNR
// batch; `validation` gives the accuracies. Throws anvil::Error when nothing can be quantized.
PtqResult post_training_quantize(nn::Module& trained, std::shared_ptr<nn::Module> copy, data::DataLoader& calibration,
                                 data::DataLoader& validation, const PtqOptions& options);

// The accuracy of `model` over `loader` (argmax over dim 1 against int64 targets), none when
// the outputs are not class scores.
std::optional<double> classification_accuracy(nn::Module& model, data::DataLoader& loader,
                                              const std::string& input_key = "input",
                                              const std::string& target_key = "target");

}  // namespace anvil::quant
