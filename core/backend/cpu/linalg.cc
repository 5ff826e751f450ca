// Matrix products on the GEMM that core/backend/cpu/gemm.h chooses for this CPU (float32)
// and OpenBLAS (float64, matrix-vector products). Every BLAS call is single-threaded and
// Anvil's pool splits the work (rows of C, or the batch): two thread pools on two cores
// would oversubscribe them and make small-model training several times slower (measured;
// see docs/design.md, "Machine facts").
#include <algorithm>

#include "core/backend/common/matmul_shape.h"
#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/blas_library.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/loops.h"
#include "core/backend/cpu/onednn_primitives.h"
#include "core/ops/functions.h"
#include "core/ops/functors.h"

namespace anvil::cpu {
namespace {

// Batch slice `i` of a 3-D operand (a raw window: safe on pool threads).
Tensor BatchSlice(const Tensor& t, int64_t i) {
  return RawWindow(t, {t.size(1), t.size(2)}, {t.stride(1), t.stride(2)}, t.storage_offset() + i * t.stride(0));
}

struct MatArg {
  Tensor t;  // keeps a contiguous copy alive when one was needed
  bool trans;
  int64_t ld;
};

// Describes a 2-D (or one batch slice of 3-D) operand for BLAS without copying when its
// strides are row- or column-major.
MatArg AsBlas(const Tensor& m) {
  const int64_t nd = m.dim();
  const int64_t rows = m.size(nd - 2), cols = m.size(nd - 1);
  const int64_t s0 = m.stride(nd - 2), s1 = m.stride(nd - 1);
  if (s1 == 1 && (s0 >= std::max<int64_t>(cols, 1) || rows == 1)) {
    return {m, false, std::max<int64_t>(rows == 1 ? cols : s0, 1)};
  }
  if (s0 == 1 && (s1 >= std::max<int64_t>(rows, 1) || cols == 1)) {
    return {m, true, std::max<int64_t>(cols == 1 ? rows : s1, 1)};
  }
  Tensor c = m.contiguous();
  return {c, false, std::max<int64_t>(cols, 1)};
}

// C = A B (beta 0) or C += A B (beta 1: C holds a linear layer's bias rows), as gemm() computes
// it but through a kernel chosen beforehand: the row blocks of one product split over the
// pool all run the kernel chosen for the whole product, so its bits never depend on the
// thread count (a block's size alone could pick another kernel: gemm.cc's small products).
template <typename T>
void GemmBlock(GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm_with(kernel, ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  } else {
    gemm<T>(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
  }
}

// What a linear layer adds around its product, applied by the thread that computes each
// block of output rows while they are in its cache: the bias seeds the rows before the GEMM
// accumulates onto them (beta = 1), and linear_relu's relu runs on them after. A plain
// product has neither.
template <typename T>
struct Epilogue {
  const T* bias = nullptr;  // [n], or none
  bool relu = false;

  // Seeds columns [j0, j1) of one output row; returns the beta the product then needs.
  T seed_columns(T* row, int64_t j0, int64_t j1) const {
    if (bias == nullptr) return T(0);
    std::copy(bias + j0, bias + j1, row + j0);
    return T(1);
  }
  // Seeds rows [r0, r1) of C[., n]; returns the beta the GEMM then needs.
  T seed(T* c, int64_t r0, int64_t r1, int64_t n) const {
    for (int64_t r = r0; r < r1; ++r) seed_columns(c + r * n, 0, n);
    return bias == nullptr ? T(0) : T(1);
  }
  // The relu (the relu kernel's functor: NaN stays NaN) over `count` values written last.
  void finish(T* c, int64_t count) const {
    if (!relu) return;
    const fn::ReluF f;
    for (int64_t i = 0; i < count; ++i) c[i] = f(c[i]);
  }
};

// c[n] = a[k] B[k, n] for one row (batch-1 inference through Linear): a matrix-vector
// product, which OpenBLAS's gemm handles poorly at m = 1 (measured ~7x slower than gemv on
// a 4096 x 4096 layer); the n outputs are split over the pool, each range a gemv of its own.
template <typename T>
void GemvParallel(const MatArg& B, const T* a, const T* b, const Epilogue<T>& ep, T* c, int64_t n, int64_t k) {
  auto range = [&](int64_t j0, int64_t j1) {
    const T beta = ep.seed_columns(c, j0, j1);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const blas::OpenBlas& lib = blas::openblas();
      const auto gemv = [&](auto... args) {
        if constexpr (std::is_same_v<T, float>) {
          lib.sgemv(args...);
        } else {
          lib.dgemv(args...);
        }
      };
      if (!B.trans) {  // B is k x n row-major: c = B^T a over columns j0..j1
        gemv(blas::kRowMajor, blas::kTrans, static_cast<int>(k), static_cast<int>(j1 - j0), T(1), b + j0,
             static_cast<int>(B.ld), a, 1, beta, c + j0, 1);
      } else {  // B^T is stored n x k row-major (a Linear weight): c = W a over rows j0..j1
        gemv(blas::kRowMajor, blas::kNoTrans, static_cast<int>(j1 - j0), static_cast<int>(k), T(1), b + j0 * B.ld,
             static_cast<int>(B.ld), a, 1, beta, c + j0, 1);
      }
      ep.finish(c + j0, j1 - j0);
    }
  };
  if (n * k < (int64_t{1} << 18) || in_parallel_region()) {
    range(0, n);
    return;
  }
  parallel_for(0, n, std::max<int64_t>(64, n / (4 * get_num_threads())), range);
}

// C[m,n] = A[m,k] B[k,n] with the epilogue's bias and relu, rows of C split over the pool
// when the product is large.
template <typename T>
void GemmParallel(const MatArg& A, const MatArg& B, const T* a, const T* b, const Epilogue<T>& ep, T* c, int64_t m,
                  int64_t n, int64_t k) {
  if (k == 0) {
    if (ep.seed(c, 0, m, n) == T(0)) std::fill(c, c + m * n, T(0));
    ep.finish(c, m * n);
    return;
  }
  if (m == 1 && (!A.trans || k == 1)) {  // one contiguous row of A
    GemvParallel<T>(B, a, b, ep, c, n, k);
    return;
  }
  const int64_t flops = m * n * k;
  const int threads = get_num_threads();
  if (threads <= 1 || flops < kGemmSplitWork || m < 2 * threads || in_parallel_region()) {
    const T beta = ep.seed(c, 0, m, n);
    gemm<T>(A.trans, B.trans, m, n, k, a, A.ld, b, B.ld, beta, c, n);
    ep.finish(c, m * n);
    return;
  }
  const int64_t step = (m + threads - 1) / threads;
  const GemmKernel kernel = gemm_kernel_for(m, n, k);
  parallel_for(0, threads, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int64_t r0 = t * step, r1 = std::min(m, r0 + step);
      if (r0 >= r1) continue;
      const T* a_rows = !A.trans ? a + r0 * A.ld : a + r0;
      const T beta = ep.seed(c, r0, r1, n);
      GemmBlock<T>(kernel, A.trans, B.trans, r1 - r0, n, k, a_rows, A.ld, b, B.ld, beta, c + r0 * n, n);
      ep.finish(c + r0 * n, (r1 - r0) * n);
    }
  });
}

