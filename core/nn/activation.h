// Activation and dropout modules: thin wrappers over the functional API.
// Thread-safety: as every Module (core/nn/module.h): one thread trains or evaluates a module
// at a time; the probe they report to is the calling thread's.
#pragma once

#include <string>

#include "core/nn/activation_probe.h"
#include "core/nn/functional.h"
#include "core/nn/module.h"

namespace anvil::nn {

#define ANVIL_ACTIVATION_MODULE(Name, fn)                                  \
  class Name : public Module {                                             \
   public:                                                                 \
    Name() : Module(#Name) {}                                              \
    Tensor forward(const Tensor& x) override { return functional::fn(x); } \
  };
// ReLU, Sigmoid and Tanh also report their output to an open ActivationProbe (the training
// doctor's sampled statistics; a thread-local check otherwise).
#define ANVIL_PROBED_ACTIVATION_MODULE(Name, fn, kind) \
  class Name : public Module {                         \
   public:                                             \
    Name() : Module(#Name) {}                          \
    Tensor forward(const Tensor& x) override {         \
      Tensor y = functional::fn(x);                    \
      record_activation(*this, kind, y);               \
      return y;                                        \
    }                                                  \
  };
ANVIL_PROBED_ACTIVATION_MODULE(ReLU, relu, ActivationKind::kRelu)
ANVIL_PROBED_ACTIVATION_MODULE(Sigmoid, sigmoid, ActivationKind::kSigmoid)
ANVIL_PROBED_ACTIVATION_MODULE(Tanh, tanh, ActivationKind::kTanh)
#undef ANVIL_PROBED_ACTIVATION_MODULE
ANVIL_ACTIVATION_MODULE(SiLU, silu)
ANVIL_ACTIVATION_MODULE(Hardswish, hardswish)
ANVIL_ACTIVATION_MODULE(GELU, gelu)
ANVIL_ACTIVATION_MODULE(ReLU6, relu6)
ANVIL_ACTIVATION_MODULE(Hardsigmoid, hardsigmoid)
ANVIL_ACTIVATION_MODULE(Mish, mish)
ANVIL_ACTIVATION_MODULE(SELU, selu)
ANVIL_ACTIVATION_MODULE(Softsign, softsign)
ANVIL_ACTIVATION_MODULE(LogSigmoid, logsigmoid)
#undef ANVIL_ACTIVATION_MODULE

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override { return functional::leaky_relu(x, slope_); }
  std::string extra_repr() const override { return "negative_slope=" + std::to_string(slope_); }

 private:
  double slope_;
};

class Hardtanh : public Module {
 public:
  explicit Hardtanh(double min_val = -1.0, double max_val = 1.0);
  Tensor forward(const Tensor& x) override { return functional::hardtanh(x, min_val_, max_val_); }
  std::string extra_repr() const override;

 private:
  double min_val_, max_val_;
};

class CELU : public Module {
 public:
  explicit CELU(double alpha = 1.0) : Module("CELU"), alpha_(alpha) {}
  Tensor forward(const Tensor& x) override { return functional::celu(x, alpha_); }
  std::string extra_repr() const override { return "alpha=" + std::to_string(alpha_); }

 private:
  double alpha_;
};

// Hardshrink and Softshrink: the shrinkage threshold lambd.
class Hardshrink : public Module {
 public:
  explicit Hardshrink(double lambd = 0.5) : Module("Hardshrink"), lambd_(lambd) {}
  Tensor forward(const Tensor& x) override { return functional::hardshrink(x, lambd_); }
  std::string extra_repr() const override { return std::to_string(lambd_); }

 private:
  double lambd_;
};

class Softshrink : public Module {
 public:
  explicit Softshrink(double lambd = 0.5) : Module("Softshrink"), lambd_(lambd) {}
  Tensor forward(const Tensor& x) override { return functional::softshrink(x, lambd_); }
  std::string extra_repr() const override { return std::to_string(lambd_); }

 private:
  double lambd_;
};

class Threshold : public Module {
 public:
  Threshold(double threshold, double value) : Module("Threshold"), threshold_(threshold), value_(value) {}
  Tensor forward(const Tensor& x) override { return functional::threshold(x, threshold_, value_); }
  std::string extra_repr() const override {
    return "threshold=" + std::to_string(threshold_) + ", value=" + std::to_string(value_);
  }

 private:
  double threshold_, value_;
};

class GLU : public Module {
 public:
  explicit GLU(int64_t dim = -1) : Module("GLU"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return functional::glu(x, dim_); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

 private:
  int64_t dim_;
};

class Softmin : public Module {
 public:
  explicit Softmin(int64_t dim) : Module("Softmin"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return functional::softmin(x, dim_); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

 private:
  int64_t dim_;
};

// A learnt negative slope: one shared (num_parameters = 1) or one per channel, each
// initialised to init. Parameter "weight" [num_parameters].
class PReLU : public Module {
 public:
  explicit PReLU(int64_t num_parameters = 1, double init = 0.25);
  Tensor forward(const Tensor& x) override { return functional::prelu(x, weight); }
  std::string extra_repr() const override { return "num_parameters=" + std::to_string(num_parameters_); }
  Tensor weight;

 private:
  int64_t num_parameters_;
};

class Softmax : public Module {
 public:
  explicit Softmax(int64_t dim) : Module("Softmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return functional::softmax(x, dim_); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

 private:
  int64_t dim_;
};

class LogSoftmax : public Module {
 public:
  explicit LogSoftmax(int64_t dim) : Module("LogSoftmax"), dim_(dim) {}
  Tensor forward(const Tensor& x) override { return functional::log_softmax(x, dim_); }
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

 private:
  int64_t dim_;
};

// Drops elements with probability p in training mode only: the mode comes from the module
// (train()/eval()), never from a default argument.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return functional::dropout(x, p_, is_training()); }
  std::string extra_repr() const override { return "p=" + std::to_string(p_); }

 private:
  double p_;
};

}  // namespace anvil::nn
