// The KServe v2 / Open Inference Protocol (proto/inference/grpc_service.proto) over the same
// models and batcher as anvil.v1.Serving: a ModelInfer is converted to a PredictRequest and
// run by the model registry, so it is validated, batched with the other requests, counted in
// the Predict metrics and bounded by the same limits; the outputs come back raw.
#include <cstring>

#include "proto/anvil/v1/anvil.pb.h"
#include "proto/inference/grpc_service.grpc.pb.h"
#include "server/auth.h"
#include "server/kserve_wire.h"
#include "server/predict_accounting.h"
#include "server/state.h"
#include "server/status.h"
#include "server/unary_call.h"

namespace anvil::server {
namespace {

using grpc::ServerContext;
using grpc::Status;

using svc = inference::GRPCInferenceService;
// Every method is a raw callback method (server/unary_call.h): the wire check and the
// Serving limit before parsing; ModelInfer runs on Predict's pool, behind Predict's queue, the
// rest on the call pool.
using KServeBase =
    svc::WithRawCallbackMethod_ServerLive<svc::WithRawCallbackMethod_ServerReady<svc::WithRawCallbackMethod_ModelReady<
        svc::WithRawCallbackMethod_ServerMetadata<svc::WithRawCallbackMethod_ModelMetadata<
            svc::WithRawCallbackMethod_ModelConfig<svc::WithRawCallbackMethod_ModelInfer<svc::Service>>>>>>>;

class KServeService final : public KServeBase {
 public:
  explicit KServeService(AnvilServer::State& s) : s_(s) {
    const RequestLimits& l = s.options.limits;
    limits_.max_bytes = l.predict_message_bytes;
    limits_.service = "Serving";
    limits_.calls = "calls";
    limits_.flag = "--max-predict-message-mb";
    limits_.wire.max_fields = l.max_wire_fields;
    // Inputs, outputs, raw contents and parameters: each entry an object once parsed (an empty
    // one is 2 bytes on the wire).
    limits_.wire.max_repeated = std::max(64, l.max_predict_inputs);
    infer_limits_ = limits_;
    infer_limits_.calls = "Predicts and ModelInfers";
  }

