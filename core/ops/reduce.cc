// Reductions and the other ops that consume a whole dimension (softmax, cumsum, sort).
#include <cmath>

#include "core/autograd/function.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

ReduceArgs ReduceAttrs(IntArray dims, bool keepdim) { return ReduceArgs{.dims = std::move(dims), .keepdim = keepdim}; }

Tensor RequireFloat(const Tensor& x, const char* op) {
  ANVIL_CHECK_TYPE(x.is_floating_point(), op,
                   "(): could not infer output dtype. Input dtype must be a floating point dtype. Got: ", x.dtype());
  return x;
}

Tensor IntToLong(const Tensor& x) { return is_integral(x.dtype(), true) && x.dtype() != kInt64 ? x.to(kInt64) : x; }

}  // namespace

Tensor sum(const Tensor& x, IntArray dims, bool keepdim, std::optional<ScalarType> dtype) {
  Tensor in = dtype ? x.to(*dtype) : IntToLong(x);
  return dispatch1(OpId::Sum, {in}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor mean(const Tensor& x, IntArray dims, bool keepdim) {
  return dispatch1(OpId::Mean, {RequireFloat(x, "mean")}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor prod(const Tensor& x, IntArray dims, bool keepdim) {
  return dispatch1(OpId::Prod, {IntToLong(x)}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor amax(const Tensor& x, IntArray dims, bool keepdim) {
  return dispatch1(OpId::Amax, {x}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor amin(const Tensor& x, IntArray dims, bool keepdim) {
  return dispatch1(OpId::Amin, {x}, ReduceAttrs(std::move(dims), keepdim));
}
namespace {
// PyTorch's evenly_distribute_backward for a reduction to one value: the elements equal to it
// share the gradient, and a NaN value is shared by the NaNs.
Tensor EvenlyDistribute(const Tensor& x, const Tensor& value, const Tensor& g) {
  const Tensor mask = logical_or(eq(x, value), logical_and(isnan(x), isnan(value))).to(g.dtype());
  return mask * (g / sum(mask));
}

// max() / min() over everything: amax's value, with the gradient evenly distributed (amax's
// own rule matches no element for a NaN result, as PyTorch's amax does).
struct ExtremumAll : autograd::Function<ExtremumAll> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, bool is_max) {
    Tensor out = is_max ? amax(x) : amin(x);
    // Saved detached: the output itself would hold its own node alive (a reference cycle).
    ctx->save_for_backward({x, out.detach()});
    return out;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const std::vector<Tensor> s = ctx->get_saved_variables();
    return {EvenlyDistribute(s[0], s[1], g[0]), Tensor()};
  }
};
}  // namespace

Tensor max(const Tensor& x) {
  ANVIL_CHECK(x.numel() > 0,
              "max(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  return ExtremumAll::apply(x, true);
}
Tensor min(const Tensor& x) {
  ANVIL_CHECK(x.numel() > 0,
              "min(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  return ExtremumAll::apply(x, false);
}
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  auto r = dispatch(OpId::MaxDim, {x}, ReduceAttrs({dim}, keepdim));
  return {r[0], r[1]};
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  auto r = dispatch(OpId::MinDim, {x}, ReduceAttrs({dim}, keepdim));
  return {r[0], r[1]};
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  ANVIL_CHECK_TYPE(x.dtype() != kBool, "argmax(): does not support bool input");
  if (!dim) return dispatch1(OpId::Argmax, {x.reshape({-1})}, ReduceAttrs({0}, false));
  return dispatch1(OpId::Argmax, {x}, ReduceAttrs({*dim}, keepdim));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  ANVIL_CHECK_TYPE(x.dtype() != kBool, "argmin(): does not support bool input");
  if (!dim) return dispatch1(OpId::Argmin, {x.reshape({-1})}, ReduceAttrs({0}, false));
  return dispatch1(OpId::Argmin, {x}, ReduceAttrs({*dim}, keepdim));
}
Tensor var(const Tensor& x, IntArray dims, int64_t correction, bool keepdim) {
  ReduceArgs a = ReduceAttrs(std::move(dims), keepdim);
  a.correction = static_cast<double>(correction);
  return dispatch1(OpId::Var, {RequireFloat(x, "var")}, a);
}
namespace {
// sqrt of a variance with PyTorch's std_backward: where the deviation is 0 (all elements
// equal) the gradient is 0, not g / (2 * 0) times zero deviations (NaN).
struct StdOfVar : autograd::Function<StdOfVar> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor v) {
    // The input is saved, not the output (which would hold its own node alive); backward
    // takes the root again, differentiably, so second derivatives hold.
    ctx->save_for_backward({v});
    return sqrt(v);
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const Tensor s = sqrt(ctx->get_saved_variables()[0]);
    return {where(s == Scalar(0.0), Scalar(0.0), g[0] / (s * 2.0))};
  }
};

// The inf / -inf norms: the largest / smallest magnitude (NaN-propagating, an empty
// reduction is an error, as amax's). The gradient goes to the elements at that magnitude,
// split evenly, with the sign of each; none where no element equals it (a NaN result).
struct NormInf : autograd::Function<NormInf> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, IntArray dims, bool keepdim, bool largest) {
    const Tensor a = abs(x);
    const Tensor out = largest ? amax(a, dims, true) : amin(a, dims, true);
    ctx->save_for_backward({x, out.detach()});  // detached: no cycle through the output's node
    if (keepdim) return out;
    std::vector<bool> reduced(static_cast<size_t>(x.dim()), dims.empty());
    for (int64_t d : dims) reduced[static_cast<size_t>(wrap_dim(d, x.dim(), "norm"))] = true;
    IntArray sizes;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (!reduced[static_cast<size_t>(d)]) sizes.push_back(x.size(d));
    }
    return out.reshape(sizes);  // the same values without the kept dims: no second reduction
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const std::vector<Tensor> s = ctx->get_saved_variables();
    const Tensor &x = s[0], &out = s[1];
    const Tensor hit = eq(abs(x), out).to(g[0].dtype());
    // Counts per reduced slice, keepdim-shaped like `out`.
    IntArray reduced;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (out.dim() == x.dim() && out.size(d) == 1 && x.size(d) != 1) reduced.push_back(d);
    }
    const Tensor count = reduced.empty() ? hit : sum(hit, reduced, true);
    const Tensor gk = g[0].reshape(out.sizes());
    // A slice with no hit (a NaN result) has count 0 and hit 0 throughout: dividing by 1 there
    // gives it no gradient.
    return {sign(x) * hit * (gk / clamp(count, 1.0, std::nullopt)), Tensor(), Tensor(), Tensor()};
  }
};
}  // namespace

Tensor std(const Tensor& x, IntArray dims, int64_t correction, bool keepdim) {
  return StdOfVar::apply(var(x, std::move(dims), correction, keepdim));
}
namespace {
// The "0-norm": the number of nonzero elements. Piecewise constant: its gradient is zero
// (PyTorch's too), defined everywhere, NaN and inf inputs included.
struct CountNonzero : autograd::Function<CountNonzero> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, IntArray dims, bool keepdim) {
    ctx->save_for_backward({x});
    return sum(ne(x, zeros_like(x)).to(x.dtype()), dims, keepdim);
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor>) {
    return {zeros_like(ctx->get_saved_variables()[0]), Tensor(), Tensor()};
  }
};
}  // namespace

