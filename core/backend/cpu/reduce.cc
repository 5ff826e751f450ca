// CPU reductions. Every reduction is laid out as [outer, red, inner]:
//  - without a copy when the input is contiguous and the reduced dims form one block
//    (sum over dim 0 of a matrix becomes column accumulation: vectorised, no transpose);
//  - otherwise by permuting the reduced dims last and making that contiguous (inner = 1).
// Partial results are combined in a fixed order, so results do not depend on timing.
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>

#include "core/backend/common/reduce_layout.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/ops/functions.h"
#include "core/ops/functors.h"

namespace anvil::cpu {
namespace {

using Layout = backend::ReduceLayout;

// The no-copy [outer, red, inner] form when the kernel can walk columns (allow_inner) or the
// reduced block is innermost.
Layout MakeLayout(const Tensor& in, const IntArray& dims, bool allow_inner) {
  return backend::MakeReduceLayout(in, dims,
                                   [&](int64_t, int64_t, int64_t inner) { return allow_inner || inner == 1; });
}

// Sum of n contiguous values: 64 independent lanes per 4096-element block (eight vector
// accumulators hide the add latency), blocks accumulated in double.
template <typename T>
double SumContiguous(const T* x, int64_t n) {
  using M = opmath_t<T>;
  constexpr int kLanes = 64;
  if (n < kLanes) {
    // A short row (a softmax's classes): setting up and folding 64 lanes would cost more
    // than the row. Four lanes still break the add chain.
    M l[4] = {};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      for (int k = 0; k < 4; ++k) l[k] += M(x[i + k]);
    }
    for (; i < n; ++i) l[0] += M(x[i]);
    return static_cast<double>((l[0] + l[1]) + (l[2] + l[3]));
  }
  double total = 0;
  for (int64_t b = 0; b < n; b += 4096) {
    const int64_t e = std::min(n, b + 4096);
    M lanes[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) lanes[k] += M(x[i + k]);
    }
    M s = 0;
    for (; i < e; ++i) s += M(x[i]);
    for (int w = kLanes / 2; w >= 1; w /= 2) {  // pairwise combine
      for (int k = 0; k < w; ++k) lanes[k] += lanes[k + w];
    }
    total += static_cast<double>(s + lanes[0]);
  }
  return total;
}

// Row reduction with a parallel split inside the row when there are few rows.
template <typename T, typename RowFn>
void ForEachRow(const Layout& l, const RowFn& row) {
  parallel_for(0, l.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(l.red, 1)), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) row(o);
  });
}

enum class Kind { Sum, Mean, Prod, Amax, Amin, All, Any, Norm, Var, LogSumExp };

