// The training doctor: the pitfalls guide's diagnosis order (its section 6.1: the loader
// starving the device, tiny batches, CPU preprocessing, host syncs; section 7's curves: grad-norm
// spikes, train/val divergence; section 5.2: AMP skip storms) as rules evaluated over a job's
// metrics while they stream, each firing a Finding with its evidence and the guide's advice.
//
// The doctor reads only what the trainer already reports (StepMetrics every metric interval,
// EpochMetrics every epoch) and, once, the first batch's statistics: it adds no host sync and no
// work to the step. Every threshold is a DoctorOptions field; docs/doctor.md names each default
// and where it comes from.
//
// Thread-safety: none; one Doctor per job, fed from the thread that reports its metrics.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor/tensor.h"
#include "core/train/trainer.h"

namespace anvil::train {

enum class Severity { kInfo = 0, kWarning = 1, kCritical = 2 };
const char* severity_name(Severity s);  // "info", "warning", "critical"

struct Finding {
  std::string code;  // "DATA_STALL", ...
  Severity severity = Severity::kInfo;
  int64_t first_step = 0, last_step = 0;  // the steps the evidence covers
  // The numbers that fired it, by name ("data_wait_ratio": 0.31), in the order they matter.
  std::vector<std::pair<std::string, double>> evidence;
  std::string advice;  // what to do, in the guide's order
};

struct DoctorOptions {
  // DATA_STALL: the loader's share of the step after warm-up (SageMaker Debugger's
  // LowGPUUtilization/IOBottleneck defaults: 20 % as a problem, 5 % as worth knowing).
  double data_stall_warning = 0.20, data_stall_info = 0.05;
  // ...and only when the wait per step (share x step time) exceeds this: under 1 ms a step, a
  // thousand-step epoch loses under a second, not worth more loader processes (a tiny model
  // fed without workers waits half its 0.5 ms step for batches, and that is no problem).
  double data_stall_min_wait_seconds = 1e-3;
  int64_t warmup_steps = 20;  // steps before throughput rules apply (first batches, caches, JIT)
  // EXPLODING_GRADIENTS: the grad-norm EMA (smoothing alpha) growing tenfold within a window
  // of intervals (SageMaker's ExplodingTensor / AUTOTRAINER's "gradient explode"). Healthy runs
  // double theirs early on (digits, AdamW at its default rate: 2.4x after warm-up); an
  // explosion is an order of magnitude.
  double grad_ema_alpha = 0.3, grad_growth = 10.0;
  int64_t grad_window = 5;
  // LR_TOO_HIGH: early divergence, the interval loss above the first step's loss (what the
  // model started from, seen by check_loss_input; else the first interval's) times this factor
  // within the first `divergence_intervals` intervals (AUTOTRAINER's "loss increase").
  double divergence_factor = 1.5;
  int64_t divergence_intervals = 20;
  // LOSS_PLATEAU: less than `plateau_min_improvement` relative improvement of the interval loss
  // over `plateau_window` intervals (SageMaker's LossNotDecreasing: 10 % over its window is its
  // default; 1 % here over a longer window, with the metric interval's averaging).
  double plateau_min_improvement = 0.01;
  int64_t plateau_window = 20;
  // OSCILLATION: the interval loss changes direction in more than this share of a window, its
  // median swing above `oscillation_amplitude` of its mean, and no net progress over the window
  // (the second half's mean not below the first half's by `oscillation_min_progress`)
  // (DeepDiagnosis's "oscillating loss"). Interval means of a healthy small-batch run also turn
  // at most intervals (i.i.d. noise turns at two in three), but by less, and they descend.
  double oscillation_share = 0.8, oscillation_amplitude = 0.25, oscillation_min_progress = 0.05;
  int64_t oscillation_window = 10;
  // OVERFITTING: the validation loss's best is this many evaluations old, the validation loss
  // is now above it by more than `overfit_margin` (relative), and the training loss has kept
  // falling since (SageMaker's Overfit rule, with early stopping's patience of 3 evaluations);
  // or the gap between them widened at each of this many evaluations in a row, the validation
  // loss improved by less than `overfit_val_progress` over them and is `overfit_gap_ratio`
  // times the training loss (a model memorising a small training set while its validation
  // loss only creeps down).
  int64_t overfit_evaluations = 3;
  double overfit_margin = 0.05, overfit_gap_ratio = 3.0, overfit_val_progress = 0.1;
  // LR_TOO_LOW / LR_TOO_HIGH: the update-to-weight ratio (StepMetrics::update_ratio) outside
  // [update_ratio_low, update_ratio_high] for `update_band_intervals` intervals in a row after
  // warm-up. CS231n's rule of thumb puts a healthy ratio near 1e-3; a hundred times below it
  // the weights barely move, a hundred times above it each step rewrites them.
  double update_ratio_low = 1e-5, update_ratio_high = 1e-1;
  int64_t update_band_intervals = 5;
  // AMP_SKIP_STORM: skipped optimizer steps above this share of steps (per 1,000 steps), or the
  // loss scale at or under its floor (torch.cuda.amp's growth/backoff makes a scale of 1 a
  // sign that every step overflows).
  double amp_skip_share = 0.05, amp_scale_floor = 1.0;
  // INPUT_NOT_NORMALIZED: inputs whose absolute mean or standard deviation exceeds this
  // (unit scale expected), or integral values in [0, 255].
  double input_scale_limit = 10.0;
  // LOGITS_PASSED_AS_PROBABILITIES: the fewest values of a loss input that are judged.
  int64_t loss_input_min_values = 16;
  // HOST_SYNC_PER_STEP: at least one host read per step (StepMetrics::host_reads_per_step) for
  // this many intervals in a row after warm-up (the pitfalls guide's fourth cause of a slow
  // run, as the PyTorch profiler's recommendations flag a synchronisation in every step).
  int64_t host_sync_intervals = 3;
  // VANISHING_GRADIENTS: a weight's gradient norm below this fraction of the last layer's
  // (StepMetrics::layer_grad_norms) for this many intervals in a row after warm-up. SageMaker
  // Debugger's VanishingGradient rule flags absolute gradients under 1e-7; relative to the last
  // layer, as DeepDiagnosis compares layers, the threshold does not depend on the loss's scale.
  double vanishing_ratio = 1e-4;
  int64_t vanishing_intervals = 3;
  // DEAD_RELU: more than this share of a ReLU layer's units zero for every sample of the
  // interval's sampled batch (StepMetrics::activation_shares), for `activation_intervals`
  // sampled intervals in a row after warm-up, intervals without samples not counting (the
  // issue's "> 50 % of a layer's units inactive over a window"; DeepDiagnosis and AUTOTRAINER
  // flag dying ReLU the same way).
  double dead_relu_share = 0.5;
  // SATURATED_ACTIVATION: more than this share of a Sigmoid's or Tanh's outputs in its flat
  // tails (sigmoid below 0.01 or above 0.99, |tanh| above 0.99), likewise (DeepDiagnosis's
  // saturated-activation symptom; half of the outputs, as DEAD_RELU's half of the units).
  double saturated_share = 0.5;
  int64_t activation_intervals = 3;
  // OVERHEAD_BOUND: two of its signals on the medians of the last `overhead_intervals`
  // intervals after warm-up: small steps (under `overhead_small_step_seconds`) and most of the
  // step spent dispatching ops (StepMetrics::ops_per_step times dispatch_seconds_per_op above
  // `overhead_dispatch_share` of step_seconds), and on an accelerator a device utilisation
  // whose median is below `utilisation_p95` (a GPU idling between short kernels; on the CPU the
  // training thread that dispatches is the one computing, so its share says nothing of
  // overhead). The pitfalls guide's second cause of a slow run (tiny
  // batches dominated by per-step overhead); the PyTorch profiler's recommendations flag steps
  // of many short kernels the same way.
  double overhead_small_step_seconds = 0.005, overhead_dispatch_share = 0.5;
  int64_t overhead_intervals = 5;
  // LOW_DEVICE_UTILISATION: the 95th percentile of the device's utilisation (StepMetrics::
  // device_utilisation) over the last `utilisation_window` intervals after warm-up below this
  // (SageMaker Debugger's LowGPUUtilization: threshold_p95 70 %, over a window). Also
  // OVERHEAD_BOUND's third signal on an accelerator, on the window's median.
  double utilisation_p95 = 0.70;
  int64_t utilisation_window = 10;
  // MEMORY_FRAGMENTATION, two ways:
  // - a caching device allocator holding more than `fragmentation_share` of its memory beyond
  //   the most the run ever had in use at once ((reserved - peak) / reserved), and more than
  //   `fragmentation_min_bytes` of it, for `fragmentation_intervals` intervals in a row after
  //   warm-up: freed blocks that later requests cannot reuse (PyTorch's "reserved but
  //   unallocated" memory, which its out-of-memory message blames on fragmentation);
  // - memory in use at the interval's end rising at each of `memory_growth_intervals`
  //   intervals in a row after warm-up, by more than `memory_growth_share` of where the run
  //   of rises began and more than `memory_growth_min_bytes`: something keeps each step's
  //   tensors alive (the "monotone growth").
  double fragmentation_share = 0.5;
  int64_t fragmentation_min_bytes = int64_t{512} << 20;
  int64_t fragmentation_intervals = 5;
  int64_t memory_growth_intervals = 10;
  double memory_growth_share = 0.10;
  int64_t memory_growth_min_bytes = int64_t{4} << 20;
  // STRAGGLER_RANK (data-parallel): a rank's own compute per step (StepMetrics::
  // rank_compute_seconds) above `straggler_factor` times the other ranks' median, and above
  // it by more than `straggler_min_seconds` (timer noise on tiny steps), for
  // `straggler_intervals` intervals in a row after warm-up. NVIDIA's straggler detection
  // (nvidia-resiliency-ext) scores each rank's section time against the best rank's (0.5:
  // twice as slow) and leaves the threshold to the user; 1.5x the others' median (a score near
  // 0.67) is the default here, reported with the numbers so that it can be tuned.
  double straggler_factor = 1.5, straggler_min_seconds = 0.001;
  int64_t straggler_intervals = 3;
};

// Sets the DoctorOptions field called `name` (the member's own name: "data_stall_warning",
// "utilisation_window", ...) to `value`; the service's JobSpec.doctor.thresholds. Returns "" or
// why not, naming what was expected: an unknown name (with the known ones), a share outside
// [0, 1], a negative or non-finite threshold, a count that is not a whole number in its range
// (windows from 1 to kMaxDoctorWindow: the doctor keeps its longest window's intervals).
std::string set_doctor_option(DoctorOptions& options, const std::string& name, double value);
// Every name set_doctor_option takes, in DoctorOptions' order.
const std::vector<std::string>& doctor_option_names();
inline constexpr int64_t kMaxDoctorWindow = 1000;

// What the doctor knows of the job beside its metrics: the advice names these.
struct DoctorContext {
  int64_t loader_workers = 0;
  int64_t batch_size = 0;
  std::string loss;  // "cross_entropy", "mse", "bce_with_logits"
  std::string precision = "fp32";
  std::string device = "cpu";  // "cpu", "cuda": a host read is a wait for the device on a GPU
};

class Doctor {
 public:
  explicit Doctor(DoctorContext context, DoctorOptions options = {});

