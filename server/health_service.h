// grpc.health.v1.Health served by anvild itself, not by gRPC's default health service: the
// default answers a malformed Watch with INTERNAL and runs outside the rules every other RPC
// follows. Here Check and Watch are raw callback methods behind the same parse
// (server/unary_call.h: size, wire check, INVALID_ARGUMENT naming the field). Check is answered
// on gRPC's thread (it only reads a flag, so a saturated call pool never fails a liveness
// probe); Watch is a reactor that holds no thread: it sends the current status, then each
// change. Statuses follow the protocol: SERVING / NOT_SERVING for "" and the services named,
// Check on another name is NOT_FOUND, Watch on one streams SERVICE_UNKNOWN.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/util/mutex.h"

namespace anvil::server {

// The server's serving flag and who watches it. Thread-safety: safe for concurrent use;
// watchers are called under its lock (they must not call back into it), and never again once
// removed.
class HealthState {
 public:
  explicit HealthState(std::vector<std::string> services);
  void set_serving(bool serving);
  bool serving() const;
  bool knows(const std::string& service) const;
  // Registers `on_change` (called with the new flag on every change); its id, or -1 when
  // max_watchers are registered. *serving is the flag at registration.
  int64_t add_watcher(std::function<void(bool)> on_change, size_t max_watchers, bool* serving);
  void remove_watcher(int64_t id);

 private:
  const std::vector<std::string> services_;
  mutable Mutex mu_;
  bool serving_ ABSL_GUARDED_BY(mu_) = false;
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<int64_t, std::function<void(bool)>> watchers_ ABSL_GUARDED_BY(mu_);
};

// One per server build; `state` outlives it (shared with the front).
std::unique_ptr<grpc::Service> make_health_service(std::shared_ptr<HealthState> state);

}  // namespace anvil::server
