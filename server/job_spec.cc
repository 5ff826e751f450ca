#include "server/job_spec.h"

#include <absl/strings/str_cat.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "core/models/spec.h"
#include "core/train/doctor.h"
#include "server/status.h"
#include "workers/job_memory.h"
#include "workers/job_plan.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;

#define SPEC_CHECK(cond, ...) ANVIL_SERVICE_CHECK(cond, absl::StatusCode::kInvalidArgument, "spec.", __VA_ARGS__)

const std::set<std::string> kBuiltinDatasets = {"digits", "blobs", "spirals"};
const std::set<std::string> kOptimizers = {"sgd", "adam", "adamw", "rmsprop"};
const std::set<std::string> kSchedules = {"", "constant", "step", "cosine", "onecycle", "warmup_cosine"};
const std::set<std::string> kLosses = {"cross_entropy", "mse"};
const std::set<std::string> kPresets = {"mlp", "lenet5", "resnet", "gru", "transformer"};

std::string Join(const std::set<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + (n.empty() ? std::string("\"\"") : n);
  return out;
}

void CheckRange(const char* field, int64_t value, int64_t lo, int64_t hi) {
  SPEC_CHECK(value >= lo && value <= hi, field, ": expected ", lo, "..", hi, ", got ", value);
}

void CheckFinite(const char* field, double value, double lo, double hi) {
  SPEC_CHECK(std::isfinite(value) && value >= lo && value <= hi, field, ": expected a number in [", lo, ", ", hi,
             "], got ", value);
}

}  // namespace

void validate_dataset_spec(v1::DatasetSpec* d, const SpecContext& ctx) {
  SPEC_CHECK(d->name().empty() != d->path().empty(),
             "dataset: expected exactly one of \"name\" (a built-in: ", Join(kBuiltinDatasets),
             ") or \"path\" (inside the server's data root), got ", d->name().empty() ? "neither" : "both");
  if (!d->name().empty()) {
    SPEC_CHECK(kBuiltinDatasets.count(d->name()), "dataset.name: expected one of ", Join(kBuiltinDatasets), ", got \"",
               d->name(), "\"");
  } else {
    const std::string resolved = resolve_inside_root(ctx.data_root, d->path(), "spec.dataset.path");
    SPEC_CHECK(fs::exists(resolved), "dataset.path: \"", d->path(), "\" does not exist in the server's data root");
  }
  const std::string& label = d->label_column();
  const bool index = !label.empty() && label.find_first_not_of("-0123456789") == std::string::npos;
  SPEC_CHECK(!index || (label != "-" && label.find('-', 1) == std::string::npos && label.size() <= 9),
             "dataset.label_column: expected a column name or an index like 3 or -1, got \"", label, "\"");
  // The table's first lines against label_column, and a label_column given where there is no
  // table: refused at submit, as the dry run would, rather than when the job starts.
  try {
    workers::check_dataset_columns(*d, ctx.data_root);
  } catch (const Error& e) {
    const std::string what = scrub_paths(e.what(), ctx.data_root);
    const char* field = what.rfind("dataset.", 0) == 0                   ? ""
                        : what.find("label_column") != std::string::npos ? "dataset.label_column: "
                                                                         : "dataset.path: ";
    throw ServiceError(absl::StatusCode::kInvalidArgument, absl::StrCat("spec.", field, what));
  }
  if (d->validation_fraction() == 0) d->set_validation_fraction(0.2);
  CheckFinite("dataset.validation_fraction", d->validation_fraction(), 0.0, 0.9);
}

