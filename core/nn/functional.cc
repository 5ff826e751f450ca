// The functional API: activations, dropout and losses. Losses are composites of engine ops,
// so their backward comes from the ops' rules and needs no code here.
#include "core/nn/functional.h"

#include <string>

#include "core/autograd/function.h"
#include "core/ops/nll_loss.h"
#include "core/tensor/random.h"
#include "core/util/error.h"

namespace anvil::nn::functional {
namespace {

Tensor Reduce(const Tensor& x, Reduction r) {
  switch (r) {
    case Reduction::kNone:
      return x;
    case Reduction::kSum:
      return x.sum();
    case Reduction::kMean:
      return x.mean();
  }
  return x;
}

// Element-wise losses compare input and target one to one. Broadcasting [N, 1] against [N]
// would silently compare every input with every target, so differing shapes are an error.
void CheckSameShape(const Tensor& input, const Tensor& target, const char* loss) {
  ANVIL_CHECK(input.sizes() == target.sizes(), loss, ": input shape ", shape_str(input), " and target shape ",
              shape_str(target),
              " differ; broadcasting them would compare every input with every target. "
              "Reshape one of them (e.g. input.squeeze(-1) or target.unsqueeze(-1))");
}

// A per-class weight [C] shaped to broadcast over logits of rank `dim` with classes on `cdim`.
Tensor ClassWeight(const Tensor& weight, int64_t dim, int64_t cdim, ScalarType dtype) {
  IntArray shape(static_cast<size_t>(dim), 1);
  shape[static_cast<size_t>(cdim)] = weight.numel();
  return weight.to(dtype).reshape(shape);
}

}  // namespace

Tensor relu(const Tensor& x) { return anvil::relu(x); }
Tensor sigmoid(const Tensor& x) { return anvil::sigmoid(x); }
Tensor tanh(const Tensor& x) { return anvil::tanh(x); }
Tensor silu(const Tensor& x) { return anvil::silu(x); }
Tensor hardswish(const Tensor& x) { return anvil::hardswish(x); }

Tensor dropout(const Tensor& x, double p, bool training) {
  ANVIL_CHECK(p >= 0.0 && p <= 1.0, "dropout: expected p in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  const Tensor keep = bernoulli(full_like(x, 1.0 - p));
  return x * keep * (1.0 / (1.0 - p));
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  CheckSameShape(input, target, "mse_loss");
  const Tensor d = input - target;
  return Reduce(d * d, reduction);
}

Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  CheckSameShape(input, target, "l1_loss");
  return Reduce(abs(input - target), reduction);
}

Tensor smooth_l1_loss(const Tensor& input, const Tensor& target, Reduction reduction, double beta) {
  CheckSameShape(input, target, "smooth_l1_loss");
  ANVIL_CHECK(beta >= 0.0, "smooth_l1_loss: expected beta >= 0, got ", beta);
  const Tensor d = abs(input - target);
  if (beta == 0.0) return Reduce(d, reduction);
  // The quadratic branch reads d clamped to beta: where() passes it a zero gradient elsewhere,
  // and 0 * d with d = inf would be NaN.
  const Tensor dq = clamp(d, std::nullopt, beta);
  return Reduce(where(d < beta, dq * dq * (0.5 / beta), d - 0.5 * beta), reduction);
}

Tensor huber_loss(const Tensor& input, const Tensor& target, Reduction reduction, double delta) {
  CheckSameShape(input, target, "huber_loss");
  ANVIL_CHECK(delta > 0.0, "huber_loss: expected delta > 0, got ", delta);
  const Tensor d = abs(input - target);
  const Tensor dq = clamp(d, std::nullopt, delta);  // as smooth_l1_loss: finite gradients at d = inf
  return Reduce(where(d < delta, dq * dq * 0.5, (d - 0.5 * delta) * delta), reduction);
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const CrossEntropyOptions& o) {
  ANVIL_CHECK(log_probs.dim() >= 1, "nll_loss: expected input of shape [N, C] or [N, C, d...], got ",
              shape_str(log_probs));
  ANVIL_CHECK_TYPE(target.dtype() == kInt64 || target.dtype() == kInt32,
                   "nll_loss: expected int64 class indices as "
                   "the target, got ",
                   target.dtype());
  // Flatten to [M, C] rows and [M] targets: classes on dim 1 (or dim 0 without a batch).
  const bool batched = log_probs.dim() >= 2;
  const int64_t C = batched ? log_probs.size(1) : log_probs.size(0);
  IntArray expected_target = log_probs.sizes();
  expected_target.erase(expected_target.begin() + (batched ? 1 : 0));
  ANVIL_CHECK(target.sizes() == expected_target, "nll_loss: expected a target of shape ", shape_str(expected_target),
              " for input of shape ", shape_str(log_probs), ", got ", shape_str(target));
  // [N, C] is already rows (no view ops: they would cost more than this loss's kernel).
  const Tensor rows = log_probs.dim() == 2 ? log_probs
                      : batched            ? log_probs.movedim(1, -1).reshape({-1, C})
                                           : log_probs.reshape({1, C});
  const Tensor t = target.dim() == 1 ? target.to(kInt64) : target.to(kInt64).reshape({-1});
  // The op checks the weights' shape ([C]); they take the log-probabilities' dtype here.
  const Tensor weight = o.weight.defined() ? o.weight.to(rows.dtype()) : Tensor();
  const int64_t reduction = o.reduction == Reduction::kNone   ? nll::kNone
                            : o.reduction == Reduction::kMean ? nll::kMean
                                                              : nll::kSum;
  // One fused row (the mean divides by the counted rows' weight, as PyTorch's does).
  const Tensor loss = nll_loss_rows(rows, t, weight, reduction, o.ignore_index)[0];
  return o.reduction == Reduction::kNone ? loss.reshape(target.sizes()) : loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const CrossEntropyOptions& o) {
  ANVIL_CHECK(logits.is_floating_point(), "cross_entropy: expected floating-point logits, got ", logits.dtype());
  ANVIL_CHECK(o.label_smoothing >= 0.0 && o.label_smoothing <= 1.0,
              "cross_entropy: expected label_smoothing in [0, 1], got ", o.label_smoothing);
  const int64_t cdim = logits.dim() >= 2 ? 1 : 0;
  const int64_t C = logits.size(cdim);
  const Tensor logp = log_softmax(logits, cdim);
  if (target.is_floating_point()) {
    ANVIL_CHECK(target.sizes() == logits.sizes(),
                "cross_entropy: a floating-point target holds class probabilities "
                "and must have the logits' shape ",
                shape_str(logits), ", got ", shape_str(target),
                "; for class indices pass an int64 tensor of shape [N]");
    Tensor t = target;
    if (o.label_smoothing > 0) t = t * (1.0 - o.label_smoothing) + o.label_smoothing / static_cast<double>(C);
    Tensor terms = logp * t;
    if (o.weight.defined()) terms = terms * ClassWeight(o.weight, logits.dim(), cdim, logp.dtype());
    const Tensor per_sample = -terms.sum({cdim});
    switch (o.reduction) {
      case Reduction::kNone:
        return per_sample;
      case Reduction::kSum:
        return per_sample.sum();
      case Reduction::kMean:
        return per_sample.mean();  // over samples, as PyTorch does
    }
  }
  const Tensor nll = nll_loss(logp, target, o);
  if (o.label_smoothing == 0.0) return nll;
  // PyTorch's rule: (1 - e) * nll + e / C * (-sum_c w_c log p_c), same reduction and masking.
  Tensor smooth = logp;
  if (o.weight.defined()) smooth = smooth * ClassWeight(o.weight, logits.dim(), cdim, logp.dtype());
  Tensor per_sample = -smooth.sum({cdim});
  const Tensor valid = target != o.ignore_index;
  per_sample = where(valid, per_sample, 0.0);
  Tensor smooth_loss;
  switch (o.reduction) {
    case Reduction::kNone:
      smooth_loss = per_sample;
      break;
    case Reduction::kSum:
      smooth_loss = per_sample.sum();
      break;
    case Reduction::kMean: {
      Tensor denom = valid.to(logp.dtype()).sum();
      if (o.weight.defined()) {
        denom =
            where(valid,
                  index_select(o.weight.to(logp.dtype()), 0, where(valid, target.to(kInt64), int64_t{0}).reshape({-1}))
                      .reshape(target.sizes()),
                  0.0)
                .sum();
      }
      smooth_loss = per_sample.sum() / denom;
      break;
    }
  }
  return nll * (1.0 - o.label_smoothing) + smooth_loss * (o.label_smoothing / static_cast<double>(C));
}

namespace {
// The element-wise loss with PyTorch's gradients. Its logs are clamped at -100, so p = 0 or
// 1 gives a finite loss; the gradient (p - y) / (p (1 - p)) has its denominator clamped at
// 1e-12 likewise (composed from clamp(log(p)), the gradient at p = 0 would be 0 * inf = NaN).
// The target's gradient is not clamped (below).
struct BinaryCrossEntropy : autograd::Function<BinaryCrossEntropy> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor p, Tensor y) {
    ctx->save_for_backward({p, y});
    return -(y * clamp(log(p), -100.0, std::nullopt) + (1.0 - y) * clamp(log1p(-p), -100.0, std::nullopt));
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const std::vector<Tensor> saved = ctx->get_saved_variables();
    const Tensor &p = saved[0], &y = saved[1];
    Tensor gp, gy;
    if (ctx->needs_input_grad(0)) gp = g[0] * (p - y) / clamp(p * (1.0 - p), 1e-12, std::nullopt);
    // The target's gradient is -logit(p), unclamped: +-inf at p = 0 and 1, as PyTorch's
    // binary_cross_entropy_target_backward.
    if (ctx->needs_input_grad(1)) gy = g[0] * -log(p / (1.0 - p));
    return {gp, gy};
  }
};
}  // namespace

