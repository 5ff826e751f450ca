// Ops PyTorch defines as compositions: flips and rolls, triangles, differences, running
// extremes, searches and grids. Each is built from op-table rows, so kernels, devices and
// gradients come from those rows; where PyTorch's gradient differs from what the composition
// would give, a custom autograd function states PyTorch's rule.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>
#include <set>

#include "core/autograd/function.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

// dims wrapped into [0, ndim), each at most once (PyTorch's dim_list_to_bitset).
IntArray DistinctDims(IntArray dims, int64_t ndim, const char* op) {
  std::set<int64_t> seen;
  for (int64_t& d : dims) {
    d = wrap_dim(d, std::max<int64_t>(ndim, 1), op);
    ANVIL_CHECK(seen.insert(d).second, "dim ", d, " appears multiple times in the list of dims");
  }
  return dims;
}

Tensor Int64Index(const std::vector<int64_t>& v, Device device) {
  return tensor(v, std::nullopt, TensorOptions(kInt64)).to(device);
}

// The mask of kept elements of an [rows, cols] triangle: col - row <= diagonal (lower) or
// >= diagonal (upper).
Tensor TriangleMask(int64_t rows, int64_t cols, int64_t diagonal, bool lower, Device device) {
  const TensorOptions o = TensorOptions(kInt64).with_device(device);
  const Tensor offset = arange(cols, o).unsqueeze(0) - arange(rows, o).unsqueeze(1);
  return lower ? offset <= Scalar(diagonal) : offset >= Scalar(diagonal);
}

Tensor Triangle(const Tensor& x, int64_t diagonal, bool lower) {
  const char* op = lower ? "tril" : "triu";
  ANVIL_CHECK(x.dim() >= 2, op, ": input tensor must have at least 2 dimensions, got ", x.dim());
  const Tensor keep = TriangleMask(x.size(-2), x.size(-1), diagonal, lower, x.device());
  return masked_fill(x, logical_not(keep), 0);
}

// The largest finite value of a floating dtype (nan_to_num's default for +inf).
double LargestFinite(ScalarType t) {
  switch (t) {
    case kFloat16:
      return 65504.0;
    case kBFloat16:
      return 3.3895313892515355e38;
    case kFloat32:
      return FLT_MAX;
    default:
      return DBL_MAX;
  }
}

// Where each running extreme of one row of n came from: the index moves to every element
// that compares >= (cummax) or <= (cummin) the current extreme, so equal extremes give the
// last index, and to every NaN (the extreme from the first NaN on, at the latest NaN's index:
// PyTorch's cummax_cummin_helper).
template <typename T>
void RunningExtremeIndices(const std::vector<T>& v, int64_t rows, int64_t n, bool is_max, std::vector<int64_t>* out) {
  out->resize(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = v.data() + r * n;
    int64_t* idx = out->data() + r * n;
    T best = n > 0 ? row[0] : T();
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T x = row[i];
      const bool better = is_max ? x >= best : x <= best;
      if (std::isnan(static_cast<double>(x)) || (!std::isnan(static_cast<double>(best)) && better)) {
        best = x;
        at = i;
      }
      idx[i] = at;
    }
  }
}

// The values come from gather(x, dim, indices), so the gradient reaches each value's index
// (PyTorch's cummaxmin_backward: a scatter_add of the gradient to the indices).
std::tuple<Tensor, Tensor> RunningExtreme(const Tensor& x, int64_t dim, bool is_max) {
  const char* op = is_max ? "cummax" : "cummin";
  const int64_t d = wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  if (x.dim() == 0) return {x.clone(), zeros({}, TensorOptions(kInt64).with_device(x.device()))};
  // The indices are computed on the host, a sequential scan per row (history off).
  Tensor indices;
  {
    NoGradGuard no_grad;
    const Tensor rows_last = x.detach().movedim(d, -1).contiguous();
    const int64_t n = rows_last.size(-1);
    const int64_t rows = n == 0 ? 0 : rows_last.numel() / n;
    std::vector<int64_t> idx;
    if (x.is_floating_point())
      RunningExtremeIndices(rows_last.to_vector<double>(), rows, n, is_max, &idx);
    else
      RunningExtremeIndices(rows_last.to_vector<int64_t>(), rows, n, is_max, &idx);
    indices = Int64Index(idx, x.device()).reshape(rows_last.sizes()).movedim(-1, d).contiguous();
  }
  return {gather(x, d, indices), indices};
}

