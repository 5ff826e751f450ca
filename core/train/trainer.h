// The training loop the service's workers run, and any C++ user can: epochs over a
// DataLoader, gradient accumulation, clipping, a schedule, validation, early stopping,
// periodic checkpoints, cancellation, a non-finite-loss policy and metric callbacks.
//
// Metrics without stalls: per-step loss and grad norm stay tensors, summed on the model's
// device, and are read back every `metric_interval` steps (one host read per interval, not
// per step). The non-finite check happens at the same reads; the failing step is then found
// among the interval's per-step values, so the error still names the exact step.
//
// Devices: the loop runs where the model's parameters are (Module::to(device) first); each
// batch is moved there as it arrives.
//
// Data-parallel (set_data_parallel): the forward runs through DistributedDataParallel, which
// averages gradients across ranks during backward; micro-batches of an accumulation run under
// no_sync; each metric read gathers every rank's losses, step time, data wait and cancel flag
// in one collective, so all ranks report the global loss, decide non-finite losses and
// cancellation at the same step, and rank 0 sees a straggler; the ranks' parameters are
// checked to agree every `agreement_every` steps and at every checkpoint; only rank 0 writes
// checkpoints; evaluation sums loss, samples and correct answers across ranks (each rank
// evaluates its own shard: distributed/samplers.h).
//
// Thread-safety: one thread runs fit(); `cancel` may be set from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/data/dataloader.h"
#include "core/distributed/ddp.h"
#include "core/nn/module.h"
#include "core/optim/grad_scaler.h"
#include "core/optim/optimizer.h"
#include "core/optim/scheduler.h"
#include "core/train/checkpoint.h"

