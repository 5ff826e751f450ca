#include "server/model_registry.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/amp/autocast.h"
#include "core/autograd/grad_mode.h"
#include "core/models/serving.h"
#include "core/onnx/import.h"
#include "core/ops/functions.h"
#include "core/quant/quantize.h"
#include "core/util/clock.h"
#include "core/util/fault_point.h"
#include "core/util/file.h"
#include "core/util/sha256.h"
#include "server/log.h"
#include "server/status.h"
#include "server/wire_tensor.h"

namespace anvil::server {

bool is_onnx_row(const ModelRow& row) {
  return row.path.size() > 5 && row.path.compare(row.path.size() - 5, 5, ".onnx") == 0;
}

namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

// An ONNX file served through the importer: its signature from the graph, its labels from the
// row (RegisterModel's) or the file's "labels" metadata (Anvil's own exports write it).
models::LoadedModel LoadOnnx(const std::string& path, const ModelRow& row) {
  const onnx::ImportedModel imported = onnx::import_model(read_file(path));
  models::LoadedModel loaded;
  loaded.built.module = imported.module;
  loaded.built.input_shape = imported.input.shape;
  loaded.built.output_shape = imported.output_shape;
  loaded.built.input_dtype = imported.input.dtype;
  loaded.built.input_name = imported.input.name;
  loaded.built.output_name = imported.output_name;
  loaded.built.spec = Json{{"format", "onnx"},
                           {"producer", imported.producer},
                           {"opset", imported.opset},
                           {"input", imported.input.name},
                           {"output", imported.output_name},
                           {"operators", imported.operators}}
                          .dump(-1, ' ', false, Json::error_handler_t::replace);
  loaded.info.name = row.name;
  loaded.info.version = row.version;
  loaded.info.job_id = row.job_id;
  // A QDQ graph whose groups run on the int8 kernels (core/onnx/qdq_fusion.h) serves as int8;
  // one Anvil quantized (Quantize) names how, and both accuracies, in its metadata.
  if (!imported.int8_layers.empty()) {
    loaded.info.precision = "int8";
    loaded.info.quantization = std::to_string(imported.int8_layers.size()) + " int8 layers of a QDQ graph";
  }
  for (const auto& [key, value] : imported.metadata) {
    if (key == "anvil.quantization" && !imported.int8_layers.empty()) loaded.info.quantization = value;
    if (key != "anvil.accuracy") continue;
    try {
      const Json accuracy = Json::parse(value);
      if (!accuracy.is_object()) continue;
      for (auto it = accuracy.begin(); it != accuracy.end(); ++it)
        if (it->is_number()) loaded.info.accuracy[it.key()] = it->get<double>();
    } catch (const Json::exception&) {  // metadata that does not parse is left out
    }
  }
  try {
    loaded.info.labels = Json::parse(row.signature_json).value("labels", std::vector<std::string>{});
    if (loaded.info.labels.empty()) {
      for (const auto& [key, value] : imported.metadata) {
        if (key == "labels") loaded.info.labels = Json::parse(value).get<std::vector<std::string>>();
      }
    }
  } catch (const Json::exception&) {
    loaded.info.labels.clear();  // labels that do not parse are left out, not fatal
  }
  return loaded;
}

int64_t ParseVersion(const std::string& version) {
  if (version.empty() || version == "latest") return 0;
  int64_t v = 0;
  for (char c : version) {
    ANVIL_SERVICE_CHECK(c >= '0' && c <= '9' && v < (int64_t{1} << 40), absl::StatusCode::kInvalidArgument,
                        "version: expected \"latest\" or a positive number, got \"", version, "\"");
    v = v * 10 + (c - '0');
  }
  ANVIL_SERVICE_CHECK(v > 0, absl::StatusCode::kInvalidArgument,
                      "version: expected \"latest\" or a positive number, got \"", version, "\"");
  return v;
}

void AddSignature(google::protobuf::RepeatedPtrField<v1::TensorSignature>* out, const std::string& name,
                  ScalarType dtype, const IntArray& shape) {
  v1::TensorSignature* s = out->Add();
  s->set_name(name);
  s->set_dtype(to_wire_dtype(dtype));
  s->add_shape(-1);
  for (int64_t d : shape) s->add_shape(d);
}

}  // namespace

