// Parameter initialisation: see init.h.
#include "core/nn/init.h"

#include <cmath>

#include "core/autograd/grad_mode.h"
#include "core/util/error.h"

namespace anvil::nn::init {

std::pair<int64_t, int64_t> fan_in_and_fan_out(const Tensor& w) {
  ANVIL_CHECK(w.dim() >= 2, "init: fan in and fan out need a tensor with at least 2 dims, got ", w.dim());
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

double calculate_gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "sigmoid" || nl.rfind("conv", 0) == 0) return 1.0;
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  if (nl == "selu") return 0.75;
  throw Error("calculate_gain: unknown nonlinearity '" + nl + "'");
}

Tensor& uniform_(Tensor& t, double low, double high) {
  NoGradGuard g;
  return t.uniform_(low, high);
}

Tensor& normal_(Tensor& t, double mean, double std) {
  NoGradGuard g;
  return t.normal_(mean, std);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard g;
  return t.fill_(value);
}

Tensor& zeros_(Tensor& t) { return constant_(t, 0.0); }
Tensor& ones_(Tensor& t) { return constant_(t, 1.0); }

namespace {
double KaimingStd(const Tensor& t, double a, bool fan_in, const std::string& nl) {
  const auto [in, out] = fan_in_and_fan_out(t);
  const int64_t fan = fan_in ? in : out;
  ANVIL_CHECK(fan > 0, "kaiming init: the tensor has no elements along its fan");
  return calculate_gain(nl, a) / std::sqrt(static_cast<double>(fan));
}
}  // namespace

Tensor& kaiming_uniform_(Tensor& t, double a, bool fan_in, const std::string& nl) {
  const double bound = std::sqrt(3.0) * KaimingStd(t, a, fan_in, nl);
  return uniform_(t, -bound, bound);
}

Tensor& kaiming_normal_(Tensor& t, double a, bool fan_in, const std::string& nl) {
  return normal_(t, 0.0, KaimingStd(t, a, fan_in, nl));
}

Tensor& xavier_uniform_(Tensor& t, double gain) {
  const auto [in, out] = fan_in_and_fan_out(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(in + out));
  return uniform_(t, -bound, bound);
}

Tensor& xavier_normal_(Tensor& t, double gain) {
  const auto [in, out] = fan_in_and_fan_out(t);
  return normal_(t, 0.0, gain * std::sqrt(2.0 / static_cast<double>(in + out)));
}

}  // namespace anvil::nn::init