namespace anvil::train {

struct TrainerOptions {
  int64_t epochs = 10;
  int64_t max_steps = -1;          // optimizer steps; -1: no limit
  int64_t accumulation_steps = 1;  // micro-batches per optimizer step (loss divided by it)
  double clip_grad_norm = 0.0;     // 0: off
  double clip_grad_value = 0.0;    // 0: off
  int64_t metric_interval = 10;    // steps between host reads of loss / grad norm
  // The activation statistics (StepMetrics::activation_shares) are sampled on the last step of
  // each of the first kDenseActivationIntervals metric intervals (where a bad initialisation
  // shows, in short runs too), then of every this many (0: never): a sampled forward costs a
  // reduction per activation layer (bench/doctor_bench.cc).
  static constexpr int64_t kDenseActivationIntervals = 10;
  static constexpr int64_t kLossInputSampleInterval = 5;  // Callbacks::on_loss_input's second look
  int64_t activation_sample_intervals = 10;
  bool scheduler_per_step = false;  // step the scheduler every optimizer step (else per epoch)
  // Early stopping on a validation metric ("val_loss": lower is better, "val_accuracy": higher).
  std::string monitor = "val_loss";
  int64_t patience = -1;  // epochs without improvement before stopping; -1: off
  double min_delta = 0.0;
  bool restore_best_weights = true;
  // Keep the best epoch's weights even without early stopping (patience -1), so a stop
  // requested during the run (request_stop) can restore them.
  bool track_best_weights = false;
  // Checkpoints (atomic, resumable); empty path: none.
  std::string checkpoint_path;
  int64_t checkpoint_every_steps = 0;  // 0: only at epoch ends
  bool checkpoint_every_epoch = true;
  // Points of metric history kept in memory and in each checkpoint (train/metric_history.h):
  // an even sample of the whole run once it has more.
  size_t history_max_points = MetricHistory::kDefaultMaxPoints;
  int checkpoint_keep = 2;  // generations kept (train/checkpoint.h): a corrupt newest falls back
  // Mixed precision (docs/amp.md): the forward and the loss run under autocast in this dtype on
  // the model's device type (kBFloat16 or kFloat16; kFloat32: off); weights, gradients and
  // optimizer state stay float32. Evaluation runs the same way, so validation accuracy is the
  // accuracy of the precision trained in.
  ScalarType precision = kFloat32;
  // Loss scaling (optim::GradScaler). Unset: on with PyTorch's defaults for float16, where
  // small gradients underflow; off for bfloat16 (float32's exponent range), as in PyTorch. Set:
  // these options (their `enabled` decides).
  std::optional<optim::GradScalerOptions> grad_scaler;
  // AMP anomaly detection (autocast::AnomalyGuard) over the forward: the first non-finite
  // bfloat16/float16 output fails the run naming the op, its layer and its input ranges.
  bool amp_anomaly = false;
  // An accelerator's utilisation (StepMetrics::device_utilisation), read at each metric
  // interval's end: the share of the recent past in which the device computed, or nullopt when
  // it cannot be read. The service sets it from NVML for a GPU; unset, a GPU's is unknown. Not
  // used on the CPU, whose share the trainer measures itself.
  std::function<std::optional<double>()> device_utilisation;
  // Batch field names.
  std::string input_key = "input";
  std::string target_key = "target";
};

// One interval of training steps, published every metric_interval steps.
struct StepMetrics {
  int64_t step = 0, epoch = 0;
  double loss = 0;       // mean over the interval
  double grad_norm = 0;  // mean over the interval (before clipping)
  double lr = 0;
  double samples_per_second = 0;
  double data_wait_ratio = 0;  // time blocked on the loader / wall time, this epoch so far
  double step_seconds = 0;     // mean wall time per step over the interval
  // Loss scaling (0 and 0 without a scaler): the scale now, and the optimizer steps skipped so
  // far because a gradient was not finite (the scale backed off each time).
  double loss_scale = 0;
  int64_t skipped_steps = 0;
  // Data-parallel runs: each rank's mean step time and data-wait ratio over the interval
  // (index = rank); empty otherwise.
  std::vector<double> rank_step_seconds, rank_data_wait;
  // Data-parallel runs: each rank's own compute per step over the interval, its wall time less
  // what it spent blocked on the loader, on DDP's collectives (where a fast rank waits for the
  // slowest) and writing checkpoints. Step times are equal across ranks by construction; these
  // are not (the doctor's STRAGGLER_RANK).
  std::vector<double> rank_compute_seconds;
  // The last step's update against the weights, ||w_after - w_before|| / ||w_before|| over all
  // parameters (the learning rate's effect, whatever the optimizer; 0 when not measured): one
  // copy of the parameters per interval, read with the interval's losses.
  double update_ratio = 0;
  // Values read back to the host per step on the training thread over the interval (Tensor::
  // item / to_vector calls in the forward, backward and optimizer step: a model or loss that
  // branches on a device value), the trainer's own metric reads excluded. Each is a wait for
  // the device on a GPU; a healthy loop makes none (docs/doctor.md, HOST_SYNC_PER_STEP).
  double host_reads_per_step = 0;
  // The op-table rows the step ran on the training thread (forward, backward, optimizer; a
  // kernel's inner ops excluded), per step over the interval, and what dispatching one op
  // costs on the model's device (measured when fit starts): ops_per_step times it against
  // step_seconds is the share of the step spent dispatching (the doctor's OVERHEAD_BOUND).
  double ops_per_step = 0;
  double dispatch_seconds_per_op = 0;
  // Each weight's gradient norm (parameters of two or more dimensions: Linear and convolution
  // weights, by name, input side first) on the interval's last step, after unscaling: computed
  // on the device and read with the interval's losses (the doctor's VANISHING_GRADIENTS).
  std::vector<std::pair<std::string, double>> layer_grad_norms;
  // The activation layers' statistics on the interval's last step (core/nn/activation_probe.h),
  // in forward order: for a ReLU the share of its units dead on that batch, for a Sigmoid or
  // Tanh the share of its outputs saturated. Computed on the device and read with the
  // interval's losses (the doctor's DEAD_RELU and SATURATED_ACTIVATION).
  struct ActivationShare {
    std::string layer;  // the module's name in the model ("1", "encoder.act")
    std::string kind;   // "relu", "sigmoid", "tanh"
    double share = 0;
  };
  std::vector<ActivationShare> activation_shares;
  // The share of the interval's wall time the device computed (the doctor's
  // LOW_DEVICE_UTILISATION), or -1 where unknown. On the CPU: the training thread's CPU time
  // over the interval's wall time (it runs or drives every kernel; below 1 it waited: for the
  // loader's workers, a checkpoint write, a lock, or a core another process held). On an
  // accelerator: TrainerOptions::device_utilisation's value (NVML's share of time a kernel ran,
  // on a GPU), -1 when it is unset.
  double device_utilisation = -1;
  // The model device's allocator at the interval's end (-1 where unknown): bytes in tensors,
  // bytes held from the system (in use plus cached), and the most in use at once since the
  // allocator's last reset_peak_memory (a caching device allocator's peak, which the service
  // resets as each job starts; -1 on the CPU, whose allocator is the process's). The doctor's
  // MEMORY_FRAGMENTATION.
  int64_t memory_allocated_bytes = -1, memory_reserved_bytes = -1, memory_peak_bytes = -1;
};

struct EpochMetrics {
  int64_t epoch = 0, step = 0;
  double train_loss = 0;
  std::optional<double> val_loss, val_accuracy;
  bool improved = false;  // the monitored metric improved (early stopping)
};

struct Callbacks {
  std::function<void(const StepMetrics&)> on_step;
  std::function<void(const EpochMetrics&)> on_epoch;
  std::function<void(const std::string& path, int64_t step)> on_checkpoint;
  // What the loss receives on the first step of each fit and on the step that closes its
  // kLossInputSampleInterval-th metric interval: the model's output and the target, detached
  // (the doctor checks that a loss taking logits is not given probabilities, and keeps where
  // the loss started). Its host reads and ops are not counted in the step's.
  std::function<void(const Tensor& output, const Tensor& target)> on_loss_input;
};

struct TrainResult {
  enum class Status { kCompleted, kEarlyStopped, kMaxSteps, kCancelled };
  Status status = Status::kCompleted;
  int64_t steps = 0, epochs = 0;
  std::optional<double> best_metric;
  std::vector<MetricPoint> history;
};

// A loss from the model's output and the batch's target (default: cross-entropy).
using LossFn = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// Raised when a loss becomes NaN or infinite: names the step and the last good checkpoint.
class NonFiniteLossError : public Error {
 public:
  NonFiniteLossError(const std::string& message, int64_t step, double lr = 0) : Error(message), step_(step), lr_(lr) {}
  int64_t step() const { return step_; }
  double lr() const { return lr_; }  // the learning rate at that step

