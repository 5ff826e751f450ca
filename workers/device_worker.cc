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
#include "core/backend/device_info.h"
#include "core/backend/registry.h"
#include "core/models/archive.h"
#include "core/tensor/random.h"
#include "core/util/clock.h"
#include "core/util/log.h"
#include "core/util/mutex.h"
#include "workers/job_plan.h"
#include "workers/job_steps.h"
#include "workers/rank_group.h"
#include "workers/status.h"
#include "workers/worker.h"

namespace anvil::workers {
namespace {

namespace fs = std::filesystem;

class DeviceWorker final : public Worker {
 public:
  DeviceWorker(Device device, EventSink sink, UtilisationSource utilisation)
      : device_(device),
        name_(device.str()),
        sink_(std::move(sink)),
        utilisation_(std::move(utilisation)),
        thread_([this] { Loop(); }) {}
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
    if (ranks_ != nullptr) ranks_->stop(interrupt_.load());
  }

  void shutdown() override {
    {
      MutexLock lock(&mu_);
      if (quit_) return;
      quit_ = true;
      interrupt_ = true;
      cancel_ = true;
      if (ranks_ != nullptr) ranks_->stop(true);
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

  // Runs the job; returns its terminal event (not yet emitted).
  WorkerEvent Run(const RunJob& placed) {
    WorkerEvent base;
    base.job_id = placed.job_id;
    RunJob prepared;
    if (placed.prepare) {
      prepared = placed;
      absl::StatusOr<RunJob::Prepared> ready = placed.prepare();
      if (!ready.ok()) return failed_event(base, std::move(ready).status());
      prepared.resume = ready->resume;
      prepared.resume_note = ready->note;
    }
    const RunJob& job = placed.prepare ? prepared : placed;
    try {
      if (job.spec.world_size() > 1) return RunRanks(job);
      // The job's own random stream (seeded by its plan, saved in its checkpoints): nothing
      // another thread draws (a model loaded for serving, a dry run) moves it.
      Generator job_generator;
      const ScopedDefaultGenerator own_stream(job_generator);
      fs::create_directories(job.job_dir);
      const std::string checkpoint = (fs::path(job.job_dir) / "checkpoint.safetensors").string();
      JobPlan plan = make_job_plan(job.spec, {job.data_root, job.datasets_dir, checkpoint, device_, job.memory_budget});
      if (!device_.is_cpu()) plan.options.device_utilisation = utilisation_;
      // A GPU's cache starts empty for each job and its peak from what is in use now: what an
      // earlier job left cached is neither this job's to hold nor counted in its peak (the
      // doctor's MEMORY_FRAGMENTATION compares the two). A serving worker on the same GPU keeps
      // its blocks in use; only unused cached memory is returned.
      if (device_.is_cuda()) {
        backend_for(device_).allocator(device_)->empty_cache();
        reset_peak_memory(device_);
      }
      train::Trainer trainer(plan.model.module, plan.optimizer, plan.options, plan.loss);
      if (plan.scheduler) trainer.set_scheduler(plan.scheduler);
      data::DataLoader train_loader(plan.train_set, plan.train_loader);
      data::DataLoader val_loader(plan.val_set, plan.val_loader);
      std::string resumed_note;
      if (job.resume) {
        absl::StatusOr<std::string> resumed =
            resume_from_checkpoints(trainer, train_loader, checkpoint, plan.options.checkpoint_keep);
        if (!resumed.ok()) return failed_event(base, std::move(resumed).status());
        resumed_note = *std::move(resumed);
      }

      WorkerEvent started = base;
      started.kind = WorkerEvent::Kind::kStarted;
      started.message = name_;
      started.step = trainer.step();
      started.total_steps = plan.total_steps;
      started.detail = job.resume_note.empty() || resumed_note.empty() ? job.resume_note + resumed_note
                                                                       : job.resume_note + "; " + resumed_note;
      Emit(started);

      const std::function<void(const WorkerEvent&)> emit = [this](const WorkerEvent& e) { Emit(e); };
      std::shared_ptr<train::Doctor> doctor = make_doctor(job.spec, device_);
      if (job.resume) {
        doctor->set_resumed();
      } else {
        check_first_batch(*doctor, plan, base, emit);
      }
      trainer.set_callbacks(
          event_callbacks(base, plan.total_steps, emit, doctor, doctor_actions(job.spec, trainer, &train_loader)));
      train::TrainResult r;
      try {
        r = trainer.fit(train_loader, &val_loader, &cancel_);
      } catch (const train::NonFiniteLossError& e) {
        emit_findings(base, doctor->on_non_finite(e.step(), e.what(), e.lr()), emit);  // before the failure it explains
        throw;
      }
      if (r.status == train::TrainResult::Status::kCancelled) {
        return stopped_event(base, trainer, train_loader, r, interrupt_.load());
      }
      // Success: the trained model becomes an archive the registry can serve right away.
      return succeeded_event(base, job, plan, trainer, val_loader, r, /*write_archive=*/true);
    } catch (const std::bad_alloc&) {
      return failed_event(base, absl::ResourceExhaustedError("out of memory (try a smaller batch_size or model)"));
    } catch (...) {
      // The engine refusing the job's content (a model that does not fit its data, a file
      // that leads outside the data root) is INVALID_ARGUMENT; see engine_exception_status.
      return failed_event(base, engine_exception_status());
    }
  }

  // A data-parallel job: rank processes this worker supervises (rank_group.h); the worker
  // thread waits for them, so the CPU stays this job's.
  WorkerEvent RunRanks(const RunJob& job) {
    RankGroupRun group(job, [this](const WorkerEvent& e) { Emit(e); });
    {
      MutexLock lock(&mu_);
      ranks_ = &group;
      if (cancel_.load()) group.stop(interrupt_.load());
    }
    auto forget = [this] {
      MutexLock lock(&mu_);
      ranks_ = nullptr;
    };
    WorkerEvent end;
    try {
      end = group.run();
    } catch (...) {
      forget();  // stop() must not reach a group that is gone
      throw;
    }
    forget();
    return end;
  }

  const Device device_;
  const std::string name_;
  EventSink sink_;
  const UtilisationSource utilisation_;  // may be null
  Mutex mu_;
  std::condition_variable cv_;
  std::optional<RunJob> pending_ ABSL_GUARDED_BY(mu_);
  std::string running_id_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> idle_{true};
  std::atomic<bool> cancel_{false}, interrupt_{false};
  bool quit_ ABSL_GUARDED_BY(mu_) = false;
  RankGroupRun* ranks_ ABSL_GUARDED_BY(mu_) = nullptr;  // the running data-parallel job's ranks
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Worker> make_device_worker(Device device, EventSink sink, UtilisationSource utilisation) {
  return std::make_unique<DeviceWorker>(device, std::move(sink), std::move(utilisation));
}

}  // namespace anvil::workers
