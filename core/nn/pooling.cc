// Pooling: windows from im2col (see NOTE [ Convolution as im2col ]), reduced with max
// (gradient to the maximum, like PyTorch) or mean.
#include "core/nn/pooling.h"

#include <algorithm>
#include <limits>

#include "core/export/capture.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {
namespace functional {
namespace {

// The pooling windows of x [N, C, H, W] as [N, C, KH * KW, OH * OW] (im2col columns), with
// padding that reads `fill`; also returns OH and OW.
Tensor PoolWindows(const Tensor& x, const Pool2dParams& p, double fill, const char* who, int64_t* oh, int64_t* ow) {
  const auto [kh, kw] = p.kernel;
  const int64_t sh = p.stride[0] > 0 ? p.stride[0] : kh, sw = p.stride[1] > 0 ? p.stride[1] : kw;
  const auto [ph, pw] = p.padding;
  ANVIL_CHECK(kh > 0 && kw > 0 && sh > 0 && sw > 0, who, ": expected a positive kernel and stride");
  ANVIL_CHECK(ph >= 0 && pw >= 0 && 2 * ph <= kh && 2 * pw <= kw, who,
              ": padding must be at most half the kernel size, got padding (", ph, ", ", pw, ") for kernel (", kh, ", ",
              kw, ")");
  const int64_t H = x.size(2) + 2 * ph, W = x.size(3) + 2 * pw;
  ANVIL_CHECK(H >= kh && W >= kw, who, ": the kernel ", kh, "x", kw, " is larger than the padded input ", H, "x", W);
  // PyTorch's pooling_output_shape: with ceil_mode one more window where a partial one is
  // left, unless it would start in the right/bottom padding.
  const auto out_size = [&](int64_t in, int64_t k, int64_t s, int64_t pad_before) {
    int64_t o = (in - k + (p.ceil_mode ? s - 1 : 0)) / s + 1;
    if (p.ceil_mode && (o - 1) * s >= in - 2 * pad_before + pad_before) --o;
    return o;
  };
  *oh = out_size(H, kh, sh, ph);
  *ow = out_size(W, kw, sw, pw);
  const int64_t extra_h = (*oh - 1) * sh + kh - H, extra_w = (*ow - 1) * sw + kw - W;  // ceil_mode's partial windows
  // im2col pads with zeros; another fill value (max pooling's -inf), or the partial windows of
  // ceil_mode, are padded explicitly.
  const bool explicit_pad = (fill != 0.0 && (ph > 0 || pw > 0)) || extra_h > 0 || extra_w > 0;
  ANVIL_CHECK(!explicit_pad || fill != 0.0 || (extra_h <= 0 && extra_w <= 0), who,
              ": ceil_mode is supported for max pooling only");
  const Tensor src =
      explicit_pad ? pad(x, {pw, pw + std::max<int64_t>(extra_w, 0), ph, ph + std::max<int64_t>(extra_h, 0)}, fill) : x;
  const int64_t ip = explicit_pad ? 0 : ph, jp = explicit_pad ? 0 : pw;
  const Tensor cols = im2col(src, {{kh, kw}, {sh, sw}, {ip, ip, jp, jp}, {1, 1}});
  return cols.view({x.size(0), x.size(1), kh * kw, *oh * *ow});
}

// MaxPool / AveragePool's attributes for `p`.
exporter::Attributes PoolAttributes(const Pool2dParams& p) {
  const auto [kh, kw] = p.kernel;
  const int64_t sh = p.stride[0] > 0 ? p.stride[0] : kh, sw = p.stride[1] > 0 ? p.stride[1] : kw;
  const auto [ph, pw] = p.padding;
  return {{"kernel_shape", std::vector<int64_t>{kh, kw}},
          {"strides", std::vector<int64_t>{sh, sw}},
          {"pads", std::vector<int64_t>{ph, pw, ph, pw}},
          {"ceil_mode", int64_t{p.ceil_mode ? 1 : 0}}};
}

Tensor Batched(const Tensor& x, const char* who) {
  ANVIL_CHECK(x.dim() == 3 || x.dim() == 4, who, ": expected input [N, C, H, W] or [C, H, W], got ", x.dim(), " dims");
  return x.dim() == 3 ? x.unsqueeze(0) : x;
}

}  // namespace

Tensor max_pool2d(const Tensor& input, const Pool2dParams& p) {
  const Tensor x = Batched(input, "max_pool2d");
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) node.emplace("MaxPool", std::vector<Tensor>{x}, PoolAttributes(p));
  int64_t oh = 0, ow = 0;
  const Tensor windows = PoolWindows(x, p, -std::numeric_limits<double>::infinity(), "max_pool2d", &oh, &ow);
  Tensor out = std::get<0>(max(windows, 2)).view({x.size(0), x.size(1), oh, ow});
  if (node) node->finish(out);
  return input.dim() == 3 ? out.squeeze(0) : out;
}

