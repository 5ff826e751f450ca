#include "core/train/doctor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "core/autograd/grad_mode.h"
#include "core/nn/functional.h"
#include "core/ops/functions.h"

namespace anvil::train {
namespace {

std::string Fixed(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Percent(double v) { return Fixed(100.0 * v, 1) + " %"; }

// The median of `v` (non-empty): the mean of the middle two for an even count.
double Median(std::vector<double> v) {
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  return (*mid + *std::max_element(v.begin(), mid)) / 2;
}

}  // namespace

const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kInfo:
      return "info";
    case Severity::kWarning:
      return "warning";
    case Severity::kCritical:
      return "critical";
  }
  return "?";
}

Doctor::Doctor(DoctorContext context, DoctorOptions options) : context_(std::move(context)), options_(options) {}

const std::vector<std::string>& Doctor::rules() {
  static const std::vector<std::string> kRules = {
      "DATA_STALL", "EXPLODING_GRADIENTS", "LR_TOO_HIGH", "LR_TOO_LOW", "LOSS_PLATEAU", "OSCILLATION", "OVERFITTING",
      "AMP_SKIP_STORM", "INPUT_NOT_NORMALIZED", "CHANNEL_ORDER_SUSPECT", "LABELS_LOOK_MULTILABEL",
      "LOGITS_PASSED_AS_PROBABILITIES", "HOST_SYNC_PER_STEP", "VANISHING_GRADIENTS", "DEAD_RELU",
      "SATURATED_ACTIVATION", "OVERHEAD_BOUND", "STRAGGLER_RANK", "LOW_DEVICE_UTILISATION", "MEMORY_FRAGMENTATION",
      // evaluated by the service's scheduler: a watchdog
      "STALLED"};
  return kRules;
}

void Doctor::Report(Finding f, std::vector<Finding>* out) {
  auto it = fired_.find(f.code);
  if (it != fired_.end()) {
    // Still firing: the step range grows; reported again only when it got worse.
    it->second.last_step = std::max(it->second.last_step, f.last_step);
    if (f.severity <= it->second.severity) return;
    f.first_step = it->second.first_step;
  }
  fired_[f.code] = f;
  out->push_back(std::move(f));
}

void Doctor::Checked(const char* code) {
  if (checked_.find(std::string_view(code)) != checked_.end()) return;
  checked_.emplace(code);
  newly_checked_.emplace_back(code);
}

void Doctor::Evaluated(const char* code, int64_t need) {
  if (checked_.find(std::string_view(code)) != checked_.end()) return;  // counted enough already
  auto it = evaluations_.find(std::string_view(code));
  if (it == evaluations_.end()) it = evaluations_.emplace(code, 0).first;
  if (++it->second >= need) Checked(code);
}

std::vector<std::string> Doctor::checked() const {
  std::vector<std::string> out;
  for (const std::string& rule : rules())
    if (checked_.count(rule) != 0) out.push_back(rule);
  return out;
}

std::vector<std::string> Doctor::take_newly_checked() { return std::exchange(newly_checked_, {}); }

bool Doctor::applies(const std::string& code, const DoctorContext& context, bool data_parallel) {
  if (code == "LOGITS_PASSED_AS_PROBABILITIES") return context.loss == "bce_with_logits";
  if (code == "LABELS_LOOK_MULTILABEL") return context.loss == "cross_entropy" || context.loss.empty();
  if (code == "AMP_SKIP_STORM") return context.precision == "fp16";
  if (code == "STRAGGLER_RANK") return data_parallel;
  return true;
}

std::string Doctor::needs(const std::string& code, const DoctorOptions& o) {
  const auto after = [&](int64_t intervals, const std::string& with) {
    return std::to_string(intervals) + " metric interval" + (intervals == 1 ? "" : "s") + " after warm-up (step " +
           std::to_string(o.warmup_steps) + ")" + (with.empty() ? "" : ", " + with);
  };
  if (code == "DATA_STALL") return after(1, "");
  if (code == "EXPLODING_GRADIENTS") return after(o.grad_window + 1, "with a finite gradient norm");
  if (code == "LR_TOO_HIGH")
    return "2 metric intervals (1 when the first step's loss was seen) within the first " +
           std::to_string(o.divergence_intervals);
  if (code == "LR_TOO_LOW") return after(o.update_band_intervals, "with the update-to-weight ratio measured");
  if (code == "LOSS_PLATEAU") return after(o.plateau_window + 1, "");
  if (code == "OSCILLATION") return std::to_string(o.oscillation_window + 1) + " metric intervals";
  if (code == "OVERFITTING")
    return std::to_string(o.overfit_evaluations + 1) + " epochs with a validation loss (a validation split)";
  if (code == "AMP_SKIP_STORM") return "a metric interval with GradScaler's loss scale (precision fp16)";
  if (code == "INPUT_NOT_NORMALIZED") return "a first batch of floating-point inputs";
  if (code == "CHANNEL_ORDER_SUSPECT") return "a first batch of floating-point inputs";
  if (code == "LABELS_LOOK_MULTILABEL") return "a first batch with targets, under the loss cross_entropy";
  if (code == "LOGITS_PASSED_AS_PROBABILITIES")
    return "two looks at the loss's input (the first step, and the fifth interval's last), of at least " +
           std::to_string(o.loss_input_min_values) + " values, under the loss bce_with_logits";
  if (code == "HOST_SYNC_PER_STEP") return after(o.host_sync_intervals, "");
  if (code == "VANISHING_GRADIENTS")
    return after(o.vanishing_intervals, "with per-layer gradient norms of two layers or more");
  if (code == "DEAD_RELU") return after(o.activation_intervals, "with the activation layers sampled");
  if (code == "SATURATED_ACTIVATION") return after(o.activation_intervals, "with the activation layers sampled");
  if (code == "OVERHEAD_BOUND") return after(o.overhead_intervals, "with the op dispatch counters");
  if (code == "STRAGGLER_RANK") return after(o.straggler_intervals, "with two ranks or more");
  if (code == "LOW_DEVICE_UTILISATION") return after(o.utilisation_window, "with the device's utilisation measured");
  if (code == "MEMORY_FRAGMENTATION") return after(o.memory_growth_intervals, "with the memory in use measured");
  if (code == "STALLED") return "a running job (the scheduler's watchdog)";
  return "";
}

