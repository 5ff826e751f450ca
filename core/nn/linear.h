// Fully connected layers: y = x W^T + b.
// Thread-safety: as every module (module.h).
#pragma once

#include "core/nn/module.h"

namespace anvil::nn {

// Linear(in, out): weight [out, in] and bias [out], initialised like PyTorch
// (kaiming-uniform with a = sqrt(5), i.e. U(-1/sqrt(in), 1/sqrt(in)), bias alike).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one op (linear_relu), for a Sequential whose next layer is a ReLU.
  Tensor forward_relu(const Tensor& x);
  std::string extra_repr() const override;
  void reset_parameters();

  Tensor weight;
  Tensor bias;  // undefined without bias
  int64_t in_features, out_features;

 private:
  void check_input(const Tensor& x) const;
};

// The identity, for optional branches of a model.
class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
};

// Flattens dims [start_dim, end_dim] (default: everything but the batch dim).
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  int64_t start_dim_, end_dim_;
};

// Splits dim `dim` into `sizes` (torch.nn.Unflatten): [N, 64] -> [N, 1, 8, 8].
class Unflatten : public Module {
 public:
  Unflatten(int64_t dim, IntArray sizes);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

 private:
  int64_t dim_;
  IntArray sizes_;
};

}  // namespace anvil::nn
