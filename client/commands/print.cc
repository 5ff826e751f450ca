#include "client/commands/print.h"

#include <cstdio>
#include <ctime>
#include <string>

namespace anvil::client {
namespace {

std::string StateName(v1::JobState s) { return v1::JobState_Name(s); }

std::string FormatTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  const std::time_t t = static_cast<std::time_t>(unix_ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string FormatShape(const google::protobuf::RepeatedField<int64_t>& shape) {
  std::string out = "[";
  for (int i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + (shape[i] < 0 ? "N" : std::to_string(shape[i]));
  return out + "]";
}

}  // namespace

void print_job(const v1::Job& j) {
  std::printf(
      "%-18s %-12s %-11s step %-6lld epoch %-4lld %s%s\n", j.id().c_str(), j.name().c_str(),
      StateName(j.state()).c_str(), static_cast<long long>(j.step()), static_cast<long long>(j.epoch()),
      j.model_name().empty() ? "" : ("model " + j.model_name() + ":" + std::to_string(j.model_version())).c_str(),
      j.reason().empty() ? "" : ("  (" + j.reason() + ")").c_str());
}

void print_job_summary(const v1::Job& j) {
  std::printf("%s  %s\n", j.id().c_str(), j.name().c_str());
  std::printf("  state:     %s%s\n", StateName(j.state()).c_str(),
              j.reason().empty() ? "" : ("  (" + j.reason() + ")").c_str());
  std::printf("  device:    %s\n", j.device().empty() ? "-" : j.device().c_str());
  if (j.spec().has_quantize()) {
    const v1::QuantizeSpec& q = j.spec().quantize();
    std::printf(
        "  quantize: %s%s, at most %.2f points below float32\n", q.mode().c_str(),
        q.mode() == "static"
            ? (" (" + q.observer() + ", " + std::to_string(q.calibration_batches()) + " calibration batches)").c_str()
            : "",
        q.max_accuracy_drop());
  }
  if (!j.spec().precision().empty() && j.spec().precision() != "fp32") {
    std::printf("  precision: %s (serving %s)\n", j.spec().precision().c_str(),
                j.spec().serving_precision().empty() ? "fp32" : j.spec().serving_precision().c_str());
  }
  std::printf("  progress:  step %lld, epoch %lld of %lld\n", static_cast<long long>(j.step()),
              static_cast<long long>(j.epoch()), static_cast<long long>(j.spec().epochs()));
  std::printf("  created:   %s\n  started:   %s\n  finished:  %s\n", FormatTime(j.created_unix_ms()).c_str(),
              FormatTime(j.started_unix_ms()).c_str(), FormatTime(j.finished_unix_ms()).c_str());
  if (!j.model_name().empty()) {
    std::printf("  model:     %s:%lld\n", j.model_name().c_str(), static_cast<long long>(j.model_version()));
  }
}

void print_model_summary(const v1::Model& m) {
  // A model registered from an ONNX file has no job.
  const std::string origin = m.job_id().empty() ? "imported" : "from job " + m.job_id();
  std::printf("%s:%lld  %s, %lld parameters, on %s\n", m.name().c_str(), static_cast<long long>(m.version()),
              origin.c_str(), static_cast<long long>(m.parameters()), m.device().empty() ? "-" : m.device().c_str());
  for (const v1::TensorSignature& t : m.inputs()) {
    std::printf("  input   %-10s %s %s\n", t.name().c_str(), v1::DType_Name(t.dtype()).c_str(),
                FormatShape(t.shape()).c_str());
  }
  for (const v1::TensorSignature& t : m.outputs()) {
    std::printf("  output  %-10s %s %s\n", t.name().c_str(), v1::DType_Name(t.dtype()).c_str(),
                FormatShape(t.shape()).c_str());
  }
  if (m.labels_size() > 0) {
    std::string labels;
    for (int i = 0; i < m.labels_size() && i < 20; ++i) labels += (i ? ", " : "") + m.labels(i);
    if (m.labels_size() > 20) labels += ", ... (" + std::to_string(m.labels_size()) + ")";
    std::printf("  classes: %s\n", labels.c_str());
  }
  if (!m.precision().empty() && (m.precision() != "fp32" || !m.accuracy().empty())) {
    // Mixed precision: the serving dtype and what each precision scored at registration.
    std::string accuracy;
    for (const char* p : {"fp32", "bf16", "fp16", "int8"}) {
      const auto it = m.accuracy().find(p);
      if (it == m.accuracy().end()) continue;
      char cell[64];
      std::snprintf(cell, sizeof(cell), "%s%s %.2f %%", accuracy.empty() ? "" : ", ", p, 100.0 * it->second);
      accuracy += cell;
    }
    std::printf("  serves in: %s%s\n", m.precision().c_str(),
                accuracy.empty() ? "" : ("  (validation accuracy: " + accuracy + ")").c_str());
  }
  if (!m.quantization().empty()) std::printf("  quantization: %s\n", m.quantization().c_str());
  if (m.size_bytes() > 0) {
    std::printf("  size: %.1f KiB\n", static_cast<double>(m.size_bytes()) / 1024.0);
  }
  std::printf("  created: %s\n", FormatTime(m.created_unix_ms()).c_str());
}

}  // namespace anvil::client
