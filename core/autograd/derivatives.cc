// Backward rules, one per differentiable row of the op table (PyTorch's derivatives.yaml,
// as C++). Each is written with ordinary ops so that create_graph=true records the
// backward itself. Inputs: ctx (attrs, input metadata, saved tensors) and one gradient per
// output; result: one gradient per input (undefined = none).
#include "core/autograd/derivatives.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/autograd/grad_mode.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/ops/nll_loss.h"
#include "core/util/error.h"

namespace anvil::autograd {
namespace {

using Grads = std::vector<Tensor>;
using Ctx = BackwardCtx;
constexpr bool Yes = true;
constexpr bool No = false;

Tensor Zeros(const TensorMeta& m) { return zeros(m.sizes, TensorOptions(m.dtype).with_device(m.device)); }

// The reduced gradient broadcast back over the input's shape.
Tensor ExpandReduced(const Tensor& g, const TensorMeta& in, const ReduceArgs& a) {
  const int64_t nd = static_cast<int64_t>(in.sizes.size());
  Tensor r = g;
  if (!a.keepdim && nd > 0) {
    IntArray dims;
    if (a.dims.empty()) {
      dims.resize(nd);
      std::iota(dims.begin(), dims.end(), 0);
    } else {
      for (int64_t d : a.dims) dims.push_back(wrap_dim(d, nd, "reduce"));
      std::sort(dims.begin(), dims.end());
    }
    for (int64_t d : dims) r = r.unsqueeze(d);
  }
  return r.expand(in.sizes);
}

int64_t ReducedCount(const TensorMeta& in, const ReduceArgs& a) {
  if (a.dims.empty()) return numel_of(in.sizes);
  int64_t n = 1;
  for (int64_t d : a.dims) n *= in.sizes.empty() ? 1 : in.sizes[wrap_dim(d, in.sizes.size(), "reduce")];
  return n;
}

// ---- unary ----
Grads NegB(Ctx&, const Grads& g) { return {-g[0]}; }
Grads AbsB(Ctx& c, const Grads& g) { return {g[0] * sign(c.saved_input(0))}; }
Grads ZeroB(Ctx& c, const Grads& g) { return {zeros_like(g[0])}; }
Grads ExpB(Ctx& c, const Grads& g) { return {g[0] * c.saved_output(0)}; }
Grads Expm1B(Ctx& c, const Grads& g) { return {g[0] * (c.saved_output(0) + 1)}; }
Grads LogB(Ctx& c, const Grads& g) { return {g[0] / c.saved_input(0)}; }
Grads Log1pB(Ctx& c, const Grads& g) { return {g[0] / (c.saved_input(0) + 1)}; }
Grads SqrtB(Ctx& c, const Grads& g) { return {g[0] / (c.saved_output(0) * 2)}; }
Grads RsqrtB(Ctx& c, const Grads& g) {
  Tensor o = c.saved_output(0);
  return {g[0] * o * o * o * -0.5};
}
Grads ReciprocalB(Ctx& c, const Grads& g) {
  Tensor o = c.saved_output(0);
  return {-g[0] * o * o};
}
Grads SinB(Ctx& c, const Grads& g) { return {g[0] * cos(c.saved_input(0))}; }
Grads CosB(Ctx& c, const Grads& g) { return {-g[0] * sin(c.saved_input(0))}; }
Grads TanB(Ctx& c, const Grads& g) {  // d tan = 1 + tan^2
  Tensor o = c.saved_output(0);
  return {g[0] * (1 + o * o)};
}
Grads AtanB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  return {g[0] / (1 + x * x)};
}
Grads TanhB(Ctx& c, const Grads& g) {
  Tensor o = c.saved_output(0);
  return {g[0] * (1 - o * o)};
}
Grads SigmoidB(Ctx& c, const Grads& g) {
  Tensor o = c.saved_output(0);
  return {g[0] * o * (1 - o)};
}
Grads ReluB(Ctx& c, const Grads& g) { return {relu_backward(g[0], c.saved_output(0))}; }
// Linear in the gradient; the result only selects (its derivative is zero almost everywhere).
Grads ReluBackwardB(Ctx& c, const Grads& g) { return {relu_backward(g[0], c.saved_input(1)), Tensor()}; }
Grads LeakyReluB(Ctx& c, const Grads& g) {
  return {where(c.saved_input(0) > 0, g[0], g[0] * c.args<LeakyReluArgs>().negative_slope)};
}
Grads EluB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  return {
      where(x <= 0, g[0] * exp(x) * c.args<EluArgs>().alpha, g[0])};  // a NaN input passes the gradient, as PyTorch's
}
Grads GeluB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  if (c.args<GeluArgs>().tanh_approximation) {
    const double k = std::sqrt(2.0 / M_PI);
    Tensor x2 = x * x;
    Tensor t = tanh((x + x2 * x * 0.044715) * k);
    Tensor d = (t + 1) * 0.5 + x * (1 - t * t) * (x2 * (3 * 0.044715) + 1) * (0.5 * k);
    return {g[0] * d};
  }
  Tensor cdf = (erf(x * M_SQRT1_2) + 1) * 0.5;
  Tensor pdf = exp(x * x * -0.5) * (1.0 / std::sqrt(2 * M_PI));
  return {g[0] * (cdf + x * pdf)};
}
Grads SiluB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  Tensor s = sigmoid(x);
  return {g[0] * s * (x * (1 - s) + 1)};
}
// PyTorch's hardswish_backward: 0 below -3, x / 3 + 1/2 on [-3, 3], 1 above.
Grads HardswishB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  return {where(x < -3.0, Scalar(0.0), where(x <= 3.0, g[0] * (x / 3.0 + 0.5), g[0]))};
}
Grads SoftplusB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  const double beta = c.args<SoftplusArgs>().beta, thr = c.args<SoftplusArgs>().threshold;
  return {where(x * beta > thr, g[0], g[0] * sigmoid(x * beta))};
}
Grads ErfB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  return {g[0] * exp(-(x * x)) * (2.0 / std::sqrt(M_PI))};
}
Grads PowScalarB(Ctx& c, const Grads& g) {
  const double e = c.args<PowScalarArgs>().exponent;
  if (e == 0) return {zeros_like(g[0])};
  return {g[0] * pow(c.saved_input(0), e - 1) * e};
}
Grads ClampB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  const ClampArgs& a = c.args<ClampArgs>();
  // Strictly inside the bounds, as PyTorch 2.x: exactly at a scalar bound the gradient is 0
  // (a NaN input gets none either).
  Tensor keep = ones_like(x).to(kBool);
  if (a.min) keep = keep & (x > Scalar(*a.min));
  if (a.max) keep = keep & (x < Scalar(*a.max));
  return {where(keep, g[0], Scalar(0.0))};
}

