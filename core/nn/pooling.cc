// Pooling: max pooling takes each window's maximum by its index (the max_pool2d_indices row)
// and reads it from the input there, so the gradient goes to that element, as PyTorch's does;
// average pooling sums the windows from im2col (see NOTE [ Convolution as im2col ]) and divides
// by PyTorch's divisors.
#include "core/nn/pooling.h"

#include <algorithm>

#include "core/export/capture.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {
namespace functional {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0)) ? 1 : 0); }

// One spatial dim of a pooling: its window, the input size and the output size.
struct PoolDim {
  int64_t in, kernel, stride, pad, dilation, out;
  int64_t span() const { return dilation * (kernel - 1) + 1; }
  // How far the last window runs past the padded input (ceil_mode's partial window), or 0.
  int64_t overhang() const { return std::max<int64_t>((out - 1) * stride + span() - (in + 2 * pad), 0); }
};

// The two spatial dims of pooling x [N, C, H, W] with `p`, checked as PyTorch's
// pool2d_shape_check does.
std::array<PoolDim, 2> PoolDims(const Tensor& x, const Pool2dParams& p, const char* who) {
  std::array<PoolDim, 2> dims{};
  for (size_t i = 0; i < 2; ++i) {
    const int64_t k = p.kernel[i], s = p.stride[i] > 0 ? p.stride[i] : k, pad = p.padding[i], d = p.dilation[i];
    ANVIL_CHECK(k > 0, who, ": expected a positive kernel size, got (", p.kernel[0], ", ", p.kernel[1], ")");
    ANVIL_CHECK(p.stride[i] >= 0, who, ": expected a positive stride, got (", p.stride[0], ", ", p.stride[1], ")");
    ANVIL_CHECK(d > 0, who, ": expected a positive dilation, got (", p.dilation[0], ", ", p.dilation[1], ")");
    ANVIL_CHECK(pad >= 0 && 2 * pad <= k, who, ": padding must be at most half the kernel size, got padding (",
                p.padding[0], ", ", p.padding[1], ") for kernel (", p.kernel[0], ", ", p.kernel[1], ")");
    const int64_t in = x.size(static_cast<int64_t>(i) + 2);
    dims[i] = PoolDim{in, k, s, pad, d, pool_output_size(in, k, s, pad, d, p.ceil_mode)};
  }
  ANVIL_CHECK(dims[0].out >= 1 && dims[1].out >= 1, who, ": the input ", x.size(2), "x", x.size(3),
              " is too small for the window (output size ", dims[0].out, "x", dims[1].out, ")");
  return dims;
}

// The pooling windows of x [N, C, H, W] as [N, C, KH * KW, OH * OW] (im2col columns, window
// offsets in row-major order), with padding (and ceil_mode's overhang) that reads `fill`.
Tensor PoolWindows(const Tensor& x, const std::array<PoolDim, 2>& d, double fill) {
  const PoolDim &h = d[0], &w = d[1];
  // im2col pads with zeros; another fill value (max pooling's -inf), or the partial windows of
  // ceil_mode, are padded explicitly.
  const bool explicit_pad = (fill != 0.0 && (h.pad > 0 || w.pad > 0)) || h.overhang() > 0 || w.overhang() > 0;
  const Tensor src = explicit_pad ? pad(x, {w.pad, w.pad + w.overhang(), h.pad, h.pad + h.overhang()}, fill) : x;
  const int64_t ip = explicit_pad ? 0 : h.pad, jp = explicit_pad ? 0 : w.pad;
  const Tensor cols =
      im2col(src, {{h.kernel, w.kernel}, {h.stride, w.stride}, {ip, ip, jp, jp}, {h.dilation, w.dilation}});
  return cols.view({x.size(0), x.size(1), h.kernel * w.kernel, h.out * w.out});
}

// MaxPool / AveragePool's attributes for `p`.
exporter::Attributes PoolAttributes(const Pool2dParams& p) {
  const auto [kh, kw] = p.kernel;
  const int64_t sh = p.stride[0] > 0 ? p.stride[0] : kh, sw = p.stride[1] > 0 ? p.stride[1] : kw;
  const auto [ph, pw] = p.padding;
  exporter::Attributes attrs{{"kernel_shape", std::vector<int64_t>{kh, kw}},
                             {"strides", std::vector<int64_t>{sh, sw}},
                             {"pads", std::vector<int64_t>{ph, pw, ph, pw}},
                             {"ceil_mode", int64_t{p.ceil_mode ? 1 : 0}}};
  if (p.dilation[0] != 1 || p.dilation[1] != 1)
    attrs.emplace_back("dilations", std::vector<int64_t>{p.dilation[0], p.dilation[1]});
  return attrs;
}

