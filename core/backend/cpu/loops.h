// Element-wise iteration for CPU kernels: walks an output and its broadcast inputs in
// lock-step over any strides, coalescing dimensions so contiguous operands become one flat
// loop the compiler vectorises, and splits the work over the thread pool.
#pragma once

#include <array>
#include <cstdint>

#include "core/tensor/tensor.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {

constexpr int kMaxDims = 16;

// A raw window onto t's storage: no autograd, no checks, no view tracking. For kernels only
// (it is safe on pool threads, where recording ops would race).
inline Tensor RawWindow(const Tensor& t, IntArray sizes, IntArray strides, int64_t offset) {
  return Tensor(std::make_shared<TensorImpl>(t.storage(), std::move(sizes), std::move(strides),
                                             offset, t.dtype()));
}
// Elements below which a loop stays on one thread. A region costs ~1 µs while the pool's
// workers spin between kernels, but the spinning takes a core from the DataLoader's threads:
// at 8192 the [128, 128] weight-sized ops of a small MLP woke the pool every step and the
// digits MLP preset trained 35 % slower. From 16384 up the split pays, and it also keeps
// each half of [256, 128] activations on the core whose GEMM rows wrote it (the caller runs
// chunk 0): read whole by one core, the other half crossed between the cores' caches, which
// made a relu after a split GEMM 3x slower (measured, bench/RESULTS.md).
constexpr int64_t kGrain = 16384;

// N operands (operand 0 is the output) laid over the output's shape.
template <int N>
struct StridedLoop {
  int ndim = 0;
  int64_t sizes[kMaxDims];                 // innermost first after Build
  int64_t strides[N][kMaxDims];            // bytes
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

  template <typename Inner>
  void ParallelRun(const Inner& inner, int64_t grain = kGrain) const {
    parallel_for(0, numel(), grain, [&](int64_t b, int64_t e) { Run(b, e, inner); });
  }
};

// out[i] = f(in0[i], ..., in{N-2}[i]) with all operands of type T (output of type Out).
template <typename Out, typename In, int NIn, typename F>
void ElementwiseKernel(const Tensor& out, const std::array<const Tensor*, NIn>& inputs, const F& f) {
  std::array<const Tensor*, NIn + 1> ops;
  ops[0] = &out;
  for (int i = 0; i < NIn; ++i) ops[i + 1] = inputs[i];
  StridedLoop<NIn + 1> loop;
  loop.Build(ops);
  loop.ParallelRun([&](char** p, const int64_t* st, int64_t n) {
    // A local copy: stores through `o` cannot alias its parameters, so loop-invariant
    // branches inside it are hoisted and the loop vectorises.
    const F fl = f;
    Out* o = reinterpret_cast<Out*>(p[0]);
    bool contiguous = st[0] == sizeof(Out);
    for (int i = 1; i <= NIn; ++i) contiguous &= st[i] == sizeof(In);
    if constexpr (NIn == 1) {
      const In* a = reinterpret_cast<const In*>(p[1]);
      if (contiguous) {
        for (int64_t j = 0; j < n; ++j) o[j] = fl(a[j]);
      } else if (st[0] == sizeof(Out) && st[1] == 0) {
        const Out v = fl(*a);
        for (int64_t j = 0; j < n; ++j) o[j] = v;
      } else {
        for (int64_t j = 0; j < n; ++j) {
          *reinterpret_cast<Out*>(p[0] + j * st[0]) =
              fl(*reinterpret_cast<const In*>(p[1] + j * st[1]));
        }
      }
    } else if constexpr (NIn == 2) {
      const In* a = reinterpret_cast<const In*>(p[1]);
      const In* b = reinterpret_cast<const In*>(p[2]);
      if (contiguous) {
        for (int64_t j = 0; j < n; ++j) o[j] = fl(a[j], b[j]);
      } else if (st[0] == sizeof(Out) && st[1] == sizeof(In) && st[2] == 0) {
        const In bv = *b;
        for (int64_t j = 0; j < n; ++j) o[j] = fl(a[j], bv);
      } else if (st[0] == sizeof(Out) && st[1] == 0 && st[2] == sizeof(In)) {
        const In av = *a;
        for (int64_t j = 0; j < n; ++j) o[j] = fl(av, b[j]);
      } else {
        for (int64_t j = 0; j < n; ++j) {
          *reinterpret_cast<Out*>(p[0] + j * st[0]) =
              fl(*reinterpret_cast<const In*>(p[1] + j * st[1]),
                *reinterpret_cast<const In*>(p[2] + j * st[2]));
        }
      }
    } else {
      for (int64_t j = 0; j < n; ++j) {
        In args[NIn];
        for (int i = 0; i < NIn; ++i) args[i] = *reinterpret_cast<const In*>(p[i + 1] + j * st[i + 1]);
        *reinterpret_cast<Out*>(p[0] + j * st[0]) = std::apply(fl, std::to_array(args));
      }
    }
  });
}

}  // namespace anvil::cpu
