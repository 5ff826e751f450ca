// Predict inputs from files: CSV (one sample per row, numbers only; a header row is skipped;
// with a label column, that column is taken out of each row and returned as the labels),
// JSON (an array of samples, each a number or a nested array), or an image (PNG, JPEG, BMP:
// one sample). CSV/JSON samples are flattened and must have the model's input element
// count. An image is fitted to the input: [C, H, W] models get C channels resized
// (bilinear) to H x W, flat [F] models with F a square get a gray F = s x s image; pixels are
// scaled to [0, 1]. The result is FLOAT32 [N, *input_shape].
#pragma once

#include <string>
#include <vector>

#include "proto/anvil/v1/anvil.pb.h"

namespace anvil::client {

struct InputFile {
  v1::Tensor tensor;
  std::vector<std::string> labels;  // the label column's cell of each sample, if one was named
  // What was done to the input beyond reading it, for the user ("resized 640x480 -> 8x8,
  // bilinear, aspect ratio not kept"); empty when nothing was.
  std::string note;
};

// `label_column`: "" (none), a 0-based column index (negative counts from the end: -1 is the
// last column) or a header name, CSV only. Throws std::runtime_error naming the file,
// line/sample and what was expected.
InputFile read_input_file(const std::string& path, const std::vector<int64_t>& input_shape,
                          const std::string& label_column = "");

}  // namespace anvil::client
