// Anvil's native model archive: one safetensors file whose tensors are the model's state and
// whose "__metadata__" holds what is needed to rebuild and serve it — the normalised model
// spec (core/models/spec.h), the input/output signature, the class labels, and provenance.
// Any safetensors reader can open the weights; Anvil's loader rebuilds the module from the
// spec and loads the weights strictly, so a file that does not match its spec is refused.
//
//   metadata "anvil.format"  "anvil.model/1"
//            "anvil.spec"    the JSON model spec
//            "anvil.info"    {"name", "version", "job_id", "labels": [...], "created_unix_ms"}
//            "anvil.quant"   int8 models only: the quantized layers by path (core/quant/quantize.h),
//                            whose weights are quantized companions (core/quant/serialize.h)
// Shared parameters are stored once with an alias entry ("anvil.aliases"), as in checkpoints.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/models/spec.h"

namespace anvil::models {

struct ModelInfo {
  std::string name;
  int64_t version = 0;
  std::string job_id;
  std::vector<std::string> labels;  // class names, index = class id (may be empty)
  int64_t created_unix_ms = 0;
  // Mixed precision: the dtype Predict runs the forward in ("fp32", "bf16" or "fp16": under
  // autocast, the weights staying float32), and the validation accuracy measured at
  // registration per precision ({"fp32": 0.978, "bf16": 0.975}), so the difference is known
  // before the model serves in the lower one. Empty: measured in none.
  // "int8": a quantized model (its layers take and return float32).
  std::string precision = "fp32";
  std::map<std::string, double> accuracy;
  // int8 models: how they were quantized ("static (histogram, 16 calibration batches)").
  std::string quantization;
};

struct LoadedModel {
  BuiltModel built;  // module (in eval mode), shapes, dtype, spec
  ModelInfo info;
};

inline constexpr const char* kModelFormat = "anvil.model/1";

// The dtype Predict runs the forward in: the precision's autocast dtype, float32 for int8.
ScalarType forward_dtype(const ModelInfo& info);

// The archive's bytes for `model` (its current weights) built from `spec_json`.
std::string serialize_model_archive(const nn::Module& model, const std::string& spec_json, const ModelInfo& info);
// Writes atomically (temporary file, fsync, rename).
void save_model_archive(const std::string& path, const nn::Module& model, const std::string& spec_json,
                        const ModelInfo& info);
// Rebuilds the module from the spec and loads the weights (strict). Errors name the file.
LoadedModel load_model_archive(const std::string& path);

}  // namespace anvil::models
