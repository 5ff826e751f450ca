// The activations and distances of torch.nn.functional that PyTorch composes from simpler
// ops (or whose kernels compute what such a composition computes), with their modules.
#include <algorithm>
#include <string>

#include "core/nn/activation.h"
#include "core/nn/functional.h"
#include "core/util/error.h"

namespace anvil::nn::functional {
namespace {

// PyTorch's kernels for these activations exist for floating types only.
void RequireFloating(const Tensor& x, const char* op) {
  ANVIL_CHECK_TYPE(x.is_floating_point(), op, ": expected a floating-point tensor, got ", x.dtype(),
                   " (PyTorch's kernel is not implemented for it; convert first, e.g. x.to(kFloat32))");
}

// A bound for clamp that keeps an integer tensor's dtype (a Python float bound would promote
// it, where hardtanh keeps it).
Scalar BoundFor(const Tensor& x, double v) {
  return x.is_floating_point() ? Scalar(v) : Scalar(static_cast<int64_t>(v));
}

}  // namespace

// clamp's gradient is already PyTorch's hardtanh_backward: the gradient strictly inside.
Tensor hardtanh(const Tensor& x, double min_val, double max_val) {
  ANVIL_CHECK(min_val <= max_val, "hardtanh: min_val cannot be greater than max_val, got min_val ", min_val,
              " and max_val ", max_val);
  return clamp(x, BoundFor(x, min_val), BoundFor(x, max_val));
}

Tensor relu6(const Tensor& x) { return hardtanh(x, 0.0, 6.0); }

Tensor hardsigmoid(const Tensor& x) {
  RequireFloating(x, "hardsigmoid");
  return hardtanh(x + Scalar(3), 0.0, 6.0) / Scalar(6);
}

// softplus (threshold 20) rather than log1p(exp(x)): the same values in floating point, and a
// finite gradient where exp(x) overflows.
Tensor mish(const Tensor& x) {
  RequireFloating(x, "mish");
  return x * anvil::tanh(softplus(x));
}

namespace {
// PyTorch's elu kernel computes expm1 below zero, so -0 stays -0; elu here gives +0 there.
// At zero, x times the slope there keeps the sign and has PyTorch's gradient (its negative
// branch at x = 0).
Tensor KeepZeroSign(const Tensor& x, const Tensor& y, double slope_at_zero) {
  return where(x == Scalar(0), x * Scalar(slope_at_zero), y);
}
}  // namespace

Tensor selu(const Tensor& x) {
  RequireFloating(x, "selu");
  constexpr double kAlpha = 1.6732632423543772848170429916717;
  constexpr double kScale = 1.0507009873554804934193349852946;
  return KeepZeroSign(x, elu(x, kAlpha) * Scalar(kScale), kAlpha * kScale);
}

Tensor celu(const Tensor& x, double alpha) {
  RequireFloating(x, "celu");
  ANVIL_CHECK(alpha != 0.0, "celu: alpha cannot be 0 for CELU");
  return KeepZeroSign(x, elu(x / Scalar(alpha), 1.0) * Scalar(alpha), 1.0);
}

Tensor softsign(const Tensor& x) { return x / (abs(x) + Scalar(1)); }

// At x = 0 minimum splits the gradient, 1/2 each way: sigmoid(-0) = 1/2, PyTorch's value.
Tensor logsigmoid(const Tensor& x) {
  RequireFloating(x, "logsigmoid");
  return minimum(x, zeros_like(x)) - log1p(exp(-abs(x)));
}

Tensor hardshrink(const Tensor& x, double lambd) {
  RequireFloating(x, "hardshrink");
  return masked_fill(x, logical_and(x >= Scalar(-lambd), x <= Scalar(lambd)), 0);
}

// In the middle +0, as PyTorch's vectorised loop gives (its scalar loop, for the elements
// left after the last full vector, gives x * 0: -0 for a negative x; docs/conformance.md);
// a NaN stays NaN, with its gradient passed, as in both.
Tensor softshrink(const Tensor& x, double lambd) {
  RequireFloating(x, "softshrink");
  ANVIL_CHECK(lambd >= 0, "softshrink: lambda must be >= 0, got ", lambd);
  const Tensor middle = where(isnan(x), x, zeros_like(x));
  return where(x > Scalar(lambd), x - Scalar(lambd), where(x < Scalar(-lambd), x + Scalar(lambd), middle));
}

Tensor threshold(const Tensor& x, double threshold, double value) {
  return masked_fill(x, x <= Scalar(threshold), value);
}

Tensor glu(const Tensor& x, int64_t dim) {
  ANVIL_CHECK(x.dim() > 0, "glu does not support scalars because halving size must be even");
  const int64_t d = wrap_dim(dim, x.dim(), "glu");
  const int64_t n = x.size(d);
  ANVIL_CHECK(n % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ", n);
  RequireFloating(x, "glu");
  return x.narrow(d, 0, n / 2) * anvil::sigmoid(x.narrow(d, n / 2, n / 2));
}

Tensor softmin(const Tensor& x, int64_t dim) { return softmax(-x, dim); }

Tensor prelu(const Tensor& x, const Tensor& weight) {
  ANVIL_CHECK(weight.dim() <= 1,
              "prelu: Expected `weight` to be a scalar or 1D tensor, but got: ndim = ", weight.dim());
  ANVIL_CHECK_TYPE(x.dtype() == weight.dtype(), "prelu: Type promoting not supported. Got ", x.dtype(), " and ",
                   weight.dtype());
  const int64_t channels = x.dim() >= 2 ? x.size(1) : 1;
  ANVIL_CHECK(weight.numel() == 1 || weight.numel() == channels,
              "Mismatch of parameter numbers and input channel size. Found parameter numbers = ", weight.numel(),
              " and channel size = ", channels, ".");
  // One slope per channel of dim 1, broadcast over the dims after it.
  IntArray shape;
  if (weight.numel() > 1) {
    shape = IntArray(x.dim() - 1, 1);
    shape[0] = channels;
  }
  const Tensor w = weight.reshape(shape);
  return where(x > Scalar(0), x, w * x);
}

Tensor normalize(const Tensor& x, double p, int64_t dim, double eps) {
  const Tensor denom = clamp(norm(x, p, {dim}, true), Scalar(eps), std::nullopt);
  return x / denom.expand_as(x);
}

Tensor cosine_similarity(const Tensor& x1, const Tensor& x2, int64_t dim, double eps) {
  const ScalarType common = result_type(x1, x2);
  ANVIL_CHECK_TYPE(is_floating_point(common), "cosine_similarity: expected common dtype to be floating point, yet ",
                   "common dtype is ", common);
  auto both = broadcast_tensors({x1.to(common), x2.to(common)});
  // Each norm clamped below at eps, the clamp outside the graph (PyTorch clamps in place under
  // no_grad): where it binds, the gradient is that of the unclamped norm.
  auto clamped_norm = [&](const Tensor& t) {
    const Tensor n = norm(t, 2.0, {dim}, true);
    const Tensor held = n.detach();
    return n + (clamp(held, Scalar(eps), std::nullopt) - held);
  };
  return sum((both[0] / clamped_norm(both[0])) * (both[1] / clamped_norm(both[1])), {dim});
}

Tensor pairwise_distance(const Tensor& x1, const Tensor& x2, double p, double eps, bool keepdim) {
  const int64_t innermost = std::max(x1.dim(), x2.dim()) - 1;
  return norm(x1 - x2 + Scalar(eps), p, {innermost}, keepdim);
}

}  // namespace anvil::nn::functional

namespace anvil::nn {

Hardtanh::Hardtanh(double min_val, double max_val) : Module("Hardtanh"), min_val_(min_val), max_val_(max_val) {
  ANVIL_CHECK(min_val <= max_val, "Hardtanh: min_val cannot be greater than max_val, got min_val ", min_val,
              " and max_val ", max_val);
}

std::string Hardtanh::extra_repr() const {
  return "min_val=" + std::to_string(min_val_) + ", max_val=" + std::to_string(max_val_);
}

PReLU::PReLU(int64_t num_parameters, double init) : Module("PReLU"), num_parameters_(num_parameters) {
  ANVIL_CHECK(num_parameters >= 1, "PReLU: num_parameters must be at least 1, got ", num_parameters);
  weight = full({num_parameters}, init);
  register_parameter("weight", weight);
}

}  // namespace anvil::nn
