// Convolutions on bfloat16 through the bfloat16 GEMM: see conv_bf16.h.
//
// The same per-image column scheme as the float kernels (conv.cc): each task builds one
// image's columns (bfloat16, C*KH*KW x OH*OW: half the float32 bytes) and multiplies them right
// away. Every product accumulates in float32 (bf16_gemm), and every output is rounded to
// bfloat16 once: the forward's bias is added in float32 before rounding, the input gradient's
// col2im sums in float32, and the weight gradient's per-image and per-task partial sums stay in
// float32 until the end. So the result is float64's rounded once, up to float32 summation,
// which is what the widened path computed, without the widening copies.
#include "core/backend/cpu/conv_bf16.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/backend/common/window_geom.h"
#include "core/backend/cpu/bf16_gemm.h"
#include "core/backend/cpu/conv_tasks.h"
#include "core/backend/cpu/isa.h"
#include "core/backend/cpu/onednn_primitives.h"
#include "core/backend/cpu/window.h"
#include "core/ops/window_args.h"
#include "core/util/thread_pool.h"

namespace anvil::cpu {
namespace {

using backend::ConvShape;
using Bits = uint16_t;  // a bfloat16's bits, as bf16_gemm takes them

// The multiply-adds of one image's GEMM (OC/groups x K x OH*OW) from which the bfloat16 GEMM
// beats widening to float32, on Zen 4 (bench/RESULTS.md, convolution rows): 0.9 M lost
// (a [64,16,14,14] input, 32 3x3 filters: 3.5 ms against 2.6), 3.6 M won (4.7 against 5.6).
constexpr int64_t kMinImageProduct = int64_t{2} << 20;

const Bits* BitsOf(const Tensor& t) { return static_cast<const Bits*>(t.data_ptr()); }
Bits* MutableBitsOf(const Tensor& t) { return static_cast<Bits*>(t.data_ptr()); }

void Forward(const KernelCall& call) {
  const backend::ConvForwardOperands op = backend::MakeConvForwardOperands(call);
  const ConvShape& s = op.s;
  std::vector<float> bias(op.b.defined() ? static_cast<size_t>(op.b.numel()) : 0);  // widened once
  if (op.b.defined()) bf16_to_float(BitsOf(op.b), bias.data(), op.b.numel());
  const Bits* px = BitsOf(op.x);
  const Bits* pw = BitsOf(op.w);
  Bits* po = MutableBitsOf(call.outputs[0]);
  const BatchSplit split = SplitBatch(s.g.N);
  parallel_for(0, split.tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<Bits> cols(s.direct ? 0 : static_cast<size_t>(s.rows * s.L));
    std::vector<float> acc(static_cast<size_t>(s.OCg * s.L));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t n = t * split.step; n < std::min(s.g.N, (t + 1) * split.step); ++n) {
        const Bits* c = Columns(px + n * s.g.C * s.g.H * s.g.W, cols.data(), s);
        for (int64_t grp = 0; grp < s.G; ++grp) {
          Bits* o = po + (n * s.OC + grp * s.OCg) * s.L;
          SplitColumns(s.L, s.OCg * s.K, [&](int64_t j0, int64_t j1) {
            float* a = acc.data();
            if (!bias.empty()) {
              for (int64_t oc = 0; oc < s.OCg; ++oc) {
                std::fill(a + oc * s.L + j0, a + oc * s.L + j1, bias[static_cast<size_t>(grp * s.OCg + oc)]);
              }
            }
            bf16_gemm(s.OCg, j1 - j0, s.K, pw + grp * s.OCg * s.K, s.K, 1, c + grp * s.K * s.L + j0, s.L, 1,
                      bias.empty() ? 0.0f : 1.0f, a + j0, s.L);
            for (int64_t oc = 0; oc < s.OCg; ++oc) float_to_bf16(a + oc * s.L + j0, o + oc * s.L + j0, j1 - j0);
          });
        }
      }
    }
  });
}

