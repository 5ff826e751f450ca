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

}  // namespace anvil::onnx
