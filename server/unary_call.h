// Unary RPCs served from their wire bytes (gRPC raw callback methods), the one path every
// unary call of the Training, Serving and KServe services takes:
//   1. the message size against its service's limit, before anything is parsed:
//      RESOURCE_EXHAUSTED naming the limit and its flag (gRPC's own receive limit is the
//      largest service's, so it cannot apply the smaller ones);
//   2. the wire bytes walked against the request's type (server/wire_check.h):
//      INVALID_ARGUMENT naming the field for malformed data and text that is not UTF-8, where a
//      sync method answers a bare INTERNAL;
//   3. the handler run on a bounded pool (server/bounded_executor.h), never on gRPC's own
//      threads: a flood of calls waits in a bounded queue, or is refused with RESOURCE_EXHAUSTED.
// Thread-safety: free functions; a CallLimits is read-only once its service is built.
#pragma once

#include <absl/strings/str_cat.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/proto_utils.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>

#include "server/bounded_executor.h"
#include "server/heavy_work.h"
#include "server/status.h"
#include "server/wire_check.h"

namespace anvil::server {

struct CallLimits {
  int64_t max_bytes = 4 << 20;
  const char* service = "";  // "Training", for the message
  const char* flag = "";     // the anvild flag that sets max_bytes
  const char* calls = "";    // what the pool runs, for its refusal: "Training calls"
  WireBounds wire;
  // Streams: how long one may wait for its client (to take a message, or send the next)
  // before it is cancelled, so a stalled client cannot hold a pool thread for ever.
  std::chrono::milliseconds stall_timeout{60000};
};

// Steps 1 and 2 into `out` (any message type).
grpc::Status parse_request(const grpc::ByteBuffer& request, google::protobuf::Message* out, const CallLimits& limits);

// The response's wire bytes into `response`.
grpc::Status serialize_response(const google::protobuf::Message& message, grpc::ByteBuffer* response);

// RESOURCE_EXHAUSTED for a call the pool's queue had no room for ("too many <calls> at once").
absl::Status pool_full_status(const char* calls, const BoundedExecutor& pool);
grpc::Status pool_full(const char* calls, const BoundedExecutor& pool);

struct NoOp {
  void operator()() const {}
};

// Serves one unary call: `handler(ctx, const Request*, Response*) -> grpc::Status` runs on
// `pool` once the request parsed; the handler may block (the store, a dry run). `done()` runs
// once after the call is answered, whichever way (for the drain's count of calls in flight).
template <typename Request, typename Response, typename Handler, typename Done = NoOp>
grpc::ServerUnaryReactor* serve_unary(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                      grpc::ByteBuffer* response, BoundedExecutor& pool, const CallLimits& limits,
                                      Handler handler, Done done = {}) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const bool queued = pool.try_submit([ctx, request, response, reactor, &limits, handler, done] {
    Request req;
    grpc::Status status = parse_request(*request, &req, limits);
    if (status.ok()) {
      Response resp;
      status = handler(ctx, &req, &resp);
      if (status.ok()) status = serialize_response(resp, response);
    }
    reactor->Finish(status);
    done();
  });
  if (!queued) {
    reactor->Finish(pool_full(limits.calls, pool));
    done();
  }
  return reactor;
}

// serve_unary for a service's member `impl`, the body of one raw method:
//   return serve_method(this, &TrainingService::GetJobImpl, ctx, request, response, pool, limits_);
template <typename Service, typename Request, typename Response>
grpc::ServerUnaryReactor* serve_method(Service* service,
                                       grpc::Status (Service::*impl)(grpc::ServerContextBase*, const Request*,
                                                                     Response*),
                                       grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                       grpc::ByteBuffer* response, BoundedExecutor& pool, const CallLimits& limits) {
  return serve_unary<Request, Response>(ctx, request, response, pool, limits,
                                        [service, impl](grpc::CallbackServerContext* c, const Request* req,
                                                        Response* resp) { return (service->*impl)(c, req, resp); });
}

// serve_method for a method whose requests may be heavy (`is_heavy(request)`: SubmitJob's dry
// run; every Quantize): parsed on `pool`, a heavy call is handed whole to `heavy` (the work
// pool, server/heavy_work.h), whose thread runs it and answers, so no call-pool thread waits
// for the work or its turn. A call whose client left while it queued there is answered
// CANCELLED without the work.
template <typename Service, typename Request, typename Response, typename IsHeavy>
grpc::ServerUnaryReactor* serve_method_heavy(
    Service* service, grpc::Status (Service::*impl)(grpc::ServerContextBase*, const Request*, Response*),
    grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request, grpc::ByteBuffer* response,
    BoundedExecutor& pool, BoundedExecutor& heavy, const CallLimits& limits, IsHeavy is_heavy) {
  grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
  const auto run = [service, impl, ctx, response, reactor](const Request& req) {
    Response resp;
    grpc::Status status = (service->*impl)(ctx, &req, &resp);
    if (status.ok()) status = serialize_response(resp, response);
    reactor->Finish(status);
  };
  const bool queued = pool.try_submit([ctx, request, reactor, &heavy, &limits, run, is_heavy] {
    auto req = std::make_shared<Request>();
    if (grpc::Status status = parse_request(*request, req.get(), limits); !status.ok()) {
      reactor->Finish(status);
      return;
    }
    if (!is_heavy(*req)) {
      run(*req);
      return;
    }
    const bool handed = heavy.try_submit([ctx, reactor, run, req] {
      if (ctx->IsCancelled()) {
        reactor->Finish(to_grpc(heavy_work_abandoned()));
        return;
      }
      heavy_work_fault_point();
      run(*req);
    });
    if (!handed) reactor->Finish(pool_full(kHeavyWorkCalls, heavy));
  });
  if (!queued) reactor->Finish(pool_full(limits.calls, pool));
  return reactor;
}

}  // namespace anvil::server
