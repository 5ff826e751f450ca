// Indexing ops: gather/scatter, index_select/index_add, advanced indexing (index/index_put
// with lists of index tensors, bool masks included), masked ops, nonzero, one_hot, cat.
#include <algorithm>
#include <limits>

#include "core/autograd/function.h"
#include "core/autograd/grad_mode.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

IndexArgs DimAttrs(int64_t dim) { return IndexArgs{.dim = dim}; }
ScatterArgs ScatterDim(int64_t dim) { return ScatterArgs{.dim = dim}; }

void CheckIndex(const Tensor& index, const char* op) {
  ANVIL_CHECK_TYPE(index.dtype() == kInt64 || index.dtype() == kInt32, op,
                   "(): Expected dtype int64 (or int32) for index, got ", index.dtype());
}

// Expands bool masks into their nonzero coordinates, broadcasts the index tensors together
// and records which dims of `x` they address.
struct Prepared {
  std::vector<Tensor> indices;  // int64, broadcast
  IntArray dims;
};

Prepared Prepare(const Tensor& x, const std::vector<Tensor>& raw) {
  std::vector<Tensor> expanded;
  for (const Tensor& t : raw) {
    if (t.defined() && (t.dtype() == kBool || t.dtype() == kUInt8)) {
      const int64_t at = static_cast<int64_t>(expanded.size());
      ANVIL_CHECK_INDEX(at + t.dim() <= x.dim(), "too many indices for tensor of dimension ", x.dim());
      for (int64_t k = 0; k < t.dim(); ++k) {
        ANVIL_CHECK_INDEX(t.size(k) == x.size(at + k), "The shape of the mask ", shape_str(t.sizes()), " at index ", k,
                          " does not match the shape of the indexed tensor ", shape_str(x.sizes()), " at index ",
                          at + k);
      }
      Tensor nz = nonzero(t);
      for (int64_t k = 0; k < t.dim(); ++k) expanded.push_back(nz.select(1, k));
    } else {
      if (t.defined()) {
        ANVIL_CHECK_TYPE(is_integral(t.dtype(), false),
                         "tensors used as indices must be long, int, byte "
                         "or bool tensors, got ",
                         t.dtype());
      }
      expanded.push_back(t);
    }
  }
  ANVIL_CHECK_INDEX(static_cast<int64_t>(expanded.size()) <= x.dim(), "too many indices for tensor of dimension ",
                    x.dim(), " (got ", expanded.size(), ")");
  Prepared p;
  std::vector<Tensor> defined;
  for (size_t k = 0; k < expanded.size(); ++k) {
    if (!expanded[k].defined()) continue;
    p.dims.push_back(static_cast<int64_t>(k));
    defined.push_back(expanded[k].to(kInt64));
  }
  p.indices = broadcast_tensors(defined);
  return p;
}

}  // namespace

std::vector<Tensor> broadcast_tensors(const std::vector<Tensor>& tensors) {
  if (tensors.empty()) return {};
  IntArray shape = tensors[0].sizes();
  for (const Tensor& t : tensors) shape = broadcast_shapes(shape, t.sizes());
  std::vector<Tensor> out;
  for (const Tensor& t : tensors) out.push_back(t.expand(shape));
  return out;
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  CheckIndex(index, "index_select");
  return dispatch1(OpId::IndexSelect, {x, index}, DimAttrs(dim));
}
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  CheckIndex(index, "gather");
  return dispatch1(OpId::Gather, {x, index}, DimAttrs(dim));
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  CheckIndex(index, "scatter");
  return dispatch1(OpId::Scatter, {x, index, src.dtype() == x.dtype() ? src : src.to(x.dtype())}, ScatterDim(dim));
}
Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, Scalar value) {
  return scatter(x, dim, index, full(index.sizes(), value, TensorOptions(x.dtype()).with_device(x.device())));
}
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  CheckIndex(index, "scatter_add");
  return dispatch1(OpId::ScatterAdd, {x, index, src.dtype() == x.dtype() ? src : src.to(x.dtype())}, ScatterDim(dim));
}
namespace {
// The identity of amax (the dtype's lowest value) or amin (its highest).
Scalar ExtremeOf(ScalarType t, bool lowest) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  switch (t) {
    case kBool:
      return Scalar(!lowest);
    case kUInt8:
      return lowest ? Scalar(0) : Scalar(255);
    case kInt8:
      return lowest ? Scalar(-128) : Scalar(127);
    case kInt16:
      return lowest ? Scalar(-32768) : Scalar(32767);
    case kInt32:
      return Scalar(int64_t{lowest ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max()});
    case kInt64:
      return Scalar(lowest ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max());
    default:
      return Scalar(lowest ? -kInf : kInf);
  }
}
}  // namespace

