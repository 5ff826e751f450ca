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

#include "core/util/mutex.h"
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
    UniqueMutexLock lock(&mu_);
    if (cancelled_) return false;
    buffer_.Clear();  // the previous message's, sent
    if (!serialize_response(message, &buffer_).ok()) return false;
    pending_ = true;
    lock.unlock();
    StartWrite(&buffer_);
    lock.lock();
    // A client that stops reading holds the write: after the stall timeout the call is
    // cancelled (its write then completes, failed) and the pool's thread is free again.
    if (!WaitDone(lock, stall_)) {
      ctx_->TryCancel();
      while (pending_) cv_.wait(lock.native());
    }
    return written_;
  }

  bool cancelled() {
    MutexLock lock(&mu_);
    return cancelled_;
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    pending_ = false;
    written_ = ok;
    cv_.notify_all();
  }
  void OnCancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void OnDone() override { delete this; }

 private:
  PooledWriter(grpc::CallbackServerContext* ctx, std::chrono::milliseconds stall) : ctx_(ctx), stall_(stall) {}

  // Waits up to `timeout` for the write in flight to complete: false when it has not.
  bool WaitDone(UniqueMutexLock& lock, std::chrono::milliseconds timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (pending_) {
      if (cv_.wait_until(lock.native(), until) == std::cv_status::timeout) return !pending_;
    }
    return true;
  }

  grpc::CallbackServerContext* ctx_;
  const std::chrono::milliseconds stall_;
  Mutex mu_;
  std::condition_variable cv_;
  // The message being sent: gRPC reads it from StartWrite until OnWriteDone (pending_).
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  bool written_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
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
    UniqueMutexLock lock(&mu_);
    if (!status_.ok() || ended_) return false;
    pending_ = true;
    lock.unlock();
    StartRead(&buffer_);
    lock.lock();
    // A client that stops sending holds the read: after the stall timeout the call is cancelled.
    bool stalled = false;
    if (!WaitDone(lock, limits_.stall_timeout)) {
      stalled = true;
      ctx_->TryCancel();
      while (pending_) cv_.wait(lock.native());
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
    MutexLock lock(&mu_);
    return status_;
  }

  void OnReadDone(bool ok) override {
    MutexLock lock(&mu_);
    pending_ = false;
    got_ = ok;
    cv_.notify_all();
  }
  void OnCancel() override {
    MutexLock lock(&mu_);
    cancelled_ = true;
  }
  void OnDone() override { delete this; }

 private:
  PooledReader(grpc::CallbackServerContext* ctx, const CallLimits& limits) : ctx_(ctx), limits_(limits) {}

  // Waits up to `timeout` for the read in flight to complete: false when it has not.
  bool WaitDone(UniqueMutexLock& lock, std::chrono::milliseconds timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (pending_) {
      if (cv_.wait_until(lock.native(), until) == std::cv_status::timeout) return !pending_;
    }
    return true;
  }

  grpc::CallbackServerContext* ctx_;
  const CallLimits& limits_;
  Mutex mu_;
  std::condition_variable cv_;
  // The message being read: gRPC fills it from StartRead until OnReadDone (pending_).
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  grpc::Status status_ ABSL_GUARDED_BY(mu_);
  bool pending_ ABSL_GUARDED_BY(mu_) = false;
  bool got_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace anvil::server