ModelRegistry::ModelRegistry(Store& store, std::string data_root, BatchingOptions batching,
                             metrics::ServiceMetrics* metrics, size_t max_loaded, Device device,
                             ArtifactStore* artifacts, int64_t max_loaded_bytes)
    : store_(store),
      data_root_(std::move(data_root)),
      owned_artifacts_(artifacts == nullptr ? open_artifact_store("", data_root_) : nullptr),
      artifacts_(artifacts == nullptr ? *owned_artifacts_ : *artifacts),
      batching_(batching),
      device_(device),
      worker_(std::make_shared<workers::ServingWorker>(device)),
      metrics_(metrics),
      max_loaded_(std::max<size_t>(max_loaded, 1)),
      max_loaded_bytes_(std::max<int64_t>(max_loaded_bytes, 0)),
      predict_budget_(
          batching.memory_limit > 0
              ? std::make_shared<MemoryBudget>(batching.memory_limit, "the Predicts in flight", "--max-predict-memory")
              : nullptr) {}

void ModelRegistry::EvictLocked() {
  int64_t bytes = 0;
  for (const auto& [key, m] : loaded_) bytes += m->bytes;
  while (loaded_.size() > 1 && (loaded_.size() > max_loaded_ || (max_loaded_bytes_ > 0 && bytes > max_loaded_bytes_))) {
    auto oldest = loaded_.begin();
    for (auto it = loaded_.begin(); it != loaded_.end(); ++it) {
      if (it->second->last_used.load() < oldest->second->last_used.load()) oldest = it;
    }
    // Requests holding it finish normally: the batcher lives as long as they hold the model.
    bytes -= oldest->second->bytes;
    if (metrics_ != nullptr) metrics_->serving.on_unloaded(oldest->first.first, oldest->first.second);
    loaded_.erase(oldest);
  }
  if (metrics_ != nullptr) metrics_->models_loaded_bytes.with().Set(static_cast<double>(bytes));
}

ModelRegistry::~ModelRegistry() { close(); }

namespace {

// Labels name a classifier's outputs, one each: a count that differs would print the wrong
// names beside every prediction. `per_row` is the output's shape without the batch dim (a
// named dim, -1, accepts any count; an empty one, nothing known, accepts all).
void CheckLabelsFitOutputs(const std::vector<std::string>& labels, const IntArray& per_row) {
  if (labels.empty() || per_row.empty()) return;
  ANVIL_SERVICE_CHECK(per_row.size() == 1, absl::StatusCode::kInvalidArgument, "labels: the model's output is [1, ",
                      shape_str(per_row).substr(1),
                      " for a batch of one, not [N, classes]: labels name a classifier's outputs");
  ANVIL_SERVICE_CHECK(per_row[0] < 0 || per_row[0] == static_cast<int64_t>(labels.size()),
                      absl::StatusCode::kInvalidArgument, "labels: the model gives ", per_row[0],
                      " outputs per row, got ", labels.size(), " label", labels.size() == 1 ? "" : "s",
                      "; give one label per output, or none");
}

}  // namespace

