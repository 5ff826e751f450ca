// CUDA kernels for indexing: gather/scatter, index_select/index_add and advanced indexing
// (index / index_put). Nonzero and sort live in sort.cu.
//
// The operands are re-windowed exactly as the CPU kernels do (core/backend/cpu/index.cc): the
// indexed tensor gets the shape of the index with stride 0 along the indexed dims, so one
// element-wise launch walks result, window and index tensors together and each element adds
// index * stride to its window pointer. Reads never collide; colliding writes are resolved
// as index_options.h describes. Indices are validated by a separate pass before any kernel
// uses them (one device-to-host read per call), so the kernels themselves never go out of
// bounds and a bad index raises the CPU's IndexError.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cub/device/device_radix_sort.cuh>
#include <type_traits>

#include "core/backend/advanced_index.h"
#include "core/backend/common/index_plan.h"
#include "core/backend/cuda/index_options.h"
#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/ops/functions.h"

namespace anvil::cuda {

namespace {

std::atomic<bool> g_deterministic{true};

using backend::RawWindow;

constexpr int kMaxIndexTensors = 6;

TensorOptions On(const Tensor& t, ScalarType dtype) { return TensorOptions(dtype).with_device(t.device()); }

using backend::AsInt64;

// Grid-stride loop over n elements, row-major over ops[0]'s shape, with the linear position.
template <int N, typename Body>
__global__ void IndexedKernel(Offsets<N> o, int64_t n, Body body) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    char* p[N];
    o.at(i, p);
    body(i, p);
  }
}

// Element copies only move bytes: one instantiation per element size, not per dtype.
template <typename F>
void BySize(int64_t element_size, const F& f) {
  switch (element_size) {
    case 1:
      return f(uint8_t{});
    case 2:
      return f(uint16_t{});
    case 4:
      return f(uint32_t{});
    case 8:
      return f(uint64_t{});
    default:
      ANVIL_INTERNAL_ASSERT(false, "unexpected element size ", element_size);
  }
}

// Copies self into out unless out is self (in-place form); same dtype.
void InitFromSelf(const Tensor& self, const Tensor& out) {
  if (out.impl() == self.impl()) return;
  CopyBits(out, self);
}

// ---- index validation ----

// The first bad index in the CPU's loop order, as position * count + which (element by
// element, the index tensors in order within one element); all ones while none is bad.
__global__ void FindBadIndexKernel(Offsets<1> o, int64_t n, int64_t size, bool wrap, int64_t which, int64_t count,
                                   unsigned long long* first) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    char* p[1];
    o.at(i, p);
    const int64_t v = *reinterpret_cast<const int64_t*>(p[0]);
    const int64_t w = (wrap && v < 0) ? v + size : v;
    if (w < 0 || w >= size) atomicMin(first, static_cast<unsigned long long>(i * count + which));
  }
}

struct IndexSpec {
  Tensor index;  // int64; every spec of one call has the same shape
  int64_t size;  // size of the indexed dim
  int64_t dim;   // for the message
  bool wrap;     // advanced indexing counts negative indices from the end
};

int64_t ReadInt64(const Tensor& t, int64_t linear, cudaStream_t stream) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    offset += (linear % t.size(d)) * t.stride(d);
    linear /= t.size(d);
  }
  int64_t v = 0;
  ANVIL_CUDA_CHECK(cudaMemcpyAsync(&v, static_cast<const int64_t*>(t.data_ptr()) + offset, sizeof(v),
                                   cudaMemcpyDeviceToHost, stream));
  wait_for_stream(stream);
  return v;
}

// Throws the CPU kernels' IndexError for the first out-of-range index.
void CheckIndices(const std::vector<IndexSpec>& specs) {
  int64_t total = 0;
  for (const IndexSpec& s : specs) total += s.index.numel();
  if (total == 0) return;
  const Tensor& any = specs[0].index;
  const int device = any.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  Tensor first = empty({1}, On(any, kInt64));
  auto* fp = static_cast<unsigned long long*>(first.data_ptr());
  ANVIL_CUDA_CHECK(cudaMemsetAsync(fp, 0xff, sizeof(*fp), stream));
  const int64_t count = static_cast<int64_t>(specs.size());
  for (int64_t k = 0; k < count; ++k) {
    const IndexSpec& s = specs[k];
    const int64_t n = s.index.numel();
    if (n == 0) continue;
    FindBadIndexKernel<<<GridFor(n), kBlock, 0, stream>>>(MakeOffsets<1>({&s.index}), n, s.size, s.wrap, k, count, fp);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  }
  unsigned long long key = 0;
  ANVIL_CUDA_CHECK(cudaMemcpyAsync(&key, fp, sizeof(key), cudaMemcpyDeviceToHost, stream));
  wait_for_stream(stream);
  if (key == ~0ull) return;
  const IndexSpec& bad = specs[key % count];
  const int64_t v = ReadInt64(bad.index, static_cast<int64_t>(key / count), stream);
  throw IndexError(detail::StrCat("index ", v, " is out of bounds for dimension ", bad.dim, " with size ", bad.size));
}