Tensor binary_cross_entropy(const Tensor& input, const Tensor& target, const Tensor& weight, Reduction reduction) {
  CheckSameShape(input, target, "binary_cross_entropy");
  if (input.numel() > 0) {
    const bool outside = ((input < 0.0) | (input > 1.0)).any().item<bool>();
    ANVIL_CHECK(!outside, "binary_cross_entropy: input values must be probabilities in [0, 1], got values from ",
                input.min().item<double>(), " to ", input.max().item<double>(),
                ". If these are logits (raw scores), use binary_cross_entropy_with_logits, which applies the sigmoid "
                "itself and is numerically stable");
  }
  Tensor loss = BinaryCrossEntropy::apply(input, target);
  if (weight.defined()) loss = loss * weight;
  return Reduce(loss, reduction);
}

Tensor binary_cross_entropy_with_logits(const Tensor& x, const Tensor& target, const Tensor& weight,
                                        const Tensor& pos_weight, Reduction reduction) {
  CheckSameShape(x, target, "binary_cross_entropy_with_logits");
  // softplus(-x) = -log(sigmoid(x)), finite for any x and smooth at 0: its gradient is
  // -sigmoid(-x), so the loss's is sigmoid(x) - y everywhere (composed from |x| and max(-x, 0),
  // both kinks at 0 gave 0 there: a zero-initialised output layer got the wrong gradient).
  const Tensor log_sig_neg = softplus(-x);
  Tensor loss;
  if (pos_weight.defined()) {
    loss = (1.0 - target) * x + (1.0 + (pos_weight - 1.0) * target) * log_sig_neg;
  } else {
    loss = (1.0 - target) * x + log_sig_neg;
  }
  if (weight.defined()) loss = loss * weight;
  return Reduce(loss, reduction);
}