std::vector<Finding> Doctor::findings() const {
  std::vector<Finding> out;
  for (const auto& [code, f] : fired_) out.push_back(f);
  std::stable_sort(out.begin(), out.end(), [](const Finding& a, const Finding& b) {
    if (a.severity != b.severity) return a.severity > b.severity;
    return a.first_step < b.first_step;
  });
  return out;
}

std::vector<Finding> Doctor::check_loss_input(const Tensor& output, const Tensor& target) {
  std::vector<Finding> out;
  if (!output.defined() || !is_floating_point(output.dtype()) || !target.defined()) return out;
  NoGradGuard no_grad;
  const Tensor x = output.detach().to(kFloat64);
  // Where the model starts from: LR_TOO_HIGH's reference for a loss that rises at once.
  if (loss_input_looks_++ == 0 && !resumed_) {
    try {
      const Tensor t = is_floating_point(target.dtype()) ? target.detach().to(kFloat64) : target.detach();
      Tensor loss;
      if (context_.loss == "cross_entropy" || context_.loss.empty())
        loss = nn::functional::cross_entropy(x, t);
      else if (context_.loss == "mse")
        loss = nn::functional::mse_loss(x, t.reshape(x.sizes()));
      else if (context_.loss == "bce_with_logits")
        loss = nn::functional::binary_cross_entropy_with_logits(x, t.reshape(x.sizes()));
      if (loss.defined()) {
        const double v = loss.item<double>();
        if (std::isfinite(v)) initial_loss_ = v;
      }
    } catch (const Error&) {
      // A target the named loss does not take: the trainer's own loss is something else.
    }
  }
  if (context_.loss != "bce_with_logits" || output.numel() < options_.loss_input_min_values) return out;
  Evaluated("LOGITS_PASSED_AS_PROBABILITIES", 2);
  const double lo = x.min().item<double>(), hi = x.max().item<double>();
  if (!(std::isfinite(lo) && std::isfinite(hi) && lo >= 0 && hi <= 1)) return out;
  if (++loss_inputs_in_unit_ >= 2) {
    Finding f{"LOGITS_PASSED_AS_PROBABILITIES",
              Severity::kWarning,
              0,
              0,
              {{"min", lo}, {"max", hi}, {"values", static_cast<double>(output.numel())}},
              "the loss takes logits and applies its own sigmoid, but every value the model gave it, on the first "
              "step and again after training began, lies in [" +
                  Fixed(lo) + ", " + Fixed(hi) +
                  "]: probabilities, the output of a sigmoid. Remove the model's last sigmoid (BCEWithLogits takes "
                  "logits), or keep it and use binary_cross_entropy"};
    Report(std::move(f), &out);
  }
  return out;
}

std::vector<Finding> Doctor::check_first_batch(const Tensor& input, const Tensor& target) {
  std::vector<Finding> out;
  NoGradGuard no_grad;
  if (input.defined() && is_floating_point(input.dtype()) && input.numel() > 0) {
    const Tensor x = input.detach().to(kFloat64);
    const double lo = x.min().item<double>(), hi = x.max().item<double>();
    const double mean = x.mean().item<double>(), std = x.numel() > 1 ? x.std().item<double>() : 0.0;
    const bool integral = equal(x, x.round());
    if (std::isfinite(lo) && std::isfinite(hi)) {
      Checked("INPUT_NOT_NORMALIZED");
      const bool pixels = integral && lo >= 0 && hi > 1 && hi <= 255;
      if (pixels || std::fabs(mean) > options_.input_scale_limit || std > options_.input_scale_limit) {
        Finding f{"INPUT_NOT_NORMALIZED",
                  Severity::kWarning,
                  0,
                  0,
                  {{"min", lo}, {"max", hi}, {"mean", mean}, {"std", std}},
                  ""};
        f.advice = pixels ? "inputs are integers in [0, " + Fixed(hi, 0) +
                                "]: raw pixel values. Scale them to [0, 1] (divide by 255) and normalise per channel "
                                "(mean 0, std 1) with the training set's statistics"
                          : "inputs are far from unit scale (mean " + Fixed(mean) + ", std " + Fixed(std) +
                                "): standardise them with the training set's mean and standard deviation";
        Report(std::move(f), &out);
      }
    }
    // HWC where CHW is expected: [N, H, W, C] with C in {1, 3, 4} last and large spatial dims
    // first (a convolution would read the rows as channels).
    Checked("CHANNEL_ORDER_SUSPECT");  // an input that is not 4-D cannot be a channels-last image
    if (input.dim() == 4 && (input.size(3) == 1 || input.size(3) == 3 || input.size(3) == 4) && input.size(1) > 4 &&
        input.size(2) > 4 && input.size(1) != input.size(3)) {
      Finding f{"CHANNEL_ORDER_SUSPECT",
                Severity::kWarning,
                0,
                0,
                {{"dim1", static_cast<double>(input.size(1))},
                 {"dim2", static_cast<double>(input.size(2))},
                 {"dim3", static_cast<double>(input.size(3))}},
                "the input looks channels-last [N, H, W, C] (" + shape_str(input.sizes()) +
                    ") while convolutions read [N, C, H, W]: permute it (x.permute({0, 3, 1, 2}))"};
      Report(std::move(f), &out);
    }
  }
  // A 0/1 matrix as the target of a cross entropy: multi-label data with a single-label loss.
  if (target.defined() && context_.loss == "cross_entropy" && target.numel() > 0) Checked("LABELS_LOOK_MULTILABEL");
  if (target.defined() && context_.loss == "cross_entropy" && target.dim() == 2 && target.numel() > 0) {
    const Tensor t = target.detach().to(kFloat64);
    const bool binary = equal(t, (t > 0.5).to(kFloat64));
    const double per_row = t.sum({1}).mean().item<double>();
    if (binary && per_row > 1.0) {
      Finding f{"LABELS_LOOK_MULTILABEL",
                Severity::kWarning,
                0,
                0,
                {{"labels_per_sample", per_row}, {"classes", static_cast<double>(target.size(1))}},
                "targets are 0/1 rows with " + Fixed(per_row) +
                    " labels per sample on average: multi-label data. Cross entropy assumes one class per "
                    "sample; use BCEWithLogitsLoss (loss \"bce_with_logits\") with one logit per class"};
      Report(std::move(f), &out);
    }
  }
  return out;
}