absl::StatusOr<ModelRow> ModelRegistry::register_archive(const std::string& name, const std::string& job_id,
                                                         const std::string& relative_path,
                                                         const std::vector<std::string>& labels) {
  return status_of([&] {
    const std::string path = (fs::path(data_root_) / relative_path).string();
    ModelRow row;
    row.name = name;
    row.job_id = job_id;
    row.path = relative_path;
    // Published before its row exists: every replica that reads the row finds the archive.
    const ArtifactInfo published = artifacts_.publish(relative_path, path);
    // A file that cannot be registered is unpublished again (with its checksum), so a refused
    // registration leaves nothing behind.
    struct Unpublish {
      ArtifactStore& artifacts;
      const std::string& key;
      bool armed = true;
      ~Unpublish() {
        if (!armed) return;
        try {
          artifacts.remove(key);
        } catch (const std::exception&) {  // best effort: the refusal itself is what is reported
        }
      }
    } unpublish{artifacts_, relative_path};
    Json signature{{"sha256", published.sha256}};
    if (!labels.empty()) signature["labels"] = labels;
    row.signature_json = signature.dump(-1, ' ', false, Json::error_handler_t::replace);
    row.created_ms = unix_millis();
    // Atomic: the model is built (and an imported one run once) before its row is written, so
    // a file that cannot be served leaves no version behind that "latest" would resolve to.
    const bool imported = is_onnx_row(row);
    std::shared_ptr<ServedModel> m =
        Prepare(row, imported ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kInternal);
    if (imported) {
      const IntArray out = TrialForward(*m);
      CheckLabelsFitOutputs(labels, out.empty() ? m->loaded.built.output_shape : IntArray(out.begin() + 1, out.end()));
    }
    row = store_.register_model(row);
    unpublish.armed = false;
    m->row = row;
    m->loaded.info.version = row.version;
    Install(std::move(m));
    return row;
  });
}

absl::StatusOr<std::shared_ptr<ServedModel>> ModelRegistry::get(const std::string& name, const std::string& version) {
  return status_of([&] { return Get(name, version); });
}

absl::StatusOr<v1::PredictResponse> ModelRegistry::predict(const v1::PredictRequest& request,
                                                           Batcher::Clock::time_point deadline) {
  return status_of([&] { return Predict(request, deadline); });
}

ModelRow ModelRegistry::FindRow(const std::string& name, const std::string& version) const {
  const int64_t v = ParseVersion(version);
  std::optional<ModelRow> row = store_.get_model(name, v);
  if (!row.has_value()) {
    // A model its job will register once it succeeds is not ready yet: FAILED_PRECONDITION
    // (retry later), where a name nothing will ever register is NOT_FOUND.
    if (std::optional<JobRow> job = pending_job_for(name)) {
      throw ServiceError(
          absl::StatusCode::kFailedPrecondition,
          detail::StrCat("model \"", echo(name), "\" is not ready: job ", job->id, " that registers it is ",
                         job_state_name(job->state), "; it is ready once the job succeeds"));
    }
    throw ServiceError(absl::StatusCode::kNotFound,
                       detail::StrCat("model \"", echo(name), "\"",
                                      v > 0 ? " version " + std::to_string(v) : std::string(), " is not registered"));
  }
  return *row;
}

std::optional<JobRow> ModelRegistry::pending_job_for(const std::string& name) const {
  for (JobRow& job : store_.jobs_in_states({JobState::kQueued, JobState::kRunning, JobState::kInterrupted})) {
    const Json spec = Json::parse(job.spec_json, nullptr, /*allow_exceptions=*/false);
    if (spec.is_object() && spec.value("register_model", spec.value("name", "")) == name) return std::move(job);
  }
  return std::nullopt;
}

bool ModelRegistry::knows(const std::string& name) const {
  {
    MutexLock lock(&mu_);
    const auto it = latest_.find(name);
    if (it != latest_.end() && it->second > 0) return true;
  }
  return store_.get_model(name, 0).has_value();
}

std::shared_ptr<ServedModel> ModelRegistry::Get(const std::string& name, const std::string& version) {
  const int64_t wanted = ParseVersion(version);
  {
    MutexLock lock(&mu_);
    ANVIL_SERVICE_CHECK(!closed_, absl::StatusCode::kUnavailable, "the server is shutting down");
    int64_t v = wanted;
    if (v == 0) {
      const auto latest = latest_.find(name);
      v = latest == latest_.end() ? 0 : latest->second;
    }
    auto it = loaded_.find({name, v});
    if (v > 0 && it != loaded_.end()) {
      it->second->last_used = ++tick_;
      return it->second;
    }
  }
  const ModelRow row = FindRow(name, version);
  {
    MutexLock lock(&mu_);
    ANVIL_SERVICE_CHECK(!closed_, absl::StatusCode::kUnavailable, "the server is shutting down");
    auto it = loaded_.find({row.name, row.version});
    if (it != loaded_.end()) {
      it->second->last_used = ++tick_;
      return it->second;
    }
  }
  return Load(row);
}

