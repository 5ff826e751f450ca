#include "server/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <filesystem>

#include "core/backend/registry.h"
#include "core/data/datasets/digits.h"
#include "server/log.h"
#include "server/state.h"
#include "server/status.h"
#include "server/status_page.h"
#include "workers/worker.h"

namespace anvil::server {

namespace fs = std::filesystem;

namespace {

// The worker devices for `spec` ("auto" or a comma-separated list). GPUs come first: a job
// that asks for "any" device then lands on a GPU when one is free.
std::vector<Device> WorkerDevices(const std::string& spec) {
  std::vector<Device> out;
  if (spec == "auto" || spec.empty()) {
    for (int i = 0; i < cuda_device_count(); ++i) out.push_back(CUDA(i));
    if (cuda_device_count() == 0 && cuda_is_built()) {
      log(LogLevel::kInfo, "no CUDA workers: ", cuda_unavailable_reason());
    }
    out.push_back(kCPU);
    return out;
  }
  size_t start = 0;
  while (start <= spec.size()) {
    const size_t comma = std::min(spec.find(',', start), spec.size());
    const Device d(spec.substr(start, comma - start));
    if (d.is_cuda()) backend_for(d);  // a clear error for a device this machine lacks
    ANVIL_CHECK(std::find(out.begin(), out.end(), d) == out.end(), "devices: ", d, " is listed twice");
    out.push_back(d);
    start = comma + 1;
  }
  std::stable_partition(out.begin(), out.end(), [](const Device& d) { return d.is_cuda(); });
  return out;
}

Device ServingDevice(const std::string& spec) {
  if (spec == "auto" || spec.empty()) return cuda_is_available() ? CUDA(0) : kCPU;
  const Device d(spec);
  if (d.is_cuda()) backend_for(d);
  return d;
}

}  // namespace

AnvilServer::AnvilServer(ServerOptions options) : options_(std::move(options)) {}

AnvilServer::~AnvilServer() { shutdown(std::chrono::seconds(2)); }

void AnvilServer::start() {
  auto s = std::make_unique<State>();
  s->options = options_;
  fs::create_directories(options_.data_dir);
  s->data_root = fs::canonical(options_.data_dir).string();
  if (s->options.datasets_dir.empty()) s->options.datasets_dir = data::default_data_dir();
  // Absolute, so messages can be scrubbed of it exactly (never of a bare word like "data").
  s->options.datasets_dir = fs::absolute(s->options.datasets_dir).lexically_normal().string();
  while (s->options.datasets_dir.size() > 1 && s->options.datasets_dir.back() == '/') s->options.datasets_dir.pop_back();
  if (!options_.metrics_address.empty()) {
    s->metrics = std::make_unique<metrics::ServiceMetrics>(s->metrics_registry);
    std::string why_not;
    s->gpu_metrics = metrics::GpuMetrics::Open(s->metrics_registry, metrics::default_nvml_library(), &why_not);
    if (s->gpu_metrics) {
      log(LogLevel::kInfo, "GPU metrics from NVML for ", s->gpu_metrics->device_count(), " GPU(s)");
    } else {
      log(LogLevel::kInfo, "no GPU metrics: ", why_not);
    }
  }
  s->store = std::make_unique<Store>((fs::path(s->data_root) / "anvil.db").string());
  const Device serving = ServingDevice(options_.serving_device);
  s->registry = std::make_unique<ModelRegistry>(*s->store, s->data_root, options_.batching, s->metrics.get(),
                                                options_.max_loaded_models, serving);
  SchedulerOptions so{s->data_root, s->options.datasets_dir, options_.max_pending_jobs};
  std::vector<WorkerFactory> factories;
  for (const Device d : WorkerDevices(options_.devices)) {
    factories.push_back([d](workers::EventSink sink) { return workers::make_device_worker(d, std::move(sink)); });
  }
  s->scheduler = std::make_unique<Scheduler>(*s->store, s->hub, *s->registry, so, std::move(factories),
                                             s->metrics.get());
  // Recovery before the port opens: no request can race the requeueing of earlier jobs.
  s->scheduler->recover();
  if (s->metrics) {
    s->http = std::make_unique<metrics::HttpEndpoint>(s->metrics_registry, options_.metrics_address);
    Store* store = s->store.get();
    s->http->add_page("/", [] { return std::make_pair(std::string("text/html; charset=utf-8"), status_html()); });
    s->http->add_page("/status.json",
                      [store] { return std::make_pair(std::string("application/json"), status_json(*store)); });
  }
  state_ = std::move(s);
  training_ = make_training_service(*state_);
  serving_ = make_serving_service(*state_);

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.address, grpc::InsecureServerCredentials(), &port_);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  builder.RegisterService(training_.get());
  builder.RegisterService(serving_.get());
  server_ = builder.BuildAndStart();
  ANVIL_CHECK(server_ != nullptr && port_ > 0, "anvild: cannot listen on ", options_.address,
              " (in use, or not a valid address)");
  server_->GetHealthCheckService()->SetServingStatus(true);
}

void AnvilServer::shutdown(std::chrono::milliseconds grace) {
  if (!server_ || stopped_.exchange(true)) return;
  server_->GetHealthCheckService()->SetServingStatus(false);
  state_->draining = true;
  state_->scheduler->drain(grace);
  state_->hub.close_all();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  // Workers joined before the registry closes: a job that still ends now registers its model.
  state_->scheduler.reset();
  state_->registry->close();
  state_->http.reset();
}

int AnvilServer::metrics_port() const { return state_ && state_->http ? state_->http->port() : 0; }

void AnvilServer::wait() {
  if (server_) server_->Wait();
}

}  // namespace anvil::server