// ---- binary ----
Grads AddB(Ctx& c, const Grads& g) {
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0], c.input(0).sizes);
  if (c.needs_input_grad(1))
    r[1] = sum_to(c.args<ScaleArgs>().alpha == 1 ? g[0] : g[0] * c.args<ScaleArgs>().alpha, c.input(1).sizes);
  return r;
}
Grads SubB(Ctx& c, const Grads& g) {
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0], c.input(0).sizes);
  if (c.needs_input_grad(1)) r[1] = sum_to(g[0] * -c.args<ScaleArgs>().alpha, c.input(1).sizes);
  return r;
}
Grads MulB(Ctx& c, const Grads& g) {
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0] * c.saved_input(1), c.input(0).sizes);
  if (c.needs_input_grad(1)) r[1] = sum_to(g[0] * c.saved_input(0), c.input(1).sizes);
  return r;
}
Grads DivB(Ctx& c, const Grads& g) {
  Tensor b = c.saved_input(1);
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0] / b, c.input(0).sizes);
  if (c.needs_input_grad(1)) r[1] = sum_to(-g[0] * c.saved_input(0) / (b * b), c.input(1).sizes);
  return r;
}
Grads PowB(Ctx& c, const Grads& g) {
  Tensor a = c.saved_input(0), b = c.saved_input(1);
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0] * b * pow(a, b - 1), c.input(0).sizes);
  if (c.needs_input_grad(1)) {
    Tensor la = where(a > 0, log(a), Scalar(0.0));  // d/db a^b = a^b log a (0 where a == 0)
    r[1] = sum_to(g[0] * c.saved_output(0) * la, c.input(1).sizes);
  }
  return r;
}
// g split between the two inputs of a broadcasting binary op by weights (each computed only
// when its input needs a gradient), reduced to each input's shape.
template <typename WeightA, typename WeightB>
Grads SplitBetween(Ctx& c, const Tensor& g, WeightA weight_a, WeightB weight_b) {
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g * weight_a().to(g.dtype()), c.input(0).sizes);
  if (c.needs_input_grad(1)) r[1] = sum_to(g * weight_b().to(g.dtype()), c.input(1).sizes);
  return r;
}
Grads MaxMinB(Ctx& c, const Grads& g, bool is_max) {
  // PyTorch's rule: a tie splits the gradient in half; otherwise the side that is not beaten
  // takes it, so where either input is NaN (no order) both do.
  Tensor a = c.saved_input(0), b = c.saved_input(1);
  const auto weight = [&](const Tensor& beaten) {
    return where(a == b, Scalar(0.5), where(beaten, Scalar(0.0), Scalar(1.0)));
  };
  return SplitBetween(
      c, g[0], [&] { return weight(is_max ? a < b : a > b); }, [&] { return weight(is_max ? a > b : a < b); });
}
// fmax / fmin: the winner takes the gradient, a tie splits it, and against a NaN the number
// takes it all (PyTorch's rule).
Grads FmaxFminB(Ctx& c, const Grads& g, bool is_max) {
  Tensor a = c.saved_input(0), b = c.saved_input(1);
  const Tensor wa =
      where(a == b, Scalar(0.5), where(logical_or(is_max ? a > b : a < b, isnan(b)), Scalar(1.0), Scalar(0.0)));
  return SplitBetween(
      c, g[0], [&] { return wa; }, [&] { return 1 - wa; });
}
Grads FmaxB(Ctx& c, const Grads& g) { return FmaxFminB(c, g, true); }
Grads FminB(Ctx& c, const Grads& g) { return FmaxFminB(c, g, false); }
Grads MaximumB(Ctx& c, const Grads& g) { return MaxMinB(c, g, true); }
Grads MinimumB(Ctx& c, const Grads& g) { return MaxMinB(c, g, false); }
// a - round(a / b) b: d/da = 1, d/db = -round(a / b), with remainder's floor or fmod's trunc.
Grads RemainderOfB(Ctx& c, const Grads& g, Tensor (*round_quotient)(const Tensor&)) {
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0], c.input(0).sizes);
  if (c.needs_input_grad(1)) {
    r[1] = sum_to(-g[0] * round_quotient(c.saved_input(0) / c.saved_input(1)), c.input(1).sizes);
  }
  return r;
}
Grads RemainderB(Ctx& c, const Grads& g) { return RemainderOfB(c, g, &anvil::floor); }
Grads FmodB(Ctx& c, const Grads& g) { return RemainderOfB(c, g, &anvil::trunc); }
Grads Atan2B(Ctx& c, const Grads& g) {
  Tensor y = c.saved_input(0), x = c.saved_input(1);
  Tensor den = x * x + y * y;
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = sum_to(g[0] * x / den, c.input(0).sizes);
  if (c.needs_input_grad(1)) r[1] = sum_to(-g[0] * y / den, c.input(1).sizes);
  return r;
}
Grads WhereB(Ctx& c, const Grads& g) {
  Tensor cond = c.saved_input(0);
  Grads r(3);
  if (c.needs_input_grad(1)) r[1] = sum_to(where(cond, g[0], Scalar(0.0)), c.input(1).sizes);
  if (c.needs_input_grad(2)) r[2] = sum_to(where(cond, Scalar(0.0), g[0]), c.input(2).sizes);
  return r;
}
Grads CastB(Ctx& c, const Grads& g) { return {g[0].to(c.input(0).dtype)}; }
Grads CloneB(Ctx&, const Grads& g) { return {g[0]}; }

