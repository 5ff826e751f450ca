// View ops: new windows onto the same storage. Each is a ViewFn applied to a Geometry;
// see NOTE [ View tracking ] for why the same function is applied three ways.
#include <algorithm>
#include <numeric>

#include "core/autograd/node.h"
#include "core/export/capture.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/ops/op_trace.h"
#include "core/util/error.h"

namespace anvil {
namespace {

// PyTorch's computeStride: strides for viewing (sizes, strides) as `shape` without a copy,
// or nullopt when some new dimension would span two non-contiguous chunks.
std::optional<IntArray> ComputeStride(const IntArray& sizes, const IntArray& strides, const IntArray& shape) {
  if (sizes.empty()) return IntArray(shape.size(), 1);
  const int64_t numel = numel_of(sizes);
  IntArray out(shape.size());
  if (numel == 0) {
    if (sizes == shape) return strides;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      out[d] = d + 1 == static_cast<int64_t>(shape.size()) ? 1 : std::max<int64_t>(shape[d + 1], 1) * out[d + 1];
    }
    return out;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = static_cast<int64_t>(sizes.size()) - 1; td >= 0; --td) {
    tensor_numel *= sizes[td];
    if (td == 0 || (sizes[td - 1] != 1 && strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

IntArray InferSize(IntArray shape, int64_t numel, const char* op) {
  int64_t infer = -1, known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ANVIL_CHECK(infer < 0, op, ": only one dimension can be inferred (-1), got shape ", shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      ANVIL_CHECK(shape[i] >= 0, op, ": invalid shape dimension ", shape[i], " in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    ANVIL_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape), " is invalid for input of size ",
                numel);
    shape[infer] = numel / known;
  }
  ANVIL_CHECK(numel_of(shape) == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel);
  return shape;
}

Geometry Contiguous(const IntArray& sizes) { return {sizes, contiguous_strides(sizes), 0}; }

}  // namespace

std::optional<Geometry> apply_view(const ViewFn& fn, const Geometry& in) {
  Geometry out = in;
  const int64_t nd = static_cast<int64_t>(in.sizes.size());
  switch (fn.kind) {
    case ViewFn::Reshape: {
      auto st = ComputeStride(in.sizes, in.strides, fn.sizes);
      if (!st) return std::nullopt;
      out.sizes = fn.sizes;
      out.strides = *st;
      return out;
    }
    case ViewFn::Permute:
      for (int64_t i = 0; i < nd; ++i) {
        out.sizes[i] = in.sizes[fn.sizes[i]];
        out.strides[i] = in.strides[fn.sizes[i]];
      }
      return out;
    case ViewFn::Expand: {
      const int64_t nn = static_cast<int64_t>(fn.sizes.size());
      out.sizes = fn.sizes;
      out.strides.assign(nn, 0);
      for (int64_t i = nn - 1, j = nd - 1; i >= 0; --i, --j) {
        if (j >= 0 && in.sizes[j] == fn.sizes[i])
          out.strides[i] = in.strides[j];
        else if (j >= 0 && in.sizes[j] != 1)
          return std::nullopt;  // validated by the caller
      }
      return out;
    }
    case ViewFn::Narrow:
      out.offset += fn.start * in.strides[fn.dim];
      out.sizes[fn.dim] = fn.length;
      return out;
    case ViewFn::Select:
      out.offset += fn.start * in.strides[fn.dim];
      out.sizes.erase(out.sizes.begin() + fn.dim);
      out.strides.erase(out.strides.begin() + fn.dim);
      return out;
    case ViewFn::Slice:
      out.offset += fn.start * in.strides[fn.dim];
      out.sizes[fn.dim] = fn.length;
      out.strides[fn.dim] *= fn.step;
      return out;
    case ViewFn::Diagonal: {
      const int64_t d1 = fn.dim, d2 = fn.dim2, off = fn.start;
      int64_t len;
      if (off >= 0) {
        len = std::max<int64_t>(std::min(in.sizes[d1], in.sizes[d2] - off), 0);
        if (len > 0) out.offset += off * in.strides[d2];
      } else {
        len = std::max<int64_t>(std::min(in.sizes[d1] + off, in.sizes[d2]), 0);
        if (len > 0) out.offset -= off * in.strides[d1];
      }
      const int64_t diag_stride = in.strides[d1] + in.strides[d2];
      out.sizes.clear();
      out.strides.clear();
      for (int64_t i = 0; i < nd; ++i) {
        if (i == d1 || i == d2) continue;
        out.sizes.push_back(in.sizes[i]);
        out.strides.push_back(in.strides[i]);
      }
      out.sizes.push_back(len);
      out.strides.push_back(diag_stride);
      return out;
    }
    case ViewFn::Unfold: {
      const int64_t n = nd == 0 ? 1 : (in.sizes[fn.dim] - fn.length) / fn.step + 1;
      if (nd == 0) {
        out.sizes = {fn.length};
        out.strides = {1};
        return out;
      }
      out.sizes[fn.dim] = n;
      out.strides[fn.dim] = in.strides[fn.dim] * fn.step;
      out.sizes.push_back(fn.length);
      out.strides.push_back(in.strides[fn.dim]);
      return out;
    }
    case ViewFn::Strided:
      out.sizes = fn.sizes;
      out.strides = fn.strides;
      out.offset = in.offset + fn.start;
      return out;
  }
  return std::nullopt;
}

Tensor make_view(OpId op, const Tensor& input, const ViewFn& fn) {
  ANVIL_CHECK(input.defined(), op_name(op), ": input is an undefined tensor");
  detail::trace_op(op);
  auto g = apply_view(fn, {input.sizes(), input.strides(), input.storage_offset()});
  ANVIL_CHECK(g.has_value(), "view size ", shape_str(fn.sizes), " is not compatible with input tensor's size ",
              shape_str(input.sizes()), " and stride ", shape_str(input.strides()),
              " (at least one dimension spans across two contiguous subspaces). Use "
              ".reshape(...) instead.");
  auto impl = std::make_shared<TensorImpl>(input.storage(), std::move(g->sizes), std::move(g->strides), g->offset,
                                           input.dtype());
  // NOTE [ View tracking ]: place the view in its root base.
  auto vi = std::make_shared<ViewInfo>();
  const auto& parent = input.impl()->view_info();
  std::optional<Geometry> rel;
  if (parent) {
    vi->base = parent->base;
    vi->multi_output = parent->multi_output;
    if (parent->rel_valid) {
      rel = apply_view(fn, {parent->rel_sizes, parent->rel_strides, parent->rel_offset});
    }
  } else {
    vi->base = input.impl_ptr();
    if (input.is_contiguous()) rel = apply_view(fn, Contiguous(input.sizes()));
  }
  if (rel) {
    vi->rel_sizes = std::move(rel->sizes);
    vi->rel_strides = std::move(rel->strides);
    vi->rel_offset = rel->offset;
  } else {
    vi->rel_valid = false;
  }
  vi->grad_fn_version = input._version();
  impl->set_view_info(std::move(vi));
  std::vector<Tensor> outs{Tensor(impl)};
  if (exporter::detail::active()) exporter::detail::on_op(op, {input}, outs, ViewArgs{fn, input.sizes()});
  autograd::record_op(op, ViewArgs{fn, input.sizes()}, {input}, outs);
  return outs[0];
}

// ---- Tensor view methods ----

Tensor Tensor::view(IntArray sizes) const {
  ViewFn fn;
  fn.kind = ViewFn::Reshape;
  fn.sizes = InferSize(std::move(sizes), numel(), "view");
  return make_view(OpId::View, *this, fn);
}

Tensor Tensor::reshape(IntArray sizes) const {
  IntArray shape = InferSize(std::move(sizes), numel(), "reshape");
  if (ComputeStride(this->sizes(), strides(), shape)) return view(shape);
  return contiguous().view(shape);
}

Tensor Tensor::permute(IntArray dims) const {
  ANVIL_CHECK(static_cast<int64_t>(dims.size()) == dim(), "permute: expected ", dim(), " dims, got ", shape_str(dims));
  std::vector<bool> seen(dim(), false);
  for (auto& d : dims) {
    d = wrap_dim(d, dim(), "permute");
    ANVIL_CHECK(!seen[d], "permute: repeated dim ", d, " in ", shape_str(dims));
    seen[d] = true;
  }
  ViewFn fn;
  fn.kind = ViewFn::Permute;
  fn.sizes = std::move(dims);
  return make_view(OpId::Permute, *this, fn);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) return *this;
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  IntArray perm(dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[d0], perm[d1]);
  return permute(perm);
}

Tensor Tensor::t() const {
  ANVIL_CHECK(dim() <= 2, "t() expects a tensor with <= 2 dimensions, but self is ", dim(), "D");
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::movedim(int64_t src, int64_t dst) const {
  src = wrap_dim(src, dim(), "movedim");
  dst = wrap_dim(dst, dim(), "movedim");
  IntArray order;
  for (int64_t i = 0; i < dim(); ++i)
    if (i != src) order.push_back(i);
  order.insert(order.begin() + dst, src);
  return permute(order);
}

Tensor Tensor::expand(IntArray sizes) const {
  ANVIL_CHECK(static_cast<int64_t>(sizes.size()) >= dim(), "expand: the number of sizes provided (", sizes.size(),
              ") must be greater or equal to the number of dimensions in the tensor (", dim(), ")");
  const int64_t lead = static_cast<int64_t>(sizes.size()) - dim();
  for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) {
    const int64_t j = i - lead;
    if (sizes[i] == -1) {
      ANVIL_CHECK(j >= 0, "expand: -1 is not allowed in a leading, non-existing dimension");
      sizes[i] = size(j);
    }
    ANVIL_CHECK(j < 0 || size(j) == sizes[i] || size(j) == 1, "expand: the expanded size ", sizes[i],
                " must match the existing size ", size(j), " at non-singleton dimension ", i,
                ". Target sizes: ", shape_str(sizes), ". Tensor sizes: ", shape_str(this->sizes()));
  }
  if (sizes == this->sizes()) return *this;
  ViewFn fn;
  fn.kind = ViewFn::Expand;
  fn.sizes = std::move(sizes);
  return make_view(OpId::Expand, *this, fn);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  ANVIL_CHECK(dim() > 0, "narrow() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "narrow");
  const int64_t n = size(d);
  if (start < 0) start += n;
  ANVIL_CHECK_INDEX(start >= 0 && length >= 0 && start + length <= n, "narrow: start (", start, ") + length (", length,
                    ") exceeds dimension size (", n, ") of dim ", d);
  ViewFn fn;
  fn.kind = ViewFn::Narrow;
  fn.dim = d;
  fn.start = start;
  fn.length = length;
  return make_view(OpId::AsStrided, *this, fn);
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  ANVIL_CHECK(dim() > 0, "slice() cannot be applied to a 0-dim tensor");
  ANVIL_CHECK(step > 0, "slice: step must be positive, got ", step);
  d = wrap_dim(d, dim(), "slice");
  const int64_t n = size(d);
  int64_t s = start.value_or(0), e = end.value_or(n);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, s, n);
  ViewFn fn;
  fn.kind = ViewFn::Slice;
  fn.dim = d;
  fn.start = s;
  fn.length = (e - s + step - 1) / step;
  fn.step = step;
  return make_view(OpId::AsStrided, *this, fn);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  ANVIL_CHECK_INDEX(dim() > 0, "select() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t n = size(d);
  ANVIL_CHECK_INDEX(index >= -n && index < n, "select(): index ", index, " out of range for tensor of size ",
                    shape_str(sizes()), " at dimension ", d);
  if (index < 0) index += n;
  ViewFn fn;
  fn.kind = ViewFn::Select;
  fn.dim = d;
  fn.start = index;
  return make_view(OpId::AsStrided, *this, fn);
}

Tensor Tensor::squeeze() const {
  IntArray s;
  for (int64_t v : sizes())
    if (v != 1) s.push_back(v);
  return s.size() == sizes().size() ? *this : view(s);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim(d, dim(), "squeeze");
  if (size(d) != 1) return *this;
  IntArray s = sizes();
  s.erase(s.begin() + d);
  return view(s);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  IntArray s = sizes();
  s.insert(s.begin() + d, 1);
  return view(s);
}

Tensor Tensor::flatten(int64_t start, int64_t end) const {
  if (dim() == 0) return reshape({1});
  start = wrap_dim(start, dim(), "flatten");
  end = wrap_dim(end, dim(), "flatten");
  ANVIL_CHECK(start <= end, "flatten() has invalid args: start_dim ", start, " > end_dim ", end);
  IntArray s(sizes().begin(), sizes().begin() + start);
  int64_t m = 1;
  for (int64_t i = start; i <= end; ++i) m *= size(i);
  s.push_back(m);
  s.insert(s.end(), sizes().begin() + end + 1, sizes().end());
  return reshape(s);
}

Tensor Tensor::unflatten(int64_t d, IntArray parts) const {
  d = wrap_dim(d, dim(), "unflatten");
  parts = InferSize(std::move(parts), size(d), "unflatten");
  IntArray s(sizes().begin(), sizes().begin() + d);
  s.insert(s.end(), parts.begin(), parts.end());
  s.insert(s.end(), sizes().begin() + d + 1, sizes().end());
  return view(s);
}

Tensor Tensor::diagonal(int64_t offset, int64_t d1, int64_t d2) const {
  ANVIL_CHECK(dim() >= 2, "diagonal: expected a tensor with at least 2 dims, got ", dim());
  d1 = wrap_dim(d1, dim(), "diagonal");
  d2 = wrap_dim(d2, dim(), "diagonal");
  ANVIL_CHECK(d1 != d2, "diagonal dimensions cannot be identical ", d1, ", ", d2);
  ViewFn fn;
  fn.kind = ViewFn::Diagonal;
  fn.dim = d1;
  fn.dim2 = d2;
  fn.start = offset;
  return make_view(OpId::AsStrided, *this, fn);
}

Tensor Tensor::unfold(int64_t d, int64_t size_, int64_t step) const {
  const int64_t nd = std::max<int64_t>(dim(), 1);
  d = wrap_dim(d, nd, "unfold");
  const int64_t n = dim() == 0 ? 1 : size(d);
  ANVIL_CHECK(size_ <= n, "unfold: maximum size for tensor at dimension ", d, " is ", n, " but size is ", size_);
  ANVIL_CHECK(step > 0, "unfold: step is ", step, " but must be > 0");
  ViewFn fn;
  fn.kind = ViewFn::Unfold;
  fn.dim = d;
  fn.length = size_;
  fn.step = step;
  return make_view(OpId::AsStrided, *this, fn);
}

Tensor Tensor::as_strided(IntArray sizes_, IntArray strides_, std::optional<int64_t> offset) const {
  ANVIL_CHECK(sizes_.size() == strides_.size(), "as_strided: got ", sizes_.size(), " sizes but ", strides_.size(),
              " strides");
  const int64_t off = offset.value_or(storage_offset());
  int64_t max_index = off;
  for (size_t i = 0; i < sizes_.size(); ++i) {
    ANVIL_CHECK(sizes_[i] >= 0 && strides_[i] >= 0, "as_strided: negative size or stride in sizes ", shape_str(sizes_),
                ", strides ", shape_str(strides_));
    if (sizes_[i] == 0) {
      max_index = -1;
      break;
    }
    max_index += (sizes_[i] - 1) * strides_[i];
  }
  const int64_t capacity = static_cast<int64_t>(storage()->nbytes()) / element_size();
  ANVIL_CHECK_INDEX(max_index < capacity, "as_strided: setStorage: sizes ", shape_str(sizes_), ", strides ",
                    shape_str(strides_), ", storage offset ", off, " require a storage of ", max_index + 1,
                    " elements, but it has only ", capacity);
  ViewFn fn;
  fn.kind = ViewFn::Strided;
  fn.sizes = std::move(sizes_);
  fn.strides = std::move(strides_);
  if (!is_contiguous()) fn.source_strides = strides();
  fn.start = off - storage_offset();
  return make_view(OpId::AsStrided, *this, fn);
}

// Each dim i of the (left-padded) input becomes [repeats[i], size[i]] by an expand, then one
// reshape copies: the backward is the expand's sum, as PyTorch's repeat_backward.
Tensor Tensor::repeat(IntArray repeats) const {
  ANVIL_CHECK(static_cast<int64_t>(repeats.size()) >= dim(),
              "Number of dimensions of repeat dims can not be smaller than number of dimensions of tensor (got ",
              repeats.size(), " repeat dims for a tensor of ", dim(), " dims)");
  const size_t pad = repeats.size() - static_cast<size_t>(dim());
  IntArray padded(pad, 1), paired, expanded, result;
  padded.insert(padded.end(), sizes().begin(), sizes().end());
  for (size_t i = 0; i < repeats.size(); ++i) {
    ANVIL_CHECK(repeats[i] >= 0, "Trying to create tensor with negative dimension ", repeats[i], ": ",
                shape_str(repeats));
    paired.insert(paired.end(), {1, padded[i]});
    expanded.insert(expanded.end(), {repeats[i], padded[i]});
    result.push_back(repeats[i] * padded[i]);
  }
  Tensor out = reshape(paired).expand(expanded).reshape(result);
  return out.is_alias_of(*this) ? out.clone() : out;  // a copy even where every repeat is 1
}

Tensor Tensor::tile(IntArray repeats) const {
  if (static_cast<int64_t>(repeats.size()) < dim()) repeats.insert(repeats.begin(), dim() - repeats.size(), 1);
  return repeat(std::move(repeats));
}

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t d) const { return anvil::split(*this, split_size, d); }
std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t d) const { return anvil::chunk(*this, chunks, d); }
std::vector<Tensor> Tensor::unbind(int64_t d) const {
  d = wrap_dim(d, dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < size(d); ++i) {
    out.push_back(select(d, i));
    out.back().impl()->view_info()->multi_output = true;
  }
  return out;
}

std::vector<Tensor> split_with_sizes(const Tensor& x, IntArray sizes, int64_t d) {
  d = wrap_dim(d, x.dim(), "split_with_sizes");
  int64_t total = 0;
  for (int64_t s : sizes) total += s;
  ANVIL_CHECK(total == x.size(d), "split_with_sizes expects split_sizes to sum exactly to ", x.size(d),
              " (input tensor's size at dimension ", d, "), but got split_sizes=", shape_str(sizes));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(x.narrow(d, start, s));
    out.back().impl()->view_info()->multi_output = true;
    start += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int64_t d) {
  ANVIL_CHECK(split_size > 0 || x.size(d) == 0, "split expects split_size be positive, got ", split_size);
  d = wrap_dim(d, x.dim(), "split");
  IntArray sizes;
  for (int64_t s = 0; s < x.size(d); s += split_size) sizes.push_back(std::min(split_size, x.size(d) - s));
  if (sizes.empty()) sizes.push_back(0);
  return split_with_sizes(x, sizes, d);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t d) {
  ANVIL_CHECK(chunks > 0, "chunk expects `chunks` to be greater than 0, got: ", chunks);
  d = wrap_dim(d, x.dim(), "chunk");
  const int64_t size = (x.size(d) + chunks - 1) / chunks;
  return split(x, std::max<int64_t>(size, 1), d);
}

Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim) { return x.flatten(start_dim, end_dim); }

}  // namespace anvil
