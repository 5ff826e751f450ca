// StreamMetrics as a callback reactor: a stream holds no thread while it waits. Its stored
// events are read from the store in pages on a small pool of their own, its live events are pushed to it
// by the metrics hub, and each is written when the previous write is done, so 500 open
// streams cost 500 small objects, not 500 threads.
//
// The order is the one the blocking handler had: subscribe first (no live event can fall
// between the replay and the live ones), replay the stored events after the last sequence
// number sent (steps and epochs from `from_step`, state changes always: a reconnecting reader
// must see how its job ended), then follow live events. A gap in the sequence (the live queue
// dropped events for a slow reader) is filled from the store. The stream ends after a terminal
// state; with UNAVAILABLE when the server shuts down; the client cancelling never affects the
// job. Bounded per job and per server (RESOURCE_EXHAUSTED beyond), by the hub.
//
// Thread-safety: gRPC's callback threads, the pool's and the hub's publishers all call in;
// the state is under mu_. The object deletes itself when gRPC is done with it and no pool task
// still refers to it.
#pragma once

#include <grpcpp/grpcpp.h>

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "server/bounded_executor.h"
#include "server/metrics_hub.h"
#include "server/store.h"
#include "server/unary_call.h"

namespace anvil::server {

struct MetricsStreamContext {
  Store& store;
  MetricsHub& hub;
  BoundedExecutor& pool;  // where store reads run (a stream has at most one queued)
  const CallLimits& limits;
  size_t max_per_job, max_total;
  // Checks the caller may read the job (throws ServiceError); runs on gRPC's thread.
  std::function<void(grpc::ServerContextBase&)> authorize;
};

grpc::ServerWriteReactor<grpc::ByteBuffer>* start_metrics_stream(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* request,
                                                                 const MetricsStreamContext& context);

}  // namespace anvil::server
