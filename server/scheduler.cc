#include "server/scheduler.h"

#include <absl/strings/str_cat.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/train/checkpoint.h"
#include "core/util/clock.h"
#include "core/util/utf8.h"
#include "server/artifacts/job_checkpoints.h"
#include "server/job_transitions.h"
#include "server/log.h"
#include "server/status.h"
#include "server/store_retry.h"

namespace anvil::server {

// Marks a worker's failure that is not the job's (its checkpoint was out of reach): the job
// goes back to the queue instead of failing.
constexpr char kRequeuePayload[] = "anvil.dev/requeue";
// Nodes of spread jobs run as CPU rank processes, only on CPU workers.
constexpr char kPartDevice[] = "cpu";
namespace {

// A training-doctor finding as the stream and the store carry it.
void ToProto(const train::Finding& finding, v1::Finding* f) {
  f->set_code(finding.code);
  f->set_severity(train::severity_name(finding.severity));
  f->set_first_step(finding.first_step);
  f->set_last_step(finding.last_step);
  for (const auto& [name, value] : finding.evidence) {
    v1::FindingEvidence* ev = f->add_evidence();
    ev->set_name(name);
    ev->set_value(std::isfinite(value) ? value : 0.0);  // JSON holds no inf; the code says it
  }
  f->set_advice(finding.advice);
}

namespace fs = std::filesystem;
using workers::WorkerEvent;

std::string ToJson(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions o;
  o.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, o);
  return out;
}

v1::JobSpec SpecOf(const JobRow& row) {
  v1::JobSpec spec;
  const auto status = google::protobuf::util::JsonStringToMessage(to_valid_utf8(row.spec_json), &spec);
  ANVIL_SERVICE_CHECK(status.ok(), absl::StatusCode::kDataLoss, "job ", row.id, ": its stored spec does not parse");
  return spec;
}

v1::JobState ToWire(JobState s) {
  switch (s) {
    case JobState::kQueued:
      return v1::QUEUED;
    case JobState::kRunning:
      return v1::RUNNING;
    case JobState::kSucceeded:
      return v1::SUCCEEDED;
    case JobState::kFailed:
      return v1::FAILED;
    case JobState::kCancelled:
      return v1::CANCELLED;
    case JobState::kInterrupted:
      return v1::INTERRUPTED;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

// The step a checkpoint holds, read from its safetensors header alone (the tensors can be
// large); -1 when there is no readable checkpoint.
int64_t CheckpointStep(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint64_t n = 0;
  if (!in.read(reinterpret_cast<char*>(&n), 8) || n > (uint64_t{64} << 20)) return -1;
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return -1;
  try {
    const auto meta = nlohmann::json::parse(header).at("__metadata__");
    return nlohmann::json::parse(meta.at("anvil.state").get<std::string>()).at("step").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    return -1;
  }
}

bool DeviceFits(const std::string& wanted, const std::string& device) {
  if (wanted == "any") return true;
  if (wanted == "cuda") return device.rfind("cuda", 0) == 0;
  return wanted == device;
}

}  // namespace

Scheduler::Scheduler(Store& store, MetricsHub& hub, ModelRegistry& registry, SchedulerOptions options,
                     const std::vector<WorkerFactory>& workers, metrics::ServiceMetrics* metrics, Store* lease_store)
    : store_(store),
      lease_store_(lease_store != nullptr ? *lease_store : store),
      hub_(hub),
      registry_(registry),
      publisher_(std::make_unique<CheckpointPublisher>(registry.artifacts())),
      options_(std::move(options)),
      metrics_(metrics) {
  if (metrics_ != nullptr) {
    // Jobs by state, counted from the store at each scrape.
    metrics_->registry().add_collector([this] {
      const std::map<JobState, int64_t> counts = store_.count_jobs_by_state();
      for (JobState s : {JobState::kQueued, JobState::kRunning, JobState::kSucceeded, JobState::kFailed,
                         JobState::kCancelled, JobState::kInterrupted}) {
        const auto it = counts.find(s);
        metrics_->jobs.with({std::string(job_state_name(s))}).Set(it == counts.end() ? 0.0 : double(it->second));
      }
    });
  }
  for (const WorkerFactory& make : workers) {
    slots_.push_back({make([this](const WorkerEvent& e) { OnEvent(e); }), ""});
  }
}

Scheduler::~Scheduler() {
  watch_.reset();  // its thread calls into this object
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  keeper_cv_.notify_all();
  if (keeper_.joinable()) keeper_.join();
  for (Slot& s : slots_) s.worker->shutdown();
}

std::vector<std::string> Scheduler::devices() const {
  MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const Slot& s : slots_) {  // once each, though several CPU workers may share it
    if (std::find(out.begin(), out.end(), s.worker->device()) == out.end()) out.push_back(s.worker->device());
  }
  return out;
}

v1::Job Scheduler::to_job(const JobRow& row) {
  v1::Job job;
  // Protobuf strings must be UTF-8 (a reply with one that is not fails to parse in every
  // client): text is checked where it enters, and rows an older version stored are mended here.
  job.set_id(to_valid_utf8(row.id));
  job.set_name(to_valid_utf8(row.name));
  job.set_client_job_id(to_valid_utf8(row.client_job_id));
  job.set_state(ToWire(row.state));
  job.set_reason(to_valid_utf8(row.reason));
  if (!row.spec_json.empty()) *job.mutable_spec() = SpecOf(row);
  job.set_device(to_valid_utf8(row.device));
  job.set_step(row.step);
  job.set_epoch(row.epoch);
  job.set_created_unix_ms(row.created_ms);
  job.set_started_unix_ms(row.started_ms);
  job.set_finished_unix_ms(row.finished_ms);
  job.set_model_name(to_valid_utf8(row.model_name));
  job.set_model_version(row.model_version);
  job.set_replica(to_valid_utf8(row.owner));
  return job;
}

void Scheduler::Record(JobRow& row, v1::MetricEvent event, std::chrono::milliseconds outage_wait, int64_t fence,
                       Store* via) {
  Store& store = via != nullptr ? *via : store_;
  const int64_t now = unix_millis();
  event.set_job_id(row.id);
  event.set_step(row.step);
  if (!event.has_step_metrics() && !event.has_epoch_metrics()) event.set_epoch(row.epoch);
  event.set_unix_ms(now);
  MetricRow m;
  m.job_id = row.id;
  m.step = row.step;
  m.kind = event.has_step_metrics()    ? "step"
           : event.has_epoch_metrics() ? "epoch"
           : event.has_finding()       ? "finding"
           : event.has_checked()       ? "checked"
                                       : "state";
  m.payload_json = ToJson(event);
  m.time_ms = now;
  event.set_seq(retry_while_unavailable("record an event of job " + row.id, outage_wait,
                                        [&] { return store.append_metric(m, fence); }));
  hub_.publish(event);
}

bool Scheduler::RequeueStopped(JobRow row) {
  // The published checkpoint the row names gives the step (any replica resumes from it);
  // rows of jobs that ran before checkpoints were published name none: the local newest
  // generation with a readable header does. The worker verifies the whole file and falls back
  // further, or fails the job when none verifies.
  int64_t step = -1;
  bool resume = false;
  if (const std::optional<CheckpointKey> published = parse_checkpoint_key(row.checkpoint)) {
    step = published->step;
    resume = true;
  } else {
    const std::string checkpoint = (fs::path(options_.data_root) / "jobs" / row.id / "checkpoint.safetensors").string();
    const std::vector<std::string> generations = train::existing_checkpoints(checkpoint, 2);
    for (const std::string& g : generations) {
      if ((step = CheckpointStep(g)) >= 0) break;
    }
    resume = !generations.empty();
  }
  const int64_t resume_step = std::max<int64_t>(step, 0);
  const int64_t held_epoch = row.lease_epoch;
  const std::string previous_owner = row.owner;
  // The lease moves on: whatever the replica that ran it still writes is refused.
  row.owner.clear();
  row.lease_expires_ms = 0;
  row.lease_epoch = held_epoch + 1;
  const bool crashed = row.state == JobState::kRunning;
  if (crashed && row.cancel_requested) {
    row.state = JobState::kCancelled;
    row.reason = "cancelled; the server running it stopped before it could";
    row.finished_ms = unix_millis();
    if (!store_.update_job_fenced(row, held_epoch)) return false;
    v1::MetricEvent e;
    e.set_state(v1::CANCELLED);
    e.set_message(row.reason);
    Record(row, e);
    return true;
  }
  if (crashed) {
    // RUNNING with no live lease: the process died under this job (a drain leaves
    // INTERRUPTED). A job that takes the server down with it must not do so on every restart,
    // but a server that dies for other reasons (kill -9, a preempted machine) is not the job's
    // fault: only stops without progress count, i.e. a resume from the same checkpoint step as
    // the last counted one. A job that checkpointed further since starts its count again.
    if (row.crashes > 0 && resume_step > row.crash_step) row.crashes = 0;
    ++row.crashes;
    row.crash_step = resume_step;
    if (row.crashes > options_.max_crash_resumes) {
      row.state = JobState::kFailed;
      row.reason =
          detail::StrCat("the server stopped while running it ", row.crashes,
                         " times with no progress between (each resumed from the checkpoint at step ", resume_step,
                         "); not resumed again (anvild --max-crash-resumes ", options_.max_crash_resumes, ")");
      row.finished_ms = unix_millis();
      if (!store_.update_job_fenced(row, held_epoch)) return false;
      log(LogLevel::kWarning, "job ", row.id, ": ", row.reason);
      v1::MetricEvent e;
      e.set_state(v1::FAILED);
      e.set_message(row.reason);
      Record(row, e);
      return true;
    }
  }
  row.step = resume_step;
  row.state = JobState::kQueued;
  row.reason = resume ? "resuming from the checkpoint at step " + std::to_string(row.step) : "restarting";
  if (crashed) {
    row.reason += detail::StrCat(" (the server stopped under it ", row.crashes, " of at most ",
                                 options_.max_crash_resumes, " times without progress");
    if (!previous_owner.empty() && previous_owner != options_.instance) {
      row.reason += "; its lease on replica " + previous_owner + " lapsed";
    }
    row.reason += ")";
  }
  if (!store_.update_job_fenced(row, held_epoch)) return false;
  store_.truncate_metrics_after(row.id, row.step);
  v1::MetricEvent e;
  e.set_state(v1::QUEUED);
  e.set_message(row.reason);
  Record(row, e);
  return true;
}

void Scheduler::recover() {
  {
    MutexLock lock(&mu_);
    // This replica's own jobs (or, on a store written before leases, every RUNNING job): it
    // died under them, so their leases need not lapse first. Other replicas' jobs are theirs
    // until their leases lapse (the keeper's sweep). INTERRUPTED jobs, from a drain, requeue
    // with the step they resume from.
    for (const JobRow& row : store_.jobs_in_states({JobState::kRunning, JobState::kInterrupted})) {
      if (row.state == JobState::kRunning && !row.owner.empty() && row.owner != options_.instance) continue;
      RequeueStopped(row);
    }
    DispatchLocked();
  }
  StartKeeper();
}

absl::StatusOr<Scheduler::Submitted> Scheduler::submit(const v1::JobSpec& spec) {
  MutexLock lock(&mu_);
  try {
    return SubmitLocked(spec);
  } catch (...) {  // the store's StoreError (disk full, I/O) and friends
    return current_exception_status();
  }
}

absl::StatusOr<Scheduler::Submitted> Scheduler::SubmitLocked(const v1::JobSpec& spec) {
  if (draining_) return absl::UnavailableError("the server is shutting down; submit again after it restarts");
  if (!spec.client_job_id().empty()) {
    // An idempotent retry must succeed even when the queue is full.
    if (std::optional<JobRow> r = store_.get_job_by_client_id(spec.client_job_id())) {
      // Compared as messages: the JSON text of a spec with a map (doctor.thresholds) lists its
      // entries in the map's own order, which differs between equal specs.
      if (!google::protobuf::util::MessageDifferencer::Equals(SpecOf(*r), spec)) {
        return absl::AlreadyExistsError(absl::StrCat("client_job_id \"", spec.client_job_id(),
                                                     "\" is already used by job ", r->id,
                                                     " with a different spec; retries must send the same spec"));
      }
      return Submitted{*r, false};
    }
  }
  // Every replica's: the quota is the store's.
  int64_t pending = 0;
  for (const auto& [state, n] : store_.count_jobs_by_state()) pending += is_terminal(state) ? 0 : n;
  if (pending >= options_.max_pending_jobs) {
    return absl::ResourceExhaustedError(absl::StrCat("the job quota is reached (", options_.max_pending_jobs,
                                                     " queued or running jobs); wait for some to finish"));
  }
  JobRow row;
  row.name = spec.name();
  row.client_job_id = spec.client_job_id();
  row.spec_json = ToJson(spec);
  row.priority = spec.priority();
  row.device = spec.device();
  auto [stored, created] = store_.insert_job(row);
  if (created) {
    log(LogLevel::kInfo, "job ", stored.id, " (", stored.name, ") submitted");
    v1::MetricEvent e;
    e.set_state(v1::QUEUED);
    Record(stored, e);
    DispatchLocked();
  }
  return Submitted{stored, created};
}

absl::StatusOr<JobRow> Scheduler::cancel(const std::string& job_id) {
  MutexLock lock(&mu_);
  try {
    return CancelLocked(job_id);
  } catch (...) {
    return current_exception_status();
  }
}

absl::StatusOr<JobRow> Scheduler::CancelLocked(const std::string& job_id) {
  std::optional<JobRow> row = store_.get_job(job_id);
  if (!row.has_value()) return absl::NotFoundError(absl::StrCat("job \"", echo(job_id), "\" does not exist"));
  if (is_terminal(row->state)) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job_id, " already ended (", std::string(job_state_name(row->state)), ")"));
  }
  if (row->state == JobState::kQueued || row->state == JobState::kInterrupted) {
    // Fenced on the epoch just read: if a replica claims it meanwhile, the cancel goes to that
    // replica instead (below).
    JobRow cancelled = *row;
    cancelled.state = JobState::kCancelled;
    cancelled.reason = "cancelled before it started";
    cancelled.finished_ms = unix_millis();
    if (store_.update_job_fenced(cancelled, row->lease_epoch)) {
      v1::MetricEvent e;
      e.set_state(v1::CANCELLED);
      e.set_message(cancelled.reason);
      Record(cancelled, e);
      return cancelled;
    }
  }
  for (Slot& s : slots_) {
    if (s.job_id == job_id) {
      s.worker->stop(job_id, /*interrupt=*/false);
      return *row;
    }
  }
  // Running on another replica: it sees the request when it next renews its leases.
  store_.request_cancel(job_id);
  keeper_cv_.notify_all();
  return *row;
}

