// CUDA softmax and log_softmax over one dim, with the semantics of the CPU kernel
// (core/backend/cpu/shape.cc): computed in opmath_t (float for the 16-bit floats) with the
// same exp, and a row holding a NaN or +inf, or only -inf, comes out all NaN.
//
// A group of threads per row (a warp for rows up to 1024, else the whole block) reads the
// row once keeping an online (running max, sum of exp(x - max)) pair, rescaling the sum
// when the max grows; the pairs are merged with shuffles in a fixed order, and a second
// read writes the outputs.
#include <cmath>
#include <cstring>
#include <limits>

#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/backend/shape_rows.h"
#include "core/ops/functions.h"
#include "core/ops/functors.h"

namespace anvil::cuda {
namespace {

constexpr int kWarps = kBlock / 32;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename M>
struct RowState {
  M m;       // max over the finite and -inf elements
  M s;       // sum of exp(x - m) over them
  bool bad;  // a NaN or +inf seen: the whole row is NaN
};

template <typename M>
__device__ __forceinline__ M Scale(M from, M to) {
  return from == -std::numeric_limits<M>::infinity() ? M(0) : fn::Exp(from - to);
}

template <typename M>
__device__ __forceinline__ RowState<M> Merge(const RowState<M>& a, const RowState<M>& b) {
  const M m = a.m < b.m ? b.m : a.m;
  return {m, a.s * Scale(a.m, m) + b.s * Scale(b.m, m), a.bad || b.bad};
}

template <typename M>
__device__ __forceinline__ void Accumulate(RowState<M>& st, M v) {
  if (v != v || v == std::numeric_limits<M>::infinity()) {
    st.bad = true;
  } else if (v != -std::numeric_limits<M>::infinity()) {
    if (v > st.m) {
      st.s = st.s * Scale(st.m, v) + M(1);
      st.m = v;
    } else {
      st.s += fn::Exp(v - st.m);
    }
  }
}

template <typename S>
__device__ __forceinline__ S ShflDown(const S& s, int delta) {
  constexpr int kWords = (sizeof(S) + 3) / 4;
  unsigned w[kWords] = {};
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_down_sync(kFullMask, w[k], delta);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

template <typename S>
__device__ __forceinline__ S ShflFirst(const S& s) {
  constexpr int kWords = (sizeof(S) + 3) / 4;
  unsigned w[kWords] = {};
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int k = 0; k < kWords; ++k) w[k] = __shfl_sync(kFullMask, w[k], 0);
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// A row sum (the backward kernels' reduction).
template <typename M>
struct RowSum {
  M s;
};
template <typename M>
__device__ __forceinline__ RowSum<M> Merge(const RowSum<M>& a, const RowSum<M>& b) {
  return {a.s + b.s};
}

// The group's merged state, in every thread of the group (G = 32: a warp; G = kBlock: the
// block). Every thread of the block must call it; smem holds kWarps states.
template <int G, typename S>
__device__ __forceinline__ S GroupAllReduce(S st, S* smem) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const S o = ShflDown(st, off);
    if (lane + off < 32) st = Merge(st, o);
  }
  if constexpr (G == 32) {
    return ShflFirst(st);
  } else {
    if (lane == 0) smem[threadIdx.x / 32] = st;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) st = Merge(st, smem[w]);
      smem[0] = st;
    }
    __syncthreads();
    st = smem[0];
    __syncthreads();  // smem is rewritten for the next row
    return st;
  }
}

// The row loop both directions share: rows taken kBlock / G to a block, grid-strided; per row
// its group of G threads folds `accumulate(state, row)` from `init` over its share of the row,
// the group's states are merged (GroupAllReduce, which every thread of the block reaches), and
// `write(merged, row)` makes the second pass. Threads past the last row only help merge.
template <int G, typename S, typename Accumulate, typename Write>
__device__ __forceinline__ void ForEachRow(int64_t rows, const S& init, const Accumulate& accumulate,
                                           const Write& write) {
  __shared__ alignas(16) unsigned char smem_raw[kWarps * sizeof(S)];
  S* smem = reinterpret_cast<S*>(smem_raw);
  constexpr int kGroups = kBlock / G;
  for (int64_t first = int64_t(blockIdx.x) * kGroups; first < rows; first += int64_t(gridDim.x) * kGroups) {
    const int64_t row = first + threadIdx.x / G;
    const bool valid = row < rows;
    S st = init;
    if (valid) accumulate(st, row);
    st = GroupAllReduce<G>(st, smem);
    if (valid) write(st, row);
  }
}