std::shared_ptr<ServedModel> ModelRegistry::Load(const ModelRow& row) {
  return Install(Prepare(row, absl::StatusCode::kDataLoss));
}

std::shared_ptr<ServedModel> ModelRegistry::Prepare(const ModelRow& row, absl::StatusCode unreadable) {
  std::string expected;
  try {
    expected = Json::parse(row.signature_json).value("sha256", "");
  } catch (const Json::exception&) {
  }
  // From the artifact store (a local copy under the data root for a remote one), checked
  // against the digest the row recorded when it was registered.
  std::string path;
  try {
    path = artifacts_.open(row.path, (fs::path(data_root_) / row.path).string(), expected);
  } catch (const ArtifactError& e) {
    const absl::StatusCode code =
        e.kind() == ArtifactError::Kind::kUnavailable ? absl::StatusCode::kUnavailable : absl::StatusCode::kDataLoss;
    const std::string detail = scrub_paths(e.what(), data_root_);
    const std::string prefix = detail::StrCat("model \"", row.name, "\" version ", row.version, ": its archive ");
    // The store's own message already names the artifact and what is wrong with it
    // ("artifact KEY is corrupt (SHA-256 ...)"): said once, not wrapped in the same words.
    const std::string own = "artifact " + row.path + " ";
    if (detail.rfind(own, 0) == 0) throw ServiceError(code, prefix + detail.substr(std::string("artifact ").size()));
    const char* what = e.kind() == ArtifactError::Kind::kNotFound  ? " is missing"
                       : e.kind() == ArtifactError::Kind::kCorrupt ? " is corrupt"
                                                                   : " cannot be read";
    throw ServiceError(code, prefix + row.path + what + " (" + detail + ")");
  }
  auto m = std::make_shared<ServedModel>();
  m->row = row;
  m->archive_path = path;
  std::error_code size_error;
  m->bytes = static_cast<int64_t>(fs::file_size(path, size_error));
  try {
    m->loaded = is_onnx_row(row) ? LoadOnnx(path, row) : models::load_model_archive(path);
  } catch (const Error& e) {
    throw ServiceError(unreadable, scrub_paths(e.what(), data_root_));
  }
  return m;
}

IntArray ModelRegistry::TrialForward(const ServedModel& m) {
  const models::BuiltModel& b = m.loaded.built;
  IntArray shape{1};
  for (int64_t d : b.input_shape) {
    // A named dim's range is the model's own business (a convolution may need 7 or more): only
    // a fully concrete signature is run.
    if (d < 0) return {};
    shape.push_back(d);
  }
  try {
    NoGradGuard no_grad;
    return b.module->forward(zeros(shape, TensorOptions(b.input_dtype))).sizes();
  } catch (const Error& e) {
    throw ServiceError(absl::StatusCode::kInvalidArgument,
                       detail::StrCat("the model does not run on a batch of one ", shape_str(shape), ": ",
                                      scrub_paths(e.what(), data_root_)));
  }
}

