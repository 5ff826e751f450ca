// The Training service: SubmitJob, GetJob, ListJobs, CancelJob, StreamMetrics, GetServerInfo.
#include <absl/strings/numbers.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <string_view>
#include <thread>

#include "core/backend/kernel_report.h"
#include "core/util/mutex.h"
#include "core/util/utf8.h"
#include "proto/anvil/v1/anvil.grpc.pb.h"
#include "server/auth.h"
#include "server/doctor_report.h"
#include "server/heavy_work.h"
#include "server/job_spec.h"
#include "server/listings.h"
#include "server/metrics_hub.h"
#include "server/metrics_stream.h"
#include "server/state.h"
#include "server/status.h"
#include "server/unary_call.h"
#include "workers/job_plan.h"

namespace anvil::server {
namespace {

using grpc::ServerContext;
using grpc::Status;

// The unary methods are raw callback methods (server/unary_call.h): the Training limit and the
// wire check apply before parsing, and the bodies run on the server's call pool.
using TrainingBase = v1::Training::WithRawCallbackMethod_SubmitJob<
    v1::Training::WithRawCallbackMethod_GetJob<v1::Training::WithRawCallbackMethod_ListJobs<
        v1::Training::WithRawCallbackMethod_CancelJob<v1::Training::WithRawCallbackMethod_GetServerInfo<
            v1::Training::WithRawCallbackMethod_StreamMetrics<v1::Training::WithRawCallbackMethod_DeleteJob<
                v1::Training::WithRawCallbackMethod_GetFindings<v1::Training::Service>>>>>>>>;

class TrainingService final : public TrainingBase {
 public:
  explicit TrainingService(AnvilServer::State& s) : s_(s) {
    limits_.max_bytes = s.options.limits.training_message_bytes;
    limits_.service = "Training";
    limits_.calls = "calls";
    limits_.flag = "--max-training-message-mb";
    limits_.wire.max_fields = s.options.limits.max_wire_fields;
  }

