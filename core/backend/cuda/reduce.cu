// CUDA reductions and cumsum, with the semantics of core/backend/cpu/reduce.cc (empty
// reductions, NaN propagation, first-index tie-breaking, output dtypes).
//
// Every reduction is one "op" (a state type with Identity/Load/Combine and a Store that
// writes the output) run by one of three launch shapes over the input laid out as
// [outer, red, inner]:
//  - inner > 1 with enough columns: a block per 32 adjacent columns, its 8 warps splitting
//    the reduced dim, reads coalesced along the columns; no copy;
//  - rows of at most 1024: a warp per row;
//  - longer rows: a block per row, or, when there are too few rows to fill the GPU, each
//    row split over several blocks that write partial states to a temporary, and a second
//    launch combining them.
// Every combine happens in a fixed order that depends on the shapes only (no atomics), so
// results are reproducible run to run.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "core/backend/common/reduce_layout.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/ops/functions.h"
#include "core/ops/functors.h"

namespace anvil::cuda {
namespace {

constexpr int kWarps = kBlock / 32;
constexpr unsigned kFullMask = 0xffffffffu;
template <typename T>
using Lim = std::numeric_limits<T>;

// ---- warp and block combining of arbitrary (trivially copyable) states ----

template <typename S, bool kUp>
__device__ __forceinline__ S Shfl(const S& s, int delta) {
  constexpr int kWords = (sizeof(S) + 3) / 4;
  unsigned w[kWords] = {};
  memcpy(w, &s, sizeof(S));
#pragma unroll
  for (int k = 0; k < kWords; ++k) {
    w[k] = kUp ? __shfl_up_sync(kFullMask, w[k], delta) : __shfl_down_sync(kFullMask, w[k], delta);
  }
  S r;
  memcpy(&r, w, sizeof(S));
  return r;
}

// The warp's combined state, valid in lane 0. Every lane must call it.
template <typename S, typename Op>
__device__ __forceinline__ S WarpReduce(S s, const Op& op) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const S o = Shfl<S, false>(s, off);
    if (lane + off < 32) s = op.Combine(s, o);
  }
  return s;
}

// The group's combined state (G = 32: one warp; G = kBlock: the block), valid in the
// group's first thread. Every thread of the block must call it; smem holds kWarps states.
template <int G, typename S, typename Op>
__device__ __forceinline__ S GroupReduce(S s, const Op& op, S* smem) {
  s = WarpReduce(s, op);
  if constexpr (G == kBlock) {
    if (threadIdx.x % 32 == 0) smem[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kWarps; ++w) s = op.Combine(s, smem[w]);
    }
    __syncthreads();  // smem is reused by the next row
  }
  return s;
}

template <typename T>
__device__ __forceinline__ bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return v != v;
  else
    return false;
}

// ---- the reductions ----
// Load(x, i) makes the state of element i of a reduced row; Combine(a, b) merges two
// states of disjoint (interleaved, not necessarily consecutive) sets of elements, so every
// order-sensitive rule (first index wins, a leading NaN) is carried in the state itself;
// Store(s, n, k) writes output k of a row of n elements.

// Floating sums accumulate in double (cheap next to the memory traffic, and the CPU
// combines its blocks in double too); integer sums wrap in their own type like the CPU's.
template <typename T>
using SumAcc = std::conditional_t<std::is_floating_point_v<opmath_t<T>>, double, opmath_t<T>>;

template <typename T, bool kMean>
struct SumOp {
  using In = T;
  using State = SumAcc<T>;
  T* out;
  __device__ State Identity() const { return State(0); }
  __device__ State Load(T x, int64_t) const { return State(opmath_t<T>(x)); }
  __device__ State Combine(State a, State b) const { return a + b; }
  __device__ void Store(State s, int64_t n, int64_t k) const {
    using M = opmath_t<T>;
    if constexpr (kMean)
      out[k] = T(M(n == 0 ? Lim<State>::quiet_NaN() : s / State(n)));
    else
      out[k] = T(M(s));
  }
};

template <typename T>
struct ProdOp {
  using In = T;
  using State = opmath_t<T>;
  T* out;
  __device__ State Identity() const { return State(1); }
  __device__ State Load(T x, int64_t) const { return State(x); }
  __device__ State Combine(State a, State b) const { return a * b; }
  __device__ void Store(State s, int64_t, int64_t k) const { out[k] = T(s); }
};