  // The first batch's input and target (once, before training: the seed's input pitfalls).
  std::vector<Finding> check_first_batch(const Tensor& input, const Tensor& target);
  // What the loss received (the model's output; Callbacks::on_loss_input: the first step, then
  // the fifth interval's last): the first call keeps the starting loss (LR_TOO_HIGH's
  // reference); a loss that takes logits given values that all lie in [0, 1] at both looks got
  // probabilities, the output of a sigmoid it will apply again. One look is not enough: a
  // fresh model's logits are alike across samples and may all start inside [0, 1], but
  // training spreads them, while a sigmoid's output never leaves it.
  std::vector<Finding> check_loss_input(const Tensor& output, const Tensor& target);
  // Each metric interval and each epoch; returns what fired now (each code once, or again
  // when its severity rises).
  std::vector<Finding> on_step(const StepMetrics& m);
  std::vector<Finding> on_epoch(const EpochMetrics& m);
  // The trainer stopped the run at `step` because the loss or gradient norm was not finite
  // (NonFiniteLossError, whose message is `what`): EXPLODING_GRADIENTS, critical.
  // `lr` is the rate at that step (the last interval's when not given, 0 before any).
  std::vector<Finding> on_non_finite(int64_t step, const std::string& what, std::optional<double> lr = std::nullopt);

