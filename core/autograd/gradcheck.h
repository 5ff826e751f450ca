// Numerical gradient checking, in float64 only: finite differences in float32 are swamped
// by rounding (an eps of 1e-6 perturbs the 7th significant digit float32 barely has), so
// a float32 input is refused with an explanation instead of giving a meaningless verdict.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/tensor/tensor.h"

namespace anvil::autograd {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  bool raise_exception = true;
};

struct GradcheckResult {
  bool ok = true;
  // Where analytical and numerical gradients disagree most (or agree least well).
  int input_index = -1;
  int output_index = -1;
  int64_t input_element = -1;
  int64_t output_element = -1;
  double analytical = 0, numerical = 0;
  double worst_error = 0;  // |analytical - numerical| - (atol + rtol * |numerical|), max over all
  std::string message;
};

using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Compares d fn(inputs) / d inputs (by backward) against central differences for every
// input that requires grad. Throws (raise_exception) or returns the worst element.
GradcheckResult gradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

// Checks second derivatives: gradcheck of (inputs, v) -> grad(fn(inputs), inputs, v,
// create_graph=true) with random v.
GradcheckResult gradgradcheck(const TensorFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace anvil::autograd