// amax/amin: a NaN anywhere is the result.
template <typename T, bool kMax>
struct MinMaxOp {
  using In = T;
  using State = opmath_t<T>;
  T* out;
  __device__ State Identity() const {
    using L = Lim<State>;
    if constexpr (std::is_floating_point_v<State>)
      return kMax ? -L::infinity() : L::infinity();
    else
      return kMax ? L::lowest() : L::max();
  }
  __device__ State Load(T x, int64_t) const { return State(x); }
  __device__ State Combine(State a, State b) const {
    if (IsNan(a)) return a;
    if (IsNan(b)) return b;
    return (kMax ? b > a : b < a) ? b : a;
  }
  __device__ void Store(State s, int64_t, int64_t k) const { out[k] = T(s); }
};

template <typename T, bool kAll>
struct AllAnyOp {
  using In = T;
  using State = bool;
  bool* out;
  __device__ State Identity() const { return kAll; }
  __device__ State Load(T x, int64_t) const { return static_cast<bool>(opmath_t<T>(x)); }
  __device__ State Combine(State a, State b) const { return kAll ? (a && b) : (a || b); }
  __device__ void Store(State s, int64_t, int64_t k) const { out[k] = s; }
};

// In double like the CPU. The inf-norm ignores NaN as the CPU's std::max does.
enum class NormMode { kInf, kOne, kTwo, kP };
template <typename T>
struct NormOp {
  using In = T;
  using State = double;
  T* out;
  NormMode mode;
  double p;
  __device__ State Identity() const { return 0.0; }
  __device__ State Load(T x, int64_t) const {
    const double v = std::fabs(static_cast<double>(opmath_t<T>(x)));
    switch (mode) {
      case NormMode::kInf:
        return v != v ? 0.0 : v;
      case NormMode::kOne:
        return v;
      case NormMode::kTwo:
        return v * v;
      default:
        return std::pow(v, p);
    }
  }
  __device__ State Combine(State a, State b) const {
    if (mode == NormMode::kInf) return a < b ? b : a;
    return a + b;
  }
  __device__ void Store(State s, int64_t, int64_t k) const {
    using M = opmath_t<T>;
    if (mode == NormMode::kTwo)
      s = std::sqrt(s);
    else if (mode == NormMode::kP)
      s = std::pow(s, 1.0 / p);
    out[k] = T(M(s));
  }
};

// Welford/Chan: (count, mean, sum of squared deviations), merged pairwise in double. An
// element's own m2 is (v - v)^2: 0, or NaN for an infinity, which makes any row holding an
// infinity NaN like the CPU's two-pass formula (inf - inf).
struct VarState {
  double n, mean, m2;
};
template <typename T>
struct VarOp {
  using In = T;
  using State = VarState;
  T* out;
  double correction;
  __device__ State Identity() const { return {0.0, 0.0, 0.0}; }
  __device__ State Load(T x, int64_t) const {
    const double v = static_cast<double>(opmath_t<T>(x));
    return {1.0, v, (v - v) * (v - v)};
  }
  __device__ State Combine(const State& a, const State& b) const {
    if (a.n == 0) return b;
    if (b.n == 0) return a;
    const double n = a.n + b.n, d = b.mean - a.mean, f = b.n / n;
    return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
  }
  __device__ void Store(const State& s, int64_t, int64_t k) const {
    using M = opmath_t<T>;
    const double denom = s.n - correction;
    const double v = (s.n == 0 || denom <= 0) ? Lim<double>::quiet_NaN() : s.m2 / denom;
    out[k] = T(M(v));
  }
};

