// Steps shared by device workers and data-parallel ranks: see job_steps.h.
#include "workers/job_steps.h"

#include <absl/strings/str_cat.h>

#include <algorithm>
#include <filesystem>

#include "core/amp/autocast.h"
#include "core/data/collate.h"
#include "core/models/archive.h"
#include "core/util/clock.h"
#include "core/util/cpu_features.h"
#include "core/util/log.h"
#include "workers/job_quantize.h"

namespace anvil::workers {

namespace fs = std::filesystem;

absl::StatusOr<std::string> resume_from_checkpoints(train::Trainer& trainer, data::DataLoader& loader,
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
      failures += (failures.empty() ? "" : "; ") + fs::path(c).filename().string() + " is unusable (" + e.what() + ")";
    }
  }
  if (candidates.empty()) return "";
  return absl::DataLossError(absl::StrCat("no checkpoint of this job verifies (", failures,
                                          "); not restarting from step 0. Submit it again to train from scratch"));
}

WorkerEvent failed_event(const WorkerEvent& base, absl::Status status) {
  WorkerEvent failed = base;
  failed.kind = WorkerEvent::Kind::kFailed;
  failed.status = std::move(status);
  return failed;
}

WorkerEvent stopped_event(const WorkerEvent& base, train::Trainer& trainer, data::DataLoader& train_loader,
                          const train::TrainResult& r, bool interrupt) {
  WorkerEvent end = base;
  end.step = r.steps;
  end.epoch = r.epochs;
  if (interrupt) {
    trainer.checkpoint(train_loader);  // resume exactly here on the next start
    end.kind = WorkerEvent::Kind::kInterrupted;
  } else {
    end.kind = WorkerEvent::Kind::kCancelled;
    end.message = "cancelled at step " + std::to_string(r.steps);
  }
  return end;
}

train::DoctorOptions doctor_options(const v1::JobSpec& spec) {
  train::DoctorOptions options;
  // Validated at submit (server::validate_job_spec); a value refused here keeps its default.
  for (const auto& [name, value] : spec.doctor().thresholds()) {
    if (const std::string why = train::set_doctor_option(options, name, value); !why.empty()) {
      engine_log(LogSeverity::kWarning, "doctor.thresholds." + name + " ignored: " + why);
    }
  }
  return options;
}

train::DoctorContext doctor_context(const v1::JobSpec& spec, Device device) {
  return train::DoctorContext{.loader_workers = spec.loader_workers(),
                              .batch_size = spec.batch_size(),
                              .loss = spec.loss(),
                              .precision = spec.precision().empty() ? "fp32" : spec.precision(),
                              .device = device.type == DeviceType::CUDA ? "cuda" : "cpu"};
}

std::shared_ptr<train::Doctor> make_doctor(const v1::JobSpec& spec, Device device) {
  return std::make_shared<train::Doctor>(doctor_context(spec, device), doctor_options(spec));
}

namespace {

// Which actions were taken (each once per run).
struct Taken {
  bool stopped = false, halved = false, added_workers = false;
};

// Carries out what `actions` says for the findings that fired now; the actions taken join
// them as findings of their own. Each action once per run.
void Act(std::vector<train::Finding>& findings, const DoctorActions& actions, Taken* done, train::Doctor* doctor) {
  if (actions.trainer == nullptr) return;
  std::vector<train::Finding> taken;
  for (const train::Finding& f : findings) {
    if (f.code == "OVERFITTING" && actions.stop_on_overfitting && !done->stopped) {
      done->stopped = true;
      actions.trainer->request_stop();
      taken.push_back({"DOCTOR_STOPPED_TRAINING", train::Severity::kInfo, f.last_step, f.last_step, f.evidence,
                       "doctor.on_overfitting is \"stop\": training ends at this epoch and the best epoch's "
                       "weights are restored"});
    }
    if (f.code == "LR_TOO_HIGH" && actions.halve_lr_when_too_high && !done->halved) {
      done->halved = true;
      double before = 0;
      for (const auto& [name, value] : f.evidence)
        if (name == "lr") before = value;
      actions.trainer->scale_learning_rate(0.5);
      taken.push_back({"DOCTOR_HALVED_LR",
                       train::Severity::kInfo,
                       f.last_step,
                       f.last_step,
                       {{"lr_before", before}, {"lr_after", before * 0.5}},
                       "doctor.on_lr_too_high is \"halve\": the learning rate is halved from here on (once)"});
    }
    // A warning only: an info-level wait is worth knowing, not worth more threads.
    if (f.code == "DATA_STALL" && f.severity >= train::Severity::kWarning && actions.add_workers_on_data_stall &&
        actions.loader != nullptr && !done->added_workers) {
      done->added_workers = true;
      const int before = actions.loader->options().num_workers;
      const int limit = std::min(kMaxAddedWorkers, available_cpu_threads());
      const int after = std::min(limit, std::max(2, 2 * before));
      if (after > before) {
        actions.loader->set_num_workers(after);
        if (doctor) doctor->set_loader_workers(after);
      }
      taken.push_back({"DOCTOR_ADDED_WORKERS",
                       train::Severity::kInfo,
                       f.last_step,
                       f.last_step,
                       {{"loader_workers_before", static_cast<double>(before)},
                        {"loader_workers_after", static_cast<double>(std::max(before, after))}},
                       after > before
                           ? absl::StrCat("doctor.on_data_stall is \"add_workers\": the loader runs ", after,
                                          " workers from the next epoch, up from ", before, " (once)")
                           : absl::StrCat("doctor.on_data_stall is \"add_workers\", but the loader already runs ",
                                          before, " workers, the most allowed (", limit, ": the CPUs this process ",
                                          "may use, at most ", kMaxAddedWorkers,
                                          "): make each sample cheaper (cache decoded samples, move transforms "
                                          "out of the per-sample path)")});
    }
  }
  for (train::Finding& t : taken) findings.push_back(std::move(t));
}

}  // namespace

