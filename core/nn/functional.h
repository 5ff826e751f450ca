// The functional API, after torch.nn.functional (imported as F in examples): stateless
// functions that modules wrap. Activations that are engine ops are re-exported here.
//
// dropout takes `training` as a required argument: PyTorch's F.dropout defaults to
// training=True, so calling it inside a model in eval mode silently keeps dropping
// (PITFALLS 4). Here the caller must say which mode it is in (usually module.is_training()).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

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
Tensor hardswish(const Tensor& x);

// ---- more activations (core/nn/functional_activations.cc), as torch.nn.functional ----
// x clamped to [min_val, max_val]; the gradient passes strictly inside only (PyTorch's rule,
// where clamp's passes at the bounds too).
Tensor hardtanh(const Tensor& x, double min_val = -1.0, double max_val = 1.0);
Tensor relu6(const Tensor& x);                     // hardtanh(x, 0, 6)
Tensor hardsigmoid(const Tensor& x);               // relu6(x + 3) / 6, gradient 1/6 strictly inside (-3, 3)
Tensor mish(const Tensor& x);                      // x tanh(softplus(x))
Tensor selu(const Tensor& x);                      // scale * elu(x, alpha), PyTorch's fixed constants
Tensor celu(const Tensor& x, double alpha = 1.0);  // max(0, x) + min(0, alpha (exp(x / alpha) - 1))
Tensor softsign(const Tensor& x);                  // x / (1 + |x|)
Tensor logsigmoid(const Tensor& x);                // log(sigmoid(x)), stable: min(x, 0) - log1p(exp(-|x|))
// 0 where -lambd <= x <= lambd, x elsewhere (NaN stays NaN).
Tensor hardshrink(const Tensor& x, double lambd = 0.5);
// x - lambd above lambd, x + lambd below -lambd, 0 between; lambd >= 0.
Tensor softshrink(const Tensor& x, double lambd = 0.5);
// value where x <= threshold, x elsewhere; the input's dtype is kept.
Tensor threshold(const Tensor& x, double threshold, double value);
// a * sigmoid(b) for the two halves a, b of x along dim (of even size).
Tensor glu(const Tensor& x, int64_t dim = -1);
Tensor softmin(const Tensor& x, int64_t dim);  // softmax(-x, dim)
// x where x > 0, weight * x elsewhere; weight has 1 element or one per channel (dim 1).
Tensor prelu(const Tensor& x, const Tensor& weight);

// ---- distances ----
// x divided by its p-norm over dim, the norm clamped below at eps.
Tensor normalize(const Tensor& x, double p = 2.0, int64_t dim = 1, double eps = 1e-12);
// The cosine of the angle between x1 and x2 (broadcast) along dim: each divided by its 2-norm
// clamped below at eps, then the products summed. As PyTorch, the clamp does not enter the
// gradient. Integer inputs compute in float32.
Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim = 1, double eps = 1e-8);
// The p-norm of x1 - x2 + eps over the last dim.
Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p = 2.0, double eps = 1e-6, bool keepdim = false);

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
  Tensor weight;  // per-class weights [C], optional
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

// log(1 + exp(-y x)) for labels y in {-1, 1}, as PyTorch computes it (log1p of exp: inf for
// -y x above about 88, like PyTorch's).
Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::kMean);
// 1 - cos(x1, x2) where y = 1, max(0, cos - margin) where y = -1, 0 for other labels; the
// cosine over the last dim of [N, D] (or [D]) inputs, with 1e-12 added to each squared norm.
Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                             Reduction reduction = Reduction::kMean);
// max(0, -y (x1 - x2) + margin).
Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin = 0.0,
                           Reduction reduction = Reduction::kMean);
// Poisson negative log-likelihood: exp(x) - t x for log_input, else x - t log(x + eps); `full`
// adds Stirling's approximation t log t - t + log(2 pi t) / 2 where t > 1.
Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input = true, bool full = false,
                        double eps = 1e-8, Reduction reduction = Reduction::kMean);

// ---- padding, convolution, pooling ----

// Pads the last dims: {left, right} for the last dim, then {top, bottom} for the one before,
// like torch.nn.functional.pad. Constant value (zero by default).
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);

struct Conv2dParams {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};  // symmetric zero padding (H, W)
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool same = false;  // padding "same": output H, W = input H, W (stride 1 only)
};
// 2-D convolution (cross-correlation, as PyTorch): input [N, C, H, W] or [C, H, W], weight
// [OC, C / groups, KH, KW], bias [OC]. Computed as im2col + one batched GEMM per group.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), const Conv2dParams& p = {});
// 1-D convolution: input [N, C, L], weight [OC, C / groups, K]; the 2-D path with H = 1.
Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias = Tensor(), int64_t stride = 1,
              int64_t padding = 0, int64_t dilation = 1, int64_t groups = 1, bool same = false);

