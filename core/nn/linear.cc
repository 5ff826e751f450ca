// Linear, Identity, Flatten: see linear.h.
#include "core/nn/linear.h"

#include <cmath>

#include "core/nn/init.h"
#include "core/ops/functions.h"
#include "core/util/error.h"

namespace anvil::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias) : Module("Linear"), in_features(in), out_features(out) {
  ANVIL_CHECK(in > 0 && out > 0, "Linear: expected positive in_features and out_features, got ", in, " and ", out);
  weight = empty({out, in});
  if (with_bias) bias = empty({out});
  reset_parameters();
  register_parameter("weight", weight);
  if (with_bias) register_parameter("bias", bias);
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
    init::uniform_(bias, -bound, bound);
  }
}

void Linear::check_input(const Tensor& x) const {
  ANVIL_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear(", in_features, ", ", out_features,
              "): expected input with last dim ", in_features, ", got shape ", shape_str(x));
}

Tensor Linear::forward(const Tensor& x) {
  check_input(x);
  return linear(x, weight, bias);
}

Tensor Linear::forward_relu(const Tensor& x) {
  check_input(x);
  return bias.defined() ? linear_relu(x, weight, bias) : relu(linear(x, weight, bias));
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

Flatten::Flatten(int64_t start_dim, int64_t end_dim) : Module("Flatten"), start_dim_(start_dim), end_dim_(end_dim) {}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(start_dim_, end_dim_); }

std::string Flatten::extra_repr() const {
  return "start_dim=" + std::to_string(start_dim_) + ", end_dim=" + std::to_string(end_dim_);
}

Unflatten::Unflatten(int64_t dim, IntArray sizes) : Module("Unflatten"), dim_(dim), sizes_(std::move(sizes)) {}

Tensor Unflatten::forward(const Tensor& x) {
  const int64_t d = wrap_dim(dim_, x.dim(), "Unflatten");
  IntArray shape(x.sizes().begin(), x.sizes().begin() + d);
  shape.insert(shape.end(), sizes_.begin(), sizes_.end());
  shape.insert(shape.end(), x.sizes().begin() + d + 1, x.sizes().end());
  return x.reshape(shape);
}

std::string Unflatten::extra_repr() const { return "dim=" + std::to_string(dim_) + ", sizes=" + shape_str(sizes_); }

}  // namespace anvil::nn