// (max, sum of exp(x - max)) pairs, NaNs kept aside. The CPU's answer, reproduced: its max
// loop skips NaNs unless the row starts with one; an infinite max is the result; otherwise
// any NaN makes the result NaN.
template <typename M>
struct LseState {
  M m, s;
  bool nan, first_nan;
};
template <typename T>
struct LseOp {
  using In = T;
  using M = opmath_t<T>;
  using State = LseState<M>;
  T* out;
  __device__ static M Scale(M from, M to) { return from == -Lim<M>::infinity() ? M(0) : fn::Exp(from - to); }
  __device__ State Identity() const { return {-Lim<M>::infinity(), M(0), false, false}; }
  __device__ State Load(T x, int64_t i) const {
    const M v = M(x);
    if (v != v) return {-Lim<M>::infinity(), M(0), true, i == 0};
    return {v, v == -Lim<M>::infinity() ? M(0) : M(1), false, false};
  }
  __device__ State Combine(const State& a, const State& b) const {
    const M m = a.m < b.m ? b.m : a.m;
    return {m, a.s * Scale(a.m, m) + b.s * Scale(b.m, m), a.nan || b.nan, a.first_nan || b.first_nan};
  }
  __device__ void Store(const State& s, int64_t, int64_t k) const {
    M r;
    if (s.first_nan)
      r = Lim<M>::quiet_NaN();
    else if (s.m == Lim<M>::infinity() || s.m == -Lim<M>::infinity())
      r = s.m;
    else if (s.nan)
      r = Lim<M>::quiet_NaN();
    else
      r = M(static_cast<double>(s.m) + std::log(static_cast<double>(s.s)));
    out[k] = T(r);
  }
};

// argmax/argmin and max/min along a dim: the first extreme wins; a NaN is the extreme, and
// the first NaN wins. i < 0 marks the empty state.
template <typename M>
struct ArgState {
  M v;
  int64_t i;
};
template <typename T, bool kMax>
struct ArgOp {
  using In = T;
  using M = opmath_t<T>;
  using State = ArgState<M>;
  int64_t* indices;
  T* values;  // null for argmax/argmin
  __device__ State Identity() const { return {M(0), -1}; }
  __device__ State Load(T x, int64_t i) const { return {M(x), i}; }
  __device__ State Combine(const State& a, const State& b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool an = IsNan(a.v), bn = IsNan(b.v);
    if (an || bn) return (an && bn) ? (a.i < b.i ? a : b) : (an ? a : b);
    if (kMax ? b.v > a.v : b.v < a.v) return b;
    if (b.v == a.v && b.i < a.i) return b;
    return a;
  }
  __device__ void Store(const State& s, int64_t, int64_t k) const {
    indices[k] = s.i;
    if (values != nullptr) values[k] = T(s.v);
  }
};

// ---- kernels ----

// Tasks are (row, split) pairs of a [rows, red] input (row stride red), G threads each.
// A split covers [split * chunk, min(red, (split + 1) * chunk)). With partial_out the
// task's state is written there; otherwise Store(state, n, row) (then splits == 1).
// kStatesIn: the input is a [rows, red] array of states from a first pass.
template <typename Op, int G, bool kStatesIn>
__global__ void ReduceRowsKernel(Op op, const void* src, int64_t rows, int64_t red, int64_t splits, int64_t chunk,
                                 int64_t n, typename Op::State* partial_out) {
  using S = typename Op::State;
  __shared__ alignas(16) unsigned char smem_raw[kWarps * sizeof(S)];
  S* smem = reinterpret_cast<S*>(smem_raw);
  constexpr int kGroups = kBlock / G;
  const int lane = threadIdx.x % G;
  const int64_t tasks = rows * splits;
  for (int64_t first = int64_t(blockIdx.x) * kGroups; first < tasks; first += int64_t(gridDim.x) * kGroups) {
    const int64_t task = first + threadIdx.x / G;
    S s = op.Identity();
    if (task < tasks) {
      const int64_t row = task / splits, begin = (task % splits) * chunk;
      const int64_t end = red < begin + chunk ? red : begin + chunk;
      for (int64_t i = begin + lane; i < end; i += G) {
        if constexpr (kStatesIn)
          s = op.Combine(s, static_cast<const S*>(src)[row * red + i]);
        else
          s = op.Combine(s, op.Load(static_cast<const typename Op::In*>(src)[row * red + i], i));
      }
    }
    s = GroupReduce<G>(s, op, smem);
    if (task < tasks && lane == 0) {
      if (partial_out != nullptr)
        partial_out[task] = s;
      else
        op.Store(s, n, task);
    }
  }
}