std::shared_ptr<ServedModel> ModelRegistry::Install(std::shared_ptr<ServedModel> m) {
  const ModelRow& row = m->row;
  BatchObserver observer;
  if (metrics_ != nullptr) {
    metrics::Histogram& rows = metrics_->predict_batch_rows.with({row.name});
    metrics::Histogram& queued = metrics_->predict_queue.with({row.name});
    observer.on_batch = [&rows, &serving = metrics_->serving, name = row.name](int64_t n) {
      rows.Observe(static_cast<double>(n));
      serving.on_batch(name, n);
    };
    observer.on_queued = [&queued](double s) { queued.Observe(s); };
    metrics::Gauge& depth = metrics_->predict_queue_depth.with({row.name});
    observer.on_depth = [&depth](int64_t n) { depth.Set(static_cast<double>(n)); };
  }
  if (device_ != kCPU) throw_if_error(worker_->run(workers::PlaceModule{m->loaded.built.module}));
  const ScalarType precision = models::forward_dtype(m->loaded.info);
  m->batcher = std::make_unique<Batcher>(
      m->loaded.built.module, batching_, std::move(observer),
      [worker = worker_, precision, budget = predict_budget_](const std::shared_ptr<nn::Module>& module, Tensor input) {
        return worker->run(workers::ForwardBatch{module, std::move(input), precision, budget});
      });
  MutexLock lock(&mu_);
  ANVIL_SERVICE_CHECK(!closed_, absl::StatusCode::kUnavailable, "the server is shutting down");
  m->last_used = ++tick_;
  auto [it, inserted] = loaded_.emplace(std::make_pair(row.name, row.version), m);
  std::shared_ptr<ServedModel> result = it->second;  // a concurrent loader may have won: use its copy
  EvictLocked();
  if (metrics_ != nullptr) {
    metrics_->model_loads.with().Increment();
    metrics_->models_loaded.with().Set(static_cast<double>(loaded_.size()));
    metrics_->serving.on_loaded(row.name, row.version, result->loaded.info.precision);
  }
  int64_t& latest = latest_[row.name];
  if (store_.get_model(row.name, 0)->version == row.version) latest = row.version;
  return result;
}

v1::Model ModelRegistry::describe(const ServedModel& m) const {
  v1::Model out;
  out.set_name(m.row.name);
  out.set_version(m.row.version);
  out.set_job_id(m.row.job_id);
  const models::BuiltModel& b = m.loaded.built;
  AddSignature(out.mutable_inputs(), b.input_name, b.input_dtype, b.input_shape);
  AddSignature(out.mutable_outputs(), b.output_name, kFloat32, b.output_shape);
  for (const std::string& l : m.loaded.info.labels) out.add_labels(l);
  out.set_device(device_.str());
  out.set_created_unix_ms(m.row.created_ms);
  out.set_parameters(quant::parameter_count(*b.module));  // an int8 version's count is its float version's
  out.set_spec_json(b.spec);
  out.set_precision(m.loaded.info.precision);
  for (const auto& [precision, accuracy] : m.loaded.info.accuracy) (*out.mutable_accuracy())[precision] = accuracy;
  out.set_quantization(m.loaded.info.quantization);
  std::error_code ec;
  const auto size = fs::file_size(fs::path(data_root_) / m.row.path, ec);
  if (!ec) out.set_size_bytes(static_cast<int64_t>(size));
  return out;
}

absl::StatusOr<v1::Model> ModelRegistry::describe_row(const ModelRow& row) {
  const std::pair<std::string, int64_t> key{row.name, row.version};
  std::shared_ptr<ServedModel> resident;
  {
    MutexLock lock(&mu_);
    if (const auto it = loaded_.find(key); it != loaded_.end()) {
      resident = it->second;
    } else if (const auto d = descriptions_.find(key); d != descriptions_.end()) {
      return d->second;
    }
  }
  if (resident != nullptr) return describe(*resident);
  // Not resident: read and describe it without installing it, so a listing of many versions
  // neither evicts the ones being served nor reloads the same archives at every call.
  return status_of([&] {
    const v1::Model described = describe(*Prepare(row, absl::StatusCode::kDataLoss));
    MutexLock lock(&mu_);
    if (descriptions_.size() >= kMaxDescriptions) descriptions_.clear();
    descriptions_.emplace(key, described);
    return described;
  });
}