// ---- reductions ----
Grads SumB(Ctx& c, const Grads& g) { return {ExpandReduced(g[0], c.input(0), c.args<ReduceArgs>())}; }
Grads MeanB(Ctx& c, const Grads& g) {
  return {ExpandReduced(g[0], c.input(0), c.args<ReduceArgs>()) /
          static_cast<double>(ReducedCount(c.input(0), c.args<ReduceArgs>()))};
}
// d prod / d x_i is the product of the others. Without a zero anywhere that is prod / x_i;
// with one, the product of the elements before x_i times those after it (exclusive cumprods
// from both ends), which is exact at zeros and gives NaN where inf meets 0: PyTorch's
// prod_backward and prod_safe_zeros_backward.
Grads ProdB(Ctx& c, const Grads& g) {
  const Tensor x = c.saved_input(0);
  const ReduceArgs& a = c.args<ReduceArgs>();
  const Tensor gx = ExpandReduced(g[0], c.input(0), a);
  if (x.dim() == 0) return {gx};
  const int64_t zeros_in_x = sum(x == Scalar(0.0)).item<int64_t>();
  if (zeros_in_x == 0) return {gx * (ExpandReduced(c.saved_output(0), c.input(0), a) / x)};
  // Over all elements, two zeros make every gradient 0 (PyTorch's shortcut, NaN-free with infs).
  if (a.dims.empty() && zeros_in_x > 1) return {zeros_like(x)};
  // The reduced dims moved last and flattened into one of length r.
  const int64_t nd = x.dim();
  std::vector<bool> reduced(nd, a.dims.empty());
  for (int64_t d : a.dims) reduced[wrap_dim(d, nd, "prod")] = true;
  IntArray perm, rows;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduced[d]) {
      perm.push_back(d);
      rows.push_back(x.size(d));
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (reduced[d]) perm.push_back(d);
  }
  const Tensor moved = x.permute(perm);
  IntArray flat_sizes = rows;
  flat_sizes.push_back(-1);
  const Tensor flat = moved.reshape(flat_sizes);
  const int64_t r = flat.size(-1);
  IntArray one_sizes = rows;
  one_sizes.push_back(1);
  const Tensor one = ones(one_sizes, TensorOptions(x.dtype()).with_device(x.device()));
  const Tensor before = cumprod(cat({one, flat.narrow(-1, 0, r - 1)}, -1), -1);
  const Tensor after = flip(cumprod(cat({one, flip(flat.narrow(-1, 1, r - 1), {-1})}, -1), -1), {-1});
  IntArray inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<int64_t>(i);
  return {gx * (before * after).reshape(moved.sizes()).permute(inverse)};
}
Grads AmaxAminB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  Tensor hit = (x == ExpandReduced(c.saved_output(0), c.input(0), c.args<ReduceArgs>())).to(x.dtype());
  ReduceArgs keep = c.args<ReduceArgs>();
  keep.keepdim = true;
  Tensor count = ExpandReduced(sum(hit, keep.dims, true), c.input(0), keep);
  return {ExpandReduced(g[0], c.input(0), c.args<ReduceArgs>()) * hit / count};
}
Grads MaxMinDimB(Ctx& c, const Grads& g) {
  const auto& in = c.input(0);
  const int64_t d = wrap_dim(c.args<ReduceArgs>().dims[0], std::max<size_t>(in.sizes.size(), 1), "max");
  Tensor idx = c.saved_output(1);
  Tensor gv = g[0];
  if (!c.args<ReduceArgs>().keepdim && !in.sizes.empty()) {
    idx = idx.unsqueeze(d);
    gv = gv.unsqueeze(d);
  }
  if (in.sizes.empty()) return {gv.reshape({})};
  return {scatter(Zeros(in), d, idx, gv)};
}
Grads VarB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  const double n = static_cast<double>(ReducedCount(c.input(0), c.args<ReduceArgs>()));
  Tensor mu = mean(x, c.args<ReduceArgs>().dims, true);
  return {ExpandReduced(g[0], c.input(0), c.args<ReduceArgs>()) * (x - mu) *
          (2.0 / (n - c.args<ReduceArgs>().correction))};
}
Grads NormB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  Tensor out = ExpandReduced(c.saved_output(0), c.input(0), c.args<ReduceArgs>());
  Tensor ge = ExpandReduced(g[0], c.input(0), c.args<ReduceArgs>());
  const double p = c.args<ReduceArgs>().p;
  if (p == 1) return {ge * sign(x)};
  if (std::isinf(p)) {
    Tensor hit = (abs(x) == out).to(x.dtype());
    ReduceArgs keep = c.args<ReduceArgs>();
    Tensor count = ExpandReduced(sum(hit, keep.dims, true), c.input(0), [&] {
      keep.keepdim = true;
      return keep;
    }());
    return {ge * sign(x) * hit / count};
  }
  if (p == 0) return {zeros_like(x)};  // a count of non-zeros: flat
  Tensor safe = where(out == 0, Scalar(1.0), out);
  if (p == 2) return {where(out == 0, Scalar(0.0), ge * x / safe)};
  // sign(x) |x|^(p-1), written so that a zero entry contributes 0 for p < 1 too (|0|^(p-1) is
  // inf there, and x |x|^(p-2) would make 0 * inf = NaN): PyTorch's norm_backward.
  Tensor term = p < 2 ? sign(x) * where(x == 0, Scalar(0.0), pow(abs(x), p - 1)) : x * pow(abs(x), p - 2);
  return {where(out == 0, Scalar(0.0), ge * term / pow(safe, p - 1))};
}
Grads LogSumExpB(Ctx& c, const Grads& g) {
  Tensor x = c.saved_input(0);
  return {ExpandReduced(g[0], c.input(0), c.args<ReduceArgs>()) *
          exp(x - ExpandReduced(c.saved_output(0), c.input(0), c.args<ReduceArgs>()))};
}
Grads CumSumB(Ctx& c, const Grads& g) {
  const int64_t d = c.args<DimArgs>().dim;
  if (g[0].dim() == 0) return {g[0]};
  return {sum(g[0], {d}, true) - cumsum(g[0], d) + g[0]};
}
// Without zeros, grad_i = sum_{j>=i} g_j y_j / x_i: a reversed cumsum over x. A zero at z makes
// every later y vanish, so elements before the first zero keep that formula (the terms past z
// are 0) with a safe divisor; the first zero's own gradient is sum_{j>=z} g_j prod_{i<=j,i!=z} x_i,
// the reversed cumsum of g times the cumprod with that one factor set to 1; elements after it
// get 0 (each of their products holds the zero). Composed of differentiable ops, so second
// derivatives follow (PyTorch's cumprod_backward computes the same).
// With zeros and a graph to record, the products that omit each x_k are formed one k at a
// time (O(n^2), PyTorch's differentiable path): the O(n) formula's zero branches are constant,
// so their derivatives with respect to the zeros themselves would be lost.
Tensor CumProdGradWithZeros(const Tensor& x, const Tensor& g, int64_t d) {
  const int64_t n = x.size(d);
  std::vector<Tensor> columns;
  for (int64_t k = 0; k < n; ++k) {
    const Tensor before = prod(x.narrow(d, 0, k), {d}, true);
    const Tensor after = cumprod(x.narrow(d, k + 1, n - k - 1), d);
    const Tensor omitted = cat({before, before * after}, d);
    columns.push_back(sum(g.narrow(d, k, n - k) * omitted, {d}, true));
  }
  return cat(columns, d);
}

