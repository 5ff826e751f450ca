// Job spec validation: every field of a submitted JobSpec is checked and defaults are filled
// in, before anything is queued. An error is INVALID_ARGUMENT naming the field, what it
// expected and what came (PERMISSION_DENIED for a dataset path outside the data root), so a
// client can fix its spec from the message alone. `dry_run` submissions stop here.
#pragma once

#include <string>
#include <vector>

#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::server {

// Bounds on a spec's text fields (model_json has its own, models::kMaxModelSpecBytes): a spec
// is stored with its job and sent back whole by GetJob.
inline constexpr size_t kMaxSpecTextBytes = 1024;
inline constexpr size_t kMaxSpecPathBytes = 4096;

struct SpecContext {
  std::string data_root;             // absolute; dataset paths must resolve inside it
  std::vector<std::string> devices;  // this server's devices: "cpu", "cuda:0", ...
  int64_t max_job_memory = 0;        // bytes per job; 0 = no limit (RESOURCE_EXHAUSTED beyond)
};

// A dataset spec alone (the dataset of a JobSpec, or of a Quantize request): one of name or
// path, the path inside the data root, defaults filled in. Throws ServiceError.
void validate_dataset_spec(v1::DatasetSpec* dataset, const SpecContext& context);

// The spec with defaults filled in; throws ServiceError.
v1::JobSpec validate_job_spec(const v1::JobSpec& spec, const SpecContext& context);

// `relative` resolved inside `root` (both made canonical, symlinks followed); PERMISSION_DENIED
// when it is absolute, a URL, or leads outside the root. `field` names it in errors. The
// result need not exist.
std::string resolve_inside_root(const std::string& root, const std::string& relative, const std::string& field);

// Names used for jobs and models: 1-64 characters of [A-Za-z0-9._-], not starting with '.'.
bool is_valid_name(const std::string& name);

// Checks a QuantizeSpec and fills its defaults (mode static, calibration_batches 16, observer
// histogram, max_accuracy_drop 1 point when unset); `field` is its path in errors
// ("spec.quantize", "spec"). INVALID_ARGUMENT.
void validate_quantize_spec(v1::QuantizeSpec* q, const std::string& field);

}  // namespace anvil::server
