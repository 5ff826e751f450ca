// CPU kernels for cat, softmax/log_softmax and the strided scatter-add that view backward
// uses.
#include <algorithm>
#include <cmath>

#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/backend/shape_rows.h"
#include "core/ops/functions.h"
#include "core/ops/functors.h"

namespace anvil::cpu {
namespace {

void CatKernel(const KernelCall& c) { shape_rows::Cat(c.outputs[0], c.inputs, c.attrs.get<DimArgs>().dim, CopyInto); }

// Rows shorter than a vector (a classifier's 10 logits) leave every per-row loop scalar and
// make exp the cost (~40 ns a row at 10 classes). These paths take a block of rows at once:
// the shifted logits of the whole block lie contiguous in a buffer, so exp runs as one
// vectorised pass over block * len elements, and only the max, sum and log stay per row.
constexpr int64_t kShortRow = 16;
constexpr int64_t kShortRowBlock = 128;

template <bool Log, typename T, typename M>
void SoftmaxShortRows(const T* in, T* o, int64_t len, int64_t r0, int64_t r1) {
  M buf[kShortRow * kShortRowBlock];
  M shift[kShortRowBlock];
  for (int64_t b = r0; b < r1; b += kShortRowBlock) {
    const int64_t nr = std::min(kShortRowBlock, r1 - b);
    const T* x = in + b * len;
    for (int64_t r = 0; r < nr; ++r) {
      const T* row = x + r * len;
      M mx = M(row[0]);
      for (int64_t j = 1; j < len; ++j) mx = M(row[j]) > mx ? M(row[j]) : mx;
      if (std::isinf(static_cast<double>(mx)) && mx < 0) mx = 0;  // all -inf: avoid inf - inf
      shift[r] = mx;
      for (int64_t j = 0; j < len; ++j) buf[r * len + j] = M(row[j]) - mx;
    }
    const int64_t n = nr * len;
    for (int64_t i = 0; i < n; ++i) buf[i] = fn::Exp(buf[i]);
    T* out = o + b * len;
    for (int64_t r = 0; r < nr; ++r) {
      const M* e = buf + r * len;
      M sum = 0;
      for (int64_t j = 0; j < len; ++j) sum += e[j];
      if constexpr (Log) {
        const M lse = shift[r] + std::log(sum);
        for (int64_t j = 0; j < len; ++j) out[r * len + j] = T(M(x[r * len + j]) - lse);
      } else {
        const M inv = M(1) / sum;
        for (int64_t j = 0; j < len; ++j) out[r * len + j] = T(e[j] * inv);
      }
    }
  }
}

// log_softmax's gradient g - exp(y) * sum(g) over short rows: exp(y) for a block of rows
// in one vectorised pass (softmax's y * (g - sum(g * y)) has no exp and needs no block).
template <typename T, typename M>
void LogSoftmaxGradShortRows(const T* pg, const T* py, T* po, int64_t len, int64_t r0, int64_t r1) {
  M ey[kShortRow * kShortRowBlock];
  for (int64_t b = r0; b < r1; b += kShortRowBlock) {
    const int64_t nr = std::min(kShortRowBlock, r1 - b);
    const int64_t n = nr * len;
    const T* y = py + b * len;
    for (int64_t i = 0; i < n; ++i) ey[i] = fn::Exp(M(y[i]));
    const T* g = pg + b * len;
    T* out = po + b * len;
    for (int64_t r = 0; r < nr; ++r) {
      M s = 0;
      for (int64_t j = 0; j < len; ++j) s += M(g[r * len + j]);
      for (int64_t j = 0; j < len; ++j) out[r * len + j] = T(M(g[r * len + j]) - ey[r * len + j] * s);
    }
  }
}

template <bool Log>
void SoftmaxKernel(const KernelCall& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  if (x.numel() == 0) return;
  const shape_rows::SoftmaxRows layout(x, out, c.attrs.get<DimArgs>().dim, Log ? "log_softmax" : "softmax");
  const Tensor& xm = layout.in;
  const Tensor& om = layout.out;
  const int64_t len = layout.len, rows = layout.rows;
  ANVIL_DISPATCH_FLOATING(x.dtype(), "softmax", [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    const T* in = xm.data_ptr<T>();
    T* o = om.data_ptr<T>();
    if (len < kShortRow) {
      parallel_for(0, rows, std::max<int64_t>(1, kGrain / len),
                   [&](int64_t b, int64_t e) { SoftmaxShortRows<Log, T, M>(in, o, len, b, e); });
      return;
    }
    parallel_for(0, rows, std::max<int64_t>(1, kGrain / len), [&](int64_t b, int64_t e) {
      std::vector<M> buf(len);
      for (int64_t r = b; r < e; ++r) {
        const T* row = in + r * len;
        T* orow = o + r * len;
        // Max in 16 lanes (vectorises; a NaN anywhere propagates through the exp pass).
        M mlanes[16];
        for (int k = 0; k < 16; ++k) mlanes[k] = M(row[0]);
        int64_t j = 0;
        for (; j + 16 <= len; j += 16) {
          for (int k = 0; k < 16; ++k) mlanes[k] = M(row[j + k]) > mlanes[k] ? M(row[j + k]) : mlanes[k];
        }
        M mx = mlanes[0];
        for (int k = 1; k < 16; ++k) mx = mlanes[k] > mx ? mlanes[k] : mx;
        for (; j < len; ++j) mx = M(row[j]) > mx ? M(row[j]) : mx;
        if (std::isinf(static_cast<double>(mx)) && mx < 0) mx = 0;  // all -inf: avoid inf - inf
        M lanes[16] = {};
        int64_t i = 0;
        for (; i + 16 <= len; i += 16) {
          for (int k = 0; k < 16; ++k) {
            const M ev = fn::Exp(M(row[i + k]) - mx);
            buf[i + k] = ev;
            lanes[k] += ev;
          }
        }
        M sum = 0;
        for (; i < len; ++i) {
          buf[i] = fn::Exp(M(row[i]) - mx);
          sum += buf[i];
        }
        for (int k = 0; k < 16; ++k) sum += lanes[k];
        if constexpr (Log) {
          const M lse = mx + std::log(sum);
          for (int64_t k = 0; k < len; ++k) orow[k] = T(M(row[k]) - lse);
        } else {
          const M inv = M(1) / sum;
          for (int64_t k = 0; k < len; ++k) orow[k] = T(buf[k] * inv);
        }
      }
    });
  });
  layout.finish(out, CopyInto);
}

// The gradient of softmax (y * (g - sum(g * y))) or log_softmax (g - exp(y) * sum(g)) over
// rows of (g, y), with the forward kernel's row layout.
template <bool Log>
void SoftmaxBackwardKernel(const KernelCall& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& out = c.outputs[0];
  if (g.numel() == 0) return;
  const char* name = Log ? "log_softmax_backward" : "softmax_backward";
  const shape_rows::SoftmaxGradRows layout(g, c.inputs[1], out, c.attrs.get<DimArgs>().dim, name);
  const int64_t len = layout.len, rows = layout.rows;
  ANVIL_DISPATCH_FLOATING(g.dtype(), name, [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    const T* pg = layout.in.data_ptr<T>();
    const T* py = layout.y.data_ptr<T>();
    T* po = layout.out.data_ptr<T>();
    if (Log && len < kShortRow) {
      parallel_for(0, rows, std::max<int64_t>(1, kGrain / len),
                   [&](int64_t b, int64_t e) { LogSoftmaxGradShortRows<T, M>(pg, py, po, len, b, e); });
      return;
    }
    parallel_for(0, rows, std::max<int64_t>(1, kGrain / len), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* gr = pg + r * len;
        const T* yr = py + r * len;
        T* orow = po + r * len;
        M lanes[8] = {};  // independent partial sums: the adds do not wait on each other
        int64_t j = 0;
        for (; j + 8 <= len; j += 8) {
          for (int k = 0; k < 8; ++k) lanes[k] += Log ? M(gr[j + k]) : M(gr[j + k]) * M(yr[j + k]);
        }
        for (; j < len; ++j) lanes[0] += Log ? M(gr[j]) : M(gr[j]) * M(yr[j]);
        const M s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
        for (int64_t k = 0; k < len; ++k) {
          orow[k] = Log ? T(M(gr[k]) - fn::Exp(M(yr[k])) * s) : T(M(yr[k]) * (M(gr[k]) - s));
        }
      }
    });
  });
  layout.finish(out, CopyInto);
}

