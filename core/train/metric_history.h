// The metric history a Trainer keeps (and writes into every checkpoint), bounded.
//
// A job may run for millions of steps; an unbounded history grows the process and every
// checkpoint by the same amount, and each checkpoint then takes longer to write than the
// one before. The history instead keeps an even sample of the whole run in at most
// `max_points` points: when full it drops every other step (its stride doubles) and from then
// on keeps one step in `stride`. The newest values are always what the callbacks and the
// service's metric store see; this sample is the curve a C++ caller or a resumed run gets.
//
// The sampling is deterministic (positional, no random reservoir): a run resumed from a
// checkpoint keeps exactly the points the uninterrupted run keeps.
// Thread-safety: none; a history belongs to its trainer, whose thread records into it and copies
// it into checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace anvil::train {

struct MetricPoint {
  int64_t step = 0;
  std::string name;  // "train_loss", "val_accuracy", ...
  double value = 0;
};

class MetricHistory {
 public:
  static constexpr size_t kDefaultMaxPoints = 10000;
  static constexpr size_t kMinMaxPoints = 16;

  explicit MetricHistory(size_t max_points = kDefaultMaxPoints);

  // Records a value at `step`. Consecutive values at the same step form one group, kept or
  // dropped together (the loss, grad norm and learning rate of one interval stay aligned).
  void record(int64_t step, std::string name, double value);

  const std::vector<MetricPoint>& points() const { return points_; }
  // One group in `stride()` is kept (1 until the history first fills).
  int64_t stride() const { return stride_; }
  // Groups seen since the last kept one (checkpointed with the points, so a resumed run
  // continues the same sample).
  int64_t pending() const { return pending_; }
  size_t max_points() const { return max_points_; }

  // Replaces the contents (a checkpoint's), then enforces this history's bound.
  void restore(std::vector<MetricPoint> points, int64_t stride, int64_t pending);

 private:
  void Thin();  // drops every other group and doubles the stride

  size_t max_points_;
  std::vector<MetricPoint> points_;
  int64_t stride_ = 1;
  int64_t pending_ = 0;
  bool has_group_ = false;  // a group is open: the last record()'s step and fate
  int64_t group_step_ = 0;
  bool group_kept_ = false;
};

}  // namespace anvil::train