namespace {

// A NaN or infinite input is refused with its place: a model given one computes NaN for its
// row (a classifier's "top classes" would then be class 0 and 1 at NaN probability), an
// answer that looks like one. The scan is one pass over the floats, beside the copy decoding
// made.
void CheckFinite(const Tensor& input, const std::string& model) {
  if (!is_floating_point(input.dtype()) || input.numel() == 0) return;
  const Tensor values = input.dtype() == kFloat32 ? input : input.to(kFloat32);
  const float* v = values.data_ptr<float>();
  const int64_t n = values.numel();
  int64_t bad = -1;
  for (int64_t i = 0; i < n && bad < 0; i += 1024) {
    // Blocks of 1024 without a branch per element: NaN and infinities are the values whose
    // difference with themselves is not 0.
    float acc = 0;
    const int64_t end = std::min(n, i + 1024);
    for (int64_t j = i; j < end; ++j) acc += v[j] - v[j];
    if (acc != 0 || std::isnan(acc)) {
      for (int64_t j = i; j < end; ++j)
        if (!std::isfinite(v[j])) {
          bad = j;
          break;
        }
    }
  }
  if (bad < 0) return;
  const int64_t per_row = n / input.size(0);
  const float x = v[bad];
  throw ServiceError(absl::StatusCode::kInvalidArgument,
                     detail::StrCat("inputs[0]: model \"", model, "\" expects finite values, got ",
                                    std::isnan(x) ? "NaN" : (x > 0 ? "inf" : "-inf"), " in row ", bad / per_row,
                                    " at element ", bad % per_row, " of the row"));
}

}  // namespace

v1::PredictResponse ModelRegistry::Predict(const v1::PredictRequest& request, Batcher::Clock::time_point deadline) {
  ANVIL_SERVICE_CHECK(!request.model().empty(), absl::StatusCode::kInvalidArgument, "model: expected a model name");
  std::shared_ptr<ServedModel> m = Get(request.model(), request.version());
  fault_point("serving:predict");
  const models::BuiltModel& b = m->loaded.built;
  ANVIL_SERVICE_CHECK(request.inputs_size() == 1, absl::StatusCode::kInvalidArgument, "inputs: model \"", m->row.name,
                      "\" takes exactly one input tensor (\"", b.input_name, "\"), got ", request.inputs_size());
  const v1::Tensor& wire = request.inputs(0);
  ANVIL_SERVICE_CHECK(wire.name().empty() || wire.name() == b.input_name, absl::StatusCode::kInvalidArgument,
                      "inputs: model \"", m->row.name, "\" has no input named \"", echo(wire.name()),
                      "\" (it has: ", b.input_name, ")");
  ANVIL_SERVICE_CHECK(wire.dtype() == to_wire_dtype(b.input_dtype), absl::StatusCode::kInvalidArgument,
                      "inputs[0]: model \"", m->row.name, "\" expects dtype ",
                      wire_dtype_name(to_wire_dtype(b.input_dtype)), ", got ", wire_dtype_name(wire.dtype()));
  IntArray expected{-1};
  expected.insert(expected.end(), b.input_shape.begin(), b.input_shape.end());
  bool shape_ok = wire.shape_size() == static_cast<int>(expected.size()) && wire.shape(0) >= 1;
  // -1: a symbolic dim of an imported ONNX model (any size).
  for (int i = 1; shape_ok && i < wire.shape_size(); ++i) {
    shape_ok = wire.shape(i) == expected[i] || (expected[i] == -1 && wire.shape(i) >= 1);
  }
  std::string expected_str = "[N";  // the batch dim: any size
  for (int64_t d : b.input_shape) expected_str += ", " + (d < 0 ? std::string("*") : std::to_string(d));
  expected_str += "]";
  ANVIL_SERVICE_CHECK(shape_ok, absl::StatusCode::kInvalidArgument, "inputs[0]: model \"", m->row.name,
                      "\" expects shape ", expected_str, ", got ",
                      shape_str(IntArray(wire.shape().begin(), wire.shape().end())));
  ANVIL_SERVICE_CHECK(request.top_k() >= 0, absl::StatusCode::kInvalidArgument, "top_k: expected >= 0, got ",
                      request.top_k());
  // The decoded input counts against the same budget as the forwards, until its batch is done.
  Tensor input;
  {
    std::optional<MemoryBudgetScope> bound;
    if (predict_budget_ != nullptr) bound.emplace(predict_budget_);
    input = decode_tensor(wire);
  }
  CheckFinite(input, m->row.name);
  Tensor out = value_or_throw(m->batcher->run(std::move(input), deadline));

  v1::PredictResponse response;
  response.set_model(m->row.name);
  response.set_version(m->row.version);
  encode_tensor(out, b.output_name, response.add_outputs());
  if (request.top_k() > 0) {
    ANVIL_SERVICE_CHECK(out.dim() == 2, absl::StatusCode::kInvalidArgument, "top_k: model \"", m->row.name,
                        "\" is not a classifier (output ", shape_str(out.sizes()), ")");
    const models::TopClasses top = models::top_classes(out, request.top_k());
    const int64_t k = top.classes.size(1);
    const int64_t* classes = top.classes.data_ptr<int64_t>();
    const float* probabilities = top.probabilities.data_ptr<float>();
    const std::vector<std::string>& labels = m->loaded.info.labels;
    for (int64_t r = 0; r < out.size(0); ++r) {
      v1::TopK* t = response.add_top_k();
      for (int64_t j = 0; j < k; ++j) {
        const int64_t cls = classes[r * k + j];
        t->add_classes(cls);
        t->add_probabilities(probabilities[r * k + j]);
        t->add_labels(cls < static_cast<int64_t>(labels.size()) ? labels[cls] : std::to_string(cls));
      }
    }
  }
  return response;
}

