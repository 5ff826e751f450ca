#include "core/quant/serialize.h"

#include <nlohmann/json.hpp>

#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::quant {
namespace {

const Tensor& Companion(const io::Safetensors& file, const std::string& name, const std::string& suffix) {
  const Tensor* t = file.find(name + suffix);
  ANVIL_CHECK(t != nullptr, "quantized tensor '", name, "': the file has no tensor '", name, suffix, "'");
  return *t;
}

}  // namespace

std::string qtensor_metadata_key(const std::string& name) { return name + ".quant"; }

void append_qtensor(const std::string& name, const QTensor& q, io::NamedTensors* tensors, io::Metadata* metadata) {
  ANVIL_CHECK(q.data.defined() && q.data.dtype() == storage_dtype(q.dtype), "append_qtensor('", name, "'): expected ",
              qdtype_name(q.dtype), " integers stored as ", dtype_name(storage_dtype(q.dtype)));
  tensors->emplace_back(name, q.data.cpu().contiguous());
  // Scales made by observers are float32 values (PyTorch's too): stored in 4 bytes when that
  // loses nothing, so a per-channel layer's parameters cost 8 bytes per channel, not 16.
  const Tensor scales = q.scales.cpu().to(kFloat64).contiguous();
  const bool float32_exact = equal(scales.to(kFloat32).to(kFloat64), scales);
  tensors->emplace_back(name + ".scale", float32_exact ? scales.to(kFloat32) : scales);
  tensors->emplace_back(name + ".zero_point", q.zero_points.cpu().to(kInt32).contiguous());
  const nlohmann::json entry = {
      {"dtype", qdtype_name(q.dtype)}, {"qscheme", qscheme_name(q.qscheme)}, {"axis", q.axis}};
  (*metadata)[qtensor_metadata_key(name)] = entry.dump();
}

bool has_qtensor(const io::Safetensors& file, const std::string& name) {
  return file.metadata.count(qtensor_metadata_key(name)) > 0;
}

QTensor read_qtensor(const io::Safetensors& file, const std::string& name) {
  const auto it = file.metadata.find(qtensor_metadata_key(name));
  ANVIL_CHECK(it != file.metadata.end(), "quantized tensor '", name, "': the metadata has no entry '",
              qtensor_metadata_key(name), "'");
  const nlohmann::json entry = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  ANVIL_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("qscheme") && entry.contains("axis") &&
                  entry["dtype"].is_string() && entry["qscheme"].is_string() && entry["axis"].is_number_integer(),
              "quantized tensor '", name, "': expected a metadata entry {\"dtype\", \"qscheme\", \"axis\"}, got '",
              it->second, "'");
  QTensor q;
  q.dtype = qdtype_from_name(entry["dtype"].get<std::string>());
  q.qscheme = qscheme_from_name(entry["qscheme"].get<std::string>());
  q.axis = entry["axis"].get<int64_t>();
  q.data = Companion(file, name, "");
  q.scales = Companion(file, name, ".scale");
  q.zero_points = Companion(file, name, ".zero_point");
  ANVIL_CHECK((q.scales.dtype() == kFloat32 || q.scales.dtype() == kFloat64) &&
                  (q.zero_points.dtype() == kInt32 || q.zero_points.dtype() == kInt64),
              "quantized tensor '", name, "': expected float32 or float64 scales and int32 or int64 zero points, got ",
              dtype_name(q.scales.dtype()), " and ", dtype_name(q.zero_points.dtype()));
  q.scales = q.scales.to(kFloat64);
  q.zero_points = q.zero_points.to(kInt64);
  ANVIL_CHECK(q.data.dtype() == storage_dtype(q.dtype), "quantized tensor '", name, "': ", qdtype_name(q.dtype),
              " is stored as ", dtype_name(storage_dtype(q.dtype)), ", got ", dtype_name(q.data.dtype()));
  const int64_t channels =
      is_per_channel(q.qscheme) ? (q.axis >= 0 && q.axis < q.data.dim() ? q.data.size(q.axis) : -1) : 1;
  ANVIL_CHECK(channels >= 0, "quantized tensor '", name, "': axis ", q.axis, " is out of range for a tensor of ",
              q.data.dim(), " dimensions");
  ANVIL_CHECK(is_per_channel(q.qscheme) || q.axis == -1, "quantized tensor '", name,
              "': a per-tensor scheme has axis -1, got ", q.axis);
  ANVIL_CHECK(q.scales.dim() == 1 && q.scales.numel() == channels && q.zero_points.dim() == 1 &&
                  q.zero_points.numel() == channels,
              "quantized tensor '", name, "': expected ", channels, " scales and zero points, got ", q.scales.numel(),
              " and ", q.zero_points.numel());
  return q;
}

}  // namespace anvil::quant
