// The typed arguments of the window rows: Im2Col, Col2Im, Conv2d and its two gradient rows.
// One output-size formula for all of them (inference, both backends, nn's conv2d), where
// each used to write its own.
#pragma once

#include <cstdint>

namespace anvil {

// Output positions of a window sliding over `in` elements padded by `pad_lo` and `pad_hi`:
// floor((in + pads - dilation * (kernel - 1) - 1) / stride) + 1 (PyTorch's Conv2d formula).
// The caller has checked that the dilated kernel fits the padded input.
constexpr int64_t window_output_size(int64_t in, int64_t pad_lo, int64_t pad_hi, int64_t kernel, int64_t stride,
                                     int64_t dilation) {
  return (in + pad_lo + pad_hi - dilation * (kernel - 1) - 1) / stride + 1;
}

struct WindowArgs {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_bottom = 0, pad_left = 0, pad_right = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t height = 0, width = 0;  // the image: im2col's and conv's input, col2im's output
  int64_t groups = 1;             // the convolution rows

  constexpr int64_t out_h() const {
    return window_output_size(height, pad_top, pad_bottom, kernel_h, stride_h, dilation_h);
  }
  constexpr int64_t out_w() const {
    return window_output_size(width, pad_left, pad_right, kernel_w, stride_w, dilation_w);
  }
  constexpr bool padded() const { return pad_top != 0 || pad_bottom != 0 || pad_left != 0 || pad_right != 0; }
};

}  // namespace anvil