Tensor norm(const Tensor& x, double p, IntArray dims, bool keepdim) {
  const Tensor xf = RequireFloat(x, "norm");
  if (p == 0) return CountNonzero::apply(xf, dims, keepdim);
  if (std::isinf(p)) return NormInf::apply(xf, dims, keepdim, p > 0);
  if (p < 0) return pow(sum(pow(abs(xf), p), dims, keepdim), 1.0 / p);
  ReduceArgs a = ReduceAttrs(std::move(dims), keepdim);
  a.p = p;
  return dispatch1(OpId::Norm, {RequireFloat(x, "norm")}, a);
}
Tensor logsumexp(const Tensor& x, IntArray dims, bool keepdim) {
  Tensor in = x.is_floating_point() ? x : x.to(default_dtype());
  return dispatch1(OpId::LogSumExp, {in}, ReduceAttrs(std::move(dims), keepdim));
}
// all/any of a uint8 tensor are uint8 (PyTorch keeps that legacy form); bool otherwise.
Tensor all(const Tensor& x, IntArray dims, bool keepdim) {
  Tensor r = dispatch1(OpId::All, {x}, ReduceAttrs(std::move(dims), keepdim));
  return x.dtype() == kUInt8 ? r.to(kUInt8) : r;
}
Tensor any(const Tensor& x, IntArray dims, bool keepdim) {
  Tensor r = dispatch1(OpId::Any, {x}, ReduceAttrs(std::move(dims), keepdim));
  return x.dtype() == kUInt8 ? r.to(kUInt8) : r;
}
Tensor cumsum(const Tensor& x, int64_t dim) { return dispatch1(OpId::CumSum, {IntToLong(x)}, DimArgs{dim}); }
Tensor cumprod(const Tensor& x, int64_t dim) { return dispatch1(OpId::CumProd, {IntToLong(x)}, DimArgs{dim}); }

