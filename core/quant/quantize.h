// Post-training quantization of a model, after torch.ao.quantization's eager mode, as a C++
// API (libtorch has none):
//
//   quant::fuse_modules(*model);                   // Conv2d-BatchNorm2d(-ReLU), Linear-ReLU, ...
//   auto prepared = quant::prepare(*model, qconfig);  // observers in place
//   for (batch : calibration) model->forward(batch);
//   quant::convert(*model);                        // int8 QuantizedLinear / QuantizedConv2d
//
//   quant::quantize_dynamic(*model);               // Linear -> DynamicQuantizedLinear
//
// Rewriting works on the Sequentials of a model tree (the model specs build Sequentials, and
// residual bodies are Sequentials): a layer is replaced in place, keeping its index, so the
// quantized model's paths are the float model's. The quantize/dequantize boundaries are placed
// automatically: a quantized layer quantizes its input with the parameters of the quantized
// layer before it when only layers that keep the quint8 grid (ReLU, max pooling, flatten,
// dropout in eval, identity) lie between them, as PyTorch's quantized tensors flow, and with
// its own input observer's otherwise (the float input of the model, or after a layer that
// stays float). Hand-written models mark boundaries with QuantStub / DeQuantStub.
//
// describe_quantization() and apply_quantization() turn a quantized model's structure into
// JSON and back onto the float model built from the same spec: how the model archive stores
// an int8 model.
//
// Thread-safety: none; the model is being rewritten.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/io/safetensors.h"
#include "core/nn/conv.h"
#include "core/nn/module.h"
#include "core/nn/normalization.h"
#include "core/quant/observer.h"
#include "core/quant/quantized_layers.h"