std::string Scheduler::failure_reason(const absl::Status& status, const std::vector<std::string>& roots) {
  std::string reason(status.message());
  if (status.code() != absl::StatusCode::kInvalidArgument && status.code() != absl::StatusCode::kUnknown) {
    reason = absl::StrCat(status_code_name(status.code()), ": ", reason);
  }
  for (const std::string& root : roots) reason = scrub_paths(std::move(reason), root);
  return reason;
}

bool Scheduler::AllSlotsIdle() const {
  return std::all_of(slots_.begin(), slots_.end(), [](const Slot& s) { return s.job_id.empty(); });
}

void Scheduler::drain(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  draining_ = true;
  for (Slot& s : slots_) {
    if (!s.job_id.empty()) s.worker->stop(s.job_id, /*interrupt=*/true);
  }
  // The wait releases mu_ and takes it again before each check (the analysis cannot follow a
  // lock through std::condition_variable_any, hence the unchecked predicate).
  idle_cv_.wait_for(mu_, timeout, [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return AllSlotsIdle(); });
}

void Scheduler::UpdateMetrics(const WorkerEvent& e, const JobRow& row) {
  if (metrics_ == nullptr) return;
  metrics::ServiceMetrics& m = *metrics_;
  const metrics::LabelValues job{row.id, row.name};
  switch (e.kind) {
    case WorkerEvent::Kind::kStarted:
      m.device_busy(row.device, true);
      break;
    case WorkerEvent::Kind::kStep:
      m.job_loss.with({row.id, row.name, "train"}).Set(e.step_metrics.loss);
      m.job_grad_norm.with(job).Set(e.step_metrics.grad_norm);
      m.job_learning_rate.with(job).Set(e.step_metrics.lr);
      m.job_step.with(job).Set(static_cast<double>(e.step));
      m.job_samples_per_second.with(job).Set(e.step_metrics.samples_per_second);
      m.job_data_wait_ratio.with(job).Set(e.step_metrics.data_wait_ratio);
      m.job_step_seconds.with(job).Observe(e.step_metrics.step_seconds);
      for (size_t r = 0; r < e.step_metrics.rank_step_seconds.size(); ++r) {  // data-parallel: a straggler shows
        m.rank_step_seconds.with({row.id, row.name, std::to_string(r)}).Set(e.step_metrics.rank_step_seconds[r]);
      }
      for (size_t r = 0; r < e.step_metrics.rank_data_wait.size(); ++r) {
        m.rank_data_wait_ratio.with({row.id, row.name, std::to_string(r)}).Set(e.step_metrics.rank_data_wait[r]);
      }
      for (size_t r = 0; r < e.step_metrics.rank_compute_seconds.size(); ++r) {
        m.rank_compute_seconds.with({row.id, row.name, std::to_string(r)}).Set(e.step_metrics.rank_compute_seconds[r]);
      }
      if (e.step_metrics.loss_scale > 0) {  // loss scaling on (fp16)
        m.amp_loss_scale.with(job).Set(e.step_metrics.loss_scale);
        metrics::advance_to(m.amp_skipped_steps.with(job), static_cast<double>(e.step_metrics.skipped_steps));
      }
      break;
    case WorkerEvent::Kind::kEpoch:
      m.job_epoch.with(job).Set(static_cast<double>(row.epoch));
      m.job_loss.with({row.id, row.name, "train"}).Set(e.epoch_metrics.train_loss);
      if (e.epoch_metrics.val_loss) m.job_loss.with({row.id, row.name, "val"}).Set(*e.epoch_metrics.val_loss);
      if (e.epoch_metrics.val_accuracy) m.job_val_accuracy.with(job).Set(*e.epoch_metrics.val_accuracy);
      break;
    case WorkerEvent::Kind::kCheckpoint:
      break;
    case WorkerEvent::Kind::kFinding:
      m.job_findings.with({e.finding.code, train::severity_name(e.finding.severity)}).Increment();
      break;
    case WorkerEvent::Kind::kChecked:
      break;
    case WorkerEvent::Kind::kSucceeded:
    case WorkerEvent::Kind::kFailed:
    case WorkerEvent::Kind::kCancelled:
    case WorkerEvent::Kind::kInterrupted: {
      std::string outcome(job_state_name(row.state));
      for (char& c : outcome) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      m.jobs_finished.with({outcome}).Increment();
      m.device_busy(row.device, false);
      m.job_ended(row.id);
      break;
    }
  }
}

