// The windows gather, scatter, scatter_add and scatter_reduce read or write through, planned
// alike by both backends. The backends differ in how they walk them (a strided loop on the
// CPU, a kernel on CUDA) and how they check the indices.
#pragma once

#include <algorithm>
#include <optional>

#include "core/backend/common/strided_loop.h"
#include "core/backend/registry.h"

namespace anvil::backend {

inline Tensor AsInt64(const Tensor& idx) { return idx.dtype() == kInt64 ? idx : idx.to(kInt64); }

// `t` seen at the positions of `index` with the indexed dim's stride 0: element j of the
// window plus index[j] * step bytes is t's element that index[j] addresses. Gather reads x
// through it; the scatters write their output through it.
struct DimWindow {
  Tensor index;      // int64
  int64_t dim = 0;   // the indexed dim of t, wrapped
  int64_t size = 1;  // its size (1 for a 0-dim t): indices must lie in [0, size)
  Tensor window;     // t, sized like index, the indexed dim's stride 0
  int64_t step = 0;  // bytes between consecutive positions of the indexed dim in t
};

inline DimWindow MakeDimWindow(const Tensor& t, const Tensor& index, int64_t dim, const char* name) {
  DimWindow w;
  w.index = AsInt64(index);
  w.dim = wrap_dim(dim, std::max<int64_t>(t.dim(), 1), name);
  w.size = t.dim() == 0 ? 1 : t.size(w.dim);
  IntArray st = t.strides();
  if (!st.empty()) st[w.dim] = 0;
  w.window = RawWindow(t, w.index.sizes(), st, t.storage_offset());
  w.step = (t.dim() == 0 ? 0 : t.stride(w.dim)) * t.element_size();
  return w;
}

// A Scatter-family call whose output already holds self: the output's window and the
// source's, both sized like the index. nullopt when the index is empty (nothing to write).
struct ScatterPlan {
  DimWindow out;
  Tensor src_window;
};
inline std::optional<ScatterPlan> PlanScatter(const KernelCall& c, const char* name) {
  if (c.inputs[1].numel() == 0) return std::nullopt;
  ScatterPlan p;
  p.out = MakeDimWindow(c.outputs[0], c.inputs[1], c.attrs.get<ScatterArgs>().dim, name);
  const Tensor& src = c.inputs[2];
  p.src_window = RawWindow(src, p.out.index.sizes(), src.strides(), src.storage_offset());
  return p;
}

// index_add over an output that already holds self: out[..idx[j]..] += alpha * src[..j..].
// The output's window is sized like src with dim's stride 0, the index seen along dim of it
// (stride 1 there, 0 elsewhere); element j of the output's window plus idx[j] * step bytes is
// the element written. 0-dim out and src are seen as 1-d. nullopt when src is empty.
struct IndexAddPlan {
  Tensor idx;         // int64, flat
  Tensor src;         // at least 1-d
  Tensor out_window;  // sized like src
  Tensor idx_window;  // sized like src
  int64_t dim = 0;    // wrapped
  int64_t size = 1;   // out's size along dim: indices must lie in [0, size)
  int64_t step = 0;   // bytes between consecutive positions of dim in out
};
inline std::optional<IndexAddPlan> PlanIndexAdd(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  if (c.inputs[2].numel() == 0) return std::nullopt;
  IndexAddPlan p;
  p.idx = AsInt64(c.inputs[1]).reshape({-1}).contiguous();
  const Tensor o = out.dim() == 0 ? RawWindow(out, {1}, {1}, out.storage_offset()) : out;
  p.src = c.inputs[2].dim() == 0 ? c.inputs[2].reshape({1}) : c.inputs[2];
  p.dim = wrap_dim(c.attrs.get<IndexArgs>().dim, o.dim(), "index_add");
  p.size = o.size(p.dim);
  IntArray st = o.strides();
  st[p.dim] = 0;
  p.out_window = RawWindow(o, p.src.sizes(), st, o.storage_offset());
  IntArray ist(p.src.dim(), 0);
  ist[p.dim] = 1;
  p.idx_window = RawWindow(p.idx, p.src.sizes(), ist, p.idx.storage_offset());
  p.step = o.stride(p.dim) * o.element_size();
  return p;
}

}  // namespace anvil::backend