// logit's gradient as PyTorch states it: grad / (x (1 - x)), zero outside [eps, 1 - eps] when
// eps is given, NaN outside [0, 1] when not (the composition log(x / (1 - x)) would give finite
// values there, and NaN rather than inf at x = 1).
struct Logit : autograd::Function<Logit> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, double eps) {
    ctx->save_for_backward({x});
    ctx->saved_data["eps"] = eps;
    const Tensor z = eps >= 0 ? clamp(x, Scalar(eps), Scalar(1.0 - eps)) : x;
    return log(z / (1.0 - z));
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> g) {
    const Tensor x = ctx->get_saved_variables()[0];
    const double eps = std::get<double>(ctx->saved_data["eps"]);
    const Tensor grad = g[0] / (x * (1.0 - x));
    if (eps >= 0) return {where(logical_or(x<Scalar(eps), x> Scalar(1.0 - eps)), Scalar(0.0), grad), Tensor()};
    return {where(logical_or(x<Scalar(0.0), x> Scalar(1.0)), Scalar(std::nan("")), grad), Tensor()};
  }
};

}  // namespace

Tensor flip(const Tensor& x, IntArray dims) {
  dims = DistinctDims(std::move(dims), x.dim(), "flip");
  if (x.dim() == 0 || dims.empty()) return x.clone();
  Tensor y = x;
  for (int64_t d : dims) {
    const int64_t n = y.size(d);
    y = index_select(y, d, arange(n - 1, -1, -1, TensorOptions(kInt64).with_device(x.device())));
  }
  return y;
}

Tensor roll(const Tensor& x, IntArray shifts, IntArray dims) {
  if (dims.empty() && shifts.size() == 1) return roll(x.flatten(), shifts, {0}).reshape(x.sizes());
  ANVIL_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(),
              ", dims:", dims.size());
  Tensor y = x.clone();
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = wrap_dim(dims[i], std::max<int64_t>(x.dim(), 1), "roll");
    const int64_t n = x.dim() == 0 ? 1 : y.size(d);
    if (x.dim() == 0 || n == 0) continue;
    const int64_t s = ((shifts[i] % n) + n) % n;
    std::vector<int64_t> from(n);
    for (int64_t j = 0; j < n; ++j) from[j] = (j - s + n) % n;  // out[j] = x[j - s]
    y = index_select(y, d, Int64Index(from, x.device()));
  }
  return y;
}

Tensor tril(const Tensor& x, int64_t diagonal) { return Triangle(x, diagonal, true); }
Tensor triu(const Tensor& x, int64_t diagonal) { return Triangle(x, diagonal, false); }

Tensor diff(const Tensor& x, int64_t n, int64_t dim, const Tensor& prepend, const Tensor& append) {
  ANVIL_CHECK(x.dim() >= 1, "diff expects input to be at least one-dimensional");
  ANVIL_CHECK(n >= 0, "order must be non-negative but got ", n);
  const int64_t d = wrap_dim(dim, x.dim(), "diff");
  std::vector<Tensor> parts;
  for (const Tensor* t : {&prepend, &x, &append}) {
    if (!t->defined()) continue;
    ANVIL_CHECK(t->dim() == x.dim(), "diff expects prepend or append to be the same dimension as input, got ", t->dim(),
                " dims for an input of ", x.dim());
    parts.push_back(*t);
  }
  Tensor y = parts.size() == 1 ? x : cat(parts, d);
  for (int64_t k = 0; k < n && y.size(d) > 0; ++k) {
    const int64_t len = y.size(d) - 1;
    const Tensor hi = y.narrow(d, 1, len), lo = y.narrow(d, 0, len);
    y = y.dtype() == kBool ? logical_xor(hi, lo) : sub(hi, lo);
  }
  return n == 0 ? x.clone() : y;  // n = 0 ignores prepend and append, as PyTorch
}

Tensor logaddexp(const Tensor& a, const Tensor& b) {
  const ScalarType t = result_type(a, b);
  ANVIL_CHECK_TYPE(is_floating_point(t), "logaddexp: expected floating-point inputs, got ", a.dtype(), " and ",
                   b.dtype(), " (PyTorch's kernel is not implemented for integers)");
  // max + log1p(exp(-|a - b|)): at a = b the two gradients are 1/2 each, as PyTorch's
  // 1 / (1 + exp(b - a)). Equal infinities would give inf - inf = NaN: they give themselves.
  const Tensor stable = maximum(a, b) + log1p(exp(-abs(a - b)));
  return where(logical_and(isinf(a), eq(a, b)), a.to(t), stable);
}

