// Sampled activation statistics for the training doctor (core/train/doctor.h: DEAD_RELU,
// SATURATED_ACTIVATION): while an ActivationProbe lives on a thread, every ReLU, Sigmoid and
// Tanh module's forward on that thread records one number about its output, computed on the
// output's device and not read back (the trainer reads them with the interval's losses):
//   - ReLU: the share of its units that are zero for every sample of the batch (dead on this
//     batch). A unit is a feature of a [N, F] output, a channel of a [N, C, ...] one;
//   - Sigmoid: the share of outputs below 0.01 or above 0.99 (derivative under 0.0099);
//   - Tanh: the share of outputs with |y| above 0.99 (derivative under 0.0199).
// The trainer opens a probe on the forward of a metric interval's last step only, so the cost
// is a few reductions per activation layer once per interval; without a probe a forward pays
// one thread-local check.
//
// Thread-safety: a probe is per thread; records come only from the thread that opened it.
#pragma once

#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::nn {

class Module;

enum class ActivationKind { kRelu, kSigmoid, kTanh };
const char* activation_kind_name(ActivationKind k);  // "relu", "sigmoid", "tanh"

struct ActivationRecord {
  const Module* module = nullptr;
  ActivationKind kind = ActivationKind::kRelu;
  Tensor share;  // 0-dim float64 on the output's device: dead units (ReLU) or saturated outputs
};

class ActivationProbe {
 public:
  ActivationProbe();  // starts recording on this thread (a probe already open is set aside)
  ~ActivationProbe();
  ActivationProbe(const ActivationProbe&) = delete;
  ActivationProbe& operator=(const ActivationProbe&) = delete;
  // What was recorded, in forward order (a module run twice records twice).
  const std::vector<ActivationRecord>& records() const { return records_; }

 private:
  friend void record_activation(const Module& m, ActivationKind kind, const Tensor& y);
  std::vector<ActivationRecord> records_;
  ActivationProbe* previous_;
};

// Called by the activation modules with their output; a no-op unless a probe is open here.
void record_activation(const Module& m, ActivationKind kind, const Tensor& y);

}  // namespace anvil::nn