  using Raw = grpc::ByteBuffer;
  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &KServeService::ServerLiveImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &KServeService::ServerReadyImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &KServeService::ModelReadyImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &KServeService::ServerMetadataImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &KServeService::ModelMetadataImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &KServeService::ModelConfigImpl, c, in, out, *s_.call_pool, limits_);
  }
  // Counted like a Predict before it is queued (the drain waits for every admitted one), in the
  // same metrics, on the same pool and queue.
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    s_.predicts_in_flight.fetch_add(1);
    if (s_.draining.load()) {
      s_.predicts_in_flight.fetch_sub(1);
      grpc::ServerUnaryReactor* reactor = c->DefaultReactor();
      reactor->Finish(to_grpc(absl::UnavailableError("the server is shutting down")));
      return reactor;
    }
    grpc::ServerUnaryReactor* reactor = serve_unary<inference::ModelInferRequest, inference::ModelInferResponse>(
        c, in, out, *s_.predict_pool, infer_limits_,
        [this](grpc::CallbackServerContext* ctx, const inference::ModelInferRequest* req,
               inference::ModelInferResponse* resp) { return ModelInferImpl(ctx, req, resp); },
        [&state = s_] { state.predicts_in_flight.fetch_sub(1); });
    return reactor;
  }

  // Liveness and readiness answer without a token, like gRPC health.
  Status ServerLiveImpl(grpc::ServerContextBase*, const inference::ServerLiveRequest*,
                        inference::ServerLiveResponse* resp) {
    resp->set_live(true);
    return Status::OK;
  }
  Status ServerReadyImpl(grpc::ServerContextBase*, const inference::ServerReadyRequest*,
                         inference::ServerReadyResponse* resp) {
    resp->set_ready(!s_.draining.load());
    return Status::OK;
  }

  Status ModelReadyImpl(grpc::ServerContextBase* ctx, const inference::ModelReadyRequest* req,
                        inference::ModelReadyResponse* resp) {
    return Guard([&] {
      Auth(*ctx, "ModelReady");
      const absl::StatusOr<std::shared_ptr<ServedModel>> m =
          s_.registry->get(req->name(), kserve_version(req->version()));
      if (!m.ok() && m.status().code() != absl::StatusCode::kNotFound &&
          m.status().code() != absl::StatusCode::kFailedPrecondition) {
        return m.status();
      }
      resp->set_ready(!s_.draining.load() && m.ok());  // not: unknown, or its job has not finished
      return absl::OkStatus();
    });
  }

  Status ServerMetadataImpl(grpc::ServerContextBase* ctx, const inference::ServerMetadataRequest*,
                            inference::ServerMetadataResponse* resp) {
    return Guard([&] {
      Auth(*ctx, "ServerMetadata");
      resp->set_name("anvil");
      resp->set_version(ANVIL_VERSION_STRING);
    });
  }

  Status ModelMetadataImpl(grpc::ServerContextBase* ctx, const inference::ModelMetadataRequest* req,
                           inference::ModelMetadataResponse* resp) {
    return Guard([&] {
      Auth(*ctx, "ModelMetadata");
      const v1::Model m =
          s_.registry->describe(*value_or_throw(s_.registry->get(req->name(), kserve_version(req->version()))));
      resp->set_name(m.name());
      resp->set_platform("anvil");
      for (const ModelRow& row : s_.store->list_models(m.name())) resp->add_versions(std::to_string(row.version));
      for (const v1::TensorSignature& t : m.inputs()) Describe(t, resp->add_inputs());
      for (const v1::TensorSignature& t : m.outputs()) Describe(t, resp->add_outputs());
    });
  }

  Status ModelConfigImpl(grpc::ServerContextBase* ctx, const inference::ModelConfigRequest* req,
                         inference::ModelConfigResponse* resp) {
    return Guard([&] {
      Auth(*ctx, "ModelConfig");
      const v1::Model m =
          s_.registry->describe(*value_or_throw(s_.registry->get(req->name(), kserve_version(req->version()))));
      inference::ModelConfig* c = resp->mutable_config();
      c->set_name(m.name());
      c->set_platform("anvil");
      c->set_backend("anvil");
      // Dims without the batch dimension: requests may carry any number of rows, which the
      // batcher joins up to this many per forward.
      c->set_max_batch_size(static_cast<int32_t>(s_.options.batching.max_batch));
      for (const v1::TensorSignature& t : m.inputs()) {
        inference::ModelInput* in = c->add_input();
        in->set_name(t.name());
        in->set_data_type(kserve_type_of(t.dtype()).triton);
        for (int i = 1; i < t.shape_size(); ++i) in->add_dims(t.shape(i));
      }
      for (const v1::TensorSignature& t : m.outputs()) {
        inference::ModelOutput* out = c->add_output();
        out->set_name(t.name());
        out->set_data_type(kserve_type_of(t.dtype()).triton);
        for (int i = 1; i < t.shape_size(); ++i) out->add_dims(t.shape(i));
      }
    });
  }

  Status ModelInferImpl(grpc::ServerContextBase* ctx, const inference::ModelInferRequest* req,
                        inference::ModelInferResponse* resp) {
    const Status st = counted_predict(s_, req->model_name(), [&] {
      return Guard([&] {
        Auth(*ctx, "ModelInfer");
        ANVIL_SERVICE_CHECK(!s_.draining.load(), absl::StatusCode::kUnavailable, "the server is shutting down");
        Infer(*ctx, *req, *resp);
      });
    });
    return st;
  }

 private:
  static void Describe(const v1::TensorSignature& t, inference::ModelMetadataResponse::TensorMetadata* out) {
    out->set_name(t.name());
    out->set_datatype(kserve_type_of(t.dtype()).kserve);
    for (int64_t d : t.shape()) out->add_shape(d);
  }

  void Infer(grpc::ServerContextBase& ctx, const inference::ModelInferRequest& req,
             inference::ModelInferResponse& resp) {
    const v1::PredictRequest p = predict_request_of(req);
    // The requested outputs against the model's signature before the forward: a misspelt
    // name costs no batch slot and no compute.
    if (req.outputs_size() > 0) {
      const std::shared_ptr<ServedModel> m = value_or_throw(s_.registry->get(p.model(), p.version()));
      const std::string& output = m->loaded.built.output_name;
      for (const auto& o : req.outputs()) {
        ANVIL_SERVICE_CHECK(o.name() == output, absl::StatusCode::kInvalidArgument, "outputs: model \"", m->row.name,
                            "\" has no output \"", echo(o.name()), "\" (it has: ", output, ")");
      }
    }
    v1::PredictResponse out = value_or_throw(s_.registry->predict(p, batcher_deadline(ctx)));
    resp.set_model_name(out.model());
    resp.set_model_version(std::to_string(out.version()));
    resp.set_id(req.id());
    for (v1::Tensor& t : *out.mutable_outputs()) {  // the model's one output, checked above when named
      inference::ModelInferResponse::InferOutputTensor* o = resp.add_outputs();
      o->set_name(t.name());
      o->set_datatype(kserve_type_of(t.dtype()).kserve);
      for (int64_t d : t.shape()) o->add_shape(d);
      *resp.add_raw_output_contents() = std::move(*t.mutable_raw());
    }
  }

  template <typename F>
  Status Guard(F&& f) {
    return guarded({s_.data_root, s_.options.datasets_dir}, std::forward<F>(f));
  }
  void Auth(const grpc::ServerContextBase& ctx, const char* method) {
    authorize(s_.tokens.get(), ctx, Scope::kServe, method);
  }

  AnvilServer::State& s_;
  CallLimits limits_, infer_limits_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_kserve_service(AnvilServer::State& state) {
  return std::make_unique<KServeService>(state);
}

}  // namespace anvil::server
