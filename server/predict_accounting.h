// The Predict metrics around one prediction, whichever protocol it came by (anvil.v1.Serving's
// Predict, KServe's ModelInfer): in flight while it runs, its latency, and its final status
// code, per model. Series only for registered names: an unknown name must not mint new series.
#pragma once

#include <chrono>
#include <string>
#include <utility>

#include "server/state.h"
#include "server/status.h"

namespace anvil::server {

template <typename F>
grpc::Status counted_predict(AnvilServer::State& s, const std::string& model_name, F&& run) {
  if (s.metrics == nullptr) return std::forward<F>(run)();
  const std::string model = s.registry->knows(model_name) ? model_name : "(unknown)";
  metrics::Gauge& in_flight = s.metrics->predict_in_flight.with({model});
  in_flight.Increment();
  const auto t0 = std::chrono::steady_clock::now();
  const grpc::Status st = std::forward<F>(run)();
  in_flight.Decrement();
  s.metrics->predict_latency.with({model}).Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  s.metrics->predict_requests.with({model, grpc_code_name(st.error_code())}).Increment();
  return st;
}

}  // namespace anvil::server
