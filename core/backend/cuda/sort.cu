// CUDA kernels for the index rows built on cub: sort (a stable radix sort) and nonzero (a
// prefix sum over "is non-zero" flags). Their rows' kernel slots are filled here
// (ANVIL_KERNEL_SLOT), the other index rows' in index.cu.
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>
#include <type_traits>

#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/ops/functions.h"

namespace anvil::cuda {
namespace {

TensorOptions On(const Tensor& t, ScalarType dtype) { return TensorOptions(dtype).with_device(t.device()); }

// Scratch memory for cub, from the caching allocator.
Tensor Scratch(const Tensor& like, size_t bytes) {
  return empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, On(like, kUInt8));
}

// ---- sort ----

// An unsigned key whose order is the CPU comparator's: NaN above everything (all NaNs
// equal), -0.0 equal to +0.0, integers by value. Radix sorting the keys stably then gives the
// CPU's std::stable_sort order, ascending or descending.
template <typename T>
struct SortKey {
  using type = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
};

// Sign-magnitude floats (bits, with the exponent-all-ones pattern `inf` and the sign bit):
// flip all bits of negatives, set the sign bit of positives.
template <typename U>
__device__ __forceinline__ U FloatKey(U bits, U inf) {
  constexpr U kSign = U(U(1) << (sizeof(U) * 8 - 1));
  if (U(bits & U(~kSign)) > inf) return U(~U(0));  // NaN
  if (bits == kSign) bits = 0;                     // -0.0
  return (bits & kSign) ? U(~bits) : U(bits | kSign);
}

template <typename T>
__device__ __forceinline__ typename SortKey<T>::type ToKey(T v) {
  using U = typename SortKey<T>::type;
  if constexpr (std::is_same_v<T, bool>) {
    return v ? 1 : 0;
  } else if constexpr (std::is_same_v<T, Half>) {
    return FloatKey<U>(v.bits, 0x7c00);
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return FloatKey<U>(v.bits, 0x7f80);
  } else if constexpr (std::is_same_v<T, float>) {
    return FloatKey<U>(__float_as_uint(v), 0x7f800000u);
  } else if constexpr (std::is_same_v<T, double>) {
    return FloatKey<U>(static_cast<U>(__double_as_longlong(v)), 0x7ff0000000000000ull);
  } else if constexpr (std::is_signed_v<T>) {
    return U(static_cast<U>(v) ^ U(U(1) << (sizeof(U) * 8 - 1)));
  } else {
    return static_cast<U>(v);
  }
}

// For i < n: keys[i] = key of x[i], positions[i] = i's position in its row; for i <= rows:
// offsets[i] = i * len (the segment bounds). total = max(n, rows + 1) covers both.
template <typename T>
__global__ void PrepareSortKernel(const T* x, int64_t n, int64_t len, int64_t rows, int64_t total,
                                  typename SortKey<T>::type* keys, int64_t* positions, int64_t* offsets) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    if (i < n) {
      keys[i] = ToKey(x[i]);
      positions[i] = i % len;
    }
    if (i <= rows) offsets[i] = i * len;
  }
}

template <typename T>
__global__ void GatherRowsKernel(const T* x, const int64_t* positions, int64_t n, int64_t len, T* values) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    values[i] = x[(i / len) * len + positions[i]];
  }
}

// Sorts each row of the contiguous [rows, len] x into values and indices (contiguous).
template <typename T>
void SortRows(const Tensor& x, int64_t rows, int64_t len, bool descending, const Tensor& values,
              const Tensor& indices) {
  using U = typename SortKey<T>::type;
  const int64_t n = rows * len;
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  Tensor keys = empty({2 * n * static_cast<int64_t>(sizeof(U))}, On(x, kUInt8));
  Tensor positions = empty({n}, On(x, kInt64));
  Tensor offsets = empty({rows + 1}, On(x, kInt64));
  U* keys_in = static_cast<U*>(keys.data_ptr());
  U* keys_out = keys_in + n;
  int64_t* pos_in = positions.data_ptr<int64_t>();
  int64_t* pos_out = indices.data_ptr<int64_t>();
  int64_t* off = offsets.data_ptr<int64_t>();
  const int64_t total = std::max(n, rows + 1);
  PrepareSortKernel<T>
      <<<GridFor(total), kBlock, 0, stream>>>(x.data_ptr<T>(), n, len, rows, total, keys_in, pos_in, off);
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  size_t bytes = 0;
  // One row: the device-wide radix sort (stable); several: one segment per row.
  auto sort = [&](void* scratch) {
    if (rows == 1) {
      return descending ? cub::DeviceRadixSort::SortPairsDescending(scratch, bytes, keys_in, keys_out, pos_in, pos_out,
                                                                    n, 0, int(sizeof(U) * 8), stream)
                        : cub::DeviceRadixSort::SortPairs(scratch, bytes, keys_in, keys_out, pos_in, pos_out, n, 0,
                                                          int(sizeof(U) * 8), stream);
    }
    return descending ? cub::DeviceSegmentedSort::StableSortPairsDescending(scratch, bytes, keys_in, keys_out, pos_in,
                                                                            pos_out, n, rows, off, off + 1, stream)
                      : cub::DeviceSegmentedSort::StableSortPairs(scratch, bytes, keys_in, keys_out, pos_in, pos_out, n,
                                                                  rows, off, off + 1, stream);
  };
  ANVIL_CUDA_CHECK(sort(nullptr));
  Tensor scratch = Scratch(x, bytes);
  ANVIL_CUDA_CHECK(sort(scratch.data_ptr()));
  GatherRowsKernel<T><<<GridFor(n), kBlock, 0, stream>>>(x.data_ptr<T>(), pos_out, n, len, values.data_ptr<T>());
  ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
}

void SortKernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const bool descending = c.attrs.get<SortArgs>().descending;
  const Tensor xs = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(c.attrs.get<SortArgs>().dim, xs.dim(), "sort");
  const Tensor xm = xs.movedim(d, -1).contiguous();
  const int64_t len = xm.size(-1);
  const int64_t rows = len == 0 ? 0 : xm.numel() / len;
  if (rows == 0) return;
  const Tensor values = empty(xm.sizes(), On(xm, xm.dtype()));
  const Tensor indices = empty(xm.sizes(), On(xm, kInt64));
  ANVIL_DISPATCH_ALL(x.dtype(), "sort", [&] { SortRows<scalar_t>(xm, rows, len, descending, values, indices); });
  for (int k = 0; k < 2; ++k) {
    CopyBits(c.outputs[k], (k == 0 ? values : indices).movedim(-1, d).reshape(c.outputs[k].sizes()));
  }
}

// ---- nonzero ----

template <typename T>
__global__ void NonzeroFlagsKernel(const T* x, int64_t n, int64_t* flags) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    using M = opmath_t<T>;
    flags[i] = static_cast<M>(x[i]) != M(0) ? 1 : 0;  // NaN counts, -0.0 does not (the CPU's test)
  }
}

struct Sizes {
  int ndim;
  int64_t size[backend::kMaxDims];
};

// Hit i (flags[i] set) is row ends[i] - 1 of the output: its coordinates, last dim fastest.
__global__ void NonzeroCoordsKernel(const int64_t* flags, const int64_t* ends, int64_t n, Sizes s, int64_t* out) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if (flags[i] == 0) continue;
    int64_t* row = out + (ends[i] - 1) * s.ndim;
    int64_t rem = i;
    for (int d = s.ndim - 1; d >= 0; --d) {
      row[d] = rem % s.size[d];
      rem /= s.size[d];
    }
  }
}

// The output's row count comes from one device-to-host read of the prefix sum's last entry.
void NonzeroKernel(const KernelCall& c) {
  const Tensor x = c.inputs[0].contiguous();
  const int64_t nd = x.dim();
  const int64_t n = x.numel();
  ANVIL_CHECK(nd <= backend::kMaxDims, "nonzero: at most ", backend::kMaxDims, " dims, got ", nd);
  int64_t count = 0;
  Tensor flags, ends;
  const int device = x.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  if (n > 0) {
    flags = empty({n}, On(x, kInt64));
    ends = empty({n}, On(x, kInt64));
    int64_t* f = flags.data_ptr<int64_t>();
    int64_t* e = ends.data_ptr<int64_t>();
    ANVIL_DISPATCH_ALL(x.dtype(), "nonzero", [&] {
      NonzeroFlagsKernel<scalar_t><<<GridFor(n), kBlock, 0, stream>>>(x.data_ptr<scalar_t>(), n, f);
    });
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
    size_t bytes = 0;
    ANVIL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(nullptr, bytes, f, e, n, stream));
    Tensor scratch = Scratch(x, bytes);
    ANVIL_CUDA_CHECK(cub::DeviceScan::InclusiveSum(scratch.data_ptr(), bytes, f, e, n, stream));
    ANVIL_CUDA_CHECK(cudaMemcpyAsync(&count, e + n - 1, sizeof(count), cudaMemcpyDeviceToHost, stream));
    wait_for_stream(stream);
  }
  Tensor out = empty({count, nd}, On(x, kInt64));
  if (count > 0 && nd > 0) {
    Sizes s{};
    s.ndim = static_cast<int>(nd);
    for (int64_t d = 0; d < nd; ++d) s.size[d] = x.size(d);
    NonzeroCoordsKernel<<<GridFor(n), kBlock, 0, stream>>>(flags.data_ptr<int64_t>(), ends.data_ptr<int64_t>(), n, s,
                                                           out.data_ptr<int64_t>());
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  }
  c.outputs.push_back(out);
}

}  // namespace

ANVIL_KERNEL_SLOT(Nonzero, NonzeroKernel)
ANVIL_KERNEL_SLOT(Sort, SortKernel)

}  // namespace anvil::cuda