// Integer inputs are refused, as PyTorch's kernels do (pass a float tensor: x.to(kFloat32)).
Tensor softmax(const Tensor& x, int64_t dim) {
  ANVIL_CHECK_TYPE(x.is_floating_point(), "softmax: expected a floating-point tensor, got ", x.dtype(),
                   " (convert it first, e.g. x.to(kFloat32))");
  return dispatch1(OpId::Softmax, {x}, DimArgs{dim});
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  ANVIL_CHECK_TYPE(x.is_floating_point(), "log_softmax: expected a floating-point tensor, got ", x.dtype(),
                   " (convert it first, e.g. x.to(kFloat32))");
  return dispatch1(OpId::LogSoftmax, {x}, DimArgs{dim});
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  auto r = dispatch(OpId::Sort, {x}, SortArgs{dim, descending});
  return {r[0], r[1]};
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending) { return std::get<1>(sort(x, dim, descending)); }
// kthvalue and median select from a stable sort: NaN sorts last and equal values keep their
// input order, so ties give the first index in input order and a row's NaNs come in their
// order (PyTorch's CPU quickselect gives another tie's index: docs/conformance.md). The
// gradient reaches the selected element through the sort's backward.
std::tuple<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  ANVIL_CHECK_TYPE(x.dtype() != kBool, "\"kthvalue_cpu\" not implemented for 'Bool'");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "kthvalue");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  ANVIL_CHECK(k >= 1 && k <= n, "kthvalue(): selected number k out of range for dimension ", d, " (k = ", k,
              ", the dimension has ", n, " elements)");
  if (x.dim() == 0) return {x.clone(), zeros({}, TensorOptions(kInt64).with_device(x.device()))};
  auto [v, i] = sort(x, d);
  Tensor values = v.narrow(d, k - 1, 1), indices = i.narrow(d, k - 1, 1);
  if (!keepdim) return {values.squeeze(d), indices.squeeze(d)};
  return {values, indices};
}

namespace {
// The lower median's place in each sorted row: (n - 1) / 2, or the row's first NaN (NaN
// propagates: PyTorch returns it and its index).
Tensor MedianPlace(const Tensor& x, int64_t d) {
  const int64_t n = x.size(d);
  const Tensor nans = sum(x != x, {d}, true);
  return where(nans > 0, n - nans, full_like(nans, (n - 1) / 2));
}

// median() of all elements, its gradient evenly distributed (all NaNs share it where it is NaN).
struct MedianAll : autograd::Function<MedianAll> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x) {
    Tensor flat = x.reshape({-1});
    Tensor value = flat.numel() == 0 ? full({}, NAN, TensorOptions(x.dtype()).with_device(x.device()))
                                     : gather(std::get<0>(sort(flat, 0)), 0, MedianPlace(flat, 0)).reshape({});
    ctx->save_for_backward({x, value.detach()});  // the output itself would keep its node alive
    return value;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const auto saved = ctx->get_saved_variables();
    return {EvenlyDistribute(saved[0], saved[1], g[0])};
  }
};
}  // namespace

Tensor median(const Tensor& x) {
  ANVIL_CHECK_TYPE(x.dtype() != kBool, "\"median_cpu\" not implemented for 'Bool'");
  return MedianAll::apply(x);
}

std::tuple<Tensor, Tensor> median(const Tensor& x, int64_t dim, bool keepdim) {
  ANVIL_CHECK_TYPE(x.dtype() != kBool, "\"median_cpu\" not implemented for 'Bool'");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "median");
  if (x.dim() == 0) return {x.clone(), zeros({}, TensorOptions(kInt64).with_device(x.device()))};
  ANVIL_CHECK_INDEX(x.size(d) > 0, "median(): Expected reduction dim ", d, " to have non-zero size.");
  auto [v, i] = sort(x, d);
  const Tensor place = MedianPlace(x, d);
  Tensor values = gather(v, d, place), indices = gather(i, d, place);
  if (!keepdim) return {values.squeeze(d), indices.squeeze(d)};
  return {values, indices};
}

Tensor isinf(const Tensor& x) {
  if (!x.is_floating_point()) return zeros(x.sizes(), TensorOptions(kBool).with_device(x.device()));
  return abs(x) == INFINITY;
}

std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  ANVIL_CHECK_TYPE(x.dtype() != kBool, "topk does not support bool dtypes");
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  ANVIL_CHECK_INDEX(k >= 0 && k <= n, "topk: k (", k, ") is out of range for dimension ", d, " of size ", n);
  if (x.dim() == 0) {
    auto [v, i] = sort(x, d, largest);
    return {v, i};
  }
  auto [v, i] = sort(x, d, largest);
  (void)sorted;  // always sorted: a sort is how the k are found
  return {v.narrow(d, 0, k), i.narrow(d, 0, k)};
}

}  // namespace anvil
