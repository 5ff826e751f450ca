// CPU kernels for indexing: gather/scatter, index_select/index_add, advanced indexing
// (index / index_put), nonzero and sort.
//
// The common trick: re-window the indexed tensor so that it has the shape of the index
// (or result), with stride 0 along the indexed dims; one StridedLoop then walks result,
// re-windowed source and index together, and the index value times the source's stride
// is added to the pointer. Writes that may collide (scatter, accumulate) run serially so
// results are deterministic.
#include <algorithm>
#include <array>
#include <numeric>
#include <type_traits>

#include "core/backend/advanced_index.h"
#include "core/backend/common/index_plan.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/ops/functions.h"

namespace anvil::cpu {
namespace {

// Out of line: keeps the message formatting out of the hot loops that check indices.
[[noreturn]] __attribute__((noinline)) void ThrowOutOfBounds(int64_t i, int64_t size, int64_t dim) {
  throw IndexError(detail::StrCat("index ", i, " is out of bounds for dimension ", dim, " with size ", size));
}

inline int64_t WrapIndex(int64_t i, int64_t size, int64_t dim) {
  const int64_t w = i < 0 ? i + size : i;
  if (w < 0 || w >= size) [[unlikely]]
    ThrowOutOfBounds(i, size, dim);
  return w;
}

// gather/scatter/index_select/index_add take indices as they are: negative ones are
// errors, not "from the end" (only advanced indexing wraps, as in PyTorch), so e.g. an
// ignore label of -1 can never silently pick the last class.
inline int64_t CheckIndex(int64_t i, int64_t size, int64_t dim) {
  if (i < 0 || i >= size) [[unlikely]]
    ThrowOutOfBounds(i, size, dim);
  return i;
}

using backend::AsInt64;

// Copies self into out unless out is self (in-place form).
void InitFromSelf(const Tensor& self, const Tensor& out) {
  if (out.impl() != self.impl()) CopyInto(out, self);
}

// out[e] = window[e] moved `step` bytes per index along dim d, for every element e, the index
// (< size along d, checked) read from index[e]: gather and index_select, on windows that give
// every output element its own source row and index.
void GatherAlongDim(const Tensor& out, const Tensor& window, const Tensor& index, int64_t d, int64_t size, int64_t step,
                    const char* name) {
  ANVIL_DISPATCH_ALL(out.dtype(), name, [&] {
    StridedLoop<3> loop;
    loop.Build({&out, &window, &index});
    loop.ParallelRun([&](char** p, const int64_t* s, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = CheckIndex(*reinterpret_cast<const int64_t*>(p[2] + j * s[2]), size, d);
        *reinterpret_cast<scalar_t*>(p[0] + j * s[0]) = *reinterpret_cast<const scalar_t*>(p[1] + j * s[1] + i * step);
      }
    });
  });
}

void GatherKernel(const KernelCall& c) {
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const backend::DimWindow w = backend::MakeDimWindow(c.inputs[0], c.inputs[1], c.attrs.get<IndexArgs>().dim, "gather");
  GatherAlongDim(out, w.window, w.index, w.dim, w.size, w.step, "gather");
}

// out = self, then combine(&out[..idx..], src) for every source element in the loop's serial
// order (as PyTorch's CPU kernels): scatter, scatter_add and scatter_reduce differ only in
// `combine`, a generic lambda taking (scalar_t* dst, scalar_t v).
template <typename Combine>
void ScatterWith(const KernelCall& c, const char* name, Combine combine) {
  InitFromSelf(c.inputs[0], c.outputs[0]);
  const std::optional<backend::ScatterPlan> plan = backend::PlanScatter(c, name);
  if (!plan) return;
  const Tensor &idx = plan->out.index, &outr = plan->out.window, &srcr = plan->src_window;
  const int64_t d = plan->out.dim, size = plan->out.size, step = plan->out.step;
  ANVIL_DISPATCH_ALL(c.inputs[0].dtype(), name, [&] {
    StridedLoop<3> loop;
    loop.Build({&outr, &srcr, &idx});
    loop.Run(0, loop.numel(), [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = CheckIndex(*reinterpret_cast<const int64_t*>(p[2] + j * s[2]), size, d);
        combine(reinterpret_cast<scalar_t*>(p[0] + j * s[0] + i * step),
                *reinterpret_cast<const scalar_t*>(p[1] + j * s[1]));
      }
    });
  });
}

