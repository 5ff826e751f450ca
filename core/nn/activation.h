// Activation and dropout modules: thin wrappers over the functional API.
#pragma once

#include <string>

#include "core/nn/functional.h"
#include "core/nn/module.h"

namespace anvil::nn {

#define ANVIL_ACTIVATION_MODULE(Name, fn)                                  \
  class Name : public Module {                                             \
   public:                                                                 \
    Name() : Module(#Name) {}                                              \
    Tensor forward(const Tensor& x) override { return functional::fn(x); } \
  };
ANVIL_ACTIVATION_MODULE(ReLU, relu)
ANVIL_ACTIVATION_MODULE(Sigmoid, sigmoid)
ANVIL_ACTIVATION_MODULE(Tanh, tanh)
ANVIL_ACTIVATION_MODULE(SiLU, silu)
ANVIL_ACTIVATION_MODULE(Hardswish, hardswish)
ANVIL_ACTIVATION_MODULE(GELU, gelu)
#undef ANVIL_ACTIVATION_MODULE

class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double negative_slope = 0.01) : Module("LeakyReLU"), slope_(negative_slope) {}
  Tensor forward(const Tensor& x) override { return functional::leaky_relu(x, slope_); }
  std::string extra_repr() const override { return "negative_slope=" + std::to_string(slope_); }

 private:
  double slope_;
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