  // The run resumed from a checkpoint: its first intervals are not where the model started, so
  // the early-divergence check (LR_TOO_HIGH against the starting loss) stays off; the other
  // rules begin their windows afresh.
  void set_resumed() { resumed_ = true; }

  // The loader's worker count changed (the on_data_stall action): named in later advice.
  void set_loader_workers(int64_t workers) { context_.loader_workers = workers; }

  // Every rule the doctor evaluates, for "checked and healthy" reports.
  static const std::vector<std::string>& rules();
  // Whether `code` applies to a job at all: LOGITS_PASSED_AS_PROBABILITIES to the loss
  // bce_with_logits only, LABELS_LOOK_MULTILABEL to cross_entropy, AMP_SKIP_STORM to fp16 (loss
  // scaling), STRAGGLER_RANK to a data-parallel job; every other rule to every job.
  static bool applies(const std::string& code, const DoctorContext& context, bool data_parallel);
  // What `code` needs before it can decide, with these thresholds: "10 metric intervals after
  // warm-up (step 20), with the device's utilisation measured". "" for an unknown code.
  static std::string needs(const std::string& code, const DoctorOptions& options);
  // The rules that have had what they need to decide at least once in this run, fired or not
  // (a rule checked and not fired is healthy), in rules() order; and those checked since the
  // last call of take_newly_checked, which the service records as events.
  std::vector<std::string> checked() const;
  std::vector<std::string> take_newly_checked();
  // The findings so far, most severe first, then by first step.
  std::vector<Finding> findings() const;