// [outer, red, inner] with inner > 1: a block per (outer index, 32 adjacent columns); warp
// w takes rows w, w + 8, ... and the 8 partial states are combined in warp order.
template <typename Op>
__global__ void ReduceColumnsKernel(Op op, const typename Op::In* x, int64_t outer, int64_t red, int64_t inner) {
  using S = typename Op::State;
  __shared__ alignas(16) unsigned char smem_raw[kBlock * sizeof(S)];
  S* smem = reinterpret_cast<S*>(smem_raw);
  const int64_t col_blocks = (inner + 31) / 32, tasks = outer * col_blocks;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int64_t b = blockIdx.x; b < tasks; b += gridDim.x) {
    const int64_t o = b / col_blocks, j = (b % col_blocks) * 32 + tx;
    S s = op.Identity();
    if (j < inner) {
      const typename Op::In* base = x + o * red * inner + j;
      for (int64_t r = ty; r < red; r += kWarps) s = op.Combine(s, op.Load(base[r * inner], r));
    }
    smem[threadIdx.x] = s;
    __syncthreads();
    if (ty == 0 && j < inner) {
      for (int w = 1; w < kWarps; ++w) s = op.Combine(s, smem[w * 32 + tx]);
      op.Store(s, red, o * inner + j);
    }
    __syncthreads();
  }
}

inline unsigned BlocksFor(int64_t tasks) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tasks, 65535 * 8)));
}

// ---- host side ----

using Layout = backend::ReduceLayout;

// The no-copy [outer, red, inner] form with inner > 1 is kept only when it gives the column
// kernel enough columns or short rows to walk; a few long columns are transposed into rows
// that can be split over blocks instead.
Layout MakeLayout(const Tensor& in, const IntArray& dims) {
  return backend::MakeReduceLayout(in, dims, [](int64_t outer, int64_t red, int64_t inner) {
    return inner == 1 || outer * inner >= 4096 || red <= 4096;
  });
}

