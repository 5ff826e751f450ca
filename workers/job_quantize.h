// Post-training int8 quantization of a job's trained model (JobSpec.quantize): a CPU copy of
// the model quantized (core/quant/ptq.h), calibrated on the training split, gated on the
// validation split, and written as its own model archive when it passes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/models/archive.h"
#include "core/quant/ptq.h"
#include "proto/anvil/v1/anvil.pb.h"
#include "workers/job_plan.h"

namespace anvil::workers {

struct QuantizeOutcome {
  std::string archive;  // the int8 archive, written only when it passed the gate
  std::string summary;  // both accuracies and the verdict, or why quantization failed
  // Why it failed, when it did before any verdict: the request's input (a NaN or infinite
  // value in the data, a keep_float path that names no layer) or the model (nothing it can
  // quantize, a file that does not parse). kNone: the gate decided.
  enum class Failure { kNone, kInput, kModel } failure = Failure::kNone;
  std::optional<double> float_accuracy, int8_accuracy;
  std::vector<quant::LayerError> layers;  // worst first
};

// The options a validated QuantizeSpec (server/job_spec.h) asks for.
quant::PtqOptions ptq_options(const v1::QuantizeSpec& spec);
// "static (histogram, 16 calibration batches)" / "dynamic": `calibrated`, the batches the
// observers saw, when known (-1: as the spec asks).
std::string describe_quantize_spec(const v1::QuantizeSpec& spec, int64_t calibrated = -1);

// Quantizes `plan`'s trained model as `spec` asks, writing `archive_path` (with `info`'s name
// and provenance, precision "int8") when the gate passes. Never throws: a model that cannot be
// quantized is a summary saying why.
QuantizeOutcome quantize_trained_model(const v1::QuantizeSpec& spec, JobPlan& plan, const models::ModelInfo& info,
                                       const std::string& archive_path, uint64_t seed);

// The same for an imported ONNX graph (static only, core/onnx/quantize_graph.h): calibrated on
// `data`'s training part, gated on its validation part, written to `path` (a QDQ .onnx file
// whose metadata carries the quantization and both accuracies) when it passes. Never throws.
QuantizeOutcome quantize_imported_model(const v1::QuantizeSpec& spec, const std::string& onnx_bytes,
                                        const JobData& data, int64_t batch_size, const std::string& path,
                                        uint64_t seed);

}  // namespace anvil::workers
