// How a reduction sees its input: contiguous, as [outer, red, inner], with the reduced dims
// as `red`. Both backends plan it here; they differ only in when the no-copy form (reduced
// dims one contiguous block of a contiguous input, inner > 1) beats a transposing copy.
#pragma once

#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::backend {

struct ReduceLayout {
  Tensor x;  // contiguous, viewed as [outer, red, inner]
  int64_t outer = 1, red = 1, inner = 1;
};

// `keep_in_place(outer, red, inner)` says whether the no-copy form is taken when the input
// allows it; otherwise the kept dims are permuted to the front and copied (inner = 1).
template <typename KeepInPlace>
ReduceLayout MakeReduceLayout(const Tensor& in, const IntArray& dims, KeepInPlace keep_in_place) {
  const int64_t nd = in.dim();
  ReduceLayout l;
  if (nd == 0) {
    l.x = in.contiguous();
    return l;
  }
  std::vector<bool> reduce(nd, dims.empty());
  for (int64_t d : dims) reduce[wrap_dim(d, nd, "reduce")] = true;
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduce[d]) {
      if (first < 0) first = d;
      last = d;
    }
  }
  bool block = first >= 0;
  for (int64_t d = first; block && d <= last; ++d) block = reduce[d];
  if (block && in.is_contiguous()) {
    int64_t outer = 1, red = 1, inner = 1;
    for (int64_t d = 0; d < first; ++d) outer *= in.size(d);
    for (int64_t d = first; d <= last; ++d) red *= in.size(d);
    for (int64_t d = last + 1; d < nd; ++d) inner *= in.size(d);
    if (keep_in_place(outer, red, inner)) {
      l.x = in;
      l.outer = outer, l.red = red, l.inner = inner;
      return l;
    }
  }
  IntArray perm;
  for (int64_t d = 0; d < nd; ++d) {
    if (!reduce[d]) {
      perm.push_back(d);
      l.outer *= in.size(d);
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (reduce[d]) {
      perm.push_back(d);
      l.red *= in.size(d);
    }
  }
  l.x = in.permute(perm).contiguous();
  return l;
}

}  // namespace anvil::backend