template <typename Op>
void RunReduce(const Op& op, const Layout& l) {
  using S = typename Op::State;
  using In = typename Op::In;
  const int device = l.x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  const In* x = l.x.data_ptr<In>();
  const int64_t outer = l.outer, red = l.red;
  if (l.inner > 1) {
    const unsigned blocks = BlocksFor(outer * ((l.inner + 31) / 32));
    ReduceColumnsKernel<Op><<<blocks, kBlock, 0, stream>>>(op, x, outer, red, l.inner);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  if (red <= 1024) {
    const unsigned blocks = BlocksFor((outer + kWarps - 1) / kWarps);
    ReduceRowsKernel<Op, 32, false><<<blocks, kBlock, 0, stream>>>(op, x, outer, red, 1, red, red, nullptr);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  // Enough blocks to fill the GPU, each with at least kMinChunk elements.
  constexpr int64_t kTargetBlocks = 1024, kMinChunk = 4096;
  int64_t splits = 1;
  if (outer < kTargetBlocks) {
    splits = std::min((red + kMinChunk - 1) / kMinChunk, (kTargetBlocks + outer - 1) / outer);
    splits = std::max<int64_t>(1, splits);
  }
  const int64_t chunk = (red + splits - 1) / splits;
  splits = (red + chunk - 1) / chunk;
  if (splits == 1) {
    ReduceRowsKernel<Op, kBlock, false>
        <<<BlocksFor(outer), kBlock, 0, stream>>>(op, x, outer, red, 1, red, red, nullptr);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    return;
  }
  Tensor partial =
      empty({outer * splits * static_cast<int64_t>(sizeof(S))}, TensorOptions(kUInt8).with_device(l.x.device()));
  S* p = reinterpret_cast<S*>(partial.data_ptr());
  ReduceRowsKernel<Op, kBlock, false>
      <<<BlocksFor(outer * splits), kBlock, 0, stream>>>(op, x, outer, red, splits, chunk, red, p);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  ReduceRowsKernel<Op, kBlock, true>
      <<<BlocksFor(outer), kBlock, 0, stream>>>(op, p, outer, splits, 1, splits, red, nullptr);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  // `partial` is released to the stream-ordered cache: later work on this stream only.
}

enum class Kind { Sum, Mean, Prod, Amax, Amin, All, Any, Norm, Var, LogSumExp };

template <Kind K>
void ReduceKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const Layout l = MakeLayout(c.inputs[0], c.attrs.get<ReduceArgs>().dims);
  if constexpr (K == Kind::All || K == Kind::Any) {
    ANVIL_DISPATCH_ALL(l.x.dtype(), "all/any",
                       [&] { RunReduce(AllAnyOp<scalar_t, K == Kind::All>{out.data_ptr<bool>()}, l); });
  } else if constexpr (K == Kind::Amax || K == Kind::Amin) {
    ANVIL_DISPATCH_ALL(l.x.dtype(), "amax/amin",
                       [&] { RunReduce(MinMaxOp<scalar_t, K == Kind::Amax>{out.data_ptr<scalar_t>()}, l); });
  } else if constexpr (K == Kind::Sum || K == Kind::Prod) {
    ANVIL_DISPATCH_NUMERIC(l.x.dtype(), "reduce", [&] {
      if constexpr (K == Kind::Sum)
        RunReduce(SumOp<scalar_t, false>{out.data_ptr<scalar_t>()}, l);
      else
        RunReduce(ProdOp<scalar_t>{out.data_ptr<scalar_t>()}, l);
    });
  } else {
    const ReduceArgs& a = c.attrs.get<ReduceArgs>();
    ANVIL_DISPATCH_FLOATING(l.x.dtype(), "reduce", [&] {
      scalar_t* o = out.data_ptr<scalar_t>();
      if constexpr (K == Kind::Mean) {
        RunReduce(SumOp<scalar_t, true>{o}, l);
      } else if constexpr (K == Kind::Norm) {
        const NormMode mode = std::isinf(a.p) ? NormMode::kInf
                              : a.p == 2      ? NormMode::kTwo
                              : a.p == 1      ? NormMode::kOne
                                              : NormMode::kP;
        RunReduce(NormOp<scalar_t>{o, mode, a.p}, l);
      } else if constexpr (K == Kind::Var) {
        RunReduce(VarOp<scalar_t>{o, a.correction}, l);
      } else {
        RunReduce(LseOp<scalar_t>{o}, l);
      }
    });
  }
}

template <bool kMax, bool kWantValues>
void ArgReduceKernel(const KernelCall& c) {
  const Tensor& idx_out = c.outputs[kWantValues ? 1 : 0];
  if (idx_out.numel() == 0) return;
  const Layout l = MakeLayout(c.inputs[0], c.attrs.get<ReduceArgs>().dims);
  ANVIL_DISPATCH_ALL(l.x.dtype(), "argmax", [&] {
    scalar_t* values = kWantValues ? c.outputs[0].data_ptr<scalar_t>() : nullptr;
    RunReduce(ArgOp<scalar_t, kMax>{idx_out.data_ptr<int64_t>(), values}, l);
  });
}

// ---- cumsum, logcumsumexp, cumprod: one scan, three operators ----
// Floating types scan in double for cumsum (integers in their own type, wrapping like the
// CPU's) and in opmath_t for logcumsumexp, whose log-add-exp step keeps the running value
// near the elements' scale.

template <typename T>
struct SumScan {
  using Acc = SumAcc<T>;
  __device__ static Acc identity() { return Acc(0); }
  __device__ static Acc combine(Acc a, Acc b) { return a + b; }
};

template <typename T>
struct LogAddExpScan {
  using Acc = opmath_t<T>;
  __device__ static Acc identity() { return -std::numeric_limits<Acc>::infinity(); }
  __device__ static Acc combine(Acc a, Acc b) { return fn::LogAddExp(a, b); }
};

template <typename T>
struct ProdScan {
  using Acc = SumAcc<T>;
  __device__ static Acc identity() { return Acc(1); }
  __device__ static Acc combine(Acc a, Acc b) { return a * b; }
};

constexpr int kScanItems = 4;  // consecutive elements per thread per tile

// Rows of at most 64 elements: one thread per row, sequential.
template <typename T, typename Op>
__global__ void ScanShortRowsKernel(const T* in, T* out, int64_t rows, int64_t len) {
  using M = opmath_t<T>;
  using A = typename Op::Acc;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    A acc = Op::identity();
    for (int64_t i = 0; i < len; ++i) {
      acc = Op::combine(acc, A(M(in[r * len + i])));
      out[r * len + i] = T(M(acc));
    }
  }
}

