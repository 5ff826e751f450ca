// The strided walk shared by the CPU's element-wise loops and the CUDA backend's host-side
// setup: an output and its broadcast inputs laid out in lock-step over any strides, with
// dimensions coalesced so contiguous operands become one flat run. Backend-neutral (no
// threads, no device code): cpu/loops.h adds the thread pool, cuda/loops.cuh the device view.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/tensor/tensor.h"

namespace anvil::backend {

constexpr int kMaxDims = 16;

// A raw window onto t's storage: no autograd, no checks, no view tracking. For kernels only
// (it is safe on pool threads, where recording ops would race).
inline Tensor RawWindow(const Tensor& t, IntArray sizes, IntArray strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), std::move(sizes), std::move(strides), offset, t.dtype()));
}
// N operands (operand 0 is the output) laid over the output's shape.
template <int N>
struct StridedLoop {
  int ndim = 0;
  int64_t sizes[kMaxDims];       // innermost first after Build
  int64_t strides[N][kMaxDims];  // bytes
  char* base[N];

  // Inputs are broadcast to out's shape (stride 0 on broadcast dims).
  void Build(const std::array<const Tensor*, N>& ops) {
    const Tensor& out = *ops[0];
    const int64_t nd = out.dim();
    ANVIL_INTERNAL_ASSERT(nd <= kMaxDims, "too many dims: ", nd);
    // Innermost-first order.
    ndim = static_cast<int>(nd);
    for (int64_t i = 0; i < nd; ++i) sizes[i] = out.size(nd - 1 - i);
    for (int k = 0; k < N; ++k) {
      const Tensor& t = *ops[k];
      base[k] = static_cast<char*>(t.data_ptr());
      const int64_t es = t.element_size();
      const int64_t lead = nd - t.dim();
      for (int64_t i = 0; i < nd; ++i) {
        const int64_t d = nd - 1 - i;  // dim in out
        const int64_t td = d - lead;   // dim in t
        strides[k][i] = (td < 0 || t.size(td) == 1) ? 0 : t.stride(td) * es;
      }
    }
    Coalesce();
  }

  // Merges dim i+1 into dim i when every operand steps through both as one.
  void Coalesce() {
    if (ndim <= 1) return;
    int cur = 0;
    for (int i = 1; i < ndim; ++i) {
      bool can = true;
      for (int k = 0; k < N && can; ++k) {
        can = strides[k][i] == strides[k][cur] * sizes[cur];
      }
      if (sizes[i] == 1) continue;
      if (sizes[cur] == 1) {
        sizes[cur] = sizes[i];
        for (int k = 0; k < N; ++k) strides[k][cur] = strides[k][i];
        continue;
      }
      if (can) {
        sizes[cur] *= sizes[i];
      } else {
        ++cur;
        sizes[cur] = sizes[i];
        for (int k = 0; k < N; ++k) strides[k][cur] = strides[k][i];
      }
    }
    ndim = cur + 1;
  }

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= sizes[i];
    return n;
  }

  // Calls inner(ptrs, inner_strides, n) for runs along the innermost dim, covering
  // elements [begin, end) in row-major order.
  template <typename Inner>
  void Run(int64_t begin, int64_t end, const Inner& inner) const {
    if (ndim == 0) {
      char* p[N];
      for (int k = 0; k < N; ++k) p[k] = base[k];
      int64_t st[N] = {};
      inner(p, st, int64_t{1});
      return;
    }
    int64_t idx[kMaxDims];
    int64_t rem = begin;
    for (int i = 0; i < ndim; ++i) {
      idx[i] = rem % sizes[i];
      rem /= sizes[i];
    }
    int64_t inner_st[N];
    for (int k = 0; k < N; ++k) inner_st[k] = strides[k][0];
    int64_t pos = begin;
    while (pos < end) {
      char* p[N];
      for (int k = 0; k < N; ++k) {
        p[k] = base[k];
        for (int i = 0; i < ndim; ++i) p[k] += idx[i] * strides[k][i];
      }
      const int64_t n = std::min(sizes[0] - idx[0], end - pos);
      inner(p, inner_st, n);
      pos += n;
      idx[0] += n;
      for (int i = 0; i < ndim - 1 && idx[i] >= sizes[i]; ++i) {
        idx[i] = 0;
        ++idx[i + 1];
      }
    }
  }
};

}  // namespace anvil::backend
