// What serving computes beyond the forward pass, as engine functions the service only
// converts to and from protos: a classifier's top classes, and an exported model's bytes.
// Thread-safety: free functions on their arguments; an ExportPayload is a value, read from any
// thread once built.
#pragma once

#include <cstddef>
#include <fstream>
#include <memory>
#include <string>

#include "core/nn/module.h"

namespace anvil::models {

// A classifier's k most probable classes per row of `logits` [rows, classes]: the softmax
// (in float32) and its k largest values, largest first. k is clamped to the class count;
// logits that are not 2-D are an anvil::Error.
struct TopClasses {
  Tensor classes;        // int64 [rows, k]
  Tensor probabilities;  // float32 [rows, k]
};
TopClasses top_classes(const Tensor& logits, int64_t k);

enum class ExportFormat { kNative, kSafetensors };

// An exported model's bytes, read in chunks: kNative streams the model archive from disk (any
// size, never whole in memory), kSafetensors serialises the module's weights once.
class ExportPayload {
 public:
  virtual ~ExportPayload() = default;
  // Up to n bytes into out; 0 at the end.
  virtual size_t read(char* out, size_t n) = 0;
  // "<base>.anvil" or "<base>.safetensors".
  const std::string& file_name() const { return file_name_; }

 protected:
  explicit ExportPayload(std::string file_name) : file_name_(std::move(file_name)) {}

 private:
  std::string file_name_;
};

// `archive_path`: the model archive (kNative); `module` and `model_name` (kSafetensors: the
// weights, and the name in the file's metadata). An unreadable archive is an anvil::Error.
std::unique_ptr<ExportPayload> open_export(ExportFormat format, const std::string& base_name,
                                           const std::string& archive_path, const nn::Module& module,
                                           const std::string& model_name);

// A payload of bytes made elsewhere (an ONNX file), named `file_name`.
std::unique_ptr<ExportPayload> bytes_export(std::string file_name, std::string bytes);

}  // namespace anvil::models