void Scheduler::WriteTensorBoard(const WorkerEvent& e, const JobRow& row) {
  const double now = static_cast<double>(unix_millis()) / 1000.0;
  tensorboard::EventFile* file = nullptr;
  try {
    if (e.kind == WorkerEvent::Kind::kStarted) {
      auto opened = std::make_unique<tensorboard::EventFile>(
          (fs::path(options_.data_root) / "jobs" / row.id / "tensorboard").string(), e.step, now);
      MutexLock lock(&tensorboard_mu_);
      tensorboard_[row.id] = std::move(opened);
      return;
    }
    {
      MutexLock lock(&tensorboard_mu_);
      const auto it = tensorboard_.find(row.id);
      if (it == tensorboard_.end()) return;
      file = it->second.get();
    }
    switch (e.kind) {
      case WorkerEvent::Kind::kStep:
        file->scalars(e.step, now,
                      {{"train/loss", e.step_metrics.loss},
                       {"train/grad_norm", e.step_metrics.grad_norm},
                       {"train/learning_rate", e.step_metrics.lr},
                       {"train/samples_per_second", e.step_metrics.samples_per_second},
                       {"train/data_wait_ratio", e.step_metrics.data_wait_ratio},
                       {"train/step_seconds", e.step_metrics.step_seconds}});
        if (e.step_metrics.loss_scale > 0) {
          file->scalars(e.step, now,
                        {{"amp/loss_scale", e.step_metrics.loss_scale},
                         {"amp/skipped_steps", static_cast<double>(e.step_metrics.skipped_steps)}});
        }
        return;
      case WorkerEvent::Kind::kEpoch: {
        std::vector<std::pair<std::string, double>> values = {{"epoch/train_loss", e.epoch_metrics.train_loss}};
        if (e.epoch_metrics.val_loss) values.emplace_back("val/loss", *e.epoch_metrics.val_loss);
        if (e.epoch_metrics.val_accuracy) values.emplace_back("val/accuracy", *e.epoch_metrics.val_accuracy);
        file->scalars(e.step, now, values);
        file->flush();
        return;
      }
      case WorkerEvent::Kind::kSucceeded:
      case WorkerEvent::Kind::kFailed:
      case WorkerEvent::Kind::kCancelled:
      case WorkerEvent::Kind::kInterrupted: {
        MutexLock lock(&tensorboard_mu_);
        tensorboard_.erase(row.id);  // synced and closed
        return;
      }
      case WorkerEvent::Kind::kStarted:
      case WorkerEvent::Kind::kCheckpoint:
      case WorkerEvent::Kind::kFinding:
      case WorkerEvent::Kind::kChecked:
        return;
    }
  } catch (const std::exception& ex) {
    log(LogLevel::kWarning, "job ", row.id,
        ": no more TensorBoard curves: ", scrub_paths(ex.what(), options_.data_root));
    MutexLock lock(&tensorboard_mu_);
    tensorboard_.erase(row.id);
  }
}