Tensor Batched(const Tensor& x, const char* who) {
  ANVIL_CHECK(x.dim() == 3 || x.dim() == 4, who, ": expected input [N, C, H, W] or [C, H, W], got ", x.dim(), " dims");
  ANVIL_CHECK(x.size(-1) > 0 && x.size(-2) > 0 && x.size(-3) > 0, who,
              ": expected non-empty channel and spatial dims, got input ", shape_str(x.sizes()));
  return x.dim() == 3 ? x.unsqueeze(0) : x;
}

}  // namespace

namespace {

// Max pooling of x [N, C, H, W] as PyTorch's kernel computes it: the max_pool2d_indices row
// picks each window's element (the first of equal maxima, the last NaN, never the padding:
// for a window of -infs its first element inside the input), and the output is the input read
// at those indices, so the gradient goes where PyTorch's goes. ceil_mode's partial last windows
// are padding past the input's end, which the row never reads.
std::tuple<Tensor, Tensor> MaxPool(const Tensor& x, const std::array<PoolDim, 2>& d) {
  const PoolDim &h = d[0], &w = d[1];
  const int64_t N = x.size(0), C = x.size(1);
  WindowParams window;
  window.kernel = {h.kernel, w.kernel};
  window.stride = {h.stride, w.stride};
  window.padding = {h.pad, h.pad + h.overhang(), w.pad, w.pad + w.overhang()};
  window.dilation = {h.dilation, w.dilation};
  const Tensor indices = max_pool2d_indices(x.detach(), window).view({N, C, h.out * w.out});
  const Tensor out = gather(x.reshape({N, C, h.in * w.in}), 2, indices).view({N, C, h.out, w.out});
  return {out, indices.view({N, C, h.out, w.out})};
}

}  // namespace

int64_t pool_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                         bool ceil_mode) {
  int64_t o = FloorDiv(in + 2 * padding - (dilation * (kernel - 1) + 1) + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (o - 1) * stride >= in + padding) --o;
  return o;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor& input, const Pool2dParams& p) {
  ANVIL_CHECK(!p.divisor_override, "max_pool2d: divisor_override is an avg_pool2d option");
  const Tensor x = Batched(input, "max_pool2d");
  std::optional<exporter::Composite> node;  // MaxPool with its Indices output
  if (exporter::capturing()) node.emplace("MaxPool", std::vector<Tensor>{x}, PoolAttributes(p));
  auto [out, indices] = MaxPool(x, PoolDims(x, p, "max_pool2d"));
  if (node) node->finish(std::vector<Tensor>{out, indices});
  if (input.dim() == 3) return {out.squeeze(0), indices.squeeze(0)};
  return {out, indices};
}

Tensor max_pool2d(const Tensor& input, const Pool2dParams& p) {
  ANVIL_CHECK(!p.divisor_override, "max_pool2d: divisor_override is an avg_pool2d option");
  const Tensor x = Batched(input, "max_pool2d");
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) node.emplace("MaxPool", std::vector<Tensor>{x}, PoolAttributes(p));
  Tensor out = std::get<0>(MaxPool(x, PoolDims(x, p, "max_pool2d")));
  if (node) node->finish(out);
  return input.dim() == 3 ? out.squeeze(0) : out;
}

namespace {

// avg_pool2d's divisor of each window [OH * OW], PyTorch's: the window clipped to the padded
// input (count_include_pad) or to the input, or divisor_override.
Tensor AvgDivisors(const std::array<PoolDim, 2>& d, const Pool2dParams& p, const Tensor& like) {
  const PoolDim &h = d[0], &w = d[1];
  const auto extent = [&](int64_t i, const PoolDim& q) {
    const int64_t start = i * q.stride - q.pad, end = std::min(start + q.kernel, q.in + q.pad);
    return p.count_include_pad ? end - start : std::min(end, q.in) - std::max<int64_t>(start, 0);
  };
  std::vector<double> div(static_cast<size_t>(h.out * w.out));
  for (int64_t i = 0; i < h.out; ++i) {
    for (int64_t j = 0; j < w.out; ++j) {
      div[static_cast<size_t>(i * w.out + j)] = p.divisor_override ? static_cast<double>(*p.divisor_override)
                                                                   : static_cast<double>(extent(i, h) * extent(j, w));
    }
  }
  return tensor(div, {}, TensorOptions(kFloat64).with_device(like.device())).to(like.dtype());
}

}  // namespace