void ModelRegistry::prefetch(const std::string& name, int64_t version) {
  MutexLock lock(&prefetch_mu_);
  if (prefetch_stopping_ || prefetch_queue_.size() >= 64) return;
  for (const auto& queued : prefetch_queue_) {
    if (queued.first == name && queued.second == version) return;
  }
  prefetch_queue_.emplace_back(name, version);
  if (!prefetcher_.joinable()) prefetcher_ = std::thread([this] { Prefetch(); });
  prefetch_cv_.notify_one();
}

void ModelRegistry::Prefetch() {
  for (;;) {
    std::pair<std::string, int64_t> next;
    {
      UniqueMutexLock lock(&prefetch_mu_);
      while (!prefetch_stopping_ && prefetch_queue_.empty()) prefetch_cv_.wait(lock.native());
      if (prefetch_stopping_) return;
      next = std::move(prefetch_queue_.front());
      prefetch_queue_.pop_front();
    }
    {
      MutexLock lock(&mu_);
      if (closed_ || loaded_.contains(next)) continue;
    }
    const auto start = std::chrono::steady_clock::now();
    const absl::StatusOr<std::shared_ptr<ServedModel>> m = get(next.first, std::to_string(next.second));
    if (m.ok()) {
      log(LogLevel::kInfo, "model \"", next.first, "\" version ", next.second, " loaded ahead of its first Predict (",
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count(),
          " ms)");
    } else {
      log(LogLevel::kInfo, "model \"", next.first, "\" version ", next.second,
          " not loaded ahead (its first Predict loads it): ", m.status().message());
    }
  }
}

void ModelRegistry::close() {
  std::thread prefetcher;
  {
    MutexLock lock(&prefetch_mu_);
    prefetch_stopping_ = true;
    prefetcher.swap(prefetcher_);
  }
  prefetch_cv_.notify_all();
  if (prefetcher.joinable()) prefetcher.join();
  Loaded models;
  {
    MutexLock lock(&mu_);
    if (closed_) return;
    closed_ = true;
    models.swap(loaded_);
  }
  for (auto& [key, m] : models) m->batcher->close();
}

}  // namespace anvil::server