std::vector<Finding> Doctor::on_step(const StepMetrics& m) {
  std::vector<Finding> out;
  const size_t keep =
      static_cast<size_t>(std::max({options_.plateau_window, options_.oscillation_window, options_.grad_window}) + 2);
  steps_.push_back(m);
  if (steps_.size() > keep) steps_.pop_front();
  if (!first_) first_ = m;
  ++intervals_;
  const StepMetrics& first = *first_;
  const size_t n = steps_.size();
  // EXPLODING_GRADIENTS: a non-finite norm or loss is critical at once.
  if (!std::isfinite(m.grad_norm) || !std::isfinite(m.loss)) {
    Report({"EXPLODING_GRADIENTS",
            Severity::kCritical,
            m.step,
            m.step,
            {{"grad_norm", m.grad_norm}, {"loss", m.loss}, {"lr", m.lr}},
            "the gradient norm or loss is not finite: lower the learning rate (now " + Fixed(m.lr, 6) +
                "), clip gradients (clip_grad_norm), check the inputs for NaN, and with fp16 keep loss scaling on"},
           &out);
  } else {
    grad_ema_ =
        grad_ema_ ? options_.grad_ema_alpha * m.grad_norm + (1 - options_.grad_ema_alpha) * *grad_ema_ : m.grad_norm;
    grad_ema_history_.push_back(*grad_ema_);
    if (!first_grad_ema_) first_grad_ema_ = *grad_ema_;
    if (grad_ema_history_.size() > keep) grad_ema_history_.pop_front();
    const size_t w = static_cast<size_t>(options_.grad_window);
    // Gradient norms often grow in the first steps from a small initialisation: only after warm-up.
    if (grad_ema_history_.size() > w && m.step >= options_.warmup_steps) {
      Checked("EXPLODING_GRADIENTS");
      const double before = grad_ema_history_[grad_ema_history_.size() - 1 - w];
      // Growth beyond where the run started: a norm that doubles from a tiny value late in a
      // converged run is noise, not an explosion.
      if (before > 0 && *grad_ema_ > options_.grad_growth * before && *grad_ema_ > *first_grad_ema_) {
        Report({"EXPLODING_GRADIENTS",
                Severity::kWarning,
                steps_[n - 1 - std::min(n - 1, w)].step,
                m.step,
                {{"grad_norm_ema", *grad_ema_}, {"grad_norm_ema_before", before}, {"growth", *grad_ema_ / before}},
                "the gradient norm's moving average grew " + Fixed(*grad_ema_ / before) + "x in " +
                    std::to_string(options_.grad_window) +
                    " intervals: lower the learning rate or clip gradients (clip_grad_norm) before it diverges"},
               &out);
      }
    }
  }
  // LR_TOO_HIGH: the loss climbing early.
  // From the first step's loss when it was seen (a rate that throws the model off at once has
  // the first interval's mean already far above where it started), else the first interval's.
  const double start = initial_loss_.value_or(first.loss);
  const bool early = !resumed_ && intervals_ <= options_.divergence_intervals && (initial_loss_ || intervals_ >= 2) &&
                     std::isfinite(m.loss) && start > 0;
  if (early) Checked("LR_TOO_HIGH");
  if (early && m.loss > options_.divergence_factor * start) {
    Report({"LR_TOO_HIGH",
            Severity::kWarning,
            first.step,
            m.step,
            {{"loss_first", start}, {"loss_now", m.loss}, {"lr", m.lr}},
            "the loss rose from " + Fixed(start, 4) + " to " + Fixed(m.loss, 4) +
                " in the first intervals: the learning rate (" + Fixed(m.lr, 6) +
                ") is too high for this model; divide it by 10, or warm it up (schedule warmup_steps)"},
           &out);
  }
  // LR_TOO_LOW / LR_TOO_HIGH: the update-to-weight ratio outside its band, interval after
  // interval (an unmeasured interval, ratio 0, neither counts nor breaks a run).
  if (m.update_ratio > 0 && std::isfinite(m.update_ratio) && m.step >= options_.warmup_steps) {
    ratio_low_run_ = m.update_ratio < options_.update_ratio_low ? ratio_low_run_ + 1 : 0;
    ratio_high_run_ = m.update_ratio > options_.update_ratio_high ? ratio_high_run_ + 1 : 0;
    const int64_t need = options_.update_band_intervals;
    Evaluated("LR_TOO_LOW", need);
    if (ratio_low_run_ >= need) {
      Report({"LR_TOO_LOW",
              Severity::kWarning,
              steps_[n - std::min<size_t>(n, static_cast<size_t>(need))].step,
              m.step,
              {{"update_ratio", m.update_ratio}, {"band_low", options_.update_ratio_low}, {"lr", m.lr}},
              "each step changes the weights by " + Fixed(m.update_ratio * 1e6, 2) +
                  " parts per million (a healthy step is near a thousand): the learning rate (" + Fixed(m.lr, 8) +
                  ") is too low to train in a reasonable time; raise it tenfold at a time, or use a schedule with "
                  "warm-up to a higher peak"},
             &out);
    }
    if (ratio_high_run_ >= need) {
      Report(
          {"LR_TOO_HIGH",
           Severity::kWarning,
           steps_[n - std::min<size_t>(n, static_cast<size_t>(need))].step,
           m.step,
           {{"update_ratio", m.update_ratio}, {"band_high", options_.update_ratio_high}, {"lr", m.lr}},
           "each step changes the weights by " + Percent(m.update_ratio) + " of their size: the learning rate (" +
               Fixed(m.lr, 6) + ") rewrites them every step; divide it by 10, or warm it up (schedule warmup_steps)"},
          &out);
    }
  }
  // VANISHING_GRADIENTS: the smallest weight gradient against the last layer's (an unmeasured
  // interval, or a last layer with no gradient, neither counts nor breaks a run).
  const auto& layers = m.layer_grad_norms;
  if (layers.size() >= 2 && m.step >= options_.warmup_steps && layers.back().second > 0 &&
      std::isfinite(layers.back().second)) {
    const double last = layers.back().second;
    size_t worst = 0;
    for (size_t i = 1; i + 1 < layers.size(); ++i)
      if (layers[i].second < layers[worst].second) worst = i;
    const double ratio = layers[worst].second / last;
    vanishing_run_ = std::isfinite(ratio) && ratio < options_.vanishing_ratio ? vanishing_run_ + 1 : 0;
    const int64_t need = options_.vanishing_intervals;
    Evaluated("VANISHING_GRADIENTS", need);
    if (vanishing_run_ >= need) {
      Report({"VANISHING_GRADIENTS",
              Severity::kWarning,
              steps_[n - std::min<size_t>(n, static_cast<size_t>(need))].step,
              m.step,
              {{"ratio", ratio},
               {"layer_grad_norm", layers[worst].second},
               {"last_layer_grad_norm", last},
               {"layer_index", static_cast<double>(worst)}},
              "the gradient reaching " + layers[worst].first + " is " + Fixed(ratio * 1e6, 3) +
                  " millionths of the last layer's (" + layers.back().first +
                  "): the early layers barely learn. Use ReLU-family activations rather than sigmoid or tanh in deep "
                  "stacks, He (kaiming) initialisation, normalisation layers (BatchNorm, LayerNorm) or residual "
                  "connections"},
             &out);
    }
  }
  // DEAD_RELU / SATURATED_ACTIVATION: the worst activation layer of each kind on the interval's
  // sampled batch (StepMetrics::activation_shares), for intervals in a row after warm-up; an
  // interval without samples neither counts nor breaks a run.
  if (!m.activation_shares.empty() && m.step >= options_.warmup_steps) {
    std::optional<size_t> dead, saturated;
    for (size_t i = 0; i < m.activation_shares.size(); ++i) {
      const StepMetrics::ActivationShare& a = m.activation_shares[i];
      if (!std::isfinite(a.share)) continue;
      std::optional<size_t>& worst = a.kind == "relu" ? dead : saturated;
      if (!worst || a.share > m.activation_shares[*worst].share) worst = i;
    }
    const auto run = [&](const std::optional<size_t>& worst, double threshold, int64_t* count) {
      *count = worst && m.activation_shares[*worst].share > threshold ? *count + 1 : 0;
    };
    run(dead, options_.dead_relu_share, &dead_relu_run_);
    run(saturated, options_.saturated_share, &saturated_run_);
    const int64_t need = options_.activation_intervals;
    // Sampled layers without a ReLU (or a sigmoid, a tanh) have none to die (or saturate): checked.
    Evaluated("DEAD_RELU", need);
    Evaluated("SATURATED_ACTIVATION", need);
    const size_t from = n - std::min<size_t>(n, static_cast<size_t>(need));
    if (dead && dead_relu_run_ >= need) {
      const StepMetrics::ActivationShare& a = m.activation_shares[*dead];
      Report({"DEAD_RELU",
              Severity::kWarning,
              steps_[from].step,
              m.step,
              {{"dead_unit_share", a.share},
               {"layer_index", static_cast<double>(*dead)},
               {"intervals", static_cast<double>(dead_relu_run_)}},
              Percent(a.share) + " of the units of ReLU layer " + a.layer +
                  " output zero for every sample of a batch: they pass no gradient and stop learning (dying "
                  "ReLU). Lower the learning rate, use LeakyReLU, ELU or GELU, initialise with He (kaiming) "
                  "weights and zero biases, or normalise (BatchNorm, LayerNorm) before the activation"},
             &out);
    }
    if (saturated && saturated_run_ >= need) {
      const StepMetrics::ActivationShare& a = m.activation_shares[*saturated];
      Report({"SATURATED_ACTIVATION",
              Severity::kWarning,
              steps_[from].step,
              m.step,
              {{"saturated_share", a.share},
               {"layer_index", static_cast<double>(*saturated)},
               {"intervals", static_cast<double>(saturated_run_)}},
              Percent(a.share) + " of the outputs of " + a.kind + " layer " + a.layer +
                  " sit in its flat tails (derivative under 2 %): the gradient through it vanishes. Normalise its "
                  "input (BatchNorm, LayerNorm), initialise with Xavier (Glorot) weights, lower the learning rate, "
                  "or use a ReLU-family activation"},
             &out);
    }
  }
  // OVERHEAD_BOUND: two of its signals at once, on the medians of the last intervals after
  // warm-up (medians: one interval slowed by another process does not reset the evidence). An
  // interval without the counters is not part of the window.
  if (m.step >= options_.warmup_steps && m.step_seconds > 0 && m.ops_per_step > 0 && m.dispatch_seconds_per_op > 0) {
    overhead_window_.push_back(
        {m.step, m.step_seconds, m.ops_per_step * m.dispatch_seconds_per_op / m.step_seconds, m.device_utilisation});
    if (overhead_window_.size() > static_cast<size_t>(options_.overhead_intervals)) overhead_window_.pop_front();
    if (overhead_window_.size() == static_cast<size_t>(options_.overhead_intervals)) {
      Checked("OVERHEAD_BOUND");
      const auto median = [&](auto field) {
        std::vector<double> v;
        for (const OverheadSample& o : overhead_window_) v.push_back(field(o));
        return Median(std::move(v));
      };
      const double seconds = median([](const OverheadSample& o) { return o.step_seconds; });
      const double share = median([](const OverheadSample& o) { return o.dispatch_share; });
      const bool small = seconds < options_.overhead_small_step_seconds;
      const bool dispatch_bound = share > options_.overhead_dispatch_share;
      // The third signal, on an accelerator whose utilisation is known for the whole window.
      bool utilisation_known = context_.device != "cpu";
      for (const OverheadSample& o : overhead_window_) utilisation_known = utilisation_known && o.utilisation >= 0;
      const double utilisation = utilisation_known ? median([](const OverheadSample& o) { return o.utilisation; }) : -1;
      const bool idle = utilisation_known && utilisation < options_.utilisation_p95;
      if (int{small} + int{dispatch_bound} + int{idle} >= 2) {
        Finding f{"OVERHEAD_BOUND",
                  Severity::kWarning,
                  overhead_window_.front().step,
                  m.step,
                  {{"step_seconds", seconds},
                   {"dispatch_share", share},
                   {"ops_per_step", m.ops_per_step},
                   {"dispatch_seconds_per_op", m.dispatch_seconds_per_op},
                   {"batch_size", static_cast<double>(context_.batch_size)}},
                  ""};
        if (utilisation_known) f.evidence.emplace_back("device_utilisation", utilisation);
        f.advice = "each step runs " + Fixed(m.ops_per_step, 0) + " ops in " + Fixed(seconds * 1e3, 2) + " ms, about " +
                   Percent(std::min(share, 1.0)) + " of it spent dispatching them (" +
                   Fixed(m.dispatch_seconds_per_op * 1e6, 2) +
                   " us each): the step is bound by per-op overhead, not by its arithmetic. Raise the batch size "
                   "(now " +
                   std::to_string(context_.batch_size) +
                   ") so that each op does more work, use wider and fewer layers, and avoid per-sample or "
                   "per-element loops of small ops in the model or the loss" +
                   (idle ? "; the device computed only " + Percent(utilisation) + " of the time" : std::string());
        Report(std::move(f), &out);
      }
    }
  }
  CheckUtilisation(m, &out);
  CheckMemory(m, &out);
  // HOST_SYNC_PER_STEP: the step itself reads values back, interval after interval.
  if (m.step >= options_.warmup_steps) {
    host_sync_run_ = m.host_reads_per_step >= 1.0 ? host_sync_run_ + 1 : 0;
    const int64_t need = options_.host_sync_intervals;
    Evaluated("HOST_SYNC_PER_STEP", need);
    if (host_sync_run_ >= need) {
      const bool gpu = context_.device != "cpu";
      Report({"HOST_SYNC_PER_STEP",
              gpu ? Severity::kWarning : Severity::kInfo,
              steps_[n - std::min<size_t>(n, static_cast<size_t>(need))].step,
              m.step,
              {{"host_reads_per_step", m.host_reads_per_step}, {"step_seconds", m.step_seconds}},
              "each step reads " + Fixed(m.host_reads_per_step, 1) +
                  " value(s) back to the host (Tensor::item or to_vector, a boolean mask, nonzero: something in "
                  "the model, the loss or a callback branches on a device value). " +
                  std::string(gpu ? "On the GPU each read waits for every queued kernel, so the device idles "
                                    "once per step"
                                  : "On the CPU this costs little, but on a GPU each read waits for every queued "
                                    "kernel") +
                  ": keep per-step values on the device and read them every metric interval, as the trainer "
                  "reads its losses"},
             &out);
    }
  }
  // DATA_STALL, after warm-up. In a data-parallel run every rank waits for the slowest one at
  // each gradient all-reduce, so the worst rank's loader is the one that matters.
  int64_t wait_rank = -1;  // every rank's ratio is there (this one's too): the worst
  for (size_t r = 0; r < m.rank_data_wait.size(); ++r)
    if (wait_rank < 0 || m.rank_data_wait[r] > m.rank_data_wait[static_cast<size_t>(wait_rank)])
      wait_rank = static_cast<int64_t>(r);
  const double wait = wait_rank >= 0 ? m.rank_data_wait[static_cast<size_t>(wait_rank)] : m.data_wait_ratio;
  if (m.step >= options_.warmup_steps) Checked("DATA_STALL");
  if (m.step >= options_.warmup_steps && wait > options_.data_stall_info &&
      wait * m.step_seconds > options_.data_stall_min_wait_seconds) {
    const bool warn = wait > options_.data_stall_warning;
    Finding f{"DATA_STALL",
              warn ? Severity::kWarning : Severity::kInfo,
              m.step,
              m.step,
              {{"data_wait_ratio", wait},
               {"step_seconds", m.step_seconds},
               {"samples_per_second", m.samples_per_second},
               {"loader_workers", static_cast<double>(context_.loader_workers)}},
              "the step waits for data " + Percent(wait) + " of the time" +
                  (wait_rank >= 0 ? " on rank " + std::to_string(wait_rank) + " (every rank waits for it)" : "") +
                  ": first raise loader_workers (now " + std::to_string(context_.loader_workers) +
                  ") and let the loader prefetch; then cache decoded samples and move expensive CPU transforms out "
                  "of the per-sample path"};
    if (wait_rank >= 0) f.evidence.emplace_back("rank", static_cast<double>(wait_rank));
    Report(std::move(f), &out);
  }
  // STRAGGLER_RANK, after warm-up: a rank whose own compute per step stays above the other
  // ranks' median by the factor, and by more than the floor, for intervals in a row. Its step
  // time is everyone's (each all-reduce waits for it), so the step times cannot show it.
  if (m.rank_compute_seconds.size() >= 2 && m.step >= options_.warmup_steps) {
    Evaluated("STRAGGLER_RANK", options_.straggler_intervals);
    const std::vector<double>& c = m.rank_compute_seconds;
    const size_t slow = static_cast<size_t>(std::max_element(c.begin(), c.end()) - c.begin());
    std::vector<double> others;
    for (size_t r = 0; r < c.size(); ++r)
      if (r != slow) others.push_back(c[r]);
    const double median = Median(std::move(others));
    const bool straggling =
        c[slow] > options_.straggler_factor * median && c[slow] - median > options_.straggler_min_seconds;
    straggler_run_ = straggling && straggler_rank_ == static_cast<int64_t>(slow) ? straggler_run_ + 1 : straggling;
    straggler_rank_ = straggling ? static_cast<int64_t>(slow) : -1;
    if (straggler_run_ == 1) straggler_first_step_ = m.step;
    if (straggler_run_ >= options_.straggler_intervals) {
      // Another rank than the one reported before: reported anew (the stored finding would
      // otherwise go on naming the first rank while its step range grew).
      if (const auto it = fired_.find("STRAGGLER_RANK"); it != fired_.end()) {
        for (const auto& [name, value] : it->second.evidence)
          if (name == "rank" && value != static_cast<double>(slow)) {
            fired_.erase(it);
            break;
          }
      }
      const double slower = median > 0 ? c[slow] / median : 0.0;
      const double idle = m.step_seconds > 0 ? std::min(1.0, (c[slow] - median) / m.step_seconds) : 0.0;
      Report({"STRAGGLER_RANK",
              Severity::kWarning,
              straggler_first_step_,
              m.step,
              {{"rank", static_cast<double>(slow)},
               {"compute_seconds", c[slow]},
               {"others_median_seconds", median},
               {"slowdown", slower},
               {"step_seconds", m.step_seconds}},
              "rank " + std::to_string(slow) + " computes its step in " + Fixed(c[slow] * 1e3, 1) + " ms against " +
                  Fixed(median * 1e3, 1) + " ms for the median of the other ranks (" + Fixed(slower, 1) +
                  "x): every other rank waits for it at each all-reduce, idle about " + Percent(idle) +
                  " of the step. Look at that rank's host first (other processes on its cores, a CPU quota, "
                  "thermal throttling, a slower machine in the group), then its shard (longer samples) and its "
                  "loader; the run goes only as fast as its slowest rank"},
             &out);
    }
  }
  // AMP_SKIP_STORM: skipped steps per 1,000, or the scale at its floor.
  if (m.loss_scale > 0 || m.skipped_steps > 0) {
    Checked("AMP_SKIP_STORM");
    const double share = m.step > 0 ? static_cast<double>(m.skipped_steps) / static_cast<double>(m.step) : 0.0;
    if ((m.step >= 100 && share > options_.amp_skip_share) ||
        (m.loss_scale > 0 && m.loss_scale <= options_.amp_scale_floor)) {
      Report({"AMP_SKIP_STORM",
              Severity::kWarning,
              0,
              m.step,
              {{"skipped_steps", static_cast<double>(m.skipped_steps)},
               {"skipped_share", share},
               {"loss_scale", m.loss_scale}},
              "optimizer steps are skipped for non-finite float16 gradients (" + Percent(share) + " of steps, scale " +
                  Fixed(m.loss_scale, 1) +
                  "): a layer overflows float16. Train in bf16 (precision \"bf16\"), or keep the overflowing layer "
                  "in float32 (\"autocast\": false on it; amp_anomaly names it)"},
             &out);
    }
  }
  // LOSS_PLATEAU and OSCILLATION over recent intervals; a training loss that climbs over the
  // plateau's window, after it had come down, is a rate too high (the weights thrown off a
  // minimum they had found), not a plateau.
  const size_t pw = static_cast<size_t>(options_.plateau_window);
  if (n > pw && m.step >= options_.warmup_steps) {
    Checked("LOSS_PLATEAU");
    const double before = steps_[n - 1 - pw].loss, now = m.loss;
    if (std::isfinite(before) && std::isfinite(now) && before > 1e-3 && now > 0.1 * first.loss &&
        now > options_.divergence_factor * before) {
      Report({"LR_TOO_HIGH",
              Severity::kWarning,
              steps_[n - 1 - pw].step,
              m.step,
              {{"loss_before", before}, {"loss_now", now}, {"lr", m.lr}},
              "the training loss rose from " + Fixed(before, 4) + " to " + Fixed(now, 4) + " over " +
                  std::to_string(options_.plateau_window) + " intervals: the learning rate (" + Fixed(m.lr, 6) +
                  ") throws the weights out of the minimum they found; lower it, or decay it with a schedule"},
             &out);
    }
    // A loss already a tenth of where it started has converged rather than stalled, and one
    // that climbed past the divergence factor is a rate too high (above), not a plateau.
    if (std::isfinite(before) && std::isfinite(now) && before > 1e-3 && now > 0.1 * first.loss &&
        (before - now) / before < options_.plateau_min_improvement && now <= options_.divergence_factor * before) {
      Report({"LOSS_PLATEAU",
              Severity::kInfo,
              steps_[n - 1 - pw].step,
              m.step,
              {{"loss_before", before}, {"loss_now", now}, {"relative_improvement", (before - now) / before}},
              "the loss improved less than " + Percent(options_.plateau_min_improvement) + " over " +
                  std::to_string(options_.plateau_window) +
                  " intervals: lower the learning rate (a schedule), or the model has learned what it can; check "
                  "the validation curve before training longer"},
             &out);
    }
  }
  const size_t ow = static_cast<size_t>(options_.oscillation_window);
  if (ow >= 2 && n > ow) {
    Checked("OSCILLATION");
    int turns = 0;
    double sum = 0, swing = 0;
    for (size_t i = n - ow; i < n; ++i) {
      sum += steps_[i].loss;
      const double d1 = steps_[i].loss - steps_[i - 1].loss;
      swing = std::max(swing, std::fabs(d1));
      if (i >= n - ow + 1) {
        const double d0 = steps_[i - 1].loss - steps_[i - 2].loss;
        if (d0 * d1 < 0) ++turns;
      }
    }
    const double mean = sum / static_cast<double>(ow);
    std::vector<double> swings;
    double first_half = 0, second_half = 0;
    for (size_t i = n - ow; i < n; ++i) {
      swings.push_back(std::fabs(steps_[i].loss - steps_[i - 1].loss));
      (i < n - ow / 2 ? first_half : second_half) += steps_[i].loss;
    }
    std::nth_element(swings.begin(), swings.begin() + static_cast<std::ptrdiff_t>(swings.size() / 2), swings.end());
    const double median_swing = swings[swings.size() / 2];
    first_half /= static_cast<double>(ow - ow / 2);
    second_half /= static_cast<double>(ow / 2);
    const bool progressing = second_half < (1 - options_.oscillation_min_progress) * first_half;
    if (mean > 0.1 * first.loss && turns > options_.oscillation_share * static_cast<double>(ow - 1) &&
        median_swing > options_.oscillation_amplitude * mean && !progressing) {
      Report({"OSCILLATION",
              Severity::kWarning,
              steps_[n - ow].step,
              m.step,
              {{"direction_changes", static_cast<double>(turns)},
               {"median_swing", median_swing},
               {"largest_swing", swing},
               {"mean_loss", mean}},
              "the loss goes up and down at nearly every interval by up to " + Percent(swing / mean) +
                  " of its mean: the learning rate is too high for the batch size (" +
                  std::to_string(context_.batch_size) + "); lower it, or use a larger batch"},
             &out);
    }
  }
  return out;
}