// A block per row, walking it in tiles of kBlock * kScanItems: each thread scans its
// consecutive items, a warp scan (shuffles) and the per-warp totals give each thread its
// prefix, and the tile's total carries into the next tile. Op is associative, so the
// regrouping gives the sequential scan's values up to rounding.
template <typename T, typename Op>
__global__ void ScanRowsKernel(const T* in, T* out, int64_t rows, int64_t len) {
  using M = opmath_t<T>;
  using A = typename Op::Acc;
  __shared__ A warp_totals[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* x = in + r * len;
    T* y = out + r * len;
    A carry = Op::identity();
    for (int64_t tile = 0; tile < len; tile += int64_t(kBlock) * kScanItems) {
      const int64_t base = tile + int64_t(threadIdx.x) * kScanItems;
      A v[kScanItems];
      A run = Op::identity();
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        if (base + k < len) run = Op::combine(run, A(M(x[base + k])));
        v[k] = run;
      }
      A incl = run;
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const A o = Shfl<A, true>(incl, off);
        if (lane >= off) incl = Op::combine(o, incl);
      }
      A excl = Shfl<A, true>(incl, 1);
      if (lane == 0) excl = Op::identity();
      if (lane == 31) warp_totals[warp] = incl;
      __syncthreads();
      A prefix = carry, total = carry;
      for (int w = 0; w < kWarps; ++w) {
        if (w < warp) prefix = Op::combine(prefix, warp_totals[w]);
        total = Op::combine(total, warp_totals[w]);
      }
      prefix = Op::combine(prefix, excl);
#pragma unroll
      for (int k = 0; k < kScanItems; ++k) {
        if (base + k < len) y[base + k] = T(M(Op::combine(prefix, v[k])));
      }
      carry = total;
      __syncthreads();  // warp_totals is rewritten by the next tile
    }
  }
}

// Scans `c.inputs[0]` along DimArgs::dim into the output with Op, over the dtypes of DISPATCH.
template <template <typename> class Op, bool kFloatingOnly>
void ScanKernel(const KernelCall& c, const char* name) {
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const int64_t d = wrap_dim(c.attrs.get<DimArgs>().dim, std::max<int64_t>(c.inputs[0].dim(), 1), name);
  Tensor x = c.inputs[0].dim() == 0 ? c.inputs[0].reshape({1}) : c.inputs[0];
  // Scan straight into the output when both are contiguous along the last dim.
  const bool direct = d == x.dim() - 1 && x.is_contiguous() && out.is_contiguous();
  Tensor xm = direct ? x : x.movedim(d, -1).contiguous();
  Tensor ym = direct ? out : empty_like(xm);
  const int64_t len = xm.size(-1);
  const int64_t rows = xm.numel() / len;
  const int device = out.device().index;
  {
    DeviceGuard guard(device);
    cudaStream_t stream = current_stream(device);
    auto launch = [&](auto tag) {
      using scalar_t = decltype(tag);
      const scalar_t* in = xm.data_ptr<scalar_t>();
      scalar_t* o = ym.data_ptr<scalar_t>();
      if (len <= 64) {
        ScanShortRowsKernel<scalar_t, Op<scalar_t>><<<GridFor(rows), kBlock, 0, stream>>>(in, o, rows, len);
      } else {
        ScanRowsKernel<scalar_t, Op<scalar_t>><<<BlocksFor(rows), kBlock, 0, stream>>>(in, o, rows, len);
      }
      ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    };
    if constexpr (kFloatingOnly) {
      ANVIL_DISPATCH_FLOATING(xm.dtype(), name, [&] { launch(scalar_t{}); });
    } else {
      ANVIL_DISPATCH_NUMERIC(xm.dtype(), name, [&] { launch(scalar_t{}); });
    }
  }
  if (!direct) CopyBits(out, ym.movedim(-1, d).reshape(out.sizes()));
}

void CumSumKernel(const KernelCall& c) { ScanKernel<SumScan, false>(c, "cumsum"); }
void LogCumSumExpKernel(const KernelCall& c) { ScanKernel<LogAddExpScan, true>(c, "logcumsumexp"); }
void CumProdKernel(const KernelCall& c) { ScanKernel<ProdScan, false>(c, "cumprod"); }

}  // namespace

#define ANVIL_REDUCE_ROW(row, ...) ANVIL_KERNEL_SLOT(row, __VA_ARGS__)
#include "core/backend/reduce_rows.def"
#undef ANVIL_REDUCE_ROW

}  // namespace anvil::cuda
