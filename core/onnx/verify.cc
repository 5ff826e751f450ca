#include "core/onnx/verify.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <opencv2/core.hpp>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/dnn.hpp>

#include "core/autograd/grad_mode.h"
#include "core/onnx/import.h"
#include "core/ops/functions.h"

namespace anvil::onnx {
namespace {

// The runtime's outputs `got` against Anvil's `expected` at one batch: the largest difference
// goes in the report, or a VerifyError when it exceeds absolute + relative * the largest
// output magnitude (NaN anywhere exceeds any bound).
void Compare(const float* got, const Tensor& expected, int64_t batch, double absolute, double relative,
             VerifyReport& report) {
  const float* pe = expected.data_ptr<float>();
  double worst = 0, magnitude = 0;
  for (int64_t i = 0; i < expected.numel(); ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - static_cast<double>(pe[i]));
    worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    magnitude = std::max(magnitude, std::abs(static_cast<double>(pe[i])));
  }
  const double tolerance = absolute + relative * magnitude;
  if (!(worst <= tolerance)) {
    throw VerifyError(anvil::detail::StrCat("the exported file's outputs in ", report.runtime,
                                            " differ from Anvil's by up to ", worst, " at batch ", batch,
                                            " (tolerance ", tolerance, "); the file is not returned"));
  }
  report.max_error.emplace_back(batch, worst);
}

}  // namespace

VerifyReport verify_in_opencv(const std::string& onnx_bytes, const exporter::Forward& forward,
                              const InputSignature& input, const std::vector<int64_t>& batches, double tolerance) {
  VerifyReport report;
  report.runtime = std::string("OpenCV DNN ") + CV_VERSION;
  if (input.dtype != kFloat32) {
    throw VerifyError(report.runtime + " takes float32 inputs only; this model's input is " +
                      std::string(dtype_name(input.dtype)) + " (token ids): verify it in onnxruntime");
  }
  // OpenCV logs its importer's progress and warnings to stderr; its errors come as exceptions.
  cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
  // One thread: a verification inside the server must not take every core from the requests
  // being served (and OpenCV's pool is not instrumented for ThreadSanitizer).
  cv::setNumThreads(1);
  cv::dnn::Net net;
  try {
    net = cv::dnn::readNetFromONNX(onnx_bytes.data(), onnx_bytes.size());
    net.setPreferableBackend(cv::dnn::DNN_BACKEND_OPENCV);
    net.setPreferableTarget(cv::dnn::DNN_TARGET_CPU);
  } catch (const cv::Exception& e) {
    throw VerifyError(report.runtime + " cannot load the graph: " + e.err);
  }
  for (int64_t batch : batches) {
    IntArray shape{batch};
    shape.insert(shape.end(), input.shape.begin(), input.shape.end());
    // Deterministic inputs in [-1, 1), independent of the process's generator.
    Tensor x = empty(shape, TensorOptions(kFloat32));
    float* px = x.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) px[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
    Tensor expected;
    {
      NoGradGuard no_grad;
      expected = forward({x})[0].to(kCPU).to(kFloat32).contiguous();
    }
    std::vector<int> dims(shape.begin(), shape.end());
    cv::Mat blob(static_cast<int>(dims.size()), dims.data(), CV_32F);
    std::memcpy(blob.ptr<float>(), px, static_cast<size_t>(x.numel()) * sizeof(float));
    cv::Mat out;
    try {
      net.setInput(blob);
      out = net.forward();
    } catch (const cv::Exception& e) {
      throw VerifyError(report.runtime + " cannot run the graph at batch " + std::to_string(batch) + ": " + e.err);
    }
    if (static_cast<int64_t>(out.total()) != expected.numel() || out.type() != CV_32F) {
      throw VerifyError(report.runtime + " returned " + std::to_string(out.total()) + " values at batch " +
                        std::to_string(batch) + ", Anvil " + std::to_string(expected.numel()));
    }
    Compare(out.ptr<float>(), expected, batch, /*absolute=*/tolerance, /*relative=*/0, report);
  }
  return report;
}

VerifyReport verify_by_reimport(const std::string& onnx_bytes, const exporter::Forward& forward,
                                const InputSignature& input, const std::vector<int64_t>& batches,
                                double relative_tolerance) {
  VerifyReport report;
  report.runtime = "Anvil's ONNX importer";
  ImportedModel imported;
  try {
    imported = import_model(onnx_bytes);
  } catch (const Error& e) {
    throw VerifyError(report.runtime + " cannot load the graph: " + e.what());
  }
  for (int64_t batch : batches) {
    IntArray shape{batch};
    shape.insert(shape.end(), input.shape.begin(), input.shape.end());
    // Deterministic inputs, independent of the process's generator: values in [-1, 1), or
    // token ids 0 and 1 (valid for any vocabulary).
    Tensor x = empty(shape, TensorOptions(input.dtype == kInt64 ? kInt64 : kFloat32));
    if (input.dtype == kInt64) {
      int64_t* px = x.data_ptr<int64_t>();
      for (int64_t i = 0; i < x.numel(); ++i) px[i] = i % 2;
    } else {
      float* px = x.data_ptr<float>();
      for (int64_t i = 0; i < x.numel(); ++i) px[i] = std::sin(0.37f * static_cast<float>(i) + 0.1f);
    }
    Tensor expected, got;
    {
      NoGradGuard no_grad;
      expected = forward({x})[0].to(kCPU).to(kFloat32).contiguous();
      try {
        got = imported.module->forward(x).to(kFloat32).contiguous();
      } catch (const Error& e) {
        throw VerifyError(report.runtime + " cannot run the graph at batch " + std::to_string(batch) + ": " + e.what());
      }
    }
    if (got.numel() != expected.numel()) {
      throw VerifyError(report.runtime + " returned " + std::to_string(got.numel()) + " values at batch " +
                        std::to_string(batch) + ", Anvil " + std::to_string(expected.numel()));
    }
    Compare(got.data_ptr<float>(), expected, batch, /*absolute=*/1e-4, relative_tolerance, report);
  }
  return report;
}

}  // namespace anvil::onnx