// The forward on oneDNN's bf16 convolution (onednn_primitives.h): the batch split over the pool
// as the other kernels split it (SplitBatch), one primitive call per task's images (at most two
// batch sizes, so two cache entries; the weights are reordered into oneDNN's layout once per
// call). The bias (bfloat16) is added in float32 before the one rounding, as Forward does.
void ForwardOnOneDnn(const KernelCall& call) {
  const backend::ConvForwardOperands op = backend::MakeConvForwardOperands(call);
  const ConvShape& s = op.s;
  const WindowArgs& wa = call.attrs.get<WindowArgs>();
  onednn::Conv2dGeometry g;
  g.n = 1;
  g.c = s.g.C;
  g.h = s.g.H;
  g.w = s.g.W;
  g.oc = s.OC;
  g.kh = s.g.KH;
  g.kw = s.g.KW;
  g.groups = s.G;
  g.stride_h = s.g.SH;
  g.stride_w = s.g.SW;
  g.pad_top = wa.pad_top;
  g.pad_bottom = wa.pad_bottom;
  g.pad_left = wa.pad_left;
  g.pad_right = wa.pad_right;
  g.dilation_h = s.g.DH;
  g.dilation_w = s.g.DW;
  g.oh = s.g.OH;
  g.ow = s.g.OW;
  const Bits* px = BitsOf(op.x);
  const Bits* pw = BitsOf(op.w);
  const Bits* pb = op.b.defined() ? BitsOf(op.b) : nullptr;
  Bits* po = MutableBitsOf(call.outputs[0]);
  const int64_t in_image = s.g.C * s.g.H * s.g.W, out_image = s.OC * s.L;
  const BatchSplit split = SplitBatch(s.g.N);
  parallel_for(0, split.tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t n0 = t * split.step, n1 = std::min(s.g.N, n0 + split.step);
      onednn::Conv2dGeometry part = g;
      part.n = n1 - n0;
      onednn::bf16_conv2d_forward(part, px + n0 * in_image, pw, pb, po + n0 * out_image);
    }
  });
}

// Whether the forward takes oneDNN's convolution: forced by ANVIL_BF16_GEMM, else the measured
// preference. On Zen 5 (one thread, anvil_bench_amp "" onednn; bench/RESULTS.md, "oneDNN bf16
// and int8 primitives") oneDNN's brgemm convolution on its blocked layouts, operands reordered
// in and out, runs the lenet5 and resnet shapes with 6 or more input channels per group at
// 1.5-2.8x Anvil's bfloat16 path (resnet [32,64,8,8] * [64,64,3,3]: 0.35 ms against 0.96;
// lenet5 [64,6,14,14] * [16,6,5,5]: 0.16 against 0.29, where Anvil widens to float32) and the
// wide [16,64,56,56] one at 1.1x; with 1 or 3 input channels (the first convolution of each) it
// loses (0.39-0.80x: the reorders and a kernel built for wide channel blocks). At the amx level
// oneDNN's AMX convolution is taken throughout (PyTorch's path; not measured by Anvil: no AMX
// machine).
constexpr int64_t kMinOneDnnChannelsPerGroup = 6;

bool ForwardPrefersOneDnn(const ConvShape& s) {
  if (const std::optional<Bf16GemmCandidate> f = bf16_gemm_forced_candidate()) return *f == Bf16GemmCandidate::kOneDnn;
  static const bool library = onednn::available();  // loaded once; the level may change (ScopedIsa)
  if (!library) return false;
  return isa_at_least(CpuIsa::kAmx) || s.g.C / s.G >= kMinOneDnnChannelsPerGroup;
}