// scatter / scatter_add: out = self; out[..idx..] (+)= src (or value when keepdim).
template <bool Add>
void ScatterKernel(const KernelCall& c) {
  ScatterWith(c, "scatter", [](auto* dst, auto v) {
    using T = std::remove_reference_t<decltype(*dst)>;
    if constexpr (!Add) {
      *dst = v;
    } else if constexpr (std::is_same_v<T, bool>) {
      *dst = *dst || v;
    } else {
      *dst = T(opmath_t<T>(*dst) + opmath_t<T>(v));
    }
  });
}

// scatter_reduce's step (attrs.mode), chosen once per call, not per element. A NaN source
// wins amax and amin, and so does a NaN already there.
void ScatterReduceKernel(const KernelCall& c) {
  const auto extremum = [](bool is_max) {
    return [is_max](auto* dst, auto v) {
      using T = std::remove_reference_t<decltype(*dst)>;
      if constexpr (std::is_same_v<T, bool>) {
        *dst = is_max ? (*dst || v) : (*dst && v);
      } else {
        using M = opmath_t<T>;
        const M a = M(*dst), b = M(v);
        if (b != b || (a == a && (is_max ? b > a : b < a))) *dst = v;
      }
    };
  };
  switch (c.attrs.get<ScatterArgs>().mode) {
    case kScatterSum:
      return ScatterKernel<true>(c);
    case kScatterProd:
      return ScatterWith(c, "scatter_reduce", [](auto* dst, auto v) {
        using T = std::remove_reference_t<decltype(*dst)>;
        if constexpr (std::is_same_v<T, bool>) {
          *dst = *dst && v;
        } else {
          *dst = T(opmath_t<T>(*dst) * opmath_t<T>(v));
        }
      });
    case kScatterAmax:
      return ScatterWith(c, "scatter_reduce", extremum(true));
    default:
      return ScatterWith(c, "scatter_reduce", extremum(false));
  }
}

void IndexSelectKernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor idx = AsInt64(c.inputs[1]).reshape({-1});
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  if (x.dim() == 0) {
    CheckIndex(idx.data_ptr<int64_t>()[0], 1, 0);
    InitFromSelf(x, out);
    return;
  }
  const int64_t d = wrap_dim(c.attrs.get<IndexArgs>().dim, x.dim(), "index_select");
  const int64_t size = x.size(d);
  const int64_t* ip = idx.contiguous().data_ptr<int64_t>();
  if (d == 0 && x.is_contiguous()) {
    // Row copies.
    const int64_t row_bytes = x.numel() / std::max<int64_t>(size, 1) * x.element_size();
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    parallel_for(0, idx.numel(), std::max<int64_t>(1, kGrain * 4 / std::max<int64_t>(row_bytes, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t k = b; k < e; ++k) {
                     std::memcpy(dst + k * row_bytes, src + CheckIndex(ip[k], size, 0) * row_bytes, row_bytes);
                   }
                 });
    return;
  }
  IntArray st = x.strides();
  st[d] = 0;
  Tensor xr = RawWindow(x, out.sizes(), st, x.storage_offset());
  IntArray ist(out.dim(), 0);
  ist[d] = 1;
  Tensor idxc = idx.contiguous();
  Tensor ir = RawWindow(idxc, out.sizes(), ist, idxc.storage_offset());
  GatherAlongDim(out, xr, ir, d, size, x.stride(d) * x.element_size(), "index_select");
}

