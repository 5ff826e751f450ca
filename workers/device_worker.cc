// A device worker: a thread that owns one device, waits for a job, runs its plan with the
// Trainer on that device and reports through the sink. On a GPU the thread queues all its
// work on a stream of its own (DeviceStreamScope). Stop requests only set flags the Trainer
// polls between steps, so they are safe from any thread.
#include <absl/strings/str_cat.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <thread>

#include "core/amp/autocast.h"
#include "core/backend/registry.h"
#include "core/models/archive.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/mutex.h"
#include "workers/job_plan.h"
#include "workers/status.h"
#include "workers/worker.h"

namespace anvil::workers {
namespace {

namespace fs = std::filesystem;

class DeviceWorker final : public Worker {
 public:
  DeviceWorker(Device device, EventSink sink)
      : device_(device), name_(device.str()), sink_(std::move(sink)), thread_([this] { Loop(); }) {}
  ~DeviceWorker() override { shutdown(); }

  const std::string& device() const override { return name_; }
  bool idle() const override { return idle_.load(); }

  void run(RunJob job) override {
    MutexLock lock(&mu_);
    ANVIL_CHECK(idle_.load() && !pending_, name_, " worker: a job is already running");
    idle_ = false;
    // The job counts as running from here: a stop() before the thread picks it up applies.
    running_id_ = job.job_id;
    cancel_ = false;
    interrupt_ = false;
    pending_ = std::move(job);
    cv_.notify_all();
  }

  void stop(const std::string& job_id, bool interrupt) override {
    MutexLock lock(&mu_);
    if (job_id != running_id_) return;
    if (!cancel_.load()) interrupt_ = interrupt;  // a user's cancel is not turned into an interrupt
    cancel_ = true;
  }

