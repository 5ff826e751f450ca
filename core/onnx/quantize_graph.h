// Static int8 quantization of an imported float ONNX graph: the same post-training recipe as
// Anvil's own models (core/quant/quantize.h), applied to the graph.
//
// Every Conv (2-D, groups 1, symmetric padding), Gemm (alpha = beta = 1, no transA) and
// MatMul whose weights are a float initializer is quantized:
//   - its weights: qint8, symmetric, per output channel (or per tensor), as quantize_weight;
//   - its input and output (after a ReLU that only it feeds, and a bias Add after a MatMul):
//     quint8 with the parameters an activation observer chose over the calibration batches;
//   - its bias: int32 in steps of s_x * s_w.
// The result is a QDQ model (QuantizeLinear / DequantizeLinear around the float operators,
// the form Anvil exports for its int8 models and onnxruntime fuses into QLinearConv / QGemm),
// which Anvil's importer runs on its int8 kernels (qdq_fusion.h). A layer's output grid is
// shared by the next layer that reads it, as convert() arranges for Sequentials.
//
// Thread-safety: none needed; a pure function of its arguments (it runs the graph on the
// calling thread).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/data/dataloader.h"
#include "core/quant/ptq.h"
#include "core/quant/quantize.h"
#include "core/tensor/tensor.h"

namespace anvil::onnx {

struct GraphQuantization {
  std::string model;                // the QDQ model's bytes
  std::vector<std::string> layers;  // the nodes quantized: `Conv "conv1" (relu, per channel)`
  std::vector<std::string> kept;    // candidate nodes left in float, each with the reason
};

// Quantizes the float ONNX model `bytes` (as import_model accepts it), calibrating on
// `calibration` (input batches, each the graph's input with its batch dimension; at least one).
// Throws anvil::Error when the model does not import, a batch does not run, or there is no
// node to quantize (the message lists what was found).
GraphQuantization quantize_onnx_static(const std::string& bytes, const std::vector<Tensor>& calibration,
                                       const quant::QConfig& qconfig = {});

// Dynamic int8 quantization of the float ONNX model `bytes`, quantize_dynamic's recipe for a
// graph: every Gemm (alpha = beta = 1, no transA) and MatMul whose weights are a float
// initializer becomes
//   DynamicQuantizeLinear(x) -> MatMulInteger(x_q, W: int8, x_zp) -> Cast -> Mul(x_scale * w_scale)
//   [-> Add(bias)]
// with qint8 symmetric weights (per output channel unless qconfig says per tensor): the form
// Anvil exports for its dynamic layers and onnxruntime's dynamic quantizer writes, which
// onnxruntime fuses into DynamicQuantizeMatMul and Anvil's importer into a
// DynamicQuantizedLinear with ONNX's activation formula (qdq_fusion.h). No calibration: each
// batch's range picks its activations' grid. Convolutions stay float (listed in `kept`), as
// quantize_dynamic leaves Conv2d. Throws when the model does not import, is quantized
// already, or has no Gemm/MatMul to quantize.
GraphQuantization quantize_onnx_dynamic(const std::string& bytes, const quant::QConfig& qconfig = {});

// Post-training quantization of an imported graph as the service runs it (the counterpart of
// quant::post_training_quantize): static (calibrated on up to options.calibration_batches
// batches of `calibration`) or dynamic (`calibration` unread), both graphs measured on
// `validation` and gated by options.max_accuracy_drop. On failure the summary names the
// quantized layers and the advice.
struct OnnxPtqResult {
  GraphQuantization graph;
  std::optional<double> float_accuracy, int8_accuracy;
  bool passed = false;
  std::string summary;
  int64_t calibration_batches = 0;  // static: the batches calibrated on (fewer than asked when the data ran out)
};
OnnxPtqResult post_training_quantize_onnx(const std::string& bytes, data::DataLoader& calibration,
                                          data::DataLoader& validation, const quant::PtqOptions& options);

// `bytes` with metadata_props entries set (replaced when the key exists).
std::string with_metadata(const std::string& bytes, const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace anvil::onnx