namespace {

void ValidateOptimizer(v1::OptimizerSpec* o) {
  if (o->name().empty()) o->set_name("adamw");
  SPEC_CHECK(kOptimizers.count(o->name()), "optimizer.name: expected one of ", Join(kOptimizers), ", got \"", o->name(),
             "\"");
  if (o->lr() == 0) o->set_lr(1e-3);
  CheckFinite("optimizer.lr", o->lr(), 1e-12, 10.0);
  CheckFinite("optimizer.weight_decay", o->weight_decay(), 0.0, 1.0);
  CheckFinite("optimizer.momentum", o->momentum(), 0.0, 0.999999);
  SPEC_CHECK(o->betas_size() == 0 || o->betas_size() == 2, "optimizer.betas: expected two values, got ",
             o->betas_size());
  for (double b : o->betas()) CheckFinite("optimizer.betas", b, 0.0, 0.999999);
  CheckFinite("optimizer.eps", o->eps(), 0.0, 1.0);
  SPEC_CHECK(!o->nesterov() || o->name() == "sgd", "optimizer.nesterov: only sgd has a Nesterov variant, got \"",
             o->name(), "\"");
}

void ValidateSchedule(v1::ScheduleSpec* s) {
  SPEC_CHECK(kSchedules.count(s->name()), "schedule.name: expected one of ", Join(kSchedules), ", got \"", s->name(),
             "\"");
  if (s->name() == "step") {
    SPEC_CHECK(s->step_size() >= 1, "schedule.step_size: expected >= 1 epoch for \"step\", got ", s->step_size());
    if (s->gamma() == 0) s->set_gamma(0.1);
    CheckFinite("schedule.gamma", s->gamma(), 1e-9, 1.0);
  }
  CheckFinite("schedule.max_lr", s->max_lr(), 0.0, 10.0);
  CheckFinite("schedule.min_lr", s->min_lr(), 0.0, 10.0);
  CheckRange("schedule.warmup_steps", s->warmup_steps(), 0, 100'000'000);
}

void ValidateModel(const v1::JobSpec& spec, const SpecContext& ctx) {
  SPEC_CHECK(spec.model_preset().empty() != spec.model_json().empty(),
             "model: expected exactly one of \"model_preset\" (", Join(kPresets), ") or \"model_json\", got ",
             spec.model_preset().empty() ? "neither" : "both");
  if (!spec.model_preset().empty()) {
    SPEC_CHECK(kPresets.count(spec.model_preset()), "model_preset: expected one of ", Join(kPresets), ", got \"",
               spec.model_preset(), "\"");
    return;
  }
  // Checked and priced without building it: nothing the spec asks for is allocated here.
  models::ModelCost cost;
  try {
    cost = models::estimate_model(spec.model_json());
  } catch (const Error& e) {
    throw ServiceError(absl::StatusCode::kInvalidArgument, std::string("spec.model_json: ") + e.what());
  }
  try {
    workers::check_job_memory(cost, spec, ctx.max_job_memory);
  } catch (const Error& e) {
    throw ServiceError(absl::StatusCode::kResourceExhausted, std::string("spec: ") + e.what());
  }
}

void ValidateDevice(v1::JobSpec* spec, const SpecContext& ctx) {
  if (spec->device().empty()) spec->set_device("any");
  const std::string& d = spec->device();
  if (d == "any" || d == "cpu") return;
  bool known = false;
  bool any_cuda = false;
  for (const std::string& have : ctx.devices) {
    known = known || have == d;
    any_cuda = any_cuda || have.rfind("cuda", 0) == 0;
  }
  if (d == "cuda") known = any_cuda;
  std::string list;
  for (const std::string& have : ctx.devices) list += (list.empty() ? "" : ", ") + have;
  SPEC_CHECK(d == "cuda" || d.rfind("cuda:", 0) == 0,
             "device: expected \"cpu\", \"cuda\", \"cuda:N\" or \"any\", got \"", d, "\"");
  ANVIL_SERVICE_CHECK(known, absl::StatusCode::kInvalidArgument, "spec.device: \"", d,
                      "\" is not a device of this server (it has: ", list, ")");
}

// Data-parallel jobs (world_size > 1) run as CPU rank processes over Gloo.
void ValidateDataParallel(v1::JobSpec* spec) {
  if (spec->world_size() == 0) spec->set_world_size(1);
  CheckRange("world_size", spec->world_size(), 1, 64);
  CheckRange("max_restarts", spec->max_restarts(), 0, 100);
  if (spec->world_size() == 1) return;
  if (spec->max_restarts() == 0) spec->set_max_restarts(3);
  SPEC_CHECK(spec->device() == "cpu" || spec->device() == "any", "device: a data-parallel job (world_size ",
             spec->world_size(), ") runs as CPU ranks over Gloo; got \"", spec->device(),
             "\" (use \"cpu\" or \"any\", or world_size 1 on a GPU)");
  spec->set_device("cpu");
  SPEC_CHECK(spec->batch_size() % spec->world_size() == 0, "batch_size: the global batch ", spec->batch_size(),
             " must divide by world_size ", spec->world_size(), " (each rank loads batch_size / world_size samples)");
}

}  // namespace