void IndexAddKernel(const KernelCall& c) {
  InitFromSelf(c.inputs[0], c.outputs[0]);
  const auto plan = backend::PlanIndexAdd(c);
  if (!plan) return;
  const double alpha = c.attrs.get<IndexArgs>().alpha;
  ANVIL_DISPATCH_NUMERIC(c.inputs[0].dtype(), "index_add", [&] {
    using M = opmath_t<scalar_t>;
    StridedLoop<3> loop;
    loop.Build({&plan->out_window, &plan->src, &plan->idx_window});
    loop.Run(0, loop.numel(), [&](char** p, const int64_t* sd, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        const int64_t i = CheckIndex(*reinterpret_cast<const int64_t*>(p[2] + j * sd[2]), plan->size, plan->dim);
        auto* dst = reinterpret_cast<scalar_t*>(p[0] + j * sd[0] + i * plan->step);
        *dst = scalar_t(M(*dst) + M(alpha) * M(*reinterpret_cast<const scalar_t*>(p[1] + j * sd[1])));
      }
    });
  });
}

using AdvIndex = AdvancedIndexPlan;  // core/backend/advanced_index.h

template <int K, bool Put, typename T>
void AdvLoop(const AdvIndex& plan, const IntArray& idims, bool accumulate) {
  std::array<const Tensor*, 2 + K> ops;
  ops[0] = &plan.result_view;
  ops[1] = &plan.self_window;
  for (int k = 0; k < K; ++k) ops[2 + k] = &plan.idx[k];
  StridedLoop<2 + K> loop;
  loop.Build(ops);
  // The plan's per-dim figures as plain arrays, captured by value: the inner loop reads them
  // per element, and an IntArray's operator[] (inline or heap storage?) is not hoisted out of it.
  std::array<int64_t, K> sizes, strides, dims;
  for (int k = 0; k < K; ++k) {
    sizes[k] = plan.self_sizes[k];
    strides[k] = plan.self_strides[k];
    dims[k] = idims[k];
  }
  auto body = [&, sizes, strides, dims](char** p, const int64_t* s, int64_t n) {
    for (int64_t j = 0; j < n; ++j) {
      int64_t off = 0;
      for (int k = 0; k < K; ++k) {
        const int64_t i = WrapIndex(*reinterpret_cast<const int64_t*>(p[2 + k] + j * s[2 + k]), sizes[k], dims[k]);
        off += i * strides[k];
      }
      T* r = reinterpret_cast<T*>(p[0] + j * s[0]);
      T* v = reinterpret_cast<T*>(p[1] + j * s[1] + off);
      if constexpr (Put) {
        if (accumulate) {
          if constexpr (std::is_same_v<T, bool>)
            *v = *v || *r;
          else
            *v = T(opmath_t<T>(*v) + opmath_t<T>(*r));
        } else {
          *v = *r;
        }
      } else {
        *r = *v;
      }
    }
  };
  if constexpr (Put)
    loop.Run(0, loop.numel(), body);
  else
    loop.ParallelRun(body);
}

template <bool Put>
void AdvDispatch(const AdvIndex& plan, const IntArray& idims, ScalarType dt, bool accumulate) {
  ANVIL_DISPATCH_ALL(dt, "index", [&] {
    switch (plan.idx.size()) {
      case 1:
        return AdvLoop<1, Put, scalar_t>(plan, idims, accumulate);
      case 2:
        return AdvLoop<2, Put, scalar_t>(plan, idims, accumulate);
      case 3:
        return AdvLoop<3, Put, scalar_t>(plan, idims, accumulate);
      case 4:
        return AdvLoop<4, Put, scalar_t>(plan, idims, accumulate);
      case 5:
        return AdvLoop<5, Put, scalar_t>(plan, idims, accumulate);
      case 6:
        return AdvLoop<6, Put, scalar_t>(plan, idims, accumulate);
      default:
        throw NotImplementedError("advanced indexing with more than 6 index tensors");
    }
  });
}

void IndexKernel(const KernelCall& c) {
  const Tensor& self = c.inputs[0];
  std::vector<Tensor> idx(c.inputs.begin() + 1, c.inputs.end());
  if (c.outputs[0].numel() == 0) return;
  AdvIndex plan = PlanAdvancedIndex(self, idx, c.attrs.get<AdvancedIndexArgs>().indexed_dims, c.outputs[0]);
  AdvDispatch<false>(plan, c.attrs.get<AdvancedIndexArgs>().indexed_dims, self.dtype(), false);
}