Grads CumProdB(Ctx& c, const Grads& g) {
  const Tensor x = c.saved_input(0), y = c.saved_output(0);
  if (g[0].numel() == 0) return {g[0]};
  if (g[0].dim() == 0) return {g[0]};
  const int64_t d = wrap_dim(c.args<DimArgs>().dim, g[0].dim(), "cumprod");
  auto reversed_cumsum = [&](const Tensor& t) { return flip(cumsum(flip(t, {d}), d), {d}); };
  const Tensor is_zero = x == 0;
  if (!any(is_zero).item<bool>()) return {reversed_cumsum(g[0] * y) / x};
  if (GradMode::is_enabled()) return {CumProdGradWithZeros(x, g[0], d)};
  const Tensor zeros_so_far = cumsum(is_zero, d);
  const Tensor before = zeros_so_far == 0;
  const Tensor safe_x = where(before, x, ones_like(x));
  // Before the first zero only the products up to it count (past it they hold the zero; with
  // an inf among them they would be NaN, not 0, and PyTorch leaves them out too).
  const Tensor no_zero = reversed_cumsum(where(before, g[0] * y, zeros_like(y))) / safe_x;
  const Tensor first_zero = logical_and(is_zero, zeros_so_far == 1);
  const Tensor at_zero = reversed_cumsum(g[0] * cumprod(where(first_zero, ones_like(x), x), d));
  return {where(before, no_zero, where(first_zero, at_zero, zeros_like(x)))};
}

// d y_j / d x_i = exp(x_i - y_j) for j >= i, so grad_i = sum_{j>=i} g_j exp(x_i - y_j): a
// reversed logcumsumexp of log|g| - y, split by the sign of g so the logs are defined
// (TensorFlow's and PyTorch's formula), then exp(. + x). Composed of differentiable ops, so
// second derivatives follow.
Grads LogCumSumExpB(Ctx& c, const Grads& g) {
  const Tensor x = c.saved_input(0), y = c.saved_output(0);
  if (g[0].dim() == 0 || g[0].numel() == 0) return {g[0]};
  const int64_t d = wrap_dim(c.args<DimArgs>().dim, g[0].dim(), "logcumsumexp");
  // The dtype's lowest finite value stands for log(0): with -inf, the second derivative
  // would meet -inf - -inf.
  const ScalarType dt = g[0].dtype();
  const Scalar lowest = dt == kFloat64    ? std::numeric_limits<double>::lowest()
                        : dt == kFloat16  ? -65504.0
                        : dt == kBFloat16 ? -3.3895313892515355e38
                                          : static_cast<double>(std::numeric_limits<float>::lowest());
  const Tensor log_abs = log(abs(g[0]));
  auto reversed_lcse = [&](const Tensor& t) { return flip(logcumsumexp(flip(t, {d}), d), {d}); };
  const Tensor pos = exp(reversed_lcse(where(g[0] > 0.0, log_abs, lowest) - y) + x);
  const Tensor neg = exp(reversed_lcse(where(g[0] < 0.0, log_abs, lowest) - y) + x);
  return {pos - neg};
}