namespace {
Tensor ScatterReduceForward(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                            const std::string& reduce, bool include_self);

// A gradient of index's shape placed at the front of src's (src may be larger than index).
Tensor PadToSource(const Tensor& g, const IntArray& src_sizes) {
  if (g.sizes() == src_sizes) return g;
  return dispatch1(OpId::StridedScatterAdd, {g.contiguous()},
                   StridedScatterArgs{src_sizes, {g.sizes(), contiguous_strides(src_sizes), 0}});
}

// scatter_reduce's gradients, PyTorch's scatter_reduce_backward: sum passes the gradient;
// mean divides it by each target's count; prod divides the result by the factor (a zero
// factor's gradient is the product with that factor set to 1); amax/amin share it evenly
// among the elements equal to the result. Without include_self the targets' own gradient is 0.
struct ScatterReduceFn : autograd::Function<ScatterReduceFn> {
  static Tensor forward(autograd::AutogradContext* ctx, Tensor x, int64_t dim, Tensor index, Tensor src,
                        std::string reduce, bool include_self) {
    Tensor out = ScatterReduceForward(x, dim, index, src, reduce, include_self);
    ctx->save_for_backward({x, index, src, out.detach()});  // the output itself would keep its node alive
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["reduce"] = reduce;
    ctx->saved_data["include_self"] = include_self;
    return out;
  }
  static std::vector<Tensor> backward(autograd::AutogradContext* ctx, std::vector<Tensor> grads) {
    const auto saved = ctx->get_saved_variables();
    const Tensor &self = saved[0], &index = saved[1], &src = saved[2];
    const int64_t dim = std::get<int64_t>(ctx->saved_data["dim"]);
    const std::string reduce = std::get<std::string>(ctx->saved_data["reduce"]);
    const bool include_self = std::get<bool>(ctx->saved_data["include_self"]);
    // Saved detached; recorded again where the backward itself is differentiated.
    const Tensor result =
        GradMode::is_enabled() ? ScatterReduceFn::apply(self, dim, index, src, reduce, include_self) : saved[3];
    const Tensor& g = grads[0];
    // The sources that take part: index's shape, at the front of src.
    const Tensor src_used = src.sizes() == index.sizes() ? src : SliceLike(src, index);
    Tensor grad_self, grad_src;
    if (reduce == "sum") {
      grad_self = g;
      grad_src = gather(g, dim, index);
    } else if (reduce == "mean") {
      Tensor n = include_self ? ones_like(g) : zeros_like(g);
      n = scatter_add(n, dim, index, ones_like(src_used));
      n = masked_fill(n, n == 0, 1);
      grad_self = g / n;
      grad_src = gather(g, dim, index) / gather(n, dim, index);
    } else if (reduce == "prod") {
      const Tensor masked_self = masked_fill(self, self == 0, 1);
      grad_self = g * ScatterReduceFn::apply(masked_self, dim, index, src, reduce, include_self) / masked_self;
      const Tensor src_zero = src_used == 0;
      const Tensor zeros_there =
          gather(scatter_add(zeros_like(self), dim, index, src_zero.to(self.dtype())), dim, index);
      const Tensor single_zero = logical_and(src_zero, zeros_there == 1);
      const Tensor without_zero =
          ScatterReduceFn::apply(self, dim, index, masked_fill(src_used, single_zero, 1), reduce, include_self);
      grad_src = where(single_zero, gather(g * without_zero, dim, index),
                       gather(g * result, dim, index) / masked_fill(src_used, src_zero, 1));
    } else {  // amax, amin
      const Tensor value = gather(result, dim, index);
      const Tensor self_is = (self == result).to(g.dtype()), src_is = (src_used == value).to(g.dtype());
      const Tensor shared = g / scatter_add(self_is, dim, index, src_is);
      grad_self = self_is * shared;
      grad_src = src_is * gather(shared, dim, index);
    }
    if (!include_self) {
      const Tensor hit =
          scatter(zeros(self.sizes(), TensorOptions(kBool).with_device(self.device())), dim, index, Scalar(true));
      grad_self = masked_fill(grad_self, hit, 0);
    }
    return {grad_self, Tensor(), Tensor(), PadToSource(grad_src, src.sizes()), Tensor(), Tensor()};
  }
  // src's leading block of index's shape.
  static Tensor SliceLike(const Tensor& src, const Tensor& index) {
    Tensor t = src;
    for (int64_t d = 0; d < index.dim(); ++d) t = t.narrow(d, 0, index.size(d));
    return t;
  }
};
}  // namespace