// ---- locating elements ----

// Operands: p[0] the result (reads) or source (writes), p[1] the window onto the indexed
// tensor, p[2..2+K) the index tensors. The element is p[1] + sum of index * stride.
template <int K>
struct Locate {
  int64_t sizes[K];    // size of each indexed dim: negative (advanced) indices wrap; validated
  int64_t strides[K];  // bytes per index step
  __device__ __forceinline__ char* operator()(char* const* p) const {
    char* at = p[1];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int64_t i = *reinterpret_cast<const int64_t*>(p[2 + k]);
      if (i < 0) i += sizes[k];
      at += i * strides[k];
    }
    return at;
  }
};

template <typename U, int K>
struct ReadBody {
  Locate<K> loc;
  __device__ __forceinline__ void operator()(char** p) const {
    *reinterpret_cast<U*>(p[0]) = *reinterpret_cast<const U*>(loc(p));
  }
};

template <int K>
void Read(const std::array<const Tensor*, 2 + K>& ops, const Locate<K>& loc) {
  BySize(ops[0]->element_size(), [&](auto tag) { LaunchElementwise<2 + K>(ops, ReadBody<decltype(tag), K>{loc}); });
}

// ---- colliding writes ----

// kMul, kMax, kMin: scatter_reduce's prod, amax and amin (a NaN source wins max and min).
enum class Combine { kAssign, kAdd, kAddScaled, kMul, kMax, kMin };

// The CPU kernels' arithmetic, step for step (each step rounds to T, as the CPU's does).
template <typename T, Combine C>
__device__ __forceinline__ T Apply(T cur, T v, double alpha) {
  using M = opmath_t<T>;
  if constexpr (C == Combine::kAssign) {
    return v;
  } else if constexpr (C == Combine::kAdd) {
    if constexpr (std::is_same_v<T, bool>) {
      return cur || v;
    } else {
      return T(M(cur) + M(v));
    }
  } else if constexpr (C == Combine::kAddScaled) {
    return T(M(cur) + M(alpha) * M(v));
  } else if constexpr (std::is_same_v<T, bool>) {
    return C == Combine::kMax ? (cur || v) : (cur && v);
  } else if constexpr (C == Combine::kMul) {
    return T(M(cur) * M(v));
  } else {
    const M a = M(cur), b = M(v);
    if (b != b) return v;
    if (a != a) return cur;
    return C == Combine::kMax ? (a > b ? cur : v) : (a < b ? cur : v);
  }
}

template <typename T>
constexpr bool kHasAtomicAdd =
    std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>;

// The opt-in non-deterministic path: unordered plain writes or atomicAdd.
template <typename T, Combine C, int K>
struct DirectBody {
  Locate<K> loc;
  double alpha;
  __device__ __forceinline__ void operator()(char** p) const {
    T* dst = reinterpret_cast<T*>(loc(p));
    const T v = *reinterpret_cast<const T*>(p[0]);
    if constexpr (C == Combine::kAssign) {
      *dst = v;
    } else {
      const T add = C == Combine::kAdd ? v : T(opmath_t<T>(alpha) * opmath_t<T>(v));
      if constexpr (std::is_same_v<T, int64_t>) {
        atomicAdd(reinterpret_cast<unsigned long long*>(dst), static_cast<unsigned long long>(add));
      } else {
        atomicAdd(dst, add);
      }
    }
  }
};