// out = zeros(sizes); out.as_strided(window) += src  (serial: windows overlap).
void StridedScatterAddKernel(const KernelCall& c) {
  const Tensor& src = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Geometry& g = c.attrs.get<StridedScatterArgs>().window;
  ANVIL_DISPATCH_NUMERIC(out.dtype(), "strided_scatter_add", [&] {
    std::fill(out.data_ptr<scalar_t>(), out.data_ptr<scalar_t>() + out.numel(), scalar_t(0));
    if (src.numel() == 0) return;  // an empty window adds nothing (and its zero sizes must not reach the loop)
    Tensor w = RawWindow(out, g.sizes, g.strides, out.storage_offset() + g.offset);
    StridedLoop<2> loop;
    loop.Build({&w, &src});
    loop.Run(0, loop.numel(), [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t j = 0; j < n; ++j) {
        auto* dst = reinterpret_cast<scalar_t*>(p[0] + j * s[0]);
        *dst = scalar_t(opmath_t<scalar_t>(*dst) +
                        opmath_t<scalar_t>(*reinterpret_cast<const scalar_t*>(p[1] + j * s[1])));
      }
    });
  });
}

}  // namespace

ANVIL_KERNEL_SLOT(Cat, CatKernel)
ANVIL_KERNEL_SLOT(Softmax, SoftmaxKernel<false>)
ANVIL_KERNEL_SLOT(LogSoftmax, SoftmaxKernel<true>)
ANVIL_KERNEL_SLOT(SoftmaxBackward, SoftmaxBackwardKernel<false>)
ANVIL_KERNEL_SLOT(LogSoftmaxBackward, SoftmaxBackwardKernel<true>)
ANVIL_KERNEL_SLOT(StridedScatterAdd, StridedScatterAddKernel)

}  // namespace anvil::cpu