Tensor soft_margin_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  return Reduce(log1p(exp(-input * target)), reduction);
}

Tensor cosine_embedding_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                             Reduction reduction) {
  ANVIL_CHECK(input1.dim() == 1 || input1.dim() == 2, "cosine_embedding_loss: expected 1-D or 2-D inputs, got ",
              input1.dim(), "-D");
  ANVIL_CHECK(input1.sizes() == input2.sizes(), "cosine_embedding_loss: expected inputs of one shape, got ",
              shape_str(input1), " and ", shape_str(input2));
  ANVIL_CHECK(target.dim() == input1.dim() - 1, "cosine_embedding_loss: expected a ", input1.dim() - 1,
              "-D target, got ", target.dim(), "-D");
  // PyTorch's formula, term by term (its epsilon on each squared norm included).
  const int64_t d = input1.dim() - 1;
  const Tensor prod = (input1 * input2).sum({d});
  const Tensor mag1 = (input1 * input1).sum({d}) + 1e-12;
  const Tensor mag2 = (input2 * input2).sum({d}) + 1e-12;
  const Tensor cos = prod / sqrt(mag1 * mag2);
  const Tensor zero = zeros_like(cos);
  const Tensor pos = where(target == 1, 1.0 - cos, zero);
  const Tensor neg = where(target == -1, clamp(cos - margin, 0.0, std::nullopt), zero);
  return Reduce(pos + neg, reduction);
}

Tensor margin_ranking_loss(const Tensor& input1, const Tensor& input2, const Tensor& target, double margin,
                           Reduction reduction) {
  return Reduce(clamp(-target * (input1 - input2) + margin, 0.0, std::nullopt), reduction);
}

Tensor poisson_nll_loss(const Tensor& input, const Tensor& target, bool log_input, bool full, double eps,
                        Reduction reduction) {
  Tensor loss = log_input ? exp(input) - target * input : input - target * log(input + eps);
  if (full) {
    const Tensor stirling = target * log(target) - target + 0.5 * log(2.0 * 3.14159265358979323846 * target);
    loss = loss + where(target <= 1, Scalar(0.0), stirling);
  }
  return Reduce(loss, reduction);
}

Tensor kl_div(const Tensor& input, const Tensor& target, KLReduction reduction, bool log_target) {
  CheckSameShape(input, target, "kl_div");
  Tensor loss;
  if (log_target) {
    loss = exp(target) * (target - input);
  } else {
    // 0 * log 0 = 0 by convention.
    const Tensor safe = where(target > 0.0, target, 1.0);
    loss = where(target > 0.0, target * (log(safe) - input), 0.0);
  }
  switch (reduction) {
    case KLReduction::kNone:
      return loss;
    case KLReduction::kSum:
      return loss.sum();
    case KLReduction::kMean:
      return loss.mean();
    case KLReduction::kBatchMean:
      return loss.sum() / static_cast<double>(input.dim() > 0 ? input.size(0) : 1);
  }
  return loss;
}

}  // namespace anvil::nn::functional