template <typename T, Kind K>
void Reduce(const Layout& l, const Tensor& out, const ReduceArgs& a) {
  using M = opmath_t<T>;
  const T* x = l.x.data_ptr<T>();
  const int64_t red = l.red, inner = l.inner;
  if constexpr (K == Kind::All || K == Kind::Any) {
    bool* o = out.data_ptr<bool>();
    parallel_for(0, l.outer * inner, 4096, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        const int64_t oi = k / inner, j = k % inner;
        bool acc = K == Kind::All;
        for (int64_t r = 0; r < red; ++r) {
          const bool v = static_cast<bool>(x[(oi * red + r) * inner + j]);
          acc = K == Kind::All ? (acc && v) : (acc || v);
        }
        o[k] = acc;
      }
    });
    return;
  } else {
    T* o = out.data_ptr<T>();
    if (inner > 1) {
      // Column accumulation: acc[j] over r, vectorised along j.
      parallel_for(0, l.outer, 1, [&](int64_t b, int64_t e) {
        std::vector<M> acc(inner);
        for (int64_t oi = b; oi < e; ++oi) {
          const T* base = x + oi * red * inner;
          for (int64_t j = 0; j < inner; ++j) acc[j] = M(base[j]);
          for (int64_t r = 1; r < red; ++r) {
            const T* row = base + r * inner;
            for (int64_t j = 0; j < inner; ++j) {
              const M v = M(row[j]);
              if constexpr (K == Kind::Sum || K == Kind::Mean)
                acc[j] += v;
              else if constexpr (K == Kind::Prod)
                acc[j] *= v;
              else if constexpr (K == Kind::Amax)
                acc[j] = (v > acc[j] || v != v) ? v : acc[j];
              else if constexpr (K == Kind::Amin)
                acc[j] = (v < acc[j] || v != v) ? v : acc[j];
            }
          }
          for (int64_t j = 0; j < inner; ++j) {
            M v = red == 0 ? M(K == Kind::Prod ? 1 : 0) : acc[j];
            if constexpr (K == Kind::Mean) v = v / M(red);
            o[oi * inner + j] = T(v);
          }
        }
      });
      return;
    }
    auto row_value = [&](const T* p, int64_t n) -> M {
      if constexpr (K == Kind::Sum || K == Kind::Mean) {
        if constexpr (std::is_floating_point_v<M>) {
          const double s = SumContiguous(p, n);
          return K == Kind::Mean ? M(s / static_cast<double>(n)) : M(s);
        } else {
          M s = 0;
          for (int64_t i = 0; i < n; ++i) s += M(p[i]);
          return s;
        }
      } else if constexpr (K == Kind::Prod) {
        M s = 1;
        for (int64_t i = 0; i < n; ++i) s *= M(p[i]);
        return s;
      } else if constexpr (K == Kind::Amax || K == Kind::Amin) {
        M best = M(p[0]);
        for (int64_t i = 1; i < n; ++i) {
          const M v = M(p[i]);
          if (v != v) return v;
          best = K == Kind::Amax ? (v > best ? v : best) : (v < best ? v : best);
        }
        return best;
      } else if constexpr (K == Kind::Norm) {
        const double pn = a.p;
        if (std::isinf(pn)) {
          double m = 0;
          for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(M(p[i]))));
          return M(m);
        }
        double s = 0;
        if (pn == 2) {
          for (int64_t i = 0; i < n; ++i) {
            const double v = static_cast<double>(M(p[i]));
            s += v * v;
          }
          return M(std::sqrt(s));
        }
        if (pn == 1) {
          for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(M(p[i])));
          return M(s);
        }
        for (int64_t i = 0; i < n; ++i) s += std::pow(std::fabs(static_cast<double>(M(p[i]))), pn);
        return M(std::pow(s, 1.0 / pn));
      } else if constexpr (K == Kind::Var) {
        double mean = 0;
        for (int64_t i = 0; i < n; ++i) mean += static_cast<double>(M(p[i]));
        mean /= static_cast<double>(n);
        double ss = 0;
        for (int64_t i = 0; i < n; ++i) {
          const double d = static_cast<double>(M(p[i])) - mean;
          ss += d * d;
        }
        const double denom = static_cast<double>(n) - a.correction;
        return M(denom <= 0 ? std::numeric_limits<double>::quiet_NaN() : ss / denom);
      } else {  // LogSumExp
        M m = M(p[0]);
        for (int64_t i = 1; i < n; ++i) m = M(p[i]) > m ? M(p[i]) : m;
        if (std::isinf(static_cast<double>(m))) return m;
        double s = 0;
        if constexpr (std::is_same_v<M, float>) {
          float lanes[16] = {};
          int64_t i = 0;
          for (; i + 16 <= n; i += 16) {
            for (int k = 0; k < 16; ++k) lanes[k] += fn::exp_f32(float(p[i + k]) - m);
          }
          for (; i < n; ++i) s += fn::exp_f32(float(p[i]) - m);
          for (int k = 0; k < 16; ++k) s += lanes[k];
        } else {
          for (int64_t i = 0; i < n; ++i) s += std::exp(static_cast<double>(M(p[i]) - m));
        }
        return M(static_cast<double>(m) + std::log(s));
      }
    };
    if (l.outer == 1 && (K == Kind::Sum || K == Kind::Mean) && red > 2 * kGrain) {
      // One long row: partial sums over fixed 64K-element blocks (whatever the thread
      // count), combined in block order, so the result is bitwise the same on any machine.
      constexpr int64_t kBlock = int64_t{1} << 16;
      const int64_t blocks = (red + kBlock - 1) / kBlock;
      std::vector<double> partial(blocks, 0.0);
      parallel_for(0, blocks, 1, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; ++t) {
          const int64_t s0 = t * kBlock, s1 = std::min(red, s0 + kBlock);
          partial[t] = SumContiguous(x + s0, s1 - s0);
        }
      });
      double s = 0;
      for (double v : partial) s += v;
      o[0] = T(M(K == Kind::Mean ? s / static_cast<double>(red) : s));
      return;
    }
    ForEachRow<T>(l, [&](int64_t oi) {
      if (red == 0) {
        M v = K == Kind::Prod ? M(1) : M(0);
        if constexpr (K == Kind::Mean || K == Kind::Var) v = std::numeric_limits<M>::quiet_NaN();
        if constexpr (K == Kind::LogSumExp) v = -std::numeric_limits<M>::infinity();
        o[oi] = T(v);
        return;
      }
      o[oi] = T(row_value(x + oi * red, red));
    });
  }
}

