// CPU kernels for the fused convolution rows (dims layout: ops/im2col.cc, then groups).
//
// Each image's columns are built into a per-task buffer of C*KH*KW x OH*OW (a few hundred KiB
// for typical layers, so it stays in L2) and consumed by single-threaded GEMMs right away;
// tasks split the batch. The unfused form (one im2col over the whole batch, then a batched
// matmul) wrote and re-read the full [N, C*KH*KW, L] columns through memory and ran ~2x
// slower (bench/RESULTS.md). A 1x1 convolution with stride 1 and no padding needs no columns:
// the image is already its own column matrix.
//
// Determinism: the weight gradient sums per-task partials in task order; the task split
// depends only on the batch size and the thread count (core/util/thread_pool.h).
#include <algorithm>
#include <vector>

#include "core/backend/cpu/conv_bf16.h"
#include "core/backend/cpu/conv_tasks.h"
#include "core/backend/cpu/gemm.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/kernels.h"
#include "core/backend/cpu/sgemm_avx512.h"
#include "core/backend/cpu/window.h"
#include "core/ops/functions.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {
namespace {

using backend::ConvShape;
constexpr auto MakeShape = backend::MakeConvShape;

// C[m, n] = beta * C + A B with A(i, p) = a[i * ars + p * acs] (row- or column-major) and B,
// C row-major, on the GEMM chosen for this CPU (core/backend/cpu/gemm.h).
template <typename T>
void GemmStrided(int64_t m, int64_t n, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb, T beta,
                 T* c, int64_t ldc) {
  if (acs == 1) {
    gemm<T>(false, false, m, n, k, a, ars, b, ldb, beta, c, ldc);
  } else {
    gemm<T>(true, false, m, n, k, a, acs, b, ldb, beta, c, ldc);
  }
}

template <typename T>
void GemmColumns(int64_t m, int64_t n, int64_t k, const T* a, int64_t ars, int64_t acs, const T* b, int64_t ldb, T beta,
                 T* c, int64_t ldc) {
  SplitColumns(n, m * k, [&](int64_t j0, int64_t j1) {
    GemmStrided<T>(m, j1 - j0, k, a, ars, acs, b + j0, ldb, beta, c + j0, ldc);
  });
}

Tensor Scratch(int64_t tasks, const ConvShape& s, ScalarType dt) {
  if (s.direct) return Tensor();
  return empty({tasks, s.g.C * s.g.KH * s.g.KW * s.L}, TensorOptions(dt));
}

template <typename T>
T* ScratchFor(const Tensor& scratch, int64_t task) {
  return scratch.defined() ? scratch.data_ptr<T>() + task * scratch.size(1) : nullptr;
}

template <typename T>
void Conv2dForward(const KernelCall& call) {
  const backend::ConvForwardOperands op = backend::MakeConvForwardOperands(call);
  const Tensor &x = op.x, &w = op.w, &b = op.b, &out = call.outputs[0];
  const ConvShape& s = op.s;
  const BatchSplit split = SplitBatch(s.g.N);
  const Tensor scratch = Scratch(split.tasks, s, x.dtype());
  const T* px = x.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  const T* pb = b.defined() ? b.data_ptr<T>() : nullptr;
  T* po = out.data_ptr<T>();
  ForEachTaskImage(split, s.g.N, [&](int64_t t, int64_t n) {
    const T* cols = Columns(px + n * s.g.C * s.g.H * s.g.W, ScratchFor<T>(scratch, t), s);
    for (int64_t grp = 0; grp < s.G; ++grp) {
      T* o = po + (n * s.OC + grp * s.OCg) * s.L;
      if (pb != nullptr) {
        for (int64_t oc = 0; oc < s.OCg; ++oc) std::fill(o + oc * s.L, o + (oc + 1) * s.L, pb[grp * s.OCg + oc]);
      }
      GemmColumns<T>(s.OCg, s.L, s.K, pw + grp * s.OCg * s.K, s.K, 1, cols + grp * s.K * s.L, s.L,
                     pb != nullptr ? T(1) : T(0), o, s.L);
    }
  });
}

// grad_x: per image, columns = W^T g (one GEMM per group), then col2im into the image.
template <typename T>
void Conv2dInputGrad(const KernelCall& call) {
  const Tensor gy = call.inputs[0].contiguous(), w = call.inputs[1].contiguous();
  const Tensor& out = call.outputs[0];
  const ConvShape s = backend::ConvShapeOf(call);
  const BatchSplit split = SplitBatch(s.g.N);
  const Tensor scratch = Scratch(split.tasks, s, gy.dtype());
  const T* pg = gy.data_ptr<T>();
  const T* pw = w.data_ptr<T>();
  T* po = out.data_ptr<T>();
  const int64_t plane = s.g.H * s.g.W, rows = s.g.KH * s.g.KW * s.L;
  ForEachTaskImage(split, s.g.N, [&](int64_t t, int64_t n) {
    T* image = po + n * s.g.C * plane;
    T* cols = s.direct ? image : ScratchFor<T>(scratch, t);
    for (int64_t grp = 0; grp < s.G; ++grp) {
      GemmColumns<T>(s.K, s.L, s.OCg, pw + grp * s.OCg * s.K, 1, s.K, pg + (n * s.OC + grp * s.OCg) * s.L, s.L, T(0),
                     cols + grp * s.K * s.L, s.L);
    }
    if (!s.direct) {
      for (int64_t c = 0; c < s.g.C; ++c) Col2ImPlane(cols + c * rows, image + c * plane, s.g);
    }
  });
}

// grad_w = sum over images of g_n cols_n^T: each task sums its images into its own partial,
// then the partials are added in task order.
template <typename T>
void Conv2dWeightGrad(const KernelCall& call) {
  const Tensor gy = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const Tensor& out = call.outputs[0];
  const ConvShape s = backend::ConvShapeOf(call);
  const BatchSplit split = SplitBatch(s.g.N);
  const Tensor scratch = Scratch(split.tasks, s, x.dtype());
  const Tensor partials = zeros({std::max<int64_t>(split.tasks, 1), s.OC * s.K}, TensorOptions(x.dtype()));
  const T* pg = gy.data_ptr<T>();
  const T* px = x.data_ptr<T>();
  T* pp = partials.data_ptr<T>();
  ForEachTaskImage(split, s.g.N, [&](int64_t t, int64_t n) {
    T* acc = pp + t * s.OC * s.K;
    const T* cols = Columns(px + n * s.g.C * s.g.H * s.g.W, ScratchFor<T>(scratch, t), s);
    for (int64_t grp = 0; grp < s.G; ++grp) {
      gemm<T>(false, true, s.OCg, s.K, s.L, pg + (n * s.OC + grp * s.OCg) * s.L, s.L, cols + grp * s.K * s.L, s.L, T(1),
              acc + grp * s.OCg * s.K, s.K);
    }
  });
  T* po = out.data_ptr<T>();
  const int64_t total = s.OC * s.K;
  std::copy(pp, pp + total, po);
  for (int64_t t = 1; t < split.tasks; ++t) {
    const T* part = pp + t * total;
    for (int64_t i = 0; i < total; ++i) po[i] += part[i];
  }
}

// ---- float32 on AVX-512 ----

// NOTE [ Implicit-GEMM convolution ]
// For stride 1 the column matrix never needs to exist. Copy the image once into a zero-padded
// buffer [C, Hp, Wp]; then column q = y * Wp + x of the "wide" output (x running over the
// padded width) reads row p = (c, i, j) at padded[c*Hp*Wp + i*DH*Wp + j*DW + q]: each row of
// B is a contiguous run starting at a per-row offset, which is what sgemm_avx512 takes. The
// Wp - OW columns per row that fall in the padding are computed and dropped when the wide
// result is copied out (2 of 30 for a 28-wide image, padding 1). A zero tail of
// (KW - 1) * DW floats keeps the last rows' reads inside the buffer.
// The zero-padded image and the row offsets of its implicit column matrix.
struct PaddedImage {
  int64_t PT, PL, Hp, Wp, plane, wide, size;
  std::vector<int64_t> offsets;  // [G * K]: row (c, i, j) of group grp at offsets[grp * K + (c*KH + i)*KW + j]