std::vector<Finding> Doctor::on_non_finite(int64_t step, const std::string& what, std::optional<double> given_lr) {
  std::vector<Finding> out;
  const double lr = given_lr.value_or(steps_.empty() ? 0.0 : steps_.back().lr);
  Report({"EXPLODING_GRADIENTS",
          Severity::kCritical,
          steps_.empty() ? step : steps_.front().step,
          step,
          {{"step", static_cast<double>(step)}, {"lr", lr}},
          what + ": lower the learning rate (now " + Fixed(lr, 6) +
              "), clip gradients (clip_grad_norm), check the inputs for NaN, and with fp16 keep loss scaling on"},
         &out);
  return out;
}

void Doctor::CheckUtilisation(const StepMetrics& m, std::vector<Finding>* out) {
  // LOW_DEVICE_UTILISATION: the 95th percentile over the window after warm-up (every interval
  // of it known) below the threshold: the device was idle for a large share of nearly every
  // interval, not of one interval slowed by an evaluation or a checkpoint.
  if (m.step < options_.warmup_steps || m.device_utilisation < 0) {
    if (m.device_utilisation < 0) utilisation_window_.clear();
    return;
  }
  utilisation_window_.push_back({m.step, m.device_utilisation, m.data_wait_ratio});
  const size_t window = static_cast<size_t>(std::max<int64_t>(1, options_.utilisation_window));
  if (utilisation_window_.size() > window) utilisation_window_.pop_front();
  if (utilisation_window_.size() < window) return;
  Checked("LOW_DEVICE_UTILISATION");
  std::vector<double> u, wait;
  for (const UtilisationSample& s : utilisation_window_) {
    u.push_back(s.utilisation);
    wait.push_back(s.data_wait);
  }
  std::sort(u.begin(), u.end());
  // The nearest-rank 95th percentile: the value 95 % of the window is at or below.
  const size_t rank = static_cast<size_t>(std::ceil(0.95 * static_cast<double>(u.size()))) - 1;
  const double p95 = u[std::min(rank, u.size() - 1)];
  if (p95 >= options_.utilisation_p95) return;
  const double median = Median(u);
  const double data_wait = Median(std::move(wait));
  const bool cpu = context_.device == "cpu";
  // On the CPU, what data waits do not explain of the thread's time off a core. Without loader
  // workers the batches are built on the training thread: that wait is CPU time, not idle.
  const double unexplained = std::max(0.0, 1.0 - median - (context_.loader_workers > 0 ? data_wait : 0.0));
  std::string advice =
      "the " + std::string(cpu ? "CPU" : "device") + " computed only " + Percent(median) +
      " of the time (95th percentile " + Percent(p95) + " over " + std::to_string(window) +
      " intervals). In the guide's order: the loader first (the step waits for data " + Percent(data_wait) +
      " of the time: raise loader_workers, now " + std::to_string(context_.loader_workers) +
      ", and let it prefetch); then tiny batches (raise batch_size, now " + std::to_string(context_.batch_size) +
      ", so that each step gives the device more work); then CPU preprocessing in the per-sample "
      "path; then host reads every step (HOST_SYNC_PER_STEP)";
  if (cpu && unexplained > 0.1) {
    advice += ". " + Percent(unexplained) +
              " of the training thread's time is off a core for another reason: another process or more threads "
              "than cores compete for the CPUs (run fewer jobs or kernel threads per core: anvild --cpu-workers, "
              "ANVIL_NUM_THREADS), or checkpoint writes and locks block it";
  }
  Finding f{"LOW_DEVICE_UTILISATION",
            // On the CPU the cores are shared with the rest of the machine: worth knowing, not
            // a fault of the job.
            cpu ? Severity::kInfo : Severity::kWarning,
            utilisation_window_.front().step,
            m.step,
            {{"utilisation_p95", p95},
             {"utilisation_median", median},
             {"data_wait_ratio", data_wait},
             {"step_seconds", m.step_seconds},
             {"batch_size", static_cast<double>(context_.batch_size)},
             {"intervals", static_cast<double>(window)}},
            std::move(advice)};
  Report(std::move(f), out);
}