bool is_valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64 || name[0] == '.') return false;
  for (char c : name) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  }
  return true;
}

std::string resolve_inside_root(const std::string& root, const std::string& relative, const std::string& field) {
  ANVIL_SERVICE_CHECK(relative.find("://") == std::string::npos, absl::StatusCode::kPermissionDenied, field,
                      ": URLs are not accepted, got \"", relative, "\" (give a path inside the server's data root)");
  ANVIL_SERVICE_CHECK(!relative.empty() && relative[0] != '/' && relative[0] != '~',
                      absl::StatusCode::kPermissionDenied, field,
                      ": expected a path relative to the server's data root, got \"", relative, "\"");
  std::error_code ec;
  const fs::path canonical_root = fs::weakly_canonical(fs::path(root), ec);
  const fs::path resolved = fs::weakly_canonical(canonical_root / relative, ec);
  ANVIL_SERVICE_CHECK(!ec, absl::StatusCode::kInvalidArgument, field, ": cannot resolve \"", relative, "\"");
  const auto [root_end, _] =
      std::mismatch(canonical_root.begin(), canonical_root.end(), resolved.begin(), resolved.end());
  ANVIL_SERVICE_CHECK(root_end == canonical_root.end(), absl::StatusCode::kPermissionDenied, field, ": \"", relative,
                      "\" leads outside the server's data root");
  return resolved.string();
}

namespace {
// "fp32" (default), "bf16", "fp16"; the dtype names are accepted and written as the short ones.
std::string NormalizePrecision(const char* field, const std::string& given) {
  std::string p = given;
  if (p.empty() || p == "float32") p = "fp32";
  if (p == "bfloat16") p = "bf16";
  if (p == "float16" || p == "half") p = "fp16";
  SPEC_CHECK(p == "fp32" || p == "bf16" || p == "fp16", field,
             ": expected \"fp32\", \"bf16\" or \"fp16\" (mixed precision: the forward in bfloat16 or float16, "
             "float32 weights), got \"",
             given, "\"");
  return p;
}

}  // namespace

void validate_quantize_spec(v1::QuantizeSpec* q, const std::string& field) {
  // `field` is the whole path ("spec.quantize" in a JobSpec, "spec" in a QuantizeRequest).
#define QUANTIZE_CHECK(cond, ...) ANVIL_SERVICE_CHECK(cond, absl::StatusCode::kInvalidArgument, field, __VA_ARGS__)
  // An empty mode is the CLI's default, static: `"quantize": {}` asks for it.
  if (q->mode().empty()) q->set_mode("static");
  const std::string& mode = q->mode();
  QUANTIZE_CHECK(mode == "dynamic" || mode == "static",
                 ".mode: expected \"dynamic\" (Linear layers, activations quantized per batch) or \"static\" "
                 "(calibrated activations), got \"",
                 mode, "\"");
  if (q->calibration_batches() == 0) q->set_calibration_batches(16);
  QUANTIZE_CHECK(q->calibration_batches() >= 1 && q->calibration_batches() <= 10000,
                 ".calibration_batches: expected 1..10000, got ", q->calibration_batches());
  if (q->observer().empty()) q->set_observer("histogram");
  QUANTIZE_CHECK(q->observer() == "histogram" || q->observer() == "minmax" || q->observer() == "moving_average_minmax",
                 ".observer: expected \"histogram\", \"minmax\" or \"moving_average_minmax\", got \"", q->observer(),
                 "\"");
  // Unset is 1 point; an explicit 0 (a field with presence) refuses any loss.
  if (!q->has_max_accuracy_drop()) q->set_max_accuracy_drop(1.0);
  QUANTIZE_CHECK(std::isfinite(q->max_accuracy_drop()) && q->max_accuracy_drop() >= 0 && q->max_accuracy_drop() <= 100,
                 ".max_accuracy_drop: expected a number of points in [0, 100], got ", q->max_accuracy_drop());
  QUANTIZE_CHECK(q->keep_float_size() <= 256, ".keep_float: at most 256 layers, got ", q->keep_float_size());
  for (const std::string& path : q->keep_float())
    QUANTIZE_CHECK(!path.empty() && path.size() <= 256, ".keep_float: expected layer paths like \"3\" or \"2.body.0\" ",
                   "(at most 256 bytes), got \"", path.substr(0, 64), "\"");
#undef QUANTIZE_CHECK
}