void Scheduler::DispatchLocked(Store* via) {
  if (draining_) return;
  Store& claims = via != nullptr ? *via : store_;
  for (Slot& slot : slots_) {
    // The slot is the one record of "busy": a worker is idle before its terminal event
    // arrives (workers/worker.h), which is when the slot is freed.
    if (!slot.job_id.empty()) continue;
    const std::string device = slot.worker->device();
    // A candidate's `device` is the one its spec requests (Store::claim_job).
    std::optional<JobRow> row = claims.claim_job(options_.instance, options_.lease.count(),
                                                 [&](const JobRow& r) { return DeviceFits(r.device, device); });
    if (!row) {
      if (options_.span.rank_slots > 0 && DeviceFits(kPartDevice, device)) StartPartLocked(slot, claims);
      continue;
    }
    const fs::path dir = fs::path(options_.data_root) / "jobs" / row->id;
    workers::RunJob job;
    job.job_id = row->id;
    job.spec = SpecOf(*row);
    job.data_root = options_.data_root;
    job.datasets_dir = options_.datasets_dir;
    job.job_dir = dir.string();
    // A job that ran before resumes from its newest checkpoint (the worker verifies it): the
    // published one its row names, brought from the artifact store by the worker's thread.
    job.resume = !train::existing_checkpoints((dir / "checkpoint.safetensors").string(), 2).empty();
    if (parse_checkpoint_key(row->checkpoint)) {
      job.prepare = [&artifacts = registry_.artifacts(), id = row->id, key = row->checkpoint, dir = dir.string(),
                     wait = options_.store_outage_wait]() -> absl::StatusOr<workers::RunJob::Prepared> {
        absl::Status requeue;
        absl::StatusOr<workers::RunJob::Prepared> out = status_of([&] {
          std::string placed;
          try {
            placed = retry_while_artifacts_unavailable("bring the checkpoint of job " + id, wait,
                                                       [&] { return place_checkpoint(artifacts, id, key, dir); });
          } catch (const ArtifactError& e) {
            if (e.kind() != ArtifactError::Kind::kUnavailable) throw;
            requeue = absl::UnavailableError(
                std::string("its checkpoint could not be brought from the artifact store: ") + e.what());
            requeue.SetPayload(kRequeuePayload, absl::Cord("1"));
            return workers::RunJob::Prepared{};
          }
          workers::RunJob::Prepared ready;
          ready.resume = !train::existing_checkpoints((fs::path(dir) / "checkpoint.safetensors").string(), 2).empty();
          if (placed != key) {
            const std::optional<CheckpointKey> was = parse_checkpoint_key(key), is = parse_checkpoint_key(placed);
            const bool older = !is || (was && std::tie(is->epoch, is->step, is->time_ms) <
                                                  std::tie(was->epoch, was->step, was->time_ms));
            ready.note = std::string(older ? "resumed from an older checkpoint, " : "resumed from checkpoint ") +
                         fs::path(placed.empty() ? "(local)" : placed).filename().string() + ": " +
                         fs::path(key).filename().string() + ", which the job's row names, is corrupt or missing";
          }
          return ready;
        });
        if (!requeue.ok()) return requeue;
        return out;
      };
    }
    job.memory_budget = options_.max_job_memory;
    const int world = job.spec.world_size();
    if (const int nproc = span_node_size(world, options_.span.rank_slots); nproc < world) {
      job.span =
          coordinator_span(options_.span, store_, registry_.artifacts(), *publisher_, *row, dir.string(), world, nproc);
      log(LogLevel::kInfo, "job ", row->id, ": ", world, " ranks as ", job.span.nnodes, " nodes of ", nproc,
          "; node 0 runs here (", options_.instance, "), the others on replicas that claim them");
    }
    publisher_->set_named(row->id, row->checkpoint);
    slot.job_id = row->id;
    slot.epoch = row->lease_epoch;
    slot.lost = false;
    slot.part.reset();
    slot.last_event = std::chrono::steady_clock::now();
    slot.stalled_reported = false;
    slot.worker->run(std::move(job));
  }
}

