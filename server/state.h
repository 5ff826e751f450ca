// What the gRPC services share (owned by AnvilServer).
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "server/metrics_hub.h"
#include "server/model_registry.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "server/store.h"

namespace anvil::server {

struct AnvilServer::State {
  ServerOptions options;
  std::string data_root;  // absolute
  std::unique_ptr<Store> store;
  MetricsHub hub;
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<Scheduler> scheduler;
  std::atomic<bool> draining{false};
};

std::unique_ptr<grpc::Service> make_training_service(AnvilServer::State& state);
std::unique_ptr<grpc::Service> make_serving_service(AnvilServer::State& state);

}  // namespace anvil::server