  PaddedImage(const WindowArgs& w, const ConvShape& s) {
    const Geom& g = s.g;
    PT = w.pad_top;
    PL = w.pad_left;
    Hp = g.H + w.pad_top + w.pad_bottom;
    Wp = g.W + w.pad_left + w.pad_right;
    plane = Hp * Wp;
    wide = g.OH * Wp;
    size = g.C * plane + (g.KW - 1) * g.DW + 16;
    const int64_t Cg = g.C / s.G;
    offsets.resize(static_cast<size_t>(s.G * s.K));
    for (int64_t grp = 0; grp < s.G; ++grp) {
      for (int64_t c = 0; c < Cg; ++c) {
        for (int64_t i = 0; i < g.KH; ++i) {
          for (int64_t j = 0; j < g.KW; ++j) {
            offsets[grp * s.K + (c * g.KH + i) * g.KW + j] = (grp * Cg + c) * plane + i * g.DH * Wp + j * g.DW;
          }
        }
      }
    }
  }

  // Writes the image into the interior; the border of a zeroed buffer stays zero.
  void Fill(const float* image, float* padded, const Geom& g) const {
    for (int64_t c = 0; c < g.C; ++c) {
      for (int64_t y = 0; y < g.H; ++y) {
        const float* row = image + (c * g.H + y) * g.W;
        std::copy(row, row + g.W, padded + c * plane + (y + PT) * Wp + PL);
      }
    }
  }
};

void Conv2dForwardImplicit(const KernelCall& call, const ConvShape& s) {
  const Tensor x = call.inputs[0].contiguous(), w = call.inputs[1].contiguous();
  const Tensor b = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  const Tensor& out = call.outputs[0];
  const Geom& g = s.g;
  const PaddedImage pi(call.attrs.get<WindowArgs>(), s);
  const BatchSplit split = SplitBatch(g.N);
  const int64_t per_task = pi.size + s.OCg * pi.wide;
  const Tensor scratch = zeros({split.tasks, per_task});  // the padding stays zero across images
  const float* px = x.data_ptr<float>();
  const float* pw = w.data_ptr<float>();
  const float* pb = b.defined() ? b.data_ptr<float>() : nullptr;
  float* po = out.data_ptr<float>();
  float* const scratch_base = scratch.data_ptr<float>();
  ForEachTaskImage(split, g.N, [&](int64_t t, int64_t n) {
    float* padded = scratch_base + t * per_task;
    float* result = padded + pi.size;
    pi.Fill(px + n * g.C * g.H * g.W, padded, g);
    for (int64_t grp = 0; grp < s.G; ++grp) {
      SplitColumns(pi.wide, s.OCg * s.K, [&](int64_t q0, int64_t q1) {
        sgemm_avx512(s.OCg, q1 - q0, s.K, pw + grp * s.OCg * s.K, nullptr, s.K, 1, padded + q0,
                     pi.offsets.data() + grp * s.K, 0.0f, result + q0, pi.wide);
      });
      for (int64_t oc = 0; oc < s.OCg; ++oc) {
        const float bias = pb != nullptr ? pb[grp * s.OCg + oc] : 0.0f;
        float* dst = po + (n * s.OC + grp * s.OCg + oc) * s.L;
        for (int64_t y = 0; y < g.OH; ++y) {
          const float* src = result + oc * pi.wide + y * pi.Wp;
          for (int64_t xo = 0; xo < g.OW; ++xo) dst[y * g.OW + xo] = src[xo] + bias;
        }
      }
    }
  });
}

// grad_x for stride 1 is itself a stride-1 convolution (NOTE [ Implicit-GEMM convolution ]):
// of the output gradient, padded by (KH - 1) * DH - PT above (and so on), with the weights
// swapped in their channel dims and flipped in space. No columns, no col2im. Returns false
// when a padding would be negative (padding wider than the dilated kernel).
bool Conv2dInputGradImplicit(const KernelCall& call, const ConvShape& s) {
  const WindowArgs& win = call.attrs.get<WindowArgs>();
  const Geom& g = s.g;
  const int64_t eh = (g.KH - 1) * g.DH, ew = (g.KW - 1) * g.DW;
  const int64_t pt = eh - win.pad_top, pb = eh - win.pad_bottom, pl = ew - win.pad_left, pr = ew - win.pad_right;
  if (pt < 0 || pb < 0 || pl < 0 || pr < 0) return false;
  const Tensor w = call.inputs[1].contiguous();
  const int64_t Cg = g.C / s.G;
  Tensor flipped = empty({g.C, s.OCg, g.KH, g.KW});
  const float* src = w.data_ptr<float>();
  float* dst = flipped.data_ptr<float>();
  for (int64_t grp = 0; grp < s.G; ++grp) {
    for (int64_t oc = 0; oc < s.OCg; ++oc) {
      for (int64_t c = 0; c < Cg; ++c) {
        for (int64_t i = 0; i < g.KH; ++i) {
          for (int64_t j = 0; j < g.KW; ++j) {
            dst[(((grp * Cg + c) * s.OCg + oc) * g.KH + (g.KH - 1 - i)) * g.KW + (g.KW - 1 - j)] =
                src[(((grp * s.OCg + oc) * Cg + c) * g.KH + i) * g.KW + j];
          }
        }
      }
    }
  }
  const WindowArgs flipped_window = {.kernel_h = g.KH,
                                     .kernel_w = g.KW,
                                     .pad_top = pt,
                                     .pad_bottom = pb,
                                     .pad_left = pl,
                                     .pad_right = pr,
                                     .dilation_h = g.DH,
                                     .dilation_w = g.DW,
                                     .height = g.OH,
                                     .width = g.OW,
                                     .groups = s.G};
  const OpAttrs attrs = flipped_window;
  const std::vector<Tensor> inputs = {call.inputs[0], flipped};
  std::vector<Tensor>& outputs = call.outputs;
  const KernelCall as_forward{OpId::Conv2d, inputs, outputs, attrs};
  Conv2dForwardImplicit(as_forward, MakeShape(flipped_window, g.N, s.OC, g.C));
  return true;
}

// dst [cols, rows] = src [rows, cols]^T (src rows `src_stride` apart), in 16 x 16 blocks so
// both sides stay in cache lines.
void TransposeInto(const float* src, int64_t rows, int64_t cols, int64_t src_stride, float* dst) {
  constexpr int64_t kB = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kB) {
    const int64_t r1 = std::min(rows, r0 + kB);
    for (int64_t c0 = 0; c0 < cols; c0 += kB) {
      const int64_t c1 = std::min(cols, c0 + kB);
      for (int64_t c = c0; c < c1; ++c) {
        for (int64_t r = r0; r < r1; ++r) dst[c * rows + r] = src[r * src_stride + c];
      }
    }
  }
}