Tensor scatter_reduce(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self) {
  CheckIndex(index, "scatter_reduce");
  ANVIL_CHECK(reduce == "sum" || reduce == "prod" || reduce == "mean" || reduce == "amax" || reduce == "amin",
              "scatter_reduce: reduce argument must be either sum, prod, mean, amax or amin, got ", reduce);
  ANVIL_CHECK_TYPE(src.dtype() == x.dtype(), "scatter_reduce(): Expected self.dtype to be equal to src.dtype, got ",
                   x.dtype(), " and ", src.dtype());
  if (GradMode::is_enabled() && (x.requires_grad() || src.requires_grad())) {
    return ScatterReduceFn::apply(x, dim, index, src, reduce, include_self);
  }
  return ScatterReduceForward(x, dim, index, src, reduce, include_self);
}

namespace {
Tensor ScatterReduceForward(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src,
                            const std::string& reduce, bool include_self) {
  const TensorOptions opts = TensorOptions(x.dtype()).with_device(x.device());
  // Without include_self the elements that receive a source start from the reduction's
  // identity, so only the sources count there.
  Tensor hit;
  Tensor base = x;
  if (!include_self) {
    hit = scatter(zeros(x.sizes(), TensorOptions(kBool).with_device(x.device())), dim, index, Scalar(true));
    Scalar identity = 0;
    if (reduce == "prod") identity = 1;
    if (reduce == "amax" || reduce == "amin") identity = ExtremeOf(x.dtype(), /*lowest=*/reduce == "amax");
    // The identity as an exact integer where it is one (a double would round INT64_MAX).
    const Tensor id = identity.is_floating_point()
                          ? full({}, identity, opts)
                          : tensor(std::vector<int64_t>{identity.to_int()}).reshape({}).to(x.dtype());
    base = where(hit, id.to(x.device()), x);
  }
  ScatterArgs a = ScatterDim(dim);
  a.mode = reduce == "prod"   ? kScatterProd
           : reduce == "amax" ? kScatterAmax
           : reduce == "amin" ? kScatterAmin
                              : kScatterSum;
  Tensor out = dispatch1(OpId::ScatterReduce, {base, index, src}, a);
  if (reduce != "mean") return out;
  // mean: the sum over the count of what was summed (the element itself with include_self);
  // untouched elements keep their value. Integers divide rounding down, as PyTorch's.
  const Tensor start = include_self ? ones(x.sizes(), opts) : where(hit, Scalar(0), Scalar(1)).to(x.dtype());
  const Tensor count = scatter_add(start, dim, index, ones(index.sizes(), opts));
  return is_floating_point(x.dtype()) ? out / count : floor_divide(out, count);
}
}  // namespace

Tensor scatter(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce) {
  ANVIL_CHECK(reduce == "add" || reduce == "multiply", "scatter: reduce argument must be either add or multiply, got ",
              reduce);
  return scatter_reduce(x, dim, index, src.dtype() == x.dtype() ? src : src.to(x.dtype()),
                        reduce == "add" ? "sum" : "prod", /*include_self=*/true);
}

Tensor index_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  CheckIndex(index, "index_add");
  IndexArgs a = DimAttrs(dim);
  a.alpha = alpha.to_double();
  return dispatch1(OpId::IndexAdd, {x, index, source.dtype() == x.dtype() ? source : source.to(x.dtype())}, a);
}

Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  CheckIndex(index, "scatter_");
  return inplace_op(OpId::Scatter, *this, {index, src.to(dtype())}, ScatterDim(dim), "scatter_");
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  CheckIndex(index, "scatter_add_");
  return inplace_op(OpId::ScatterAdd, *this, {index, src.to(dtype())}, ScatterDim(dim), "scatter_add_");
}
Tensor& Tensor::index_add_(int64_t dim, const Tensor& index, const Tensor& source, Scalar alpha) {
  CheckIndex(index, "index_add_");
  IndexArgs a = DimAttrs(dim);
  a.alpha = alpha.to_double();
  return inplace_op(OpId::IndexAdd, *this, {index, source.to(dtype())}, a, "index_add_");
}

Tensor index(const Tensor& x, const std::vector<Tensor>& indices) {
  Prepared p = Prepare(x, indices);
  if (p.indices.empty()) return x;
  std::vector<Tensor> inputs{x};
  inputs.insert(inputs.end(), p.indices.begin(), p.indices.end());
  return dispatch1(OpId::Index, inputs, AdvancedIndexArgs{.indexed_dims = p.dims});
}