// Each contribution's destination (elements from dst's data pointer) and source (bytes from
// the source window's data pointer), written at its position in the loop order.
template <int K>
struct KeyBody {
  Locate<K> loc;
  const char* dst_base;
  const char* src_base;
  int64_t element_size;
  uint64_t* keys;
  int64_t* sources;
  __device__ __forceinline__ void operator()(int64_t i, char** p) const {
    keys[i] = static_cast<uint64_t>((loc(p) - dst_base) / element_size);
    sources[i] = p[0] - src_base;
  }
};

// After a stable sort by destination, the first thread of each run of equal keys applies the
// whole run in order: a segmented reduction with one fixed order, so no atomics.
template <typename T, Combine C>
__global__ void ApplySortedKernel(const uint64_t* keys, const int64_t* sources, int64_t n, T* dst, const char* src,
                                  double alpha) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n; t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t key = keys[t];
    if (t > 0 && keys[t - 1] == key) continue;  // not the first contribution to this element
    int64_t end = t + 1;
    while (end < n && keys[end] == key) ++end;
    T* d = dst + key;
    if constexpr (C == Combine::kAssign) {
      // The CPU's serial loop leaves the last write.
      *d = *reinterpret_cast<const T*>(src + sources[end - 1]);
    } else {
      T acc = *d;
      for (int64_t u = t; u < end; ++u) {
        acc = Apply<T, C>(acc, *reinterpret_cast<const T*>(src + sources[u]), alpha);
      }
      *d = acc;
    }
  }
}

// Bits that the destination keys of `dst` can occupy (its largest element offset).
int KeyBits(const Tensor& dst) {
  uint64_t max_offset = 0;
  for (int64_t d = 0; d < dst.dim(); ++d) {
    if (dst.size(d) > 1) {
      max_offset += static_cast<uint64_t>((dst.size(d) - 1) * std::max<int64_t>(dst.stride(d), 0));
    }
  }
  return std::max(1, static_cast<int>(std::bit_width(max_offset)));
}

// Writes source ops[0] into dst through the window ops[1] and index tensors ops[2..]; `dst`
// is the tensor whose storage the window covers (its data pointer is the window's).
template <typename T, Combine C, int K>
void Write(const std::array<const Tensor*, 2 + K>& ops, const Locate<K>& loc, const Tensor& dst, double alpha) {
  const Tensor& src = *ops[0];
  const int64_t n = src.numel();
  if (n == 0) return;
  // Only plain writes and sums have a direct (unordered) path; products and extrema always
  // take the sorted one.
  if constexpr (C == Combine::kAssign || ((C == Combine::kAdd || C == Combine::kAddScaled) && kHasAtomicAdd<T>)) {
    if (!deterministic_index_accumulate()) {
      LaunchElementwise<2 + K>(ops, DirectBody<T, C, K>{loc, alpha});
      return;
    }
  }
  const int device = dst.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  Tensor keys = empty({2, n}, On(dst, kInt64));
  Tensor sources = empty({2, n}, On(dst, kInt64));
  uint64_t* keys_in = static_cast<uint64_t*>(keys.data_ptr());
  uint64_t* keys_out = keys_in + n;
  int64_t* sources_in = static_cast<int64_t*>(sources.data_ptr());
  int64_t* sources_out = sources_in + n;
  const KeyBody<K> body{loc,
                        static_cast<const char*>(dst.data_ptr()),
                        static_cast<const char*>(src.data_ptr()),
                        dst.element_size(),
                        keys_in,
                        sources_in};
  IndexedKernel<2 + K><<<GridFor(n), kBlock, 0, stream>>>(MakeOffsets<2 + K>(ops), n, body);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  // cub's radix sort is stable: equal destinations keep the loop order.
  const int end_bit = KeyBits(dst);
  size_t bytes = 0;
  ANVIL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, bytes, keys_in, keys_out, sources_in, sources_out, n, 0,
                                                   end_bit, stream));
  Tensor scratch = empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, On(dst, kUInt8));
  ANVIL_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(scratch.data_ptr(), bytes, keys_in, keys_out, sources_in,
                                                   sources_out, n, 0, end_bit, stream));
  ApplySortedKernel<T, C><<<GridFor(n), kBlock, 0, stream>>>(keys_out, sources_out, n, static_cast<T*>(dst.data_ptr()),
                                                             static_cast<const char*>(src.data_ptr()), alpha);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
}

// ---- gather / scatter / index_select / index_add ----