template <Kind K>
void ReduceKernel(const KernelCall& c) {
  const bool allow_inner = K != Kind::Norm && K != Kind::Var && K != Kind::LogSumExp;
  const ReduceArgs& args = c.attrs.get<ReduceArgs>();
  Layout l = MakeLayout(c.inputs[0], args.dims, allow_inner);
  const Tensor& out = c.outputs[0];
  if constexpr (K == Kind::All || K == Kind::Any) {
    ANVIL_DISPATCH_ALL(l.x.dtype(), "all/any", [&] { Reduce<scalar_t, K>(l, out, args); });
  } else if constexpr (K == Kind::Amax || K == Kind::Amin) {
    ANVIL_DISPATCH_ALL(l.x.dtype(), "amax/amin", [&] { Reduce<scalar_t, K>(l, out, args); });
  } else if constexpr (K == Kind::Mean || K == Kind::Norm || K == Kind::Var || K == Kind::LogSumExp) {
    ANVIL_DISPATCH_FLOATING(l.x.dtype(), "reduce", [&] { Reduce<scalar_t, K>(l, out, args); });
  } else {
    ANVIL_DISPATCH_NUMERIC(l.x.dtype(), "reduce", [&] { Reduce<scalar_t, K>(l, out, args); });
  }
}

// Arg-reduction over `red` rows of `inner` contiguous elements, for outer blocks [b, e).
// A function of its own, not a lambda body: inlined into the pool's std::function thunk the
// loop stayed scalar and branchy (measured 7x slower on random data).
template <typename T, bool IsMax, bool WantValues>
void ArgReduceInnerRows(const T* x, int64_t b, int64_t e, int64_t red, int64_t inner, int64_t* indices, T* values) {
  using M = opmath_t<T>;
  const auto best = std::make_unique<M[]>(static_cast<size_t>(inner));
  const auto where = std::make_unique<int64_t[]>(static_cast<size_t>(inner));
  M* bp = best.get();
  int64_t* wp = where.get();
  for (int64_t o = b; o < e; ++o) {
    const T* base = x + o * red * inner;
    for (int64_t j = 0; j < inner; ++j) {
      bp[j] = M(base[j]);
      wp[j] = 0;
    }
    for (int64_t r = 1; r < red; ++r) {
      const T* row = base + r * inner;
      for (int64_t j = 0; j < inner; ++j) {
        const M v = M(row[j]), bv = bp[j];
        // The first extreme wins; a NaN is the extreme and stays once found. Bitwise, not
        // short-circuit: branch-free, so the loop vectorises.
        const bool take = (bv == bv) & ((v != v) | (IsMax ? v > bv : v < bv));
        bp[j] = take ? v : bv;
        wp[j] = take ? r : wp[j];
      }
    }
    std::copy(wp, wp + inner, indices + o * inner);
    if constexpr (WantValues) {
      for (int64_t j = 0; j < inner; ++j) values[o * inner + j] = T(bp[j]);
    }
  }
}

// Max/min with the index of the first extreme element (NaN counts as the extreme). A reduced
// dim with contiguous elements after it (max over channels, pooling windows) is walked row by
// row across the inner run, so the compare-and-select vectorises and no transposed copy is made.
template <bool IsMax, bool WantValues>
void ArgReduceKernel(const KernelCall& c) {
  Layout l = MakeLayout(c.inputs[0], c.attrs.get<ReduceArgs>().dims, true);
  const Tensor& idx_out = c.outputs[WantValues ? 1 : 0];
  int64_t* oi_ptr = idx_out.data_ptr<int64_t>();
  if (l.inner > 1) {
    ANVIL_DISPATCH_ALL(l.x.dtype(), "argmax", [&] {
      using T = scalar_t;
      const T* x = l.x.data_ptr<T>();
      T* ov = WantValues ? c.outputs[0].data_ptr<T>() : nullptr;
      const int64_t red = l.red, inner = l.inner;
      parallel_for(
          0, l.outer, std::max<int64_t>(1, kGrain / std::max<int64_t>(red * inner, 1)),
          [&](int64_t b, int64_t e) { ArgReduceInnerRows<T, IsMax, WantValues>(x, b, e, red, inner, oi_ptr, ov); });
    });
    return;
  }
  ANVIL_DISPATCH_ALL(l.x.dtype(), "argmax", [&] {
    using T = scalar_t;
    using M = opmath_t<T>;
    const T* x = l.x.data_ptr<T>();
    T* ov = WantValues ? c.outputs[0].data_ptr<T>() : nullptr;
    ForEachRow<T>(l, [&](int64_t o) {
      const T* p = x + o * l.red;
      int64_t best = 0;
      M bv = M(p[0]);
      for (int64_t i = 1; i < l.red && bv == bv; ++i) {
        const M v = M(p[i]);
        if (v != v || (IsMax ? v > bv : v < bv)) {
          bv = v;
          best = i;
        }
      }
      oi_ptr[o] = best;
      if constexpr (WantValues) ov[o] = p[best];
    });
  });
}

