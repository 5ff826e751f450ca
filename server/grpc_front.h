// The gRPC side of anvild: one grpc::Server with the Training and Serving services, health and
// (on request) reflection, the receive limits, and a watchdog over its listening socket.
//
// Why the watchdog: gRPC 1.51 (Debian 12's) stops accepting for good after one accept4()
// failure such as EMFILE (the fd limit reached under a connection flood; the CVE-2023-4785
// class, fixed upstream in 1.58.3 with a retry). The kernel keeps queueing connections that
// nobody accepts. The watchdog reads the listening socket's accept queue from /proc every
// `probe_interval`: a queue that stays non-empty over several probes means nobody accepts,
// and the server is rebuilt on the same port (existing calls get a short grace; the old
// server's services stay alive until the front stops). Once fds are free again, accepting
// resumes within about two seconds.
//
// Thread-safety: start() once, first; then set_health, shutdown and wait from any thread (the
// servers, their services and the stop flag are under one mutex, shared with the watchdog).
#pragma once

#include <dirent.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/codegen/service_type.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/util/mutex.h"
#include "server/request_limits.h"

namespace anvil::server {

class HealthState;

struct GrpcFrontOptions {
  std::string address;  // "host:port"; port 0 picks one (kept across rebuilds)
  RequestLimits limits;
  bool reflection = false;
  std::shared_ptr<grpc::ServerCredentials> credentials;  // null: insecure
  std::chrono::milliseconds probe_interval{500};
  int stuck_probes = 4;  // consecutive probes with a non-empty accept queue before a rebuild
  // Called after the server stopped taking calls and before it and its services are freed:
  // waits for the threads that answered calls (Finish runs on them) to let go of both.
  std::function<void()> quiesce;
};

class GrpcFront {
 public:
  // Makes the services for each (re)build of the server.
  using ServiceFactory = std::function<std::vector<std::unique_ptr<grpc::Service>>()>;

  GrpcFront(GrpcFrontOptions options, ServiceFactory services);
  ~GrpcFront();

  // Binds and starts; throws when the address cannot be bound.
  void start();
  int port() const { return port_; }
  void set_health(bool serving);
  // Stops accepting and ends calls after `grace`; then wait() returns. Idempotent.
  void shutdown(std::chrono::milliseconds grace);
  void wait();
  int rebuilds() const { return rebuilds_.load(); }

 private:
  std::unique_ptr<grpc::Server> Build(const std::string& address, int* port) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);
  int64_t AcceptQueueLength() const;  // -1 when the listening socket is not found

  // Opened once at start and reused: when the flood has used up every fd, the watchdog can
  // still look (a directory stream rewound, the TCP tables re-read from offset 0).
  DIR* proc_fds_ = nullptr;
  int tcp_tables_[2] = {-1, -1};

  GrpcFrontOptions options_;
  ServiceFactory make_services_;
  mutable Mutex mu_;
  std::condition_variable cv_;
  std::unique_ptr<grpc::Server> server_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<grpc::Service>> services_ ABSL_GUARDED_BY(mu_);
  // Rebuilt-away servers and their services, kept until the front stops (calls may still run).
  std::vector<std::unique_ptr<grpc::Server>> retired_servers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<grpc::Service>> retired_services_ ABSL_GUARDED_BY(mu_);
  int port_ = 0;  // set by start(), before the watchdog runs; read without the lock after
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  std::shared_ptr<HealthState> health_;  // shared with each build's health service
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int> rebuilds_{0};
  std::thread watchdog_;
};

}  // namespace anvil::server
