// Normalisation layers and Embedding.
// Thread-safety: as every module (module.h); a batch norm in training mode writes its running
// statistics, so it is never shared.
#pragma once

#include <optional>

#include "core/nn/functional.h"
#include "core/nn/module.h"

namespace anvil::nn {

// BatchNorm over [N, C] / [N, C, L] (1d) or [N, C, H, W] (2d): momentum 0.1, eps 1e-5, biased
// variance to normalise and unbiased for the running estimate; running statistics in eval.
// Buffers: running_mean, running_var, num_batches_tracked (int64, counts training batches).
// momentum = std::nullopt (PyTorch's momentum=None): the running statistics are the
// cumulative average of every batch's, each batch weighted 1 / num_batches_tracked.
class BatchNorm : public Module {
 public:
  BatchNorm(const char* type, int64_t num_features, int64_t input_dims_a, int64_t input_dims_b, double eps,
            std::optional<double> momentum, bool affine, bool track_running_stats);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;

  double eps() const { return eps_; }

  Tensor weight, bias, running_mean, running_var, num_batches_tracked;
  int64_t num_features;

 private:
  int64_t dims_a_, dims_b_;  // accepted input ranks
  double eps_;
  std::optional<double> momentum_;
};

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm1d", num_features, 2, 3, eps, momentum, affine, track_running_stats) {}
};

class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNorm("BatchNorm2d", num_features, 4, 4, eps, momentum, affine, track_running_stats) {}
};

class LayerNorm : public Module {
 public:
  explicit LayerNorm(IntArray normalized_shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  IntArray shape_;
  double eps_;
};

class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(const Tensor& x) override;
  std::string extra_repr() const override;
  Tensor weight, bias;

 private:
  int64_t groups_, channels_;
  double eps_;
};

// A lookup table [num_embeddings, embedding_dim], initialised N(0, 1); the padding_idx row
// (negative: counted from the end, as PyTorch's) starts at zero and never receives a gradient. With max_norm, each
// forward first renormalises (in place) the rows it looks up whose norm_type-norm exceeds max_norm.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim, std::optional<int64_t> padding_idx = std::nullopt,
            std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
  Tensor forward(const Tensor& indices) override;
  std::string extra_repr() const override;
  Tensor weight;

 private:
  int64_t padding_idx_;  // resolved: a row index, or -1 for none
  std::optional<double> max_norm_;
  double norm_type_;
};

}  // namespace anvil::nn