void Scheduler::StartPartLocked(Slot& slot, Store& claims) {
  std::optional<JobPart> part = claims.claim_part(options_.instance, options_.lease.count(), options_.span.rank_slots);
  if (!part) return;
  std::optional<JobRow> job = claims.get_job(part->job_id);
  if (!job) {
    claims.finish_part(options_.instance, *part, false, "its job is gone");
    return;
  }
  const fs::path dir = fs::path(options_.data_root) / "jobs" / job->id / ("node-" + std::to_string(part->node));
  workers::RunJob run = part_run(options_.span, registry_.artifacts(), *part, *job, SpecOf(*job), dir.string());
  run.data_root = options_.data_root;
  run.datasets_dir = options_.datasets_dir;
  run.memory_budget = options_.max_job_memory;
  log(LogLevel::kInfo, "job ", job->id, " (", job->name, "): node ", part->node, " of ", part->nnodes, " (ranks ",
      part->node * part->nproc, "..", (part->node + 1) * part->nproc - 1, ") runs here, attempt ", part->attempt,
      part->checkpoint.empty() ? std::string(", from the start") : ", from " + part->checkpoint);
  slot.job_id = run.job_id;
  slot.epoch = part->epoch;
  slot.lost = false;
  slot.part = *part;
  if (metrics_ != nullptr) metrics_->device_busy(kPartDevice, true);  // its ranks are this worker's
  slot.worker->run(std::move(run));
}

void Scheduler::EndPart(const JobPart& part, const WorkerEvent& e, bool lost) {
  if (metrics_ != nullptr) metrics_->device_busy(kPartDevice, false);
  const bool ok = e.kind == WorkerEvent::Kind::kSucceeded;
  const std::string why = ok ? "" : !e.message.empty() ? e.message : std::string(e.status.message());
  if (!lost) {
    try {
      retry_while_unavailable("record node " + std::to_string(part.node) + " of job " + part.job_id,
                              options_.store_outage_wait, [&] {
                                store_.finish_part(options_.instance, part, ok, why);
                                return true;
                              });
    } catch (const std::exception& ex) {
      log(LogLevel::kWarning, "job ", part.job_id, ": how node ", part.node, " ended was not recorded: ", ex.what());
    }
  }
  log(ok ? LogLevel::kInfo : LogLevel::kWarning, "job ", part.job_id, ": node ", part.node, " (attempt ", part.attempt,
      ") ", ok ? "finished" : "ended: " + scrub_paths(why, options_.data_root));
  std::error_code ec;
  fs::remove_all(fs::path(options_.data_root) / "jobs" / part.job_id / ("node-" + std::to_string(part.node)), ec);
}

void Scheduler::StartKeeper() {
  std::unique_ptr<StoreWatch> watch = lease_store_.watch([this](std::string_view what) {
    if (what.rfind("model ", 0) == 0) {
      if (options_.on_notice) options_.on_notice(what);
      return;
    }
    MutexLock lock(&mu_);
    if (what == "cancel" || what == "reconnected") renew_now_ = true;
    poked_ = true;  // seen by the keeper even when the notice comes while it is not waiting
    keeper_cv_.notify_all();
  });
  MutexLock lock(&mu_);
  if (keeper_.joinable()) return;
  watch_ = std::move(watch);
  last_renewal_ = std::chrono::steady_clock::now();
  keeper_ = std::thread([this] { KeepLeases(); });
}

void Scheduler::KeepLeases() {
  auto next_renewal = std::chrono::steady_clock::now();
  bool reachable = true;
  MutexLock lock(&mu_);
  while (!stopping_) {
    const auto attempt = std::chrono::steady_clock::now();
    if (renew_now_) {
      renew_now_ = false;
      next_renewal = attempt;
    }
    if (attempt >= next_renewal) {
      next_renewal = attempt + options_.lease / 3;
      std::vector<std::pair<std::string, int64_t>> held;
      std::vector<JobPart> held_parts;
      for (const Slot& s : slots_) {
        if (s.job_id.empty() || s.lost) continue;
        if (s.part) {
          held_parts.push_back(*s.part);
        } else {
          held.emplace_back(s.job_id, s.epoch);
        }
      }
      try {
        const LeaseRenewal r = lease_store_.renew_leases(options_.instance, held, options_.lease.count());
        last_renewal_ = attempt;
        reachable = true;
        for (Slot& s : slots_) {
          if (s.job_id.empty() || s.lost) continue;
          if (std::find(r.lost.begin(), r.lost.end(), s.job_id) != r.lost.end()) {
            LoseLease(s, "its lease moved to another replica");
          } else if (std::find(r.cancel_requested.begin(), r.cancel_requested.end(), s.job_id) !=
                     r.cancel_requested.end()) {
            s.worker->stop(s.job_id, /*interrupt=*/false);
          }
        }
        if (!held_parts.empty()) {
          for (const JobPart& gone : lease_store_.renew_parts(options_.instance, held_parts, options_.lease.count())) {
            for (Slot& s : slots_) {
              if (s.job_id == part_run_id(gone) && !s.lost) {
                LoseLease(s, "its job moved on (another attempt, another replica's lease, or it ended)");
              }
            }
          }
        }
        // Others' lapsed leases: their replica died or was cut off. A sweep is fenced on the
        // epoch it read, so replicas sweeping together requeue each job once.
        for (const JobRow& row : lease_store_.lapsed_leases(options_.lease_grace.count())) {
          if (IsRunningHere(row.id)) continue;  // ours, renewed above unless lost
          if (RequeueStopped(row)) log(LogLevel::kWarning, "job ", row.id, " (", row.name, "): ", row.reason);
        }
        DispatchLocked(&lease_store_);  // jobs submitted on other replicas (a poll)
      } catch (const std::exception& e) {
        reachable = false;
        // The store cannot be reached. Before the database's clock can let another replica
        // take these jobs over, stop them here (self-fencing): a run must not go on writing
        // checkpoints beside its successor's.
        if (std::chrono::steady_clock::now() - last_renewal_ >= options_.lease - options_.lease / 6) {
          for (Slot& s : slots_) {
            if (!s.job_id.empty() && !s.lost) {
              LoseLease(s, "its lease could not be renewed: " + std::string(e.what()));
            }
          }
        }
      }
    }
    CheckStalledLocked();
    const auto wake = std::min(next_renewal, std::chrono::steady_clock::now() + options_.poll_interval);
    if (!poked_ && !renew_now_) {
      keeper_cv_.wait_until(mu_, wake,
                            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return poked_ || renew_now_ || stopping_; });
    }
    poked_ = false;
    if (!stopping_ && reachable && std::chrono::steady_clock::now() < next_renewal) {
      try {
        DispatchLocked(&lease_store_);
      } catch (const std::exception&) {
      }
    }
  }
}

