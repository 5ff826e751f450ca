// The Serving service: Predict, ListModels, GetModel, Export.
#include <absl/strings/numbers.h>
#include <absl/strings/str_cat.h>
#include <google/protobuf/util/json_util.h>
#include <grpcpp/impl/codegen/proto_buffer_reader.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

#include "core/models/serving.h"
#include "core/onnx/export.h"
#include "core/onnx/import.h"
#include "core/onnx/verify.h"
#include "core/util/clock.h"
#include "core/util/file.h"
#include "core/util/sha256.h"
#include "core/util/utf8.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "server/artifacts/digest.h"
#include "server/auth.h"
#include "server/bounded_executor.h"
#include "server/heavy_work.h"
#include "server/job_spec.h"
#include "server/listings.h"
#include "server/predict_accounting.h"
#include "server/state.h"
#include "server/status.h"
#include "server/stream_calls.h"
#include "server/unary_call.h"
#include "server/wire_scan.h"
#include "workers/job_plan.h"
#include "workers/job_quantize.h"

namespace anvil::server {
namespace {

namespace fs = std::filesystem;
using grpc::ServerContext;
using grpc::Status;

// Predict takes its request as raw bytes (a raw callback method): the bytes are scanned for
// counts before protobuf parses them (server/wire_scan.h), and the work runs on a bounded
// pool, not on gRPC's threads, so a flood of calls queues in bounded memory or is refused.
// ListModels and GetModel are raw callback methods too (server/unary_call.h), on the call pool.
using ServingBase = v1::Serving::WithRawCallbackMethod_Predict<
    v1::Serving::WithRawCallbackMethod_ListModels<v1::Serving::WithRawCallbackMethod_GetModel<
        v1::Serving::WithRawCallbackMethod_Export<v1::Serving::WithRawCallbackMethod_RegisterModel<
            v1::Serving::WithRawCallbackMethod_Quantize<v1::Serving::Service>>>>>>;
using ExportWriter = PooledWriter<v1::ExportRequest, v1::ExportChunk>;
// A registered model's class names (ImageNet-21k has 21,841).
constexpr int kMaxLabels = 65536;
constexpr size_t kMaxLabelBytes = 256;
using ChunkReader = PooledReader<v1::RegisterModelChunk, v1::Model>;

class ServingService final : public ServingBase {
 public:
  explicit ServingService(AnvilServer::State& s) : s_(s), pool_(*s.predict_pool) {
    limits_.max_bytes = s.options.limits.predict_message_bytes;
    limits_.service = "Serving";
    limits_.calls = "calls";
    limits_.flag = "--max-predict-message-mb";
    limits_.wire.max_fields = s.options.limits.max_wire_fields;
    predict_limits_ = limits_;
    predict_limits_.calls = "Predicts";
    stream_limits_ = limits_;
    stream_limits_.calls = "streaming calls (Export, RegisterModel)";
    stream_limits_.stall_timeout = s.options.limits.stream_stall_timeout;
  }

  using Raw = grpc::ByteBuffer;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &ServingService::ListModelsImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &ServingService::GetModelImpl, c, in, out, *s_.call_pool, limits_);
  }
  // Exports and uploads run on the stream pool: a slow client holds its thread, not the call
  // pool's. Their CPU-heavy part (an ONNX capture, an upload's conversion) waits for the work
  // pool (server/heavy_work.h).
  grpc::ServerWriteReactor<Raw>* Export(grpc::CallbackServerContext* c, const Raw* in) override {
    return ExportWriter::start(c, in, *s_.stream_pool, stream_limits_,
                               [this](grpc::CallbackServerContext* ctx, const v1::ExportRequest& req,
                                      ExportWriter& writer) { return ExportImpl(ctx, &req, writer); });
  }
  grpc::ServerReadReactor<Raw>* RegisterModel(grpc::CallbackServerContext* c, Raw* out) override {
    return ChunkReader::start(c, out, *s_.stream_pool, stream_limits_,
                              [this](grpc::CallbackServerContext* ctx, ChunkReader& reader, v1::Model* resp) {
                                return RegisterModelImpl(ctx, reader, resp);
                              });
  }