  void shutdown() override {
    {
      MutexLock lock(&mu_);
      if (quit_) return;
      quit_ = true;
      interrupt_ = true;
      cancel_ = true;
      cv_.notify_all();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Loop() {
    std::optional<DeviceStreamScope> stream;
    try {
      stream.emplace(device_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s worker: no stream of its own (%s); using the default stream\n", name_.c_str(), e.what());
    }
    while (true) {
      RunJob job;
      {
        UniqueMutexLock lock(&mu_);
        while (!quit_ && !pending_.has_value()) cv_.wait(lock.native());
        if (quit_ && !pending_) return;
        job = std::move(*pending_);
        pending_.reset();
        if (quit_) {
          cancel_ = true;
          interrupt_ = true;
        }
      }
      const WorkerEvent end = Run(job);
      {
        // Idle before the terminal event goes out, so the scheduler can hand this worker its
        // next job while handling that event.
        MutexLock lock(&mu_);
        running_id_.clear();
        idle_ = true;
      }
      Emit(end);
    }
  }

  // The sink must not take the worker down: a failure there is reported on stderr and the
  // worker goes on (the scheduler recovers the job's state from the store on restart).
  void Emit(const WorkerEvent& e) {
    try {
      sink_(e);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "%s worker: handling an event of job %s failed: %s\n", name_.c_str(), e.job_id.c_str(),
                   ex.what());
    }
  }

  // Resumes from the newest checkpoint generation that verifies; each one that does not is
  // named in the returned note. When generations exist and none verifies, the job fails:
  // a silent restart from step 0 would throw the training away unseen.
  static absl::StatusOr<std::string> Resume(train::Trainer& trainer, data::DataLoader& loader,
                                            const std::string& checkpoint, int keep) {
    const std::vector<std::string> candidates = train::existing_checkpoints(checkpoint, keep);
    std::string failures;
    for (const std::string& c : candidates) {
      try {
        trainer.resume(c, loader);
        if (failures.empty()) return "";
        const std::string note = "resumed from an older checkpoint, " + fs::path(c).filename().string() + " at step " +
                                 std::to_string(trainer.step()) + ": " + failures;
        engine_log(LogSeverity::kWarning, note);
        return note;
      } catch (const Error& e) {
        failures +=
            (failures.empty() ? "" : "; ") + fs::path(c).filename().string() + " is unusable (" + e.what() + ")";
      }
    }
    if (candidates.empty()) return "";
    return absl::DataLossError(absl::StrCat("no checkpoint of this job verifies (", failures,
                                            "); not restarting from step 0. Submit it again to train from scratch"));
  }

  // Runs the job; returns its terminal event (not yet emitted).
  WorkerEvent Run(const RunJob& job) {
    WorkerEvent base;
    base.job_id = job.job_id;
    try {
      fs::create_directories(job.job_dir);
      const std::string checkpoint = (fs::path(job.job_dir) / "checkpoint.safetensors").string();
      JobPlan plan = make_job_plan(job.spec, {job.data_root, job.datasets_dir, checkpoint, device_, job.memory_budget});
      train::Trainer trainer(plan.model.module, plan.optimizer, plan.options, plan.loss);
      if (plan.scheduler) trainer.set_scheduler(plan.scheduler);
      data::DataLoader train_loader(plan.train_set, plan.train_loader);
      data::DataLoader val_loader(plan.val_set, plan.val_loader);
      std::string resumed_note;
      if (job.resume) {
        absl::StatusOr<std::string> resumed = Resume(trainer, train_loader, checkpoint, plan.options.checkpoint_keep);
        if (!resumed.ok()) return Failed(base, std::move(resumed).status());
        resumed_note = *std::move(resumed);
      }

      WorkerEvent started = base;
      started.kind = WorkerEvent::Kind::kStarted;
      started.message = name_;
      started.step = trainer.step();
      started.total_steps = plan.total_steps;
      started.detail = resumed_note;
      Emit(started);

      trainer.set_callbacks({
          .on_step =
              [&](const train::StepMetrics& m) {
                WorkerEvent e = base;
                e.kind = WorkerEvent::Kind::kStep;
                e.step = m.step;
                e.epoch = m.epoch;
                e.total_steps = plan.total_steps;
                e.step_metrics = m;
                Emit(e);
              },
          .on_epoch =
              [&](const train::EpochMetrics& m) {
                WorkerEvent e = base;
                e.kind = WorkerEvent::Kind::kEpoch;
                e.step = m.step;
                e.epoch = m.epoch;
                e.total_steps = plan.total_steps;
                e.epoch_metrics = m;
                Emit(e);
              },
          .on_checkpoint =
              [&](const std::string& path, int64_t step) {
                WorkerEvent e = base;
                e.kind = WorkerEvent::Kind::kCheckpoint;
                e.step = step;
                e.path = path;
                Emit(e);
              },
      });
      const train::TrainResult r = trainer.fit(train_loader, &val_loader, &cancel_);
      WorkerEvent end = base;
      end.step = r.steps;
      end.epoch = r.epochs;
      if (r.status == train::TrainResult::Status::kCancelled) {
        if (interrupt_.load()) {
          trainer.checkpoint(train_loader);  // resume exactly here on the next start
          end.kind = WorkerEvent::Kind::kInterrupted;
        } else {
          end.kind = WorkerEvent::Kind::kCancelled;
          end.message = "cancelled at step " + std::to_string(r.steps);
        }
        return end;
      }
      // Success: the trained model becomes an archive the registry can serve right away.
      const std::string archive = (fs::path(job.job_dir) / "model.anvil").string();
      plan.model.module->eval();
      models::ModelInfo info{job.spec.register_model(), 0, job.job_id, plan.labels, unix_millis()};
      info.precision = job.spec.serving_precision().empty() ? "fp32" : job.spec.serving_precision();
      // Mixed precision: the validation accuracy in float32 and in each precision the job
      // trained or will serve in, so GetModel shows what the lower one costs.
      if (job.spec.precision() != "fp32" || info.precision != "fp32") {
        for (const std::string& p : {std::string("fp32"), job.spec.precision(), info.precision}) {
          if (p.empty() || info.accuracy.count(p)) continue;
          const std::optional<double> accuracy = trainer.evaluate(val_loader, autocast::precision_dtype(p)).second;
          if (accuracy) info.accuracy[p] = *accuracy;
        }
      }
      models::save_model_archive(archive, *plan.model.module, plan.model.spec, info);
      end.kind = WorkerEvent::Kind::kSucceeded;
      end.path = archive;
      end.input_shape = plan.model.input_shape;
      end.output_shape = plan.model.output_shape;
      end.input_dtype = plan.model.input_dtype;
      end.labels = plan.labels;
      end.parameters = plan.model.module->num_parameters();
      end.spec_json = plan.model.spec;
      end.message = r.status == train::TrainResult::Status::kEarlyStopped ? "early stopped" : "";
      return end;
    } catch (const std::bad_alloc&) {
      return Failed(base, absl::ResourceExhaustedError("out of memory (try a smaller batch_size or model)"));
    } catch (...) {
      // The engine refusing the job's content (a model that does not fit its data, a file
      // that leads outside the data root) is INVALID_ARGUMENT; see engine_exception_status.
      return Failed(base, engine_exception_status());
    }
  }

  static WorkerEvent Failed(const WorkerEvent& base, absl::Status status) {
    WorkerEvent failed = base;
    failed.kind = WorkerEvent::Kind::kFailed;
    failed.status = std::move(status);
    return failed;
  }

  const Device device_;
  const std::string name_;
  EventSink sink_;
  Mutex mu_;
  std::condition_variable cv_;
  std::optional<RunJob> pending_ ABSL_GUARDED_BY(mu_);
  std::string running_id_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> idle_{true};
  std::atomic<bool> cancel_{false}, interrupt_{false};
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Worker> make_device_worker(Device device, EventSink sink) {
  return std::make_unique<DeviceWorker>(device, std::move(sink));
}

std::unique_ptr<Worker> make_cpu_worker(EventSink sink) { return make_device_worker(kCPU, std::move(sink)); }

}  // namespace anvil::workers
