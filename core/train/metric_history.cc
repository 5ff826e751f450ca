#include "core/train/metric_history.h"

#include <algorithm>

namespace anvil::train {

MetricHistory::MetricHistory(size_t max_points) : max_points_(std::max(max_points, kMinMaxPoints)) {}

void MetricHistory::record(int64_t step, std::string name, double value) {
  if (!has_group_ || step != group_step_) {
    // A new group: kept when it is the stride-th since the last kept one.
    has_group_ = true;
    group_step_ = step;
    group_kept_ = pending_ + 1 >= stride_;
    pending_ = group_kept_ ? 0 : pending_ + 1;
  }
  if (!group_kept_) return;
  points_.push_back({step, std::move(name), value});
  if (points_.size() > max_points_) Thin();
}

void MetricHistory::Thin() {
  // Keep the groups at even positions; spacing between kept groups doubles.
  std::vector<MetricPoint> kept;
  kept.reserve(points_.size() / 2 + 1);
  size_t group = 0;
  bool last_kept = false;
  for (size_t i = 0; i < points_.size(); ++i) {
    if (i > 0 && points_[i].step != points_[i - 1].step) ++group;
    last_kept = group % 2 == 0;
    if (last_kept) kept.push_back(std::move(points_[i]));
  }
  // The newest group was dropped: it was one old stride after the kept one before it.
  pending_ = last_kept ? 0 : stride_;
  if (!last_kept && has_group_) group_kept_ = false;  // its later values go too
  stride_ *= 2;
  points_ = std::move(kept);
  // One group larger than the bound (never in practice): thin again.
  if (points_.size() > max_points_ && group > 0) Thin();
}

void MetricHistory::restore(std::vector<MetricPoint> points, int64_t stride, int64_t pending) {
  points_ = std::move(points);
  stride_ = std::max<int64_t>(stride, 1);
  pending_ = std::clamp<int64_t>(pending, 0, stride_ - 1);
  has_group_ = false;
  if (points_.size() > max_points_) Thin();
}

}  // namespace anvil::train
