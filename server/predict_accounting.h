// What a prediction needs whichever protocol it came by (anvil.v1.Serving's Predict, KServe's
// ModelInfer): its deadline on the batcher's clock, and the Predict metrics around it.
#pragma once

#include <grpcpp/server_context.h>

#include <chrono>
#include <string>
#include <utility>

#include "server/batcher.h"
#include "server/state.h"
#include "server/status.h"

namespace anvil::server {

// The call's deadline on the batcher's clock (gRPC's is wall-clock time); max() without one.
inline Batcher::Clock::time_point batcher_deadline(const grpc::ServerContextBase& ctx) {
  const auto wall = ctx.deadline();
  if (wall == std::chrono::system_clock::time_point::max()) return Batcher::Clock::time_point::max();
  return Batcher::Clock::now() + (wall - std::chrono::system_clock::now());
}

// In flight while it runs, its latency, and its final status code, per model. Series only for
// registered names: an unknown name must not mint new series.
template <typename F>
grpc::Status counted_predict(AnvilServer::State& s, const std::string& model_name, F&& run) {
  if (s.metrics == nullptr) return std::forward<F>(run)();
  const std::string model = s.registry->knows(model_name) ? model_name : "(unknown)";
  metrics::Gauge& in_flight = s.metrics->predict_in_flight.with({model});
  in_flight.Increment();
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = std::forward<F>(run)();
  in_flight.Decrement();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.metrics->predict_latency.with({model}).Observe(seconds);
  s.metrics->predict_requests.with({model, grpc_code_name(st.error_code())}).Increment();
  if (model == model_name) s.metrics->serving.on_request(model, seconds, st.ok());
  return st;
}

}  // namespace anvil::server
