// im2col / col2im / max_pool2d_indices / convolution: the wrappers that check arguments and turn WindowParams into
// the rows' WindowArgs (with the image size, for col2im and for im2col's backward, and the
// convolution's groups).
#include <string>

#include "core/ops/dispatch.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil {
namespace {

WindowArgs Pack(const WindowParams& p, int64_t H, int64_t W, int64_t groups = 1) {
  return {.kernel_h = p.kernel[0],
          .kernel_w = p.kernel[1],
          .stride_h = p.stride[0],
          .stride_w = p.stride[1],
          .pad_top = p.padding[0],
          .pad_bottom = p.padding[1],
          .pad_left = p.padding[2],
          .pad_right = p.padding[3],
          .dilation_h = p.dilation[0],
          .dilation_w = p.dilation[1],
          .height = H,
          .width = W,
          .groups = groups};
}

void Check(const WindowParams& p, int64_t H, int64_t W, const char* who) {
  ANVIL_CHECK(p.kernel[0] > 0 && p.kernel[1] > 0 && p.stride[0] > 0 && p.stride[1] > 0 && p.dilation[0] > 0 &&
                  p.dilation[1] > 0,
              who, ": kernel, stride and dilation must be positive");
  for (int64_t pad : p.padding) ANVIL_CHECK(pad >= 0, who, ": padding must be non-negative, got ", pad);
  const int64_t eh = p.dilation[0] * (p.kernel[0] - 1) + 1, ew = p.dilation[1] * (p.kernel[1] - 1) + 1;
  ANVIL_CHECK(H + p.padding[0] + p.padding[1] >= eh && W + p.padding[2] + p.padding[3] >= ew, who,
              ": the (dilated) kernel ", eh, "x", ew, " does not fit the padded input ",
              H + p.padding[0] + p.padding[1], "x", W + p.padding[2] + p.padding[3]);
}

}  // namespace

Tensor im2col(const Tensor& x, const WindowParams& p) {
  ANVIL_CHECK(x.dim() == 4, "im2col: expected input [N, C, H, W], got ", x.dim(), " dims");
  ANVIL_CHECK(x.is_floating_point(), "im2col: expected a floating-point input, got ", x.dtype());
  Check(p, x.size(2), x.size(3), "im2col");
  return dispatch1(OpId::Im2Col, {x}, Pack(p, x.size(2), x.size(3)));
}

Tensor col2im(const Tensor& cols, std::array<int64_t, 2> output_size, const WindowParams& p) {
  ANVIL_CHECK(cols.dim() == 3, "col2im: expected columns [N, C * KH * KW, L], got ", cols.dim(), " dims");
  ANVIL_CHECK(cols.is_floating_point(), "col2im: expected floating-point columns, got ", cols.dtype());
  Check(p, output_size[0], output_size[1], "col2im");
  ANVIL_CHECK(cols.size(1) % (p.kernel[0] * p.kernel[1]) == 0, "col2im: ", cols.size(1),
              " rows are not a multiple of the kernel's ", p.kernel[0] * p.kernel[1], " positions");
  return dispatch1(OpId::Col2Im, {cols}, Pack(p, output_size[0], output_size[1]));
}

Tensor max_pool2d_indices(const Tensor& x, const WindowParams& p) {
  ANVIL_CHECK(x.dim() == 4, "max_pool2d_indices: expected input [N, C, H, W], got ", x.dim(), " dims");
  ANVIL_CHECK(x.is_floating_point(), "max_pool2d_indices: expected a floating-point input, got ", x.dtype());
  Check(p, x.size(2), x.size(3), "max_pool2d_indices");
  return dispatch1(OpId::MaxPool2dIndices, {x}, Pack(p, x.size(2), x.size(3)));
}

Tensor convolution(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, const WindowParams& p,
                   int64_t groups) {
  const std::vector<Tensor> in = autocast_inputs(OpId::Conv2d, {x_in, weight_in, bias_in});
  const Tensor &x = in[0], &weight = in[1], &bias = in[2];
  ANVIL_CHECK(x.dim() == 4 && weight.dim() == 4,
              "convolution: expected input [N, C, H, W] and weight [OC, C / groups, ", "KH, KW], got ", x.dim(),
              " and ", weight.dim(), " dims");
  ANVIL_CHECK(x.is_floating_point() && weight.dtype() == x.dtype() && (!bias.defined() || bias.dtype() == x.dtype()),
              "convolution: expected floating-point input, weight and bias of one dtype, got ", x.dtype(), " and ",
              weight.dtype());
  ANVIL_CHECK(groups >= 1 && x.size(1) == weight.size(1) * groups && weight.size(0) % groups == 0,
              "convolution: weight ", shape_str(weight.sizes()), " with groups = ", groups, " does not fit input ",
              shape_str(x.sizes()));
  ANVIL_CHECK(weight.size(2) == p.kernel[0] && weight.size(3) == p.kernel[1], "convolution: weight ",
              shape_str(weight.sizes()), " does not match kernel ", p.kernel[0], "x", p.kernel[1]);
  ANVIL_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "convolution: expected bias [",
              weight.size(0), "]");
  Check(p, x.size(2), x.size(3), "convolution");
  const OpAttrs a = Pack(p, x.size(2), x.size(3), groups);
  if (bias.defined()) return dispatch1(OpId::Conv2d, {x, weight, bias}, a);
  return dispatch1(OpId::Conv2d, {x, weight}, a);
}

}  // namespace anvil