  using Raw = grpc::ByteBuffer;
  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    // A dry run builds the whole plan (reads the data, builds the model): the work pool's.
    return serve_method_heavy(this, &TrainingService::SubmitJobImpl, c, in, out, *s_.call_pool, *s_.work_pool, limits_,
                              [](const v1::SubmitJobRequest& r) { return r.dry_run(); });
  }
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &TrainingService::GetJobImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* GetFindings(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &TrainingService::GetFindingsImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &TrainingService::ListJobsImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &TrainingService::CancelJobImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &TrainingService::GetServerInfoImpl, c, in, out, *s_.call_pool, limits_);
  }
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext* c, const Raw* in, Raw* out) override {
    return serve_method(this, &TrainingService::DeleteJobImpl, c, in, out, *s_.call_pool, limits_);
  }
  // A callback reactor (server/metrics_stream.h): no thread while it waits; at most
  // max_streams streams on the server and max_metric_streams_per_job on one job.
  grpc::ServerWriteReactor<Raw>* StreamMetrics(grpc::CallbackServerContext* c, const Raw* in) override {
    return start_metrics_stream(c, in, stream_context_);
  }

  Status SubmitJobImpl(grpc::ServerContextBase* ctx, const v1::SubmitJobRequest* req, v1::SubmitJobResponse* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "SubmitJob");
      ANVIL_SERVICE_CHECK(!s_.draining.load(), absl::StatusCode::kUnavailable, "the server is shutting down");
      const v1::JobSpec spec =
          validate_job_spec(req->spec(), {s_.data_root, s_.scheduler->devices(), s_.options.max_job_memory});
      if (req->dry_run()) {
        // Build the whole plan (data, model, optimizer) without training: catches a model
        // that does not fit the data before anything is queued. On a work-pool thread
        // (serve_method_heavy), which bounds how many run at once; a client that leaves stops
        // it at the plan's next phase.
        try {
          const ScopedInterruptionCheck loops = stop_inside_loops_if_abandoned(*ctx, "dry run");
          workers::make_job_plan(spec, {s_.data_root, s_.options.datasets_dir, "", kCPU, s_.options.max_job_memory},
                                 /*seed_generator=*/false,
                                 [ctx](std::string_view done) { stop_if_abandoned(*ctx, "dry run", done); });
        } catch (const Error& e) {
          throw ServiceError(absl::StatusCode::kInvalidArgument,
                             scrub_paths(std::string("spec: ") + e.what(), s_.data_root));
        }
        v1::Job* job = resp->mutable_job();
        job->set_name(spec.name());
        *job->mutable_spec() = spec;
        resp->set_created(false);
        return;
      }
      const Scheduler::Submitted submitted = value_or_throw(s_.scheduler->submit(spec));
      *resp->mutable_job() = Scheduler::to_job(submitted.row);
      resp->set_created(submitted.created);
    });
  }

  // The job's doctor report (server/doctor_report.h): its findings, the rules checked and
  // healthy, and those not yet checked with what each needs.
  Status GetFindingsImpl(grpc::ServerContextBase* ctx, const v1::GetFindingsRequest* req,
                         v1::GetFindingsResponse* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "GetFindings");
      *resp = doctor_report(*s_.store, Find(req->job_id()));
    });
  }

  Status GetJobImpl(grpc::ServerContextBase* ctx, const v1::GetJobRequest* req, v1::Job* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "GetJob");
      *resp = Scheduler::to_job(Find(req->job_id()));
    });
  }

  Status ListJobsImpl(grpc::ServerContextBase* ctx, const v1::ListJobsRequest* req, v1::ListJobsResponse* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "ListJobs");
      *resp = list_jobs_page(*s_.store, *req);
    });
  }

  Status DeleteJobImpl(grpc::ServerContextBase* ctx, const v1::DeleteJobRequest* req, v1::DeleteJobResponse*) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "DeleteJob");
      throw_if_error(s_.scheduler->delete_job(req->job_id()));
    });
  }

  Status GetServerInfoImpl(grpc::ServerContextBase* ctx, const v1::GetServerInfoRequest*, v1::ServerInfo* resp) {
    return Guard([&] {
      Auth(*ctx, std::nullopt, "GetServerInfo");
      const CpuKernelInfo cpu = kernel_report();
      resp->set_version(ANVIL_VERSION_STRING);
      resp->set_cpu_model(cpu.model);
      resp->set_cpu_features(cpu.features);
      resp->set_isa(cpu.isa);
      resp->set_detected_isa(cpu.detected_isa);
      resp->set_gemm(cpu.gemm);
      resp->set_bf16_gemm(cpu.bf16_gemm);
      resp->set_threads(cpu.threads);
      resp->set_available_cpus(cpu.available_cpus);
      for (const std::string& d : s_.scheduler->devices()) resp->add_devices(d);
    });
  }

  Status CancelJobImpl(grpc::ServerContextBase* ctx, const v1::CancelJobRequest* req, v1::Job* resp) {
    return Guard([&] {
      Auth(*ctx, Scope::kTrain, "CancelJob");
      ANVIL_SERVICE_CHECK(!req->job_id().empty(), absl::StatusCode::kInvalidArgument, "job_id: expected a job id");
      // A running job stops at its next step: the reply waits up to 3 s for its terminal event,
      // so it says how the job ended rather than RUNNING (a step longer than that still answers
      // RUNNING, with the reason saying the cancel is under way). Subscribed before the cancel,
      // so the event cannot be missed; the hub's ticker also wakes the wait every 200 ms, when
      // the row is read again (a job running on another replica sends its events through the
      // store, not this hub).
      struct Wake {
        Mutex mu;
        std::condition_variable cv;
        bool poked ABSL_GUARDED_BY(mu) = false;
      };
      const auto wake = std::make_shared<Wake>();
      const std::shared_ptr<MetricsHub::Subscription> sub =
          s_.hub.subscribe(req->job_id(), SIZE_MAX, SIZE_MAX, nullptr, [wake] {
            {
              MutexLock lock(&wake->mu);
              wake->poked = true;
            }
            wake->cv.notify_all();
          });
      struct Unsubscribe {
        MetricsHub& hub;
        const std::string& id;
        const std::shared_ptr<MetricsHub::Subscription>& sub;
        ~Unsubscribe() {
          if (sub) hub.unsubscribe(id, sub);
        }
      } unsubscribe{s_.hub, req->job_id(), sub};
      JobRow row = value_or_throw(s_.scheduler->cancel(req->job_id()));
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      while (sub && !is_terminal(row.state) && std::chrono::steady_clock::now() < until) {
        {
          UniqueMutexLock lock(&wake->mu);
          while (!wake->poked && wake->cv.wait_until(lock.native(), until) != std::cv_status::timeout) {
          }
          wake->poked = false;
        }
        bool ended = false;
        for (v1::MetricEvent e; sub->try_next(&e);) {
          ended = ended || (e.event_case() == v1::MetricEvent::kState &&
                            (e.state() == v1::CANCELLED || e.state() == v1::SUCCEEDED || e.state() == v1::FAILED));
        }
        // The row is written before its terminal event is published: read once it came, or on
        // a tick without one.
        if (std::optional<JobRow> now = s_.store->get_job(row.id)) row = std::move(*now);
        if (ended || sub->closed()) break;
      }
      if (!is_terminal(row.state)) row.reason = "cancelling: the job stops at its next step";
      *resp = Scheduler::to_job(row);
    });
  }

 private:
  JobRow Find(const std::string& id) {
    ANVIL_SERVICE_CHECK(!id.empty(), absl::StatusCode::kInvalidArgument, "job_id: expected a job id");
    std::optional<JobRow> row = s_.store->get_job(id);
    ANVIL_SERVICE_CHECK(row.has_value(), absl::StatusCode::kNotFound, "job \"", echo(id), "\" does not exist");
    return *row;
  }

  void Auth(const grpc::ServerContextBase& ctx, std::optional<Scope> scope, const char* method) {
    authorize(s_.tokens.get(), ctx, scope, method);
  }

  template <typename F>
  Status Guard(F&& f) {
    return guarded({s_.data_root, s_.options.datasets_dir}, std::forward<F>(f));
  }

  AnvilServer::State& s_;
  CallLimits limits_;
  const MetricsStreamContext stream_context_{
      *s_.store,
      s_.hub,
      *s_.replay_pool,
      limits_,
      static_cast<size_t>(s_.options.limits.max_metric_streams_per_job),
      static_cast<size_t>(s_.options.limits.max_streams),
      [this](grpc::ServerContextBase& ctx) { Auth(ctx, Scope::kTrain, "StreamMetrics"); }};
};

}  // namespace

std::unique_ptr<grpc::Service> make_training_service(AnvilServer::State& state) {
  return std::make_unique<TrainingService>(state);
}

}  // namespace anvil::server
