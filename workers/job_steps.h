// The parts of running a job that a device worker and a data-parallel rank share: resuming
// from the newest checkpoint generation that verifies, and turning a finished training run
// into its terminal event (the model archive, the accuracy in each precision).
#pragma once

#include <absl/status/statusor.h>

#include <memory>
#include <string>

#include "core/data/dataloader.h"
#include "core/train/doctor.h"
#include "core/train/trainer.h"
#include "workers/job_plan.h"
#include "workers/worker.h"

namespace anvil::workers {

// Resumes from the newest checkpoint generation that verifies; each one that does not is
// named in the returned note. When generations exist and none verifies, the job fails:
// a silent restart from step 0 would throw the training away unseen.
absl::StatusOr<std::string> resume_from_checkpoints(train::Trainer& trainer, data::DataLoader& loader,
                                                    const std::string& checkpoint, int keep);

// The kFailed event of `base`'s job, with why.
WorkerEvent failed_event(const WorkerEvent& base, absl::Status status);

// The terminal event of a run fit() returned early from (TrainResult::Status::kCancelled): with
// `interrupt` a checkpoint at the current step (the job resumes there; for data-parallel ranks
// a collective, rank 0 writing) and kInterrupted, else kCancelled.
WorkerEvent stopped_event(const WorkerEvent& base, train::Trainer& trainer, data::DataLoader& train_loader,
                          const train::TrainResult& r, bool interrupt);

// The training doctor of a job (core/train/doctor.h), with what it knows of the spec: its
// thresholds (JobSpec.doctor.thresholds over the defaults) and its context.
train::DoctorOptions doctor_options(const v1::JobSpec& spec);
train::DoctorContext doctor_context(const v1::JobSpec& spec, Device device);
std::shared_ptr<train::Doctor> make_doctor(const v1::JobSpec& spec, Device device);

// The doctor's first-batch checks on the first samples of the training set, each finding sent
// to `emit` as a kFinding event of `base`'s job (and the rules checked as a kChecked one).
void check_first_batch(train::Doctor& doctor, const JobPlan& plan, const WorkerEvent& base,
                       const std::function<void(const WorkerEvent&)>& emit);

// Sends each finding as a kFinding event of `base`'s job.
void emit_findings(const WorkerEvent& base, std::vector<train::Finding> findings,
                   const std::function<void(const WorkerEvent&)>& emit);
// Sends the doctor's rules checked since the last call, if any, as one kChecked event.
void emit_checked(const WorkerEvent& base, train::Doctor& doctor, const std::function<void(const WorkerEvent&)>& emit);

// The doctor's optional actions (JobSpec.doctor) on a trainer: each carried out once, the first
// time its finding fires, and reported as a finding of its own (DOCTOR_STOPPED_TRAINING,
// DOCTOR_HALVED_LR).
struct DoctorActions {
  train::Trainer* trainer = nullptr;
  bool stop_on_overfitting = false;
  bool halve_lr_when_too_high = false;
  // on_data_stall "add_workers": the training loader, whose workers are doubled from the next
  // epoch when DATA_STALL warns (at least 2, at most kMaxAddedWorkers and the CPUs available).
  data::DataLoader* loader = nullptr;
  bool add_workers_on_data_stall = false;
};
inline constexpr int kMaxAddedWorkers = 8;
DoctorActions doctor_actions(const v1::JobSpec& spec, train::Trainer& trainer, data::DataLoader* train_loader);

// Trainer callbacks that send step, epoch and checkpoint events of `base`'s job to `emit`; with
// a doctor, it reads each interval's and epoch's metrics and its findings are sent too (and
// acted on as `actions` says).
train::Callbacks event_callbacks(const WorkerEvent& base, int64_t total_steps,
                                 std::function<void(const WorkerEvent&)> emit,
                                 std::shared_ptr<train::Doctor> doctor = nullptr, DoctorActions actions = {});

// The kSucceeded event of a run that completed (or stopped early): the trained model written
// as job_dir/model.anvil (when `write_archive`: data-parallel ranks other than 0 only take
// part in the evaluations, which are collectives there), with the validation accuracy in each
// precision the job trained or serves in.
WorkerEvent succeeded_event(const WorkerEvent& base, const RunJob& job, JobPlan& plan, train::Trainer& trainer,
                            data::DataLoader& val_loader, const train::TrainResult& r, bool write_archive);

}  // namespace anvil::workers
