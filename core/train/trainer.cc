// The training loop: see trainer.h.
#include "core/train/trainer.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <ctime>
#include <map>
#include <sstream>
#include <thread>

#include "core/amp/autocast.h"
#include "core/autograd/grad_mode.h"
#include "core/backend/registry.h"
#include "core/nn/activation_probe.h"
#include "core/nn/functional.h"
#include "core/ops/functions.h"
#include "core/ops/op_count.h"
#include "core/tensor/host_reads.h"
#include "core/tensor/random.h"
#include "core/util/error.h"
#include "core/util/fault_point.h"
#include "core/util/log.h"

namespace anvil::train {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// What dispatching one op costs on `device` when the op's work is nothing: in-place adds on a
// one-element tensor, the median of five rounds of 64 (StepMetrics::dispatch_seconds_per_op).
// On a GPU this is the launch; the kernels run behind it.
double MeasureDispatchSeconds(Device device) {
  NoGradGuard no_grad;
  Tensor x = zeros({1}, TensorOptions(kFloat32).with_device(device));
  for (int i = 0; i < 16; ++i) x.add_(1.0);
  std::vector<double> rounds;
  for (int r = 0; r < 5; ++r) {
    const auto start = Clock::now();
    for (int i = 0; i < 64; ++i) x.add_(1.0);
    rounds.push_back(Seconds(Clock::now() - start) / 64);
  }
  std::sort(rounds.begin(), rounds.end());
  return rounds[rounds.size() / 2];
}

// The calling thread's CPU time in seconds (StepMetrics::device_utilisation on the CPU: the
// training thread's share of the interval on a core).
double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

optim::GradScalerOptions ScalerOptions(const TrainerOptions& o) {
  if (o.grad_scaler) return *o.grad_scaler;
  optim::GradScalerOptions so;
  so.enabled = o.precision == kFloat16;
  return so;
}

// The checkpoint's `extra` entry for the scaler: the scale's float64 bits, the growth tracker
// and the skipped steps (bits, so a resumed run continues with the identical scale).
constexpr const char* kScalerKey = "amp.grad_scaler";

nn::StateDict CloneState(const nn::Module& m) {
  nn::StateDict sd = m.state_dict();
  for (auto& [k, t] : sd.tensors) t = t.clone();
  return sd;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<nn::Module> model, std::shared_ptr<optim::Optimizer> optimizer, TrainerOptions options,
                 LossFn loss)
    : model_(std::move(model)),
      optimizer_(std::move(optimizer)),
      options_(std::move(options)),
      loss_(std::move(loss)),
      history_(options_.history_max_points),
      scaler_(ScalerOptions(options_)) {
  ANVIL_CHECK(model_ != nullptr && optimizer_ != nullptr, "Trainer: the model and the optimizer are required");
  const TrainerOptions& o = options_;
  ANVIL_CHECK(o.epochs >= 1, "Trainer: expected epochs >= 1, got ", o.epochs);
  ANVIL_CHECK(o.accumulation_steps >= 1, "Trainer: expected accumulation_steps >= 1, got ", o.accumulation_steps);
  ANVIL_CHECK(o.metric_interval >= 1, "Trainer: expected metric_interval >= 1, got ", o.metric_interval);
  ANVIL_CHECK(o.monitor == "val_loss" || o.monitor == "val_accuracy" || o.monitor == "train_loss",
              "Trainer: monitor must be val_loss, val_accuracy or train_loss, got '", o.monitor, "'");
  ANVIL_CHECK(o.precision == kFloat32 || o.precision == kBFloat16 || o.precision == kFloat16,
              "Trainer: precision must be float32, bfloat16 or float16, got ", o.precision);
  if (!loss_) loss_ = [](const Tensor& out, const Tensor& target) { return nn::F::cross_entropy(out, target); };
}

void Trainer::set_data_parallel(std::shared_ptr<distributed::DistributedDataParallel> ddp, int64_t agreement_every) {
  ANVIL_CHECK(ddp != nullptr && ddp->module() == model_,
              "Trainer::set_data_parallel: the DistributedDataParallel must wrap this trainer's model");
  ANVIL_CHECK(agreement_every >= 0, "Trainer: expected agreement_every >= 0, got ", agreement_every);
  ddp_ = std::move(ddp);
  agreement_every_ = agreement_every;
}

Device Trainer::ModelDevice() const {
  for (const Tensor& p : model_->parameters()) return p.device();
  return kCPU;
}

std::pair<double, std::optional<double>> Trainer::evaluate(data::DataLoader& loader) {
  return evaluate(loader, options_.precision);
}

std::pair<double, std::optional<double>> Trainer::evaluate(data::DataLoader& loader, ScalarType precision) {
  const bool was_training = model_->is_training();
  model_->eval();
  NoGradGuard no_grad;
  double loss_sum = 0;
  int64_t n = 0, correct = 0;
  bool classification = true;
  const Device device = ModelDevice();
  for (auto& b : loader) {
    const Tensor x = b[options_.input_key].to(device, /*non_blocking=*/true);  // fresh batch, never written
    const Tensor y = b[options_.target_key].to(device, /*non_blocking=*/true);
    Tensor out, loss;
    {
      std::optional<AutocastGuard> amp;  // a float32 trainer leaves a caller's own region alone
      if (precision != kFloat32) amp.emplace(device.type, precision);
      out = model_->forward(x);
      loss = loss_(out, y);
    }
    const int64_t batch = x.size(0);
    loss_sum += loss.item<double>() * static_cast<double>(batch);
    n += batch;
    classification = classification && out.dim() == 2 && y.dtype() == kInt64 && y.dim() == 1;
    if (classification) correct += (out.argmax(1) == y).sum().item<int64_t>();
  }
  model_->train(was_training);
  if (ddp_) {
    // Each rank evaluated its own shard: the sums over ranks are the single-process sums.
    Tensor sums = tensor(std::vector<double>{loss_sum, static_cast<double>(n), static_cast<double>(correct),
                                             classification ? 0.0 : 1.0});
    ddp_->group().all_reduce({sums}, distributed::ReduceOp::kSum)->wait();
    const std::vector<double> v = sums.to_vector<double>();
    loss_sum = v[0];
    n = static_cast<int64_t>(v[1]);
    correct = static_cast<int64_t>(v[2]);
    classification = v[3] == 0.0;
  }
  ANVIL_CHECK(n > 0, "Trainer::evaluate: the loader produced no samples");
  std::optional<double> accuracy;
  if (classification) accuracy = static_cast<double>(correct) / static_cast<double>(n);
  return {loss_sum / static_cast<double>(n), accuracy};
}

void Trainer::scale_learning_rate(double factor) {
  ANVIL_CHECK(std::isfinite(factor) && factor > 0,
              "Trainer::scale_learning_rate: expected a positive finite factor, got ", factor);
  if (scheduler_) {
    scheduler_->scale_base_lrs(factor);
    return;
  }
  for (auto& g : optimizer_->param_groups()) g.options["lr"] *= factor;
}

void Trainer::checkpoint(data::DataLoader& train) {
  if (options_.checkpoint_path.empty()) return;
  if (ddp_) {
    // Never save a state the ranks do not share; every rank resumes from rank 0's file.
    distributed::check_rank_agreement(*model_, ddp_->group(), step_);
    if (!is_rank_zero()) return;
  }
  // A diverged state is not worth resuming: the last all-finite checkpoint stays the newest.
  if (!all_finite(*model_, *optimizer_)) {
    engine_log(LogSeverity::kWarning, detail::StrCat("not checkpointing step ", step_,
                                                     ": a weight or optimizer buffer is not finite; the last "
                                                     "checkpoint stays ",
                                                     last_checkpoint_));
    return;
  }
  TrainingState s{step_,
                  train.position(),
                  train.options().seed,
                  default_generator().get_state(),
                  scheduler_ ? scheduler_->last_step() : -1,
                  history_.points(),
                  {},
                  history_.stride(),
                  history_.pending(),
                  best_,
                  bad_epochs_,
                  best_state_};
  if (scaler_.is_enabled()) {
    const auto st = scaler_.state_dict();
    s.extra[kScalerKey] = detail::StrCat(std::bit_cast<uint64_t>(st.at("scale")), " ",
                                         static_cast<int64_t>(st.at("_growth_tracker")), " ", skipped_steps());
  }
  rotate_checkpoints(options_.checkpoint_path, options_.checkpoint_keep);
  fault_point("checkpoint:rotated");
  save_checkpoint(options_.checkpoint_path, *model_, *optimizer_, s);
  last_checkpoint_ = options_.checkpoint_path + " (step " + std::to_string(step_) + ")";
  if (callbacks_.on_checkpoint) callbacks_.on_checkpoint(options_.checkpoint_path, step_);
}

void Trainer::resume(const std::string& path, data::DataLoader& train) {
  const TrainingState s = load_checkpoint(path, *model_, *optimizer_);
  ANVIL_CHECK(s.loader_seed == train.options().seed, path, ": the checkpoint's loader seed ", s.loader_seed,
              " differs from this loader's ", train.options().seed, "; the resumed batches would not match");
  train.set_position(s.loader);
  if (scheduler_ && s.scheduler_step >= 0) scheduler_->set_step(s.scheduler_step);
  step_ = s.step;
  history_.restore(s.history, s.history_stride, s.history_pending);
  best_ = s.best_metric;
  bad_epochs_ = s.bad_epochs;
  best_state_ = s.best_weights;
  early_stopping_resumed_ = true;
  const auto amp = s.extra.find(kScalerKey);
  ANVIL_CHECK(scaler_.is_enabled() || amp == s.extra.end(), path,
              ": the checkpoint was written with loss scaling (float16 training); this trainer has none");
  if (scaler_.is_enabled() && amp != s.extra.end()) {
    std::istringstream in(amp->second);
    uint64_t scale_bits = 0;
    int64_t tracker = 0, skipped = 0;
    ANVIL_CHECK(static_cast<bool>(in >> scale_bits >> tracker >> skipped), path, ": unreadable loss-scaler state '",
                amp->second, "'");
    auto st = scaler_.state_dict();
    st["scale"] = std::bit_cast<double>(scale_bits);
    st["_growth_tracker"] = static_cast<double>(tracker);
    scaler_.load_state_dict(st);
    skipped_steps_base_ = skipped - scaler_.skipped_steps();
  }
  last_checkpoint_ = path + " (step " + std::to_string(step_) + ")";
}

TrainResult Trainer::fit(data::DataLoader& train, data::DataLoader* validation, const std::atomic<bool>* cancel) {
  const TrainerOptions& o = options_;
  TrainResult result;
  stop_requested_ = false;
  const std::vector<Tensor> params = model_->parameters();
  // The weights whose gradient norms each interval reports (StepMetrics::layer_grad_norms).
  std::vector<std::string> weight_names;
  std::vector<Tensor> weights;
  for (const auto& [name, p] : model_->named_parameters()) {
    if (p.dim() < 2) continue;
    weight_names.push_back(name);
    weights.push_back(p);
  }
  // The activation layers' names, for the statistics an interval's last forward records.
  std::map<const nn::Module*, std::string> module_names;
  for (const auto& [name, m] : model_->named_modules()) module_names[m] = name.empty() ? "(model)" : name;
  const bool lower_is_better = o.monitor != "val_accuracy";
  if (!early_stopping_resumed_) {
    best_.reset();
    bad_epochs_ = 0;
    best_state_ = {};
  }
  early_stopping_resumed_ = false;
  std::optional<double>& best = best_;
  nn::StateDict& best_state = best_state_;
  int64_t& bad_epochs = bad_epochs_;

  // Per-step values of the current metric interval, kept as tensors until the next read.
  std::vector<Tensor> losses, norms;
  Tensor update_ratio;       // the interval's last step's, on the device (StepMetrics::update_ratio)
  Tensor layer_norms;        // likewise, each weight's gradient norm (StepMetrics::layer_grad_norms)
  Tensor activation_values;  // likewise, the activation layers' shares (StepMetrics::activation_shares)
  std::vector<std::pair<std::string, std::string>> activation_layers;  // their (name, kind)
  std::vector<int64_t> interval_steps;
  int64_t interval_samples = 0;
  int64_t interval_host_reads = 0;  // in the steps' own work (StepMetrics::host_reads_per_step)
  int64_t interval_ops = 0;         // likewise, the ops the steps dispatched (StepMetrics::ops_per_step)
  // Data-parallel: what the interval's wall time spent on other than this rank's own compute
  // (StepMetrics::rank_compute_seconds): blocked on the loader, on DDP's collectives (counted
  // from this snapshot), writing checkpoints (rank 0 alone writes them).
  double interval_data_wait = 0, interval_checkpoint_seconds = 0;
  double collective_wait_at_start = ddp_ ? ddp_->collective_wait_seconds() : 0.0;
  const double dispatch_seconds = MeasureDispatchSeconds(ModelDevice());
  auto interval_start = Clock::now();
  double interval_cpu_start = ThreadCpuSeconds();
  // The model device's allocator (StepMetrics::memory_*). On a GPU its peak is the most in use
  // since the allocator's last reset_peak_memory (the service resets it, with the cache, as each
  // job starts); the CPU allocator is the process's, and no peak of it is reported.
  const Device model_device = ModelDevice();
  Allocator* device_allocator = backend_for(model_device).allocator(model_device);
  // Data-parallel: a cancel request takes effect at the step every rank agreed on (at a metric
  // read), so no rank leaves a collective the others are in.
  bool stop_agreed = false;
  std::vector<double> rank_step_seconds, rank_data_wait, rank_compute_seconds;
  const std::string slow_rank_point = ddp_ ? detail::StrCat("distributed:slow:rank", ddp_->group().rank()) : "";
  // The next interval's wall time and waits count from now.
  auto restart_interval_clock = [&] {
    interval_data_wait = 0;
    interval_checkpoint_seconds = 0;
    if (ddp_) collective_wait_at_start = ddp_->collective_wait_seconds();
    interval_start = Clock::now();
    interval_cpu_start = ThreadCpuSeconds();
  };
  auto flush = [&]() {
    if (losses.empty()) return;
    // The one host read: the losses, the gradient norms and the update ratio together.
    const size_t steps_in = losses.size();
    std::vector<Tensor> parts{stack(losses).to(kFloat64), stack(norms).to(kFloat64)};
    if (update_ratio.defined()) parts.push_back(update_ratio.to(kFloat64).reshape({1}));
    if (layer_norms.defined()) parts.push_back(layer_norms);
    if (activation_values.defined()) parts.push_back(activation_values);
    const std::vector<double> all = cat(parts, 0).to_vector<double>();
    std::vector<double> lv(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(steps_in));
    const std::vector<double> nv(all.begin() + static_cast<std::ptrdiff_t>(steps_in),
                                 all.begin() + static_cast<std::ptrdiff_t>(2 * steps_in));
    const double ratio = update_ratio.defined() ? all[2 * steps_in] : 0.0;
    std::vector<std::pair<std::string, double>> layer_grad_norms;
    if (layer_norms.defined()) {
      const size_t at = 2 * steps_in + (update_ratio.defined() ? 1 : 0);
      for (size_t i = 0; i < weight_names.size(); ++i) layer_grad_norms.emplace_back(weight_names[i], all[at + i]);
    }
    std::vector<StepMetrics::ActivationShare> activation_shares;
    if (activation_values.defined()) {
      const size_t at = all.size() - activation_layers.size();
      for (size_t i = 0; i < activation_layers.size(); ++i)
        activation_shares.push_back({activation_layers[i].first, activation_layers[i].second, all[at + i]});
    }
    const double secs = Seconds(Clock::now() - interval_start);
    // A rank blocked in DDP's collectives counts as busy: the all-reduce is the step's work
    // (on a GPU, NCCL's kernels count in NVML's share too).
    const double collective_secs = ddp_ ? ddp_->collective_wait_seconds() - collective_wait_at_start : 0.0;
    const double busy_secs = ThreadCpuSeconds() - interval_cpu_start + collective_secs;
    if (ddp_) {
      // One gather per interval: every rank's losses, cancel flag, step time and data wait.
      distributed::ProcessGroup& group = ddp_->group();
      const size_t k = lv.size();
      std::vector<double> row(lv);
      row.push_back(cancel != nullptr && cancel->load() ? 1.0 : 0.0);
      row.push_back(secs / static_cast<double>(k));
      row.push_back(train.stats().wait_ratio());
      const double not_compute = interval_data_wait + interval_checkpoint_seconds + collective_secs;
      row.push_back(std::max(0.0, secs - not_compute) / static_cast<double>(k));
      std::vector<Tensor> rows;
      for (int r = 0; r < group.size(); ++r)
        rows.push_back(empty({static_cast<int64_t>(row.size())}, TensorOptions(kFloat64)));
      group.all_gather(rows, tensor(row))->wait();
      std::fill(lv.begin(), lv.end(), 0.0);
      rank_step_seconds.assign(group.size(), 0.0);
      rank_data_wait.assign(group.size(), 0.0);
      rank_compute_seconds.assign(group.size(), 0.0);
      for (int r = 0; r < group.size(); ++r) {
        const std::vector<double> v = rows[r].to_vector<double>();
        for (size_t i = 0; i < k; ++i) lv[i] += v[i] / static_cast<double>(group.size());
        stop_agreed = stop_agreed || v[k] != 0.0;
        rank_step_seconds[r] = v[k + 1];
        rank_data_wait[r] = v[k + 2];
        rank_compute_seconds[r] = v[k + 3];
      }
    }
    for (size_t i = 0; i < lv.size(); ++i) {
      // With loss scaling a non-finite gradient is expected now and then: the scaler skipped that
      // step and backed off (counted in skipped_steps), so only the loss is checked.
      const bool norm_bad = !std::isfinite(nv[i]) && !scaler_.is_enabled();
      if (!std::isfinite(lv[i]) || norm_bad) {
        const bool loss_bad = !std::isfinite(lv[i]);
        throw NonFiniteLossError((loss_bad ? "training loss became " + std::to_string(lv[i])
                                           : "gradient norm became " + std::to_string(nv[i])) +
                                     " at step " + std::to_string(interval_steps[i]) + " (epoch " +
                                     std::to_string(train.epoch()) + "); last good checkpoint: " + last_checkpoint_,
                                 interval_steps[i], optimizer_->lr());
      }
    }
    StepMetrics m;
    m.step = step_;
    m.epoch = train.epoch();
    size_t finite_norms = 0;
    for (size_t i = 0; i < lv.size(); ++i) {
      m.loss += lv[i] / static_cast<double>(lv.size());
      if (std::isfinite(nv[i])) {  // skipped steps' norms are left out of the mean
        m.grad_norm += nv[i];
        ++finite_norms;
      }
    }
    m.grad_norm = finite_norms > 0 ? m.grad_norm / static_cast<double>(finite_norms) : 0.0;
    if (scaler_.is_enabled()) {
      m.loss_scale = scaler_.get_scale();
      m.skipped_steps = skipped_steps();
      history_.record(step_, "loss_scale", m.loss_scale);
    }
    m.lr = optimizer_->lr();
    m.samples_per_second = secs > 0 ? static_cast<double>(interval_samples) / secs : 0.0;
    m.step_seconds = secs / static_cast<double>(lv.size());
    m.data_wait_ratio = train.stats().wait_ratio();
    m.rank_step_seconds = rank_step_seconds;
    m.rank_data_wait = rank_data_wait;
    m.rank_compute_seconds = rank_compute_seconds;
    m.update_ratio = std::isfinite(ratio) ? ratio : 0.0;
    m.host_reads_per_step = static_cast<double>(interval_host_reads) / static_cast<double>(steps_in);
    m.ops_per_step = static_cast<double>(interval_ops) / static_cast<double>(steps_in);
    m.dispatch_seconds_per_op = dispatch_seconds;
    m.layer_grad_norms = std::move(layer_grad_norms);
    m.activation_shares = std::move(activation_shares);
    if (model_device.is_cpu()) {
      // A checkpoint written inside the interval is not the device idling: its wait on the
      // disk (fsync) is left out of the wall time, as it is of each rank's compute.
      const double wall = secs - interval_checkpoint_seconds;
      m.device_utilisation = wall > 0 ? std::clamp(busy_secs / wall, 0.0, 1.0) : -1.0;
    } else if (o.device_utilisation) {
      const std::optional<double> u = o.device_utilisation();
      if (u && std::isfinite(*u)) m.device_utilisation = std::clamp(*u, 0.0, 1.0);
    }
    const AllocatorStats memory = device_allocator->stats();
    m.memory_allocated_bytes = memory.allocated_bytes;
    m.memory_reserved_bytes = memory.allocated_bytes + memory.cached_bytes;
    if (!model_device.is_cpu()) m.memory_peak_bytes = memory.peak_allocated_bytes;
    history_.record(step_, "train_loss", m.loss);
    history_.record(step_, "grad_norm", m.grad_norm);
    history_.record(step_, "lr", m.lr);
    if (callbacks_.on_step) callbacks_.on_step(m);
    losses.clear();
    norms.clear();
    update_ratio = Tensor();
    layer_norms = Tensor();
    activation_values = Tensor();
    activation_layers.clear();
    interval_steps.clear();
    interval_samples = 0;
    interval_host_reads = 0;
    interval_ops = 0;
    restart_interval_clock();
  };

  model_->train();
  const int64_t fit_first_step = step_ + 1;  // on_loss_input: this step, and the fifth interval's last
  int64_t callback_reads = 0, callback_ops = 0;
  while (train.epoch() < o.epochs) {
    // Accumulators live on the model's device: adding a step's loss never waits for the GPU.
    const Device device = ModelDevice();
    const TensorOptions on_device = TensorOptions(kFloat64).with_device(device);
    Tensor epoch_loss = zeros({}, on_device);  // read at the epoch's end only
    int64_t epoch_steps = 0;
    Tensor step_loss = zeros({}, on_device);
    int64_t micro = 0;
    optimizer_->zero_grad();
    auto optimizer_step = [&]() {
      const int64_t reads_before = host_value_reads_on_this_thread();
      const int64_t ops_before = ops_dispatched_on_this_thread();
      scaler_.unscale_(*optimizer_);  // a no-op without loss scaling; the norm and clipping see true gradients
      Tensor norm =
          o.clip_grad_norm > 0 ? optim::clip_grad_norm_deferred_(params, o.clip_grad_norm) : optim::grad_norm(params);
      if (o.clip_grad_value > 0) optim::clip_grad_value_(params, o.clip_grad_value);
      // The step that closes a metric interval measures its update against the weights.
      std::vector<Tensor> before;
      if ((step_ + 1) % o.metric_interval == 0) {
        NoGradGuard no_grad;
        for (const Tensor& p : params) before.push_back(p.detach().clone());
        if (!weights.empty()) {
          std::vector<Tensor> norms_now;
          for (const Tensor& w : weights) {
            const Tensor g = w.grad();
            norms_now.push_back(g.defined() ? g.detach().to(kFloat64).norm()
                                            : zeros({}, TensorOptions(kFloat64).with_device(ModelDevice())));
          }
          layer_norms = stack(norms_now);
        }
      }
      scaler_.step(*optimizer_);  // skipped on the device when a gradient was not finite
      if (!before.empty()) {
        NoGradGuard no_grad;
        Tensor delta = zeros({}, TensorOptions(kFloat64).with_device(ModelDevice()));
        Tensor weight = zeros({}, TensorOptions(kFloat64).with_device(ModelDevice()));
        for (size_t i = 0; i < params.size(); ++i) {
          const Tensor d = (params[i].detach() - before[i]).to(kFloat64);
          const Tensor w = before[i].to(kFloat64);
          delta = delta + (d * d).sum();
          weight = weight + (w * w).sum();
        }
        update_ratio = (delta / weight).sqrt();
        // The clones go before the interval's read: every flush then sees the same tensors
        // alive (StepMetrics::memory_allocated_bytes, the doctor's growth rule).
        before.clear();
      }
      scaler_.update();
      optimizer_->zero_grad();
      if (scheduler_ && o.scheduler_per_step) scheduler_->step();
      ++step_;
      ++epoch_steps;
      interval_host_reads += host_value_reads_on_this_thread() - reads_before;
      interval_ops += ops_dispatched_on_this_thread() - ops_before;
      if (ddp_) {
        const int rank = ddp_->group().rank();
        if (fault_point_fires(detail::StrCat("distributed:perturb:rank", rank, ":step", step_))) {
          NoGradGuard no_grad;  // a test's silent divergence: one rank's weights drift
          Tensor p = params.front();
          p.add_(1e-3);
        }
        // Every agreement_every steps, unless a checkpoint at this step checks anyway.
        const bool checkpoint_now =
            !o.checkpoint_path.empty() && o.checkpoint_every_steps > 0 && step_ % o.checkpoint_every_steps == 0;
        if (agreement_every_ > 0 && step_ % agreement_every_ == 0 && !checkpoint_now) {
          distributed::check_rank_agreement(*model_, ddp_->group(), step_);
        }
      }
      const Tensor mean_loss = step_loss / static_cast<double>(micro);
      losses.push_back(mean_loss);
      norms.push_back(norm);
      interval_steps.push_back(step_);
      epoch_loss = epoch_loss + mean_loss;
      step_loss = zeros({}, on_device);
      micro = 0;
      if (step_ % o.metric_interval == 0) flush();
      if (o.checkpoint_every_steps > 0 && step_ % o.checkpoint_every_steps == 0) {
        flush();  // never checkpoint a state whose losses were not checked
        const auto started = Clock::now();
        checkpoint(train);
        interval_checkpoint_seconds += Seconds(Clock::now() - started);
      }
    };
    while (true) {
      if (ddp_ ? stop_agreed : cancel != nullptr && cancel->load()) {
        flush();
        result.status = TrainResult::Status::kCancelled;
        result.steps = step_;
        result.epochs = train.epoch();
        result.history = history_.points();
        return result;
      }
      if (fault_point_fires("train:hang")) {
        // A test's stuck run (the service's STALLED watchdog): no step and no event until it
        // is cancelled, for at most a minute.
        for (int i = 0; i < 6000 && !(cancel != nullptr && cancel->load()); ++i)
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      std::optional<data::Example> batch = train.next();
      if (!batch) break;  // the loader advanced its epoch
      interval_data_wait += train.stats().last_wait_seconds;
      // A test's straggler: this rank computes 20 ms longer per step (the doctor's STRAGGLER_RANK).
      if (ddp_ && fault_point_fires(slow_rank_point)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      const Tensor x = (*batch)[o.input_key].to(device, /*non_blocking=*/true);  // fresh batch, never written
      const Tensor target = (*batch)[o.target_key].to(device, /*non_blocking=*/true);
      Tensor loss;
      const int64_t reads_before = host_value_reads_on_this_thread();
      const int64_t ops_before = ops_dispatched_on_this_thread();
      // Micro-batches before the last of an accumulation only accumulate locally.
      std::optional<distributed::DistributedDataParallel::NoSync> no_sync;
      if (ddp_ && micro + 1 < o.accumulation_steps) no_sync.emplace(*ddp_);
      {
        std::optional<AutocastGuard> amp;
        if (o.precision != kFloat32) amp.emplace(device.type, o.precision);
        std::optional<autocast::AnomalyGuard> anomaly;
        if (o.amp_anomaly) anomaly.emplace(true);
        // The forward of the step that closes each of the first intervals, then every
        // activation_sample_intervals-th one, samples the activations.
        std::optional<nn::ActivationProbe> probe;
        const int64_t interval = (step_ + 1) / o.metric_interval;
        if (o.activation_sample_intervals > 0 && (step_ + 1) % o.metric_interval == 0 &&
            (interval <= TrainerOptions::kDenseActivationIntervals || interval % o.activation_sample_intervals == 0))
          probe.emplace();
        const Tensor output = ddp_ ? ddp_->forward(x) : model_->forward(x);
        if (callbacks_.on_loss_input && micro == 0 &&
            (step_ + 1 == fit_first_step ||
             step_ + 1 == fit_first_step - 1 + TrainerOptions::kLossInputSampleInterval * o.metric_interval)) {
          const int64_t reads = host_value_reads_on_this_thread(), ops = ops_dispatched_on_this_thread();
          callbacks_.on_loss_input(output.detach(), target);
          callback_reads = host_value_reads_on_this_thread() - reads;
          callback_ops = ops_dispatched_on_this_thread() - ops;
        }
        loss = loss_(output, target);
        if (probe && !probe->records().empty()) {
          std::vector<Tensor> shares;
          activation_layers.clear();
          for (const nn::ActivationRecord& r : probe->records()) {
            const auto name = module_names.find(r.module);
            activation_layers.emplace_back(name != module_names.end() ? name->second : "(unnamed)",
                                           nn::activation_kind_name(r.kind));
            shares.push_back(r.share.to(kFloat64).reshape({1}));
          }
          activation_values = cat(shares, 0);
        }
      }
      scaler_.scale(o.accumulation_steps > 1 ? loss / static_cast<double>(o.accumulation_steps) : loss).backward();
      no_sync.reset();
      step_loss = step_loss + loss.detach().to(kFloat64);
      interval_samples += x.size(0);
      // The doctor's look at the first loss input is not the step's own work.
      interval_host_reads += host_value_reads_on_this_thread() - reads_before - callback_reads;
      interval_ops += ops_dispatched_on_this_thread() - ops_before - callback_ops;
      callback_reads = callback_ops = 0;
      if (++micro == o.accumulation_steps) optimizer_step();
      if (o.max_steps > 0 && step_ >= o.max_steps && micro == 0) {
        flush();
        if (o.checkpoint_every_epoch || o.checkpoint_every_steps > 0) checkpoint(train);
        result.status = TrainResult::Status::kMaxSteps;
        result.steps = step_;
        result.epochs = train.epoch();
        result.history = history_.points();
        return result;
      }
    }
    if (micro > 0) {
      // A last, shorter accumulation: its gradients were scaled by 1/k, so rescale to the mean.
      const double rescale = static_cast<double>(o.accumulation_steps) / static_cast<double>(micro);
      if (ddp_) ddp_->reduce_gradients();  // they were accumulated under no_sync
      NoGradGuard no_grad;
      for (const auto& p : params) {
        Tensor g = p.grad();
        if (g.defined()) g.mul_(rescale);
      }
      optimizer_step();
    }
    flush();
    EpochMetrics em;
    em.epoch = train.epoch() - 1;
    em.step = step_;
    em.train_loss = epoch_steps > 0 ? epoch_loss.item<double>() / static_cast<double>(epoch_steps) : 0.0;
    if (validation != nullptr) {
      const auto [vl, va] = evaluate(*validation);
      em.val_loss = vl;
      em.val_accuracy = va;
      history_.record(step_, "val_loss", vl);
      if (va) history_.record(step_, "val_accuracy", *va);
    }
    if (scheduler_ && !o.scheduler_per_step) scheduler_->step();
    std::optional<double> monitored;
    if (o.monitor == "train_loss") monitored = em.train_loss;
    if (o.monitor == "val_loss") monitored = em.val_loss;
    if (o.monitor == "val_accuracy") monitored = em.val_accuracy;
    if (monitored) {
      const bool improved =
          !best || (lower_is_better ? *monitored < *best - o.min_delta : *monitored > *best + o.min_delta);
      if (improved) {
        best = monitored;
        bad_epochs = 0;
        if ((o.patience >= 0 || o.track_best_weights) && o.restore_best_weights) best_state = CloneState(*model_);
      } else {
        ++bad_epochs;
      }
      em.improved = improved;
    }
    if (callbacks_.on_epoch) callbacks_.on_epoch(em);
    if (o.checkpoint_every_epoch) checkpoint(train);
    if ((o.patience >= 0 && bad_epochs > o.patience) || stop_requested_) {
      result.status = TrainResult::Status::kEarlyStopped;
      break;
    }
    // The epoch's end (evaluation and its all-reduce, the epoch callback, the checkpoint rank 0
    // alone writes) is not the next interval's training: its clock and waits start here, so
    // step times, throughput and each rank's compute time measure steps only.
    restart_interval_clock();
  }
  if (result.status == TrainResult::Status::kEarlyStopped && o.restore_best_weights && !best_state.tensors.empty()) {
    model_->load_state_dict(best_state);
  }
  result.steps = step_;
  result.epochs = train.epoch();
  result.best_metric = best;
  result.history = history_.points();
  return result;
}

}  // namespace anvil::train