void Doctor::CheckMemory(const StepMetrics& m, std::vector<Finding>* out) {
  if (m.step < options_.warmup_steps || m.memory_allocated_bytes < 0) return;
  Evaluated("MEMORY_FRAGMENTATION", options_.memory_growth_intervals);
  constexpr double kMiB = 1024.0 * 1024.0;
  // Fragmentation: a caching device allocator holding far more than the run ever used at once.
  if (m.memory_peak_bytes >= 0 && m.memory_reserved_bytes > 0) {
    const double held = static_cast<double>(m.memory_reserved_bytes - m.memory_peak_bytes);
    const double share = held / static_cast<double>(m.memory_reserved_bytes);
    const bool over =
        share > options_.fragmentation_share && held > static_cast<double>(options_.fragmentation_min_bytes);
    if (over && fragmentation_run_ == 0) fragmentation_from_step_ = m.step;
    fragmentation_run_ = over ? fragmentation_run_ + 1 : 0;
    if (fragmentation_run_ >= options_.fragmentation_intervals) {
      Report({"MEMORY_FRAGMENTATION",
              Severity::kWarning,
              fragmentation_from_step_,
              m.step,
              {{"unused_reserved_share", share},
               {"reserved_bytes", static_cast<double>(m.memory_reserved_bytes)},
               {"peak_allocated_bytes", static_cast<double>(m.memory_peak_bytes)},
               {"allocated_bytes", static_cast<double>(m.memory_allocated_bytes)},
               {"intervals", static_cast<double>(fragmentation_run_)}},
              "the device's cache holds " + Fixed(static_cast<double>(m.memory_reserved_bytes) / kMiB, 0) +
                  " MiB while the run never had more than " +
                  Fixed(static_cast<double>(m.memory_peak_bytes) / kMiB, 0) + " MiB in use at once: " + Percent(share) +
                  " of it is freed blocks later requests cannot reuse (fragmentation), which ends in an out-of-memory "
                  "error with memory free. Keep tensor shapes steady (pad or bucket variable lengths); the operator "
                  "can start anvild with ANVIL_CUDA_ALLOC_CONF=expandable_segments:true (or max_split_size_mb:N), "
                  "which lets the cache grow one segment instead of stranding old ones"},
             out);
    }
  }
  // Growth: the bytes in use at the interval's end (after the optimizer step, where a healthy
  // loop holds the same tensors each time) rising interval after interval.
  if (last_allocated_ >= 0 && m.memory_allocated_bytes > last_allocated_) {
    if (growth_run_ == 0) {
      growth_from_step_ = steps_.size() >= 2 ? steps_[steps_.size() - 2].step : m.step;
      growth_from_bytes_ = last_allocated_;
    }
    ++growth_run_;
  } else {
    growth_run_ = 0;
  }
  last_allocated_ = m.memory_allocated_bytes;
  const double grown = static_cast<double>(m.memory_allocated_bytes - growth_from_bytes_);
  if (growth_run_ >= options_.memory_growth_intervals &&
      grown > options_.memory_growth_share * static_cast<double>(growth_from_bytes_) &&
      grown > static_cast<double>(options_.memory_growth_min_bytes)) {
    const double per_step = grown / static_cast<double>(std::max<int64_t>(1, m.step - growth_from_step_));
    // On the CPU the allocator is the process's: every CPU job and loader here shares what it
    // counts, so the growth may be another job's. Worth knowing, not a verdict on this one.
    const bool cpu = context_.device == "cpu";
    Report({"MEMORY_FRAGMENTATION",
            cpu ? Severity::kInfo : Severity::kWarning,
            growth_from_step_,
            m.step,
            {{"allocated_bytes", static_cast<double>(m.memory_allocated_bytes)},
             {"allocated_bytes_before", static_cast<double>(growth_from_bytes_)},
             {"bytes_per_step", per_step},
             {"intervals", static_cast<double>(growth_run_)}},
            std::string(cpu ? "memory in use by this process (the CPU allocator, shared by every CPU job and loader "
                              "in it) grew"
                            : "memory in use on the device grew") +
                " at each of the last " + std::to_string(growth_run_) + " intervals, from " +
                Fixed(static_cast<double>(growth_from_bytes_) / kMiB, 1) + " to " +
                Fixed(static_cast<double>(m.memory_allocated_bytes) / kMiB, 1) + " MiB (" + Fixed(per_step / kMiB, 2) +
                " MiB a step): if it is this job's, something keeps each step's tensors alive, and the run will end "
                "out of memory. "
                "Look for outputs, activations or losses stored for later (keep `loss.item()`, or a bounded "
                "number of detached copies), tensors appended to a list every step, and caches without a "
                "bound"},
           out);
  }
}

