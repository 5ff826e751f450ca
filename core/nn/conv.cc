// pad, conv1d/conv2d and the Conv modules.
//
// NOTE [ Convolution as im2col ]
// The im2col op writes every receptive field of x [N, C, H, W] (zero padding included) as a
// column of [N, C*KH*KW, OH*OW]; a batched matmul with the weights [G, OC/G, C/G*KH*KW]
// then gives [N, G, OC/G, OH*OW], which is already the output layout [N, OC, OH, OW].
// Backward comes from the ops: matmul's rule and im2col's (col2im, which sums overlapping
// windows back into the input plane by plane, deterministically).
#include "core/nn/conv.h"

#include <algorithm>
#include <cmath>

#include "core/nn/init.h"
#include "core/ops/functions.h"
#include "core/ops/window_args.h"
#include "core/util/error.h"

namespace anvil::nn {
namespace functional {
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value) {
  ANVIL_CHECK(pads.size() % 2 == 0 && pads.size() / 2 <= static_cast<size_t>(x.dim()),
              "pad: expected pairs of pads for at most ", x.dim(), " dims, got ", pads.size(), " values");
  Tensor y = x;
  for (size_t k = 0; k < pads.size() / 2; ++k) {
    const int64_t dim = x.dim() - 1 - static_cast<int64_t>(k);
    int64_t before = pads[2 * k], after = pads[2 * k + 1];
    // Negative padding crops, as PyTorch's constant padding does.
    if (before < 0 || after < 0) {
      const int64_t n = y.size(dim);
      const int64_t start = before < 0 ? -before : 0, stop = after < 0 ? n + after : n;
      ANVIL_CHECK(start <= stop, "pad: negative padding (", pads[2 * k], ", ", pads[2 * k + 1],
                  ") crops more than dim ", dim, "'s size ", n);
      y = y.narrow(dim, std::min(start, n), std::max<int64_t>(stop - start, 0));
      before = std::max<int64_t>(before, 0);
      after = std::max<int64_t>(after, 0);
    }
    if (before == 0 && after == 0) continue;
    std::vector<Tensor> parts;
    IntArray side = y.sizes();
    if (before > 0) {
      side[static_cast<size_t>(dim)] = before;
      parts.push_back(full(side, value, TensorOptions(y.dtype()).with_device(y.device())));
    }
    parts.push_back(y);
    if (after > 0) {
      side[static_cast<size_t>(dim)] = after;
      parts.push_back(full(side, value, TensorOptions(y.dtype()).with_device(y.device())));
    }
    y = cat(parts, dim);
  }
  return y;
}

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dParams& p) {
  ANVIL_CHECK(input.dim() == 3 || input.dim() == 4, "conv2d: expected input [N, C, H, W] or [C, H, W], got ",
              shape_str(input.sizes()));
  if (input.dim() == 3) return conv2d(input.unsqueeze(0), weight, bias, p).squeeze(0);
  ANVIL_CHECK(weight.dim() == 4, "conv2d: expected weight [OC, C / groups, KH, KW], got ", shape_str(weight.sizes()));
  const int64_t N = input.size(0), C = input.size(1), G = p.groups;
  const int64_t OC = weight.size(0), KH = weight.size(2), KW = weight.size(3);
  ANVIL_CHECK(G >= 1 && C % G == 0 && OC % G == 0, "conv2d: groups = ", G, " must divide both the input channels (", C,
              ") and the output channels (", OC, ")");
  ANVIL_CHECK(weight.size(1) == C / G, "conv2d: weight ", shape_str(weight.sizes()), " expects ", weight.size(1) * G,
              " input channels, but the input ", shape_str(input.sizes()), " has ", C);
  ANVIL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == OC), "conv2d: expected bias [", OC, "], got ",
              bias.defined() ? shape_str(bias.sizes()) : "");
  const auto [sh, sw] = p.stride;
  const auto [dh, dw] = p.dilation;
  ANVIL_CHECK(sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1, "conv2d: stride and dilation must be positive");
  int64_t top = p.padding[0], bottom = p.padding[0], left = p.padding[1], right = p.padding[1];
  if (p.same) {
    ANVIL_CHECK(sh == 1 && sw == 1, "conv2d: padding 'same' needs stride 1, got stride (", sh, ", ", sw, ")");
    const int64_t th = dh * (KH - 1), tw = dw * (KW - 1);  // odd totals put the extra row below/right
    top = th / 2;
    bottom = th - top;
    left = tw / 2;
    right = tw - left;
  }
  const WindowParams wp{{KH, KW}, {sh, sw}, {top, bottom, left, right}, {dh, dw}};
  const int64_t Hp = input.size(2) + top + bottom, Wp = input.size(3) + left + right;
  ANVIL_CHECK(Hp >= dh * (KH - 1) + 1 && Wp >= dw * (KW - 1) + 1, "conv2d: the (dilated) kernel ", KH, "x", KW,
              " is larger than the padded input ", Hp, "x", Wp);
  const int64_t OH = window_output_size(Hp, 0, 0, KH, sh, dh), OW = window_output_size(Wp, 0, 0, KW, sw, dw);
  const int64_t K = (C / G) * KH * KW;
  if (input.device().is_cpu() && is_floating_point(input.dtype())) {
    // The fused op: columns per image, in cache (16-bit floats widened to float32 inside it,
    // rounded once; under autocast the dispatcher casts the weight to the input's dtype).
    return convolution(input, weight, bias, wp, G);
  }
  // [N, C*KH*KW, L] -> per image and group: W[g] [OC/G, K] @ cols[n, g] [K, L] -> [N, G, OC/G, L].
  const Tensor cols = im2col(input, wp).view({N, G, K, OH * OW});
  Tensor out = matmul(weight.reshape({1, G, OC / G, K}), cols).view({N, OC, OH, OW});
  if (bias.defined()) out = out + bias.view({1, OC, 1, 1});
  return out;
}