Tensor nan_to_num(const Tensor& x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  if (!x.is_floating_point()) return x.clone();
  const double big = LargestFinite(x.dtype());
  Tensor y = masked_fill(x, isnan(x), nan.value_or(0.0));
  y = masked_fill(y, x == Scalar(std::numeric_limits<double>::infinity()), posinf.value_or(big));
  return masked_fill(y, x == Scalar(-std::numeric_limits<double>::infinity()), neginf.value_or(-big));
}

Tensor count_nonzero(const Tensor& x, IntArray dims) {
  dims = DistinctDims(std::move(dims), x.dim(), "count_nonzero");
  return sum(x != Scalar(0), dims, false, kInt64);
}

std::tuple<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) { return RunningExtreme(x, dim, true); }
std::tuple<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) { return RunningExtreme(x, dim, false); }

Tensor logit(const Tensor& x, std::optional<double> eps) {
  const Tensor xf = x.is_floating_point() ? x : x.to(default_dtype());
  // A negative eps is no eps, as in PyTorch's kernel.
  return Logit::apply(xf, eps.value_or(-1.0));
}

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool out_int32, bool right) {
  const Tensor& b = sorted_sequence;
  bool leading_match = b.dim() == 1;
  if (!leading_match && b.dim() == values.dim()) {
    leading_match = true;
    for (int64_t i = 0; i + 1 < b.dim(); ++i) leading_match = leading_match && b.size(i) == values.size(i);
  }
  ANVIL_CHECK(b.dim() >= 1 && leading_match,
              "torch.searchsorted(): boundaries tensor should be 1 dimension or the first N-1 dimensions of "
              "boundaries tensor and input value tensor must match, but we got boundaries tensor ",
              shape_str(b.sizes()), " and input value tensor ", shape_str(values.sizes()));
  // The insertion point is the number of boundaries that come before the value: those with
  // !(boundary >= value) (left) or !(boundary > value) (right), the predicates of PyTorch's
  // binary search, so a NaN value lands at the end. Compared as [..., K, 1] against [..., 1, M].
  const Tensor v = values.unsqueeze(-1);
  const Tensor bb = b.dim() == 1 ? b : b.unsqueeze(-2);
  const Tensor before = logical_not(right ? gt(bb, v) : ge(bb, v));
  return sum(before, {-1}, false, out_int32 ? kInt32 : kInt64);
}

Tensor bucketize(const Tensor& input, const Tensor& boundaries, bool out_int32, bool right) {
  ANVIL_CHECK(boundaries.dim() == 1, "boundaries tensor must be 1 dimension, but got dim(", boundaries.dim(), ")");
  return searchsorted(boundaries, input, out_int32, right);
}

std::vector<Tensor> meshgrid(const std::vector<Tensor>& tensors, const std::string& indexing) {
  ANVIL_CHECK(!tensors.empty(), "meshgrid expects a non-empty TensorList");
  ANVIL_CHECK(indexing == "ij" || indexing == "xy",
              "torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but received: ", indexing);
  for (const Tensor& t : tensors) {
    ANVIL_CHECK(t.dim() <= 1,
                "torch.meshgrid: Expected 0D or 1D tensor in the tensor list but got: ", shape_str(t.sizes()));
    ANVIL_CHECK(t.dtype() == tensors[0].dtype(), "meshgrid expects all tensors to have the same dtype");
    ANVIL_CHECK(t.device() == tensors[0].device(), "meshgrid expects all tensors to have the same device");
  }
  // "xy" is "ij" on the first two inputs swapped, with the first two outputs swapped back.
  const bool swap = indexing == "xy" && tensors.size() >= 2;
  std::vector<Tensor> in = tensors;
  if (swap) std::swap(in[0], in[1]);
  IntArray shape;
  for (const Tensor& t : in) shape.push_back(t.numel());
  std::vector<Tensor> out;
  for (size_t i = 0; i < in.size(); ++i) {
    IntArray view(in.size(), 1);
    view[i] = shape[i];
    out.push_back(in[i].reshape(view).expand(shape));
  }
  if (swap) std::swap(out[0], out[1]);
  return out;
}

}  // namespace anvil