Tensor avg_pool2d(const Tensor& input, const Pool2dParams& p) {
  ANVIL_CHECK(p.dilation[0] == 1 && p.dilation[1] == 1, "avg_pool2d: dilation is a max_pool2d option");
  ANVIL_CHECK(!p.divisor_override || *p.divisor_override != 0, "avg_pool2d: divisor_override must not be zero");
  const Tensor x = Batched(input, "avg_pool2d");
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) {
    if (p.divisor_override) {
      throw exporter::CaptureError("avg_pool2d with divisor_override has no ONNX AveragePool form");
    }
    exporter::Attributes attrs = PoolAttributes(p);
    attrs.emplace_back("count_include_pad", int64_t{p.count_include_pad ? 1 : 0});
    node.emplace("AveragePool", std::vector<Tensor>{x}, std::move(attrs));
  }
  const auto d = PoolDims(x, p, "avg_pool2d");
  const Tensor sums = PoolWindows(x, d, 0.0).sum({2});
  Tensor out = (sums / AvgDivisors(d, p, x)).view({x.size(0), x.size(1), d[0].out, d[1].out});
  if (node) node->finish(out);
  return input.dim() == 3 ? out.squeeze(0) : out;
}

Tensor max_unpool2d(const Tensor& input, const Tensor& indices, const MaxUnpool2dParams& p) {
  ANVIL_CHECK_TYPE(indices.dtype() == kInt64, "max_unpool2d: expected int64 indices, got ", indices.dtype());
  ANVIL_CHECK(indices.sizes() == input.sizes(), "max_unpool2d: expected indices shaped like the input ",
              shape_str(input.sizes()), ", got ", shape_str(indices.sizes()));
  const Tensor x = Batched(input, "max_unpool2d");
  std::array<int64_t, 2> out_hw{};
  for (size_t i = 0; i < 2; ++i) {
    const int64_t k = p.kernel[i], s = p.stride[i] > 0 ? p.stride[i] : k;
    ANVIL_CHECK(k > 0 && p.stride[i] >= 0 && p.padding[i] >= 0, "max_unpool2d: expected a positive kernel and stride");
    out_hw[i] = (x.size(static_cast<int64_t>(i) + 2) - 1) * s - 2 * p.padding[i] + k;
  }
  if (p.output_size) {
    std::vector<int64_t> size = *p.output_size;
    if (size.size() == 4) size.erase(size.begin(), size.begin() + 2);
    ANVIL_CHECK(size.size() == 2, "max_unpool2d: output_size must hold 2 or 4 sizes, got ", size.size());
    for (size_t i = 0; i < 2; ++i) {
      const int64_t s = p.stride[i] > 0 ? p.stride[i] : p.kernel[i];
      ANVIL_CHECK(out_hw[i] - s < size[i] && size[i] < out_hw[i] + s, "max_unpool2d: output_size[", i, "] = ", size[i],
                  " must be between ", out_hw[i] - s, " and ", out_hw[i] + s, " (exclusive)");
      out_hw[i] = size[i];
    }
  }
  ANVIL_CHECK(out_hw[0] > 0 && out_hw[1] > 0, "max_unpool2d: the output size ", out_hw[0], "x", out_hw[1],
              " is not positive");
  const int64_t N = x.size(0), C = x.size(1), plane = out_hw[0] * out_hw[1];
  const Tensor batched_idx = input.dim() == 3 ? indices.unsqueeze(0) : indices;
  std::optional<exporter::Composite> node;
  if (exporter::capturing()) {
    // "output_hw" is for the lowering (MaxUnpool's output_shape input), not an ONNX attribute.
    std::vector<int64_t> k{p.kernel[0], p.kernel[1]}, s, pads{p.padding[0], p.padding[1], p.padding[0], p.padding[1]};
    for (size_t i = 0; i < 2; ++i) s.push_back(p.stride[i] > 0 ? p.stride[i] : p.kernel[i]);
    node.emplace("MaxUnpool", std::vector<Tensor>{x, batched_idx},
                 exporter::Attributes{{"kernel_shape", k},
                                      {"strides", s},
                                      {"pads", pads},
                                      {"output_hw", std::vector<int64_t>{out_hw[0], out_hw[1]}}});
  }
  const Tensor idx = batched_idx.reshape({N, C, -1});
  if (idx.numel() > 0) {
    const int64_t lo = idx.min().item<int64_t>(), hi = idx.max().item<int64_t>();
    ANVIL_CHECK_INDEX(lo >= 0 && hi < plane, "max_unpool2d: index ", lo < 0 ? lo : hi, " is outside the output plane ",
                      out_hw[0], "x", out_hw[1]);
  }
  const Tensor flat = zeros({N, C, plane}, TensorOptions(x.dtype()).with_device(x.device()));
  Tensor out = scatter(flat, 2, idx, x.reshape({N, C, -1})).view({N, C, out_hw[0], out_hw[1]});
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

namespace {
Pool2dParams AsRow(const Pool1dParams& p, const char* who) {
  ANVIL_CHECK(p.kernel > 0 && p.stride >= 0, who, ": expected a positive kernel_size and stride, got ", p.kernel,
              " and ", p.stride);
  Pool2dParams q;
  q.kernel = {1, p.kernel};
  q.stride = {1, p.stride > 0 ? p.stride : p.kernel};
  q.padding = {0, p.padding};
  q.dilation = {1, p.dilation};
  q.ceil_mode = p.ceil_mode;
  q.count_include_pad = p.count_include_pad;
  return q;
}
// [N, C, L] or [C, L] as one row of a 2-D input.
Tensor Row(const Tensor& x, const char* who) {
  ANVIL_CHECK(x.dim() == 2 || x.dim() == 3, who, ": expected input [N, C, L] or [C, L], got ", x.dim(), " dims");
  return x.unsqueeze(-2);
}
}  // namespace

Tensor max_pool1d(const Tensor& input, const Pool1dParams& p) {
  return max_pool2d(Row(input, "max_pool1d"), AsRow(p, "max_pool1d")).squeeze(-2);
}
std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor& input, const Pool1dParams& p) {
  auto [out, indices] = max_pool2d_with_indices(Row(input, "max_pool1d"), AsRow(p, "max_pool1d"));
  return {out.squeeze(-2), indices.squeeze(-2)};  // the row is 0: h * W + w is the position along L
}
Tensor avg_pool1d(const Tensor& input, const Pool1dParams& p) {
  ANVIL_CHECK(p.dilation == 1, "avg_pool1d: dilation is a max_pool1d option");
  return avg_pool2d(Row(input, "avg_pool1d"), AsRow(p, "avg_pool1d")).squeeze(-2);
}
Tensor adaptive_avg_pool1d(const Tensor& input, int64_t output_size) {
  return adaptive_avg_pool2d(Row(input, "adaptive_avg_pool1d"), {1, output_size}).squeeze(-2);
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

MaxPool2d::MaxPool2d(const functional::Pool2dParams& options) : Module("MaxPool2d"), params_(options) {}

std::string MaxPool2d::extra_repr() const {
  std::string s =
      "kernel_size=" + Pair(params_.kernel) + ", stride=" + Pair(params_.stride) + ", padding=" + Pair(params_.padding);
  if (params_.dilation[0] != 1 || params_.dilation[1] != 1) s += ", dilation=" + Pair(params_.dilation);
  return s + (params_.ceil_mode ? ", ceil_mode=True" : "");
}

AvgPool2d::AvgPool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding,
                     bool count_include_pad)
    : Module("AvgPool2d"), params_{kernel, stride, padding, count_include_pad} {}

