#include "core/models/serving.h"

#include <algorithm>
#include <cstring>

#include "core/io/safetensors.h"
#include "core/ops/functions.h"
#include "core/quant/quantize.h"
#include "core/util/error.h"

namespace anvil::models {

TopClasses top_classes(const Tensor& logits, int64_t k) {
  ANVIL_CHECK(logits.dim() == 2, "top classes: expected logits [rows, classes], got ", shape_str(logits.sizes()));
  ANVIL_CHECK(k >= 1, "top classes: expected k >= 1, got ", k);
  k = std::min<int64_t>(k, logits.size(1));
  const Tensor probs = softmax(logits.to(kFloat32), 1);
  auto [values, indices] = topk(probs, k, 1);
  return {indices.contiguous(), values.contiguous()};
}

namespace {

class ArchiveFile final : public ExportPayload {
 public:
  ArchiveFile(std::string name, const std::string& path)
      : ExportPayload(std::move(name)), file_(path, std::ios::binary) {
    ANVIL_CHECK(file_.good(), "export: the model archive is unreadable");
  }
  size_t read(char* out, size_t n) override {
    file_.read(out, static_cast<std::streamsize>(n));
    return static_cast<size_t>(file_.gcount());
  }

 private:
  std::ifstream file_;
};

class Bytes final : public ExportPayload {
 public:
  Bytes(std::string name, std::string bytes) : ExportPayload(std::move(name)), bytes_(std::move(bytes)) {}
  size_t read(char* out, size_t n) override {
    const size_t k = std::min(n, bytes_.size() - at_);
    std::memcpy(out, bytes_.data() + at_, k);
    at_ += k;
    return k;
  }

 private:
  std::string bytes_;
  size_t at_ = 0;
};

}  // namespace

std::unique_ptr<ExportPayload> open_export(ExportFormat format, const std::string& base_name,
                                           const std::string& archive_path, const nn::Module& module,
                                           const std::string& model_name) {
  if (format == ExportFormat::kNative) return std::make_unique<ArchiveFile>(base_name + ".anvil", archive_path);
  io::NamedTensors tensors = module.state_dict().tensors;
  io::Metadata metadata = {{"format", "pt"}, {"anvil.model", model_name}};
  // An int8 model's quantized layers hold their weights outside the float state: their int8
  // tensors go in with their scale and zero-point companions (core/quant/serialize.h names them).
  if (quant::is_quantized(module)) quant::append_quantized_state(module, &tensors, &metadata);
  return std::make_unique<Bytes>(base_name + ".safetensors", io::serialize_safetensors(tensors, metadata));
}

std::unique_ptr<ExportPayload> bytes_export(std::string file_name, std::string bytes) {
  return std::make_unique<Bytes>(std::move(file_name), std::move(bytes));
}

}  // namespace anvil::models