// gather/scatter/index_select/index_add take indices as they are (no wrapping), as on the CPU.
void GatherKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const backend::DimWindow w = backend::MakeDimWindow(c.inputs[0], c.inputs[1], c.attrs.get<IndexArgs>().dim, "gather");
  CheckIndices({{w.index, w.size, w.dim, false}});
  Read<1>({&out, &w.window, &w.index}, Locate<1>{{w.size}, {w.step}});
}

// out = self, then `write(srcr, outr, idx, loc)` combines the source window into out: the
// setup scatter, scatter_add and scatter_reduce share.
template <typename WriteFn>
void ScatterWith(const KernelCall& c, const char* name, WriteFn write) {
  InitFromSelf(c.inputs[0], c.outputs[0]);
  const std::optional<backend::ScatterPlan> plan = backend::PlanScatter(c, name);
  if (!plan) return;
  const backend::DimWindow& w = plan->out;
  CheckIndices({{w.index, w.size, w.dim, false}});
  write(plan->src_window, w.window, w.index, Locate<1>{{w.size}, {w.step}});
}

// scatter / scatter_add: out = self; out[..idx..] (+)= src.
template <bool Add>
void ScatterKernel(const KernelCall& c) {
  ScatterWith(c, "scatter", [&](const Tensor& srcr, const Tensor& outr, const Tensor& idx, const Locate<1>& loc) {
    const Tensor& out = c.outputs[0];
    if constexpr (Add) {
      ANVIL_DISPATCH_ALL(out.dtype(), "scatter_add", [&] {
        Write<scalar_t, Combine::kAdd, 1>({&srcr, &outr, &idx}, loc, out, 0.0);
      });
    } else {
      BySize(out.element_size(), [&](auto tag) {
        Write<decltype(tag), Combine::kAssign, 1>({&srcr, &outr, &idx}, loc, out, 0.0);
      });
    }
  });
}

// scatter_reduce's step: sum as scatter_add; prod, amax and amin in the CPU's serial order on
// the sorted path (Write has no atomic form for them).
void ScatterReduceKernel(const KernelCall& c) {
  if (c.attrs.get<ScatterArgs>().mode == kScatterSum) return ScatterKernel<true>(c);
  ScatterWith(c, "scatter_reduce",
              [&](const Tensor& srcr, const Tensor& outr, const Tensor& idx, const Locate<1>& loc) {
                const Tensor& out = c.outputs[0];
                ANVIL_DISPATCH_ALL(out.dtype(), "scatter_reduce", [&] {
                  switch (c.attrs.get<ScatterArgs>().mode) {
                    case kScatterProd:
                      Write<scalar_t, Combine::kMul, 1>({&srcr, &outr, &idx}, loc, out, 0.0);
                      break;
                    case kScatterAmax:
                      Write<scalar_t, Combine::kMax, 1>({&srcr, &outr, &idx}, loc, out, 0.0);
                      break;
                    default:
                      Write<scalar_t, Combine::kMin, 1>({&srcr, &outr, &idx}, loc, out, 0.0);
                      break;
                  }
                });
              });
}

void IndexSelectKernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor idx = AsInt64(c.inputs[1]).reshape({-1}).contiguous();
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  if (x.dim() == 0) {  // the CPU reads only the first index here
    if (idx.numel() > 0) {
      CheckIndices({{RawWindow(idx, {1}, {1}, idx.storage_offset()), 1, 0, false}});
    }
    InitFromSelf(x, out);
    return;
  }
  const int64_t d = wrap_dim(c.attrs.get<IndexArgs>().dim, x.dim(), "index_select");
  const int64_t size = x.size(d);
  CheckIndices({{idx, size, d, false}});
  IntArray st = x.strides();
  st[d] = 0;
  const Tensor xr = RawWindow(x, out.sizes(), st, x.storage_offset());
  IntArray ist(out.dim(), 0);
  ist[d] = 1;
  const Tensor ir = RawWindow(idx, out.sizes(), ist, idx.storage_offset());
  const Locate<1> loc{{size}, {x.stride(d) * x.element_size()}};
  Read<1>({&out, &xr, &ir}, loc);
}

