// Whether ops record autograd history on this thread (PyTorch's torch.no_grad()).
// Thread-local, like PyTorch: each worker thread starts with grad mode enabled.
// Thread-safety: each thread reads and sets its own mode; the guards belong to the thread
// that made them.
#pragma once

namespace anvil {

struct GradMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

// Disables history recording in a scope (`with torch.no_grad():`).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// Re-enables recording inside a no-grad scope.
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

// Inference mode: no history, for serving. Same guarantees as NoGradGuard here.
using InferenceMode = NoGradGuard;

// Anomaly detection: backward checks every node's outputs for NaN/inf and names the
// forward op that produced the node.
struct AnomalyMode {
  static bool is_enabled();
  static void set_enabled(bool enabled);
};
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : prev_(AnomalyMode::is_enabled()) { AnomalyMode::set_enabled(true); }
  ~DetectAnomalyGuard() { AnomalyMode::set_enabled(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace anvil
