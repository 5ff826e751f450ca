// Reductions and the other ops that consume a whole dimension (softmax, cumsum, sort).
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

OpAttrs ReduceAttrs(IntArray dims, bool keepdim) {
  OpAttrs a;
  a.dims = std::move(dims);
  a.keepdim = keepdim;
  return a;
}

Tensor RequireFloat(const Tensor& x, const char* op) {
  ANVIL_CHECK_TYPE(x.is_floating_point(), op,
                   "(): could not infer output dtype. Input dtype must be a floating point dtype. Got: ",
                   x.dtype());
  return x;
}

Tensor IntToLong(const Tensor& x) {
  return is_integral(x.dtype(), true) && x.dtype() != kInt64 ? x.to(kInt64) : x;
}

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
Tensor max(const Tensor& x) {
  ANVIL_CHECK(x.numel() > 0, "max(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  return amax(x);
}
Tensor min(const Tensor& x) {
  ANVIL_CHECK(x.numel() > 0, "min(): Expected reduction dim to be specified for input.numel() == 0. "
              "Specify the reduction dim with the 'dim' argument.");
  return amin(x);
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
  if (!dim) return dispatch1(OpId::Argmax, {x.reshape({-1})}, ReduceAttrs({0}, false));
  return dispatch1(OpId::Argmax, {x}, ReduceAttrs({*dim}, keepdim));
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (!dim) return dispatch1(OpId::Argmin, {x.reshape({-1})}, ReduceAttrs({0}, false));
  return dispatch1(OpId::Argmin, {x}, ReduceAttrs({*dim}, keepdim));
}
Tensor var(const Tensor& x, IntArray dims, int64_t correction, bool keepdim) {
  OpAttrs a = ReduceAttrs(std::move(dims), keepdim);
  a.alpha = static_cast<double>(correction);
  return dispatch1(OpId::Var, {RequireFloat(x, "var")}, a);
}
Tensor std(const Tensor& x, IntArray dims, int64_t correction, bool keepdim) {
  return sqrt(var(x, std::move(dims), correction, keepdim));
}
Tensor norm(const Tensor& x, double p, IntArray dims, bool keepdim) {
  ANVIL_CHECK(p > 0, "norm: expected p > 0 (1, 2, inf, ...), got ", p);
  OpAttrs a = ReduceAttrs(std::move(dims), keepdim);
  a.alpha = p;
  return dispatch1(OpId::Norm, {RequireFloat(x, "norm")}, a);
}
Tensor logsumexp(const Tensor& x, IntArray dims, bool keepdim) {
  Tensor in = x.is_floating_point() ? x : x.to(default_dtype());
  return dispatch1(OpId::LogSumExp, {in}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor all(const Tensor& x, IntArray dims, bool keepdim) {
  return dispatch1(OpId::All, {x}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor any(const Tensor& x, IntArray dims, bool keepdim) {
  return dispatch1(OpId::Any, {x}, ReduceAttrs(std::move(dims), keepdim));
}
Tensor cumsum(const Tensor& x, int64_t dim) {
  return dispatch1(OpId::CumSum, {IntToLong(x)}, ReduceAttrs({dim}, false));
}

Tensor softmax(const Tensor& x, int64_t dim) {
  Tensor in = x.is_floating_point() ? x : x.to(default_dtype());
  return dispatch1(OpId::Softmax, {in}, ReduceAttrs({dim}, false));
}
Tensor log_softmax(const Tensor& x, int64_t dim) {
  Tensor in = x.is_floating_point() ? x : x.to(default_dtype());
  return dispatch1(OpId::LogSoftmax, {in}, ReduceAttrs({dim}, false));
}

std::tuple<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending) {
  OpAttrs a;
  a.dim = dim;
  a.keepdim = descending;
  auto r = dispatch(OpId::Sort, {x}, a);
  return {r[0], r[1]};
}
Tensor argsort(const Tensor& x, int64_t dim, bool descending) {
  return std::get<1>(sort(x, dim, descending));
}
std::tuple<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool sorted) {
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "topk");
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  ANVIL_CHECK_INDEX(k >= 0 && k <= n, "topk: k (", k, ") is out of range for dimension ", d,
                    " of size ", n);
  if (x.dim() == 0) {
    auto [v, i] = sort(x, d, largest);
    return {v, i};
  }
  auto [v, i] = sort(x, d, largest);
  (void)sorted;  // always sorted: a sort is how the k are found
  return {v.narrow(d, 0, k), i.narrow(d, 0, k)};
}

}  // namespace anvil