// ---- linear algebra, softmax ----
// A transposed dense matrix (Linear's weight.t()): its gradient is computed as the transpose
// of the gradient of the dense matrix, so that it arrives at the parameter dense, with nothing
// to copy (the same product, (g^T a)^T = a^T g).
bool TransposedDense(const Tensor& t) {
  return t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 && t.stride(1) == t.size(0);
}

Grads MmB(Ctx& c, const Grads& g) {
  Grads r(2);
  const Tensor a = c.saved_input(0), b = c.saved_input(1);
  const bool ta = TransposedDense(a), tb = TransposedDense(b);
  if (c.needs_input_grad(0) && c.needs_input_grad(1)) {
    // Independent products: mm_pair may run them side by side.
    auto [ga, gb] = mm_pair(ta ? b : g[0], ta ? g[0].t() : b.t(), tb ? g[0].t() : a.t(), tb ? a : g[0]);
    return {ta ? ga.t() : ga, tb ? gb.t() : gb};
  }
  if (c.needs_input_grad(0)) r[0] = ta ? mm(b, g[0].t()).t() : mm(g[0], b.t());
  if (c.needs_input_grad(1)) r[1] = tb ? mm(g[0].t(), a).t() : mm(a.t(), g[0]);
  return r;
}
// linear: out = x W^T + b. dx = g W and dW = g^T x are independent products (mm_pair may run
// them side by side); db sums g over the rows.
// The gradients of x W^T + b for the output gradient g.
Grads LinearGrads(Ctx& c, const Tensor& g) {
  Grads r(3);
  const Tensor x = c.saved_input(0), w = c.saved_input(1);
  if (c.needs_input_grad(0) && c.needs_input_grad(1)) {
    auto [gx, gw] = mm_pair(g, w, g.t(), x);
    r[0] = gx;
    r[1] = gw;
  } else if (c.needs_input_grad(0)) {
    r[0] = mm(g, w);
  } else if (c.needs_input_grad(1)) {
    r[1] = mm(g.t(), x);
  }
  if (c.needs_input_grad(2)) r[2] = sum(g, {0});
  return r;
}
Grads LinearB(Ctx& c, const Grads& g) { return LinearGrads(c, g[0]); }
// linear_relu: through the relu (its saved output masks g), then as linear.
Grads LinearReluB(Ctx& c, const Grads& g) { return LinearGrads(c, relu_backward(g[0], c.saved_output(0))); }
Grads BmmB(Ctx& c, const Grads& g) {
  Grads r(2);
  if (c.needs_input_grad(0)) r[0] = bmm(g[0], c.saved_input(1).transpose(1, 2));
  if (c.needs_input_grad(1)) r[1] = bmm(c.saved_input(0).transpose(1, 2), g[0]);
  return r;
}
// Softmax and log_softmax: one kernel pass over (grad, output) rows, unless create_graph
// asks for the same formula recorded from differentiable ops.
bool SoftmaxGradKernel(const Tensor& g, const Tensor& y) {
  return !GradMode::is_enabled() && g.dtype() == y.dtype() && g.sizes() == y.sizes();
}
Grads SoftmaxB(Ctx& c, const Grads& g) {
  Tensor y = c.saved_output(0);
  const int64_t d = c.args<DimArgs>().dim;
  if (y.dim() == 0) return {zeros_like(g[0])};
  if (SoftmaxGradKernel(g[0], y)) return {dispatch1(OpId::SoftmaxBackward, {g[0], y}, c.attrs())};
  return {y * (g[0] - sum(g[0] * y, {d}, true))};
}
Grads LogSoftmaxB(Ctx& c, const Grads& g) {
  Tensor y = c.saved_output(0);
  const int64_t d = c.args<DimArgs>().dim;
  if (y.dim() == 0) return {zeros_like(g[0])};
  if (SoftmaxGradKernel(g[0], y)) return {dispatch1(OpId::LogSoftmaxBackward, {g[0], y}, c.attrs())};
  return {g[0] - exp(y) * sum(g[0], {d}, true)};
}
// Negative log-likelihood: -w_t g / D at each counted row's target, 0 elsewhere. Without
// create_graph the NllLossBackward kernel writes it in one pass; with it, the same values are
// scattered by differentiable ops so that the backward is itself recorded.
Grads NllLossB(Ctx& c, const Grads& g) {
  Grads r(static_cast<size_t>(c.num_inputs()));
  if (!c.needs_input_grad(0) || !g[0].defined()) return r;
  const Tensor target = c.saved_input(1), total_weight = c.saved_output(1);
  const bool weighted = c.num_inputs() > 2;
  const NllLossArgs& a = c.args<NllLossArgs>();
  if (!GradMode::is_enabled()) {
    NllLossArgs with_classes = a;
    with_classes.num_classes = c.input(0).sizes[1];
    std::vector<Tensor> in{g[0], target, total_weight};
    if (weighted) in.push_back(c.saved_input(2));
    r[0] = dispatch1(OpId::NllLossBackward, in, with_classes);
    return r;
  }
  const Tensor counted = target != a.ignore_index;
  const Tensor safe_target = where(counted, target, int64_t{0});
  Tensor w = counted.to(c.input(0).dtype);
  if (weighted) w = w * index_select(c.saved_input(2), 0, safe_target);
  Tensor coef = -w * g[0];  // g[0]: one per row (reduction none) or a scalar
  if (a.reduction == nll::kMean) coef = coef / total_weight;
  r[0] = scatter(Zeros(c.input(0)), 1, safe_target.unsqueeze(1), coef.unsqueeze(1));
  return r;
}
Grads CatB(Ctx& c, const Grads& g) {
  const int64_t d = wrap_dim(c.args<DimArgs>().dim, g[0].dim(), "cat");
  Grads r(c.num_inputs());
  int64_t start = 0;
  for (int i = 0; i < c.num_inputs(); ++i) {
    const int64_t n = c.input(i).sizes[d];
    if (c.needs_input_grad(i)) r[i] = g[0].narrow(d, start, n);
    start += n;
  }
  return r;
}

