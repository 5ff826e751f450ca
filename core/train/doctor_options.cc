// DoctorOptions by name (set_doctor_option): the table of every threshold, its field and the
// range it accepts, so a job spec can set any of them and a bad value is refused with its range.
#include <cmath>
#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "core/train/doctor.h"

namespace anvil::train {
namespace {

enum class Range {
  kShare,        // a double in [0, 1]
  kNonNegative,  // a finite double >= 0
  kWindow,       // a whole number from 1 to kMaxDoctorWindow
  kSteps,        // a whole number from 0 to 2^40 (steps, values)
  kBytes,        // a whole number from 0 to 2^53
};

struct Field {
  const char* name;
  std::variant<double DoctorOptions::*, int64_t DoctorOptions::*> member;
  Range range;
};

const std::vector<Field>& Fields() {
  using O = DoctorOptions;
  static const std::vector<Field> kFields = {
      {"data_stall_warning", &O::data_stall_warning, Range::kShare},
      {"data_stall_info", &O::data_stall_info, Range::kShare},
      {"data_stall_min_wait_seconds", &O::data_stall_min_wait_seconds, Range::kNonNegative},
      {"warmup_steps", &O::warmup_steps, Range::kSteps},
      {"grad_ema_alpha", &O::grad_ema_alpha, Range::kShare},
      {"grad_growth", &O::grad_growth, Range::kNonNegative},
      {"grad_window", &O::grad_window, Range::kWindow},
      {"divergence_factor", &O::divergence_factor, Range::kNonNegative},
      {"divergence_intervals", &O::divergence_intervals, Range::kSteps},
      {"plateau_min_improvement", &O::plateau_min_improvement, Range::kShare},
      {"plateau_window", &O::plateau_window, Range::kWindow},
      {"oscillation_share", &O::oscillation_share, Range::kShare},
      {"oscillation_amplitude", &O::oscillation_amplitude, Range::kNonNegative},
      {"oscillation_min_progress", &O::oscillation_min_progress, Range::kShare},
      {"oscillation_window", &O::oscillation_window, Range::kWindow},
      {"overfit_evaluations", &O::overfit_evaluations, Range::kWindow},
      {"overfit_margin", &O::overfit_margin, Range::kNonNegative},
      {"overfit_gap_ratio", &O::overfit_gap_ratio, Range::kNonNegative},
      {"overfit_val_progress", &O::overfit_val_progress, Range::kShare},
      {"update_ratio_low", &O::update_ratio_low, Range::kNonNegative},
      {"update_ratio_high", &O::update_ratio_high, Range::kNonNegative},
      {"update_band_intervals", &O::update_band_intervals, Range::kWindow},
      {"amp_skip_share", &O::amp_skip_share, Range::kShare},
      {"amp_scale_floor", &O::amp_scale_floor, Range::kNonNegative},
      {"input_scale_limit", &O::input_scale_limit, Range::kNonNegative},
      {"loss_input_min_values", &O::loss_input_min_values, Range::kSteps},
      {"host_sync_intervals", &O::host_sync_intervals, Range::kWindow},
      {"vanishing_ratio", &O::vanishing_ratio, Range::kNonNegative},
      {"vanishing_intervals", &O::vanishing_intervals, Range::kWindow},
      {"dead_relu_share", &O::dead_relu_share, Range::kShare},
      {"saturated_share", &O::saturated_share, Range::kShare},
      {"activation_intervals", &O::activation_intervals, Range::kWindow},
      {"overhead_small_step_seconds", &O::overhead_small_step_seconds, Range::kNonNegative},
      {"overhead_dispatch_share", &O::overhead_dispatch_share, Range::kNonNegative},
      {"overhead_intervals", &O::overhead_intervals, Range::kWindow},
      {"utilisation_p95", &O::utilisation_p95, Range::kShare},
      {"utilisation_window", &O::utilisation_window, Range::kWindow},
      {"fragmentation_share", &O::fragmentation_share, Range::kShare},
      {"fragmentation_min_bytes", &O::fragmentation_min_bytes, Range::kBytes},
      {"fragmentation_intervals", &O::fragmentation_intervals, Range::kWindow},
      {"memory_growth_intervals", &O::memory_growth_intervals, Range::kWindow},
      {"memory_growth_share", &O::memory_growth_share, Range::kNonNegative},
      {"memory_growth_min_bytes", &O::memory_growth_min_bytes, Range::kBytes},
      {"straggler_factor", &O::straggler_factor, Range::kNonNegative},
      {"straggler_min_seconds", &O::straggler_min_seconds, Range::kNonNegative},
      {"straggler_intervals", &O::straggler_intervals, Range::kWindow},
  };
  return kFields;
}

std::string Number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

// "" when `v` is in `range`, else what was expected.
std::string CheckRange(Range range, double v) {
  if (!std::isfinite(v)) return "expected a finite number, got " + Number(v);
  const auto whole = [&](double lo, double hi, const char* what) -> std::string {
    if (v != std::floor(v) || v < lo || v > hi) {
      return std::string("expected ") + what + ", a whole number from " + Number(lo) + " to " + Number(hi) + ", got " +
             Number(v);
    }
    return "";
  };
  switch (range) {
    case Range::kShare:
      return v >= 0 && v <= 1 ? "" : "expected a share from 0 to 1, got " + Number(v);
    case Range::kNonNegative:
      return v >= 0 ? "" : "expected a number of 0 or more, got " + Number(v);
    case Range::kWindow:
      return whole(1, static_cast<double>(kMaxDoctorWindow), "a window");
    case Range::kSteps:
      return whole(0, static_cast<double>(int64_t{1} << 40), "a count");
    case Range::kBytes:
      return whole(0, static_cast<double>(int64_t{1} << 53), "a size in bytes");
  }
  return "";
}

}  // namespace

const std::vector<std::string>& doctor_option_names() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> names;
    for (const Field& f : Fields()) names.emplace_back(f.name);
    return names;
  }();
  return kNames;
}

std::string set_doctor_option(DoctorOptions& options, const std::string& name, double value) {
  for (const Field& f : Fields()) {
    if (name != f.name) continue;
    if (std::string why = CheckRange(f.range, value); !why.empty()) return why;
    if (const auto* d = std::get_if<double DoctorOptions::*>(&f.member)) {
      options.** d = value;
    } else {
      options.*std::get<int64_t DoctorOptions::*>(f.member) = static_cast<int64_t>(value);
    }
    return "";
  }
  std::string known;
  for (const Field& f : Fields()) known += (known.empty() ? "" : ", ") + std::string(f.name);
  return "no threshold named \"" + name + "\"; expected one of " + known;
}

}  // namespace anvil::train