AvgPool2d::AvgPool2d(const functional::Pool2dParams& options) : Module("AvgPool2d"), params_(options) {}

std::string AvgPool2d::extra_repr() const {
  std::string s =
      "kernel_size=" + Pair(params_.kernel) + ", stride=" + Pair(params_.stride) + ", padding=" + Pair(params_.padding);
  if (params_.ceil_mode) s += ", ceil_mode=True";
  if (!params_.count_include_pad) s += ", count_include_pad=False";
  if (params_.divisor_override) s += ", divisor_override=" + std::to_string(*params_.divisor_override);
  return s;
}

MaxUnpool2d::MaxUnpool2d(std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride, std::array<int64_t, 2> padding)
    : Module("MaxUnpool2d"), params_{kernel, stride, padding, std::nullopt} {}

Tensor MaxUnpool2d::forward(const Tensor&) {
  ANVIL_CHECK(false,
              "MaxUnpool2d: forward needs the indices MaxPool2d::forward_with_indices returned: call "
              "forward(x, indices[, output_size])");
  return Tensor();
}

Tensor MaxUnpool2d::forward(const Tensor& x, const Tensor& indices, const std::optional<std::vector<int64_t>>& size) {
  functional::MaxUnpool2dParams p = params_;
  p.output_size = size;
  return functional::max_unpool2d(x, indices, p);
}

std::string MaxUnpool2d::extra_repr() const {
  return "kernel_size=" + Pair(params_.kernel) + ", stride=" + Pair(params_.stride) +
         ", padding=" + Pair(params_.padding);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + Pair(size_); }

std::string MaxPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(params_.kernel) +
         ", stride=" + std::to_string(params_.stride > 0 ? params_.stride : params_.kernel) +
         ", padding=" + std::to_string(params_.padding) +
         (params_.dilation != 1 ? ", dilation=" + std::to_string(params_.dilation) : "") +
         (params_.ceil_mode ? ", ceil_mode=True" : "");
}
std::string AvgPool1d::extra_repr() const {
  return "kernel_size=" + std::to_string(params_.kernel) +
         ", stride=" + std::to_string(params_.stride > 0 ? params_.stride : params_.kernel) +
         ", padding=" + std::to_string(params_.padding) + (params_.ceil_mode ? ", ceil_mode=True" : "") +
         (params_.count_include_pad ? "" : ", count_include_pad=False");
}
std::string AdaptiveAvgPool1d::extra_repr() const { return "output_size=" + std::to_string(size_); }

}  // namespace anvil::nn