// grad_w^T [K, OCg] per group = cols [K, L] @ g^T [L, OCg]: the long L dimension is the one
// summed in registers, and B (g transposed per image, small) is row-contiguous. Used when a
// group has at least 16 output channels (a full AVX-512 vector).
void Conv2dWeightGradAvx512(const KernelCall& call, const ConvShape& s) {
  const Tensor gy = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const Tensor& out = call.outputs[0];
  const Geom& g = s.g;
  // Stride 1: A is the implicit column matrix of the padded image, and g^T is laid out over
  // the same wide positions (zero rows where x >= OW). Otherwise explicit columns.
  const bool implicit = g.SH == 1 && g.SW == 1;
  const PaddedImage pi(call.attrs.get<WindowArgs>(), s);
  const int64_t positions = implicit ? pi.wide : s.L;
  const int64_t a_size = implicit ? pi.size : (s.direct ? 0 : g.C * g.KH * g.KW * s.L);
  const int64_t per_task = a_size + positions * s.OCg + s.OC * s.K;  // A, g^T, partial [G, K, OCg]
  const BatchSplit split = SplitBatch(g.N);
  const Tensor scratch = zeros({split.tasks, per_task});
  std::vector<int64_t> b_rows(static_cast<size_t>(positions));
  for (int64_t q = 0; q < positions; ++q) b_rows[q] = q * s.OCg;
  const float* pg = gy.data_ptr<float>();
  const float* px = x.data_ptr<float>();
  float* const scratch_base = scratch.data_ptr<float>();
  ForEachTaskImage(split, g.N, [&](int64_t t, int64_t n) {
    float* a_buf = scratch_base + t * per_task;
    float* gt = a_buf + a_size;
    float* partial = gt + positions * s.OCg;
    const float* image = px + n * g.C * g.H * g.W;
    const float* cols = nullptr;
    if (implicit) {
      pi.Fill(image, a_buf, g);
    } else {
      cols = Columns(image, a_buf, s);
    }
    for (int64_t grp = 0; grp < s.G; ++grp) {
      const float* gn = pg + (n * s.OC + grp * s.OCg) * s.L;
      float* acc = partial + grp * s.K * s.OCg;
      if (implicit) {
        for (int64_t y = 0; y < g.OH; ++y) TransposeInto(gn + y * g.OW, s.OCg, g.OW, s.L, gt + y * pi.Wp * s.OCg);
        sgemm_avx512(s.K, s.OCg, positions, a_buf, pi.offsets.data() + grp * s.K, 0, 1, gt, b_rows.data(), 1.0f, acc,
                     s.OCg);
      } else {
        TransposeInto(gn, s.OCg, s.L, s.L, gt);
        sgemm_avx512(s.K, s.OCg, positions, cols + grp * s.K * s.L, nullptr, s.L, 1, gt, b_rows.data(), 1.0f, acc,
                     s.OCg);
      }
    }
  });
  // out[grp*OCg + oc, k] = sum over tasks, in task order, of partial[grp, k, oc].
  float* po = out.data_ptr<float>();
  const float* all = scratch.data_ptr<float>() + a_size + positions * s.OCg;
  for (int64_t grp = 0; grp < s.G; ++grp) {
    for (int64_t oc = 0; oc < s.OCg; ++oc) {
      for (int64_t k = 0; k < s.K; ++k) {
        float sum = 0.0f;
        for (int64_t t = 0; t < split.tasks; ++t) sum += all[t * per_task + (grp * s.K + k) * s.OCg + oc];
        po[(grp * s.OCg + oc) * s.K + k] = sum;
      }
    }
  }
}

