#include "server/health_service.h"

#include <algorithm>

#include "proto/grpc/health/v1/health.grpc.pb.h"
#include "server/status.h"
#include "server/unary_call.h"

namespace anvil::server {

namespace hv1 = grpc::health::v1;

HealthState::HealthState(std::vector<std::string> services) : services_(std::move(services)) {}

void HealthState::set_serving(bool serving) {
  MutexLock lock(&mu_);
  if (serving_ == serving) return;
  serving_ = serving;
  for (auto& [id, on_change] : watchers_) on_change(serving);
}

bool HealthState::serving() const {
  MutexLock lock(&mu_);
  return serving_;
}

bool HealthState::knows(const std::string& service) const {
  return service.empty() || std::find(services_.begin(), services_.end(), service) != services_.end();
}

int64_t HealthState::add_watcher(std::function<void(bool)> on_change, size_t max_watchers, bool* serving) {
  MutexLock lock(&mu_);
  *serving = serving_;
  if (watchers_.size() >= max_watchers) return -1;
  watchers_[next_id_] = std::move(on_change);
  return next_id_++;
}

void HealthState::remove_watcher(int64_t id) {
  MutexLock lock(&mu_);
  watchers_.erase(id);
}

namespace {

constexpr size_t kMaxWatchers = 1024;

CallLimits HealthLimits() {
  CallLimits l;
  l.max_bytes = 64 * 1024;  // a service name
  l.service = "Health";
  l.flag = "(fixed)";
  l.calls = "health watches";
  return l;
}

hv1::HealthCheckResponse::ServingStatus StatusOf(const HealthState& state, const std::string& service, bool serving) {
  if (!state.knows(service)) return hv1::HealthCheckResponse::SERVICE_UNKNOWN;
  return serving ? hv1::HealthCheckResponse::SERVING : hv1::HealthCheckResponse::NOT_SERVING;
}

// Sends the status now, then on each change; the newest status wins when changes come faster
// than the client reads.
class WatchReactor final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  WatchReactor(std::shared_ptr<HealthState> state, const grpc::ByteBuffer& request) : state_(std::move(state)) {
    static const CallLimits limits = HealthLimits();
    hv1::HealthCheckRequest req;
    const grpc::Status parsed = parse_request(request, &req, limits);
    if (!parsed.ok()) {
      MutexLock lock(&mu_);
      FinishLocked(parsed);
      return;
    }
    service_ = req.service();  // before registering: Changed reads it
    // Registered without this object's lock held: the state calls watchers under its own lock,
    // so taking the two in the other order here could deadlock.
    bool serving = false;
    const int64_t id = state_->add_watcher([this](bool now) { Changed(now); }, kMaxWatchers, &serving);
    MutexLock lock(&mu_);
    id_ = id;
    if (id_ < 0) {
      FinishLocked(to_grpc(absl::ResourceExhaustedError("too many health watches at once (1024)")));
      return;
    }
    if (!changed_) wanted_ = StatusOf(*state_, service_, serving);  // a change since is newer
    PumpLocked();
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client is gone"));
      return;
    }
    PumpLocked();
  }
  void OnCancel() override {
    MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }
  void OnDone() override {
    if (id_ >= 0) state_->remove_watcher(id_);  // no call to Changed after this
    delete this;
  }

 private:
  void Changed(bool serving) {
    MutexLock lock(&mu_);
    changed_ = true;
    wanted_ = StatusOf(*state_, service_, serving);
    PumpLocked();
  }

  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_ || (sent_any_ && wanted_ == sent_)) return;
    hv1::HealthCheckResponse resp;
    resp.set_status(wanted_);
    buffer_.Clear();
    if (!serialize_response(resp, &buffer_).ok()) return;
    sent_ = wanted_;
    sent_any_ = true;
    writing_ = true;
    StartWrite(&buffer_);
  }

  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    Finish(status);  // a write in flight completes (ok or not) before OnDone
  }

  std::shared_ptr<HealthState> state_;
  std::string service_;  // set by the constructor before the watcher is registered
  int64_t id_ = -1;      // set by the constructor; OnDone, the last callback, reads it
  Mutex mu_;
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);  // gRPC reads it from StartWrite to OnWriteDone (writing_)
  hv1::HealthCheckResponse::ServingStatus wanted_ ABSL_GUARDED_BY(mu_) = hv1::HealthCheckResponse::UNKNOWN;
  hv1::HealthCheckResponse::ServingStatus sent_ ABSL_GUARDED_BY(mu_) = hv1::HealthCheckResponse::UNKNOWN;
  bool sent_any_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool changed_ ABSL_GUARDED_BY(mu_) = false;
};

class HealthService final
    : public hv1::Health::WithRawCallbackMethod_Check<hv1::Health::WithRawCallbackMethod_Watch<hv1::Health::Service>> {
 public:
  explicit HealthService(std::shared_ptr<HealthState> state) : state_(std::move(state)) {}

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
                                  grpc::ByteBuffer* response) override {
    static const CallLimits limits = HealthLimits();
    grpc::ServerUnaryReactor* reactor = ctx->DefaultReactor();
    hv1::HealthCheckRequest req;
    grpc::Status status = parse_request(*request, &req, limits);
    if (status.ok() && !state_->knows(req.service())) {
      status = to_grpc(absl::NotFoundError("service \"" + echo(req.service()) + "\" is unknown"));
    }
    if (status.ok()) {
      hv1::HealthCheckResponse resp;
      resp.set_status(StatusOf(*state_, req.service(), state_->serving()));
      status = serialize_response(resp, response);
    }
    reactor->Finish(status);
    return reactor;
  }

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Watch(grpc::CallbackServerContext*,
                                                    const grpc::ByteBuffer* request) override {
    return new WatchReactor(state_, *request);
  }

 private:
  std::shared_ptr<HealthState> state_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_health_service(std::shared_ptr<HealthState> state) {
  return std::make_unique<HealthService>(std::move(state));
}

}  // namespace anvil::server
