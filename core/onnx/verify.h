// Verification of an exported ONNX file in a second, independent runtime: OpenCV's DNN module
// (Debian libopencv-dnn-dev 4.6, `cv::dnn::readNetFromONNX`). The file runs at batch 1 and 7
// on the same inputs as Anvil's forward, and the largest difference is reported.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/onnx/export.h"

namespace anvil::onnx {

// The file could not be verified: OpenCV could not load or run it, or its outputs differ.
class VerifyError : public Error {
 public:
  explicit VerifyError(const std::string& msg) : Error(msg) {}
};

struct VerifyReport {
  std::string runtime;                                // "OpenCV DNN 4.6.0"
  std::vector<std::pair<int64_t, double>> max_error;  // (batch, largest absolute difference)
};

// Runs `onnx_bytes` in OpenCV DNN against `forward` (the model the file was exported from) at
// each of `batches`; throws VerifyError naming the batch and the difference when it exceeds
// `tolerance`, or OpenCV's own message when it cannot run the graph. One float32 input.
VerifyReport verify_in_opencv(const std::string& onnx_bytes, const exporter::Forward& forward,
                              const InputSignature& input, const std::vector<int64_t>& batches = {1, 7},
                              double tolerance = 1e-4);

// The same check for a file OpenCV DNN 4.6 cannot load (a QDQ int8 graph: it has no
// DequantizeLinear with a per-channel axis, no DynamicQuantizeLinear): the file read back by
// Anvil's own ONNX importer (import.h), which parses it and runs its nodes, or the int8 layers
// it fuses them into, independently of the exporter that wrote it. The outputs may differ by a
// few quantization steps, so the bound is relative: `relative_tolerance` of the largest
// output magnitude (plus 1e-4). Float32 or int64 (token id) inputs.
VerifyReport verify_by_reimport(const std::string& onnx_bytes, const exporter::Forward& forward,
                                const InputSignature& input, const std::vector<int64_t>& batches = {1, 7},
                                double relative_tolerance = 0.02);

}  // namespace anvil::onnx