// float32 / float64 (16-bit floats are widened first: WidenedFrom16Bit).
template <void (*F32)(const KernelCall&), void (*F64)(const KernelCall&)>
void ByDtype(const KernelCall& call) {
  const ScalarType dt = call.inputs[0].dtype();
  ANVIL_CHECK_TYPE(dt == kFloat32 || dt == kFloat64, op_name(call.op),
                   ": the CPU kernel takes float32 or float64, got ", dt);
  (dt == kFloat32 ? F32 : F64)(call);
}

// The implicit-GEMM forms read the image in place through the AVX-512 kernel's row offsets
// (sgemm_avx512.h); below that level convolution builds columns for the chosen GEMM.
bool Avx512Float(const KernelCall& c) { return c.inputs[0].dtype() == kFloat32 && isa_at_least(CpuIsa::kAvx512); }

// 16-bit floats (autocast's convolutions, and their gradients) that the bfloat16 GEMM does not
// take (conv_bf16.h: float16, small products, no AVX-512-BF16): the operands widened to
// float32, the float32 kernel, each output rounded once. Correct, not faster than float32.
bool WidenedFrom16Bit(const KernelCall& c, void (*kernel)(const KernelCall&)) {
  const ScalarType dt = c.inputs[0].dtype();
  if (dt != kBFloat16 && dt != kFloat16) return false;
  std::vector<Tensor> in;
  for (const Tensor& t : c.inputs) in.push_back(t.defined() && t.dtype() == dt ? t.to(kFloat32) : t);
  std::vector<Tensor> out;
  for (const Tensor& t : c.outputs) out.push_back(t.defined() ? empty(t.sizes(), TensorOptions(kFloat32)) : t);
  kernel(KernelCall{c.op, in, out, c.attrs});
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].defined()) CopyInto(c.outputs[i], out[i]);
  }
  return true;
}

