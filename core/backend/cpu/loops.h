// Element-wise iteration for CPU kernels: walks an output and its broadcast inputs in
// lock-step over any strides, coalescing dimensions so contiguous operands become one flat
// loop the compiler vectorises, and splits the work over the thread pool.
#pragma once

#include <array>
#include <cstdint>

#include "core/backend/common/strided_loop.h"
#include "core/tensor/tensor.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {

using backend::kMaxDims;
using backend::RawWindow;

// Elements below which a loop stays on one thread. A region costs ~1 µs while the pool's
// workers spin between kernels, but the spinning takes a core from the DataLoader's threads:
// at 8192 the [128, 128] weight-sized ops of a small MLP woke the pool every step and the
// digits MLP preset trained 35 % slower. From 16384 up the split pays, and it also keeps
// each half of [256, 128] activations on the core whose GEMM rows wrote it (the caller runs
// chunk 0): read whole by one core, the other half crossed between the cores' caches, which
// made a relu after a split GEMM 3x slower (measured, bench/RESULTS.md).
constexpr int64_t kGrain = 16384;

// backend::StridedLoop with the work split over the thread pool.
template <int N>
struct StridedLoop : backend::StridedLoop<N> {
  template <typename Inner>
  void ParallelRun(const Inner& inner, int64_t grain = kGrain) const {
    parallel_for(0, this->numel(), grain, [&](int64_t b, int64_t e) { this->Run(b, e, inner); });
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
          *reinterpret_cast<Out*>(p[0] + j * st[0]) = fl(*reinterpret_cast<const In*>(p[1] + j * st[1]));
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
              fl(*reinterpret_cast<const In*>(p[1] + j * st[1]), *reinterpret_cast<const In*>(p[2] + j * st[2]));
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
