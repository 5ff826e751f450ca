// mm and bmm on cuBLAS (GemmStridedBatched): operands whose last two dims are row- or
// column-major go in as they are (a transposed view is a transpose flag, not a copy).
#include "core/backend/common/matmul_shape.h"
#include "core/backend/cuda/blas.h"
#include "core/backend/cuda/kernels.h"
#include "core/ops/dispatch.h"
#include "core/ops/functions.h"

namespace anvil::cuda {
namespace {

struct MatArg {
  Tensor t;  // keeps a contiguous copy alive when one was needed
  bool trans = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

MatArg AsBlas(const Tensor& m) {
  const int64_t nd = m.dim();
  const int64_t rows = m.size(nd - 2), cols = m.size(nd - 1);
  const int64_t s0 = m.stride(nd - 2), s1 = m.stride(nd - 1);
  const int64_t bs = nd == 3 ? m.stride(0) : 0;
  if (s1 == 1 && (s0 >= std::max<int64_t>(cols, 1) || rows == 1)) {
    return {m, false, std::max<int64_t>(rows == 1 ? cols : s0, 1), bs};
  }
  if (s0 == 1 && (s1 >= std::max<int64_t>(rows, 1) || cols == 1)) {
    return {m, true, std::max<int64_t>(cols == 1 ? rows : s1, 1), bs};
  }
  Tensor c = m.contiguous();
  return {c, false, std::max<int64_t>(cols, 1), nd == 3 ? rows * cols : 0};
}

void MatmulKernel(const KernelCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1];
  const Tensor& out = c.outputs[0];
  const backend::MatmulShape shape = backend::MakeMatmulShape(c);
  const int64_t batch = shape.batch, m = shape.m, n = shape.n, k = shape.k;
  if (out.numel() == 0) return;
  if (k == 0) {  // an empty sum: zeros
    Tensor o = out;
    o.zero_();
    return;
  }
  ANVIL_DISPATCH_FLOATING(a.dtype(), "mm", [&] {
    using T = scalar_t;
    const MatArg A = AsBlas(a), B = AsBlas(b);
    // The dispatcher allocates out contiguous: row-major with ld = n.
    GemmStridedBatched<T>(out.device().index, A.trans, B.trans, m, n, k, static_cast<const T*>(A.t.data_ptr()), A.ld,
                          A.batch_stride, static_cast<const T*>(B.t.data_ptr()), B.ld, B.batch_stride, 0.0f,
                          static_cast<T*>(out.data_ptr()), n, m * n, batch);
  });
}

// out = x weight^T + bias: the output starts as the bias rows and cuBLAS accumulates the
// product onto them (beta = 1); linear_relu then runs the relu kernel in place.
template <bool Relu>
void LinearKernel(const KernelCall& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &bias = c.inputs[2];
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  Tensor seeded = out;
  seeded.copy_(bias.expand(out.sizes()));
  const int64_t m = out.size(0), n = out.size(1), k = x.size(1);
  if (k > 0) {  // k == 0: an empty product, the bias alone
    ANVIL_DISPATCH_FLOATING(x.dtype(), "linear", [&] {
      using T = scalar_t;
      const MatArg A = AsBlas(x), B = AsBlas(w.t());
      GemmStridedBatched<T>(out.device().index, A.trans, B.trans, m, n, k, static_cast<const T*>(A.t.data_ptr()), A.ld,
                            0, static_cast<const T*>(B.t.data_ptr()), B.ld, 0, 1.0f, static_cast<T*>(out.data_ptr()), n,
                            m * n, 1);
    });
  }
  if (Relu) dispatch_into(OpId::Relu, {seeded}, seeded, OpAttrs{});
}

}  // namespace

#define ANVIL_LINALG_ROW(row, ...) ANVIL_KERNEL_SLOT(row, __VA_ARGS__)
#include "core/backend/linalg_rows.def"
#undef ANVIL_LINALG_ROW

}  // namespace anvil::cuda