template <typename T>
void NaiveMatmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  // Integer and 16-bit float fallback (16-bit floats go through float32 in MmKernel).
  const Tensor ac = a.contiguous(), bc = b.contiguous();
  const int64_t batch = out.dim() == 3 ? out.size(0) : 1;
  const int64_t m = out.size(-2), n = out.size(-1), k = a.size(-1);
  const T* pa = ac.data_ptr<T>();
  const T* pb = bc.data_ptr<T>();
  T* pc = out.data_ptr<T>();
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        opmath_t<T> s = 0;
        for (int64_t p = 0; p < k; ++p)
          s += opmath_t<T>(pa[(bi * m + i) * k + p]) * opmath_t<T>(pb[(bi * k + p) * n + j]);
        pc[(bi * m + i) * n + j] = T(s);
      }
    }
  }
}

// C[m, n] = A[m, k] B[k, n] (+ bias[n], then relu) for bfloat16 operands on the AVX-512-BF16
// kernel: products accumulated in float32, the bias and relu applied in float32, one rounding
// to bfloat16 per output (as PyTorch's CPU bfloat16 products do). The operands are read
// through their strides (any layout: the kernel packs them), so a transposed weight or
// gradient is never copied. Rows of C are split over the pool when the product is large.
void Bf16GemmParallel(const Tensor& a, const Tensor& b, const Tensor& bias, bool relu, uint16_t* c, int64_t m,
                      int64_t n, int64_t k) {
  const auto* pa = static_cast<const uint16_t*>(a.data_ptr());
  const auto* pb = static_cast<const uint16_t*>(b.data_ptr());
  std::vector<float> bias_f32;
  if (bias.defined()) {
    const Tensor bc = bias.contiguous();
    const auto* bb = static_cast<const uint16_t*>(bc.data_ptr());
    bias_f32.resize(static_cast<size_t>(n));
    bf16_to_float(bb, bias_f32.data(), n);
  }
  const int64_t a_rs = a.stride(0), a_cs = a.stride(1), b_rs = b.stride(0), b_cs = b.stride(1);
  const int threads = get_num_threads();
  const bool split = threads > 1 && m * n * k >= kGemmSplitWork && m >= 2 * threads && !in_parallel_region();
  if (k > 0 && bf16_gemm_takes_onednn(m, n, k, a_rs, a_cs, b_rs, b_cs)) {
    // oneDNN rounds to bfloat16 itself (no float32 pass over C) and splits a large product
    // over the pool's threads in one call, packing B once: the two halves of a row split
    // each packed all of B (2048^3 on two threads: docs/cpu.md, "bf16 products").
    onednn::bf16_matmul_rounded(m, n, k, pa, a_rs, a_cs, pb, b_rs, b_cs, bias_f32.empty() ? nullptr : bias_f32.data(),
                                relu, c, n, split ? threads : 1);
    return;
  }
  auto rows = [&](int64_t r0, int64_t r1) {
    if (r0 >= r1) return;
    thread_local std::vector<float> acc;  // reused: fresh pages cost more than the product
    acc.resize(static_cast<size_t>((r1 - r0) * n));
    float beta = 0.0f;
    if (!bias_f32.empty()) {
      for (int64_t r = 0; r < r1 - r0; ++r) std::copy(bias_f32.begin(), bias_f32.end(), acc.begin() + r * n);
      beta = 1.0f;
    }
    bf16_gemm(r1 - r0, n, k, pa + r0 * a_rs, a_rs, a_cs, pb, b_rs, b_cs, beta, acc.data(), n);
    if (relu) {
      const fn::ReluF f;
      for (float& v : acc) v = f(v);
    }
    float_to_bf16(acc.data(), c + r0 * n, (r1 - r0) * n);
  };
  if (!split) {
    rows(0, m);
    return;
  }
  const int64_t step = (m + threads - 1) / threads;
  parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) rows(t * step, std::min(m, (t + 1) * step));
  });
}