// out = self; out.index_add_(d, idx, src, alpha): out[..idx[j]..] += alpha * src[..j..].
void IndexAddKernel(const KernelCall& c) {
  InitFromSelf(c.inputs[0], c.outputs[0]);
  const auto plan = backend::PlanIndexAdd(c);
  if (!plan) return;
  CheckIndices({{plan->idx, plan->size, plan->dim, false}});
  const Locate<1> loc{{plan->size}, {plan->step}};
  ANVIL_DISPATCH_NUMERIC(c.inputs[0].dtype(), "index_add", [&] {
    Write<scalar_t, Combine::kAddScaled, 1>({&plan->src, &plan->out_window, &plan->idx_window}, loc, c.outputs[0],
                                            c.attrs.get<IndexArgs>().alpha);
  });
}

// ---- advanced indexing ----

// The CPU's plan (core/backend/cpu/index.cc), duplicated: the result as [B..., rest...]
using AdvIndex = AdvancedIndexPlan;  // core/backend/advanced_index.h

template <int K>
void AdvRun(const AdvIndex& plan, const Tensor& target, bool put, bool accumulate) {
  std::array<const Tensor*, 2 + K> ops;
  ops[0] = &plan.result_view;
  ops[1] = &plan.self_window;
  Locate<K> loc;
  for (int k = 0; k < K; ++k) {
    ops[2 + k] = &plan.idx[k];
    loc.sizes[k] = plan.self_sizes[k];
    loc.strides[k] = plan.self_strides[k];
  }
  if (!put) return Read<K>(ops, loc);
  if (accumulate) {
    ANVIL_DISPATCH_ALL(target.dtype(), "index_put", [&] { Write<scalar_t, Combine::kAdd, K>(ops, loc, target, 0.0); });
  } else {
    BySize(target.element_size(), [&](auto tag) { Write<decltype(tag), Combine::kAssign, K>(ops, loc, target, 0.0); });
  }
}

// self: the indexed tensor (index's input, index_put's output); result: index's output or
// index_put's values.
void Advanced(const Tensor& self, std::vector<Tensor> idx, const IntArray& idims, const Tensor& result, bool put,
              bool accumulate) {
  ANVIL_CHECK_T(NotImplementedError, idx.size() <= kMaxIndexTensors, "advanced indexing with more than ",
                kMaxIndexTensors, " index tensors");
  for (Tensor& t : idx) t = AsInt64(t);
  const AdvIndex plan = PlanAdvancedIndex(self, idx, idims, result);
  std::vector<IndexSpec> specs;
  for (size_t k = 0; k < idx.size(); ++k) {
    specs.push_back({idx[k], plan.self_sizes[k], idims[k], true});
  }
  CheckIndices(specs);
  switch (idx.size()) {
    case 1:
      return AdvRun<1>(plan, self, put, accumulate);
    case 2:
      return AdvRun<2>(plan, self, put, accumulate);
    case 3:
      return AdvRun<3>(plan, self, put, accumulate);
    case 4:
      return AdvRun<4>(plan, self, put, accumulate);
    case 5:
      return AdvRun<5>(plan, self, put, accumulate);
    case 6:
      return AdvRun<6>(plan, self, put, accumulate);
    default:
      ANVIL_INTERNAL_ASSERT(false, "no index tensors");
  }
}

void IndexKernel(const KernelCall& c) {
  if (c.outputs[0].numel() == 0) return;
  Advanced(c.inputs[0], std::vector<Tensor>(c.inputs.begin() + 1, c.inputs.end()),
           c.attrs.get<AdvancedIndexArgs>().indexed_dims, c.outputs[0], false, false);
}

// inputs: self, indices..., values (already broadcast to the indexing result's shape).
void IndexPutKernel(const KernelCall& c) {
  const Tensor& values = c.inputs.back();
  const Tensor& out = c.outputs[0];
  InitFromSelf(c.inputs[0], out);
  if (values.numel() == 0) return;
  Advanced(out, std::vector<Tensor>(c.inputs.begin() + 1, c.inputs.end() - 1),
           c.attrs.get<AdvancedIndexArgs>().indexed_dims, values, true, c.attrs.get<AdvancedIndexArgs>().accumulate);
}

}  // namespace

void set_deterministic_index_accumulate(bool deterministic) { g_deterministic.store(deterministic); }
bool deterministic_index_accumulate() { return g_deterministic.load(); }

#define ANVIL_INDEX_ROW(row, ...) ANVIL_KERNEL_SLOT(row, __VA_ARGS__)
#include "core/backend/index_rows.def"
#undef ANVIL_INDEX_ROW

}  // namespace anvil::cuda