// x and y are [rows, len], contiguous.
template <typename T, int G, bool kLog>
__global__ void SoftmaxRowsKernel(const T* x, T* y, int64_t rows, int64_t len) {
  using M = opmath_t<T>;
  using S = RowState<M>;
  const int lane = threadIdx.x % G;
  ForEachRow<G>(
      rows, S{-std::numeric_limits<M>::infinity(), M(0), false},
      [&](S& st, int64_t row) {
        const T* xr = x + row * len;
        for (int64_t i = lane; i < len; i += G) Accumulate(st, M(xr[i]));
      },
      [&](const S& st, int64_t row) {
        const T* xr = x + row * len;
        T* yr = y + row * len;
        if (st.bad || st.m == -std::numeric_limits<M>::infinity()) {
          for (int64_t i = lane; i < len; i += G) yr[i] = T(std::numeric_limits<M>::quiet_NaN());
        } else if constexpr (kLog) {
          const M lse = st.m + std::log(st.s);
          for (int64_t i = lane; i < len; i += G) yr[i] = T(M(xr[i]) - lse);
        } else {
          const M inv = M(1) / st.s;
          for (int64_t i = lane; i < len; i += G) yr[i] = T(fn::Exp(M(xr[i]) - st.m) * inv);
        }
      });
}

inline unsigned BlocksFor(int64_t tasks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tasks, 65535 * 8)));
}

template <bool kLog>
void SoftmaxKernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  if (x.numel() == 0) return;
  const shape_rows::SoftmaxRows layout(x, out, c.attrs.get<DimArgs>().dim, kLog ? "log_softmax" : "softmax");
  const Tensor& xm = layout.in;
  const Tensor& om = layout.out;
  const int64_t len = layout.len, rows = layout.rows;
  const int device = out.device().index;
  {
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    ANVIL_DISPATCH_FLOATING(x.dtype(), "softmax", [&] {
      using T = scalar_t;
      const T* in = xm.data_ptr<T>();
      T* o = om.data_ptr<T>();
      if (len <= 1024) {
        SoftmaxRowsKernel<T, 32, kLog>
            <<<BlocksFor((rows + kWarps - 1) / kWarps), kBlock, 0, stream>>>(in, o, rows, len);
      } else {
        SoftmaxRowsKernel<T, kBlock, kLog><<<BlocksFor(rows), kBlock, 0, stream>>>(in, o, rows, len);
      }
      ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  layout.finish(out, CopyBits);
}

// The gradients (CPU: core/backend/cpu/shape.cc): per row of (g, y), the sum of g (log) or
// of g * y, merged across the group as in the forward, then one write pass.
template <typename T, int G, bool kLog>
__global__ void SoftmaxBackwardRowsKernel(const T* g, const T* y, T* out, int64_t rows, int64_t len) {
  using M = opmath_t<T>;
  using S = RowSum<M>;
  const int lane = threadIdx.x % G;
  ForEachRow<G>(
      rows, S{M(0)},
      [&](S& st, int64_t row) {
        const T* gr = g + row * len;
        const T* yr = y + row * len;
        for (int64_t i = lane; i < len; i += G) st.s += kLog ? M(gr[i]) : M(gr[i]) * M(yr[i]);
      },
      [&](const S& st, int64_t row) {
        const T* gr = g + row * len;
        const T* yr = y + row * len;
        T* orow = out + row * len;
        for (int64_t i = lane; i < len; i += G) {
          orow[i] = kLog ? T(M(gr[i]) - fn::Exp(M(yr[i])) * st.s) : T(M(yr[i]) * (M(gr[i]) - st.s));
        }
      });
}

template <bool kLog>
void SoftmaxBackwardKernel(const KernelCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& out = c.outputs[0];
  if (g.numel() == 0) return;
  const char* name = kLog ? "log_softmax_backward" : "softmax_backward";
  const shape_rows::SoftmaxGradRows layout(g, c.inputs[1], out, c.attrs.get<DimArgs>().dim, name);
  const int64_t len = layout.len, rows = layout.rows;
  const int device = out.device().index;
  {
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    ANVIL_DISPATCH_FLOATING(g.dtype(), name, [&] {
      using T = scalar_t;
      const T* pg = layout.in.data_ptr<T>();
      const T* py = layout.y.data_ptr<T>();
      T* po = layout.out.data_ptr<T>();
      if (len <= 1024) {
        SoftmaxBackwardRowsKernel<T, 32, kLog>
            <<<BlocksFor((rows + kWarps - 1) / kWarps), kBlock, 0, stream>>>(pg, py, po, rows, len);
      } else {
        SoftmaxBackwardRowsKernel<T, kBlock, kLog><<<BlocksFor(rows), kBlock, 0, stream>>>(pg, py, po, rows, len);
      }
      ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    });
  }
  layout.finish(out, CopyBits);
}

}  // namespace

ANVIL_KERNEL_SLOT(Softmax, SoftmaxKernel<false>)
ANVIL_KERNEL_SLOT(LogSoftmax, SoftmaxKernel<true>)
ANVIL_KERNEL_SLOT(SoftmaxBackward, SoftmaxBackwardKernel<false>)
ANVIL_KERNEL_SLOT(LogSoftmaxBackward, SoftmaxBackwardKernel<true>)

}  // namespace anvil::cuda