// grad_x: per image, columns = W^T g in float32 (one GEMM per group), col2im in float32, then
// one rounding into the image.
void InputGrad(const KernelCall& call, const ConvShape& s) {
  const Tensor gy = call.inputs[0].contiguous(), w = call.inputs[1].contiguous();
  const Tensor& out = call.outputs[0];
  const Bits* pg = BitsOf(gy);
  const Bits* pw = BitsOf(w);
  Bits* po = MutableBitsOf(out);
  const int64_t plane = s.g.H * s.g.W, rows = s.g.KH * s.g.KW * s.L;
  const BatchSplit split = SplitBatch(s.g.N);
  parallel_for(0, split.tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<float> cols(static_cast<size_t>(s.rows * s.L));
    std::vector<float> image(s.direct ? 0 : static_cast<size_t>(s.g.C * plane));
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t n = t * split.step; n < std::min(s.g.N, (t + 1) * split.step); ++n) {
        for (int64_t grp = 0; grp < s.G; ++grp) {
          SplitColumns(s.L, s.K * s.OCg, [&](int64_t j0, int64_t j1) {
            bf16_gemm(s.K, j1 - j0, s.OCg, pw + grp * s.OCg * s.K, 1, s.K, pg + (n * s.OC + grp * s.OCg) * s.L + j0,
                      s.L, 1, 0.0f, cols.data() + grp * s.K * s.L + j0, s.L);
          });
        }
        const float* grad = cols.data();  // direct: the columns are the image's gradient
        if (!s.direct) {
          for (int64_t c = 0; c < s.g.C; ++c) Col2ImPlane(cols.data() + c * rows, image.data() + c * plane, s.g);
          grad = image.data();
        }
        float_to_bf16(grad, po + n * s.g.C * plane, s.g.C * plane);
      }
    }
  });
}

// grad_w = sum over images of g_n cols_n^T: float32 partials per task, added in task order
// (deterministic for a thread count, as the float kernel), rounded once.
void WeightGrad(const KernelCall& call, const ConvShape& s) {
  const Tensor gy = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const Bits* pg = BitsOf(gy);
  const Bits* px = BitsOf(x);
  const BatchSplit split = SplitBatch(s.g.N);
  const int64_t total = s.OC * s.K;
  std::vector<float> partials(static_cast<size_t>(std::max<int64_t>(split.tasks, 1) * total), 0.0f);
  parallel_for(0, split.tasks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<Bits> cols(s.direct ? 0 : static_cast<size_t>(s.rows * s.L));
    for (int64_t t = t0; t < t1; ++t) {
      float* acc = partials.data() + t * total;
      for (int64_t n = t * split.step; n < std::min(s.g.N, (t + 1) * split.step); ++n) {
        const Bits* c = Columns(px + n * s.g.C * s.g.H * s.g.W, cols.data(), s);
        for (int64_t grp = 0; grp < s.G; ++grp) {
          // B(l, k) = cols[k][l]: the columns read transposed, through their strides.
          bf16_gemm(s.OCg, s.K, s.L, pg + (n * s.OC + grp * s.OCg) * s.L, s.L, 1, c + grp * s.K * s.L, 1, s.L, 1.0f,
                    acc + grp * s.OCg * s.K, s.K);
        }
      }
    }
  });
  for (int64_t t = 1; t < split.tasks; ++t) {
    const float* part = partials.data() + t * total;
    for (int64_t i = 0; i < total; ++i) partials[static_cast<size_t>(i)] += part[i];
  }
  float_to_bf16(partials.data(), MutableBitsOf(call.outputs[0]), total);
}

}  // namespace

bool Conv2dOnBf16Gemm(const KernelCall& c) {
  if (!bf16_gemm_available()) return false;
  if (c.op != OpId::Conv2d && c.op != OpId::Conv2dInputGrad && c.op != OpId::Conv2dWeightGrad) return false;
  for (const Tensor& t : c.inputs) {
    if (t.defined() && (t.dtype() != kBFloat16 || t.numel() == 0)) return false;
  }
  const Tensor& out = c.outputs[0];
  if (out.dtype() != kBFloat16 || out.numel() == 0 || !out.is_contiguous()) return false;
  if (c.op == OpId::Conv2d && ForwardPrefersOneDnn(backend::ConvShapeOf(c))) {
    ForwardOnOneDnn(c);
    return true;
  }
  // Small per-image products lose to the widened float32 kernels (the implicit-GEMM forms with
  // no columns, no per-image packing); measured by anvil_bench_amp's convolution rows.
  const ConvShape s = backend::ConvShapeOf(c);
  if (s.OCg * s.K * s.L < kMinImageProduct) return false;
  if (c.op == OpId::Conv2d) {
    Forward(c);
  } else if (c.op == OpId::Conv2dInputGrad) {
    InputGrad(c, s);
  } else {
    WeightGrad(c, s);
  }
  return true;
}

}  // namespace anvil::cpu