namespace {

void ValidatePrecision(v1::JobSpec* spec) {
  const std::string p = NormalizePrecision("precision", spec->precision());
  spec->set_precision(p);
  spec->set_serving_precision(NormalizePrecision("serving_precision", spec->serving_precision()));
  SPEC_CHECK(!spec->amp_anomaly() || p != "fp32",
             "amp_anomaly: checks bf16 or fp16 outputs, but precision is \"fp32\" (set precision to \"bf16\" or "
             "\"fp16\")");
}

// Every text field of a spec is stored with its job and returned by every GetJob: each has a
// bound, checked before anything else reads it. A field not named here takes the default.
size_t TextBound(const google::protobuf::FieldDescriptor& f) {
  if (f.full_name() == "anvil.v1.JobSpec.model_json") return models::kMaxModelSpecBytes;
  if (f.full_name() == "anvil.v1.DatasetSpec.path") return kMaxSpecPathBytes;
  return kMaxSpecTextBytes;
}

void CheckTextBounds(const google::protobuf::Message& m, const std::string& path) {
  const google::protobuf::Reflection& r = *m.GetReflection();
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  r.ListFields(m, &fields);
  for (const google::protobuf::FieldDescriptor* f : fields) {
    const std::string at = path + "." + f->name();
    if (f->type() == google::protobuf::FieldDescriptor::TYPE_STRING && !f->is_repeated()) {
      const size_t size = r.GetStringReference(m, f, nullptr).size();
      ANVIL_SERVICE_CHECK(size <= TextBound(*f), absl::StatusCode::kInvalidArgument, at, ": ", size,
                          " bytes; expected at most ", TextBound(*f));
    } else if (f->type() == google::protobuf::FieldDescriptor::TYPE_MESSAGE && !f->is_repeated()) {
      CheckTextBounds(r.GetMessage(m, f), at);
    }
  }
}

}  // namespace