namespace {
std::vector<Tensor> PutInputs(const Tensor& x, const Prepared& p, const Tensor& values, AdvancedIndexArgs& a) {
  std::vector<Tensor> probe{x};
  probe.insert(probe.end(), p.indices.begin(), p.indices.end());
  a.indexed_dims = p.dims;
  const IntArray shape = infer_specs(OpId::Index, probe, a)[0].sizes;
  ANVIL_CHECK(broadcast_shapes(values.sizes(), shape) == shape,
              "index_put_: shape mismatch: value tensor "
              "of shape ",
              shape_str(values.sizes()), " cannot be broadcast to indexing result of shape ", shape_str(shape));
  probe.push_back((values.dtype() == x.dtype() ? values : values.to(x.dtype())).expand(shape));
  return probe;
}
}  // namespace

Tensor index_put(const Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  Prepared p = Prepare(x, indices);
  ANVIL_CHECK(!p.indices.empty(), "index_put: expected at least one index tensor");
  AdvancedIndexArgs a{.accumulate = accumulate};
  const std::vector<Tensor> inputs = PutInputs(x, p, values, a);  // fills a.indexed_dims
  return dispatch1(OpId::IndexPut, inputs, a);
}

Tensor& index_put_(Tensor& x, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate) {
  Prepared p = Prepare(x, indices);
  ANVIL_CHECK(!p.indices.empty(), "index_put_: expected at least one index tensor");
  AdvancedIndexArgs a{.accumulate = accumulate};
  std::vector<Tensor> in = PutInputs(x, p, values, a);
  return inplace_op(OpId::IndexPut, x, std::vector<Tensor>(in.begin() + 1, in.end()), a, "index_put_");
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, Scalar value) {
  ANVIL_CHECK_TYPE(mask.dtype() == kBool, "masked_fill only supports boolean masks, but got mask with dtype ",
                   mask.dtype());
  return where(mask, wrap_scalar(value, x.device()).to(x.dtype()), x);
}

Tensor masked_select(const Tensor& x, const Tensor& mask) {
  ANVIL_CHECK_TYPE(mask.dtype() == kBool, "masked_select: expected a bool mask, got ", mask.dtype());
  auto b = broadcast_tensors({x, mask});
  return index(b[0], {b[1]});
}

Tensor nonzero(const Tensor& x) { return dispatch1(OpId::Nonzero, {x}, OpAttrs{}); }

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  ANVIL_CHECK_TYPE(indices.dtype() == kInt64, "one_hot is only applicable to index tensors (int64), got ",
                   indices.dtype());
  if (num_classes < 0) num_classes = indices.numel() == 0 ? 0 : max(indices).item<int64_t>() + 1;
  if (indices.numel() > 0) {
    ANVIL_CHECK(min(indices).item<int64_t>() >= 0, "one_hot: class values must be non-negative");
    ANVIL_CHECK(max(indices).item<int64_t>() < num_classes, "one_hot: class values must be smaller than num_classes (",
                num_classes, ")");
  }
  IntArray shape = indices.sizes();
  shape.push_back(num_classes);
  const Tensor zero = zeros(shape, TensorOptions(kInt64).with_device(indices.device()));
  return scatter(zero, -1, indices.unsqueeze(-1), Scalar(1));
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  ANVIL_CHECK(!tensors.empty(), "cat(): expected a non-empty list of tensors");
  // Legacy rule kept by PyTorch: 1-D empty tensors are skipped.
  std::vector<Tensor> parts;
  ScalarType dt = tensors[0].dtype();
  for (const Tensor& t : tensors) dt = promote_types(dt, t.dtype());
  for (const Tensor& t : tensors) {
    if (t.dim() == 1 && t.numel() == 0 && tensors.size() > 1) continue;
    ANVIL_CHECK(t.dim() > 0, "zero-dimensional tensor cannot be concatenated");
    parts.push_back(t.dtype() == dt ? t : t.to(dt));
  }
  if (parts.empty()) return tensors[0];
  return dispatch1(OpId::Cat, parts, DimArgs{dim});
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  ANVIL_CHECK(!tensors.empty(), "stack expects a non-empty TensorList");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ANVIL_CHECK(tensors[i].sizes() == tensors[0].sizes(), "stack expects each tensor to be equal size, but got ",
                shape_str(tensors[0].sizes()), " at entry 0 and ", shape_str(tensors[i].sizes()), " at entry ", i);
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

}  // namespace anvil