void MatmulKernel(const KernelCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor& out = c.outputs[0];
  const backend::MatmulShape shape = backend::MakeMatmulShape(c);
  const bool batched = shape.batched;
  const int64_t batch = shape.batch, m = shape.m, n = shape.n, k = shape.k;
  if (out.numel() == 0) return;
  const ScalarType dt = a.dtype();
  if (dt == kBFloat16 && b.dtype() == kBFloat16 && bf16_gemm_available()) {
    auto* pc = static_cast<uint16_t*>(out.data_ptr());
    if (!batched) {
      Bf16GemmParallel(a, b, Tensor(), false, pc, m, n, k);
      return;
    }
    parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi)
        Bf16GemmParallel(BatchSlice(a, bi), BatchSlice(b, bi), Tensor(), false, pc + bi * m * n, m, n, k);
    });
    return;
  }
  if (dt == kFloat16 || dt == kBFloat16) {
    Tensor r = batched ? bmm(a.to(kFloat32), b.to(kFloat32)) : mm(a.to(kFloat32), b.to(kFloat32));
    CopyInto(out, r);
    return;
  }
  if (dt != kFloat32 && dt != kFloat64) {
    ANVIL_DISPATCH_NUMERIC(dt, "mm", [&] { NaiveMatmul<scalar_t>(a, b, out); });
    return;
  }
  ANVIL_DISPATCH_FLOATING(dt, "mm", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
      using T = scalar_t;
      T* pc = out.data_ptr<T>();
      if (!batched) {
        MatArg A = AsBlas(a), B = AsBlas(b);
        GemmParallel<T>(A, B, static_cast<const T*>(A.t.data_ptr()), static_cast<const T*>(B.t.data_ptr()), {}, pc, m,
                        n, k);
        return;
      }
      // Batches: one slice per task; slices use the operands' own batch strides.
      parallel_for(0, batch, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t bi = b0; bi < b1; ++bi) {
          MatArg A = AsBlas(BatchSlice(a, bi)), B = AsBlas(BatchSlice(b, bi));
          GemmParallel<T>(A, B, static_cast<const T*>(A.t.data_ptr()), static_cast<const T*>(B.t.data_ptr()), {},
                          pc + bi * m * n, m, n, k);
        }
      });
    }
  });
}

