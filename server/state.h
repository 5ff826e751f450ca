// What the gRPC services share (owned by AnvilServer).
//
// Thread-safety: built by AnvilServer::start before the port opens and torn down after the
// services stop; in between every handler thread reads it, and each member is thread-safe
// itself (or atomic).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/bounded_executor.h"
#include "server/data_dir_lock.h"
#include "server/metrics/gpu_metrics.h"
#include "server/metrics/http.h"
#include "server/metrics/service_metrics.h"
#include "server/metrics_hub.h"
#include "server/model_registry.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/store.h"
#include "server/tokens.h"

namespace anvil::server {

struct AnvilServer::State {
  std::string instance;                        // this replica's name in the store (ServerOptions::instance)
  std::unique_ptr<DataDirLock> data_dir_lock;  // first: released last (shutdown releases it too)
  ServerOptions options;
  std::string data_root;  // absolute
  metrics::Registry metrics_registry;
  std::unique_ptr<metrics::ServiceMetrics> metrics;  // null when there is no metrics address
  std::unique_ptr<metrics::GpuMetrics> gpu_metrics;  // null without metrics or without NVML
  std::unique_ptr<Store> store;
  std::unique_ptr<Store> lease_store;        // PostgreSQL: the scheduler keeper's own connection
  std::unique_ptr<ArtifactStore> artifacts;  // checkpoints, model archives, imported ONNX files
  MetricsHub hub;
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<Scheduler> scheduler;
  std::atomic<bool> draining{false};
  std::atomic<int64_t> predicts_in_flight{0};  // admitted Predicts not yet answered (the drain waits for them)
  std::unique_ptr<TokenSet> tokens;            // null: no token file configured (no authentication)
  // The threads unary calls run on (server/unary_call.h), shared by the services and by their
  // rebuilds: Predict and KServe ModelInfer on one, every other unary call on the other. Calls
  // end before the front stops, so nothing queued outlives the services.
  std::unique_ptr<BoundedExecutor> predict_pool;
  std::unique_ptr<BoundedExecutor> call_pool;
  std::unique_ptr<BoundedExecutor> stream_pool;  // Export and RegisterModel bodies
  // Dry runs, quantizations, ONNX captures, model conversions (server/heavy_work.h): bounded
  // CPU work whose callers wait without holding a call-pool thread.
  std::unique_ptr<BoundedExecutor> work_pool;
  // StreamMetrics' store reads (each stream has at most one queued): off the call pool, so a
  // crowd of reconnecting streams does not queue ahead of ListJobs.
  std::unique_ptr<BoundedExecutor> replay_pool;
  std::unique_ptr<metrics::HttpEndpoint> http;  // last: stops first
};

std::unique_ptr<grpc::Service> make_training_service(AnvilServer::State& state);
std::unique_ptr<grpc::Service> make_serving_service(AnvilServer::State& state);
// KServe v2 / Open Inference Protocol (inference.GRPCInferenceService) on the same models.
std::unique_ptr<grpc::Service> make_kserve_service(AnvilServer::State& state);

}  // namespace anvil::server