struct Pool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0: the kernel size (PyTorch's default)
  std::array<int64_t, 2> padding{0, 0};
  bool count_include_pad = true;  // avg_pool2d only: padded positions count in the divisor
  // Output size rounded up: a last window that starts inside the input (or its left/top
  // padding) and runs past the end is kept, over the elements it covers.
  bool ceil_mode = false;
  std::array<int64_t, 2> dilation{1, 1};  // max_pool2d only: the spacing of a window's elements
  // avg_pool2d only: every window's sum is divided by this (non-zero) number instead.
  std::optional<int64_t> divisor_override;
};
// PyTorch's pooling_output_shape for one spatial dim: floor (ceil with ceil_mode) of
// (in + 2 padding - dilation (kernel - 1) - 1) / stride, plus one; with ceil_mode the last
// window must start inside the input or its left/top padding. Below 1: the input is too small.
int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation, bool ceil_mode);
Tensor max_pool2d(const Tensor& input, const Pool2dParams& p);
// max_pool2d and where each maximum came from: int64 indices, shaped like the output, into
// each [H, W] plane flattened (h * W + w), as PyTorch's return_indices. The first maximum of
// a window wins a tie; the output's gradient goes to that element.
std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Pool2dParams& p);
// Each window's sum over the elements it covers, divided by the window's size (padding
// included when count_include_pad, the overhang of ceil_mode never), by the number of input
// elements it covers (count_include_pad = false), or by divisor_override.
Tensor avg_pool2d(const Tensor& input, const Pool2dParams& p);

struct MaxUnpool2dParams {
  std::array<int64_t, 2> kernel{2, 2};
  std::array<int64_t, 2> stride{0, 0};  // 0: the kernel size
  std::array<int64_t, 2> padding{0, 0};
  // {H, W} or {N, C, H, W}; default (in - 1) * stride - 2 * padding + kernel, and a given size
  // must lie strictly within one stride of that (PyTorch's rule).
  std::optional<std::vector<int64_t>> output_size;
};
// The partial inverse of max_pool2d: zeros of the output size with each input element written
// at its index (as max_pool2d_with_indices returns them). Gradient: the output's gradient at
// each index.
Tensor max_unpool2d(const Tensor& input, const Tensor& indices, const MaxUnpool2dParams& p);
// Averages over the adaptive windows PyTorch uses: rows floor(i H / oh) to ceil((i + 1) H / oh).
Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> output_size);

// 1-D pooling over [N, C, L] (or [C, L]): the 2-D pooling with a window one row high, so the
// rules (output size, ceil_mode, padding at most half the kernel, divisors, ties, NaN) and the
// indices (positions along L) are the same. stride 0: the kernel size.
struct Pool1dParams {
  int64_t kernel = 2, stride = 0, padding = 0, dilation = 1;  // dilation: max pooling only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool1d only
};
Tensor max_pool1d(const Tensor& input, const Pool1dParams& p);
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, const Pool1dParams& p);
Tensor avg_pool1d(const Tensor& input, const Pool1dParams& p);
Tensor adaptive_avg_pool1d(const Tensor& input, int64_t output_size);

// ---- normalisation, embedding ----

// Batch normalisation over every dim but the channel dim 1. Training: normalises with the
// batch mean and the biased variance, and updates running_mean / running_var (when defined)
// with momentum and the UNBIASED variance, as PyTorch does. Eval: uses the running estimates.
Tensor batch_norm(const Tensor& input, Tensor running_mean, Tensor running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum = 0.1, double eps = 1e-5);
// Normalises over the last normalized_shape.size() dims.
Tensor layer_norm(const Tensor& input, const IntArray& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Normalises [N, C, ...] over groups of C / num_groups channels (and all spatial positions).
Tensor group_norm(const Tensor& input, int64_t num_groups, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// Rows of weight [num, dim] at int64 indices; the padding_idx row gets no gradient (a negative
// padding_idx counts from the end, as PyTorch's; none: every row learns).
// With max_norm, first renormalises IN PLACE each row of weight the indices name whose
// norm_type-norm exceeds max_norm (embedding_renorm_), as PyTorch does; the renormalisation is
// not differentiated.
Tensor embedding(const Tensor& indices, const Tensor& weight, std::optional<int64_t> padding_idx = std::nullopt,
                 std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
// PyTorch's embedding_renorm_: each distinct row i of weight [num, dim] named by `indices` whose
// p-norm exceeds max_norm is scaled by max_norm / (norm + 1e-7), in place, without autograd.
Tensor& embedding_renorm_(Tensor& weight, const Tensor& indices, double max_norm, double norm_type);
// padding_idx in [-num, num) as a row index (negative counts from the end), -1 for none;
// anything else is an error naming the range.
int64_t resolve_padding_idx(std::optional<int64_t> padding_idx, int64_t num_embeddings);

}  // namespace anvil::nn::functional

namespace anvil::nn {
namespace F = functional;
}