Tensor conv1d(const Tensor& input, const Tensor& weight, const Tensor& bias, int64_t stride, int64_t padding,
              int64_t dilation, int64_t groups, bool same) {
  ANVIL_CHECK(input.dim() == 2 || input.dim() == 3, "conv1d: expected input [N, C, L] or [C, L], got ",
              shape_str(input.sizes()));
  ANVIL_CHECK(weight.dim() == 3, "conv1d: expected weight [OC, C / groups, K], got ", shape_str(weight.sizes()));
  Conv2dParams p{{1, stride}, {0, padding}, {1, dilation}, groups, same};
  return conv2d(input.unsqueeze(-2), weight.unsqueeze(2), bias, p).squeeze(-2);
}

}  // namespace functional

// ---- modules ----

namespace {
void InitConv(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const auto [fan_in, fan_out] = init::fan_in_and_fan_out(weight);
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}
}  // namespace

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel, const ConvOptions& o)
    : Module("Conv2d"), in_channels(in_channels), out_channels(out_channels), kernel_(kernel), options_(o) {
  ANVIL_CHECK(in_channels > 0 && out_channels > 0 && kernel[0] > 0 && kernel[1] > 0,
              "Conv2d: expected positive channels and kernel size");
  ANVIL_CHECK(in_channels % o.groups == 0 && out_channels % o.groups == 0, "Conv2d: groups = ", o.groups,
              " must divide in_channels (", in_channels, ") and out_channels (", out_channels, ")");
  weight = empty({out_channels, in_channels / o.groups, kernel[0], kernel[1]});
  if (o.bias) bias = empty({out_channels});
  InitConv(weight, bias);
  register_parameter("weight", weight);
  if (o.bias) register_parameter("bias", bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  functional::Conv2dParams p{options_.stride, options_.padding, options_.dilation, options_.groups, options_.same};
  return functional::conv2d(x, weight, bias, p);
}

std::string Conv2d::extra_repr() const {
  return std::to_string(in_channels) + ", " + std::to_string(out_channels) + ", kernel_size=(" +
         std::to_string(kernel_[0]) + ", " + std::to_string(kernel_[1]) + "), stride=(" +
         std::to_string(options_.stride[0]) + ", " + std::to_string(options_.stride[1]) + ")" +
         (options_.same ? ", padding=same"
                        : ", padding=(" + std::to_string(options_.padding[0]) + ", " +
                              std::to_string(options_.padding[1]) + ")") +
         (options_.groups > 1 ? ", groups=" + std::to_string(options_.groups) : "");
}

Conv1d::Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel, const Conv1dOptions& o)
    : Module("Conv1d"), in_channels(in_channels), out_channels(out_channels), kernel_(kernel), options_(o) {
  ANVIL_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0, "Conv1d: expected positive channels and kernel size");
  ANVIL_CHECK(in_channels % o.groups == 0 && out_channels % o.groups == 0, "Conv1d: groups = ", o.groups,
              " must divide in_channels (", in_channels, ") and out_channels (", out_channels, ")");
  weight = empty({out_channels, in_channels / o.groups, kernel});
  if (o.bias) bias = empty({out_channels});
  InitConv(weight, bias);
  register_parameter("weight", weight);
  if (o.bias) register_parameter("bias", bias);
}

Tensor Conv1d::forward(const Tensor& x) {
  return functional::conv1d(x, weight, bias, options_.stride, options_.padding, options_.dilation, options_.groups,
                            options_.same);
}

std::string Conv1d::extra_repr() const {
  return std::to_string(in_channels) + ", " + std::to_string(out_channels) +
         ", kernel_size=" + std::to_string(kernel_) + ", stride=" + std::to_string(options_.stride);
}

}  // namespace anvil::nn
