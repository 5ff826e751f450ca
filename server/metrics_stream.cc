#include "server/metrics_stream.h"

#include <google/protobuf/util/json_util.h>

#include "core/util/mutex.h"
#include "server/status.h"

namespace anvil::server {
namespace {

constexpr int64_t kReplayPage = 512;
// A stream with no live event for this long reads the store for events written elsewhere (a job
// running on another replica).
constexpr std::chrono::milliseconds kStorePoll{500};

bool EndsStream(const v1::MetricEvent& e) {
  return e.event_case() == v1::MetricEvent::kState &&
         (e.state() == v1::SUCCEEDED || e.state() == v1::FAILED || e.state() == v1::CANCELLED);
}

class MetricsStream final : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  MetricsStream(grpc::CallbackServerContext* ctx, const MetricsStreamContext& c) : ctx_(ctx), c_(c) {}

  // Parses the request and starts the first pool task (or finishes with the refusal).
  // The caller is authorized here, on gRPC's thread, while the call's context is certainly
  // alive; the pool's tasks never touch the context.
  void Start(const grpc::ByteBuffer& request) {
    grpc::Status st = parse_request(request, &req_, c_.limits);
    if (st.ok()) st = to_grpc(status_of([&] { c_.authorize(*ctx_); }));
    if (!st.ok()) {
      MutexLock lock(&mu_);
      FinishLocked(st);
      return;
    }
    MutexLock lock(&mu_);
    RunOnPoolLocked(&MetricsStream::Open);
  }

