// Layout decisions that every backend's cat and softmax kernels share, written once: where each
// cat input lands in the output, and the rows a softmax runs over. Each backend supplies only
// its copy (CopyInto on the CPU, CopyBits on CUDA) and its row kernel.
#pragma once

#include <algorithm>
#include <vector>

#include "core/ops/functions.h"
#include "core/tensor/tensor.h"

namespace anvil::shape_rows {

// out = cat(inputs, dim): copy(window of out, input) for each non-empty input.
template <typename Copy>
void Cat(const Tensor& out, const std::vector<Tensor>& inputs, int64_t dim, const Copy& copy) {
  const int64_t d = wrap_dim(dim, out.dim(), "cat");
  int64_t start = 0;
  for (const Tensor& t : inputs) {
    const int64_t n = t.size(d);
    if (n > 0 && t.numel() > 0) copy(out.narrow(d, start, n), t);
    start += n;
  }
}

// A softmax over `dim` as `rows` contiguous rows of `len`: in place when the dim is the last
// and both sides are contiguous, else through a copy with the dim moved last (finish() writes
// the result back).
struct SoftmaxRows {
  Tensor in, out;  // [rows, len] in memory
  int64_t len = 0, rows = 0;
  bool direct = true;
  int64_t dim = 0;

  SoftmaxRows(const Tensor& x, const Tensor& result, int64_t softmax_dim, const char* name) {
    const int64_t nd = std::max<int64_t>(x.dim(), 1);
    dim = wrap_dim(softmax_dim, nd, name);
    const Tensor xs = x.dim() == 0 ? x.reshape({1}) : x;
    direct = dim == nd - 1 && xs.is_contiguous() && result.is_contiguous();
    in = direct ? xs : xs.movedim(dim, -1).contiguous();
    out = direct ? result : empty_like(in);
    len = in.size(-1);
    rows = in.numel() / len;
  }

  template <typename Copy>
  void finish(const Tensor& result, const Copy& copy) const {
    if (!direct) copy(result, out.movedim(-1, dim).reshape(result.sizes()));
  }
};

// The gradient rows (SoftmaxBackward / LogSoftmaxBackward): the incoming gradient as `in`,
// the saved output `y` in the same row layout, the result as `out`.
struct SoftmaxGradRows : SoftmaxRows {
  Tensor y;
  SoftmaxGradRows(const Tensor& g, const Tensor& saved, const Tensor& result, int64_t softmax_dim, const char* name)
      : SoftmaxRows(g, result, softmax_dim, name),
        y(dim == saved.dim() - 1 && saved.is_contiguous() ? saved : saved.movedim(dim, -1).contiguous()) {}
};

}  // namespace anvil::shape_rows