  // Calibration and evaluation take seconds: the work pool's, like Export's capture.
  grpc::ServerUnaryReactor* Quantize(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method_heavy(this, &ServingService::QuantizeImpl, c, in, out, *s_.call_pool, *s_.work_pool, limits_,
                              [](const v1::QuantizeRequest&) { return true; });
  }

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                    grpc::ByteBuffer* response) override {
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    // Counted before the draining check (the drain sets the flag, then waits for the count):
    // every Predict admitted here is answered before the server stops.
    s_.predicts_in_flight.fetch_add(1);
    if (s_.draining.load()) {
      Finish(reactor, to_grpc(absl::UnavailableError("the server is shutting down")));
      return reactor;
    }
    const bool queued = pool_.try_submit(
        [this, ctx, request, response, reactor] { Finish(reactor, PredictRaw(ctx, *request, response)); });
    if (!queued) {
      Finish(reactor, to_grpc(absl::ResourceExhaustedError(absl::StrCat(
                          "too many Predicts at once (", s_.options.limits.max_concurrent_predicts, " running and ",
                          s_.options.limits.max_predict_queue, " queued); retry with backoff"))));
    }
    return reactor;
  }

  Status PredictRaw(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer& request, grpc::ByteBuffer* response) {
    v1::PredictRequest req;
    const Status parsed = Guard([&] {
      Auth(*ctx, Scope::kServe, "Predict");
      ANVIL_SERVICE_CHECK(!s_.draining.load(), absl::StatusCode::kUnavailable, "the server is shutting down");
      // gRPC's receive limit is the larger of the two services': Predict's own applies here,
      // before the Predict-specific counts (inputs, dims, names), then the common wire check.
      const int64_t size = static_cast<int64_t>(request.Length());
      ANVIL_SERVICE_CHECK(size <= s_.options.limits.predict_message_bytes, absl::StatusCode::kResourceExhausted,
                          "PredictRequest: ", size, " bytes; the server takes at most ",
                          s_.options.limits.predict_message_bytes, " (anvild --max-predict-message-mb)");
      grpc::ByteBuffer bytes(request);  // shares the slices: the reader consumes its own copy
      grpc::ProtoBufferReader reader(&bytes);
      scan_predict_request(reader, s_.options.limits);
    });
    if (!parsed.ok()) return parsed;
    if (Status st = parse_request(request, &req, predict_limits_); !st.ok()) return st;
    v1::PredictResponse resp;
    const Status st = counted_predict(s_, req.model(), [&] { return PredictImpl(ctx, req, resp); });
    if (!st.ok()) return st;
    bool own = false;
    return grpc::SerializationTraits<v1::PredictResponse>::Serialize(resp, response, &own);
  }

  Status PredictImpl(grpc::CallbackServerContext* ctx, const v1::PredictRequest& req, v1::PredictResponse& resp) {
    return Guard([&] {
      ANVIL_ASSIGN_OR_RETURN(resp, s_.registry->predict(req, batcher_deadline(*ctx)));
      return absl::OkStatus();
    });
  }

  Status ListModelsImpl(grpc::ServerContextBase* ctx, const v1::ListModelsRequest* req, v1::ListModelsResponse* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kServe, "ListModels");
      ModelPage page = list_models_page(*s_.store, *req);
      resp->set_next_page_token(page.next_page_token);
      for (const ModelRow& row : page.rows) {
        if (absl::StatusOr<v1::Model> described = s_.registry->describe_row(row); described.ok()) {
          *resp->add_models() = *std::move(described);
        } else {  // e.g. a corrupt archive: still listed, without a signature
          v1::Model* m = resp->add_models();
          m->set_name(row.name);
          m->set_version(row.version);
          m->set_job_id(row.job_id);
          m->set_created_unix_ms(row.created_ms);
        }
      }
    });
  }

  Status QuantizeImpl(grpc::ServerContextBase* ctx, const v1::QuantizeRequest* req, v1::QuantizeResponse* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "Quantize");
      ANVIL_SERVICE_CHECK(!s_.draining.load(), absl::StatusCode::kUnavailable, "the server is shutting down");
      ANVIL_SERVICE_CHECK(!req->model().empty(), absl::StatusCode::kInvalidArgument, "model: expected a model name");
      v1::QuantizeSpec spec = req->spec();
      validate_quantize_spec(&spec, "spec");
      const std::shared_ptr<ServedModel> m = value_or_throw(s_.registry->get(req->model(), req->version()));
      ANVIL_SERVICE_CHECK(m->loaded.info.precision != "int8", absl::StatusCode::kFailedPrecondition, "model \"",
                          m->row.name, "\" version ", m->row.version, " is already int8");
      if (is_onnx_row(m->row)) return QuantizeImported(*ctx, *req, spec, *m, resp);
      // The data: the request's, or that of the job that trained the model.
      const std::optional<JobRow> job = m->row.job_id.empty() ? std::nullopt : s_.store->get_job(m->row.job_id);
      std::optional<v1::JobSpec> trained;
      if (job.has_value()) {
        trained.emplace();
        ANVIL_SERVICE_CHECK(google::protobuf::util::JsonStringToMessage(to_valid_utf8(job->spec_json), &*trained).ok(),
                            absl::StatusCode::kDataLoss, "job ", job->id, ": its stored spec does not parse");
      }
      v1::JobSpec plan_spec;
      if (req->has_dataset()) {
        *plan_spec.mutable_dataset() = req->dataset();
      } else {
        ANVIL_SERVICE_CHECK(trained.has_value(), absl::StatusCode::kInvalidArgument, "dataset: model \"", m->row.name,
                            "\" was not trained by a job here; give the dataset "
                            "to calibrate and evaluate on");
        *plan_spec.mutable_dataset() = trained->dataset();
        plan_spec.set_batch_size(trained->batch_size());
        plan_spec.set_seed(trained->seed());  // generated datasets and the split follow it
      }
      plan_spec.set_name("quantize");
      plan_spec.set_model_json(m->loaded.built.spec);
      plan_spec.set_epochs(1);
      const v1::JobSpec checked = AsRequestDataset([&] {
        return validate_job_spec(plan_spec, {s_.data_root, s_.scheduler->devices(), s_.options.max_job_memory});
      });
      workers::JobPlan plan;
      try {
        const ScopedInterruptionCheck loops = stop_inside_loops_if_abandoned(*ctx, "quantization");
        plan = workers::make_job_plan(
            checked, {s_.data_root, s_.options.datasets_dir, "", kCPU, s_.options.max_job_memory},
            /*seed_generator=*/false, [ctx](std::string_view done) { stop_if_abandoned(*ctx, "quantization", done); },
            workers::PlanPurpose::kQuantization);
        plan.model.module->load_state_dict(m->loaded.built.module->state_dict());
      } catch (const Error& e) {
        throw ServiceError(absl::StatusCode::kInvalidArgument,
                           scrub_paths(std::string("dataset: ") + e.what(), s_.data_root));
      }
      // Calibrated on the request's data, the int8 version is still gated on the validation
      // split of the job that trained it (when that data can still be read): an
      // unrepresentative calibration set must not also be the yardstick that passes it.
      std::string gated_on;
      if (req->has_dataset() && trained.has_value()) {
        gated_on = GateOnJobsValidation(*ctx, *job, *trained, plan);
      }
      const std::string relative = "quantized/" + m->row.name + "-v" + std::to_string(m->row.version) + "-" +
                                   spec.mode() + "-" + std::to_string(unix_millis()) + ".anvil";
      const fs::path path = fs::path(s_.data_root) / relative;
      fs::create_directories(path.parent_path());
      models::ModelInfo info = m->loaded.info;
      info.job_id = m->row.job_id;
      const workers::QuantizeOutcome outcome =
          workers::quantize_trained_model(spec, plan, info, path.string(), /*seed=*/1);
      resp->set_message(outcome.failure == workers::QuantizeOutcome::Failure::kNone ? outcome.summary + gated_on
                                                                                    : outcome.summary);
      resp->set_float_accuracy(outcome.float_accuracy.value_or(0));
      resp->set_int8_accuracy(outcome.int8_accuracy.value_or(0));
      for (const quant::LayerError& l : outcome.layers) {
        v1::LayerQuantizationError* e = resp->add_layers();
        e->set_layer(l.path);
        e->set_type(l.type);
        e->set_sqnr_db(l.sqnr_db);
      }
      RefuseFailure(outcome);
      if (outcome.archive.empty()) return;  // refused by the gate: said in message
      RegisterQuantized(*m, relative, path, {}, resp);
    });
  }

  // Puts the validation split of `job`'s own data in `plan` for the gate; what the gate
  // measured on, for the response's message.
  std::string GateOnJobsValidation(grpc::ServerContextBase& ctx, const JobRow& job, const v1::JobSpec& trained,
                                   workers::JobPlan& plan) {
    // The request's own validation split is not measured then, but a NaN or an infinity in it
    // is still bad data, refused as the rest of the request's data is.
    if (plan.val_set != nullptr) {
      data::DataLoader rows(plan.val_set, {.batch_size = 256});
      int64_t batch = 0;
      try {
        for (auto& b : rows) quant::check_finite_batch(b[plan.options.input_key], "validation", batch++);
      } catch (const quant::NonFiniteInputError& e) {
        throw ServiceError(absl::StatusCode::kInvalidArgument,
                           std::string("int8 quantization failed: ") + e.what() + "; nothing was registered");
      }
    }
    v1::DatasetSpec dataset = trained.dataset();
    try {
      validate_dataset_spec(&dataset, {s_.data_root, s_.scheduler->devices(), s_.options.max_job_memory});
      const ScopedInterruptionCheck loops = stop_inside_loops_if_abandoned(ctx, "quantization");
      workers::JobData data = workers::make_job_data(
          dataset, {s_.data_root, s_.options.datasets_dir, "", kCPU, s_.options.max_job_memory}, trained.seed());
      if (data.val_set == nullptr || data.val_set->size() == 0) return " (gated on the request's dataset)";
      plan.val_set = data.val_set;
      return " (gated on the validation split of job " + job.id + ", which trained the model)";
    } catch (const ServiceError&) {
    } catch (const Error&) {
    }
    return " (gated on the request's dataset: the data of job " + job.id + ", which trained the model, is unreadable)";
  }

  // The spec checks name a JobSpec's fields ("spec.dataset.path"); a QuantizeRequest's dataset
  // is its own field, `dataset`.
  template <typename F>
  static std::invoke_result_t<F> AsRequestDataset(F&& check) {
    try {
      return check();
    } catch (const ServiceError& e) {
      const std::string message(e.status().message());
      if (message.rfind("spec.dataset", 0) == 0) throw ServiceError(e.code(), message.substr(std::strlen("spec.")));
      throw;
    }
  }

  // A quantization that failed before any verdict is the RPC's error, not an answer: a NaN or
  // infinite value in the data, or a keep_float path that names no layer, is the request's
  // input (INVALID_ARGUMENT); anything else the model's (FAILED_PRECONDITION: it has nothing
  // quantizable, or its file does not parse).
  void RefuseFailure(const workers::QuantizeOutcome& outcome) const {
    using Failure = workers::QuantizeOutcome::Failure;
    if (outcome.failure == Failure::kNone) return;
    throw ServiceError(
        outcome.failure == Failure::kInput ? absl::StatusCode::kInvalidArgument : absl::StatusCode::kFailedPrecondition,
        scrub_paths(outcome.summary, s_.data_root) + "; nothing was registered");
  }

  // A registered file's bytes as registered, or DATA_LOSS: the resident model was checked when
  // it loaded, and the file may have changed on disk since.
  static std::string RegisteredBytes(const ServedModel& m) {
    std::string bytes;
    try {
      bytes = read_file(m.archive_path);
    } catch (const Error&) {
      throw ServiceError(
          absl::StatusCode::kDataLoss,
          detail::StrCat("model \"", m.row.name, "\" version ", m.row.version, ": its file is missing or unreadable"));
    }
    const std::string stored = nlohmann::json::parse(m.row.signature_json).value("sha256", "");
    ANVIL_SERVICE_CHECK(stored.empty() || sha256_hex(bytes) == stored, absl::StatusCode::kDataLoss, "model \"",
                        m.row.name, "\" version ", m.row.version,
                        ": its file changed on disk since it was registered (SHA-256 mismatch)");
    return bytes;
  }

  // The int8 file at `path` (`relative` in the data root) as the next version of `m`'s model;
  // the file is removed when it cannot be registered.
  void RegisterQuantized(const ServedModel& m, const std::string& relative, const fs::path& path,
                         const std::vector<std::string>& labels, v1::QuantizeResponse* resp) {
    const absl::StatusOr<ModelRow> row = s_.registry->register_archive(m.row.name, m.row.job_id, relative, labels);
    if (!row.ok()) {
      std::error_code ec;
      fs::remove(path, ec);
      throw ServiceError(row.status());
    }
    resp->set_registered(true);
    *resp->mutable_model() =
        s_.registry->describe(*value_or_throw(s_.registry->get(row->name, std::to_string(row->version))));
  }

  // Quantize for an imported ONNX graph (core/onnx/quantize_graph.h): static (calibrated on the
  // request's dataset) or dynamic, evaluated on the request's dataset either way (such a model
  // has no job whose data it could reuse).
  void QuantizeImported(grpc::ServerContextBase& ctx, const v1::QuantizeRequest& req, const v1::QuantizeSpec& spec,
                        const ServedModel& m, v1::QuantizeResponse* resp) {
    ANVIL_SERVICE_CHECK(req.has_dataset(), absl::StatusCode::kInvalidArgument, "dataset: model \"", m.row.name,
                        "\" is an imported ONNX graph; give the dataset to ",
                        spec.mode() == "dynamic" ? "evaluate" : "calibrate and evaluate", " on");
    v1::DatasetSpec dataset = req.dataset();
    AsRequestDataset([&] {
      validate_dataset_spec(&dataset, {s_.data_root, s_.scheduler->devices(), s_.options.max_job_memory});
    });
    workers::JobData data;
    try {
      const ScopedInterruptionCheck loops = stop_inside_loops_if_abandoned(ctx, "quantization");
      data = workers::make_job_data(
          dataset, {s_.data_root, s_.options.datasets_dir, "", kCPU, s_.options.max_job_memory}, req.seed());
    } catch (const Error& e) {
      throw ServiceError(absl::StatusCode::kInvalidArgument,
                         scrub_paths(std::string("dataset: ") + e.what(), s_.data_root));
    }
    // The labels must be classes the graph scores, as a trained model's plan checks.
    const IntArray& out = m.loaded.built.output_shape;
    ANVIL_SERVICE_CHECK(data.num_classes == 0 || out.size() != 1 || out[0] < 0 || data.num_classes <= out[0],
                        absl::StatusCode::kInvalidArgument, "dataset: model \"", m.row.name, "\" gives ",
                        out.empty() ? 0 : out[0], " outputs per sample, which cannot score the dataset's ",
                        data.num_classes, " classes");
    stop_if_abandoned(ctx, "quantization", "its data, before its calibration");
    const std::string relative = "quantized/" + m.row.name + "-v" + std::to_string(m.row.version) + "-" + spec.mode() +
                                 "-" + std::to_string(unix_millis()) + ".onnx";
    const fs::path path = fs::path(s_.data_root) / relative;
    fs::create_directories(path.parent_path());
    const workers::QuantizeOutcome outcome =
        workers::quantize_imported_model(spec, RegisteredBytes(m), data, /*batch_size=*/64, path.string(), /*seed=*/1);
    resp->set_message(outcome.summary);
    resp->set_float_accuracy(outcome.float_accuracy.value_or(0));
    resp->set_int8_accuracy(outcome.int8_accuracy.value_or(0));
    RefuseFailure(outcome);
    if (outcome.archive.empty()) return;  // refused by the gate: said in message
    RegisterQuantized(m, relative, path, m.loaded.info.labels, resp);
  }

  Status GetModelImpl(grpc::ServerContextBase* ctx, const v1::GetModelRequest* req, v1::Model* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kServe, "GetModel");
      ANVIL_SERVICE_CHECK(!req->name().empty(), absl::StatusCode::kInvalidArgument, "name: expected a model name");
      *resp = s_.registry->describe(*value_or_throw(s_.registry->get(req->name(), req->version())));
    });
  }

  // Streams the file in chunks (any size, far beyond the message limit); the last message
  // carries the size and SHA-256 of everything sent.
  Status ExportImpl(grpc::ServerContextBase* ctx, const v1::ExportRequest* req, ExportWriter& writer) {
    return Guard([&] {
      Auth(*ctx, Scope::kServe, "Export");
      ANVIL_SERVICE_CHECK(!req->model().empty(), absl::StatusCode::kInvalidArgument, "model: expected a model name");
      ANVIL_SERVICE_CHECK(req->format() == v1::NATIVE || req->format() == v1::SAFETENSORS || req->format() == v1::ONNX,
                          absl::StatusCode::kInvalidArgument, "format: expected NATIVE, SAFETENSORS or ONNX, got ",
                          v1::ExportFormat_Name(req->format()).empty()
                              ? "ExportFormat(" + std::to_string(static_cast<int>(req->format())) + ")"
                              : v1::ExportFormat_Name(req->format()));
      ANVIL_SERVICE_CHECK(req->format() == v1::ONNX || (req->opset() == 0 && req->dynamic_axes_size() == 0 &&
                                                        !req->verify() && !req->fold_batch_norm()),
                          absl::StatusCode::kInvalidArgument,
                          "opset, dynamic_axes, verify and fold_batch_norm apply to ONNX exports only");
      const std::shared_ptr<ServedModel> m = value_or_throw(s_.registry->get(req->model(), req->version()));
      std::string file_name = m->row.name + "-v" + std::to_string(m->row.version);
      // The bytes come from the engine (core/models/serving.h); this handler checks the
      // archive against the store's record and streams.
      const std::string& path = m->archive_path;  // loaded from the artifact store, checked
      std::string stored;
      if (req->format() == v1::NATIVE) {
        // The file as registered, or DATA_LOSS: never stream a corrupted archive under a fresh hash.
        stored = nlohmann::json::parse(m->row.signature_json).value("sha256", "");
        ANVIL_SERVICE_CHECK(stored.empty() || sha256_file(path) == stored, absl::StatusCode::kDataLoss, "model \"",
                            m->row.name, "\" version ", m->row.version,
                            ": its archive changed on disk since it was "
                            "registered (SHA-256 mismatch)");
      }
      std::unique_ptr<models::ExportPayload> payload;
      std::string verification;
      if (req->format() == v1::ONNX) {
        std::string onnx_bytes;
        run_heavy_work(*s_.work_pool, *ctx, [&] { onnx_bytes = ExportOnnx(*ctx, *m, *req, &verification); });
        payload = models::bytes_export(file_name + ".onnx", std::move(onnx_bytes));
      } else {
        try {
          if (req->format() == v1::NATIVE && is_onnx_row(m->row)) {
            // NATIVE of an imported model is the ONNX file it was registered from.
            payload = models::bytes_export(file_name + ".onnx", read_file(path));
          } else {
            payload = models::open_export(
                req->format() == v1::NATIVE ? models::ExportFormat::kNative : models::ExportFormat::kSafetensors,
                file_name, path, *m->loaded.built.module, m->row.name);
          }
        } catch (const Error& e) {
          throw ServiceError(absl::StatusCode::kDataLoss, "model \"" + m->row.name + "\": " + e.what());
        }
      }
      file_name = payload->file_name();
      auto read = [&](char* out, size_t n) { return payload->read(out, n); };
      Digest hash;
      std::string buffer(static_cast<size_t>(s_.options.export_chunk_bytes), '\0');
      int64_t total = 0;
      // One chunk ahead, so the last message (with size and hash) still carries data.
      size_t n = read(buffer.data(), buffer.size());
      while (true) {
        ANVIL_SERVICE_CHECK(!ctx->IsCancelled(), absl::StatusCode::kCancelled, "export cancelled by the client");
        v1::ExportChunk c;
        c.set_data(buffer.data(), n);
        hash.update(buffer.data(), n);
        total += static_cast<int64_t>(n);
        n = n == buffer.size() ? read(buffer.data(), buffer.size()) : 0;
        const bool last = n == 0;
        if (last) {
          const std::string digest = hash.hex();
          // A file that changed while it streamed: the client must not keep it.
          ANVIL_SERVICE_CHECK(stored.empty() || digest == stored, absl::StatusCode::kDataLoss, "model \"", m->row.name,
                              "\": its archive changed while it was exported");
          c.set_total_bytes(total);
          c.set_sha256(digest);
          c.set_file_name(file_name);
          c.set_verification(verification);
        }
        if (!writer.write(c)) return;
        if (last) break;
      }
    });
  }

  // An ONNX file in pieces: read to the size limit, checked and converted (nothing is written
  // for a file Anvil cannot serve), then written atomically under <data>/imports/ and
  // registered as the name's next version.
  Status RegisterModelImpl(grpc::ServerContextBase* ctx, ChunkReader& reader, v1::Model* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "RegisterModel");
      v1::RegisterModelChunk c;
      std::string name, claimed_sha, bytes;
      std::vector<std::string> labels;
      bool first = true;
      while (reader.read(&c)) {
        if (first) {
          name = c.name();
          // Labels are stored with the version and returned by every GetModel: bounded.
          ANVIL_SERVICE_CHECK(c.labels_size() <= kMaxLabels, absl::StatusCode::kInvalidArgument,
                              "labels: expected at most ", kMaxLabels, ", got ", c.labels_size());
          for (int i = 0; i < c.labels_size(); ++i) {
            ANVIL_SERVICE_CHECK(c.labels(i).size() <= kMaxLabelBytes, absl::StatusCode::kInvalidArgument, "labels[", i,
                                "]: ", c.labels(i).size(), " bytes; expected at most ", kMaxLabelBytes);
          }
          labels.assign(c.labels().begin(), c.labels().end());
          ANVIL_SERVICE_CHECK(is_valid_name(name), absl::StatusCode::kInvalidArgument,
                              "name: expected 1-64 characters of letters, digits, '.', '_' or '-', got \"",
                              name.substr(0, 80), "\"");
          first = false;
        }
        if (!c.sha256().empty()) claimed_sha = c.sha256();
        ANVIL_SERVICE_CHECK(static_cast<int64_t>(bytes.size() + c.data().size()) <= s_.options.max_import_bytes,
                            absl::StatusCode::kResourceExhausted, "the file is over the limit of ",
                            s_.options.max_import_bytes, " bytes (anvild config max_import_mb)");
        bytes += c.data();
      }
      // A chunk refused on the wire (malformed, too large) ends the upload with its status:
      // never a model made of the chunks before it.
      if (const grpc::Status read = reader.status(); !read.ok()) {
        throw ServiceError(absl::Status(static_cast<absl::StatusCode>(read.error_code()), read.error_message()));
      }
      ANVIL_SERVICE_CHECK(!first, absl::StatusCode::kInvalidArgument, "RegisterModel: the stream carried no message");
      ANVIL_SERVICE_CHECK(!ctx->IsCancelled(), absl::StatusCode::kCancelled, "RegisterModel cancelled by the client");
      const std::string sha = sha256_hex(bytes);
      ANVIL_SERVICE_CHECK(claimed_sha.empty() || claimed_sha == sha, absl::StatusCode::kDataLoss,
                          "the file's SHA-256 is ", sha, ", the client announced ", claimed_sha,
                          ": it changed on the way");
      const std::string relative = "imports/" + name + "-" + sha.substr(0, 16) + ".onnx";
      const fs::path path = fs::path(s_.data_root) / relative;
      fs::create_directories(path.parent_path());
      // The same bytes under the same name may be registered already (a version of its own):
      // what this call did not create, a failure here does not remove.
      bool existed = true;
      try {
        existed = s_.registry->artifacts().stat(relative).has_value() || fs::exists(path);
      } catch (const std::exception&) {
      }
      write_file_atomic(path.string(), bytes);
      // Registering builds and runs the model (the conversion): the work pool's. When it
      // fails (or never ran: the pool was full, the client left) the registry wrote no row,
      // and the file goes too.
      absl::StatusOr<ModelRow> row = absl::UnknownError("not registered");
      try {
        run_heavy_work(*s_.work_pool, *ctx, [&] { row = s_.registry->register_archive(name, "", relative, labels); });
      } catch (...) {
        row = current_exception_status();
      }
      if (!row.ok()) {
        if (!existed) {
          std::error_code ec;
          fs::remove(path, ec);
          try {
            s_.registry->artifacts().remove(relative);
          } catch (const std::exception&) {  // an unreferenced object is harmless
          }
        }
        throw ServiceError(row.status().code(), absl::StrCat(row.status().message(), "; nothing was registered"));
      }
      *resp = s_.registry->describe(*value_or_throw(s_.registry->get(row->name, std::to_string(row->version))));
    });
  }

 private:
  // The model's ONNX file: bad options are INVALID_ARGUMENT; a model the exporter cannot
  // capture (an op without an ONNX form, data-dependent control flow) is FAILED_PRECONDITION,
  // with the exporter's message naming the op. A client that leaves during the capture stops
  // the call before its verification.
  std::string ExportOnnx(const grpc::ServerContextBase& ctx, const ServedModel& m, const v1::ExportRequest& req,
                         std::string* verification) {
    const models::BuiltModel& built = m.loaded.built;
    const std::vector<onnx::InputSignature> inputs{{built.input_name, built.input_shape, built.input_dtype}};
    onnx::ExportOptions options;
    if (req.opset() != 0) options.opset = req.opset();
    ANVIL_SERVICE_CHECK(options.opset >= onnx::kMinOpset && options.opset <= onnx::kMaxOpset,
                        absl::StatusCode::kInvalidArgument, "opset: expected ", onnx::kMinOpset, " to ",
                        onnx::kMaxOpset, ", got ", req.opset());
    ANVIL_SERVICE_CHECK(req.dynamic_axes_size() <= 8, absl::StatusCode::kInvalidArgument,
                        "dynamic_axes: at most 8, got ", req.dynamic_axes_size());
    for (const std::string& text : req.dynamic_axes()) {
      try {
        options.dynamic_axes.push_back(onnx::parse_dynamic_axis(text, inputs));
      } catch (const Error& e) {
        throw ServiceError(absl::StatusCode::kInvalidArgument, e.what());
      }
    }
    options.fold_batch_norm = req.fold_batch_norm();
    options.output_names = {built.output_name};  // the name Predict and ModelInfer answer with
    options.producer_version = ANVIL_VERSION_STRING;
    options.graph_name = m.row.name;
    options.metadata = {
        {"anvil.model", m.row.name},
        {"anvil.version", std::to_string(m.row.version)},
        {"anvil.spec", built.spec},
        {"labels",
         nlohmann::json(m.loaded.info.labels).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)}};
    std::string bytes;
    try {
      bytes = onnx::export_model(*built.module, inputs, options);
    } catch (const exporter::CaptureError& e) {
      throw ServiceError(absl::StatusCode::kFailedPrecondition,
                         "model \"" + m.row.name + "\" cannot be exported to ONNX: " + e.what());
    }
    if (req.verify()) {
      stop_if_abandoned(ctx, "ONNX export", "its capture, before its verification");
      nn::Module& module = *built.module;
      const std::vector<Tensor> params = module.parameters();
      const Device device = params.empty() ? kCPU : params.front().device();
      auto forward = [&module, device](const std::vector<Tensor>& xs) {
        return std::vector<Tensor>{module.forward(xs[0].to(device))};
      };
      try {
        // OpenCV DNN 4.6 cannot load QDQ int8 graphs: those are read back by Anvil's importer.
        const bool int8 = m.loaded.info.precision == "int8";
        const onnx::VerifyReport r = int8 ? onnx::verify_by_reimport(bytes, forward, inputs[0])
                                          : onnx::verify_in_opencv(bytes, forward, inputs[0]);
        *verification = r.runtime + (int8 ? " (OpenCV DNN 4.6 cannot load QDQ int8 graphs)" : "") + ": max |error|";
        for (size_t i = 0; i < r.max_error.size(); ++i) {
          *verification += absl::StrCat(i == 0 ? " " : ", ", absl::SixDigits(r.max_error[i].second), " at batch ",
                                        r.max_error[i].first);
        }
      } catch (const onnx::VerifyError& e) {
        throw ServiceError(absl::StatusCode::kFailedPrecondition,
                           "model \"" + m.row.name + "\": ONNX verification failed: " + e.what());
      }
    }
    return bytes;
  }

  template <typename F>
  Status Guard(F&& f) {
    return guarded({s_.data_root, s_.options.datasets_dir}, std::forward<F>(f));
  }

  void Auth(const grpc::ServerContextBase& ctx, Scope scope, const char* method) {
    authorize(s_.tokens.get(), ctx, scope, method);
  }

  void Finish(grpc::ServerUnaryReactor* reactor, const Status& st) {
    reactor->Finish(st);
    s_.predicts_in_flight.fetch_sub(1);
  }

  AnvilServer::State& s_;
  BoundedExecutor& pool_;  // the server's Predict pool, shared with KServe's ModelInfer
  CallLimits limits_, predict_limits_, stream_limits_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_serving_service(AnvilServer::State& state) {
  return std::make_unique<ServingService>(state);
}

}  // namespace anvil::server