namespace anvil::quant {

enum class ActivationObserver { kMinMax, kMovingAverageMinMax, kHistogram };
// "minmax", "moving_average_minmax", "histogram"; parsing refuses other names, listing these.
const char* activation_observer_name(ActivationObserver o);
ActivationObserver activation_observer_from_name(const std::string& name);

// Whether activations use 7 bits by default: on CPUs without VNNI, as PyTorch's qconfigs
// choose (vpmaddubsw's 16-bit sums could saturate). Anvil's kernels never saturate, so this is
// for parity with PyTorch's numbers, not for correctness.
bool default_reduce_range();

// torch.ao.quantization.QConfig: the activation observer and the weights' granularity. Weights
// are qint8 and symmetric (PyTorch's default_per_channel_weight_observer or
// default_weight_observer); activations quint8, affine.
// What was asked of a quantization cannot be done as given: its data or its options (a
// keep_float path that names no layer). The caller's input to fix, unlike a model that has
// nothing to quantize.
class QuantizationInputError : public Error {
 public:
  explicit QuantizationInputError(const std::string& msg) : Error(msg) {}
};
// A floating-point batch holding NaN or an infinity, refused by check_finite_batch: one such
// value makes an observer's range, and so every scale after it, NaN, and the gate's
// accuracies meaningless.
class NonFiniteInputError : public QuantizationInputError {
 public:
  explicit NonFiniteInputError(const std::string& msg) : QuantizationInputError(msg) {}
};
struct QConfig {
  ActivationObserver activation = ActivationObserver::kHistogram;
  bool per_channel_weights = true;
  std::optional<bool> reduce_range;  // unset: default_reduce_range()
  double averaging_constant = 0.01;  // moving-average observer
  // Layers left in float32 (PyTorch: qconfig None on the module), by the paths the reports use
  // ("3", "2.body.0"; for an LSTM or GRU its module path). A path that names no quantizable
  // layer is refused with the ones that exist.
  std::set<std::string> keep_float;
};

// Refuses (QuantizationInputError) a keep_float entry that is none of `found`, the names of the
// layers that could be quantized, listing them (in quotes with `quote`): "keep_float: \"9\" is
// not one of <what> (0, 2, 4)".
void check_keep_float(const QConfig& qconfig, const std::vector<std::string>& found, const std::string& what,
                      bool quote = false);

// The activation observer `qconfig` asks for (quint8, per tensor, affine), and the parameters
// an observer chose: what prepare/convert use, for callers quantizing other graphs.
std::unique_ptr<UniformObserver> make_activation_observer(const QConfig& qconfig);
ActivationQParams activation_qparams(const UniformObserver& observer);

// One rewrite made by fuse_modules: "0+1+2 -> ConvReLU2d (batch norm folded)".
struct Fusion {
  std::string description;
};

// Conv2d with BatchNorm2d's eval statistics folded in (torch.nn.utils.fuse_conv_bn_eval):
// w' = w * gamma / sqrt(var + eps) per output channel, b' = (b - mean) * gamma / sqrt(var + eps)
// + beta, in float32.
std::shared_ptr<nn::Conv2d> fuse_conv_bn_eval(const nn::Conv2d& conv, const nn::BatchNorm& bn);

// Float layers that are a fused pair: the output observer sees the ReLU's output and the
// quantized layer clamps at its zero point.
class LinearReLU : public nn::Module {
 public:
  explicit LinearReLU(std::shared_ptr<nn::Module> linear);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Module> linear;
};
class ConvReLU2d : public nn::Module {
 public:
  explicit ConvReLU2d(std::shared_ptr<nn::Conv2d> conv);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv;
};

// Fuses, in every Sequential of the tree (the model in eval mode, as PyTorch requires for
// folding): Conv2d-BatchNorm2d-ReLU, Conv2d-BatchNorm2d, Conv2d-ReLU, Linear-ReLU. The layers
// absorbed become Identity. Returns what was fused.
std::vector<Fusion> fuse_modules(nn::Module& model);

// Inserts observers at the input and output of every Linear, Conv2d, fused layer and QuantStub
// in the model's Sequentials (the model's calibration forward then records them). Returns the
// number of layers observed; an error when there is none.
int64_t prepare(nn::Module& model, const QConfig& qconfig = {});

// What convert did, layer by layer (for reports): the path, the kind ("linear", "conv2d",
// "float" with the reason), and the activation parameters chosen.
struct ConvertedLayer {
  std::string path;
  std::string kind;
  std::string reason;  // why a layer stayed float
};

// Replaces each observed layer by its int8 version, with the observed parameters. Requires
// prepare() and at least one calibration batch.
std::vector<ConvertedLayer> convert(nn::Module& model);

// torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8): every Linear
// in the model's Sequentials becomes a DynamicQuantizedLinear, weights per output channel
// (or per tensor). Returns the paths replaced.
std::vector<std::string> quantize_dynamic(nn::Module& model, const QConfig& qconfig = {});

// The quantized layers of a model, {"path": {"kind": ..., ...}}, with the layers absorbed by
// fusion as {"kind": "identity"}: the archive's "anvil.quant" entry.
std::string describe_quantization(const nn::Module& model);

// Rewrites `model` (the float model built from the archive's spec) into the structure
// `description` names, taking the quantized layers' tensors from `file`. The tensors it used
// are listed in `consumed` (the rest load into the float layers as usual).
void apply_quantization(nn::Module& model, const std::string& description, const io::Safetensors& file,
                        std::vector<std::string>* consumed);

// Appends every quantized layer's tensors (quantized companions) to `tensors`/`metadata`.
void append_quantized_state(const nn::Module& model, io::NamedTensors* tensors, io::Metadata* metadata);

// Whether any layer of the model is quantized.
bool is_quantized(const nn::Module& model);

// The model's weights and biases counted as its float version counts them: the float layers'
// parameters, each quantized Linear and Conv2d's int8 weight and float bias elements, and a
// dynamically quantized LSTM or GRU's int8 matrices and biases (none of which are nn
// parameters, so num_parameters() leaves them out). For an imported ONNX graph, whose weights
// are initializers: the elements of every initializer but the int64 ones (shapes, axes) and
// the scalars.
int64_t parameter_count(const nn::Module& model);

}  // namespace anvil::quant