// A scan's rows: the input with the scanned dim moved last and made contiguous, a buffer
// for the result in the same layout, the row length and count.
struct ScanRows {
  Tensor in, out;
  int64_t len = 0, rows = 0;
};
ScanRows PrepareScan(const KernelCall& c, const char* name) {
  const int64_t d = wrap_dim(c.attrs.get<DimArgs>().dim, std::max<int64_t>(c.inputs[0].dim(), 1), name);
  Tensor x = c.inputs[0].dim() == 0 ? c.inputs[0].reshape({1}) : c.inputs[0];
  ScanRows r;
  r.in = x.movedim(d, -1).contiguous();
  r.out = empty_like(r.in);
  r.len = r.in.size(-1);
  r.rows = r.len == 0 ? 0 : r.in.numel() / r.len;
  return r;
}
// The buffer back in the output's layout.
void FinishScan(const KernelCall& c, const ScanRows& r) {
  const int64_t d = wrap_dim(c.attrs.get<DimArgs>().dim, std::max<int64_t>(c.inputs[0].dim(), 1), "scan");
  CopyInto(c.outputs[0], r.out.movedim(-1, d).reshape(c.outputs[0].sizes()));
}

// Runs acc = step(acc, x_i) along each row from `init`, writing every running value, in the
// accumulation type Acc.
template <typename T, typename Acc, typename Step>
void Scan(const ScanRows& r, Acc init, Step step) {
  const T* in = r.in.data_ptr<T>();
  T* out = r.out.data_ptr<T>();
  const int64_t len = r.len;
  parallel_for(0, r.rows, 64, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      Acc acc = init;
      for (int64_t i = 0; i < len; ++i) {
        acc = step(acc, Acc(opmath_t<T>(in[row * len + i])));
        out[row * len + i] = T(opmath_t<T>(acc));
      }
    }
  });
}

void CumSumKernel(const KernelCall& c) {
  const ScanRows r = PrepareScan(c, "cumsum");
  ANVIL_DISPATCH_NUMERIC(r.in.dtype(), "cumsum", [&] {
    using M = opmath_t<scalar_t>;
    Scan<scalar_t, M>(r, M(0), [](M a, M x) { return a + x; });
  });
  FinishScan(c, r);
}

// The running product in PyTorch's CPU accumulation type (double for float32 and float64,
// float for the 16-bit floats, int64 for the integers the wrapper promoted).
void CumProdKernel(const KernelCall& c) {
  const ScanRows r = PrepareScan(c, "cumprod");
  ANVIL_DISPATCH_NUMERIC(r.in.dtype(), "cumprod", [&] {
    using M = opmath_t<scalar_t>;
    using Acc = std::conditional_t<std::is_same_v<scalar_t, float>, double, M>;
    Scan<scalar_t, Acc>(r, Acc(1), [](Acc a, Acc x) { return a * x; });
  });
  FinishScan(c, r);
}

// A running fn::LogAddExp along the dim, from -inf (the empty sum's log), in opmath_t.
void LogCumSumExpKernel(const KernelCall& c) {
  const ScanRows r = PrepareScan(c, "logcumsumexp");
  ANVIL_DISPATCH_FLOATING(r.in.dtype(), "logcumsumexp", [&] {
    using M = opmath_t<scalar_t>;
    Scan<scalar_t, M>(r, -std::numeric_limits<M>::infinity(), [](M a, M x) { return fn::LogAddExp(a, x); });
  });
  FinishScan(c, r);
}

}  // namespace

#define ANVIL_REDUCE_ROW(row, ...) ANVIL_KERNEL_SLOT(row, __VA_ARGS__)
#include "core/backend/reduce_rows.def"
#undef ANVIL_REDUCE_ROW

}  // namespace anvil::cpu