void Scheduler::CheckStalledLocked() {
  if (options_.stalled_after.count() <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  for (Slot& s : slots_) {
    // This replica's own jobs: a node of another replica's job is watched by its coordinator.
    if (s.job_id.empty() || s.lost || s.part || s.stalled_reported || now - s.last_event < options_.stalled_after) {
      continue;
    }
    const double silent = std::chrono::duration<double>(now - s.last_event).count();
    try {
      // The keeper's own connection, no outage wait: a store that cannot be reached is tried
      // again on the next round. The event is appended only; the row stays its worker's.
      std::optional<JobRow> row = lease_store_.get_job(s.job_id);
      if (!row || row->state != JobState::kRunning) continue;
      train::Finding f{
          "STALLED",
          train::Severity::kWarning,
          row->step,
          row->step,
          {{"seconds_without_an_event", silent}, {"step", static_cast<double>(row->step)}},
          "no step, epoch or checkpoint for " + std::to_string(static_cast<int64_t>(silent / 60)) +
              " minutes at step " + std::to_string(row->step) +
              ": the run is stuck, not slow. Look for a data source that never answers (a network file system, a "
              "loader worker blocked in its transform), a deadlock in a custom module, or a data-parallel rank that "
              "died while the others wait in an all-reduce (every rank's log); cancel it and resume from its last "
              "checkpoint"};
      v1::MetricEvent event;
      ToProto(f, event.mutable_finding());
      Record(*row, event, {}, s.epoch, &lease_store_);
      s.stalled_reported = true;
      if (metrics_ != nullptr) metrics_->job_findings.with({"STALLED", "warning"}).Increment();
      log(LogLevel::kWarning, "job ", row->id, " (", row->name, ") STALLED: no event for ",
          static_cast<int64_t>(silent), " s at step ", row->step);
    } catch (const std::exception& e) {
      log(LogLevel::kWarning, "job ", s.job_id, ": its STALLED finding was not recorded: ", e.what());
    }
  }
}

void Scheduler::LoseLease(Slot& slot, const std::string& why) {
  log(LogLevel::kWarning, "job ", slot.job_id, ": stopped on this replica (", options_.instance, "): ", why,
      "; nothing more of this run is written");
  slot.lost = true;
  slot.worker->stop(slot.job_id, /*interrupt=*/false);
}

bool Scheduler::IsRunningHere(const std::string& job_id) const {
  return std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.job_id == job_id; });
}

void Scheduler::OnEvent(const WorkerEvent& e) {
  const bool frees = (job_transition(e.kind).effects & kFreeSlot) != 0;
  std::exception_ptr failed;
  try {
    HandleEvent(e, frees);
  } catch (...) {
    failed = std::current_exception();
  }
  // Whatever happened, a worker whose job ended is free again, after its row is written (a
  // drain that sees every slot free sees every row final).
  if (frees) FreeSlotOf(e.job_id);
  if (failed) std::rethrow_exception(failed);
}

void Scheduler::FreeSlotOf(const std::string& job_id) {
  MutexLock lock(&mu_);
  for (Slot& slot : slots_) {
    if (slot.job_id != job_id) continue;
    slot.job_id.clear();
    slot.part.reset();
  }
  idle_cv_.notify_all();
  // The next job waits for the keeper's next pass when this one fails (a store outage): the
  // queue is re-read there.
  try {
    DispatchLocked();
  } catch (const std::exception& e) {
    log(LogLevel::kWarning, "placing the next job after ", job_id, " failed: ", e.what(), "; the keeper retries");
  }
}

void Scheduler::HandleEvent(const WorkerEvent& e, bool ends) {
  // The store is written and a succeeded job's model loaded without the scheduler's lock, so
  // submissions, cancels and the other workers' events never wait behind SQLite or a model
  // load. The job's row needs no lock: its events come one at a time from its worker's
  // thread, and while it is placed nothing else writes it (cancel() only asks the worker).
  // The slots and the queue are the lock's: taken only to free the slot and place the next job.
  // The lease this run holds: every write below is fenced on its epoch, so a replica that lost
  // the job (its lease lapsed and another replica took it over) cannot change it.
  int64_t fence = 0;
  std::optional<JobPart> part;  // the slot runs a node of another replica's job, not a job
  bool lost = false;
  {
    MutexLock lock(&mu_);
    for (Slot& s : slots_) {
      if (s.job_id != e.job_id) continue;
      part = s.part;
      lost = s.lost;
      fence = s.epoch;
      s.last_event = std::chrono::steady_clock::now();
    }
  }
  if (part) {
    if (ends) EndPart(*part, e, lost);
    return;
  }
  if (lost) {
    if (ends && metrics_ != nullptr) metrics_->job_ended(e.job_id);
    publisher_->forget(e.job_id);
    return;  // stopped because its lease was lost: nothing of this run is written
  }
  // Each store call below waits out a store that cannot be reached (PostgreSQL restarting): the
  // event is recorded late rather than lost.
  const std::chrono::milliseconds wait = options_.store_outage_wait;
  try {
    OnEventFenced(e, fence, wait);
    if (ends && options_.span.rank_slots > 0) {
      try {
        store_.remove_parts(e.job_id);  // its other nodes stop (their leases are not renewed)
      } catch (const std::exception& ex) {
        log(LogLevel::kWarning, "job ", e.job_id, ": its nodes' rows were not removed: ", ex.what());
      }
    }
  } catch (const StoreError& refused) {
    if (refused.kind() != StoreError::Kind::kFenced) throw;
    Fenced(e.job_id, fence);
  }
}