void Conv2dKernel(const KernelCall& c) {
  if (Conv2dOnBf16Gemm(c) || WidenedFrom16Bit(c, &Conv2dKernel)) return;
  if (Avx512Float(c) && c.attrs.get<WindowArgs>().stride_h == 1 && c.attrs.get<WindowArgs>().stride_w == 1) {
    return Conv2dForwardImplicit(c, backend::ConvShapeOf(c));
  }
  ByDtype<&Conv2dForward<float>, &Conv2dForward<double>>(c);
}
void Conv2dInputGradKernel(const KernelCall& c) {
  if (Conv2dOnBf16Gemm(c) || WidenedFrom16Bit(c, &Conv2dInputGradKernel)) return;
  if (Avx512Float(c) && c.attrs.get<WindowArgs>().stride_h == 1 && c.attrs.get<WindowArgs>().stride_w == 1 &&
      Conv2dInputGradImplicit(c, backend::ConvShapeOf(c))) {
    return;
  }
  ByDtype<&Conv2dInputGrad<float>, &Conv2dInputGrad<double>>(c);
}
void Conv2dWeightGradKernel(const KernelCall& c) {
  if (Conv2dOnBf16Gemm(c) || WidenedFrom16Bit(c, &Conv2dWeightGradKernel)) return;
  if (Avx512Float(c)) return Conv2dWeightGradAvx512(c, backend::ConvShapeOf(c));
  ByDtype<&Conv2dWeightGrad<float>, &Conv2dWeightGrad<double>>(c);
}

}  // namespace

ANVIL_KERNEL_SLOT(Conv2d, Conv2dKernel)
ANVIL_KERNEL_SLOT(Conv2dInputGrad, Conv2dInputGradKernel)
ANVIL_KERNEL_SLOT(Conv2dWeightGrad, Conv2dWeightGradKernel)

}  // namespace anvil::cpu