std::vector<Finding> Doctor::on_epoch(const EpochMetrics& m) {
  std::vector<Finding> out;
  if (m.val_loss && std::isfinite(*m.val_loss)) {
    Evaluated("OVERFITTING", options_.overfit_evaluations + 1);
    const EpochMetrics* prev = nullptr;
    for (auto it = epochs_.rbegin(); it != epochs_.rend() && !prev; ++it)
      if (it->val_loss && std::isfinite(*it->val_loss)) prev = &*it;
    const double gap = *m.val_loss - m.train_loss;
    gap_widening_run_ = prev && gap > *prev->val_loss - prev->train_loss ? gap_widening_run_ + 1 : 0;
    // The evaluation the widening started from: gap_widening_run_ evaluations back (epochs
    // without a finite validation loss are not evaluations).
    const EpochMetrics* from = nullptr;
    int64_t back = 0;
    for (auto it = epochs_.rbegin(); it != epochs_.rend() && gap_widening_run_ > 0; ++it) {
      if (!it->val_loss || !std::isfinite(*it->val_loss)) continue;
      if (++back == gap_widening_run_) {
        from = &*it;
        break;
      }
    }
    // The validation loss stalled meanwhile: a model still generalising better while it fits
    // its training set harder is not yet a problem.
    const bool val_stalled =
        from && from->val_loss && *m.val_loss > (1 - options_.overfit_val_progress) * *from->val_loss;
    if (gap_widening_run_ >= options_.overfit_evaluations && m.train_loss > 0 && val_stalled &&
        *m.val_loss > options_.overfit_gap_ratio * m.train_loss) {
      Report({"OVERFITTING",
              Severity::kWarning,
              from->step,
              m.step,
              {{"train_loss", m.train_loss},
               {"val_loss", *m.val_loss},
               {"gap", gap},
               {"val_to_train", *m.val_loss / m.train_loss},
               {"evaluations_widening", static_cast<double>(gap_widening_run_)}},
              "the validation loss is " + Fixed(*m.val_loss / m.train_loss, 1) +
                  "x the training loss and the gap widened at each of the last " + std::to_string(gap_widening_run_) +
                  " evaluations: the model memorises the training set. Add data or augmentation, regularise "
                  "(weight decay, dropout), or stop earlier (early_stopping on val_loss)"},
             &out);
    }
    if (!best_epoch_ || *m.val_loss < *best_epoch_->val_loss) {
      best_epoch_ = m;
      evaluations_since_best_ = 0;
    } else {
      ++evaluations_since_best_;
      const EpochMetrics& best = *best_epoch_;
      const double rise = *best.val_loss > 0 ? (*m.val_loss - *best.val_loss) / *best.val_loss : 0.0;
      if (evaluations_since_best_ >= options_.overfit_evaluations && rise > options_.overfit_margin &&
          m.train_loss < best.train_loss) {
        Report({"OVERFITTING",
                Severity::kWarning,
                best.step,
                m.step,
                {{"train_loss", m.train_loss},
                 {"val_loss", *m.val_loss},
                 {"gap", *m.val_loss - m.train_loss},
                 {"best_val_loss", *best.val_loss},
                 {"evaluations_since_best", static_cast<double>(evaluations_since_best_)}},
                "the validation loss rose " + Percent(rise) + " above its best (" + Fixed(*best.val_loss, 4) + ", " +
                    std::to_string(evaluations_since_best_) +
                    " evaluations ago) while the training loss kept falling: the model memorises the training set. "
                    "Stop earlier (early_stopping on val_loss restores the best weights), add data or augmentation, "
                    "or regularise (weight decay, dropout)"},
               &out);
      }
    }
  }
  epochs_.push_back(m);
  return out;
}

}  // namespace anvil::train