void Scheduler::Fenced(const std::string& job_id, int64_t epoch) {
  log(LogLevel::kWarning, "job ", job_id, ": a write of this replica (", options_.instance, ") under lease epoch ",
      epoch, " was refused: another replica has taken the job over; this run stops");
  if (metrics_ != nullptr) metrics_->store_fenced_writes.Increment();
  publisher_->forget(job_id);
  MutexLock lock(&mu_);
  for (Slot& s : slots_) {
    if (s.job_id == job_id && !s.lost) LoseLease(s, "a write under its lease was refused by the fencing epoch");
  }
}

void Scheduler::OnEventFenced(const WorkerEvent& e, int64_t fence, std::chrono::milliseconds wait) {
  auto write_row = [&](const JobRow& row) {
    const bool written =
        retry_while_unavailable("update job " + row.id, wait, [&] { return store_.update_job(row, fence); });
    if (!written) {
      throw StoreError("job " + row.id + ": refused by the fencing epoch " + std::to_string(fence),
                       StoreError::Kind::kFenced);
    }
  };
  const JobTransition& transition = job_transition(e.kind);
  if (transition.effects & kPublishCheckpoint) {
    // Published off this thread, with no store call here; the row names it with the job's next
    // event, once it is in the artifact store: whichever replica resumes the job finds what
    // the row says.
    publisher_->submit(e.job_id, fence, e.step, e.path);
    return;
  }
  std::optional<JobRow> found =
      retry_while_unavailable("read job " + e.job_id, wait, [&] { return store_.get_job(e.job_id); });
  if (!found) return;  // deleted meanwhile
  JobRow& row = *found;
  if (const absl::Status legal = check_job_transition(row.state, e.kind); !legal.ok()) {
    log(LogLevel::kError, "job ", row.id, " (", row.name, "): ", legal.message());
    if (metrics_ != nullptr) metrics_->illegal_job_transitions.Increment();
    return;
  }
  {
    // The newest checkpoint published since the job's last event; before its last row, the one
    // still uploading too (a drained job resumes from its interrupt checkpoint).
    const bool last = (transition.effects & kFreeSlot) != 0;
    if (std::string key = last ? publisher_->flush(row.id) : publisher_->take_published(row.id); !key.empty()) {
      row.checkpoint = std::move(key);
    }
  }
  const std::string root = options_.data_root;
  if (e.kind == WorkerEvent::Kind::kFailed && e.status.GetPayload(kRequeuePayload).has_value()) {
    // Its checkpoint could not be brought from the artifact store (unreachable): not the job's
    // fault. Back to the queue, without counting as a crash; any replica may take it again.
    log(LogLevel::kWarning, "job ", row.id, ": ", scrub_paths(std::string(e.status.message()), root),
        "; back to the queue");
    row.state = JobState::kInterrupted;
    MutexLock lock(&mu_);
    if (!RequeueStopped(row))
      throw StoreError("job " + row.id + ": refused by the fencing epoch", StoreError::Kind::kFenced);
    return;
  }
  v1::MetricEvent event;
  event.set_total_steps(e.total_steps);
  if (transition.to) row.state = *transition.to;
  if (transition.effects & kTruncateEvents) {
    // A resume from an older checkpoint replays steps the stream already holds.
    retry_while_unavailable("truncate the events of job " + row.id, wait,
                            [&] { store_.truncate_metrics_after(row.id, e.step); });
  }
  switch (e.kind) {
    case WorkerEvent::Kind::kStarted:
      row.reason.clear();
      if (row.started_ms == 0) row.started_ms = unix_millis();
      row.device = e.message;
      row.step = e.step;
      event.set_state(v1::RUNNING);
      event.set_message("on " + e.message + (e.step > 0 ? ", from step " + std::to_string(e.step) : "") +
                        (e.detail.empty() ? "" : " (" + e.detail + ")"));
      break;
    case WorkerEvent::Kind::kStep: {
      row.step = e.step;
      event.set_epoch(e.epoch);  // the epoch the step belongs to (0-based)
      v1::StepMetrics* m = event.mutable_step_metrics();
      m->set_loss(e.step_metrics.loss);
      m->set_grad_norm(e.step_metrics.grad_norm);
      m->set_lr(e.step_metrics.lr);
      m->set_samples_per_second(e.step_metrics.samples_per_second);
      m->set_data_wait_ratio(e.step_metrics.data_wait_ratio);
      m->set_update_ratio(e.step_metrics.update_ratio);
      m->set_step_seconds(e.step_metrics.step_seconds);
      m->set_loss_scale(e.step_metrics.loss_scale);
      m->set_skipped_steps(e.step_metrics.skipped_steps);
      for (double v : e.step_metrics.rank_step_seconds) m->add_rank_step_seconds(v);
      for (double v : e.step_metrics.rank_data_wait) m->add_rank_data_wait_ratio(v);
      for (double v : e.step_metrics.rank_compute_seconds) m->add_rank_compute_seconds(v);
      break;
    }
    case WorkerEvent::Kind::kEpoch: {
      row.step = e.step;
      row.epoch = e.epoch + 1;  // the job counts completed epochs
      event.set_epoch(e.epoch);
      v1::EpochMetrics* m = event.mutable_epoch_metrics();
      m->set_train_loss(e.epoch_metrics.train_loss);
      m->set_has_val_loss(e.epoch_metrics.val_loss.has_value());
      m->set_val_loss(e.epoch_metrics.val_loss.value_or(0));
      m->set_has_val_accuracy(e.epoch_metrics.val_accuracy.has_value());
      m->set_val_accuracy(e.epoch_metrics.val_accuracy.value_or(0));
      m->set_improved(e.epoch_metrics.improved);
      break;
    }
    case WorkerEvent::Kind::kCheckpoint:
      return;  // handled before the row was read
    case WorkerEvent::Kind::kChecked:
      for (const std::string& code : e.checked) event.mutable_checked()->add_codes(code);
      break;
    case WorkerEvent::Kind::kFinding: {
      ToProto(e.finding, event.mutable_finding());
      log(e.finding.severity == train::Severity::kInfo ? LogLevel::kInfo : LogLevel::kWarning, "job ", row.id, " (",
          row.name, ") ", e.finding.code, ": ", e.finding.advice);
      break;
    }
    case WorkerEvent::Kind::kSucceeded: {
      const absl::StatusOr<ModelRow> model = status_of([&] {
        return registry_.register_archive(SpecOf(row).register_model(), row.id, fs::relative(e.path, root).string());
      });
      if (model.ok()) {
        row.model_name = model->name;
        row.model_version = model->version;
        row.reason = e.message;
        event.set_state(v1::SUCCEEDED);
        std::string served = "model " + model->name + " version " + std::to_string(model->version) + " is being served";
        if (!e.quantized_path.empty()) {
          // The int8 version passed the accuracy gate: the next version of the same model.
          const absl::StatusOr<ModelRow> int8 = status_of([&] {
            return registry_.register_archive(SpecOf(row).register_model(), row.id,
                                              fs::relative(e.quantized_path, root).string());
          });
          if (int8.ok()) {
            served += ", its int8 version " + std::to_string(int8->version) + " too";
            // The job's stored reason names the version too: GetJob shows it, not only the stream.
            row.reason = "int8 version " + std::to_string(int8->version) + " registered: " + row.reason;
          } else {
            served += "; registering its int8 version failed: " + failure_reason(int8.status(), {root});
            row.reason += (row.reason.empty() ? "" : "; ") +
                          ("registering the int8 version failed: " + failure_reason(int8.status(), {root}));
          }
        }
        if (SpecOf(row).has_quantize() && !e.message.empty()) served += " (" + e.message + ")";
        event.set_message(served);
      } else {
        row.state = JobState::kFailed;
        row.reason = "registering the model failed: " + failure_reason(model.status(), {root});
        event.set_state(v1::FAILED);
        event.set_message(row.reason);
      }
      break;
    }
    case WorkerEvent::Kind::kFailed:
      row.reason = failure_reason(e.status, {root, options_.datasets_dir});
      event.set_state(v1::FAILED);
      event.set_message(row.reason);
      break;
    case WorkerEvent::Kind::kCancelled:
      row.reason = e.message;
      event.set_state(v1::CANCELLED);
      event.set_message(row.reason);
      break;
    case WorkerEvent::Kind::kInterrupted:
      row.reason = "the server stopped; the job resumes from its checkpoint on the next start";
      event.set_state(v1::INTERRUPTED);
      event.set_message(row.reason);
      break;
  }
  if (transition.effects & kStampFinished) row.finished_ms = unix_millis();
  // A reason quotes what failed (a file's header, a path): stored and sent as UTF-8 text.
  // Bounded too: a reason is in every listing of the job.
  row.reason = echo(to_valid_utf8(row.reason), kMaxReasonBytes);
  event.set_message(echo(to_valid_utf8(event.message()), kMaxReasonBytes));
  if (event.event_case() == v1::MetricEvent::kState) {
    log(row.state == JobState::kFailed ? LogLevel::kWarning : LogLevel::kInfo, "job ", row.id, " (", row.name, ") ",
        job_state_name(row.state), event.message().empty() ? "" : ": ", event.message());
  }
  UpdateMetrics(e, row);
  WriteTensorBoard(e, row);
  // The row first, then the event: a client that reads the terminal event and then asks for
  // the job sees it ended. (A stream reader that sees the ended row before the event follows
  // the live events until the event arrives.)
  if ((transition.effects & kReleaseLease) && fence > 0) {
    // Drained: any replica may resume it now, so the lease is given up with the row.
    JobRow released = row;
    released.owner.clear();
    released.lease_expires_ms = 0;
    if (!retry_while_unavailable("update job " + row.id, wait,
                                 [&] { return store_.update_job_fenced(released, fence); })) {
      throw StoreError("job " + row.id + ": refused by the fencing epoch", StoreError::Kind::kFenced);
    }
  } else {
    write_row(row);
  }
  Record(row, event, wait, fence);
  if (transition.effects & kExpireFinished) expire_finished_jobs();
}