// inputs: self, indices..., values (already broadcast to the indexing result's shape).
void IndexPutKernel(const KernelCall& c) {
  const Tensor& self = c.inputs[0];
  const Tensor& values = c.inputs.back();
  std::vector<Tensor> idx(c.inputs.begin() + 1, c.inputs.end() - 1);
  const Tensor& out = c.outputs[0];
  InitFromSelf(self, out);
  if (values.numel() == 0) return;
  AdvIndex plan = PlanAdvancedIndex(out, idx, c.attrs.get<AdvancedIndexArgs>().indexed_dims, values);
  AdvDispatch<true>(plan, c.attrs.get<AdvancedIndexArgs>().indexed_dims, self.dtype(),
                    c.attrs.get<AdvancedIndexArgs>().accumulate);
}

void NonzeroKernel(const KernelCall& c) {
  const Tensor x = c.inputs[0].contiguous();
  const int64_t nd = x.dim();
  std::vector<int64_t> hits;
  ANVIL_DISPATCH_ALL(x.dtype(), "nonzero", [&] {
    const scalar_t* p = x.data_ptr<scalar_t>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      if (static_cast<opmath_t<scalar_t>>(p[i]) != opmath_t<scalar_t>(0)) hits.push_back(i);
    }
  });
  Tensor out = empty({static_cast<int64_t>(hits.size()), nd}, TensorOptions(kInt64));
  int64_t* o = out.data_ptr<int64_t>();
  for (size_t h = 0; h < hits.size(); ++h) {
    int64_t rem = hits[h];
    for (int64_t d = nd - 1; d >= 0; --d) {
      o[h * nd + d] = rem % x.size(d);
      rem /= x.size(d);
    }
  }
  c.outputs.push_back(out);
}

void SortKernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const bool desc = c.attrs.get<SortArgs>().descending;
  Tensor xs = x.dim() == 0 ? x.reshape({1}) : x;
  const int64_t d = wrap_dim(c.attrs.get<SortArgs>().dim, xs.dim(), "sort");
  Tensor xm = xs.movedim(d, -1).contiguous();
  const int64_t len = xm.size(-1);
  const int64_t rows = len == 0 ? 0 : xm.numel() / len;
  Tensor vals = empty_like(xm);
  Tensor inds = empty(xm.sizes(), TensorOptions(kInt64));
  ANVIL_DISPATCH_ALL(x.dtype(), "sort", [&] {
    using M = opmath_t<scalar_t>;
    const scalar_t* in = xm.data_ptr<scalar_t>();
    scalar_t* vo = vals.data_ptr<scalar_t>();
    int64_t* io = inds.data_ptr<int64_t>();
    parallel_for(0, rows, 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const scalar_t* row = in + r * len;
        int64_t* ir = io + r * len;
        std::iota(ir, ir + len, 0);
        // NaN sorts as the largest value (PyTorch): last ascending, first descending.
        std::stable_sort(ir, ir + len, [&](int64_t i, int64_t j) {
          const M a = M(row[i]), bb = M(row[j]);
          const bool an = a != a, bn = bb != bb;
          if (desc) return (an && !bn) || (!an && !bn && a > bb);
          return (!an && bn) || (!an && !bn && a < bb);
        });
        for (int64_t k = 0; k < len; ++k) vo[r * len + k] = row[ir[k]];
      }
    });
  });
  for (int k = 0; k < 2; ++k) {
    CopyInto(c.outputs[k], (k == 0 ? vals : inds).movedim(-1, d).reshape(c.outputs[k].sizes()));
  }
}

}  // namespace

#define ANVIL_INDEX_ROW(row, ...) ANVIL_KERNEL_SLOT(row, __VA_ARGS__)
#include "core/backend/index_rows.def"
#undef ANVIL_INDEX_ROW
ANVIL_KERNEL_SLOT(Nonzero, NonzeroKernel)
ANVIL_KERNEL_SLOT(Sort, SortKernel)

}  // namespace anvil::cpu