  void OnWriteDone(bool ok) override {
    MutexLock lock(&mu_);
    writing_ = false;
    if (finish_deferred_) {
      finish_deferred_ = false;
      Finish(deferred_);
    } else if (!ok) {
      FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "the client is gone"));
    } else if (ended_) {
      FinishLocked(grpc::Status::OK);
    } else {
      PumpLocked();
    }
  }

  void OnCancel() override {
    MutexLock lock(&mu_);
    FinishLocked(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
  }

  void OnDone() override {
    // No more listener calls once unsubscribed (the hub's lock orders them; an Open still
    // running sees unsubscribing_ and unsubscribes itself); then whichever of this and the
    // last pool task comes last deletes.
    std::shared_ptr<MetricsHub::Subscription> sub;
    {
      MutexLock lock(&mu_);
      unsubscribing_ = true;
      sub = std::move(sub_);
    }
    if (sub != nullptr) c_.hub.unsubscribe(job_id_, sub);
    // done_ is set and tasks_ read in one critical section, as a task's end reads done_ and
    // decrements tasks_ in one: exactly one of the two deletes.
    bool last;
    {
      MutexLock lock(&mu_);
      done_ = true;
      last = tasks_ == 0;
    }
    if (last) delete this;
  }

 private:
  // On the pool: find the job, subscribe, then the first page of the replay.
  void Open() {
    const absl::Status opened = status_of([&] {
      ANVIL_SERVICE_CHECK(!req_.job_id().empty(), absl::StatusCode::kInvalidArgument, "job_id: expected a job id");
      ANVIL_SERVICE_CHECK(c_.store.get_job(req_.job_id()).has_value(), absl::StatusCode::kNotFound, "job \"",
                          echo(req_.job_id()), "\" does not exist");
      ANVIL_SERVICE_CHECK(req_.from_step() >= 0, absl::StatusCode::kInvalidArgument, "from_step: expected >= 0, got ",
                          req_.from_step());
      job_id_ = req_.job_id();
      bool full_server = false;
      auto sub = c_.hub.subscribe(job_id_, c_.max_per_job, c_.max_total, &full_server, [this] { Wake(); });
      if (sub == nullptr && full_server) {
        throw ServiceError(absl::StatusCode::kResourceExhausted,
                           detail::StrCat("the server already serves ", c_.max_total,
                                          " StreamMetrics streams; close one or retry later"));
      }
      ANVIL_SERVICE_CHECK(sub != nullptr, absl::StatusCode::kResourceExhausted, "job ", job_id_, " already has ",
                          c_.max_per_job, " StreamMetrics streams (the most one job serves); close one or retry later");
      bool gone;
      {
        MutexLock lock(&mu_);
        gone = unsubscribing_ || finished_;
        if (!gone) sub_ = sub;
      }
      if (gone) c_.hub.unsubscribe(job_id_, sub);
    });
    if (!opened.ok()) {
      MutexLock lock(&mu_);
      FinishLocked(to_grpc(opened));
      return;
    }
    Replay();
  }

  // On the pool: the next page of stored events after last_seq_.
  void Replay() {
    int64_t after;
    {
      MutexLock lock(&mu_);
      if (finished_) return;
      after = last_seq_;
    }
    std::vector<MetricRow> rows;
    const absl::Status read = status_of([&] { rows = c_.store.metrics(job_id_, 0, after, kReplayPage); });
    MutexLock lock(&mu_);
    if (!read.ok()) {
      FinishLocked(to_grpc(read));
      return;
    }
    if (!rows.empty()) last_heard_ = std::chrono::steady_clock::now();
    for (const MetricRow& r : rows) {
      last_seq_ = r.seq;
      if (r.kind != "state" && r.step < req_.from_step()) continue;
      v1::MetricEvent e;
      if (!google::protobuf::util::JsonStringToMessage(r.payload_json, &e).ok()) continue;
      e.set_seq(r.seq);
      pending_.push_back(std::move(e));
    }
    replaying_ = static_cast<int64_t>(rows.size()) == kReplayPage;  // more stored events to read
    fetching_ = false;
    PumpLocked();
  }

  // The hub's wake-up: a live event was queued, or the hub closed.
  void Wake() {
    MutexLock lock(&mu_);
    PumpLocked();
  }

  // Starts the next write if none is in flight: replayed events first, then live ones.
  void PumpLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_ || ended_) return;
    if (!pending_.empty()) {
      Write(std::move(pending_.front()));
      pending_.pop_front();
      return;
    }
    if (replaying_ || fetching_) {
      if (!fetching_) {
        fetching_ = true;
        RunOnPoolLocked(&MetricsStream::Replay);
      }
      return;
    }
    if (sub_ == nullptr) return;  // still opening
    v1::MetricEvent e;
    while (sub_->try_next(&e)) {
      if (e.seq() <= last_seq_) continue;  // already sent by the replay
      if (e.seq() > last_seq_ + 1) {
        // Missed events (the live queue overflowed): read them, then this one, from the store.
        replaying_ = true;
        fetching_ = true;
        RunOnPoolLocked(&MetricsStream::Replay);
        return;
      }
      last_seq_ = e.seq();
      last_heard_ = std::chrono::steady_clock::now();
      if (e.step() < req_.from_step() && e.event_case() != v1::MetricEvent::kState) continue;
      Write(std::move(e));
      return;
    }
    if (sub_->closed()) {
      FinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE,
                                "the server is shutting down; reconnect with from_step to continue the stream"));
      return;
    }
    // Nothing live for a while: the job may run on another replica, whose events reach this
    // one only through the store. Read what the store has after the last event sent (the
    // hub's ticker brings the stream back here).
    const auto now = std::chrono::steady_clock::now();
    if (now - last_heard_ >= kStorePoll) {
      last_heard_ = now;
      replaying_ = true;
      fetching_ = true;
      RunOnPoolLocked(&MetricsStream::Replay);
    }
  }

  // Runs `step` (Open, a replay page) on the pool, counted so the object outlives it: the
  // counting happens under the lock, the step runs unlocked. Refused: the stream ends.
  void RunOnPoolLocked(void (MetricsStream::*step)()) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ++tasks_;
    const bool queued = c_.pool.try_submit([this, step] {
      (this->*step)();
      bool last;
      {
        MutexLock lock(&mu_);
        last = --tasks_ == 0 && done_;
      }
      if (last) delete this;
    });
    if (!queued) {
      --tasks_;
      fetching_ = false;
      FinishLocked(pool_full(c_.limits.calls, c_.pool));
    }
  }

  void Write(v1::MetricEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ended_ = EndsStream(e);
    buffer_.Clear();
    const grpc::Status st = serialize_response(e, &buffer_);
    if (!st.ok()) {
      FinishLocked(st);
      return;
    }
    writing_ = true;
    StartWrite(&buffer_);
  }

  // Finish once; while a write is in flight, its completion finishes (gRPC runs no two
  // operations of a kind at once, and Finish is the last).
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    if (writing_) {
      deferred_ = status;
      finish_deferred_ = true;
      return;
    }
    Finish(status);
  }

  grpc::CallbackServerContext* ctx_;
  const MetricsStreamContext c_;
  v1::StreamMetricsRequest req_;  // set by Start, before the first pool task
  std::string job_id_;            // set by Open before it subscribes
  std::shared_ptr<MetricsHub::Subscription> sub_ ABSL_GUARDED_BY(mu_);

  Mutex mu_;
  std::deque<v1::MetricEvent> pending_ ABSL_GUARDED_BY(mu_);  // replayed, not yet written
  // The write in flight (gRPC reads it from StartWrite to OnWriteDone: writing_).
  grpc::ByteBuffer buffer_ ABSL_GUARDED_BY(mu_);
  int64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  // When the stream last got an event (live or stored): the store is polled after kStorePoll
  // of silence.
  std::chrono::steady_clock::time_point last_heard_ ABSL_GUARDED_BY(mu_) = std::chrono::steady_clock::now();
  int tasks_ ABSL_GUARDED_BY(mu_) = 0;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // OnDone began: an Open still running unsubscribes itself.
  bool unsubscribing_ ABSL_GUARDED_BY(mu_) = false;
  // OnDone is past the unsubscribe: the last task out deletes.
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  // Stored events remain to be read / a read is under way (Open's is the first).
  bool replaying_ ABSL_GUARDED_BY(mu_) = true;
  bool fetching_ ABSL_GUARDED_BY(mu_) = true;
  bool finish_deferred_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status deferred_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

grpc::ServerWriteReactor<grpc::ByteBuffer>* start_metrics_stream(grpc::CallbackServerContext* ctx,
                                                                 const grpc::ByteBuffer* request,
                                                                 const MetricsStreamContext& context) {
  auto* stream = new MetricsStream(ctx, context);
  stream->Start(*request);
  return stream;
}

}  // namespace anvil::server