Tensor avg_pool2d(const Tensor& input, const Pool2dParams& p) {
  const Tensor x = Batched(input, "avg_pool2d");
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) {
    exporter::Attributes attrs = PoolAttributes(p);
    attrs.emplace_back("count_include_pad", int64_t{p.count_include_pad ? 1 : 0});
    node.emplace("AveragePool", std::vector<Tensor>{x}, std::move(attrs));
  }
  int64_t oh = 0, ow = 0;
  Tensor out = PoolWindows(x, p, 0.0, "avg_pool2d", &oh, &ow).mean({2}).view({x.size(0), x.size(1), oh, ow});
  if (!p.count_include_pad && (p.padding[0] > 0 || p.padding[1] > 0)) {
    // Divide by the number of real (unpadded) elements in each window instead.
    const Tensor ones_map = ones({1, 1, x.size(2), x.size(3)}, TensorOptions(x.dtype()).with_device(x.device()));
    const Tensor real_fraction = PoolWindows(ones_map, p, 0.0, "avg_pool2d", &oh, &ow).mean({2}).view({1, 1, oh, ow});
    out = out / real_fraction;
  }
  if (node) node->finish(out);
  return input.dim() == 3 ? out.squeeze(0) : out;
}

Tensor adaptive_avg_pool2d(const Tensor& input, std::array<int64_t, 2> size) {
  const Tensor x = Batched(input, "adaptive_avg_pool2d");
  const auto [oh, ow] = size;
  ANVIL_CHECK(oh > 0 && ow > 0, "adaptive_avg_pool2d: expected a positive output size");
  const int64_t H = x.size(2), W = x.size(3);
  Tensor out;
  if (H % oh == 0 && W % ow == 0) {  // equal windows: one reshape and one mean
    out = x.reshape({x.size(0), x.size(1), oh, H / oh, ow, W / ow}).mean({3, 5});
  } else {
    auto pool_dim = [](const Tensor& t, int64_t dim, int64_t in, int64_t n) {
      std::vector<Tensor> parts;
      for (int64_t i = 0; i < n; ++i) {
        const int64_t start = i * in / n, end = ((i + 1) * in + n - 1) / n;
        parts.push_back(t.narrow(dim, start, end - start).mean({dim}, /*keepdim=*/true));
      }
      return cat(parts, dim);
    };
    out = pool_dim(pool_dim(x, 2, H, oh), 3, W, ow);
  }
  return input.dim() == 3 ? out.squeeze(0) : out;
}

}  // namespace functional

namespace {
// Appends piecewise: GCC 12's -Wrestrict misfires on "(" + std::to_string(...) chains.
std::string Pair(const std::array<int64_t, 2>& a) {
  std::string s = "(";
  s += std::to_string(a[0]);
  s += ", ";
  s += std::to_string(a[1]);
  s += ")";
  return s;
}
}  // namespace

MaxPool2d::MaxPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                     bool ceil_mode)
    : Module("MaxPool2d"), params_{kernel, stride, padding, true, ceil_mode} {}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + Pair(params_.kernel) + ", stride=" + Pair(params_.stride) +
         ", padding=" + Pair(params_.padding) + (params_.ceil_mode ? ", ceil_mode=True" : "");
}

AvgPool2d::AvgPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                     bool count_include_pad)
    : Module("AvgPool2d"), params_{kernel, stride, padding, count_include_pad} {}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + Pair(params_.kernel) + ", stride=" + Pair(params_.stride) +
         ", padding=" + Pair(params_.padding);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + Pair(size_); }

}  // namespace anvil::nn
