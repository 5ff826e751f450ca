// GradScaler (docs/amp.md), after torch.cuda.amp.GradScaler: scales the loss so float16
// gradients do not underflow, unscales them before the optimizer step, skips the step when a
// gradient is not finite, and adapts the scale: backoff_factor on a non-finite step,
// growth_factor after growth_interval finite steps in a row. libtorch has no C++ GradScaler.
//
//   GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.step(optimizer);   // unscales (unless unscale_ was called), steps unless inf/NaN
//   scaler.update();
//
// No host reads per step: the scale, the found-inf flag, the growth tracker and the skipped
// count are tensors on the gradients' device; unscale_ and the finite check are tensor ops,
// step() hands the flag to Optimizer::step_unless (SGD, Adam and AdamW skip inside their fused
// kernels; RMSprop and per-tensor paths read the flag once), and update() applies PyTorch's rule with tensor ops. Only
// the accessors below read (get_scale, growth_tracker, skipped_steps, state_dict: for metrics
// and checkpoints). The misuse PyTorch refuses is refused here too, with its messages.
// Thread-safety: none; a scaler belongs to its training loop's thread, as its optimizer does.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/optim/optimizer.h"

namespace anvil::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});

  // loss * scale (the loss unchanged when disabled).
  Tensor scale(const Tensor& loss);
  // Divides the optimizer's gradients by the scale in place and records whether any is not
  // finite. At most once per optimizer between updates, and not after step().
  void unscale_(Optimizer& optimizer);
  // Unscales if not done yet, then steps unless a gradient was not finite (decided where the
  // flag lives: Optimizer::step_unless).
  void step(Optimizer& optimizer);
  // Adapts the scale from the steps since the last update; forgets them.
  void update();

  // Host reads (each a synchronisation on a GPU): for logs, metrics and checkpoints.
  double get_scale() const;
  int64_t growth_tracker() const;
  int64_t skipped_steps() const;  // steps skipped since construction
  bool is_enabled() const { return options_.enabled; }

  // scale, growth_factor, backoff_factor, growth_interval, growth_tracker (PyTorch's keys).
  std::map<std::string, double> state_dict() const;
  void load_state_dict(const std::map<std::string, double>& state);

 private:
  enum class Stage { kReady, kUnscaled, kStepped };
  struct PerOptimizer {
    Stage stage = Stage::kReady;
    Tensor found_inf;  // float32 [1]: 1 when a gradient was not finite
  };

  GradScalerOptions options_;
  // On the device the loss was scaled on (moved there on first use).
  Tensor scale_;           // float32 [1]
  Tensor growth_tracker_;  // float64 [1]: finite steps in a row since the last change
  Tensor skipped_;         // float64 [1]
  std::map<const Optimizer*, PerOptimizer> per_optimizer_;
};

}  // namespace anvil::optim
