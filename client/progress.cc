#include "client/progress.h"

#include <absl/strings/str_format.h>

#include <algorithm>
#include <cstdio>

namespace anvil::client {

std::string sparkline(const std::deque<double>& values) {
  static const char* kBars[] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
  if (values.empty()) return "";
  const auto [lo, hi] = std::minmax_element(values.begin(), values.end());
  std::string out;
  for (double v : values) {
    const int k = *hi > *lo ? static_cast<int>((v - *lo) / (*hi - *lo) * 7.0 + 0.5) : 0;
    out += kBars[std::clamp(k, 0, 7)];
  }
  return out;
}

std::string Progress::Line() const {
  std::string bar;
  if (total_ > 0) {
    const int width = 24;
    const int filled = static_cast<int>(std::clamp<int64_t>(step_ * width / std::max<int64_t>(total_, 1), 0, width));
    // Strings here are appended piecewise: GCC 12 at -O3 misreads the temporaries of
    // "[" + string + ... as an overlapping memcpy (-Werror=restrict).
    bar.push_back('[');
    bar.append(static_cast<size_t>(filled), '#');
    bar.append(static_cast<size_t>(width - filled), '.');
    bar.append("] ");
  }
  std::string eta;
  if (total_ > step_ && start_step_ >= 0 && step_ > start_step_ && last_ms_ > start_ms_) {
    const double ms_per_step = static_cast<double>(last_ms_ - start_ms_) / static_cast<double>(step_ - start_step_);
    const double left = ms_per_step * static_cast<double>(total_ - step_) / 1000.0;
    eta = absl::StrFormat("ETA %.0fs  ", left);
  }
  const std::string acc = accuracy_ >= 0 ? absl::StrFormat("  val acc %.2f%%", accuracy_ * 100.0) : "";
  // Loss scaling (float16): a scale that keeps falling, or skips that keep coming, is the first
  // sign of an overflowing layer.
  const std::string amp =
      loss_scale_ > 0 ? absl::StrFormat("  scale %g, %d skipped", loss_scale_, skipped_steps_) : std::string();
  return absl::StrFormat("epoch %d  step %d/%d %s%sloss %.4f%s%s  %s", epoch_, step_, total_, bar, eta, loss_, acc, amp,
                         sparkline(losses_));
}

std::string Progress::update(const v1::MetricEvent& e) {
  if (e.total_steps() > 0) total_ = e.total_steps();
  if (start_step_ < 0 && e.has_step_metrics()) {
    start_step_ = e.step();
    start_ms_ = e.unix_ms();
  }
  last_ms_ = std::max(last_ms_, e.unix_ms());
  step_ = std::max(step_, e.step());
  if (e.has_step_metrics()) {
    loss_ = e.step_metrics().loss();
    samples_per_s_ = e.step_metrics().samples_per_second();
    loss_scale_ = e.step_metrics().loss_scale();
    skipped_steps_ = e.step_metrics().skipped_steps();
    losses_.push_back(loss_);
    if (losses_.size() > 40) losses_.pop_front();
  }
  if (e.has_step_metrics()) epoch_ = e.epoch() + 1;
  if (e.has_epoch_metrics()) {
    epoch_ = e.epoch() + 1;
    if (e.epoch_metrics().has_val_accuracy()) accuracy_ = e.epoch_metrics().val_accuracy();
  }
  std::string out;
  if (e.has_finding()) {  // the training doctor: on its own line, the progress line redrawn after
    if (tty_ && drawn_) out += '\n';
    out += e.finding().severity() + " " + e.finding().code() + ": " + e.finding().advice() + "\n";
    drawn_ = false;
    return out;
  }
  if (e.event_case() == v1::MetricEvent::kState) {
    if (tty_ && drawn_) out += '\n';
    out += "state ";
    out += v1::JobState_Name(e.state());
    if (!e.message().empty()) out.append(": ").append(e.message());
    out += '\n';
    drawn_ = false;
    return out;
  }
  if (tty_) {
    drawn_ = true;
    return "\r\033[K" + Line();
  }
  if (e.has_epoch_metrics()) return Line() + "\n";
  return "";
}

std::string Progress::finish() { return tty_ && drawn_ ? "\n" : ""; }

}  // namespace anvil::client
