// CUDA kernels for cat and for the strided scatter-add that view backward uses, with the
// semantics of core/backend/cpu/shape.cc.
#include <algorithm>
#include <numeric>

#include "core/backend/cuda/kernels.h"
#include "core/backend/cuda/loops.cuh"
#include "core/backend/shape_rows.h"
#include "core/ops/functions.h"

namespace anvil::cuda {
namespace {

// One strided copy per input into its window of the output.
void CatKernel(const KernelCall& c) { shape_rows::Cat(c.outputs[0], c.inputs, c.attrs.get<DimArgs>().dim, CopyBits); }

// NOTE [ Deterministic strided scatter-add ]
// out = zeros(dims); out.as_strided(geometry) += src. The CPU adds the window's elements
// one by one in row-major order, rounding to the dtype after each add, and windows may
// overlap (unfold with step < size, stride-0 dims, arbitrary as_strided), so several window
// elements can land on one output element. The window's dims are split in two:
//  - serial dims S: a set whose combined footprint may overlap itself;
//  - parallel dims P: the rest, chosen so that the footprints of different P positions are
//    disjoint (sorted by stride, each P stride is at least the extent spanned by S and the
//    smaller P dims: the usual non-overlap test, with S as one block).
// One thread per P position then walks all S positions in row-major order. Every output
// element is written by one thread only, and its contributions arrive in the CPU's order,
// so the result is the CPU's bit for bit. A window that does not overlap itself has S
// empty: one element per thread.
struct ScatterPlan {
  int np = 0, ns = 0;
  int64_t p_count = 1, s_count = 1;
  // Innermost first; strides in elements.
  int64_t p_size[backend::kMaxDims], p_out[backend::kMaxDims], p_src[backend::kMaxDims];
  int64_t s_size[backend::kMaxDims], s_out[backend::kMaxDims], s_src[backend::kMaxDims];
};

// window sizes/strides and src's element strides broadcast to the window (0 on broadcast
// dims). Dims of size 1 are dropped; a size-0 window never reaches here.
ScatterPlan MakeScatterPlan(const IntArray& sizes, const IntArray& out_strides, const IntArray& src_strides) {
  const int nd = static_cast<int>(sizes.size());
  std::vector<int> dims;
  bool negative = false;
  for (int d = 0; d < nd; ++d) {
    if (sizes[d] == 1) continue;
    dims.push_back(d);
    negative |= out_strides[d] < 0;
  }
  std::vector<bool> serial(nd, false);
  if (negative) {
    for (int d : dims) serial[d] = true;  // no non-overlap argument: all in one thread
  } else {
    std::vector<int> order = dims;
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return out_strides[a] < out_strides[b]; });
    // extent: the span [0, extent) covered by the dims taken so far.
    int64_t extent = 1;
    size_t serial_end = 0;  // order[0, serial_end) is serial
    for (size_t k = 0; k < order.size(); ++k) {
      const int d = order[k];
      if (out_strides[d] < extent) {
        serial_end = k + 1;
        extent = 1;
        for (size_t j = 0; j < serial_end; ++j) extent += (sizes[order[j]] - 1) * out_strides[order[j]];
      } else {
        extent += (sizes[d] - 1) * out_strides[d];
      }
    }
    for (size_t j = 0; j < serial_end; ++j) serial[order[j]] = true;
  }
  ScatterPlan plan;
  for (int d = nd - 1; d >= 0; --d) {  // innermost first, so S is walked row-major
    if (sizes[d] == 1) continue;
    if (serial[d]) {
      plan.s_size[plan.ns] = sizes[d];
      plan.s_out[plan.ns] = out_strides[d];
      plan.s_src[plan.ns] = src_strides[d];
      plan.s_count *= sizes[d];
      ++plan.ns;
    } else {
      plan.p_size[plan.np] = sizes[d];
      plan.p_out[plan.np] = out_strides[d];
      plan.p_src[plan.np] = src_strides[d];
      plan.p_count *= sizes[d];
      ++plan.np;
    }
  }
  return plan;
}

// out points at the window's origin. See NOTE [ Deterministic strided scatter-add ].
template <typename T>
__global__ void ScatterAddKernel(ScatterPlan plan, const T* src, T* out) {
  using M = opmath_t<T>;
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < plan.p_count;
       p += int64_t(gridDim.x) * blockDim.x) {
    int64_t o = 0, s = 0, rem = p;
    for (int d = 0; d < plan.np; ++d) {
      const int64_t i = rem % plan.p_size[d];
      rem /= plan.p_size[d];
      o += i * plan.p_out[d];
      s += i * plan.p_src[d];
    }
    int64_t idx[backend::kMaxDims] = {};
    for (int64_t k = 0; k < plan.s_count; ++k) {
      out[o] = T(M(out[o]) + M(src[s]));
      for (int d = 0; d < plan.ns; ++d) {  // odometer step, innermost first
        o += plan.s_out[d];
        s += plan.s_src[d];
        if (++idx[d] < plan.s_size[d]) break;
        o -= idx[d] * plan.s_out[d];
        s -= idx[d] * plan.s_src[d];
        idx[d] = 0;
      }
    }
  }
}

void StridedScatterAddKernel(const KernelCall& c) {
  const Tensor& src = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Geometry& g = c.attrs.get<StridedScatterArgs>().window;
  if (out.numel() == 0) return;
  const int device = out.device().index;
  DeviceGuard guard(device);
  cudaStream_t stream = current_stream(device);
  // The output is freshly allocated and contiguous (as the CPU kernel assumes too).
  ANVIL_CUDA_CHECK(cudaMemsetAsync(out.data_ptr(), 0, static_cast<size_t>(out.nbytes()), stream));
  const int64_t nd = static_cast<int64_t>(g.sizes.size());
  ANVIL_INTERNAL_ASSERT(nd <= backend::kMaxDims && src.dim() <= nd, "strided_scatter_add: window of ", nd,
                        " dims for a source of ", src.dim());
  const int64_t window = std::accumulate(g.sizes.begin(), g.sizes.end(), int64_t{1}, std::multiplies<>());
  if (window == 0) return;
  IntArray src_strides(nd, 0);
  const int64_t lead = nd - src.dim();
  for (int64_t d = lead; d < nd; ++d) {
    if (src.size(d - lead) != 1) src_strides[d] = src.stride(d - lead);
  }
  const ScatterPlan plan = MakeScatterPlan(g.sizes, g.strides, src_strides);
  ANVIL_DISPATCH_NUMERIC(out.dtype(), "strided_scatter_add", [&] {
    using T = scalar_t;
    ScatterAddKernel<T>
        <<<GridFor(plan.p_count), kBlock, 0, stream>>>(plan, src.data_ptr<T>(), out.data_ptr<T>() + g.offset);
    ANVIL_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(Cat, CatKernel)
ANVIL_KERNEL_SLOT(StridedScatterAdd, StridedScatterAddKernel)

}  // namespace anvil::cuda