// ---- indexing ----
// Places `g` (shaped like index) into zeros shaped like `full`, at the leading corner.
Tensor PadTo(const Tensor& g, const IntArray& full) {
  if (g.sizes() == full) return g;
  return dispatch1(OpId::StridedScatterAdd, {g.contiguous()},
                   StridedScatterArgs{full, {g.sizes(), contiguous_strides(full), 0}});
}
Grads IndexSelectB(Ctx& c, const Grads& g) {
  Tensor idx = c.saved_input(1);
  return {index_add(Zeros(c.input(0)), c.args<IndexArgs>().dim, idx.reshape({-1}), g[0]), Tensor()};
}
Grads GatherB(Ctx& c, const Grads& g) {
  return {scatter_add(Zeros(c.input(0)), c.args<IndexArgs>().dim, c.saved_input(1), g[0]), Tensor()};
}
Grads ScatterB(Ctx& c, const Grads& g) {
  Tensor idx = c.saved_input(1);
  Grads r(3);
  const int64_t dim = c.args<ScatterArgs>().dim;
  if (c.needs_input_grad(0)) r[0] = scatter(g[0], dim, idx, Scalar(0.0));
  if (c.needs_input_grad(2)) r[2] = PadTo(gather(g[0], dim, idx), c.input(2).sizes);
  return r;
}
Grads ScatterAddB(Ctx& c, const Grads& g) {
  Tensor idx = c.saved_input(1);
  Grads r(3);
  if (c.needs_input_grad(0)) r[0] = g[0];
  if (c.needs_input_grad(2)) r[2] = PadTo(gather(g[0], c.args<ScatterArgs>().dim, idx), c.input(2).sizes);
  return r;
}
Grads IndexAddB(Ctx& c, const Grads& g) {
  Grads r(3);
  if (c.needs_input_grad(0)) r[0] = g[0];
  if (c.needs_input_grad(2)) {
    const IndexArgs& a = c.args<IndexArgs>();
    Tensor sel = index_select(g[0], a.dim, c.saved_input(1).reshape({-1}));
    r[2] = (a.alpha == 1 ? sel : sel * a.alpha).reshape(c.input(2).sizes);
  }
  return r;
}
std::vector<Tensor> SavedIndices(Ctx& c, int first, int last) {
  std::vector<Tensor> idx;
  for (int i = first; i < last; ++i) idx.push_back(c.saved_input(i));
  return idx;
}
Grads IndexB(Ctx& c, const Grads& g) {
  std::vector<Tensor> in{Zeros(c.input(0))};
  for (Tensor& t : SavedIndices(c, 1, c.num_inputs())) in.push_back(t);
  in.push_back(g[0]);
  AdvancedIndexArgs a = c.args<AdvancedIndexArgs>();
  a.accumulate = true;  // repeated indices add up
  Grads r(c.num_inputs());
  r[0] = dispatch1(OpId::IndexPut, in, a);
  return r;
}
Grads IndexPutB(Ctx& c, const Grads& g) {
  const int n = c.num_inputs();
  std::vector<Tensor> idx = SavedIndices(c, 1, n - 1);
  Grads r(n);
  if (c.needs_input_grad(0)) {
    if (c.args<AdvancedIndexArgs>().accumulate) {
      r[0] = g[0];
    } else {
      std::vector<Tensor> in{g[0]};
      in.insert(in.end(), idx.begin(), idx.end());
      in.push_back(Zeros(c.input(n - 1)));
      r[0] = dispatch1(OpId::IndexPut, in, c.attrs());
    }
  }
  if (c.needs_input_grad(n - 1)) {
    std::vector<Tensor> in{g[0]};
    in.insert(in.end(), idx.begin(), idx.end());
    r[n - 1] = dispatch1(OpId::Index, in, c.attrs());
  }
  return r;
}
Grads SortB(Ctx& c, const Grads& g) {
  const auto& in = c.input(0);
  if (in.sizes.empty()) return {g[0]};
  return {scatter(Zeros(in), c.args<SortArgs>().dim, c.saved_output(1), g[0])};
}

// ---- views ----
Grads ViewB(Ctx& c, const Grads& g) { return {g[0].reshape(c.input(0).sizes)}; }
Grads PermuteB(Ctx& c, const Grads& g) {
  const IntArray& perm = c.args<ViewArgs>().fn.sizes;
  IntArray inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[perm[i]] = static_cast<int64_t>(i);
  return {g[0].permute(inv)};
}
Grads ExpandB(Ctx& c, const Grads& g) { return {sum_to(g[0], c.input(0).sizes)}; }
// The largest element offset a window reaches past its own offset (-1: the window is empty).
int64_t WindowReach(const IntArray& sizes, const IntArray& strides) {
  int64_t reach = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return -1;
    reach += (sizes[i] - 1) * strides[i];
  }
  return reach;
}

// Whether two elements of the window share a storage slot (an expanded input): dims sorted by
// stride, each stride must step past everything the smaller dims reach.
bool WindowOverlaps(const IntArray& sizes, const IntArray& strides) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size)
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] > 1) dims.emplace_back(strides[i], sizes[i]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += (size - 1) * stride;
  }
  return false;
}

