// The geometry of advanced indexing (x[idx0, :, idx2] and its put form), shared by the CPU
// and CUDA kernels: the result seen as [B..., rest...] (B = the broadcast index shape), with
// self and every index tensor re-windowed onto that shape, so one strided walk over the
// result visits each (index tuple, remaining position) once. Host code only.
#pragma once

#include <algorithm>
#include <vector>

#include "core/backend/common/strided_loop.h"

namespace anvil {

struct AdvancedIndexPlan {
  Tensor result_view;       // the result (or values) permuted to [B..., rest...]
  Tensor self_window;       // self re-windowed to [B..., rest...], stride 0 on B dims
  std::vector<Tensor> idx;  // each index re-windowed to [B..., rest...]
  IntArray self_strides;    // bytes per index step, per indexed dim
  IntArray self_sizes;      // size of each indexed dim
};

// `indices` are broadcast to one shape already; `idims` are the dims of self they address.
// PyTorch's placement: adjacent indexed dims keep their position in the result, otherwise
// the B dims go first.
inline AdvancedIndexPlan PlanAdvancedIndex(const Tensor& self, const std::vector<Tensor>& indices,
                                           const IntArray& idims, const Tensor& result) {
  const int64_t nb = indices[0].dim();
  IntArray rest;
  for (int64_t k = 0; k < self.dim(); ++k) {
    if (std::find(idims.begin(), idims.end(), k) == idims.end()) rest.push_back(k);
  }
  bool adjacent = true;
  for (size_t k = 1; k < idims.size(); ++k) adjacent &= idims[k] == idims[k - 1] + 1;
  IntArray perm;  // of the result, putting the B dims first
  const int64_t pre = adjacent ? idims[0] : 0;
  for (int64_t k = 0; k < nb; ++k) perm.push_back(pre + k);
  for (int64_t k = 0; k < pre; ++k) perm.push_back(k);
  for (int64_t k = pre + nb; k < result.dim(); ++k) perm.push_back(k);
  AdvancedIndexPlan plan;
  IntArray rs, rst;
  for (int64_t p : perm) {
    rs.push_back(result.size(p));
    rst.push_back(result.stride(p));
  }
  plan.result_view = backend::RawWindow(result, rs, rst, result.storage_offset());
  IntArray sst(nb, 0);
  for (int64_t k : rest) sst.push_back(self.stride(k));
  plan.self_window = backend::RawWindow(self, rs, sst, self.storage_offset());
  for (size_t k = 0; k < indices.size(); ++k) {
    const Tensor& ix = indices[k];
    IntArray ist(ix.strides());
    ist.resize(rs.size(), 0);
    plan.idx.push_back(backend::RawWindow(ix, rs, ist, ix.storage_offset()));
    plan.self_strides.push_back(self.stride(idims[k]) * self.element_size());
    plan.self_sizes.push_back(self.size(idims[k]));
  }
  return plan;
}

}  // namespace anvil
