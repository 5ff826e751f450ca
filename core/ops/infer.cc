// Shape and dtype inference, with the user-facing validation of each op family. Messages
// say what was expected and what came.
#include <algorithm>

#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

IntArray ReducedSizes(const IntArray& sizes, const IntArray& dims, bool keepdim, const char* op) {
  const int64_t nd = static_cast<int64_t>(sizes.size());
  if (nd == 0) {  // a 0-dim tensor reduces over dim 0 / -1 to itself (PyTorch)
    for (int64_t d : dims) wrap_dim(d, 0, op);
    return {};
  }
  std::vector<bool> reduce(nd, dims.empty());
  for (int64_t d : dims) {
    int64_t w = wrap_dim(d, nd, op);
    ANVIL_CHECK(!reduce[w] || dims.empty(), op, ": dim ", d, " appears more than once in the reduction dims");
    reduce[w] = true;
  }
  IntArray out;
  for (int64_t i = 0; i < nd; ++i) {
    if (!reduce[i])
      out.push_back(sizes[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

void CheckSameDtype(const std::vector<Tensor>& in, size_t n, OpId op) {
  for (size_t i = 1; i < n; ++i) {
    ANVIL_INTERNAL_ASSERT(in[i].dtype() == in[0].dtype(), op_name(op), ": operands reached the kernel with dtypes ",
                          in[0].dtype(), " and ", in[i].dtype());
  }
}

// Max/min-like reductions have no identity: every reduced dim must be non-empty.
void CheckNonEmptyReduction(const Tensor& x, const IntArray& dims, const char* op) {
  if (x.dim() == 0) return;
  if (dims.empty()) {
    ANVIL_CHECK_INDEX(x.numel() > 0, op, "(): Expected reduction over a non-empty tensor, got shape ",
                      shape_str(x.sizes()), ". Specify a dim, or reduce a tensor with elements.");
    return;
  }
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, x.dim(), op);
    ANVIL_CHECK_INDEX(x.size(w) > 0, op, "(): Expected reduction dim ", w, " to have non-zero size, got shape ",
                      shape_str(x.sizes()));
  }
}

void CheckIndexTensor(const Tensor& index, const char* op) {
  ANVIL_CHECK_TYPE(index.dtype() == kInt64 || index.dtype() == kInt32, op,
                   ": expected an int64 (or int32) index tensor, got ", index.dtype());
}

}  // namespace

std::vector<TensorSpec> infer_specs(OpId op, const std::vector<Tensor>& in, const OpAttrs& a) {
  check_op_args(op, a);
  const OpInfo& info = op_info(op);
  const char* name = info.name.data();
  switch (info.infer) {
    case InferFamily::UnaryKeep:
    case InferFamily::UnaryFloat:
    case InferFamily::UnaryPow:  // the wrappers cast the input to the computing dtype first
    case InferFamily::Clone:
    case InferFamily::CumSum:
      return {{in[0].sizes(), in[0].dtype()}};
    case InferFamily::UnaryFloating:
      ANVIL_CHECK_TYPE(in[0].is_floating_point(), name, ": expected a floating-point tensor, got ", in[0].dtype());
      return {{in[0].sizes(), in[0].dtype()}};
    case InferFamily::UnaryBool:
      return {{in[0].sizes(), kBool}};
    case InferFamily::BinaryArith:
    case InferFamily::BinaryFloat:  // promoted by the wrappers: both operands arrive in one dtype
    case InferFamily::BinaryCompare:
    case InferFamily::BinaryLogical: {
      CheckSameDtype(in, 2, op);
      const bool to_bool = info.infer == InferFamily::BinaryCompare || info.infer == InferFamily::BinaryLogical;
      return {{broadcast_shapes(in[0].sizes(), in[1].sizes()), to_bool ? kBool : in[0].dtype()}};
    }
    case InferFamily::Cast:
      return {{in[0].sizes(), a.get<CastArgs>().dtype}};
    case InferFamily::Where: {
      ANVIL_CHECK_TYPE(in[0].dtype() == kBool, "where: expected a bool condition, got ", in[0].dtype());
      IntArray s = broadcast_shapes(broadcast_shapes(in[0].sizes(), in[1].sizes()), in[2].sizes());
      return {{s, in[1].dtype()}};
    }
    case InferFamily::ReduceSum:
    case InferFamily::ReduceFloat: {
      const ReduceArgs& r = a.get<ReduceArgs>();
      return {{ReducedSizes(in[0].sizes(), r.dims, r.keepdim, name), in[0].dtype()}};
    }
    case InferFamily::ReduceKeep: {
      const ReduceArgs& r = a.get<ReduceArgs>();
      CheckNonEmptyReduction(in[0], r.dims, name);
      return {{ReducedSizes(in[0].sizes(), r.dims, r.keepdim, name), in[0].dtype()}};
    }
    case InferFamily::ReduceBool: {
      const ReduceArgs& r = a.get<ReduceArgs>();
      return {{ReducedSizes(in[0].sizes(), r.dims, r.keepdim, name), kBool}};
    }
    case InferFamily::ReduceArg: {
      const ReduceArgs& r = a.get<ReduceArgs>();
      CheckNonEmptyReduction(in[0], r.dims, name);
      return {{ReducedSizes(in[0].sizes(), r.dims, r.keepdim, name), kInt64}};
    }
    case InferFamily::ReduceIndexed: {
      const ReduceArgs& r = a.get<ReduceArgs>();
      CheckNonEmptyReduction(in[0], r.dims, name);
      IntArray s = ReducedSizes(in[0].sizes(), r.dims, r.keepdim, name);
      return {{s, in[0].dtype()}, {s, kInt64}};
    }
    case InferFamily::Mm: {
      ANVIL_CHECK(in[0].dim() == 2 && in[1].dim() == 2, "mm: expected 2-D matrices, got ", shape_str(in[0].sizes()),
                  " and ", shape_str(in[1].sizes()));
      ANVIL_CHECK(in[0].size(1) == in[1].size(0), "mm: shapes ", shape_str(in[0].sizes()), " and ",
                  shape_str(in[1].sizes()), " cannot be multiplied (", in[0].size(1), " != ", in[1].size(0), ")");
      CheckSameDtype(in, 2, op);
      return {{{in[0].size(0), in[1].size(1)}, in[0].dtype()}};
    }
    case InferFamily::Linear: {
      // linear() folds batch dims into rows and checks the shapes with the user's names.
      ANVIL_INTERNAL_ASSERT(in[0].dim() == 2 && in[1].dim() == 2 && in[2].dim() == 1 &&
                                in[0].size(1) == in[1].size(1) && in[2].size(0) == in[1].size(0),
                            op_name(op), ": operands reached the kernel as ", shape_str(in[0].sizes()), ", ",
                            shape_str(in[1].sizes()), " and ", shape_str(in[2].sizes()));
      CheckSameDtype(in, 3, op);
      return {{{in[0].size(0), in[1].size(0)}, in[0].dtype()}};
    }
    case InferFamily::Bmm: {
      ANVIL_CHECK(in[0].dim() == 3 && in[1].dim() == 3, "bmm: expected 3-D batches, got ", shape_str(in[0].sizes()),
                  " and ", shape_str(in[1].sizes()));
      ANVIL_CHECK(in[0].size(0) == in[1].size(0) && in[0].size(2) == in[1].size(1), "bmm: shapes ",
                  shape_str(in[0].sizes()), " and ", shape_str(in[1].sizes()),
                  " cannot be multiplied (batch sizes and inner dimensions must match)");
      CheckSameDtype(in, 2, op);
      return {{{in[0].size(0), in[0].size(1), in[1].size(2)}, in[0].dtype()}};
    }
    case InferFamily::Cat: {
      const Tensor& first = in[0];
      const int64_t d = wrap_dim(a.get<DimArgs>().dim, first.dim(), "cat");
      IntArray out = first.sizes();
      out[d] = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        const Tensor& t = in[i];
        ANVIL_CHECK(t.dim() == first.dim(), "cat: expected every tensor to have ", first.dim(), " dims, got ", t.dim(),
                    " for tensor ", i);
        for (int64_t k = 0; k < t.dim(); ++k) {
          ANVIL_CHECK(k == d || t.size(k) == first.size(k), "cat: sizes of tensors must match except in dimension ", d,
                      ". Expected size ", first.size(k), " but got size ", t.size(k), " for tensor number ", i,
                      " in the list");
        }
        out[d] += t.size(d);
      }
      CheckSameDtype(in, in.size(), op);
      return {{out, first.dtype()}};
    }
    case InferFamily::IndexSelect: {
      CheckIndexTensor(in[1], name);
      ANVIL_CHECK(in[1].dim() <= 1, "index_select: expected a 0-D or 1-D index, got shape ", shape_str(in[1].sizes()));
      IntArray s = in[0].sizes();
      const int64_t d = wrap_dim(a.get<IndexArgs>().dim, std::max<int64_t>(in[0].dim(), 1), name);
      if (!s.empty()) s[d] = in[1].numel();
      return {{s, in[0].dtype()}};
    }
    case InferFamily::Gather: {
      CheckIndexTensor(in[1], name);
      ANVIL_CHECK(in[1].dim() == in[0].dim(), "gather: index must have as many dims as input (", in[0].dim(), "), got ",
                  in[1].dim());
      const int64_t d = wrap_dim(a.get<IndexArgs>().dim, std::max<int64_t>(in[0].dim(), 1), name);
      for (int64_t k = 0; k < in[0].dim(); ++k) {
        ANVIL_CHECK(k == d || in[1].size(k) <= in[0].size(k), "gather: index ", shape_str(in[1].sizes()),
                    " is larger than input ", shape_str(in[0].sizes()), " in dim ", k);
      }
      return {{in[1].sizes(), in[0].dtype()}};
    }
    case InferFamily::Scatter: {  // scatter, scatter_add, scatter_reduce
      CheckIndexTensor(in[1], name);
      ANVIL_CHECK(in[1].dim() == in[0].dim(), name, ": index must have as many dims as self (", in[0].dim(), "), got ",
                  in[1].dim());
      ANVIL_CHECK(in[2].dim() == in[0].dim(), name, ": src must have as many dims as self (", in[0].dim(), "), got ",
                  in[2].dim());
      const int64_t d = wrap_dim(a.get<ScatterArgs>().dim, std::max<int64_t>(in[0].dim(), 1), name);
      for (int64_t k = 0; k < in[0].dim(); ++k) {
        ANVIL_CHECK(in[1].size(k) <= in[2].size(k), name, ": index ", shape_str(in[1].sizes()), " is larger than src ",
                    shape_str(in[2].sizes()), " in dim ", k);
        ANVIL_CHECK(k == d || in[1].size(k) <= in[0].size(k), name, ": index ", shape_str(in[1].sizes()),
                    " is larger than self ", shape_str(in[0].sizes()), " in dim ", k);
      }
      CheckSameDtype({in[0], in[2]}, 2, op);
      return {{in[0].sizes(), in[0].dtype()}};
    }
    case InferFamily::IndexAdd: {
      CheckIndexTensor(in[1], name);
      ANVIL_CHECK(in[1].dim() <= 1, "index_add: expected a 1-D index, got ", shape_str(in[1].sizes()));
      const int64_t d = wrap_dim(a.get<IndexArgs>().dim, std::max<int64_t>(in[0].dim(), 1), name);
      IntArray expect = in[0].sizes();
      if (!expect.empty()) expect[d] = in[1].numel();
      ANVIL_CHECK(in[2].sizes() == expect, "index_add: expected source of shape ", shape_str(expect), ", got ",
                  shape_str(in[2].sizes()));
      CheckSameDtype({in[0], in[2]}, 2, op);
      return {{in[0].sizes(), in[0].dtype()}};
    }
    case InferFamily::Index: {
      // inputs: self, then one (already broadcast, int64) index per entry of indexed_dims.
      const Tensor& self = in[0];
      const IntArray& idims = a.get<AdvancedIndexArgs>().indexed_dims;
      IntArray bshape = in[1].sizes();
      bool adjacent = true;
      for (size_t k = 1; k < idims.size(); ++k) adjacent &= idims[k] == idims[k - 1] + 1;
      IntArray out;
      if (adjacent) {
        for (int64_t k = 0; k < idims[0]; ++k) out.push_back(self.size(k));
        out.insert(out.end(), bshape.begin(), bshape.end());
        for (int64_t k = idims.back() + 1; k < self.dim(); ++k) out.push_back(self.size(k));
      } else {
        out = bshape;
        for (int64_t k = 0; k < self.dim(); ++k) {
          if (std::find(idims.begin(), idims.end(), k) == idims.end()) out.push_back(self.size(k));
        }
      }
      return {{out, self.dtype()}};
    }
    case InferFamily::IndexPut:
      return {{in[0].sizes(), in[0].dtype()}};
    case InferFamily::Sort:
      return {{in[0].sizes(), in[0].dtype()}, {in[0].sizes(), kInt64}};
    case InferFamily::StridedScatter:
      return {{a.get<StridedScatterArgs>().sizes, in[0].dtype()}};
    case InferFamily::Im2Col:
    case InferFamily::Col2Im: {
      const WindowArgs& w = a.get<WindowArgs>();
      const int64_t OH = w.out_h(), OW = w.out_w(), taps = w.kernel_h * w.kernel_w;
      if (op == OpId::Im2Col) return {{{in[0].size(0), in[0].size(1) * taps, OH * OW}, in[0].dtype()}};
      ANVIL_CHECK(in[0].size(2) == OH * OW, "col2im: expected ", OH * OW, " columns (", OH, "x", OW,
                  " windows) for output ", w.height, "x", w.width, ", got ", in[0].size(2));
      return {{{in[0].size(0), in[0].size(1) / taps, w.height, w.width}, in[0].dtype()}};
    }
    case InferFamily::MaxPoolIndices: {
      const WindowArgs& w = a.get<WindowArgs>();
      ANVIL_CHECK(in[0].dim() == 4 && in[0].is_floating_point(),
                  "max_pool2d_indices: expected a floating-point input [N, C, H, W], got ", in[0].dtype(), " ",
                  shape_str(in[0].sizes()));
      ANVIL_CHECK(w.height == in[0].size(2) && w.width == in[0].size(3),
                  "max_pool2d_indices: the window was made for a ", w.height, "x", w.width, " image, got ",
                  in[0].size(2), "x", in[0].size(3));
      return {{{in[0].size(0), in[0].size(1), w.out_h(), w.out_w()}, kInt64}};
    }
    case InferFamily::NllLoss: {
      if (op == OpId::NllLossBackward) return {{{in[1].size(0), a.get<NllLossArgs>().num_classes}, in[0].dtype()}};
      ANVIL_CHECK(in[0].dim() == 2 && in[0].is_floating_point(),
                  "nll_loss: expected floating-point "
                  "log-probabilities of shape [rows, classes], got ",
                  in[0].dtype(), " ", shape_str(in[0].sizes()));
      ANVIL_CHECK_TYPE(in[1].dtype() == kInt64, "nll_loss: expected int64 class indices, got ", in[1].dtype());
      ANVIL_CHECK(in[1].dim() == 1 && in[1].size(0) == in[0].size(0), "nll_loss: expected ", in[0].size(0),
                  " targets (one per row), got shape ", shape_str(in[1].sizes()));
      if (in.size() > 2) {
        ANVIL_CHECK(in[2].dim() == 1 && in[2].size(0) == in[0].size(1) && in[2].dtype() == in[0].dtype(),
                    "nll_loss: expected class weights of shape [", in[0].size(1), "] and dtype ", in[0].dtype(),
                    ", got ", in[2].dtype(), " ", shape_str(in[2].sizes()));
      }
      const IntArray loss = a.get<NllLossArgs>().reduction == nll::kNone ? IntArray{in[0].size(0)} : IntArray{};
      return {{loss, in[0].dtype()}, {IntArray{}, in[0].dtype()}};
    }
    case InferFamily::SoftmaxLike:
      if (op == OpId::Softmax || op == OpId::LogSoftmax) return {{in[0].sizes(), in[0].dtype()}};
      ANVIL_CHECK(in[0].sizes() == in[1].sizes() && in[0].dtype() == in[1].dtype(), name,
                  ": expected a gradient and an output of one shape and dtype, got ", in[0].dtype(), " ",
                  shape_str(in[0].sizes()), " and ", in[1].dtype(), " ", shape_str(in[1].sizes()));
      return {{in[0].sizes(), in[0].dtype()}};
    case InferFamily::Conv2d: {
      const WindowArgs& w = a.get<WindowArgs>();
      const int64_t OH = w.out_h(), OW = w.out_w();
      if (op == OpId::Conv2d) return {{{in[0].size(0), in[1].size(0), OH, OW}, in[0].dtype()}};
      // The gradient rows take the output gradient first: [N, OC, OH, OW].
      ANVIL_CHECK(in[0].dim() == 4 && in[0].size(2) == OH && in[0].size(3) == OW, op_name(op),
                  ": expected an output gradient with ", OH, "x", OW, " positions, got ", shape_str(in[0].sizes()));
      if (op == OpId::Conv2dInputGrad) {
        return {{{in[0].size(0), in[1].size(1) * w.groups, w.height, w.width}, in[0].dtype()}};
      }
      return {{{in[0].size(1), in[1].size(1) / w.groups, w.kernel_h, w.kernel_w}, in[0].dtype()}};
    }
    case InferFamily::ViewGeom:
    case InferFamily::Dynamic:
    case InferFamily::Foreach:
      break;
  }
  ANVIL_INTERNAL_ASSERT(false, name, ": its outputs are not inferred (views take their geometry from their ViewFn, ",
                        "the kernels of dynamic rows size their own outputs, fused steps have none)");
  return {};
}

IntArray broadcast_shapes(const IntArray& a, const IntArray& b) {
  const size_t n = std::max(a.size(), b.size());
  IntArray out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    ANVIL_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
                " are not broadcastable: size ", da, " vs ", db, " at dim ", i);
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace anvil