// as_strided's sizes and strides address the storage, not the input's elements: the gradient
// is scattered into a buffer spanning both windows (the output's and the input's place in the
// storage), read back through the input's window, and divided where several input elements
// share a slot (PyTorch's as_strided_backward).
Tensor AsStridedStorageGrad(const Tensor& g, const IntArray& in_sizes, const IntArray& in_strides, const ViewFn& fn) {
  const int64_t in_reach = WindowReach(in_sizes, in_strides), out_reach = WindowReach(fn.sizes, fn.strides);
  const TensorOptions opts = TensorOptions(g.dtype()).with_device(g.device());
  if (in_reach < 0 || out_reach < 0) return zeros(in_sizes, opts);
  const int64_t lo = std::min<int64_t>(0, fn.start), hi = std::max(in_reach, fn.start + out_reach);
  const IntArray buffer{hi - lo + 1};
  const Tensor storage = dispatch1(OpId::StridedScatterAdd, {g.contiguous()},
                                   StridedScatterArgs{buffer, {fn.sizes, fn.strides, fn.start - lo}});
  ViewFn read;
  read.kind = ViewFn::Strided;
  read.sizes = in_sizes;
  read.strides = in_strides;
  read.start = -lo;
  Tensor grad = make_view(OpId::AsStrided, storage, read);
  if (WindowOverlaps(in_sizes, in_strides)) {
    const Tensor count = dispatch1(OpId::StridedScatterAdd, {ones(in_sizes, opts)},
                                   StridedScatterArgs{buffer, {in_sizes, in_strides, -lo}});
    grad = grad / make_view(OpId::AsStrided, count, read);
  }
  return grad;
}

Grads AsStridedB(Ctx& c, const Grads& g) {
  const IntArray& in = c.input(0).sizes;
  const ViewFn& fn = c.args<ViewArgs>().fn;
  if (fn.kind == ViewFn::Strided) {
    const IntArray in_strides = fn.source_strides.empty() ? contiguous_strides(in) : fn.source_strides;
    const int64_t numel = std::accumulate(in.begin(), in.end(), int64_t{1}, std::multiplies<>()),
                  reach = WindowReach(fn.sizes, fn.strides);
    const bool inside = fn.start >= 0 && (reach < 0 || fn.start + reach < numel);
    if (!fn.source_strides.empty() || !inside) return {AsStridedStorageGrad(g[0], in, in_strides, fn)};
  }
  auto geom = apply_view(c.args<ViewArgs>().fn, {in, contiguous_strides(in), 0});
  ANVIL_INTERNAL_ASSERT(geom.has_value(), "view backward geometry");
  return {dispatch1(OpId::StridedScatterAdd, {g[0].contiguous()}, StridedScatterArgs{in, *geom})};
}
Grads StridedScatterAddB(Ctx& c, const Grads& g) {
  ViewFn fn;
  fn.kind = ViewFn::Strided;
  const Geometry& window = c.args<StridedScatterArgs>().window;
  fn.sizes = window.sizes;
  fn.strides = window.strides;
  fn.start = window.offset;
  return {make_view(OpId::AsStrided, g[0].contiguous(), fn)};
}

// im2col and col2im are linear and each other's adjoint.
Grads Im2ColB(Ctx& c, const Grads& g) { return {dispatch1(OpId::Col2Im, {g[0]}, c.attrs())}; }
Grads Col2ImB(Ctx& c, const Grads& g) { return {dispatch1(OpId::Im2Col, {g[0]}, c.attrs())}; }

// Convolution. Without create_graph the fused gradient kernels run (columns rebuilt per
// image in cache, never stored); with it, the same math composed from differentiable ops
// (im2col, matmul, col2im) so the backward is itself recorded.
Grads Conv2dB(Ctx& c, const Grads& g) {
  Grads r(static_cast<size_t>(c.num_inputs()));
  const Tensor x = c.saved_input(0), w = c.saved_input(1);
  const OpAttrs& a = c.attrs();
  if (!GradMode::is_enabled()) {
    const Tensor gc = g[0].contiguous();
    if (c.needs_input_grad(0)) r[0] = dispatch1(OpId::Conv2dInputGrad, {gc, w}, a);
    if (c.needs_input_grad(1)) r[1] = dispatch1(OpId::Conv2dWeightGrad, {gc, x}, a);
  } else {
    const int64_t N = g[0].size(0), OC = g[0].size(1), L = g[0].size(2) * g[0].size(3), G = a.get<WindowArgs>().groups;
    const int64_t K = w.size(1) * w.size(2) * w.size(3);
    const Tensor gg = g[0].reshape({N, G, OC / G, L});
    const OpAttrs& window = a;  // im2col/col2im read the window and ignore its groups
    if (c.needs_input_grad(0)) {
      const Tensor cols = matmul(w.reshape({1, G, OC / G, K}).transpose(-1, -2), gg);  // [N, G, K, L]
      r[0] = dispatch1(OpId::Col2Im, {cols.reshape({N, G * K, L})}, window);
    }
    if (c.needs_input_grad(1)) {
      const Tensor cols = dispatch1(OpId::Im2Col, {x}, window).view({N, G, K, L});
      r[1] = sum(matmul(gg, cols.transpose(-1, -2)), {0}).reshape(w.sizes());
    }
  }
  if (r.size() > 2 && c.needs_input_grad(2)) r[2] = sum(g[0], {0, 2, 3});
  return r;
}