absl::Status Scheduler::delete_job(const std::string& job_id) {
  return status_of([&] {
    ANVIL_SERVICE_CHECK(!job_id.empty(), absl::StatusCode::kInvalidArgument, "job_id: expected a job id");
    const std::optional<JobRow> row = store_.get_job(job_id);
    ANVIL_SERVICE_CHECK(row.has_value(), absl::StatusCode::kNotFound, "job \"", echo(job_id), "\" does not exist");
    ANVIL_SERVICE_CHECK(is_terminal(row->state), absl::StatusCode::kFailedPrecondition, "job ", job_id, " is ",
                        job_state_name(row->state), "; only a finished job is deleted (cancel it first)");
    // The model it registered is served from its archive in the job's folder: that file stays.
    std::string keep;
    if (!row->model_name.empty()) {
      if (std::optional<ModelRow> m = store_.get_model(row->model_name, row->model_version)) keep = m->path;
    }
    // The row first: a crash between the two leaves files without a job (harmless, and swept
    // with the folder by a later delete), never a job whose files are gone.
    store_.delete_job(job_id);
    try {
      remove_job_artifacts(registry_.artifacts(), job_id, keep);
    } catch (const std::exception& e) {
      log(LogLevel::kWarning, "job ", job_id, ": its published checkpoints stay in the artifact store: ", e.what());
    }
    const fs::path dir = fs::path(options_.data_root) / "jobs" / job_id;
    std::error_code ec;
    if (keep.empty()) {
      fs::remove_all(dir, ec);
    } else {
      const fs::path kept = fs::path(options_.data_root) / keep;
      for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
        // The archive and its recorded digest (server/artifacts/file_artifacts.h) stay.
        if (entry.path() != kept && entry.path().string() != kept.string() + ".sha256")
          fs::remove_all(entry.path(), ec);
      }
    }
    log(LogLevel::kInfo, "job ", job_id, " (", row->name, ") deleted");
  });
}

int64_t Scheduler::expire_finished_jobs() {
  const int64_t cutoff =
      options_.job_retention.count() > 0 ? unix_millis() - options_.job_retention.count() : int64_t{0};
  if (options_.max_finished_jobs <= 0 && cutoff <= 0) return 0;
  int64_t deleted = 0;
  const absl::Status listed = status_of([&] {
    for (const std::string& id : store_.expired_jobs(options_.max_finished_jobs, cutoff)) {
      if (delete_job(id).ok()) ++deleted;
    }
  });
  if (!listed.ok()) log(LogLevel::kWarning, "expiring finished jobs: ", listed.message());
  if (deleted > 0) log(LogLevel::kInfo, deleted, " finished job(s) deleted by the retention policy");
  return deleted;
}

}  // namespace anvil::server
