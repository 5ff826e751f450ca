// Predict inputs from files: CSV (one sample per row, numbers only; a header row is skipped),
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

// Throws std::runtime_error naming the file, line/sample and what was expected.
v1::Tensor read_input_file(const std::string& path, const std::vector<int64_t>& input_shape);

}  // namespace anvil::client