void emit_findings(const WorkerEvent& base, std::vector<train::Finding> findings,
                   const std::function<void(const WorkerEvent&)>& emit) {
  for (train::Finding& f : findings) {
    WorkerEvent e = base;
    e.kind = WorkerEvent::Kind::kFinding;
    e.step = f.last_step;
    e.finding = std::move(f);
    emit(e);
  }
}

void emit_checked(const WorkerEvent& base, train::Doctor& doctor, const std::function<void(const WorkerEvent&)>& emit) {
  std::vector<std::string> codes = doctor.take_newly_checked();
  if (codes.empty()) return;
  WorkerEvent e = base;
  e.kind = WorkerEvent::Kind::kChecked;
  e.checked = std::move(codes);
  emit(e);
}

void check_first_batch(train::Doctor& doctor, const JobPlan& plan, const WorkerEvent& base,
                       const std::function<void(const WorkerEvent&)>& emit) {
  if (plan.train_set == nullptr || plan.train_set->size() == 0) return;
  // The first samples, collated as a batch: read from the dataset, not the loader, so the
  // training run's order and position are untouched.
  std::vector<data::Example> samples;
  const int64_t n = std::min<int64_t>(plan.train_set->size(), std::max<int64_t>(plan.train_loader.batch_size, 1));
  for (int64_t i = 0; i < n; ++i) samples.push_back(plan.train_set->get(i));
  const data::Example batch = data::default_collate(samples);
  emit_findings(base, doctor.check_first_batch(batch[plan.options.input_key], batch[plan.options.target_key]), emit);
  emit_checked(base, doctor, emit);
}

DoctorActions doctor_actions(const v1::JobSpec& spec, train::Trainer& trainer, data::DataLoader* train_loader) {
  return {.trainer = &trainer,
          .stop_on_overfitting = spec.doctor().on_overfitting() == "stop",
          .halve_lr_when_too_high = spec.doctor().on_lr_too_high() == "halve",
          .loader = train_loader,
          .add_workers_on_data_stall = spec.doctor().on_data_stall() == "add_workers"};
}

train::Callbacks event_callbacks(const WorkerEvent& base, int64_t total_steps,
                                 std::function<void(const WorkerEvent&)> emit, std::shared_ptr<train::Doctor> doctor,
                                 DoctorActions actions) {
  // Which actions were taken (each once), shared by the step and epoch callbacks.
  auto taken = std::make_shared<Taken>();
  auto diagnose = [=](std::vector<train::Finding> findings) {
    Act(findings, actions, taken.get(), doctor.get());
    emit_findings(base, std::move(findings), emit);
    if (doctor) emit_checked(base, *doctor, emit);
  };
  return {
      .on_step =
          [=](const train::StepMetrics& m) {
            WorkerEvent e = base;
            e.kind = WorkerEvent::Kind::kStep;
            e.step = m.step;
            e.epoch = m.epoch;
            e.total_steps = total_steps;
            e.step_metrics = m;
            emit(e);
            if (doctor) diagnose(doctor->on_step(m));
          },
      .on_epoch =
          [=](const train::EpochMetrics& m) {
            WorkerEvent e = base;
            e.kind = WorkerEvent::Kind::kEpoch;
            e.step = m.step;
            e.epoch = m.epoch;
            e.total_steps = total_steps;
            e.epoch_metrics = m;
            emit(e);
            if (doctor) diagnose(doctor->on_epoch(m));
          },
      .on_checkpoint =
          [=](const std::string& path, int64_t step) {
            WorkerEvent e = base;
            e.kind = WorkerEvent::Kind::kCheckpoint;
            e.step = step;
            e.path = path;
            emit(e);
          },
      .on_loss_input =
          [=](const Tensor& output, const Tensor& target) {
            if (doctor) diagnose(doctor->check_loss_input(output, target));
          },
  };
}

WorkerEvent succeeded_event(const WorkerEvent& base, const RunJob& job, JobPlan& plan, train::Trainer& trainer,
                            data::DataLoader& val_loader, const train::TrainResult& r, bool write_archive) {
  WorkerEvent end = base;
  end.step = r.steps;
  end.epoch = r.epochs;
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
  // int8 quantization (data-parallel: rank 0 alone, after the collectives above).
  QuantizeOutcome quantized;
  if (write_archive && job.spec.has_quantize()) {
    quantized = quantize_trained_model(job.spec.quantize(), plan, info,
                                       (fs::path(job.job_dir) / "model.int8.anvil").string(), job.spec.seed());
    // The float version records what int8 scored too, so GetModel shows both on either.
    if (quantized.float_accuracy && !info.accuracy.count("fp32")) info.accuracy["fp32"] = *quantized.float_accuracy;
    if (quantized.int8_accuracy) info.accuracy["int8"] = *quantized.int8_accuracy;
  }
  if (write_archive) models::save_model_archive(archive, *plan.model.module, plan.model.spec, info);
  end.kind = WorkerEvent::Kind::kSucceeded;
  end.path = archive;
  end.input_shape = plan.model.input_shape;
  end.output_shape = plan.model.output_shape;
  end.input_dtype = plan.model.input_dtype;
  end.labels = plan.labels;
  end.parameters = plan.model.module->num_parameters();
  end.spec_json = plan.model.spec;
  end.message = r.status == train::TrainResult::Status::kEarlyStopped ? "early stopped" : "";
  end.quantized_path = quantized.archive;
  if (!quantized.summary.empty()) end.message += (end.message.empty() ? "" : "; ") + quantized.summary;
  return end;
}

}  // namespace anvil::workers
