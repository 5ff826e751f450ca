// ONNX import (docs/onnx.md, "Import"): an ONNX file from any exporter becomes an nn::Module
// that runs the graph with Anvil's ops, so models trained elsewhere are served like Anvil's.
//
// The file is untrusted input: its size is capped before parsing, every initializer's byte
// size must agree with its shape, external data is refused (no path in a model file is ever
// opened), nodes must come in an order where each reads only values made before it (which
// also rules out cycles), and every operator must be one the importer knows: an unknown one
// is listed by name with its node names, and nothing is returned.
//
// Thread-safety: importing is reentrant (no shared state); an imported module is a Module,
// run by one thread at a time like any other.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/nn/module.h"
#include "core/onnx/export.h"

namespace anvil::onnx {

class ImportError : public Error {
 public:
  explicit ImportError(const std::string& msg) : Error(msg) {}
};

inline constexpr int64_t kMinImportOpset = 13;
inline constexpr int64_t kMaxImportOpset = 18;
inline constexpr size_t kDefaultMaxImportBytes = size_t{512} << 20;

struct ImportedModel {
  std::shared_ptr<nn::Module> module;      // in eval mode; forward(x) runs the graph
  InputSignature input;                    // the one graph input: shape without the batch dim
  std::vector<std::string> symbolic_dims;  // per input dim (batch first): its dim_param, or ""
  IntArray output_shape;                   // the first output's shape without the batch dim (-1: symbolic)
  std::string output_name;
  int64_t opset = 0;
  std::string producer;                                       // producer_name producer_version
  std::vector<std::pair<std::string, std::string>> metadata;  // metadata_props
  std::vector<std::string> operators;                         // the operator types it uses, sorted
  // The int8 layers found in a QDQ graph and run by Anvil's int8 kernels (qdq_fusion.h), one
  // description each ("Conv \"conv1\" -> QuantizedConv2d (relu, per channel)"); empty for a
  // float graph.
  std::vector<std::string> int8_layers;
};

// Parses and checks `bytes` (at most `max_bytes`); throws ImportError saying what is wrong.
ImportedModel import_model(const std::string& bytes, size_t max_bytes = kDefaultMaxImportBytes);

// Runs an imported graph (ImportedModel::module) on `x` as forward() does, handing each value
// named in `names` (input, initializer-free node outputs) to `observe` as it is made: the
// calibration of an imported graph's quantization reads its intermediate values this way.
// Throws anvil::Error for another module or an unknown name.
using ValueObserver = std::function<void(const std::string& name, const Tensor& value)>;
Tensor run_observing(nn::Module& graph, const Tensor& x, const std::set<std::string>& names,
                     const ValueObserver& observe);

// The operators the importer runs, for help texts and errors.
std::vector<std::string> importable_operators();

}  // namespace anvil::onnx
