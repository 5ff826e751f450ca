// The `anvil watch` display: one progress line redrawn in place (epoch/step, a bar, ETA,
// live loss and accuracy, a loss sparkline), and plain lines when stdout is not a terminal.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::client {

class Progress {
 public:
  explicit Progress(bool tty) : tty_(tty) {}
  // Renders one event; returns the text to print (may be empty).
  std::string update(const v1::MetricEvent& e);
  std::string finish();

 private:
  std::string Line() const;
  bool tty_;
  int64_t step_ = 0, total_ = 0, epoch_ = 0, start_ms_ = 0, start_step_ = -1, last_ms_ = 0;
  double loss_ = 0, accuracy_ = -1, samples_per_s_ = 0;
  double loss_scale_ = 0;      // float16 jobs: GradScaler's scale (0: no loss scaling)
  int64_t skipped_steps_ = 0;  // and the steps it skipped
  std::deque<double> losses_;
  bool drawn_ = false;
};

// "▁▂▃▅▇" style sparkline of the values (scaled to their min..max).
std::string sparkline(const std::deque<double>& values);

}  // namespace anvil::client
