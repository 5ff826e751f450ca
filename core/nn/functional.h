// The functional API, after torch.nn.functional (imported as F in examples): stateless
// functions that modules wrap. Activations that are engine ops are re-exported here.
//
// dropout takes `training` as a required argument: PyTorch's F.dropout defaults to
// training=True, so calling it inside a model in eval mode silently keeps dropping
// (PITFALLS 4). Here the caller must say which mode it is in (usually module.is_training()).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/ops/functions.h"
#include "core/tensor/tensor.h"

namespace anvil::nn::functional {

using anvil::gelu;
using anvil::leaky_relu;
using anvil::linear;
using anvil::log_softmax;
using anvil::softmax;
using anvil::softplus;
Tensor relu(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor silu(const Tensor& x);

// Zeroes each element with probability p and scales the rest by 1 / (1 - p) when training;
// the identity otherwise. There is deliberately no default for `training`.
Tensor dropout(const Tensor& x, double p, bool training);

// How a loss reduces its per-element values.
enum class Reduction { kNone, kMean, kSum };

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// Quadratic below beta, linear above (beta = 0 is L1).
Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                      double beta = 1.0);
// Quadratic below delta, delta-scaled linear above: smooth_l1 * delta.
Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean,
                  double delta = 1.0);

struct CrossEntropyOptions {
  Tensor weight;             // per-class weights [C], optional
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::kMean;
};
// Logits [N, C] (or [N, C, d...]) against int64 class indices [N] ([N, d...]), or against
// class probabilities of the logits' shape. Indices outside [0, C) other than ignore_index
// and float targets of the wrong shape are errors that say what was expected.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& options = {});
// Negative log-likelihood of log-probabilities [N, C] for int64 targets [N].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& options = {});

// Binary cross-entropy on probabilities in [0, 1]. Inputs outside [0, 1] are an error that
// points to binary_cross_entropy_with_logits (the usual cause: logits passed as probabilities).
Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight = Tensor(),
                            Reduction reduction = Reduction::kMean);
// Sigmoid + BCE in one numerically stable expression (finite at logits of +-1000);
// pos_weight multiplies the positive term per class.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor(), Reduction reduction = Reduction::kMean);
// KL(target || input) with input as log-probabilities; target as probabilities, or as
// log-probabilities when log_target. kBatchMean is PyTorch's 'batchmean' (sum / N).
enum class KLReduction { kNone, kMean, kSum, kBatchMean };
Tensor kl_div(const Tensor& input, const Tensor& target, KLReduction reduction = KLReduction::kBatchMean,
              bool log_target = false);

}  // namespace anvil::nn::functional

namespace anvil::nn {
namespace F = functional;
}
