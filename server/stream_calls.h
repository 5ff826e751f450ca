// Streaming RPCs served from their wire bytes (raw callback methods), with the same rules as
// the unary ones (server/unary_call.h): each message's size against its service's limit and
// its wire bytes against its type before it is parsed, INVALID_ARGUMENT naming the field for
// malformed data, and the call's body on a bounded pool instead of a thread of gRPC's.
//
// The bodies are ordinary blocking code (they read files, query the store, wait for events):
// PooledWriter gives them a Write that returns once the message is sent, PooledReader a Read
// that returns the next parsed message. A call the pool has no room for is refused with
// RESOURCE_EXHAUSTED at once.
//
// Thread-safety: each reactor is driven by gRPC's callback threads and its body's pool thread;
// its state is under its own mutex. It deletes itself in OnDone, which gRPC calls only after
// Finish, and Finish is the body's last act.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "server/unary_call.h"

namespace anvil::server {

// A server-streaming call: `body(ctx, request, writer)` runs on the pool once the request parsed.
template <typename Request, typename Response>
class PooledWriter final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  using Body = std::function<grpc::Status(grpc::CallbackServerContext*, const Request&, PooledWriter&)>;

  static grpc::ServerWriteReactor<grpc::ByteBuffer>* start(grpc::CallbackServerContext* ctx,
                                                           const grpc::ByteBuffer* request, BoundedExecutor& pool,
                                                           const CallLimits& limits, Body body) {
    auto* self = new PooledWriter(ctx, limits.stall_timeout);
    const bool queued = pool.try_submit([self, ctx, request, &limits, body = std::move(body)] {
      Request req;
      grpc::Status status = parse_request(*request, &req, limits);
      if (status.ok()) status = body(ctx, req, *self);
      self->Finish(status);
    });
    if (!queued) self->Finish(pool_full(limits.calls, pool));
    return self;
  }

  // Sends `message` and waits until it is sent; false when the call ended first (the client
  // cancelled or went away): the body should return.
  bool write(const Response& message) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cancelled_) return false;
    buffer_.Clear();  // the previous message's, sent
    if (!serialize_response(message, &buffer_).ok()) return false;
    pending_ = true;
    lock.unlock();
    StartWrite(&buffer_);
    lock.lock();
    // A client that stops reading holds the write: after the stall timeout the call is
    // cancelled (its write then completes, failed) and the pool's thread is free again.
    if (!cv_.wait_for(lock, stall_, [this] { return !pending_; })) {
      ctx_->TryCancel();
      cv_.wait(lock, [this] { return !pending_; });
    }
    return written_;
  }

  bool cancelled() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_;
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = false;
    written_ = ok;
    cv_.notify_all();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  void OnDone() override { delete this; }

 private:
  PooledWriter(grpc::CallbackServerContext* ctx, std::chrono::milliseconds stall) : ctx_(ctx), stall_(stall) {}

  grpc::CallbackServerContext* ctx_;
  const std::chrono::milliseconds stall_;
  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ByteBuffer buffer_;
  bool pending_ = false, written_ = false, cancelled_ = false;
};

// A client-streaming call: `body(ctx, reader, response)` runs on the pool and pulls messages.
template <typename Request, typename Response>
class PooledReader final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  using Body = std::function<grpc::Status(grpc::CallbackServerContext*, PooledReader&, Response*)>;

  static grpc::ServerReadReactor<grpc::ByteBuffer>* start(grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response,
                                                          BoundedExecutor& pool, const CallLimits& limits, Body body) {
    auto* self = new PooledReader(ctx, limits);
    const bool queued = pool.try_submit([self, ctx, response, body = std::move(body)] {
      Response resp;
      grpc::Status status = body(ctx, *self, &resp);
      if (status.ok()) status = serialize_response(resp, response);
      self->Finish(status);
    });
    if (!queued) self->Finish(pool_full(limits.calls, pool));
    return self;
  }

  // The next message into *out: true; false at the end of the stream (status() OK), or when a
  // message was refused or the call ended (status() says why: the body returns it).
  bool read(Request* out) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!status_.ok() || ended_) return false;
    pending_ = true;
    lock.unlock();
    StartRead(&buffer_);
    lock.lock();
    // A client that stops sending holds the read: after the stall timeout the call is cancelled.
    bool stalled = false;
    if (!cv_.wait_for(lock, limits_.stall_timeout, [this] { return !pending_; })) {
      stalled = true;
      ctx_->TryCancel();
      cv_.wait(lock, [this] { return !pending_; });
    }
    if (!got_) {
      ended_ = true;
      if (stalled) {
        status_ = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                               "no message within the stall timeout: a stream that stalls is ended");
      } else if (cancelled_) {
        status_ = grpc::Status(grpc::StatusCode::CANCELLED, "the call was cancelled by the client");
      }
      return false;
    }
    status_ = parse_request(buffer_, out, limits_);
    buffer_.Clear();
    return status_.ok();
  }
  grpc::Status status() {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

  void OnReadDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    pending_ = false;
    got_ = ok;
    cv_.notify_all();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
  }
  void OnDone() override { delete this; }

 private:
  PooledReader(grpc::CallbackServerContext* ctx, const CallLimits& limits) : ctx_(ctx), limits_(limits) {}

  grpc::CallbackServerContext* ctx_;
  const CallLimits& limits_;
  std::mutex mu_;
  std::condition_variable cv_;
  grpc::ByteBuffer buffer_;
  grpc::Status status_;
  bool pending_ = false, got_ = false, ended_ = false, cancelled_ = false;
};

}  // namespace anvil::server