v1::JobSpec validate_job_spec(const v1::JobSpec& in, const SpecContext& ctx) {
  CheckTextBounds(in, "spec");
  v1::JobSpec spec = in;
  if (spec.name().empty()) spec.set_name("job");
  SPEC_CHECK(is_valid_name(spec.name()), "name: expected 1-64 characters of letters, digits, '.', '_' or '-', got \"",
             spec.name(), "\"");
  SPEC_CHECK(spec.client_job_id().size() <= 128, "client_job_id: expected at most 128 characters, got ",
             spec.client_job_id().size());
  validate_dataset_spec(spec.mutable_dataset(), ctx);
  if (spec.batch_size() == 0) spec.set_batch_size(64);
  CheckRange("batch_size", spec.batch_size(), 1, 65536);
  if (spec.epochs() == 0) spec.set_epochs(10);
  CheckRange("epochs", spec.epochs(), 1, 100000);
  CheckRange("max_steps", spec.max_steps(), 0, int64_t{1} << 40);
  ValidateOptimizer(spec.mutable_optimizer());
  ValidateSchedule(spec.mutable_schedule());
  ValidateModel(spec, ctx);  // after the batch size and optimizer: they enter its memory estimate
  if (spec.loss().empty()) spec.set_loss("cross_entropy");
  SPEC_CHECK(kLosses.count(spec.loss()), "loss: expected one of ", Join(kLosses), ", got \"", spec.loss(), "\"");
  ValidateDevice(&spec, ctx);
  ValidateDataParallel(&spec);
  CheckRange("loader_workers", spec.loader_workers(), 0, 16);
  CheckRange("checkpoint.every_steps", spec.checkpoint().every_steps(), 0, int64_t{1} << 40);
  const std::string& monitor = spec.early_stopping().monitor();
  SPEC_CHECK(monitor.empty() || monitor == "val_loss" || monitor == "val_accuracy",
             "early_stopping.monitor: expected \"val_loss\" or \"val_accuracy\", got \"", monitor, "\"");
  CheckRange("early_stopping.patience", spec.early_stopping().patience(), 0, 100000);
  CheckFinite("early_stopping.min_delta", spec.early_stopping().min_delta(), 0.0, 1e9);
  CheckFinite("clip_grad_norm", spec.clip_grad_norm(), 0.0, 1e9);
  if (spec.accumulation_steps() == 0) spec.set_accumulation_steps(1);
  CheckRange("accumulation_steps", spec.accumulation_steps(), 1, 1024);
  if (spec.metric_interval() == 0) spec.set_metric_interval(10);
  CheckRange("metric_interval", spec.metric_interval(), 1, 1'000'000);
  if (spec.register_model().empty()) spec.set_register_model(spec.name());
  SPEC_CHECK(is_valid_name(spec.register_model()),
             "register_model: expected 1-64 characters of letters, digits, '.', '_' or '-', got \"",
             spec.register_model(), "\"");
  CheckRange("priority", spec.priority(), -100, 100);
  ValidatePrecision(&spec);
  if (spec.has_quantize()) validate_quantize_spec(spec.mutable_quantize(), "spec.quantize");
  const std::string& on_overfitting = spec.doctor().on_overfitting();
  SPEC_CHECK(on_overfitting.empty() || on_overfitting == "stop",
             "doctor.on_overfitting: expected \"stop\" or nothing, got \"", on_overfitting, "\"");
  const std::string& on_lr = spec.doctor().on_lr_too_high();
  SPEC_CHECK(on_lr.empty() || on_lr == "halve", "doctor.on_lr_too_high: expected \"halve\" or nothing, got \"", on_lr,
             "\"");
  const std::string& on_stall = spec.doctor().on_data_stall();
  SPEC_CHECK(on_stall.empty() || on_stall == "add_workers",
             "doctor.on_data_stall: expected \"add_workers\" or nothing, got \"", on_stall, "\"");
  // The rules' thresholds by name: each known and in its range (set_doctor_option says which).
  train::DoctorOptions scratch;
  for (const auto& [name, value] : spec.doctor().thresholds()) {
    SPEC_CHECK(name.size() <= 64, "doctor.thresholds: expected a threshold's name (at most 64 characters), got one of ",
               name.size(), " bytes");
    const std::string why = train::set_doctor_option(scratch, name, value);
    SPEC_CHECK(why.empty(), "doctor.thresholds.", name, ": ", why);
  }
  SPEC_CHECK(spec.world_size() <= 1 || (on_overfitting.empty() && on_lr.empty() && on_stall.empty()),
             !on_overfitting.empty() ? "doctor.on_overfitting"
             : !on_lr.empty()        ? "doctor.on_lr_too_high"
                                     : "doctor.on_data_stall",
             ": the doctor's actions are for single-process jobs; a data-parallel job (world_size ", spec.world_size(),
             ") reports its findings without acting on them (every rank would have to act at the same step)");
  return spec;
}

}  // namespace anvil::server