 private:
  // Keeps `f` unless its code fired before at the same or a higher severity.
  void Report(Finding f, std::vector<Finding>* out);
  // `code` had what it needs to decide (now, or at its `need`th evaluation).
  void Checked(const char* code);
  void Evaluated(const char* code, int64_t need);
  // LOW_DEVICE_UTILISATION and MEMORY_FRAGMENTATION over an interval's metrics.
  void CheckUtilisation(const StepMetrics& m, std::vector<Finding>* out);
  void CheckMemory(const StepMetrics& m, std::vector<Finding>* out);

  DoctorContext context_;
  DoctorOptions options_;
  bool resumed_ = false;
  std::map<std::string, Finding> fired_;
  // Transparent comparisons: a rule already checked is found by its literal name, with no
  // string built on each interval.
  std::set<std::string, std::less<>> checked_;
  std::vector<std::string> newly_checked_;
  std::map<std::string, int64_t, std::less<>> evaluations_;  // Evaluated's counts, per rule
  // The recent intervals (as many as the longest window needs: memory stays bounded whatever the
  // job's length), the first one, and how many were seen.
  std::deque<StepMetrics> steps_;
  std::optional<StepMetrics> first_;
  int64_t intervals_ = 0;
  std::optional<double> grad_ema_, first_grad_ema_;
  std::deque<double> grad_ema_history_;
  std::vector<EpochMetrics> epochs_;
  std::optional<EpochMetrics> best_epoch_;  // the lowest validation loss so far
  int64_t evaluations_since_best_ = 0;
  int64_t gap_widening_run_ = 0;                            // evaluations in a row whose val - train gap grew
  std::optional<double> initial_loss_;                      // the first step's loss (check_loss_input)
  int64_t loss_input_looks_ = 0, loss_inputs_in_unit_ = 0;  // check_loss_input's looks, and those in [0, 1]
  int64_t ratio_low_run_ = 0, ratio_high_run_ = 0;          // intervals in a row outside the update band
  int64_t host_sync_run_ = 0;                               // intervals in a row with a host read per step
  int64_t vanishing_run_ = 0;                               // intervals in a row with a vanishing layer
  int64_t dead_relu_run_ = 0, saturated_run_ = 0;           // intervals in a row over the activation shares
  int64_t straggler_run_ = 0, straggler_rank_ = -1;         // intervals in a row the same rank straggled
  int64_t straggler_first_step_ = 0;
  // OVERHEAD_BOUND's window: the last intervals' step time, dispatch share and device
  // utilisation (-1: unknown).
  struct OverheadSample {
    int64_t step;
    double step_seconds, dispatch_share, utilisation;
  };
  std::deque<OverheadSample> overhead_window_;
  // LOW_DEVICE_UTILISATION's window: the last intervals' (step, utilisation, data wait).
  struct UtilisationSample {
    int64_t step;
    double utilisation, data_wait;
  };
  std::deque<UtilisationSample> utilisation_window_;
  int64_t fragmentation_run_ = 0, fragmentation_from_step_ = 0;  // intervals in a row over the share, from
  // MEMORY_FRAGMENTATION's growth: the bytes in use at the previous interval's end, and where
  // (step, bytes) the current run of rises began.
  int64_t last_allocated_ = -1, growth_run_ = 0, growth_from_step_ = 0, growth_from_bytes_ = 0;
};

}  // namespace anvil::train