 private:
  int64_t step_;
  double lr_;
};

class Trainer {
 public:
  Trainer(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer, TrainerOptions options,
          LossFn loss = {});
  void set_scheduler(std::shared_ptr<optim::LRScheduler> scheduler) { scheduler_ = std::move(scheduler); }
  void set_callbacks(Callbacks callbacks) { callbacks_ = std::move(callbacks); }
  // Trains data-parallel through `ddp`, whose module must be this trainer's model; the ranks'
  // parameters are checked to agree every `agreement_every` optimizer steps (0: only at
  // checkpoints).
  void set_data_parallel(std::shared_ptr<distributed::DistributedDataParallel> ddp, int64_t agreement_every = 100);

  // Trains until the epochs or max_steps are done, early stopping triggers or `cancel` is set.
  TrainResult fit(data::DataLoader& train, data::DataLoader* validation = nullptr,
                  const std::atomic<bool>* cancel = nullptr);
  // Mean loss and (for class-index targets) accuracy over a loader, in eval mode, no grad.
  std::pair<double, std::optional<double>> evaluate(data::DataLoader& loader);
  // The same with the forward in `precision` (kFloat32, or bfloat16 / float16 under autocast)
  // instead of options.precision: what serving in another precision would score.
  std::pair<double, std::optional<double>> evaluate(data::DataLoader& loader, ScalarType precision);
  // Restores a checkpoint written by this trainer: model, optimizer, scheduler, RNG, step,
  // history and the train loader's position (fit() then continues from there).
  void resume(const std::string& path, data::DataLoader& train);
  // Writes a checkpoint of the current state (no-op without options.checkpoint_path; skipped,
  // keeping the last one, when a weight or optimizer buffer is not finite): a
  // worker stopped for a restart saves its progress with it after fit() returns.
  void checkpoint(data::DataLoader& train);

  int64_t step() const { return step_; }
  // Ends fit() after the current epoch as early stopping does (TrainResult kEarlyStopped, the
  // best epoch's weights restored when tracked): the training doctor's on_overfitting action.
  // Callable from the callbacks (the training thread).
  void request_stop() { stop_requested_ = true; }
  // Multiplies the learning rate by `factor` from now on (the schedule's base rates when one is
  // set): the doctor's on_lr_too_high action.
  void scale_learning_rate(double factor);
  // The loss scaler (disabled unless options.precision / grad_scaler turn it on).
  const optim::GradScaler& grad_scaler() const { return scaler_; }
  // Optimizer steps skipped by the scaler (a gradient was not finite), checkpointed with it.
  int64_t skipped_steps() const { return skipped_steps_base_ + scaler_.skipped_steps(); }  // a host read
  // An even sample of the run's metrics, at most options.history_max_points points.
  const std::vector<MetricPoint>& history() const { return history_.points(); }

 private:
  // Where training runs: the device of the model's parameters (batches are moved there;
  // the CPU for a model without parameters).
  Device ModelDevice() const;

  std::string last_checkpoint_ = "(none)";
  bool is_rank_zero() const { return !ddp_ || ddp_->group().rank() == 0; }

  std::shared_ptr<distributed::DistributedDataParallel> ddp_;
  int64_t agreement_every_ = 100;

  std::shared_ptr<nn::Module> model_;
  std::shared_ptr<optim::Optimizer> optimizer_;
  std::shared_ptr<optim::LRScheduler> scheduler_;
  TrainerOptions options_;
  LossFn loss_;
  Callbacks callbacks_;
  int64_t step_ = 0;
  MetricHistory history_;
  optim::GradScaler scaler_;
  int64_t skipped_steps_base_ = 0;  // skipped before a resume (the scaler counts since it was made)
  // Early stopping's state, checkpointed with the rest, so a resumed run stops at the epoch
  // the uninterrupted one does and restores the same best weights. fit() starts it afresh
  // unless resume() just restored it.
  std::optional<double> best_;
  int64_t bad_epochs_ = 0;
  nn::StateDict best_state_;
  bool early_stopping_resumed_ = false;
  bool stop_requested_ = false;
};

}  // namespace anvil::train
