// ONNX export (docs/onnx.md): a model's forward captured into a graph with symbolic axes,
// written as an ONNX ModelProto that ONNX's checker and full shape inference accept.
//
// Symbolic axes are found, not assumed: the forward is captured several times, with each
// symbolic size (the batch by default, more on request) varied in turn, plus once with all of
// them varied to confirm. Where the captures agree the graph is static; a size that changes
// with the symbols is written as a computation on the inputs' shapes (Shape, Gather, Mul,
// Concat), never as the number seen at capture. A model whose graph changes shape with a
// symbolic size (a branch on x.size(0)), reads a computed value (item(), nonzero), bakes a size
// into a constant (x / x.size(0)), or is in training mode is refused with a message naming the
// op and the fix.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/export/capture.h"
#include "core/nn/module.h"

namespace anvil::onnx {

inline constexpr int64_t kMinOpset = 13;
inline constexpr int64_t kMaxOpset = 17;  // the newest opset Debian's ONNX 1.12 checker knows
inline constexpr int64_t kDefaultOpset = 17;

// One input of the model: its shape without the batch dim, and its dtype.
struct InputSignature {
  std::string name = "input";
  IntArray shape;
  ScalarType dtype = kFloat32;
};

// A symbolic axis beyond the batch: `dim` counts the batch dim (input 0's dim 1 is the first
// dim after the batch).
struct SymbolicAxis {
  int64_t input = 0;
  int64_t dim = 1;
  std::string name;
};

struct ExportOptions {
  int64_t opset = kDefaultOpset;
  bool dynamic_batch = true;               // dim 0 of every input is the symbol "batch"
  std::vector<SymbolicAxis> dynamic_axes;  // e.g. {0, 1, "seq"}
  std::vector<std::string> output_names = {"output"};
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props
  std::string producer_version;
  std::string graph_name = "anvil";
  // Fold each inference batch norm into the convolution or linear layer that alone feeds it
  // (fewer nodes; equal up to float rounding).
  bool fold_batch_norm = false;
  Device device = kCPU;  // where the captures run (export_model: the module's parameters' device)
};

// Parses "NAME:DIM=SYMBOL" (or "INDEX:DIM=SYMBOL") against `inputs`; an anvil::Error says
// what was expected.
SymbolicAxis parse_dynamic_axis(const std::string& text, const std::vector<InputSignature>& inputs);

// Exports `module` (its one-tensor forward) for `inputs` and returns the serialized
// ModelProto. Throws exporter::CaptureError for a model that cannot be captured and
// anvil::Error for bad options.
std::string export_model(nn::Module& module, const std::vector<InputSignature>& inputs, const ExportOptions& options);

// The same for any forward: `constant_names` names the tensors it reads (for initializers).
std::string export_forward(const exporter::Forward& forward, const exporter::ConstantNames& constant_names,
                           const std::vector<InputSignature>& inputs, const ExportOptions& options);

}  // namespace anvil::onnx