// out[M, N] = x[M, K] weight[N, K]^T + bias[N] (then relu, for linear_relu). Float32/64:
// each thread seeds its rows of the output with the bias, accumulates its GEMM onto them
// (beta = 1; the seeding replaces the zeroing BLAS does for beta = 0, and the add that read
// the product back is gone), and applies the relu to those rows while they are in its
// cache. Other dtypes compose the ops.
template <bool Relu>
void LinearKernel(const KernelCall& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &bias = c.inputs[2];
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const ScalarType dt = x.dtype();
  if (dt == kBFloat16 && w.dtype() == kBFloat16 && bias.dtype() == kBFloat16 && x.dim() == 2 && bf16_gemm_available()) {
    Bf16GemmParallel(x, w.t(), bias, Relu, static_cast<uint16_t*>(out.data_ptr()), out.size(0), out.size(1), x.size(1));
    return;
  }
  if (dt == kBFloat16 || dt == kFloat16) {
    // Widened to float32 and rounded once at the end, as the bf16 kernel does: product, bias
    // and relu each rounded to 16 bits would round three times.
    const Tensor y = linear(x.to(kFloat32), w.to(kFloat32), bias.to(kFloat32));
    CopyInto(out, Relu ? relu(y) : y);
    return;
  }
  if (dt != kFloat32 && dt != kFloat64) {
    const Tensor y = add(mm(x, w.t()), bias);
    CopyInto(out, Relu ? relu(y) : y);
    return;
  }
  ANVIL_DISPATCH_FLOATING(dt, "linear", [&] {
    if constexpr (std::is_same_v<scalar_t, float> || std::is_same_v<scalar_t, double>) {
      using T = scalar_t;
      const MatArg A = AsBlas(x), B = AsBlas(w.t());
      const Tensor b = bias.contiguous();
      GemmParallel<T>(A, B, static_cast<const T*>(A.t.data_ptr()), static_cast<const T*>(B.t.data_ptr()),
                      Epilogue<T>{b.data_ptr<T>(), Relu}, out.data_ptr<T>(), out.size(0), out.size(1), x.size(1));
    }
  });
}

}  // namespace

#define ANVIL_LINALG_ROW(row, ...) ANVIL_KERNEL_SLOT(row, __VA_ARGS__)
#include "core/backend/linalg_rows.def"
#undef ANVIL_LINALG_ROW

}  // namespace anvil::cpu