// Each differentiable row's rule, by row: RuleOf<OpId::X>::fn. The table below asks for it
// for every Grad = Yes row of op_table.def, so a differentiable row without a rule does not
// compile, and a rule for a row that is not differentiable is refused here too.
constexpr bool kDifferentiable[] = {
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, ...) grad,
#include "core/ops/op_table.def"
#undef ANVIL_OP
};

template <OpId>
[[maybe_unused]] constexpr bool kHasNoRule = false;
template <OpId op>
struct RuleOf {
  static_assert(kHasNoRule<op>, "this row of op_table.def has Grad = Yes but no backward rule: add RULE(Id, fn) below");
};
#define RULE(Id, rule)                                                                                        \
  template <>                                                                                                 \
  struct RuleOf<OpId::Id> {                                                                                   \
    static_assert(kDifferentiable[static_cast<int>(OpId::Id)], #Id " has a rule but Grad = No in the table"); \
    static constexpr BackwardFn fn = &rule;                                                                   \
  };
// clang-format off
RULE(Neg, NegB) RULE(Abs, AbsB) RULE(Sign, ZeroB) RULE(Exp, ExpB) RULE(Expm1, Expm1B)
RULE(Log, LogB) RULE(Log1p, Log1pB) RULE(Sqrt, SqrtB) RULE(Rsqrt, RsqrtB)
RULE(Reciprocal, ReciprocalB) RULE(Sin, SinB) RULE(Cos, CosB) RULE(Tan, TanB) RULE(Atan, AtanB)
RULE(Tanh, TanhB) RULE(Sigmoid, SigmoidB) RULE(Relu, ReluB) RULE(ReluBackward, ReluBackwardB)
RULE(LeakyRelu, LeakyReluB) RULE(Elu, EluB) RULE(Gelu, GeluB) RULE(Silu, SiluB)
RULE(Hardswish, HardswishB) RULE(Softplus, SoftplusB) RULE(Erf, ErfB) RULE(PowScalar, PowScalarB)
RULE(Clamp, ClampB) RULE(Floor, ZeroB) RULE(Ceil, ZeroB) RULE(Round, ZeroB) RULE(Trunc, ZeroB)
RULE(Add, AddB) RULE(Sub, SubB) RULE(Mul, MulB) RULE(Div, DivB) RULE(Pow, PowB)
RULE(Maximum, MaximumB) RULE(Minimum, MinimumB) RULE(Remainder, RemainderB) RULE(Atan2, Atan2B)
RULE(Fmod, FmodB) RULE(Fmax, FmaxB) RULE(Fmin, FminB) RULE(Where, WhereB) RULE(Cast, CastB)
RULE(Clone, CloneB) RULE(Sum, SumB) RULE(Mean, MeanB) RULE(Prod, ProdB) RULE(Amax, AmaxAminB)
RULE(Amin, AmaxAminB) RULE(MaxDim, MaxMinDimB) RULE(MinDim, MaxMinDimB) RULE(Var, VarB)
RULE(Norm, NormB) RULE(LogSumExp, LogSumExpB) RULE(CumSum, CumSumB)
RULE(LogCumSumExp, LogCumSumExpB) RULE(CumProd, CumProdB) RULE(Mm, MmB) RULE(Linear, LinearB) RULE(LinearRelu, LinearReluB)
RULE(Bmm, BmmB) RULE(NllLoss, NllLossB) RULE(Softmax, SoftmaxB) RULE(LogSoftmax, LogSoftmaxB)
RULE(Cat, CatB) RULE(IndexSelect, IndexSelectB) RULE(Gather, GatherB) RULE(Scatter, ScatterB)
RULE(ScatterAdd, ScatterAddB) RULE(IndexAdd, IndexAddB) RULE(Index, IndexB)
RULE(IndexPut, IndexPutB) RULE(Sort, SortB) RULE(View, ViewB) RULE(Permute, PermuteB)
RULE(Expand, ExpandB) RULE(AsStrided, AsStridedB) RULE(StridedScatterAdd, StridedScatterAddB)
RULE(Im2Col, Im2ColB) RULE(Col2Im, Col2ImB) RULE(Conv2d, Conv2dB)
#undef RULE

struct RuleTable {
  BackwardFn rules[kNumOps] = {};
  RuleTable() {
#define ANVIL_RULE_SLOT_Yes(Id) rules[static_cast<int>(OpId::Id)] = RuleOf<OpId::Id>::fn;
#define ANVIL_RULE_SLOT_No(Id)
#define ANVIL_OP(Id, name, kind, infer, outs, grad, saves, autocast, args, kernel, api, ...) ANVIL_RULE_SLOT_##grad(Id)
#include "core/ops/op_table.def"
#undef ANVIL_OP
#undef ANVIL_RULE_SLOT_Yes
#undef ANVIL_RULE_SLOT_No
  }
};
// clang-format on

const RuleTable& Rules() {
  static const RuleTable table;
  return table;
}

}  // namespace

Tensor sum_to(const Tensor& grad, const IntArray& sizes) {
  if (grad.sizes() == sizes) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(sizes.size());
  IntArray dims;
  for (int64_t i = 0; i < grad.dim(); ++i) {
    if (i < lead || (sizes[i - lead] == 1 && grad.size(i) != 1)) dims.push_back(i);
  }
  Tensor r = dims.empty() ? grad : sum(grad, dims, true);
  return r.reshape(sizes);
}

BackwardFn backward_rule(OpId op) {
  BackwardFn fn = Rules().rules[static_cast<int>(op)];
  ANVIL_INTERNAL_ASSERT(fn != nullptr, "op '", op_name(op), "' is marked differentiable but has no backward rule");
  return fn;
}

bool has_backward_rule(OpId op) { return Rules().rules[static_cast<int>(op)] != nullptr; }

}  // namespace anvil::autograd
