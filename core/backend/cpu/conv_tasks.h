// How the CPU convolution kernels split their work over the pool: tasks over the batch, each
// with its own scratch, and, inside one image, columns of the per-image GEMM when the batch is
// smaller than the pool (serving one image); and an image's columns. Shared by the float
// (conv.cc) and bfloat16 (conv_bf16.cc) kernels so both work the same way.
#pragma once

#include <algorithm>
#include <cstdint>

#include "core/backend/common/window_geom.h"
#include "core/backend/cpu/window.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {

// Tasks over the batch: task t covers images [t * step, min(N, (t + 1) * step)).
struct BatchSplit {
  int64_t tasks, step;
};
inline BatchSplit SplitBatch(int64_t N) {
  const int64_t want = std::min<int64_t>(std::max(get_num_threads(), 1), std::max<int64_t>(N, 1));
  const int64_t step = (N + want - 1) / want;
  return {(N + step - 1) / step, step};
}

// f(task, image) for every image of every task of `split` (a batch of N): the tasks spread over
// the pool, each task's images in order on one thread, so per-task scratch and partial sums
// are touched by one thread at a time.
template <typename F>
void ForEachTaskImage(const BatchSplit& split, int64_t N, const F& f) {
  parallel_for(0, split.tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t n = t * split.step; n < std::min(N, (t + 1) * split.step); ++n) f(t, n);
    }
  });
}

// Columns [0, n) of a per-image GEMM over the pool when called outside a parallel region, else
// inline; `work_per_column` (multiply-adds) sizes the grain.
template <typename F>
void SplitColumns(int64_t n, int64_t work_per_column, const F& f) {
  const int64_t grain = std::max<int64_t>(64, (int64_t{1} << 20) / std::max<int64_t>(work_per_column, 1));
  parallel_for(0, n, grain, f);
}

// The columns of image `image` [C, H, W]: built into `scratch` (C*KH*KW x OH*OW), or the image
// itself for a 1x1 convolution with stride 1 and no padding.
template <typename T>
const T* Columns(const T* image, T* scratch, const backend::ConvShape& s) {
  if (s.direct) return image;
  const int64_t plane = s.g.H * s.g.W, rows = s.g.KH * s.g.KW * s.L;
  for (int64_t c = 0; c < s.g.C; ++c) Im2ColPlane(image + c * plane, scratch + c * rows, s.g);
  return scratch;
}

}  // namespace anvil::cpu
